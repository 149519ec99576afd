//! The operator's handle: snapshot, subscription, controls, reconfiguration.

use std::sync::Arc;
use std::time::Duration;

use seawall_core::{layer_handle_by_inherent_methods, ConfigError, WindowCounts};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::config::CircuitBreakerConfig;
use crate::hooks::{ProbeGate, Verdict, VerdictOutcome};
use crate::machine::{CircuitBreakerEvent, State};
use crate::state::Lane;

/// Watches and steers one breaker. Cheap to clone; every clone controls the same breaker.
///
/// Its name, configuration, snapshot and operator verbs are those of every seawall
/// layer's handle ([`LayerHandle`](seawall_core::LayerHandle), implemented by delegating to the methods here).
#[derive(Debug, Clone)]
pub struct Handle {
    breaker: Arc<Lane>,
}

impl Handle {
    pub(crate) fn new(breaker: Arc<Lane>) -> Self {
        Self { breaker }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        self.breaker.name()
    }

    /// The state now. Open → half-open is lazy: this reports `HalfOpen` once the open
    /// interval has passed, but the transition itself is made by the next call.
    pub fn state(&self) -> State {
        let now = Instant::now();
        self.breaker.locked(now, |m| m.state(now))
    }

    /// The state, its age, the window and every counter, at this instant.
    pub fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        let fast = self.breaker.fast_counts();
        self.breaker.locked(now, |m| {
            let reported = m.reported(now);
            let tally = m.tally();
            let short_circuited = tally.short_circuited + fast.short_circuited;
            let ignored = tally.ignored + fast.ignored;
            let cancelled = tally.cancelled + fast.cancelled;
            Snapshot {
                name: self.breaker.name().to_string(),
                state: reported.state,
                in_state_for: now.saturating_duration_since(reported.since),
                epoch: m.epoch(),
                trip_epoch: m.trip_epoch(),
                rehearsal_trip: m.trip_is_rehearsal(),
                window: m.window_counts(now),
                consecutive_failures: m.consecutive_failures(),
                retry_after: reported.until.map(|u| u.saturating_duration_since(now)),
                open_for: m.current_open_for(),
                open_spell: m.open_spell(now),
                open_total: m.open_total(now),
                consecutive_failed_probes: m.failed_probes(),
                probes_in_flight: m.probes_in_flight(),
                retrips: m.streak(),
                ramp_share: m.ramp_share(now),
                shadow: m.shadows(),
                counters: Counters {
                    shadow_rejections: tally.shadow.iter().sum::<u64>() + fast.shadow_open,
                    calls: tally.successes + tally.failures + ignored + cancelled + short_circuited,
                    successes: tally.successes,
                    failures: tally.failures,
                    ignored,
                    cancelled,
                    slow: tally.slow,
                    timeouts: tally.timeouts,
                    short_circuited,
                    probe_successes: tally.probe_successes,
                    probe_failures: tally.probe_failures,
                    probe_timeouts: tally.probe_timeouts,
                    stale: tally.stale,
                    transitions: m
                        .transition_counts()
                        .into_iter()
                        .map(|(from, to, count)| TransitionCount { from, to, count })
                        .collect(),
                },
            }
        })
    }

    /// Every transition from now on. The channel is created at the first subscription
    /// and holds the last 64 transitions for a slow receiver (older ones are reported
    /// as lagged). Lazy transitions (open → half-open, a probe timing out) are sent
    /// when the next call makes them.
    pub fn subscribe(&self) -> broadcast::Receiver<CircuitBreakerEvent> {
        self.breaker.subscribe()
    }

    /// Holds the breaker in `forced` until [`release`](Self::release) (or
    /// [`reset`](Self::reset), or another override). [`Forced::Open`]: every call
    /// is rejected; calls in flight finish but change nothing. [`Forced::Closed`]:
    /// every call goes through and is recorded, but the breaker never trips.
    pub fn force(&self, forced: Forced) {
        let now = Instant::now();
        self.breaker.locked(now, |m| match forced {
            Forced::Open => m.force_open(now),
            Forced::Closed => m.force_closed(now),
        });
    }

    /// Hands a forced or disabled breaker back to its own policy: it starts afresh,
    /// as [`reset`](Self::reset) does. A breaker no operator holds (closed, open,
    /// half-open) is left as it is.
    pub fn release(&self) {
        let now = Instant::now();
        self.breaker.locked(now, |m| {
            if matches!(
                m.state(now),
                State::ForcedOpen | State::ForcedClosed | State::Disabled
            ) {
                m.reset(now);
            }
        });
    }

    /// Takes the breaker out of the way: every call goes through, only the counters
    /// move, until [`release`](Self::release) or [`reset`](Self::reset).
    pub fn disable(&self) {
        let now = Instant::now();
        self.breaker.locked(now, |m| m.disable(now));
    }

    /// A fresh closed breaker: empty window, no backoff, no failed probes; calls in
    /// flight become stale. Counters are cumulative and are kept.
    pub fn reset(&self) {
        let now = Instant::now();
        self.breaker.locked(now, |m| m.reset(now));
    }

    /// Applies a new configuration at run time, keeping the state (an open breaker
    /// stays open until its current interval ends). The window is kept when its
    /// shape is unchanged (same policy kind and size, or window and bucket);
    /// otherwise a new empty window starts. Refused, changing nothing, if invalid.
    // By value, like every seawall layer's `reconfigure`.
    #[allow(clippy::needless_pass_by_value)]
    pub fn reconfigure(&self, config: CircuitBreakerConfig) -> Result<(), ConfigError> {
        let now = Instant::now();
        self.breaker.locked(now, |m| m.reconfigure(&config, now))
    }

    /// Switches shadow mode on or off, from the next call on (see
    /// [`CircuitBreakerConfig::shadow`]). The state is kept either way: switching
    /// it on while open lets the next call through, switching it off while open
    /// rejects the next one. A change of the configuration in force, like
    /// [`reconfigure`](Self::reconfigure): [`revert`](Self::revert) undoes it.
    pub fn set_shadow(&self, shadow: bool) {
        let now = Instant::now();
        self.breaker.locked(now, |m| m.set_shadow(shadow));
        // A service in readiness mode waiting for the open interval to end may go now.
        self.breaker.wake_ready_waiters();
    }

    /// Whether the breaker is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        let now = Instant::now();
        self.breaker.locked(now, |m| m.shadows())
    }

    /// Goes back to the configuration the breaker was built with, keeping the state.
    pub fn revert(&self) {
        let now = Instant::now();
        self.breaker.locked(now, |m| m.revert(now));
    }

    /// The configuration in force.
    pub fn config(&self) -> CircuitBreakerConfig {
        let now = Instant::now();
        self.breaker.locked(now, |m| m.config().clone())
    }

    /// Installs a [`ProbeGate`], asked before each half-open probe is admitted, or
    /// removes it with `None`. Returns the gate it replaces. Any hold the previous
    /// gate asked for is forgotten.
    pub fn set_probe_gate(&self, gate: Option<Arc<dyn ProbeGate>>) -> Option<Arc<dyn ProbeGate>> {
        let now = Instant::now();
        let previous = self.breaker.locked(now, |m| m.set_gate(gate));
        self.breaker.wake_ready_waiters();
        previous
    }

    /// Tells the breaker its gate's answer may have changed (say, the coordinator
    /// has just taken the probe lease): a hold the gate asked for is forgotten, and
    /// the next call asks the gate again (services in readiness mode waiting on
    /// the hold are woken to ask). No transition, no change of epoch.
    pub fn recheck_probe_gate(&self) {
        let now = Instant::now();
        self.breaker.locked(now, |m| m.recheck_gate());
        self.breaker.wake_ready_waiters();
    }

    /// Applies what an outside coordinator learned from a probe elsewhere, if the
    /// breaker is still in the trip that began at `trip_epoch` (see [`Verdict`]):
    /// [`Verdict::Close`] leaves open now and takes the load back through the ramp;
    /// [`Verdict::Reopen`] restarts the open interval from now, with the backoff.
    /// Operators win: a forced or disabled breaker answers
    /// [`VerdictOutcome::Overridden`] and does not change.
    pub fn apply_verdict(&self, verdict: Verdict, trip_epoch: u32) -> VerdictOutcome {
        let now = Instant::now();
        self.breaker
            .locked(now, |m| m.apply_verdict(verdict, trip_epoch, now))
    }

    /// Opens a closed breaker because enough of its peers (other instances of a
    /// fleet, as an outside coordinator counts them) tripped together: a trip like
    /// its own (cause [`PeersTripped`](crate::Cause::PeersTripped), a new
    /// [`Snapshot::trip_epoch`], the open interval from now), made without local
    /// evidence. An open or half-open breaker is already in a trip and answers
    /// [`VerdictOutcome::Stale`]; a forced or disabled one answers
    /// [`VerdictOutcome::Overridden`]. Neither changes.
    pub fn trip_with_peers(&self) -> VerdictOutcome {
        let now = Instant::now();
        self.breaker.locked(now, |m| m.trip_with_peers(now))
    }
}

/// What an operator can hold a breaker at (see [`Handle::force`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Forced {
    /// Every call is rejected ([`State::ForcedOpen`]).
    Open,
    /// Every call goes through and is recorded; the breaker never trips
    /// ([`State::ForcedClosed`]).
    Closed,
}

layer_handle_by_inherent_methods!(Handle {
    Config = CircuitBreakerConfig,
    Snapshot = Snapshot,
    Forced = Forced,
    force = |handle, forced| {
        handle.force(forced);
        Ok(())
    },
});

/// A breaker's state and counters at one instant.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Snapshot {
    /// The breaker's name.
    pub name: String,
    /// The state (lazy transitions included: see [`Handle::state`]).
    /// `Open` is a trip; `ForcedOpen` is an operator's decision.
    pub state: State,
    /// How long it has been in that state.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub in_state_for: Duration,
    /// Incremented by every transition; outcomes of calls admitted in an older epoch
    /// change nothing.
    pub epoch: u32,
    /// While open or half-open: the epoch at which the current trip began (the
    /// `epoch` of its closed → open [`CircuitBreakerEvent`]). Verdicts name the trip by it.
    pub trip_epoch: Option<u32>,
    /// The current trip was completed by an injected outcome (its
    /// [`CircuitBreakerEvent::rehearsal`]): a rehearsal's, not an incident's.
    pub rehearsal_trip: bool,
    /// The window's counts (window policies).
    pub window: Option<WindowCounts>,
    /// The failures in a row (consecutive policy).
    pub consecutive_failures: Option<u32>,
    /// While open: how long until a probe is let through. While half-open with the
    /// probe held off by the [`ProbeGate`]: how long the hold lasts.
    #[cfg_attr(
        feature = "serde",
        serde(with = "seawall_core::duration_format::option")
    )]
    pub retry_after: Option<Duration>,
    /// While open: the length of the current open interval (backoff and jitter included).
    #[cfg_attr(
        feature = "serde",
        serde(with = "seawall_core::duration_format::option")
    )]
    pub open_for: Option<Duration>,
    /// How long the breaker has been out of the closed states (tripped or forced
    /// open, probing), if it is. A long spell with failed probes is a breaker stuck
    /// open; check whether the dependency is really still sick.
    #[cfg_attr(
        feature = "serde",
        serde(with = "seawall_core::duration_format::option")
    )]
    pub open_spell: Option<Duration>,
    /// Total time spent out of the closed states, the current spell included.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub open_total: Duration,
    /// Probes failed (or timed out) in a row since the breaker last closed.
    pub consecutive_failed_probes: u32,
    /// Probes in flight (half-open).
    pub probes_in_flight: u32,
    /// Opens since the breaker last recovered fully (drives the backoff).
    pub retrips: u32,
    /// While ramping up after closing: the share of calls admitted.
    pub ramp_share: Option<f64>,
    /// Whether the breaker is in shadow mode: it decides as if enforcing but lets
    /// through what it would reject (but for forced open), counting it in
    /// [`Counters::shadow_rejections`].
    pub shadow: bool,
    /// Cumulative counters.
    pub counters: Counters,
}

/// Cumulative counters of one breaker (never reset, not even by [`Handle::reset`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Counters {
    /// Calls that ended: `successes + failures + ignored + cancelled + short_circuited`
    /// (a call in flight is counted when it ends).
    pub calls: u64,
    /// Calls classified as successes (probes and stale outcomes included).
    pub successes: u64,
    /// Calls classified as failures (deadline expiries, probes and stale outcomes included).
    pub failures: u64,
    /// Calls let through in shadow mode that the breaker would have turned away
    /// (open, every probe slot taken, or not in the ramp's share), counted when
    /// admitted. Each is also counted by how it ended (`successes`, `failures`, …),
    /// never in `short_circuited`.
    pub shadow_rejections: u64,
    /// Calls classified as neither (e.g. an inner bulkhead's rejection).
    pub ignored: u64,
    /// Admitted calls dropped before they finished.
    pub cancelled: u64,
    /// Successes and failures that took at least the slow-call threshold.
    pub slow: u64,
    /// Failures that were the request's deadline running out.
    pub timeouts: u64,
    /// Calls rejected without reaching the dependency (open, forced open, probes
    /// all taken, ramp).
    pub short_circuited: u64,
    /// Probes that succeeded.
    pub probe_successes: u64,
    /// Probes that failed or timed out.
    pub probe_failures: u64,
    /// Probes that ran out of time, the request's deadline or the half-open timeout
    /// (also counted in `probe_failures`).
    pub probe_timeouts: u64,
    /// Outcomes of calls admitted before a state change: counted above, acted on never.
    pub stale: u64,
    /// Transitions made, by (from, to).
    pub transitions: Vec<TransitionCount>,
}

impl Counters {
    /// How many times the breaker went from `from` to `to`.
    pub fn transitions_between(&self, from: State, to: State) -> u64 {
        self.transitions
            .iter()
            .filter(|t| t.from == from && t.to == to)
            .map(|t| t.count)
            .sum()
    }
}

/// How many times one transition was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TransitionCount {
    /// The state left.
    pub from: State,
    /// The state entered.
    pub to: State,
    /// How many times.
    pub count: u64,
}
