//! What a bulkhead tells its subscribers: see [`BulkheadEvent`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use seawall_core::RejectionKind;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::config::BulkheadConfig;
use crate::semaphore::Semaphore;

/// Events buffered for a slow subscriber before it lags.
const SUBSCRIBER_BUFFER: usize = 64;

/// Something that changed in a bulkhead, for [`Handle::subscribe`](crate::Handle::subscribe).
///
/// A bulkhead tells its subscribers of changes of its condition, never of calls.
///
/// A bulkhead under load admits, queues and rejects calls by the thousand; an
/// event per call would cost the hot path a send and drown a subscriber in what
/// the counters already say. So every [`BulkheadEvent`] is **edge-triggered**: it
/// reports that something changed, and nothing is sent again until it changes
/// back.
///
/// - [`Saturated`](Self::Saturated): the bulkhead turned a call away
///   (full, or a wait that ran out) for the first time since it last had room.
///   Further rejections send nothing; they are counted in the snapshot.
/// - [`Relieved`](Self::Relieved): after being saturated, nobody waits and
///   at most half the limit is in use. Half, not "one slot free": a bulkhead
///   working at its limit frees and fills a slot with every call, and would
///   otherwise announce "saturated, relieved" once per call.
/// - [`LimitChanged`](Self::LimitChanged): the limit of active calls in
///   force moved, with its [`LimitCause`]. An adaptive algorithm moves it on its
///   own schedule, never per call: AIMD grows by one at most once per round trip
///   and shrinks once per generation (one overloaded round trip); a gradient
///   updates at most once per `window` (250 ms by default), shrinks once per
///   generation, and lowers and restores the limit around each baseline
///   measurement. An operator's force or release is always reported, even at the limit
///   already in force: the force itself is the news.
/// - [`Reconfigured`](Self::Reconfigured): new limits from
///   [`Handle::reconfigure`](crate::Handle::reconfigure) or
///   [`revert`](crate::Handle::revert), before the `LimitChanged` they cause.
///
/// A wait that timed out is not an event of its own: it is one call (counted in
/// `rejected_timeout`), and the first of a spell of them is a `Saturated`.
///
/// Each kind of change is decided and handed to the channel under the small lock
/// that orders it (the saturation flag's, or the limit algorithm's), so
/// subscribers see changes of one kind in the order they were made. A broadcast
/// send runs no user code; the `tracing` event that goes with a change is
/// emitted after every lock is released, so a subscriber there may read the
/// bulkhead's snapshot or steer it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BulkheadEvent {
    /// The bulkhead turned its first call away since it last had room.
    Saturated {
        /// How that call was turned away: [`RejectionKind::BulkheadFull`] or
        /// [`RejectionKind::BulkheadTimeout`].
        rejection: RejectionKind,
        /// Calls holding a slot then.
        active: usize,
        /// Calls waiting then.
        queued: usize,
        /// When.
        at: Instant,
    },
    /// After being saturated, nobody waits and at most half the limit is in use.
    Relieved {
        /// Calls holding a slot then.
        active: usize,
        /// The limit in force then.
        limit: usize,
        /// When.
        at: Instant,
    },
    /// The limit of active calls in force changed.
    LimitChanged {
        /// The limit before.
        from: usize,
        /// The limit now.
        to: usize,
        /// What changed it.
        cause: LimitCause,
        /// When.
        at: Instant,
    },
    /// New limits were applied ([`Handle::reconfigure`](crate::Handle::reconfigure)
    /// or [`Handle::revert`](crate::Handle::revert)).
    Reconfigured {
        /// The limits before (boxed: a configuration is large beside the other events).
        from: Box<BulkheadConfig>,
        /// The limits now.
        to: Box<BulkheadConfig>,
        /// When.
        at: Instant,
    },
}

/// What moved a bulkhead's limit ([`BulkheadEvent::LimitChanged`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum LimitCause {
    /// The adaptive algorithm learned from the calls.
    Adaptive,
    /// An operator forced it ([`Handle::force`](crate::Handle::force)).
    Forced,
    /// An operator released a forced limit ([`Handle::release`](crate::Handle::release)).
    Released,
    /// New limits ([`Handle::reconfigure`](crate::Handle::reconfigure) or
    /// [`Handle::revert`](crate::Handle::revert)).
    Reconfigured,
    /// An external ceiling moved ([`Handle::set_allotment`](crate::Handle::set_allotment)):
    /// this instance's share of a fleet-wide cap.
    Allotment,
}

impl LimitCause {
    /// The cause in `snake_case`, as logs and the admin API spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Adaptive => "adaptive",
            Self::Forced => "forced",
            Self::Released => "released",
            Self::Reconfigured => "reconfigured",
            Self::Allotment => "allotment",
        }
    }
}

impl std::fmt::Display for LimitCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A bulkhead's subscribers and its saturation edge.
#[derive(Debug, Default)]
pub(crate) struct Events {
    /// Mirrors `edge` for a lock-free look from the release path.
    saturated: AtomicBool,
    /// Whether the bulkhead is saturated; changed, and the change sent, under it.
    edge: Mutex<bool>,
    sender: OnceLock<broadcast::Sender<BulkheadEvent>>,
}

impl Events {
    /// Events from now on (the channel is created by the first call).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<BulkheadEvent> {
        self.sender
            .get_or_init(|| broadcast::channel(SUBSCRIBER_BUFFER).0)
            .subscribe()
    }

    /// Hands `event` to the subscribers, if there are any (built only then).
    pub(crate) fn send(&self, event: impl FnOnce() -> BulkheadEvent) {
        if let Some(tx) = self.sender.get() {
            // No receiver is not an error: subscribers come and go.
            let _ = tx.send(event());
        }
    }

    /// A call was turned away by `rejection`: whether this began a saturation
    /// (and was sent). One relaxed load once saturated.
    pub(crate) fn rejected(&self, rejection: RejectionKind, semaphore: &Semaphore) -> bool {
        if self.saturated.load(Ordering::Relaxed) {
            return false;
        }
        let mut edge = self.edge.lock().unwrap_or_else(PoisonError::into_inner);
        if *edge {
            return false;
        }
        *edge = true;
        self.saturated.store(true, Ordering::Relaxed);
        let counts = semaphore.counts();
        self.send(|| BulkheadEvent::Saturated {
            rejection,
            active: counts.active,
            queued: counts.queued,
            at: Instant::now(),
        });
        true
    }

    /// A slot was freed: if saturated and now drained (nobody waiting, at most
    /// half the limit in use), the saturation ends. Whether it did (and was sent).
    /// One relaxed load unless saturated.
    #[inline]
    pub(crate) fn released(&self, semaphore: &Semaphore) -> bool {
        if !self.saturated.load(Ordering::Relaxed) {
            return false;
        }
        self.relieve(semaphore)
    }

    #[cold]
    fn relieve(&self, semaphore: &Semaphore) -> bool {
        let drained = |m: &Semaphore| {
            let counts = m.counts();
            let limit = m.max_concurrent();
            (counts.queued == 0 && counts.active * 2 <= limit).then_some((counts.active, limit))
        };
        if drained(semaphore).is_none() {
            return false;
        }
        let mut edge = self.edge.lock().unwrap_or_else(PoisonError::into_inner);
        // Looked at again under the lock: a rejection may have come in between.
        let Some((active, limit)) = drained(semaphore).filter(|_| *edge) else {
            return false;
        };
        *edge = false;
        self.saturated.store(false, Ordering::Relaxed);
        self.send(|| BulkheadEvent::Relieved {
            active,
            limit,
            at: Instant::now(),
        });
        true
    }

    /// Whether the bulkhead is saturated now.
    pub(crate) fn is_saturated(&self) -> bool {
        self.saturated.load(Ordering::Relaxed)
    }
}
