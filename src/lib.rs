//! seawall: Tower middleware that keeps a service useful while its dependencies fail.
//!
//! Four policies, each a `Layer` + `Service` pair that composes in any Tower stack
//! (per-route on an axum router, around a hyper-util client or a tonic `Channel`),
//! all speaking one vocabulary of rejections and failure classification from
//! [`core`]:
//!
//! | module | feature | what it does |
//! |---|---|---|
//! | [`circuit_breaker`] | `circuit-breaker` | fails fast while a dependency is sick, probes its recovery |
//! | [`bulkhead`] | `bulkhead` | caps concurrent calls and a bounded, timed queue per dependency |
//! | [`degradation`] | `degradation` | steps down through service levels fast, climbs back slowly |
//! | [`fallback`] | `fallback` | declared alternatives and honest "unavailable" answers |
//! | [`fleet`] | `fleet` | one probe per open interval across a fleet's breakers, verdicts shared through a store |
//! | [`fault`] | `fault` (off by default, not in `default`) | injected faults in front of a dependency's client, each with a mandatory expiry, to rehearse its failures |
//!
//! The recommended stack for one dependency, outermost first:
//!
//! ```text
//! FallbackLayer         a declared alternative when everything below fails; never invents data
//! DeadlineLayer(300ms)  the budget of the dependency segment, admission included
//! (DeadlineRetry)       optional, the one layer that retries: within the same budget
//! BulkheadLayer         caps active calls and the queue; never waits past the remaining budget
//! CircuitBreakerLayer   fails fast while the dependency is sick; overruns count as failures
//! client (hyper-util / tonic Channel)
//! ```
//!
//! [`ServiceBuilderExt`] adds them to a `tower::ServiceBuilder` in that order
//! (`.fallback(..).deadline(..).deadline_retry(..).bulkhead(..).circuit_breaker(..)`).
//! Retries are off unless added: where a fast transient failure deserves another
//! try, [`DeadlineRetry`](seawall_core::DeadlineRetry) retries inside the deadline
//! (attempts share the budget) and outside the breaker (an open breaker ends them at
//! once), with jittered backoff and a retry budget.
//!
//! # For services
//!
//! | module | feature | what it gives |
//! |---|---|---|
//! | [`axum`] | `axum` | errors answered as responses (`503` + `Retry-After`), the per-route pattern with `route_layer` |
//! | [`config`] | `serde` | named policies from a TOML file, validated with the path of the field at fault; applied at run time without losing state, and reverted |
//! | [`admin`] | `admin` | an axum router: snapshots as JSON for anyone, changes only with a bearer token |
//!
//! With the `metrics` feature every layer exports counters, gauges and histograms
//! through the `metrics` facade, named `seawall_<layer>_<what>` with a `name`
//! label (the layer's name, i.e. the policy's); call [`metrics::describe`] after
//! installing the recorder, so every series has its help text. `docs/metrics.md`
//! lists them all in one table with the identities the counters satisfy, and
//! `docs/operations.md` says which signals justify an intervention and how to tune.
//! The `axum_routes` example puts it all together.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use seawall::core::{find_rejection, BoxError, DeadlineLayer, RejectionKind};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let slow_supplier = service_fn(|_req: http::Request<()>| async {
//!     tokio::time::sleep(Duration::from_secs(5)).await;
//!     Ok::<_, BoxError>("quote")
//! });
//! let stack = ServiceBuilder::new()
//!     .layer(DeadlineLayer::new(Duration::from_millis(300)).unwrap())
//!     .service(slow_supplier);
//! let err = stack.oneshot(http::Request::new(())).await.unwrap_err();
//! assert_eq!(find_rejection(&*err).unwrap().kind(), RejectionKind::DeadlineExceeded);
//! # }
//! ```
//!
//! # Layout
//!
//! ```text
//! lib.rs                  these docs, the re-exports of each policy crate behind its feature
//! builder.rs              ServiceBuilderExt: the layers as ServiceBuilder methods
//! axum.rs                 axum glue (feature `axum`)
//! config/mod.rs           Policies from a file (feature `serde`): the format, the re-exports
//!   config/document.rs        PolicyDocument and PolicyConfig: plain data, parsed and validated
//!   config/locate.rs          the dotted path of the TOML field an error points into
//!   config/error.rs           LoadError: why a document was not loaded or applied
//!   config/layers.rs          where each kind of layer lives in a policy, for one generic loop
//!   config/policies.rs        Policies: the layers built from a document, their handles,
//!                             apply, reload and revert
//!   config/bulkhead.rs        each layer's constructors (`Policies::bulkhead`, …), behind
//!   config/breaker.rs         its feature; the one list of layers (`policy_layers!`, in
//!   config/degradation.rs     config/mod.rs) declares them and writes each layer's fields
//!   config/fallback.rs        and place
//!   config/fault.rs           (feature `fault`: `Policies::fault`)
//!   config/fleet.rs           the `[fleet]` table (feature `fleet`)
//!   config/fleet/status.rs    the coordinations and caps registered, as snapshots show them
//! admin.rs                the admin router (feature `admin`): snapshots, token-gated changes
//!   admin/bulkhead.rs         the bulkhead's force and release actions
//!   admin/fault.rs            the fault injection's inject and stop actions (feature `fault`)
//!   admin/fleet_actions.rs    the fleet's view and fleet-wide breaker actions (feature `fleet`)
//!   admin/dashboard.rs        the incident dashboard and its event stream; its page, script
//!                             and style in admin/dashboard/
//! health_link.rs          link_health_check: a health monitor's check as evidence for a
//!                         coordinated breaker's stuck-open flag (features `fleet`, `degradation`)
//! metrics.rs              describe(): the metrics' help text, once the recorder is installed
//! telemetry.rs            the facade's tracing events
//! ```
//!
//! As the root package, the facade also holds the workspace's `examples/`, `tests/`
//! (cross-crate integration tests over loopback) and `benches/`.
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Items that serve only the policy layers, allowed to go unused when every policy
/// crate is left out (`--no-default-features` with none of their features): the one
/// list of those features for such items.
#[allow(unused_macros)]
macro_rules! for_the_policy_layers {
    ($($item:item)*) => {$(
        #[cfg_attr(
            not(any(
                feature = "bulkhead",
                feature = "circuit-breaker",
                feature = "degradation",
                feature = "fallback"
            )),
            allow(dead_code)
        )]
        $item
    )*};
}

mod builder;
mod telemetry;

#[cfg(feature = "admin")]
#[cfg_attr(docsrs, doc(cfg(feature = "admin")))]
pub mod admin;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod config;
#[cfg(all(feature = "fleet", feature = "degradation"))]
mod health_link;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;

#[cfg(all(feature = "fleet", feature = "degradation"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "fleet", feature = "degradation"))))]
pub use health_link::link_health_check;

#[cfg(feature = "circuit-breaker")]
pub use builder::CircuitBreakerLayers;
#[cfg(feature = "degradation")]
pub use builder::DegradationLayers;
pub use builder::ServiceBuilderExt;

pub use seawall_core as core;

#[cfg(feature = "circuit-breaker")]
#[cfg_attr(docsrs, doc(cfg(feature = "circuit-breaker")))]
pub use seawall_circuit_breaker as circuit_breaker;

#[cfg(feature = "bulkhead")]
#[cfg_attr(docsrs, doc(cfg(feature = "bulkhead")))]
pub use seawall_bulkhead as bulkhead;

#[cfg(feature = "degradation")]
#[cfg_attr(docsrs, doc(cfg(feature = "degradation")))]
pub use seawall_degradation as degradation;

#[cfg(feature = "fallback")]
#[cfg_attr(docsrs, doc(cfg(feature = "fallback")))]
pub use seawall_fallback as fallback;

#[cfg(feature = "fleet")]
#[cfg_attr(docsrs, doc(cfg(feature = "fleet")))]
pub use seawall_fleet as fleet;

#[cfg(feature = "fault")]
#[cfg_attr(docsrs, doc(cfg(feature = "fault")))]
pub use seawall_fault as fault;

pub use seawall_core::{
    find_rejection, BoxError, Category, Classify, ConfigError, Deadline, DeadlineLayer,
    ErrorsAsFailures, GrpcStatus, HttpStatus, LayerHandle, Outcome, Rejection, RejectionKind,
};
