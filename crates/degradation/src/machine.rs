//! The level machine: falls at once on evidence, climbs back slowly and verified.
//!
//! A plain struct with no async and no clock reads: every method that needs time
//! takes `now`. The service adapter wraps it in a mutex and mirrors the few fields
//! the hot path needs in atomics.

use std::fmt;

use seawall_core::{ConfigError, Outcome, RandomSource, TimeWindow, WindowCounts};
use tokio::time::Instant;

use crate::config::{DegradationConfig, Trigger, RATE_BUCKETS};

/// The most levels a machine may have.
pub const MAX_LEVELS: usize = 1024;

/// Epochs wrap at 48 bits (the service packs epoch and level in one atomic word).
const EPOCH_MASK: u64 = (1 << 48) - 1;

/// Why the level changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Cause {
    /// `failures_to_degrade` consecutive failures at the level.
    ConsecutiveFailures,
    /// The failure rate over the window reached `failure_rate`.
    FailureRate,
    /// Probes to the level above passed a whole probe window.
    Recovered,
    /// A floor was set below the level (a health signal or an operator).
    Floor,
    /// An operator forced the level.
    Forced,
}

impl Cause {
    /// A short, stable, lower-case label (for logs and metrics).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ConsecutiveFailures => "consecutive_failures",
            Self::FailureRate => "failure_rate",
            Self::Recovered => "recovered",
            Self::Floor => "floor",
            Self::Forced => "forced",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which way a change went. Level 0 is the best, so "down" means a higher index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Direction {
    /// Toward the last (most degraded) level.
    Down,
    /// Toward the best level.
    Up,
}

impl Direction {
    /// `"down"` or `"up"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Down => "down",
            Self::Up => "up",
        }
    }
}

/// One level change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The level before (index, 0 is the best).
    pub from: usize,
    /// The level after.
    pub to: usize,
    /// Why.
    pub cause: Cause,
    /// When.
    pub at: Instant,
    /// The outcome that completed it was injected by a rehearsal (see
    /// [`DegradationMachine::record_rehearsal`]). Never set on a change made by a
    /// floor or an operator.
    pub rehearsal: bool,
}

impl Change {
    /// Whether the change went down (worse) or up (better).
    pub fn direction(&self) -> Direction {
        if self.to > self.from {
            Direction::Down
        } else {
            Direction::Up
        }
    }
}

/// What a request was admitted as: which level serves it, whether it is a recovery
/// probe, and the state it was admitted in (its outcome is ignored if the level has
/// changed since).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub(crate) level: usize,
    pub(crate) probe: bool,
    pub(crate) epoch: u64,
    pub(crate) window: u64,
    /// Served by the best level in shadow mode instead of the level chosen: its
    /// outcome says nothing about that level and is not recorded.
    pub(crate) shadow: bool,
}

impl Ticket {
    /// This ticket's request served by the best level instead, in shadow mode.
    pub(crate) const fn in_shadow(self) -> Self {
        Self {
            level: 0,
            probe: false,
            epoch: self.epoch,
            window: self.window,
            shadow: true,
        }
    }

    /// The level that serves the request.
    pub fn level(&self) -> usize {
        self.level
    }

    /// Whether the request is a recovery probe of the level above the current one.
    pub fn is_probe(&self) -> bool {
        self.probe
    }
}

/// Progress of the recovery probes toward the next climb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ProbeProgress {
    /// When the current probe window began (at its first probe), if it has.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub window_started_at: Option<Instant>,
    /// Probe successes since the window began or the last failed probe.
    pub successes: u32,
    /// Probe outcomes recorded in the window.
    pub probes: u32,
    /// Failed probes in the window.
    pub failures: u32,
}

/// The machine's state at one moment.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MachineSnapshot {
    /// The level in force (index, 0 is the best).
    pub level: usize,
    /// When that level was entered.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub entered_at: Instant,
    /// How long the level has been in force.
    #[cfg_attr(
        feature = "serde",
        serde(serialize_with = "seawall_core::duration_format::serialize")
    )]
    pub time_at_level: std::time::Duration,
    /// Consecutive failures at the level (reset by a success at the level).
    pub failures: u32,
    /// The failure-rate window's counts ([`Trigger::FailureRate`] only).
    pub window: Option<WindowCounts>,
    /// Whether requests may be sent as probes to the level above right now.
    pub probing: bool,
    /// Recovery probe progress.
    pub probe: ProbeProgress,
    /// The best level the machine may climb to, if bounded.
    pub floor: Option<usize>,
    /// Whether an operator forced the level.
    pub forced: bool,
}

#[derive(Debug, Default)]
struct Probes {
    seq: u64,
    progress: ProbeProgress,
}

impl Probes {
    /// Forgets the window and its outcomes; probes in flight no longer count.
    fn restart(&mut self) {
        self.seq += 1;
        self.progress = ProbeProgress::default();
    }
}

/// The degradation level machine.
///
/// Levels are numbered from 0 (the best) to `levels - 1` (the last resort). The
/// machine starts at level 0 and:
///
/// - falls one level as soon as the configured [`Trigger`] fires on outcomes at the
///   current level (it can keep falling down to the last level);
/// - climbs one level only when, after `min_dwell` at the current level, recovery
///   probes (a `probe_ratio` share of requests, sampled from the injected
///   [`RandomSource`]) sent to the level above passed a whole `probe_window` with at
///   least `probe_successes_to_recover` successes since the last failed probe and a
///   probe failure rate at most `probe_max_failure_rate`; otherwise a new window starts;
/// - never climbs above a floor; `force` holds a level until `release`.
///
/// Successes served at the current level never promote it. A failed probe resets
/// probe progress but is no evidence against the current level; a failure at the
/// current level resets probe progress too. Outcomes of requests admitted before the
/// last level change (or, for probes, before the current probe window) are ignored.
pub struct DegradationMachine {
    config: DegradationConfig,
    levels: usize,
    level: usize,
    entered_at: Instant,
    epoch: u64,
    consecutive_failures: u32,
    rate: Option<TimeWindow>,
    probes: Probes,
    floor: Option<usize>,
    forced: bool,
    random: Box<dyn RandomSource>,
}

impl fmt::Debug for DegradationMachine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DegradationMachine")
            .field("levels", &self.levels)
            .field("level", &self.level)
            .field("entered_at", &self.entered_at)
            .field("epoch", &self.epoch)
            .field("consecutive_failures", &self.consecutive_failures)
            .field("probes", &self.probes)
            .field("floor", &self.floor)
            .field("forced", &self.forced)
            .finish_non_exhaustive()
    }
}

fn rate_window(
    config: &DegradationConfig,
    now: Instant,
) -> Result<Option<TimeWindow>, ConfigError> {
    if config.trigger != Trigger::FailureRate {
        return Ok(None);
    }
    let bucket = config.rate_window / RATE_BUCKETS;
    TimeWindow::new(config.rate_window, bucket, now)
        .map(Some)
        .map_err(|e| ConfigError::new("rate_window", e.problem().to_owned()))
}

impl DegradationMachine {
    /// A machine over `levels` levels (at least 2, at most [`MAX_LEVELS`]), at level 0
    /// from `now`.
    pub fn new(
        levels: usize,
        config: DegradationConfig,
        random: Box<dyn RandomSource>,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        if levels < 2 {
            return Err(ConfigError::new(
                "levels",
                "at least two levels are needed (the inner service and one below it)",
            ));
        }
        if levels > MAX_LEVELS {
            return Err(ConfigError::new(
                "levels",
                format!("at most {MAX_LEVELS} levels"),
            ));
        }
        config.validate()?;
        Ok(Self {
            rate: rate_window(&config, now)?,
            config,
            levels,
            level: 0,
            entered_at: now,
            epoch: 0,
            consecutive_failures: 0,
            probes: Probes::default(),
            floor: None,
            forced: false,
            random,
        })
    }

    /// The number of levels.
    pub fn levels(&self) -> usize {
        self.levels
    }

    /// The level in force (0 is the best).
    pub fn level(&self) -> usize {
        self.level
    }

    /// Counts level changes (wrapping at 2^48); a ticket from another epoch is ignored.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The configuration in force.
    pub fn config(&self) -> &DegradationConfig {
        &self.config
    }

    /// The best level the machine may climb to, if bounded.
    pub fn floor(&self) -> Option<usize> {
        self.floor
    }

    /// Whether an operator forced the level.
    pub fn is_forced(&self) -> bool {
        self.forced
    }

    /// When probing the level above becomes possible at the current level, or `None`
    /// if it cannot (the best level, at the floor, or forced). Until a change, no
    /// request before that instant can be a probe.
    pub fn probing_from(&self) -> Option<Instant> {
        if self.forced || self.level <= self.floor.unwrap_or(0) {
            return None;
        }
        // A dwell too long to add to the clock never ends.
        self.entered_at.checked_add(self.config.min_dwell)
    }

    /// Whether a success at the current level would change nothing (no consecutive
    /// failures to reset, no rate window to feed): the service then skips recording it.
    pub fn success_is_quiet(&self) -> bool {
        self.rate.is_none() && self.consecutive_failures == 0
    }

    /// A ticket for a request served at the current level, without probing.
    pub fn steady_ticket(&self) -> Ticket {
        Ticket {
            level: self.level,
            probe: false,
            epoch: self.epoch,
            window: self.probes.seq,
            shadow: false,
        }
    }

    fn probing_allowed(&self, now: Instant) -> bool {
        self.probing_from().is_some_and(|from| now >= from)
    }

    fn move_to(&mut self, to: usize, cause: Cause, now: Instant) -> Change {
        let change = Change {
            from: self.level,
            to,
            cause,
            at: now,
            rehearsal: false,
        };
        self.level = to;
        self.entered_at = now;
        self.epoch = (self.epoch + 1) & EPOCH_MASK;
        self.consecutive_failures = 0;
        if let Some(w) = &mut self.rate {
            w.reset();
        }
        self.probes.restart();
        change
    }

    /// Judges the probe window if it has ended at `now`: climbs one level, or starts
    /// a new window.
    fn judge_window(&mut self, now: Instant) -> Option<Change> {
        let started = self.probes.progress.window_started_at?;
        let end = started.checked_add(self.config.probe_window);
        if end.is_none_or(|end| now < end) {
            return None;
        }
        let p = self.probes.progress;
        let rate = if p.probes == 0 {
            0.0
        } else {
            f64::from(p.failures) / f64::from(p.probes)
        };
        let passed = p.successes >= self.config.probe_successes_to_recover
            && rate <= self.config.probe_max_failure_rate;
        if passed && self.probing_allowed(now) {
            let to = self.level - 1;
            Some(self.move_to(to, Cause::Recovered, now))
        } else if self.config.probe_window.is_zero() {
            // No window to end: the probes gather until the bar is met .
            None
        } else {
            self.probes.restart();
            None
        }
    }

    /// Decides how to serve one request at `now`: at the current level, or — once the
    /// dwell has passed and with probability `probe_ratio` — as a probe of the level
    /// above. Samples the random source only when a probe is possible. May climb a
    /// level first if a probe window has just ended with enough successes.
    pub fn route(&mut self, now: Instant) -> (Ticket, Option<Change>) {
        if !self.probing_allowed(now) {
            return (self.steady_ticket(), None);
        }
        let change = self.judge_window(now);
        if change.is_some() || !self.probing_allowed(now) {
            return (self.steady_ticket(), change);
        }
        if self.random.next_f64() >= self.config.probe_ratio {
            return (self.steady_ticket(), None);
        }
        let progress = &mut self.probes.progress;
        if progress.window_started_at.is_none() {
            progress.window_started_at = Some(now);
        }
        let ticket = Ticket {
            level: self.level - 1,
            probe: true,
            epoch: self.epoch,
            window: self.probes.seq,
            shadow: false,
        };
        (ticket, None)
    }

    /// Records the outcome of a request admitted with `ticket`. Returns the level
    /// change it caused, if any.
    pub fn record(&mut self, ticket: Ticket, outcome: Outcome, now: Instant) -> Option<Change> {
        if outcome == Outcome::Ignore || ticket.epoch != self.epoch || self.forced || ticket.shadow
        {
            return None;
        }
        if ticket.probe {
            return self.record_probe(ticket, outcome == Outcome::Failure, now);
        }
        let failed = outcome == Outcome::Failure;
        if !failed {
            self.consecutive_failures = 0;
            if let Some(w) = &mut self.rate {
                w.record(now, false, false);
            }
            return None;
        }
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        // Things got worse: what the probes showed so far no longer holds.
        self.probes.restart();
        let cause = match &mut self.rate {
            None => (self.consecutive_failures >= self.config.failures_to_degrade)
                .then_some(Cause::ConsecutiveFailures),
            Some(w) => {
                w.record(now, true, false);
                let c = w.counts(now);
                (c.calls >= self.config.min_calls && c.failure_rate() >= self.config.failure_rate)
                    .then_some(Cause::FailureRate)
            }
        }?;
        if self.level + 1 >= self.levels {
            // The last level has nowhere to go.
            return None;
        }
        Some(self.move_to(self.level + 1, cause, now))
    }

    /// Records the outcome of a request admitted with `ticket`, which an injected
    /// fault produced (its classifier gave the reason
    /// [`REHEARSAL`](seawall_core::REHEARSAL)): it counts as any other outcome, so a
    /// rehearsal exercises the levels, and the change it completes is marked
    /// [`Change::rehearsal`].
    pub fn record_rehearsal(
        &mut self,
        ticket: Ticket,
        outcome: Outcome,
        now: Instant,
    ) -> Option<Change> {
        self.record(ticket, outcome, now).map(|change| Change {
            rehearsal: true,
            ..change
        })
    }

    fn record_probe(&mut self, ticket: Ticket, failed: bool, now: Instant) -> Option<Change> {
        if ticket.window != self.probes.seq {
            return None;
        }
        let p = &mut self.probes.progress;
        p.probes = p.probes.saturating_add(1);
        if failed {
            // Says nothing about the current level: its failure count is untouched.
            p.successes = 0;
            p.failures = p.failures.saturating_add(1);
        } else {
            p.successes = p.successes.saturating_add(1);
        }
        self.judge_window(now)
    }

    fn check_level(&self, level: usize) -> Result<(), ConfigError> {
        if level < self.levels {
            Ok(())
        } else {
            Err(ConfigError::new(
                "level",
                format!("no level {level}; levels are 0..={}", self.levels - 1),
            ))
        }
    }

    /// Bounds how high the machine may climb: no level better than `floor`. If the
    /// current level is better, the machine moves down to `floor` at once (unless forced).
    pub fn set_floor(&mut self, floor: usize, now: Instant) -> Result<Option<Change>, ConfigError> {
        self.check_level(floor)?;
        self.floor = Some(floor);
        self.probes.restart();
        if !self.forced && self.level < floor {
            return Ok(Some(self.move_to(floor, Cause::Floor, now)));
        }
        Ok(None)
    }

    /// Removes the floor. The machine climbs back through probes as usual, never at once.
    pub fn clear_floor(&mut self) {
        self.floor = None;
    }

    /// Holds `level` until [`release`](Self::release); outcomes are then ignored and no
    /// probes are sent. Wins over the floor.
    pub fn force(&mut self, level: usize, now: Instant) -> Result<Option<Change>, ConfigError> {
        self.check_level(level)?;
        self.forced = true;
        if self.level != level {
            return Ok(Some(self.move_to(level, Cause::Forced, now)));
        }
        Ok(None)
    }

    /// Hands the level back to the machine: it starts a fresh dwell at the forced
    /// level, or moves down to the floor if the forced level was better.
    pub fn release(&mut self, now: Instant) -> Option<Change> {
        if !self.forced {
            return None;
        }
        self.forced = false;
        match self.floor {
            Some(floor) if self.level < floor => Some(self.move_to(floor, Cause::Floor, now)),
            _ => {
                // A fresh start at this level; in-flight outcomes stay valid.
                self.entered_at = now;
                self.consecutive_failures = 0;
                if let Some(w) = &mut self.rate {
                    w.reset();
                }
                self.probes.restart();
                None
            }
        }
    }

    /// Replaces the configuration, keeping the level, its entry time, the floor and
    /// the forced state. The failure-rate window restarts if the trigger or its window
    /// changed; probe progress restarts.
    pub fn reconfigure(
        &mut self,
        config: DegradationConfig,
        now: Instant,
    ) -> Result<(), ConfigError> {
        config.validate()?;
        if config.trigger != self.config.trigger || config.rate_window != self.config.rate_window {
            self.rate = rate_window(&config, now)?;
        }
        // Switching shadow mode alone changes no decision: probe progress stays.
        let only_shadow = DegradationConfig {
            shadow: self.config.shadow,
            ..config
        } == self.config;
        self.config = config;
        if !only_shadow {
            self.probes.restart();
        }
        Ok(())
    }

    /// The state at `now`.
    pub fn snapshot(&mut self, now: Instant) -> MachineSnapshot {
        MachineSnapshot {
            level: self.level,
            entered_at: self.entered_at,
            time_at_level: now.saturating_duration_since(self.entered_at),
            failures: self.consecutive_failures,
            window: self.rate.as_mut().map(|w| w.counts(now)),
            probing: self.probing_allowed(now),
            probe: self.probes.progress,
            floor: self.floor,
            forced: self.forced,
        }
    }
}

#[cfg(test)]
mod tests;
