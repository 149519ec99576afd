//! The layer, where its state lives, and its builder.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use seawall_core::{ConfigError, ErrorsAsFailures, Name, RandomSource};
use tokio::time::Instant;
use tower_layer::Layer;

use crate::config::{CircuitBreakerConfig, RampConfig, SlowCallConfig, TripPolicy};
use crate::handle::Handle;
use crate::service::CircuitBreaker;
use crate::state::{tally_lines, Breaker, Lanes};

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
    breaker: Lanes,
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
            tally_lines(),
        )?;
        Ok(Self {
            breaker: Lanes::of(breaker),
            classifier: builder.classifier,
        })
    }

    /// The operator's handle on this layer's breaker.
    pub fn handle(&self) -> Handle {
        Handle::new(Arc::clone(self.breaker.first()))
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        self.breaker.breaker().name()
    }
}

impl<C: Clone> Clone for CircuitBreakerLayer<C> {
    fn clone(&self) -> Self {
        Self {
            breaker: self.breaker.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<C: fmt::Debug> fmt::Debug for CircuitBreakerLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("name", &self.breaker.breaker().name())
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl<S, C: Clone> Layer<S> for CircuitBreakerLayer<C> {
    type Service = CircuitBreaker<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker::new(inner, self.breaker.clone(), self.classifier.clone())
    }
}

/// Builds a [`CircuitBreakerLayer`], or with [`keyed`](Self::keyed) one breaker per
/// key; every setter is validated by `build`, which names the field at fault.
pub struct CircuitBreakerBuilder<C = ErrorsAsFailures> {
    pub(crate) name: Name,
    pub(crate) config: CircuitBreakerConfig,
    pub(crate) classifier: C,
    pub(crate) random: Option<Box<dyn RandomSource>>,
}

impl<C: std::fmt::Debug> std::fmt::Debug for CircuitBreakerBuilder<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreakerBuilder")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl CircuitBreakerBuilder {
    pub(crate) fn new(name: Name) -> Self {
        Self {
            name,
            config: CircuitBreakerConfig::default(),
            classifier: ErrorsAsFailures,
            random: None,
        }
    }
}

impl<C> CircuitBreakerBuilder<C> {
    /// Replaces the whole configuration (e.g. one loaded from a file).
    #[must_use]
    pub fn config(mut self, config: CircuitBreakerConfig) -> Self {
        self.config = config;
        self
    }

    /// Trips by `policy`, any [`TripPolicy`]: the shorthands below set the common
    /// ones, and a new policy needs no shorthand of its own to be used.
    #[must_use]
    pub fn policy(mut self, policy: TripPolicy) -> Self {
        self.config.policy = policy;
        self
    }

    /// Trips on `threshold` consecutive failures.
    #[must_use]
    pub fn consecutive_failures(mut self, threshold: u32) -> Self {
        self.config.policy = TripPolicy::ConsecutiveFailures { threshold };
        self
    }

    /// Trips on the failure rate of the last `size` outcomes, once `min_calls` are in.
    #[must_use]
    pub fn count_window(mut self, size: u32, min_calls: u32, failure_rate: f64) -> Self {
        self.config.policy = TripPolicy::CountWindow {
            size,
            min_calls,
            failure_rate,
        };
        self
    }

    /// Trips on the failure rate of the last `window` of time (buckets of `bucket`),
    /// once `min_calls` outcomes are in it.
    #[must_use]
    pub fn time_window(
        mut self,
        window: Duration,
        bucket: Duration,
        min_calls: u32,
        failure_rate: f64,
    ) -> Self {
        self.config.policy = TripPolicy::TimeWindow {
            window,
            bucket,
            min_calls,
            failure_rate,
        };
        self
    }

    /// Also trips when at least `rate` of the window's calls took `threshold` or longer.
    #[must_use]
    pub fn slow_calls(mut self, threshold: Duration, rate: f64) -> Self {
        self.config.slow_call = Some(SlowCallConfig { threshold, rate });
        self
    }

    /// How long the breaker stays open after a trip.
    #[must_use]
    pub fn open_for(mut self, open_for: Duration) -> Self {
        self.config.open_for = open_for;
        self
    }

    /// Grows the open interval by `multiplier` on each re-trip, up to `max_open_for`.
    #[must_use]
    pub fn backoff(mut self, multiplier: f64, max_open_for: Duration) -> Self {
        self.config.backoff_multiplier = multiplier;
        self.config.max_open_for = max_open_for;
        self
    }

    /// Stretches each open interval by a random fraction in `[0, jitter)` of itself
    /// (default [`DEFAULT_JITTER`](crate::DEFAULT_JITTER), 0.2; `0.0` for exact intervals).
    /// A value set here is kept when a fleet coordinates the breaker.
    #[must_use]
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.config.jitter = Some(jitter);
        self
    }

    /// The source of the jitter samples (default: seeded from entropy).
    #[must_use]
    pub fn random_source(mut self, random: impl RandomSource) -> Self {
        self.random = Some(Box::new(random));
        self
    }

    /// Probes allowed in flight at once while half-open (default 1).
    #[must_use]
    pub fn half_open_max(mut self, probes: u32) -> Self {
        self.config.half_open_max = probes;
        self
    }

    /// Successful probes needed to close (default 1).
    #[must_use]
    pub fn probes_to_close(mut self, probes: u32) -> Self {
        self.config.probes_to_close = probes;
        self
    }

    /// A probe still running after this long counts as failed (default 10 s).
    #[must_use]
    pub fn half_open_timeout(mut self, timeout: Duration) -> Self {
        self.config.half_open_timeout = timeout;
        self
    }

    /// After closing, admits `start_share` of the calls, growing to all of them over `duration`.
    #[must_use]
    pub fn ramp(mut self, duration: Duration, start_share: f64) -> Self {
        self.config.ramp = Some(RampConfig {
            duration,
            start_share,
        });
        self
    }

    /// Starts in shadow mode (see [`CircuitBreakerConfig::shadow`]); switch it at
    /// run time with [`Handle::set_shadow`](crate::Handle::set_shadow).
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.config.shadow = shadow;
        self
    }

    /// Decides which results count as failures (default [`ErrorsAsFailures`]); any
    /// seawall-core classifier or per-request factory.
    pub fn classifier<C2>(self, classifier: C2) -> CircuitBreakerBuilder<C2> {
        CircuitBreakerBuilder {
            name: self.name,
            config: self.config,
            classifier,
            random: self.random,
        }
    }

    /// Validates the configuration and creates the layer and its one shared breaker.
    pub fn build(self) -> Result<CircuitBreakerLayer<C>, ConfigError> {
        CircuitBreakerLayer::from_parts(self)
    }
}
