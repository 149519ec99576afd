//! Request deadlines: a budget set once, honoured by every layer below, whatever the
//! request type.
//!
//! [`DeadlineLayer`] gives each request a [`Deadline`] (the budget of the dependency
//! segment, admission included, such as 300 ms) and enforces it as a backstop. The
//! deadline travels **ambiently**: while the inner service's `call` runs and while
//! its response future is polled, it is the task's *current deadline* (set on the
//! thread for just that `call` or poll, so it behaves as a task-local), read with
//! [`Deadline::current`]. It needs nothing from the request
//! (no extensions, no trait to implement, no allocation), so a `String`, a database
//! query or an `http::Request` all carry it the same way. Inner layers read it: the
//! bulkhead stops waiting for a slot at it, the breaker bounds the dependency call
//! by it and records an overrun as a failure, a fallback caps its steps by it.
//!
//! **Where it is read.** In `call`, and again at the response future's first poll
//! when `call` saw none: tower's `Buffer` runs the inner `call` in its worker task,
//! but the caller polls the returned future in its own task, inside the deadline's
//! scope. [`bounded_by_current`] does exactly that for a future.
//!
//! **What loses it.** A future moved to another task (`tokio::spawn`) runs outside
//! the scope: wrap it with [`with_current_deadline`] before spawning it. Work started
//! by a background task (a health check, a cache refresh) has no deadline.
//!
//! **HTTP and gRPC.** A server can turn an incoming `grpc-timeout` header into the
//! deadline ([`DeadlineLayer::honor_grpc_timeout`]), and a client can write what
//! remains of it into the outgoing header ([`DeadlineLayer::propagate_grpc_timeout`]),
//! so the server stops working when the caller has stopped waiting.
//!
//! ```
//! use std::time::Duration;
//! use seawall_core::{Deadline, DeadlineLayer};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // Any request type: here a plain `String`.
//! let inner = service_fn(|query: String| async move {
//!     let left = Deadline::current().map(|d| d.remaining(tokio::time::Instant::now()));
//!     Ok::<_, std::convert::Infallible>((query, left))
//! });
//! let svc = DeadlineLayer::new(Duration::from_millis(300)).unwrap().layer(inner);
//! let (_, left) = svc.oneshot("SELECT 1".to_owned()).await.unwrap();
//! assert!(left.unwrap() <= Duration::from_millis(300));
//! # }
//! ```

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_layer::Layer;
use tower_service::Service;

use crate::config::{check_duration, ConfigError};
use crate::rejection::{BoxError, DeadlineExceeded};

std::thread_local! {
    /// The deadline of the request whose work is being run on this thread, if any.
    /// Set only for the length of a `call` or of one poll (see [`with_current`]),
    /// so it follows the task that polls the work, as a task-local does; a `Cell`
    /// of a `Copy` value, so entering and leaving costs two plain moves.
    static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
}

/// Runs `f` with `current` as the current deadline, then puts back the one it
/// replaced (also when `f` panics).
#[inline]
fn with_current<R>(current: Current, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Current>);
    impl Drop for Restore {
        #[inline]
        fn drop(&mut self) {
            CURRENT.set(self.0);
        }
    }
    let _restore = Restore(CURRENT.replace(Some(current)));
    f()
}

/// What the current deadline holds: the deadline, and whether a [`DeadlineFuture`] with a
/// timer at that very instant is polling the work now (it wakes the task when the
/// deadline passes, so a future inside it needs no timer of its own to notice).
#[derive(Debug, Clone, Copy)]
struct Current {
    deadline: Deadline,
    guarded: bool,
}

/// The instant by which a request must be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(Instant);

impl Deadline {
    /// A deadline at `at`.
    pub fn at(at: Instant) -> Self {
        Self(at)
    }

    /// A deadline `budget` after `now` (saturating: a budget too large for the clock
    /// is a deadline about thirty years away, never a panic).
    pub fn after(now: Instant, budget: Duration) -> Self {
        Self(crate::later(now, budget))
    }

    /// The instant itself.
    pub fn instant(&self) -> Instant {
        self.0
    }

    /// What is left of the budget at `now` (zero once it has passed).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.0.saturating_duration_since(now)
    }

    /// Whether the deadline has passed at `now`.
    pub fn is_expired(&self, now: Instant) -> bool {
        now >= self.0
    }

    /// The deadline of the request being served on this task, if any: set by a
    /// [`DeadlineLayer`] further out, or by [`scope`](Self::scope).
    #[inline]
    pub fn current() -> Option<Deadline> {
        CURRENT.get().map(|c| c.deadline)
    }

    /// Runs `f` with this deadline as the current one, or the current one if it is
    /// earlier (an inner budget never extends an outer one).
    pub fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        let current = match CURRENT.get() {
            Some(outer) if outer.deadline <= self => outer,
            _ => Current {
                deadline: self,
                guarded: false,
            },
        };
        with_current(current, f)
    }

    /// `fut`, polled with this deadline as the current one (or the current one at
    /// each poll, if that is earlier). For tests, and for work that starts its own
    /// budget outside a [`DeadlineLayer`].
    pub fn scope<F: Future>(self, fut: F) -> WithDeadline<F> {
        WithDeadline {
            inner: fut,
            deadline: Some(self),
        }
    }

    fn or_earlier_current(self) -> Self {
        match Self::current() {
            Some(outer) => self.min(outer),
            None => self,
        }
    }
}

/// Carries the current deadline (if any) into `fut`, so it survives a move to another
/// task: `tokio::spawn(with_current_deadline(fut))`.
pub fn with_current_deadline<F: Future>(fut: F) -> WithDeadline<F> {
    WithDeadline {
        inner: fut,
        deadline: Deadline::current(),
    }
}

pin_project! {
    /// A future polled with a deadline as the current one; see [`Deadline::scope`] and
    /// [`with_current_deadline`].
    #[derive(Debug)]
    pub struct WithDeadline<F> {
        #[pin]
        inner: F,
        deadline: Option<Deadline>,
    }
}

impl<F: Future> Future for WithDeadline<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match *this.deadline {
            Some(d) => d.sync_scope(|| this.inner.poll(cx)),
            None => this.inner.poll(cx),
        }
    }
}

/// Requests that carry [`http::Extensions`], where seawall's opt-in request data
/// lives (a bulkhead's `PermitHandle`, a degradation level). Implemented for
/// [`http::Request`]. Nothing else needs it: deadlines travel without it.
pub trait HasExtensions {
    /// The request's extensions, if it has any.
    fn extensions(&self) -> Option<&http::Extensions>;
    /// The request's extensions, mutably, if it has any.
    fn extensions_mut(&mut self) -> Option<&mut http::Extensions>;
}

impl<B> HasExtensions for http::Request<B> {
    fn extensions(&self) -> Option<&http::Extensions> {
        Some(http::Request::extensions(self))
    }

    fn extensions_mut(&mut self) -> Option<&mut http::Extensions> {
        Some(http::Request::extensions_mut(self))
    }
}

pin_project! {
    /// A future bounded by a deadline: it resolves to `Err(DeadlineExceeded)` if the
    /// deadline passes first. Without a deadline it is the inner future, with no timer.
    #[derive(Debug)]
    pub struct Bounded<F> {
        #[pin]
        inner: F,
        deadline: Option<Instant>,
        // Created the first time the inner future is pending: a call that completes
        // at once (a cache, a rejection below) never registers a timer.
        #[pin]
        sleep: Option<Sleep>,
    }
}

/// Bounds `fut` by `deadline` (no bound when `None`). The timer is registered only
/// when there is a deadline and the inner future does not complete at once.
pub fn bounded<F: Future>(fut: F, deadline: Option<Deadline>) -> Bounded<F> {
    Bounded {
        inner: fut,
        deadline: deadline.map(|d| d.instant()),
        sleep: None,
    }
}

/// Bounds `fut` by the current deadline: the one in force now or, if there is none
/// now, the one in force at the first poll (the case of a `call` run in another
/// task, as tower's `Buffer` does).
///
/// Unlike [`Bounded`], it carries no timer inline: where a [`DeadlineLayer`]'s
/// future polls it (the usual stack), that future's timer wakes the task at the
/// deadline and this one only compares the clock with it when the inner future is
/// pending; only under a deadline set another way ([`Deadline::scope`]) does it
/// register a timer of its own, boxed, the first time the inner future is pending.
#[inline]
pub fn bounded_by_current<F: Future>(fut: F) -> BoundedByCurrent<F> {
    let deadline = Deadline::current();
    BoundedByCurrent {
        inner: fut,
        bound: match deadline {
            Some(d) => Bound::At(d.instant()),
            None => Bound::Look,
        },
    }
}

/// What bounds a [`BoundedByCurrent`]: three words, the timer it rarely needs
/// included (it knows its own deadline).
#[derive(Debug)]
enum Bound {
    /// No deadline was current when the future was made: look at the first poll.
    Look,
    /// No deadline.
    Unbounded,
    /// The deadline; the inner future has not been pending (so its answer is in time).
    At(Instant),
    /// The deadline, after the inner future was pending under a `DeadlineFuture`
    /// whose timer wakes the task at it.
    Pending(Instant),
    /// The deadline's own timer, for a deadline no `DeadlineFuture` guards.
    Timer(Pin<Box<Sleep>>),
}

pin_project! {
    /// A future bounded by the current deadline (see [`bounded_by_current`]): it
    /// resolves to `Err(DeadlineExceeded)` if the deadline passes first. Small: the
    /// inner future, and the instant or a pointer to a timer it rarely needs.
    #[derive(Debug)]
    pub struct BoundedByCurrent<F> {
        #[pin]
        inner: F,
        bound: Bound,
    }
}

impl<F: Future> Future for BoundedByCurrent<F> {
    type Output = Result<F::Output, DeadlineExceeded>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Bound::Look = this.bound {
            *this.bound = Deadline::current().map_or(Bound::Unbounded, |d| Bound::At(d.instant()));
        }
        if let Poll::Ready(out) = this.inner.poll(cx) {
            // Late when the deadline passed before this poll saw the answer, as in
            // `Bounded`: it is a timeout, never a success past the budget.
            let late = match this.bound {
                Bound::Pending(deadline) => answered_late(*deadline),
                Bound::Timer(sleep) => answered_late(sleep.deadline()),
                Bound::Look | Bound::Unbounded | Bound::At(_) => false,
            };
            return Poll::Ready(if late {
                Err(DeadlineExceeded::new())
            } else {
                Ok(out)
            });
        }
        poll_deadline(this.bound, cx)
    }
}

/// Whether an answer seen now came after `deadline`: the one rule every bounded
/// future applies to an answer (one seen at the deadline's very instant is in time).
fn answered_late(deadline: Instant) -> bool {
    Instant::now() > deadline
}

/// The pending inner future's deadline: passed, or how the task will be woken at it.
#[inline]
fn poll_deadline<T>(bound: &mut Bound, cx: &mut Context<'_>) -> Poll<Result<T, DeadlineExceeded>> {
    let deadline = match *bound {
        Bound::Look | Bound::Unbounded => return Poll::Pending,
        Bound::At(deadline) | Bound::Pending(deadline) => deadline,
        Bound::Timer(ref mut sleep) => {
            ready!(sleep.as_mut().poll(cx));
            return Poll::Ready(Err(DeadlineExceeded::new()));
        }
    };
    let guarded = CURRENT
        .get()
        .is_some_and(|c| c.guarded && c.deadline.instant() <= deadline);
    if guarded {
        // A `DeadlineFuture` polling this one wakes the task when its timer, at
        // this deadline or before, fires (and polls its inner future first).
        *bound = Bound::Pending(deadline);
        return if Instant::now() >= deadline {
            Poll::Ready(Err(DeadlineExceeded::new()))
        } else {
            Poll::Pending
        };
    }
    let mut sleep = Box::pin(tokio::time::sleep_until(deadline));
    let fired = sleep.as_mut().poll(cx).is_ready();
    *bound = Bound::Timer(sleep);
    if fired {
        Poll::Ready(Err(DeadlineExceeded::new()))
    } else {
        Poll::Pending
    }
}

impl<F: Future> Future for Bounded<F> {
    type Output = Result<F::Output, DeadlineExceeded>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(out) = this.inner.poll(cx) {
            // An answer is late when the deadline passed before this poll saw it
            // (a busy runtime runs the timer and the answer's wake-up together):
            // it is no answer, never a success past the budget. One seen at the
            // deadline's instant is in time. Only a call that was pending before
            // can be late, so only those read the clock.
            return match *this.deadline {
                Some(deadline) if this.sleep.is_some() && answered_late(deadline) => {
                    Poll::Ready(Err(DeadlineExceeded::new()))
                }
                _ => Poll::Ready(Ok(out)),
            };
        }
        let Some(deadline) = *this.deadline else {
            return Poll::Pending;
        };
        if this.sleep.is_none() {
            this.sleep.set(Some(tokio::time::sleep_until(deadline)));
        }
        match this.sleep.as_pin_mut() {
            Some(sleep) => {
                ready!(sleep.poll(cx));
                Poll::Ready(Err(DeadlineExceeded::new()))
            }
            None => Poll::Pending,
        }
    }
}

/// The `grpc-timeout` header name.
pub const GRPC_TIMEOUT: &str = "grpc-timeout";

/// Parses a `grpc-timeout` value (`1-8 digits` then one of `H M S m u n`).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Formats a duration as a `grpc-timeout` value, rounding up to the unit so that the
/// server never gets a shorter budget than remains (at most 8 digits).
pub fn format_grpc_timeout(d: Duration) -> String {
    const LIMIT: u128 = 100_000_000;
    let nanos = d.as_nanos();
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    for (scale, unit) in units {
        let value = nanos.div_ceil(scale);
        if value < LIMIT {
            return format!("{value}{unit}");
        }
    }
    format!("{}H", LIMIT - 1)
}

/// Gives each request a [`Deadline`] and enforces it as a backstop; works for any
/// request type.
///
/// The deadline is `now + budget`, or an earlier one already current (an overall
/// budget set further out), or — with [`honor_grpc_timeout`](DeadlineLayer::honor_grpc_timeout),
/// for `http::Request` — the incoming `grpc-timeout` when it is shorter. It is the
/// current deadline ([`Deadline::current`]) while the inner service's `call` runs
/// and while its future is polled. When it passes, the call fails with
/// [`DeadlineExceeded`] and the inner future is dropped.
///
/// The services a layer builds (and its clones') share only its shadow switch
/// and counter ([`DeadlineHandle`]); each request's deadline is its own. The type
/// parameter records the `grpc-timeout` handling chosen ([`NoHeaders`] by default).
///
/// # Shadow mode
///
/// With [`shadow`](Self::shadow) (or [`DeadlineHandle::set_shadow`] at run time)
/// the layer computes each request's deadline as it would, enforces none of it,
/// and counts the requests still running when it passed
/// ([`DeadlineSnapshot::shadow_rejections`],
/// `seawall_deadline_shadow_rejections_total`): the ones an enforcing layer would
/// have failed with [`DeadlineExceeded`], here or, through the current deadline,
/// in a breaker or bulkhead below. In shadow mode the deadline is not made current
/// (layers below keep the one set further out, if any, and never see this one),
/// not written into an outgoing `grpc-timeout`, and nothing is cancelled: the
/// response arrives when the dependency gives it. Switching applies from the next
/// request. Cost: one relaxed load per request; a request in shadow mode arms one
/// timer if it is still pending after its first poll.
#[derive(Debug, Clone)]
pub struct DeadlineLayer<H = NoHeaders> {
    budget: Duration,
    headers: H,
    shared: Arc<Shared>,
}

/// What the services of one [`DeadlineLayer`] share.
#[derive(Debug)]
struct Shared {
    budget: Duration,
    built_shadow: bool,
    shadow: AtomicBool,
    shadow_rejections: AtomicU64,
}

impl Shared {
    fn new(budget: Duration, shadow: bool) -> Arc<Self> {
        Arc::new(Self {
            budget,
            built_shadow: shadow,
            shadow: AtomicBool::new(shadow),
            shadow_rejections: AtomicU64::new(0),
        })
    }
}

/// Watches and switches a [`DeadlineLayer`] (and every layer cloned from it):
/// shadow mode on or off, and what it counted. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DeadlineHandle {
    shared: Arc<Shared>,
}

/// A [`DeadlineLayer`]'s setting and counter at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct DeadlineSnapshot {
    /// Each request's budget.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))]
    pub budget: Duration,
    /// Whether the layer is in shadow mode (it enforces nothing).
    pub shadow: bool,
    /// Requests still running when their deadline passed while the layer was in
    /// shadow mode: those an enforcing layer would have failed.
    pub shadow_rejections: u64,
}

impl DeadlineHandle {
    /// Switches shadow mode on or off, from the next request on (requests in
    /// flight keep the mode they started in).
    pub fn set_shadow(&self, shadow: bool) {
        let was = self.shared.shadow.swap(shadow, Ordering::Relaxed);
        if was != shadow {
            crate::telemetry::deadline_shadow_switched(shadow);
        }
    }

    /// Whether the layer is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.shared.shadow.load(Ordering::Relaxed)
    }

    /// Goes back to the shadow setting the layer was built with.
    pub fn revert(&self) {
        self.set_shadow(self.shared.built_shadow);
    }

    /// The setting and the counter now.
    pub fn snapshot(&self) -> DeadlineSnapshot {
        DeadlineSnapshot {
            budget: self.shared.budget,
            shadow: self.is_shadow(),
            shadow_rejections: self.shared.shadow_rejections.load(Ordering::Relaxed),
        }
    }

    /// Another layer with the same budget that shares this switch and counter (a
    /// second stack of the same policy, say).
    pub fn layer(&self) -> DeadlineLayer {
        DeadlineLayer {
            budget: self.shared.budget,
            headers: NoHeaders,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// Reads and writes no header: the default of [`DeadlineLayer`], for any request type.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHeaders;

/// `grpc-timeout` handling for `http::Request`s, chosen with
/// [`DeadlineLayer::honor_grpc_timeout`] and [`DeadlineLayer::propagate_grpc_timeout`].
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcTimeout {
    honor: bool,
    propagate: bool,
}

/// How a [`DeadlineLayer`] reads a deadline from, and writes one into, a request.
pub trait DeadlineHeaders<Req> {
    /// A budget the request itself asks for (an incoming `grpc-timeout`), if any.
    fn incoming(&self, req: &Req) -> Option<Duration>;
    /// Tells the next hop what remains, if the request can say so.
    fn outgoing(&self, req: &mut Req, remaining: Duration);
}

impl<Req> DeadlineHeaders<Req> for NoHeaders {
    #[inline]
    fn incoming(&self, _req: &Req) -> Option<Duration> {
        None
    }
    #[inline]
    fn outgoing(&self, _req: &mut Req, _remaining: Duration) {}
}

impl<B> DeadlineHeaders<http::Request<B>> for GrpcTimeout {
    fn incoming(&self, req: &http::Request<B>) -> Option<Duration> {
        if !self.honor {
            return None;
        }
        req.headers()
            .get(GRPC_TIMEOUT)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout)
    }

    fn outgoing(&self, req: &mut http::Request<B>, remaining: Duration) {
        if self.propagate {
            let value = format_grpc_timeout(remaining);
            if let Ok(v) = http::HeaderValue::from_str(&value) {
                req.headers_mut().insert(GRPC_TIMEOUT, v);
            }
        }
    }
}

impl DeadlineLayer {
    /// A layer giving each request `budget`: longer than zero and at most
    /// [`MAX_DURATION`](crate::MAX_DURATION) (a year), or a [`ConfigError`] naming `budget`.
    pub fn new(budget: Duration) -> Result<Self, ConfigError> {
        let budget = check_duration("budget", budget)?;
        crate::telemetry::deadline_layer_built();
        Ok(Self {
            budget,
            headers: NoHeaders,
            shared: Shared::new(budget, false),
        })
    }
}

impl<H> DeadlineLayer<H> {
    /// The configured budget.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// Starts in shadow mode or not (see [Shadow mode](DeadlineLayer#shadow-mode)),
    /// with a switch and counter of its own: set it before taking a
    /// [`handle`](Self::handle).
    #[must_use]
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shared = Shared::new(self.budget, shadow);
        self
    }

    /// The handle on this layer's shadow switch and counter, shared by its clones
    /// and the services they build.
    pub fn handle(&self) -> DeadlineHandle {
        DeadlineHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// This layer with gRPC timeout headers, changed by `set`.
    fn with_grpc_timeout(self, set: impl FnOnce(&mut GrpcTimeout)) -> DeadlineLayer<GrpcTimeout>
    where
        H: Into<GrpcTimeout>,
    {
        let mut headers = self.headers.into();
        set(&mut headers);
        DeadlineLayer {
            budget: self.budget,
            headers,
            shared: self.shared,
        }
    }

    /// For `http::Request`s: also honour an incoming `grpc-timeout` header when it is
    /// shorter than the budget (a server's layer).
    #[must_use]
    pub fn honor_grpc_timeout(self, yes: bool) -> DeadlineLayer<GrpcTimeout>
    where
        H: Into<GrpcTimeout>,
    {
        self.with_grpc_timeout(|headers| headers.honor = yes)
    }

    /// For `http::Request`s: write the remaining budget into the outgoing
    /// `grpc-timeout` header, so the server stops working when the caller has
    /// stopped waiting (a client's layer).
    #[must_use]
    pub fn propagate_grpc_timeout(self, yes: bool) -> DeadlineLayer<GrpcTimeout>
    where
        H: Into<GrpcTimeout>,
    {
        self.with_grpc_timeout(|headers| headers.propagate = yes)
    }
}

impl From<NoHeaders> for GrpcTimeout {
    fn from(_: NoHeaders) -> Self {
        Self::default()
    }
}

impl<S, H: Clone> Layer<S> for DeadlineLayer<H> {
    type Service = DeadlineService<S, H>;

    fn layer(&self, inner: S) -> Self::Service {
        DeadlineService {
            inner,
            budget: self.budget,
            headers: self.headers.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service built by [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub struct DeadlineService<S, H = NoHeaders> {
    inner: S,
    budget: Duration,
    headers: H,
    shared: Arc<Shared>,
}

impl<S, H, Req> Service<Req> for DeadlineService<S, H>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    H: DeadlineHeaders<Req>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = DeadlineFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        let now = Instant::now();
        let mut deadline = Deadline::after(now, self.budget).or_earlier_current();
        if let Some(asked) = self.headers.incoming(&req) {
            deadline = deadline.min(Deadline::after(now, asked));
        }
        if self.shared.shadow.load(Ordering::Relaxed) {
            // Enforce nothing: not current, not propagated, not bounded; watched.
            return DeadlineFuture {
                kind: Kind::Shadow {
                    inner: self.inner.call(req),
                    timer: Timer::At {
                        at: deadline.instant(),
                    },
                    watching: Some(Arc::clone(&self.shared)),
                },
            };
        }
        self.headers.outgoing(&mut req, deadline.remaining(now));
        let inner = &mut self.inner;
        let current = Current {
            deadline,
            guarded: true,
        };
        // The inner future is built in its place in this one, not moved into it.
        with_current(current, || DeadlineFuture {
            kind: Kind::Enforcing {
                inner: inner.call(req),
                timer: Timer::At {
                    at: deadline.instant(),
                },
            },
        })
    }
}

pin_project! {
    /// The response future of [`DeadlineService`]: polls the inner future with the
    /// deadline current, and fails with [`DeadlineExceeded`] when it passes (in
    /// shadow mode: counts it, and waits for the inner future).
    #[derive(Debug)]
    pub struct DeadlineFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<F> {
        // What `Bounded` does, with the deadline known at once (no `Option`, nothing
        // to look for at the first poll): a smaller future for every layer inside.
        Enforcing {
            #[pin]
            inner: F,
            #[pin]
            timer: Timer,
        },
        Shadow {
            #[pin]
            inner: F,
            #[pin]
            timer: Timer,
            // `Some` until the deadline has passed and been counted.
            watching: Option<Arc<Shared>>,
        },
    }
}

pin_project! {
    /// A deadline's timer, armed once the call it bounds is pending (a call that
    /// answers at once registers none); the instant lives in the timer once armed,
    /// so the future holds it once.
    #[project = TimerProj]
    #[derive(Debug)]
    enum Timer {
        At {
            at: Instant,
        },
        Armed {
            #[pin]
            sleep: Sleep,
        },
    }
}

impl Timer {
    fn deadline(&self) -> Instant {
        match self {
            Timer::At { at } => *at,
            Timer::Armed { sleep } => sleep.deadline(),
        }
    }

    fn is_armed(&self) -> bool {
        matches!(self, Timer::Armed { .. })
    }

    /// Arms the timer if it is not yet, and polls it.
    fn poll_armed(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let TimerProj::At { at } = self.as_mut().project() {
            let sleep = tokio::time::sleep_until(*at);
            self.set(Timer::Armed { sleep });
        }
        match self.project() {
            TimerProj::Armed { sleep } => sleep.poll(cx),
            TimerProj::At { .. } => Poll::Pending,
        }
    }
}

impl<F, T, E> Future for DeadlineFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Enforcing { inner, timer } => {
                let deadline = Deadline::at(timer.deadline());
                // Its own timer is at this deadline: what it polls need not set one.
                let current = Current {
                    deadline,
                    guarded: true,
                };
                if let Poll::Ready(result) = with_current(current, || inner.poll(cx)) {
                    // Late when the deadline passed before this poll saw the answer,
                    // as in `Bounded`: only a call that was pending can be.
                    if !timer.is_armed() || !answered_late(deadline.instant()) {
                        return Poll::Ready(result.map_err(Into::into));
                    }
                } else {
                    ready!(timer.poll_armed(cx));
                }
                crate::telemetry::deadline_exceeded();
                Poll::Ready(Err(Box::new(DeadlineExceeded::new())))
            }
            KindProj::Shadow {
                inner,
                mut timer,
                watching,
            } => {
                // The inner future first, as `Bounded` does: a response seen at
                // the deadline is in time, one seen after it would have been cut.
                if let Poll::Ready(result) = inner.poll(cx) {
                    if timer.is_armed() && answered_late(timer.deadline()) {
                        count_shadow_rejection(watching);
                    }
                    return Poll::Ready(result.map_err(Into::into));
                }
                // Once counted, the fired timer is polled no more.
                if watching.is_some() && timer.as_mut().poll_armed(cx).is_ready() {
                    count_shadow_rejection(watching);
                }
                Poll::Pending
            }
        }
    }
}

/// Counts, once per call, a call a shadow layer would have cut at its deadline.
fn count_shadow_rejection(watching: &mut Option<Arc<Shared>>) {
    if let Some(shared) = watching.take() {
        shared.shadow_rejections.fetch_add(1, Ordering::Relaxed);
        crate::telemetry::deadline_shadow_rejected();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::find_rejection;
    use crate::rejection::RejectionKind;
    use tokio_test::{assert_pending, assert_ready, task};
    use tower::ServiceExt;
    use tower_test::mock;

    #[test]
    fn grpc_timeout_round_trips_and_rounds_up() {
        assert_eq!(parse_grpc_timeout("300m"), Some(Duration::from_millis(300)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("5u"), Some(Duration::from_micros(5)));
        assert_eq!(parse_grpc_timeout("123456789m"), None);
        assert_eq!(parse_grpc_timeout("m"), None);
        assert_eq!(parse_grpc_timeout("1x"), None);
        assert_eq!(parse_grpc_timeout("-1m"), None);
        assert_eq!(format_grpc_timeout(Duration::from_millis(300)), "300000u");
        assert_eq!(format_grpc_timeout(Duration::from_nanos(1500)), "1500n");
        assert_eq!(format_grpc_timeout(Duration::from_secs(1000)), "1000000m");
        let d = Duration::from_nanos(123_456_789_123);
        let back = parse_grpc_timeout(&format_grpc_timeout(d)).unwrap();
        assert!(back >= d && back - d < Duration::from_millis(1));
    }

    #[test]
    fn a_budget_past_a_year_is_a_config_error_naming_the_field() {
        for budget in [
            Duration::MAX,
            Duration::from_secs(u64::MAX),
            crate::MAX_DURATION + Duration::from_nanos(1),
        ] {
            let e = DeadlineLayer::new(budget).unwrap_err();
            assert_eq!(e.field(), "budget", "{budget:?}");
        }
        assert_eq!(
            DeadlineLayer::new(crate::MAX_DURATION).unwrap().budget(),
            crate::MAX_DURATION
        );
    }

    #[test]
    fn a_deadline_after_any_duration_is_computed_without_panicking() {
        let now = Instant::now();
        let d = Deadline::after(now, Duration::MAX);
        assert!(d.remaining(now) > Duration::from_secs(86_400 * 365 * 29));
        assert!(!d.is_expired(now));
    }

    /// An inner service that answers with the deadline current when it was called
    /// and when its future ran, and the `grpc-timeout` it was sent.
    #[allow(clippy::type_complexity)]
    fn seeing<Req: SentHeader + 'static>() -> impl Service<
        Req,
        Response = (Option<Deadline>, Option<Deadline>, Option<String>),
        Error = BoxError,
        Future: Send,
    > + Clone {
        tower::service_fn(|req: Req| {
            let in_call = Deadline::current();
            let header = req.grpc_timeout();
            async move { Ok((in_call, Deadline::current(), header)) }
        })
    }

    trait SentHeader {
        fn grpc_timeout(&self) -> Option<String>;
    }

    impl SentHeader for http::Request<()> {
        fn grpc_timeout(&self) -> Option<String> {
            self.headers()
                .get(GRPC_TIMEOUT)
                .map(|v| v.to_str().unwrap().to_owned())
        }
    }

    impl SentHeader for String {
        fn grpc_timeout(&self) -> Option<String> {
            None
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_huge_incoming_grpc_timeout_is_no_panic_and_the_budget_still_wins() {
        let svc = DeadlineLayer::new(Duration::from_millis(300))
            .unwrap()
            .honor_grpc_timeout(true)
            .layer(seeing::<http::Request<()>>());
        let start = Instant::now();
        let req = http::Request::builder()
            .header(GRPC_TIMEOUT, "99999999H")
            .body(())
            .unwrap();
        let (in_call, _, _) = svc.oneshot(req).await.unwrap();
        assert_eq!(
            in_call.unwrap().remaining(start),
            Duration::from_millis(300)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn any_request_type_gets_the_deadline_in_call_and_in_its_future() {
        let svc = DeadlineLayer::new(Duration::from_millis(300))
            .unwrap()
            .layer(seeing::<String>());
        let start = Instant::now();
        let expected = Some(Deadline::after(start, Duration::from_millis(300)));
        let (in_call, in_future, _) = svc.oneshot("SELECT 1".to_owned()).await.unwrap();
        assert_eq!(in_call, expected);
        assert_eq!(in_future, expected);
        // Outside the layer's call and future there is none.
        assert_eq!(Deadline::current(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spawned_future_loses_the_deadline_unless_it_is_carried() {
        let start = Instant::now();
        let d = Deadline::after(start, Duration::from_millis(100));
        let (lost, carried) = d
            .scope(async {
                let lost = tokio::spawn(async { Deadline::current() }).await.unwrap();
                let carried = tokio::spawn(with_current_deadline(async { Deadline::current() }))
                    .await
                    .unwrap();
                (lost, carried)
            })
            .await;
        assert_eq!(lost, None);
        assert_eq!(carried, Some(d));
    }

    #[tokio::test(start_paused = true)]
    async fn an_inner_scope_never_extends_an_outer_deadline() {
        let start = Instant::now();
        let outer = Deadline::after(start, Duration::from_millis(100));
        let longer = Deadline::after(start, Duration::from_millis(500));
        let shorter = Deadline::after(start, Duration::from_millis(50));
        outer.sync_scope(|| {
            assert_eq!(longer.sync_scope(Deadline::current), Some(outer));
            assert_eq!(shorter.sync_scope(Deadline::current), Some(shorter));
            assert_eq!(Deadline::current(), Some(outer));
        });
    }

    #[test]
    fn each_layer_adds_a_few_words_to_the_future_it_bounds() {
        use std::mem::size_of;
        type Inner = std::future::Ready<Result<[u64; 4], ()>>;
        const WORD: usize = size_of::<usize>();
        // The deadline or the rarely needed timer, and what says which: three words.
        assert_eq!(
            size_of::<BoundedByCurrent<Inner>>(),
            size_of::<Inner>() + 3 * WORD
        );
        // The layer's timer is inline (a pending call allocates nothing) and holds
        // the deadline once armed; in shadow mode, a word for the counters it
        // reports to.
        assert!(
            size_of::<DeadlineFuture<Inner>>() <= size_of::<Inner>() + size_of::<Sleep>() + WORD,
            "{}",
            size_of::<DeadlineFuture<Inner>>()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_by_current_looks_again_at_the_first_poll() {
        let start = Instant::now();
        let d = Deadline::after(start, Duration::from_millis(100));
        // Made where no deadline is current (as in tower's Buffer worker), polled
        // inside the caller's scope: the bound is the caller's deadline.
        let fut = bounded_by_current(std::future::pending::<()>());
        let mut fut = task::spawn(d.scope(fut));
        assert_pending!(fut.poll());
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(assert_ready!(fut.poll()).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_by_current_under_a_deadline_layer_notices_the_deadline_first() {
        // The inner service's future is bounded by the current deadline and tells
        // its own expiry apart; the layer's timer wakes the task, and the inner
        // bound, polled first, is the one that reports the deadline.
        let inner = tower::service_fn(|()| async {
            match bounded_by_current(std::future::pending::<()>()).await {
                Ok(()) => Ok::<_, BoxError>("answered"),
                Err(DeadlineExceeded { .. }) => Err("the inner bound saw the deadline".into()),
            }
        });
        let svc = DeadlineLayer::new(Duration::from_millis(100))
            .unwrap()
            .layer(inner);
        let mut fut = task::spawn(svc.oneshot(()));
        assert_pending!(fut.poll());
        tokio::time::advance(Duration::from_millis(99)).await;
        assert_pending!(fut.poll());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(fut.is_woken());
        let err = assert_ready!(fut.poll()).unwrap_err();
        assert_eq!(err.to_string(), "the inner bound saw the deadline");
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_by_current_under_a_plain_scope_sets_its_own_timer() {
        // `Deadline::scope` has no timer: the bound must wake the task itself.
        let d = Deadline::after(Instant::now(), Duration::from_millis(50));
        let mut fut = task::spawn(d.scope(bounded_by_current(std::future::pending::<()>())));
        assert_pending!(fut.poll());
        tokio::time::advance(Duration::from_millis(50)).await;
        assert!(fut.is_woken());
        assert!(assert_ready!(fut.poll()).is_err());
    }

    #[test]
    fn zero_budget_is_a_config_error() {
        assert_eq!(
            DeadlineLayer::new(Duration::ZERO).unwrap_err().field(),
            "budget"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_fails_when_the_deadline_passes_first() {
        let now = Instant::now();
        let d = Deadline::after(now, Duration::from_millis(300));
        let mut fut = task::spawn(bounded(std::future::pending::<()>(), Some(d)));
        assert_pending!(fut.poll());
        tokio::time::advance(Duration::from_millis(299)).await;
        assert_pending!(fut.poll());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(assert_ready!(fut.poll()).is_err());
    }

    /// A busy runtime runs the deadline's timer and the answer's wake-up together:
    /// the answer came after the deadline, so it is a timeout, not a success.
    #[tokio::test(start_paused = true)]
    async fn an_answer_seen_only_after_the_deadline_is_a_timeout() {
        let d = Deadline::after(Instant::now(), Duration::from_millis(300));
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let mut plain = task::spawn(bounded(rx, Some(d)));
        assert_pending!(plain.poll());
        let (tx2, rx2) = tokio::sync::oneshot::channel::<u32>();
        let mut current = task::spawn(d.scope(bounded_by_current(rx2)));
        assert_pending!(current.poll());
        tokio::time::advance(Duration::from_millis(400)).await;
        tx.send(1).unwrap();
        tx2.send(2).unwrap();
        assert!(assert_ready!(plain.poll()).is_err());
        assert!(assert_ready!(current.poll()).is_err());

        // An answer seen before the deadline is the answer.
        let d = Deadline::after(Instant::now(), Duration::from_millis(300));
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let mut in_time = task::spawn(bounded(rx, Some(d)));
        assert_pending!(in_time.poll());
        tokio::time::advance(Duration::from_millis(299)).await;
        tx.send(3).unwrap();
        assert_eq!(assert_ready!(in_time.poll()).unwrap().unwrap(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_fails_at_once_when_the_deadline_has_already_passed() {
        let now = Instant::now();
        let past = Deadline::after(now, Duration::from_millis(10));
        tokio::time::advance(Duration::from_millis(20)).await;
        let mut fut = task::spawn(bounded(std::future::pending::<()>(), Some(past)));
        assert!(assert_ready!(fut.poll()).is_err());
        // A future that is ready wins even over a passed deadline: its answer is in.
        let mut ready = task::spawn(bounded(std::future::ready(1), Some(past)));
        assert_eq!(assert_ready!(ready.poll()).unwrap(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_without_deadline_is_the_inner_future() {
        let mut fut = task::spawn(bounded(std::future::ready(7), None));
        assert_eq!(assert_ready!(fut.poll()).unwrap(), 7);
        let mut never = task::spawn(bounded(std::future::pending::<()>(), None));
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_pending!(never.poll());
    }

    /// One request through a 300 ms deadline over a mock, polled once and taken by
    /// the mock: its future, and the mock's way to answer it.
    async fn a_call_taken_under_300ms() -> (
        task::Spawn<impl Future<Output = Result<&'static str, BoxError>>>,
        mock::SendResponse<&'static str>,
    ) {
        let (svc, mut handle) = mock::pair::<http::Request<()>, &'static str>();
        let mut svc = DeadlineLayer::new(Duration::from_millis(300))
            .unwrap()
            .layer(svc);
        handle.allow(1);
        let mut fut = task::spawn(svc.ready().await.unwrap().call(http::Request::new(())));
        assert_pending!(fut.poll());
        let (_req, send) = handle.next_request().await.unwrap();
        (fut, send)
    }

    #[tokio::test(start_paused = true)]
    async fn layer_sets_the_deadline_and_enforces_it() {
        let (mut fut, _send) = a_call_taken_under_300ms().await;
        tokio::time::advance(Duration::from_millis(300)).await;
        let err = assert_ready!(fut.poll()).unwrap_err();
        assert_eq!(
            find_rejection(&*err).unwrap().kind(),
            RejectionKind::DeadlineExceeded
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_outer_deadline_and_a_shorter_grpc_timeout_win() {
        let mut svc = DeadlineLayer::new(Duration::from_millis(300))
            .unwrap()
            .honor_grpc_timeout(true)
            .propagate_grpc_timeout(true)
            .layer(seeing::<http::Request<()>>());
        let start = Instant::now();

        let outer = Deadline::after(start, Duration::from_millis(100));
        svc.ready().await.unwrap();
        let fut = outer.sync_scope(|| svc.call(http::Request::new(())));
        let (in_call, in_future, header) = outer.scope(fut).await.unwrap();
        assert_eq!(in_call, Some(outer));
        assert_eq!(in_future, Some(outer));
        assert_eq!(header.as_deref(), Some("100000u"));

        let req = http::Request::builder()
            .header(GRPC_TIMEOUT, "50m")
            .body(())
            .unwrap();
        let (in_call, _, header) = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(in_call.unwrap().remaining(start), Duration::from_millis(50));
        assert_eq!(header.as_deref(), Some("50000000n"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_in_time_passes_through() {
        let (mut fut, send) = a_call_taken_under_300ms().await;
        tokio::time::advance(Duration::from_millis(299)).await;
        send.send_response("quote");
        assert_eq!(assert_ready!(fut.poll()).unwrap(), "quote");
    }
}
