//! A circuit breaker for Tower services: stop calling a dependency that is failing,
//! probe it carefully, and take the load back gradually.
//!
//! Each call to a struggling dependency adds latency, holds a connection and may
//! slow its recovery. While the breaker is open every call fails at once with
//! [`CircuitOpen`] (carrying a retry-after), and the dependency receives nothing —
//! not even a `poll_ready`. After the open interval a few probes test it; success
//! closes the breaker, failure reopens it.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use seawall_circuit_breaker::{CircuitBreakerLayer, State};
//! use seawall_core::{find_rejection, BoxError, RejectionKind};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! // The last 10 outcomes, at least 10 of them: 5 failures open it for 10 s.
//! let layer = CircuitBreakerLayer::builder("freight")
//!     .count_window(10, 10, 0.5)
//!     .open_for(Duration::from_secs(10))
//!     .build()?;
//! let handle = layer.handle();
//!
//! let supplier = service_fn(|_req: http::Request<&str>| async {
//!     Err::<&str, BoxError>("connection refused".into())
//! });
//! let quotes = layer.layer(supplier);
//!
//! for _ in 0..10 {
//!     let err = quotes.clone().oneshot(http::Request::new("SP -> RJ")).await.unwrap_err();
//!     assert!(find_rejection(&*err).is_none()); // the supplier's own error
//! }
//! assert_eq!(handle.state(), State::Open);
//!
//! // Now calls fail fast, without reaching the supplier, and say when to come back.
//! let err = quotes.clone().oneshot(http::Request::new("SP -> RJ")).await.unwrap_err();
//! let rejection = find_rejection(&*err).unwrap();
//! assert_eq!(rejection.kind(), RejectionKind::CircuitOpen);
//! // 10 s, stretched by up to 20 % so that replicas which tripped together do not
//! // all probe at once (`jitter`, on by default).
//! assert!(rejection.retry_after().unwrap() <= Duration::from_secs(12));
//! assert_eq!(handle.snapshot().counters.short_circuited, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # The state machine
//!
//! ```text
//!                            (1) trip
//!        +-------------+ ------------------------------> +-------------+
//!   +--> |   CLOSED    |                                 |    OPEN     | <-----+
//!   |    | (R) ramp    | <-------------+                 |             |       |
//!   |    +-------------+               |                 +-------------+       |
//!   |                                  |                        |              |
//!   |                 (3) enough probes succeeded     (2) interval elapsed     |
//!   |                                  |                    (lazy)             |
//!   |                                  |                        v              |
//!   |                                  |                 +-------------+       |
//!   |                                  +---------------- |  HALF-OPEN  | ------+
//!   |                                                    |  (probes)   |  (4) probe failed
//!   |                                                    | (G) gate    |  (5) probe timed out
//!   |                                                    +-------------+
//!   |
//!   |   verdicts, from open or half-open, about the current trip only:
//!   |                               (V1) close   -> CLOSED (through the ramp)
//!   |                               (V2) reopen  -> OPEN   (interval from now, backoff)
//!   |
//!   |   operators, from any state:  (6) force(Open)   -> FORCED_OPEN
//!   |                               (7) force(Closed) -> FORCED_CLOSED
//!   |                               (8) disable       -> DISABLED
//!   +------------------------------ (9) reset         -> CLOSED (fresh)
//!                                       (release: reset, from 6, 7 or 8 only)
//! ```
//!
//! The policy itself is [`CircuitBreakerMachine`], a pure state machine (no clock,
//! no lock, no counters: each step takes `now` and returns what happened), public
//! so that a configuration can be tried on a sequence of outcomes in a test. Its
//! docs give the guard of each numbered transition, what happens inside
//! half-open, the probe gate (G), verdicts (V1, V2), the ramp (R) and how the open
//! interval grows. Every transition increments the breaker's *epoch*; an outcome
//! of a call admitted in an older epoch is counted (`stale`) but never drives a
//! transition, so a slow call admitted while closed cannot close a half-open
//! breaker.
//!
//! **Classification.** Any seawall-core classifier or per-request factory
//! ([`CircuitBreakerBuilder::classifier`]); the default is
//! [`ErrorsAsFailures`](seawall_core::ErrorsAsFailures). Every provided classifier
//! *ignores* seawall admission rejections from inner layers (a full bulkhead says
//! nothing about the supplier) and counts a deadline expiry as a failure.
//!
//! **Deadlines.** When a seawall [`Deadline`](seawall_core::Deadline) is current
//! (set by a [`DeadlineLayer`](seawall_core::DeadlineLayer) further out; it
//! travels with the task, not the request), the breaker bounds the inner call by
//! it: running out is recorded as a failure — a slow dependency trips the breaker
//! instead of merely being cancelled from outside — and answered with
//! [`DeadlineExceeded`].
//!
//! # Any request type
//!
//! The service accepts any request type, with no trait to implement:
//!
//! ```
//! use seawall_circuit_breaker::CircuitBreakerLayer;
//! use seawall_core::BoxError;
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let redis = service_fn(|key: String| async move { Ok::<_, BoxError>(format!("value of {key}")) });
//! let guarded = CircuitBreakerLayer::builder("redis").build()?.layer(redis);
//! assert_eq!(guarded.oneshot("user:1".to_owned()).await?, "value of user:1");
//! # Ok(())
//! # }
//! ```
//!
//! # Modes
//!
//! The same breaker, served differently; each is a method of the layer and a
//! service type of its own, so the default mode pays nothing for them:
//!
//! - **Readiness mode, for balancers** ([`CircuitBreakerLayer::pending_while_open`],
//!   [`PendingWhileOpen`]): `poll_ready` is pending while the breaker would turn a
//!   call away, so `tower::balance` and `ReadyCache` stop choosing the endpoint.
//! - **Streams** (feature `http`, [`CircuitBreakerLayer::hold_until_body_end`],
//!   [`UntilBodyEnd`]): a call is reported when its response body ends, by the
//!   trailers' `grpc-status`, so a stream that fails after its first messages
//!   counts as a failure.
//! - **Shadow mode** ([`CircuitBreakerConfig::shadow`]): decide every call as if
//!   enforcing, let through what would be rejected, and count it.
//!
//! # Where state lives, and what `Clone` shares
//!
//! A [`CircuitBreakerLayer`] owns one breaker, created when it is built: every
//! service it builds (in either mode), every clone of those services and every
//! clone of the layer share it; a readiness-mode service's wait is its own. A service clone does not share the inner service's reserved
//! readiness. Breakers are per process. For one breaker per host, route or tenant,
//! with a bound on the number of keys, use [`KeyedCircuitBreakerLayer`]
//! ([`CircuitBreakerBuilder::keyed`]).
//!
//! # Observability
//!
//! [`Handle`] gives a [`Snapshot`] (state, how long, window counts, retry-after,
//! counters, and what shows a breaker stuck open), a subscription to
//! [`CircuitBreakerEvent`]s, and the operator controls. `tracing` events (target
//! `seawall::circuit_breaker`) mark every transition (`WARN` when opening) and
//! rejection (`DEBUG`); the `metrics` feature exports the `seawall_breaker_*`
//! series listed in
//! [docs/metrics.md](https://github.com/seawall-rs/seawall/blob/main/docs/metrics.md).
//! What a call costs, in time and memory:
//! [docs/costs.md](https://github.com/seawall-rs/seawall/blob/main/docs/costs.md#circuit-breaker).
//!
//! # Layout
//!
//! ```text
//! lib.rs              these docs, the re-exports
//! config.rs           CircuitBreakerConfig and its parts, as plain validated data (a leaf)
//! layer.rs            CircuitBreakerLayer and its builder
//! service.rs          CircuitBreaker, the Service: asks the shared state, calls the inner service
//! future.rs           ResponseFuture: holds the ticket, reports the call once (or its cancellation)
//! readiness.rs        PendingWhileOpen: poll_ready pending while open, for balancers
//! body.rs             UntilBodyEnd: the ticket held until the response body ends (feature `http`)
//! keyed.rs            KeyedCircuitBreakerLayer: one breaker per key, a bounded number of keys
//! handle.rs           Handle, Snapshot, Counters: the operator's view and controls
//! hooks.rs            ProbeGate and Verdict: what an outside coordinator asks and tells
//! machine.rs          CircuitBreakerMachine, the pure policy: its phases, lazy transitions,
//!                     backoff and jitter, operators, reconfiguration, verdicts
//!   machine/transition.rs State, Cause, CircuitBreakerEvent (what subscribers receive),
//!                         MachineEvent (what the machine returns)
//!   machine/window.rs     the counting windows behind the trip policies, and when they trip
//!   machine/admission.rs  tickets, admission, the ramp, half-open probes and the probe gate
//!   machine/report.rs     outcomes in: completion, cancellation, stale results, probe verdicts
//! state.rs            the shared state: the atomic word of the lock-free paths, the machine
//!                     behind a mutex
//!   state/driven.rs       what the machine leaves to its driver: counters, subscribers,
//!                         the random source, the lock-free mode
//!   state/lane.rs         Lane, what an admitted call holds: a keyed breaker of its own,
//!                         or one lane of a shared breaker, a thread's own cache lines
//! telemetry.rs        tracing events and metrics
//! sync.rs             std's atomics and mutex, or loom's in the loom models
//! loom_breaker.rs     loom models of the word and the lanes' lines (tests only)
//! ```
//!
//! # How to add
//!
//! - **A trip condition:** a [`TripPolicy`] variant and its checks, in `config.rs`;
//!   its window (when no kind of window there serves it) and the rule that trips
//!   it, in `machine/window.rs`; its [`Cause`], in `machine/transition.rs`, only if
//!   no cause there fits. Exhaustive matches point at each place. The builder's
//!   [`policy`](CircuitBreakerBuilder::policy), a policy file, the snapshot and the
//!   metrics take it as it is. Then its tests, and a line in the changelog.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "http")]
mod body;
mod config;
mod future;
mod handle;
mod hooks;
mod keyed;
mod layer;
#[cfg(all(test, loom))]
mod loom_breaker;
mod machine;
mod readiness;
mod service;
mod state;
mod sync;
mod telemetry;

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use body::{
    HeldBody, HeldTicket, KeyedUntilBodyEnd, KeyedUntilBodyEndLayer, UntilBodyEnd,
    UntilBodyEndFuture, UntilBodyEndLayer,
};
pub use config::{
    CircuitBreakerConfig, RampConfig, SlowCallConfig, TripPolicy, DEFAULT_JITTER, MAX_COUNT_WINDOW,
    MAX_HALF_OPEN_PROBES,
};
pub use future::ResponseFuture;
pub use handle::{Counters, Forced, Handle, Snapshot, TransitionCount};
pub use hooks::{ProbeDecision, ProbeGate, ProbeRequest, Verdict, VerdictOutcome};
pub use keyed::{
    KeyedCircuitBreaker, KeyedCircuitBreakerBuilder, KeyedCircuitBreakerLayer, KeyedHandle,
    KeyedSnapshot,
};
pub use layer::{CircuitBreakerBuilder, CircuitBreakerLayer};
pub use machine::{
    Admission, Cause, CircuitBreakerEvent, CircuitBreakerMachine, MachineEvent, Recorded, Report,
    State, Ticket,
};
pub use readiness::{PendingWhileOpen, PendingWhileOpenLayer};
pub use seawall_core::{CircuitOpen, DeadlineExceeded, DEFAULT_MAX_KEYS};
pub use service::CircuitBreaker;

/// Gives the breaker's metrics their help text and unit.
///
/// A description given before a recorder is installed is lost, so call this (or the
/// facade's `seawall::metrics::describe()`) after installing the recorder.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    telemetry::describe();
}
