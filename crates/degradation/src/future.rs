//! The response future: waits for the chosen level's readiness, calls it, and reports
//! the classified outcome to the machine once.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use seawall_core::{BoxError, Classify};
use tower_service::Service;

use crate::handle::Shared;
use crate::machine::Ticket;
use crate::service::{Annotate, LevelService, ServedBy};

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
    /// The future returned by [`Degradation`](crate::Degradation).
    ///
    /// Records the classified outcome once, when it completes: a dropped future
    /// records nothing (a degradation level holds no slot to give back).
    pub struct ResponseFuture<S, Req, Res, K, X>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S, Req, Res>,
        ticket: Ticket,
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
            .field("ticket", &self.ticket)
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
            state,
            ticket,
            shared,
            classifier,
            extensions,
        }
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
        let result = loop {
            match this.state.as_mut().project() {
                StateProj::WaitInner { svc, req } => {
                    if let Err(e) = ready!(svc.poll_ready(cx)) {
                        break Err(e.into());
                    }
                    let Some(req) = req.take() else {
                        break Err(internal("request already sent"));
                    };
                    let fut = svc.call(req);
                    this.state.set(State::Inner { fut });
                }
                StateProj::WaitLower { svc, req } => {
                    if let Err(e) = ready!(svc.poll_ready(cx)) {
                        break Err(e);
                    }
                    let Some(req) = req.take() else {
                        break Err(internal("request already sent"));
                    };
                    let fut = svc.call(req);
                    this.state.set(State::Lower { fut });
                }
                StateProj::Inner { fut } => break ready!(fut.poll(cx)).map_err(Into::into),
                StateProj::Lower { fut } => break ready!(fut.as_mut().poll(cx)),
                StateProj::Failed { error } => {
                    break Err(error
                        .take()
                        .unwrap_or_else(|| internal("polled after completion")));
                }
                StateProj::Done => return Poll::Ready(Err(internal("polled after completion"))),
            }
        };
        this.state.set(State::Done);
        let outcome = this
            .classifier
            .classify(result.as_ref().map_err(|e| &**e as &(dyn Error + 'static)));
        let ticket = *this.ticket;
        this.shared.record(ticket, outcome);
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
