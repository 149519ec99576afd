//! The HTTP modes: the `Either` body, and the server mode that always answers.
#![cfg(feature = "http")]
#![allow(clippy::unwrap_used)] // helpers outside `#[test]` functions too

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Response, StatusCode};
use http_body::Body as _;
use http_body_util::{BodyExt, Full};
use seawall_core::http::{Either, UNAVAILABLE_BODY};
use seawall_core::{BoxError, BulkheadFull, CircuitOpen, HttpStatus};
use seawall_fallback::http::{served, EitherResponse, FallbackBody, FAILURE_BODY};
use seawall_fallback::{
    FallbackLayer, FallbackRequest, RejectionKind, Rejections, Trigger, Unavailable,
};
use tower::{service_fn, Layer, Service, ServiceExt};

type Req = http::Request<()>;
type Body = Full<Bytes>;

fn req() -> Req {
    http::Request::new(())
}

fn open() -> BoxError {
    Box::new(CircuitOpen::new(
        "freight-supplier".into(),
        Duration::from_millis(1200),
    ))
}

fn failing(
    make: fn() -> BoxError,
) -> impl Service<Req, Response = Response<Body>, Error = BoxError, Future: Send> + Clone + Send + Sync
{
    service_fn(move |_r: Req| async move { Err::<Response<Body>, BoxError>(make()) })
}

fn answering(
    status: u16,
) -> impl Service<Req, Response = Response<Body>, Error = BoxError> + Clone {
    service_fn(move |_r: Req| async move {
        Ok::<_, BoxError>(
            Response::builder()
                .status(status)
                .body(Full::from("from supplier"))
                .unwrap(),
        )
    })
}

fn fallback_page() -> Response<Body> {
    Response::new(Full::from("cached quote"))
}

async fn text<B, FB>(res: EitherResponse<B, FB>) -> String
where
    Either<B, FallbackBody<FB>>: http_body::Body<Data = Bytes, Error = BoxError>,
{
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn a_rejection_that_passes_through_becomes_503_with_retry_after_and_nothing_internal() {
    let layer = FallbackLayer::builder("freight")
        .on_rejection(RejectionKind::BulkheadFull)
        .value(fallback_page())
        .http_server()
        .build()
        .unwrap();
    let res: Result<EitherResponse<Body, Body>, Infallible> =
        layer.layer(failing(open)).oneshot(req()).await;
    let res = res.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()[header::RETRY_AFTER], "2"); // 1.2 s, rounded up
    assert!(served(&res).is_none());
    let body = text(res).await;
    assert_eq!(body, UNAVAILABLE_BODY);
    assert!(!body.contains("freight") && !body.contains("circuit"));
}

#[tokio::test]
async fn a_served_fallback_is_the_right_body_marked_and_the_primary_the_left_untouched() {
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .on_failure(HttpStatus::default())
        .value(fallback_page())
        .http_server()
        .build()
        .unwrap();
    let res = layer.layer(failing(open)).oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(matches!(res.body(), Either::Right(_)));
    let marker = served(&res).unwrap().clone();
    assert_eq!(
        marker.trigger(),
        Trigger::Rejected(RejectionKind::CircuitOpen)
    );
    assert_eq!((marker.fallback(), marker.step()), ("freight", "value"));
    // The marker travels in the body: nothing was inserted into the extensions.
    assert!(res.extensions().is_empty());
    assert_eq!(text(res).await, "cached quote");

    // A 503 answer fires it too; a 404 ("no quote for that destination") does not.
    let res = layer.layer(answering(503)).oneshot(req()).await.unwrap();
    assert_eq!(served(&res).unwrap().trigger(), Trigger::FailedResponse);
    let res = layer.layer(answering(404)).oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert!(matches!(res.body(), Either::Left(_)));
    assert!(served(&res).is_none());
    assert_eq!(text(res).await, "from supplier");
}

#[tokio::test]
async fn an_exhausted_chain_is_503_with_the_retry_after_of_the_rejection_that_fired_it() {
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .step("cache", Duration::from_millis(100), |_r| async move {
            Err::<Response<Body>, BoxError>("cache at 10.0.0.7 refused".into())
        })
        .http_server()
        .build()
        .unwrap();
    let res = layer.layer(failing(open)).oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()[header::RETRY_AFTER], "2");
    let body = text(res).await;
    assert_eq!(body, UNAVAILABLE_BODY);
    assert!(!body.contains("10.0.0.7"));
    assert_eq!(layer.handle().snapshot().exhausted, 1);
}

#[tokio::test]
async fn an_explicit_no_quote_renders_the_unavailable_response() {
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .unavailable::<Response<Body>>("no valid freight quote")
        .http_server()
        .unavailable_response(
            Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Bytes::from_static(br#"{"quote":null}"#))
                .unwrap(),
        )
        .build()
        .unwrap();
    let res = layer.layer(failing(open)).oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()[header::CONTENT_TYPE], "application/json");
    assert_eq!(res.headers()[header::RETRY_AFTER], "2");
    let answer = res.extensions().get::<Unavailable>().unwrap();
    assert_eq!(answer.step(), Some("unavailable"));
    assert_eq!(text(res).await, r#"{"quote":null}"#);

    // Without a rejection behind it there is no Retry-After; the default body is generic.
    let layer = FallbackLayer::builder("freight")
        .on_failure(HttpStatus::default())
        .unavailable::<Response<Body>>("no valid freight quote")
        .http_server()
        .build()
        .unwrap();
    let res = layer.layer(answering(500)).oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(res.headers().get(header::RETRY_AFTER).is_none());
    let body = text(res).await;
    assert_eq!(body, UNAVAILABLE_BODY);
    assert!(!body.contains("quote"));
}

#[tokio::test]
async fn other_errors_render_the_failure_response_without_internal_text() {
    let layer = FallbackLayer::builder("freight")
        .on_rejection(RejectionKind::CircuitOpen)
        .value(fallback_page())
        .http_server()
        .build()
        .unwrap();
    let secret = || -> BoxError { "db password rejected for user freight".into() };
    let res = layer.layer(failing(secret)).oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(res.headers().get(header::RETRY_AFTER).is_none());
    assert!(served(&res).is_none()); // rendered, not served
    let body = text(res).await;
    assert_eq!(body, FAILURE_BODY);
    assert!(!body.contains("password"));

    let layer = FallbackLayer::builder("freight")
        .on_rejection(RejectionKind::CircuitOpen)
        .value(fallback_page())
        .http_server()
        .failure_response(
            Response::builder()
                .status(StatusCode::BAD_GATEWAY)
                .body(Bytes::from_static(b"upstream error\n"))
                .unwrap(),
        )
        .build()
        .unwrap();
    let res = layer.layer(failing(secret)).oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(text(res).await, "upstream error\n");
}

#[tokio::test]
async fn a_poll_ready_error_is_held_and_answered_with_a_response() {
    let (mock, mut inner) = tower_test::mock::pair::<Req, Response<Body>>();
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .value(fallback_page())
        .http_server()
        .build()
        .unwrap();
    let mut svc = layer.layer(mock);
    inner.send_error(BulkheadFull::new("pool".into()));
    let ready: Result<_, Infallible> = svc.ready().await.map(|_| ());
    assert!(ready.is_ok());
    let res = svc.call(req()).await.unwrap();
    assert_eq!(
        served(&res).unwrap().trigger(),
        Trigger::Rejected(RejectionKind::BulkheadFull)
    );
}

#[tokio::test]
async fn the_either_body_mode_keeps_errors_as_errors() {
    let layer = FallbackLayer::builder("freight")
        .on_rejection(RejectionKind::CircuitOpen)
        .sync_fn(|r: FallbackRequest<()>| {
            Ok::<_, BoxError>(Response::new(format!("fallback for {}", r.trigger())))
        })
        .either_body()
        .build()
        .unwrap();
    let res = layer.layer(failing(open)).oneshot(req()).await.unwrap();
    match res.body() {
        Either::Right(body) => {
            assert_eq!(body.get_ref(), "fallback for circuit_open");
            assert_eq!(body.served().map(|s| s.step()), Some("fn"));
        }
        Either::Left(_) => panic!("expected the fallback's body"),
    }
    assert!(res.extensions().is_empty());
    let full = || -> BoxError { Box::new(BulkheadFull::new("pool".into())) };
    let err = layer.layer(failing(full)).oneshot(req()).await.unwrap_err();
    assert!(err.is::<BulkheadFull>());
}

#[tokio::test]
async fn the_fallback_body_reads_as_the_fallbacks_own_body() {
    let layer = FallbackLayer::builder("freight")
        .on_rejection(RejectionKind::CircuitOpen)
        .value(fallback_page())
        .either_body()
        .build()
        .unwrap();
    let res = layer.layer(failing(open)).oneshot(req()).await.unwrap();
    let Either::Right(body) = res.into_body() else {
        panic!("expected the fallback's body");
    };
    assert_eq!(body.size_hint().exact(), Some("cached quote".len() as u64));
    assert!(!body.is_end_stream());
    assert_eq!(body.served().map(|s| s.fallback()), Some("freight"));
    let bytes = body.collect().await.unwrap().to_bytes();
    assert_eq!(&bytes[..], b"cached quote");
}

#[test]
fn the_server_mode_is_an_infallible_clone_send_sync_service() {
    fn assert_axum_compatible<S>(_: &S)
    where
        S: Service<Req, Error = Infallible> + Clone + Send + Sync + 'static,
        S::Future: Send + 'static,
    {
    }
    let layer = FallbackLayer::builder("freight")
        .capture(|r: &Req| r.uri().path().to_owned())
        .on_rejections(Rejections::ALL)
        .step("cache", Duration::from_millis(100), |_r| async move {
            Ok::<_, BoxError>(fallback_page())
        })
        .http_server()
        .build()
        .unwrap();
    assert_axum_compatible(&layer.layer(failing(open)));
}
