//! The operator's view and controls of one bulkhead.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use seawall_core::{ConfigError, LayerHandle};
use tokio::sync::broadcast;

use crate::config::BulkheadConfig;
use crate::events::BulkheadEvent;
use crate::keyed::{KeyedHandle, KeyedSnapshot};
use crate::queue::QueuePolicy;
use crate::semaphore::MAX_LIMIT;
use crate::state::Shared;

/// Observes and controls one bulkhead. Cheap to clone; all clones see the same bulkhead.
///
/// Its name, configuration, snapshot and operator verbs are those of every seawall
/// layer's handle ([`LayerHandle`], implemented by delegating to the methods here).
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
    /// limit. Shrinking the queue's `max_queue` removes no waiter; newcomers are
    /// rejected until the line is shorter. A new `max_wait` applies to calls that
    /// join the line afterwards. Counters are kept.
    pub fn reconfigure(&self, config: BulkheadConfig) -> Result<(), ConfigError> {
        self.shared.reconfigure(config)
    }

    /// Starts new peaks (see [`Snapshot::peak_active`]) from the current counts,
    /// e.g. at the start of an observation period or an incident.
    pub fn reset_peaks(&self) {
        self.shared.semaphore.reset_peaks();
    }

    /// Forces the limit of active calls to `limit` (1 to 2^20), overriding the
    /// adaptive algorithm (or `max_concurrent`) until [`release`](Self::release):
    /// the operator's hand on the valve during an incident.
    ///
    /// Like any smaller limit, a lower forced limit preempts no running call; it only
    /// admits fewer. While forced, the algorithm learns nothing (the calls it would
    /// see were shaped by the operator, not by it), and
    /// [`reconfigure`](Self::reconfigure) and [`revert`](Self::revert) keep the
    /// forced limit.
    pub fn force(&self, limit: usize) -> Result<(), ConfigError> {
        check_forced_limit(limit)?;
        self.shared.force_limit(limit);
        Ok(())
    }

    /// Releases a forced limit. An adaptive algorithm starts again *from the
    /// forced limit* (clamped to its bounds) and moves on from there, rather than
    /// jumping back to what it had before the incident; a fixed bulkhead returns to
    /// `max_concurrent`. Does nothing when no limit is forced.
    pub fn release(&self) {
        self.shared.release_limit();
    }

    /// Sets a ceiling over the limit of active calls from outside the bulkhead, or
    /// lifts it (`None`): the limit in force becomes the smaller of the bulkhead's
    /// own (forced, adaptive or `max_concurrent`) and `allotment`. This is the hook
    /// a fleet-wide cap drives (each instance's share of the cap, leased from a
    /// store), kept free of any store here.
    ///
    /// An allotment may be 0: the bulkhead then admits nothing and, since no slot
    /// can free for a waiter until a new allotment comes, newcomers are rejected at
    /// once with `BulkheadFull` instead of joining the line (calls already waiting
    /// keep their place until their `max_wait`). Like any smaller limit, a lower
    /// allotment preempts no running call. Huge values are no ceiling at all.
    pub fn set_allotment(&self, allotment: Option<usize>) {
        self.shared.set_allotment(allotment);
    }

    /// The ceiling set by [`set_allotment`](Self::set_allotment), if any.
    pub fn allotment(&self) -> Option<usize> {
        self.shared.feedback.allotment()
    }

    /// How much the bulkhead was asked for since the previous call (or since it
    /// was built), and a new period started: what a fleet-wide cap claims as this
    /// instance's demand. One consumer should call it, on its own schedule; the
    /// peaks of [`Snapshot`] and [`reset_peaks`](Self::reset_peaks) are separate
    /// (a reset also restarts this period's peaks from the current counts).
    pub fn take_demand(&self) -> Demand {
        self.shared.take_demand()
    }

    /// Switches shadow mode on or off, from the next call on (see
    /// [`BulkheadConfig::shadow`]). Calls in flight keep what they hold: a call
    /// let through beyond the limit stays so until it ends. A change of the
    /// configuration in force: [`revert`](Self::revert) undoes it.
    pub fn set_shadow(&self, shadow: bool) {
        self.shared.set_shadow(shadow);
    }

    /// Whether the bulkhead is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.shared.shadows()
    }

    /// Goes back to the limits the bulkhead was built with.
    pub fn revert(&self) {
        // The built configuration was validated when the layer was built.
        let _ = self.shared.reconfigure(self.shared.built());
    }
}

/// A limit an operator may hold a bulkhead at: 1 to 2^20, like `max_concurrent`.
pub(crate) fn check_forced_limit(limit: usize) -> Result<(), ConfigError> {
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ConfigError::new(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}, got {limit}"),
        ));
    }
    Ok(())
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("name", &self.name())
            .finish()
    }
}

impl LayerHandle for Handle {
    type Config = BulkheadConfig;
    type Snapshot = Snapshot;
    /// The limit of active calls to force.
    type Forced = usize;

    fn name(&self) -> &str {
        Handle::name(self)
    }

    fn config(&self) -> BulkheadConfig {
        Handle::config(self)
    }

    fn reconfigure(&self, config: BulkheadConfig) -> Result<(), ConfigError> {
        Handle::reconfigure(self, config)
    }

    fn revert(&self) {
        Handle::revert(self);
    }

    fn snapshot(&self) -> Snapshot {
        Handle::snapshot(self)
    }

    fn force(&self, limit: usize) -> Result<(), ConfigError> {
        Handle::force(self, limit)
    }

    fn release(&self) {
        Handle::release(self);
    }
}

/// A keyed layer is one layer to an operator: its configuration is every key's
/// (and the next keys'), `force` holds every key's limit and those of keys seen
/// while forced, `release` hands them all back, and the snapshot is the totals
/// over the keys.
impl<K> LayerHandle for KeyedHandle<K>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Config = BulkheadConfig;
    type Snapshot = KeyedSnapshot;
    /// The limit of active calls to hold every key at.
    type Forced = usize;

    fn name(&self) -> &str {
        KeyedHandle::name(self)
    }

    fn config(&self) -> BulkheadConfig {
        KeyedHandle::config(self)
    }

    fn reconfigure(&self, config: BulkheadConfig) -> Result<(), ConfigError> {
        KeyedHandle::reconfigure(self, config)
    }

    fn revert(&self) {
        KeyedHandle::revert(self);
    }

    fn snapshot(&self) -> KeyedSnapshot {
        KeyedHandle::snapshot(self)
    }

    fn force(&self, limit: usize) -> Result<(), ConfigError> {
        KeyedHandle::force(self, limit)
    }

    fn release(&self) {
        KeyedHandle::release(self);
    }
}

/// A bulkhead's demand over one period (see [`Handle::take_demand`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Demand {
    /// The most calls active at once right after an admission in the period
    /// (calls running from before, with no admission since, hold slots but do
    /// not ask for more, so they do not count).
    pub peak_active: usize,
    /// The most calls waiting at once over the period.
    pub peak_queued: usize,
    /// Calls rejected with `BulkheadFull` over the period.
    pub rejected_full: u64,
    /// The bulkhead's own limit now, without the allotment: more than this it
    /// could not use whatever it was given.
    pub own_limit: usize,
}

impl Demand {
    /// The slots the bulkhead could have used over the period: peak active plus
    /// peak waiting plus the calls turned away full, at most its own limit.
    pub fn wanted(&self) -> usize {
        let full = usize::try_from(self.rejected_full).unwrap_or(usize::MAX);
        self.peak_active
            .saturating_add(self.peak_queued)
            .saturating_add(full)
            .min(self.own_limit)
    }
}

/// A bulkhead's counts and limits at one moment (see [`Handle::snapshot`]).
///
/// Counters run since the bulkhead was built. `admitted + rejected_full +
/// rejected_timeout + shadow_rejected_full + shadow_rejected_timeout + abandoned`
/// accounts for every call once it has been decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Snapshot {
    /// The bulkhead's name.
    pub name: String,
    /// The limit of active calls in force now: the adaptive algorithm's, the
    /// operator's forced limit, or `max_concurrent`, lowered to the allotment
    /// when one is set.
    pub limit: usize,
    /// Whether an operator forced the limit ([`Handle::force`]).
    pub limit_forced: bool,
    /// The ceiling set from outside ([`Handle::set_allotment`]), e.g. this
    /// instance's share of a fleet-wide cap; `limit` is never above it.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub allotment: Option<usize>,
    /// The adaptive algorithm's state, when the bulkhead has one.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub adaptive: Option<AdaptiveSnapshot>,
    /// The configured limit of active calls (not used while adaptive).
    pub max_concurrent: usize,
    /// The configured queue: how many may wait, and for how long (see
    /// [`QueuePolicy`] for its options).
    pub queue: QueuePolicy,
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
    /// Whether the bulkhead is in shadow mode.
    pub shadow: bool,
    /// Shadow mode: calls that found every slot busy and the queue full, let
    /// through beyond the limit instead of rejected (never in `admitted`).
    pub shadow_rejected_full: u64,
    /// Shadow mode: calls that waited as long as allowed without a slot, let
    /// through beyond the limit instead of rejected (never in `admitted`).
    pub shadow_rejected_timeout: u64,
    /// Calls let through beyond the limit and still in the inner service: they
    /// hold no slot, so `active` never counts them, and `active + over_limit` is
    /// what the inner service has now.
    pub over_limit: usize,
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
