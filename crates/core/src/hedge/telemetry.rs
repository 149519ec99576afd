//! The hedging layer's tracing events and metrics: the only file of the module with
//! `cfg(feature)`.
//!
//! - `seawall_hedge_requests_total{name}`: requests the layer saw (first attempts);
//! - `seawall_hedge_sent_total{name}`: hedges sent;
//! - `seawall_hedge_won_total{name}`: hedges whose answer the caller got;
//! - `seawall_hedge_refused_total{name, cause}`: hedges due but not sent, `cause` =
//!   `budget` | `deadline` | `not_idempotent` | `rejected`.

/// Why a hedge that was due was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HedgeRefusal {
    /// The retry budget had nothing left.
    Budget,
    /// What remains of the deadline is shorter than `min_attempt_time`.
    Deadline,
    /// The request may not be sent twice (not idempotent, or no copy of it).
    NotIdempotent,
    /// A seawall rejection (an open breaker, a full bulkhead) ended hedging.
    Rejected,
}

impl HedgeRefusal {
    #[cfg(feature = "metrics")]
    const ALL: [Self; 4] = [
        Self::Budget,
        Self::Deadline,
        Self::NotIdempotent,
        Self::Rejected,
    ];

    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Budget => "budget",
            Self::Deadline => "deadline",
            Self::NotIdempotent => "not_idempotent",
            Self::Rejected => "rejected",
        }
    }
}

/// Metric handles of one hedging layer, registered when it is built.
#[derive(Debug)]
pub(crate) struct HedgeTelemetry {
    #[cfg(feature = "metrics")]
    m: HedgeMetrics,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct HedgeMetrics {
    requests: metrics::Counter,
    sent: metrics::Counter,
    won: metrics::Counter,
    refused: [metrics::Counter; 4],
}

impl HedgeTelemetry {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(name: &crate::Name) -> Self {
        #[cfg(feature = "metrics")]
        {
            let refused = |cause: HedgeRefusal| metrics::counter!("seawall_hedge_refused_total", "name" => name.clone(), "cause" => cause.as_str());
            Self {
                m: HedgeMetrics {
                    requests: metrics::counter!("seawall_hedge_requests_total", "name" => name.clone()),
                    sent: metrics::counter!("seawall_hedge_sent_total", "name" => name.clone()),
                    won: metrics::counter!("seawall_hedge_won_total", "name" => name.clone()),
                    refused: HedgeRefusal::ALL.map(refused),
                },
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }

    #[inline]
    pub(crate) fn request(&self) {
        #[cfg(feature = "metrics")]
        self.m.requests.increment(1);
    }

    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn sent(&self, name: &str, attempt: usize) {
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "seawall::hedge", hedge = name, attempt, "hedge sent");
        #[cfg(feature = "metrics")]
        self.m.sent.increment(1);
    }

    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn won(&self, name: &str) {
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "seawall::hedge", hedge = name, "a hedge answered first");
        #[cfg(feature = "metrics")]
        self.m.won.increment(1);
    }

    #[cfg_attr(
        not(all(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(crate) fn refused(&self, name: &str, cause: HedgeRefusal) {
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "seawall::hedge", hedge = name, cause = cause.as_str(), "hedge not sent");
        #[cfg(feature = "metrics")]
        self.m.refused[cause as usize].increment(1);
    }
}

/// Gives the hedging layer's metrics their help text and unit.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    use metrics::Unit;
    metrics::describe_counter!(
        "seawall_hedge_requests_total",
        Unit::Count,
        "Requests a hedging layer saw (first attempts)."
    );
    metrics::describe_counter!(
        "seawall_hedge_sent_total",
        Unit::Count,
        "Hedges sent: extra attempts of a request whose first attempt was slow."
    );
    metrics::describe_counter!(
        "seawall_hedge_won_total",
        Unit::Count,
        "Hedges whose answer the caller got (the first success by the classifier)."
    );
    metrics::describe_counter!(
        "seawall_hedge_refused_total",
        Unit::Count,
        "Hedges due but not sent, by cause: budget, deadline, not_idempotent, rejected."
    );
}
