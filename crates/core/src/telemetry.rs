//! Where core's tracing events and metrics are emitted, so call sites carry no `cfg`.
//!
//! Metrics (feature `metrics`): `seawall_deadline_exceeded_total` and
//! `seawall_deadline_shadow_rejections_total`, registered at zero
//! when a [`DeadlineLayer`](crate::DeadlineLayer) is built, and the retry policy's
//! (below), registered when it is built.

/// The counter of deadlines the `DeadlineLayer` saw run out itself.
#[cfg(feature = "metrics")]
const DEADLINE_EXCEEDED: &str = "seawall_deadline_exceeded_total";

/// The counter of requests a `DeadlineLayer` in shadow mode saw outlive their deadline.
#[cfg(feature = "metrics")]
const DEADLINE_SHADOW: &str = "seawall_deadline_shadow_rejections_total";

/// Registers the deadline's counters, so they are exported (at zero) before their
/// first event.
pub(crate) fn deadline_layer_built() {
    #[cfg(feature = "metrics")]
    {
        let _ = metrics::counter!(DEADLINE_EXCEEDED);
        let _ = metrics::counter!(DEADLINE_SHADOW);
    }
}

/// A request outlived its deadline in a `DeadlineLayer` in shadow mode.
pub(crate) fn deadline_shadow_rejected() {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "seawall::deadline",
        "deadline passed in shadow mode; the request goes on"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!(DEADLINE_SHADOW).increment(1);
}

#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn deadline_shadow_switched(shadow: bool) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "seawall::deadline", shadow, "deadline shadow mode switched");
}

pub(crate) fn deadline_exceeded() {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "seawall::deadline", "deadline exceeded");
    #[cfg(feature = "metrics")]
    metrics::counter!(DEADLINE_EXCEEDED).increment(1);
}

#[cfg(feature = "http")]
pub(crate) fn rendered_error(error: &(dyn std::error::Error + 'static)) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "seawall::http", error = %error, "error rendered as a response");
    #[cfg(not(feature = "tracing"))]
    let _ = error;
}

/// Why a retry was not made although the result was worth retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The retry budget had no retry left.
    Budget,
    /// The wait plus the minimum attempt time did not fit in the remaining budget.
    Deadline,
    /// Every attempt was used.
    Attempts,
}

impl Refusal {
    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Budget => "budget",
            Self::Deadline => "deadline",
            Self::Attempts => "attempts",
        }
    }
}

/// Metric handles of one retry policy, registered when it is built (nothing
/// without the `metrics` feature).
///
/// - `seawall_retry_attempts_total{name}`: attempts, the first ones included;
/// - `seawall_retry_retries_total{name}`: retries made;
/// - `seawall_retry_refused_total{name, cause}`: retries not made, `cause` =
///   `budget` | `deadline` | `attempts`.
#[derive(Debug)]
pub(crate) struct RetryTelemetry {
    #[cfg(feature = "metrics")]
    m: RetryMetrics,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct RetryMetrics {
    attempts: metrics::Counter,
    retries: metrics::Counter,
    refused: [metrics::Counter; 3],
}

impl RetryTelemetry {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(name: &crate::Name) -> Self {
        #[cfg(feature = "metrics")]
        {
            let refused = |cause: Refusal| metrics::counter!("seawall_retry_refused_total", "name" => name.clone(), "cause" => cause.as_str());
            Self {
                m: RetryMetrics {
                    attempts: metrics::counter!("seawall_retry_attempts_total", "name" => name.clone()),
                    retries: metrics::counter!("seawall_retry_retries_total", "name" => name.clone()),
                    refused: [Refusal::Budget, Refusal::Deadline, Refusal::Attempts].map(refused),
                },
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }

    #[inline]
    pub(crate) fn attempt(&self) {
        #[cfg(feature = "metrics")]
        self.m.attempts.increment(1);
    }

    pub(crate) fn retried(&self) {
        #[cfg(feature = "metrics")]
        self.m.retries.increment(1);
    }

    #[cfg_attr(
        not(all(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(crate) fn refused(&self, name: &str, cause: Refusal) {
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "seawall::retry", retry = name, cause = cause.as_str(), "retry not made");
        #[cfg(feature = "metrics")]
        self.m.refused[cause as usize].increment(1);
    }
}

/// Gives core's metrics (the deadline's and the retry policy's) their help text and unit.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    use metrics::Unit;
    metrics::describe_counter!(
        DEADLINE_EXCEEDED,
        Unit::Count,
        "Requests whose deadline passed while the DeadlineLayer itself waited (segments without a breaker below it)."
    );
    metrics::describe_counter!(
        DEADLINE_SHADOW,
        Unit::Count,
        "Shadow mode: requests still running when their deadline passed, which an enforcing DeadlineLayer (or a breaker or bulkhead below it) would have failed."
    );
    metrics::describe_counter!(
        "seawall_retry_attempts_total",
        Unit::Count,
        "Attempts made by a retry policy, the first ones included."
    );
    metrics::describe_counter!(
        "seawall_retry_retries_total",
        Unit::Count,
        "Retries made by a retry policy."
    );
    metrics::describe_counter!(
        "seawall_retry_refused_total",
        Unit::Count,
        "Results worth retrying that were not retried, by cause: budget, deadline, attempts."
    );
}
