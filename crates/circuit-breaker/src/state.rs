//! Where a breaker's state lives: the pure [`CircuitBreakerMachine`](crate::machine::CircuitBreakerMachine),
//! with the counters, subscribers and random source it leaves to its driver
//! ([`Driven`], `state/driven.rs`), behind a mutex; plus one atomic word that lets
//! the common cases through without taking it.
//!
//! The word packs the lock-free mode (closed, open, forced open, or "ask the
//! machine"), the epoch, whether the breaker is plainly closed, whether successes
//! may be batched, whether the breaker is in shadow mode, and a count of successes
//! not yet folded into the machine:
//!
//! ```text
//!  63            32 31  29   28    27     26    25..24   23                 0
//! +----------------+------+-----+------+-----+--------+--------------------+
//! |     epoch      |  0   |plain|shadow|batch|  mode  |  pending successes |
//! +----------------+------+-----+------+-----+--------+--------------------+
//! ```
//!
//! - A closed breaker admits with one load of the word (the ticket takes its epoch).
//! - A success of the current epoch, when the policy does not need each success's
//!   order or instant (consecutive and count windows), is one compare-and-swap that
//!   bumps the pending count. Anything that takes the lock first folds the pending
//!   successes into the machine, so the machine sees them before any later failure:
//!   the same sequence it would have seen one call at a time.
//! - A breaker shared by a layer's services is held by its calls through lanes
//!   (`state/lane.rs`), one per tally line: there a success bumps its lane's line
//!   instead of the word (the line holds the epoch its successes were admitted in),
//!   so successes through different lanes write no line in common, and the closed
//!   path only reads the word. The lock folds every line as it folds the word;
//!   a line's successes of an epoch gone by are stale (counted so when a lock folds
//!   them, where the word's are counted as the epoch changes). A success is in the
//!   machine's sequence where its compare-and-swap is: before the failure of any
//!   call that followed it (on its thread, or on a thread it told), and in either
//!   order with a call it raced. Relaxed orderings are enough for that: a fold that
//!   happens after the compare-and-swap reads the line's value from it or later
//!   (coherence), and the counts are all the fold takes from the line.
//! - A lane's success reads the word (epoch, `batch`) before its compare-and-swap
//!   on the line, not in it. That is enough because only a new epoch stops
//!   batching (a transition, a reset, a new window: each changes the epoch, as
//!   `the_shared_breaker_keeps_the_machine_invariants` checks), and the line keeps
//!   the success's own epoch: a success that read the word before such a change
//!   and lands after the change's fold is stale, never in a window that needs
//!   each success's instant.
//!   A success of the new epoch that finds its line holding an old one's goes to
//!   the lock, which folds the line.
//! - What the lock-free paths only count (a call turned away, let through in
//!   shadow mode, ignored or cancelled) is counted in the lane's line too, and the
//!   breaker's own counters serve a breaker no lane shares: a rejection on one
//!   core writes no line the calls of another read. A snapshot sums them all.
//! - An open breaker rejects with one load of the word, one clock read and one load
//!   of `reopen_at`; a forced-open one without the clock. A call whose `poll_ready`
//!   already saw it open is rejected without the clock, its rejection carrying
//!   `reopen_at` as an instant. In shadow mode (a bit of
//!   the word, so the closed path pays nothing for it) the same open call is let
//!   through instead, with one more relaxed increment.
//! - The `shadow` bit mirrors the machine's shadow mode; like the mode, it is
//!   republished by the holder of the mutex.
//! - The `plain` bit says the machine is closed by itself (not ramping, forced
//!   closed or disabled), also republished by the holder of the mutex. A keyed
//!   layer asks it before forgetting a key: one load of a line the breaker's
//!   eviction touches anyway, where reading the machine would miss the cache
//!   two or three more times for a breaker last used long ago.
//! - Everything else (failures, probes, half-open, the ramp, operators) takes the
//!   mutex, asks the machine, then republishes the word. Only the holder of the
//!   mutex changes the epoch or the mode, so a success whose compare-and-swap on
//!   the word succeeded was admitted in the epoch it was tallied in; successes
//!   tallied while a transition was being made are counted as stale.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Duration;

use seawall_core::{later, CircuitOpen, ConfigError, Name, OpenCause, Outcome, RandomSource};
use tokio::sync::{broadcast, Notify};
use tokio::time::Instant;

use crate::config::CircuitBreakerConfig;
use crate::machine::{
    nanos, nanos_between, positive, Admission, CircuitBreakerEvent, Report, Ticket,
};
use crate::sync::{AtomicU64, Mutex, MutexGuard};
use crate::telemetry::{Series, Telemetry};

mod driven;
mod lane;

pub(crate) use driven::{Driven, Mode};
pub(crate) use lane::{tally_lines, Lane, Lanes};

const PENDING_MASK: u64 = (1 << 24) - 1;
const MODE_SHIFT: u32 = 24;
const MODE_MASK: u64 = 0b11 << MODE_SHIFT;
const MODE_CLOSED: u64 = 0;
const MODE_OPEN: u64 = 1 << MODE_SHIFT;
const MODE_FORCED_OPEN: u64 = 2 << MODE_SHIFT;
const MODE_LOCKED: u64 = 3 << MODE_SHIFT;
const BATCH: u64 = 1 << 26;
const SHADOW: u64 = 1 << 27;
const PLAIN: u64 = 1 << 28;
const EPOCH_SHIFT: u32 = 32;

/// The slot of a lane that owns its breaker: its successes are tallied in the word.
pub(crate) const WORD_SLOT: usize = usize::MAX;

/// Successes one tally line holds before the lock must fold them (the low half).
const TALLY_MASK: u64 = u32::MAX as u64;

/// What one lane counts without the lock, on a cache line of its own: its
/// successes not yet folded into the machine (`tally`: the epoch they were
/// admitted in in the high half, how many in the low half; 0 when empty), and the
/// outcomes the lock-free paths only count (summed by [`Breaker::fast_counts`]),
/// so that neither a success nor a rejection on one core writes a line another
/// core's calls read.
#[derive(Debug)]
#[repr(align(64))]
struct TallyLine {
    tally: AtomicU64,
    counters: Counters,
}

/// The counters the lock-free paths keep outside the machine: a lane's, in its
/// line, or a breaker's own, for calls through no lane's line (a key's).
#[derive(Debug)]
struct Counters {
    short_circuited: AtomicU64,
    /// Open calls let through in shadow mode on the lock-free path.
    shadow_open: AtomicU64,
    ignored: AtomicU64,
    cancelled: AtomicU64,
}

impl Counters {
    fn new() -> Self {
        Self {
            short_circuited: AtomicU64::new(0),
            shadow_open: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
        }
    }

    /// Adds what these counters hold to `counts`.
    fn add_to(&self, counts: &mut FastCounts) {
        counts.short_circuited += self.short_circuited.load(Ordering::Relaxed);
        counts.shadow_open += self.shadow_open.load(Ordering::Relaxed);
        counts.ignored += self.ignored.load(Ordering::Relaxed);
        counts.cancelled += self.cancelled.load(Ordering::Relaxed);
    }
}

/// One more of a lock-free path's counts.
#[inline]
fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Capacity of the transition channel handed to subscribers.
const SUBSCRIPTION_CAPACITY: usize = 64;

#[inline]
fn epoch_of(word: u64) -> u32 {
    (word >> EPOCH_SHIFT) as u32
}

/// The word `m` publishes (with no pending success).
fn published(m: &Driven) -> u64 {
    encode(m.mode(), m.batches_successes(), m.shadows(), m.epoch())
        | if m.plainly_closed() { PLAIN } else { 0 }
}

fn encode(mode: Mode, batch: bool, shadow: bool, epoch: u32) -> u64 {
    let mode = match mode {
        Mode::Closed => MODE_CLOSED,
        Mode::Open => MODE_OPEN,
        Mode::ForcedOpen => MODE_FORCED_OPEN,
        Mode::Locked => MODE_LOCKED,
    };
    (u64::from(epoch) << EPOCH_SHIFT)
        | mode
        | if batch { BATCH } else { 0 }
        | if shadow { SHADOW } else { 0 }
}

/// What `poll_ready` should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadyHint {
    /// The call may reach the inner service: poll it.
    Forward,
    /// Forced open: the call will be rejected, do not poll the inner service.
    SkipForced,
    /// Open (or half-open with every probe slot taken, or ramping without credit):
    /// the call will be rejected, do not poll the inner service.
    SkipOpen,
}

/// One breaker's shared state, laid out (`repr(C)`) for the two ways it is read:
///
/// - every call reads the word (and the slow-call threshold), and a key's calls
///   write the count of the `Arc` its breaker sits in (the key's own lane): they
///   come first, on the line of that count (a shared breaker's calls write their
///   lanes' counts instead, so its first line is only read);
/// - a keyed layer drops a breaker last used long ago, and each line dropping it
///   reads is a cache miss: the name, the telemetry, the waiters, the prebuilt
///   rejection and the machine's pointers follow, together, and what dropping
///   never reads (the lock-free paths' counters, the machine's state) comes last.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Breaker {
    word: AtomicU64,
    /// In open mode: when it will admit a probe, in nanoseconds since `base`.
    /// In forced-open mode: `open_for` in nanoseconds, which a forced-open
    /// rejection does not carry (only an operator ends it).
    reopen_at: AtomicU64,
    /// The slow-call threshold in nanoseconds; 0 when slow calls are not detected.
    slow_nanos: AtomicU64,
    name: Name,
    telemetry: Telemetry,
    /// Services in readiness mode waiting for the breaker to let calls through;
    /// created by the first one, so other breakers never notify anyone.
    ready_waiters: OnceLock<Arc<Notify>>,
    /// The breaker's rejection, built once with its name: copied for each call
    /// turned away, so a rejection copies a few words instead of its name's bytes.
    rejection: CircuitOpen,
    machine: Mutex<Driven>,
    /// The lanes' success tallies (see `state/lane.rs`); none for a breaker of
    /// its own, whose successes are tallied in the word.
    tallies: Box<[TallyLine]>,
    /// The lock-free paths' counters of calls through no lane's line (a key's).
    counters: Counters,
    base: Instant,
}

/// When an admitted call started, for slow-call detection: nanoseconds since the
/// breaker's `base`, plus one, or 0 when the call is not timed (slow calls were
/// not detected when it was admitted). Eight bytes where an `Option<Instant>`
/// takes sixteen: every admitted call's future carries one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Started(u64);

impl Started {
    /// A call admitted while slow calls were not detected.
    pub(crate) const UNTIMED: Self = Self(0);

    /// Whether the call was timed (its end then reads the clock).
    #[inline]
    pub(crate) const fn is_timed(self) -> bool {
        self.0 != 0
    }
}

/// Counters kept outside the machine by the lock-free paths.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FastCounts {
    pub(crate) short_circuited: u64,
    pub(crate) shadow_open: u64,
    pub(crate) ignored: u64,
    pub(crate) cancelled: u64,
}

impl Breaker {
    /// A breaker with `tally_lines` lines for the successes of its lanes (0: tallied
    /// in the word, for a breaker no lane shares).
    pub(crate) fn new(
        name: Name,
        config: &CircuitBreakerConfig,
        random: Option<Box<dyn RandomSource>>,
        now: Instant,
        tally_lines: usize,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let series = Series::named(&name);
        let machine = Driven::validated(Arc::new(config.clone()), random, now)?;
        Ok(Self::driving(name, &series, machine, now, tally_lines))
    }

    /// A shared breaker whose metrics go to `series` (a keyed layer's, say) rather
    /// than to a series of its own name, over a configuration the caller
    /// validated (the keys of a keyed layer share one): a lane that owns it, built
    /// straight into its `Arc`, so a new key moves the breaker once.
    pub(crate) fn shared_reporting_to(
        name: Name,
        series: &Series,
        config: Arc<CircuitBreakerConfig>,
        random: Option<Box<dyn RandomSource>>,
        now: Instant,
    ) -> Result<Arc<Lane>, ConfigError> {
        let machine = Driven::validated(config, random, now)?;
        Ok(Arc::new(Lane::Own(Self::driving(
            name, series, machine, now, 0,
        ))))
    }

    #[inline(always)]
    fn driving(
        name: Name,
        series: &Series,
        machine: Driven,
        now: Instant,
        tally_lines: usize,
    ) -> Self {
        let word = published(&machine);
        let slow = slow_nanos(machine.slow_threshold());
        let telemetry = Telemetry::new(series, machine.state(now));
        Self {
            word: AtomicU64::new(word),
            reopen_at: AtomicU64::new(0),
            slow_nanos: AtomicU64::new(slow),
            counters: Counters::new(),
            base: now,
            rejection: CircuitOpen::named(&name, OpenCause::Open, None),
            name,
            telemetry,
            ready_waiters: OnceLock::new(),
            machine: Mutex::new(machine),
            tallies: (0..tally_lines)
                .map(|_| TallyLine {
                    tally: AtomicU64::new(0),
                    counters: Counters::new(),
                })
                .collect(),
        }
    }

    /// How many lanes can tally without sharing a line.
    pub(crate) fn tally_lines(&self) -> usize {
        self.tallies.len()
    }

    /// Where the lock-free paths count a call through the lane whose line is
    /// `slot`: in that line, or in the breaker's own counters for a breaker no
    /// lane shares.
    #[inline]
    fn counters(&self, slot: usize) -> &Counters {
        self.tallies
            .get(slot)
            .map_or(&self.counters, |line| &line.counters)
    }

    pub(crate) fn name(&self) -> &Name {
        &self.name
    }

    #[inline]
    fn nanos(&self, at: Instant) -> u64 {
        nanos_between(self.base, at)
    }

    /// The instant `nanos` after the base (`reopen_at` as an instant): an addition,
    /// cheaper than measuring an instant from the base to compare nanoseconds.
    #[inline]
    fn instant_at(&self, nanos: u64) -> Instant {
        later(self.base, Duration::from_nanos(nanos))
    }

    /// When an open breaker admits a probe again, if `now` is before it: the one
    /// rule `poll_ready` and `call` both judge the open interval by. An addition
    /// to the base, cheaper than measuring `now` from it; a stored 0 stands for any
    /// instant up to the base (the nanoseconds saturate there), so it is due.
    #[inline]
    fn open_until(&self, now: Instant) -> Option<Instant> {
        let until = self.reopen_at.load(Ordering::Acquire);
        let reopen = self.instant_at(until);
        (until != 0 && now < reopen).then_some(reopen)
    }

    /// Whether a call made now would reach the inner service (reads the clock only
    /// when open, half-open or ramping).
    #[inline(always)]
    pub(crate) fn ready_hint(&self, clock: impl FnOnce() -> Instant) -> ReadyHint {
        let w = self.word.load(Ordering::Acquire);
        if w & MODE_MASK == MODE_CLOSED {
            return ReadyHint::Forward;
        }
        self.ready_hint_not_closed(w, clock)
    }

    #[inline(never)]
    fn ready_hint_not_closed(&self, w: u64, clock: impl FnOnce() -> Instant) -> ReadyHint {
        match w & MODE_MASK {
            MODE_FORCED_OPEN => ReadyHint::SkipForced,
            MODE_OPEN => {
                let now = clock();
                if self.open_until(now).is_some() {
                    if w & SHADOW != 0 {
                        return ReadyHint::Forward;
                    }
                    return ReadyHint::SkipOpen;
                }
                // A probe is due: the call will take the lock anyway; ask whether
                // the probe gate would hold it off before polling the inner service.
                if self.locked(now, |m| m.would_reject(now)) {
                    ReadyHint::SkipOpen
                } else {
                    ReadyHint::Forward
                }
            }
            // Half-open or ramping: a call would take the lock anyway; ask whether
            // it would be turned away (every probe slot taken, no ramp credit, the
            // probe gate holding it off).
            MODE_LOCKED => {
                let now = clock();
                if self.locked(now, |m| m.would_reject(now)) {
                    ReadyHint::SkipOpen
                } else {
                    ReadyHint::Forward
                }
            }
            _ => ReadyHint::Forward,
        }
    }

    /// When a call admitted now starts, if slow calls are detected (the clock is
    /// read only then).
    #[inline]
    pub(crate) fn start_clock(&self, clock: impl FnOnce() -> Instant) -> Started {
        if self.slow_nanos.load(Ordering::Relaxed) == 0 {
            Started::UNTIMED
        } else {
            Started(self.nanos(clock()).saturating_add(1))
        }
    }

    /// Whether a call that started at `started` and ended at `now` is slow.
    #[inline]
    pub(crate) fn is_slow(&self, started: Started, now: Instant) -> bool {
        let threshold = self.slow_nanos.load(Ordering::Relaxed);
        started.is_timed()
            && threshold != 0
            && self.nanos(now).saturating_sub(started.0 - 1) >= threshold
    }

    /// Asks to let a call through, reading `clock` only when the decision needs the
    /// time. The clock is read here even when `poll_ready` read it moments before:
    /// `call` may come much later, and a stale instant would turn away a call that
    /// is due to probe, with a retry-after that has already passed.
    /// A call through the lane whose line is `slot` (a rejection is counted there).
    #[inline(always)]
    pub(crate) fn admit(&self, slot: usize, clock: impl Fn() -> Instant) -> Admission {
        let w = self.word.load(Ordering::Acquire);
        if w & MODE_MASK == MODE_CLOSED {
            // The common case, inlined into `call`: one load.
            return Admission::Admitted(Ticket::normal(epoch_of(w)));
        }
        self.admit_not_closed(slot, w, clock)
    }

    #[inline(never)]
    fn admit_not_closed(&self, slot: usize, w: u64, clock: impl Fn() -> Instant) -> Admission {
        match w & MODE_MASK {
            MODE_CLOSED => Admission::Admitted(Ticket::normal(epoch_of(w))),
            MODE_FORCED_OPEN => self.reject_fast(
                slot,
                Duration::from_nanos(self.reopen_at.load(Ordering::Acquire)),
                OpenCause::ForcedOpen,
            ),
            MODE_OPEN => {
                let now = clock();
                if let Some(reopen) = self.open_until(now) {
                    if w & SHADOW != 0 {
                        return self.shadow_fast(slot, epoch_of(w));
                    }
                    return self.reject_fast(
                        slot,
                        reopen.saturating_duration_since(now),
                        OpenCause::Open,
                    );
                }
                self.admit_locked(now)
            }
            _ => self.admit_locked(clock()),
        }
    }

    fn reject_fast(&self, slot: usize, retry_after: Duration, cause: OpenCause) -> Admission {
        bump(&self.counters(slot).short_circuited);
        let retry_after = positive(retry_after);
        // As the rejection itself: a forced-open one promises no instant.
        self.telemetry.rejected(&self.name, || {
            (cause != OpenCause::ForcedOpen).then_some(retry_after)
        });
        Admission::Rejected(retry_after, cause)
    }

    /// Turns away a call whose `poll_ready` found the breaker open and so left the
    /// inner service unpolled: such a call cannot go out whatever the time, so while
    /// the word still says open it is rejected without reading the clock, and its
    /// retry-after is measured when it is read, from the end of the open interval
    /// (a call made long after its `poll_ready` is never given a stale remainder).
    /// `None` when the breaker has left open since: [`admit`](Self::admit) decides.
    /// Counted in the line `slot`, as `admit` counts.
    #[inline]
    pub(crate) fn reject_unpolled(&self, slot: usize) -> Option<Box<CircuitOpen>> {
        let w = self.word.load(Ordering::Acquire);
        let mode = w & MODE_MASK;
        if mode != MODE_OPEN && mode != MODE_FORCED_OPEN {
            return None;
        }
        // Counted first: the locked increment then waits for fewer pending stores.
        bump(&self.counters(slot).short_circuited);
        let open = Box::new(if mode == MODE_OPEN {
            self.rejection
                .until(self.instant_at(self.reopen_at.load(Ordering::Acquire)))
        } else {
            CircuitOpen::named(&self.name, OpenCause::ForcedOpen, None)
        });
        self.telemetry.rejected(&self.name, || open.retry_after());
        Some(open)
    }

    /// An open call let through in shadow mode, decided from the word alone (the
    /// machine is left alone, as a fast rejection leaves it).
    #[cold]
    fn shadow_fast(&self, slot: usize, epoch: u32) -> Admission {
        bump(&self.counters(slot).shadow_open);
        self.telemetry.shadow_rejected(&self.name, OpenCause::Open);
        Admission::Shadow(Ticket::shadow(epoch), OpenCause::Open)
    }

    #[cold]
    fn admit_locked(&self, now: Instant) -> Admission {
        let admission = self.locked(now, |m| m.acquire(now));
        match admission {
            Admission::Rejected(retry_after, _) => {
                self.telemetry.rejected(&self.name, || Some(retry_after));
            }
            Admission::Shadow(_, cause) => self.telemetry.shadow_rejected(&self.name, cause),
            Admission::Admitted(_) => {}
        }
        admission
    }

    /// Reports how an admitted call ended, through the lane whose tally line is
    /// `slot` ([`WORD_SLOT`] for the word; a call's [`Lane::complete`] passes its
    /// own). `now` is the completion instant if the caller already read it; `clock`
    /// is read only when the lock must be taken.
    #[inline]
    pub(crate) fn complete(
        &self,
        slot: usize,
        ticket: Ticket,
        report: Report,
        now: Option<Instant>,
        clock: impl FnOnce() -> Instant,
    ) {
        if ticket.probe.is_none() && !ticket.shadow {
            match report.outcome {
                Outcome::Success
                    if !report.slow
                        && !report.timed_out
                        && self.try_batch_success(ticket.epoch, slot) =>
                {
                    self.telemetry.successes(1);
                    return;
                }
                // An ordinary call's ignored outcome never changes anything.
                Outcome::Ignore if !report.timed_out => {
                    bump(&self.counters(slot).ignored);
                    self.telemetry.ignored();
                    return;
                }
                _ => {}
            }
        }
        self.complete_locked(ticket, report, now.unwrap_or_else(clock));
    }

    #[cold]
    fn complete_locked(&self, ticket: Ticket, report: Report, now: Instant) {
        let recorded = self.locked(now, |m| m.complete(ticket, report, now));
        self.telemetry.finished(report, recorded);
    }

    /// Tallies a success of `epoch` without the lock, if the word says successes
    /// may be batched in that epoch: in the lane's own line when it has one, else
    /// in the word. `false` when the lock must record it.
    #[inline]
    fn try_batch_success(&self, epoch: u32, slot: usize) -> bool {
        let mut w = self.word.load(Ordering::Relaxed);
        if let Some(line) = self.tallies.get(slot) {
            if epoch_of(w) != epoch || w & BATCH == 0 {
                return false;
            }
            return tally_in(line, epoch);
        }
        loop {
            if epoch_of(w) != epoch || w & BATCH == 0 || w & PENDING_MASK == PENDING_MASK {
                return false;
            }
            match self
                .word
                .compare_exchange_weak(w, w + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(current) => w = current,
            }
        }
    }

    /// Counts the reason the classifier gave for a call's outcome, if any.
    #[inline]
    pub(crate) fn reason(&self, outcome: Outcome, reason: Option<&'static str>) {
        self.telemetry.reason(outcome, reason);
    }

    /// Reports that an admitted call, through the lane whose line is `slot`, was
    /// dropped before finishing.
    #[inline]
    pub(crate) fn cancel(&self, slot: usize, ticket: Ticket, clock: impl FnOnce() -> Instant) {
        self.telemetry.cancelled();
        if ticket.probe.is_none() {
            // Cancelling an ordinary call never changes anything.
            bump(&self.counters(slot).cancelled);
            return;
        }
        let now = clock();
        self.locked(now, |m| m.cancel(ticket, now));
    }

    /// Reports that an admitted probe's response looked healthy and its body is
    /// being read (see [`CircuitBreakerMachine::probe_streaming`](crate::machine::CircuitBreakerMachine::probe_streaming)). Nothing for ordinary calls.
    #[cfg(feature = "http")]
    pub(crate) fn probe_streaming(&self, ticket: Ticket, clock: impl FnOnce() -> Instant) {
        if ticket.probe.is_some() {
            let now = clock();
            self.locked(now, |m| m.probe_streaming(ticket, now));
        }
    }

    /// Gives an admitted ticket back unused, counting the call as short-circuited
    /// (the inner service was not ready to take it) in the line `slot`.
    pub(crate) fn turn_away(&self, slot: usize, ticket: Ticket, clock: impl FnOnce() -> Instant) {
        if ticket.probe.is_none() {
            bump(&self.counters(slot).short_circuited);
        } else {
            let now = clock();
            self.locked(now, |m| m.give_back(ticket, now));
        }
        self.telemetry
            .rejected(&self.name, || Some(crate::machine::MIN_RETRY_AFTER));
    }

    /// Runs `f` on the machine under the mutex, with the pending successes folded in
    /// first, then republishes the word and sends the transitions made: counted and
    /// sent to subscribers under the lock (in order), logged after it is released
    /// (a tracing subscriber is user code and may read the breaker's snapshot), as
    /// an operator's transition is counted (its series is registered then, and a
    /// recorder is user code too).
    pub(crate) fn locked<R>(&self, now: Instant, f: impl FnOnce(&mut Driven) -> R) -> R {
        let mut to_log = Vec::new();
        let mut to_count = Vec::new();
        let (out, freed) = {
            let mut m = self.lock();
            let before = (m.epoch(), m.probes_in_flight(), m.streams_judged());
            let w = self.word.fetch_and(!PENDING_MASK, Ordering::AcqRel);
            m.record_successes(epoch_of(w), w & PENDING_MASK, now);
            self.fold_tallies(&mut m, now);
            let out = f(&mut m);
            self.telemetry
                .streams_judged(m.streams_judged().saturating_sub(before.2));
            self.publish(&mut m, now);
            m.emit(|t, subscribers| {
                if !self.telemetry.count_transition(t) {
                    // Operators' transitions are rare: this allocates only then.
                    to_count.push(*t);
                }
                if let Some(tx) = subscribers {
                    // No receiver left is fine.
                    let _ = tx.send(*t);
                }
                if Telemetry::LOGS_TRANSITIONS {
                    // Transitions are rare: this allocates only when one happens.
                    to_log.push(*t);
                }
            });
            // A transition, or a probe slot freed: a waiting service may be let through.
            (
                out,
                m.epoch() != before.0 || m.probes_in_flight() < before.1,
            )
        };
        if freed {
            self.wake_ready_waiters();
        }
        for t in &to_count {
            self.telemetry.count_operator_transition(t);
        }
        for t in &to_log {
            Telemetry::log_transition(&self.name, t);
        }
        out
    }

    /// Folds the lanes' tallies into the machine, each in the epoch it was tallied
    /// in (an old epoch's successes are stale). Lines no lane wrote since the last
    /// fold are only read.
    fn fold_tallies(&self, m: &mut Driven, now: Instant) {
        for line in self.tallies.iter() {
            if line.tally.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let t = line.tally.swap(0, Ordering::Relaxed);
            let (epoch, n) = (epoch_of(t), t & TALLY_MASK);
            if epoch != m.epoch() && n != 0 {
                self.telemetry.stale(n);
            }
            m.record_successes(epoch, n, now);
        }
    }

    /// Wakes the services in readiness mode, if any wait: something they cannot see
    /// as a transition changed (the probe gate's answer).
    pub(crate) fn wake_ready_waiters(&self) {
        if let Some(waiters) = self.ready_waiters.get() {
            waiters.notify_waiters();
        }
    }

    /// Where services in readiness mode wait for a transition or a freed probe slot.
    pub(crate) fn ready_waiters(&self) -> Arc<Notify> {
        Arc::clone(self.ready_waiters.get_or_init(Default::default))
    }

    fn lock(&self) -> MutexGuard<'_, Driven> {
        // The machine never panics while holding the lock; if a panic elsewhere
        // poisoned it, its state is still consistent.
        self.machine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, m: &mut Driven, now: Instant) {
        let mode = m.mode();
        match mode {
            Mode::Open => {
                if let Some(until) = m.reopen_at() {
                    self.reopen_at.store(self.nanos(until), Ordering::Release);
                }
            }
            Mode::ForcedOpen => {
                self.reopen_at
                    .store(nanos(m.base_open_for()), Ordering::Release);
            }
            Mode::Closed | Mode::Locked => {}
        }
        self.slow_nanos
            .store(slow_nanos(m.slow_threshold()), Ordering::Relaxed);
        let bits = published(m);
        let mut current = self.word.load(Ordering::Acquire);
        loop {
            let same_epoch = epoch_of(current) == m.epoch();
            let pending = current & PENDING_MASK;
            let new = bits | if same_epoch { pending } else { 0 };
            match self
                .word
                .compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if !same_epoch {
                        // Tallied while the epoch was changing: stale.
                        m.record_successes(epoch_of(current), pending, now);
                        if pending != 0 {
                            self.telemetry.stale(pending);
                        }
                    }
                    return;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// A receiver of every transition from now on (the channel is created on first use).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<CircuitBreakerEvent> {
        self.lock().subscribe(SUBSCRIPTION_CAPACITY)
    }

    /// Whether the breaker is closed, not forced, not ramping: safe to forget.
    ///
    /// A keyed map asks this under its own lock: one load of the word, no wait for
    /// the breaker's lock, no user code. The word is republished when the holder
    /// of the breaker's lock has made its step, so a transition being made while
    /// the map asks (a failure tripping the breaker, say) is not seen yet: the
    /// eviction is ordered before it, as if the key had gone a moment earlier, and
    /// the calls already admitted report to the breaker they hold.
    pub(crate) fn is_plainly_closed(&self) -> bool {
        self.word.load(Ordering::Acquire) & (MODE_MASK | PLAIN) == MODE_CLOSED | PLAIN
    }

    /// The lock-free paths' counters: the breaker's own and every line's.
    pub(crate) fn fast_counts(&self) -> FastCounts {
        let mut counts = FastCounts::default();
        self.counters.add_to(&mut counts);
        for line in self.tallies.iter() {
            line.counters.add_to(&mut counts);
        }
        counts
    }
}

/// Adds a success of `epoch` to a lane's tally line: `false` when the line holds
/// another epoch's successes not folded yet, or as many as it can (the lock then
/// folds them and records this one).
#[inline]
fn tally_in(line: &TallyLine, epoch: u32) -> bool {
    let mut t = line.tally.load(Ordering::Relaxed);
    loop {
        let next = if t == 0 {
            (u64::from(epoch) << EPOCH_SHIFT) | 1
        } else if epoch_of(t) == epoch && t & TALLY_MASK != TALLY_MASK {
            t + 1
        } else {
            return false;
        };
        match line
            .tally
            .compare_exchange_weak(t, next, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => return true,
            Err(current) => t = current,
        }
    }
}

fn slow_nanos(threshold: Option<Duration>) -> u64 {
    threshold.map_or(0, |d| nanos(d).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TripPolicy;
    use crate::machine::{Admission, State};
    use proptest::prelude::*;
    use seawall_core::SeededRandom;

    const S: Duration = Duration::from_secs(1);

    /// A breaker's configuration that trips after `threshold` failures in a row.
    fn consecutive(threshold: u32) -> CircuitBreakerConfig {
        CircuitBreakerConfig {
            policy: TripPolicy::ConsecutiveFailures { threshold },
            jitter: Some(0.0),
            ..CircuitBreakerConfig::default()
        }
    }

    fn breaker(config: &CircuitBreakerConfig, now: Instant) -> Breaker {
        with_lines(config, now, 0)
    }

    /// A breaker whose lanes tally in `lines` lines of their own.
    fn with_lines(config: &CircuitBreakerConfig, now: Instant, lines: usize) -> Breaker {
        Breaker::new(
            "test".into(),
            config,
            Some(Box::new(SeededRandom::new(3))),
            now,
            lines,
        )
        .unwrap()
    }

    fn ok() -> Report {
        Report::of(Outcome::Success)
    }

    fn admit(b: &Breaker, now: Instant) -> Option<Ticket> {
        match b.admit(WORD_SLOT, || now) {
            Admission::Admitted(t) | Admission::Shadow(t, _) => Some(t),
            Admission::Rejected(..) => None,
        }
    }

    /// A call admitted at `now` that fails, reported through the line `slot`.
    fn fail_through(b: &Breaker, slot: usize, now: Instant) {
        let t = admit(b, now).unwrap();
        b.complete(slot, t, Report::of(Outcome::Failure), Some(now), || now);
    }

    #[test]
    fn the_word_round_trips() {
        let w = encode(Mode::Open, true, false, 0xdead_beef) | 17;
        assert_eq!(epoch_of(w), 0xdead_beef);
        assert_eq!(w & MODE_MASK, MODE_OPEN);
        assert_eq!(w & BATCH, BATCH);
        assert_eq!(w & PENDING_MASK, 17);
        assert_eq!(
            encode(Mode::Locked, false, false, 1) & MODE_MASK,
            MODE_LOCKED
        );
        assert_eq!(
            encode(Mode::ForcedOpen, false, false, 1) & MODE_MASK,
            MODE_FORCED_OPEN
        );
        assert_eq!(
            encode(Mode::Closed, false, false, 1) & MODE_MASK,
            MODE_CLOSED
        );
    }

    #[test]
    fn only_a_breaker_closed_by_itself_may_be_forgotten_and_the_word_alone_says_so() {
        let t0 = Instant::now();
        let config = CircuitBreakerConfig {
            policy: TripPolicy::ConsecutiveFailures { threshold: 1 },
            ramp: Some(crate::config::RampConfig {
                duration: S,
                start_share: 0.5,
            }),
            jitter: Some(0.0),
            ..CircuitBreakerConfig::default()
        };
        let b = breaker(&config, t0);
        assert!(b.is_plainly_closed());
        // Asked with the breaker's lock held elsewhere: the word answers.
        let held = b.lock();
        assert!(b.is_plainly_closed());
        drop(held);
        for (step, plain) in [
            (0, false), // forced closed
            (1, false), // disabled
            (2, true),  // reset
            (3, false), // tripped: open
        ] {
            b.locked(t0, |m| match step {
                0 => m.force_closed(t0),
                1 => m.disable(t0),
                2 => m.reset(t0),
                _ => {
                    if let Admission::Admitted(t) = m.acquire(t0) {
                        m.complete(t, Report::of(Outcome::Failure), t0);
                    }
                }
            });
            assert_eq!(b.is_plainly_closed(), plain, "after step {step}");
        }
        // The probe closes it into the ramp: closed, but not plainly.
        let probe_at = t0 + 10 * S;
        let probe = admit(&b, probe_at).unwrap();
        b.complete(WORD_SLOT, probe, ok(), Some(probe_at), || probe_at);
        b.locked(probe_at, |m| assert_eq!(m.state(probe_at), State::Closed));
        assert!(!b.is_plainly_closed());
        // Once the ramp is over (seen at the next step under the lock), it is.
        let after = probe_at + 2 * S;
        b.locked(after, |m| m.advance(after));
        assert!(b.is_plainly_closed());
    }

    #[test]
    fn closed_successes_are_batched_without_the_lock_and_folded_before_a_failure() {
        let t0 = Instant::now();
        let b = breaker(
            &CircuitBreakerConfig {
                jitter: Some(0.0),
                ..CircuitBreakerConfig::default()
            },
            t0,
        );
        for _ in 0..1000 {
            let t = admit(&b, t0).unwrap();
            b.complete(WORD_SLOT, t, ok(), None, || {
                unreachable!("no clock on the fast path")
            });
        }
        assert_eq!(b.word.load(Ordering::Relaxed) & PENDING_MASK, 1000);
        for _ in 0..5 {
            let t = admit(&b, t0).unwrap();
            b.complete(WORD_SLOT, t, Report::of(Outcome::Failure), Some(t0), || t0);
        }
        b.locked(t0, |m| {
            assert_eq!(m.state(t0), State::Open);
            assert_eq!(m.tally().successes, 1000);
        });
        assert_eq!(b.word.load(Ordering::Relaxed) & MODE_MASK, MODE_OPEN);
    }

    #[test]
    fn a_success_tallied_with_an_old_epoch_is_stale() {
        let t0 = Instant::now();
        let b = breaker(
            &CircuitBreakerConfig {
                jitter: Some(0.0),
                ..CircuitBreakerConfig::default()
            },
            t0,
        );
        let old = admit(&b, t0).unwrap();
        b.locked(t0, |m| m.force_open(t0));
        b.complete(WORD_SLOT, old, ok(), None, || t0);
        b.locked(t0, |m| {
            assert_eq!(m.tally().stale, 1);
            assert_eq!(m.tally().successes, 1);
        });
    }

    #[test]
    fn an_open_breaker_rejects_without_the_lock_and_counts() {
        let t0 = Instant::now();
        let b = breaker(
            &CircuitBreakerConfig {
                jitter: Some(0.0),
                ..CircuitBreakerConfig::default()
            },
            t0,
        );
        b.locked(t0, |m| {
            for _ in 0..10 {
                if let Admission::Admitted(t) = m.acquire(t0) {
                    m.complete(t, Report::of(Outcome::Failure), t0);
                }
            }
        });
        let guard = b.lock();
        // With the mutex held elsewhere, rejections still flow.
        assert_eq!(
            b.admit(WORD_SLOT, || t0 + 4 * S),
            Admission::Rejected(6 * S, OpenCause::Open)
        );
        assert_eq!(b.ready_hint(|| t0 + 4 * S), ReadyHint::SkipOpen);
        drop(guard);
        assert_eq!(b.fast_counts().short_circuited, 1);
        assert_eq!(b.ready_hint(|| t0 + 10 * S), ReadyHint::Forward);
        assert!(admit(&b, t0 + 10 * S).unwrap().probe.is_some());
    }

    /// A clock behind the breaker's base (a layer built on another clock than the
    /// one its calls read, as a paused runtime's): an open interval that ended
    /// before the base is stored as 0 nanoseconds, and `poll_ready` must then ask
    /// the machine, as `call` does, rather than take 0 for the base instant and
    /// hold a due probe off until the clock reaches the base.
    #[test]
    fn an_interval_that_ended_before_the_base_is_due_for_poll_ready_as_for_call() {
        let t0 = Instant::now();
        let b = breaker(
            &CircuitBreakerConfig {
                jitter: Some(0.0),
                ..CircuitBreakerConfig::default()
            },
            t0 + 60 * S,
        );
        b.locked(t0, |m| {
            for _ in 0..10 {
                if let Admission::Admitted(t) = m.acquire(t0) {
                    m.complete(t, Report::of(Outcome::Failure), t0);
                }
            }
        });
        assert_eq!(b.ready_hint(|| t0 + 4 * S), ReadyHint::SkipOpen);
        // Open for 10 s from t0: due at t0 + 10 s, 50 s before the base.
        assert_eq!(b.ready_hint(|| t0 + 20 * S), ReadyHint::Forward);
        assert!(admit(&b, t0 + 20 * S).unwrap().probe.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_left_unpolled_is_rejected_from_the_word_alone_while_it_says_open() {
        let t0 = Instant::now();
        let b = breaker(
            &CircuitBreakerConfig {
                jitter: Some(0.0),
                ..CircuitBreakerConfig::default()
            },
            t0,
        );
        assert!(
            b.reject_unpolled(WORD_SLOT).is_none(),
            "closed: `admit` decides"
        );
        b.locked(t0, |m| {
            for _ in 0..10 {
                if let Admission::Admitted(t) = m.acquire(t0) {
                    m.complete(t, Report::of(Outcome::Failure), t0);
                }
            }
        });
        let guard = b.lock();
        // Neither the mutex nor the clock: the end of the interval travels instead.
        let open = b.reject_unpolled(WORD_SLOT).expect("open");
        drop(guard);
        assert_eq!(open.cause(), OpenCause::Open);
        assert_eq!(open.retry_after(), Some(10 * S));
        tokio::time::advance(4 * S).await;
        assert_eq!(open.retry_after(), Some(6 * S));
        assert_eq!(b.fast_counts().short_circuited, 1);
        // Due to probe: once a call has taken the probe, the machine decides again.
        let probe = admit(&b, t0 + 10 * S).unwrap();
        assert!(probe.probe.is_some());
        assert!(
            b.reject_unpolled(WORD_SLOT).is_none(),
            "half-open: `admit` decides"
        );
        b.locked(t0 + 10 * S, |m| m.force_open(t0 + 10 * S));
        let forced = b.reject_unpolled(WORD_SLOT).expect("forced open");
        assert_eq!(
            (forced.cause(), forced.retry_after()),
            (OpenCause::ForcedOpen, None)
        );
        assert_eq!(b.fast_counts().short_circuited, 2);
    }

    #[test]
    fn a_shadow_success_is_never_batched_into_the_window() {
        let t0 = Instant::now();
        let config = CircuitBreakerConfig {
            policy: TripPolicy::ConsecutiveFailures { threshold: 3 },
            ramp: Some(crate::config::RampConfig {
                duration: S,
                start_share: 0.1,
            }),
            shadow: true,
            jitter: Some(0.0),
            ..CircuitBreakerConfig::default()
        };
        let b = breaker(&config, t0);
        let fail = |now| {
            let t = admit(&b, now).unwrap();
            assert!(!t.shadow);
            b.complete(
                WORD_SLOT,
                t,
                Report::of(Outcome::Failure),
                Some(now),
                || now,
            );
        };
        for _ in 0..3 {
            fail(t0);
        }
        let probe = admit(&b, t0 + 10 * S).unwrap();
        assert!(probe.probe.is_some());
        b.complete(WORD_SLOT, probe, ok(), Some(t0 + 10 * S), || t0 + 10 * S);
        // Ramping from a tenth: most calls are not in the share.
        let ramping = t0 + 10 * S;
        let shadowed = (0..10)
            .find_map(|_| match b.admit(WORD_SLOT, || ramping) {
                Admission::Shadow(t, OpenCause::Ramping) => Some(t),
                Admission::Admitted(t) => {
                    b.complete(WORD_SLOT, t, ok(), Some(ramping), || ramping);
                    None
                }
                other => panic!("{other:?}"),
            })
            .expect("a call let through in shadow mode while ramping");
        // The ramp ends without a transition (same epoch); successes batch again.
        let after = t0 + 12 * S;
        fail(after);
        fail(after);
        b.complete(WORD_SLOT, shadowed, ok(), None, || after);
        fail(after);
        b.locked(after, |m| assert_eq!(m.state(after), State::Open));
    }

    #[test]
    fn a_success_in_a_lanes_line_counts_before_a_failure_judged_after_it() {
        let t0 = Instant::now();
        let b = with_lines(&consecutive(2), t0, 2);
        let fail = |slot| fail_through(&b, slot, t0);
        fail(0);
        let t = admit(&b, t0).unwrap();
        b.complete(1, t, ok(), None, || {
            unreachable!("no clock on the fast path")
        });
        // Tallied in line 1, not in the word, and not yet in the machine.
        assert_eq!(b.word.load(Ordering::Relaxed) & PENDING_MASK, 0);
        assert_eq!(b.tallies[1].tally.load(Ordering::Relaxed) & TALLY_MASK, 1);
        // The failure after it takes the lock, which folds the success in first:
        // two failures, but not in a row.
        fail(0);
        b.locked(t0, |m| {
            assert_eq!(m.state(t0), State::Closed);
            assert_eq!((m.tally().successes, m.tally().failures), (1, 2));
        });
        assert_eq!(b.tallies[1].tally.load(Ordering::Relaxed), 0);
        fail(1);
        b.locked(t0, |m| assert_eq!(m.state(t0), State::Open));
    }

    #[test]
    fn what_the_lock_free_paths_count_through_a_lane_is_counted_in_its_line() {
        let t0 = Instant::now();
        let b = with_lines(&consecutive(1), t0, 2);
        let own = |b: &Breaker| {
            (
                b.counters.short_circuited.load(Ordering::Relaxed),
                b.counters.ignored.load(Ordering::Relaxed),
                b.counters.cancelled.load(Ordering::Relaxed),
            )
        };
        let line = |i: usize| {
            let l = &b.tallies[i];
            (
                l.counters.short_circuited.load(Ordering::Relaxed),
                l.counters.ignored.load(Ordering::Relaxed),
                l.counters.cancelled.load(Ordering::Relaxed),
            )
        };
        let t = admit(&b, t0).unwrap();
        b.complete(1, t, Report::of(Outcome::Ignore), Some(t0), || t0);
        let t = admit(&b, t0).unwrap();
        b.cancel(1, t, || t0);
        let t = admit(&b, t0).unwrap();
        b.complete(0, t, Report::of(Outcome::Failure), Some(t0), || t0);
        // Open now: a rejection through lane 1, one from the word alone through
        // lane 0, one through no lane.
        assert!(matches!(b.admit(1, || t0), Admission::Rejected(..)));
        assert!(b.reject_unpolled(0).is_some());
        assert!(matches!(b.admit(WORD_SLOT, || t0), Admission::Rejected(..)));
        assert_eq!(line(0), (1, 0, 0));
        assert_eq!(line(1), (1, 1, 1));
        assert_eq!(own(&b), (1, 0, 0));
        let fast = b.fast_counts();
        assert_eq!(
            (fast.short_circuited, fast.ignored, fast.cancelled),
            (3, 1, 1)
        );
    }

    #[test]
    fn a_success_left_in_a_lanes_line_across_a_transition_is_stale() {
        let t0 = Instant::now();
        let b = with_lines(&consecutive(5), t0, 2);
        let old = admit(&b, t0).unwrap();
        let also_old = admit(&b, t0).unwrap();
        b.complete(0, old, ok(), None, || t0);
        // An operator's reset changes the epoch; the line still holds the old one's
        // success (tallied as the reset was being made, say).
        b.locked(t0, |m| m.reset(t0));
        b.tallies[1]
            .tally
            .store((u64::from(old.epoch) << EPOCH_SHIFT) | 1, Ordering::Relaxed);
        // A success of the old epoch is not tallied in the line now.
        b.complete(1, also_old, ok(), None, || t0);
        b.locked(t0, |m| {
            let tally = m.tally();
            // The first success was folded by the reset, current; the planted one
            // and the late one are stale.
            assert_eq!(tally.successes, 3);
            assert_eq!(tally.stale, 2);
            assert_eq!(m.window_counts(t0).map_or(0, |w| w.calls), 0);
        });
        // A current success of the new epoch goes to the emptied line again.
        let fresh = admit(&b, t0).unwrap();
        b.complete(1, fresh, ok(), None, || {
            unreachable!("no clock on the fast path")
        });
        assert_eq!(
            b.tallies[1].tally.load(Ordering::Relaxed),
            (u64::from(fresh.epoch) << EPOCH_SHIFT) | 1
        );
    }

    #[test]
    fn a_success_in_one_lane_counts_before_the_failure_of_a_thread_it_told_in_another() {
        let t0 = Instant::now();
        let b = with_lines(&consecutive(2), t0, 2);
        let fail = |slot| fail_through(&b, slot, t0);
        fail(0);
        let (told, heard) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let b = &b;
            s.spawn(move || {
                let t = admit(b, t0).unwrap();
                b.complete(1, t, ok(), None, || {
                    unreachable!("no clock on the fast path")
                });
                told.send(()).unwrap();
            });
            heard.recv().unwrap();
            // Told after its success was tallied in line 1: this thread's failure,
            // through line 0, comes after it, so the two failures are not in a row.
            fail(0);
        });
        b.locked(t0, |m| {
            assert_eq!(m.state(t0), State::Closed);
            assert_eq!((m.tally().successes, m.tally().failures), (1, 2));
        });
    }

    #[test]
    fn threads_lose_no_outcome() {
        // In the word (a breaker of its own), then in two lines shared by four threads.
        for lines in [0, 2] {
            threads_lose_no_outcome_with(lines);
        }
    }

    fn threads_lose_no_outcome_with(lines: usize) {
        let t0 = Instant::now();
        let b = with_lines(&consecutive(1_000_000), t0, lines);
        let threads = 4;
        let per_thread = 20_000u64;
        std::thread::scope(|s| {
            for i in 0..threads {
                let b = &b;
                let slot = if lines == 0 {
                    WORD_SLOT
                } else {
                    usize::try_from(i).map_or(0, |i| i % lines)
                };
                s.spawn(move || {
                    for j in 0..per_thread {
                        let Some(t) = admit(b, t0) else {
                            panic!("a closed breaker rejected a call");
                        };
                        match (i + j) % 10 {
                            0 => b.complete(slot, t, Report::of(Outcome::Failure), Some(t0), || t0),
                            1 => b.complete(slot, t, Report::of(Outcome::Ignore), Some(t0), || t0),
                            2 => b.cancel(slot, t, || t0),
                            _ => b.complete(slot, t, ok(), None, || t0),
                        }
                    }
                });
            }
        });
        let total = threads * per_thread;
        let fast = b.fast_counts();
        b.locked(t0, |m| {
            let tally = m.tally();
            assert_eq!(tally.failures, total / 10);
            assert_eq!(tally.ignored + fast.ignored, total / 10);
            assert_eq!(tally.cancelled + fast.cancelled, total / 10);
            assert_eq!(tally.successes, total * 7 / 10);
            assert_eq!(tally.stale, 0);
        });
    }

    #[derive(Debug, Clone)]
    enum Op {
        Acquire,
        Complete(usize, Outcome),
        Drop(usize),
        Advance(u64),
        /// A new probe limit; `true`: under a time window, whose successes never batch.
        Reconfigure(u32, bool),
        Operator(u8),
        Shadow(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        let outcome = prop_oneof![
            3 => Just(Outcome::Success),
            2 => Just(Outcome::Failure),
            1 => Just(Outcome::Ignore)
        ];
        prop_oneof![
            6 => Just(Op::Acquire),
            5 => (any::<usize>(), outcome).prop_map(|(i, o)| Op::Complete(i, o)),
            2 => any::<usize>().prop_map(Op::Drop),
            3 => (0u64..5_000).prop_map(Op::Advance),
            1 => (1u32..4, any::<bool>()).prop_map(|(n, timed)| Op::Reconfigure(n, timed)),
            1 => (0u8..4).prop_map(Op::Operator),
            1 => any::<bool>().prop_map(Op::Shadow),
        ]
    }

    fn config(half_open_max: u32, consecutive: bool) -> CircuitBreakerConfig {
        let mut config = crate::machine::tests::schedule_config(half_open_max);
        if consecutive {
            config.policy = TripPolicy::ConsecutiveFailures { threshold: 2 };
        }
        config
    }

    proptest! {
        /// Through the lock-free paths too (successes tallied in the word, or in
        /// the lines of two lanes), with shadow mode switched at random: half-open
        /// never lets more than `half_open_max` probes out, no slot leaks, stale
        /// outcomes change nothing, every call is counted exactly once, and
        /// successes stop batching only with a new epoch.
        #[test]
        fn the_shared_breaker_keeps_the_machine_invariants(
            max in 1u32..4,
            consecutive in any::<bool>(),
            lines in prop_oneof![Just(0usize), Just(2)],
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let t0 = Instant::now();
            let mut now = t0;
            let b = with_lines(&config(max, consecutive), t0, lines);
            let mut max = max;
            let mut held: Vec<Ticket> = Vec::new();
            let mut ended = 0u64;
            let mut before = b.word.load(Ordering::Relaxed);
            for op in ops {
                match op {
                    Op::Acquire => {
                        let before = b.locked(now, |m| { m.advance(now); m.probes_in_flight() });
                        // Rejections counted in the word's counters or in a line's.
                        let slot = if lines == 0 { WORD_SLOT } else { held.len() % lines };
                        match b.admit(slot, || now) {
                            Admission::Admitted(t) => {
                                if t.probe.is_some() {
                                    let after = b.locked(now, |m| m.probes_in_flight());
                                    prop_assert!(before < max && after <= max, "{before} -> {after} > {max}");
                                }
                                held.push(t);
                            }
                            Admission::Shadow(t, cause) => {
                                prop_assert!(t.shadow && t.probe.is_none());
                                prop_assert!(cause != OpenCause::ForcedOpen);
                                held.push(t);
                            }
                            Admission::Rejected(r, _) => {
                                prop_assert!(r > Duration::ZERO);
                                ended += 1;
                            }
                        }
                    }
                    Op::Complete(i, outcome) if !held.is_empty() => {
                        let t = held.swap_remove(i % held.len());
                        let (state, epoch) = b.locked(now, |m| { m.advance(now); (m.state(now), m.epoch()) });
                        let slot = if lines == 0 { WORD_SLOT } else { (i / 7) % lines };
                        b.complete(slot, t, Report::of(outcome), Some(now), || now);
                        ended += 1;
                        if t.epoch != epoch {
                            let after = b.locked(now, |m| (m.state(now), m.epoch()));
                            prop_assert_eq!(after, (state, epoch));
                        }
                    }
                    Op::Drop(i) if !held.is_empty() => {
                        let t = held.swap_remove(i % held.len());
                        let (state, epoch) = b.locked(now, |m| { m.advance(now); (m.state(now), m.epoch()) });
                        let slot = if lines == 0 { WORD_SLOT } else { i % lines };
                        b.cancel(slot, t, || now);
                        ended += 1;
                        prop_assert_eq!(b.locked(now, |m| (m.state(now), m.epoch())), (state, epoch));
                    }
                    Op::Advance(d) => now += Duration::from_millis(d),
                    Op::Reconfigure(n, timed) => {
                        let mut to = config(n, consecutive);
                        if timed {
                            to.policy = TripPolicy::TimeWindow {
                                window: 4 * S,
                                bucket: S,
                                min_calls: 2,
                                failure_rate: 0.5,
                            };
                        }
                        b.locked(now, |m| m.reconfigure(&to, now)).unwrap();
                        max = n;
                    }
                    Op::Operator(k) => b.locked(now, |m| match k {
                        0 => m.force_open(now),
                        1 => m.force_closed(now),
                        2 => m.disable(now),
                        _ => m.reset(now),
                    }),
                    Op::Shadow(on) => b.locked(now, |m| m.set_shadow(on)),
                    Op::Complete(..) | Op::Drop(_) => {}
                }
                let fast = b.fast_counts();
                let (in_flight, epoch, tally) = b.locked(now, |m| (m.probes_in_flight(), m.epoch(), m.tally()));
                let probes_held = held.iter().filter(|t| t.probe.is_some() && t.epoch == epoch).count() as u32;
                prop_assert_eq!(in_flight, probes_held);
                let counted = tally.successes + tally.failures + tally.ignored + fast.ignored
                    + tally.cancelled + fast.cancelled + tally.short_circuited + fast.short_circuited;
                prop_assert_eq!(counted, ended);
                // The word agrees with the machine.
                let w = b.word.load(Ordering::Relaxed);
                prop_assert_eq!(epoch_of(w), epoch);
                // A lane's success reads the word before tallying in its line: only
                // a new epoch may stop batching, so one that read `batch` lands in
                // a line whose epoch is already gone by (stale), never in a window
                // that needs each success's instant.
                prop_assert!(
                    before & BATCH == 0 || w & BATCH != 0 || epoch_of(before) != epoch,
                    "successes stopped batching within epoch {}", epoch
                );
                before = w;
                let plain = b.locked(now, |m| m.plainly_closed());
                prop_assert_eq!(b.is_plainly_closed(), plain);
            }
        }
    }
}
