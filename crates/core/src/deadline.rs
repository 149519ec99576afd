//! Request deadlines: a budget set once, honoured by every layer below.
//!
//! [`DeadlineLayer`] stamps each request with a [`Deadline`] (the budget of the
//! dependency segment, admission included, such as 300 ms) and enforces it as a
//! backstop. Inner layers read it with [`deadline_of`]: the bulkhead stops waiting
//! for a slot at it, the breaker bounds the dependency call by it with [`bounded`]
//! and records an overrun as a failure.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_layer::Layer;
use tower_service::Service;

use crate::config::{check_duration, ConfigError};
use crate::rejection::{BoxError, DeadlineExceeded};

/// The instant by which a request must be answered. Lives in the request's extensions.
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
}

/// Requests that carry [`http::Extensions`], where seawall keeps per-request data
/// (a [`Deadline`], an opt-in bulkhead permit or degradation level).
///
/// Implemented for [`http::Request`], which is what axum, hyper-util and tonic
/// channels see. For a request type of your own, implement it to return your
/// extensions, or `None`: seawall then treats the request as having no deadline.
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

/// The deadline a request carries, if any.
pub fn deadline_of<R: HasExtensions + ?Sized>(req: &R) -> Option<Deadline> {
    req.extensions()?.get::<Deadline>().copied()
}

/// What remains of a request's budget at `now`; `None` when it has no deadline.
pub fn remaining_budget<R: HasExtensions + ?Sized>(req: &R, now: Instant) -> Option<Duration> {
    deadline_of(req).map(|d| d.remaining(now))
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

impl<F: Future> Future for Bounded<F> {
    type Output = Result<F::Output, DeadlineExceeded>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(out) = this.inner.poll(cx) {
            return Poll::Ready(Ok(out));
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

/// Sets a [`Deadline`] on each request and enforces it as a backstop.
///
/// The deadline is `now + budget`, or an earlier one the request already carries
/// (an overall budget set further out), or — with
/// [`honor_grpc_timeout`](DeadlineLayer::honor_grpc_timeout) — the incoming
/// `grpc-timeout` when it is shorter. When the deadline passes, the call fails with
/// [`DeadlineExceeded`] and the inner future is dropped.
///
/// The layer holds no shared state; every service it builds is independent.
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    budget: Duration,
    honor_grpc_timeout: bool,
    propagate_grpc_timeout: bool,
}

impl DeadlineLayer {
    /// A layer giving each request `budget`: longer than zero and at most
    /// [`MAX_DURATION`](crate::MAX_DURATION) (a year), or a [`ConfigError`] naming `budget`.
    pub fn new(budget: Duration) -> Result<Self, ConfigError> {
        Ok(Self {
            budget: check_duration("budget", budget)?,
            honor_grpc_timeout: false,
            propagate_grpc_timeout: false,
        })
    }

    /// Also honour an incoming `grpc-timeout` header when it is shorter than the budget.
    #[must_use]
    pub fn honor_grpc_timeout(mut self, yes: bool) -> Self {
        self.honor_grpc_timeout = yes;
        self
    }

    /// Write the remaining budget into the outgoing `grpc-timeout` header, so the
    /// server stops working when the caller has stopped waiting.
    #[must_use]
    pub fn propagate_grpc_timeout(mut self, yes: bool) -> Self {
        self.propagate_grpc_timeout = yes;
        self
    }

    /// The configured budget.
    pub fn budget(&self) -> Duration {
        self.budget
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DeadlineService {
            inner,
            config: *self,
        }
    }
}

/// The service built by [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub struct DeadlineService<S> {
    inner: S,
    config: DeadlineLayer,
}

impl<S, B> Service<http::Request<B>> for DeadlineService<S>
where
    S: Service<http::Request<B>>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = DeadlineFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let now = Instant::now();
        let mut deadline = Deadline::after(now, self.config.budget);
        if let Some(outer) = req.extensions().get::<Deadline>() {
            deadline = deadline.min(*outer);
        }
        if self.config.honor_grpc_timeout {
            let incoming = req
                .headers()
                .get(GRPC_TIMEOUT)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_grpc_timeout);
            if let Some(t) = incoming {
                deadline = deadline.min(Deadline::after(now, t));
            }
        }
        if self.config.propagate_grpc_timeout {
            let value = format_grpc_timeout(deadline.remaining(now));
            if let Ok(v) = http::HeaderValue::from_str(&value) {
                req.headers_mut().insert(GRPC_TIMEOUT, v);
            }
        }
        req.extensions_mut().insert(deadline);
        DeadlineFuture {
            inner: bounded(self.inner.call(req), Some(deadline)),
        }
    }
}

pin_project! {
    /// The response future of [`DeadlineService`].
    #[derive(Debug)]
    pub struct DeadlineFuture<F> {
        #[pin]
        inner: Bounded<F>,
    }
}

impl<F, T, E> Future for DeadlineFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match ready!(self.project().inner.poll(cx)) {
            Ok(result) => Poll::Ready(result.map_err(Into::into)),
            Err(exceeded) => {
                crate::telemetry::deadline_exceeded();
                Poll::Ready(Err(Box::new(exceeded)))
            }
        }
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

    #[tokio::test(start_paused = true)]
    async fn a_huge_incoming_grpc_timeout_is_no_panic_and_the_budget_still_wins() {
        let (svc, mut handle) = mock::pair::<http::Request<()>, ()>();
        let mut svc = DeadlineLayer::new(Duration::from_millis(300))
            .unwrap()
            .honor_grpc_timeout(true)
            .layer(svc);
        handle.allow(1);
        let start = Instant::now();
        let req = http::Request::builder()
            .header(GRPC_TIMEOUT, "99999999H")
            .body(())
            .unwrap();
        let _f = svc.ready().await.unwrap().call(req);
        let (seen, _s) = handle.next_request().await.unwrap();
        assert_eq!(
            remaining_budget(&seen, start),
            Some(Duration::from_millis(300))
        );
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

    #[tokio::test(start_paused = true)]
    async fn layer_sets_the_deadline_and_enforces_it() {
        let (svc, mut handle) = mock::pair::<http::Request<()>, &'static str>();
        let mut svc = DeadlineLayer::new(Duration::from_millis(300))
            .unwrap()
            .layer(svc);
        handle.allow(1);
        let start = Instant::now();
        let mut fut = task::spawn(svc.ready().await.unwrap().call(http::Request::new(())));
        assert_pending!(fut.poll());
        let (req, _send) = handle.next_request().await.unwrap();
        assert_eq!(
            deadline_of(&req),
            Some(Deadline::after(start, Duration::from_millis(300)))
        );
        tokio::time::advance(Duration::from_millis(300)).await;
        let err = assert_ready!(fut.poll()).unwrap_err();
        assert_eq!(
            find_rejection(&*err).unwrap().kind(),
            RejectionKind::DeadlineExceeded
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_outer_deadline_and_a_shorter_grpc_timeout_win() {
        let (svc, mut handle) = mock::pair::<http::Request<()>, ()>();
        let mut svc = DeadlineLayer::new(Duration::from_millis(300))
            .unwrap()
            .honor_grpc_timeout(true)
            .propagate_grpc_timeout(true)
            .layer(svc);
        handle.allow(2);
        let start = Instant::now();

        let mut req = http::Request::new(());
        req.extensions_mut()
            .insert(Deadline::after(start, Duration::from_millis(100)));
        let _f1 = svc.ready().await.unwrap().call(req);
        let (seen, _s) = handle.next_request().await.unwrap();
        assert_eq!(
            deadline_of(&seen).unwrap().remaining(start),
            Duration::from_millis(100)
        );
        assert_eq!(seen.headers()[GRPC_TIMEOUT], "100000u");

        let req = http::Request::builder()
            .header(GRPC_TIMEOUT, "50m")
            .body(())
            .unwrap();
        let _f2 = svc.ready().await.unwrap().call(req);
        let (seen, _s) = handle.next_request().await.unwrap();
        assert_eq!(
            remaining_budget(&seen, start),
            Some(Duration::from_millis(50))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_in_time_passes_through() {
        let (svc, mut handle) = mock::pair::<http::Request<()>, &'static str>();
        let mut svc = DeadlineLayer::new(Duration::from_millis(300))
            .unwrap()
            .layer(svc);
        handle.allow(1);
        let mut fut = task::spawn(svc.ready().await.unwrap().call(http::Request::new(())));
        assert_pending!(fut.poll());
        let (_req, send) = handle.next_request().await.unwrap();
        tokio::time::advance(Duration::from_millis(299)).await;
        send.send_response("quote");
        assert_eq!(assert_ready!(fut.poll()).unwrap(), "quote");
    }
}
