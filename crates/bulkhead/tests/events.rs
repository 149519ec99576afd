//! A bulkhead's event subscription: scripted calls with a paused clock, and the
//! exact sequence of events they send (edge-triggered, never one per call).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use seawall_bulkhead::adaptive::AimdConfig;
use seawall_bulkhead::{
    BulkheadConfig, BulkheadEvent, BulkheadLayer, Handle, LimitCause, OverloadStatus,
};
use seawall_core::{BoxError, RejectionKind};
use tokio::sync::broadcast::error::TryRecvError;
use tokio::sync::{broadcast, oneshot};
use tokio::time::Instant;
use tokio_test::{assert_ready, task};
use tower::{service_fn, Layer, Service};

use support::{answer, request, supplier, Call, Req, Res};

/// Starts a call and checks it is in flight: running or waiting for a slot.
fn call<S>(svc: &mut S) -> (Call, oneshot::Sender<u16>)
where
    S: Service<Req, Response = Res, Error = BoxError>,
    S::Future: Send + 'static,
{
    support::call(svc, "/")
}

/// A call the bulkhead turns away at once: its rejection's kind.
fn rejected<S>(svc: &mut S) -> RejectionKind
where
    S: Service<Req, Response = Res, Error = BoxError>,
    S::Future: Send + 'static,
{
    let (req, _tx) = request("/");
    let mut call = task::spawn(svc.call(req));
    let err = assert_ready!(call.poll()).unwrap_err();
    seawall_core::find_rejection(&*err).unwrap().kind()
}

fn next(rx: &mut broadcast::Receiver<BulkheadEvent>) -> BulkheadEvent {
    rx.try_recv().expect("an event")
}

fn nothing_more(rx: &mut broadcast::Receiver<BulkheadEvent>) {
    assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Empty);
}

fn fixed(max_concurrent: usize, max_queue: usize) -> (BulkheadLayer, Handle) {
    let layer = BulkheadLayer::builder("freight")
        .max_concurrent(max_concurrent)
        .max_queue(max_queue)
        .max_wait(Duration::from_millis(20))
        .build()
        .unwrap();
    let handle = layer.handle();
    (layer, handle)
}

#[tokio::test(start_paused = true)]
async fn saturation_is_sent_once_and_relief_when_half_the_limit_is_free() {
    let (layer, handle) = fixed(4, 1);
    let mut events = handle.subscribe();
    let mut svc = layer.layer(service_fn(supplier));
    let t0 = Instant::now();

    // Four slots taken and one waiter: admissions and queueing send nothing.
    let mut running: Vec<_> = (0..4).map(|_| call(&mut svc)).collect();
    let (waiter, _waiter_tx) = call(&mut svc);
    nothing_more(&mut events);

    // The first rejection begins the saturation; the next ones send nothing.
    tokio::time::advance(Duration::from_millis(5)).await;
    assert_eq!(rejected(&mut svc), RejectionKind::BulkheadFull);
    assert_eq!(
        next(&mut events),
        BulkheadEvent::Saturated {
            rejection: RejectionKind::BulkheadFull,
            active: 4,
            queued: 1,
            at: t0 + Duration::from_millis(5),
        }
    );
    for _ in 0..3 {
        assert_eq!(rejected(&mut svc), RejectionKind::BulkheadFull);
    }
    assert!(handle.snapshot().saturated);
    nothing_more(&mut events);

    // The waiter's time runs out: one more rejection, no event.
    tokio::time::advance(Duration::from_millis(20)).await;
    let mut waiter = waiter;
    assert!(assert_ready!(waiter.poll()).is_err());
    assert_eq!(handle.snapshot().rejected_timeout, 1);
    nothing_more(&mut events);

    // 3 of 4 in use: a slot is free, but not half the limit; still saturated.
    let (c, tx) = running.pop().unwrap();
    answer(c, tx, 200);
    nothing_more(&mut events);
    assert!(handle.snapshot().saturated);
    // 2 of 4: relieved.
    let (c, tx) = running.pop().unwrap();
    answer(c, tx, 200);
    assert_eq!(
        next(&mut events),
        BulkheadEvent::Relieved {
            active: 2,
            limit: 4,
            at: t0 + Duration::from_millis(25),
        }
    );
    assert!(!handle.snapshot().saturated);
    let (c, tx) = running.pop().unwrap();
    answer(c, tx, 200);
    nothing_more(&mut events);

    // Full again (three running, one waiting, the next turned away): a new saturation.
    running.extend((0..3).map(|_| call(&mut svc)));
    let (_w, _wtx) = call(&mut svc);
    assert_eq!(rejected(&mut svc), RejectionKind::BulkheadFull);
    assert!(matches!(
        next(&mut events),
        BulkheadEvent::Saturated {
            active: 4,
            queued: 1,
            ..
        }
    ));
    nothing_more(&mut events);
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_runs_out_begins_a_saturation_too() {
    let (layer, handle) = fixed(1, 1);
    let mut events = handle.subscribe();
    let mut svc = layer.layer(service_fn(supplier));
    let t0 = Instant::now();
    let (running, running_tx) = call(&mut svc);
    let (mut waiter, _wtx) = call(&mut svc);
    tokio::time::advance(Duration::from_millis(20)).await;
    assert!(assert_ready!(waiter.poll()).is_err());
    assert_eq!(
        next(&mut events),
        BulkheadEvent::Saturated {
            rejection: RejectionKind::BulkheadTimeout,
            active: 1,
            queued: 0,
            at: t0 + Duration::from_millis(20),
        }
    );
    answer(running, running_tx, 200);
    assert!(matches!(
        next(&mut events),
        BulkheadEvent::Relieved {
            active: 0,
            limit: 1,
            ..
        }
    ));
    nothing_more(&mut events);
}

#[tokio::test(start_paused = true)]
async fn forces_releases_and_new_limits_are_sent_in_order() {
    let (_layer, handle) = fixed(4, 1);
    let mut events = handle.subscribe();
    let t0 = Instant::now();

    handle.force(1).unwrap();
    assert_eq!(
        next(&mut events),
        BulkheadEvent::LimitChanged {
            from: 4,
            to: 1,
            cause: LimitCause::Forced,
            at: t0,
        }
    );
    // A force at the limit in force is still news.
    handle.force(1).unwrap();
    assert!(matches!(
        next(&mut events),
        BulkheadEvent::LimitChanged {
            from: 1,
            to: 1,
            cause: LimitCause::Forced,
            ..
        }
    ));
    // Refused: nothing sent.
    assert!(handle.force(0).is_err());
    nothing_more(&mut events);

    handle.release();
    assert!(matches!(
        next(&mut events),
        BulkheadEvent::LimitChanged {
            from: 1,
            to: 4,
            cause: LimitCause::Released,
            ..
        }
    ));
    // Nothing forced: nothing released, nothing sent.
    handle.release();
    nothing_more(&mut events);

    let built = handle.config();
    let wider = BulkheadConfig {
        max_concurrent: 6,
        ..built
    };
    handle.reconfigure(wider).unwrap();
    assert_eq!(
        next(&mut events),
        BulkheadEvent::Reconfigured {
            from: Box::new(built),
            to: Box::new(wider),
            at: t0,
        }
    );
    assert!(matches!(
        next(&mut events),
        BulkheadEvent::LimitChanged {
            from: 4,
            to: 6,
            cause: LimitCause::Reconfigured,
            ..
        }
    ));
    // Only the queue changes: new limits, but the limit in force stays.
    let mut deeper = wider;
    deeper.queue.max_queue = 5;
    handle.reconfigure(deeper).unwrap();
    assert!(matches!(
        next(&mut events),
        BulkheadEvent::Reconfigured { .. }
    ));
    nothing_more(&mut events);
    // The same limits again: nothing changed, nothing sent.
    handle.reconfigure(deeper).unwrap();
    nothing_more(&mut events);

    handle.revert();
    assert_eq!(
        next(&mut events),
        BulkheadEvent::Reconfigured {
            from: Box::new(deeper),
            to: Box::new(built),
            at: t0,
        }
    );
    assert!(matches!(
        next(&mut events),
        BulkheadEvent::LimitChanged {
            from: 6,
            to: 4,
            cause: LimitCause::Reconfigured,
            ..
        }
    ));
    nothing_more(&mut events);
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_limit_sends_each_move_once_not_each_call() {
    let layer = BulkheadLayer::builder("freight")
        .max_queue(0)
        .adaptive(AimdConfig {
            initial_limit: 10,
            min_limit: 1,
            max_limit: 20,
            sample_every: 1,
            timeout: Duration::from_secs(1),
            ..AimdConfig::default()
        })
        .build()
        .unwrap()
        .overload(OverloadStatus::default());
    let handle = layer.handle();
    let mut events = handle.subscribe();
    let mut svc = layer.layer(service_fn(supplier));

    // Three calls of one round trip all answer 503: the limit falls once.
    let calls: Vec<_> = (0..3).map(|_| call(&mut svc)).collect();
    tokio::time::advance(Duration::from_millis(10)).await;
    let t = Instant::now();
    for (c, tx) in calls {
        answer(c, tx, 503);
    }
    assert_eq!(
        next(&mut events),
        BulkheadEvent::LimitChanged {
            from: 10,
            to: 9,
            cause: LimitCause::Adaptive,
            at: t,
        }
    );
    nothing_more(&mut events);

    // Served calls while too little of the limit is in use teach nothing: no event.
    let (c, tx) = call(&mut svc);
    answer(c, tx, 200);
    nothing_more(&mut events);
    assert_eq!(handle.snapshot().limit, 9);
}

#[tokio::test(start_paused = true)]
async fn a_subscriber_that_falls_behind_is_told_it_lagged() {
    let (_layer, handle) = fixed(4, 1);
    let mut events = handle.subscribe();
    for n in 0..70 {
        handle.force(1 + n % 3).unwrap();
    }
    assert_eq!(
        events.try_recv().unwrap_err(),
        TryRecvError::Lagged(70 - 64)
    );
    assert!(matches!(
        next(&mut events),
        BulkheadEvent::LimitChanged {
            cause: LimitCause::Forced,
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_slot_handed_to_a_caller_who_left_can_end_the_saturation() {
    let (layer, handle) = fixed(1, 1);
    let mut events = handle.subscribe();
    let mut svc = layer.layer(service_fn(supplier));
    let (running, running_tx) = call(&mut svc);
    let (waiter, _waiter_tx) = call(&mut svc);
    assert_eq!(rejected(&mut svc), RejectionKind::BulkheadFull);
    assert!(matches!(next(&mut events), BulkheadEvent::Saturated { .. }));
    // The running call ends: its slot goes to the waiter, still busy.
    answer(running, running_tx, 200);
    nothing_more(&mut events);
    assert_eq!((handle.snapshot().active, handle.snapshot().queued), (1, 0));
    // The waiter's caller leaves before taking it: the bulkhead is empty.
    drop(waiter);
    assert!(matches!(
        next(&mut events),
        BulkheadEvent::Relieved {
            active: 0,
            limit: 1,
            ..
        }
    ));
}
