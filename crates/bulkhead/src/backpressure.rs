//! Backpressure mode: the slot is reserved in `poll_ready`, which is pending while
//! the bulkhead is full, so a balancer or a buffer in front sees the bulkhead's
//! capacity as readiness.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use seawall_core::{BoxError, Classify, PanicWatch, TimeoutsAsOverload};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use crate::future::ResponseFuture;
use crate::handle::Handle;
use crate::hold::{Hold, Lend, UntilResponse};
use crate::permit::Permit;
use crate::semaphore::{Enqueued, Leave, Left, WaiterId};
use crate::state::Shared;

/// Applies a bulkhead in backpressure mode; made by
/// [`BulkheadLayer::backpressure`](crate::BulkheadLayer::backpressure).
///
/// It keeps the bulkhead of the layer it was made from: every service it builds,
/// every clone of them, and every service built by that [`BulkheadLayer`](crate::BulkheadLayer)
/// (in either mode) count against the same slots. See [`Backpressure`].
pub struct BackpressureLayer<H = UntilResponse, O = TimeoutsAsOverload> {
    shared: Arc<Shared>,
    overload: O,
    _hold: PhantomData<fn() -> H>,
}

impl<H, O> BackpressureLayer<H, O> {
    pub(crate) fn new(shared: Arc<Shared>, overload: O) -> Self {
        Self {
            shared,
            overload,
            _hold: PhantomData,
        }
    }

    /// The bulkhead's handle (snapshot, runtime limits).
    pub fn handle(&self) -> Handle {
        Handle::new(self.shared.clone())
    }
}

impl<H, O: Clone> Clone for BackpressureLayer<H, O> {
    fn clone(&self) -> Self {
        Self::new(self.shared.clone(), self.overload.clone())
    }
}

impl<H, O> fmt::Debug for BackpressureLayer<H, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackpressureLayer")
            .field("name", &&*self.shared.name)
            .field("config", &self.shared.config())
            .finish()
    }
}

impl<S, H, O: Clone> Layer<S> for BackpressureLayer<H, O> {
    type Service = Backpressure<S, H, O>;

    fn layer(&self, inner: S) -> Self::Service {
        Backpressure {
            inner,
            shared: self.shared.clone(),
            slot: Slot::Empty,
            overload: self.overload.clone(),
            _hold: PhantomData,
        }
    }
}

/// A bulkhead whose capacity is the service's readiness, as tower's
/// `ConcurrencyLimit`: what `tower::balance`, `ReadyCache` and `tower::buffer::Buffer`
/// need to route around, or wait for, a busy dependency.
///
/// **When to use it:** when something in front of the bulkhead reads readiness and
/// can do better than a rejection — `tower::balance::p2c::Balance` and `ReadyCache`
/// choose only ready endpoints, so a replica whose bulkhead is full is skipped and
/// its traffic goes to the others; `tower::buffer::Buffer` stops taking requests
/// and its callers wait in `poll_ready`. Keep the default mode for a server route
/// or a single dependency, where a busy bulkhead should answer at once.
///
/// ```
/// use std::convert::Infallible;
/// use std::task::{Context, Poll, Waker};
/// use seawall_bulkhead::BulkheadLayer;
/// use tower::{service_fn, Layer, Service, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), seawall_core::BoxError> {
/// let layer = BulkheadLayer::builder("freight").max_concurrent(1).build()?.backpressure();
/// let handle = layer.handle();
/// let mut a = layer.layer(service_fn(|cep: String| async move { Ok::<_, Infallible>(cep.len()) }));
/// let mut b = a.clone(); // the same bulkhead, no reservation of its own
///
/// a.ready().await?; // reserves the only slot
/// assert_eq!(handle.snapshot().active, 1);
/// // So `b` is not ready: a balancer would choose another endpoint.
/// let mut cx = Context::from_waker(Waker::noop());
/// assert!(Service::<String>::poll_ready(&mut b, &mut cx).is_pending());
///
/// assert_eq!(a.call("01310-100".to_owned()).await?, 9);
/// b.ready().await?; // the freed slot was handed to `b`
/// # Ok(())
/// # }
/// ```
///
/// - `poll_ready` reserves a slot, then polls the inner service. While every slot
///   is taken it is `Pending`, and the task is woken when a slot is handed to this
///   service (first come, first served with every other waiter of the bulkhead).
///   It has no timeout of its own: whoever polls decides how long to wait (a
///   balancer picks another endpoint; wrap the stack in `tower::load_shed` to fail
///   at once instead, or in a timeout).
/// - `call` uses the reserved slot and calls the inner service directly: no line,
///   no clone of the inner service (no `S: Clone` needed), no [`BulkheadFull`](crate::BulkheadFull)
///   in the normal course.
/// - **No queue in this mode:** `max_queue` and `max_wait` do not apply to these
///   services (they still apply to default-mode services of the same bulkhead).
///   A service waiting in `poll_ready` shows in [`Snapshot::queued`](crate::Snapshot::queued);
///   one that gives up (is dropped) counts as abandoned.
/// - The slot is held from `poll_ready` on, also while the inner service is not
///   ready yet, and counts as admitted when it is reserved.
///
/// **Where the reservation lives.** In this service value, never shared: a clone
/// starts with no slot (as tower's `ConcurrencyLimit`), and dropping the service
/// frees a slot it reserved but did not use, or leaves the line. An error from the
/// inner `poll_ready`, or a panic in it, frees the slot too (the latter while the
/// panic unwinds); a call's slot is freed as in the default mode (when its future
/// completes, panics or is dropped, or as the hold mode says).
///
/// A `call` without a ready `poll_ready` breaks Tower's contract; it is not made to
/// wait: it goes out only if a slot is free and the inner service is ready at once,
/// and otherwise fails (`BulkheadFull` when no slot is free).
pub struct Backpressure<S, H = UntilResponse, O = TimeoutsAsOverload> {
    inner: S,
    shared: Arc<Shared>,
    slot: Slot,
    overload: O,
    _hold: PhantomData<fn() -> H>,
}

/// What this service holds of the bulkhead between `poll_ready` and `call`.
#[derive(Debug)]
enum Slot {
    /// Nothing.
    Empty,
    /// A place in the line.
    Waiting(Waiter),
    /// A reserved slot.
    Held(Permit),
    /// The line holds as many waiters as the bulkhead can count (2^20): ready
    /// without a slot, and `call` decides as when called without `poll_ready`.
    Overflow,
}

/// A place in the line; dropping it leaves the line, or frees the slot it was given.
#[derive(Debug)]
struct Waiter {
    id: WaiterId,
    // `None` once the slot has been taken as a permit.
    shared: Option<Arc<Shared>>,
    enqueued_at: Instant,
}

impl Waiter {
    /// The slot, once the line has handed it over; `None` if already taken.
    fn poll_slot(&mut self, cx: &mut Context<'_>) -> Poll<Option<Permit>> {
        let Some(shared) = &self.shared else {
            return Poll::Ready(None);
        };
        if !shared.semaphore.poll_waiter(self.id, cx.waker()) {
            return Poll::Pending;
        }
        let waited = Instant::now().saturating_duration_since(self.enqueued_at);
        shared.semaphore.record_wait(waited);
        shared.telemetry.dequeued();
        shared.telemetry.admitted(waited);
        Poll::Ready(self.shared.take().map(Permit::waited))
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.telemetry.dequeued();
            if shared.semaphore.leave(self.id, Leave::Abandoned) == Left::HoldsSlot {
                // Handed a slot, but the service is gone: pass it on.
                shared.release_handed_over();
            }
        }
    }
}

impl<S, H, O> Backpressure<S, H, O> {
    /// The handle of the bulkhead this service uses.
    pub fn handle(&self) -> Handle {
        Handle::new(self.shared.clone())
    }

    /// Whether this service holds a reserved slot (reserved by `poll_ready`, not yet
    /// used by `call`).
    pub fn is_reserved(&self) -> bool {
        matches!(self.slot, Slot::Held(_))
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the service, returning the inner one (a reserved slot is freed).
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Reserves a slot: at once when one is free, else from the line.
    fn reserve(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match &mut self.slot {
                Slot::Held(_) => return Poll::Ready(()),
                Slot::Empty | Slot::Overflow => {
                    if self.shared.semaphore.try_acquire() {
                        self.shared.telemetry.admitted(Duration::ZERO);
                        self.slot = Slot::Held(Permit::new(self.shared.clone()));
                        return Poll::Ready(());
                    }
                    self.slot = self.join();
                    if let Slot::Overflow = self.slot {
                        return Poll::Ready(());
                    }
                }
                Slot::Waiting(waiter) => {
                    let permit = ready!(waiter.poll_slot(cx));
                    self.slot = permit.map_or(Slot::Empty, Slot::Held);
                }
            }
        }
    }

    #[cold]
    fn join(&self) -> Slot {
        let shared = &self.shared;
        match shared.semaphore.enqueue_ready() {
            Enqueued::Admitted => {
                shared.telemetry.admitted(Duration::ZERO);
                Slot::Held(Permit::waited(shared.clone()))
            }
            Enqueued::Waiting(id) => {
                shared.telemetry.enqueued();
                Slot::Waiting(Waiter {
                    id,
                    shared: Some(shared.clone()),
                    enqueued_at: Instant::now(),
                })
            }
            Enqueued::Full | Enqueued::Expired => Slot::Overflow,
        }
    }
}

impl<S: Clone, H, O: Clone> Clone for Backpressure<S, H, O> {
    /// A service on the same bulkhead, with no reservation of its own yet.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            slot: Slot::Empty,
            overload: self.overload.clone(),
            _hold: PhantomData,
        }
    }
}

impl<S: fmt::Debug, H, O> fmt::Debug for Backpressure<S, H, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slot = match self.slot {
            Slot::Empty => "none",
            Slot::Waiting(_) => "waiting",
            Slot::Held(_) => "reserved",
            Slot::Overflow => "overflow",
        };
        f.debug_struct("Backpressure")
            .field("name", &&*self.shared.name)
            .field("slot", &slot)
            .field("inner", &self.inner)
            .finish()
    }
}

impl<S, Req, H, O> Service<Req> for Backpressure<S, H, O>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    H: Hold<S::Response> + Lend<Req>,
    O: Classify<S::Response> + Clone,
{
    type Response = H::Output;
    type Error = BoxError;
    type Future = ResponseFuture<S, Req, H, O>;

    /// Pending while the bulkhead is full; then holds a slot and polls the inner
    /// service (keeping the slot while it is not ready, freeing it if it fails).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        ready!(self.reserve(cx));
        // A panicking inner `poll_ready` gives the reserved slot back while it
        // unwinds, as a readiness error does.
        let watch = PanicWatch::arm(|| self.slot = Slot::Empty);
        let polled = self.inner.poll_ready(cx);
        watch.disarm();
        match polled {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => {
                self.slot = Slot::Empty;
                Poll::Ready(Err(e.into()))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn call(&mut self, req: Req) -> Self::Future {
        match std::mem::replace(&mut self.slot, Slot::Empty) {
            Slot::Held(permit) => {
                ResponseFuture::call(permit, &mut self.inner, req, self.overload.clone())
            }
            other => {
                // Leave the line first: a waiter of our own would keep the slot from us.
                drop(other);
                self.unreserved(req)
            }
        }
    }
}

impl<S, H, O: Clone> Backpressure<S, H, O> {
    /// A call made without a reserved slot is never made to wait: it takes a free
    /// slot and goes out if the inner service says it is ready at once; otherwise
    /// it fails (`BulkheadFull`, or the inner service's readiness error).
    #[cold]
    fn unreserved<Req>(&mut self, req: Req) -> ResponseFuture<S, Req, H, O>
    where
        S: Service<Req>,
        S::Error: Into<BoxError>,
        H: Lend<Req>,
    {
        let permit = if self.shared.semaphore.try_acquire() {
            self.shared.telemetry.admitted(Duration::ZERO);
            Permit::new(self.shared.clone())
        } else if self.shared.shadows() {
            self.shared
                .admit_over_limit(crate::telemetry::ShadowCause::Full);
            Permit::over_limit(self.shared.clone())
        } else {
            return ResponseFuture::full(&self.shared, self.overload.clone());
        };
        match self
            .inner
            .poll_ready(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(Ok(())) => {
                ResponseFuture::call(permit, &mut self.inner, req, self.overload.clone())
            }
            Poll::Ready(Err(e)) => ResponseFuture::rejected(e.into(), self.overload.clone()),
            Poll::Pending => ResponseFuture::rejected(NOT_POLLED.into(), self.overload.clone()),
        }
    }
}

const NOT_POLLED: &str = "bulkhead called without poll_ready, and its inner service was not ready";
