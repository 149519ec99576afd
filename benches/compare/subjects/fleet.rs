//! seawall's breaker coordinated by a fleet: the same breaker as the plain row,
//! with a `Fleet` over a `LocalStore` driving it through its probe gate. The
//! closed path must not touch the store: [`store_ops_on_the_closed_path`] counts
//! the store's operations around a run of calls.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use seawall::fleet::{Coordinated, Fleet, LocalStore};
use tokio::runtime::Runtime;
use tower::{Layer, Service, ServiceExt};

use super::breakers::sw_breaker;
use super::inner;
use super::{Id, Row};

/// The coordinations of every instance built, kept for the whole run: dropping
/// one would hand its breaker back to itself.
static COORDINATIONS: Mutex<Vec<Coordinated>> = Mutex::new(Vec::new());

/// A breaker like the plain row's, and its coordination through `store` (on the
/// current runtime, which runs its background task).
fn coordinate(store: &LocalStore) -> (seawall::circuit_breaker::CircuitBreakerLayer, Coordinated) {
    let layer = sw_breaker();
    let fleet = Fleet::builder(store.clone())
        .prefix("bench")
        .build()
        .expect("valid fleet");
    let coordination = fleet.coordinate(&layer.handle()).expect("coordinated");
    (layer, coordination)
}

/// [`coordinate`], the coordination kept for the whole run.
fn coordinated_breaker(store: &LocalStore) -> seawall::circuit_breaker::CircuitBreakerLayer {
    let (layer, coordination) = coordinate(store);
    COORDINATIONS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(coordination);
    layer
}

pub(super) fn rows(rt: &Runtime) -> Vec<Row> {
    let store = LocalStore::new();
    let open_store = LocalStore::new();
    vec![Row::new(
        Id::SwBreakerFleet,
        "seawall breaker (count window 100), coordinated by a fleet (LocalStore)",
        move || coordinated_breaker(&store).layer(inner::ok()),
    )
    .open(
        rt,
        coordinated_breaker(&open_store).layer(inner::counted_failing()),
    )]
}

/// What [`store_ops_on_the_closed_path`] counted.
pub(crate) struct StoreOps {
    /// Closed-path calls made.
    pub(crate) calls: u64,
    /// Operations the coordinator made to join (subscribe, read), before the calls.
    pub(crate) to_join: u64,
    /// Operations while the calls ran.
    pub(crate) during_calls: u64,
}

/// Builds one coordinated breaker, lets its coordinator join the store, then
/// makes `calls` awaited closed-path calls and counts the store's operations
/// meanwhile (the store counts every operation it is asked for).
pub(crate) fn store_ops_on_the_closed_path(rt: &Runtime, calls: u64) -> StoreOps {
    let store = LocalStore::new();
    let (layer, coordination) = coordinate(&store);
    let handle = layer.handle();
    let mut svc = layer.layer(inner::ok());
    rt.block_on(async {
        // The coordinator's task joins on this runtime.
        for _ in 0..1000 {
            if coordination.snapshot().connected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    assert!(coordination.snapshot().connected, "the coordinator joined");
    let to_join = store.ops();
    rt.block_on(async {
        for _ in 0..calls {
            let ready = svc.ready().await.expect("ready");
            let _ = ready.call(http::Request::new(())).await;
        }
    });
    assert_eq!(
        handle.state(),
        seawall::circuit_breaker::State::Closed,
        "the closed path stayed closed"
    );
    let during_calls = store.ops() - to_join;
    assert_eq!(coordination.snapshot().store_ops, store.ops());
    StoreOps {
        calls,
        to_join,
        during_calls,
    }
}
