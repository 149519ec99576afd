//! Hedged requests: a second attempt when the first is slow, inside the budget.
//!
//! A dependency with a long tail (most answers in 5 ms, one in a hundred in 500 ms)
//! makes the caller's p99 the dependency's worst tail. A hedge is a copy of the
//! request sent when the first attempt has not answered after a delay; the caller
//! gets whichever answers first. Sent to the slowest few percent only, it costs a
//! few percent more load and cuts the tail to about the delay plus a typical answer.
//!
//! Hedging is only safe where the layer knows what seawall knows: how much of the
//! request's [`Deadline`](crate::Deadline) remains, how much retry budget is left,
//! and whether the breaker or the bulkhead below turned the last attempt away.
//! [`HedgeLayer`] uses all three:
//!
//! - **The delay** is fixed ([`HedgeDelay::Fixed`]) or a percentile of the recent
//!   latencies of *first* attempts ([`HedgeDelay::Percentile`]): a decaying,
//!   log-bucketed histogram of bounded size (under 8 KiB) with no upper bound on what
//!   it measures, old samples' weight halving every `half_life`. A first attempt
//!   cancelled before it answered (a hedge won, or the caller gave up) is counted
//!   with the time it ran, a censored sample: the slow tail stays in the estimate.
//! - **`max_attempts` counts the first** (default 2: one hedge at most), as for the
//!   retries. Each further hedge waits one more delay.
//! - **A hedge is sent only if it can help**: if what remains of the current deadline
//!   is at least `min_attempt_time`; if the request may be sent twice
//!   ([`IdempotentRequests`], the retry policy's rule, by default; [`HedgeIf`]
//!   overrides it); and if no seawall rejection came back: an attempt refused by an
//!   open breaker or a full bulkhead ends hedging for that request at once, and the
//!   caller never sees a hedge's refusal while the first attempt goes on.
//! - **Every hedge spends the retry budget.** The layer has its own by default (10 %
//!   of the first attempts of the last 10 s, plus 10); to bound retries and hedges
//!   *together*, give it the retry policy's
//!   ([`DeadlineRetry::budget`](crate::DeadlineRetry::budget), then
//!   [`HedgeBuilder::shared_budget`]). During an outage the dependency then sees at
//!   most `(1 + share)` times the first attempts, plus the reserve, whatever mix of
//!   retries and hedges made up the extra calls.
//! - **The first success wins**, by the layer's classifier: a `503` under
//!   [`HttpStatus`](crate::HttpStatus) is an `Ok` response but no success, and does
//!   not end the request while another attempt may still succeed. Every other
//!   attempt is dropped at once, so the breaker below records it as cancelled and
//!   the bulkhead frees its slot.
//! - **When no attempt succeeds, the caller gets the first attempt's result** (its
//!   error, or its failed response), once every attempt in flight has ended: it is
//!   the answer to the request the caller made, and the one a caller without
//!   hedging would have had. A hedge's failure or refusal is never shown. A first
//!   attempt that fails is answered at once if no hedge is in flight; hedges are for
//!   slowness, and a failure is sent again only by a retry layer.
//!
//! ```text
//!            call ──► first attempt sent, timer = delay
//!                          │
//!     ┌────────────────────┼──────────────────────────────┐
//!     ▼                    ▼                              ▼
//!  an attempt          timer fires                   first attempt fails
//!  succeeds            │                             (no hedge in flight)
//!  → answer, drop      ├ attempts left, deadline fits,  → answer it
//!    the others        │ idempotent, no rejection seen,
//!                      │ budget ─► hedge sent, timer = delay
//!                      └ otherwise ─► no more hedges (counted by cause)
//!  a hedge rejected (breaker open, bulkhead full) ─► no more hedges, not shown
//!  every attempt ended, none succeeded ─► the first attempt's result
//! ```
//!
//! # Where it goes
//!
//! ```text
//! FallbackLayer
//! DeadlineLayer(300ms)   one budget for the first attempt and every hedge
//! DeadlineRetry          optional; if present, above the hedging layer
//! HedgeLayer             a hedge is one more call through everything below
//! BulkheadLayer          each attempt takes its own slot
//! CircuitBreakerLayer    each attempt is an observation; a losing one is cancelled
//! client
//! ```
//!
//! Inside the deadline, so that the hedge knows what remains of the budget and every
//! attempt shares it. Outside the bulkhead and the breaker, so that each hedge is
//! admitted like any call (a slot of its own; a breaker that sees it), so that an open
//! breaker or a full bulkhead ends hedging at once, and so that the loser's
//! cancellation frees its slot and is recorded as cancelled. A hedge never queues: its
//! `call` is made inside [`without_waiting`](crate::without_waiting), so a bulkhead
//! called directly below gives it a free slot or turns it away at once as full, even
//! when first attempts may wait in its line; that refusal stops further hedges. (A
//! bulkhead behind a `tower::Buffer` makes the call on another task and does not see
//! the mark: there, give it no queue.)
//!
//! Below a retry layer, each retry is a request to the hedging layer and may be
//! hedged: attempts multiply per request (at most `retry.max_attempts ×
//! hedge.max_attempts` calls), while one shared budget bounds the extra calls of all
//! requests together. The retry policy counts the budget's first attempts then, once
//! per request. Above a retry layer, each hedge would be retried on its own and the
//! retry policy would count hedges as first attempts: do not put it there.
//!
//! # What hedging hides, and where it still shows
//!
//! A slow first attempt that loses to a hedge is cancelled, and a cancelled call is no
//! observation for the breaker below (it records it as cancelled, neither slow nor
//! failed) nor for an adaptive bulkhead limit. Their slow-call rate and latency
//! signals see the attempts that *ended*: when the dependency as a whole slows
//! down, the hedges are slow too, and both see it. The slowness hedging absorbs is
//! visible here: the percentile of first attempts (censored samples included) in
//! [`HedgeSnapshot::first_attempt_percentile`], and the share of hedges that won
//! ([`HedgeSnapshot::hedges_won`] over `requests`), also as metrics.
//!
//! # Requests
//!
//! Any request type, given a [`HedgeIf`] that copies it (a closure
//! `Fn(&Req) -> Option<Req>`). The default, [`IdempotentRequests`], takes an
//! `http::Request` whose body is `Clone` (`Full<Bytes>`, `()`, `String`) and an
//! idempotent method; an HTTP request whose body cannot be cloned does not meet its
//! bound: buffer the body, or use a closure answering `None` to send such requests
//! unhedged. **gRPC is left out**: every gRPC call is a POST, never idempotent by
//! this rule, and a tonic request's body is a stream; hedging one needs a per-method
//! rule and a buffered body, which this layer does not provide.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use seawall_core::{BoxError, DeadlineLayer, HedgeLayer, HttpStatus};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), BoxError> {
//! let hedging = HedgeLayer::builder("quotes")
//!     .fixed_delay(Duration::from_millis(20))
//!     .classifier(HttpStatus::default())
//!     .build()?;
//! let handle = hedging.handle();
//!
//! // A supplier whose first answer is stuck for a second; the hedge answers in 5 ms.
//! let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
//! let supplier = service_fn(move |_req: http::Request<()>| {
//!     let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
//!     async move {
//!         let takes = if n == 0 { 1000 } else { 5 };
//!         tokio::time::sleep(Duration::from_millis(takes)).await;
//!         Ok::<_, BoxError>(http::Response::new(format!("answer {n}")))
//!     }
//! });
//! let quotes = ServiceBuilder::new()
//!     .layer(DeadlineLayer::new(Duration::from_millis(300))?)
//!     .layer(hedging)
//!     .service(supplier);
//! let started = tokio::time::Instant::now();
//! let answer = quotes.oneshot(http::Request::new(())).await?;
//! assert_eq!(answer.body(), "answer 1");
//! assert_eq!(started.elapsed(), Duration::from_millis(25));
//! let seen = handle.snapshot();
//! assert_eq!((seen.requests, seen.hedges_sent, seen.hedges_won), (1, 1, 1));
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! ```text
//! mod.rs        these docs, the re-exports
//! config.rs     HedgeConfig, HedgeDelay, PercentileDelay, validated field by field
//! latency.rs    the decaying log-bucketed histogram behind a percentile delay
//! telemetry.rs  the hedging events and metrics (the only cfg(feature) here)
//! state.rs      what the layer's services share; HedgeHandle, HedgeSnapshot
//! future.rs     HedgeFuture: the attempts, the timer, which answer wins
//! service.rs    Hedge, HedgeIf, IdempotentRequests
//! layer.rs      HedgeLayer, HedgeBuilder
//! tests.rs      the layer in paused time, over seawall's bulkhead and breaker (tests only)
//! ```
//! Imports go one way: layer → service → future → state → config, latency, telemetry.

mod config;
mod future;
mod latency;
mod layer;
mod service;
mod state;
mod telemetry;

pub use self::config::{HedgeConfig, HedgeDelay, PercentileDelay};
pub use self::future::HedgeFuture;
pub use self::layer::{HedgeBuilder, HedgeLayer};
pub use self::service::{Hedge, HedgeIf, IdempotentRequests};
pub use self::state::{HedgeHandle, HedgeSnapshot};
pub use crate::retry::SharedBudget;

#[cfg(feature = "metrics")]
pub(crate) use self::telemetry::describe;

#[cfg(test)]
mod tests;
