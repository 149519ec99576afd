//! Additive increase, multiplicative decrease.

use std::time::Duration;

use seawall_core::ConfigError;
use tokio::time::Instant;

use super::{
    check_backoff, check_limits, check_window, decreased, LimitAlgorithm, Observation, Sample,
};

/// The settings of [`Aimd`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct AimdConfig {
    /// The limit before anything is learned (default 20).
    pub initial_limit: usize,
    /// The lowest limit (default 1).
    pub min_limit: usize,
    /// The highest limit (default 200, at most 2^20).
    pub max_limit: usize,
    /// The factor applied on an overload signal (default 0.9, in `0.5..1.0`); the
    /// limit always falls by at least one.
    pub backoff: f64,
    /// A measured latency above this counts as overload (default 5 s). Set it near
    /// the supplier's normal latency when it queues instead of refusing: that is
    /// the only way AIMD sees such a queue before it overflows.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub timeout: Duration,
    /// One admitted call in this many has its latency measured (a power of two,
    /// default 8); the others read no clock. Overload answers are seen on every call.
    pub sample_every: u32,
}

impl Default for AimdConfig {
    fn default() -> Self {
        Self {
            initial_limit: 20,
            min_limit: 1,
            max_limit: 200,
            backoff: 0.9,
            timeout: Duration::from_secs(5),
            sample_every: 8,
        }
    }
}

impl AimdConfig {
    /// Checks every field, naming the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_limits(
            self.initial_limit,
            self.min_limit,
            self.max_limit,
            self.sample_every,
        )?;
        check_backoff(self.backoff)?;
        check_window("timeout", self.timeout)
    }
}

/// Additive increase, multiplicative decrease: one more call per round trip while
/// calls are served with the limit in use, `× backoff` on an overload signal.
///
/// - **Increase**: a served call whose latency is at most `timeout`, completing
///   while at least half the limit is in use, adds one — at most once per round
///   trip (the reporting call's own latency), so the limit grows by about one per
///   round trip whatever the sampling rate.
/// - **Decrease**: an overload signal (or a latency above `timeout`) from a call
///   admitted in the current [generation](LimitAlgorithm::generation) multiplies
///   the limit by `backoff` (at least minus one) and starts a new generation:
///   the other calls of the same overloaded round trip are not counted again.
///
/// ```
/// use std::time::Duration;
/// use seawall_bulkhead::adaptive::{Aimd, AimdConfig, LimitAlgorithm, Sample};
/// use tokio::time::Instant;
///
/// let mut aimd = Aimd::new(AimdConfig { initial_limit: 10, ..AimdConfig::default() });
/// let t0 = Instant::now();
/// let g = aimd.generation();
/// let rtt = Duration::from_millis(100);
/// assert_eq!(aimd.on_sample(t0, Sample::served(rtt, 8, g)), 11);
/// // Within the same round trip: no second increase.
/// assert_eq!(aimd.on_sample(t0 + Duration::from_millis(50), Sample::served(rtt, 8, g)), 11);
/// // A 503: down by 10 %; more 503s from calls admitted before it change nothing.
/// assert_eq!(aimd.on_sample(t0 + rtt, Sample::overloaded(11, g)), 9);
/// assert_eq!(aimd.on_sample(t0 + rtt, Sample::overloaded(11, g)), 9);
/// ```
#[derive(Debug, Clone)]
pub struct Aimd {
    config: AimdConfig,
    limit: usize,
    generation: u64,
    last_increase: Option<Instant>,
}

impl Aimd {
    /// An algorithm at `config.initial_limit`. The configuration is assumed valid
    /// ([`AimdConfig::validate`]); out-of-range limits are clamped.
    pub fn new(config: AimdConfig) -> Self {
        let min = config.min_limit.max(1);
        let max = config.max_limit.max(min);
        let config = AimdConfig {
            min_limit: min,
            max_limit: max,
            ..config
        };
        Self {
            limit: config.initial_limit.clamp(min, max),
            config,
            generation: 0,
            last_increase: None,
        }
    }

    /// The settings.
    pub fn config(&self) -> &AimdConfig {
        &self.config
    }

    fn decrease(&mut self, now: Instant) {
        let next = decreased(
            self.limit as f64,
            self.config.backoff,
            self.config.min_limit,
        );
        self.limit = (next as usize).clamp(self.config.min_limit, self.config.max_limit);
        self.generation += 1;
        // Grow again only a round trip after the decrease.
        self.last_increase = Some(now);
    }
}

impl LimitAlgorithm for Aimd {
    fn limit(&self) -> usize {
        self.limit
    }

    fn generation(&self) -> u64 {
        self.generation
    }

    fn on_sample(&mut self, now: Instant, sample: Sample) -> usize {
        let overloaded = match sample.observation {
            Observation::Overloaded => true,
            Observation::Served(latency) => latency > self.config.timeout,
        };
        if overloaded {
            if sample.generation == self.generation {
                self.decrease(now);
            }
            return self.limit;
        }
        let Observation::Served(round_trip) = sample.observation else {
            return self.limit;
        };
        // Do not grow a limit that is not used: it would say nothing about load.
        if sample.inflight.saturating_mul(2) < self.limit {
            return self.limit;
        }
        let due = match self.last_increase {
            Some(at) => now.saturating_duration_since(at) >= round_trip,
            None => true,
        };
        if due && self.limit < self.config.max_limit {
            self.limit += 1;
            self.last_increase = Some(now);
        }
        self.limit
    }

    fn restart_from(&mut self, now: Instant, limit: usize) {
        self.limit = limit.clamp(self.config.min_limit, self.config.max_limit);
        self.generation += 1;
        self.last_increase = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn aimd(initial: usize) -> Aimd {
        Aimd::new(AimdConfig {
            initial_limit: initial,
            min_limit: 2,
            max_limit: 12,
            timeout: ms(500),
            ..AimdConfig::default()
        })
    }

    #[test]
    fn grows_by_one_per_round_trip_up_to_the_maximum() {
        let mut a = aimd(10);
        let t0 = Instant::now();
        let g = a.generation();
        assert_eq!(a.on_sample(t0, Sample::served(ms(100), 10, g)), 11);
        assert_eq!(a.on_sample(t0 + ms(99), Sample::served(ms(100), 11, g)), 11);
        assert_eq!(
            a.on_sample(t0 + ms(100), Sample::served(ms(100), 11, g)),
            12
        );
        assert_eq!(
            a.on_sample(t0 + ms(200), Sample::served(ms(100), 12, g)),
            12
        );
        assert_eq!(a.generation(), g, "an increase starts no generation");
    }

    #[test]
    fn an_unused_limit_does_not_grow() {
        let mut a = aimd(10);
        let t0 = Instant::now();
        assert_eq!(a.on_sample(t0, Sample::served(ms(100), 4, 0)), 10);
        assert_eq!(a.on_sample(t0, Sample::served(ms(100), 5, 0)), 11);
    }

    #[test]
    fn one_overloaded_round_trip_shrinks_once() {
        let mut a = aimd(10);
        let t0 = Instant::now();
        assert_eq!(a.on_sample(t0, Sample::overloaded(10, 0)), 9);
        assert_eq!(a.generation(), 1);
        // The rest of that round trip's 503s came from calls admitted before.
        for _ in 0..5 {
            assert_eq!(a.on_sample(t0, Sample::overloaded(10, 0)), 9);
        }
        // A call admitted after the decrease that is overloaded too: shrink again.
        assert_eq!(a.on_sample(t0 + ms(10), Sample::overloaded(9, 1)), 8);
        // A slow latency is an overload signal as well.
        assert_eq!(a.on_sample(t0 + ms(20), Sample::served(ms(501), 8, 2)), 7);
        assert_eq!(a.on_sample(t0 + ms(30), Sample::served(ms(500), 8, 3)), 7);
        // No increase until a round trip after the decrease.
        assert_eq!(a.on_sample(t0 + ms(100), Sample::served(ms(100), 8, 3)), 7);
        assert_eq!(a.on_sample(t0 + ms(120), Sample::served(ms(100), 8, 3)), 8);
    }

    #[test]
    fn never_below_the_minimum_and_restarts_clamped() {
        let mut a = aimd(3);
        let t0 = Instant::now();
        for _ in 0..5 {
            let g = a.generation();
            a.on_sample(t0, Sample::overloaded(3, g));
        }
        assert_eq!(a.limit(), 2);
        a.restart_from(t0, 100);
        assert_eq!(a.limit(), 12);
        a.restart_from(t0, 0);
        assert_eq!(a.limit(), 2);
    }
}
