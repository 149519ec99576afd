//! Recording a level's outcome when its response body ends, with tokio's paused clock.
#![cfg(feature = "http")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::Frame;
use http_body_util::BodyExt;
use seawall_core::{AdmissionAsFailure, BoxError, GrpcStatus};
use seawall_degradation::{
    DegradationLayer, Handle, NoExtensions, UntilBodyEnd, UntilBodyEndLayer,
};
use seawall_test_support::{Sent, Stream};
use tokio::sync::mpsc;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, Layer, Service, ServiceExt};

type Req = http::Request<()>;
type Res = http::Response<Stream>;

fn trailers(code: &'static str) -> Sent {
    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_static(code));
    Ok(Frame::trailers(t))
}

fn message(text: &'static str) -> Sent {
    Ok(Frame::data(Bytes::from_static(text.as_bytes())))
}

/// The best level: every response body is fed by a sender handed to the test.
fn streaming(
    feeds: mpsc::UnboundedSender<mpsc::UnboundedSender<Sent>>,
) -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone {
    service_fn(move |_req: Req| {
        let (tx, rx) = mpsc::unbounded_channel();
        feeds.send(tx).unwrap();
        async move { Ok::<_, BoxError>(http::Response::new(Stream(rx))) }
    })
}

/// The lower level: a short answer, already complete.
fn cached(
) -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone + Send + Sync {
    service_fn(|_req: Req| async {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(message("cached")).unwrap();
        Ok::<_, BoxError>(http::Response::new(Stream(rx)))
    })
}

fn layer(failures: u32) -> UntilBodyEndLayer<Req, Stream, Classifier, NoExtensions> {
    DegradationLayer::builder("prices")
        .inner_level("live")
        .level("cached", cached())
        .consecutive_failures(failures)
        .classifier(AdmissionAsFailure(GrpcStatus::default()))
        .build()
        .unwrap()
        .hold_until_body_end()
}

type Classifier = AdmissionAsFailure<GrpcStatus>;
type Feeds = mpsc::UnboundedReceiver<mpsc::UnboundedSender<Sent>>;

/// The layer's service over the streaming level (erased, so it can be named).
type Streamed =
    UntilBodyEnd<BoxCloneSyncService<Req, Res, BoxError>, Req, Stream, Classifier, NoExtensions>;

/// The layer (falling after `failures`) over the streaming level: the service,
/// and the senders of the bodies it answers with, one per request.
fn streamed(failures: u32) -> (Streamed, Feeds) {
    let (feeds, fed) = mpsc::unbounded_channel();
    let live = BoxCloneSyncService::new(streaming(feeds));
    (layer(failures).layer(live), fed)
}

/// One request: its response, and the sender that writes its body.
async fn request<S>(svc: &S, fed: &mut Feeds) -> (S::Response, mpsc::UnboundedSender<Sent>)
where
    S: Service<Req, Error = BoxError> + Clone,
{
    let response = svc.clone().oneshot(Req::new(())).await.unwrap();
    (response, fed.recv().await.unwrap())
}

fn level(handle: &Handle) -> (String, u32) {
    let s = handle.snapshot();
    (s.level_name, s.state.failures)
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_in_its_trailers_is_a_failure_of_its_level() {
    let (svc, mut fed) = streamed(2);
    let handle = svc.handle();

    // OK in the trailers: nothing counted against the level.
    let (response, tx) = request(&svc, &mut fed).await;
    assert!(response.body().is_holding());
    tx.send(message("price 1")).unwrap();
    tx.send(trailers("0")).unwrap();
    drop(tx);
    let collected = response.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
    assert_eq!(level(&handle), ("live".into(), 0));

    // Two messages, then UNAVAILABLE in the trailers: a failure, counted at the end.
    for round in 1..=2 {
        let (response, tx) = request(&svc, &mut fed).await;
        tx.send(message("price 1")).unwrap();
        tx.send(message("price 2")).unwrap();
        tx.send(trailers("14")).unwrap();
        let mut body = response.into_body();
        for _ in 0..2 {
            assert!(body.frame().await.unwrap().unwrap().is_data());
        }
        assert_eq!(
            level(&handle),
            ("live".into(), round - 1),
            "not before the end"
        );
        assert!(body.frame().await.unwrap().unwrap().is_trailers());
        assert!(!body.is_holding());
    }
    // Two failures in a row: the level falls.
    assert_eq!(level(&handle).0, "cached");
    let response = svc.clone().oneshot(Req::new(())).await.unwrap();
    let frame = response.into_body().frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "cached".as_bytes());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_stream_records_nothing_and_a_body_error_is_a_failure() {
    let (svc, mut fed) = streamed(1);
    let handle = svc.handle();

    let (response, tx) = request(&svc, &mut fed).await;
    tx.send(message("price 1")).unwrap();
    let mut body = response.into_body();
    assert!(body.frame().await.unwrap().unwrap().is_data());
    drop(body);
    assert_eq!(level(&handle), ("live".into(), 0));

    let (response, tx) = request(&svc, &mut fed).await;
    tx.send(Err(std::io::Error::other("stream reset"))).unwrap();
    assert!(response.into_body().collect().await.is_err());
    assert_eq!(level(&handle).0, "cached");
}

#[tokio::test(start_paused = true)]
async fn a_trailers_only_failure_is_recorded_from_the_headers_at_once() {
    let layer = layer(1);
    let handle = layer.handle();
    let svc = layer.layer(service_fn(|_req: Req| async {
        let (_tx, rx) = mpsc::unbounded_channel();
        let res = http::Response::builder()
            .header("grpc-status", "14")
            .body(Stream(rx))
            .unwrap();
        Ok::<_, BoxError>(res)
    }));
    let response = svc.oneshot(Req::new(())).await.unwrap();
    // Recorded with the response, while its body is still open.
    assert_eq!(level(&handle).0, "cached");
    drop(response);
    assert_eq!(level(&handle).0, "cached");
}
