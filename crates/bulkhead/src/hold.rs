//! How long a call keeps its slot once the inner service has answered.

use crate::permit::Permit;

mod sealed {
    #[allow(unreachable_pub)]
    pub trait Sealed {}
}

/// Decides what happens to the [`Permit`] when the inner future completes.
///
/// Sealed: the two modes are [`UntilResponse`] (the default) and, with the `http`
/// feature, [`UntilBodyEnd`].
pub trait Hold<Res>: sealed::Sealed {
    /// The response the bulkhead's service returns.
    type Output;

    /// Turns the inner response into the bulkhead's, keeping or dropping `permit`.
    fn hold(response: Res, permit: Permit) -> Self::Output;
}

/// The default: the slot is freed when the inner future completes (or is dropped).
#[derive(Debug, Clone, Copy, Default)]
pub struct UntilResponse {
    _private: (),
}

impl sealed::Sealed for UntilResponse {}

impl<Res> Hold<Res> for UntilResponse {
    type Output = Res;

    #[inline]
    fn hold(response: Res, permit: Permit) -> Res {
        drop(permit);
        response
    }
}

/// For `http::Response<B>`: the slot is kept by the response body until it has been
/// read to its end, has failed, or is dropped (the connection to the dependency is
/// busy until then). The response type becomes
/// `http::Response<`[`Guarded`](seawall_core::http::Guarded)`<B, `[`Permit`]`>>`.
///
/// Chosen with [`BulkheadLayer::hold_until_body_end`](crate::BulkheadLayer::hold_until_body_end).
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
#[derive(Debug, Clone, Copy, Default)]
pub struct UntilBodyEnd {
    _private: (),
}

#[cfg(feature = "http")]
impl sealed::Sealed for UntilBodyEnd {}

#[cfg(feature = "http")]
impl<B: http_body::Body> Hold<http::Response<B>> for UntilBodyEnd {
    type Output = http::Response<seawall_core::http::Guarded<B, Permit>>;

    fn hold(response: http::Response<B>, permit: Permit) -> Self::Output {
        seawall_core::http::guard_response(response, permit)
    }
}
