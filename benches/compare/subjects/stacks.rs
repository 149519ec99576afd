//! The deadline alone, and seawall's layers composed as the docs recommend
//! (outermost first: fallback, deadline, bulkhead, breaker), with and without the
//! fallback and the deadline, and with a degradation layer choosing between two
//! such stacks and a fixed answer.

use std::time::Duration;

use http::Response;
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::CircuitBreakerLayer;
use seawall::core::{DeadlineLayer, HedgeLayer};
use tokio::runtime::Runtime;
use tower::layer::util::{Identity, Stack};
use tower::{Layer, ServiceBuilder};

use super::breakers::sw_breaker;
use super::bulkheads::sw_bulkhead;
use super::fallbacks::sw_fallback;
use super::inner::{self, trip};
use super::{Id, Path, Row};

/// The deadline → bulkhead → breaker stack, as a layer.
type Recommended = Stack<CircuitBreakerLayer, Stack<BulkheadLayer, Stack<DeadlineLayer, Identity>>>;

fn deadline() -> DeadlineLayer {
    DeadlineLayer::new(Duration::from_millis(300)).expect("valid budget")
}

/// The recommended stack for one dependency, without the fallback: a 300 ms
/// budget, 100 slots with a queue of 10, a count-window breaker.
fn recommended() -> Recommended {
    ServiceBuilder::new()
        .layer(deadline())
        .layer(sw_bulkhead(100, 10))
        .layer(sw_breaker())
        .into_inner()
}

pub(super) fn rows(rt: &Runtime) -> Vec<Row> {
    use seawall::degradation::{DegradationLayer, Fixed};
    vec![
        Row::new(Id::Deadline, "seawall DeadlineLayer(300 ms)", || {
            deadline().layer(inner::ok())
        }),
        // The hedging layer's cost when no hedge is sent: the inner service answers on
        // the first poll, so no timer is armed; a fixed delay, and a percentile delay
        // (which records each first attempt's latency).
        Row::new(Id::SwHedge, "seawall HedgeLayer (fixed 20 ms), no hedge sent", || {
            HedgeLayer::builder("bench")
                .fixed_delay(Duration::from_millis(20))
                .build()
                .expect("valid hedging")
                .layer(inner::ok())
        }),
        Row::new(Id::SwHedge, "seawall HedgeLayer (p95 delay), no hedge sent", || {
            HedgeLayer::builder("bench")
                .percentile_delay(95.0)
                .build()
                .expect("valid hedging")
                .layer(inner::ok())
        }),
        // The fault layer as a build carries it between rehearsals: nothing injected,
        // so a call reads one atomic flag and passes.
        Row::new(Id::SwFault, "seawall FaultLayer, nothing injected", || {
            seawall::fault::FaultLayer::new("bench", Default::default())
                .expect("no injection")
                .layer(inner::ok())
        }),
        Row::new(
            Id::SwStack,
            "seawall recommended stack: deadline → bulkhead → breaker",
            || recommended().layer(inner::ok()),
        )
        .open(rt, recommended().layer(inner::counted_failing()),
        ),
        // Not recommended configurations: pairs of the stack's layers, which show
        // what each layer adds in company that it does not add alone.
        Row::new(
            Id::SwDeadlineBreaker,
            "seawall deadline → breaker",
            || {
                ServiceBuilder::new()
                    .layer(deadline())
                    .layer(sw_breaker())
                    .service(inner::ok())
            },
        ),
        Row::new(
            Id::SwDeadlineBulkhead,
            "seawall deadline → bulkhead",
            || {
                ServiceBuilder::new()
                    .layer(deadline())
                    .layer(sw_bulkhead(100, 10))
                    .service(inner::ok())
            },
        ),
        Row::new(
            Id::SwBulkheadBreaker,
            "seawall bulkhead → breaker",
            || {
                ServiceBuilder::new()
                    .layer(sw_bulkhead(100, 10))
                    .layer(sw_breaker())
                    .service(inner::ok())
            },
        ),
        Row::new(
            Id::SwStackFallback,
            "seawall stack with its fallback: fallback → deadline → bulkhead → breaker",
            || {
                ServiceBuilder::new()
                    .layer(sw_fallback!())
                    .layer(recommended())
                    .service(inner::ok())
            },
        )
        .second(
            Path::OpenServed,
            Some(true),
            trip(
                rt,
                ServiceBuilder::new()
                    .layer(sw_fallback!())
                    .layer(recommended())
                    .service(inner::counted_failing()),
            ),
        ),
        Row::new(
            Id::SwStackDegradation,
            "seawall stack with degradation: fallback → degradation → (deadline → bulkhead → breaker) per level",
            || {
                let degradation = DegradationLayer::builder("bench")
                    .level("reduced", recommended().layer(inner::ok()))
                    .level("message", Fixed::new(Response::new(())))
                    .build()
                    .expect("valid config");
                ServiceBuilder::new()
                    .layer(sw_fallback!())
                    .layer(degradation)
                    .layer(recommended())
                    .service(inner::ok())
            },
        ),
    ]
}
