//! A user builds the README's client stack for a freight supplier: bulkhead (8
//! calls, no queue) outside the breaker, both held until the response body ends, in
//! front of a hyper-util client; the supplier is a real hyper server on 127.0.0.1.
//! Each call runs in a spawned task, which hands back the response with its body not
//! yet read (as a handler that streams it on would).
//!
//! Asserted: while eight response bodies are unread, the ninth call is rejected with
//! `BulkheadFull`, and the breaker behind the bulkhead never sees it: once the eight
//! bodies are read it has recorded eight calls, all successes.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::{find_rejection, BoxError, HttpStatus, RejectionKind};
use tower::{ServiceBuilder, ServiceExt};

#[tokio::test]
async fn the_ninth_call_is_refused_while_eight_bodies_are_unread() -> Result<(), BoxError> {
    let received = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let supplier = listener.local_addr()?;
    tokio::spawn({
        let received = received.clone();
        async move {
            while let Ok((stream, _)) = listener.accept().await {
                let received = received.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |_req| {
                        received.fetch_add(1, Ordering::SeqCst);
                        async {
                            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                                b"quote: 12.50 EUR",
                            ))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        }
    });

    let bulkhead = BulkheadLayer::builder("freight")
        .max_concurrent(8)
        .max_queue(0)
        .build()?;
    let slots = bulkhead.handle();
    let breaker = CircuitBreakerLayer::builder("freight")
        .consecutive_failures(1)
        .jitter(0.0)
        .classifier(HttpStatus::default())
        .build()?;
    let breaker_handle = breaker.handle();
    let freight = ServiceBuilder::new()
        .layer(bulkhead.hold_until_body_end())
        .layer(breaker.hold_until_body_end())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());

    let mut unread = Vec::new();
    for _ in 0..8 {
        let freight = freight.clone();
        let res = tokio::spawn(async move {
            let req = http::Request::get(format!("http://{supplier}/quote")).body(Empty::new())?;
            freight.oneshot(req).await
        })
        .await??;
        unread.push(res);
    }
    assert_eq!(slots.snapshot().active, 8);

    let ninth = {
        let freight = freight.clone();
        tokio::spawn(async move {
            let req = http::Request::get(format!("http://{supplier}/quote")).body(Empty::new())?;
            freight.oneshot(req).await
        })
        .await?
    };
    let err = ninth.expect_err("eight bodies hold the eight slots");
    assert_eq!(
        find_rejection(&*err).map(|r| r.kind()),
        Some(RejectionKind::BulkheadFull)
    );
    assert_eq!(received.load(Ordering::SeqCst), 8);

    for res in unread {
        let body = res.into_body().collect().await?.to_bytes();
        assert_eq!(&body[..], b"quote: 12.50 EUR");
    }
    let counters = breaker_handle.snapshot().counters;
    assert_eq!((counters.calls, counters.successes), (8, 8));
    assert_eq!(breaker_handle.state(), State::Closed);
    assert_eq!(slots.snapshot().active, 0);
    Ok(())
}
