//! The degradation layer of a policy: its constructor.

use seawall_core::ConfigError;

use super::policies::Policies;
use crate::degradation::{DegradationBuilder, DegradationConfig, DegradationLayer, Handle};

impl Policies {
    /// Builds the degradation layer of policy `name` (once; clone it to share it).
    /// `customize` adds the levels (code); the document's section then replaces the
    /// builder's configuration.
    pub fn degradation<Req, Res, C, X>(
        &self,
        name: &str,
        customize: impl FnOnce(DegradationBuilder<Req, Res>) -> DegradationBuilder<Req, Res, C, X>,
    ) -> Result<DegradationLayer<Req, Res, C, X>, ConfigError> {
        self.build_layer::<Handle, _>(
            name,
            |config| {
                customize(DegradationLayer::builder(name))
                    .config(config)
                    .build()
            },
            DegradationLayer::handle,
        )
    }
}

/// What a degradation layer's handle would refuse: nothing a valid section holds.
pub(super) fn refused(_: &Handle, _: &DegradationConfig) -> Vec<ConfigError> {
    Vec::new()
}
