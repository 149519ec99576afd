//! The response future: owns the ticket and reports exactly once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use seawall_core::{
    on_unwind, BoundedByCurrent, BoxError, CircuitOpen, Classify, Name, OpenCause, Outcome,
};
use tokio::time::Instant;

use crate::machine::{Report, Ticket};
use crate::state::{Lane, Started};

/// An admitted call's ticket. Reports the outcome once with [`Guard::finish`], or,
/// if dropped first, reports the call as cancelled (which frees a probe slot).
///
/// Every admitted call's future carries one, and a future is moved (copied) a few
/// times before it is polled: 24 bytes, a pointer and two words, where the ticket
/// and an `Option<Instant>` would take 16 more (see the size test below). The
/// pointer is to the lane of the breaker the call was admitted through.
#[derive(Debug)]
pub(crate) struct Guard {
    breaker: Option<Arc<Lane>>,
    ticket: PackedTicket,
    /// When the call started, if slow calls are detected.
    started: Started,
}

/// A [`Ticket`] in one word: the epoch in the high half; in the low half 0 for an
/// ordinary call, 1 for a shadow one, and a probe's slot plus 2. (A probe is never
/// a shadow call, and its slot is far below `u32::MAX - 2`: slots are bounded by
/// `half_open_max` and the judged streams still open.)
#[derive(Debug, Clone, Copy)]
struct PackedTicket(u64);

impl PackedTicket {
    #[inline]
    fn pack(ticket: Ticket) -> Self {
        let low = match (ticket.probe, ticket.shadow) {
            (Some(slot), _) => u64::from(slot.saturating_add(2)),
            (None, true) => 1,
            (None, false) => 0,
        };
        Self((u64::from(ticket.epoch) << 32) | low)
    }

    #[inline]
    fn unpack(self) -> Ticket {
        let epoch = (self.0 >> 32) as u32;
        match self.0 as u32 {
            0 => Ticket::normal(epoch),
            1 => Ticket::shadow(epoch),
            slot => Ticket {
                epoch,
                probe: Some(slot - 2),
                shadow: false,
            },
        }
    }
}

impl Guard {
    #[inline]
    pub(crate) fn new(breaker: Arc<Lane>, ticket: Ticket, started: Started) -> Self {
        Self {
            breaker: Some(breaker),
            ticket: PackedTicket::pack(ticket),
            started,
        }
    }

    /// Records a panic in the dependency (its `call` or its future's `poll`): a
    /// failure, as every peer records it. A panic seen only when the future is
    /// dropped would look like a cancellation under `catch_unwind`.
    #[cold]
    pub(crate) fn finish_panicked(&mut self) {
        self.finish(Outcome::Failure, false);
    }

    /// Reports a call the classifier judged: counts the reason it gave for
    /// `outcome`, and marks the report a rehearsal's when that reason says so.
    #[inline]
    pub(crate) fn finish_classified(&mut self, outcome: Outcome, reason: Option<&'static str>) {
        if let (Some(breaker), Some(_)) = (&self.breaker, reason) {
            breaker.reason(outcome, reason);
        }
        self.report(outcome, false, seawall_core::is_rehearsal(reason));
    }

    /// Takes the ticket out, for a holder that reports it later (a response body):
    /// the breaker's lane, the ticket and the start instant, if not already reported.
    #[cfg(feature = "http")]
    pub(crate) fn into_held(mut self) -> Option<(Arc<Lane>, Ticket, Started)> {
        self.breaker
            .take()
            .map(|breaker| (breaker, self.ticket.unpack(), self.started))
    }

    pub(crate) fn is_done(&self) -> bool {
        self.breaker.is_none()
    }

    /// Reports a call the breaker judged itself (a panic, a spent deadline).
    #[inline(always)]
    pub(crate) fn finish(&mut self, outcome: Outcome, timed_out: bool) {
        self.report(outcome, timed_out, false);
    }

    #[inline(always)]
    fn report(&mut self, outcome: Outcome, timed_out: bool, rehearsal: bool) {
        if let Some(breaker) = self.breaker.take() {
            let (slow, now) = if self.started.is_timed() {
                let now = Instant::now();
                (breaker.is_slow(self.started, now), Some(now))
            } else {
                (false, None)
            };
            let report = Report {
                outcome,
                slow,
                timed_out,
                rehearsal,
            };
            breaker.complete(self.ticket.unpack(), report, now, Instant::now);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(breaker) = self.breaker.take() {
            breaker.cancel(self.ticket.unpack(), Instant::now);
        }
    }
}

pin_project! {
    /// The response future of [`CircuitBreaker`](crate::CircuitBreaker) (and of the
    /// keyed variant). A concrete type: no allocation on the admitted path.
    ///
    /// Resolves to the inner service's result (its error boxed), to a
    /// [`CircuitOpen`] error if the call was rejected, or to a
    /// [`DeadlineExceeded`](crate::DeadlineExceeded) error if the request's deadline
    /// passed while the dependency had the call.
    pub struct ResponseFuture<F, C> {
        #[pin]
        kind: Kind<F, C>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, C> {
        Admitted {
            #[pin]
            future: BoundedByCurrent<F>,
            guard: Guard,
            classifier: C,
        },
        Rejected {
            rejection: Option<Box<CircuitOpen>>,
        },
    }
}

impl<F, C> ResponseFuture<F, C> {
    #[inline]
    pub(crate) fn admitted(future: BoundedByCurrent<F>, guard: Guard, classifier: C) -> Self {
        Self {
            kind: Kind::Admitted {
                future,
                guard,
                classifier,
            },
        }
    }

    /// The inner future, the ticket and the classifier of an admitted call not yet
    /// polled; a rejected call's future as it is.
    #[cfg(feature = "http")]
    #[allow(clippy::result_large_err)] // not an error: the future, moved once, unboxed
    pub(crate) fn into_admitted(self) -> Result<(BoundedByCurrent<F>, Guard, C), Self> {
        match self.kind {
            Kind::Admitted {
                future,
                guard,
                classifier,
            } => Ok((future, guard, classifier)),
            kind @ Kind::Rejected { .. } => Err(Self { kind }),
        }
    }

    /// Built and boxed in `call` (the one allocation of a turned-away call); a short
    /// name is copied, not shared.
    #[inline]
    pub(crate) fn rejected(name: &Name, retry_after: Duration, cause: OpenCause) -> Self {
        Self::open(Box::new(CircuitOpen::named(name, cause, Some(retry_after))))
    }

    /// A call turned away with `rejection`, answered at the first poll.
    #[inline]
    pub(crate) fn open(rejection: Box<CircuitOpen>) -> Self {
        Self {
            kind: Kind::Rejected {
                rejection: Some(rejection),
            },
        }
    }
}

impl<F, C> fmt::Debug for ResponseFuture<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Admitted { .. } => "admitted",
            Kind::Rejected { .. } => "rejected",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}

pub(crate) fn polled_after_completion() -> BoxError {
    "circuit breaker response future polled after completion".into()
}

impl<F, C, T, E> Future for ResponseFuture<F, C>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    C: Classify<T>,
{
    type Output = Result<T, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Admitted {
                future,
                guard,
                classifier,
            } => {
                if guard.is_done() {
                    return Poll::Ready(Err(polled_after_completion()));
                }
                let polled = on_unwind(|| future.poll(cx), || guard.finish_panicked());
                match ready!(polled) {
                    Ok(Ok(response)) => {
                        let outcome = classifier.classify(Ok(&response));
                        guard.finish_classified(outcome, classifier.reason(Ok(&response), outcome));
                        Poll::Ready(Ok(response))
                    }
                    Ok(Err(error)) => {
                        let error: BoxError = error.into();
                        let failed = seawall_core::ErrorRef::from(&*error);
                        let outcome = classifier.classify(Err(failed));
                        guard.finish_classified(outcome, classifier.reason(Err(failed), outcome));
                        Poll::Ready(Err(error))
                    }
                    Err(exceeded) => {
                        // The dependency had the call and the budget ran out: too slow.
                        guard.finish(Outcome::Failure, true);
                        Poll::Ready(Err(Box::new(exceeded)))
                    }
                }
            }
            KindProj::Rejected { rejection } => Poll::Ready(Err(match rejection.take() {
                Some(open) => open,
                None => polled_after_completion(),
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::Ready;
    use std::mem::size_of;

    use seawall_core::ErrorsAsFailures;

    use super::*;

    /// An inner future the size of an answered `http::Response<()>` (112 bytes).
    type Http = Ready<Result<[u64; 13], Infallible>>;

    /// Pinned so that the admitted future cannot grow back silently: a future is
    /// moved a few times before it is polled, and past 128 bytes each move is a
    /// `memcpy` call instead of a few inline copies.
    #[test]
    fn an_admitted_future_adds_24_bytes_to_the_bounded_inner_future() {
        assert_eq!(size_of::<Guard>(), 24);
        assert_eq!(size_of::<PackedTicket>(), 8);
        assert_eq!(size_of::<Started>(), 8);
        // What the two words stand for, unpacked.
        assert_eq!(size_of::<Ticket>() + size_of::<Option<Instant>>(), 32);
        assert_eq!(size_of::<Http>(), 112);
        // The guard and nothing else: the classifier is zero-sized and the
        // variant's tag fits in a niche.
        assert_eq!(
            size_of::<ResponseFuture<Http, ErrorsAsFailures>>(),
            size_of::<BoundedByCurrent<Http>>() + 24
        );
    }

    #[test]
    fn a_packed_ticket_unpacks_to_the_same_ticket() {
        let probe = |slot| Ticket {
            epoch: 7,
            probe: Some(slot),
            shadow: false,
        };
        for ticket in [
            Ticket::normal(0),
            Ticket::normal(u32::MAX),
            Ticket::shadow(3),
            Ticket::shadow(u32::MAX),
            probe(0),
            probe(1),
            probe(9_999),
            probe(u32::MAX - 3),
        ] {
            assert_eq!(PackedTicket::pack(ticket).unpack(), ticket, "{ticket:?}");
        }
    }
}
