//! The operator's view and controls of one bulkhead.

use std::fmt;
use std::sync::Arc;

use seawall_core::{layer_handle_by_inherent_methods, ConfigError};
use tokio::sync::broadcast;

use crate::config::BulkheadConfig;
use crate::events::BulkheadEvent;
use crate::queue::MAX_LIMIT;
use crate::state::{Demand, Shared, Snapshot};

/// Observes and controls one bulkhead. Cheap to clone; all clones see the same bulkhead.
///
/// Its name, configuration, snapshot and operator verbs are those of every seawall
/// layer's handle ([`LayerHandle`](seawall_core::LayerHandle), implemented by delegating to the methods here).
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

layer_handle_by_inherent_methods!(Handle {
    Config = BulkheadConfig,
    Snapshot = Snapshot,
    /// The limit of active calls to force.
    Forced = usize,
    force = |handle, forced| handle.force(forced),
});
