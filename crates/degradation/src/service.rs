//! The Tower service: asks the machine which level serves each request and calls it.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use seawall_core::{on_unwind, BoxError, ClassifyRequest, Outcome};
use tower_service::Service;

use crate::future::{Annotate, LevelService, ResponseFuture, State};
use crate::handle::Shared;

/// Serves each request at the level in force, or as a probe at the level above.
///
/// Built by [`DegradationLayer`](crate::DegradationLayer); the inner service is the best
/// level (0). Clones share the layer's state and its lower levels.
///
/// `poll_ready` always answers ready and polls no level: the level is chosen in `call`,
/// and only the chosen level's readiness is waited for, in the response future. A level
/// that is never ready therefore blocks only the requests sent to it (unlike
/// `tower::steer::Steer`, which waits for every service). When the inner service is
/// ready at once, it is called directly; otherwise it is swapped for a clone and the
/// original, with its readiness in progress, moves into the future. A lower level is
/// cloned at call time (it is shared by every clone of this service) and polled in the
/// future.
/// The price: backpressure from a level does not reach the caller's `poll_ready`;
/// put a bulkhead in each level's stack to bound waiting.
pub struct Degradation<S, Req, Res, C, X> {
    pub(crate) inner: S,
    pub(crate) lower: Arc<[LevelService<Req, Res>]>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) classifier: C,
    pub(crate) extensions: X,
}

impl<S: Clone, Req, Res, C: Clone, X: Clone> Clone for Degradation<S, Req, Res, C, X> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            lower: self.lower.clone(),
            shared: self.shared.clone(),
            classifier: self.classifier.clone(),
            extensions: self.extensions.clone(),
        }
    }
}

impl<S: fmt::Debug, Req, Res, C: fmt::Debug, X> fmt::Debug for Degradation<S, Req, Res, C, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Degradation")
            .field("inner", &self.inner)
            .field("levels", &self.shared.level_names)
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl<S, Req, Res, C, X> Degradation<S, Req, Res, C, X> {
    /// The operator's handle on the shared state.
    pub fn handle(&self) -> crate::Handle {
        crate::Handle {
            shared: self.shared.clone(),
        }
    }

    /// The best level's service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, Req, Res, C, X> Service<Req> for Degradation<S, Req, Res, C, X>
where
    S: Service<Req, Response = Res> + Clone,
    S::Error: Into<BoxError>,
    C: ClassifyRequest<Req, Res>,
    X: Annotate<Req, Res>,
{
    type Response = Res;
    type Error = BoxError;
    type Future = ResponseFuture<S, Req, Res, C::Classifier, X>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The level is chosen in `call`; its readiness is awaited in the future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        let ticket = self.shared.shadowed(self.shared.admit());
        let shared = &self.shared;
        let in_force = ticket.level + usize::from(ticket.probe);
        self.extensions
            .request(&mut req, || shared.level_of(in_force));
        let classifier = self.classifier.classifier_for(&req);
        let state = if ticket.level == 0 {
            let inner = &mut self.inner;
            let shared = &self.shared;
            // A panic in the best level's `poll_ready` or `call` is its failure.
            on_unwind(
                || {
                    let mut cx = Context::from_waker(Waker::noop());
                    match inner.poll_ready(&mut cx) {
                        Poll::Ready(Ok(())) => State::Inner {
                            fut: inner.call(req),
                        },
                        Poll::Ready(Err(e)) => State::Failed {
                            error: Some(e.into()),
                        },
                        Poll::Pending => {
                            // Keep the instance whose readiness is in progress; leave a clone.
                            let fresh = inner.clone();
                            let ready_later = std::mem::replace(inner, fresh);
                            State::WaitInner {
                                svc: ready_later,
                                req: Some(req),
                            }
                        }
                    }
                },
                || shared.record(ticket, Outcome::Failure, false),
            )
        } else {
            match self.lower.get(ticket.level - 1) {
                Some(svc) => State::WaitLower {
                    svc: svc.clone(),
                    req: Some(req),
                },
                None => State::Failed {
                    error: Some(crate::future::internal("no service for the chosen level")),
                },
            }
        };
        ResponseFuture::new(
            state,
            ticket,
            self.shared.clone(),
            classifier,
            self.extensions.clone(),
        )
    }
}
