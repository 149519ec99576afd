//! The fleet-wide cap over `LocalStore` in paused time: several instances'
//! bulkheads in front of one supplier that counts its own concurrent calls.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seawall_bulkhead::{BulkheadLayer, Handle};
use seawall_core::{find_rejection, BoxError, RejectionKind};
use seawall_fleet::{
    CapConfig, CapKeys, CapMode, CapSnapshot, CapStore, Capped, Faults, Fleet, FleetSecret,
    LocalStore,
};
use tokio::time::{sleep, Instant};
use tower::util::BoxCloneSyncService;
use tower::{service_fn, Layer, ServiceExt};

type Svc = BoxCloneSyncService<(), (), BoxError>;

const T: Duration = Duration::from_millis(100);
const TTL: Duration = Duration::from_millis(300);
/// How long the supplier takes per call.
const LATENCY: Duration = Duration::from_millis(20);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The dependency: counts its concurrent calls at every change.
#[derive(Default)]
struct Supplier {
    now: AtomicUsize,
    most: AtomicUsize,
    served: AtomicU64,
}

struct Serving(Arc<Supplier>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Supplier {
    fn enter(self: &Arc<Self>) -> Serving {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
        self.served.fetch_add(1, Ordering::SeqCst);
        Serving(Arc::clone(self))
    }
    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
    fn now(&self) -> usize {
        self.now.load(Ordering::SeqCst)
    }
    fn reset_most(&self) {
        self.most.store(self.now(), Ordering::SeqCst);
    }
}

/// What calls came back with.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    full: AtomicU64,
    other: AtomicU64,
    /// The longest any call took, in µs of paused time.
    longest_us: AtomicU64,
}

struct Node {
    handle: Handle,
    svc: Svc,
    capped: Mutex<Option<Capped>>,
    /// How many of the node's workers call now (saturating demand: each calls
    /// again as soon as its call ends).
    workers: AtomicUsize,
    tally: Tally,
}

impl Node {
    /// The cap's snapshot on this node (which must be capped).
    fn cap_snapshot(&self) -> CapSnapshot {
        self.capped.lock().unwrap().as_ref().unwrap().snapshot()
    }

    fn limit(&self) -> usize {
        self.handle.snapshot().limit
    }
    fn allotment(&self) -> usize {
        self.handle.allotment().unwrap_or(usize::MAX)
    }
}

struct Harness {
    fleet: Fleet<LocalStore>,
    store: LocalStore,
    supplier: Arc<Supplier>,
    nodes: Vec<Arc<Node>>,
}

fn harness(n: usize, own_limit: usize, config: CapConfig) -> Harness {
    seeded_harness(7, n, own_limit, config)
}

fn seeded_harness(seed: u64, n: usize, own_limit: usize, config: CapConfig) -> Harness {
    built_harness(seed, n, own_limit, Some(config), LATENCY)
}

/// `n` nodes whose supplier calls take `latency`, capped at once with `config`,
/// or left for the test to cap (`None`).
fn built_harness(
    seed: u64,
    n: usize,
    own_limit: usize,
    config: Option<CapConfig>,
    latency: Duration,
) -> Harness {
    let store = LocalStore::with_seed(seed);
    let fleet = Fleet::builder(store.clone())
        .prefix("test")
        .store_timeout(ms(20))
        .seed(11 + seed)
        .build()
        .unwrap();
    let supplier = Arc::new(Supplier::default());
    let nodes = (0..n)
        .map(|_| {
            let layer = BulkheadLayer::builder("freight")
                .max_concurrent(own_limit)
                .max_queue(0)
                .build()
                .unwrap();
            let handle = layer.handle();
            let capped = config.map(|config| fleet.cap(&handle, config).unwrap());
            let supplier = Arc::clone(&supplier);
            let inner = service_fn(move |()| {
                let serving = supplier.enter();
                async move {
                    sleep(latency).await;
                    drop(serving);
                    Ok::<(), BoxError>(())
                }
            });
            Arc::new(Node {
                handle,
                svc: BoxCloneSyncService::new(layer.layer(inner)),
                capped: Mutex::new(capped),
                workers: AtomicUsize::new(0),
                tally: Tally::default(),
            })
        })
        .collect();
    let h = Harness {
        fleet,
        store,
        supplier,
        nodes,
    };
    for node in &h.nodes {
        for w in 0..own_limit * 2 {
            tokio::spawn(worker(Arc::clone(node), w));
        }
    }
    h
}

/// Calls while it is among the node's active workers; after a rejection it
/// tries again 5 ms later.
async fn worker(node: Arc<Node>, index: usize) {
    loop {
        if index >= node.workers.load(Ordering::SeqCst) {
            sleep(ms(5)).await;
            continue;
        }
        let start = Instant::now();
        let result = node.svc.clone().oneshot(()).await;
        let took = u64::try_from(start.elapsed().as_micros()).unwrap();
        node.tally.longest_us.fetch_max(took, Ordering::SeqCst);
        match result {
            Ok(()) => {
                node.tally.ok.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                match find_rejection(&*e).map(|r| r.kind()) {
                    Some(RejectionKind::BulkheadFull) => {
                        node.tally.full.fetch_add(1, Ordering::SeqCst)
                    }
                    _ => node.tally.other.fetch_add(1, Ordering::SeqCst),
                };
                sleep(ms(5)).await;
            }
        }
    }
}

/// What a watch over a stretch of paused time saw, sampled every millisecond.
#[derive(Debug, Default)]
struct Watch {
    /// The largest sum of the limits in force across the nodes.
    most_limits: usize,
    /// The supplier's concurrency summed over the samples, for its average use.
    busy: u64,
    samples: u64,
}

impl Harness {
    fn saturate(&self, nodes: &[usize]) {
        for (i, node) in self.nodes.iter().enumerate() {
            let w = if nodes.contains(&i) { usize::MAX } else { 0 };
            node.workers.store(w, Ordering::SeqCst);
        }
    }

    fn limits(&self) -> usize {
        self.nodes.iter().map(|n| n.limit()).sum()
    }

    /// Runs `d` of paused time, sampling every millisecond.
    async fn watch(&self, d: Duration) -> Watch {
        let mut w = Watch::default();
        let end = Instant::now() + d;
        while Instant::now() < end {
            sleep(ms(1)).await;
            w.most_limits = w.most_limits.max(self.limits());
            w.busy += self.supplier.now() as u64;
            w.samples += 1;
        }
        w
    }

    fn calls(&self, f: impl Fn(&Tally) -> &AtomicU64) -> u64 {
        self.nodes
            .iter()
            .map(|n| f(&n.tally).load(Ordering::SeqCst))
            .sum()
    }

    fn longest_call(&self) -> Duration {
        let us = self
            .nodes
            .iter()
            .map(|n| n.tally.longest_us.load(Ordering::SeqCst))
            .max()
            .unwrap_or(0);
        Duration::from_micros(us)
    }
}

/// Strict: these tests hold the fleet to the cap whatever the store does.
fn config(cap: u32) -> CapConfig {
    CapConfig::new(cap)
        .renew_every(T)
        .ttl(TTL)
        .mode(CapMode::Strict)
}

#[tokio::test(start_paused = true)]
async fn strict_never_exceeds_the_cap_and_uses_it_under_saturating_demand() {
    let h = harness(5, 10, config(8));
    h.store
        .set_faults(
            Faults::latency(ms(1))
                .with_latency_jitter(ms(3))
                .with_loss(0.05),
        )
        .unwrap();
    h.saturate(&[0, 1, 2, 3, 4]);
    // A new store hands out nothing new for one TTL; then the fleet fills up.
    let _ = h.watch(ms(1000)).await;
    let w = h.watch(Duration::from_secs(10)).await;
    assert!(h.supplier.most() <= 8, "supplier saw {}", h.supplier.most());
    assert!(w.most_limits <= 8, "limits summed to {}", w.most_limits);
    let used = w.busy as f64 / (w.samples as f64 * 8.0);
    assert!(
        used >= 0.9,
        "the fleet used {:.1} % of the cap",
        used * 100.0
    );
    // Max-min fair: 8 over five equal demands is 1, 1, 2, 2, 2.
    let mut shares: Vec<usize> = h.nodes.iter().map(|n| n.allotment()).collect();
    shares.sort_unstable();
    assert_eq!(shares, vec![1, 1, 2, 2, 2]);
    assert_eq!(h.calls(|t| &t.other), 0);
}

/// Renewals racing their own timeouts and lapses: answers slower than the
/// store timeout (abandoned, yet applied later), a third of operations lost,
/// wipes and outages, over several seeds. The cap holds at every change.
#[tokio::test(start_paused = true)]
async fn late_lost_and_replayed_claims_never_let_strict_exceed_the_cap() {
    for seed in 0..6 {
        let h = seeded_harness(seed, 4, 10, config(6));
        h.store
            .set_faults(
                Faults::latency(ms(2))
                    .with_latency_jitter(ms(30))
                    .with_loss(0.3),
            )
            .unwrap();
        h.saturate(&[0, 1, 2, 3]);
        let mut most = h.watch(Duration::from_secs(3)).await.most_limits;
        h.store.wipe();
        most = most.max(h.watch(Duration::from_secs(2)).await.most_limits);
        h.saturate(&[seed as usize % 4]);
        h.store.go_down();
        most = most.max(h.watch(ms(700)).await.most_limits);
        h.store.come_up();
        h.saturate(&[0, 1, 2, 3]);
        most = most.max(h.watch(Duration::from_secs(3)).await.most_limits);
        assert!(most <= 6, "seed {seed}: limits summed to {most}");
        assert!(
            h.supplier.most() <= 6,
            "seed {seed}: supplier saw {}",
            h.supplier.most()
        );
        assert!(h.calls(|t| &t.ok) > 0, "seed {seed}: nothing served");
        assert_eq!(h.calls(|t| &t.other), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn more_instances_than_the_cap_leaves_some_with_nothing_and_the_cap_holds() {
    let h = harness(6, 4, config(4));
    h.saturate(&[0, 1, 2, 3, 4, 5]);
    let _ = h.watch(ms(1000)).await;
    let w = h.watch(Duration::from_secs(5)).await;
    assert!(h.supplier.most() <= 4);
    assert!(w.most_limits <= 4);
    let zero = h.nodes.iter().filter(|n| n.allotment() == 0).count();
    assert_eq!(zero, 2);
    assert!(w.busy as f64 / (w.samples as f64 * 4.0) >= 0.9);
}

/// The slots reserved across the fleet, as the store keeps them now.
fn reserved(h: &Harness) -> u32 {
    let keys = CapKeys::new("test", "freight").unwrap();
    h.store
        .peek_claims(&keys)
        .map_or(0, |(_, claims)| claims.iter().map(|c| c.reserved).sum())
}

/// Two instances whose renewals are aligned at their worst for a move from
/// `from` to `to`: `to` renews `lag` before `from` (so, without word from the
/// store, `to` would claim the freed slots only a period after they were
/// freed), and the demand moves just after `from`'s renewal was answered (so
/// its next renewal still measures the old demand). Returns how long after the
/// move `to` held the whole cap, checking at every millisecond that neither the
/// reservations, nor the limits in force, nor the supplier ever exceed it.
async fn move_at_worst(h: &Harness, from: usize, to: usize, renewal_of_from: Instant) -> Duration {
    // One-way store latency 1 ms: `from`'s renewal is answered 2 ms after it.
    let mut next = renewal_of_from;
    while next <= Instant::now() {
        next += T;
    }
    tokio::time::sleep_until(next + ms(3)).await;
    h.saturate(&[to]);
    let moved = Instant::now();
    let mut served_at = None;
    while moved.elapsed() < 6 * T {
        sleep(ms(1)).await;
        assert!(reserved(h) <= 6, "reserved {}", reserved(h));
        assert!(h.limits() <= 6 && h.supplier.most() <= 6);
        if served_at.is_none() && h.nodes[to].allotment() == 6 {
            served_at = Some(moved.elapsed());
        }
    }
    assert_eq!(h.nodes[from].allotment(), 0);
    served_at.expect("the demand was never served")
}

fn cap_node(h: &Harness, i: usize, config: CapConfig) {
    let capped = h.fleet.cap(&h.nodes[i].handle, config).unwrap();
    *h.nodes[i].capped.lock().unwrap() = Some(capped);
}

#[tokio::test(start_paused = true)]
async fn demand_moved_to_another_instance_is_served_there_within_two_periods_and_a_call() {
    let h = built_harness(7, 2, 10, None, LATENCY);
    h.store.set_faults(Faults::latency(ms(1))).unwrap();
    let start = Instant::now();
    // Node 1 renews at 0, T, 2T, …; node 0 at 5 ms past each.
    cap_node(&h, 1, config(6));
    sleep(ms(5)).await;
    cap_node(&h, 0, config(6));
    let renews = [start + ms(5), start];
    h.saturate(&[0]);
    let _ = h.watch(Duration::from_secs(2)).await;
    assert_eq!(h.nodes[0].allotment(), 6);
    for round in 0..4 {
        let (from, to) = (round % 2, (round + 1) % 2);
        let took = move_at_worst(&h, from, to, renews[from]).await;
        // Two periods for the old holder's renewals to measure its demand gone
        // and give the slots back (its calls end meanwhile), then three store
        // round trips: its claim, the store's word to the new holder, the new
        // holder's claim (2 ms each here).
        assert!(
            took <= 2 * T + LATENCY + 3 * ms(2),
            "round {round}: {from} -> {to} took {took:?}"
        );
    }
    let early: u64 = h.nodes.iter().map(|n| n.cap_snapshot().early_claims).sum();
    assert!(early >= 4, "{early} early claims");
    assert_eq!(h.calls(|t| &t.other), 0);
}

#[tokio::test(start_paused = true)]
async fn a_move_under_calls_longer_than_two_periods_is_served_within_the_bound() {
    // Calls of 250 ms, renewals every 100 ms: the old holder's calls outlive
    // both of its renewals that could have given the slots back.
    let long = ms(250);
    let config = CapConfig::new(6)
        .renew_every(T)
        .ttl(ms(600))
        .longest_call(ms(300))
        .mode(CapMode::Strict);
    let h = built_harness(7, 2, 10, None, long);
    h.store.set_faults(Faults::latency(ms(1))).unwrap();
    let start = Instant::now();
    cap_node(&h, 1, config);
    sleep(ms(5)).await;
    cap_node(&h, 0, config);
    h.saturate(&[0]);
    let _ = h.watch(Duration::from_secs(2)).await;
    assert_eq!(h.nodes[0].allotment(), 6);
    let took = move_at_worst(&h, 0, 1, start + ms(5)).await;
    assert!(took <= 2 * T + long + 3 * ms(2), "0 -> 1 took {took:?}");
    assert_eq!(h.calls(|t| &t.other), 0);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_instance_s_share_returns_after_its_ttl() {
    let h = harness(2, 10, config(6));
    h.saturate(&[0, 1]);
    let _ = h.watch(ms(1500)).await;
    assert_eq!(
        h.nodes.iter().map(|n| n.allotment()).collect::<Vec<_>>(),
        vec![3, 3]
    );
    // Instance 0 dies: no renewal, its calls end; its claim stays until its TTL.
    h.saturate(&[1]);
    drop(h.nodes[0].capped.lock().unwrap().take());
    assert_eq!(h.nodes[0].allotment(), 0);
    let dropped = Instant::now();
    let mut back_at = None;
    while dropped.elapsed() < Duration::from_secs(2) {
        sleep(ms(1)).await;
        assert!(h.limits() <= 6 && h.supplier.most() <= 6);
        if back_at.is_none() && h.nodes[1].allotment() == 6 {
            back_at = Some(dropped.elapsed());
        }
    }
    let took = back_at.expect("the share never came back");
    assert!(took <= TTL + T + ms(10), "took {took:?}");
    let keys = CapKeys::new("test", "freight").unwrap();
    let (_, claims) = h.store.peek_claims(&keys).unwrap();
    assert_eq!(claims.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_outage_in_strict_mode_admits_nothing_beyond_the_lease_and_no_call_waits() {
    let h = harness(3, 10, config(6));
    h.saturate(&[0, 1, 2]);
    let _ = h.watch(ms(1500)).await;
    let before = h.calls(|t| &t.ok);
    h.store.go_down();
    let w = h.watch(Duration::from_secs(2)).await;
    assert!(w.most_limits <= 6 && h.supplier.most() <= 6);
    // Lapsed: nothing admitted, every call refused at once as full.
    assert!(h.nodes.iter().all(|n| n.allotment() == 0));
    let during = h.calls(|t| &t.ok) - before;
    assert!(during > 0, "calls went on until the leases lapsed");
    assert!(h.calls(|t| &t.full) > 0);
    assert!(h.nodes.iter().all(|n| n.cap_snapshot().lapses >= 1));
    h.store.come_up();
    let _ = h.watch(ms(1000)).await;
    let w = h.watch(Duration::from_secs(2)).await;
    assert!(w.most_limits <= 6 && h.supplier.most() <= 6);
    assert!(w.busy as f64 / (w.samples as f64 * 6.0) >= 0.9);
    // No call waited on the store: none took longer than the supplier does.
    assert_eq!(h.longest_call(), LATENCY);
    assert_eq!(h.calls(|t| &t.other), 0);
}

#[tokio::test(start_paused = true)]
async fn a_wipe_under_load_never_lets_strict_exceed_the_cap() {
    let h = harness(4, 10, config(8));
    h.store
        .set_faults(Faults::latency(ms(1)).with_latency_jitter(ms(2)))
        .unwrap();
    h.saturate(&[0, 1, 2, 3]);
    let _ = h.watch(ms(1500)).await;
    for _ in 0..5 {
        h.store.wipe();
        let w = h.watch(ms(700)).await;
        assert!(w.most_limits <= 8, "limits summed to {}", w.most_limits);
        assert!(h.supplier.most() <= 8, "supplier saw {}", h.supplier.most());
    }
    let w = h.watch(Duration::from_secs(2)).await;
    assert!(w.busy as f64 / (w.samples as f64 * 8.0) >= 0.9);
}

#[tokio::test(start_paused = true)]
async fn available_mode_falls_back_to_the_local_share_within_the_documented_bound() {
    let cfg = config(6).mode(CapMode::Available { local_share: 3 });
    let h = harness(3, 10, cfg);
    h.saturate(&[0, 1, 2]);
    let _ = h.watch(ms(1500)).await;
    assert!(h.supplier.most() <= 6);
    h.supplier.reset_most();
    let before = h.calls(|t| &t.ok);
    h.store.go_down();
    let w = h.watch(Duration::from_secs(2)).await;
    // Every instance cut off: each admits its local share, 3 × 3 = 9, the bound.
    assert!(h.nodes.iter().all(|n| n.allotment() == 3));
    assert!(h.supplier.most() <= 9 && w.most_limits <= 9);
    assert!(h.calls(|t| &t.ok) - before > 500, "calls kept being served");
    h.store.come_up();
    let _ = h.watch(ms(1000)).await;
    h.supplier.reset_most();
    let w = h.watch(Duration::from_secs(2)).await;
    assert!(h.supplier.most() <= 6 && w.most_limits <= 6);
}

#[tokio::test(start_paused = true)]
async fn the_store_s_cap_wins_and_a_disagreeing_instance_counts_it() {
    let h = harness(2, 10, config(4));
    let layer = BulkheadLayer::builder("freight")
        .max_concurrent(10)
        .build()
        .unwrap();
    let other = h.fleet.cap(&layer.handle(), config(10)).unwrap();
    h.saturate(&[0, 1]);
    let _ = h.watch(ms(1500)).await;
    let s = other.snapshot();
    assert_eq!((s.cap, s.store_cap), (10, Some(4)));
    assert!(s.cap_disagreements > 0);
    assert_eq!(h.nodes[0].cap_snapshot().cap_disagreements, 0);
    // An operator raises the fleet's cap in the store: everyone follows.
    h.fleet.set_cap("freight", 6).await.unwrap();
    let _ = h.watch(ms(500)).await;
    assert_eq!(h.nodes.iter().map(|n| n.allotment()).sum::<usize>(), 6);
    match h.fleet.set_cap("freight", 0).await.unwrap_err() {
        seawall_fleet::CapError::Config(e) => assert_eq!(e.field(), "cap"),
        other => panic!("{other}"),
    }
}

#[tokio::test(start_paused = true)]
async fn with_the_fleet_s_secret_only_a_signed_operators_cap_is_taken_up() {
    let store = LocalStore::new();
    let fleet = Fleet::builder(store.clone())
        .prefix("test")
        .secret(Some(FleetSecret::new(vec![4; 32]).unwrap()))
        .build()
        .unwrap();
    let layer = BulkheadLayer::builder("freight")
        .max_concurrent(10)
        .build()
        .unwrap();
    let capped = fleet.cap(&layer.handle(), config(6)).unwrap();
    sleep(ms(500)).await;
    fleet.set_cap("freight", 4).await.unwrap();
    sleep(ms(500)).await;
    let s = capped.snapshot();
    assert_eq!((s.store_cap, s.operator_caps_refused), (Some(4), 0));
    // Written unsigned: the store divides it, the instance does not take it up.
    let keys = CapKeys::new("test", "freight").unwrap();
    store.set_cap(&keys, 3).await.unwrap();
    sleep(ms(500)).await;
    let s = capped.snapshot();
    assert_eq!((s.store_cap, s.operator_caps_refused), (Some(3), 1));
    // Cleared, signed: taken up.
    fleet.clear_cap("freight").await.unwrap();
    sleep(ms(500)).await;
    let s = capped.snapshot();
    assert_eq!((s.store_cap, s.operator_caps_refused), (Some(6), 1));
}

#[tokio::test(start_paused = true)]
async fn calls_make_no_store_operation() {
    let h = harness(3, 10, config(6));
    h.saturate(&[0, 1, 2]);
    // The first second: the record settles, and the slots still free when it
    // has are told to the claims short of them (a few early claims).
    let _ = h.watch(Duration::from_secs(1)).await;
    let early =
        |h: &Harness| -> u64 { h.nodes.iter().map(|n| n.cap_snapshot().early_claims).sum() };
    let (ops_before, early_before) = (h.store.ops(), early(&h));
    let calls_before = h.calls(|t| &t.ok) + h.calls(|t| &t.full);
    let _ = h.watch(Duration::from_secs(3)).await;
    let calls = h.calls(|t| &t.ok) + h.calls(|t| &t.full) - calls_before;
    assert!(calls > 2000, "{calls} calls");
    // Every operation the store received was a renewal task's: one per period
    // and instance, whatever the number of calls, and one subscription each to
    // freed slots; under a steady demand nothing is freed: no early claim.
    let renewals: u64 = h.nodes.iter().map(|n| n.cap_snapshot().store_ops).sum();
    assert_eq!(h.store.ops(), renewals);
    assert_eq!(early(&h), early_before);
    assert!(h.store.ops() - ops_before <= 3 * (3000 / 100 + 1));
}

#[tokio::test(start_paused = true)]
async fn bad_settings_and_a_second_cap_are_refused_naming_the_field() {
    let store = LocalStore::new();
    let fleet = Fleet::builder(store).build().unwrap();
    let layer = BulkheadLayer::builder("freight").build().unwrap();
    let h = layer.handle();
    let field = |c: CapConfig| fleet.cap(&h, c).unwrap_err().field().to_owned();
    assert_eq!(field(CapConfig::new(0)), "cap");
    assert_eq!(
        field(CapConfig::new(8).renew_every(Duration::ZERO)),
        "renew_every"
    );
    assert_eq!(field(CapConfig::new(8).ttl(Duration::from_secs(1))), "ttl");
    assert_eq!(
        field(CapConfig::new(8).mode(CapMode::Available { local_share: 9 })),
        "local_share"
    );
    assert_eq!(h.allotment(), None, "a refused cap changes nothing");
    let capped = fleet.cap(&h, CapConfig::new(8)).unwrap();
    assert_eq!(h.allotment(), Some(0));
    assert_eq!(field(CapConfig::new(8)), "allotment");
    drop(capped);
}

#[test]
fn outside_a_runtime_the_cap_is_refused() {
    let fleet = Fleet::builder(LocalStore::new()).build().unwrap();
    let layer = BulkheadLayer::builder("freight").build().unwrap();
    let e = fleet.cap(&layer.handle(), CapConfig::new(8)).unwrap_err();
    assert_eq!(e.field(), "runtime");
}

#[tokio::test(start_paused = true)]
async fn a_quiet_fleet_renews_half_as_often_and_a_rising_demand_is_claimed_within_a_quarter_period()
{
    let h = harness(2, 4, config(10));
    // Node 0 wants 2 of 10, node 1 nothing: the demands fit the cap.
    h.nodes[0].workers.store(2, Ordering::SeqCst);
    let _ = h.watch(ms(1000)).await;
    let renewals =
        |h: &Harness| -> Vec<u64> { h.nodes.iter().map(|n| n.cap_snapshot().renewals).collect() };
    let before = renewals(&h);
    let _ = h.watch(ms(2000)).await;
    // 20 periods: a renewal every second one (the lease lives 3 periods).
    for (node, (after, before)) in renewals(&h).iter().zip(&before).enumerate() {
        let n = after - before;
        assert!((9..=11).contains(&n), "node {node}: {n} renewals");
    }
    assert_eq!(h.nodes[1].allotment(), 0);
    // Node 1's demand rises: seen by its next look (a quarter period), claimed
    // then, not at its put-off renewal.
    h.nodes[1].workers.store(usize::MAX, Ordering::SeqCst);
    let start = Instant::now();
    while h.nodes[1].allotment() < 4 {
        assert!(start.elapsed() <= T / 4 + ms(10), "{:?}", start.elapsed());
        sleep(ms(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn renewals_back_off_while_the_store_is_slow_and_while_it_fails() {
    // Three instances contending (so never quiet): a renewal every period.
    let h = harness(3, 10, config(6));
    h.saturate(&[0, 1, 2]);
    let _ = h.watch(ms(1000)).await;
    let ops = |h: &Harness| h.store.ops();
    let before = ops(&h);
    let _ = h.watch(ms(2000)).await;
    let healthy = ops(&h) - before;
    assert!((57..=63).contains(&healthy), "{healthy} in 20 periods");
    // Answers taking over half the store timeout (12 ms there and back, of
    // 20): every second period, within what keeps the lease live; nobody lapses.
    h.store.set_faults(Faults::latency(ms(6))).unwrap();
    let _ = h.watch(ms(300)).await;
    let (before, lapsed) = (ops(&h), lapses(&h));
    let _ = h.watch(ms(2000)).await;
    let slow = ops(&h) - before;
    assert!((27..=33).contains(&slow), "{slow} in 20 periods");
    assert_eq!(lapses(&h), lapsed);
    // The store fails every operation: after the first failure in a row the
    // period doubles with each, up to eight periods, drawn from the upper
    // half: at most 3 + 2 + 4 per instance in the first 40 periods (1, 2, 4,
    // then 8 periods apart), not 40.
    h.store.set_faults(Faults::latency(Duration::ZERO)).unwrap();
    h.store.go_down();
    let before = ops(&h);
    let _ = h.watch(ms(4000)).await;
    let failing = ops(&h) - before;
    assert!(failing <= 3 * 10, "{failing} in 40 periods");
    // The store comes back: renewals too, and the cap is used again.
    h.store.come_up();
    let _ = h.watch(ms(2000)).await;
    assert!(h
        .nodes
        .iter()
        .all(|n| n.cap_snapshot().lease_remaining.is_some()));
}

fn lapses(h: &Harness) -> u64 {
    h.nodes.iter().map(|n| n.cap_snapshot().lapses).sum()
}
