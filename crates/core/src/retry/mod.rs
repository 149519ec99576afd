//! The deadline-aware retry policy: see [`DeadlineRetry`] for its rules.

mod backoff;
mod budget;
mod config;
mod pushback;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower::retry::Policy;

pub use self::backoff::Jitter;
pub(crate) use self::budget::check_window;
pub use self::budget::SharedBudget;
pub use self::config::RetryConfig;
pub use self::pushback::{HttpPushback, IgnorePushback, Pushback, ReadPushback};
use crate::classify::{Classify, ClassifyInput, ErrorRef, ErrorsAsFailures, Outcome};
use crate::config::ConfigError;
use crate::deadline::Deadline;
use crate::random::{RandomSource, SeededRandom};
use crate::rejection::{BoxError, Name};
use crate::telemetry::{Refusal, RetryTelemetry};

/// A [`tower::retry::Policy`] for retries that respect the budget: attempts counted
/// from the first, spaced waits that fit in the deadline, a retry budget, and only
/// what can succeed.
///
/// seawall adds no retries by default. Once the budget of a dependency segment is
/// spent, failing now is better than waiting again with no useful time left: the
/// caller gets an answer it can act on. A retry is also one more call to a dependency
/// that has just failed, and retries multiply across layers: three layers of three
/// attempts each make up to 27 calls to the deepest dependency for one operation.
///
/// Where a fast transient failure deserves another try, let **one** layer own the
/// retries, with this policy:
///
/// - **Attempts count the first.** `max_attempts = 3` is one call and at most two
///   retries, never three retries.
/// - **The original deadline stands.** The request keeps the [`Deadline`](crate::Deadline)
///   set above; a retry is made only if its wait plus `min_attempt_time` fits in what
///   remains of it. Otherwise the caller gets the last error at once, not a timeout
///   later.
/// - **Waits grow, at random.** The wait before each retry grows exponentially from
///   `base_delay` to `max_delay`, with full or decorrelated [`Jitter`] drawn from an
///   injectable [`RandomSource`], so callers that failed together do not come back
///   together. The waits spend the budget too, and no spacing turns a saturated
///   dependency into spare capacity.
/// - **A retry budget bounds an outage.** Retries are allowed up to `budget_share` of
///   the first attempts of the last `budget_window`, plus `budget_reserve`: when every
///   call fails, the dependency sees at most `(1 + budget_share)` times the first
///   attempts, plus the reserve, instead of `max_attempts` times. The budget is shared
///   by every clone of the policy (see "Where state lives").
/// - **Only what can succeed.** A seawall rejection is never retried: an open breaker
///   or a full bulkhead would turn the retry away too, and a [`DeadlineExceeded`](crate::DeadlineExceeded)
///   has no budget left. A business answer (a result the classifier calls a success,
///   such as a `404` for [`HttpStatus`](crate::HttpStatus)) is never retried. By
///   default ([`IdempotentFailures`]) a failure is retried when the request is safe
///   to send twice (an idempotent HTTP method); [`retry_if`](DeadlineRetryBuilder::retry_if)
///   decides otherwise.
///
/// Build it with [`DeadlineRetry::builder`] and use it with `tower::retry::RetryLayer`
/// (or the facade's `ServiceBuilderExt::deadline_retry`). Requests must be
/// [`RetryableRequest`] (an `http::Request` whose body is `Clone`), since tower
/// resends a copy.
///
/// # Where it goes
///
/// ```text
/// FallbackLayer
/// DeadlineLayer(300ms)   one budget for the first attempt and every retry
/// DeadlineRetry          (tower's RetryLayer with this policy)
/// BulkheadLayer          admits each attempt on its own; no slot is held while waiting
/// CircuitBreakerLayer    each attempt is an observation; once open, it rejects the
///                        next attempt at once, and a rejection ends the retries
/// client
/// ```
///
/// Inside the deadline, so that retries share the caller's budget: above it, each
/// attempt would get a fresh 300 ms and the caller could wait 900. Outside the
/// breaker, so that an open breaker stops the retries at once (its [`CircuitOpen`](crate::CircuitOpen)
/// is not retried) and so that the breaker sees every attempt, not one result per
/// request. Outside the bulkhead, so that a request waiting between attempts holds no
/// slot, and each attempt is admitted (or rejected, and then not retried) like any
/// call.
///
/// # Where state lives
///
/// The budget, the counters and the random source live behind an `Arc` created by
/// [`build`](DeadlineRetryBuilder::build). Every clone of the policy shares them:
/// tower's `RetryLayer` clones the policy into each service it builds, and `Retry`
/// clones it again for each request, so all requests through the layer draw on one
/// budget. The attempts made and the last wait belong to one request. Like every
/// seawall limit, the budget is per instance: three instances have three budgets.
///
/// # Example
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use seawall_core::{BoxError, DeadlineLayer, DeadlineRetry, Jitter};
/// use tower::retry::RetryLayer;
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), BoxError> {
/// let policy = DeadlineRetry::builder("freight")
///     .max_attempts(3) // one call and at most two retries
///     .min_attempt_time(Duration::from_millis(50))
///     .backoff(Duration::from_millis(10), Duration::from_millis(100), Jitter::Full)
///     .budget(0.2, 10, Duration::from_secs(10))
///     .build()?;
/// let handle = policy.handle();
///
/// // A supplier whose first connection is refused.
/// let calls = Arc::new(AtomicUsize::new(0));
/// let supplier = service_fn(move |_req: http::Request<()>| {
///     let n = calls.fetch_add(1, Ordering::SeqCst);
///     async move {
///         if n == 0 {
///             Err::<&str, BoxError>("connection refused".into())
///         } else {
///             Ok("12.50 EUR")
///         }
///     }
/// });
/// let quotes = ServiceBuilder::new()
///     .layer(DeadlineLayer::new(Duration::from_millis(300))?)
///     .layer(RetryLayer::new(policy))
///     .service(supplier);
/// assert_eq!(quotes.oneshot(http::Request::new(())).await?, "12.50 EUR");
/// let seen = handle.snapshot();
/// assert_eq!((seen.attempts, seen.retries), (2, 1));
/// # Ok(())
/// # }
/// ```
///
/// # The retry budget, and why not tower's `TpsBudget`
///
/// First attempts and retries are counted in ten buckets spanning `budget_window`,
/// each one atomic word holding the bucket's number and its count; the share is
/// applied when a retry is asked for, to the buckets still in the window, so a count
/// lasts between 0.9 and 1 window. Taking a retry is one compare-and-swap against
/// the sums just read, so two callers cannot both take the last one (except, by one
/// each, on either side of a bucket boundary). A first attempt costs one
/// compare-and-swap; no lock is taken on the way to the dependency.
///
/// `tower::retry::budget::TpsBudget` has the same shape (a share of recent deposits
/// over ten slots, plus a reserve) but does not fit: it turns the share into a whole
/// number of deposits per retry, `1 / share` rounded down, so a share of 0.3 allows a
/// third and any share above one half allows one retry per first attempt, and the
/// bound above would not hold; its constructor panics on out-of-range values, where
/// seawall returns a [`ConfigError`]; and it locks a mutex on every deposit, that is
/// on every first attempt.
#[derive(Clone)]
pub struct DeadlineRetry<C = ErrorsAsFailures, F = IdempotentFailures, P = IgnorePushback> {
    shared: Arc<Shared>,
    classifier: C,
    retry_if: F,
    pushback: P,
    /// Attempts made so far for the current request (1 until the first retry).
    attempts: usize,
    /// The wait before the last retry of the current request.
    last_wait: Option<Duration>,
}

impl DeadlineRetry {
    /// A builder for a policy called `name` (the `name` label of its metrics), with
    /// [`RetryConfig::default`], [`ErrorsAsFailures`] and [`IdempotentFailures`].
    pub fn builder(name: impl Into<Name>) -> DeadlineRetryBuilder {
        DeadlineRetryBuilder {
            name: name.into(),
            config: RetryConfig::default(),
            random: None,
            budget: None,
            classifier: ErrorsAsFailures,
            retry_if: IdempotentFailures,
            pushback: IgnorePushback,
        }
    }
}

impl<C, F, P> DeadlineRetry<C, F, P> {
    /// The attempts made so far for the current request (1 before any retry).
    pub fn attempts(&self) -> usize {
        self.attempts
    }

    /// The configuration in force.
    pub fn config(&self) -> &RetryConfig {
        &self.shared.config
    }

    /// The retry budget this policy and its clones draw on, to share with a
    /// [`HedgeLayer`](crate::HedgeLayer) (see [`SharedBudget`]).
    pub fn budget(&self) -> SharedBudget {
        self.shared.budget.clone()
    }

    /// A handle on the counters this policy and its clones share.
    pub fn handle(&self) -> RetryHandle {
        RetryHandle {
            shared: self.shared.clone(),
        }
    }
}

impl<C, F, P> fmt::Debug for DeadlineRetry<C, F, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadlineRetry")
            .field("name", &self.shared.name)
            .field("config", &self.shared.config)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl<C, F, P, Req, Res> Policy<Req, Res, BoxError> for DeadlineRetry<C, F, P>
where
    C: Classify<Res>,
    F: RetryIf<Req, Res>,
    P: ReadPushback<Res>,
    Req: RetryableRequest,
{
    type Future = RetryDelay;

    fn retry(&mut self, req: &mut Req, result: &mut Result<Res, BoxError>) -> Option<RetryDelay> {
        let input = result.as_ref().map_err(|e| ErrorRef::from(&**e));
        // Another attempt would be rejected again (circuit open, bulkhead full) or
        // has no budget left (deadline exceeded): no predicate can change that.
        if input.is_err_and(|e| e.rejection().is_some()) {
            return None;
        }
        let outcome = self.classifier.classify(input);
        if !self.retry_if.retry_if(req, input, outcome) {
            return None;
        }
        let shared = &*self.shared;
        let config = &shared.config;
        if self.attempts >= config.max_attempts {
            shared.refused(Refusal::Attempts);
            return None;
        }
        // The dependency's own signal: "do not retry" ends the retries; "not before"
        // lengthens the wait, which must then fit in the deadline like any wait.
        let not_before = match self.pushback.pushback(input) {
            Pushback::Stop => {
                shared
                    .counters
                    .refused_pushback
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
            Pushback::After(after) => after,
            Pushback::None => Duration::ZERO,
        };
        let wait = backoff::wait(
            config.jitter,
            config.base_delay,
            config.max_delay,
            self.attempts,
            self.last_wait,
            shared.sample(),
        )
        .max(not_before);
        let now = Instant::now();
        // The current deadline: tower's `Retry` asks this policy from its response
        // future, which the deadline layer further out polls inside its scope.
        if let Some(deadline) = Deadline::current() {
            let fits = wait
                .checked_add(config.min_attempt_time)
                .is_some_and(|needed| needed <= deadline.remaining(now));
            if !fits {
                shared.refused(Refusal::Deadline);
                return None;
            }
        }
        // Last, so that a retry refused for another cause takes nothing from the budget.
        if !shared.budget.budget.withdraw(now) {
            shared.refused(Refusal::Budget);
            return None;
        }
        self.attempts += 1;
        self.last_wait = Some(wait);
        shared.counters.retries.fetch_add(1, Ordering::Relaxed);
        shared.telemetry.retried();
        Some(RetryDelay::new(wait))
    }

    /// Called by tower just before each attempt, the first included, which is where
    /// attempts are counted and first attempts fund the budget.
    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        let shared = &*self.shared;
        if self.attempts == 1 {
            shared.budget.budget.deposit(Instant::now());
        }
        shared.counters.attempts.fetch_add(1, Ordering::Relaxed);
        shared.telemetry.attempt();
        req.try_clone()
    }
}

/// Builds a [`DeadlineRetry`]; see [`DeadlineRetry::builder`]. Every setter is
/// validated by [`build`](Self::build), which names the field at fault.
pub struct DeadlineRetryBuilder<C = ErrorsAsFailures, F = IdempotentFailures, P = IgnorePushback> {
    name: Name,
    config: RetryConfig,
    random: Option<Box<dyn RandomSource>>,
    budget: Option<SharedBudget>,
    classifier: C,
    retry_if: F,
    pushback: P,
}

impl<C, F, P> fmt::Debug for DeadlineRetryBuilder<C, F, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadlineRetryBuilder")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<C, F, P> DeadlineRetryBuilder<C, F, P> {
    /// Attempts in all, the first included (default 3; at least 1).
    #[must_use]
    pub fn max_attempts(mut self, attempts: usize) -> Self {
        self.config.max_attempts = attempts;
        self
    }

    /// The least time an attempt needs to be worth making (default 50 ms): a retry
    /// is made only if its wait plus this fits in the remaining budget.
    #[must_use]
    pub fn min_attempt_time(mut self, time: Duration) -> Self {
        self.config.min_attempt_time = time;
        self
    }

    /// Waits before retries: the n-th retry's ceiling is `base × 2^(n-1)`, at most
    /// `max` (default 10 ms, 100 ms, [`Jitter::Full`]). Zero for both retries at once.
    #[must_use]
    pub fn backoff(mut self, base: Duration, max: Duration, jitter: Jitter) -> Self {
        self.config.base_delay = base;
        self.config.max_delay = max;
        self.config.jitter = jitter;
        self
    }

    /// Retries allowed: `share` of the first attempts of the last `window`, plus
    /// `reserve` per window (default 0.2, 10, 10 s).
    #[must_use]
    pub fn budget(mut self, share: f64, reserve: u32, window: Duration) -> Self {
        self.config.budget_share = share;
        self.config.budget_reserve = reserve;
        self.config.budget_window = window;
        self
    }

    /// Draws on `budget` instead of a budget of the policy's own, so that a
    /// [`HedgeLayer`](crate::HedgeLayer) given the same budget spends it too. The
    /// policy counts the budget's first attempts; the `budget` setting is then not
    /// used (the shared budget's own share, reserve and window apply).
    #[must_use]
    pub fn shared_budget(mut self, budget: SharedBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Replaces the whole configuration (e.g. one loaded from a file).
    #[must_use]
    pub fn config(mut self, config: RetryConfig) -> Self {
        self.config = config;
        self
    }

    /// The source of the jitter samples (default: seeded from entropy, so instances
    /// do not draw the same waits).
    #[must_use]
    pub fn random_source(mut self, random: impl RandomSource) -> Self {
        self.random = Some(Box::new(random));
        self
    }

    /// Decides which results are failures (default [`ErrorsAsFailures`]); with
    /// [`HttpStatus`](crate::HttpStatus), a `503` is retried and a `404` is not.
    pub fn classifier<C2>(self, classifier: C2) -> DeadlineRetryBuilder<C2, F, P> {
        DeadlineRetryBuilder {
            name: self.name,
            config: self.config,
            random: self.random,
            budget: self.budget,
            classifier,
            retry_if: self.retry_if,
            pushback: self.pushback,
        }
    }

    /// Honours the dependency's own backoff signals (default [`IgnorePushback`]):
    /// with [`HttpPushback`], a `Retry-After` on a 429 or a 503 makes the retry wait
    /// at least that long, and not happen at all if that wait plus
    /// `min_attempt_time` does not fit in the deadline; a negative or malformed
    /// `grpc-retry-pushback-ms` ends the retries. Any [`ReadPushback`], such as a
    /// closure, reads other signals.
    pub fn pushback<P2>(self, pushback: P2) -> DeadlineRetryBuilder<C, F, P2> {
        DeadlineRetryBuilder {
            name: self.name,
            config: self.config,
            random: self.random,
            budget: self.budget,
            classifier: self.classifier,
            retry_if: self.retry_if,
            pushback,
        }
    }

    /// Decides which results are retried (default [`IdempotentFailures`]): any
    /// [`RetryIf`], such as a closure over the request, the result and the
    /// classifier's outcome. Seawall rejections are never retried, whatever it says.
    ///
    /// ```
    /// use seawall_core::{ClassifyInput, DeadlineRetry, HttpStatus, Outcome};
    ///
    /// // Orders carry an idempotency key, so a POST is safe to resend too.
    /// let policy = DeadlineRetry::builder("orders")
    ///     .classifier(HttpStatus::default())
    ///     .retry_if(
    ///         |req: &http::Request<()>, _: ClassifyInput<'_, http::Response<()>>, outcome: Outcome| {
    ///             outcome == Outcome::Failure
    ///                 && (req.method().is_idempotent()
    ///                     || req.headers().contains_key("idempotency-key"))
    ///         },
    ///     )
    ///     .build()
    ///     .unwrap();
    /// # let _ = policy;
    /// ```
    pub fn retry_if<F2>(self, retry_if: F2) -> DeadlineRetryBuilder<C, F2, P> {
        DeadlineRetryBuilder {
            name: self.name,
            config: self.config,
            random: self.random,
            budget: self.budget,
            classifier: self.classifier,
            retry_if,
            pushback: self.pushback,
        }
    }

    /// Validates the configuration and creates the shared budget, counters and
    /// metric handles (install a metrics recorder before this).
    pub fn build(self) -> Result<DeadlineRetry<C, F, P>, ConfigError> {
        let config = self.config;
        config.validate()?;
        let random = self
            .random
            .unwrap_or_else(|| Box::new(SeededRandom::from_entropy()));
        let budget = self.budget.unwrap_or_else(|| {
            SharedBudget::build(
                config.budget_share,
                config.budget_reserve,
                config.budget_window,
            )
        });
        budget
            .budget
            .counted_by_retry
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let shared = Shared {
            telemetry: RetryTelemetry::new(&self.name),
            name: self.name,
            config,
            budget,
            random: Mutex::new(random),
            counters: Counters::default(),
        };
        Ok(DeadlineRetry {
            shared: Arc::new(shared),
            classifier: self.classifier,
            retry_if: self.retry_if,
            pushback: self.pushback,
            attempts: 1,
            last_wait: None,
        })
    }
}

/// What the clones of one policy share.
struct Shared {
    name: Name,
    config: RetryConfig,
    budget: SharedBudget,
    /// Locked only to draw the wait of a retry, never on a first attempt.
    random: Mutex<Box<dyn RandomSource>>,
    counters: Counters,
    telemetry: RetryTelemetry,
}

impl Shared {
    /// A sample in `[0, 1)`, whatever the source returns.
    fn sample(&self) -> f64 {
        let u = self
            .random
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next_f64();
        if (0.0..1.0).contains(&u) {
            u
        } else {
            0.0
        }
    }

    fn refused(&self, cause: Refusal) {
        let counter = match cause {
            Refusal::Budget => &self.counters.refused_budget,
            Refusal::Deadline => &self.counters.refused_deadline,
            Refusal::Attempts => &self.counters.refused_attempts,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.telemetry.refused(&self.name, cause);
    }
}

#[derive(Debug, Default)]
struct Counters {
    attempts: AtomicU64,
    retries: AtomicU64,
    refused_budget: AtomicU64,
    refused_deadline: AtomicU64,
    refused_attempts: AtomicU64,
    refused_pushback: AtomicU64,
}

/// Reads the counters of one [`DeadlineRetry`] and its clones. Cheap to clone.
#[derive(Clone)]
pub struct RetryHandle {
    shared: Arc<Shared>,
}

impl RetryHandle {
    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The counters now (a few atomic loads; allocates the name).
    pub fn snapshot(&self) -> RetrySnapshot {
        let c = &self.shared.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RetrySnapshot {
            name: self.shared.name.to_string(),
            attempts: load(&c.attempts),
            retries: load(&c.retries),
            refused_budget: load(&c.refused_budget),
            refused_deadline: load(&c.refused_deadline),
            refused_attempts: load(&c.refused_attempts),
            refused_pushback: load(&c.refused_pushback),
            budget_available: self.shared.budget.available(),
        }
    }
}

impl fmt::Debug for RetryHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryHandle")
            .field("name", &self.name())
            .finish()
    }
}

/// A retry policy's counters at one moment (see [`RetryHandle::snapshot`]).
///
/// Counters run since the policy was built. First attempts are `attempts - retries`.
/// A result worth retrying that was not retried is counted once, under the first
/// rule that refused it: attempts, then the dependency's pushback, then deadline,
/// then budget.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct RetrySnapshot {
    /// The policy's name.
    pub name: String,
    /// Attempts made, the first ones included.
    pub attempts: u64,
    /// Retries made.
    pub retries: u64,
    /// Retries not made because the retry budget had none left.
    pub refused_budget: u64,
    /// Retries not made because their wait plus `min_attempt_time` did not fit in
    /// the remaining budget of the request's deadline.
    pub refused_deadline: u64,
    /// Requests that failed with every attempt used.
    pub refused_attempts: u64,
    /// Retries not made because the dependency said not to retry (see
    /// [`Pushback::Stop`]). A retry-after that does not fit in the deadline is
    /// counted under `refused_deadline`.
    pub refused_pushback: u64,
    /// Retries the budget would allow now.
    pub budget_available: u64,
}

/// Decides whether a result is worth another attempt, given the request, the result
/// and what the classifier made of it.
///
/// Implemented for every `Fn(&Req, ClassifyInput<'_, Res>, Outcome) -> bool`. It is
/// asked only about results that are not seawall rejections.
pub trait RetryIf<Req, Res> {
    /// Whether to retry `req` after `result`, classified as `outcome`.
    fn retry_if(&self, req: &Req, result: ClassifyInput<'_, Res>, outcome: Outcome) -> bool;
}

impl<Req, Res, F> RetryIf<Req, Res> for F
where
    F: Fn(&Req, ClassifyInput<'_, Res>, Outcome) -> bool,
{
    fn retry_if(&self, req: &Req, result: ClassifyInput<'_, Res>, outcome: Outcome) -> bool {
        self(req, result, outcome)
    }
}

/// The default [`RetryIf`]: a failure (by the classifier: a transport error, a `5xx`
/// with [`HttpStatus`](crate::HttpStatus)) of a request that is safe to send twice.
///
/// A failed attempt may still have reached the dependency and done its work; only
/// an idempotent request ([`RetryableRequest::is_idempotent`]) can be sent again
/// without doing it twice.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdempotentFailures;

impl<Req: RetryableRequest, Res> RetryIf<Req, Res> for IdempotentFailures {
    fn retry_if(&self, req: &Req, _result: ClassifyInput<'_, Res>, outcome: Outcome) -> bool {
        outcome == Outcome::Failure && req.is_idempotent()
    }
}

/// A request that can be copied for another attempt.
///
/// `http::Request` is not `Clone` (its body usually cannot be replayed); it is
/// retryable when its body is `Clone`, such as `Full<Bytes>` or `()`.
pub trait RetryableRequest: Sized {
    /// A copy to send again, or `None` when this request cannot be resent.
    fn try_clone(&self) -> Option<Self>;

    /// Whether sending the request twice has the effect of sending it once, so that
    /// a failure that may have reached the dependency can be retried.
    fn is_idempotent(&self) -> bool;
}

impl<B: Clone> RetryableRequest for http::Request<B> {
    fn try_clone(&self) -> Option<Self> {
        let mut copy = http::Request::new(self.body().clone());
        *copy.method_mut() = self.method().clone();
        *copy.uri_mut() = self.uri().clone();
        *copy.version_mut() = self.version();
        *copy.headers_mut() = self.headers().clone();
        *copy.extensions_mut() = self.extensions().clone();
        Some(copy)
    }

    /// GET, HEAD, PUT, DELETE, OPTIONS and TRACE, as HTTP defines them.
    fn is_idempotent(&self) -> bool {
        self.method().is_idempotent()
    }
}

pin_project! {
    /// The wait before a retry: a `tokio::time::sleep`, so paused time drives it;
    /// nothing (no timer) when the wait is zero.
    #[derive(Debug)]
    pub struct RetryDelay {
        #[pin]
        sleep: Option<Sleep>,
    }
}

impl RetryDelay {
    fn new(wait: Duration) -> Self {
        Self {
            // `sleep` saturates a wait past the clock's range instead of panicking.
            sleep: (!wait.is_zero()).then(|| tokio::time::sleep(wait)),
        }
    }
}

impl Future for RetryDelay {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.project().sleep.as_pin_mut() {
            Some(sleep) => sleep.poll(cx),
            None => Poll::Ready(()),
        }
    }
}

#[cfg(test)]
mod tests;
