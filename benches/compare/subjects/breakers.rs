//! Circuit breakers: seawall's, tower-resilience's, failsafe's and recloser's, each
//! over a window of about 100 calls, opened by real failures for an hour.

use std::task::{Context, Poll};
use std::time::Duration;

use tokio::runtime::Runtime;
use tower::{Layer, Service};

use super::inner;
use super::{Id, Row};
use crate::harness::Req;

const HOUR: Duration = Duration::from_secs(3600);

/// seawall's breaker over a count window of 100 calls (at least 100, half failing
/// trips it), open for an hour once tripped.
pub(super) fn sw_breaker() -> seawall::circuit_breaker::CircuitBreakerLayer {
    seawall::circuit_breaker::CircuitBreakerLayer::builder("bench")
        .count_window(100, 100, 0.5)
        .open_for(HOUR)
        .build()
        .expect("valid config")
}

pub(super) fn seawall(rt: &Runtime) -> Vec<Row> {
    vec![
        Row::new(Id::SwBreaker, "seawall breaker (count window 100)", || {
            sw_breaker().layer(inner::ok())
        })
        .open(rt, sw_breaker().layer(inner::counted_failing())),
    ]
}

fn tr_breaker() -> tower_resilience::circuitbreaker::CircuitBreakerLayer {
    tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
        .sliding_window_size(100)
        .minimum_number_of_calls(100)
        .wait_duration_in_open(HOUR)
        .build()
        .expect("valid config")
}

/// failsafe's breaker over `inner`: open after 5 consecutive failures.
fn failsafe<S>(
    inner: S,
) -> Failsafe<S, impl failsafe::futures::CircuitBreaker + Clone + Send + Sync> {
    let breaker = failsafe::Config::new()
        .failure_policy(failsafe::failure_policy::consecutive_failures(
            5,
            failsafe::backoff::constant(HOUR),
        ))
        .build();
    Failsafe { inner, breaker }
}

/// recloser's breaker over `inner`, with a ring of 100 calls.
fn recloser<S>(inner: S) -> Recloser<S> {
    let breaker = recloser::Recloser::custom()
        .closed_len(100)
        .open_wait(HOUR)
        .build()
        .into();
    Recloser { inner, breaker }
}

pub(super) fn peers(rt: &Runtime) -> Vec<Row> {
    vec![
        Row::new(
            Id::TrBreaker,
            "tower-resilience 0.13 CircuitBreaker (count window 100)",
            || tr_breaker().layer(inner::ok()),
        )
        .open(rt, tr_breaker().layer(inner::counted_failing())),
        Row::new(
            Id::Failsafe,
            "failsafe 1.3 CircuitBreaker (5 consecutive failures)",
            || failsafe(inner::ok()),
        )
        .open(rt, failsafe(inner::counted_failing())),
        Row::new(
            Id::Recloser,
            "recloser 1.4 AsyncRecloser breaker (ring 100)",
            || recloser(inner::ok()),
        )
        .open(rt, recloser(inner::counted_failing())),
    ]
}

/// failsafe 1.3 wrapped as a tower service, as its docs suggest (`breaker.call(fut)`).
#[derive(Clone)]
struct Failsafe<S, B> {
    inner: S,
    breaker: B,
}

impl<S, B> Service<Req> for Failsafe<S, B>
where
    S: Service<Req>,
    B: failsafe::futures::CircuitBreaker,
{
    type Response = S::Response;
    type Error = failsafe::Error<S::Error>;
    type Future = failsafe::futures::ResponseFuture<
        S::Future,
        B::FailurePolicy,
        B::Instrument,
        failsafe::Any,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(failsafe::Error::Inner)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.breaker.call(self.inner.call(req))
    }
}

/// recloser 1.4's `AsyncRecloser` wrapped as a tower service.
#[derive(Clone)]
struct Recloser<S> {
    inner: S,
    breaker: recloser::AsyncRecloser,
}

impl<S> Service<Req> for Recloser<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = recloser::Error<S::Error>;
    type Future = recloser::RecloserFuture<S::Future, recloser::AnyError>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(recloser::Error::Inner)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.breaker.call(self.inner.call(req))
    }
}
