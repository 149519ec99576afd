//! The fault layer of a policy: its constructor. Nothing its built layer refuses
//! beyond its section's own validation.

use seawall_core::ConfigError;

use super::policies::Policies;
use crate::fault::{FaultBuilder, FaultConfig, FaultLayer, Handle};

impl Policies {
    /// Builds the fault layer of policy `name` (once; clone it to share it), with the
    /// injections of its `fault` table: a policy can be rehearsed only if its
    /// document says so, with a table (empty, for injections from the admin routes
    /// and the dashboard only). `customize` sets what is code, such as a seed
    /// (`|b| b.seed(7)`); call [`http`](crate::fault::FaultLayer::http) on the layer
    /// for an HTTP client. Place it innermost, in front of the client.
    ///
    /// An injection of the start-up document whose `until` has passed by the time
    /// the layer is built is left out: its rehearsal is over.
    pub fn fault(
        &self,
        name: &str,
        customize: impl FnOnce(FaultBuilder) -> FaultBuilder,
    ) -> Result<FaultLayer, ConfigError> {
        self.build_layer::<Handle, _>(
            name,
            |mut config| {
                let now = std::time::SystemTime::now();
                config.injections.retain(|i| i.until > now);
                customize(FaultLayer::builder(name)).config(config).build()
            },
            FaultLayer::handle,
        )
    }
}

/// Nothing: a fault table's validation is all there is to check.
pub(super) fn refused(_: &Handle, _: &FaultConfig) -> Vec<ConfigError> {
    Vec::new()
}
