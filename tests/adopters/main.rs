//! The adopter suite: short programs written the way users write them, each run by
//! `cargo test --workspace --all-features` and each asserting one behaviour.
//!
//! Every program follows the same rules, because a generic helper around the service
//! is what once hid a classifier that did not compile in users' code:
//!
//! - concrete inline closures and concrete stacks, no generic helper function or
//!   `impl Trait` wrapper around the protected service;
//! - the service is used inside `tokio::spawn(async move { .. .await })` (or an axum
//!   handler, which is the same thing), as applications use it;
//! - inner services name their error type (a named `async fn`, `std::io::Error`, a
//!   small error struct, a hyper client, a tonic `Channel`): a `service_fn` closure
//!   whose `async` block returns `Result<_, BoxError>` cannot be awaited through any
//!   middleware whose error is `BoxError` inside a spawned task, tower's own
//!   `Timeout` included (rust-lang/rust#64552); `compile_fail.rs` pins that;
//! - HTTP client stacks hold the bulkhead and the breaker until the response body
//!   ends (`hold_until_body_end`), as the README recommends;
//! - real sockets on 127.0.0.1 and real time: programs synchronise through channels
//!   and counters, never sleeps, and assert invariants, never durations.
//!
//! One module per program; each module's doc says what the user is doing and what
//! is asserted. They live in one test crate to keep link time down.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../examples/shared/grpc_quote.rs"]
mod grpc_quote;

mod annotated_closure_classifier;
mod axum_handler_hyper_client;
mod box_clone_sync_service;
mod breaker_then_bulkhead;
mod bulkhead_then_breaker;
mod classify_fn_without_annotation;
mod compile_fail;
mod policies_from_toml;
mod route_layer_per_route;
mod spawned_string_client;
mod tonic_server_streaming;
mod tonic_unary;
mod tower_buffer;
