//! The hedging layer in the recommended stack, with seawall's real bulkhead and
//! breaker below it: Deadline → (Retry) → Hedge → Bulkhead → Breaker → a dependency.
//! Paused time: offsets are exact and nothing sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::core::{DeadlineLayer, DeadlineRetry, HedgeBuilder, HedgeLayer, Jitter, SharedBudget};
use seawall::{BoxError, ServiceBuilderExt};
use tokio::time::Instant;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

type Req = http::Request<()>;
const MS: Duration = Duration::from_millis(1);

/// A dependency whose n-th call (from 0, across requests) takes `script(n).0` and
/// answers `Ok(n)` if `script(n).1`, else fails; `hits` counts the calls.
fn dependency(
    hits: &Arc<AtomicUsize>,
    script: fn(usize) -> (Duration, bool),
) -> impl Service<Req, Response = usize, Error = BoxError, Future: Send> + Clone {
    let hits = hits.clone();
    service_fn(move |_req: Req| {
        let n = hits.fetch_add(1, Ordering::SeqCst);
        let (takes, ok) = script(n);
        async move {
            tokio::time::sleep(takes).await;
            if ok {
                Ok(n)
            } else {
                Err::<usize, BoxError>("connection reset".into())
            }
        }
    })
}

fn hedging(delay: Duration) -> HedgeBuilder {
    HedgeLayer::builder("supplier")
        .fixed_delay(delay)
        .min_attempt_time(20 * MS)
}

fn bulkhead(max_concurrent: usize) -> BulkheadLayer {
    BulkheadLayer::builder("supplier")
        .max_concurrent(max_concurrent)
        .max_queue(0)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_loser_is_cancelled_frees_its_slot_and_the_breaker_records_it_as_cancelled() {
    let bulkhead = bulkhead(2);
    let slots = bulkhead.handle();
    let breaker = CircuitBreakerLayer::builder("supplier").build().unwrap();
    let verdicts = breaker.handle();
    let hits = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .deadline(DeadlineLayer::new(300 * MS).unwrap())
        .hedge(hedging(20 * MS).build().unwrap())
        .bulkhead(bulkhead)
        .circuit_breaker(breaker)
        .service(dependency(&hits, |n| {
            (if n == 0 { 1000 * MS } else { 5 * MS }, true)
        }));
    let t0 = Instant::now();
    assert_eq!(
        svc.oneshot(Req::new(())).await.unwrap(),
        1,
        "the hedge's answer"
    );
    assert_eq!(t0.elapsed(), 25 * MS);
    // The first attempt, which would have run until 1 s, is gone already.
    assert_eq!(slots.snapshot().active, 0);
    let counters = verdicts.snapshot().counters;
    assert_eq!((counters.successes, counters.cancelled), (1, 1));
    assert_eq!(counters.timeouts + counters.failures + counters.slow, 0);
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_refuses_the_hedge_at_once_and_stops_further_hedges() {
    let bulkhead = bulkhead(1);
    let slots = bulkhead.handle();
    let hedge = hedging(20 * MS).max_attempts(4).build().unwrap();
    let hedges = hedge.handle();
    let hits = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .deadline(DeadlineLayer::new(300 * MS).unwrap())
        .layer(hedge)
        .bulkhead(bulkhead)
        .service(dependency(&hits, |_| (200 * MS, true)));
    let t0 = Instant::now();
    // The caller gets the first attempt's answer, never the hedge's refusal.
    assert_eq!(svc.oneshot(Req::new(())).await.unwrap(), 0);
    assert_eq!(t0.elapsed(), 200 * MS);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(slots.snapshot().rejected_full, 1, "one hedge, not three");
    let seen = hedges.snapshot();
    assert_eq!((seen.hedges_sent, seen.refused_rejected), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_hedge_never_queues_even_at_a_bulkhead_with_a_queue() {
    // One slot and room for ten in line: a first attempt would wait, a hedge may not.
    let bulkhead = BulkheadLayer::builder("supplier")
        .max_concurrent(1)
        .max_queue(10)
        .max_wait(Duration::from_secs(1))
        .build()
        .unwrap();
    let slots = bulkhead.handle();
    let hedge = hedging(20 * MS).max_attempts(3).build().unwrap();
    let hedges = hedge.handle();
    let hits = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .deadline(DeadlineLayer::new(300 * MS).unwrap())
        .layer(hedge)
        .bulkhead(bulkhead)
        .service(dependency(&hits, |_| (200 * MS, true)));
    let request = tokio::spawn(svc.oneshot(Req::new(())));
    tokio::time::sleep(30 * MS).await;
    // The hedge came at 20 ms, found the one slot taken, and was turned away at once;
    // no second hedge followed at 40 ms.
    let seen = slots.snapshot();
    assert_eq!((seen.active, seen.queued, seen.rejected_full), (1, 0, 1));
    // The caller gets the first attempt's answer, never the hedge's refusal.
    assert_eq!(request.await.unwrap().unwrap(), 0);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let hedged = hedges.snapshot();
    assert_eq!((hedged.hedges_sent, hedged.refused_rejected), (1, 1));
    // A first attempt (no hedge) still waits in line as configured.
    assert!(seawall::core::may_wait());
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_stops_hedging() {
    let breaker = CircuitBreakerLayer::builder("supplier")
        .consecutive_failures(2)
        .open_for(Duration::from_secs(10))
        .build()
        .unwrap();
    let verdicts = breaker.handle();
    let hedge = hedging(20 * MS).max_attempts(3).build().unwrap();
    let hedges = hedge.handle();
    let hits = Arc::new(AtomicUsize::new(0));
    // Call 0 is slow and succeeds; calls 1 and 2 fail fast and open the breaker.
    let svc = ServiceBuilder::new()
        .deadline(DeadlineLayer::new(300 * MS).unwrap())
        .layer(hedge)
        .bulkhead(bulkhead(10))
        .circuit_breaker(breaker)
        .service(dependency(&hits, |n| {
            if n == 0 {
                (200 * MS, true)
            } else {
                (5 * MS, false)
            }
        }));
    let slow = tokio::spawn(svc.clone().oneshot(Req::new(())));
    tokio::task::yield_now().await;
    for _ in 0..2 {
        assert!(svc.clone().oneshot(Req::new(())).await.is_err());
    }
    assert_eq!(verdicts.state(), State::Open);
    // At 20 ms the slow request's hedge meets the open breaker: no hedge at 40 ms,
    // and the caller gets its first attempt's answer.
    assert_eq!(slow.await.unwrap().unwrap(), 0);
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    assert_eq!(verdicts.snapshot().counters.short_circuited, 1);
    let seen = hedges.snapshot();
    assert_eq!((seen.hedges_sent, seen.refused_rejected), (1, 1));

    // While it stays open, a request is refused at once and nothing is hedged.
    let err = svc.oneshot(Req::new(())).await.unwrap_err();
    assert!(seawall::find_rejection(&*err).is_some());
    assert_eq!(hedges.snapshot().hedges_sent, 1);
}

/// 100 requests at once into an outage where every call fails after 30 ms, through
/// Deadline → Retry(3 attempts) → Hedge(20 ms) → Bulkhead, the retry policy and the
/// hedging layer drawing on `budgets`; the calls the dependency saw.
async fn outage(budgets: (SharedBudget, SharedBudget)) -> usize {
    let (retry_budget, hedge_budget) = budgets;
    let retry = DeadlineRetry::builder("supplier")
        .max_attempts(3)
        .min_attempt_time(20 * MS)
        .backoff(10 * MS, 40 * MS, Jitter::Full)
        .random_source(|| 0.5)
        .shared_budget(retry_budget)
        .build()
        .unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let svc = ServiceBuilder::new()
        .deadline(DeadlineLayer::new(300 * MS).unwrap())
        .deadline_retry(retry)
        .layer(
            hedging(20 * MS)
                .shared_budget(hedge_budget)
                .build()
                .unwrap(),
        )
        .bulkhead(bulkhead(1000))
        .service(dependency(&hits, |_| (30 * MS, false)));
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..100 {
        requests.spawn(svc.clone().oneshot(Req::new(())));
    }
    while let Some(done) = requests.join_next().await {
        assert!(done.unwrap().is_err());
    }
    hits.load(Ordering::SeqCst)
}

#[tokio::test(start_paused = true)]
async fn hedges_and_retries_sharing_one_budget_stay_within_it_during_an_outage() {
    let window = Duration::from_secs(10);
    let shared = SharedBudget::new(0.2, 5, window).unwrap();
    let calls = outage((shared.clone(), shared)).await;
    // 100 first attempts, and at most 0.2 × 100 + 5 extra calls, hedges and retries
    // together.
    assert!(calls > 100 && calls <= 125, "{calls} calls");

    // Two budgets of the same size let twice as many extra calls through.
    let apart = outage((
        SharedBudget::new(0.2, 5, window).unwrap(),
        SharedBudget::new(0.2, 5, window).unwrap(),
    ))
    .await;
    assert!(apart > 125, "{apart} calls");
}
