//! The layer, and where its state lives.

use std::fmt;
use std::sync::Arc;

use seawall_core::{ConfigError, ErrorsAsFailures, Name};
use tokio::time::Instant;
use tower_layer::Layer;

use crate::state::Breaker;
use crate::config::{CircuitBreakerBuilder, CircuitBreakerConfig};
use crate::handle::Handle;
use crate::service::CircuitBreaker;

/// Wraps services in a circuit breaker.
///
/// **Where state lives:** the layer owns *one* breaker, created by
/// [`build`](CircuitBreakerBuilder::build). Every service it builds, and every clone
/// of those services, shares it (like tower's `GlobalConcurrencyLimitLayer`, not
/// `ConcurrencyLimitLayer`). For separate dependencies build separate layers, or use
/// a [`KeyedCircuitBreakerLayer`](crate::KeyedCircuitBreakerLayer) for one breaker
/// per host, route or tenant. Breakers are per process: three instances of a service
/// trip, probe and recover independently.
///
/// Cloning the layer shares the breaker too. [`handle`](Self::handle) gives the
/// operator's [`Handle`] before (or after) the layer is applied.
pub struct CircuitBreakerLayer<C = ErrorsAsFailures> {
    breaker: Arc<Breaker>,
    classifier: C,
}

impl CircuitBreakerLayer {
    /// Starts a builder for a breaker called `name` (used in rejections, logs and metrics).
    pub fn builder(name: impl Into<Name>) -> CircuitBreakerBuilder {
        CircuitBreakerBuilder::new(name.into())
    }

    /// A layer from a configuration (e.g. loaded from a file), with the default classifier.
    pub fn from_config(
        name: impl Into<Name>,
        config: CircuitBreakerConfig,
    ) -> Result<Self, ConfigError> {
        Self::builder(name).config(config).build()
    }
}

impl<C> CircuitBreakerLayer<C> {
    pub(crate) fn from_parts(builder: CircuitBreakerBuilder<C>) -> Result<Self, ConfigError> {
        let breaker = Breaker::new(
            builder.name,
            &builder.config,
            builder.random,
            Instant::now(),
        )?;
        Ok(Self {
            breaker: Arc::new(breaker),
            classifier: builder.classifier,
        })
    }

    /// The operator's handle on this layer's breaker.
    pub fn handle(&self) -> Handle {
        Handle::new(Arc::clone(&self.breaker))
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        self.breaker.name()
    }

    /// The same breaker in readiness mode: its services' `poll_ready` is pending
    /// while the breaker is open (woken when the open interval ends), so
    /// `tower::balance` and `ReadyCache` stop choosing the endpoint. See
    /// [`PendingWhileOpen`](crate::PendingWhileOpen).
    pub fn pending_while_open(self) -> crate::PendingWhileOpenLayer<C> {
        crate::PendingWhileOpenLayer::new(self)
    }
}

impl<C: Clone> Clone for CircuitBreakerLayer<C> {
    fn clone(&self) -> Self {
        Self {
            breaker: Arc::clone(&self.breaker),
            classifier: self.classifier.clone(),
        }
    }
}

impl<C: fmt::Debug> fmt::Debug for CircuitBreakerLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("name", &self.breaker.name())
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl<S, C: Clone> Layer<S> for CircuitBreakerLayer<C> {
    type Service = CircuitBreaker<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker::new(inner, Arc::clone(&self.breaker), self.classifier.clone())
    }
}
