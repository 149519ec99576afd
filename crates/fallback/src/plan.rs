//! How a layer runs its fallback: one [`Single`] fallback, or a [`Chain`] of named
//! steps tried in order, each bounded by its own timeout and by what remains of the
//! request's deadline.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use seawall_core::{bounded, BoxError, ConfigError, Deadline, DeadlineExceeded, Name};
use tokio::time::{Instant, Sleep};

use crate::error::{StepTimedOut, Unavailable};
use crate::handle::Runtime;
use crate::machine::{step_bound, StepBound, Trigger};
use crate::request::FallbackRequest;
use crate::strategy::Strategy;

mod sealed {
    #[allow(unreachable_pub)]
    pub trait Sealed {}
}

/// A strategy as the builder holds it: [`NoStrategy`], [`Single`] or
/// [`ChainSteps`]. Sealed.
pub trait Spec<K>: sealed::Sealed {
    /// The strategy the layer runs.
    type Plan;

    #[doc(hidden)]
    fn finish(self) -> Result<Finished<Self::Plan>, ConfigError>;
}

/// A finished strategy: the plan, its steps `(name, timeout)`, and whether it
/// needs the request's deadline.
#[doc(hidden)]
#[derive(Debug)]
pub struct Finished<P> {
    pub(crate) plan: P,
    pub(crate) steps: Vec<(Name, Option<Duration>)>,
    pub(crate) uses_deadline: bool,
}

/// How the layer runs its fallback: implemented by [`Single`] and [`Chain`]. Sealed.
pub trait Plan<K>: sealed::Sealed {
    /// The fallback's answer.
    type Response;
    /// The future of one run: the answer and the index of the step that served, or
    /// the final error ([`Unavailable`] or
    /// [`FallbacksExhausted`](seawall_core::FallbacksExhausted)) after
    /// [`conclude`](Plan::conclude).
    type Future: Future<Output = Result<(Self::Response, usize), BoxError>>;

    #[doc(hidden)]
    fn run(&self, req: FallbackRequest<K>, rt: &Arc<Runtime>) -> Self::Future;

    #[doc(hidden)]
    fn conclude(&self, error: BoxError, trigger: Trigger, rt: &Runtime) -> BoxError;
}

/// No strategy yet: building with it is a configuration error.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoStrategy;

impl sealed::Sealed for NoStrategy {}

impl<K> Spec<K> for NoStrategy {
    type Plan = NoStrategy;

    fn finish(self) -> Result<Finished<NoStrategy>, ConfigError> {
        Err(ConfigError::new(
            "strategy",
            "no fallback strategy: set a value, sync_fn, async_fn, service, unavailable, fallback or chain steps",
        ))
    }
}

/// The bound of a step starting now; reads the clock only for a step timeout.
fn bound_now(timeout: Option<Duration>, deadline: Option<Deadline>) -> StepBound {
    match (timeout, deadline) {
        (None, None) => StepBound::Unbounded,
        (None, Some(d)) => StepBound::Deadline { at: d.instant() },
        (Some(_), _) => step_bound(Instant::now(), timeout, deadline),
    }
}

/// The cause of a step cut off by `bound`.
fn timeout_cause(bound: StepBound, step: &Name) -> BoxError {
    match bound {
        StepBound::Timeout { timeout, .. } => Box::new(StepTimedOut::new(step.clone(), timeout)),
        StepBound::Deadline { .. } | StepBound::Unbounded => Box::new(DeadlineExceeded::new()),
    }
}

/// One fallback, run as the single step of the layer (its name is the step name in
/// the [`Served`](crate::Served) marker and in metrics).
#[derive(Clone)]
pub struct Single<F> {
    name: Name,
    timeout: Option<Duration>,
    fallback: F,
}

impl<F> Single<F> {
    pub(crate) fn new(name: Name, fallback: F) -> Self {
        Self {
            name,
            timeout: None,
            fallback,
        }
    }

    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = Some(timeout);
    }
}

impl<F> fmt::Debug for Single<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Single")
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<F> sealed::Sealed for Single<F> {}

impl<K, F: Strategy<K>> Spec<K> for Single<F> {
    type Plan = Single<F>;

    fn finish(self) -> Result<Finished<Single<F>>, ConfigError> {
        Ok(Finished {
            steps: vec![(self.name.clone(), self.timeout)],
            uses_deadline: !self.fallback.is_immediate(),
            plan: self,
        })
    }
}

impl<K, F: Strategy<K>> Plan<K> for Single<F> {
    type Response = F::Response;
    type Future = SingleFuture<F::Future>;

    #[inline]
    fn run(&self, req: FallbackRequest<K>, rt: &Arc<Runtime>) -> Self::Future {
        let bound = if self.fallback.is_immediate() {
            StepBound::Unbounded
        } else {
            bound_now(rt.step_timeout(0), req.deadline())
        };
        let timer = bound.at().map(|at| {
            Box::pin(Timer {
                sleep: tokio::time::sleep_until(at),
                bound,
                step: self.name.clone(),
            })
        });
        SingleFuture {
            inner: self.fallback.call(req),
            timer,
        }
    }

    fn conclude(&self, error: BoxError, trigger: Trigger, rt: &Runtime) -> BoxError {
        rt.conclude_step(0, error, trigger)
    }
}

pin_project! {
    /// What bounds a step that may wait (boxed: a value needs none, and the
    /// future of a value stays small).
    #[derive(Debug)]
    struct Timer {
        #[pin]
        sleep: Sleep,
        bound: StepBound,
        step: Name,
    }
}

pin_project! {
    /// The future of a [`Single`] fallback: the answer, bounded by a timer only
    /// when the step has a timeout or the request a deadline.
    #[derive(Debug)]
    pub struct SingleFuture<F> {
        #[pin]
        inner: F,
        timer: Option<Pin<Box<Timer>>>,
    }
}

impl<F, R> Future for SingleFuture<F>
where
    F: Future<Output = Result<R, BoxError>>,
{
    type Output = Result<(R, usize), BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.inner.poll(cx) {
            return Poll::Ready(out.map(|r| (r, 0)));
        }
        match this.timer {
            Some(timer) => {
                let timer = timer.as_mut().project();
                ready!(timer.sleep.poll(cx));
                Poll::Ready(Err(timeout_cause(*timer.bound, timer.step)))
            }
            None => Poll::Pending,
        }
    }
}

type StepFuture<R> = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;
type StepCall<K, R> = Box<dyn Fn(FallbackRequest<K>) -> StepFuture<R> + Send + Sync>;

struct ChainStep<K, R> {
    name: Name,
    timeout: Option<Duration>,
    immediate: bool,
    call: StepCall<K, R>,
}

/// Named steps tried in order (real-time → cache → last known), each
/// bounded by its own timeout and by what remains of the request's deadline. The
/// first answer is served; a step answering [`Unavailable`] stops the chain; when
/// every step fails the error is
/// [`FallbacksExhausted`](seawall_core::FallbacksExhausted) with each step's cause.
///
/// Each run boxes its future and each step's (the chain is off the hot path), and
/// shares the primary's error between steps, so the captured data must be `Clone`.
pub struct Chain<K, R> {
    steps: Arc<[ChainStep<K, R>]>,
}

impl<K, R> Clone for Chain<K, R> {
    fn clone(&self) -> Self {
        Self {
            steps: Arc::clone(&self.steps),
        }
    }
}

impl<K, R> fmt::Debug for Chain<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.steps.iter().map(|s| (&s.name, s.timeout)))
            .finish()
    }
}

/// A [`Chain`] under construction, as the builder holds it.
pub struct ChainSteps<K, R> {
    steps: Vec<ChainStep<K, R>>,
}

impl<K, R> fmt::Debug for ChainSteps<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.steps.iter().map(|s| (&s.name, s.timeout)))
            .finish()
    }
}

impl<K, R> sealed::Sealed for ChainSteps<K, R> {}

impl<K, R> Spec<K> for ChainSteps<K, R> {
    type Plan = Chain<K, R>;

    fn finish(self) -> Result<Finished<Chain<K, R>>, ConfigError> {
        if self.steps.is_empty() {
            return Err(ConfigError::new("steps", "a chain needs at least one step"));
        }
        Ok(Finished {
            steps: self
                .steps
                .iter()
                .map(|s| (s.name.clone(), s.timeout))
                .collect(),
            uses_deadline: true,
            plan: Chain {
                steps: self.steps.into(),
            },
        })
    }
}

impl<K, R> ChainSteps<K, R>
where
    K: Send + 'static,
    R: Send + 'static,
{
    pub(crate) fn new() -> Self {
        Self { steps: Vec::new() }
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(|s| &*s.name)
    }

    pub(crate) fn push<F>(&mut self, name: Name, timeout: Option<Duration>, fallback: F)
    where
        F: Strategy<K, Response = R> + Send + Sync + 'static,
        F::Future: Send + 'static,
    {
        let immediate = fallback.is_immediate();
        self.steps.push(ChainStep {
            name,
            timeout,
            immediate,
            call: Box::new(move |req| Box::pin(fallback.call(req))),
        });
    }
}

impl<K, R> sealed::Sealed for Chain<K, R> {}

/// The future of a [`Chain`] run (boxed: the chain is off the hot path).
pub type ChainFuture<R> = Pin<Box<dyn Future<Output = Result<(R, usize), BoxError>> + Send>>;

impl<K, R> Plan<K> for Chain<K, R>
where
    K: Clone + Send + Sync + 'static,
    R: Send + 'static,
{
    type Response = R;
    type Future = ChainFuture<R>;

    fn run(&self, req: FallbackRequest<K>, rt: &Arc<Runtime>) -> Self::Future {
        let steps = Arc::clone(&self.steps);
        let rt = Arc::clone(rt);
        let trigger = req.trigger();
        Box::pin(async move {
            let req = req.into_shared();
            let mut failures = Vec::with_capacity(steps.len());
            for (i, step) in steps.iter().enumerate() {
                let bound = if step.immediate {
                    StepBound::Unbounded
                } else {
                    bound_now(rt.step_timeout(i), req.deadline())
                };
                let fut = (step.call)(req.for_step());
                match bounded(fut, bound.at().map(Deadline::at)).await {
                    Ok(Ok(answer)) => return Ok((answer, i)),
                    Ok(Err(e)) => match e.downcast::<Unavailable>() {
                        Ok(answer) => {
                            let answer: BoxError = Box::new(rt.declined(i, *answer, trigger));
                            return Err(answer);
                        }
                        Err(cause) => failures.push(rt.step_failed(i, cause)),
                    },
                    Err(_) => failures.push(rt.step_failed(i, timeout_cause(bound, &step.name))),
                }
            }
            Err(rt.exhausted(failures))
        })
    }

    fn conclude(&self, error: BoxError, _trigger: Trigger, _rt: &Runtime) -> BoxError {
        error
    }
}
