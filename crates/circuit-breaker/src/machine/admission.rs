//! Letting calls through: the closed and ramping admissions, the open rejection,
//! the half-open probes and their slots, and the probe gate asked before one.

use std::sync::Arc;
use std::time::Duration;

use seawall_core::{later, OpenCause, MAX_DURATION};
use tokio::time::Instant;

use super::{CircuitBreakerMachine, MachineEvent, Phase};
use crate::hooks::{Gate, ProbeDecision, ProbeGate, ProbeRequest};

/// The admission of one call: the epoch it was admitted in, and its probe slot if
/// it is a probe. Hand it back exactly once: to
/// [`complete`](CircuitBreakerMachine::complete) when the call ends,
/// [`cancel`](CircuitBreakerMachine::cancel) if it is dropped first, or
/// [`give_back`](CircuitBreakerMachine::give_back) if it never went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub(crate) epoch: u32,
    pub(crate) probe: Option<u32>,
    /// Let through in shadow mode although the breaker would have turned it away:
    /// its outcome is counted, never recorded in the window, never a probe.
    pub(crate) shadow: bool,
}

impl Ticket {
    pub(crate) const fn normal(epoch: u32) -> Self {
        Self {
            epoch,
            probe: None,
            shadow: false,
        }
    }

    pub(crate) const fn shadow(epoch: u32) -> Self {
        Self {
            epoch,
            probe: None,
            shadow: true,
        }
    }

    /// The breaker's epoch when the call was admitted: an outcome from an older
    /// epoch is stale and changes nothing.
    pub const fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Whether the call is a half-open probe (its outcome decides the next state).
    pub const fn is_probe(&self) -> bool {
        self.probe.is_some()
    }

    /// Whether the call was let through in shadow mode although the breaker would
    /// have turned it away: its outcome is no evidence for the window or a probe.
    pub const fn is_shadow(&self) -> bool {
        self.shadow
    }
}

/// The answer to a call asking to go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Let through: the call goes to the dependency with this ticket.
    Admitted(Ticket),
    /// Rejected for this cause; the caller may retry after this (never zero).
    Rejected(Duration, OpenCause),
    /// Would have been rejected for this cause; let through in shadow mode with a
    /// shadow ticket.
    Shadow(Ticket, OpenCause),
}

/// The smallest retry-after ever given (a rejection always tells the caller to wait).
pub(crate) const MIN_RETRY_AFTER: Duration = seawall_core::CircuitOpen::MIN_RETRY_AFTER;

pub(crate) fn positive(d: Duration) -> Duration {
    if d.is_zero() {
        MIN_RETRY_AFTER
    } else {
        d
    }
}

/// One probe slot of a half-open period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum ProbeSlot {
    #[default]
    Free,
    /// A probe in flight since `started`. `streaming`: its response has arrived and
    /// looked healthy, and its body is still being read.
    Running { started: Instant, streaming: bool },
    /// A streaming probe judged a success at its half-open timeout. The slot stays
    /// taken (but not in flight) until the body ends, so that the late end is known
    /// for what it is and not mistaken for another probe's.
    Judged,
}

impl CircuitBreakerMachine {
    /// Whether a call asking at `now` would be turned away ([`CircuitBreakerMachine::acquire`]
    /// would reject it), taking nothing: no probe slot, no ramp credit.
    pub fn would_reject(&mut self, now: Instant) -> bool {
        self.advance(now);
        if self.config.shadow {
            // Only an operator's forced open rejects in shadow mode.
            return matches!(self.phase, Phase::ForcedOpen);
        }
        match self.phase {
            Phase::Open { .. } | Phase::ForcedOpen => true,
            Phase::HalfOpen {
                in_flight, held, ..
            } => {
                if in_flight >= self.config.half_open_max || held.is_some_and(|until| now < until) {
                    return true;
                }
                match self.ask_gate(now, in_flight) {
                    Some(ProbeDecision::HoldOff(wait)) => {
                        // Remembered as `acquire` would, so the call that follows
                        // gets the same answer without asking again.
                        if let Phase::HalfOpen { held, .. } = &mut self.phase {
                            *held = (in_flight == 0)
                                .then(|| later(now, positive(wait.min(MAX_DURATION))));
                        }
                        true
                    }
                    Some(ProbeDecision::Allow) | None => false,
                }
            }
            Phase::Closed { ramp: Some(credit) } => {
                credit + self.ramp_share(now).unwrap_or(1.0) < 1.0
            }
            Phase::Closed { ramp: None } | Phase::ForcedClosed | Phase::Disabled => false,
        }
    }

    /// Asks to let one call through at `now`. In shadow mode a call the breaker
    /// would turn away (but for forced open) is let through with a shadow ticket,
    /// after the decision has changed the machine exactly as a rejection would
    /// (the ramp's credit, the probe gate's hold).
    pub fn acquire(&mut self, now: Instant) -> Admission {
        match self.decide(now) {
            Admission::Rejected(_, cause)
                if self.config.shadow && cause != OpenCause::ForcedOpen =>
            {
                Admission::Shadow(Ticket::shadow(self.epoch), cause)
            }
            decided => decided,
        }
    }

    pub(super) fn decide(&mut self, now: Instant) -> Admission {
        self.advance(now);
        let epoch = self.epoch;
        let share = self.ramp_share(now);
        let gate = match self.phase {
            Phase::HalfOpen {
                in_flight, held, ..
            } if in_flight < self.config.half_open_max && held.is_none_or(|until| now >= until) => {
                self.ask_gate(now, in_flight)
            }
            _ => None,
        };
        let (rejected, cause) = match &mut self.phase {
            Phase::Closed { ramp: None } | Phase::ForcedClosed | Phase::Disabled => {
                return Admission::Admitted(Ticket::normal(epoch));
            }
            Phase::Closed { ramp: Some(credit) } => {
                *credit += share.unwrap_or(1.0);
                if *credit >= 1.0 {
                    *credit -= 1.0;
                    return Admission::Admitted(Ticket::normal(epoch));
                }
                let ramp = self.config.ramp.map_or(Duration::ZERO, |r| r.duration);
                let end = later(self.since, ramp);
                (end.saturating_duration_since(now), OpenCause::Ramping)
            }
            Phase::Open { until } => (until.saturating_duration_since(now), OpenCause::Open),
            Phase::ForcedOpen => (self.config.open_for, OpenCause::ForcedOpen),
            // Held off by the probe gate: as open until the hold ends.
            Phase::HalfOpen {
                held: Some(until), ..
            } if now < *until => (until.saturating_duration_since(now), OpenCause::Open),
            Phase::HalfOpen {
                in_flight, held, ..
            } => {
                let max = self.config.half_open_max;
                if let Some(ProbeDecision::HoldOff(wait)) = gate {
                    let wait = positive(wait.min(MAX_DURATION));
                    // Remembered only while nothing is in flight, so probes in
                    // flight still finish (and time out) through the lock.
                    *held = (*in_flight == 0).then(|| later(now, wait));
                    return Admission::Rejected(wait, OpenCause::Open);
                }
                *held = None;
                if *in_flight < max {
                    let probes = &mut self.cold.get_or_insert_with(Default::default).probes;
                    if probes.len() < max as usize {
                        probes.resize(max as usize, ProbeSlot::Free);
                    }
                    // A free slot exists unless judged streams still hold some.
                    let slot = match probes.iter().position(|p| *p == ProbeSlot::Free) {
                        Some(slot) => slot,
                        None => {
                            probes.push(ProbeSlot::Free);
                            probes.len() - 1
                        }
                    };
                    probes[slot] = ProbeSlot::Running {
                        started: now,
                        streaming: false,
                    };
                    *in_flight += 1;
                    return Admission::Admitted(Ticket {
                        epoch,
                        probe: Some(slot as u32),
                        shadow: false,
                    });
                }
                // Turned away while the probes are in flight: wait at most until the
                // oldest probe must have finished (or counts as failed).
                let after = self
                    .probe_deadline()
                    .map_or(MIN_RETRY_AFTER, |due| due.saturating_duration_since(now));
                (after, OpenCause::ProbeSlotsFull)
            }
        };
        Admission::Rejected(positive(rejected), cause)
    }

    /// What the gate says about a probe now, if a gate is installed.
    pub(super) fn ask_gate(&self, now: Instant, in_flight: u32) -> Option<ProbeDecision> {
        let cold = self.cold.as_ref()?;
        let gate = cold.gate.as_ref()?;
        Some(gate.0.check(&ProbeRequest {
            now,
            epoch: self.epoch,
            trip_epoch: cold.trip_epoch,
            probes_in_flight: in_flight,
        }))
    }

    /// Installs (or, with `None`, removes) the probe gate; returns the one it replaces.
    pub fn set_gate(&mut self, gate: Option<Arc<dyn ProbeGate>>) -> Option<Arc<dyn ProbeGate>> {
        let previous = match gate {
            Some(gate) => self.cold().gate.replace(Gate(gate)),
            None => self.cold.as_mut().and_then(|c| c.gate.take()),
        };
        self.recheck_gate();
        previous.map(|g| g.0)
    }

    /// Forgets a hold the gate asked for, so the next call asks it again.
    pub fn recheck_gate(&mut self) {
        if let Phase::HalfOpen { held, .. } = &mut self.phase {
            *held = None;
        }
    }

    /// When the oldest probe in flight is judged: it counts as failed, or, if it is
    /// streaming, as a success.
    pub fn probe_deadline(&self) -> Option<Instant> {
        self.oldest_probe()
            .map(|(_, started, _)| later(started, self.half_open_timeout()))
    }

    pub(super) fn half_open_timeout(&self) -> Duration {
        self.config.half_open_timeout
    }

    /// The probes in flight: slot, start, streaming.
    pub(super) fn running_probes(&self) -> Vec<(usize, Instant, bool)> {
        self.cold.as_ref().map_or_else(Vec::new, |c| {
            c.probes
                .iter()
                .enumerate()
                .filter_map(|(slot, p)| match *p {
                    ProbeSlot::Running { started, streaming } => Some((slot, started, streaming)),
                    ProbeSlot::Free | ProbeSlot::Judged => None,
                })
                .collect()
        })
    }

    /// The probe in flight that started first: slot, start, streaming.
    pub(super) fn oldest_probe(&self) -> Option<(usize, Instant, bool)> {
        let mut oldest: Option<(usize, Instant, bool)> = None;
        for (slot, p) in self.cold.as_ref()?.probes.iter().enumerate() {
            if let ProbeSlot::Running { started, streaming } = *p {
                if oldest.is_none_or(|(_, s, _)| started < s) {
                    oldest = Some((slot, started, streaming));
                }
            }
        }
        oldest
    }

    pub(super) fn is_judged(&self, slot: u32) -> bool {
        self.cold
            .as_ref()
            .and_then(|c| c.probes.get(slot as usize))
            .is_some_and(|p| *p == ProbeSlot::Judged)
    }

    /// A streaming probe reached its half-open timeout with nothing wrong shown: a
    /// success, given at `due`. Its slot stays taken until the body ends.
    pub(super) fn judge_stream(&mut self, slot: usize, due: Instant) {
        let cold = self.cold();
        cold.probes[slot] = ProbeSlot::Judged;
        cold.events.push(MachineEvent::StreamJudged);
        if let Phase::HalfOpen { in_flight, .. } = &mut self.phase {
            *in_flight -= 1;
        }
        self.probe_succeeded(due);
    }

    pub(super) fn free_probe(&mut self, slot: u32) {
        if let (Phase::HalfOpen { in_flight, .. }, Some(cold)) = (&mut self.phase, &mut self.cold) {
            if let Some(p) = cold.probes.get_mut(slot as usize) {
                if let ProbeSlot::Running { .. } = std::mem::take(p) {
                    *in_flight -= 1;
                }
            }
        }
    }
}
