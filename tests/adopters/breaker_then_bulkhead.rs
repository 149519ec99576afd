//! A user puts the breaker outside the bulkhead (the other order from the README's)
//! around a search client, `Service<String>` whose error is `std::io::Error`: the
//! breaker trips on one failure, the bulkhead allows 8 calls and no queue. Nine
//! searches run at once in spawned tasks; the first eight wait in the client until
//! the test lets them finish.
//!
//! Asserted: the ninth concurrent call is rejected with `BulkheadFull`, and the
//! breaker in front of the bulkhead ignores that rejection (an admission rejection
//! says nothing about the dependency): it stays closed, with no failure recorded.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::{find_rejection, BoxError, RejectionKind, ServiceBuilderExt};
use tokio::sync::{watch, Semaphore};
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[tokio::test]
async fn a_full_bulkhead_behind_the_breaker_does_not_trip_it() -> Result<(), BoxError> {
    let (entered, mut entered_rx) = watch::channel(0usize);
    let entered = Arc::new(entered);
    let gate = Arc::new(Semaphore::new(0));
    let search = service_fn({
        let gate = gate.clone();
        move |query: String| {
            entered.send_modify(|n| *n += 1);
            let gate = gate.clone();
            async move {
                let _permit = gate.acquire().await.map_err(io::Error::other)?;
                Ok::<_, io::Error>(format!("3 results for {query}"))
            }
        }
    });
    let breaker = CircuitBreakerLayer::builder("search")
        .consecutive_failures(1)
        .open_for(Duration::from_secs(60))
        .jitter(0.0)
        .build()?;
    let handle = breaker.handle();
    let search = ServiceBuilder::new()
        .circuit_breaker(breaker)
        .bulkhead(
            BulkheadLayer::builder("search")
                .max_concurrent(8)
                .max_queue(0)
                .build()?,
        )
        .service(search);

    let mut running = Vec::new();
    for i in 0..8 {
        let search = search.clone();
        running.push(tokio::spawn(async move {
            search.oneshot(format!("boots size {i}")).await
        }));
    }
    entered_rx.wait_for(|n| *n == 8).await?;

    let ninth = {
        let search = search.clone();
        tokio::spawn(async move { search.oneshot("tent".to_owned()).await }).await?
    };
    let err = ninth.expect_err("eight searches hold the eight slots");
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(RejectionKind::BulkheadFull)
    );
    assert_eq!(handle.state(), State::Closed);
    assert_eq!(handle.snapshot().counters.failures, 0);

    gate.add_permits(8);
    for task in running {
        assert!(task.await?.is_ok());
    }
    assert_eq!(handle.snapshot().counters.successes, 8);
    Ok(())
}
