//! The state a fault layer's services share, and its handle: start, stop and list
//! injections; the `LayerHandle` verbs for policy files and admin routes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use seawall_core::{ConfigError, LayerHandle, RandomSource, SeededRandom};
use tokio::time::Instant;

use crate::config::{FaultConfig, InjectionConfig, MAX_INJECTIONS};
use crate::fault::FaultKind;
use crate::machine::{Armed, Decision, Entry, Facts, Origin};
use crate::telemetry::Telemetry;

/// The handle of a fault layer: what is injected, and the switches.
///
/// Cloning shares one state with the layer and every service it built. Every
/// injection has an expiry: it is compared on every call, so nothing is injected
/// past it, and the first call or [`snapshot`](Self::snapshot) after it removes the
/// injection and reports it ended (event and gauge).
#[derive(Debug, Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

struct Shared {
    name: Arc<str>,
    /// Whether any injection is in force: the only thing a call reads when none is.
    armed: AtomicBool,
    state: Mutex<State>,
    /// The configuration the layer was built with, for [`LayerHandle::revert`].
    built: FaultConfig,
    telemetry: Telemetry,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("name", &self.name)
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}

struct State {
    armed: Armed,
    random: Box<dyn RandomSource>,
    /// The configuration in force (its injections are the `Config` entries).
    config: FaultConfig,
}

/// What a fault layer injects, at one moment.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Snapshot {
    /// The layer's name (its policy's).
    pub name: String,
    /// The injections in force (expired ones are gone).
    pub injections: Vec<InjectionSnapshot>,
}

/// One injection in force.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct InjectionSnapshot {
    /// Its id, to stop it alone.
    pub id: u64,
    /// The kind of fault.
    pub kind: FaultKind,
    /// The injection as configured: parameters, rate, route, key, expiry.
    pub config: InjectionConfig,
    /// When it ends by itself (the same as `config.until`).
    #[cfg_attr(feature = "serde", serde(with = "crate::config::rfc3339"))]
    pub until: SystemTime,
    /// How long it has left, on this process's timer (which `until` was turned
    /// into when the injection started).
    #[cfg_attr(feature = "serde", serde(with = "seawall_core::duration_format"))]
    pub remaining: Duration,
    /// Who started it.
    pub origin: Origin,
    /// Calls that got the fault so far.
    pub injected: u64,
}

impl Handle {
    pub(crate) fn new(
        name: Arc<str>,
        config: FaultConfig,
        random: Box<dyn RandomSource>,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let handle = Self {
            shared: Arc::new(Shared {
                telemetry: Telemetry::new(&name),
                name,
                armed: AtomicBool::new(false),
                state: Mutex::new(State {
                    armed: Armed::default(),
                    random,
                    config: FaultConfig::new(),
                }),
                built: config.clone(),
            }),
        };
        handle.replace_config(config);
        Ok(handle)
    }

    pub(crate) fn with_entropy(name: &str, config: FaultConfig) -> Result<Self, ConfigError> {
        Self::new(name.into(), config, Box::new(SeededRandom::from_entropy()))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The layer's name (its policy's).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub(crate) fn name_arc(&self) -> &Arc<str> {
        &self.shared.name
    }

    /// Whether any injection is in force (an expired one counts until a call or a
    /// snapshot removes it).
    pub fn is_armed(&self) -> bool {
        self.shared.armed.load(Ordering::Acquire)
    }

    /// Starts an injection now, until its `until` (checked against the wall clock:
    /// after now, at most [`MAX_INJECTION`](crate::MAX_INJECTION) later). Returns
    /// its id, for [`stop`](Self::stop).
    pub fn inject(&self, injection: InjectionConfig) -> Result<u64, ConfigError> {
        injection.validate_at(SystemTime::now())?;
        let fault = injection.fault()?;
        let expires = expires_at(injection.until).ok_or_else(|| {
            ConfigError::new(
                "until",
                "is past: an injection whose time is up is never started",
            )
        })?;
        let mut state = self.lock();
        let id = state
            .armed
            .arm(injection, fault, expires, Origin::Operator)
            .ok_or_else(|| {
                ConfigError::new(
                    "injections",
                    format!("{MAX_INJECTIONS} injections are in force already: stop one first"),
                )
            })?;
        self.after_change(&state);
        if let Some(e) = state.armed.entries.iter().find(|e| e.id == id) {
            self.shared.telemetry.started(e);
        }
        Ok(id)
    }

    /// Stops the injection `id`; `false` if none is in force with that id.
    pub fn stop(&self, id: u64) -> bool {
        self.stop_where(|e| e.id == id) > 0
    }

    /// Stops every injection, from the configuration too (until the next document
    /// is applied). Returns how many were stopped.
    pub fn stop_all(&self) -> usize {
        self.stop_where(|_| true)
    }

    fn stop_where(&self, which: impl Fn(&Entry) -> bool) -> usize {
        let mut state = self.lock();
        let gone = state.armed.remove(which);
        self.after_change(&state);
        for e in &gone {
            self.shared.telemetry.stopped(e, "stopped");
        }
        gone.len()
    }

    /// What is injected now.
    pub fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        let mut state = self.lock();
        self.expire(&mut state, now);
        Snapshot {
            name: self.shared.name.to_string(),
            injections: state
                .armed
                .entries
                .iter()
                .map(|e| InjectionSnapshot {
                    id: e.id,
                    kind: e.fault.kind(),
                    config: e.config.clone(),
                    until: e.config.until,
                    remaining: e.expires.saturating_duration_since(now),
                    origin: e.origin,
                    injected: e.injected,
                })
                .collect(),
        }
    }

    /// The fault for one call, if one is due (the caller has checked
    /// [`is_armed`](Self::is_armed)).
    pub(crate) fn decide(&self, facts: &Facts<'_>, http: bool) -> Option<Decision> {
        let now = Instant::now();
        let mut state = self.lock();
        self.expire(&mut state, now);
        let State { armed, random, .. } = &mut *state;
        let decision = armed.decide(now, facts, http, || random.next_f64())?;
        drop(state);
        self.shared
            .telemetry
            .injected(decision.fault.kind(), decision.id);
        Some(decision)
    }

    fn expire(&self, state: &mut State, now: Instant) {
        let gone = state.armed.expire(now);
        if !gone.is_empty() {
            self.after_change(state);
            for e in &gone {
                self.shared.telemetry.stopped(e, "expired");
            }
        }
    }

    fn after_change(&self, state: &State) {
        let n = state.armed.entries.len();
        self.shared.armed.store(n > 0, Ordering::Release);
        self.shared.telemetry.active(n);
    }

    /// Replaces the configuration's injections with `config`'s, skipping those whose
    /// time is up (a reverted document never restarts a finished rehearsal).
    fn replace_config(&self, config: FaultConfig) {
        let wall = SystemTime::now();
        let mut state = self.lock();
        let gone = state.armed.remove(|e| e.origin == Origin::Config);
        for e in &gone {
            self.shared.telemetry.stopped(e, "replaced");
        }
        for injection in &config.injections {
            let (Ok(fault), Some(expires)) =
                (injection.fault(), expires_at_from(injection.until, wall))
            else {
                continue;
            };
            if let Some(id) = state
                .armed
                .arm(injection.clone(), fault, expires, Origin::Config)
            {
                if let Some(e) = state.armed.entries.iter().find(|e| e.id == id) {
                    self.shared.telemetry.started(e);
                }
            }
        }
        state.config = config;
        self.after_change(&state);
    }
}

/// The instant on this process's timer at which the wall time `until` comes.
fn expires_at(until: SystemTime) -> Option<Instant> {
    expires_at_from(until, SystemTime::now())
}

fn expires_at_from(until: SystemTime, wall_now: SystemTime) -> Option<Instant> {
    let left = until
        .duration_since(wall_now)
        .ok()
        .filter(|d| !d.is_zero())?;
    Instant::now().checked_add(left)
}

impl LayerHandle for Handle {
    type Config = FaultConfig;
    type Snapshot = Snapshot;
    /// An injection to start ([`Handle::inject`]).
    type Forced = InjectionConfig;

    fn name(&self) -> &str {
        Handle::name(self)
    }

    fn config(&self) -> FaultConfig {
        self.lock().config.clone()
    }

    /// Validates `config` against the wall clock (an expiry past or more than a day
    /// ahead is refused) and replaces the configuration's injections with its own;
    /// the operators' injections stay.
    fn reconfigure(&self, config: FaultConfig) -> Result<(), ConfigError> {
        config.validate()?;
        self.replace_config(config);
        Ok(())
    }

    /// Back to the injections the layer was built with, but only those whose time
    /// has not come: a revert never restarts a finished rehearsal.
    fn revert(&self) {
        self.replace_config(self.shared.built.clone());
    }

    fn snapshot(&self) -> Snapshot {
        Handle::snapshot(self)
    }

    fn force(&self, injection: InjectionConfig) -> Result<(), ConfigError> {
        self.inject(injection).map(|_| ())
    }

    /// Stops every injection.
    fn release(&self) {
        self.stop_all();
    }
}
