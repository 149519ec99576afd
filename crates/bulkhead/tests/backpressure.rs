//! Backpressure mode, driven by hand with a paused clock: `poll_ready` reserves the
//! slot and is pending while the bulkhead is full; reserved slots never leak.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::time::Duration;

use seawall_bulkhead::{Backpressure, BackpressureLayer, BulkheadConfig, BulkheadLayer, Handle};
use seawall_core::{find_rejection, BoxError, RejectionKind};
use tokio_test::{assert_pending, assert_ready_err, assert_ready_ok, task};
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_test::mock;

/// Any request type: these tests use plain strings.
type Mock = mock::Mock<&'static str, &'static str>;
type MockHandle = mock::Handle<&'static str, &'static str>;
type Svc = mock::Spawn<Backpressure<Mock>>;

/// `max_queue` 10 and `max_wait` 20 ms are set, and unused in this mode.
fn bulkhead(max_concurrent: usize) -> BulkheadLayer {
    BulkheadLayer::builder("freight")
        .max_concurrent(max_concurrent)
        .max_queue(10)
        .max_wait(Duration::from_millis(20))
        .build()
        .unwrap()
}

fn layer(max_concurrent: usize) -> BackpressureLayer {
    bulkhead(max_concurrent).backpressure()
}

fn spawn(l: &BackpressureLayer) -> (Svc, MockHandle) {
    let (inner, handle) = mock::pair();
    (mock::Spawn::new(l.layer(inner)), handle)
}

/// (active, queued): active counts reserved slots too.
fn counts(h: &Handle) -> (usize, usize) {
    let s = h.snapshot();
    (s.active, s.queued)
}

fn kind(err: &BoxError) -> RejectionKind {
    find_rejection(&**err).expect("a seawall rejection").kind()
}

/// Two services from `l`: the first holds the only slot, the second waits in line
/// for it. Their inner handles come back too, since dropping one closes its service.
fn holder_and_waiter(l: &BackpressureLayer) -> (Svc, Svc, (MockHandle, MockHandle)) {
    let (mut holder, holder_inner) = spawn(l);
    let (mut waiter, waiter_inner) = spawn(l);
    assert_ready_ok!(holder.poll_ready());
    assert_pending!(waiter.poll_ready());
    (holder, waiter, (holder_inner, waiter_inner))
}

type Call = task::Spawn<<Backpressure<Mock> as Service<&'static str>>::Future>;

/// Reserves a slot on `svc` and sends `body` through it to the inner service:
/// the call in flight and the inner service's reply handle.
async fn send_through(
    svc: &mut Svc,
    inner: &mut MockHandle,
    body: &'static str,
) -> (Call, mock::SendResponse<&'static str>) {
    assert_ready_ok!(svc.poll_ready());
    let mut call = task::spawn(svc.call(body));
    assert_pending!(call.poll());
    let (seen, reply) = inner.next_request().await.unwrap();
    assert_eq!(seen, body);
    (call, reply)
}

#[tokio::test(start_paused = true)]
async fn poll_ready_reserves_the_slot_is_pending_while_full_and_is_woken_when_it_frees() {
    let l = layer(1);
    let h = l.handle();
    let (mut a, mut inner) = spawn(&l);
    assert_ready_ok!(a.poll_ready());
    assert!(a.get_ref().is_reserved());
    assert_eq!(counts(&h), (1, 0), "reserved before any call");

    // A clone does not share the reservation: it waits for a slot of its own.
    let mut b = mock::Spawn::new(a.get_ref().clone());
    assert!(!b.get_ref().is_reserved());
    assert_pending!(b.poll_ready());
    assert_eq!(counts(&h), (1, 1));

    let mut call = task::spawn(a.call("one"));
    assert!(!a.get_ref().is_reserved(), "the call took the reservation");
    assert_pending!(call.poll());
    let (seen, reply) = inner.next_request().await.unwrap();
    assert_eq!(seen, "one");
    assert!(!b.is_woken(), "no slot has freed yet");

    reply.send_response("quote");
    assert_eq!(assert_ready_ok!(call.poll()), "quote");
    assert!(
        b.is_woken(),
        "the freed slot was handed to the waiting service"
    );
    assert_ready_ok!(b.poll_ready());
    assert_eq!(counts(&h), (1, 0));
    assert_eq!(h.snapshot().admitted, 2);
}

#[tokio::test(start_paused = true)]
async fn a_reserved_slot_never_used_is_freed_when_the_service_is_dropped() {
    let l = layer(1);
    let h = l.handle();
    let (a, mut b, _inners) = holder_and_waiter(&l);

    drop(a);
    assert!(b.is_woken());
    assert_ready_ok!(b.poll_ready());
    assert_eq!(counts(&h), (1, 0));
    drop(b);
    assert_eq!(counts(&h), (0, 0));
    assert_eq!(
        h.snapshot().abandoned,
        0,
        "reserved slots were admitted, not abandoned"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiting_service_dropped_leaves_the_line_and_takes_nothing() {
    let l = layer(1);
    let h = l.handle();
    let (a, b, _inners) = holder_and_waiter(&l);
    drop(b);
    assert_eq!(counts(&h), (1, 0));
    assert_eq!(h.snapshot().abandoned, 1);

    drop(a);
    assert_eq!(counts(&h), (0, 0));
    let (mut c, _inner_c) = spawn(&l);
    assert_ready_ok!(c.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn a_service_handed_a_slot_but_dropped_before_it_polls_passes_it_on() {
    let l = layer(1);
    let h = l.handle();
    let (a, b, _inners) = holder_and_waiter(&l);
    let (mut c, _ic) = spawn(&l);
    assert_pending!(c.poll_ready());
    assert_eq!(counts(&h), (1, 2));

    drop(a);
    assert!(b.is_woken());
    assert!(!c.is_woken(), "first come, first served");
    drop(b);
    assert!(c.is_woken());
    assert_ready_ok!(c.poll_ready());
    assert_eq!(counts(&h), (1, 0));
    drop(c);
    assert_eq!(counts(&h), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_inner_readiness_error_frees_the_slot() {
    let l = layer(1);
    let h = l.handle();
    let (mut a, mut inner) = spawn(&l);
    inner.send_error("connection pool closed");
    let err = assert_ready_err!(a.poll_ready());
    assert_eq!(err.to_string(), "connection pool closed");
    assert!(!a.get_ref().is_reserved());
    assert_eq!(counts(&h), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_inner_error_and_a_cancelled_call_free_the_slot() {
    let l = layer(1);
    let h = l.handle();
    let (mut a, mut inner) = spawn(&l);

    let (mut call, reply) = send_through(&mut a, &mut inner, "one").await;
    reply.send_error("500");
    assert_eq!(assert_ready_err!(call.poll()).to_string(), "500");
    assert_eq!(counts(&h), (0, 0));

    let (call, _reply) = send_through(&mut a, &mut inner, "two").await;
    assert_eq!(counts(&h), (1, 0));
    drop(call);
    assert_eq!(counts(&h), (0, 0), "the cancelled call freed its slot");
}

#[tokio::test(start_paused = true)]
async fn the_slot_is_held_while_the_inner_service_is_not_ready() {
    let l = layer(1);
    let h = l.handle();
    let (mut a, mut inner) = spawn(&l);
    let (mut b, _ib) = spawn(&l);
    inner.allow(0);
    assert_pending!(a.poll_ready());
    assert!(a.get_ref().is_reserved());
    assert_pending!(b.poll_ready());
    assert_eq!(counts(&h), (1, 1));

    inner.allow(1);
    assert!(a.is_woken());
    assert_ready_ok!(a.poll_ready());
    assert!(!b.is_woken());
}

#[tokio::test(start_paused = true)]
async fn there_is_no_queue_bound_and_no_wait_limit_in_this_mode() {
    let l = layer(1);
    let h = l.handle();
    let (mut a, _ia) = spawn(&l);
    assert_ready_ok!(a.poll_ready());
    // More waiting services than `max_queue` (10): none is turned away.
    let mut waiting: Vec<(Svc, MockHandle)> = (0..15).map(|_| spawn(&l)).collect();
    for (svc, _) in &mut waiting {
        assert_pending!(svc.poll_ready());
    }
    assert_eq!(counts(&h), (1, 15));

    // And none times out at `max_wait` (20 ms): whoever polls decides how long to wait.
    tokio::time::advance(Duration::from_secs(3600)).await;
    for (svc, _) in &mut waiting {
        assert!(!svc.is_woken());
        assert_pending!(svc.poll_ready());
    }
    let s = h.snapshot();
    assert_eq!((s.rejected_full, s.rejected_timeout), (0, 0));

    // A freed slot goes to the first in line only.
    drop(a);
    let woken: Vec<bool> = waiting.iter().map(|(svc, _)| svc.is_woken()).collect();
    assert_eq!(woken.iter().filter(|w| **w).count(), 1);
    assert!(woken[0]);
    assert_ready_ok!(waiting[0].0.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn growing_the_limit_wakes_a_waiting_service() {
    let l = layer(1);
    let h = l.handle();
    let (_a, mut b, _inners) = holder_and_waiter(&l);
    h.reconfigure(BulkheadConfig {
        max_concurrent: 2,
        ..h.config()
    })
    .unwrap();
    assert!(b.is_woken());
    assert_ready_ok!(b.poll_ready());
    assert_eq!(counts(&h), (2, 0));
}

#[tokio::test(start_paused = true)]
async fn a_call_without_poll_ready_never_waits() {
    let l = layer(1);
    let h = l.handle();
    let ok = service_fn(|s: &'static str| async move { Ok::<_, Infallible>(s.len()) });

    // A free slot and a ready inner service: it goes out.
    let mut unpolled = l.layer(ok);
    assert_eq!(unpolled.call("01310-100").await.unwrap(), 9);

    // Every slot reserved elsewhere: turned away at once as full.
    let mut holder = l.layer(ok);
    holder.ready().await.unwrap();
    let err = unpolled.call("01310-100").await.unwrap_err();
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
    assert_eq!(h.snapshot().rejected_full, 1);
    drop(holder);

    // A free slot but an inner service that is not ready: an error, and the slot is freed.
    let (inner, mut mock) = mock::pair::<&'static str, &'static str>();
    mock.allow(0);
    let mut unready = l.layer(inner);
    let err = unready.call("x").await.unwrap_err();
    assert!(find_rejection(&*err).is_none());
    assert_eq!(counts(&h), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn both_modes_share_the_bulkhead_of_their_layer() {
    let plain = BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .max_queue(0)
        .build()
        .unwrap();
    let pressured = plain.clone().backpressure();
    let h = plain.handle();
    let (mut a, _ia) = spawn(&pressured);
    assert_ready_ok!(a.poll_ready());

    // The reserved slot is the bulkhead's only one: a default-mode call is turned away.
    let ok = service_fn(|s: &'static str| async move { Ok::<_, Infallible>(s) });
    let err = plain.layer(ok).oneshot("x").await.unwrap_err();
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);

    // A default-mode call finishing wakes a service waiting in backpressure mode.
    drop(a);
    let (inner, mut mock) = mock::pair::<&'static str, &'static str>();
    let mut call = task::spawn(plain.layer(inner).oneshot("y"));
    assert_pending!(call.poll());
    let (_, reply) = mock.next_request().await.unwrap();
    let (mut b, _ib) = spawn(&pressured);
    assert_pending!(b.poll_ready());
    reply.send_response("done");
    assert_eq!(assert_ready_ok!(call.poll()), "done");
    assert!(b.is_woken());
    assert_ready_ok!(b.poll_ready());
    assert_eq!(counts(&h), (1, 0));
}

#[test]
fn services_futures_and_layers_are_send_sync_and_clone() {
    fn send_sync_clone<T: Send + Sync + Clone>() {}
    fn send<T: Send>() {}
    send_sync_clone::<Backpressure<Mock>>();
    send_sync_clone::<BackpressureLayer>();
    send::<<Backpressure<Mock> as Service<&'static str>>::Future>();
}
