//! A user's key-value client reports a missing key as an `std::io::Error` of kind
//! `NotFound`, which is an answer, not an outage. They say so with a closure
//! classifier whose parameter is annotated (`ClassifyInput<'_, String>`), on a
//! breaker under a bulkhead (`ServiceBuilder` extension), and call the client from
//! spawned tasks.
//!
//! Asserted: the classifier decides: five misses in a row leave a breaker of two
//! consecutive failures closed (counted as successes), and two refused connections
//! then open it.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::core::{ClassifyInput, Outcome};
use seawall::{BoxError, ServiceBuilderExt};
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[tokio::test]
async fn an_annotated_closure_tells_a_miss_from_an_outage() -> Result<(), BoxError> {
    let reachable = Arc::new(AtomicBool::new(true));
    let store = service_fn({
        let reachable = reachable.clone();
        move |key: String| {
            let reachable = reachable.load(Ordering::SeqCst);
            async move {
                if reachable {
                    Err::<String, _>(io::Error::new(io::ErrorKind::NotFound, key))
                } else {
                    Err(io::Error::new(io::ErrorKind::ConnectionRefused, key))
                }
            }
        }
    });
    let breaker = CircuitBreakerLayer::builder("kv")
        .consecutive_failures(2)
        .open_for(Duration::from_secs(60))
        .jitter(0.0)
        .classifier(|r: ClassifyInput<'_, String>| match r {
            Ok(_) => Outcome::Success,
            Err(e) => match e.downcast_ref::<io::Error>() {
                Some(io) if io.kind() == io::ErrorKind::NotFound => Outcome::Success,
                _ => Outcome::Failure,
            },
        })
        .build()?;
    let handle = breaker.handle();
    let kv = ServiceBuilder::new()
        .bulkhead(BulkheadLayer::builder("kv").max_concurrent(8).build()?)
        .circuit_breaker(breaker)
        .service(store);

    for i in 0..5 {
        let kv = kv.clone();
        let miss = tokio::spawn(async move { kv.oneshot(format!("cart:{i}")).await }).await?;
        assert!(miss.is_err());
    }
    assert_eq!(handle.state(), State::Closed, "a miss is an answer");
    assert_eq!(handle.snapshot().counters.successes, 5);

    reachable.store(false, Ordering::SeqCst);
    for i in 0..2 {
        let kv = kv.clone();
        let refused = tokio::spawn(async move { kv.oneshot(format!("cart:{i}")).await }).await?;
        assert!(refused.is_err());
    }
    assert_eq!(handle.state(), State::Open, "an outage is a failure");
    Ok(())
}
