//! A user calls a gRPC quote service with its generated client (`QuotesClient`, in
//! the shape `tonic-build` generates) over a protected tonic `Channel`: rejections
//! as statuses → deadline → bulkhead → breaker (both held until the response body
//! ends, gRPC status classifier) → `Channel`, against a real tonic server on
//! 127.0.0.1. Each call runs in a spawned task.
//!
//! Asserted: after three `UNAVAILABLE` answers the breaker is open, and the next call
//! reaches the client as `UNAVAILABLE` carrying `CircuitOpen` (found by
//! `find_rejection`) without reaching the server.

use std::time::Duration;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, State};
use seawall::core::grpc::RejectionStatusLayer;
use seawall::core::DeadlineLayer;
use seawall::{find_rejection, BoxError, GrpcStatus, RejectionKind};
use tonic::transport::Endpoint;
use tonic::Code;
use tower::ServiceBuilder;

use crate::grpc_quote::{Behaviour, QuoteRequest, QuotesClient, QuotesServer};

#[tokio::test]
async fn a_generated_client_gets_unavailable_from_the_open_breaker_without_a_server_call(
) -> Result<(), BoxError> {
    let server = QuotesServer::default();
    let addr = server.serve().await?;

    let breaker = CircuitBreakerLayer::builder("quotes")
        .consecutive_failures(3)
        .open_for(Duration::from_secs(60))
        .jitter(0.0)
        .classifier(GrpcStatus::default())
        .build()?;
    let handle = breaker.handle();
    let channel = Endpoint::from_shared(format!("http://{addr}"))?.connect_lazy();
    let stack = ServiceBuilder::new()
        .layer(RejectionStatusLayer)
        .layer(DeadlineLayer::new(Duration::from_secs(30))?)
        .layer(
            BulkheadLayer::builder("quotes")
                .max_concurrent(8)
                .build()?
                .hold_until_body_end(),
        )
        .layer(breaker.hold_until_body_end())
        .service(channel);
    let client = QuotesClient::new(stack);

    server.set(Behaviour::Unavailable);
    for _ in 0..3 {
        let mut client = client.clone();
        let answer = tokio::spawn(async move {
            client
                .get(QuoteRequest {
                    destination: "lisbon".into(),
                })
                .await
        })
        .await?;
        let status = answer.expect_err("the server is unavailable");
        assert_eq!(status.code(), Code::Unavailable);
        assert!(find_rejection(&status).is_none(), "the server's own status");
    }
    assert_eq!(handle.state(), State::Open);

    // The server has recovered; the open breaker does not call it.
    server.set(Behaviour::Quote);
    let mut client = client.clone();
    let answer = tokio::spawn(async move {
        client
            .get(QuoteRequest {
                destination: "lisbon".into(),
            })
            .await
    })
    .await?;
    let status = answer.expect_err("the breaker is open");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        find_rejection(&status).map(|r| r.kind()),
        Some(RejectionKind::CircuitOpen)
    );
    assert_eq!(server.received(), 3);
    Ok(())
}
