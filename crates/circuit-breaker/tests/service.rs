//! The Tower service, driven with tokio's paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use seawall_circuit_breaker::{
    Cause, CircuitBreakerConfig, CircuitBreakerLayer, Forced, Handle, State, TripPolicy,
};
use seawall_core::{find_rejection, BoxError, BulkheadFull, Deadline, RejectionKind, WindowCounts};
use tokio::time::{advance, Instant};
use tokio_test::{assert_pending, assert_ready, assert_ready_ok, task};
use tower::{Layer, Service, ServiceExt};
use tower_test::mock;

mod support;
use support::counting::{req, send, Counting, Req};

const S: Duration = Duration::from_secs(1);

fn default_layer() -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .build()
        .unwrap()
}

type Spawned = tower_test::mock::Spawn<
    seawall_circuit_breaker::CircuitBreaker<
        mock::Mock<Req, &'static str>,
        seawall_core::ErrorsAsFailures,
    >,
>;

/// `poll_ready` then `call`, as a caller must.
fn ready_call(
    svc: &mut Spawned,
    r: Req,
) -> task::Spawn<impl std::future::Future<Output = Result<&'static str, BoxError>>> {
    assert_ready_ok!(svc.poll_ready());
    task::spawn(svc.call(r))
}

/// Calls the ready service with a deadline `budget` from now current, as a
/// `DeadlineLayer` further out would make it.
fn ready_call_within(
    svc: &mut Spawned,
    budget: Duration,
) -> task::Spawn<impl std::future::Future<Output = Result<&'static str, BoxError>>> {
    assert_ready_ok!(svc.poll_ready());
    let deadline = Deadline::after(Instant::now(), budget);
    task::spawn(deadline.scope(deadline.sync_scope(|| svc.call(req()))))
}

fn rejection_retry_after(err: &BoxError) -> Duration {
    let r = find_rejection(&**err).expect("a seawall rejection");
    assert_eq!(r.kind(), RejectionKind::CircuitOpen);
    assert_eq!(r.name(), Some("freight"));
    r.retry_after().expect("a retry-after")
}

/// Trips a breaker with the default policy: 10 calls, all failing.
async fn trip<S>(svc: &mut S, inner: &Counting)
where
    S: Service<Req, Response = &'static str, Error = BoxError>,
{
    inner.fail(true);
    for _ in 0..10 {
        let err = send(svc).await.unwrap_err();
        assert!(
            find_rejection(&*err).is_none(),
            "the supplier's own error: {err}"
        );
    }
    inner.fail(false);
}

/// The default breaker over a [`Counting`] supplier.
fn counting_breaker() -> (
    Counting,
    CircuitBreakerLayer,
    seawall_circuit_breaker::CircuitBreaker<Counting, seawall_core::ErrorsAsFailures>,
) {
    let inner = Counting::default();
    let layer = default_layer();
    let svc = layer.layer(inner.clone());
    (inner, layer, svc)
}

type Dependency = mock::Handle<Req, &'static str>;

/// `layer` over a mock supplier that will take up to 100 requests.
fn spawn_mock(layer: CircuitBreakerLayer) -> (Spawned, Dependency) {
    let (svc, mut dep) = mock::spawn_layer::<Req, &'static str, _>(layer);
    dep.allow(100);
    (svc, dep)
}

/// A call that reaches the mock supplier and is left in flight, with the means to
/// answer it.
async fn in_flight(
    svc: &mut Spawned,
    dep: &mut Dependency,
) -> (
    task::Spawn<impl std::future::Future<Output = Result<&'static str, BoxError>>>,
    mock::SendResponse<&'static str>,
) {
    let mut call = ready_call(svc, req());
    assert_pending!(call.poll());
    let (_, reply) = dep.next_request().await.unwrap();
    (call, reply)
}

/// The breaker opening after `failures` in a row, with its handle, over a mock supplier.
fn consecutive_over_mock(failures: u32) -> (Handle, Spawned, Dependency) {
    let layer = CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .consecutive_failures(failures)
        .build()
        .unwrap();
    let handle = layer.handle();
    let (svc, dep) = spawn_mock(layer);
    (handle, svc, dep)
}

/// Trips a breaker over a mock supplier with the default policy: 10 failed calls.
async fn trip_mock(svc: &mut Spawned, dep: &mut Dependency) {
    for _ in 0..10 {
        let mut fut = ready_call(svc, req());
        let (_, send) = dep.next_request().await.unwrap();
        send.send_error("supplier down");
        assert_ready!(fut.poll()).unwrap_err();
    }
}

#[tokio::test(start_paused = true)]
async fn closed_calls_go_through_and_are_recorded() {
    let (inner, layer, mut svc) = counting_breaker();
    let handle = layer.handle();
    for _ in 0..25 {
        assert_eq!(send(&mut svc).await.unwrap(), "quote");
    }
    assert_eq!((inner.polls(), inner.calls()), (25, 25));
    let snap = handle.snapshot();
    assert_eq!(snap.state, State::Closed);
    assert_eq!(snap.counters.successes, 25);
    assert_eq!(snap.counters.calls, 25);
    assert_eq!(
        snap.window,
        Some(WindowCounts {
            calls: 10,
            failures: 0,
            slow: 0
        })
    );
}

#[tokio::test(start_paused = true)]
async fn while_open_the_inner_service_is_neither_called_nor_polled() {
    let (inner, layer, mut svc) = counting_breaker();
    let handle = layer.handle();
    trip(&mut svc, &inner).await;
    assert_eq!(handle.state(), State::Open);
    let (polls, calls) = (inner.polls(), inner.calls());
    assert_eq!((polls, calls), (10, 10));
    for i in 0..100u32 {
        let err = send(&mut svc).await.unwrap_err();
        assert!(rejection_retry_after(&err) > Duration::ZERO);
        if i % 10 == 0 {
            advance(Duration::from_millis(50)).await;
        }
    }
    // A clone built later, and a second service from the same layer, are open too.
    let mut other = layer.layer(inner.clone());
    send(&mut other).await.unwrap_err();
    let mut clone = svc.clone();
    send(&mut clone).await.unwrap_err();
    assert_eq!(
        (inner.polls(), inner.calls()),
        (polls, calls),
        "zero reached the supplier"
    );
    assert_eq!(handle.snapshot().counters.short_circuited, 102);
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_what_remains_of_the_open_interval_from_the_trip() {
    let (inner, layer, mut svc) = counting_breaker();
    // The failures are spread out; the interval counts from the trip, not the first one.
    inner.fail(true);
    for _ in 0..10 {
        send(&mut svc).await.unwrap_err();
        advance(S).await;
    }
    // Tripped by the 10th call, 1 s ago.
    let err = send(&mut svc).await.unwrap_err();
    assert_eq!(rejection_retry_after(&err), 9 * S);
    advance(Duration::from_millis(8_500)).await;
    let err = send(&mut svc).await.unwrap_err();
    assert_eq!(rejection_retry_after(&err), Duration::from_millis(500));
    let snap = layer.handle().snapshot();
    assert_eq!(snap.retry_after, Some(Duration::from_millis(500)));
    assert_eq!(snap.open_for, Some(10 * S));
}

#[tokio::test(start_paused = true)]
async fn a_call_long_after_its_poll_ready_is_decided_at_call_time_not_with_a_stale_clock() {
    let (inner, layer, mut svc) = counting_breaker();
    trip(&mut svc, &inner).await;
    // Open for 10 s. `poll_ready` 1 s after the trip, `call` 20 s after that: the
    // probe has been due for 11 s by the time of the call.
    advance(S).await;
    svc.ready().await.unwrap();
    advance(20 * S).await;
    let err = svc.call(req()).await.unwrap_err();
    // The inner service was not polled for this call, so it cannot be the probe;
    // it is told to come back at once, not in the 9 s its `poll_ready` saw.
    assert!(
        rejection_retry_after(&err) < S,
        "{:?}",
        rejection_retry_after(&err)
    );
    // The next caller is the probe (`trip` left the supplier healthy).
    assert_eq!(send(&mut svc).await.unwrap(), "quote");
    assert_eq!(layer.handle().state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_call_turned_away_after_its_poll_ready_is_told_what_remains_when_it_asks() {
    let (inner, layer, mut svc) = counting_breaker();
    trip(&mut svc, &inner).await;
    // Open for 10 s: `poll_ready` 1 s after the trip, `call` 3 s after that.
    advance(S).await;
    svc.ready().await.unwrap();
    advance(3 * S).await;
    let err = svc.call(req()).await.unwrap_err();
    assert_eq!(rejection_retry_after(&err), 6 * S);
    // The same rejection read 2 s later promises no instant already past.
    advance(2 * S).await;
    assert_eq!(rejection_retry_after(&err), 4 * S);
    assert_eq!(err.to_string(), "circuit `freight` is open; retry after 4s");
    assert_eq!(layer.handle().snapshot().counters.short_circuited, 1);
    assert_eq!(inner.calls(), 10, "nothing reached the supplier");
}

#[tokio::test(start_paused = true)]
async fn half_open_sends_one_probe_and_turns_the_others_away_with_a_positive_retry_after() {
    let layer = default_layer();
    let handle = layer.handle();
    let (mut svc, mut dep) = spawn_mock(layer);
    // Trip it.
    trip_mock(&mut svc, &mut dep).await;
    assert_eq!(handle.state(), State::Open);
    advance(10 * S).await;
    assert_eq!(handle.state(), State::HalfOpen);

    let (mut probe, probe_reply) = in_flight(&mut svc, &mut dep).await;
    // Callers arriving while the probe is in flight are rejected, told to come back
    // when the probe must have finished (the 10 s half-open timeout).
    advance(3 * S).await;
    let err = assert_ready!(ready_call(&mut svc, req()).poll()).unwrap_err();
    assert_eq!(rejection_retry_after(&err), 7 * S);
    assert!(dep.poll_request().is_pending(), "no second probe");

    probe_reply.send_response("quote");
    assert_eq!(assert_ready!(probe.poll()).unwrap(), "quote");
    assert_eq!(handle.state(), State::Closed);
    let snap = handle.snapshot();
    assert_eq!(snap.counters.probe_successes, 1);
    assert_eq!(
        snap.counters
            .transitions_between(State::HalfOpen, State::Closed),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_probe_frees_its_slot_and_a_stale_success_does_not_close() {
    let layer = default_layer();
    let handle = layer.handle();
    let (mut svc, mut dep) = spawn_mock(layer);
    // One slow call admitted while closed, still in flight when the breaker trips.
    let (mut slow, slow_reply) = in_flight(&mut svc, &mut dep).await;
    trip_mock(&mut svc, &mut dep).await;
    advance(10 * S).await;
    let (probe, _probe_reply) = in_flight(&mut svc, &mut dep).await;
    // The old call succeeds now: stale, it must not close the breaker.
    slow_reply.send_response("late quote");
    assert_eq!(assert_ready!(slow.poll()).unwrap(), "late quote");
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(handle.snapshot().counters.stale, 1);
    // The caller gives up on the probe: its slot is freed, the next call probes.
    drop(probe);
    assert_eq!(handle.snapshot().probes_in_flight, 0);
    let (mut probe, reply) = in_flight(&mut svc, &mut dep).await;
    reply.send_response("quote");
    assert_ready!(probe.poll()).unwrap();
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counters.cancelled, 1);
}

#[tokio::test(start_paused = true)]
async fn a_slow_inner_call_past_the_deadline_trips_the_breaker() {
    let (handle, mut svc, mut dep) = consecutive_over_mock(3);
    for i in 0..3 {
        let mut fut = ready_call_within(&mut svc, Duration::from_millis(300));
        assert_pending!(fut.poll());
        let (_, _never_answered) = dep.next_request().await.unwrap();
        advance(Duration::from_millis(299)).await;
        assert_pending!(fut.poll());
        advance(Duration::from_millis(1)).await;
        let err = assert_ready!(fut.poll()).unwrap_err();
        let r = find_rejection(&*err).unwrap();
        assert_eq!(r.kind(), RejectionKind::DeadlineExceeded);
        let expected = if i < 2 { State::Closed } else { State::Open };
        assert_eq!(handle.state(), expected);
    }
    let snap = handle.snapshot();
    assert_eq!((snap.counters.failures, snap.counters.timeouts), (3, 3));
    // Now open: the supplier gets nothing more.
    let err = assert_ready!(ready_call(&mut svc, req()).poll()).unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::CircuitOpen
    );
    assert!(dep.poll_request().is_pending());
}

#[tokio::test(start_paused = true)]
async fn slow_successes_trip_a_time_window_with_a_slow_call_rate() {
    let layer = CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .time_window(10 * S, S, 4, 0.5)
        .slow_calls(Duration::from_millis(200), 0.5)
        .build()
        .unwrap();
    let handle = layer.handle();
    let (mut svc, mut dep) = spawn_mock(layer);
    for i in 0..4 {
        let (mut fut, reply) = in_flight(&mut svc, &mut dep).await;
        let delay = if i % 2 == 1 { 250 } else { 10 };
        advance(Duration::from_millis(delay)).await;
        reply.send_response("quote");
        assert_eq!(assert_ready!(fut.poll()).unwrap(), "quote");
    }
    assert_eq!(handle.state(), State::Open);
    let snap = handle.snapshot();
    assert_eq!(snap.counters.slow, 2);
    assert_eq!(snap.counters.failures, 0);
}

#[tokio::test(start_paused = true)]
async fn the_ramp_takes_back_the_load_gradually() {
    let layer = CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .ramp(10 * S, 0.25)
        .build()
        .unwrap();
    let handle = layer.handle();
    let inner = Counting::default();
    let mut svc = layer.layer(inner.clone());
    trip(&mut svc, &inner).await;
    advance(10 * S).await;
    send(&mut svc).await.unwrap(); // the probe closes it
    assert_eq!(handle.state(), State::Closed);
    let before = inner.calls();
    let mut rejected = 0;
    for _ in 0..100 {
        match send(&mut svc).await {
            Ok(_) => {}
            Err(err) => {
                assert_eq!(rejection_retry_after(&err), 10 * S);
                rejected += 1;
            }
        }
    }
    assert_eq!(inner.calls() - before, 25);
    assert_eq!(rejected, 75);
    assert_eq!(handle.snapshot().ramp_share, Some(0.25));
    advance(10 * S).await;
    for _ in 0..100 {
        send(&mut svc).await.unwrap();
    }
    assert_eq!(handle.snapshot().ramp_share, None);
}

#[tokio::test(start_paused = true)]
async fn admission_rejections_from_inner_layers_are_ignored() {
    let (handle, mut svc, mut dep) = consecutive_over_mock(1);
    for _ in 0..5 {
        let mut fut = ready_call(&mut svc, req());
        let (_, reply) = dep.next_request().await.unwrap();
        reply.send_error(BulkheadFull::new("freight-pool".into()));
        assert_ready!(fut.poll()).unwrap_err();
    }
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counters.ignored, 5);
}

#[tokio::test(start_paused = true)]
async fn forced_open_rejects_without_polling_and_a_reset_between_ready_and_call_is_safe() {
    let (inner, layer, mut svc) = counting_breaker();
    let handle = layer.handle();
    handle.force(Forced::Open);
    let err = send(&mut svc).await.unwrap_err();
    // Only an operator ends a forced open: no retry time is promised.
    let rejection = find_rejection(&*err).unwrap();
    assert_eq!(
        rejection.open_cause(),
        Some(seawall_core::OpenCause::ForcedOpen)
    );
    assert_eq!(rejection.retry_after(), None);
    assert_eq!((inner.polls(), inner.calls()), (0, 0));
    // Ready was answered without polling the inner service; if an operator closes
    // the breaker before the call, the call still must not reach it unpolled.
    let mut svc2 = svc.clone();
    std::future::poll_fn(|cx| svc2.poll_ready(cx))
        .await
        .unwrap();
    handle.reset();
    let err = svc2.call(req()).await.unwrap_err();
    assert!(rejection_retry_after(&err) > Duration::ZERO);
    assert_eq!((inner.polls(), inner.calls()), (0, 0));
    // And the next round trip goes through normally.
    assert_eq!(send(&mut svc2).await.unwrap(), "quote");
    assert_eq!(handle.snapshot().counters.short_circuited, 2);
}

#[tokio::test(start_paused = true)]
async fn the_handle_reports_transitions_and_operators_steer() {
    let inner = Counting::default();
    let layer = default_layer();
    let handle: Handle = layer.handle();
    let mut events = handle.subscribe();
    let mut svc = layer.layer(inner.clone());
    trip(&mut svc, &inner).await;
    let t = events.recv().await.unwrap();
    assert_eq!(
        (t.from, t.to, t.cause),
        (State::Closed, State::Open, Cause::FailureRate)
    );
    advance(10 * S).await;
    send(&mut svc).await.unwrap();
    let steps: Vec<_> = [events.recv().await.unwrap(), events.recv().await.unwrap()]
        .iter()
        .map(|t| (t.from, t.to))
        .collect();
    assert_eq!(
        steps,
        vec![
            (State::Open, State::HalfOpen),
            (State::HalfOpen, State::Closed)
        ]
    );
    handle.disable();
    inner.fail(true);
    for _ in 0..20 {
        send(&mut svc).await.unwrap_err();
    }
    assert_eq!(handle.state(), State::Disabled);
    handle.force(Forced::Closed);
    assert_eq!(events.recv().await.unwrap().to, State::Disabled);
    assert_eq!(events.recv().await.unwrap().to, State::ForcedClosed);
    handle.reset();
    assert_eq!(events.recv().await.unwrap().cause, Cause::Reset);

    // Reconfigure keeps the state and validates; revert restores the built config.
    let built = handle.config();
    let stricter = CircuitBreakerConfig {
        policy: TripPolicy::ConsecutiveFailures { threshold: 2 },
        ..built.clone()
    };
    handle.reconfigure(stricter.clone()).unwrap();
    assert_eq!(handle.config(), stricter);
    let bad = CircuitBreakerConfig {
        open_for: Duration::ZERO,
        ..built.clone()
    };
    assert_eq!(handle.reconfigure(bad).unwrap_err().field(), "open_for");
    send(&mut svc).await.unwrap_err();
    send(&mut svc).await.unwrap_err();
    assert_eq!(handle.state(), State::Open);
    handle.revert();
    assert_eq!(handle.config(), built);
    assert_eq!(handle.state(), State::Open, "state kept");
    let snap = handle.snapshot();
    assert_eq!(snap.counters.failures, 32);
    assert_eq!(snap.counters.probe_successes, 1);
    assert!(snap.open_spell.is_some());
}

#[test]
fn services_are_clone_send_sync_and_futures_send() {
    fn assert_send_sync<T: Clone + Send + Sync + 'static>(_: &T) {}
    fn assert_send<T: Send + 'static>(_: &T) {}
    let layer = default_layer();
    let mut svc = layer.layer(Counting::default());
    assert_send_sync(&svc);
    assert_send_sync(&layer);
    let fut = svc.call(req());
    assert_send(&fut);
}

#[cfg(feature = "serde")]
#[tokio::test(start_paused = true)]
async fn the_snapshot_serializes_for_an_operator_endpoint() {
    let (inner, layer, mut svc) = counting_breaker();
    trip(&mut svc, &inner).await;
    let json = serde_json::to_value(layer.handle().snapshot()).unwrap();
    assert_eq!(json["state"], "open");
    assert_eq!(json["retry_after"], "10s");
    assert_eq!(json["counters"]["failures"], 10);
    assert_eq!(json["counters"]["transitions"][0]["from"], "closed");
    assert_eq!(json["window"]["failures"], 10);
}

#[tokio::test(start_paused = true)]
async fn a_caller_turned_away_during_half_open_is_not_made_to_wait_for_the_inner_service() {
    let layer = CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .consecutive_failures(1)
        .build()
        .unwrap();
    let handle = layer.handle();
    let (mut svc, mut dep) = mock::spawn_layer::<Req, &'static str, _>(layer);
    dep.allow(1);
    let mut fut = ready_call(&mut svc, req());
    let (_, send) = dep.next_request().await.unwrap();
    send.send_error("supplier down");
    assert_ready!(fut.poll()).unwrap_err();
    assert_eq!(handle.state(), State::Open);
    advance(10 * S).await;
    // The probe takes the dependency's last unit of capacity.
    dep.allow(1);
    let (mut probe, reply) = in_flight(&mut svc, &mut dep).await;
    // Another caller: the probe slot is taken, so its call cannot reach the
    // dependency. It is answered at once, not parked on the dependency's readiness.
    advance(S).await;
    let err = assert_ready!(ready_call(&mut svc, req()).poll()).unwrap_err();
    assert_eq!(rejection_retry_after(&err), 9 * S);
    reply.send_response("quote");
    assert_eq!(assert_ready!(probe.poll()).unwrap(), "quote");
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counters.short_circuited, 1);
}

/// Clones of one service called from more threads than the breaker has lanes
/// (some threads share a lane's line, as a busy process's do), on real threads:
/// every success is counted exactly once, and before a failure that follows them.
#[test]
fn calls_on_many_threads_through_clones_are_each_counted_once_and_before_what_follows() {
    let layer = CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .consecutive_failures(2)
        .build()
        .unwrap();
    let svc = layer.layer(tower::service_fn(|ok: bool| async move {
        if ok {
            Ok(())
        } else {
            Err::<(), BoxError>("refused".into())
        }
    }));
    fn call_once<S: Service<bool, Error = BoxError>>(svc: &mut S, ok: bool) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async { svc.ready().await.unwrap().call(ok).await.is_ok() })
    }
    let handle = layer.handle();
    let mut first = svc.clone();
    assert!(!call_once(&mut first, false));
    let threads = 40u64;
    let per_thread = 2_000u64;
    std::thread::scope(|s| {
        for _ in 0..threads {
            let mut svc = svc.clone();
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    for _ in 0..per_thread {
                        svc.ready().await.unwrap().call(true).await.unwrap();
                    }
                });
            });
        }
    });
    // The successes came between the first failure and this one: not two in a
    // row (nothing else took the breaker's lock since the first failure).
    assert!(!call_once(&mut first, false));
    assert_eq!(handle.state(), State::Closed);
    let counters = handle.snapshot().counters;
    assert_eq!(counters.successes, threads * per_thread);
    assert_eq!(counters.failures, 2);
    assert_eq!(counters.calls, threads * per_thread + 2);
    assert!(!call_once(&mut first, false));
    assert_eq!(handle.state(), State::Open);
}
