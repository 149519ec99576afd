//! What a coordination reports: its lease and counters at one instant.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::PoisonError;
use std::time::Duration;

use tokio::time::Instant;

use super::gate::{LeaseView, Shared};
use crate::actions::AppliedAction;
use crate::store::FleetEpoch;
use crate::view::StuckOpen;

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
    /// Health checks sent ([`Store::touch`](crate::Store::touch), every `health_every` while
    /// connected); not counted in `store_ops`, their failures are in `store_errors`.
    pub health_checks: u64,
    /// What the store says an operator must fix in its setup ([`Store::warning`](crate::Store::warning):
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

impl Shared {
    /// The coordination's state and counters now.
    pub(super) fn snapshot(&self) -> FleetSnapshot {
        let now = Instant::now();
        let lease = match self.view().lease {
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
        let s = self;
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
