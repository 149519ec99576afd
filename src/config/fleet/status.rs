//! The fleet as this instance lives it: the coordinations and caps the
//! application registered with [`Policies`](crate::config::Policies), shown per policy by
//! the snapshots and the admin router.

use std::collections::BTreeMap;
use std::sync::Arc;

use seawall_core::ConfigError;
use seawall_fleet::{CapSnapshot, Capped, Coordinated, FleetSnapshot, FloorFollower, FloorSnapshot};

use super::super::document::key;
use super::super::policies::{Policies, PoliciesSnapshot, State};
use super::FleetSection;

impl Policies {
    /// The `[fleet]` table the service started with, if any: build the
    /// [`Fleet`](crate::fleet::Fleet) from it (it cannot change at run time).
    pub fn fleet(&self) -> Option<&FleetSection> {
        self.inner.started.fleet.as_ref()
    }

    /// Shows the coordination of policy `coordinated.name()`'s breaker in the
    /// policy's snapshot and at the admin router's `GET /fleet`. The policies keep
    /// it (and so the coordination) for as long as they live; registering again
    /// replaces it. Errors, naming `policies.<name>`, when no policy has that name.
    pub fn register_coordination(
        &self,
        coordinated: impl Into<Arc<crate::fleet::Coordinated>>,
    ) -> Result<(), ConfigError> {
        let coordinated = coordinated.into();
        let name = coordinated.name().to_owned();
        self.fleet_part(&name, |p| p.coordinated = Some(coordinated))
    }

    /// The coordination registered for policy `name`, if any (the admin
    /// router's fleet actions go through it).
    pub(crate) fn coordination(&self, name: &str) -> Option<Arc<Coordinated>> {
        self.lock()
            .fleet_parts
            .get(name)
            .and_then(|p| p.coordinated.clone())
    }

    /// Shows the fleet-wide cap of policy `capped.name()`'s bulkhead in the
    /// policy's snapshot and at `GET /fleet`, kept as
    /// [`register_coordination`](Self::register_coordination) keeps a coordination.
    pub fn register_cap(
        &self,
        capped: impl Into<Arc<crate::fleet::Capped>>,
    ) -> Result<(), ConfigError> {
        let capped = capped.into();
        let name = capped.name().to_owned();
        self.fleet_part(&name, |p| p.capped = Some(capped))
    }

    fn fleet_part(
        &self,
        name: &str,
        set: impl FnOnce(&mut FleetParts),
    ) -> Result<(), ConfigError> {
        let mut state = self.lock();
        if !state.current.policies.contains_key(name) {
            return Err(ConfigError::new(
                format!("policies.{}", key(name)),
                "no such policy: a coordination or cap is shown under the policy it was built from",
            ));
        }
        set(state.fleet_parts.entry(name.to_owned()).or_default());
        Ok(())
    }

    /// Makes policy `name`'s degradation floor follow the fleet's floor actions
    /// ([`Fleet::follow_floor`](crate::fleet::Fleet::follow_floor)): the admin
    /// router's `POST /fleet/policies/{name}/degradation/floor` issues them, and
    /// the policy's snapshot shows the one in force. The policies keep the
    /// follower as they keep a coordination. Errors, naming the field: no such
    /// policy, or no degradation layer built for it yet
    /// (`policies.<name>.degradation`), or the follower refused (`runtime`).
    #[cfg(feature = "degradation")]
    pub fn follow_fleet_floor<S: seawall_fleet::Store>(
        &self,
        fleet: &crate::fleet::Fleet<S>,
        name: &str,
    ) -> Result<(), ConfigError> {
        let handle = self
            .handles(name)
            .and_then(|h| h.degradation)
            .ok_or_else(|| {
                ConfigError::new(
                    format!("policies.{}.degradation", key(name)),
                    "no degradation layer built for this policy: build it first",
                )
            })?;
        let follower = fleet.follow_floor(Arc::new(DegradationFloor(handle)))?;
        self.fleet_part(name, |p| p.floor = Some(Arc::new(follower)))
    }

    /// The floor follower registered for policy `name`, if any.
    pub(crate) fn floor_follower(&self, name: &str) -> Option<Arc<FloorFollower>> {
        self.lock()
            .fleet_parts
            .get(name)
            .and_then(|p| p.floor.clone())
    }

    /// The `[fleet]` settings (redacted) and every registered policy's part in
    /// the fleet; `None` with neither.
    pub fn fleet_status(&self) -> Option<FleetStatus> {
        let state = self.lock();
        let settings = state
            .current
            .fleet
            .as_ref()
            .map(FleetSection::redacted);
        if settings.is_none() && state.fleet_parts.is_empty() {
            return None;
        }
        let policies = state
            .fleet_parts
            .iter()
            .map(|(name, parts)| (name.clone(), parts.snapshot()))
            .collect();
        Some(FleetStatus { settings, policies })
    }

}

/// Puts the fleet's part in a snapshot of the policies: the `[fleet]` settings in
/// force (redacted) and each registered policy's coordination and cap.
pub(in crate::config) fn fill_snapshot(
    state: &State,
    mut snapshot: PoliciesSnapshot,
) -> PoliciesSnapshot {
    snapshot.fleet = state.current.fleet.as_ref().map(FleetSection::redacted);
    for (name, policy) in &mut snapshot.policies {
        policy.fleet = state.fleet_parts.get(name).map(FleetParts::snapshot);
    }
    snapshot
}

/// What a policy has joined the fleet with. Kept by [`Policies`](crate::config::Policies)
/// for as long as it lives, so the renewals and the coordination go on while the
/// admin routes show them.
#[derive(Debug, Clone, Default)]
pub(crate) struct FleetParts {
    pub(crate) coordinated: Option<Arc<Coordinated>>,
    pub(crate) capped: Option<Arc<Capped>>,
    pub(crate) floor: Option<Arc<FloorFollower>>,
}

/// A degradation layer's floor, as the fleet's floor actions set it (the fleet
/// crate knows no degradation layer: the facade joins them).
#[cfg(feature = "degradation")]
struct DegradationFloor(crate::degradation::Handle);

#[cfg(feature = "degradation")]
impl seawall_fleet::FloorTarget for DegradationFloor {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn floor(&self) -> Option<usize> {
        self.0.snapshot().state.floor
    }

    fn set_floor(&self, level: usize) -> bool {
        self.0.set_floor(level).is_ok()
    }

    fn clear_floor(&self) {
        self.0.clear_floor();
    }
}

impl FleetParts {
    pub(crate) fn snapshot(&self) -> PolicyFleetSnapshot {
        let coordination = self.coordinated.as_ref().map(|c| c.snapshot());
        let cap = self.capped.as_ref().map(|c| c.snapshot());
        PolicyFleetSnapshot {
            connected: coordination.as_ref().is_none_or(|c| c.connected)
                && cap.as_ref().is_none_or(|c| c.lease_remaining.is_some()),
            coordination,
            cap,
            floor: self.floor.as_ref().map(|f| f.snapshot()),
        }
    }
}

/// One policy's part in the fleet at one instant (feature `fleet`), after
/// [`Policies::register_coordination`](crate::config::Policies::register_coordination) or
/// [`Policies::register_cap`](crate::config::Policies::register_cap).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PolicyFleetSnapshot {
    /// Every registered part is in touch with the store: the coordination is
    /// connected and the cap holds a live lease. `false` means the instance acts
    /// alone for this policy (a local breaker; the cap's mode decides admissions).
    pub connected: bool,
    /// The breaker's coordination, if registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordination: Option<FleetSnapshot>,
    /// The bulkhead's fleet-wide cap, if registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cap: Option<CapSnapshot>,
    /// The degradation floor's follower of the fleet's floor actions, if
    /// registered ([`Policies::follow_fleet_floor`](crate::config::Policies::follow_fleet_floor)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<FloorSnapshot>,
}

/// The fleet's settings and every registered policy's part, for `GET /fleet`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct FleetStatus {
    /// The `[fleet]` table in force, the store URL's password as `***` (its
    /// fields at the top level); absent when the fleet was built without one.
    #[serde(flatten)]
    pub settings: Option<FleetSection>,
    /// Each policy that registered a coordination or a cap, by name.
    pub policies: BTreeMap<String, PolicyFleetSnapshot>,
}
