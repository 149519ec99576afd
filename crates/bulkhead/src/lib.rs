//! A bulkhead for Tower services: a cap on concurrent calls to one dependency,
//! with a short, bounded, timed queue in front of it.
//!
//! The point of a bulkhead is that one slow dependency can use only its own
//! capacity: when the freight supplier hangs, at most `max_concurrent` calls wait
//! on it, at most `max_queue` more wait for a slot, and everyone else is told
//! at once ([`BulkheadFull`]) or after a short wait ([`BulkheadTimeout`]) — while
//! the rest of the service, with its own bulkheads, keeps working.
//!
//! The limit of active calls is fixed (`max_concurrent`) or **adaptive**: an
//! algorithm finds it from what the admitted calls say (see [`adaptive`]).
//!
//! # Configuration
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `max_concurrent` | 8 | calls in the inner service at once |
//! | `queue` | 10 waiting, 20 ms | the line in front of the slots: `max_queue` calls wait, each for at most `max_wait`, shortened by the request's [`Deadline`]; [`QueuePolicy`] lists its options |
//! | `adaptive` | none | an algorithm that sets the limit of active calls instead of `max_concurrent` ([`adaptive`]) |
//! | `shadow` | `false` | count what would be rejected, and let it through ([`BulkheadConfig::shadow`]) |
//!
//! # Where state lives
//!
//! **Limits are per instance.** A bulkhead counts the calls of the process it
//! runs in: three instances of a service, each with `max_concurrent = 8`, allow
//! up to **24** concurrent calls to the supplier, not 8. Divide what the supplier
//! can take by the number of instances, or cap it fleet-wide with
//! `seawall-fleet`'s `Fleet::cap`, which applies each instance's share with
//! [`Handle::set_allotment`].
//!
//! **Services built from one layer share one bulkhead.** [`BulkheadLayer`]
//! creates its bulkhead when it is built; every service it builds and every clone
//! of them count against the same slots (like tower's
//! `GlobalConcurrencyLimitLayer`). Separate dependencies need separate layers
//! (per-dependency pools: payments 30, inventory 20, recommendations 10); for one
//! bulkhead per host, route or tenant, use [`KeyedBulkheadLayer`]
//! ([`BulkheadBuilder::keyed`]), which bounds the number of keys.
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
//! `poll_ready` is always ready and reserves nothing; [`call`](tower_service::Service::call)
//! decides, and a call that cannot go out at once waits in its [`ResponseFuture`]
//! with a clone of the inner service taken at call time (hence `S: Clone`, as
//! hyper-util's client, tonic's `Channel` and axum's router are), so a waiting
//! caller holds no downstream capacity ([`Bulkhead`] says more). Waiters are
//! served first in, first out, each for at most `max_wait` and never past the
//! current [`Deadline`] (the rules: the [`queue`] module). The slot is freed when
//! the work really ends: the response future holds a [`Permit`] until the inner
//! future completes or is dropped; [`BulkheadLayer::hold_until_body_end`]
//! (feature `http`) keeps it until the response body ends, and
//! [`BulkheadLayer::permit_in_extensions`] lets a handler's spawned work keep it.
//! Waiting needs a Tokio runtime with the time driver, as tower's `Timeout` does.
//!
//! # Options
//!
//! Each is off until asked for, and costs nothing until then
//! ([docs/costs.md](https://github.com/seawall-rs/seawall/blob/main/docs/costs.md#bulkhead)
//! says what each costs when on):
//!
//! - **An adaptive limit** ([`BulkheadBuilder::adaptive`], module [`adaptive`]):
//!   AIMD or a gradient moves the limit between its bounds from what the admitted
//!   calls say.
//! - **Classes** ([`BulkheadLayer::criticality`]): critical calls first under
//!   overload; each class holds at most its [`Shares`] of the limit, and a full
//!   queue turns away its least critical waiter.
//! - **A standing queue** ([`ControlledDelay`], in the [`QueuePolicy`]): once the
//!   line stops emptying, a short wait and the newest waiter first.
//! - **Backpressure mode** ([`BulkheadLayer::backpressure`], [`Backpressure`]):
//!   the slot is reserved in `poll_ready`, pending while the bulkhead is full,
//!   for `tower::balance` and `tower::buffer::Buffer`.
//! - **Shadow mode** ([`BulkheadConfig::shadow`]): admit as if enforcing, let
//!   through what would be rejected, and count it.
//!
//! # Observing and operating
//!
//! [`Handle::snapshot`] reports the limit in force, active and waiting calls, the
//! counts of each outcome, the admission wait's p50, p99 and max, an adaptive
//! algorithm's state and, with classes, each class's ([`ClassSnapshot`]).
//! [`Handle::reconfigure`] changes the limits at run time with validation (growing
//! admits waiters at once; shrinking preempts no running call) and
//! [`Handle::revert`] restores the built ones. [`Handle::subscribe`] streams
//! [`BulkheadEvent`]s: saturated, relieved, the limit moving. Rejections emit
//! `tracing` events (target `seawall::bulkhead`); the `metrics` feature exports
//! the `seawall_bulkhead_*` series of
//! [docs/metrics.md](https://github.com/seawall-rs/seawall/blob/main/docs/metrics.md),
//! and [docs/operations.md](https://github.com/seawall-rs/seawall/blob/main/docs/operations.md)
//! says how to read them in an incident.
//!
//! # Errors
//!
//! The service's error is [`BoxError`]: the inner service's error, or one of the
//! rejections re-exported here. Both are admission rejections
//! ([`Category::Admission`](seawall_core::Category::Admission)): decided locally,
//! no evidence about the dependency, so a circuit breaker ignores them. Find them
//! with [`find_rejection`](seawall_core::find_rejection).
//!
//! # Layout
//!
//! ```text
//! lib.rs              these docs, the re-exports
//! config.rs           BulkheadConfig: validated plain data (a leaf)
//! queue.rs            QueuePolicy, the pure queue policy and the one list of its options: who
//!                     takes a slot, who waits and until when, who is turned away; MAX_LIMIT;
//!                     Shares and the class-aware decisions (shares, lines, displacement);
//!                     ControlledDelay: the short wait and newest-first order of a standing line
//! layer.rs            BulkheadLayer and BulkheadBuilder: one bulkhead per layer, shared by
//!                     every service it builds
//! service.rs          Bulkhead, the Service: admission in `call`
//! future.rs           ResponseFuture: the wait, the inner service's readiness, the inner call
//! permit.rs           Permit and PermitHandle: the slot a call holds, freed on drop
//! hold.rs             Hold: how long a call keeps its permit (the response, its body, a handle)
//! semaphore.rs        the semaphore that applies the queue policy: slots and waiters counted
//!                     in one atomic word, the line (and the counts per class) behind a mutex
//! state.rs            what one bulkhead shares: the semaphore, the configuration in force,
//!                     the limit's feedback, shadow counts, events and telemetry; the
//!                     Snapshot and Demand read from it
//! feedback.rs         the limit in force: fixed, adaptive, forced by an operator, allotted
//! adaptive/mod.rs     AdaptiveConfig and the sealed LimitAlgorithm trait
//!   adaptive/aimd.rs      Aimd: additive increase, multiplicative decrease
//!   adaptive/gradient.rs  Gradient: latency against a baseline measured again on a schedule
//! handle.rs           Handle: the operator's view and controls
//! events.rs           BulkheadEvent and LimitCause: saturated, relieved, the limit moving
//! stats.rs            the admission-wait histogram
//! telemetry.rs        tracing events and metrics
//! keyed.rs            KeyedBulkheadLayer: one bulkhead per key, a bounded number of keys
//! backpressure.rs     BackpressureLayer: the slot reserved in `poll_ready`
//! sync.rs             std's atomics and mutex, or loom's in the loom models
//! loom_semaphore.rs   loom models of the semaphore (tests only)
//! ```
//!
//! # How to add
//!
//! - **A queue option:** a [`QueuePolicy`] field with its default, its check in
//!   [`QueuePolicy::validate`], its row in the table there and its rule, all in
//!   `queue.rs`: the rule decides how long an arrival may wait (`wait_for`), where
//!   it goes (`place`), and what the line remembers between arrivals for it
//!   (`LineState`, moved on by `arrive`). Then `semaphore.rs` only if it changes
//!   which waiter a freed slot goes to, and `state.rs` only if the [`Snapshot`]
//!   shows its state. The configuration, the builder's
//!   [`queue`](BulkheadBuilder::queue), the policy in force and a policy file carry
//!   it unchanged. Then its tests, and a line in the changelog.
//!
//! # Features
//!
//! - `http`: [`BulkheadLayer::hold_until_body_end`] and [`UntilBodyEnd`].
//! - `tracing` (default): events on rejections, limit changes, and each move of an
//!   adaptive or forced limit.
//! - `metrics`: the metrics above.
//! - `serde`: `Deserialize`/`Serialize` for [`BulkheadConfig`], its [`QueuePolicy`]
//!   and its [`AdaptiveConfig`] (durations as `"20ms"`; `queue = { max_queue = 10,
//!   max_wait = "20ms" }`; `adaptive = { algorithm = "aimd", … }`), `Serialize` for
//!   snapshots.
//!
//! [`Deadline`]: seawall_core::Deadline
//! [`Snapshot::queued`]: crate::Snapshot::queued
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adaptive;
mod backpressure;
mod config;
mod events;
mod feedback;
mod future;
mod handle;
mod hold;
mod keyed;
mod layer;
#[cfg(all(test, loom))]
mod loom_semaphore;
mod permit;
pub mod queue;
mod semaphore;
mod service;
mod state;
mod stats;
mod sync;
mod telemetry;

pub use adaptive::AdaptiveConfig;
pub use backpressure::{Backpressure, BackpressureLayer};
pub use config::BulkheadConfig;
pub use events::{BulkheadEvent, LimitCause};
pub use future::ResponseFuture;
pub use handle::Handle;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use hold::UntilBodyEnd;
pub use hold::{Hold, Lend, UntilResponse, WithPermitHandle};
pub use keyed::{
    KeyedBulkhead, KeyedBulkheadBuilder, KeyedBulkheadLayer, KeyedHandle, KeyedSnapshot,
};
pub use layer::{BulkheadBuilder, BulkheadLayer};
pub use permit::{Permit, PermitHandle};
pub use queue::{ControlledDelay, QueuePolicy, Shares};
pub use seawall_core::DEFAULT_MAX_KEYS;
pub use service::Bulkhead;
pub use state::{AdaptiveSnapshot, ClassSnapshot, Demand, Snapshot, WaitStats};

pub use seawall_core::{
    BoxError, BulkheadFull, BulkheadTimeout, Criticality, CriticalityHeader, CriticalityOf,
    FullCause, OverloadStatus, TimeoutsAsOverload, Unclassed,
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
