//! A bulkhead for Tower services: a cap on concurrent calls to one dependency,
//! with a short, bounded, timed queue in front of it.
//!
//! The point of a bulkhead is that one slow dependency can use only its own
//! capacity: when the freight supplier hangs, at most `max_concurrent` calls wait
//! on it, at most `max_queue` more wait for a slot, and everyone else is told
//! at once ([`BulkheadFull`]) or after a short wait ([`BulkheadTimeout`]) — while
//! the rest of the service, with its own bulkheads, keeps working.
//!
//! # Configuration
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `max_concurrent` | 8 | calls in the inner service at once |
//! | `max_queue` | 10 | calls waiting for a slot (0: reject at once when busy) |
//! | `max_wait` | 20 ms | longest wait for a slot, shortened by the request's [`Deadline`] |
//!
//! **Limits are per instance.** A bulkhead counts the calls of the process it
//! runs in: three instances of a service, each with `max_concurrent = 8`, allow
//! up to **24** concurrent calls to the supplier, not 8. Divide what the supplier
//! can take by the number of instances. It also cannot limit remote work that
//! goes on after a caller gave up; it only stops counting when the local call
//! really ends (see below).
//!
//! **Services built from one layer share one bulkhead.** [`BulkheadLayer`]
//! creates its bulkhead when it is built; every service it builds and every clone
//! of them count against the same slots (like tower's
//! `GlobalConcurrencyLimitLayer`). Separate dependencies need separate layers
//! (per-dependency pools: payments 30, inventory 20, recommendations 10); for one
//! bulkhead per host, route or tenant, use [`KeyedBulkheadLayer`], which bounds
//! the number of keys.
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use seawall_bulkhead::BulkheadLayer;
//! use seawall_core::{find_rejection, RejectionKind};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), seawall_core::BoxError> {
//! // One bulkhead per dependency, with the defaults spelled out.
//! let freight = BulkheadLayer::builder("freight")
//!     .max_concurrent(8)
//!     .max_queue(10)
//!     .max_wait(Duration::from_millis(20))
//!     .build()?;
//! let handle = freight.handle();
//!
//! let quote = service_fn(|req: http::Request<&'static str>| async move {
//!     Ok::<_, Infallible>(format!("quote for {}", req.into_body()))
//! });
//! let mut svc = freight.layer(quote);
//! let answer = svc.ready().await?.call(http::Request::new("01310-100")).await?;
//! assert_eq!(answer, "quote for 01310-100");
//!
//! let s = handle.snapshot();
//! assert_eq!((s.admitted, s.active, s.rejected_full), (1, 0, 0));
//!
//! // A bulkhead with no free slot and no room to wait answers at once.
//! let tight = BulkheadLayer::builder("tight").max_concurrent(1).max_queue(0).build()?;
//! let mut svc = tight.layer(service_fn(|_req: http::Request<()>| std::future::pending::<Result<(), Infallible>>()));
//! let mut busy = Box::pin(svc.ready().await?.call(http::Request::new(())));
//! assert!(futures_poll_once(busy.as_mut()).is_pending()); // holds the only slot
//! let err = svc.ready().await?.call(http::Request::new(())).await.unwrap_err();
//! assert_eq!(find_rejection(&*err).unwrap().kind(), RejectionKind::BulkheadFull);
//! # Ok(())
//! # }
//! # fn futures_poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
//! #     let waker = std::task::Waker::noop();
//! #     f.poll(&mut std::task::Context::from_waker(&waker))
//! # }
//! ```
//!
//! # The life of a call
//!
//! ```text
//!            call()
//!              │  slot free and nobody waiting? ── yes ──────────────┐
//!              │  (one compare-and-swap, no lock, no clock)           │
//!              ▼ no                                                   │
//!     queue full? ── yes ──► BulkheadFull (first poll, no timer)      │
//!              │ no                                                   │
//!              ▼                                                      ▼
//!        ┌──────────┐  slot handed over (FIFO)                  ┌──────────┐
//!        │ WAITING  │ ────────────────────────────────────────► │  READY   │ drive a clone of the
//!        └──────────┘                                           └──────────┘ inner service to readiness
//!         │        │                                                  │ call it
//!  max_wait or     dropped: leaves the line at once,                  ▼
//!  deadline        takes no slot                                ┌──────────┐
//!         ▼                                                     │ CALLING  │ holds the permit
//!   BulkheadTimeout (with how long it waited)                   └──────────┘
//!                                                                     │ inner future completes
//!                                                                     │ or is dropped
//!                                                                     ▼
//!                           slot freed ─► handed to the front of the line, if anyone waits
//! ```
//!
//! **Where admission happens.** In the default mode,
//! [`Service::poll_ready`](tower_service::Service::poll_ready)
//! is always ready and reserves nothing: no slot, no inner capacity (for the
//! opposite, see [backpressure mode](#backpressure-mode)).
//! [`call`](tower_service::Service::call) decides, on a clone of the inner service
//! taken at call time (hence `S: Clone`, as hyper-util's client, tonic's `Channel`
//! and axum's router are):
//!
//! - a slot is free and nobody waits: `call` takes it (one compare-and-swap), asks
//!   the clone once whether it is ready, and if so calls it right there; if the
//!   clone is not ready, the [`ResponseFuture`] keeps driving it, holding the slot;
//! - every slot is busy and the queue is full: the future fails with
//!   [`BulkheadFull`] on its first poll;
//! - otherwise the call joins the line, and the future waits for its slot, then
//!   drives the clone to readiness and calls it.
//!
//! So a caller that polled readiness but never called holds nothing, and a waiting
//! caller holds no downstream capacity (no pooled connection).
//!
//! **When the slot is freed.** When the work really ends, not when the caller
//! stops waiting: the response future holds a [`Permit`] until the inner future
//! completes or the response future is dropped (a dropped future frees its slot;
//! it never leaks). Two opt-in extensions, free when not used:
//!
//! - [`BulkheadLayer::hold_until_body_end`] (feature `http`): the permit moves into
//!   the response body ([`Guarded`](seawall_core::http::Guarded)) and is freed when
//!   the body has been read to its end, has failed, or is dropped — the connection
//!   to the dependency is busy until then. The response type becomes
//!   `http::Response<Guarded<B, Permit>>`.
//! - [`BulkheadLayer::permit_in_extensions`] (requests with extensions, such as
//!   `http::Request`): a [`PermitHandle`] is placed in each admitted request's
//!   extensions; a handler that moves work into a spawned task keeps a clone there,
//!   and the slot stays taken until that work ends too.
//!
//! **Any request type.** Without those opt-ins the bulkhead takes any request
//! (`String`, a database query, `http::Request`), with no trait to implement.
//!
//! **Fairness and timing.** Waiters are admitted first in, first out; a newcomer
//! never overtakes them. A waiter leaves with [`BulkheadTimeout`] after `max_wait`
//! or when the current [`Deadline`] passes (it travels with the task; read in `call`,
//! or at the first poll when `call` ran in another task, as in tower's `Buffer`),
//! whichever is first (a request whose
//! deadline has already passed and finds no free slot is rejected on its first
//! poll). The bulkhead does not enforce the deadline on admitted calls: that is
//! [`DeadlineLayer`](seawall_core::DeadlineLayer)'s and the breaker's job. Waiting
//! needs a Tokio runtime with the time driver, as tower's `Timeout` does.
//!
//! # Backpressure mode
//!
//! [`BulkheadLayer::backpressure`] gives the same bulkhead with the opposite
//! readiness ([`Backpressure`], as tower's `ConcurrencyLimit`): `poll_ready`
//! reserves the slot, and is **pending while the bulkhead is full**, woken when a
//! slot is handed to it; `call` uses the reserved slot.
//!
//! **When to use it:** when something in front of the bulkhead reads readiness and
//! can do better than a rejection — `tower::balance::p2c::Balance` and `ReadyCache`
//! choose only ready endpoints, so a replica whose bulkhead is full is skipped and
//! its traffic goes to the others; `tower::buffer::Buffer` stops taking requests
//! and its callers wait in `poll_ready`. Keep the default mode for a server route
//! or a single dependency, where a busy bulkhead should answer at once.
//!
//! What changes:
//! - **No queue:** `max_queue` and `max_wait` do not apply to these services (the
//!   waiting is done in `poll_ready`, by whoever polls: the balancer picks another
//!   endpoint; a `tower::load_shed` or timeout in front bounds it). A service
//!   waiting for readiness is counted in [`Snapshot::queued`] and served first in,
//!   first out with every other waiter of the bulkhead.
//! - **Reservation per service value:** a clone starts with no slot (principle: a
//!   `Clone` shares the bulkhead, not the reservation); dropping a service frees the
//!   slot it reserved but did not use, or leaves the line; an error from the inner
//!   `poll_ready` frees it too. The slot is held while the inner service is polled
//!   to readiness, and counts as admitted when it is reserved.
//! - The inner service is called directly, so it need not be `Clone`.
//!
//! Services of both modes built from one layer share its bulkhead. The default mode
//! pays nothing for this one: it is a different service type.
//!
//! ```
//! use std::convert::Infallible;
//! use std::task::{Context, Poll, Waker};
//! use seawall_bulkhead::BulkheadLayer;
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), seawall_core::BoxError> {
//! let layer = BulkheadLayer::builder("freight").max_concurrent(1).build()?.backpressure();
//! let handle = layer.handle();
//! let mut a = layer.layer(service_fn(|cep: String| async move { Ok::<_, Infallible>(cep.len()) }));
//! let mut b = a.clone(); // the same bulkhead, no reservation of its own
//!
//! a.ready().await?; // reserves the only slot
//! assert_eq!(handle.snapshot().active, 1);
//! // So `b` is not ready: a balancer would choose another endpoint.
//! let mut cx = Context::from_waker(Waker::noop());
//! assert!(Service::<String>::poll_ready(&mut b, &mut cx).is_pending());
//!
//! assert_eq!(a.call("01310-100".to_owned()).await?, 9);
//! b.ready().await?; // the freed slot was handed to `b`
//! # Ok(())
//! # }
//! ```
//!
//! # What it costs
//!
//! An admitted call when a slot is free: one compare-and-swap on the bulkhead's
//! word (which also counts the admission), one `Arc` clone into the permit, a
//! clone of the inner service and one readiness poll of it, and one `fetch_sub`
//! when the call ends. No lock, no allocation, no clock read; the response future
//! is the inner future plus a 16-byte permit. A rejection when full: a few loads,
//! one counter, and the boxed [`BulkheadFull`]; no lock, no timer. Only a call
//! that waits (for a slot, or for an inner service that was not ready) takes the
//! queue's lock, reads the clock, and parks its request in one allocation.
//!
//! `max_concurrent` and `max_queue` are at most 2^20 (1 048 576) each.
//!
//! # Observing and operating
//!
//! [`Handle::snapshot`] reports active and waiting calls, admitted, rejected-full,
//! rejected-timeout and abandoned counts, and the admission wait's p50, p99 and
//! max (a fixed histogram of atomics; immediate admissions count as zero).
//! [`Handle::reconfigure`] changes the limits at run time with validation:
//! growing admits waiters at once; shrinking never preempts a running call, it
//! only admits fewer. [`Handle::revert`] restores the built limits. Rejections
//! emit `tracing` events (target `seawall::bulkhead`); the `metrics` feature
//! exports gauges, counters and a histogram (see the names below).
//!
//! | metric (label `name`) | kind |
//! |---|---|
//! | `seawall_bulkhead_active`, `seawall_bulkhead_queued`, `seawall_bulkhead_max_concurrent` | gauge |
//! | `seawall_bulkhead_admitted_total` | counter |
//! | `seawall_bulkhead_rejected_total{reason = "full" \| "timeout" \| "keys"}` | counter |
//! | `seawall_bulkhead_wait_seconds` | histogram |
//!
//! # Errors
//!
//! The service's error is [`BoxError`]: the inner service's error, or one of the
//! rejections re-exported here. Both are admission rejections
//! ([`Category::Admission`](seawall_core::Category::Admission)): decided locally,
//! no evidence about the dependency, so a circuit breaker ignores them. Find them
//! with [`find_rejection`](seawall_core::find_rejection).
//!
//! # Features
//!
//! - `http`: [`BulkheadLayer::hold_until_body_end`] and [`UntilBodyEnd`].
//! - `tracing` (default): events on rejections and limit changes.
//! - `metrics`: the metrics above.
//! - `serde`: `Deserialize`/`Serialize` for [`BulkheadConfig`] (durations as
//!   `"20ms"`), `Serialize` for snapshots.
//!
//! [`Deadline`]: seawall_core::Deadline
//! [`Snapshot::queued`]: crate::Snapshot::queued
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adaptive;
mod backpressure;
mod config;
mod feedback;
mod future;
mod handle;
mod hold;
mod keyed;
mod layer;
mod machine;
mod permit;
mod service;
mod state;
mod stats;
mod telemetry;

pub use adaptive::AdaptiveConfig;
pub use backpressure::{Backpressure, BackpressureLayer};
pub use config::{BulkheadBuilder, BulkheadConfig};
pub use future::ResponseFuture;
pub use handle::{AdaptiveSnapshot, Handle, Snapshot, WaitStats};
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use hold::UntilBodyEnd;
pub use hold::{Hold, Lend, UntilResponse, WithPermitHandle};
pub use keyed::{
    KeyedBulkhead, KeyedBulkheadBuilder, KeyedBulkheadLayer, KeyedHandle, KeyedSnapshot,
    DEFAULT_MAX_KEYS,
};
pub use layer::BulkheadLayer;
pub use permit::{Permit, PermitHandle};
pub use service::Bulkhead;

pub use seawall_core::{
    BoxError, BulkheadFull, BulkheadTimeout, OverloadStatus, TimeoutsAsOverload,
};
pub use telemetry::WAIT_SECONDS_BUCKETS;

/// Gives the bulkhead's metrics their help text and unit.
///
/// A description given before a recorder is installed is lost, so call this (or the
/// facade's `seawall::metrics::describe()`) after installing the recorder.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    telemetry::describe();
}
