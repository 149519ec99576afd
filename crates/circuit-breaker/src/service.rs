//! The Tower service: reads the clock when it must, asks the breaker, calls inner.

use std::fmt;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use seawall_core::{bounded_by_current, BoxError, ClassifyRequest, OpenCause, PanicWatch};
use tokio::time::Instant;
use tower_service::Service;

use crate::future::{Guard, ResponseFuture};
use crate::handle::Handle;
use crate::machine::{Admission, MIN_RETRY_AFTER};
use crate::state::{Breaker, Lanes, ReadyHint};

/// A service guarded by a circuit breaker; built by
/// [`CircuitBreakerLayer`](crate::CircuitBreakerLayer).
///
/// - The decision is made in `call`; a rejection is a [`CircuitOpen`](crate::CircuitOpen)
///   error from the response future, never an error from `poll_ready`.
/// - While the breaker is open (or forced open), or half-open with every probe slot
///   taken, `poll_ready` answers ready at once without polling the inner service,
///   and `call` never reaches it. Under a balancer, use the readiness mode
///   ([`PendingWhileOpen`](crate::PendingWhileOpen)) instead: pending while open.
/// - When a seawall [`Deadline`](seawall_core::Deadline) is current (set by a
///   `DeadlineLayer` further out, read in `call` or at the future's first poll), the
///   inner call is bounded by it; running out is recorded as a failure and answered
///   with [`DeadlineExceeded`](crate::DeadlineExceeded).
/// - Any request type: `String`, a database query, `http::Request`.
///
/// Clones share the breaker; the inner service's reserved readiness is not shared
/// (a clone starts unpolled). Calls on different threads hold different lanes of
/// the breaker, so they write no line in common.
pub struct CircuitBreaker<S, C> {
    inner: S,
    breaker: Lanes,
    classifier: C,
    ready: Readiness,
}

/// What the last `poll_ready` found.
#[derive(Debug, Clone, Copy)]
enum Readiness {
    /// Not polled since the last call.
    Unknown,
    /// The inner service is ready for one call.
    Inner,
    /// The breaker was open: the inner service was not polled.
    Skipped,
}

impl<S, C> CircuitBreaker<S, C> {
    pub(crate) fn new(inner: S, breaker: Lanes, classifier: C) -> Self {
        Self {
            inner,
            breaker,
            classifier,
            ready: Readiness::Unknown,
        }
    }

    /// The operator's handle on the breaker.
    pub fn handle(&self) -> Handle {
        Handle::new(Arc::clone(self.breaker.first()))
    }

    /// The shared breaker (for the readiness mode).
    pub(crate) fn breaker(&self) -> &Breaker {
        self.breaker.breaker()
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, C: Clone> Clone for CircuitBreaker<S, C> {
    fn clone(&self) -> Self {
        Self::new(
            self.inner.clone(),
            self.breaker.clone(),
            self.classifier.clone(),
        )
    }
}

impl<S: fmt::Debug, C: fmt::Debug> fmt::Debug for CircuitBreaker<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("name", &self.breaker().name())
            .field("inner", &self.inner)
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl<S, C, Req> Service<Req> for CircuitBreaker<S, C>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: ClassifyRequest<Req, S::Response>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, C::Classifier>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Readiness::Inner = self.ready {
            return Poll::Ready(Ok(()));
        }
        match self.breaker().ready_hint(Instant::now) {
            ReadyHint::SkipForced | ReadyHint::SkipOpen => self.ready = Readiness::Skipped,
            ReadyHint::Forward => {
                ready!(self.inner.poll_ready(cx)).map_err(Into::into)?;
                self.ready = Readiness::Inner;
            }
        }
        Poll::Ready(Ok(()))
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        let readiness = std::mem::replace(&mut self.ready, Readiness::Unknown);
        let breaker = self.breaker.breaker();
        // This thread's lane: where its calls count, admitted or not.
        let slot = self.breaker.slot_for_this_thread();
        if let Readiness::Skipped = readiness {
            // Open at `poll_ready`: rejected from the word alone, without the clock.
            if let Some(open) = breaker.reject_unpolled(slot) {
                return ResponseFuture::open(open);
            }
        }
        match breaker.admit(slot, Instant::now) {
            Admission::Rejected(retry_after, cause) => {
                ResponseFuture::rejected(breaker.name(), retry_after, cause)
            }
            Admission::Admitted(ticket) | Admission::Shadow(ticket, _) => {
                if let Readiness::Skipped = readiness {
                    // The breaker closed between `poll_ready` and `call`: the inner
                    // service was not polled, so this call cannot go out.
                    breaker.turn_away(slot, ticket, Instant::now);
                    return ResponseFuture::rejected(
                        breaker.name(),
                        MIN_RETRY_AFTER,
                        OpenCause::Open,
                    );
                }
                // The one shared pointer per call, to this thread's lane, taken
                // before the future is built.
                let started = breaker.start_clock(Instant::now);
                // The guard exists before the inner `call`, so a panicking one is
                // recorded as a failure while it unwinds; its future is moved once,
                // into the response future.
                let mut guard = Guard::new(Arc::clone(self.breaker.lane(slot)), ticket, started);
                let classifier = self.classifier.classifier_for(&req);
                let watch = PanicWatch::arm(|| guard.finish_panicked());
                let future = self.inner.call(req);
                watch.disarm();
                ResponseFuture::admitted(bounded_by_current(future), guard, classifier)
            }
        }
    }
}
