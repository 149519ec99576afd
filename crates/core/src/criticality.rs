//! A request's criticality: which calls a bulkhead serves first and sheds last
//! when it is overloaded, and how a request is given one.
//!
//! Three classes, as the Google SRE book's "Handling Overload" uses in practice
//! (its four collapse to these three for one service): **critical** calls are the
//! ones the business cannot lose (a checkout's quote), **default** calls are
//! everything not marked otherwise, and **sheddable** calls are work whose loss
//! nobody notices at once (a prefetch, a recommendation). More classes would ask
//! operators to rank what they cannot tell apart; fewer could not express "keep
//! the usual traffic, drop the optional".

use std::fmt;
use std::str::FromStr;

use http::{HeaderName, HeaderValue};

/// How much a call matters when a bulkhead must choose whom to serve.
///
/// Ordered from the most critical to the least: `Critical < Default < Sheddable`
/// in `Ord`, so the class served first sorts first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[repr(u8)]
pub enum Criticality {
    /// The business cannot lose it: served first, never displaced, up to every slot.
    Critical = 0,
    /// A request not marked otherwise.
    #[default]
    Default = 1,
    /// Nice to have: shed first, limited to its share of the slots.
    Sheddable = 2,
}

impl Criticality {
    /// Every class, the most critical first.
    pub const ALL: [Criticality; 3] = [Self::Critical, Self::Default, Self::Sheddable];

    /// The class's position in [`ALL`](Self::ALL) (0 is the most critical).
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The lowercase name used in headers, metrics labels and policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Critical => "critical",
            Self::Default => "default",
            Self::Sheddable => "sheddable",
        }
    }
}

impl fmt::Display for Criticality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of [`Criticality::ALL`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownCriticality;

impl fmt::Display for UnknownCriticality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("criticality must be critical, default or sheddable")
    }
}

impl std::error::Error for UnknownCriticality {}

impl FromStr for Criticality {
    type Err = UnknownCriticality;

    /// `critical`, `default` or `sheddable`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or(UnknownCriticality)
    }
}

/// Gives each request its [`Criticality`].
///
/// A closure `Fn(&Req) -> Criticality` is one, for any request type;
/// [`CriticalityHeader`] reads HTTP headers (and gRPC metadata, which tonic sends
/// as headers); [`Unclassed`] gives none, and a layer built with it has no
/// classes at all (it costs nothing).
pub trait CriticalityOf<Req> {
    /// The request's class, or `None` when classes are not used.
    fn criticality(&self, req: &Req) -> Option<Criticality>;
}

impl<Req, F> CriticalityOf<Req> for F
where
    F: Fn(&Req) -> Criticality,
{
    #[inline]
    fn criticality(&self, req: &Req) -> Option<Criticality> {
        Some(self(req))
    }
}

/// No classes: every request is served in arrival order, as if none were configured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unclassed;

impl<Req> CriticalityOf<Req> for Unclassed {
    #[inline(always)]
    fn criticality(&self, _req: &Req) -> Option<Criticality> {
        None
    }
}

/// The header `x-criticality`, unless a [`CriticalityHeader`] names another.
pub const CRITICALITY_HEADER: &str = "x-criticality";

/// Reads a request's [`Criticality`] from a header (`x-criticality` unless
/// named otherwise; gRPC metadata travels as headers too).
///
/// **An inbound header is untrusted by default**: a client could mark every call
/// critical. Untrusted, the header may only *lower* a request's class below the
/// default (a client saying its own prefetch is sheddable is believed; one saying
/// it is critical is not). [`trusted`](Self::trusted) takes the header as sent,
/// for calls from your own services. A missing or unknown value gives the default.
///
/// ```
/// use seawall_core::{Criticality, CriticalityHeader, CriticalityOf};
///
/// let from_clients = CriticalityHeader::new();
/// let req = |v: &str| http::Request::builder().header("x-criticality", v).body(()).unwrap();
/// assert_eq!(from_clients.criticality(&req("critical")), Some(Criticality::Default));
/// assert_eq!(from_clients.criticality(&req("sheddable")), Some(Criticality::Sheddable));
/// let internal = CriticalityHeader::new().trusted(true);
/// assert_eq!(internal.criticality(&req("critical")), Some(Criticality::Critical));
/// ```
#[derive(Debug, Clone)]
pub struct CriticalityHeader {
    name: HeaderName,
    trusted: bool,
    default: Criticality,
}

impl Default for CriticalityHeader {
    fn default() -> Self {
        Self::new()
    }
}

impl CriticalityHeader {
    /// Reads `x-criticality`, untrusted, with [`Criticality::Default`] when absent.
    pub fn new() -> Self {
        Self {
            name: HeaderName::from_static(CRITICALITY_HEADER),
            trusted: false,
            default: Criticality::Default,
        }
    }

    /// Reads the header `name` instead.
    #[must_use]
    pub fn named(mut self, name: HeaderName) -> Self {
        self.name = name;
        self
    }

    /// Whether the header is taken as sent (`true`), or may only lower the class
    /// below the default (`false`, the default).
    #[must_use]
    pub fn trusted(mut self, trusted: bool) -> Self {
        self.trusted = trusted;
        self
    }

    /// The class of a request without the header (or, untrusted, the highest a
    /// header may claim).
    #[must_use]
    pub fn default_class(mut self, default: Criticality) -> Self {
        self.default = default;
        self
    }

    /// The class `headers` give.
    pub fn read(&self, headers: &http::HeaderMap) -> Criticality {
        let sent = headers
            .get(&self.name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<Criticality>().ok());
        match sent {
            Some(c) if self.trusted => c,
            // Untrusted: a client may only ask for less.
            Some(c) => c.max(self.default),
            None => self.default,
        }
    }

    /// Writes `class` into an outgoing request's headers, so the next service
    /// (which trusts this one) sheds it in the same order.
    pub fn write(&self, headers: &mut http::HeaderMap, class: Criticality) {
        headers.insert(self.name.clone(), HeaderValue::from_static(class.as_str()));
    }
}

impl<B> CriticalityOf<http::Request<B>> for CriticalityHeader {
    #[inline]
    fn criticality(&self, req: &http::Request<B>) -> Option<Criticality> {
        Some(self.read(req.headers()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &str, value: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    #[test]
    fn the_classes_are_ordered_most_critical_first_and_named() {
        assert!(Criticality::Critical < Criticality::Default);
        assert!(Criticality::Default < Criticality::Sheddable);
        let names: Vec<_> = Criticality::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names, ["critical", "default", "sheddable"]);
        assert_eq!("Sheddable".parse(), Ok(Criticality::Sheddable));
        assert_eq!("urgent".parse::<Criticality>(), Err(UnknownCriticality));
    }

    #[test]
    fn an_untrusted_header_may_only_lower_the_class() {
        let h = CriticalityHeader::new();
        assert_eq!(
            h.read(&with("x-criticality", "critical")),
            Criticality::Default
        );
        assert_eq!(
            h.read(&with("x-criticality", "sheddable")),
            Criticality::Sheddable
        );
        assert_eq!(
            h.read(&with("x-criticality", "bogus")),
            Criticality::Default
        );
        assert_eq!(h.read(&http::HeaderMap::new()), Criticality::Default);
        let trusted = h.clone().trusted(true);
        assert_eq!(
            trusted.read(&with("x-criticality", "critical")),
            Criticality::Critical
        );
        // A lower default caps what an untrusted header may claim.
        let low = h.default_class(Criticality::Sheddable);
        assert_eq!(
            low.read(&with("x-criticality", "default")),
            Criticality::Sheddable
        );
    }

    #[test]
    fn the_header_name_is_configurable_and_written_back() {
        let h = CriticalityHeader::new()
            .named(HeaderName::from_static("grpc-criticality"))
            .trusted(true);
        assert_eq!(
            h.read(&with("grpc-criticality", "critical")),
            Criticality::Critical
        );
        assert_eq!(
            h.read(&with("x-criticality", "critical")),
            Criticality::Default
        );
        let mut out = http::HeaderMap::new();
        h.write(&mut out, Criticality::Sheddable);
        assert_eq!(out.get("grpc-criticality").unwrap(), "sheddable");
    }

    #[test]
    fn a_closure_classifies_any_request_and_unclassed_gives_none() {
        let by_len = |s: &String| {
            if s.len() > 3 {
                Criticality::Sheddable
            } else {
                Criticality::Critical
            }
        };
        assert_eq!(
            by_len.criticality(&"abcd".to_owned()),
            Some(Criticality::Sheddable)
        );
        assert_eq!(
            by_len.criticality(&"ab".to_owned()),
            Some(Criticality::Critical)
        );
        assert_eq!(
            CriticalityOf::<String>::criticality(&Unclassed, &"x".into()),
            None
        );
    }
}
