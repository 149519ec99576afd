//! The coordinator hooks through the Tower service, with tokio's paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall_circuit_breaker::{
    Cause, CircuitBreakerLayer, Forced, Handle, ProbeDecision, ProbeRequest, State, Verdict,
    VerdictOutcome,
};
use seawall_core::{find_rejection, BoxError, RejectionKind};
use tokio::time::advance;
use tower::Layer;

mod support;
use support::counting::{send, Counting, Req};

const S: Duration = Duration::from_secs(1);

fn open_retry_after(err: &BoxError) -> Duration {
    let r = find_rejection(&**err).expect("a seawall rejection");
    assert_eq!(r.kind(), RejectionKind::CircuitOpen);
    assert_eq!(r.open_cause(), Some(seawall_core::OpenCause::Open));
    r.retry_after().expect("a retry-after")
}

/// A gate that holds probes off (for `hold_ms`) until told to allow them.
#[derive(Default)]
struct Switch {
    hold_ms: AtomicU64,
    asked: AtomicUsize,
}

fn install(handle: &Handle, hold: Duration) -> Arc<Switch> {
    let switch = Arc::new(Switch::default());
    switch
        .hold_ms
        .store(hold.as_millis() as u64, Ordering::SeqCst);
    let gate = Arc::clone(&switch);
    let previous = handle.set_probe_gate(Some(Arc::new(move |_: &ProbeRequest| {
        gate.asked.fetch_add(1, Ordering::SeqCst);
        match gate.hold_ms.load(Ordering::SeqCst) {
            0 => ProbeDecision::Allow,
            ms => ProbeDecision::HoldOff(Duration::from_millis(ms)),
        }
    })));
    assert!(previous.is_none());
    switch
}

fn layer() -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .consecutive_failures(3)
        .open_for(10 * S)
        .build()
        .unwrap()
}

/// Three calls while the supplier fails: enough to trip a [`layer`] breaker. The
/// supplier is left failing.
async fn fail_three<S>(svc: &mut S, inner: &Counting)
where
    S: tower::Service<Req, Response = &'static str, Error = BoxError>,
{
    inner.fail(true);
    for _ in 0..3 {
        send(svc).await.unwrap_err();
    }
}

#[tokio::test(start_paused = true)]
async fn a_gated_probe_never_reaches_the_dependency_until_the_gate_allows_it() {
    let inner = Counting::default();
    let layer = layer();
    let handle = layer.handle();
    let switch = install(&handle, 4 * S);
    let mut svc = layer.layer(inner.clone());

    // Closed calls never ask the gate.
    for _ in 0..20 {
        send(&mut svc).await.unwrap();
    }
    assert_eq!(switch.asked.load(Ordering::SeqCst), 0);
    fail_three(&mut svc, &inner).await;
    assert_eq!(handle.state(), State::Open);
    inner.fail(false);
    let before = inner.seen();

    // The interval passes; the gate holds the probe off for 4 s.
    advance(10 * S).await;
    let err = send(&mut svc).await.unwrap_err();
    assert_eq!(open_retry_after(&err), 4 * S);
    advance(S).await;
    for _ in 0..5 {
        let err = send(&mut svc).await.unwrap_err();
        assert_eq!(open_retry_after(&err), 3 * S);
    }
    // Neither poll_ready nor call reached the dependency; the gate was asked once
    // (the hold is remembered).
    assert_eq!(inner.seen(), before);
    assert_eq!(switch.asked.load(Ordering::SeqCst), 1);
    let snap = handle.snapshot();
    assert_eq!(snap.state, State::HalfOpen);
    assert_eq!(snap.retry_after, Some(3 * S));

    // The gate now allows; told so, the breaker lets the next call probe at once.
    switch.hold_ms.store(0, Ordering::SeqCst);
    handle.recheck_probe_gate();
    assert_eq!(send(&mut svc).await.unwrap(), "quote");
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(inner.seen().1, before.1 + 1);
    assert_eq!(handle.snapshot().counters.probe_successes, 1);
}

#[tokio::test(start_paused = true)]
async fn a_close_verdict_takes_the_load_back_through_the_ramp() {
    let inner = Counting::default();
    let layer = CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .consecutive_failures(3)
        .open_for(10 * S)
        .ramp(10 * S, 0.0)
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut transitions = handle.subscribe();
    let mut svc = layer.layer(inner.clone());
    fail_three(&mut svc, &inner).await;
    inner.fail(false);
    let trip = transitions.recv().await.unwrap();
    assert_eq!((trip.from, trip.to), (State::Closed, State::Open));
    assert_eq!(handle.snapshot().trip_epoch, Some(trip.epoch));

    // Two seconds in, a probe elsewhere succeeded.
    advance(2 * S).await;
    assert_eq!(
        handle.apply_verdict(Verdict::Close, trip.epoch),
        VerdictOutcome::Applied
    );
    let closed = transitions.recv().await.unwrap();
    assert_eq!(
        (closed.from, closed.to, closed.cause),
        (State::Open, State::Closed, Cause::VerdictClosed)
    );
    // Through the ramp, from 0 %: the first call goes, then a growing share.
    let mut admitted = 0;
    for _ in 0..10 {
        if send(&mut svc).await.is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 1);
    advance(5 * S).await;
    let mut admitted = 0;
    for _ in 0..100 {
        if send(&mut svc).await.is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 50);
    // The same verdict again is stale: that trip is over.
    assert_eq!(
        handle.apply_verdict(Verdict::Close, trip.epoch),
        VerdictOutcome::Stale
    );
}

#[tokio::test(start_paused = true)]
async fn a_reopen_verdict_restarts_the_interval_and_an_operator_overrides_verdicts() {
    let inner = Counting::default();
    let layer = layer();
    let handle = layer.handle();
    let mut svc = layer.layer(inner.clone());
    fail_three(&mut svc, &inner).await;
    let trip_epoch = handle.snapshot().trip_epoch.unwrap();
    advance(8 * S).await;
    assert_eq!(
        handle.apply_verdict(Verdict::Reopen, trip_epoch),
        VerdictOutcome::Applied
    );
    // Open for a whole interval from the verdict, not 2 s more.
    let err = send(&mut svc).await.unwrap_err();
    assert_eq!(open_retry_after(&err), 10 * S);
    let snap = handle.snapshot();
    assert_eq!(snap.consecutive_failed_probes, 1);
    assert_eq!(snap.trip_epoch, Some(trip_epoch));

    handle.force(Forced::Open);
    assert_eq!(
        handle.apply_verdict(Verdict::Close, trip_epoch),
        VerdictOutcome::Overridden
    );
    assert_eq!(handle.state(), State::ForcedOpen);
}

#[tokio::test(start_paused = true)]
async fn in_readiness_mode_a_held_probe_is_pending_until_the_hold_ends_or_a_recheck() {
    let inner = Counting::default();
    let l = layer().pending_while_open();
    let handle = l.handle();
    let switch = install(&handle, 4 * S);
    let mut svc = tower_test::mock::Spawn::new(l.layer(inner.clone()));
    inner.fail(true);
    for _ in 0..3 {
        tokio_test::assert_ready_ok!(svc.poll_ready());
        svc.call(http::Request::new("quote")).await.unwrap_err();
    }
    inner.fail(false);
    advance(10 * S).await;

    // The probe is due, but held off: pending, the dependency untouched.
    let before = inner.seen();
    tokio_test::assert_pending!(svc.poll_ready());
    assert_eq!(inner.seen(), before);
    advance(S).await;
    assert!(!svc.is_woken());
    // Woken when the hold ends; the gate holds again.
    advance(3 * S).await;
    assert!(svc.is_woken());
    tokio_test::assert_pending!(svc.poll_ready());
    assert_eq!(switch.asked.load(Ordering::SeqCst), 2);
    // The gate's answer changed: the recheck wakes the waiting task at once.
    switch.hold_ms.store(0, Ordering::SeqCst);
    handle.recheck_probe_gate();
    assert!(svc.is_woken());
    tokio_test::assert_ready_ok!(svc.poll_ready());
    assert_eq!(
        svc.call(http::Request::new("quote")).await.unwrap(),
        "quote"
    );
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(inner.seen().1, before.1 + 1);
}
