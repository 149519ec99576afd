//! Seawall's rejection types and the finder that recognises them in any error chain.
//!
//! Every layer that can turn a call away reports it with one of these small
//! structs, boxed into a [`BoxError`] as tower's own `Timeout` and `LoadShed` do.
//! Because Rust cannot downcast to a trait object, the finder knows the concrete
//! types, which is why they all live here and are re-exported by the crate that
//! raises them.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::criticality::Criticality;

/// The boxed error type that seawall layers return, as in tower.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// The name of a policy instance (a breaker, a bulkhead), cheap to clone into a rejection.
pub type Name = Arc<str>;

/// A rejection's copy of its policy's name. Building a rejection is the hot part
/// of a turned-away call, so a short name (most are) is copied inline and touches
/// no shared reference count; a longer one shares the policy's allocation.
#[derive(Clone)]
enum RejectionName {
    Inline(InlineName),
    Shared(Name),
}

/// A short name: its length in the first byte, then its bytes. Word-aligned so that
/// moving a rejection moves whole words.
#[derive(Clone, Copy)]
#[repr(align(8))]
struct InlineName([u8; INLINE_NAME + 1]);

/// The longest name a rejection copies inline.
const INLINE_NAME: usize = 23;

impl RejectionName {
    #[inline]
    fn copied(name: &Name) -> Self {
        let src = name.as_bytes();
        match u8::try_from(src.len()) {
            Ok(len) if src.len() <= INLINE_NAME => {
                let mut bytes = [0; INLINE_NAME + 1];
                bytes[0] = len;
                bytes[1..=src.len()].copy_from_slice(src);
                Self::Inline(InlineName(bytes))
            }
            _ => Self::Shared(Arc::clone(name)),
        }
    }

    #[inline]
    fn owned(name: Name) -> Self {
        if name.len() <= INLINE_NAME {
            Self::copied(&name)
        } else {
            Self::Shared(name)
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Copied whole from a `str`, so always UTF-8.
            Self::Inline(InlineName(bytes)) => {
                let len = usize::from(bytes[0]).min(INLINE_NAME);
                std::str::from_utf8(&bytes[1..=len]).unwrap_or_default()
            }
            Self::Shared(name) => name,
        }
    }
}

impl fmt::Debug for RejectionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for RejectionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Declares [`RejectionKind`] and everything listed per kind from one list, so a
/// new kind is added in one place and reaches every per-kind table (fallback
/// triggers and rejection sets, per-kind counters and metric labels, its name in
/// policy files, the HTTP status and the gRPC code it is rendered with) without a
/// match to update.
macro_rules! rejection_kinds {
    ($( $(#[$doc:meta])* $variant:ident => $label:literal, $category:ident, $status:ident, $code:ident; )*) => {
        /// Which rejection it was.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        pub enum RejectionKind {
            // Named in files by its label, so a policy file and a metric agree.
            $( $(#[$doc])* #[cfg_attr(feature = "serde", serde(rename = $label))] $variant, )*
        }

        impl RejectionKind {
            /// Every kind, in [`index`](Self::index) order.
            pub const ALL: [RejectionKind; [$(stringify!($variant)),*].len()] =
                [$(Self::$variant),*];

            /// A short, stable, lower-case label (for metrics and logs).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $label, )*
                }
            }

            /// The category of this kind of rejection.
            pub const fn category(self) -> Category {
                match self {
                    $( Self::$variant => Category::$category, )*
                }
            }

            /// The HTTP status a rendered rejection of this kind answers with
            /// (the table in the `http` module's docs).
            pub const fn http_status(self) -> ::http::StatusCode {
                match self {
                    $( Self::$variant => ::http::StatusCode::$status, )*
                }
            }

            /// The gRPC code a rejection of this kind is rendered with (the table
            /// in the `grpc` module's docs).
            #[cfg(feature = "tonic")]
            #[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
            pub const fn grpc_code(self) -> ::tonic::Code {
                match self {
                    $( Self::$variant => ::tonic::Code::$code, )*
                }
            }
        }
    };
}

// Per kind: its label, its category, the HTTP status and the gRPC code it is
// rendered with. A spent deadline is 504 and DEADLINE_EXCEEDED (clients do not
// retry it), a full bulkhead RESOURCE_EXHAUSTED, the rest 503 and UNAVAILABLE.
rejection_kinds! {
    /// A circuit breaker was open (or its half-open probes were all taken).
    CircuitOpen => "circuit_open", Admission, SERVICE_UNAVAILABLE, Unavailable;
    /// A bulkhead had every slot busy and its queue full.
    BulkheadFull => "bulkhead_full", Admission, SERVICE_UNAVAILABLE, ResourceExhausted;
    /// A call waited in a bulkhead's queue for as long as it was allowed to.
    BulkheadTimeout => "bulkhead_timeout", Admission, SERVICE_UNAVAILABLE, ResourceExhausted;
    /// The request's deadline passed while the dependency had the call.
    DeadlineExceeded => "deadline_exceeded", Timeout, GATEWAY_TIMEOUT, DeadlineExceeded;
    /// A fallback chain tried every step and none answered.
    FallbacksExhausted => "fallbacks_exhausted", Exhausted, SERVICE_UNAVAILABLE, Unavailable;
}

impl RejectionKind {
    /// How many kinds there are.
    pub const COUNT: usize = Self::ALL.len();

    /// This kind's position in [`ALL`](Self::ALL) (its declaration order), for
    /// per-kind tables and bitsets.
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for RejectionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a rejection says about the dependency behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Category {
    /// Decided locally without touching the dependency (circuit open, bulkhead full,
    /// bulkhead wait timed out). It is no observation of the dependency, so a breaker
    /// ignores it; a degradation level counts it, since the level could not serve.
    Admission,
    /// The dependency had the call and the budget ran out: the dependency was too slow.
    Timeout,
    /// Every declared alternative was tried and failed.
    Exhausted,
}

/// Why a circuit breaker turned a call away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum OpenCause {
    /// Tripped: open until its interval ends.
    Open,
    /// Half-open with every probe slot taken: the probes in flight decide.
    ProbeSlotsFull,
    /// Closed again but ramping up: this call was not in the share admitted yet.
    Ramping,
    /// Forced open by an operator: it stays open until an operator changes it, so
    /// no retry time can be promised.
    ForcedOpen,
}

impl OpenCause {
    /// Every cause, in declaration order: the rows per cause of the answers table
    /// (the `http` module's docs, the README) are tested against it.
    pub const ALL: [OpenCause; 4] = [
        Self::Open,
        Self::ProbeSlotsFull,
        Self::Ramping,
        Self::ForcedOpen,
    ];

    /// A short, stable, lower-case label (for metrics and logs).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::ProbeSlotsFull => "probe_slots_full",
            Self::Ramping => "ramping",
            Self::ForcedOpen => "forced_open",
        }
    }
}

/// A circuit breaker turned the call away without calling the dependency.
#[derive(Debug, Clone)]
pub struct CircuitOpen {
    name: RejectionName,
    retry: Retry,
    cause: OpenCause,
}

/// When a turned-away call may try again, as its breaker knew it.
#[derive(Debug, Clone, Copy)]
enum Retry {
    /// After this long, measured when the call was turned away.
    In(Duration),
    /// From this instant on (the end of the open interval): what remains of it is
    /// measured when asked, so the breaker needs no clock to turn a call away.
    At(Instant),
    /// Forced open: only an operator ends it.
    Unknown,
}

impl CircuitOpen {
    /// The shortest retry-after a breaker gives: a turned-away caller is always told
    /// to wait a little, never to come back at once.
    pub const MIN_RETRY_AFTER: Duration = Duration::from_millis(1);

    /// A rejection by the tripped breaker `name`, which expects to admit a call again
    /// after `retry_after` (what remains of its open interval).
    pub fn new(name: Name, retry_after: Duration) -> Self {
        Self::because(name, OpenCause::Open, Some(retry_after))
    }

    /// A rejection by the breaker `name` for `cause`, with the retry-after it can
    /// promise (`None` when forced open).
    pub fn because(name: Name, cause: OpenCause, retry_after: Option<Duration>) -> Self {
        Self::build(RejectionName::owned(name), cause, retry_after)
    }

    /// As [`because`](Self::because), borrowing the breaker's name: a short name is
    /// copied, so turning a call away touches no shared reference count.
    #[inline]
    pub fn named(name: &Name, cause: OpenCause, retry_after: Option<Duration>) -> Self {
        Self::build(RejectionName::copied(name), cause, retry_after)
    }

    /// This breaker's rejection again, now open until `reopen_at`. Its
    /// [`retry_after`](Self::retry_after) is what remains of the interval when it
    /// is asked, read from tokio's clock ([`MIN_RETRY_AFTER`](Self::MIN_RETRY_AFTER)
    /// once it has ended): a breaker keeps one rejection built with its name and
    /// copies it for each call it turns away, without reading the clock itself, and
    /// a rejection read late never promises an instant already past.
    #[inline]
    #[must_use]
    pub fn until(&self, reopen_at: Instant) -> Self {
        Self {
            name: self.name.clone(),
            retry: Retry::At(reopen_at),
            cause: OpenCause::Open,
        }
    }

    #[inline]
    fn build(name: RejectionName, cause: OpenCause, retry_after: Option<Duration>) -> Self {
        let retry = match (cause, retry_after) {
            (OpenCause::ForcedOpen, _) | (_, None) => Retry::Unknown,
            (_, Some(after)) => Retry::In(after),
        };
        Self { name, retry, cause }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// Why the call was turned away.
    pub fn cause(&self) -> OpenCause {
        self.cause
    }

    /// How long until the breaker expects to admit a call (never zero); `None` when
    /// it was forced open, since only an operator ends that.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.retry {
            Retry::In(after) => Some(after),
            Retry::At(at) => match at.saturating_duration_since(Instant::now()) {
                Duration::ZERO => Some(Self::MIN_RETRY_AFTER),
                left => Some(left),
            },
            Retry::Unknown => None,
        }
    }
}

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.cause {
            OpenCause::Open => "is open",
            OpenCause::ProbeSlotsFull => "is half-open with every probe slot taken",
            OpenCause::Ramping => "is ramping up after closing",
            OpenCause::ForcedOpen => "is forced open",
        };
        write!(f, "circuit `{}` {why}", self.name)?;
        match self.retry_after() {
            Some(after) => write!(f, "; retry after {after:?}"),
            None => Ok(()),
        }
    }
}

impl Error for CircuitOpen {}

/// A bulkhead had every slot busy and its waiting queue full, or (with classes)
/// a more critical call took this one's place in the queue.
#[derive(Debug, Clone)]
pub struct BulkheadFull {
    name: RejectionName,
    load: Option<(usize, usize)>,
    cause: FullCause,
    criticality: Option<Criticality>,
}

/// Why a bulkhead turned a call away as full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FullCause {
    /// No free slot and no room in the queue when it arrived.
    Full,
    /// It was waiting in the queue when a more critical call arrived to a full
    /// queue and took its place: turned away at once rather than left to time out.
    Displaced,
}

impl FullCause {
    /// Every cause, in declaration order.
    pub const ALL: [FullCause; 2] = [Self::Full, Self::Displaced];

    /// `"full"` or `"displaced"`: the name in metrics labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Displaced => "displaced",
        }
    }
}

impl BulkheadFull {
    /// A rejection by the bulkhead `name`.
    pub fn new(name: Name) -> Self {
        Self {
            name: RejectionName::owned(name),
            load: None,
            cause: FullCause::Full,
            criticality: None,
        }
    }

    /// As [`new`](Self::new), borrowing the bulkhead's name: a short name is
    /// copied, so turning a call away touches no shared reference count.
    #[inline]
    pub fn named(name: &Name) -> Self {
        Self {
            name: RejectionName::copied(name),
            load: None,
            cause: FullCause::Full,
            criticality: None,
        }
    }

    /// The same rejection, for a call of class `criticality`.
    #[must_use]
    pub fn with_criticality(mut self, criticality: Criticality) -> Self {
        self.criticality = Some(criticality);
        self
    }

    /// The same rejection, for a waiter displaced from the queue by a more critical call.
    #[must_use]
    pub fn displaced(mut self) -> Self {
        self.cause = FullCause::Displaced;
        self
    }

    /// Why the call was turned away.
    pub fn cause(&self) -> FullCause {
        self.cause
    }

    /// The class of the call turned away, when the bulkhead uses classes.
    pub fn criticality(&self) -> Option<Criticality> {
        self.criticality
    }

    /// The same rejection, recording the calls `active` and `queued` when it was made.
    #[must_use]
    pub fn with_load(mut self, active: usize, queued: usize) -> Self {
        self.load = Some((active, queued));
        self
    }

    /// The bulkhead's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The calls active and queued when the call was turned away, when recorded.
    pub fn load(&self) -> Option<(usize, usize)> {
        self.load
    }
}

impl fmt::Display for BulkheadFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cause {
            FullCause::Full => write!(f, "bulkhead `{}` is full", self.name)?,
            FullCause::Displaced => write!(
                f,
                "bulkhead `{}` is full: a more critical call took this one's place in its queue",
                self.name
            )?,
        }
        match self.criticality {
            Some(c) => write!(f, " ({c} call)"),
            None => Ok(()),
        }
    }
}

impl Error for BulkheadFull {}

/// A call waited in a bulkhead's queue as long as it was allowed to (its `max_wait`
/// or what remained of its deadline) without getting a slot.
#[derive(Debug, Clone)]
pub struct BulkheadTimeout {
    name: Name,
    waited: Duration,
    criticality: Option<Criticality>,
}

impl BulkheadTimeout {
    /// A rejection by the bulkhead `name` after waiting `waited`.
    pub fn new(name: Name, waited: Duration) -> Self {
        Self {
            name,
            waited,
            criticality: None,
        }
    }

    /// The same rejection, for a call of class `criticality`.
    #[must_use]
    pub fn with_criticality(mut self, criticality: Criticality) -> Self {
        self.criticality = Some(criticality);
        self
    }

    /// The class of the call turned away, when the bulkhead uses classes.
    pub fn criticality(&self) -> Option<Criticality> {
        self.criticality
    }

    /// The bulkhead's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long the call waited in the queue.
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

impl fmt::Display for BulkheadTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bulkhead `{}`: no slot after waiting {:?}",
            self.name, self.waited
        )
    }
}

impl Error for BulkheadTimeout {}

/// The request's [`Deadline`](crate::Deadline) passed before the call completed.
#[derive(Debug, Clone, Default)]
pub struct DeadlineExceeded {
    _private: (),
}

impl DeadlineExceeded {
    /// A deadline-exceeded rejection.
    pub fn new() -> Self {
        Self { _private: () }
    }
}

impl fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline exceeded")
    }
}

impl Error for DeadlineExceeded {}

/// One failed step of a fallback chain.
#[derive(Debug)]
pub struct StepFailure {
    step: Name,
    cause: BoxError,
}

impl StepFailure {
    /// Step `step` failed with `cause`.
    pub fn new(step: Name, cause: BoxError) -> Self {
        Self { step, cause }
    }

    /// The step's name.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// Why it failed.
    pub fn cause(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.cause
    }
}

/// Every step of a fallback chain failed; holds each step's cause, in order.
#[derive(Debug)]
pub struct FallbacksExhausted {
    name: Name,
    steps: Vec<StepFailure>,
}

impl FallbacksExhausted {
    /// The chain `name` failed at every one of `steps`.
    pub fn new(name: Name, steps: Vec<StepFailure>) -> Self {
        Self { name, steps }
    }

    /// The fallback's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Each step's failure, in the order the steps were tried.
    pub fn steps(&self) -> &[StepFailure] {
        &self.steps
    }
}

impl fmt::Display for FallbacksExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fallback `{}`: every step failed", self.name)?;
        for (i, s) in self.steps.iter().enumerate() {
            let sep = if i == 0 { ": " } else { "; " };
            write!(f, "{sep}{} ({})", s.step, s.cause)?;
        }
        Ok(())
    }
}

impl Error for FallbacksExhausted {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.steps
            .last()
            .map(|s| &*s.cause as &(dyn Error + 'static))
    }
}

/// A seawall rejection found in an error chain by [`find_rejection`], with every
/// detail its concrete type knows, so no caller needs to downcast.
#[derive(Debug, Clone, Copy)]
pub struct Rejection<'a> {
    kind: RejectionKind,
    name: Option<&'a str>,
    retry_after: Option<Duration>,
    open_cause: Option<OpenCause>,
    waited: Option<Duration>,
    load: Option<(usize, usize)>,
    full_cause: Option<FullCause>,
    criticality: Option<Criticality>,
    error: &'a (dyn Error + 'static),
}

impl<'a> Rejection<'a> {
    /// Which rejection it is.
    pub fn kind(&self) -> RejectionKind {
        self.kind
    }

    /// Admission, timeout or exhausted.
    pub fn category(&self) -> Category {
        self.kind.category()
    }

    /// The name of the policy that rejected, when it has one (a deadline has none).
    pub fn name(&self) -> Option<&'a str> {
        self.name
    }

    /// How long until a retry may succeed, when the policy knows (a tripped breaker;
    /// for an exhausted fallback chain, the first step rejection that knows one).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Why a breaker turned the call away (circuit-open rejections only).
    pub fn open_cause(&self) -> Option<OpenCause> {
        self.open_cause
    }

    /// How long the call waited in a bulkhead's queue (bulkhead timeouts only).
    pub fn waited(&self) -> Option<Duration> {
        self.waited
    }

    /// The calls active in the bulkhead when it turned the call away, when recorded.
    pub fn active(&self) -> Option<usize> {
        self.load.map(|(active, _)| active)
    }

    /// The calls queued in the bulkhead when it turned the call away, when recorded.
    pub fn queued(&self) -> Option<usize> {
        self.load.map(|(_, queued)| queued)
    }

    /// Why a bulkhead turned the call away as full (bulkhead-full rejections only).
    pub fn full_cause(&self) -> Option<FullCause> {
        self.full_cause
    }

    /// The class of the call a bulkhead turned away (full or timed out), when it
    /// uses classes.
    pub fn criticality(&self) -> Option<Criticality> {
        self.criticality
    }

    /// The rejection error itself, for downcasting to its concrete type.
    pub fn error(&self) -> &'a (dyn Error + 'static) {
        self.error
    }
}

/// Finds the first seawall rejection in `error` or its [`source`](Error::source) chain.
///
/// A `BoxError` coerces with `&*boxed`. Use this instead of downcasting by hand:
/// a rejection wrapped by another layer's error is still found.
///
/// ```
/// use seawall_core::{find_rejection, BoxError, BulkheadFull, Category};
///
/// let err: BoxError = Box::new(BulkheadFull::new("freight".into()));
/// let found = find_rejection(&*err).unwrap();
/// assert_eq!(found.category(), Category::Admission);
/// assert_eq!(found.name(), Some("freight"));
/// ```
pub fn find_rejection<'a>(error: &'a (dyn Error + 'static)) -> Option<Rejection<'a>> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(found) = recognise(e) {
            return Some(found);
        }
        current = e.source();
    }
    None
}

fn recognise<'a>(e: &'a (dyn Error + 'static)) -> Option<Rejection<'a>> {
    let bare = |kind, name| Rejection {
        kind,
        name,
        retry_after: None,
        open_cause: None,
        waited: None,
        load: None,
        full_cause: None,
        criticality: None,
        error: e,
    };
    if let Some(r) = e.downcast_ref::<CircuitOpen>() {
        Some(Rejection {
            retry_after: r.retry_after(),
            open_cause: Some(r.cause),
            ..bare(RejectionKind::CircuitOpen, Some(r.name()))
        })
    } else if let Some(r) = e.downcast_ref::<BulkheadFull>() {
        Some(Rejection {
            load: r.load,
            full_cause: Some(r.cause),
            criticality: r.criticality,
            ..bare(RejectionKind::BulkheadFull, Some(r.name()))
        })
    } else if let Some(r) = e.downcast_ref::<BulkheadTimeout>() {
        Some(Rejection {
            waited: Some(r.waited),
            criticality: r.criticality,
            ..bare(RejectionKind::BulkheadTimeout, Some(r.name()))
        })
    } else if e.is::<DeadlineExceeded>() {
        Some(bare(RejectionKind::DeadlineExceeded, None))
    } else if let Some(r) = e.downcast_ref::<FallbacksExhausted>() {
        // The steps' own rejections say when trying again may help.
        let retry_after = r
            .steps
            .iter()
            .find_map(|s| find_rejection(s.cause()).and_then(|found| found.retry_after));
        Some(Rejection {
            retry_after,
            ..bare(RejectionKind::FallbacksExhausted, Some(r.name()))
        })
    } else {
        None
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A client's own error wrapping its cause, as hyper's and tonic's do: the
    /// finder must look through it. The crate's other tests wrap with it too.
    #[derive(Debug)]
    pub(crate) struct ClientError(pub(crate) BoxError);
    impl fmt::Display for ClientError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("request failed")
        }
    }
    impl Error for ClientError {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn every_open_cause_is_in_all_in_declaration_order() {
        for (i, cause) in OpenCause::ALL.into_iter().enumerate() {
            // A new cause does not compile here until it has its place in `ALL`.
            let declared = match cause {
                OpenCause::Open => 0,
                OpenCause::ProbeSlotsFull => 1,
                OpenCause::Ramping => 2,
                OpenCause::ForcedOpen => 3,
            };
            assert_eq!(declared, i, "{}", cause.as_str());
        }
    }

    #[test]
    fn a_displaced_waiter_is_full_with_its_cause_and_class() {
        let plain: BoxError = Box::new(BulkheadFull::new("freight".into()));
        let r = find_rejection(&*plain).unwrap();
        assert_eq!(
            (r.full_cause(), r.criticality()),
            (Some(FullCause::Full), None)
        );
        let displaced: BoxError = Box::new(
            BulkheadFull::new("freight".into())
                .with_criticality(Criticality::Sheddable)
                .displaced(),
        );
        let r = find_rejection(&*displaced).unwrap();
        assert_eq!(r.kind(), RejectionKind::BulkheadFull);
        assert_eq!(r.category(), Category::Admission);
        assert_eq!(r.full_cause(), Some(FullCause::Displaced));
        assert_eq!(r.criticality(), Some(Criticality::Sheddable));
        assert!(displaced.to_string().contains("sheddable"));
        let late: BoxError = Box::new(
            BulkheadTimeout::new("freight".into(), Duration::ZERO)
                .with_criticality(Criticality::Critical),
        );
        let r = find_rejection(&*late).unwrap();
        assert_eq!(r.full_cause(), None);
        assert_eq!(r.criticality(), Some(Criticality::Critical));
        assert_eq!(FullCause::ALL.map(FullCause::as_str), ["full", "displaced"]);
    }

    #[test]
    fn every_kind_renders_with_the_documented_http_status() {
        let table = [
            (RejectionKind::CircuitOpen, 503),
            (RejectionKind::BulkheadFull, 503),
            (RejectionKind::BulkheadTimeout, 503),
            (RejectionKind::DeadlineExceeded, 504),
            (RejectionKind::FallbacksExhausted, 503),
        ];
        assert_eq!(table.len(), RejectionKind::COUNT, "a kind is missing here");
        for (kind, status) in table {
            assert_eq!(kind.http_status().as_u16(), status, "{kind:?}");
        }
    }

    #[cfg(feature = "tonic")]
    #[test]
    fn every_kind_renders_with_the_documented_grpc_code() {
        use tonic::Code;
        let table = [
            (RejectionKind::CircuitOpen, Code::Unavailable),
            (RejectionKind::BulkheadFull, Code::ResourceExhausted),
            (RejectionKind::BulkheadTimeout, Code::ResourceExhausted),
            (RejectionKind::DeadlineExceeded, Code::DeadlineExceeded),
            (RejectionKind::FallbacksExhausted, Code::Unavailable),
        ];
        assert_eq!(table.len(), RejectionKind::COUNT, "a kind is missing here");
        for (kind, code) in table {
            assert_eq!(kind.grpc_code(), code, "{kind:?}");
        }
    }

    #[test]
    fn finds_each_kind_with_its_details() {
        let open: BoxError = Box::new(CircuitOpen::new(
            "quote".into(),
            Duration::from_millis(1200),
        ));
        let r = find_rejection(&*open).unwrap();
        assert_eq!(r.kind(), RejectionKind::CircuitOpen);
        assert_eq!(r.category(), Category::Admission);
        assert_eq!(r.name(), Some("quote"));
        assert_eq!(r.retry_after(), Some(Duration::from_millis(1200)));

        let waited: BoxError =
            Box::new(BulkheadTimeout::new("q".into(), Duration::from_millis(20)));
        let r = find_rejection(&*waited).unwrap();
        assert_eq!(r.kind(), RejectionKind::BulkheadTimeout);
        assert_eq!(r.retry_after(), None);
        assert_eq!(
            r.error()
                .downcast_ref::<BulkheadTimeout>()
                .unwrap()
                .waited(),
            Duration::from_millis(20)
        );

        let late: BoxError = Box::new(DeadlineExceeded::new());
        let r = find_rejection(&*late).unwrap();
        assert_eq!(r.category(), Category::Timeout);
        assert_eq!(r.name(), None);
    }

    #[test]
    fn every_kind_is_listed_once_at_its_index_with_a_distinct_label() {
        let mut labels = std::collections::HashSet::new();
        for (i, kind) in RejectionKind::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), i);
            assert!(labels.insert(kind.as_str()), "{kind} listed twice");
        }
        assert_eq!(RejectionKind::COUNT, 5);
        assert_eq!(
            RejectionKind::DeadlineExceeded.category(),
            Category::Timeout
        );
        assert_eq!(
            RejectionKind::FallbacksExhausted.as_str(),
            "fallbacks_exhausted"
        );
    }

    #[test]
    fn finds_a_rejection_wrapped_in_another_error() {
        let inner: BoxError = Box::new(BulkheadFull::new("freight".into()));
        let outer: BoxError = Box::new(ClientError(inner));
        let r = find_rejection(&*outer).unwrap();
        assert_eq!(r.kind(), RejectionKind::BulkheadFull);
        assert_eq!(r.name(), Some("freight"));
    }

    #[test]
    fn short_and_long_names_read_back_the_same_however_built() {
        let long: Name = "a-breaker-name-longer-than-twenty-two-bytes/with-key".into();
        for name in [
            Name::from(""),
            Name::from("quote"),
            Name::from("é𝄞".repeat(3)),
            long,
        ] {
            let open: BoxError = Box::new(CircuitOpen::named(
                &name,
                OpenCause::Open,
                Some(Duration::from_secs(2)),
            ));
            let r = find_rejection(&*open).unwrap();
            assert_eq!(r.name(), Some(&*name));
            assert_eq!(r.retry_after(), Some(Duration::from_secs(2)));
            assert_eq!(
                open.to_string(),
                format!("circuit `{name}` is open; retry after 2s")
            );
            let by_value = CircuitOpen::because(name.clone(), OpenCause::Open, None);
            assert_eq!(by_value.name(), &*name);
            let debug = format!("{by_value:?}");
            assert!(debug.contains(&format!("name: {:?}", &*name)), "{debug}");

            let full: BoxError = Box::new(BulkheadFull::named(&name).with_load(3, 1));
            let r = find_rejection(&*full).unwrap();
            assert_eq!(r.name(), Some(&*name));
            assert_eq!((r.active(), r.queued()), (Some(3), Some(1)));
            assert_eq!(full.to_string(), format!("bulkhead `{name}` is full"));
            assert_eq!(BulkheadFull::new(name.clone()).name(), &*name);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_rejection_open_until_an_instant_measures_what_remains_when_it_is_read() {
        let now = Instant::now();
        let built = CircuitOpen::named(&Name::from("quote"), OpenCause::ForcedOpen, None);
        let open: BoxError = Box::new(built.until(now + Duration::from_secs(10)));
        let r = find_rejection(&*open).unwrap();
        assert_eq!(r.kind(), RejectionKind::CircuitOpen);
        assert_eq!(r.name(), Some("quote"));
        assert_eq!(r.open_cause(), Some(OpenCause::Open));
        assert_eq!(r.retry_after(), Some(Duration::from_secs(10)));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(
            find_rejection(&*open).unwrap().retry_after(),
            Some(Duration::from_secs(6))
        );
        assert_eq!(open.to_string(), "circuit `quote` is open; retry after 6s");
        // Read after the interval ended: come back after the smallest wait, not never.
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(
            find_rejection(&*open).unwrap().retry_after(),
            Some(Duration::from_millis(1))
        );
        assert_eq!(CircuitOpen::MIN_RETRY_AFTER, Duration::from_millis(1));
    }

    #[test]
    fn a_forced_open_rejection_promises_no_retry_time_whatever_it_was_given() {
        let forced = CircuitOpen::because(
            "quote".into(),
            OpenCause::ForcedOpen,
            Some(Duration::from_secs(3)),
        );
        assert_eq!(forced.retry_after(), None);
        assert_eq!(forced.to_string(), "circuit `quote` is forced open");
    }

    #[test]
    fn plain_errors_are_not_rejections() {
        let io: BoxError = Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(find_rejection(&*io).is_none());
        assert!(find_rejection(&ClientError(io)).is_none());
    }

    #[test]
    fn exhausted_lists_each_step_and_exposes_the_last_cause() {
        let err = FallbacksExhausted::new(
            "pricing".into(),
            vec![
                StepFailure::new("cache".into(), "cache miss".into()),
                StepFailure::new("db".into(), Box::new(DeadlineExceeded::new())),
            ],
        );
        assert_eq!(
            err.to_string(),
            "fallback `pricing`: every step failed: cache (cache miss); db (deadline exceeded)"
        );
        assert_eq!(err.steps()[0].step(), "cache");
        // The finder reports the outermost rejection: the exhaustion, not the step's deadline.
        let r = find_rejection(&err).unwrap();
        assert_eq!(r.kind(), RejectionKind::FallbacksExhausted);
        assert_eq!(r.category(), Category::Exhausted);
    }
}
