//! `tower::balance::p2c::Balance` over two real endpoints (hyper servers on
//! loopback), each client behind its own breaker or bulkhead, one endpoint failing
//! or slow: in readiness / backpressure mode the balancer stops choosing it and
//! traffic moves to the healthy one; in the default mode it keeps choosing it and
//! collects rejections (the control).
//!
//! Real sockets and real time: every assertion is an invariant that holds under any
//! load (counts at the servers, rejections at the client; no timing). The balancer's
//! random choices come from a fixed seed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::{find_rejection, BoxError, HttpStatus, RejectionKind};
use tokio::sync::Semaphore;
use tower::balance::p2c::Balance;
use tower::discover::ServiceList;
use tower::load::Constant;
use tower::util::rng::Rng;
use tower::{Layer, Service, ServiceExt};

type Body = Full<Bytes>;

// ---------------------------------------------------------------------------------
// The endpoints: loopback hyper servers that count what reaches them
// ---------------------------------------------------------------------------------

#[derive(Clone)]
struct Server {
    status: StatusCode,
    received: Arc<AtomicUsize>,
    /// `Some`: every request waits for a permit the test adds (a slow endpoint).
    gate: Option<Arc<Semaphore>>,
}

impl Server {
    fn answering(status: StatusCode) -> Self {
        Self {
            status,
            received: Arc::default(),
            gate: None,
        }
    }

    fn holding() -> Self {
        Self {
            gate: Some(Arc::new(Semaphore::new(0))),
            ..Self::answering(StatusCode::OK)
        }
    }

    fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }

    fn release_all(&self) {
        if let Some(gate) = &self.gate {
            gate.add_permits(Semaphore::MAX_PERMITS / 2);
        }
    }

    async fn handle(self, _req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
        self.received.fetch_add(1, Ordering::SeqCst);
        if let Some(gate) = &self.gate {
            let _ = gate.acquire().await;
        }
        let mut res = Response::new(Full::new(Bytes::from_static(b"quote: 12.50")));
        *res.status_mut() = self.status;
        Ok(res)
    }

    async fn serve(&self) -> SocketAddr {
        let server = self.clone();
        support::serve_http1(move |req| server.clone().handle(req)).await
    }
}

// ---------------------------------------------------------------------------------
// The client side: one hyper-util client per endpoint, behind its own policy
// ---------------------------------------------------------------------------------

/// A hyper-util client that sends every request to its endpoint's address.
#[derive(Clone)]
struct ToAddr {
    addr: SocketAddr,
    client: Client<HttpConnector, Body>,
}

impl Service<Request<Body>> for ToAddr {
    type Response = Response<Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = hyper_util::client::legacy::ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<Request<Body>>::poll_ready(&mut self.client, cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        *req.uri_mut() = format!("http://{}/quote", self.addr).parse().unwrap();
        self.client.call(req)
    }
}

/// The client for `addr` behind `policy`, with an equal constant load (so the
/// balancer's choice between two ready endpoints is the seeded coin, not latency).
fn endpoint<L: Layer<ToAddr>>(addr: SocketAddr, policy: L) -> Constant<L::Service, u32> {
    let client = Client::builder(TokioExecutor::new()).build_http();
    Constant::new(policy.layer(ToAddr { addr, client }), 0)
}

/// A xorshift generator with a fixed seed, for the balancer's random choices.
struct Seeded(u64);

impl Rng for Seeded {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn request() -> Request<Body> {
    Request::get("/quote").body(Full::default()).unwrap()
}

/// Three 5xx in a row open it, for an hour: no probe during a test.
fn breaker(name: &'static str) -> CircuitBreakerLayer<HttpStatus> {
    CircuitBreakerLayer::builder(name)
        .consecutive_failures(3)
        .open_for(Duration::from_secs(3600))
        .classifier(HttpStatus::default())
        .build()
        .unwrap()
}

/// Two calls at once per endpoint; no queue (the default mode rejects at once).
fn bulkhead(name: &'static str) -> BulkheadLayer {
    BulkheadLayer::builder(name)
        .max_concurrent(2)
        .max_queue(0)
        .build()
        .unwrap()
}

/// What the client saw for `n` requests sent one after another through `balance`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    ok: usize,
    server_error: usize,
    circuit_open: usize,
}

async fn send_one_at_a_time<S>(balance: &mut S, n: usize) -> Seen
where
    S: Service<Request<Body>, Response = Response<Incoming>, Error = BoxError>,
{
    let mut seen = Seen::default();
    for _ in 0..n {
        match balance.ready().await.unwrap().call(request()).await {
            Ok(res) if res.status() == StatusCode::OK => seen.ok += 1,
            Ok(res) => {
                assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
                seen.server_error += 1;
            }
            Err(err) => {
                let kind = find_rejection(&*err).map(|r| r.kind());
                assert_eq!(kind, Some(RejectionKind::CircuitOpen), "{err}");
                seen.circuit_open += 1;
            }
        }
    }
    seen
}

/// Of 100 calls, the sick endpoint saw the three failures that opened its breaker,
/// then nothing; the healthy one served the rest, and no caller got a rejection.
fn assert_the_sick_left_after_three_failures(sick: &Server, healthy: &Server, seen: &Seen) {
    assert_eq!(sick.received(), 3);
    assert_eq!(healthy.received(), 97);
    let expected = Seen {
        ok: 97,
        server_error: 3,
        circuit_open: 0,
    };
    assert_eq!(*seen, expected);
}

// ---------------------------------------------------------------------------------
// A failing endpoint, each client behind its own breaker
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn in_readiness_mode_an_open_breaker_takes_its_endpoint_out_of_the_balance() {
    let healthy = Server::answering(StatusCode::OK);
    let sick = Server::answering(StatusCode::SERVICE_UNAVAILABLE);
    let (healthy_addr, sick_addr) = (healthy.serve().await, sick.serve().await);
    let healthy_breaker = breaker("healthy").pending_while_open();
    let sick_breaker = breaker("sick").pending_while_open();
    let sick_handle = sick_breaker.handle();
    let endpoints = vec![
        endpoint(healthy_addr, healthy_breaker),
        endpoint(sick_addr, sick_breaker),
    ];
    let mut balance = Balance::from_rng(ServiceList::new(endpoints), Seeded(0x5ea_3a11));

    let seen = send_one_at_a_time(&mut balance, 100).await;

    // The sick endpoint saw the three failures that opened its breaker, then nothing:
    // pending, it was never chosen again, and no caller got a rejection.
    assert_eq!(sick_handle.state(), State::Open);
    assert_the_sick_left_after_three_failures(&sick, &healthy, &seen);
}

#[tokio::test]
async fn in_the_default_mode_the_balancer_keeps_choosing_the_open_breaker() {
    let healthy = Server::answering(StatusCode::OK);
    let sick = Server::answering(StatusCode::SERVICE_UNAVAILABLE);
    let (healthy_addr, sick_addr) = (healthy.serve().await, sick.serve().await);
    let endpoints = vec![
        endpoint(healthy_addr, breaker("healthy")),
        endpoint(sick_addr, breaker("sick")),
    ];
    let mut balance = Balance::from_rng(ServiceList::new(endpoints), Seeded(0x5ea_3a11));

    let seen = send_one_at_a_time(&mut balance, 100).await;

    // The breaker still protects the sick server, but it answers `poll_ready` with
    // ready, so the balancer keeps routing callers into its rejections.
    assert_eq!(sick.received(), 3);
    assert_eq!(seen.server_error, 3);
    assert!(seen.circuit_open > 0, "{seen:?}");
    assert_eq!(seen.ok + seen.circuit_open, 97);
    assert_eq!(healthy.received(), seen.ok);
}

// ---------------------------------------------------------------------------------
// A slow endpoint, each client behind its own bulkhead
// ---------------------------------------------------------------------------------

/// Sends `n` calls through `balance` without waiting for their answers (each in its
/// own task once the balancer has chosen an endpoint), then lets the slow endpoint
/// answer, and returns every result.
async fn send_concurrently<S>(
    balance: &mut S,
    n: usize,
    slow: &Server,
) -> Vec<Result<StatusCode, BoxError>>
where
    S: Service<Request<Body>, Response = Response<Incoming>, Error = BoxError>,
    S::Future: Send + 'static,
{
    let mut calls = Vec::with_capacity(n);
    for _ in 0..n {
        let call = balance.ready().await.unwrap().call(request());
        calls.push(tokio::spawn(async move { call.await.map(|r| r.status()) }));
    }
    // Every call has been handed to an endpoint; the slow one has held its own.
    assert!(slow.received() <= 2, "slow saw {}", slow.received());
    slow.release_all();
    let mut results = Vec::with_capacity(n);
    for call in calls {
        results.push(call.await.unwrap());
    }
    results
}

#[tokio::test]
async fn in_backpressure_mode_a_full_bulkhead_sends_the_traffic_to_the_other_endpoint() {
    let fast = Server::answering(StatusCode::OK);
    let slow = Server::holding();
    let (fast_addr, slow_addr) = (fast.serve().await, slow.serve().await);
    let slow_bulkhead = bulkhead("slow").backpressure();
    let slow_slots = slow_bulkhead.handle();
    let endpoints = vec![
        endpoint(fast_addr, bulkhead("fast").backpressure()),
        endpoint(slow_addr, slow_bulkhead),
    ];
    let mut balance = Balance::from_rng(ServiceList::new(endpoints), Seeded(0x5ea_3a11));

    let results = send_concurrently(&mut balance, 50, &slow).await;

    // Every call was answered: none was turned away by a full bulkhead. The slow
    // endpoint got at most its two slots' worth; everything else went to the fast one.
    for result in &results {
        assert_eq!(result.as_ref().unwrap(), &StatusCode::OK);
    }
    assert!(slow.received() <= 2, "slow saw {}", slow.received());
    assert_eq!(fast.received() + slow.received(), 50);
    let s = slow_slots.snapshot();
    assert_eq!(s.rejected_full, 0);
    assert!(s.peak_active <= 2);
}

#[tokio::test]
async fn in_the_default_mode_the_balancer_keeps_choosing_the_full_bulkhead() {
    let fast = Server::answering(StatusCode::OK);
    let slow = Server::holding();
    let (fast_addr, slow_addr) = (fast.serve().await, slow.serve().await);
    let slow_bulkhead = bulkhead("slow");
    let slow_slots = slow_bulkhead.handle();
    let endpoints = vec![
        endpoint(fast_addr, bulkhead("fast")),
        endpoint(slow_addr, slow_bulkhead),
    ];
    let mut balance = Balance::from_rng(ServiceList::new(endpoints), Seeded(0x5ea_3a11));

    let results = send_concurrently(&mut balance, 50, &slow).await;

    // Always ready, the full bulkhead keeps being chosen and turns its callers away
    // (the fast one may too: nothing waits for it either).
    let full = results
        .iter()
        .filter(|r| {
            r.as_ref()
                .err()
                .and_then(|e| find_rejection(&**e))
                .map(|r| r.kind())
                == Some(RejectionKind::BulkheadFull)
        })
        .count();
    assert!(slow_slots.snapshot().rejected_full > 0);
    let answered = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(answered + full, 50);
    assert_eq!(fast.received() + slow.received(), answered);
}

// ---------------------------------------------------------------------------------
// Both modes per replica, as the README shows them
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn both_modes_stacked_per_replica_under_a_load_measuring_balancer() {
    use tower::load::{CompleteOnResponse, PendingRequestsDiscover};
    use tower::ServiceBuilder;

    let healthy = Server::answering(StatusCode::OK);
    let sick = Server::answering(StatusCode::SERVICE_UNAVAILABLE);
    let (healthy_addr, sick_addr) = (healthy.serve().await, sick.serve().await);
    let replica = |name: &'static str, addr| {
        let client = Client::builder(TokioExecutor::new()).build_http();
        ServiceBuilder::new()
            .layer(bulkhead(name).backpressure())
            .layer(breaker(name).pending_while_open())
            .service(ToAddr { addr, client })
    };
    let replicas = ServiceList::new(vec![
        replica("healthy", healthy_addr),
        replica("sick", sick_addr),
    ]);
    let mut balance = Balance::from_rng(
        PendingRequestsDiscover::new(replicas, CompleteOnResponse::default()),
        Seeded(0x5ea_3a11),
    );

    let seen = send_one_at_a_time(&mut balance, 100).await;

    assert_the_sick_left_after_three_failures(&sick, &healthy, &seen);
}
