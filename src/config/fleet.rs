//! The `[fleet]` table: where the fleet's store is and how its breakers coordinate.

use std::collections::BTreeMap;
use std::time::Duration;

use seawall_core::ConfigError;
use seawall_fleet::{CapConfig, CapMode, FleetConfig, TripTogether};

use super::document::key;

mod status;
pub(super) use status::{fill_snapshot, FleetParts};
pub use status::{FleetStatus, PolicyFleetSnapshot};

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
///
/// [fleet.caps.freight]             # a fleet-wide cap on policy `freight`'s bulkhead
/// cap = 8                           # G: calls active at the dependency across every instance
/// renew_every = "1s"                # T: how often each instance renews its allotment
/// ttl = "3s"                        # a claim's life unrenewed; above renew_every
/// longest_call = "2s"               # the deadline bounding every call; ttl - longest_call > renew_every
/// mode = "available"                # or "divided" (the default: cap / instances last known, at least
///                                   # `floor`, default 1) or "strict" (nothing): what an instance admits cut off from the store
/// local_share = 2                   # only with "available": the slots it then admits, at most cap
/// ```
///
/// The caps live in this table, keyed by policy, rather than in each policy's
/// `bulkhead` section, because they share its nature: they need the store named
/// here, and cannot change at run time (the renewal tasks hold their settings;
/// G itself is kept by the store), while a policy's sections can be reloaded.
///
/// Errors name the field: a `store` that is neither `"local"` nor a Redis URL
/// that parses (`fleet.store`), an empty or malformed `prefix` (`fleet.prefix`),
/// a zero `store_timeout` or `probe_window` (the lease TTL's part), a
/// `trip_together` with fewer than 2 instances or a zero window
/// (`fleet.trip_together.instances`, `fleet.trip_together.within`), a cap's
/// setting (`fleet.caps.freight.ttl`, as [`CapConfig::validate`] rules), or a cap
/// on a policy that declares no bulkhead (`fleet.caps.freight`). A Redis URL
/// is only parsed: nothing is dialled while the document is checked. The table
/// cannot change at run time (the coordinators hold their store).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct FleetSection {
    /// `"local"` (the default: an in-process store, for one process) or the URL
    /// of a Redis or Valkey server: `redis://[user:password@]host[:port][/db]`,
    /// or `rediss://…` for TLS (needs seawall's feature `fleet-redis-tls`;
    /// without it such a URL is refused, naming `fleet.store`).
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
    /// Fleet-wide caps, by the name of the policy whose bulkhead each caps.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub caps: BTreeMap<String, CapSection>,
}

/// `[fleet.caps.<policy>]`: a fleet-wide cap on the policy's bulkhead, for
/// [`Fleet::cap`](crate::fleet::Fleet::cap). Only `cap` is required; the other
/// fields take [`CapConfig::new`]'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct CapSection {
    /// G: the calls active at the dependency across every instance ([`CapConfig::cap`]).
    pub cap: u32,
    /// T: how often an instance renews its claim ([`CapConfig::renew_every`]).
    #[serde(
        default = "default_renew_every",
        with = "seawall_core::duration_format"
    )]
    pub renew_every: Duration,
    /// How long a claim lives unrenewed ([`CapConfig::ttl`]).
    #[serde(default = "default_ttl", with = "seawall_core::duration_format")]
    pub ttl: Duration,
    /// The longest a call admitted under the cap runs ([`CapConfig::longest_call`]).
    #[serde(
        default = "default_longest_call",
        with = "seawall_core::duration_format"
    )]
    pub longest_call: Duration,
    /// What an instance admits without a live lease ([`CapConfig::mode`]).
    #[serde(default)]
    pub mode: CapModeSection,
    /// The slots an instance cut off from the store admits into: required with
    /// `mode = "available"`, refused otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_share: Option<u32>,
    /// The least an instance cut off from the store admits into (and what one
    /// that never reached it admits), with `mode = "divided"` only: 1 if left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<u32>,
}

/// `mode = "divided" | "strict" | "available"`: see [`CapMode`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum CapModeSection {
    /// [`CapMode::Divided`], with the section's `floor` (1 if left out): the default.
    #[default]
    Divided,
    /// [`CapMode::Strict`].
    Strict,
    /// [`CapMode::Available`], with the section's `local_share`.
    Available,
}

fn default_renew_every() -> Duration {
    CapConfig::new(1).renew_every
}

fn default_ttl() -> Duration {
    CapConfig::new(1).ttl
}

fn default_longest_call() -> Duration {
    CapConfig::new(1).longest_call
}

impl CapSection {
    /// The cap's settings, checked by [`CapConfig::validate`]; errors name the
    /// field relative to the section (`ttl`, `local_share`).
    pub fn config(&self) -> Result<CapConfig, ConfigError> {
        if self.floor.is_some() && self.mode != CapModeSection::Divided {
            return Err(ConfigError::new(
                "floor",
                "only with mode = \"divided\" (the default)",
            ));
        }
        let mode = match (self.mode, self.local_share) {
            (CapModeSection::Divided, None) => CapMode::Divided {
                floor: self.floor.unwrap_or(1),
            },
            (CapModeSection::Divided, Some(_)) => {
                return Err(ConfigError::new(
                    "local_share",
                    "only with mode = \"available\" (a divided cap admits the cap / the instances last known)",
                ))
            }
            (CapModeSection::Strict, None) => CapMode::Strict,
            (CapModeSection::Available, Some(local_share)) => CapMode::Available { local_share },
            (CapModeSection::Strict, Some(_)) => {
                return Err(ConfigError::new(
                    "local_share",
                    "only with mode = \"available\" (a strict cap admits nothing without a lease)",
                ))
            }
            (CapModeSection::Available, None) => return Err(ConfigError::new(
                "local_share",
                "mode = \"available\" needs the slots an instance admits cut off from the store",
            )),
        };
        let config = CapConfig::new(self.cap)
            .renew_every(self.renew_every)
            .ttl(self.ttl)
            .longest_call(self.longest_call)
            .mode(mode);
        config.validate()?;
        Ok(config)
    }
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
            caps: BTreeMap::new(),
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
        for (policy, cap) in &self.caps {
            if let Err(e) = cap.config() {
                out.push(e.within(&format!("caps.{}", key(policy))));
            }
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
