//! A user's axum handler calls a supplier through a protected hyper-util client:
//! bulkhead → breaker (both held until the response body ends, HTTP status
//! classifier) → `hyper_util::client::legacy::Client`. The supplier is a real hyper
//! server on 127.0.0.1 that answers 503; the axum app is served on 127.0.0.1 and asked
//! over HTTP.
//!
//! Asserted: after three 503s the breaker is open, and the fourth request is answered
//! by the handler's "circuit open" branch (`CircuitOpen` found by `find_rejection`)
//! without reaching the supplier.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::{find_rejection, BoxError, HttpStatus, RejectionKind};
use tower::{ServiceBuilder, ServiceExt};

#[tokio::test]
async fn an_axum_handler_stops_calling_a_failing_supplier_once_the_breaker_opens(
) -> Result<(), BoxError> {
    // The supplier: a hyper server that answers 503 and counts what it receives.
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
                            let mut res =
                                http::Response::new(Full::new(Bytes::from_static(b"overloaded")));
                            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
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

    // The protected client, as the README's client stack.
    let breaker = CircuitBreakerLayer::builder("supplier")
        .consecutive_failures(3)
        .open_for(Duration::from_secs(60))
        .jitter(0.0)
        .classifier(HttpStatus::default())
        .build()?;
    let breaker_handle = breaker.handle();
    let client = ServiceBuilder::new()
        .layer(
            BulkheadLayer::builder("supplier")
                .max_concurrent(8)
                .build()?
                .hold_until_body_end(),
        )
        .layer(breaker.hold_until_body_end())
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());

    // The user's app: one handler that asks the supplier for a rate.
    let app = axum::Router::new().route(
        "/rate",
        get(move || {
            let client = client.clone();
            async move {
                let req = http::Request::get(format!("http://{supplier}/rate"))
                    .body(Empty::new())
                    .expect("a valid request");
                match client.oneshot(req).await {
                    Ok(res) if res.status().is_success() => match res.into_body().collect().await {
                        Ok(body) => (StatusCode::OK, format!("{:?}", body.to_bytes())),
                        Err(e) => (StatusCode::BAD_GATEWAY, format!("body failed: {e}")),
                    },
                    Ok(res) => {
                        let status = res.status();
                        // Read to the end: the breaker records the call when it ends.
                        let _ = res.into_body().collect().await;
                        (
                            StatusCode::BAD_GATEWAY,
                            format!("supplier answered {status}"),
                        )
                    }
                    Err(e) => match find_rejection(&*e) {
                        Some(r) if r.kind() == RejectionKind::CircuitOpen => {
                            (StatusCode::SERVICE_UNAVAILABLE, "circuit open".to_owned())
                        }
                        _ => (
                            StatusCode::BAD_GATEWAY,
                            format!("supplier unreachable: {e}"),
                        ),
                    },
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let shop = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    // Four real HTTP requests to the app, one after the other, each from a task.
    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut answers = Vec::new();
    for _ in 0..4 {
        let http = http.clone();
        let answer = tokio::spawn(async move {
            let res = http.get(format!("http://{shop}/rate").parse()?).await?;
            let status = res.status();
            let body = res.into_body().collect().await?.to_bytes();
            Ok::<_, BoxError>((status, String::from_utf8_lossy(&body).into_owned()))
        })
        .await??;
        answers.push(answer);
    }

    let failed = (
        StatusCode::BAD_GATEWAY,
        "supplier answered 503 Service Unavailable".to_owned(),
    );
    assert_eq!(answers[..3], [failed.clone(), failed.clone(), failed]);
    assert_eq!(
        answers[3],
        (StatusCode::SERVICE_UNAVAILABLE, "circuit open".to_owned())
    );
    assert_eq!(breaker_handle.state(), State::Open);
    assert_eq!(
        received.load(Ordering::SeqCst),
        3,
        "the open breaker kept the fourth call away from the supplier"
    );
    Ok(())
}
