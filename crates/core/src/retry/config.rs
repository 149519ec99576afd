//! The retry policy's configuration, validated field by field.

use std::time::Duration;

use super::backoff::Jitter;
use crate::config::{check_duration, check_fraction, check_positive, ConfigError};
use crate::time::MAX_DURATION;

/// What a [`DeadlineRetry`](super::DeadlineRetry) may do. Validated by
/// [`validate`](Self::validate), which [`build`](super::DeadlineRetryBuilder::build) calls.
///
/// `Default`: 3 attempts, 50 ms at least for a retry to be useful, waits from
/// 10 ms doubling up to 100 ms with full jitter, and a budget of 20 % of the first
/// attempts of the last 10 s plus 10 retries.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct RetryConfig {
    /// Attempts in all, the first included: 3 is one call and at most two retries.
    /// At least 1 (1 never retries).
    pub max_attempts: usize,
    /// The least time an attempt needs to be worth making. A retry is made only if
    /// its wait plus this fits in what remains of the request's deadline. Longer
    /// than zero (an attempt with no time left can only fail) and at most a year.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))]
    pub min_attempt_time: Duration,
    /// The ceiling of the first retry's wait; it doubles for each retry after it.
    /// Zero (with a zero `max_delay`) retries at once.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))]
    pub base_delay: Duration,
    /// The longest wait before a retry (at least `base_delay`, at most a year).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))]
    pub max_delay: Duration,
    /// How each wait is drawn between its bounds.
    pub jitter: Jitter,
    /// The share of first attempts that may be retried, from 0.0 (only the reserve)
    /// to 1.0 (as many retries as first attempts). More than one retry per first
    /// attempt would multiply the load on a failing dependency, which is what the
    /// budget exists to prevent.
    pub budget_share: f64,
    /// Retries allowed per window whatever the traffic, so that a service that has
    /// just started, or calls rarely, can still retry a transient failure.
    pub budget_reserve: u32,
    /// How far back first attempts count, from 1 s to 60 s. Shorter, the share is
    /// taken of too few calls to be a rate; longer, a long healthy spell funds a long
    /// burst of retries at the start of an outage.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration_format"))]
    pub budget_window: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            min_attempt_time: Duration::from_millis(50),
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
            jitter: Jitter::Full,
            budget_share: 0.2,
            budget_reserve: 10,
            budget_window: Duration::from_secs(10),
        }
    }
}

impl RetryConfig {
    /// Checks every field, naming the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive("max_attempts", self.max_attempts)?;
        check_duration("min_attempt_time", self.min_attempt_time)?;
        if self.max_delay > MAX_DURATION {
            return Err(ConfigError::new(
                "max_delay",
                format!("must be at most a year, got {:?}", self.max_delay),
            ));
        }
        if self.base_delay > self.max_delay {
            return Err(ConfigError::new(
                "base_delay",
                format!(
                    "must be at most max_delay ({:?}), got {:?}",
                    self.max_delay, self.base_delay
                ),
            ));
        }
        check_fraction("budget_share", self.budget_share)?;
        super::budget::check_window(self.budget_window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_at_fault(change: impl FnOnce(&mut RetryConfig)) -> String {
        let mut c = RetryConfig::default();
        change(&mut c);
        c.validate().unwrap_err().field().to_owned()
    }

    #[test]
    fn the_default_is_valid() {
        assert_eq!(RetryConfig::default().validate(), Ok(()));
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(field_at_fault(|c| c.max_attempts = 0), "max_attempts");
        assert_eq!(
            field_at_fault(|c| c.min_attempt_time = Duration::ZERO),
            "min_attempt_time"
        );
        assert_eq!(
            field_at_fault(|c| {
                c.base_delay = Duration::from_millis(200);
                c.max_delay = Duration::from_millis(100);
            }),
            "base_delay"
        );
        for share in [f64::NAN, -0.1, 1.5, f64::INFINITY] {
            assert_eq!(field_at_fault(|c| c.budget_share = share), "budget_share");
        }
        for window in [Duration::ZERO, Duration::from_millis(999), Duration::MAX] {
            assert_eq!(
                field_at_fault(|c| c.budget_window = window),
                "budget_window"
            );
        }
    }

    #[test]
    fn durations_past_a_year_are_refused_and_zero_waits_are_not() {
        assert_eq!(
            field_at_fault(|c| c.min_attempt_time = MAX_DURATION + Duration::from_nanos(1)),
            "min_attempt_time"
        );
        assert_eq!(
            field_at_fault(|c| {
                c.base_delay = Duration::MAX;
                c.max_delay = Duration::MAX;
            }),
            "max_delay"
        );
        let longest = RetryConfig {
            max_attempts: usize::MAX,
            min_attempt_time: MAX_DURATION,
            base_delay: MAX_DURATION,
            max_delay: MAX_DURATION,
            ..RetryConfig::default()
        };
        assert_eq!(longest.validate(), Ok(()));
        let zero_backoff = RetryConfig {
            base_delay: Duration::ZERO,
            max_delay: Duration::ZERO,
            ..RetryConfig::default()
        };
        assert_eq!(zero_backoff.validate(), Ok(()));
    }
}
