//! An in-process store: the embedded default for one process, and the store of
//! tests and simulations, with faults to inject.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use seawall_core::ConfigError;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::ledger::{Effects, Ledger};
use crate::store::{
    CapKeys, CapSignature, CapStore, Claim, ClaimReply, FleetEpoch, FleetEvent, FleetVerdict,
    InstanceId, Keys, LeaseReply, LeaseRequest, ProbeResult, Store, StoreError, Subscription,
    Token, TripRecord, TripReply, AUDIT_KEPT, MAX_ACTIONS, STALE_TRIMMED,
};

/// Pushed verdicts a slow subscriber may have pending before newer ones are dropped
/// (a dropped push is healed by the coordinator's reconciling read).
const SUBSCRIPTION_CAPACITY: usize = 64;

/// Faults a [`LocalStore`] injects, drawn from its seeded generator.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Faults {
    /// One-way delay: an operation is applied `latency` after it is sent and
    /// answered `latency` after that; a push arrives `latency` after its publish.
    pub latency: Duration,
    /// Each one-way delay is stretched by a random part of this.
    pub latency_jitter: Duration,
    /// Chance, in `[0, 1]`, that an operation is lost: half of the time its request
    /// (never applied), half of the time its answer (applied, but the caller waits
    /// until its timeout).
    pub loss: f64,
    /// Chance, in `[0, 1]`, that a push to one subscriber is lost.
    pub push_loss: f64,
}

impl Faults {
    /// No fault: answers at once, nothing lost.
    pub const NONE: Faults = Faults {
        latency: Duration::ZERO,
        latency_jitter: Duration::ZERO,
        loss: 0.0,
        push_loss: 0.0,
    };

    /// No fault but a one-way `latency`.
    pub fn latency(latency: Duration) -> Self {
        Faults {
            latency,
            ..Faults::NONE
        }
    }

    /// These faults with this chance of losing an operation.
    #[must_use]
    pub fn with_loss(mut self, loss: f64) -> Self {
        self.loss = loss;
        self
    }

    /// These faults with this chance of losing a push.
    #[must_use]
    pub fn with_push_loss(mut self, push_loss: f64) -> Self {
        self.push_loss = push_loss;
        self
    }

    /// These faults with each delay stretched by up to `jitter`.
    #[must_use]
    pub fn with_latency_jitter(mut self, jitter: Duration) -> Self {
        self.latency_jitter = jitter;
        self
    }

    fn validate(&self) -> Result<(), ConfigError> {
        for (field, p) in [("loss", self.loss), ("push_loss", self.push_loss)] {
            if !(0.0..=1.0).contains(&p) {
                return Err(ConfigError::new(
                    field,
                    format!("must be a probability in [0, 1], got {p}"),
                ));
            }
        }
        let longest = Duration::from_secs(3600);
        for (field, d) in [
            ("latency", self.latency),
            ("latency_jitter", self.latency_jitter),
        ] {
            if d > longest {
                return Err(ConfigError::new(
                    field,
                    format!("must be at most an hour, got {d:?}"),
                ));
            }
        }
        Ok(())
    }
}

impl Default for Faults {
    fn default() -> Self {
        Faults::NONE
    }
}

/// A live claim as [`LocalStore::peek_claims`] shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredClaim {
    /// Who claimed.
    pub instance: InstanceId,
    /// Its last demand.
    pub demand: u32,
    /// The slots reserved for it.
    pub reserved: u32,
}

/// An in-process [`Store`]: leases, epochs and verdicts in a map, TTLs on Tokio's
/// clock (so `tokio::time::pause()` and `advance()` drive them), pushes through
/// channels. Cloning shares the store.
///
/// For one process it is the embedded default (every coordinated breaker of the
/// process shares it). For tests and simulations it injects faults: delay, loss
/// of operations and of pushes (drawn from a seeded generator, so a run repeats),
/// outages ([`go_down`](Self::go_down) / [`come_up`](Self::come_up)) and a wipe
/// ([`wipe`](Self::wipe)). An operation sent with a delay is applied by a task of
/// its own, so, as with a real server, it may be applied after its caller gave up.
///
/// ```
/// use std::time::Duration;
/// use seawall_fleet::{Faults, LocalStore};
///
/// let store = LocalStore::with_seed(7);
/// store.set_faults(Faults::latency(Duration::from_millis(2)).with_loss(0.1)).unwrap();
/// assert!(store.set_faults(Faults::NONE.with_loss(1.5)).is_err());
/// ```
#[derive(Clone)]
pub struct LocalStore {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    ops: AtomicU64,
}

struct Lease {
    token: Token,
    epoch: FleetEpoch,
    expires_at: Instant,
}

struct State {
    faults: Faults,
    rng: fastrand::Rng,
    down: bool,
    leases: BTreeMap<String, Lease>,
    epochs: BTreeMap<String, u64>,
    verdicts: BTreeMap<String, FleetVerdict>,
    /// Per breaker: when each instance's trip was recorded.
    trips: BTreeMap<String, BTreeMap<Token, Instant>>,
    /// Per breaker: the fleet trip in force and when it ends.
    fleet_trips: BTreeMap<String, (FleetEpoch, Instant)>,
    subscribers: BTreeMap<String, Vec<mpsc::Sender<FleetEvent>>>,
    caps: BTreeMap<String, Ledger>,
    /// Per breaker: the operators' actions by id, and the audit log (newest last).
    actions: BTreeMap<String, BTreeMap<String, String>>,
    audit: BTreeMap<String, std::collections::VecDeque<String>>,
    /// Per breaker: each instance's latest report and its time.
    reports: BTreeMap<String, BTreeMap<String, (u64, String)>>,
    /// The origin of the store's millisecond clock (operators' decisions).
    origin: Instant,
}

impl fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.inner.lock();
        f.debug_struct("LocalStore")
            .field("faults", &s.faults)
            .field("down", &s.down)
            .field("leases", &s.leases.len())
            .field("ops", &self.ops())
            .finish_non_exhaustive()
    }
}

impl Default for LocalStore {
    fn default() -> Self {
        Self::new()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How one operation travels.
struct Trip {
    out: Duration,
    back: Duration,
    lose_request: bool,
    lose_reply: bool,
}

impl State {
    fn delay(&mut self) -> Duration {
        let jitter = self.faults.latency_jitter;
        if jitter.is_zero() {
            self.faults.latency
        } else {
            self.faults.latency + jitter.mul_f64(self.rng.f64())
        }
    }

    fn plan(&mut self) -> Trip {
        let out = self.delay();
        let back = self.delay();
        let lost = self.faults.loss > 0.0 && self.rng.f64() < self.faults.loss;
        let request = lost && self.rng.bool();
        Trip {
            out,
            back,
            lose_request: request,
            lose_reply: lost && !request,
        }
    }

    fn live_lease(&mut self, key: &str, now: Instant) -> Option<&Lease> {
        if self.leases.get(key).is_some_and(|l| l.expires_at <= now) {
            self.leases.remove(key);
        }
        self.leases.get(key)
    }

    fn take(&mut self, keys: &Keys, request: LeaseRequest, now: Instant) -> LeaseReply {
        if let Some(lease) = self.live_lease(keys.lease(), now) {
            return if lease.token == request.token {
                LeaseReply::Taken { epoch: lease.epoch }
            } else {
                LeaseReply::Held {
                    epoch: lease.epoch,
                    remaining: lease.expires_at.saturating_duration_since(now),
                }
            };
        }
        let epoch = self.next_epoch(keys, request.seen);
        let expires_at = now.checked_add(request.ttl).unwrap_or(now);
        self.leases.insert(
            keys.lease().to_owned(),
            Lease {
                token: request.token,
                epoch: FleetEpoch(epoch),
                expires_at,
            },
        );
        LeaseReply::Taken {
            epoch: FleetEpoch(epoch),
        }
    }

    /// One more than the larger of the counter and `seen`, which becomes the counter.
    fn next_epoch(&mut self, keys: &Keys, seen: FleetEpoch) -> u64 {
        let counter = self.epochs.get(keys.epoch()).copied().unwrap_or(0);
        let epoch = counter.max(seen.0).saturating_add(1);
        self.epochs.insert(keys.epoch().to_owned(), epoch);
        epoch
    }

    fn live_fleet_trip(&mut self, key: &str, now: Instant) -> Option<FleetEpoch> {
        if self
            .fleet_trips
            .get(key)
            .is_some_and(|(_, end)| *end <= now)
        {
            self.fleet_trips.remove(key);
        }
        self.fleet_trips.get(key).map(|(epoch, _)| *epoch)
    }

    fn record_trip(&mut self, keys: &Keys, trip: TripRecord, now: Instant) -> TripReply {
        let trips = self.trips.entry(keys.trips().to_owned()).or_default();
        // A trip exactly `within` old has expired.
        trips.retain(|_, at| now.saturating_duration_since(*at) < trip.within);
        trips.entry(trip.instance).or_insert(now);
        let tripped = u32::try_from(trips.len()).unwrap_or(u32::MAX);
        let mut fleet_trip = self.live_fleet_trip(keys.fleet_trip(), now);
        if fleet_trip.is_none() && tripped >= trip.instances {
            let epoch = FleetEpoch(self.next_epoch(keys, trip.seen));
            let end = now.checked_add(trip.within).unwrap_or(now);
            self.fleet_trips
                .insert(keys.fleet_trip().to_owned(), (epoch, end));
            self.push(keys.channel(), FleetEvent::Tripped(epoch));
            fleet_trip = Some(epoch);
        }
        TripReply {
            tripped,
            fleet_trip,
        }
    }

    fn release(&mut self, keys: &Keys, token: Token, now: Instant) -> bool {
        match self.live_lease(keys.lease(), now) {
            Some(lease) if lease.token == token => {
                self.leases.remove(keys.lease());
                true
            }
            _ => false,
        }
    }

    fn publish(
        &mut self,
        keys: &Keys,
        token: Token,
        result: ProbeResult,
        now: Instant,
    ) -> Option<FleetVerdict> {
        let epoch = match self.live_lease(keys.lease(), now) {
            Some(lease) if lease.token == token => lease.epoch,
            _ => return None,
        };
        let verdict = FleetVerdict { epoch, result };
        let stored = match self.verdicts.get(keys.verdict()) {
            Some(newer) if newer.epoch > epoch => *newer,
            _ => {
                self.verdicts.insert(keys.verdict().to_owned(), verdict);
                verdict
            }
        };
        if stored == verdict {
            if result == ProbeResult::Succeeded {
                self.trips.remove(keys.trips());
                self.fleet_trips.remove(keys.fleet_trip());
            }
            self.push(keys.channel(), FleetEvent::Verdict(verdict));
        }
        Some(stored)
    }

    fn push(&mut self, channel: &str, event: FleetEvent) {
        let Some(subscribers) = self.subscribers.get_mut(channel) else {
            return;
        };
        subscribers.retain(|tx| !tx.is_closed());
        let loss = self.faults.push_loss;
        let mut reached = Vec::with_capacity(subscribers.len());
        for tx in subscribers.iter() {
            if loss > 0.0 && self.rng.f64() < loss {
                continue;
            }
            reached.push(tx.clone());
        }
        let delay = self.delay();
        let deliver = move || {
            for tx in &reached {
                // A full or closed subscriber loses the push, as a real one would.
                let _ = tx.try_send(event);
            }
        };
        if delay.is_zero() {
            deliver();
        } else if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                tokio::time::sleep(delay).await;
                deliver();
            });
        }
    }
}

impl LocalStore {
    /// An empty store, with no faults (seeded with 0).
    pub fn new() -> Self {
        Self::with_seed(0)
    }

    /// An empty store whose injected faults are drawn from a generator seeded with `seed`.
    pub fn with_seed(seed: u64) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    faults: Faults::NONE,
                    rng: fastrand::Rng::with_seed(seed),
                    down: false,
                    leases: BTreeMap::new(),
                    epochs: BTreeMap::new(),
                    verdicts: BTreeMap::new(),
                    trips: BTreeMap::new(),
                    fleet_trips: BTreeMap::new(),
                    subscribers: BTreeMap::new(),
                    caps: BTreeMap::new(),
                    actions: BTreeMap::new(),
                    audit: BTreeMap::new(),
                    reports: BTreeMap::new(),
                    origin: Instant::now(),
                }),
                ops: AtomicU64::new(0),
            }),
        }
    }

    /// Injects these faults from now on (refused, changing nothing, if a
    /// probability is outside `[0, 1]` or a delay is over an hour).
    pub fn set_faults(&self, faults: Faults) -> Result<(), ConfigError> {
        faults.validate()?;
        self.inner.lock().faults = faults;
        Ok(())
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        self.inner.lock().faults
    }

    /// An outage: every operation fails as unavailable (after the one-way delay),
    /// operations in flight are lost, and every subscription ends. The data stays.
    pub fn go_down(&self) {
        let mut s = self.inner.lock();
        s.down = true;
        s.subscribers.clear();
    }

    /// Ends an outage.
    pub fn come_up(&self) {
        self.inner.lock().down = false;
    }

    /// Whether the store is down.
    pub fn is_down(&self) -> bool {
        self.inner.lock().down
    }

    /// Forgets every lease, epoch counter, verdict, recorded trip, fleet trip and
    /// cap record, as a flushed or failed-over server would; subscriptions stay.
    pub fn wipe(&self) {
        let mut s = self.inner.lock();
        s.leases.clear();
        s.epochs.clear();
        s.verdicts.clear();
        s.trips.clear();
        s.fleet_trips.clear();
        s.caps.clear();
        s.actions.clear();
        s.audit.clear();
        s.reports.clear();
    }

    /// The cap kept for `keys` and its live claims, read directly (not counted
    /// as an operation).
    pub fn peek_claims(&self, keys: &CapKeys) -> Option<(u32, Vec<StoredClaim>)> {
        let now = Instant::now();
        let s = self.inner.lock();
        let now = s.millis(now);
        s.caps.get(keys.claims()).map(|l| {
            let live = l
                .claims
                .iter()
                .filter(|(_, e)| e.expires > now)
                .map(|(id, e)| StoredClaim {
                    instance: InstanceId(*id),
                    demand: e.demand,
                    reserved: e.reserved,
                })
                .collect();
            (l.cap.unwrap_or(0), live)
        })
    }

    /// Operations received so far (each call of a [`Store`] method but the health
    /// check, [`Store::touch`], counts one, lost or not).
    pub fn ops(&self) -> u64 {
        self.inner.ops.load(Ordering::Relaxed)
    }

    /// The latest verdict stored for `keys`, read directly (not counted as an operation).
    pub fn peek_verdict(&self, keys: &Keys) -> Option<FleetVerdict> {
        self.inner.lock().verdicts.get(keys.verdict()).copied()
    }

    /// The live lease for `keys` as (epoch, remaining TTL), read directly (not counted).
    pub fn peek_lease(&self, keys: &Keys) -> Option<(FleetEpoch, Duration)> {
        let now = Instant::now();
        let mut s = self.inner.lock();
        s.live_lease(keys.lease(), now)
            .map(|l| (l.epoch, l.expires_at.saturating_duration_since(now)))
    }

    /// The fleet trip in force for `keys`, read directly (not counted).
    pub fn peek_fleet_trip(&self, keys: &Keys) -> Option<FleetEpoch> {
        self.inner
            .lock()
            .live_fleet_trip(keys.fleet_trip(), Instant::now())
    }

    /// Runs one operation through the injected faults.
    async fn run<R: Send + 'static>(
        &self,
        apply: impl FnOnce(&mut State, Instant) -> R + Send + 'static,
    ) -> Result<R, StoreError> {
        self.inner.ops.fetch_add(1, Ordering::Relaxed);
        let (trip, down) = {
            let mut s = self.inner.lock();
            (s.plan(), s.down)
        };
        let instant = trip.out.is_zero() && trip.back.is_zero();
        if instant && !down && !trip.lose_request && !trip.lose_reply {
            let mut s = self.inner.lock();
            return Ok(apply(&mut s, Instant::now()));
        }
        // Anything that takes time needs Tokio's timers.
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Unavailable("no Tokio runtime to carry the request".into()))?;
        if down {
            if !trip.out.is_zero() {
                tokio::time::sleep(trip.out).await;
            }
            return Err(StoreError::Unavailable("the store is down".into()));
        }
        let (tx, rx) = oneshot::channel();
        let inner = Arc::clone(&self.inner);
        rt.spawn(async move {
            if !trip.out.is_zero() {
                tokio::time::sleep(trip.out).await;
            }
            if trip.lose_request {
                return;
            }
            let reply = {
                let mut s = inner.lock();
                if s.down {
                    return;
                }
                apply(&mut s, Instant::now())
            };
            if !trip.back.is_zero() {
                tokio::time::sleep(trip.back).await;
            }
            if !trip.lose_reply {
                let _ = tx.send(reply);
            }
        });
        match rx.await {
            Ok(reply) => Ok(reply),
            // Lost on the way: no answer ever comes, as with a real network.
            Err(_) => std::future::pending().await,
        }
    }
}

impl Store for LocalStore {
    async fn take_lease(
        &self,
        keys: &Keys,
        request: LeaseRequest,
    ) -> Result<LeaseReply, StoreError> {
        let keys = keys.clone();
        self.run(move |s, now| s.take(&keys, request, now)).await
    }

    async fn release_lease(&self, keys: &Keys, token: Token) -> Result<bool, StoreError> {
        let keys = keys.clone();
        self.run(move |s, now| s.release(&keys, token, now)).await
    }

    async fn publish_verdict(
        &self,
        keys: &Keys,
        token: Token,
        result: ProbeResult,
    ) -> Result<Option<FleetVerdict>, StoreError> {
        let keys = keys.clone();
        self.run(move |s, now| s.publish(&keys, token, result, now))
            .await
    }

    async fn read_verdict(&self, keys: &Keys) -> Result<Option<FleetVerdict>, StoreError> {
        let key = keys.verdict().to_owned();
        self.run(move |s, _| s.verdicts.get(&key).copied()).await
    }

    async fn record_trip(&self, keys: &Keys, trip: TripRecord) -> Result<TripReply, StoreError> {
        let keys = keys.clone();
        self.run(move |s, now| s.record_trip(&keys, trip, now))
            .await
    }

    async fn read_fleet_trip(&self, keys: &Keys) -> Result<Option<FleetEpoch>, StoreError> {
        let key = keys.fleet_trip().to_owned();
        self.run(move |s, now| s.live_fleet_trip(&key, now)).await
    }

    async fn subscribe(&self, keys: &Keys) -> Result<Subscription, StoreError> {
        self.listen(keys.channel()).await
    }

    async fn post_action(
        &self,
        keys: &Keys,
        id: &str,
        record: String,
        _keep: Duration,
    ) -> Result<(), StoreError> {
        let (key, id) = (keys.actions().to_owned(), id.to_owned());
        self.run(move |s, _| {
            let kept = s.actions.entry(key).or_default();
            if kept.len() >= MAX_ACTIONS && !kept.contains_key(&id) {
                return Err(StoreError::Other(
                    format!("at most {MAX_ACTIONS} fleet actions are kept per breaker").into(),
                ));
            }
            kept.insert(id, record);
            Ok(())
        })
        .await?
    }

    async fn remove_action(&self, keys: &Keys, id: &str) -> Result<(), StoreError> {
        let (key, id) = (keys.actions().to_owned(), id.to_owned());
        self.run(move |s, _| {
            if let Some(kept) = s.actions.get_mut(&key) {
                kept.remove(&id);
            }
        })
        .await
    }

    async fn read_actions(&self, keys: &Keys) -> Result<Vec<(String, String)>, StoreError> {
        let key = keys.actions().to_owned();
        self.run(move |s, _| {
            s.actions
                .get(&key)
                .map(|kept| kept.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default()
        })
        .await
    }

    async fn audit(&self, keys: &Keys, entry: String) -> Result<(), StoreError> {
        let key = keys.audit().to_owned();
        self.run(move |s, _| {
            let log = s.audit.entry(key).or_default();
            log.push_back(entry);
            while log.len() > AUDIT_KEPT {
                log.pop_front();
            }
        })
        .await
    }

    async fn report(
        &self,
        keys: &Keys,
        instance: &str,
        record: String,
        at_ms: u64,
        stale_ms: u64,
    ) -> Result<(), StoreError> {
        let (key, instance) = (keys.reports().to_owned(), instance.to_owned());
        self.run(move |s, _| {
            let kept = s.reports.entry(key).or_default();
            kept.insert(instance, (at_ms, record));
            let stale: Vec<String> = kept
                .iter()
                .filter(|(_, (at, _))| *at < stale_ms)
                .take(STALE_TRIMMED)
                .map(|(id, _)| id.clone())
                .collect();
            for id in stale {
                kept.remove(&id);
            }
        })
        .await
    }

    async fn read_reports(&self, keys: &Keys) -> Result<Vec<(String, String)>, StoreError> {
        let key = keys.reports().to_owned();
        self.run(move |s, _| {
            s.reports
                .get(&key)
                .map(|kept| {
                    kept.iter()
                        .map(|(id, (_, record))| (id.clone(), record.clone()))
                        .collect()
                })
                .unwrap_or_default()
        })
        .await
    }

    async fn read_audit(&self, keys: &Keys, n: usize) -> Result<Vec<String>, StoreError> {
        let key = keys.audit().to_owned();
        self.run(move |s, _| {
            s.audit
                .get(&key)
                .map(|log| log.iter().rev().take(n).cloned().collect())
                .unwrap_or_default()
        })
        .await
    }

    /// At once: no fault is drawn and no operation counted (a health check is
    /// not one of the protocol's); fails only while the store is down.
    async fn touch(
        &self,
        keys: &Keys,
        seen: FleetEpoch,
    ) -> Result<Option<FleetVerdict>, StoreError> {
        let mut s = self.inner.lock();
        if s.down {
            return Err(StoreError::Unavailable("the store is down".into()));
        }
        let counter = s.epochs.entry(keys.epoch().to_owned()).or_insert(0);
        *counter = (*counter).max(seen.0);
        Ok(s.verdicts.get(keys.verdict()).copied())
    }
}

impl LocalStore {
    /// Pushes on `channel` from now on.
    async fn listen(&self, channel: &str) -> Result<Subscription, StoreError> {
        let channel = channel.to_owned();
        let (tx, rx) = mpsc::channel(SUBSCRIPTION_CAPACITY);
        self.run(move |s, _| {
            s.subscribers.entry(channel).or_default().push(tx);
        })
        .await?;
        Ok(Subscription::new(rx))
    }
}

impl CapStore for LocalStore {
    async fn claim(&self, keys: &CapKeys, claim: Claim) -> Result<ClaimReply, StoreError> {
        let keys = keys.clone();
        self.run(move |s, now| {
            let now = s.millis(now);
            let ledger = s.caps.entry(keys.claims().to_owned()).or_default();
            let (reply, effects) = ledger.claim(&claim, now);
            s.pushed(&keys, claim.instance, &effects);
            reply
        })
        .await
    }

    async fn watch_freed(
        &self,
        keys: &CapKeys,
        instance: InstanceId,
    ) -> Result<Subscription, StoreError> {
        self.listen(&keys.freed_for(instance)).await
    }

    async fn withdraw(&self, keys: &CapKeys, instance: InstanceId) -> Result<(), StoreError> {
        let keys = keys.clone();
        self.run(move |s, _| {
            let effects = s
                .caps
                .get_mut(keys.claims())
                .and_then(|ledger| ledger.withdraw(instance.0));
            if let Some(effects) = effects {
                s.pushed(&keys, instance, &effects);
            }
        })
        .await
    }

    async fn set_cap(&self, keys: &CapKeys, cap: u32) -> Result<(), StoreError> {
        self.decide(keys, Some(cap), None).await
    }

    async fn decide_cap(
        &self,
        keys: &CapKeys,
        cap: Option<u32>,
        signature: CapSignature,
    ) -> Result<(), StoreError> {
        self.decide(keys, cap, Some(signature)).await
    }

    async fn clear_cap(&self, keys: &CapKeys) -> Result<(), StoreError> {
        self.decide(keys, None, None).await
    }
}

impl LocalStore {
    /// An operator's decision on the cap (set or, with `None`, cleared), with the
    /// store's time and its signature if any: recorded even with no record yet,
    /// as Redis does, so a claim that carries an older decision does not bring it back.
    async fn decide(
        &self,
        keys: &CapKeys,
        cap: Option<u32>,
        signature: Option<CapSignature>,
    ) -> Result<(), StoreError> {
        let key = keys.claims().to_owned();
        self.run(move |s, now| {
            let at_ms = s.millis(now);
            s.caps.entry(key).or_default().decide(cap, at_ms, signature);
        })
        .await
    }
}

impl State {
    /// The store's clock in ms (from its creation; 1 at creation, so a
    /// deadline of 0 is always past).
    fn millis(&self, now: Instant) -> u64 {
        millis(now.duration_since(self.origin)).saturating_add(1)
    }

    /// Step 6 of the cap's contract: the freed slots pushed to the claimants
    /// to wake (at most four, never the whole fleet).
    fn pushed(&mut self, keys: &CapKeys, by: InstanceId, effects: &Effects) {
        for id in &effects.wake {
            self.push(&keys.freed_for(InstanceId(*id)), FleetEvent::SlotsFreed(by));
        }
    }
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger::new()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
