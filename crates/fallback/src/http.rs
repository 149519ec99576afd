//! The HTTP modes (feature `http`).
//!
//! A fallback or a rendered answer usually cannot produce the inner service's body
//! type (hyper's `Incoming` cannot be constructed), so both modes answer with
//! `http::Response<Either<B, FallbackBody<FB>>>` ([`EitherResponse`]): `Left(B)` is
//! the primary's body, untouched; `Right` is a fallback's body `FB` or a rendered
//! answer, wrapped in a [`FallbackBody`] that carries the [`Served`] marker of the
//! step that answered ([`served`] reads it). The `Either` is seawall-core's
//! (`http_body_util::Either`), a `Body` whenever both sides are bodies with the same
//! data type; its error is a `BoxError`.
//!
//! - [`EitherBody`] ([`FallbackBuilder::either_body`]): errors stay errors
//!   (`Error = BoxError`), for clients (a hyper-util client, a tonic channel).
//! - [`HttpServer`] ([`FallbackBuilder::http_server`]): always answers with a
//!   response, `Error = Infallible`, as axum requires and as hyper needs (an `Err`
//!   handed to hyper closes the connection without a response):
//!   - a seawall rejection that passed through (a kind not selected), or a chain
//!     that failed at every step, becomes `503 Service Unavailable` with
//!     `Retry-After` when the rejection knew one (an open breaker's), rendered by
//!     [`seawall_core::http::rejection_response`]; an exhausted
//!     chain keeps the `Retry-After` of the rejection that fired it;
//!   - an explicit [`Unavailable`] answer becomes the
//!     [`unavailable_response`](FallbackBuilder::unavailable_response) (default:
//!     `503` with the generic body and `Retry-After` when known), with the
//!     `Unavailable` itself in the response's extensions;
//!   - any other error becomes the [`failure_response`](FallbackBuilder::failure_response)
//!     (default: `500` with a generic body); an error from the inner service's
//!     `poll_ready` is held and answers the next call the same way (or fires the
//!     fallback, if it is a trigger).
//!
//!   Bodies never carry anything internal (no dependency name, no error text); the
//!   cause goes to tracing and to the `seawall_fallback_rendered_total` counter.
//!   `FB` must be `From<Bytes>` (as `Full<Bytes>` and axum's `Body` are) so the
//!   rendered answers can be built.

use std::convert::Infallible;
use std::error::Error;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use seawall_core::http::{rejection_response, retry_after_value, Either, UNAVAILABLE_BODY};
use seawall_core::{find_rejection, BoxError};

use crate::error::{Served, Unavailable};
use crate::handle::Runtime;
use crate::layer::FallbackBuilder;
use crate::mode::{sealed, ErrorOrigin, Mode, Plain, Responses};
use crate::telemetry::Rendered;

/// The response type of both HTTP modes: the primary's body on the left, a
/// fallback's body or a rendered answer on the right.
pub type EitherResponse<B, FB> = Response<Either<B, FallbackBody<FB>>>;

/// The generic body of the default failure response.
pub const FAILURE_BODY: &str = "internal server error\n";

pin_project! {
    /// The right side of an [`EitherResponse`]: a fallback's body with the
    /// [`Served`] marker of the step that answered, or an answer the layer rendered
    /// (no marker).
    ///
    /// The marker travels in the body rather than in the response's extensions,
    /// whose first insert allocates three times (the map, its table, the boxed
    /// value): serving costs no allocation beyond the answer itself. Read it with
    /// [`served`] or [`FallbackBody::served`]. A body erased into another type
    /// (axum's `Body`) no longer carries it; outer layers that need it read it
    /// before.
    #[derive(Debug, Clone)]
    pub struct FallbackBody<FB> {
        #[pin]
        body: FB,
        served: Option<Served>,
    }
}

impl<FB> FallbackBody<FB> {
    /// Which fallback and step served this body, and why; `None` for an answer the
    /// layer rendered (a `503`, the failure response).
    pub fn served(&self) -> Option<&Served> {
        self.served.as_ref()
    }

    /// The body itself.
    pub fn get_ref(&self) -> &FB {
        &self.body
    }

    /// The body itself, mutably.
    pub fn get_mut(&mut self) -> &mut FB {
        &mut self.body
    }

    /// The body itself.
    pub fn into_inner(self) -> FB {
        self.body
    }
}

impl<FB: Body> Body for FallbackBody<FB> {
    type Data = FB::Data;
    type Error = FB::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Which fallback and step served `res`, and why: `None` for the primary's answer
/// and for a rendered one. The marker is in the body (see [`FallbackBody`]).
pub fn served<B, FB>(res: &EitherResponse<B, FB>) -> Option<&Served> {
    match res.body() {
        Either::Left(_) => None,
        Either::Right(body) => body.served(),
    }
}

/// A rendered answer: on the right, unmarked.
fn rendered<B, FB: From<Bytes>>(res: Response<Bytes>) -> EitherResponse<B, FB> {
    res.map(|body| {
        Either::Right(FallbackBody {
            body: FB::from(body),
            served: None,
        })
    })
}

/// Both HTTP modes make their responses the same way: one impl serves them.
pub(crate) trait RightIsFallback: sealed::Sealed {}

impl<B, FB, M: RightIsFallback> Responses<Response<B>, Response<FB>> for M {
    type Response = EitherResponse<B, FB>;

    #[inline]
    fn primary(&self, res: Response<B>) -> Self::Response {
        res.map(Either::Left)
    }

    #[inline]
    fn served(&self, answer: Response<FB>, served: Served) -> Self::Response {
        answer.map(|body| {
            Either::Right(FallbackBody {
                body,
                served: Some(served),
            })
        })
    }
}

/// The `Either`-body mode, errors stay errors. See the [module docs](self).
#[derive(Debug, Clone, Copy, Default)]
pub struct EitherBody;

impl sealed::Sealed for EitherBody {}
impl sealed::KeepsErrors for EitherBody {}
impl RightIsFallback for EitherBody {}

/// The HTTP server mode: always a response, `Error = Infallible`. See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct HttpServer {
    failure: Response<Bytes>,
    unavailable: Response<Bytes>,
}

fn plain_text(status: StatusCode, body: &'static str) -> Response<Bytes> {
    let mut res = Response::new(Bytes::from_static(body.as_bytes()));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    res
}

impl Default for HttpServer {
    fn default() -> Self {
        Self {
            failure: plain_text(StatusCode::INTERNAL_SERVER_ERROR, FAILURE_BODY),
            unavailable: plain_text(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE_BODY),
        }
    }
}

impl HttpServer {
    fn render<B, FB: From<Bytes>>(
        &self,
        error: &(dyn Error + 'static),
        origin: ErrorOrigin,
        primary_retry_after: Option<Duration>,
        rt: &Runtime,
    ) -> EitherResponse<B, FB> {
        if let Some(answer) = Unavailable::find(error) {
            rt.rendered(Rendered::Unavailable, error);
            let mut res = rendered(self.unavailable.clone());
            if let Some(d) = answer.retry_after() {
                res.headers_mut()
                    .insert(header::RETRY_AFTER, retry_after_value(d));
            }
            res.extensions_mut().insert(answer.clone());
            return res;
        }
        if let Some(rejection) = find_rejection(error) {
            let how = match origin {
                ErrorOrigin::Fallback => Rendered::Exhausted,
                ErrorOrigin::PassedThrough => Rendered::Rejection(rejection.kind()),
            };
            rt.rendered(how, error);
            let mut res = rejection_response(&rejection)
                .map(|_| Bytes::from_static(UNAVAILABLE_BODY.as_bytes()));
            if rejection.retry_after().is_none() {
                if let Some(d) = primary_retry_after {
                    res.headers_mut()
                        .insert(header::RETRY_AFTER, retry_after_value(d));
                }
            }
            return rendered(res);
        }
        rt.rendered(Rendered::Failure, error);
        rendered(self.failure.clone())
    }
}

impl sealed::Sealed for HttpServer {}

impl RightIsFallback for HttpServer {}

impl<B, FB: From<Bytes>> Mode<Response<B>, Response<FB>> for HttpServer {
    type Error = Infallible;

    fn fail(
        &self,
        error: BoxError,
        origin: ErrorOrigin,
        primary_retry_after: Option<Duration>,
        rt: &Runtime,
    ) -> Result<Self::Response, Infallible> {
        Ok(self.render(&*error, origin, primary_retry_after, rt))
    }

    fn ready_error(&self, error: BoxError) -> Result<BoxError, Infallible> {
        Ok(error)
    }
}

impl<Cap, P, C> FallbackBuilder<Cap, P, C, Plain> {
    /// Answers `http::Response<Either<B, FB>>` ([`EitherResponse`]) so the
    /// fallback's body type may differ from the primary's; errors stay errors.
    pub fn either_body(self) -> FallbackBuilder<Cap, P, C, EitherBody> {
        self.with_mode(EitherBody)
    }

    /// The HTTP server mode: always answers with a response
    /// (`http::Response<Either<B, FB>>`, `Error = Infallible`), see [`HttpServer`].
    pub fn http_server(self) -> FallbackBuilder<Cap, P, C, HttpServer> {
        self.with_mode(HttpServer::default())
    }
}

impl<Cap, P, C> FallbackBuilder<Cap, P, C, HttpServer> {
    /// The response for errors that are neither rejections nor an explicit
    /// [`Unavailable`] (default: `500` with a generic body). Say nothing internal in it.
    #[must_use]
    pub fn failure_response(mut self, response: Response<Bytes>) -> Self {
        self.mode_mut().failure = response;
        self
    }

    /// The response for an explicit [`Unavailable`] answer (default: `503` with the
    /// generic body); `Retry-After` is added when the rejection that fired the
    /// fallback knew one.
    #[must_use]
    pub fn unavailable_response(mut self, response: Response<Bytes>) -> Self {
        self.mode_mut().unavailable = response;
        self
    }
}
