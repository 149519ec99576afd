//! The bulkhead as a Tower service, driven by hand with a paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use seawall_bulkhead::{BulkheadConfig, BulkheadLayer, Handle, PermitHandle};
use seawall_core::{find_rejection, BoxError, BulkheadTimeout, Deadline, RejectionKind};
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready, assert_ready_ok, task};
use tower::{Layer, Service, ServiceExt};
use tower_test::mock;

type Req = http::Request<&'static str>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn req(body: &'static str) -> Req {
    http::Request::new(body)
}

fn layer(max_concurrent: usize, max_queue: usize) -> BulkheadLayer {
    BulkheadLayer::builder("freight")
        .max_concurrent(max_concurrent)
        .max_queue(max_queue)
        .max_wait(ms(20))
        .build()
        .unwrap()
}

fn kind(err: &BoxError) -> RejectionKind {
    find_rejection(&**err).expect("a seawall rejection").kind()
}

fn counts(h: &Handle) -> (usize, usize) {
    let s = h.snapshot();
    (s.active, s.queued)
}

type Mock = mock::Mock<Req, &'static str>;
type MockHandle = mock::Handle<Req, &'static str>;

fn pair(l: &BulkheadLayer) -> (seawall_bulkhead::Bulkhead<Mock>, MockHandle) {
    let (svc, handle) = mock::pair::<Req, &'static str>();
    (l.layer(svc), handle)
}

/// A bulkhead from `l` over a fresh [`CountingSvc`], and the counters it feeds.
fn counted(l: &BulkheadLayer) -> (seawall_bulkhead::Bulkhead<CountingSvc>, Counting) {
    let c = Counting::new();
    (l.layer(CountingSvc::new(&c)), c)
}

/// Starts a call and checks it is still in flight: holding a slot or waiting for one.
fn start<S>(svc: &mut S, body: &'static str) -> task::Spawn<S::Future>
where
    S: Service<Req>,
    S::Response: std::fmt::Debug,
    S::Error: std::fmt::Debug,
{
    let mut call = task::spawn(svc.call(req(body)));
    assert_pending!(call.poll());
    call
}

type MockCall = task::Spawn<<seawall_bulkhead::Bulkhead<Mock> as Service<Req>>::Future>;

/// Starts a call and takes it from the mock behind the bulkhead, checking it arrived
/// as sent: the call in flight and the mock's reply handle for it.
async fn through(
    svc: &mut seawall_bulkhead::Bulkhead<Mock>,
    inner: &mut MockHandle,
    body: &'static str,
) -> (MockCall, mock::SendResponse<&'static str>) {
    let call = start(svc, body);
    let (seen, send) = inner.next_request().await.unwrap();
    assert_eq!(*seen.body(), body);
    (call, send)
}

/// Runs the clock to 1 ms short of `after`, checks the waiter is still in line, then
/// to `after`: the error it is turned away with then.
async fn turned_away_at<F, R>(waiter: &mut task::Spawn<F>, after: Duration) -> BoxError
where
    F: std::future::Future<Output = Result<R, BoxError>>,
    R: std::fmt::Debug,
{
    tokio::time::advance(after - ms(1)).await;
    assert_pending!(waiter.poll());
    tokio::time::advance(ms(1)).await;
    assert_ready!(waiter.poll()).unwrap_err()
}

/// How long a call waited before it was turned away with a [`BulkheadTimeout`].
fn waited(err: &BoxError) -> Duration {
    err.downcast_ref::<BulkheadTimeout>()
        .expect("a bulkhead timeout")
        .waited()
}

// ---- tower's concurrency-limit cases -------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_dropped_response_future_releases_its_slot() {
    let l = layer(1, 0);
    let h = l.handle();
    let (mut svc, mut inner) = pair(&l);
    let (r1, _send) = through(&mut svc, &mut inner, "one").await;
    assert_eq!(counts(&h), (1, 0));

    // Full now: the next call is turned away.
    let err = svc.call(req("two")).await.unwrap_err();
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);

    drop(r1);
    assert_eq!(counts(&h), (0, 0));
    let (mut r3, send) = through(&mut svc, &mut inner, "three").await;
    send.send_response("ok");
    assert_eq!(assert_ready_ok!(r3.poll()), "ok");
    assert_eq!(counts(&h), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_inner_error_releases_the_slot() {
    let l = layer(1, 0);
    let h = l.handle();
    let (mut svc, mut inner) = pair(&l);
    let (mut r1, send) = through(&mut svc, &mut inner, "one").await;
    send.send_error("boom");
    let err = assert_ready!(r1.poll()).unwrap_err();
    assert_eq!(err.to_string(), "boom");
    assert!(find_rejection(&*err).is_none());
    assert_eq!(counts(&h), (0, 0));
    assert_eq!(h.snapshot().admitted, 1);
}

#[tokio::test(start_paused = true)]
async fn an_inner_readiness_error_releases_the_slot() {
    let l = layer(1, 0);
    let h = l.handle();
    let (mut svc, mut inner) = pair(&l);
    inner.send_error("not ready");
    let err = svc.call(req("one")).await.unwrap_err();
    assert_eq!(err.to_string(), "not ready");
    assert_eq!(counts(&h), (0, 0));
}

/// An inner service whose `call` panics for the request "panic"; any other call
/// stays in flight.
#[derive(Clone)]
struct PanicsOnCall;

impl Service<Req> for PanicsOnCall {
    type Response = &'static str;
    type Error = Infallible;
    type Future = std::future::Pending<Result<&'static str, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        assert_ne!(*req.body(), "panic", "the inner service panics in call");
        std::future::pending()
    }
}

/// Calls `svc` with the request that makes its inner `call` panic, and catches it.
fn call_and_catch_the_panic(svc: &mut seawall_bulkhead::Bulkhead<PanicsOnCall>) {
    let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drop(svc.call(req("panic")));
    }));
    assert!(called.is_err(), "the inner call panicked");
}

#[tokio::test(start_paused = true)]
async fn a_slot_taken_by_an_inner_call_that_panicked_is_freed_while_the_panic_unwinds() {
    let l = layer(1, 0);
    let h = l.handle();
    let mut svc = l.layer(PanicsOnCall);
    call_and_catch_the_panic(&mut svc);
    // Free as soon as the panic is caught, with the service that panicked still
    // alive and not called again: another service of the layer gets the only slot.
    assert_eq!(counts(&h), (0, 0));
    let mut other = l.layer(PanicsOnCall);
    let next = start(&mut other, "next");
    assert_eq!(counts(&h), (1, 0));
    assert_eq!(h.snapshot().admitted, 2);
    assert_eq!(h.snapshot().rejected_full, 0);
    drop(next);
    // The service that panicked works on: its next call takes the slot.
    let _again = start(&mut svc, "again");
    assert_eq!(counts(&h), (1, 0));
    assert_eq!(h.snapshot().rejected_full, 0);
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_inner_call_of_a_full_bulkheads_service_frees_only_its_own_slot() {
    let l = layer(2, 0);
    let h = l.handle();
    let mut svc = l.layer(PanicsOnCall);
    let _running = start(&mut svc, "running");
    call_and_catch_the_panic(&mut svc);
    assert_eq!(counts(&h), (1, 0), "the running call keeps its slot");
    drop(svc);
    assert_eq!(
        counts(&h),
        (1, 0),
        "dropping the service frees nothing more"
    );
}

/// An inner service not ready when the bulkhead first asks it (at `call`), whose
/// `poll_ready` panics when asked again (from the response future); counts how
/// often it is asked.
#[derive(Clone, Default)]
struct PanicsWhenAskedAgain(Arc<AtomicUsize>);

impl Service<Req> for PanicsWhenAskedAgain {
    type Response = &'static str;
    type Error = Infallible;
    type Future = std::future::Pending<Result<&'static str, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        let asked = self.0.fetch_add(1, Ordering::SeqCst);
        assert_eq!(asked, 0, "the inner service panics in poll_ready");
        Poll::Pending
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        std::future::pending()
    }
}

#[tokio::test(start_paused = true)]
async fn a_slot_held_for_an_inner_service_whose_poll_ready_panics_in_the_future_is_freed_while_it_unwinds(
) {
    let l = layer(1, 0);
    let h = l.handle();
    let asked = Arc::new(AtomicUsize::new(0));
    let mut svc = l.layer(PanicsWhenAskedAgain(asked.clone()));
    let mut fut = task::spawn(svc.call(req("one")));
    assert_eq!(
        counts(&h),
        (1, 0),
        "the call holds the slot while its service is not ready"
    );
    let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll()));
    assert!(polled.is_err(), "the inner poll_ready panicked");
    assert_eq!(counts(&h), (0, 0), "freed with the future alive");
    // Polled again, it answers an error without asking the inner service again.
    let err = assert_ready!(fut.poll()).unwrap_err();
    assert!(err.to_string().contains("polled after completion"), "{err}");
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    assert_eq!(counts(&h), (0, 0));
}

/// An inner service that counts how often it is asked for readiness and cloned.
#[derive(Clone)]
struct Counting {
    ready_polls: Arc<AtomicUsize>,
    clones: Arc<AtomicUsize>,
}

impl Counting {
    fn ready_polls(&self) -> usize {
        self.ready_polls.load(Ordering::SeqCst)
    }

    fn new() -> Self {
        Self {
            ready_polls: Arc::new(AtomicUsize::new(0)),
            clones: Arc::new(AtomicUsize::new(0)),
        }
    }
}

#[derive(Clone)]
struct CountingSvc(Counting);

impl CountingSvc {
    fn new(c: &Counting) -> Self {
        Self(Counting {
            ready_polls: c.ready_polls.clone(),
            clones: c.clones.clone(),
        })
    }
}

impl Service<Req> for CountingSvc {
    type Response = &'static str;
    type Error = Infallible;
    type Future = std::future::Pending<Result<&'static str, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.ready_polls.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        std::future::pending()
    }
}

#[tokio::test(start_paused = true)]
async fn a_readiness_poll_without_a_call_holds_nothing() {
    let l = layer(1, 0);
    let h = l.handle();
    let c = Counting::new();
    let mut s1 = l.layer(CountingSvc::new(&c));
    let mut s2 = s1.clone();
    // Readiness is answered without reserving a slot or touching the inner service.
    for _ in 0..3 {
        assert!(matches!(
            task::spawn(()).enter(|cx, _| s1.poll_ready(cx)),
            Poll::Ready(Ok(()))
        ));
    }
    assert_eq!(counts(&h), (0, 0));
    assert_eq!(c.ready_polls(), 0);
    // s1 never calls; s2 gets the only slot.
    let mut r2 = task::spawn(s2.ready().await.unwrap().call(req("two")));
    assert_pending!(r2.poll());
    assert_eq!(counts(&h), (1, 0));
    assert_eq!(c.ready_polls(), 1);
}

#[tokio::test(start_paused = true)]
async fn many_waiters_are_admitted_first_in_first_out() {
    let l = layer(1, 5);
    let h = l.handle();
    let (mut svc, mut inner) = pair(&l);
    let (mut first, mut send) = through(&mut svc, &mut inner, "0").await;

    let mut waiters: Vec<_> = ["1", "2", "3", "4"]
        .into_iter()
        .map(|b| task::spawn(svc.call(req(b))))
        .collect();
    for w in &mut waiters {
        assert_pending!(w.poll());
    }
    assert_eq!(counts(&h), (1, 4));

    for (i, expected) in ["1", "2", "3", "4"].into_iter().enumerate() {
        send.send_response("done");
        if i == 0 {
            assert_ready_ok!(first.poll());
        } else {
            assert_ready_ok!(waiters[i - 1].poll());
        }
        // Only the front of the line was woken, and it gets the slot.
        assert!(waiters[i].is_woken());
        if let Some(next) = waiters.get(i + 1) {
            assert!(!next.is_woken());
        }
        // A newcomer arriving now does not overtake the line.
        if i == 0 {
            let mut late = task::spawn(svc.call(req("late")));
            assert_pending!(late.poll());
            assert_eq!(counts(&h), (1, 4));
            drop(late);
        }
        assert_pending!(waiters[i].poll());
        let (seen, s) = inner.next_request().await.unwrap();
        assert_eq!(*seen.body(), expected);
        send = s;
    }
    send.send_response("done");
    assert_ready_ok!(waiters[3].poll());
    assert_eq!(counts(&h), (0, 0));
    let s = h.snapshot();
    assert_eq!((s.admitted, s.abandoned, s.rejected_full), (5, 1, 0));
}

// ---- limits ----------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn exactly_max_concurrent_active_and_max_queue_waiting_then_full_at_once() {
    let l = BulkheadLayer::builder("freight").build().unwrap(); // 8 / 10 / 20 ms
    let h = l.handle();
    let (mut svc, c) = counted(&l);
    let mut calls = Vec::new();
    for _ in 0..18 {
        calls.push(start(&mut svc, "x"));
    }
    assert_eq!(counts(&h), (8, 10));
    assert_eq!(c.ready_polls(), 8);
    // The 19th is rejected on its first poll: no timer, no waiting.
    let mut extra = task::spawn(svc.call(req("x")));
    let err = assert_ready!(extra.poll()).unwrap_err();
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
    assert_eq!(err.to_string(), "bulkhead `freight` is full");
    assert_eq!(h.snapshot().rejected_full, 1);
    assert_eq!(counts(&h), (8, 10));
}

#[tokio::test(start_paused = true)]
async fn no_queue_rejects_at_once_when_busy() {
    let l = layer(2, 0);
    let (mut svc, _) = counted(&l);
    let mut a = task::spawn(svc.call(req("a")));
    let mut b = task::spawn(svc.call(req("b")));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    let err = svc.call(req("c")).await.unwrap_err();
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
}

#[tokio::test(start_paused = true)]
async fn a_response_future_polled_again_after_it_answered_errs_without_touching_the_slots() {
    let l = layer(1, 0);
    let h = l.handle();
    let (mut svc, mut inner) = pair(&l);
    // Admitted and answered: the slot is free at once, and a second poll errs.
    let (mut admitted, send) = through(&mut svc, &mut inner, "one").await;
    send.send_response("answer");
    assert_eq!(assert_ready_ok!(admitted.poll()), "answer");
    assert_eq!(counts(&h), (0, 0));
    let again = assert_ready!(admitted.poll()).unwrap_err();
    assert!(again.to_string().contains("polled after completion"));
    // Turned away: the rejection once, then the same error.
    let (_busy, _send) = through(&mut svc, &mut inner, "two").await;
    let mut rejected = task::spawn(svc.call(req("three")));
    let err = assert_ready!(rejected.poll()).unwrap_err();
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
    let again = assert_ready!(rejected.poll()).unwrap_err();
    assert!(find_rejection(&*again).is_none());
    assert!(again.to_string().contains("polled after completion"));
    assert_eq!(counts(&h), (1, 0));
    assert_eq!(h.snapshot().admitted, 2);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_times_out_at_max_wait() {
    let l = layer(1, 1);
    let h = l.handle();
    let (mut svc, c) = counted(&l);
    let _busy = start(&mut svc, "busy");
    let mut waiter = start(&mut svc, "wait");
    let err = turned_away_at(&mut waiter, ms(20)).await;
    assert_eq!(kind(&err), RejectionKind::BulkheadTimeout);
    let timeout = err.downcast_ref::<BulkheadTimeout>().unwrap();
    assert_eq!(timeout.waited(), ms(20));
    assert_eq!(timeout.name(), "freight");
    let s = h.snapshot();
    assert_eq!(
        (s.active, s.queued, s.rejected_timeout, s.rejected_full),
        (1, 0, 1, 0)
    );
    // It never reached the inner service.
    assert_eq!(c.ready_polls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_times_out_at_the_remaining_deadline_when_shorter() {
    let l = layer(1, 1);
    let (mut svc, _) = counted(&l);
    let _busy = start(&mut svc, "busy");

    let five = Deadline::after(Instant::now(), ms(5));
    let mut waiter = task::spawn(five.sync_scope(|| svc.call(req("wait"))));
    assert_pending!(waiter.poll());
    let err = turned_away_at(&mut waiter, ms(5)).await;
    assert_eq!(waited(&err), ms(5));

    // A deadline longer than max_wait does not extend the wait.
    let long = Deadline::after(Instant::now(), ms(300));
    let mut waiter = task::spawn(long.sync_scope(|| svc.call(req("wait"))));
    assert_pending!(waiter.poll());
    tokio::time::advance(ms(20)).await;
    let err = assert_ready!(waiter.poll()).unwrap_err();
    assert_eq!(waited(&err), ms(20));

    // A deadline already past: no wait at all.
    let past = Deadline::at(Instant::now());
    let err = past.sync_scope(|| svc.call(req("late"))).await.unwrap_err();
    assert_eq!(waited(&err), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_deadline_has_passed_never_waits_even_if_a_slot_frees_before_its_first_poll() {
    let l = layer(1, 1);
    let h = l.handle();
    let (mut svc, c) = counted(&l);
    let busy = start(&mut svc, "busy");

    // No free slot and a deadline already past: rejected, not put in line.
    let past = Deadline::at(Instant::now());
    let mut late = task::spawn(past.sync_scope(|| svc.call(req("late"))));
    assert_eq!(counts(&h), (1, 0));
    // The slot frees before the late call is first polled: it must not take it.
    drop(busy);
    let err = assert_ready!(late.poll()).unwrap_err();
    assert_eq!(waited(&err), Duration::ZERO);
    assert_eq!(counts(&h), (0, 0));
    let s = h.snapshot();
    assert_eq!((s.admitted, s.rejected_timeout, s.peak_queued), (1, 1, 0));
    assert_eq!(c.ready_polls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_leaves_the_queue_at_once_and_takes_no_slot() {
    let l = layer(1, 2);
    let h = l.handle();
    let (mut svc, mut inner) = pair(&l);
    let (mut busy, send) = through(&mut svc, &mut inner, "busy").await;
    let mut gone = task::spawn(svc.call(req("gone")));
    let mut next = task::spawn(svc.call(req("next")));
    assert_pending!(gone.poll());
    assert_pending!(next.poll());
    assert_eq!(counts(&h), (1, 2));
    drop(gone);
    assert_eq!(counts(&h), (1, 1));
    assert_eq!(h.snapshot().abandoned, 1);

    send.send_response("ok");
    assert_ready_ok!(busy.poll());
    assert!(next.is_woken());
    assert_pending!(next.poll());
    let (seen, _s) = inner.next_request().await.unwrap();
    assert_eq!(*seen.body(), "next");
    assert_eq!(counts(&h), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_handed_a_slot_but_dropped_passes_it_on() {
    let l = layer(1, 2);
    let h = l.handle();
    let (mut svc, c) = counted(&l);
    let busy = start(&mut svc, "busy");
    let mut a = task::spawn(svc.call(req("a")));
    let mut b = task::spawn(svc.call(req("b")));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    drop(busy); // the slot is handed to `a`…
    assert_eq!(counts(&h), (1, 1));
    drop(a); // …who is gone before it notices: `b` gets it.
    assert!(b.is_woken());
    assert_pending!(b.poll());
    assert_eq!(counts(&h), (1, 0));
    assert_eq!(c.ready_polls(), 2);
    let s = h.snapshot();
    assert_eq!((s.admitted, s.abandoned), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn nothing_downstream_is_touched_while_waiting_and_readiness_is_driven_with_the_slot() {
    let l = layer(1, 1);
    let h = l.handle();
    let (mut svc, mut inner) = pair(&l);
    let (mut first, send) = through(&mut svc, &mut inner, "first").await;

    // The inner service stops being ready; a waiter does not ask it.
    inner.allow(0);
    let mut second = start(&mut svc, "second");
    send.send_response("ok");
    assert_ready_ok!(first.poll());

    // With the slot, the future waits for inner readiness — holding the slot.
    assert_pending!(second.poll());
    assert_eq!(counts(&h), (1, 0));
    assert!(matches!(inner.poll_request(), Poll::Pending));
    inner.allow(1);
    assert!(second.is_woken());
    assert_pending!(second.poll());
    let (seen, send) = inner.next_request().await.unwrap();
    assert_eq!(*seen.body(), "second");
    send.send_response("ok");
    assert_ready_ok!(second.poll());
    assert_eq!(counts(&h), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_free_slot_with_an_unready_inner_service_waits_for_it_holding_the_slot() {
    let l = layer(1, 1);
    let h = l.handle();
    let (mut svc, mut inner) = pair(&l);
    inner.allow(0);
    // Admitted at call time; the inner service is asked once and is not ready.
    let mut call = task::spawn(svc.call(req("one")));
    assert_eq!(counts(&h), (1, 0));
    assert_pending!(call.poll());
    assert!(matches!(inner.poll_request(), Poll::Pending));
    // The future registered the caller's waker with the inner service.
    inner.allow(1);
    assert!(call.is_woken());
    assert_pending!(call.poll());
    let (seen, send) = inner.next_request().await.unwrap();
    assert_eq!(*seen.body(), "one");
    send.send_response("ok");
    assert_eq!(assert_ready_ok!(call.poll()), "ok");
    assert_eq!(counts(&h), (0, 0));
    // Dropped while waiting for the inner service, the call frees its slot too.
    inner.allow(0);
    let call = start(&mut svc, "two");
    assert_eq!(counts(&h), (1, 0));
    drop(call);
    assert_eq!(counts(&h), (0, 0));
}

/// A ready service that counts its clones and answers with the id of the copy
/// that was called.
#[derive(Debug)]
struct Copies {
    id: usize,
    made: Arc<AtomicUsize>,
    ready: Arc<std::sync::atomic::AtomicBool>,
}

impl Clone for Copies {
    fn clone(&self) -> Self {
        Self {
            id: self.made.fetch_add(1, Ordering::SeqCst) + 1,
            made: self.made.clone(),
            ready: self.ready.clone(),
        }
    }
}

impl Service<Req> for Copies {
    type Response = usize;
    type Error = Infallible;
    type Future = std::future::Ready<Result<usize, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.ready.load(Ordering::SeqCst) {
            Poll::Ready(Ok(()))
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        std::future::ready(Ok(self.id))
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_admitted_at_once_calls_the_inner_service_without_cloning_it() {
    let made = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let inner = Copies {
        id: 0,
        made: made.clone(),
        ready: ready.clone(),
    };
    let l = layer(2, 1);
    let h = l.handle();
    let mut svc = l.layer(inner);
    for _ in 0..10 {
        assert_eq!(svc.ready().await.unwrap().call(req("q")).await.unwrap(), 0);
    }
    assert_eq!(made.load(Ordering::SeqCst), 0);
    // Not ready at call time: the call takes the service it asked (copy 0) and
    // leaves a clone (copy 1) in its place, holding its slot meanwhile.
    ready.store(false, Ordering::SeqCst);
    let mut waiting = start(&mut svc, "q");
    assert_eq!(counts(&h), (1, 0));
    assert_eq!(made.load(Ordering::SeqCst), 1);
    ready.store(true, Ordering::SeqCst);
    assert_eq!(assert_ready_ok!(waiting.poll()), 0);
    assert_eq!(counts(&h), (0, 0));
    assert_eq!(svc.ready().await.unwrap().call(req("q")).await.unwrap(), 1);
    assert_eq!(made.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn services_built_from_one_layer_share_one_bulkhead() {
    let l = layer(1, 0);
    let c = Counting::new();
    let mut a = l.layer(CountingSvc::new(&c));
    let mut b = l.layer(CountingSvc::new(&c));
    let mut held = task::spawn(a.call(req("a")));
    assert_pending!(held.poll());
    let err = b.call(req("b")).await.unwrap_err();
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
    assert_eq!(a.handle().snapshot().rejected_full, 1);

    // A second layer is a separate bulkhead.
    let other = layer(1, 0);
    let mut o = other.layer(CountingSvc::new(&c));
    let mut f = task::spawn(o.call(req("o")));
    assert_pending!(f.poll());
    assert_eq!(other.handle().snapshot().active, 1);
}

// ---- runtime limits --------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn growing_admits_waiters_at_once_shrinking_preempts_nothing_and_revert_restores() {
    let l = layer(2, 10);
    let h = l.handle();
    let (mut svc, _) = counted(&l);
    let mut calls: Vec<_> = (0..6).map(|_| task::spawn(svc.call(req("x")))).collect();
    for f in &mut calls {
        assert_pending!(f.poll());
    }
    assert_eq!(counts(&h), (2, 4));

    let grown = BulkheadConfig {
        max_concurrent: 4,
        ..h.config()
    };
    h.reconfigure(grown).unwrap();
    assert_eq!(counts(&h), (4, 2));
    assert!(calls[2].is_woken() && calls[3].is_woken());
    assert!(!calls[4].is_woken());

    h.reconfigure(BulkheadConfig {
        max_concurrent: 1,
        ..grown
    })
    .unwrap();
    assert_eq!(counts(&h), (4, 2)); // nobody preempted
    drop(calls.remove(0));
    drop(calls.remove(0));
    drop(calls.remove(0));
    assert_eq!(counts(&h), (1, 2)); // nobody admitted above the new limit
    drop(calls.remove(0));
    assert_eq!(counts(&h), (1, 1));

    // Invalid limits are refused and change nothing.
    let err = h
        .reconfigure(BulkheadConfig {
            max_concurrent: 0,
            ..grown
        })
        .unwrap_err();
    assert_eq!(err.field(), "max_concurrent");
    assert_eq!(h.config().max_concurrent, 1);

    h.revert();
    let config = h.config();
    assert_eq!(
        (
            config.max_concurrent,
            config.queue.max_queue,
            config.queue.max_wait,
            config.adaptive,
            config.shadow
        ),
        (2, 10, ms(20), None, false)
    );
    assert_eq!(counts(&h), (2, 0));
    let s = h.snapshot();
    assert_eq!(
        (s.max_concurrent, s.queue.max_queue, s.queue.max_wait),
        (2, 10, ms(20))
    );
}

#[tokio::test(start_paused = true)]
async fn the_snapshot_reports_the_admission_wait_distribution() {
    let l = layer(1, 5);
    let h = l.handle();
    let (mut svc, _) = counted(&l);
    let first = start(&mut svc, "x");
    let mut second = start(&mut svc, "x");
    tokio::time::advance(ms(5)).await;
    drop(first);
    assert_pending!(second.poll());
    let s = h.snapshot();
    assert_eq!(s.admitted, 2);
    assert_eq!(s.wait.queued_admissions, 1);
    assert_eq!(s.wait.max, ms(5));
    assert_eq!(s.wait.p50, Duration::ZERO);
    assert_eq!(s.wait.p99, ms(5));
    assert_eq!(s.name, "freight");
}

// ---- the permit handle in the request's extensions ------------------------------

#[tokio::test(start_paused = true)]
async fn the_extension_permit_handle_keeps_the_slot_until_dropped() {
    let l = BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .max_queue(1)
        .build()
        .unwrap()
        .permit_in_extensions();
    let h = l.handle();
    let kept: Arc<Mutex<Option<PermitHandle>>> = Arc::default();
    let k = kept.clone();
    let mut svc = l.layer(tower::service_fn(move |req: Req| {
        // A handler that hands work to a task keeps the handle there.
        let handle = req.extensions().get::<PermitHandle>().cloned();
        *k.lock().unwrap() = handle;
        async { Ok::<_, Infallible>("accepted") }
    }));
    assert_eq!(svc.call(req("a")).await.unwrap(), "accepted");
    assert_eq!(kept.lock().unwrap().as_ref().unwrap().bulkhead(), "freight");
    // The response is done, but the spawned work still holds the slot.
    assert_eq!(counts(&h), (1, 0));
    let mut next = start(&mut svc, "b");
    assert_eq!(counts(&h), (1, 1));
    let work = kept.lock().unwrap().take();
    drop(work);
    assert!(next.is_woken());
    assert_eq!(assert_ready_ok!(next.poll()), "accepted");
    // `next`'s handle is still kept.
    assert_eq!(counts(&h), (1, 0));
    kept.lock().unwrap().take();
    assert_eq!(counts(&h), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn without_the_option_no_handle_is_placed() {
    let l = layer(1, 0);
    let mut svc = l.layer(tower::service_fn(|req: Req| async move {
        Ok::<_, Infallible>(req.extensions().get::<PermitHandle>().is_some())
    }));
    assert!(!svc.call(req("a")).await.unwrap());
}

#[test]
fn services_futures_layers_and_handles_are_send_sync_and_clone() {
    fn send_sync_clone<T: Send + Sync + Clone>() {}
    fn send<T: Send>() {}
    send_sync_clone::<seawall_bulkhead::Bulkhead<CountingSvc>>();
    send_sync_clone::<BulkheadLayer>();
    send_sync_clone::<Handle>();
    send_sync_clone::<PermitHandle>();
    send::<seawall_bulkhead::ResponseFuture<CountingSvc, Req, seawall_bulkhead::UntilResponse>>();
    send::<seawall_bulkhead::Permit>();
    type Key = fn(&Req) -> &'static str;
    send_sync_clone::<seawall_bulkhead::KeyedBulkhead<CountingSvc, &'static str, Key>>();
    send_sync_clone::<seawall_bulkhead::KeyedBulkheadLayer<&'static str, Key>>();
    send_sync_clone::<seawall_bulkhead::KeyedHandle<&'static str>>();
}
