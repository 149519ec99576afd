//! Server-streaming gRPC over real loopback: a tonic server streams messages the
//! test sends it, and a tonic client behind a breaker (and a degradation layer)
//! held until the response body ends sees the status in the trailers.
//!
//! The sockets and the tonic client and server are real. The stream is driven by
//! channels, never by sleeps. The test about the half-open timeout runs on tokio's
//! paused clock (`advance`), so the breaker's time is the test's; the others assert
//! only what holds under any load.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/shared/grpc_quote.rs"]
mod grpc_quote;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use seawall::circuit_breaker::{CircuitBreakerLayer, Handle, State};
use seawall::core::grpc::RejectionStatusLayer;
use seawall::core::AdmissionAsFailure;
use seawall::degradation::DegradationLayer;
use seawall::{BoxError, GrpcStatus};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::body::Body;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};
use tonic_prost::ProstCodec;
use tower::{Layer, Service, ServiceBuilder};

#[derive(Clone, PartialEq, prost::Message)]
struct Subscribe {
    #[prost(string, tag = "1")]
    route: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Price {
    #[prost(uint64, tag = "1")]
    cents: u64,
}

const SUBSCRIBE: &str = "/freight.Prices/Subscribe";

/// What the server streams for one call: messages, then the stream ends (with the
/// status the test sends as an `Err`, or OK when the sender is dropped).
type Feed = mpsc::UnboundedSender<Result<Price, Status>>;

/// `rpc Subscribe(Subscribe) returns (stream Price)`, written by hand in the shape
/// `tonic-build` generates. Each call hands the test the sender that feeds it.
#[derive(Clone)]
struct PricesServer {
    feeds: mpsc::UnboundedSender<Feed>,
}

impl tonic::server::NamedService for PricesServer {
    const NAME: &'static str = "freight.Prices";
}

struct SubscribeCall(mpsc::UnboundedSender<Feed>);

impl tonic::server::ServerStreamingService<Subscribe> for SubscribeCall {
    type Response = Price;
    type ResponseStream = UnboundedReceiverStream<Result<Price, Status>>;
    type Future = std::future::Ready<Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, _request: Request<Subscribe>) -> Self::Future {
        let (feed, stream) = mpsc::unbounded_channel();
        let sent = self.0.send(feed);
        std::future::ready(match sent {
            Ok(()) => Ok(Response::new(UnboundedReceiverStream::new(stream))),
            Err(_) => Err(Status::unavailable("test finished")),
        })
    }
}

impl Service<http::Request<Body>> for PricesServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let feeds = self.feeds.clone();
        Box::pin(async move {
            if req.uri().path() != SUBSCRIBE {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Price, Subscribe>::default());
            Ok(grpc.server_streaming(SubscribeCall(feeds), req).await)
        })
    }
}

/// Serves on an ephemeral loopback port; the receiver yields each call's feed.
async fn serve() -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Feed>) {
    let (feeds, calls) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let router = tonic::transport::Server::builder().add_service(PricesServer { feeds });
    tokio::spawn(router.serve_with_incoming(incoming));
    (addr, calls)
}

fn channel(addr: std::net::SocketAddr) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

/// The generated-style client call over any `GrpcService`.
async fn subscribe<T>(grpc: &mut tonic::client::Grpc<T>) -> tonic::Streaming<Price>
where
    T: tonic::client::GrpcService<Body>,
    T::Error: Into<BoxError>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<BoxError> + Send,
{
    grpc.ready().await.map_err(Into::into).unwrap();
    let codec = ProstCodec::<Subscribe, Price>::default();
    let path = http::uri::PathAndQuery::from_static(SUBSCRIBE);
    let request = Request::new(Subscribe {
        route: "SP -> RJ".into(),
    });
    grpc.server_streaming(request, path, codec)
        .await
        .unwrap()
        .into_inner()
}

fn breaker(half_open_timeout: Duration) -> CircuitBreakerLayer<GrpcStatus> {
    CircuitBreakerLayer::builder("prices")
        .consecutive_failures(1)
        .open_for(Duration::from_secs(3600))
        .jitter(0.0)
        .half_open_timeout(half_open_timeout)
        .classifier(GrpcStatus::default())
        .build()
        .unwrap()
}

fn counters(handle: &Handle) -> (u64, u64, u64) {
    let c = handle.snapshot().counters;
    (c.successes, c.failures, c.calls)
}

#[tokio::test]
async fn a_stream_that_fails_after_two_messages_counts_as_a_failure() {
    let (addr, mut calls) = serve().await;
    let breaker = breaker(Duration::from_secs(3600)).hold_until_body_end();
    let handle = breaker.handle();
    let stack = ServiceBuilder::new()
        .layer(RejectionStatusLayer)
        .layer(breaker)
        .service(channel(addr));
    let mut grpc = tonic::client::Grpc::new(stack);

    let mut stream = subscribe(&mut grpc).await;
    let feed = calls.recv().await.unwrap();
    for cents in [1250, 1300] {
        feed.send(Ok(Price { cents })).unwrap();
        let price = stream.message().await.unwrap().unwrap();
        assert_eq!(price.cents, cents);
        // Still streaming: nothing is reported yet.
        assert_eq!(counters(&handle), (0, 0, 0));
        assert_eq!(handle.state(), State::Closed);
    }
    feed.send(Err(Status::unavailable("supplier overloaded")))
        .unwrap();
    let status = stream.message().await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "supplier overloaded");
    // The trailers' UNAVAILABLE was seen when the body ended: one failure, open.
    assert_eq!(counters(&handle), (0, 1, 1));
    assert_eq!(handle.state(), State::Open);

    // A stream that ends OK is a success (after an operator reset).
    handle.reset();
    let mut stream = subscribe(&mut grpc).await;
    let feed = calls.recv().await.unwrap();
    feed.send(Ok(Price { cents: 990 })).unwrap();
    drop(feed);
    assert_eq!(stream.message().await.unwrap().unwrap().cents, 990);
    assert!(stream.message().await.unwrap().is_none());
    assert_eq!(handle.state(), State::Closed);
    let c = handle.snapshot().counters;
    assert_eq!((c.successes, c.failures), (1, 1));
}

#[tokio::test]
async fn a_stream_dropped_by_the_client_before_its_end_is_cancelled() {
    let (addr, mut calls) = serve().await;
    let breaker = breaker(Duration::from_secs(3600)).hold_until_body_end();
    let handle = breaker.handle();
    let mut grpc = tonic::client::Grpc::new(breaker.layer(channel(addr)));

    let mut stream = subscribe(&mut grpc).await;
    let feed = calls.recv().await.unwrap();
    feed.send(Ok(Price { cents: 1 })).unwrap();
    assert!(stream.message().await.unwrap().is_some());
    drop(stream);
    let c = handle.snapshot().counters;
    assert_eq!((c.cancelled, c.successes, c.failures), (1, 0, 0));
    assert_eq!(handle.state(), State::Closed);
}

/// A probe that streams for longer than the half-open timeout is judged by what it
/// has shown (messages, no error): the breaker closes at the timeout instead of
/// failing a healthy dependency. Paused clock over real sockets.
#[tokio::test(start_paused = true)]
async fn a_probe_streaming_past_the_half_open_timeout_closes_the_breaker() {
    let (addr, mut calls) = serve().await;
    let half_open_timeout = Duration::from_secs(30);
    let breaker = breaker(half_open_timeout).hold_until_body_end();
    let handle = breaker.handle();
    let mut grpc = tonic::client::Grpc::new(breaker.layer(channel(addr)));

    // Trip it: a stream that fails.
    let mut stream = subscribe(&mut grpc).await;
    let feed = calls.recv().await.unwrap();
    feed.send(Err(Status::unavailable("down"))).unwrap();
    assert!(stream.message().await.is_err());
    assert_eq!(handle.state(), State::Open);

    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(handle.state(), State::HalfOpen);

    // The probe: its response arrives and its first message.
    let mut probe = subscribe(&mut grpc).await;
    let feed = calls.recv().await.unwrap();
    feed.send(Ok(Price { cents: 1250 })).unwrap();
    assert_eq!(probe.message().await.unwrap().unwrap().cents, 1250);
    assert_eq!(handle.state(), State::HalfOpen);
    assert_eq!(handle.snapshot().probes_in_flight, 1);

    // Past the half-open timeout, still streaming without error: a success.
    tokio::time::advance(half_open_timeout).await;
    assert_eq!(handle.state(), State::Closed);
    // Closed: another caller goes through at once (and makes the lazy transition).
    let mut other = subscribe(&mut grpc).await;
    drop(calls.recv().await.unwrap());
    assert!(other.message().await.unwrap().is_none());
    feed.send(Ok(Price { cents: 1260 })).unwrap();
    assert_eq!(probe.message().await.unwrap().unwrap().cents, 1260);
    let c = handle.snapshot().counters;
    assert_eq!(
        (c.probe_successes, c.probe_failures, c.probe_timeouts),
        (1, 0, 0)
    );

    // The stream ends OK later: counted once, as stale; no second verdict.
    drop(feed);
    assert!(probe.message().await.unwrap().is_none());
    let c = handle.snapshot().counters;
    assert_eq!((c.probe_successes, c.stale), (1, 1));
    // The trip, the other caller and the probe, each counted once.
    assert_eq!((c.successes, c.failures, c.calls), (2, 1, 3));
    assert_eq!(handle.state(), State::Closed);
}

/// The degradation layer held until the body ends: a stream that fails after two
/// messages is a failure of the level that served it, and the level falls.
#[tokio::test]
async fn a_stream_that_fails_after_two_messages_is_a_failure_of_its_degradation_level() {
    let (addr, mut calls) = serve().await;
    // The lower level: an immediate, trailers-only UNAVAILABLE that says so.
    let fallback = tower::service_fn(|_req: http::Request<Body>| async {
        Ok::<_, BoxError>(Status::unavailable("prices paused").into_http::<Body>())
    });
    let degradation = DegradationLayer::builder("prices")
        .inner_level("live")
        .level("paused", fallback)
        .consecutive_failures(1)
        .classifier(AdmissionAsFailure(GrpcStatus::default()))
        .build()
        .unwrap()
        .hold_until_body_end();
    let handle = degradation.handle();
    let mut grpc = tonic::client::Grpc::new(degradation.layer(channel(addr)));

    let mut stream = subscribe(&mut grpc).await;
    let feed = calls.recv().await.unwrap();
    for cents in [1250, 1300] {
        feed.send(Ok(Price { cents })).unwrap();
        assert_eq!(stream.message().await.unwrap().unwrap().cents, cents);
        assert_eq!(handle.snapshot().level_name, "live");
    }
    feed.send(Err(Status::unavailable("supplier overloaded")))
        .unwrap();
    assert_eq!(
        stream.message().await.unwrap_err().code(),
        Code::Unavailable
    );
    // Seen in the trailers when the body ended: the level fell.
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.level_name, "paused");

    // The next call is served by the lower level, without reaching the server.
    let mut next = grpc.clone();
    next.ready().await.unwrap();
    let status = next
        .server_streaming(
            Request::new(Subscribe {
                route: "SP -> RJ".into(),
            }),
            http::uri::PathAndQuery::from_static(SUBSCRIBE),
            ProstCodec::<Subscribe, Price>::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(status.message(), "prices paused");
    assert!(calls.try_recv().is_err(), "no call reached the server");
}

/// A unary response whose `UNAVAILABLE` comes only in the body's trailers (HTTP 200
/// headers without `grpc-status`): the header classifier alone counts it a success
/// (`tests/grpc.rs`); held until the body ends, the breaker sees the failure.
#[tokio::test]
async fn a_unary_status_sent_only_in_the_trailers_is_a_failure_when_held_to_the_body_end() {
    use grpc_quote::{Behaviour, QuoteRequest, QuotesClient, QuotesServer};
    let server = QuotesServer::default();
    let addr = server.serve().await.unwrap();
    let breaker = breaker(Duration::from_secs(3600)).hold_until_body_end();
    let handle = breaker.handle();
    let mut client = QuotesClient::new(breaker.layer(channel(addr)));

    assert_eq!(
        client
            .get(QuoteRequest {
                destination: "lisbon".into()
            })
            .await
            .unwrap()
            .into_inner()
            .price_cents,
        1250
    );
    assert_eq!(counters(&handle), (1, 0, 1));
    server.set(Behaviour::TrailingUnavailable);
    let status = client
        .get(QuoteRequest {
            destination: "lisbon".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(counters(&handle), (1, 1, 2));
    assert_eq!(handle.state(), State::Open);
}
