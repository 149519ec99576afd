//! [`HeldError`]: an inner service's readiness error, kept to answer the next call.

use std::convert::Infallible;
use std::task::{ready, Context, Poll};

use tower_service::Service;

use crate::rejection::BoxError;

/// Why the inner service could not become ready, held by a layer that answers
/// with a response instead of an error (an `Err` from `poll_ready` tells the
/// caller to discard the service, and hyper closes the connection without a
/// response): readiness reports ready, and the next call is answered from the
/// error without reaching the inner service, which is never called after a failed
/// readiness.
///
/// A clone holds nothing: it has not polled the inner service.
#[derive(Debug, Default)]
pub(crate) struct HeldError(Option<BoxError>);

impl Clone for HeldError {
    fn clone(&self) -> Self {
        Self(None)
    }
}

impl HeldError {
    /// Polls `inner`'s readiness unless an error is held already, and holds the
    /// error it gives. Ready as soon as `inner` is, or an error is held.
    pub(crate) fn poll_ready<S, Req>(
        &mut self,
        inner: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Infallible>>
    where
        S: Service<Req>,
        S::Error: Into<BoxError>,
    {
        if self.0.is_none() {
            if let Err(e) = ready!(inner.poll_ready(cx)) {
                self.0 = Some(e.into());
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Calls `inner` with `req`, or, when an error is held, hands it back (taken)
    /// for the caller to answer with, leaving `inner` uncalled.
    pub(crate) fn call<S, Req>(&mut self, inner: &mut S, req: Req) -> Result<S::Future, BoxError>
    where
        S: Service<Req>,
    {
        match self.0.take() {
            Some(held) => Err(held),
            None => Ok(inner.call(req)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::future::{ready as ready_future, Ready};

    /// Not ready, with an error, until `ready` is set; counts its calls.
    struct Flaky {
        ready: bool,
        calls: usize,
    }

    impl Service<()> for Flaky {
        type Response = ();
        type Error = BoxError;
        type Future = Ready<Result<(), BoxError>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(if self.ready {
                Ok(())
            } else {
                Err("not ready".into())
            })
        }

        fn call(&mut self, (): ()) -> Self::Future {
            self.calls += 1;
            ready_future(Ok(()))
        }
    }

    #[test]
    fn a_readiness_error_answers_the_next_call_once_without_calling_inner() {
        let mut inner = Flaky {
            ready: false,
            calls: 0,
        };
        let mut held = HeldError::default();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(
            held.poll_ready(&mut inner, &mut cx),
            Poll::Ready(Ok(()))
        ));
        assert!(held.clone().0.is_none(), "a clone holds nothing");
        let answered = held.call(&mut inner, ()).err().map(|e| e.to_string());
        assert_eq!(answered.as_deref(), Some("not ready"));
        assert_eq!(inner.calls, 0);
        // Taken: once the inner service is ready again, calls reach it.
        inner.ready = true;
        assert!(matches!(
            held.poll_ready(&mut inner, &mut cx),
            Poll::Ready(Ok(()))
        ));
        assert!(held.call(&mut inner, ()).is_ok());
        assert_eq!(inner.calls, 1);
    }
}
