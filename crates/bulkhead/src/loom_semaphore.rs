//! Loom models of the bulkhead's admission word (see `semaphore.rs`), driving the
//! production [`Semaphore`] through the `sync` shim: every interleaving of a release
//! handing its slot over with a waiter timing out, a newcomer on the fast path, and
//! a resize.
//!
//! The word packs the active and waiting counts (and the fast path's admission
//! count); the line of waiters sits behind a mutex. What can go wrong: a slot handed
//! to a waiter that already left (a slot leaked, or two holders for one slot), a
//! newcomer overtaking a waiter, a slot left free while someone waits, or more
//! calls active than the limit.
//!
//! With classes, what can go wrong besides: a class holding more than its share
//! when a release, a newcomer of that class and a more critical one race, or a
//! waiter both displaced and timed out (counted twice, or lost).
//!
//! Covered: the word and its compare-and-swap loops (`try_acquire`, `join`,
//! `join_classed`, `hand_over_locked`, `release`, `release_classed`), the line's
//! mutex, `leave`, `poll_waiter`, `poll_place` and `set_limits`, with loom's
//! atomics and mutex. Not covered: timers and futures
//! (the adapter's; a timeout is modelled as the waiter calling `leave`), the wait
//! histogram and telemetry (plain `std` atomics, not part of the decision).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p seawall-bulkhead --release --lib
//! loom_` (`.ci/run` bounds preemptions with `LOOM_MAX_PREEMPTIONS`).

// Models check by panicking, as tests do (`cfg(loom)` hides that they are tests).
#![allow(clippy::panic)]

use std::sync::Arc;
use std::task::Waker;

use loom::thread;

use seawall_core::Criticality;

use crate::queue::Shares;
use crate::semaphore::{Counts, Enqueued, Leave, Left, Polled, Semaphore, WaiterId};

fn counts(active: usize, queued: usize) -> Counts {
    Counts { active, queued }
}

/// A semaphore of one slot, taken, with room for `queue` waiters.
fn one_slot_held(queue: usize) -> Arc<Semaphore> {
    let m = Arc::new(Semaphore::new(1, queue));
    assert!(m.try_acquire());
    m
}

/// The slot's holder releasing it, on a thread of its own.
fn releasing(m: &Arc<Semaphore>) -> thread::JoinHandle<()> {
    let m = Arc::clone(m);
    thread::spawn(move || m.release())
}

fn waiting(e: Enqueued) -> WaiterId {
    match e {
        Enqueued::Waiting(id) => id,
        other => panic!("expected to wait, got {other:?}"),
    }
}

/// A waiter whose timer fires: it takes the slot if one was handed to it (by poll
/// or as `leave` finds it), else leaves the line. Whether it holds a slot.
fn time_out(m: &Semaphore, id: WaiterId) -> bool {
    if m.poll_waiter(id, Waker::noop()) {
        return true;
    }
    m.leave(id, Leave::TimedOut) == Left::HoldsSlot
}

/// The holder releases its slot while the only waiter times out: the slot ends
/// with exactly one owner (the waiter, or nobody), and every count adds up.
#[test]
fn loom_a_hand_over_racing_a_waiters_timeout_leaks_no_slot() {
    loom::model(|| {
        let m = one_slot_held(1);
        let id = waiting(m.enqueue());
        let release = releasing(&m);
        let holds = time_out(&m, id);
        if release.join().is_err() {
            panic!("the releasing thread panicked");
        }
        assert_eq!(m.counts(), counts(usize::from(holds), 0));
        assert_eq!(m.admitted(), 1 + u64::from(holds));
        assert_eq!(m.rejected_timeout(), u64::from(!holds));
        if holds {
            m.release();
        }
        assert_eq!(m.counts(), counts(0, 0));
    });
}

/// A newcomer on the fast path races a release that hands the slot to a waiter:
/// the newcomer never takes it while the waiter is in line.
#[test]
fn loom_a_newcomer_never_overtakes_a_waiter() {
    loom::model(|| {
        let m = one_slot_held(1);
        let id = waiting(m.enqueue());
        let release = releasing(&m);
        // The waiter stays in line: the only free slot is its own.
        assert!(!m.try_acquire(), "a newcomer overtook the waiter");
        if release.join().is_err() {
            panic!("the releasing thread panicked");
        }
        assert!(m.poll_waiter(id, Waker::noop()));
        assert_eq!(m.counts(), counts(1, 0));
    });
}

/// A release, a resize that adds a slot, and the first waiter's timeout, all at
/// once, with two waiters: never more active than the limit, no slot left free
/// while someone waits, and every slot comes back.
#[test]
fn loom_a_hand_over_racing_a_timeout_and_a_resize_keeps_the_limits() {
    loom::model(|| {
        let m = one_slot_held(2);
        let first = waiting(m.enqueue());
        let second = waiting(m.enqueue());
        let release = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                m.release();
                assert!(m.counts().active <= 2);
            })
        };
        let resize = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                m.set_limits(2, 2);
                assert!(m.counts().active <= 2);
            })
        };
        let first_holds = time_out(&m, first);
        assert!(m.counts().active <= 2);
        if release.join().is_err() || resize.join().is_err() {
            panic!("a model thread panicked");
        }
        // Two slots, the holder gone: both waiters that stayed got one.
        let after = m.counts();
        assert!(
            after.queued == 0 || after.active >= 2,
            "a slot sits free while someone waits: {after:?}"
        );
        assert_eq!(after.queued, 0);
        assert!(
            m.poll_waiter(second, Waker::noop()),
            "the second waiter got no slot"
        );
        assert_eq!(after.active, 1 + usize::from(first_holds));
        assert_eq!(m.admitted(), 2 + u64::from(first_holds));
        for _ in 0..after.active {
            m.release();
        }
        assert_eq!(m.counts(), counts(0, 0));
    });
}

/// Sheddable may hold one of two slots (50 %).
const HALF: Shares = Shares {
    default: 100,
    sheddable: 50,
};

/// A sheddable holder releases its slot while a sheddable newcomer and a critical
/// one arrive: sheddable never holds more than its one slot, the critical call is
/// never kept out by it, and every slot comes back.
#[test]
fn loom_shares_hold_when_a_release_races_newcomers_of_two_classes() {
    loom::model(|| {
        let m = Arc::new(Semaphore::new(2, 2));
        assert_eq!(
            m.join_classed(Criticality::Sheddable, HALF, true, true),
            Enqueued::Admitted
        );
        let release = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.release_classed(Criticality::Sheddable))
        };
        let sheddable = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                let e = m.join_classed(Criticality::Sheddable, HALF, true, true);
                assert!(m.class_counts().0[Criticality::Sheddable.index()] <= 1);
                e
            })
        };
        // Two slots, sheddable holds at most one: a critical call always gets one.
        let critical = m.join_classed(Criticality::Critical, HALF, true, true);
        assert_eq!(critical, Enqueued::Admitted);
        assert!(m.class_counts().0[Criticality::Sheddable.index()] <= 1);
        if release.join().is_err() {
            panic!("the releasing thread panicked");
        }
        let Ok(shed) = sheddable.join() else {
            panic!("the sheddable thread panicked");
        };
        let (by_class, queued) = m.class_counts();
        assert!(by_class[Criticality::Sheddable.index()] <= 1);
        // The newcomer got the freed sheddable slot, at once or handed over.
        let holds = match shed {
            Enqueued::Admitted => true,
            Enqueued::Waiting(id) => m.poll_place(id, Waker::noop()) == Polled::Admitted,
            other => panic!("the sheddable newcomer was {other:?}"),
        };
        assert!(
            holds,
            "a freed sheddable slot sat free while a sheddable waited"
        );
        assert_eq!(queued, [0, 0, 0]);
        assert_eq!(m.counts(), counts(2, 0));
        m.release_classed(Criticality::Critical);
        m.release_classed(Criticality::Sheddable);
        assert_eq!(m.counts(), counts(0, 0));
        assert_eq!(m.class_counts(), ([0; 3], [0; 3]));
    });
}

/// A critical newcomer to a full queue races the sheddable waiter's timeout: the
/// waiter either timed out (and the newcomer found room) or was displaced, never
/// both, and every count adds up.
#[test]
fn loom_a_displacement_racing_a_timeout_counts_the_waiter_once() {
    loom::model(|| {
        let m = Arc::new(Semaphore::new(1, 1));
        assert_eq!(
            m.join_classed(Criticality::Critical, HALF, true, true),
            Enqueued::Admitted
        );
        let waiter = waiting(m.join_classed(Criticality::Sheddable, HALF, true, true));
        let newcomer = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.join_classed(Criticality::Critical, HALF, true, true))
        };
        let left = m.leave(waiter, Leave::TimedOut);
        let Ok(joined) = newcomer.join() else {
            panic!("the newcomer's thread panicked");
        };
        let critical = waiting(joined);
        assert_ne!(left, Left::HoldsSlot, "no slot was freed");
        let (timed_out, displaced) = (m.rejected_timeout(), m.rejected_full());
        assert_eq!(timed_out + displaced, 1, "the waiter is counted once");
        assert_eq!(left == Left::Displaced, displaced == 1);
        assert_eq!(m.counts(), counts(1, 1));
        m.release_classed(Criticality::Critical);
        assert_eq!(m.poll_place(critical, Waker::noop()), Polled::Admitted);
        m.release_classed(Criticality::Critical);
        assert_eq!(m.counts(), counts(0, 0));
        assert_eq!(m.class_counts(), ([0; 3], [0; 3]));
    });
}
