//! A panic in the dependency (its `call` or its future) is a failure, wherever the
//! panic is caught: unwinding bare through the caller, inside `tokio::spawn` (a
//! `JoinError::is_panic`), or under tower-http's `CatchPanicLayer`, which drops the
//! future only after unwinding has ended. Every slot is freed either way.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Ready;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::core::{find_rejection, BoxError, RejectionKind};
use seawall::degradation::{DegradationLayer, Fixed};
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
use tower_http::catch_panic::CatchPanicLayer;

type Req = Request<String>;
type Res = Response<String>;

fn req() -> Req {
    Request::builder()
        .uri("http://freight.test/quote")
        .body(String::new())
        .unwrap()
}

/// A dependency whose response future panics when polled.
fn panics_when_polled() -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone
{
    service_fn(|_: Req| async move {
        if true {
            panic!("the supplier's client panicked while reading the response");
        }
        Ok::<Res, BoxError>(Response::new(String::new()))
    })
}

/// A dependency that panics inside `call` while `panicking` is set, and otherwise
/// fails (`failing`) or answers.
#[derive(Clone, Default)]
struct Supplier {
    panicking: Arc<AtomicBool>,
    failing: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
}

impl Supplier {
    /// Neither panics nor fails from now on.
    fn heal(&self) {
        self.panicking.store(false, Ordering::Relaxed);
        self.failing.store(false, Ordering::Relaxed);
    }
}

impl Service<Req> for Supplier {
    type Response = Res;
    type Error = BoxError;
    type Future = Ready<Result<Res, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.panicking.load(Ordering::Relaxed) {
            panic!("the supplier's client panicked in call");
        }
        if self.failing.load(Ordering::Relaxed) {
            std::future::ready(Err("connection refused".into()))
        } else {
            std::future::ready(Ok(Response::new("quote".to_owned())))
        }
    }
}

fn breaker(threshold: u32) -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder("freight")
        .consecutive_failures(threshold)
        .open_for(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_panicking_future_inside_a_spawned_task_trips_the_breaker() {
    let layer = breaker(3);
    let handle = layer.handle();
    let svc = layer.layer(panics_when_polled());
    for _ in 0..3 {
        let joined = tokio::spawn(svc.clone().oneshot(req())).await;
        assert!(joined.unwrap_err().is_panic());
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.counters.failures, 3);
    assert_eq!(snapshot.counters.cancelled, 0);
    assert_eq!(snapshot.counters.calls, 3);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_future_under_catch_panic_is_a_failure_not_a_cancellation() {
    let layer = breaker(3);
    let handle = layer.handle();
    let svc = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .layer(layer)
        .service(panics_when_polled());
    for _ in 0..3 {
        let res = svc.clone().oneshot(req()).await.unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.state, State::Open);
    assert_eq!(snapshot.counters.failures, 3);
    assert_eq!(snapshot.counters.cancelled, 0);
    // Open now: the next call is turned away without reaching the supplier.
    let Err(err) = svc.clone().oneshot(req()).await else {
        panic!("an open breaker let a call through");
    };
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::CircuitOpen
    );
}

#[tokio::test(start_paused = true)]
async fn a_probe_whose_call_panics_reopens_and_frees_its_slot() {
    let supplier = Supplier::default();
    let layer = breaker(1);
    let handle = layer.handle();
    let mut svc = layer.layer(supplier.clone());

    supplier.failing.store(true, Ordering::Relaxed);
    svc.ready().await.unwrap().call(req()).await.unwrap_err();
    assert_eq!(handle.state(), State::Open);

    tokio::time::advance(Duration::from_secs(10)).await;
    supplier.panicking.store(true, Ordering::Relaxed);
    svc.ready().await.unwrap();
    let unwound = catch_unwind(AssertUnwindSafe(|| svc.call(req())));
    assert!(unwound.is_err());
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(snapshot.counters.probe_failures, 1);
    assert_eq!(snapshot.state, State::Open);

    // The next interval's probe is admitted (the slot was not kept) and closes it.
    supplier.heal();
    tokio::time::advance(Duration::from_secs(10)).await;
    svc.ready().await.unwrap().call(req()).await.unwrap();
    assert_eq!(handle.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn keyed_a_probe_whose_call_panics_frees_its_slot_and_is_counted() {
    let supplier = Supplier::default();
    let layer = CircuitBreakerLayer::builder("suppliers")
        .consecutive_failures(1)
        .open_for(Duration::from_secs(10))
        .keyed(|r: &Req| r.uri().host().unwrap_or("").to_owned())
        .max_keys(16)
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(supplier.clone());

    supplier.failing.store(true, Ordering::Relaxed);
    svc.ready().await.unwrap().call(req()).await.unwrap_err();
    let key = "freight.test".to_owned();
    assert_eq!(handle.get(&key).unwrap().state(), State::Open);

    tokio::time::advance(Duration::from_secs(10)).await;
    supplier.panicking.store(true, Ordering::Relaxed);
    svc.ready().await.unwrap();
    let unwound = catch_unwind(AssertUnwindSafe(|| svc.call(req())));
    assert!(unwound.is_err());
    let snapshot = handle.get(&key).unwrap().snapshot();
    assert_eq!(snapshot.probes_in_flight, 0);
    assert_eq!(snapshot.counters.calls, 2);
    assert_eq!(snapshot.counters.failures, 2);
    assert_eq!(snapshot.state, State::Open);

    supplier.heal();
    tokio::time::advance(Duration::from_secs(10)).await;
    svc.ready().await.unwrap().call(req()).await.unwrap();
    assert_eq!(handle.get(&key).unwrap().state(), State::Closed);
    assert_eq!(supplier.calls.load(Ordering::Relaxed), 3);
}

fn degradation<S>(
    best: S,
) -> (
    impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone + Send + 'static,
    seawall::degradation::Handle,
)
where
    S: Service<Req, Response = Res, Error = BoxError> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    let layer = DegradationLayer::builder("quotes")
        .consecutive_failures(3)
        .level("canned", Fixed::new(Response::new("canned".to_owned())))
        .build()
        .unwrap();
    let handle = layer.handle();
    (layer.layer(best), handle)
}

#[tokio::test(start_paused = true)]
async fn degradation_a_level_whose_future_panics_is_left_in_a_spawned_task() {
    let (svc, handle) = degradation(panics_when_polled());
    for _ in 0..3 {
        let joined = tokio::spawn(svc.clone().oneshot(req())).await;
        assert!(joined.unwrap_err().is_panic());
    }
    assert_eq!(handle.level().name.as_ref(), "canned");
    let res = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(res.body(), "canned");
}

#[tokio::test(start_paused = true)]
async fn degradation_a_level_whose_future_panics_under_catch_panic_is_left() {
    let (svc, handle) = degradation(panics_when_polled());
    let svc = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .service(svc);
    for _ in 0..3 {
        let res = svc.clone().oneshot(req()).await.unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    assert_eq!(handle.level().name.as_ref(), "canned");
}

#[tokio::test(start_paused = true)]
async fn degradation_a_level_whose_call_panics_is_left() {
    let supplier = Supplier::default();
    supplier.panicking.store(true, Ordering::Relaxed);
    let (mut svc, handle) = degradation(supplier);
    for _ in 0..3 {
        svc.ready().await.unwrap();
        assert!(catch_unwind(AssertUnwindSafe(|| svc.call(req()))).is_err());
    }
    assert_eq!(handle.level().name.as_ref(), "canned");
}
