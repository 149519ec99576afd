//! seawall's bulkhead capped across a fleet: the same bulkhead as the plain row,
//! its limit lowered to an allotment leased from a `LocalStore` by the cap's
//! renewal task. Measured only once the store granted an allotment; the
//! admitted path must not touch the store: [`store_ops_on_the_admitted_path`]
//! counts the store's operations around a run of calls and sets the renewal
//! task's own count against them.

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use seawall::bulkhead::BulkheadLayer;
use seawall::fleet::{CapConfig, CapMode, Capped, Fleet, LocalStore};
use tokio::runtime::Runtime;
use tower::{Layer, Service, ServiceExt};

use super::bulkheads::sw_bulkhead;
use super::inner;
use super::{Id, Row};

/// The plain row's limit, and the fleet's cap.
const LIMIT: u32 = 100;

/// The longest wait for the store's first allotment (it hands one out a TTL
/// after the first claim).
const GRANT_WAIT: Duration = Duration::from_secs(60);

/// The caps of every bulkhead built, kept for the whole run: dropping one stops
/// its renewals.
static CAPS: Mutex<Vec<Capped>> = Mutex::new(Vec::new());

/// Renewals every 100 ms, claims living 1 s. `available` with the whole cap as
/// the local share: a runtime left idle between measurements lets the lease lapse,
/// and a strict cap would then refuse the measured calls; the admitted path's
/// work is the same under a lease or a local share (a limit to compare with).
fn config() -> CapConfig {
    CapConfig::new(LIMIT)
        .renew_every(Duration::from_millis(100))
        .ttl(Duration::from_secs(1))
        .mode(CapMode::Available { local_share: LIMIT })
}

/// A runtime of its own, on a worker thread, for the measured row's renewal task.
/// On the harness's runtime the task would run only while that runtime is
/// driven: hand-driven rounds poll futures without it, and a round longer than
/// the claims' TTL let the lease lapse; the store then took the bulkhead for a
/// newcomer, whose allotment is 0 for a TTL, and refused the measured calls.
fn renewals() -> &'static Runtime {
    static RENEWALS: OnceLock<Runtime> = OnceLock::new();
    RENEWALS.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fleet-cap-renewals")
            .enable_all()
            .build()
            .expect("a runtime for the renewals")
    })
}

/// A bulkhead like the plain row's, capped through `store` with its renewal task
/// on `renew_on`, returned once the store granted it an allotment (calls made
/// on `rt` meanwhile are the demand its claims carry).
fn capped_bulkhead(
    rt: &Runtime,
    renew_on: &Runtime,
    store: &LocalStore,
) -> (BulkheadLayer, Capped) {
    let layer = sw_bulkhead(LIMIT as usize, 10);
    let fleet = Fleet::builder(store.clone())
        .prefix("bench")
        .build()
        .expect("valid fleet");
    let capped = {
        let _entered = renew_on.enter();
        fleet.cap(&layer.handle(), config()).expect("capped")
    };
    let mut svc = layer.clone().layer(inner::ok());
    rt.block_on(async {
        let give_up = tokio::time::Instant::now() + GRANT_WAIT;
        // Calls refused while the allotment is 0 are the demand the claims carry.
        while capped.snapshot().allotment == 0 || capped.snapshot().lease_remaining.is_none() {
            assert!(
                tokio::time::Instant::now() < give_up,
                "no allotment from the store within {GRANT_WAIT:?}"
            );
            for _ in 0..LIMIT {
                let ready = svc.ready().await.expect("ready");
                let _refused = ready.call(http::Request::new(())).await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    (layer, capped)
}

pub(super) fn rows(rt: &Runtime) -> Vec<Row> {
    let (layer, capped) = capped_bulkhead(rt, renewals(), &LocalStore::new());
    CAPS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(capped);
    vec![Row::new(
        Id::SwBulkheadFleet,
        "seawall bulkhead (100 active, queue 10), capped at 100 across a fleet (LocalStore)",
        // One capped bulkhead for every instance the harness asks for: a fresh
        // one would wait a TTL for its allotment.
        move || layer.clone().layer(inner::ok()),
    )]
}

/// What [`store_ops_on_the_admitted_path`] counted.
pub(crate) struct StoreOps {
    /// Admitted calls made.
    pub(crate) calls: u64,
    /// The allotment the calls were admitted into.
    pub(crate) allotment: u32,
    /// Operations the store was asked for while the calls ran.
    pub(crate) during_calls: u64,
    /// Of those, the renewal task's own (its count).
    pub(crate) by_renewals: u64,
}

/// Builds one capped bulkhead, waits for its allotment, then makes `calls`
/// awaited admitted calls, yielding to the renewal task every thousand, and
/// counts the store's operations meanwhile (the store counts every operation it
/// is asked for; the renewal task counts its own).
pub(crate) fn store_ops_on_the_admitted_path(rt: &Runtime, calls: u64) -> StoreOps {
    let store = LocalStore::new();
    // The renewals run on `rt` here, between the calls, so that the store's
    // operations and the task's own count are read with neither moving.
    let (layer, capped) = capped_bulkhead(rt, rt, &store);
    let allotment = capped.snapshot().allotment;
    let mut svc = layer.layer(inner::ok());
    let (store_before, task_before) = (store.ops(), capped.snapshot().store_ops);
    rt.block_on(async {
        for i in 0..calls {
            // Calls that never wait never hand the runtime to the renewal task:
            // let it renew alongside, as it would in a service.
            if i % 1000 == 0 {
                tokio::task::yield_now().await;
            }
            let ready = svc.ready().await.expect("ready");
            assert!(ready.call(http::Request::new(())).await.is_ok(), "admitted");
        }
    });
    StoreOps {
        calls,
        allotment,
        during_calls: store.ops() - store_before,
        by_renewals: capped.snapshot().store_ops - task_before,
    }
}
