//! The bulkhead's semaphore: slots counted in one atomic word, and a line of
//! waiters behind a mutex (the shape of tokio's batch semaphore).
//!
//! This is a concurrency primitive, not a sans-IO machine: its state is shared
//! atomics that racing callers change. No clock, no timers, no futures: the
//! response future reads the clock and owns the timers; this struct only counts
//! slots and keeps the waiting line in order.
//!
//! # How admission works
//!
//! One `AtomicU64` holds three counts, so a single compare-and-swap sees them all:
//! the active calls (bits 0–20), the waiting calls (bits 21–41), and the calls
//! admitted on the fast path since the last flush (bits 43–63). Bit 42 flips at
//! every change of `max_concurrent` (see below).
//!
//! - **Fast path** ([`Semaphore::try_acquire`]): when nobody is waiting and a slot is
//!   free, one compare-and-swap takes it and counts the admission in the same
//!   word. No lock, no allocation, no clock, no second atomic. Nobody waiting is
//!   part of the condition, so a newcomer never overtakes a waiter (first in,
//!   first out). When the admission count in the word reaches its cap (every
//!   two million calls), the call takes the slow path, which moves that count
//!   into the total kept under the lock.
//! - **Full** ([`Semaphore::is_full`]): one load decides that there is neither a slot
//!   for the newcomer nor room in the queue.
//! - **Slow path** ([`Semaphore::enqueue`]): under the queue lock, either take a slot
//!   that freed meanwhile, reject when the queue is full, or join the back of the
//!   line. The waiting count changes only under the lock, so it always equals the
//!   length of the line.
//! - **Release** ([`Semaphore::release`]): one `fetch_sub`. Only when the old word
//!   shows waiters does it take the lock and hand free slots to the front of the
//!   line, in order (a hand-over moves one call from waiting to active in one
//!   compare-and-swap, so no newcomer can slip in between).
//!
//! **Classes.** A call with a [`Criticality`] takes the lock to be admitted
//! ([`Semaphore::join_classed`]): the slots each class holds and the waiters of each
//! class are counted under it, next to the line, and the decisions are the queue
//! policy's class-aware ones ([`Shares`]). Its slot is freed under the lock too
//! ([`Semaphore::release_classed`]), so shares are checked and changed in one
//! critical section. The word still counts every active and waiting call, so the
//! limit and the fast path's checks hold across classed and plain calls. Nothing
//! of this exists until the first call with a class.
//!
//! Shrinking `max_concurrent` preempts nothing: running calls finish, and slots
//! are handed over only while `active < max_concurrent`. Growing it hands the new
//! slots to waiters at once.
//!
//! **No admission while active ≥ the limit**, even while an adaptive limit moves
//! under racing callers: the limit lives in its own atomic, so a change stores it
//! and then flips bit 42 of the word. A fast-path caller loads the word before the
//! limit; if the limit changed after its loads, the flip makes its
//! compare-and-swap fail, and it tries again with the new limit. Every admission
//! is therefore checked against the limit in force when it took its slot. (The
//! slow paths read the limit under the lock a change also takes.)

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{OnceLock, PoisonError};
use std::task::Waker;
use std::time::Duration;

use seawall_core::Criticality;

use tokio::time::Instant;

use crate::queue::{ClassLoad, ClassPlace, LineState, Load, Place, QueuePolicy, Shares, MAX_LIMIT};
use crate::stats::WaitHistogram;
use crate::sync::{fence, AtomicU64, AtomicUsize, Mutex, MutexGuard};

const COUNT_BITS: u32 = 21;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const ONE_QUEUED: u64 = 1 << COUNT_BITS;
/// Flipped at every limit change, so a racing fast-path compare-and-swap fails.
const LIMIT_EPOCH: u64 = 1 << (2 * COUNT_BITS);
const ADMITTED_SHIFT: u32 = 2 * COUNT_BITS + 1;
const ONE_ADMITTED: u64 = 1 << ADMITTED_SHIFT;
/// The most fast-path admissions the word holds before they are flushed.
const ADMITTED_CAP: u64 = (1 << (64 - ADMITTED_SHIFT)) - 1;

/// How many waiters one pass over the queue wakes before dropping the lock.
const WAKE_BATCH: usize = 16;

#[inline]
fn active(word: u64) -> usize {
    (word & COUNT_MASK) as usize
}

#[inline]
fn queued(word: u64) -> usize {
    ((word >> COUNT_BITS) & COUNT_MASK) as usize
}

#[inline]
fn fresh_admitted(word: u64) -> u64 {
    word >> ADMITTED_SHIFT
}

#[inline]
fn load(word: u64, limit: usize) -> Load {
    Load {
        active: active(word),
        queued: queued(word),
        limit,
    }
}

/// The number a waiter holds in the line (ids only grow, so the line is sorted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaiterId(u64);

/// What [`Semaphore::enqueue`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enqueued {
    /// A slot was free after all (it freed between the fast path and the lock).
    Admitted,
    /// No slot and no room in the queue.
    Full,
    /// In line; poll with [`Semaphore::poll_waiter`], leave with [`Semaphore::leave`].
    Waiting(WaiterId),
    /// It would have had to wait but may not (see [`Semaphore::enqueue_no_wait`]):
    /// counted as timed out, not put in line.
    Expired,
}

/// What [`Semaphore::poll_place`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Polled {
    /// Still in line; the waker is stored.
    Waiting,
    /// A slot was handed over (counted admitted).
    Admitted,
    /// A more critical call took its place in a full queue: it holds nothing.
    Displaced,
}

/// Why a waiter leaves the line without taking its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leave {
    /// It waited as long as it was allowed to.
    TimedOut,
    /// Its caller gave up (the future was dropped).
    Abandoned,
    /// It waited as long as it was allowed to, in shadow mode: it goes on beyond
    /// the limit instead of being rejected (counted by the shared state, not here).
    ShadowTimedOut,
}

/// What [`Semaphore::leave`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Left {
    /// The waiter was still in line and has left it.
    Removed,
    /// A slot had already been handed to it: the caller now holds that slot.
    HoldsSlot,
    /// A more critical call had taken its place in the line: it holds nothing.
    Displaced,
}

/// The limits and counts at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) active: usize,
    pub(crate) queued: usize,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    waker: Option<Waker>,
    /// `None` for a call without a class; in a line with classes it waits as default.
    class: Option<Criticality>,
}

impl Entry {
    fn line_class(&self) -> Criticality {
        self.class.unwrap_or(Criticality::Default)
    }
}

/// The waiting line, made by the first call that waits.
#[derive(Debug, Default)]
struct Waiters {
    /// Sorted by id: the arrival order, whatever the class.
    queue: VecDeque<Entry>,
    /// Made by the first call with a class.
    classes: Option<ClassCounts>,
    /// The line's history, for the queue options that read it.
    history: LineState,
}

impl Waiters {
    /// The line emptied: its history starts again.
    fn note_if_empty(&mut self) {
        if self.queue.is_empty() {
            self.history.emptied();
        }
    }
}

impl Waiters {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.queue.len()
    }
}

/// The class-aware counts, kept under the line's lock.
#[derive(Debug, Default)]
struct ClassCounts {
    /// Slots held by calls of each class.
    by_class: [usize; 3],
    /// Waiters of each class (plain calls in a line with classes count as default).
    queued: [usize; 3],
    /// The shares in force, as the last classed call or reconfiguration gave them.
    shares: Shares,
    /// Waiters displaced from the line and not yet told (polled or dropped).
    displaced: Vec<u64>,
    /// Calls turned away, by class and by [`ClassRejection`].
    rejected: [[u64; 3]; 3],
}

/// Why a call with a class was turned away, as counted per class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassRejection {
    /// No slot and no room in the line.
    Full = 0,
    /// A more critical call took its place in the line.
    Displaced = 1,
    /// No slot within its wait.
    Timeout = 2,
}

impl ClassRejection {
    /// The `cause` label.
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Displaced => "displaced",
            Self::Timeout => "timeout",
        }
    }
}

/// One class's counts at one moment (see [`Semaphore::class_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClassStats {
    pub(crate) active: usize,
    pub(crate) queued: usize,
    /// By [`ClassRejection`].
    pub(crate) rejected: [u64; 3],
}

impl ClassCounts {
    fn load(&self, word: u64, limit: usize) -> ClassLoad {
        ClassLoad {
            active: active(word),
            by_class: self.by_class,
            queued: self.queued,
            limit,
        }
    }
}

#[derive(Debug, Default)]
#[repr(C)]
struct Line {
    next_id: u64,
    /// Admissions counted under the lock, plus fast-path counts flushed from the word.
    admitted: u64,
    abandoned: u64,
    rejected_timeout: u64,
    /// Made by the first call that waits, as `Semaphore::waits` is: a pointer where
    /// a queue would take 32 bytes of every key. Last, next to `waits`: the two
    /// things a drop reads.
    waiters: Option<Box<Waiters>>,
}

impl Line {
    fn position(&self, id: WaiterId) -> Option<usize> {
        let waiters = self.waiters.as_ref()?;
        waiters.queue.binary_search_by_key(&id.0, |e| e.id).ok()
    }

    fn classes(&self) -> Option<&ClassCounts> {
        self.waiters.as_ref()?.classes.as_ref()
    }

    fn classes_mut(&mut self) -> Option<&mut ClassCounts> {
        self.waiters.as_mut()?.classes.as_mut()
    }

    /// Takes waiter `id` off the displaced list: `true` if it was displaced.
    fn take_displaced(&mut self, id: WaiterId) -> bool {
        let Some(classes) = self.classes_mut() else {
            return false;
        };
        match classes.displaced.iter().position(|&d| d == id.0) {
            Some(i) => {
                classes.displaced.swap_remove(i);
                true
            }
            None => false,
        }
    }
}

/// Wakers collected under the lock and woken after it is released.
struct WakeList {
    wakers: [Option<Waker>; WAKE_BATCH],
    len: usize,
}

impl WakeList {
    fn new() -> Self {
        Self {
            wakers: Default::default(),
            len: 0,
        }
    }

    fn is_full(&self) -> bool {
        self.len == WAKE_BATCH
    }

    fn push(&mut self, waker: Option<Waker>) {
        if let Some(slot) = self.wakers.get_mut(self.len) {
            *slot = waker;
            self.len += 1;
        }
    }

    fn wake_all(&mut self) {
        for slot in &mut self.wakers[..self.len] {
            if let Some(w) = slot.take() {
                w.wake();
            }
        }
        self.len = 0;
    }
}

/// The admission state of one bulkhead. See the module docs.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Semaphore {
    // First, the waiters at its end: with `waits`, what a drop reads (see `Shared`).
    line: Mutex<Line>,
    /// Made by the first call that waited: most bulkheads (most keys of a keyed
    /// one) never queue, and 272 bytes per key would be most of a key's footprint.
    waits: OnceLock<Box<WaitHistogram>>,
    // Hot fields together: the fast path touches only these.
    state: AtomicU64,
    max_concurrent: AtomicUsize,
    max_queue: AtomicUsize,
    /// Peaks since the last [`Semaphore::take_window_peaks`] (a demand period);
    /// never above the peaks below, so the fast path reads only this one.
    window_active: AtomicUsize,
    // Colder: peaks and rejections.
    window_queued: AtomicUsize,
    peak_active: AtomicUsize,
    peak_queued: AtomicUsize,
    rejected_full: AtomicU64,
}

impl Semaphore {
    /// A bulkhead with `max_concurrent` slots and room for `max_queue` waiters.
    /// The limits are assumed valid (at most [`MAX_LIMIT`]); the config validates them.
    pub(crate) fn new(max_concurrent: usize, max_queue: usize) -> Self {
        Self {
            state: AtomicU64::new(0),
            max_concurrent: AtomicUsize::new(max_concurrent.min(MAX_LIMIT)),
            max_queue: AtomicUsize::new(max_queue.min(MAX_LIMIT)),
            peak_active: AtomicUsize::new(0),
            peak_queued: AtomicUsize::new(0),
            window_active: AtomicUsize::new(0),
            window_queued: AtomicUsize::new(0),
            rejected_full: AtomicU64::new(0),
            waits: OnceLock::new(),
            line: Mutex::new(Line::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Line> {
        // Nothing panics while holding the lock; recover the data if it ever did.
        self.line.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a free slot when nobody is waiting, counting the admission in the
    /// same compare-and-swap. `false` sends the caller to the slow path (which
    /// also handles the rare flush of the admission count).
    #[inline]
    pub(crate) fn try_acquire(&self) -> bool {
        // The word first, then the limit: a limit stored before the word's epoch
        // flip that this load saw is visible to the load after it.
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            let limit = self.max_concurrent.load(Ordering::Relaxed);
            if !load(word, limit).slot_free() || fresh_admitted(word) == ADMITTED_CAP {
                return false;
            }
            match self.state.compare_exchange_weak(
                word,
                word + 1 + ONE_ADMITTED,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.note_active(active(word) + 1);
                    return true;
                }
                Err(actual) => word = actual,
            }
        }
    }

    /// Raises the active peaks to `n` if it is higher. Once the window's peak has
    /// been reached this is one shared read, so the fast path stays write-free
    /// (the window's peak is never above the other, so `n` below it is below both).
    #[inline]
    fn note_active(&self, n: usize) {
        if n > self.window_active.load(Ordering::Relaxed) {
            self.window_active.fetch_max(n, Ordering::Relaxed);
            if n > self.peak_active.load(Ordering::Relaxed) {
                self.peak_active.fetch_max(n, Ordering::Relaxed);
            }
        }
    }

    fn note_queued(&self, n: usize) {
        self.window_queued.fetch_max(n, Ordering::Relaxed);
        self.peak_queued.fetch_max(n, Ordering::Relaxed);
    }

    /// The most calls active right after an admission, and waiting, since the
    /// previous call (or since the bulkhead was built); a new window starts with
    /// no admission yet and the waiters now. Calls running from before with no
    /// admission since hold slots but do not ask for more, so they are not in it.
    pub(crate) fn take_window_peaks(&self) -> Counts {
        let _line = self.lock();
        let now = self.counts();
        Counts {
            active: self.window_active.swap(0, Ordering::SeqCst),
            queued: self
                .window_queued
                .swap(now.queued, Ordering::SeqCst)
                .max(now.queued),
        }
    }

    /// The most calls active and waiting at once since the bulkhead was built or
    /// the peaks were last reset, recorded at every change (not sampled).
    pub(crate) fn peaks(&self) -> Counts {
        Counts {
            active: self.peak_active.load(Ordering::Relaxed),
            queued: self.peak_queued.load(Ordering::Relaxed),
        }
    }

    /// Starts new peaks from the current counts (e.g. at the start of an
    /// observation period).
    ///
    /// The queue changes only under the lock held here; a fast-path admission
    /// may race the reset, so the counts are read again after the store and the
    /// peak raised to them: a peak is never left below the count it saw.
    pub(crate) fn reset_peaks(&self) {
        let _line = self.lock();
        let now = self.counts();
        self.peak_active.store(now.active, Ordering::SeqCst);
        self.peak_queued.store(now.queued, Ordering::SeqCst);
        // The window's peaks may not stay above these (see `note_active`).
        self.window_active.fetch_min(now.active, Ordering::SeqCst);
        self.window_queued.fetch_min(now.queued, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let after = self.counts();
        self.peak_active.fetch_max(after.active, Ordering::SeqCst);
        self.window_active.fetch_max(after.active, Ordering::SeqCst);
    }

    /// Moves the fast-path admission count out of the word into the line's total.
    fn flush_admitted(&self, line: &mut Line) {
        let mut word = self.state.load(Ordering::Acquire);
        while fresh_admitted(word) != 0 {
            let fresh = fresh_admitted(word);
            match self.state.compare_exchange(
                word,
                word - fresh * ONE_ADMITTED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    line.admitted += fresh;
                    return;
                }
                Err(actual) => word = actual,
            }
        }
    }

    /// Whether a newcomer would be turned away now: no slot it may take and no
    /// room in the queue. Lock-free; counts nothing.
    #[inline]
    pub(crate) fn is_full(&self) -> bool {
        let word = self.state.load(Ordering::Relaxed);
        let load = load(word, self.max_concurrent.load(Ordering::Relaxed));
        Place::of(load, self.max_queue.load(Ordering::Relaxed), false) == Place::Full
    }

    /// Counts a call turned away because the bulkhead was full.
    pub(crate) fn count_full(&self) {
        self.rejected_full.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes a slot that freed meanwhile, rejects when the queue is full, or joins
    /// the back of the line. Counts an admission, not a rejection (see [`Semaphore::count_full`]).
    pub(crate) fn enqueue(&self) -> Enqueued {
        self.join(true, None, true)
    }

    /// As [`Semaphore::enqueue`], for a service waiting in `poll_ready` (backpressure
    /// mode): `max_queue` does not apply, since a service waits for readiness
    /// instead of a call waiting in line; only [`MAX_LIMIT`] waiters fit the word.
    pub(crate) fn enqueue_ready(&self) -> Enqueued {
        self.join(true, Some(MAX_LIMIT), true)
    }

    /// As [`Semaphore::enqueue`], for a call that may not wait at all (its deadline
    /// has passed): where it would join the line it is counted as timed out instead
    /// (unless `shadow`: then it is let through beyond the limit and counted as such
    /// by the caller).
    pub(crate) fn enqueue_no_wait(&self, shadow: bool) -> Enqueued {
        self.join(false, None, !shadow)
    }

    /// As [`Semaphore::enqueue_no_wait`], for a call that may not wait by its
    /// nature (a hedge): where it would join the line it is answered `Expired` and
    /// nothing is counted; the caller turns it away as full.
    pub(crate) fn take_free(&self) -> Enqueued {
        self.join(false, None, false)
    }

    fn join(&self, may_wait: bool, max_queue: Option<usize>, count_expired: bool) -> Enqueued {
        let mut line = self.lock();
        // Only at its cap: below it, the word's count goes on numbering fast-path
        // admissions (which decides the ones an adaptive limit times).
        if fresh_admitted(self.state.load(Ordering::Acquire)) == ADMITTED_CAP {
            self.flush_admitted(&mut line);
        }
        let limit = self.max_concurrent.load(Ordering::Relaxed);
        let max_queue = max_queue.unwrap_or_else(|| self.max_queue.load(Ordering::Relaxed));
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            let (next, outcome) = match Place::of(load(word, limit), max_queue, may_wait) {
                Place::Admit => (word + 1, Enqueued::Admitted),
                Place::Full => return Enqueued::Full,
                Place::Expired => {
                    if count_expired {
                        line.rejected_timeout += 1;
                    }
                    return Enqueued::Expired;
                }
                Place::Wait => (word + ONE_QUEUED, Enqueued::Waiting(WaiterId(line.next_id))),
            };
            match self
                .state
                .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.note_active(active(next));
                    self.note_queued(queued(next));
                    if let Enqueued::Waiting(id) = outcome {
                        line.next_id += 1;
                        let waiters = line.waiters.get_or_insert_default();
                        waiters.queue.push_back(Entry {
                            id: id.0,
                            waker: None,
                            class: None,
                        });
                        if let Some(classes) = waiters.classes.as_mut() {
                            classes.queued[Criticality::Default.index()] += 1;
                        }
                    } else {
                        line.admitted += 1;
                    }
                    return outcome;
                }
                Err(actual) => word = actual,
            }
        }
    }

    /// `true` once a slot has been handed to waiter `id` (counting it admitted:
    /// call it no more after that); otherwise stores `waker` to be woken when it is.
    /// For a waiter without a class (which is never displaced).
    pub(crate) fn poll_waiter(&self, id: WaiterId, waker: &Waker) -> bool {
        self.poll_place(id, waker) == Polled::Admitted
    }

    /// Where waiter `id` stands: still waiting (its `waker` stored), handed a slot
    /// (counted admitted: call it no more after that), or displaced.
    pub(crate) fn poll_place(&self, id: WaiterId, waker: &Waker) -> Polled {
        let mut line = self.lock();
        match line.position(id) {
            Some(i) => {
                if let Some(entry) = line.waiters.as_mut().and_then(|w| w.queue.get_mut(i)) {
                    match &mut entry.waker {
                        Some(w) if w.will_wake(waker) => {}
                        slot => *slot = Some(waker.clone()),
                    }
                }
                Polled::Waiting
            }
            None if line.take_displaced(id) => Polled::Displaced,
            None => {
                line.admitted += 1;
                Polled::Admitted
            }
        }
    }

    /// Waiter `id` leaves the line for `why`. If a slot was handed to it meanwhile,
    /// it holds that slot: a timed-out waiter is then admitted after all (counted
    /// as such, the caller uses the slot), an abandoned one is counted abandoned
    /// (the caller releases the slot).
    pub(crate) fn leave(&self, id: WaiterId, why: Leave) -> Left {
        let mut line = self.lock();
        let left = match line.position(id) {
            Some(i) => {
                if let Some(waiters) = line.waiters.as_mut() {
                    let entry = waiters.queue.remove(i);
                    if let (Some(entry), Some(classes)) = (entry, waiters.classes.as_mut()) {
                        classes.queued[entry.line_class().index()] -= 1;
                    }
                    waiters.note_if_empty();
                }
                self.state.fetch_sub(ONE_QUEUED, Ordering::AcqRel);
                Left::Removed
            }
            None if line.take_displaced(id) => return Left::Displaced,
            None => Left::HoldsSlot,
        };
        match (why, left) {
            (Leave::TimedOut, Left::Removed) => line.rejected_timeout += 1,
            (Leave::TimedOut | Leave::ShadowTimedOut, Left::HoldsSlot) => line.admitted += 1,
            (Leave::ShadowTimedOut, Left::Removed) => {}
            (Leave::Abandoned, _) => line.abandoned += 1,
            (_, Left::Displaced) => {}
        }
        left
    }

    /// Records the wait of a waiter that got its slot.
    pub(crate) fn record_wait(&self, waited: Duration) {
        self.waits
            .get_or_init(|| Box::new(WaitHistogram::new()))
            .record(waited);
    }

    /// Frees one slot, handing it to the front of the line if anyone waits.
    #[inline]
    pub(crate) fn release(&self) {
        let old = self.state.fetch_sub(1, Ordering::AcqRel);
        if queued(old) != 0 {
            self.hand_over();
        }
    }

    /// Hands free slots to waiters, front first, while `active < max_concurrent`.
    fn hand_over(&self) {
        let mut wakers = WakeList::new();
        loop {
            let more = {
                let mut line = self.lock();
                self.hand_over_locked(&mut line, &mut wakers)
            };
            wakers.wake_all();
            if !more {
                return;
            }
        }
    }

    /// One batch of hand-overs; `true` when the batch filled up and more may follow.
    fn hand_over_locked(&self, line: &mut Line, wakers: &mut WakeList) -> bool {
        if line.classes().is_some() {
            return self.hand_over_classes(line, wakers);
        }
        let limit = self.max_concurrent.load(Ordering::Relaxed);
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            if !load(word, limit).hands_over() {
                return false;
            }
            if wakers.is_full() {
                return true;
            }
            // One waiter becomes active: +1 active, -1 queued, in one step.
            let next = word + 1 - ONE_QUEUED;
            match self
                .state
                .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    word = next;
                    self.note_active(active(next));
                    let entry = line.waiters.as_mut().and_then(|w| {
                        let entry = if w.history.newest_first() {
                            w.queue.pop_back()
                        } else {
                            w.queue.pop_front()
                        };
                        w.note_if_empty();
                        entry
                    });
                    wakers.push(entry.and_then(|e| e.waker));
                }
                Err(actual) => word = actual,
            }
        }
    }

    /// As [`Semaphore::hand_over_locked`], in a line with classes: each freed slot
    /// goes to the front of the most critical line still under its share.
    fn hand_over_classes(&self, line: &mut Line, wakers: &mut WakeList) -> bool {
        let limit = self.max_concurrent.load(Ordering::Relaxed);
        let mut word = self.state.load(Ordering::Acquire);
        let Some(waiters) = line.waiters.as_mut() else {
            return false;
        };
        let Some(classes) = waiters.classes.as_mut() else {
            return false;
        };
        loop {
            let Some(class) = classes.shares.next(&classes.load(word, limit)) else {
                return false;
            };
            let of_class = |e: &Entry| e.line_class() == class;
            let found = if waiters.history.newest_first() {
                waiters.queue.iter().rposition(of_class)
            } else {
                waiters.queue.iter().position(of_class)
            };
            let Some(i) = found else {
                // The counts say someone of that class waits: never reached.
                return false;
            };
            if wakers.is_full() {
                return true;
            }
            let next = word + 1 - ONE_QUEUED;
            match self
                .state
                .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    word = next;
                    self.note_active(active(next));
                    let entry = waiters.queue.remove(i);
                    if waiters.queue.is_empty() {
                        waiters.history.emptied();
                    }
                    classes.queued[class.index()] -= 1;
                    if let Some(entry) = entry {
                        if entry.class.is_some() {
                            classes.by_class[class.index()] += 1;
                        }
                        wakers.push(entry.waker);
                    }
                }
                Err(actual) => word = actual,
            }
        }
    }

    /// Admits a call of `class`, puts it in its class's line, displaces a less
    /// critical waiter for it, or turns it away, by the queue policy's
    /// [`Shares::place`] under `shares` (kept for the hand-overs that follow).
    /// `may_wait` and `count_expired` are as for [`Semaphore::enqueue`] and
    /// [`Semaphore::enqueue_no_wait`]. A displaced waiter is woken to learn it.
    pub(crate) fn join_classed(
        &self,
        class: Criticality,
        shares: Shares,
        may_wait: bool,
        count_expired: bool,
    ) -> Enqueued {
        let mut displaced = None;
        let outcome = {
            let mut line = self.lock();
            if fresh_admitted(self.state.load(Ordering::Acquire)) == ADMITTED_CAP {
                self.flush_admitted(&mut line);
            }
            self.join_classed_locked(
                &mut line,
                class,
                shares,
                may_wait,
                count_expired,
                &mut displaced,
            )
        };
        if let Some(waker) = displaced {
            waker.wake();
        }
        outcome
    }

    fn join_classed_locked(
        &self,
        line: &mut Line,
        class: Criticality,
        shares: Shares,
        may_wait: bool,
        count_expired: bool,
        displaced: &mut Option<Waker>,
    ) -> Enqueued {
        let limit = self.max_concurrent.load(Ordering::Relaxed);
        let max_queue = self.max_queue.load(Ordering::Relaxed);
        let next_id = line.next_id;
        let waiters = line.waiters.get_or_insert_default();
        if waiters.classes.is_none() {
            // Plain waiters already in line wait as default from now on.
            let mut counts = ClassCounts::default();
            counts.queued[Criticality::Default.index()] = waiters.queue.len();
            waiters.classes = Some(counts);
        }
        let Some(classes) = waiters.classes.as_mut() else {
            return Enqueued::Full;
        };
        classes.shares = shares;
        let mut word = self.state.load(Ordering::Acquire);
        loop {
            let place = shares.place(&classes.load(word, limit), class, max_queue, may_wait);
            let next = match place {
                ClassPlace::Admit => word + 1,
                ClassPlace::Wait => word + ONE_QUEUED,
                ClassPlace::Displace(_) => word,
                ClassPlace::Full => return Enqueued::Full,
                ClassPlace::Expired => {
                    if count_expired {
                        line.rejected_timeout += 1;
                    }
                    return Enqueued::Expired;
                }
            };
            // A displacement changes no count in the word: one waiter for another.
            if next != word {
                if let Err(actual) =
                    self.state
                        .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
                {
                    word = actual;
                    continue;
                }
            }
            self.note_active(active(next));
            self.note_queued(queued(next));
            if place == ClassPlace::Admit {
                classes.by_class[class.index()] += 1;
                line.admitted += 1;
                return Enqueued::Admitted;
            }
            if let ClassPlace::Displace(victim) = place {
                // The newest of the least critical: it has waited least.
                if let Some(i) = waiters.queue.iter().rposition(|e| e.line_class() == victim) {
                    if let Some(entry) = waiters.queue.remove(i) {
                        classes.queued[victim.index()] -= 1;
                        classes.displaced.push(entry.id);
                        // Counted here, even if its caller never looks again.
                        self.rejected_full.fetch_add(1, Ordering::Relaxed);
                        classes.rejected[victim.index()][ClassRejection::Displaced as usize] += 1;
                        *displaced = entry.waker;
                    }
                }
            }
            waiters.queue.push_back(Entry {
                id: next_id,
                waker: None,
                class: Some(class),
            });
            classes.queued[class.index()] += 1;
            line.next_id += 1;
            return Enqueued::Waiting(WaiterId(next_id));
        }
    }

    /// Frees a slot held by a call of `class`, handing it to the front of the most
    /// critical line under its share, if any.
    pub(crate) fn release_classed(&self, class: Criticality) {
        let mut wakers = WakeList::new();
        let more = {
            let mut line = self.lock();
            if let Some(classes) = line.classes_mut() {
                let held = &mut classes.by_class[class.index()];
                *held = held.saturating_sub(1);
            }
            let old = self.state.fetch_sub(1, Ordering::AcqRel);
            queued(old) != 0 && self.hand_over_locked(&mut line, &mut wakers)
        };
        wakers.wake_all();
        if more {
            self.hand_over();
        }
    }

    /// Sets the shares a line with classes hands slots over by (nothing without
    /// classes: the first classed call brings them), then hands over what they allow.
    pub(crate) fn set_shares(&self, shares: Shares) {
        {
            let mut line = self.lock();
            match line.classes_mut() {
                Some(classes) => classes.shares = shares,
                None => return,
            }
        }
        self.hand_over();
    }

    /// Counts a call of `class` turned away for `why` (a displacement is counted
    /// when it happens, by [`Semaphore::join_classed`]).
    pub(crate) fn count_class_rejection(&self, class: Criticality, why: ClassRejection) {
        let mut line = self.lock();
        if let Some(classes) = line.classes_mut() {
            classes.rejected[class.index()][why as usize] += 1;
        }
    }

    /// Each class's counts, most critical first; `None` before the first call with
    /// a class.
    pub(crate) fn class_stats(&self) -> Option<[ClassStats; 3]> {
        let line = self.lock();
        let classes = line.classes()?;
        Some(Criticality::ALL.map(|c| ClassStats {
            active: classes.by_class[c.index()],
            queued: classes.queued[c.index()],
            rejected: classes.rejected[c.index()],
        }))
    }

    /// An arrival at `now` that may join the line, under `policy` (one with an
    /// option that reads the line's history): the policy moves the history on
    /// ([`QueuePolicy::arrive`]), which also decides the order of the next
    /// hand-overs, and the arrival gets it as it saw it.
    pub(crate) fn arrival(&self, now: Instant, policy: &QueuePolicy) -> LineState {
        let mut line = self.lock();
        let empty = queued(self.state.load(Ordering::Acquire)) == 0;
        let waiters = line.waiters.get_or_insert_default();
        policy.arrive(&mut waiters.history, empty, now)
    }

    /// Whether the line stands now (with a controlled delay), as the last arrival
    /// saw it; `false` once it empties.
    pub(crate) fn stands(&self) -> bool {
        self.lock()
            .waiters
            .as_ref()
            .is_some_and(|w| w.history.standing())
    }

    /// Whether waiter `id` is still in line.
    #[cfg(test)]
    fn in_line(&self, id: WaiterId) -> bool {
        self.lock().position(id).is_some()
    }

    /// Slots held and waiters, by class (zero without classes).
    #[cfg(test)]
    pub(crate) fn class_counts(&self) -> ([usize; 3], [usize; 3]) {
        let line = self.lock();
        line.classes()
            .map_or(([0; 3], [0; 3]), |c| (c.by_class, c.queued))
    }

    /// Changes the limits. Growing `max_concurrent` hands the new slots to waiters
    /// at once; shrinking preempts nothing. Shrinking `max_queue` removes nobody
    /// from the line; newcomers are turned away until it is short enough.
    #[cfg(test)]
    pub(crate) fn set_limits(&self, max_concurrent: usize, max_queue: usize) {
        self.set_limits_with(|| max_concurrent, Some(max_queue));
    }

    /// Changes `max_concurrent` to what `max_concurrent()` returns under the lock
    /// (and `max_queue` when given): when several callers apply a limit that keeps
    /// moving, the last one to take the lock applies the latest value, never an
    /// older one.
    pub(crate) fn set_limits_with(
        &self,
        max_concurrent: impl FnOnce() -> usize,
        max_queue: Option<usize>,
    ) {
        {
            let _line = self.lock();
            self.max_concurrent
                .store(max_concurrent().min(MAX_LIMIT), Ordering::Relaxed);
            if let Some(q) = max_queue {
                self.max_queue.store(q.min(MAX_LIMIT), Ordering::Relaxed);
            }
            // Fail any fast-path compare-and-swap that read the old limit.
            self.state.fetch_xor(LIMIT_EPOCH, Ordering::AcqRel);
        }
        self.hand_over();
    }

    /// The limit of active calls now.
    pub(crate) fn max_concurrent(&self) -> usize {
        self.max_concurrent.load(Ordering::Relaxed)
    }

    /// The room in the line now.
    pub(crate) fn max_queue(&self) -> usize {
        self.max_queue.load(Ordering::Relaxed)
    }

    /// A count that grows by one with each fast-path admission (it restarts every
    /// two million, when the slow path flushes it): what decides which fast-path
    /// admissions an adaptive limit times.
    #[inline]
    pub(crate) fn admissions_hint(&self) -> u64 {
        fresh_admitted(self.state.load(Ordering::Relaxed))
    }

    /// Active and waiting calls now.
    pub(crate) fn counts(&self) -> Counts {
        let word = self.state.load(Ordering::Acquire);
        Counts {
            active: active(word),
            queued: queued(word),
        }
    }

    /// Calls admitted so far (at once or after waiting), exact.
    pub(crate) fn admitted(&self) -> u64 {
        let line = self.lock();
        // Under the lock, the flushed total and the word's count never overlap.
        line.admitted + fresh_admitted(self.state.load(Ordering::Acquire))
    }

    /// Calls turned away because the bulkhead was full.
    pub(crate) fn rejected_full(&self) -> u64 {
        self.rejected_full.load(Ordering::Relaxed)
    }

    /// Waiters that left because they waited as long as they were allowed to.
    pub(crate) fn rejected_timeout(&self) -> u64 {
        self.lock().rejected_timeout
    }

    /// Waiters whose callers gave up (while in line, or handed a slot too late).
    pub(crate) fn abandoned(&self) -> u64 {
        self.lock().abandoned
    }

    /// Sets the word's fast-path admission count (to test the flush at the cap).
    #[cfg(test)]
    fn preset_fresh_admitted(&self, n: u64) {
        let word = self.state.load(Ordering::Acquire);
        let cleared = word & !(ADMITTED_CAP << ADMITTED_SHIFT);
        self.state
            .store(cleared | (n << ADMITTED_SHIFT), Ordering::Release);
    }

    /// The admission-wait distribution.
    pub(crate) fn waits(&self) -> &WaitHistogram {
        /// What a bulkhead reports before any call has waited.
        static NONE_YET: WaitHistogram = WaitHistogram::new();
        self.waits.get().map_or(&NONE_YET, |w| w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    #[derive(Default)]
    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    fn flag() -> (Arc<Flag>, Waker) {
        let f = Arc::new(Flag::default());
        (f.clone(), Waker::from(f))
    }
    fn woken(f: &Flag) -> bool {
        f.0.load(Ordering::SeqCst)
    }

    fn id(e: Enqueued) -> WaiterId {
        match e {
            Enqueued::Waiting(id) => id,
            other => panic!("expected to wait, got {other:?}"),
        }
    }

    fn counts(active: usize, queued: usize) -> Counts {
        Counts { active, queued }
    }

    #[test]
    fn fills_slots_then_queue_then_is_full() {
        let m = Semaphore::new(2, 1);
        assert!(m.try_acquire());
        assert!(m.try_acquire());
        assert!(!m.try_acquire());
        assert!(!m.is_full());
        let w = id(m.enqueue());
        assert_eq!(m.counts(), counts(2, 1));
        assert!(m.is_full());
        assert_eq!(m.enqueue(), Enqueued::Full);
        assert_eq!(m.admitted(), 2);
        let (f, waker) = flag();
        assert!(!m.poll_waiter(w, &waker));
        m.release();
        assert!(woken(&f));
        assert!(m.poll_waiter(w, &waker));
        assert_eq!(m.counts(), counts(2, 0));
    }

    #[test]
    fn peaks_are_recorded_at_every_change_and_reset_to_the_current_counts() {
        let m = Semaphore::new(3, 2);
        for _ in 0..3 {
            assert!(m.try_acquire());
        }
        let w1 = id(m.enqueue());
        let _w2 = id(m.enqueue());
        assert_eq!(m.peaks(), counts(3, 2));
        assert_eq!(m.leave(w1, Leave::Abandoned), Left::Removed);
        m.release();
        m.release();
        // The peaks remember the high-water marks after the counts fell.
        assert_eq!(m.counts(), counts(2, 0));
        assert_eq!(m.peaks(), counts(3, 2));
        m.reset_peaks();
        assert_eq!(m.peaks(), counts(2, 0));
        m.release();
        m.release();
        assert!(m.try_acquire());
        assert_eq!(m.peaks(), counts(2, 0));
    }

    #[test]
    fn newcomers_do_not_overtake_waiters() {
        let m = Semaphore::new(1, 5);
        assert!(m.try_acquire());
        let a = id(m.enqueue());
        // The slot frees and goes to `a`, not to a newcomer on the fast path.
        m.release();
        assert!(!m.try_acquire());
        let (_f, waker) = flag();
        assert!(m.poll_waiter(a, &waker));
        assert_eq!(m.counts().active, 1);
    }

    #[test]
    fn hands_over_in_order_and_skips_those_who_left() {
        let m = Semaphore::new(1, 5);
        assert!(m.try_acquire());
        let ids: Vec<_> = (0..4).map(|_| id(m.enqueue())).collect();
        let (_f, waker) = flag();
        assert_eq!(m.leave(ids[1], Leave::Abandoned), Left::Removed);
        m.release();
        assert!(m.poll_waiter(ids[0], &waker));
        assert!(!m.poll_waiter(ids[2], &waker));
        m.release();
        assert!(m.poll_waiter(ids[2], &waker));
        assert!(!m.poll_waiter(ids[3], &waker));
        assert_eq!(m.abandoned(), 1);
        assert_eq!(m.leave(ids[3], Leave::TimedOut), Left::Removed);
        assert_eq!(m.rejected_timeout(), 1);
        // ids[2] holds the slot: leaving now reports it.
        assert_eq!(m.leave(ids[2], Leave::Abandoned), Left::HoldsSlot);
        m.release();
        assert_eq!(m.counts(), counts(0, 0));
    }

    #[test]
    fn growing_admits_waiters_and_shrinking_preempts_nothing() {
        let m = Semaphore::new(2, 10);
        assert!(m.try_acquire());
        assert!(m.try_acquire());
        let ids: Vec<_> = (0..5).map(|_| id(m.enqueue())).collect();
        let flags: Vec<_> = ids
            .iter()
            .map(|&w| {
                let (f, waker) = flag();
                assert!(!m.poll_waiter(w, &waker));
                f
            })
            .collect();
        m.set_limits(5, 10);
        assert_eq!(m.counts(), counts(5, 2));
        assert!(flags[..3].iter().all(|f| woken(f)));
        assert!(!woken(&flags[3]));
        m.set_limits(1, 10);
        assert_eq!(m.counts().active, 5);
        // Releases bring active down to the new limit before anyone else gets in.
        for expected in [4, 3, 2, 1] {
            m.release();
            assert_eq!(m.counts().active, expected);
            assert_eq!(m.counts().queued, 2);
        }
        m.release();
        assert_eq!(m.counts(), counts(1, 1));
        assert!(woken(&flags[3]));
    }

    #[test]
    fn a_limit_change_fails_a_racing_fast_path_compare_and_swap() {
        let m = Semaphore::new(3, 0);
        assert!(m.try_acquire());
        assert!(m.try_acquire());
        // A fast-path caller has read the word and the old limit (3 > 2 active)...
        let seen = m.state.load(Ordering::Acquire);
        assert!(active(seen) < m.max_concurrent.load(Ordering::Relaxed));
        // ...when the limit falls to 2.
        m.set_limits(2, 0);
        let raced = m.state.compare_exchange(
            seen,
            seen + 1 + ONE_ADMITTED,
            Ordering::Acquire,
            Ordering::Acquire,
        );
        assert!(raced.is_err(), "the swap must see that the limit changed");
        // Retrying reads the new limit: no admission at active = limit.
        assert!(!m.try_acquire());
        assert_eq!(m.counts().active, 2);
        assert_eq!(m.admitted(), 2);
    }

    #[test]
    fn a_large_grow_wakes_every_batch() {
        let m = Semaphore::new(1, 100);
        assert!(m.try_acquire());
        let flags: Vec<_> = (0..40)
            .map(|_| {
                let w = id(m.enqueue());
                let (f, waker) = flag();
                assert!(!m.poll_waiter(w, &waker));
                f
            })
            .collect();
        m.set_limits(41, 100);
        assert!(flags.iter().all(|f| woken(f)));
        assert_eq!(m.counts().active, 41);
    }

    #[test]
    fn the_wait_queue_and_histogram_are_made_by_the_first_call_that_waits() {
        let m = Semaphore::new(1, 2);
        assert!(m.try_acquire());
        assert!(m.lock().waiters.is_none());
        assert!(m.waits.get().is_none());
        assert_eq!(m.waits().summary(1).queued_admissions, 0);
        let w = id(m.enqueue());
        assert_eq!(m.lock().waiters.as_ref().map(|q| q.len()), Some(1));
        m.release();
        let (_f, waker) = flag();
        assert!(m.poll_waiter(w, &waker));
        m.record_wait(Duration::from_millis(3));
        let waits = m.waits().summary(m.admitted());
        assert_eq!(waits.queued_admissions, 1);
        assert_eq!(waits.max, Duration::from_millis(3));
        // The queue stays once made, empty.
        assert_eq!(m.lock().waiters.as_ref().map(|q| q.len()), Some(0));
    }

    #[test]
    fn enqueue_takes_a_slot_that_freed_and_rejects_when_the_queue_is_full() {
        let m = Semaphore::new(1, 0);
        assert_eq!(m.enqueue(), Enqueued::Admitted);
        assert_eq!(m.admitted(), 1);
        assert!(m.is_full());
        assert_eq!(m.enqueue(), Enqueued::Full);
        m.release();
        assert!(!m.is_full());
    }

    #[test]
    fn a_call_that_may_not_wait_takes_a_free_slot_or_is_counted_timed_out() {
        let m = Semaphore::new(1, 1);
        assert_eq!(m.enqueue_no_wait(false), Enqueued::Admitted);
        assert_eq!(m.enqueue_no_wait(false), Enqueued::Expired);
        assert_eq!(m.rejected_timeout(), 1);
        assert_eq!(m.peaks().queued, 0);
        let _w = id(m.enqueue());
        // With the queue full, it is turned away as full, like everyone else.
        assert_eq!(m.enqueue_no_wait(false), Enqueued::Full);
        assert_eq!(m.counts(), counts(1, 1));
    }

    #[test]
    fn the_admission_count_is_flushed_at_its_cap_and_stays_exact() {
        let m = Semaphore::new(2, 1);
        m.preset_fresh_admitted(ADMITTED_CAP - 1);
        assert!(m.try_acquire());
        assert_eq!(m.admitted(), ADMITTED_CAP);
        m.release();
        // At the cap the fast path declines; the slow path flushes and admits.
        assert!(!m.try_acquire());
        assert!(!m.is_full());
        assert_eq!(m.enqueue(), Enqueued::Admitted);
        assert_eq!(m.admitted(), ADMITTED_CAP + 1);
        assert!(m.try_acquire());
        assert_eq!(m.admitted(), ADMITTED_CAP + 2);
        assert_eq!(m.counts(), counts(2, 0));
    }

    #[test]
    fn threads_racing_never_exceed_the_limit_and_return_every_slot() {
        let m = Arc::new(Semaphore::new(3, 4));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    let (_f, waker) = flag();
                    let mut admitted = 0u32;
                    for i in 0..2_000u32 {
                        let holds = if m.try_acquire() {
                            true
                        } else if m.is_full() {
                            false
                        } else {
                            match m.enqueue() {
                                Enqueued::Admitted => true,
                                Enqueued::Full | Enqueued::Expired => false,
                                Enqueued::Waiting(id) => {
                                    // Spin a while, then either give up or keep waiting
                                    // until the slot comes (it must: holders release).
                                    let patient = (i + t) % 3 != 0;
                                    let mut spins = 0u32;
                                    loop {
                                        if m.poll_waiter(id, &waker) {
                                            break true;
                                        }
                                        spins += 1;
                                        if !patient && spins > 50 {
                                            break m.leave(id, Leave::TimedOut) == Left::HoldsSlot;
                                        }
                                        assert!(spins < 10_000_000, "a slot was never handed over");
                                        std::thread::yield_now();
                                    }
                                }
                            }
                        };
                        if holds {
                            admitted += 1;
                            assert!(m.counts().active <= 3);
                            std::thread::yield_now();
                            m.release();
                        }
                    }
                    admitted
                })
            })
            .collect();
        let admitted: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(admitted > 0);
        assert_eq!(m.counts(), counts(0, 0));
    }

    mod schedule {
        //! A random schedule of arrivals, completions, cancellations, timeouts and
        //! limit changes, checked step by step against a plain model and the invariants.
        use super::*;
        use proptest::prelude::*;
        use std::collections::{HashSet, VecDeque};

        #[derive(Debug, Clone)]
        enum Op {
            Arrive,
            Complete,
            Abandon(usize),
            TimeOut(usize),
            Poll(usize),
            SetLimits(usize, usize),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => Just(Op::Arrive),
                3 => Just(Op::Complete),
                1 => any::<usize>().prop_map(Op::Abandon),
                1 => any::<usize>().prop_map(Op::TimeOut),
                2 => any::<usize>().prop_map(Op::Poll),
                1 => (1..6usize, 0..5usize).prop_map(|(c, q)| Op::SetLimits(c, q)),
            ]
        }

        /// What the semaphore should do, written as plainly as possible.
        struct Model {
            limit: usize,
            max_queue: usize,
            active: usize,
            line: VecDeque<u64>,
            handed: HashSet<u64>,
            next_id: u64,
        }

        impl Model {
            fn hand_over(&mut self) {
                while self.active < self.limit {
                    let Some(id) = self.line.pop_front() else {
                        break;
                    };
                    self.handed.insert(id);
                    self.active += 1;
                }
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
            #[test]
            fn never_over_the_limits_fifo_and_every_permit_returned(
                limit in 1..5usize,
                max_queue in 0..5usize,
                ops in proptest::collection::vec(op(), 1..200),
            ) {
                let m = Semaphore::new(limit, max_queue);
                let mut model = Model {
                    limit, max_queue, active: 0, line: VecDeque::new(),
                    handed: HashSet::new(), next_id: 0,
                };
                // Calls holding a slot (count only), and waiters by id.
                let mut holders = 0usize;
                let mut waiters: Vec<WaiterId> = Vec::new();
                let mut admitted_in_order: Vec<u64> = Vec::new();
                let mut admitted = 0u64;
                let (_f, waker) = flag();

                for op in ops {
                    let before = m.counts();
                    match op {
                        Op::Arrive => {
                            let expect = if model.line.is_empty() && model.active < model.limit {
                                model.active += 1;
                                admitted += 1;
                                "admitted"
                            } else if model.line.len() >= model.max_queue {
                                "full"
                            } else {
                                model.line.push_back(model.next_id);
                                model.next_id += 1;
                                "waiting"
                            };
                            let got = if m.try_acquire() {
                                holders += 1;
                                "admitted"
                            } else if m.is_full() {
                                "full"
                            } else {
                                match m.enqueue() {
                                    Enqueued::Admitted => { holders += 1; "admitted" }
                                    Enqueued::Full => "full",
                                    Enqueued::Expired => "expired",
                                    Enqueued::Waiting(id) => {
                                        prop_assert!(!m.poll_waiter(id, &waker));
                                        waiters.push(id);
                                        "waiting"
                                    }
                                }
                            };
                            prop_assert_eq!(got, expect);
                        }
                        Op::Complete => {
                            if holders > 0 {
                                holders -= 1;
                                model.active -= 1;
                                model.hand_over();
                                m.release();
                            }
                        }
                        Op::Abandon(i) | Op::TimeOut(i) if !waiters.is_empty() => {
                            let why = if matches!(op, Op::Abandon(_)) { Leave::Abandoned } else { Leave::TimedOut };
                            let id = waiters.remove(i % waiters.len());
                            let left = m.leave(id, why);
                            if model.handed.remove(&id.0) {
                                prop_assert_eq!(left, Left::HoldsSlot);
                                if why == Leave::Abandoned {
                                    // The caller is gone: the slot goes on.
                                    model.active -= 1;
                                    model.hand_over();
                                    m.release();
                                } else {
                                    // The slot arrived with the timer: the call proceeds.
                                    holders += 1;
                                    admitted += 1;
                                    admitted_in_order.push(id.0);
                                }
                            } else {
                                prop_assert_eq!(left, Left::Removed);
                                model.line.retain(|&w| w != id.0);
                            }
                        }
                        Op::Poll(i) if !waiters.is_empty() => {
                            let k = i % waiters.len();
                            let id = waiters[k];
                            let granted = m.poll_waiter(id, &waker);
                            prop_assert_eq!(granted, model.handed.remove(&id.0));
                            if granted {
                                waiters.remove(k);
                                holders += 1;
                                admitted += 1;
                                admitted_in_order.push(id.0);
                            }
                        }
                        Op::SetLimits(c, q) => {
                            model.limit = c;
                            model.max_queue = q;
                            model.hand_over();
                            m.set_limits(c, q);
                        }
                        Op::Abandon(_) | Op::TimeOut(_) | Op::Poll(_) => {}
                    }
                    let after = m.counts();
                    prop_assert_eq!(after, counts(model.active, model.line.len()));
                    prop_assert_eq!(m.admitted(), admitted);
                    // Nobody is admitted above the limit, nobody queues above the bound.
                    if after.active > before.active {
                        prop_assert!(after.active <= model.limit);
                    }
                    if after.queued > before.queued {
                        prop_assert!(after.queued <= model.max_queue);
                    }
                    // A slot never sits free while someone waits.
                    prop_assert!(after.queued == 0 || after.active >= model.limit);
                }

                // Slots were handed over first come, first served: the model hands
                // them to the front of its line, and every poll above agreed with it.
                prop_assert!(admitted_in_order.iter().all(|&id| id < model.next_id));

                // Everyone finishes or leaves: every slot comes back.
                for id in waiters.drain(..) {
                    if m.leave(id, Leave::Abandoned) == Left::HoldsSlot {
                        m.release();
                    }
                }
                for _ in 0..holders {
                    m.release();
                }
                prop_assert_eq!(m.counts(), counts(0, 0));
            }
        }
    }

    mod classes {
        //! Classes: shares, a line per class, displacement; unit cases, then a random
        //! schedule checked against the invariants step by step.
        use super::*;
        use proptest::prelude::*;

        const C: Criticality = Criticality::Critical;
        const D: Criticality = Criticality::Default;
        const S: Criticality = Criticality::Sheddable;

        fn shares(default: u8, sheddable: u8) -> Shares {
            Shares { default, sheddable }
        }

        fn join(m: &Semaphore, class: Criticality) -> Enqueued {
            m.join_classed(class, shares(90, 50), true, true)
        }

        /// With every share at 100 %: only the order of the lines is at work.
        fn join_any(m: &Semaphore, class: Criticality) -> Enqueued {
            m.join_classed(class, shares(100, 100), true, true)
        }

        #[test]
        fn a_class_holds_at_most_its_share_and_the_rest_goes_to_others() {
            let m = Semaphore::new(4, 4);
            // Sheddable may hold 2 of 4 slots.
            assert_eq!(join(&m, S), Enqueued::Admitted);
            assert_eq!(join(&m, S), Enqueued::Admitted);
            let third = id(join(&m, S));
            assert_eq!(m.counts(), counts(2, 1));
            // Two slots are free, but not for sheddable: a critical call takes one.
            assert_eq!(join(&m, C), Enqueued::Admitted);
            assert_eq!(m.class_counts(), ([1, 0, 2], [0, 0, 1]));
            // A sheddable slot freed goes to the sheddable waiter.
            m.release_classed(S);
            let (_f, waker) = flag();
            assert_eq!(m.poll_place(third, &waker), Polled::Admitted);
            assert_eq!(m.class_counts(), ([1, 0, 2], [0, 0, 0]));
            for class in [C, S, S] {
                m.release_classed(class);
            }
            assert_eq!(m.counts(), counts(0, 0));
            assert_eq!(m.class_counts(), ([0; 3], [0; 3]));
        }

        #[test]
        fn a_freed_slot_goes_to_the_most_critical_line_first_in_first_out_within_it() {
            let m = Semaphore::new(1, 10);
            assert_eq!(join_any(&m, D), Enqueued::Admitted);
            let s1 = id(join_any(&m, S));
            let d1 = id(join_any(&m, D));
            let c1 = id(join_any(&m, C));
            let c2 = id(join_any(&m, C));
            let (_f, waker) = flag();
            let mut served = Vec::new();
            let mut class_of = vec![(s1, S), (d1, D), (c1, C), (c2, C)];
            for _ in 0..4 {
                let holder = served.last().map_or(D, |&(_, c)| c);
                m.release_classed(holder);
                let (i, _) = class_of
                    .iter()
                    .enumerate()
                    .find(|(_, (w, _))| m.poll_place(*w, &waker) == Polled::Admitted)
                    .expect("a waiter got the slot");
                served.push(class_of.remove(i));
            }
            assert_eq!(served, [(c1, C), (c2, C), (d1, D), (s1, S)]);
            m.release_classed(S);
            assert_eq!(m.counts(), counts(0, 0));
        }

        #[test]
        fn a_full_queue_displaces_the_newest_least_critical_waiter_at_once() {
            let m = Semaphore::new(1, 2);
            assert_eq!(join(&m, C), Enqueued::Admitted);
            let (fs, waker_s) = flag();
            let s_old = id(join(&m, S));
            let s_new = id(join(&m, S));
            assert!(!m.poll_waiter(s_old, &waker_s));
            let (fn_, waker_n) = flag();
            assert_eq!(m.poll_place(s_new, &waker_n), Polled::Waiting);
            // Full: a default newcomer takes the newest sheddable's place.
            let d = id(join(&m, D));
            assert!(woken(&fn_), "the displaced waiter is woken to learn it");
            assert!(!woken(&fs));
            assert_eq!(m.poll_place(s_new, &waker_n), Polled::Displaced);
            assert_eq!(m.counts(), counts(1, 2));
            assert_eq!(m.rejected_full(), 1);
            // A sheddable newcomer finds it full: nobody less critical to displace.
            assert_eq!(join(&m, S), Enqueued::Full);
            // A critical newcomer displaces the other sheddable, then the default.
            let c = id(join(&m, C));
            assert_eq!(m.leave(s_old, Leave::TimedOut), Left::Displaced);
            let c2 = id(join(&m, C));
            assert_eq!(m.leave(d, Leave::Abandoned), Left::Displaced);
            // Two critical waiters fill the queue: the next critical is turned away.
            assert_eq!(join(&m, C), Enqueued::Full);
            assert_eq!(
                m.rejected_full(),
                3,
                "three displaced; the full ones are counted by the caller"
            );
            assert_eq!(m.abandoned(), 0);
            assert_eq!(m.rejected_timeout(), 0);
            m.release_classed(C);
            assert!(m.poll_waiter(c, &waker_n));
            m.release_classed(C);
            assert!(m.poll_waiter(c2, &waker_n));
            m.release_classed(C);
            assert_eq!(m.counts(), counts(0, 0));
        }

        #[test]
        fn a_lower_limit_preempts_nobody_and_shares_follow_it() {
            let m = Semaphore::new(10, 10);
            for _ in 0..5 {
                assert_eq!(join(&m, S), Enqueued::Admitted);
            }
            let waiting = id(join(&m, S));
            m.set_limits(4, 10);
            assert_eq!(m.counts().active, 5, "nobody is preempted");
            // 50 % of 4 is 2: sheddable gets nothing until it holds fewer than 2.
            let (_f, waker) = flag();
            for _ in 0..3 {
                m.release_classed(S);
                assert_eq!(m.poll_place(waiting, &waker), Polled::Waiting);
            }
            m.release_classed(S);
            assert_eq!(m.poll_place(waiting, &waker), Polled::Admitted);
            assert_eq!(m.class_counts().0, [0, 0, 2]);
            m.release_classed(S);
            m.release_classed(S);
            assert_eq!(m.counts(), counts(0, 0));
        }

        #[test]
        fn plain_waiters_already_in_line_wait_as_default_once_classes_arrive() {
            let m = Semaphore::new(1, 4);
            assert!(m.try_acquire());
            let plain = id(m.enqueue());
            let crit = id(join_any(&m, C));
            m.release();
            let (_f, waker) = flag();
            assert!(m.poll_waiter(crit, &waker), "critical first");
            assert!(!m.poll_waiter(plain, &waker));
            m.release_classed(C);
            assert!(m.poll_waiter(plain, &waker));
            m.release();
            assert_eq!(m.counts(), counts(0, 0));
            assert_eq!(m.class_counts(), ([0; 3], [0; 3]));
        }

        #[derive(Debug, Clone)]
        enum Op {
            Arrive(Criticality),
            Complete(usize),
            Abandon(usize),
            TimeOut(usize),
            Poll(usize),
            SetLimit(usize),
        }

        fn class() -> impl Strategy<Value = Criticality> {
            prop_oneof![Just(C), Just(D), Just(S)]
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                5 => class().prop_map(Op::Arrive),
                3 => any::<usize>().prop_map(Op::Complete),
                1 => any::<usize>().prop_map(Op::Abandon),
                1 => any::<usize>().prop_map(Op::TimeOut),
                2 => any::<usize>().prop_map(Op::Poll),
                1 => (1..8usize).prop_map(Op::SetLimit),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
            #[test]
            fn shares_hold_critical_is_never_turned_away_for_a_sheddable_and_every_slot_returns(
                limit in 1..8usize,
                max_queue in 0..5usize,
                default in 0..=100u8,
                sheddable_of_default in 0..=100u8,
                ops in proptest::collection::vec(op(), 1..200),
            ) {
                let sheddable = (u16::from(default) * u16::from(sheddable_of_default) / 100) as u8;
                let shares = Shares { default, sheddable };
                let m = Semaphore::new(limit, max_queue);
                let mut limit = limit;
                let mut holders: Vec<Criticality> = Vec::new();
                let mut waiters: Vec<(WaiterId, Criticality)> = Vec::new();
                let (_f, waker) = flag();

                for op in ops {
                    let (before, _) = m.class_counts();
                    match op {
                        Op::Arrive(class) => {
                            let (_, queued) = m.class_counts();
                            match m.join_classed(class, shares, true, true) {
                                Enqueued::Admitted => holders.push(class),
                                Enqueued::Waiting(w) => waiters.push((w, class)),
                                Enqueued::Full => {
                                    // Turned away only when nobody less critical waits.
                                    let less = Criticality::ALL.iter().any(|&c| c > class && queued[c.index()] > 0);
                                    prop_assert!(!less, "{class} turned away while a less critical call waits: {queued:?}");
                                }
                                Enqueued::Expired => prop_assert!(false, "it could wait"),
                            }
                        }
                        Op::Complete(i) if !holders.is_empty() => {
                            let class = holders.remove(i % holders.len());
                            m.release_classed(class);
                        }
                        Op::Abandon(i) | Op::TimeOut(i) if !waiters.is_empty() => {
                            let why = if matches!(op, Op::Abandon(_)) { Leave::Abandoned } else { Leave::TimedOut };
                            let (w, class) = waiters.remove(i % waiters.len());
                            match m.leave(w, why) {
                                Left::HoldsSlot if why == Leave::Abandoned => m.release_classed(class),
                                Left::HoldsSlot => holders.push(class),
                                Left::Removed | Left::Displaced => {}
                            }
                        }
                        Op::Poll(i) if !waiters.is_empty() => {
                            let k = i % waiters.len();
                            let (w, class) = waiters[k];
                            match m.poll_place(w, &waker) {
                                Polled::Waiting => {}
                                Polled::Admitted => {
                                    waiters.remove(k);
                                    // First in, first out within a class: nobody of
                                    // its class who came earlier is still in line.
                                    let earlier = waiters.iter().any(|&(o, c)| c == class && o.0 < w.0 && m.in_line(o));
                                    prop_assert!(!earlier, "{class} waiter {w:?} overtook an earlier one");
                                    holders.push(class);
                                }
                                Polled::Displaced => {
                                    waiters.remove(k);
                                }
                            }
                        }
                        Op::SetLimit(n) => {
                            limit = n;
                            m.set_limits(n, max_queue);
                        }
                        Op::Complete(_) | Op::Abandon(_) | Op::TimeOut(_) | Op::Poll(_) => {}
                    }
                    let (by_class, queued) = m.class_counts();
                    let word = m.counts();
                    prop_assert_eq!(by_class.iter().sum::<usize>(), word.active);
                    prop_assert_eq!(queued.iter().sum::<usize>(), word.queued);
                    prop_assert!(word.queued <= max_queue);
                    // No class grew past its share of the limit in force.
                    for c in Criticality::ALL {
                        if by_class[c.index()] > before[c.index()] {
                            prop_assert!(by_class[c.index()] <= shares.cap(c, limit), "{c} over its share");
                            prop_assert!(word.active <= limit);
                        }
                    }
                    // No slot sits free while a class under its share waits.
                    let load = ClassLoad { active: word.active, by_class, queued, limit };
                    prop_assert_eq!(shares.next(&load), None);
                }
                for (w, class) in waiters.drain(..) {
                    if m.leave(w, Leave::Abandoned) == Left::HoldsSlot {
                        m.release_classed(class);
                    }
                }
                for class in holders.drain(..) {
                    m.release_classed(class);
                }
                prop_assert_eq!(m.counts(), counts(0, 0));
                prop_assert_eq!(m.class_counts(), ([0; 3], [0; 3]));
            }
        }
    }

    #[test]
    fn a_standing_line_hands_over_newest_first_in_a_class_and_fifo_once_drained() {
        use crate::queue::ControlledDelay;
        use tokio::time::Instant;
        let ms = Duration::from_millis;
        let policy = QueuePolicy {
            controlled_delay: Some(ControlledDelay::default()),
            ..QueuePolicy::default()
        };
        let stands = |m: &Semaphore, at| m.arrival(at, &policy).standing();
        let t0 = Instant::now();
        let m = Semaphore::new(1, 10);
        assert!(m.try_acquire());
        assert!(!stands(&m, t0));
        let a = id(m.enqueue());
        assert!(!stands(&m, t0 + ms(50)));
        let b = id(m.enqueue());
        assert!(stands(&m, t0 + ms(150)));
        let c = id(m.enqueue());
        assert!(m.stands());
        let (_f, waker) = flag();
        m.release();
        assert!(m.poll_waiter(c, &waker), "the newest first");
        assert!(!m.poll_waiter(a, &waker));
        m.release();
        assert!(m.poll_waiter(b, &waker));
        m.release();
        assert!(m.poll_waiter(a, &waker));
        // Empty again: FIFO, and not standing until the interval passes anew.
        assert!(!m.stands());
        assert!(!stands(&m, t0 + ms(200)));
        let d = id(m.enqueue());
        assert!(!stands(&m, t0 + ms(201)));
        let e = id(m.enqueue());
        m.release();
        assert!(m.poll_waiter(d, &waker));
        assert!(!m.poll_waiter(e, &waker));
        assert_eq!(m.leave(e, Leave::Abandoned), Left::Removed);
        m.release();
        assert_eq!(m.counts(), counts(0, 0));
    }
}
