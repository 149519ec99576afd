//! The only place with `cfg(feature = "tracing")` and `cfg(feature = "metrics")`:
//! call sites stay free of them.
//!
//! Metrics (feature `metrics`), all labelled with the breaker's `name` (for a keyed
//! layer, the layer's own name for all its keys, plus a `key` label if it opted into
//! per-key series; see [`Series`]). Every call
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
//!   gave a reason (see `Classify::reason`), per reason;
//! - `seawall_breaker_shadow_rejections_total{cause}`: calls a breaker in shadow
//!   mode let through although it would have rejected them (`open`,
//!   `probe_slots_full`, `ramping`), counted when admitted.
//!
//! Also `seawall_breaker_transitions_total{from, to}` and the gauge
//! `seawall_breaker_state{state}`: how many breakers of the series are in each state
//! (1 for the current state of a lone breaker, 0 for the others). Breakers add
//! themselves when built, move on each transition and leave when dropped, so the
//! breakers of a keyed layer, evicted ones included, add up.
//!
//! Every series but the operator transitions and the reasons is registered when the
//! breaker (a keyed layer: the layer) is built, so it is exported at zero from the
//! start: install the metrics recorder before building layers.

// Without both features some arguments only serve the missing one.
#![cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]

use std::time::Duration;

use seawall_core::{Name, OpenCause, Outcome};

use crate::machine::{CircuitBreakerEvent, Recorded, Report, State};

/// The shadow-rejection causes in [`shadow_index`](crate::machine::shadow_index) order.
#[cfg(feature = "metrics")]
pub(crate) const SHADOW_CAUSES: [OpenCause; 3] = [
    OpenCause::Open,
    OpenCause::ProbeSlotsFull,
    OpenCause::Ramping,
];

/// The series breakers report to: the layer's `name`, and a `key` label for the
/// keys of a keyed layer that opted into per-key series. The handles are registered
/// once, when the series is made, and shared by every breaker reporting to it: by
/// default all the breakers of a keyed layer share its series, so a new key
/// registers nothing and the number of series is fixed by the configuration, not by
/// the keys clients send. (Classification reasons are counted per layer name.)
#[derive(Debug)]
pub(crate) struct Series {
    #[cfg(feature = "metrics")]
    handles: std::sync::Arc<Metrics>,
}

impl Series {
    /// The series of `name`, without a key label.
    pub(crate) fn named(name: &Name) -> Self {
        Self::with_labels(name, None)
    }

    /// The per-key series of `key` in the layer `name`.
    pub(crate) fn keyed(name: &Name, key: String) -> Self {
        Self::with_labels(name, Some(key))
    }

    #[cfg_attr(
        not(feature = "metrics"),
        allow(unused_variables, clippy::needless_pass_by_value)
    )]
    fn with_labels(name: &Name, key: Option<String>) -> Self {
        #[cfg(feature = "metrics")]
        {
            let mut labels = vec![metrics::Label::new("name", name.clone())];
            if let Some(key) = key {
                labels.push(metrics::Label::new("key", key));
            }
            Self {
                handles: std::sync::Arc::new(Metrics::new(name, labels)),
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }
}

/// One breaker's view of its series (nothing without the `metrics` feature).
#[derive(Debug)]
pub(crate) struct Telemetry {
    #[cfg(feature = "metrics")]
    metrics: std::sync::Arc<Metrics>,
    /// The state this breaker counts itself in (its index in the state gauges).
    #[cfg(feature = "metrics")]
    current: std::sync::atomic::AtomicUsize,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Metrics {
    labels: Vec<metrics::Label>,
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
    /// Shadow rejections, in `SHADOW_CAUSES` order.
    shadow: [metrics::Counter; 3],
    /// The automatic transitions, in [`AUTOMATIC`] order.
    automatic: [metrics::Counter; 4],
    state: [metrics::Gauge; State::ALL.len()],
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
fn with(labels: &[metrics::Label], extra: &[(&'static str, &'static str)]) -> Vec<metrics::Label> {
    let mut all = labels.to_vec();
    all.extend(extra.iter().map(|&(k, v)| metrics::Label::new(k, v)));
    all
}

#[cfg(feature = "metrics")]
impl Metrics {
    fn new(name: &Name, labels: Vec<metrics::Label>) -> Self {
        let l = &labels;
        let calls = |outcome: &'static str| {
            metrics::counter!(
                "seawall_breaker_calls_total",
                with(l, &[("outcome", outcome)])
            )
        };
        let probes = |result: &'static str| {
            metrics::counter!(
                "seawall_breaker_probes_total",
                with(l, &[("result", result)])
            )
        };
        Self {
            success: calls("success"),
            failure: calls("failure"),
            timeout: calls("timeout"),
            ignored: calls("ignored"),
            cancelled: calls("cancelled"),
            rejected: calls("rejected"),
            slow: metrics::counter!("seawall_breaker_slow_calls_total", with(l, &[])),
            stale: metrics::counter!("seawall_breaker_stale_outcomes_total", with(l, &[])),
            probe_success: probes("success"),
            probe_failure: probes("failure"),
            probe_timeout: probes("timeout"),
            shadow: SHADOW_CAUSES.map(|cause| {
                metrics::counter!(
                    "seawall_breaker_shadow_rejections_total",
                    with(l, &[("cause", cause.as_str())])
                )
            }),
            automatic: AUTOMATIC.map(|(from, to)| transition(l, from, to)),
            state: State::ALL.map(|s| {
                metrics::gauge!("seawall_breaker_state", with(l, &[("state", s.as_str())]))
            }),
            reasons: seawall_core::ReasonCounters::new(
                "seawall_breaker_outcome_reasons_total",
                name.clone(),
            ),
            labels,
        }
    }
}

#[cfg(feature = "metrics")]
fn transition(labels: &[metrics::Label], from: State, to: State) -> metrics::Counter {
    metrics::counter!(
        "seawall_breaker_transitions_total",
        with(labels, &[("from", from.as_str()), ("to", to.as_str())])
    )
}

#[cfg(feature = "metrics")]
impl Drop for Telemetry {
    /// A dropped breaker (an evicted key, say) no longer counts in its state.
    fn drop(&mut self) {
        if let Some(gauge) = self.metrics.state.get(*self.current.get_mut()) {
            gauge.decrement(1.0);
        }
    }
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
        "seawall_breaker_shadow_rejections_total",
        Unit::Count,
        "Calls a breaker in shadow mode let through although it would have rejected them, by cause: open, probe_slots_full, ramping. Each is also counted in calls_total by how it ended, never as rejected."
    );
    metrics::describe_counter!(
        "seawall_breaker_transitions_total",
        Unit::Count,
        "State changes by from and to: trips, probes, operator overrides."
    );
    metrics::describe_gauge!(
        "seawall_breaker_state",
        "Breakers in each state: 1 for a breaker's current state, 0 for the others; for a keyed layer, how many of its keys are in each state."
    );
}

impl Telemetry {
    /// A breaker starting in `initial`, counted in that state of `series`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(series: &Series, initial: State) -> Self {
        #[cfg(feature = "metrics")]
        {
            let metrics = std::sync::Arc::clone(&series.handles);
            if let Some(gauge) = metrics.state.get(initial.index()) {
                gauge.increment(1.0);
            }
            Self {
                metrics,
                current: std::sync::atomic::AtomicUsize::new(initial.index()),
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
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
                Recorded::Stale | Recorded::Current | Recorded::Shadow => {}
            }
        }
    }

    /// Streaming probes judged a success at their half-open timeout: their verdict
    /// is given here, their calls are counted in `calls_total` when they end.
    #[inline]
    pub(crate) fn streams_judged(&self, n: u64) {
        #[cfg(feature = "metrics")]
        if n != 0 {
            self.metrics.probe_success.increment(n);
        }
    }

    /// Successes tallied on the lock-free path (already counted as successes) that
    /// turned out to be stale: a state change was being made when they were tallied
    /// (or, for a lane's line, had just been made after the success read the word).
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

    /// A call turned away without reaching the dependency; `retry_after` is asked
    /// only when the event is logged (it may read the clock).
    #[inline]
    pub(crate) fn rejected(&self, name: &Name, retry_after: impl FnOnce() -> Option<Duration>) {
        #[cfg(feature = "metrics")]
        self.metrics.rejected.increment(1);
        #[cfg(feature = "tracing")]
        tracing::debug!(
            target: "seawall::circuit_breaker",
            name = &**name,
            retry_after_ms = retry_after().map(|after| after.as_millis() as u64),
            "call rejected: circuit open"
        );
    }

    /// A call the breaker would have turned away for `cause`, let through in shadow mode.
    #[inline]
    pub(crate) fn shadow_rejected(&self, name: &Name, cause: OpenCause) {
        #[cfg(feature = "metrics")]
        if let Some(counter) = self.metrics.shadow.get(crate::machine::shadow_index(cause)) {
            counter.increment(1);
        }
        #[cfg(feature = "tracing")]
        tracing::debug!(
            target: "seawall::circuit_breaker",
            name = &**name,
            cause = cause.as_str(),
            "call let through in shadow mode: the breaker would have rejected it"
        );
    }

    /// Whether transitions are logged (so the breaker keeps them to log after
    /// releasing its lock).
    pub(crate) const LOGS_TRANSITIONS: bool = cfg!(feature = "tracing");

    /// Counts a change of state. Called under the breaker's lock, so the state
    /// gauge follows the transitions in order. `false` when the transition is an
    /// operator's, whose counter is registered at its first use: registering
    /// reaches the recorder, user code that may read this very breaker, so it is
    /// counted with [`count_operator_transition`](Self::count_operator_transition)
    /// once the lock is released.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn count_transition(&self, t: &CircuitBreakerEvent) -> bool {
        #[cfg(feature = "metrics")]
        {
            use std::sync::atomic::Ordering;
            let m = &self.metrics;
            let from = self.current.swap(t.to.index(), Ordering::Relaxed);
            if let Some(gauge) = m.state.get(from) {
                gauge.decrement(1.0);
            }
            if let Some(gauge) = m.state.get(t.to.index()) {
                gauge.increment(1.0);
            }
            // A probe that outlived the half-open timeout: its verdict is given here,
            // its call is counted in `calls_total` when it ends (as stale).
            if t.cause == crate::machine::Cause::ProbeTimedOut {
                m.probe_timeout.increment(1);
            }
            match AUTOMATIC
                .iter()
                .position(|&(f, to)| f == t.from && to == t.to)
            {
                Some(i) => m.automatic[i].increment(1),
                None => return false,
            }
        }
        true
    }

    /// Counts an operator's transition, registering its series (see
    /// [`count_transition`](Self::count_transition)). Called without the lock.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn count_operator_transition(&self, t: &CircuitBreakerEvent) {
        #[cfg(feature = "metrics")]
        transition(&self.metrics.labels, t.from, t.to).increment(1);
    }

    /// Logs a change of state. Called after the breaker's lock is released: a
    /// subscriber may do anything, including reading the breaker's snapshot.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn log_transition(name: &Name, t: &CircuitBreakerEvent) {
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
                        cause = t.cause.as_str(),
                        epoch = t.epoch,
                        rehearsal = t.rehearsal,
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
