//! The machine as the shared state drives it: fed its jitter samples, its
//! admissions, outcomes and events counted, its transitions kept for the
//! subscribers. Everything the pure [`CircuitBreakerMachine`] leaves to whoever drives it.

use std::ops::Deref;
use std::sync::Arc;

use seawall_core::{ConfigError, Outcome, RandomSource, SeededRandom, WindowCounts};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::config::CircuitBreakerConfig;
use crate::hooks::{ProbeGate, Verdict, VerdictOutcome};
use crate::machine::{
    shadow_index, Admission, Cause, CircuitBreakerEvent, CircuitBreakerMachine, MachineEvent,
    Recorded, Report, State, Ticket,
};

/// How the shared word lets calls through without the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Admit every call without the lock (closed without ramp, forced closed, disabled).
    Closed,
    /// Reject without the lock while `now < reopen_at`.
    Open,
    /// Reject every call without the lock.
    ForcedOpen,
    /// Take the lock for every admission (half-open, ramping).
    Locked,
}

impl Mode {
    /// What the lock-free paths may do with calls until `machine` is next driven.
    pub(crate) fn of(machine: &CircuitBreakerMachine) -> Self {
        if machine.admits_all() {
            Mode::Closed
        } else if machine.rejects_all() {
            Mode::ForcedOpen
        } else if machine.reopen_at().is_some() {
            Mode::Open
        } else {
            Mode::Locked
        }
    }
}

/// Counters of the calls decided under the lock (the lock-free paths keep a few
/// more, see `state.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) successes: u64,
    pub(crate) failures: u64,
    pub(crate) ignored: u64,
    pub(crate) cancelled: u64,
    pub(crate) slow: u64,
    pub(crate) timeouts: u64,
    pub(crate) short_circuited: u64,
    pub(crate) probe_successes: u64,
    pub(crate) probe_failures: u64,
    pub(crate) probe_timeouts: u64,
    pub(crate) stale: u64,
    /// Shadow rejections taken under the lock, by [`shadow_index`].
    pub(crate) shadow: [u64; 3],
}

/// The automatic transitions (made by the breaker or by a verdict), in this order.
const AUTOMATIC: [(State, State); 6] = [
    (State::Closed, State::Open),
    (State::Open, State::HalfOpen),
    (State::HalfOpen, State::Closed),
    (State::HalfOpen, State::Open),
    // Only verdicts make these two.
    (State::Open, State::Closed),
    (State::Open, State::Open),
];

/// The counters every closed call may touch.
#[derive(Debug, Clone, Copy, Default)]
struct Hot {
    successes: u64,
    failures: u64,
    slow: u64,
    timeouts: u64,
}

/// What only matters once the breaker has left the plain closed state (or was
/// given a random source): allocated then, kept afterwards, so a breaker that
/// never trips never pays for it.
#[derive(Debug, Default)]
struct Books {
    ignored: u64,
    cancelled: u64,
    short_circuited: u64,
    stale: u64,
    probe_successes: u64,
    probe_failures: u64,
    probe_timeouts: u64,
    shadow: [u64; 3],
    /// Streaming probes judged a success at their half-open timeout.
    streams_judged: u64,
    automatic: [u64; 6],
    /// Operator transitions by (from, to).
    manual: [[u32; State::ALL.len()]; State::ALL.len()],
    /// Transitions not yet sent.
    transitions: Vec<CircuitBreakerEvent>,
    /// Where transitions are sent, once someone subscribed.
    subscribers: Option<broadcast::Sender<CircuitBreakerEvent>>,
    /// The jitter source, when one was supplied or jitter is used.
    random: Option<Box<dyn RandomSource>>,
}

/// A [`CircuitBreakerMachine`] with its counters, its subscribers and its random source. Reads
/// go to the machine ([`Deref`]); every step that may change it goes through here,
/// so no event goes uncounted.
// `repr(C)`: what dropping it reads (the pointers) first, together; see `Breaker`.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Driven {
    books: Option<Box<Books>>,
    machine: CircuitBreakerMachine,
    hot: Hot,
}

impl Deref for Driven {
    type Target = CircuitBreakerMachine;

    fn deref(&self) -> &CircuitBreakerMachine {
        &self.machine
    }
}

impl Driven {
    #[cfg(test)]
    pub(crate) fn new(
        config: &CircuitBreakerConfig,
        random: Option<Box<dyn RandomSource>>,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        Self::validated(Arc::new(config.clone()), random, now)
    }

    /// A closed machine over `config`, which the caller validated.
    pub(crate) fn validated(
        config: Arc<CircuitBreakerConfig>,
        random: Option<Box<dyn RandomSource>>,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        let mut driven = Self {
            machine: CircuitBreakerMachine::validated(config, now)?,
            hot: Hot::default(),
            books: random.map(|random| {
                Box::new(Books {
                    random: Some(random),
                    ..Books::default()
                })
            }),
        };
        driven.settle();
        Ok(driven)
    }

    fn books(&mut self) -> &mut Books {
        self.books.get_or_insert_with(Default::default)
    }

    /// Counts and keeps what the machine did, and feeds it the jitter samples it
    /// wants (drawing a source from entropy once jitter is configured).
    fn settle(&mut self) {
        if self.machine.samples_wanted() > 0 {
            if self.machine.config().effective_jitter() > 0.0 {
                self.books()
                    .random
                    .get_or_insert_with(|| Box::new(SeededRandom::from_entropy()));
            }
            if let Some(random) = self.books.as_mut().and_then(|b| b.random.as_deref_mut()) {
                for _ in 0..self.machine.samples_wanted() {
                    self.machine.feed_sample(random.next_f64());
                }
            }
        }
        let Self { machine, books, .. } = self;
        for event in machine.take_events() {
            let books = books.get_or_insert_with(Default::default);
            match event {
                MachineEvent::Transition(t) => {
                    if t.cause == Cause::ProbeTimedOut {
                        books.probe_timeouts += 1;
                        books.probe_failures += 1;
                    }
                    if t.cause.is_operator() {
                        let n = &mut books.manual[t.from.index()][t.to.index()];
                        *n = n.saturating_add(1);
                    } else if let Some(i) = AUTOMATIC.iter().position(|p| *p == (t.from, t.to)) {
                        books.automatic[i] += 1;
                    }
                    books.transitions.push(t);
                }
                MachineEvent::StreamJudged => {
                    books.streams_judged += 1;
                    books.probe_successes += 1;
                }
            }
        }
    }

    /// Runs one step of the machine, then settles what it did.
    fn step<R>(&mut self, f: impl FnOnce(&mut CircuitBreakerMachine) -> R) -> R {
        let out = f(&mut self.machine);
        self.settle();
        out
    }

    // ----- counters ----------------------------------------------------------------

    pub(crate) fn tally(&self) -> Tally {
        let mut t = Tally {
            successes: self.hot.successes,
            failures: self.hot.failures,
            slow: self.hot.slow,
            timeouts: self.hot.timeouts,
            ..Tally::default()
        };
        if let Some(b) = &self.books {
            t.ignored = b.ignored;
            t.cancelled = b.cancelled;
            t.short_circuited = b.short_circuited;
            t.stale = b.stale;
            t.probe_successes = b.probe_successes;
            t.probe_failures = b.probe_failures;
            t.probe_timeouts = b.probe_timeouts;
            t.shadow = b.shadow;
        }
        t
    }

    /// Transition counts by (from, to), non-zero only.
    pub(crate) fn transition_counts(&self) -> Vec<(State, State, u64)> {
        let Some(b) = &self.books else {
            return Vec::new();
        };
        let mut out: Vec<(State, State, u64)> = AUTOMATIC
            .iter()
            .zip(b.automatic)
            .filter(|(_, n)| *n > 0)
            .map(|((from, to), n)| (*from, *to, n))
            .collect();
        for from in State::ALL {
            for to in State::ALL {
                let n = b.manual[from.index()][to.index()];
                if n > 0 {
                    out.push((from, to, u64::from(n)));
                }
            }
        }
        out
    }

    /// How many streaming probes were judged a success at their half-open timeout.
    pub(crate) fn streams_judged(&self) -> u64 {
        self.books.as_ref().map_or(0, |b| b.streams_judged)
    }

    /// How the lock-free paths should treat calls.
    pub(crate) fn mode(&self) -> Mode {
        Mode::of(&self.machine)
    }

    // ----- transitions -------------------------------------------------------------

    /// The transitions made since the last call.
    #[cfg(test)]
    pub(crate) fn take_transitions(&mut self) -> impl Iterator<Item = CircuitBreakerEvent> + '_ {
        self.books
            .as_mut()
            .map(|b| b.transitions.drain(..))
            .into_iter()
            .flatten()
    }

    /// Hands each transition made since the last call to `f`, with the subscribers' channel.
    pub(crate) fn emit(
        &mut self,
        mut f: impl FnMut(&CircuitBreakerEvent, Option<&broadcast::Sender<CircuitBreakerEvent>>),
    ) {
        if let Some(b) = self.books.as_mut() {
            for t in b.transitions.drain(..) {
                f(&t, b.subscribers.as_ref());
            }
        }
    }

    /// A receiver of every transition from now on (the channel is created on first use).
    pub(crate) fn subscribe(
        &mut self,
        capacity: usize,
    ) -> broadcast::Receiver<CircuitBreakerEvent> {
        self.books()
            .subscribers
            .get_or_insert_with(|| broadcast::channel(capacity).0)
            .subscribe()
    }

    // ----- the call path -----------------------------------------------------------

    #[cfg(test)]
    pub(crate) fn advance(&mut self, now: Instant) {
        self.step(|m| m.advance(now));
    }

    pub(crate) fn would_reject(&mut self, now: Instant) -> bool {
        self.step(|m| m.would_reject(now))
    }

    pub(crate) fn acquire(&mut self, now: Instant) -> Admission {
        let admission = self.step(|m| m.acquire(now));
        match admission {
            Admission::Rejected(..) => self.books().short_circuited += 1,
            Admission::Shadow(_, cause) => self.books().shadow[shadow_index(cause)] += 1,
            Admission::Admitted(_) => {}
        }
        admission
    }

    pub(crate) fn complete(&mut self, ticket: Ticket, report: Report, now: Instant) -> Recorded {
        let recorded = self.step(|m| m.complete(ticket, report, now));
        let counted = report.outcome != Outcome::Ignore;
        match report.outcome {
            Outcome::Success => self.hot.successes += 1,
            Outcome::Failure => self.hot.failures += 1,
            Outcome::Ignore => self.books().ignored += 1,
        }
        if report.slow && counted {
            self.hot.slow += 1;
        }
        if report.timed_out {
            self.hot.timeouts += 1;
        }
        match recorded {
            Recorded::Stale if counted => self.books().stale += 1,
            Recorded::Probe => {
                let books = self.books();
                if report.timed_out {
                    // The deadline cut the probe off: a probe timeout, like one that
                    // outlived the half-open timeout (and a probe failure too).
                    books.probe_timeouts += 1;
                }
                match report.outcome {
                    Outcome::Success => books.probe_successes += 1,
                    Outcome::Failure => books.probe_failures += 1,
                    Outcome::Ignore => {}
                }
            }
            Recorded::Stale | Recorded::Current | Recorded::Shadow => {}
        }
        recorded
    }

    pub(crate) fn record_successes(&mut self, epoch: u32, n: u64, now: Instant) {
        if n == 0 {
            return;
        }
        self.hot.successes += n;
        if self.step(|m| m.record_successes(epoch, n, now)) == Recorded::Stale {
            self.books().stale += n;
        }
    }

    #[cfg(any(feature = "http", test))]
    pub(crate) fn probe_streaming(&mut self, ticket: Ticket, now: Instant) {
        self.step(|m| m.probe_streaming(ticket, now));
    }

    pub(crate) fn cancel(&mut self, ticket: Ticket, now: Instant) {
        self.step(|m| m.cancel(ticket, now));
        self.books().cancelled += 1;
    }

    pub(crate) fn give_back(&mut self, ticket: Ticket, now: Instant) {
        self.step(|m| m.give_back(ticket, now));
        self.books().short_circuited += 1;
    }

    pub(crate) fn window_counts(&mut self, now: Instant) -> Option<WindowCounts> {
        self.machine.window_counts(now)
    }

    // ----- operators and configuration -------------------------------------------

    pub(crate) fn force_open(&mut self, now: Instant) {
        self.step(|m| m.force_open(now));
    }

    pub(crate) fn force_closed(&mut self, now: Instant) {
        self.step(|m| m.force_closed(now));
    }

    pub(crate) fn disable(&mut self, now: Instant) {
        self.step(|m| m.disable(now));
    }

    pub(crate) fn reset(&mut self, now: Instant) {
        self.step(|m| m.reset(now));
    }

    pub(crate) fn set_shadow(&mut self, shadow: bool) {
        self.step(|m| m.set_shadow(shadow));
    }

    pub(crate) fn reconfigure(
        &mut self,
        config: &CircuitBreakerConfig,
        now: Instant,
    ) -> Result<(), ConfigError> {
        self.step(|m| m.reconfigure(config, now))
    }

    pub(crate) fn revert(&mut self, now: Instant) {
        self.step(|m| m.revert(now));
    }

    // ----- hooks for an outside coordinator ----------------------------------------

    pub(crate) fn set_gate(
        &mut self,
        gate: Option<Arc<dyn ProbeGate>>,
    ) -> Option<Arc<dyn ProbeGate>> {
        self.step(|m| m.set_gate(gate))
    }

    pub(crate) fn recheck_gate(&mut self) {
        self.step(CircuitBreakerMachine::recheck_gate);
    }

    pub(crate) fn apply_verdict(
        &mut self,
        verdict: Verdict,
        trip_epoch: u32,
        now: Instant,
    ) -> VerdictOutcome {
        self.step(|m| m.apply_verdict(verdict, trip_epoch, now))
    }

    pub(crate) fn trip_with_peers(&mut self, now: Instant) -> VerdictOutcome {
        self.step(|m| m.trip_with_peers(now))
    }
}
