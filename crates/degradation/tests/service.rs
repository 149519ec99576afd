//! The service adapter, driven by hand with paused time and mock levels.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall_core::{BulkheadFull, CircuitOpen};
use seawall_degradation::{
    Cause, CurrentLevel, DefaultClassifier, Degradation, DegradationLayer, Fixed, Handle,
    NoExtensions, ResponseFuture, ServedBy,
};
use tokio_test::{assert_pending, assert_ready, assert_ready_err, assert_ready_ok, task};
use tower::{Layer, Service, ServiceExt};
use tower_test::mock;

type Req = &'static str;
type Res = String;
type Mock = mock::Mock<Req, Res>;
type MockHandle = mock::Handle<Req, Res>;
type Svc = Degradation<Mock, Req, Res, DefaultClassifier, NoExtensions>;
type Fut = ResponseFuture<Mock, Req, Res, DefaultClassifier, NoExtensions>;

/// A probe decision the test controls: the next samples are `value`.
#[derive(Clone)]
struct Dice(Arc<AtomicU64>);

impl Dice {
    fn new() -> Self {
        // Never probes until told otherwise.
        Self(Arc::new(AtomicU64::new(0.999f64.to_bits())))
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
    fn source(&self) -> impl FnMut() -> f64 + Send + 'static {
        let cell = self.0.clone();
        move || f64::from_bits(cell.load(Ordering::Relaxed))
    }
}

struct Rig {
    svc: Svc,
    full: MockHandle,
    reduced: MockHandle,
    handle: Handle,
    dice: Dice,
}

/// full (mock) → reduced (mock) → message (fixed answer); the defaults.
fn rig() -> Rig {
    let (full_svc, full) = mock::pair::<Req, Res>();
    let (reduced_svc, reduced) = mock::pair::<Req, Res>();
    let dice = Dice::new();
    let layer = DegradationLayer::builder("chat")
        .level("reduced", reduced_svc)
        .level("message", Fixed::new("try again later".to_owned()))
        .random(dice.source())
        .build()
        .unwrap();
    let handle = layer.handle();
    Rig {
        svc: layer.layer(full_svc),
        full,
        reduced,
        handle,
        dice,
    }
}

/// Calls the service once and lets the request reach its level.
async fn send(svc: &mut Svc, req: Req) -> task::Spawn<Fut> {
    svc.ready().await.unwrap();
    let mut fut = task::spawn(svc.call(req));
    assert_pending!(fut.poll());
    fut
}

/// Sends `req`, which must reach `level` as it is, and has `level` answer
/// `answer`: what the caller got.
async fn answered(svc: &mut Svc, level: &mut MockHandle, req: Req, answer: &str) -> Res {
    let mut fut = send(svc, req).await;
    let (seen, reply) = level.next_request().await.unwrap();
    assert_eq!(seen, req);
    reply.send_response(answer.to_owned());
    assert_ready_ok!(fut.poll())
}

/// Makes the best level fail `n` times.
async fn fail_full(r: &mut Rig, n: usize) {
    for _ in 0..n {
        let mut fut = send(&mut r.svc, "hello").await;
        let (_, reply) = r.full.next_request().await.unwrap();
        reply.send_error("model overloaded");
        assert_ready_err!(fut.poll());
    }
}

#[tokio::test(start_paused = true)]
async fn requests_go_to_the_level_in_force() {
    let mut r = rig();
    assert_eq!(
        answered(&mut r.svc, &mut r.full, "hello", "full answer").await,
        "full answer"
    );

    fail_full(&mut r, 5).await;
    assert_eq!(r.handle.level().index, 1);
    assert_eq!(&*r.handle.level().name, "reduced");

    assert_eq!(
        answered(&mut r.svc, &mut r.reduced, "again", "short answer").await,
        "short answer"
    );
    assert!(
        r.full.poll_request().is_pending(),
        "the best level saw nothing"
    );

    // Down to the fixed answer; it serves without any mock.
    r.handle.force("message").unwrap();
    let answer = r.svc.ready().await.unwrap().call("hi").await.unwrap();
    assert_eq!(answer, "try again later");
}

#[tokio::test(start_paused = true)]
async fn a_failed_request_gets_its_failure_and_is_not_served_again_below() {
    let mut r = rig();
    let mut fut = send(&mut r.svc, "hello").await;
    let (_, reply) = r.full.next_request().await.unwrap();
    reply.send_error("model overloaded");
    let err = assert_ready_err!(fut.poll());
    assert_eq!(err.to_string(), "model overloaded");
    assert!(r.reduced.poll_request().is_pending());
    assert_eq!(r.handle.snapshot().state.failures, 1);
}

#[tokio::test(start_paused = true)]
async fn admission_rejections_from_a_levels_stack_count_as_failures() {
    let mut r = rig();
    for i in 0..5 {
        let mut fut = send(&mut r.svc, "hello").await;
        let (_, reply) = r.full.next_request().await.unwrap();
        if i % 2 == 0 {
            reply.send_error(BulkheadFull::new("full-model".into()));
        } else {
            reply.send_error(CircuitOpen::new(
                "full-model".into(),
                Duration::from_secs(5),
            ));
        }
        assert_ready_err!(fut.poll());
    }
    assert_eq!(r.handle.level().index, 1);
}

#[tokio::test(start_paused = true)]
async fn probes_go_to_the_level_above_only_after_the_dwell() {
    let mut r = rig();
    fail_full(&mut r, 5).await;
    r.dice.set(0.0);
    // During the dwell, even a sample that would probe serves at the current level.
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(
        answered(&mut r.svc, &mut r.reduced, "during dwell", "short").await,
        "short"
    );

    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(
        answered(&mut r.svc, &mut r.full, "probe", "full answer").await,
        "full answer"
    );
    let snap = r.handle.snapshot();
    assert_eq!(snap.state.probe.successes, 1);
    assert_eq!(snap.state.level, 1);

    // A sample at or above the ratio stays at the current level.
    r.dice.set(0.05);
    assert_eq!(
        answered(&mut r.svc, &mut r.reduced, "not a probe", "short").await,
        "short"
    );

    // A failed probe is answered with its failure and not counted against "reduced".
    r.dice.set(0.0);
    let mut fut = send(&mut r.svc, "probe 2").await;
    let (_, reply) = r.full.next_request().await.unwrap();
    reply.send_error("still overloaded");
    assert_ready_err!(fut.poll());
    let snap = r.handle.snapshot();
    assert_eq!(snap.state.failures, 0);
    assert_eq!(snap.state.probe.successes, 0);
    assert_eq!(snap.state.probe.failures, 1);
    assert_eq!(snap.state.level, 1);
}

#[tokio::test(start_paused = true)]
async fn enough_probe_successes_over_a_whole_window_climb_one_level() {
    let mut r = rig();
    let mut changes = r.handle.subscribe();
    fail_full(&mut r, 5).await;
    let down = changes.try_recv().unwrap();
    assert_eq!((down.from.index, down.to.index), (0, 1));
    assert_eq!(down.cause, Cause::ConsecutiveFailures);

    tokio::time::advance(Duration::from_secs(60)).await;
    r.dice.set(0.0);
    for _ in 0..20 {
        answered(&mut r.svc, &mut r.full, "probe", "ok").await;
    }
    assert_eq!(r.handle.level().index, 1);
    tokio::time::advance(Duration::from_secs(60)).await;
    // The next request ends the window and is served at the recovered level.
    assert_eq!(answered(&mut r.svc, &mut r.full, "after", "ok").await, "ok");
    assert_eq!(r.handle.level().index, 0);
    let up = changes.try_recv().unwrap();
    assert_eq!(
        (up.from.index, up.to.index, up.cause),
        (1, 0, Cause::Recovered)
    );
}

#[tokio::test(start_paused = true)]
async fn a_level_that_is_never_ready_blocks_only_its_own_requests() {
    let mut r = rig();
    r.full.allow(0);
    // Our readiness never depends on a level's.
    let mut ready = task::spawn(r.svc.ready());
    assert_ready_ok!(ready.poll());
    drop(ready);
    // A request at the best level waits for it, in its own future.
    let mut stuck = task::spawn(r.svc.call("waits"));
    assert_pending!(stuck.poll());
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_pending!(stuck.poll());

    // Other requests, served by another level, are not held behind it.
    r.handle.force("reduced").unwrap();
    for i in 0..3 {
        let mut fut = send(&mut r.svc, "served").await;
        let (_, reply) = r.reduced.next_request().await.unwrap();
        reply.send_response(format!("short {i}"));
        assert_eq!(assert_ready_ok!(fut.poll()), format!("short {i}"));
    }

    // When the best level becomes ready, the waiting request goes through.
    r.full.allow(1);
    assert!(stuck.is_woken());
    assert_pending!(stuck.poll());
    let (req, reply) = r.full.next_request().await.unwrap();
    assert_eq!(req, "waits");
    reply.send_response("late".to_owned());
    assert_eq!(assert_ready_ok!(stuck.poll()), "late");
}

#[tokio::test(start_paused = true)]
async fn a_lower_level_that_is_never_ready_does_not_block_the_best_level() {
    let mut r = rig();
    r.reduced.allow(0);
    for _ in 0..3 {
        answered(&mut r.svc, &mut r.full, "hello", "full").await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_readiness_error_is_a_failure_of_that_level() {
    let mut r = rig();
    for _ in 0..5 {
        r.full.send_error("connection refused");
        let mut fut = task::spawn(r.svc.ready().await.unwrap().call("hello"));
        assert_ready_err!(fut.poll());
    }
    assert_eq!(r.handle.level().index, 1);
}

#[tokio::test(start_paused = true)]
async fn the_last_level_failing_neither_loops_nor_panics() {
    let (full_svc, mut full) = mock::pair::<Req, Res>();
    let (last_svc, mut last) = mock::pair::<Req, Res>();
    let layer = DegradationLayer::builder("chat")
        .level("last", last_svc)
        .seed(1)
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(full_svc);
    for _ in 0..5 {
        let mut fut = send(&mut svc, "x").await;
        full.next_request().await.unwrap().1.send_error("down");
        assert_ready_err!(fut.poll());
    }
    assert_eq!(handle.level().index, 1);
    for _ in 0..50 {
        let mut fut = send(&mut svc, "x").await;
        last.next_request().await.unwrap().1.send_error("also down");
        assert_ready_err!(fut.poll());
    }
    assert_eq!(handle.level().index, 1);
    assert_eq!(handle.snapshot().state.failures, 50);
    assert!(full.poll_request().is_pending());
}

#[tokio::test(start_paused = true)]
async fn clones_and_services_from_one_layer_share_one_machine() {
    let (full_svc, mut full) = mock::pair::<Req, Res>();
    let (reduced_svc, _reduced) = mock::pair::<Req, Res>();
    let layer = DegradationLayer::builder("chat")
        .level("reduced", reduced_svc)
        .seed(1)
        .build()
        .unwrap();
    let mut a = layer.layer(full_svc.clone());
    let mut b = layer.layer(full_svc).clone();
    for i in 0..5 {
        let svc = if i % 2 == 0 { &mut a } else { &mut b };
        let mut fut = send(svc, "x").await;
        full.next_request().await.unwrap().1.send_error("down");
        assert_ready_err!(fut.poll());
    }
    assert_eq!(layer.handle().level().index, 1);
    assert_eq!(a.handle().level().index, 1);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_request_records_nothing() {
    let mut r = rig();
    for _ in 0..10 {
        let fut = send(&mut r.svc, "x").await;
        drop(fut);
        let _ = r.full.next_request().await.unwrap();
    }
    assert_eq!(r.handle.snapshot().state.failures, 0);
    assert_eq!(r.handle.level().index, 0);
}

#[tokio::test(start_paused = true)]
async fn floor_force_reconfigure_and_revert_through_the_handle() {
    let mut r = rig();
    let mut changes = r.handle.subscribe();
    r.handle.set_floor("reduced").unwrap();
    let c = changes.try_recv().unwrap();
    assert_eq!((c.to.index, c.cause), (1, Cause::Floor));
    answered(&mut r.svc, &mut r.reduced, "x", "r").await;
    // At the floor no probe is sent, however long.
    r.dice.set(0.0);
    tokio::time::advance(Duration::from_secs(3600)).await;
    answered(&mut r.svc, &mut r.reduced, "x", "r").await;
    assert!(!r.handle.snapshot().state.probing);

    r.handle.force(0).unwrap();
    assert!(r.handle.snapshot().state.forced);
    assert_eq!(r.handle.level().index, 0);
    assert_eq!(r.handle.force("nope").unwrap_err().field(), "level");
    r.handle.release();
    assert_eq!(r.handle.level().index, 1, "back down to the floor");
    r.handle.clear_floor();
    assert_eq!(r.handle.snapshot().state.floor, None);

    let mut config = r.handle.config();
    config.failures_to_degrade = 0;
    assert_eq!(
        r.handle.reconfigure(config.clone()).unwrap_err().field(),
        "failures_to_degrade"
    );
    config.failures_to_degrade = 1;
    r.handle.reconfigure(config).unwrap();
    assert_eq!(r.handle.level().index, 1, "reconfigure keeps the level");
    r.dice.set(0.999);
    let mut fut = send(&mut r.svc, "x").await;
    r.reduced.next_request().await.unwrap().1.send_error("down");
    assert_ready_err!(fut.poll());
    assert_eq!(r.handle.level().index, 2, "one failure is enough now");
    r.handle.revert();
    assert_eq!(r.handle.config().failures_to_degrade, 5);
}

#[test]
fn the_service_stays_clone_send_sync_and_the_builder_validates() {
    fn assert_traits<T: Clone + Send + Sync + 'static>(_: &T) {}
    let (full_svc, _full) = mock::pair::<Req, Res>();
    let (reduced_svc, _reduced) = mock::pair::<Req, Res>();
    let layer = DegradationLayer::builder("chat")
        .level("reduced", reduced_svc.clone())
        .build()
        .unwrap();
    let svc = layer.layer(full_svc);
    assert_traits(&svc);
    assert_traits(&layer);

    let none = DegradationLayer::<Req, Res>::builder("chat")
        .build()
        .unwrap_err();
    assert_eq!(none.field(), "levels");
    let twice = DegradationLayer::builder("chat")
        .inner_level("a")
        .level("a", reduced_svc.clone())
        .build()
        .unwrap_err();
    assert_eq!(twice.field(), "levels");
    let bad = DegradationLayer::builder("chat")
        .level("b", reduced_svc)
        .probe_ratio(f64::NAN)
        .build()
        .unwrap_err();
    assert_eq!(bad.field(), "probe_ratio");
}

mod http_extensions {
    use super::*;
    use http::{Request, Response};

    type HReq = Request<()>;
    type HRes = Response<&'static str>;

    #[tokio::test(start_paused = true)]
    async fn levels_are_recorded_on_requests_and_responses_when_asked() {
        let (full_svc, mut full) = mock::pair::<HReq, HRes>();
        let dice = Dice::new();
        let layer = DegradationLayer::builder("chat")
            .level("message", Fixed::new(Response::new("sorry")))
            .random(dice.source())
            .level_extensions()
            .build()
            .unwrap();
        let handle = layer.handle();
        let mut svc = layer.layer(full_svc);

        svc.ready().await.unwrap();
        let mut fut = task::spawn(svc.call(Request::new(())));
        assert_pending!(fut.poll());
        let (req, reply) = full.next_request().await.unwrap();
        assert_eq!(req.extensions().get::<CurrentLevel>().unwrap().0.index, 0);
        reply.send_response(Response::new("full"));
        let res = assert_ready_ok!(fut.poll());
        let served = res.extensions().get::<ServedBy>().unwrap();
        assert_eq!((&*served.level.name, served.probe), ("full", false));

        handle.force("message").unwrap();
        handle.release();
        let ready = svc.ready().await.unwrap();
        let res = ready.call(Request::new(())).await.unwrap();
        assert_eq!(*res.body(), "sorry");
        assert_eq!(res.extensions().get::<ServedBy>().unwrap().level.index, 1);

        // A probe: the request says the level in force; the response, who served it.
        tokio::time::advance(Duration::from_secs(60)).await;
        dice.set(0.0);
        let mut fut = task::spawn(svc.call(Request::new(())));
        assert_pending!(fut.poll());
        let (req, reply) = full.next_request().await.unwrap();
        assert_eq!(
            &*req.extensions().get::<CurrentLevel>().unwrap().0.name,
            "message"
        );
        reply.send_response(Response::new("full"));
        let res = assert_ready_ok!(fut.poll());
        let served = res.extensions().get::<ServedBy>().unwrap();
        assert_eq!((served.level.index, served.probe), (0, true));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_recorded_by_default() {
        let (full_svc, mut full) = mock::pair::<HReq, HRes>();
        let layer = DegradationLayer::builder("chat")
            .level("message", Fixed::new(Response::new("sorry")))
            .build()
            .unwrap();
        let mut svc = layer.layer(full_svc);
        svc.ready().await.unwrap();
        let mut fut = task::spawn(svc.call(Request::new(())));
        assert_pending!(fut.poll());
        let (req, reply) = full.next_request().await.unwrap();
        assert!(req.extensions().get::<CurrentLevel>().is_none());
        reply.send_response(Response::new("full"));
        let res = assert_ready_ok!(fut.poll());
        assert!(res.extensions().get::<ServedBy>().is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn a_polled_again_future_does_not_panic() {
    let mut r = rig();
    r.handle.force("message").unwrap();
    let mut fut = task::spawn(r.svc.ready().await.unwrap().call("x"));
    assert_ready_ok!(fut.poll());
    assert_ready!(fut.poll()).unwrap_err();
}

#[cfg(feature = "serde")]
#[tokio::test(start_paused = true)]
async fn the_snapshot_serializes_for_operators() {
    let r = rig();
    r.handle.set_floor(1).unwrap();
    let json = serde_json::to_value(r.handle.snapshot()).unwrap();
    assert_eq!(json["name"], "chat");
    assert_eq!(json["level_name"], "reduced");
    assert_eq!(json["level"], 1);
    assert_eq!(json["floor"], 1);
    assert_eq!(json["forced"], false);
    assert_eq!(json["time_at_level"], "0ns");
    assert_eq!(json["probe"]["successes"], 0);
}

#[cfg(feature = "http")]
mod respond_dont_error {
    use super::*;
    use bytes::Bytes;
    use http::{Request, Response, StatusCode};
    use http_body_util::{BodyExt, Full};
    use seawall_core::http::RespondLayer;
    use seawall_degradation::http::FixedResponse;
    use std::convert::Infallible;

    type Body = Full<Bytes>;

    #[tokio::test(start_paused = true)]
    async fn a_server_stack_always_answers_with_a_response() {
        let (full_svc, mut full) = mock::pair::<Request<()>, Response<Body>>();
        let layer = DegradationLayer::builder("chat")
            .level(
                "message",
                FixedResponse::<Body>::new(StatusCode::OK, "Please try again in a few minutes."),
            )
            .seed(1)
            .build()
            .unwrap();
        let handle = layer.handle();
        let mut svc = RespondLayer.layer(layer.layer(full_svc));
        // The stack's error type is Infallible: what hyper and axum want.
        fn infallible<S: Service<Request<()>, Error = Infallible>>(_: &S) {}
        infallible(&svc);

        for _ in 0..5 {
            svc.ready().await.unwrap();
            let mut fut = task::spawn(svc.call(Request::new(())));
            assert_pending!(fut.poll());
            full.next_request()
                .await
                .unwrap()
                .1
                .send_error(CircuitOpen::new("gpt".into(), Duration::from_secs(30)));
            let res = assert_ready_ok!(fut.poll());
            assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(res.headers()[http::header::RETRY_AFTER], "30");
        }
        assert_eq!(&*handle.level().name, "message");
        let ready = svc.ready().await.unwrap();
        let res = ready.call(Request::new(())).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"Please try again in a few minutes.");
    }
}
