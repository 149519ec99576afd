//! Fleet-wide degradation floors: an operator's signed, expiring, audited
//! action holding a degradation policy's floor on every instance (see
//! [`FloorFollower`]).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use seawall_core::ConfigError;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::actions::{
    ActionError, ActionKind, ActionTarget, AppliedAction, Applier, AuditEntry, Desk, FleetAction,
    Held,
};
use crate::coordinator::Fleet;
use crate::store::{Keys, Store, Token};

/// A degradation policy's floor, as the fleet's floor actions set it.
pub trait FloorTarget: Send + Sync + 'static {
    /// The policy's name: floor actions on this name apply to it.
    fn name(&self) -> &str;
    /// The floor now (`None`: none).
    fn floor(&self) -> Option<usize>;
    /// Sets the floor to `level`; `false` (nothing changed) without that level.
    fn set_floor(&self, level: usize) -> bool;
    /// Clears the floor.
    fn clear_floor(&self);
}

/// A floor action sets the floor; its end puts back the floor there was.
impl ActionTarget for dyn FloorTarget {
    type Setting = Option<usize>;

    const REPORTS_UNREADABLE: bool = false;

    fn takes(kind: &ActionKind) -> bool {
        matches!(kind, ActionKind::Floor(_))
    }

    fn name(&self) -> &str {
        FloorTarget::name(self)
    }

    fn setting(&self) -> Option<usize> {
        self.floor()
    }

    fn apply(&self, kind: &ActionKind) -> Result<bool, String> {
        let ActionKind::Floor(level) = kind else {
            return Ok(false);
        };
        let level = usize::try_from(*level).unwrap_or(usize::MAX);
        if self.set_floor(level) {
            Ok(true)
        } else {
            Err(format!("no level {level}"))
        }
    }

    fn put_back(&self, before: Option<usize>) {
        match before {
            Some(level) => {
                self.set_floor(level);
            }
            None => self.clear_floor(),
        }
    }
}

/// What the follower publishes for its snapshot.
#[derive(Debug, Default)]
struct Shared {
    /// The floor action in force, with what a follower dropped early restores.
    in_force: Mutex<Option<Held<Option<usize>>>>,
    refused: AtomicU64,
}

/// A degradation policy's floor following the fleet's floor actions, from
/// [`Fleet::follow_floor`]. Dropping it stops the task and ends a fleet floor
/// in force as its expiry would.
///
/// The fleet crate does not depend on the degradation crate: an instance hands
/// it a [`FloorTarget`] (the facade implements it for a degradation layer's
/// handle), and a small task reads the policy's actions at every health check,
/// applies [`ActionKind::Floor`] actions and their reverts, and ends each at its
/// expiry by its own timer: also on an instance that starts after the action
/// was issued. The rules are the breaker actions' (see [`FleetAction`]): signed
/// under the fleet's secret (the level is part of what is signed), at most
/// [`MAX_ACTION_TTL`](crate::MAX_ACTION_TTL), refused and audited otherwise; a
/// local change of the floor after the fleet's wins on that instance; at the
/// end, the floor returns to what it was before (the local floor it had, or
/// none). A level this instance does not have is refused and audited.
///
/// Each kind of action is decided by the task it concerns, with the same rules
/// (one applier, generic over its target): a breaker's coordination ignores
/// floor actions, this task ignores breaker actions, a revert is decided by the
/// task whose action it reverts, and records that are not actions at all are
/// reported by the breaker's coordination of the same policy, where there is one.
pub struct FloorFollower {
    target: Arc<dyn FloorTarget>,
    shared: Arc<Shared>,
    task: AbortHandle,
    desk: Arc<dyn Desk>,
}

impl fmt::Debug for FloorFollower {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FloorFollower")
            .field("name", &self.target.name())
            .finish_non_exhaustive()
    }
}

/// A floor follower's state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct FloorSnapshot {
    /// The fleet's floor action holding the floor now, if any.
    pub fleet_action: Option<AppliedAction>,
    /// Floor actions this instance refused (unsigned, badly signed, replayed,
    /// too long-lived, a level it does not have); each is in the audit log.
    pub actions_refused: u64,
}

impl FloorFollower {
    /// The policy's name.
    pub fn name(&self) -> &str {
        self.target.name()
    }

    /// The floor action in force and the refusals.
    pub fn snapshot(&self) -> FloorSnapshot {
        FloorSnapshot {
            fleet_action: self
                .shared
                .in_force
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map(|held| held.applied(Instant::now())),
            actions_refused: self.shared.refused.load(Ordering::Relaxed),
        }
    }

    /// [`Fleet::act`] on this policy (a floor: [`ActionKind::Floor`]).
    pub async fn act(
        &self,
        kind: ActionKind,
        reason: &str,
        signer: &str,
        ttl: Duration,
    ) -> Result<FleetAction, ActionError> {
        self.desk
            .act(self.target.name(), kind, reason, signer, ttl)
            .await
    }

    /// [`Fleet::actions`] on this policy.
    pub async fn fleet_actions(&self) -> Result<Vec<FleetAction>, ActionError> {
        self.desk.actions(self.target.name()).await
    }

    /// [`Fleet::audit_log`] of this policy.
    pub async fn audit_log(&self, n: usize) -> Result<Vec<AuditEntry>, ActionError> {
        self.desk.audit_log(self.target.name(), n).await
    }
}

impl Drop for FloorFollower {
    fn drop(&mut self) {
        self.task.abort();
        let held = self
            .shared
            .in_force
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(held) = held {
            held.end(&*self.target);
        }
    }
}

impl<S: Store> Fleet<S> {
    /// Follows the fleet's floor actions on degradation policy
    /// `target.name()`: a task reads them at every health check
    /// (`health_every`), applies the valid ones and ends each at its expiry by
    /// this instance's timer (see [`FloorFollower`]). Without a
    /// fleet secret nothing is read. Errors: no Tokio runtime (`runtime`), a
    /// name the store cannot key (`name`).
    pub fn follow_floor(&self, target: Arc<dyn FloorTarget>) -> Result<FloorFollower, ConfigError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            ConfigError::new(
                "runtime",
                "follow_floor must be called within a Tokio runtime",
            )
        })?;
        let config = &self.inner.config;
        let keys = Keys::new(&config.prefix, target.name())?;
        let instance = Token::random(&mut fastrand::Rng::with_seed(self.inner.rng().u64(..)));
        let applier = Applier::new(
            self.inner.secret.clone(),
            &config.prefix,
            instance.to_string(),
            self.inner.clock,
        );
        let shared = Arc::new(Shared::default());
        let task = FloorTask {
            store: Arc::clone(&self.inner.store),
            keys,
            every: config.health_every,
            timeout: config.store_timeout,
            target: Arc::clone(&target),
            shared: Arc::clone(&shared),
            applier,
        };
        let join = runtime.spawn(task.run());
        Ok(FloorFollower {
            target,
            shared,
            task: join.abort_handle(),
            desk: Arc::new(self.clone()),
        })
    }
}

struct FloorTask<S> {
    store: Arc<S>,
    keys: Keys,
    every: Duration,
    timeout: Duration,
    target: Arc<dyn FloorTarget>,
    shared: Arc<Shared>,
    applier: Applier<Option<usize>>,
}

impl<S: Store> FloorTask<S> {
    async fn run(mut self) {
        let mut read_at = Instant::now();
        loop {
            let wake = self.applier.due().map_or(read_at, |due| due.min(read_at));
            tokio::time::sleep_until(wake).await;
            let now = Instant::now();
            let mut audit: Vec<AuditEntry> = self
                .applier
                .expire(&*self.target, now)
                .into_iter()
                .collect();
            if now >= read_at {
                read_at = now + self.every;
                if !self.applier.off() {
                    let read = self.store.read_actions(&self.keys);
                    if let Ok(Ok(read)) = tokio::time::timeout(self.timeout, read).await {
                        audit.extend(self.applier.consider(&*self.target, read));
                    }
                }
            }
            *self
                .shared
                .in_force
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = self.applier.in_force();
            self.shared
                .refused
                .store(self.applier.refused, Ordering::Relaxed);
            for entry in audit {
                crate::telemetry::fleet_action(self.target.name(), &entry);
                let write = self.store.audit(&self.keys, entry.encode());
                // A failed audit write changes nothing here: the next health
                // check's reads decide whether the store is gone.
                let _ = tokio::time::timeout(self.timeout, write).await;
            }
        }
    }
}
