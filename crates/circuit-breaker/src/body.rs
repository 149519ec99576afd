//! Holding a call's ticket until its response body ends, for streamed responses.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http_body::Body;
use pin_project_lite::pin_project;
use seawall_core::http::{
    guard_response, BodyEnd, BoundedBody, ClassifyBodyEnd, Guarded, OnBodyEnd,
};
use seawall_core::{
    is_rehearsal, on_unwind, BoundedByCurrent, BoxError, Classify, ClassifyRequest, Deadline,
    Outcome,
};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use crate::future::{polled_after_completion, Guard, ResponseFuture};
use crate::handle::Handle;
use crate::keyed::{KeyedCircuitBreaker, KeyedCircuitBreakerLayer, KeyedHandle};
use crate::layer::CircuitBreakerLayer;
use crate::machine::{Report, Ticket};
use crate::service::CircuitBreaker;
use crate::state::Lane;

impl<C> CircuitBreakerLayer<C> {
    /// The same breaker, but a call whose response looks healthy is reported when
    /// the response **body** ends, so a gRPC stream that fails after its first
    /// messages (its `grpc-status` in the trailers) counts as a failure, and a
    /// body still streaming when the request's deadline passes is cut there and
    /// recorded as a timeout failure. Its services return
    /// `http::Response<`[`HeldBody`]`<B, _>>`. See [`UntilBodyEnd`].
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn hold_until_body_end(self) -> UntilBodyEndLayer<C> {
        UntilBodyEndLayer {
            layer: self,
            hold: true,
        }
    }
}

/// Applies a circuit breaker that reports each call when its response body ends;
/// made by [`CircuitBreakerLayer::hold_until_body_end`].
///
/// It keeps the breaker of the layer it was made from: services of every mode
/// built from that layer, and all their clones, share one breaker.
pub struct UntilBodyEndLayer<C> {
    layer: CircuitBreakerLayer<C>,
    hold: bool,
}

impl<C> UntilBodyEndLayer<C> {
    /// Whether the services this layer builds hold each call until the response
    /// body ends (`true`, the default) or judge it at the response's headers as
    /// [`CircuitBreakerLayer`] does (`false`), with the same response type either
    /// way, so the choice can come from configuration (a policy file's
    /// `hold = "response"`) without changing the stack's type. Released at the
    /// headers, the body is not bounded by the request's deadline either.
    #[must_use]
    pub fn hold_body(mut self, hold: bool) -> Self {
        self.hold = hold;
        self
    }

    /// The operator's handle on the breaker.
    pub fn handle(&self) -> Handle {
        self.layer.handle()
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        self.layer.name()
    }
}

impl<C: Clone> Clone for UntilBodyEndLayer<C> {
    fn clone(&self) -> Self {
        Self {
            layer: self.layer.clone(),
            hold: self.hold,
        }
    }
}

impl<C: fmt::Debug> fmt::Debug for UntilBodyEndLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilBodyEndLayer")
            .field("layer", &self.layer)
            .field("hold", &self.hold)
            .finish()
    }
}

impl<S, C: Clone> Layer<S> for UntilBodyEndLayer<C> {
    type Service = UntilBodyEnd<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        UntilBodyEnd {
            inner: self.layer.layer(inner),
            hold: self.hold,
        }
    }
}

/// A [`CircuitBreaker`] over `http::Response<B>` that reports a call when its
/// response body ends, not when the response arrives.
///
/// **Clients hold, servers choose.** For a client stack (a hyper-util `Client`, a
/// tonic `Channel`) hold until the body ends, with the bulkhead's
/// `hold_until_body_end` too: the connection to the dependency is busy, and its
/// answer can still fail, until then. This is what seawall's examples do. For a
/// server route that streams to its own caller (server-sent events, long polling,
/// a slow reader), holding would let the caller's reading pace pin a slot and a
/// ticket; keep the default there, which ends the call at the response's headers.
///
/// - **Decided by the headers first.** The classifier sees the response as in the
///   default mode; a failure there (an HTTP `503`, a trailers-only gRPC response
///   with `grpc-status` in its headers), an ignored outcome, or a body that has
///   already ended is reported at once, exactly as in the default mode.
/// - **Otherwise held to the end of the body.** The ticket moves into the body
///   ([`HeldTicket`]), and the classifier's [`ClassifyBodyEnd`] gives the verdict
///   when the body ends: [`GrpcStatus`](seawall_core::GrpcStatus) reads the
///   trailers' `grpc-status`; an error from the body is a failure. A body dropped
///   before its end reports the call **cancelled**, as a dropped future does: not
///   recorded, its probe slot freed.
/// - **A long stream is judged by what it has shown.** A half-open probe whose
///   body is still streaming without error when its half-open timeout comes is
///   judged a success then, not failed: the dependency answered and has kept
///   answering. Otherwise a stream that outlives the timeout (a subscription, a
///   server-streaming RPC that lasts minutes) would fail a healthy dependency and
///   keep the breaker half-open for as long as it lasts. Its verdict is given
///   once: its end is still counted as a call (as stale), but never acted on. A
///   probe still waiting for its response at the timeout fails as in the default
///   mode.
/// - **Slow calls** are measured to the response, not to the end of the body: a
///   long stream is not a slow call.
/// - Reasons ([`Classify::reason`]) are counted for calls reported at the
///   response; a held call's verdict comes from its body and gives none.
/// - **The request's deadline bounds the body too.** A deadline current when the
///   response arrives (set by a `DeadlineLayer` further out) also bounds its body
///   ([`BoundedBody`]): a body still streaming when it passes ends with an error
///   whose source chain holds a [`DeadlineExceeded`](crate::DeadlineExceeded), the
///   body to the dependency is dropped (its stream closed), and the call is
///   recorded as a **timeout failure**, as a response that came too late is in
///   the default mode. Any body error seen at or after the deadline counts as
///   that timeout. Why: a client's budget is for the whole answer (gRPC's
///   deadline covers the stream), and a body read past it is work nobody waits
///   for that holds a connection and, under a bulkhead held until the body
///   ends, a slot. A stream meant to outlive a request budget (a subscription)
///   is given no `DeadlineLayer`, or one with a budget for the whole stream.
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, StreamBody};
/// use http_body::Frame;
/// use seawall_circuit_breaker::CircuitBreakerLayer;
/// use seawall_core::{BoxError, GrpcStatus};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), BoxError> {
/// let layer = CircuitBreakerLayer::builder("quotes-stream")
///     .consecutive_failures(1)
///     .classifier(GrpcStatus::default())
///     .build()?
///     .hold_until_body_end();
/// let handle = layer.handle();
/// // A gRPC server that streams one message, then fails with UNAVAILABLE in the trailers.
/// let server = service_fn(|_req: http::Request<()>| async {
///     let mut trailers = http::HeaderMap::new();
///     trailers.insert("grpc-status", http::HeaderValue::from_static("14"));
///     let frames = vec![
///         Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"quote 1"))),
///         Ok(Frame::trailers(trailers)),
///     ];
///     Ok::<_, BoxError>(http::Response::new(StreamBody::new(futures_util::stream::iter(frames))))
/// });
/// let response = layer.layer(server).oneshot(http::Request::new(())).await?;
/// // The headers said 200: nothing is reported until the body ends...
/// assert_eq!(handle.snapshot().counters.failures, 0);
/// let _ = response.into_body().collect().await?;
/// // ...and its trailers said UNAVAILABLE: a failure, and the breaker opens.
/// assert_eq!(handle.snapshot().counters.failures, 1);
/// assert_eq!(handle.state(), seawall_circuit_breaker::State::Open);
/// # Ok(())
/// # }
/// ```
///
/// **What `Clone` shares:** the breaker, as [`CircuitBreaker`].
pub struct UntilBodyEnd<S, C> {
    inner: CircuitBreaker<S, C>,
    hold: bool,
}

impl<S, C> UntilBodyEnd<S, C> {
    /// The operator's handle on the breaker.
    pub fn handle(&self) -> Handle {
        self.inner.handle()
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        self.inner.get_ref()
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        self.inner.get_mut()
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner.into_inner()
    }
}

impl<S: Clone, C: Clone> Clone for UntilBodyEnd<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            hold: self.hold,
        }
    }
}

impl<S: fmt::Debug, C: fmt::Debug> fmt::Debug for UntilBodyEnd<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UntilBodyEnd")
            .field("inner", &self.inner)
            .field("hold", &self.hold)
            .finish()
    }
}

impl<S, C, Req, B> Service<Req> for UntilBodyEnd<S, C>
where
    S: Service<Req, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    C: ClassifyRequest<Req, http::Response<B>>,
    C::Classifier: ClassifyBodyEnd,
    B: Body,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<HeldBody<B, C::Classifier>>;
    type Error = BoxError;
    type Future = UntilBodyEndFuture<S::Future, C::Classifier>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        UntilBodyEndFuture::new(self.inner.call(req), self.hold)
    }
}

/// The response body of a breaker held until the body ends ([`UntilBodyEnd`], and
/// the keyed breaker's `hold_until_body_end`): the dependency's body `B`, bounded by
/// the request's deadline ([`BoundedBody`], its error boxed), holding the call's
/// ticket ([`HeldTicket`]) until it ends.
pub type HeldBody<B, C> = Guarded<BoundedBody<B>, HeldTicket<C>>;

pin_project! {
    /// The response future of [`UntilBodyEnd`]: as [`ResponseFuture`], but a
    /// healthy-looking response carries the call's ticket in its body.
    pub struct UntilBodyEndFuture<F, C> {
        #[pin]
        kind: Kind<F, C>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, C> {
        Admitted {
            #[pin]
            future: BoundedByCurrent<F>,
            held: Option<(Guard, C)>,
            // `false`: judged at the headers, as the plain breaker does.
            hold: bool,
        },
        Rejected {
            #[pin]
            future: ResponseFuture<F, C>,
        },
    }
}

impl<F, C> UntilBodyEndFuture<F, C> {
    /// Holds the call of `future` (made by a breaker's `call`) until its body ends.
    pub(crate) fn new(future: ResponseFuture<F, C>, hold: bool) -> Self {
        let kind = match future.into_admitted() {
            Ok((future, guard, classifier)) => Kind::Admitted {
                future,
                held: Some((guard, classifier)),
                hold,
            },
            Err(rejected) => Kind::Rejected { future: rejected },
        };
        Self { kind }
    }
}

impl<F, C> fmt::Debug for UntilBodyEndFuture<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Admitted { .. } => "admitted",
            Kind::Rejected { .. } => "rejected",
        };
        f.debug_struct("UntilBodyEndFuture")
            .field("kind", &kind)
            .finish()
    }
}

impl<F, C, B, E> Future for UntilBodyEndFuture<F, C>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    E: Into<BoxError>,
    C: Classify<http::Response<B>> + ClassifyBodyEnd,
    B: Body,
    B::Error: Into<BoxError>,
{
    type Output = Result<http::Response<HeldBody<B, C>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The request's deadline, in force while the response future is polled: it
        // bounds the body as well.
        let deadline = Deadline::current();
        match self.project().kind.project() {
            KindProj::Admitted { future, held, hold } => {
                let Some((guard, _)) = held.as_mut() else {
                    return Poll::Ready(Err(polled_after_completion()));
                };
                let polled = on_unwind(|| future.poll(cx), || guard.finish_panicked());
                let result = ready!(polled);
                let Some((mut guard, classifier)) = held.take() else {
                    return Poll::Ready(Err(polled_after_completion()));
                };
                Poll::Ready(match result {
                    Ok(Ok(response)) => {
                        let outcome = classifier.classify(Ok(&response));
                        if *hold && outcome == Outcome::Success && !response.body().is_end_stream()
                        {
                            // The body decides the outcome; whether a fault was
                            // injected is known now, from the response's mark.
                            let rehearsal = is_rehearsal(classifier.reason(Ok(&response), outcome));
                            let ticket = HeldTicket::hold(guard, classifier, deadline, rehearsal);
                            Ok(held_response(response, ticket, deadline))
                        } else {
                            guard.finish_classified(
                                outcome,
                                classifier.reason(Ok(&response), outcome),
                            );
                            // Released at the headers: the body is the caller's to bound.
                            let deadline = if *hold { deadline } else { None };
                            Ok(held_response(response, HeldTicket::released(), deadline))
                        }
                    }
                    Ok(Err(error)) => {
                        let error: BoxError = error.into();
                        let failed = seawall_core::ErrorRef::from(&*error);
                        let outcome = classifier.classify(Err(failed));
                        guard.finish_classified(outcome, classifier.reason(Err(failed), outcome));
                        Err(error)
                    }
                    Err(exceeded) => {
                        // The dependency had the call and the budget ran out: too slow.
                        guard.finish(Outcome::Failure, true);
                        Err(Box::new(exceeded))
                    }
                })
            }
            KindProj::Rejected { future } => {
                // A rejected call never answers with a response; mapped for the type.
                let response = ready!(future.poll(cx))?;
                Poll::Ready(Ok(held_response(
                    response,
                    HeldTicket::released(),
                    deadline,
                )))
            }
        }
    }
}

/// `response` with its body bounded by `deadline` and holding `ticket`. Every body
/// is bounded, a released one too: a bulkhead further out may be holding its slot
/// until that body ends.
fn held_response<B: Body, C: ClassifyBodyEnd>(
    response: http::Response<B>,
    ticket: HeldTicket<C>,
    deadline: Option<Deadline>,
) -> http::Response<HeldBody<B, C>>
where
    B::Error: Into<BoxError>,
{
    guard_response(
        response.map(|body| BoundedBody::new(body, deadline)),
        ticket,
    )
}

/// A call's ticket, held by its response body ([`Guarded`]) and reported to the
/// breaker exactly once: with the classifier's [`ClassifyBodyEnd`] verdict when the
/// body ends or fails, or as cancelled if the body is dropped first.
///
/// Empty (reports nothing) when the call was already reported from the response's
/// headers.
pub struct HeldTicket<C> {
    held: Option<Held<C>>,
}

struct Held<C> {
    breaker: Arc<Lane>,
    ticket: Ticket,
    /// Measured to the response: a long stream is not a slow call.
    slow: bool,
    classifier: C,
    /// The request's deadline, which bounds the body: an error from the body at or
    /// after it is a timeout.
    deadline: Option<Deadline>,
    /// The response carried an injected fault's mark.
    rehearsal: bool,
}

impl<C> HeldTicket<C> {
    fn released() -> Self {
        Self { held: None }
    }

    fn hold(guard: Guard, classifier: C, deadline: Option<Deadline>, rehearsal: bool) -> Self {
        let Some((breaker, ticket, started)) = guard.into_held() else {
            return Self::released();
        };
        let mut now = None;
        let mut clock = || *now.get_or_insert_with(Instant::now);
        let slow = started.is_timed() && breaker.is_slow(started, clock());
        // A probe: from now on it is judged by what it shows (see `UntilBodyEnd`).
        breaker.probe_streaming(ticket, clock);
        Self {
            held: Some(Held {
                breaker,
                ticket,
                slow,
                classifier,
                deadline,
                rehearsal,
            }),
        }
    }

    /// Whether the ticket is still to be reported (the body has not ended).
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }
}

impl<C> fmt::Debug for HeldTicket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldTicket")
            .field("held", &self.is_held())
            .finish()
    }
}

impl<C: ClassifyBodyEnd> OnBodyEnd for HeldTicket<C> {
    fn on_body_end(self, end: BodyEnd<'_>) {
        let Some(held) = self.held else {
            return;
        };
        if let BodyEnd::Dropped = end {
            held.breaker.cancel(held.ticket, Instant::now);
            return;
        }
        let timed_out = matches!(end, BodyEnd::Errored)
            && held.deadline.is_some_and(|d| d.is_expired(Instant::now()));
        let report = Report {
            // Past the deadline the dependency was too slow, whatever the
            // classifier makes of the error: a failure, as in the default mode.
            outcome: if timed_out {
                Outcome::Failure
            } else {
                held.classifier.classify_body_end(end)
            },
            slow: held.slow,
            timed_out,
            rehearsal: held.rehearsal,
        };
        held.breaker
            .complete(held.ticket, report, None, Instant::now);
    }
}

impl<K, F, C> KeyedCircuitBreakerLayer<K, F, C> {
    /// The same breakers, one per key, in the mode of
    /// [`CircuitBreakerLayer::hold_until_body_end`]: a call whose response looks
    /// healthy is reported to its key's breaker when the response **body** ends
    /// (its trailers, an error, or the request's deadline passing first), and a
    /// body dropped first is a cancelled call. Its services return
    /// `http::Response<`[`HeldBody`]`<B, _>>`. See [`UntilBodyEnd`] for the rules,
    /// which are the same for every key.
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn hold_until_body_end(self) -> KeyedUntilBodyEndLayer<K, F, C> {
        KeyedUntilBodyEndLayer { layer: self }
    }
}

/// Applies one breaker per key that reports each call when its response body
/// ends; made by [`KeyedCircuitBreakerLayer::hold_until_body_end`].
///
/// It keeps the map of breakers of the layer it was made from: services of every
/// mode built from that layer, and all their clones, share the same breakers.
pub struct KeyedUntilBodyEndLayer<K, F, C> {
    layer: KeyedCircuitBreakerLayer<K, F, C>,
}

impl<K, F, C> KeyedUntilBodyEndLayer<K, F, C> {
    /// The operator's handle on every key's breaker.
    pub fn handle(&self) -> KeyedHandle<K> {
        self.layer.handle()
    }
}

impl<K, F: Clone, C: Clone> Clone for KeyedUntilBodyEndLayer<K, F, C> {
    fn clone(&self) -> Self {
        Self {
            layer: self.layer.clone(),
        }
    }
}

impl<K, F, C: fmt::Debug> fmt::Debug for KeyedUntilBodyEndLayer<K, F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedUntilBodyEndLayer")
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, K, F: Clone, C: Clone> Layer<S> for KeyedUntilBodyEndLayer<K, F, C> {
    type Service = KeyedUntilBodyEnd<S, K, F, C>;

    fn layer(&self, inner: S) -> Self::Service {
        KeyedUntilBodyEnd {
            inner: self.layer.layer(inner),
        }
    }
}

/// A [`KeyedCircuitBreaker`] over `http::Response<B>` that reports each call to
/// its key's breaker when the response body ends, by the rules of
/// [`UntilBodyEnd`].
///
/// **What `Clone` shares:** the map of breakers, as [`KeyedCircuitBreaker`].
pub struct KeyedUntilBodyEnd<S, K, F, C> {
    inner: KeyedCircuitBreaker<S, K, F, C>,
}

impl<S, K, F, C> KeyedUntilBodyEnd<S, K, F, C> {
    /// The operator's handle on every key's breaker.
    pub fn handle(&self) -> KeyedHandle<K> {
        self.inner.handle()
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        self.inner.get_ref()
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner.into_inner()
    }
}

impl<S: Clone, K, F: Clone, C: Clone> Clone for KeyedUntilBodyEnd<S, K, F, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<S: fmt::Debug, K, F, C: fmt::Debug> fmt::Debug for KeyedUntilBodyEnd<S, K, F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedUntilBodyEnd")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<S, K, F, C, Req, B> Service<Req> for KeyedUntilBodyEnd<S, K, F, C>
where
    S: Service<Req, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    C: ClassifyRequest<Req, http::Response<B>>,
    C::Classifier: ClassifyBodyEnd,
    F: Fn(&Req) -> K,
    K: Hash + Eq + Clone + fmt::Display,
    B: Body,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<HeldBody<B, C::Classifier>>;
    type Error = BoxError;
    type Future = UntilBodyEndFuture<S::Future, C::Classifier>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        UntilBodyEndFuture::new(self.inner.call(req), true)
    }
}
