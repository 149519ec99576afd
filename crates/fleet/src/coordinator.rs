//! The coordinator: a [`Fleet`] hands each coordinated breaker a probe gate and a
//! background task; calls only ever read the gate's local state.
//!
//! This file is the API (the fleet, its builder, one coordinated breaker);
//! `gate.rs` holds the probe gate and the view it shares with the task,
//! `task.rs` the task's state machine, `snapshot.rs` what a snapshot reports.

mod gate;
mod snapshot;
mod task;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use seawall_circuit_breaker::{Handle, ProbeGate};
use seawall_core::ConfigError;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::actions::{Desk, FleetSecret, WallClock};
use crate::config::{FleetConfig, TripTogether};
use crate::store::{Keys, Store, StoreError, Token};

use gate::{FleetGate, LeaseView, Shared};
pub use snapshot::{FleetSnapshot, LeaseStatus};
use task::Task;
pub(crate) use task::{next_push, sleep_until_due};

/// Coordinates circuit breakers across every instance sharing one store.
///
/// Build one per process with [`Fleet::builder`], then call
/// [`coordinate`](Self::coordinate) with the [`Handle`] of each breaker to
/// coordinate. Breakers are matched across instances by name: every instance's
/// breaker called `freight` shares one probe lease and one verdict. Cloning a
/// `Fleet` shares its store and settings.
pub struct Fleet<S> {
    pub(crate) inner: Arc<FleetInner<S>>,
}

pub(crate) struct FleetInner<S> {
    pub(crate) store: Arc<S>,
    pub(crate) config: FleetConfig,
    rng: Mutex<fastrand::Rng>,
    /// Signs and checks fleet actions; `None`: fleet actions are off.
    pub(crate) secret: Option<Arc<FleetSecret>>,
    pub(crate) clock: WallClock,
}

impl<S> FleetInner<S> {
    pub(crate) fn rng(&self) -> MutexGuard<'_, fastrand::Rng> {
        self.rng.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<S> Clone for Fleet<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S> fmt::Debug for Fleet<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Fleet`]; [`build`](Self::build) validates the settings and names the
/// field at fault.
pub struct FleetBuilder<S> {
    store: S,
    config: FleetConfig,
    seed: Option<u64>,
    secret: Option<FleetSecret>,
    clock: Option<WallClock>,
}

impl<S> fmt::Debug for FleetBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetBuilder")
            .field("config", &self.config)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl<S> Fleet<S> {
    /// Starts a builder over `store`, with the default settings.
    pub fn builder(store: S) -> FleetBuilder<S> {
        FleetBuilder {
            store,
            config: FleetConfig::default(),
            seed: None,
            secret: None,
            clock: None,
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &FleetConfig {
        &self.inner.config
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }
}

impl<S: Store> Fleet<S> {
    /// Coordinates the breaker behind `handle` with every other instance's breaker
    /// of the same name, until the returned [`Coordinated`] is dropped.
    ///
    /// Installs the fleet's probe gate on the breaker and spawns its background
    /// task on the current Tokio runtime. If the breaker has no ramp (no jitter),
    /// it is reconfigured with the fleet's `ramp` (`jitter`); `Handle::revert`
    /// would take them off again.
    ///
    /// Errors, changing nothing: no Tokio runtime (`runtime`), a lease TTL out of
    /// range (`probe_window`), a breaker that already has a probe gate
    /// (`probe_gate`), or a breaker configuration refused with the fleet's
    /// defaults (`breaker.…`).
    pub fn coordinate(&self, handle: &Handle) -> Result<Coordinated, ConfigError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            ConfigError::new(
                "runtime",
                "coordinate must be called within a Tokio runtime",
            )
        })?;
        let config = &self.inner.config;
        let keys = Keys::new(&config.prefix, handle.name())?;
        let mut breaker = handle.config();
        let ttl = config.lease_ttl(breaker.half_open_timeout)?;

        let shared = Arc::new(Shared::new(handle.name(), config));
        let gate: Arc<dyn ProbeGate> = Arc::new(FleetGate {
            shared: Arc::clone(&shared),
        });
        if let Some(previous) = handle.set_probe_gate(Some(Arc::clone(&gate))) {
            handle.set_probe_gate(Some(previous));
            return Err(ConfigError::new(
                "probe_gate",
                "the breaker already has a probe gate (is it coordinated twice?)",
            ));
        }
        let mut changed = false;
        if breaker.ramp.is_none() && config.ramp.is_some() {
            breaker.ramp = config.ramp;
            changed = true;
        }
        // Precedence: the breaker's own setting, then the fleet's, then the default.
        if breaker.jitter.is_none() {
            breaker.jitter = Some(config.jitter);
            changed = true;
        }
        if changed {
            if let Err(e) = handle.reconfigure(breaker) {
                handle.set_probe_gate(None);
                return Err(e.within("breaker"));
            }
        }
        let seed = self
            .inner
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .u64(..);
        let task = Task::new(&self.inner, handle, Arc::clone(&shared), keys, ttl, seed);
        let join = runtime.spawn(task.run());
        let release: ReleaseLease = {
            let store = Arc::clone(&self.inner.store);
            let keys = Keys::new(&config.prefix, handle.name())?;
            Box::new(move |token| {
                let (store, keys) = (Arc::clone(&store), keys.clone());
                Box::pin(async move { store.release_lease(&keys, token).await })
            })
        };
        Ok(Coordinated {
            shared,
            handle: handle.clone(),
            gate,
            task: join.abort_handle(),
            release,
            store_timeout: config.store_timeout,
            desk: Arc::new(self.clone()),
        })
    }
}

impl<S> FleetBuilder<S> {
    /// Replaces every setting (e.g. with ones loaded from a file).
    #[must_use]
    pub fn config(mut self, config: FleetConfig) -> Self {
        self.config = config;
        self
    }

    /// The key prefix (default `seawall`): fleets with different prefixes on one
    /// store do not coordinate.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.prefix = prefix.into();
        self
    }

    /// Every store operation is abandoned after this long (default 200 ms).
    #[must_use]
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.config.store_timeout = timeout;
        self
    }

    /// How long after taking the lease its holder may start a probe (default 1 s);
    /// the lease lives the breaker's half-open timeout plus this.
    #[must_use]
    pub fn probe_window(mut self, window: Duration) -> Self {
        self.config.probe_window = window;
        self
    }

    /// Store operations failing in a row before falling back to local mode (default 3).
    #[must_use]
    pub fn disconnect_after(mut self, failures: u32) -> Self {
        self.config.disconnect_after = failures;
        self
    }

    /// The pauses between attempts to rejoin: from `min`, doubling, up to `max`
    /// (default 500 ms to 30 s), jittered.
    #[must_use]
    pub fn reconnect(mut self, min: Duration, max: Duration) -> Self {
        self.config.reconnect_min = min;
        self.config.reconnect_max = max;
        self
    }

    /// How often a connected coordinator checks that the store answers (default
    /// 1 s): a dead or frozen store is reported within `disconnect_after` checks,
    /// even by a breaker that has nothing else to send.
    #[must_use]
    pub fn health_every(mut self, every: Duration) -> Self {
        self.config.health_every = every;
        self
    }

    /// How long a breaker must have been open (and for three of its open
    /// intervals) before it is suspected of being stuck open (default a minute).
    #[must_use]
    pub fn stuck_after(mut self, after: Duration) -> Self {
        self.config.stuck_after = after;
        self
    }

    /// The ramp given to coordinated breakers that have none (default 10 s from
    /// 10 %); `None` leaves them as they are.
    #[must_use]
    pub fn ramp(mut self, ramp: Option<seawall_circuit_breaker::RampConfig>) -> Self {
        self.config.ramp = ramp;
        self
    }

    /// The jitter given to coordinated breakers that have none (default 0.2);
    /// `0.0` leaves them as they are.
    #[must_use]
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.config.jitter = jitter;
        self
    }

    /// Turns the fleet trip on: once `instances` distinct instances' breakers
    /// tripped within `within` (by the store's clock), every other instance's
    /// breaker opens too. Off by default, and `instances` must be at least 2: one
    /// sick client must not open a healthy fleet (see [`TripTogether`]).
    #[must_use]
    pub fn trip_together(mut self, instances: u32, within: Duration) -> Self {
        self.config.trip_together = Some(TripTogether::new(instances, within));
        self
    }

    /// Seeds the generator of lease tokens and backoff jitter (default: from
    /// entropy), so a simulation repeats. Instances of one fleet must not share a
    /// seed: their tokens would collide.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The fleet secret that signs and checks operators' fleet actions (see
    /// [`FleetSecret::from_env`]). Without one, fleet actions are off: this
    /// instance neither reads nor applies them, and [`Fleet::act`] refuses.
    #[must_use]
    pub fn secret(mut self, secret: Option<FleetSecret>) -> Self {
        self.secret = secret;
        self
    }

    /// The wall clock fleet actions are issued and checked with (by default
    /// one read when the fleet is built).
    #[must_use]
    pub fn wall_clock(mut self, clock: WallClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Validates the settings and creates the fleet.
    pub fn build(self) -> Result<Fleet<S>, ConfigError> {
        self.config.validate()?;
        let rng = match self.seed {
            Some(seed) => fastrand::Rng::with_seed(seed),
            None => fastrand::Rng::new(),
        };
        Ok(Fleet {
            inner: Arc::new(FleetInner {
                store: Arc::new(self.store),
                config: self.config,
                rng: Mutex::new(rng),
                secret: self.secret.map(Arc::new),
                clock: self.clock.unwrap_or_default(),
            }),
        })
    }
}

/// One breaker under coordination. Dropping it stops the background task and
/// takes the probe gate off the breaker, which goes back to deciding alone (a
/// lease it held expires by its TTL).
pub struct Coordinated {
    shared: Arc<Shared>,
    handle: Handle,
    gate: Arc<dyn ProbeGate>,
    task: AbortHandle,
    /// Releases a lease of this instance's (the graceful shutdown).
    release: ReleaseLease,
    store_timeout: Duration,
    /// The fleet's operator actions (`Coordinated::act`).
    desk: Arc<dyn Desk>,
}

type ReleaseLease = Box<
    dyn Fn(Token) -> std::pin::Pin<Box<dyn Future<Output = Result<bool, StoreError>> + Send>>
        + Send
        + Sync,
>;

/// What a graceful shutdown ([`Coordinated::shutdown`], [`Capped::shutdown`](crate::Capped::shutdown)) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shutdown {
    /// Calls still running when the drain's bound ran out (0: every call ended).
    pub still_running: usize,
    /// Whether the store let go of what this instance held (its claim, its
    /// lease), or it held nothing. `false`: the store did not answer in time, and
    /// what it held leaves by its TTL.
    pub released: bool,
}

impl fmt::Debug for Coordinated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coordinated")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl Coordinated {
    pub(crate) fn desk(&self) -> &dyn Desk {
        &*self.desk
    }

    /// The coordinated breaker's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The coordinated breaker's handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Links a direct check of the dependency (`Some(true)` it passes,
    /// `Some(false)` it fails, `None` no answer yet) to the stuck-open flag: a
    /// breaker open for long while the check passes, and no other instance open,
    /// is flagged [`LocalOnly`](crate::StuckCause::LocalOnly); while it fails,
    /// [`ExternalFailure`](crate::StuckCause::ExternalFailure). Asked only while
    /// the breaker is suspected of being stuck, from the coordination's task, so
    /// it should answer at once from a check that runs elsewhere (the facade's
    /// `link_health_check` reads a health monitor's latest report). Replaces the
    /// check linked before.
    pub fn link_dependency_check(&self, check: impl Fn() -> Option<bool> + Send + Sync + 'static) {
        *self
            .shared
            .dependency_check
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(check));
    }

    /// The coordination's state and counters now.
    pub fn snapshot(&self) -> FleetSnapshot {
        self.shared.snapshot()
    }
}

impl Coordinated {
    /// A graceful shutdown, for an instance about to stop (a rolling deploy):
    /// stops the background task, hands the breaker back to itself (as dropping
    /// does), and releases the probe lease if this instance holds it, so another
    /// instance can probe at once instead of a lease TTL later. A probe still in
    /// flight runs on; its verdict is not published. A take of the lease in flight
    /// when it starts may still be applied: that lease ends by its TTL. Never
    /// fails: what it did not do is in the answer.
    pub async fn shutdown(&self) -> Shutdown {
        self.stop();
        let held = match self.shared.view().lease {
            LeaseView::Holding { token, until, .. } if Instant::now() < until => Some(token),
            _ => None,
        };
        self.shared.view().lease = LeaseView::Unknown;
        let released = match held {
            Some(token) => matches!(
                tokio::time::timeout(self.store_timeout, (self.release)(token)).await,
                Ok(Ok(_))
            ),
            None => true,
        };
        Shutdown {
            still_running: 0,
            released,
        }
    }
}

impl Drop for Coordinated {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Coordinated {
    /// Stops the task and takes the gate off the breaker (if it is still ours).
    /// A fleet action in force ends here too: nothing would end it later.
    fn stop(&self) {
        self.task.abort();
        let held = self
            .shared
            .fleet_action
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(held) = held {
            held.end(&self.handle);
        }
        if let Some(previous) = self.handle.set_probe_gate(None) {
            if !Arc::ptr_eq(&previous, &self.gate) {
                self.handle.set_probe_gate(Some(previous));
            }
        }
    }
}
