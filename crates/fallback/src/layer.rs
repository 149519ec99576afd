//! [`FallbackLayer`]: one shared state per layer, shared by every service it builds;
//! and the [`FallbackBuilder`] that makes it.

use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use seawall_core::{check_duration, BoxError, ConfigError, Name, RejectionKind};
use tower_layer::Layer;

use crate::config::FallbackConfig;
use crate::handle::{Handle, Runtime, StepHook};
use crate::machine::{chain_has, ErrorMatcher, NoFailures, Rejections, Triggers};
use crate::mode::Plain;
use crate::plan::{ChainSteps, NoStrategy, Single, Spec};
use crate::request::{CaptureFn, Captures, FallbackRequest, NoCapture};
use crate::service::Fallback;
use crate::state::Shared;
use crate::strategy::{
    async_fn, service, sync_fn, unavailable, value, AsyncFn, Decline, ServiceFallback, Strategy,
    SyncFn, Value,
};

/// Answers with a declared alternative when the service below fails in a way you
/// selected (see the [crate docs](crate)).
///
/// Built by [`FallbackLayer::builder`]. The layer holds **one shared state** (its
/// counters, controls and live configuration, reached through
/// [`handle`](Self::handle)), created at build: every service built from it, and
/// every clone of those services, shares it. Build one layer per dependency.
///
/// Type parameters: `Cap` the capture closure, `P` the strategy ([`Single`](crate::Single)
/// or [`Chain`](crate::Chain)), `C` the failure classifier, `M` the
/// [mode](crate::Mode) (generic, or with the `http` feature the `Either` body and
/// the HTTP server modes).
pub struct FallbackLayer<Cap = NoCapture, P = NoStrategy, C = NoFailures, M = Plain> {
    shared: Arc<Shared<Cap, P, C, M>>,
}

impl<Cap, P, C, M> Clone for FallbackLayer<Cap, P, C, M> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Cap, P, C, M> fmt::Debug for FallbackLayer<Cap, P, C, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackLayer")
            .field("name", &self.shared.rt.name)
            .finish_non_exhaustive()
    }
}

impl FallbackLayer {
    /// Starts a builder for the fallback `name` (used in metrics, events and the
    /// [`Served`](crate::Served) marker).
    pub fn builder(name: impl Into<Name>) -> FallbackBuilder {
        FallbackBuilder::new(name.into())
    }
}

impl<Cap, P, C, M> FallbackLayer<Cap, P, C, M> {
    pub(crate) fn from_shared(shared: Shared<Cap, P, C, M>) -> Self {
        Self {
            shared: Arc::new(shared),
        }
    }

    /// The handle to this layer's shared state (counters, controls, configuration).
    pub fn handle(&self) -> Handle {
        Handle::new(Arc::clone(&self.shared.rt))
    }

    /// The layer's name.
    pub fn name(&self) -> &str {
        &self.shared.rt.name
    }
}

impl<S, Cap, P, C, M> Layer<S> for FallbackLayer<Cap, P, C, M> {
    type Service = Fallback<S, Cap, P, C, M>;

    fn layer(&self, inner: S) -> Self::Service {
        Fallback::new(inner, Arc::clone(&self.shared))
    }
}

/// Builds a [`FallbackLayer`]; made by [`FallbackLayer::builder`].
///
/// Set, in any order: the triggers ([`on_rejection`](Self::on_rejection),
/// [`on_failure`](Self::on_failure), [`on_error`](Self::on_error)); a
/// [`capture`](Self::capture) closure (before the strategy, since the strategy's
/// closures receive what it captures); one strategy — [`value`](Self::value),
/// [`sync_fn`](Self::sync_fn), [`async_fn`](Self::async_fn), [`service`](Self::service),
/// [`unavailable`](Self::unavailable), [`fallback`](Self::fallback) — or a chain of
/// [`step`](Self::step)s. [`build`](Self::build) validates and never panics: no
/// strategy, no trigger, an empty or repeated step name, or a zero timeout is a
/// [`ConfigError`].
pub struct FallbackBuilder<Cap = NoCapture, P = NoStrategy, C = NoFailures, M = Plain> {
    parts: Parts,
    capture: Cap,
    plan: P,
    classifier: C,
    mode: M,
}

/// What the builder carries unchanged when a setter changes one of its type
/// parameters (the capture, the strategy, the classifier or the mode).
struct Parts {
    name: Name,
    has_classifier: bool,
    error_types: Vec<ErrorMatcher>,
    config: FallbackConfig,
    hook: Option<StepHook>,
    problem: Option<ConfigError>,
}

impl<Cap, P: fmt::Debug, C, M> fmt::Debug for FallbackBuilder<Cap, P, C, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = &self.parts;
        f.debug_struct("FallbackBuilder")
            .field("name", &parts.name)
            .field("plan", &self.plan)
            .field("config", &parts.config)
            .field("has_classifier", &parts.has_classifier)
            .field("error_types", &parts.error_types.len())
            .finish_non_exhaustive()
    }
}

impl FallbackBuilder {
    pub(crate) fn new(name: Name) -> Self {
        Self {
            parts: Parts {
                name,
                has_classifier: false,
                error_types: Vec::new(),
                config: FallbackConfig::default(),
                hook: None,
                problem: None,
            },
            capture: NoCapture,
            plan: NoStrategy,
            classifier: NoFailures,
            mode: Plain,
        }
    }
}

impl<Cap, P, C, M> FallbackBuilder<Cap, P, C, M> {
    fn with_plan<P2>(self, plan: P2) -> FallbackBuilder<Cap, P2, C, M> {
        FallbackBuilder {
            parts: self.parts,
            capture: self.capture,
            plan,
            classifier: self.classifier,
            mode: self.mode,
        }
    }

    pub(crate) fn with_mode<M2>(self, mode: M2) -> FallbackBuilder<Cap, P, C, M2> {
        FallbackBuilder {
            parts: self.parts,
            capture: self.capture,
            plan: self.plan,
            classifier: self.classifier,
            mode,
        }
    }

    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn mode_mut(&mut self) -> &mut M {
        &mut self.mode
    }

    fn problem(&mut self, e: ConfigError) {
        self.parts.problem.get_or_insert(e);
    }

    /// Fires the fallback when a seawall rejection of `kind` is found in the
    /// primary's error chain (with [`find_rejection`](seawall_core::find_rejection)).
    /// A rejection of a kind not selected passes through untouched.
    #[must_use]
    pub fn on_rejection(mut self, kind: RejectionKind) -> Self {
        self.parts.config.on_rejections = self.parts.config.on_rejections.with(kind);
        self
    }

    /// Fires the fallback for every rejection kind in `kinds` (e.g.
    /// [`Rejections::ALL`], [`Rejections::ADMISSION`]); replaces the selection.
    #[must_use]
    pub fn on_rejections(mut self, kinds: Rejections) -> Self {
        self.parts.config.on_rejections = kinds;
        self
    }

    /// Fires the fallback when an error of type `E` is in the primary's error chain
    /// (found by downcasting). Checked after rejections, before the classifier.
    #[must_use]
    pub fn on_error<E: Error + 'static>(mut self) -> Self {
        self.parts.error_types.push(chain_has::<E> as ErrorMatcher);
        self
    }

    /// Fires the fallback when `classifier` calls the primary's result a
    /// [`Failure`](seawall_core::Outcome::Failure): with
    /// [`HttpStatus`](seawall_core::HttpStatus), a `503` answer fires it and a `404`
    /// ("no quote for that destination", a business answer) does not. Seawall
    /// rejections are not given to the classifier: [`on_rejection`](Self::on_rejection)
    /// alone decides them.
    pub fn on_failure<C2>(mut self, classifier: C2) -> FallbackBuilder<Cap, P, C2, M> {
        self.parts.has_classifier = true;
        FallbackBuilder {
            parts: self.parts,
            capture: self.capture,
            plan: self.plan,
            classifier,
            mode: self.mode,
        }
    }

    /// Tells `hook` of each failed step, with the step's name and cause (a timed-out
    /// step's cause is [`StepTimedOut`](crate::StepTimedOut) or
    /// [`DeadlineExceeded`](seawall_core::DeadlineExceeded)).
    #[must_use]
    pub fn on_step_failed<H>(mut self, hook: H) -> Self
    where
        H: Fn(&str, &(dyn Error + 'static)) + Send + Sync + 'static,
    {
        self.parts.hook = Some(Arc::new(hook));
        self
    }

    /// Applies `config`: it replaces the selected rejection kinds, overrides the
    /// named steps' timeouts, and may build the layer disabled.
    #[must_use]
    pub fn config(mut self, config: FallbackConfig) -> Self {
        self.parts.config = config;
        self
    }

    /// Builds the layer.
    pub fn build(self) -> Result<FallbackLayer<Cap, P::Plan, C, M>, ConfigError>
    where
        Cap: Captures,
        P: Spec<Cap::Output>,
    {
        let parts = self.parts;
        if let Some(problem) = parts.problem {
            return Err(problem);
        }
        if parts.name.trim().is_empty() {
            return Err(ConfigError::new("name", "must not be empty"));
        }
        let finished = self.plan.finish()?;
        let other_triggers = parts.has_classifier || !parts.error_types.is_empty();
        if parts.config.on_rejections.is_empty() && !other_triggers {
            return Err(ConfigError::new(
                "triggers",
                "nothing would fire the fallback: select rejections (on_rejection), a failure classifier (on_failure) or error types (on_error)",
            ));
        }
        let rt = Runtime::new(
            parts.name,
            &finished.steps,
            other_triggers,
            &parts.config,
            parts.hook,
        )?;
        Ok(FallbackLayer::from_shared(Shared {
            capture: self.capture,
            plan: finished.plan,
            triggers: Triggers {
                classifier: self.classifier,
                error_types: parts.error_types,
            },
            mode: self.mode,
            rt: Arc::new(rt),
            uses_deadline: finished.uses_deadline,
        }))
    }
}

impl<Cap, P, C> FallbackBuilder<Cap, P, C, Plain> {
    /// Answers unmarked ([`Unmarked`](crate::Unmarked)), for a response type with
    /// nowhere to record the [`Served`](crate::Served) marker (a `String`, a number).
    pub fn unmarked(self) -> FallbackBuilder<Cap, P, C, crate::mode::Unmarked> {
        self.with_mode(crate::mode::Unmarked)
    }
}

impl<C, M> FallbackBuilder<NoCapture, NoStrategy, C, M> {
    /// Captures what the fallback needs from each request, before the primary
    /// consumes it: `capture` runs exactly once per call, on every call, and only
    /// what it returns reaches the fallback. No `Req: Clone` bound, nothing cloned
    /// on the path where the primary succeeds beyond what the closure takes.
    pub fn capture<Req, K, G>(
        self,
        capture: G,
    ) -> FallbackBuilder<CaptureFn<G, Req>, NoStrategy, C, M>
    where
        G: Fn(&Req) -> K,
    {
        self.with_capture(CaptureFn::new(capture))
    }
}

impl<P, C, M> FallbackBuilder<NoCapture, P, C, M> {
    fn with_capture<Cap2>(self, capture: Cap2) -> FallbackBuilder<Cap2, P, C, M> {
        FallbackBuilder {
            parts: self.parts,
            capture,
            plan: self.plan,
            classifier: self.classifier,
            mode: self.mode,
        }
    }
}

fn check_step_name(name: &Name) -> Result<(), ConfigError> {
    if name.trim().is_empty() {
        Err(ConfigError::new("steps", "a step name must not be empty"))
    } else {
        Ok(())
    }
}

impl<Cap: Captures, C, M> FallbackBuilder<Cap, NoStrategy, C, M> {
    /// Answers with a clone of `v` (step name `value`). Only for answers that are
    /// true whatever the request — never a made-up price.
    pub fn value<R: Clone>(self, v: R) -> FallbackBuilder<Cap, Single<Value<R>>, C, M> {
        self.fallback("value", value(v))
    }

    /// Answers with a synchronous closure over the [`FallbackRequest`] (step name `fn`).
    pub fn sync_fn<F, R, E>(self, f: F) -> FallbackBuilder<Cap, Single<SyncFn<F>>, C, M>
    where
        F: Fn(FallbackRequest<Cap::Output>) -> Result<R, E>,
        E: Into<BoxError>,
    {
        self.fallback("fn", sync_fn(f))
    }

    /// Answers with an async closure over the [`FallbackRequest`] (step name `fn`).
    pub fn async_fn<F, Fut, R, E>(self, f: F) -> FallbackBuilder<Cap, Single<AsyncFn<F>>, C, M>
    where
        F: Fn(FallbackRequest<Cap::Output>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
        E: Into<BoxError>,
    {
        self.fallback("fn", async_fn(f))
    }

    /// Answers with a Tower service over [`FallbackRequest`] (step name `service`),
    /// e.g. a backup supplier.
    pub fn service<S>(self, svc: S) -> FallbackBuilder<Cap, Single<ServiceFallback<S>>, C, M> {
        self.fallback("service", service(svc))
    }

    /// Answers [`Unavailable`](crate::Unavailable) (step name `unavailable`): the
    /// fallback declines to invent an answer.
    pub fn unavailable<R>(
        self,
        reason: impl Into<Cow<'static, str>>,
    ) -> FallbackBuilder<Cap, Single<Decline<R>>, C, M> {
        self.fallback("unavailable", unavailable(reason))
    }

    /// Answers with any [`Strategy`], under the step name `name`.
    pub fn fallback<F>(
        self,
        name: impl Into<Name>,
        fallback: F,
    ) -> FallbackBuilder<Cap, Single<F>, C, M> {
        let name = name.into();
        let mut b = self.with_plan(Single::new(name.clone(), fallback));
        if let Err(e) = check_step_name(&name) {
            b.problem(e);
        }
        b
    }

    /// Starts a chain with an async step `name`, bounded by `timeout` (and by what
    /// remains of the request's deadline).
    pub fn step<F, Fut, R, E>(
        self,
        name: impl Into<Name>,
        timeout: Duration,
        f: F,
    ) -> FallbackBuilder<Cap, ChainSteps<Cap::Output, R>, C, M>
    where
        Cap::Output: Send + 'static,
        F: Fn(FallbackRequest<Cap::Output>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
        R: Send + 'static,
        E: Into<BoxError> + 'static,
    {
        self.with_plan(ChainSteps::new()).step(name, timeout, f)
    }

    /// Starts a chain with any [`Strategy`] as step `name`, bounded by `timeout` if
    /// given (and always by what remains of the request's deadline).
    pub fn step_with<F>(
        self,
        name: impl Into<Name>,
        timeout: Option<Duration>,
        fallback: F,
    ) -> FallbackBuilder<Cap, ChainSteps<Cap::Output, F::Response>, C, M>
    where
        Cap::Output: Send + 'static,
        F: Strategy<Cap::Output> + Send + Sync + 'static,
        F::Future: Send + 'static,
        F::Response: Send + 'static,
    {
        self.with_plan(ChainSteps::new())
            .step_with(name, timeout, fallback)
    }
}

impl<Cap, F, C, M> FallbackBuilder<Cap, Single<F>, C, M> {
    /// Bounds the single fallback by `timeout` (and by what remains of the
    /// request's deadline); an immediate fallback (a value) sets no timer.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        match check_duration("timeout", timeout) {
            Ok(t) => self.plan.set_timeout(t),
            Err(e) => self.problem(e),
        }
        self
    }
}

impl<Cap, K, R, C, M> FallbackBuilder<Cap, ChainSteps<K, R>, C, M>
where
    Cap: Captures<Output = K>,
    K: Send + 'static,
    R: Send + 'static,
{
    /// Adds an async step `name`, tried after the previous ones, bounded by
    /// `timeout` (and by what remains of the request's deadline).
    #[must_use]
    pub fn step<F, Fut, E>(self, name: impl Into<Name>, timeout: Duration, f: F) -> Self
    where
        F: Fn(FallbackRequest<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        self.step_with(name, Some(timeout), async_fn(f))
    }

    /// Adds any [`Strategy`] as step `name`, bounded by `timeout` if given (and
    /// always by what remains of the request's deadline).
    #[must_use]
    pub fn step_with<F>(
        mut self,
        name: impl Into<Name>,
        timeout: Option<Duration>,
        fallback: F,
    ) -> Self
    where
        F: Strategy<K, Response = R> + Send + Sync + 'static,
        F::Future: Send + 'static,
    {
        let name = name.into();
        if let Err(e) = check_step_name(&name) {
            self.problem(e);
        }
        if self.plan.names().any(|n| n == &*name) {
            self.problem(ConfigError::new(
                "steps",
                format!("step `{name}` is declared twice"),
            ));
        }
        if let Some(t) = timeout {
            if let Err(e) = check_duration("steps", t) {
                self.problem(ConfigError::new(
                    "steps",
                    format!("step `{name}`: timeout {}", e.problem()),
                ));
            }
        }
        self.plan.push(name, timeout, fallback);
        self
    }

    /// Adds a step `name` that answers a clone of `v` at once.
    #[must_use]
    pub fn step_value(self, name: impl Into<Name>, v: R) -> Self
    where
        R: Clone + Sync,
    {
        self.step_with(name, None, value(v))
    }

    /// Adds a step `name` that declines: the chain answers
    /// [`Unavailable`](crate::Unavailable) with `reason` (a missing quote never
    /// becomes a price).
    #[must_use]
    pub fn step_unavailable(
        self,
        name: impl Into<Name>,
        reason: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.step_with(name, None, unavailable::<R>(reason))
    }
}
