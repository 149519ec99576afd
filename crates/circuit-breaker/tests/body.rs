//! Holding the ticket until the response body ends, with tokio's paused clock.
#![cfg(feature = "http")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::Frame;
use http_body_util::BodyExt;
use seawall_circuit_breaker::{CircuitBreakerLayer, Handle, State, UntilBodyEndLayer};
use seawall_core::{classify_fn, BoxError, GrpcStatus, Outcome};
use seawall_test_support::{Sent, Stream};
use tokio::sync::mpsc;
use tokio::time::advance;
use tower::{service_fn, Layer, Service, ServiceExt};

const S: Duration = Duration::from_secs(1);

/// Where a [`streaming_server`] hands over the sender of each response body it makes.
type Bodies = mpsc::UnboundedReceiver<mpsc::UnboundedSender<Sent>>;

fn trailers(code: &'static str) -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_static(code));
    t
}

fn message(text: &'static str) -> Sent {
    Ok(Frame::data(Bytes::from_static(text.as_bytes())))
}

/// A gRPC-style server whose every response body is fed by the sender the test
/// receives on `bodies`.
fn streaming_server(
    bodies: mpsc::UnboundedSender<mpsc::UnboundedSender<Sent>>,
) -> impl Service<http::Request<()>, Response = http::Response<Stream>, Error = BoxError, Future: Send>
       + Clone {
    service_fn(move |_req: http::Request<()>| {
        let (tx, rx) = mpsc::unbounded_channel();
        bodies.send(tx).unwrap();
        async move { Ok::<_, BoxError>(http::Response::new(Stream(rx))) }
    })
}

/// `layer` over a [`streaming_server`], with its handle and the receiver of the
/// senders that feed each response body.
#[allow(clippy::type_complexity)] // the server's type can only be named as an `impl`
fn streaming<C: Clone>(
    layer: &UntilBodyEndLayer<C>,
) -> (
    Handle,
    seawall_circuit_breaker::UntilBodyEnd<
        impl Service<
                http::Request<()>,
                Response = http::Response<Stream>,
                Error = BoxError,
                Future: Send,
            > + Clone,
        C,
    >,
    Bodies,
) {
    let (bodies, sent) = mpsc::unbounded_channel();
    (layer.handle(), layer.layer(streaming_server(bodies)), sent)
}

fn layer(consecutive: u32) -> UntilBodyEndLayer<GrpcStatus> {
    CircuitBreakerLayer::builder("quotes-stream")
        .consecutive_failures(consecutive)
        .open_for(10 * S)
        .jitter(0.0)
        .half_open_timeout(2 * S)
        .classifier(GrpcStatus::default())
        .build()
        .unwrap()
        .hold_until_body_end()
}

/// Sends one request through `svc` and returns its response with the sender that
/// feeds the response body.
async fn open_stream<S>(svc: &S, bodies: &mut Bodies) -> (S::Response, mpsc::UnboundedSender<Sent>)
where
    S: Service<http::Request<()>> + Clone,
    S::Error: std::fmt::Debug,
{
    let response = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    (response, bodies.recv().await.unwrap())
}

/// Ends a stream with `code` in its trailers.
fn end_with(tx: mpsc::UnboundedSender<Sent>, code: &'static str) {
    tx.send(Ok(Frame::trailers(trailers(code)))).unwrap();
    drop(tx);
}

fn calls(handle: &Handle) -> (u64, u64, u64) {
    let c = handle.snapshot().counters;
    (c.successes, c.failures, c.cancelled)
}

#[tokio::test(start_paused = true)]
async fn a_stream_is_reported_when_its_body_ends_with_the_status_in_its_trailers() {
    let layer = layer(2);
    let (handle, svc, mut sent) = streaming(&layer);

    // OK in the trailers: a success, reported at the end and not before.
    let (response, tx) = open_stream(&svc, &mut sent).await;
    assert!(response.body().is_holding());
    tx.send(message("quote 1")).unwrap();
    end_with(tx, "0");
    assert_eq!(calls(&handle), (0, 0, 0), "nothing reported before the end");
    let collected = response.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
    assert_eq!(calls(&handle), (1, 0, 0));

    // Two messages, then UNAVAILABLE in the trailers: a failure.
    let (response, tx) = open_stream(&svc, &mut sent).await;
    tx.send(message("quote 1")).unwrap();
    tx.send(message("quote 2")).unwrap();
    end_with(tx, "14");
    let mut body = response.into_body();
    for expected in ["quote 1", "quote 2"] {
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), expected.as_bytes());
        assert_eq!(calls(&handle), (1, 0, 0));
    }
    let frame = body.frame().await.unwrap().unwrap();
    assert!(frame.is_trailers());
    assert_eq!(calls(&handle), (1, 1, 0));
    assert!(!body.is_holding());

    // NOT_FOUND in the trailers is a business answer: a success.
    let (response, tx) = open_stream(&svc, &mut sent).await;
    end_with(tx, "5");
    let _ = response.into_body().collect().await.unwrap();
    assert_eq!(calls(&handle), (2, 1, 0));
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_body_error_is_a_failure_and_a_body_dropped_early_is_cancelled() {
    let layer = layer(1);
    let (handle, svc, mut sent) = streaming(&layer);

    // Dropped after one message: cancelled, not recorded.
    let (response, tx) = open_stream(&svc, &mut sent).await;
    tx.send(message("quote 1")).unwrap();
    let mut body = response.into_body();
    assert!(body.frame().await.unwrap().unwrap().is_data());
    drop(body);
    assert_eq!(calls(&handle), (0, 0, 1));
    assert_eq!(handle.state(), State::Closed);

    // A reset mid-stream: a failure, and one failure opens this breaker.
    let (response, tx) = open_stream(&svc, &mut sent).await;
    tx.send(message("quote 1")).unwrap();
    tx.send(Err(std::io::Error::other("stream reset"))).unwrap();
    assert!(response.into_body().collect().await.is_err());
    assert_eq!(calls(&handle), (0, 1, 1));
    assert_eq!(handle.state(), State::Open);
    let c = handle.snapshot().counters;
    assert_eq!(c.calls, 2);
}

/// A closure classifier holds calls to the body end too, wrapped in `classify_fn`:
/// it judges the headers, and a body error is a failure.
#[tokio::test(start_paused = true)]
async fn a_closure_classifier_holds_a_call_until_its_body_ends() {
    let layer = CircuitBreakerLayer::builder("closure-stream")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(10 * S)
        .classifier(classify_fn(|r: Result<&http::Response<_>, _>| match r {
            Ok(res) if res.status().is_server_error() => Outcome::Failure,
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Failure,
        }))
        .build()
        .unwrap()
        .hold_until_body_end();
    let (handle, svc, mut sent) = streaming(&layer);

    let (response, tx) = open_stream(&svc, &mut sent).await;
    tx.send(message("quote 1")).unwrap();
    // Healthy headers, body still open: nothing is recorded yet.
    assert_eq!(calls(&handle), (0, 0, 0));
    tx.send(Err(std::io::Error::other("stream reset"))).unwrap();
    assert!(response.into_body().collect().await.is_err());
    assert_eq!(calls(&handle), (0, 1, 0));
    assert_eq!(handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn a_trailers_only_failure_is_reported_from_the_headers_at_once() {
    let layer = layer(1);
    let handle = layer.handle();
    let svc = layer.layer(service_fn(|_req: http::Request<()>| async {
        // What a gRPC server sends when it fails before streaming: the status in
        // the headers, an empty body.
        let res = http::Response::builder()
            .header("grpc-status", "14")
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap();
        Ok::<_, BoxError>(res)
    }));
    let response = svc.oneshot(http::Request::new(())).await.unwrap();
    assert!(!response.body().is_holding());
    assert_eq!(calls(&handle), (0, 1, 0));
    assert_eq!(handle.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn a_probe_still_streaming_at_its_half_open_timeout_is_judged_a_success() {
    let layer = layer(1);
    let (handle, svc, mut sent) = streaming(&layer);

    // Trip it with a stream that fails.
    let (response, tx) = open_stream(&svc, &mut sent).await;
    end_with(tx, "14");
    let _ = response.into_body().collect().await.unwrap();
    assert_eq!(handle.state(), State::Open);

    advance(10 * S).await;
    // The probe: its response arrives, then it keeps streaming.
    let (response, tx) = open_stream(&svc, &mut sent).await;
    assert_eq!(handle.state(), State::HalfOpen);
    let mut body = response.into_body();
    tx.send(message("tick 1")).unwrap();
    assert!(body.frame().await.unwrap().unwrap().is_data());
    advance(2 * S - Duration::from_millis(1)).await;
    assert_eq!(handle.state(), State::HalfOpen);
    advance(Duration::from_millis(1)).await;
    // At the timeout: judged by what it has shown, a success.
    assert_eq!(handle.state(), State::Closed);
    // Another caller is let through at once.
    let other = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    drop(other);
    let c = handle.snapshot().counters;
    assert_eq!(
        (c.probe_successes, c.probe_failures, c.probe_timeouts),
        (1, 0, 0)
    );

    // Much later the stream fails: counted once, as stale, and the breaker stays closed.
    advance(60 * S).await;
    tx.send(message("tick 2")).unwrap();
    end_with(tx, "14");
    let _ = body.collect().await.unwrap();
    assert_eq!(handle.state(), State::Closed);
    let c = handle.snapshot().counters;
    assert_eq!((c.probe_successes, c.probe_failures), (1, 0));
    assert_eq!((c.failures, c.stale), (2, 1));
    assert_eq!(c.cancelled, 1, "the other caller dropped its response");
    // The tripping stream, the probe and the other caller, none counted twice.
    assert_eq!(c.calls, 3);
}

#[tokio::test(start_paused = true)]
async fn a_probe_waiting_for_its_response_at_the_timeout_still_fails() {
    let layer = layer(1);
    let handle = layer.handle();
    let (release, wait) = tokio::sync::watch::channel(false);
    let svc = layer.layer(service_fn(move |_req: http::Request<()>| {
        let mut wait = wait.clone();
        async move {
            wait.wait_for(|go| *go).await.unwrap();
            Err::<http::Response<http_body_util::Empty<Bytes>>, BoxError>("down".into())
        }
    }));
    let _ = release.send(true);
    assert!(svc.clone().oneshot(http::Request::new(())).await.is_err());
    assert_eq!(handle.state(), State::Open);
    let _ = release.send(false);
    advance(10 * S).await;
    let mut probe = tokio_test::task::spawn(svc.clone().oneshot(http::Request::new(())));
    assert!(probe.poll().is_pending());
    advance(2 * S).await;
    assert_eq!(handle.state(), State::Open);
    // The next caller makes the lazy transition, and is turned away.
    assert!(svc.clone().oneshot(http::Request::new(())).await.is_err());
    assert_eq!(handle.snapshot().counters.probe_timeouts, 1);
}

/// The request's deadline bounds the body: a stream still running when it passes
/// is cut there, with `DeadlineExceeded` in its error, and recorded as a timeout
/// failure; the stream to the dependency is closed.
#[tokio::test(start_paused = true)]
async fn a_body_still_streaming_at_the_requests_deadline_is_a_timeout_failure() {
    use seawall_core::{find_rejection, DeadlineLayer, RejectionKind};
    let layer = layer(1);
    let (handle, svc, mut sent) = streaming(&layer);
    let svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .layer(svc);

    let (response, tx) = open_stream(&svc, &mut sent).await;
    tx.send(message("quote 1")).unwrap();
    let mut body = response.into_body();
    assert!(body.frame().await.unwrap().unwrap().is_data());
    assert_eq!(calls(&handle), (0, 0, 0), "nothing reported before the end");
    // The server sends nothing more: the next read is cut at the deadline.
    let started = tokio::time::Instant::now();
    let error = body.frame().await.unwrap().unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_millis(300));
    assert_eq!(
        find_rejection(&*error).map(|r| r.kind()),
        Some(RejectionKind::DeadlineExceeded)
    );
    assert!(body.frame().await.is_none(), "the body ended at the cut");
    assert!(
        tx.send(message("late")).is_err(),
        "the dependency's stream is closed"
    );
    let c = handle.snapshot().counters;
    assert_eq!(
        (c.successes, c.failures, c.timeouts, c.cancelled),
        (0, 1, 1, 0)
    );
    assert_eq!(handle.state(), State::Open);
}

/// A body that ends before the deadline is judged by its end, as without one;
/// without a current deadline a body may stream as long as it likes.
#[tokio::test(start_paused = true)]
async fn a_body_ending_in_time_or_without_a_deadline_is_judged_by_its_end() {
    use seawall_core::DeadlineLayer;
    let layer = layer(1);
    let (handle, svc, mut sent) = streaming(&layer);
    let bounded = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .layer(svc.clone());

    let (response, tx) = open_stream(&bounded, &mut sent).await;
    tx.send(message("quote 1")).unwrap();
    advance(Duration::from_millis(299)).await;
    end_with(tx, "0");
    assert!(response.into_body().collect().await.is_ok());
    assert_eq!(calls(&handle), (1, 0, 0));

    let (response, tx) = open_stream(&svc, &mut sent).await;
    advance(Duration::from_secs(3600)).await;
    end_with(tx, "0");
    assert!(response.into_body().collect().await.is_ok());
    let c = handle.snapshot().counters;
    assert_eq!((c.successes, c.failures, c.timeouts), (2, 0, 0));
}

/// The keyed breaker holds each call until its body ends too, and reports it to
/// its key's breaker: one key's failing stream opens that key only.
#[tokio::test(start_paused = true)]
async fn a_keyed_breaker_holds_each_call_until_its_body_ends() {
    let layer = CircuitBreakerLayer::builder("prices")
        .consecutive_failures(1)
        .open_for(10 * S)
        .jitter(0.0)
        .classifier(GrpcStatus::default())
        .keyed(|req: &http::Request<()>| req.uri().path().to_owned())
        .build()
        .unwrap()
        .hold_until_body_end();
    let handle = layer.handle();
    let (bodies, mut sent) = mpsc::unbounded_channel();
    let svc = layer.layer(streaming_server(bodies));
    let call = |path: &'static str| {
        let svc = svc.clone();
        async move {
            let req = http::Request::get(path).body(()).unwrap();
            svc.oneshot(req).await.unwrap()
        }
    };
    let counts = |key: &str| {
        let c = handle.get(&key.to_owned()).unwrap().snapshot().counters;
        (c.successes, c.failures, c.cancelled)
    };

    // Key /a: healthy headers, UNAVAILABLE in the trailers.
    let response = call("/a").await;
    let tx = sent.recv().await.unwrap();
    assert!(response.body().is_holding());
    assert_eq!(counts("/a"), (0, 0, 0), "nothing reported before the end");
    end_with(tx, "14");
    let _ = response.into_body().collect().await.unwrap();
    assert_eq!(counts("/a"), (0, 1, 0));
    assert_eq!(handle.get(&"/a".to_owned()).unwrap().state(), State::Open);

    // Key /b: one stream ends OK, another is dropped by the caller.
    let response = call("/b").await;
    end_with(sent.recv().await.unwrap(), "0");
    let _ = response.into_body().collect().await.unwrap();
    let response = call("/b").await;
    let _tx = sent.recv().await.unwrap();
    drop(response);
    assert_eq!(counts("/b"), (1, 0, 1));
    assert_eq!(handle.get(&"/b".to_owned()).unwrap().state(), State::Closed);
    assert_eq!(handle.open_keys(), ["/a".to_owned()]);
}
