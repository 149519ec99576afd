//! The layer's response future: a concrete type that polls the primary and, only
//! when a trigger fires, runs the fallback.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use seawall_core::{BoxError, Classify, Deadline};

use crate::error::Unavailable;
use crate::machine::{Fired, Trigger};
use crate::mode::{ErrorOrigin, Mode};
use crate::plan::Plan;
use crate::request::FallbackRequest;
use crate::state::Shared;

pin_project! {
    #[project = StateProj]
    #[project_replace = StateOwned]
    enum State<PF, FF, K> {
        Primary {
            #[pin]
            fut: PF,
            captured: K,
            deadline: Option<Deadline>,
        },
        // The primary was not called: forced, or its `poll_ready` failed (the error).
        Skipped {
            error: Option<BoxError>,
            captured: K,
            deadline: Option<Deadline>,
        },
        Fallback {
            #[pin]
            fut: FF,
            trigger: Trigger,
            retry_after: Option<Duration>,
        },
        Done,
    }
}

pin_project! {
    /// The response future of [`Fallback`](crate::Fallback).
    ///
    /// While the primary answers, it is the primary's future plus the captured data:
    /// no allocation, no clock read, no counter. The fallback's future is created
    /// only when a trigger fires. Polling it again after it completed returns
    /// `Pending`.
    pub struct ResponseFuture<PF, Cap, P, C, M, K>
    where
        P: Plan<K>,
    {
        #[pin]
        state: State<PF, P::Future, K>,
        shared: Arc<Shared<Cap, P, C, M>>,
    }
}

impl<PF, Cap, P, C, M, K> std::fmt::Debug for ResponseFuture<PF, Cap, P, C, M, K>
where
    P: Plan<K>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Primary { .. } => "primary",
            State::Skipped { .. } => "skipped",
            State::Fallback { .. } => "fallback",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl<PF, Cap, P, C, M, K> ResponseFuture<PF, Cap, P, C, M, K>
where
    P: Plan<K>,
{
    #[inline]
    pub(crate) fn primary(
        fut: PF,
        captured: K,
        deadline: Option<Deadline>,
        shared: Arc<Shared<Cap, P, C, M>>,
    ) -> Self {
        Self {
            state: State::Primary {
                fut,
                captured,
                deadline,
            },
            shared,
        }
    }

    pub(crate) fn skipped(
        error: Option<BoxError>,
        captured: K,
        deadline: Option<Deadline>,
        shared: Arc<Shared<Cap, P, C, M>>,
    ) -> Self {
        Self {
            state: State::Skipped {
                error,
                captured,
                deadline,
            },
            shared,
        }
    }
}

/// What the primary did.
enum Primary<Res> {
    Answered(Res),
    Failed(BoxError),
    Forced,
}

/// What happens next.
enum Next<Out> {
    Fallback(Fired, FallbackRequestParts),
    Done(Out),
}

struct FallbackRequestParts {
    error: Option<BoxError>,
}

impl<PF, Res, E, Cap, P, C, M, K> Future for ResponseFuture<PF, Cap, P, C, M, K>
where
    PF: Future<Output = Result<Res, E>>,
    E: Into<BoxError>,
    P: Plan<K>,
    C: Classify<Res>,
    M: Mode<Res, P::Response>,
{
    type Output = Result<M::Response, M::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut this = self.as_mut().project();
            let shared = &**this.shared;
            let primary = match this.state.as_mut().project() {
                StateProj::Primary { fut, .. } => match ready!(fut.poll(cx)) {
                    Ok(res) => Primary::Answered(res),
                    Err(e) => Primary::Failed(e.into()),
                },
                StateProj::Skipped { error, .. } => match error.take() {
                    Some(e) => Primary::Failed(e),
                    None => Primary::Forced,
                },
                StateProj::Fallback {
                    fut,
                    trigger,
                    retry_after,
                } => {
                    let (trigger, retry_after) = (*trigger, *retry_after);
                    let out = match ready!(fut.poll(cx)) {
                        Ok((answer, step)) => {
                            let served = shared.rt.served(step, trigger);
                            Ok(shared.mode.served(answer, served))
                        }
                        Err(e) => {
                            let mut e = shared.plan.conclude(e, trigger, &shared.rt);
                            if let Some(u) = e.downcast_mut::<Unavailable>() {
                                u.set_retry_after(retry_after);
                            }
                            shared
                                .mode
                                .fail(e, ErrorOrigin::Fallback, retry_after, &shared.rt)
                        }
                    };
                    this.state.set(State::Done);
                    return Poll::Ready(out);
                }
                StateProj::Done => return Poll::Pending,
            };

            // The primary is done: decide.
            let next = match primary {
                Primary::Answered(res) => match shared.triggers.decide_response(&res) {
                    Some(fired) if shared.rt.enabled() => {
                        drop(res);
                        Next::Fallback(fired, FallbackRequestParts { error: None })
                    }
                    _ => Next::Done(Ok(shared.mode.primary(res))),
                },
                Primary::Failed(e) => {
                    let fired = if shared.rt.enabled() {
                        shared
                            .triggers
                            .decide_error::<Res>(shared.rt.rejections(), &*e)
                    } else {
                        None
                    };
                    match fired {
                        Some(fired) => {
                            Next::Fallback(fired, FallbackRequestParts { error: Some(e) })
                        }
                        None => {
                            shared.rt.passed_through(&*e);
                            Next::Done(shared.mode.fail(
                                e,
                                ErrorOrigin::PassedThrough,
                                None,
                                &shared.rt,
                            ))
                        }
                    }
                }
                Primary::Forced => Next::Fallback(
                    Fired {
                        trigger: Trigger::Forced,
                        retry_after: None,
                    },
                    FallbackRequestParts { error: None },
                ),
            };

            match next {
                Next::Done(out) => {
                    this.state.set(State::Done);
                    return Poll::Ready(out);
                }
                Next::Fallback(fired, parts) => {
                    let (captured, deadline) =
                        match this.state.as_mut().project_replace(State::Done) {
                            StateOwned::Primary {
                                captured, deadline, ..
                            }
                            | StateOwned::Skipped {
                                captured, deadline, ..
                            } => (captured, deadline),
                            StateOwned::Fallback { .. } | StateOwned::Done => return Poll::Pending,
                        };
                    shared.rt.triggered(fired.trigger);
                    // `call` may have run in another task (tower's `Buffer`): the
                    // caller's deadline is current here.
                    let deadline = deadline.or_else(|| {
                        shared
                            .uses_deadline
                            .then(seawall_core::Deadline::current)
                            .flatten()
                    });
                    let req = FallbackRequest::new(captured, fired.trigger, parts.error, deadline);
                    let fut = shared.plan.run(req, &shared.rt);
                    this.state.set(State::Fallback {
                        fut,
                        trigger: fired.trigger,
                        retry_after: fired.retry_after,
                    });
                }
            }
        }
    }
}
