//! The bulkhead's `Service`: decides admission in `call`, never holds anything in `poll_ready`.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use seawall_core::{BoxError, Classify, CriticalityOf, TimeoutsAsOverload, Unclassed};
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::handle::Handle;
use crate::hold::{Hold, Lend, UntilResponse};
use crate::permit::Permit;
use crate::state::Shared;

/// A service whose calls go through a bulkhead; built by [`BulkheadLayer`](crate::BulkheadLayer).
///
/// `poll_ready` is always ready and reserves nothing. `call` decides admission: a
/// free slot is taken at once; a full bulkhead fails the response future with
/// [`BulkheadFull`](seawall_core::BulkheadFull); otherwise the call waits in line
/// inside its response future, with a clone of the inner service taken at call
/// time (hence `S: Clone`). Only once it holds a slot does the future drive that
/// clone to readiness and call it, so a waiting caller holds nothing downstream. A
/// call admitted at once to a ready inner service calls it directly, with no clone.
/// Should the inner service panic while the call holds a slot (in the
/// `poll_ready` the response future drives, in `call`, or in a poll of its
/// future), the slot is freed while the panic unwinds, and the response future,
/// polled again, answers an error without asking the inner service again.
///
/// Clones share the bulkhead with each other and with every service built from
/// the same layer.
///
/// `C` gives each request its [`Criticality`](seawall_core::Criticality) (see
/// [`BulkheadLayer::criticality`](crate::BulkheadLayer::criticality)); the default,
/// [`Unclassed`], gives none and costs nothing.
pub struct Bulkhead<S, H = UntilResponse, O = TimeoutsAsOverload, C = Unclassed> {
    inner: S,
    shared: Arc<Shared>,
    overload: O,
    classes: C,
    // The permit of the call being made, while the inner service's `call` runs
    // (see `ResponseFuture::call_in`); `None` between calls, also after one that
    // panicked (its panic watch clears the field while it unwinds).
    in_call: Option<Permit>,
    _hold: PhantomData<fn() -> H>,
}

impl<S, H, O, C> Bulkhead<S, H, O, C> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>, overload: O, classes: C) -> Self {
        Self {
            inner,
            shared,
            overload,
            classes,
            in_call: None,
            _hold: PhantomData,
        }
    }

    /// The handle of the bulkhead this service uses.
    pub fn handle(&self) -> Handle {
        Handle::new(self.shared.clone())
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the bulkhead, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, H, O: Clone, C: Clone> Clone for Bulkhead<S, H, O, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            overload: self.overload.clone(),
            classes: self.classes.clone(),
            in_call: None,
            _hold: PhantomData,
        }
    }
}

impl<S: fmt::Debug, H, O, C> fmt::Debug for Bulkhead<S, H, O, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bulkhead")
            .field("name", &&*self.shared.name)
            .field("inner", &self.inner)
            .finish()
    }
}

impl<S, Req, H, O, C> Service<Req> for Bulkhead<S, H, O, C>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
    H: Hold<S::Response> + Lend<Req>,
    O: Classify<S::Response> + Clone,
    C: CriticalityOf<Req>,
{
    type Response = H::Output;
    type Error = BoxError;
    type Future = ResponseFuture<S, Req, H, O>;

    /// Always ready: nothing is reserved here, neither a bulkhead slot nor inner
    /// capacity (the response future drives the inner service once admitted).
    #[inline]
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    /// Out of line on purpose: inlined into an async caller, the request (224
    /// bytes for an `http::Request`) was copied at several of the inlined calls'
    /// by-value hops; out of line it is passed by pointer once.
    #[inline(never)]
    fn call(&mut self, req: Req) -> Self::Future {
        let class = self.classes.criticality(&req);
        ResponseFuture::new_in(
            &self.shared,
            &mut self.inner,
            &mut self.in_call,
            req,
            self.overload.clone(),
            class,
        )
    }
}
