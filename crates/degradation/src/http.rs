//! HTTP servers: a level that is a plain response, and "respond, don't error".
//!
//! An `Err` handed to hyper closes the connection without a response, and axum wants
//! services whose error is `Infallible`. [`RespondLayer`] turns any error that reaches
//! it (a failed level, a level's rejection) into `503 Service Unavailable`, with
//! `Retry-After` when the rejection knows one and a short body that reveals nothing
//! internal; the cause goes to tracing. [`FixedResponse`] is a last level that answers
//! with a declared response and cannot fail.
//!
//! Both keep the response type `Response<B>` of the levels, for any body `B` that can
//! be made from [`Bytes`] (axum's `Body`, `Full<Bytes>`), so no `Either` body is needed.

use std::convert::Infallible;
use std::fmt;
use std::future::{ready, Future, Ready};
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready as ready_poll, Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};
use pin_project_lite::pin_project;
use seawall_core::http::{retry_after_value, UNAVAILABLE_BODY};
use seawall_core::{find_rejection, BoxError};
use tower_layer::Layer;
use tower_service::Service;

use crate::telemetry;

/// A level that answers every request with the same declared response.
///
/// ```
/// use http::{Response, StatusCode};
/// use http_body_util::Full;
/// use bytes::Bytes;
/// use seawall_degradation::http::FixedResponse;
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let message = FixedResponse::<Full<Bytes>>::new(
///     StatusCode::OK,
///     "We are having trouble. Please try again in a few minutes.",
/// )
/// .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8");
/// let res = message.oneshot(http::Request::new(())).await.unwrap();
/// assert_eq!(res.status(), StatusCode::OK);
/// # }
/// ```
pub struct FixedResponse<B> {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    _body: PhantomData<fn() -> B>,
}

impl<B> Clone for FixedResponse<B> {
    fn clone(&self) -> Self {
        Self {
            status: self.status,
            headers: self.headers.clone(),
            body: self.body.clone(),
            _body: PhantomData,
        }
    }
}

impl<B> fmt::Debug for FixedResponse<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &self.body)
            .finish()
    }
}

impl<B> FixedResponse<B> {
    /// Answers with `status` and `body`.
    pub fn new(status: StatusCode, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            headers: HeaderMap::new(),
            body: body.into(),
            _body: PhantomData,
        }
    }

    /// Adds a header to the response.
    #[must_use]
    pub fn header(mut self, name: HeaderName, value: &'static str) -> Self {
        self.headers.append(name, HeaderValue::from_static(value));
        self
    }

    /// Adds a header whose value is built at run time.
    #[must_use]
    pub fn header_value(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }
}

impl<Req, B: From<Bytes>> Service<Req> for FixedResponse<B> {
    type Response = Response<B>;
    type Error = Infallible;
    type Future = Ready<Result<Response<B>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        let mut res = Response::new(B::from(self.body.clone()));
        *res.status_mut() = self.status;
        *res.headers_mut() = self.headers.clone();
        ready(Ok(res))
    }
}

/// Answers errors with a `503` response instead of an `Err`, so servers always respond.
///
/// Put it outside the [`DegradationLayer`](crate::DegradationLayer) (or outside a
/// fallback layer wrapping it).
#[derive(Debug, Clone)]
pub struct RespondLayer {
    body: Bytes,
}

impl Default for RespondLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl RespondLayer {
    /// Answers errors with a 503 and seawall-core's generic body.
    pub fn new() -> Self {
        Self {
            body: Bytes::from_static(UNAVAILABLE_BODY.as_bytes()),
        }
    }

    /// Answers errors with a 503 and `body` (keep it free of internal details).
    pub fn with_body(body: impl Into<Bytes>) -> Self {
        Self { body: body.into() }
    }
}

impl<S> Layer<S> for RespondLayer {
    type Service = Respond<S>;

    fn layer(&self, inner: S) -> Respond<S> {
        Respond {
            inner,
            body: self.body.clone(),
            failed: None,
        }
    }
}

/// The service made by [`RespondLayer`].
#[derive(Debug)]
pub struct Respond<S> {
    inner: S,
    body: Bytes,
    failed: Option<BoxError>,
}

impl<S: Clone> Clone for Respond<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            body: self.body.clone(),
            failed: None,
        }
    }
}

fn unavailable<B: From<Bytes>>(error: &BoxError, body: &Bytes) -> Response<B> {
    telemetry::responded_to_error(&**error);
    let mut res = Response::new(B::from(body.clone()));
    *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(after) = find_rejection(&**error).and_then(|r| r.retry_after()) {
        res.headers_mut()
            .insert(RETRY_AFTER, retry_after_value(after));
    }
    res
}

impl<S, Req, B> Service<Req> for Respond<S>
where
    S: Service<Req, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: From<Bytes>,
{
    type Response = Response<B>;
    type Error = Infallible;
    type Future = RespondFuture<S::Future, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.failed.is_none() {
            if let Err(e) = ready_poll!(self.inner.poll_ready(cx)) {
                // Answered with a 503 by the next call, without calling the inner service.
                self.failed = Some(e.into());
            }
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        match self.failed.take() {
            Some(e) => RespondFuture {
                state: RespondState::Failed {
                    response: Some(unavailable(&e, &self.body)),
                },
            },
            None => RespondFuture {
                state: RespondState::Calling {
                    fut: self.inner.call(req),
                    body: self.body.clone(),
                },
            },
        }
    }
}

pin_project! {
    #[project = RespondProj]
    enum RespondState<F, B> {
        Calling { #[pin] fut: F, body: Bytes },
        Failed { response: Option<Response<B>> },
    }
}

pin_project! {
    /// The future of [`Respond`]: always a response.
    pub struct RespondFuture<F, B> {
        #[pin]
        state: RespondState<F, B>,
    }
}

impl<F, B> fmt::Debug for RespondFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RespondFuture").finish_non_exhaustive()
    }
}

impl<F, E, B> Future for RespondFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
    B: From<Bytes>,
{
    type Output = Result<Response<B>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            RespondProj::Calling { fut, body } => match ready_poll!(fut.poll(cx)) {
                Ok(res) => Poll::Ready(Ok(res)),
                Err(e) => Poll::Ready(Ok(unavailable(&e.into(), body))),
            },
            RespondProj::Failed { response } => {
                Poll::Ready(Ok(response.take().unwrap_or_else(|| {
                    let e: BoxError = "response already taken".into();
                    unavailable(&e, &Bytes::from_static(UNAVAILABLE_BODY.as_bytes()))
                })))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};
    use seawall_core::CircuitOpen;
    use std::time::Duration;
    use tower::{service_fn, ServiceExt};

    type Body = Full<Bytes>;

    #[tokio::test]
    async fn errors_become_503_with_retry_after_and_nothing_internal() {
        let failing = service_fn(|_req: http::Request<()>| async {
            Err::<Response<Body>, BoxError>(Box::new(CircuitOpen::new(
                "gpt-large-internal".into(),
                Duration::from_millis(2500),
            )))
        });
        let res = RespondLayer::new()
            .layer(failing)
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[RETRY_AFTER], "3");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], UNAVAILABLE_BODY.as_bytes());

        let plain = service_fn(|_req: http::Request<()>| async {
            Err::<Response<Body>, BoxError>("database password rejected".into())
        });
        let res = RespondLayer::with_body("busy")
            .layer(plain)
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(res.headers().get(RETRY_AFTER).is_none());
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"busy");
    }

    #[tokio::test]
    async fn responses_pass_through_and_fixed_responses_answer() {
        let fixed =
            FixedResponse::<Body>::new(StatusCode::OK, "canned").header(CONTENT_TYPE, "text/plain");
        let res = RespondLayer::new()
            .layer(fixed)
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()[CONTENT_TYPE], "text/plain");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"canned");
    }

    #[tokio::test]
    async fn a_readiness_error_is_answered_by_the_next_call() {
        let (mock, mut handle) = tower_test::mock::pair::<http::Request<()>, Response<Body>>();
        let mut svc = RespondLayer::new().layer(mock);
        handle.send_error("closed");
        let res = svc
            .ready()
            .await
            .unwrap()
            .call(http::Request::new(()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
