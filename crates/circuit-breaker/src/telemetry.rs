//! The only place with `cfg(feature = "tracing")` and `cfg(feature = "metrics")`:
//! call sites stay free of them.
//!
//! Metrics (feature `metrics`), all labelled with the breaker's `name`. Every call
//! that reaches the breaker is counted exactly once, when it ends, in
//! `seawall_breaker_calls_total{outcome}`:
//! `success`, `failure` (not a timeout), `timeout` (the request's deadline ran out
//! while the dependency had the call), `ignored`, `cancelled`, `rejected`
//! (short-circuited). The other counters are subsets of those, never second counts:
//! - `seawall_breaker_slow_calls_total`: successes, failures and timeouts slower than
//!   the slow-call threshold;
//! - `seawall_breaker_stale_outcomes_total`: successes, failures and timeouts of calls
//!   admitted before a state change (counted, never acted on);
//! - `seawall_breaker_probes_total{result}`: each half-open probe's verdict, once:
//!   `success`, `failure` (not a timeout) or `timeout` (the deadline or the half-open
//!   timeout ran out), so `half_open -> open` transitions = `failure` + `timeout`;
//! - `seawall_breaker_outcome_reasons_total{outcome, reason}`: calls whose classifier
//!   gave a reason (see `Classify::reason`), per reason.
//!
//! Also `seawall_breaker_transitions_total{from, to}` and the gauge
//! `seawall_breaker_state{state}` (1 for the current state, 0 for the others).
//!
//! Every series but the operator transitions and the reasons is registered when the
//! breaker is built, so it is exported at zero from the start: install the metrics
//! recorder before building layers.

// Without both features some arguments only serve the missing one.
#![cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]

use std::time::Duration;

use seawall_core::{Name, Outcome};

use crate::machine::{Recorded, Report, State, Transition};

/// Pre-registered metric handles (nothing without the `metrics` feature).
#[derive(Debug)]
pub(crate) struct Telemetry {
    #[cfg(feature = "metrics")]
    metrics: Metrics,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Metrics {
    success: metrics::Counter,
    failure: metrics::Counter,
    timeout: metrics::Counter,
    ignored: metrics::Counter,
    cancelled: metrics::Counter,
    rejected: metrics::Counter,
    slow: metrics::Counter,
    stale: metrics::Counter,
    probe_success: metrics::Counter,
    probe_failure: metrics::Counter,
    probe_timeout: metrics::Counter,
    /// The automatic transitions, in [`AUTOMATIC`] order.
    automatic: [metrics::Counter; 4],
    state: [metrics::Gauge; 6],
    reasons: seawall_core::ReasonCounters,
}

/// The transitions the breaker makes by itself (operators' appear with their first use).
#[cfg(feature = "metrics")]
const AUTOMATIC: [(State, State); 4] = [
    (State::Closed, State::Open),
    (State::Open, State::HalfOpen),
    (State::HalfOpen, State::Closed),
    (State::HalfOpen, State::Open),
];

#[cfg(feature = "metrics")]
impl Metrics {
    fn new(name: &Name, initial: State) -> Self {
        let calls = |outcome: &'static str| metrics::counter!("seawall_breaker_calls_total", "name" => name.clone(), "outcome" => outcome);
        let probes = |result: &'static str| metrics::counter!("seawall_breaker_probes_total", "name" => name.clone(), "result" => result);
        let state = State::ALL.map(|s| {
            metrics::gauge!("seawall_breaker_state", "name" => name.clone(), "state" => s.as_str())
        });
        for (s, gauge) in State::ALL.iter().zip(&state) {
            gauge.set(if *s == initial { 1.0 } else { 0.0 });
        }
        Self {
            success: calls("success"),
            failure: calls("failure"),
            timeout: calls("timeout"),
            ignored: calls("ignored"),
            cancelled: calls("cancelled"),
            rejected: calls("rejected"),
            slow: metrics::counter!("seawall_breaker_slow_calls_total", "name" => name.clone()),
            stale: metrics::counter!("seawall_breaker_stale_outcomes_total", "name" => name.clone()),
            probe_success: probes("success"),
            probe_failure: probes("failure"),
            probe_timeout: probes("timeout"),
            automatic: AUTOMATIC.map(|(from, to)| transition(name, from, to)),
            state,
            reasons: seawall_core::ReasonCounters::new(
                "seawall_breaker_outcome_reasons_total",
                name.clone(),
            ),
        }
    }
}

#[cfg(feature = "metrics")]
fn transition(name: &Name, from: State, to: State) -> metrics::Counter {
    metrics::counter!(
        "seawall_breaker_transitions_total",
        "name" => name.clone(),
        "from" => from.as_str(),
        "to" => to.as_str()
    )
}

/// Gives the breaker's metrics their help text and unit.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    use metrics::Unit;
    metrics::describe_counter!(
        "seawall_breaker_calls_total",
        Unit::Count,
        "Calls that reached the breaker, counted once when they end, by outcome: success, failure (not a timeout), timeout (the deadline ran out while the dependency had the call), ignored, cancelled, rejected (short-circuited)."
    );
    metrics::describe_counter!(
        "seawall_breaker_slow_calls_total",
        Unit::Count,
        "Successes, failures and timeouts that took at least the slow-call threshold (a subset of calls_total)."
    );
    metrics::describe_counter!(
        "seawall_breaker_stale_outcomes_total",
        Unit::Count,
        "Successes, failures and timeouts of calls admitted before a state change: counted in calls_total, never acted on."
    );
    metrics::describe_counter!(
        "seawall_breaker_probes_total",
        Unit::Count,
        "Half-open probe verdicts: success, failure (not a timeout), timeout (the deadline or the half-open timeout ran out)."
    );
    metrics::describe_counter!(
        "seawall_breaker_outcome_reasons_total",
        Unit::Count,
        "Calls whose classifier gave a reason (a business refusal, say), by classified outcome and reason."
    );
    metrics::describe_counter!(
        "seawall_breaker_transitions_total",
        Unit::Count,
        "State changes by from and to: trips, probes, operator overrides."
    );
    metrics::describe_gauge!(
        "seawall_breaker_state",
        "1 for the breaker's current state, 0 for the others."
    );
}

impl Telemetry {
    pub(crate) fn new(name: &Name, initial: State) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            metrics: Metrics::new(name, initial),
        }
    }

    /// Successes tallied on the lock-free path.
    #[inline]
    pub(crate) fn successes(&self, n: u64) {
        #[cfg(feature = "metrics")]
        self.metrics.success.increment(n);
    }

    /// An ignored outcome of an ordinary call, counted on the lock-free path.
    #[inline]
    pub(crate) fn ignored(&self) {
        #[cfg(feature = "metrics")]
        self.metrics.ignored.increment(1);
    }

    /// A finished call that went through the machine: one `calls_total` outcome, and
    /// the subsets it belongs to.
    pub(crate) fn finished(&self, report: Report, recorded: Recorded) {
        #[cfg(feature = "metrics")]
        {
            let m = &self.metrics;
            let counted = report.outcome != Outcome::Ignore;
            match (report.timed_out, report.outcome) {
                (true, _) => m.timeout.increment(1),
                (false, Outcome::Success) => m.success.increment(1),
                (false, Outcome::Failure) => m.failure.increment(1),
                (false, Outcome::Ignore) => m.ignored.increment(1),
            }
            if report.slow && counted {
                m.slow.increment(1);
            }
            match recorded {
                Recorded::Probe if report.timed_out => m.probe_timeout.increment(1),
                Recorded::Probe => match report.outcome {
                    Outcome::Success => m.probe_success.increment(1),
                    Outcome::Failure => m.probe_failure.increment(1),
                    Outcome::Ignore => {}
                },
                Recorded::Stale if counted => m.stale.increment(1),
                Recorded::Stale | Recorded::Current => {}
            }
        }
    }

    /// Successes tallied on the lock-free path (already counted as successes) that
    /// turned out to be stale: a state change was being made when they were tallied.
    pub(crate) fn stale(&self, n: u64) {
        #[cfg(feature = "metrics")]
        self.metrics.stale.increment(n);
    }

    /// The classifier gave `reason` for `outcome`.
    #[inline]
    pub(crate) fn reason(&self, outcome: Outcome, reason: Option<&'static str>) {
        #[cfg(feature = "metrics")]
        if let Some(reason) = reason {
            self.metrics.reasons.count(outcome, reason);
        }
    }

    /// An admitted call dropped before it finished.
    #[inline]
    pub(crate) fn cancelled(&self) {
        #[cfg(feature = "metrics")]
        self.metrics.cancelled.increment(1);
    }

    /// A call turned away without reaching the dependency.
    #[inline]
    pub(crate) fn rejected(&self, name: &Name, retry_after: Duration) {
        #[cfg(feature = "metrics")]
        self.metrics.rejected.increment(1);
        #[cfg(feature = "tracing")]
        tracing::debug!(
            target: "seawall::circuit_breaker",
            name = &**name,
            retry_after_ms = retry_after.as_millis() as u64,
            "call rejected: circuit open"
        );
    }

    /// Whether transitions are logged (so the breaker keeps them to log after
    /// releasing its lock).
    pub(crate) const LOGS_TRANSITIONS: bool = cfg!(feature = "tracing");

    /// Counts a change of state. Called under the breaker's lock, so the state
    /// gauge follows the transitions in order.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn count_transition(&self, name: &Name, t: &Transition) {
        #[cfg(feature = "metrics")]
        {
            let m = &self.metrics;
            m.state[t.from.index()].set(0.0);
            m.state[t.to.index()].set(1.0);
            match AUTOMATIC
                .iter()
                .position(|&(f, to)| f == t.from && to == t.to)
            {
                Some(i) => m.automatic[i].increment(1),
                None => transition(name, t.from, t.to).increment(1),
            }
            // A probe that outlived the half-open timeout: its verdict is given here,
            // its call is counted in `calls_total` when it ends (as stale).
            if t.reason == crate::machine::Reason::ProbeTimedOut {
                m.probe_timeout.increment(1);
            }
        }
    }

    /// Logs a change of state. Called after the breaker's lock is released: a
    /// subscriber may do anything, including reading the breaker's snapshot.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn log_transition(name: &Name, t: &Transition) {
        #[cfg(feature = "tracing")]
        {
            macro_rules! event {
                ($level:expr) => {
                    tracing::event!(
                        target: "seawall::circuit_breaker",
                        $level,
                        name = &**name,
                        from = t.from.as_str(),
                        to = t.to.as_str(),
                        reason = t.reason.as_str(),
                        epoch = t.epoch,
                        "circuit breaker {} -> {}",
                        t.from,
                        t.to
                    )
                };
            }
            match t.to {
                State::Open | State::ForcedOpen => event!(tracing::Level::WARN),
                _ => event!(tracing::Level::INFO),
            }
        }
    }
}
