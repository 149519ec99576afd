//! The marks an injected fault leaves, so a rehearsal is never mistaken for an incident.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use crate::fault::FaultKind;

/// The error a call fails with when its failure was injected: a refused or reset
/// connection, a hang that reached its bound, a response body cut short.
///
/// Its [`source`](Error::source) is the error the fault imitates (an
/// [`std::io::Error`] of kind `ConnectionRefused` or `ConnectionReset` for transport
/// faults, `TimedOut` for a hang), so code that inspects the chain for the real thing
/// finds it; code that must tell a rehearsal apart looks for this type first, with
/// [`Injected::find`] (or [`is_injected`]). Like tower's own errors it is boxed into a
/// `BoxError`.
#[derive(Debug, Clone)]
pub struct Injected {
    kind: FaultKind,
    policy: Arc<str>,
    imitated: Arc<std::io::Error>,
}

impl Injected {
    pub(crate) fn new(kind: FaultKind, policy: Arc<str>, imitated: std::io::Error) -> Self {
        Self {
            kind,
            policy,
            imitated: Arc::new(imitated),
        }
    }

    /// Which kind of fault produced it.
    pub fn kind(&self) -> FaultKind {
        self.kind
    }

    /// The name of the fault layer (its policy) that injected it.
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// The first `Injected` in `error`'s source chain, `error` included.
    pub fn find<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a Injected> {
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(found) = e.downcast_ref::<Injected>() {
                return Some(found);
            }
            next = e.source();
        }
        None
    }
}

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "injected fault ({}) by the rehearsal of `{}`",
            self.kind.as_str(),
            self.policy
        )
    }
}

impl Error for Injected {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.imitated)
    }
}

/// Whether `error`'s chain holds an [`Injected`] fault.
pub fn is_injected(error: &(dyn Error + 'static)) -> bool {
    Injected::find(error).is_some()
}

/// The mark an HTTP response carries in its extensions when a fault was injected
/// into it: an injected status, an added latency, a slowed or failing body.
///
/// ```
/// # use seawall_fault::InjectedFault;
/// # let res = http::Response::new(());
/// let rehearsal = res.extensions().get::<InjectedFault>().is_some();
/// # assert!(!rehearsal);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFault {
    /// Which kind of fault.
    pub kind: FaultKind,
    /// The name of the fault layer (its policy) that injected it.
    pub policy: Arc<str>,
}
