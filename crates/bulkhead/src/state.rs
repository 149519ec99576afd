//! The state one bulkhead shares between its layer, services, futures, permits and handle.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use seawall_core::{
    BoxError, BulkheadFull, BulkheadTimeout, ConfigError, Criticality, Name, RejectionKind,
};

use tokio::time::Instant;

use crate::config::BulkheadConfig;
use crate::events::{BulkheadEvent, Events};
use crate::feedback::Feedback;
use crate::queue::QueuePolicy;
use crate::queue::Shares;
use crate::semaphore::{ClassRejection, Semaphore};
use crate::telemetry::{Series, ShadowCause, Telemetry};

/// Why a bulkhead turns a call away ([`Shared::reject`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnedAway {
    /// Every slot busy and no room in the line.
    Full,
    /// Waited this long without a slot.
    TimedOut(Duration),
    /// A more critical call took its place in a full line.
    Displaced,
}

/// One bulkhead: the admission semaphore plus its name, limits and telemetry.
///
/// In this order (`repr(C)`) so that what dropping it reads, the fields with
/// something to release, sits in the first few cache lines: a keyed layer drops
/// an evicted key's bulkhead, last touched long ago, on a new key's call.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Shared {
    pub(crate) name: Name,
    /// Behind an `Arc`, so the keys of one keyed layer share one copy of what they
    /// are configured with rather than carrying 144 bytes each.
    config: Mutex<Arc<BulkheadConfig>>,
    /// `None` for a key of a keyed layer: the layer keeps what it was built with
    /// and reverts its keys itself.
    built: Option<Arc<BulkheadConfig>>,
    /// Made by the first call let through beyond the limit in shadow mode: most
    /// bulkheads (most keys of a keyed one) never are, and every key would
    /// otherwise carry 32 bytes of counters at zero.
    shadowed: OnceLock<Box<ShadowCounts>>,
    pub(crate) events: Events,
    pub(crate) feedback: Feedback,
    pub(crate) semaphore: Semaphore,
    pub(crate) telemetry: Telemetry,
    /// `rejected_full` at the last [`Shared::take_demand`].
    full_at_last_demand: AtomicU64,
    /// Shadow mode: read only where a call would be rejected.
    shadow: AtomicBool,
    /// In the body-end hold: release the slot at the response's headers instead
    /// (see `BulkheadLayer::hold_body`). Read once per response in that mode only.
    pub(crate) release_at_headers: AtomicBool,
}

/// What a shadow bulkhead let through beyond its limit.
#[derive(Debug, Default)]
struct ShadowCounts {
    /// Calls let through, by [`ShadowCause`].
    rejections: [AtomicU64; 3],
    /// Of those, the calls still holding no slot in the inner service.
    over_limit: AtomicUsize,
}

impl Shared {
    /// A bulkhead with a validated `config`.
    pub(crate) fn new(name: Name, config: BulkheadConfig, seed: Option<u64>) -> Self {
        let series = Series::named(&name);
        let config = Arc::new(config);
        Self {
            built: Some(Arc::clone(&config)),
            ..Self::reporting_to(name, &series, &config, seed)
        }
    }

    /// A bulkhead whose metrics go to `series` (a keyed layer's, or one key's)
    /// rather than to a series of its own name, sharing `shared_config` (with a
    /// keyed layer's other keys). It keeps no built configuration, as a key's
    /// layer reverts it; [`Shared::new`] adds one.
    pub(crate) fn reporting_to(
        name: Name,
        series: &Series,
        shared_config: &Arc<BulkheadConfig>,
        seed: Option<u64>,
    ) -> Self {
        let config = **shared_config;
        let feedback = Feedback::new(&config, seed);
        let telemetry = Telemetry::new(series, &config);
        telemetry.limit_in_force(feedback.limit());
        Self {
            semaphore: Semaphore::new(feedback.limit(), config.queue.max_queue),
            name,
            config: Mutex::new(Arc::clone(shared_config)),
            built: None,
            telemetry,
            feedback,
            events: Events::default(),
            full_at_last_demand: AtomicU64::new(0),
            shadow: AtomicBool::new(config.shadow),
            release_at_headers: AtomicBool::new(false),
            shadowed: OnceLock::new(),
        }
    }

    /// The queue limit in force: `max_queue`, or none while the allotment is 0
    /// (no slot can free for a waiter until a new allotment comes).
    fn queue_in_force(&self, max_queue: usize) -> usize {
        if self.feedback.allotment() == Some(0) {
            0
        } else {
            max_queue
        }
    }

    /// Sets the external ceiling over the limit (see [`Handle::set_allotment`](crate::Handle::set_allotment)).
    pub(crate) fn set_allotment(&self, allotment: Option<usize>) {
        let config = self.config.lock().unwrap_or_else(PoisonError::into_inner);
        let (before, after) = self.feedback.set_allotment(allotment, &self.events);
        let queue = self.queue_in_force(config.queue.max_queue);
        self.semaphore
            .set_limits_with(|| self.feedback.limit(), Some(queue));
        drop(config);
        if before != after {
            self.telemetry.limit_moved(&self.name, before, after);
        }
    }

    /// Demand over the period since the previous call.
    pub(crate) fn take_demand(&self) -> Demand {
        let peaks = self.semaphore.take_window_peaks();
        let full = self.semaphore.rejected_full();
        let before = self.full_at_last_demand.swap(full, Ordering::Relaxed);
        Demand {
            peak_active: peaks.active,
            peak_queued: peaks.queued,
            rejected_full: full.saturating_sub(before),
            own_limit: self.feedback.own_limit(),
        }
    }

    /// Whether a call that would be rejected now is let through instead (one
    /// relaxed load, only on the way to a rejection).
    #[inline]
    pub(crate) fn shadows(&self) -> bool {
        self.shadow.load(Ordering::Relaxed)
    }

    /// Switches shadow mode, as a change of the configuration in force.
    pub(crate) fn set_shadow(&self, shadow: bool) {
        let mut current = self.config.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::make_mut(&mut current).shadow = shadow;
        self.shadow.store(shadow, Ordering::Relaxed);
        drop(current);
        self.telemetry.shadow_switched(&self.name, shadow);
    }

    /// Counts a call let through beyond the limit (its permit holds no slot).
    #[cold]
    pub(crate) fn admit_over_limit(&self, cause: ShadowCause) {
        let counts = self.shadowed.get_or_init(Box::default);
        counts.rejections[cause as usize].fetch_add(1, Ordering::Relaxed);
        counts.over_limit.fetch_add(1, Ordering::Relaxed);
        self.telemetry.shadow_rejected(&self.name, cause);
    }

    /// A call let through beyond the limit ended (called by its permit's drop).
    pub(crate) fn release_over_limit(&self) {
        // Counted in by `admit_over_limit`, so the counters exist.
        if let Some(counts) = self.shadowed.get() {
            counts.over_limit.fetch_sub(1, Ordering::Relaxed);
        }
        self.telemetry.over_limit_released();
    }

    /// Applies the limit in force to the admission semaphore (growing hands slots to
    /// waiters; shrinking preempts nothing) and reports the change.
    pub(crate) fn apply_limit(&self, before: usize, after: usize) {
        self.semaphore
            .set_limits_with(|| self.feedback.limit(), None);
        if before != after {
            self.telemetry
                .limit_moved(&self.name, before, self.feedback.limit());
        }
    }

    /// Forces the limit of active calls to `limit` until [`Shared::release_limit`].
    pub(crate) fn force_limit(&self, limit: usize) {
        let before = self.feedback.force(limit, &self.events);
        self.telemetry.forced(&self.name, Some(limit));
        self.apply_limit(before, limit);
    }

    /// Lets the algorithm (or `max_concurrent`) set the limit again.
    pub(crate) fn release_limit(&self) {
        let (before, after) = self.feedback.release(Instant::now(), &self.events);
        self.telemetry.forced(&self.name, None);
        self.apply_limit(before, after);
    }

    /// Frees one slot (called by the permit's drop).
    #[inline]
    pub(crate) fn release_slot(&self) {
        self.semaphore.release();
        self.telemetry.released();
        if self.events.released(&self.semaphore) {
            self.telemetry.relieved(&self.name, &self.semaphore);
        }
    }

    /// Frees a slot held by a call of `class` (called by the permit's drop).
    pub(crate) fn release_classed(&self, class: Criticality) {
        self.semaphore.release_classed(class);
        self.telemetry.released();
        if self.events.released(&self.semaphore) {
            self.telemetry.relieved(&self.name, &self.semaphore);
        }
    }

    /// Frees a slot handed to a waiter of `class` that left before taking it, as
    /// [`Shared::release_handed_over`] does.
    #[cold]
    pub(crate) fn release_handed_over_classed(&self, class: Criticality) {
        self.semaphore.release_classed(class);
        if self.events.released(&self.semaphore) {
            self.telemetry.relieved(&self.name, &self.semaphore);
        }
    }

    /// Frees a slot handed to a waiter that left before taking it (never counted
    /// as active in the metrics), and passes it on as [`Shared::release_slot`] does.
    #[cold]
    pub(crate) fn release_handed_over(&self) {
        self.semaphore.release();
        if self.events.released(&self.semaphore) {
            self.telemetry.relieved(&self.name, &self.semaphore);
        }
    }

    /// Turns a call of `class` (when the layer has classes) away for `why`: counts,
    /// logs and meters it, and the first rejection since the bulkhead last had room
    /// begins a saturation (an event, and a log once the event's lock is released).
    /// Gives the error the call's future answers with, which carries the class.
    /// The one place a bulkhead call is rejected.
    #[cold]
    pub(crate) fn reject(&self, why: TurnedAway, class: Option<Criticality>) -> BoxError {
        let counted = match why {
            // The semaphore counted it full when it was displaced.
            TurnedAway::Displaced => {
                self.displaced_told(class.unwrap_or_default());
                None
            }
            TurnedAway::Full => {
                self.semaphore.count_full();
                self.telemetry.rejected_full(&self.name, &self.semaphore);
                Some(ClassRejection::Full)
            }
            TurnedAway::TimedOut(waited) => {
                self.telemetry.rejected_timeout(&self.name, waited);
                Some(ClassRejection::Timeout)
            }
        };
        if let (Some(class), Some(why)) = (class, counted) {
            self.semaphore.count_class_rejection(class, why);
            self.telemetry.class_rejected(&self.name, class, why);
        }
        let (kind, error): (_, BoxError) = match why {
            TurnedAway::Full | TurnedAway::Displaced => {
                let now = self.semaphore.counts();
                let mut full = BulkheadFull::named(&self.name).with_load(now.active, now.queued);
                if let Some(class) = class {
                    full = full.with_criticality(class);
                }
                if why == TurnedAway::Displaced {
                    full = full.displaced();
                }
                (RejectionKind::BulkheadFull, Box::new(full))
            }
            TurnedAway::TimedOut(waited) => {
                let mut timeout = BulkheadTimeout::new(self.name.clone(), waited);
                if let Some(class) = class {
                    timeout = timeout.with_criticality(class);
                }
                (RejectionKind::BulkheadTimeout, Box::new(timeout))
            }
        };
        if self.events.rejected(kind, &self.semaphore) {
            self.telemetry.saturated(&self.name, kind, &self.semaphore);
        }
        error
    }

    /// Meters and logs a displaced waiter of `class` once its caller learns it (or
    /// drops its future): the semaphore counted it when it was displaced.
    #[cold]
    pub(crate) fn displaced_told(&self, class: Criticality) {
        self.telemetry.rejected_full(&self.name, &self.semaphore);
        self.telemetry
            .class_rejected(&self.name, class, ClassRejection::Displaced);
    }

    /// The queue's bounds in force: the configured policy, with no room in the
    /// line while the allotment is 0. Read only by a call that may have to wait
    /// (it takes the configuration's lock, briefly, before the line's).
    pub(crate) fn queue_policy(&self) -> QueuePolicy {
        let configured = self
            .config
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .queue;
        QueuePolicy {
            max_queue: self.semaphore.max_queue(),
            ..configured
        }
    }

    /// The current limits.
    pub(crate) fn config(&self) -> BulkheadConfig {
        **self.config.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The limits the bulkhead was built with (a keyed layer's key: the limits now).
    pub(crate) fn built(&self) -> BulkheadConfig {
        self.built
            .as_deref()
            .map_or_else(|| self.config(), |built| *built)
    }

    /// Validates and applies `new`, keeping every running call and waiter.
    pub(crate) fn reconfigure(&self, new: BulkheadConfig) -> Result<(), ConfigError> {
        self.reconfigure_to(&Arc::new(new))
    }

    /// As [`Shared::reconfigure`], sharing `shared_config` (a keyed layer applies one
    /// to every key).
    pub(crate) fn reconfigure_to(
        &self,
        shared_config: &Arc<BulkheadConfig>,
    ) -> Result<(), ConfigError> {
        let new = **shared_config;
        new.validate()?;
        let (old, before) = {
            let mut current = self.config.lock().unwrap_or_else(PoisonError::into_inner);
            let old = **current;
            *current = Arc::clone(shared_config);
            if old != new {
                // Under the configuration's lock: before the limit change it causes.
                self.events.send(|| BulkheadEvent::Reconfigured {
                    from: Box::new(old),
                    to: Box::new(new),
                    at: Instant::now(),
                });
            }
            self.shadow.store(new.shadow, Ordering::Relaxed);
            let before = self.feedback.limit();
            self.feedback
                .reconfigure(&new, Instant::now(), &self.events);
            let queue = self.queue_in_force(new.queue.max_queue);
            self.semaphore
                .set_limits_with(|| self.feedback.limit(), Some(queue));
            if old.queue.shares != new.queue.shares {
                self.semaphore.set_shares(new.queue.shares);
            }
            (old, before)
        };
        self.telemetry.reconfigured(&self.name, &old, &new);
        if before != self.feedback.limit() {
            self.telemetry.limit_in_force(self.feedback.limit());
        }
        Ok(())
    }

    /// Counts and states now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let config = self.config();
        let counts = self.semaphore.counts();
        let peaks = self.semaphore.peaks();
        let admitted = self.semaphore.admitted();
        let waits = self.semaphore.waits().summary(admitted);
        let view = self.feedback.view();
        let shadowed = self.shadowed.get();
        let shadow_rejected = |cause: ShadowCause| {
            shadowed.map_or(0, |c| c.rejections[cause as usize].load(Ordering::Relaxed))
        };
        Snapshot {
            name: self.name.to_string(),
            limit: self.semaphore.max_concurrent(),
            limit_forced: view.forced,
            allotment: self.feedback.allotment(),
            adaptive: view.algorithm.map(|algorithm| AdaptiveSnapshot {
                algorithm,
                generation: view.generation,
                min_rtt: view.min_rtt,
                measuring_min_rtt: view.measuring,
            }),
            max_concurrent: config.max_concurrent,
            queue: config.queue,
            active: counts.active,
            queued: counts.queued,
            saturated: self.events.is_saturated(),
            peak_active: peaks.active,
            peak_queued: peaks.queued,
            admitted,
            rejected_full: self.semaphore.rejected_full(),
            rejected_timeout: self.semaphore.rejected_timeout(),
            abandoned: self.semaphore.abandoned(),
            shadow: config.shadow,
            shadow_rejected_full: shadow_rejected(ShadowCause::Full),
            shadow_rejected_timeout: shadow_rejected(ShadowCause::Timeout),
            over_limit: shadowed.map_or(0, |c| c.over_limit.load(Ordering::Relaxed)),
            wait: WaitStats {
                p50: waits.p50,
                p99: waits.p99,
                max: waits.max,
                queued_admissions: waits.queued_admissions,
            },
            classes: self.class_snapshots(config.queue.shares),
            standing: self.semaphore.stands(),
        }
    }

    /// Each class's counts, once a call with a class has come.
    fn class_snapshots(&self, shares: Shares) -> Vec<ClassSnapshot> {
        let limit = self.semaphore.max_concurrent();
        let Some(stats) = self.semaphore.class_stats() else {
            return Vec::new();
        };
        Criticality::ALL
            .into_iter()
            .zip(stats)
            .map(|(criticality, s)| ClassSnapshot {
                criticality,
                slots: shares.cap(criticality, limit),
                active: s.active,
                queued: s.queued,
                rejected_full: s.rejected[ClassRejection::Full as usize],
                displaced: s.rejected[ClassRejection::Displaced as usize],
                rejected_timeout: s.rejected[ClassRejection::Timeout as usize],
            })
            .collect()
    }
}

/// One class's counts in a bulkhead with classes (see [`Snapshot::classes`]).
///
/// `rejected_full` and `displaced` are both counted in the bulkhead's
/// `rejected_full`, and `rejected_timeout` in its `rejected_timeout`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ClassSnapshot {
    /// The class.
    pub criticality: Criticality,
    /// The most slots it may hold now: its share of the limit in force.
    pub slots: usize,
    /// Slots it holds now (may exceed `slots` just after the limit fell).
    pub active: usize,
    /// Its calls waiting in its line now.
    pub queued: usize,
    /// Its calls turned away at once: no slot, no room in the line, nobody less
    /// critical to displace.
    pub rejected_full: u64,
    /// Its waiters whose place a more critical call took.
    pub displaced: u64,
    /// Its waiters that got no slot within their wait.
    pub rejected_timeout: u64,
}

/// A bulkhead's demand over one period (see [`Handle::take_demand`](crate::Handle::take_demand)).
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

/// A bulkhead's counts and limits at one moment (see
/// [`Handle::snapshot`](crate::Handle::snapshot)).
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
    /// Whether an operator forced the limit ([`Handle::force`](crate::Handle::force)).
    pub limit_forced: bool,
    /// The ceiling set from outside
    /// ([`Handle::set_allotment`](crate::Handle::set_allotment)), e.g. this instance's
    /// share of a fleet-wide cap; `limit` is never above it.
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
    /// [`Handle::reset_peaks`](crate::Handle::reset_peaks) was called, recorded at every
    /// change (not sampled).
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
    /// With classes, each class's share and counts, most critical first; empty
    /// until the first call with a class (see
    /// [`BulkheadLayer::criticality`](crate::BulkheadLayer::criticality)).
    pub classes: Vec<ClassSnapshot>,
    /// With a controlled delay: the line stands now (it has not been empty for
    /// longer than the delay's interval), so newcomers wait at most its `target`
    /// and, with `lifo`, a freed slot goes to the newest waiter (see
    /// [`ControlledDelay`](crate::queue::ControlledDelay)). `false` otherwise:
    /// the normal wait, first in, first out.
    pub standing: bool,
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

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::Shared;

    #[test]
    fn a_bulkhead_is_the_size_its_keyed_footprint_is_measured_at() {
        // Every key of a keyed layer is one of these (plus the `Arc`'s 16 bytes): no
        // wait queue or histogram until a call waits, no shadow counters until a
        // call is let through beyond the limit, no copy of the configuration, no
        // algorithm inline. 376 bytes in all, under six cache lines, in the
        // allocator's per-thread cache (a 1,112-byte one was not); the `metrics`
        // feature's series handles add 24.
        let telemetry = if cfg!(feature = "metrics") { 24 } else { 0 };
        assert_eq!(std::mem::size_of::<Shared>(), 360 + telemetry);
    }
}
