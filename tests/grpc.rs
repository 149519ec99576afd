//! gRPC over real loopback: a tonic `Channel` wrapped in seawall's layers, used by a
//! generated-style client; and a tonic server route protected by seawall layers whose
//! rejections are rendered as trailers-only gRPC responses.
//!
//! Real sockets and real time: every assertion is load-independent (held server calls
//! are gated, never timed; deadlines are generous unless the test is about them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/shared/grpc_quote.rs"]
mod grpc_quote;

mod support;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use grpc_quote::{Behaviour, QuoteRequest, QuotesClient, QuotesServer};
use seawall::bulkhead::{Bulkhead, BulkheadLayer, UntilBodyEnd};
use seawall::circuit_breaker::{CircuitBreaker, CircuitBreakerLayer, Forced, State};
use seawall::core::grpc::{GrpcRespondLayer, RejectionStatus, RejectionStatusLayer};
use seawall::core::{DeadlineLayer, DeadlineService};
use seawall::{find_rejection, BoxError, GrpcStatus, RejectionKind};
use tonic::body::Body;
use tonic::transport::Channel;
use tonic::Code;
use tower::ServiceBuilder;

/// The recommended client stack around a tonic channel, outermost first.
type Stack = RejectionStatus<DeadlineService<Bulkhead<CircuitBreaker<Channel, GrpcStatus>>>>;

/// The same with the bulkhead permit held until the response body ends.
type HeldStack =
    RejectionStatus<DeadlineService<Bulkhead<CircuitBreaker<Channel, GrpcStatus>, UntilBodyEnd>>>;

fn channel(addr: std::net::SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

fn request() -> QuoteRequest {
    QuoteRequest {
        destination: "lisbon".into(),
    }
}

/// A breaker that trips once 4 calls are in and half of the last 4 failed; it stays
/// open for a minute (no test waits for it).
fn breaker() -> CircuitBreakerLayer<GrpcStatus> {
    CircuitBreakerLayer::builder("quotes")
        .count_window(4, 4, 0.5)
        .open_for(Duration::from_secs(60))
        .classifier(GrpcStatus::default())
        .build()
        .unwrap()
}

fn bulkhead(max_concurrent: usize, max_queue: usize) -> BulkheadLayer {
    BulkheadLayer::builder("quotes")
        .max_concurrent(max_concurrent)
        .max_queue(max_queue)
        .max_wait(Duration::from_millis(1))
        .build()
        .unwrap()
}

fn stack(
    channel: Channel,
    bulkhead: &BulkheadLayer,
    breaker: &CircuitBreakerLayer<GrpcStatus>,
) -> Stack {
    ServiceBuilder::new()
        .layer(RejectionStatusLayer)
        .layer(DeadlineLayer::new(Duration::from_secs(30)).unwrap())
        .layer(bulkhead.clone())
        .layer(breaker.clone())
        .service(channel)
}

async fn client(server: &QuotesServer) -> (QuotesClient<Stack>, seawall::circuit_breaker::Handle) {
    let addr = server.serve().await.unwrap();
    let breaker = breaker();
    let handle = breaker.handle();
    let client = QuotesClient::new(stack(channel(addr), &bulkhead(8, 8), &breaker));
    (client, handle)
}

#[tokio::test]
async fn a_deadline_reaches_the_client_as_deadline_exceeded_not_unknown() {
    let server = QuotesServer::default();
    let addr = server.serve().await.unwrap();
    let stack = ServiceBuilder::new()
        .layer(RejectionStatusLayer)
        .layer(DeadlineLayer::new(Duration::from_millis(100)).unwrap())
        .service(channel(addr));
    let mut client = QuotesClient::new(stack);

    let ok = client.get(request()).await.unwrap();
    assert_eq!(ok.into_inner().price_cents, 1250);

    server.set(Behaviour::Slow);
    let status = client.get(request()).await.unwrap_err();
    // DEADLINE_EXCEEDED, which clients do not retry (UNAVAILABLE would invite it).
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert!(seawall::find_rejection(&status).is_some());

    server.set(Behaviour::NotFound);
    let status = client.get(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}

// ---------------------------------------------------------------------------------
// Classification of statuses through the breaker
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn unavailable_trips_the_breaker_then_calls_fail_fast_without_reaching_the_server() {
    let server = QuotesServer::default();
    let (mut client, breaker) = client(&server).await;

    server.set(Behaviour::Unavailable);
    for _ in 0..4 {
        let status = client.get(request()).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert!(find_rejection(&status).is_none(), "the server's own status");
    }
    assert_eq!(server.received(), 4);
    assert_eq!(breaker.state(), State::Open);
    assert_eq!(breaker.snapshot().counters.failures, 4);

    // The server has recovered, but the breaker does not know yet: it fails fast.
    server.set(Behaviour::Quote);
    for _ in 0..5 {
        let status = client.get(request()).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        let rejection = find_rejection(&status).expect("the breaker's rejection");
        assert_eq!(rejection.kind(), RejectionKind::CircuitOpen);
        assert!(rejection.retry_after().unwrap() > Duration::ZERO);
    }
    assert_eq!(
        server.received(),
        4,
        "no call reached the server while open"
    );
    assert_eq!(breaker.snapshot().counters.short_circuited, 5);
}

#[tokio::test]
async fn not_found_is_a_business_answer_and_does_not_trip_the_breaker() {
    let server = QuotesServer::default();
    let (mut client, breaker) = client(&server).await;

    server.set(Behaviour::NotFound);
    for _ in 0..10 {
        let status = client.get(request()).await.unwrap_err();
        assert_eq!(status.code(), Code::NotFound);
    }
    assert_eq!(server.received(), 10);
    support::assert_closed_after_successes(&breaker, 10);
}

/// The documented limit of the header classifier: a status that arrives only in the
/// body's trailers (after HTTP 200 headers without `grpc-status`, as a streaming
/// server sends a late failure) is not seen by it. The breaker classifies such a
/// response by its HTTP status, 200: a success. The client still sees UNAVAILABLE.
/// (Held until the body ends, the breaker sees it: `tests/grpc_stream.rs`.)
#[tokio::test]
async fn a_status_sent_in_body_trailers_is_not_seen_by_the_header_classifier() {
    let server = QuotesServer::default();
    let (mut client, breaker) = client(&server).await;

    server.set(Behaviour::TrailingUnavailable);
    for _ in 0..6 {
        let status = client.get(request()).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.message(), "supplier overloaded");
    }
    assert_eq!(server.received(), 6);
    support::assert_closed_after_successes(&breaker, 6);
}

// ---------------------------------------------------------------------------------
// Rejection -> Status mapping on the client
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn an_open_breaker_reaches_the_client_as_unavailable() {
    let server = QuotesServer::default();
    let (mut client, breaker) = client(&server).await;
    breaker.force(Forced::Open);

    let status = client.get(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        find_rejection(&status).unwrap().kind(),
        RejectionKind::CircuitOpen
    );
    assert_eq!(server.received(), 0);
}

#[tokio::test]
async fn without_the_status_layer_a_rejection_would_reach_the_client_as_unknown() {
    let server = QuotesServer::default();
    let addr = server.serve().await.unwrap();
    let breaker = breaker();
    breaker.handle().force(Forced::Open);
    let bare = ServiceBuilder::new().layer(breaker).service(channel(addr));
    let status = QuotesClient::new(bare).get(request()).await.unwrap_err();
    assert_eq!(
        status.code(),
        Code::Unknown,
        "why RejectionStatusLayer exists"
    );
}

#[tokio::test]
async fn a_full_bulkhead_reaches_the_client_as_resource_exhausted() {
    let server = QuotesServer::default();
    let addr = server.serve().await.unwrap();
    let bulkhead = bulkhead(1, 0);
    let handle = bulkhead.handle();
    let client = QuotesClient::new(stack(channel(addr), &bulkhead, &breaker()));

    server.set(Behaviour::Held);
    let mut first = client.clone();
    let held = tokio::spawn(async move { first.get(request()).await });
    server.wait_received(1).await;
    assert_eq!(handle.snapshot().active, 1);

    let status = client.clone().get(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        find_rejection(&status).unwrap().kind(),
        RejectionKind::BulkheadFull
    );
    assert_eq!(server.received(), 1, "the rejected call never left");

    server.release(1);
    assert_eq!(held.await.unwrap().unwrap().into_inner().price_cents, 1250);
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(handle.snapshot().rejected_full, 1);
}

#[tokio::test]
async fn a_bulkhead_wait_that_times_out_reaches_the_client_as_resource_exhausted() {
    let server = QuotesServer::default();
    let addr = server.serve().await.unwrap();
    // One slot, one place in line, a 1 ms wait: the held call keeps the slot for as
    // long as the test wants, so the waiter always times out.
    let client = QuotesClient::new(stack(channel(addr), &bulkhead(1, 1), &breaker()));

    server.set(Behaviour::Held);
    let mut first = client.clone();
    let held = tokio::spawn(async move { first.get(request()).await });
    server.wait_received(1).await;

    let status = client.clone().get(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        find_rejection(&status).unwrap().kind(),
        RejectionKind::BulkheadTimeout
    );

    server.release(1);
    held.await.unwrap().unwrap();
    assert_eq!(server.received(), 1);
}

// ---------------------------------------------------------------------------------
// Trailers-only rendering on the server
// ---------------------------------------------------------------------------------

/// What the client saw on the wire: status, headers (of the header block).
type Seen = Arc<Mutex<Vec<(http::StatusCode, http::HeaderMap)>>>;

#[tokio::test]
async fn a_rejection_on_the_server_is_a_trailers_only_response_the_client_understands() {
    let quotes = QuotesServer::default();
    let server_bulkhead = bulkhead(1, 0);
    let server_breaker = breaker();
    let breaker_handle = server_breaker.handle();
    let protected = ServiceBuilder::new()
        .layer(GrpcRespondLayer::new().named::<QuotesServer>())
        .layer(server_bulkhead)
        .layer(server_breaker)
        .service(quotes.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let router = tonic::transport::Server::builder().add_service(protected);
    tokio::spawn(router.serve_with_incoming(incoming));

    let seen: Seen = Arc::default();
    let record = Arc::clone(&seen);
    let recording = ServiceBuilder::new()
        .map_response(move |res: http::Response<Body>| {
            record
                .lock()
                .unwrap()
                .push((res.status(), res.headers().clone()));
            res
        })
        .service(channel(addr));
    let client = QuotesClient::new(recording);

    // A breaker forced open on the server: UNAVAILABLE, and no retry pushback (only
    // an operator ends it, so no time can be promised).
    breaker_handle.force(Forced::Open);
    let status = client.clone().get(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "service temporarily unavailable");
    assert!(status.metadata().get("grpc-retry-pushback-ms").is_none());
    assert_eq!(quotes.received(), 0, "the quote service was not called");
    {
        let seen = seen.lock().unwrap();
        let (http_status, headers) = seen.last().unwrap();
        assert_eq!(*http_status, http::StatusCode::OK);
        assert_eq!(headers["content-type"], "application/grpc");
        assert_eq!(
            headers["grpc-status"], "14",
            "status in the header block: trailers-only"
        );
        assert_eq!(
            headers["grpc-message"],
            "service%20temporarily%20unavailable"
        );
    }

    // A full bulkhead on the server: RESOURCE_EXHAUSTED, no pushback.
    breaker_handle.reset();
    assert_eq!(breaker_handle.state(), State::Closed);
    quotes.set(Behaviour::Held);
    let mut first = client.clone();
    let held = tokio::spawn(async move { first.get(request()).await });
    quotes.wait_received(1).await;
    let status = client.clone().get(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.metadata().get("grpc-retry-pushback-ms").is_none());
    {
        let seen = seen.lock().unwrap();
        let (http_status, headers) = seen.last().unwrap();
        assert_eq!(*http_status, http::StatusCode::OK);
        assert_eq!(headers["grpc-status"], "8");
    }
    quotes.release(1);
    assert_eq!(held.await.unwrap().unwrap().into_inner().price_cents, 1250);
    assert_eq!(quotes.received(), 1);
}

// ---------------------------------------------------------------------------------
// The wrapped channel still satisfies a generated client
// ---------------------------------------------------------------------------------

/// Exactly the bounds `tonic-build` puts on a generated client's `impl` block, plus
/// what applications need to share it and spawn its calls.
fn usable_by_a_generated_client<T>()
where
    T: tonic::client::GrpcService<Body> + Clone + Send + Sync + 'static,
    T::Error: Into<BoxError>,
    T::Future: Send,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<BoxError> + Send,
{
}

fn spawnable<F: Future + Send + 'static>(f: F) -> F {
    f
}

#[tokio::test]
async fn the_wrapped_channel_satisfies_what_a_generated_client_needs() {
    usable_by_a_generated_client::<Stack>();
    usable_by_a_generated_client::<HeldStack>();

    let server = QuotesServer::default();
    let addr = server.serve().await.unwrap();
    let bulkhead = bulkhead(2, 0).hold_until_body_end();
    let handle = bulkhead.handle();
    let held: HeldStack = ServiceBuilder::new()
        .layer(RejectionStatusLayer)
        .layer(DeadlineLayer::new(Duration::from_secs(30)).unwrap())
        .layer(bulkhead)
        .layer(breaker())
        .service(channel(addr));
    let mut client = QuotesClient::new(held);
    let call = spawnable(async move { client.get(request()).await });
    let reply = tokio::spawn(call).await.unwrap().unwrap();
    assert_eq!(reply.into_inner().price_cents, 1250);
    // The unary call read the body to its end (and dropped it), which freed the permit.
    assert_eq!(handle.snapshot().active, 0);
    assert_eq!(handle.snapshot().admitted, 1);
}
