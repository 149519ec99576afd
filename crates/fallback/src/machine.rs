//! The fallback's decisions as plain functions: which results trigger it, and how
//! long a step may run. No async, no clock reads: `now` is passed in.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use seawall_core::{find_rejection, later, Classify, Deadline, Outcome, RejectionKind};
use tokio::time::Instant;

/// Why the primary's answer was not used: the trigger that fired the fallback.
///
/// This is the vocabulary of the layer's metrics (`trigger` label), tracing events
/// and of the [`Served`](crate::Served) marker on every response a fallback serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Trigger {
    /// A seawall rejection of a selected kind was found in the error's source chain
    /// (circuit open, bulkhead full, bulkhead timeout, deadline exceeded, an inner
    /// fallback exhausted).
    Rejected(RejectionKind),
    /// The primary answered, and the failure classifier called the answer a failure
    /// (an HTTP `503`, with [`HttpStatus`](seawall_core::HttpStatus)).
    FailedResponse,
    /// The primary failed with an error (not a seawall rejection) that the failure
    /// classifier called a failure.
    FailedError,
    /// The primary failed with an error of a type selected with
    /// [`on_error`](crate::FallbackBuilder::on_error).
    ErrorType,
    /// An operator forced the fallback ([`Handle::force`](crate::Handle::force)):
    /// the primary was not called.
    Forced,
}

impl Trigger {
    /// How many triggers there are: one per rejection kind, then the four others.
    pub const COUNT: usize = RejectionKind::COUNT + 4;

    /// Every trigger, in [`index`](Self::index) order: the rejection kinds in
    /// [`RejectionKind::ALL`] order, then the others.
    pub const ALL: [Trigger; Trigger::COUNT] = {
        let mut all = [Trigger::Forced; Trigger::COUNT];
        let mut i = 0;
        while i < RejectionKind::COUNT {
            all[i] = Trigger::Rejected(RejectionKind::ALL[i]);
            i += 1;
        }
        all[i] = Trigger::FailedResponse;
        all[i + 1] = Trigger::FailedError;
        all[i + 2] = Trigger::ErrorType;
        all[i + 3] = Trigger::Forced;
        all
    };

    /// A short, stable, lower-case label (for metrics and logs): the rejection kind's
    /// label (`circuit_open`, `bulkhead_full`, `bulkhead_timeout`, `deadline_exceeded`,
    /// `fallbacks_exhausted`), or `failed_response`, `failed_error`, `error_type`, `forced`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Trigger::Rejected(kind) => kind.as_str(),
            Trigger::FailedResponse => "failed_response",
            Trigger::FailedError => "failed_error",
            Trigger::ErrorType => "error_type",
            Trigger::Forced => "forced",
        }
    }

    /// This trigger's position in [`Trigger::ALL`] (for per-trigger counters).
    pub const fn index(self) -> usize {
        const N: usize = RejectionKind::COUNT;
        match self {
            Trigger::Rejected(kind) => kind.index(),
            Trigger::FailedResponse => N,
            Trigger::FailedError => N + 1,
            Trigger::ErrorType => N + 2,
            Trigger::Forced => N + 3,
        }
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Trigger {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A set of seawall rejection kinds that fire the fallback (a small bitset, `Copy`).
///
/// Each kind is selected on its own: a fallback may answer for an open circuit but
/// let a full bulkhead through, for example. Serialised (feature `serde`) as a list
/// of kinds: `["circuit_open", "deadline_exceeded"]`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rejections(u8);

// One bit per kind, at the kind's index.
const _: () = assert!(RejectionKind::COUNT <= u8::BITS as usize);

impl Rejections {
    /// No rejection kind.
    pub const NONE: Rejections = Rejections(0);
    /// Every rejection kind.
    pub const ALL: Rejections = Rejections::of_category(None);
    /// The admission rejections: circuit open, bulkhead full, bulkhead timeout
    /// (every kind of [`Category::Admission`](seawall_core::Category::Admission)).
    pub const ADMISSION: Rejections =
        Rejections::of_category(Some(seawall_core::Category::Admission));

    /// The kinds of `category`, or every kind.
    const fn of_category(category: Option<seawall_core::Category>) -> Self {
        let mut set = Rejections::NONE;
        let mut i = 0;
        while i < RejectionKind::COUNT {
            let kind = RejectionKind::ALL[i];
            let selected = match category {
                None => true,
                // `Category` has no const `==`; compare discriminants.
                Some(c) => kind.category() as u8 == c as u8,
            };
            if selected {
                set = set.with(kind);
            }
            i += 1;
        }
        set
    }

    const fn bit(kind: RejectionKind) -> u8 {
        1 << kind.index()
    }

    /// This set plus `kind`.
    #[must_use]
    pub const fn with(self, kind: RejectionKind) -> Self {
        Rejections(self.0 | Self::bit(kind))
    }

    /// This set without `kind`.
    #[must_use]
    pub const fn without(self, kind: RejectionKind) -> Self {
        Rejections(self.0 & !Self::bit(kind))
    }

    /// Whether `kind` is in the set.
    pub const fn contains(self, kind: RejectionKind) -> bool {
        self.0 & Self::bit(kind) != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The kinds in the set.
    pub fn iter(self) -> impl Iterator<Item = RejectionKind> {
        RejectionKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }

    pub(crate) const fn bits(self) -> u8 {
        self.0
    }

    pub(crate) const fn from_bits(bits: u8) -> Self {
        Rejections(bits & Self::ALL.0)
    }
}

impl FromIterator<RejectionKind> for Rejections {
    fn from_iter<I: IntoIterator<Item = RejectionKind>>(iter: I) -> Self {
        iter.into_iter().fold(Rejections::NONE, Rejections::with)
    }
}

impl fmt::Debug for Rejections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Rejections {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Rejections {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let kinds = Vec::<RejectionKind>::deserialize(d)?;
        Ok(kinds.into_iter().collect())
    }
}

/// A classifier that calls nothing a failure: the default until
/// [`on_failure`](crate::FallbackBuilder::on_failure) sets one, so only the selected
/// rejections and error types fire the fallback.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFailures;

impl<Res> Classify<Res> for NoFailures {
    fn classify(&self, _result: seawall_core::ClassifyInput<'_, Res>) -> Outcome {
        Outcome::Ignore
    }
}

/// Whether an error of type `E` is in an error's source chain.
pub(crate) type ErrorMatcher = fn(&(dyn Error + 'static)) -> bool;

pub(crate) fn chain_has<E: Error + 'static>(error: &(dyn Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.is::<E>() {
            return true;
        }
        current = e.source();
    }
    false
}

/// A trigger that fired, with the retry-after of the rejection behind it, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fired {
    pub(crate) trigger: Trigger,
    pub(crate) retry_after: Option<Duration>,
}

/// What fires the fallback. Decides in this order, first match wins:
///
/// 1. a seawall rejection in the error's chain fires exactly when its kind is
///    selected (the classifier is not asked: a rejection not selected passes through);
/// 2. an error of a selected type fires ([`Trigger::ErrorType`]);
/// 3. the classifier's [`Outcome::Failure`] fires ([`Trigger::FailedError`] or
///    [`Trigger::FailedResponse`]); `Success` and `Ignore` pass through.
#[derive(Debug, Clone)]
pub(crate) struct Triggers<C> {
    pub(crate) classifier: C,
    pub(crate) error_types: Vec<ErrorMatcher>,
}

impl<C> Triggers<C> {
    /// Decides an error result, given the rejection kinds currently selected.
    pub(crate) fn decide_error<Res>(
        &self,
        rejections: Rejections,
        error: &(dyn Error + 'static),
    ) -> Option<Fired>
    where
        C: Classify<Res>,
    {
        if let Some(r) = find_rejection(error) {
            return rejections.contains(r.kind()).then(|| Fired {
                trigger: Trigger::Rejected(r.kind()),
                retry_after: r.retry_after(),
            });
        }
        if self.error_types.iter().any(|m| m(error)) {
            return Some(Fired {
                trigger: Trigger::ErrorType,
                retry_after: None,
            });
        }
        match self
            .classifier
            .classify(Err(seawall_core::ErrorRef::new(error)))
        {
            Outcome::Failure => Some(Fired {
                trigger: Trigger::FailedError,
                retry_after: None,
            }),
            Outcome::Success | Outcome::Ignore => None,
        }
    }

    /// Decides a response: only the classifier can call it a failure.
    #[inline]
    pub(crate) fn decide_response<Res>(&self, res: &Res) -> Option<Fired>
    where
        C: Classify<Res>,
    {
        match self.classifier.classify(Ok(res)) {
            Outcome::Failure => Some(Fired {
                trigger: Trigger::FailedResponse,
                retry_after: None,
            }),
            Outcome::Success | Outcome::Ignore => None,
        }
    }
}

/// How long one step may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepBound {
    /// Neither a step timeout nor a request deadline.
    Unbounded,
    /// The step's own timeout comes first: it ends at `at`, `timeout` after it started.
    Timeout { at: Instant, timeout: Duration },
    /// The request's deadline comes first (or there is no step timeout).
    Deadline { at: Instant },
}

impl StepBound {
    /// The instant the step is cut off, if any.
    pub(crate) fn at(self) -> Option<Instant> {
        match self {
            StepBound::Unbounded => None,
            StepBound::Timeout { at, .. } | StepBound::Deadline { at } => Some(at),
        }
    }
}

/// A step's bound at `now`: its own `timeout`, never past what remains of the
/// request's `deadline`. When both end at the same instant, the deadline is the cause.
pub(crate) fn step_bound(
    now: Instant,
    timeout: Option<Duration>,
    deadline: Option<Deadline>,
) -> StepBound {
    match (timeout, deadline) {
        (None, None) => StepBound::Unbounded,
        (None, Some(d)) => StepBound::Deadline { at: d.instant() },
        (Some(timeout), None) => StepBound::Timeout {
            at: later(now, timeout),
            timeout,
        },
        (Some(timeout), Some(d)) => {
            let own = later(now, timeout);
            if d.instant() <= own {
                StepBound::Deadline { at: d.instant() }
            } else {
                StepBound::Timeout { at: own, timeout }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seawall_core::{
        BoxError, BulkheadFull, BulkheadTimeout, CircuitOpen, DeadlineExceeded, ErrorsAsFailures,
        HttpStatus,
    };

    fn triggers<C>(classifier: C) -> Triggers<C> {
        Triggers {
            classifier,
            error_types: Vec::new(),
        }
    }

    fn err(e: impl Error + Send + Sync + 'static) -> BoxError {
        Box::new(e)
    }

    #[test]
    fn each_rejection_kind_fires_only_when_selected() {
        let t = triggers(ErrorsAsFailures);
        let cases: [(BoxError, RejectionKind); 4] = [
            (
                err(CircuitOpen::new("b".into(), Duration::from_secs(3))),
                RejectionKind::CircuitOpen,
            ),
            (
                err(BulkheadFull::new("b".into())),
                RejectionKind::BulkheadFull,
            ),
            (
                err(BulkheadTimeout::new("b".into(), Duration::from_millis(20))),
                RejectionKind::BulkheadTimeout,
            ),
            (
                err(DeadlineExceeded::new()),
                RejectionKind::DeadlineExceeded,
            ),
        ];
        for (e, kind) in &cases {
            let fired = t
                .decide_error::<()>(Rejections::NONE.with(*kind), &**e)
                .unwrap();
            assert_eq!(fired.trigger, Trigger::Rejected(*kind));
            // Every other kind selected, this one not: it passes through, even though
            // the classifier would call a deadline a failure.
            assert_eq!(
                t.decide_error::<()>(Rejections::ALL.without(*kind), &**e),
                None
            );
        }
        let open = t.decide_error::<()>(Rejections::ALL, &*cases[0].0).unwrap();
        assert_eq!(open.retry_after, Some(Duration::from_secs(3)));
    }

    #[test]
    fn classifier_decides_responses_and_other_errors() {
        let t = triggers(HttpStatus::default());
        let unavailable = http::Response::builder().status(503).body(()).unwrap();
        let not_found = http::Response::builder().status(404).body(()).unwrap();
        assert_eq!(
            t.decide_response(&unavailable).map(|f| f.trigger),
            Some(Trigger::FailedResponse)
        );
        assert_eq!(t.decide_response(&not_found), None);
        let io = err(std::io::Error::other("reset"));
        assert_eq!(
            t.decide_error::<http::Response<()>>(Rejections::NONE, &*io)
                .map(|f| f.trigger),
            Some(Trigger::FailedError)
        );
    }

    #[derive(Debug)]
    struct Refused;
    impl fmt::Display for Refused {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("refused")
        }
    }
    impl Error for Refused {}

    #[derive(Debug)]
    struct Wrapped(Refused);
    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("wrapped")
        }
    }
    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn error_types_match_anywhere_in_the_chain_and_nothing_else_fires() {
        let t = Triggers {
            classifier: NoFailures,
            error_types: vec![chain_has::<Refused> as ErrorMatcher],
        };
        let wrapped = err(Wrapped(Refused));
        assert_eq!(
            t.decide_error::<()>(Rejections::NONE, &*wrapped)
                .map(|f| f.trigger),
            Some(Trigger::ErrorType)
        );
        let other = err(std::io::Error::other("other"));
        assert_eq!(t.decide_error::<()>(Rejections::NONE, &*other), None);
        assert_eq!(t.decide_response(&()), None);
    }

    #[test]
    fn rejection_set_operations() {
        let s = Rejections::NONE
            .with(RejectionKind::CircuitOpen)
            .with(RejectionKind::DeadlineExceeded);
        assert!(s.contains(RejectionKind::CircuitOpen));
        assert!(!s.contains(RejectionKind::BulkheadFull));
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            [RejectionKind::CircuitOpen, RejectionKind::DeadlineExceeded]
        );
        assert_eq!(Rejections::ALL.iter().count(), 5);
        assert_eq!(Rejections::ADMISSION.iter().count(), 3);
        assert!(Rejections::ADMISSION
            .iter()
            .all(|k| k.category() == seawall_core::Category::Admission));
        assert_eq!(
            Rejections::from_bits(Rejections::ALL.bits()),
            Rejections::ALL
        );
        assert_eq!(format!("{s:?}"), "{CircuitOpen, DeadlineExceeded}");
    }

    #[test]
    fn trigger_labels_and_indices_are_distinct() {
        for (i, t) in Trigger::ALL.iter().enumerate() {
            assert_eq!(t.index(), i);
        }
        let mut labels: Vec<_> = Trigger::ALL.iter().map(|t| t.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), Trigger::ALL.len());
    }

    #[test]
    fn step_bound_never_exceeds_the_remaining_deadline() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(step_bound(now, None, None), StepBound::Unbounded);
        assert_eq!(
            step_bound(now, Some(ms(500)), None),
            StepBound::Timeout {
                at: now + ms(500),
                timeout: ms(500)
            }
        );
        // 300 ms remain: a 500 ms step is cut at the deadline, a 100 ms step keeps its own.
        let d = Deadline::after(now, ms(300));
        assert_eq!(
            step_bound(now, Some(ms(500)), Some(d)),
            StepBound::Deadline { at: now + ms(300) }
        );
        assert_eq!(
            step_bound(now, Some(ms(100)), Some(d)),
            StepBound::Timeout {
                at: now + ms(100),
                timeout: ms(100)
            }
        );
        assert_eq!(
            step_bound(now, Some(ms(300)), Some(d)),
            StepBound::Deadline { at: now + ms(300) }
        );
        // An untimed step is still bounded by the deadline; a spent one cuts at once.
        assert_eq!(step_bound(now, None, Some(d)).at(), Some(now + ms(300)));
        let spent = Deadline::at(now);
        assert_eq!(
            step_bound(now + ms(1), Some(ms(100)), Some(spent)).at(),
            Some(now)
        );
    }
}
