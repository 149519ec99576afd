//! The layer and its validated builder.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tower_layer::Layer;

use super::config::{HedgeConfig, HedgeDelay, PercentileDelay};
use super::service::{Hedge, IdempotentRequests};
use super::state::{HedgeHandle, Shared};
use crate::classify::ErrorsAsFailures;
use crate::config::ConfigError;
use crate::rejection::Name;
use crate::retry::SharedBudget;

/// Hedges slow requests: see the [module docs](crate::hedge) for the rules.
///
/// Every service this layer builds shares one budget, one latency estimator and one
/// set of counters (the layer holds them behind an `Arc`, as
/// `GlobalConcurrencyLimitLayer` does its semaphore); two layers built apart share
/// nothing, unless given the same [`SharedBudget`].
#[derive(Clone)]
pub struct HedgeLayer<C = ErrorsAsFailures, F = IdempotentRequests> {
    shared: Arc<Shared>,
    classifier: C,
    hedge_if: F,
}

impl HedgeLayer {
    /// A builder for a layer called `name` (the `name` label of its metrics), with
    /// [`HedgeConfig::default`], [`ErrorsAsFailures`] and [`IdempotentRequests`].
    pub fn builder(name: impl Into<Name>) -> HedgeBuilder {
        HedgeBuilder {
            name: name.into(),
            config: HedgeConfig::default(),
            budget: None,
            classifier: ErrorsAsFailures,
            hedge_if: IdempotentRequests,
        }
    }
}

impl<C, F> HedgeLayer<C, F> {
    /// A handle on the counters every service of this layer shares.
    pub fn handle(&self) -> HedgeHandle {
        HedgeHandle {
            shared: self.shared.clone(),
        }
    }
}

impl<C, F> fmt::Debug for HedgeLayer<C, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgeLayer")
            .field("name", &self.shared.name)
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl<S, C: Clone, F: Clone> Layer<S> for HedgeLayer<C, F> {
    type Service = Hedge<S, C, F>;

    fn layer(&self, inner: S) -> Self::Service {
        Hedge {
            inner,
            shared: self.shared.clone(),
            classifier: self.classifier.clone(),
            hedge_if: self.hedge_if.clone(),
        }
    }
}

/// Builds a [`HedgeLayer`]; see [`HedgeLayer::builder`]. Every setter is validated by
/// [`build`](Self::build), which names the field at fault.
pub struct HedgeBuilder<C = ErrorsAsFailures, F = IdempotentRequests> {
    name: Name,
    config: HedgeConfig,
    budget: Option<SharedBudget>,
    classifier: C,
    hedge_if: F,
}

impl<C, F> fmt::Debug for HedgeBuilder<C, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgeBuilder")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<C, F> HedgeBuilder<C, F> {
    /// Attempts in all, the first included (default 2; at least 1, and 1 never hedges).
    #[must_use]
    pub fn max_attempts(mut self, attempts: usize) -> Self {
        self.config.max_attempts = attempts;
        self
    }

    /// Each hedge after `delay` without an answer (at most a year).
    #[must_use]
    pub fn fixed_delay(mut self, delay: Duration) -> Self {
        self.config.delay = HedgeDelay::Fixed(delay);
        self
    }

    /// Each hedge when the attempt before it has run longer than `percentile` (above
    /// 0, at most 100) of recent first attempts, with the other settings of
    /// [`PercentileDelay::default`].
    #[must_use]
    pub fn percentile_delay(mut self, percentile: f64) -> Self {
        self.config.delay = HedgeDelay::Percentile(PercentileDelay {
            percentile,
            ..PercentileDelay::default()
        });
        self
    }

    /// The delay, in full.
    #[must_use]
    pub fn delay(mut self, delay: HedgeDelay) -> Self {
        self.config.delay = delay;
        self
    }

    /// The least time a hedge needs to be worth sending (default 20 ms).
    #[must_use]
    pub fn min_attempt_time(mut self, time: Duration) -> Self {
        self.config.min_attempt_time = time;
        self
    }

    /// The layer's own budget: hedges allowed up to `share` of the first attempts of
    /// the last `window`, plus `reserve` per window (default 0.1, 10, 10 s). Not used
    /// with [`shared_budget`](Self::shared_budget).
    #[must_use]
    pub fn budget(mut self, share: f64, reserve: u32, window: Duration) -> Self {
        self.config.budget_share = share;
        self.config.budget_reserve = reserve;
        self.config.budget_window = window;
        self
    }

    /// Draws on `budget`, shared with a [`DeadlineRetry`](crate::DeadlineRetry)
    /// ([`DeadlineRetry::budget`](crate::DeadlineRetry::budget)) or another hedging
    /// layer, so that retries and hedges together stay within it.
    #[must_use]
    pub fn shared_budget(mut self, budget: SharedBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Replaces the whole configuration (e.g. one loaded from a file).
    #[must_use]
    pub fn config(mut self, config: HedgeConfig) -> Self {
        self.config = config;
        self
    }

    /// Decides which answers win (default [`ErrorsAsFailures`]): only a result the
    /// classifier calls a [`Success`](crate::Outcome::Success) ends the request
    /// early. With [`HttpStatus`](crate::HttpStatus), a `503` does not win; a `404`
    /// does.
    pub fn classifier<C2>(self, classifier: C2) -> HedgeBuilder<C2, F> {
        HedgeBuilder {
            name: self.name,
            config: self.config,
            budget: self.budget,
            classifier,
            hedge_if: self.hedge_if,
        }
    }

    /// Decides which requests may be hedged, and copies them (default
    /// [`IdempotentRequests`]): any [`HedgeIf`](super::HedgeIf), such as a closure
    /// `Fn(&Req) -> Option<Req>`.
    ///
    /// ```
    /// use seawall_core::HedgeLayer;
    ///
    /// // A key-value read, as a plain string: safe to send twice.
    /// let layer = HedgeLayer::builder("kv")
    ///     .hedge_if(|key: &String| Some(key.clone()))
    ///     .build()
    ///     .unwrap();
    /// # let _ = layer;
    /// ```
    pub fn hedge_if<F2>(self, hedge_if: F2) -> HedgeBuilder<C, F2> {
        HedgeBuilder {
            name: self.name,
            config: self.config,
            budget: self.budget,
            classifier: self.classifier,
            hedge_if,
        }
    }

    /// Validates the configuration and creates the shared state (install a metrics
    /// recorder before this).
    pub fn build(self) -> Result<HedgeLayer<C, F>, ConfigError> {
        let config = self.config;
        config.validate()?;
        let budget = self.budget.unwrap_or_else(|| {
            SharedBudget::build(
                config.budget_share,
                config.budget_reserve,
                config.budget_window,
            )
        });
        Ok(HedgeLayer {
            shared: Arc::new(Shared::new(self.name, config, budget, Instant::now())),
            classifier: self.classifier,
            hedge_if: self.hedge_if,
        })
    }
}
