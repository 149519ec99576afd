//! The coordinator: a [`Fleet`] hands each coordinated breaker a probe gate and a
//! background task; calls only ever read the gate's local state.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use seawall_circuit_breaker::{
    Handle, ProbeDecision, ProbeGate, ProbeRequest, Reason, State, Transition, Verdict,
    VerdictOutcome,
};
use seawall_core::{later, ConfigError};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, Notify};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::actions::{AppliedAction, Applier, AuditEntry, Desk, FleetSecret, Held, WallClock};
use crate::config::{FleetConfig, TripTogether};
use crate::store::{
    FleetEpoch, FleetEvent, FleetVerdict, Keys, LeaseReply, LeaseRequest, ProbeResult, Store,
    StoreError, Subscription, Token, TripRecord,
};
use crate::telemetry::Telemetry;
use crate::view::{
    stuck, suspect, FleetView, InstanceReport, StuckOpen, REPORT_EVERY, REPORT_FRESH,
};

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

        let shared = Arc::new(Shared {
            name: handle.name().to_owned(),
            view: Mutex::new(View {
                lease: LeaseView::Unknown,
                connected: false,
            }),
            wake: Notify::new(),
            pending_hint: config.store_timeout.saturating_mul(2),
            connected: AtomicBool::new(false),
            fleet_epoch: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            leases_taken: AtomicU64::new(0),
            published: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            held_off: AtomicU64::new(0),
            health_checks: AtomicU64::new(0),
            store_warning: Mutex::new(None),
            trips_recorded: AtomicU64::new(0),
            fleet_trips_applied: AtomicU64::new(0),
            fleet_action: Mutex::new(None),
            actions_refused: AtomicU64::new(0),
            stuck_open: Mutex::new(None),
            dependency_check: Mutex::new(None),
            telemetry: Telemetry::new(handle.name()),
        });
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
        let mut rng = fastrand::Rng::with_seed(seed);
        let instance = Token::random(&mut rng);
        let task = Task {
            actions: Applier::new(
                self.inner.secret.clone(),
                &config.prefix,
                instance.to_string(),
                self.inner.clock,
            ),
            instance,
            report_at: Instant::now(),
            shared: Arc::clone(&shared),
            store: Arc::clone(&self.inner.store),
            keys,
            handle: handle.clone(),
            config: config.clone(),
            ttl,
            rng,
            transitions: handle.subscribe(),
            feed: None,
            connected: false,
            announced_local: false,
            failures: 0,
            reconnect_at: Some(Instant::now()),
            health_at: None,
            reconnect_delay: config.reconnect_min,
            due: None,
            want_probe: false,
            trip: None,
            baseline_due: false,
            last_verdict: FleetEpoch::ZERO,
            applied: FleetEpoch::ZERO,
            seen: FleetEpoch::ZERO,
            record_at: None,
            poll_at: None,
            fleet_trip_seen: FleetEpoch::ZERO,
            peer_trip: None,
        };
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
        let now = Instant::now();
        let lease = match self.shared.view().lease {
            LeaseView::Holding { epoch, until, .. } if now < until => LeaseStatus::Holding {
                epoch,
                remaining: until - now,
            },
            LeaseView::Elsewhere { epoch, until } if now < until => LeaseStatus::Elsewhere {
                epoch,
                remaining: until - now,
            },
            LeaseView::Maybe { until } if now < until => LeaseStatus::MaybeHeld {
                remaining: until - now,
            },
            _ => LeaseStatus::None,
        };
        let s = &self.shared;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FleetSnapshot {
            name: s.name.clone(),
            connected: s.connected.load(Ordering::Relaxed),
            lease,
            fleet_epoch: FleetEpoch(load(&s.fleet_epoch)),
            store_ops: load(&s.ops),
            store_errors: load(&s.errors),
            leases_taken: load(&s.leases_taken),
            verdicts_published: load(&s.published),
            verdicts_applied: load(&s.applied),
            probes_held_off: load(&s.held_off),
            health_checks: load(&s.health_checks),
            store_warning: s
                .store_warning
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            trips_recorded: load(&s.trips_recorded),
            fleet_trips_applied: load(&s.fleet_trips_applied),
            fleet_action: s
                .fleet_action
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map(|held| held.applied(now)),
            actions_refused: load(&s.actions_refused),
            stuck_open: s
                .stuck_open
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
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

/// A coordination's state and counters at one instant.
///
/// With feature `serde`, it serialises without its name (the policy's key names
/// it) and with the lease as flat fields: `lease` (`none`, `holding`, `elsewhere`
/// or `maybe_held`), `lease_epoch` and `lease_remaining` where known.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct FleetSnapshot {
    /// The breaker's name.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub name: String,
    /// Whether the instance coordinates through the store now (`false`: its
    /// breaker decides alone, and the coordinator tries to rejoin).
    pub connected: bool,
    /// The probe lease as this instance last saw it.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub lease: LeaseStatus,
    /// The highest fleet epoch this instance has seen.
    pub fleet_epoch: FleetEpoch,
    /// Store operations of the protocol issued (none is ever issued by a
    /// call); health checks, reports to the fleet's view and fleet actions'
    /// reads and audit entries are not counted here (their failures are in
    /// `store_errors`).
    pub store_ops: u64,
    /// Store operations that failed or timed out.
    pub store_errors: u64,
    /// Probe leases this instance took.
    pub leases_taken: u64,
    /// Verdicts this instance published (as lease holder).
    pub verdicts_published: u64,
    /// Verdicts from other instances that changed this instance's breaker.
    pub verdicts_applied: u64,
    /// Times the gate held a due probe off (the lease was elsewhere, maybe held,
    /// or not yet known).
    pub probes_held_off: u64,
    /// Health checks sent ([`Store::touch`], every `health_every` while
    /// connected); not counted in `store_ops`, their failures are in `store_errors`.
    pub health_checks: u64,
    /// What the store says an operator must fix in its setup ([`Store::warning`]:
    /// on Redis, an eviction policy other than `noeviction`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub store_warning: Option<String>,
    /// This instance's own trips recorded in the store for the fleet trip.
    pub trips_recorded: u64,
    /// Fleet trips that opened this instance's closed breaker.
    pub fleet_trips_applied: u64,
    /// The operators' fleet action holding this breaker now, if any.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub fleet_action: Option<AppliedAction>,
    /// Fleet actions this instance refused (unsigned, badly signed, replayed,
    /// too long-lived, malformed); each is in the audit log.
    pub actions_refused: u64,
    /// Set when this breaker has been open for long (three open intervals and
    /// a minute) with the evidence of why, or forced open for over 15 min; as
    /// of the last report (every 5 s).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub stuck_open: Option<StuckOpen>,
}

/// The probe lease as one instance last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// None known.
    None,
    /// This instance holds it.
    Holding {
        /// The lease's epoch.
        epoch: FleetEpoch,
        /// What remains of it, by this instance's clock, measured from when the
        /// take was sent (so never more than the store's).
        remaining: Duration,
    },
    /// Another instance holds it.
    Elsewhere {
        /// The lease's epoch.
        epoch: FleetEpoch,
        /// What remained of it when last seen, counted down since.
        remaining: Duration,
    },
    /// A take of this instance's timed out: it may have been applied, so the
    /// instance waits out its TTL without probing.
    MaybeHeld {
        /// What remains of the wait.
        remaining: Duration,
    },
}

#[cfg(feature = "serde")]
impl serde::Serialize for LeaseStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The lease as the flat fields of a snapshot.
        #[derive(serde::Serialize)]
        struct Fields {
            lease: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            lease_epoch: Option<u64>,
            #[serde(
                with = "seawall_core::duration_format::option",
                skip_serializing_if = "Option::is_none"
            )]
            lease_remaining: Option<Duration>,
        }
        let (lease, lease_epoch, lease_remaining) = match *self {
            LeaseStatus::None => ("none", None, None),
            LeaseStatus::Holding { epoch, remaining } => {
                ("holding", Some(epoch.0), Some(remaining))
            }
            LeaseStatus::Elsewhere { epoch, remaining } => {
                ("elsewhere", Some(epoch.0), Some(remaining))
            }
            LeaseStatus::MaybeHeld { remaining } => ("maybe_held", None, Some(remaining)),
        };
        Fields {
            lease,
            lease_epoch,
            lease_remaining,
        }
        .serialize(serializer)
    }
}

// ----- state shared by the gate and the task ------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseView {
    Unknown,
    Holding {
        token: Token,
        epoch: FleetEpoch,
        /// A probe may start until then.
        probe_until: Instant,
        /// The lease ends then (measured from the take's sending).
        until: Instant,
        /// The window has passed and was dealt with.
        window_over: bool,
    },
    Elsewhere {
        epoch: FleetEpoch,
        until: Instant,
    },
    Maybe {
        until: Instant,
    },
}

impl LeaseView {
    fn until(&self) -> Option<Instant> {
        match *self {
            LeaseView::Unknown => None,
            LeaseView::Holding { until, .. }
            | LeaseView::Elsewhere { until, .. }
            | LeaseView::Maybe { until } => Some(until),
        }
    }
}

#[derive(Debug)]
struct View {
    lease: LeaseView,
    connected: bool,
}

struct Shared {
    /// The fleet action in force, for the snapshot.
    fleet_action: Mutex<Option<Held<State>>>,
    actions_refused: AtomicU64,
    stuck_open: Mutex<Option<StuckOpen>>,
    /// The dependency's direct check, once linked: asked when the breaker is
    /// suspected of being stuck open.
    dependency_check: Mutex<Option<DependencyCheck>>,
    name: String,
    view: Mutex<View>,
    wake: Notify,
    /// The hold given while the coordinator finds out who holds the lease.
    pending_hint: Duration,
    connected: AtomicBool,
    fleet_epoch: AtomicU64,
    ops: AtomicU64,
    errors: AtomicU64,
    leases_taken: AtomicU64,
    published: AtomicU64,
    applied: AtomicU64,
    held_off: AtomicU64,
    health_checks: AtomicU64,
    store_warning: Mutex<Option<String>>,
    trips_recorded: AtomicU64,
    fleet_trips_applied: AtomicU64,
    telemetry: Telemetry,
}

/// A direct check of the dependency: `Some(true)` passing, `Some(false)` failing,
/// `None` no answer yet.
type DependencyCheck = Arc<dyn Fn() -> Option<bool> + Send + Sync>;

impl Shared {
    /// What the linked dependency check says now (called without the lock held).
    fn dependency_check(&self) -> Option<bool> {
        let check = self
            .dependency_check
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        check.and_then(|check| check())
    }

    fn view(&self) -> MutexGuard<'_, View> {
        // Nothing panics while holding it; a poisoned lock is still consistent.
        self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The probe gate installed on a coordinated breaker. Runs under the breaker's
/// lock: reads the view, maybe wakes the task, answers.
struct FleetGate {
    shared: Arc<Shared>,
}

impl ProbeGate for FleetGate {
    fn check(&self, probe: &ProbeRequest) -> ProbeDecision {
        let now = probe.now;
        let view = self.shared.view();
        let hold = match view.lease {
            LeaseView::Holding {
                probe_until, until, ..
            } if now < until => {
                if now < probe_until {
                    return ProbeDecision::Allow;
                }
                until - now
            }
            LeaseView::Elsewhere { until, .. } | LeaseView::Maybe { until } if now < until => {
                until - now
            }
            _ if !view.connected => return ProbeDecision::Allow,
            _ => {
                self.shared.wake.notify_one();
                self.shared.pending_hint
            }
        };
        drop(view);
        self.shared.held_off.fetch_add(1, Ordering::Relaxed);
        ProbeDecision::HoldOff(hold)
    }
}

// ----- the background task --------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Trip {
    /// The breaker's epoch at the trip.
    epoch: u32,
    /// Verdicts up to this fleet epoch are not newer than the trip.
    baseline: FleetEpoch,
}

struct Task<S> {
    /// The operators' fleet actions on this breaker.
    actions: Applier<State>,
    /// When this instance next reports its breaker to the fleet's view.
    report_at: Instant,
    shared: Arc<Shared>,
    store: Arc<S>,
    keys: Keys,
    handle: Handle,
    config: FleetConfig,
    ttl: Duration,
    rng: fastrand::Rng,
    transitions: broadcast::Receiver<Transition>,
    feed: Option<Subscription>,
    connected: bool,
    announced_local: bool,
    /// Store operations failed in a row.
    failures: u32,
    reconnect_at: Option<Instant>,
    reconnect_delay: Duration,
    /// When the next health check is due (while connected).
    health_at: Option<Instant>,
    /// When to reconcile (and take the lease if a probe is wanted).
    due: Option<Instant>,
    /// The breaker wants to probe: its interval ended, or its gate was asked.
    want_probe: bool,
    trip: Option<Trip>,
    /// The read that fixes the trip's baseline is due.
    baseline_due: bool,
    /// The highest verdict epoch seen.
    last_verdict: FleetEpoch,
    /// The highest verdict epoch acted on (or published by this instance).
    applied: FleetEpoch,
    /// The highest fleet epoch seen (sent with every take).
    seen: FleetEpoch,
    /// This instance's id in the store's record of trips (fleet trip only).
    instance: Token,
    /// When to record the current trip (fleet trip only; retried on failure).
    record_at: Option<Instant>,
    /// When a closed breaker next reads the fleet trip (fleet trip only).
    poll_at: Option<Instant>,
    /// The highest fleet trip epoch seen (acted on or not).
    fleet_trip_seen: FleetEpoch,
    /// The fleet trip that has just opened the breaker: the trip it starts is
    /// not recorded, and only verdicts newer than the fleet trip apply to it.
    peer_trip: Option<FleetEpoch>,
}

/// The next push of `feed`; never, without one.
pub(crate) async fn next_push(feed: &mut Option<Subscription>) -> Option<FleetEvent> {
    match feed {
        Some(feed) => feed.next().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`; never, without one.
pub(crate) async fn sleep_until_due(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl<S: Store> Task<S> {
    async fn run(mut self) {
        self.resync();
        loop {
            self.step().await;
            let wake = self.next_wake();
            tokio::select! {
                biased;
                t = self.transitions.recv() => match t {
                    Ok(t) => self.on_transition(Some(t)).await,
                    Err(RecvError::Lagged(_)) => self.on_transition(None).await,
                    // The breaker is gone.
                    Err(RecvError::Closed) => return,
                },
                pushed = next_push(&mut self.feed) => match pushed {
                    Some(FleetEvent::Verdict(verdict)) => {
                        self.consider(verdict);
                    }
                    Some(FleetEvent::Tripped(epoch)) => {
                        self.consider_fleet_trip(epoch);
                    }
                    // A cap's news, never pushed on a breaker's channel.
                    Some(FleetEvent::SlotsFreed(_)) => {}
                    None => {
                        self.feed = None;
                        let e = StoreError::Unavailable("the subscription ended".into());
                        self.count_error("subscription", &e);
                        if self.connected {
                            self.go_local(&e);
                        }
                    }
                },
                () = self.shared.wake.notified() => self.on_asked(),
                () = sleep_until_due(wake) => {}
            }
        }
    }

    /// Does whatever is due now: rejoin, the trip's baseline read, the window's end,
    /// a reconcile (and lease take).
    async fn step(&mut self) {
        for _ in 0..8 {
            let now = Instant::now();
            self.expire_view(now);
            self.expire_actions(now).await;
            if !self.connected {
                if self.reconnect_at.is_some_and(|at| at <= now) {
                    self.reconnect().await;
                    continue;
                }
                return;
            }
            if self.baseline_due {
                self.baseline_due = false;
                self.read_baseline().await;
                continue;
            }
            if self.health_at.is_some_and(|at| at <= now) {
                self.health_at = Some(later(now, self.config.health_every));
                self.health_check().await;
                continue;
            }
            if let LeaseView::Holding {
                token,
                probe_until,
                window_over: false,
                ..
            } = self.lease()
            {
                if now >= probe_until {
                    self.window_ended(token).await;
                    continue;
                }
            }
            if self.due.is_some_and(|at| at <= now) {
                self.due = None;
                self.attempt().await;
                continue;
            }
            if self.record_at.is_some_and(|at| at <= now) {
                self.record_at = None;
                self.record_trip().await;
                continue;
            }
            if self.trip.is_none() && self.poll_at.is_some_and(|at| at <= now) {
                self.poll_at = Some(later(now, self.poll_delay()));
                self.poll_fleet_trip().await;
                continue;
            }
            return;
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        let mut at = |t: Option<Instant>| {
            if let Some(t) = t {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        at(self.actions.due());
        if self.connected {
            at(self.due);
            at(self.record_at);
            at(self.health_at);
            if self.trip.is_none() {
                at(self.poll_at);
            }
            if self.baseline_due {
                at(Some(Instant::now()));
            }
        } else {
            at(self.reconnect_at);
        }
        let lease = self.lease();
        at(lease.until());
        if let LeaseView::Holding {
            probe_until,
            window_over: false,
            ..
        } = lease
        {
            at(Some(probe_until));
        }
        wake
    }

    // ----- events ----------------------------------------------------------------

    async fn on_transition(&mut self, t: Option<Transition>) {
        if let LeaseView::Holding { token, .. } = self.lease() {
            let finished = match t {
                // A probe a rehearsal's fault answered says nothing of the
                // dependency: the lease ends without a verdict for the fleet.
                Some(t) if t.from == State::HalfOpen && t.rehearsal => Some(None),
                Some(t) if t.from == State::HalfOpen => match (t.to, t.reason) {
                    (State::Closed, Reason::ProbesSucceeded) => Some(Some(ProbeResult::Succeeded)),
                    (State::Open, Reason::ProbeFailed | Reason::ProbeTimedOut) => {
                        Some(Some(ProbeResult::Failed))
                    }
                    (State::ForcedOpen | State::ForcedClosed | State::Disabled, _)
                    | (_, Reason::Reset) => Some(None),
                    _ => None,
                },
                Some(t) if t.to.is_forced() || t.reason == Reason::Reset => Some(None),
                Some(_) => None,
                // Missed transitions: judge by the state the probe left behind.
                None => match self.handle.state() {
                    State::Closed => Some(Some(ProbeResult::Succeeded)),
                    State::Open => Some(Some(ProbeResult::Failed)),
                    State::HalfOpen => None,
                    State::ForcedOpen | State::ForcedClosed | State::Disabled => Some(None),
                },
            };
            if let Some(result) = finished {
                self.finish_lease(token, result).await;
            }
        }
        self.resync();
    }

    fn on_asked(&mut self) {
        self.want_probe = true;
        if self.connected && self.due.is_none() && self.trip.is_some() {
            self.due = Some(Instant::now());
        }
    }

    /// Applies `verdict` if it is newer than the trip and than anything acted on.
    /// Returns whether it changed the breaker.
    fn consider(&mut self, verdict: FleetVerdict) -> bool {
        self.see(verdict.epoch);
        self.last_verdict = self.last_verdict.max(verdict.epoch);
        let Some(trip) = self.trip else {
            return false;
        };
        if verdict.epoch <= trip.baseline.max(self.applied) {
            return false;
        }
        self.applied = verdict.epoch;
        match self.lease() {
            LeaseView::Elsewhere { epoch, .. } if epoch <= verdict.epoch => {
                self.set_lease(LeaseView::Unknown);
            }
            LeaseView::Holding { epoch, .. } if epoch < verdict.epoch => {
                // Only after the store lost our lease: it ends by its TTL.
                self.set_lease(LeaseView::Unknown);
            }
            _ => {}
        }
        let outcome = self.handle.apply_verdict(
            match verdict.result {
                ProbeResult::Succeeded => Verdict::Close,
                ProbeResult::Failed => Verdict::Reopen,
            },
            trip.epoch,
        );
        let applied = outcome == VerdictOutcome::Applied;
        if applied {
            self.shared.applied.fetch_add(1, Ordering::Relaxed);
        }
        self.resync();
        applied
    }

    /// Follows the breaker: its trip, and when its open interval ends.
    fn resync(&mut self) {
        let snap = self.handle.snapshot();
        let now = Instant::now();
        match snap.trip_epoch {
            Some(epoch) => {
                if self.trip.map(|t| t.epoch) != Some(epoch) {
                    // Opened by a fleet trip: verdicts from before it are old news,
                    // and the trip is the fleet's, not one to count.
                    let peer_trip = self.peer_trip.take();
                    self.trip = Some(Trip {
                        epoch,
                        baseline: self.last_verdict.max(peer_trip.unwrap_or_default()),
                    });
                    self.baseline_due = true;
                    // A rehearsal's trip is this instance's alone: no evidence for
                    // tripping the fleet together.
                    self.record_at = match (peer_trip, self.config.trip_together) {
                        (None, Some(_)) if !snap.rehearsal_trip => Some(now),
                        _ => None,
                    };
                }
                match snap.state {
                    State::Open => {
                        let end = later(now, snap.retry_after.unwrap_or_default());
                        self.due = Some(end);
                        self.want_probe = true;
                    }
                    State::HalfOpen if self.due.is_none() && self.lease() == LeaseView::Unknown => {
                        self.due = Some(now);
                        self.want_probe = true;
                    }
                    _ => {}
                }
            }
            None => {
                self.trip = None;
                self.due = None;
                self.want_probe = false;
                self.baseline_due = false;
                self.record_at = None;
                self.peer_trip = None;
                if self.config.trip_together.is_some() && self.poll_at.is_none() {
                    self.poll_at = Some(later(now, self.poll_delay()));
                }
                if !matches!(self.lease(), LeaseView::Holding { .. }) {
                    self.set_lease(LeaseView::Unknown);
                }
            }
        }
    }

    /// Opens the closed breaker if `epoch` is a fleet trip newer than every
    /// verdict and fleet trip seen. Returns whether it did.
    fn consider_fleet_trip(&mut self, epoch: FleetEpoch) -> bool {
        self.see(epoch);
        if self.config.trip_together.is_none()
            || epoch <= self.fleet_trip_seen.max(self.last_verdict)
        {
            return false;
        }
        self.fleet_trip_seen = epoch;
        if self.trip.is_some() || self.handle.trip_with_peers() != VerdictOutcome::Applied {
            // Already in a trip of its own, or held by an operator.
            return false;
        }
        self.shared
            .fleet_trips_applied
            .fetch_add(1, Ordering::Relaxed);
        self.peer_trip = Some(epoch);
        self.resync();
        true
    }

    // ----- protocol steps --------------------------------------------------------

    /// Records this instance's trip (made on its own evidence) for the fleet trip.
    async fn record_trip(&mut self) {
        let Some(together) = self.config.trip_together else {
            return;
        };
        let record = TripRecord::new(
            self.instance,
            together.within,
            together.instances,
            self.seen,
        );
        match self.op(self.store.record_trip(&self.keys, record)).await {
            Ok(reply) => {
                self.ok();
                self.shared.trips_recorded.fetch_add(1, Ordering::Relaxed);
                if let Some(epoch) = reply.fleet_trip {
                    self.see(epoch);
                    self.fleet_trip_seen = self.fleet_trip_seen.max(epoch);
                }
            }
            Err(e) => {
                // Retried while the trip lasts: recording is idempotent, so a
                // timed-out record applied later counts once.
                if self.trip.is_some() {
                    let pause = self.jittered(self.config.store_timeout);
                    self.record_at = Some(later(Instant::now(), pause));
                }
                self.failed("record_trip", &e);
            }
        }
    }

    /// A closed breaker's periodic read of the fleet trip, for a push it missed.
    async fn poll_fleet_trip(&mut self) {
        match self.op(self.store.read_fleet_trip(&self.keys)).await {
            Ok(fleet_trip) => {
                self.ok();
                if let Some(epoch) = fleet_trip {
                    self.consider_fleet_trip(epoch);
                }
            }
            Err(e) => self.failed("read_fleet_trip", &e),
        }
    }

    /// Between a quarter and a half of the fleet trip's window: a fleet trip,
    /// kept a whole window, is read at least once by every closed breaker.
    fn poll_delay(&mut self) -> Duration {
        let within = self
            .config
            .trip_together
            .map_or(Duration::from_secs(1), |t| t.within);
        (within / 4).mul_f64(1.0 + self.rng.f64())
    }

    /// At the end of the local interval (or when asked): reconcile by a read, then
    /// take the lease if a probe is wanted.
    async fn attempt(&mut self) {
        let read = self.op(self.store.read_verdict(&self.keys)).await;
        match read {
            Ok(verdict) => {
                // Not counted as the store working again: a store that answers
                // reads but never a take must still end in local mode.
                if let Some(verdict) = verdict {
                    if self.consider(verdict) {
                        return;
                    }
                }
            }
            Err(e) => return self.failed("read_verdict", &e),
        }
        let now = Instant::now();
        if self.trip.is_none()
            || !self.want_probe
            || self.lease().until().is_some_and(|until| now < until)
        {
            return;
        }
        if self.handle.state() != State::HalfOpen {
            // Not due yet (or no longer tripped).
            return self.resync();
        }
        let token = Token::random(&mut self.rng);
        let sent = Instant::now();
        let request = LeaseRequest::new(token, self.ttl, self.seen);
        match self.op(self.store.take_lease(&self.keys, request)).await {
            Ok(LeaseReply::Taken { epoch }) => {
                self.ok();
                self.see(epoch);
                self.want_probe = false;
                self.shared.leases_taken.fetch_add(1, Ordering::Relaxed);
                self.set_lease(LeaseView::Holding {
                    token,
                    epoch,
                    probe_until: later(sent, self.config.probe_window),
                    until: later(sent, self.ttl),
                    window_over: false,
                });
            }
            Ok(LeaseReply::Held { epoch, remaining }) => {
                self.ok();
                self.see(epoch);
                self.want_probe = false;
                // A store (or an instance of another release) may answer any
                // remaining time: never wait longer than a lease of ours lives.
                let now = Instant::now();
                self.set_lease(LeaseView::Elsewhere {
                    epoch,
                    until: later(now, remaining.min(self.ttl)),
                });
            }
            Err(StoreError::TimedOut) => {
                // Maybe applied: maybe ours. Do not probe; let its TTL run out.
                self.set_lease(LeaseView::Maybe {
                    until: later(sent, self.ttl),
                });
                self.failed("take_lease", &StoreError::TimedOut);
            }
            Err(e) => self.failed("take_lease", &e),
        }
        self.handle.recheck_probe_gate();
    }

    /// The holder's probe finished: publish what it found, then release the lease.
    async fn finish_lease(&mut self, token: Token, result: Option<ProbeResult>) {
        let epoch = match self.lease() {
            LeaseView::Holding { epoch, .. } => epoch,
            _ => return,
        };
        self.set_lease(LeaseView::Unknown);
        // Our own verdict, pushed back to us, must not act twice.
        self.applied = self.applied.max(epoch);
        self.last_verdict = self.last_verdict.max(epoch);
        if let Some(result) = result {
            match self
                .op(self.store.publish_verdict(&self.keys, token, result))
                .await
            {
                Ok(published) => {
                    self.ok();
                    if published.is_some() {
                        self.shared.published.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => self.failed("publish_verdict", &e),
            }
        }
        match self.op(self.store.release_lease(&self.keys, token)).await {
            Ok(_) => self.ok(),
            Err(e) => self.failed("release_lease", &e),
        }
    }

    /// The holder's probe window passed: if no probe went out (no call came), give
    /// the lease back so another instance can probe.
    async fn window_ended(&mut self, token: Token) {
        if let LeaseView::Holding {
            token,
            epoch,
            probe_until,
            until,
            ..
        } = self.lease()
        {
            self.set_lease(LeaseView::Holding {
                token,
                epoch,
                probe_until,
                until,
                window_over: true,
            });
        }
        let snap = self.handle.snapshot();
        if snap.probes_in_flight > 0 || snap.state != State::HalfOpen {
            return;
        }
        self.set_lease(LeaseView::Unknown);
        match self.op(self.store.release_lease(&self.keys, token)).await {
            Ok(_) => self.ok(),
            Err(e) => self.failed("release_lease", &e),
        }
        self.handle.recheck_probe_gate();
    }

    /// After a trip: verdicts already stored are not newer than it.
    async fn read_baseline(&mut self) {
        match self.op(self.store.read_verdict(&self.keys)).await {
            Ok(verdict) => {
                if let Some(v) = verdict {
                    self.see(v.epoch);
                    self.last_verdict = self.last_verdict.max(v.epoch);
                    if let Some(trip) = &mut self.trip {
                        trip.baseline = trip.baseline.max(v.epoch);
                    }
                }
            }
            Err(e) => self.failed("read_verdict", &e),
        }
    }

    /// Subscribes (if the subscription is gone) and reconciles by a read; on
    /// success the instance coordinates again.
    async fn reconnect(&mut self) {
        self.reconnect_at = None;
        if self.feed.is_none() {
            match self.op(self.store.subscribe(&self.keys)).await {
                Ok(feed) => self.feed = Some(feed),
                Err(e) => return self.rejoin_failed("subscribe", &e),
            }
        }
        match self.op(self.store.read_verdict(&self.keys)).await {
            Ok(verdict) => {
                self.connected = true;
                self.announced_local = false;
                self.failures = 0;
                self.reconnect_delay = self.config.reconnect_min;
                self.shared.view().connected = true;
                self.shared.connected.store(true, Ordering::Relaxed);
                self.shared.telemetry.joined(&self.shared.name);
                self.health_at = Some(later(Instant::now(), self.config.health_every));
                if let Some(verdict) = verdict {
                    self.consider(verdict);
                }
                self.resync();
                if self.lease() == LeaseView::Unknown && self.trip.is_some() {
                    self.due = Some(Instant::now());
                }
                if self.config.trip_together.is_some() {
                    // A fleet trip pushed while away: read it now.
                    self.poll_at = Some(Instant::now());
                }
                self.handle.recheck_probe_gate();
            }
            Err(e) => self.rejoin_failed("read_verdict", &e),
        }
    }

    /// Whether the store still answers ([`Store::touch`]: it also keeps the
    /// keys alive, raises the epoch counter to what this instance has seen, and
    /// reconciles). A failure counts as any failed operation (`disconnect_after`
    /// of them in a row: local mode). An answer ends a run of failures only
    /// while the breaker is closed: a store that answers these but never a take
    /// must still end in local mode.
    async fn health_check(&mut self) {
        self.shared.health_checks.fetch_add(1, Ordering::Relaxed);
        let touch = self.store.touch(&self.keys, self.seen);
        let answer = tokio::time::timeout(self.config.store_timeout, touch).await;
        match answer.unwrap_or(Err(StoreError::TimedOut)) {
            Ok(verdict) => {
                if self.trip.is_none() {
                    self.ok();
                }
                *self
                    .shared
                    .store_warning
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = self.store.warning();
                if let Some(verdict) = verdict {
                    self.consider(verdict);
                }
                self.read_actions().await;
                if Instant::now() >= self.report_at {
                    self.report_at = later(Instant::now(), REPORT_EVERY);
                    self.report().await;
                }
            }
            Err(e) => self.failed("touch", &e),
        }
    }

    /// Reports this instance's breaker to the fleet's view, and decides
    /// whether it is stuck open (reading the view only when it is suspect).
    async fn report(&mut self) {
        let snapshot = self.handle.snapshot();
        let me = self.instance.to_string();
        let now_ms = self.actions.now_ms();
        let stuck_after = self.config.stuck_after;
        let (view, check) = if suspect(&snapshot, stuck_after) {
            let read = self.store.read_reports(&self.keys);
            let read = self.beside("read_reports", read).await;
            let view = read.map(|read| FleetView::from_reports(&read, now_ms));
            (view, self.shared.dependency_check())
        } else {
            (None, None)
        };
        // Decided first, so that the report carries the flag to the fleet's view.
        let flag = stuck(&snapshot, &me, view.as_ref(), check, stuck_after);
        let action = self.actions.in_force().map(|held| held.action.id);
        let record =
            InstanceReport::of(me.clone(), &snapshot, action, flag.clone(), now_ms).encode();
        let fresh = u64::try_from(REPORT_FRESH.as_millis()).unwrap_or(u64::MAX);
        let write = self.store.report(
            &self.keys,
            &me,
            record,
            now_ms,
            now_ms.saturating_sub(fresh),
        );
        self.beside("report", write).await;
        let was = std::mem::replace(
            &mut *self
                .shared
                .stuck_open
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            flag.clone(),
        );
        self.shared
            .telemetry
            .stuck_open(&self.shared.name, was.as_ref(), flag.as_ref());
    }

    /// Reads the operators' fleet actions (when this fleet has a secret to
    /// check them with) and applies the new valid ones; writes the audit.
    async fn read_actions(&mut self) {
        if self.actions.off() {
            return;
        }
        let read = self.store.read_actions(&self.keys);
        let Some(read) = self.beside("read_actions", read).await else {
            return;
        };
        let audit = self.actions.consider(&self.handle, read);
        self.actions_changed(audit).await;
    }

    /// Ends the fleet action in force if it is due.
    async fn expire_actions(&mut self, now: Instant) {
        if let Some(entry) = self.actions.expire(&self.handle, now) {
            self.actions_changed(vec![entry]).await;
        }
    }

    /// Publishes the fleet action in force to the snapshot, logs and audits.
    async fn actions_changed(&mut self, audit: Vec<AuditEntry>) {
        *self
            .shared
            .fleet_action
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = self.actions.in_force();
        self.shared
            .actions_refused
            .store(self.actions.refused, Ordering::Relaxed);
        for entry in audit {
            self.shared
                .telemetry
                .fleet_action(&self.shared.name, &entry);
            let write = self.store.audit(&self.keys, entry.encode());
            self.beside("audit", write).await;
        }
    }

    fn rejoin_failed(&mut self, op: &'static str, e: &StoreError) {
        self.count_error(op, e);
        if !self.announced_local {
            self.announced_local = true;
            self.shared.telemetry.went_local(&self.shared.name, e);
        }
        let delay = self.reconnect_delay;
        self.reconnect_delay = delay.saturating_mul(2).min(self.config.reconnect_max);
        self.reconnect_at = Some(later(Instant::now(), self.jittered(delay)));
    }

    // ----- store trouble ---------------------------------------------------------

    fn ok(&mut self) {
        self.failures = 0;
    }

    fn count_error(&self, op: &'static str, e: &StoreError) {
        self.shared.errors.fetch_add(1, Ordering::Relaxed);
        self.shared.telemetry.store_error(&self.shared.name, op, e);
    }

    fn failed(&mut self, op: &'static str, e: &StoreError) {
        self.count_error(op, e);
        self.failures = self.failures.saturating_add(1);
        if !self.connected {
            return;
        }
        if self.failures >= self.config.disconnect_after {
            self.go_local(e);
        } else if self.trip.is_some() {
            let pause = self.jittered(self.config.store_timeout);
            self.due = Some(later(Instant::now(), pause));
        }
    }

    /// Falls back to the local breaker: its own interval, its own probe, with jitter.
    fn go_local(&mut self, e: &StoreError) {
        self.connected = false;
        self.health_at = None;
        self.shared.view().connected = false;
        self.shared.connected.store(false, Ordering::Relaxed);
        if !self.announced_local {
            self.announced_local = true;
            self.shared.telemetry.went_local(&self.shared.name, e);
        }
        self.due = None;
        self.reconnect_delay = self.config.reconnect_min;
        let pause = self.jittered(self.config.reconnect_min);
        self.reconnect_at = Some(later(Instant::now(), pause));
        // Another instance may have taken the lease where we can no longer see it:
        // wait out one TTL before probing alone.
        if self.trip.is_some() && self.lease() == LeaseView::Unknown {
            self.set_lease(LeaseView::Maybe {
                until: later(Instant::now(), self.ttl),
            });
        }
        self.handle.recheck_probe_gate();
    }

    // ----- small helpers ---------------------------------------------------------

    async fn op<T>(
        &self,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.shared.ops.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.config.store_timeout, op).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::TimedOut),
        }
    }

    /// An operation beside the protocol (reports, fleet actions, audit), under
    /// the store timeout: like a health check, not counted in `store_ops`, and
    /// a failure is counted and logged but changes no mode (the health check
    /// decides whether the store is gone).
    async fn beside<T>(
        &self,
        what: &'static str,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Option<T> {
        let result = tokio::time::timeout(self.config.store_timeout, op)
            .await
            .unwrap_or(Err(StoreError::TimedOut));
        result.map_err(|e| self.count_error(what, &e)).ok()
    }

    fn see(&mut self, epoch: FleetEpoch) {
        self.seen = self.seen.max(epoch);
        self.shared
            .fleet_epoch
            .fetch_max(epoch.0, Ordering::Relaxed);
    }

    /// `d` stretched or shrunk by up to half, at random.
    fn jittered(&mut self, d: Duration) -> Duration {
        d.mul_f64(0.5 + self.rng.f64())
    }

    fn lease(&self) -> LeaseView {
        self.shared.view().lease
    }

    fn set_lease(&self, lease: LeaseView) {
        self.shared.view().lease = lease;
    }

    /// A lease view that has run out is forgotten; a reconcile follows.
    fn expire_view(&mut self, now: Instant) {
        if let Some(until) = self.lease().until() {
            if now >= until {
                self.set_lease(LeaseView::Unknown);
                if self.trip.is_some() {
                    self.due = Some(now);
                }
            }
        }
    }
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    fn snapshot(lease: LeaseStatus) -> FleetSnapshot {
        FleetSnapshot {
            name: "quotes".to_owned(),
            connected: true,
            lease,
            fleet_epoch: FleetEpoch(7),
            store_ops: 12,
            store_errors: 1,
            leases_taken: 2,
            verdicts_published: 2,
            verdicts_applied: 1,
            probes_held_off: 3,
            health_checks: 5,
            store_warning: None,
            trips_recorded: 4,
            fleet_trips_applied: 0,
            fleet_action: None,
            actions_refused: 0,
            stuck_open: None,
        }
    }

    #[test]
    fn a_snapshot_serialises_with_the_lease_as_flat_fields_and_without_its_name() {
        let holding = snapshot(LeaseStatus::Holding {
            epoch: FleetEpoch(7),
            remaining: Duration::from_secs(2),
        });
        let expected = serde_json::json!({
            "connected": true,
            "lease": "holding",
            "lease_epoch": 7,
            "lease_remaining": "2s",
            "fleet_epoch": 7,
            "store_ops": 12,
            "store_errors": 1,
            "leases_taken": 2,
            "verdicts_published": 2,
            "verdicts_applied": 1,
            "probes_held_off": 3,
            "health_checks": 5,
            "trips_recorded": 4,
            "fleet_trips_applied": 0,
            "actions_refused": 0,
        });
        assert_eq!(serde_json::to_value(&holding).unwrap(), expected);
    }

    #[test]
    fn each_lease_status_names_itself_and_only_what_it_knows() {
        let cases = [
            (LeaseStatus::None, "none", None, None),
            (
                LeaseStatus::Elsewhere {
                    epoch: FleetEpoch(3),
                    remaining: Duration::from_millis(250),
                },
                "elsewhere",
                Some(3),
                Some("250ms"),
            ),
            (
                LeaseStatus::MaybeHeld {
                    remaining: Duration::from_secs(1),
                },
                "maybe_held",
                None,
                Some("1s"),
            ),
        ];
        for (lease, name, epoch, remaining) in cases {
            let json = serde_json::to_value(snapshot(lease)).unwrap();
            assert_eq!(json["lease"], name);
            assert_eq!(json.get("lease_epoch").and_then(|v| v.as_u64()), epoch);
            assert_eq!(
                json.get("lease_remaining").and_then(|v| v.as_str()),
                remaining
            );
        }
    }
}
