//! `DeadlineRetry` in the recommended stack, with the real bulkhead and breaker below
//! it: Deadline → Retry → Bulkhead → Breaker → a dependency that fails. Paused time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::core::{DeadlineLayer, DeadlineRetry, Jitter, RetryHandle};
use seawall::{find_rejection, BoxError, RejectionKind, ServiceBuilderExt};
use tokio::time::Instant;
use tokio_test::{assert_ready, task};
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

type Req = http::Request<()>;
const MS: Duration = Duration::from_millis(1);

/// The stack over a dependency that takes `takes` to fail, counting its calls.
fn stack(
    breaker: CircuitBreakerLayer,
    retry: DeadlineRetry,
    hits: Arc<AtomicUsize>,
    takes: Duration,
) -> impl Service<
    Req,
    Response = (),
    Error = BoxError,
    Future = impl std::future::Future<Output = Result<(), BoxError>> + Send,
> + Clone {
    ServiceBuilder::new()
        .deadline(DeadlineLayer::new(300 * MS).unwrap())
        .deadline_retry(retry)
        .bulkhead(BulkheadLayer::builder("supplier").build().unwrap())
        .circuit_breaker(breaker)
        .service(service_fn(move |_req: Req| {
            hits.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(takes).await;
                Err::<(), BoxError>("connection refused".into())
            }
        }))
}

fn retry(max_attempts: usize) -> (DeadlineRetry, RetryHandle) {
    let policy = DeadlineRetry::builder("supplier")
        .max_attempts(max_attempts)
        .min_attempt_time(20 * MS)
        .backoff(10 * MS, 40 * MS, Jitter::Full)
        .random_source(|| 0.5)
        .build()
        .unwrap();
    let handle = policy.handle();
    (policy, handle)
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_below_ends_the_retries_at_once() {
    let breaker = CircuitBreakerLayer::builder("supplier")
        .consecutive_failures(2)
        .open_for(Duration::from_secs(10))
        .build()
        .unwrap();
    let breaker_handle = breaker.handle();
    let (policy, retries) = retry(5);
    let hits = Arc::new(AtomicUsize::new(0));
    let mut svc = stack(breaker, policy, hits.clone(), Duration::ZERO);

    // Two failures open the breaker; the third attempt is its rejection, which is not
    // retried although two attempts are left.
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(Req::new(()))
        .await
        .unwrap_err();
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(RejectionKind::CircuitOpen)
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    assert_eq!(breaker_handle.state(), State::Open);

    // While it is open, a request is answered on its first poll: no wait, no retry.
    let mut next = task::spawn(svc.ready().await.unwrap().call(Req::new(())));
    let err = assert_ready!(next.poll()).unwrap_err();
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(RejectionKind::CircuitOpen)
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    let s = retries.snapshot();
    assert_eq!((s.attempts, s.retries), (4, 2));
    assert_eq!(breaker_handle.snapshot().counters.short_circuited, 2);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_sees_every_attempt() {
    let breaker = CircuitBreakerLayer::builder("supplier")
        .consecutive_failures(10)
        .build()
        .unwrap();
    let breaker_handle = breaker.handle();
    let (policy, _) = retry(3);
    let hits = Arc::new(AtomicUsize::new(0));
    let svc = stack(breaker, policy, hits.clone(), Duration::ZERO);
    assert!(svc.oneshot(Req::new(())).await.is_err());
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    assert_eq!(breaker_handle.snapshot().counters.failures, 3);
}

#[tokio::test(start_paused = true)]
async fn a_call_that_spends_the_budget_is_not_retried() {
    // The dependency takes 1 s; the breaker bounds the call by the 300 ms deadline,
    // and the resulting deadline exceeded is not retried: nothing is left to try with.
    let breaker = CircuitBreakerLayer::builder("supplier").build().unwrap();
    let (policy, retries) = retry(3);
    let hits = Arc::new(AtomicUsize::new(0));
    let svc = stack(breaker, policy, hits.clone(), Duration::from_secs(1));
    let t0 = Instant::now();
    let err = svc.oneshot(Req::new(())).await.unwrap_err();
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(RejectionKind::DeadlineExceeded)
    );
    assert_eq!(Instant::now() - t0, 300 * MS);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(retries.snapshot().retries, 0);
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_is_not_retried_and_holds_no_slot_between_attempts() {
    // One slot, no queue. A first request fails slowly (100 ms per attempt) and retries;
    // while it waits between attempts its slot is free, so a second request gets it.
    let (policy, retries) = retry(2);
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let bulkhead = BulkheadLayer::builder("supplier")
        .max_concurrent(1)
        .max_queue(0)
        .build()
        .unwrap();
    let bulkhead_handle = bulkhead.handle();
    let mut svc = ServiceBuilder::new()
        .deadline(DeadlineLayer::new(300 * MS).unwrap())
        .deadline_retry(policy)
        .bulkhead(bulkhead)
        .service(service_fn(move |_req: Req| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(100 * MS).await;
                Err::<(), BoxError>("connection refused".into())
            }
        }));

    let mut first = task::spawn(svc.ready().await.unwrap().call(Req::new(())));
    let _ = first.poll();
    // While the first attempt holds the slot, a second request is rejected at once,
    // and that rejection is not retried.
    let mut second = task::spawn(svc.ready().await.unwrap().call(Req::new(())));
    let err = assert_ready!(second.poll()).unwrap_err();
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(RejectionKind::BulkheadFull)
    );
    // The first attempt fails at 100 ms; its retry waits 5 ms (half of 10 ms), with
    // the slot released.
    tokio::time::advance(100 * MS).await;
    let _ = first.poll();
    assert_eq!(bulkhead_handle.snapshot().active, 0);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // After the wait, the retry takes the slot again, and fails at 205 ms.
    tokio::time::advance(5 * MS).await;
    let _ = first.poll();
    assert_eq!(bulkhead_handle.snapshot().active, 1);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    tokio::time::advance(100 * MS).await;
    assert!(assert_ready!(first.poll()).is_err());
    let s = retries.snapshot();
    assert_eq!((s.attempts, s.retries, s.refused_attempts), (3, 1, 1));
}
