//! The drill's fleet mode (`--fleet N`): several shop instances share one store
//! and coordinate their freight breakers through it, and cap their freight
//! bulkheads fleet-wide (the `[fleet.caps.freight]` table of the policy document:
//! that many calls across all of them, not per instance), as replicas of one
//! service would. The store is a `redis-server` the drill starts on a free loopback port,
//! or, when none is on PATH, an in-process `LocalStore` (said so in the output).

use std::sync::Arc;

use seawall::config::Policies;

use seawall::fleet::{Capped, Coordinated, Fleet, LocalStore, RedisStore};
use seawall::BoxError;
// The workspace's own `redis-server` guard: a free loopback port, no
// persistence, killed when dropped.
use seawall_test_support::RedisServer;

/// The store the fleet's instances share.
pub enum FleetStore {
    /// A `redis-server` of the drill's own, killed with it.
    Redis(RedisServer),
    /// In process: every instance lives in this one process.
    Local(LocalStore),
}

impl FleetStore {
    /// A `redis-server` if one is on PATH, else a `LocalStore`.
    pub fn start() -> Result<Self, BoxError> {
        match RedisServer::spawn()? {
            Some(server) => Ok(FleetStore::Redis(server)),
            None => Ok(FleetStore::local()),
        }
    }

    /// The in-process store.
    pub fn local() -> Self {
        FleetStore::Local(LocalStore::new())
    }

    /// What the output says the store is.
    pub fn label(&self) -> String {
        match self {
            FleetStore::Redis(server) => {
                format!(
                    "redis-server on 127.0.0.1:{}, started by the drill",
                    server.port()
                )
            }
            FleetStore::Local(_) => "LocalStore, in process (no redis-server on PATH)".to_owned(),
        }
    }

    /// Stops the store for good, as an outage would (`SHUTDOWN NOSAVE` to the
    /// `redis-server`: every connection closes).
    pub fn stop(&self) {
        match self {
            // The server closes the connection as it exits: no answer to read.
            FleetStore::Redis(server) => drop(server.command("SHUTDOWN NOSAVE")),
            FleetStore::Local(store) => store.go_down(),
        }
    }

    /// The `store` of the policy document's `[fleet]` table.
    pub fn url(&self) -> String {
        match self {
            FleetStore::Redis(server) => server.url(),
            FleetStore::Local(_) => "local".to_owned(),
        }
    }

    /// Joins one shop instance to the fleet, with the settings of its policy
    /// document's `[fleet]` table: its freight breaker is coordinated with every
    /// other instance's, and its freight bulkhead is capped fleet-wide as
    /// `[fleet.caps.freight]` says. Each instance gets a connection of its own, as
    /// a process of its own would.
    pub fn join(&self, policies: &Policies, shop: Members<'_>) -> Result<Membership, BoxError> {
        let section = policies
            .fleet()
            .ok_or("the policy document has no [fleet] table")?;
        // Checked when the document was loaded, each bad value named by its path.
        let cap = section
            .caps
            .get("freight")
            .ok_or("the policy document has no [fleet.caps.freight] table")?
            .config()?;
        let (breaker, cap) = match (self, section.redis_url()) {
            (FleetStore::Redis(_), Some(url)) => {
                let fleet = Fleet::builder(RedisStore::new(url)?)
                    .config(section.config())
                    .build()?;
                (
                    fleet.coordinate(shop.breaker)?,
                    fleet.cap(shop.bulkhead, cap)?,
                )
            }
            (FleetStore::Local(store), None) => {
                let fleet = Fleet::builder(store.clone())
                    .config(section.config())
                    .build()?;
                (
                    fleet.coordinate(shop.breaker)?,
                    fleet.cap(shop.bulkhead, cap)?,
                )
            }
            _ => return Err("the [fleet] table names another store than the drill's".into()),
        };
        // Shown live by the shop's admin routes (`GET /admin/fleet`).
        let (breaker, cap) = (Arc::new(breaker), Arc::new(cap));
        policies.register_coordination(Arc::clone(&breaker))?;
        policies.register_cap(Arc::clone(&cap))?;
        Ok(Membership { breaker, cap })
    }
}

/// What a shop instance brings to the fleet: the handles of the freight policy's
/// layers.
#[derive(Clone, Copy)]
pub struct Members<'a> {
    pub breaker: &'a seawall::circuit_breaker::Handle,
    pub bulkhead: &'a seawall::bulkhead::Handle,
}

/// One instance's part in the fleet, also kept by its policies (for the admin
/// routes) while they live.
pub struct Membership {
    pub breaker: Arc<Coordinated>,
    /// The freight bulkhead's share of the fleet-wide cap.
    pub cap: Arc<Capped>,
}
