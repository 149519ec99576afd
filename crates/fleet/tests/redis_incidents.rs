//! The fleet through the Redis incidents an operator meets: a restart, a frozen
//! server, a flush, an eviction policy that is not `noeviction`. Each test starts
//! its own `redis-server` and runs in real time; every assertion is an invariant,
//! the deadlines are watchdogs, never measurements.
//!
//! Without `redis-server` on PATH each test writes one line saying it did not
//! run, unless `SEAWALL_REQUIRE_REDIS=1` (set by CI) makes that a failure.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::time::Duration;

use seawall_bulkhead::BulkheadLayer;
use seawall_circuit_breaker::CircuitBreakerLayer;
use seawall_fleet::{CapConfig, CapKeys, Fleet, Keys, RedisStore};
use support::redis_server::RedisServer;
use tokio::time::{sleep, Instant};

/// How long any wait that must end may take before the test gives up.
const WATCHDOG: Duration = Duration::from_secs(30);

fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Waits until `done` answers true (a watchdog, not a measurement).
async fn until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WATCHDOG;
    while !done().await {
        assert!(Instant::now() < deadline, "watchdog: never {what}");
        sleep(Duration::from_millis(20)).await;
    }
}

/// One command on a connection of the test's own; `None` while the server does
/// not answer.
async fn query<T: ::redis::FromRedisValue>(url: &str, cmd: &::redis::Cmd) -> Option<T> {
    let client = ::redis::Client::open(url).ok()?;
    let connect = client.get_multiplexed_async_connection();
    let mut con = tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .ok()?
        .ok()?;
    tokio::time::timeout(Duration::from_secs(2), cmd.query_async(&mut con))
        .await
        .ok()?
        .ok()
}

/// Subscribers of `channel` on the server (`PUBSUB NUMSUB`); `-1` while it does
/// not answer.
async fn numsub(url: &str, channel: &str) -> i64 {
    let mut cmd = ::redis::cmd("PUBSUB");
    cmd.arg("NUMSUB").arg(channel);
    query::<(String, i64)>(url, &cmd).await.map_or(-1, |r| r.1)
}

fn fleet(url: &str) -> Fleet<RedisStore> {
    Fleet::builder(RedisStore::new(url).unwrap())
        .prefix("incident")
        .store_timeout(Duration::from_millis(500))
        .reconnect(Duration::from_millis(100), Duration::from_millis(500))
        .health_every(Duration::from_millis(200))
        .build()
        .unwrap()
}

/// After Redis restarts, the server sees the instance's subscriptions again:
/// the breaker's verdicts and the cap's freed slots. An idle breaker reports
/// the dead server meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_restored_after_redis_restarts() {
    let Some(mut server) = RedisServer::start("subscriptions_are_restored_after_redis_restarts")
    else {
        return;
    };
    let url = server.url();
    let fleet = fleet(&url);
    let breaker = CircuitBreakerLayer::builder("freight").build().unwrap();
    let coordinated = fleet.coordinate(&breaker.handle()).unwrap();
    let bulkhead = BulkheadLayer::builder("freight")
        .max_concurrent(4)
        .build()
        .unwrap();
    let config = CapConfig::new(4)
        .renew_every(Duration::from_millis(100))
        .ttl(Duration::from_millis(500));
    let capped = fleet.cap(&bulkhead.handle(), config).unwrap();
    let verdicts = Keys::new("incident", "freight").unwrap();
    let freed = CapKeys::new("incident", "freight").unwrap();
    let both = |n: i64| {
        let url = url.clone();
        let (v, f) = (verdicts.channel().to_owned(), freed.freed().to_owned());
        move || {
            let (url, v, f) = (url.clone(), v.clone(), f.clone());
            async move { numsub(&url, &v).await == n && numsub(&url, &f).await == n }
        }
    };
    until("subscribed before the restart", both(1)).await;
    let before = (
        numsub(&url, verdicts.channel()).await,
        numsub(&url, freed.freed()).await,
    );

    server.kill();
    until("the idle breaker reports the dead server", || async {
        !coordinated.snapshot().connected
    })
    .await;
    assert!(coordinated.snapshot().store_errors > 0);
    server.restart();
    until("resubscribed after the restart", both(1)).await;
    until("coordinating again", || async {
        coordinated.snapshot().connected
    })
    .await;
    let after = (
        numsub(&url, verdicts.channel()).await,
        numsub(&url, freed.freed()).await,
    );
    report(&format!(
        "restart: NUMSUB (verdicts, freed) {before:?} before, {after:?} after; {:?}; cap {:?}",
        coordinated.snapshot(),
        capped.snapshot().store_errors
    ));
    assert_eq!(after, (1, 1));
}

/// A frozen server (SIGSTOP: connections stay open, nothing answers) is
/// reported by an idle breaker through its health checks, and it rejoins once
/// the server answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_breaker_reports_a_frozen_redis_and_rejoins() {
    let Some(server) = RedisServer::start("an_idle_breaker_reports_a_frozen_redis_and_rejoins")
    else {
        return;
    };
    let fleet = fleet(&server.url());
    let breaker = CircuitBreakerLayer::builder("freight").build().unwrap();
    let coordinated = fleet.coordinate(&breaker.handle()).unwrap();
    until("connected", || async { coordinated.snapshot().connected }).await;
    let errors = coordinated.snapshot().store_errors;

    server.pause();
    until("the idle breaker reports the frozen server", || async {
        !coordinated.snapshot().connected
    })
    .await;
    let down = coordinated.snapshot();
    server.resume();
    assert!(down.store_errors > errors, "{down:?}");
    assert!(down.health_checks > 0, "{down:?}");
    until("coordinating again", || async {
        coordinated.snapshot().connected
    })
    .await;
}
