//! [`DeadlineLayer`]: gives each request its deadline, makes it current for the
//! layers below, and enforces it as a backstop; its service, future and handle.

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

use super::bound::answered_late;
use super::grpc_timeout::{format_grpc_timeout, parse_grpc_timeout, GRPC_TIMEOUT};
use super::{with_current, Current, Deadline};

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
