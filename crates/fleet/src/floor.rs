//! Fleet-wide degradation floors: an operator's signed, expiring, audited
//! action holding a degradation policy's floor on every instance (see
//! [`FloorFollower`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use seawall_core::ConfigError;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::actions::{
    ActionError, ActionKind, AppliedAction, AuditEntry, Desk, FleetAction, FleetSecret, WallClock,
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

/// A floor action in force.
#[derive(Debug)]
struct InForce {
    action: FleetAction,
    until: Instant,
    /// The floor before the first fleet floor.
    before: Option<usize>,
    /// The floor it set: if the floor is elsewhere at the end, a local
    /// operator changed it meanwhile, and that wins.
    set: usize,
}

/// The most action ids a follower remembers having decided.
const KNOWN: usize = 256;

/// Decides, applies and ends the fleet's floor actions on one instance.
#[derive(Debug)]
pub(crate) struct FloorApplier {
    secret: Option<Arc<FleetSecret>>,
    prefix: String,
    instance: String,
    clock: WallClock,
    in_force: Option<InForce>,
    known: BTreeMap<String, u64>,
    /// Ids of floor actions seen, so that a revert of one is recognised.
    floors: BTreeSet<String>,
    refused: u64,
}

impl FloorApplier {
    pub(crate) fn new(
        secret: Option<Arc<FleetSecret>>,
        prefix: &str,
        instance: String,
        clock: WallClock,
    ) -> Self {
        Self {
            secret,
            prefix: prefix.to_owned(),
            instance,
            clock,
            in_force: None,
            known: BTreeMap::new(),
            floors: BTreeSet::new(),
            refused: 0,
        }
    }

    fn entry(&self, action: &FleetAction, event: String) -> AuditEntry {
        AuditEntry::about(action, self.instance.clone(), event, self.clock.now_ms())
    }

    fn due(&self) -> Option<Instant> {
        self.in_force.as_ref().map(|f| f.until)
    }

    fn held(&self) -> Option<AppliedAction> {
        let now_ms = self.clock.now_ms();
        self.in_force.as_ref().map(|f| AppliedAction {
            action: f.action.clone(),
            remaining: f.action.remaining(now_ms),
        })
    }

    /// Decides the records read (`(field, record)`), applying the new valid
    /// floor actions and reverts of them to `target`; the audit entries.
    pub(crate) fn consider(
        &mut self,
        target: &dyn FloorTarget,
        read: Vec<(String, String)>,
    ) -> Vec<AuditEntry> {
        let now_ms = self.clock.now_ms();
        let mut audit = Vec::new();
        let decoded: Vec<(String, FleetAction)> = read
            .into_iter()
            .filter(|(field, _)| !self.known.contains_key(field))
            .filter_map(|(field, record)| Some((field, FleetAction::decode(&record)?)))
            .filter(|(_, a)| a.policy == target.name())
            .collect();
        for (_, a) in &decoded {
            if matches!(a.kind, ActionKind::Floor(_)) {
                self.floors.insert(a.id.clone());
            }
        }
        let mut fresh = Vec::new();
        for (field, action) in decoded {
            let mine = match &action.kind {
                ActionKind::Floor(_) => true,
                ActionKind::Revert(id) => self.floors.contains(id),
                _ => false,
            };
            if !mine {
                continue;
            }
            match action.check(self.secret.as_deref(), &self.prefix, &field, now_ms) {
                Ok(()) => fresh.push(action),
                Err(crate::ActionRefusal::Expired) => {
                    self.known.insert(field, action.expires_at_ms);
                }
                Err(why) => {
                    self.refused += 1;
                    self.known.insert(field, action.expires_at_ms);
                    audit.push(self.entry(&action, format!("refused: {why}")));
                }
            }
        }
        // Reverts first, so an action and its revert read together never apply.
        fresh.sort_by_key(|a| (!matches!(a.kind, ActionKind::Revert(_)), a.issued_at_ms));
        for action in fresh {
            self.known.insert(action.id.clone(), action.expires_at_ms);
            match &action.kind {
                ActionKind::Revert(id) => {
                    if self.in_force.as_ref().is_some_and(|f| &f.action.id == id) {
                        if let Some(ended) = self.end(target) {
                            audit.push(self.entry(&ended, format!("reverted by {}", action.id)));
                        }
                    }
                    self.known.entry(id.clone()).or_insert(action.expires_at_ms);
                    audit.push(self.entry(&action, "applied".into()));
                }
                ActionKind::Floor(level) => {
                    let level = usize::try_from(*level).unwrap_or(usize::MAX);
                    let before = self
                        .in_force
                        .as_ref()
                        .map_or_else(|| target.floor(), |f| f.before);
                    if !target.set_floor(level) {
                        self.refused += 1;
                        audit.push(self.entry(&action, format!("refused: no level {level}")));
                        continue;
                    }
                    if let Some(earlier) = self.in_force.take() {
                        audit.push(
                            self.entry(&earlier.action, format!("superseded by {}", action.id)),
                        );
                    }
                    let until = Instant::now() + action.remaining(now_ms);
                    audit.push(self.entry(&action, "applied".into()));
                    self.in_force = Some(InForce {
                        action,
                        until,
                        before,
                        set: level,
                    });
                }
                ActionKind::ForceOpen | ActionKind::ForceClosed | ActionKind::Reset => {}
            }
        }
        if self.known.len() > KNOWN {
            self.known.retain(|_, expires| *expires > now_ms);
            self.floors.retain(|id| self.known.contains_key(id));
        }
        audit
    }

    /// Ends the floor in force if its expiry has come; the audit entry.
    fn expire(&mut self, target: &dyn FloorTarget, now: Instant) -> Option<AuditEntry> {
        if self.in_force.as_ref().is_none_or(|f| f.until > now) {
            return None;
        }
        let ended = self.end(target)?;
        Some(self.entry(&ended, "expired".into()))
    }

    /// Takes the floor off: back to what it was, unless a local operator
    /// changed it meanwhile (that wins).
    fn end(&mut self, target: &dyn FloorTarget) -> Option<FleetAction> {
        let f = self.in_force.take()?;
        restore(target, f.before, f.set);
        Some(f.action)
    }
}

fn restore(target: &dyn FloorTarget, before: Option<usize>, set: usize) {
    if target.floor() == Some(set) {
        match before {
            Some(level) => {
                target.set_floor(level);
            }
            None => target.clear_floor(),
        }
    }
}

/// What the follower publishes for its snapshot.
#[derive(Debug, Default)]
struct Shared {
    in_force: Mutex<Option<AppliedAction>>,
    /// `(before, set)` of the floor in force, for a follower dropped early.
    ends: Mutex<Option<(Option<usize>, usize)>>,
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
/// Each kind of action is decided by the task it concerns: a breaker's
/// coordination ignores floor actions, this task ignores breaker actions, and
/// records that are not actions at all are reported by the breaker's
/// coordination of the same policy, where there is one.
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
                .clone(),
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
        let ends = self
            .shared
            .ends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((before, set)) = ends {
            restore(&*self.target, before, set);
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
        let applier = FloorApplier::new(
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
    applier: FloorApplier,
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
                if self.applier.secret.is_some() {
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
                .unwrap_or_else(PoisonError::into_inner) = self.applier.held();
            *self
                .shared
                .ends
                .lock()
                .unwrap_or_else(PoisonError::into_inner) =
                self.applier.in_force.as_ref().map(|f| (f.before, f.set));
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
