//! Failure classification: one small predicate shared by every seawall layer.
//!
//! A layer hands its classifier the inner service's result as
//! `Result<&Res, &(dyn Error + 'static)>`. Taking the error as a trait object is what
//! lets a boxed inner error (`BoxError`, which does not itself implement `Error`) be
//! classified, and it lets every provided classifier look for a seawall
//! [rejection](crate::find_rejection) first.
//!
//! Every provided classifier decides a seawall rejection by its [`Category`]:
//! admission (circuit open, bulkhead full or timed out: decided locally, no
//! evidence about the dependency) is [`Outcome::Ignore`]; a timeout (the dependency
//! had the call and the budget ran out) and an exhausted fallback chain are
//! [`Outcome::Failure`]. A layer that must count admission rejections (a degradation
//! level that cannot serve) wraps its classifier in [`AdmissionAsFailure`].

use std::error::Error;

use http::StatusCode;

use crate::rejection::{find_rejection, Category};

/// What one call says about the health of the dependency behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Evidence that the dependency works.
    Success,
    /// Evidence that the dependency is sick.
    Failure,
    /// No evidence either way (a local rejection, a cancelled call): not recorded.
    Ignore,
}

impl Outcome {
    /// A short, stable, lower-case label (for metrics and logs): `success`,
    /// `failure`, `ignored`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Ignore => "ignored",
        }
    }
}

/// The result shape a classifier sees: the response, or the call's error as an
/// [`ErrorRef`].
pub type ClassifyInput<'a, Res> = Result<&'a Res, ErrorRef<'a>>;

/// A borrowed view of a call's error, as a classifier sees it.
///
/// It dereferences to `dyn Error + 'static`, so `downcast_ref`, `source` and
/// `to_string` work as on the error itself, and [`rejection`](Self::rejection) finds a
/// seawall rejection in its source chain.
///
/// Why a struct and not `&'a (dyn Error + 'static)`: a classifier closure's type
/// carries its parameter types, and a `'static` named there is erased when the
/// compiler checks that an `async` block holding the service is `Send` (a known
/// compiler limitation). A closure over `&(dyn Error + 'static)` would then not
/// compile inside `tokio::spawn(async move { .. })` or an axum handler; a closure over
/// `ErrorRef<'_>` names no `'static` and compiles everywhere.
#[derive(Clone, Copy)]
pub struct ErrorRef<'a>(&'a (dyn Error + 'static));

impl<'a> ErrorRef<'a> {
    /// Views `error` as a classifier's input.
    #[inline]
    pub fn new(error: &'a (dyn Error + 'static)) -> Self {
        Self(error)
    }

    /// The error itself.
    #[inline]
    pub fn get(self) -> &'a (dyn Error + 'static) {
        self.0
    }

    /// The seawall rejection in the error's source chain, if any (see [`find_rejection`]).
    #[inline]
    pub fn rejection(self) -> Option<crate::Rejection<'a>> {
        find_rejection(self.0)
    }
}

impl<'a> From<&'a (dyn Error + 'static)> for ErrorRef<'a> {
    #[inline]
    fn from(error: &'a (dyn Error + 'static)) -> Self {
        Self(error)
    }
}

impl<'a> From<&'a (dyn Error + Send + Sync + 'static)> for ErrorRef<'a> {
    #[inline]
    fn from(error: &'a (dyn Error + Send + Sync + 'static)) -> Self {
        Self(error)
    }
}

impl std::ops::Deref for ErrorRef<'_> {
    type Target = dyn Error + 'static;

    #[inline]
    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl std::fmt::Debug for ErrorRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.0, f)
    }
}

impl std::fmt::Display for ErrorRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self.0, f)
    }
}

/// The reason a classifier gives an outcome that an injected fault produced (a
/// rehearsal's, see the `seawall-fault` crate). It is the one reason the layers read
/// rather than only count: a breaker transition or a degradation change completed by
/// such an outcome is marked as a rehearsal, so nobody mistakes it for an incident.
pub const REHEARSAL: &str = "rehearsal";

/// Whether a classifier's `reason` says the outcome was injected ([`REHEARSAL`]).
#[inline]
pub fn is_rehearsal(reason: Option<&str>) -> bool {
    reason == Some(REHEARSAL)
}

/// Decides the [`Outcome`] of one call from the inner service's result.
///
/// Implemented for every `Fn(ClassifyInput<'_, Res>) -> Outcome`, so a plain closure
/// is a classifier; [`classify_fn`] helps type inference when the closure's
/// parameter is not annotated.
///
/// A closure of another shape is refused with a message naming the one expected:
///
/// ```compile_fail
/// use seawall_core::{Classify, Outcome};
///
/// fn takes<C: Classify<u32>>(_: C) {}
/// // Wrong: takes the response by value and returns a bool.
/// takes(|r: Result<u32, ()>| r.is_ok());
/// ```
///
/// # Reasons
///
/// A classifier may also say *why* with [`reason`](Classify::reason): a short
/// `&'static str` such as `"business_refusal"` for a 404 "no rate for that
/// destination", which a breaker counts per reason (with the `metrics` feature,
/// `seawall_breaker_outcome_reasons_total{outcome, reason}`). The reason is a second
/// method rather than a field of [`Outcome`], so every `match` on an outcome and
/// every classifier written before keeps compiling, and a classifier that gives no
/// reason costs nothing: the default answers `None` and is inlined away. A
/// `&'static str` needs no allocation on the call path, and keeps the set of label
/// values bounded by the program's text. [`with_reason`] adds reasons to any
/// classifier.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a seawall classifier for responses of type `{Res}`",
    label = "expected a classifier here",
    note = "a classifier is a closure `Fn(ClassifyInput<'_, {Res}>) -> Outcome` (that is `Result<&{Res}, ErrorRef<'_>>`), or a type implementing `Classify<{Res}>` such as `ErrorsAsFailures`, `HttpStatus` or `GrpcStatus`"
)]
pub trait Classify<Res> {
    /// Classifies one result.
    fn classify(&self, result: ClassifyInput<'_, Res>) -> Outcome;

    /// Why `result` was classified as `outcome`, if this classifier says: a short,
    /// stable, lower-case label (`"business_refusal"`). `None` by default.
    #[inline]
    fn reason(&self, result: ClassifyInput<'_, Res>, outcome: Outcome) -> Option<&'static str> {
        let _ = (result, outcome);
        None
    }
}

/// Adds a reason to `classifier`'s outcomes: `reason` sees the result and the
/// outcome `classifier` gave it, and may name why (the outcome itself is unchanged).
///
/// ```
/// use seawall_core::{with_reason, Classify, HttpStatus, Outcome};
///
/// // A 404 "no rate for that destination" is a business answer, not a sick supplier:
/// // still a success, but counted apart.
/// let classifier = with_reason(HttpStatus::default(), |r: Result<&http::Response<()>, _>, _outcome| {
///     match r {
///         Ok(res) if res.status() == http::StatusCode::NOT_FOUND => Some("business_refusal"),
///         _ => None,
///     }
/// });
/// let not_found = http::Response::builder().status(404).body(()).unwrap();
/// assert_eq!(classifier.classify(Ok(&not_found)), Outcome::Success);
/// assert_eq!(classifier.reason(Ok(&not_found), Outcome::Success), Some("business_refusal"));
/// ```
pub fn with_reason<C, F, Res>(classifier: C, reason: F) -> WithReason<C, F>
where
    C: Classify<Res>,
    F: Fn(ClassifyInput<'_, Res>, Outcome) -> Option<&'static str>,
{
    WithReason { classifier, reason }
}

/// A classifier with reasons, made by [`with_reason`].
#[derive(Clone, Copy)]
pub struct WithReason<C, F> {
    classifier: C,
    reason: F,
}

impl<C: std::fmt::Debug, F> std::fmt::Debug for WithReason<C, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithReason")
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl<C, F> WithReason<C, F> {
    /// The classifier the reasons were added to.
    pub fn classifier(&self) -> &C {
        &self.classifier
    }
}

impl<C, F, Res> Classify<Res> for WithReason<C, F>
where
    C: Classify<Res>,
    F: Fn(ClassifyInput<'_, Res>, Outcome) -> Option<&'static str>,
{
    #[inline]
    fn classify(&self, result: ClassifyInput<'_, Res>) -> Outcome {
        self.classifier.classify(result)
    }

    #[inline]
    fn reason(&self, result: ClassifyInput<'_, Res>, outcome: Outcome) -> Option<&'static str> {
        (self.reason)(result, outcome).or_else(|| self.classifier.reason(result, outcome))
    }
}

impl<Res, F> Classify<Res> for F
where
    F: Fn(ClassifyInput<'_, Res>) -> Outcome,
{
    fn classify(&self, result: ClassifyInput<'_, Res>) -> Outcome {
        self(result)
    }
}

/// Turns a closure into a classifier that can also serve as a per-request factory
/// (it returns a copy of itself), fixing its argument type so the closure's
/// parameter needs no annotation.
///
/// ```
/// use seawall_core::{classify_fn, Classify, Outcome};
///
/// let only_negative_fails = classify_fn(|r: Result<&i32, _>| match r {
///     Ok(v) if *v < 0 => Outcome::Failure,
///     Ok(_) => Outcome::Success,
///     Err(_) => Outcome::Failure,
/// });
/// assert_eq!(only_negative_fails.classify(Ok(&-1)), Outcome::Failure);
/// ```
pub fn classify_fn<Res, F>(f: F) -> ClassifyFn<F>
where
    F: Fn(ClassifyInput<'_, Res>) -> Outcome,
{
    ClassifyFn(f)
}

/// A closure classifier, made by [`classify_fn`].
#[derive(Clone, Copy)]
pub struct ClassifyFn<F>(F);

impl<F> std::fmt::Debug for ClassifyFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClassifyFn")
    }
}

impl<Res, F> Classify<Res> for ClassifyFn<F>
where
    F: Fn(ClassifyInput<'_, Res>) -> Outcome,
{
    fn classify(&self, result: ClassifyInput<'_, Res>) -> Outcome {
        (self.0)(result)
    }
}

/// Chooses a classifier for each request, so one route can count what another ignores.
///
/// Every provided classifier, and every closure classifier (plain or wrapped by
/// [`classify_fn`]), is a factory that returns a copy of itself; wrap a closure over
/// the request in [`PerRequest`] to decide by method or route. A classifier type of
/// your own implements this trait by returning a clone of itself.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot classify responses of type `{Res}` to requests of type `{Req}`",
    label = "expected a classifier here",
    note = "pass a closure `Fn(ClassifyInput<'_, {Res}>) -> Outcome` (it must be `Clone`), a provided classifier (`ErrorsAsFailures`, `HttpStatus`, `GrpcStatus`), or `PerRequest::new(|req: &{Req}| ...)` returning one"
)]
pub trait ClassifyRequest<Req, Res> {
    /// The classifier used for one request.
    type Classifier: Classify<Res>;

    /// Chooses the classifier for `req`, before the request is handed to the inner service.
    fn classifier_for(&self, req: &Req) -> Self::Classifier;
}

/// Makes each listed classifier its own per-request factory.
macro_rules! same_for_every_request {
    ($($ty:ty => [$($gen:tt)*] where [$($bound:tt)*];)*) => {$(
        impl<$($gen)* Req, Res> ClassifyRequest<Req, Res> for $ty
        where
            $ty: Classify<Res> + Clone,
            $($bound)*
        {
            type Classifier = Self;

            fn classifier_for(&self, _req: &Req) -> Self {
                self.clone()
            }
        }
    )*};
}

same_for_every_request! {
    ErrorsAsFailures => [] where [];
    HttpStatus => [] where [];
    GrpcStatus => [] where [];
    AdmissionAsFailure<C> => [C,] where [];
    ClassifyFn<F> => [F,] where [];
    WithReason<C, F> => [C, F,] where [];
    TimeoutsAsOverload => [] where [];
    OverloadStatus => [] where [];
}

/// A plain closure classifier serves every request with a copy of itself.
impl<F, Req, Res> ClassifyRequest<Req, Res> for F
where
    F: Fn(ClassifyInput<'_, Res>) -> Outcome + Clone,
{
    type Classifier = F;

    fn classifier_for(&self, _req: &Req) -> F {
        self.clone()
    }
}

/// A classifier factory from a closure over the request.
///
/// ```
/// use seawall_core::{ClassifyRequest, HttpStatus, PerRequest};
///
/// // POSTs are not idempotent here, so a 409 on them is a failure too.
/// let factory = PerRequest::new(|req: &http::Request<()>| {
///     let mut c = HttpStatus::default();
///     if req.method() == http::Method::POST {
///         c = c.with_failure(http::StatusCode::CONFLICT);
///     }
///     c
/// });
/// let _c: HttpStatus = ClassifyRequest::<_, http::Response<()>>::classifier_for(
///     &factory,
///     &http::Request::new(()),
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PerRequest<F>(F);

impl<F> PerRequest<F> {
    /// Uses `f` to choose each request's classifier.
    pub fn new(f: F) -> Self {
        Self(f)
    }
}

impl<F, C, Req, Res> ClassifyRequest<Req, Res> for PerRequest<F>
where
    F: Fn(&Req) -> C,
    C: Classify<Res>,
{
    type Classifier = C;

    fn classifier_for(&self, req: &Req) -> C {
        (self.0)(req)
    }
}

/// How every provided classifier decides an error: a seawall rejection by its
/// category, anything else as a failure.
fn classify_error(error: &(dyn Error + 'static)) -> Outcome {
    match find_rejection(error).map(|r| r.category()) {
        Some(Category::Admission) => Outcome::Ignore,
        Some(Category::Timeout | Category::Exhausted) | None => Outcome::Failure,
    }
}

/// The default: any `Ok` is a success, any error a failure (seawall admission
/// rejections are ignored, a deadline exceeded is a failure).
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorsAsFailures;

impl<Res> Classify<Res> for ErrorsAsFailures {
    fn classify(&self, result: ClassifyInput<'_, Res>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(e) => classify_error(e.get()),
        }
    }
}

/// Wraps a classifier so that seawall *admission* rejections count as failures.
///
/// For a degradation level: if a level's own breaker is open or its bulkhead is
/// full, the level cannot serve, which is exactly the evidence the level machine needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct AdmissionAsFailure<C>(pub C);

impl<C, Res> Classify<Res> for AdmissionAsFailure<C>
where
    C: Classify<Res>,
{
    fn classify(&self, result: ClassifyInput<'_, Res>) -> Outcome {
        if let Err(e) = result {
            if e.rejection()
                .is_some_and(|r| r.category() == Category::Admission)
            {
                return Outcome::Failure;
            }
        }
        self.0.classify(result)
    }

    #[inline]
    fn reason(&self, result: ClassifyInput<'_, Res>, outcome: Outcome) -> Option<&'static str> {
        self.0.reason(result, outcome)
    }
}

/// A set of HTTP status codes (100..=599) as a bitmap; `Copy` and a few words wide.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StatusSet([u64; 8]);

impl StatusSet {
    /// No statuses.
    pub const fn empty() -> Self {
        Self([0; 8])
    }

    /// 5xx and 429 Too Many Requests: the statuses that mean "the supplier is sick or
    /// overloaded". Other 4xx are business answers ("no quote for this destination").
    pub fn server_errors_and_too_many_requests() -> Self {
        let mut s = Self::empty();
        for code in 500..=599 {
            s.set(code, true);
        }
        s.set(429, true);
        s
    }

    fn set(&mut self, code: u16, on: bool) {
        if !(100..=599).contains(&code) {
            return;
        }
        let i = usize::from(code - 100);
        if on {
            self.0[i / 64] |= 1 << (i % 64);
        } else {
            self.0[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Adds `status`.
    #[must_use]
    pub fn with(mut self, status: StatusCode) -> Self {
        self.set(status.as_u16(), true);
        self
    }

    /// Removes `status`.
    #[must_use]
    pub fn without(mut self, status: StatusCode) -> Self {
        self.set(status.as_u16(), false);
        self
    }

    /// Whether `status` is in the set.
    pub fn contains(&self, status: StatusCode) -> bool {
        let code = status.as_u16();
        if !(100..=599).contains(&code) {
            return false;
        }
        let i = usize::from(code - 100);
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
}

impl std::fmt::Debug for StatusSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(
                (100..=599u16).filter(|c| StatusCode::from_u16(*c).is_ok_and(|s| self.contains(s))),
            )
            .finish()
    }
}

/// Classifies HTTP responses by status: by default 5xx and 429 are failures, every
/// other status a success; transport errors are failures.
///
/// A 404 "no quote for this destination" is a valid business answer, not a sick
/// supplier, so it does not trip a breaker.
#[derive(Debug, Clone, Copy)]
pub struct HttpStatus {
    failures: StatusSet,
}

impl Default for HttpStatus {
    fn default() -> Self {
        Self {
            failures: StatusSet::server_errors_and_too_many_requests(),
        }
    }
}

impl HttpStatus {
    /// Fails exactly the statuses in `failures`.
    pub fn new(failures: StatusSet) -> Self {
        Self { failures }
    }

    /// Also fails `status`.
    #[must_use]
    pub fn with_failure(mut self, status: StatusCode) -> Self {
        self.failures = self.failures.with(status);
        self
    }

    /// No longer fails `status` (e.g. a 501 that means "not supported here").
    #[must_use]
    pub fn without_failure(mut self, status: StatusCode) -> Self {
        self.failures = self.failures.without(status);
        self
    }

    /// Classifies a status code alone.
    pub fn classify_status(&self, status: StatusCode) -> Outcome {
        if self.failures.contains(status) {
            Outcome::Failure
        } else {
            Outcome::Success
        }
    }
}

impl<B> Classify<http::Response<B>> for HttpStatus {
    fn classify(&self, result: ClassifyInput<'_, http::Response<B>>) -> Outcome {
        match result {
            Ok(res) => self.classify_status(res.status()),
            Err(e) => classify_error(e.get()),
        }
    }
}

/// The header (or trailer) that carries a gRPC status; typed, so no call parses it.
pub(crate) const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");

/// gRPC status codes, as numbered on the wire.
pub mod grpc_code {
    #![allow(missing_docs)]
    pub const OK: u8 = 0;
    pub const CANCELLED: u8 = 1;
    pub const UNKNOWN: u8 = 2;
    pub const INVALID_ARGUMENT: u8 = 3;
    pub const DEADLINE_EXCEEDED: u8 = 4;
    pub const NOT_FOUND: u8 = 5;
    pub const ALREADY_EXISTS: u8 = 6;
    pub const PERMISSION_DENIED: u8 = 7;
    pub const RESOURCE_EXHAUSTED: u8 = 8;
    pub const FAILED_PRECONDITION: u8 = 9;
    pub const ABORTED: u8 = 10;
    pub const OUT_OF_RANGE: u8 = 11;
    pub const UNIMPLEMENTED: u8 = 12;
    pub const INTERNAL: u8 = 13;
    pub const UNAVAILABLE: u8 = 14;
    pub const DATA_LOSS: u8 = 15;
    pub const UNAUTHENTICATED: u8 = 16;
}

/// Classifies gRPC responses by the `grpc-status` in the response *headers*.
///
/// That is where a trailers-only response puts it, which is how most failures
/// arrive (a server that rejects before streaming, tonic's own errors, a seawall
/// rejection rendered by a server). By default `UNAVAILABLE`, `DEADLINE_EXCEEDED`,
/// `RESOURCE_EXHAUSTED`, `INTERNAL`, `UNKNOWN` and `DATA_LOSS` are failures; every
/// other code (`NOT_FOUND`, `INVALID_ARGUMENT`, `PERMISSION_DENIED`, …) is a success.
///
/// What it does **not** see on its own: a status sent in the body's trailers after a
/// streamed response began. Such a response has no `grpc-status` header and is
/// classified by its HTTP status (200 is a success). A layer that holds the call
/// until the body ends (the breaker's and the degradation layer's
/// `hold_until_body_end`) asks it again then, through
/// [`ClassifyBodyEnd`](crate::http::ClassifyBodyEnd) (feature `http`): the
/// trailers' `grpc-status` decides, by the same codes.
#[derive(Debug, Clone, Copy)]
pub struct GrpcStatus {
    failing_codes: u32,
    http: HttpStatus,
}

impl Default for GrpcStatus {
    fn default() -> Self {
        use grpc_code::*;
        Self {
            failing_codes: [
                UNAVAILABLE,
                DEADLINE_EXCEEDED,
                RESOURCE_EXHAUSTED,
                INTERNAL,
                UNKNOWN,
                DATA_LOSS,
            ]
            .iter()
            .fold(0, |acc, c| acc | (1 << c)),
            http: HttpStatus::default(),
        }
    }
}

impl GrpcStatus {
    /// Also fails `code` (see [`grpc_code`]).
    #[must_use]
    pub fn with_failure(mut self, code: u8) -> Self {
        if code <= 16 {
            self.failing_codes |= 1 << code;
        }
        self
    }

    /// No longer fails `code`.
    #[must_use]
    pub fn without_failure(mut self, code: u8) -> Self {
        if code <= 16 {
            self.failing_codes &= !(1 << code);
        }
        self
    }

    /// Classifies a gRPC status code alone. Codes outside 0..=16 count as `UNKNOWN`.
    pub fn classify_code(&self, code: u32) -> Outcome {
        let code = if code > 16 {
            u32::from(grpc_code::UNKNOWN)
        } else {
            code
        };
        if self.failing_codes & (1 << code) != 0 {
            Outcome::Failure
        } else {
            Outcome::Success
        }
    }

    /// Classifies from response headers: the `grpc-status` header when present,
    /// otherwise the HTTP status.
    pub fn classify_parts(&self, status: StatusCode, headers: &http::HeaderMap) -> Outcome {
        match headers.get(GRPC_STATUS) {
            Some(v) => self.classify_status_value(v),
            None => self.http.classify_status(status),
        }
    }

    /// Classifies a `grpc-status` value, from the headers of a trailers-only
    /// response or from the trailers of a streamed one. An unreadable value counts
    /// as `UNKNOWN`.
    pub fn classify_status_value(&self, value: &http::HeaderValue) -> Outcome {
        match value
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            Some(code) => self.classify_code(code),
            None => self.classify_code(u32::from(grpc_code::UNKNOWN)),
        }
    }
}

impl<B> Classify<http::Response<B>> for GrpcStatus {
    fn classify(&self, result: ClassifyInput<'_, http::Response<B>>) -> Outcome {
        match result {
            Ok(res) => self.classify_parts(res.status(), res.headers()),
            Err(e) => classify_error(e.get()),
        }
    }
}

/// How the overload classifiers decide an error: a timeout (the dependency had the
/// call and the budget ran out) is overload; anything else says nothing about load.
fn overload_of_error(error: &(dyn Error + 'static)) -> Outcome {
    match find_rejection(error).map(|r| r.category()) {
        Some(Category::Timeout) => Outcome::Failure,
        // An admission rejection (an inner breaker open, an inner bulkhead full) never
        // reached the dependency; an exhausted fallback chain and a transport error
        // tell nothing about its queue.
        Some(Category::Admission | Category::Exhausted) | None => Outcome::Ignore,
    }
}

/// Overload classification for any result type, for an adaptive concurrency limit:
/// only a timeout says the dependency is overloaded.
///
/// Here [`Outcome::Failure`] means **overloaded** (shrink the limit),
/// [`Outcome::Success`] means **served** (the call's latency is a fair sample,
/// whatever its answer), and [`Outcome::Ignore`] means **no evidence** (no sample
/// at all). Every `Ok` is served; a seawall timeout ([`DeadlineExceeded`] from a
/// breaker or a [`DeadlineLayer`](crate::DeadlineLayer) below) is overload; an
/// admission rejection from below (an open breaker answers in microseconds, which
/// is no latency of the dependency) and any other error are ignored.
///
/// For HTTP and gRPC responses, use [`OverloadStatus`], which also reads the status.
///
/// [`DeadlineExceeded`]: crate::DeadlineExceeded
#[derive(Debug, Clone, Copy, Default)]
pub struct TimeoutsAsOverload;

impl<Res> Classify<Res> for TimeoutsAsOverload {
    fn classify(&self, result: ClassifyInput<'_, Res>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(e) => overload_of_error(e.get()),
        }
    }
}

/// Overload classification of HTTP and gRPC responses, for an adaptive concurrency
/// limit: `429 Too Many Requests`, `503 Service Unavailable` and gRPC
/// `RESOURCE_EXHAUSTED` are overload; every other answer is served.
///
/// As for [`TimeoutsAsOverload`], [`Outcome::Failure`] means **overloaded**,
/// [`Outcome::Success`] **served** (a latency sample) and [`Outcome::Ignore`] **no
/// evidence**. A `404` or a `500` is served: the supplier answered, and answering
/// "no" or failing on one request is not a sign that it has too much work. Only the
/// statuses a supplier sends to shed load shrink the limit. Errors are decided as
/// [`TimeoutsAsOverload`] does: a timeout is overload, anything else is ignored.
///
/// The `grpc-status` response header, when present (a trailers-only response),
/// decides; otherwise the HTTP status does.
#[derive(Debug, Clone, Copy)]
pub struct OverloadStatus {
    statuses: StatusSet,
    grpc_codes: u32,
}

impl Default for OverloadStatus {
    fn default() -> Self {
        Self {
            statuses: StatusSet::empty()
                .with(StatusCode::TOO_MANY_REQUESTS)
                .with(StatusCode::SERVICE_UNAVAILABLE),
            grpc_codes: 1 << grpc_code::RESOURCE_EXHAUSTED,
        }
    }
}

impl OverloadStatus {
    /// Also treats `status` as overload (e.g. a supplier that sheds with `507`).
    #[must_use]
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.statuses = self.statuses.with(status);
        self
    }

    /// No longer treats `status` as overload (e.g. a `503` that means "maintenance").
    #[must_use]
    pub fn without_status(mut self, status: StatusCode) -> Self {
        self.statuses = self.statuses.without(status);
        self
    }

    /// Also treats gRPC `code` as overload (see [`grpc_code`]).
    #[must_use]
    pub fn with_grpc_code(mut self, code: u8) -> Self {
        if code <= 16 {
            self.grpc_codes |= 1 << code;
        }
        self
    }

    /// No longer treats gRPC `code` as overload.
    #[must_use]
    pub fn without_grpc_code(mut self, code: u8) -> Self {
        if code <= 16 {
            self.grpc_codes &= !(1 << code);
        }
        self
    }

    /// Classifies from response headers: the `grpc-status` header when present,
    /// otherwise the HTTP status. An unreadable `grpc-status` is served.
    pub fn classify_parts(&self, status: StatusCode, headers: &http::HeaderMap) -> Outcome {
        // A typed header name: no parsing of the name on every call.
        const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");
        let overloaded = match headers.get(&GRPC_STATUS) {
            Some(v) => v
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
                .is_some_and(|code| code <= 16 && self.grpc_codes & (1 << code) != 0),
            None => self.statuses.contains(status),
        };
        if overloaded {
            Outcome::Failure
        } else {
            Outcome::Success
        }
    }
}

impl<B> Classify<http::Response<B>> for OverloadStatus {
    fn classify(&self, result: ClassifyInput<'_, http::Response<B>>) -> Outcome {
        match result {
            Ok(res) => self.classify_parts(res.status(), res.headers()),
            Err(e) => overload_of_error(e.get()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rejection::tests::ClientError;
    use crate::rejection::{BoxError, BulkheadFull, CircuitOpen, DeadlineExceeded};
    use std::time::Duration;

    fn response(status: u16) -> http::Response<()> {
        http::Response::builder().status(status).body(()).unwrap()
    }

    fn classify_http(status: u16) -> Outcome {
        HttpStatus::default().classify(Ok(&response(status)))
    }

    #[test]
    fn http_404_is_a_business_answer_and_503_a_failure() {
        assert_eq!(classify_http(404), Outcome::Success);
        assert_eq!(classify_http(200), Outcome::Success);
        assert_eq!(classify_http(503), Outcome::Failure);
        assert_eq!(classify_http(500), Outcome::Failure);
        assert_eq!(classify_http(599), Outcome::Failure);
        assert_eq!(classify_http(429), Outcome::Failure);
        assert_eq!(classify_http(409), Outcome::Success);
    }

    #[test]
    fn http_set_is_configurable() {
        let c = HttpStatus::default()
            .without_failure(StatusCode::NOT_IMPLEMENTED)
            .with_failure(StatusCode::CONFLICT);
        assert_eq!(c.classify(Ok(&response(501))), Outcome::Success);
        assert_eq!(c.classify(Ok(&response(409))), Outcome::Failure);
        assert_eq!(c.classify(Ok(&response(502))), Outcome::Failure);
        let none = HttpStatus::new(StatusSet::empty());
        assert_eq!(none.classify(Ok(&response(500))), Outcome::Success);
    }

    #[test]
    fn connection_refused_is_a_failure() {
        let refused: BoxError =
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let r: ClassifyInput<'_, http::Response<()>> = Err(ErrorRef::new(&*refused));
        assert_eq!(HttpStatus::default().classify(r), Outcome::Failure);
        assert_eq!(ErrorsAsFailures.classify(r), Outcome::Failure);
        assert_eq!(GrpcStatus::default().classify(r), Outcome::Failure);
    }

    #[test]
    fn a_wrapped_bulkhead_rejection_is_ignored_by_every_classifier() {
        let err: BoxError = Box::new(ClientError(Box::new(BulkheadFull::new("b".into()))));
        let r: ClassifyInput<'_, http::Response<()>> = Err(ErrorRef::new(&*err));
        assert_eq!(ErrorsAsFailures.classify(r), Outcome::Ignore);
        assert_eq!(HttpStatus::default().classify(r), Outcome::Ignore);
        assert_eq!(GrpcStatus::default().classify(r), Outcome::Ignore);
        let open: BoxError = Box::new(CircuitOpen::new("c".into(), Duration::from_secs(1)));
        assert_eq!(
            ErrorsAsFailures.classify(Err::<&(), _>(ErrorRef::new(&*open))),
            Outcome::Ignore
        );
    }

    #[test]
    fn a_deadline_exceeded_is_a_failure_for_every_classifier() {
        let err: BoxError = Box::new(DeadlineExceeded::new());
        let r: ClassifyInput<'_, http::Response<()>> = Err(ErrorRef::new(&*err));
        assert_eq!(ErrorsAsFailures.classify(r), Outcome::Failure);
        assert_eq!(HttpStatus::default().classify(r), Outcome::Failure);
        assert_eq!(GrpcStatus::default().classify(r), Outcome::Failure);
    }

    #[test]
    fn admission_as_failure_counts_local_rejections() {
        let err: BoxError = Box::new(BulkheadFull::new("b".into()));
        let c = AdmissionAsFailure(ErrorsAsFailures);
        assert_eq!(
            c.classify(Err::<&(), _>(ErrorRef::new(&*err))),
            Outcome::Failure
        );
        assert_eq!(c.classify(Ok(&())), Outcome::Success);
    }

    fn grpc(code: &str) -> Outcome {
        let res = http::Response::builder()
            .status(200)
            .header("grpc-status", code)
            .body(())
            .unwrap();
        GrpcStatus::default().classify(Ok(&res))
    }

    #[test]
    fn grpc_unavailable_fails_and_not_found_does_not() {
        assert_eq!(grpc("14"), Outcome::Failure);
        assert_eq!(grpc("4"), Outcome::Failure);
        assert_eq!(grpc("8"), Outcome::Failure);
        assert_eq!(grpc("13"), Outcome::Failure);
        assert_eq!(grpc("2"), Outcome::Failure);
        assert_eq!(grpc("15"), Outcome::Failure);
        assert_eq!(grpc("5"), Outcome::Success);
        assert_eq!(grpc("3"), Outcome::Success);
        assert_eq!(grpc("9"), Outcome::Success);
        assert_eq!(grpc("7"), Outcome::Success);
        assert_eq!(grpc("0"), Outcome::Success);
        // Garbage or out-of-range codes are UNKNOWN, which fails.
        assert_eq!(grpc("garbage"), Outcome::Failure);
        assert_eq!(grpc("99"), Outcome::Failure);
    }

    #[test]
    fn grpc_without_status_header_falls_back_to_http_status() {
        let c = GrpcStatus::default();
        assert_eq!(c.classify(Ok(&response(200))), Outcome::Success);
        assert_eq!(c.classify(Ok(&response(503))), Outcome::Failure);
        let c = c
            .without_failure(grpc_code::UNAVAILABLE)
            .with_failure(grpc_code::NOT_FOUND);
        assert_eq!(c.classify_code(14), Outcome::Success);
        assert_eq!(c.classify_code(5), Outcome::Failure);
    }

    #[test]
    fn per_request_factory_sees_the_request() {
        let factory = PerRequest::new(|req: &http::Request<()>| {
            if req.method() == http::Method::POST {
                HttpStatus::default().with_failure(StatusCode::CONFLICT)
            } else {
                HttpStatus::default()
            }
        });
        let post = http::Request::post("/").body(()).unwrap();
        let get = http::Request::get("/").body(()).unwrap();
        let conflict = response(409);
        let on_post = ClassifyRequest::<_, http::Response<()>>::classifier_for(&factory, &post);
        let on_get = ClassifyRequest::<_, http::Response<()>>::classifier_for(&factory, &get);
        assert_eq!(on_post.classify(Ok(&conflict)), Outcome::Failure);
        assert_eq!(on_get.classify(Ok(&conflict)), Outcome::Success);
    }

    #[test]
    fn closures_classify() {
        let c = classify_fn(|r: ClassifyInput<'_, u8>| match r {
            Ok(&0) => Outcome::Failure,
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::Ignore,
        });
        assert_eq!(c.classify(Ok(&0)), Outcome::Failure);
        assert_eq!(c.classify(Ok(&1)), Outcome::Success);
        // A closure is also a per-request factory (it is Clone).
        let per = ClassifyRequest::<(), u8>::classifier_for(&c, &());
        assert_eq!(per.classify(Ok(&0)), Outcome::Failure);
    }

    #[test]
    fn a_reason_is_added_without_changing_the_outcome() {
        let c = with_reason(
            HttpStatus::default(),
            |r: ClassifyInput<'_, http::Response<()>>, o| match (r, o) {
                (Ok(res), Outcome::Success) if res.status() == StatusCode::NOT_FOUND => {
                    Some("business_refusal")
                }
                _ => None,
            },
        );
        let not_found = response(404);
        let ok = response(200);
        let down = response(503);
        assert_eq!(c.classify(Ok(&not_found)), Outcome::Success);
        assert_eq!(
            c.reason(Ok(&not_found), Outcome::Success),
            Some("business_refusal")
        );
        assert_eq!(c.reason(Ok(&ok), Outcome::Success), None);
        assert_eq!(c.classify(Ok(&down)), Outcome::Failure);
        assert_eq!(c.reason(Ok(&down), Outcome::Failure), None);
        // Wrapping keeps the reason; the provided classifiers give none of their own.
        let wrapped = AdmissionAsFailure(c);
        assert_eq!(
            wrapped.reason(Ok(&not_found), Outcome::Success),
            Some("business_refusal")
        );
        assert_eq!(
            HttpStatus::default().reason(Ok(&not_found), Outcome::Success),
            None
        );
        // A classifier with reasons is its own per-request factory.
        let per = ClassifyRequest::<(), http::Response<()>>::classifier_for(&c, &());
        assert_eq!(
            per.reason(Ok(&not_found), Outcome::Success),
            Some("business_refusal")
        );
    }

    #[test]
    fn overload_is_429_503_and_resource_exhausted_only() {
        let c = OverloadStatus::default();
        for (status, expected) in [
            (429, Outcome::Failure),
            (503, Outcome::Failure),
            (200, Outcome::Success),
            (404, Outcome::Success),
            (500, Outcome::Success),
            (502, Outcome::Success),
        ] {
            assert_eq!(c.classify(Ok(&response(status))), expected, "{status}");
        }
        let grpc = |code: &str| {
            let res = http::Response::builder()
                .header("grpc-status", code)
                .body(())
                .unwrap();
            c.classify(Ok(&res))
        };
        assert_eq!(grpc("8"), Outcome::Failure);
        assert_eq!(grpc("14"), Outcome::Success);
        assert_eq!(grpc("13"), Outcome::Success);
        assert_eq!(grpc("garbage"), Outcome::Success);
        let c = c
            .with_status(StatusCode::INSUFFICIENT_STORAGE)
            .without_status(StatusCode::SERVICE_UNAVAILABLE)
            .with_grpc_code(grpc_code::UNAVAILABLE)
            .without_grpc_code(grpc_code::RESOURCE_EXHAUSTED);
        assert_eq!(c.classify(Ok(&response(507))), Outcome::Failure);
        assert_eq!(c.classify(Ok(&response(503))), Outcome::Success);
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-status", http::HeaderValue::from_static("14"));
        assert_eq!(c.classify_parts(StatusCode::OK, &headers), Outcome::Failure);
        headers.insert("grpc-status", http::HeaderValue::from_static("8"));
        assert_eq!(c.classify_parts(StatusCode::OK, &headers), Outcome::Success);
    }

    #[test]
    fn overload_from_errors_is_a_timeout_only() {
        let late: BoxError = Box::new(ClientError(Box::new(DeadlineExceeded::new())));
        let open: BoxError = Box::new(CircuitOpen::new("c".into(), Duration::from_secs(1)));
        let full: BoxError = Box::new(BulkheadFull::new("b".into()));
        let refused: BoxError =
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        for c in [
            &OverloadStatus::default() as &dyn Classify<http::Response<()>>,
            &TimeoutsAsOverload,
        ] {
            assert_eq!(c.classify(Err(ErrorRef::new(&*late))), Outcome::Failure);
            assert_eq!(c.classify(Err(ErrorRef::new(&*open))), Outcome::Ignore);
            assert_eq!(c.classify(Err(ErrorRef::new(&*full))), Outcome::Ignore);
            assert_eq!(c.classify(Err(ErrorRef::new(&*refused))), Outcome::Ignore);
        }
        assert_eq!(TimeoutsAsOverload.classify(Ok(&5u8)), Outcome::Success);
    }

    #[test]
    fn status_set_debug_lists_members() {
        let s = StatusSet::empty()
            .with(StatusCode::NOT_FOUND)
            .with(StatusCode::BAD_GATEWAY);
        assert_eq!(format!("{s:?}"), "{404, 502}");
    }
}
