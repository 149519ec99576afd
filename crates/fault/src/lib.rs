//! Fault injection for rehearsing a dependency's failures in your own service, part
//! of [seawall](https://docs.rs/seawall): a [`FaultLayer`] in front of a dependency's
//! client adds latency, answers an error status, fails like a refused or reset
//! connection, hangs until the caller's deadline, or slows or cuts short a response
//! body, for a share of the calls, only while an injection is in force.
//!
//! # Why it cannot be forgotten
//!
//! The usual failure of chaos tooling in practice is the injection left on after
//! the game day. Here:
//! - **Nothing is injected unless configured**, and the facade compiles this crate
//!   only with its `fault` feature, off by default.
//! - **Every injection has an expiry**, mandatory, at most [`MAX_INJECTION`] (a day)
//!   ahead; it is compared on every call and the injection ends by itself. In a
//!   policy file the expiry is an absolute time (RFC 3339), and a file whose expiry
//!   is past is refused, so restarting or reloading after the rehearsal never starts
//!   it again.
//! - **Every injected fault is marked**: an injected error is an [`Injected`]
//!   (find it in a chain with [`Injected::find`]), an HTTP response a fault touched
//!   carries [`InjectedFault`] in its extensions, the metrics carry
//!   `rehearsal="true"` and the events `rehearsal = true`. The [`rehearsal`]
//!   classifier wrapper gives such an outcome the reason `rehearsal`, so a breaker's
//!   outcome counters say which failures were injected, and a breaker transition or
//!   a degradation level change that an injected outcome completed says
//!   `rehearsal: true` (on the event subscribers receive, in its log line, on the
//!   dashboard).
//!
//! Injections run per instance. Injecting across a fleet is left for when the
//! fleet has signed, expiring operator actions to carry them.
//!
//! **Why a crate of its own**, not a module of `seawall-core`: a service compiles it
//! only by asking for it (the facade's `fault` feature), so a production build
//! without it has no code that could inject anything; and no policy crate depends
//! on it, so the layers that are always there stay as they were.
//!
//! **What a layer can and cannot see.** A layer reads the mark through its
//! classifier, so wrap the classifier of each layer the rehearsal exercises in
//! [`rehearsal`] (`b.classifier(rehearsal(HttpStatus::default()))`); the wrapper
//! changes no outcome. A transition is a rehearsal's when the *outcome that completed
//! it* was injected: two injected failures and a real third that trips the breaker
//! are an incident. What the layers judge on their own clock carries no mark: a call
//! that injected latency or an injected hang kept past the request's deadline is the
//! breaker's own timeout, since the fault's answer never came; a transition made by
//! time (open to half-open) or by an operator is never a rehearsal's. While an
//! injection is in force the dashboard stripes the whole policy's card anyway.
//!
//! # Where it goes
//!
//! Innermost, in front of the client, inside the protections it exercises:
//!
//! ```text
//! Fallback → Deadline → Bulkhead → CircuitBreaker → FaultLayer → client
//! ```
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use seawall_core::BoxError;
//! use seawall_fault::{Fault, FaultConfig, FaultLayer, InjectionConfig, Injected};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let faults = FaultLayer::builder("freight").seed(7).build()?;
//! let handle = faults.handle();
//! let client = ServiceBuilder::new()
//!     .layer(faults)
//!     .service(service_fn(|_destination: String| async { Ok::<_, BoxError>(1250_u64) }));
//!
//! // Nothing injected: the call passes.
//! assert_eq!(client.clone().oneshot("PT-1000".into()).await?, 1250);
//!
//! // Every call refused, for ten minutes at most.
//! let id = handle.inject(InjectionConfig::lasting(&Fault::Refused, Duration::from_secs(600)))?;
//! let err = client.clone().oneshot("PT-1000".into()).await.unwrap_err();
//! assert!(Injected::find(&*err).is_some());
//!
//! // Stopped early: back to normal.
//! assert!(handle.stop(id));
//! assert_eq!(client.oneshot("PT-1000".into()).await?, 1250);
//! # Ok(())
//! # }
//! ```
//!
//! # An injection's life
//!
//! ```text
//!   inject / policy file ──► in force ──(until passes)──► ended ("expired")
//!                              │  ▲
//!                  stop / ─────┘  └─ each call: matches route and key?
//!            new document                  draw < percent? → the fault
//! ```
//!
//! # Layout
//!
//! ```text
//! lib.rs          these docs, the re-exports
//! fault.rs        Fault and FaultKind: what can be injected
//! config.rs       FaultConfig and InjectionConfig: validated plain data, RFC 3339 expiry
//! machine.rs      the injections in force and the decision for one call, `now` and
//!                 the draws passed in
//! handle.rs       the shared state and its Handle: inject, stop, snapshot, LayerHandle
//! layer.rs        FaultLayer and its builder
//! requests.rs     Requests and Responses: matching a call, marking its answer; the
//!                 kind for any request type
//! service.rs      FaultService: one atomic load when nothing is injected
//! future.rs       FaultFuture: pass, hold back, answer, fail or hang
//! http.rs         HTTP requests, injected answers, FaultBody (feature `http`)
//! error.rs        Injected and InjectedFault: the marks of a rehearsal
//! rehearsal.rs    the classifier wrapper that gives injected outcomes a reason
//! telemetry.rs    metrics and events, all marked as rehearsal
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod config;
mod error;
mod fault;
mod future;
mod handle;
#[cfg(feature = "http")]
mod http;
mod layer;
mod machine;
mod rehearsal;
mod requests;
mod service;
mod telemetry;

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::rfc3339;
pub use config::{FaultConfig, InjectionConfig, MAX_INJECTION, MAX_INJECTIONS};
pub use error::{is_injected, Injected, InjectedFault};
pub use fault::{Fault, FaultKind, DEFAULT_HANG_BOUND};
pub use future::FaultFuture;
pub use handle::{Handle, InjectionSnapshot, Snapshot};
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use http::{FaultBody, HttpRequests};
pub use layer::{FaultBuilder, FaultLayer};
pub use machine::Origin;
pub use rehearsal::{rehearsal, MaybeMarked, Rehearsal, REHEARSAL};
pub use requests::{AnyRequest, KeyOf, NoKey, Requests, Responses};
pub use service::FaultService;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use telemetry::describe as describe_metrics;
