//! The `[fleet]` table: where the fleet's store is and how its breakers coordinate.

use std::time::Duration;

use seawall_core::ConfigError;
use seawall_fleet::{FleetConfig, TripTogether};

/// The `[fleet]` table of a policy document (feature `fleet`): the store every
/// instance of the service shares and the coordination settings, for
/// [`Fleet`](crate::fleet::Fleet). Fields left out take
/// [`FleetConfig`]'s defaults.
///
/// ```toml
/// [fleet]
/// store = "redis://:secret@redis.internal:6379/0"    # or "local": one process only
/// prefix = "shop-v2"                # one per service and schema: fleets that must not coordinate differ
/// store_timeout = "200ms"           # every store operation; a slower one counts as the store failing
/// probe_window = "1s"               # the lease lives the breaker's half_open_timeout plus this
/// disconnect_after = 3              # store failures in a row before falling back to local breakers
/// trip_together = { instances = 3, within = "30s" }   # off unless given; instances >= 2
/// ```
///
/// Errors name the field: a `store` that is neither `"local"` nor a Redis URL
/// that parses (`fleet.store`), an empty or malformed `prefix` (`fleet.prefix`),
/// a zero `store_timeout` or `probe_window` (the lease TTL's part), a
/// `trip_together` with fewer than 2 instances or a zero window
/// (`fleet.trip_together.instances`, `fleet.trip_together.within`). A Redis URL
/// is only parsed: nothing is dialled while the document is checked. The table
/// cannot change at run time (the coordinators hold their store).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct FleetSection {
    /// `"local"` (the default: an in-process store, for one process) or the URL
    /// of a Redis or Valkey server: `redis://[user:password@]host[:port][/db]`,
    /// or `rediss://…` for TLS (needs the `redis` crate built with a TLS feature,
    /// e.g. `tokio-rustls-comp`, in the application's own dependencies; without
    /// it such a URL is refused, naming `fleet.store`).
    pub store: String,
    /// The first part of every key ([`FleetConfig::prefix`]).
    pub prefix: String,
    /// Every store operation is abandoned after this long ([`FleetConfig::store_timeout`]).
    #[serde(with = "seawall_core::duration_format")]
    pub store_timeout: Duration,
    /// How long after taking the lease its holder may start a probe
    /// ([`FleetConfig::probe_window`]).
    #[serde(with = "seawall_core::duration_format")]
    pub probe_window: Duration,
    /// Store failures in a row before falling back to local mode
    /// ([`FleetConfig::disconnect_after`]).
    pub disconnect_after: u32,
    /// The fleet trip, off unless given ([`FleetConfig::trip_together`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trip_together: Option<TripTogetherSection>,
}

/// `trip_together = { instances = 3, within = "30s" }`: see [`TripTogether`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TripTogetherSection {
    /// Distinct instances tripping within the window that trip the fleet (at least 2).
    pub instances: u32,
    /// How recent a trip must be to count, by the store's clock.
    #[serde(with = "seawall_core::duration_format")]
    pub within: Duration,
}

/// `store` meaning the in-process store.
const LOCAL: &str = "local";

impl Default for FleetSection {
    fn default() -> Self {
        let d = FleetConfig::default();
        Self {
            store: LOCAL.to_owned(),
            prefix: d.prefix,
            store_timeout: d.store_timeout,
            probe_window: d.probe_window,
            disconnect_after: d.disconnect_after,
            trip_together: None,
        }
    }
}

impl FleetSection {
    /// The coordination settings, for [`FleetBuilder::config`](crate::fleet::FleetBuilder::config).
    pub fn config(&self) -> FleetConfig {
        let mut config = FleetConfig::default();
        config.prefix.clone_from(&self.prefix);
        config.store_timeout = self.store_timeout;
        config.probe_window = self.probe_window;
        config.disconnect_after = self.disconnect_after;
        config.trip_together = self
            .trip_together
            .map(|t| TripTogether::new(t.instances, t.within));
        config
    }

    /// The Redis URL to build a `RedisStore` from; `None` for the in-process store.
    pub fn redis_url(&self) -> Option<&str> {
        (self.store != LOCAL).then_some(self.store.as_str())
    }

    /// The same settings with the store URL's password replaced by `***`, for
    /// snapshots that whoever reaches the admin routes can read.
    pub fn redacted(&self) -> Self {
        Self {
            store: redact(&self.store),
            ..self.clone()
        }
    }

    /// Every problem, each naming its field relative to the table (`store`,
    /// `trip_together.within`).
    pub fn problems(&self) -> Vec<ConfigError> {
        let mut out = Vec::new();
        if let Some(url) = self.redis_url() {
            if let Err(e) = check_url(url) {
                out.push(e);
            }
        }
        if let Err(e) = self.config().validate() {
            out.push(e);
        }
        out
    }
}

#[cfg(feature = "fleet-redis")]
fn check_url(url: &str) -> Result<(), ConfigError> {
    // Parses only; nothing is dialled.
    crate::fleet::RedisStore::new(url).map(drop).map_err(|e| {
        ConfigError::new(
            "store",
            format!("{LOCAL:?} or a Redis URL: {}", e.problem()),
        )
    })
}

#[cfg(not(feature = "fleet-redis"))]
fn check_url(url: &str) -> Result<(), ConfigError> {
    let _ = url;
    Err(ConfigError::new(
        "store",
        "a Redis store needs seawall's `fleet-redis` feature; without it only \"local\" is known",
    ))
}

/// `scheme://user:password@host…` with the password as `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let user = match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        // `redis://secret@host`: the one field is the password.
        None => "***".to_owned(),
    };
    format!("{scheme}://{user}{}", &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_a_snapshot() {
        assert_eq!(
            redact("rediss://app:s3cret@redis:6380/0"),
            "rediss://app:***@redis:6380/0"
        );
        assert_eq!(redact("redis://:s3cret@redis/"), "redis://:***@redis/");
        assert_eq!(redact("redis://s3cret@redis"), "redis://***@redis");
        assert_eq!(redact("redis://redis:6379/0"), "redis://redis:6379/0");
        assert_eq!(redact("local"), "local");
        // An `@` in the path is not a password's end.
        assert_eq!(redact("redis://host/a@b"), "redis://host/a@b");
    }
}
