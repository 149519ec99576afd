//! The circuit breaker of a policy: its constructors.

use seawall_core::ConfigError;

use super::policies::Policies;
use crate::circuit_breaker::{
    CircuitBreakerBuilder, CircuitBreakerConfig, CircuitBreakerLayer, Handle,
};

impl Policies {
    /// Builds the circuit breaker of policy `name` (once; clone it to share it).
    /// `customize` receives the builder and sets what is code, such as the
    /// classifier (`|b| b.classifier(HttpStatus::default())`); the document's
    /// section then replaces the builder's configuration.
    pub fn circuit_breaker<C>(
        &self,
        name: &str,
        customize: impl FnOnce(CircuitBreakerBuilder) -> CircuitBreakerBuilder<C>,
    ) -> Result<CircuitBreakerLayer<C>, ConfigError> {
        self.build_layer::<Handle, _>(
            name,
            |config| {
                customize(CircuitBreakerLayer::builder(name))
                    .config(config)
                    .build()
            },
            CircuitBreakerLayer::handle,
        )
    }

    /// The circuit breaker of policy `name` for an HTTP or gRPC client: by default
    /// each call is judged when the response body ends (a gRPC status in the
    /// trailers, a body failing mid-stream), or at the headers with the policy's
    /// `hold = "response"`; the response type is the same either way. `customize`
    /// as for [`circuit_breaker`](Self::circuit_breaker), whose breaker it is.
    #[cfg(feature = "http")]
    pub fn http_circuit_breaker<C>(
        &self,
        name: &str,
        customize: impl FnOnce(CircuitBreakerBuilder) -> CircuitBreakerBuilder<C>,
    ) -> Result<crate::circuit_breaker::UntilBodyEndLayer<C>, ConfigError> {
        let hold = self.hold(name).is_body();
        Ok(self
            .circuit_breaker(name, customize)?
            .hold_until_body_end()
            .hold_body(hold))
    }
}

/// What a breaker's handle would refuse: nothing a valid section holds.
pub(super) fn refused(_: &Handle, _: &CircuitBreakerConfig) -> Vec<ConfigError> {
    Vec::new()
}
