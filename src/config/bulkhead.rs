//! The bulkhead of a policy: its constructors.

use seawall_core::ConfigError;

use super::policies::Policies;
use crate::bulkhead::{BulkheadConfig, BulkheadLayer, Handle};

impl Policies {
    /// Builds the bulkhead of policy `name` (once; clone it to share it).
    pub fn bulkhead(&self, name: &str) -> Result<BulkheadLayer, ConfigError> {
        self.build_layer::<Handle, _>(
            name,
            |config| BulkheadLayer::from_config(name, config),
            BulkheadLayer::handle,
        )
    }

    /// The bulkhead of policy `name` for an HTTP client: by default each call keeps
    /// its slot until the response body ends ([`hold_until_body_end`](BulkheadLayer::hold_until_body_end)),
    /// or only until the headers with the policy's `hold = "response"`; the response
    /// type is `http::Response<Guarded<B, Permit>>` either way. Built once, and the
    /// same bulkhead as [`bulkhead`](Self::bulkhead) builds for the policy.
    #[cfg(feature = "http")]
    pub fn http_bulkhead(
        &self,
        name: &str,
    ) -> Result<BulkheadLayer<crate::bulkhead::UntilBodyEnd>, ConfigError> {
        let hold = self.hold(name).is_body();
        Ok(self.bulkhead(name)?.hold_until_body_end().hold_body(hold))
    }
}

/// What a bulkhead's handle would refuse: nothing a valid section holds.
pub(super) fn refused(_: &Handle, _: &BulkheadConfig) -> Vec<ConfigError> {
    Vec::new()
}
