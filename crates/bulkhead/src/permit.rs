//! The slot a call holds, released by drop on every path.

use std::fmt;
use std::sync::Arc;

use crate::state::Shared;

/// Owns one slot; dropping it frees the slot (and hands it to the next waiter).
struct Slot {
    shared: Arc<Shared>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.release_slot();
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
    /// Wraps a slot already counted as active in `shared`.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            held: Held::Unique(Slot { shared }),
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
