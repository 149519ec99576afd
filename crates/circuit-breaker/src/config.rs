//! The breaker's configuration as plain data, and its validation.
//!
//! A leaf: it depends on nothing else in the crate, so the machine keeps the
//! validated configuration itself instead of a converted copy.

use std::time::Duration;

use seawall_core::{check_duration, check_fraction, ConfigError, MAX_BUCKETS};

/// The largest count window accepted (one byte of memory per slot).
pub const MAX_COUNT_WINDOW: u32 = 1_000_000;

/// The most probes a half-open breaker may allow at once (one slot of memory each).
pub const MAX_HALF_OPEN_PROBES: u32 = 10_000;

/// When a closed breaker trips.
///
/// Trips are evaluated when a failure (or, with [`SlowCallConfig`], a slow call) is
/// recorded: a success alone never opens the breaker.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum TripPolicy {
    /// `threshold` failures in a row (one success resets the count). Simple, but a
    /// dependency failing 80 % of the time with scattered successes never trips it.
    ConsecutiveFailures {
        /// Failures in a row that open the breaker (at least 1).
        threshold: u32,
    },
    /// The last `size` recorded outcomes: trips when at least `min_calls` are in the
    /// window and `failures / calls >= failure_rate`.
    CountWindow {
        /// Outcomes kept (1 to [`MAX_COUNT_WINDOW`]).
        size: u32,
        /// Outcomes needed in the window before it may trip (1 to `size`).
        min_calls: u32,
        /// Failure rate that trips, in `(0.0, 1.0]`.
        failure_rate: f64,
    },
    /// The outcomes of the last `window` of time, in buckets of `bucket` that expire
    /// lazily (an outcome exactly `window` old no longer counts).
    TimeWindow {
        /// Length of the window (a whole number of buckets).
        #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
        window: Duration,
        /// Length of one bucket.
        #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
        bucket: Duration,
        /// Outcomes needed in the window before it may trip (at least 1).
        min_calls: u32,
        /// Failure rate that trips, in `(0.0, 1.0]`.
        failure_rate: f64,
    },
}

impl TripPolicy {
    /// Whether the policy keeps a window of outcomes (so it has a slow-call rate).
    fn is_window(&self) -> bool {
        // Exhaustive on purpose: a new policy must say whether it has a window.
        match self {
            Self::ConsecutiveFailures { .. } => false,
            Self::CountWindow { .. } | Self::TimeWindow { .. } => true,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            Self::ConsecutiveFailures { threshold } => {
                if threshold == 0 {
                    return Err(ConfigError::new("policy.threshold", "must be at least 1"));
                }
            }
            Self::CountWindow {
                size,
                min_calls,
                failure_rate,
            } => {
                if size == 0 || size > MAX_COUNT_WINDOW {
                    return Err(ConfigError::new(
                        "policy.size",
                        format!("must be between 1 and {MAX_COUNT_WINDOW}, got {size}"),
                    ));
                }
                if min_calls == 0 || min_calls > size {
                    return Err(ConfigError::new(
                        "policy.min_calls",
                        format!("must be between 1 and the window size ({size}), got {min_calls}"),
                    ));
                }
                check_rate("policy.failure_rate", failure_rate)?;
            }
            Self::TimeWindow {
                window,
                bucket,
                min_calls,
                failure_rate,
            } => {
                check_duration("policy.bucket", bucket)?;
                check_duration("policy.window", window)?;
                if window < bucket {
                    return Err(ConfigError::new(
                        "policy.window",
                        format!("must be at least one bucket ({bucket:?}), got {window:?}"),
                    ));
                }
                if window.as_nanos() % bucket.as_nanos() != 0 {
                    return Err(ConfigError::new(
                        "policy.window",
                        format!("must be a whole number of buckets ({bucket:?}), got {window:?}"),
                    ));
                }
                if window.as_nanos() / bucket.as_nanos() > MAX_BUCKETS as u128 {
                    return Err(ConfigError::new(
                        "policy.bucket",
                        format!("window / bucket must be at most {MAX_BUCKETS}"),
                    ));
                }
                if min_calls == 0 {
                    return Err(ConfigError::new("policy.min_calls", "must be at least 1"));
                }
                check_rate("policy.failure_rate", failure_rate)?;
            }
        }
        Ok(())
    }
}

/// A rate threshold: a number in `(0.0, 1.0]` (a zero rate would trip on no evidence).
fn check_rate(field: &'static str, value: f64) -> Result<f64, ConfigError> {
    let value = check_fraction(field, value)?;
    if value == 0.0 {
        return Err(ConfigError::new(field, "must be greater than 0.0"));
    }
    Ok(value)
}

/// Slow-call detection on a window policy: a call taking at least `threshold` is slow,
/// and the breaker trips when at least `rate` of the window's calls were slow.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct SlowCallConfig {
    /// A call this long or longer is slow.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub threshold: Duration,
    /// Slow-call rate that trips, in `(0.0, 1.0]`.
    pub rate: f64,
}

/// After closing, admit a growing share of calls for a while instead of all at once.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct RampConfig {
    /// How long the share takes to grow from `start_share` to all calls.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub duration: Duration,
    /// The share admitted right after closing, in `[0.0, 1.0]`.
    pub start_share: f64,
}

/// The jitter of a breaker whose configuration sets none and that no fleet
/// coordinates: each open interval is stretched by up to 20 %.
///
/// Replicas that tripped on the same failing dependency trip within moments of each
/// other; with no jitter their intervals end together and every replica probes the
/// dependency at once, the moment it is most fragile. Stretching each interval by a
/// uniform fraction in `[0, 0.2)` spreads those probes over a fifth of the interval
/// (2 s of the default 10 s), while a single breaker's recovery is delayed by at most
/// that fifth. Set `jitter(0.0)` where an exact interval matters (a test, a single
/// instance).
pub const DEFAULT_JITTER: f64 = 0.2;

/// Everything that decides how a breaker behaves, as plain data.
///
/// `Default` is the policy of the shipping exercise the project started from: the
/// last 10 outcomes, at least 10 of them, 5 failures open the breaker for 10 s, then
/// one probe; a successful probe closes it and starts a fresh window, a failed one
/// reopens it for another 10 s. Those numbers were never calibrated against real
/// load: treat them as a starting point.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct CircuitBreakerConfig {
    /// When the closed breaker trips.
    pub policy: TripPolicy,
    /// Optional slow-call detection (window policies only).
    pub slow_call: Option<SlowCallConfig>,
    /// How long the breaker stays open after a trip, before the first probe.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub open_for: Duration,
    /// The open interval is multiplied by this on every re-trip (a failed probe, or a
    /// trip during the ramp); `1.0` keeps it fixed.
    pub backoff_multiplier: f64,
    /// The longest the open interval grows to (before jitter); never below
    /// `open_for`. Must be at least `open_for` when the interval grows.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub max_open_for: Duration,
    /// Each open interval is stretched by a random fraction in `[0, jitter)` of itself,
    /// so breakers that opened together do not probe together. `Some(0.0)` disables
    /// it. `None` (the default) takes the fleet's jitter when the breaker is
    /// coordinated, and [`DEFAULT_JITTER`] otherwise: a setting made here always wins.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub jitter: Option<f64>,
    /// Probes allowed in flight at once while half-open.
    pub half_open_max: u32,
    /// Successful probes needed to close.
    pub probes_to_close: u32,
    /// A probe neither finished nor dropped after this long counts as failed.
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub half_open_timeout: Duration,
    /// Optional ramp after closing.
    pub ramp: Option<RampConfig>,
    /// Shadow mode, to try a policy on live traffic first: the breaker runs as if
    /// enforcing (it trips, opens, half-opens, admits probes into its slots and
    /// ramps), but a call it would turn away for being open, for every probe slot
    /// being taken or for the ramp goes to the dependency instead, counted as a
    /// shadow rejection by that cause ([`Counters::shadow_rejections`](crate::Counters::shadow_rejections),
    /// `seawall_breaker_shadow_rejections_total{cause}`).
    ///
    /// - A call let through consumes what its rejection would have (the ramp's
    ///   share, the probe gate's hold) and carries a shadow ticket: never a probe,
    ///   never in the window, never a transition. Its outcome is still counted by
    ///   how it ended, never as `short_circuited`; so the same calls go through
    ///   the same states in both modes.
    /// - An operator's forced open is a decision, not a limit on trial: it rejects
    ///   in shadow mode too.
    /// - Switching ([`Handle::set_shadow`](crate::Handle::set_shadow)) applies from
    ///   the next call and keeps the state; [`Handle::revert`](crate::Handle::revert)
    ///   returns to the built setting. A call whose `poll_ready` found the breaker
    ///   open before the switch did not poll the inner service, and is turned away.
    ///
    /// How to read the shadow counters: [Trying a new limit in shadow
    /// mode](https://github.com/seawall-rs/seawall/blob/main/docs/operations.md#trying-a-new-limit-in-shadow-mode).
    pub shadow: bool,
}

impl CircuitBreakerConfig {
    /// The jitter in force: the configured one, or [`DEFAULT_JITTER`].
    pub fn effective_jitter(&self) -> f64 {
        self.jitter.unwrap_or(DEFAULT_JITTER)
    }
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        Self {
            policy: TripPolicy::CountWindow {
                size: 10,
                min_calls: 10,
                failure_rate: 0.5,
            },
            slow_call: None,
            open_for: Duration::from_secs(10),
            backoff_multiplier: 1.0,
            max_open_for: Duration::from_secs(300),
            jitter: None,
            half_open_max: 1,
            probes_to_close: 1,
            half_open_timeout: Duration::from_secs(10),
            ramp: None,
            shadow: false,
        }
    }
}

impl CircuitBreakerConfig {
    /// Checks every field, naming the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.policy.validate()?;
        if let Some(slow) = &self.slow_call {
            if !self.policy.is_window() {
                return Err(ConfigError::new(
                    "slow_call",
                    "needs a count or time window policy",
                ));
            }
            check_duration("slow_call.threshold", slow.threshold)?;
            check_rate("slow_call.rate", slow.rate)?;
        }
        check_duration("open_for", self.open_for)?;
        if !(self.backoff_multiplier.is_finite() && self.backoff_multiplier >= 1.0) {
            return Err(ConfigError::new(
                "backoff_multiplier",
                format!("must be a number >= 1.0, got {}", self.backoff_multiplier),
            ));
        }
        check_duration("max_open_for", self.max_open_for)?;
        if self.backoff_multiplier > 1.0 && self.max_open_for < self.open_for {
            return Err(ConfigError::new(
                "max_open_for",
                format!(
                    "must be at least open_for ({:?}), got {:?}",
                    self.open_for, self.max_open_for
                ),
            ));
        }
        if let Some(jitter) = self.jitter {
            check_fraction("jitter", jitter)?;
        }
        if self.half_open_max == 0 || self.half_open_max > MAX_HALF_OPEN_PROBES {
            return Err(ConfigError::new(
                "half_open_max",
                format!(
                    "must be between 1 and {MAX_HALF_OPEN_PROBES}, got {}",
                    self.half_open_max
                ),
            ));
        }
        if self.probes_to_close == 0 {
            return Err(ConfigError::new("probes_to_close", "must be at least 1"));
        }
        check_duration("half_open_timeout", self.half_open_timeout)?;
        if let Some(ramp) = &self.ramp {
            check_duration("ramp.duration", ramp.duration)?;
            check_fraction("ramp.start_share", ramp.start_share)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(config: &CircuitBreakerConfig) -> String {
        config.validate().unwrap_err().field().to_owned()
    }

    #[test]
    fn the_default_policy_is_the_documented_one_and_valid() {
        let c = CircuitBreakerConfig::default();
        c.validate().unwrap();
        assert_eq!(
            c.policy,
            TripPolicy::CountWindow {
                size: 10,
                min_calls: 10,
                failure_rate: 0.5
            }
        );
        assert_eq!(c.open_for, Duration::from_secs(10));
        assert_eq!((c.half_open_max, c.probes_to_close), (1, 1));
    }

    #[test]
    fn validation_names_the_field() {
        let base = CircuitBreakerConfig::default;
        let s = Duration::from_secs(1);
        let count = |size, min_calls, failure_rate| CircuitBreakerConfig {
            policy: TripPolicy::CountWindow {
                size,
                min_calls,
                failure_rate,
            },
            ..base()
        };
        let time = |window, bucket| CircuitBreakerConfig {
            policy: TripPolicy::TimeWindow {
                window,
                bucket,
                min_calls: 1,
                failure_rate: 0.5,
            },
            ..base()
        };
        let cases: Vec<(CircuitBreakerConfig, &str)> = vec![
            (
                CircuitBreakerConfig {
                    policy: TripPolicy::ConsecutiveFailures { threshold: 0 },
                    ..base()
                },
                "policy.threshold",
            ),
            (count(0, 1, 0.5), "policy.size"),
            (count(10, 11, 0.5), "policy.min_calls"),
            (count(10, 10, f64::NAN), "policy.failure_rate"),
            (count(10, 10, 0.0), "policy.failure_rate"),
            (time(s, 2 * s), "policy.window"),
            (time(Duration::from_millis(1500), s), "policy.window"),
            (time(s, Duration::ZERO), "policy.bucket"),
            (
                CircuitBreakerConfig {
                    policy: TripPolicy::ConsecutiveFailures { threshold: 5 },
                    slow_call: Some(SlowCallConfig {
                        threshold: s,
                        rate: 0.5,
                    }),
                    ..base()
                },
                "slow_call",
            ),
            (
                CircuitBreakerConfig {
                    slow_call: Some(SlowCallConfig {
                        threshold: s,
                        rate: 1.5,
                    }),
                    ..base()
                },
                "slow_call.rate",
            ),
            (
                CircuitBreakerConfig {
                    open_for: Duration::ZERO,
                    ..base()
                },
                "open_for",
            ),
            (
                CircuitBreakerConfig {
                    backoff_multiplier: 0.5,
                    ..base()
                },
                "backoff_multiplier",
            ),
            (
                CircuitBreakerConfig {
                    max_open_for: s,
                    backoff_multiplier: 2.0,
                    ..base()
                },
                "max_open_for",
            ),
            (
                CircuitBreakerConfig {
                    jitter: Some(-0.1),
                    ..base()
                },
                "jitter",
            ),
            (
                CircuitBreakerConfig {
                    half_open_max: 0,
                    ..base()
                },
                "half_open_max",
            ),
            (
                CircuitBreakerConfig {
                    probes_to_close: 0,
                    ..base()
                },
                "probes_to_close",
            ),
            (
                CircuitBreakerConfig {
                    half_open_timeout: Duration::ZERO,
                    ..base()
                },
                "half_open_timeout",
            ),
            (
                CircuitBreakerConfig {
                    ramp: Some(RampConfig {
                        duration: s,
                        start_share: 2.0,
                    }),
                    ..base()
                },
                "ramp.start_share",
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(field(&config), expected);
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_reads_durations_and_rejects_unknown_fields() {
        let json = r#"{
            "policy": {"kind": "time_window", "window": "60s", "bucket": "1s",
                       "min_calls": 20, "failure_rate": 0.5},
            "slow_call": {"threshold": "300ms", "rate": 0.8},
            "open_for": "10s",
            "ramp": {"duration": "30s", "start_share": 0.1}
        }"#;
        let c: CircuitBreakerConfig = serde_json::from_str(json).unwrap();
        assert_eq!(
            c.policy,
            TripPolicy::TimeWindow {
                window: Duration::from_secs(60),
                bucket: Duration::from_secs(1),
                min_calls: 20,
                failure_rate: 0.5
            }
        );
        assert_eq!(c.slow_call.unwrap().threshold, Duration::from_millis(300));
        assert_eq!(c.ramp.unwrap().duration, Duration::from_secs(30));
        assert_eq!(c.half_open_max, 1, "missing fields take the defaults");
        c.validate().unwrap();
        // And back.
        let again: CircuitBreakerConfig =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(again, c);

        let err = serde_json::from_str::<CircuitBreakerConfig>(r#"{"open_fr": "10s"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("open_fr"), "{err}");
        let err = serde_json::from_str::<CircuitBreakerConfig>(
            r#"{"policy": {"kind": "consecutive_failures", "treshold": 5}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("treshold"), "{err}");
    }
}
