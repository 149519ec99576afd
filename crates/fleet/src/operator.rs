//! The operator's verbs on a fleet: issue a fleet action, list the actions and
//! the audit log, read the fleet's view, on a [`Fleet`] or on one
//! [`Coordinated`] breaker (what an admin route holds). Apart from the actions'
//! rules (`actions.rs`) and the coordination's task (`coordinator/task.rs`), which
//! neither needs these.

use std::time::Duration;

use crate::actions::{ActionError, ActionKind, AuditEntry, Boxed, Desk, FleetAction, CLOCK_SKEW};
use crate::coordinator::{Coordinated, Fleet};
use crate::store::{Keys, Store, StoreError};
use crate::view::FleetView;

impl<S: Store> Fleet<S> {
    /// Under the store timeout.
    async fn within<T>(
        &self,
        op: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, ActionError> {
        tokio::time::timeout(self.inner.config.store_timeout, op)
            .await
            .unwrap_or(Err(StoreError::TimedOut))
            .map_err(ActionError::Store)
    }

    /// Issues an action on breaker `policy` for every instance of the fleet:
    /// signed with the fleet's secret, kept in the store until `ttl` has passed
    /// (at most [`MAX_ACTION_TTL`](crate::MAX_ACTION_TTL); [`DEFAULT_ACTION_TTL`](crate::DEFAULT_ACTION_TTL) is the usual
    /// choice), and audited as `issued`. Each coordinating instance applies it
    /// at its next health check and ends it by itself at its expiry, including
    /// one that joins later or was cut off from the store when it was issued
    /// (if the action is still in force when it reads it). Expired actions are
    /// deleted first, to keep the store's at most [`MAX_ACTIONS`](crate::MAX_ACTIONS).
    pub async fn act(
        &self,
        policy: &str,
        kind: ActionKind,
        reason: &str,
        signer: &str,
        ttl: Duration,
    ) -> Result<FleetAction, ActionError> {
        let secret = self.inner.secret.as_deref().ok_or(ActionError::Off)?;
        let prefix = &self.inner.config.prefix;
        let now_ms = self.inner.clock.now_ms();
        let action = FleetAction::issue(secret, prefix, policy, kind, reason, signer, ttl, now_ms)?;
        let keys = Keys::new(prefix, policy)?;
        let store = &self.inner.store;
        for (id, record) in self.within(store.read_actions(&keys)).await? {
            if FleetAction::decode(&record).is_none_or(|a| a.expires_at_ms <= now_ms) {
                self.within(store.remove_action(&keys, &id)).await?;
            }
        }
        let keep = ttl.saturating_add(CLOCK_SKEW);
        self.within(store.post_action(&keys, &action.id, action.encode(), keep))
            .await?;
        let issued = AuditEntry::about(&action, "operator".into(), "issued".into(), now_ms);
        self.within(store.audit(&keys, issued.encode())).await?;
        Ok(action)
    }

    /// The actions kept for breaker `policy` (in force or not yet deleted),
    /// oldest first; records that are not actions are left out.
    pub async fn actions(&self, policy: &str) -> Result<Vec<FleetAction>, ActionError> {
        let keys = Keys::new(&self.inner.config.prefix, policy)?;
        let read = self.within(self.inner.store.read_actions(&keys)).await?;
        let mut actions: Vec<FleetAction> = read
            .iter()
            .filter_map(|(_, record)| FleetAction::decode(record))
            .collect();
        actions.sort_by_key(|a| a.issued_at_ms);
        Ok(actions)
    }

    /// The newest `n` entries of breaker `policy`'s audit log, newest first.
    pub async fn audit_log(&self, policy: &str, n: usize) -> Result<Vec<AuditEntry>, ActionError> {
        let keys = Keys::new(&self.inner.config.prefix, policy)?;
        let read = self.within(self.inner.store.read_audit(&keys, n)).await?;
        Ok(read.iter().filter_map(|e| AuditEntry::decode(e)).collect())
    }

    /// Every instance's fresh report on breaker `policy` (see
    /// [`FleetView`]); store failures as for actions.
    pub async fn fleet_view(&self, policy: &str) -> Result<FleetView, ActionError> {
        let keys = Keys::new(&self.inner.config.prefix, policy)?;
        let read = self.within(self.inner.store.read_reports(&keys)).await?;
        Ok(FleetView::from_reports(&read, self.inner.clock.now_ms()))
    }

    /// This fleet's wall clock, ms since the Unix epoch (what expiries are
    /// compared with).
    pub fn wall_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }
}

impl<S: Store> Desk for Fleet<S> {
    fn act<'a>(
        &'a self,
        policy: &'a str,
        kind: ActionKind,
        reason: &'a str,
        signer: &'a str,
        ttl: Duration,
    ) -> Boxed<'a, FleetAction> {
        Box::pin(Fleet::act(self, policy, kind, reason, signer, ttl))
    }

    fn actions<'a>(&'a self, policy: &'a str) -> Boxed<'a, Vec<FleetAction>> {
        Box::pin(Fleet::actions(self, policy))
    }

    fn audit_log<'a>(&'a self, policy: &'a str, n: usize) -> Boxed<'a, Vec<AuditEntry>> {
        Box::pin(Fleet::audit_log(self, policy, n))
    }

    fn view<'a>(&'a self, policy: &'a str) -> Boxed<'a, FleetView> {
        Box::pin(Fleet::fleet_view(self, policy))
    }
}

impl Coordinated {
    /// [`Fleet::act`] on this breaker (what an admin route holding only the
    /// coordination calls).
    pub async fn act(
        &self,
        kind: ActionKind,
        reason: &str,
        signer: &str,
        ttl: Duration,
    ) -> Result<FleetAction, ActionError> {
        self.desk()
            .act(self.name(), kind, reason, signer, ttl)
            .await
    }

    /// [`Fleet::actions`] on this breaker.
    pub async fn fleet_actions(&self) -> Result<Vec<FleetAction>, ActionError> {
        self.desk().actions(self.name()).await
    }

    /// [`Fleet::audit_log`] of this breaker.
    pub async fn audit_log(&self, n: usize) -> Result<Vec<AuditEntry>, ActionError> {
        self.desk().audit_log(self.name(), n).await
    }

    /// [`Fleet::fleet_view`] of this breaker.
    pub async fn fleet_view(&self) -> Result<FleetView, ActionError> {
        self.desk().view(self.name()).await
    }
}
