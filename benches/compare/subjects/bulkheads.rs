//! Bulkheads and concurrency limits: seawall's, tower's `ConcurrencyLimit` (with
//! `LoadShed` to reject instead of waiting) and tower-resilience's. The admitted
//! path has 100 slots; the full path has one, taken by a call that never ends.

use tower::{Layer, ServiceBuilder};

use super::inner;
use super::{Id, Row};

/// seawall's bulkhead with `max_concurrent` slots and a queue of `max_queue`.
pub(super) fn sw_bulkhead(
    max_concurrent: usize,
    max_queue: usize,
) -> seawall::bulkhead::BulkheadLayer {
    seawall::bulkhead::BulkheadLayer::builder("bench")
        .max_concurrent(max_concurrent)
        .max_queue(max_queue)
        .build()
        .expect("valid config")
}

/// seawall's bulkhead with an AIMD limit that starts (and stays, under this load)
/// at 100, timing one call in eight (the default), learning from HTTP statuses as
/// an HTTP client's bulkhead does.
fn sw_adaptive_bulkhead() -> seawall::bulkhead::BulkheadLayer<
    seawall::bulkhead::UntilResponse,
    seawall::bulkhead::OverloadStatus,
> {
    seawall::bulkhead::BulkheadLayer::builder("bench")
        .max_queue(10)
        .adaptive(seawall::bulkhead::adaptive::AimdConfig {
            initial_limit: 100,
            min_limit: 100,
            max_limit: 100,
            ..Default::default()
        })
        .build()
        .expect("valid config")
        .overload(seawall::bulkhead::OverloadStatus::default())
}

pub(super) fn seawall() -> Vec<Row> {
    vec![
        Row::new(
            Id::SwBulkhead,
            "seawall bulkhead (100 active, queue 10)",
            || sw_bulkhead(100, 10).layer(inner::ok()),
        )
        .full(sw_bulkhead(1, 0).layer(inner::pending())),
        Row::new(
            Id::SwBulkheadClasses,
            "seawall bulkhead with classes (100 active, queue 10, every call critical)",
            || {
                sw_bulkhead(100, 10)
                    .criticality(|_: &crate::harness::Req| seawall::core::Criticality::Critical)
                    .layer(inner::ok())
            },
        ),
        Row::new(
            Id::SwBulkheadAdaptive,
            "seawall bulkhead, adaptive (AIMD at 100, 1 call in 8 timed)",
            || sw_adaptive_bulkhead().layer(inner::ok()),
        ),
    ]
}

fn tr_bulkhead(max: usize) -> tower_resilience::bulkhead::BulkheadLayer {
    tower_resilience::bulkhead::BulkheadLayer::builder()
        .max_concurrent_calls(max)
        .reject_when_full()
        .build()
        .expect("valid config")
}

pub(super) fn peers() -> Vec<Row> {
    vec![
        Row::new(Id::TowerLimit, "tower ConcurrencyLimit(100)", || {
            ServiceBuilder::new()
                .concurrency_limit(100)
                .service(inner::ok())
        }),
        Row::new(
            Id::TowerShed,
            "tower LoadShed + ConcurrencyLimit(100)",
            || {
                ServiceBuilder::new()
                    .load_shed()
                    .concurrency_limit(100)
                    .service(inner::ok())
            },
        )
        .full(
            ServiceBuilder::new()
                .load_shed()
                .concurrency_limit(1)
                .service(inner::pending()),
        ),
        Row::new(
            Id::TrBulkhead,
            "tower-resilience 0.13 Bulkhead(100), reject when full",
            || tr_bulkhead(100).layer(inner::ok()),
        )
        .full(tr_bulkhead(1).layer(inner::pending())),
    ]
}
