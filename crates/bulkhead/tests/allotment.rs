//! The external ceiling a fleet-wide cap drives (`Handle::set_allotment`) and the
//! demand it claims (`Handle::take_demand`), with a paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use seawall_bulkhead::{BulkheadLayer, Handle};
use seawall_core::{find_rejection, BoxError, RejectionKind};
use tokio_test::{assert_pending, assert_ready, task};
use tower::{Layer, Service, ServiceExt};
use tower_test::mock;

type Req = http::Request<&'static str>;

fn layer(max_concurrent: usize, max_queue: usize) -> BulkheadLayer {
    BulkheadLayer::builder("freight")
        .max_concurrent(max_concurrent)
        .max_queue(max_queue)
        .max_wait(Duration::from_millis(20))
        .build()
        .unwrap()
}

fn kind(err: &BoxError) -> RejectionKind {
    find_rejection(&**err).expect("a seawall rejection").kind()
}

fn active(h: &Handle) -> usize {
    h.snapshot().active
}

type Svc = seawall_bulkhead::Bulkhead<mock::Mock<Req, &'static str>>;
type Call = task::Spawn<<Svc as Service<Req>>::Future>;

/// A bulkhead from `l` over a mock that is ready for ten calls, and the mock's handle.
fn served(l: &BulkheadLayer) -> (Svc, mock::Handle<Req, &'static str>) {
    let (svc, mut inner) = mock::pair();
    inner.allow(10);
    (l.layer(svc), inner)
}

/// Waits for readiness, makes a call and checks it is in flight: running or waiting.
async fn start(svc: &mut Svc) -> Call {
    let mut call = task::spawn(svc.ready().await.unwrap().call(Req::new("x")));
    assert_pending!(call.poll());
    call
}

/// Waits for readiness, makes a call and checks it is turned away on its first
/// poll: its error.
async fn turned_away(svc: &mut Svc) -> BoxError {
    let mut call = task::spawn(svc.ready().await.unwrap().call(Req::new("x")));
    assert_ready!(call.poll()).unwrap_err()
}

#[tokio::test(start_paused = true)]
async fn the_limit_is_the_smaller_of_the_own_limit_and_the_allotment() {
    let l = layer(4, 0);
    let h = l.handle();
    assert_eq!(h.allotment(), None);
    h.set_allotment(Some(2));
    assert_eq!(h.allotment(), Some(2));
    let s = h.snapshot();
    assert_eq!((s.limit, s.allotment, s.max_concurrent), (2, Some(2), 4));
    // A ceiling above the own limit changes nothing; a huge one is no ceiling.
    h.set_allotment(Some(10));
    assert_eq!(h.snapshot().limit, 4);
    h.set_allotment(Some(usize::MAX));
    assert_eq!(h.snapshot().limit, 4);
    // A forced limit is lowered by the allotment too.
    h.force(3).unwrap();
    h.set_allotment(Some(1));
    assert_eq!(h.snapshot().limit, 1);
    h.set_allotment(None);
    assert_eq!(h.snapshot().limit, 3);
}

#[tokio::test(start_paused = true)]
async fn admissions_stop_at_the_allotment_and_lowering_it_preempts_no_call() {
    let l = layer(4, 0);
    let h = l.handle();
    let (mut svc, mut inner) = served(&l);
    h.set_allotment(Some(2));
    let mut calls = Vec::new();
    for _ in 0..2 {
        calls.push(start(&mut svc).await);
    }
    let err = turned_away(&mut svc).await;
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
    // Lowered to 1 with 2 running: both keep running, nothing new is admitted.
    h.set_allotment(Some(1));
    assert_eq!(active(&h), 2);
    turned_away(&mut svc).await;
    // One ends: still at the allotment of 1, so a newcomer is refused.
    let (_, send) = inner.next_request().await.unwrap();
    send.send_response("ok");
    assert_ready!(calls[0].poll()).unwrap();
    assert_eq!(active(&h), 1);
    turned_away(&mut svc).await;
    // Raised: admitted again.
    h.set_allotment(Some(3));
    let _sixth = start(&mut svc).await;
    assert_eq!(active(&h), 2);
}

#[tokio::test(start_paused = true)]
async fn an_allotment_of_zero_rejects_at_once_as_full_even_with_a_queue() {
    let l = layer(4, 8);
    let h = l.handle();
    let (mut svc, mut inner) = served(&l);
    h.set_allotment(Some(0));
    assert_eq!(h.snapshot().limit, 0);
    let err = turned_away(&mut svc).await;
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
    let s = h.snapshot();
    assert_eq!((s.rejected_full, s.queued, s.admitted), (1, 0, 0));
    // With a share again, the queue is back: the second call over it waits.
    h.set_allotment(Some(1));
    let mut first = start(&mut svc).await;
    let mut waiter = start(&mut svc).await;
    assert_eq!(h.snapshot().queued, 1);
    // Dropping to zero keeps the waiter in line (until its max_wait)...
    h.set_allotment(Some(0));
    assert_eq!(h.snapshot().queued, 1);
    // ...and it times out there, since no slot is handed over at zero.
    let (_, send) = inner.next_request().await.unwrap();
    send.send_response("ok");
    assert_ready!(first.poll()).unwrap();
    tokio::time::sleep(Duration::from_millis(25)).await;
    let err = assert_ready!(waiter.poll()).unwrap_err();
    assert_eq!(kind(&err), RejectionKind::BulkheadTimeout);
}

#[tokio::test(start_paused = true)]
async fn demand_is_the_period_s_peaks_and_full_rejections_capped_at_the_own_limit() {
    let l = layer(3, 1);
    let h = l.handle();
    let (mut svc, mut inner) = served(&l);
    let d = h.take_demand();
    assert_eq!(
        (d.peak_active, d.peak_queued, d.rejected_full, d.wanted()),
        (0, 0, 0, 0)
    );
    assert_eq!(d.own_limit, 3);
    h.set_allotment(Some(1));
    let mut running = start(&mut svc).await;
    let waiting = start(&mut svc).await;
    for _ in 0..2 {
        turned_away(&mut svc).await;
    }
    let d = h.take_demand();
    assert_eq!((d.peak_active, d.peak_queued, d.rejected_full), (1, 1, 2));
    // 1 + 1 + 2 = 4, but the bulkhead could never use more than its own 3.
    assert_eq!(d.wanted(), 3);
    // A new period starts with no admission and the waiter still in line;
    // rejections are per period.
    let d = h.take_demand();
    assert_eq!((d.peak_active, d.peak_queued, d.rejected_full), (0, 1, 0));
    assert_eq!(d.wanted(), 1);
    drop(waiting);
    let (_, send) = inner.next_request().await.unwrap();
    send.send_response("ok");
    assert_ready!(running.poll()).unwrap();
    // The waiter was in line during this period, not during the next.
    assert_eq!(h.take_demand().peak_queued, 1);
    let d = h.take_demand();
    assert_eq!((d.peak_active, d.peak_queued, d.wanted()), (0, 0, 0));
    // An admission in the period counts everything active with it.
    let _a = start(&mut svc).await;
    assert_eq!(h.take_demand().peak_active, 1);
    // The snapshot's own peaks are untouched by the periods.
    let s = h.snapshot();
    assert_eq!((s.peak_active, s.peak_queued), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn resetting_the_peaks_keeps_the_period_peak_from_hiding_a_later_high() {
    let l = layer(3, 0);
    let h = l.handle();
    let (mut svc, _inner) = served(&l);
    let mut a = task::spawn(svc.ready().await.unwrap().call(Req::new("x")));
    let mut b = task::spawn(svc.ready().await.unwrap().call(Req::new("x")));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    drop(b);
    h.reset_peaks();
    assert_eq!(h.snapshot().peak_active, 1);
    // Back to two active: both peaks see it.
    let _c = start(&mut svc).await;
    assert_eq!(h.snapshot().peak_active, 2);
    assert_eq!(h.take_demand().peak_active, 2);
}

#[tokio::test(start_paused = true)]
async fn a_moving_allotment_is_sent_as_a_limit_change_only_when_it_moves_the_limit() {
    use seawall_bulkhead::{BulkheadEvent, LimitCause};
    let l = layer(4, 0);
    let h = l.handle();
    let mut events = h.subscribe();
    h.set_allotment(Some(2));
    h.set_allotment(Some(3));
    // Above the own limit of 4: back to 4; then lifted, still 4: nothing sent.
    h.set_allotment(Some(9));
    h.set_allotment(None);
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let BulkheadEvent::LimitChanged {
            from, to, cause, ..
        } = e
        {
            seen.push((from, to, cause));
        }
    }
    assert_eq!(
        seen,
        vec![
            (4, 2, LimitCause::Allotment),
            (2, 3, LimitCause::Allotment),
            (3, 4, LimitCause::Allotment),
        ]
    );
    assert_eq!(LimitCause::Allotment.as_str(), "allotment");
}
