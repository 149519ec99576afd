//! What an admitted call holds on to: a [`Lane`] of a breaker.
//!
//! A `'static` response future must own a reference to the breaker it reports to,
//! and the count of an `Arc` is a line every call writes twice (the clone into the
//! future, the drop). With one `Arc` per breaker, calls on two cores move that line
//! between them on every call, whatever else they avoid. So a breaker shared by a
//! layer's services has several lanes, each its own allocation with its own count,
//! and each thread takes the lane of its slot: calls made on threads of different
//! lanes write different lines (the lane's count, the lane's success tally in the
//! breaker) and only read the breaker's word. A call reports through the lane it
//! was made through, even when its future ends on another thread. A key of a
//! keyed layer is one lane that owns its breaker: one allocation per key, its
//! successes tallied in the word as before.

use std::cell::Cell;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::time::Instant;

use super::{Breaker, WORD_SLOT};
use crate::machine::{Report, Ticket};

/// A breaker, as a call holds it (see the module docs).
///
/// Every lane is the size of a breaker: a key's breaker sits in its lane, one
/// allocation per key, and the few lanes of a shared breaker pay the size, which
/// also keeps their counts lines apart.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Lane {
    /// A breaker of its own: a key of a keyed layer, tallying in its word.
    Own(Breaker),
    /// One lane of a breaker shared by a layer's services: tallies in the
    /// breaker's `slot`th tally line.
    Of { breaker: Arc<Breaker>, slot: usize },
}

impl Deref for Lane {
    type Target = Breaker;

    #[inline]
    fn deref(&self) -> &Breaker {
        match self {
            Self::Own(breaker) => breaker,
            Self::Of { breaker, .. } => breaker,
        }
    }
}

impl Lane {
    /// Which of the breaker's tally lines this lane counts successes in
    /// ([`WORD_SLOT`], none of them, for a breaker of its own).
    #[inline]
    fn slot(&self) -> usize {
        match self {
            Self::Own(_) => WORD_SLOT,
            Self::Of { slot, .. } => *slot,
        }
    }

    /// Reports how a call admitted through this lane ended (see
    /// [`Breaker::complete`]), tallying a batched success in this lane's line.
    #[inline]
    pub(crate) fn complete(
        &self,
        ticket: Ticket,
        report: Report,
        now: Option<Instant>,
        clock: impl FnOnce() -> Instant,
    ) {
        Breaker::complete(self, self.slot(), ticket, report, now, clock);
    }

    /// Reports that a call admitted through this lane was dropped before it
    /// finished (see [`Breaker::cancel`]), counted in this lane's line.
    #[inline]
    pub(crate) fn cancel(&self, ticket: Ticket, clock: impl FnOnce() -> Instant) {
        Breaker::cancel(self, self.slot(), ticket, clock);
    }
}

/// The lanes of one shared breaker, one per tally line; a thread always takes the
/// same one. Cloning shares them.
#[derive(Debug, Clone)]
pub(crate) struct Lanes {
    breaker: Arc<Breaker>,
    lanes: Arc<[Arc<Lane>]>,
}

impl Lanes {
    /// A lane for each of `breaker`'s tally lines (at least one).
    pub(crate) fn of(breaker: Breaker) -> Self {
        let breaker = Arc::new(breaker);
        let lanes = (0..breaker.tally_lines().max(1))
            .map(|slot| {
                Arc::new(Lane::Of {
                    breaker: Arc::clone(&breaker),
                    slot,
                })
            })
            .collect();
        Self { breaker, lanes }
    }

    /// The breaker itself, read without going through a lane.
    #[inline]
    pub(crate) fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// The slot of the lane the current thread takes (the number of lanes is a
    /// power of two): what the breaker's lock-free paths count in for its calls.
    #[inline]
    pub(crate) fn slot_for_this_thread(&self) -> usize {
        thread_slot() & (self.lanes.len() - 1)
    }

    /// The lane of `slot` (from [`slot_for_this_thread`](Self::slot_for_this_thread)).
    #[inline]
    pub(crate) fn lane(&self, slot: usize) -> &Arc<Lane> {
        &self.lanes[slot]
    }

    /// Any one lane, for an operator's handle (which writes no tally).
    pub(crate) fn first(&self) -> &Arc<Lane> {
        &self.lanes[0]
    }
}

/// How many tally lines a shared breaker gets: twice the cores this process may
/// use, as a power of two and at most 32, so that the threads a runtime runs on
/// (its workers, and a few others) rarely share one. A thread beyond them shares
/// a line, which costs speed, never a count.
pub(crate) fn tally_lines() -> usize {
    static LINES: OnceLock<usize> = OnceLock::new();
    *LINES.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        cores.saturating_mul(2).next_power_of_two().min(32)
    })
}

std::thread_local! {
    /// This thread's slot, given the first time it calls a shared breaker.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's slot: threads get consecutive slots in the order they first
/// call a shared breaker (any of them), so the workers of a busy runtime, whose
/// first calls come together, take different lanes while they are no more than
/// the lanes. A slot is never given back and every calling thread takes the next
/// one: a thread whose first call falls between two workers' (another runtime's,
/// a blocking thread), or threads that come and go, can leave two workers on one
/// lane, which costs speed, never a count.
#[inline]
fn thread_slot() -> usize {
    let slot = SLOT.get();
    if slot != usize::MAX {
        return slot;
    }
    assign_slot()
}

#[cold]
fn assign_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let slot = NEXT.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1);
    SLOT.set(slot);
    slot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_breaker_gets_a_power_of_two_of_tally_lines_within_bounds() {
        let lines = tally_lines();
        assert!(lines.is_power_of_two(), "{lines}");
        assert!((2..=32).contains(&lines), "{lines}");
    }

    #[test]
    fn lanes_are_large_enough_that_no_two_counts_share_a_cache_line() {
        // Each lane is its own allocation starting with its `Arc` counts: a lane
        // of 64 bytes or more puts the next allocation's counts on another line.
        assert!(std::mem::size_of::<Lane>() >= 64);
    }

    #[test]
    fn a_thread_keeps_its_slot_and_two_threads_get_different_ones() {
        let here = thread_slot();
        assert_eq!(thread_slot(), here);
        let there = std::thread::spawn(thread_slot)
            .join()
            .expect("the thread panicked");
        assert_ne!(here, there);
    }
}
