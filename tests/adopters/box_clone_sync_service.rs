//! A user keeps a protected key-value client in the application's state as a
//! `BoxCloneSyncService<String, String, BoxError>` (bulkhead → breaker → a named
//! `async fn`), so the state's type does not spell the stack, and hands a clone of
//! the state to each task.
//!
//! Asserted: every clone of the boxed service shares the one breaker: two failures
//! through two clones open it, and a third clone's call is rejected with
//! `CircuitOpen` without reaching the store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::{find_rejection, BoxError, RejectionKind, ServiceBuilderExt};
use tower::util::BoxCloneSyncService;
use tower::{service_fn, ServiceBuilder, ServiceExt};

static LOOKUPS: AtomicUsize = AtomicUsize::new(0);

/// The store's client: every key but `"config"` is missing after a failover.
async fn lookup(key: String) -> Result<String, BoxError> {
    LOOKUPS.fetch_add(1, Ordering::SeqCst);
    if key == "config" {
        Ok("v1".to_owned())
    } else {
        Err(format!("replica lost {key}").into())
    }
}

#[derive(Clone)]
struct AppState {
    kv: BoxCloneSyncService<String, String, BoxError>,
}

#[tokio::test]
async fn clones_of_a_boxed_service_share_one_breaker() -> Result<(), BoxError> {
    let breaker = CircuitBreakerLayer::builder("kv")
        .consecutive_failures(2)
        .open_for(Duration::from_secs(60))
        .jitter(0.0)
        .build()?;
    let handle = breaker.handle();
    let state = AppState {
        kv: BoxCloneSyncService::new(
            ServiceBuilder::new()
                .bulkhead(BulkheadLayer::builder("kv").max_concurrent(8).build()?)
                .circuit_breaker(breaker)
                .service(service_fn(lookup)),
        ),
    };

    let first = state.clone();
    let answer = tokio::spawn(async move { first.kv.oneshot("config".to_owned()).await }).await?;
    assert_eq!(answer?, "v1");

    for key in ["cart:1", "cart:2"] {
        let state = state.clone();
        let failed = tokio::spawn(async move { state.kv.oneshot(key.to_owned()).await }).await?;
        assert!(failed.is_err());
    }
    assert_eq!(handle.state(), State::Open);

    let last = state.clone();
    let refused = tokio::spawn(async move { last.kv.oneshot("config".to_owned()).await }).await?;
    let err = refused.expect_err("the shared breaker is open");
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(RejectionKind::CircuitOpen)
    );
    assert_eq!(LOOKUPS.load(Ordering::SeqCst), 3);
    Ok(())
}
