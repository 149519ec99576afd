//! The service: starts the first attempt, keeps what a hedge needs, and hands both
//! to the response future.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::Instant;
use tower_service::Service;

use super::future::{HedgeFuture, Spare};
use super::state::Shared;
use super::telemetry::HedgeRefusal;
use crate::classify::Classify;
use crate::rejection::BoxError;
use crate::retry::RetryableRequest;

/// Decides whether a request may be hedged, by giving a copy of it to send again.
///
/// Implemented for every `Fn(&Req) -> Option<Req>`: the override for a request type
/// that is not an `http::Request`, or for a POST that carries an idempotency key.
/// `None` sends the request once, unhedged (counted as `not_idempotent` if a hedge
/// falls due).
pub trait HedgeIf<Req> {
    /// A copy of `req` to send as a hedge, or `None` when it may not be sent twice.
    fn copy_for_hedge(&self, req: &Req) -> Option<Req>;
}

impl<Req, F> HedgeIf<Req> for F
where
    F: Fn(&Req) -> Option<Req>,
{
    fn copy_for_hedge(&self, req: &Req) -> Option<Req> {
        self(req)
    }
}

/// The default [`HedgeIf`], the retry policy's rule: an idempotent request
/// ([`RetryableRequest::is_idempotent`]: GET, HEAD, PUT, DELETE, OPTIONS, TRACE) whose
/// copy can be made ([`RetryableRequest::try_clone`]: an `http::Request` with a
/// `Clone` body).
///
/// An `http::Request` whose body cannot be cloned (a streaming body such as hyper's
/// `Incoming`) does not implement [`RetryableRequest`]: buffer it into a
/// `Full<Bytes>` first, or give [`HedgeBuilder::hedge_if`](super::HedgeBuilder::hedge_if)
/// a closure that answers `None`, and it is never hedged.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdempotentRequests;

impl<Req: RetryableRequest> HedgeIf<Req> for IdempotentRequests {
    fn copy_for_hedge(&self, req: &Req) -> Option<Req> {
        if req.is_idempotent() {
            req.try_clone()
        } else {
            None
        }
    }
}

/// The service of a [`HedgeLayer`](super::HedgeLayer): sends the first attempt at
/// once and hedges it if it is slow.
///
/// Cloning it shares the layer's budget, estimator and counters. The inner service
/// is cloned for each request that may be hedged (`S: Clone`, as hyper-util's
/// client, tonic's `Channel` and seawall's own layers are), so that a hedge is
/// sent from the response future, after its own `poll_ready`.
pub struct Hedge<S, C, F> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<Shared>,
    pub(crate) classifier: C,
    pub(crate) hedge_if: F,
}

impl<S: Clone, C: Clone, F: Clone> Clone for Hedge<S, C, F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            classifier: self.classifier.clone(),
            hedge_if: self.hedge_if.clone(),
        }
    }
}

impl<S: fmt::Debug, C, F> fmt::Debug for Hedge<S, C, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hedge")
            .field("name", &self.shared.name)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, C, F> Hedge<S, C, F> {
    /// A handle on the layer's counters.
    pub fn handle(&self) -> super::HedgeHandle {
        super::HedgeHandle {
            shared: self.shared.clone(),
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, Req, C, F> Service<Req> for Hedge<S, C, F>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
    C: Classify<S::Response> + Clone,
    F: HedgeIf<Req> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = HedgeFuture<S, Req, C, F>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let shared = &*self.shared;
        let start = Instant::now();
        shared.request(start);
        let (spare, refusal) = if shared.config.max_attempts < 2 {
            (None, None)
        } else {
            match self.hedge_if.copy_for_hedge(&req) {
                Some(request) => (
                    Some(Spare {
                        service: self.inner.clone(),
                        request,
                        hedge_if: self.hedge_if.clone(),
                    }),
                    None,
                ),
                None => (None, Some(HedgeRefusal::NotIdempotent)),
            }
        };
        let first = self.inner.call(req);
        HedgeFuture::new(
            first,
            spare,
            refusal,
            self.classifier.clone(),
            self.shared.clone(),
            start,
        )
    }
}
