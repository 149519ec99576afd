//! The fleet as this instance lives it: the coordinations and caps the
//! application registered with [`Policies`](super::Policies), shown per policy by
//! the snapshots and the admin router.

use std::collections::BTreeMap;
use std::sync::Arc;

use seawall_fleet::{CapSnapshot, Capped, Coordinated, FleetSnapshot};

use super::FleetSection;

/// What a policy has joined the fleet with. Kept by [`Policies`](super::Policies)
/// for as long as it lives, so the renewals and the coordination go on while the
/// admin routes show them.
#[derive(Debug, Clone, Default)]
pub(crate) struct FleetParts {
    pub(crate) coordinated: Option<Arc<Coordinated>>,
    pub(crate) capped: Option<Arc<Capped>>,
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
        }
    }
}

/// One policy's part in the fleet at one instant (feature `fleet`), after
/// [`Policies::register_coordination`](super::Policies::register_coordination) or
/// [`Policies::register_cap`](super::Policies::register_cap).
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
