use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall_core::{Outcome, SeededRandom};

use super::*;

const S: Duration = Duration::from_secs(1);

/// A random source that always answers `value`.
fn fixed(value: f64) -> Box<dyn RandomSource> {
    Box::new(move || value)
}

/// A random source whose answer the test can change (as bits of an `f64`).
fn settable(start: f64) -> (Box<dyn RandomSource>, Arc<AtomicU64>) {
    let cell = Arc::new(AtomicU64::new(start.to_bits()));
    let c = cell.clone();
    (
        Box::new(move || f64::from_bits(c.load(Ordering::Relaxed))),
        cell,
    )
}

fn machine_with(
    config: DegradationConfig,
    random: Box<dyn RandomSource>,
) -> (DegradationMachine, Instant) {
    let t0 = Instant::now();
    (DegradationMachine::new(4, config, random, t0).unwrap(), t0)
}

/// Four levels, the defaults changed by `set`, every request a probe candidate
/// that probes.
fn probing_with(set: impl FnOnce(&mut DegradationConfig)) -> (DegradationMachine, Instant) {
    let mut config = DegradationConfig::default();
    set(&mut config);
    machine_with(config, fixed(0.0))
}

/// Four levels, the defaults, every request a probe candidate that probes.
fn machine() -> (DegradationMachine, Instant) {
    machine_with(DegradationConfig::default(), fixed(0.0))
}

/// A machine of [`machine`] fallen one level by five failures: the instant its
/// dwell there is over.
fn fallen_one_level() -> (DegradationMachine, Instant) {
    let (mut m, t0) = machine();
    fail_at_current(&mut m, 5, t0);
    (m, t0 + 60 * S)
}

fn fail_at_current(m: &mut DegradationMachine, n: u32, now: Instant) -> Option<Change> {
    let mut last = None;
    for _ in 0..n {
        let t = m.steady_ticket();
        if let Some(c) = m.record(t, Outcome::Failure, now) {
            last = Some(c);
        }
    }
    last
}

/// Sends `n` probes at `now` and records each with `outcome`; returns the last change.
fn probes(m: &mut DegradationMachine, n: u32, outcome: Outcome, now: Instant) -> Option<Change> {
    let mut last = None;
    for _ in 0..n {
        let (t, c) = m.route(now);
        if c.is_some() {
            last = c;
        }
        if t.is_probe() {
            if let Some(c) = m.record(t, outcome, now) {
                last = Some(c);
            }
        }
    }
    last
}

#[test]
fn rejects_fewer_than_two_levels_and_bad_config() {
    let t0 = Instant::now();
    let e = DegradationMachine::new(1, DegradationConfig::default(), fixed(0.5), t0).unwrap_err();
    assert_eq!(e.field(), "levels");
    let bad = DegradationConfig {
        probe_ratio: 2.0,
        ..DegradationConfig::default()
    };
    let e = DegradationMachine::new(3, bad, fixed(0.5), t0).unwrap_err();
    assert_eq!(e.field(), "probe_ratio");
}

#[test]
fn falls_one_level_after_failures_to_degrade_consecutive_failures() {
    let (mut m, t0) = machine();
    assert_eq!(m.level(), 0);
    assert_eq!(fail_at_current(&mut m, 4, t0), None);
    assert_eq!(m.level(), 0);
    let c = fail_at_current(&mut m, 1, t0 + S).unwrap();
    assert_eq!((c.from, c.to, c.cause), (0, 1, Cause::ConsecutiveFailures));
    assert_eq!(c.direction(), Direction::Down);
    assert_eq!(m.snapshot(t0 + S).entered_at, t0 + S);
    assert_eq!(m.snapshot(t0 + S).failures, 0);
}

#[test]
fn a_success_at_the_level_resets_the_consecutive_count() {
    let (mut m, t0) = machine();
    fail_at_current(&mut m, 4, t0);
    let t = m.steady_ticket();
    assert!(!m.success_is_quiet());
    m.record(t, Outcome::Success, t0);
    assert!(m.success_is_quiet());
    fail_at_current(&mut m, 4, t0);
    assert_eq!(m.level(), 0);
    // Ignored outcomes are no evidence either way.
    let t = m.steady_ticket();
    m.record(t, Outcome::Ignore, t0);
    assert_eq!(m.snapshot(t0).failures, 4);
}

#[test]
fn keeps_falling_to_the_last_level_and_stays_there_without_panicking() {
    let (mut m, t0) = machine();
    for expected in 1..=3 {
        fail_at_current(&mut m, 5, t0);
        assert_eq!(m.level(), expected);
    }
    // The last level failing has nowhere to go: no change, no panic, counted.
    assert_eq!(fail_at_current(&mut m, 50, t0), None);
    assert_eq!(m.level(), 3);
    assert_eq!(m.snapshot(t0).failures, 50);
}

#[test]
fn outcomes_admitted_before_a_change_are_ignored() {
    let (mut m, t0) = machine();
    let old = m.steady_ticket();
    fail_at_current(&mut m, 5, t0);
    assert_eq!(m.level(), 1);
    // Four more failures from requests still in flight at level 0 do not push level 1.
    for _ in 0..10 {
        assert_eq!(m.record(old, Outcome::Failure, t0), None);
    }
    assert_eq!(m.snapshot(t0).failures, 0);
    assert_eq!(m.level(), 1);
}

#[test]
fn no_probe_and_no_climb_before_the_dwell() {
    let (mut m, t0) = machine();
    fail_at_current(&mut m, 5, t0);
    assert_eq!(m.probing_from(), Some(t0 + 60 * S));
    // With a random source that would always probe, nothing probes during the dwell.
    for i in 0..600u32 {
        let now = t0 + Duration::from_millis(u64::from(i) * 99);
        let (t, c) = m.route(now);
        assert!(!t.is_probe(), "probe at {i}");
        assert_eq!(c, None);
    }
    let just_before = t0 + 60 * S - Duration::from_nanos(1);
    assert!(!m.route(just_before).0.is_probe());
    assert!(!m.snapshot(just_before).probing);
    let (t, _) = m.route(t0 + 60 * S);
    assert!(t.is_probe());
    assert_eq!(t.level(), 0);
}

#[test]
fn successes_at_the_current_level_never_promote() {
    let (mut m, t0) = machine();
    fail_at_current(&mut m, 5, t0);
    for i in 0..10_000u64 {
        let t = m.steady_ticket();
        let now = t0 + Duration::from_millis(i * 100);
        assert_eq!(m.record(t, Outcome::Success, now), None);
    }
    assert_eq!(m.level(), 1);
    assert_eq!(m.snapshot(t0 + 1000 * S).probe, ProbeProgress::default());
}

#[test]
fn climbs_only_at_the_end_of_a_whole_probe_window() {
    let (mut m, start) = fallen_one_level();
    // Far more than 20 probe successes, all inside the window: no climb yet.
    assert_eq!(probes(&mut m, 100, Outcome::Success, start), None);
    assert_eq!(probes(&mut m, 100, Outcome::Success, start + 59 * S), None);
    let snap = m.snapshot(start + 59 * S);
    assert_eq!(snap.probe.window_started_at, Some(start));
    assert_eq!(snap.probe.successes, 200);
    assert_eq!(m.level(), 1);
    // The next probe outcome at the end of the window promotes.
    let c = probes(&mut m, 1, Outcome::Success, start + 60 * S).unwrap();
    assert_eq!((c.from, c.to, c.cause), (1, 0, Cause::Recovered));
    assert_eq!(c.direction(), Direction::Up);
    assert_eq!(m.level(), 0);
    assert_eq!(m.probing_from(), None);
}

#[test]
fn a_window_ending_with_too_few_successes_starts_a_new_one() {
    let (mut m, start) = fallen_one_level();
    probes(&mut m, 19, Outcome::Success, start);
    // The window is judged when it has ended: 19 < 20, so a new window starts at the
    // next probe, and that probe's success is the first of the new window.
    assert_eq!(probes(&mut m, 1, Outcome::Success, start + 61 * S), None);
    let p = m.snapshot(start + 61 * S).probe;
    assert_eq!(p.window_started_at, Some(start + 61 * S));
    assert_eq!(p.successes, 1);
    assert_eq!(m.level(), 1);
}

#[test]
fn climbs_one_level_at_a_time_each_after_its_own_dwell() {
    let (mut m, t0) = machine();
    fail_at_current(&mut m, 15, t0);
    assert_eq!(m.level(), 3);
    let mut now = t0 + 60 * S;
    probes(&mut m, 20, Outcome::Success, now);
    now += 60 * S;
    let c = probes(&mut m, 1, Outcome::Success, now).unwrap();
    assert_eq!((c.from, c.to), (3, 2));
    // Level 2 has a fresh dwell: the probes' success does not carry over.
    assert_eq!(m.probing_from(), Some(now + 60 * S));
    assert!(!m.route(now + 59 * S).0.is_probe());
    now += 60 * S;
    probes(&mut m, 20, Outcome::Success, now);
    let c = probes(&mut m, 1, Outcome::Success, now + 60 * S).unwrap();
    assert_eq!((c.from, c.to), (2, 1));
}

#[test]
fn a_failed_probe_resets_probe_progress_but_not_the_current_levels_failures() {
    let (mut m, t0) = machine();
    fail_at_current(&mut m, 5, t0);
    fail_at_current(&mut m, 3, t0 + S);
    let now = t0 + 60 * S;
    probes(&mut m, 10, Outcome::Success, now);
    assert_eq!(m.snapshot(now).probe.successes, 10);
    // The failed probe is not a failure of the current level.
    for _ in 0..10 {
        assert_eq!(probes(&mut m, 1, Outcome::Failure, now), None);
    }
    let snap = m.snapshot(now);
    assert_eq!(snap.failures, 3);
    assert_eq!(snap.level, 1);
    assert_eq!(snap.probe.successes, 0);
    assert_eq!(snap.probe.failures, 10);
    // Two more failures at the level itself are what take it down.
    fail_at_current(&mut m, 2, now);
    assert_eq!(m.level(), 2);
}

#[test]
fn a_failure_at_the_current_level_resets_probe_progress() {
    let (mut m, start) = fallen_one_level();
    probes(&mut m, 30, Outcome::Success, start);
    let stale = m.route(start).0;
    assert!(stale.is_probe());
    fail_at_current(&mut m, 1, start + S);
    assert_eq!(m.snapshot(start + S).probe, ProbeProgress::default());
    // A probe admitted before the reset no longer counts.
    m.record(stale, Outcome::Success, start + S);
    assert_eq!(m.snapshot(start + S).probe.successes, 0);
    // The 30 successes before the failure do not carry to the end of the window.
    assert_eq!(probes(&mut m, 5, Outcome::Success, start + 61 * S), None);
    assert_eq!(m.level(), 1);
}

#[test]
fn too_many_failed_probes_in_the_window_block_the_climb() {
    let (mut m, start) = fallen_one_level();
    // 5 failures then 25 successes: 25 successes since the last failure, but a probe
    // failure rate of 1/6 above the 10 % bar.
    probes(&mut m, 5, Outcome::Failure, start);
    probes(&mut m, 25, Outcome::Success, start + S);
    assert_eq!(probes(&mut m, 1, Outcome::Success, start + 60 * S), None);
    assert_eq!(m.level(), 1);
    // One failure among 30 (3.3 %) passes, with 26 successes since it.
    let start = start + 60 * S;
    probes(&mut m, 2, Outcome::Success, start);
    probes(&mut m, 1, Outcome::Failure, start);
    probes(&mut m, 26, Outcome::Success, start);
    let c = probes(&mut m, 1, Outcome::Success, start + 60 * S).unwrap();
    assert_eq!(c.to, 0);
}

#[test]
fn probes_are_sampled_from_the_injected_source_at_probe_ratio() {
    let (r, cell) = settable(0.049);
    let (mut m, t0) = machine_with(DegradationConfig::default(), r);
    fail_at_current(&mut m, 5, t0);
    let now = t0 + 60 * S;
    assert!(m.route(now).0.is_probe());
    cell.store(0.05f64.to_bits(), Ordering::Relaxed);
    assert!(!m.route(now).0.is_probe());

    // A seeded source probes about 5 % of requests, the same ones every run.
    let run = || {
        let (mut m, t0) =
            machine_with(DegradationConfig::default(), Box::new(SeededRandom::new(7)));
        fail_at_current(&mut m, 5, t0);
        (0..10_000)
            .map(|_| m.route(t0 + 60 * S).0.is_probe())
            .collect::<Vec<_>>()
    };
    let a = run();
    assert_eq!(a, run());
    let n = a.iter().filter(|p| **p).count();
    assert!((400..600).contains(&n), "{n} probes in 10000");
}

#[test]
fn the_random_source_is_not_sampled_when_no_probe_is_possible() {
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    let r: Box<dyn RandomSource> = Box::new(move || {
        c.fetch_add(1, Ordering::Relaxed);
        0.0
    });
    let (mut m, t0) = machine_with(DegradationConfig::default(), r);
    for _ in 0..100 {
        m.route(t0 + 100 * S);
    }
    fail_at_current(&mut m, 5, t0);
    for _ in 0..100 {
        m.route(t0 + 30 * S);
    }
    assert_eq!(count.load(Ordering::Relaxed), 0);
    m.route(t0 + 60 * S);
    assert_eq!(count.load(Ordering::Relaxed), 1);
}

#[test]
fn a_floor_pushes_down_at_once_and_bounds_the_climb() {
    let (mut m, t0) = machine();
    let c = m.set_floor(2, t0).unwrap().unwrap();
    assert_eq!((c.from, c.to, c.cause), (0, 2, Cause::Floor));
    // At the floor nothing probes, however long it stays.
    assert_eq!(m.probing_from(), None);
    assert!(!m.route(t0 + 3600 * S).0.is_probe());
    // Failing further is still allowed.
    fail_at_current(&mut m, 5, t0 + S);
    assert_eq!(m.level(), 3);
    // It may climb back to the floor, not above it.
    let now = t0 + 61 * S;
    probes(&mut m, 20, Outcome::Success, now);
    assert_eq!(
        probes(&mut m, 1, Outcome::Success, now + 60 * S)
            .unwrap()
            .to,
        2
    );
    assert_eq!(m.probing_from(), None);
    // Clearing the floor never jumps; the climb goes through dwell and probes again.
    m.clear_floor();
    assert_eq!(m.level(), 2);
    assert_eq!(m.probing_from(), Some(now + 120 * S));
    assert_eq!(m.set_floor(9, now).unwrap_err().field(), "level");
    // A floor below the current level changes nothing now.
    assert_eq!(m.set_floor(3, now).unwrap().map(|c| c.to), Some(3));
    assert_eq!(m.set_floor(1, now).unwrap(), None);
    assert_eq!(m.snapshot(now).floor, Some(1));
}

#[test]
fn force_wins_over_everything_until_released() {
    let (mut m, t0) = machine();
    m.set_floor(1, t0).unwrap();
    // Forcing above the floor is allowed: the operator wins.
    let c = m.force(0, t0).unwrap().unwrap();
    assert_eq!((c.from, c.to, c.cause), (1, 0, Cause::Forced));
    assert!(m.snapshot(t0).forced);
    // Failures do not move a forced level.
    assert_eq!(fail_at_current(&mut m, 50, t0), None);
    assert_eq!(m.level(), 0);
    m.force(3, t0).unwrap();
    assert_eq!(m.probing_from(), None);
    assert!(!m.route(t0 + 3600 * S).0.is_probe());
    assert_eq!(m.force(4, t0).unwrap_err().field(), "level");
    // Released at 3: a fresh dwell there, then probes as usual.
    let now = t0 + 100 * S;
    assert_eq!(m.release(now), None);
    assert!(!m.snapshot(now).forced);
    assert_eq!(m.probing_from(), Some(now + 60 * S));
    // Released above the floor: down to the floor.
    m.force(0, now).unwrap();
    let c = m.release(now).unwrap();
    assert_eq!((c.from, c.to, c.cause), (0, 1, Cause::Floor));
    assert_eq!(m.release(now), None);
}

#[test]
fn a_failure_rate_trigger_waits_for_min_calls_and_ignores_old_outcomes() {
    let config = DegradationConfig {
        trigger: Trigger::FailureRate,
        failure_rate: 0.5,
        rate_window: 10 * S,
        min_calls: 10,
        ..DegradationConfig::default()
    };
    let (mut m, t0) = machine_with(config, fixed(0.9));
    assert!(!m.success_is_quiet());
    // 80 % failures interleaved with successes: a consecutive count would never trip.
    let mut now = t0;
    for i in 0..9 {
        let t = m.steady_ticket();
        let outcome = if i % 5 == 4 {
            Outcome::Success
        } else {
            Outcome::Failure
        };
        assert_eq!(m.record(t, outcome, now), None, "too few calls at {i}");
        now += Duration::from_millis(100);
    }
    let t = m.steady_ticket();
    let c = m.record(t, Outcome::Failure, now).unwrap();
    assert_eq!((c.to, c.cause), (1, Cause::FailureRate));
    // The window restarted with the level: old failures do not count at level 1.
    let snap = m.snapshot(now);
    assert_eq!(snap.window, Some(WindowCounts::default()));
    // Outcomes older than the window have expired.
    for _ in 0..9 {
        let t = m.steady_ticket();
        m.record(t, Outcome::Failure, now);
    }
    let t = m.steady_ticket();
    assert_eq!(m.record(t, Outcome::Failure, now + 11 * S), None);
    assert_eq!(m.level(), 1);
}

#[test]
fn hysteresis_the_bar_to_climb_is_stricter_than_the_bar_to_fall() {
    // Falls at 50 % failures; climbs only with at most 10 % failed probes. A provider
    // failing 20 % of the time does not make the best level fall, but once fallen, the
    // level does not climb back to it either: return point != exit point.
    let config = DegradationConfig {
        trigger: Trigger::FailureRate,
        failure_rate: 0.5,
        rate_window: 10 * S,
        min_calls: 10,
        probe_max_failure_rate: 0.1,
        ..DegradationConfig::default()
    };
    let (mut m, t0) = machine_with(config, fixed(0.0));
    let twenty_percent = |i: u32| {
        if i.is_multiple_of(5) {
            Outcome::Failure
        } else {
            Outcome::Success
        }
    };
    for i in 0..100 {
        let t = m.steady_ticket();
        assert_eq!(m.record(t, twenty_percent(i), t0), None);
    }
    assert_eq!(m.level(), 0);
    // Now it breaks outright.
    for _ in 0..10 {
        let t = m.steady_ticket();
        m.record(t, Outcome::Failure, t0 + 20 * S);
    }
    assert_eq!(m.level(), 1);
    // Then it comes back at 20 % failures: every window ends with 80 successes since
    // the last failed probe, but a probe failure rate above the 10 % bar.
    let mut now = t0 + 80 * S;
    for window in 0..10 {
        for i in 0..100 {
            let outcome = if i < 20 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            probes(&mut m, 1, outcome, now);
        }
        assert_eq!(m.snapshot(now).probe.successes, 80);
        now += 61 * S;
        probes(&mut m, 1, Outcome::Success, now);
        assert_eq!(m.level(), 1, "climbed in window {window}");
    }
}

#[test]
fn reconfigure_keeps_the_level_and_validates() {
    let (mut m, t0) = machine();
    fail_at_current(&mut m, 5, t0);
    let bad = DegradationConfig {
        failures_to_degrade: 0,
        ..DegradationConfig::default()
    };
    assert_eq!(
        m.reconfigure(bad, t0).unwrap_err().field(),
        "failures_to_degrade"
    );
    let shorter = DegradationConfig {
        min_dwell: 10 * S,
        failures_to_degrade: 2,
        ..DegradationConfig::default()
    };
    m.reconfigure(shorter, t0 + S).unwrap();
    assert_eq!(m.level(), 1);
    assert_eq!(m.probing_from(), Some(t0 + 10 * S));
    fail_at_current(&mut m, 2, t0 + S);
    assert_eq!(m.level(), 2);
    let rate = DegradationConfig {
        trigger: Trigger::FailureRate,
        probe_max_failure_rate: 0.05,
        ..DegradationConfig::default()
    };
    m.reconfigure(rate, t0 + S).unwrap();
    assert_eq!(m.snapshot(t0 + S).window, Some(WindowCounts::default()));
}

mod schedules {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Route,
        Complete {
            which: usize,
            roll: u8,
        },
        Advance(u64),
        SetFloor(usize),
        ClearFloor,
        Force(usize),
        Release,
        Reconfigure(u32),
        /// The share of failing outcomes from now on (the dependency breaks or heals).
        Health(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            30 => Just(Op::Route),
            30 => (any::<usize>(), 0u8..100).prop_map(|(which, roll)| Op::Complete { which, roll }),
            15 => (0u64..4_000).prop_map(Op::Advance),
            1 => (0usize..4).prop_map(Op::SetFloor),
            1 => Just(Op::ClearFloor),
            1 => (0usize..4).prop_map(Op::Force),
            1 => Just(Op::Release),
            1 => (1u32..6).prop_map(Op::Reconfigure),
            2 => prop_oneof![Just(0u8), Just(5), Just(50), Just(100)].prop_map(Op::Health),
        ]
    }

    fn config(failures: u32) -> DegradationConfig {
        DegradationConfig {
            failures_to_degrade: failures,
            min_dwell: 5 * S,
            probe_window: 5 * S,
            probe_successes_to_recover: 3,
            probe_ratio: 0.5,
            ..DegradationConfig::default()
        }
    }

    /// What any change must satisfy, given the state just before it.
    fn check_change(
        c: &Change,
        before: &MachineSnapshot,
        cfg: &DegradationConfig,
        ticket: Option<&Ticket>,
    ) {
        assert_eq!(c.from, before.level);
        match c.cause {
            Cause::ConsecutiveFailures | Cause::FailureRate => {
                assert_eq!(c.to, c.from + 1, "falls one level at a time");
                let t = ticket.expect("a fall is caused by an outcome");
                assert!(
                    !t.is_probe(),
                    "a failed probe never makes the current level fall"
                );
            }
            Cause::Recovered => {
                assert_eq!(c.to + 1, c.from, "climbs one level at a time");
                assert!(!before.forced);
                assert!(
                    before.floor.is_none_or(|f| c.to >= f),
                    "never above the floor"
                );
                assert!(
                    before.time_at_level >= cfg.min_dwell + cfg.probe_window,
                    "a climb needs the dwell and a whole window: {:?}",
                    before.time_at_level
                );
                assert!(before.probe.successes + 1 >= cfg.probe_successes_to_recover);
            }
            Cause::Floor | Cause::Forced => assert!(ticket.is_none()),
        }
    }

    proptest! {
        #[test]
        fn invariants_hold_under_any_schedule(
            seed in any::<u64>(),
            ops in proptest::collection::vec(op(), 0..600),
        ) {
            let t0 = Instant::now();
            let mut m = DegradationMachine::new(4, config(3), Box::new(SeededRandom::new(seed)), t0).unwrap();
            let mut now = t0;
            let mut in_flight: Vec<Ticket> = Vec::new();
            let mut failure_pct = 0;
            for op in ops {
                let before = m.snapshot(now);
                let cfg = m.config().clone();
                match op {
                    Op::Route => {
                        let (t, c) = m.route(now);
                        if let Some(c) = &c {
                            check_change(c, &before, &cfg, None);
                        }
                        let level = m.level();
                        let entered = m.snapshot(now).entered_at;
                        if t.is_probe() {
                            prop_assert!(!before.forced);
                            prop_assert_eq!(t.level() + 1, level);
                            prop_assert!(now >= entered + cfg.min_dwell, "no probe during the dwell");
                            prop_assert!(m.floor().is_none_or(|f| t.level() >= f));
                        } else {
                            prop_assert_eq!(t.level(), level);
                        }
                        in_flight.push(t);
                        if in_flight.len() > 8 {
                            // The oldest caller gave up: a dropped future records nothing.
                            in_flight.remove(0);
                        }
                    }
                    Op::Complete { which, roll } => {
                        let outcome = match roll {
                            r if r < failure_pct => Outcome::Failure,
                            r if r >= 95 => Outcome::Ignore,
                            _ => Outcome::Success,
                        };
                        if in_flight.is_empty() {
                            continue;
                        }
                        let t = in_flight.remove(which % in_flight.len());
                        let c = m.record(t, outcome, now);
                        match &c {
                            Some(c) => {
                                check_change(c, &before, &cfg, Some(&t));
                            }
                            None if t.is_probe() => {
                                prop_assert_eq!(m.snapshot(now).failures, before.failures,
                                    "a probe's outcome never touches the current level's failures");
                            }
                            None => {}
                        }
                    }
                    Op::Advance(ms) => now += Duration::from_millis(ms),
                    Op::Health(pct) => failure_pct = pct,
                    Op::SetFloor(f) => {
                        if let Some(c) = m.set_floor(f, now).unwrap() {
                            check_change(&c, &before, &cfg, None);
                            prop_assert_eq!(c.to, f);
                        }
                    }
                    Op::ClearFloor => m.clear_floor(),
                    Op::Force(l) => {
                        if let Some(c) = m.force(l, now).unwrap() {
                            check_change(&c, &before, &cfg, None);
                        }
                        prop_assert_eq!(m.level(), l);
                    }
                    Op::Release => {
                        if let Some(c) = m.release(now) {
                            check_change(&c, &before, &cfg, None);
                        }
                    }
                    Op::Reconfigure(n) => {
                        m.reconfigure(config(n), now).unwrap();
                        prop_assert_eq!(m.level(), before.level);
                    }
                }
                let s = m.snapshot(now);
                prop_assert!(s.level < 4);
                if !s.forced {
                    if let Some(f) = s.floor {
                        prop_assert!(s.level >= f, "level {} above floor {}", s.level, f);
                    }
                }
                prop_assert!(s.probe.successes <= s.probe.probes);
                prop_assert!(s.probe.failures <= s.probe.probes);
            }
        }
    }
}

#[test]
fn a_dwell_or_probe_window_too_long_to_add_to_an_instant_never_panics() {
    // "Never climb on its own" written as the longest durations: they validate, so the
    // machine must treat them as "not yet", not overflow the clock.
    let (mut m, t0) = probing_with(|c| c.min_dwell = Duration::MAX);
    fail_at_current(&mut m, 5, t0);
    let (t, c) = m.route(t0 + 3600 * S);
    assert!(!t.is_probe());
    assert_eq!(c, None);
    assert!(!m.snapshot(t0 + 3600 * S).probing);

    let (mut m, t0) = probing_with(|c| {
        c.min_dwell = Duration::ZERO;
        c.probe_window = Duration::MAX;
    });
    fail_at_current(&mut m, 5, t0);
    assert_eq!(probes(&mut m, 100, Outcome::Success, t0 + 3600 * S), None);
    assert_eq!(m.level(), 1);
    assert_eq!(m.snapshot(t0 + 3600 * S).probe.successes, 100);
}

#[test]
fn a_zero_probe_window_climbs_once_enough_probes_in_a_row_succeeded() {
    // Zero judges at every probe outcome; that must not throw away the successes
    // gathered so far, or more than one needed success could never be reached.
    let (mut m, t0) = probing_with(|c| c.probe_window = Duration::ZERO);
    fail_at_current(&mut m, 5, t0);
    let now = t0 + 60 * S;
    assert_eq!(probes(&mut m, 19, Outcome::Success, now), None);
    assert_eq!(m.snapshot(now).probe.successes, 19);
    // A failed probe still resets the progress.
    assert_eq!(probes(&mut m, 1, Outcome::Failure, now), None);
    assert_eq!(m.snapshot(now).probe.successes, 0);
    assert_eq!(probes(&mut m, 19, Outcome::Success, now + S), None);
    let c = probes(&mut m, 1, Outcome::Success, now + S).unwrap();
    assert_eq!((c.from, c.to, c.cause), (1, 0, Cause::Recovered));
}

#[test]
fn a_change_is_a_rehearsal_only_when_the_outcome_that_completed_it_was_injected() {
    // Four real failures, the fifth injected: the fall is the rehearsal's.
    let (mut m, t0) = machine();
    assert_eq!(fail_at_current(&mut m, 4, t0), None);
    let t = m.steady_ticket();
    let c = m.record_rehearsal(t, Outcome::Failure, t0).unwrap();
    assert_eq!((c.from, c.to, c.rehearsal), (0, 1, true));

    // Four injected, the fifth real: an incident.
    let (mut m, t0) = machine();
    for _ in 0..4 {
        let t = m.steady_ticket();
        assert_eq!(m.record_rehearsal(t, Outcome::Failure, t0), None);
    }
    let c = fail_at_current(&mut m, 1, t0).unwrap();
    assert_eq!((c.from, c.to, c.rehearsal), (0, 1, false));
}

#[test]
fn a_climb_completed_by_an_injected_probe_is_marked_and_a_floor_never_is() {
    // No window: the level climbs at the probe that meets the bar.
    let (mut m, t0) = probing_with(|c| {
        c.min_dwell = Duration::ZERO;
        c.probe_window = Duration::ZERO;
        c.probe_successes_to_recover = 3;
    });
    fail_at_current(&mut m, 5, t0);
    assert_eq!(probes(&mut m, 2, Outcome::Success, t0), None);
    let (ticket, change) = m.route(t0);
    assert!(ticket.is_probe() && change.is_none());
    let c = m.record_rehearsal(ticket, Outcome::Success, t0).unwrap();
    assert_eq!(
        (c.from, c.to, c.cause, c.rehearsal),
        (1, 0, Cause::Recovered, true)
    );

    let (mut m, t0) = machine();
    let c = m.set_floor(2, t0).unwrap().unwrap();
    assert_eq!((c.to, c.cause, c.rehearsal), (2, Cause::Floor, false));
}
