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
//! ```text
//! cargo run --release -p seawall-fleet --features redis --example cap_scale
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use seawall_fleet::{CapKeys, CapStore, Claim, ClaimReply, InstanceId, RedisStore, StoreError};
use seawall_test_support::RedisServer;

/// Claims outlive the run: the measure is of renewals, not of lapses.
const TTL: Duration = Duration::from_secs(600);
/// `CapConfig`'s default renewal period.
const PERIOD: Duration = Duration::from_secs(1);
/// Claims in flight at once (the store's one connection pipelines them).
const IN_FLIGHT: usize = 64;

/// `(calls, µs)` of the `EVALSHA` command since the last `CONFIG RESETSTAT`.
async fn evalsha(con: &mut MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or("cmdstat_evalsha:calls=0,usec=0");
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

#[tokio::main(flavor = "current_thread")]
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
