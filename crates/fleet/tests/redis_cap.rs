//! The fleet-wide cap on a real `redis-server` in real time, in front of a
//! loopback hyper supplier that counts its own requests in flight. Every
//! assertion is an invariant that holds however loaded the machine is (the
//! supplier's high-water mark against the cap, no call failing because of the
//! store); durations are reported, never asserted.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seawall_bulkhead::Handle;
use seawall_core::{find_rejection, BoxError, RejectionKind};
use seawall_fleet::{CapConfig, CapMode, Capped};
use support::redis_server::RedisServer;
use support::supplier::{client, Supplier};
use tokio::time::{sleep, Instant};
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt};

const WATCHDOG: Duration = Duration::from_secs(60);
/// What the supplier takes per request.
const WORK: Duration = Duration::from_millis(20);
/// Every call is bounded by this (the client gives up, the supplier stops).
const LONGEST: Duration = Duration::from_millis(300);
const T: Duration = Duration::from_millis(100);
const TTL: Duration = Duration::from_millis(700);

fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

struct Shop {
    handle: Handle,
    svc: BoxCloneSyncService<(), (), BoxError>,
    capped: Mutex<Option<Capped>>,
    workers: AtomicUsize,
    ok: AtomicU64,
    full: AtomicU64,
    other: AtomicU64,
    longest_us: AtomicU64,
}

impl Shop {
    fn allotment(&self) -> usize {
        self.handle.allotment().unwrap_or(usize::MAX)
    }
}

/// Strict unless a test says otherwise: the fleet held to the cap whatever the
/// store does.
fn config(cap: u32) -> CapConfig {
    CapConfig::new(cap)
        .mode(CapMode::Strict)
        .renew_every(T)
        .ttl(TTL)
        .longest_call(LONGEST)
}

/// `n` instances, each with a fleet of its own (its own connection) and a
/// bulkhead of 10 without a queue, capped by `config`.
fn shops(url: &str, n: usize, supplier: &Supplier, config: CapConfig) -> Vec<Arc<Shop>> {
    numbered_shops(url, 0..n, supplier, config)
}

/// Shops numbered `numbers` (each number seeds its instance: no two alike).
fn numbered_shops(
    url: &str,
    numbers: std::ops::Range<usize>,
    supplier: &Supplier,
    config: CapConfig,
) -> Vec<Arc<Shop>> {
    numbers
        .map(|i| {
            let (fleet, layer) = support::capped_instance(url, "drill", 40 + i as u64);
            let handle = layer.handle();
            let capped = fleet.cap(&handle, config).unwrap();
            let shop = Arc::new(Shop {
                handle,
                svc: BoxCloneSyncService::new(layer.layer(client(supplier.addr, LONGEST))),
                capped: Mutex::new(Some(capped)),
                workers: AtomicUsize::new(0),
                ok: AtomicU64::new(0),
                full: AtomicU64::new(0),
                other: AtomicU64::new(0),
                longest_us: AtomicU64::new(0),
            });
            for w in 0..12 {
                tokio::spawn(worker(Arc::clone(&shop), w));
            }
            shop
        })
        .collect()
}

/// Calls back to back while among the shop's active workers; after a rejection
/// it tries again 2 ms later.
async fn worker(shop: Arc<Shop>, index: usize) {
    loop {
        if index >= shop.workers.load(Ordering::SeqCst) {
            sleep(Duration::from_millis(5)).await;
            continue;
        }
        let start = Instant::now();
        let result = shop.svc.clone().oneshot(()).await;
        let took = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        shop.longest_us.fetch_max(took, Ordering::SeqCst);
        match result {
            Ok(()) => {
                shop.ok.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                match find_rejection(&*e).map(|r| r.kind()) {
                    Some(RejectionKind::BulkheadFull) => shop.full.fetch_add(1, Ordering::SeqCst),
                    _ => shop.other.fetch_add(1, Ordering::SeqCst),
                };
                sleep(Duration::from_millis(2)).await;
            }
        }
    }
}

fn saturate(shops: &[Arc<Shop>], which: &[usize]) {
    for (i, s) in shops.iter().enumerate() {
        let w = if which.contains(&i) { usize::MAX } else { 0 };
        s.workers.store(w, Ordering::SeqCst);
    }
}

fn sum(shops: &[Arc<Shop>], f: impl Fn(&Shop) -> u64) -> u64 {
    shops.iter().map(|s| f(s)).sum()
}

/// Waits until `done` holds (a watchdog, not a measurement); answers how long it took.
async fn until(what: &str, done: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < WATCHDOG, "watchdog: never {what}");
        sleep(Duration::from_millis(2)).await;
    }
    start.elapsed()
}

/// Load for `d`; answers (calls served, refused full, failed otherwise) in it.
async fn phase(shops: &[Arc<Shop>], d: Duration) -> (u64, u64, u64) {
    let before = (
        sum(shops, |s| s.ok.load(Ordering::SeqCst)),
        sum(shops, |s| s.full.load(Ordering::SeqCst)),
        sum(shops, |s| s.other.load(Ordering::SeqCst)),
    );
    sleep(d).await;
    (
        sum(shops, |s| s.ok.load(Ordering::SeqCst)) - before.0,
        sum(shops, |s| s.full.load(Ordering::SeqCst)) - before.1,
        sum(shops, |s| s.other.load(Ordering::SeqCst)) - before.2,
    )
}

fn longest_call(shops: &[Arc<Shop>]) -> Duration {
    Duration::from_micros(
        shops
            .iter()
            .map(|s| s.longest_us.load(Ordering::SeqCst))
            .max()
            .unwrap_or(0),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_instances_never_exceed_the_cap_and_the_cap_follows_demand() {
    let Some(server) =
        RedisServer::start("five_instances_never_exceed_the_cap_and_the_cap_follows_demand")
    else {
        return;
    };
    let supplier = Supplier::start(WORK).await;
    let xs = shops(&server.url(), 5, &supplier, config(8));
    saturate(&xs, &[0, 1, 2, 3, 4]);
    until("all of the cap handed out", || {
        xs.iter().map(|s| s.allotment()).sum::<usize>() == 8
    })
    .await;
    let started = Instant::now();
    let (ok, full, other) = phase(&xs, Duration::from_secs(3)).await;
    let used = ok as f64 * WORK.as_secs_f64() / (8.0 * started.elapsed().as_secs_f64());
    report(&format!(
        "cap 8, five saturating instances on redis: {ok} calls served, {full} refused full, \
         supplier high-water mark {}, ~{:.0} % of the cap busy",
        supplier.most(),
        used * 100.0
    ));
    assert_eq!(other, 0);

    // All demand on one instance, then on another: the cap follows.
    saturate(&xs, &[0]);
    until("instance 0 holding the cap", || xs[0].allotment() == 8).await;
    saturate(&xs, &[1]);
    let moved = until("instance 1 holding the cap", || xs[1].allotment() == 8).await;
    // Instance 1 dies (no more renewals): its share returns after its TTL.
    drop(xs[1].capped.lock().unwrap().take());
    saturate(&xs, &[2]);
    let returned = until("instance 2 holding the cap", || xs[2].allotment() == 8).await;
    report(&format!(
        "demand moved: served at the new instance after {moved:?}; a dropped holder's \
         share back after {returned:?} (T {T:?}, TTL {TTL:?})"
    ));
    assert!(supplier.most() <= 8, "supplier saw {}", supplier.most());
    assert_eq!(sum(&xs, |s| s.other.load(Ordering::SeqCst)), 0);
}

/// Demand moved from instance to instance, six times: each time the new holder
/// is served (under a watchdog) and at no sample do the allotments, nor ever the
/// supplier's concurrency, exceed the cap. How long each move took, and how many
/// claims went out early on the store's word that slots were freed, are reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demand_moved_between_instances_is_served_and_the_cap_holds() {
    let Some(server) =
        RedisServer::start("demand_moved_between_instances_is_served_and_the_cap_holds")
    else {
        return;
    };
    let supplier = Supplier::start(WORK).await;
    let xs = shops(&server.url(), 3, &supplier, config(8));
    saturate(&xs, &[0]);
    until("instance 0 holding the cap", || xs[0].allotment() == 8).await;
    let mut took = Vec::new();
    for round in 0..6 {
        let to = (round + 1) % 3;
        saturate(&xs, &[to]);
        let start = Instant::now();
        loop {
            let allotted: usize = xs.iter().map(|s| s.allotment()).sum();
            assert!(
                allotted <= 8,
                "round {round}: allotments summed to {allotted}"
            );
            if xs[to].allotment() == 8 {
                break;
            }
            assert!(
                start.elapsed() < WATCHDOG,
                "watchdog: round {round} never served"
            );
            sleep(Duration::from_millis(2)).await;
        }
        took.push(start.elapsed());
    }
    let early: u64 = sum(&xs, |s| {
        s.capped
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, |c| c.snapshot().early_claims)
    });
    report(&format!(
        "demand moved six times on redis: served at the new holder after {took:?} \
         ({early} early claims; T {T:?}, longest call {LONGEST:?})"
    ));
    assert!(supplier.most() <= 8, "supplier saw {}", supplier.most());
    assert_eq!(sum(&xs, |s| s.other.load(Ordering::SeqCst)), 0);
}

/// Kill, SIGSTOP and FLUSHALL under load, in strict mode: the supplier never
/// sees more than the cap, and no call fails because of the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_never_exceeds_the_cap_when_redis_is_killed_paused_or_flushed() {
    let Some(mut server) =
        RedisServer::start("strict_never_exceeds_the_cap_when_redis_is_killed_paused_or_flushed")
    else {
        return;
    };
    let supplier = Supplier::start(WORK).await;
    let xs = shops(&server.url(), 3, &supplier, config(6));
    saturate(&xs, &[0, 1, 2]);
    let handed_out = || xs.iter().map(|s| s.allotment()).sum::<usize>() == 6;
    until("all of the cap handed out", handed_out).await;

    server.kill();
    let killed = phase(&xs, Duration::from_millis(1500)).await;
    server.restart();
    let rejoined = until("the cap handed out again", handed_out).await;
    server.pause();
    let paused = phase(&xs, Duration::from_millis(1500)).await;
    server.resume();
    until("the cap handed out again", handed_out).await;
    assert_eq!(server.command("FLUSHALL").unwrap(), "+OK");
    let flushed = phase(&xs, Duration::from_millis(1500)).await;
    until("the cap handed out again", handed_out).await;

    for (what, (ok, full, other)) in [("killed", killed), ("paused", paused), ("flushed", flushed)]
    {
        report(&format!(
            "strict, redis {what}: {ok} calls served, {full} refused full, {other} failed \
             because of the store"
        ));
    }
    report(&format!(
        "strict drills: supplier high-water mark {} (cap 6), back to the full cap {rejoined:?} \
         after a restart, longest call {:?}, {} abandoned at the supplier",
        supplier.most(),
        longest_call(&xs),
        supplier.abandoned()
    ));
    assert!(supplier.most() <= 6, "supplier saw {}", supplier.most());
    assert_eq!(sum(&xs, |s| s.other.load(Ordering::SeqCst)), 0);
    // Calls went on under the leases still held, then were refused at once.
    assert!(killed.0 + killed.1 > 0 && paused.0 + paused.1 > 0);
}

/// The same drills in available mode: calls go on without the store, and the
/// supplier sees at most the cap plus the cut-off instances' local shares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn available_overshoot_stays_within_the_documented_bound() {
    let Some(mut server) =
        RedisServer::start("available_overshoot_stays_within_the_documented_bound")
    else {
        return;
    };
    let supplier = Supplier::start(WORK).await;
    let share = 3;
    let xs = shops(
        &server.url(),
        3,
        &supplier,
        config(6).mode(CapMode::Available { local_share: share }),
    );
    saturate(&xs, &[0, 1, 2]);
    let handed_out = || xs.iter().map(|s| s.allotment()).sum::<usize>() == 6;
    until("all of the cap handed out", handed_out).await;
    let healthy = supplier.most();
    let bound = 6 + 3 * share as usize;
    let mut marks = Vec::new();
    let lapses = |xs: &[Arc<Shop>]| {
        sum(xs, |s| {
            s.capped
                .lock()
                .unwrap()
                .as_ref()
                .map_or(0, |c| c.snapshot().lapses)
        })
    };
    for fault in ["killed", "paused", "flushed"] {
        let lapsed_before = lapses(&xs);
        // Calls admitted under shares given back end first (bounded by LONGEST).
        let _ = phase(&xs, LONGEST).await;
        supplier.reset_most();
        match fault {
            "killed" => server.kill(),
            "paused" => server.pause(),
            _ => assert_eq!(server.command("FLUSHALL").unwrap(), "+OK"),
        }
        let (ok, full, other) = phase(&xs, Duration::from_millis(1500)).await;
        match fault {
            "killed" => server.restart(),
            "paused" => server.resume(),
            _ => {}
        }
        until("the cap handed out again", handed_out).await;
        report(&format!(
            "available, redis {fault}: {ok} calls served, {full} refused full, {other} failed \
             because of the store, {} leases lapsed, supplier high-water mark {} (cap 6, bound {bound})",
            lapses(&xs) - lapsed_before,
            supplier.most()
        ));
        marks.push(supplier.most());
        assert!(ok > 0, "calls went on without the store");
        assert!(
            supplier.most() <= bound,
            "{fault}: supplier saw {}",
            supplier.most()
        );
    }
    assert!(healthy <= 6, "healthy: supplier saw {healthy}");
    assert_eq!(sum(&xs, |s| s.other.load(Ordering::SeqCst)), 0);
    report(&format!(
        "available: high-water marks {marks:?} with the store killed, paused, flushed"
    ));
}

/// The supplier stops work on a request whose client gave up (its connection
/// closed), so abandoned calls leave its count instead of inflating it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supplier_stops_work_when_its_client_gives_up() {
    let supplier = Supplier::start(Duration::from_secs(30)).await;
    let call = tokio::spawn(client(supplier.addr, WATCHDOG).oneshot(()));
    until("the request reached the supplier", || {
        supplier.in_flight() == 1
    })
    .await;
    // The caller gives up: its future is dropped, and its connection with it.
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    until("the supplier stopped the abandoned request", || {
        supplier.in_flight() == 0 && supplier.abandoned() == 1
    })
    .await;
    assert_eq!(supplier.served(), 0);
    assert_eq!(supplier.most(), 1);
}

/// The default mode (the cap divided by the instances last known) through a
/// Redis killed and left dead: calls go on at each instance's share, the fleet
/// stays within the cap once the calls admitted under the leases ended, an
/// instance started during the outage admits its floor, and the cap is handed
/// out again once Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_mode_keeps_serving_through_a_redis_outage() {
    let Some(mut server) =
        RedisServer::start("the_default_mode_keeps_serving_through_a_redis_outage")
    else {
        return;
    };
    let supplier = Supplier::start(WORK).await;
    let default = config(6).mode(CapMode::default());
    let mut xs = shops(&server.url(), 3, &supplier, default);
    saturate(&xs, &[0, 1, 2]);
    let handed_out = |xs: &[Arc<Shop>]| xs.iter().map(|s| s.allotment()).sum::<usize>() == 6;
    until("all of the cap handed out", || handed_out(&xs)).await;

    server.kill();
    let lapsed = |s: &Shop| {
        s.capped
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|c| c.snapshot().lapses > 0)
    };
    until("every lease lapsed", || xs.iter().all(|s| lapsed(s))).await;
    // Calls admitted under the leases end within LONGEST; from then on the
    // whole fleet, cut off, admits N × ⌊G/N⌋ ≤ G.
    sleep(LONGEST).await;
    supplier.reset_most();
    let shares: Vec<usize> = xs.iter().map(|s| s.allotment()).collect();
    let (ok, full, other) = phase(&xs, Duration::from_millis(1500)).await;
    let cut_off = supplier.most();
    report(&format!(
        "default mode, redis killed: shares {shares:?}, {ok} calls served, {full} refused \
         full, {other} failed because of the store, supplier high-water mark {cut_off} (cap 6)"
    ));
    assert!(ok > 0, "no call served while the store was away");
    assert!(shares.iter().all(|s| *s >= 1), "{shares:?}");
    assert!(shares.iter().sum::<usize>() <= 6, "{shares:?}");
    assert!(cut_off <= 6, "supplier saw {cut_off}");

    // A lull while cut off: without a lease the ceiling is the mode's, not a
    // period's demand (lowered to a lull's, it could not rise again).
    saturate(&xs, &[]);
    sleep(T * 5).await;
    let idle: Vec<usize> = xs.iter().map(|s| s.allotment()).collect();
    assert_eq!(idle, shares, "the shares fell during a lull");
    saturate(&xs, &[0, 1, 2]);

    // An instance started while the store is down admits its floor, 1.
    let late = numbered_shops(&server.url(), 3..4, &supplier, default);
    late[0].workers.store(usize::MAX, Ordering::SeqCst);
    until("the newcomer admits its floor", || late[0].allotment() == 1).await;
    xs.extend(late);
    let (ok, _, _) = phase(&xs, Duration::from_millis(1000)).await;
    assert!(ok > 0);
    assert!(supplier.most() <= 7, "supplier saw {}", supplier.most());

    server.restart();
    until("the cap handed out again", || handed_out(&xs)).await;
    assert_eq!(sum(&xs, |s| s.other.load(Ordering::SeqCst)), 0);
}
