//! The layer in paused time: every wait is a `tokio::time::sleep`, and the clock
//! moves only when the runtime is idle, so offsets are exact and nothing sleeps.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

use super::*;
use crate::classify::HttpStatus;
use crate::deadline::DeadlineLayer;
use crate::rejection::{BoxError, CircuitOpen};
use crate::retry::DeadlineRetry;

type Req = http::Request<()>;
type Res = http::Response<&'static str>;
const MS: Duration = Duration::from_millis(1);

/// What the n-th call (from 0) does: how long it takes, then its answer.
type Script = fn(usize) -> (Duration, Result<Res, BoxError>);

/// When each call started.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<Instant>>>);

impl Calls {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn offsets_ms(&self, t0: Instant) -> Vec<u128> {
        let calls = self.0.lock().unwrap();
        calls.iter().map(|t| (*t - t0).as_millis()).collect()
    }
}

/// A dependency following `script`, its calls numbered across every request.
fn dependency(
    calls: &Calls,
    script: Script,
) -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone {
    let calls = calls.clone();
    let n = Arc::new(AtomicUsize::new(0));
    service_fn(move |_req: Req| {
        calls.0.lock().unwrap().push(Instant::now());
        let (takes, answer) = script(n.fetch_add(1, Ordering::SeqCst));
        async move {
            tokio::time::sleep(takes).await;
            answer
        }
    })
}

fn ok(body: &'static str) -> Result<Res, BoxError> {
    Ok(http::Response::new(body))
}

fn status(code: u16, body: &'static str) -> Result<Res, BoxError> {
    let mut res = http::Response::new(body);
    *res.status_mut() = http::StatusCode::from_u16(code).unwrap();
    Ok(res)
}

/// The first call of every request is stuck for a second; the others take 5 ms.
fn first_stuck(n: usize) -> (Duration, Result<Res, BoxError>) {
    if n == 0 {
        (1000 * MS, ok("first"))
    } else {
        (5 * MS, ok("hedge"))
    }
}

fn fixed(delay: Duration) -> HedgeBuilder {
    HedgeLayer::builder("test")
        .fixed_delay(delay)
        .min_attempt_time(20 * MS)
}

fn get() -> Req {
    http::Request::new(())
}

#[tokio::test(start_paused = true)]
async fn the_hedge_is_sent_at_the_delay_and_not_before() {
    let calls = Calls::default();
    let layer = fixed(20 * MS).build().unwrap();
    let handle = layer.handle();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(dependency(&calls, first_stuck));
    let t0 = Instant::now();
    let res = svc.oneshot(get()).await.unwrap();
    assert_eq!(*res.body(), "hedge");
    assert_eq!(calls.offsets_ms(t0), [0, 20]);
    assert_eq!(t0.elapsed(), 25 * MS);
    let seen = handle.snapshot();
    assert_eq!(
        (seen.requests, seen.hedges_sent, seen.hedges_won),
        (1, 1, 1)
    );

    // An answer before the delay: no hedge, and no timer left behind.
    let calls = Calls::default();
    let layer = fixed(20 * MS).build().unwrap();
    let svc = ServiceBuilder::new()
        .layer(layer.clone())
        .service(dependency(&calls, |_| (19 * MS, ok("fast"))));
    let t0 = Instant::now();
    assert_eq!(*svc.oneshot(get()).await.unwrap().body(), "fast");
    assert_eq!(calls.offsets_ms(t0), [0]);
    assert_eq!(layer.handle().snapshot().hedges_sent, 0);
}

#[tokio::test(start_paused = true)]
async fn each_further_hedge_waits_one_more_delay() {
    let calls = Calls::default();
    let layer = fixed(20 * MS).max_attempts(3).build().unwrap();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(dependency(&calls, |n| {
            if n < 2 {
                (1000 * MS, ok("stuck"))
            } else {
                (5 * MS, ok("third"))
            }
        }));
    let t0 = Instant::now();
    assert_eq!(*svc.oneshot(get()).await.unwrap().body(), "third");
    assert_eq!(calls.offsets_ms(t0), [0, 20, 40]);
    assert_eq!(t0.elapsed(), 45 * MS);
}

#[tokio::test(start_paused = true)]
async fn no_hedge_when_the_deadline_cannot_fit_one() {
    let calls = Calls::default();
    let layer = fixed(20 * MS).min_attempt_time(20 * MS).build().unwrap();
    let handle = layer.handle();
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(30 * MS).unwrap())
        .layer(layer)
        .service(dependency(&calls, first_stuck));
    // At 20 ms, 10 ms remain: less than the 20 ms an attempt needs.
    let err = svc.oneshot(get()).await.unwrap_err();
    assert!(crate::find_rejection(&*err).is_some(), "{err}");
    assert_eq!(calls.count(), 1);
    let seen = handle.snapshot();
    assert_eq!((seen.hedges_sent, seen.refused_deadline), (0, 1));

    // With 40 ms, the hedge fits.
    let calls = Calls::default();
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(40 * MS).unwrap())
        .layer(fixed(20 * MS).build().unwrap())
        .service(dependency(&calls, first_stuck));
    assert_eq!(*svc.oneshot(get()).await.unwrap().body(), "hedge");
    assert_eq!(calls.count(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_is_not_idempotent_is_never_hedged() {
    let calls = Calls::default();
    let layer = fixed(20 * MS).build().unwrap();
    let handle = layer.handle();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(dependency(&calls, first_stuck));
    let post = http::Request::post("/orders").body(()).unwrap();
    let t0 = Instant::now();
    assert_eq!(*svc.oneshot(post).await.unwrap().body(), "first");
    assert_eq!(calls.offsets_ms(t0), [0]);
    assert_eq!(t0.elapsed(), 1000 * MS);
    let seen = handle.snapshot();
    assert_eq!((seen.hedges_sent, seen.refused_not_idempotent), (0, 1));

    // The override: a POST with an idempotency key may be hedged.
    let calls = Calls::default();
    let keyed = fixed(20 * MS)
        .hedge_if(|req: &Req| {
            req.headers()
                .contains_key("idempotency-key")
                .then(|| crate::RetryableRequest::try_clone(req))
                .flatten()
        })
        .build()
        .unwrap();
    let svc = ServiceBuilder::new()
        .layer(keyed)
        .service(dependency(&calls, first_stuck));
    let post = http::Request::post("/orders")
        .header("idempotency-key", "k1")
        .body(())
        .unwrap();
    assert_eq!(*svc.oneshot(post).await.unwrap().body(), "hedge");
    assert_eq!(calls.count(), 2);
}

#[tokio::test(start_paused = true)]
async fn no_hedge_once_the_budget_is_spent() {
    let calls = Calls::default();
    // No share, one hedge in reserve per window.
    let layer = fixed(20 * MS)
        .budget(0.0, 1, Duration::from_secs(10))
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(dependency(&calls, |n| {
            if n % 2 == 0 {
                (100 * MS, ok("slow"))
            } else {
                (5 * MS, ok("hedge"))
            }
        }));
    assert_eq!(*svc.clone().oneshot(get()).await.unwrap().body(), "hedge");
    // Call 2 is this request's first attempt; no hedge follows it.
    let t0 = Instant::now();
    assert_eq!(*svc.oneshot(get()).await.unwrap().body(), "slow");
    assert_eq!(t0.elapsed(), 100 * MS);
    assert_eq!(calls.count(), 3);
    let seen = handle.snapshot();
    assert_eq!((seen.hedges_sent, seen.refused_budget), (1, 1));
    assert_eq!(seen.budget_available, 0);
}

#[tokio::test(start_paused = true)]
async fn the_first_success_by_the_classifier_wins_not_the_first_answer() {
    // The first attempt answers 503 at 30 ms; the hedge (sent at 20 ms) 200 at 35 ms.
    fn script(n: usize) -> (Duration, Result<Res, BoxError>) {
        if n == 0 {
            (30 * MS, status(503, "busy"))
        } else {
            (15 * MS, ok("quote"))
        }
    }
    let calls = Calls::default();
    let svc = ServiceBuilder::new()
        .layer(
            fixed(20 * MS)
                .classifier(HttpStatus::default())
                .build()
                .unwrap(),
        )
        .service(dependency(&calls, script));
    let t0 = Instant::now();
    assert_eq!(*svc.oneshot(get()).await.unwrap().body(), "quote");
    assert_eq!(t0.elapsed(), 35 * MS);

    // With the default classifier, an `Ok` 503 is a success and wins at 30 ms.
    let calls = Calls::default();
    let svc = ServiceBuilder::new()
        .layer(fixed(20 * MS).build().unwrap())
        .service(dependency(&calls, script));
    let t0 = Instant::now();
    assert_eq!(*svc.oneshot(get()).await.unwrap().body(), "busy");
    assert_eq!(t0.elapsed(), 30 * MS);
}

#[tokio::test(start_paused = true)]
async fn when_every_attempt_fails_the_caller_gets_the_first_attempts_error() {
    let calls = Calls::default();
    let svc = ServiceBuilder::new()
        .layer(fixed(20 * MS).build().unwrap())
        .service(dependency(&calls, |n| {
            if n == 0 {
                (50 * MS, Err("first failed".into()))
            } else {
                (5 * MS, Err("hedge failed".into()))
            }
        }));
    let t0 = Instant::now();
    let err = svc.oneshot(get()).await.unwrap_err();
    assert_eq!(err.to_string(), "first failed");
    assert_eq!(t0.elapsed(), 50 * MS);

    // A first attempt that fails before the delay is answered at once: no hedge.
    let calls = Calls::default();
    let svc = ServiceBuilder::new()
        .layer(fixed(20 * MS).build().unwrap())
        .service(dependency(&calls, |_| (5 * MS, Err("refused".into()))));
    let t0 = Instant::now();
    assert_eq!(svc.oneshot(get()).await.unwrap_err().to_string(), "refused");
    assert_eq!((t0.elapsed(), calls.count()), (5 * MS, 1));
}

#[tokio::test(start_paused = true)]
async fn a_rejected_hedge_ends_hedging_and_the_caller_never_sees_it() {
    let calls = Calls::default();
    let layer = fixed(20 * MS).max_attempts(4).build().unwrap();
    let handle = layer.handle();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(dependency(&calls, |n| {
            if n == 0 {
                (200 * MS, ok("first"))
            } else {
                let open: BoxError = Box::new(CircuitOpen::new("supplier".into(), 5 * MS));
                (Duration::ZERO, Err(open))
            }
        }));
    let t0 = Instant::now();
    assert_eq!(*svc.oneshot(get()).await.unwrap().body(), "first");
    // One hedge at 20 ms, refused; none at 40 or 60 ms.
    assert_eq!(calls.offsets_ms(t0), [0, 20]);
    let seen = handle.snapshot();
    assert_eq!((seen.hedges_sent, seen.refused_rejected), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn the_percentile_tracks_a_shifted_latency_distribution() {
    let takes = Arc::new(AtomicUsize::new(10));
    let t = takes.clone();
    let dependency = service_fn(move |_req: Req| {
        let ms = t.load(Ordering::SeqCst) as u64;
        async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ok("answer")
        }
    });
    let layer = HedgeLayer::builder("test")
        .delay(HedgeDelay::Percentile(PercentileDelay {
            percentile: 50.0,
            half_life: Duration::from_secs(4),
            min_samples: 10,
            initial: 50 * MS,
            min_delay: MS,
        }))
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = ServiceBuilder::new().layer(layer).service(dependency);
    assert_eq!(handle.snapshot().delay, 50 * MS, "the initial delay");
    let run = |seconds: u64| {
        let svc = svc.clone();
        async move {
            let until = Instant::now() + Duration::from_secs(seconds);
            while Instant::now() < until {
                svc.clone().oneshot(get()).await.unwrap();
            }
        }
    };
    run(10).await;
    let before = handle.snapshot().delay;
    assert!(before >= 10 * MS && before < 12 * MS, "{before:?}");
    takes.store(100, Ordering::SeqCst);
    run(20).await;
    let after = handle.snapshot().delay;
    assert!(after >= 100 * MS && after < 113 * MS, "{after:?}");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_first_attempt_counts_as_at_least_the_time_it_ran() {
    let calls = Calls::default();
    let layer = HedgeLayer::builder("test")
        .delay(HedgeDelay::Percentile(PercentileDelay {
            percentile: 50.0,
            half_life: Duration::from_secs(4),
            min_samples: 5,
            initial: 20 * MS,
            min_delay: MS,
        }))
        .budget(1.0, 100, Duration::from_secs(10))
        .build()
        .unwrap();
    let handle = layer.handle();
    // Every first attempt would take a second: each loses to its hedge at 25 ms.
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(dependency(&calls, |n| {
            if n % 2 == 0 {
                (1000 * MS, ok("first"))
            } else {
                (5 * MS, ok("hedge"))
            }
        }));
    for _ in 0..10 {
        assert_eq!(*svc.clone().oneshot(get()).await.unwrap().body(), "hedge");
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    let seen = handle.snapshot();
    assert_eq!(seen.hedges_won, 10);
    // Ten censored samples of 25 ms: the estimate is not empty, and not below the
    // time the first attempts ran.
    let p = seen
        .first_attempt_percentile
        .expect("censored samples count");
    assert!(p >= 25 * MS && p < 29 * MS, "{p:?}");
}

#[tokio::test(start_paused = true)]
async fn a_budget_shared_with_the_retry_policy_is_funded_once_per_request() {
    let retry = DeadlineRetry::builder("test")
        .budget(0.5, 0, Duration::from_secs(10))
        .build()
        .unwrap();
    let budget = retry.budget();
    let hedging = fixed(20 * MS)
        .shared_budget(budget.clone())
        .build()
        .unwrap();
    let calls = Calls::default();
    let svc = ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(retry))
        .layer(hedging)
        .service(dependency(&calls, |_| (1 * MS, ok("fast"))));
    for _ in 0..4 {
        svc.clone().oneshot(get()).await.unwrap();
    }
    // Four first attempts, counted by the retry policy only: half of four.
    assert_eq!(budget.available(), 2);

    // Alone, the hedging layer counts its requests itself.
    let own = SharedBudget::new(0.5, 0, Duration::from_secs(10)).unwrap();
    let svc = ServiceBuilder::new()
        .layer(fixed(20 * MS).shared_budget(own.clone()).build().unwrap())
        .service(dependency(&calls, |_| (1 * MS, ok("fast"))));
    for _ in 0..4 {
        svc.clone().oneshot(get()).await.unwrap();
    }
    assert_eq!(own.available(), 2);
    assert_eq!(
        SharedBudget::new(f64::NAN, 0, Duration::from_secs(10))
            .unwrap_err()
            .field(),
        "budget_share"
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_cancels_every_attempt() {
    let live = Arc::new(AtomicUsize::new(0));
    struct Live(Arc<AtomicUsize>);
    impl Drop for Live {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let l = live.clone();
    let dependency = service_fn(move |_req: Req| {
        l.fetch_add(1, Ordering::SeqCst);
        let guard = Live(l.clone());
        async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(guard);
            ok("late")
        }
    });
    let mut svc = ServiceBuilder::new()
        .layer(fixed(20 * MS).build().unwrap())
        .service(dependency);
    let fut = svc.ready().await.unwrap().call(get());
    let mut task = tokio_test::task::spawn(fut);
    assert!(task.poll().is_pending());
    tokio::time::advance(20 * MS).await;
    assert!(task.poll().is_pending());
    assert_eq!(
        live.load(Ordering::SeqCst),
        2,
        "the first attempt and a hedge"
    );
    drop(task);
    assert_eq!(live.load(Ordering::SeqCst), 0);
}
