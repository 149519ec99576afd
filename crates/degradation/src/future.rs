//! The response future: waits for the chosen level's readiness, calls it, and reports
//! the classified outcome to the machine once.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use seawall_core::{on_unwind, BoxError, Classify, HasExtensions, Outcome};
use tower::util::BoxCloneSyncService;
use tower_service::Service;

use crate::handle::{Level, Shared};
use crate::machine::Ticket;

/// A lower level's service, with its type erased.
pub type LevelService<Req, Res> = BoxCloneSyncService<Req, Res, BoxError>;

/// The level in force when a request arrived, inserted into the request's extensions
/// when the layer was built with
/// [`level_extensions`](crate::DegradationBuilder::level_extensions).
///
/// During a recovery probe this is the level in force, not the level above that serves
/// the probe (see [`ServedBy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLevel(pub Level);

/// The level that served a response, recorded on the response's extensions when the
/// layer was built with
/// [`level_extensions`](crate::DegradationBuilder::level_extensions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedBy {
    /// The level that answered.
    pub level: Level,
    /// Whether the request was a recovery probe of the level above the one in force.
    pub probe: bool,
}

/// Responses that carry [`http::Extensions`], where [`ServedBy`] is recorded.
///
/// Implemented for [`http::Response`]. The request side uses seawall-core's
/// [`HasExtensions`].
pub trait ResponseExtensions {
    /// The response's extensions, mutably, if it has any.
    fn extensions_mut(&mut self) -> Option<&mut http::Extensions>;
}

impl<B> ResponseExtensions for http::Response<B> {
    fn extensions_mut(&mut self) -> Option<&mut http::Extensions> {
        Some(http::Response::extensions_mut(self))
    }
}

/// What the service writes into request and response extensions: nothing
/// ([`NoExtensions`], the default, so any request type works and no call allocates)
/// or the levels ([`WithLevelExtensions`]).
pub trait Annotate<Req, Res>: Clone {
    /// Called with each request before it is handed to a level.
    fn request(&self, req: &mut Req, current: impl FnOnce() -> Level);
    /// Called with each successful response.
    fn response(&self, res: &mut Res, served: impl FnOnce() -> ServedBy);
}

/// Writes nothing into extensions (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoExtensions;

impl<Req, Res> Annotate<Req, Res> for NoExtensions {
    #[inline]
    fn request(&self, _req: &mut Req, _current: impl FnOnce() -> Level) {}
    #[inline]
    fn response(&self, _res: &mut Res, _served: impl FnOnce() -> ServedBy) {}
}

/// Inserts [`CurrentLevel`] into each request's extensions and [`ServedBy`] into each
/// response's. Each insert allocates, which is why it is opt-in.
#[derive(Debug, Clone, Copy, Default)]
pub struct WithLevelExtensions;

impl<Req: HasExtensions, Res: ResponseExtensions> Annotate<Req, Res> for WithLevelExtensions {
    fn request(&self, req: &mut Req, current: impl FnOnce() -> Level) {
        if let Some(ext) = req.extensions_mut() {
            ext.insert(CurrentLevel(current()));
        }
    }

    fn response(&self, res: &mut Res, served: impl FnOnce() -> ServedBy) {
        if let Some(ext) = res.extensions_mut() {
            ext.insert(served());
        }
    }
}

type LevelFuture<Res> = Pin<Box<dyn Future<Output = Result<Res, BoxError>> + Send + 'static>>;

pin_project! {
    /// Where a request is.
    #[project = StateProj]
    pub(crate) enum State<S, Req, Res>
    where
        S: Service<Req>,
    {
        // The best level, once its instance (taken from the service) is ready.
        WaitInner { svc: S, req: Option<Req> },
        // A lower level, once its clone is ready.
        WaitLower { svc: LevelService<Req, Res>, req: Option<Req> },
        Inner { #[pin] fut: S::Future },
        Lower { fut: LevelFuture<Res> },
        Failed { error: Option<BoxError> },
        Done,
    }
}

pin_project! {
    /// A request on its way through its chosen level, under its ticket: the part
    /// both response futures share.
    pub(crate) struct Driving<S, Req, Res>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S, Req, Res>,
        ticket: Ticket,
        panicked: bool,
    }
}

impl<S, Req, Res> Driving<S, Req, Res>
where
    S: Service<Req>,
{
    pub(crate) fn new(state: State<S, Req, Res>, ticket: Ticket) -> Self {
        Self {
            state,
            ticket,
            panicked: false,
        }
    }

    pub(crate) fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// Why there is nothing left to drive, if the level has answered or panicked.
    fn finished(&self) -> Option<&'static str> {
        if self.panicked {
            Some("polled after the level panicked")
        } else if matches!(self.state, State::Done) {
            Some("polled after completion")
        } else {
            None
        }
    }
}

impl<S, Req, Res> Driving<S, Req, Res>
where
    S: Service<Req, Response = Res>,
    S::Error: Into<BoxError>,
{
    /// Polls the level until it answers. A panic in the level's service is its
    /// failure, recorded in `shared` while it unwinds. Polled again after that, or
    /// after the answer, it is `Err(why)`: the outcome was recorded then, so the
    /// caller answers `why` and records nothing (a future polled again after it
    /// completed would otherwise count its request a second time).
    pub(crate) fn poll_level(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        shared: &Shared,
    ) -> Poll<Result<Result<Res, BoxError>, &'static str>> {
        if let Some(after) = self.finished() {
            return Poll::Ready(Err(after));
        }
        let this = self.project();
        let ticket = *this.ticket;
        let panicked = this.panicked;
        let mut state = this.state;
        let polled = on_unwind(
            || drive(state.as_mut(), cx),
            || {
                *panicked = true;
                shared.record(ticket, Outcome::Failure, false);
            },
        );
        let result = ready!(polled);
        state.set(State::Done);
        Poll::Ready(Ok(result))
    }
}

pin_project! {
    /// The future returned by [`Degradation`](crate::Degradation).
    ///
    /// Records the classified outcome once, when it completes: a dropped future
    /// records nothing (a degradation level holds no slot to give back). A panic in
    /// the level's service (its `poll_ready`, `call` or future) is recorded as a
    /// failure of that level while it unwinds, and the future then answers an error
    /// if polled again.
    pub struct ResponseFuture<S, Req, Res, K, X>
    where
        S: Service<Req>,
    {
        #[pin]
        driving: Driving<S, Req, Res>,
        shared: Arc<Shared>,
        classifier: K,
        extensions: X,
    }
}

impl<S, Req, Res, K, X> fmt::Debug for ResponseFuture<S, Req, Res, K, X>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("ticket", &self.driving.ticket())
            .finish_non_exhaustive()
    }
}

impl<S, Req, Res, K, X> ResponseFuture<S, Req, Res, K, X>
where
    S: Service<Req>,
{
    pub(crate) fn new(
        state: State<S, Req, Res>,
        ticket: Ticket,
        shared: Arc<Shared>,
        classifier: K,
        extensions: X,
    ) -> Self {
        Self {
            driving: Driving::new(state, ticket),
            shared,
            classifier,
            extensions,
        }
    }
}

#[cfg(feature = "http")]
impl<S, Req, Res, K, X> ResponseFuture<S, Req, Res, K, X>
where
    S: Service<Req>,
{
    /// The parts of a future not yet polled, for a holder that reports later (a
    /// response body): the request under its ticket, the shared state, the
    /// classifier and what is written into extensions.
    pub(crate) fn into_parts(self) -> (Driving<S, Req, Res>, Arc<Shared>, K, X) {
        (self.driving, self.shared, self.classifier, self.extensions)
    }
}

/// An error that means a bug in this crate, reported instead of panicking.
#[derive(Debug)]
struct Internal(&'static str);

impl fmt::Display for Internal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seawall-degradation: {}", self.0)
    }
}

impl Error for Internal {}

pub(crate) fn internal(what: &'static str) -> BoxError {
    Box::new(Internal(what))
}

/// Drives the chosen level: its readiness, its call, its future.
fn drive<S, Req, Res>(
    mut state: Pin<&mut State<S, Req, Res>>,
    cx: &mut Context<'_>,
) -> Poll<Result<Res, BoxError>>
where
    S: Service<Req, Response = Res>,
    S::Error: Into<BoxError>,
{
    loop {
        match state.as_mut().project() {
            StateProj::WaitInner { svc, req } => {
                if let Err(e) = ready!(svc.poll_ready(cx)) {
                    return Poll::Ready(Err(e.into()));
                }
                let Some(req) = req.take() else {
                    return Poll::Ready(Err(internal("request already sent")));
                };
                let fut = svc.call(req);
                state.set(State::Inner { fut });
            }
            StateProj::WaitLower { svc, req } => {
                if let Err(e) = ready!(svc.poll_ready(cx)) {
                    return Poll::Ready(Err(e));
                }
                let Some(req) = req.take() else {
                    return Poll::Ready(Err(internal("request already sent")));
                };
                let fut = svc.call(req);
                state.set(State::Lower { fut });
            }
            StateProj::Inner { fut } => return fut.poll(cx).map_err(Into::into),
            StateProj::Lower { fut } => return fut.as_mut().poll(cx),
            StateProj::Failed { error } => {
                return Poll::Ready(Err(error
                    .take()
                    .unwrap_or_else(|| internal("polled after completion"))));
            }
            StateProj::Done => return Poll::Ready(Err(internal("polled after completion"))),
        }
    }
}

impl<S, Req, Res, K, X> Future for ResponseFuture<S, Req, Res, K, X>
where
    S: Service<Req, Response = Res>,
    S::Error: Into<BoxError>,
    K: Classify<Res>,
    X: Annotate<Req, Res>,
{
    type Output = Result<Res, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let result = match ready!(this.driving.as_mut().poll_level(cx, this.shared)) {
            Ok(result) => result,
            Err(after) => return Poll::Ready(Err(internal(after))),
        };
        let judged = result
            .as_ref()
            .map_err(|e| seawall_core::ErrorRef::from(&**e));
        let outcome = this.classifier.classify(judged);
        let rehearsal = seawall_core::is_rehearsal(this.classifier.reason(judged, outcome));
        let ticket = this.driving.ticket();
        this.shared.record(ticket, outcome, rehearsal);
        let mut result = result;
        if let Ok(res) = &mut result {
            let shared = &**this.shared;
            this.extensions.response(res, || ServedBy {
                level: shared.level_of(ticket.level),
                probe: ticket.probe,
            });
        }
        Poll::Ready(result)
    }
}
