//! A dependency that misbehaves never breaks what a layer promises: its `call`,
//! its `poll_ready` or its future panicking (caught bare, in a spawned task, or by
//! tower-http's `CatchPanicLayer`), a readiness error, a response future dropped
//! before it is polled, and a response future polled again after it answered.
//! Every slot, permit and probe is free afterwards, the panicking service works on
//! its next call, and errors come back as each layer documents.
//!
//! The dependency's future behaves as an `async` block does: polled again after it
//! answered (or panicked), it panics. So a layer that polled its inner future once
//! it was done would fail these tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::core::{find_rejection, BoxError, Deadline, DeadlineLayer, ErrorsAsFailures};
use seawall::degradation::{DegradationLayer, Fixed};
use seawall::fallback::{FallbackLayer, Served, Trigger};
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
use tower_http::catch_panic::CatchPanicLayer;

type Req = Request<String>;
type Res = Response<String>;

fn req() -> Req {
    req_to("freight.test")
}

fn req_to(host: &str) -> Req {
    Request::builder()
        .uri(format!("http://{host}/quote"))
        .body(String::new())
        .unwrap()
}

fn host(req: &Req) -> String {
    req.uri().host().unwrap_or("").to_owned()
}

const POOL_CLOSED: &str = "connection pool closed";
const REFUSED: &str = "connection refused";

/// What the dependency does on its next `poll_ready` and `call`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Act {
    /// Ready, and answers `quote`.
    Answer,
    /// Ready, and fails with [`REFUSED`].
    Fail,
    /// `poll_ready` fails with [`POOL_CLOSED`].
    ReadyErr,
    /// `poll_ready` panics.
    PanicInReady,
    /// `call` panics.
    PanicInCall,
    /// The response future panics when polled.
    PanicWhenPolled,
    /// The response future never answers.
    Hang,
}

/// A dependency whose behaviour a test sets with [`Dependency::set`].
#[derive(Clone)]
struct Dependency {
    act: Arc<Mutex<Act>>,
    calls: Arc<AtomicUsize>,
}

impl Dependency {
    fn new(act: Act) -> Self {
        Self {
            act: Arc::new(Mutex::new(act)),
            calls: Arc::default(),
        }
    }

    fn set(&self, act: Act) {
        *self.act.lock().unwrap() = act;
    }

    fn act(&self) -> Act {
        *self.act.lock().unwrap()
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Service<Req> for Dependency {
    type Response = Res;
    type Error = BoxError;
    type Future = Answer;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self.act() {
            Act::ReadyErr => Poll::Ready(Err(POOL_CLOSED.into())),
            Act::PanicInReady => panic!("the supplier's client panicked in poll_ready"),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, _req: Req) -> Answer {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.act() {
            Act::PanicInCall => panic!("the supplier's client panicked in call"),
            act => Answer { act, done: false },
        }
    }
}

/// The dependency's response future; like an `async` block, it panics when polled
/// again after it answered or panicked.
struct Answer {
    act: Act,
    done: bool,
}

impl Future for Answer {
    type Output = Result<Res, BoxError>;

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        assert!(
            !self.done,
            "the supplier's future was polled after it was done"
        );
        if self.act == Act::Hang {
            return Poll::Pending;
        }
        self.done = true;
        match self.act {
            Act::PanicWhenPolled => panic!("the supplier's client panicked reading the answer"),
            Act::Fail => Poll::Ready(Err(REFUSED.into())),
            _ => Poll::Ready(Ok(Response::new("quote".to_owned()))),
        }
    }
}

fn poll_once<F: Future>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

fn body<E: std::fmt::Debug>(answer: Result<Res, E>) -> String {
    answer.unwrap().into_body()
}

fn message(answer: Result<Res, BoxError>) -> String {
    answer.unwrap_err().to_string()
}

/// Whether `f` panicked; the panic is caught, and what `f` borrowed (the service) lives on.
fn panics<R>(f: impl FnOnce() -> R) -> bool {
    catch_unwind(AssertUnwindSafe(f)).is_err()
}

// ---------------------------------------------------------------------------
// Bulkhead, default mode: one slot and no line, so a slot kept by mistake turns
// the next call away with `BulkheadFull`.

fn one_slot() -> BulkheadLayer {
    BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .max_queue(0)
        .build()
        .unwrap()
}

/// A call through a fresh service of `layer` to a healthy dependency: `quote`
/// only if the bulkhead admits it.
async fn admitted<L>(layer: &L) -> String
where
    L: Layer<Dependency>,
    L::Service: Service<Req, Response = Res, Error = BoxError>,
{
    body(
        layer
            .layer(Dependency::new(Act::Answer))
            .oneshot(req())
            .await,
    )
}

#[tokio::test(start_paused = true)]
async fn bulkhead_a_call_that_panics_frees_its_slot_at_once_and_the_service_works_again() {
    let layer = one_slot();
    let handle = layer.handle();
    let dep = Dependency::new(Act::PanicInCall);
    let mut svc = layer.layer(dep.clone());

    svc.ready().await.unwrap();
    assert!(panics(|| svc.call(req())));
    // Free while the service that panicked is still alive.
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(admitted(&layer).await, "quote");

    dep.set(Act::Answer);
    assert_eq!(body(svc.ready().await.unwrap().call(req()).await), "quote");
    let s = handle.snapshot();
    assert_eq!((s.admitted, s.active, s.rejected_full), (3, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn bulkhead_a_future_that_panics_in_a_spawned_task_frees_its_slot() {
    let layer = one_slot();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::new(Act::PanicWhenPolled));
    let joined = tokio::spawn(svc.clone().oneshot(req())).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(admitted(&layer).await, "quote");
    assert_eq!(handle.snapshot().rejected_full, 0);
}

/// A future whose inner future panicked gives its slot back while the panic
/// unwinds, kept alive or not, and answers an error if polled again, without
/// polling the dead inner future (which would panic again).
#[tokio::test(start_paused = true)]
async fn bulkhead_a_future_whose_inner_future_panicked_frees_its_slot_at_once_and_errs_if_polled_again(
) {
    let layer = one_slot();
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::PanicWhenPolled));
    let mut fut = std::pin::pin!(svc.ready().await.unwrap().call(req()));
    assert!(panics(|| poll_once(fut.as_mut())));
    assert_eq!(handle.snapshot().active, 0, "freed with the future alive");
    assert_eq!(admitted(&layer).await, "quote");
    let again = catch_unwind(AssertUnwindSafe(|| poll_once(fut.as_mut())));
    match again {
        Ok(Poll::Ready(Err(_))) => {}
        Ok(other) => panic!("polled again: {:?}", other.map(|r| r.map(|_| ()))),
        Err(_) => panic!("polled again, it polled the dead inner future"),
    }
    assert_eq!(handle.snapshot().active, 0);
}

/// The caller keeps `CatchPanicLayer`'s future after its 500: the slot is
/// already free.
#[tokio::test(start_paused = true)]
async fn bulkhead_a_future_kept_after_catch_panic_answered_holds_no_slot() {
    let layer = one_slot();
    let handle = layer.handle();
    let mut svc = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .layer(layer.clone())
        .service(Dependency::new(Act::PanicWhenPolled));
    let mut fut = std::pin::pin!(svc.ready().await.unwrap().call(req()));
    let Poll::Ready(Ok(res)) = poll_once(fut.as_mut()) else {
        panic!("CatchPanicLayer answers at once");
    };
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(admitted(&layer).await, "quote");
}

#[tokio::test(start_paused = true)]
async fn bulkhead_a_future_that_panics_under_catch_panic_frees_its_slot() {
    let layer = one_slot();
    let handle = layer.handle();
    let svc = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .layer(layer.clone())
        .service(Dependency::new(Act::PanicWhenPolled));
    let res = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(admitted(&layer).await, "quote");
}

#[tokio::test(start_paused = true)]
async fn bulkhead_a_call_that_waited_in_line_and_panics_frees_the_slot_it_was_handed() {
    let layer = BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .max_queue(1)
        .max_wait(Duration::from_secs(1))
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut holder = layer.layer(Dependency::new(Act::Hang));
    let mut holding = Box::pin(holder.call(req()));
    assert!(poll_once(holding.as_mut()).is_pending());

    let waiter = tokio::spawn(
        layer
            .layer(Dependency::new(Act::PanicInCall))
            .oneshot(req()),
    );
    tokio::task::yield_now().await;
    assert_eq!(handle.snapshot().queued, 1);

    // The slot goes to the waiter, whose dependency panics in `call`.
    drop(holding);
    assert!(waiter.await.unwrap_err().is_panic());
    let s = handle.snapshot();
    assert_eq!((s.active, s.queued, s.rejected_timeout), (0, 0, 0));
    assert_eq!(admitted(&layer).await, "quote");
}

#[tokio::test(start_paused = true)]
async fn bulkhead_a_readiness_error_is_the_calls_error_and_frees_the_slot() {
    let layer = one_slot();
    let handle = layer.handle();
    let dep = Dependency::new(Act::ReadyErr);
    let mut svc = layer.layer(dep.clone());
    // Always ready itself: the inner service's error comes through the future.
    svc.ready().await.unwrap();
    let err = svc.call(req()).await.unwrap_err();
    assert_eq!(err.to_string(), POOL_CLOSED);
    assert!(find_rejection(&*err).is_none());
    assert_eq!(dep.calls(), 0);
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(admitted(&layer).await, "quote");
}

#[tokio::test(start_paused = true)]
async fn bulkhead_a_response_future_dropped_before_its_first_poll_frees_its_slot() {
    let layer = one_slot();
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::Hang));
    let fut = svc.ready().await.unwrap().call(req());
    assert_eq!(handle.snapshot().active, 1);
    drop(fut);
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(admitted(&layer).await, "quote");
}

#[tokio::test(start_paused = true)]
async fn bulkhead_a_future_polled_again_after_it_answered_errs_without_polling_the_dependency() {
    let layer = one_slot();
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::Answer));
    let mut fut = pin!(svc.ready().await.unwrap().call(req()));
    let Poll::Ready(answer) = poll_once(fut.as_mut()) else {
        panic!("a ready dependency's answer was pending");
    };
    assert_eq!(body(answer), "quote");
    let Poll::Ready(again) = poll_once(fut.as_mut()) else {
        panic!("a second poll was pending");
    };
    assert!(again.is_err());
    assert_eq!(handle.snapshot().active, 0);
}

#[tokio::test(start_paused = true)]
async fn bulkhead_a_call_that_panics_with_its_permit_lent_to_the_request_frees_its_slot() {
    let base = one_slot();
    let handle = base.handle();
    let mut svc = base
        .clone()
        .permit_in_extensions()
        .layer(Dependency::new(Act::PanicInCall));
    svc.ready().await.unwrap();
    // The request (and the permit handle in its extensions) went down with the call.
    assert!(panics(|| svc.call(req())));
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(admitted(&base).await, "quote");
}

#[tokio::test(start_paused = true)]
async fn bulkhead_a_future_that_panics_while_held_until_body_end_frees_its_slot() {
    let base = one_slot();
    let handle = base.handle();
    let svc = base
        .clone()
        .hold_until_body_end()
        .layer(Dependency::new(Act::PanicWhenPolled));
    let joined = tokio::spawn(svc.oneshot(req())).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(admitted(&base).await, "quote");
}

#[tokio::test(start_paused = true)]
async fn bulkhead_a_call_let_through_beyond_the_limit_that_panics_ends_its_over_limit_permit() {
    let layer = BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .max_queue(0)
        .shadow(true)
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut holder = layer.layer(Dependency::new(Act::Hang));
    let mut holding = Box::pin(holder.call(req()));
    assert!(poll_once(holding.as_mut()).is_pending());

    // Full: shadow mode lets this one through, and its dependency panics in `call`.
    let mut svc = layer.layer(Dependency::new(Act::PanicInCall));
    svc.ready().await.unwrap();
    assert!(panics(|| svc.call(req())));
    let s = handle.snapshot();
    assert_eq!((s.active, s.over_limit, s.shadow_rejected_full), (1, 0, 1));
    drop(holding);
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(admitted(&layer).await, "quote");
}

// ---------------------------------------------------------------------------
// Bulkhead, backpressure mode: the slot is reserved in `poll_ready`.

fn ready_now<S: Service<Req>>(svc: &mut S) -> Poll<Result<(), S::Error>> {
    svc.poll_ready(&mut Context::from_waker(Waker::noop()))
}

/// After `panicked`'s dependency panicked: its slot is not reserved and none is
/// active, another service of the bulkhead is ready at once and its call goes
/// out, and `panicked` works again once `dep` recovers.
async fn slot_is_free_and_the_service_works_again(
    layer: &seawall::bulkhead::BackpressureLayer,
    mut panicked: seawall::bulkhead::Backpressure<Dependency>,
    dep: &Dependency,
) {
    let handle = layer.handle();
    assert!(!panicked.is_reserved());
    assert_eq!(handle.snapshot().active, 0);
    let mut other = layer.layer(Dependency::new(Act::Answer));
    assert!(matches!(ready_now(&mut other), Poll::Ready(Ok(()))));
    assert_eq!(body(other.call(req()).await), "quote");
    dep.set(Act::Answer);
    assert_eq!(
        body(panicked.ready().await.unwrap().call(req()).await),
        "quote"
    );
    assert_eq!(handle.snapshot().active, 0);
}

#[tokio::test(start_paused = true)]
async fn backpressure_a_call_that_panics_frees_the_reserved_slot_and_the_service_works_again() {
    let layer = one_slot().backpressure();
    let dep = Dependency::new(Act::PanicInCall);
    let mut svc = layer.layer(dep.clone());

    svc.ready().await.unwrap();
    assert!(svc.is_reserved());
    assert!(panics(|| svc.call(req())));
    slot_is_free_and_the_service_works_again(&layer, svc, &dep).await;
}

#[tokio::test(start_paused = true)]
async fn backpressure_a_future_that_panics_in_a_spawned_task_frees_its_slot() {
    let layer = one_slot().backpressure();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::new(Act::PanicWhenPolled));
    let joined = tokio::spawn(svc.oneshot(req())).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(handle.snapshot().active, 0);
    let mut other = layer.layer(Dependency::new(Act::Answer));
    assert!(matches!(ready_now(&mut other), Poll::Ready(Ok(()))));
}

#[tokio::test(start_paused = true)]
async fn backpressure_a_future_that_panics_under_catch_panic_frees_its_slot() {
    let layer = one_slot().backpressure();
    let handle = layer.handle();
    let svc = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .layer(layer.clone())
        .service(Dependency::new(Act::PanicWhenPolled));
    let res = svc.oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(handle.snapshot().active, 0);
    let mut other = layer.layer(Dependency::new(Act::Answer));
    assert!(matches!(ready_now(&mut other), Poll::Ready(Ok(()))));
}

/// As a readiness error does, a panic in the inner `poll_ready` gives the reserved
/// slot back (while it unwinds): another service is ready at once, and the one
/// that panicked works once the dependency recovers.
#[tokio::test(start_paused = true)]
async fn backpressure_a_poll_ready_that_panics_frees_the_reserved_slot_at_once() {
    let layer = one_slot().backpressure();
    let dep = Dependency::new(Act::PanicInReady);
    let mut kept = layer.layer(dep.clone());
    assert!(panics(|| ready_now(&mut kept)));
    slot_is_free_and_the_service_works_again(&layer, kept, &dep).await;
}

#[tokio::test(start_paused = true)]
async fn backpressure_a_readiness_error_is_returned_and_frees_the_reserved_slot() {
    let layer = one_slot().backpressure();
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::ReadyErr));
    let Poll::Ready(Err(err)) = ready_now(&mut svc) else {
        panic!("a readiness error was not returned");
    };
    assert_eq!(err.to_string(), POOL_CLOSED);
    assert!(!svc.is_reserved());
    assert_eq!(handle.snapshot().active, 0);
    let mut other = layer.layer(Dependency::new(Act::Answer));
    assert!(matches!(ready_now(&mut other), Poll::Ready(Ok(()))));
}

#[tokio::test(start_paused = true)]
async fn backpressure_a_response_future_dropped_before_its_first_poll_frees_its_slot() {
    let layer = one_slot().backpressure();
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::Hang));
    let fut = svc.ready().await.unwrap().call(req());
    assert_eq!(handle.snapshot().active, 1);
    drop(fut);
    assert_eq!(handle.snapshot().active, 0);
    let mut other = layer.layer(Dependency::new(Act::Answer));
    assert!(matches!(ready_now(&mut other), Poll::Ready(Ok(()))));
}

// ---------------------------------------------------------------------------
// Keyed bulkhead: room for one key, so a key whose slot was kept by mistake is
// busy, is never forgotten, and turns every new key away.

fn one_key() -> seawall::bulkhead::KeyedBulkheadLayer<String, fn(&Req) -> String> {
    BulkheadLayer::builder("suppliers")
        .max_concurrent(1)
        .max_queue(0)
        .keyed(host as fn(&Req) -> String)
        .max_keys(1)
        .build()
        .unwrap()
}

/// A call for a new key through a fresh service of `layer`: admitted only if the
/// key before it is idle.
async fn new_key_admitted(
    layer: &seawall::bulkhead::KeyedBulkheadLayer<String, fn(&Req) -> String>,
    key: &str,
) -> String {
    body(
        layer
            .layer(Dependency::new(Act::Answer))
            .oneshot(req_to(key))
            .await,
    )
}

#[tokio::test(start_paused = true)]
async fn keyed_bulkhead_a_call_that_panics_leaves_its_key_idle_and_the_service_works_again() {
    let layer = one_key();
    let handle = layer.handle();
    let dep = Dependency::new(Act::PanicInCall);
    let mut svc = layer.layer(dep.clone());

    svc.ready().await.unwrap();
    assert!(panics(|| svc.call(req_to("a.test"))));
    assert_eq!(handle.snapshot_of(&"a.test".to_owned()).unwrap().active, 0);
    assert_eq!(new_key_admitted(&layer, "b.test").await, "quote");
    let s = handle.snapshot();
    assert_eq!((s.active, s.rejected_key_limit, s.evicted), (0, 0, 1));

    dep.set(Act::Answer);
    let answer = svc.ready().await.unwrap().call(req_to("a.test")).await;
    assert_eq!(body(answer), "quote");
}

#[tokio::test(start_paused = true)]
async fn keyed_bulkhead_a_future_that_panics_in_a_spawned_task_leaves_its_key_idle() {
    let layer = one_key();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::new(Act::PanicWhenPolled));
    let joined = tokio::spawn(svc.oneshot(req_to("a.test"))).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(new_key_admitted(&layer, "b.test").await, "quote");
    assert_eq!(handle.snapshot().rejected_key_limit, 0);
}

#[tokio::test(start_paused = true)]
async fn keyed_bulkhead_a_future_that_panics_under_catch_panic_leaves_its_key_idle() {
    let layer = one_key();
    let handle = layer.handle();
    let svc = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .layer(layer.clone())
        .service(Dependency::new(Act::PanicWhenPolled));
    let res = svc.oneshot(req_to("a.test")).await.unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(new_key_admitted(&layer, "b.test").await, "quote");
    assert_eq!(handle.snapshot().rejected_key_limit, 0);
}

#[tokio::test(start_paused = true)]
async fn keyed_bulkhead_a_readiness_error_is_the_calls_error_and_leaves_its_key_idle() {
    let layer = one_key();
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::ReadyErr));
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(req_to("a.test"))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), POOL_CLOSED);
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(new_key_admitted(&layer, "b.test").await, "quote");
}

#[tokio::test(start_paused = true)]
async fn keyed_bulkhead_a_response_future_dropped_before_its_first_poll_leaves_its_key_idle() {
    let layer = one_key();
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::Hang));
    let fut = svc.ready().await.unwrap().call(req_to("a.test"));
    assert_eq!(handle.snapshot().active, 1);
    drop(fut);
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(new_key_admitted(&layer, "b.test").await, "quote");
}

// ---------------------------------------------------------------------------
// Fallback: fires on the triggers selected (here, a failed call), never on a
// panic, which is no answer to stand in for; the layer keeps working.

fn cached() -> FallbackLayer<
    seawall::fallback::NoCapture,
    seawall::fallback::Single<seawall::fallback::Value<Res>>,
    ErrorsAsFailures,
    seawall::fallback::Plain,
> {
    FallbackLayer::builder("freight-quote")
        .on_failure(ErrorsAsFailures)
        .value(Response::new("cached".to_owned()))
        .build()
        .unwrap()
}

/// The fallback answers for a failing dependency: `cached`, marked as served.
async fn still_falls_back<S>(svc: &mut S)
where
    S: Service<Req, Response = Res, Error = BoxError>,
{
    let res = svc.ready().await.unwrap().call(req()).await.unwrap();
    assert_eq!(
        res.extensions().get::<Served>().map(Served::trigger),
        Some(Trigger::FailedError)
    );
    assert_eq!(res.into_body(), "cached");
}

#[tokio::test(start_paused = true)]
async fn fallback_a_primary_whose_call_panics_is_not_answered_for_and_the_layer_works_again() {
    let layer = cached();
    let handle = layer.handle();
    let dep = Dependency::new(Act::PanicInCall);
    let mut svc = layer.layer(dep.clone());

    svc.ready().await.unwrap();
    assert!(panics(|| svc.call(req())));
    let s = handle.snapshot();
    assert_eq!((s.served, s.passed_through), (0, 0));

    dep.set(Act::Fail);
    still_falls_back(&mut svc).await;
    dep.set(Act::Answer);
    assert_eq!(body(svc.ready().await.unwrap().call(req()).await), "quote");
    assert_eq!(handle.snapshot().served, 1);
}

#[tokio::test(start_paused = true)]
async fn fallback_a_primary_future_that_panics_in_a_spawned_task_is_not_answered_for() {
    let layer = cached();
    let handle = layer.handle();
    let dep = Dependency::new(Act::PanicWhenPolled);
    let svc = layer.layer(dep.clone());
    let joined = tokio::spawn(svc.clone().oneshot(req())).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(handle.snapshot().served, 0);

    dep.set(Act::Fail);
    still_falls_back(&mut svc.clone()).await;
}

#[tokio::test(start_paused = true)]
async fn fallback_a_primary_future_that_panics_under_catch_panic_is_a_500_not_a_served_answer() {
    let layer = cached();
    let handle = layer.handle();
    let dep = Dependency::new(Act::PanicWhenPolled);
    let svc = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .layer(layer.clone())
        .service(dep.clone());
    let res = svc.clone().oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(res.extensions().get::<Served>().is_none());
    assert_eq!(handle.snapshot().served, 0);

    dep.set(Act::Fail);
    let res = svc.oneshot(req()).await.unwrap();
    let read = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(read, "cached");
}

#[tokio::test(start_paused = true)]
async fn fallback_a_primary_whose_poll_ready_panics_leaves_the_service_working() {
    let layer = cached();
    let dep = Dependency::new(Act::PanicInReady);
    let mut svc = layer.layer(dep.clone());
    assert!(panics(|| ready_now(&mut svc)));
    dep.set(Act::Fail);
    still_falls_back(&mut svc).await;
}

#[tokio::test(start_paused = true)]
async fn fallback_a_readiness_error_stays_an_error_in_the_generic_mode() {
    let layer = cached();
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::ReadyErr));
    let Poll::Ready(Err(err)) = ready_now(&mut svc) else {
        panic!("a readiness error was not returned");
    };
    assert_eq!(err.to_string(), POOL_CLOSED);
    assert_eq!(handle.snapshot().served, 0);
}

/// The docs: "Polling it again after it completed returns `Pending`."
#[tokio::test(start_paused = true)]
async fn fallback_a_future_polled_again_after_it_answered_is_pending_and_polls_nothing_again() {
    let layer = cached();
    let handle = layer.handle();
    let dep = Dependency::new(Act::Answer);
    let mut svc = layer.layer(dep.clone());

    let mut fut = pin!(svc.ready().await.unwrap().call(req()));
    assert!(matches!(poll_once(fut.as_mut()), Poll::Ready(Ok(_))));
    assert!(poll_once(fut.as_mut()).is_pending());

    // The same after the fallback answered.
    dep.set(Act::Fail);
    let mut fut = pin!(svc.ready().await.unwrap().call(req()));
    let Poll::Ready(Ok(res)) = poll_once(fut.as_mut()) else {
        panic!("the fallback did not answer");
    };
    assert_eq!(res.into_body(), "cached");
    assert!(poll_once(fut.as_mut()).is_pending());
    assert_eq!(handle.snapshot().served, 1);
}

// ---------------------------------------------------------------------------
// Deadline: the deadline is current only for the length of a `call` or a poll,
// and is put back when either panics (it lives on the thread, so a deadline left
// behind would bound whatever that thread runs next).

fn seeing_deadline(
    seen: Arc<Mutex<Option<Deadline>>>,
) -> impl Service<Req, Response = Res, Error = BoxError, Future = Answer> + Clone {
    let dep = Dependency::new(Act::PanicInCall);
    service_fn(move |r: Req| {
        *seen.lock().unwrap() = Deadline::current();
        dep.clone().call(r)
    })
}

#[tokio::test(start_paused = true)]
async fn deadline_a_call_that_panics_puts_back_the_deadline_it_replaced() {
    let seen = Arc::new(Mutex::new(None));
    let mut svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .layer(seeing_deadline(seen.clone()));
    let now = tokio::time::Instant::now();
    let outer = Deadline::after(now, Duration::from_secs(10));

    assert!(matches!(ready_now(&mut svc), Poll::Ready(Ok(()))));
    let after = outer.sync_scope(|| {
        assert!(panics(|| svc.call(req())));
        Deadline::current()
    });
    assert_eq!(
        *seen.lock().unwrap(),
        Some(Deadline::after(now, Duration::from_millis(300)))
    );
    assert_eq!(after, Some(outer));
    assert_eq!(Deadline::current(), None);

    // The next call gets a deadline of its own.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(matches!(ready_now(&mut svc), Poll::Ready(Ok(()))));
    assert!(panics(|| svc.call(req())));
    let next = tokio::time::Instant::now() + Duration::from_millis(300);
    assert_eq!(*seen.lock().unwrap(), Some(Deadline::at(next)));
    assert_eq!(Deadline::current(), None);
}

#[tokio::test(start_paused = true)]
async fn deadline_a_future_that_panics_when_polled_puts_back_the_deadline_it_replaced() {
    let mut svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .layer(Dependency::new(Act::PanicWhenPolled));
    let mut fut = pin!(svc.ready().await.unwrap().call(req()));
    assert!(panics(|| poll_once(fut.as_mut())));
    assert_eq!(Deadline::current(), None);

    let outer = Deadline::after(tokio::time::Instant::now(), Duration::from_secs(10));
    let mut fut = pin!(svc.ready().await.unwrap().call(req()));
    let after = outer.sync_scope(|| {
        assert!(panics(|| poll_once(fut.as_mut())));
        Deadline::current()
    });
    assert_eq!(after, Some(outer));
}

#[tokio::test(start_paused = true)]
async fn deadline_a_future_that_panics_in_a_spawned_task_leaves_no_deadline_on_the_thread() {
    let svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .layer(Dependency::new(Act::PanicWhenPolled));
    // The test's runtime has one thread: the spawned task ran on this one.
    let joined = tokio::spawn(svc.oneshot(req())).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(Deadline::current(), None);
    let next_task_sees = tokio::spawn(async { Deadline::current() }).await.unwrap();
    assert_eq!(next_task_sees, None);
}

#[tokio::test(start_paused = true)]
async fn deadline_a_future_that_panics_under_catch_panic_leaves_no_deadline_behind() {
    let svc = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .layer(DeadlineLayer::new(Duration::from_millis(300)).unwrap())
        .service(Dependency::new(Act::PanicWhenPolled));
    let res = svc.oneshot(req()).await.unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(Deadline::current(), None);
}

#[tokio::test(start_paused = true)]
async fn deadline_a_readiness_error_is_returned_from_poll_ready() {
    let mut svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .layer(Dependency::new(Act::ReadyErr));
    let Poll::Ready(Err(err)) = ready_now(&mut svc) else {
        panic!("a readiness error was not returned");
    };
    assert_eq!(err.to_string(), POOL_CLOSED);
}

#[tokio::test(start_paused = true)]
async fn deadline_a_response_future_dropped_before_its_first_poll_leaves_no_deadline() {
    let mut svc = DeadlineLayer::new(Duration::from_millis(300))
        .unwrap()
        .layer(Dependency::new(Act::Hang));
    drop(svc.ready().await.unwrap().call(req()));
    assert_eq!(Deadline::current(), None);
    // A later call is bounded by its own deadline, not by a leftover one.
    let mut fut = pin!(svc.ready().await.unwrap().call(req()));
    assert!(poll_once(fut.as_mut()).is_pending());
    tokio::time::advance(Duration::from_millis(300)).await;
    let err = fut.await.unwrap_err();
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(seawall::core::RejectionKind::DeadlineExceeded)
    );
}

// ---------------------------------------------------------------------------
// Keyed circuit breaker: a panic is its key's failure and frees any probe slot;
// other keys are untouched.

fn keyed_breaker(
    threshold: u32,
) -> seawall::circuit_breaker::KeyedCircuitBreakerLayer<String, fn(&Req) -> String, ErrorsAsFailures>
{
    CircuitBreakerLayer::builder("suppliers")
        .jitter(0.0)
        .consecutive_failures(threshold)
        .open_for(Duration::from_secs(10))
        .keyed(host as fn(&Req) -> String)
        .max_keys(16)
        .build()
        .unwrap()
}

fn key(host: &str) -> String {
    host.to_owned()
}

#[tokio::test(start_paused = true)]
async fn keyed_breaker_a_call_that_panics_while_closed_is_a_failure_and_the_service_works_again() {
    let layer = keyed_breaker(2);
    let handle = layer.handle();
    let dep = Dependency::new(Act::PanicInCall);
    let mut svc = layer.layer(dep.clone());

    svc.ready().await.unwrap();
    assert!(panics(|| svc.call(req_to("a.test"))));
    let s = handle.get(&key("a.test")).unwrap().snapshot();
    assert_eq!(
        (s.state, s.counters.failures, s.counters.cancelled),
        (State::Closed, 1, 0)
    );

    dep.set(Act::Answer);
    let answer = svc.ready().await.unwrap().call(req_to("a.test")).await;
    assert_eq!(body(answer), "quote");
    assert_eq!(
        handle
            .get(&key("a.test"))
            .unwrap()
            .snapshot()
            .counters
            .successes,
        1
    );
}

#[tokio::test(start_paused = true)]
async fn keyed_breaker_a_future_that_panics_in_a_spawned_task_is_a_failure_of_its_key_only() {
    let layer = keyed_breaker(2);
    let handle = layer.handle();
    let dep = Dependency::new(Act::PanicWhenPolled);
    let svc = layer.layer(dep.clone());
    for _ in 0..2 {
        let joined = tokio::spawn(svc.clone().oneshot(req_to("a.test"))).await;
        assert!(joined.unwrap_err().is_panic());
    }
    let s = handle.get(&key("a.test")).unwrap().snapshot();
    assert_eq!(s.state, State::Open);
    assert_eq!((s.counters.failures, s.counters.cancelled), (2, 0));

    dep.set(Act::Answer);
    assert_eq!(body(svc.clone().oneshot(req_to("b.test")).await), "quote");
    assert_eq!(handle.get(&key("b.test")).unwrap().state(), State::Closed);
    // The open key turns calls away without reaching the dependency.
    let calls = dep.calls();
    let err = svc.oneshot(req_to("a.test")).await.unwrap_err();
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(seawall::core::RejectionKind::CircuitOpen)
    );
    assert_eq!(dep.calls(), calls);
}

#[tokio::test(start_paused = true)]
async fn keyed_breaker_a_future_that_panics_under_catch_panic_is_a_failure_not_a_cancellation() {
    let layer = keyed_breaker(2);
    let handle = layer.handle();
    let svc = ServiceBuilder::new()
        .layer(CatchPanicLayer::new())
        .layer(layer.clone())
        .service(Dependency::new(Act::PanicWhenPolled));
    for _ in 0..2 {
        let res = svc.clone().oneshot(req_to("a.test")).await.unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
    let s = handle.get(&key("a.test")).unwrap().snapshot();
    assert_eq!(s.state, State::Open);
    assert_eq!((s.counters.failures, s.counters.cancelled), (2, 0));
}

/// Opens `a.test`'s breaker with one failure and waits out its interval.
async fn open_then_due(
    svc: &mut impl Service<Req, Response = Res, Error = BoxError>,
    dep: &Dependency,
) {
    dep.set(Act::Fail);
    let failed = svc.ready().await.unwrap().call(req_to("a.test")).await;
    assert_eq!(message(failed), REFUSED);
    tokio::time::advance(Duration::from_secs(10)).await;
}

#[tokio::test(start_paused = true)]
async fn keyed_breaker_a_probe_whose_future_panics_in_a_spawned_task_frees_its_slot() {
    let layer = keyed_breaker(1);
    let handle = layer.handle();
    let dep = Dependency::new(Act::Fail);
    let mut svc = layer.layer(dep.clone());
    open_then_due(&mut svc, &dep).await;

    dep.set(Act::PanicWhenPolled);
    let joined = tokio::spawn(svc.clone().oneshot(req_to("a.test"))).await;
    assert!(joined.unwrap_err().is_panic());
    let s = handle.get(&key("a.test")).unwrap().snapshot();
    assert_eq!((s.state, s.probes_in_flight), (State::Open, 0));
    assert_eq!(s.counters.probe_failures, 1);

    // The next interval's probe is admitted and closes the breaker.
    dep.set(Act::Answer);
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(body(svc.oneshot(req_to("a.test")).await), "quote");
    assert_eq!(handle.get(&key("a.test")).unwrap().state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn keyed_breaker_a_probe_dropped_before_its_first_poll_frees_its_slot_as_cancelled() {
    let layer = keyed_breaker(1);
    let handle = layer.handle();
    let dep = Dependency::new(Act::Fail);
    let mut svc = layer.layer(dep.clone());
    open_then_due(&mut svc, &dep).await;

    dep.set(Act::Hang);
    let probe = svc.ready().await.unwrap().call(req_to("a.test"));
    assert_eq!(
        handle
            .get(&key("a.test"))
            .unwrap()
            .snapshot()
            .probes_in_flight,
        1
    );
    drop(probe);
    let s = handle.get(&key("a.test")).unwrap().snapshot();
    assert_eq!((s.probes_in_flight, s.counters.cancelled), (0, 1));
    assert_eq!(s.counters.probe_failures, 0);

    // Still half-open: the next caller is the probe, and closes it.
    dep.set(Act::Answer);
    assert_eq!(
        body(svc.ready().await.unwrap().call(req_to("a.test")).await),
        "quote"
    );
    assert_eq!(handle.get(&key("a.test")).unwrap().state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn keyed_breaker_a_readiness_error_is_returned_and_records_nothing() {
    let layer = keyed_breaker(1);
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::ReadyErr));
    let Poll::Ready(Err(err)) = ready_now(&mut svc) else {
        panic!("a readiness error was not returned");
    };
    assert_eq!(err.to_string(), POOL_CLOSED);
    // The key is known only in `call`: no breaker was made, none was tripped.
    assert!(handle.is_empty());
}

#[tokio::test(start_paused = true)]
async fn keyed_breaker_a_future_polled_again_after_it_answered_errs_and_reports_once() {
    let layer = keyed_breaker(1);
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::Answer));
    let mut fut = pin!(svc.ready().await.unwrap().call(req_to("a.test")));
    assert!(matches!(poll_once(fut.as_mut()), Poll::Ready(Ok(_))));
    assert!(matches!(poll_once(fut.as_mut()), Poll::Ready(Err(_))));
    let s = handle.get(&key("a.test")).unwrap().snapshot();
    assert_eq!(
        (s.counters.calls, s.counters.successes, s.counters.failures),
        (1, 1, 0)
    );
    assert_eq!(s.state, State::Closed);
}

#[tokio::test(start_paused = true)]
async fn keyed_breaker_a_future_polled_again_after_its_dependency_panicked_errs_and_counts_once() {
    let layer = keyed_breaker(2);
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::PanicWhenPolled));
    let mut fut = pin!(svc.ready().await.unwrap().call(req_to("a.test")));
    assert!(panics(|| poll_once(fut.as_mut())));
    for _ in 0..2 {
        assert!(matches!(poll_once(fut.as_mut()), Poll::Ready(Err(_))));
    }
    let s = handle.get(&key("a.test")).unwrap().snapshot();
    assert_eq!(s.state, State::Closed);
    assert_eq!((s.counters.calls, s.counters.failures), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn keyed_breaker_a_poll_ready_that_panics_records_nothing_and_the_service_works_again() {
    let layer = keyed_breaker(1);
    let handle = layer.handle();
    let dep = Dependency::new(Act::PanicInReady);
    let mut svc = layer.layer(dep.clone());
    assert!(panics(|| ready_now(&mut svc)));
    assert!(handle.is_empty());

    dep.set(Act::Answer);
    let answer = svc.ready().await.unwrap().call(req_to("a.test")).await;
    assert_eq!(body(answer), "quote");
    assert_eq!(handle.get(&key("a.test")).unwrap().state(), State::Closed);
}

// ---------------------------------------------------------------------------
// Degradation: a level whose service panics or fails has failed that request,
// recorded once; a dropped future records nothing.

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
async fn degradation_a_level_whose_poll_ready_panics_is_left() {
    let (mut svc, handle) = degradation(Dependency::new(Act::PanicInReady));
    for failures in 1..=2 {
        svc.ready().await.unwrap();
        assert!(panics(|| svc.call(req())));
        assert_eq!(handle.snapshot().state.failures, failures);
    }
    svc.ready().await.unwrap();
    assert!(panics(|| svc.call(req())));
    assert_eq!(handle.level().name.as_ref(), "canned");
    assert_eq!(body(svc.oneshot(req()).await), "canned");
}

#[tokio::test(start_paused = true)]
async fn degradation_a_level_whose_readiness_fails_answers_that_error_and_is_left() {
    let dep = Dependency::new(Act::ReadyErr);
    let (svc, handle) = degradation(dep.clone());
    for _ in 0..3 {
        assert_eq!(message(svc.clone().oneshot(req()).await), POOL_CLOSED);
    }
    assert_eq!(dep.calls(), 0);
    assert_eq!(handle.level().name.as_ref(), "canned");
}

#[tokio::test(start_paused = true)]
async fn degradation_a_dropped_future_records_nothing() {
    let dep = Dependency::new(Act::Hang);
    let (mut svc, handle) = degradation(dep.clone());
    for _ in 0..3 {
        drop(svc.ready().await.unwrap().call(req()));
    }
    dep.set(Act::Fail);
    for _ in 0..3 {
        drop(svc.ready().await.unwrap().call(req()));
    }
    let s = handle.snapshot();
    assert_eq!((s.state.level, s.state.failures), (0, 0));
    dep.set(Act::Answer);
    assert_eq!(body(svc.oneshot(req()).await), "quote");
}

#[tokio::test(start_paused = true)]
async fn degradation_a_lower_level_whose_poll_ready_panics_in_a_spawned_task_is_left() {
    let reduced = Dependency::new(Act::PanicInReady);
    let layer = DegradationLayer::builder("quotes")
        .consecutive_failures(1)
        .level("reduced", reduced.clone())
        .level("canned", Fixed::new(Response::new("canned".to_owned())))
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(Dependency::new(Act::Fail));
    assert_eq!(message(svc.clone().oneshot(req()).await), REFUSED);
    assert_eq!(handle.level().name.as_ref(), "reduced");

    // The lower level is polled in the response future, here in a spawned task.
    let joined = tokio::spawn(svc.clone().oneshot(req())).await;
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(reduced.calls(), 0);
    assert_eq!(handle.level().name.as_ref(), "canned");
    assert_eq!(body(svc.oneshot(req()).await), "canned");
}

/// The docs: "Records the classified outcome once, when it completes".
#[tokio::test(start_paused = true)]
async fn degradation_a_future_polled_again_after_it_answered_records_it_once() {
    let (mut svc, handle) = degradation(Dependency::new(Act::Fail));
    let mut fut = pin!(svc.ready().await.unwrap().call(req()));
    let Poll::Ready(answer) = poll_once(fut.as_mut()) else {
        panic!("a failing dependency's answer was pending");
    };
    assert_eq!(message(answer), REFUSED);
    for _ in 0..3 {
        assert!(matches!(poll_once(fut.as_mut()), Poll::Ready(Err(_))));
    }
    let s = handle.snapshot();
    assert_eq!((s.state.level, s.state.failures), (0, 1));
}

/// The docs: "A panic in the level's service ... is recorded as a failure of that
/// level while it unwinds, and the future then answers an error if polled again."
#[tokio::test(start_paused = true)]
async fn degradation_a_future_polled_again_after_its_level_panicked_answers_an_error_and_records_nothing(
) {
    let (mut svc, handle) = degradation(Dependency::new(Act::PanicWhenPolled));
    let mut fut = pin!(svc.ready().await.unwrap().call(req()));
    assert!(panics(|| poll_once(fut.as_mut())));
    assert_eq!(handle.snapshot().state.failures, 1);
    for _ in 0..3 {
        assert!(matches!(poll_once(fut.as_mut()), Poll::Ready(Err(_))));
    }
    let s = handle.snapshot();
    assert_eq!((s.state.level, s.state.failures), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn degradation_held_until_body_end_a_future_polled_again_after_its_level_panicked_records_nothing(
) {
    let layer = DegradationLayer::builder("quotes")
        .consecutive_failures(3)
        .level("canned", Fixed::new(Response::new("canned".to_owned())))
        .build()
        .unwrap()
        .hold_until_body_end();
    let handle = layer.handle();
    let mut svc = layer.layer(Dependency::new(Act::PanicWhenPolled));
    let mut fut = pin!(svc.ready().await.unwrap().call(req()));
    assert!(panics(|| poll_once(fut.as_mut())));
    assert_eq!(handle.snapshot().state.failures, 1);
    for _ in 0..3 {
        assert!(matches!(poll_once(fut.as_mut()), Poll::Ready(Err(_))));
    }
    let s = handle.snapshot();
    assert_eq!((s.state.level, s.state.failures), (0, 1));
}

/// A panic in the dependency (its `call` or its future) is a failure, wherever the
/// panic is caught: unwinding bare through the caller, inside `tokio::spawn` (a
/// `JoinError::is_panic`), or under tower-http's `CatchPanicLayer`, which drops the
/// future only after unwinding has ended. Every slot is freed either way.
mod panics_count_as_failures {
    use std::future::Ready;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use http::{Request, Response, StatusCode};
    use seawall::circuit_breaker::{CircuitBreakerLayer, State};
    use seawall::core::{find_rejection, BoxError, RejectionKind};
    use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
    use tower_http::catch_panic::CatchPanicLayer;

    use super::degradation;

    type Req = Request<String>;
    type Res = Response<String>;

    fn req() -> Req {
        Request::builder()
            .uri("http://freight.test/quote")
            .body(String::new())
            .unwrap()
    }

    /// A dependency whose response future panics when polled.
    fn panics_when_polled(
    ) -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone {
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
            .jitter(0.0)
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
            .jitter(0.0)
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
}
