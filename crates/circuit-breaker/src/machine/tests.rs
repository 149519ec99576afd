//! Pure machine tests: every transition and guard, driven by explicit instants.

use std::time::Duration;

use proptest::prelude::*;
use seawall_core::{Outcome, SeededRandom};
use tokio::time::Instant;

use super::*;
use crate::config::{CircuitBreakerConfig, RampConfig, SlowCallConfig, TripPolicy};
use crate::state::{Driven, Mode};

const S: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[allow(clippy::needless_pass_by_value)] // reads better at the call sites
fn machine_at(config: CircuitBreakerConfig, t0: Instant) -> Driven {
    Driven::new(&config, Some(Box::new(SeededRandom::new(7))), t0).unwrap()
}

/// A machine built now, and that instant.
fn fresh(config: CircuitBreakerConfig) -> (Driven, Instant) {
    let t0 = Instant::now();
    (machine_at(config, t0), t0)
}

fn consecutive(threshold: u32) -> CircuitBreakerConfig {
    CircuitBreakerConfig {
        policy: TripPolicy::ConsecutiveFailures { threshold },
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    }
}

fn admit(m: &mut Driven, now: Instant) -> Ticket {
    match m.acquire(now) {
        Admission::Admitted(t) => t,
        Admission::Rejected(r, _) => panic!("rejected, retry after {r:?}"),
        Admission::Shadow(..) => panic!("shadow mode is off"),
    }
}

fn rejected(m: &mut Driven, now: Instant) -> Duration {
    match m.acquire(now) {
        Admission::Rejected(r, _) => r,
        Admission::Admitted(t) | Admission::Shadow(t, _) => panic!("admitted {t:?}"),
    }
}

fn finish(m: &mut Driven, t: Ticket, outcome: Outcome, now: Instant) -> Recorded {
    m.complete(t, Report::of(outcome), now)
}

/// One call admitted and finished at `now`.
fn call(m: &mut Driven, outcome: Outcome, now: Instant) {
    let t = admit(m, now);
    finish(m, t, outcome, now);
}

/// `n` calls admitted and finished at `now`, all with `outcome`.
fn call_times(m: &mut Driven, n: usize, outcome: Outcome, now: Instant) {
    for _ in 0..n {
        call(m, outcome, now);
    }
}

fn transitions(m: &mut Driven) -> Vec<(State, State, Cause)> {
    m.take_transitions()
        .map(|t| (t.from, t.to, t.cause))
        .collect()
}

/// Trips a default-configured machine at `now` (10 failures).
fn trip(m: &mut Driven, now: Instant) {
    for _ in 0..10 {
        if m.state(now) != State::Closed {
            break;
        }
        call(m, Outcome::Failure, now);
    }
    assert_eq!(m.state(now), State::Open);
}

/// A machine tripped at the returned instant.
fn tripped(config: CircuitBreakerConfig) -> (Driven, Instant) {
    let (mut m, t0) = fresh(config);
    trip(&mut m, t0);
    (m, t0)
}

/// A machine tripped at `t0`, with its first probe admitted at `t1`, when the default
/// 10 s open interval has elapsed.
fn probing(config: CircuitBreakerConfig) -> (Driven, Instant, Instant, Ticket) {
    let (mut m, t0) = tripped(config);
    let t1 = t0 + 10 * S;
    let probe = admit(&mut m, t1);
    (m, t0, t1, probe)
}

#[test]
fn consecutive_failures_trip_at_threshold_and_a_success_resets_the_count() {
    let (mut m, t0) = fresh(consecutive(3));
    call(&mut m, Outcome::Failure, t0);
    call(&mut m, Outcome::Failure, t0);
    call(&mut m, Outcome::Success, t0);
    assert_eq!(m.consecutive_failures(), Some(0));
    call(&mut m, Outcome::Failure, t0);
    call(&mut m, Outcome::Failure, t0);
    assert_eq!(m.state(t0), State::Closed);
    call(&mut m, Outcome::Failure, t0);
    assert_eq!(m.state(t0), State::Open);
    assert_eq!(
        transitions(&mut m),
        vec![(State::Closed, State::Open, Cause::ConsecutiveFailures)]
    );
}

#[test]
fn an_80_percent_failing_dependency_never_trips_a_consecutive_counter_but_trips_a_window() {
    let t0 = Instant::now();
    let mut counter = machine_at(consecutive(5), t0);
    let mut window = machine_at(
        CircuitBreakerConfig {
            jitter: Some(0.0),
            ..CircuitBreakerConfig::default()
        },
        t0,
    );
    let pattern = [
        Outcome::Failure,
        Outcome::Failure,
        Outcome::Failure,
        Outcome::Failure,
        Outcome::Success,
    ];
    let mut window_tripped_after = None;
    for i in 0..1000 {
        let outcome = pattern[i % pattern.len()];
        call(&mut counter, outcome, t0);
        if window.state(t0) == State::Closed {
            call(&mut window, outcome, t0);
            if window.state(t0) == State::Open {
                window_tripped_after = Some(i + 1);
            }
        }
    }
    assert_eq!(counter.state(t0), State::Closed, "4 in a row never reach 5");
    assert_eq!(counter.tally().failures, 800);
    // The window holds 10 outcomes (8 failures) after the 10th call, a success;
    // trips are evaluated on failures, so the 11th call trips it.
    assert_eq!(window_tripped_after, Some(11));
}

#[test]
fn the_window_slides_1000_successes_then_5_failures_among_the_last_10_trip() {
    let (mut m, t0) = fresh(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    call_times(&mut m, 1000, Outcome::Success, t0);
    for i in 0..5 {
        assert_eq!(m.state(t0), State::Closed, "tripped after {i} failures");
        call(&mut m, Outcome::Failure, t0);
    }
    assert_eq!(m.state(t0), State::Open);
    assert_eq!(
        m.window_counts(t0).map(|c| (c.calls, c.failures)),
        Some((10, 5))
    );
    assert_eq!(
        transitions(&mut m),
        vec![(State::Closed, State::Open, Cause::FailureRate)]
    );
}

#[test]
fn the_window_needs_min_calls_and_a_success_alone_never_trips() {
    let (mut m, t0) = fresh(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    // 9 outcomes, 5 failures: a rate of 55 %, but fewer than 10 calls.
    call_times(&mut m, 5, Outcome::Failure, t0);
    call_times(&mut m, 4, Outcome::Success, t0);
    assert_eq!(m.state(t0), State::Closed);
    // The 10th outcome is a success: 5/10 = 50 %, but trips are evaluated on failures.
    call(&mut m, Outcome::Success, t0);
    assert_eq!(m.state(t0), State::Closed);
    // The next failure evaluates the window (F F F F S S S S S F: 5 of 10).
    call(&mut m, Outcome::Failure, t0);
    assert_eq!(m.state(t0), State::Open);
}

fn time_window_machine(t0: Instant) -> Driven {
    machine_at(
        CircuitBreakerConfig {
            policy: TripPolicy::TimeWindow {
                window: 10 * S,
                bucket: S,
                min_calls: 3,
                failure_rate: 0.6,
            },
            jitter: Some(0.0),
            ..CircuitBreakerConfig::default()
        },
        t0,
    )
}

#[test]
fn time_window_an_outcome_exactly_window_old_does_not_count() {
    let t0 = Instant::now();
    // Just inside the window: the two old failures still count, 3 of 4 failed.
    let mut inside = time_window_machine(t0);
    call(&mut inside, Outcome::Failure, t0);
    call(&mut inside, Outcome::Failure, t0);
    let just_before = t0 + 10 * S - Duration::from_nanos(1);
    call(&mut inside, Outcome::Success, just_before);
    call(&mut inside, Outcome::Failure, just_before);
    assert_eq!(inside.state(just_before), State::Open);

    // At exactly `window` of age they have expired: 2 calls, below min_calls.
    let mut boundary = time_window_machine(t0);
    call(&mut boundary, Outcome::Failure, t0);
    call(&mut boundary, Outcome::Failure, t0);
    let at = t0 + 10 * S;
    call(&mut boundary, Outcome::Success, at);
    call(&mut boundary, Outcome::Failure, at);
    assert_eq!(boundary.state(at), State::Closed);
    assert_eq!(boundary.window_counts(at).map(|c| c.calls), Some(2));
}

#[test]
fn the_open_interval_is_measured_from_the_trip_not_the_last_call() {
    let (mut m, t0) = fresh(consecutive(3));
    call(&mut m, Outcome::Failure, t0);
    call(&mut m, Outcome::Failure, t0 + 4 * S);
    // A call admitted early that fails late trips the breaker when it finishes.
    let late = admit(&mut m, t0 + 5 * S);
    let trip_at = t0 + 7 * S;
    finish(&mut m, late, Outcome::Failure, trip_at);
    assert_eq!(m.state(trip_at), State::Open);
    assert_eq!(m.since(), trip_at);
    assert_eq!(rejected(&mut m, trip_at + 3 * S), 7 * S);
    let almost = trip_at + 10 * S - Duration::from_nanos(1);
    assert_eq!(m.state(almost), State::Open);
    assert_eq!(rejected(&mut m, almost), Duration::from_nanos(1));
    assert_eq!(m.state(trip_at + 10 * S), State::HalfOpen);
}

#[test]
fn half_open_is_lazy_reported_by_state_made_by_the_next_call() {
    let (mut m, t0) = tripped(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    transitions(&mut m);
    let epoch = m.epoch();
    let later = t0 + 60 * S;
    assert_eq!(m.state(later), State::HalfOpen);
    // Reading the state moved nothing: no transition, same epoch, no timer.
    assert_eq!(m.epoch(), epoch);
    assert!(transitions(&mut m).is_empty());
    assert_eq!(m.mode(), Mode::Open);
    // The next call makes the transition, dated when it became due, and is the probe.
    let probe = admit(&mut m, later);
    assert!(probe.probe.is_some());
    assert_eq!(
        transitions(&mut m),
        vec![(State::Open, State::HalfOpen, Cause::OpenIntervalElapsed)]
    );
    assert_eq!(m.since(), t0 + 10 * S);
    assert_eq!(m.mode(), Mode::Locked);
}

#[test]
fn a_successful_probe_closes_and_resets_the_window_so_the_next_failures_trip_from_zero() {
    let (mut m, t0, t1, probe) = probing(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    assert_eq!(finish(&mut m, probe, Outcome::Success, t1), Recorded::Probe);
    assert_eq!(m.state(t1), State::Closed);
    assert_eq!(m.window_counts(t1).map(|c| c.calls), Some(0));
    assert_eq!(m.tally().probe_successes, 1);
    // A window that still held the tripping failures would reopen at the first one.
    for i in 0..9 {
        call(&mut m, Outcome::Failure, t1);
        assert_eq!(
            m.state(t1),
            State::Closed,
            "reopened after {} failures",
            i + 1
        );
    }
    call(&mut m, Outcome::Failure, t1);
    assert_eq!(m.state(t1), State::Open);

    // Same with a consecutive counter: N failures again, from zero.
    let mut c = machine_at(consecutive(3), t0);
    call_times(&mut c, 3, Outcome::Failure, t0);
    let probe = admit(&mut c, t1);
    finish(&mut c, probe, Outcome::Success, t1);
    call(&mut c, Outcome::Failure, t1);
    call(&mut c, Outcome::Failure, t1);
    assert_eq!(c.state(t1), State::Closed);
    call(&mut c, Outcome::Failure, t1);
    assert_eq!(c.state(t1), State::Open);
}

#[test]
fn a_failed_probe_reopens_with_the_timer_reset_to_now() {
    let (mut m, t0) = tripped(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    let admitted = t0 + 12 * S;
    let probe = admit(&mut m, admitted);
    let failed = admitted + 3 * S;
    finish(&mut m, probe, Outcome::Failure, failed);
    assert_eq!(m.state(failed), State::Open);
    assert_eq!(m.since(), failed);
    assert_eq!(m.reopen_at(), Some(failed + 10 * S));
    assert_eq!(rejected(&mut m, failed + S), 9 * S);
    assert_eq!(m.failed_probes(), 1);
    assert_eq!(m.tally().probe_failures, 1);
    let _ = transitions(&mut m);
    // Next probe, after another full interval from the failure.
    assert_eq!(
        m.state(failed + 10 * S - Duration::from_nanos(1)),
        State::Open
    );
    let probe = admit(&mut m, failed + 10 * S);
    finish(&mut m, probe, Outcome::Success, failed + 10 * S);
    assert_eq!(m.failed_probes(), 0);
    assert_eq!(
        transitions(&mut m),
        vec![
            (State::Open, State::HalfOpen, Cause::OpenIntervalElapsed),
            (State::HalfOpen, State::Closed, Cause::ProbesSucceeded)
        ]
    );
}

#[test]
fn callers_arriving_while_the_probe_is_in_flight_are_rejected_with_a_positive_retry_after() {
    let (mut m, _, t1, _probe) = probing(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    // The half-open timeout is 10 s: the slot is free (or the probe failed) by t1 + 10 s.
    assert_eq!(rejected(&mut m, t1), 10 * S);
    assert_eq!(rejected(&mut m, t1 + 4 * S), 6 * S);
    assert_eq!(m.probes_in_flight(), 1);
    assert_eq!(m.state(t1 + 4 * S), State::HalfOpen);
}

#[test]
fn a_stuck_probe_counts_as_failed_after_the_half_open_timeout() {
    let short_half_open = || CircuitBreakerConfig {
        half_open_timeout: 2 * S,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    let (mut m, t0, t1, stuck) = probing(short_half_open());
    let _ = transitions(&mut m);
    let due = t1 + 2 * S;
    assert_eq!(m.state(due - Duration::from_nanos(1)), State::HalfOpen);
    // Reported open at the timeout, and the reopen interval counts from it.
    assert_eq!(m.state(due), State::Open);
    assert_eq!(rejected(&mut m, due + S), 9 * S);
    assert_eq!(
        transitions(&mut m),
        vec![(State::HalfOpen, State::Open, Cause::ProbeTimedOut)]
    );
    assert_eq!(m.since(), due);
    assert_eq!(m.tally().probe_timeouts, 1);
    assert_eq!(m.failed_probes(), 1);
    // The stuck probe finally succeeds: stale, it changes nothing.
    let epoch = m.epoch();
    assert_eq!(
        finish(&mut m, stuck, Outcome::Success, due + 2 * S),
        Recorded::Stale
    );
    assert_eq!((m.state(due + 2 * S), m.epoch()), (State::Open, epoch));
    // Long after the timeout, `state` sees through both lazy steps.
    let mut n = machine_at(short_half_open(), t0);
    trip(&mut n, t0);
    let _stuck = admit(&mut n, t1);
    assert_eq!(n.state(t1 + 12 * S), State::HalfOpen);
    assert!(admit(&mut n, t1 + 12 * S).probe.is_some());
}

#[test]
fn a_stale_success_from_a_closed_epoch_does_not_close_the_breaker_during_a_probe() {
    let (mut m, t0) = fresh(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    let slow_call = admit(&mut m, t0);
    trip(&mut m, t0);
    let t1 = t0 + 10 * S;
    let probe = admit(&mut m, t1);
    let epoch = m.epoch();
    assert_eq!(
        finish(&mut m, slow_call, Outcome::Success, t1),
        Recorded::Stale
    );
    assert_eq!((m.state(t1), m.epoch()), (State::HalfOpen, epoch));
    assert_eq!(m.probes_in_flight(), 1);
    assert_eq!(m.tally().stale, 1);
    assert_eq!(m.tally().successes, 1, "still counted");
    // And a stale failure does not reopen it either.
    let other = Ticket::normal(epoch.wrapping_sub(2));
    assert_eq!(finish(&mut m, other, Outcome::Failure, t1), Recorded::Stale);
    assert_eq!(m.state(t1), State::HalfOpen);
    finish(&mut m, probe, Outcome::Success, t1);
    assert_eq!(m.state(t1), State::Closed);
}

#[test]
fn a_cancelled_or_ignored_probe_frees_its_slot_without_a_transition() {
    let (mut m, _, t1, probe) = probing(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    let _ = transitions(&mut m);
    let epoch = m.epoch();
    m.cancel(probe, t1);
    assert_eq!(m.probes_in_flight(), 0);
    assert_eq!((m.state(t1), m.epoch()), (State::HalfOpen, epoch));
    let probe = admit(&mut m, t1);
    assert_eq!(finish(&mut m, probe, Outcome::Ignore, t1), Recorded::Probe);
    assert_eq!(m.probes_in_flight(), 0);
    assert_eq!((m.state(t1), m.epoch()), (State::HalfOpen, epoch));
    assert!(transitions(&mut m).is_empty());
    assert_eq!((m.tally().cancelled, m.tally().ignored), (1, 1));
    assert_eq!(m.tally().probe_successes + m.tally().probe_failures, 0);
    assert!(admit(&mut m, t1).probe.is_some());
}

#[test]
fn several_probes_close_after_probes_to_close_and_the_first_failure_reopens() {
    let t0 = Instant::now();
    let config = CircuitBreakerConfig {
        half_open_max: 2,
        probes_to_close: 3,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    let mut m = machine_at(config.clone(), t0);
    trip(&mut m, t0);
    let t1 = t0 + 10 * S;
    let a = admit(&mut m, t1);
    let b = admit(&mut m, t1);
    assert_ne!(a.probe, b.probe);
    rejected(&mut m, t1);
    finish(&mut m, a, Outcome::Success, t1);
    let c = admit(&mut m, t1);
    finish(&mut m, b, Outcome::Success, t1);
    assert_eq!(m.state(t1), State::HalfOpen);
    finish(&mut m, c, Outcome::Success, t1);
    assert_eq!(m.state(t1), State::Closed);

    let mut n = machine_at(config, t0);
    trip(&mut n, t0);
    let a = admit(&mut n, t1);
    let b = admit(&mut n, t1);
    finish(&mut n, a, Outcome::Success, t1);
    finish(&mut n, b, Outcome::Failure, t1);
    assert_eq!(n.state(t1), State::Open);
}

#[test]
fn the_open_interval_grows_on_re_trips_up_to_the_cap_and_resets_after_closing() {
    let t0 = Instant::now();
    let config = CircuitBreakerConfig {
        backoff_multiplier: 2.0,
        max_open_for: 35 * S,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    let mut m = machine_at(config, t0);
    trip(&mut m, t0);
    assert_eq!(m.current_open_for(), Some(10 * S));
    let mut now = t0;
    for expected in [20, 35, 35] {
        now += m.current_open_for().unwrap();
        let probe = admit(&mut m, now);
        finish(&mut m, probe, Outcome::Failure, now);
        assert_eq!(m.current_open_for(), Some(expected * S));
    }
    assert_eq!(m.streak(), 3);
    now += 35 * S;
    let probe = admit(&mut m, now);
    finish(&mut m, probe, Outcome::Success, now);
    assert_eq!(m.streak(), 0);
    trip(&mut m, now);
    assert_eq!(m.current_open_for(), Some(10 * S));
}

#[test]
fn jitter_stretches_the_interval_by_the_injected_sample() {
    let t0 = Instant::now();
    let config = CircuitBreakerConfig {
        jitter: Some(0.2),
        ..CircuitBreakerConfig::default()
    };
    let mut m = Driven::new(&config, Some(Box::new(|| 0.5)), t0).unwrap();
    trip(&mut m, t0);
    assert_eq!(m.current_open_for(), Some(11 * S));
    assert_eq!(m.state(t0 + 11 * S - Duration::from_nanos(1)), State::Open);
    // A source out of range is treated as 0, never as a negative or huge stretch.
    let mut odd = Driven::new(
        &CircuitBreakerConfig {
            jitter: Some(1.0),
            ..CircuitBreakerConfig::default()
        },
        Some(Box::new(|| f64::NAN)),
        t0,
    )
    .unwrap();
    trip(&mut odd, t0);
    assert_eq!(odd.current_open_for(), Some(10 * S));
    // Two seeded fleets members differ.
    let spread: Vec<_> = (0..2)
        .map(|seed| {
            let mut m = Driven::new(
                &CircuitBreakerConfig {
                    jitter: Some(0.5),
                    ..CircuitBreakerConfig::default()
                },
                Some(Box::new(SeededRandom::new(seed))),
                t0,
            )
            .unwrap();
            trip(&mut m, t0);
            m.current_open_for().unwrap()
        })
        .collect();
    assert_ne!(spread[0], spread[1]);
    assert!(spread.iter().all(|d| *d >= 10 * S && *d < 15 * S));
}

#[test]
fn the_default_jitter_is_on_and_stretches_by_less_than_a_fifth() {
    let t0 = Instant::now();
    let config = CircuitBreakerConfig::default();
    assert_eq!(config.jitter, None);
    assert_eq!(config.effective_jitter(), 0.2);
    // The largest sample the source can give stretches 10 s to just under 12 s.
    let mut top = Driven::new(&config, Some(Box::new(|| 0.999_999)), t0).unwrap();
    trip(&mut top, t0);
    let longest = top.current_open_for().unwrap();
    assert!(longest > 11 * S && longest < 12 * S, "{longest:?}");
    // Breakers that trip together, each with its own source, end apart and inside
    // [10 s, 12 s).
    let ends: Vec<_> = (0..20)
        .map(|seed| {
            let mut m = Driven::new(&config, Some(Box::new(SeededRandom::new(seed))), t0).unwrap();
            trip(&mut m, t0);
            m.current_open_for().unwrap()
        })
        .collect();
    assert!(ends.iter().all(|d| *d >= 10 * S && *d < 12 * S), "{ends:?}");
    let mut distinct = ends.clone();
    distinct.sort();
    distinct.dedup();
    assert!(distinct.len() > 10, "{ends:?}");
    // `Some(0.0)` is exact.
    let exact = CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    let mut m = Driven::new(&exact, Some(Box::new(|| 0.9)), t0).unwrap();
    trip(&mut m, t0);
    assert_eq!(m.current_open_for(), Some(10 * S));
}

#[test]
fn the_pure_machine_uses_the_samples_it_is_fed_in_order_and_counts_nothing() {
    let t0 = Instant::now();
    let config = CircuitBreakerConfig {
        policy: TripPolicy::ConsecutiveFailures { threshold: 1 },
        jitter: Some(0.5),
        ..CircuitBreakerConfig::default()
    };
    let mut m = CircuitBreakerMachine::new(&config, t0).unwrap();
    assert_eq!(m.samples_wanted(), 2);
    m.feed_sample(0.2);
    m.feed_sample(0.8);
    assert_eq!(m.samples_wanted(), 0);
    let fail = |m: &mut CircuitBreakerMachine, now: Instant| match m.acquire(now) {
        Admission::Admitted(t) => m.complete(t, Report::of(Outcome::Failure), now),
        other => panic!("{other:?}"),
    };
    fail(&mut m, t0);
    // The first sample stretches the first interval: 10 s * (1 + 0.5 * 0.2).
    assert_eq!(m.current_open_for(), Some(11 * S));
    assert_eq!(m.samples_wanted(), 1);
    // Not fed again: the probe's failure reopens with the second sample
    // (10 s * 1.4), and the next interval would have none.
    let t11 = t0 + 11 * S;
    fail(&mut m, t11);
    assert_eq!(m.current_open_for(), Some(14 * S));
    assert_eq!(m.samples_wanted(), 2);
    let causes: Vec<_> = m
        .take_events()
        .map(|e| match e {
            MachineEvent::Transition(t) => t.cause,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        causes,
        [
            Cause::ConsecutiveFailures,
            Cause::OpenIntervalElapsed,
            Cause::ProbeFailed
        ]
    );
    assert_eq!(m.take_events().count(), 0, "taken once");
    // A sample out of range counts as none.
    m.feed_sample(1.0);
    let t25 = t11 + 14 * S;
    fail(&mut m, t25);
    assert_eq!(m.current_open_for(), Some(10 * S));
}

#[test]
fn the_ramp_admits_a_growing_share_and_a_trip_during_it_reopens_with_backoff() {
    let t0 = Instant::now();
    let config = CircuitBreakerConfig {
        ramp: Some(RampConfig {
            duration: 10 * S,
            start_share: 0.2,
        }),
        backoff_multiplier: 2.0,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    let mut m = machine_at(config, t0);
    trip(&mut m, t0);
    let t1 = t0 + 10 * S;
    let probe = admit(&mut m, t1);
    finish(&mut m, probe, Outcome::Success, t1);
    assert_eq!(m.state(t1), State::Closed);
    assert_eq!(m.ramp_share(t1), Some(0.2));
    assert_eq!(m.mode(), Mode::Locked);

    let admitted_of_100 = |m: &mut Driven, now: Instant| {
        let mut admitted = 0;
        for _ in 0..100 {
            if let Admission::Admitted(t) = m.acquire(now) {
                admitted += 1;
                finish(m, t, Outcome::Success, now);
            }
        }
        admitted
    };
    // The first call after closing goes through, then about a fifth.
    assert_eq!(admitted_of_100(&mut m, t1), 20);
    // Halfway: 0.2 + 0.8 * 0.5 = 60 %.
    assert_eq!(admitted_of_100(&mut m, t1 + 5 * S), 60);
    // A caller turned away by the ramp is told when the ramp ends.
    let retry_after = (0..3).find_map(|_| match m.acquire(t1 + 5 * S) {
        Admission::Rejected(r, _) => Some(r),
        Admission::Admitted(t) | Admission::Shadow(t, _) => {
            finish(&mut m, t, Outcome::Success, t1 + 5 * S);
            None
        }
    });
    assert_eq!(retry_after, Some(5 * S));
    // A trip during the ramp reopens, with the grown interval.
    let now = t1 + 6 * S;
    for _ in 0..10 {
        if let Admission::Admitted(t) = m.acquire(now) {
            finish(&mut m, t, Outcome::Failure, now);
        }
    }
    assert_eq!(m.state(now), State::Open);
    assert_eq!(m.current_open_for(), Some(20 * S));

    // Once the ramp is over every call goes through again, without the lock.
    let later = now + 20 * S;
    let probe = admit(&mut m, later);
    finish(&mut m, probe, Outcome::Success, later);
    assert_eq!(admitted_of_100(&mut m, later + 10 * S), 100);
    assert_eq!(m.mode(), Mode::Closed);
    assert_eq!(m.streak(), 0);
}

#[test]
fn slow_calls_trip_on_their_rate_even_when_they_succeed() {
    let (mut m, t0) = fresh(CircuitBreakerConfig {
        slow_call: Some(SlowCallConfig {
            threshold: ms(300),
            rate: 0.5,
        }),
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    call_times(&mut m, 6, Outcome::Success, t0);
    // A success that took longer than the slow-call threshold.
    let slow_success = |m: &mut Driven| {
        let t = admit(m, t0);
        let report = Report {
            outcome: Outcome::Success,
            slow: true,
            timed_out: false,
            rehearsal: false,
        };
        m.complete(t, report, t0);
    };
    for i in 0..4 {
        slow_success(&mut m);
        assert_eq!(m.state(t0), State::Closed, "after {} slow", i + 1);
    }
    slow_success(&mut m);
    assert_eq!(m.state(t0), State::Open);
    assert_eq!(
        transitions(&mut m),
        vec![(State::Closed, State::Open, Cause::SlowCallRate)]
    );
    assert_eq!(m.tally().slow, 5);
}

#[test]
fn operators_force_open_force_closed_and_disable() {
    let (mut m, t0) = fresh(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    let before = admit(&mut m, t0);
    m.force_open(t0);
    assert_eq!(m.state(t0 + 3600 * S), State::ForcedOpen);
    assert_eq!(rejected(&mut m, t0 + 3600 * S), 10 * S);
    assert_eq!(m.mode(), Mode::ForcedOpen);
    // A call admitted before cannot change it.
    assert_eq!(
        finish(&mut m, before, Outcome::Success, t0),
        Recorded::Stale
    );
    assert_eq!(m.open_spell(t0 + 60 * S), Some(60 * S));

    m.force_closed(t0 + 60 * S);
    assert_eq!(m.open_spell(t0 + 60 * S), None);
    call_times(&mut m, 20, Outcome::Failure, t0 + 60 * S);
    assert_eq!(m.state(t0 + 60 * S), State::ForcedClosed, "never trips");
    assert_eq!(
        m.window_counts(t0).map(|c| c.failures),
        Some(10),
        "but records"
    );

    m.disable(t0 + 61 * S);
    call_times(&mut m, 20, Outcome::Failure, t0 + 61 * S);
    assert_eq!(m.state(t0 + 61 * S), State::Disabled);
    assert_eq!(m.tally().failures, 40);
    assert_eq!(
        transitions(&mut m),
        vec![
            (State::Closed, State::ForcedOpen, Cause::ForcedOpen),
            (State::ForcedOpen, State::ForcedClosed, Cause::ForcedClosed),
            (State::ForcedClosed, State::Disabled, Cause::Disabled),
        ]
    );
    m.reset(t0 + 62 * S);
    assert_eq!(m.state(t0 + 62 * S), State::Closed);
    let counts = m.transition_counts();
    assert!(counts.contains(&(State::Disabled, State::Closed, 1)));
    assert!(counts.contains(&(State::Closed, State::ForcedOpen, 1)));
}

#[test]
fn reset_really_resets() {
    let t0 = Instant::now();
    let config = CircuitBreakerConfig {
        backoff_multiplier: 2.0,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    let mut m = machine_at(config, t0);
    trip(&mut m, t0);
    let probe = admit(&mut m, t0 + 10 * S);
    finish(&mut m, probe, Outcome::Failure, t0 + 10 * S);
    assert_eq!((m.streak(), m.failed_probes()), (1, 1));
    let t1 = t0 + 11 * S;
    m.reset(t1);
    assert_eq!(m.state(t1), State::Closed);
    assert_eq!((m.streak(), m.failed_probes()), (0, 0));
    assert_eq!(m.window_counts(t1).map(|c| c.calls), Some(0));
    // Nine failures: a window that kept the old ones would trip.
    call_times(&mut m, 9, Outcome::Failure, t1);
    assert_eq!(m.state(t1), State::Closed);
    // Reset while closed: calls in flight become stale, the window is emptied.
    let in_flight = admit(&mut m, t1);
    m.reset(t1);
    assert_eq!(m.window_counts(t1).map(|c| c.calls), Some(0));
    assert_eq!(
        finish(&mut m, in_flight, Outcome::Failure, t1),
        Recorded::Stale
    );
    assert_eq!(m.window_counts(t1).map(|c| c.calls), Some(0));
    call(&mut m, Outcome::Failure, t1);
    trip(&mut m, t1);
    assert_eq!(m.current_open_for(), Some(10 * S), "backoff forgotten");
}

#[test]
fn reconfigure_keeps_the_state_and_revert_restores_the_built_configuration() {
    let t0 = Instant::now();
    let built = CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    let mut m = machine_at(built.clone(), t0);
    call_times(&mut m, 4, Outcome::Failure, t0);
    // Same window shape, lower bar: the 4 failures are kept and the next one trips.
    let lower = CircuitBreakerConfig {
        policy: TripPolicy::CountWindow {
            size: 10,
            min_calls: 5,
            failure_rate: 0.5,
        },
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    m.reconfigure(&lower, t0).unwrap();
    assert_eq!(m.window_counts(t0).map(|c| c.failures), Some(4));
    call(&mut m, Outcome::Failure, t0);
    assert_eq!(m.state(t0), State::Open);
    // An invalid configuration is refused and changes nothing.
    let bad = CircuitBreakerConfig {
        half_open_max: 0,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    assert_eq!(
        m.reconfigure(&bad, t0).unwrap_err().field(),
        "half_open_max"
    );
    assert_eq!(m.state(t0), State::Open);
    // A new window shape starts a new window; the open state is kept.
    m.reconfigure(&consecutive(2), t0).unwrap();
    assert_eq!(m.state(t0), State::Open);
    assert_eq!(m.consecutive_failures(), Some(0));
    m.revert(t0);
    assert_eq!(m.config(), &built);
    assert_eq!(m.state(t0), State::Open);
    // Reverting twice is harmless.
    m.revert(t0);
    assert_eq!(m.config(), &built);
}

#[test]
fn the_configuration_in_force_is_the_one_given_to_the_last_nanosecond() {
    let t0 = Instant::now();
    let configs = [
        CircuitBreakerConfig {
            policy: TripPolicy::TimeWindow {
                window: 60 * S,
                bucket: ms(500),
                min_calls: 7,
                failure_rate: 0.3,
            },
            slow_call: Some(SlowCallConfig {
                threshold: Duration::from_nanos(300_000_001),
                rate: 0.9,
            }),
            ramp: Some(RampConfig {
                duration: 30 * S,
                start_share: 0.0,
            }),
            backoff_multiplier: 1.5,
            jitter: Some(0.25),
            ..CircuitBreakerConfig::default()
        },
        consecutive(3),
        CircuitBreakerConfig {
            jitter: Some(0.0),
            ..CircuitBreakerConfig::default()
        },
    ];
    let mut m = machine_at(configs[0].clone(), t0);
    assert_eq!(m.config(), &configs[0]);
    for c in &configs[1..] {
        m.reconfigure(c, t0).unwrap();
        assert_eq!(m.config(), c);
    }
    m.revert(t0);
    assert_eq!(m.config(), &configs[0]);
}

#[test]
fn reconfiguring_half_open_max_applies_to_the_next_admissions() {
    let (mut m, _, t1, a) = probing(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    rejected(&mut m, t1);
    let wider = CircuitBreakerConfig {
        half_open_max: 3,
        probes_to_close: 3,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    m.reconfigure(&wider, t1).unwrap();
    let b = admit(&mut m, t1);
    let c = admit(&mut m, t1);
    rejected(&mut m, t1);
    m.reconfigure(
        &CircuitBreakerConfig {
            jitter: Some(0.0),
            ..CircuitBreakerConfig::default()
        },
        t1,
    )
    .unwrap();
    // Back to one probe: the three in flight finish normally, no new one is admitted.
    for t in [a, b] {
        finish(&mut m, t, Outcome::Ignore, t1);
        rejected(&mut m, t1);
    }
    finish(&mut m, c, Outcome::Success, t1);
    assert_eq!(m.state(t1), State::Closed);
}

#[test]
fn time_spent_open_and_failed_probes_show_a_breaker_stuck_open() {
    let (mut m, t0) = tripped(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    let mut now = t0;
    for _ in 0..3 {
        now += 10 * S;
        let probe = admit(&mut m, now);
        finish(&mut m, probe, Outcome::Failure, now);
    }
    assert_eq!(m.failed_probes(), 3);
    assert_eq!(m.open_spell(now + 5 * S), Some(35 * S));
    assert_eq!(m.state(now), State::Open);
    now += 10 * S;
    let probe = admit(&mut m, now);
    finish(&mut m, probe, Outcome::Success, now);
    assert_eq!(m.open_spell(now), None);
    assert_eq!(m.open_total(now + 60 * S), 40 * S);
    assert!(m
        .transition_counts()
        .contains(&(State::HalfOpen, State::Open, 3)));
}

#[test]
fn batched_successes_are_folded_like_single_ones() {
    let (mut m, t0) = fresh(CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    call_times(&mut m, 4, Outcome::Failure, t0);
    m.record_successes(m.epoch(), 1000, t0);
    assert_eq!(
        m.window_counts(t0).map(|c| (c.calls, c.failures)),
        Some((10, 0))
    );
    assert_eq!(m.tally().successes, 1000);
    m.record_successes(m.epoch().wrapping_add(1), 5, t0);
    assert_eq!(m.tally().stale, 5);
    assert_eq!(m.window_counts(t0).map(|c| c.calls), Some(10));
}

// ----- schedules -----------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// A caller asks to go through.
    Acquire,
    /// The i-th outstanding call finishes.
    Complete(usize, Outcome),
    /// The i-th outstanding call is dropped.
    Drop(usize),
    /// Time passes.
    Advance(u64),
    /// An operator changes the number of probes allowed.
    Reconfigure(u32),
}

fn op() -> impl Strategy<Value = Op> {
    let outcome = prop_oneof![
        Just(Outcome::Success),
        Just(Outcome::Failure),
        Just(Outcome::Ignore)
    ];
    prop_oneof![
        5 => Just(Op::Acquire),
        4 => (any::<usize>(), outcome).prop_map(|(i, o)| Op::Complete(i, o)),
        2 => any::<usize>().prop_map(Op::Drop),
        3 => (0u64..6_000).prop_map(Op::Advance),
        1 => (1u32..4).prop_map(Op::Reconfigure),
    ]
}

/// A small breaker for randomized schedules (also used by the shared breaker's).
pub(crate) fn schedule_config(half_open_max: u32) -> CircuitBreakerConfig {
    CircuitBreakerConfig {
        policy: TripPolicy::CountWindow {
            size: 4,
            min_calls: 2,
            failure_rate: 0.5,
        },
        open_for: 2 * S,
        half_open_max,
        probes_to_close: 2,
        half_open_timeout: 3 * S,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    }
}

proptest! {
    /// Half-open never has more probes in flight than allowed, no slot leaks, and an
    /// outcome from an older epoch never changes the state.
    #[test]
    fn probes_stay_bounded_and_stale_outcomes_change_nothing(
        max in 1u32..4,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut m = machine_at(schedule_config(max), t0);
        let mut max = max;
        let mut outstanding: Vec<Ticket> = Vec::new();
        for op in ops {
            match op {
                Op::Acquire => {
                    m.advance(now);
                    let before = m.probes_in_flight();
                    if let Admission::Admitted(t) = m.acquire(now) {
                        if t.probe.is_some() {
                            prop_assert!(m.probes_in_flight() <= max, "{} probes > {max}", m.probes_in_flight());
                            prop_assert!(before < max);
                        }
                        outstanding.push(t);
                    }
                }
                Op::Complete(i, outcome) if !outstanding.is_empty() => {
                    let t = outstanding.swap_remove(i % outstanding.len());
                    m.advance(now);
                    let (state, epoch) = (m.state(now), m.epoch());
                    let recorded = finish(&mut m, t, outcome, now);
                    if t.epoch != epoch {
                        prop_assert_eq!(recorded, Recorded::Stale);
                        prop_assert_eq!((m.state(now), m.epoch()), (state, epoch));
                    }
                }
                Op::Drop(i) if !outstanding.is_empty() => {
                    let t = outstanding.swap_remove(i % outstanding.len());
                    m.advance(now);
                    let (state, epoch) = (m.state(now), m.epoch());
                    m.cancel(t, now);
                    prop_assert_eq!((m.state(now), m.epoch()), (state, epoch));
                }
                Op::Advance(d) => now += ms(d),
                Op::Reconfigure(n) => {
                    m.reconfigure(&schedule_config(n), now).unwrap();
                    max = n;
                }
                Op::Complete(..) | Op::Drop(_) => {}
            }
            // No leak: the machine's count is exactly the current probes still held.
            let held = outstanding
                .iter()
                .filter(|t| t.probe.is_some() && t.epoch == m.epoch())
                .count() as u32;
            prop_assert_eq!(m.probes_in_flight(), held);
            let _ = m.take_transitions();
        }
    }

    /// Batching runs of successes (what the lock-free path does) leads to the same
    /// states and windows as recording them one at a time.
    #[test]
    fn batching_successes_is_equivalent(
        outcomes in proptest::collection::vec(prop_oneof![3 => Just(true), 1 => Just(false)], 0..200),
        consecutive_policy in any::<bool>(),
    ) {
        let t0 = Instant::now();
        let config = if consecutive_policy { consecutive(3) } else { CircuitBreakerConfig { jitter: Some(0.0), ..CircuitBreakerConfig::default() } };
        let mut one = machine_at(config.clone(), t0);
        let mut batched = machine_at(config, t0);
        let mut pending = 0u64;
        for ok in outcomes {
            if one.state(t0) != State::Closed {
                break;
            }
            call(&mut one, if ok { Outcome::Success } else { Outcome::Failure }, t0);
            if ok {
                let _ = admit(&mut batched, t0);
                pending += 1;
            } else {
                batched.record_successes(batched.epoch(), pending, t0);
                pending = 0;
                call(&mut batched, Outcome::Failure, t0);
            }
            prop_assert_eq!(one.state(t0), batched.state(t0));
        }
        batched.record_successes(batched.epoch(), pending, t0);
        prop_assert_eq!(one.window_counts(t0), batched.window_counts(t0));
        prop_assert_eq!(one.consecutive_failures(), batched.consecutive_failures());
        prop_assert_eq!(one.tally().successes, batched.tally().successes);
    }
}

/// Transitions with their rehearsal mark.
fn marked(m: &mut Driven) -> Vec<(State, State, bool)> {
    m.take_transitions()
        .map(|t| (t.from, t.to, t.rehearsal))
        .collect()
}

fn rehearsed(m: &mut Driven, t: Ticket, outcome: Outcome, now: Instant) -> Recorded {
    m.complete(t, Report::of(outcome).rehearsed(), now)
}

#[test]
fn a_trip_is_a_rehearsal_only_when_the_outcome_that_completed_it_was_injected() {
    // Two real failures, then an injected one completes the trip: marked.
    let (mut m, t0) = fresh(consecutive(3));
    call_times(&mut m, 2, Outcome::Failure, t0);
    let t = admit(&mut m, t0);
    rehearsed(&mut m, t, Outcome::Failure, t0);
    assert_eq!(marked(&mut m), vec![(State::Closed, State::Open, true)]);

    // Two injected failures, then a real one completes it: an incident, not marked.
    let (mut m, t0) = fresh(consecutive(3));
    for _ in 0..2 {
        let t = admit(&mut m, t0);
        rehearsed(&mut m, t, Outcome::Failure, t0);
    }
    call(&mut m, Outcome::Failure, t0);
    assert_eq!(marked(&mut m), vec![(State::Closed, State::Open, false)]);
}

#[test]
fn a_probe_verdict_is_marked_when_the_probe_was_injected() {
    let config = || CircuitBreakerConfig {
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    // The open → half-open step is time's, never a rehearsal's.
    let (mut m, _, t1, probe) = probing(config());
    assert_eq!(
        marked(&mut m),
        vec![
            (State::Closed, State::Open, false),
            (State::Open, State::HalfOpen, false)
        ]
    );
    rehearsed(&mut m, probe, Outcome::Failure, t1);
    assert_eq!(marked(&mut m), vec![(State::HalfOpen, State::Open, true)]);

    let (mut m, _, t1, probe) = probing(config());
    let _ = marked(&mut m);
    assert_eq!(
        rehearsed(&mut m, probe, Outcome::Success, t1),
        Recorded::Probe
    );
    assert_eq!(marked(&mut m), vec![(State::HalfOpen, State::Closed, true)]);
}

#[test]
fn what_time_changed_before_an_injected_outcome_arrived_is_not_marked() {
    let (mut m, t0) = fresh(CircuitBreakerConfig {
        half_open_timeout: 2 * S,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    });
    let ordinary = admit(&mut m, t0);
    trip(&mut m, t0);
    let t1 = t0 + 10 * S;
    let _stuck = admit(&mut m, t1);
    let _ = marked(&mut m);
    // The probe's half-open timeout passed before this injected result came in:
    // the probe timed out on time's account, and the late result is stale.
    assert_eq!(
        rehearsed(&mut m, ordinary, Outcome::Failure, t1 + 3 * S),
        Recorded::Stale
    );
    assert_eq!(marked(&mut m), vec![(State::HalfOpen, State::Open, false)]);
}
