//! Across crates: a fallback placed outside a circuit breaker answers the caller,
//! but the breaker only ever sees the dependency's failures. A fallback's answer is
//! never evidence that the dependency works, so it cannot reset the
//! failure count or close the breaker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::fallback::{FallbackLayer, Rejections};
use seawall::BoxError;
use tower::{service_fn, ServiceBuilder, ServiceExt};

type Req = http::Request<()>;
type Res = http::Response<&'static str>;

#[tokio::test(start_paused = true)]
async fn the_breaker_never_counts_a_fallback_answer_as_a_success() {
    let calls = Arc::new(AtomicUsize::new(0));
    let supplier = {
        let calls = calls.clone();
        service_fn(move |_req: Req| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<Res, BoxError>("supplier down".into()) }
        })
    };
    let breaker = CircuitBreakerLayer::builder("supplier")
        .consecutive_failures(3)
        .open_for(Duration::from_secs(10))
        .build()
        .unwrap();
    let handle = breaker.handle();
    let fallback = FallbackLayer::builder("supplier-fallback")
        .on_rejections(Rejections::ALL)
        .on_failure(seawall::ErrorsAsFailures)
        .value(http::Response::new("cached catalogue"))
        .build()
        .unwrap();
    let stack = ServiceBuilder::new()
        .layer(fallback)
        .layer(breaker)
        .service(supplier);

    // Every caller gets the fallback's answer...
    for _ in 0..5 {
        let res = stack.clone().oneshot(Req::new(())).await.unwrap();
        assert_eq!(*res.body(), "cached catalogue");
    }
    // ...while the breaker saw three failures and no success, and opened.
    let snap = handle.snapshot();
    assert_eq!(snap.state, State::Open);
    assert_eq!(snap.counters.successes, 0);
    assert_eq!(snap.counters.failures, 3);
    assert_eq!(snap.counters.short_circuited, 2);
    // The two calls after the trip never reached the supplier.
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // The breaker stays open: the fallback's answers did not reset anything.
    tokio::time::advance(Duration::from_secs(9)).await;
    let res = stack.clone().oneshot(Req::new(())).await.unwrap();
    assert_eq!(*res.body(), "cached catalogue");
    assert_eq!(handle.snapshot().state, State::Open);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}
