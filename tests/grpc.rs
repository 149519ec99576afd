//! gRPC over real loopback: a tonic `Channel` wrapped in seawall's layers, used by a
//! generated-style client.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/shared/grpc_quote.rs"]
mod grpc_quote;

use std::time::Duration;

use grpc_quote::{Behaviour, QuoteRequest, QuotesClient, QuotesServer};
use seawall::core::grpc::RejectionStatusLayer;
use seawall::core::DeadlineLayer;
use tonic::Code;
use tower::ServiceBuilder;

async fn channel(addr: std::net::SocketAddr) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

fn request() -> QuoteRequest {
    QuoteRequest {
        destination: "lisbon".into(),
    }
}

#[tokio::test]
async fn a_deadline_reaches_the_client_as_unavailable_not_unknown() {
    let server = QuotesServer::default();
    let addr = server.serve().await.unwrap();
    let stack = ServiceBuilder::new()
        .layer(RejectionStatusLayer)
        .layer(DeadlineLayer::new(Duration::from_millis(100)).unwrap())
        .service(channel(addr).await);
    let mut client = QuotesClient::new(stack);

    let ok = client.get(request()).await.unwrap();
    assert_eq!(ok.into_inner().price_cents, 1250);

    server.set(Behaviour::Slow);
    let status = client.get(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(seawall::find_rejection(&status).is_some());

    server.set(Behaviour::NotFound);
    let status = client.get(request()).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}
