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
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use tokio::sync::{watch, Semaphore};
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
/// wrapped in seawall's layers. The bounds are the ones `tonic-build` generates.
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
    /// A quote.
    Quote = 0,
    /// `UNAVAILABLE`, trailers-only (the status in the response headers).
    Unavailable = 1,
    /// `NOT_FOUND`, trailers-only: a business answer.
    NotFound = 2,
    /// A quote after 2 s.
    Slow = 3,
    /// A quote once the test lets one through with [`QuotesServer::release`].
    Held = 4,
    /// `UNAVAILABLE` sent the way a streaming server sends a late failure: HTTP 200
    /// and `content-type: application/grpc` in the headers, no `grpc-status` there,
    /// the status only in the body's trailers.
    TrailingUnavailable = 5,
}

impl Behaviour {
    fn from_u8(b: u8) -> Self {
        match b {
            1 => Self::Unavailable,
            2 => Self::NotFound,
            3 => Self::Slow,
            4 => Self::Held,
            5 => Self::TrailingUnavailable,
            _ => Self::Quote,
        }
    }
}

/// The server side: a quote service whose behaviour a test or example can switch.
#[derive(Debug, Clone)]
pub struct QuotesServer {
    behaviour: Arc<AtomicU8>,
    received: Arc<watch::Sender<usize>>,
    gate: Arc<Semaphore>,
}

impl Default for QuotesServer {
    fn default() -> Self {
        Self {
            behaviour: Arc::new(AtomicU8::new(Behaviour::Quote as u8)),
            received: Arc::new(watch::Sender::new(0)),
            gate: Arc::new(Semaphore::new(0)),
        }
    }
}

impl QuotesServer {
    pub fn set(&self, b: Behaviour) {
        self.behaviour.store(b as u8, Ordering::SeqCst);
    }

    /// Requests that reached the server.
    pub fn received(&self) -> usize {
        *self.received.borrow()
    }

    /// Waits until at least `n` requests have reached the server (no polling, no sleep).
    pub async fn wait_received(&self, n: usize) {
        let mut rx = self.received.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|&count| count >= n).await;
    }

    /// Lets `n` held requests ([`Behaviour::Held`]) answer.
    pub fn release(&self, n: usize) {
        self.gate.add_permits(n);
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

struct Get(Behaviour, Arc<Semaphore>);

impl Service<Request<QuoteRequest>> for Get {
    type Response = Response<QuoteReply>;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Status>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<QuoteRequest>) -> Self::Future {
        let behaviour = self.0;
        let gate = Arc::clone(&self.1);
        let destination = req.into_inner().destination;
        let quote = Response::new(QuoteReply { price_cents: 1250 });
        Box::pin(async move {
            match behaviour {
                Behaviour::Unavailable => Err(Status::unavailable("supplier overloaded")),
                Behaviour::NotFound => {
                    Err(Status::not_found(format!("no quote for {destination}")))
                }
                Behaviour::Slow => {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    Ok(quote)
                }
                Behaviour::Held => match gate.acquire().await {
                    Ok(permit) => {
                        permit.forget();
                        Ok(quote)
                    }
                    Err(_) => Err(Status::unavailable("server shutting down")),
                },
                Behaviour::Quote | Behaviour::TrailingUnavailable => Ok(quote),
            }
        })
    }
}

/// HTTP 200 with gRPC headers and no `grpc-status` there; `UNAVAILABLE` arrives in
/// the trailers that end the (empty) body.
fn trailing_unavailable() -> http::Response<Body> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("14"));
    trailers.insert(
        "grpc-message",
        http::HeaderValue::from_static("supplier%20overloaded"),
    );
    let body = Empty::<bytes::Bytes>::new().with_trailers(async move { Some(Ok(trailers)) });
    let mut res = http::Response::new(Body::new(body));
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    res
}

impl Service<http::Request<Body>> for QuotesServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let behaviour = Behaviour::from_u8(self.behaviour.load(Ordering::SeqCst));
        let gate = Arc::clone(&self.gate);
        self.received.send_modify(|count| *count += 1);
        Box::pin(async move {
            if req.uri().path() != GET {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            if behaviour == Behaviour::TrailingUnavailable {
                return Ok(trailing_unavailable());
            }
            let mut grpc =
                tonic::server::Grpc::new(ProstCodec::<QuoteReply, QuoteRequest>::default());
            Ok(grpc.unary(Get(behaviour, gate), req).await)
        })
    }
}
