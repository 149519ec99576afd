//! A user puts a protected inventory client behind `tower::Buffer` (buffer →
//! bulkhead → breaker → a `service_fn` whose error is a small error struct of
//! theirs), so that many tasks share it through a cheap `Clone`.
//!
//! Asserted: the breaker's rejection comes back through the buffer as an ordinary
//! error (`CircuitOpen` found by `find_rejection`) and does not kill the buffer's
//! worker: once an operator resets the breaker, the same buffer serves again.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::{find_rejection, BoxError, RejectionKind, ServiceBuilderExt};
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[derive(Debug)]
struct InventoryDown;

impl fmt::Display for InventoryDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("inventory service down")
    }
}

impl std::error::Error for InventoryDown {}

#[tokio::test]
async fn a_rejection_through_a_buffer_leaves_the_buffer_usable() -> Result<(), BoxError> {
    let down = Arc::new(AtomicBool::new(true));
    let calls = Arc::new(AtomicUsize::new(0));
    let inventory = service_fn({
        let down = down.clone();
        let calls = calls.clone();
        move |sku: String| {
            calls.fetch_add(1, Ordering::SeqCst);
            let down = down.load(Ordering::SeqCst);
            async move {
                if down {
                    Err(InventoryDown)
                } else {
                    Ok(format!("{sku}: 3 in stock"))
                }
            }
        }
    });
    let breaker = CircuitBreakerLayer::builder("inventory")
        .consecutive_failures(2)
        .open_for(Duration::from_secs(60))
        .jitter(0.0)
        .build()?;
    let handle = breaker.handle();
    let stock = ServiceBuilder::new()
        .buffer(32)
        .bulkhead(
            BulkheadLayer::builder("inventory")
                .max_concurrent(8)
                .build()?,
        )
        .circuit_breaker(breaker)
        .service(inventory);

    for _ in 0..2 {
        let stock = stock.clone();
        let failed = tokio::spawn(async move { stock.oneshot("sku-1".to_owned()).await }).await?;
        let err = failed.expect_err("the inventory is down");
        assert!(err.to_string().contains("inventory service down"), "{err}");
    }
    assert_eq!(handle.state(), State::Open);

    let refused = {
        let stock = stock.clone();
        tokio::spawn(async move { stock.oneshot("sku-1".to_owned()).await }).await?
    };
    let err = refused.expect_err("the breaker is open");
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(RejectionKind::CircuitOpen)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // The inventory is back and the operator resets the breaker: the buffer still works.
    down.store(false, Ordering::SeqCst);
    handle.reset();
    let answer = tokio::spawn(async move { stock.oneshot("sku-1".to_owned()).await }).await?;
    assert_eq!(answer?, "sku-1: 3 in stock");
    Ok(())
}
