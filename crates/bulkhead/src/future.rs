//! The response future: waits for a slot, drives the inner service, holds the permit.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use pin_project_lite::pin_project;
use seawall_core::{BoxError, Classify, Criticality, Deadline, PanicWatch, TimeoutsAsOverload};
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use crate::hold::{Hold, Lend};
use crate::permit::Permit;
use crate::queue::{LineState, QueuePolicy};
use crate::semaphore::{Enqueued, Leave, Left, Polled, WaiterId};
use crate::state::{Shared, TurnedAway};
use crate::telemetry::ShadowCause;

pin_project! {
    /// The response future of [`Bulkhead`](crate::Bulkhead) and
    /// [`KeyedBulkhead`](crate::KeyedBulkhead).
    ///
    /// It resolves to [`BulkheadFull`] on its first poll when the bulkhead was full
    /// at call time; otherwise it waits in line for a slot (at most `max_wait` or
    /// what remains of the request's deadline, then [`BulkheadTimeout`]), drives
    /// its own copy of the inner service to readiness, calls it, and holds the
    /// slot until the inner future completes or this future is dropped.
    ///
    /// On the common path (a slot was free and the inner service was ready at call
    /// time) it is just the inner future and the permit; a call that has to wait,
    /// for a slot or for the inner service, parks its request in one allocation.
    pub struct ResponseFuture<S, Req, H, O = TimeoutsAsOverload>
    where
        S: Service<Req>,
    {
        // Declared before the permit, so the inner future is dropped first.
        #[pin]
        phase: Phase<S, Req, S::Future>,
        // The slot, once admitted and while the inner service has the call.
        permit: Option<Permit>,
        // Tells an adaptive limit how the call ended. Not an `Option`: for the
        // default, zero-sized classifier it then takes no byte (a rejection also
        // carries one, and never reads it).
        overload: O,
        _hold: PhantomData<fn() -> H>,
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase<S, Req, F> {
        // Holding a slot (the future's `permit`); the inner service has the call.
        // Without the permit, the call has answered (its inner future is kept).
        Calling { #[pin] future: F },
        // Waiting for a slot, or holding one and waiting for the inner service.
        Parked { parked: Pin<Box<Parked<S, Req>>> },
        // Turned away at call time; the error is handed out on the first poll.
        Rejected { error: Option<BoxError> },
        Done,
    }
}

pin_project! {
    /// A call that could not go through at once.
    struct Parked<S, Req> {
        // Runs while in line: `max_wait` or the deadline, whichever is first.
        #[pin]
        sleep: Option<Sleep>,
        // No deadline was current at call time: look again at the first poll (the
        // call may have been made in another task, as tower's `Buffer` does).
        look: bool,
        // `Some` while in line.
        waiter: Option<Waiter>,
        // `Some` once admitted, until the inner service is called.
        permit: Option<Permit>,
        svc: S,
        req: Option<Req>,
    }
}

/// A place in the line. Dropping it leaves the line (or frees the slot it was given).
struct Waiter {
    id: WaiterId,
    shared: Option<Arc<Shared>>,
    enqueued_at: Instant,
    /// Its class, when the layer has classes: a displaced waiter is told, and its
    /// slot counts against its class's share.
    class: Option<Criticality>,
}

impl Waiter {
    fn poll_slot(
        &mut self,
        sleep: Pin<&mut Option<Sleep>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Permit, BoxError>> {
        let Some(shared) = &self.shared else {
            return Poll::Ready(Err(polled_after_completion()));
        };
        let mut polled = shared.semaphore.poll_place(self.id, cx.waker());
        if polled == Polled::Waiting {
            if let Some(sleep) = sleep.as_pin_mut() {
                if sleep.poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            // Timed out, unless a slot arrived together with the timer: then take it.
            let shadow = shared.shadows();
            let why = if shadow {
                Leave::ShadowTimedOut
            } else {
                Leave::TimedOut
            };
            let left = shared.semaphore.leave(self.id, why);
            if left == Left::Displaced {
                polled = Polled::Displaced;
            } else if left == Left::Removed {
                shared.telemetry.dequeued();
                if shadow {
                    shared.admit_over_limit(ShadowCause::Timeout);
                    return Poll::Ready(match self.shared.take() {
                        Some(shared) => Ok(Permit::over_limit(shared)),
                        None => Err(polled_after_completion()),
                    });
                }
                let waited = Instant::now().saturating_duration_since(self.enqueued_at);
                let error = shared.reject(TurnedAway::TimedOut(waited), self.class);
                self.shared = None;
                return Poll::Ready(Err(error));
            }
        }
        if polled == Polled::Displaced {
            return Poll::Ready(self.displaced());
        }
        // A slot was handed to this waiter: turn it into a permit, recording the wait.
        Poll::Ready(match self.shared.take() {
            Some(shared) => {
                let waited = Instant::now().saturating_duration_since(self.enqueued_at);
                shared.semaphore.record_wait(waited);
                shared.telemetry.dequeued();
                shared.telemetry.admitted(waited);
                Ok(match self.class {
                    Some(class) => Permit::classed(shared, class),
                    None => Permit::waited(shared),
                })
            }
            None => Err(polled_after_completion()),
        })
    }

    /// A more critical call took this waiter's place: turned away as full (in
    /// shadow mode, let through beyond the limit).
    #[cold]
    fn displaced(&mut self) -> Result<Permit, BoxError> {
        let Some(shared) = self.shared.take() else {
            return Err(polled_after_completion());
        };
        shared.telemetry.dequeued();
        if shared.shadows() {
            shared.admit_over_limit(ShadowCause::Full);
            return Ok(Permit::over_limit(shared));
        }
        Err(shared.reject(TurnedAway::Displaced, self.class))
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            match shared.semaphore.leave(self.id, Leave::Abandoned) {
                Left::Removed => shared.telemetry.abandoned(),
                Left::HoldsSlot => {
                    shared.telemetry.abandoned();
                    // Handed a slot, but the caller is gone: pass it on.
                    match self.class {
                        Some(class) => shared.release_handed_over_classed(class),
                        None => shared.release_handed_over(),
                    }
                }
                // Already turned away (and counted) when it was displaced.
                Left::Displaced => {
                    shared.telemetry.dequeued();
                    shared.displaced_told(self.class.unwrap_or_default());
                }
            }
        }
    }
}

/// Frees the permit of an inner `poll_ready`, `call` or `poll` that is panicking
/// (see [`ResponseFuture::call_in`]).
#[cold]
fn free_on_unwind(permit: &mut Option<Permit>) {
    *permit = None;
}

/// The line as a call arriving at `now` sees it: moved on by the policy when an
/// option reads its history; otherwise a line without one, and nothing is read.
fn line_at(shared: &Shared, policy: &QueuePolicy, now: Instant) -> LineState {
    if policy.has_history() {
        shared.semaphore.arrival(now, policy)
    } else {
        LineState::default()
    }
}

fn polled_after_completion() -> BoxError {
    "bulkhead response future polled after completion".into()
}

impl<S, Req, H, O> ResponseFuture<S, Req, H, O>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
    H: Lend<Req>,
{
    /// Admission, decided at call time: a free slot is taken at once (no lock, no
    /// allocation, no clock read); a full bulkhead rejects at once; otherwise the
    /// call joins the line (with a clone of the inner service, taken now). Every
    /// future keeps `overload` (only an admitted call's is read, by an adaptive
    /// limit); a rejection is built where it is returned, so it is not copied on
    /// its way out.
    #[inline]
    pub(crate) fn new(shared: &Arc<Shared>, inner: &mut S, req: Req, overload: O) -> Self {
        Self::new_in(shared, inner, &mut None, req, overload, None)
    }

    /// As [`ResponseFuture::new`], keeping the permit in `in_call` while the inner
    /// service's `call` runs (see [`ResponseFuture::call_in`]). A call with a
    /// `class` goes through the class-aware admission instead (a layer without
    /// classes passes a constant `None`, and this test compiles away).
    #[inline]
    pub(crate) fn new_in(
        shared: &Arc<Shared>,
        inner: &mut S,
        in_call: &mut Option<Permit>,
        req: Req,
        overload: O,
        class: Option<Criticality>,
    ) -> Self {
        if let Some(class) = class {
            return Self::queued(shared, inner, req, overload, Some(class));
        }
        if shared.semaphore.try_acquire() {
            shared.telemetry.admitted(Duration::ZERO);
            let permit = Permit::new(shared.clone());
            return Self::admitted(permit, inner, in_call, req, overload);
        }
        // Turned away without moving the request into another function: it is
        // dropped here (a shadow bulkhead lets it through on the slow path).
        if shared.semaphore.is_full() && !shared.shadows() {
            return Self::full(shared, overload);
        }
        Self::slow(shared, inner, req, overload)
    }

    /// Holding a slot: ask the inner service once, with a no-op waker, whether it
    /// is ready. If it is, call it now, with no clone; if not, park the call with
    /// the service that was asked (whatever its `poll_ready` started stays with the
    /// call that needs it), leave a clone in its place, and keep driving the parked
    /// one (with the caller's waker) from the future.
    ///
    /// `overload` is taken here rather than set afterwards, so the future (with
    /// the inner one inside it) is built once, in place, and never moved again.
    #[inline]
    fn admitted(
        permit: Permit,
        svc: &mut S,
        in_call: &mut Option<Permit>,
        req: Req,
        overload: O,
    ) -> Self {
        let mut cx = Context::from_waker(Waker::noop());
        match svc.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => Self::call_in(permit, svc, in_call, req, overload),
            Poll::Ready(Err(e)) => Self::rejected(e.into(), overload),
            Poll::Pending => {
                let fresh = svc.clone();
                let polled = std::mem::replace(svc, fresh);
                Self::park(None, false, None, Some(permit), polled, req, overload)
            }
        }
    }

    #[cold]
    fn slow(shared: &Arc<Shared>, inner: &mut S, req: Req, overload: O) -> Self {
        if shared.semaphore.is_full() {
            return Self::full_or_over_limit(shared, inner, req, overload, None);
        }
        Self::queued(shared, inner, req, overload, None)
    }

    /// Admission of a call that found no free slot at once, and of every call of
    /// a layer with classes (`class`: under the line's lock, against its class's
    /// share, in its class's line, displacing a less critical waiter from a full
    /// queue, see [`crate::queue::Shares::place`]): it takes a slot freed
    /// meanwhile, joins the line for at most `max_wait` and never past the
    /// deadline, or is turned away.
    fn queued(
        shared: &Arc<Shared>,
        inner: &mut S,
        req: Req,
        overload: O,
        class: Option<Criticality>,
    ) -> Self {
        let now = Instant::now();
        let deadline = Deadline::current();
        let look = deadline.is_none();
        // A hedge (a call made under `without_waiting`) takes a slot freed meanwhile
        // or is turned away as full: it never joins the line.
        let may_wait = seawall_core::may_wait();
        let policy = shared.queue_policy();
        let line = line_at(shared, &policy, now);
        let until = policy
            .wait_for(now, deadline.map(|d| d.instant()), &line)
            .filter(|_| may_wait);
        // A call whose deadline has passed takes a free slot but never joins the line.
        // Read once: the decision and what is counted must agree.
        let shadow = until.is_none() && shared.shadows();
        // Only a call with a bounded wait can answer `Waiting`.
        let enqueued = match (class, until) {
            (Some(class), _) => shared.semaphore.join_classed(
                class,
                policy.shares,
                until.is_some(),
                may_wait && !shadow,
            ),
            (None, Some(_)) => shared.semaphore.enqueue(),
            (None, None) if !may_wait => shared.semaphore.take_free(),
            (None, None) => shared.semaphore.enqueue_no_wait(shadow),
        };
        match enqueued {
            Enqueued::Admitted => {
                shared.telemetry.admitted(Duration::ZERO);
                let permit = match class {
                    Some(class) => Permit::classed(shared.clone(), class),
                    None => Permit::waited(shared.clone()),
                };
                Self::admitted(permit, inner, &mut None, req, overload)
            }
            // Full, or a hedge that would have joined the line.
            Enqueued::Full => Self::full_or_over_limit(shared, inner, req, overload, class),
            Enqueued::Expired if !may_wait => {
                Self::full_or_over_limit(shared, inner, req, overload, class)
            }
            Enqueued::Expired if shadow => {
                shared.admit_over_limit(ShadowCause::Timeout);
                Self::over_limit(shared, inner, req, overload)
            }
            Enqueued::Expired => Self::rejected(
                shared.reject(TurnedAway::TimedOut(Duration::ZERO), class),
                overload,
            ),
            Enqueued::Waiting(id) => {
                shared.telemetry.enqueued();
                let waiter = Waiter {
                    id,
                    shared: Some(shared.clone()),
                    enqueued_at: now,
                    class,
                };
                let sleep = until.map(tokio::time::sleep_until);
                let svc = inner.clone();
                Self::park(sleep, look, Some(waiter), None, svc, req, overload)
            }
        }
    }

    /// A call let through beyond the limit of `shared` in shadow mode, already
    /// counted by [`Shared::admit_over_limit`].
    #[cold]
    pub(crate) fn over_limit(shared: &Arc<Shared>, inner: &mut S, req: Req, overload: O) -> Self {
        Self::admitted(
            Permit::over_limit(shared.clone()),
            inner,
            &mut None,
            req,
            overload,
        )
    }

    /// A call (of `class`, with classes) that finds the bulkhead full: rejected,
    /// or in shadow mode let through beyond the limit.
    #[cold]
    fn full_or_over_limit(
        shared: &Arc<Shared>,
        inner: &mut S,
        req: Req,
        overload: O,
        class: Option<Criticality>,
    ) -> Self {
        if shared.shadows() {
            shared.admit_over_limit(ShadowCause::Full);
            return Self::over_limit(shared, inner, req, overload);
        }
        Self::rejected(shared.reject(TurnedAway::Full, class), overload)
    }

    fn park(
        sleep: Option<Sleep>,
        look: bool,
        waiter: Option<Waiter>,
        permit: Option<Permit>,
        svc: S,
        req: Req,
        overload: O,
    ) -> Self {
        Self {
            phase: Phase::Parked {
                parked: Box::pin(Parked {
                    sleep,
                    look,
                    waiter,
                    permit,
                    svc,
                    req: Some(req),
                }),
            },
            permit: None,
            overload,
            _hold: PhantomData,
        }
    }
}

impl<S, Req, H, O> ResponseFuture<S, Req, H, O>
where
    S: Service<Req>,
{
    /// Holding a slot, to an inner service that said it was ready: lend the
    /// request what the mode lends, call, and keep `overload` to tell an adaptive
    /// limit how the call ended.
    #[inline]
    pub(crate) fn call(permit: Permit, svc: &mut S, req: Req, overload: O) -> Self
    where
        H: Lend<Req>,
    {
        Self::call_in(permit, svc, &mut None, req, overload)
    }

    /// As [`ResponseFuture::call`], with the permit kept in `in_call` while the
    /// inner service's `call` runs.
    ///
    /// The permit waits in a field of the calling service rather than in a local
    /// of this function, so the compiler writes the inner future straight into
    /// the returned future's place instead of into a temporary it then copies
    /// (160 bytes for a breaker's future). Should that `call` panic, the permit is
    /// freed while the panic unwinds through here, as a permit held in a local
    /// would be: a call that panicked never keeps its slot.
    #[inline]
    pub(crate) fn call_in(
        permit: Permit,
        svc: &mut S,
        in_call: &mut Option<Permit>,
        mut req: Req,
        overload: O,
    ) -> Self
    where
        H: Lend<Req>,
    {
        *in_call = Some(H::lend(permit, &mut req));
        let watch = PanicWatch::arm(|| free_on_unwind(in_call));
        let future = svc.call(req);
        watch.disarm();
        Self {
            phase: Phase::Calling { future },
            permit: in_call.take(),
            overload,
            _hold: PhantomData,
        }
    }

    /// A call turned away because the bulkhead is full.
    #[cold]
    pub(crate) fn full(shared: &Shared, overload: O) -> Self {
        Self::rejected(shared.reject(TurnedAway::Full, None), overload)
    }

    /// A call turned away with `error`, delivered on the first poll.
    pub(crate) fn rejected(error: BoxError, overload: O) -> Self {
        Self {
            phase: Phase::Rejected { error: Some(error) },
            permit: None,
            overload,
            _hold: PhantomData,
        }
    }
}

impl<S, Req, H, O> Future for ResponseFuture<S, Req, H, O>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    H: Hold<S::Response> + Lend<Req>,
    O: Classify<S::Response>,
{
    type Output = Result<H::Output, BoxError>;

    /// Small enough to inline into the caller's `poll`: the call in flight is
    /// polled here, every other phase out of line.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut phase = this.phase;
        loop {
            let PhaseProj::Calling { future } = phase.as_mut().project() else {
                // Turned away at call time: the error goes out at once, and the
                // emptied phase answers any later poll (nothing left to drop).
                if let PhaseProj::Rejected { error } = phase.as_mut().project() {
                    let error = error.take().unwrap_or_else(polled_after_completion);
                    return Poll::Ready(Err(error));
                }
                ready!(poll_until_calling::<S, Req, H>(
                    phase.as_mut(),
                    this.permit,
                    cx
                ))?;
                continue;
            };
            // The permit leaves when the inner future completes: a call without one
            // has answered already. The completed inner future is not dropped here
            // but with this future, which saves dropping a phase on every call.
            if this.permit.is_none() {
                return Poll::Ready(Err(polled_after_completion()));
            }
            // A panicking inner future gives its slot back while the panic unwinds
            // (the caller may keep this future long after catching it), and a poll
            // after that answers an error instead of polling the dead future.
            let watch = PanicWatch::arm(|| free_on_unwind(this.permit));
            let polled = future.poll(cx);
            watch.disarm();
            let output = ready!(polled);
            let Some(permit) = this.permit.take() else {
                return Poll::Ready(Err(polled_after_completion()));
            };
            // Only a call timed for an adaptive limit needs the result as a whole;
            // any other hands the response straight to the hold mode.
            if permit.learns() {
                return Poll::Ready(learn_and_hold::<_, _, H, _>(
                    output,
                    permit,
                    Some(&*this.overload),
                ));
            }
            return Poll::Ready(match output {
                Ok(response) => Ok(H::hold(response, permit)),
                Err(e) => Err(e.into()),
            });
        }
    }
}

/// A parked call, or one that has answered: drives a parked call until it is
/// calling the inner service (`Ok`), or hands out why it never will. Out of line,
/// so the common path's `poll` stays small.
#[inline(never)]
fn poll_until_calling<S, Req, H>(
    mut phase: Pin<&mut Phase<S, Req, S::Future>>,
    calling_permit: &mut Option<Permit>,
    cx: &mut Context<'_>,
) -> Poll<Result<(), BoxError>>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    H: Lend<Req>,
{
    let error = match phase.as_mut().project() {
        PhaseProj::Calling { .. } => return Poll::Ready(Ok(())),
        PhaseProj::Parked { .. } => {
            match ready!(poll_parked::<S, Req, H>(phase.as_mut(), calling_permit, cx)) {
                Ok(()) => return Poll::Ready(Ok(())),
                Err(e) => e,
            }
        }
        PhaseProj::Rejected { error } => error.take().unwrap_or_else(polled_after_completion),
        PhaseProj::Done => polled_after_completion(),
    };
    phase.set(Phase::Done);
    Poll::Ready(Err(error))
}

/// An adaptive limit's call: classify the result for the limit, then hand the
/// response to the hold mode. Out of line, so a fixed limit's `poll` stays small.
#[inline(never)]
fn learn_and_hold<Res, E, H, O>(
    output: Result<Res, E>,
    permit: Permit,
    overload: Option<&O>,
) -> Result<H::Output, BoxError>
where
    E: Into<BoxError>,
    H: Hold<Res>,
    O: Classify<Res>,
{
    let result = output.map_err(Into::into);
    permit.observe(overload, &result);
    result.map(|response| H::hold(response, permit))
}

/// Drives a parked call: waits for its slot, then for the inner service, then
/// calls it and moves `phase` to `Calling`.
fn poll_parked<S, Req, H>(
    mut phase: Pin<&mut Phase<S, Req, S::Future>>,
    calling_permit: &mut Option<Permit>,
    cx: &mut Context<'_>,
) -> Poll<Result<(), BoxError>>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    H: Lend<Req>,
{
    let PhaseProj::Parked { parked } = phase.as_mut().project() else {
        return Poll::Ready(Ok(()));
    };
    let mut p = parked.as_mut().project();
    if std::mem::take(p.look) {
        // The caller's deadline, if the call was made in another task.
        if let (Some(d), Some(sleep)) = (Deadline::current(), p.sleep.as_mut().as_pin_mut()) {
            if d.instant() < sleep.deadline() {
                sleep.reset(d.instant());
            }
        }
    }
    if let Some(waiter) = p.waiter {
        let permit = ready!(waiter.poll_slot(p.sleep, cx))?;
        *p.permit = Some(permit);
        *p.waiter = None;
    }
    // Neither waiting nor holding a slot: the inner service panicked in
    // `poll_ready` or `call` on an earlier poll, and is not asked again.
    if p.permit.is_none() {
        return Poll::Ready(Err(polled_after_completion()));
    }
    // Holding the slot: drive the inner service to readiness. Should it panic,
    // the slot is freed while the panic unwinds, as for a panicking `call`.
    let watch = PanicWatch::arm(|| free_on_unwind(p.permit));
    let polled = p.svc.poll_ready(cx);
    watch.disarm();
    ready!(polled).map_err(Into::into)?;
    let (Some(permit), Some(mut req)) = (p.permit.take(), p.req.take()) else {
        return Poll::Ready(Err(polled_after_completion()));
    };
    let permit = H::lend(permit, &mut req);
    let future = p.svc.call(req);
    phase.set(Phase::Calling { future });
    *calling_permit = Some(permit);
    Poll::Ready(Ok(()))
}

impl<S, Req, H, O> fmt::Debug for ResponseFuture<S, Req, H, O>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match &self.phase {
            Phase::Calling { .. } if self.permit.is_none() => "done",
            Phase::Calling { .. } => "calling",
            Phase::Parked { parked } if parked.waiter.is_some() => "waiting",
            Phase::Parked { .. } => "ready",
            Phase::Rejected { error: None } => "done",
            Phase::Rejected { .. } => "rejected",
            Phase::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("phase", &phase)
            .finish()
    }
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use std::convert::Infallible;
    use std::future::Ready;
    use std::mem::size_of;

    use super::*;
    use crate::hold::UntilResponse;

    /// An inner future the size of an answered `http::Response<()>` (112 bytes).
    type Http = Ready<Result<[u64; 13], Infallible>>;

    struct Answers;

    impl Service<()> for Answers {
        type Response = [u64; 13];
        type Error = Infallible;
        type Future = Http;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _req: ()) -> Http {
            std::future::ready(Ok([0; 13]))
        }
    }

    /// Pinned so that the response future cannot grow back silently: a future is
    /// moved a few times before it is polled (into the caller's state, and
    /// through `IntoFuture`), and past 128 bytes each move is a `memcpy` call
    /// instead of a few inline copies.
    #[test]
    fn the_response_future_adds_16_bytes_to_the_inner_future() {
        assert_eq!(size_of::<Http>(), 112);
        // The slot's pointer, the packed ticket and the flag; the default
        // classifier is zero-sized and the phase's tag fits in a niche.
        assert_eq!(size_of::<Option<Permit>>(), 16);
        assert_eq!(
            size_of::<ResponseFuture<Answers, (), UntilResponse>>(),
            size_of::<Http>() + 16
        );
    }
}
