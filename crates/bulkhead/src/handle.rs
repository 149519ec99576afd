//! The operator's view and controls of one bulkhead.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use seawall_core::ConfigError;
use tokio::sync::broadcast;

use crate::config::BulkheadConfig;
use crate::events::BulkheadEvent;
use crate::machine::MAX_LIMIT;
use crate::state::Shared;

/// Observes and controls one bulkhead. Cheap to clone; all clones see the same bulkhead.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// The bulkhead's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Counts and limits now (a few atomic loads; allocates the name).
    pub fn snapshot(&self) -> Snapshot {
        self.shared.snapshot()
    }

    /// Changes of the bulkhead's condition from now on: saturated and relieved,
    /// the limit moving, new limits (see [`BulkheadEvent`] for when each is sent;
    /// all are edge-triggered, none is per call). The channel is created by the
    /// first call; a subscriber that falls more than 64 events behind sees `Lagged`.
    pub fn subscribe(&self) -> broadcast::Receiver<BulkheadEvent> {
        self.shared.events.subscribe()
    }

    /// The limits in force.
    pub fn config(&self) -> BulkheadConfig {
        self.shared.config()
    }

    /// Changes the limits at run time, after validating them.
    ///
    /// Growing `max_concurrent` admits waiters at once; shrinking it preempts no
    /// running call, it only admits fewer until the active count is below the new
    /// limit. Shrinking `max_queue` removes no waiter; newcomers are rejected until
    /// the line is shorter. A new `max_wait` applies to calls that join the line
    /// afterwards. Counters are kept.
    pub fn reconfigure(&self, config: BulkheadConfig) -> Result<(), ConfigError> {
        self.shared.reconfigure(config)
    }

    /// Starts new peaks (see [`Snapshot::peak_active`]) from the current counts,
    /// e.g. at the start of an observation period or an incident.
    pub fn reset_peaks(&self) {
        self.shared.machine.reset_peaks();
    }

    /// Pins the limit of active calls at `limit` (1 to 2^20), overriding the
    /// adaptive algorithm (or `max_concurrent`) until
    /// [`release_limit`](Self::release_limit): the operator's hand on the valve
    /// during an incident.
    ///
    /// Like any smaller limit, a lower pin preempts no running call; it only admits
    /// fewer. While pinned, the algorithm learns nothing (the calls it would see
    /// were shaped by the pin, not by it), and [`reconfigure`](Self::reconfigure)
    /// and [`revert`](Self::revert) keep the pin.
    pub fn pin_limit(&self, limit: usize) -> Result<(), ConfigError> {
        if limit == 0 || limit > MAX_LIMIT {
            return Err(ConfigError::new(
                "limit",
                format!("must be between 1 and {MAX_LIMIT}, got {limit}"),
            ));
        }
        self.shared.pin_limit(limit);
        Ok(())
    }

    /// Releases a pinned limit. An adaptive algorithm starts again *from the
    /// pinned limit* (clamped to its bounds) and moves on from there, rather than
    /// jumping back to what it had before the incident; a fixed bulkhead returns to
    /// `max_concurrent`. Does nothing when no limit is pinned.
    pub fn release_limit(&self) {
        self.shared.release_limit();
    }

    /// Goes back to the limits the bulkhead was built with.
    pub fn revert(&self) {
        // The built configuration was validated when the layer was built.
        let _ = self.shared.reconfigure(self.shared.built());
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("name", &self.name())
            .finish()
    }
}

/// A bulkhead's counts and limits at one moment (see [`Handle::snapshot`]).
///
/// Counters run since the bulkhead was built. `admitted + rejected_full +
/// rejected_timeout + abandoned` accounts for every call once it has been decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Snapshot {
    /// The bulkhead's name.
    pub name: String,
    /// The limit of active calls in force now: the adaptive algorithm's, the
    /// operator's pinned limit, or `max_concurrent`.
    pub limit: usize,
    /// Whether an operator pinned the limit ([`Handle::pin_limit`]).
    pub limit_pinned: bool,
    /// The adaptive algorithm's state, when the bulkhead has one.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub adaptive: Option<AdaptiveSnapshot>,
    /// The configured limit of active calls (not used while adaptive).
    pub max_concurrent: usize,
    /// The current limit of waiting calls.
    pub max_queue: usize,
    /// The current longest wait.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub max_wait: Duration,
    /// Calls holding a slot now (may exceed `limit` just after it shrank).
    pub active: usize,
    /// Calls waiting for a slot now.
    pub queued: usize,
    /// Whether the bulkhead is turning calls away: it rejected one and has not
    /// drained since (see [`BulkheadEvent::Saturated`] and
    /// [`BulkheadEvent::Relieved`]).
    pub saturated: bool,
    /// The most calls active at once since the bulkhead was built or
    /// [`Handle::reset_peaks`] was called, recorded at every change (not sampled).
    pub peak_active: usize,
    /// The most calls waiting at once over the same period.
    pub peak_queued: usize,
    /// Calls that got a slot, at once or after waiting.
    pub admitted: u64,
    /// Calls rejected at once because every slot was busy and the queue full.
    pub rejected_full: u64,
    /// Calls that waited as long as they were allowed to (`max_wait` or their
    /// deadline) without getting a slot.
    pub rejected_timeout: u64,
    /// Calls whose caller gave up (dropped the future) while they waited.
    pub abandoned: u64,
    /// How long admitted calls waited for their slot.
    pub wait: WaitStats,
}

/// An adaptive bulkhead's algorithm at one moment (see [`Snapshot::adaptive`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct AdaptiveSnapshot {
    /// `"aimd"` or `"gradient"`.
    pub algorithm: &'static str,
    /// Limit changes (and, for a gradient, baseline measurements) so far: how
    /// often it moved.
    pub generation: u64,
    /// A gradient's baseline: the latency it measured without queueing.
    #[cfg_attr(
        feature = "serde",
        serde(
            with = "seawall_core::duration_format::option",
            skip_serializing_if = "Option::is_none"
        )
    )]
    pub min_rtt: Option<Duration>,
    /// Whether a gradient is measuring its baseline now (its limit is lowered meanwhile).
    pub measuring_min_rtt: bool,
}

/// The distribution of admission waits since the bulkhead was built.
///
/// Calls admitted at once count as a zero wait. Quantiles come from a fixed
/// power-of-two histogram: each is the upper bound of its bucket (at most twice
/// the true value, for waits above 1 µs) and never more than `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct WaitStats {
    /// The median wait.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub p50: Duration,
    /// The 99th-percentile wait.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub p99: Duration,
    /// The longest wait.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub max: Duration,
    /// How many admitted calls had to wait in line.
    pub queued_admissions: u64,
}
