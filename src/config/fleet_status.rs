//! The fleet as this instance lives it: the coordinations and caps the
//! application registered with [`Policies`](super::Policies), shown per policy by
//! the snapshots and the admin router.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use seawall_fleet::{CapMode, CapSnapshot, Capped, Coordinated, FleetSnapshot, LeaseStatus};

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
        let coordination = self.coordinated.as_ref().map(|c| c.snapshot().into());
        let cap: Option<CapStatus> = self.capped.as_ref().map(|c| c.snapshot().into());
        PolicyFleetSnapshot {
            connected: coordination
                .as_ref()
                .is_none_or(|c: &CoordinationStatus| c.connected)
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
    pub coordination: Option<CoordinationStatus>,
    /// The bulkhead's fleet-wide cap, if registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cap: Option<CapStatus>,
}

/// A coordinated breaker as this instance sees it ([`FleetSnapshot`], as JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct CoordinationStatus {
    /// Coordinating through the store now (`false`: the local breaker decides alone).
    pub connected: bool,
    /// The probe lease as last seen: `none`, `holding`, `elsewhere` or `maybe_held`.
    pub lease: &'static str,
    /// The lease's epoch, when one is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_epoch: Option<u64>,
    /// What remains of the lease (or of the wait, for `maybe_held`).
    #[serde(
        with = "seawall_core::duration_format::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub lease_remaining: Option<Duration>,
    /// The highest fleet epoch seen.
    pub fleet_epoch: u64,
    /// Store operations issued (none by a call).
    pub store_ops: u64,
    /// Store operations that failed or timed out.
    pub store_errors: u64,
    /// Probe leases taken.
    pub leases_taken: u64,
    /// Verdicts published as lease holder.
    pub verdicts_published: u64,
    /// Other instances' verdicts that changed this breaker.
    pub verdicts_applied: u64,
    /// Due probes held off because the lease was elsewhere.
    pub probes_held_off: u64,
    /// This instance's trips recorded for the fleet trip.
    pub trips_recorded: u64,
    /// Fleet trips that opened this breaker.
    pub fleet_trips_applied: u64,
}

impl From<FleetSnapshot> for CoordinationStatus {
    fn from(s: FleetSnapshot) -> Self {
        let (lease, lease_epoch, lease_remaining) = match s.lease {
            LeaseStatus::None => ("none", None, None),
            LeaseStatus::Holding { epoch, remaining } => {
                ("holding", Some(epoch.0), Some(remaining))
            }
            LeaseStatus::Elsewhere { epoch, remaining } => {
                ("elsewhere", Some(epoch.0), Some(remaining))
            }
            LeaseStatus::MaybeHeld { remaining } => ("maybe_held", None, Some(remaining)),
        };
        Self {
            connected: s.connected,
            lease,
            lease_epoch,
            lease_remaining,
            fleet_epoch: s.fleet_epoch.0,
            store_ops: s.store_ops,
            store_errors: s.store_errors,
            leases_taken: s.leases_taken,
            verdicts_published: s.verdicts_published,
            verdicts_applied: s.verdicts_applied,
            probes_held_off: s.probes_held_off,
            trips_recorded: s.trips_recorded,
            fleet_trips_applied: s.fleet_trips_applied,
        }
    }
}

/// A fleet-wide cap as this instance sees it ([`CapSnapshot`], as JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct CapStatus {
    /// This instance's id in the store's claims.
    pub instance: String,
    /// `strict` or `available`.
    pub mode: &'static str,
    /// The slots admitted without a lease in `available` mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_share: Option<u32>,
    /// G as this instance is configured.
    pub cap: u32,
    /// G as the store keeps it (it decides), as of the last answer.
    pub store_cap: Option<u32>,
    /// The allotment the bulkhead admits into now.
    pub allotment: u32,
    /// The demand sent with the last claim.
    pub demand: u32,
    /// Slots reserved across the fleet, as of the last answer.
    pub fleet_reserved: Option<u32>,
    /// The fleet's demands summed, as of the last answer.
    pub fleet_demand: Option<u64>,
    /// Live claims in the fleet, as of the last answer.
    pub claimants: Option<u32>,
    /// What remains of the lease by this instance's clock; absent without one.
    #[serde(
        with = "seawall_core::duration_format::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub lease_remaining: Option<Duration>,
    /// Renewals answered.
    pub renewals: u64,
    /// Claims sent between renewals because slots were freed while this
    /// instance wanted more.
    pub early_claims: u64,
    /// Store operations sent (none by a call).
    pub store_ops: u64,
    /// Store operations that failed or timed out.
    pub store_errors: u64,
    /// Times the lease ran out unrenewed and the mode took over.
    pub lapses: u64,
    /// Answers whose G differed from the configured one.
    pub cap_disagreements: u64,
}

impl From<CapSnapshot> for CapStatus {
    fn from(s: CapSnapshot) -> Self {
        Self {
            instance: s.instance.to_string(),
            mode: s.mode.as_str(),
            local_share: match s.mode {
                CapMode::Available { local_share } => Some(local_share),
                CapMode::Strict => None,
            },
            cap: s.cap,
            store_cap: s.store_cap,
            allotment: s.allotment,
            demand: s.demand,
            fleet_reserved: s.fleet_reserved,
            fleet_demand: s.fleet_demand,
            claimants: s.claimants,
            lease_remaining: s.lease_remaining,
            renewals: s.renewals,
            early_claims: s.early_claims,
            store_ops: s.store_ops,
            store_errors: s.store_errors,
            lapses: s.lapses,
            cap_disagreements: s.cap_disagreements,
        }
    }
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
