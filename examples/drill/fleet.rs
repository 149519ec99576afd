//! The drill's fleet mode (`--fleet N`): several shop instances share one store
//! and coordinate their freight breakers through it, and cap their freight
//! bulkheads fleet-wide (the `[fleet.caps.freight]` table of the policy document:
//! that many calls across all of them, not per instance), as replicas of one
//! service would. The store is a `redis-server` the drill starts on a free loopback port,
//! or, when none is on PATH, an in-process `LocalStore` (said so in the output).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use seawall::config::Policies;

use seawall::fleet::{Capped, Coordinated, Fleet, LocalStore, RedisStore};
use seawall::BoxError;

/// Ports tried before giving up on starting `redis-server` (another process may
/// take a free port between our look at it and the server's bind).
const PORT_ATTEMPTS: usize = 8;

/// The store the fleet's instances share.
pub enum FleetStore {
    /// A `redis-server` of the drill's own, killed with it.
    Redis(RedisProcess),
    /// In process: every instance lives in this one process.
    Local(LocalStore),
}

impl FleetStore {
    /// A `redis-server` if one is on PATH, else a `LocalStore`.
    pub fn start() -> Result<Self, BoxError> {
        match RedisProcess::start()? {
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
                    server.port
                )
            }
            FleetStore::Local(_) => "LocalStore, in process (no redis-server on PATH)".to_owned(),
        }
    }

    /// The `store` of the policy document's `[fleet]` table.
    pub fn url(&self) -> String {
        match self {
            FleetStore::Redis(server) => format!("redis://127.0.0.1:{}/", server.port),
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

/// A `redis-server` on 127.0.0.1: no persistence, killed when dropped.
pub struct RedisProcess {
    child: Child,
    port: u16,
}

impl RedisProcess {
    /// `Ok(None)` when `redis-server` is not on PATH.
    fn start() -> Result<Option<Self>, BoxError> {
        for _ in 0..PORT_ATTEMPTS {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let spawned = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--logfile", ""])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn();
            let mut child = match spawned {
                Ok(child) => child,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let Some(stdout) = child.stdout.take() else {
                let _ = child.kill();
                let _ = child.wait();
                continue;
            };
            let mut lines = BufReader::new(stdout).lines();
            // Ends with the output if the server exits first (the port was taken).
            let ready = lines
                .by_ref()
                .map_while(Result::ok)
                .any(|line| line.contains("Ready to accept connections"));
            // Keep draining its log, or a full pipe would stall the server.
            std::thread::spawn(move || lines.for_each(drop));
            if ready {
                return Ok(Some(Self { child, port }));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        Err(format!("redis-server did not come up on any of {PORT_ATTEMPTS} free ports").into())
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
