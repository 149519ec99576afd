//! The coordinator over `LocalStore`, a few instances in one process, with tokio's
//! paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use seawall_circuit_breaker::Handle;
use seawall_circuit_breaker::{CircuitBreakerLayer, ProbeDecision, ProbeRequest, State};
use seawall_core::BoxError;
use seawall_fleet::{
    Coordinated, Faults, Fleet, FleetConfig, FleetEpoch, FleetVerdict, Keys, LeaseReply,
    LeaseRequest, LeaseStatus, LocalStore, ProbeResult, Store, StoreError, Subscription, Token,
    TripRecord, TripReply,
};
use support::{
    breaker_config, instance, load, most_overlapping, run_for, total, Dependency, Instance,
};
use tokio::time::Instant;
use tower::{Service, ServiceExt};

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn fleet(store: &LocalStore, seed: u64) -> Fleet<LocalStore> {
    Fleet::builder(store.clone()).seed(seed).build().unwrap()
}

fn instances(n: usize, dep: &Arc<Dependency>, fleet: &Fleet<LocalStore>) -> Vec<Instance> {
    (0..n)
        .map(|i| instance(i, dep, Some(fleet), breaker_config()))
        .collect()
}

/// `n` instances coordinated by one fleet over `store` (seeded with `seed`), in
/// front of one dependency answering after `latency`, a second after they started:
/// the dependency, the fleet and the instances.
async fn settled(
    store: &LocalStore,
    seed: u64,
    n: usize,
    latency: Duration,
) -> (Arc<Dependency>, Fleet<LocalStore>, Vec<Instance>) {
    let dep = Dependency::new(latency);
    let fleet = fleet(store, seed);
    let fleet_instances = instances(n, &dep, &fleet);
    run_for(S).await;
    (dep, fleet, fleet_instances)
}

fn states(instances: &[Instance]) -> Vec<State> {
    instances.iter().map(Instance::state).collect()
}

fn assert_all_in(instances: &[Instance], state: State) {
    let states = states(instances);
    assert!(states.iter().all(|s| *s == state), "{states:?}");
}

#[tokio::test(start_paused = true)]
async fn a_closed_call_makes_no_store_operation_and_never_waits() {
    let store = LocalStore::new();
    store.set_faults(Faults::latency(2 * MS)).unwrap();
    let (_, _fleet, fleet_instances) = settled(&store, 1, 3, Duration::ZERO).await;
    let ops = store.ops();
    let counted: Vec<u64> = fleet_instances
        .iter()
        .map(|i| i.coordinated.as_ref().unwrap().snapshot().store_ops)
        .collect();
    assert!(fleet_instances
        .iter()
        .all(|i| i.coordinated.as_ref().unwrap().snapshot().connected));
    for inst in &fleet_instances {
        for _ in 0..1000 {
            let before = Instant::now();
            inst.call().await;
            // Paused clock: a call that waited on the store would have moved it.
            assert_eq!(Instant::now(), before);
        }
    }
    assert_eq!(total(&fleet_instances).ok, 3000);
    assert_eq!(store.ops(), ops);
    let after: Vec<u64> = fleet_instances
        .iter()
        .map(|i| i.coordinated.as_ref().unwrap().snapshot().store_ops)
        .collect();
    assert_eq!(after, counted);
}

#[tokio::test(start_paused = true)]
async fn the_fleet_defaults_give_a_breaker_a_ramp_and_jitter() {
    let store = LocalStore::new();
    let dep = Dependency::new(Duration::ZERO);
    let inst = instance(0, &dep, Some(&fleet(&store, 1)), breaker_config());
    let config = inst.handle.config();
    assert_eq!(config.ramp, FleetConfig::default().ramp);
    assert_eq!(config.jitter, Some(0.2));
    // A breaker with its own keeps them.
    let own = seawall_circuit_breaker::CircuitBreakerConfig {
        jitter: Some(0.05),
        ramp: None,
        ..breaker_config()
    };
    let none = Fleet::builder(LocalStore::new())
        .ramp(None)
        .jitter(0.0)
        .build()
        .unwrap();
    let inst = instance(1, &dep, Some(&none), own.clone());
    assert_eq!(inst.handle.config(), own);
    // An explicit `0.0` is a setting too: the fleet's jitter does not replace it.
    let exact = seawall_circuit_breaker::CircuitBreakerConfig {
        jitter: Some(0.0),
        ..breaker_config()
    };
    let inst = instance(2, &dep, Some(&fleet(&store, 1)), exact);
    assert_eq!(inst.handle.config().jitter, Some(0.0));
    // A breaker that sets none and is not coordinated runs with the default.
    let alone = instance::<LocalStore>(3, &dep, None, breaker_config());
    assert_eq!(alone.handle.config().jitter, None);
    assert_eq!(
        alone.handle.config().effective_jitter(),
        seawall_circuit_breaker::DEFAULT_JITTER
    );
}

#[tokio::test(start_paused = true)]
async fn only_the_lease_holder_probes_and_its_success_closes_every_instance() {
    let store = LocalStore::with_seed(2);
    store.set_faults(Faults::latency(2 * MS)).unwrap();
    let dep = Dependency::new(20 * MS);
    // No jitter: the five trip together and their intervals end together, so
    // only the lease keeps them from probing together.
    let fleet = Fleet::builder(store.clone())
        .seed(2)
        .jitter(0.0)
        .build()
        .unwrap();
    let fleet_instances = instances(5, &dep, &fleet);
    run_for(S).await;
    dep.fail(true);
    load(&fleet_instances, 100 * MS, 25 * S).await;
    assert!(states(&fleet_instances).iter().all(|s| *s != State::Closed));
    dep.fail(false);
    load(&fleet_instances, 100 * MS, 20 * S).await;

    assert_all_in(&fleet_instances, State::Closed);
    let probes = dep.probes();
    // Five instances, two failed intervals and one good one: three probes, not fifteen.
    assert_eq!(probes.len(), 3, "{probes:?}");
    assert_eq!(dep.max_probes_in_flight(), 1);
    assert_eq!(most_overlapping(&probes), 1);
    // One probe per open interval: each starts at least an interval after the last.
    for pair in probes.windows(2) {
        assert!(pair[1].start - pair[0].start >= 10 * S, "{probes:?}");
    }
    // The last probe succeeded; the four others closed on its verdict, without a
    // successful probe of their own.
    let last = probes.last().unwrap().instance;
    for (i, inst) in fleet_instances.iter().enumerate() {
        let successes = inst.handle.snapshot().counters.probe_successes;
        assert_eq!(successes, u64::from(i == last), "instance {i}");
        if i != last {
            assert!(
                inst.coordinated
                    .as_ref()
                    .unwrap()
                    .snapshot()
                    .verdicts_applied
                    >= 1
            );
        }
    }
    assert_eq!(total(&fleet_instances).other, 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_every_instance_from_the_verdict() {
    let store = LocalStore::new();
    let (dep, _fleet, fleet_instances) = settled(&store, 3, 4, 20 * MS).await;
    dep.fail(true);
    // Trip, then run up to the first probe's verdict and a little after.
    load(&fleet_instances, 100 * MS, 14 * S).await;
    let probes = dep.probes();
    assert_eq!(probes.len(), 1, "{probes:?}");
    for inst in &fleet_instances {
        let snap = inst.handle.snapshot();
        assert_eq!(snap.state, State::Open);
        // Holder by its own probe, the others by the verdict: one failed probe each.
        assert_eq!(snap.consecutive_failed_probes, 1);
        // Reopened from about the probe's end, not from their own earlier trip.
        let reopened_at = Instant::now() - snap.in_state_for;
        assert!(reopened_at >= probes[0].end, "{snap:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn with_every_push_lost_the_reconcile_read_still_closes_each_instance_within_an_interval() {
    let store = LocalStore::with_seed(4);
    store
        .set_faults(Faults::latency(2 * MS).with_push_loss(1.0))
        .unwrap();
    let (dep, _fleet, fleet_instances) = settled(&store, 4, 5, 20 * MS).await;
    dep.fail(true);
    load(&fleet_instances, 100 * MS, 15 * S).await;
    dep.fail(false);
    let recovered_at = Instant::now();
    let first_good = loop {
        load(&fleet_instances, 100 * MS, S).await;
        if let Some(p) = dep.probes().into_iter().find(|p| p.start >= recovered_at) {
            break p;
        }
        assert!(Instant::now() - recovered_at < 60 * S, "no good probe");
    };
    // One open interval (10 s, jittered by up to 20 %) after it, everyone is closed.
    let deadline = first_good.end + 12 * S;
    load(
        &fleet_instances,
        100 * MS,
        deadline.saturating_duration_since(Instant::now()),
    )
    .await;
    assert_all_in(&fleet_instances, State::Closed);
    // Nobody heard a push; the verdicts came through reads, and no instance
    // probed on its own.
    let applied: u64 = fleet_instances
        .iter()
        .map(|i| i.coordinated.as_ref().unwrap().snapshot().verdicts_applied)
        .sum();
    assert!(applied >= 4, "{applied}");
    assert_eq!(dep.max_probes_in_flight(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_store_outage_falls_back_to_the_local_breaker_and_rejoins() {
    let store = LocalStore::new();
    let (dep, _fleet, fleet_instances) = settled(&store, 5, 3, 20 * MS).await;
    store.go_down();
    // Closed: calls never notice.
    load(&fleet_instances, 100 * MS, 3 * S).await;
    let t = total(&fleet_instances);
    assert_eq!((t.ok, t.open, t.other), (90, 0, 0));
    for inst in &fleet_instances {
        let snap = inst.coordinated.as_ref().unwrap().snapshot();
        assert!(!snap.connected);
        assert!(snap.store_errors > 0);
    }
    // A failure and a recovery while the store is down: each breaker recovers on its
    // own (one interval, one lease TTL of caution, then its own probe).
    dep.fail(true);
    load(&fleet_instances, 100 * MS, 5 * S).await;
    assert_all_in(&fleet_instances, State::Open);
    dep.fail(false);
    load(&fleet_instances, 100 * MS, 15 * S).await;
    assert_all_in(&fleet_instances, State::Closed);
    assert_eq!(dep.probes().len(), 3);
    // Back up: every instance rejoins by itself.
    store.come_up();
    load(&fleet_instances, 100 * MS, 40 * S).await;
    for inst in &fleet_instances {
        assert!(inst.coordinated.as_ref().unwrap().snapshot().connected);
    }
    assert_eq!(total(&fleet_instances).other, 0);
}

/// A store whose takes are answered by `take` (given the store, the keys and the
/// request); every other operation goes to the store itself.
struct TakesBy<F> {
    store: LocalStore,
    take: F,
}

impl<F, Fut> Store for TakesBy<F>
where
    F: Fn(LocalStore, Keys, LeaseRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<LeaseReply, StoreError>> + Send,
{
    async fn take_lease(
        &self,
        keys: &Keys,
        request: LeaseRequest,
    ) -> Result<LeaseReply, StoreError> {
        (self.take)(self.store.clone(), keys.clone(), request).await
    }
    async fn release_lease(&self, keys: &Keys, token: Token) -> Result<bool, StoreError> {
        self.store.release_lease(keys, token).await
    }
    async fn publish_verdict(
        &self,
        keys: &Keys,
        token: Token,
        result: ProbeResult,
    ) -> Result<Option<FleetVerdict>, StoreError> {
        self.store.publish_verdict(keys, token, result).await
    }
    async fn read_verdict(&self, keys: &Keys) -> Result<Option<FleetVerdict>, StoreError> {
        self.store.read_verdict(keys).await
    }
    async fn record_trip(&self, keys: &Keys, trip: TripRecord) -> Result<TripReply, StoreError> {
        self.store.record_trip(keys, trip).await
    }
    async fn read_fleet_trip(&self, keys: &Keys) -> Result<Option<FleetEpoch>, StoreError> {
        self.store.read_fleet_trip(keys).await
    }
    async fn subscribe(&self, keys: &Keys) -> Result<Subscription, StoreError> {
        self.store.subscribe(keys).await
    }
}

/// A breaker called `freight` coordinated by a fleet over `store`, both seeded with
/// `seed`, and tripped by three failures through a service over it: the fleet, the
/// breaker's handle, its coordination, and that service.
async fn tripped_over<S: Store>(
    store: S,
    seed: u64,
) -> (
    Fleet<S>,
    Handle,
    Coordinated,
    impl Service<http::Request<()>, Response = &'static str, Error = BoxError>,
) {
    let fleet = Fleet::builder(store).seed(seed).build().unwrap();
    let layer = CircuitBreakerLayer::builder("freight")
        .config(breaker_config())
        .random_source(seawall_core::SeededRandom::new(seed))
        .build()
        .unwrap();
    let handle = layer.handle();
    let coordinated = fleet.coordinate(&handle).unwrap();
    let failing = tower::service_fn(|_: http::Request<()>| async {
        Err::<&str, BoxError>("supplier down".into())
    });
    let mut svc = tower::Layer::layer(&layer, failing);
    for _ in 0..3 {
        let ready = svc.ready().await.unwrap();
        let _ = ready.call(http::Request::new(())).await;
    }
    (fleet, handle, coordinated, svc)
}

/// A store whose takes answer only after a second: each one times out (and is
/// applied later), while reads answer at once.
fn slow_takes(store: LocalStore) -> impl Store {
    let take = |store: LocalStore, keys: Keys, request: LeaseRequest| async move {
        let applied = tokio::spawn(async move {
            tokio::time::sleep(S).await;
            store.take_lease(&keys, request).await
        });
        applied
            .await
            .unwrap_or_else(|e| Err(StoreError::Other(e.into())))
    };
    TakesBy { store, take }
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_take_counts_as_maybe_held_and_no_probe_goes_until_its_ttl_ends() {
    let local = LocalStore::new();
    // Tripped by hand-fed failures through a service over this very breaker.
    let (_fleet, handle, coordinated, mut svc) = tripped_over(slow_takes(local.clone()), 6).await;
    assert_eq!(handle.state(), State::Open);
    // At the end of the interval (10 s, up to 20 % more) the take times out.
    run_for(9 * S).await;
    let started = Instant::now();
    while !matches!(coordinated.snapshot().lease, LeaseStatus::MaybeHeld { .. }) {
        run_for(50 * MS).await;
        assert!(Instant::now() - started < 5 * S, "no take timed out");
    }
    assert!(coordinated.snapshot().store_errors >= 1);
    // The store applies the take a second after it was sent: it holds a lease
    // nobody knows it owns, and the instance still waits it out.
    run_for(S).await;
    let keys = Keys::new("seawall", "freight").unwrap();
    assert!(local.peek_lease(&keys).is_some());
    let snap = coordinated.snapshot();
    let LeaseStatus::MaybeHeld { remaining } = snap.lease else {
        panic!("not maybe held: {snap:?}");
    };
    // While maybe held, a due probe is held off: the call never reaches the supplier.
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(http::Request::new(()))
        .await
        .unwrap_err();
    let rejection = seawall_core::find_rejection(&*err).unwrap();
    assert_eq!(rejection.kind(), seawall_core::RejectionKind::CircuitOpen);
    // Told to come back when the maybe-held lease has run out.
    assert_eq!(rejection.retry_after(), Some(remaining));
    assert_eq!(handle.snapshot().counters.probe_failures, 0);
}

#[tokio::test(start_paused = true)]
async fn a_wipe_during_a_lease_lets_at_most_two_probes_overlap() {
    let store = LocalStore::new();
    // Probes take 1.5 s (under the 2 s half-open timeout): long enough to overlap.
    let (dep, _fleet, fleet_instances) = settled(&store, 7, 5, 1500 * MS).await;
    dep.fail(true);
    let keys = Keys::new("seawall", "freight").unwrap();
    // Drive the load until a lease is held, then wipe the store under it.
    let mut wiped = false;
    for _ in 0..400 {
        load(&fleet_instances, 100 * MS, 100 * MS).await;
        if !wiped && store.peek_lease(&keys).is_some() {
            run_for(200 * MS).await;
            store.wipe();
            wiped = true;
        }
    }
    assert!(wiped);
    assert!(dep.max_probes_in_flight() <= 2, "{:?}", dep.probes());
    assert!(most_overlapping(&dep.probes()) <= 2);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_coordination_hands_the_breaker_back() {
    let store = LocalStore::new();
    let dep = Dependency::new(Duration::ZERO);
    let fleet = fleet(&store, 8);
    let mut inst = instance(0, &dep, Some(&fleet), breaker_config());
    run_for(S).await;
    drop(inst.coordinated.take());
    // The gate is gone: no other gate replaced, and a new one can be installed.
    assert!(inst.handle.set_probe_gate(None).is_none());
    let ops = store.ops();
    dep.fail(true);
    load(std::slice::from_ref(&inst), 100 * MS, 3 * S).await;
    dep.fail(false);
    load(std::slice::from_ref(&inst), 100 * MS, 20 * S).await;
    assert_eq!(inst.state(), State::Closed);
    assert_eq!(
        store.ops(),
        ops,
        "a dropped coordination still used the store"
    );
}

#[tokio::test(start_paused = true)]
async fn bad_configuration_is_a_typed_error_naming_the_field() {
    let build =
        |b: seawall_fleet::FleetBuilder<LocalStore>| b.build().unwrap_err().field().to_owned();
    let store = LocalStore::new;
    assert_eq!(build(Fleet::builder(store()).prefix("")), "prefix");
    assert_eq!(build(Fleet::builder(store()).prefix("has space")), "prefix");
    assert_eq!(
        build(Fleet::builder(store()).store_timeout(Duration::ZERO)),
        "store_timeout"
    );
    assert_eq!(
        build(Fleet::builder(store()).probe_window(Duration::ZERO)),
        "probe_window"
    );
    assert_eq!(
        build(Fleet::builder(store()).disconnect_after(0)),
        "disconnect_after"
    );
    assert_eq!(build(Fleet::builder(store()).jitter(1.5)), "jitter");
    assert_eq!(
        build(Fleet::builder(store()).reconnect(S, MS)),
        "reconnect_max"
    );

    let fleet = fleet(&store(), 9);
    // A lease TTL out of range: the breaker's half-open timeout at its longest.
    let long = CircuitBreakerLayer::builder("freight")
        .half_open_timeout(seawall_core::MAX_DURATION)
        .build()
        .unwrap();
    assert_eq!(
        fleet.coordinate(&long.handle()).unwrap_err().field(),
        "probe_window"
    );
    // Coordinated twice, or over another gate.
    let layer = CircuitBreakerLayer::builder("freight").build().unwrap();
    let first = fleet.coordinate(&layer.handle()).unwrap();
    assert_eq!(
        fleet.coordinate(&layer.handle()).unwrap_err().field(),
        "probe_gate"
    );
    drop(first);
    let other = CircuitBreakerLayer::builder("payments").build().unwrap();
    other
        .handle()
        .set_probe_gate(Some(Arc::new(|_: &ProbeRequest| ProbeDecision::Allow)));
    assert_eq!(
        fleet.coordinate(&other.handle()).unwrap_err().field(),
        "probe_gate"
    );
    // The refused coordination left the breaker's own gate in place.
    assert!(other.handle().set_probe_gate(None).is_some());
}

#[test]
fn coordinating_outside_a_runtime_is_an_error_not_a_panic() {
    let fleet = Fleet::builder(LocalStore::new()).build().unwrap();
    let layer = CircuitBreakerLayer::builder("freight").build().unwrap();
    let err = fleet.coordinate(&layer.handle()).unwrap_err();
    assert_eq!(err.field(), "runtime");
    // Nothing was installed.
    assert!(layer.handle().set_probe_gate(None).is_none());
}

#[tokio::test(start_paused = true)]
async fn an_absurd_answer_from_the_store_is_bounded_not_a_panic() {
    // Every take answered with an absurd holder: the largest epoch, a lease that
    // never ends.
    let absurd = TakesBy {
        store: LocalStore::new(),
        take: |_: LocalStore, _: Keys, _: LeaseRequest| async {
            Ok(LeaseReply::Held {
                epoch: FleetEpoch(u64::MAX),
                remaining: Duration::MAX,
            })
        },
    };
    let (_fleet, _, coordinated, _svc) = tripped_over(absurd, 10).await;
    run_for(13 * S).await;
    let snap = coordinated.snapshot();
    let LeaseStatus::Elsewhere { epoch, remaining } = snap.lease else {
        panic!("{snap:?}");
    };
    assert_eq!(epoch.0, u64::MAX);
    // Never waits longer than a lease of its own lives (2 s half-open + 1 s window).
    assert!(remaining <= 3 * S, "{remaining:?}");
    assert_eq!(snap.fleet_epoch.0, u64::MAX);
}
