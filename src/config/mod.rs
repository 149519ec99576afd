//! Policies from a file (feature `serde`): named policies in a TOML document,
//! which route or dependency uses which, validated with the path of every field at
//! fault, and applied at run time without losing state.
//!
//! # The document
//!
//! ```toml
//! # One policy per dependency: its name labels the layers' rejections, metrics and logs.
//! [policies.freight]
//! deadline = "300ms"                # the segment's budget, admission included
//!
//! [policies.freight.bulkhead]       # seawall::bulkhead::BulkheadConfig
//! max_concurrent = 8                # per instance: 3 instances allow 24
//! queue = { max_queue = 10, max_wait = "20ms" }   # seawall::bulkhead::QueuePolicy
//!
//! [policies.freight.breaker]        # seawall::circuit_breaker::CircuitBreakerConfig
//! policy = { kind = "count_window", size = 10, min_calls = 10, failure_rate = 0.5 }
//! open_for = "10s"
//!
//! [policies.freight.fallback]       # seawall::fallback::FallbackConfig
//! on_rejections = ["circuit_open", "bulkhead_full", "bulkhead_timeout", "deadline_exceeded"]
//!
//! [policies.assistant.degradation]  # seawall::degradation::DegradationConfig
//! failures_to_degrade = 5
//! min_dwell = "60s"
//!
//! [[policies.freight.fault.injections]]  # feature `fault`: a rehearsal (seawall::fault)
//! kind = "latency"                  # added latency, an error status, a refused connection, …
//! delay = "800ms"
//! percent = 50                      # of the calls
//! until = "2026-12-07T20:00:00Z"    # RFC 3339, UTC, mandatory: ends by itself; a file
//!                                   # whose `until` is past (or over a day ahead) is refused
//!
//! [policies.search.bulkhead]        # a limit found at run time instead of max_concurrent
//! adaptive = { algorithm = "gradient", min_limit = 4, max_limit = 200 }
//!
//! [routes]                          # server routes and the policy each uses
//! "/quote" = "freight"
//! "/assistant" = "assistant"
//!
//! [dependencies]                    # clients and the policy each uses
//! freight-supplier = "freight"
//!
//! [fleet]                           # feature `fleet`: seawall::config::FleetSection
//! store = "redis://redis.internal:6379/"   # or "local"
//! prefix = "shop-v2"
//! trip_together = { instances = 3, within = "30s" }
//!
//! [fleet.caps.freight]              # freight's bulkhead capped at 8 across the fleet
//! cap = 8
//! ```
//!
//! Each section is the crate's own configuration type ([`PolicyConfig`] lists
//! them); fields left out take the crate's defaults, unknown fields are errors,
//! durations are written `"300ms"`, `"10s"`, `"2m"`. Every interval is measured on
//! the monotonic clock, never the wall clock (a clock step changes nothing). A route or
//! dependency not listed is untouched.
//!
//! # Errors name the field
//!
//! [`Policies::load`] reads, parses and validates everything before anything is
//! built, and reports the file and the field at fault by its path in the
//! document ([`LoadError::fields`]):
//!
//! ```text
//! policies.toml:7:12: `policies.freight.bulkhead.queue.max_wait`: `20` has no unit (use ns, us, ms, s, m or h)
//! policies.toml: invalid `policies.freight.breaker.policy.failure_rate`: must be between 0.0 and 1.0, got 1.5; invalid `routes."/quote"`: names the policy `fraight`, which [policies] does not declare
//! ```
//!
//! # Code gives the shape, the document the numbers
//!
//! ```
//! use seawall::circuit_breaker::{Forced, State};
//! use seawall::config::Policies;
//! use seawall::core::{BoxError, HttpStatus};
//! use seawall::ServiceBuilderExt;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let policies = Policies::from_toml(r#"
//!     [policies.freight]
//!     deadline = "300ms"
//!     bulkhead = { max_concurrent = 8, queue = { max_queue = 10, max_wait = "20ms" } }
//!     breaker = { open_for = "10s" }
//!     [routes]
//!     "/quote" = "freight"
//! "#)?;
//! let name = policies.policy_for_route("/quote").unwrap();
//! let stack = ServiceBuilder::new()
//!     .deadline(policies.deadline(&name)?)
//!     .bulkhead(policies.bulkhead(&name)?)
//!     .circuit_breaker(policies.circuit_breaker(&name, |b| b.classifier(HttpStatus::default()))?);
//! let svc = stack.service(service_fn(|_req: http::Request<()>| async {
//!     Ok::<_, BoxError>(http::Response::new("12.50 EUR"))
//! }));
//! svc.oneshot(http::Request::new(())).await?;
//!
//! // An operator opens the breaker, then a changed document arrives: the breaker
//! // stays open, with the new interval for its next trip.
//! let breaker = policies.handles(&name).and_then(|h| h.breaker).unwrap();
//! breaker.force(Forced::Open);
//! policies.apply_toml(r#"
//!     [policies.freight]
//!     deadline = "300ms"
//!     bulkhead = { max_concurrent = 4, queue = { max_queue = 10, max_wait = "20ms" } }
//!     breaker = { open_for = "30s" }
//!     [routes]
//!     "/quote" = "freight"
//! "#)?;
//! assert_eq!(breaker.state(), State::ForcedOpen);
//! assert_eq!(policies.handles(&name).and_then(|h| h.bulkhead).unwrap().snapshot().max_concurrent, 4);
//!
//! // Back to the document the service started with.
//! policies.revert();
//! assert!(policies.snapshot().as_started);
//! # Ok(())
//! # }
//! ```
//!
//! # Changing it at run time
//!
//! [`Policies::apply`] / [`Policies::reload`] hand each changed section to its
//! layer's handle, which keeps its state; [`Policies::revert`] returns to the
//! start-up document. **What cannot change at run time** (the document is then
//! refused as a whole with [`LoadError::NeedsRestart`], naming each field):
//!
//! - adding or removing a policy, or a section of a policy (the stacks are types
//!   built at start);
//! - a `deadline` (a [`DeadlineLayer`](seawall_core::DeadlineLayer) holds its
//!   budget by value);
//! - `routes` and `dependencies` (wired into the router and clients at start);
//! - `[fleet]` (the coordinators hold their store);
//! - what is code: classifiers, degradation levels, fallback strategies and steps.
//!
//! What counts as overload for an adaptive bulkhead is code too: build it with
//! `policies.bulkhead(name)?.overload(OverloadStatus::default())` for HTTP and
//! gRPC (see [`BulkheadLayer::overload`](crate::bulkhead::BulkheadLayer::overload)).
//!
//! Everything else changes live: bulkhead limits (a changed `adaptive` section
//! starts its algorithm again from the limit in force), breaker thresholds, windows and
//! intervals (a different window *shape* starts an empty window; the state stays),
//! degradation triggers and probe settings, fallback triggers, step timeouts and
//! `enabled`, a policy's `fault` injections (feature `fault`: they replace those of
//! the previous document; an operator's stay until they end), and **shadow mode**: `shadow = true` in a `bulkhead`, `breaker` or
//! `degradation` section, `deadline_shadow = true` beside a `deadline`. A layer in
//! shadow mode decides as it would but lets through what it would reject, counting
//! it (see `docs/operations.md`, "Trying a new limit in shadow mode").

/// The one list of the layers a policy configures, each behind its crate's feature,
/// in the order of their fields: its field (the key of its table in a policy, of its
/// handle in [`PolicyHandles`], of its snapshot in [`PolicySnapshot`]), feature,
/// [`Section`], the facade module of its crate, configuration type, and the docs of
/// its three fields. `policy_layers!(then)` hands the list to the macro `then`, which
/// writes what each layer needs: the fields (`document.rs`, `policies.rs`), the
/// module with its constructors (`<field>.rs`, declared below) and its place
/// (`layers.rs`). A new kind of layer is a row here and its module.
macro_rules! policy_layers {
    ($then:ident) => {
        $then! {
            bulkhead {
                feature: "bulkhead", section: Bulkhead, module: bulkhead, config: BulkheadConfig,
                config_doc: "The bulkhead's limits.",
                handle_doc: "The bulkhead's handle.",
                snapshot_doc: "The bulkhead's counts and limits.",
            }
            breaker {
                feature: "circuit-breaker", section: Breaker, module: circuit_breaker, config: CircuitBreakerConfig,
                config_doc: "The circuit breaker's policy.",
                handle_doc: "The breaker's handle (`force`, `release`, `reset`, …).",
                snapshot_doc: "The breaker's state and counters.",
            }
            degradation {
                feature: "degradation", section: Degradation, module: degradation, config: DegradationConfig,
                config_doc: "The degradation machine's policy (the levels themselves are code).",
                handle_doc: "The degradation layer's handle (`set_floor`, `force`, `release`, …).",
                snapshot_doc: "The degradation level and probe progress.",
            }
            fallback {
                feature: "fallback", section: Fallback, module: fallback, config: FallbackConfig,
                config_doc: "What fires the fallback and its steps' timeouts (the strategies are code).",
                handle_doc: "The fallback's handle (`force`, `disable`, …).",
                snapshot_doc: "The fallback's counters and controls.",
            }
            fault {
                feature: "fault", section: Fault, module: fault, config: FaultConfig,
                config_doc: "Faults injected for a rehearsal, each ending by itself at its `until` (`[[policies.<name>.fault.injections]]`; an empty table lets the admin routes inject).",
                handle_doc: "The fault layer's handle (`inject`, `stop`, …).",
                snapshot_doc: "What the fault layer injects: each injection, where, until when.",
            }
        }
    };
}

/// Declares the modules of the features' parts: each layer's constructors
/// (`<field>.rs`) and the `[fleet]` table's (`fleet.rs`).
macro_rules! feature_modules {
    ($($module:ident { feature: $feature:literal, $($_rest:tt)* })*) => {
        feature_modules!(@ $($module $feature)* fleet "fleet");
    };
    (@ $($module:ident $feature:literal)*) => {$(
        #[cfg(feature = $feature)]
        mod $module;
    )*};
}

mod document;
mod error;
for_the_policy_layers! {
    // With every policy crate left out, there is no layer to place.
    mod layers;
}
mod locate;
mod policies;
policy_layers!(feature_modules);

pub use document::{Hold, PolicyConfig, PolicyDocument, Section};
pub use error::LoadError;
#[cfg(feature = "fleet")]
pub use fleet::{
    CapModeSection, CapSection, FleetSection, FleetStatus, PolicyFleetSnapshot, TripTogetherSection,
};
pub use policies::{Policies, PoliciesSnapshot, PolicyHandles, PolicySnapshot};
