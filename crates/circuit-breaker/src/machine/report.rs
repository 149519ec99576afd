//! Outcomes in: what a finished, cancelled or unsent call reports, and the trips,
//! probe verdicts and stale results that follow.

use seawall_core::Outcome;
use tokio::time::Instant;

use super::admission::{ProbeSlot, Ticket};
use super::{Cause, CircuitBreakerMachine, Phase};

/// What a finished call reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// How the classifier judged it.
    pub outcome: Outcome,
    /// It took at least the slow-call threshold.
    pub slow: bool,
    /// It ran out of its deadline (recorded as a failure).
    pub timed_out: bool,
    /// An injected fault produced it (the classifier gave it the reason
    /// [`REHEARSAL`](seawall_core::REHEARSAL)): a transition it completes is marked
    /// [`CircuitBreakerEvent::rehearsal`](super::CircuitBreakerEvent::rehearsal).
    pub rehearsal: bool,
}

impl Report {
    /// A call that ended with `outcome`, neither slow nor out of its deadline.
    pub const fn of(outcome: Outcome) -> Self {
        Self {
            outcome,
            slow: false,
            timed_out: false,
            rehearsal: false,
        }
    }

    /// The same report, of an outcome an injected fault produced.
    pub const fn rehearsed(self) -> Self {
        Self {
            rehearsal: true,
            ..self
        }
    }
}

/// What the machine made of a finished call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// An ordinary call of the current epoch.
    Current,
    /// A probe of the current half-open period.
    Probe,
    /// Admitted in an older epoch: counted, but it changed nothing.
    Stale,
    /// Let through in shadow mode: counted, but it changed nothing.
    Shadow,
}

impl CircuitBreakerMachine {
    /// Reports how an admitted call ended.
    pub fn complete(&mut self, ticket: Ticket, report: Report, now: Instant) -> Recorded {
        // What time alone changed is never a rehearsal: marked are only the
        // transitions this outcome completes, made after this point.
        self.advance(now);
        let before = self.pending_events();
        let recorded = self.complete_advanced(ticket, report, now);
        if report.rehearsal {
            self.mark_rehearsal(before);
        }
        recorded
    }

    fn complete_advanced(&mut self, ticket: Ticket, report: Report, now: Instant) -> Recorded {
        let recorded_outcome = report.outcome != Outcome::Ignore;
        if ticket.shadow {
            // The enforcing breaker would not have made this call: whatever it
            // answered is no evidence for the window or a probe.
            return Recorded::Shadow;
        }
        if ticket.epoch != self.epoch {
            return Recorded::Stale;
        }
        match (ticket.probe, self.phase) {
            (Some(slot), Phase::HalfOpen { .. }) if self.is_judged(slot) => {
                // A stream whose verdict was given at its half-open timeout: its end
                // is counted, never acted on.
                self.free_probe(slot);
                Recorded::Stale
            }
            (Some(slot), Phase::HalfOpen { .. }) => {
                self.finish_probe(slot, report.outcome, now);
                Recorded::Probe
            }
            (None, Phase::Closed { .. } | Phase::ForcedClosed) => {
                if recorded_outcome {
                    let failed = report.outcome == Outcome::Failure;
                    self.window.record(failed, report.slow, now);
                    if (failed || report.slow) && matches!(self.phase, Phase::Closed { .. }) {
                        if let Some(cause) = self.should_trip(now) {
                            self.trip(now, cause);
                        }
                    }
                }
                Recorded::Current
            }
            _ => Recorded::Current,
        }
    }

    /// Folds in `n` successes (none slow) of calls admitted in `epoch`, tallied
    /// without the lock. Equivalent to `n` calls to [`CircuitBreakerMachine::complete`] with a
    /// success, for the ordinary (non-probe) calls of a closed or disabled breaker:
    /// [`Recorded::Stale`] if they were admitted in an older epoch.
    pub fn record_successes(&mut self, epoch: u32, n: u64, now: Instant) -> Recorded {
        if epoch != self.epoch {
            return Recorded::Stale;
        }
        if let Phase::Closed { .. } | Phase::ForcedClosed = self.phase {
            self.window.record_successes(n, now);
        }
        Recorded::Current
    }

    /// Reports that a probe's response has arrived, looked healthy, and that its body
    /// is being read: at its half-open timeout it is judged by what it has shown so
    /// far (a success) instead of timing out. Ordinary calls and stale tickets are
    /// left alone.
    pub fn probe_streaming(&mut self, ticket: Ticket, now: Instant) {
        self.advance(now);
        if ticket.epoch != self.epoch || !matches!(self.phase, Phase::HalfOpen { .. }) {
            return;
        }
        let (Some(slot), Some(cold)) = (ticket.probe, self.cold.as_mut()) else {
            return;
        };
        if let Some(ProbeSlot::Running { streaming, .. }) = cold.probes.get_mut(slot as usize) {
            *streaming = true;
        }
    }

    /// Reports that an admitted call was dropped before it finished: not recorded,
    /// but a probe's slot is freed.
    pub fn cancel(&mut self, ticket: Ticket, now: Instant) {
        self.advance(now);
        if ticket.epoch == self.epoch {
            if let Some(slot) = ticket.probe {
                self.free_probe(slot);
            }
        }
    }

    /// Takes back an admitted ticket whose call never went out (the inner service
    /// was not ready for it): the call counts as short-circuited, a probe's slot is freed.
    pub fn give_back(&mut self, ticket: Ticket, now: Instant) {
        self.advance(now);
        if ticket.epoch == self.epoch {
            if let Some(slot) = ticket.probe {
                self.free_probe(slot);
            }
        }
    }

    pub(super) fn should_trip(&mut self, now: Instant) -> Option<Cause> {
        self.window
            .trip_cause(&self.config.policy, self.config.slow_call.as_ref(), now)
    }

    pub(super) fn trip(&mut self, now: Instant, cause: Cause) {
        // A trip during the ramp is a re-trip: the backoff keeps growing.
        let ramping = matches!(self.phase, Phase::Closed { ramp: Some(_) });
        let cold = self.cold();
        cold.streak = if ramping {
            cold.streak.saturating_add(1)
        } else {
            0
        };
        self.open_at(now, cause);
        let epoch = self.epoch;
        let cold = self.cold();
        cold.trip_epoch = epoch;
        cold.trip_rehearsal = false;
    }

    pub(super) fn finish_probe(&mut self, slot: u32, outcome: Outcome, now: Instant) {
        self.free_probe(slot);
        match outcome {
            Outcome::Success => self.probe_succeeded(now),
            Outcome::Failure => {
                let cold = self.cold();
                cold.failed_probes = cold.failed_probes.saturating_add(1);
                cold.streak = cold.streak.saturating_add(1);
                self.open_at(now, Cause::ProbeFailed);
            }
            Outcome::Ignore => {}
        }
    }

    pub(super) fn probe_succeeded(&mut self, now: Instant) {
        if let Phase::HalfOpen { successes, .. } = &mut self.phase {
            *successes += 1;
            if *successes >= self.config.probes_to_close {
                self.close(now, Cause::ProbesSucceeded);
            }
        }
    }
}
