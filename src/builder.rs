//! [`ServiceBuilderExt`]: seawall's layers as `ServiceBuilder` methods, so a stack
//! reads top to bottom in the recommended order.

use tower::layer::util::Stack;
use tower::retry::RetryLayer;
use tower::ServiceBuilder;

use seawall_core::{DeadlineLayer, DeadlineRetry, HedgeLayer};

mod sealed {
    #[allow(unreachable_pub)]
    pub trait Sealed<L> {}
    impl<L> Sealed<L> for tower::ServiceBuilder<L> {}

    #[allow(unreachable_pub)]
    pub trait Layers {}
}

/// A circuit breaker's layer in either mode, as [`ServiceBuilderExt::circuit_breaker`]
/// takes it: [`CircuitBreakerLayer`](crate::circuit_breaker::CircuitBreakerLayer)
/// (the call ends at the response) or its
/// [`hold_until_body_end`](crate::circuit_breaker::CircuitBreakerLayer::hold_until_body_end)
/// layer (the call ends with the response body: what an HTTP or gRPC client stack
/// wants), keyed or not. Sealed.
#[cfg(feature = "circuit-breaker")]
#[cfg_attr(docsrs, doc(cfg(feature = "circuit-breaker")))]
pub trait CircuitBreakerLayers: sealed::Layers {}

#[cfg(feature = "circuit-breaker")]
mod breaker_layers {
    use super::{sealed::Layers, CircuitBreakerLayers};
    use crate::circuit_breaker::{CircuitBreakerLayer, KeyedCircuitBreakerLayer};

    impl<C> Layers for CircuitBreakerLayer<C> {}
    impl<C> CircuitBreakerLayers for CircuitBreakerLayer<C> {}
    impl<K, F, C> Layers for KeyedCircuitBreakerLayer<K, F, C> {}
    impl<K, F, C> CircuitBreakerLayers for KeyedCircuitBreakerLayer<K, F, C> {}
    #[cfg(feature = "http")]
    impl<C> Layers for crate::circuit_breaker::UntilBodyEndLayer<C> {}
    #[cfg(feature = "http")]
    impl<C> CircuitBreakerLayers for crate::circuit_breaker::UntilBodyEndLayer<C> {}
    #[cfg(feature = "http")]
    impl<K, F, C> Layers for crate::circuit_breaker::KeyedUntilBodyEndLayer<K, F, C> {}
    #[cfg(feature = "http")]
    impl<K, F, C> CircuitBreakerLayers for crate::circuit_breaker::KeyedUntilBodyEndLayer<K, F, C> {}
}

/// A degradation layer in either mode, as [`ServiceBuilderExt::degradation`] takes
/// it: [`DegradationLayer`](crate::degradation::DegradationLayer) or its
/// [`hold_until_body_end`](crate::degradation::DegradationLayer::hold_until_body_end)
/// layer. Sealed.
#[cfg(feature = "degradation")]
#[cfg_attr(docsrs, doc(cfg(feature = "degradation")))]
pub trait DegradationLayers: sealed::Layers {}

#[cfg(feature = "degradation")]
mod degradation_layers {
    use super::{sealed::Layers, DegradationLayers};
    use crate::degradation::DegradationLayer;

    impl<Req, Res, C, X> Layers for DegradationLayer<Req, Res, C, X> {}
    impl<Req, Res, C, X> DegradationLayers for DegradationLayer<Req, Res, C, X> {}
    #[cfg(feature = "http")]
    impl<Req, B, C, X> Layers for crate::degradation::UntilBodyEndLayer<Req, B, C, X> {}
    #[cfg(feature = "http")]
    impl<Req, B, C, X> DegradationLayers for crate::degradation::UntilBodyEndLayer<Req, B, C, X> {}
}

/// seawall's layers as methods of tower's [`ServiceBuilder`].
///
/// The methods only add a layer you have built (with its builder, `from_config`,
/// or [`Policies`](crate::config::Policies)); building is where validation
/// happens and where the layer's shared state (and its handle) is created. Layers
/// added first are outermost, so the recommended stack for one dependency reads
/// top to bottom:
///
/// ```
/// use std::time::Duration;
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, Full};
/// use seawall::bulkhead::BulkheadLayer;
/// use seawall::circuit_breaker::CircuitBreakerLayer;
/// use seawall::core::{BoxError, DeadlineLayer, DeadlineRetry};
/// use seawall::fallback::{FallbackLayer, Rejections};
/// use seawall::ServiceBuilderExt;
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// async fn supplier(_req: http::Request<()>) -> Result<http::Response<Full<Bytes>>, BoxError> {
///     Ok(http::Response::new(Full::new(Bytes::from_static(b"12.50 EUR"))))
/// }
/// let breaker = CircuitBreakerLayer::builder("freight").build()?;
/// let handle = breaker.handle();
/// let bulkhead = BulkheadLayer::builder("freight").build()?;
/// let slots = bulkhead.handle();
/// let quotes = ServiceBuilder::new()
///     .fallback(
///         FallbackLayer::builder("freight")
///             .on_rejections(Rejections::ALL)
///             .unavailable::<http::Response<String>>("no valid freight quote")
///             .either_body()
///             .build()?,
///     )
///     .deadline(DeadlineLayer::new(Duration::from_millis(300))?)
///     .deadline_retry(DeadlineRetry::builder("freight").build()?) // optional: the one retrying layer
///     // A client's call ends with its response body: the slot and the verdict wait for it.
///     .bulkhead(bulkhead.hold_until_body_end())
///     .circuit_breaker(breaker.hold_until_body_end())
///     .service(service_fn(supplier));
/// let res = quotes.oneshot(http::Request::new(())).await?;
/// assert_eq!(slots.snapshot().active, 1, "held until the body is read");
/// let body = res.into_body().collect().await?.to_bytes();
/// assert_eq!(&body[..], b"12.50 EUR");
/// assert_eq!(slots.snapshot().active, 0);
/// assert_eq!(handle.snapshot().counters.successes, 1);
/// # Ok(())
/// # }
/// ```
///
/// The trait is sealed: it is implemented for [`ServiceBuilder`] only.
pub trait ServiceBuilderExt<L>: sealed::Sealed<L> + Sized {
    /// Adds a [`DeadlineLayer`]: the budget of the segment below it, admission
    /// included. Put it below the fallback and above the bulkhead and breaker.
    fn deadline<H>(self, layer: DeadlineLayer<H>) -> ServiceBuilder<Stack<DeadlineLayer<H>, L>>;

    /// Adds tower's `RetryLayer` with a [`DeadlineRetry`] policy: the one layer of
    /// the stack that retries. Put it below the deadline, so that every attempt
    /// shares the one budget, and above the bulkhead and the breaker, so that no slot
    /// is held between attempts and an open breaker ends the retries at once. Every
    /// service the stack builds shares the policy's retry budget and counters.
    #[allow(clippy::type_complexity)]
    fn deadline_retry<C, F, P>(
        self,
        policy: DeadlineRetry<C, F, P>,
    ) -> ServiceBuilder<Stack<RetryLayer<DeadlineRetry<C, F, P>>, L>>;

    /// Adds a [`HedgeLayer`]: a second attempt when the first is slow. Put it below
    /// the deadline (and below the retries, if any), so that a hedge is sent only
    /// when the remaining budget fits one, and above the bulkhead and the breaker, so
    /// that each hedge takes its own slot, an open breaker or a full bulkhead ends
    /// hedging at once, and the losing attempt is cancelled below. Every service the
    /// stack builds shares the layer's budget, latency estimate and counters.
    fn hedge<C, F>(self, layer: HedgeLayer<C, F>) -> ServiceBuilder<Stack<HedgeLayer<C, F>, L>>;

    /// Adds a [`BulkheadLayer`](crate::bulkhead::BulkheadLayer). Every service the
    /// stack builds shares the layer's one bulkhead.
    #[cfg(feature = "bulkhead")]
    #[cfg_attr(docsrs, doc(cfg(feature = "bulkhead")))]
    fn bulkhead<H, O, C>(
        self,
        layer: crate::bulkhead::BulkheadLayer<H, O, C>,
    ) -> ServiceBuilder<Stack<crate::bulkhead::BulkheadLayer<H, O, C>, L>>;

    /// Adds a circuit breaker: a [`CircuitBreakerLayer`](crate::circuit_breaker::CircuitBreakerLayer),
    /// or, for an HTTP or gRPC client, its `hold_until_body_end()` layer, whose
    /// verdict waits for the end of the response body (see
    /// [`CircuitBreakerLayers`]). Every service the stack builds shares the layer's
    /// one breaker.
    #[cfg(feature = "circuit-breaker")]
    #[cfg_attr(docsrs, doc(cfg(feature = "circuit-breaker")))]
    fn circuit_breaker<B: CircuitBreakerLayers>(self, layer: B) -> ServiceBuilder<Stack<B, L>>;

    /// Adds a degradation layer, in either mode (see [`DegradationLayers`]): the
    /// rest of the stack becomes its best level.
    #[cfg(feature = "degradation")]
    #[cfg_attr(docsrs, doc(cfg(feature = "degradation")))]
    fn degradation<D: DegradationLayers>(self, layer: D) -> ServiceBuilder<Stack<D, L>>;

    /// Adds a [`FallbackLayer`](crate::fallback::FallbackLayer), normally first
    /// (outermost), so that its answer is never seen by a breaker below it.
    #[cfg(feature = "fallback")]
    #[cfg_attr(docsrs, doc(cfg(feature = "fallback")))]
    fn fallback<Cap, P, C, M>(
        self,
        layer: crate::fallback::FallbackLayer<Cap, P, C, M>,
    ) -> ServiceBuilder<Stack<crate::fallback::FallbackLayer<Cap, P, C, M>, L>>;

    /// Adds [`RespondLayer`](seawall_core::http::RespondLayer): every error below
    /// becomes a response (a rejection `503` with `Retry-After`, anything else a
    /// generic `500`), so the stack's error is `Infallible`, as axum's
    /// `route_layer` and hyper's server need. Put it first (outermost) when the
    /// stack has no fallback in HTTP server mode.
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    fn respond(self) -> ServiceBuilder<Stack<seawall_core::http::RespondLayer, L>>;
}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    fn deadline<H>(self, layer: DeadlineLayer<H>) -> ServiceBuilder<Stack<DeadlineLayer<H>, L>> {
        self.layer(layer)
    }

    fn deadline_retry<C, F, P>(
        self,
        policy: DeadlineRetry<C, F, P>,
    ) -> ServiceBuilder<Stack<RetryLayer<DeadlineRetry<C, F, P>>, L>> {
        self.layer(RetryLayer::new(policy))
    }

    fn hedge<C, F>(self, layer: HedgeLayer<C, F>) -> ServiceBuilder<Stack<HedgeLayer<C, F>, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "bulkhead")]
    fn bulkhead<H, O, C>(
        self,
        layer: crate::bulkhead::BulkheadLayer<H, O, C>,
    ) -> ServiceBuilder<Stack<crate::bulkhead::BulkheadLayer<H, O, C>, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "circuit-breaker")]
    fn circuit_breaker<B: CircuitBreakerLayers>(self, layer: B) -> ServiceBuilder<Stack<B, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "degradation")]
    fn degradation<D: DegradationLayers>(self, layer: D) -> ServiceBuilder<Stack<D, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "fallback")]
    fn fallback<Cap, P, C, M>(
        self,
        layer: crate::fallback::FallbackLayer<Cap, P, C, M>,
    ) -> ServiceBuilder<Stack<crate::fallback::FallbackLayer<Cap, P, C, M>, L>> {
        self.layer(layer)
    }

    #[cfg(feature = "http")]
    fn respond(self) -> ServiceBuilder<Stack<seawall_core::http::RespondLayer, L>> {
        self.layer(seawall_core::http::RespondLayer)
    }
}
