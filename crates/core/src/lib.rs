//! The shared vocabulary of [seawall](https://docs.rs/seawall)'s Tower middleware.
//!
//! Every seawall layer (circuit breaker, bulkhead, degradation, fallback) speaks
//! the types defined here, so they compose in any order:
//!
//! - **Rejections** (one small public struct per [`RejectionKind`]: [`CircuitOpen`],
//!   [`BulkheadFull`], …), boxed into a [`BoxError`] like tower's own errors, and
//!   [`find_rejection`] to recognise one anywhere in an error chain with its kind,
//!   [`Category`], name and retry-after.
//! - **Criticality** ([`Criticality`], [`CriticalityOf`], [`CriticalityHeader`]): a
//!   request's class under overload (critical, default, sheddable), which a
//!   bulkhead with classes serves first and sheds last.
//! - **Classification** ([`Outcome`], [`Classify`], [`ClassifyRequest`]): which
//!   results are evidence of a sick dependency. Provided: [`ErrorsAsFailures`] (the
//!   default), [`HttpStatus`] (5xx and 429 fail, a 404 is a business answer) and
//!   [`GrpcStatus`]. For an adaptive concurrency limit, which results say the
//!   dependency is *overloaded*: [`OverloadStatus`] (429, 503, gRPC
//!   `RESOURCE_EXHAUSTED`, a timeout) and [`TimeoutsAsOverload`] for any result type.
//! - **Sliding windows** ([`CountWindow`], [`TimeWindow`]) with `now` passed in.
//! - **Deadlines** ([`Deadline`], [`DeadlineLayer`], [`bounded`]) for any request
//!   type: the deadline travels with the task, not the request
//!   ([`Deadline::current`], [`with_current_deadline`]).
//! - **Retries that respect the budget** ([`DeadlineRetry`], a `tower::retry`
//!   policy): attempts counted from the first, jittered exponential waits that must
//!   fit in the remaining deadline, a retry budget shared by the policy's clones, and
//!   never a seawall rejection or a business answer. Placed inside the deadline and
//!   outside the bulkhead and the breaker (see its docs for why).
//! - **Hedged requests** ([`HedgeLayer`], module [`hedge`]): a second attempt when the
//!   first is slow (a fixed delay or a percentile of recent first attempts), only if
//!   the deadline fits it, the request is idempotent, no breaker or bulkhead refused
//!   it, and the retry budget (which it can share with [`DeadlineRetry`] through a
//!   [`SharedBudget`]) allows it; the first success wins and the losers are cancelled.
//! - **HTTP glue** (feature `http`, module [`http`]): a rejection
//!   rendered by one answers table (503 with `Retry-After` when known, 504 for a
//!   spent deadline), the [`Guarded`](crate::http::Guarded)
//!   body that holds a permit until a response body ends, and the `Either` body.
//! - **gRPC glue** (feature `tonic`, module [`grpc`]): rejections as
//!   `UNAVAILABLE` / `RESOURCE_EXHAUSTED` / `DEADLINE_EXCEEDED` statuses for tonic
//!   clients, and as
//!   trailers-only responses for servers.
//! - **One handle shape** ([`LayerHandle`]): the name, configuration, run-time
//!   reconfiguration, revert, snapshot and operator verbs (`force`, `release`) that
//!   every layer's handle has, so code can treat the layers alike.
//! - **Configuration errors** ([`ConfigError`]) naming the field at fault, and the
//!   longest duration any setting accepts ([`MAX_DURATION`], a year) with
//!   instant arithmetic that cannot panic ([`later`]). Every interval seawall
//!   measures (budgets, open intervals, windows, waits, dwells, backoffs) is measured
//!   on the monotonic clock (tokio's `Instant`), never the wall clock: a clock step
//!   trips, opens, closes and expires nothing.
//! - **A bounded keyed map** ([`KeyedMap`]) for the keyed layers: O(1) lookup and
//!   eviction (CLOCK with a bounded sweep), values pinned by the layer's rule are
//!   never evicted, and no lock is held while anything but the map's bookkeeping runs.
//!   What every keyed layer does with it is [`Keyed`]'s, whatever the policy (a
//!   [`KeyedPolicy`]): the settings each new key is built from, an operator's change
//!   applied to every key, a key built meanwhile caught up with it, the overflow state.
//! - **Panics as failures** ([`on_unwind`], [`PanicWatch`]): how a layer records a panicking
//!   dependency while the panic unwinds, even when it is caught further out.
//!
//! # Example
//!
//! A classifier decides the same way whatever layer a rejection came from:
//!
//! ```
//! use std::time::Duration;
//! use seawall_core::{BoxError, BulkheadFull, Classify, DeadlineExceeded, ErrorRef, HttpStatus, Outcome};
//!
//! let classifier = HttpStatus::default();
//! let not_found = http::Response::builder().status(404).body(()).unwrap();
//! let unavailable = http::Response::builder().status(503).body(()).unwrap();
//! assert_eq!(classifier.classify(Ok(&not_found)), Outcome::Success);
//! assert_eq!(classifier.classify(Ok(&unavailable)), Outcome::Failure);
//!
//! // A local admission rejection is no evidence about the supplier…
//! let full: BoxError = Box::new(BulkheadFull::new("freight".into()));
//! assert_eq!(Classify::<http::Response<()>>::classify(&classifier, Err(ErrorRef::from(&*full))), Outcome::Ignore);
//! // …but a supplier too slow for the budget is.
//! let late: BoxError = Box::new(DeadlineExceeded::new());
//! assert_eq!(Classify::<http::Response<()>>::classify(&classifier, Err(ErrorRef::from(&*late))), Outcome::Failure);
//! ```
//!
//! # Layout
//!
//! ```text
//! lib.rs              these docs, the re-exports
//! rejection.rs        the rejection types, RejectionKind and its one list (the
//!                     `rejection_kinds!` rows), Category, Name, and find_rejection;
//!                     everything in it is public, re-exported whole
//! criticality.rs      Criticality, a request's class under overload; CriticalityOf, the
//!                     extractor (closures, CriticalityHeader, Unclassed)
//! classify.rs         Outcome, Classify, ClassifyRequest and the provided classifiers
//!                     (ErrorsAsFailures, HttpStatus, GrpcStatus, OverloadStatus, …)
//! window.rs           CountWindow and TimeWindow: sliding windows of outcomes, `now` passed in
//! deadline.rs         Deadline: the current deadline, which travels with the task, and
//!                     with_current_deadline for work moved to another task
//!   deadline/bound.rs     Bounded and BoundedByCurrent: futures bounded by a deadline
//!   deadline/grpc_timeout.rs the grpc-timeout header's codec
//!   deadline/layer.rs     DeadlineLayer, its service, future, handle and snapshot
//!   deadline/tests.rs     the deadline in paused time (tests only)
//! retry/mod.rs        DeadlineRetry, the deadline-aware tower::retry policy, its builder,
//!                     handle and snapshot
//!   retry/config.rs       RetryConfig, validated field by field
//!   retry/backoff.rs      the wait before each retry: capped exponential growth, jitter
//!   retry/budget.rs       the retry budget the policy's clones share, and SharedBudget
//!   retry/pushback.rs     the dependency's own signals: Retry-After, grpc-retry-pushback-ms
//!   retry/tests.rs        the policy under tower's Retry, in paused time (tests only)
//! hedge/mod.rs        the hedging module's docs (why, where it goes, the state
//!                     diagram, an example) and its re-exports
//!   hedge/config.rs       HedgeConfig, HedgeDelay, PercentileDelay, validated
//!   hedge/latency.rs      the decaying log-bucketed histogram of first attempts
//!   hedge/telemetry.rs    the hedging events and metrics
//!   hedge/state.rs        what a layer's services share; HedgeHandle, HedgeSnapshot
//!   hedge/future.rs       HedgeFuture: the attempts, the timer, which answer wins
//!   hedge/service.rs      Hedge, HedgeIf, IdempotentRequests
//!   hedge/layer.rs        HedgeLayer and HedgeBuilder
//!   hedge/tests.rs        the layer in paused time (tests only)
//! handle.rs           LayerHandle: the name, config, reconfigure, revert, snapshot and
//!                     operator verbs every layer's handle has
//! keyed.rs            KeyedMap, the bounded map of the keyed layers, and DEFAULT_MAX_KEYS
//!   keyed/policy.rs       Keyed, what a keyed layer's services and handle share, over a
//!                         KeyedPolicy: the settings, the catch-up of new keys, the overflow
//!   keyed/policy/tests.rs the races of keys and operators, scripted (tests only)
//! config.rs           ConfigError and the checks builders validate with
//! time.rs             MAX_DURATION and `later`: instant arithmetic that cannot panic
//! duration_format.rs  durations written "300ms" in configuration files (feature `serde`)
//! random.rs           RandomSource and SeededRandom: injectable randomness for jitter
//! reasons.rs          ReasonCounters: counts per classification reason (feature `metrics`)
//! unwind.rs           on_unwind, PanicWatch: a panicking dependency recorded as a failure
//! wait.rs             without_waiting, may_wait: a call (a hedge) that may not queue for capacity
//! held.rs             an inner service's readiness error kept to answer the next call
//!                     (features `http`, `tonic`)
//! http.rs             HTTP glue (feature `http`): rendered rejections, the answers table,
//!                     Respond, the Guarded and Either bodies
//! grpc.rs             gRPC glue (feature `tonic`): rejections as statuses
//! telemetry.rs        core's tracing events and metrics (the deadline's, the retry policy's)
//! ```
//!
//! # Words
//!
//! Every seawall crate uses two words, each with one meaning. A **cause** is why a
//! layer itself acted: a rejection ([`OpenCause`], [`FullCause`]), a transition, a
//! level or limit change, a shadow-mode rejection, a retry or hedge not made, an
//! error rendered as a response (fields, `cause` labels and log fields). A
//! **reason** is given to a layer from outside: a classifier's
//! ([`Classify::reason`], [`REHEARSAL`]) or an operator's free text for a fleet
//! action. [`StepFailure::cause`] keeps the `std` meaning: the error behind a failure.
//!
//! # How to add
//!
//! - **A rejection kind:** its struct, its row in `rejection_kinds!` (label,
//!   category, HTTP status, gRPC code) and its arm in the recogniser behind
//!   [`find_rejection`], all in `rejection.rs`; its row in the answers table, in
//!   `http.rs` (a test asks for one row per kind). Everything listed per kind
//!   follows the row: [`RejectionKind::ALL`], its name in policy files, the
//!   fallback's triggers and rejection sets, the metrics' label values (the metrics
//!   page writes them `<rejection kind>`), the gRPC status. Then its tests (and, for
//!   a gRPC code no kind had, the lists of codes a client sees), and a line in the
//!   changelog.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod classify;
mod config;
mod criticality;
mod deadline;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod duration_format;
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub mod grpc;
mod handle;
pub mod hedge;
#[cfg(any(feature = "http", feature = "tonic"))]
mod held;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
mod keyed;
mod random;
#[cfg(feature = "metrics")]
mod reasons;
mod rejection;
mod retry;
mod telemetry;
mod time;
mod unwind;
mod wait;
mod window;

pub use classify::{
    classify_fn, grpc_code, is_rehearsal, with_reason, AdmissionAsFailure, Classify, ClassifyFn,
    ClassifyInput, ClassifyRequest, ErrorRef, ErrorsAsFailures, GrpcStatus, HttpStatus, Outcome,
    OverloadStatus, PerRequest, StatusSet, TimeoutsAsOverload, WithReason, REHEARSAL,
};
pub use config::{check_duration, check_fraction, check_positive, ConfigError};
pub use criticality::{
    Criticality, CriticalityHeader, CriticalityOf, Unclassed, UnknownCriticality,
    CRITICALITY_HEADER,
};
pub use deadline::{
    bounded, bounded_by_current, format_grpc_timeout, parse_grpc_timeout, with_current_deadline,
    Bounded, BoundedByCurrent, Deadline, DeadlineFuture, DeadlineHandle, DeadlineHeaders,
    DeadlineLayer, DeadlineService, DeadlineSnapshot, GrpcTimeout, HasExtensions, NoHeaders,
    WithDeadline, GRPC_TIMEOUT,
};
pub use handle::LayerHandle;
pub use hedge::{
    Hedge, HedgeBuilder, HedgeConfig, HedgeDelay, HedgeFuture, HedgeHandle, HedgeIf, HedgeLayer,
    HedgeSnapshot, IdempotentRequests, PercentileDelay,
};
pub use keyed::{Keyed, KeyedMap, KeyedPolicy, DEFAULT_MAX_KEYS, MAX_PROBES};
pub use random::{RandomSource, SeededRandom};
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use reasons::{ReasonCounters, MAX_REASONS};
// Whole: a new rejection kind's struct is public API without an edit here.
pub use rejection::*;
pub use retry::{
    DeadlineRetry, DeadlineRetryBuilder, HttpPushback, IdempotentFailures, IgnorePushback, Jitter,
    Pushback, ReadPushback, RetryConfig, RetryDelay, RetryHandle, RetryIf, RetrySnapshot,
    RetryableRequest, SharedBudget,
};
pub use time::{later, MAX_DURATION};
pub use unwind::{on_unwind, PanicWatch};
pub use wait::{may_wait, without_waiting};

/// Gives core's metrics (the deadline's, the retry policy's and the hedging layer's)
/// their help text and unit.
///
/// A description given before a recorder is installed is lost, so call this (or the
/// facade's `seawall::metrics::describe()`, which calls every crate's) after
/// installing the recorder.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    telemetry::describe();
    hedge::describe();
}
pub use window::{CountWindow, TimeWindow, WindowCounts, MAX_BUCKETS};
