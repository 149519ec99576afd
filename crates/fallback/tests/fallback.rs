//! Service-level tests of the generic mode: triggers, strategies, chains, timeouts,
//! deadlines, marking, capture, controls.
#![allow(clippy::unwrap_used)] // helpers outside `#[test]` functions too

use std::error::Error;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seawall_core::{
    BoxError, BulkheadFull, BulkheadTimeout, CircuitOpen, Deadline, DeadlineExceeded,
    ErrorsAsFailures, FallbacksExhausted, HttpStatus,
};
use seawall_fallback::{
    FallbackEvent, FallbackLayer, FallbackRequest, Mark, RejectionKind, Rejections, Served,
    StepTimedOut, Trigger, Unavailable,
};
use tokio::time::Instant;
use tokio_test::{assert_pending, assert_ready, task};
use tower::{service_fn, Layer, Service, ServiceExt};

type Req = http::Request<&'static str>;

/// A freight quote: `price: None` is the explicit "no quote" a caller must honour.
#[derive(Debug, Clone, PartialEq)]
struct Quote {
    price: Option<u32>,
    source: Option<Served>,
}

impl Quote {
    fn priced(price: u32) -> Self {
        Self {
            price: Some(price),
            source: None,
        }
    }
}

impl Mark for Quote {
    fn mark(&mut self, served: Served) {
        self.source = Some(served);
    }
}

fn req(dest: &'static str) -> Req {
    http::Request::new(dest)
}

fn open() -> BoxError {
    Box::new(CircuitOpen::new(
        "supplier".into(),
        Duration::from_millis(1500),
    ))
}

/// A primary that fails every call with `make()`.
#[derive(Clone)]
struct Failing(fn() -> BoxError);

impl Service<Req> for Failing {
    type Response = Quote;
    type Error = BoxError;
    type Future = std::future::Ready<Result<Quote, BoxError>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        std::future::ready(Err((self.0)()))
    }
}

fn failing(make: fn() -> BoxError) -> Failing {
    Failing(make)
}

/// One call for `dest` through `layer` over a primary failing with `make()`.
async fn through_failing<L>(
    layer: &L,
    make: fn() -> BoxError,
    dest: &'static str,
) -> Result<Quote, BoxError>
where
    L: Layer<Failing>,
    L::Service: Service<Req, Response = Quote, Error = BoxError>,
{
    layer.layer(failing(make)).oneshot(req(dest)).await
}

fn answering(quote: Quote) -> impl Service<Req, Response = Quote, Error = BoxError> + Clone {
    service_fn(move |_req: Req| {
        let q = quote.clone();
        async move { Ok::<_, BoxError>(q) }
    })
}

#[derive(Debug)]
struct SupplierRefused;
impl fmt::Display for SupplierRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("supplier refused the connection")
    }
}
impl Error for SupplierRefused {}

#[tokio::test]
async fn each_rejection_kind_fires_the_fallback_and_unselected_kinds_pass_through() {
    let makers: [(RejectionKind, fn() -> BoxError); 4] = [
        (RejectionKind::CircuitOpen, open),
        (RejectionKind::BulkheadFull, || {
            Box::new(BulkheadFull::new("freight".into()))
        }),
        (RejectionKind::BulkheadTimeout, || {
            Box::new(BulkheadTimeout::new(
                "freight".into(),
                Duration::from_millis(20),
            ))
        }),
        (RejectionKind::DeadlineExceeded, || {
            Box::new(DeadlineExceeded::new())
        }),
    ];
    for (selected, _) in &makers {
        let layer = FallbackLayer::builder("freight")
            .on_rejection(*selected)
            .value(Quote::priced(10))
            .build()
            .unwrap();
        for (kind, make) in &makers {
            let svc = layer.layer(failing(*make));
            let result = svc.oneshot(req("PT")).await;
            if kind == selected {
                let quote = result.unwrap();
                let served = quote.source.unwrap();
                assert_eq!(served.trigger(), Trigger::Rejected(*kind));
                assert_eq!(served.step(), "value");
                assert_eq!(served.fallback(), "freight");
            } else {
                // Untouched: the very rejection, found where it was.
                let err = result.unwrap_err();
                let found = seawall_core::find_rejection(&*err).unwrap();
                assert_eq!(found.kind(), *kind);
            }
        }
    }
}

#[tokio::test]
async fn a_503_answer_fires_the_fallback_and_a_404_passes_through() {
    let layer = FallbackLayer::builder("freight")
        .on_failure(HttpStatus::default())
        .sync_fn(|r: FallbackRequest<()>| {
            let mut res = http::Response::new("from fallback");
            res.extensions_mut().insert(r.trigger());
            Ok::<_, BoxError>(res)
        })
        .build()
        .unwrap();
    let primary = |status: u16| {
        service_fn(move |_r: Req| async move {
            Ok::<_, BoxError>(
                http::Response::builder()
                    .status(status)
                    .body("from supplier")
                    .unwrap(),
            )
        })
    };
    let res = layer.layer(primary(503)).oneshot(req("PT")).await.unwrap();
    assert_eq!(*res.body(), "from fallback");
    assert_eq!(
        res.extensions().get::<Served>().unwrap().trigger(),
        Trigger::FailedResponse
    );
    let res = layer.layer(primary(404)).oneshot(req("PT")).await.unwrap();
    assert_eq!(res.status(), 404);
    assert_eq!(*res.body(), "from supplier");
    assert!(res.extensions().get::<Served>().is_none());
}

#[tokio::test]
async fn errors_by_type_fire_and_other_errors_pass_through() {
    let layer = FallbackLayer::builder("freight")
        .on_error::<SupplierRefused>()
        .value(Quote::priced(10))
        .build()
        .unwrap();
    let refused = layer.layer(failing(|| Box::new(SupplierRefused)));
    let quote = refused.oneshot(req("PT")).await.unwrap();
    assert_eq!(quote.source.unwrap().trigger(), Trigger::ErrorType);

    let other = layer.layer(failing(|| "garbled answer".into()));
    let err = other.oneshot(req("PT")).await.unwrap_err();
    assert_eq!(err.to_string(), "garbled answer");
    // A rejection is not an error of the selected type and no rejection is selected.
    let rejected = layer.layer(failing(open));
    assert!(rejected
        .oneshot(req("PT"))
        .await
        .unwrap_err()
        .is::<CircuitOpen>());
    let snap = layer.handle().snapshot();
    assert_eq!(snap.triggered(Trigger::ErrorType), 1);
    assert_eq!(snap.passed_through, 2);
}

#[tokio::test]
async fn a_classifier_fires_on_errors_and_its_ignore_passes_through() {
    let layer = FallbackLayer::builder("freight")
        .on_failure(ErrorsAsFailures)
        .value(Quote::priced(10))
        .build()
        .unwrap();
    let quote = through_failing(&layer, || "reset".into(), "PT")
        .await
        .unwrap();
    assert_eq!(quote.source.unwrap().trigger(), Trigger::FailedError);
    // ErrorsAsFailures ignores admission rejections, but the classifier never sees
    // rejections: none is selected, so it passes through.
    let err = layer
        .layer(failing(|| Box::new(BulkheadFull::new("b".into()))))
        .oneshot(req("PT"))
        .await
        .unwrap_err();
    assert!(err.is::<BulkheadFull>());
}

#[tokio::test]
async fn a_primary_answer_passes_through_unmarked_and_nothing_is_counted() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .on_failure(ErrorsAsFailures)
        .sync_fn(move |_r: FallbackRequest<()>| {
            seen.fetch_add(1, Ordering::SeqCst);
            Ok::<_, BoxError>(Quote::priced(0))
        })
        .build()
        .unwrap();
    let quote = layer
        .layer(answering(Quote::priced(42)))
        .oneshot(req("PT"))
        .await
        .unwrap();
    assert_eq!(quote, Quote::priced(42));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let snap = layer.handle().snapshot();
    assert!(snap.triggered.iter().all(|c| c.count == 0));
    assert_eq!((snap.served, snap.passed_through), (0, 0));
}

#[tokio::test]
async fn the_caller_gets_the_fallback_while_the_layer_below_saw_only_the_failure() {
    // What the service below the fallback (a breaker, say) observed.
    let observed: Arc<Mutex<Vec<Result<Quote, String>>>> = Arc::default();
    let log = observed.clone();
    let below = service_fn(move |_r: Req| {
        let log = log.clone();
        async move {
            let result: Result<Quote, BoxError> = Err("supplier 500".into());
            log.lock()
                .unwrap()
                .push(result.as_ref().map(Clone::clone).map_err(|e| e.to_string()));
            result
        }
    });
    let layer = FallbackLayer::builder("freight")
        .on_failure(ErrorsAsFailures)
        .value(Quote::priced(10))
        .build()
        .unwrap();
    let quote = layer.layer(below).oneshot(req("PT")).await.unwrap();
    assert_eq!(quote.price, Some(10));
    assert!(quote.source.is_some());
    assert_eq!(*observed.lock().unwrap(), [Err("supplier 500".to_owned())]);
}

#[tokio::test]
async fn capture_runs_once_per_call_and_only_what_it_took_reaches_the_fallback() {
    let captures = Arc::new(AtomicUsize::new(0));
    let counted = captures.clone();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let layer = FallbackLayer::builder("freight")
        .capture(move |r: &Req| {
            counted.fetch_add(1, Ordering::SeqCst);
            format!("dest={}", r.body())
        })
        .on_rejection(RejectionKind::CircuitOpen)
        .async_fn(move |r: FallbackRequest<String>| {
            let log = log.clone();
            async move {
                assert!(r.error().unwrap().is::<CircuitOpen>());
                log.lock().unwrap().push(r.into_captured());
                Ok::<_, BoxError>(Quote::priced(7))
            }
        })
        .build()
        .unwrap();
    layer
        .layer(answering(Quote::priced(1)))
        .oneshot(req("ES"))
        .await
        .unwrap();
    assert_eq!(captures.load(Ordering::SeqCst), 1);
    assert!(seen.lock().unwrap().is_empty());
    let quote = through_failing(&layer, open, "PT").await.unwrap();
    assert_eq!(quote.price, Some(7));
    assert_eq!(captures.load(Ordering::SeqCst), 2);
    assert_eq!(*seen.lock().unwrap(), ["dest=PT"]);
}

#[tokio::test]
async fn a_service_fallback_answers_with_the_captured_key() {
    let backup = service_fn(|r: FallbackRequest<&'static str>| async move {
        if *r.captured() == "PT" {
            Ok::<_, BoxError>(Quote::priced(12))
        } else {
            Err("backup has no rate".into())
        }
    });
    let layer = FallbackLayer::builder("freight")
        .capture(|r: &Req| *r.body())
        .on_rejections(Rejections::ADMISSION)
        .service(backup)
        .build()
        .unwrap();
    let quote = through_failing(&layer, open, "PT").await.unwrap();
    assert_eq!(quote.price, Some(12));
    assert_eq!(quote.source.unwrap().step(), "service");
    // A failing single fallback exhausts, with its cause.
    let err = through_failing(&layer, open, "ES").await.unwrap_err();
    let exhausted = err.downcast_ref::<FallbacksExhausted>().unwrap();
    assert_eq!(exhausted.steps().len(), 1);
    assert_eq!(exhausted.steps()[0].step(), "service");
    assert_eq!(
        exhausted.steps()[0].cause().to_string(),
        "backup has no rate"
    );
}

type Log = Arc<Mutex<Vec<String>>>;
type PricingChain<G> = FallbackLayer<
    seawall_fallback::CaptureFn<G, Req>,
    seawall_fallback::Chain<String, Quote>,
    seawall_fallback::NoFailures,
>;

/// The price chain: real-time → cache → last known, with per-step timeouts.
fn pricing_chain(log: &Log) -> PricingChain<impl Fn(&Req) -> String> {
    let hook_log = log.clone();
    let l1 = log.clone();
    let l2 = log.clone();
    FallbackLayer::builder("pricing")
        .capture(|r: &Req| (*r.body()).to_owned())
        .on_rejections(Rejections::ALL)
        .step("real-time", Duration::from_millis(500), move |r| {
            l1.lock()
                .unwrap()
                .push(format!("real-time {}", r.captured()));
            async move { Err::<Quote, _>(std::io::Error::other("pricing service down")) }
        })
        .step("cache", Duration::from_millis(100), move |r| {
            l2.lock().unwrap().push(format!("cache {}", r.captured()));
            async move { Err::<Quote, BoxError>("cache miss".into()) }
        })
        .step("last-known", Duration::from_secs(2), |_r| async move {
            Ok::<_, BoxError>(Quote::priced(99))
        })
        .on_step_failed(move |step, cause| {
            hook_log
                .lock()
                .unwrap()
                .push(format!("failed {step}: {cause}"));
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_chain_tries_its_steps_in_order_and_marks_the_one_that_served() {
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let layer = pricing_chain(&log);
    let quote = through_failing(&layer, open, "sku-123").await.unwrap();
    assert_eq!(quote.price, Some(99));
    let served = quote.source.unwrap();
    assert_eq!(served.step(), "last-known");
    assert_eq!(
        served.trigger(),
        Trigger::Rejected(RejectionKind::CircuitOpen)
    );
    assert_eq!(
        *log.lock().unwrap(),
        [
            "real-time sku-123",
            "failed real-time: pricing service down",
            "cache sku-123",
            "failed cache: cache miss",
        ]
    );
    let snap = layer.handle().snapshot();
    assert_eq!(snap.step("real-time").unwrap().failed, 1);
    assert_eq!(snap.step("cache").unwrap().failed, 1);
    assert_eq!(snap.step("last-known").unwrap().served, 1);
    assert_eq!(snap.served, 1);
}

#[tokio::test(start_paused = true)]
async fn each_step_runs_under_its_own_timeout() {
    let causes: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let hook = causes.clone();
    let layer = FallbackLayer::builder("pricing")
        .on_rejections(Rejections::ALL)
        .step("real-time", Duration::from_millis(500), |_r| {
            std::future::pending::<Result<Quote, BoxError>>()
        })
        .step("cache", Duration::from_millis(100), |_r| async move {
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok::<_, BoxError>(Quote::priced(5))
        })
        .on_step_failed(move |step, cause| {
            hook.lock()
                .unwrap()
                .push((step.to_owned(), cause.to_string()));
        })
        .build()
        .unwrap();
    let start = Instant::now();
    let mut fut = task::spawn(layer.layer(failing(open)).oneshot(req("PT")));
    assert_pending!(fut.poll());
    tokio::time::advance(Duration::from_millis(499)).await;
    assert_pending!(fut.poll());
    assert!(causes.lock().unwrap().is_empty());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_pending!(fut.poll()); // real-time timed out, cache started at 500 ms
    assert_eq!(
        *causes.lock().unwrap(),
        [(
            "real-time".to_owned(),
            "fallback step `real-time` timed out after 500ms".to_owned()
        )]
    );
    tokio::time::advance(Duration::from_millis(60)).await;
    let quote = assert_ready!(fut.poll()).unwrap();
    assert_eq!(quote.price, Some(5));
    assert_eq!(quote.source.unwrap().step(), "cache");
    assert_eq!(Instant::now() - start, Duration::from_millis(560));
    let snap = layer.handle().snapshot();
    assert_eq!(snap.step("real-time").unwrap().timed_out, 1);
    assert_eq!(snap.step("cache").unwrap().served, 1);
}

#[tokio::test(start_paused = true)]
async fn step_timeouts_never_exceed_what_remains_of_the_request_deadline() {
    let causes: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let hook = causes.clone();
    let layer = FallbackLayer::builder("pricing")
        .on_rejections(Rejections::ALL)
        .on_failure(ErrorsAsFailures)
        .step("cache", Duration::from_millis(500), |_r| {
            std::future::pending::<Result<Quote, BoxError>>()
        })
        .step("database", Duration::from_secs(2), |r| async move {
            // The step sees the same deadline.
            assert!(r.deadline().is_some());
            std::future::pending::<Result<Quote, BoxError>>().await
        })
        .on_step_failed(move |step, cause| {
            hook.lock()
                .unwrap()
                .push((step.to_owned(), cause.is::<DeadlineExceeded>()));
        })
        .build()
        .unwrap();
    // The primary fails after 100 ms of a 300 ms overall budget.
    let primary = service_fn(|_r: Req| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Err::<Quote, BoxError>("supplier 500".into())
    });
    let start = Instant::now();
    let overall = Deadline::after(start, Duration::from_millis(300));
    let mut fut = task::spawn(overall.scope(layer.layer(primary).oneshot(req("PT"))));
    assert_pending!(fut.poll());
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_pending!(fut.poll()); // the chain starts with 200 ms left
    tokio::time::advance(Duration::from_millis(199)).await;
    assert_pending!(fut.poll());
    tokio::time::advance(Duration::from_millis(1)).await;
    // At the deadline the cache step is cut (not at 500 ms), and the database step
    // has nothing left: both fail with DeadlineExceeded.
    let err = assert_ready!(fut.poll()).unwrap_err();
    assert_eq!(Instant::now() - start, Duration::from_millis(300));
    assert_eq!(
        *causes.lock().unwrap(),
        [("cache".to_owned(), true), ("database".to_owned(), true)]
    );
    let exhausted = err.downcast_ref::<FallbacksExhausted>().unwrap();
    assert_eq!(exhausted.steps().len(), 2);
    assert_eq!(
        layer
            .handle()
            .snapshot()
            .step("database")
            .unwrap()
            .timed_out,
        1
    );
}

#[tokio::test(start_paused = true)]
async fn an_immediate_step_still_answers_after_the_deadline_is_spent() {
    let layer = FallbackLayer::builder("pricing")
        .on_rejection(RejectionKind::DeadlineExceeded)
        .step("cache", Duration::from_millis(100), |_r| {
            std::future::pending::<Result<Quote, BoxError>>()
        })
        .step_value(
            "static",
            Quote {
                price: None,
                source: None,
            },
        )
        .build()
        .unwrap();
    let mut request = req("PT");
    request
        .extensions_mut()
        .insert(Deadline::at(Instant::now()));
    let quote = layer
        .layer(failing(|| Box::new(DeadlineExceeded::new())))
        .oneshot(request)
        .await
        .unwrap();
    assert_eq!(quote.source.unwrap().step(), "static");
}

#[tokio::test]
async fn exhaustion_lists_every_step_and_its_cause() {
    let layer = FallbackLayer::builder("pricing")
        .on_rejections(Rejections::ALL)
        .step("real-time", Duration::from_millis(500), |_r| async move {
            Err::<Quote, _>(std::io::Error::other("connection refused"))
        })
        .step("cache", Duration::from_millis(100), |_r| async move {
            Err::<Quote, BoxError>("cache miss".into())
        })
        .build()
        .unwrap();
    let err = through_failing(&layer, open, "PT").await.unwrap_err();
    let exhausted = err.downcast_ref::<FallbacksExhausted>().unwrap();
    assert_eq!(exhausted.name(), "pricing");
    let steps: Vec<_> = exhausted
        .steps()
        .iter()
        .map(|s| (s.step(), s.cause().to_string()))
        .collect();
    assert_eq!(
        steps,
        [
            ("real-time", "connection refused".to_owned()),
            ("cache", "cache miss".to_owned())
        ]
    );
    assert!(exhausted.steps()[0].cause().is::<std::io::Error>());
    assert_eq!(
        err.to_string(),
        "fallback `pricing`: every step failed: real-time (connection refused); cache (cache miss)"
    );
    assert_eq!(layer.handle().snapshot().exhausted, 1);
}

#[tokio::test]
async fn a_missing_quote_is_answered_as_unavailable_and_never_becomes_a_price() {
    let tried_after = Arc::new(AtomicUsize::new(0));
    let after = tried_after.clone();
    let layer = FallbackLayer::builder("freight")
        .capture(|r: &Req| (*r.body()).to_owned())
        .on_rejections(Rejections::ALL)
        .step("cache", Duration::from_millis(100), |_r| async move {
            Err::<Quote, BoxError>("no fresh quote cached".into())
        })
        .step_unavailable("no-quote", "no valid freight quote")
        .step("free-shipping", Duration::from_millis(10), move |_r| {
            after.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, BoxError>(Quote::priced(0)) }
        })
        .build()
        .unwrap();
    let err = through_failing(&layer, open, "PT").await.unwrap_err();
    let answer = Unavailable::find(&*err).unwrap();
    assert_eq!(answer.reason(), "no valid freight quote");
    assert_eq!(answer.step(), Some("no-quote"));
    assert_eq!(answer.fallback(), Some("freight"));
    assert_eq!(
        answer.trigger(),
        Some(Trigger::Rejected(RejectionKind::CircuitOpen))
    );
    // The breaker's retry-after reaches the caller: "try again in 1.5 s".
    assert_eq!(answer.retry_after(), Some(Duration::from_millis(1500)));
    assert_eq!(tried_after.load(Ordering::SeqCst), 0);
    let snap = layer.handle().snapshot();
    assert_eq!((snap.unavailable, snap.exhausted, snap.served), (1, 0, 0));
}

#[tokio::test]
async fn a_closure_may_decline_with_unavailable() {
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .sync_fn(|_r: FallbackRequest<()>| Err::<Quote, _>(Unavailable::new("stale quote")))
        .build()
        .unwrap();
    let err = through_failing(&layer, open, "PT").await.unwrap_err();
    assert_eq!(Unavailable::find(&*err).unwrap().step(), Some("fn"));
    assert!(err.downcast_ref::<FallbacksExhausted>().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_single_fallback_can_have_a_timeout() {
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .async_fn(|_r: FallbackRequest<()>| std::future::pending::<Result<Quote, BoxError>>())
        .timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let mut fut = task::spawn(layer.layer(failing(open)).oneshot(req("PT")));
    assert_pending!(fut.poll());
    tokio::time::advance(Duration::from_millis(50)).await;
    let err = assert_ready!(fut.poll()).unwrap_err();
    let exhausted = err.downcast_ref::<FallbacksExhausted>().unwrap();
    let cause = exhausted.steps()[0].cause();
    assert_eq!(
        cause.downcast_ref::<StepTimedOut>().unwrap().timeout(),
        Duration::from_millis(50)
    );
    assert_eq!(layer.handle().snapshot().step("fn").unwrap().timed_out, 1);
}

#[tokio::test]
async fn disabled_passes_everything_through_and_forced_skips_the_primary() {
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .value(Quote::priced(10))
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut events = handle.subscribe();

    handle.disable();
    let err = through_failing(&layer, open, "PT").await.unwrap_err();
    assert!(err.is::<CircuitOpen>());
    handle.enable();

    handle.force();
    let (mock, mut inner) = tower_test::mock::pair::<Req, Quote>();
    inner.allow(0); // the primary is not ready, and must not be asked
    let mut svc = layer.layer(mock);
    let quote = svc.ready().await.unwrap().call(req("PT")).await.unwrap();
    assert_eq!(quote.source.unwrap().trigger(), Trigger::Forced);
    handle.release();
    let control = |enabled, forced| FallbackEvent::Control { enabled, forced };
    assert_eq!(events.recv().await.unwrap(), control(false, false));
    assert_eq!(events.recv().await.unwrap(), control(true, false));
    assert_eq!(events.recv().await.unwrap(), control(true, true));
    assert_eq!(
        events.recv().await.unwrap(),
        FallbackEvent::Triggered {
            trigger: Trigger::Forced
        }
    );
    assert!(matches!(
        events.recv().await.unwrap(),
        FallbackEvent::Served { ref step, trigger: Trigger::Forced } if &**step == "value"
    ));
}

#[tokio::test]
async fn reconfigure_changes_the_triggers_and_revert_restores_them() {
    let layer = FallbackLayer::builder("freight")
        .on_rejection(RejectionKind::CircuitOpen)
        .step("cache", Duration::from_millis(100), |_r| async move {
            Ok::<_, BoxError>(Quote::priced(3))
        })
        .build()
        .unwrap();
    let handle = layer.handle();
    let full = || -> BoxError { Box::new(BulkheadFull::new("b".into())) };
    assert!(through_failing(&layer, full, "PT").await.is_err());

    let mut config = handle.config();
    config.on_rejections = Rejections::ADMISSION;
    config.step_timeouts[0].timeout = Some(Duration::from_millis(250));
    handle.reconfigure(config).unwrap();
    assert!(through_failing(&layer, full, "PT").await.is_ok());
    assert_eq!(
        handle.snapshot().step("cache").unwrap().timeout,
        Some(Duration::from_millis(250))
    );

    // Invalid configurations change nothing.
    let mut bad = handle.config();
    bad.on_rejections = Rejections::NONE;
    assert_eq!(
        handle.reconfigure(bad).unwrap_err().field(),
        "on_rejections"
    );
    let mut bad = handle.config();
    bad.step_timeouts[0].step = "nope".into();
    assert_eq!(
        handle.reconfigure(bad).unwrap_err().field(),
        "step_timeouts"
    );
    assert_eq!(handle.config().on_rejections, Rejections::ADMISSION);

    handle.revert();
    assert_eq!(
        handle.config().on_rejections,
        Rejections::NONE.with(RejectionKind::CircuitOpen)
    );
    assert_eq!(
        handle.snapshot().step("cache").unwrap().timeout,
        Some(Duration::from_millis(100))
    );
}

#[test]
fn builders_validate_and_never_panic() {
    let no_strategy = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .build();
    assert_eq!(no_strategy.unwrap_err().field(), "strategy");

    let no_trigger = FallbackLayer::builder("freight")
        .value(Quote::priced(1))
        .build();
    assert_eq!(no_trigger.unwrap_err().field(), "triggers");

    let empty_name = FallbackLayer::builder("")
        .on_rejections(Rejections::ALL)
        .value(Quote::priced(1))
        .build();
    assert_eq!(empty_name.unwrap_err().field(), "name");

    let ok = || async { Ok::<_, BoxError>(Quote::priced(1)) };
    let twice = FallbackLayer::builder("pricing")
        .on_rejections(Rejections::ALL)
        .step("cache", Duration::from_millis(100), move |_r| ok())
        .step("cache", Duration::from_millis(100), move |_r| ok())
        .build();
    let err = twice.unwrap_err();
    assert_eq!(err.field(), "steps");
    assert!(err.problem().contains("twice"));

    let zero = FallbackLayer::builder("pricing")
        .on_rejections(Rejections::ALL)
        .step("cache", Duration::ZERO, move |_r| ok())
        .build();
    assert_eq!(zero.unwrap_err().field(), "steps");

    let zero_single = FallbackLayer::builder("pricing")
        .on_rejections(Rejections::ALL)
        .value(Quote::priced(1))
        .timeout(Duration::ZERO)
        .build();
    assert_eq!(zero_single.unwrap_err().field(), "timeout");

    let unnamed = FallbackLayer::builder("pricing")
        .on_rejections(Rejections::ALL)
        .step(" ", Duration::from_millis(1), move |_r| ok())
        .build();
    assert_eq!(unnamed.unwrap_err().field(), "steps");
}

#[test]
fn services_are_clone_send_sync_and_futures_send() {
    fn assert_service<S: Clone + Send + Sync + 'static>(_: &S) {}
    fn assert_send<T: Send>(_: &T) {}
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let layer = pricing_chain(&log);
    let mut svc = layer.layer(failing(open));
    assert_service(&svc);
    let fut = svc.call(req("PT"));
    assert_send(&fut);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_mid_chain_runs_no_further_step_and_counts_no_answer() {
    let later = Arc::new(AtomicUsize::new(0));
    let ran = later.clone();
    let layer = FallbackLayer::builder("pricing")
        .on_rejections(Rejections::ALL)
        .step("real-time", Duration::from_millis(500), |_r| {
            std::future::pending::<Result<Quote, BoxError>>()
        })
        .step("cache", Duration::from_millis(100), move |_r| {
            ran.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, BoxError>(Quote::priced(1)) }
        })
        .build()
        .unwrap();
    let mut fut = task::spawn(layer.layer(failing(open)).oneshot(req("PT")));
    assert_pending!(fut.poll());
    drop(fut);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(later.load(Ordering::SeqCst), 0);
    let snap = layer.handle().snapshot();
    assert_eq!(
        snap.triggered(Trigger::Rejected(RejectionKind::CircuitOpen)),
        1
    );
    assert_eq!((snap.served, snap.exhausted, snap.unavailable), (0, 0, 0));
    assert_eq!(snap.step("real-time").unwrap().timed_out, 0);
}

#[cfg(feature = "serde")]
#[tokio::test]
async fn the_snapshot_serialises_with_stable_labels() {
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .value(Quote::priced(1))
        .build()
        .unwrap();
    through_failing(&layer, open, "PT").await.unwrap();
    let json = serde_json::to_value(layer.handle().snapshot()).unwrap();
    assert_eq!(json["triggered"][0]["trigger"], "circuit_open");
    assert_eq!(json["triggered"][0]["count"], 1);
    assert_eq!(json["on_rejections"][0], "circuit_open");
    assert_eq!(json["steps"][0]["name"], "value");
    assert_eq!(json["steps"][0]["served"], 1);
}

#[tokio::test]
async fn a_response_type_without_room_for_the_marker_is_served_unmarked_on_request() {
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .value("no quote".to_owned())
        .unmarked()
        .build()
        .unwrap();
    let primary = service_fn(|_r: Req| async { Err::<String, BoxError>(open()) });
    let answer = layer.layer(primary).oneshot(req("PT")).await.unwrap();
    assert_eq!(answer, "no quote");
    assert_eq!(layer.handle().snapshot().step("value").unwrap().served, 1);
}
