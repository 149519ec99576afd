//! How long a call keeps its slot once the inner service has answered.

use std::marker::PhantomData;

use seawall_core::HasExtensions;

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

/// Decides what an admitted request is given before it goes to the inner service.
///
/// Sealed: nothing (every mode, for any request type) or, with
/// [`WithPermitHandle`], a [`PermitHandle`](crate::PermitHandle) in the request's
/// extensions (requests with extensions only, such as `http::Request`).
pub trait Lend<Req>: sealed::Sealed {
    /// Gives `req` what this mode lends it; the permit the call keeps.
    fn lend(permit: Permit, req: &mut Req) -> Permit;
}

/// The default: the slot is freed when the inner future completes (or is dropped).
#[derive(Debug, Clone, Copy, Default)]
pub struct UntilResponse {
    _private: (),
}

impl sealed::Sealed for UntilResponse {}

impl<Req> Lend<Req> for UntilResponse {
    #[inline]
    fn lend(permit: Permit, _req: &mut Req) -> Permit {
        permit
    }
}

impl<Res> Hold<Res> for UntilResponse {
    type Output = Res;

    // Always inlined: out of line (as in a bulkhead over a breaker), the response
    // would be passed in and handed back through memory around the permit's drop.
    #[inline(always)]
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
/// Hold it in **client** stacks (a hyper-util `Client`, a tonic `Channel`), where
/// the connection to the dependency is busy until the body ends; a server route
/// that streams to its own caller (server-sent events, long polling) keeps the
/// default, or a slow reader pins the slot. The bulkhead does not bound the body
/// in time: under a breaker held until the body ends too, the request's deadline
/// ends a body still streaming when it passes, and with it the slot.
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
impl<Req> Lend<Req> for UntilBodyEnd {
    #[inline]
    fn lend(permit: Permit, _req: &mut Req) -> Permit {
        permit
    }
}

#[cfg(feature = "http")]
impl<B: http_body::Body> Hold<http::Response<B>> for UntilBodyEnd {
    type Output = http::Response<seawall_core::http::Guarded<B, Permit>>;

    fn hold(response: http::Response<B>, permit: Permit) -> Self::Output {
        if permit.releases_at_headers() {
            drop(permit);
            return response.map(seawall_core::http::Guarded::without_guard);
        }
        seawall_core::http::guard_response(response, permit)
    }
}

/// Hold mode `H`, and a [`PermitHandle`](crate::PermitHandle) in each admitted
/// request's extensions, so a handler that moves work into a spawned task can keep
/// the slot until that work ends. For requests with extensions (`http::Request`);
/// each admitted call allocates one shared permit.
///
/// Chosen with [`BulkheadLayer::permit_in_extensions`](crate::BulkheadLayer::permit_in_extensions).
#[derive(Debug, Clone, Copy, Default)]
pub struct WithPermitHandle<H> {
    _hold: PhantomData<fn() -> H>,
}

impl<H> sealed::Sealed for WithPermitHandle<H> {}

impl<H: Hold<Res>, Res> Hold<Res> for WithPermitHandle<H> {
    type Output = H::Output;

    #[inline]
    fn hold(response: Res, permit: Permit) -> Self::Output {
        H::hold(response, permit)
    }
}

impl<H, Req: HasExtensions> Lend<Req> for WithPermitHandle<H> {
    fn lend(permit: Permit, req: &mut Req) -> Permit {
        match req.extensions_mut() {
            Some(extensions) => {
                let (permit, handle) = permit.into_shared();
                extensions.insert(handle);
                permit
            }
            None => permit,
        }
    }
}
