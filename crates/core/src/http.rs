//! HTTP glue: rejections rendered as responses, and the bodies layers share.
//!
//! An `Err` handed to hyper closes the connection without a response, and axum
//! wants `Infallible`; servers therefore render a rejection as a response. The body
//! is short and generic: it never names a dependency, a breaker or an internal
//! error. The cause belongs in traces and metrics. One table decides the answer, by
//! the rejection's [`RejectionKind`](crate::RejectionKind) label (and a breaker's
//! [`OpenCause`](crate::OpenCause)); the gRPC column is the `grpc` module's
//! (feature `tonic`), for clients and servers alike. It is the only copy: the
//! README and the other modules point here, and a test checks one row per kind
//! and cause against [`RejectionKind::http_status`](crate::RejectionKind::http_status)
//! and `grpc_code`.
//!
//! | rejection | HTTP | `Retry-After` | gRPC | `grpc-retry-pushback-ms` |
//! |---|---|---|---|---|
//! | `circuit_open` (`open`) | 503 | what remains of the open interval, whole seconds rounded up | `UNAVAILABLE` | the same, in ms |
//! | `circuit_open` (`probe_slots_full`) | 503 | what remains of the oldest probe's half-open timeout | `UNAVAILABLE` | the same |
//! | `circuit_open` (`ramping`) | 503 | what remains of the ramp | `UNAVAILABLE` | the same |
//! | `circuit_open` (`forced_open`) | 503 | none: only an operator ends it | `UNAVAILABLE` | none |
//! | `bulkhead_full`, `bulkhead_timeout` | 503 | none: capacity frees when calls end, not at a known time | `RESOURCE_EXHAUSTED` | none |
//! | `deadline_exceeded` | 504 | none: the budget is spent | `DEADLINE_EXCEEDED` | none |
//! | `fallbacks_exhausted` | 503 | the steps' first rejection's, if any | `UNAVAILABLE` | the same |
//!
//! A retrying client reads `UNAVAILABLE` as "try again" and `DEADLINE_EXCEEDED` as
//! "too late": that is why a spent budget is never rendered as unavailable.

use std::convert::Infallible;
use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

pub use http_body_util::{Either, Full};

use crate::classify::{AdmissionAsFailure, ErrorsAsFailures, GrpcStatus, HttpStatus, WithReason};
use crate::held::HeldError;
use crate::rejection::{find_rejection, BoxError, Rejection};
use crate::Outcome;

/// The body of a rendered rejection or a fixed answer.
pub type RenderedBody = Full<Bytes>;

/// The generic body of a rendered rejection.
pub const UNAVAILABLE_BODY: &str = "service temporarily unavailable\n";

/// A `Retry-After` value for `d`: whole seconds, rounded up (1.2 s → `2`).
pub fn retry_after_value(d: Duration) -> HeaderValue {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    HeaderValue::from(secs)
}

/// Renders `rejection` by the table in the module docs (503, or 504 for a spent
/// deadline; `Retry-After` when known) with the generic body.
pub fn rejection_response(rejection: &Rejection<'_>) -> Response<RenderedBody> {
    rejection_response_with(rejection, Bytes::from_static(UNAVAILABLE_BODY.as_bytes()))
}

/// Renders `rejection` by the table in the module docs, with your `body`.
pub fn rejection_response_with(rejection: &Rejection<'_>, body: Bytes) -> Response<RenderedBody> {
    let mut res = Response::new(Full::new(body));
    *res.status_mut() = rejection.kind().http_status();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(d) = rejection.retry_after() {
        res.headers_mut()
            .insert(header::RETRY_AFTER, retry_after_value(d));
    }
    res
}

/// Renders `error` when a seawall rejection is in its chain; `None` for other errors.
pub fn render_rejection(error: &(dyn Error + 'static)) -> Option<Response<RenderedBody>> {
    find_rejection(error).map(|r| rejection_response(&r))
}

/// The generic body of a rendered internal error.
pub const INTERNAL_ERROR_BODY: &str = "internal error\n";

/// Renders any error as a response: a seawall rejection as [`rejection_response`],
/// anything else as `500` with a generic body. The cause goes to `tracing`, never
/// into the body.
pub fn error_response(error: &(dyn Error + 'static)) -> Response<RenderedBody> {
    crate::telemetry::rendered_error(error);
    render_rejection(error).unwrap_or_else(internal_error_response)
}

fn internal_error_response() -> Response<RenderedBody> {
    let mut res = Response::new(Full::new(Bytes::from_static(
        INTERNAL_ERROR_BODY.as_bytes(),
    )));
    *res.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    res
}

/// Answers instead of erroring: turns the inner service's errors into responses
/// with [`error_response`], so the stack's error is `Infallible` as axum requires
/// (and hyper does not close the connection without an answer).
///
/// The response body becomes `Either<B, RenderedBody>`: the inner body on success,
/// the rendered one otherwise.
///
/// ```
/// use seawall_core::http::RespondLayer;
/// use seawall_core::{BoxError, BulkheadFull};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let busy = service_fn(|_req: http::Request<()>| async {
///     Err::<http::Response<String>, BoxError>(Box::new(BulkheadFull::new("quotes".into())))
/// });
/// let res = RespondLayer.layer(busy).oneshot(http::Request::new(())).await.unwrap();
/// assert_eq!(res.status(), http::StatusCode::SERVICE_UNAVAILABLE);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RespondLayer;

impl<S> Layer<S> for RespondLayer {
    type Service = Respond<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Respond {
            inner,
            not_ready: HeldError::default(),
        }
    }
}

/// The service built by [`RespondLayer`].
#[derive(Debug, Clone)]
pub struct Respond<S> {
    inner: S,
    not_ready: HeldError,
}

impl<S, Req, B> Service<Req> for Respond<S>
where
    S: Service<Req, Response = Response<B>>,
    S::Error: Into<BoxError>,
{
    type Response = Response<Either<B, RenderedBody>>;
    type Error = Infallible;
    type Future = RespondFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.not_ready.poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let state = match self.not_ready.call(&mut self.inner, req) {
            Ok(inner) => RespondState::Calling { inner },
            Err(held) => RespondState::Failed {
                response: Some(error_response(&*held)),
            },
        };
        RespondFuture { state }
    }
}

pin_project! {
    /// The response future of [`Respond`].
    #[derive(Debug)]
    pub struct RespondFuture<F> {
        #[pin]
        state: RespondState<F>,
    }
}

pin_project! {
    #[project = RespondStateProj]
    #[derive(Debug)]
    enum RespondState<F> {
        Calling { #[pin] inner: F },
        Failed { response: Option<Response<RenderedBody>> },
    }
}

impl<F, B, E> Future for RespondFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<Either<B, RenderedBody>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let res = match self.project().state.project() {
            RespondStateProj::Calling { inner } => match ready!(inner.poll(cx)) {
                Ok(res) => res.map(Either::Left),
                Err(e) => error_response(&*e.into()).map(Either::Right),
            },
            RespondStateProj::Failed { response } => response
                .take()
                .unwrap_or_else(internal_error_response)
                .map(Either::Right),
        };
        Poll::Ready(Ok(res))
    }
}

/// How a guarded body ended.
#[derive(Debug, Clone, Copy)]
pub enum BodyEnd<'a> {
    /// Read to the end; `trailers` holds the trailers frame if there was one
    /// (where a streamed gRPC response carries its `grpc-status`).
    Complete {
        /// The trailers, when the body ended with them.
        trailers: Option<&'a HeaderMap>,
    },
    /// The body yielded an error.
    Errored,
    /// The body was dropped before its end.
    Dropped,
}

/// Decides the outcome of a response whose call was held until its body ended.
///
/// A layer holding the call (the breaker's and the degradation layer's
/// `hold_until_body_end`) first classifies the response by its headers with
/// [`Classify`](crate::Classify); only a response found healthy there, whose body
/// is still to come, is held, and this decides when the body ends:
///
/// - **trailers:** [`GrpcStatus`] reads their `grpc-status` with the same codes as
///   in headers (a stream that fails after its first messages is a failure); the
///   other provided classifiers, and trailers without `grpc-status`, keep the
///   headers' verdict: a success;
/// - **an error from the body** (a reset stream, a connection lost mid-body): a
///   failure for every provided classifier;
/// - **dropped before its end:** never asked; the layer reports the call cancelled
///   (answer [`Outcome::Ignore`] if asked anyway).
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use seawall_core::http::{BodyEnd, ClassifyBodyEnd};
/// use seawall_core::{GrpcStatus, Outcome};
///
/// let mut trailers = HeaderMap::new();
/// trailers.insert("grpc-status", HeaderValue::from_static("14")); // UNAVAILABLE
/// let end = BodyEnd::Complete { trailers: Some(&trailers) };
/// assert_eq!(GrpcStatus::default().classify_body_end(end), Outcome::Failure);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot classify the end of a response body",
    label = "expected a classifier that also implements `ClassifyBodyEnd`",
    note = "holding a call until its body ends needs a classifier for the end too: `GrpcStatus`, `HttpStatus`, `ErrorsAsFailures` (or `AdmissionAsFailure`/`with_reason` around them), a closure wrapped in `classify_fn`, or a type of your own implementing `ClassifyBodyEnd`"
)]
pub trait ClassifyBodyEnd {
    /// The outcome once the body has ended as `end`.
    fn classify_body_end(&self, end: BodyEnd<'_>) -> Outcome;
}

/// The verdict of every provided classifier but [`GrpcStatus`]: the headers
/// said success, so only an error from the body changes it.
fn body_errors_as_failures(end: BodyEnd<'_>) -> Outcome {
    match end {
        BodyEnd::Complete { .. } => Outcome::Success,
        BodyEnd::Errored => Outcome::Failure,
        BodyEnd::Dropped => Outcome::Ignore,
    }
}

impl ClassifyBodyEnd for ErrorsAsFailures {
    fn classify_body_end(&self, end: BodyEnd<'_>) -> Outcome {
        body_errors_as_failures(end)
    }
}

impl ClassifyBodyEnd for HttpStatus {
    fn classify_body_end(&self, end: BodyEnd<'_>) -> Outcome {
        body_errors_as_failures(end)
    }
}

impl ClassifyBodyEnd for GrpcStatus {
    fn classify_body_end(&self, end: BodyEnd<'_>) -> Outcome {
        match end {
            BodyEnd::Complete {
                trailers: Some(trailers),
            } => match trailers.get(crate::classify::GRPC_STATUS) {
                Some(value) => self.classify_status_value(value),
                None => Outcome::Success,
            },
            end => body_errors_as_failures(end),
        }
    }
}

/// A closure classifier ([`classify_fn`](crate::classify_fn)) judged the headers;
/// at the body's end, as for the provided HTTP classifiers, only a body error
/// changes its verdict.
impl<F> ClassifyBodyEnd for crate::ClassifyFn<F> {
    fn classify_body_end(&self, end: BodyEnd<'_>) -> Outcome {
        body_errors_as_failures(end)
    }
}

impl<C: ClassifyBodyEnd> ClassifyBodyEnd for AdmissionAsFailure<C> {
    fn classify_body_end(&self, end: BodyEnd<'_>) -> Outcome {
        self.0.classify_body_end(end)
    }
}

impl<C: ClassifyBodyEnd, F> ClassifyBodyEnd for WithReason<C, F> {
    fn classify_body_end(&self, end: BodyEnd<'_>) -> Outcome {
        self.classifier().classify_body_end(end)
    }
}

/// A value told how a [`Guarded`] body ended, exactly once, then dropped.
///
/// A permit needs nothing but the drop (implement with an empty body); a breaker
/// ticket classifies by the trailers.
pub trait OnBodyEnd {
    /// Called once when the body ends, errors or is dropped.
    fn on_body_end(self, end: BodyEnd<'_>);
}

impl OnBodyEnd for () {
    fn on_body_end(self, _end: BodyEnd<'_>) {}
}

#[derive(Debug)]
struct Slot<G: OnBodyEnd>(Option<G>);

impl<G: OnBodyEnd> Slot<G> {
    fn finish(&mut self, end: BodyEnd<'_>) {
        if let Some(g) = self.0.take() {
            g.on_body_end(end);
        }
    }
}

impl<G: OnBodyEnd> Drop for Slot<G> {
    fn drop(&mut self) {
        self.finish(BodyEnd::Dropped);
    }
}

pin_project! {
    /// A body that holds a guard (a bulkhead permit, a breaker ticket) until the body
    /// is read to its end, errors, or is dropped — whichever comes first.
    ///
    /// The connection to a dependency stays busy while its response body streams;
    /// holding the guard until then keeps a bulkhead's count honest.
    #[derive(Debug)]
    pub struct Guarded<B, G: OnBodyEnd> {
        #[pin]
        body: B,
        slot: Slot<G>,
    }
}

impl<B: Body, G: OnBodyEnd> Guarded<B, G> {
    /// Guards `body` with `guard`. An already-finished body releases it at once.
    pub fn new(body: B, guard: G) -> Self {
        let mut slot = Slot(Some(guard));
        if body.is_end_stream() {
            slot.finish(BodyEnd::Complete { trailers: None });
        }
        Self { body, slot }
    }

    /// `body` with no guard held: the same type as a guarded body, for a layer that
    /// released its call at the response's headers (a body-end layer switched to
    /// release there, a call already judged from its headers).
    pub fn without_guard(body: B) -> Self {
        Self {
            body,
            slot: Slot(None),
        }
    }

    /// Whether the guard is still held.
    pub fn is_holding(&self) -> bool {
        self.slot.0.is_some()
    }
}

/// Wraps a response's body in [`Guarded`].
pub fn guard_response<B: Body, G: OnBodyEnd>(
    res: Response<B>,
    guard: G,
) -> Response<Guarded<B, G>> {
    res.map(|body| Guarded::new(body, guard))
}

impl<B: Body, G: OnBodyEnd> Body for Guarded<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let polled = ready!(this.body.as_mut().poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let Some(trailers) = frame.trailers_ref() {
                    this.slot.finish(BodyEnd::Complete {
                        trailers: Some(trailers),
                    });
                } else if this.body.is_end_stream() {
                    this.slot.finish(BodyEnd::Complete { trailers: None });
                }
            }
            Some(Err(_)) => this.slot.finish(BodyEnd::Errored),
            None => this.slot.finish(BodyEnd::Complete { trailers: None }),
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

pin_project! {
    /// A response body bounded by the request's deadline: once the deadline has
    /// passed, the next poll ends the body with a [`DeadlineExceeded`](crate::DeadlineExceeded) error (the
    /// error itself, boxed) and drops the inner body, which closes the stream to the
    /// dependency. Without a deadline it is the inner body, its error boxed.
    ///
    /// Why: a client's budget covers the whole answer, not only its headers (gRPC's
    /// deadline covers the stream too). A stream still running when the caller's
    /// budget is spent is work nobody waits for, holding a connection and, through
    /// a [`Guarded`] body around it, a bulkhead's slot. The breaker's
    /// `hold_until_body_end` mode wraps each response body in one, under the
    /// [`Guarded`] body that holds its ticket, so a body cut here is recorded as a
    /// timeout failure and every slot held by the body is freed.
    ///
    /// The deadline is checked at each poll, before the inner body: frames already
    /// buffered are not read past it, as gRPC cancels the whole call. The timer is
    /// registered at the first poll, boxed (one allocation per bounded body), so
    /// the body is `Unpin` when the inner one is and `body.frame().await` keeps
    /// working in callers' code.
    #[derive(Debug)]
    pub struct BoundedBody<B> {
        #[pin]
        body: Option<B>,
        deadline: Option<tokio::time::Instant>,
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<B> BoundedBody<B> {
    /// `body`, ended with [`DeadlineExceeded`](crate::DeadlineExceeded) if still being read at `deadline`
    /// (`None`: never).
    pub fn new(body: B, deadline: Option<crate::Deadline>) -> Self {
        Self {
            body: Some(body),
            deadline: deadline.map(|d| d.instant()),
            sleep: None,
        }
    }

    /// The deadline bounding the body, if any.
    pub fn deadline(&self) -> Option<crate::Deadline> {
        self.deadline.map(crate::Deadline::at)
    }

    /// Whether the body was cut at its deadline.
    pub fn is_expired(&self) -> bool {
        self.body.is_none()
    }
}

impl<B> Body for BoundedBody<B>
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
        let mut this = self.project();
        if this.body.is_none() {
            // Already cut at the deadline: the error was the body's end.
            return Poll::Ready(None);
        }
        if let Some(deadline) = *this.deadline {
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            if sleep.as_mut().poll(cx).is_ready() {
                this.body.set(None);
                *this.sleep = None;
                return Poll::Ready(Some(Err(Box::new(
                    crate::rejection::DeadlineExceeded::new(),
                ))));
            }
        }
        match this.body.as_pin_mut() {
            Some(body) => body
                .poll_frame(cx)
                .map(|frame| frame.map(|f| f.map_err(Into::into))),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Some(body) => body.size_hint(),
            None => SizeHint::with_exact(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejection::{BoxError, BulkheadFull, CircuitOpen};
    use http_body_util::BodyExt;
    use std::sync::{Arc, Mutex};

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_value(Duration::from_millis(1200)), "2");
        assert_eq!(retry_after_value(Duration::from_secs(10)), "10");
        assert_eq!(retry_after_value(Duration::from_nanos(1)), "1");
        assert_eq!(retry_after_value(Duration::ZERO), "0");
    }

    #[tokio::test]
    async fn an_open_circuit_renders_503_with_retry_after_and_nothing_internal() {
        let err: BoxError = Box::new(CircuitOpen::new(
            "freight-supplier-db".into(),
            Duration::from_millis(1200),
        ));
        let res = render_rejection(&*err).unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[header::RETRY_AFTER], "2");
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert_eq!(text, UNAVAILABLE_BODY);
        assert!(!text.contains("freight"));
    }

    #[test]
    fn rejections_without_retry_after_have_no_header_and_others_are_not_rendered() {
        let full: BoxError = Box::new(BulkheadFull::new("b".into()));
        let res = render_rejection(&*full).unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(res.headers().get(header::RETRY_AFTER).is_none());
        let other: BoxError = "boom".into();
        assert!(render_rejection(&*other).is_none());
        let r = find_rejection(&*full).unwrap();
        let custom = rejection_response_with(&r, Bytes::from_static(b"{\"error\":\"busy\"}"));
        assert_eq!(custom.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test]
    async fn respond_renders_rejections_and_hides_other_errors() {
        use tower::{service_fn, ServiceExt};
        let open = service_fn(|_req: ()| async {
            Err::<Response<String>, BoxError>(Box::new(CircuitOpen::new(
                "db".into(),
                Duration::from_millis(2500),
            )))
        });
        let res = RespondLayer.layer(open).oneshot(()).await.unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()[header::RETRY_AFTER], "3");

        let broken = service_fn(|_req: ()| async {
            Err::<Response<String>, BoxError>("password=hunter2 at db.internal:5432".into())
        });
        let res = RespondLayer.layer(broken).oneshot(()).await.unwrap();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], INTERNAL_ERROR_BODY.as_bytes());

        let fine =
            service_fn(|_req: ()| async { Ok::<_, BoxError>(Response::new("ok".to_owned())) });
        let res = RespondLayer.layer(fine).oneshot(()).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert!(matches!(res.body(), Either::Left(s) if s == "ok"));
    }

    /// A service whose readiness fails with a full bulkhead and which must then never be called.
    struct NeverReady;
    impl Service<()> for NeverReady {
        type Response = Response<String>;
        type Error = BoxError;
        type Future = std::future::Ready<Result<Response<String>, BoxError>>;
        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Err(Box::new(BulkheadFull::new("pool".into()))))
        }
        fn call(&mut self, _req: ()) -> Self::Future {
            panic!("called after a failed poll_ready")
        }
    }

    #[tokio::test]
    async fn a_failed_readiness_is_answered_without_calling_the_inner_service() {
        use tower::ServiceExt;
        let res = RespondLayer.layer(NeverReady).oneshot(()).await.unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[derive(Debug, Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<String>>>);
    impl OnBodyEnd for Recorder {
        fn on_body_end(self, end: BodyEnd<'_>) {
            let label = match end {
                BodyEnd::Complete { trailers: Some(t) } => format!(
                    "complete grpc-status={}",
                    t.get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-")
                ),
                BodyEnd::Complete { trailers: None } => "complete".to_owned(),
                BodyEnd::Errored => "errored".to_owned(),
                BodyEnd::Dropped => "dropped".to_owned(),
            };
            self.0.lock().unwrap().push(label);
        }
    }

    impl Recorder {
        fn events(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    type Frames = Vec<Result<Frame<Bytes>, std::io::Error>>;

    /// A body that yields the given frames, then ends.
    struct Scripted(std::collections::VecDeque<Result<Frame<Bytes>, std::io::Error>>);

    impl Body for Scripted {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            Poll::Ready(self.0.pop_front())
        }
    }

    fn stream(frames: Frames) -> Scripted {
        Scripted(frames.into())
    }

    #[tokio::test]
    async fn guard_is_released_at_the_end_of_the_body() {
        let rec = Recorder::default();
        let body = Guarded::new(Full::new(Bytes::from_static(b"quote")), rec.clone());
        assert!(body.is_holding());
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"quote");
        assert_eq!(rec.events(), ["complete"]);
    }

    #[tokio::test]
    async fn guard_is_released_when_the_body_is_dropped() {
        let rec = Recorder::default();
        let body = Guarded::new(Full::new(Bytes::from_static(b"quote")), rec.clone());
        assert!(rec.events().is_empty());
        drop(body);
        assert_eq!(rec.events(), ["dropped"]);
    }

    #[test]
    fn an_empty_body_releases_at_once_and_only_once() {
        let rec = Recorder::default();
        let body = Guarded::new(http_body_util::Empty::<Bytes>::new(), rec.clone());
        assert!(!body.is_holding());
        drop(body);
        assert_eq!(rec.events(), ["complete"]);
    }

    #[test]
    fn the_end_of_a_body_is_classified_by_its_trailers_or_its_error() {
        use crate::{with_reason, Classify, ClassifyInput};
        let trailers = |code: &'static str| {
            let mut t = HeaderMap::new();
            t.insert("grpc-status", HeaderValue::from_static(code));
            t
        };
        let unavailable = trailers("14");
        let ok = trailers("0");
        let not_found = trailers("5");
        let garbage = trailers("x");
        let grpc = GrpcStatus::default();
        let complete = |t| BodyEnd::Complete { trailers: Some(t) };
        assert_eq!(
            grpc.classify_body_end(complete(&unavailable)),
            Outcome::Failure
        );
        assert_eq!(grpc.classify_body_end(complete(&ok)), Outcome::Success);
        assert_eq!(
            grpc.classify_body_end(complete(&not_found)),
            Outcome::Success
        );
        assert_eq!(grpc.classify_body_end(complete(&garbage)), Outcome::Failure);
        let other_trailers = {
            let mut t = HeaderMap::new();
            t.insert("x-checksum", HeaderValue::from_static("abc"));
            t
        };
        assert_eq!(
            grpc.classify_body_end(complete(&other_trailers)),
            Outcome::Success
        );
        // The same codes as in headers, reconfigured the same way.
        let lenient = grpc.without_failure(crate::grpc_code::UNAVAILABLE);
        assert_eq!(
            lenient.classify_body_end(complete(&unavailable)),
            Outcome::Success
        );
        for c in [
            &grpc as &dyn ClassifyBodyEnd,
            &HttpStatus::default(),
            &ErrorsAsFailures,
            &AdmissionAsFailure(GrpcStatus::default()),
        ] {
            assert_eq!(c.classify_body_end(BodyEnd::Errored), Outcome::Failure);
            assert_eq!(
                c.classify_body_end(BodyEnd::Complete { trailers: None }),
                Outcome::Success
            );
            assert_eq!(c.classify_body_end(BodyEnd::Dropped), Outcome::Ignore);
        }
        // Only gRPC reads the trailers' status.
        assert_eq!(
            HttpStatus::default().classify_body_end(complete(&unavailable)),
            Outcome::Success
        );
        let reasoned = with_reason(grpc, |_r: ClassifyInput<'_, Response<()>>, _o| None);
        assert_eq!(
            reasoned.classify_body_end(complete(&unavailable)),
            Outcome::Failure
        );
        // The one mapping: a status read from headers gives the same verdict.
        let res = Response::builder()
            .header("grpc-status", "14")
            .body(())
            .unwrap();
        assert_eq!(grpc.classify(Ok(&res)), Outcome::Failure);
    }

    #[tokio::test]
    async fn trailers_and_errors_are_reported() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("14"));
        let rec = Recorder::default();
        let frames: Frames = vec![
            Ok(Frame::data(Bytes::from_static(b"x"))),
            Ok(Frame::trailers(trailers)),
        ];
        let body = Guarded::new(stream(frames), rec.clone());
        let collected = body.collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "14");
        assert_eq!(rec.events(), ["complete grpc-status=14"]);

        let rec = Recorder::default();
        let frames: Frames = vec![Err(std::io::Error::other("reset"))];
        let body = Guarded::new(stream(frames), rec.clone());
        assert!(body.collect().await.is_err());
        assert_eq!(rec.events(), ["errored"]);
    }

    /// A body that yields its frames, then waits forever (a stalled stream); it
    /// holds `alive` until dropped.
    struct Stalling {
        frames: std::collections::VecDeque<Frame<Bytes>>,
        _alive: Arc<()>,
    }

    impl Body for Stalling {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            match self.frames.pop_front() {
                Some(frame) => Poll::Ready(Some(Ok(frame))),
                None => Poll::Pending,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_still_streaming_at_its_deadline_ends_with_deadline_exceeded() {
        use crate::Deadline;
        use tokio::time::Instant;
        let alive = Arc::new(());
        let stalling = Stalling {
            frames: [Frame::data(Bytes::from_static(b"first"))].into(),
            _alive: Arc::clone(&alive),
        };
        let deadline = Deadline::after(Instant::now(), Duration::from_millis(300));
        let rec = Recorder::default();
        let mut body = Guarded::new(BoundedBody::new(stalling, Some(deadline)), rec.clone());
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "first");
        // Nothing more comes: the read waits, and is cut at the deadline.
        let started = Instant::now();
        let cut = body.frame().await.unwrap().unwrap_err();
        assert_eq!(Instant::now() - started, Duration::from_millis(300));
        assert!(matches!(
            find_rejection(&*cut).map(|r| r.kind()),
            Some(crate::RejectionKind::DeadlineExceeded)
        ));
        assert_eq!(rec.events(), ["errored"]);
        // The inner body is dropped (the stream to the dependency closed), and the
        // body stays ended.
        assert_eq!(Arc::strong_count(&alive), 1);
        assert!(body.frame().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn frames_buffered_before_the_deadline_are_not_read_past_it() {
        use crate::Deadline;
        use tokio::time::Instant;
        let frames: Frames = vec![
            Ok(Frame::data(Bytes::from_static(b"a"))),
            Ok(Frame::data(Bytes::from_static(b"b"))),
        ];
        let deadline = Deadline::after(Instant::now(), Duration::from_millis(100));
        let mut body = BoundedBody::new(stream(frames), Some(deadline));
        assert!(body.frame().await.unwrap().is_ok());
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(body.frame().await.unwrap().is_err());
        assert!(body.is_expired());
        assert!(body.is_end_stream());
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_ends_in_time_or_has_no_deadline_is_the_inner_body() {
        use crate::Deadline;
        use tokio::time::Instant;
        let deadline = Deadline::after(Instant::now(), Duration::from_millis(100));
        let body = BoundedBody::new(Full::new(Bytes::from_static(b"quote")), Some(deadline));
        assert_eq!(body.deadline(), Some(deadline));
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"quote");
        let mut unbounded = BoundedBody::new(
            stream(vec![Ok(Frame::data(Bytes::from_static(b"x")))]),
            None,
        );
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(unbounded.frame().await.unwrap().is_ok());
        assert!(unbounded.frame().await.is_none());
        assert!(!unbounded.is_expired());
    }
}
