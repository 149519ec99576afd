//! A hand-written gRPC service, in the shape `tonic-build` would generate, so the
//! examples and tests need no `build.rs` and no `protoc`:
//!
//! ```proto
//! service Quotes { rpc Get(QuoteRequest) returns (QuoteReply); }
//! message QuoteRequest { string destination = 1; }
//! message QuoteReply { uint64 price_cents = 1; }
//! ```

#![allow(dead_code, unreachable_pub)] // shared by several examples and tests, each using a part

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;

use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use tower::Service;

#[derive(Clone, PartialEq, prost::Message)]
pub struct QuoteRequest {
    #[prost(string, tag = "1")]
    pub destination: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct QuoteReply {
    #[prost(uint64, tag = "1")]
    pub price_cents: u64,
}

const GET: &str = "/freight.Quotes/Get";

/// The generated-style client: works over any `GrpcService`, such as a `Channel`
/// wrapped in seawall's layers.
#[derive(Debug, Clone)]
pub struct QuotesClient<T> {
    inner: tonic::client::Grpc<T>,
}

impl<T> QuotesClient<T>
where
    T: tonic::client::GrpcService<Body>,
    T::Error: Into<seawall::BoxError>,
    T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<seawall::BoxError> + Send,
{
    pub fn new(inner: T) -> Self {
        Self {
            inner: tonic::client::Grpc::new(inner),
        }
    }

    pub async fn get(&mut self, request: QuoteRequest) -> Result<Response<QuoteReply>, Status> {
        self.inner
            .ready()
            .await
            .map_err(|e| Status::unknown(format!("service was not ready: {}", e.into())))?;
        let codec = ProstCodec::<QuoteRequest, QuoteReply>::default();
        let path = http::uri::PathAndQuery::from_static(GET);
        self.inner.unary(Request::new(request), path, codec).await
    }
}

/// How the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Behaviour {
    Quote = 0,
    Unavailable = 1,
    NotFound = 2,
    Slow = 3,
}

/// The server side: a quote service whose behaviour a test or example can switch.
#[derive(Debug, Clone, Default)]
pub struct QuotesServer {
    behaviour: Arc<AtomicU8>,
    received: Arc<AtomicUsize>,
}

impl QuotesServer {
    pub fn set(&self, b: Behaviour) {
        self.behaviour.store(b as u8, Ordering::SeqCst);
    }

    /// Requests that reached the server.
    pub fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }

    /// Serves on an ephemeral loopback port; returns its address.
    pub async fn serve(&self) -> std::io::Result<std::net::SocketAddr> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let router = tonic::transport::Server::builder().add_service(self.clone());
        tokio::spawn(router.serve_with_incoming(incoming));
        Ok(addr)
    }
}

impl tonic::server::NamedService for QuotesServer {
    const NAME: &'static str = "freight.Quotes";
}

struct Get(QuotesServer);

impl Service<Request<QuoteRequest>> for Get {
    type Response = Response<QuoteReply>;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Status>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<QuoteRequest>) -> Self::Future {
        self.0.received.fetch_add(1, Ordering::SeqCst);
        let behaviour = self.0.behaviour.load(Ordering::SeqCst);
        let destination = req.into_inner().destination;
        Box::pin(async move {
            match behaviour {
                1 => Err(Status::unavailable("supplier overloaded")),
                2 => Err(Status::not_found(format!("no quote for {destination}"))),
                3 => {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    Ok(Response::new(QuoteReply { price_cents: 1250 }))
                }
                _ => Ok(Response::new(QuoteReply { price_cents: 1250 })),
            }
        })
    }
}

impl Service<http::Request<Body>> for QuotesServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let server = self.clone();
        Box::pin(async move {
            if req.uri().path() != GET {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            let mut grpc =
                tonic::server::Grpc::new(ProstCodec::<QuoteReply, QuoteRequest>::default());
            Ok(grpc.unary(Get(server), req).await)
        })
    }
}
