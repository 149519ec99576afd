//! The Service adapter: captures what the fallback needs, calls the primary, and
//! leaves the decision to the response future.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use seawall_core::{BoxError, Classify, Deadline};
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::mode::Mode;
use crate::plan::Plan;
use crate::request::Capture;
use crate::state::Shared;

/// The service built by [`FallbackLayer`](crate::FallbackLayer).
///
/// `Clone` shares the layer's state and resets this handle's readiness (a clone
/// must be polled ready before it is called, as with any Tower service). It is
/// `Send + Sync` when the inner service and the strategy are.
///
/// Any request type. A [`Deadline`] current when the request arrives (an overall
/// budget set further out) caps the fallback's steps; it is read in `call`, or when
/// the fallback fires if `call` ran in another task (tower's `Buffer`).
pub struct Fallback<S, Cap, P, C, M> {
    inner: S,
    shared: Arc<Shared<Cap, P, C, M>>,
    /// `poll_ready` found the fallback forced: `call` will not call the primary.
    forced: bool,
    /// The HTTP server mode holds an inner `poll_ready` error to answer the next call with.
    held_error: Option<BoxError>,
}

impl<S, Cap, P, C, M> Fallback<S, Cap, P, C, M> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<Cap, P, C, M>>) -> Self {
        Self {
            inner,
            shared,
            forced: false,
            held_error: None,
        }
    }

    /// The inner (primary) service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner (primary) service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner (primary) service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The handle to the layer's shared state.
    pub fn handle(&self) -> crate::Handle {
        crate::Handle::new(Arc::clone(&self.shared.rt))
    }
}

impl<S: Clone, Cap, P, C, M> Clone for Fallback<S, Cap, P, C, M> {
    fn clone(&self) -> Self {
        Self::new(self.inner.clone(), Arc::clone(&self.shared))
    }
}

impl<S: fmt::Debug, Cap, P, C, M> fmt::Debug for Fallback<S, Cap, P, C, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fallback")
            .field("name", &self.shared.rt.name)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, Req, Cap, P, C, M> Service<Req> for Fallback<S, Cap, P, C, M>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    Cap: Capture<Req>,
    P: Plan<Cap::Output>,
    C: Classify<S::Response>,
    M: Mode<S::Response, P::Response>,
{
    type Response = M::Response;
    type Error = M::Error;
    type Future = ResponseFuture<S::Future, Cap, P, C, M, Cap::Output>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.held_error.is_some() {
            return Poll::Ready(Ok(()));
        }
        // A forced fallback will not call the primary, so its readiness is not asked.
        self.forced = self.shared.rt.forced();
        if self.forced {
            return Poll::Ready(Ok(()));
        }
        match self.inner.poll_ready(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => match self.shared.mode.ready_error(e.into()) {
                Ok(held) => {
                    self.held_error = Some(held);
                    Poll::Ready(Ok(()))
                }
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        let shared = &self.shared;
        let captured = shared.capture.capture(&req);
        let deadline = if shared.uses_deadline {
            Deadline::current()
        } else {
            None
        };
        if let Some(error) = self.held_error.take() {
            return ResponseFuture::skipped(Some(error), captured, deadline, Arc::clone(shared));
        }
        if std::mem::take(&mut self.forced) {
            return ResponseFuture::skipped(None, captured, deadline, Arc::clone(shared));
        }
        let fut = self.inner.call(req);
        ResponseFuture::primary(fut, captured, deadline, Arc::clone(shared))
    }
}
