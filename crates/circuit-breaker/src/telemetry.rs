//! The only place with `cfg(feature = "tracing")` and `cfg(feature = "metrics")`:
//! call sites stay free of them.
//!
//! Metrics (feature `metrics`), all labelled with the breaker's `name`:
//! - `seawall_breaker_calls_total{outcome}`: `success`, `failure`, `ignored`,
//!   `cancelled`, `rejected` (short-circuited while open);
//! - `seawall_breaker_slow_calls_total`, `seawall_breaker_timeouts_total`;
//! - `seawall_breaker_probes_total{result}`: `success`, `failure`, `timeout`;
//! - `seawall_breaker_stale_outcomes_total`: outcomes of calls admitted before a
//!   state change (counted, never acted on);
//! - `seawall_breaker_transitions_total{from, to}`;
//! - `seawall_breaker_state{state}`: a gauge, 1 for the current state, 0 for the others.
//!
//! The handles are registered when the breaker is built, so install the metrics
//! recorder before building layers.

// Without both features some arguments only serve the missing one.
#![cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]

use std::time::Duration;

use seawall_core::Name;

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
    ignored: metrics::Counter,
    cancelled: metrics::Counter,
    rejected: metrics::Counter,
    slow: metrics::Counter,
    timeouts: metrics::Counter,
    stale: metrics::Counter,
    probe_success: metrics::Counter,
    probe_failure: metrics::Counter,
    probe_timeout: metrics::Counter,
    state: [metrics::Gauge; 6],
}

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
            ignored: calls("ignored"),
            cancelled: calls("cancelled"),
            rejected: calls("rejected"),
            slow: metrics::counter!("seawall_breaker_slow_calls_total", "name" => name.clone()),
            timeouts: metrics::counter!("seawall_breaker_timeouts_total", "name" => name.clone()),
            stale: metrics::counter!("seawall_breaker_stale_outcomes_total", "name" => name.clone()),
            probe_success: probes("success"),
            probe_failure: probes("failure"),
            probe_timeout: probes("timeout"),
            state,
        }
    }
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

    /// A finished call that went through the machine.
    pub(crate) fn finished(&self, report: Report, recorded: Recorded) {
        #[cfg(feature = "metrics")]
        {
            use seawall_core::Outcome;
            let m = &self.metrics;
            match report.outcome {
                Outcome::Success => m.success.increment(1),
                Outcome::Failure => m.failure.increment(1),
                Outcome::Ignore => m.ignored.increment(1),
            }
            if report.slow && report.outcome != Outcome::Ignore {
                m.slow.increment(1);
            }
            if report.timed_out {
                m.timeouts.increment(1);
            }
            match (recorded, report.outcome) {
                (Recorded::Probe, Outcome::Success) => m.probe_success.increment(1),
                (Recorded::Probe, Outcome::Failure) => m.probe_failure.increment(1),
                (Recorded::Stale, Outcome::Success | Outcome::Failure) => m.stale.increment(1),
                _ => {}
            }
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
            metrics::counter!(
                "seawall_breaker_transitions_total",
                "name" => name.clone(),
                "from" => t.from.as_str(),
                "to" => t.to.as_str()
            )
            .increment(1);
            if t.reason == crate::machine::Reason::ProbeTimedOut {
                m.probe_timeout.increment(1);
                m.probe_failure.increment(1);
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
