//! The tonic example's client stack, built in one place so the tests check the
//! very stack the example runs.

#![allow(dead_code, unreachable_pub)] // shared by an example and tests, each using a part

use std::time::Duration;

use seawall::bulkhead::{Bulkhead, BulkheadLayer, UntilBodyEnd as BulkheadUntilBodyEnd};
use seawall::circuit_breaker::{CircuitBreakerLayer, Handle, UntilBodyEnd};
use seawall::core::grpc::{RejectionStatus, RejectionStatusLayer};
use seawall::core::{DeadlineLayer, DeadlineService};
use seawall::ServiceBuilderExt;
use seawall::{BoxError, GrpcStatus};
use tonic::transport::Channel;
use tower::ServiceBuilder;

/// The stack's type, named: every layer is visible in it, and so is the response
/// body it gives, `http::Response<Guarded<Guarded<BoundedBody<_>, HeldTicket<_>>,
/// Permit>>` (the call held until the body ends).
pub type QuoteStack = RejectionStatus<
    DeadlineService<Bulkhead<UntilBodyEnd<Channel, GrpcStatus>, BulkheadUntilBodyEnd>>,
>;

/// `channel` behind the example's layers, outermost first:
///
/// ```text
/// RejectionStatusLayer   rejections: UNAVAILABLE / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED, not UNKNOWN
/// DeadlineLayer(500ms)   the budget of the call, the response stream included
/// BulkheadLayer(8)       at most 8 calls to the supplier at once, each until its stream ends
/// CircuitBreakerLayer    gRPC status classifier, judged when the stream ends (its trailers)
/// tonic Channel
/// ```
///
/// Both the bulkhead and the breaker hold the call until the response stream ends
/// (`hold_until_body_end`): a gRPC call's status may come in the trailers after its
/// messages, and the connection is busy until then. Returns the stack and the
/// breaker's handle.
pub fn quote_stack(channel: Channel) -> Result<(QuoteStack, Handle), BoxError> {
    let breaker = CircuitBreakerLayer::builder("quotes")
        .count_window(8, 6, 0.5) // trips at 50 % failures of the last 8 calls, once 6 are in
        .open_for(Duration::from_secs(1))
        .jitter(0.0) // the example's open interval is exactly 1 s
        .classifier(GrpcStatus::default())
        .build()?;
    let handle = breaker.handle();
    let stack = ServiceBuilder::new()
        .layer(RejectionStatusLayer)
        .deadline(DeadlineLayer::new(Duration::from_millis(500))?)
        .bulkhead(
            BulkheadLayer::builder("quotes")
                .max_concurrent(8)
                .build()?
                .hold_until_body_end(),
        )
        .circuit_breaker(breaker.hold_until_body_end())
        .service(channel);
    Ok((stack, handle))
}
