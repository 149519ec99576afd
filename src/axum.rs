//! axum glue (feature `axum`): per-route policies with `route_layer`, and errors
//! answered as responses.
//!
//! # Respond, don't error
//!
//! axum's routes must not fail (`Error = Infallible`), and an `Err` handed to
//! hyper closes the connection without an answer. seawall's layers fail with a
//! [`BoxError`](seawall_core::BoxError), so the outermost layer of a route's stack
//! turns errors into responses. Two ways, both answering a seawall rejection
//! (open breaker, full bulkhead, wait timed out, deadline) with `503 Service
//! Unavailable`, `Retry-After` when the rejection knows one, and a short body that
//! names nothing internal; any other error becomes a generic `500`:
//!
//! - [`RespondLayer`] (or [`ServiceBuilderExt::respond`](crate::ServiceBuilderExt::respond)),
//!   from seawall-core, when the route has no fallback;
//! - a fallback in HTTP server mode ([`FallbackBuilder::http_server`](crate::fallback::FallbackBuilder::http_server)),
//!   which first tries its declared alternatives, and renders an explicit "no
//!   answer" ([`Unavailable`](crate::fallback::Unavailable)) as `503` too.
//!
//! Both answer `Response<Either<axum::body::Body, _>>`, which axum accepts. A
//! degradation layer's last level can be a [`FixedResponse`] that cannot fail; put
//! [`RespondLayer`] outside the degradation layer for its levels' rejections.
//!
//! # Per-route policies
//!
//! Each route that calls a dependency gets its own stack, attached with
//! `MethodRouter::route_layer` so it wraps that route only (and a request for an
//! unknown path or method is answered by axum, not counted by the breaker). A
//! route without a dependency gets nothing: it is untouched when the others'
//! dependencies fail. Layers are built once, outside the router: every service
//! built from a layer shares its state, so two routes calling one dependency can
//! share one bulkhead and breaker by sharing (cloning) the layer.
//!
//! ```
//! use std::time::Duration;
//! use axum::{body::Body, http::{Request, StatusCode}, routing::get, Router};
//! use seawall::bulkhead::BulkheadLayer;
//! use seawall::circuit_breaker::CircuitBreakerLayer;
//! use seawall::core::{BoxError, DeadlineLayer, HttpStatus};
//! use seawall::ServiceBuilderExt;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! // The freight supplier is down: the handler answers 502, a failure for HttpStatus.
//! async fn quote() -> StatusCode { StatusCode::BAD_GATEWAY }
//! async fn products() -> &'static str { "catalogue" }
//!
//! let freight = ServiceBuilder::new()
//!     .respond()                                  // errors → 503 + Retry-After
//!     .deadline(DeadlineLayer::new(Duration::from_millis(300))?)
//!     .bulkhead(BulkheadLayer::builder("freight").build()?)
//!     .circuit_breaker(
//!         CircuitBreakerLayer::builder("freight")
//!             .classifier(HttpStatus::default())  // 5xx and 429 fail, 404 is an answer
//!             .consecutive_failures(2)
//!             .build()?,
//!     );
//! let app = Router::new()
//!     .route("/quote", get(quote).route_layer(freight))
//!     .route("/products", get(products));         // no dependency: untouched
//!
//! let get_status = |path: &'static str| {
//!     let app = app.clone();
//!     async move {
//!         let req = Request::get(path).body(Body::empty()).unwrap();
//!         let res = app.oneshot(req).await.unwrap();
//!         (res.status(), res.headers().get("retry-after").cloned())
//!     }
//! };
//! assert_eq!(get_status("/quote").await.0, StatusCode::BAD_GATEWAY);
//! assert_eq!(get_status("/quote").await.0, StatusCode::BAD_GATEWAY);
//! // Two failures in a row opened the breaker: the supplier is not called.
//! let (status, retry_after) = get_status("/quote").await;
//! assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
//! // The default 10 s interval, stretched by the default jitter (up to 20 %).
//! let seconds: u64 = retry_after.unwrap().to_str()?.parse()?;
//! assert!((10..=12).contains(&seconds));
//! assert_eq!(get_status("/products").await.0, StatusCode::OK);
//! # Ok(())
//! # }
//! ```
//!
//! The stacks satisfy what `route_layer` asks of a layer and its service: `Clone +
//! Send + Sync + 'static`, `Error = Infallible`, a `Send` future, a response that
//! is `IntoResponse`. With [`Policies`](crate::config::Policies) (feature `serde`)
//! the numbers come from a file and each route finds its policy with
//! [`policy_for_route`](crate::config::Policies::policy_for_route); see the
//! `axum_routes` example for a whole service, with `/metrics` and an admin route.

pub use seawall_core::http::{
    error_response, rejection_response, RenderedBody, Respond, RespondFuture, RespondLayer,
    INTERNAL_ERROR_BODY, UNAVAILABLE_BODY,
};

#[cfg(feature = "fallback")]
#[cfg_attr(docsrs, doc(cfg(feature = "fallback")))]
pub use seawall_fallback::http::{EitherResponse, HttpServer};

#[cfg(feature = "degradation")]
#[cfg_attr(docsrs, doc(cfg(feature = "degradation")))]
pub use seawall_degradation::http::FixedResponse;
