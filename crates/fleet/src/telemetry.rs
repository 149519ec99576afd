//! The only place with `cfg(feature = "tracing")` and `cfg(feature = "metrics")`.
//!
//! Metrics (feature `metrics`), labelled with the breaker's `name`:
//! - `seawall_fleet_connected`: a gauge, 1 while the instance coordinates through
//!   the store, 0 while it runs on its local breaker alone;
//! - `seawall_fleet_store_errors_total`: store operations that failed or timed out;
//! - `seawall_fleet_stuck_open`: a gauge per `cause` (`local_only`,
//!   `external_failure`, `forced`), 1 while the breaker is flagged stuck open for it.
//!
//! For a fleet-wide cap, labelled with the bulkhead's `name`:
//! - `seawall_fleet_allotment`: a gauge, the slots this instance admits into now;
//! - `seawall_fleet_renewals_total`: renewals, labelled `outcome` = `ok` or `failed`;
//! - `seawall_fleet_store_errors_total`, as above.

#![cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]

use crate::store::StoreError;
#[cfg(feature = "metrics")]
use crate::view::StuckCause;
use crate::view::StuckOpen;

#[derive(Debug)]
pub(crate) struct Telemetry {
    #[cfg(feature = "metrics")]
    connected: metrics::Gauge,
    #[cfg(feature = "metrics")]
    errors: metrics::Counter,
    /// One gauge per stuck-open cause, in [`StuckCause::ALL`]'s order.
    #[cfg(feature = "metrics")]
    stuck: [metrics::Gauge; 3],
}

impl Telemetry {
    pub(crate) fn new(name: &str) -> Self {
        #[cfg(feature = "metrics")]
        let this = {
            let connected = metrics::gauge!("seawall_fleet_connected", "name" => name.to_owned());
            connected.set(0.0);
            let stuck = StuckCause::ALL.map(|cause| {
                let gauge = metrics::gauge!(
                    "seawall_fleet_stuck_open",
                    "name" => name.to_owned(),
                    "cause" => cause.as_str()
                );
                gauge.set(0.0);
                gauge
            });
            Self {
                connected,
                errors: metrics::counter!("seawall_fleet_store_errors_total", "name" => name.to_owned()),
                stuck,
            }
        };
        #[cfg(not(feature = "metrics"))]
        let this = Self {};
        this
    }

    /// The stuck-open flag decided at a report: the gauges, and a warning when it
    /// is raised or its cause changes.
    pub(crate) fn stuck_open(&self, name: &str, was: Option<&StuckOpen>, now: Option<&StuckOpen>) {
        #[cfg(feature = "metrics")]
        for (gauge, cause) in self.stuck.iter().zip(StuckCause::ALL) {
            gauge.set(if now.is_some_and(|f| f.cause == cause) {
                1.0
            } else {
                0.0
            });
        }
        #[cfg(feature = "tracing")]
        if let Some(flag) = now.filter(|f| was.map(|w| w.cause) != Some(f.cause)) {
            tracing::warn!(
                target: "seawall::fleet",
                name,
                cause = flag.cause.as_str(),
                open_for_ms = flag.open_for_ms,
                others_closed = flag.others_closed,
                others_open = flag.others_open,
                dependency_check = ?flag.dependency_check,
                "circuit breaker stuck open"
            );
        }
    }

    pub(crate) fn store_error(&self, name: &str, op: &'static str, error: &StoreError) {
        #[cfg(feature = "metrics")]
        self.errors.increment(1);
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "seawall::fleet", name, op, %error, "store operation failed");
    }

    /// A fleet action applied, ended or refused here (also in the store's audit log).
    pub(crate) fn fleet_action(&self, name: &str, entry: &crate::actions::AuditEntry) {
        fleet_action(name, entry);
    }

    pub(crate) fn went_local(&self, name: &str, error: &StoreError) {
        #[cfg(feature = "metrics")]
        self.connected.set(0.0);
        #[cfg(feature = "tracing")]
        tracing::warn!(
            target: "seawall::fleet",
            name,
            %error,
            "store unreachable: coordination off, the local breaker decides alone"
        );
    }

    pub(crate) fn joined(&self, name: &str) {
        #[cfg(feature = "metrics")]
        self.connected.set(1.0);
        #[cfg(feature = "tracing")]
        tracing::info!(target: "seawall::fleet", name, "store reachable: coordinating");
    }
}

/// The store's setup is unsafe for the fleet (an eviction policy).
#[cfg(feature = "redis")]
pub(crate) fn store_warning(warning: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "seawall::fleet", %warning, "store setup");
}

/// The store refused to say how it is set up (`CONFIG GET` not allowed).
#[cfg(feature = "redis")]
pub(crate) fn store_check_refused(error: &str) {
    #[cfg(feature = "tracing")]
    tracing::info!(
        target: "seawall::fleet",
        %error,
        "could not read the store's eviction policy: make sure it is noeviction"
    );
}

#[derive(Debug)]
pub(crate) struct CapTelemetry {
    #[cfg(feature = "metrics")]
    allotment: metrics::Gauge,
    #[cfg(feature = "metrics")]
    renewed: metrics::Counter,
    #[cfg(feature = "metrics")]
    failed: metrics::Counter,
    #[cfg(feature = "metrics")]
    errors: metrics::Counter,
}

impl CapTelemetry {
    pub(crate) fn new(name: &str) -> Self {
        #[cfg(feature = "metrics")]
        let this = Self {
            allotment: metrics::gauge!("seawall_fleet_allotment", "name" => name.to_owned()),
            renewed: metrics::counter!("seawall_fleet_renewals_total", "name" => name.to_owned(), "outcome" => "ok"),
            failed: metrics::counter!("seawall_fleet_renewals_total", "name" => name.to_owned(), "outcome" => "failed"),
            errors: metrics::counter!("seawall_fleet_store_errors_total", "name" => name.to_owned()),
        };
        #[cfg(not(feature = "metrics"))]
        let this = Self {};
        this
    }

    pub(crate) fn allotment(&self, allotment: u32) {
        #[cfg(feature = "metrics")]
        self.allotment.set(f64::from(allotment));
    }

    pub(crate) fn renewed(&self, ok: bool) {
        #[cfg(feature = "metrics")]
        if ok {
            self.renewed.increment(1);
        } else {
            self.failed.increment(1);
        }
    }

    pub(crate) fn store_error(&self, name: &str, error: &StoreError) {
        #[cfg(feature = "metrics")]
        self.errors.increment(1);
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "seawall::fleet", name, %error, "cap renewal failed");
    }

    pub(crate) fn lapsed(&self, name: &str, mode: &'static str, fallback: u32) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            target: "seawall::fleet",
            name,
            mode,
            fallback,
            "cap lease lapsed unrenewed: admitting into the mode's fallback"
        );
    }

    pub(crate) fn rejoined(&self, name: &str, allotment: u32) {
        #[cfg(feature = "tracing")]
        tracing::info!(target: "seawall::fleet", name, allotment, "cap lease renewed again");
    }

    /// An operator's decision on the cap not taken up: unsigned, badly signed or expired.
    pub(crate) fn operator_cap_refused(
        &self,
        name: &str,
        cap: Option<u32>,
        why: &crate::actions::ActionRefusal,
    ) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            target: "seawall::fleet",
            name,
            cap = cap.unwrap_or(0),
            %why,
            "an operator's cap in the store is not signed by the fleet's secret: not taken up"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = (name, cap, why);
    }

    pub(crate) fn cap_disagrees(&self, name: &str, configured: u32, stored: u32) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            target: "seawall::fleet",
            name,
            configured,
            stored,
            "this instance's configured cap differs from the store's: the store's applies"
        );
    }
}

/// A fleet action applied, ended or refused on this instance (also in the
/// store's audit log): by a coordination, or by a floor follower.
pub(crate) fn fleet_action(name: &str, entry: &crate::actions::AuditEntry) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        target: "seawall::fleet",
        name,
        event = %entry.event,
        action = %entry.action,
        kind = %entry.kind,
        signer = %entry.signer,
        reason = %entry.reason,
        expires_at_ms = entry.expires_at_ms,
        "fleet action"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (name, entry);
}
