//! seawall's fallback layer: a declared alternative when the service below fails —
//! and an explicit "no answer" where no honest alternative exists.
//!
//! # Why
//!
//! A dependency that is down, slow or turned away by a breaker or bulkhead should
//! not take the whole feature with it: try progressively simpler sources
//! — real-time, then a cache, then the last known value — each within its own
//! time, and tell the caller which one answered so it can tell fresh from stale.
//! But a fallback must not invent business data: a missing freight quote
//! never becomes free shipping; the honest answer is "no quote", and checkout waits.
//! And a fallback's answer is not evidence that the dependency works:
//! placed outside the breaker, it is never seen by it.
//!
//! # Example: a freight quote with an explicit "no quote"
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use seawall_fallback::{
//!     BoxError, CircuitOpen, FallbackLayer, Mark, Rejections, Served, Unavailable,
//! };
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! /// A quote; `source` tells the caller (and the checkout) where it came from.
//! #[derive(Debug, Clone)]
//! struct Quote {
//!     cents: u32,
//!     source: Option<Served>,
//! }
//!
//! impl Mark for Quote {
//!     fn mark(&mut self, served: Served) {
//!         self.source = Some(served);
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! // The supplier's breaker is open (below the fallback, as in the recommended stack).
//! let supplier = service_fn(|_req: http::Request<String>| async {
//!     Err::<Quote, BoxError>(Box::new(CircuitOpen::new("freight".into(), Duration::from_secs(10))))
//! });
//!
//! // Quotes cached recently enough to honour (validity agreed with the business).
//! let cache: Arc<HashMap<String, u32>> = Arc::new(HashMap::from([("PT-1000".into(), 990)]));
//!
//! let fallback = FallbackLayer::builder("freight-quote")
//!     // What the fallback needs, taken before the supplier consumes the request.
//!     .capture(|req: &http::Request<String>| req.body().clone())
//!     // Fire on every seawall rejection (open breaker, full bulkhead, deadline).
//!     .on_rejections(Rejections::ALL)
//!     .step("cache", Duration::from_millis(100), move |req| {
//!         let hit = cache.get(req.captured()).copied();
//!         async move {
//!             let cents = hit.ok_or("no valid cached quote")?;
//!             Ok::<_, BoxError>(Quote { cents, source: None })
//!         }
//!     })
//!     // Nothing valid left: say so. Never a made-up (free) shipping price.
//!     .step_unavailable("no-quote", "no valid freight quote")
//!     .build()?;
//! let quotes = fallback.layer(supplier);
//!
//! // A destination with a cached quote: served, and marked as such.
//! let quote = quotes.clone().oneshot(http::Request::new("PT-1000".into())).await?;
//! assert_eq!(quote.cents, 990);
//! assert_eq!(quote.source.as_ref().map(Served::step), Some("cache"));
//!
//! // One without: an explicit, typed "no quote". Checkout must wait for a real one.
//! let err = quotes.oneshot(http::Request::new("ES-28001".into())).await.unwrap_err();
//! let no_quote = Unavailable::find(&*err).expect("an explicit no-quote");
//! assert_eq!(no_quote.step(), Some("no-quote"));
//! assert_eq!(no_quote.retry_after(), Some(Duration::from_secs(10))); // the breaker's
//! # Ok(())
//! # }
//! ```
//!
//! # What fires the fallback (the trigger vocabulary)
//!
//! Nothing, until you say so; every [`Trigger`] is selected explicitly on the
//! builder, and anything not selected passes through untouched (and is counted as
//! `passed_through`). For each primary result, first match wins:
//!
//! | the primary … | fires when | [`Trigger`] (label) |
//! |---|---|---|
//! | failed with a seawall rejection ([`find_rejection`](seawall_core::find_rejection) in the chain) | its kind was selected with [`on_rejection`](FallbackBuilder::on_rejection) / [`on_rejections`](FallbackBuilder::on_rejections) — each kind on its own | `Rejected(kind)` (the kind's label, [`RejectionKind::as_str`](seawall_core::RejectionKind::as_str)) |
//! | failed with an error of a selected type (downcast, anywhere in the chain) | [`on_error::<E>()`](FallbackBuilder::on_error) | `ErrorType` (`error_type`) |
//! | failed with another error | the [`on_failure`](FallbackBuilder::on_failure) classifier says `Failure` | `FailedError` (`failed_error`) |
//! | answered | the classifier says `Failure` (a `503` with [`HttpStatus`](seawall_core::HttpStatus); a `404` is a business answer and passes) | `FailedResponse` (`failed_response`) |
//! | was not called | an operator [forced](Handle::force) the fallback | `Forced` (`forced`) |
//!
//! A rejection is decided by its kind alone: the classifier never sees it.
//!
//! # What the fallback runs
//!
//! One strategy — [`value`](FallbackBuilder::value), a closure
//! ([`sync_fn`](FallbackBuilder::sync_fn), [`async_fn`](FallbackBuilder::async_fn))
//! receiving a [`FallbackRequest`] (the captured data, the trigger, the primary's
//! error, the deadline), any Tower [`service`](FallbackBuilder::service) over
//! `FallbackRequest`, [`unavailable`](FallbackBuilder::unavailable), or your own
//! [`Strategy`] — or a [`Chain`] of named [`step`](FallbackBuilder::step)s:
//!
//! ```text
//!  primary failed (trigger) ──► step 1 ──answer──► served, marked Served { step 1, trigger }
//!                                 │ error / timed out ──► on_step_failed(step 1, cause)
//!                                 ▼
//!                               step 2 ──Unavailable──► the explicit no-answer (chain stops)
//!                                 │ error / timed out
//!                                 ▼
//!                                ...  every step failed ──► FallbacksExhausted [step: cause, …]
//!
//!  each step's bound = min(its timeout, what remains of the request's Deadline)
//! ```
//!
//! A step's timeout never exceeds what remains of a [`Deadline`](seawall_core::Deadline)
//! the request carried when it reached the fallback (its cause is then
//! `DeadlineExceeded`, otherwise [`StepTimedOut`]). The fallback normally sits
//! *outside* the dependency's `DeadlineLayer`, so it still answers once that budget
//! is spent; a value step answers even when the overall deadline has passed.
//!
//! Every served answer is marked with [`Served`] (which fallback, which step, which
//! trigger), where the mode puts it:
//!
//! | mode | where [`Served`] is |
//! |---|---|
//! | HTTP modes (feature `http`) | in the body: `seawall_fallback::http::served(&res)` |
//! | generic, a type of your own | wherever its [`Mark`] impl records it (a `source` field) |
//! | generic, an `http::Response` | its extensions: `res.extensions().get::<Served>()` |
//! | [`unmarked`](FallbackBuilder::unmarked) | nowhere: the handle's counters and events still tell |
//!
//! An [`Unavailable`] answer is a typed outcome of its own: counted apart, never
//! turned into data.
//!
//! # Response types
//!
//! - generic ([`Plain`], the default): the fallback answers with the primary's
//!   response type (which implements [`Mark`]), errors are `BoxError`s;
//!   [`unmarked`](FallbackBuilder::unmarked) for a type with nowhere to record the
//!   marker (a `String`).
//! - `http` feature: `FallbackBuilder::either_body` answers
//!   `http::Response<Either<B, FallbackBody<FB>>>` (the primary's body `B`
//!   untouched on the left, the fallback's `FB` on the right with its marker) and
//!   keeps errors;
//!   `FallbackBuilder::http_server` answers the same type with
//!   `Error = Infallible` (axum-compatible): rejections are answered by
//!   seawall-core's answers table (`503`, `504` for a spent deadline, `Retry-After`
//!   when known), an `Unavailable` a configurable response, other errors a
//!   configurable `500`; nothing internal in any body. See the `http` module.
//!
//! # Where state lives
//!
//! The layer creates **one shared state** when it is built (counters, controls,
//! live configuration; [`FallbackLayer::handle`]): every service built from it and
//! every clone shares it. Build one layer per dependency. Where the primary
//! answers, the fallback adds no clock read, no counter and no allocation (what
//! each path costs:
//! [docs/costs.md](https://github.com/seawall-rs/seawall/blob/main/docs/costs.md#fallback)).
//!
//! # Where to put it
//!
//! Outermost, as in the recommended stack:
//!
//! ```text
//! FallbackLayer → DeadlineLayer(300ms) → BulkheadLayer → CircuitBreakerLayer → client
//! ```
//!
//! Outside the breaker, the fallback's answer is never seen by the breaker: the
//! breaker's future resolves with the failure, and only the caller gets the
//! fallback's answer. (The breaker has no fallback hook of its own; this layer is it.)
//!
//! # Operating it
//!
//! [`Handle`]: [`snapshot`](Handle::snapshot) (per trigger, per step:
//! served / failed / timed out / unavailable; exhausted; passed through),
//! [`subscribe`](Handle::subscribe) to [`FallbackEvent`]s,
//! [`disable`](Handle::disable) / [`force`](Handle::force) / [`release`](Handle::release), and
//! [`reconfigure`](Handle::reconfigure) the rejection kinds and step
//! timeouts ([`FallbackConfig`], serde under the `serde` feature) with
//! [`revert`](Handle::revert). Metrics and tracing: see the `metrics` and
//! `tracing` features; the `seawall_fallback_*` series are in
//! [docs/metrics.md](https://github.com/seawall-rs/seawall/blob/main/docs/metrics.md).
//! A fallback turns no call away, so it has no shadow mode (see
//! [docs/operations.md](https://github.com/seawall-rs/seawall/blob/main/docs/operations.md#trying-a-new-limit-in-shadow-mode)).
//!
//! # Layout
//!
//! ```text
//! lib.rs          these docs, the re-exports
//! config.rs       FallbackConfig (what a file may set and change at run time), StepTimeout
//! layer.rs        FallbackLayer and FallbackBuilder: one shared state per layer
//! state.rs        Shared: what every service built from one layer shares
//! service.rs      Fallback, the Service: captures what the fallback needs, calls the primary
//! future.rs       ResponseFuture: polls the primary; runs the fallback only when a trigger fires
//! machine.rs      the decisions as plain functions: Trigger, Rejections, how long a step may run
//! plan.rs         Single and Chain: one fallback, or named steps each with its own timeout
//! strategy.rs     Strategy and the provided kinds: value, sync_fn, async_fn, service, unavailable
//! request.rs      FallbackRequest and Capture: what a fallback receives
//! mode.rs         Mode: how the response is made; the generic Plain mode
//! http.rs         the HTTP modes (feature `http`): one body for every answer, the Served marker
//! error.rs        Served, Unavailable, StepTimedOut: the fallback's own answers and errors
//! handle.rs       the shared runtime state, Handle, Snapshot and FallbackEvent
//! telemetry.rs    tracing events and metrics
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod error;
mod future;
mod handle;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
mod layer;
mod machine;
mod mode;
mod plan;
mod request;
mod service;
mod state;
mod strategy;
mod telemetry;

pub use config::{FallbackConfig, StepTimeout};
pub use error::{Mark, Served, StepTimedOut, Unavailable};
pub use future::ResponseFuture;
pub use handle::{FallbackEvent, Handle, Runtime, Snapshot, StepSnapshot, TriggerCount};
pub use layer::{FallbackBuilder, FallbackLayer};
pub use machine::{NoFailures, Rejections, Trigger};
pub use mode::{ErrorOrigin, Mode, Plain, Responses, Unmarked};
pub use plan::{
    Chain, ChainFuture, ChainSteps, Finished, NoStrategy, Plan, Single, SingleFuture, Spec,
};
pub use request::{Capture, CaptureFn, Captures, FallbackRequest, NoCapture};
pub use service::Fallback;
pub use strategy::{
    async_fn, service, sync_fn, unavailable, value, AsyncFn, Decline, ErrInto, ServiceFallback,
    Strategy, SyncFn, Value,
};

pub use seawall_core::{
    BoxError, BulkheadFull, BulkheadTimeout, CircuitOpen, DeadlineExceeded, FallbacksExhausted,
    RejectionKind, StepFailure,
};

/// Gives the fallback's metrics their help text and unit.
///
/// A description given before a recorder is installed is lost, so call this (or the
/// facade's `seawall::metrics::describe()`) after installing the recorder.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    telemetry::describe();
}
