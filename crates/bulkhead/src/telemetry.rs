//! The only place with `cfg(feature = "tracing")` and `cfg(feature = "metrics")`.
//!
//! Metrics (feature `metrics`), all labelled with the bulkhead's `name` (a keyed
//! layer's own name for all its keys, plus a `key` label if it opted into per-key
//! series; see [`Series`]):
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `seawall_bulkhead_active` | gauge | calls holding a slot |
//! | `seawall_bulkhead_queued` | gauge | calls waiting for a slot |
//! | `seawall_bulkhead_max_concurrent` | gauge | the configured limit (`max_concurrent`) |
//! | `seawall_bulkhead_limit` | gauge | the limit in force (adaptive, forced, or `max_concurrent`), summed over the bulkheads of the series, as `active` is |
//! | `seawall_bulkhead_admitted_total` | counter | calls admitted |
//! | `seawall_bulkhead_rejected_total{cause="full"}` | counter | turned away, queue full |
//! | `seawall_bulkhead_rejected_total{cause="timeout"}` | counter | waited as long as allowed |
//! | `seawall_bulkhead_rejected_total{cause="keys"}` | counter | keyed: new key while every key was busy |
//! | `seawall_bulkhead_abandoned_total` | counter | callers that gave up while waiting in line |
//! | `seawall_bulkhead_wait_seconds` | histogram | admission wait (0 for immediate admissions) |
//! | `seawall_bulkhead_shadow_rejections_total{cause}` | counter | shadow mode: let through beyond the limit instead of rejected (`full`, `timeout`, `keys`) |
//! | `seawall_bulkhead_over_limit` | gauge | shadow mode: calls let through beyond the limit, still running |
//!
//! `seawall_bulkhead_limit` has one meaning everywhere: the limits in force of the
//! bulkheads reporting to the series, summed, to read against
//! `seawall_bulkhead_active`, which is their sum too. For one bulkhead (or a
//! per-key series) that is its own limit; in a keyed layer's shared series each
//! live key adds its own limit, moves it, and takes it out when forgotten, whether
//! the limit is fixed or adaptive. `seawall_bulkhead_max_concurrent` stays the
//! configured limit of one bulkhead (of each key).
//!
//! Every call handed to a bulkhead ends in exactly one of admitted, rejected (by
//! cause), shadow-rejected (by cause) or abandoned, or is still queued; each
//! admitted call records one wait.
//!
//! The handles are registered once, when the bulkhead (a keyed layer: the layer) is
//! built, with the recorder installed at that time; a call then costs a few dynamic
//! calls, no allocation. A keyed layer's bulkheads share its series, so they add up
//! and a new key registers nothing.
//!
//! Tracing (feature `tracing`, target `seawall::bulkhead`): a `debug` event for each
//! rejection (full, timeout), an `info` event for each change of limits and each
//! force or release of the limit, a `debug` event each time an adaptive
//! algorithm moves the limit, and, edge-triggered as the
//! [`BulkheadEvent`](crate::BulkheadEvent)s are, a `warn` event when the bulkhead
//! becomes saturated and an `info` event when it is relieved.

use std::time::Duration;

use seawall_core::{Criticality, Name};

use crate::config::BulkheadConfig;
use crate::semaphore::{ClassRejection, Semaphore};

/// Why a shadow bulkhead let a call through beyond its limit: the rejection it
/// would have made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShadowCause {
    /// Every slot busy and the queue full (or no queue).
    Full = 0,
    /// No slot within `max_wait` or the request's deadline.
    Timeout = 1,
    /// A keyed bulkhead had no room for a new key.
    Keys = 2,
}

/// The series bulkheads report to: the layer's `name`, and a `key` label for the
/// keys of a keyed layer that opted into per-key series. The handles are registered
/// once, when the series is made, and shared by every bulkhead reporting to it: by
/// default all the bulkheads of a keyed layer share its series, so a new key
/// registers nothing.
#[derive(Debug)]
pub(crate) struct Series {
    #[cfg(feature = "metrics")]
    handles: std::sync::Arc<Metrics>,
    /// The bulkheads' limits add up in `seawall_bulkhead_limit` (a keyed layer's
    /// shared series), instead of each setting it.
    #[cfg(feature = "metrics")]
    summed_limits: bool,
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

    /// Sets the fixed limit of active calls the series reports, configured and in
    /// force (a keyed layer's; each bulkhead sets them again when built or
    /// reconfigured). A series whose limits add up reports only the configured one:
    /// its keys add their limits in force themselves.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn limit(&self, max_concurrent: usize) {
        #[cfg(feature = "metrics")]
        {
            self.handles.max_concurrent.set(max_concurrent as f64);
            if !self.summed_limits {
                self.handles.limit.set(max_concurrent as f64);
            }
        }
    }

    /// The same series, with the bulkheads' limits in force adding up in
    /// `seawall_bulkhead_limit` (starting from none), as their active calls do.
    #[must_use]
    pub(crate) fn summing_limits(self) -> Self {
        #[cfg(feature = "metrics")]
        {
            self.handles.limit.set(0.0);
            Self {
                summed_limits: true,
                ..self
            }
        }
        #[cfg(not(feature = "metrics"))]
        self
    }

    #[cfg_attr(
        not(feature = "metrics"),
        allow(unused_variables, clippy::needless_pass_by_value)
    )]
    fn with_labels(name: &Name, key: Option<String>) -> Self {
        #[cfg(feature = "metrics")]
        {
            let mut base = vec![metrics::Label::new("name", name.clone())];
            if let Some(key) = key {
                base.push(metrics::Label::new("key", key));
            }
            let labels = |extra: &[(&'static str, &'static str)]| {
                let mut all = base.clone();
                all.extend(extra.iter().map(|&(k, v)| metrics::Label::new(k, v)));
                all
            };
            let m = Metrics {
                active: metrics::gauge!("seawall_bulkhead_active", labels(&[])),
                queued: metrics::gauge!("seawall_bulkhead_queued", labels(&[])),
                max_concurrent: metrics::gauge!("seawall_bulkhead_max_concurrent", labels(&[])),
                limit: metrics::gauge!("seawall_bulkhead_limit", labels(&[])),
                admitted: metrics::counter!("seawall_bulkhead_admitted_total", labels(&[])),
                rejected_full: metrics::counter!(
                    "seawall_bulkhead_rejected_total",
                    labels(&[("cause", "full")])
                ),
                rejected_timeout: metrics::counter!(
                    "seawall_bulkhead_rejected_total",
                    labels(&[("cause", "timeout")])
                ),
                abandoned: metrics::counter!("seawall_bulkhead_abandoned_total", labels(&[])),
                shadow: [
                    metrics::counter!(
                        "seawall_bulkhead_shadow_rejections_total",
                        labels(&[("cause", "full")])
                    ),
                    metrics::counter!(
                        "seawall_bulkhead_shadow_rejections_total",
                        labels(&[("cause", "timeout")])
                    ),
                    metrics::counter!(
                        "seawall_bulkhead_shadow_rejections_total",
                        labels(&[("cause", "keys")])
                    ),
                ],
                over_limit: metrics::gauge!("seawall_bulkhead_over_limit", labels(&[])),
                wait: metrics::histogram!("seawall_bulkhead_wait_seconds", labels(&[])),
            };
            Self {
                handles: std::sync::Arc::new(m),
                summed_limits: false,
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }
}

/// One bulkhead's metric handles, shared with its series (empty without the
/// `metrics` feature).
#[derive(Debug)]
pub(crate) struct Telemetry {
    #[cfg(feature = "metrics")]
    m: std::sync::Arc<Metrics>,
    /// In a series whose limits add up: the limit this bulkhead added.
    #[cfg(feature = "metrics")]
    added_limit: Option<std::sync::atomic::AtomicUsize>,
}

#[cfg(feature = "metrics")]
impl Drop for Telemetry {
    /// A dropped bulkhead (an evicted key) takes its limit out of the sum.
    fn drop(&mut self) {
        if let Some(added) = &mut self.added_limit {
            self.m.limit.decrement(*added.get_mut() as f64);
        }
    }
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct Metrics {
    active: metrics::Gauge,
    queued: metrics::Gauge,
    max_concurrent: metrics::Gauge,
    limit: metrics::Gauge,
    admitted: metrics::Counter,
    rejected_full: metrics::Counter,
    rejected_timeout: metrics::Counter,
    abandoned: metrics::Counter,
    /// By `ShadowCause`.
    shadow: [metrics::Counter; 3],
    over_limit: metrics::Gauge,
    wait: metrics::Histogram,
}

/// Upper bounds of the `seawall_bulkhead_wait_seconds` buckets, for an exporter that
/// needs them to export a histogram (`le="0"` counts the immediate admissions).
pub const WAIT_SECONDS_BUCKETS: &[f64] = &[
    0.0, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Gives the bulkhead's metrics their help text and unit.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    use metrics::Unit;
    metrics::describe_gauge!(
        "seawall_bulkhead_active",
        Unit::Count,
        "Calls holding a bulkhead slot now."
    );
    metrics::describe_gauge!(
        "seawall_bulkhead_queued",
        Unit::Count,
        "Calls waiting in line for a bulkhead slot now."
    );
    metrics::describe_gauge!(
        "seawall_bulkhead_max_concurrent",
        Unit::Count,
        "The configured fixed limit of active calls (not used while the bulkhead is adaptive)."
    );
    metrics::describe_gauge!(
        "seawall_bulkhead_limit",
        Unit::Count,
        "The limit of active calls in force (an adaptive algorithm's, an operator's forced limit, or max_concurrent), summed over the keys of a keyed layer as active is."
    );
    metrics::describe_counter!(
        "seawall_bulkhead_admitted_total",
        Unit::Count,
        "Calls given a slot, at once or after waiting."
    );
    metrics::describe_counter!(
        "seawall_bulkhead_rejected_total",
        Unit::Count,
        "Capacity rejections by cause: full (every slot busy, the queue full), timeout (waited max_wait or until the deadline), keys (a keyed bulkhead had no room for a new key)."
    );
    metrics::describe_counter!(
        "seawall_bulkhead_class_rejected_total",
        Unit::Count,
        "With classes: rejections by class (critical, default, sheddable) and cause: full (no slot, no room, nobody less critical to displace), displaced (a more critical call took its place in line), timeout; also counted in rejected_total (displaced as full)."
    );
    metrics::describe_counter!(
        "seawall_bulkhead_abandoned_total",
        Unit::Count,
        "Calls whose caller gave up while they waited in line (the future was dropped)."
    );
    metrics::describe_counter!(
        "seawall_bulkhead_shadow_rejections_total",
        Unit::Count,
        "Shadow mode: calls the bulkhead would have rejected (full, timeout, keys) and let through beyond its limit instead; never counted in admitted_total."
    );
    metrics::describe_gauge!(
        "seawall_bulkhead_over_limit",
        Unit::Count,
        "Shadow mode: calls let through beyond the limit that are still running (they hold no slot, so active does not count them)."
    );
    metrics::describe_histogram!(
        "seawall_bulkhead_wait_seconds",
        Unit::Seconds,
        "Time admitted calls waited for a slot (0 for immediate admissions)."
    );
}

impl Telemetry {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(series: &Series, config: &BulkheadConfig) -> Self {
        #[cfg(feature = "metrics")]
        {
            let m = std::sync::Arc::clone(&series.handles);
            m.max_concurrent.set(config.max_concurrent as f64);
            let added_limit = series
                .summed_limits
                .then(|| std::sync::atomic::AtomicUsize::new(0));
            Self { m, added_limit }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }

    /// A call got a slot after waiting `waited` (zero when admitted at once).
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn admitted(&self, waited: Duration) {
        #[cfg(feature = "metrics")]
        {
            self.m.admitted.increment(1);
            self.m.active.increment(1.0);
            self.m.wait.record(waited.as_secs_f64());
        }
    }

    /// A slot was released.
    #[inline]
    pub(crate) fn released(&self) {
        #[cfg(feature = "metrics")]
        self.m.active.decrement(1.0);
    }

    /// A call joined the queue.
    pub(crate) fn enqueued(&self) {
        #[cfg(feature = "metrics")]
        self.m.queued.increment(1.0);
    }

    /// A call left the queue (admitted, timed out or abandoned).
    pub(crate) fn dequeued(&self) {
        #[cfg(feature = "metrics")]
        self.m.queued.decrement(1.0);
    }

    /// A caller gave up while in line (its future was dropped before it got a slot).
    pub(crate) fn abandoned(&self) {
        #[cfg(feature = "metrics")]
        {
            self.m.queued.decrement(1.0);
            self.m.abandoned.increment(1);
        }
    }

    /// A call was turned away because every slot was busy and the queue full.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn rejected_full(&self, name: &str, semaphore: &Semaphore) {
        #[cfg(feature = "tracing")]
        if tracing::enabled!(target: "seawall::bulkhead", tracing::Level::DEBUG) {
            let counts = semaphore.counts();
            tracing::debug!(
                target: "seawall::bulkhead",
                bulkhead = name,
                active = counts.active,
                queued = counts.queued,
                "bulkhead full; call rejected"
            );
        }
        #[cfg(feature = "metrics")]
        self.m.rejected_full.increment(1);
    }

    /// A call of `class` was turned away for `why` (a bulkhead with classes):
    /// a series per class and cause, made at its first use.
    #[cold]
    #[cfg_attr(
        not(any(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    pub(crate) fn class_rejected(&self, name: &str, class: Criticality, why: ClassRejection) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            target: "seawall::bulkhead",
            bulkhead = name,
            class = class.as_str(),
            cause = why.as_str(),
            "call with a class rejected"
        );
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "seawall_bulkhead_class_rejected_total",
            "name" => name.to_owned(),
            "class" => class.as_str(),
            "cause" => why.as_str()
        )
        .increment(1);
    }

    /// A waiter left after waiting `waited` without getting a slot.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn rejected_timeout(&self, name: &str, waited: Duration) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            target: "seawall::bulkhead",
            bulkhead = name,
            waited_ms = waited.as_secs_f64() * 1000.0,
            "no bulkhead slot in time; call rejected"
        );
        #[cfg(feature = "metrics")]
        self.m.rejected_timeout.increment(1);
    }

    /// A call the bulkhead would have rejected for `cause` was let through
    /// beyond the limit (shadow mode).
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn shadow_rejected(&self, name: &str, cause: ShadowCause) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            target: "seawall::bulkhead",
            bulkhead = name,
            cause = match cause {
                ShadowCause::Full => "full",
                ShadowCause::Timeout => "timeout",
                ShadowCause::Keys => "keys",
            },
            "call let through beyond the limit in shadow mode: the bulkhead would have rejected it"
        );
        #[cfg(feature = "metrics")]
        {
            if let Some(counter) = self.m.shadow.get(cause as usize) {
                counter.increment(1);
            }
            self.m.over_limit.increment(1.0);
        }
    }

    /// A call let through beyond the limit ended.
    pub(crate) fn over_limit_released(&self) {
        #[cfg(feature = "metrics")]
        self.m.over_limit.decrement(1.0);
    }

    /// An operator switched shadow mode.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn shadow_switched(&self, name: &str, shadow: bool) {
        #[cfg(feature = "tracing")]
        tracing::info!(
            target: "seawall::bulkhead",
            bulkhead = name,
            shadow,
            "bulkhead shadow mode switched"
        );
    }

    /// The limits changed from `old` to `new`.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn reconfigured(&self, name: &str, old: &BulkheadConfig, new: &BulkheadConfig) {
        #[cfg(feature = "tracing")]
        tracing::info!(
            target: "seawall::bulkhead",
            bulkhead = name,
            max_concurrent = new.max_concurrent,
            queue = ?new.queue,
            old_max_concurrent = old.max_concurrent,
            old_queue = ?old.queue,
            "bulkhead limits changed"
        );
        #[cfg(feature = "metrics")]
        self.m.max_concurrent.set(new.max_concurrent as f64);
    }
}

impl Telemetry {
    /// The limit in force is now `limit` (set when the bulkhead is built, and
    /// after a reconfiguration, which has its own event).
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn limit_in_force(&self, limit: usize) {
        #[cfg(feature = "metrics")]
        match &self.added_limit {
            None => self.m.limit.set(limit as f64),
            Some(added) => {
                let before = added.swap(limit, std::sync::atomic::Ordering::Relaxed);
                self.m.limit.increment(limit as f64 - before as f64);
            }
        }
    }

    /// The algorithm (or an operator's force) moved the limit from `before` to `after`.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn limit_moved(&self, name: &str, before: usize, after: usize) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            target: "seawall::bulkhead",
            bulkhead = name,
            limit = after,
            old_limit = before,
            "bulkhead limit moved"
        );
        self.limit_in_force(after);
    }

    /// An operator forced the limit to `limit`, or released it (`None`).
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn forced(&self, name: &str, limit: Option<usize>) {
        #[cfg(feature = "tracing")]
        match limit {
            Some(limit) => tracing::info!(
                target: "seawall::bulkhead",
                bulkhead = name,
                limit,
                "bulkhead limit forced by an operator"
            ),
            None => tracing::info!(
                target: "seawall::bulkhead",
                bulkhead = name,
                "bulkhead limit released"
            ),
        }
    }
}

impl Telemetry {
    /// The bulkhead began turning calls away (see [`BulkheadEvent::Saturated`](crate::BulkheadEvent::Saturated)).
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn saturated(
        &self,
        name: &str,
        rejection: seawall_core::RejectionKind,
        semaphore: &Semaphore,
    ) {
        #[cfg(feature = "tracing")]
        {
            let counts = semaphore.counts();
            tracing::warn!(
                target: "seawall::bulkhead",
                bulkhead = name,
                rejection = rejection.as_str(),
                active = counts.active,
                queued = counts.queued,
                "bulkhead saturated: turning calls away"
            );
        }
    }

    /// The bulkhead has room again after being saturated.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn relieved(&self, name: &str, semaphore: &Semaphore) {
        #[cfg(feature = "tracing")]
        tracing::info!(
            target: "seawall::bulkhead",
            bulkhead = name,
            active = semaphore.counts().active,
            limit = semaphore.max_concurrent(),
            "bulkhead relieved: room again"
        );
    }
}

/// Metric handles of a keyed bulkhead's own events (empty without `metrics`).
#[derive(Debug)]
pub(crate) struct KeyedTelemetry {
    #[cfg(feature = "metrics")]
    rejected_keys: metrics::Counter,
}

impl KeyedTelemetry {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(name: &seawall_core::Name) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            rejected_keys: metrics::counter!(
                "seawall_bulkhead_rejected_total",
                "name" => metrics::SharedString::from(name.clone()),
                "cause" => "keys"
            ),
        }
    }

    /// A call with a new key was rejected: `max_keys` keys were all busy.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn key_limit(&self, name: &str, max_keys: usize) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            target: "seawall::bulkhead",
            bulkhead = name,
            max_keys,
            "every key of the keyed bulkhead is busy; call with a new key rejected"
        );
        #[cfg(feature = "metrics")]
        self.rejected_keys.increment(1);
    }
}
