//! Degradation levels for Tower services: fall at once, climb back slowly.
//!
//! When a dependency fails, a service can often still be useful at a lower level: a
//! chat assistant answers with a smaller model, then with canned answers picked by a
//! router, then with a polite message. [`DegradationLayer`] keeps an ordered list of
//! such levels, best first, and serves every request at the best level that works.
//!
//! The design is asymmetric. **Falling is immediate**: every second at a level that
//! does not work is a lost conversation. **Climbing is slow and verified**: a
//! provider that has just come back is usually fragile, and sending it all the
//! traffic at its first sign of life is the surest way to knock it over again. The
//! failure mode to avoid is ping-pong (climb because one request worked, fall because
//! the next ten failed, over and over). Three mechanisms prevent it, and all three are
//! needed:
//!
//! - **hysteresis**: the bar to climb is stricter than the bar to fall;
//! - **minimum dwell** at a level before any climb (default 60 s), so no decision is
//!   reversed before it has had an observable effect;
//! - **recovery probes**: after the dwell, a small share of requests (default 5 %)
//!   goes to the level above; the level climbs only when those probes pass a whole
//!   probe window. Only probe successes count: successes served at a degraded level
//!   say nothing about the level above. Climbing is one level at a time.
//!
//! # Example
//!
//! An LLM-style chat service with four levels: the full model, a reduced model, a
//! keyword router over canned answers, and a fixed message.
//!
//! ```
//! use std::time::Duration;
//! use seawall_core::BoxError;
//! use seawall_degradation::{Cause, DegradationLayer, Fixed};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), BoxError> {
//! // The large model; its provider is overloaded right now.
//! let full = service_fn(|_prompt: String| async move {
//!     Err::<String, BoxError>("provider: 503 overloaded".into())
//! });
//! // A smaller model from another provider.
//! let reduced = service_fn(|prompt: String| async move {
//!     Ok::<_, BoxError>(format!("(short answer to) {prompt}"))
//! });
//! // No model at all: canned answers picked by keyword.
//! let router = service_fn(|prompt: String| async move {
//!     let answer = if prompt.contains("refund") {
//!         "Refunds: see https://example.com/refunds"
//!     } else {
//!         "Help topics: https://example.com/help"
//!     };
//!     Ok::<_, BoxError>(answer.to_owned())
//! });
//! // The last resort cannot fail.
//! let message = Fixed::new("We are having trouble. Please try again in a few minutes.".to_owned());
//!
//! let degradation = DegradationLayer::builder("chat")
//!     .inner_level("full")
//!     .level("reduced", reduced)
//!     .level("router", router)
//!     .level("message", message)
//!     .consecutive_failures(5)
//!     .min_dwell(Duration::from_secs(60))
//!     .probe_ratio(0.05)
//!     .probe_successes_to_recover(20)
//!     .build()?;
//! let handle = degradation.handle();
//! let mut changes = handle.subscribe();
//! let mut chat = degradation.layer(full);
//!
//! // The first five requests reach the full model and get its failure (a fallback
//! // layer outside this one would answer them better)...
//! for _ in 0..5 {
//!     assert!(chat.ready().await?.call("hello".into()).await.is_err());
//! }
//! // ...and the level falls at once, one level.
//! let change = changes.try_recv()?;
//! assert_eq!((&*change.from.name, &*change.to.name), ("full", "reduced"));
//! assert_eq!(change.cause, Cause::ConsecutiveFailures);
//! let answer = chat.ready().await?.call("where is my refund?".into()).await?;
//! assert_eq!(answer, "(short answer to) where is my refund?");
//!
//! // An operator holds the router during maintenance of the second provider...
//! handle.force("router")?;
//! let answer = chat.ready().await?.call("refund please".into()).await?;
//! assert_eq!(answer, "Refunds: see https://example.com/refunds");
//! // ...then hands control back: the machine starts a fresh dwell at "router" and
//! // climbs back only through probes.
//! handle.release();
//! let snapshot = handle.snapshot();
//! assert_eq!(snapshot.level_name, "router");
//! assert!(!snapshot.state.forced);
//! # Ok(())
//! # }
//! ```
//!
//! # The level machine
//!
//! ```text
//!              falls one level at once: failures_to_degrade consecutive failures
//!              (or a failure rate over a window) at the level in force
//!   +--------+ ----------> +---------+ ----------> +--------+ ----------> +---------+
//!   | 0 full |             |1 reduced|             |2 router|             |3 message|
//!   +--------+ <---------- +---------+ <---------- +--------+ <---------- +---------+
//!              climbs one level: after min_dwell at the level, probe_ratio of the
//!              requests go to the level above; when a whole probe_window (from its
//!              first probe) ends with >= probe_successes_to_recover probe successes
//!              since the last failed probe and a probe failure rate <= the bar.
//!              Otherwise a new window starts.
//!
//!   floor:  the machine never climbs above it (setting it moves down at once)
//!   force:  holds a level, no automatic change and no probes, until release
//! ```
//!
//! The rules, all tested on [`DegradationMachine`] with explicit instants:
//!
//! - a failed probe resets probe progress but is **not** a failure of the current
//!   level: a failed probe of the level above says nothing about the current one,
//!   and counting it would push a working level down while it tries to recover;
//! - a failure at the current level resets probe progress (things got worse);
//! - the outcome of a request admitted before a level change is ignored (a burst of
//!   failures in flight at the old level must not push the new one down); so is a
//!   probe's from an earlier probe window;
//! - the last level failing changes nothing (no loop, no panic); the failure is
//!   returned to the caller and counted in the snapshot;
//! - a level whose service panics (in `poll_ready`, `call` or its future) has
//!   **failed** that request: the failure is recorded while the panic unwinds
//!   through the layer, so it counts even when the panic is caught further out
//!   (`catch_unwind`, tower-http's `CatchPanicLayer`, a spawned task's `JoinError`).
//!   A dropped future records nothing.
//!
//! # Where state lives, what `Clone` shares
//!
//! One state is created by [`DegradationBuilder::build`]: every service the layer
//! makes and every clone of them share one machine, one [`Handle`] and the lower
//! levels' services (as tower's `GlobalConcurrencyLimitLayer` does). The inner
//! service (the best level) is owned by each service value, as usual in Tower. Build
//! one layer per thing that degrades.
//!
//! # Readiness, classification, modes
//!
//! [`Degradation`]'s `poll_ready` is always ready and polls no level: the level is
//! chosen in `call`, and only the chosen level's readiness is awaited, in the
//! response future (tower's `Steer`, by contrast, waits for every service).
//!
//! Outcomes are classified with seawall-core's [`Classify`](seawall_core::Classify).
//! The default, [`DefaultClassifier`] = `AdmissionAsFailure(ErrorsAsFailures)`,
//! counts every error as a failure, **including** admission rejections from the
//! level's own stack (its breaker open, its bulkhead full): a circuit breaker ignores
//! those, but here they mean the level cannot serve, which is exactly the evidence the
//! machine needs. A request that fails is answered with that failure; it is not
//! re-served at a lower level (that is the fallback layer's job, outside this one).
//!
//! - **Shadow mode** ([`DegradationConfig::shadow`]): route as the machine would,
//!   serve everything at the best level, and count what would have gone lower.
//! - **HTTP servers** (feature `http`): [`http::FixedResponse`] is a level that is
//!   a plain response; seawall-core's [`RespondLayer`](seawall_core::http::RespondLayer)
//!   outside the layer answers errors with `503` instead of an `Err`.
//!   [`DegradationBuilder::level_extensions`] puts [`CurrentLevel`] in each
//!   request's extensions and [`ServedBy`] in each response's.
//! - **Streams** (feature `http`, [`DegradationLayer::hold_until_body_end`],
//!   [`UntilBodyEnd`]): a healthy-looking response's outcome is recorded when its
//!   body ends, by the trailers' `grpc-status`.
//! - **Health and feature plans:** [`health::HealthMonitor`] runs periodic checks
//!   per named dependency and can drive a floor; [`features::FeaturePlan`] maps
//!   features to normal, degraded or disabled from the healthy dependencies, and
//!   [`features::FeaturesLayer`] hands the result to handlers.
//!
//! # Operating it
//!
//! [`Handle`] gives a [`Snapshot`] (level, entered-at, failures, probe progress,
//! floor, forced), a subscription to [`DegradationEvent`]s, [`Handle::set_floor`] /
//! [`Handle::clear_floor`] (a health signal bounding how high the machine may
//! climb), [`Handle::force`] / [`Handle::release`] (operators; wins over
//! everything), [`Handle::reconfigure`] with validation and [`Handle::revert`].
//! Every change emits a `tracing` event; the `metrics` feature exports the
//! `seawall_degradation_*` series of
//! [docs/metrics.md](https://github.com/seawall-rs/seawall/blob/main/docs/metrics.md).
//! What a call costs: [docs/costs.md](https://github.com/seawall-rs/seawall/blob/main/docs/costs.md#degradation).
//!
//! # Layout
//!
//! ```text
//! lib.rs          these docs, the re-exports
//! config.rs       DegradationConfig and Trigger: the policy as plain data, defaults, validation
//! layer.rs        DegradationLayer and DegradationBuilder (the levels, the classifier)
//! machine.rs      DegradationMachine, the pure policy: falls at once, climbs back slowly and
//!                 verified; Change, Ticket, Cause, probe progress
//!   machine/tests.rs  the machine's unit and property tests (tests only)
//! service.rs      Degradation, the Service: asks which level serves a request and calls it
//! future.rs       ResponseFuture: drives the chosen level to readiness, calls it, reports once;
//!                 LevelService, ServedBy and the response extensions
//! handle.rs       the state every service of one layer shares, and Handle, Snapshot, Level,
//!                 DegradationEvent: the operator's view and controls
//! fixed.rs        Fixed: a level that always answers the same thing
//! http.rs         FixedResponse: a level that is a plain response (feature `http`)
//! body.rs         UntilBodyEnd: a level's outcome reported when its body ends (feature `http`)
//! health.rs       HealthMonitor: proactive checks of named dependencies, on tokio
//! features.rs     FeaturePlan: which features run normally, degraded or not at all
//! telemetry.rs    tracing events and metrics
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "http")]
mod body;
mod config;
pub mod features;
mod fixed;
mod future;
mod handle;
pub mod health;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
mod layer;
mod machine;
mod service;
mod telemetry;

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use body::{HeldTicket, UntilBodyEnd, UntilBodyEndFuture, UntilBodyEndLayer};
pub use config::{DegradationConfig, Trigger};
pub use fixed::Fixed;
pub use future::{
    Annotate, CurrentLevel, LevelService, NoExtensions, ResponseExtensions, ResponseFuture,
    ServedBy, WithLevelExtensions,
};
pub use handle::{DegradationEvent, Handle, Level, SelectLevel, Snapshot};
pub use layer::{DefaultClassifier, DegradationBuilder, DegradationLayer};
pub use machine::{
    Cause, Change, DegradationMachine, Direction, MachineSnapshot, ProbeProgress, Ticket,
    MAX_LEVELS,
};
pub use service::Degradation;

/// Gives the degradation layer's and the health monitor's metrics their help text.
///
/// A description given before a recorder is installed is lost, so call this (or the
/// facade's `seawall::metrics::describe()`) after installing the recorder.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    telemetry::describe();
}
