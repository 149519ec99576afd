//! What a fallback receives: the data captured from the request before the primary
//! consumed it, and why the primary's answer was not used.

use std::error::Error;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use seawall_core::{BoxError, Deadline};

use crate::machine::Trigger;

/// Extracts, from each request, what a fallback will need — before the request is
/// handed to the primary, which consumes it.
///
/// Runs exactly once per call, in `call`, whether or not the fallback is used; so
/// keep it cheap (copy a key, clone an `Arc`). No `Req: Clone` bound is needed and
/// nothing is cloned beyond what the closure takes.
///
/// Made by [`FallbackBuilder::capture`](crate::FallbackBuilder::capture); the
/// default, [`NoCapture`], captures `()`.
pub trait Capture<Req>: Captures {
    /// Captures from `req`.
    fn capture(&self, req: &Req) -> Self::Output;
}

/// The type a [`Capture`] produces, whatever the request type (so the builder can
/// type a chain's steps before it knows the request type).
pub trait Captures {
    /// What is captured.
    type Output;
}

/// Captures nothing: the fallback receives `()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCapture;

impl Captures for NoCapture {
    type Output = ();
}

impl<Req> Capture<Req> for NoCapture {
    #[inline]
    fn capture(&self, _req: &Req) {}
}

/// A capture closure over `&Req`, made by
/// [`FallbackBuilder::capture`](crate::FallbackBuilder::capture).
pub struct CaptureFn<G, Req> {
    f: G,
    _req: PhantomData<fn(&Req)>,
}

impl<G, Req> CaptureFn<G, Req> {
    pub(crate) fn new(f: G) -> Self {
        Self {
            f,
            _req: PhantomData,
        }
    }
}

impl<G: Clone, Req> Clone for CaptureFn<G, Req> {
    fn clone(&self) -> Self {
        Self::new(self.f.clone())
    }
}

impl<G, Req> fmt::Debug for CaptureFn<G, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CaptureFn")
    }
}

impl<G, Req, K> Captures for CaptureFn<G, Req>
where
    G: Fn(&Req) -> K,
{
    type Output = K;
}

impl<G, Req, K> Capture<Req> for CaptureFn<G, Req>
where
    G: Fn(&Req) -> K,
{
    #[inline]
    fn capture(&self, req: &Req) -> K {
        (self.f)(req)
    }
}

#[derive(Debug)]
enum Cause {
    Boxed(BoxError),
    Shared(Arc<dyn Error + Send + Sync>),
}

/// The request a fallback receives: what was captured from the original request,
/// the [`Trigger`] that fired, the primary's error (if it failed with one rather than
/// with an answer classified as a failure), and the request's [`Deadline`], if it
/// carried one when it reached the fallback.
///
/// It is also the request type of a [`Service`](tower_service::Service) fallback.
pub struct FallbackRequest<K> {
    captured: K,
    trigger: Trigger,
    cause: Option<Cause>,
    deadline: Option<Deadline>,
}

impl<K> FallbackRequest<K> {
    /// A request, as the layer makes it (public so a service fallback can be tested alone).
    pub fn new(
        captured: K,
        trigger: Trigger,
        error: Option<BoxError>,
        deadline: Option<Deadline>,
    ) -> Self {
        Self {
            captured,
            trigger,
            cause: error.map(Cause::Boxed),
            deadline,
        }
    }

    /// What the capture closure took from the original request.
    pub fn captured(&self) -> &K {
        &self.captured
    }

    /// Takes the captured data.
    pub fn into_captured(self) -> K {
        self.captured
    }

    /// Why the primary's answer was not used.
    pub fn trigger(&self) -> Trigger {
        self.trigger
    }

    /// The primary's error, when it failed with one (`None` when its answer was
    /// classified as a failure, or the fallback was forced).
    pub fn error(&self) -> Option<&(dyn Error + Send + Sync + 'static)> {
        match &self.cause {
            None => None,
            Some(Cause::Boxed(e)) => Some(&**e),
            Some(Cause::Shared(e)) => Some(&**e),
        }
    }

    /// The request's deadline, if it carried one when it reached the fallback.
    pub fn deadline(&self) -> Option<Deadline> {
        self.deadline
    }

    /// Shares the cause, so that each step of a chain gets its own request.
    pub(crate) fn into_shared(self) -> SharedRequest<K> {
        SharedRequest {
            captured: self.captured,
            trigger: self.trigger,
            cause: self.cause.map(|c| match c {
                Cause::Boxed(e) => Arc::from(e),
                Cause::Shared(e) => e,
            }),
            deadline: self.deadline,
        }
    }
}

/// One fallback request, copied for each step of a chain (the cause is shared).
pub(crate) struct SharedRequest<K> {
    captured: K,
    trigger: Trigger,
    cause: Option<Arc<dyn Error + Send + Sync>>,
    deadline: Option<Deadline>,
}

impl<K: Clone> SharedRequest<K> {
    /// A copy for one step.
    pub(crate) fn for_step(&self) -> FallbackRequest<K> {
        FallbackRequest {
            captured: self.captured.clone(),
            trigger: self.trigger,
            cause: self.cause.clone().map(Cause::Shared),
            deadline: self.deadline,
        }
    }
}

impl<K> SharedRequest<K> {
    pub(crate) fn deadline(&self) -> Option<Deadline> {
        self.deadline
    }
}

impl<K: fmt::Debug> fmt::Debug for FallbackRequest<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackRequest")
            .field("captured", &self.captured)
            .field("trigger", &self.trigger)
            .field("error", &self.error().map(ToString::to_string))
            .field("deadline", &self.deadline)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seawall_core::RejectionKind;

    #[test]
    fn steps_share_the_cause() {
        let req = FallbackRequest::new(
            "PT-1000".to_owned(),
            Trigger::Rejected(RejectionKind::CircuitOpen),
            Some("supplier down".into()),
            None,
        )
        .into_shared();
        let a = req.for_step();
        let b = req.for_step();
        assert_eq!(a.captured(), "PT-1000");
        assert_eq!(b.error().unwrap().to_string(), "supplier down");
        assert_eq!(a.trigger(), Trigger::Rejected(RejectionKind::CircuitOpen));
        assert!(format!("{a:?}").contains("supplier down"));
    }

    #[test]
    fn capture_fn_runs_the_closure() {
        let c = CaptureFn::new(|req: &http::Request<()>| req.uri().path().to_owned());
        let req = http::Request::builder().uri("/quote/PT").body(()).unwrap();
        assert_eq!(c.capture(&req), "/quote/PT");
        NoCapture.capture(&req);
    }
}
