//! The layer and its validated builder.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use seawall_core::{
    AdmissionAsFailure, BoxError, ConfigError, ErrorsAsFailures, Name, RandomSource, SeededRandom,
};
use tokio::time::Instant;
use tower::util::{BoxCloneSyncService, ServiceExt};
use tower_layer::Layer;
use tower_service::Service;

use crate::config::{DegradationConfig, Trigger};
use crate::future::{LevelService, NoExtensions, WithLevelExtensions};
use crate::handle::{Handle, Shared};
use crate::machine::DegradationMachine;
use crate::service::Degradation;

/// The default classifier: errors are failures, and so are admission rejections from a
/// level's own stack (its breaker open, its bulkhead full): that level cannot serve.
pub type DefaultClassifier = AdmissionAsFailure<ErrorsAsFailures>;

/// Serves requests at the best level that works, falling fast and climbing back slowly.
///
/// `layer(inner)` makes `inner` the best level (0); the lower levels are the services
/// given to [`DegradationBuilder::level`], in order. One state is created at
/// [`build`](DegradationBuilder::build): every service this layer makes, and every
/// clone of them, shares one level machine and one set of lower-level services (like
/// tower's `GlobalConcurrencyLimitLayer`, not `ConcurrencyLimitLayer`). Build one layer
/// per thing that degrades.
pub struct DegradationLayer<Req, Res, C = DefaultClassifier, X = NoExtensions> {
    shared: Arc<Shared>,
    lower: Arc<[LevelService<Req, Res>]>,
    classifier: C,
    extensions: X,
}

impl<Req, Res, C: Clone, X: Clone> Clone for DegradationLayer<Req, Res, C, X> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            lower: self.lower.clone(),
            classifier: self.classifier.clone(),
            extensions: self.extensions.clone(),
        }
    }
}

impl<Req, Res, C: fmt::Debug, X: fmt::Debug> fmt::Debug for DegradationLayer<Req, Res, C, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DegradationLayer")
            .field("name", &self.shared.name)
            .field("levels", &self.shared.level_names)
            .field("classifier", &self.classifier)
            .field("extensions", &self.extensions)
            .finish()
    }
}

impl<Req, Res> DegradationLayer<Req, Res> {
    /// Starts a builder for the layer `name` (used in events and metrics).
    pub fn builder(name: impl Into<Name>) -> DegradationBuilder<Req, Res> {
        DegradationBuilder {
            parts: Parts {
                name: name.into(),
                top: "full".into(),
                lower: Vec::new(),
                config: DegradationConfig::default(),
                random: None,
            },
            classifier: AdmissionAsFailure(ErrorsAsFailures),
            extensions: NoExtensions,
        }
    }
}

impl<Req, Res, C, X> DegradationLayer<Req, Res, C, X> {
    /// The operator's handle on the layer's shared state.
    pub fn handle(&self) -> Handle {
        Handle {
            shared: self.shared.clone(),
        }
    }
}

impl<S, Req, Res, C: Clone, X: Clone> Layer<S> for DegradationLayer<Req, Res, C, X> {
    type Service = Degradation<S, Req, Res, C, X>;

    fn layer(&self, inner: S) -> Self::Service {
        Degradation {
            inner,
            lower: self.lower.clone(),
            shared: self.shared.clone(),
            classifier: self.classifier.clone(),
            extensions: self.extensions.clone(),
        }
    }
}

/// Builds a [`DegradationLayer`]; see [`DegradationConfig`] for what each setting means.
pub struct DegradationBuilder<Req, Res, C = DefaultClassifier, X = NoExtensions> {
    parts: Parts<Req, Res>,
    classifier: C,
    extensions: X,
}

/// What the builder carries unchanged when a setter changes one of its type
/// parameters (the classifier or the extensions).
struct Parts<Req, Res> {
    name: Name,
    top: Name,
    lower: Vec<(Name, LevelService<Req, Res>)>,
    config: DegradationConfig,
    random: Option<Box<dyn RandomSource>>,
}

impl<Req, Res, C: fmt::Debug, X: fmt::Debug> fmt::Debug for DegradationBuilder<Req, Res, C, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = &self.parts;
        f.debug_struct("DegradationBuilder")
            .field("name", &parts.name)
            .field("top", &parts.top)
            .field(
                "lower",
                &parts.lower.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("config", &parts.config)
            .field("classifier", &self.classifier)
            .field("extensions", &self.extensions)
            .finish_non_exhaustive()
    }
}

impl<Req, Res, C, X> DegradationBuilder<Req, Res, C, X> {
    /// Names the best level, served by the inner service (default `"full"`).
    pub fn inner_level(mut self, name: impl Into<Name>) -> Self {
        self.parts.top = name.into();
        self
    }

    /// Adds the next lower level, served by `service` (typically its own Deadline →
    /// Bulkhead → CircuitBreaker stack; the last one a fixed answer that cannot fail).
    pub fn level<S>(mut self, name: impl Into<Name>, service: S) -> Self
    where
        S: Service<Req, Response = Res> + Clone + Send + Sync + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send + 'static,
        Req: 'static,
        Res: 'static,
    {
        let service = BoxCloneSyncService::new(service.map_err(Into::<BoxError>::into));
        self.parts.lower.push((name.into(), service));
        self
    }

    /// Adds the next lower level, already erased.
    pub fn level_boxed(mut self, name: impl Into<Name>, service: LevelService<Req, Res>) -> Self {
        self.parts.lower.push((name.into(), service));
        self
    }

    /// Replaces the whole configuration (e.g. loaded from a file).
    pub fn config(mut self, config: DegradationConfig) -> Self {
        self.parts.config = config;
        self
    }

    /// The builder with one setting of its configuration changed by `set`
    /// (checked with the rest by [`build`](Self::build)).
    fn tuned(mut self, set: impl FnOnce(&mut DegradationConfig)) -> Self {
        set(&mut self.parts.config);
        self
    }

    /// Falls one level after `n` consecutive failures at the level (the default, 5).
    pub fn consecutive_failures(self, n: u32) -> Self {
        self.tuned(|c| {
            c.trigger = Trigger::ConsecutiveFailures;
            c.failures_to_degrade = n;
        })
    }

    /// Falls one level when at least `rate` of the outcomes over the last `window` failed,
    /// once `min_calls` outcomes are in it.
    pub fn failure_rate(self, rate: f64, window: Duration, min_calls: u32) -> Self {
        self.tuned(|c| {
            c.trigger = Trigger::FailureRate;
            c.failure_rate = rate;
            c.rate_window = window;
            c.min_calls = min_calls;
        })
    }

    /// Minimum time at a level before it may climb (default 60 s).
    pub fn min_dwell(self, dwell: Duration) -> Self {
        self.tuned(|c| c.min_dwell = dwell)
    }

    /// Share of requests sent as probes to the level above after the dwell (default 0.05).
    pub fn probe_ratio(self, ratio: f64) -> Self {
        self.tuned(|c| c.probe_ratio = ratio)
    }

    /// How long probe outcomes are gathered before judging (default 60 s).
    pub fn probe_window(self, window: Duration) -> Self {
        self.tuned(|c| c.probe_window = window)
    }

    /// Probe successes needed within a window to climb (default 20).
    pub fn probe_successes_to_recover(self, n: u32) -> Self {
        self.tuned(|c| c.probe_successes_to_recover = n)
    }

    /// Highest probe failure rate over a window that still allows the climb (default 0.1).
    pub fn probe_max_failure_rate(self, rate: f64) -> Self {
        self.tuned(|c| c.probe_max_failure_rate = rate)
    }

    /// Starts in shadow mode (see [`DegradationConfig::shadow`]); switch it at run
    /// time with [`Handle::set_shadow`](crate::Handle::set_shadow).
    pub fn shadow(self, shadow: bool) -> Self {
        self.tuned(|c| c.shadow = shadow)
    }

    /// The source of the probe samples (default: seeded from entropy, different in
    /// every process so a fleet does not probe in lockstep).
    pub fn random(mut self, random: impl RandomSource) -> Self {
        self.parts.random = Some(Box::new(random));
        self
    }

    /// A fixed seed for the probe samples, for reproducible tests.
    pub fn seed(self, seed: u64) -> Self {
        self.random(SeededRandom::new(seed))
    }

    /// Decides which results are failures of a level (default [`DefaultClassifier`]).
    /// Wrap your classifier in `AdmissionAsFailure` unless you mean a level's own
    /// breaker or bulkhead rejections to go unnoticed.
    pub fn classifier<C2>(self, classifier: C2) -> DegradationBuilder<Req, Res, C2, X> {
        DegradationBuilder {
            parts: self.parts,
            classifier,
            extensions: self.extensions,
        }
    }

    /// Inserts [`CurrentLevel`](crate::CurrentLevel) into each request's extensions and
    /// [`ServedBy`](crate::ServedBy) into each response's, for handlers that adapt.
    /// Off by default: each insert allocates.
    pub fn level_extensions(self) -> DegradationBuilder<Req, Res, C, WithLevelExtensions> {
        DegradationBuilder {
            parts: self.parts,
            classifier: self.classifier,
            extensions: WithLevelExtensions,
        }
    }

    /// Validates and builds the layer, at the best level from now.
    pub fn build(self) -> Result<DegradationLayer<Req, Res, C, X>, ConfigError> {
        let parts = self.parts;
        let mut names: Vec<Name> = Vec::with_capacity(parts.lower.len() + 1);
        names.push(parts.top);
        let mut services = Vec::with_capacity(parts.lower.len());
        for (name, service) in parts.lower {
            if names.contains(&name) {
                return Err(ConfigError::new(
                    "levels",
                    format!("two levels are named `{name}`"),
                ));
            }
            names.push(name);
            services.push(service);
        }
        if services.is_empty() {
            return Err(ConfigError::new(
                "levels",
                "add at least one lower level with `level(name, service)`",
            ));
        }
        let now = Instant::now();
        let random = parts
            .random
            .unwrap_or_else(|| Box::new(SeededRandom::from_entropy()));
        let machine = DegradationMachine::new(names.len(), parts.config, random, now)?;
        Ok(DegradationLayer {
            shared: Arc::new(Shared::new(parts.name, names.into(), machine, now)),
            lower: services.into(),
            classifier: self.classifier,
            extensions: self.extensions,
        })
    }
}
