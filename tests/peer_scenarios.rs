//! Behavioural scenarios that the test suites of other resilience libraries check,
//! replayed against seawall's circuit breaker, bulkhead, fallback and deadline and
//! judged by seawall's own documented rules (the crate docs of
//! `seawall-circuit-breaker`, `seawall-bulkhead`, `seawall-fallback` and
//! `seawall-core`). Each test names the scenario it comes from; where that library
//! expects something else, the comment says what seawall promises instead.
//!
//! Everything goes through the public Tower API, with a small scripted dependency
//! and paused time: `tokio::time::advance` moves the clock to the edges (one
//! nanosecond before an interval ends, and at its end).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{
    CircuitBreakerLayer, Forced, State, MAX_COUNT_WINDOW, MAX_HALF_OPEN_PROBES,
};
use seawall::core::ClassifyInput;
use seawall::{find_rejection, BoxError, Outcome, RejectionKind};
use tokio::sync::oneshot;
use tokio_test::{assert_pending, assert_ready_err, assert_ready_ok, task};
use tower::util::Oneshot;
use tower::{Layer, Service, ServiceExt};

const NS: Duration = Duration::from_nanos(1);
const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// What the dependency does with one request.
enum Script {
    Succeed,
    Fail,
    /// A valid business refusal, classified `Ignore` by [`refusals_ignored`].
    Refuse,
    /// Answers when told: `true` succeeds, `false` fails (a dropped sender fails too).
    Hold(oneshot::Receiver<bool>),
    Panic,
}

/// A held request and the switch that finishes it.
fn held() -> (oneshot::Sender<bool>, Script) {
    let (tx, rx) = oneshot::channel();
    (tx, Script::Hold(rx))
}

/// The dependency: counts how often it is polled for readiness and called.
#[derive(Clone, Default)]
struct Dependency {
    polled: Arc<AtomicUsize>,
    called: Arc<AtomicUsize>,
}

impl Dependency {
    fn polled(&self) -> usize {
        self.polled.load(Ordering::SeqCst)
    }
    fn called(&self) -> usize {
        self.called.load(Ordering::SeqCst)
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<&'static str, BoxError>> + Send>>;

impl Service<Script> for Dependency {
    type Response = &'static str;
    type Error = BoxError;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.polled.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, script: Script) -> Answer {
        self.called.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            match script {
                Script::Succeed => Ok("ok"),
                Script::Fail => Err("connection refused".into()),
                Script::Refuse => Ok("refused"),
                Script::Hold(rx) => match rx.await {
                    Ok(true) => Ok("late ok"),
                    _ => Err("late failure".into()),
                },
                Script::Panic => panic!("the dependency crashed"),
            }
        })
    }
}

/// Errors fail, a refusal is no evidence either way, any other answer succeeds.
fn refusals_ignored(result: ClassifyInput<'_, &'static str>) -> Outcome {
    match result {
        Ok(&"refused") => Outcome::Ignore,
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::Failure,
    }
}

type Call<S> = task::Spawn<Oneshot<S, Script>>;

/// One call, not started: the test polls it by hand, and its first poll readies
/// the service, calls it (where seawall admits or rejects) and polls the response.
fn start<S: Service<Script> + Clone>(svc: &S, script: Script) -> Call<S> {
    task::spawn(svc.clone().oneshot(script))
}

/// A call that must have been admitted and still be running.
fn start_held<S>(svc: &S) -> (oneshot::Sender<bool>, Call<S>)
where
    S: Service<Script, Response = &'static str, Error = BoxError> + Clone,
{
    let (tx, script) = held();
    let mut call = task::spawn(svc.clone().oneshot(script));
    assert_pending!(call.poll(), "the call should be admitted and running");
    (tx, call)
}

/// The kind of seawall rejection in the error's chain, if any.
fn kind(err: &BoxError) -> Option<RejectionKind> {
    find_rejection(&**err).map(|r| r.kind())
}

/// The retry-after of the seawall rejection in the error's chain, if any.
fn retry_after(err: &BoxError) -> Option<Duration> {
    find_rejection(&**err).and_then(|r| r.retry_after())
}

/// One call through a clone of `svc`, to its end.
async fn run<S>(svc: &S, script: Script) -> Result<&'static str, BoxError>
where
    S: Service<Script, Response = &'static str, Error = BoxError> + Clone,
{
    svc.clone().oneshot(script).await
}

/// `n` calls that reach the dependency and fail there.
async fn fail_times<S>(svc: &S, n: usize)
where
    S: Service<Script, Response = &'static str, Error = BoxError> + Clone,
{
    for _ in 0..n {
        let err = run(svc, Script::Fail).await.unwrap_err();
        assert_eq!(
            kind(&err),
            None,
            "a failure of the dependency itself: {err}"
        );
    }
}

// ---------------------------------------------------------------------------
// Circuit breaker: closed-state windows
// ---------------------------------------------------------------------------

// gobreaker: TestDefaultCircuitBreaker (a success between failures restarts the
// count); failsafe: consecutive_failures reset_to_zero_on_success. gobreaker's
// default trips on more than 5 failures in a row; seawall trips at `>=` threshold.
#[tokio::test(start_paused = true)]
async fn a_success_resets_the_consecutive_failure_count() {
    let layer = CircuitBreakerLayer::builder("consecutive")
        .jitter(0.0)
        .consecutive_failures(5)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    fail_times(&svc, 4).await;
    assert_eq!(handle.snapshot().consecutive_failures, Some(4));
    run(&svc, Script::Succeed).await.unwrap();
    assert_eq!(handle.snapshot().consecutive_failures, Some(0));

    fail_times(&svc, 4).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "8 failures, never 5 in a row"
    );
    fail_times(&svc, 1).await;
    assert_eq!(handle.state(), State::Open, "the 5th in a row trips");
}

// tower-resilience: failure_rate_threshold_trips_after_window_fills (below the
// minimum the breaker stays closed whatever the rate; at it, a rate exactly at
// the threshold trips, as `>=`).
#[tokio::test(start_paused = true)]
async fn a_count_window_waits_for_min_calls_then_trips_at_exactly_the_rate() {
    let layer = CircuitBreakerLayer::builder("count")
        .jitter(0.0)
        .count_window(4, 4, 0.5)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    fail_times(&svc, 2).await;
    assert_eq!(handle.state(), State::Closed, "2 calls: below min_calls");
    run(&svc, Script::Succeed).await.unwrap();
    assert_eq!(handle.state(), State::Closed, "3 calls: below min_calls");
    run(&svc, Script::Succeed).await.unwrap();
    // 4 calls, 2 failures: exactly 50 %, but a success alone never trips.
    assert_eq!(handle.state(), State::Closed);
    let window = handle.snapshot().window.unwrap();
    assert_eq!((window.calls, window.failures), (4, 2));

    // The oldest failure slides out and a new one comes in: still 2 of 4.
    fail_times(&svc, 1).await;
    assert_eq!(handle.state(), State::Open, "2 of 4 failed: 50 % >= 50 %");
}

// resilience4j: CircuitBreakerStateMachineTest.shouldOpenAfterFailureRateThresholdExceeded.
// There the 5th call, a success that fills the window at 60 % failures, opens the
// breaker. seawall evaluates the trip only when a failure is recorded ("a success
// alone never trips"), so the breaker opens on the next failure instead.
#[tokio::test(start_paused = true)]
async fn a_success_that_fills_the_window_over_the_rate_does_not_trip_it() {
    let layer = CircuitBreakerLayer::builder("count")
        .jitter(0.0)
        .count_window(5, 5, 0.5)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    fail_times(&svc, 3).await;
    run(&svc, Script::Succeed).await.unwrap();
    run(&svc, Script::Succeed).await.unwrap();
    assert_eq!(handle.state(), State::Closed);
    let window = handle.snapshot().window.unwrap();
    assert_eq!((window.calls, window.failures), (5, 3));

    fail_times(&svc, 1).await; // F S S F over the first F: 3 of 5
    assert_eq!(handle.state(), State::Open);
}

// recloser: test_ring_buffer_filling_on_error. recloser's full buffer at exactly
// 50 % needs one more error to trip; seawall's `failure rate >= threshold` trips on
// the failure that fills the window at exactly the rate.
#[tokio::test(start_paused = true)]
async fn a_full_window_at_exactly_the_rate_trips_on_its_last_failure() {
    let layer = CircuitBreakerLayer::builder("count")
        .jitter(0.0)
        .count_window(10, 10, 0.5)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    for _ in 0..5 {
        run(&svc, Script::Succeed).await.unwrap();
    }
    fail_times(&svc, 4).await;
    assert_eq!(handle.state(), State::Closed, "9 calls: below min_calls");
    fail_times(&svc, 1).await;
    assert_eq!(handle.state(), State::Open, "5 of 10");
}

// gobreaker: TestRollingWindowCircuitBreaker (buckets leave the window one by
// one); failsafe: windowed_adder sliding_over_small_window.
#[tokio::test(start_paused = true)]
async fn a_time_window_drops_its_oldest_bucket_as_time_moves_on() {
    let layer = CircuitBreakerLayer::builder("time")
        .jitter(0.0)
        .time_window(3 * S, S, 3, 0.7)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    run(&svc, Script::Succeed).await.unwrap();
    run(&svc, Script::Succeed).await.unwrap();
    tokio::time::advance(S).await;
    fail_times(&svc, 1).await;
    tokio::time::advance(S).await;
    fail_times(&svc, 1).await;
    // 4 calls, 2 failures: 50 % < 70 %.
    assert_eq!(handle.state(), State::Closed);

    tokio::time::advance(S).await;
    // The first bucket (the two successes) is 3 s old: out of the window.
    let window = handle.snapshot().window.unwrap();
    assert_eq!((window.calls, window.failures), (2, 2));
    fail_times(&svc, 1).await;
    // 3 calls, 3 failures. Had the successes stayed, 3 of 5 (60 %) would not trip.
    assert_eq!(handle.state(), State::Open);
}

// gobreaker: TestRollingWindowCircuitBreaker at a bucket's edge; seawall's rule:
// "an outcome exactly `window` old no longer counts".
#[tokio::test(start_paused = true)]
async fn a_time_window_forgets_an_outcome_exactly_one_window_old() {
    for (age, trips) in [(10 * S - NS, true), (10 * S, false)] {
        let layer = CircuitBreakerLayer::builder("time")
            .jitter(0.0)
            .time_window(10 * S, S, 2, 0.5)
            .build()
            .unwrap();
        let handle = layer.handle();
        let svc = layer.layer(Dependency::default());

        fail_times(&svc, 1).await;
        tokio::time::advance(age).await;
        fail_times(&svc, 1).await;
        let state = handle.state();
        assert_eq!(
            state == State::Open,
            trips,
            "first failure {age:?} old: {state:?}"
        );
    }
}

// failsafe: windowed_adder sliding_window_when_slices_are_skipped (an idle spell
// longer than the window clears every bucket, however many were skipped).
#[tokio::test(start_paused = true)]
async fn an_idle_spell_longer_than_the_window_clears_it() {
    let layer = CircuitBreakerLayer::builder("time")
        .jitter(0.0)
        .time_window(3 * S, S, 3, 0.5)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    fail_times(&svc, 2).await;
    tokio::time::advance(25 * S + 300 * MS).await;
    assert_eq!(handle.snapshot().window.unwrap().calls, 0);
    fail_times(&svc, 2).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "2 calls in the window, not 4"
    );
    fail_times(&svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// recloser: error_predicate; resilience4j: shouldIgnoreExceptionsAndThenTransitionToClosed.
// In recloser an error the predicate rejects counts as a success; in seawall an
// `Ignore` is not recorded at all, so it neither fills the window nor resets the
// consecutive count.
#[tokio::test(start_paused = true)]
async fn ignored_outcomes_neither_count_nor_reset() {
    let layer = CircuitBreakerLayer::builder("consecutive")
        .jitter(0.0)
        .consecutive_failures(2)
        .classifier(refusals_ignored)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());
    fail_times(&svc, 1).await;
    for _ in 0..3 {
        assert_eq!(run(&svc, Script::Refuse).await.unwrap(), "refused");
    }
    assert_eq!(handle.snapshot().consecutive_failures, Some(1));
    fail_times(&svc, 1).await;
    assert_eq!(
        handle.state(),
        State::Open,
        "two failures in a row, refusals between"
    );

    let layer = CircuitBreakerLayer::builder("count")
        .jitter(0.0)
        .count_window(4, 2, 0.5)
        .classifier(refusals_ignored)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());
    for _ in 0..4 {
        run(&svc, Script::Refuse).await.unwrap();
    }
    fail_times(&svc, 1).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.window.unwrap().calls, 1, "refusals take no slot");
    assert_eq!(snapshot.counters.ignored, 4);
    assert_eq!(snapshot.state, State::Closed, "1 call: below min_calls");
}

// resilience4j: shouldOpenAfterSlowCallRateThresholdExceeded; tower-resilience:
// slow_call_threshold_trips_independent_of_failure_rate. A call that takes the
// threshold or longer is slow; one a nanosecond shorter is not.
#[tokio::test(start_paused = true)]
async fn slow_successes_alone_trip_at_the_slow_call_rate() {
    let layer = CircuitBreakerLayer::builder("slow")
        .jitter(0.0)
        .count_window(2, 2, 1.0)
        .slow_calls(S, 0.5)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    let (tx, mut call) = start_held(&svc);
    tokio::time::advance(S - NS).await;
    tx.send(true).unwrap();
    assert_ready_ok!(call.poll());
    assert_eq!(
        handle.snapshot().counters.slow,
        0,
        "a nanosecond under the threshold"
    );
    assert_eq!(handle.state(), State::Closed);

    let (tx, mut call) = start_held(&svc);
    tokio::time::advance(S).await;
    tx.send(true).unwrap();
    assert_ready_ok!(call.poll());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.counters.slow, 1);
    assert_eq!(snapshot.counters.failures, 0);
    assert_eq!(snapshot.state, State::Open, "1 slow of 2: 50 % >= 50 %");
}

// gobreaker: TestPanicInRequest (a panicking request counts as a failure).
#[tokio::test(start_paused = true)]
async fn a_panicking_dependency_counts_as_a_failure() {
    let layer = CircuitBreakerLayer::builder("panics")
        .jitter(0.0)
        .consecutive_failures(1)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    let joined = tokio::spawn(svc.clone().oneshot(Script::Panic)).await;
    assert!(joined.unwrap_err().is_panic());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.counters.failures, 1);
    assert_eq!(snapshot.counters.cancelled, 0);
    assert_eq!(snapshot.state, State::Open);
}

// ---------------------------------------------------------------------------
// Circuit breaker: open, half-open and back
// ---------------------------------------------------------------------------

// resilience4j: shouldTransitionToHalfOpenAfterWaitDuration; gobreaker:
// TestDefaultCircuitBreaker (59 s still open, 60 s half-open). seawall: half-open
// when `now >= opened_at + open_for`, and until then `retry_after` is what remains.
#[tokio::test(start_paused = true)]
async fn the_open_interval_ends_exactly_at_open_for() {
    let layer = CircuitBreakerLayer::builder("interval")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(5 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let dependency = Dependency::default();
    let svc = layer.layer(dependency.clone());

    fail_times(&svc, 1).await;
    let err = run(&svc, Script::Succeed).await.unwrap_err();
    assert_eq!(kind(&err), Some(RejectionKind::CircuitOpen));
    assert_eq!(retry_after(&err), Some(5 * S));

    tokio::time::advance(5 * S - NS).await;
    assert_eq!(handle.state(), State::Open);
    let err = run(&svc, Script::Succeed).await.unwrap_err();
    assert_eq!(kind(&err), Some(RejectionKind::CircuitOpen));
    assert_eq!(retry_after(&err), Some(NS));
    assert_eq!(
        dependency.called(),
        1,
        "nothing reached the dependency while open"
    );

    tokio::time::advance(NS).await;
    assert_eq!(
        handle.state(),
        State::HalfOpen,
        "reported as soon as it is due"
    );
    assert_eq!(run(&svc, Script::Succeed).await.unwrap(), "ok");
    assert_eq!(
        dependency.called(),
        2,
        "the first call after the interval is the probe"
    );
    assert_eq!(handle.state(), State::Closed);
}

// tower-resilience: open_rejection_does_not_poll_pending_inner (an open breaker
// answers ready and rejects without touching the inner service).
#[tokio::test(start_paused = true)]
async fn an_open_breaker_neither_polls_nor_calls_the_inner_service() {
    let layer = CircuitBreakerLayer::builder("open")
        .jitter(0.0)
        .consecutive_failures(1)
        .build()
        .unwrap();
    let dependency = Dependency::default();
    let mut svc = layer.layer(dependency.clone());
    fail_times(&svc, 1).await;
    let (polled, called) = (dependency.polled(), dependency.called());

    for _ in 0..3 {
        let err = svc
            .ready()
            .await
            .unwrap()
            .call(Script::Succeed)
            .await
            .unwrap_err();
        assert_eq!(kind(&err), Some(RejectionKind::CircuitOpen));
    }
    assert_eq!((dependency.polled(), dependency.called()), (polled, called));
    assert_eq!(layer.handle().snapshot().counters.short_circuited, 3);
}

/// A breaker tripped by one failure and now half-open, with its service and the
/// dependency behind it.
async fn half_open(
    half_open_max: u32,
    probes_to_close: u32,
) -> (
    seawall::circuit_breaker::Handle,
    seawall::circuit_breaker::CircuitBreaker<Dependency, seawall::ErrorsAsFailures>,
    Dependency,
) {
    let layer = CircuitBreakerLayer::builder("probes")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(5 * S)
        .half_open_max(half_open_max)
        .probes_to_close(probes_to_close)
        .half_open_timeout(10 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let dependency = Dependency::default();
    let svc = layer.layer(dependency.clone());
    fail_times(&svc, 1).await;
    tokio::time::advance(5 * S).await;
    assert_eq!(handle.state(), State::HalfOpen);
    (handle, svc, dependency)
}

// resilience4j: shouldOnlyPermitFourCallsInHalfOpenState and
// shouldThrowCallNotPermittedExceptionWhenNotFurtherTestCallsArePermitted;
// gobreaker: TestCustomCircuitBreaker (MaxRequests in half-open, closing on the
// last success). resilience4j closes half-open by the failure rate of the
// permitted calls; seawall closes after `probes_to_close` successes.
#[tokio::test(start_paused = true)]
async fn half_open_admits_exactly_half_open_max_probes_and_closes_on_enough_successes() {
    let (handle, svc, dependency) = half_open(4, 4).await;

    let probes: Vec<_> = (0..4).map(|_| start_held(&svc)).collect();
    assert_eq!(handle.snapshot().probes_in_flight, 4);
    let mut fifth = start(&svc, Script::Succeed);
    let err = assert_ready_err!(fifth.poll());
    assert_eq!(kind(&err), Some(RejectionKind::CircuitOpen));
    // What remains of the oldest probe's half-open timeout: positive, never zero.
    assert_eq!(retry_after(&err), Some(10 * S));
    assert_eq!(
        dependency.called(),
        1 + 4,
        "the 5th caller never reached it"
    );

    let mut probes = probes.into_iter();
    for _ in 0..3 {
        let (tx, mut call) = probes.next().unwrap();
        tx.send(true).unwrap();
        assert_ready_ok!(call.poll());
        assert_eq!(handle.state(), State::HalfOpen);
    }
    let (tx, mut call) = probes.next().unwrap();
    tx.send(true).unwrap();
    assert_ready_ok!(call.poll());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.counters.probe_successes, 4);
}

// resilience4j: shouldTransitionBackToOpenStateWhenFailureRateIsAboveThreshold.
// There half-open reopens once the permitted calls are in and their failure rate
// is over the threshold; in seawall the first failed probe reopens at once, and
// the probes still in flight become stale: their successes close nothing.
#[tokio::test(start_paused = true)]
async fn one_failed_probe_reopens_and_the_others_become_stale() {
    let (handle, svc, _) = half_open(3, 3).await;
    let (first, mut first_call) = start_held(&svc);
    let (second, mut second_call) = start_held(&svc);
    let (third, mut third_call) = start_held(&svc);

    second.send(false).unwrap();
    assert_ready_err!(second_call.poll());
    assert_eq!(handle.state(), State::Open);

    first.send(true).unwrap();
    third.send(true).unwrap();
    assert_ready_ok!(first_call.poll());
    assert_ready_ok!(third_call.poll());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open, "stale successes close nothing");
    assert_eq!(snapshot.counters.stale, 2);
    assert_eq!(
        snapshot.retry_after,
        Some(5 * S),
        "the interval restarted at the failure"
    );
}

// gobreaker: TestCustomCircuitBreaker (counts cleared when half-open closes).
// seawall: closing empties the window, so the next N failures trip from zero.
#[tokio::test(start_paused = true)]
async fn closing_starts_a_fresh_window() {
    let layer = CircuitBreakerLayer::builder("fresh")
        .jitter(0.0)
        .count_window(4, 4, 0.5)
        .open_for(5 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    fail_times(&svc, 4).await;
    assert_eq!(handle.state(), State::Open);
    tokio::time::advance(5 * S).await;
    run(&svc, Script::Succeed).await.unwrap();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.window.unwrap().calls, 0);

    fail_times(&svc, 3).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "3 calls since closing: below min_calls"
    );
    fail_times(&svc, 1).await;
    assert_eq!(handle.state(), State::Open);
}

// resilience4j: shouldReleasePermissionWhenExceptionIgnored (an ignored probe
// gives its permission back and changes no state).
#[tokio::test(start_paused = true)]
async fn an_ignored_probe_frees_its_slot_without_a_transition() {
    let layer = CircuitBreakerLayer::builder("probes")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(5 * S)
        .classifier(refusals_ignored)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());
    fail_times(&svc, 1).await;
    tokio::time::advance(5 * S).await;

    assert_eq!(run(&svc, Script::Refuse).await.unwrap(), "refused");
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::HalfOpen);
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(
        snapshot
            .counters
            .transitions_between(State::HalfOpen, State::Open),
        0
    );

    run(&svc, Script::Succeed).await.unwrap();
    assert_eq!(
        handle.state(),
        State::Closed,
        "the next caller was the probe"
    );
}

// tower-resilience: dropped_half_open_probe_future_releases_its_slot_without_recording_a_result.
#[tokio::test(start_paused = true)]
async fn a_dropped_probe_frees_its_slot_and_records_nothing() {
    let (handle, svc, _) = half_open(1, 1).await;
    let (_tx, probe) = start_held(&svc);
    let mut second = start(&svc, Script::Succeed);
    assert_eq!(
        kind(&assert_ready_err!(second.poll())),
        Some(RejectionKind::CircuitOpen)
    );

    drop(probe);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(snapshot.counters.cancelled, 1);
    assert_eq!(
        snapshot.counters.probe_successes + snapshot.counters.probe_failures,
        0
    );
    assert_eq!(snapshot.state, State::HalfOpen);

    assert_eq!(run(&svc, Script::Succeed).await.unwrap(), "ok");
    assert_eq!(handle.state(), State::Closed);
}

// tower-resilience: half_open_admission_never_exceeds_permitted_calls_under_contention.
#[tokio::test(start_paused = true)]
async fn concurrent_callers_never_take_more_than_the_probe_slots() {
    let (handle, svc, dependency) = half_open(2, 2).await;
    let mut switches = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (tx, script) = held();
        switches.push(tx);
        tasks.push(tokio::spawn(svc.clone().oneshot(script)));
    }
    // The rejected callers finish on their first poll; the probes wait.
    for _ in 0..100 {
        if tasks.iter().filter(|t| t.is_finished()).count() >= 6 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(tasks.iter().filter(|t| t.is_finished()).count(), 6);
    assert_eq!(dependency.called(), 1 + 2);
    assert_eq!(handle.snapshot().probes_in_flight, 2);

    for tx in switches {
        let _ = tx.send(true);
    }
    let mut admitted = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => admitted += 1,
            Err(err) => assert_eq!(kind(&err), Some(RejectionKind::CircuitOpen)),
        }
    }
    assert_eq!(admitted, 2);
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j: maxWaitDurationInHalfOpenState scenarios (a half-open breaker
// whose probe never answers goes back to open). seawall: a probe neither finished
// nor dropped within `half_open_timeout` counts as failed, and the open interval
// counts from that instant.
#[tokio::test(start_paused = true)]
async fn a_probe_that_outlives_the_half_open_timeout_fails_and_reopens() {
    let layer = CircuitBreakerLayer::builder("slow probe")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(5 * S)
        .half_open_timeout(2 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());
    fail_times(&svc, 1).await;
    tokio::time::advance(5 * S).await;
    let (tx, mut probe) = start_held(&svc);

    tokio::time::advance(2 * S - NS).await;
    let err = run(&svc, Script::Succeed).await.unwrap_err();
    assert_eq!(kind(&err), Some(RejectionKind::CircuitOpen));
    assert_eq!(
        retry_after(&err),
        Some(NS),
        "what remains of the probe's timeout"
    );
    assert_eq!(handle.state(), State::HalfOpen);

    tokio::time::advance(NS).await;
    let err = run(&svc, Script::Succeed).await.unwrap_err();
    assert_eq!(kind(&err), Some(RejectionKind::CircuitOpen));
    assert_eq!(
        retry_after(&err),
        Some(5 * S),
        "open again, from the timeout"
    );
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.counters.probe_timeouts, 1);

    // The probe answering late is stale: it cannot close the breaker.
    tx.send(true).unwrap();
    assert_ready_ok!(probe.poll());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.counters.stale, 1);
}

// gobreaker: the generation checks of TestCustomCircuitBreaker (a result from an
// older generation is dropped); resilience4j records such late results too. In
// seawall a call admitted while closed that succeeds while a probe is in flight
// is counted as stale and cannot close the breaker.
#[tokio::test(start_paused = true)]
async fn a_call_admitted_before_the_trip_cannot_close_the_breaker() {
    let layer = CircuitBreakerLayer::builder("stale")
        .jitter(0.0)
        .consecutive_failures(2)
        .open_for(5 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    let (old, mut old_call) = start_held(&svc);
    fail_times(&svc, 2).await;
    tokio::time::advance(5 * S).await;
    let (probe, mut probe_call) = start_held(&svc);
    assert_eq!(handle.state(), State::HalfOpen);

    old.send(true).unwrap();
    assert_ready_ok!(old_call.poll());
    let snapshot = handle.snapshot();
    assert_eq!(
        snapshot.state,
        State::HalfOpen,
        "the old success closed nothing"
    );
    assert_eq!(snapshot.counters.stale, 1);
    assert_eq!(snapshot.probes_in_flight, 1);

    probe.send(true).unwrap();
    assert_ready_ok!(probe_call.poll());
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j: shouldTransitionToHalfOpenAfterWaitInterval (an interval function
// growing the wait); recloser: test_custom_wait (exponential, capped); failsafe:
// state_machine (open 5 s, a failed probe reopens for 10 s). seawall:
// `open_for` times `backoff_multiplier` per re-trip, up to `max_open_for`, and
// forgotten once the breaker closes.
#[tokio::test(start_paused = true)]
async fn each_failed_probe_grows_the_open_interval_up_to_its_cap() {
    let layer = CircuitBreakerLayer::builder("backoff")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(5 * S)
        .backoff(2.0, 15 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    fail_times(&svc, 1).await;
    for open_for in [5 * S, 10 * S, 15 * S, 15 * S] {
        assert_eq!(handle.snapshot().open_for, Some(open_for));
        tokio::time::advance(open_for - NS).await;
        let err = run(&svc, Script::Fail).await.unwrap_err();
        assert_eq!(
            kind(&err),
            Some(RejectionKind::CircuitOpen),
            "before {open_for:?}"
        );
        tokio::time::advance(NS).await;
        fail_times(&svc, 1).await; // the probe fails
    }
    tokio::time::advance(15 * S).await;
    run(&svc, Script::Succeed).await.unwrap();
    assert_eq!(handle.state(), State::Closed);
    fail_times(&svc, 1).await;
    assert_eq!(
        handle.snapshot().open_for,
        Some(5 * S),
        "the backoff is forgotten"
    );
}

// ---------------------------------------------------------------------------
// Circuit breaker: the operator's handle
// ---------------------------------------------------------------------------

// resilience4j: shouldForceOpenCircuitBreaker (no half-open after the wait
// duration); tower-resilience: test_handle_force_open_rejects_calls_on_every_clone.
#[tokio::test(start_paused = true)]
async fn forced_open_rejects_past_open_for_until_released() {
    let layer = CircuitBreakerLayer::builder("forced")
        .jitter(0.0)
        .open_for(5 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let dependency = Dependency::default();
    let svc = layer.layer(dependency.clone());
    let clone = svc.clone();

    handle.force(Forced::Open);
    tokio::time::advance(60 * S).await;
    for svc in [&svc, &clone] {
        let err = run(svc, Script::Succeed).await.unwrap_err();
        assert_eq!(kind(&err), Some(RejectionKind::CircuitOpen));
    }
    assert_eq!(handle.state(), State::ForcedOpen);
    assert_eq!(dependency.called(), 0);

    handle.release();
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(run(&svc, Script::Succeed).await.unwrap(), "ok");
}

// resilience4j: shouldForceCloseCircuitBreaker (calls recorded, never tripped).
#[tokio::test(start_paused = true)]
async fn forced_closed_records_failures_but_never_trips() {
    let layer = CircuitBreakerLayer::builder("forced")
        .jitter(0.0)
        .count_window(4, 4, 0.5)
        .build()
        .unwrap();
    let handle = layer.handle();
    let dependency = Dependency::default();
    let svc = layer.layer(dependency.clone());

    handle.force(Forced::Closed);
    fail_times(&svc, 10).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::ForcedClosed);
    assert_eq!(
        snapshot.window.unwrap().failures,
        4,
        "the window is recorded"
    );
    assert_eq!(dependency.called(), 10);

    handle.release();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.window.unwrap().calls, 0, "released afresh");
}

// resilience4j: shouldDisableCircuitBreaker.
#[tokio::test(start_paused = true)]
async fn a_disabled_breaker_lets_everything_through_and_only_counts() {
    let layer = CircuitBreakerLayer::builder("disabled")
        .jitter(0.0)
        .consecutive_failures(1)
        .build()
        .unwrap();
    let handle = layer.handle();
    let dependency = Dependency::default();
    let svc = layer.layer(dependency.clone());

    handle.disable();
    fail_times(&svc, 5).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Disabled);
    assert_eq!(snapshot.counters.failures, 5);
    assert_eq!(dependency.called(), 5);
}

// resilience4j: shouldDisableCircuitBreaker (no metrics recorded while disabled).
#[tokio::test(start_paused = true)]
async fn a_disabled_breaker_records_nothing_in_its_window() {
    let layer = CircuitBreakerLayer::builder("disabled")
        .jitter(0.0)
        .count_window(4, 2, 0.5)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    handle.disable();
    fail_times(&svc, 3).await;
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.window.unwrap().calls, 0, "only the counters move");
    assert_eq!(snapshot.counters.failures, 3);
}

// tower-resilience: manual_mode_still_supports_explicit_force_and_reset. seawall:
// `release` hands back only what an operator holds; a breaker its own policy
// opened is left open.
#[tokio::test(start_paused = true)]
async fn release_leaves_a_breaker_no_operator_holds_as_it_is() {
    let layer = CircuitBreakerLayer::builder("release")
        .jitter(0.0)
        .consecutive_failures(1)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    fail_times(&svc, 1).await;
    handle.release();
    assert_eq!(handle.state(), State::Open);
    handle.force(Forced::Closed);
    handle.release();
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j: shouldResetToClosedState and shouldResetMetrics; tower-resilience:
// test_handle_reset_clears_counts_and_closes. seawall keeps the cumulative
// counters across a reset; the window and the state start afresh.
#[tokio::test(start_paused = true)]
async fn reset_closes_an_open_breaker_with_an_empty_window() {
    let layer = CircuitBreakerLayer::builder("reset")
        .jitter(0.0)
        .count_window(4, 2, 0.5)
        .open_for(60 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    fail_times(&svc, 2).await;
    assert_eq!(handle.state(), State::Open);
    handle.reset();
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.window.unwrap().calls, 0);
    assert_eq!(snapshot.counters.failures, 2, "counters are cumulative");

    fail_times(&svc, 1).await;
    assert_eq!(
        handle.state(),
        State::Closed,
        "1 call since the reset: below min_calls"
    );
}

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

// Polly: AdvancedCircuitBreakerSpecs configuration tests (failure threshold zero,
// negative or above one rejected naming the parameter; one accepted; a break of
// TimeSpan.MaxValue accepted); tower-resilience: config tests (zero window, zero
// consecutive failures). seawall refuses a duration over a year instead of
// accepting it, since it would overflow the clock.
#[test]
fn bad_breaker_settings_are_typed_errors_naming_the_field() {
    type B = seawall::circuit_breaker::CircuitBreakerBuilder;
    let b = || CircuitBreakerLayer::builder("config").jitter(0.0);
    let cases: Vec<(B, &str)> = vec![
        (b().consecutive_failures(0), "policy.threshold"),
        (b().count_window(0, 0, 0.5), "policy.size"),
        (
            b().count_window(MAX_COUNT_WINDOW + 1, 1, 0.5),
            "policy.size",
        ),
        (b().count_window(10, 11, 0.5), "policy.min_calls"),
        (b().count_window(10, 0, 0.5), "policy.min_calls"),
        (b().count_window(10, 10, 0.0), "policy.failure_rate"),
        (b().count_window(10, 10, -0.5), "policy.failure_rate"),
        (b().count_window(10, 10, 1.01), "policy.failure_rate"),
        (b().count_window(10, 10, f64::NAN), "policy.failure_rate"),
        (b().time_window(S, Duration::ZERO, 1, 0.5), "policy.bucket"),
        (b().time_window(Duration::MAX, S, 1, 0.5), "policy.window"),
        (b().time_window(S, 2 * S, 1, 0.5), "policy.window"),
        (
            b().time_window(S, Duration::from_micros(1), 1, 0.5),
            "policy.bucket",
        ),
        (b().time_window(S, MS, 0, 0.5), "policy.min_calls"),
        (b().slow_calls(Duration::ZERO, 0.5), "slow_call.threshold"),
        (b().slow_calls(S, 0.0), "slow_call.rate"),
        (b().consecutive_failures(3).slow_calls(S, 0.5), "slow_call"),
        (b().open_for(Duration::ZERO), "open_for"),
        (b().open_for(Duration::MAX), "open_for"),
        (b().backoff(f64::INFINITY, 60 * S), "backoff_multiplier"),
        (b().backoff(0.5, 60 * S), "backoff_multiplier"),
        (b().backoff(2.0, S), "max_open_for"),
        (b().backoff(2.0, Duration::MAX), "max_open_for"),
        (b().jitter(f64::NAN), "jitter"),
        (b().jitter(2.0), "jitter"),
        (b().half_open_max(0), "half_open_max"),
        (b().half_open_max(MAX_HALF_OPEN_PROBES + 1), "half_open_max"),
        (b().probes_to_close(0), "probes_to_close"),
        (b().half_open_timeout(Duration::ZERO), "half_open_timeout"),
        (b().half_open_timeout(Duration::MAX), "half_open_timeout"),
        (b().ramp(Duration::MAX, 0.1), "ramp.duration"),
        (b().ramp(S, -0.1), "ramp.start_share"),
    ];
    for (builder, field) in cases {
        let err = builder.build().unwrap_err();
        assert_eq!(err.field(), field, "{err}");
        assert!(err.to_string().contains(field), "{err}");
    }
    // The edges themselves are valid.
    b().count_window(10, 10, 1.0).build().unwrap();
    b().count_window(MAX_COUNT_WINDOW, 1, 0.5).build().unwrap();
    b().half_open_max(MAX_HALF_OPEN_PROBES).build().unwrap();
}

// The same checks guard a change at run time: an invalid configuration is refused
// and changes nothing (resilience4j and Polly validate only at construction).
#[tokio::test(start_paused = true)]
async fn an_invalid_reconfiguration_is_refused_and_changes_nothing() {
    let layer = CircuitBreakerLayer::builder("reconfigure")
        .jitter(0.0)
        .consecutive_failures(3)
        .build()
        .unwrap();
    let handle = layer.handle();
    let before = handle.config();
    let mut bad = before.clone();
    bad.half_open_max = 0;
    assert_eq!(
        handle.reconfigure(bad).unwrap_err().field(),
        "half_open_max"
    );
    assert_eq!(handle.config(), before);
}

// tower: ConcurrencyLimitLayer request_without_capacity (a limit of 0 is accepted
// and never ready); resilience4j: SemaphoreBulkheadTest.testZeroMaxConcurrentCalls
// (accepted, rejects everything); tower-resilience: zero_max_concurrent_calls_is_rejected.
// seawall refuses a zero or oversized limit at build time, naming the field.
#[test]
fn bad_bulkhead_settings_are_typed_errors_naming_the_field() {
    let over = (1 << 20) + 1;
    let b = || BulkheadLayer::builder("config");
    for (builder, field) in [
        (b().max_concurrent(0), "max_concurrent"),
        (b().max_concurrent(over), "max_concurrent"),
        (b().max_concurrent(usize::MAX), "max_concurrent"),
        (b().max_queue(over), "queue.max_queue"),
        (b().max_wait(Duration::ZERO), "queue.max_wait"),
        (b().max_wait(Duration::MAX), "queue.max_wait"),
    ] {
        let err = builder.build().unwrap_err();
        assert_eq!(err.field(), field, "{err}");
    }
    b().max_concurrent(1 << 20).max_queue(0).build().unwrap();
}

// ---------------------------------------------------------------------------
// Bulkhead
// ---------------------------------------------------------------------------
//
// The peers' scenarios of a dropped call or an inner error freeing its slot,
// first-in-first-out waiters, a dropped waiter (before or after its hand-over)
// and a limit raised or lowered at run time are `crates/bulkhead/tests/service.rs`'s
// own tests already; they are not repeated here.

// tower: limit::concurrency basic_service_limit_functionality_*; resilience4j:
// SemaphoreBulkheadTest.testBulkhead (permitted, permitted, rejected, finished, permitted).
#[tokio::test(start_paused = true)]
async fn a_bulkhead_admits_exactly_max_concurrent_and_a_freed_slot_is_taken_again() {
    let layer = BulkheadLayer::builder("limit")
        .max_concurrent(2)
        .max_queue(0)
        .build()
        .unwrap();
    let handle = layer.handle();
    let dependency = Dependency::default();
    let svc = layer.layer(dependency.clone());

    let (first, mut first_call) = start_held(&svc);
    let (_second, _second_call) = start_held(&svc);
    assert_eq!(handle.snapshot().active, 2);
    let mut third = start(&svc, Script::Succeed);
    let err = assert_ready_err!(third.poll());
    assert_eq!(kind(&err), Some(RejectionKind::BulkheadFull));
    assert_eq!(dependency.called(), 2);

    first.send(true).unwrap();
    assert_ready_ok!(first_call.poll());
    assert_eq!(handle.snapshot().active, 1);
    let (_fourth, _fourth_call) = start_held(&svc);
    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.active, snapshot.admitted, snapshot.rejected_full),
        (2, 3, 1)
    );
}

// tower: load_shed when_not_ready (always ready; a call with no capacity fails at
// once with a typed error instead of waiting).
#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_without_a_queue_sheds_at_once_and_stays_ready() {
    let layer = BulkheadLayer::builder("shed")
        .max_concurrent(1)
        .max_queue(0)
        .build()
        .unwrap();
    let dependency = Dependency::default();
    let mut svc = layer.layer(dependency.clone());
    let (_busy, _busy_call) = start_held(&svc);

    for _ in 0..3 {
        let mut ready = task::spawn(svc.ready());
        assert_ready_ok!(ready.poll(), "a bulkhead always reports ready");
        drop(ready);
        let mut shed = task::spawn(svc.call(Script::Succeed));
        let err = assert_ready_err!(shed.poll());
        assert_eq!(kind(&err), Some(RejectionKind::BulkheadFull));
    }
    assert_eq!(dependency.called(), 1);
    assert_eq!(layer.handle().snapshot().rejected_full, 3);
}

// resilience4j: SemaphoreBulkheadTest.testTryEnterWithTimeout (a waiter gives up
// after maxWaitDuration; measured there on the wall clock, here at its edge).
#[tokio::test(start_paused = true)]
async fn a_waiter_is_served_before_max_wait_and_times_out_at_it() {
    let layer = BulkheadLayer::builder("wait")
        .max_concurrent(1)
        .max_queue(1)
        .max_wait(20 * MS)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    // Served: the slot frees a millisecond before the wait would end.
    let (busy, mut busy_call) = start_held(&svc);
    let mut waiter = start(&svc, Script::Succeed);
    assert_pending!(waiter.poll());
    tokio::time::advance(19 * MS).await;
    assert_pending!(waiter.poll());
    busy.send(true).unwrap();
    assert_ready_ok!(busy_call.poll());
    assert_eq!(assert_ready_ok!(waiter.poll()), "ok");

    // Timed out: nobody frees the slot within 20 ms.
    let (_busy, _busy_call) = start_held(&svc);
    let mut waiter = start(&svc, Script::Succeed);
    assert_pending!(waiter.poll());
    tokio::time::advance(20 * MS).await;
    let err = assert_ready_err!(waiter.poll());
    assert_eq!(kind(&err), Some(RejectionKind::BulkheadTimeout));
    assert_eq!(find_rejection(&*err).unwrap().waited(), Some(20 * MS));
    let snapshot = handle.snapshot();
    assert_eq!((snapshot.rejected_timeout, snapshot.queued), (1, 0));
}

// tower: limit::concurrency reserve_capacity_without_sending_request,
// service_drop_frees_capacity and multi_waiters (in seawall's backpressure mode,
// which reserves in poll_ready as tower's ConcurrencyLimit does).
#[tokio::test(start_paused = true)]
async fn backpressure_reserves_in_poll_ready_and_a_dropped_service_wakes_only_the_next() {
    let layer = BulkheadLayer::builder("backpressure")
        .max_concurrent(1)
        .build()
        .unwrap()
        .backpressure();
    let handle = layer.handle();
    let mut s1 = layer.layer(Dependency::default());
    let mut s2 = s1.clone();
    let mut s3 = s1.clone();
    let (mut t1, mut t2, mut t3) = (task::spawn(()), task::spawn(()), task::spawn(()));

    assert_ready_ok!(t1.enter(|cx, _| Service::<Script>::poll_ready(&mut s1, cx)));
    assert_eq!(handle.snapshot().active, 1, "reserved without a call");
    assert_pending!(t2.enter(|cx, _| Service::<Script>::poll_ready(&mut s2, cx)));
    assert_pending!(t3.enter(|cx, _| Service::<Script>::poll_ready(&mut s3, cx)));

    drop(s1);
    assert!(t2.is_woken(), "the first waiter gets the freed slot");
    assert!(!t3.is_woken());
    assert_ready_ok!(t2.enter(|cx, _| Service::<Script>::poll_ready(&mut s2, cx)));

    drop(s2);
    assert!(t3.is_woken());
    assert_ready_ok!(t3.enter(|cx, _| Service::<Script>::poll_ready(&mut s3, cx)));
    assert_eq!(s3.call(Script::Succeed).await.unwrap(), "ok");
    assert_eq!(handle.snapshot().active, 0);
}

// ---------------------------------------------------------------------------
// More edges of the breaker
// ---------------------------------------------------------------------------

// gobreaker: TestDefaultCircuitBreaker (the expiry is set when the breaker opens);
// Polly: CircuitBreakerSpecs, half-open after the duration of break counted from
// the break. seawall: "the open interval starts at the trip, not at the last call".
#[tokio::test(start_paused = true)]
async fn the_open_interval_starts_at_the_trip_not_at_the_first_failure() {
    let layer = CircuitBreakerLayer::builder("trip")
        .jitter(0.0)
        .consecutive_failures(2)
        .open_for(5 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    fail_times(&svc, 1).await;
    tokio::time::advance(3 * S).await;
    fail_times(&svc, 1).await;
    assert_eq!(handle.state(), State::Open);
    tokio::time::advance(5 * S - NS).await;
    assert_eq!(
        handle.state(),
        State::Open,
        "5 s after the first failure, not the trip"
    );
    tokio::time::advance(NS).await;
    assert_eq!(handle.state(), State::HalfOpen);
}

// gobreaker: TestCustomCircuitBreaker (entering half-open clears the counts);
// resilience4j: each half-open state starts a new ring buffer. seawall closes after
// `probes_to_close` successes "of this half-open period".
#[tokio::test(start_paused = true)]
async fn successes_of_an_earlier_half_open_period_do_not_count_toward_closing() {
    let (handle, svc, _) = half_open(1, 3).await;
    run(&svc, Script::Succeed).await.unwrap();
    run(&svc, Script::Succeed).await.unwrap();
    assert_eq!(handle.state(), State::HalfOpen, "2 of 3");
    fail_times(&svc, 1).await;
    assert_eq!(handle.state(), State::Open);

    tokio::time::advance(5 * S).await;
    run(&svc, Script::Succeed).await.unwrap();
    run(&svc, Script::Succeed).await.unwrap();
    assert_eq!(handle.state(), State::HalfOpen, "2 of 3 in this period");
    run(&svc, Script::Succeed).await.unwrap();
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j: shouldThrowCallNotPermittedExceptionWhenNotFurtherTestCallsArePermitted
// (the extra caller is turned away). seawall also says when to come back: what
// remains of the oldest probe's half-open timeout.
#[tokio::test(start_paused = true)]
async fn an_extra_half_open_callers_retry_after_is_what_remains_of_the_oldest_probe() {
    let (_, svc, _) = half_open(2, 2).await; // half_open_timeout: 10 s
    let (_older, _older_call) = start_held(&svc);
    tokio::time::advance(3 * S).await;
    let (_newer, _newer_call) = start_held(&svc);
    tokio::time::advance(S).await;

    let err = run(&svc, Script::Succeed).await.unwrap_err();
    assert_eq!(kind(&err), Some(RejectionKind::CircuitOpen));
    assert_eq!(
        retry_after(&err),
        Some(6 * S),
        "10 s from the older probe, 4 s ago"
    );
}

// resilience4j: shouldResetToClosedState and shouldForceOpenCircuitBreaker with
// calls in flight. seawall: after a reset "calls in flight become stale"; while
// forced open "calls in flight finish but change nothing".
#[tokio::test(start_paused = true)]
async fn calls_in_flight_across_a_reset_or_a_force_change_nothing() {
    let (handle, svc, _) = half_open(1, 1).await;
    let (probe, mut probe_call) = start_held(&svc);
    handle.reset();
    probe.send(false).unwrap();
    assert_ready_err!(probe_call.poll());
    let snapshot = handle.snapshot();
    assert_eq!(
        snapshot.state,
        State::Closed,
        "the failed probe reopened nothing"
    );
    assert_eq!(snapshot.consecutive_failures, Some(0));
    assert_eq!(snapshot.counters.stale, 1);

    let (late, mut late_call) = start_held(&svc);
    handle.force(Forced::Open);
    handle.release();
    late.send(false).unwrap();
    assert_ready_err!(late_call.poll());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(snapshot.consecutive_failures, Some(0));
    assert_eq!(snapshot.counters.stale, 2);
}

// resilience4j: IntervalFunctionTest (a randomized wait stays within its
// randomization factor). seawall: the interval is stretched by a fraction in
// `[0, jitter)` of itself and never shorter than configured, whatever the source
// returns.
#[tokio::test(start_paused = true)]
async fn jitter_stretches_the_open_interval_within_its_bound() {
    for (sample, open_for) in [
        (0.0, 10 * S),
        (0.5, 12_500 * MS),
        (1.0, 15 * S - NS),
        (7.0, 15 * S - NS),
        (-1.0, 10 * S),
        (f64::NAN, 10 * S),
    ] {
        let layer = CircuitBreakerLayer::builder("jitter")
            .consecutive_failures(1)
            .open_for(10 * S)
            .jitter(0.5)
            .random_source(move || sample)
            .build()
            .unwrap();
        let handle = layer.handle();
        let svc = layer.layer(Dependency::default());
        fail_times(&svc, 1).await;
        let got = handle.snapshot().open_for.unwrap();
        assert!(
            got >= 10 * S && got <= open_for,
            "a sample of {sample}: open for {got:?}, expected at least 10 s and at most {open_for:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// More of the bulkhead's queue
// ---------------------------------------------------------------------------

// gobreaker: TestCustomCircuitBreaker (a request admitted in half-open that ends
// after the breaker closed belongs to an older generation). seawall: the probe
// left in flight when another closed the breaker is stale; its failure neither
// trips the closed breaker nor enters its window.
#[tokio::test(start_paused = true)]
async fn a_probe_ending_after_another_closed_the_breaker_is_stale() {
    let (handle, svc, _) = half_open(2, 1).await;
    let (first, mut first_call) = start_held(&svc);
    let (second, mut second_call) = start_held(&svc);
    first.send(true).unwrap();
    assert_ready_ok!(first_call.poll());
    assert_eq!(handle.state(), State::Closed);

    second.send(false).unwrap();
    assert_ready_err!(second_call.poll());
    let snapshot = handle.snapshot();
    assert_eq!(
        snapshot.state,
        State::Closed,
        "one failure would trip this breaker"
    );
    assert_eq!(snapshot.consecutive_failures, Some(0));
    assert_eq!(snapshot.counters.stale, 1);
}

// tower-resilience: test_backpressure_waits_when_open and
// half_open_backpressure_waiter_wakes_promptly_when_a_slot_frees. In seawall's
// readiness mode `poll_ready` is pending while the breaker would turn a call away,
// and is woken when the open interval ends and when a probe slot is freed.
#[tokio::test(start_paused = true)]
async fn readiness_mode_waits_out_the_open_interval_and_wakes_when_a_probe_slot_frees() {
    let layer = CircuitBreakerLayer::builder("readiness")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(5 * S)
        .build()
        .unwrap()
        .pending_while_open();
    let handle = layer.handle();
    let dependency = Dependency::default();
    let mut svc = layer.layer(dependency.clone());
    fail_times(&svc, 1).await;

    let mut waiting = task::spawn(());
    assert_pending!(waiting.enter(|cx, _| Service::<Script>::poll_ready(&mut svc, cx)));
    tokio::time::advance(5 * S - MS).await;
    assert!(!waiting.is_woken(), "woken before the interval ended");
    tokio::time::advance(MS).await;
    assert!(waiting.is_woken(), "the interval's end wakes it");
    assert_ready_ok!(waiting.enter(|cx, _| Service::<Script>::poll_ready(&mut svc, cx)));

    // The probe takes the only slot; another service waits for it.
    let (tx, script) = held();
    let mut probe = task::spawn(svc.call(script));
    assert_pending!(probe.poll());
    let mut other = svc.clone();
    let mut other_waiting = task::spawn(());
    assert_pending!(other_waiting.enter(|cx, _| Service::<Script>::poll_ready(&mut other, cx)));
    drop(probe);
    drop(tx);
    assert!(
        other_waiting.is_woken(),
        "a freed probe slot wakes the waiter"
    );
    assert_ready_ok!(other_waiting.enter(|cx, _| Service::<Script>::poll_ready(&mut other, cx)));
    assert_eq!(other.call(Script::Succeed).await.unwrap(), "ok");
    assert_eq!(handle.state(), State::Closed);
}

// resilience4j: shouldOpenAfterSlowCallRateThresholdExceeded checks the rates on
// every recorded call. seawall evaluates a trip when a failure or a slow call is
// recorded: a fast success that completes `min_calls` never trips, the next slow
// call does.
#[tokio::test(start_paused = true)]
async fn a_fast_success_completing_min_calls_does_not_trip_on_the_slow_rate() {
    let layer = CircuitBreakerLayer::builder("slow")
        .jitter(0.0)
        .count_window(3, 2, 1.0)
        .slow_calls(S, 0.5)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::default());

    let (tx, mut slow) = start_held(&svc);
    tokio::time::advance(S).await;
    tx.send(true).unwrap();
    assert_ready_ok!(slow.poll());
    assert_eq!(handle.state(), State::Closed, "1 call: below min_calls");
    run(&svc, Script::Succeed).await.unwrap();
    let snapshot = handle.snapshot();
    assert_eq!(
        (
            snapshot.window.unwrap().calls,
            snapshot.window.unwrap().slow
        ),
        (2, 1)
    );
    assert_eq!(
        snapshot.state,
        State::Closed,
        "a fast success alone never trips"
    );

    let (tx, mut slow) = start_held(&svc);
    tokio::time::advance(2 * S).await;
    tx.send(true).unwrap();
    assert_ready_ok!(slow.poll());
    assert_eq!(handle.state(), State::Open, "2 slow of 3");
}

// tower-resilience: circuitbreaker_composes_with_concurrency_limit. seawall: a
// bulkhead's rejection from further in is an admission rejection, decided locally,
// which the breaker's classifiers ignore: it is no evidence about the dependency.
#[tokio::test(start_paused = true)]
async fn a_breaker_over_a_full_bulkhead_ignores_its_rejections() {
    let breaker = CircuitBreakerLayer::builder("outer")
        .jitter(0.0)
        .consecutive_failures(1)
        .build()
        .unwrap();
    let handle = breaker.handle();
    let bulkhead = BulkheadLayer::builder("inner")
        .max_concurrent(1)
        .max_queue(0)
        .build()
        .unwrap();
    let svc = breaker.layer(bulkhead.layer(Dependency::default()));

    let (_busy, _busy_call) = start_held(&svc);
    for _ in 0..3 {
        let err = run(&svc, Script::Succeed).await.unwrap_err();
        assert_eq!(kind(&err), Some(RejectionKind::BulkheadFull));
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Closed);
    assert_eq!(
        (snapshot.counters.ignored, snapshot.counters.failures),
        (3, 0)
    );
}

/// A dependency whose readiness the test opens, closes or breaks.
#[derive(Clone, Default)]
struct Gate {
    state: Arc<std::sync::Mutex<GateState>>,
}

#[derive(Default)]
struct GateState {
    open: bool,
    broken: bool,
    polls: usize,
    waker: Option<std::task::Waker>,
}

impl Gate {
    fn open(&self) {
        let mut state = self.state.lock().unwrap();
        state.open = true;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }
    fn break_it(&self) {
        self.state.lock().unwrap().broken = true;
    }
    fn polls(&self) -> usize {
        self.state.lock().unwrap().polls
    }
}

impl Service<Script> for Gate {
    type Response = &'static str;
    type Error = BoxError;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        let mut state = self.state.lock().unwrap();
        state.polls += 1;
        if state.broken {
            Poll::Ready(Err("the connection pool is closed".into()))
        } else if state.open {
            Poll::Ready(Ok(()))
        } else {
            state.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    fn call(&mut self, _: Script) -> Answer {
        Box::pin(async { Ok("ok") })
    }
}

// tower-resilience: closed_circuit_forwards_permanently_pending_inner_without_busy_polling
// and admitted_inner_readiness_error_is_preserved. A closed breaker forwards the
// inner service's readiness as it is: pending (woken by the inner service, with
// no polling in between), then ready; a readiness error comes back as the inner
// service's own error, no rejection.
#[tokio::test(start_paused = true)]
async fn a_closed_breaker_forwards_the_inner_readiness() {
    let layer = CircuitBreakerLayer::builder("closed")
        .jitter(0.0)
        .build()
        .unwrap();
    let gate = Gate::default();
    let mut svc = layer.layer(gate.clone());

    let mut waiting = task::spawn(());
    assert_pending!(waiting.enter(|cx, _| Service::<Script>::poll_ready(&mut svc, cx)));
    let polls = gate.polls();
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(gate.polls(), polls, "nobody polled again without a wake-up");
    gate.open();
    assert!(waiting.is_woken());
    assert_ready_ok!(waiting.enter(|cx, _| Service::<Script>::poll_ready(&mut svc, cx)));
    assert_eq!(svc.call(Script::Succeed).await.unwrap(), "ok");

    gate.break_it();
    let err = match svc.ready().await {
        Ok(_) => panic!("a broken dependency is not ready"),
        Err(err) => err,
    };
    assert_eq!(kind(&err), None);
    assert_eq!(err.to_string(), "the connection pool is closed");
}

// tower-resilience: inner_readiness_error_releases_reserved_permit,
// dropping_reserved_clone_releases_exactly_one_permit and
// backpressure_call_requires_readiness_reservation (bulkhead in backpressure mode).
#[tokio::test(start_paused = true)]
async fn backpressure_reservations_belong_to_one_service_value() {
    let layer = BulkheadLayer::builder("reserve")
        .max_concurrent(1)
        .build()
        .unwrap()
        .backpressure();
    let handle = layer.handle();
    let gate = Gate::default();
    gate.open();
    let mut reserved = layer.layer(gate.clone());
    reserved.ready().await.unwrap();
    assert_eq!(handle.snapshot().active, 1);

    // A clone shares the bulkhead, not the reservation: dropping it frees nothing,
    // and calling it without a reservation is turned away, not let through.
    let mut clone = reserved.clone();
    let err = clone.call(Script::Succeed).await.unwrap_err();
    assert_eq!(kind(&err), Some(RejectionKind::BulkheadFull));
    drop(clone);
    assert_eq!(handle.snapshot().active, 1);
    drop(reserved);
    assert_eq!(handle.snapshot().active, 0);

    // An error from the inner service's readiness frees the slot it was reserving.
    gate.break_it();
    let mut broken = layer.layer(gate.clone());
    assert!(broken.ready().await.is_err());
    assert_eq!(handle.snapshot().active, 0);
}

// resilience4j: the state-transition events of CircuitBreakerStateMachineTest
// (one event per transition, none per rejected call); Polly: the onBreak, onReset
// and onHalfOpen delegates of CircuitBreakerSpecs. seawall sends lazy transitions
// when the next call makes them, dated when they became due.
#[tokio::test(start_paused = true)]
async fn each_transition_is_announced_once_and_lazy_ones_with_their_due_time() {
    use seawall::circuit_breaker::Cause;
    use tokio::sync::broadcast::error::TryRecvError;

    let layer = CircuitBreakerLayer::builder("events")
        .jitter(0.0)
        .consecutive_failures(2)
        .open_for(5 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut transitions = handle.subscribe();
    let svc = layer.layer(Dependency::default());
    let start = tokio::time::Instant::now();

    fail_times(&svc, 2).await;
    let trip = transitions.try_recv().unwrap();
    assert_eq!(
        (trip.from, trip.to, trip.cause),
        (State::Closed, State::Open, Cause::ConsecutiveFailures)
    );
    assert_eq!(trip.at, start);
    for _ in 0..3 {
        run(&svc, Script::Succeed).await.unwrap_err();
    }
    assert_eq!(
        transitions.try_recv().unwrap_err(),
        TryRecvError::Empty,
        "rejections are no transitions"
    );

    tokio::time::advance(7 * S).await;
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(
        transitions.try_recv().unwrap_err(),
        TryRecvError::Empty,
        "reading the state sends nothing"
    );
    run(&svc, Script::Succeed).await.unwrap();
    let half_open = transitions.try_recv().unwrap();
    assert_eq!(
        (half_open.from, half_open.to, half_open.cause),
        (State::Open, State::HalfOpen, Cause::OpenIntervalElapsed)
    );
    assert_eq!(half_open.at, start + 5 * S, "dated when it became due");
    let closed = transitions.try_recv().unwrap();
    assert_eq!(
        (closed.from, closed.to, closed.cause),
        (State::HalfOpen, State::Closed, Cause::ProbesSucceeded)
    );
    assert_eq!(closed.at, start + 7 * S);
    assert!(trip.epoch < half_open.epoch && half_open.epoch < closed.epoch);
    assert_eq!(transitions.try_recv().unwrap_err(), TryRecvError::Empty);
}

// ---------------------------------------------------------------------------
// Fallback
// ---------------------------------------------------------------------------

// tower-resilience-fallback: success_no_fallback, failure_triggers_value_fallback
// and predicate_skips_non_matching_errors. seawall: nothing fires the fallback
// until it is selected; anything else passes through untouched.
#[tokio::test(start_paused = true)]
async fn a_fallback_fires_only_on_what_was_selected() {
    let breaker = CircuitBreakerLayer::builder("supplier")
        .jitter(0.0)
        .consecutive_failures(1)
        .build()
        .unwrap();
    let fallback = seawall::fallback::FallbackLayer::builder("quote")
        .on_rejection(RejectionKind::CircuitOpen)
        .value("cached")
        .unmarked()
        .build()
        .unwrap();
    let handle = fallback.handle();
    let svc = fallback.layer(breaker.layer(Dependency::default()));

    assert_eq!(run(&svc, Script::Succeed).await.unwrap(), "ok");
    let err = run(&svc, Script::Fail).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "connection refused",
        "not selected: untouched"
    );
    assert_eq!(
        run(&svc, Script::Succeed).await.unwrap(),
        "cached",
        "the breaker is open"
    );

    let snapshot = handle.snapshot();
    assert_eq!(
        (snapshot.served, snapshot.passed_through),
        (1, 1),
        "one error passed through"
    );
}

// tower-resilience-fallback: backup_service_also_fails. seawall: when every step
// of a chain fails, the error says which step failed how, and a step that overruns
// its own timeout is cut there.
#[tokio::test(start_paused = true)]
async fn when_every_step_fails_the_error_names_each_step_and_its_cause() {
    let fallback = seawall::fallback::FallbackLayer::builder("quote")
        .on_failure(seawall::ErrorsAsFailures)
        .step("cache", 100 * MS, |_| async {
            Err::<&'static str, BoxError>("cache miss".into())
        })
        .step("replica", 100 * MS, |_| {
            std::future::pending::<Result<&'static str, BoxError>>()
        })
        .unmarked()
        .build()
        .unwrap();
    let handle = fallback.handle();
    let svc = fallback.layer(Dependency::default());
    let started = tokio::time::Instant::now();

    let err = run(&svc, Script::Fail).await.unwrap_err();
    assert_eq!(kind(&err), Some(RejectionKind::FallbacksExhausted));
    let exhausted = std::iter::successors(Some(&*err as &(dyn std::error::Error + 'static)), |e| {
        e.source()
    })
    .find_map(|e| e.downcast_ref::<seawall::core::FallbacksExhausted>())
    .expect("every step failed");
    let steps: Vec<_> = exhausted
        .steps()
        .iter()
        .map(|s| s.step().to_owned())
        .collect();
    assert_eq!(steps, ["cache", "replica"]);
    assert_eq!(exhausted.steps()[0].cause().to_string(), "cache miss");
    assert!(exhausted.steps()[1]
        .cause()
        .downcast_ref::<seawall::fallback::StepTimedOut>()
        .is_some());
    assert_eq!(
        tokio::time::Instant::now() - started,
        100 * MS,
        "cut at its timeout"
    );
    assert_eq!(handle.snapshot().exhausted, 1);
}

// ---------------------------------------------------------------------------
// Deadlines
// ---------------------------------------------------------------------------

// Polly: TimeoutSpecs (an execution shorter than the timeout completes, a longer
// one is cut when the timeout passes); tower: timeout's Elapsed as a boxed error.
// seawall: the breaker bounds the call by the current deadline and records an
// overrun as a failure (a timeout), answered with DeadlineExceeded.
#[tokio::test(start_paused = true)]
async fn a_deadline_cuts_an_overrunning_call_and_the_breaker_counts_a_timeout_failure() {
    let breaker = CircuitBreakerLayer::builder("supplier")
        .jitter(0.0)
        .consecutive_failures(2)
        .build()
        .unwrap();
    let handle = breaker.handle();
    let deadline = seawall::DeadlineLayer::new(100 * MS).unwrap();
    let svc = deadline.layer(breaker.layer(Dependency::default()));

    let (tx, mut call) = start_held(&svc);
    tokio::time::advance(100 * MS - NS).await;
    assert_pending!(call.poll());
    tx.send(true).unwrap();
    assert_ready_ok!(call.poll());

    for expected in [State::Closed, State::Open] {
        let (_tx, mut call) = start_held(&svc);
        tokio::time::advance(100 * MS).await;
        let err = assert_ready_err!(call.poll());
        assert_eq!(kind(&err), Some(RejectionKind::DeadlineExceeded));
        assert_eq!(handle.state(), expected);
    }
    let counters = handle.snapshot().counters;
    assert_eq!(
        (counters.timeouts, counters.failures, counters.successes),
        (2, 2, 1)
    );
}

// resilience4j: SemaphoreBulkheadTest.testTryEnterWithTimeout, with the request's
// own budget shorter than the wait. seawall: a waiter never waits past the
// current deadline; it leaves with the bulkhead's admission rejection, which says
// how long it waited.
#[tokio::test(start_paused = true)]
async fn a_bulkhead_waiter_leaves_at_its_deadline_before_max_wait() {
    let bulkhead = BulkheadLayer::builder("budget")
        .max_concurrent(1)
        .max_queue(1)
        .max_wait(S)
        .build()
        .unwrap();
    let handle = bulkhead.handle();
    let dependency = Dependency::default();
    let inner = bulkhead.layer(dependency.clone());
    let with_budget = seawall::DeadlineLayer::new(50 * MS)
        .unwrap()
        .layer(inner.clone());

    let (_busy, _busy_call) = start_held(&inner);
    let mut waiter = start(&with_budget, Script::Succeed);
    assert_pending!(waiter.poll());
    tokio::time::advance(50 * MS - NS).await;
    assert_pending!(waiter.poll());
    tokio::time::advance(NS).await;
    let err = assert_ready_err!(waiter.poll());
    assert_eq!(kind(&err), Some(RejectionKind::BulkheadTimeout), "{err}");
    assert_eq!(find_rejection(&*err).unwrap().waited(), Some(50 * MS));
    assert_eq!(dependency.called(), 1);
    assert_eq!(handle.snapshot().queued, 0);
}

// tower-resilience: open_rejection_does_not_poll_pending_inner ("repeated
// readiness polls preserve the same rejection grant"). seawall: a `poll_ready`
// answered while open did not poll the inner service, so the call after it is
// turned away even if the interval ended in between, with a retry-after that is
// never zero; the next readiness poll sends the probe.
#[tokio::test(start_paused = true)]
async fn a_readiness_granted_while_open_rejects_its_call_even_after_the_interval() {
    let layer = CircuitBreakerLayer::builder("grant")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(5 * S)
        .build()
        .unwrap();
    let handle = layer.handle();
    let dependency = Dependency::default();
    let mut svc = layer.layer(dependency.clone());
    fail_times(&svc, 1).await;
    let polled = dependency.polled();

    tokio::time::advance(5 * S - NS).await;
    svc.ready().await.unwrap();
    tokio::time::advance(NS).await;
    let err = svc.call(Script::Succeed).await.unwrap_err();
    assert_eq!(kind(&err), Some(RejectionKind::CircuitOpen));
    assert_eq!(
        retry_after(&err),
        Some(seawall::core::CircuitOpen::MIN_RETRY_AFTER)
    );
    assert_eq!((dependency.polled(), dependency.called()), (polled, 1));

    assert_eq!(run(&svc, Script::Succeed).await.unwrap(), "ok");
    assert_eq!(dependency.polled(), polled + 1);
    assert_eq!(handle.state(), State::Closed);
}

/// A dependency that tracks how many calls are inside it at once.
#[derive(Clone, Default)]
struct Gauge {
    inside: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Service<Script> for Gauge {
    type Response = &'static str;
    type Error = BoxError;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Script) -> Answer {
        let gauge = self.clone();
        Box::pin(async move {
            let now = gauge.inside.fetch_add(1, Ordering::SeqCst) + 1;
            gauge.most.fetch_max(now, Ordering::SeqCst);
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            gauge.inside.fetch_sub(1, Ordering::SeqCst);
            Ok("ok")
        })
    }
}

// gobreaker: TestCircuitBreakerInParallel (every request counted once under
// concurrency); recloser: recloser_concurrent. Real threads and real time, so only
// invariants that hold under any interleaving: the bulkhead never lets more than
// its limit in, every call is counted once by each layer, the breaker ignores
// every bulkhead rejection, and no slot is left taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_parallel_callers_every_call_is_counted_once_and_the_limit_holds() {
    const TASKS: usize = 8;
    const CALLS: usize = 200;
    let breaker = CircuitBreakerLayer::builder("parallel")
        .jitter(0.0)
        .consecutive_failures(1)
        .build()
        .unwrap();
    let bulkhead = BulkheadLayer::builder("parallel")
        .max_concurrent(3)
        .max_queue(0)
        .build()
        .unwrap();
    let gauge = Gauge::default();
    let svc = breaker.layer(bulkhead.layer(gauge.clone()));

    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let mut answered = 0;
                for _ in 0..CALLS {
                    match svc.clone().oneshot(Script::Succeed).await {
                        Ok(_) => answered += 1,
                        Err(err) => assert_eq!(kind(&err), Some(RejectionKind::BulkheadFull)),
                    }
                }
                answered
            })
        })
        .collect();
    let mut answered = 0;
    for task in tasks {
        answered += task.await.unwrap();
    }

    assert!(gauge.most.load(Ordering::SeqCst) <= 3);
    let bulkhead = bulkhead.handle().snapshot();
    assert_eq!(bulkhead.active, 0);
    assert_eq!(bulkhead.admitted as usize, answered);
    assert_eq!(
        (bulkhead.admitted + bulkhead.rejected_full) as usize,
        TASKS * CALLS
    );
    let breaker = breaker.handle().snapshot();
    assert_eq!(breaker.state, State::Closed);
    assert_eq!(breaker.counters.calls as usize, TASKS * CALLS);
    assert_eq!(breaker.counters.successes as usize, answered);
    assert_eq!(breaker.counters.ignored, bulkhead.rejected_full);
}
