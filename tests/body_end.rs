//! Protection that lasts until the response body ends, over real loopback servers:
//! a hyper supplier that paces its bodies, a tonic server whose status comes in the
//! trailers, and an axum route that streams server-sent events.
//!
//! The sockets, clients and servers are real and run on real time, so the tests
//! assert only what holds under any load: counts kept by the server, what the
//! breaker recorded, what the bulkhead holds. Nothing waits by sleeping; the server's
//! pacing is the only timer, and no assertion depends on how long anything took.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "../examples/shared/grpc_quote.rs"]
mod grpc_quote;
#[path = "../examples/shared/quote_stack.rs"]
mod quote_stack;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use seawall::bulkhead::{BulkheadLayer, Handle as BulkheadHandle};
use seawall::circuit_breaker::{CircuitBreakerLayer, Handle};
use seawall::{BoxError, HttpStatus, ServiceBuilderExt};
use tokio::time::Sleep;
use tower::{Service, ServiceBuilder, ServiceExt};

// ---------------------------------------------------------------------------------
// The hyper supplier
// ---------------------------------------------------------------------------------

/// Chunks in a paced body, and the server's pause between two of them.
const CHUNKS: usize = 10;
const GAP: Duration = Duration::from_millis(50);

/// Responses between their first and last chunk, counted where the chunks are
/// made: at the server.
#[derive(Debug, Default)]
struct InBody {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl InBody {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

/// How a supplier's body goes.
#[derive(Debug, Clone, Copy)]
enum Script {
    /// `CHUNKS` chunks, `GAP` apart, counted in [`InBody`] from the first chunk
    /// made to the last.
    Paced,
    /// One chunk, then (a pause later) an error: hyper cuts the connection mid-body.
    FailAfterOne,
    /// One chunk, then nothing, ever.
    StallAfterOne,
}

/// A body made by the server, chunk by chunk, as [`Script`] says.
struct SupplierBody {
    script: Script,
    made: usize,
    tick: Pin<Box<Sleep>>,
    in_body: Option<Arc<InBody>>,
    counter: Arc<InBody>,
}

impl SupplierBody {
    fn new(script: Script, counter: Arc<InBody>) -> Self {
        Self {
            script,
            made: 0,
            tick: Box::pin(tokio::time::sleep(Duration::ZERO)),
            in_body: None,
            counter,
        }
    }
}

impl Body for SupplierBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let chunk = Bytes::from_static(b"0123456789abcdef");
        match (self.script, self.made) {
            (_, 0) => {
                if let Script::Paced = self.script {
                    self.counter.enter();
                    self.in_body = Some(Arc::clone(&self.counter));
                }
            }
            (Script::Paced, made) if made < CHUNKS => {
                ready!(self.tick.as_mut().poll(cx));
                if made == CHUNKS - 1 {
                    // The last chunk is made: this body leaves the count before
                    // the client can see its end.
                    if let Some(counter) = self.in_body.take() {
                        counter.leave();
                    }
                }
            }
            (Script::Paced, _) => return Poll::Ready(None),
            (Script::FailAfterOne, _) => {
                // Pending once first, so hyper has sent the headers and the chunk.
                ready!(self.tick.as_mut().poll(cx));
                return Poll::Ready(Some(Err(std::io::Error::other("supplier crashed"))));
            }
            (Script::StallAfterOne, _) => return Poll::Pending,
        }
        self.made += 1;
        let next = tokio::time::Instant::now() + GAP;
        self.tick.as_mut().reset(next);
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }
}

impl Drop for SupplierBody {
    fn drop(&mut self) {
        // A body cut before its last chunk leaves the count too.
        if let Some(counter) = self.in_body.take() {
            counter.leave();
        }
    }
}

/// A hyper server on loopback: `/paced`, `/fail` and `/stall` answer 200 with the
/// body of that [`Script`]. Returns its address and its in-body count.
async fn supplier() -> (SocketAddr, Arc<InBody>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counter = Arc::new(InBody::default());
    let shared = Arc::clone(&counter);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counter = Arc::clone(&shared);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let script = match req.uri().path() {
                        "/fail" => Script::FailAfterOne,
                        "/stall" => Script::StallAfterOne,
                        _ => Script::Paced,
                    };
                    let body = SupplierBody::new(script, Arc::clone(&counter));
                    async move { Ok::<_, Infallible>(Response::new(body)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, counter)
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

fn get(addr: SocketAddr, path: &str) -> Request<Full<Bytes>> {
    Request::get(format!("http://{addr}{path}"))
        .body(Full::default())
        .unwrap()
}

/// Eight slots; the others wait in the queue as long as it takes (the test is
/// about what reaches the supplier, not about turning calls away).
fn bulkhead() -> BulkheadLayer {
    BulkheadLayer::builder("supplier")
        .max_concurrent(8)
        .max_queue(64)
        .max_wait(Duration::from_secs(600))
        .build()
        .unwrap()
}

fn breaker() -> CircuitBreakerLayer<HttpStatus> {
    CircuitBreakerLayer::builder("supplier")
        .consecutive_failures(100)
        .jitter(0.0)
        .classifier(HttpStatus::default())
        .build()
        .unwrap()
}

/// 50 callers at once through `svc`, each reading its body to the end; returns the
/// most responses the server had between their first and last chunk.
async fn fifty_callers<S, B>(svc: S, addr: SocketAddr, counter: &InBody) -> usize
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone + Send + 'static,
    S::Error: std::fmt::Debug,
    S::Future: Send,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Debug,
{
    let callers: Vec<_> = (0..50)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move {
                let res = svc.oneshot(get(addr, "/paced")).await.unwrap();
                assert_eq!(res.status(), StatusCode::OK);
                res.into_body().collect().await.unwrap().to_bytes().len()
            })
        })
        .collect();
    for caller in callers {
        assert_eq!(
            caller.await.unwrap(),
            CHUNKS * 16,
            "every body read to its end"
        );
    }
    counter.max()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_until_the_body_ends_the_supplier_never_streams_more_than_the_bulkhead_allows() {
    let (addr, counter) = supplier().await;
    let bulkhead = bulkhead();
    let slots = bulkhead.handle();
    let svc = ServiceBuilder::new()
        .bulkhead(bulkhead.hold_until_body_end())
        .layer(breaker().hold_until_body_end())
        .service(client());
    let max = fifty_callers(svc, addr, &counter).await;
    println!("hold until body end: at most {max} responses in their body at the server");
    assert!(max <= 8, "{max} responses streamed at once through 8 slots");
    assert!(max >= 1);
    assert_eq!(slots.snapshot().active, 0);
}

/// The same callers with the slot freed at the headers: the bound no longer holds
/// at the supplier (so the test above can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freed_at_the_headers_the_supplier_streams_more_than_the_bulkhead_allows() {
    let (addr, counter) = supplier().await;
    let svc = ServiceBuilder::new()
        .bulkhead(bulkhead())
        .circuit_breaker(breaker())
        .service(client());
    let max = fifty_callers(svc, addr, &counter).await;
    println!("slot freed at the headers: at most {max} responses in their body at the server");
    assert!(max > 8, "only {max} responses streamed at once");
}

/// The body-end stack over the real hyper client, with its handles.
fn held_stack() -> (
    impl Service<
            Request<Full<Bytes>>,
            Response = Response<impl Body<Data = Bytes, Error = BoxError> + Send>,
            Error = BoxError,
            Future: Send,
        > + Clone,
    Handle,
    BulkheadHandle,
) {
    let (bulkhead, breaker) = (bulkhead(), breaker());
    let (slots, verdicts) = (bulkhead.handle(), breaker.handle());
    let svc = ServiceBuilder::new()
        .bulkhead(bulkhead.hold_until_body_end())
        .layer(breaker.hold_until_body_end())
        .service(client());
    (svc, verdicts, slots)
}

#[tokio::test]
async fn a_body_that_fails_mid_stream_is_a_failure_and_frees_its_slot() {
    let (addr, _) = supplier().await;
    let (svc, breaker, slots) = held_stack();
    let res = svc.oneshot(get(addr, "/fail")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let c = breaker.snapshot().counters;
    assert_eq!(
        (c.successes, c.failures),
        (0, 0),
        "judged at the body's end"
    );
    assert_eq!(slots.snapshot().active, 1, "the slot is held by the body");
    assert!(res.into_body().collect().await.is_err());
    let c = breaker.snapshot().counters;
    assert_eq!((c.successes, c.failures, c.cancelled), (0, 1, 0));
    assert_eq!(slots.snapshot().active, 0);
}

#[tokio::test]
async fn a_body_dropped_by_the_caller_is_a_cancel_and_frees_its_slot() {
    let (addr, _) = supplier().await;
    let (svc, breaker, slots) = held_stack();
    let res = svc.oneshot(get(addr, "/stall")).await.unwrap();
    let mut body = res.into_body();
    assert!(body.frame().await.unwrap().unwrap().is_data());
    assert_eq!(slots.snapshot().active, 1, "the slot is held by the body");
    drop(body);
    let c = breaker.snapshot().counters;
    assert_eq!((c.successes, c.failures, c.cancelled), (0, 0, 1));
    assert_eq!(slots.snapshot().active, 0);
}

// ---------------------------------------------------------------------------------
// tonic, through the tonic example's own stack
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn through_the_tonic_examples_stack_unavailable_in_the_trailers_is_a_failure() {
    use grpc_quote::{Behaviour, QuoteRequest, QuotesClient, QuotesServer};
    let server = QuotesServer::default();
    let addr = server.serve().await.unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let (stack, breaker) = quote_stack::quote_stack(channel).unwrap();
    let mut client = QuotesClient::new(stack);
    let request = || QuoteRequest {
        destination: "PT-1000".into(),
    };

    // The stream ends OK: a success, judged at its end.
    let reply = client.get(request()).await.unwrap();
    assert_eq!(reply.into_inner().price_cents, 1250);
    let c = breaker.snapshot().counters;
    assert_eq!((c.successes, c.failures), (1, 0));

    // HTTP 200, gRPC headers, UNAVAILABLE only in the trailers that end the stream.
    server.set(Behaviour::TrailingUnavailable);
    let status = client.get(request()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    let c = breaker.snapshot().counters;
    assert_eq!((c.successes, c.failures), (1, 1));
}

// ---------------------------------------------------------------------------------
// axum: a server route that streams keeps the headers mode
// ---------------------------------------------------------------------------------

/// An SSE route behind a one-slot bulkhead in the default (headers) mode: the slot
/// is freed when the handler's response is made, so a caller reading a long
/// stream does not pin it, and a second caller is admitted while the first stream
/// still runs.
#[tokio::test]
async fn an_sse_route_frees_its_slot_at_the_headers_while_the_stream_continues() {
    use axum::response::sse::{Event, Sse};
    use axum::routing::get as route_get;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    type Feed = mpsc::UnboundedSender<Result<Event, Infallible>>;
    let (feeds, mut opened) = mpsc::unbounded_channel::<Feed>();
    let bulkhead = BulkheadLayer::builder("events")
        .max_concurrent(1)
        .max_queue(0)
        .build()
        .unwrap();
    let slots = bulkhead.handle();
    let route_stack = ServiceBuilder::new().respond().bulkhead(bulkhead);
    let app = axum::Router::new().route(
        "/events",
        route_get(move || {
            let (feed, events) = mpsc::unbounded_channel();
            let _ = feeds.send(feed);
            async move { Sse::new(UnboundedReceiverStream::new(events)) }
        })
        .route_layer(route_stack),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = client();
    let first = client.request(get(addr, "/events")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let first_feed = opened.recv().await.unwrap();
    let mut first_body = first.into_body();
    first_feed
        .send(Ok(Event::default().data("price 1")))
        .unwrap();
    let frame = first_body.frame().await.unwrap().unwrap();
    assert!(frame.data_ref().unwrap().starts_with(b"data: price 1"));

    // The stream is open and its caller is reading it, yet the slot is free...
    assert_eq!(slots.snapshot().active, 0);
    // ...so a second caller gets the one slot, where a held slot would answer 503.
    let second = client.request(get(addr, "/events")).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    let _second_feed = opened.recv().await.unwrap();

    // The first stream goes on.
    first_feed
        .send(Ok(Event::default().data("price 2")))
        .unwrap();
    let frame = first_body.frame().await.unwrap().unwrap();
    assert!(frame.data_ref().unwrap().starts_with(b"data: price 2"));
    assert!(!first_body.is_end_stream());
}

/// The same route with the hold opted into: the open stream keeps the slot, and a
/// second caller is turned away (so the test above can fail).
#[tokio::test]
async fn an_sse_route_that_opts_into_the_hold_keeps_its_slot_while_streaming() {
    use axum::response::sse::{Event, Sse};
    use axum::routing::get as route_get;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    type Feed = mpsc::UnboundedSender<Result<Event, Infallible>>;
    let (feeds, mut opened) = mpsc::unbounded_channel::<Feed>();
    let bulkhead = BulkheadLayer::builder("events")
        .max_concurrent(1)
        .max_queue(0)
        .build()
        .unwrap();
    let slots = bulkhead.handle();
    let route_stack = ServiceBuilder::new()
        .respond()
        .bulkhead(bulkhead.hold_until_body_end());
    let app = axum::Router::new().route(
        "/events",
        route_get(move || {
            let (feed, events) = mpsc::unbounded_channel();
            let _ = feeds.send(feed);
            async move { Sse::new(UnboundedReceiverStream::new(events)) }
        })
        .route_layer(route_stack),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = client();
    let first = client.request(get(addr, "/events")).await.unwrap();
    let first_feed = opened.recv().await.unwrap();
    let mut first_body = first.into_body();
    first_feed
        .send(Ok(Event::default().data("price 1")))
        .unwrap();
    assert!(first_body.frame().await.unwrap().unwrap().is_data());
    assert_eq!(slots.snapshot().active, 1);
    let second = client.request(get(addr, "/events")).await.unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
}
