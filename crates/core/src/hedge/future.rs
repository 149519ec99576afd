//! The response future: the first attempt, the timer, the hedges in flight, and
//! which answer the caller gets.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use super::service::HedgeIf;
use super::state::Shared;
use super::telemetry::HedgeRefusal;
use crate::classify::{Classify, ErrorRef, Outcome};
use crate::deadline::Deadline;
use crate::rejection::BoxError;

/// What may still send hedges: a clone of the inner service, a copy of the request
/// and the rule that copies it again.
pub(crate) struct Spare<S, Req, F> {
    pub(crate) service: S,
    pub(crate) request: Req,
    pub(crate) hedge_if: F,
}

/// Owns the first attempt's start; records it as a censored sample if the first
/// attempt is dropped before it answered (a hedge won, or the caller gave up).
struct Watch {
    shared: Arc<Shared>,
    start: Instant,
    first_running: bool,
}

impl Watch {
    /// The first attempt answered, or is being dropped at `now`.
    fn first_ended(&mut self, now: Instant) {
        if std::mem::take(&mut self.first_running) && self.shared.measures() {
            self.shared
                .record_first(now.saturating_duration_since(self.start), now);
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.first_running && self.shared.measures() {
            self.first_ended(Instant::now());
        }
    }
}

pin_project! {
    /// The response future of [`Hedge`](super::Hedge): the first attempt, and the
    /// hedges it sent when the first attempt was slow.
    ///
    /// It answers with the first result the classifier calls a success, and drops
    /// every other attempt at once. When no attempt succeeds, it answers with the
    /// first attempt's result (see the module docs). Dropping it drops every attempt.
    pub struct HedgeFuture<S, Req, C, F>
    where
        S: Service<Req>,
    {
        #[pin]
        first: Option<S::Future>,
        #[pin]
        timer: Option<Sleep>,
        hedges: Vec<Pin<Box<S::Future>>>,
        spare: Option<Spare<S, Req, F>>,
        // Decided at the call: why no hedge will be sent, counted if one falls due.
        refusal: Option<HedgeRefusal>,
        // The first attempt's result, kept while hedges are still in flight.
        first_result: Option<Result<S::Response, BoxError>>,
        classifier: C,
        watch: Watch,
        attempts: usize,
        // A hedge is due and waits for the inner service to be ready.
        due: bool,
    }
}

/// What an attempt's result means for the request.
enum Verdict {
    Success,
    Rejected,
    Failure,
}

fn judge<Res, C: Classify<Res>>(classifier: &C, result: &Result<Res, BoxError>) -> Verdict {
    let input = result.as_ref().map_err(|e| ErrorRef::from(&**e));
    if input.is_err_and(|e| e.rejection().is_some()) {
        return Verdict::Rejected;
    }
    match classifier.classify(input) {
        Outcome::Success => Verdict::Success,
        Outcome::Failure | Outcome::Ignore => Verdict::Failure,
    }
}

impl<S, Req, C, F> HedgeFuture<S, Req, C, F>
where
    S: Service<Req>,
{
    pub(crate) fn new(
        first: S::Future,
        spare: Option<Spare<S, Req, F>>,
        refusal: Option<HedgeRefusal>,
        classifier: C,
        shared: Arc<Shared>,
        start: Instant,
    ) -> Self {
        Self {
            first: Some(first),
            timer: None,
            hedges: Vec::new(),
            spare,
            refusal,
            first_result: None,
            classifier,
            watch: Watch {
                shared,
                start,
                first_running: true,
            },
            attempts: 1,
            due: false,
        }
    }
}

impl<S, Req, C, F> Future for HedgeFuture<S, Req, C, F>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: Classify<S::Response>,
    F: HedgeIf<Req>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            // The first attempt.
            if let Some(first) = this.first.as_mut().as_pin_mut() {
                if let Poll::Ready(result) = first.poll(cx) {
                    this.first.set(None);
                    this.watch.first_ended(Instant::now());
                    let result = result.map_err(Into::into);
                    // No hedge is sent after the first attempt answered: hedges are for
                    // slowness; failures are the retry layer's.
                    this.timer.set(None);
                    *this.spare = None;
                    *this.due = false;
                    match judge(this.classifier, &result) {
                        Verdict::Success => {
                            this.hedges.clear();
                            return Poll::Ready(result);
                        }
                        Verdict::Rejected | Verdict::Failure if this.hedges.is_empty() => {
                            return Poll::Ready(result);
                        }
                        Verdict::Rejected | Verdict::Failure => {
                            *this.first_result = Some(result);
                        }
                    }
                }
            }

            // The hedges in flight.
            let mut i = 0;
            while i < this.hedges.len() {
                let Poll::Ready(result) = this.hedges[i].as_mut().poll(cx) else {
                    i += 1;
                    continue;
                };
                drop(this.hedges.swap_remove(i));
                let result = result.map_err(Into::into);
                match judge(this.classifier, &result) {
                    Verdict::Success => {
                        let shared = this.watch.shared.clone();
                        // The losers go at once: the first attempt is recorded as a
                        // censored sample, and frees what it held below.
                        this.first.set(None);
                        this.watch.first_ended(Instant::now());
                        this.hedges.clear();
                        this.timer.set(None);
                        *this.spare = None;
                        shared.won();
                        return Poll::Ready(result);
                    }
                    Verdict::Rejected => {
                        // Refused by an open breaker or a full bulkhead: the next hedge
                        // would be too. The caller never sees this refusal.
                        if this.spare.take().is_some() {
                            this.watch.shared.refused(HedgeRefusal::Rejected);
                        }
                        this.timer.set(None);
                        *this.due = false;
                    }
                    Verdict::Failure => {}
                }
            }
            if this.first.is_none() && this.hedges.is_empty() {
                return Poll::Ready(
                    this.first_result
                        .take()
                        .unwrap_or_else(|| Err("HedgeFuture polled after it completed".into())),
                );
            }
            if this.first.is_none() {
                return Poll::Pending;
            }

            // The next hedge.
            let max_attempts = this.watch.shared.config.max_attempts;
            if *this.attempts >= max_attempts {
                return Poll::Pending;
            }
            if !*this.due {
                if this.timer.is_none() {
                    if this.spare.is_none() && this.refusal.is_none() {
                        // Hedging ended (a rejection, a refusal already counted).
                        return Poll::Pending;
                    }
                    let now = Instant::now();
                    let at = crate::time::later(now, this.watch.shared.delay(now));
                    this.timer.set(Some(tokio::time::sleep_until(at)));
                }
                if let Some(timer) = this.timer.as_mut().as_pin_mut() {
                    ready!(timer.poll(cx));
                }
                this.timer.set(None);
                if let Some(cause) = this.refusal.take() {
                    this.watch.shared.refused(cause);
                    *this.spare = None;
                    return Poll::Pending;
                }
                if !deadline_fits(&this.watch.shared) {
                    this.watch.shared.refused(HedgeRefusal::Deadline);
                    *this.spare = None;
                    return Poll::Pending;
                }
                *this.due = true;
            }
            let Some(spare) = this.spare.as_mut() else {
                *this.due = false;
                return Poll::Pending;
            };
            match spare.service.poll_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => {
                    // The service cannot take a hedge; the first attempt goes on.
                    *this.spare = None;
                    *this.due = false;
                    return Poll::Pending;
                }
                Poll::Ready(Ok(())) => {}
            }
            *this.due = false;
            let now = Instant::now();
            let shared = &this.watch.shared;
            // Checked again: waiting for readiness spends the deadline too.
            if !deadline_fits(shared) {
                shared.refused(HedgeRefusal::Deadline);
                *this.spare = None;
                return Poll::Pending;
            }
            let last = *this.attempts + 1 >= max_attempts;
            let request = if last {
                None
            } else {
                spare.hedge_if.copy_for_hedge(&spare.request)
            };
            // Last, so that a hedge refused for another cause takes nothing from it.
            if !shared.withdraw(now) {
                shared.refused(HedgeRefusal::Budget);
                *this.spare = None;
                return Poll::Pending;
            }
            *this.attempts += 1;
            shared.sent(*this.attempts);
            let hedge = match request {
                Some(copy) => {
                    let spare_request = std::mem::replace(&mut spare.request, copy);
                    // A hedge takes free capacity or none: it never queues.
                    crate::wait::without_waiting(|| spare.service.call(spare_request))
                }
                None => {
                    let Some(Spare {
                        mut service,
                        request,
                        ..
                    }) = this.spare.take()
                    else {
                        return Poll::Pending;
                    };
                    if !last {
                        // The rule gave no further copy: this hedge is the last one.
                        shared.refused(HedgeRefusal::NotIdempotent);
                    }
                    crate::wait::without_waiting(|| service.call(request))
                }
            };
            this.hedges.push(Box::pin(hedge));
            // Polled at the top of the loop, then the timer for the one after it.
        }
    }
}

/// Whether `min_attempt_time` fits in what remains of the current deadline (always,
/// with no deadline).
fn deadline_fits(shared: &Shared) -> bool {
    Deadline::current()
        .is_none_or(|d| d.remaining(Instant::now()) >= shared.config.min_attempt_time)
}

impl<S, Req, C, F> fmt::Debug for HedgeFuture<S, Req, C, F>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgeFuture")
            .field("name", &self.watch.shared.name)
            .field("attempts", &self.attempts)
            .field(
                "in_flight",
                &(usize::from(self.first.is_some()) + self.hedges.len()),
            )
            .finish_non_exhaustive()
    }
}
