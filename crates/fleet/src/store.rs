//! The store interface: what a coordinator asks of the shared store, and nothing more.
//!
//! Five operations per coordinated breaker, all keyed by [`Keys`]: take the probe
//! lease, release it, publish a probe's verdict, read the latest verdict, and
//! subscribe to verdicts; and two more for the optional fleet trip
//! ([`FleetConfig::trip_together`](crate::FleetConfig::trip_together)): record an
//! instance's trip, and read the fleet trip in force. Each is awaited by the
//! coordinator's background task under its own timeout (`store_timeout`), never
//! by a call.
//!
//! # Contract for implementations
//!
//! - **Every write is idempotent and fenced by the token.** A write may be applied
//!   after the caller gave up on it (a paused server replays its queue), so
//!   applying one twice must change nothing more than applying it once, and
//!   release and publish must compare the caller's token with the lease's holder:
//!   a stale holder can never release or speak for a newer lease.
//! - **TTLs are the store's.** A lease expires by the store's own clock; no time
//!   from a caller's clock is stored or compared (durations travel, instants do not).
//! - **The fleet epoch never goes backwards for a caller that saw it.** The epoch
//!   of a new lease is one more than the larger of the store's counter and the
//!   epoch the taker has seen ([`LeaseRequest::seen`]), so it stays ahead of every
//!   verdict the taker knows even after the store lost its counter (a wipe, a
//!   failover to an empty replica).
//!
//! - **A fleet trip window is measured by the store's clock**, from when the store
//!   applied each trip; an instance is counted once however often it trips.
//!
//! `RedisStore` (feature `redis`) maps them to one Lua script per write (take:
//! the counter plus `SET PX`; release and publish: compare the token, then `DEL`
//! or `SET` + `PUBLISH`; record a trip: a sorted set scored by the server's
//! `TIME`, the counter and the fleet trip's `SET PX` + `PUBLISH`), a `GET` per
//! read and a RESP3 `SUBSCRIBE`.
//!
//! A fleet-wide concurrency cap has its own small trait beside this one,
//! [`CapStore`] (allotment claims), implemented by the same stores: a claim is
//! one atomic step that records an instance's demand and answers its share of
//! the cap (see [`Fleet::cap`](crate::Fleet::cap) for the protocol).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use seawall_core::{BoxError, ConfigError};
use tokio::sync::mpsc;

/// The version of the key layout and of the values stored under it. Instances of
/// two releases that disagree on it use disjoint keys, so they never misread each
/// other's leases (they coordinate separately until the fleet is upgraded).
pub const SCHEMA_VERSION: u32 = 1;

/// The longest prefix [`Keys`] accepts, in bytes.
pub const MAX_PREFIX_LEN: usize = 64;

/// A counter kept by the store, one more for every lease taken: it orders leases,
/// and the verdicts made under them, without comparing clocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FleetEpoch(pub u64);

impl FleetEpoch {
    /// No lease ever seen.
    pub const ZERO: FleetEpoch = FleetEpoch(0);
}

impl fmt::Display for FleetEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The random value a lease holder proves itself with. Drawn anew for every lease
/// taken; compared by the store on release and publish.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(pub u128);

impl Token {
    /// A token drawn from `rng`.
    pub fn random(rng: &mut fastrand::Rng) -> Self {
        Token(rng.u128(..))
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({:032x})", self.0)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// What a probe found, as published by the lease holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    /// The probe succeeded: the dependency answers again.
    Succeeded,
    /// The probe failed (or timed out): still sick, as of the verdict.
    Failed,
}

/// A probe's verdict as the store keeps and pushes it: what was found, under which lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FleetVerdict {
    /// The epoch of the lease the probe ran under (set by the store, from the lease).
    pub epoch: FleetEpoch,
    /// What the probe found.
    pub result: ProbeResult,
}

/// What a store pushes to the subscribers of one breaker's channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FleetEvent {
    /// A probe's verdict was published.
    Verdict(FleetVerdict),
    /// Enough instances tripped within the window: the fleet trips together, as of
    /// this epoch (see [`FleetConfig::trip_together`](crate::FleetConfig::trip_together)).
    Tripped(FleetEpoch),
    /// A claim to a fleet-wide cap, by this instance, lowered the slots reserved
    /// (or left some free) while another live claim wanted more than it holds
    /// (pushed on that claimant's [`CapKeys::freed_for`] channel): a claim sent
    /// now may be granted more.
    SlotsFreed(InstanceId),
}

/// An instance's trip, recorded for the fleet trip
/// ([`FleetConfig::trip_together`](crate::FleetConfig::trip_together)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TripRecord {
    /// Who tripped: one random value per coordinated breaker, so an instance counts
    /// once however often it trips (and a replayed write counts nothing more).
    pub instance: Token,
    /// Trips older than this, by the store's clock, no longer count.
    pub within: Duration,
    /// How many instances tripping within `within` trip the fleet.
    pub instances: u32,
    /// The highest fleet epoch the recorder has seen; a new fleet trip's epoch is above it.
    pub seen: FleetEpoch,
}

impl TripRecord {
    /// A trip of `instance`, counted for `within`; `instances` of them trip the fleet.
    pub fn new(instance: Token, within: Duration, instances: u32, seen: FleetEpoch) -> Self {
        Self {
            instance,
            within,
            instances,
            seen,
        }
    }
}

/// The answer to [`Store::record_trip`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TripReply {
    /// Distinct instances that tripped within the window, this one included.
    pub tripped: u32,
    /// The fleet trip in force (made by this record or before it), if any.
    pub fleet_trip: Option<FleetEpoch>,
}

/// A request to take the probe lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseRequest {
    /// The taker's token for this lease.
    pub token: Token,
    /// How long the lease lives, by the store's clock, from when the store applies it.
    pub ttl: Duration,
    /// The highest fleet epoch the taker has seen; a new lease's epoch is above it.
    pub seen: FleetEpoch,
}

impl LeaseRequest {
    /// A request for a lease of `ttl` with `token`, by a taker that has seen `seen`.
    pub fn new(token: Token, ttl: Duration, seen: FleetEpoch) -> Self {
        Self { token, ttl, seen }
    }
}

/// The answer to [`Store::take_lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseReply {
    /// The lease is the caller's (taken now, or already held with the same token):
    /// its epoch.
    Taken {
        /// The lease's fleet epoch.
        epoch: FleetEpoch,
    },
    /// Another token holds the lease.
    Held {
        /// The holder's lease epoch.
        epoch: FleetEpoch,
        /// What remains of its TTL, by the store's clock.
        remaining: Duration,
    },
}

/// Why a store operation did not answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// No answer within the coordinator's `store_timeout`. A write that timed out
    /// may still be applied later.
    TimedOut,
    /// The store refused or could not be reached (connection refused, down).
    Unavailable(String),
    /// Anything else the store's client reported.
    Other(BoxError),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::TimedOut => f.write_str("store operation timed out"),
            StoreError::Unavailable(why) => write!(f, "store unavailable: {why}"),
            StoreError::Other(e) => write!(f, "store error: {e}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Other(e) => Some(&**e),
            _ => None,
        }
    }
}

/// A stream of [`FleetEvent`]s pushed by the store: verdicts and fleet trips for
/// one breaker, or freed slots for one capped bulkhead.
///
/// Built by a store from the receiving half of a Tokio channel it feeds. `None`
/// from [`next`](Self::next) means the subscription is gone (a dropped
/// connection): the coordinator treats it as store trouble, resubscribes and
/// reconciles with a read. Dropping it (the coordination dropped) runs the
/// store's release, if it gave one: a server-side subscription ends there.
pub struct Subscription {
    rx: mpsc::Receiver<FleetEvent>,
    /// In a mutex only so the subscription is `Sync` (it is never contended).
    release: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("rx", &self.rx)
            .field("release", &self.release_fn().is_some())
            .finish()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Closed first, so the store sees this subscriber gone when it releases.
        self.rx.close();
        let release = self.release_fn().take();
        if let Some(release) = release {
            release();
        }
    }
}

impl Subscription {
    /// A subscription fed through `rx`.
    pub fn new(rx: mpsc::Receiver<FleetEvent>) -> Self {
        Self {
            rx,
            release: std::sync::Mutex::new(None),
        }
    }

    fn release_fn(&self) -> std::sync::MutexGuard<'_, Option<Box<dyn FnOnce() + Send>>> {
        // Nothing panics while holding it; a poisoned one is still consistent.
        self.release
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A subscription fed through `rx` that runs `release` once, when dropped
    /// (e.g. to end the server-side subscription once nobody listens). It runs in
    /// the dropping thread, often a Tokio worker: it must not block.
    pub fn with_release(
        rx: mpsc::Receiver<FleetEvent>,
        release: impl FnOnce() + Send + 'static,
    ) -> Self {
        Self {
            rx,
            release: std::sync::Mutex::new(Some(Box::new(release))),
        }
    }

    /// The next pushed event; `None` once the subscription is gone.
    pub async fn next(&mut self) -> Option<FleetEvent> {
        self.rx.recv().await
    }
}

/// The store's key names for one coordinated breaker: a prefix, the schema
/// version, and the breaker's name in a hash tag (so a Redis cluster keeps all of
/// one breaker's keys in one slot, as a script over several keys needs).
///
/// ```
/// use seawall_fleet::Keys;
///
/// let keys = Keys::new("shop", "freight").unwrap();
/// assert_eq!(keys.lease(), "shop:v1:breaker:{freight}:lease");
/// assert_eq!(keys.channel(), "shop:v1:breaker:{freight}:verdicts");
/// assert_eq!(keys.trips(), "shop:v1:breaker:{freight}:trips");
/// assert!(Keys::new("", "freight").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Keys {
    lease: String,
    epoch: String,
    verdict: String,
    channel: String,
    trips: String,
    fleet_trip: String,
    actions: String,
    audit: String,
    reports: String,
    reported: String,
}

impl Keys {
    /// The keys of breaker `name` under `prefix`. The prefix must be 1 to
    /// [`MAX_PREFIX_LEN`] bytes of printable ASCII without spaces or braces; the
    /// name is escaped (`%`, braces, spaces and control characters as `%XX`), so
    /// any two names give distinct keys.
    pub fn new(prefix: &str, name: &str) -> Result<Self, ConfigError> {
        check_prefix(prefix)?;
        let tag = escape(name);
        let base = format!("{prefix}:v{SCHEMA_VERSION}:breaker:{{{tag}}}");
        Ok(Self {
            lease: format!("{base}:lease"),
            epoch: format!("{base}:epoch"),
            verdict: format!("{base}:verdict"),
            channel: format!("{base}:verdicts"),
            trips: format!("{base}:trips"),
            fleet_trip: format!("{base}:fleet-trip"),
            actions: format!("{base}:actions"),
            audit: format!("{base}:audit"),
            reports: format!("{base}:reports"),
            reported: format!("{base}:reported"),
        })
    }

    /// Holds the lease: token and epoch, with the lease's TTL.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    /// Holds the fleet epoch counter.
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// Holds the latest verdict.
    pub fn verdict(&self) -> &str {
        &self.verdict
    }

    /// The channel verdicts (and fleet trips) are pushed on.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Holds the instances' recent trips, for the fleet trip.
    pub fn trips(&self) -> &str {
        &self.trips
    }

    /// Holds the fleet trip in force (its epoch), for as long as its window.
    pub fn fleet_trip(&self) -> &str {
        &self.fleet_trip
    }

    /// Holds the operators' fleet actions on this breaker, by id.
    pub fn actions(&self) -> &str {
        &self.actions
    }

    /// Holds the breaker's audit log of fleet actions, newest first.
    pub fn audit(&self) -> &str {
        &self.audit
    }

    /// Holds each instance's latest report on the breaker, by instance.
    pub fn reports(&self) -> &str {
        &self.reports
    }

    /// Indexes the reports by time (ms), so the stale ones go without a scan.
    pub fn reported(&self) -> &str {
        &self.reported
    }
}

/// `name` with `%`, braces, spaces and control characters as `%XX`, so any two
/// names give distinct keys and a name cannot end the hash tag.
fn escape(name: &str) -> String {
    let mut tag = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' | '{' | '}' => push_escaped(&mut tag, c),
            c if c.is_whitespace() || c.is_control() => push_escaped(&mut tag, c),
            c => tag.push(c),
        }
    }
    tag
}

fn push_escaped(out: &mut String, c: char) {
    let mut buf = [0u8; 4];
    for b in c.encode_utf8(&mut buf).bytes() {
        out.push_str(&format!("%{b:02X}"));
    }
}

pub(crate) fn check_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() {
        return Err(ConfigError::new("prefix", "must not be empty"));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(ConfigError::new(
            "prefix",
            format!(
                "must be at most {MAX_PREFIX_LEN} bytes, got {}",
                prefix.len()
            ),
        ));
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| !c.is_ascii_graphic() || *c == '{' || *c == '}')
    {
        return Err(ConfigError::new(
            "prefix",
            format!("must be printable ASCII without spaces or braces, found {c:?}"),
        ));
    }
    Ok(())
}

/// The operations a coordinator needs from the shared store (see the module docs
/// for the contract). Implementations: [`LocalStore`](crate::LocalStore)
/// in-process; `RedisStore` (feature `redis`) in production.
///
/// The coordinator bounds every operation with its own timeout, so an
/// implementation may simply await its client; it must not block the thread.
pub trait Store: Send + Sync + 'static {
    /// Takes the probe lease for `request.ttl` unless another token holds it.
    /// Taken anew, the lease gets epoch `max(counter, request.seen) + 1`, which
    /// becomes the counter. Held with the same token: answered as taken, unchanged.
    fn take_lease(
        &self,
        keys: &Keys,
        request: LeaseRequest,
    ) -> impl Future<Output = Result<LeaseReply, StoreError>> + Send;

    /// Releases the lease if `token` holds it. `Ok(false)`: it did not (expired,
    /// released already, or another's), and nothing changed.
    fn release_lease(
        &self,
        keys: &Keys,
        token: Token,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// If `token` holds the lease, stores `result` as the latest verdict with the
    /// lease's epoch (unless a verdict with a higher epoch is stored already) and
    /// pushes it to subscribers; answers the verdict stored. A success also forgets
    /// the recorded trips and the fleet trip: they were about the sickness the
    /// probe has just seen end. `Ok(None)`: the token
    /// does not hold the lease, and nothing changed.
    fn publish_verdict(
        &self,
        keys: &Keys,
        token: Token,
        result: ProbeResult,
    ) -> impl Future<Output = Result<Option<FleetVerdict>, StoreError>> + Send;

    /// The latest verdict stored, if any.
    fn read_verdict(
        &self,
        keys: &Keys,
    ) -> impl Future<Output = Result<Option<FleetVerdict>, StoreError>> + Send;

    /// Records that `trip.instance` tripped on its own evidence, now by the store's
    /// clock, unless it is already counted within the window. Trips exactly
    /// `trip.within` old or older no longer count. If no fleet trip is in force and
    /// at least `trip.instances` distinct instances are counted, starts one: epoch
    /// `max(counter, trip.seen) + 1` (the lease counter), kept for `trip.within`,
    /// pushed as [`FleetEvent::Tripped`]. Idempotent: recording again changes
    /// nothing while the first record counts.
    fn record_trip(
        &self,
        keys: &Keys,
        trip: TripRecord,
    ) -> impl Future<Output = Result<TripReply, StoreError>> + Send;

    /// The fleet trip in force, if any (its epoch).
    fn read_fleet_trip(
        &self,
        keys: &Keys,
    ) -> impl Future<Output = Result<Option<FleetEpoch>, StoreError>> + Send;

    /// Events published from now on. Pushes are best effort: one may be lost (the
    /// coordinator reconciles by reading).
    fn subscribe(
        &self,
        keys: &Keys,
    ) -> impl Future<Output = Result<Subscription, StoreError>> + Send;

    /// The coordinator's health check, sent every
    /// [`FleetConfig::health_every`](crate::FleetConfig::health_every) while it
    /// coordinates, so a store that died or froze is noticed by an idle breaker
    /// too. It keeps the breaker's keys alive (a store that expires idle keys
    /// refreshes their TTL), raises the epoch counter to at least `seen` (never
    /// lowers it), and answers the latest verdict, like
    /// [`read_verdict`](Self::read_verdict). Idempotent.
    ///
    /// So a counter lost to a flush, an eviction or an expiry comes back, within
    /// one health check, above every epoch a connected instance has seen: epochs
    /// never go backwards for them. The provided method only reads the verdict.
    fn touch(
        &self,
        keys: &Keys,
        seen: FleetEpoch,
    ) -> impl Future<Output = Result<Option<FleetVerdict>, StoreError>> + Send {
        let _ = seen;
        self.read_verdict(keys)
    }

    /// A warning about the store's setup that an operator must act on (for
    /// Redis: an eviction policy other than `noeviction`), shown in the fleet's
    /// snapshots; `None` when there is none or it is not known yet.
    fn warning(&self) -> Option<String> {
        None
    }

    /// Keeps a signed operator action (its [`encode`](crate::FleetAction::encode)d
    /// form) under `id` in the breaker's actions, for at least `keep`; at most
    /// [`MAX_ACTIONS`] are kept (`field`s deleted by
    /// [`remove_action`](Self::remove_action) make room). The store never checks
    /// a signature: every instance does. The provided method refuses (a store
    /// that keeps no actions).
    fn post_action(
        &self,
        keys: &Keys,
        id: &str,
        record: String,
        keep: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (keys, id, record, keep);
        std::future::ready(Err(StoreError::Other(
            "this store keeps no fleet actions".into(),
        )))
    }

    /// Deletes the action kept under `id` (an expired one, to make room).
    fn remove_action(
        &self,
        keys: &Keys,
        id: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (keys, id);
        std::future::ready(Ok(()))
    }

    /// Every action kept, as `(id, record)`. Read at every health check by
    /// every instance coordinating the breaker, so bounded: at most
    /// [`MAX_ACTIONS`]. The provided method has none.
    fn read_actions(
        &self,
        keys: &Keys,
    ) -> impl Future<Output = Result<Vec<(String, String)>, StoreError>> + Send {
        let _ = keys;
        std::future::ready(Ok(Vec::new()))
    }

    /// Adds an [`AuditEntry`](crate::AuditEntry)'s encoded form to the
    /// breaker's audit log, keeping the newest [`AUDIT_KEPT`].
    fn audit(
        &self,
        keys: &Keys,
        entry: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (keys, entry);
        std::future::ready(Ok(()))
    }

    /// Keeps `record` as `instance`'s latest report at `at_ms` (its clock), and
    /// drops at most 16 reports older than `stale_ms`.
    fn report(
        &self,
        keys: &Keys,
        instance: &str,
        record: String,
        at_ms: u64,
        stale_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (keys, instance, record, at_ms, stale_ms);
        std::future::ready(Ok(()))
    }

    /// Every report kept, as `(instance, record)`.
    fn read_reports(
        &self,
        keys: &Keys,
    ) -> impl Future<Output = Result<Vec<(String, String)>, StoreError>> + Send {
        let _ = keys;
        std::future::ready(Ok(Vec::new()))
    }

    /// The newest `n` audit entries, newest first.
    fn read_audit(
        &self,
        keys: &Keys,
        n: usize,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        let _ = (keys, n);
        std::future::ready(Ok(Vec::new()))
    }
}

/// The most stale reports one report drops (the rest go with later reports).
pub(crate) const STALE_TRIMMED: usize = 16;

/// The most fleet actions a store keeps per breaker.
pub const MAX_ACTIONS: usize = 32;

/// The audit entries a store keeps per breaker.
pub const AUDIT_KEPT: usize = 1000;

// ----- the fleet-wide cap ------------------------------------------------------------

/// The version of a capped bulkhead's key layout. Version 2 keeps aggregates
/// and an expiry index beside the claims, so a claim costs the same at any
/// fleet size. While an instance of version 1 still claims under the same
/// prefix, a version-2 claim counts the live version-1 reservations as
/// reserved before granting and copies itself into the version-1 record, which
/// the older instances count: the reservations of both versions together stay
/// within the cap across a rolling upgrade (the rule and its edges are in the
/// `RedisStore` module's docs).
pub const CAP_SCHEMA_VERSION: u32 = 2;

/// The store's keys for one capped bulkhead, all under one hash tag (a Redis
/// Cluster keeps them in one slot, as a script over several keys needs): the
/// record (the cap, when it settles, the aggregates and every claim) in one
/// hash, the index of claims by expiry, the index of claims short of their
/// demand, and the channels that say slots were freed.
///
/// ```
/// use seawall_fleet::{CapKeys, InstanceId};
///
/// let keys = CapKeys::new("shop", "freight").unwrap();
/// assert_eq!(keys.claims(), "shop:v2:cap:{freight}");
/// assert_eq!(keys.expiry(), "shop:v2:cap:{freight}:expiry");
/// assert_eq!(keys.short(), "shop:v2:cap:{freight}:short");
/// assert_eq!(
///     keys.freed_for(InstanceId(0xab)),
///     "shop:v2:cap:{freight}:freed:000000000000000000000000000000ab"
/// );
/// assert_eq!(keys.v1_claims(), "shop:v1:cap:{freight}");
/// assert!(CapKeys::new("", "freight").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CapKeys {
    claims: String,
    expiry: String,
    short: String,
    freed: String,
    v1_claims: String,
}

impl CapKeys {
    /// The keys of bulkhead `name` under `prefix` (the rules of [`Keys::new`]).
    pub fn new(prefix: &str, name: &str) -> Result<Self, ConfigError> {
        check_prefix(prefix)?;
        let tag = escape(name);
        let claims = format!("{prefix}:v{CAP_SCHEMA_VERSION}:cap:{{{tag}}}");
        Ok(Self {
            expiry: format!("{claims}:expiry"),
            short: format!("{claims}:short"),
            freed: format!("{claims}:freed"),
            v1_claims: format!("{prefix}:v1:cap:{{{tag}}}"),
            claims,
        })
    }

    /// Holds the cap, its start, the aggregates and the claims.
    pub fn claims(&self) -> &str {
        &self.claims
    }

    /// The claims by expiry (a sorted set scored by the store's ms).
    pub fn expiry(&self) -> &str {
        &self.expiry
    }

    /// The claims whose demand is above their reservation.
    pub fn short(&self) -> &str {
        &self.short
    }

    /// The prefix of the instances' [`freed_for`](Self::freed_for) channels.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn freed_prefix(&self) -> &str {
        &self.freed
    }

    /// The channel on which `instance` is told of freed slots: a freed slot is
    /// pushed to a bounded number of the claims short of their demand, not to
    /// the whole fleet.
    pub fn freed_for(&self, instance: InstanceId) -> String {
        format!("{}:{instance}", self.freed)
    }

    /// The record of the layout before [`CAP_SCHEMA_VERSION`] 2 (one hash of
    /// every claim), under the same hash tag: while it holds a live claim of an
    /// older instance, version-2 claims count that claim's reservation and copy
    /// themselves into it; the first version-2 claim that finds none live
    /// deletes it.
    pub fn v1_claims(&self) -> &str {
        &self.v1_claims
    }
}

/// One instance of a fleet, as its claims name it: drawn at random when the cap
/// coordination starts, so a restarted process is a new instance (its old claim
/// expires by its TTL).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceId(pub u128);

impl InstanceId {
    /// An id drawn from `rng`.
    pub fn random(rng: &mut fastrand::Rng) -> Self {
        InstanceId(rng.u128(..))
    }
}

impl fmt::Debug for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InstanceId({:032x})", self.0)
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// As its `Display` form, the 32 hex digits the claims are keyed by.
#[cfg(feature = "serde")]
impl serde::Serialize for InstanceId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// An operator's decision on a cap ([`Fleet::set_cap`](crate::Fleet::set_cap),
/// [`Fleet::clear_cap`](crate::Fleet::clear_cap)), with the store's time of it.
/// Configuration, not state: every instance keeps the latest it heard of and
/// sends it with its claims, so a store that lost it (a flush, an eviction, a
/// failover) has it again at the next claim, until an operator clears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OperatorCap {
    /// The cap the operator set; `None`: cleared (the configured caps apply).
    pub cap: Option<u32>,
    /// When the store applied it, in milliseconds of the store's clock: the
    /// later decision wins.
    pub at_ms: u64,
    /// The fleet secret's signature of the decision, kept and given back with
    /// it; an instance with the secret takes up only a decision it verifies.
    pub signature: Option<CapSignature>,
}

impl OperatorCap {
    /// A decision: `cap` set (or cleared, `None`) at `at_ms` of the store's clock.
    pub fn new(cap: Option<u32>, at_ms: u64) -> Self {
        Self {
            cap,
            at_ms,
            signature: None,
        }
    }

    /// With the fleet secret's signature of the decision.
    #[must_use]
    pub fn with_signature(mut self, signature: Option<CapSignature>) -> Self {
        self.signature = signature;
        self
    }
}

/// The signature of an operator's decision on a cap: an HMAC-SHA256 under the
/// fleet secret over its id, the fleet's prefix, the bulkhead's name, when it
/// was issued and until when it may be taken up (by the issuing host's wall
/// clock), and the cap (0: cleared). See [`Fleet::set_cap`](crate::Fleet::set_cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CapSignature {
    /// Drawn at random when issued.
    pub id: u128,
    /// When it was issued, ms since the Unix epoch.
    pub issued_at_ms: u64,
    /// Until when an instance that hears it first may take it up, in the same terms.
    pub expires_at_ms: u64,
    /// The HMAC-SHA256.
    pub mac: [u8; 32],
}

impl CapSignature {
    /// A signature as read from a store.
    pub fn new(id: u128, issued_at_ms: u64, expires_at_ms: u64, mac: [u8; 32]) -> Self {
        Self {
            id,
            issued_at_ms,
            expires_at_ms,
            mac,
        }
    }

    /// The store's form: `v1:<id>:<issued>:<expires>:<mac>`, hex and decimal.
    pub fn encode(&self) -> String {
        let mut mac = String::with_capacity(64);
        for b in self.mac {
            mac.push_str(&format!("{b:02x}"));
        }
        format!(
            "v1:{:032x}:{}:{}:{mac}",
            self.id, self.issued_at_ms, self.expires_at_ms
        )
    }

    /// Parses [`encode`](Self::encode)'s form; `None` if it is not that.
    pub fn decode(s: &str) -> Option<Self> {
        let mut f = s.split(':');
        if f.next()? != "v1" {
            return None;
        }
        let id = f.next()?;
        let id = (id.len() == 32).then(|| u128::from_str_radix(id, 16).ok())??;
        let issued_at_ms = f.next()?.parse().ok()?;
        let expires_at_ms = f.next()?.parse().ok()?;
        let hex = f.next()?;
        if f.next().is_some() || hex.len() != 64 {
            return None;
        }
        let mut mac = [0; 32];
        for (i, b) in mac.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Self::new(id, issued_at_ms, expires_at_ms, mac))
    }
}

/// One renewal of an instance's allotment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claim {
    /// Who claims.
    pub instance: InstanceId,
    /// Grows by one with every claim the instance sends; the store ignores a claim
    /// not above the last one it applied (a late copy of an abandoned one).
    pub seq: u64,
    /// The slots the instance could have used over the last period.
    pub demand: u32,
    /// The slots it may have in use until it hears back: the larger of the
    /// allotment it admits under now and its active calls. The store keeps at
    /// least this much reserved for it, so calls still running after a lower
    /// allotment are never handed to another instance.
    pub held: u32,
    /// How long the claim lives, by the store's clock, from when it is applied.
    pub ttl: Duration,
    /// The cap this instance is configured with: stored if the store has none,
    /// otherwise only compared (the store's cap wins).
    pub cap: u32,
    /// The latest operator's decision this instance heard of: the store applies
    /// it if it is later than the one it keeps (or keeps none).
    pub operator: Option<OperatorCap>,
    /// The last instant of the store's clock (ms) at which the sender still
    /// waits for the answer; a claim applied later changes nothing and is
    /// answered [`abandoned`](ClaimReply::abandoned). The sender reckons it from
    /// a reply it had (see [`ClaimReply::store_ms`]), never from its own clock's
    /// reading of the time of day. `None`: no deadline.
    pub deadline_ms: Option<u64>,
}

impl Claim {
    /// A claim by `instance`, its `seq`-th, of `demand` while holding `held`, for
    /// `ttl`, configured with `cap`.
    pub fn new(
        instance: InstanceId,
        seq: u64,
        demand: u32,
        held: u32,
        ttl: Duration,
        cap: u32,
    ) -> Self {
        Self {
            instance,
            seq,
            demand,
            held,
            ttl,
            cap,
            operator: None,
            deadline_ms: None,
        }
    }

    /// With the deadline of the store's clock after which the claim is
    /// abandoned by its sender.
    #[must_use]
    pub fn with_deadline_ms(mut self, deadline_ms: Option<u64>) -> Self {
        self.deadline_ms = deadline_ms;
        self
    }

    /// With the latest operator's decision the instance heard of.
    #[must_use]
    pub fn with_operator(mut self, operator: Option<OperatorCap>) -> Self {
        self.operator = operator;
        self
    }
}

/// The answer to [`CapStore::claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimReply {
    /// The slots the instance may admit calls into until its lease ends.
    pub allotment: u32,
    /// The cap as the store keeps it (it divided this one).
    pub cap: u32,
    /// The slots reserved across the fleet after this claim, this instance's included.
    pub reserved: u32,
    /// The live claims' demands summed.
    pub demand: u64,
    /// Live claims, this one included.
    pub claimants: u32,
    /// The claim was not applied: older than one already applied, or
    /// abandoned. Nothing changed.
    pub stale: bool,
    /// The claim came after its [`deadline`](Claim::deadline_ms): nothing changed.
    pub abandoned: bool,
    /// The operator's decision the store keeps, if any.
    pub operator: Option<OperatorCap>,
    /// The store's clock when it answered, in ms: the sender reckons the next
    /// claim's deadline from it.
    pub store_ms: u64,
}

/// The operations a fleet-wide cap needs from the shared store: claims, one
/// atomic step each. Implementations: [`LocalStore`](crate::LocalStore)
/// in-process; `RedisStore` (feature `redis`), one Lua script.
///
/// # Contract
///
/// A claim, applied at the store's instant `now`:
/// 0. if `now` is past the claim's [`deadline`](Claim::deadline_ms), changes
///    nothing and is answered `abandoned` (its sender gave up on it);
/// 1. stores `claim.cap` as the cap if the store has none, else keeps its own;
///    the record's first claim settles it at `now + ttl`;
/// 2. drops the instance's own claim if its TTL ran out, and at most 16 other
///    such claims, oldest first (a dead instance's share comes back; one not
///    dropped yet still counts, erring on the side of the cap); a claim whose
///    `seq` is not above the instance's stored one changes nothing and is
///    answered `stale`;
/// 3. computes the share `min(demand, max(⌊G/N⌋, G − D'))`, with `N` the
///    claims kept (this one included) and `D'` the others' demands summed:
///    never above the max-min fair share, never below `min(demand, ⌊G/N⌋)`
///    (the bound is in the `ledger` module's docs), and computed from
///    aggregates kept up to date with every change, never from every claim;
/// 4. grants `min(share, cap - what the others have reserved)`, and, until
///    the record settles (a new or wiped store cannot know what older leases are
///    still in use), no more than `held`;
/// 5. reserves `max(grant, held)` for the instance until `now + ttl`;
/// 6. if the slots reserved across the fleet are now fewer than before the
///    claim (its own reservation lowered, expired claims dropped), or, once the
///    record settled, still fewer than the cap, while another claim's demand
///    is above its reservation, pushes
///    [`FleetEvent::SlotsFreed`]`(claim.instance)` on the
///    [own channels](CapKeys::freed_for) of at most 4 claims short of their
///    demand, the furthest short first (ties: the higher instance first), in
///    the same atomic step.
///
/// So the reservations never sum above the cap while every instance renews
/// within its TTL, an allotment lowered by the division frees its slots only
/// as the instance's calls end, and a few instances short of their demand hear
/// of freed slots at once instead of at their next renewal (not the whole
/// fleet: the early claims of a saturated cap do not herd).
pub trait CapStore: Send + Sync + 'static {
    /// Applies `claim` (see the trait's contract) and answers the allotment.
    fn claim(
        &self,
        keys: &CapKeys,
        claim: Claim,
    ) -> impl Future<Output = Result<ClaimReply, StoreError>> + Send;

    /// Replaces the cap kept by the store (an operator's change of the fleet's
    /// cap; instances configured otherwise warn until their configuration
    /// follows), recorded as an [`OperatorCap`] with the store's time.
    fn set_cap(
        &self,
        keys: &CapKeys,
        cap: u32,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// [`set_cap`](Self::set_cap) (`cap` `Some`) or [`clear_cap`](Self::clear_cap)
    /// (`None`), the decision kept with `signature` and given back with it in
    /// claims' replies. The provided method refuses (a store that keeps no
    /// signature).
    fn decide_cap(
        &self,
        keys: &CapKeys,
        cap: Option<u32>,
        signature: CapSignature,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (keys, cap, signature);
        std::future::ready(Err(StoreError::Other(
            "this store cannot keep a signed operator's cap".into(),
        )))
    }

    /// Clears the operator's cap: records an [`OperatorCap`] of `None` with the
    /// store's time and forgets the cap kept, so the next claim stores its
    /// configured one. The provided method refuses (a store that keeps no
    /// operator's decision).
    fn clear_cap(&self, keys: &CapKeys) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = keys;
        std::future::ready(Err(StoreError::Other(
            "this store cannot clear an operator's cap".into(),
        )))
    }

    /// Deletes `instance`'s claim (a graceful shutdown, once its calls ended), so
    /// its share comes back to the fleet at once instead of after its TTL; pushes
    /// [`FleetEvent::SlotsFreed`] when there was one. Idempotent. The provided
    /// method does nothing: the claim then leaves by its TTL.
    fn withdraw(
        &self,
        keys: &CapKeys,
        instance: InstanceId,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (keys, instance);
        std::future::ready(Ok(()))
    }

    /// A warning about the store's setup, as [`Store::warning`]; shown in
    /// [`CapSnapshot::store_warning`](crate::CapSnapshot::store_warning).
    fn warning(&self) -> Option<String> {
        None
    }

    /// The [`FleetEvent::SlotsFreed`] pushes meant for `instance` from now on
    /// ([`CapKeys::freed_for`], step 6 of the contract). Best effort, as for
    /// [`Store::subscribe`]: a lost push costs its listener the wait until its
    /// next renewal, and the next freed slot tells it first (it is still the
    /// furthest short).
    fn watch_freed(
        &self,
        keys: &CapKeys,
        instance: InstanceId,
    ) -> impl Future<Output = Result<Subscription, StoreError>> + Send;
}
