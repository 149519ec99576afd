//! The probe gate a coordinated breaker asks, and the view it shares with the
//! background task: the gate only reads it (under the breaker's lock), the task
//! writes it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use seawall_circuit_breaker::{ProbeDecision, ProbeGate, ProbeRequest, State};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::actions::Held;
use crate::config::FleetConfig;
use crate::store::{FleetEpoch, Token};
use crate::telemetry::Telemetry;
use crate::view::StuckOpen;

/// The probe lease as the task last learned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LeaseView {
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
    /// When the lease (or the wait for it) ends, if one is known.
    pub(super) fn until(&self) -> Option<Instant> {
        match *self {
            LeaseView::Unknown => None,
            LeaseView::Holding { until, .. }
            | LeaseView::Elsewhere { until, .. }
            | LeaseView::Maybe { until } => Some(until),
        }
    }
}

/// What the gate reads: the lease, and whether the fleet is reachable.
#[derive(Debug)]
pub(super) struct View {
    pub(super) lease: LeaseView,
    pub(super) connected: bool,
}

/// The state the gate, the task and the snapshot share: the view, and the
/// counters the snapshot reads.
pub(super) struct Shared {
    /// The fleet action in force, for the snapshot.
    pub(super) fleet_action: Mutex<Option<Held<State>>>,
    pub(super) actions_refused: AtomicU64,
    pub(super) stuck_open: Mutex<Option<StuckOpen>>,
    /// The dependency's direct check, once linked: asked when the breaker is
    /// suspected of being stuck open.
    pub(super) dependency_check: Mutex<Option<DependencyCheck>>,
    pub(super) name: String,
    pub(super) view: Mutex<View>,
    pub(super) wake: Notify,
    /// The hold given while the coordinator finds out who holds the lease.
    pub(super) pending_hint: Duration,
    pub(super) connected: AtomicBool,
    pub(super) fleet_epoch: AtomicU64,
    pub(super) ops: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) leases_taken: AtomicU64,
    pub(super) published: AtomicU64,
    pub(super) applied: AtomicU64,
    pub(super) held_off: AtomicU64,
    pub(super) health_checks: AtomicU64,
    pub(super) store_warning: Mutex<Option<String>>,
    pub(super) trips_recorded: AtomicU64,
    pub(super) fleet_trips_applied: AtomicU64,
    pub(super) telemetry: Telemetry,
}

/// A direct check of the dependency: `Some(true)` passing, `Some(false)` failing,
/// `None` no answer yet.
pub(super) type DependencyCheck = Arc<dyn Fn() -> Option<bool> + Send + Sync>;

impl Shared {
    /// Nothing known yet: no lease, not connected, every counter at zero.
    pub(super) fn new(name: &str, config: &FleetConfig) -> Self {
        Self {
            name: name.to_owned(),
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
            telemetry: Telemetry::new(name),
        }
    }

    /// What the linked dependency check says now (called without the lock held).
    pub(super) fn dependency_check(&self) -> Option<bool> {
        let check = self
            .dependency_check
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        check.and_then(|check| check())
    }

    pub(super) fn view(&self) -> MutexGuard<'_, View> {
        // Nothing panics while holding it; a poisoned lock is still consistent.
        self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The probe gate installed on a coordinated breaker. Runs under the breaker's
/// lock: reads the view, maybe wakes the task, answers.
pub(super) struct FleetGate {
    pub(super) shared: Arc<Shared>,
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
