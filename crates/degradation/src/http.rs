//! HTTP servers: a level that is a plain response.
//!
//! [`FixedResponse`] is a last level that answers with a declared response and
//! cannot fail. It keeps the response type `Response<B>` of the levels, for any body
//! `B` that can be made from [`Bytes`] (axum's `Body`, `Full<Bytes>`).
//!
//! To answer errors with a response instead of an `Err` ("respond, don't error": an
//! `Err` handed to hyper closes the connection, and axum wants `Infallible`), put
//! seawall-core's [`RespondLayer`](seawall_core::http::RespondLayer) outside the
//! degradation layer: a level's rejection becomes `503` with `Retry-After`, nothing
//! internal in the body.

use std::convert::Infallible;
use std::fmt;
use std::future::{ready, Ready};
use std::marker::PhantomData;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use tower_service::Service;

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

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::CONTENT_TYPE;
    use http_body_util::{BodyExt, Full};
    use tower::ServiceExt;

    type Body = Full<Bytes>;

    #[tokio::test]
    async fn a_fixed_response_answers_its_declared_status_headers_and_body() {
        let fixed =
            FixedResponse::<Body>::new(StatusCode::OK, "canned").header(CONTENT_TYPE, "text/plain");
        let res = fixed.oneshot(http::Request::new(())).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()[CONTENT_TYPE], "text/plain");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"canned");
    }
}
