//! The long-stream rule: a probe whose response looked healthy and whose body is
//! still streaming at its half-open timeout is judged a success then, once.

use std::time::Duration;

use seawall_core::{Outcome, SeededRandom};
use tokio::time::Instant;

use super::*;
use crate::config::CircuitBreakerConfig;
use crate::state::Driven;

const S: Duration = Duration::from_secs(1);

fn config(half_open_max: u32, probes_to_close: u32) -> CircuitBreakerConfig {
    CircuitBreakerConfig {
        half_open_max,
        probes_to_close,
        half_open_timeout: 2 * S,
        open_for: 10 * S,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    }
}

/// A machine tripped at `t0` (10 failures), so half-open from `t0 + 10 s`.
fn tripped(config: &CircuitBreakerConfig, t0: Instant) -> Driven {
    let mut m = Driven::new(config, Some(Box::new(SeededRandom::new(7))), t0).unwrap();
    for _ in 0..10 {
        if let Admission::Admitted(t) = m.acquire(t0) {
            m.complete(t, Report::of(Outcome::Failure), t0);
        }
    }
    assert_eq!(m.state(t0), State::Open);
    let _ = m.take_transitions().count();
    m
}

fn admit(m: &mut Driven, now: Instant) -> Ticket {
    match m.acquire(now) {
        Admission::Admitted(t) => t,
        Admission::Rejected(r, cause) => panic!("rejected ({cause:?}), retry after {r:?}"),
        Admission::Shadow(..) => panic!("shadow mode is off"),
    }
}

fn transitions(m: &mut Driven) -> Vec<(State, State, Cause, Instant)> {
    m.take_transitions()
        .map(|t| (t.from, t.to, t.cause, t.at))
        .collect()
}

#[test]
fn a_probe_still_streaming_at_its_half_open_timeout_closes_and_its_end_changes_nothing() {
    let t0 = Instant::now();
    let mut m = tripped(&config(1, 1), t0);
    let t1 = t0 + 10 * S;
    let probe = admit(&mut m, t1);
    m.probe_streaming(probe, t1 + Duration::from_millis(40));
    let _ = transitions(&mut m);
    let due = t1 + 2 * S;
    assert_eq!(m.state(due - Duration::from_nanos(1)), State::HalfOpen);
    // Reported closed at the timeout, before any call makes it so...
    assert_eq!(m.state(due), State::Closed);
    m.advance(due + S);
    // ...and made at the timeout's instant, as a probe success, not a timeout.
    assert_eq!(
        transitions(&mut m),
        vec![(State::HalfOpen, State::Closed, Cause::ProbesSucceeded, due)]
    );
    let tally = m.tally();
    assert_eq!((tally.probe_successes, tally.probe_failures), (1, 0));
    assert_eq!(tally.probe_timeouts, 0);
    assert_eq!(m.streams_judged(), 1);
    // The stream fails long after: counted once, as stale, and the breaker stays closed.
    let failures = tally.failures;
    assert_eq!(
        m.complete(probe, Report::of(Outcome::Failure), due + 30 * S),
        Recorded::Stale
    );
    assert_eq!(m.state(due + 30 * S), State::Closed);
    assert_eq!(m.tally().failures, failures + 1);
    assert_eq!(m.tally().stale, 1);
    assert_eq!(m.tally().probe_failures, 0, "the verdict was given once");
    assert_eq!(m.window_counts(due + 30 * S).map(|c| c.calls), Some(0));
}

#[test]
fn a_probe_that_is_not_streaming_still_times_out_and_a_stream_that_ends_first_is_judged_by_its_end()
{
    let t0 = Instant::now();
    let t1 = t0 + 10 * S;
    let due = t1 + 2 * S;

    let mut waiting = tripped(&config(1, 1), t0);
    let _probe = admit(&mut waiting, t1);
    assert_eq!(waiting.state(due), State::Open);
    waiting.advance(due);
    assert_eq!(waiting.tally().probe_timeouts, 1);

    let mut failing = tripped(&config(1, 1), t0);
    let probe = admit(&mut failing, t1);
    failing.probe_streaming(probe, t1);
    let _ = transitions(&mut failing);
    assert_eq!(
        failing.complete(probe, Report::of(Outcome::Failure), t1 + S),
        Recorded::Probe
    );
    assert_eq!(
        transitions(&mut failing),
        vec![(State::HalfOpen, State::Open, Cause::ProbeFailed, t1 + S)]
    );
    assert_eq!(failing.streams_judged(), 0);
}

#[test]
fn headers_after_the_half_open_timeout_are_too_late_to_count_as_streaming() {
    let t0 = Instant::now();
    let mut m = tripped(&config(1, 1), t0);
    let t1 = t0 + 10 * S;
    let probe = admit(&mut m, t1);
    let late = t1 + 2 * S + Duration::from_millis(1);
    m.probe_streaming(probe, late);
    assert_eq!(m.state(late), State::Open);
    assert_eq!(m.tally().probe_timeouts, 1);
    assert_eq!(m.streams_judged(), 0);
    assert_eq!(
        m.complete(probe, Report::of(Outcome::Success), late),
        Recorded::Stale
    );
}

#[test]
fn a_judged_stream_frees_its_probe_slot_but_not_its_index_until_it_ends() {
    let t0 = Instant::now();
    // Two successful probes close; one at a time.
    let mut m = tripped(&config(1, 2), t0);
    let t1 = t0 + 10 * S;
    let first = admit(&mut m, t1);
    m.probe_streaming(first, t1);
    let due = t1 + 2 * S;
    m.advance(due);
    assert_eq!(m.state(due), State::HalfOpen);
    assert_eq!(m.probes_in_flight(), 0);
    assert_eq!(m.tally().probe_successes, 1);
    // The next probe goes out while the first stream is still open, on another slot.
    let second = admit(&mut m, due);
    assert_ne!(second.probe, first.probe);
    assert_eq!(second.epoch, first.epoch);
    // The first stream ends: stale, it neither closes nor frees the second's slot.
    assert_eq!(
        m.complete(first, Report::of(Outcome::Success), due + S),
        Recorded::Stale
    );
    assert_eq!(m.state(due + S), State::HalfOpen);
    assert_eq!(m.probes_in_flight(), 1);
    assert_eq!(m.tally().probe_successes, 1);
    assert_eq!(
        m.complete(second, Report::of(Outcome::Success), due + S),
        Recorded::Probe
    );
    assert_eq!(m.state(due + S), State::Closed);

    // A judged stream that is dropped frees its index too; the next probe reuses it.
    let mut n = tripped(&config(1, 2), t0);
    let first = admit(&mut n, t1);
    n.probe_streaming(first, t1);
    n.advance(due);
    n.cancel(first, due);
    assert_eq!(n.tally().cancelled, 1);
    let next = admit(&mut n, due);
    assert_eq!(next.probe, first.probe);
    assert_eq!(n.probes_in_flight(), 1);
}

#[test]
fn probes_due_together_are_judged_in_the_order_of_their_timeouts() {
    let t0 = Instant::now();
    let t1 = t0 + 10 * S;

    // The stream started first: judged a success; then the waiting probe times out.
    let mut m = tripped(&config(2, 2), t0);
    let stream = admit(&mut m, t1);
    m.probe_streaming(stream, t1);
    let _waiting = admit(&mut m, t1 + S);
    let _ = transitions(&mut m);
    let late = t1 + 5 * S;
    assert_eq!(m.state(late), State::Open);
    m.advance(late);
    assert_eq!(
        transitions(&mut m),
        vec![(
            State::HalfOpen,
            State::Open,
            Cause::ProbeTimedOut,
            t1 + 3 * S
        )]
    );
    assert_eq!(m.tally().probe_successes, 1);
    assert_eq!(m.tally().probe_timeouts, 1);

    // The waiting probe started first: its timeout reopens before the stream is judged.
    let mut n = tripped(&config(2, 1), t0);
    let _waiting = admit(&mut n, t1);
    let stream = admit(&mut n, t1 + S);
    n.probe_streaming(stream, t1 + S);
    let _ = transitions(&mut n);
    assert_eq!(n.state(late), State::Open);
    n.advance(late);
    assert_eq!(
        transitions(&mut n),
        vec![(
            State::HalfOpen,
            State::Open,
            Cause::ProbeTimedOut,
            t1 + 2 * S
        )]
    );
    assert_eq!(n.streams_judged(), 0);

    // Two streams due together, two successes needed: both judged, in one step.
    let mut both = tripped(&config(2, 2), t0);
    for at in [t1, t1 + S] {
        let t = admit(&mut both, at);
        both.probe_streaming(t, at);
    }
    let _ = transitions(&mut both);
    assert_eq!(both.state(late), State::Closed);
    both.advance(late);
    assert_eq!(
        transitions(&mut both),
        vec![(
            State::HalfOpen,
            State::Closed,
            Cause::ProbesSucceeded,
            t1 + 3 * S
        )]
    );
    assert_eq!(both.streams_judged(), 2);
}

#[test]
fn an_ordinary_call_or_a_stale_ticket_marked_streaming_changes_nothing() {
    let t0 = Instant::now();
    let mut m = tripped(&config(1, 1), t0);
    let old = Ticket::normal(m.epoch().wrapping_sub(1));
    m.probe_streaming(old, t0);
    let t1 = t0 + 10 * S;
    let probe = admit(&mut m, t1);
    m.probe_streaming(
        Ticket {
            epoch: probe.epoch.wrapping_sub(1),
            ..probe
        },
        t1,
    );
    assert_eq!(m.state(t1 + 2 * S), State::Open, "not marked: it times out");
}

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    /// The response of the i-th outstanding call arrived healthy; its body streams.
    Streaming(usize),
    Complete(usize, Outcome),
    Drop(usize),
    Advance(u64),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let outcome = prop_oneof![
        Just(Outcome::Success),
        Just(Outcome::Failure),
        Just(Outcome::Ignore)
    ];
    prop_oneof![
        4 => Just(Op::Acquire),
        3 => any::<usize>().prop_map(Op::Streaming),
        3 => (any::<usize>(), outcome).prop_map(|(i, o)| Op::Complete(i, o)),
        1 => any::<usize>().prop_map(Op::Drop),
        3 => (0u64..3_000).prop_map(Op::Advance),
    ]
}

proptest::proptest! {
    /// With streams marked at random: never more probes in flight than allowed;
    /// what `state` reports is what the next call finds; each probe gets at most
    /// one verdict; and once every call has ended, no slot is left taken.
    #[test]
    fn streaming_probes_keep_the_probe_invariants(
        max in 1u32..4,
        to_close in 1u32..3,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let t0 = Instant::now();
        let mut now = t0;
        let config = CircuitBreakerConfig {
            policy: crate::config::TripPolicy::ConsecutiveFailures { threshold: 2 },
            ..config(max, to_close)
        };
        let mut m = Driven::new(&config, Some(Box::new(SeededRandom::new(3))), t0).unwrap();
        let mut outstanding: Vec<Ticket> = Vec::new();
        let mut probes_admitted = 0u64;
        for op in ops {
            match op {
                Op::Acquire => {
                    if let Admission::Admitted(t) = m.acquire(now) {
                        probes_admitted += u64::from(t.probe.is_some());
                        outstanding.push(t);
                    }
                }
                Op::Streaming(i) if !outstanding.is_empty() => {
                    let t = outstanding[i % outstanding.len()];
                    m.probe_streaming(t, now);
                }
                Op::Complete(i, outcome) if !outstanding.is_empty() => {
                    let t = outstanding.swap_remove(i % outstanding.len());
                    m.complete(t, Report::of(outcome), now);
                }
                Op::Drop(i) if !outstanding.is_empty() => {
                    let t = outstanding.swap_remove(i % outstanding.len());
                    m.cancel(t, now);
                }
                Op::Advance(d) => {
                    now += Duration::from_millis(d);
                    let reported = m.state(now);
                    m.advance(now);
                    proptest::prop_assert_eq!(reported, m.state(now));
                }
                Op::Streaming(_) | Op::Complete(..) | Op::Drop(_) => {}
            }
            proptest::prop_assert!(m.probes_in_flight() <= max);
            let tally = m.tally();
            proptest::prop_assert!(tally.probe_successes + tally.probe_failures <= probes_admitted);
            let _ = m.take_transitions().count();
        }
        for t in outstanding.drain(..) {
            m.cancel(t, now);
        }
        proptest::prop_assert_eq!(m.probes_in_flight(), 0);
        let taken = m.cold.as_ref().map_or(0, |c| c.probes.iter().filter(|p| **p != ProbeSlot::Free).count());
        proptest::prop_assert_eq!(taken, 0);
    }
}
