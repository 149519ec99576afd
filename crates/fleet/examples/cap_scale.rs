//! What one fleet-wide cap costs Redis as the fleet grows: starts a
//! `redis-server` of its own on a free loopback port, fills one capped
//! bulkhead with N simulated claimants (each an instance id with its own
//! demand), then has every claimant renew a few times through
//! `RedisStore`'s claim, and prints the server's time per claim from
//! `INFO commandstats` (the claim script's `EVALSHA` calls, nothing else runs
//! while it counts). Every claim outlives the run, so the record stays in its
//! first TTL (grants bounded by what each claimant holds): the division is
//! computed all the same, and no claim expires while it counts.
//!
//! Then it runs fleets of real `Fleet::cap` instances (one `Fleet` and one
//! capped bulkhead each, sharing one `RedisStore` connection, at the default
//! renewal and TTL, in strict mode) with calls flowing, and prints the store
//! operations per instance per second, the server's time per claim, Redis's
//! CPU share, the leases that lapsed and the calls refused. In the "fits"
//! rows the fleet's demand (each instance about one call at a time) fits the
//! cap (2 slots per instance): every refusal there is the store's doing. In
//! the "contended" rows the cap is half the demand. In the "moving" row half
//! the instances call, the calling half changing every 3 s, under a cap of
//! half the fleet: slots are freed and claimed all the time, and the pushes
//! per claim show the early-claim herd bounded.
//!
//! ```text
//! cargo run --release -p seawall-fleet --features redis --example cap_scale
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use seawall_bulkhead::BulkheadLayer;
use seawall_core::BoxError;
use seawall_fleet::{
    CapConfig, CapKeys, CapMode, CapStore, Claim, ClaimReply, Fleet, InstanceId, RedisStore,
    StoreError,
};
use seawall_test_support::RedisServer;
use tower::{service_fn, Layer, ServiceExt};

/// Claims outlive the run: the measure is of renewals, not of lapses.
const TTL: Duration = Duration::from_secs(600);
/// `CapConfig`'s default renewal period.
const PERIOD: Duration = Duration::from_secs(1);
/// Claims in flight at once (the store's one connection pipelines them).
const IN_FLIGHT: usize = 64;

/// `(calls, µs)` of the `EVALSHA` command since the last `CONFIG RESETSTAT`.
async fn evalsha(con: &mut MultiplexedConnection) -> (u64, u64) {
    command_stats(con, "evalsha").await
}

/// `(calls, µs)` of `command` (scripts' calls included) since the last
/// `CONFIG RESETSTAT`.
async fn command_stats(con: &mut MultiplexedConnection, command: &str) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
        .unwrap_or("calls=0,usec=0");
    let field = |name: &str| -> u64 {
        line.split([':', ','])
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("calls"), field("usec"))
}

/// One round: every claimant claims once, `IN_FLIGHT` at a time.
async fn round(store: &RedisStore, keys: &CapKeys, n: u32, seq: u64, cap: u32) {
    let mut claims: tokio::task::JoinSet<Result<ClaimReply, StoreError>> =
        tokio::task::JoinSet::new();
    for i in 0..n {
        if claims.len() >= IN_FLIGHT {
            claims.join_next().await.unwrap().unwrap().unwrap();
        }
        // Demands from 0 to 4: some short of their share, some above it.
        let demand = (i.wrapping_mul(2_654_435_761) >> 7) % 5;
        let claim = Claim::new(
            InstanceId(u128::from(i) + 1),
            seq,
            demand,
            demand.min(1),
            TTL,
            cap,
        );
        let (store, keys) = (store.clone(), keys.clone());
        claims.spawn(async move { store.claim(&keys, claim).await });
    }
    while let Some(reply) = claims.join_next().await {
        reply.unwrap().unwrap();
    }
}

/// Redis's CPU seconds so far (system and user).
async fn redis_cpu(con: &mut MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(con)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

/// The supplier: 20 ms a call. (A named `async fn`: a closure returning
/// `BoxError` cannot be called from a spawned task, see the README's
/// known compiler limitation.)
async fn supply((): ()) -> Result<(), BoxError> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(())
}

/// What a fleet of real capped instances did over the measured stretch.
struct FleetRun {
    ops_per_instance_s: f64,
    per_claim_us: f64,
    pushes_per_claim: f64,
    cpu: f64,
    lapses: u64,
    refused: u64,
    served: u64,
}

/// `n` instances capped at `cap` on one Redis, each calling every 100 ms
/// (calls of 20 ms: about one at a time; with `moving`, only every other
/// instance, the calling half changing every 3 s), warmed up for two TTLs,
/// then measured for `measure`.
async fn fleet(
    store: &RedisStore,
    con: &mut MultiplexedConnection,
    n: u32,
    cap: u32,
    moving: bool,
    measure: Duration,
) -> FleetRun {
    let began = tokio::time::Instant::now();
    let served = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let counting = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut instances = Vec::new();
    let mut callers = tokio::task::JoinSet::new();
    let name = format!("fleet{n}x{cap}");
    for i in 0..n {
        let fleet = Fleet::builder(store.clone())
            .prefix("scale")
            .seed(u64::from(i))
            .build()
            .unwrap();
        let layer = BulkheadLayer::builder(name.as_str())
            .max_concurrent(4)
            .max_queue(0)
            .build()
            .unwrap();
        let capped = fleet
            .cap(&layer.handle(), CapConfig::new(cap).mode(CapMode::Strict))
            .unwrap();
        let svc = layer.layer(service_fn(supply));
        let (served, refused, counting) = (
            Arc::clone(&served),
            Arc::clone(&refused),
            Arc::clone(&counting),
        );
        callers.spawn(async move {
            // Spread over the 100 ms.
            tokio::time::sleep(Duration::from_micros(u64::from(i) * 100_000 / u64::from(n))).await;
            let mut every = tokio::time::interval(Duration::from_millis(100));
            loop {
                every.tick().await;
                let half = began.elapsed().as_secs() / 3;
                if moving && (u64::from(i) + half) % 2 == 1 {
                    continue;
                }
                let (svc, served, refused, counting) = (
                    svc.clone(),
                    Arc::clone(&served),
                    Arc::clone(&refused),
                    Arc::clone(&counting),
                );
                tokio::spawn(async move {
                    let ok = svc.oneshot(()).await.is_ok();
                    if counting.load(Ordering::Relaxed) {
                        let tally = if ok { &served } else { &refused };
                        tally.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        instances.push((fleet, capped));
    }
    let warm_up = CapConfig::new(cap).ttl * 2;
    tokio::time::sleep(warm_up).await;
    let snapshot = |instances: &[(Fleet<RedisStore>, seawall_fleet::Capped)]| {
        instances
            .iter()
            .fold((0u64, 0u64), |(ops, lapses), (_, c)| {
                let s = c.snapshot();
                (ops + s.store_ops, lapses + s.lapses)
            })
    };
    let (ops_before, lapses_before) = snapshot(&instances);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(con)
        .await
        .unwrap();
    let cpu_before = redis_cpu(con).await;
    counting.store(true, Ordering::Relaxed);
    let began = std::time::Instant::now();
    tokio::time::sleep(measure).await;
    counting.store(false, Ordering::Relaxed);
    let took = began.elapsed().as_secs_f64();
    let cpu = (redis_cpu(con).await - cpu_before) / took * 100.0;
    let (calls, usec) = evalsha(con).await;
    let (pushes, _) = command_stats(con, "publish").await;
    let (ops, lapses) = snapshot(&instances);
    callers.shutdown().await;
    for (_, capped) in instances {
        capped.shutdown(Duration::from_millis(100)).await;
    }
    FleetRun {
        ops_per_instance_s: (ops - ops_before) as f64 / f64::from(n) / took,
        per_claim_us: usec as f64 / calls.max(1) as f64,
        pushes_per_claim: pushes as f64 / calls.max(1) as f64,
        cpu,
        lapses: lapses - lapses_before,
        refused: refused.load(Ordering::Relaxed),
        served: served.load(Ordering::Relaxed),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(server) = RedisServer::start("cap_scale") else {
        return;
    };
    let url = server.url();
    let store = RedisStore::new(&url).unwrap();
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    println!(
        "| N claimants | claims measured | server µs per claim | one Redis core at the default {} s renewal |",
        PERIOD.as_secs()
    );
    println!("|---:|---:|---:|---:|");
    for n in [10u32, 100, 1_000, 10_000] {
        let keys = CapKeys::new("scale", &format!("n{n}")).unwrap();
        let cap = n;
        // The fleet's claims are in the store before the count starts.
        round(&store, &keys, n, 1, cap).await;
        let rounds = (30_000 / n).clamp(2, 200);
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut con)
            .await
            .unwrap();
        for r in 0..u64::from(rounds) {
            round(&store, &keys, n, r + 2, cap).await;
        }
        let (calls, usec) = evalsha(&mut con).await;
        let per_claim = usec as f64 / calls.max(1) as f64;
        let core = per_claim * f64::from(n) / PERIOD.as_micros() as f64 * 100.0;
        println!(
            "| {n} | {calls} | {per_claim:.1} | {core:.2} % |",
            n = group(u64::from(n)),
            calls = group(calls)
        );
    }

    println!();
    println!("| fleet of real instances | store ops per instance per s | server µs per claim | freed-slot pushes per claim | Redis CPU | lapses | calls refused | calls served |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let measure = Duration::from_secs(10);
    let rows = [
        (100u32, "fits"),
        (100, "contended"),
        (1_000, "fits"),
        (1_000, "contended"),
        (1_000, "moving"),
    ];
    for (n, how) in rows {
        let cap = if how == "fits" { 2 * n } else { n / 2 };
        let run = fleet(&store, &mut con, n, cap, how == "moving", measure).await;
        println!(
            "| N = {n}, G = {cap} ({how}) | {ops:.2} | {us:.1} | {pushes:.2} | {cpu:.1} % | {lapses} | {refused} | {served} |",
            n = group(u64::from(n)),
            cap = group(u64::from(cap)),
            ops = run.ops_per_instance_s,
            us = run.per_claim_us,
            pushes = run.pushes_per_claim,
            cpu = run.cpu,
            lapses = run.lapses,
            refused = group(run.refused),
            served = group(run.served),
        );
    }
}

/// `10000` as `10,000`.
fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
