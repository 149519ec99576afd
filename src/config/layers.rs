//! Where each kind of layer lives in a policy, so that [`Policies`](super::Policies)
//! builds, reconfigures, reverts and snapshots every kind by one generic function
//! over [`LayerHandle`] instead of a copy per layer.

use seawall_core::{ConfigError, LayerHandle};

use super::document::PolicyConfig;
use super::policies::{PolicyHandles, PolicySnapshot};

/// One kind of layer's places: its table in a policy of the document, its handle's
/// slot among the policy's handles, and its snapshot's among the policy's snapshot.
pub(super) struct Place<H: LayerHandle> {
    /// The table's key (`policies.<name>.<key>`).
    pub(super) key: &'static str,
    pub(super) section: fn(&PolicyConfig) -> Option<&H::Config>,
    pub(super) handle: fn(&mut PolicyHandles) -> &mut Option<H>,
    pub(super) snapshot: fn(&mut PolicySnapshot) -> &mut Option<H::Snapshot>,
}

#[cfg(feature = "bulkhead")]
pub(super) const BULKHEAD: Place<crate::bulkhead::Handle> = Place {
    key: "bulkhead",
    section: |p| p.bulkhead.as_ref(),
    handle: |h| &mut h.bulkhead,
    snapshot: |s| &mut s.bulkhead,
};

#[cfg(feature = "circuit-breaker")]
pub(super) const BREAKER: Place<crate::circuit_breaker::Handle> = Place {
    key: "breaker",
    section: |p| p.breaker.as_ref(),
    handle: |h| &mut h.breaker,
    snapshot: |s| &mut s.breaker,
};

#[cfg(feature = "degradation")]
pub(super) const DEGRADATION: Place<crate::degradation::Handle> = Place {
    key: "degradation",
    section: |p| p.degradation.as_ref(),
    handle: |h| &mut h.degradation,
    snapshot: |s| &mut s.degradation,
};

#[cfg(feature = "fallback")]
pub(super) const FALLBACK: Place<crate::fallback::Handle> = Place {
    key: "fallback",
    section: |p| p.fallback.as_ref(),
    handle: |h| &mut h.fallback,
    snapshot: |s| &mut s.fallback,
};

/// Something done to every built layer of a policy, whatever its kind.
pub(super) trait EachLayer {
    /// Does it to `handle`, the layer at `place`.
    fn layer<H: LayerHandle>(&mut self, handle: &H, place: &Place<H>) -> Result<(), ConfigError>;
}

/// Calls `each` with every layer built in `handles`, stopping at the first error.
pub(super) fn each_layer(
    handles: &mut PolicyHandles,
    each: &mut impl EachLayer,
) -> Result<(), ConfigError> {
    fn one<H: LayerHandle>(
        handles: &mut PolicyHandles,
        place: &Place<H>,
        each: &mut impl EachLayer,
    ) -> Result<(), ConfigError> {
        match (place.handle)(handles) {
            Some(handle) => each.layer(handle, place),
            None => Ok(()),
        }
    }
    #[cfg(feature = "bulkhead")]
    one(handles, &BULKHEAD, each)?;
    #[cfg(feature = "circuit-breaker")]
    one(handles, &BREAKER, each)?;
    #[cfg(feature = "degradation")]
    one(handles, &DEGRADATION, each)?;
    #[cfg(feature = "fallback")]
    one(handles, &FALLBACK, each)?;
    let _ = (handles, each);
    Ok(())
}
