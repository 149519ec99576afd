//! The trivial services every subject wraps, and putting a subject in the state a
//! path needs (open, full, degraded).
//!
//! Each inner service sits behind a [`Thin`] adapter, so that in both modes the
//! measured layer polls another layer's future, as it does in a user's stack; the
//! bare row is that adapter over the same service, and is subtracted.

use std::any::Any;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use http::{Request, Response};
use tokio::runtime::Runtime;
use tower::{service_fn, Service};

use crate::harness::{by_hand, Req, Res, Thin};

/// The error of the failing inner service (zero-sized: boxing it does not allocate).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fail;

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dependency failed")
    }
}

impl std::error::Error for Fail {}

/// What the inner services are: cheap to clone and shareable across tasks.
pub(crate) trait Inner<E>:
    Service<Req, Response = Res, Error = E, Future: Send + 'static> + Clone + Send + Sync + 'static
{
}

impl<T, E> Inner<E> for T where
    T: Service<Req, Response = Res, Error = E, Future: Send + 'static>
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// Answers `Ok` at once.
pub(crate) fn ok() -> Thin<impl Inner<Infallible>> {
    Thin::new(service_fn(|_req: Req| {
        std::future::ready(Ok::<_, Infallible>(Response::new(())))
    }))
}

/// Fails at once.
pub(crate) fn failing() -> Thin<impl Inner<Fail>> {
    Thin::new(service_fn(|_req: Req| {
        std::future::ready(Err::<Res, _>(Fail))
    }))
}

/// Never completes: holds a permit for as long as its future lives.
pub(crate) fn pending() -> Thin<impl Inner<Infallible>> {
    Thin::new(service_fn(|_req: Req| {
        std::future::pending::<Result<Res, Infallible>>()
    }))
}

/// How many times a [`counted_failing`] future was polled: an open breaker must
/// not poll its inner service, and the harness checks that it does not.
pub(crate) static INNER_POLLS: AtomicUsize = AtomicUsize::new(0);

struct CountedFail;

impl Future for CountedFail {
    type Output = Result<Res, Fail>;
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        INNER_POLLS.fetch_add(1, Ordering::Relaxed);
        Poll::Ready(Err(Fail))
    }
}

/// Fails every call, counting the calls that really reach it (used to trip breakers).
pub(crate) fn counted_failing() -> Thin<impl Inner<Fail>> {
    Thin::new(service_fn(|_req: Req| CountedFail))
}

/// A service put in a state (open, full) with whatever keeps it there.
pub(crate) struct Prepared<S> {
    pub(crate) svc: S,
    pub(crate) keep: Vec<Box<dyn Any>>,
}

impl<S> Prepared<S> {
    pub(crate) fn plain(svc: S) -> Self {
        Prepared {
            svc,
            keep: Vec::new(),
        }
    }
}

/// Calls `svc` until `done()`; panics after 10 000 calls.
pub(crate) fn drive_until<S: Service<Req>>(rt: &Runtime, mut svc: S, done: impl Fn() -> bool) -> S {
    let mut cx = Context::from_waker(Waker::noop());
    let mut pending = 0;
    for _ in 0..10_000 {
        if done() {
            return svc;
        }
        by_hand(&mut svc, &mut cx, rt, &mut pending);
    }
    panic!("the state was not reached after 10000 calls");
}

/// Calls `svc` (whose inner is [`counted_failing`]) until a call no longer reaches
/// the inner service: the breaker is open.
pub(crate) fn trip<S: Service<Req>>(rt: &Runtime, svc: S) -> Prepared<S> {
    let last = std::cell::Cell::new(usize::MAX);
    let svc = drive_until(rt, svc, || {
        let polls = INNER_POLLS.load(Ordering::Relaxed);
        polls == last.replace(polls)
    });
    Prepared::plain(svc)
}

/// Starts `n` calls through clones of `svc` (whose inner never completes) and keeps
/// them in flight: the bulkhead or limit is full.
pub(crate) fn fill<S>(svc: S, n: usize) -> Prepared<S>
where
    S: Service<Req> + Clone + 'static,
    S::Future: 'static,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut keep: Vec<Box<dyn Any>> = Vec::new();
    for _ in 0..n {
        let mut holder = svc.clone();
        match holder.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => {}
            _ => panic!("could not start a call to fill the bulkhead"),
        }
        let mut fut = Box::pin(holder.call(Request::new(())));
        assert!(
            fut.as_mut().poll(&mut cx).is_pending(),
            "a filling call completed"
        );
        keep.push(Box::new(holder));
        keep.push(Box::new(fut));
    }
    Prepared { svc, keep }
}
