//! The fleet's settings and their validation.

use std::time::Duration;

use seawall_circuit_breaker::RampConfig;
use seawall_core::ConfigError;

use crate::store::check_prefix;

/// The longest duration any fleet setting accepts.
pub const MAX_SETTING: Duration = Duration::from_secs(24 * 3600);

/// How a [`Fleet`](crate::Fleet) coordinates its breakers, as plain data.
///
/// The defaults suit a store one network hop away (Redis in the same region):
/// operations answered in a few milliseconds, a 200 ms timeout.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FleetConfig {
    /// The first part of every key, before the schema version (`seawall` by
    /// default). Fleets that must not coordinate with each other on one store
    /// use different prefixes.
    pub prefix: String,
    /// Every store operation is abandoned after this long (and counted as a store
    /// error). A write abandoned may still be applied later.
    pub store_timeout: Duration,
    /// How long after taking the lease its holder may start a probe. The lease's
    /// TTL is the breaker's `half_open_timeout` plus this, so a probe started in
    /// the window has finished, or counts as failed, before the store can hand the
    /// lease to another instance.
    pub probe_window: Duration,
    /// Store operations failing in a row before the instance falls back to its
    /// local breaker (below that, a failed operation is retried after a short,
    /// jittered pause while probes wait). One is the most eager.
    pub disconnect_after: u32,
    /// First pause before trying to rejoin after falling back; doubled on each
    /// failed attempt, jittered.
    pub reconnect_min: Duration,
    /// Longest pause between attempts to rejoin.
    pub reconnect_max: Duration,
    /// How often a connected coordinator checks that the store still answers
    /// ([`Store::touch`](crate::Store::touch)) while it has nothing else to send, so
    /// an idle breaker notices a dead or frozen store within `disconnect_after`
    /// checks instead of at its next trip. Counted apart from the protocol's
    /// operations ([`FleetSnapshot::health_checks`](crate::FleetSnapshot::health_checks)).
    pub health_every: Duration,
    /// The ramp given to a coordinated breaker configured without one, so the
    /// fleet does not take its whole load back the instant one probe succeeded.
    /// `None` leaves the breaker's configuration as it is.
    pub ramp: Option<RampConfig>,
    /// The jitter given to a coordinated breaker configured with none, so
    /// instances that fall back to local mode together do not probe in lockstep,
    /// and take the lease at spread instants. `0.0` leaves the breaker as it is.
    pub jitter: f64,
    /// The fleet trip: when this many instances tripped within the window, every
    /// other instance's breaker opens too. Off (`None`) by default; see
    /// [`TripTogether`] for why.
    pub trip_together: Option<TripTogether>,
    /// How long a breaker must have been open, and for at least three of its open
    /// intervals, before it is suspected of being stuck open and its evidence is
    /// read ([`STUCK_AFTER`](crate::STUCK_AFTER), a minute, by default): long enough
    /// that a dependency in a short outage is not called out.
    pub stuck_after: Duration,
}

/// The fleet trip: once `instances` distinct instances' breakers tripped on their
/// own evidence within `within` (by the store's clock), the breakers of every
/// other instance open too (cause `PeersTripped`), and the fleet then recovers
/// as from any trip: one probe under the lease, its verdict for everyone.
///
/// **Off by default**, because an instance's trip is evidence about the path from
/// that instance, not only about the dependency: one replica with a bad local
/// network, a bad deploy or an exhausted connection pool trips on failures no other
/// replica sees, and with a fleet trip that one sick client would open a healthy
/// fleet. For the same reason `instances` must be at least 2: it is the number of
/// independent witnesses the fleet asks for before it believes the dependency,
/// not the client, is sick. Turn it on where the fleet's replicas share their path
/// to the dependency, and choose `instances` above the number of replicas one bad
/// deploy or one bad host can take down at once.
///
/// Costs store operations, none on a call: one write per local trip, and, while
/// a breaker is closed, a read every half window (so a fleet trip whose push was
/// lost still reaches it within half a window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TripTogether {
    /// How many distinct instances tripping within the window trip the fleet (at least 2).
    pub instances: u32,
    /// How recent a trip must be to count (by the store's clock).
    pub within: Duration,
}

impl TripTogether {
    /// A fleet trip once `instances` instances tripped within `within`.
    pub fn new(instances: u32, within: Duration) -> Self {
        Self { instances, within }
    }

    /// Checks both fields, naming the first at fault (`trip_together.instances`,
    /// `trip_together.within`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.instances < 2 {
            return Err(ConfigError::new(
                "trip_together.instances",
                format!(
                    "must be at least 2 (one instance's trip must not open the fleet), got {}",
                    self.instances
                ),
            ));
        }
        check_duration("trip_together.within", self.within)
    }
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            prefix: "seawall".to_owned(),
            store_timeout: Duration::from_millis(200),
            probe_window: Duration::from_secs(1),
            disconnect_after: 3,
            reconnect_min: Duration::from_millis(500),
            reconnect_max: Duration::from_secs(30),
            health_every: Duration::from_secs(1),
            ramp: Some(RampConfig {
                duration: Duration::from_secs(10),
                start_share: 0.1,
            }),
            jitter: 0.2,
            trip_together: None,
            stuck_after: crate::STUCK_AFTER,
        }
    }
}

fn check_duration(field: &'static str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        return Err(ConfigError::new(field, "must be positive"));
    }
    if d > MAX_SETTING {
        return Err(ConfigError::new(
            field,
            format!("must be at most {MAX_SETTING:?}, got {d:?}"),
        ));
    }
    Ok(())
}

impl FleetConfig {
    /// Checks every field, naming the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_prefix(&self.prefix)?;
        check_duration("store_timeout", self.store_timeout)?;
        check_duration("probe_window", self.probe_window)?;
        if self.disconnect_after == 0 {
            return Err(ConfigError::new("disconnect_after", "must be at least 1"));
        }
        check_duration("reconnect_min", self.reconnect_min)?;
        check_duration("reconnect_max", self.reconnect_max)?;
        check_duration("health_every", self.health_every)?;
        check_duration("stuck_after", self.stuck_after)?;
        if self.reconnect_max < self.reconnect_min {
            return Err(ConfigError::new(
                "reconnect_max",
                format!(
                    "must be at least reconnect_min ({:?}), got {:?}",
                    self.reconnect_min, self.reconnect_max
                ),
            ));
        }
        if let Some(ramp) = &self.ramp {
            check_duration("ramp.duration", ramp.duration)?;
            if !(0.0..=1.0).contains(&ramp.start_share) {
                return Err(ConfigError::new(
                    "ramp.start_share",
                    format!("must be in [0, 1], got {}", ramp.start_share),
                ));
            }
        }
        if !(0.0..1.0).contains(&self.jitter) {
            return Err(ConfigError::new(
                "jitter",
                format!("must be in [0, 1), got {}", self.jitter),
            ));
        }
        if let Some(trip) = &self.trip_together {
            trip.validate()?;
        }
        Ok(())
    }

    /// The lease TTL for a breaker whose half-open timeout is `half_open_timeout`:
    /// their sum, rounded up to whole milliseconds (the unit stores keep TTLs in).
    pub fn lease_ttl(&self, half_open_timeout: Duration) -> Result<Duration, ConfigError> {
        let ttl = half_open_timeout
            .checked_add(self.probe_window)
            .filter(|ttl| *ttl <= MAX_SETTING.saturating_mul(2))
            .ok_or_else(|| {
                ConfigError::new(
                    "probe_window",
                    "with the breaker's half_open_timeout, the lease TTL is too long",
                )
            })?;
        let ms = ttl.as_nanos().div_ceil(1_000_000);
        Ok(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(c: &FleetConfig) -> String {
        c.validate().unwrap_err().field().to_owned()
    }

    #[test]
    fn the_default_is_valid() {
        FleetConfig::default().validate().unwrap();
    }

    #[test]
    fn validation_names_the_field() {
        let base = FleetConfig::default;
        let cases: Vec<(FleetConfig, &str)> = vec![
            (
                FleetConfig {
                    prefix: String::new(),
                    ..base()
                },
                "prefix",
            ),
            (
                FleetConfig {
                    prefix: "a b".into(),
                    ..base()
                },
                "prefix",
            ),
            (
                FleetConfig {
                    prefix: "{x}".into(),
                    ..base()
                },
                "prefix",
            ),
            (
                FleetConfig {
                    prefix: "x".repeat(65),
                    ..base()
                },
                "prefix",
            ),
            (
                FleetConfig {
                    store_timeout: Duration::ZERO,
                    ..base()
                },
                "store_timeout",
            ),
            (
                FleetConfig {
                    health_every: Duration::ZERO,
                    ..base()
                },
                "health_every",
            ),
            (
                FleetConfig {
                    store_timeout: Duration::MAX,
                    ..base()
                },
                "store_timeout",
            ),
            (
                FleetConfig {
                    probe_window: Duration::ZERO,
                    ..base()
                },
                "probe_window",
            ),
            (
                FleetConfig {
                    disconnect_after: 0,
                    ..base()
                },
                "disconnect_after",
            ),
            (
                FleetConfig {
                    reconnect_min: Duration::ZERO,
                    ..base()
                },
                "reconnect_min",
            ),
            (
                FleetConfig {
                    reconnect_max: Duration::from_millis(100),
                    ..base()
                },
                "reconnect_max",
            ),
            (
                FleetConfig {
                    ramp: Some(RampConfig {
                        duration: Duration::ZERO,
                        start_share: 0.1,
                    }),
                    ..base()
                },
                "ramp.duration",
            ),
            (
                FleetConfig {
                    ramp: Some(RampConfig {
                        duration: Duration::from_secs(1),
                        start_share: f64::NAN,
                    }),
                    ..base()
                },
                "ramp.start_share",
            ),
            (
                FleetConfig {
                    jitter: 1.0,
                    ..base()
                },
                "jitter",
            ),
            (
                FleetConfig {
                    jitter: f64::NAN,
                    ..base()
                },
                "jitter",
            ),
            (
                FleetConfig {
                    trip_together: Some(TripTogether::new(1, Duration::from_secs(30))),
                    ..base()
                },
                "trip_together.instances",
            ),
            (
                FleetConfig {
                    trip_together: Some(TripTogether::new(0, Duration::from_secs(30))),
                    ..base()
                },
                "trip_together.instances",
            ),
            (
                FleetConfig {
                    trip_together: Some(TripTogether::new(3, Duration::ZERO)),
                    ..base()
                },
                "trip_together.within",
            ),
            (
                FleetConfig {
                    trip_together: Some(TripTogether::new(3, Duration::MAX)),
                    ..base()
                },
                "trip_together.within",
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(field(&config), expected, "{config:?}");
        }
    }

    #[test]
    fn the_lease_outlives_the_half_open_timeout_by_the_probe_window_in_whole_ms() {
        let c = FleetConfig {
            probe_window: Duration::from_micros(1500),
            ..FleetConfig::default()
        };
        assert_eq!(
            c.lease_ttl(Duration::from_secs(2)).unwrap(),
            Duration::from_millis(2002)
        );
        assert_eq!(
            c.lease_ttl(Duration::MAX).unwrap_err().field(),
            "probe_window"
        );
    }
}
