//! How the layer's response is made from the primary's answer, a fallback's
//! answer, or an error: the generic [`Plain`] mode here, the HTTP modes in
//! [`http`](crate::http) (feature `http`).

use std::time::Duration;

use seawall_core::BoxError;

use crate::error::{Mark, Served};
use crate::handle::Runtime;

pub(crate) mod sealed {
    #[allow(unreachable_pub)]
    pub trait Sealed {}

    /// A mode whose errors stay errors (`Error = BoxError`): one impl makes every
    /// such mode a [`Mode`](super::Mode).
    #[allow(unreachable_pub)]
    pub trait KeepsErrors: Sealed {}
}

/// Where an error that reaches the mode came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorOrigin {
    /// The primary's error fired no trigger (or the fallback is disabled).
    PassedThrough,
    /// The fallback's final answer: [`Unavailable`](crate::Unavailable) or
    /// [`FallbacksExhausted`](seawall_core::FallbacksExhausted).
    Fallback,
}

/// A mode's response type, and how it is made from the primary's answer or from a
/// fallback's answer with its [`Served`] marker. Sealed; the half of a [`Mode`] that
/// both HTTP modes share.
pub trait Responses<Res, Ans>: sealed::Sealed {
    /// The service's response type.
    type Response;

    #[doc(hidden)]
    fn primary(&self, res: Res) -> Self::Response;

    #[doc(hidden)]
    fn served(&self, answer: Ans, served: Served) -> Self::Response;
}

/// How the layer answers: the response and error types of its service. Sealed;
/// chosen on the builder: [`Plain`] (the default), [`Unmarked`], or with the `http` feature
/// `http::EitherBody` and `http::HttpServer`.
pub trait Mode<Res, Ans>: Responses<Res, Ans> {
    /// The service's error type.
    type Error;

    #[doc(hidden)]
    fn fail(
        &self,
        error: BoxError,
        origin: ErrorOrigin,
        primary_retry_after: Option<Duration>,
        rt: &Runtime,
    ) -> Result<Self::Response, Self::Error>;

    /// An error from the inner service's `poll_ready`: `Err` to return it from
    /// `poll_ready`, `Ok` to hold it and answer the next call with it.
    #[doc(hidden)]
    fn ready_error(&self, error: BoxError) -> Result<BoxError, Self::Error>;
}

impl<Res, Ans, T: Responses<Res, Ans> + sealed::KeepsErrors> Mode<Res, Ans> for T {
    type Error = BoxError;

    fn fail(
        &self,
        error: BoxError,
        _origin: ErrorOrigin,
        _primary_retry_after: Option<Duration>,
        _rt: &Runtime,
    ) -> Result<Self::Response, BoxError> {
        Err(error)
    }

    fn ready_error(&self, error: BoxError) -> Result<BoxError, BoxError> {
        Err(error)
    }
}

/// The generic mode (the default): the fallback answers with the primary's response
/// type, which records the [`Served`] marker through [`Mark`] (see [`Unmarked`] for
/// a type that cannot); errors are `BoxError`s
/// (passed-through errors untouched, [`Unavailable`](crate::Unavailable) and
/// [`FallbacksExhausted`](seawall_core::FallbacksExhausted) from the fallback).
#[derive(Debug, Clone, Copy, Default)]
pub struct Plain;

impl sealed::Sealed for Plain {}
impl sealed::KeepsErrors for Plain {}

impl<Res: Mark> Responses<Res, Res> for Plain {
    type Response = Res;

    #[inline]
    fn primary(&self, res: Res) -> Res {
        res
    }

    #[inline]
    fn served(&self, mut answer: Res, served: Served) -> Res {
        answer.mark(served);
        answer
    }
}

/// The generic mode for a response type that has nowhere to record the [`Served`]
/// marker (a `String`, a number): the fallback answers with the primary's response
/// type, unmarked. Chosen explicitly with
/// [`unmarked`](crate::FallbackBuilder::unmarked); the handle's counters, the events,
/// metrics and tracing still tell served answers from the primary's.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unmarked;

impl sealed::Sealed for Unmarked {}
impl sealed::KeepsErrors for Unmarked {}

impl<Res> Responses<Res, Res> for Unmarked {
    type Response = Res;

    #[inline]
    fn primary(&self, res: Res) -> Res {
        res
    }

    #[inline]
    fn served(&self, answer: Res, _served: Served) -> Res {
        answer
    }
}
