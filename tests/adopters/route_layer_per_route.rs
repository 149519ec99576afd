//! A user protects one route of an axum app with `route_layer`: `/quote` gets
//! respond → bulkhead → breaker (server side, headers mode, HTTP status classifier)
//! around a handler that relays a failing supplier's 503; `/products` gets no policy.
//! The app is served on 127.0.0.1 and asked over HTTP from spawned tasks.
//!
//! Asserted: once `/quote`'s breaker is open, `/quote` is answered 503 with
//! `Retry-After` without running its handler, while `/products`, which has no policy,
//! still answers 200.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::{BoxError, HttpStatus, ServiceBuilderExt};
use tower::ServiceBuilder;

#[tokio::test]
async fn an_open_breaker_on_one_route_leaves_the_other_routes_alone() -> Result<(), BoxError> {
    let breaker = CircuitBreakerLayer::builder("quote")
        .consecutive_failures(2)
        .open_for(Duration::from_secs(60))
        .jitter(0.0)
        .classifier(HttpStatus::default())
        .build()?;
    let handle = breaker.handle();
    let quote_policy = ServiceBuilder::new()
        .respond()
        .bulkhead(BulkheadLayer::builder("quote").max_concurrent(8).build()?)
        .circuit_breaker(breaker);

    let quote_calls = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new()
        .route(
            "/quote",
            get({
                let quote_calls = quote_calls.clone();
                move || async move {
                    quote_calls.fetch_add(1, Ordering::SeqCst);
                    (StatusCode::SERVICE_UNAVAILABLE, "freight supplier down")
                }
            })
            .route_layer(quote_policy),
        )
        .route("/products", get(|| async { "boots, tent, headlamp" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let shop = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut answers = Vec::new();
    for path in ["/quote", "/quote", "/quote", "/products"] {
        let http = http.clone();
        let answer = tokio::spawn(async move {
            let res = http.get(format!("http://{shop}{path}").parse()?).await?;
            let status = res.status();
            let retry_after = res.headers().contains_key(http::header::RETRY_AFTER);
            let body = res.into_body().collect().await?.to_bytes();
            Ok::<_, BoxError>((
                status,
                retry_after,
                String::from_utf8_lossy(&body).into_owned(),
            ))
        })
        .await??;
        answers.push(answer);
    }

    // Two 503s from the handler open the breaker ...
    assert_eq!(answers[0].2, "freight supplier down");
    assert_eq!(answers[1].2, "freight supplier down");
    assert_eq!(handle.state(), State::Open);
    // ... so the third is the policy's 503 with Retry-After; the handler did not run.
    assert_eq!(answers[2].0, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answers[2].1, "Retry-After on the breaker's answer");
    assert_ne!(answers[2].2, "freight supplier down");
    assert_eq!(quote_calls.load(Ordering::SeqCst), 2);
    // The route without the policy is not affected.
    assert_eq!(
        answers[3],
        (StatusCode::OK, false, "boots, tent, headlamp".to_owned())
    );
    Ok(())
}
