//! What a fault layer knows of the requests and responses it serves: how a call is
//! matched to an injection's `route` and `key`, and how a response is marked or
//! answered. The kinds for any request type live here; HTTP's in `http.rs`.

use std::borrow::Cow;
use std::sync::Arc;

use crate::fault::Fault;

/// What a fault layer knows of its requests: how to match a call to an injection's
/// `route` and `key`.
///
/// Implemented by [`AnyRequest`] (any request type) and, with the feature `http`,
/// [`HttpRequests`](crate::HttpRequests); there is nothing for users to implement.
pub trait Requests<Req>: Clone {
    /// Whether this kind of request can carry the HTTP-only faults.
    const HTTP: bool;
    /// The request's path, for an injection's `route`.
    fn route<'a>(&self, req: &'a Req) -> Option<&'a str>;
    /// The request's key, for an injection's `key`.
    fn key<'a>(&self, req: &'a Req) -> Option<Cow<'a, str>>;
}

/// What a fault layer knows of its responses: how to mark one, and how to answer
/// without the inner service. Implemented alongside [`Requests`].
pub trait Responses<Res>: Clone {
    /// What the service answers.
    type Response;
    /// The inner service's response, marked when a fault was injected into it
    /// (`injected`: the fault, and the name of the layer that injected it).
    fn pass(&self, res: Res, injected: Option<(&Fault, &Arc<str>)>) -> Self::Response;
    /// The answer an HTTP-only answer fault gives instead of calling the inner service.
    fn answer(&self, fault: &Fault, policy: &Arc<str>) -> Option<Self::Response>;
}

/// Requests of any type: no route, a key from the function given to
/// [`FaultLayer::keyed`](crate::FaultLayer::keyed) if any, responses passed as they
/// are (an injected error carries the mark [`Injected`](crate::Injected); a response
/// held back by a latency carries none, having no extensions).
#[derive(Clone, Copy, Debug, Default)]
pub struct AnyRequest<K = NoKey> {
    key: K,
}

/// No key function: an injection with a `key` never matches.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoKey;

impl AnyRequest {
    pub(crate) fn new() -> Self {
        Self { key: NoKey }
    }
}

impl<K> AnyRequest<K> {
    pub(crate) fn keyed<F>(self, key: F) -> AnyRequest<F> {
        AnyRequest { key }
    }
}

/// A key function for [`AnyRequest`]: `Fn(&Req) -> Option<String>`, or [`NoKey`].
pub trait KeyOf<Req>: Clone {
    /// The request's key.
    fn key_of(&self, req: &Req) -> Option<String>;
}

impl<Req> KeyOf<Req> for NoKey {
    fn key_of(&self, _: &Req) -> Option<String> {
        None
    }
}

impl<Req, F> KeyOf<Req> for F
where
    F: Fn(&Req) -> Option<String> + Clone,
{
    fn key_of(&self, req: &Req) -> Option<String> {
        self(req)
    }
}

impl<Req, K: KeyOf<Req>> Requests<Req> for AnyRequest<K> {
    const HTTP: bool = false;

    fn route<'a>(&self, _: &'a Req) -> Option<&'a str> {
        None
    }

    fn key<'a>(&self, req: &'a Req) -> Option<Cow<'a, str>> {
        self.key.key_of(req).map(Cow::Owned)
    }
}

impl<Res, K: Clone> Responses<Res> for AnyRequest<K> {
    type Response = Res;

    fn pass(&self, res: Res, _: Option<(&Fault, &Arc<str>)>) -> Res {
        res
    }

    fn answer(&self, _: &Fault, _: &Arc<str>) -> Option<Res> {
        None
    }
}
