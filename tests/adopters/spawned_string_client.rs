//! A user protects a non-HTTP client, a key-value store lookup (`Service<String>`
//! whose error is `std::io::Error`), with a circuit breaker added by the
//! `ServiceBuilder` extension, and calls it from spawned tasks.
//!
//! Asserted: after three consecutive failures the breaker is open, and the next call
//! is rejected with `CircuitOpen` (found by `find_rejection`) without reaching the
//! store.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::{find_rejection, BoxError, RejectionKind, ServiceBuilderExt};
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[tokio::test]
async fn a_spawned_task_gets_circuit_open_after_three_store_failures() -> Result<(), BoxError> {
    let calls = Arc::new(AtomicUsize::new(0));
    let store = service_fn({
        let calls = calls.clone();
        move |key: String| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                Err::<String, _>(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("store down, cannot read {key}"),
                ))
            }
        }
    });
    let breaker = CircuitBreakerLayer::builder("kv")
        .consecutive_failures(3)
        .open_for(Duration::from_secs(60))
        .jitter(0.0)
        .build()?;
    let handle = breaker.handle();
    let kv = ServiceBuilder::new()
        .circuit_breaker(breaker)
        .service(store);

    for i in 0..3 {
        let kv = kv.clone();
        let result = tokio::spawn(async move { kv.oneshot(format!("user:{i}")).await }).await?;
        let err = result.expect_err("the store is down");
        assert!(find_rejection(&*err).is_none(), "the store's own error");
    }
    assert_eq!(handle.state(), State::Open);

    let kv = kv.clone();
    let result = tokio::spawn(async move { kv.oneshot("user:3".to_owned()).await }).await?;
    let err = result.expect_err("the breaker is open");
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(RejectionKind::CircuitOpen)
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "the fourth call never reached the store"
    );
    Ok(())
}
