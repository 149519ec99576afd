//! Request deadlines: a budget set once, honoured by every layer below, whatever the
//! request type.
//!
//! [`DeadlineLayer`] gives each request a [`Deadline`] (the budget of the dependency
//! segment, admission included, such as 300 ms) and enforces it as a backstop. The
//! deadline travels **ambiently**: while the inner service's `call` runs and while
//! its response future is polled, it is the task's *current deadline* (set on the
//! thread for just that `call` or poll, so it behaves as a task-local), read with
//! [`Deadline::current`]. It needs nothing from the request
//! (no extensions, no trait to implement, no allocation), so a `String`, a database
//! query or an `http::Request` all carry it the same way. Inner layers read it: the
//! bulkhead stops waiting for a slot at it, the breaker bounds the dependency call
//! by it and records an overrun as a failure, a fallback caps its steps by it.
//!
//! **Where it is read.** In `call`, and again at the response future's first poll
//! when `call` saw none: tower's `Buffer` runs the inner `call` in its worker task,
//! but the caller polls the returned future in its own task, inside the deadline's
//! scope. [`bounded_by_current`] does exactly that for a future.
//!
//! **What loses it.** A future moved to another task (`tokio::spawn`) runs outside
//! the scope: wrap it with [`with_current_deadline`] before spawning it. Work started
//! by a background task (a health check, a cache refresh) has no deadline.
//!
//! **HTTP and gRPC.** A server can turn an incoming `grpc-timeout` header into the
//! deadline ([`DeadlineLayer::honor_grpc_timeout`]), and a client can write what
//! remains of it into the outgoing header ([`DeadlineLayer::propagate_grpc_timeout`]),
//! so the server stops working when the caller has stopped waiting.
//!
//! ```
//! use std::time::Duration;
//! use seawall_core::{Deadline, DeadlineLayer};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // Any request type: here a plain `String`.
//! let inner = service_fn(|query: String| async move {
//!     let left = Deadline::current().map(|d| d.remaining(tokio::time::Instant::now()));
//!     Ok::<_, std::convert::Infallible>((query, left))
//! });
//! let svc = DeadlineLayer::new(Duration::from_millis(300)).unwrap().layer(inner);
//! let (_, left) = svc.oneshot("SELECT 1".to_owned()).await.unwrap();
//! assert!(left.unwrap() <= Duration::from_millis(300));
//! # }
//! ```

mod bound;
mod grpc_timeout;
mod layer;
#[cfg(test)]
mod tests;

pub use bound::{bounded, bounded_by_current, Bounded, BoundedByCurrent};
pub use grpc_timeout::{format_grpc_timeout, parse_grpc_timeout, GRPC_TIMEOUT};
pub use layer::{
    DeadlineFuture, DeadlineHandle, DeadlineHeaders, DeadlineLayer, DeadlineService,
    DeadlineSnapshot, GrpcTimeout, NoHeaders,
};

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Instant;

std::thread_local! {
    /// The deadline of the request whose work is being run on this thread, if any.
    /// Set only for the length of a `call` or of one poll (see [`with_current`]),
    /// so it follows the task that polls the work, as a task-local does; a `Cell`
    /// of a `Copy` value, so entering and leaving costs two plain moves.
    static CURRENT: Cell<Option<Current>> = const { Cell::new(None) };
}

/// Runs `f` with `current` as the current deadline, then puts back the one it
/// replaced (also when `f` panics).
#[inline]
fn with_current<R>(current: Current, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Current>);
    impl Drop for Restore {
        #[inline]
        fn drop(&mut self) {
            CURRENT.set(self.0);
        }
    }
    let _restore = Restore(CURRENT.replace(Some(current)));
    f()
}

/// What the current deadline holds: the deadline, and whether a [`DeadlineFuture`] with a
/// timer at that very instant is polling the work now (it wakes the task when the
/// deadline passes, so a future inside it needs no timer of its own to notice).
#[derive(Debug, Clone, Copy)]
struct Current {
    deadline: Deadline,
    guarded: bool,
}

/// The instant by which a request must be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(Instant);

impl Deadline {
    /// A deadline at `at`.
    pub fn at(at: Instant) -> Self {
        Self(at)
    }

    /// A deadline `budget` after `now` (saturating: a budget too large for the clock
    /// is a deadline about thirty years away, never a panic).
    pub fn after(now: Instant, budget: Duration) -> Self {
        Self(crate::later(now, budget))
    }

    /// The instant itself.
    pub fn instant(&self) -> Instant {
        self.0
    }

    /// What is left of the budget at `now` (zero once it has passed).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.0.saturating_duration_since(now)
    }

    /// Whether the deadline has passed at `now`.
    pub fn is_expired(&self, now: Instant) -> bool {
        now >= self.0
    }

    /// The deadline of the request being served on this task, if any: set by a
    /// [`DeadlineLayer`] further out, or by [`scope`](Self::scope).
    #[inline]
    pub fn current() -> Option<Deadline> {
        CURRENT.get().map(|c| c.deadline)
    }

    /// Runs `f` with this deadline as the current one, or the current one if it is
    /// earlier (an inner budget never extends an outer one).
    pub fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        let current = match CURRENT.get() {
            Some(outer) if outer.deadline <= self => outer,
            _ => Current {
                deadline: self,
                guarded: false,
            },
        };
        with_current(current, f)
    }

    /// `fut`, polled with this deadline as the current one (or the current one at
    /// each poll, if that is earlier). For tests, and for work that starts its own
    /// budget outside a [`DeadlineLayer`].
    pub fn scope<F: Future>(self, fut: F) -> WithDeadline<F> {
        WithDeadline {
            inner: fut,
            deadline: Some(self),
        }
    }

    fn or_earlier_current(self) -> Self {
        match Self::current() {
            Some(outer) => self.min(outer),
            None => self,
        }
    }
}

/// Carries the current deadline (if any) into `fut`, so it survives a move to another
/// task: `tokio::spawn(with_current_deadline(fut))`.
pub fn with_current_deadline<F: Future>(fut: F) -> WithDeadline<F> {
    WithDeadline {
        inner: fut,
        deadline: Deadline::current(),
    }
}

pin_project! {
    /// A future polled with a deadline as the current one; see [`Deadline::scope`] and
    /// [`with_current_deadline`].
    #[derive(Debug)]
    pub struct WithDeadline<F> {
        #[pin]
        inner: F,
        deadline: Option<Deadline>,
    }
}

impl<F: Future> Future for WithDeadline<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match *this.deadline {
            Some(d) => d.sync_scope(|| this.inner.poll(cx)),
            None => this.inner.poll(cx),
        }
    }
}

/// Requests that carry [`http::Extensions`], where seawall's opt-in request data
/// lives (a bulkhead's `PermitHandle`, a degradation level). Implemented for
/// [`http::Request`]. Nothing else needs it: deadlines travel without it.
pub trait HasExtensions {
    /// The request's extensions, if it has any.
    fn extensions(&self) -> Option<&http::Extensions>;
    /// The request's extensions, mutably, if it has any.
    fn extensions_mut(&mut self) -> Option<&mut http::Extensions>;
}

impl<B> HasExtensions for http::Request<B> {
    fn extensions(&self) -> Option<&http::Extensions> {
        Some(http::Request::extensions(self))
    }

    fn extensions_mut(&mut self) -> Option<&mut http::Extensions> {
        Some(http::Request::extensions_mut(self))
    }
}
