//! Fleet coordination for seawall's circuit breakers and bulkheads: one probe per
//! open interval across every instance of a service, a recovery seen by one
//! instance taught to all of them, and a concurrency cap that holds across the
//! fleet (see [the cap](#a-fleet-wide-concurrency-cap)), without a store round
//! trip on any call.
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
//! In short: the holder of a lease with a TTL set by the store probes; its verdict
//! is pushed to every instance and applied by those whose trip it is newer than,
//! ordered by the store's epoch counter, never by comparing clocks. No call waits
//! on the store, and when the store fails each instance falls back to its own
//! breaker, reports it and rejoins by itself.
//! [docs/fleet.md](https://github.com/seawall-rs/seawall/blob/main/docs/fleet.md)
//! states every rule of the protocol (leases, verdicts, delivery, store trouble,
//! versioned keys, the fleet defaults, the optional fleet trip of
//! [`FleetBuilder::trip_together`]) and when two probes can overlap, and by how much.
//!
//! # A fleet-wide concurrency cap
//!
//! A bulkhead's limit is per instance: three instances of 8 let 24 calls reach
//! the supplier. [`Fleet::cap`] makes the limit the fleet's: every instance's
//! bulkhead of one name shares G calls, whatever the number of replicas, and
//! still no call touches the store.
//!
//! ```
//! use std::time::Duration;
//! use seawall_bulkhead::BulkheadLayer;
//! use seawall_core::BoxError;
//! use seawall_fleet::{CapConfig, Fleet, LocalStore};
//! use tower::{service_fn, Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), BoxError> {
//! // The supplier takes 200 ms a call.
//! let supplier = service_fn(|()| async {
//!     tokio::time::sleep(Duration::from_millis(200)).await;
//!     Ok::<_, BoxError>(())
//! });
//! let fleet = Fleet::builder(LocalStore::new()).prefix("shop").build()?;
//! let config = CapConfig::new(4) // G: 4 calls at the supplier, fleet-wide
//!     .renew_every(Duration::from_millis(100))
//!     .ttl(Duration::from_millis(300));
//! let mut shops = Vec::new();
//! for _ in 0..2 {
//!     let layer = BulkheadLayer::builder("freight").max_concurrent(8).max_queue(0).build()?;
//!     let capped = fleet.cap(&layer.handle(), config)?; // keep it alive
//!     shops.push((capped, layer.layer(supplier)));
//! }
//! // Both shops want more than the cap, for two seconds (paused time: no real wait).
//! for _ in 0..40 {
//!     for (_, svc) in &shops {
//!         for _ in 0..4 {
//!             tokio::spawn(svc.clone().oneshot(()));
//!         }
//!     }
//!     tokio::time::sleep(Duration::from_millis(50)).await;
//! }
//! // Max-min fair: two each, never more than 4 in all.
//! for (capped, _) in &shops {
//!     assert_eq!(capped.snapshot().allotment, 2);
//!     assert_eq!(capped.handle().snapshot().limit, 2);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## The allotment protocol
//!
//! ```text
//!   instance A (every T)                     store (one atomic step per claim)
//!   ────────────────────                     ─────────────────────────────────
//!   demand := peak active at admissions
//!             + peak waiting + BulkheadFull
//!             over the last T (≤ own limit)
//!   give back what the period did not use:
//!     ceiling := max(active, min(ceiling, demand))
//!   held := max(ceiling, active)
//!   sent := now ─── claim(A, seq, demand, held, TTL, G) ──►  now := TIME
//!                                            G stored once (first claim), else kept
//!                                            drop claims past their expiry
//!                                            fair := max-min share of G over demands
//!                                            grant := min(fair, G - others' reserved)
//!                                            (a new or wiped record: ≤ held, for one TTL)
//!                                            reserve max(grant, held) until now + TTL
//!   ◄──────────────────────────── grant ───
//!   ceiling := grant, lease until sent + TTL - longest_call (A's own clock)
//!   no answer by then: divided → max(floor, G / N), strict → 0, available → local share
//!                                            the reservations fell while another
//!                                            claim wants more than it holds:
//!   instance B (short of its demand)         PUBLISH …:freed  SlotsFreed(A)
//!   ◄──────────────────────────────── push ───
//!   at once (early claims: four back to back, then one per T/4):
//!     demand := max(last period's, this period's so far)
//!   ─── claim(B, seq, demand, held, TTL, G) ──►  the same step: B takes what A freed
//! ```
//!
//! A call takes a local permit from the bulkhead as always; the cap only lowers
//! the bulkhead's limit to the allotment. Without a live lease, the [`CapMode`]
//! decides: `divided` (the default) admits the cap divided by the instances last
//! known, `strict` nothing (the fleet never exceeds G), `available` a local
//! share. [docs/fleet.md](https://github.com/seawall-rs/seawall/blob/main/docs/fleet.md#a-fleet-wide-concurrency-cap)
//! gives the rules, the bound each mode keeps, and how to choose the settings.
//!
//! # Stores
//!
//! [`Store`] is five operations, and two more for the fleet trip; see its module
//! docs for the contract. The cap's [`CapStore`] is three more (claim, set the
//! cap, watch for freed slots), implemented by both stores.
//! [`LocalStore`] keeps everything in process (TTLs on Tokio's clock, so paused
//! time drives them) and injects delay, loss and outages for tests and
//! simulations; it is also the embedded default when all instances live in one
//! process. `RedisStore` (feature `redis`) keeps them on a Redis or Valkey server
//! shared by the fleet: one Lua script per write, verdicts as RESP3 pushes, and a
//! lazy connection, so a server that is down when the application starts leaves its
//! instances in local mode until it answers instead of failing their start. It
//! follows Sentinel and Cluster deployments and speaks TLS (see its module docs
//! for what holds across a failover, and for the eviction policy it needs).
//!
//! # Fleet-wide operator actions
//!
//! [`Fleet::act`] forces a breaker open or closed on every instance, resets
//! it, or reverts an earlier action, with a reason and a mandatory expiry (at
//! most [`MAX_ACTION_TTL`]) that every instance enforces by its own timer,
//! also one that joins later. Actions are signed with a fleet secret from the
//! instances' environment ([`FleetSecret::from_env`]), never kept in the
//! store: an instance applies only what the secret signed, and refuses,
//! counts and audits the rest (the threat model and the clock rules are in
//! the `actions` module's docs, [`FleetAction`]). Without a secret, fleet
//! actions are off. Every step is in the breaker's audit log in the store
//! ([`Fleet::audit_log`]) and in the instance's log.
//!
//! # Where state lives
//!
//! A [`Fleet`] holds the store and the settings; cloning it shares both. Each
//! [`Fleet::coordinate`] call spawns one task for one breaker and returns its
//! [`Coordinated`]; dropping that stops the task and hands the breaker back to
//! itself. Each [`Fleet::cap`] call spawns one renewal task for one bulkhead and
//! returns its [`Capped`]; dropping that stops the renewals and leaves the
//! bulkhead at what its mode gives an instance without a lease.
//!
//! # Layout
//!
//! ```text
//! lib.rs          these docs, the re-exports
//! config.rs       FleetConfig and TripTogether, validated
//! coordinator.rs  Fleet, FleetBuilder and Coordinated: a probe gate and a background task per
//!                 coordinated breaker, driven through its public handle
//!   coordinator/gate.rs      the probe gate, and the view it shares with the task
//!   coordinator/task.rs      the background task: lease, verdicts, fleet trip, local mode
//!   coordinator/snapshot.rs  FleetSnapshot and LeaseStatus
//! cap.rs          a fleet-wide cap: CapConfig, CapMode, Capped, the renewal task that applies
//!                 an instance's allotment to its bulkhead; CapSnapshot
//! ledger.rs       the division of a cap as plain code (no clock, no I/O), as both stores run it
//! actions.rs      operators' fleet actions: signed, expiring, audited (FleetAction, FleetSecret)
//!                 and the applier each coordinator runs
//! operator.rs     the operator's verbs on Fleet and Coordinated: act, actions, audit_log,
//!                 fleet_view
//! floor.rs        fleet-wide degradation floors: FloorTarget, Fleet::follow_floor, FloorFollower
//! store.rs        Store and CapStore: all a coordinator asks of the shared store; keys,
//!                 leases, verdicts, claims, StoreError
//! local.rs        LocalStore: the in-process store, with Faults to inject
//! redis.rs        RedisStore: one Lua script per write, RESP3 pushes (feature `redis`)
//! view.rs         one view of every replica: InstanceReport, FleetView, and the stuck-open flag
//! telemetry.rs    tracing events and metrics
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod actions;
mod cap;
mod config;
mod coordinator;
mod floor;
mod ledger;
mod local;
mod operator;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod store;
mod telemetry;
mod view;

pub use actions::{
    wall_ms, ActionError, ActionKind, ActionRefusal, AppliedAction, AuditEntry, FleetAction,
    FleetSecret, WallClock, CLOCK_SKEW, DEFAULT_ACTION_TTL, MAX_ACTION_TTL, MAX_TEXT_LEN,
    MIN_SECRET_LEN, PREVIOUS_SECRET_ENV, SECRET_ENV,
};
pub use cap::{CapConfig, CapError, CapMode, CapSnapshot, Capped, CAP_SIGNED_FOR, MAX_CAP};
pub use config::{FleetConfig, TripTogether, MAX_SETTING};
pub use coordinator::{Coordinated, Fleet, FleetBuilder, FleetSnapshot, LeaseStatus, Shutdown};
pub use floor::{FloorFollower, FloorSnapshot, FloorTarget};
pub use local::{Faults, LocalStore, StoredClaim};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::{RedisStore, RedisStoreBuilder};
pub use store::{
    CapKeys, CapSignature, CapStore, Claim, ClaimReply, FleetEpoch, FleetEvent, FleetVerdict,
    InstanceId, Keys, LeaseReply, LeaseRequest, OperatorCap, ProbeResult, Store, StoreError,
    Subscription, Token, TripRecord, TripReply, AUDIT_KEPT, CAP_SCHEMA_VERSION, MAX_ACTIONS,
    MAX_PREFIX_LEN, SCHEMA_VERSION,
};
pub use view::{
    FleetView, InstanceReport, StuckCause, StuckOpen, FORCED_TOO_LONG, MAX_REPORT_LEN,
    REPORT_EVERY, REPORT_FRESH, STUCK_AFTER,
};
