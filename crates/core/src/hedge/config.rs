//! The hedging layer's configuration, validated field by field. A leaf of the
//! hedging module: it imports none of its siblings.

use std::time::Duration;

use crate::config::{check_duration, check_fraction, check_positive, ConfigError};
use crate::retry::check_window;
use crate::time::MAX_DURATION;

/// When a hedge is sent: a fixed delay after the first attempt, or a percentile of
/// the recent latencies of first attempts.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum HedgeDelay {
    /// Each hedge is sent this long after the previous attempt was sent. Zero sends
    /// every attempt at once.
    Fixed(#[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))] Duration),
    /// Each hedge is sent when the previous attempt has run longer than this
    /// percentile of recent first attempts.
    Percentile(PercentileDelay),
}

impl Default for HedgeDelay {
    fn default() -> Self {
        Self::Percentile(PercentileDelay::default())
    }
}

/// A delay that follows the latency of first attempts (see [`HedgeDelay::Percentile`]).
///
/// `Default`: the 95th percentile, samples whose weight halves every 10 s, at
/// least 20 samples' weight before the percentile is used (`initial`, 50 ms, until
/// then) and never less than 1 ms.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct PercentileDelay {
    /// The percentile, above 0 and at most 100 (95.0 hedges the slowest 5 %).
    pub percentile: f64,
    /// How fast old samples fade: a sample's weight halves every `half_life`
    /// (longer than zero, at most a year). The percentile is recomputed eight times
    /// per half-life.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))]
    pub half_life: Duration,
    /// The weight of samples needed before the percentile is trusted (at least 1).
    pub min_samples: u32,
    /// The delay used until then (at most a year).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))]
    pub initial: Duration,
    /// The shortest delay, whatever the percentile says (at most a year): a
    /// dependency answering in microseconds is not hedged every microsecond.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))]
    pub min_delay: Duration,
}

impl Default for PercentileDelay {
    fn default() -> Self {
        Self {
            percentile: 95.0,
            half_life: Duration::from_secs(10),
            min_samples: 20,
            initial: Duration::from_millis(50),
            min_delay: Duration::from_millis(1),
        }
    }
}

/// What a [`HedgeLayer`](super::HedgeLayer) may do. Validated by
/// [`validate`](Self::validate), which [`build`](super::HedgeBuilder::build) calls.
///
/// `Default`: 2 attempts (the first and one hedge), the 95th-percentile delay, 20 ms
/// at least left in the deadline for a hedge to be useful, and a budget of 10 % of
/// the first attempts of the last 10 s plus 10 hedges (used when no budget is shared
/// with a retry policy).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct HedgeConfig {
    /// Attempts in all, the first included: 2 is the first and at most one hedge.
    /// At least 1 (1 never hedges).
    pub max_attempts: usize,
    /// When each hedge is sent.
    pub delay: HedgeDelay,
    /// The least time a hedge needs to be worth sending: a hedge is sent only if
    /// this fits in what remains of the request's deadline. Longer than zero, at
    /// most a year.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))]
    pub min_attempt_time: Duration,
    /// The share of first attempts that may be hedged, 0.0 to 1.0 (the layer's own
    /// budget; ignored when a budget is shared).
    pub budget_share: f64,
    /// Hedges allowed per window whatever the traffic.
    pub budget_reserve: u32,
    /// How far back first attempts count, from 1 s to 60 s.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))]
    pub budget_window: Duration,
}

impl Default for HedgeConfig {
    fn default() -> Self {
        Self {
            max_attempts: 2,
            delay: HedgeDelay::default(),
            min_attempt_time: Duration::from_millis(20),
            budget_share: 0.1,
            budget_reserve: 10,
            budget_window: Duration::from_secs(10),
        }
    }
}

impl HedgeConfig {
    /// Checks every field, naming the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive("max_attempts", self.max_attempts)?;
        match self.delay {
            HedgeDelay::Fixed(delay) => at_most_a_year("delay", delay)?,
            HedgeDelay::Percentile(p) => p.validate()?,
        }
        check_duration("min_attempt_time", self.min_attempt_time)?;
        check_fraction("budget_share", self.budget_share)?;
        check_window(self.budget_window)
    }
}

impl PercentileDelay {
    /// Checks every field, naming the first one at fault (as `delay.<field>`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let p = self.percentile;
        if !(p.is_finite() && p > 0.0 && p <= 100.0) {
            return Err(ConfigError::new(
                "delay.percentile",
                format!("must be above 0 and at most 100, got {p}"),
            ));
        }
        check_duration("delay.half_life", self.half_life)?;
        if self.min_samples == 0 {
            return Err(ConfigError::new("delay.min_samples", "must be at least 1"));
        }
        at_most_a_year("delay.initial", self.initial)?;
        at_most_a_year("delay.min_delay", self.min_delay)
    }
}

fn at_most_a_year(field: &'static str, value: Duration) -> Result<(), ConfigError> {
    if value > MAX_DURATION {
        Err(ConfigError::new(
            field,
            format!("must be at most a year, got {value:?}"),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_at_fault(change: impl FnOnce(&mut HedgeConfig)) -> String {
        let mut c = HedgeConfig::default();
        change(&mut c);
        c.validate().unwrap_err().field().to_owned()
    }

    fn percentile(change: impl FnOnce(&mut PercentileDelay)) -> impl FnOnce(&mut HedgeConfig) {
        move |c| {
            let mut p = PercentileDelay::default();
            change(&mut p);
            c.delay = HedgeDelay::Percentile(p);
        }
    }

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(HedgeConfig::default().validate(), Ok(()));
        let fixed = HedgeConfig {
            delay: HedgeDelay::Fixed(Duration::ZERO),
            max_attempts: 1,
            ..HedgeConfig::default()
        };
        assert_eq!(fixed.validate(), Ok(()));
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(field_at_fault(|c| c.max_attempts = 0), "max_attempts");
        assert_eq!(
            field_at_fault(|c| c.delay = HedgeDelay::Fixed(MAX_DURATION * 2)),
            "delay"
        );
        for p in [f64::NAN, 0.0, -1.0, 100.5, f64::INFINITY] {
            assert_eq!(
                field_at_fault(percentile(|d| d.percentile = p)),
                "delay.percentile",
                "{p}"
            );
        }
        assert_eq!(
            field_at_fault(percentile(|d| d.half_life = Duration::ZERO)),
            "delay.half_life"
        );
        assert_eq!(
            field_at_fault(percentile(|d| d.min_samples = 0)),
            "delay.min_samples"
        );
        assert_eq!(
            field_at_fault(percentile(|d| d.initial = Duration::MAX)),
            "delay.initial"
        );
        assert_eq!(
            field_at_fault(percentile(|d| d.min_delay = Duration::MAX)),
            "delay.min_delay"
        );
        assert_eq!(
            field_at_fault(|c| c.min_attempt_time = Duration::ZERO),
            "min_attempt_time"
        );
        assert_eq!(
            field_at_fault(|c| c.budget_share = f64::NAN),
            "budget_share"
        );
        assert_eq!(
            field_at_fault(|c| c.budget_window = Duration::from_millis(10)),
            "budget_window"
        );
    }
}
