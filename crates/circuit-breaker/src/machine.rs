//! The breaker's policy as a plain state machine: no clock reads, no locks, no async.
//!
//! Every method that needs time takes `now`. Lazy transitions (open → half-open when
//! the interval has passed, a stuck probe timing out, the end of the ramp) are
//! applied by [`Machine::advance`], which every call-path method runs first;
//! [`Machine::state`] reports them without applying them.

use std::time::Duration;

use seawall_core::{ConfigError, CountWindow, Outcome, RandomSource, TimeWindow, WindowCounts};
use tokio::time::Instant;

use crate::config::{CircuitBreakerConfig, TripPolicy};

/// The state of a breaker, as reported to operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum State {
    /// Calls go through; outcomes are recorded and may trip the breaker.
    Closed,
    /// Tripped: every call is rejected until the open interval has passed.
    Open,
    /// The open interval has passed: a few probes go through to test the dependency.
    HalfOpen,
    /// Held open by an operator: every call is rejected, nothing changes it but an operator.
    ForcedOpen,
    /// Held closed by an operator: every call goes through, outcomes are recorded, it never trips.
    ForcedClosed,
    /// Switched off by an operator: every call goes through, only the counters move.
    Disabled,
}

impl State {
    /// Every state, in a fixed order (the order of the metrics gauge).
    pub const ALL: [State; 6] = [
        State::Closed,
        State::Open,
        State::HalfOpen,
        State::ForcedOpen,
        State::ForcedClosed,
        State::Disabled,
    ];

    /// A short, stable, lower-case label (for metrics and logs).
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::ForcedOpen => "forced_open",
            State::ForcedClosed => "forced_closed",
            State::Disabled => "disabled",
        }
    }

    pub(crate) const fn index(self) -> usize {
        match self {
            State::Closed => 0,
            State::Open => 1,
            State::HalfOpen => 2,
            State::ForcedOpen => 3,
            State::ForcedClosed => 4,
            State::Disabled => 5,
        }
    }

    /// Whether an operator put the breaker in this state.
    pub const fn is_forced(self) -> bool {
        matches!(
            self,
            State::ForcedOpen | State::ForcedClosed | State::Disabled
        )
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a transition happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Reason {
    /// Closed → open: consecutive failures reached the threshold.
    ConsecutiveFailures,
    /// Closed → open: the window's failure rate reached the threshold.
    FailureRate,
    /// Closed → open: the window's slow-call rate reached the threshold.
    SlowCallRate,
    /// Open → half-open: the open interval has passed (noticed at the next call).
    OpenIntervalElapsed,
    /// Half-open → closed: enough probes succeeded.
    ProbesSucceeded,
    /// Half-open → open: a probe failed.
    ProbeFailed,
    /// Half-open → open: a probe ran longer than the half-open timeout.
    ProbeTimedOut,
    /// An operator forced the breaker open.
    ForcedOpen,
    /// An operator forced the breaker closed.
    ForcedClosed,
    /// An operator disabled the breaker.
    Disabled,
    /// An operator reset the breaker to a fresh closed state.
    Reset,
}

impl Reason {
    /// A short, stable, lower-case label (for metrics and logs).
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::ConsecutiveFailures => "consecutive_failures",
            Reason::FailureRate => "failure_rate",
            Reason::SlowCallRate => "slow_call_rate",
            Reason::OpenIntervalElapsed => "open_interval_elapsed",
            Reason::ProbesSucceeded => "probes_succeeded",
            Reason::ProbeFailed => "probe_failed",
            Reason::ProbeTimedOut => "probe_timed_out",
            Reason::ForcedOpen => "forced_open",
            Reason::ForcedClosed => "forced_closed",
            Reason::Disabled => "disabled",
            Reason::Reset => "reset",
        }
    }

    const fn is_operator(self) -> bool {
        matches!(
            self,
            Reason::ForcedOpen | Reason::ForcedClosed | Reason::Disabled | Reason::Reset
        )
    }
}

/// One change of state, as sent to subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// The state left.
    pub from: State,
    /// The state entered.
    pub to: State,
    /// Why.
    pub reason: Reason,
    /// When it took effect (for a lazy transition, the instant it became due).
    pub at: Instant,
    /// The breaker's epoch after the transition.
    pub epoch: u32,
}

/// The admission of one call: the epoch it was admitted in, and its probe slot if it is a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub(crate) epoch: u32,
    pub(crate) probe: Option<u32>,
}

impl Ticket {
    pub(crate) const fn normal(epoch: u32) -> Self {
        Self { epoch, probe: None }
    }
}

/// The answer to a call asking to go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    Admitted(Ticket),
    /// Rejected; the caller may retry after this (never zero).
    Rejected(Duration),
}

/// The state as reported at some instant (lazy transitions included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reported {
    pub(crate) state: State,
    /// When that state began.
    pub(crate) since: Instant,
    /// If open: when it admits a probe.
    pub(crate) until: Option<Instant>,
}

/// What a finished call reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) outcome: Outcome,
    /// It took at least the slow-call threshold.
    pub(crate) slow: bool,
    /// It ran out of its deadline (recorded as a failure).
    pub(crate) timed_out: bool,
}

impl Report {
    #[cfg(test)]
    pub(crate) const fn of(outcome: Outcome) -> Self {
        Self {
            outcome,
            slow: false,
            timed_out: false,
        }
    }
}

/// What the machine made of a finished call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// An ordinary call of the current epoch.
    Current,
    /// A probe of the current half-open period.
    Probe,
    /// Admitted in an older epoch: counted, but it changed nothing.
    Stale,
}

/// How the shared word should let calls through without the lock.
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

/// The smallest retry-after ever given (a rejection always tells the caller to wait).
pub(crate) const MIN_RETRY_AFTER: Duration = Duration::from_millis(1);

pub(crate) fn positive(d: Duration) -> Duration {
    if d.is_zero() {
        MIN_RETRY_AFTER
    } else {
        d
    }
}

/// Counters kept by the machine (the lock-free paths keep a few more, see `breaker.rs`).
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
}

/// The four automatic transitions, in this order.
const AUTOMATIC: [(State, State); 4] = [
    (State::Closed, State::Open),
    (State::Open, State::HalfOpen),
    (State::HalfOpen, State::Closed),
    (State::HalfOpen, State::Open),
];

#[derive(Debug, Clone, Copy, PartialEq)]
struct Ramp {
    started: Instant,
    credit: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Closed { ramp: Option<Ramp> },
    Open { until: Instant, open_for: Duration },
    HalfOpen { in_flight: u32, successes: u32 },
    ForcedOpen,
    ForcedClosed,
    Disabled,
}

impl Phase {
    const fn state(&self) -> State {
        match self {
            Phase::Closed { .. } => State::Closed,
            Phase::Open { .. } => State::Open,
            Phase::HalfOpen { .. } => State::HalfOpen,
            Phase::ForcedOpen => State::ForcedOpen,
            Phase::ForcedClosed => State::ForcedClosed,
            Phase::Disabled => State::Disabled,
        }
    }
}

#[derive(Debug)]
enum Window {
    Consecutive(u32),
    Count(CountWindow),
    Time(Box<TimeWindow>),
}

impl Window {
    fn new(policy: &TripPolicy, now: Instant) -> Result<Self, ConfigError> {
        Ok(match *policy {
            TripPolicy::ConsecutiveFailures { .. } => Window::Consecutive(0),
            TripPolicy::CountWindow { size, .. } => {
                Window::Count(CountWindow::new(size as usize).map_err(|e| e.within("policy"))?)
            }
            TripPolicy::TimeWindow { window, bucket, .. } => Window::Time(Box::new(
                TimeWindow::new(window, bucket, now).map_err(|e| e.within("policy"))?,
            )),
        })
    }

    fn record(&mut self, failed: bool, slow: bool, now: Instant) {
        match self {
            Window::Consecutive(n) => *n = if failed { n.saturating_add(1) } else { 0 },
            Window::Count(w) => w.record(failed, slow),
            Window::Time(w) => w.record(now, failed, slow),
        }
    }

    /// `n` successes that were not slow, in a row.
    fn record_successes(&mut self, n: u64, now: Instant) {
        match self {
            Window::Consecutive(f) => *f = 0,
            Window::Count(w) => {
                for _ in 0..n.min(w.size() as u64) {
                    w.record(false, false);
                }
            }
            // Never batched by the service (a time window needs each call's instant),
            // but correct if it were, as long as `n` is small.
            Window::Time(w) => {
                for _ in 0..n {
                    w.record(now, false, false);
                }
            }
        }
    }

    fn counts(&mut self, now: Instant) -> Option<WindowCounts> {
        match self {
            Window::Consecutive(_) => None,
            Window::Count(w) => Some(w.counts()),
            Window::Time(w) => Some(w.counts(now)),
        }
    }

    fn reset(&mut self) {
        match self {
            Window::Consecutive(n) => *n = 0,
            Window::Count(w) => w.reset(),
            Window::Time(w) => w.reset(),
        }
    }
}

/// The transitions made since the caller last took them; a few fit without allocating.
#[derive(Debug, Default)]
struct Events {
    buf: [Option<Transition>; 3],
}

impl Events {
    fn push(&mut self, t: Transition) {
        if let Some(slot) = self.buf.iter_mut().find(|s| s.is_none()) {
            *slot = Some(t);
        } else {
            // Nobody drained: keep the newest.
            self.buf.rotate_left(1);
            self.buf[2] = Some(t);
        }
    }

    fn take(&mut self) -> [Option<Transition>; 3] {
        std::mem::take(&mut self.buf)
    }
}

/// The breaker's policy. See the crate docs for the state diagram.
#[derive(Debug)]
pub(crate) struct Machine {
    config: CircuitBreakerConfig,
    /// The configuration before the first `reconfigure`, for `revert`.
    original: Option<Box<CircuitBreakerConfig>>,
    phase: Phase,
    since: Instant,
    epoch: u32,
    window: Window,
    /// Opens since the breaker last recovered fully (drives the backoff).
    streak: u32,
    /// Probes that failed (or timed out) in a row since the last close.
    failed_probes: u32,
    /// When the breaker last stopped admitting normally (tripped or forced), until it closes again.
    spell_since: Option<Instant>,
    /// Time spent in finished open spells.
    open_total: Duration,
    /// Start instants of the probes in flight, one slot per allowed probe.
    probes: Vec<Option<Instant>>,
    tally: Tally,
    automatic: [u64; 4],
    /// Operator transitions by (from, to), allocated at the first one.
    manual: Option<Box<[[u64; 6]; 6]>>,
    events: Events,
    /// The jitter sample for the next open interval (drawn ahead, so `state(now)` can
    /// report exactly what the next call will see).
    next_u: f64,
    random: Box<dyn RandomSource>,
}

impl Machine {
    pub(crate) fn new(
        config: CircuitBreakerConfig,
        mut random: Box<dyn RandomSource>,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let window = Window::new(&config.policy, now)?;
        let next_u = sample(&mut *random);
        Ok(Self {
            probes: vec![None; config.half_open_max as usize],
            config,
            original: None,
            phase: Phase::Closed { ramp: None },
            since: now,
            epoch: 0,
            window,
            streak: 0,
            failed_probes: 0,
            spell_since: None,
            open_total: Duration::ZERO,
            tally: Tally::default(),
            automatic: [0; 4],
            manual: None,
            events: Events::default(),
            next_u,
            random,
        })
    }

    // ----- reporting -------------------------------------------------------------

    /// The state at `now`, with the lazy transitions that are due reported as made.
    pub(crate) fn state(&self, now: Instant) -> State {
        self.reported(now).state
    }

    /// The state at `now` as [`Machine::state`] reports it, with when it began and,
    /// if open, when it will admit a probe.
    pub(crate) fn reported(&self, now: Instant) -> Reported {
        let open = |since: Instant, until: Instant| {
            if now >= until {
                Reported {
                    state: State::HalfOpen,
                    since: until,
                    until: None,
                }
            } else {
                Reported {
                    state: State::Open,
                    since,
                    until: Some(until),
                }
            }
        };
        match self.phase {
            Phase::Open { until, .. } => open(self.since, until),
            Phase::HalfOpen { .. } => match self.probe_deadline() {
                Some(due) if now >= due => open(
                    due,
                    later(due, self.open_interval(self.streak.saturating_add(1))),
                ),
                _ => Reported {
                    state: State::HalfOpen,
                    since: self.since,
                    until: None,
                },
            },
            phase => Reported {
                state: phase.state(),
                since: self.since,
                until: None,
            },
        }
    }

    pub(crate) fn epoch(&self) -> u32 {
        self.epoch
    }

    pub(crate) fn config(&self) -> &CircuitBreakerConfig {
        &self.config
    }

    /// When the current state began.
    #[cfg(test)]
    pub(crate) fn since(&self) -> Instant {
        self.since
    }

    pub(crate) fn tally(&self) -> Tally {
        self.tally
    }

    /// Transition counts by (from, to), non-zero only.
    pub(crate) fn transition_counts(&self) -> Vec<(State, State, u64)> {
        let mut out: Vec<(State, State, u64)> = AUTOMATIC
            .iter()
            .zip(self.automatic)
            .filter(|(_, n)| *n > 0)
            .map(|((from, to), n)| (*from, *to, n))
            .collect();
        if let Some(manual) = &self.manual {
            for from in State::ALL {
                for to in State::ALL {
                    let n = manual[from.index()][to.index()];
                    if n > 0 {
                        out.push((from, to, n));
                    }
                }
            }
        }
        out
    }

    pub(crate) fn window_counts(&mut self, now: Instant) -> Option<WindowCounts> {
        self.window.counts(now)
    }

    pub(crate) fn consecutive_failures(&self) -> Option<u32> {
        match self.window {
            Window::Consecutive(n) => Some(n),
            _ => None,
        }
    }

    pub(crate) fn probes_in_flight(&self) -> u32 {
        match self.phase {
            Phase::HalfOpen { in_flight, .. } => in_flight,
            _ => 0,
        }
    }

    pub(crate) fn failed_probes(&self) -> u32 {
        self.failed_probes
    }

    pub(crate) fn streak(&self) -> u32 {
        self.streak
    }

    /// The interval of the current open state.
    pub(crate) fn current_open_for(&self) -> Option<Duration> {
        match self.phase {
            Phase::Open { open_for, .. } => Some(open_for),
            _ => None,
        }
    }

    /// How long the breaker has been out of the closed states (tripped or forced), if it is.
    pub(crate) fn open_spell(&self, now: Instant) -> Option<Duration> {
        self.spell_since.map(|s| now.saturating_duration_since(s))
    }

    /// Total time spent out of the closed states, the current spell included.
    pub(crate) fn open_total(&self, now: Instant) -> Duration {
        self.open_total + self.open_spell(now).unwrap_or_default()
    }

    /// The share of calls admitted while ramping up after closing.
    pub(crate) fn ramp_share(&self, now: Instant) -> Option<f64> {
        match (self.phase, self.config.ramp) {
            (Phase::Closed { ramp: Some(r) }, Some(cfg)) => {
                let elapsed = now.saturating_duration_since(r.started);
                if elapsed >= cfg.duration {
                    None
                } else {
                    let progress = elapsed.as_secs_f64() / cfg.duration.as_secs_f64();
                    Some((cfg.start_share + (1.0 - cfg.start_share) * progress).clamp(0.0, 1.0))
                }
            }
            _ => None,
        }
    }

    /// How the lock-free paths should treat calls.
    pub(crate) fn mode(&self) -> Mode {
        match self.phase {
            Phase::Closed { ramp: None } | Phase::ForcedClosed | Phase::Disabled => Mode::Closed,
            Phase::Open { .. } => Mode::Open,
            Phase::ForcedOpen => Mode::ForcedOpen,
            Phase::Closed { ramp: Some(_) } | Phase::HalfOpen { .. } => Mode::Locked,
        }
    }

    /// Whether successes may be tallied without the lock and folded in later with
    /// [`Machine::record_successes`]: true where the order and instant of successes
    /// do not matter (consecutive and count policies, and when disabled).
    pub(crate) fn batches_successes(&self) -> bool {
        match self.phase {
            Phase::Disabled => true,
            Phase::Closed { ramp: None } | Phase::ForcedClosed => {
                !matches!(self.window, Window::Time(_))
            }
            _ => false,
        }
    }

    /// When an open breaker will let a probe through.
    pub(crate) fn reopen_at(&self) -> Option<Instant> {
        match self.phase {
            Phase::Open { until, .. } => Some(until),
            _ => None,
        }
    }

    /// The slow-call threshold, if slow calls are detected.
    pub(crate) fn slow_threshold(&self) -> Option<Duration> {
        self.config.slow_call.map(|s| s.threshold)
    }

    /// The transitions made since the last call.
    pub(crate) fn take_transitions(&mut self) -> impl Iterator<Item = Transition> {
        self.events.take().into_iter().flatten()
    }

    // ----- the call path ---------------------------------------------------------

    /// Applies the lazy transitions due at `now`.
    pub(crate) fn advance(&mut self, now: Instant) {
        // Each step moves time-driven state forward; at most: a probe times out,
        // its reopen interval passes, and the breaker is half-open again.
        for _ in 0..4 {
            match self.phase {
                Phase::Open { until, .. } if now >= until => {
                    self.transition(
                        Phase::HalfOpen {
                            in_flight: 0,
                            successes: 0,
                        },
                        until,
                        Reason::OpenIntervalElapsed,
                    );
                }
                Phase::HalfOpen { .. } => match self.probe_deadline() {
                    Some(due) if now >= due => {
                        self.tally.probe_timeouts += 1;
                        self.tally.probe_failures += 1;
                        self.failed_probes = self.failed_probes.saturating_add(1);
                        self.streak = self.streak.saturating_add(1);
                        self.open_at(due, Reason::ProbeTimedOut);
                    }
                    _ => return,
                },
                Phase::Closed { ramp: Some(r) } => {
                    let over = match self.config.ramp {
                        Some(cfg) => now >= later(r.started, cfg.duration),
                        None => true,
                    };
                    if over {
                        self.phase = Phase::Closed { ramp: None };
                        self.streak = 0;
                    }
                    return;
                }
                _ => return,
            }
        }
    }

    /// Asks to let one call through at `now`.
    pub(crate) fn acquire(&mut self, now: Instant) -> Admission {
        self.advance(now);
        let epoch = self.epoch;
        let rejected = match &mut self.phase {
            Phase::Closed { ramp: None } | Phase::ForcedClosed | Phase::Disabled => {
                return Admission::Admitted(Ticket::normal(epoch));
            }
            Phase::Closed { ramp: Some(ramp) } => {
                let share = match self.config.ramp {
                    Some(cfg) => {
                        let progress = now.saturating_duration_since(ramp.started).as_secs_f64()
                            / cfg.duration.as_secs_f64();
                        cfg.start_share + (1.0 - cfg.start_share) * progress.clamp(0.0, 1.0)
                    }
                    None => 1.0,
                };
                ramp.credit += share;
                if ramp.credit >= 1.0 {
                    ramp.credit -= 1.0;
                    return Admission::Admitted(Ticket::normal(epoch));
                }
                let end = self
                    .config
                    .ramp
                    .map_or(now, |cfg| later(ramp.started, cfg.duration));
                end.saturating_duration_since(now)
            }
            Phase::Open { until, .. } => until.saturating_duration_since(now),
            Phase::ForcedOpen => self.config.open_for,
            Phase::HalfOpen { in_flight, .. } => {
                if *in_flight < self.config.half_open_max {
                    if let Some(slot) = self.probes.iter().position(Option::is_none) {
                        self.probes[slot] = Some(now);
                        *in_flight += 1;
                        return Admission::Admitted(Ticket {
                            epoch,
                            probe: Some(slot as u32),
                        });
                    }
                }
                // Turned away while the probes are in flight: wait at most until the
                // oldest probe must have finished (or counts as failed).
                self.probe_deadline()
                    .map_or(MIN_RETRY_AFTER, |due| due.saturating_duration_since(now))
            }
        };
        self.tally.short_circuited += 1;
        Admission::Rejected(positive(rejected))
    }

    /// Reports how an admitted call ended.
    pub(crate) fn complete(&mut self, ticket: Ticket, report: Report, now: Instant) -> Recorded {
        self.advance(now);
        let recorded_outcome = report.outcome != Outcome::Ignore;
        match report.outcome {
            Outcome::Success => self.tally.successes += 1,
            Outcome::Failure => self.tally.failures += 1,
            Outcome::Ignore => self.tally.ignored += 1,
        }
        if report.slow && recorded_outcome {
            self.tally.slow += 1;
        }
        if report.timed_out {
            self.tally.timeouts += 1;
        }
        if ticket.epoch != self.epoch {
            if recorded_outcome {
                self.tally.stale += 1;
            }
            return Recorded::Stale;
        }
        match (ticket.probe, self.phase) {
            (Some(slot), Phase::HalfOpen { .. }) => {
                self.finish_probe(slot, report.outcome, now);
                Recorded::Probe
            }
            (None, Phase::Closed { .. } | Phase::ForcedClosed) => {
                if recorded_outcome {
                    let failed = report.outcome == Outcome::Failure;
                    self.window.record(failed, report.slow, now);
                    if (failed || report.slow) && matches!(self.phase, Phase::Closed { .. }) {
                        if let Some(reason) = self.should_trip(now) {
                            self.trip(now, reason);
                        }
                    }
                }
                Recorded::Current
            }
            _ => Recorded::Current,
        }
    }

    /// Folds in `n` successes (none slow) of calls admitted in `epoch`, tallied
    /// without the lock. Equivalent to `n` calls to [`Machine::complete`] with a
    /// success, for the ordinary (non-probe) calls of a closed or disabled breaker.
    pub(crate) fn record_successes(&mut self, epoch: u32, n: u64, now: Instant) {
        if n == 0 {
            return;
        }
        self.tally.successes += n;
        if epoch != self.epoch {
            self.tally.stale += n;
            return;
        }
        if let Phase::Closed { .. } | Phase::ForcedClosed = self.phase {
            self.window.record_successes(n, now);
        }
    }

    /// Reports that an admitted call was dropped before it finished: not recorded,
    /// but a probe's slot is freed.
    pub(crate) fn cancel(&mut self, ticket: Ticket, now: Instant) {
        self.advance(now);
        self.tally.cancelled += 1;
        if ticket.epoch == self.epoch {
            if let Some(slot) = ticket.probe {
                self.free_probe(slot);
            }
        }
    }

    /// Takes back an admitted ticket whose call never went out (the inner service
    /// was not ready for it): the call counts as short-circuited, a probe's slot is freed.
    pub(crate) fn give_back(&mut self, ticket: Ticket, now: Instant) {
        self.advance(now);
        self.tally.short_circuited += 1;
        if ticket.epoch == self.epoch {
            if let Some(slot) = ticket.probe {
                self.free_probe(slot);
            }
        }
    }

    // ----- operator controls -----------------------------------------------------

    /// Holds the breaker open until an operator resets it.
    pub(crate) fn force_open(&mut self, now: Instant) {
        self.force(Phase::ForcedOpen, Reason::ForcedOpen, now);
    }

    /// Holds the breaker closed (outcomes still recorded, no trips) until reset.
    pub(crate) fn force_closed(&mut self, now: Instant) {
        self.force(Phase::ForcedClosed, Reason::ForcedClosed, now);
    }

    /// Lets every call through and only counts, until reset.
    pub(crate) fn disable(&mut self, now: Instant) {
        self.force(Phase::Disabled, Reason::Disabled, now);
    }

    /// A fresh closed breaker: empty window, no backoff, no failed probes. Calls in
    /// flight become stale. Counters are cumulative and are kept.
    pub(crate) fn reset(&mut self, now: Instant) {
        self.window.reset();
        self.streak = 0;
        self.failed_probes = 0;
        if let Phase::Closed { .. } = self.phase {
            self.phase = Phase::Closed { ramp: None };
            self.epoch = self.epoch.wrapping_add(1);
        } else {
            self.transition(Phase::Closed { ramp: None }, now, Reason::Reset);
        }
    }

    /// Applies a new configuration, keeping the state. The window is kept when its
    /// shape (policy kind, size, window and bucket) is unchanged; otherwise a new
    /// empty one starts (and the calls in flight of a closed breaker become stale).
    pub(crate) fn reconfigure(
        &mut self,
        config: CircuitBreakerConfig,
        now: Instant,
    ) -> Result<(), ConfigError> {
        config.validate()?;
        let window = if self.config.policy.same_window(&config.policy) {
            None
        } else {
            Some(Window::new(&config.policy, now)?)
        };
        if self.original.is_none() {
            self.original = Some(Box::new(self.config.clone()));
        }
        self.apply(config, window);
        Ok(())
    }

    /// Goes back to the configuration the breaker was built with, keeping the state.
    pub(crate) fn revert(&mut self, now: Instant) {
        if let Some(original) = self.original.take() {
            let original = *original;
            if self.config.policy.same_window(&original.policy) {
                self.apply(original, None);
            } else {
                match Window::new(&original.policy, now) {
                    Ok(window) => self.apply(original, Some(window)),
                    // Unreachable: the built configuration was validated.
                    Err(_) => self.original = Some(Box::new(original)),
                }
            }
        }
    }

    // ----- internals -------------------------------------------------------------

    fn apply(&mut self, config: CircuitBreakerConfig, window: Option<Window>) {
        let max = config.half_open_max as usize;
        if self.probes.len() < max {
            self.probes.resize(max, None);
        }
        self.config = config;
        if let Some(window) = window {
            self.window = window;
            // Outcomes of calls admitted under the old window must not land in the new
            // one. (Half-open probes keep their epoch: no window is recorded then.)
            if !matches!(self.phase, Phase::HalfOpen { .. }) {
                self.epoch = self.epoch.wrapping_add(1);
            }
        }
    }

    fn force(&mut self, phase: Phase, reason: Reason, now: Instant) {
        if self.phase.state() != phase.state() {
            self.transition(phase, now, reason);
        }
    }

    /// When the oldest probe in flight counts as failed.
    fn probe_deadline(&self) -> Option<Instant> {
        self.probes
            .iter()
            .flatten()
            .min()
            .map(|start| later(*start, self.config.half_open_timeout))
    }

    fn should_trip(&mut self, now: Instant) -> Option<Reason> {
        let (min_calls, failure_rate) = match self.config.policy {
            TripPolicy::ConsecutiveFailures { threshold } => {
                return match self.window {
                    Window::Consecutive(n) if n >= threshold => Some(Reason::ConsecutiveFailures),
                    _ => None,
                };
            }
            TripPolicy::CountWindow {
                min_calls,
                failure_rate,
                ..
            }
            | TripPolicy::TimeWindow {
                min_calls,
                failure_rate,
                ..
            } => (min_calls, failure_rate),
        };
        let counts = self.window.counts(now)?;
        if counts.calls < min_calls {
            return None;
        }
        if counts.failure_rate() >= failure_rate {
            return Some(Reason::FailureRate);
        }
        match self.config.slow_call {
            Some(slow) if counts.slow_rate() >= slow.rate => Some(Reason::SlowCallRate),
            _ => None,
        }
    }

    fn trip(&mut self, now: Instant, reason: Reason) {
        // A trip during the ramp is a re-trip: the backoff keeps growing.
        if matches!(self.phase, Phase::Closed { ramp: Some(_) }) {
            self.streak = self.streak.saturating_add(1);
        } else {
            self.streak = 0;
        }
        self.open_at(now, reason);
    }

    fn finish_probe(&mut self, slot: u32, outcome: Outcome, now: Instant) {
        self.free_probe(slot);
        match outcome {
            Outcome::Success => {
                self.tally.probe_successes += 1;
                if let Phase::HalfOpen { successes, .. } = &mut self.phase {
                    *successes += 1;
                    if *successes >= self.config.probes_to_close {
                        self.close(now);
                    }
                }
            }
            Outcome::Failure => {
                self.tally.probe_failures += 1;
                self.failed_probes = self.failed_probes.saturating_add(1);
                self.streak = self.streak.saturating_add(1);
                self.open_at(now, Reason::ProbeFailed);
            }
            Outcome::Ignore => {}
        }
    }

    fn free_probe(&mut self, slot: u32) {
        if let Phase::HalfOpen { in_flight, .. } = &mut self.phase {
            if let Some(start) = self.probes.get_mut(slot as usize) {
                if start.take().is_some() {
                    *in_flight -= 1;
                }
            }
        }
    }

    fn close(&mut self, now: Instant) {
        self.window.reset();
        self.failed_probes = 0;
        let ramp = self.config.ramp.map(|cfg| Ramp {
            started: now,
            // The first call after closing goes through.
            credit: 1.0 - cfg.start_share,
        });
        if ramp.is_none() {
            self.streak = 0;
        }
        self.transition(Phase::Closed { ramp }, now, Reason::ProbesSucceeded);
    }

    /// The open interval for the current streak: grown by the backoff, capped, then jittered.
    fn open_interval(&self, streak: u32) -> Duration {
        let c = &self.config;
        let mut secs = None;
        if streak > 0 && c.backoff_multiplier > 1.0 {
            let exp = i32::try_from(streak).unwrap_or(i32::MAX);
            let grown = c.open_for.as_secs_f64() * c.backoff_multiplier.powi(exp);
            secs = Some(grown.min(c.max_open_for.as_secs_f64()));
        }
        if c.jitter > 0.0 {
            let base = secs.unwrap_or(c.open_for.as_secs_f64());
            secs = Some(base * (1.0 + c.jitter * self.next_u));
        }
        secs.and_then(|s| Duration::try_from_secs_f64(s).ok())
            .unwrap_or(c.open_for)
    }

    fn open_at(&mut self, at: Instant, reason: Reason) {
        let open_for = self.open_interval(self.streak);
        self.next_u = sample(&mut *self.random);
        self.transition(
            Phase::Open {
                until: later(at, open_for),
                open_for,
            },
            at,
            reason,
        );
    }

    fn transition(&mut self, to: Phase, at: Instant, reason: Reason) {
        let from = self.phase.state();
        if let Phase::HalfOpen { .. } = self.phase {
            self.probes.iter_mut().for_each(|p| *p = None);
            self.probes.truncate(self.config.half_open_max as usize);
        }
        let to_state = to.state();
        self.phase = to;
        self.since = at;
        self.epoch = self.epoch.wrapping_add(1);
        match to_state {
            State::Closed | State::ForcedClosed | State::Disabled => {
                if let Some(start) = self.spell_since.take() {
                    self.open_total += at.saturating_duration_since(start);
                }
            }
            State::Open | State::HalfOpen | State::ForcedOpen => {
                self.spell_since.get_or_insert(at);
            }
        }
        if reason.is_operator() {
            let manual = self.manual.get_or_insert_with(Default::default);
            manual[from.index()][to_state.index()] += 1;
        } else if let Some(i) = AUTOMATIC.iter().position(|p| *p == (from, to_state)) {
            self.automatic[i] += 1;
        }
        self.events.push(Transition {
            from,
            to: to_state,
            reason,
            at,
            epoch: self.epoch,
        });
    }
}

/// A sample in `[0, 1)`, whatever the source returns.
fn sample(random: &mut dyn RandomSource) -> f64 {
    let u = random.next_f64();
    if (0.0..1.0).contains(&u) {
        u
    } else {
        0.0
    }
}

/// `at + d`, saturating instead of overflowing (durations are validated far below that).
fn later(at: Instant, d: Duration) -> Instant {
    at.checked_add(d).unwrap_or(at)
}

#[cfg(test)]
mod tests;
