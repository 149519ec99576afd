//! Reporting a level's outcome when its response body ends, for streamed responses.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http_body::Body;
use pin_project_lite::pin_project;
use seawall_core::http::{guard_response, BodyEnd, ClassifyBodyEnd, Guarded, OnBodyEnd};
use seawall_core::{is_rehearsal, BoxError, Classify, ClassifyRequest, Outcome};
use tower_layer::Layer;
use tower_service::Service;

use crate::future::{internal, Driving};
use crate::future::{Annotate, ServedBy};
use crate::handle::Shared;
use crate::layer::DegradationLayer;
use crate::machine::Ticket;
use crate::service::Degradation;

impl<Req, B, C, X> DegradationLayer<Req, http::Response<B>, C, X> {
    /// The same layer, but a response that looks healthy is reported to the level
    /// machine when its **body** ends, so a gRPC stream that fails after its first
    /// messages (its `grpc-status` in the trailers) is a failure of its level. Its
    /// services return `http::Response<Guarded<B, HeldTicket<_>>>`. See
    /// [`UntilBodyEnd`].
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn hold_until_body_end(self) -> UntilBodyEndLayer<Req, B, C, X> {
        UntilBodyEndLayer { layer: self }
    }
}

/// Applies a degradation layer that reports each outcome when the response body
/// ends; made by [`DegradationLayer::hold_until_body_end`].
///
/// It keeps the state of the layer it was made from: services of both modes, and
/// all their clones, share one level machine.
pub struct UntilBodyEndLayer<Req, B, C, X> {
    layer: DegradationLayer<Req, http::Response<B>, C, X>,
}

impl<Req, B, C, X> UntilBodyEndLayer<Req, B, C, X> {
    /// The operator's handle on the layer's shared state.
    pub fn handle(&self) -> crate::Handle {
        self.layer.handle()
    }
}

impl<Req, B, C: Clone, X: Clone> Clone for UntilBodyEndLayer<Req, B, C, X> {
    fn clone(&self) -> Self {
        Self {
            layer: self.layer.clone(),
        }
    }
}

impl<Req, B, C: fmt::Debug, X: fmt::Debug> fmt::Debug for UntilBodyEndLayer<Req, B, C, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilBodyEndLayer")
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, Req, B, C: Clone, X: Clone> Layer<S> for UntilBodyEndLayer<Req, B, C, X> {
    type Service = UntilBodyEnd<S, Req, B, C, X>;

    fn layer(&self, inner: S) -> Self::Service {
        UntilBodyEnd {
            inner: self.layer.layer(inner),
        }
    }
}

/// A [`Degradation`] over `http::Response<B>` that reports a request's outcome when
/// its response body ends, not when the response arrives.
///
/// - **Decided by the headers first.** The classifier sees the response as in the
///   default mode; a failure there (a trailers-only gRPC error, an HTTP `503`), an
///   ignored outcome, or a body that has already ended is recorded at once.
/// - **Otherwise recorded at the end of the body**, by the classifier's
///   [`ClassifyBodyEnd`]: [`GrpcStatus`](seawall_core::GrpcStatus) reads the
///   trailers' `grpc-status`; an error from the body is a failure of the level that
///   served it (a recovery probe's, of the level above). A body dropped before its
///   end records nothing, as a dropped response future does: the request was
///   cancelled, which says nothing about the level.
/// - [`ServedBy`] (with [`level_extensions`](crate::DegradationBuilder::level_extensions))
///   is written when the response arrives.
///
/// Every level answers with `http::Response<B>` as in the default mode; only the
/// layer's own response type changes.
///
/// ```
/// # #[cfg(feature = "http")] {
/// use seawall_core::{AdmissionAsFailure, GrpcStatus};
/// use seawall_degradation::DegradationLayer;
/// use seawall_degradation::http::FixedResponse;
///
/// # fn main() -> Result<(), seawall_core::ConfigError> {
/// type Res = http::Response<http_body_util::Full<bytes::Bytes>>;
/// let layer = DegradationLayer::<http::Request<()>, Res>::builder("prices")
///     .level("paused", FixedResponse::new(http::StatusCode::SERVICE_UNAVAILABLE, "paused"))
///     .classifier(AdmissionAsFailure(GrpcStatus::default()))
///     .build()?
///     .hold_until_body_end();
/// # let _ = layer;
/// # Ok(())
/// # }
/// # main().unwrap();
/// # }
/// ```
pub struct UntilBodyEnd<S, Req, B, C, X> {
    inner: Degradation<S, Req, http::Response<B>, C, X>,
}

impl<S, Req, B, C, X> UntilBodyEnd<S, Req, B, C, X> {
    /// The operator's handle on the shared state.
    pub fn handle(&self) -> crate::Handle {
        self.inner.handle()
    }

    /// The best level's service.
    pub fn get_ref(&self) -> &S {
        self.inner.get_ref()
    }
}

impl<S: Clone, Req, B, C: Clone, X: Clone> Clone for UntilBodyEnd<S, Req, B, C, X> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<S: fmt::Debug, Req, B, C: fmt::Debug, X> fmt::Debug for UntilBodyEnd<S, Req, B, C, X> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilBodyEnd")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<S, Req, B, C, X> Service<Req> for UntilBodyEnd<S, Req, B, C, X>
where
    S: Service<Req, Response = http::Response<B>> + Clone,
    S::Error: Into<BoxError>,
    C: ClassifyRequest<Req, http::Response<B>>,
    C::Classifier: ClassifyBodyEnd,
    X: Annotate<Req, http::Response<B>>,
    B: Body,
{
    type Response = http::Response<Guarded<B, HeldTicket<C::Classifier>>>;
    type Error = BoxError;
    type Future = UntilBodyEndFuture<S, Req, B, C::Classifier, X>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let (driving, shared, classifier, extensions) = self.inner.call(req).into_parts();
        UntilBodyEndFuture {
            driving,
            held: Some((shared, classifier, extensions)),
        }
    }
}

pin_project! {
    /// The future returned by [`UntilBodyEnd`]: as
    /// [`ResponseFuture`](crate::ResponseFuture), but a healthy-looking response
    /// carries the request's ticket in its body.
    pub struct UntilBodyEndFuture<S, Req, B, K, X>
    where
        S: Service<Req>,
    {
        #[pin]
        driving: Driving<S, Req, http::Response<B>>,
        held: Option<(Arc<Shared>, K, X)>,
    }
}

impl<S, Req, B, K, X> fmt::Debug for UntilBodyEndFuture<S, Req, B, K, X>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilBodyEndFuture")
            .field("ticket", &self.driving.ticket())
            .finish_non_exhaustive()
    }
}

impl<S, Req, B, K, X> Future for UntilBodyEndFuture<S, Req, B, K, X>
where
    S: Service<Req, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    K: Classify<http::Response<B>> + ClassifyBodyEnd,
    X: Annotate<Req, http::Response<B>>,
    B: Body,
{
    type Output = Result<http::Response<Guarded<B, HeldTicket<K>>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let ticket = this.driving.ticket();
        let Some((shared, _, _)) = this.held.as_ref() else {
            return Poll::Ready(Err(internal("polled after completion")));
        };
        // Answered or panicked already: recorded then, so not again here.
        let result = match ready!(this.driving.as_mut().poll_level(cx, shared)) {
            Ok(result) => result,
            Err(after) => return Poll::Ready(Err(internal(after))),
        };
        let Some((shared, classifier, extensions)) = this.held.take() else {
            return Poll::Ready(Err(internal("polled after completion")));
        };
        let mut response = match result {
            Ok(response) => response,
            Err(error) => {
                let failed = seawall_core::ErrorRef::from(&*error);
                let outcome = classifier.classify(Err(failed));
                let rehearsal = is_rehearsal(classifier.reason(Err(failed), outcome));
                shared.record(ticket, outcome, rehearsal);
                return Poll::Ready(Err(error));
            }
        };
        let outcome = classifier.classify(Ok(&response));
        // Read before the body ends: the injected fault's mark is on the response.
        let rehearsal = is_rehearsal(classifier.reason(Ok(&response), outcome));
        extensions.response(&mut response, || ServedBy {
            level: shared.level_of(ticket.level),
            probe: ticket.probe,
        });
        let held = if outcome == Outcome::Success && !response.body().is_end_stream() {
            HeldTicket {
                held: Some((shared, ticket, classifier, rehearsal)),
            }
        } else {
            shared.record(ticket, outcome, rehearsal);
            HeldTicket { held: None }
        };
        Poll::Ready(Ok(guard_response(response, held)))
    }
}

/// A request's ticket, held by its response body ([`Guarded`]) and recorded once,
/// with the classifier's [`ClassifyBodyEnd`] verdict, when the body ends or fails; a
/// body dropped first records nothing.
///
/// Empty when the outcome was already recorded from the response's headers.
pub struct HeldTicket<K> {
    /// The layer, the request's ticket, its classifier, and whether the response
    /// carried an injected fault's mark.
    held: Option<(Arc<Shared>, Ticket, K, bool)>,
}

impl<K> HeldTicket<K> {
    /// Whether the outcome is still to be recorded (the body has not ended).
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }
}

impl<K> fmt::Debug for HeldTicket<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldTicket")
            .field("held", &self.is_held())
            .finish()
    }
}

impl<K: ClassifyBodyEnd> OnBodyEnd for HeldTicket<K> {
    fn on_body_end(self, end: BodyEnd<'_>) {
        let Some((shared, ticket, classifier, rehearsal)) = self.held else {
            return;
        };
        if let BodyEnd::Dropped = end {
            return;
        }
        shared.record(ticket, classifier.classify_body_end(end), rehearsal);
    }
}
