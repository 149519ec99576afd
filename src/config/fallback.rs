//! The fallback of a policy: its constructor, and what its built steps refuse.

use seawall_core::ConfigError;

use super::policies::Policies;
use crate::fallback::{Captures, FallbackBuilder, FallbackConfig, FallbackLayer, Handle, Spec};

impl Policies {
    /// Builds the fallback of policy `name` (once; clone it to share it).
    /// `customize` sets what is code (the capture, the strategy or chain of steps,
    /// a failure classifier, the HTTP server mode); the document's section then
    /// replaces the builder's configuration (which rejection kinds fire it, step
    /// timeouts, enabled).
    pub fn fallback<Cap, P, C, M>(
        &self,
        name: &str,
        customize: impl FnOnce(FallbackBuilder) -> FallbackBuilder<Cap, P, C, M>,
    ) -> Result<FallbackLayer<Cap, P::Plan, C, M>, ConfigError>
    where
        Cap: Captures,
        P: Spec<Cap::Output>,
    {
        self.build_layer::<Handle, _>(
            name,
            |config| {
                customize(FallbackLayer::builder(name))
                    .config(config)
                    .build()
            },
            FallbackLayer::handle,
        )
    }
}

/// What the built fallback would refuse, checked before anything changes: the
/// step timeouts must name steps it has (fields relative to the section).
pub(super) fn refused(handle: &Handle, config: &FallbackConfig) -> Vec<ConfigError> {
    let steps = handle.snapshot().steps;
    config
        .step_timeouts
        .iter()
        .enumerate()
        .filter(|(_, st)| !steps.iter().any(|s| s.name == st.step))
        .map(|(i, st)| {
            ConfigError::new(
                format!("step_timeouts[{i}].step"),
                format!("this fallback has no step named `{}`", st.step),
            )
        })
        .collect()
}
