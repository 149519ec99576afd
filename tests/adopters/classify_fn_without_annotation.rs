//! A user's supplier answers `200` with an `x-degraded` header when it serves from a
//! stale cache, and the user wants that to count against it. They write the
//! classifier as a closure without annotating its parameter, through
//! `classify_fn::<Res, _>(|r| ..)`, on a breaker held until the response body ends in
//! front of a hyper-util client (a closure needs `classify_fn` there: the body's end
//! is classified too). The supplier is a real hyper server on 127.0.0.1; calls run
//! in spawned tasks.
//!
//! Asserted: two degraded `200`s (successes for `HttpStatus`) open a breaker of two
//! consecutive failures, and the third call is rejected with `CircuitOpen` without
//! reaching the supplier.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::core::{classify_fn, Outcome};
use seawall::{find_rejection, BoxError, RejectionKind};
use tower::{ServiceBuilder, ServiceExt};

#[tokio::test]
async fn an_unannotated_classify_fn_counts_degraded_answers_as_failures() -> Result<(), BoxError> {
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
                            let mut res = http::Response::new(Full::new(Bytes::from_static(
                                b"rate: 12.50 EUR (cached yesterday)",
                            )));
                            res.headers_mut().insert(
                                "x-degraded",
                                http::HeaderValue::from_static("stale-cache"),
                            );
                            Ok::<_, Infallible>(res)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        }
    });

    let breaker = CircuitBreakerLayer::builder("rates")
        .consecutive_failures(2)
        .open_for(Duration::from_secs(60))
        .jitter(0.0)
        .classifier(classify_fn::<http::Response<Incoming>, _>(|r| match r {
            Ok(res) if res.headers().contains_key("x-degraded") => Outcome::Failure,
            Ok(res) if res.status().is_server_error() => Outcome::Failure,
            Ok(_) => Outcome::Success,
            Err(e) if e.rejection().is_some() => Outcome::Ignore,
            Err(_) => Outcome::Failure,
        }))
        .build()?;
    let handle = breaker.handle();
    let rates = ServiceBuilder::new()
        .layer(
            BulkheadLayer::builder("rates")
                .max_concurrent(8)
                .build()?
                .hold_until_body_end(),
        )
        .layer(breaker.hold_until_body_end())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());

    let mut results = Vec::new();
    for _ in 0..3 {
        let rates = rates.clone();
        let result = tokio::spawn(async move {
            let req = http::Request::get(format!("http://{supplier}/rate")).body(Empty::new())?;
            let res = rates.oneshot(req).await?;
            let body = res.into_body().collect().await?.to_bytes();
            Ok::<_, BoxError>(String::from_utf8_lossy(&body).into_owned())
        })
        .await?;
        results.push(result);
    }

    assert_eq!(
        results[0].as_deref().ok(),
        Some("rate: 12.50 EUR (cached yesterday)")
    );
    assert!(results[1].is_ok());
    assert_eq!(handle.state(), State::Open);
    let err = results[2].as_ref().expect_err("the breaker is open");
    assert_eq!(
        find_rejection(&**err).map(|r| r.kind()),
        Some(RejectionKind::CircuitOpen)
    );
    assert_eq!(received.load(Ordering::SeqCst), 2);
    Ok(())
}
