//! What every service of one hedging layer shares: the configuration, the budget,
//! the latency estimator and the counters; and the handle that reads them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::config::{HedgeConfig, HedgeDelay};
use super::latency::LatencyEstimator;
use super::telemetry::{HedgeRefusal, HedgeTelemetry};
use crate::rejection::Name;
use crate::retry::SharedBudget;

/// The state of one hedging layer, behind an `Arc`.
pub(crate) struct Shared {
    pub(crate) name: Name,
    pub(crate) config: HedgeConfig,
    pub(crate) budget: SharedBudget,
    /// Only for a percentile delay.
    estimator: Option<LatencyEstimator>,
    counters: Counters,
    telemetry: HedgeTelemetry,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    sent: AtomicU64,
    won: AtomicU64,
    refused: [AtomicU64; 4],
}

impl Shared {
    pub(crate) fn new(name: Name, config: HedgeConfig, budget: SharedBudget, now: Instant) -> Self {
        let estimator = match config.delay {
            HedgeDelay::Fixed(_) => None,
            HedgeDelay::Percentile(p) => Some(LatencyEstimator::new(p, now)),
        };
        Self {
            telemetry: HedgeTelemetry::new(&name),
            name,
            config,
            budget,
            estimator,
            counters: Counters::default(),
        }
    }

    /// A request arrives: counts it, and funds the budget unless a retry policy does.
    #[inline]
    pub(crate) fn request(&self, now: Instant) {
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.telemetry.request();
        if !self.budget.counted_by_retry() {
            self.budget.budget.deposit(now);
        }
    }

    /// The delay before the next hedge.
    pub(crate) fn delay(&self, now: Instant) -> Duration {
        match (&self.config.delay, &self.estimator) {
            (HedgeDelay::Fixed(delay), _) => *delay,
            (HedgeDelay::Percentile(p), None) => p.initial,
            (HedgeDelay::Percentile(_), Some(e)) => e.delay(now),
        }
    }

    /// Whether first attempts' latencies are wanted.
    #[inline]
    pub(crate) fn measures(&self) -> bool {
        self.estimator.is_some()
    }

    /// A first attempt ran `latency` (or, cancelled, at least that long).
    pub(crate) fn record_first(&self, latency: Duration, now: Instant) {
        if let Some(e) = &self.estimator {
            e.record(latency, now);
        }
    }

    /// Takes one hedge from the budget.
    pub(crate) fn withdraw(&self, now: Instant) -> bool {
        self.budget.budget.withdraw(now)
    }

    pub(crate) fn sent(&self, attempt: usize) {
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        self.telemetry.sent(&self.name, attempt);
    }

    pub(crate) fn won(&self) {
        self.counters.won.fetch_add(1, Ordering::Relaxed);
        self.telemetry.won(&self.name);
    }

    pub(crate) fn refused(&self, cause: HedgeRefusal) {
        self.counters.refused[cause as usize].fetch_add(1, Ordering::Relaxed);
        self.telemetry.refused(&self.name, cause);
    }
}

/// Reads the counters of one hedging layer (every service it built). Cheap to clone.
#[derive(Clone)]
pub struct HedgeHandle {
    pub(crate) shared: std::sync::Arc<Shared>,
}

impl HedgeHandle {
    /// The layer's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The configuration in force.
    pub fn config(&self) -> &HedgeConfig {
        &self.shared.config
    }

    /// The budget the layer draws on (its own, or the one it shares).
    pub fn budget(&self) -> SharedBudget {
        self.shared.budget.clone()
    }

    /// The counters now (a few atomic loads; allocates the name).
    pub fn snapshot(&self) -> HedgeSnapshot {
        let s = &*self.shared;
        let c = &s.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let refused = |r: HedgeRefusal| load(&c.refused[r as usize]);
        let now = Instant::now();
        HedgeSnapshot {
            name: s.name.to_string(),
            requests: load(&c.requests),
            hedges_sent: load(&c.sent),
            hedges_won: load(&c.won),
            refused_budget: refused(HedgeRefusal::Budget),
            refused_deadline: refused(HedgeRefusal::Deadline),
            refused_not_idempotent: refused(HedgeRefusal::NotIdempotent),
            refused_rejected: refused(HedgeRefusal::Rejected),
            delay: s.delay(now),
            first_attempt_percentile: s.estimator.as_ref().and_then(|e| e.estimate(now)),
            budget_available: s.budget.available(),
        }
    }
}

impl fmt::Debug for HedgeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgeHandle")
            .field("name", &self.name())
            .finish()
    }
}

/// A hedging layer's counters at one moment (see [`HedgeHandle::snapshot`]).
///
/// A hedge that was due and not sent is counted once, under the first rule that
/// refused it: not idempotent, deadline, budget. `rejected` counts the requests
/// whose hedging a seawall rejection ended (an attempt refused by an open breaker
/// or a full bulkhead).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct HedgeSnapshot {
    /// The layer's name.
    pub name: String,
    /// Requests the layer saw: first attempts.
    pub requests: u64,
    /// Hedges sent.
    pub hedges_sent: u64,
    /// Hedges whose answer the caller got. A rising share of hedges won is a
    /// slowing dependency: the slowness the hedges hide from the caller shows here.
    pub hedges_won: u64,
    /// Hedges not sent because the budget had none left.
    pub refused_budget: u64,
    /// Hedges not sent because `min_attempt_time` did not fit in the deadline.
    pub refused_deadline: u64,
    /// Hedges not sent because the request may not be sent twice.
    pub refused_not_idempotent: u64,
    /// Requests whose hedging ended at a seawall rejection.
    pub refused_rejected: u64,
    /// The delay a hedge would wait now.
    pub delay: Duration,
    /// The percentile of first attempts' latencies, censored samples included
    /// (percentile delay only, once the samples weigh enough).
    pub first_attempt_percentile: Option<Duration>,
    /// Retries and hedges the budget would allow now.
    pub budget_available: u64,
}
