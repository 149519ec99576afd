//! Shadow mode: the same sequence of calls, once enforcing and once in shadow. The
//! shadow run must reject nothing, count as shadow rejections exactly the calls the
//! enforcing run rejected (counted here from its errors, by cause), and keep the
//! same slot accounting: calls let through beyond the limit hold no slot.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall_bulkhead::{BulkheadLayer, Handle};
use seawall_core::{find_rejection, BoxError, Deadline, RejectionKind};
use tokio::time::{advance, Instant};
use tokio_test::task;
use tower::{service_fn, Layer, Service, ServiceExt};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One call: when it is made (from the start) and how long the dependency takes.
#[derive(Debug, Clone, Copy)]
struct Call {
    at_ms: u64,
    latency_ms: u64,
    /// The request's deadline has already passed when it is made.
    expired: bool,
}

const fn call(at_ms: u64, latency_ms: u64) -> Call {
    Call {
        at_ms,
        latency_ms,
        expired: false,
    }
}

/// Two slots, one place in line, 50 ms of waiting: bursts that fill the line
/// (full), waits that run out (timeout), waits that get a slot, a call whose
/// deadline has passed.
fn script() -> Vec<Call> {
    let mut calls = vec![
        call(0, 100),
        call(0, 100),
        call(0, 10),  // waits, times out at 50 ms
        call(10, 10), // full
        call(20, 10), // full
        call(60, 10), // waits: a slot frees at 100 ms
        call(70, 10), // full
        call(200, 30),
        call(200, 30),
        call(205, 5), // waits, gets a slot at 230 ms
        Call {
            at_ms: 210,
            latency_ms: 5,
            expired: true,
        },
    ];
    // A burst of ten at once, then the tail drains.
    for i in 0..10 {
        calls.push(call(300 + i, 40));
    }
    calls.push(call(500, 1));
    calls
}

type Fut = Pin<Box<dyn Future<Output = Result<&'static str, BoxError>> + Send>>;

#[derive(Debug, Default, PartialEq)]
struct Run {
    full: u64,
    timeout: u64,
    reached: usize,
    /// (active, queued) after each call is made.
    counts: Vec<(usize, usize)>,
    peak_over_limit: usize,
}

async fn drive(shadow: bool) -> (Run, Handle) {
    let layer = BulkheadLayer::builder("supplier")
        .max_concurrent(2)
        .max_queue(1)
        .max_wait(ms(50))
        .shadow(shadow)
        .build()
        .unwrap();
    let handle = layer.handle();
    let reached = Arc::new(AtomicUsize::new(0));
    let seen = reached.clone();
    let mut svc = layer.layer(service_fn(move |c: Call| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(ms(c.latency_ms)).await;
            Ok::<_, BoxError>("quote")
        }
    }));
    let start = Instant::now();
    let mut run = Run::default();
    let mut in_flight: Vec<task::Spawn<Fut>> = Vec::new();
    let poll_all = |run: &mut Run, in_flight: &mut Vec<task::Spawn<Fut>>| {
        in_flight.retain_mut(|t| match t.poll() {
            std::task::Poll::Ready(Ok(_)) => false,
            std::task::Poll::Ready(Err(e)) => {
                match find_rejection(&*e).map(|r| r.kind()) {
                    Some(RejectionKind::BulkheadFull) => run.full += 1,
                    Some(RejectionKind::BulkheadTimeout) => run.timeout += 1,
                    other => panic!("unexpected error {e} ({other:?})"),
                }
                false
            }
            std::task::Poll::Pending => true,
        });
    };
    for c in script() {
        let due = start + ms(c.at_ms);
        while Instant::now() < due {
            advance(ms(5).min(due - Instant::now())).await;
            poll_all(&mut run, &mut in_flight);
            let s = handle.snapshot();
            run.peak_over_limit = run.peak_over_limit.max(s.over_limit);
        }
        let ready = svc.ready().await.unwrap();
        let fut: Fut = if c.expired {
            let deadline = Deadline::at(Instant::now());
            Box::pin(deadline.sync_scope(|| ready.call(c)))
        } else {
            Box::pin(ready.call(c))
        };
        in_flight.push(task::spawn(fut));
        poll_all(&mut run, &mut in_flight);
        let s = handle.snapshot();
        assert!(s.active <= 2, "active {} over the limit", s.active);
        run.counts.push((s.active, s.queued));
        run.peak_over_limit = run.peak_over_limit.max(s.over_limit);
    }
    while !in_flight.is_empty() {
        advance(ms(5)).await;
        poll_all(&mut run, &mut in_flight);
    }
    run.reached = reached.load(Ordering::SeqCst);
    (run, handle)
}

#[tokio::test(start_paused = true)]
async fn shadow_counts_exactly_what_enforcement_rejects_and_rejects_nothing() {
    let (enforcing, enforcing_handle) = drive(false).await;
    let (shadow, handle) = drive(true).await;
    let total = script().len();

    assert!(enforcing.full > 0 && enforcing.timeout > 0, "{enforcing:?}");
    let rejected = (enforcing.full + enforcing.timeout) as usize;
    assert_eq!(enforcing.reached, total - rejected);
    let e = enforcing_handle.snapshot();
    assert_eq!((e.shadow_rejected_full, e.shadow_rejected_timeout), (0, 0));
    assert_eq!(enforcing.peak_over_limit, 0);

    assert_eq!((shadow.full, shadow.timeout), (0, 0));
    assert_eq!(shadow.reached, total);
    let s = handle.snapshot();
    assert_eq!(s.shadow_rejected_full, enforcing.full);
    assert_eq!(s.shadow_rejected_timeout, enforcing.timeout);
    // The same slot accounting, call after call.
    assert_eq!(shadow.counts, enforcing.counts);
    assert_eq!(s.admitted, e.admitted);
    assert!(shadow.peak_over_limit > 0);
    // Everything ended: no slot and no over-limit call left behind.
    assert_eq!((s.active, s.queued, s.over_limit), (0, 0, 0));
    assert_eq!(
        s.admitted + s.shadow_rejected_full + s.shadow_rejected_timeout + s.abandoned,
        total as u64
    );
}

#[tokio::test(start_paused = true)]
async fn switching_shadow_at_run_time_takes_effect_on_the_next_call() {
    let layer = BulkheadLayer::builder("supplier")
        .max_concurrent(1)
        .max_queue(0)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(service_fn(|latency: u64| async move {
        tokio::time::sleep(ms(latency)).await;
        Ok::<_, BoxError>("quote")
    }));
    let mut busy = task::spawn(svc.clone().oneshot(1_000));
    assert!(busy.poll().is_pending());
    let e = svc.clone().oneshot(0).await.unwrap_err();
    assert_eq!(
        find_rejection(&*e).map(|r| r.kind()),
        Some(RejectionKind::BulkheadFull)
    );

    handle.set_shadow(true);
    assert!(handle.is_shadow());
    assert!(handle.config().shadow);
    let mut over = task::spawn(svc.clone().oneshot(500));
    assert!(over.poll().is_pending());
    let s = handle.snapshot();
    assert!(s.shadow);
    assert_eq!((s.active, s.over_limit, s.shadow_rejected_full), (1, 1, 1));

    // Switched off: the next call is rejected; the one over the limit runs on.
    handle.set_shadow(false);
    assert!(svc.clone().oneshot(0).await.is_err());
    advance(ms(500)).await;
    assert!(matches!(over.poll(), std::task::Poll::Ready(Ok("quote"))));
    assert_eq!(handle.snapshot().over_limit, 0);
    // Its end freed no slot: the first call still holds the only one.
    assert_eq!(handle.snapshot().active, 1);
    advance(ms(500)).await;
    assert!(busy.poll().is_ready());
    assert_eq!(handle.snapshot().active, 0);

    handle.set_shadow(true);
    handle.revert();
    assert!(!handle.is_shadow());
}

#[tokio::test(start_paused = true)]
async fn a_keyed_bulkhead_in_shadow_lets_a_new_key_through_when_every_key_is_busy() {
    for shadow in [false, true] {
        let layer = BulkheadLayer::builder("suppliers")
            .max_concurrent(1)
            .max_queue(0)
            .shadow(shadow)
            .keyed(|key: &u64| *key)
            .max_keys(1)
            .build()
            .unwrap();
        let handle = layer.handle();
        let svc = layer.layer(service_fn(|key: u64| async move {
            tokio::time::sleep(ms(100)).await;
            Ok::<_, BoxError>(key)
        }));
        let mut busy = task::spawn(svc.clone().oneshot(1));
        assert!(busy.poll().is_pending());
        let mut new_key = task::spawn(svc.clone().oneshot(2));
        let polled = new_key.poll();
        let s = handle.snapshot();
        if shadow {
            assert!(polled.is_pending());
            assert_eq!((s.rejected_key_limit, s.shadow_rejected_key_limit), (0, 1));
            advance(ms(100)).await;
            assert!(matches!(new_key.poll(), std::task::Poll::Ready(Ok(2))));
        } else {
            let std::task::Poll::Ready(Err(e)) = polled else {
                panic!("a new key while every key is busy is rejected");
            };
            assert_eq!(
                find_rejection(&*e).map(|r| r.kind()),
                Some(RejectionKind::BulkheadFull)
            );
            assert_eq!((s.rejected_key_limit, s.shadow_rejected_key_limit), (1, 0));
            advance(ms(100)).await;
        }
        assert!(busy.poll().is_ready());
    }
}
