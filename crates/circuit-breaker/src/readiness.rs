//! Readiness mode: `poll_ready` is pending while the breaker would turn calls away,
//! so a balancer stops choosing the endpoint instead of collecting rejections.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use seawall_core::{later, BoxError, ClassifyRequest};
use tokio::sync::futures::OwnedNotified;
use tokio::time::{Instant, Sleep};
use tower_layer::Layer;
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::handle::Handle;
use crate::layer::CircuitBreakerLayer;
use crate::machine::State;
use crate::service::CircuitBreaker;
use crate::state::{Breaker, ReadyHint};

/// The shortest timer set while waiting, so that a wake-up that finds the breaker
/// still closed to calls (a clock at the edge of the interval) never spins.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// Applies a circuit breaker in readiness mode; made by
/// [`CircuitBreakerLayer::pending_while_open`].
///
/// It keeps the breaker of the layer it was made from: services of both modes
/// built from that layer, and all their clones, share one breaker. See
/// [`PendingWhileOpen`].
pub struct PendingWhileOpenLayer<C> {
    layer: CircuitBreakerLayer<C>,
}

impl<C> CircuitBreakerLayer<C> {
    /// The same breaker in readiness mode: its services' `poll_ready` is pending
    /// while the breaker is open (woken when the open interval ends), so
    /// `tower::balance` and `ReadyCache` stop choosing the endpoint. See
    /// [`PendingWhileOpen`].
    pub fn pending_while_open(self) -> PendingWhileOpenLayer<C> {
        PendingWhileOpenLayer { layer: self }
    }
}

impl<C> PendingWhileOpenLayer<C> {
    /// The operator's handle on the breaker.
    pub fn handle(&self) -> Handle {
        self.layer.handle()
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        self.layer.name()
    }
}

impl<C: Clone> Clone for PendingWhileOpenLayer<C> {
    fn clone(&self) -> Self {
        Self {
            layer: self.layer.clone(),
        }
    }
}

impl<C: fmt::Debug> fmt::Debug for PendingWhileOpenLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingWhileOpenLayer")
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, C: Clone> Layer<S> for PendingWhileOpenLayer<C> {
    type Service = PendingWhileOpen<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        PendingWhileOpen {
            inner: self.layer.layer(inner),
            wait: Wait::default(),
        }
    }
}

/// A [`CircuitBreaker`] whose `poll_ready` is `Pending` while the breaker would
/// turn a call away, so `tower::balance::p2c::Balance` and `ReadyCache` stop
/// choosing this endpoint (they choose only among ready ones) and traffic moves to
/// the healthy ones.
///
/// - **Open:** pending, woken when the open interval ends (a timer set in
///   `poll_ready`); the next `poll_ready` polls the inner service, and the call
///   that follows is the half-open probe, admitted as usual.
/// - **Half-open with every probe slot taken:** pending, woken when a probe ends
///   (the breaker closes or reopens, or an ignored or cancelled probe frees its
///   slot), at the latest when the oldest probe's half-open timeout ends.
/// - **Forced open:** pending; nothing but an operator ends it, so it is woken by
///   any operator change ([`Handle::force`], [`Handle::release`], [`Handle::reset`], …) at once,
///   and otherwise polled again every `open_for` (a forced-open rejection
///   carries no retry-after: only an operator ends it).
/// - **Closed, forced closed, disabled:** as [`CircuitBreaker`]: the inner
///   service's readiness. The ramp after closing is not a wait: its share is of
///   the calls that ask, so calls keep coming and the ramp's rejections are
///   [`CircuitOpen`](crate::CircuitOpen) errors as in the default mode.
///
/// `poll_ready` never fails because of the breaker (an error there makes the
/// caller discard the service). A call made when `poll_ready` was not ready is
/// still decided by the breaker, as in the default mode.
///
/// If every endpoint is open, a balancer in front waits until one lets calls
/// through: bound that wait by shedding load (`tower::load_shed`) or with a
/// timeout in front of it when callers must be answered at once.
///
/// Use it for each endpoint under a balancer (one breaker per replica), or under
/// `tower::buffer::Buffer` when callers should wait for the breaker rather than be
/// rejected. Keep the default mode for a single dependency, where the caller
/// should get [`CircuitOpen`](crate::CircuitOpen) at once, with a retry-after.
///
/// **What `Clone` shares:** the breaker. A clone has its own timer and wait, and
/// does not share the inner service's reserved readiness.
///
/// ```
/// use std::task::{Context, Poll, Waker};
/// use std::time::Duration;
/// use seawall_circuit_breaker::{CircuitBreakerLayer, State};
/// use seawall_core::BoxError;
/// use tower::{service_fn, Layer, Service, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let layer = CircuitBreakerLayer::builder("replica-a")
///     .consecutive_failures(1)
///     .open_for(Duration::from_secs(10))
///     .build()?
///     .pending_while_open();
/// let handle = layer.handle();
/// let mut replica = layer.layer(service_fn(|_key: String| async {
///     Err::<String, BoxError>("connection refused".into())
/// }));
///
/// assert!(replica.ready().await?.call("user:1".to_owned()).await.is_err());
/// assert_eq!(handle.state(), State::Open);
/// // Open: not ready, so a balancer picks another replica.
/// let mut cx = Context::from_waker(Waker::noop());
/// assert!(Service::<String>::poll_ready(&mut replica, &mut cx).is_pending());
/// # Ok(())
/// # }
/// ```
pub struct PendingWhileOpen<S, C> {
    inner: CircuitBreaker<S, C>,
    wait: Wait,
}

/// A service's wait for the breaker to let calls through; allocated only then.
#[derive(Default)]
struct Wait {
    /// The end of the open interval, or when to look again.
    sleep: Option<Pin<Box<Sleep>>>,
    /// A transition or a freed probe slot, registered before the breaker is read.
    notified: Option<Pin<Box<OwnedNotified>>>,
}

/// What the breaker would do with a call asking now.
enum Gate {
    /// Let it through (or decide in `call`): poll as the default mode does.
    Pass,
    /// Turn it away until at least this instant, unless something changes first.
    Wait(Instant),
}

fn gate(breaker: &Breaker, now: Instant) -> Gate {
    match breaker.ready_hint(|| now) {
        ReadyHint::Forward => Gate::Pass,
        ReadyHint::SkipForced | ReadyHint::SkipOpen => breaker.locked(now, |m| {
            if !m.would_reject(now) {
                return Gate::Pass;
            }
            let recheck = later(now, m.base_open_for());
            let reported = m.reported(now);
            match reported.state {
                State::Open => Gate::Wait(reported.until.unwrap_or(recheck)),
                // Every probe slot taken, or the probe gate holding the probe off
                // (`until`: when the hold ends).
                State::HalfOpen => Gate::Wait(
                    reported
                        .until
                        .or_else(|| m.probe_deadline())
                        .unwrap_or(recheck),
                ),
                State::ForcedOpen => Gate::Wait(recheck),
                // The ramp: it admits a share of the calls that ask.
                State::Closed | State::ForcedClosed | State::Disabled => Gate::Pass,
            }
        }),
    }
}

impl<S, C> PendingWhileOpen<S, C> {
    /// The operator's handle on the breaker.
    pub fn handle(&self) -> Handle {
        self.inner.handle()
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        self.inner.get_ref()
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        self.inner.get_mut()
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner.into_inner()
    }

    /// `Ready` once the breaker would let a call through; until then registers the
    /// task for a transition, a freed probe slot, or the end of the wait.
    fn poll_gate(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let now = Instant::now();
            let at = match gate(self.inner.breaker(), now) {
                Gate::Pass => {
                    self.wait = Wait::default();
                    return Poll::Ready(());
                }
                Gate::Wait(at) => at,
            };
            // Listen before looking again, so a change in between is not missed.
            let Some(notified) = self.wait.notified.as_mut() else {
                let mut notified = Box::pin(self.inner.breaker().ready_waiters().notified_owned());
                notified.as_mut().enable();
                self.wait.notified = Some(notified);
                continue;
            };
            if notified.as_mut().poll(cx).is_ready() {
                self.wait.notified = None;
                continue;
            }
            let at = at.max(later(now, MIN_WAIT));
            let sleep = match &mut self.wait.sleep {
                Some(sleep) => {
                    if sleep.deadline() != at {
                        sleep.as_mut().reset(at);
                    }
                    sleep
                }
                empty => empty.insert(Box::pin(tokio::time::sleep_until(at))),
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl<S: Clone, C: Clone> Clone for PendingWhileOpen<S, C> {
    /// The same breaker, with a wait and a readiness of its own.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            wait: Wait::default(),
        }
    }
}

impl<S: fmt::Debug, C: fmt::Debug> fmt::Debug for PendingWhileOpen<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingWhileOpen")
            .field("inner", &self.inner)
            .field("waiting", &self.wait.notified.is_some())
            .finish()
    }
}

impl<S, C, Req> Service<Req> for PendingWhileOpen<S, C>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: ClassifyRequest<Req, S::Response>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, C::Classifier>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        std::task::ready!(self.poll_gate(cx));
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        self.inner.call(req)
    }
}
