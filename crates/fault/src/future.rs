//! The response future: the inner call as it is, held back by an added latency,
//! an injected answer or error ready at once, or a hang until its bound.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use seawall_core::{BoxError, Deadline};
use tokio::time::{Instant, Sleep};

use crate::error::Injected;
use crate::fault::Fault;
use crate::requests::Responses;

pin_project! {
    /// The response future of a [`FaultService`](crate::FaultService). When nothing
    /// is injected it is the inner future and a clone of the (zero-sized for
    /// [`AnyRequest`](crate::AnyRequest)) request kind; no timer, no allocation.
    pub struct FaultFuture<F, Res, R>
    where
        R: Responses<Res>,
    {
        #[pin]
        state: State<F, R::Response>,
        requests: R,
        _response: PhantomData<fn() -> Res>,
    }
}

impl<F, Res, R> std::fmt::Debug for FaultFuture<F, Res, R>
where
    R: Responses<Res>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultFuture").finish_non_exhaustive()
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, Out> {
        Pass {
            #[pin]
            inner: F,
        },
        // The inner call runs; its answer is marked, its body faulted, and with a
        // latency held back for `delay` once it has come.
        Faulted {
            #[pin]
            inner: F,
            fault: Fault,
            policy: Arc<str>,
            held: Option<Result<Out, BoxError>>,
            sleep: Option<Pin<Box<Sleep>>>,
        },
        Ready {
            out: Option<Result<Out, BoxError>>,
        },
        Hang {
            sleep: Pin<Box<Sleep>>,
            policy: Arc<str>,
        },
    }
}

impl<F, Res, R: Responses<Res>> FaultFuture<F, Res, R> {
    fn with(state: State<F, R::Response>, requests: R) -> Self {
        Self {
            state,
            requests,
            _response: PhantomData,
        }
    }

    pub(crate) fn pass(inner: F, requests: R) -> Self {
        Self::with(State::Pass { inner }, requests)
    }

    pub(crate) fn answer(answer: R::Response, requests: R) -> Self {
        Self::with(
            State::Ready {
                out: Some(Ok(answer)),
            },
            requests,
        )
    }

    /// A transport error at once, or a hang until the caller's deadline or the
    /// fault's bound, whichever comes first.
    pub(crate) fn fail(fault: &Fault, policy: Arc<str>, requests: R) -> Self {
        use std::io::ErrorKind;
        let kind = fault.kind();
        let state = match fault {
            Fault::Hang { at_most } => {
                let now = Instant::now();
                let bound = now.checked_add(*at_most).unwrap_or(now);
                let until = Deadline::current().map_or(bound, |d| d.instant().min(bound));
                State::Hang {
                    sleep: Box::pin(tokio::time::sleep_until(until)),
                    policy,
                }
            }
            _ => {
                let (io, what) = if kind == crate::FaultKind::Refused {
                    (
                        ErrorKind::ConnectionRefused,
                        "connection refused (injected)",
                    )
                } else {
                    (ErrorKind::ConnectionReset, "connection reset (injected)")
                };
                let err = Injected::new(kind, policy, std::io::Error::new(io, what));
                State::Ready {
                    out: Some(Err(Box::new(err))),
                }
            }
        };
        Self::with(state, requests)
    }

    pub(crate) fn call_with(inner: F, fault: Fault, policy: Arc<str>, requests: R) -> Self {
        Self::with(
            State::Faulted {
                inner,
                fault,
                policy,
                held: None,
                sleep: None,
            },
            requests,
        )
    }
}

impl<F, Res, E, R> Future for FaultFuture<F, Res, R>
where
    F: Future<Output = Result<Res, E>>,
    E: Into<BoxError>,
    R: Responses<Res>,
{
    type Output = Result<R::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let requests = &*this.requests;
        match this.state.project() {
            StateProj::Pass { inner } => {
                let res = ready!(inner.poll(cx)).map_err(Into::into)?;
                Poll::Ready(Ok(requests.pass(res, None)))
            }
            StateProj::Faulted {
                inner,
                fault,
                policy,
                held,
                sleep,
            } => {
                if held.is_none() {
                    let out = ready!(inner.poll(cx))
                        .map(|res| requests.pass(res, Some((&*fault, &*policy))))
                        .map_err(Into::into);
                    let delay = match fault {
                        Fault::Latency { delay, .. } => *delay,
                        _ => Duration::ZERO,
                    };
                    if delay.is_zero() {
                        return Poll::Ready(out);
                    }
                    *held = Some(out);
                    *sleep = Some(Box::pin(tokio::time::sleep(delay)));
                }
                if let Some(s) = sleep.as_mut() {
                    ready!(s.as_mut().poll(cx));
                }
                Poll::Ready(held.take().unwrap_or_else(|| Err(spent().into())))
            }
            StateProj::Ready { out } => {
                Poll::Ready(out.take().unwrap_or_else(|| Err(spent().into())))
            }
            StateProj::Hang { sleep, policy } => {
                ready!(sleep.as_mut().poll(cx));
                let err = Injected::new(
                    crate::FaultKind::Hang,
                    policy.clone(),
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no answer: an injected hang reached its bound",
                    ),
                );
                Poll::Ready(Err(Box::new(err)))
            }
        }
    }
}

/// Polled again after it answered: a caller's bug, answered with an error rather
/// than a panic.
fn spent() -> &'static str {
    "fault future polled after it completed"
}
