//! Fleet coordination for seawall's circuit breakers: one probe per open interval
//! across every instance of a service, and a recovery seen by one instance taught
//! to all of them, without a store round trip on any call.
//!
//! Without coordination every replica's breaker is an island. A hundred replicas
//! that tripped together on a failing supplier send it a hundred probes the moment
//! their intervals end, and when one of them finds the supplier healthy again the
//! other ninety-nine learn nothing and keep failing fast until their own probes.
//! A distributed lock around every call would fix that at the price of serializing
//! the fleet's calls and failing them when the lock's store is down. This crate
//! shares *verdicts* instead, and never touches the hot path: a closed breaker's
//! call reads nothing but local memory.
//!
//! # Example
//!
//! Two instances of a service (here, in one process for the sake of the
//! example), each with its own `freight` breaker, coordinated through one store:
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use seawall_circuit_breaker::{CircuitBreakerLayer, State};
//! use seawall_core::BoxError;
//! use seawall_fleet::{Fleet, LocalStore};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), BoxError> {
//! // The supplier both instances call: down for now.
//! let healthy = Arc::new(AtomicBool::new(false));
//! let supplier = {
//!     let healthy = healthy.clone();
//!     service_fn(move |_: http::Request<()>| {
//!         let ok = healthy.load(Ordering::SeqCst);
//!         async move { if ok { Ok("quote") } else { Err::<_, BoxError>("down".into()) } }
//!     })
//! };
//!
//! // In-process here; every instance of a real fleet points at one shared store.
//! let fleet = Fleet::builder(LocalStore::new()).prefix("shop").build()?;
//! let mut instances = Vec::new();
//! let mut coordination = Vec::new();
//! for _ in 0..2 {
//!     let layer = CircuitBreakerLayer::builder("freight")
//!         .consecutive_failures(3)
//!         .open_for(Duration::from_secs(10))
//!         .build()?;
//!     coordination.push(fleet.coordinate(&layer.handle())?);
//!     instances.push((layer.handle(), layer.layer(supplier.clone())));
//! }
//!
//! // Both trip.
//! for (_, svc) in &mut instances {
//!     for _ in 0..3 {
//!         let _ = svc.ready().await?.call(http::Request::new(())).await;
//!     }
//! }
//! assert!(instances.iter().all(|(h, _)| h.state() == State::Open));
//!
//! // The supplier recovers; each instance takes a call every 100 ms. Past the
//! // open intervals (jittered by up to 20 % in fleet mode) one instance holds the
//! // probe lease and probes; its success is pushed to the other, which closes
//! // without probing. (The clock is paused: this sleeps no real time.)
//! healthy.store(true, Ordering::SeqCst);
//! for _ in 0..150 {
//!     tokio::time::sleep(Duration::from_millis(100)).await;
//!     for (_, svc) in &mut instances {
//!         let _ = svc.ready().await?.call(http::Request::new(())).await;
//!     }
//! }
//! let probes: u64 = instances
//!     .iter()
//!     .map(|(h, _)| h.snapshot().counters)
//!     .map(|c| c.probe_successes + c.probe_failures)
//!     .sum();
//! assert_eq!(probes, 1);
//! assert!(instances.iter().all(|(h, _)| h.state() == State::Closed));
//! let applied: u64 = coordination.iter().map(|c| c.snapshot().verdicts_applied).sum();
//! assert_eq!(applied, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # The protocol
//!
//! ```text
//!   instance A (first interval end)     store                      instance B (and C, …)
//!   ───────────────────────────────     ─────                      ─────────────────────
//!   trip ─ read verdict ──────────────► GET verdict                trip ─ read verdict
//!          (what is stored is not newer than this trip)
//!   … open interval, jittered …                                    … open interval …
//!   interval ends:
//!   reconcile ────────────────────────► GET verdict
//!   take lease(token, TTL, seen) ─────► epoch := max(counter, seen) + 1
//!                                       SET lease NX PX TTL
//!   ◄──────────────────────── Taken(e)
//!   gate: Allow (for probe_window)                                 interval ends:
//!   probe ──► dependency                 ◄──────────────────────── reconcile, take lease
//!                                        ───── Held(e, remaining) ►
//!                                                                  gate: HoldOff(remaining)
//!   probe ok:                                                      (rejects as open; no call
//!   publish(token, Succeeded) ────────► lease has token? then       reaches the dependency
//!                                       verdict := (e, Succeeded)   or the store)
//!                                       PUBLISH ─────────────────► e newer than the trip:
//!   release(token) ───────────────────► DEL lease if token         Verdict::Close → ramp
//!   (probe failed: publish Failed,                                 (Failed: Verdict::Reopen,
//!    release; reopen locally)                                       interval from now, backoff)
//! ```
//!
//! - **Lease.** When an instance's open interval ends, its coordinator reads the
//!   latest verdict (the reconcile), then tries to take the breaker's probe
//!   lease: a random [`Token`] and a TTL of the breaker's `half_open_timeout` plus
//!   `probe_window`; the store answers with a [`FleetEpoch`], a counter it
//!   increments for every lease. The holder's breaker may start a probe during
//!   the first `probe_window` of the lease, so its probe has finished (or counts
//!   as failed) before the store can give the lease to anyone else; the holder
//!   measures the lease with its own timer from the instant it *sent* the take,
//!   which ends before the store's TTL does. Every other instance's gate holds the
//!   probe off with a retry-after of what remains of the lease as last seen: its
//!   breaker keeps rejecting as open and touches neither the dependency nor the
//!   store per call.
//! - **Verdict.** The holder publishes what its probe found; the store keeps it
//!   with the lease's epoch and pushes it to every subscriber. Publish and release
//!   compare the token, so a stale holder cannot speak for, or end, a newer lease.
//!   Another instance applies a verdict whose epoch is above its *trip baseline*
//!   (the highest verdict epoch it knew of when its breaker tripped, raised by a
//!   read right after the trip) and above anything it already acted on: a success
//!   closes its breaker through its ramp ([`Verdict::Close`](seawall_circuit_breaker::Verdict::Close));
//!   a failure restarts its open interval from now, with the backoff
//!   ([`Verdict::Reopen`](seawall_circuit_breaker::Verdict::Reopen)). The breaker
//!   applies a verdict only to the trip it names (by the breaker's own epoch), so
//!   no clock is ever compared across hosts: order comes from the store's counter.
//! - **No call awaits the store.** The lease, the reads and the reconciles run in
//!   one background task per coordinated breaker; the gate, asked under the
//!   breaker's lock only when a probe is due, reads that task's last view. A
//!   closed-path call makes zero store operations ([`FleetSnapshot::store_ops`]
//!   counts them). Every operation runs under `store_timeout`; a write that timed
//!   out may still be applied, so writes are idempotent, and a take that timed out
//!   counts as *maybe held*: the instance does not probe until its TTL has run out.
//! - **Delivery.** Verdicts are pushed, and every instance also reconciles by a
//!   read at its own interval end, when a lease it saw elsewhere runs out, and
//!   after every reconnect, so a lost push delays an instance by at most one open
//!   interval (one lease TTL for an instance already waiting on the lease, if
//!   that is longer), never for good.
//! - **Store trouble never fails a call.** A failed or timed-out operation is
//!   retried after a short jittered pause while probes wait; after
//!   `disconnect_after` failures in a row (or the subscription ending) the
//!   instance falls back to its own breaker, with jitter: it waits out one lease
//!   TTL (a lease may be held where it can no longer see it), then probes alone.
//!   It reports this in [`FleetSnapshot::connected`] and `store_errors`, the
//!   `seawall_fleet_connected` gauge and `seawall_fleet_store_errors_total`
//!   counter (feature `metrics`), and a `warn` event (feature `tracing`, target
//!   `seawall::fleet`), and rejoins by itself: resubscribe, then reconcile.
//! - **Versioned keys.** Every key starts with the prefix and
//!   [`SCHEMA_VERSION`]: `seawall:v1:breaker:{freight}:lease` (see [`Keys`]), so
//!   instances of two releases with different layouts share a store without
//!   misreading each other.
//! - **Fleet defaults.** A coordinated breaker gets a ramp and jitter if it has
//!   none (see [`FleetConfig`]): without a ramp, one successful probe would be
//!   followed by the whole fleet's load at once; without jitter, instances that
//!   fell back to local mode together would probe together.
//! - **Fleet trip (optional, off by default).** With
//!   [`FleetBuilder::trip_together`], each instance records its own trips in the
//!   store (an instance id, the store's clock); once `k` distinct instances tripped
//!   within the window, the store starts a fleet trip, an epoch from the same
//!   counter, pushed to everyone and read by closed instances every half window.
//!   A closed instance that learns of a fleet trip newer than every verdict it
//!   knows opens (reason `PeersTripped`) and recovers with the others: one probe
//!   under the lease, its verdict for all. A successful verdict forgets the trips.
//!   It is off by default, and `k` must be at least 2, because one instance's trip
//!   may say more about that instance (a bad local network, a bad deploy on one
//!   replica) than about the dependency: one sick client must not open a healthy
//!   fleet. Operators win: a forced or disabled breaker is left alone, and an
//!   operator's `force_open` is no trip to count.
//!
//! ## When two probes can overlap
//!
//! While the store answers every instance, never: one live lease at a time, and
//! its holder's probe ends before the lease can pass on. The exceptions, and
//! their bounds:
//!
//! - **The store loses its data during a lease** (a flush, a failover to a replica
//!   that had not seen the lease): the new store may grant a second lease while
//!   the first holder still probes. At most two probes at once, for at most one
//!   lease TTL, per loss of data. Epochs stay ordered for instances that saw the
//!   old ones, because every take carries the highest epoch its taker has seen.
//! - **An instance cannot reach the store while others can**: it falls back to
//!   local mode and, one lease TTL later, probes on its own. At most one probe
//!   per interval from each instance in local mode, plus the lease holder's.
//! - **A probe outlives its half-open timeout**: its breaker counts it as failed
//!   and the lease passes on, but the request itself runs until the caller's
//!   deadline. Bound the dependency segment with a
//!   [`DeadlineLayer`](seawall_core::DeadlineLayer) no longer than the half-open
//!   timeout.
//! - **Clocks at different rates**: the holder's fence and the store's TTL are
//!   both durations of a few seconds; a drift large enough to matter over that
//!   span would be a broken host.
//!
//! A take that timed out but was applied later costs a lost interval (nobody
//! probes until its TTL ends), not an overlap.
//!
//! # Stores
//!
//! [`Store`] is five operations, and two more for the fleet trip; see its module docs for the contract.
//! [`LocalStore`] keeps everything in process (TTLs on Tokio's clock, so paused
//! time drives them) and injects delay, loss and outages for tests and
//! simulations; it is also the embedded default when all instances live in one
//! process. `RedisStore` (feature `redis`) keeps them on a Redis or Valkey server
//! shared by the fleet: one Lua script per write, verdicts as RESP3 pushes, and a
//! lazy connection, so a server that is down when the application starts leaves its
//! instances in local mode until it answers instead of failing their start.
//!
//! # Where state lives
//!
//! A [`Fleet`] holds the store and the settings; cloning it shares both. Each
//! [`Fleet::coordinate`] call spawns one task for one breaker and returns its
//! [`Coordinated`]; dropping that stops the task and hands the breaker back to
//! itself.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cap;
mod config;
mod coordinator;
mod ledger;
mod local;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod store;
mod telemetry;

pub use cap::{CapConfig, CapError, CapMode, CapSnapshot, Capped, MAX_CAP};
pub use config::{FleetConfig, TripTogether, MAX_SETTING};
pub use coordinator::{Coordinated, Fleet, FleetBuilder, FleetSnapshot, LeaseStatus};
pub use local::{Faults, LocalStore, StoredClaim};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::RedisStore;
pub use store::{
    CapKeys, CapStore, Claim, ClaimReply, FleetEpoch, FleetEvent, FleetVerdict, InstanceId, Keys,
    LeaseReply, LeaseRequest, ProbeResult, Store, StoreError, Subscription, Token, TripRecord,
    TripReply, MAX_PREFIX_LEN, SCHEMA_VERSION,
};
