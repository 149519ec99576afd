//! The policy under tower's `Retry`, in paused time: every wait is a real
//! `tokio::time::sleep`, and the clock only moves when the runtime is idle.

use super::*;
use crate::classify::HttpStatus;
use crate::deadline::{Deadline, DeadlineLayer};
use crate::rejection::tests::ClientError;
use crate::rejection::{
    find_rejection, BulkheadFull, BulkheadTimeout, CircuitOpen, DeadlineExceeded,
};
use crate::time::MAX_DURATION;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;
use tokio_test::{assert_ready, task};
use tower::retry::RetryLayer;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

type Req = http::Request<()>;
const MS: Duration = Duration::from_millis(1);

/// A builder whose every jitter sample is 0.5.
fn half() -> DeadlineRetryBuilder {
    DeadlineRetry::builder("test").random_source(|| 0.5)
}

/// When each call to a dependency started.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Instant>>>);

impl Calls {
    fn record(&self) {
        self.0.lock().unwrap().push(Instant::now());
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Start times after `t0`, in milliseconds.
    fn offsets_ms(&self, t0: Instant) -> Vec<u128> {
        let calls = self.0.lock().unwrap();
        calls.iter().map(|t| (*t - t0).as_millis()).collect()
    }
}

/// A dependency that takes `takes` to fail with `error()` on every call.
fn failing(
    calls: &Calls,
    takes: Duration,
    error: fn() -> BoxError,
) -> impl Service<Req, Response = (), Error = BoxError, Future = impl Send> + Clone {
    let calls = calls.clone();
    service_fn(move |_req: Req| {
        calls.record();
        async move {
            tokio::time::sleep(takes).await;
            Err::<(), BoxError>(error())
        }
    })
}

fn boom() -> BoxError {
    "boom".into()
}

/// `policy` under tower's `Retry`, over a dependency that takes `takes` to fail
/// with "boom", its calls recorded in `calls`.
fn retrying<P>(
    policy: P,
    calls: &Calls,
    takes: Duration,
) -> impl Service<Req, Response = (), Error = BoxError, Future: Send> + Clone
where
    P: Policy<Req, (), BoxError, Future: Send> + Clone + Send,
{
    ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(failing(calls, takes, boom))
}

/// As [`retrying`], inside a 300 ms deadline.
fn retrying_within_300ms(
    policy: DeadlineRetry,
    calls: &Calls,
    takes: Duration,
) -> impl Service<Req, Response = (), Error = BoxError, Future: Send> + Clone {
    ServiceBuilder::new()
        .layer(DeadlineLayer::new(300 * MS).unwrap())
        .service(retrying(policy, calls, takes))
}

/// A policy of `attempts` with every jitter sample 0.5 and the given backoff.
fn backing_off(attempts: usize, base: Duration, max: Duration, jitter: Jitter) -> DeadlineRetry {
    waiting(attempts, base, max, jitter).build().unwrap()
}

/// A builder for `attempts` with every jitter sample 0.5 and the given backoff.
fn waiting(attempts: usize, base: Duration, max: Duration, jitter: Jitter) -> DeadlineRetryBuilder {
    half().max_attempts(attempts).backoff(base, max, jitter)
}

/// One request inside a 300 ms deadline, through a policy of 5 attempts that
/// needs `min_attempt_time` for each and waits with full jitter from `base` to
/// `max`, over a dependency that takes 100 ms to fail: its error, when each
/// attempt started (in milliseconds), how long it took, and the policy's counters.
async fn within_300ms_over_100ms_failures(
    min_attempt_time: Duration,
    base: Duration,
    max: Duration,
) -> (BoxError, Vec<u128>, Duration, RetrySnapshot) {
    let calls = Calls::default();
    let policy = waiting(5, base, max, Jitter::Full)
        .min_attempt_time(min_attempt_time)
        .build()
        .unwrap();
    let handle = policy.handle();
    let svc = retrying_within_300ms(policy, &calls, 100 * MS);
    let t0 = Instant::now();
    let err = svc.oneshot(Req::new(())).await.unwrap_err();
    (
        err,
        calls.offsets_ms(t0),
        Instant::now() - t0,
        handle.snapshot(),
    )
}

/// One request through `policy` over a dependency that fails at once: when each
/// of its attempts started, in milliseconds.
async fn attempt_starts_ms(policy: DeadlineRetry) -> Vec<u128> {
    let calls = Calls::default();
    let t0 = Instant::now();
    let svc = retrying(policy, &calls, Duration::ZERO);
    assert!(svc.oneshot(Req::new(())).await.is_err());
    calls.offsets_ms(t0)
}

#[tokio::test(start_paused = true)]
async fn attempts_count_the_first() {
    let calls = Calls::default();
    let policy = backing_off(3, Duration::ZERO, Duration::ZERO, Jitter::Full);
    let handle = policy.handle();
    let svc = retrying(policy, &calls, Duration::ZERO);
    assert!(svc.oneshot(Req::new(())).await.is_err());
    assert_eq!(calls.count(), 3);
    let s = handle.snapshot();
    assert_eq!((s.attempts, s.retries, s.refused_attempts), (3, 2, 1));
}

#[tokio::test(start_paused = true)]
async fn waits_follow_the_full_jitter_schedule() {
    // base 10 ms, cap 100 ms, samples of 0.5: ceilings 10, 20, 40, 80 ms, so waits
    // of 5, 10, 20, 40 ms, and calls starting at 0, 5, 15, 35, 75 ms.
    let policy = backing_off(5, 10 * MS, 100 * MS, Jitter::Full);
    assert_eq!(attempt_starts_ms(policy).await, [0, 5, 15, 35, 75]);
}

#[tokio::test(start_paused = true)]
async fn waits_follow_the_decorrelated_schedule() {
    // base 8 ms, cap 100 ms, samples of 0.5, each wait uniform in [8, 3 × previous]:
    // [8, 24] -> 16, [8, 48] -> 28, [8, 84] -> 46, [8, 138] -> 73, [8, 219] -> 113.5,
    // capped at 100. Calls start at 0, 16, 44, 90, 163, 263 ms.
    let policy = backing_off(6, 8 * MS, 100 * MS, Jitter::Decorrelated);
    assert_eq!(attempt_starts_ms(policy).await, [0, 16, 44, 90, 163, 263]);
}

#[tokio::test(start_paused = true)]
async fn a_source_out_of_range_waits_as_if_it_drew_zero() {
    let mut bad = [f64::NAN, 1.0, -0.5].into_iter().cycle();
    let policy = DeadlineRetry::builder("test")
        .random_source(move || bad.next().unwrap_or(f64::NAN))
        .max_attempts(4)
        .backoff(10 * MS, 100 * MS, Jitter::Full)
        .build()
        .unwrap();
    assert_eq!(attempt_starts_ms(policy).await, [0, 0, 0, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_wait_and_attempt_cannot_fit_is_not_made() {
    // A 300 ms budget; each attempt fails after 100 ms; a retry needs its wait plus
    // 60 ms. Waits (samples 0.5, base 40 ms): 20 ms, then 40 ms.
    //   0-100   first attempt; retry 1: 20 + 60 = 80 ms fit in the 200 left
    //   120-220 second attempt; retry 2: 40 + 60 = 100 ms do not fit in the 80 left
    let (err, starts, took, s) = within_300ms_over_100ms_failures(60 * MS, 40 * MS, 400 * MS).await;
    // The caller gets the last attempt's error as soon as it arrives, not a
    // deadline exceeded at 300 ms.
    assert_eq!(err.to_string(), "boom");
    assert_eq!(took, 220 * MS);
    assert_eq!(starts, [0, 120]);
    assert_eq!((s.retries, s.refused_deadline, s.refused_budget), (1, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_fits_exactly_is_made() {
    // 300 ms budget, attempts fail after 100 ms, no wait, 100 ms needed: retries at
    // 100 ms (200 left) and 200 ms (100 left, exactly enough); none at 300 ms
    // (nothing left), where the third attempt's error reaches the caller.
    let (err, starts, _, s) =
        within_300ms_over_100ms_failures(100 * MS, Duration::ZERO, Duration::ZERO).await;
    assert_eq!(err.to_string(), "boom");
    assert_eq!(starts, [0, 100, 200]);
    assert_eq!((s.retries, s.refused_deadline), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn seawall_rejections_are_never_retried() {
    let rejections: [fn() -> BoxError; 5] = [
        || Box::new(CircuitOpen::new("b".into(), Duration::from_secs(1))),
        || Box::new(BulkheadFull::new("b".into())),
        || Box::new(BulkheadTimeout::new("b".into(), 20 * MS)),
        || Box::new(DeadlineExceeded::new()),
        // Wrapped by a client's own error: still found.
        || Box::new(ClientError(Box::new(BulkheadFull::new("b".into())))),
    ];
    for rejection in rejections {
        let calls = Calls::default();
        // A predicate that would retry anything: rejections are decided before it.
        let policy = half()
            .max_attempts(5)
            .retry_if(|_: &Req, _: ClassifyInput<'_, ()>, _: Outcome| true)
            .build()
            .unwrap();
        let handle = policy.handle();
        let svc = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .service(failing(&calls, Duration::ZERO, rejection));
        let err = svc.oneshot(Req::new(())).await.unwrap_err();
        assert!(find_rejection(&*err).is_some(), "{err}");
        assert_eq!(calls.count(), 1, "{err} was retried");
        assert_eq!(handle.snapshot().retries, 0);
    }
}

/// A dependency answering `status` on every call, counting them.
fn answering(
    status: u16,
    calls: Arc<AtomicUsize>,
) -> impl Service<Req, Response = http::Response<()>, Error = BoxError, Future = impl Send> + Clone
{
    service_fn(move |_req: Req| {
        calls.fetch_add(1, Ordering::SeqCst);
        let res = http::Response::builder().status(status).body(());
        async move { res.map_err(BoxError::from) }
    })
}

#[tokio::test(start_paused = true)]
async fn business_answers_are_not_retried_and_server_errors_are() {
    for (status, expected_calls) in [(404, 1), (200, 1), (503, 3), (429, 3)] {
        let calls = Arc::new(AtomicUsize::new(0));
        let policy = half()
            .classifier(HttpStatus::default())
            .max_attempts(3)
            .build()
            .unwrap();
        let svc = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .service(answering(status, calls.clone()));
        let res = svc.oneshot(Req::new(())).await.unwrap();
        assert_eq!(res.status(), status);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            expected_calls,
            "status {status}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_is_not_retried_unless_the_predicate_allows_it() {
    let post = || http::Request::post("/orders").body(()).unwrap();

    let calls = Calls::default();
    let default_rule = half().max_attempts(3).build().unwrap();
    let svc = retrying(default_rule, &calls, Duration::ZERO);
    assert!(svc.oneshot(post()).await.is_err());
    assert_eq!(calls.count(), 1);

    let calls = Calls::default();
    let any_failure = half()
        .max_attempts(3)
        .retry_if(|_: &Req, _: ClassifyInput<'_, ()>, outcome: Outcome| outcome == Outcome::Failure)
        .build()
        .unwrap();
    let svc = retrying(any_failure, &calls, Duration::ZERO);
    assert!(svc.oneshot(post()).await.is_err());
    assert_eq!(calls.count(), 3);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_below_stops_the_retries_at_once() {
    // Below the policy, a breaker that opens after two failures: from the third
    // call on, every call is its rejection.
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let breaker_below = service_fn(move |_req: Req| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            Err::<(), BoxError>(if n < 2 {
                "boom".into()
            } else {
                Box::new(CircuitOpen::new("supplier".into(), Duration::from_secs(10)))
            })
        }
    });
    let policy = half().max_attempts(5).build().unwrap();
    let handle = policy.handle();
    let mut svc = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(breaker_below);

    // Two failures, then the breaker's rejection ends the retries with two attempts left.
    let ready = svc.ready().await.unwrap();
    let err = ready.call(Req::new(())).await.unwrap_err();
    assert!(err.is::<CircuitOpen>(), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // The next request is rejected on its first poll: no wait, no retry.
    let mut next = task::spawn(svc.ready().await.unwrap().call(Req::new(())));
    let err = assert_ready!(next.poll()).unwrap_err();
    assert!(err.is::<CircuitOpen>(), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let s = handle.snapshot();
    assert_eq!((s.attempts, s.retries), (4, 2));
}

#[tokio::test(start_paused = true)]
async fn the_budget_bounds_the_load_of_an_outage() {
    // Every call fails. 100 requests one after the other, 3 attempts each, a budget
    // of 20 % of first attempts plus a reserve of 5, over a 10 s window (the whole
    // test takes less than a second of paused time, so nothing leaves the window).
    //
    // Bound: at most (1 + 0.2) × 100 + 5 = 125 calls, where 300 would be made
    // without a budget. By hand: requests 1 and 2 take two retries each from the
    // reserve, request 3 the reserve's last; after that, request k (k = 5, 10, …,
    // 100) finds 0.2 × k a whole number and takes the one retry it earned. So 25
    // retries: 2 requests stop at their attempts, the other 98 at the budget.
    let calls = Calls::default();
    let policy = DeadlineRetry::builder("outage")
        .random_source(SeededRandom::new(11))
        .max_attempts(3)
        .backoff(MS, 10 * MS, Jitter::Full)
        .budget(0.2, 5, Duration::from_secs(10))
        .build()
        .unwrap();
    let handle = policy.handle();
    let svc = retrying(policy, &calls, Duration::ZERO);
    let t0 = Instant::now();
    for _ in 0..100 {
        assert!(svc.clone().oneshot(Req::new(())).await.is_err());
    }
    assert!(Instant::now() - t0 < Duration::from_secs(1));

    assert_eq!(calls.count(), 125);
    assert!(calls.count() as f64 <= (1.0 + 0.2) * 100.0 + 5.0);
    let s = handle.snapshot();
    assert_eq!(s.attempts, 125);
    assert_eq!(s.retries, 25);
    assert_eq!(s.refused_attempts, 2);
    assert_eq!(s.refused_budget, 98);
    assert_eq!(s.budget_available, 0);
}

/// The naive design: every tier retries any error, up to 3 attempts.
#[derive(Clone)]
struct EveryTierRetries(usize);

impl<Res> Policy<Req, Res, BoxError> for EveryTierRetries {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _: &mut Req, result: &mut Result<Res, BoxError>) -> Option<Self::Future> {
        (result.is_err() && self.0 < 3).then(|| {
            self.0 += 1;
            std::future::ready(())
        })
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        req.try_clone()
    }
}

#[tokio::test(start_paused = true)]
async fn one_retry_layer_keeps_the_deepest_calls_at_the_attempts() {
    // Three tiers (say, gateway → orders → freight client) over a failing supplier.
    // If each tier retries with 3 attempts, the supplier gets 3 × 3 × 3 calls.
    let calls = Calls::default();
    let every_tier = ServiceBuilder::new()
        .layer(RetryLayer::new(EveryTierRetries(1)))
        .layer(RetryLayer::new(EveryTierRetries(1)))
        .layer(RetryLayer::new(EveryTierRetries(1)))
        .service(failing(&calls, Duration::ZERO, boom));
    assert!(every_tier.oneshot(Req::new(())).await.is_err());
    assert_eq!(calls.count(), 27);

    // One responsible tier, inside the segment's deadline; the others pass errors up.
    let calls = Calls::default();
    let policy = half().max_attempts(3).build().unwrap();
    let one_tier = ServiceBuilder::new()
        .map_request(|r: Req| r) // gateway
        .layer(DeadlineLayer::new(300 * MS).unwrap())
        .layer(RetryLayer::new(policy)) // orders, the one that retries
        .map_request(|r: Req| r) // freight client
        .service(failing(&calls, Duration::ZERO, boom));
    assert!(one_tier.oneshot(Req::new(())).await.is_err());
    assert_eq!(calls.count(), 3);
}

#[tokio::test(start_paused = true)]
async fn the_longest_durations_refuse_the_retry_instead_of_panicking() {
    let calls = Calls::default();
    let year_long = waiting(3, MAX_DURATION, MAX_DURATION, Jitter::Decorrelated);
    let policy = year_long.min_attempt_time(MAX_DURATION).build().unwrap();
    let handle = policy.handle();
    let mut svc = retrying_within_300ms(policy, &calls, Duration::ZERO);
    let mut call = task::spawn(svc.ready().await.unwrap().call(Req::new(())));
    assert_eq!(assert_ready!(call.poll()).unwrap_err().to_string(), "boom");
    assert_eq!(calls.count(), 1);
    assert_eq!(handle.snapshot().refused_deadline, 1);

    // Without a deadline the year-long wait is made (paused time jumps over it).
    let policy = backing_off(2, MAX_DURATION, MAX_DURATION, Jitter::Decorrelated);
    let t0 = Instant::now();
    let starts = attempt_starts_ms(policy).await;
    assert_eq!(starts.len(), 2);
    assert_eq!(Instant::now() - t0, MAX_DURATION);
}

#[test]
fn build_names_the_field_at_fault() {
    let field = |b: DeadlineRetryBuilder| b.build().unwrap_err().field().to_owned();
    let b = || DeadlineRetry::builder("test");
    assert_eq!(field(b().max_attempts(0)), "max_attempts");
    assert_eq!(
        field(b().min_attempt_time(Duration::ZERO)),
        "min_attempt_time"
    );
    assert_eq!(
        field(b().backoff(200 * MS, 100 * MS, Jitter::Full)),
        "base_delay"
    );
    assert_eq!(
        field(b().budget(f64::NAN, 0, Duration::from_secs(10))),
        "budget_share"
    );
    assert_eq!(
        field(b().budget(-0.1, 0, Duration::from_secs(10))),
        "budget_share"
    );
    assert_eq!(field(b().budget(0.2, 0, Duration::ZERO)), "budget_window");
    assert_eq!(field(b().budget(0.2, 0, Duration::MAX)), "budget_window");
    assert_eq!(
        field(b().min_attempt_time(Duration::MAX)),
        "min_attempt_time"
    );
    assert_eq!(
        field(b().backoff(Duration::MAX, Duration::MAX, Jitter::Full)),
        "max_delay"
    );
}

#[test]
fn a_copy_keeps_method_uri_headers_and_deadline() {
    let mut req = http::Request::post("http://freight/quote")
        .header("x-destination", "lisbon")
        .body(())
        .unwrap();
    let d = Deadline::after(Instant::now(), 300 * MS);
    req.extensions_mut().insert(d);
    let copy = req.try_clone().unwrap();
    assert_eq!(copy.method(), http::Method::POST);
    assert_eq!(copy.uri(), "http://freight/quote");
    assert_eq!(copy.headers()["x-destination"], "lisbon");
    assert_eq!(copy.extensions().get::<Deadline>(), Some(&d));
    assert!(!copy.is_idempotent());
    assert!(http::Request::get("/").body(()).unwrap().is_idempotent());
}
