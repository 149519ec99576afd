//! The state every service built from one layer shares, and the operator's handle on it.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use seawall_core::{layer_handle_by_inherent_methods, ConfigError, Name, Outcome};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::config::DegradationConfig;
use crate::machine::{Cause, Change, DegradationMachine, MachineSnapshot, Ticket};
use crate::telemetry;

/// "Probing is not possible at this level" in [`Shared::probe_from`].
const NEVER: u64 = u64::MAX;
/// The low bits of [`Shared::state`] hold the level, the rest the epoch.
const LEVEL_BITS: u32 = 16;
const LEVEL_MASK: u64 = (1 << LEVEL_BITS) - 1;
/// Changes buffered for a slow subscriber before it lags.
const SUBSCRIBER_BUFFER: usize = 64;

/// One level: its index (0 is the best) and its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Level {
    /// The index, 0 being the best level.
    pub index: usize,
    /// The name given to the builder.
    pub name: Name,
}

/// A level change, as published to [`Handle::subscribe`]rs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DegradationEvent {
    /// The level before.
    pub from: Level,
    /// The level after.
    pub to: Level,
    /// Why it changed.
    pub cause: Cause,
    /// When.
    pub at: Instant,
    /// The outcome that completed it was injected by a rehearsal.
    pub rehearsal: bool,
}

/// A degradation layer's state at one moment (see [`Handle::snapshot`]).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Snapshot {
    /// The layer's name.
    pub name: String,
    /// The name of the level in force.
    pub level_name: String,
    /// The machine's state: level, entered-at, failures, probe progress, floor, forced.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub state: MachineSnapshot,
    /// Whether the layer is in shadow mode: `level_name` is where the machine
    /// would serve, but the best level serves every request (unless forced).
    pub shadow: bool,
    /// Requests the machine would have served at a lower level, served by the best
    /// level in shadow mode instead.
    pub shadow_rejections: u64,
}

/// Picks a level by index (`0` is the best) or by name (`"router"`).
pub trait SelectLevel {
    /// The index of the level among `names`, if there is one.
    fn select(self, names: &[Name]) -> Option<usize>;
}

impl SelectLevel for usize {
    fn select(self, names: &[Name]) -> Option<usize> {
        (self < names.len()).then_some(self)
    }
}

impl SelectLevel for &str {
    fn select(self, names: &[Name]) -> Option<usize> {
        names.iter().position(|n| &**n == self)
    }
}

impl SelectLevel for String {
    fn select(self, names: &[Name]) -> Option<usize> {
        self.as_str().select(names)
    }
}

impl SelectLevel for &String {
    fn select(self, names: &[Name]) -> Option<usize> {
        self.as_str().select(names)
    }
}

/// What every service built from one layer shares.
pub(crate) struct Shared {
    pub(crate) name: Name,
    pub(crate) level_names: Box<[Name]>,
    origin: Instant,
    /// `epoch << LEVEL_BITS | level`, mirrored from the machine after every change.
    state: AtomicU64,
    /// Nanoseconds after `origin` from which a request may be a probe, or [`NEVER`].
    probe_from: AtomicU64,
    /// Whether a success at the current level would change nothing.
    quiet: AtomicBool,
    /// Shadow mode and not forced: a request the machine sends lower is served by
    /// the best level. Mirrored from the machine.
    shadowing: AtomicBool,
    /// Requests served by the best level in shadow mode instead of a lower one.
    shadow_rejections: AtomicU64,
    machine: Mutex<DegradationMachine>,
    built: DegradationConfig,
    changes: OnceLock<broadcast::Sender<DegradationEvent>>,
    telemetry: telemetry::Telemetry,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("name", &self.name)
            .field("level_names", &self.level_names)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(
        name: Name,
        level_names: Box<[Name]>,
        machine: DegradationMachine,
        now: Instant,
    ) -> Self {
        let built = machine.config().clone();
        let telemetry = telemetry::Telemetry::new(&name, 0);
        let shared = Self {
            name,
            level_names,
            origin: now,
            state: AtomicU64::new(0),
            probe_from: AtomicU64::new(NEVER),
            quiet: AtomicBool::new(false),
            shadowing: AtomicBool::new(false),
            shadow_rejections: AtomicU64::new(0),
            machine: Mutex::new(machine),
            built,
            changes: OnceLock::new(),
            telemetry,
        };
        shared.sync(&shared.lock());
        shared
    }

    /// The machine, even if a panic elsewhere poisoned the lock (its state is always
    /// consistent between method calls).
    fn lock(&self) -> MutexGuard<'_, DegradationMachine> {
        self.machine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn nanos_since_origin(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_nanos()).unwrap_or(NEVER - 1)
    }

    /// Mirrors what the hot path reads. Called with the lock held after every mutation.
    fn sync(&self, m: &DegradationMachine) {
        let state = (m.epoch() << LEVEL_BITS) | (m.level() as u64 & LEVEL_MASK);
        self.state.store(state, Ordering::Release);
        let from = m
            .probing_from()
            .map_or(NEVER, |t| self.nanos_since_origin(t));
        self.probe_from.store(from, Ordering::Release);
        self.quiet.store(m.success_is_quiet(), Ordering::Release);
        self.shadowing
            .store(m.config().shadow && !m.is_forced(), Ordering::Release);
    }

    /// In shadow mode, turns a ticket for a lower level into one served by the
    /// best level, counting it. One load, made only for a request sent lower.
    #[inline]
    pub(crate) fn shadowed(&self, ticket: Ticket) -> Ticket {
        if ticket.level == 0 || !self.shadowing.load(Ordering::Acquire) {
            return ticket;
        }
        self.shadow_rejections.fetch_add(1, Ordering::Relaxed);
        self.telemetry.shadow_served(&self.name, ticket.level);
        ticket.in_shadow()
    }

    /// Requests served by the best level in shadow mode instead of a lower one.
    pub(crate) fn shadow_rejections(&self) -> u64 {
        self.shadow_rejections.load(Ordering::Relaxed)
    }

    pub(crate) fn level_of(&self, index: usize) -> Level {
        Level {
            index,
            name: self
                .level_names
                .get(index)
                .cloned()
                .unwrap_or_else(|| "?".into()),
        }
    }

    /// The level in force, from the atomic mirror.
    pub(crate) fn current(&self) -> usize {
        (self.state.load(Ordering::Acquire) & LEVEL_MASK) as usize
    }

    /// Decides how to serve one request. At a level where no probe is possible (the
    /// best level, the floor, forced) this is two atomic loads; during a dwell it adds
    /// one clock read; only once the dwell has passed does it take the lock and sample.
    pub(crate) fn admit(&self) -> Ticket {
        let state = self.state.load(Ordering::Acquire);
        let steady = Ticket {
            level: (state & LEVEL_MASK) as usize,
            probe: false,
            epoch: state >> LEVEL_BITS,
            window: 0,
            shadow: false,
        };
        let from = self.probe_from.load(Ordering::Acquire);
        if from == NEVER {
            return steady;
        }
        let now = Instant::now();
        if self.nanos_since_origin(now) < from {
            return steady;
        }
        self.mutate(|m| m.route(now))
    }

    /// Records the outcome of a request admitted with `ticket`, `rehearsal` when an
    /// injected fault produced it. A success at the current level that changes
    /// nothing takes no lock and reads no clock.
    pub(crate) fn record(&self, ticket: Ticket, outcome: Outcome, rehearsal: bool) {
        if ticket.shadow {
            return;
        }
        if ticket.probe {
            self.telemetry.probe(&self.name, outcome);
        }
        match outcome {
            Outcome::Ignore => return,
            Outcome::Success if !ticket.probe && self.quiet.load(Ordering::Acquire) => return,
            _ => {}
        }
        let now = Instant::now();
        self.mutate(|m| {
            let change = if rehearsal {
                m.record_rehearsal(ticket, outcome, now)
            } else {
                m.record(ticket, outcome, now)
            };
            ((), change)
        });
    }

    /// Runs `f` on the machine under the lock, mirrors the result for the hot path
    /// and hands the change to subscribers (under the lock, so they see changes in
    /// order), then logs it after releasing the lock: a tracing subscriber or a
    /// metrics recorder is user code, and may read this layer's snapshot.
    fn mutate<R>(&self, f: impl FnOnce(&mut DegradationMachine) -> (R, Option<Change>)) -> R {
        let (out, change) = {
            let mut m = self.lock();
            let (out, change) = f(&mut m);
            self.sync(&m);
            if let (Some(change), Some(tx)) = (&change, self.changes.get()) {
                // No receiver is not an error: subscribers come and go.
                let _ = tx.send(DegradationEvent {
                    from: self.level_of(change.from),
                    to: self.level_of(change.to),
                    cause: change.cause,
                    at: change.at,
                    rehearsal: change.rehearsal,
                });
            }
            (out, change)
        };
        if let Some(change) = change {
            let from = self.level_of(change.from);
            let to = self.level_of(change.to);
            self.telemetry
                .level_changed(&self.name, &from.name, &to.name, &change, self.current());
        }
        out
    }

    fn select(&self, level: impl SelectLevel) -> Result<usize, ConfigError> {
        level.select(&self.level_names).ok_or_else(|| {
            let names: Vec<&str> = self.level_names.iter().map(|n| &**n).collect();
            ConfigError::new("level", format!("no such level; levels are {names:?}"))
        })
    }
}

/// Operates a degradation layer: snapshot, level changes, floor, force, reconfigure.
///
/// Its name, configuration, snapshot and operator verbs are those of every seawall
/// layer's handle ([`LayerHandle`](seawall_core::LayerHandle), implemented by delegating to the methods here;
/// there `force` takes the level's index).
///
/// Cloning is cheap; every clone, like every service built from the layer, shares one
/// state. Get one with [`DegradationLayer::handle`](crate::DegradationLayer::handle)
/// before layering.
#[derive(Clone, Debug)]
pub struct Handle {
    pub(crate) shared: Arc<Shared>,
}

impl Handle {
    /// The layer's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The levels, best first.
    pub fn levels(&self) -> &[Name] {
        &self.shared.level_names
    }

    /// The index of the level named `name`.
    pub fn level_index(&self, name: &str) -> Option<usize> {
        name.select(&self.shared.level_names)
    }

    /// The level in force (one atomic load).
    pub fn level(&self) -> Level {
        self.shared.level_of(self.shared.current())
    }

    /// Level, entered-at, failures, probe progress, floor and whether forced.
    pub fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        let (state, shadow) = {
            let mut m = self.shared.lock();
            (m.snapshot(now), m.config().shadow)
        };
        Snapshot {
            name: self.shared.name.to_string(),
            level_name: self.shared.level_of(state.level).name.to_string(),
            state,
            shadow,
            shadow_rejections: self.shared.shadow_rejections(),
        }
    }

    /// Level changes from now on. The channel is created by the first call; a
    /// subscriber that falls more than 64 changes behind sees `Lagged`.
    pub fn subscribe(&self) -> broadcast::Receiver<DegradationEvent> {
        self.shared
            .changes
            .get_or_init(|| broadcast::channel(SUBSCRIBER_BUFFER).0)
            .subscribe()
    }

    /// Bounds how high the machine may climb: no level better than `level`. If the
    /// level in force is better, it moves down to `level` at once (unless forced).
    pub fn set_floor(&self, level: impl SelectLevel) -> Result<(), ConfigError> {
        let index = self.shared.select(level)?;
        let now = Instant::now();
        let set = self.shared.mutate(|m| match m.set_floor(index, now) {
            Ok(change) => (Ok(()), change),
            Err(e) => (Err(e), None),
        });
        if set.is_ok() {
            telemetry::control(
                &self.shared.name,
                "set_floor",
                Some(&self.shared.level_of(index).name),
            );
        }
        set
    }

    /// Removes the floor. The machine climbs back through its probes as usual.
    pub fn clear_floor(&self) {
        self.shared.mutate(|m| (m.clear_floor(), None));
        telemetry::control(&self.shared.name, "clear_floor", None);
    }

    /// Holds `level` until [`release`](Self::release): no automatic change, no probes.
    /// Wins over the floor.
    pub fn force(&self, level: impl SelectLevel) -> Result<(), ConfigError> {
        let index = self.shared.select(level)?;
        let now = Instant::now();
        let forced = self.shared.mutate(|m| match m.force(index, now) {
            Ok(change) => (Ok(()), change),
            Err(e) => (Err(e), None),
        });
        if forced.is_ok() {
            telemetry::control(
                &self.shared.name,
                "force",
                Some(&self.shared.level_of(index).name),
            );
        }
        forced
    }

    /// Hands the level back to the machine, with a fresh dwell (or down to the floor).
    pub fn release(&self) {
        let now = Instant::now();
        self.shared.mutate(|m| ((), m.release(now)));
        telemetry::control(&self.shared.name, "release", None);
    }

    /// The configuration in force.
    pub fn config(&self) -> DegradationConfig {
        self.shared.lock().config().clone()
    }

    /// Replaces the configuration after validating it, keeping the level, floor and
    /// forced state (probe progress restarts).
    pub fn reconfigure(&self, config: DegradationConfig) -> Result<(), ConfigError> {
        let now = Instant::now();
        self.shared.mutate(|m| (m.reconfigure(config, now), None))?;
        telemetry::reconfigured(&self.shared.name);
        Ok(())
    }

    /// Switches shadow mode on or off, from the next request on (see
    /// [`DegradationConfig::shadow`]); the level and probe progress are kept. A
    /// change of the configuration in force: [`revert`](Self::revert) undoes it.
    pub fn set_shadow(&self, shadow: bool) -> Result<(), ConfigError> {
        let mut config = self.config();
        config.shadow = shadow;
        self.reconfigure(config)
    }

    /// Whether the layer is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.shared.lock().config().shadow
    }

    /// Goes back to the configuration the layer was built with.
    pub fn revert(&self) {
        // The built configuration was validated at build time.
        let _ = self.reconfigure(self.shared.built.clone());
    }
}

layer_handle_by_inherent_methods!(Handle {
    Config = DegradationConfig,
    Snapshot = Snapshot,
    /// The index of the level to hold (0 is the best).
    Forced = usize,
    force = |handle, forced| handle.force(forced),
});
