//! The fallback's own answers and errors: the [`Served`] marker, the explicit
//! [`Unavailable`] answer, and a step's [`StepTimedOut`].

use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use seawall_core::Name;

use crate::machine::Trigger;

/// Marks a response served by a fallback: which fallback and step served it, and
/// why the primary's answer was not used (the `source` field, which tells
/// callers and metrics fresh from stale).
///
/// Where to find it depends on the mode: in the HTTP modes (feature `http`), in the
/// response's body (`seawall_fallback::http::served(&res)`), at no cost; in the
/// generic mode, a response of your own type receives it through [`Mark`], and an
/// `http::Response` in its extensions (`res.extensions().get::<Served>()`).
#[derive(Clone)]
pub struct Served {
    origin: Arc<Origin>,
    trigger: Trigger,
}

/// Which fallback and step: one allocation per step, made when the layer is built,
/// so marking an answer costs one reference count.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    fallback: Name,
    step: Name,
}

impl Origin {
    pub(crate) fn new(fallback: Name, step: Name) -> Arc<Self> {
        Arc::new(Self { fallback, step })
    }
}

impl Served {
    /// A marker: `step` of fallback `fallback` served because of `trigger`.
    pub fn new(fallback: Name, step: Name, trigger: Trigger) -> Self {
        Self {
            origin: Origin::new(fallback, step),
            trigger,
        }
    }

    pub(crate) fn from_origin(origin: Arc<Origin>, trigger: Trigger) -> Self {
        Self { origin, trigger }
    }

    /// The fallback layer's name.
    pub fn fallback(&self) -> &str {
        &self.origin.fallback
    }

    /// The step that served (a chain step's name; for a single fallback, its name:
    /// `value`, `fn`, `service`, or the one given to
    /// [`fallback`](crate::FallbackBuilder::fallback)).
    pub fn step(&self) -> &str {
        &self.origin.step
    }

    /// Why the primary's answer was not used.
    pub fn trigger(&self) -> Trigger {
        self.trigger
    }
}

impl PartialEq for Served {
    fn eq(&self, other: &Self) -> bool {
        self.trigger == other.trigger && *self.origin == *other.origin
    }
}

impl Eq for Served {}

impl fmt::Debug for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Served")
            .field("fallback", &self.origin.fallback)
            .field("step", &self.origin.step)
            .field("trigger", &self.trigger)
            .finish()
    }
}

/// How a response records that a fallback served it.
///
/// Implemented for `http::Response<B>`: the [`Served`] marker goes into its
/// extensions, whose first insert allocates three times (the map, its table, the
/// boxed value) per served answer; the HTTP modes (feature `http`) carry it in the
/// body instead, at no cost. For a response type of your own, store the marker (a `source`
/// field, as a product price does) — this is how the layer keeps every
/// served answer distinguishable from a fresh one. A type with nowhere to put it
/// (a `String`) uses the explicit [`unmarked`](crate::FallbackBuilder::unmarked) mode.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot record which fallback served it",
    label = "the fallback's answer must be marked",
    note = "implement `seawall_fallback::Mark` for `{Self}`, or call `.unmarked()` on the fallback builder"
)]
pub trait Mark {
    /// Records that `served` produced this response.
    fn mark(&mut self, served: Served);
}

impl<B> Mark for http::Response<B> {
    fn mark(&mut self, served: Served) {
        self.extensions_mut().insert(served);
    }
}

/// An explicit "no answer": a fallback declined to invent one.
///
/// A missing freight quote must not become free shipping: a step that
/// has nothing valid to offer answers `Err(Unavailable::new("no valid quote").into())`
/// (or is [`unavailable`](crate::unavailable)). This is a decision, not a failure:
/// a chain stops at it, later steps are not tried, and the caller receives this
/// typed answer — an error it can recognise with [`Unavailable::find`] in the
/// generic mode, the configured "unavailable" response in the HTTP server mode.
/// It is counted apart from served answers and from exhausted chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    reason: Cow<'static, str>,
    fallback: Option<Name>,
    step: Option<Name>,
    trigger: Option<Trigger>,
    retry_after: Option<Duration>,
}

impl Unavailable {
    /// An explicit no-answer, for `reason` (for logs and for your code, never shown to
    /// HTTP clients by this crate).
    pub fn new(reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            reason: reason.into(),
            fallback: None,
            step: None,
            trigger: None,
            retry_after: None,
        }
    }

    /// Why there is no answer.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The fallback layer that declined (set by the layer).
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The step that declined (set by the layer).
    pub fn step(&self) -> Option<&str> {
        self.step.as_deref()
    }

    /// Why the primary's answer was not used (set by the layer).
    pub fn trigger(&self) -> Option<Trigger> {
        self.trigger
    }

    /// When the primary was turned away by a rejection that knew one (an open
    /// breaker), how long until it may answer again.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Finds an `Unavailable` in `error` or its source chain.
    pub fn find<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a Unavailable> {
        let mut current = Some(error);
        while let Some(e) = current {
            if let Some(u) = e.downcast_ref::<Unavailable>() {
                return Some(u);
            }
            current = e.source();
        }
        None
    }

    pub(crate) fn located(mut self, fallback: &Name, step: &Name, trigger: Trigger) -> Self {
        self.fallback = Some(fallback.clone());
        self.step = Some(step.clone());
        self.trigger = Some(trigger);
        self
    }

    pub(crate) fn set_retry_after(&mut self, retry_after: Option<Duration>) {
        self.retry_after = retry_after;
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.fallback, &self.step) {
            (Some(fallback), Some(step)) => write!(
                f,
                "fallback `{fallback}` has no answer (step `{step}`): {}",
                self.reason
            ),
            _ => write!(f, "no answer: {}", self.reason),
        }
    }
}

impl Error for Unavailable {}

/// A fallback step ran longer than its own timeout.
///
/// When the request's deadline cut the step first, the step's cause is a
/// [`DeadlineExceeded`](seawall_core::DeadlineExceeded) instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepTimedOut {
    step: Name,
    timeout: Duration,
}

impl StepTimedOut {
    /// Step `step` ran past its `timeout`.
    pub fn new(step: Name, timeout: Duration) -> Self {
        Self { step, timeout }
    }

    /// The step's name.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// The step's timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl fmt::Display for StepTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fallback step `{}` timed out after {:?}",
            self.step, self.timeout
        )
    }
}

impl Error for StepTimedOut {}

#[cfg(test)]
mod tests {
    use super::*;
    use seawall_core::{BoxError, RejectionKind};

    #[test]
    fn unavailable_is_found_and_located() {
        let u = Unavailable::new("no valid quote").located(
            &"freight".into(),
            &"no-quote".into(),
            Trigger::Rejected(RejectionKind::CircuitOpen),
        );
        assert_eq!(
            u.to_string(),
            "fallback `freight` has no answer (step `no-quote`): no valid quote"
        );
        let mut u = u;
        u.set_retry_after(Some(Duration::from_secs(2)));
        let err: BoxError = Box::new(u);
        let found = Unavailable::find(&*err).unwrap();
        assert_eq!(found.step(), Some("no-quote"));
        assert_eq!(found.retry_after(), Some(Duration::from_secs(2)));
        let other: BoxError = "boom".into();
        assert!(Unavailable::find(&*other).is_none());
    }

    #[test]
    fn http_responses_are_marked_in_extensions() {
        let mut res = http::Response::new(());
        res.mark(Served::new(
            "pricing".into(),
            "cache".into(),
            Trigger::FailedResponse,
        ));
        let served = res.extensions().get::<Served>().unwrap();
        assert_eq!(served.step(), "cache");
        assert_eq!(served.fallback(), "pricing");
        assert_eq!(served.trigger(), Trigger::FailedResponse);
    }
}
