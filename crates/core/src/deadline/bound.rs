//! Futures bounded by a deadline: by one given ([`bounded`]) or by the current one
//! ([`bounded_by_current`]), the way the layers below a `DeadlineLayer` bound their calls.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::rejection::DeadlineExceeded;

use super::{Deadline, CURRENT};

pin_project! {
    /// A future bounded by a deadline: it resolves to `Err(DeadlineExceeded)` if the
    /// deadline passes first. Without a deadline it is the inner future, with no timer.
    #[derive(Debug)]
    pub struct Bounded<F> {
        #[pin]
        inner: F,
        deadline: Option<Instant>,
        // Created the first time the inner future is pending: a call that completes
        // at once (a cache, a rejection below) never registers a timer.
        #[pin]
        sleep: Option<Sleep>,
    }
}

/// Bounds `fut` by `deadline` (no bound when `None`). The timer is registered only
/// when there is a deadline and the inner future does not complete at once.
pub fn bounded<F: Future>(fut: F, deadline: Option<Deadline>) -> Bounded<F> {
    Bounded {
        inner: fut,
        deadline: deadline.map(|d| d.instant()),
        sleep: None,
    }
}

/// Bounds `fut` by the current deadline: the one in force now or, if there is none
/// now, the one in force at the first poll (the case of a `call` run in another
/// task, as tower's `Buffer` does).
///
/// Unlike [`Bounded`], it carries no timer inline: where a [`DeadlineLayer`](super::DeadlineLayer)'s
/// future polls it (the usual stack), that future's timer wakes the task at the
/// deadline and this one only compares the clock with it when the inner future is
/// pending; only under a deadline set another way ([`Deadline::scope`]) does it
/// register a timer of its own, boxed, the first time the inner future is pending.
#[inline]
pub fn bounded_by_current<F: Future>(fut: F) -> BoundedByCurrent<F> {
    let deadline = Deadline::current();
    BoundedByCurrent {
        inner: fut,
        bound: match deadline {
            Some(d) => Bound::At(d.instant()),
            None => Bound::Look,
        },
    }
}

/// What bounds a [`BoundedByCurrent`]: three words, the timer it rarely needs
/// included (it knows its own deadline).
#[derive(Debug)]
enum Bound {
    /// No deadline was current when the future was made: look at the first poll.
    Look,
    /// No deadline.
    Unbounded,
    /// The deadline; the inner future has not been pending (so its answer is in time).
    At(Instant),
    /// The deadline, after the inner future was pending under a `DeadlineFuture`
    /// whose timer wakes the task at it.
    Pending(Instant),
    /// The deadline's own timer, for a deadline no `DeadlineFuture` guards.
    Timer(Pin<Box<Sleep>>),
}

pin_project! {
    /// A future bounded by the current deadline (see [`bounded_by_current`]): it
    /// resolves to `Err(DeadlineExceeded)` if the deadline passes first. Small: the
    /// inner future, and the instant or a pointer to a timer it rarely needs.
    #[derive(Debug)]
    pub struct BoundedByCurrent<F> {
        #[pin]
        inner: F,
        bound: Bound,
    }
}

impl<F: Future> Future for BoundedByCurrent<F> {
    type Output = Result<F::Output, DeadlineExceeded>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Bound::Look = this.bound {
            *this.bound = Deadline::current().map_or(Bound::Unbounded, |d| Bound::At(d.instant()));
        }
        if let Poll::Ready(out) = this.inner.poll(cx) {
            // Late when the deadline passed before this poll saw the answer, as in
            // `Bounded`: it is a timeout, never a success past the budget.
            let late = match this.bound {
                Bound::Pending(deadline) => answered_late(*deadline),
                Bound::Timer(sleep) => answered_late(sleep.deadline()),
                Bound::Look | Bound::Unbounded | Bound::At(_) => false,
            };
            return Poll::Ready(if late {
                Err(DeadlineExceeded::new())
            } else {
                Ok(out)
            });
        }
        poll_deadline(this.bound, cx)
    }
}

/// Whether an answer seen now came after `deadline`: the one rule every bounded
/// future applies to an answer (one seen at the deadline's very instant is in time).
pub(super) fn answered_late(deadline: Instant) -> bool {
    Instant::now() > deadline
}

/// The pending inner future's deadline: passed, or how the task will be woken at it.
#[inline]
fn poll_deadline<T>(bound: &mut Bound, cx: &mut Context<'_>) -> Poll<Result<T, DeadlineExceeded>> {
    let deadline = match *bound {
        Bound::Look | Bound::Unbounded => return Poll::Pending,
        Bound::At(deadline) | Bound::Pending(deadline) => deadline,
        Bound::Timer(ref mut sleep) => {
            ready!(sleep.as_mut().poll(cx));
            return Poll::Ready(Err(DeadlineExceeded::new()));
        }
    };
    let guarded = CURRENT
        .get()
        .is_some_and(|c| c.guarded && c.deadline.instant() <= deadline);
    if guarded {
        // A `DeadlineFuture` polling this one wakes the task when its timer, at
        // this deadline or before, fires (and polls its inner future first).
        *bound = Bound::Pending(deadline);
        return if Instant::now() >= deadline {
            Poll::Ready(Err(DeadlineExceeded::new()))
        } else {
            Poll::Pending
        };
    }
    let mut sleep = Box::pin(tokio::time::sleep_until(deadline));
    let fired = sleep.as_mut().poll(cx).is_ready();
    *bound = Bound::Timer(sleep);
    if fired {
        Poll::Ready(Err(DeadlineExceeded::new()))
    } else {
        Poll::Pending
    }
}

impl<F: Future> Future for Bounded<F> {
    type Output = Result<F::Output, DeadlineExceeded>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(out) = this.inner.poll(cx) {
            // An answer is late when the deadline passed before this poll saw it
            // (a busy runtime runs the timer and the answer's wake-up together):
            // it is no answer, never a success past the budget. One seen at the
            // deadline's instant is in time. Only a call that was pending before
            // can be late, so only those read the clock.
            return match *this.deadline {
                Some(deadline) if this.sleep.is_some() && answered_late(deadline) => {
                    Poll::Ready(Err(DeadlineExceeded::new()))
                }
                _ => Poll::Ready(Ok(out)),
            };
        }
        let Some(deadline) = *this.deadline else {
            return Poll::Pending;
        };
        if this.sleep.is_none() {
            this.sleep.set(Some(tokio::time::sleep_until(deadline)));
        }
        match this.sleep.as_pin_mut() {
            Some(sleep) => {
                ready!(sleep.poll(cx));
                Poll::Ready(Err(DeadlineExceeded::new()))
            }
            None => Poll::Pending,
        }
    }
}
