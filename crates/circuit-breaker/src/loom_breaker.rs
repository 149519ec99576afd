//! Loom models of the breaker's lock-free closed-path word (see `state.rs`),
//! driving the production [`Breaker`] through the `sync` shim: every interleaving
//! of a success tallied without the lock with a change of epoch made under it.
//!
//! The word packs the mode, the epoch and a count of successes not yet folded into
//! the machine. A success bumps the count with one compare-and-swap if the epoch is
//! still its own; whoever takes the lock folds the count in first, then republishes
//! the word, and successes tallied while the epoch was changing are stale. What can
//! go wrong: a success lost, counted twice, or folded into the new epoch's window.
//!
//! A breaker shared by a layer's services also has a tally line per lane (see
//! `state/lane.rs`): a success is then one compare-and-swap on its lane's line,
//! which holds the epoch it was tallied in, and the lock folds every line. The
//! success reads the word (its epoch and `batch` bit) before that compare-and-swap,
//! not in it, so the epoch can change in between: the line's own epoch decides,
//! and a success of the new epoch through a line still holding the old one's goes
//! to the lock.
//!
//! Covered: the word (its pending count, epoch and `plain` bit), the lanes' tally
//! lines, their compare-and-swap loops (`try_batch_success`, `tally_in`,
//! `publish`), the folds in `locked` and the mutex around the machine, with loom's
//! atomics and mutex. Not covered: the machine's own logic (plain code under the
//! mutex, tested by the proptest suites), the clock (instants are passed in),
//! telemetry, how threads take lanes (`std`'s thread-local, not modelled).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p seawall-circuit-breaker --release
//! --lib loom_`. `.ci/run` runs every interleaving (no preemption bound), so each
//! model stays at two threads and a few operations; `LOOM_MAX_PREEMPTIONS` bounds
//! them if one grows.

// Models check by panicking, as tests do (`cfg(loom)` hides that they are tests).
#![allow(clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use seawall_core::{Outcome, SeededRandom};
use tokio::time::Instant;

use crate::config::{CircuitBreakerConfig, TripPolicy};
use crate::machine::{Admission, Report, State, Ticket};
use crate::state::{Breaker, WORD_SLOT};

fn breaker(policy: TripPolicy, now: Instant) -> Breaker {
    with_lines(policy, now, 0)
}

/// A breaker whose lanes tally in `lines` lines of their own.
fn with_lines(policy: TripPolicy, now: Instant, lines: usize) -> Breaker {
    let config = CircuitBreakerConfig {
        policy,
        ..CircuitBreakerConfig::default()
    };
    let random = Some(Box::new(SeededRandom::new(7)) as Box<dyn seawall_core::RandomSource>);
    match Breaker::new("loom".into(), &config, random, now, lines) {
        Ok(b) => b,
        Err(e) => panic!("invalid model configuration: {e}"),
    }
}

fn admit(b: &Breaker, now: Instant) -> Ticket {
    match b.admit(WORD_SLOT, || now) {
        Admission::Admitted(t) => t,
        Admission::Rejected(..) | Admission::Shadow(..) => {
            panic!("a closed breaker rejected a call")
        }
    }
}

/// A count window: successes are batched, and the window shows where they landed.
fn count_window() -> TripPolicy {
    TripPolicy::CountWindow {
        size: 10,
        min_calls: 10,
        failure_rate: 0.5,
    }
}

/// A success of the old epoch races an operator's reset (a new epoch, still
/// closed and batching): it is counted exactly once, and never in the new window.
#[test]
fn loom_a_success_racing_a_reset_is_counted_once_and_never_in_the_new_epoch() {
    loom::model(|| {
        let now = Instant::now();
        let b = Arc::new(breaker(count_window(), now));
        let ticket = admit(&b, now);
        let old_epoch = ticket.epoch;
        let success = {
            let b = Arc::clone(&b);
            thread::spawn(move || {
                b.complete(
                    WORD_SLOT,
                    ticket,
                    Report::of(Outcome::Success),
                    None,
                    || now,
                );
            })
        };
        b.locked(now, |m| m.reset(now));
        if success.join().is_err() {
            panic!("the completing thread panicked");
        }
        b.locked(now, |m| {
            assert_ne!(m.epoch(), old_epoch);
            let tally = m.tally();
            assert_eq!(tally.successes, 1, "lost or counted twice");
            // Either folded before the reset (which emptied the window), or stale.
            let window = m.window_counts(now).map_or(0, |w| w.calls);
            assert_eq!(window, 0, "an old-epoch success reached the new window");
            assert!(tally.stale <= 1);
        });
        // The word agrees with the machine: a new call takes the machine's epoch,
        // and a keyed map reading the word alone sees a plainly closed breaker.
        let fresh = admit(&b, now);
        assert_eq!(fresh.epoch, b.locked(now, |m| m.epoch()));
        assert!(b.is_plainly_closed());
    });
}

/// A success and a failure of the same epoch race; the failure trips the breaker
/// (threshold 1), changing the epoch. The success is counted once, as current if
/// it was folded before the failure, else as stale; the breaker ends open and no
/// tally is left pending in the word.
#[test]
fn loom_a_success_racing_a_trip_is_counted_once() {
    loom::model(|| success_racing_a_trip(0, WORD_SLOT, WORD_SLOT));
}

/// The same race between a success tallied in one lane's line and a failure
/// through another lane: no line is left pending either.
#[test]
fn loom_a_success_in_a_lanes_line_racing_a_trip_through_another_lane_is_counted_once() {
    loom::model(|| success_racing_a_trip(2, 1, 0));
}

/// A success through `ok_slot` races a failure through `failed_slot` that trips
/// a breaker with `lines` tally lines (threshold 1).
fn success_racing_a_trip(lines: usize, ok_slot: usize, failed_slot: usize) {
    let now = Instant::now();
    let b = Arc::new(with_lines(
        TripPolicy::ConsecutiveFailures { threshold: 1 },
        now,
        lines,
    ));
    let ok = admit(&b, now);
    let failed = admit(&b, now);
    let success = {
        let b = Arc::clone(&b);
        thread::spawn(move || {
            b.complete(ok_slot, ok, Report::of(Outcome::Success), None, || now);
        })
    };
    b.complete(
        failed_slot,
        failed,
        Report::of(Outcome::Failure),
        Some(now),
        || now,
    );
    if success.join().is_err() {
        panic!("the completing thread panicked");
    }
    let (state, tally) = b.locked(now, |m| (m.state(now), m.tally()));
    assert_eq!(state, State::Open);
    // Whichever thread folded last, the word no longer offers it for eviction.
    assert!(!b.is_plainly_closed());
    assert_eq!(
        (tally.successes, tally.failures),
        (1, 1),
        "lost or counted twice"
    );
    assert!(tally.stale <= 1);
    // Nothing left pending: a second fold changes nothing.
    assert_eq!(b.locked(now, |m| m.tally().successes), 1);
}

/// Two successes tallied without the lock race an operator forcing the breaker
/// open and back closed (two epoch changes): both are counted exactly once.
#[test]
fn loom_successes_racing_two_epoch_changes_are_each_counted_once() {
    loom::model(|| {
        let now = Instant::now();
        let b = Arc::new(breaker(count_window(), now));
        let first = admit(&b, now);
        let second = admit(&b, now);
        let success = {
            let b = Arc::clone(&b);
            thread::spawn(move || {
                b.complete(WORD_SLOT, first, Report::of(Outcome::Success), None, || now);
                b.complete(
                    WORD_SLOT,
                    second,
                    Report::of(Outcome::Success),
                    None,
                    || now,
                );
            })
        };
        b.locked(now, |m| m.force_open(now));
        b.locked(now, |m| m.reset(now));
        if success.join().is_err() {
            panic!("the completing thread panicked");
        }
        b.locked(now, |m| {
            assert_eq!(m.tally().successes, 2, "lost or counted twice");
            assert_eq!(m.window_counts(now).map_or(0, |w| w.calls), 0);
            assert_eq!(m.state(now), State::Closed);
        });
        assert!(b.is_plainly_closed());
    });
}

/// Two lanes tally a success each while one of the threads then resets the
/// breaker: the reset's thread's own success is folded before the reset (current),
/// the other lane's is counted once, and neither reaches the new window.
#[test]
fn loom_successes_in_two_lanes_racing_a_reset_are_counted_once_and_in_order() {
    loom::model(|| {
        let now = Instant::now();
        let b = Arc::new(with_lines(count_window(), now, 2));
        let mine = admit(&b, now);
        let theirs = admit(&b, now);
        let other = {
            let b = Arc::clone(&b);
            thread::spawn(move || {
                b.complete(1, theirs, Report::of(Outcome::Success), None, || now);
            })
        };
        b.complete(0, mine, Report::of(Outcome::Success), None, || now);
        b.locked(now, |m| m.reset(now));
        if other.join().is_err() {
            panic!("the completing thread panicked");
        }
        b.locked(now, |m| {
            let tally = m.tally();
            assert_eq!(tally.successes, 2, "lost or counted twice");
            // Only the other thread's success can have been tallied too late.
            assert!(
                tally.stale <= 1,
                "a success made before the reset was stale"
            );
            assert_eq!(m.window_counts(now).map_or(0, |w| w.calls), 0);
        });
        // A new call still tallies in its line (no old epoch's count left there).
        let fresh = admit(&b, now);
        assert_eq!(fresh.epoch, b.locked(now, |m| m.epoch()));
        b.complete(1, fresh, Report::of(Outcome::Success), None, || now);
        b.locked(now, |m| {
            assert_eq!(m.window_counts(now).map_or(0, |w| w.calls), 1);
        });
        assert!(b.is_plainly_closed());
    });
}

/// A success of the old epoch may pass its check of the word before an operator's
/// reset and land in its lane's line after it; a success of the new epoch then
/// comes through the same lane. The new one is current (in the new window) whatever
/// the old one's line holds; the old one is counted once, and never in that window.
#[test]
fn loom_a_new_epochs_success_through_a_lane_an_old_one_is_landing_in_is_current() {
    loom::model(|| {
        let now = Instant::now();
        let b = Arc::new(with_lines(count_window(), now, 2));
        let old = admit(&b, now);
        let late = {
            let b = Arc::clone(&b);
            thread::spawn(move || {
                b.complete(1, old, Report::of(Outcome::Success), None, || now);
            })
        };
        b.locked(now, |m| m.reset(now));
        let fresh = admit(&b, now);
        assert_ne!(fresh.epoch, old.epoch);
        b.complete(1, fresh, Report::of(Outcome::Success), None, || now);
        if late.join().is_err() {
            panic!("the completing thread panicked");
        }
        b.locked(now, |m| {
            let tally = m.tally();
            assert_eq!(tally.successes, 2, "lost or counted twice");
            assert!(tally.stale <= 1, "the new epoch's success was stale");
            assert_eq!(
                m.window_counts(now).map_or(0, |w| w.calls),
                1,
                "the new epoch's success is missing from its window, or the old one is in it"
            );
        });
    });
}

/// A time window needs each success's instant, so successes are not batched under
/// it. A lane's success checks the word's epoch and `batch` bit before its
/// compare-and-swap on the line, not with it, so a reconfiguration that clears the
/// bit must change the epoch too (a new window does): a success admitted under the
/// count window that lands in its line after the change is stale, counted once and
/// never recorded in the time window at the instant it happens to be folded.
#[test]
fn loom_a_success_racing_a_reconfiguration_to_a_time_window_never_lands_in_it() {
    loom::model(|| {
        let now = Instant::now();
        let b = Arc::new(with_lines(count_window(), now, 2));
        let ticket = admit(&b, now);
        let success = {
            let b = Arc::clone(&b);
            thread::spawn(move || {
                b.complete(1, ticket, Report::of(Outcome::Success), None, || now);
            })
        };
        let timed = CircuitBreakerConfig {
            policy: TripPolicy::TimeWindow {
                window: Duration::from_secs(10),
                bucket: Duration::from_secs(1),
                min_calls: 10,
                failure_rate: 0.5,
            },
            ..CircuitBreakerConfig::default()
        };
        if let Err(e) = b.locked(now, |m| m.reconfigure(&timed, now)) {
            panic!("invalid model configuration: {e}");
        }
        if success.join().is_err() {
            panic!("the completing thread panicked");
        }
        b.locked(now, |m| {
            assert!(!m.batches_successes());
            assert_ne!(m.epoch(), ticket.epoch);
            let tally = m.tally();
            assert_eq!(tally.successes, 1, "lost or counted twice");
            assert!(tally.stale <= 1);
            assert_eq!(
                m.window_counts(now).map_or(0, |w| w.calls),
                0,
                "a success admitted under the count window reached the time window"
            );
        });
        // Nothing left in a line: another fold changes nothing.
        assert_eq!(b.locked(now, |m| m.tally().successes), 1);
    });
}
