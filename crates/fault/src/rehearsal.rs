//! A classifier wrapper that tells injected outcomes apart: the outcome is the
//! wrapped classifier's (a rehearsed failure must trip a breaker as a real one
//! would), the reason is [`REHEARSAL`], so a breaker's outcome counters
//! (`seawall_breaker_outcome_reasons_total{reason="rehearsal"}`) say which
//! outcomes were injected.

use seawall_core::{Classify, ClassifyInput, ClassifyRequest, Outcome};

use crate::error::{Injected, InjectedFault};

/// The reason [`Rehearsal`] gives an injected outcome (core's, so the policy layers
/// read it without depending on this crate).
pub use seawall_core::REHEARSAL;

/// Wraps `classifier` so that an outcome whose error holds an [`Injected`] fault,
/// or whose HTTP response carries [`InjectedFault`], has the reason [`REHEARSAL`].
///
/// ```
/// use seawall_core::{BoxError, Classify, ErrorRef, ErrorsAsFailures, Outcome};
/// use seawall_fault::{rehearsal, REHEARSAL};
///
/// let classifier = rehearsal(ErrorsAsFailures);
/// let real: BoxError = "connection refused".into();
/// let input = Err::<&(), _>(ErrorRef::from(&*real));
/// assert_eq!(classifier.classify(input), Outcome::Failure);
/// assert_eq!(classifier.reason(input, Outcome::Failure), None);
/// # let _ = REHEARSAL;
/// ```
pub fn rehearsal<C>(classifier: C) -> Rehearsal<C> {
    Rehearsal { classifier }
}

/// A classifier whose injected outcomes have the reason [`REHEARSAL`], made by
/// [`rehearsal`]. For any response type it looks at errors; for
/// `http::Response<B>` also at the response's extensions.
#[derive(Debug, Clone, Copy)]
pub struct Rehearsal<C> {
    classifier: C,
}

/// Responses that may carry an [`InjectedFault`] mark.
pub trait MaybeMarked {
    /// Whether this response carries one.
    fn is_marked(&self) -> bool;
}

impl<B> MaybeMarked for http::Response<B> {
    fn is_marked(&self) -> bool {
        self.extensions().get::<InjectedFault>().is_some()
    }
}

impl<C, Res> Classify<Res> for Rehearsal<C>
where
    C: Classify<Res>,
    Res: MaybeMarked,
{
    #[inline]
    fn classify(&self, result: ClassifyInput<'_, Res>) -> Outcome {
        self.classifier.classify(result)
    }

    fn reason(&self, result: ClassifyInput<'_, Res>, outcome: Outcome) -> Option<&'static str> {
        let injected = match &result {
            Ok(res) => res.is_marked(),
            Err(e) => Injected::find(&**e).is_some(),
        };
        if injected {
            Some(REHEARSAL)
        } else {
            self.classifier.reason(result, outcome)
        }
    }
}

/// A body's end is judged by the wrapped classifier: the mark was read from the
/// response's headers, so a layer that holds a call until its body ends (the
/// default for HTTP clients) marks it too.
#[cfg(feature = "http")]
impl<C: seawall_core::http::ClassifyBodyEnd> seawall_core::http::ClassifyBodyEnd for Rehearsal<C> {
    #[inline]
    fn classify_body_end(&self, end: seawall_core::http::BodyEnd<'_>) -> Outcome {
        self.classifier.classify_body_end(end)
    }
}

/// The same wrapper for every request, as a layer's classifier factory takes it.
impl<C, Req, Res> ClassifyRequest<Req, Res> for Rehearsal<C>
where
    Rehearsal<C>: Classify<Res> + Clone,
{
    type Classifier = Self;

    fn classifier_for(&self, _req: &Req) -> Self {
        self.clone()
    }
}

impl MaybeMarked for () {
    fn is_marked(&self) -> bool {
        false
    }
}
