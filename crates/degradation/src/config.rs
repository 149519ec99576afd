//! The degradation policy as plain data, with its defaults.

use std::time::Duration;

use seawall_core::{check_duration, check_fraction, ConfigError};

/// What evidence moves the machine one level down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Trigger {
    /// `failures_to_degrade` failures in a row at the current level .
    #[default]
    ConsecutiveFailures,
    /// A failure rate of at least `failure_rate` over the last `rate_window`, once
    /// `min_calls` outcomes are in it. A consecutive count is reset by one success, so a
    /// level failing 80 % of the time can stay up under it; a rate cannot be fooled so.
    FailureRate,
}

/// A degradation machine's configuration.
///
/// `Default` holds: 5 consecutive failures to fall one level, 60 s
/// minimum dwell before any climb, 5 % of traffic probing the level above, and 20
/// probe successes within a whole probe window to climb back one level.
///
/// Three mechanisms stop the ping-pong between levels, and all three are needed:
///
/// - **hysteresis**: the bar to climb (≥ `probe_successes_to_recover` probe successes
///   and a probe failure rate ≤ `probe_max_failure_rate` over a whole window) is
///   stricter than the bar to fall (with [`Trigger::FailureRate`], validation insists
///   that `probe_max_failure_rate < failure_rate`);
/// - **minimum dwell** (`min_dwell`): no climb before a level has been in force that
///   long, so no decision is reversed before it has had an observable effect;
/// - **recovery probes** (`probe_ratio`, `probe_window`): a small share of traffic
///   tries the level above; only those probes' successes count toward recovery.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct DegradationConfig {
    /// What moves the machine down (default: consecutive failures).
    pub trigger: Trigger,
    /// Consecutive failures at the current level that move it one level down
    /// ([`Trigger::ConsecutiveFailures`]; default 5).
    pub failures_to_degrade: u32,
    /// Failure rate, in `0.0..=1.0`, that moves it down ([`Trigger::FailureRate`]; default 0.5).
    pub failure_rate: f64,
    /// The window the failure rate is measured over ([`Trigger::FailureRate`]; default
    /// 30 s, cut into 10 buckets, so it must be a whole number of nanoseconds × 10).
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub rate_window: Duration,
    /// Outcomes needed in the window before the rate is judged
    /// ([`Trigger::FailureRate`]; default 20).
    pub min_calls: u32,
    /// Minimum time at a level before it may climb (default 60 s; one
    /// to five minutes). Zero disables the dwell.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub min_dwell: Duration,
    /// Share of requests, in `(0.0, 1.0]`, sent to the level above once the dwell has
    /// passed (default 0.05).
    pub probe_ratio: f64,
    /// How long probe outcomes are gathered before the level is judged, counted from the
    /// first probe after the dwell (default 60 s). Zero judges at every probe outcome,
    /// with no window to restart: the level climbs once `probe_successes_to_recover`
    /// probes in a row succeeded and the probe failure rate so far is within
    /// `probe_max_failure_rate`.
    ///
    /// Recovery needs `probe_successes_to_recover` probe successes within one window:
    /// with the defaults that is at least 400 requests a minute (about 7 per second).
    /// Size these to your traffic, or a quiet service never climbs back on its own.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub probe_window: Duration,
    /// Probe successes since the last failed probe needed at the end of a window to
    /// climb one level (default 20).
    pub probe_successes_to_recover: u32,
    /// Highest probe failure rate over the window, in `0.0..=1.0`, that still allows the
    /// climb (default 0.1).
    pub probe_max_failure_rate: f64,
    /// Shadow mode, to try a policy on live traffic first: the machine routes
    /// every request as it would, but a request it would serve at a lower level is
    /// served by the best level instead and counted as a shadow rejection
    /// ([`Snapshot::shadow_rejections`](crate::Snapshot::shadow_rejections),
    /// `seawall_degradation_shadow_rejections_total`). The snapshot's level is the
    /// one it would serve at, so a shadow run shows when the policy would fall and
    /// climb back.
    ///
    /// - Once it would have fallen, the levels below are never called, so it
    ///   cannot see them: a request the best level served in their place is **not
    ///   recorded**, and recovery probes (to the best level, from the level just
    ///   below it) are. It follows the enforcing machine as long as the level it
    ///   would fall to would have served, and never falls below it on its own (a
    ///   floor still moves it).
    /// - An operator's forced level is served, shadow or not: forcing is a
    ///   decision, not a policy on trial. A floor is shadowed like any level.
    /// - Switching ([`Handle::set_shadow`](crate::Handle::set_shadow)) applies from
    ///   the next request and keeps the level and the probe progress;
    ///   [`Handle::revert`](crate::Handle::revert) returns to the built setting.
    pub shadow: bool,
}

impl Default for DegradationConfig {
    fn default() -> Self {
        Self {
            trigger: Trigger::ConsecutiveFailures,
            failures_to_degrade: 5,
            failure_rate: 0.5,
            rate_window: Duration::from_secs(30),
            min_calls: 20,
            min_dwell: Duration::from_secs(60),
            probe_ratio: 0.05,
            probe_window: Duration::from_secs(60),
            probe_successes_to_recover: 20,
            probe_max_failure_rate: 0.1,
            shadow: false,
        }
    }
}

/// The number of buckets the failure-rate window is cut into.
pub(crate) const RATE_BUCKETS: u32 = 10;

impl DegradationConfig {
    /// Checks every field, naming the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.failures_to_degrade == 0 {
            return Err(ConfigError::new(
                "failures_to_degrade",
                "must be at least 1",
            ));
        }
        check_fraction("failure_rate", self.failure_rate)?;
        if self.failure_rate == 0.0 {
            return Err(ConfigError::new(
                "failure_rate",
                "must be above 0.0 (a rate of 0 would degrade on the first call)",
            ));
        }
        check_duration("rate_window", self.rate_window)?;
        if !self
            .rate_window
            .as_nanos()
            .is_multiple_of(u128::from(RATE_BUCKETS))
        {
            return Err(ConfigError::new(
                "rate_window",
                "must be a whole multiple of 10 ns (it is cut into 10 buckets)",
            ));
        }
        if self.min_calls == 0 {
            return Err(ConfigError::new("min_calls", "must be at least 1"));
        }
        check_fraction("probe_ratio", self.probe_ratio)?;
        if self.probe_ratio == 0.0 {
            return Err(ConfigError::new(
                "probe_ratio",
                "must be above 0.0 (without probes a level never climbs back)",
            ));
        }
        if self.probe_successes_to_recover == 0 {
            return Err(ConfigError::new(
                "probe_successes_to_recover",
                "must be at least 1",
            ));
        }
        check_fraction("probe_max_failure_rate", self.probe_max_failure_rate)?;
        if self.trigger == Trigger::FailureRate && self.probe_max_failure_rate >= self.failure_rate
        {
            return Err(ConfigError::new(
                "probe_max_failure_rate",
                format!(
                    "must be below failure_rate ({}): the bar to climb must be stricter \
                     than the bar to fall (hysteresis)",
                    self.failure_rate
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(c: &DegradationConfig) -> String {
        c.validate().unwrap_err().field().to_owned()
    }

    #[test]
    fn defaults_are_the_seeds_numbers_and_valid() {
        let c = DegradationConfig::default();
        assert_eq!(c.failures_to_degrade, 5);
        assert_eq!(c.min_dwell, Duration::from_secs(60));
        assert_eq!(c.probe_ratio, 0.05);
        assert_eq!(c.probe_successes_to_recover, 20);
        c.validate().unwrap();
    }

    #[test]
    fn invalid_fields_are_named() {
        let d = DegradationConfig::default;
        assert_eq!(
            field_of(&DegradationConfig {
                failures_to_degrade: 0,
                ..d()
            }),
            "failures_to_degrade"
        );
        assert_eq!(
            field_of(&DegradationConfig {
                failure_rate: f64::NAN,
                ..d()
            }),
            "failure_rate"
        );
        assert_eq!(
            field_of(&DegradationConfig {
                failure_rate: 0.0,
                ..d()
            }),
            "failure_rate"
        );
        assert_eq!(
            field_of(&DegradationConfig {
                rate_window: Duration::ZERO,
                ..d()
            }),
            "rate_window"
        );
        assert_eq!(
            field_of(&DegradationConfig {
                rate_window: Duration::from_nanos(15),
                ..d()
            }),
            "rate_window"
        );
        assert_eq!(
            field_of(&DegradationConfig {
                min_calls: 0,
                ..d()
            }),
            "min_calls"
        );
        assert_eq!(
            field_of(&DegradationConfig {
                probe_ratio: 0.0,
                ..d()
            }),
            "probe_ratio"
        );
        assert_eq!(
            field_of(&DegradationConfig {
                probe_ratio: 1.5,
                ..d()
            }),
            "probe_ratio"
        );
        assert_eq!(
            field_of(&DegradationConfig {
                probe_successes_to_recover: 0,
                ..d()
            }),
            "probe_successes_to_recover"
        );
        assert_eq!(
            field_of(&DegradationConfig {
                probe_max_failure_rate: -0.1,
                ..d()
            }),
            "probe_max_failure_rate"
        );
    }

    #[test]
    fn a_rate_trigger_needs_a_stricter_climbing_bar() {
        let c = DegradationConfig {
            trigger: Trigger::FailureRate,
            failure_rate: 0.2,
            probe_max_failure_rate: 0.2,
            ..DegradationConfig::default()
        };
        assert_eq!(field_of(&c), "probe_max_failure_rate");
        DegradationConfig {
            probe_max_failure_rate: 0.05,
            ..c
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn zero_dwell_and_zero_probe_window_are_allowed() {
        DegradationConfig {
            min_dwell: Duration::ZERO,
            probe_window: Duration::ZERO,
            ..DegradationConfig::default()
        }
        .validate()
        .unwrap();
    }

    #[cfg(feature = "serde")]
    #[test]
    fn loads_from_a_file_with_readable_durations_and_rejects_unknown_keys() {
        let c: DegradationConfig = serde_json::from_str(
            r#"{"trigger": "failure_rate", "min_dwell": "2m", "probe_window": "30s",
                "failure_rate": 0.4, "probe_max_failure_rate": 0.05}"#,
        )
        .unwrap();
        assert_eq!(c.trigger, Trigger::FailureRate);
        assert_eq!(c.min_dwell, Duration::from_secs(120));
        assert_eq!(c.probe_window, Duration::from_secs(30));
        assert_eq!(
            c.probe_successes_to_recover, 20,
            "unset fields keep the defaults"
        );
        c.validate().unwrap();
        let text = serde_json::to_string(&c).unwrap();
        assert!(text.contains(r#""min_dwell":"2m""#), "{text}");
        assert_eq!(serde_json::from_str::<DegradationConfig>(&text).unwrap(), c);
        assert!(serde_json::from_str::<DegradationConfig>(r#"{"dwell": "1m"}"#).is_err());
    }
}
