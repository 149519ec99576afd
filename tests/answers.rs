//! One table decides how every rejection is answered, over HTTP and gRPC (see
//! `seawall::core::http`'s docs and the README). One test per row, each rejection
//! produced by a real layer where one produces it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, Forced};
use seawall::core::grpc::error_grpc_response;
use seawall::core::http::error_response;
use seawall::core::{
    find_rejection, BoxError, CircuitOpen, DeadlineLayer, FallbacksExhausted, OpenCause,
    RejectionKind, StepFailure,
};
use tokio::time::advance;
use tower::{service_fn, Layer, Service, ServiceExt};

const RETRY_AFTER: &str = "retry-after";
const PUSHBACK: &str = "grpc-retry-pushback-ms";

/// What the two renderings of `error` say: HTTP status and `Retry-After`, gRPC status
/// code and pushback.
fn answers(error: &BoxError) -> (u16, Option<String>, String, Option<String>) {
    let http = error_response(&**error);
    let grpc = error_grpc_response::<()>(&**error);
    let header =
        |h: &http::HeaderMap, name: &str| h.get(name).map(|v| v.to_str().unwrap().to_owned());
    (
        http.status().as_u16(),
        header(http.headers(), RETRY_AFTER),
        header(grpc.headers(), "grpc-status").unwrap(),
        header(grpc.headers(), PUSHBACK),
    )
}

fn failing() -> impl Service<String, Response = String, Error = BoxError> + Clone {
    service_fn(|_: String| async { Err::<String, BoxError>("connection refused".into()) })
}

fn hanging() -> impl Service<String, Response = String, Error = BoxError> + Clone {
    service_fn(|_: String| std::future::pending::<Result<String, BoxError>>())
}

#[tokio::test(start_paused = true)]
async fn circuit_open_is_503_with_the_remaining_interval_rounded_up() {
    let layer = CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(Duration::from_secs(10))
        .build()
        .unwrap();
    let svc = layer.layer(failing());
    svc.clone().oneshot("q".into()).await.unwrap_err();
    advance(Duration::from_millis(2500)).await;
    let err = svc.oneshot("q".into()).await.unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().open_cause(),
        Some(OpenCause::Open)
    );
    // 7.5 s remain: 8 whole seconds, 7500 ms; UNAVAILABLE is 14.
    assert_eq!(
        answers(&err),
        (503, Some("8".into()), "14".into(), Some("7500".into()))
    );
}

#[tokio::test(start_paused = true)]
async fn probe_slots_full_is_503_with_what_remains_of_the_oldest_probe() {
    let layer = CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(Duration::from_secs(10))
        .half_open_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let handle = layer.handle();
    let tripped = layer.clone().layer(failing());
    tripped.oneshot("q".into()).await.unwrap_err();
    advance(Duration::from_secs(10)).await;
    // The probe hangs; one second later another caller comes.
    let mut svc = layer.layer(hanging());
    svc.ready().await.unwrap();
    let _probe = tokio_test::task::spawn(svc.call("probe".into()));
    assert_eq!(handle.snapshot().probes_in_flight, 1);
    advance(Duration::from_secs(1)).await;
    let err = svc
        .ready()
        .await
        .unwrap()
        .call("q".into())
        .await
        .unwrap_err();
    let rejection = find_rejection(&*err).unwrap();
    assert_eq!(rejection.open_cause(), Some(OpenCause::ProbeSlotsFull));
    assert_eq!(
        answers(&err),
        (503, Some("4".into()), "14".into(), Some("4000".into()))
    );
}

#[tokio::test(start_paused = true)]
async fn forced_open_is_503_without_a_retry_time() {
    let layer = CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .build()
        .unwrap();
    layer.handle().force(Forced::Open);
    let err = layer
        .layer(failing())
        .oneshot("q".into())
        .await
        .unwrap_err();
    let rejection = find_rejection(&*err).unwrap();
    assert_eq!(rejection.open_cause(), Some(OpenCause::ForcedOpen));
    assert_eq!(rejection.retry_after(), None);
    assert_eq!(answers(&err), (503, None, "14".into(), None));
}

#[tokio::test(start_paused = true)]
async fn bulkhead_full_and_wait_timed_out_are_503_resource_exhausted_without_retry_time() {
    let layer = BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .max_queue(1)
        .max_wait(Duration::from_millis(20))
        .build()
        .unwrap();
    let svc = layer.layer(hanging());
    let mut busy = tokio_test::task::spawn(svc.clone().oneshot("busy".into()));
    tokio_test::assert_pending!(busy.poll());
    let mut waiting = tokio_test::task::spawn(svc.clone().oneshot("waiting".into()));
    tokio_test::assert_pending!(waiting.poll());

    let full = svc.clone().oneshot("full".into()).await.unwrap_err();
    let rejection = find_rejection(&*full).unwrap();
    assert_eq!(rejection.kind(), RejectionKind::BulkheadFull);
    assert_eq!((rejection.active(), rejection.queued()), (Some(1), Some(1)));
    // RESOURCE_EXHAUSTED is 8.
    assert_eq!(answers(&full), (503, None, "8".into(), None));

    advance(Duration::from_millis(20)).await;
    let timed_out = tokio_test::assert_ready!(waiting.poll()).unwrap_err();
    let rejection = find_rejection(&*timed_out).unwrap();
    assert_eq!(rejection.kind(), RejectionKind::BulkheadTimeout);
    assert_eq!(rejection.waited(), Some(Duration::from_millis(20)));
    assert_eq!(answers(&timed_out), (503, None, "8".into(), None));
}

#[tokio::test(start_paused = true)]
async fn deadline_exceeded_is_504_and_deadline_exceeded() {
    let svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .layer(hanging());
    let err = svc.oneshot("q".into()).await.unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::DeadlineExceeded
    );
    // 504 Gateway Timeout; DEADLINE_EXCEEDED is 4, which clients do not retry.
    assert_eq!(answers(&err), (504, None, "4".into(), None));
}

#[test]
fn fallbacks_exhausted_is_503_with_the_underlying_rejections_retry_time() {
    let steps = vec![
        StepFailure::new("cache".into(), "cache miss".into()),
        StepFailure::new(
            "replica".into(),
            Box::new(CircuitOpen::new("replica".into(), Duration::from_secs(3))),
        ),
    ];
    let err: BoxError = Box::new(FallbacksExhausted::new("freight".into(), steps));
    assert_eq!(
        answers(&err),
        (503, Some("3".into()), "14".into(), Some("3000".into()))
    );
    // Without a step rejection that knows a time, no retry time is promised.
    let steps = vec![StepFailure::new("cache".into(), "cache miss".into())];
    let err: BoxError = Box::new(FallbacksExhausted::new("freight".into(), steps));
    assert_eq!(answers(&err), (503, None, "14".into(), None));
}
