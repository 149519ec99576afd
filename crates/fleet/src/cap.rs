//! A fleet-wide concurrency cap: each instance's bulkhead admits calls into an
//! allotment leased from the store and renewed by a background task, so no call
//! ever waits on the store.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use seawall_bulkhead::{Demand, Handle};
use seawall_core::{later, ConfigError};
use tokio::task::AbortHandle;
use tokio::time::{sleep_until, Instant};

use crate::actions::{ActionRefusal, FleetSecret, WallClock, CLOCK_SKEW};
use crate::config::MAX_SETTING;
use crate::coordinator::{next_push, sleep_until_due, Fleet, Shutdown};
use crate::store::{
    CapKeys, CapSignature, CapStore, Claim, ClaimReply, FleetEvent, InstanceId, OperatorCap,
    StoreError, Subscription,
};
use crate::telemetry::CapTelemetry;

/// The largest cap accepted: a bulkhead's own largest limit (2^20).
pub const MAX_CAP: u32 = 1 << 20;

/// How long after it was issued an operator's signed cap is still taken up by
/// an instance that hears it for the first time (a decision older than this is
/// a copy, not the operator's word: set it again, or write it into the
/// configuration).
pub const CAP_SIGNED_FOR: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// What the signature of an operator's decision on a cap covers (`0`: cleared).
fn cap_text(prefix: &str, name: &str, cap: Option<u32>, sig: &CapSignature) -> String {
    format!(
        "seawall-fleet-cap-v1\n{:032x}\n{prefix}\n{name}\n{}\n{}\n{}",
        sig.id,
        sig.issued_at_ms,
        sig.expires_at_ms,
        cap.unwrap_or(0)
    )
}

/// The signature of `cap` for bulkhead `name` of the fleet under `prefix`,
/// issued `now_ms`.
fn sign_cap(
    secret: &FleetSecret,
    prefix: &str,
    name: &str,
    cap: Option<u32>,
    now_ms: u64,
) -> CapSignature {
    let ms = u64::try_from(CAP_SIGNED_FOR.as_millis()).unwrap_or(u64::MAX);
    let mut sig = CapSignature::new(
        fastrand::u128(..),
        now_ms,
        now_ms.saturating_add(ms),
        [0; 32],
    );
    sig.mac = secret.sign_bytes(&cap_text(prefix, name, cap, &sig));
    sig
}

/// Whether an instance of the fleet under `prefix` takes up `decision` on
/// bulkhead `name` at `now_ms`: signed under the secret (current or previous),
/// for this cap, issued not in this host's future (beyond [`CLOCK_SKEW`]), and
/// within its [`CAP_SIGNED_FOR`].
fn check_cap(
    secret: &FleetSecret,
    prefix: &str,
    name: &str,
    decision: &OperatorCap,
    now_ms: u64,
) -> Result<(), ActionRefusal> {
    let sig = decision.signature.ok_or(ActionRefusal::BadSignature)?;
    if !secret.verifies(&cap_text(prefix, name, decision.cap, &sig), &sig.mac) {
        return Err(ActionRefusal::BadSignature);
    }
    let skew = u64::try_from(CLOCK_SKEW.as_millis()).unwrap_or(u64::MAX);
    if sig.issued_at_ms > now_ms.saturating_add(skew) {
        return Err(ActionRefusal::NotYetIssued);
    }
    let max = u64::try_from(CAP_SIGNED_FOR.as_millis()).unwrap_or(u64::MAX);
    if sig.expires_at_ms <= sig.issued_at_ms || sig.expires_at_ms - sig.issued_at_ms > max {
        return Err(ActionRefusal::TooLong);
    }
    if now_ms >= sig.expires_at_ms {
        return Err(ActionRefusal::Expired);
    }
    Ok(())
}

/// Early claims an instance may send back to back (then one per quarter period).
const EARLY_BURST: u32 = 4;

/// What an instance admits when it holds no live lease (the store is unreachable,
/// slow, or has not answered yet).
///
/// The default is [`Divided`](Self::Divided) with a floor of 1: most services
/// would rather serve at a documented share of the cap than refuse every
/// capped call while the store is away. [`Strict`](Self::Strict) is for a
/// supplier that must never see more than the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CapMode {
    /// The cap divided by the instances last known, once the lease lapsed:
    /// `max(floor, G / N)`, rounded down, where G is the cap as the store last
    /// answered it (else the configured one) and N the live claims in that
    /// answer (this instance included); an instance that never reached the
    /// store admits `floor`. The default, with a floor of 1.
    ///
    /// The bound: with the whole fleet cut off and no instance started since,
    /// `N × ⌊G/N⌋ ≤ G`: the cap holds. Each instance started during the outage
    /// adds `floor`; each instance cut off while others still reach the store
    /// adds its `⌊G/N⌋` (the others share G among themselves once its claim
    /// expired). So at most `G + c × ⌊G/N⌋ + k × floor` with `c` instances cut
    /// off from a store the rest still reach and `k` started during the outage.
    Divided {
        /// What an instance admits before it ever reached the store, and the
        /// least it admits cut off (at most the cap; 0 admits nothing then).
        floor: u32,
    },
    /// Nothing beyond the lease it still holds: the fleet never exceeds the cap
    /// (while clocks run at the same rate), at the price of failing fast with
    /// `BulkheadFull` while the store is away.
    Strict,
    /// Falls back to a local share of its own once its lease lapsed: calls go on
    /// while the store is away, and the fleet may exceed the cap by the shares of
    /// the instances cut off (the bound: [docs/fleet.md](https://github.com/seawall-rs/seawall/blob/main/docs/fleet.md#the-bounds)).
    Available {
        /// The slots an instance without a lease admits into, at most the cap.
        local_share: u32,
    },
}

impl Default for CapMode {
    /// `Divided { floor: 1 }`.
    fn default() -> Self {
        CapMode::Divided { floor: 1 }
    }
}

impl CapMode {
    /// The allotment an instance that never reached the store admits into.
    pub fn fallback(self) -> u32 {
        self.share(u32::MAX, None)
    }

    /// The allotment an instance without a lease admits into, given the cap
    /// (the store's, as last answered, else the configured one) and the live
    /// claims it last heard of (`None`: it never reached the store).
    pub fn share(self, cap: u32, instances: Option<u32>) -> u32 {
        match self {
            CapMode::Strict => 0,
            CapMode::Available { local_share } => local_share,
            CapMode::Divided { floor } => match instances {
                Some(n) if n > 0 => (cap / n).max(floor).min(cap),
                _ => floor.min(cap),
            },
        }
    }

    /// `"divided"`, `"strict"` or `"available"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CapMode::Divided { .. } => "divided",
            CapMode::Strict => "strict",
            CapMode::Available { .. } => "available",
        }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for CapMode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The mode as the flat fields of a snapshot.
        #[derive(serde::Serialize)]
        struct Fields {
            mode: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            local_share: Option<u32>,
            #[serde(skip_serializing_if = "Option::is_none")]
            floor: Option<u32>,
        }
        let (local_share, floor) = match *self {
            CapMode::Available { local_share } => (Some(local_share), None),
            CapMode::Divided { floor } => (None, Some(floor)),
            CapMode::Strict => (None, None),
        };
        Fields {
            mode: self.as_str(),
            local_share,
            floor,
        }
        .serialize(serializer)
    }
}

impl fmt::Display for CapMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A fleet-wide cap on one bulkhead, as plain data (see [`Fleet::cap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CapConfig {
    /// G: the calls active at the dependency across every instance, at most.
    /// Stored once by the first instance to claim; an instance configured with
    /// another value warns and follows the store's.
    pub cap: u32,
    /// T: how often an instance renews its claim (and its demand is measured over).
    pub renew_every: Duration,
    /// How long a claim lives in the store without renewal. Above `renew_every`
    /// (a renewal or two may fail without a lapse); a dead instance's share
    /// comes back to the fleet this long after its last renewal.
    pub ttl: Duration,
    /// The longest a call admitted under the cap can run (bound it with a
    /// deadline). The instance stops admitting under a lease this long before the
    /// store can hand the lease on, so a call admitted just before has ended by
    /// then. `ZERO` assumes nothing; the bound then grows by the calls in flight
    /// at a lapse.
    pub longest_call: Duration,
    /// What an instance admits without a live lease.
    pub mode: CapMode,
}

impl CapConfig {
    /// A cap of `cap` calls, renewed every second, claims living 3 s, in the
    /// default mode ([`CapMode::Divided`] with a floor of 1).
    pub fn new(cap: u32) -> Self {
        Self {
            cap,
            renew_every: Duration::from_secs(1),
            ttl: Duration::from_secs(3),
            longest_call: Duration::ZERO,
            mode: CapMode::default(),
        }
    }

    /// With renewals every `every`.
    #[must_use]
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = every;
        self
    }

    /// With claims living `ttl`.
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// With calls bounded by `longest`.
    #[must_use]
    pub fn longest_call(mut self, longest: Duration) -> Self {
        self.longest_call = longest;
        self
    }

    /// In `mode`.
    #[must_use]
    pub fn mode(mut self, mode: CapMode) -> Self {
        self.mode = mode;
        self
    }

    /// Checks every field, naming the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cap == 0 || self.cap > MAX_CAP {
            return Err(ConfigError::new(
                "cap",
                format!("must be between 1 and {MAX_CAP}, got {}", self.cap),
            ));
        }
        for (field, d) in [("renew_every", self.renew_every), ("ttl", self.ttl)] {
            if d.is_zero() || d > MAX_SETTING {
                return Err(ConfigError::new(
                    field,
                    format!("must be positive and at most {MAX_SETTING:?}, got {d:?}"),
                ));
            }
        }
        if self.ttl <= self.renew_every {
            return Err(ConfigError::new(
                "ttl",
                format!(
                    "must be above renew_every ({:?}), got {:?}",
                    self.renew_every, self.ttl
                ),
            ));
        }
        if self.ttl.saturating_sub(self.longest_call) <= self.renew_every {
            return Err(ConfigError::new(
                "longest_call",
                format!(
                    "ttl ({:?}) minus longest_call must be above renew_every ({:?}), got {:?}",
                    self.ttl, self.renew_every, self.longest_call
                ),
            ));
        }
        if let CapMode::Available { local_share } = self.mode {
            if local_share > self.cap {
                return Err(ConfigError::new(
                    "local_share",
                    format!("must be at most the cap ({}), got {local_share}", self.cap),
                ));
            }
        }
        if let CapMode::Divided { floor } = self.mode {
            if floor > self.cap {
                return Err(ConfigError::new(
                    "floor",
                    format!("must be at most the cap ({}), got {floor}", self.cap),
                ));
            }
        }
        Ok(())
    }

    /// How long after sending a renewal the instance may admit under its answer.
    fn lease_span(&self) -> Duration {
        self.ttl.saturating_sub(self.longest_call)
    }
}

impl<S: CapStore> Fleet<S> {
    /// Caps the bulkhead behind `handle` across the fleet: every instance's
    /// bulkhead of the same name shares `config.cap` active calls, until the
    /// returned [`Capped`] is dropped.
    ///
    /// Sets the bulkhead's allotment to 0 at once (it admits nothing until the
    /// store's first answer; in `available` mode the local share once a claim
    /// fails) and spawns the renewal task on the current Tokio runtime. The
    /// bulkhead's own limit still applies: the allotment only lowers it.
    ///
    /// During a rolling upgrade from the previous release (cap layout 1), the
    /// instances of both releases share the one cap on a `RedisStore`: while
    /// an older instance's claim is live, a claim counts its reservation and is
    /// copied where the older instances count it, so the fleet's reservations
    /// stay within `config.cap` (the edges are in the `redis` module's docs).
    ///
    /// Errors, changing nothing: no Tokio runtime (`runtime`), a bad setting
    /// (`cap`, `renew_every`, `ttl`, `longest_call`, `local_share`), or a bulkhead
    /// that already has an allotment (`allotment`).
    pub fn cap(&self, handle: &Handle, config: CapConfig) -> Result<Capped, ConfigError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            ConfigError::new("runtime", "cap must be called within a Tokio runtime")
        })?;
        config.validate()?;
        let keys = CapKeys::new(&self.config().prefix, handle.name())?;
        if handle.allotment().is_some() {
            return Err(ConfigError::new(
                "allotment",
                "the bulkhead already has an allotment (is it capped twice?)",
            ));
        }
        let instance = InstanceId::random(&mut self.inner.rng());
        let shared = Arc::new(CapShared {
            name: handle.name().to_owned(),
            instance,
            config,
            handle: handle.clone(),
            view: Mutex::new(CapView::default()),
            ops: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            renewals: AtomicU64::new(0),
            early_claims: AtomicU64::new(0),
            lapses: AtomicU64::new(0),
            disagreements: AtomicU64::new(0),
            operator_refused: AtomicU64::new(0),
            telemetry: CapTelemetry::new(handle.name()),
            stopped: Mutex::new(false),
            #[cfg(test)]
            before_lowering: Mutex::new(None),
        });
        shared.apply(0);
        let task = CapTask {
            store: Arc::clone(&self.inner.store),
            keys,
            shared: Arc::clone(&shared),
            store_timeout: self.config().store_timeout,
            seq: 0,
            lease_until: None,
            fenced: false,
            warned_cap: false,
            freed: None,
            period: None,
            last_demand: 0,
            early_due: None,
            early_paced: Instant::now(),
            operator: None,
            secret: self.inner.secret.clone(),
            prefix: self.config().prefix.clone(),
            clock: self.inner.clock,
            refused_at: None,
            anchor: None,
            failures: 0,
            quiet: false,
            rng: fastrand::Rng::with_seed(instance.0 as u64),
        };
        let join = runtime.spawn(task.run());
        let withdraw: Withdraw = {
            let store = Arc::clone(&self.inner.store);
            let keys = CapKeys::new(&self.config().prefix, handle.name())?;
            Box::new(move || {
                let (store, keys) = (Arc::clone(&store), keys.clone());
                Box::pin(async move { store.withdraw(&keys, instance).await })
            })
        };
        Ok(Capped {
            shared,
            task: join.abort_handle(),
            withdraw,
            store_timeout: self.config().store_timeout,
        })
    }

    /// Replaces the cap the store keeps for bulkhead `name` (an operator changing
    /// the fleet's G; instances configured with another value warn until their
    /// configuration follows). The decision is configuration: recorded with the
    /// store's time, learnt by every instance at its next claim, and given back
    /// by them to a store that lost it (a flush, an eviction, a failover), until
    /// [`clear_cap`](Self::clear_cap). Under the fleet's `store_timeout`.
    ///
    /// With the fleet's secret ([`FleetBuilder::secret`](crate::FleetBuilder::secret))
    /// the decision is signed as fleet actions are ([`CapSignature`]: an
    /// HMAC-SHA256 over a random id, the prefix, the bulkhead's name, the
    /// issue instant, the instant until which it may be taken up
    /// ([`CAP_SIGNED_FOR`] later) and the cap), and an instance with the secret
    /// takes up (keeps and gives back) only a decision it verifies: one written
    /// into the store unsigned or under another secret is counted in
    /// [`CapSnapshot::operator_caps_refused`], logged, and never given back, so
    /// write access to the store cannot make the fleet re-assert a cap after a
    /// flush (the store still divides by what it holds until an operator sets or
    /// clears the cap). Without a secret, decisions are unsigned and taken up as
    /// before.
    pub async fn set_cap(&self, name: &str, cap: u32) -> Result<(), CapError> {
        if cap == 0 || cap > MAX_CAP {
            return Err(CapError::Config(ConfigError::new(
                "cap",
                format!("must be between 1 and {MAX_CAP}, got {cap}"),
            )));
        }
        self.decide_cap(name, Some(cap)).await
    }

    /// Records an operator's decision: signed when the fleet has a secret
    /// (every instance with the secret takes up only a decision it verifies),
    /// as before otherwise.
    async fn decide_cap(&self, name: &str, cap: Option<u32>) -> Result<(), CapError> {
        let prefix = &self.config().prefix;
        let keys = CapKeys::new(prefix, name).map_err(CapError::Config)?;
        let store = &self.inner.store;
        let decide = async {
            match (&self.inner.secret, cap) {
                (Some(secret), cap) => {
                    let sig = sign_cap(secret, prefix, name, cap, self.inner.clock.now_ms());
                    store.decide_cap(&keys, cap, sig).await
                }
                (None, Some(cap)) => store.set_cap(&keys, cap).await,
                (None, None) => store.clear_cap(&keys).await,
            }
        };
        match tokio::time::timeout(self.config().store_timeout, decide).await {
            Ok(result) => result.map_err(CapError::Store),
            Err(_) => Err(CapError::Store(StoreError::TimedOut)),
        }
    }
}

impl<S: CapStore> Fleet<S> {
    /// Clears an operator's cap for bulkhead `name` ([`set_cap`](Self::set_cap)):
    /// the instances' configured cap applies again (the next claim stores it).
    /// An operator's cap is configuration: until cleared, the instances keep it
    /// and give it back to a store that lost it (a flush, a failover). Under the
    /// fleet's `store_timeout`.
    pub async fn clear_cap(&self, name: &str) -> Result<(), CapError> {
        self.decide_cap(name, None).await
    }
}

/// Why [`Fleet::set_cap`] did not change the cap.
#[derive(Debug)]
#[non_exhaustive]
pub enum CapError {
    /// A bad argument, naming it.
    Config(ConfigError),
    /// The store did not apply it (a timed-out write may still be applied).
    Store(StoreError),
}

impl fmt::Display for CapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapError::Config(e) => e.fmt(f),
            CapError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CapError::Config(e) => Some(e),
            CapError::Store(e) => Some(e),
        }
    }
}

/// One bulkhead under a fleet-wide cap. Dropping it stops the renewals and puts
/// the bulkhead at once on what its mode gives an instance without a lease
/// (strict: nothing; available: the local share); its claim leaves the store by
/// its TTL. [`Handle::set_allotment`]`(None)` afterwards lifts the cap locally.
pub struct Capped {
    shared: Arc<CapShared>,
    task: AbortHandle,
    /// Deletes this instance's claim from the store (the graceful shutdown's last step).
    withdraw: Withdraw,
    store_timeout: Duration,
}

type Withdraw =
    Box<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>> + Send + Sync>;

impl fmt::Debug for Capped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capped")
            .field("name", &self.shared.name)
            .field("instance", &self.shared.instance)
            .finish_non_exhaustive()
    }
}

impl Capped {
    /// The capped bulkhead's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// This instance's id in the store's claims.
    pub fn instance(&self) -> InstanceId {
        self.shared.instance
    }

    /// The capped bulkhead's handle.
    pub fn handle(&self) -> &Handle {
        &self.shared.handle
    }

    /// The cap's settings.
    pub fn config(&self) -> &CapConfig {
        &self.shared.config
    }

    /// The cap as this instance sees it now.
    pub fn snapshot(&self) -> CapSnapshot {
        let s = &self.shared;
        let view = s.view().clone();
        let now = Instant::now();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CapSnapshot {
            name: s.name.clone(),
            instance: s.instance,
            mode: s.config.mode,
            cap: s.config.cap,
            store_cap: view.store_cap,
            allotment: s
                .handle
                .allotment()
                .map_or(0, |a| u32::try_from(a).unwrap_or(u32::MAX)),
            demand: view.demand,
            fleet_reserved: view.reserved,
            fleet_demand: view.fleet_demand,
            claimants: view.claimants,
            lease_remaining: view
                .lease_until
                .filter(|until| now < *until)
                .map(|until| until - now),
            renewals: load(&s.renewals),
            early_claims: load(&s.early_claims),
            store_ops: load(&s.ops),
            store_errors: load(&s.errors),
            lapses: load(&s.lapses),
            cap_disagreements: load(&s.disagreements),
            operator_caps_refused: load(&s.operator_refused),
            store_warning: view.store_warning,
        }
    }
}

impl Capped {
    /// A graceful shutdown, for an instance about to stop (a rolling deploy):
    /// stops the renewals and admits nothing more (the bulkhead's allotment goes
    /// to 0: new calls are refused as full), waits up to `drain` for the calls
    /// running to end, then deletes this instance's claim from the store, so its
    /// share goes back to the fleet at once (instances short of their demand are
    /// told) instead of a TTL later. The claim is deleted after the drain, even a
    /// drain cut short: calls admitted under the lease end within `longest_call`,
    /// before the store could have handed their slots on anyway.
    ///
    /// The bulkhead stays at 0 afterwards ([`Handle::set_allotment`]`(None)`
    /// lifts it). Never fails: what it did not do is in the answer.
    pub async fn shutdown(&self, drain: Duration) -> Shutdown {
        self.task.abort();
        {
            let mut stopped = self.shared.stopped();
            *stopped = true;
            self.shared.handle.set_allotment(Some(0));
            self.shared.telemetry.allotment(0);
        }
        let handle = &self.shared.handle;
        let deadline = later(Instant::now(), drain);
        while handle.snapshot().active > 0 && Instant::now() < deadline {
            let pause = Duration::from_millis(10).min(deadline - Instant::now());
            tokio::time::sleep(pause).await;
        }
        let still_running = handle.snapshot().active;
        let released = matches!(
            tokio::time::timeout(self.store_timeout, (self.withdraw)()).await,
            Ok(Ok(()))
        );
        Shutdown {
            still_running,
            released,
        }
    }
}

impl Drop for Capped {
    fn drop(&mut self) {
        self.task.abort();
        let mut stopped = self.shared.stopped();
        if *stopped {
            // Shut down: it stays at 0.
            return;
        }
        *stopped = true;
        self.shared
            .handle
            .set_allotment(Some(self.shared.fallback() as usize));
    }
}

/// A fleet-wide cap as one instance sees it at one instant.
///
/// With feature `serde`, it serialises without its name (the policy's key names
/// it), with the mode as `mode` (`strict` or `available`) and, in `available`
/// mode, `local_share`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct CapSnapshot {
    /// The bulkhead's name.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub name: String,
    /// This instance's id in the claims.
    pub instance: InstanceId,
    /// What the instance admits without a live lease.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub mode: CapMode,
    /// The cap this instance is configured with.
    pub cap: u32,
    /// The cap the store keeps, as of the last answer (it decides).
    pub store_cap: Option<u32>,
    /// The allotment the bulkhead admits into now.
    pub allotment: u32,
    /// The demand sent with the last claim.
    pub demand: u32,
    /// The slots reserved across the fleet, as of the last answer.
    pub fleet_reserved: Option<u32>,
    /// The fleet's demands summed, as of the last answer.
    pub fleet_demand: Option<u64>,
    /// Live claims in the fleet, as of the last answer.
    pub claimants: Option<u32>,
    /// What remains of the lease, by this instance's clock from when the renewal
    /// was sent; `None` without a live lease (then the mode decides).
    #[cfg_attr(
        feature = "serde",
        serde(with = "seawall_core::duration_format::option")
    )]
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub lease_remaining: Option<Duration>,
    /// Renewals answered (the periodic claims and the early ones).
    pub renewals: u64,
    /// Claims sent early, between renewals, because the store said slots were
    /// freed while this instance wanted more than it held (four back to back
    /// at most, then one per quarter of `renew_every`).
    pub early_claims: u64,
    /// Store operations sent (none is ever sent by a call): claims, and the
    /// subscription to freed slots.
    pub store_ops: u64,
    /// Store operations that failed or timed out.
    pub store_errors: u64,
    /// Times the lease ran out unrenewed and the mode took over.
    pub lapses: u64,
    /// Answers whose cap differed from this instance's configured one.
    pub cap_disagreements: u64,
    /// Operators' decisions on the cap this instance heard of and did not take
    /// up (with the fleet's secret: unsigned, badly signed, or expired), each
    /// counted once: it neither keeps nor gives them back to the store.
    pub operator_caps_refused: u64,
    /// What the store says an operator must fix in its setup
    /// ([`CapStore::warning`]: on Redis, an eviction policy other than `noeviction`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub store_warning: Option<String>,
}

// ----- the renewal task ----------------------------------------------------------

#[derive(Debug, Clone, Default)]
struct CapView {
    store_cap: Option<u32>,
    demand: u32,
    reserved: Option<u32>,
    fleet_demand: Option<u64>,
    claimants: Option<u32>,
    lease_until: Option<Instant>,
    store_warning: Option<String>,
}

struct CapShared {
    name: String,
    instance: InstanceId,
    config: CapConfig,
    handle: Handle,
    view: Mutex<CapView>,
    ops: AtomicU64,
    errors: AtomicU64,
    renewals: AtomicU64,
    early_claims: AtomicU64,
    lapses: AtomicU64,
    disagreements: AtomicU64,
    operator_refused: AtomicU64,
    telemetry: CapTelemetry,
    stopped: Mutex<bool>,
    /// Run once by the next renewal that lowers the ceiling, between its
    /// snapshot of the bulkhead and the lower ceiling: where a test admits the
    /// call that races the renewal.
    #[cfg(test)]
    before_lowering: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl CapShared {
    fn view(&self) -> MutexGuard<'_, CapView> {
        // Nothing panics while holding the lock; the view is still consistent.
        self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Held around every allotment the task sets and by `Capped`'s drop, so a
    /// task aborted mid-step never overwrites the drop's fallback.
    fn stopped(&self) -> MutexGuard<'_, bool> {
        self.stopped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the mode gives this instance without a lease, from its last answer.
    fn fallback(&self) -> u32 {
        let view = self.view();
        let cap = view.store_cap.unwrap_or(self.config.cap);
        self.config.mode.share(cap, view.claimants)
    }

    fn apply(&self, allotment: u32) {
        let stopped = self.stopped();
        if !*stopped {
            self.handle.set_allotment(Some(allotment as usize));
            self.telemetry.allotment(allotment);
        }
    }
}

struct CapTask<S> {
    store: Arc<S>,
    keys: CapKeys,
    shared: Arc<CapShared>,
    store_timeout: Duration,
    seq: u64,
    /// The instant the current lease lapses, by this instance's clock: the
    /// renewal's sending plus `ttl - longest_call`.
    lease_until: Option<Instant>,
    /// The mode's fallback is in force (the lease lapsed or never came).
    fenced: bool,
    warned_cap: bool,
    /// The store's pushes of freed slots; `None` until subscribed, and again
    /// once the subscription ends (renewed after the next answered claim).
    freed: Option<Subscription>,
    /// The demand measured since the last periodic claim (an early claim reads
    /// it without ending the period).
    period: Option<Demand>,
    /// The demand the last periodic claim sent: what a whole period asked for.
    last_demand: u32,
    /// When an early claim is due (slots were freed and this instance wants more).
    early_due: Option<Instant>,
    /// The pace of early claims: one per quarter period on average, a burst of
    /// [`EARLY_BURST`] at most (so a fleet whose demand flaps cannot multiply
    /// the store's load). Each early claim moves it a quarter period on from
    /// itself or now, whichever is later; one may go out from
    /// `EARLY_BURST - 1` quarters before it.
    early_paced: Instant,
    /// The latest operator's decision on the cap heard of: sent with every
    /// claim, so a store that lost it has it again.
    operator: Option<OperatorCap>,
    /// With it, only a decision signed under it is taken up.
    secret: Option<Arc<FleetSecret>>,
    prefix: String,
    clock: WallClock,
    /// The store's time of the last decision refused (each is counted once).
    refused_at: Option<u64>,
    /// When the last answered claim was sent, by this instance's clock, and
    /// the store's clock (ms) in its answer: the next claim's deadline is
    /// reckoned from it (see [`deadline_ms`](Self::deadline_ms)).
    anchor: Option<(Instant, u64)>,
    /// Renewals in a row that the store did not answer in time.
    failures: u32,
    /// The last answer said the fleet's demands fit the cap and this
    /// instance's is met: nobody waits on a renewal, so it can wait longer.
    quiet: bool,
    /// Draws the jitter of backed-off renewals.
    rng: fastrand::Rng,
}

/// How a wait for the next renewal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Woken {
    /// At the instant it was waiting for.
    OnTime,
    /// Before, because the demand rose above the allotment while quiet.
    ByDemand,
}

/// Why a claim is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claiming {
    /// The renewal of every period: measures the period's demand and gives back
    /// what it did not use.
    Renewal,
    /// Between renewals, on the store's word that slots were freed while this
    /// instance wants more than it holds.
    Early,
}

impl<S: CapStore> CapTask<S> {
    async fn run(mut self) {
        let every = self.shared.config.renew_every;
        let mut tick = Instant::now();
        loop {
            let sent = Instant::now();
            let answered = self.renew(Claiming::Renewal).await;
            let took = sent.elapsed();
            if answered && self.freed.is_none() {
                self.watch_freed().await;
            }
            tick = later(tick, self.next_wait(every, answered, took));
            // A renewal slower than a period: the next one at once, not a burst.
            tick = tick.max(Instant::now());
            if self.wait_until(tick).await == Woken::ByDemand {
                tick = Instant::now();
            }
        }
    }

    /// How long after this renewal's tick the next one goes out: the period
    /// while the store answers promptly; twice the period (at most what keeps
    /// the lease live) while its answers take over half the store timeout, or
    /// while quiet (the fleet's demands fit the cap and this one's is met: a
    /// renewal would change nothing, and a rise of this instance's demand ends
    /// the wait at the next quarter period); and
    /// after failures, the period doubled for each failure in a row but the
    /// first, up to eight periods, drawn at random from the upper half of that
    /// (so a fleet that lost its store together does not come back in step).
    /// A slow or failing store is asked less, never more: the load it sheds is
    /// what lets it recover, while the mode's fallback serves the calls.
    fn next_wait(&mut self, every: Duration, answered: bool, took: Duration) -> Duration {
        if answered {
            self.failures = 0;
            if took <= self.store_timeout / 2 && !self.quiet {
                return every;
            }
            let live = self
                .shared
                .config
                .lease_span()
                .saturating_sub(self.store_timeout);
            return (every * 2).min(live).max(every);
        }
        self.failures = self.failures.saturating_add(1);
        if self.failures == 1 {
            return every.mul_f64(0.75 + 0.25 * self.rng.f64());
        }
        let base = every * (1u32 << (self.failures - 1).min(3));
        base.mul_f64(0.5 + 0.5 * self.rng.f64())
    }

    /// The last instant of the store's clock at which this instance still
    /// waits for a claim sent now: the store's clock in the last answer, plus
    /// the time since that claim was sent, plus the store timeout. The store's
    /// clock at any later instant is at most its reading in the answer plus the
    /// time elapsed here since the claim was sent (the answer was made after
    /// the claim left), so the deadline is never before the true one: a claim
    /// still awaited is never refused. It may be up to the round trip of that
    /// earlier claim (plus the drift of the two clocks' rates since, parts per
    /// million) after it: the most a claim nobody waits for can still be
    /// applied late. No instant of one host is compared with another's.
    fn deadline_ms(&self, now: Instant) -> Option<u64> {
        let (sent, store_ms) = self.anchor?;
        let ahead = now.saturating_duration_since(sent) + self.store_timeout;
        let ahead = u64::try_from(ahead.as_millis()).unwrap_or(u64::MAX / 2);
        Some(store_ms.saturating_add(ahead).saturating_add(1))
    }

    /// The lapse still ahead, if the lease is live.
    fn lapse_due(&self) -> Option<Instant> {
        if self.fenced {
            None
        } else {
            self.lease_until
        }
    }

    /// Sleeps until `at`, lapsing the lease on time if it ends before, and
    /// claiming early when the store says slots were freed. While quiet (the
    /// renewal put off), it looks at the bulkhead's demand every quarter
    /// period, without the store, and ends the wait if it rose above the
    /// allotment.
    async fn wait_until(&mut self, at: Instant) -> Woken {
        let quarter = self.shared.config.renew_every / 4;
        let mut look = Instant::now() + quarter;
        loop {
            let lapse = self.lapse_due().filter(|lapse| *lapse < at);
            let early = self.early_due.filter(|due| *due < at);
            let looking = Some(look).filter(|look| self.quiet && *look < at);
            tokio::select! {
                biased;
                () = sleep_until_due(lapse) => self.lapse(),
                () = sleep_until(at) => return Woken::OnTime,
                () = sleep_until_due(looking) => {
                    if self.short_of_demand().is_some() {
                        self.quiet = false;
                        return Woken::ByDemand;
                    }
                    look = Instant::now() + quarter;
                }
                () = sleep_until_due(early) => {
                    self.early_due = None;
                    self.renew(Claiming::Early).await;
                }
                pushed = next_push(&mut self.freed) => match pushed {
                    Some(FleetEvent::SlotsFreed(by)) if by != self.shared.instance => {
                        self.heard_freed();
                    }
                    Some(_) => {}
                    None => self.freed = None,
                },
            }
        }
    }

    /// Subscribes to the store's pushes of freed slots, under the store timeout.
    async fn watch_freed(&mut self) {
        let store = Arc::clone(&self.store);
        let keys = self.keys.clone();
        let instance = self.shared.instance;
        match self.op(store.watch_freed(&keys, instance)).await {
            Ok(subscription) => self.freed = Some(subscription),
            Err(e) => {
                let shared = &self.shared;
                shared.errors.fetch_add(1, Ordering::Relaxed);
                shared.telemetry.store_error(&shared.name, &e);
            }
        }
    }

    /// Slots were freed: an early claim, if this instance wants more than it
    /// holds, at once or as soon as the pace of early claims allows.
    fn heard_freed(&mut self) {
        if self.short_of_demand().is_none() {
            return;
        }
        let due = Instant::now().max(self.early_allowed());
        self.early_due = Some(self.early_due.map_or(due, |d| d.min(due)));
    }

    /// The first instant an early claim may go out.
    fn early_allowed(&self) -> Instant {
        let burst = self.shared.config.renew_every / 4 * (EARLY_BURST - 1);
        self.early_paced
            .checked_sub(burst)
            .unwrap_or(self.early_paced)
    }

    /// Folds what the bulkhead was asked for since the last look into the period.
    fn measure(&mut self) {
        let d = self.shared.handle.take_demand();
        match &mut self.period {
            None => self.period = Some(d),
            Some(p) => {
                p.peak_active = p.peak_active.max(d.peak_active);
                p.peak_queued = p.peak_queued.max(d.peak_queued);
                p.rejected_full = p.rejected_full.saturating_add(d.rejected_full);
                p.own_limit = d.own_limit;
            }
        }
    }

    /// The demand an early claim sends, if above the allotment held: the last
    /// whole period's or this one's so far, the larger (a claim between
    /// renewals must not understate what the period will show).
    fn short_of_demand(&mut self) -> Option<u32> {
        self.measure();
        let so_far = self.period.map_or(0, |d| clamp(d.wanted()));
        let demand = so_far.max(self.last_demand);
        let held = self.shared.handle.allotment().map_or(u32::MAX, clamp);
        (demand > held).then_some(demand)
    }

    /// One claim: the demand of the period just ended (a renewal) or of the
    /// period so far (an early claim), and what is held now. Whether the store
    /// answered in time.
    async fn renew(&mut self, why: Claiming) -> bool {
        let shared = Arc::clone(&self.shared);
        let config = shared.config;
        let demand = match why {
            Claiming::Renewal => {
                self.measure();
                let demand = self.period.take().map_or(0, |d| clamp(d.wanted()));
                self.last_demand = demand;
                // This claim takes whatever was freed: no early one is owed.
                self.early_due = None;
                demand
            }
            Claiming::Early => match self.short_of_demand() {
                Some(demand) => {
                    shared.early_claims.fetch_add(1, Ordering::Relaxed);
                    let from = self.early_paced.max(Instant::now());
                    self.early_paced = later(from, config.renew_every / 4);
                    demand
                }
                None => return false,
            },
        };
        let snap = shared.handle.snapshot();
        let (limit, active) = (clamp(snap.limit), clamp(snap.active));
        // The answer grants at most the demand: give back what the period did
        // not use now, so the store can hand it on at this renewal rather than
        // the next (what is active stays). An early claim wants more than it
        // holds: it gives nothing back. Without a lease (fenced), the ceiling is
        // the mode's and stays: lowered to a period's demand while calls cannot
        // reach the bulkhead, it could never rise again until the store answers.
        let mut held = if self.fenced {
            limit.max(active)
        } else {
            limit.min(demand).max(active)
        };
        if held < limit {
            #[cfg(test)]
            if let Some(admit) = shared
                .before_lowering
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            {
                admit();
            }
            shared.apply(held);
            // A call admitted between the snapshot and the lower ceiling runs on,
            // and slots given back are taken by others at once: hold it too. The
            // new ceiling fails any admission still deciding under the old one,
            // so the count read now has every call that may be running.
            held = held.max(clamp(shared.handle.snapshot().active));
        }
        self.seq += 1;
        let claim = Claim::new(
            shared.instance,
            self.seq,
            demand,
            held,
            config.ttl,
            config.cap,
        )
        .with_operator(self.operator);
        shared.view().demand = demand;
        let sent = Instant::now();
        let claim = claim.with_deadline_ms(self.deadline_ms(sent));
        let store = Arc::clone(&self.store);
        let keys = self.keys.clone();
        let result = self.op(store.claim(&keys, claim)).await;
        if let Ok(reply) = &result {
            self.anchor = Some((sent, reply.store_ms));
        }
        match result {
            Ok(reply) if !reply.stale => self.granted(reply, sent),
            Ok(reply) if reply.abandoned => {
                self.failed(&StoreError::TimedOut);
                false
            }
            Ok(_) => {
                self.failed(&StoreError::Other(
                    "the store holds a newer claim of this instance".into(),
                ));
                false
            }
            Err(e) => {
                self.failed(&e);
                false
            }
        }
    }

    /// Runs `op` under the store timeout; the lease lapses on time meanwhile.
    async fn op<T>(
        &mut self,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.shared.ops.fetch_add(1, Ordering::Relaxed);
        let op = tokio::time::timeout(self.store_timeout, op);
        tokio::pin!(op);
        loop {
            match self.lapse_due() {
                Some(lapse) => {
                    tokio::select! {
                        r = &mut op => return r.unwrap_or(Err(StoreError::TimedOut)),
                        () = sleep_until(lapse) => self.lapse(),
                    }
                }
                None => return (&mut op).await.unwrap_or(Err(StoreError::TimedOut)),
            }
        }
    }

    /// Admits under `reply` until its lease ends; whether it came in time to.
    fn granted(&mut self, reply: ClaimReply, sent: Instant) -> bool {
        let shared = Arc::clone(&self.shared);
        let until = later(sent, shared.config.lease_span());
        if Instant::now() >= until {
            // Answered too late to admit under: as good as no answer.
            self.failed(&StoreError::TimedOut);
            return false;
        }
        shared.renewals.fetch_add(1, Ordering::Relaxed);
        shared.telemetry.renewed(true);
        let sent_demand = shared.view().demand;
        self.quiet = reply.demand <= u64::from(reply.cap) && sent_demand <= reply.allotment;
        if let Some(heard) = reply.operator {
            if self.operator.is_none_or(|known| known.at_ms < heard.at_ms) {
                let checked = self.secret.as_deref().map_or(Ok(()), |secret| {
                    check_cap(
                        secret,
                        &self.prefix,
                        &shared.name,
                        &heard,
                        self.clock.now_ms(),
                    )
                });
                match checked {
                    Ok(()) => self.operator = Some(heard),
                    Err(why) if self.refused_at != Some(heard.at_ms) => {
                        self.refused_at = Some(heard.at_ms);
                        shared.operator_refused.fetch_add(1, Ordering::Relaxed);
                        shared
                            .telemetry
                            .operator_cap_refused(&shared.name, heard.cap, &why);
                    }
                    Err(_) => {}
                }
            }
        }
        if reply.cap != shared.config.cap {
            shared.disagreements.fetch_add(1, Ordering::Relaxed);
            if !self.warned_cap {
                self.warned_cap = true;
                shared
                    .telemetry
                    .cap_disagrees(&shared.name, shared.config.cap, reply.cap);
            }
        } else {
            self.warned_cap = false;
        }
        let was_fenced = self.fenced && shared.lapses.load(Ordering::Relaxed) > 0;
        self.fenced = false;
        self.lease_until = Some(until);
        {
            let mut view = shared.view();
            view.store_cap = Some(reply.cap);
            view.reserved = Some(reply.reserved);
            view.fleet_demand = Some(reply.demand);
            view.claimants = Some(reply.claimants);
            view.lease_until = Some(until);
            view.store_warning = self.store.warning();
        }
        shared.apply(reply.allotment);
        if was_fenced {
            shared.telemetry.rejoined(&shared.name, reply.allotment);
        }
        true
    }

    fn failed(&mut self, e: &StoreError) {
        self.quiet = false;
        let shared = Arc::clone(&self.shared);
        shared.errors.fetch_add(1, Ordering::Relaxed);
        shared.telemetry.renewed(false);
        shared.telemetry.store_error(&shared.name, e);
        let live = self.lease_until.is_some_and(|until| Instant::now() < until);
        if !live && !self.fenced {
            self.lapse();
        }
    }

    /// No live lease any more: the mode's fallback.
    fn lapse(&mut self) {
        let shared = Arc::clone(&self.shared);
        let had_lease = self.lease_until.is_some();
        self.fenced = true;
        self.lease_until = None;
        shared.view().lease_until = None;
        let fallback = shared.fallback();
        shared.apply(fallback);
        if had_lease {
            shared.lapses.fetch_add(1, Ordering::Relaxed);
            shared
                .telemetry
                .lapsed(&shared.name, shared.config.mode.as_str(), fallback);
        }
    }
}

fn clamp(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX).min(MAX_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operators_cap_is_taken_up_only_as_signed_and_survives_the_store() {
        let secret = FleetSecret::new(vec![1; 32]).unwrap();
        let now = 1_800_000_000_000;
        let sig = sign_cap(&secret, "shop", "freight", Some(4), now);
        // As a store keeps and gives it back.
        let sig = CapSignature::decode(&sig.encode()).unwrap();
        let decision = OperatorCap::new(Some(4), 77).with_signature(Some(sig));
        let check = |secret: &FleetSecret, d: &OperatorCap, name: &str, at: u64| {
            check_cap(secret, "shop", name, d, at)
        };
        assert_eq!(check(&secret, &decision, "freight", now), Ok(()));
        // The store's time of it is not signed: a flushed store's copy checks too.
        let again = OperatorCap::new(Some(4), 99).with_signature(Some(sig));
        assert_eq!(check(&secret, &again, "freight", now), Ok(()));
        // Another cap, bulkhead, fleet or secret; no signature at all.
        let other = OperatorCap::new(Some(2), 77).with_signature(Some(sig));
        assert_eq!(
            check(&secret, &other, "freight", now),
            Err(ActionRefusal::BadSignature)
        );
        let cleared = OperatorCap::new(None, 77).with_signature(Some(sig));
        assert_eq!(
            check(&secret, &cleared, "freight", now),
            Err(ActionRefusal::BadSignature)
        );
        assert_eq!(
            check(&secret, &decision, "search", now),
            Err(ActionRefusal::BadSignature)
        );
        assert_eq!(
            check_cap(&secret, "other", "freight", &decision, now),
            Err(ActionRefusal::BadSignature)
        );
        let stranger = FleetSecret::new(vec![2; 32]).unwrap();
        assert_eq!(
            check(&stranger, &decision, "freight", now),
            Err(ActionRefusal::BadSignature)
        );
        assert_eq!(
            check(&secret, &OperatorCap::new(Some(4), 77), "freight", now),
            Err(ActionRefusal::BadSignature)
        );
        // The previous secret is accepted during a rotation.
        let rotated = FleetSecret::new(vec![2; 32])
            .unwrap()
            .with_previous(vec![1; 32])
            .unwrap();
        assert_eq!(check(&rotated, &decision, "freight", now), Ok(()));
        // Not from this host's future (beyond the skew), not past its time.
        assert_eq!(check(&secret, &decision, "freight", now - 30_000), Ok(()));
        assert_eq!(
            check(&secret, &decision, "freight", now - 30_001),
            Err(ActionRefusal::NotYetIssued)
        );
        let month = u64::try_from(CAP_SIGNED_FOR.as_millis()).unwrap();
        assert_eq!(
            check(&secret, &decision, "freight", now + month - 1),
            Ok(())
        );
        assert_eq!(
            check(&secret, &decision, "freight", now + month),
            Err(ActionRefusal::Expired)
        );
        assert!(CapSignature::decode("v1:zz").is_none());
        assert!(CapSignature::decode(&sig.encode().replace("v1:", "v2:")).is_none());
    }

    #[cfg(feature = "serde")]
    #[test]
    fn a_snapshot_serialises_with_the_mode_as_flat_fields_and_without_its_name() {
        let snapshot = CapSnapshot {
            name: "freight".to_owned(),
            instance: InstanceId(0xab),
            mode: CapMode::Available { local_share: 2 },
            cap: 8,
            store_cap: None,
            allotment: 2,
            demand: 3,
            fleet_reserved: Some(5),
            fleet_demand: Some(9),
            claimants: Some(2),
            lease_remaining: Some(Duration::from_millis(1500)),
            renewals: 4,
            early_claims: 1,
            store_ops: 6,
            store_errors: 1,
            lapses: 0,
            cap_disagreements: 0,
            operator_caps_refused: 0,
            store_warning: None,
        };
        let expected = serde_json::json!({
            "instance": "000000000000000000000000000000ab",
            "mode": "available",
            "local_share": 2,
            "cap": 8,
            "store_cap": null,
            "allotment": 2,
            "demand": 3,
            "fleet_reserved": 5,
            "fleet_demand": 9,
            "claimants": 2,
            "lease_remaining": "1500ms",
            "renewals": 4,
            "early_claims": 1,
            "store_ops": 6,
            "store_errors": 1,
            "lapses": 0,
            "cap_disagreements": 0,
            "operator_caps_refused": 0,
        });
        assert_eq!(serde_json::to_value(&snapshot).unwrap(), expected);

        let strict = CapSnapshot {
            mode: CapMode::Strict,
            lease_remaining: None,
            ..snapshot
        };
        let json = serde_json::to_value(&strict).unwrap();
        assert_eq!(json["mode"], "strict");
        assert!(json.get("local_share").is_none(), "{json:#}");
        assert!(json.get("lease_remaining").is_none(), "{json:#}");
    }

    #[test]
    fn validation_names_the_field() {
        let ok = CapConfig::new(8);
        ok.validate().unwrap();
        let s = Duration::from_secs;
        let cases = [
            (CapConfig::new(0), "cap"),
            (CapConfig::new(MAX_CAP + 1), "cap"),
            (ok.renew_every(Duration::ZERO), "renew_every"),
            (ok.ttl(Duration::ZERO), "ttl"),
            (ok.ttl(Duration::MAX), "ttl"),
            (ok.renew_every(s(3)), "ttl"),
            (ok.renew_every(s(4)), "ttl"),
            (ok.longest_call(s(2)), "longest_call"),
            (ok.longest_call(Duration::MAX), "longest_call"),
            (
                ok.mode(CapMode::Available { local_share: 9 }),
                "local_share",
            ),
            (ok.mode(CapMode::Divided { floor: 9 }), "floor"),
        ];
        for (config, field) in cases {
            assert_eq!(config.validate().unwrap_err().field(), field, "{config:?}");
        }
        ok.mode(CapMode::Available { local_share: 8 })
            .validate()
            .unwrap();
        assert_eq!(CapMode::Available { local_share: 3 }.fallback(), 3);
        assert_eq!(CapMode::Strict.fallback(), 0);
        assert_eq!(ok.mode, CapMode::Divided { floor: 1 });
    }

    #[test]
    fn the_default_mode_divides_the_cap_by_the_instances_last_known() {
        let divided = CapMode::default();
        // Rounded down: 3 instances of a cap of 8 admit 2 each, 6 in all.
        assert_eq!(divided.share(8, Some(3)), 2);
        assert_eq!(divided.share(6, Some(3)), 2);
        // Never below the floor, never above the cap.
        assert_eq!(divided.share(8, Some(20)), 1);
        assert_eq!(CapMode::Divided { floor: 3 }.share(8, Some(4)), 3);
        assert_eq!(divided.share(8, Some(1)), 8);
        // Never reached the store: the floor.
        assert_eq!(divided.share(8, None), 1);
        assert_eq!(divided.fallback(), 1);
        assert_eq!(CapMode::Divided { floor: 0 }.share(8, None), 0);
        assert_eq!(CapMode::Strict.share(8, Some(2)), 0);
        assert_eq!(CapMode::Available { local_share: 3 }.share(8, Some(2)), 3);
    }

    /// A call admitted while a renewal lowers the ceiling (after its snapshot of
    /// the bulkhead, before the lower ceiling) runs on: the claim must hold it,
    /// or the store hands its slot to another instance and the fleet runs above
    /// the cap.
    #[tokio::test(start_paused = true)]
    async fn a_call_admitted_while_a_renewal_lowers_the_ceiling_stays_reserved() {
        use std::sync::atomic::AtomicBool;

        use seawall_bulkhead::BulkheadLayer;
        use seawall_core::BoxError;
        use tower::{service_fn, Layer, Service, ServiceExt};

        use crate::LocalStore;

        const G: u32 = 4;
        let period = Duration::from_millis(100);
        let store = LocalStore::new();
        let fleet = Fleet::builder(store.clone())
            .prefix("test")
            .build()
            .unwrap();
        let layer = BulkheadLayer::builder("freight")
            .max_concurrent(G as usize)
            .max_queue(0)
            .build()
            .unwrap();
        let handle = layer.handle();
        // Every admitted call runs until its future is dropped.
        let mut svc = layer.layer(service_fn(|()| {
            std::future::pending::<Result<(), BoxError>>()
        }));
        let config = CapConfig::new(G)
            .renew_every(period)
            .ttl(Duration::from_millis(300));
        let capped = fleet.cap(&handle, config).unwrap();

        // Calls turned away full make the demand: the instance is granted the
        // whole cap once the store has settled.
        for _ in 0..20 {
            if handle.allotment() == Some(G as usize) {
                break;
            }
            assert_eq!(handle.allotment(), Some(0));
            for _ in 0..G {
                let call = svc.ready().await.unwrap().call(());
                let turned_away = tokio::time::timeout(Duration::from_millis(1), call).await;
                assert!(matches!(turned_away, Ok(Err(_))), "{turned_away:?}");
            }
            tokio::time::sleep(period / 2).await;
        }
        assert_eq!(handle.allotment(), Some(G as usize));
        assert_eq!(handle.snapshot().active, 0);

        // The next renewal measures no demand and lowers the ceiling to 0; a
        // call is admitted just before it does.
        let running = Arc::new(Mutex::new(Vec::new()));
        let admitted = Arc::new(AtomicBool::new(false));
        let hook = {
            let (running, admitted, mut svc) =
                (Arc::clone(&running), Arc::clone(&admitted), svc.clone());
            move || {
                let call = svc.call(());
                running.lock().unwrap().push(call);
                admitted.store(true, Ordering::SeqCst);
            }
        };
        *capped.shared.before_lowering.lock().unwrap() = Some(Box::new(hook));
        let renewals = capped.snapshot().renewals;
        for _ in 0..20 {
            if capped.snapshot().renewals > renewals {
                break;
            }
            tokio::time::sleep(period / 10).await;
        }
        assert!(
            admitted.load(Ordering::SeqCst),
            "the renewal lowered no ceiling"
        );
        assert!(capped.snapshot().renewals > renewals);
        let active = handle.snapshot().active;
        assert_eq!(
            active, 1,
            "the call admitted before the lower ceiling runs on"
        );

        let keys = CapKeys::new("test", "freight").unwrap();
        let (_, claims) = store.peek_claims(&keys).unwrap();
        let mine = claims
            .iter()
            .find(|c| c.instance == capped.instance())
            .unwrap();
        assert!(
            mine.reserved as usize >= active,
            "reserved {} while {active} call runs",
            mine.reserved
        );

        // Another instance wanting the whole cap gets only what is not running.
        let other = Claim::new(InstanceId(0x0b), 1, G, 0, config.ttl, G);
        let reply = store.claim(&keys, other).await.unwrap();
        assert!(reply.reserved <= G, "the fleet reserved {}", reply.reserved);
        assert!(
            reply.allotment as usize + active <= G as usize,
            "granted {} while {active} call runs elsewhere under a cap of {G}",
            reply.allotment
        );
        drop(running);
    }
}
