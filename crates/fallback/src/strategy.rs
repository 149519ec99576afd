//! The fallback interface and its provided kinds: a value, a closure (sync or
//! async), any Tower `Service`, and the explicit "unavailable" answer.

use std::borrow::Cow;
use std::fmt;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use seawall_core::BoxError;
use tower::util::Oneshot;
use tower_service::Service;

use crate::error::Unavailable;
use crate::request::FallbackRequest;

/// An alternative answer for a request whose primary answer was not used
/// (one small trait, as a fallback is one small decision).
///
/// `K` is what the layer's capture closure took from the request. An
/// `Err(Unavailable)` is an explicit no-answer (a chain stops at it); any other
/// error is a failure of this fallback (a chain tries its next step).
///
/// Implemented by [`Value`], [`SyncFn`], [`AsyncFn`], [`ServiceFallback`] and
/// [`Decline`]; implement it for a type of your own when none fits.
pub trait Strategy<K> {
    /// The answer.
    type Response;
    /// The future of one answer.
    type Future: Future<Output = Result<Self::Response, BoxError>>;

    /// Answers `req`.
    fn call(&self, req: FallbackRequest<K>) -> Self::Future;

    /// Whether the future is always ready at once (a value): the layer then sets no
    /// timer for it and need not read the request's deadline.
    fn is_immediate(&self) -> bool {
        false
    }
}

/// Serves a clone of a fixed value. Made by [`value`].
#[derive(Debug, Clone)]
pub struct Value<R>(R);

/// A fallback that serves a clone of `v`.
///
/// Only for answers that are true whatever the request (a default page, an empty
/// recommendation list) — never a made-up price or quote.
pub fn value<R: Clone>(v: R) -> Value<R> {
    Value(v)
}

impl<K, R: Clone> Strategy<K> for Value<R> {
    type Response = R;
    type Future = Ready<Result<R, BoxError>>;

    #[inline]
    fn call(&self, _req: FallbackRequest<K>) -> Self::Future {
        ready(Ok(self.0.clone()))
    }

    fn is_immediate(&self) -> bool {
        true
    }
}

/// A synchronous closure over the [`FallbackRequest`]. Made by [`sync_fn`].
#[derive(Clone)]
pub struct SyncFn<F>(F);

/// A fallback from a synchronous closure `Fn(FallbackRequest<K>) -> Result<R, E>`.
pub fn sync_fn<F>(f: F) -> SyncFn<F> {
    SyncFn(f)
}

impl<F> fmt::Debug for SyncFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SyncFn")
    }
}

impl<K, F, R, E> Strategy<K> for SyncFn<F>
where
    F: Fn(FallbackRequest<K>) -> Result<R, E>,
    E: Into<BoxError>,
{
    type Response = R;
    type Future = Ready<Result<R, BoxError>>;

    fn call(&self, req: FallbackRequest<K>) -> Self::Future {
        ready((self.0)(req).map_err(Into::into))
    }

    fn is_immediate(&self) -> bool {
        true
    }
}

/// An async closure over the [`FallbackRequest`]. Made by [`async_fn`].
#[derive(Clone)]
pub struct AsyncFn<F>(F);

/// A fallback from a closure returning a future:
/// `Fn(FallbackRequest<K>) -> impl Future<Output = Result<R, E>>`.
pub fn async_fn<F>(f: F) -> AsyncFn<F> {
    AsyncFn(f)
}

impl<F> fmt::Debug for AsyncFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AsyncFn")
    }
}

impl<K, F, Fut, R, E> Strategy<K> for AsyncFn<F>
where
    F: Fn(FallbackRequest<K>) -> Fut,
    Fut: Future<Output = Result<R, E>>,
    E: Into<BoxError>,
{
    type Response = R;
    type Future = ErrInto<Fut>;

    fn call(&self, req: FallbackRequest<K>) -> Self::Future {
        ErrInto {
            inner: (self.0)(req),
        }
    }
}

/// Any Tower service over [`FallbackRequest`] (a backup supplier, a cache client).
/// Made by [`service`].
///
/// Each answer drives a clone of the service to readiness and calls it, so the
/// service must be `Clone` (as hyper-util's client, tonic's `Channel` and
/// `tower::util::BoxCloneService` are).
#[derive(Debug, Clone)]
pub struct ServiceFallback<S>(S);

/// A fallback from a Tower service `S: Service<FallbackRequest<K>> + Clone`.
pub fn service<S>(svc: S) -> ServiceFallback<S> {
    ServiceFallback(svc)
}

impl<K, S> Strategy<K> for ServiceFallback<S>
where
    S: Service<FallbackRequest<K>> + Clone,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Future = ErrInto<Oneshot<S, FallbackRequest<K>>>;

    fn call(&self, req: FallbackRequest<K>) -> Self::Future {
        ErrInto {
            inner: Oneshot::new(self.0.clone(), req),
        }
    }
}

/// Always answers [`Unavailable`]. Made by [`unavailable`].
pub struct Decline<R> {
    reason: Cow<'static, str>,
    _answer: std::marker::PhantomData<fn() -> R>,
}

impl<R> Clone for Decline<R> {
    fn clone(&self) -> Self {
        Self {
            reason: self.reason.clone(),
            _answer: std::marker::PhantomData,
        }
    }
}

impl<R> fmt::Debug for Decline<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decline")
            .field("reason", &self.reason)
            .finish()
    }
}

/// A fallback that never invents an answer: it answers [`Unavailable`] with
/// `reason`. The last step of a chain whose earlier steps may legitimately have
/// nothing (no quote, so no checkout — never free shipping).
pub fn unavailable<R>(reason: impl Into<Cow<'static, str>>) -> Decline<R> {
    Decline {
        reason: reason.into(),
        _answer: std::marker::PhantomData,
    }
}

impl<K, R> Strategy<K> for Decline<R> {
    type Response = R;
    type Future = Ready<Result<R, BoxError>>;

    fn call(&self, _req: FallbackRequest<K>) -> Self::Future {
        ready(Err(Box::new(Unavailable::new(self.reason.clone()))))
    }

    fn is_immediate(&self) -> bool {
        true
    }
}

pin_project! {
    /// A future whose error is converted into a [`BoxError`].
    #[derive(Debug)]
    pub struct ErrInto<F> {
        #[pin]
        inner: F,
    }
}

impl<F, R, E> Future for ErrInto<F>
where
    F: Future<Output = Result<R, E>>,
    E: Into<BoxError>,
{
    type Output = Result<R, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(ready!(self.project().inner.poll(cx)).map_err(Into::into))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Trigger;
    use tower::ServiceExt;

    fn req(key: &str) -> FallbackRequest<String> {
        FallbackRequest::new(key.to_owned(), Trigger::FailedError, None, None)
    }

    #[tokio::test]
    async fn each_kind_answers() {
        assert_eq!(value(7).call(req("a")).await.unwrap(), 7);
        let f = sync_fn(|r: FallbackRequest<String>| Ok::<_, BoxError>(r.into_captured() + "!"));
        assert_eq!(f.call(req("b")).await.unwrap(), "b!");
        let f = async_fn(|r: FallbackRequest<String>| async move {
            Ok::<_, std::io::Error>(r.captured().len())
        });
        assert_eq!(f.call(req("abc")).await.unwrap(), 3);
        let svc = tower::service_fn(|r: FallbackRequest<String>| async move {
            Ok::<_, BoxError>(format!("backup:{}", r.captured()))
        });
        let f = service(svc.boxed_clone());
        assert_eq!(f.call(req("PT")).await.unwrap(), "backup:PT");
        let f = unavailable::<u32>("no valid quote");
        let err = Strategy::<String>::call(&f, req("PT")).await.unwrap_err();
        assert_eq!(Unavailable::find(&*err).unwrap().reason(), "no valid quote");
        assert!(Strategy::<()>::is_immediate(&value(1)));
        assert!(Strategy::<String>::is_immediate(&f.clone()));
        assert!(!Strategy::<String>::is_immediate(&service(svc)));
    }
}
