//! HTTP requests and responses (feature `http`): routes and keys from the request's
//! URI, injected status and gRPC status answers, and the body that can be slowed or
//! cut short.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use seawall_core::BoxError;
use tokio::time::Sleep;

use crate::error::{Injected, InjectedFault};
use crate::fault::{Fault, FaultKind};
use crate::requests::{Requests, Responses};

/// HTTP requests (`http::Request<B>`) and responses (`http::Response<B>`, answered
/// as `http::Response<FaultBody<B>>`): an injection's `route` is matched against the
/// request's path, its `key` against the URI's host; a response a fault touched
/// carries [`InjectedFault`] in its extensions. Made by
/// [`FaultLayer::http`](crate::FaultLayer::http).
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpRequests;

impl<B> Requests<http::Request<B>> for HttpRequests {
    const HTTP: bool = true;

    fn route<'a>(&self, req: &'a http::Request<B>) -> Option<&'a str> {
        Some(req.uri().path())
    }

    fn key<'a>(&self, req: &'a http::Request<B>) -> Option<Cow<'a, str>> {
        req.uri().host().map(Cow::Borrowed)
    }
}

impl<B> Responses<http::Response<B>> for HttpRequests {
    type Response = http::Response<FaultBody<B>>;

    fn pass(
        &self,
        res: http::Response<B>,
        injected: Option<(&Fault, &Arc<str>)>,
    ) -> Self::Response {
        let Some((fault, policy)) = injected else {
            return res.map(|inner| FaultBody::of(Kind::Pass { inner }));
        };
        let mut res = res.map(|inner| {
            FaultBody::of(match fault {
                Fault::SlowBody { per_frame } => Kind::Slow {
                    inner,
                    per_frame: *per_frame,
                    sleep: None,
                },
                Fault::FailingBody { after_bytes } => Kind::Failing {
                    inner,
                    left: *after_bytes,
                    policy: policy.clone(),
                },
                _ => Kind::Pass { inner },
            })
        });
        res.extensions_mut().insert(InjectedFault {
            kind: fault.kind(),
            policy: policy.clone(),
        });
        res
    }

    fn answer(&self, fault: &Fault, policy: &Arc<str>) -> Option<Self::Response> {
        let mut res = http::Response::new(FaultBody::of(Kind::Empty { ended: () }));
        match fault {
            Fault::HttpStatus(status) => *res.status_mut() = *status,
            Fault::GrpcStatus(code) => {
                // A trailers-only answer: the status in the headers, no body, as a
                // gRPC server that fails a call before any message does.
                let headers = res.headers_mut();
                headers.insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/grpc"),
                );
                headers.insert("grpc-status", http::HeaderValue::from(*code));
                headers.insert(
                    "grpc-message",
                    http::HeaderValue::from_static("injected%20fault%20(rehearsal)"),
                );
            }
            _ => return None,
        }
        res.extensions_mut().insert(InjectedFault {
            kind: fault.kind(),
            policy: policy.clone(),
        });
        Some(res)
    }
}

pin_project! {
    /// The body of a response through an HTTP fault layer: the inner body as it is,
    /// slowed frame by frame, failing after some bytes, or empty (an injected
    /// answer). Its errors are boxed; an injected failure is an [`Injected`].
    #[derive(Debug)]
    pub struct FaultBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        // The inner body, untouched.
        Pass {
            #[pin]
            inner: B,
        },
        // Each frame waits `per_frame` first.
        Slow {
            #[pin]
            inner: B,
            per_frame: Duration,
            sleep: Option<Pin<Box<Sleep>>>,
        },
        // Fails once it would pass more than `left` more bytes, or at its end.
        Failing {
            #[pin]
            inner: B,
            left: u64,
            policy: Arc<str>,
        },
        // No body: an injected answer.
        Empty {
            ended: (),
        },
    }
}

impl<B> FaultBody<B> {
    fn of(kind: Kind<B>) -> Self {
        Self { kind }
    }

    /// Whether a fault slows or fails this body.
    pub fn is_faulted(&self) -> bool {
        matches!(self.kind, Kind::Slow { .. } | Kind::Failing { .. })
    }

    /// Whether this is an injected answer's (empty) body.
    pub fn is_injected_answer(&self) -> bool {
        matches!(self.kind, Kind::Empty { .. })
    }
}

impl<B> Body for FaultBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Pass { inner } => inner.poll_frame(cx).map_err(Into::into),
            KindProj::Slow {
                inner,
                per_frame,
                sleep,
            } => {
                let timer = sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(*per_frame)));
                ready!(timer.as_mut().poll(cx));
                let frame = ready!(inner.poll_frame(cx));
                *sleep = None;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            KindProj::Failing {
                inner,
                left,
                policy,
            } => {
                let fail = |policy: &Arc<str>| {
                    let imitated = std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "response body cut short (injected)",
                    );
                    Box::new(Injected::new(
                        FaultKind::FailingBody,
                        policy.clone(),
                        imitated,
                    )) as BoxError
                };
                match ready!(inner.poll_frame(cx)) {
                    None => Poll::Ready(Some(Err(fail(policy)))),
                    Some(Err(e)) => Poll::Ready(Some(Err(e.into()))),
                    Some(Ok(frame)) => {
                        let len = frame.data_ref().map_or(0, |d| d.remaining() as u64);
                        if len > *left || (len == 0 && frame.is_trailers()) {
                            *left = 0;
                            return Poll::Ready(Some(Err(fail(policy))));
                        }
                        *left -= len;
                        Poll::Ready(Some(Ok(frame)))
                    }
                }
            }
            KindProj::Empty { .. } => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Pass { inner } | Kind::Slow { inner, .. } => inner.is_end_stream(),
            // A failing body always has its failure to deliver.
            Kind::Failing { .. } => false,
            Kind::Empty { .. } => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Pass { inner } | Kind::Slow { inner, .. } => inner.size_hint(),
            Kind::Failing { .. } => SizeHint::default(),
            Kind::Empty { .. } => SizeHint::with_exact(0),
        }
    }
}
