//! A hyper-util client behind the recommended stack — Fallback → Deadline → Bulkhead
//! → Breaker (HTTP status classifier) — against a loopback hyper server that fails.
//!
//! Real sockets and real time: every assertion is load-independent. The server counts
//! the requests that reach it and holds responses behind a gate the test opens (no
//! sleeps); the deadline is generous so that it never fires under load.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use seawall::bulkhead::{BulkheadLayer, Hold, Lend};
use seawall::circuit_breaker::{CircuitBreakerLayer, Handle, State};
use seawall::core::http::Either;
use seawall::core::DeadlineLayer;
use seawall::fallback::http::{served, EitherResponse};
use seawall::fallback::{FallbackLayer, FallbackRequest, Served, Trigger};
use seawall::{find_rejection, BoxError, HttpStatus, RejectionKind};
use tokio::sync::{watch, Semaphore};
use tower::{Service, ServiceBuilder, ServiceExt};

// ---------------------------------------------------------------------------------
// The supplier: a loopback hyper server that answers a chosen status
// ---------------------------------------------------------------------------------

/// Answers every request with `status` and the body `quote: 12.50`, optionally only
/// once the test lets it through (`hold`); counts the requests that reach it.
#[derive(Clone)]
struct Supplier {
    status: Arc<AtomicU16>,
    hold: Arc<AtomicBool>,
    received: Arc<watch::Sender<usize>>,
    gate: Arc<Semaphore>,
}

impl Supplier {
    fn new(status: u16) -> Self {
        Self {
            status: Arc::new(AtomicU16::new(status)),
            hold: Arc::default(),
            received: Arc::new(watch::Sender::new(0)),
            gate: Arc::new(Semaphore::new(0)),
        }
    }

    fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    fn hold(&self) {
        self.hold.store(true, Ordering::SeqCst);
    }

    fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }

    fn received(&self) -> usize {
        *self.received.borrow()
    }

    async fn wait_received(&self, n: usize) {
        let _ = self.received.subscribe().wait_for(|&c| c >= n).await;
    }

    async fn handle(self, _req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        self.received.send_modify(|c| *c += 1);
        if self.hold.load(Ordering::SeqCst) {
            if let Ok(permit) = self.gate.acquire().await {
                permit.forget();
            }
        }
        let status = StatusCode::from_u16(self.status.load(Ordering::SeqCst)).unwrap();
        let mut res = Response::new(Full::new(Bytes::from_static(b"quote: 12.50")));
        *res.status_mut() = status;
        Ok(res)
    }

    async fn serve(&self) -> SocketAddr {
        let supplier = self.clone();
        support::serve_http1(move |req| supplier.clone().handle(req)).await
    }
}

// ---------------------------------------------------------------------------------
// The client stack
// ---------------------------------------------------------------------------------

type Body = Full<Bytes>;

fn hyper_client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Trips once 4 calls are in and half of the last 4 failed; stays open for a minute
/// (no test waits for it).
fn breaker() -> CircuitBreakerLayer<HttpStatus> {
    CircuitBreakerLayer::builder("supplier")
        .count_window(4, 4, 0.5)
        .open_for(Duration::from_secs(60))
        .classifier(HttpStatus::default())
        .build()
        .unwrap()
}

fn bulkhead(max_concurrent: usize) -> BulkheadLayer {
    BulkheadLayer::builder("supplier")
        .max_concurrent(max_concurrent)
        .max_queue(0)
        .build()
        .unwrap()
}

/// Fallback → Deadline → Bulkhead → Breaker → hyper-util client. The fallback answers
/// for an open breaker and for failed answers (5xx, transport errors); other
/// rejections (a full bulkhead) pass through as errors so the tests can see them.
fn stack<H, B>(
    bulkhead: BulkheadLayer<H>,
    breaker: CircuitBreakerLayer<HttpStatus>,
) -> impl Service<
    Request<Body>,
    Response = EitherResponse<B, Body>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + 'static
where
    H: Hold<Response<Incoming>, Output = Response<B>> + Lend<Request<Body>> + Send + Sync + 'static,
    B: Send + 'static,
{
    let fallback = FallbackLayer::builder("supplier")
        .on_rejection(RejectionKind::CircuitOpen)
        .on_failure(HttpStatus::default())
        .sync_fn(|r: FallbackRequest<()>| {
            let text = format!("no live quote ({})", r.trigger());
            Ok::<_, BoxError>(Response::new(Full::new(Bytes::from(text))))
        })
        .either_body()
        .build()
        .unwrap();
    ServiceBuilder::new()
        .layer(fallback)
        .layer(DeadlineLayer::new(Duration::from_secs(30)).unwrap())
        .layer(bulkhead)
        .layer(breaker)
        .service(hyper_client())
}

fn get(addr: SocketAddr) -> Request<Body> {
    Request::get(format!("http://{addr}/quote"))
        .body(Full::default())
        .unwrap()
}

fn trigger<B>(res: &EitherResponse<B, Body>) -> Option<Trigger> {
    served(res).map(Served::trigger)
}

async fn call<S, B>(svc: &S, addr: SocketAddr) -> Result<Response<B>, BoxError>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone,
{
    svc.clone().oneshot(get(addr)).await
}

/// The primary's body, read to its end.
async fn text<B>(res: EitherResponse<B, Body>) -> String
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

// ---------------------------------------------------------------------------------
// The breaker, end to end
// ---------------------------------------------------------------------------------

/// A supplier answering `status`, serving: it and its address.
async fn serving(status: u16) -> (Supplier, SocketAddr) {
    let supplier = Supplier::new(status);
    let addr = supplier.serve().await;
    (supplier, addr)
}

/// The stack with eight slots and a breaker of its own: the breaker's handle and
/// the stack.
fn guarded_by_a_breaker() -> (
    Handle,
    impl Service<
            Request<Body>,
            Response = EitherResponse<Incoming, Body>,
            Error = BoxError,
            Future = impl Send,
        > + Clone
        + Send
        + 'static,
) {
    let breaker = breaker();
    (breaker.handle(), stack(bulkhead(8), breaker))
}

#[tokio::test]
async fn server_errors_trip_the_breaker_then_no_request_reaches_the_server() {
    let (supplier, addr) = serving(503).await;
    let (handle, svc) = guarded_by_a_breaker();

    // Each 503 is a failure for the breaker and fires the fallback.
    for _ in 0..4 {
        let res = call(&svc, addr).await.unwrap();
        assert_eq!(trigger(&res), Some(Trigger::FailedResponse));
        assert_eq!(text(res).await, "no live quote (failed_response)");
    }
    assert_eq!(supplier.received(), 4);
    assert_eq!(handle.state(), State::Open);

    // The supplier has recovered, but the breaker is open: callers get the fallback at
    // once, and not one request reaches the supplier.
    supplier.answer(200);
    for _ in 0..6 {
        let res = call(&svc, addr).await.unwrap();
        assert_eq!(
            trigger(&res),
            Some(Trigger::Rejected(RejectionKind::CircuitOpen))
        );
    }
    assert_eq!(
        supplier.received(),
        4,
        "nothing reached the server while open"
    );
    let counters = handle.snapshot().counters;
    assert_eq!((counters.failures, counters.short_circuited), (4, 6));
}

#[tokio::test]
async fn a_404_is_a_business_answer_and_does_not_trip_the_breaker() {
    let (supplier, addr) = serving(404).await;
    let (handle, svc) = guarded_by_a_breaker();

    for _ in 0..10 {
        let res = call(&svc, addr).await.unwrap();
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        assert_eq!(trigger(&res), None, "the primary's answer, not a fallback");
        assert!(matches!(res.body(), Either::Left(_)));
    }
    assert_eq!(supplier.received(), 10);
    support::assert_closed_after_successes(&handle, 10);
}

#[tokio::test]
async fn a_refused_connection_is_a_failure_that_trips_the_breaker() {
    // An address nobody listens on any more.
    let addr = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let (handle, svc) = guarded_by_a_breaker();

    for _ in 0..4 {
        let res = call(&svc, addr).await.unwrap();
        assert_eq!(trigger(&res), Some(Trigger::FailedError));
    }
    assert_eq!(handle.state(), State::Open);
    let res = call(&svc, addr).await.unwrap();
    assert_eq!(
        trigger(&res),
        Some(Trigger::Rejected(RejectionKind::CircuitOpen))
    );
}

// ---------------------------------------------------------------------------------
// The bulkhead, end to end
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_full_bulkhead_rejects_while_the_server_holds_its_slots() {
    let supplier = Supplier::new(200);
    supplier.hold();
    let addr = supplier.serve().await;
    let bulkhead = bulkhead(2);
    let slots = bulkhead.handle();
    let breaker = breaker();
    let breaker_handle = breaker.handle();
    let svc = stack(bulkhead, breaker);

    let held: Vec<_> = (0..2)
        .map(|_| tokio::spawn(svc.clone().oneshot(get(addr))))
        .collect();
    supplier.wait_received(2).await;
    assert_eq!(slots.snapshot().active, 2);

    let err = call(&svc, addr).await.unwrap_err();
    let rejection = find_rejection(&*err).expect("a seawall rejection");
    assert_eq!(rejection.kind(), RejectionKind::BulkheadFull);
    assert_eq!(supplier.received(), 2, "the rejected call never left");
    // Outside the breaker, the rejection is no evidence about the supplier.
    assert_eq!(breaker_handle.snapshot().counters.calls, 0);

    supplier.release(2);
    for call in held {
        let res = call.await.unwrap().unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(text(res).await, "quote: 12.50");
    }
    let s = slots.snapshot();
    assert_eq!((s.active, s.admitted, s.rejected_full), (0, 2, 1));
    assert_eq!(breaker_handle.state(), State::Closed);
}

#[tokio::test]
async fn with_hold_until_body_end_the_permit_lives_until_the_body_is_read_or_dropped() {
    let supplier = Supplier::new(200);
    let addr = supplier.serve().await;
    let bulkhead = bulkhead(1).hold_until_body_end();
    let slots = bulkhead.handle();
    let svc = stack(bulkhead, breaker());

    // The response has arrived, its body has not been read: the slot is still taken.
    let res = call(&svc, addr).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(slots.snapshot().active, 1);
    // So the only slot is busy: another call is turned away.
    let err = call(&svc, addr).await.unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::BulkheadFull
    );
    assert_eq!(supplier.received(), 1);
    // Reading the body to its end frees it.
    assert_eq!(text(res).await, "quote: 12.50");
    assert_eq!(slots.snapshot().active, 0);

    // Dropping an unread body frees it too.
    let res = call(&svc, addr).await.unwrap();
    assert_eq!(slots.snapshot().active, 1);
    drop(res);
    assert_eq!(slots.snapshot().active, 0);

    // And the slot is usable again.
    let res = call(&svc, addr).await.unwrap();
    assert_eq!(text(res).await, "quote: 12.50");
    let s = slots.snapshot();
    assert_eq!((s.active, s.admitted, s.rejected_full), (0, 3, 1));
}

#[tokio::test]
async fn without_the_opt_in_the_slot_is_freed_when_the_response_arrives() {
    let supplier = Supplier::new(200);
    let addr = supplier.serve().await;
    let bulkhead = bulkhead(1);
    let slots = bulkhead.handle();
    let svc = stack(bulkhead, breaker());

    let res = call(&svc, addr).await.unwrap();
    assert_eq!(slots.snapshot().active, 0, "freed before the body is read");
    let second = call(&svc, addr).await.unwrap();
    assert_eq!(text(res).await, "quote: 12.50");
    assert_eq!(text(second).await, "quote: 12.50");
    assert_eq!(slots.snapshot().rejected_full, 0);
}
