//! The slot a call holds, released by drop on every path.

use std::fmt;
use std::sync::Arc;

use seawall_core::{BoxError, Classify, Criticality};

use crate::feedback::PackedTicket;
use crate::state::Shared;

/// Owns one slot; dropping it frees the slot (and hands it to the next waiter).
/// A call let through beyond the limit in shadow mode holds no slot: dropping its
/// `Slot` only counts it out of the calls over the limit.
struct Slot {
    shared: Arc<Shared>,
    /// What an adaptive limit needs to learn from the call, in the bytes the
    /// pointer and the kind leave free (none when the limit is fixed).
    ticket: PackedTicket,
    kind: Kind,
}

/// What a slot is, in one byte.
#[derive(Clone, Copy)]
enum Kind {
    /// A slot of a call without a class.
    Plain,
    /// No slot: a call let through beyond the limit in shadow mode.
    OverLimit,
    /// A slot counted against a class's share.
    Classed(Criticality),
}

impl Drop for Slot {
    #[inline]
    fn drop(&mut self) {
        match self.kind {
            Kind::Plain => self.shared.release_slot(),
            Kind::OverLimit => self.shared.release_over_limit(),
            Kind::Classed(class) => self.shared.release_classed(class),
        }
    }
}

enum Held {
    Unique(Slot),
    Shared(Arc<Slot>),
}

/// One bulkhead slot, held by a response future until the inner future completes
/// or is dropped, or — with [`BulkheadLayer::hold_until_body_end`](crate::BulkheadLayer::hold_until_body_end)
/// — by the response body until it ends or is dropped.
///
/// Dropping the permit frees the slot. When the bulkhead puts a
/// [`PermitHandle`] in the request's extensions, the slot is freed when the permit
/// and every clone of the handle are gone.
pub struct Permit {
    held: Held,
}

impl Permit {
    /// Wraps a slot taken on the fast path and already counted as active in
    /// `shared`, with the call's ticket for an adaptive limit (a few relaxed loads;
    /// a clock read for one admission in `sample_every`).
    #[inline]
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let ticket = shared.feedback.issue_packed(Some(&shared.semaphore));
        Self {
            held: Held::Unique(Slot {
                shared,
                ticket,
                kind: Kind::Plain,
            }),
        }
    }

    /// A slot taken by a call of `class` and counted against its share (always
    /// through the lock, so an adaptive limit times it, as [`Permit::waited`]).
    pub(crate) fn classed(shared: Arc<Shared>, class: Criticality) -> Self {
        let ticket = shared.feedback.issue_packed(None);
        Self {
            held: Held::Unique(Slot {
                shared,
                ticket,
                kind: Kind::Classed(class),
            }),
        }
    }

    /// As [`Permit::new`], for a slot taken on the slow path: such a call already
    /// read the clock and took the lock, so an adaptive limit always times it.
    pub(crate) fn waited(shared: Arc<Shared>) -> Self {
        let ticket = shared.feedback.issue_packed(None);
        Self {
            held: Held::Unique(Slot {
                shared,
                ticket,
                kind: Kind::Plain,
            }),
        }
    }

    /// A call let through beyond the limit in shadow mode, already counted by
    /// [`Shared::admit_over_limit`]. It holds no slot and has no ticket: an
    /// enforcing bulkhead would not have made it, so an adaptive limit learns
    /// nothing from it.
    #[cold]
    pub(crate) fn over_limit(shared: Arc<Shared>) -> Self {
        Self {
            held: Held::Unique(Slot {
                shared,
                ticket: PackedTicket::NONE,
                kind: Kind::OverLimit,
            }),
        }
    }

    /// Whether this call carries a ticket for an adaptive limit to learn from.
    #[inline]
    pub(crate) fn learns(&self) -> bool {
        self.slot().ticket.is_some()
    }

    /// Tells the adaptive limit how the call ended, classified by `overload`.
    /// Called once, by the response future that then hands the permit on.
    #[inline]
    pub(crate) fn observe<Res, O: Classify<Res>>(
        &self,
        overload: Option<&O>,
        result: &Result<Res, BoxError>,
    ) {
        // A fixed limit issues no ticket: one test, no call.
        if let (true, Some(overload)) = (self.learns(), overload) {
            self.learn(overload, result);
        }
    }

    #[inline(never)]
    fn learn<Res, O: Classify<Res>>(&self, overload: &O, result: &Result<Res, BoxError>) {
        let slot = self.slot();
        let shared = &slot.shared;
        if let Some((before, after)) = shared.feedback.observe_packed(
            slot.ticket,
            overload,
            result,
            &shared.semaphore,
            &shared.events,
        ) {
            shared.apply_limit(before, after);
        }
    }

    /// Shares the slot with a handle for the request's extensions (allocates once).
    pub(crate) fn into_shared(self) -> (Self, PermitHandle) {
        let slot = match self.held {
            Held::Unique(slot) => Arc::new(slot),
            Held::Shared(slot) => slot,
        };
        let handle = PermitHandle { slot: slot.clone() };
        (
            Self {
                held: Held::Shared(slot),
            },
            handle,
        )
    }

    fn slot(&self) -> &Slot {
        match &self.held {
            Held::Unique(slot) => slot,
            Held::Shared(slot) => slot,
        }
    }

    /// The name of the bulkhead the slot belongs to.
    pub fn bulkhead(&self) -> &str {
        &self.slot().shared.name
    }

    /// Whether the bulkhead releases its slots at the response's headers although
    /// built to hold them until the body ends.
    #[cfg(feature = "http")]
    pub(crate) fn releases_at_headers(&self) -> bool {
        self.slot()
            .shared
            .release_at_headers
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("bulkhead", &self.bulkhead())
            .field("shared", &matches!(self.held, Held::Shared(_)))
            .finish()
    }
}

#[cfg(feature = "http")]
impl seawall_core::http::OnBodyEnd for Permit {
    /// Dropping the permit is all there is: the slot is free however the body ended.
    fn on_body_end(self, _end: seawall_core::http::BodyEnd<'_>) {}
}

/// A share of an admitted call's slot, found in the request's extensions when the
/// layer is made with
/// [`permit_in_extensions`](crate::BulkheadLayer::permit_in_extensions).
///
/// A handler that hands work to a spawned task clones this handle into the task;
/// the slot stays occupied until the call's response is done *and* every clone of
/// the handle is dropped, so work that outlives the response still counts.
///
/// ```
/// # fn handler(req: http::Request<()>) {
/// use seawall_bulkhead::PermitHandle;
///
/// let slot = req.extensions().get::<PermitHandle>().cloned();
/// # #[cfg(any())]
/// tokio::spawn(async move {
///     // ... the work that must count against the bulkhead ...
///     drop(slot);
/// });
/// # }
/// ```
#[derive(Clone)]
pub struct PermitHandle {
    slot: Arc<Slot>,
}

impl PermitHandle {
    /// The name of the bulkhead the slot belongs to.
    pub fn bulkhead(&self) -> &str {
        &self.slot.shared.name
    }
}

impl fmt::Debug for PermitHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitHandle")
            .field("bulkhead", &self.bulkhead())
            .finish()
    }
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    #[test]
    fn a_permit_is_the_size_the_crate_docs_say() {
        // The slot's pointer, and in the bytes beside it the packed ticket an
        // adaptive limit needs and the kind; `Option` uses the kind's spare values.
        assert_eq!(std::mem::size_of::<super::Permit>(), 16);
        assert_eq!(std::mem::size_of::<Option<super::Permit>>(), 16);
    }
}
