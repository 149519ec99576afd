//! A user subscribes to a server-streaming gRPC method with its generated client
//! (`PricesClient`, below, in the shape `tonic-build` generates for
//! `rpc Subscribe(Subscribe) returns (stream Price)`) over a protected tonic
//! `Channel`: rejections as statuses → breaker held until the response body ends (gRPC
//! status classifier) → `Channel`, against a real tonic server on 127.0.0.1. The
//! stream is read in a spawned task.
//!
//! Asserted: a stream that delivers two prices and then ends with `UNAVAILABLE` in
//! its trailers is a failure of the breaker (one failure opens it), so the next
//! subscription is refused with `CircuitOpen` without reaching the server.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::core::grpc::RejectionStatusLayer;
use seawall::{find_rejection, BoxError, GrpcStatus, RejectionKind};
use tonic::body::Body;
use tonic::transport::Endpoint;
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;
use tower::{Service, ServiceBuilder};

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

/// The generated client.
#[derive(Debug, Clone)]
struct PricesClient<T> {
    inner: tonic::client::Grpc<T>,
}

impl<T> PricesClient<T>
where
    T: tonic::client::GrpcService<Body>,
    T::Error: Into<BoxError>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<BoxError> + Send,
{
    fn new(inner: T) -> Self {
        Self {
            inner: tonic::client::Grpc::new(inner),
        }
    }

    async fn subscribe(
        &mut self,
        request: Subscribe,
    ) -> Result<Response<Streaming<Price>>, Status> {
        self.inner
            .ready()
            .await
            .map_err(|e| Status::unknown(format!("service was not ready: {}", e.into())))?;
        let codec = ProstCodec::<Subscribe, Price>::default();
        let path = http::uri::PathAndQuery::from_static(SUBSCRIBE);
        self.inner
            .server_streaming(Request::new(request), path, codec)
            .await
    }
}

/// The server: every subscription streams two prices, then fails with `UNAVAILABLE`
/// (in the trailers, after the messages). It counts the subscriptions it gets.
#[derive(Clone, Default)]
struct PricesServer {
    subscriptions: Arc<AtomicUsize>,
}

impl tonic::server::NamedService for PricesServer {
    const NAME: &'static str = "freight.Prices";
}

struct SubscribeCall;

impl tonic::server::ServerStreamingService<Subscribe> for SubscribeCall {
    type Response = Price;
    type ResponseStream = tokio_stream::Iter<std::vec::IntoIter<Result<Price, Status>>>;
    type Future = std::future::Ready<Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, _request: Request<Subscribe>) -> Self::Future {
        let items = vec![
            Ok(Price { cents: 1250 }),
            Ok(Price { cents: 1300 }),
            Err(Status::unavailable("supplier overloaded")),
        ];
        std::future::ready(Ok(Response::new(tokio_stream::iter(items))))
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
        self.subscriptions.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if req.uri().path() != SUBSCRIBE {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Price, Subscribe>::default());
            Ok(grpc.server_streaming(SubscribeCall, req).await)
        })
    }
}

#[tokio::test]
async fn a_stream_ending_with_unavailable_in_its_trailers_opens_the_breaker() -> Result<(), BoxError>
{
    let server = PricesServer::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let router = tonic::transport::Server::builder().add_service(server.clone());
    tokio::spawn(router.serve_with_incoming(incoming));

    let breaker = CircuitBreakerLayer::builder("prices")
        .consecutive_failures(1)
        .open_for(Duration::from_secs(60))
        .jitter(0.0)
        .classifier(GrpcStatus::default())
        .build()?;
    let handle = breaker.handle();
    let channel = Endpoint::from_shared(format!("http://{addr}"))?.connect_lazy();
    let stack = ServiceBuilder::new()
        .layer(RejectionStatusLayer)
        .layer(breaker.hold_until_body_end())
        .service(channel);
    let client = PricesClient::new(stack);

    // Read the whole stream: the prices, then how it ended.
    let mut first = client.clone();
    let (prices, end) = tokio::spawn(async move {
        let mut stream = first
            .subscribe(Subscribe {
                route: "SP -> RJ".into(),
            })
            .await?
            .into_inner();
        let mut prices = Vec::new();
        loop {
            match stream.message().await {
                Ok(Some(price)) => prices.push(price.cents),
                Ok(None) => return Ok::<_, Status>((prices, None)),
                Err(status) => return Ok((prices, Some(status))),
            }
        }
    })
    .await??;
    assert_eq!(prices, [1250, 1300]);
    assert_eq!(end.map(|s| s.code()), Some(Code::Unavailable));
    assert_eq!(
        handle.state(),
        State::Open,
        "the trailers' status was a failure"
    );

    let mut second = client.clone();
    let refused = tokio::spawn(async move {
        second
            .subscribe(Subscribe {
                route: "SP -> RJ".into(),
            })
            .await
    })
    .await?;
    let status = refused.expect_err("the breaker is open");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        find_rejection(&status).map(|r| r.kind()),
        Some(RejectionKind::CircuitOpen)
    );
    assert_eq!(server.subscriptions.load(Ordering::SeqCst), 1);
    Ok(())
}
