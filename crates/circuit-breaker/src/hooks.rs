//! Hooks for an outside coordinator (a fleet of instances sharing one dependency):
//! a probe gate asked before a half-open probe is admitted, and verdicts that close
//! or reopen the breaker on what a probe elsewhere found.
//!
//! Neither needs a store, a network or a clock of its own: the gate is a synchronous
//! question the breaker asks, and a verdict names the trip it is about by the
//! breaker's own epoch, so "older than the local trip" is decided with local
//! information only.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// Asked before a half-open breaker admits a probe: may it go now?
///
/// The gate is consulted only where the breaker would otherwise admit a probe
/// (half-open, a probe slot free), never on the closed path, and never for an open
/// breaker whose interval has not passed. It may also be asked, without effect,
/// by `poll_ready` to learn whether a call would be turned away, so an answer must
/// depend only on the gate's own state and `probe`, not on how often it is asked.
///
/// **The gate runs under the breaker's lock.** It must be quick, must not block,
/// and must not call back into the breaker it guards (its [`Handle`](crate::Handle)):
/// read a few fields, notify a task, answer.
///
/// A [`HoldOff`](ProbeDecision::HoldOff) turns the call away as
/// [`CircuitOpen`](crate::CircuitOpen) with that retry-after and the cause
/// [`OpenCause::Open`](seawall_core::OpenCause::Open) (the breaker behaves as open
/// until the hold ends); nothing reaches the dependency. While no probe is in flight, the breaker remembers the hold and
/// rejects without its lock (and without asking again) until it has passed, or
/// until [`Handle::recheck_probe_gate`](crate::Handle::recheck_probe_gate) says the
/// gate's answer may have changed.
///
/// Install one with [`Handle::set_probe_gate`](crate::Handle::set_probe_gate). Any
/// `Fn(&ProbeRequest) -> ProbeDecision + Send + Sync` closure is a gate.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use seawall_circuit_breaker::{CircuitBreakerLayer, ProbeDecision, ProbeRequest};
///
/// let layer = CircuitBreakerLayer::builder("freight").build().unwrap();
/// // Never probe: every due probe is held off for another second.
/// let gate = |_probe: &ProbeRequest| ProbeDecision::HoldOff(Duration::from_secs(1));
/// layer.handle().set_probe_gate(Some(Arc::new(gate)));
/// ```
pub trait ProbeGate: Send + Sync + 'static {
    /// Whether the probe described by `probe` may go now.
    fn check(&self, probe: &ProbeRequest) -> ProbeDecision;
}

impl<F> ProbeGate for F
where
    F: Fn(&ProbeRequest) -> ProbeDecision + Send + Sync + 'static,
{
    fn check(&self, probe: &ProbeRequest) -> ProbeDecision {
        self(probe)
    }
}

impl fmt::Debug for dyn ProbeGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProbeGate")
    }
}

/// The probe a half-open breaker is about to admit, as shown to its [`ProbeGate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProbeRequest {
    /// The instant the breaker decides at (the caller's clock reading).
    pub now: Instant,
    /// The breaker's epoch now.
    pub epoch: u32,
    /// The epoch at which the current trip began (see [`Verdict`]).
    pub trip_epoch: u32,
    /// Probes already in flight.
    pub probes_in_flight: u32,
}

/// A [`ProbeGate`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeDecision {
    /// Admit the probe.
    Allow,
    /// Turn the call away as open, with this retry-after (a zero one is raised to
    /// the smallest retry-after the breaker gives, 1 ms; a longer one than
    /// [`MAX_DURATION`](seawall_core::MAX_DURATION), a year, is cut to it).
    HoldOff(Duration),
}

/// What an outside coordinator learned about the dependency, applied with
/// [`Handle::apply_verdict`](crate::Handle::apply_verdict).
///
/// A verdict is about one trip: the breaker applies it only while it is still in
/// the trip that began at the `trip_epoch` it is given (open or half-open since
/// that trip, through any number of failed probes), so a verdict that arrives after
/// the breaker has closed, or tripped again, changes nothing. The coordinator maps
/// its own notion of order (for a fleet, the store's epoch counter) to the local
/// trip: it records the trip epoch when the breaker trips (from
/// [`Snapshot::trip_epoch`](crate::Snapshot::trip_epoch) or the
/// [`CircuitBreakerEvent`](crate::CircuitBreakerEvent)), and hands that epoch back with every
/// verdict it decides is newer than the trip. No clock is compared across hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Verdict {
    /// A probe elsewhere succeeded: leave open now and take the load back through
    /// the ramp, if one is configured (transition cause
    /// [`VerdictClosed`](crate::Cause::VerdictClosed)). The window starts empty
    /// and the failed-probe count is cleared, as after a local successful probe.
    Close,
    /// A probe elsewhere failed: restart the open interval from now, grown by the
    /// backoff as a failed probe would (transition cause
    /// [`VerdictReopened`](crate::Cause::VerdictReopened)); probes in flight here
    /// become stale. Counted in the consecutive failed probes, not in the probe
    /// counters (no local probe failed).
    Reopen,
}

/// What [`Handle::apply_verdict`](crate::Handle::apply_verdict) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum VerdictOutcome {
    /// The breaker changed as the verdict says.
    Applied,
    /// Not about the current trip: the breaker is closed, or tripped again since
    /// (a newer trip epoch). Nothing changed.
    Stale,
    /// An operator holds the breaker (forced open, forced closed or disabled):
    /// verdicts change nothing until a reset.
    Overridden,
}

/// The installed gate, debuggable.
#[derive(Clone)]
pub(crate) struct Gate(pub(crate) Arc<dyn ProbeGate>);

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Gate")
    }
}
