//! Readiness mode, driven by hand with a paused clock: `poll_ready` is pending while
//! the breaker would turn calls away, and the task is woken when that ends.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use seawall_circuit_breaker::{
    CircuitBreakerLayer, Forced, Handle, PendingWhileOpen, PendingWhileOpenLayer, State,
};
use seawall_core::{find_rejection, BoxError, ErrorsAsFailures, RejectionKind};
use tokio::time::advance;
use tokio_test::{assert_pending, assert_ready_err, assert_ready_ok, task};
use tower::{Layer, Service};
use tower_test::mock;

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

type Req = &'static str;
type MockHandle = mock::Handle<Req, &'static str>;
type Svc = mock::Spawn<PendingWhileOpen<Polls, ErrorsAsFailures>>;

/// A mock dependency that counts how often its readiness is polled.
#[derive(Clone)]
struct Polls {
    inner: mock::Mock<Req, &'static str>,
    polls: Arc<AtomicUsize>,
}

impl Service<Req> for Polls {
    type Response = &'static str;
    type Error = BoxError;
    type Future = <mock::Mock<Req, &'static str> as Service<Req>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.inner.call(req)
    }
}

/// Two consecutive failures open it for 10 s (20 s after a failed probe); a probe
/// counts as failed after 5 s.
fn layer() -> PendingWhileOpenLayer<ErrorsAsFailures> {
    CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .consecutive_failures(2)
        .open_for(10 * S)
        .backoff(2.0, 60 * S)
        .half_open_timeout(5 * S)
        .build()
        .unwrap()
        .pending_while_open()
}

/// Lets `wait` pass and checks `svc` is woken exactly then: not a millisecond before.
async fn woken_after(svc: &Svc, wait: Duration, why: &str) {
    advance(wait - MS).await;
    assert!(!svc.is_woken(), "woken early: {why}");
    advance(MS).await;
    assert!(svc.is_woken(), "not woken: {why}");
}

struct Endpoint {
    svc: Svc,
    inner: MockHandle,
    polls: Arc<AtomicUsize>,
    handle: Handle,
}

impl Endpoint {
    fn new(l: &PendingWhileOpenLayer<ErrorsAsFailures>) -> Self {
        let (mock, inner) = mock::pair();
        let polls = Arc::new(AtomicUsize::new(0));
        let svc = mock::Spawn::new(l.layer(Polls {
            inner: mock,
            polls: polls.clone(),
        }));
        Self {
            svc,
            inner,
            polls,
            handle: l.handle(),
        }
    }

    /// Another service on the same breaker, with a wait of its own.
    fn clone_svc(&self) -> Svc {
        mock::Spawn::new(self.svc.get_ref().clone())
    }

    fn polls(&self) -> usize {
        self.polls.load(Ordering::SeqCst)
    }

    /// A call that reaches the dependency and is left in flight.
    async fn start(
        &mut self,
    ) -> (
        task::Spawn<impl std::future::Future<Output = Result<&'static str, BoxError>>>,
        mock::SendResponse<&'static str>,
    ) {
        assert_ready_ok!(self.svc.poll_ready());
        let mut call = task::spawn(self.svc.call("quote"));
        assert_pending!(call.poll());
        let (_, reply) = self.inner.next_request().await.unwrap();
        (call, reply)
    }

    async fn fail(&mut self) {
        let (mut call, reply) = self.start().await;
        reply.send_error("supplier down");
        assert_ready_err!(call.poll());
    }

    async fn trip(&mut self) {
        self.fail().await;
        self.fail().await;
        assert_eq!(self.handle.state(), State::Open);
    }

    /// An endpoint on [`layer`], already tripped.
    async fn tripped() -> Self {
        let mut e = Self::new(&layer());
        e.trip().await;
        e
    }

    /// Waits out the 10 s open interval and leaves the probe in flight.
    async fn start_probe(
        &mut self,
    ) -> (
        task::Spawn<impl std::future::Future<Output = Result<&'static str, BoxError>>>,
        mock::SendResponse<&'static str>,
    ) {
        advance(10 * S).await;
        self.start().await
    }

    /// Another service on the same breaker, already pending in `poll_ready`.
    fn waiting_svc(&self) -> Svc {
        let mut other = self.clone_svc();
        assert_pending!(other.poll_ready());
        other
    }
}

#[tokio::test(start_paused = true)]
async fn closed_it_is_the_inner_services_readiness() {
    let mut e = Endpoint::new(&layer());
    e.inner.allow(0);
    assert_pending!(e.svc.poll_ready());
    e.inner.allow(1);
    assert!(e.svc.is_woken());
    assert_ready_ok!(e.svc.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn open_it_is_pending_without_touching_the_dependency_until_the_interval_ends() {
    let mut e = Endpoint::tripped().await;
    let polls = e.polls();

    assert_pending!(e.svc.poll_ready());
    advance(10 * S - MS).await;
    assert!(!e.svc.is_woken());
    assert_pending!(e.svc.poll_ready());
    assert_eq!(
        e.polls(),
        polls,
        "nothing reached the dependency while open"
    );

    advance(MS).await;
    assert!(e.svc.is_woken(), "woken when the open interval ended");
    // The next call is the probe, admitted as usual.
    let (mut probe, reply) = e.start().await;
    assert_eq!(e.polls(), polls + 1);
    assert_eq!(e.handle.state(), State::HalfOpen);
    reply.send_response("quote");
    assert_eq!(assert_ready_ok!(probe.poll()), "quote");
    assert_eq!(e.handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_probe_in_flight_keeps_others_pending_and_its_success_wakes_them() {
    let mut e = Endpoint::tripped().await;
    let (mut probe, reply) = e.start_probe().await;

    let mut other = e.clone_svc();
    assert_pending!(other.poll_ready(), "the only probe slot is taken");
    reply.send_response("quote");
    assert_ready_ok!(probe.poll());
    assert!(other.is_woken(), "closing woke it, with no time passing");
    assert_ready_ok!(other.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_wakes_the_others_to_wait_for_the_longer_interval() {
    let mut e = Endpoint::tripped().await;
    let (mut probe, reply) = e.start_probe().await;
    let mut other = e.waiting_svc();

    reply.send_error("still down");
    assert_ready_err!(probe.poll());
    assert!(other.is_woken(), "the transition woke it");
    assert_pending!(other.poll_ready(), "open again");
    woken_after(&other, 20 * S, "the longer interval after a failed probe").await;
    assert_ready_ok!(other.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_frees_its_slot_and_wakes_the_others() {
    let mut e = Endpoint::tripped().await;
    let (probe, _reply) = e.start_probe().await;
    let mut other = e.waiting_svc();

    drop(probe);
    assert!(
        other.is_woken(),
        "the freed slot woke it, with no transition"
    );
    assert_eq!(e.handle.state(), State::HalfOpen);
    assert_ready_ok!(other.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn a_probe_past_its_half_open_timeout_wakes_the_others_at_the_timeout() {
    let mut e = Endpoint::tripped().await;
    let (_probe, _reply) = e.start_probe().await;
    let mut other = e.waiting_svc();

    woken_after(&other, 5 * S, "the half-open timeout").await;
    // The probe counts as failed: open again, from the timeout, for 20 s.
    assert_pending!(other.poll_ready());
    assert_eq!(e.handle.state(), State::Open);
    advance(20 * S).await;
    assert!(other.is_woken());
    assert_ready_ok!(other.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn forced_open_waits_for_an_operator_and_is_woken_by_one() {
    let mut e = Endpoint::new(&layer());
    e.handle.force(Forced::Open);
    assert_pending!(e.svc.poll_ready());

    // Nothing ends it but an operator: looked at again every open interval, still pending.
    advance(10 * S).await;
    assert!(e.svc.is_woken());
    assert_pending!(e.svc.poll_ready());
    advance(3600 * S).await;
    assert_pending!(e.svc.poll_ready());
    assert_eq!(e.polls(), 0);

    let mut idle = e.clone_svc();
    assert_pending!(idle.poll_ready());
    e.handle.force(Forced::Closed);
    assert!(e.svc.is_woken(), "the operator's change woke it at once");
    assert!(idle.is_woken());
    assert_ready_ok!(e.svc.poll_ready());
    assert_ready_ok!(idle.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn a_reset_wakes_a_service_waiting_for_the_interval() {
    let mut e = Endpoint::tripped().await;
    assert_pending!(e.svc.poll_ready());
    e.handle.reset();
    assert!(e.svc.is_woken());
    assert_ready_ok!(e.svc.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiting_service_leaves_the_others_waiting() {
    let e = Endpoint::tripped().await;
    let mut a = e.clone_svc();
    let mut b = e.clone_svc();
    assert_pending!(a.poll_ready());
    assert_pending!(b.poll_ready());
    drop(a);
    advance(10 * S).await;
    assert!(b.is_woken());
    assert_ready_ok!(b.poll_ready());
}

#[tokio::test(start_paused = true)]
async fn the_ramp_after_closing_is_no_wait() {
    let l = CircuitBreakerLayer::builder("freight")
        .jitter(0.0)
        .consecutive_failures(2)
        .open_for(10 * S)
        .ramp(60 * S, 0.1)
        .build()
        .unwrap()
        .pending_while_open();
    let mut e = Endpoint::new(&l);
    e.trip().await;
    let (mut probe, reply) = e.start_probe().await;
    reply.send_response("quote");
    assert_ready_ok!(probe.poll());
    // Closed and ramping at 10 %: the first call goes out, the next is turned away,
    // but neither waits in `poll_ready`: the ramp is a share of the calls that ask.
    let (mut first, reply) = e.start().await;
    reply.send_response("quote");
    assert_ready_ok!(first.poll());
    assert_ready_ok!(e.svc.poll_ready());
    let err = e.svc.call("quote").await.unwrap_err();
    let rejection = find_rejection(&*err).expect("a seawall rejection");
    assert_eq!(rejection.kind(), RejectionKind::CircuitOpen);
}

#[test]
fn services_and_layers_are_send_sync_and_clone() {
    fn send_sync_clone<T: Send + Sync + Clone>() {}
    send_sync_clone::<PendingWhileOpen<Polls, ErrorsAsFailures>>();
    send_sync_clone::<PendingWhileOpenLayer<ErrorsAsFailures>>();
}
