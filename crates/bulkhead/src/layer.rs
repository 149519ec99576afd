//! The bulkhead's `Layer`: one shared bulkhead for every service it builds.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use seawall_core::{ConfigError, Name, TimeoutsAsOverload, Unclassed};
use tower_layer::Layer;

use crate::adaptive::AdaptiveConfig;
use crate::config::BulkheadConfig;
use crate::handle::Handle;
use crate::hold::UntilResponse;
use crate::queue::QueuePolicy;
use crate::service::Bulkhead;
use crate::state::Shared;

/// Applies a bulkhead to services.
///
/// The bulkhead is created when the layer is built: **every service this layer
/// builds, and every clone of those services, shares that one bulkhead** (as
/// tower's `GlobalConcurrencyLimitLayer`, not `ConcurrencyLimitLayer`). Build one
/// layer per dependency to keep their capacity apart, or use
/// [`KeyedBulkheadLayer`](crate::KeyedBulkheadLayer) for one bulkhead per key.
/// The limits count this process only: three instances of 8 allow 24 calls.
///
/// `O` is the overload classifier an adaptive limit learns from (see
/// [`overload`](Self::overload)); a fixed bulkhead never calls it. `C` gives each
/// request its class (see [`criticality`](Self::criticality)); by default none.
pub struct BulkheadLayer<H = UntilResponse, O = TimeoutsAsOverload, C = Unclassed> {
    shared: Arc<Shared>,
    overload: O,
    classes: C,
    _hold: PhantomData<fn() -> H>,
}

impl BulkheadLayer {
    /// Starts building a bulkhead named `name` (used in rejections, metrics and
    /// logs), with the defaults: 8 active, 10 waiting, 20 ms.
    pub fn builder(name: impl Into<Name>) -> BulkheadBuilder {
        BulkheadBuilder::new(name.into())
    }

    /// A bulkhead named `name` with a validated `config`.
    pub fn from_config(name: impl Into<Name>, config: BulkheadConfig) -> Result<Self, ConfigError> {
        Self::builder(name).config(config).build()
    }

    pub(crate) fn from_builder(b: BulkheadBuilder) -> Self {
        Self {
            shared: Arc::new(Shared::new(b.name, b.config, b.seed)),
            overload: TimeoutsAsOverload,
            classes: Unclassed,
            _hold: PhantomData,
        }
    }
}

impl<H, O, C> BulkheadLayer<H, O, C> {
    /// The same bulkhead, with `overload` deciding what its adaptive limit learns
    /// from each call: [`Failure`](seawall_core::Outcome::Failure) is an overload
    /// signal, [`Success`](seawall_core::Outcome::Success) a served call (its
    /// latency may be sampled), [`Ignore`](seawall_core::Outcome::Ignore) no
    /// evidence.
    ///
    /// The default, [`TimeoutsAsOverload`], works for any response type and sees
    /// only timeouts. For HTTP and gRPC, use
    /// [`OverloadStatus`](seawall_core::OverloadStatus), so that a `429`, a `503`
    /// or `RESOURCE_EXHAUSTED` shrinks the limit and a `404` or a `500` does not.
    /// The bulkhead's own rejections never reach the classifier, and an inner
    /// breaker's `CircuitOpen` is ignored by both.
    pub fn overload<O2>(self, overload: O2) -> BulkheadLayer<H, O2, C> {
        BulkheadLayer {
            shared: self.shared,
            overload,
            classes: self.classes,
            _hold: PhantomData,
        }
    }

    /// The same bulkhead, giving each request a [`Criticality`](seawall_core::Criticality)
    /// with `classes`: a closure `Fn(&Req) -> Criticality` for any request type, or
    /// [`CriticalityHeader`](seawall_core::CriticalityHeader) for HTTP and gRPC
    /// (untrusted by default). Each class may then hold at most its share of the
    /// limit ([`Shares`](crate::queue::Shares)), waits in its own line, and a full
    /// queue turns away its least critical waiter for a more critical newcomer
    /// (the rules: the [`queue`](crate::queue) module). What it costs:
    /// [docs/costs.md](https://github.com/seawall-rs/seawall/blob/main/docs/costs.md#bulkhead).
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use seawall_bulkhead::{BulkheadLayer, Criticality, QueuePolicy, Shares};
    /// use tower::{service_fn, Layer, Service, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), seawall_core::BoxError> {
    /// let freight = BulkheadLayer::builder("freight")
    ///     .max_concurrent(10)
    ///     .queue(QueuePolicy { shares: Shares { default: 90, sheddable: 30 }, ..QueuePolicy::default() })
    ///     .build()?
    ///     // Any request type: here the route decides.
    ///     .criticality(|route: &&'static str| match *route {
    ///         "/checkout" => Criticality::Critical,
    ///         "/prefetch" => Criticality::Sheddable,
    ///         _ => Criticality::Default,
    ///     });
    /// let mut svc = freight.layer(service_fn(|route: &'static str| async move {
    ///     Ok::<_, Infallible>(route.len())
    /// }));
    /// assert_eq!(svc.ready().await?.call("/checkout").await?, 9);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// **Where the class comes from.** A closure `Fn(&Req) -> Criticality` for any
    /// request type; for HTTP and gRPC, [`CriticalityHeader`](seawall_core::CriticalityHeader) reads a header
    /// (`x-criticality`, or one you name; tonic sends metadata as headers). **An
    /// inbound header is untrusted by default**: a client could mark every call
    /// critical, so untrusted it may only lower a call below the default;
    /// [`CriticalityHeader::trusted`](seawall_core::CriticalityHeader::trusted) takes it as sent, for calls from your own
    /// services, and [`CriticalityHeader::write`](seawall_core::CriticalityHeader::write) writes a class into an outgoing
    /// request for the next service.
    ///
    /// **When to use classes.** When one dependency serves calls that do not matter
    /// equally and it is overloaded for minutes, not milliseconds: the classes decide
    /// who gets its capacity. They gain little when the traffic is all one class,
    /// when the dependency has spare capacity (nobody waits), or when every class
    /// has its own dependency (separate bulkheads already keep them apart).
    ///
    /// **Where classes apply.** In the default mode's `call`. Not in
    /// [backpressure mode](crate::Backpressure): its slot is reserved in `poll_ready`,
    /// before there is a request. Not per key: a [`KeyedBulkheadLayer`](crate::KeyedBulkheadLayer) takes no
    /// extractor (each key is a bulkhead of its own). A fleet cap
    /// (`seawall-fleet`'s `Fleet::cap`) lowers the limit in force through the
    /// allotment, and the shares are fractions of that allotted limit; the fleet
    /// itself shares no classes.
    pub fn criticality<C2>(self, classes: C2) -> BulkheadLayer<H, O, C2> {
        BulkheadLayer {
            shared: self.shared,
            overload: self.overload,
            classes,
            _hold: PhantomData,
        }
    }

    /// The bulkhead's handle (snapshot, runtime limits), available before layering.
    pub fn handle(&self) -> Handle {
        Handle::new(self.shared.clone())
    }

    /// The same bulkhead, also putting a [`PermitHandle`](crate::PermitHandle) in
    /// each admitted request's extensions (`http::Request` and other requests with
    /// extensions), so a handler that moves work into a spawned task can keep the
    /// slot until that work ends. Each admitted call then allocates one shared
    /// permit. See [`WithPermitHandle`](crate::WithPermitHandle).
    pub fn permit_in_extensions(self) -> BulkheadLayer<crate::hold::WithPermitHandle<H>, O, C> {
        BulkheadLayer {
            shared: self.shared,
            overload: self.overload,
            classes: self.classes,
            _hold: PhantomData,
        }
    }

    /// The same bulkhead in backpressure mode: its services reserve the slot in
    /// `poll_ready`, which is pending while the bulkhead is full, so `tower::balance`
    /// routes to another endpoint and `tower::buffer::Buffer` stops taking requests
    /// (no queue of its own: `max_queue` and `max_wait` do not apply to them). See
    /// [`Backpressure`](crate::Backpressure). Choose the hold mode first
    /// (`.hold_until_body_end().backpressure()`). Its slots are reserved before
    /// there is a request, so a criticality extractor given to this layer is not
    /// used there: backpressure takes no classes.
    pub fn backpressure(self) -> crate::BackpressureLayer<H, O> {
        crate::BackpressureLayer::new(self.shared, self.overload)
    }
}

impl<O, C> BulkheadLayer<UntilResponse, O, C> {
    /// The same bulkhead, but its services keep the slot until the response body
    /// ends or is dropped; they return `http::Response<Guarded<B, Permit>>`.
    /// See [`UntilBodyEnd`](crate::UntilBodyEnd).
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn hold_until_body_end(self) -> BulkheadLayer<crate::hold::UntilBodyEnd, O, C> {
        BulkheadLayer {
            shared: self.shared,
            overload: self.overload,
            classes: self.classes,
            _hold: PhantomData,
        }
    }
}

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
impl<O, C> BulkheadLayer<crate::hold::UntilBodyEnd, O, C> {
    /// Whether the bulkhead holds each slot until the response body ends (`true`,
    /// what [`hold_until_body_end`](BulkheadLayer::hold_until_body_end) builds) or
    /// frees it when the response's headers arrive (`false`), with the same
    /// response type either way, so the choice can come from configuration (a
    /// policy file's `hold = "response"`) without changing the stack's type.
    ///
    /// It is the bulkhead's setting, not this layer's: every layer and service of
    /// this bulkhead follows it, from the next response on.
    #[must_use]
    pub fn hold_body(self, hold: bool) -> Self {
        self.shared
            .release_at_headers
            .store(!hold, std::sync::atomic::Ordering::Relaxed);
        self
    }
}

impl<H, O: Clone, C: Clone> Clone for BulkheadLayer<H, O, C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            overload: self.overload.clone(),
            classes: self.classes.clone(),
            _hold: PhantomData,
        }
    }
}

impl<H, O, C> fmt::Debug for BulkheadLayer<H, O, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadLayer")
            .field("name", &&*self.shared.name)
            .field("config", &self.shared.config())
            .finish()
    }
}

/// `S: Clone` here, not only on the service: the bulkhead drives the inner service
/// from its response future on a clone taken at call time, so a client that is not
/// `Clone` is refused where it is layered, with an error that names `Clone`, rather
/// than later where the service is called, where the error names neither.
impl<S: Clone, H, O: Clone, C: Clone> Layer<S> for BulkheadLayer<H, O, C> {
    type Service = Bulkhead<S, H, O, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Bulkhead::new(
            inner,
            self.shared.clone(),
            self.overload.clone(),
            self.classes.clone(),
        )
    }
}

/// Builds a [`BulkheadLayer`]; see [`BulkheadLayer::builder`].
#[derive(Debug, Clone)]
pub struct BulkheadBuilder {
    pub(crate) name: Name,
    pub(crate) config: BulkheadConfig,
    pub(crate) seed: Option<u64>,
}

impl BulkheadBuilder {
    pub(crate) fn new(name: Name) -> Self {
        Self {
            name,
            config: BulkheadConfig::default(),
            seed: None,
        }
    }

    /// Calls allowed in the inner service at once (default 8, per instance).
    #[must_use]
    pub fn max_concurrent(mut self, n: usize) -> Self {
        self.config.max_concurrent = n;
        self
    }

    /// The queue's bounds, all at once (see [`QueuePolicy`] for its options and
    /// defaults).
    #[must_use]
    pub fn queue(mut self, queue: QueuePolicy) -> Self {
        self.config.queue = queue;
        self
    }

    /// Calls allowed to wait for a slot (default 10; 0 rejects at once when busy):
    /// a shorthand for the queue's `max_queue`.
    #[must_use]
    pub fn max_queue(mut self, n: usize) -> Self {
        self.config.queue.max_queue = n;
        self
    }

    /// The longest a call waits for a slot (default 20 ms), shortened by the
    /// request's remaining deadline: a shorthand for the queue's `max_wait`.
    #[must_use]
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.config.queue.max_wait = d;
        self
    }

    /// Lets an algorithm find the limit of active calls instead of
    /// `max_concurrent`: an [`AimdConfig`](crate::adaptive::AimdConfig) or a
    /// [`GradientConfig`](crate::adaptive::GradientConfig) (see
    /// [`crate::adaptive`] for which). What counts as overload is the layer's
    /// classifier: [`BulkheadLayer::overload`].
    #[must_use]
    pub fn adaptive(mut self, algorithm: impl Into<AdaptiveConfig>) -> Self {
        self.config.adaptive = Some(algorithm.into());
        self
    }

    /// Starts in shadow mode (see [`BulkheadConfig::shadow`]); switch it at run
    /// time with [`Handle::set_shadow`](crate::Handle::set_shadow).
    #[must_use]
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.config.shadow = shadow;
        self
    }

    /// Fixes the random choices of an adaptive algorithm (the jitter of a
    /// gradient's baseline schedule), for reproducible tests and simulations. By
    /// default they differ on every instance, so a fleet does not act in step.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Replaces all limits at once.
    #[must_use]
    pub fn config(mut self, config: BulkheadConfig) -> Self {
        self.config = config;
        self
    }

    /// Validates the configuration and creates the layer and its shared state.
    pub fn build(self) -> Result<BulkheadLayer, ConfigError> {
        self.config.validate()?;
        Ok(BulkheadLayer::from_builder(self))
    }
}
