//! Limit algorithms: a bulkhead that finds its own limit of active calls.
//!
//! A fixed `max_concurrent` is wrong twice: set too high, the supplier's own queue
//! hides in our latency; set too low, healthy capacity is refused. An adaptive
//! bulkhead keeps everything else (the bounded, timed FIFO queue, the deadline
//! bound, the typed rejections, the permit held until the work ends) and lets an
//! algorithm move the limit from what the calls it admitted say.
//!
//! Each algorithm here is a plain machine, like the bulkhead's queue policy: no clock, no
//! I/O. Feed it [`Sample`]s with the time they were taken and read the limit back
//! ([`LimitAlgorithm`]). The bulkhead does that from each response future: the
//! call's outcome, classified once as overloaded, served or no evidence (see
//! [`OverloadStatus`](seawall_core::OverloadStatus)), and, for one admitted call
//! in [`sample_every`](AimdConfig::sample_every), its latency from admission to
//! completion (the other calls read no clock).
//!
//! # Which algorithm
//!
//! - [`Aimd`] (additive increase, multiplicative decrease): grows by one call per
//!   round trip while calls are served, shrinks by [`backoff`](AimdConfig::backoff)
//!   on each overload signal: a `429`, a `503`, gRPC `RESOURCE_EXHAUSTED`, a
//!   timeout, or a measured latency above [`timeout`](AimdConfig::timeout).
//!   Choose it when the supplier **says** it is overloaded (it sheds load with
//!   429/503), or when you know the latency it should have: its `timeout` is that
//!   number. It needs no baseline and is simple to reason about in an incident. A
//!   supplier that queues quietly instead of refusing gives it no signal until the
//!   queue overflows, so without a tight `timeout` it settles with a full queue.
//! - [`Gradient`]: compares the latency of recent calls with a baseline (the
//!   latency without queueing) and sets the limit to what the supplier served in
//!   that time, plus a [`tolerance`](GradientConfig::tolerance). Choose it when the
//!   supplier **queues** rather than refuses, and you do not know its normal
//!   latency (or it differs by route or over the day): it learns the baseline, and
//!   measures it again on a jittered schedule so that a supplier that became slower
//!   for good is not mistaken for an overloaded one. It reacts to overload signals
//!   too. Its price: a short, periodic dip of the limit while the baseline is
//!   measured, and latency noise it must see through.
//!
//! Both stay within `min_limit..=max_limit` whatever they are fed.
//!
//! # Generations
//!
//! A call admitted under an older limit says nothing about the current one: its
//! supplier queue was made by the old limit. So each algorithm counts
//! *generations* ([`LimitAlgorithm::generation`]): the bulkhead reads the
//! generation when it admits a call and hands it back with the call's sample.
//! [`Aimd`] starts a generation at each decrease and ignores overload signals from
//! older ones (one overloaded round trip shrinks the limit once, not once per
//! call in it); [`Gradient`] starts one at each change and counts only current
//! latencies. This is the bulkhead's version of the circuit breaker's epochs.
//!
//! # In a bulkhead
//!
//! [`BulkheadBuilder::adaptive`](crate::BulkheadBuilder::adaptive) sets the algorithm; the
//! layer's overload classifier ([`BulkheadLayer::overload`](crate::BulkheadLayer::overload))
//! says what counts as overload:
//!
//! ```
//! use std::time::Duration;
//! use seawall_bulkhead::adaptive::AimdConfig;
//! use seawall_bulkhead::{BulkheadLayer, OverloadStatus};
//!
//! # fn main() -> Result<(), seawall_core::ConfigError> {
//! let freight = BulkheadLayer::builder("freight")
//!     .max_queue(10)
//!     .max_wait(Duration::from_millis(20))
//!     .adaptive(AimdConfig {
//!         min_limit: 2,
//!         max_limit: 100,
//!         // The supplier answers in about 100 ms when it is not queueing.
//!         timeout: Duration::from_millis(150),
//!         ..AimdConfig::default()
//!     })
//!     .build()?
//!     // HTTP and gRPC: 429, 503 and RESOURCE_EXHAUSTED are overload too.
//!     .overload(OverloadStatus::default());
//! assert_eq!(freight.handle().snapshot().limit, 20); // the initial limit
//! # Ok(())
//! # }
//! ```
//!
//! **What feeds it.** Each response future reports its call once, classified by the
//! layer's overload classifier ([`BulkheadLayer::overload`](crate::BulkheadLayer::overload)): *overloaded* (a
//! `429`, a `503`, gRPC `RESOURCE_EXHAUSTED`, a timeout from a breaker or deadline
//! below), *served* (any other answer, a `404` or a `500` included: the supplier
//! answered, and its latency is a fair sample), or *no evidence* (an inner
//! breaker's `CircuitOpen`, a transport error). The default classifier,
//! [`TimeoutsAsOverload`](seawall_core::TimeoutsAsOverload), works for any response type and sees only timeouts;
//! use [`OverloadStatus`](seawall_core::OverloadStatus) for HTTP and gRPC. The bulkhead's own rejections never
//! reach it: they are decided before the dependency is called. A cancelled call
//! (its future dropped) reports nothing. The latency is measured from admission
//! (in backpressure mode, from the slot's reservation in `poll_ready`) to the
//! inner future's completion, so the bulkhead's own queue never counts:
//! one fast-path admission in `sample_every` (default 8) and every call that waited
//! for its slot read the clock; the others read none.
//!
//! **The limit changes admission only.** When it falls, running calls finish (no
//! preemption) and nobody is admitted until active calls are below it; when it
//! rises, waiters are admitted at once. No call is ever admitted while active ≥
//! the limit in force, even with callers racing a change (a change invalidates the
//! fast path's compare-and-swap). `max_queue` and `max_wait` keep their meaning.
//!
//! To take the valve in hand, [`Handle::force`](crate::Handle::force) holds the limit at a value
//! (the algorithm is not fed meanwhile) and [`Handle::release`](crate::Handle::release) lets it go on
//! *from that value*, so the end of an incident does not jump back to a limit
//! learned before it.
//!
//! **Per key.** [`BulkheadBuilder::adaptive`](crate::BulkheadBuilder::adaptive) followed by
//! [`keyed`](crate::BulkheadBuilder::keyed) gives every key of a
//! [`KeyedBulkheadLayer`](crate::KeyedBulkheadLayer) its own algorithm, fed only by that key's calls, so one
//! slow host shrinks its own limit and no other. A key forgotten at the bound on
//! keys forgets what it learned and comes back at the initial limit; in the
//! layer's metric series `seawall_bulkhead_limit` is then the sum of the live
//! keys' limits (as for a fixed keyed layer: each key adds its `max_concurrent`),
//! as `seawall_bulkhead_active` is the sum of their active calls.

use std::fmt;
use std::time::Duration;

use seawall_core::{check_duration, ConfigError};
use tokio::time::Instant;

use crate::queue::MAX_LIMIT;

mod aimd;
mod gradient;

pub use aimd::{Aimd, AimdConfig};
pub use gradient::{Gradient, GradientConfig};

/// What one call said about the dependency's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// The dependency served the call (whatever its answer) in this time, measured
    /// from admission to completion.
    Served(Duration),
    /// The dependency is overloaded: it said so (a `429`, a `503`, gRPC
    /// `RESOURCE_EXHAUSTED`) or the call timed out.
    Overloaded,
}

/// One observation fed to a [`LimitAlgorithm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sample {
    /// What the call said.
    pub observation: Observation,
    /// Calls active when it completed, itself included: an algorithm does not grow
    /// a limit that is far from used.
    pub inflight: usize,
    /// The algorithm's [generation](LimitAlgorithm::generation) when the call was
    /// admitted.
    pub generation: u64,
}

impl Sample {
    /// A call served in `latency`.
    pub fn served(latency: Duration, inflight: usize, generation: u64) -> Self {
        Self {
            observation: Observation::Served(latency),
            inflight,
            generation,
        }
    }

    /// A call that said the dependency is overloaded.
    pub fn overloaded(inflight: usize, generation: u64) -> Self {
        Self {
            observation: Observation::Overloaded,
            inflight,
            generation,
        }
    }
}

mod sealed {
    #[allow(unreachable_pub)]
    pub trait Sealed {}
    impl Sealed for super::Aimd {}
    impl Sealed for super::Gradient {}
}

/// A limit algorithm: samples in, limit out. Sealed: [`Aimd`] and [`Gradient`].
///
/// The methods take the time as an argument and read no clock, so a test (or a
/// simulation) drives an algorithm with any sequence of instants.
pub trait LimitAlgorithm: sealed::Sealed + fmt::Debug + Send {
    /// The limit of active calls now, always within `min_limit..=max_limit`.
    fn limit(&self) -> usize;

    /// The current generation: hand it back in the [`Sample`] of each call
    /// admitted now (see the [module docs](self#generations)).
    fn generation(&self) -> u64;

    /// Learns from one call that completed at `now`; returns the new limit.
    fn on_sample(&mut self, now: Instant, sample: Sample) -> usize;

    /// Starts again from `limit` (clamped to the bounds) in a new generation, as
    /// after an operator released a forced limit.
    fn restart_from(&mut self, now: Instant, limit: usize);

    /// Whether the algorithm wants the latency of every call for now (a
    /// [`Gradient`] measuring its baseline), not just one in `sample_every`.
    fn wants_every_latency(&self) -> bool {
        false
    }
}

/// Which algorithm an adaptive bulkhead runs, with its settings; see the
/// [module docs](self) for how to choose.
///
/// In a policy file, the `algorithm` key names it and the other keys are its
/// settings (defaults for those left out):
///
/// ```toml
/// [policies.freight.bulkhead]
/// queue = { max_queue = 10, max_wait = "20ms" }
/// adaptive = { algorithm = "gradient", min_limit = 4, max_limit = 200 }
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "algorithm", rename_all = "snake_case"))]
pub enum AdaptiveConfig {
    /// Additive increase, multiplicative decrease: [`Aimd`].
    Aimd(AimdConfig),
    /// Latency against a re-measured baseline: [`Gradient`].
    Gradient(GradientConfig),
}

impl From<AimdConfig> for AdaptiveConfig {
    fn from(c: AimdConfig) -> Self {
        Self::Aimd(c)
    }
}

impl From<GradientConfig> for AdaptiveConfig {
    fn from(c: GradientConfig) -> Self {
        Self::Gradient(c)
    }
}

impl AdaptiveConfig {
    /// Checks every field, naming the first one at fault (e.g. `adaptive.min_limit`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Self::Aimd(c) => c.validate(),
            Self::Gradient(c) => c.validate(),
        }
        .map_err(|e| e.within("adaptive"))
    }

    /// The algorithm's name, as in a policy file.
    pub fn algorithm(&self) -> &'static str {
        match self {
            Self::Aimd(_) => "aimd",
            Self::Gradient(_) => "gradient",
        }
    }

    /// One call in this many has its latency measured.
    pub fn sample_every(&self) -> u32 {
        match self {
            Self::Aimd(c) => c.sample_every,
            Self::Gradient(c) => c.sample_every,
        }
    }
}

/// The largest `sample_every`.
const MAX_SAMPLE_EVERY: u32 = 1 << 16;

/// Checks the settings every algorithm has.
fn check_limits(
    initial_limit: usize,
    min_limit: usize,
    max_limit: usize,
    sample_every: u32,
) -> Result<(), ConfigError> {
    if min_limit == 0 {
        return Err(ConfigError::new("min_limit", "must be at least 1"));
    }
    if max_limit > MAX_LIMIT {
        return Err(ConfigError::new(
            "max_limit",
            format!("must be at most {MAX_LIMIT}"),
        ));
    }
    if max_limit < min_limit {
        return Err(ConfigError::new(
            "max_limit",
            format!("must be at least min_limit ({min_limit}), got {max_limit}"),
        ));
    }
    if !(min_limit..=max_limit).contains(&initial_limit) {
        return Err(ConfigError::new(
            "initial_limit",
            format!("must be between min_limit ({min_limit}) and max_limit ({max_limit}), got {initial_limit}"),
        ));
    }
    if !sample_every.is_power_of_two() || sample_every > MAX_SAMPLE_EVERY {
        return Err(ConfigError::new(
            "sample_every",
            format!("must be a power of two from 1 to {MAX_SAMPLE_EVERY}, got {sample_every}"),
        ));
    }
    Ok(())
}

/// Checks a decrease factor: in `0.5..1.0`, so one signal neither halves the
/// limit nor leaves it where it is.
fn check_backoff(value: f64) -> Result<(), ConfigError> {
    if value.is_finite() && (0.5..1.0).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::new(
            "backoff",
            format!("must be at least 0.5 and below 1.0, got {value}"),
        ))
    }
}

/// `limit × backoff`, at least one less than `limit`, within the bounds.
fn decreased(limit: f64, backoff: f64, min_limit: usize) -> f64 {
    (limit * backoff)
        .floor()
        .min(limit - 1.0)
        .max(min_limit as f64)
}

fn check_window(field: &'static str, d: Duration) -> Result<(), ConfigError> {
    check_duration(field, d).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_at_fault_is_named_under_adaptive() {
        let field = |c: AdaptiveConfig| c.validate().unwrap_err().field().to_owned();
        // The field named for the default AIMD configuration changed by `change`.
        let aimd_field = |change: &dyn Fn(&mut AimdConfig)| {
            let mut c = AimdConfig::default();
            change(&mut c);
            field(c.into())
        };
        assert_eq!(aimd_field(&|c| c.min_limit = 0), "adaptive.min_limit");
        assert_eq!(
            aimd_field(&|c| {
                c.min_limit = 10;
                c.max_limit = 5;
                c.initial_limit = 7;
            }),
            "adaptive.max_limit"
        );
        assert_eq!(
            aimd_field(&|c| c.max_limit = MAX_LIMIT + 1),
            "adaptive.max_limit"
        );
        assert_eq!(
            aimd_field(&|c| c.initial_limit = 1000),
            "adaptive.initial_limit"
        );
        for bad in [3, 0, MAX_SAMPLE_EVERY * 2] {
            assert_eq!(
                aimd_field(&|c| c.sample_every = bad),
                "adaptive.sample_every"
            );
        }
        for bad in [1.0, 0.4, f64::NAN] {
            assert_eq!(aimd_field(&|c| c.backoff = bad), "adaptive.backoff");
        }
        assert_eq!(
            aimd_field(&|c| c.timeout = Duration::ZERO),
            "adaptive.timeout"
        );
        let g = GradientConfig::default();
        let cases: [(GradientConfig, &str); 8] = [
            (
                GradientConfig {
                    tolerance: -0.1,
                    ..g
                },
                "adaptive.tolerance",
            ),
            (
                GradientConfig {
                    tolerance: f64::INFINITY,
                    ..g
                },
                "adaptive.tolerance",
            ),
            (
                GradientConfig {
                    window: Duration::ZERO,
                    ..g
                },
                "adaptive.window",
            ),
            (
                GradientConfig {
                    window_samples: 0,
                    ..g
                },
                "adaptive.window_samples",
            ),
            (
                GradientConfig {
                    min_rtt_every: Duration::ZERO,
                    ..g
                },
                "adaptive.min_rtt_every",
            ),
            (
                GradientConfig {
                    min_rtt_samples: 33,
                    ..g
                },
                "adaptive.min_rtt_samples",
            ),
            (GradientConfig { jitter: 1.5, ..g }, "adaptive.jitter"),
            (GradientConfig { backoff: 0.2, ..g }, "adaptive.backoff"),
        ];
        for (c, expected) in cases {
            assert_eq!(field(c.into()), expected, "{c:?}");
        }
        assert!(AdaptiveConfig::from(AimdConfig::default())
            .validate()
            .is_ok());
        assert!(AdaptiveConfig::from(g).validate().is_ok());
    }

    #[test]
    fn a_decrease_is_at_least_one_and_never_below_the_minimum() {
        assert_eq!(decreased(100.0, 0.9, 1), 90.0);
        assert_eq!(decreased(5.0, 0.9, 1), 4.0);
        assert_eq!(decreased(2.0, 0.9, 2), 2.0);
        assert_eq!(decreased(1.0, 0.5, 1), 1.0);
    }
}
