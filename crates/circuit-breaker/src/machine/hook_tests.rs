//! The coordinator hooks (probe gate, verdicts), driven by explicit instants.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall_core::{OpenCause, Outcome, SeededRandom, MAX_DURATION};
use tokio::time::Instant;

use super::*;
use crate::config::{CircuitBreakerConfig, RampConfig, TripPolicy};
use crate::hooks::{ProbeDecision, ProbeGate, ProbeRequest};
use crate::state::{Driven, Mode};

const S: Duration = Duration::from_secs(1);

fn machine_at(config: &CircuitBreakerConfig, t0: Instant) -> Driven {
    Driven::new(config, Some(Box::new(SeededRandom::new(7))), t0).unwrap()
}

fn consecutive(threshold: u32) -> CircuitBreakerConfig {
    CircuitBreakerConfig {
        policy: TripPolicy::ConsecutiveFailures { threshold },
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    }
}

fn call(m: &mut Driven, outcome: Outcome, now: Instant) {
    match m.acquire(now) {
        Admission::Admitted(t) => {
            m.complete(t, Report::of(outcome), now);
        }
        Admission::Rejected(r, _) => panic!("rejected, retry after {r:?}"),
        Admission::Shadow(..) => panic!("shadow mode is off"),
    }
}

/// Trips a breaker with a consecutive(2) policy at `now`.
fn trip(m: &mut Driven, now: Instant) {
    call(m, Outcome::Failure, now);
    call(m, Outcome::Failure, now);
    assert_eq!(m.state(now), State::Open);
}

/// A gate that counts the questions and answers with `hold_ms` (0: allow).
#[derive(Default)]
struct TestGate {
    asked: AtomicU32,
    hold_ms: AtomicU64,
    last_trip_epoch: AtomicU32,
}

impl TestGate {
    fn asked(&self) -> u32 {
        self.asked.load(Ordering::SeqCst)
    }
    fn hold(&self, d: Duration) {
        self.hold_ms.store(d.as_millis() as u64, Ordering::SeqCst);
    }
}

impl ProbeGate for TestGate {
    fn check(&self, probe: &ProbeRequest) -> ProbeDecision {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.last_trip_epoch
            .store(probe.trip_epoch, Ordering::SeqCst);
        match self.hold_ms.load(Ordering::SeqCst) {
            0 => ProbeDecision::Allow,
            ms => ProbeDecision::HoldOff(Duration::from_millis(ms)),
        }
    }
}

fn gated(config: &CircuitBreakerConfig, t0: Instant) -> (Driven, Arc<TestGate>) {
    let mut m = machine_at(config, t0);
    let gate = Arc::new(TestGate::default());
    assert!(m.set_gate(Some(gate.clone())).is_none());
    (m, gate)
}

#[test]
fn the_gate_is_asked_only_where_a_probe_would_be_admitted() {
    let t0 = Instant::now();
    let (mut m, gate) = gated(&consecutive(2), t0);
    for _ in 0..100 {
        call(&mut m, Outcome::Success, t0);
    }
    assert!(!m.would_reject(t0));
    trip(&mut m, t0);
    // Open, interval not over: rejected without asking.
    assert_eq!(
        m.acquire(t0 + 9 * S),
        Admission::Rejected(S, OpenCause::Open)
    );
    assert!(m.would_reject(t0 + 9 * S));
    assert_eq!(gate.asked(), 0);
    // Interval over: the first call asks, and (allowed) becomes the probe.
    let Admission::Admitted(probe) = m.acquire(t0 + 10 * S) else {
        panic!("the allowed probe was rejected");
    };
    assert!(probe.probe.is_some());
    assert_eq!(gate.asked(), 1);
    // Every probe slot taken: turned away without asking.
    assert!(matches!(
        m.acquire(t0 + 10 * S),
        Admission::Rejected(_, OpenCause::ProbeSlotsFull)
    ));
    assert_eq!(gate.asked(), 1);
    m.complete(probe, Report::of(Outcome::Success), t0 + 10 * S);
    assert_eq!(m.state(t0 + 10 * S), State::Closed);
    call(&mut m, Outcome::Success, t0 + 11 * S);
    assert_eq!(gate.asked(), 1);
}

#[test]
fn a_held_off_probe_is_rejected_with_the_gates_retry_after_until_the_hold_ends() {
    let t0 = Instant::now();
    let (mut m, gate) = gated(&consecutive(2), t0);
    trip(&mut m, t0);
    let trip_epoch = m.epoch();
    gate.hold(3 * S);
    let t1 = t0 + 10 * S;
    assert_eq!(m.acquire(t1), Admission::Rejected(3 * S, OpenCause::Open));
    assert_eq!(gate.asked(), 1);
    assert_eq!(gate.last_trip_epoch.load(Ordering::SeqCst), trip_epoch);
    // Still half-open (the interval did pass), but rejecting like an open breaker
    // until the hold ends, without asking again.
    assert_eq!(m.state(t1), State::HalfOpen);
    assert_eq!(m.mode(), Mode::Open);
    assert_eq!(m.reopen_at(), Some(t1 + 3 * S));
    assert_eq!(m.reported(t1 + S).until, Some(t1 + 3 * S));
    assert_eq!(
        m.acquire(t1 + S),
        Admission::Rejected(2 * S, OpenCause::Open)
    );
    assert!(m.would_reject(t1 + 2 * S));
    assert_eq!(gate.asked(), 1);
    assert_eq!(m.tally().short_circuited, 2);
    // The hold is over: asked again, and now allowed.
    gate.hold(Duration::ZERO);
    let Admission::Admitted(probe) = m.acquire(t1 + 3 * S) else {
        panic!("the allowed probe was rejected");
    };
    assert_eq!(gate.asked(), 2);
    assert_eq!(probe.probe, Some(0));
    // No transition came from holding: one trip, one open -> half-open.
    let moves: Vec<_> = m.take_transitions().map(|t| (t.from, t.to)).collect();
    assert_eq!(
        moves,
        [(State::Closed, State::Open), (State::Open, State::HalfOpen)]
    );
}

#[test]
fn recheck_forgets_the_hold_and_the_next_call_asks_again() {
    let t0 = Instant::now();
    let (mut m, gate) = gated(&consecutive(2), t0);
    trip(&mut m, t0);
    gate.hold(5 * S);
    let t1 = t0 + 10 * S;
    assert_eq!(m.acquire(t1), Admission::Rejected(5 * S, OpenCause::Open));
    let epoch = m.epoch();
    gate.hold(Duration::ZERO);
    m.recheck_gate();
    assert_eq!(m.mode(), Mode::Locked);
    assert_eq!(m.epoch(), epoch, "a recheck is no transition");
    assert!(matches!(m.acquire(t1 + S), Admission::Admitted(_)));
    assert_eq!(gate.asked(), 2);
}

#[test]
fn hold_offs_are_never_zero_and_never_past_the_longest_interval() {
    let t0 = Instant::now();
    let mut m = machine_at(&consecutive(2), t0);
    m.set_gate(Some(Arc::new(|_: &ProbeRequest| {
        ProbeDecision::HoldOff(Duration::ZERO)
    })));
    trip(&mut m, t0);
    let t1 = t0 + 10 * S;
    assert_eq!(
        m.acquire(t1),
        Admission::Rejected(Duration::from_millis(1), OpenCause::Open)
    );
    let previous = m.set_gate(Some(Arc::new(|_: &ProbeRequest| {
        ProbeDecision::HoldOff(Duration::MAX)
    })));
    assert!(previous.is_some());
    assert_eq!(
        m.acquire(t1 + S),
        Admission::Rejected(MAX_DURATION, OpenCause::Open)
    );
    assert_eq!(m.reopen_at(), Some(t1 + S + MAX_DURATION));
    // Removing the gate forgets its hold: the next call probes.
    assert!(m.set_gate(None).is_some());
    assert!(matches!(m.acquire(t1 + 2 * S), Admission::Admitted(_)));
}

#[test]
fn with_several_probe_slots_a_hold_while_one_is_in_flight_is_not_remembered() {
    let t0 = Instant::now();
    let config = CircuitBreakerConfig {
        half_open_max: 2,
        probes_to_close: 2,
        ..consecutive(2)
    };
    let (mut m, gate) = gated(&config, t0);
    trip(&mut m, t0);
    let t1 = t0 + 10 * S;
    let Admission::Admitted(first) = m.acquire(t1) else {
        panic!("the first probe was rejected");
    };
    gate.hold(2 * S);
    assert_eq!(m.acquire(t1), Admission::Rejected(2 * S, OpenCause::Open));
    // Not remembered: the probe in flight still finishes through the lock.
    assert_eq!(m.mode(), Mode::Locked);
    m.complete(first, Report::of(Outcome::Failure), t1);
    assert_eq!(m.state(t1), State::Open);
}

#[test]
fn the_trip_epoch_names_the_trip_through_failed_probes() {
    let t0 = Instant::now();
    let mut m = machine_at(&consecutive(2), t0);
    assert_eq!(m.trip_epoch(), None);
    trip(&mut m, t0);
    let trip = m.take_transitions().last().unwrap();
    assert_eq!(trip.to, State::Open);
    assert_eq!(m.trip_epoch(), Some(trip.epoch));
    // A failed probe reopens within the same trip.
    let t1 = t0 + 10 * S;
    call(&mut m, Outcome::Failure, t1);
    assert_eq!(m.state(t1), State::Open);
    assert!(m.epoch() > trip.epoch);
    assert_eq!(m.trip_epoch(), Some(trip.epoch));
    // Closed: no trip.
    call(&mut m, Outcome::Success, t1 + 10 * S);
    assert_eq!(m.trip_epoch(), None);
}

#[test]
fn a_close_verdict_leaves_open_through_the_ramp() {
    let t0 = Instant::now();
    let config = CircuitBreakerConfig {
        ramp: Some(RampConfig {
            duration: 10 * S,
            start_share: 0.25,
        }),
        ..consecutive(2)
    };
    let mut m = machine_at(&config, t0);
    trip(&mut m, t0);
    let trip_epoch = m.trip_epoch().unwrap();
    let _ = m.take_transitions().count();
    let t1 = t0 + 4 * S;
    assert_eq!(
        m.apply_verdict(Verdict::Close, trip_epoch, t1),
        VerdictOutcome::Applied
    );
    assert_eq!(m.state(t1), State::Closed);
    assert_eq!(m.ramp_share(t1), Some(0.25));
    assert_eq!(m.consecutive_failures(), Some(0));
    assert_eq!(m.failed_probes(), 0);
    let moves: Vec<_> = m
        .take_transitions()
        .map(|t| (t.from, t.to, t.cause, t.at))
        .collect();
    assert_eq!(
        moves,
        [(State::Open, State::Closed, Cause::VerdictClosed, t1)]
    );
    assert!(m
        .transition_counts()
        .contains(&(State::Open, State::Closed, 1)));
    // No local probe ran.
    assert_eq!(m.tally().probe_successes, 0);
    // Applied twice: the trip is over, so the second is stale.
    assert_eq!(
        m.apply_verdict(Verdict::Close, trip_epoch, t1),
        VerdictOutcome::Stale
    );
}

#[test]
fn a_reopen_verdict_restarts_the_interval_from_now_with_the_backoff() {
    let t0 = Instant::now();
    let config = CircuitBreakerConfig {
        backoff_multiplier: 2.0,
        max_open_for: 60 * S,
        ..consecutive(2)
    };
    let mut m = machine_at(&config, t0);
    trip(&mut m, t0);
    let trip_epoch = m.trip_epoch().unwrap();
    let t1 = t0 + 7 * S;
    assert_eq!(
        m.apply_verdict(Verdict::Reopen, trip_epoch, t1),
        VerdictOutcome::Applied
    );
    // Open again from t1, for 10 s × 2.
    assert_eq!(m.state(t1), State::Open);
    assert_eq!(m.reopen_at(), Some(t1 + 20 * S));
    assert_eq!(m.failed_probes(), 1);
    assert_eq!(m.streak(), 1);
    assert_eq!(m.tally().probe_failures, 0);
    assert_eq!(m.trip_epoch(), Some(trip_epoch));
    let last = m.take_transitions().last().unwrap();
    assert_eq!(
        (last.from, last.to, last.cause),
        (State::Open, State::Open, Cause::VerdictReopened)
    );

    // From half-open with a probe in flight: the probe becomes stale.
    let t2 = t1 + 20 * S;
    let Admission::Admitted(probe) = m.acquire(t2) else {
        panic!("no probe");
    };
    assert_eq!(
        m.apply_verdict(Verdict::Reopen, trip_epoch, t2),
        VerdictOutcome::Applied
    );
    assert_eq!(m.reopen_at(), Some(t2 + 40 * S));
    assert_eq!(
        m.complete(probe, Report::of(Outcome::Success), t2),
        Recorded::Stale
    );
    assert_eq!(m.state(t2), State::Open);
    assert_eq!(m.probes_in_flight(), 0);
}

#[test]
fn verdicts_about_another_trip_or_against_an_operator_change_nothing() {
    let t0 = Instant::now();
    let mut m = machine_at(&consecutive(2), t0);
    // Closed: nothing to apply to.
    assert_eq!(
        m.apply_verdict(Verdict::Reopen, 0, t0),
        VerdictOutcome::Stale
    );
    trip(&mut m, t0);
    let first_trip = m.trip_epoch().unwrap();
    // Close, trip again: a verdict about the first trip is stale.
    call(&mut m, Outcome::Success, t0 + 10 * S);
    trip(&mut m, t0 + 11 * S);
    let second_trip = m.trip_epoch().unwrap();
    assert_ne!(first_trip, second_trip);
    let epoch = m.epoch();
    assert_eq!(
        m.apply_verdict(Verdict::Close, first_trip, t0 + 12 * S),
        VerdictOutcome::Stale
    );
    assert_eq!(
        m.apply_verdict(Verdict::Reopen, first_trip, t0 + 12 * S),
        VerdictOutcome::Stale
    );
    assert_eq!((m.state(t0 + 12 * S), m.epoch()), (State::Open, epoch));
    // Operators win.
    m.force_open(t0 + 12 * S);
    assert_eq!(
        m.apply_verdict(Verdict::Close, second_trip, t0 + 12 * S),
        VerdictOutcome::Overridden
    );
    assert_eq!(m.state(t0 + 12 * S), State::ForcedOpen);
    m.disable(t0 + 12 * S);
    assert_eq!(
        m.apply_verdict(Verdict::Reopen, second_trip, t0 + 12 * S),
        VerdictOutcome::Overridden
    );
    assert_eq!(m.state(t0 + 12 * S), State::Disabled);
}

#[test]
fn peers_trip_a_closed_breaker_but_not_an_open_or_forced_one() {
    let t0 = Instant::now();
    let mut m = machine_at(&consecutive(2), t0);
    let _ = m.take_transitions().count();
    assert_eq!(m.trip_with_peers(t0), VerdictOutcome::Applied);
    assert_eq!(m.state(t0), State::Open);
    // A trip of its own kind: a trip epoch verdicts can name, the interval from now.
    let trip_epoch = m.trip_epoch().unwrap();
    assert_eq!(trip_epoch, m.epoch());
    assert_eq!(m.reopen_at(), Some(t0 + 10 * S));
    let moves: Vec<_> = m
        .take_transitions()
        .map(|t| (t.from, t.to, t.cause))
        .collect();
    assert_eq!(moves, [(State::Closed, State::Open, Cause::PeersTripped)]);
    // Already in a trip: nothing changes, the interval is not restarted.
    assert_eq!(m.trip_with_peers(t0 + 5 * S), VerdictOutcome::Stale);
    assert_eq!(m.reopen_at(), Some(t0 + 10 * S));
    // Half-open is in the trip too.
    assert_eq!(m.state(t0 + 11 * S), State::HalfOpen);
    assert_eq!(m.trip_with_peers(t0 + 11 * S), VerdictOutcome::Stale);
    assert_eq!(m.trip_epoch(), Some(trip_epoch));
    // A verdict about it closes it as it would any trip.
    assert_eq!(
        m.apply_verdict(Verdict::Close, trip_epoch, t0 + 11 * S),
        VerdictOutcome::Applied
    );
    // Operators win.
    m.force_closed(t0 + 12 * S);
    assert_eq!(m.trip_with_peers(t0 + 12 * S), VerdictOutcome::Overridden);
    assert_eq!(m.state(t0 + 12 * S), State::ForcedClosed);
    m.disable(t0 + 12 * S);
    assert_eq!(m.trip_with_peers(t0 + 12 * S), VerdictOutcome::Overridden);
}

mod props {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire,
        Complete(usize, bool),
        Drop(usize),
        Advance(u64),
        Hold(u64),
        Recheck,
        Verdict(bool, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => Just(Op::Acquire),
            4 => (any::<usize>(), any::<bool>()).prop_map(|(i, ok)| Op::Complete(i, ok)),
            1 => any::<usize>().prop_map(Op::Drop),
            4 => (0u64..6_000).prop_map(Op::Advance),
            2 => (0u64..4_000).prop_map(Op::Hold),
            1 => Just(Op::Recheck),
            1 => (any::<bool>(), any::<bool>()).prop_map(|(close, current)| Op::Verdict(close, current)),
        ]
    }

    proptest! {
        /// With a gate and verdicts in play: the gate is asked only in half-open with
        /// a free slot, a hold is honoured, probes stay bounded, verdicts apply only
        /// to the current trip, and every rejection says when to come back.
        #[test]
        fn the_hooks_keep_the_machine_invariants(
            max in 1u32..3,
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let t0 = Instant::now();
            let mut now = t0;
            let config = CircuitBreakerConfig {
                half_open_max: max,
                half_open_timeout: 3 * S,
                ramp: Some(RampConfig { duration: 2 * S, start_share: 0.5 }),
                backoff_multiplier: 1.5,
                max_open_for: 40 * S,
                ..consecutive(2)
            };
            let (mut m, gate) = gated(&config, t0);
            let mut held: Vec<Ticket> = Vec::new();
            for op in ops {
                match op {
                    Op::Acquire => {
                        m.advance(now);
                        let before = (m.state(now), m.probes_in_flight(), gate.asked());
                        let hold = m.reopen_at().filter(|_| before.0 == State::HalfOpen);
                        match m.acquire(now) {
                            Admission::Admitted(t) => {
                                if t.probe.is_some() {
                                    prop_assert_eq!(before.0, State::HalfOpen);
                                    prop_assert!(m.probes_in_flight() <= max);
                                    prop_assert_eq!(gate.asked(), before.2 + 1);
                                    prop_assert!(hold.is_none_or(|h| now >= h));
                                }
                                held.push(t);
                            }
                            Admission::Rejected(r, _) => prop_assert!(r > Duration::ZERO),
                            Admission::Shadow(..) => prop_assert!(false, "shadow mode is off"),
                        }
                        if before.0 != State::HalfOpen || before.1 >= max || hold.is_some_and(|h| now < h) {
                            prop_assert_eq!(gate.asked(), before.2, "asked outside a free half-open slot");
                        }
                    }
                    Op::Complete(i, ok) if !held.is_empty() => {
                        let t = held.swap_remove(i % held.len());
                        let outcome = if ok { Outcome::Success } else { Outcome::Failure };
                        m.complete(t, Report::of(outcome), now);
                    }
                    Op::Drop(i) if !held.is_empty() => {
                        let t = held.swap_remove(i % held.len());
                        m.cancel(t, now);
                    }
                    Op::Advance(ms) => now += Duration::from_millis(ms),
                    Op::Hold(ms) => gate.hold(Duration::from_millis(ms)),
                    Op::Recheck => m.recheck_gate(),
                    Op::Verdict(close, current) => {
                        m.advance(now);
                        let trip = m.trip_epoch();
                        let state = m.state(now);
                        let asked_for = match (trip, current) {
                            (Some(e), true) => e,
                            (Some(e), false) => e.wrapping_sub(1),
                            (None, _) => m.epoch(),
                        };
                        let verdict = if close { Verdict::Close } else { Verdict::Reopen };
                        let outcome = m.apply_verdict(verdict, asked_for, now);
                        let expected = if trip == Some(asked_for) { VerdictOutcome::Applied } else { VerdictOutcome::Stale };
                        prop_assert_eq!(outcome, expected);
                        if outcome == VerdictOutcome::Applied {
                            let want = if close { State::Closed } else { State::Open };
                            prop_assert_eq!(m.state(now), want);
                            prop_assert_eq!(m.probes_in_flight(), 0);
                        } else {
                            prop_assert_eq!(m.state(now), state);
                        }
                    }
                    Op::Complete(..) | Op::Drop(_) => {}
                }
                // The lock-free view agrees with the machine.
                if m.mode() == Mode::Open {
                    prop_assert!(m.reopen_at().is_some());
                }
                let in_flight = m.probes_in_flight();
                let epoch = m.epoch();
                let probes_held = held.iter().filter(|t| t.probe.is_some() && t.epoch == epoch).count() as u32;
                prop_assert_eq!(in_flight, probes_held);
            }
        }
    }
}
