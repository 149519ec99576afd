//! Two ways to make a call: by hand, and awaited the way a user's code does.
//!
//! - **By hand**: `poll_ready`, `call` and one `poll` with [`Waker::noop`], inside a
//!   tokio runtime context (so tokio's clock and timers work) but with no executor
//!   in the loop. What is left is the layer's own code; this mode isolates it best.
//! - **Awaited**: on a `current_thread` runtime, `ready().await` then
//!   `call().await` in a loop, with the service between two [`Thin`] adapters (one
//!   outside it, one between it and the trivial inner service), as each layer sits
//!   in a user's stack: its future is polled as part of another future and polls
//!   another one itself, through real wakers and the `Ready` combinator. The
//!   adapters alone (the bare row) are measured the same way and subtracted.

use std::cell::Cell;
use std::future::{poll_fn, Future};
use std::hint::black_box;
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Request;
use pin_project_lite::pin_project;
use tokio::runtime::Runtime;
use tower::{Service, ServiceExt};

use super::Req;

/// Whether a call ended in `Ok`. Counts in `pending` what did not complete on its
/// first poll (readiness, the response future), which is then finished by `rt`.
#[inline(always)]
pub(crate) fn by_hand<S>(svc: &mut S, cx: &mut Context<'_>, rt: &Runtime, pending: &mut u64) -> bool
where
    S: Service<Req>,
{
    let ready = match svc.poll_ready(cx) {
        Poll::Ready(r) => r,
        Poll::Pending => {
            *pending += 1;
            rt.block_on(poll_fn(|cx| svc.poll_ready(cx)))
        }
    };
    if let Err(e) = ready {
        black_box(e);
        return false;
    }
    let mut fut = pin!(svc.call(black_box(Request::new(()))));
    let out = match fut.as_mut().poll(cx) {
        Poll::Ready(out) => out,
        Poll::Pending => {
            *pending += 1;
            rt.block_on(fut.as_mut())
        }
    };
    let ok = out.is_ok();
    drop(black_box(out));
    ok
}

/// One awaited call, as a user writes it. Whether it ended in `Ok`.
#[inline(always)]
async fn awaited<S>(svc: &mut S) -> bool
where
    S: Service<Req>,
{
    match svc.ready().await {
        Ok(svc) => {
            let out = svc.call(black_box(Request::new(()))).await;
            let ok = out.is_ok();
            drop(black_box(out));
            ok
        }
        Err(e) => {
            black_box(e);
            false
        }
    }
}

/// `n` awaited calls in one `block_on`; the elapsed time, and how many times a
/// [`Thin`] adapter saw its service or future pending.
pub(crate) fn awaited_batch<S>(svc: &mut Thin<S>, rt: &Runtime, n: u64) -> (Duration, u64)
where
    S: Service<Req>,
{
    PENDING.set(0);
    let elapsed = rt.block_on(async {
        let start = Instant::now();
        for _ in 0..n {
            black_box(awaited(svc).await);
        }
        start.elapsed()
    });
    (elapsed, PENDING.replace(0))
}

/// One awaited call; whether it was `Ok`, and how many times it was pending.
pub(crate) fn awaited_once<S>(svc: &mut Thin<S>, rt: &Runtime) -> (bool, u64)
where
    S: Service<Req>,
{
    PENDING.set(0);
    let ok = rt.block_on(awaited(svc));
    (ok, PENDING.replace(0))
}

thread_local! {
    /// Counts the `Pending`s [`Thin`] adapters saw (read by the awaited mode).
    static PENDING: Cell<u64> = const { Cell::new(0) };
}

#[cold]
fn note_pending() {
    PENDING.set(PENDING.get() + 1);
}

/// A pass-through layer: forwards readiness and calls, and wraps the response
/// future in its own. It stands for the layers around a measured one in a real
/// stack; it notes when it sees `Pending`, and costs nothing else.
#[derive(Clone)]
pub(crate) struct Thin<S> {
    inner: S,
}

impl<S> Thin<S> {
    pub(crate) fn new(inner: S) -> Self {
        Self { inner }
    }

    pub(crate) fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

pin_project! {
    /// The response future of [`Thin`].
    pub(crate) struct ThinFuture<F> {
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for ThinFuture<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let polled = self.project().inner.poll(cx);
        if polled.is_pending() {
            note_pending();
        }
        polled
    }
}

impl<S, R> Service<R> for Thin<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ThinFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        let polled = self.inner.poll_ready(cx);
        if polled.is_pending() {
            note_pending();
        }
        polled
    }

    #[inline]
    fn call(&mut self, req: R) -> Self::Future {
        ThinFuture {
            inner: self.inner.call(req),
        }
    }
}
