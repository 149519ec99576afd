//! Every layer around a service whose request is not HTTP: a `String` (a Redis key,
//! a query) and a foreign type (`bytes::Bytes`), with no newtype and no trait to
//! implement; and the deadline reaching the breaker through the recommended stack,
//! through tower's `Buffer`, and through a spawned task with `with_current_deadline`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::CircuitBreakerLayer;
use seawall::core::{
    find_rejection, with_current_deadline, BoxError, Deadline, DeadlineLayer, RejectionKind,
};
use seawall::degradation::{DegradationLayer, Fixed};
use seawall::fallback::{FallbackLayer, Rejections};
use seawall::ServiceBuilderExt;
use tokio::time::Instant;
use tower::buffer::BufferLayer;
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};

/// A dependency that echoes its request.
fn echo<Req: Send + 'static>(
) -> impl Service<Req, Response = Req, Error = Infallible, Future: Send> + Clone + Send + Sync {
    service_fn(|req: Req| async move { Ok::<_, Infallible>(req) })
}

/// Every layer, one at a time, around `echo::<Req>()`: the answer comes back.
async fn every_layer_serves<Req>(req: Req)
where
    Req: Clone + PartialEq + std::fmt::Debug + Send + Sync + 'static,
{
    let breaker = CircuitBreakerLayer::builder("b").build().unwrap();
    assert_eq!(
        breaker.layer(echo()).oneshot(req.clone()).await.unwrap(),
        req
    );

    let keyed = CircuitBreakerLayer::builder("k")
        .keyed(|r: &Req| format!("{r:?}").len())
        .max_keys(4)
        .build()
        .unwrap();
    assert_eq!(keyed.layer(echo()).oneshot(req.clone()).await.unwrap(), req);

    let bulkhead = BulkheadLayer::builder("h").build().unwrap();
    assert_eq!(
        bulkhead.layer(echo()).oneshot(req.clone()).await.unwrap(),
        req
    );

    let keyed = BulkheadLayer::builder("kh")
        .keyed(|r: &Req| format!("{r:?}").len())
        .build()
        .unwrap();
    assert_eq!(keyed.layer(echo()).oneshot(req.clone()).await.unwrap(), req);

    let deadline = DeadlineLayer::new(Duration::from_millis(300)).unwrap();
    assert_eq!(
        deadline.layer(echo()).oneshot(req.clone()).await.unwrap(),
        req
    );

    let degradation = DegradationLayer::builder("d")
        .level("fixed", Fixed::new(req.clone()))
        .build()
        .unwrap();
    let svc = degradation.layer(echo::<Req>().map_err(BoxError::from));
    assert_eq!(svc.oneshot(req.clone()).await.unwrap(), req);

    let fallback = FallbackLayer::builder("f")
        .on_rejections(Rejections::ALL)
        .value(req.clone())
        .unmarked()
        .build()
        .unwrap();
    assert_eq!(
        fallback.layer(echo()).oneshot(req.clone()).await.unwrap(),
        req
    );
}

#[tokio::test(start_paused = true)]
async fn every_layer_takes_a_string_request() {
    every_layer_serves("user:42".to_owned()).await;
}

#[tokio::test(start_paused = true)]
async fn every_layer_takes_a_foreign_request_type() {
    every_layer_serves(Bytes::from_static(b"\x00\x01 a frame")).await;
}

/// A dependency that takes a second to answer a `String` query.
fn slow() -> impl Service<String, Response = String, Error = BoxError, Future: Send> + Clone + Send
{
    service_fn(|q: String| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok::<_, BoxError>(q)
    })
}

#[tokio::test(start_paused = true)]
async fn the_recommended_stack_around_a_non_http_service_bounds_the_call_at_the_breaker() {
    let breaker = CircuitBreakerLayer::builder("db").build().unwrap();
    let handle = breaker.handle();
    let stack = ServiceBuilder::new()
        .fallback(
            FallbackLayer::builder("db")
                .on_rejections(Rejections::ALL)
                .value("cached".to_owned())
                .unmarked()
                .build()
                .unwrap(),
        )
        .deadline(DeadlineLayer::new(Duration::from_millis(300)).unwrap())
        .bulkhead(BulkheadLayer::builder("db").build().unwrap())
        .circuit_breaker(breaker)
        .service(slow());
    let start = Instant::now();
    let answer = stack.oneshot("SELECT 1".to_owned()).await.unwrap();
    // The breaker cut the call at the deadline and recorded it; the fallback answered.
    assert_eq!(answer, "cached");
    assert_eq!(Instant::now() - start, Duration::from_millis(300));
    let counters = handle.snapshot().counters;
    assert_eq!((counters.failures, counters.timeouts), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn through_a_buffer_the_breaker_reads_the_deadline_at_its_first_poll() {
    let breaker = CircuitBreakerLayer::builder("db").build().unwrap();
    let handle = breaker.handle();
    // The buffer's worker runs the breaker's `call` in its own task, where no
    // deadline is current; the caller polls the breaker's future in its scope.
    let stack = ServiceBuilder::new()
        .deadline(DeadlineLayer::new(Duration::from_millis(300)).unwrap())
        .layer(BufferLayer::new(8))
        .circuit_breaker(breaker)
        .service(slow());
    let err = stack.oneshot("SELECT 1".to_owned()).await.unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::DeadlineExceeded
    );
    assert_eq!(handle.snapshot().counters.timeouts, 1);
}

#[tokio::test(start_paused = true)]
async fn through_a_buffer_the_bulkhead_stops_waiting_at_the_deadline() {
    let bulkhead = BulkheadLayer::builder("db")
        .max_concurrent(1)
        .max_queue(1)
        .max_wait(Duration::from_secs(10))
        .build()
        .unwrap();
    let busy = bulkhead.layer(slow());
    let mut held = tokio_test::task::spawn(busy.clone().oneshot("hold".to_owned()));
    tokio_test::assert_pending!(held.poll());
    let stack = ServiceBuilder::new()
        .deadline(DeadlineLayer::new(Duration::from_millis(50)).unwrap())
        .layer(BufferLayer::new(8))
        .service(busy);
    let start = Instant::now();
    let err = stack.oneshot("wait".to_owned()).await.unwrap_err();
    // The bulkhead itself stopped waiting at the 50 ms budget (not its 10 s
    // max_wait): its own timeout, which the deadline layer's backstop would not give.
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::BulkheadTimeout
    );
    assert_eq!(Instant::now() - start, Duration::from_millis(50));
}

#[tokio::test(start_paused = true)]
async fn a_spawned_call_keeps_the_deadline_only_when_carried() {
    let breaker = CircuitBreakerLayer::builder("db").build().unwrap();
    let handle = breaker.handle();
    let svc = breaker.layer(slow());
    let deadline = Deadline::after(Instant::now(), Duration::from_millis(300));
    let (carried, lost) = deadline
        .scope(async {
            let carried = tokio::spawn(with_current_deadline(svc.clone().oneshot("a".into())));
            let lost = tokio::spawn(svc.clone().oneshot("b".to_owned()));
            (carried.await.unwrap(), lost.await.unwrap())
        })
        .await;
    // Carried: the breaker cut the call at the deadline. Lost: it ran its full second.
    let carried = carried.unwrap_err();
    assert_eq!(
        find_rejection(&*carried).unwrap().kind(),
        RejectionKind::DeadlineExceeded
    );
    assert_eq!(lost.unwrap(), "b");
    let counters = handle.snapshot().counters;
    assert_eq!((counters.timeouts, counters.successes), (1, 1));
}
