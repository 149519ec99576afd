//! The breaker's policy as a plain state machine: no clock reads, no locks, no async.
//!
//! Every method that needs time takes `now`. Lazy transitions (open → half-open when
//! the interval has passed, a stuck probe timing out, the end of the ramp) are
//! applied by [`CircuitBreakerMachine::advance`], which every call-path method runs first;
//! [`CircuitBreakerMachine::state`] reports them without applying them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use seawall_core::{later, ConfigError, OpenCause, WindowCounts};
use tokio::time::Instant;

use crate::config::CircuitBreakerConfig;
use crate::hooks::{Gate, Verdict, VerdictOutcome};

/// The state as reported at some instant (lazy transitions included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reported {
    pub(crate) state: State,
    /// When that state began.
    pub(crate) since: Instant,
    /// If open: when it admits a probe.
    pub(crate) until: Option<Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// `ramp`: the admission credit while ramping up (the ramp started at `since`).
    Closed {
        ramp: Option<f64>,
    },
    Open {
        until: Instant,
    },
    /// `held`: the probe gate held probes off until then (only while none is in flight).
    HalfOpen {
        in_flight: u32,
        successes: u32,
        held: Option<Instant>,
    },
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

/// What only matters once the breaker has left the plain closed state (tripped,
/// probed, forced, reconfigured): allocated then, kept afterwards. A breaker that
/// never trips never pays for it.
#[derive(Debug, Default)]
struct Cold {
    /// The configuration before the first `reconfigure`, for `revert`.
    original: Option<Arc<CircuitBreakerConfig>>,
    /// The probes of the half-open period, one slot per allowed probe (plus the
    /// judged streams still open).
    probes: Vec<ProbeSlot>,
    /// Opens since the breaker last recovered fully (drives the backoff).
    streak: u32,
    /// Probes that failed (or timed out) in a row since the last close.
    failed_probes: u32,
    /// When the breaker last stopped admitting normally (tripped or forced), until it closes again.
    spell_since: Option<Instant>,
    /// Time spent in finished open spells.
    open_total: Duration,
    /// What happened and was not yet taken by the driver.
    events: Vec<MachineEvent>,
    /// Jitter samples in `[0, 1)` for the next open intervals, fed by the driver
    /// ahead of need (so `state(now)` can report exactly what the next call will see).
    samples: VecDeque<f64>,
    /// The epoch at which the last trip began (the current one while open or half-open).
    trip_epoch: u32,
    /// The last trip was completed by an injected outcome (a rehearsal's).
    trip_rehearsal: bool,
    /// Asked before a probe is admitted, when installed.
    gate: Option<Gate>,
}

/// The breaker's policy as a pure state machine: it reads no clock, takes no lock,
/// sends nothing and counts nothing (the crate docs draw its states).
///
/// Every step takes `now`; what the step did comes back as its return value (an
/// [`Admission`], a [`Recorded`], a [`VerdictOutcome`]) and as
/// [`MachineEvent`]s, taken with [`take_events`](Self::take_events) (they
/// accumulate until taken). Lazy
/// transitions (open → half-open once the interval has passed, a probe outliving
/// its half-open timeout, the end of the ramp) are made by
/// [`advance`](Self::advance), which every step runs first;
/// [`state`](Self::state) reports them as made without making them. Jitter
/// samples are fed in, not drawn: [`samples_wanted`](Self::samples_wanted) says
/// how many to [`feed_sample`](Self::feed_sample), and without any the open
/// interval is not jittered.
///
/// [`CircuitBreakerLayer`](crate::CircuitBreakerLayer) drives one behind a mutex,
/// with an atomic word in front for the closed path, and keeps the counters,
/// the subscribers and the random source itself. Drive one yourself to see what a
/// configuration makes of a sequence of outcomes, at any speed:
///
/// ```
/// use std::time::Duration;
/// use seawall_circuit_breaker::{
///     Admission, Cause, CircuitBreakerConfig, CircuitBreakerMachine, MachineEvent,
///     Report, State, TripPolicy,
/// };
/// use seawall_core::Outcome;
/// use tokio::time::Instant;
///
/// let config = CircuitBreakerConfig {
///     policy: TripPolicy::ConsecutiveFailures { threshold: 3 },
///     open_for: Duration::from_secs(10),
///     ..CircuitBreakerConfig::default()
/// };
/// let t0 = Instant::now();
/// let mut breaker = CircuitBreakerMachine::new(&config, t0)?;
///
/// // Three failures in a row trip it, at the third.
/// for _ in 0..3 {
///     let Admission::Admitted(ticket) = breaker.acquire(t0) else { unreachable!() };
///     breaker.complete(ticket, Report::of(Outcome::Failure), t0);
/// }
/// assert_eq!(breaker.state(t0), State::Open);
/// let events: Vec<_> = breaker.take_events().collect();
/// assert!(matches!(
///     events[..],
///     [MachineEvent::Transition(t)] if t.cause == Cause::ConsecutiveFailures
/// ));
///
/// // Open: turned away, told to come back when the interval ends.
/// let t4 = t0 + Duration::from_secs(4);
/// assert!(matches!(
///     breaker.acquire(t4),
///     Admission::Rejected(retry_after, _) if retry_after == Duration::from_secs(6)
/// ));
///
/// // Then the next call is the probe, and its success closes the breaker.
/// let t10 = t0 + Duration::from_secs(10);
/// assert_eq!(breaker.state(t10), State::HalfOpen);
/// let Admission::Admitted(probe) = breaker.acquire(t10) else { unreachable!() };
/// assert!(probe.is_probe());
/// breaker.complete(probe, Report::of(Outcome::Success), t10);
/// assert_eq!(breaker.state(t10), State::Closed);
/// # Ok::<(), seawall_core::ConfigError>(())
/// ```
///
/// # Transitions
///
/// The numbers are those of the diagram in the crate docs.
///
/// 1. **Closed → Open (trip).** Guard, evaluated when a failure (or, with slow-call
///    detection, a slow call) of the current epoch is recorded — a success alone
///    never trips: consecutive failures `>=` threshold; or, for a count or time
///    window, `calls >= min_calls` and (`failure rate >= failure_rate` or
///    `slow rate >= slow_call.rate`). The open interval starts at the trip
///    (`opened_at = now`), not at the last call. The window is kept until closing.
/// 2. **Open → Half-open (interval elapsed).** Guard: `now >= opened_at + open_for`.
///    Lazy: no timer; [`Handle::state`](crate::Handle::state) reports it as soon as it is due, and the
///    next call makes it (dated when it became due) and becomes the first probe.
///    While open, every call is rejected with `retry_after = opened_at + open_for - now`.
/// 3. **Half-open → Closed (probes succeeded).** Guard: `probes_to_close` probes of
///    this half-open period succeeded. In the same step the window is emptied and
///    the failed-probe count cleared, so the next N failures trip from zero; the
///    backoff is forgotten (after the ramp, if there is one).
/// 4. **Half-open → Open (probe failed).** Guard: a probe of this period
///    classified as a failure (a deadline expiry included). The timer restarts at
///    `now`, with the interval grown by the backoff.
/// 5. **Half-open → Open (probe timed out).** Guard: a probe neither finished nor
///    dropped within `half_open_timeout` of its start counts as failed; the open
///    interval counts from that instant. Lazy, like (2). Except a probe held until
///    its body ends (see `UntilBodyEnd`, feature `http`) whose
///    response looked healthy and whose body is still streaming: it is judged a
///    success at that instant, towards (3).
/// 6. – 9. **Operators.** Forced open rejects everything, with no retry-after
///    (only an operator ends it, so no instant can be promised), and nothing but
///    an operator moves it; forced closed admits everything and
///    records the window but never trips; disabled admits everything and only
///    counts; reset empties the window, forgets the backoff and the failed probes.
///
/// Inside half-open (no transition):
/// - at most `half_open_max` probes are in flight; **a caller arriving while they
///   are all taken is rejected** with [`CircuitOpen`](crate::CircuitOpen) and a positive retry-after
///   (what remains of the oldest probe's half-open timeout), never made to wait;
/// - a probe classified [`Outcome::Ignore`](seawall_core::Outcome) (say, an inner
///   bulkhead's rejection) frees its slot, no transition;
/// - a probe dropped before finishing (**cancelled**) frees its slot, is not recorded.
///
/// In every state, **a call whose dependency panics** (in `call` or while its future
/// is polled) is recorded as a **failure**, as a probe's too, and frees any slot it
/// held: the mark is made while the panic unwinds through the breaker, so it counts
/// even when the panic is caught further out (`catch_unwind`, tower-http's
/// `CatchPanicLayer`, a spawned task's `JoinError`), where the future is dropped
/// only after unwinding has ended and would otherwise look cancelled.
///
/// **(G) The probe gate** (optional, [`ProbeGate`](crate::ProbeGate), installed with
/// [`Handle::set_probe_gate`](crate::Handle::set_probe_gate)): asked, synchronously and under the breaker's lock,
/// just before a half-open breaker would admit a probe — never on the closed path,
/// never while the open interval runs. [`ProbeDecision::Allow`](crate::ProbeDecision::Allow) admits the probe;
/// [`ProbeDecision::HoldOff`](crate::ProbeDecision::HoldOff) rejects the call as [`CircuitOpen`](crate::CircuitOpen) with the gate's
/// retry-after and nothing reaches the dependency (not even `poll_ready`). While no
/// probe is in flight the hold is remembered: calls are rejected without the lock
/// until it ends, or until [`Handle::recheck_probe_gate`](crate::Handle::recheck_probe_gate). Holding is no
/// transition: the breaker stays half-open, its epoch unchanged. A fleet
/// coordinator uses it so that only the holder of a fleet-wide lease probes.
///
/// **(V1), (V2) Verdicts** ([`Handle::apply_verdict`](crate::Handle::apply_verdict)): what an outside
/// coordinator learned from a probe elsewhere. Each names the trip it is about by
/// the breaker's own epoch ([`Snapshot::trip_epoch`](crate::Snapshot::trip_epoch), the epoch of the closed →
/// open transition), and is applied only while the breaker is still open or
/// half-open in that trip: a verdict about an older trip is [`VerdictOutcome::Stale`](crate::VerdictOutcome::Stale)
/// and changes nothing, so the coordinator decides what "newer" means in its own
/// terms (a fleet epoch) and the breaker needs no clock from another host.
/// [`Verdict::Close`](crate::Verdict::Close) leaves open at once and takes the load back through the
/// ramp (cause [`Cause::VerdictClosed`](crate::Cause::VerdictClosed)); [`Verdict::Reopen`](crate::Verdict::Reopen) restarts the open
/// interval from now, grown by the backoff (cause [`Cause::VerdictReopened`](crate::Cause::VerdictReopened)),
/// making probes in flight stale. Forced and disabled breakers ignore verdicts
/// ([`VerdictOutcome::Overridden`](crate::VerdictOutcome::Overridden)).
///
/// Inside closed, **(R) the ramp** (optional): for `ramp.duration` after closing,
/// only a share of calls growing linearly from `ramp.start_share` to 100 % is
/// admitted (the first call always is); the rest are rejected with a retry-after
/// of what remains of the ramp. A trip during the ramp counts as a re-trip for the
/// backoff.
///
/// **Open interval.** `open_for`, multiplied by `backoff_multiplier` for each
/// re-trip (a failed or timed-out probe, a trip during the ramp) up to
/// `max_open_for`, then stretched by a random fraction in `[0, jitter)` of itself,
/// drawn from an injectable [`RandomSource`](seawall_core::RandomSource) (see
/// [`CircuitBreakerBuilder::random_source`](crate::CircuitBreakerBuilder::random_source)), so a fleet whose breakers opened
/// together does not probe in lockstep. With jitter the interval is never shorter
/// than configured. The jitter is on by default ([`DEFAULT_JITTER`](crate::DEFAULT_JITTER), 20 %): set it
/// with `jitter(..)` (`jitter(0.0)` for exact intervals); a breaker that sets none
/// and is coordinated by a fleet takes the fleet's.
// `repr(C)`: what dropping it reads (the pointers) first, together; see `Breaker`.
#[repr(C)]
#[derive(Debug)]
pub struct CircuitBreakerMachine {
    /// Shared, not copied: the breakers of a keyed layer all start from one.
    config: Arc<CircuitBreakerConfig>,
    cold: Option<Box<Cold>>,
    window: Window,
    phase: Phase,
    since: Instant,
    epoch: u32,
}

impl CircuitBreakerMachine {
    /// A closed breaker with an empty window from `now`, once `config` is valid.
    pub fn new(config: &CircuitBreakerConfig, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        Self::validated(Arc::new(config.clone()), now)
    }

    /// As [`new`](Self::new), over a configuration already validated (a keyed
    /// layer validates its configuration once, not once per key).
    pub(crate) fn validated(
        config: Arc<CircuitBreakerConfig>,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        let window = Window::new(&config.policy, now)?;
        Ok(Self {
            config,
            phase: Phase::Closed { ramp: None },
            since: now,
            epoch: 0,
            window,
            cold: None,
        })
    }

    fn cold(&mut self) -> &mut Cold {
        self.cold.get_or_insert_with(Default::default)
    }

    fn streak_of(&self) -> u32 {
        self.cold.as_ref().map_or(0, |c| c.streak)
    }

    fn next_u(&self) -> f64 {
        self.cold
            .as_ref()
            .and_then(|c| c.samples.front().copied())
            .unwrap_or(0.0)
    }

    /// How many jitter samples to feed with [`CircuitBreakerMachine::feed_sample`] so that the
    /// next opens (at most two in one step: a probe timing out, then a failure or
    /// a verdict) each have their own. Without samples the interval is not jittered.
    pub fn samples_wanted(&self) -> usize {
        const AHEAD: usize = 2;
        AHEAD.saturating_sub(self.cold.as_ref().map_or(0, |c| c.samples.len()))
    }

    /// Feeds one jitter sample, a number in `[0, 1)` (anything else counts as 0).
    pub fn feed_sample(&mut self, u: f64) {
        let u = if (0.0..1.0).contains(&u) { u } else { 0.0 };
        self.cold().samples.push_back(u);
    }

    // ----- reporting -------------------------------------------------------------

    /// The state at `now`, with the lazy transitions that are due reported as made.
    pub fn state(&self, now: Instant) -> State {
        self.reported(now).state
    }

    /// The state at `now` as [`CircuitBreakerMachine::state`] reports it, with when it began and,
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
            Phase::Open { until } => open(self.since, until),
            Phase::HalfOpen {
                held: Some(until), ..
            } if now < until => Reported {
                state: State::HalfOpen,
                since: self.since,
                until: Some(until),
            },
            Phase::HalfOpen { successes, .. } => {
                // What `advance` will make of the probes due by `now`, oldest first:
                // a streaming one is judged a success, any other one times out.
                let mut running = self.running_probes();
                running.sort_unstable_by_key(|&(_, started, _)| started);
                let mut successes = successes;
                for (_, started, streaming) in running {
                    let due = later(started, self.half_open_timeout());
                    if now < due {
                        break;
                    }
                    if !streaming {
                        let next =
                            self.open_interval(self.streak_of().saturating_add(1), self.next_u());
                        return open(due, later(due, next));
                    }
                    successes += 1;
                    if successes >= self.config.probes_to_close {
                        return Reported {
                            state: State::Closed,
                            since: due,
                            until: None,
                        };
                    }
                }
                Reported {
                    state: State::HalfOpen,
                    since: self.since,
                    until: None,
                }
            }
            phase => Reported {
                state: phase.state(),
                since: self.since,
                until: None,
            },
        }
    }

    /// The epoch: bumped by every transition (and by a reset or a new window), so
    /// a [`Ticket`] from an older one is known for stale.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The configuration in force.
    pub fn config(&self) -> &CircuitBreakerConfig {
        &self.config
    }

    /// When the current state began.
    #[cfg(test)]
    pub(crate) fn since(&self) -> Instant {
        self.since
    }

    /// The counts of a count or time window at `now` (`None` for consecutive failures).
    pub fn window_counts(&mut self, now: Instant) -> Option<WindowCounts> {
        self.window.counts(now)
    }

    /// The failures in a row so far, under a consecutive-failures policy.
    pub fn consecutive_failures(&self) -> Option<u32> {
        match self.window {
            Window::Consecutive(n) => Some(n),
            _ => None,
        }
    }

    /// The probes admitted in this half-open period and not yet ended (0 when not half-open).
    pub fn probes_in_flight(&self) -> u32 {
        match self.phase {
            Phase::HalfOpen { in_flight, .. } => in_flight,
            _ => 0,
        }
    }

    /// Probes that failed (or timed out) in a row since the breaker last closed.
    pub fn failed_probes(&self) -> u32 {
        self.cold.as_ref().map_or(0, |c| c.failed_probes)
    }

    /// Re-trips since the breaker last recovered fully: the backoff's exponent.
    pub fn streak(&self) -> u32 {
        self.streak_of()
    }

    /// The interval of the current open state.
    pub fn current_open_for(&self) -> Option<Duration> {
        match self.phase {
            Phase::Open { until } => Some(until.saturating_duration_since(self.since)),
            _ => None,
        }
    }

    /// How long the breaker has been out of the closed states (tripped or forced), if it is.
    pub fn open_spell(&self, now: Instant) -> Option<Duration> {
        self.cold
            .as_ref()
            .and_then(|c| c.spell_since)
            .map(|s| now.saturating_duration_since(s))
    }

    /// Total time spent out of the closed states, the current spell included.
    pub fn open_total(&self, now: Instant) -> Duration {
        self.cold.as_ref().map_or(Duration::ZERO, |c| c.open_total)
            + self.open_spell(now).unwrap_or_default()
    }

    /// The share of calls to admit while ramping up after closing, if ramping at `now`.
    pub fn ramp_share(&self, now: Instant) -> Option<f64> {
        match self.phase {
            Phase::Closed { ramp: Some(_) } => {
                let ramp = self.config.ramp?;
                let elapsed = nanos_between(self.since, now);
                let duration = nanos(ramp.duration);
                if elapsed >= duration {
                    None
                } else {
                    let progress = elapsed as f64 / duration as f64;
                    let start = ramp.start_share;
                    Some((start + (1.0 - start) * progress).clamp(0.0, 1.0))
                }
            }
            _ => None,
        }
    }

    /// Whether every call is admitted, whatever the instant, until the machine is
    /// next driven (closed without a ramp, forced closed, disabled): a driver may
    /// admit calls without asking.
    pub fn admits_all(&self) -> bool {
        matches!(
            self.phase,
            Phase::Closed { ramp: None } | Phase::ForcedClosed | Phase::Disabled
        )
    }

    /// Whether the breaker is closed by itself: not open, half-open or ramping,
    /// not forced closed or disabled. A keyed layer may forget such a breaker (only
    /// its window is lost); it publishes this in its word so that asking costs one
    /// load.
    pub(crate) fn plainly_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed { ramp: None })
    }

    /// Whether every call is rejected, whatever the instant, until an operator
    /// acts (forced open).
    pub fn rejects_all(&self) -> bool {
        matches!(self.phase, Phase::ForcedOpen)
    }

    /// Whether successes may be tallied without the lock and folded in later with
    /// [`CircuitBreakerMachine::record_successes`]: true where the order and instant of successes
    /// do not matter (consecutive and count policies, and when disabled).
    pub fn batches_successes(&self) -> bool {
        match self.phase {
            Phase::Disabled => true,
            Phase::Closed { ramp: None } | Phase::ForcedClosed => self.window.successes_commute(),
            _ => false,
        }
    }

    /// When an open breaker (or a half-open one whose probe the gate held off, with
    /// none in flight) will next consider a probe: until then every call is
    /// rejected, and a driver may reject without asking.
    pub fn reopen_at(&self) -> Option<Instant> {
        match self.phase {
            Phase::Open { until } => Some(until),
            Phase::HalfOpen {
                in_flight: 0,
                held: Some(until),
                ..
            } => Some(until),
            _ => None,
        }
    }

    /// The configured open interval: how often a service in readiness mode asks
    /// again while forced open (a forced-open rejection carries no retry-after).
    pub(crate) fn base_open_for(&self) -> Duration {
        self.config.open_for
    }

    /// The slow-call threshold, if slow calls are detected.
    pub(crate) fn slow_threshold(&self) -> Option<Duration> {
        self.config.slow_call.map(|slow| slow.threshold)
    }

    /// What happened since the events were last taken, oldest first.
    pub fn take_events(&mut self) -> impl Iterator<Item = MachineEvent> + '_ {
        self.cold
            .as_mut()
            .map(|c| c.events.drain(..))
            .into_iter()
            .flatten()
    }

    // ----- the call path ---------------------------------------------------------

    /// Applies the lazy transitions due at `now`.
    pub fn advance(&mut self, now: Instant) {
        // Each step moves time-driven state forward; at most: a probe times out,
        // its reopen interval passes, and the breaker is half-open again. Judging a
        // streaming probe is no step: each one ends a probe in flight.
        let mut steps = 0;
        while steps < 4 {
            steps += 1;
            match self.phase {
                Phase::Open { until } if now >= until => {
                    self.transition(
                        Phase::HalfOpen {
                            in_flight: 0,
                            successes: 0,
                            held: None,
                        },
                        until,
                        Cause::OpenIntervalElapsed,
                    );
                }
                Phase::HalfOpen { .. } => match self.oldest_probe() {
                    Some((slot, started, streaming))
                        if now >= later(started, self.half_open_timeout()) =>
                    {
                        let due = later(started, self.half_open_timeout());
                        if streaming {
                            steps -= 1;
                            self.judge_stream(slot, due);
                            continue;
                        }
                        let cold = self.cold();
                        cold.failed_probes = cold.failed_probes.saturating_add(1);
                        cold.streak = cold.streak.saturating_add(1);
                        self.open_at(due, Cause::ProbeTimedOut);
                    }
                    _ => return,
                },
                Phase::Closed { ramp: Some(_) } => {
                    if self.ramp_share(now).is_none() {
                        self.phase = Phase::Closed { ramp: None };
                        self.cold().streak = 0;
                    }
                    return;
                }
                _ => return,
            }
        }
    }

    /// Whether shadow mode is on.
    pub fn shadows(&self) -> bool {
        self.config.shadow
    }

    /// Switches shadow mode, as a change of the configuration in force (so
    /// [`CircuitBreakerMachine::revert`] returns to the built one).
    pub fn set_shadow(&mut self, shadow: bool) {
        if self.config.shadow != shadow {
            let current = Arc::clone(&self.config);
            self.cold().original.get_or_insert(current);
            Arc::make_mut(&mut self.config).shadow = shadow;
        }
    }

    // ----- operator controls -----------------------------------------------------

    /// Holds the breaker open until an operator resets it.
    pub fn force_open(&mut self, now: Instant) {
        self.force(Phase::ForcedOpen, Cause::ForcedOpen, now);
    }

    /// Holds the breaker closed (outcomes still recorded, no trips) until reset.
    pub fn force_closed(&mut self, now: Instant) {
        self.force(Phase::ForcedClosed, Cause::ForcedClosed, now);
    }

    /// Lets every call through and only counts, until reset.
    pub fn disable(&mut self, now: Instant) {
        self.force(Phase::Disabled, Cause::Disabled, now);
    }

    /// A fresh closed breaker: empty window, no backoff, no failed probes. Calls in
    /// flight become stale. Counters are cumulative and are kept.
    pub fn reset(&mut self, now: Instant) {
        self.window.reset();
        if let Some(c) = self.cold.as_mut() {
            c.streak = 0;
            c.failed_probes = 0;
        }
        if let Phase::Closed { .. } = self.phase {
            self.phase = Phase::Closed { ramp: None };
            self.epoch = self.epoch.wrapping_add(1);
        } else {
            self.transition(Phase::Closed { ramp: None }, now, Cause::Reset);
        }
    }

    /// Applies a new configuration, keeping the state. The window is kept when its
    /// shape (policy kind, size, window and bucket) is unchanged; otherwise a new
    /// empty one starts (and the calls in flight of a closed breaker become stale).
    pub fn reconfigure(
        &mut self,
        config: &CircuitBreakerConfig,
        now: Instant,
    ) -> Result<(), ConfigError> {
        config.validate()?;
        let window = if Window::same_shape(&self.config.policy, &config.policy) {
            None
        } else {
            Some(Window::new(&config.policy, now)?)
        };
        let current = std::mem::replace(&mut self.config, Arc::new(config.clone()));
        self.cold().original.get_or_insert(current);
        self.apply(window);
        Ok(())
    }

    /// Goes back to the configuration the breaker was built with, keeping the state.
    pub fn revert(&mut self, now: Instant) {
        let Some(original) = self.cold.as_mut().and_then(|c| c.original.take()) else {
            return;
        };
        if Window::same_shape(&self.config.policy, &original.policy) {
            self.config = original;
            self.apply(None);
        } else {
            match Window::new(&original.policy, now) {
                Ok(window) => {
                    self.config = original;
                    self.apply(Some(window));
                }
                // Unreachable: the built configuration was validated.
                Err(_) => self.cold().original = Some(original),
            }
        }
    }

    /// The epoch at which the current trip began, while open or half-open after it.
    pub fn trip_epoch(&self) -> Option<u32> {
        match self.phase {
            Phase::Open { .. } | Phase::HalfOpen { .. } => {
                Some(self.cold.as_ref().map_or(0, |c| c.trip_epoch))
            }
            _ => None,
        }
    }

    /// Whether the current trip (see [`trip_epoch`](Self::trip_epoch)) was completed
    /// by an injected outcome: a rehearsal's trip, which a fleet does not count as
    /// evidence that the dependency fails.
    pub fn trip_is_rehearsal(&self) -> bool {
        self.trip_epoch().is_some() && self.cold.as_ref().is_some_and(|c| c.trip_rehearsal)
    }

    /// Applies a verdict about the trip that began at `trip_epoch` (see [`Verdict`]).
    pub fn apply_verdict(
        &mut self,
        verdict: Verdict,
        trip_epoch: u32,
        now: Instant,
    ) -> VerdictOutcome {
        self.advance(now);
        match self.phase {
            Phase::ForcedOpen | Phase::ForcedClosed | Phase::Disabled => {
                return VerdictOutcome::Overridden
            }
            Phase::Closed { .. } => return VerdictOutcome::Stale,
            Phase::Open { .. } | Phase::HalfOpen { .. } => {}
        }
        if self.trip_epoch() != Some(trip_epoch) {
            return VerdictOutcome::Stale;
        }
        match verdict {
            Verdict::Close => self.close(now, Cause::VerdictClosed),
            Verdict::Reopen => {
                let cold = self.cold();
                cold.failed_probes = cold.failed_probes.saturating_add(1);
                cold.streak = cold.streak.saturating_add(1);
                self.open_at(now, Cause::VerdictReopened);
            }
        }
        VerdictOutcome::Applied
    }

    /// Trips a closed breaker because its peers tripped (see
    /// [`Handle::trip_with_peers`](crate::Handle::trip_with_peers)).
    pub fn trip_with_peers(&mut self, now: Instant) -> VerdictOutcome {
        self.advance(now);
        match self.phase {
            Phase::ForcedOpen | Phase::ForcedClosed | Phase::Disabled => VerdictOutcome::Overridden,
            Phase::Open { .. } | Phase::HalfOpen { .. } => VerdictOutcome::Stale,
            Phase::Closed { .. } => {
                self.trip(now, Cause::PeersTripped);
                VerdictOutcome::Applied
            }
        }
    }

    // ----- internals -------------------------------------------------------------

    /// Puts the configuration just set in force, with `window` if its shape changed.
    fn apply(&mut self, window: Option<Window>) {
        if let Some(window) = window {
            self.window = window;
            // Outcomes of calls admitted under the old window must not land in the
            // new one. (Half-open probes keep their epoch: no window is recorded then.)
            if !matches!(self.phase, Phase::HalfOpen { .. }) {
                self.epoch = self.epoch.wrapping_add(1);
            }
        }
    }

    fn force(&mut self, phase: Phase, cause: Cause, now: Instant) {
        if self.phase.state() != phase.state() {
            self.transition(phase, now, cause);
        }
    }

    fn close(&mut self, now: Instant, cause: Cause) {
        self.window.reset();
        // The first call after closing goes through.
        let ramp = self.config.ramp.map(|r| 1.0 - r.start_share);
        let cold = self.cold();
        cold.failed_probes = 0;
        if ramp.is_none() {
            cold.streak = 0;
        }
        self.transition(Phase::Closed { ramp }, now, cause);
    }

    /// The open interval for `streak`: grown by the backoff, capped, then jittered.
    fn open_interval(&self, streak: u32, u: f64) -> Duration {
        let c = &self.config;
        let open_for = nanos(c.open_for);
        let mut interval = open_for as f64;
        let mut exact = true;
        if streak > 0 && c.backoff_multiplier > 1.0 {
            let exp = i32::try_from(streak).unwrap_or(i32::MAX);
            let cap = nanos(c.max_open_for).max(open_for) as f64;
            interval = (interval * c.backoff_multiplier.powi(exp)).min(cap);
            exact = false;
        }
        let jitter = c.effective_jitter();
        if jitter > 0.0 {
            interval *= 1.0 + jitter * u;
            exact = false;
        }
        if exact {
            c.open_for
        } else {
            // `as` saturates; the values are bounded far below anyway.
            Duration::from_nanos(interval as u64)
        }
    }

    fn open_at(&mut self, at: Instant, cause: Cause) {
        let u = self.cold().samples.pop_front().unwrap_or(0.0);
        let open_for = self.open_interval(self.streak_of(), u);
        self.transition(
            Phase::Open {
                until: later(at, open_for),
            },
            at,
            cause,
        );
    }

    fn transition(&mut self, to: Phase, at: Instant, cause: Cause) {
        let from = self.phase.state();
        let leaving_half_open = matches!(self.phase, Phase::HalfOpen { .. });
        let to_state = to.state();
        self.phase = to;
        self.since = at;
        self.epoch = self.epoch.wrapping_add(1);
        let epoch = self.epoch;
        let max = self.config.half_open_max as usize;
        let cold = self.cold();
        if leaving_half_open {
            cold.probes.iter_mut().for_each(|p| *p = ProbeSlot::Free);
            cold.probes.truncate(max);
        }
        match to_state {
            State::Closed | State::ForcedClosed | State::Disabled => {
                if let Some(start) = cold.spell_since.take() {
                    cold.open_total += at.saturating_duration_since(start);
                }
            }
            State::Open | State::HalfOpen | State::ForcedOpen => {
                cold.spell_since.get_or_insert(at);
            }
        }
        cold.events
            .push(MachineEvent::Transition(CircuitBreakerEvent {
                from,
                to: to_state,
                cause,
                at,
                epoch,
                rehearsal: false,
            }));
    }

    /// How many events wait to be taken (a mark for [`Self::mark_rehearsal`]).
    fn pending_events(&self) -> usize {
        self.cold.as_ref().map_or(0, |c| c.events.len())
    }

    /// Marks the transitions made since `before` events were pending as completed
    /// by a rehearsal's outcome.
    fn mark_rehearsal(&mut self, before: usize) {
        if let Some(cold) = self.cold.as_mut() {
            for event in cold.events.iter_mut().skip(before) {
                if let MachineEvent::Transition(t) = event {
                    t.rehearsal = true;
                    if t.from == State::Closed && t.to == State::Open {
                        cold.trip_rehearsal = true;
                    }
                }
            }
        }
    }
}

/// Nanoseconds from `from` to `to` (0 if `to` is earlier).
pub(crate) fn nanos_between(from: Instant, to: Instant) -> u64 {
    nanos(to.saturating_duration_since(from))
}

/// A duration in nanoseconds (every configured one is at most a year, far below `u64::MAX`).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The slot of a shadow-rejection cause in the tallies and the metrics (forced open
/// is never shadowed).
pub(crate) const fn shadow_index(cause: OpenCause) -> usize {
    match cause {
        OpenCause::ProbeSlotsFull => 1,
        OpenCause::Ramping => 2,
        _ => 0,
    }
}

mod admission;
mod report;
mod transition;
mod window;

use admission::ProbeSlot;
pub(crate) use admission::{positive, MIN_RETRY_AFTER};
pub use admission::{Admission, Ticket};
pub use report::{Recorded, Report};
pub use transition::{Cause, CircuitBreakerEvent, MachineEvent, State};
use window::Window;

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod hook_tests;

#[cfg(test)]
mod stream_tests;
