//! The only place with `cfg(feature = "tracing")` and `cfg(feature = "metrics")`.
//!
//! Metrics (feature `metrics`), labelled with the breaker's `name`:
//! - `seawall_fleet_connected`: a gauge, 1 while the instance coordinates through
//!   the store, 0 while it runs on its local breaker alone;
//! - `seawall_fleet_store_errors_total`: store operations that failed or timed out.

#![cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]

use crate::store::StoreError;

#[derive(Debug)]
pub(crate) struct Telemetry {
    #[cfg(feature = "metrics")]
    connected: metrics::Gauge,
    #[cfg(feature = "metrics")]
    errors: metrics::Counter,
}

impl Telemetry {
    pub(crate) fn new(name: &str) -> Self {
        #[cfg(feature = "metrics")]
        let this = {
            let connected = metrics::gauge!("seawall_fleet_connected", "name" => name.to_owned());
            connected.set(0.0);
            Self {
                connected,
                errors: metrics::counter!("seawall_fleet_store_errors_total", "name" => name.to_owned()),
            }
        };
        #[cfg(not(feature = "metrics"))]
        let this = Self {};
        this
    }

    pub(crate) fn store_error(&self, name: &str, op: &'static str, error: &StoreError) {
        #[cfg(feature = "metrics")]
        self.errors.increment(1);
        #[cfg(feature = "tracing")]
        tracing::debug!(target: "seawall::fleet", name, op, %error, "store operation failed");
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
