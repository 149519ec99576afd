//! A tonic `Channel` wrapped in seawall's layers, with a generated-style gRPC client
//! working through the stack against a real gRPC server on loopback:
//!
//! ```text
//! RejectionStatusLayer   rejections: UNAVAILABLE / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED, not UNKNOWN
//! DeadlineLayer(500ms)   the budget of the call, the response stream included
//! BulkheadLayer(8)       at most 8 calls to the supplier at once, each until its stream ends
//! CircuitBreakerLayer    gRPC status classifier: UNAVAILABLE fails, NOT_FOUND is an answer;
//!                        judged when the response stream ends, by its trailers
//! tonic Channel
//! ```
//!
//! The stack is built by `quote_stack` (`examples/shared/quote_stack.rs`), which the
//! tests use too. Both the bulkhead and the breaker hold each call until the
//! response stream ends (`hold_until_body_end`): a gRPC server sends its final
//! status in the trailers after its messages, so a call whose headers said 200 can
//! still end `UNAVAILABLE`, and its connection is busy until then. The response
//! body type becomes `Guarded<..>`, which a tonic generated client accepts as it
//! is (any body with `Bytes` data and an error into `BoxError`).
//!
//! The supplier answers, then says NOT_FOUND (a business answer: the breaker stays
//! closed), then is slow (the deadline cuts the call: DEADLINE_EXCEEDED), then fails with
//! UNAVAILABLE until the breaker opens; calls then fail fast with UNAVAILABLE from
//! the breaker without reaching the server, until the open interval has passed and a
//! probe finds it healthy again. Between them, one call's server answers 200 and
//! puts `UNAVAILABLE` in the trailers only, as a stream failing late does: the
//! breaker counts it as the failure it is.
//!
//! Run with `cargo run --example tonic_channel` (finishes by itself in about 2 s).
#![allow(clippy::print_stdout)]

#[path = "shared/logs.rs"]
mod logs;
#[path = "shared/phases.rs"]
mod phases;

#[path = "shared/grpc_quote.rs"]
mod grpc_quote;
#[path = "shared/quote_stack.rs"]
mod quote_stack;

use grpc_quote::{Behaviour, QuoteRequest, QuotesClient, QuotesServer};
use seawall::{find_rejection, BoxError, RejectionKind};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    logs::install();
    let server = QuotesServer::default();
    let addr = server.serve().await?;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?.connect_lazy();

    let (stack, breaker_handle) = quote_stack::quote_stack(channel)?;
    let mut client = QuotesClient::new(stack);

    let script = [
        ("supplier healthy", Behaviour::Quote, 2),
        ("no quote for that destination", Behaviour::NotFound, 1),
        ("supplier slow (2 s, budget 500 ms)", Behaviour::Slow, 1),
        (
            "supplier answers 200, UNAVAILABLE only in the trailers",
            Behaviour::TrailingUnavailable,
            1,
        ),
        (
            "supplier failing with UNAVAILABLE",
            Behaviour::Unavailable,
            4,
        ),
        (phases::RECOVERED, Behaviour::Quote, 2),
    ];
    let mut n = 0;
    for (phase, behaviour, calls) in script {
        server.set(behaviour);
        phases::begin(phase).await;
        for _ in 0..calls {
            n += 1;
            let request = QuoteRequest {
                destination: "PT-1000".into(),
            };
            let what = match client.get(request).await {
                Ok(reply) => format!("OK: {} cents", reply.into_inner().price_cents),
                Err(status) => {
                    let from = match find_rejection(&status).map(|r| (r.kind(), r.retry_after())) {
                        Some((RejectionKind::CircuitOpen, Some(after))) => {
                            format!("the breaker, retry in {} ms", after.as_millis())
                        }
                        Some((RejectionKind::DeadlineExceeded, _)) => "the deadline".to_owned(),
                        Some((kind, _)) => format!("seawall ({kind})"),
                        None => "the server".to_owned(),
                    };
                    format!("{:?} from {from}", status.code())
                }
            };
            println!(
                "call {n:>2}: {what:<50} breaker {:?}, server hits {}",
                breaker_handle.state(),
                server.received()
            );
        }
    }

    let c = breaker_handle.snapshot().counters;
    println!("-- totals");
    println!(
        "breaker: {} successes, {} failures ({} timeouts), {} short-circuited",
        c.successes, c.failures, c.timeouts, c.short_circuited
    );
    Ok(())
}
