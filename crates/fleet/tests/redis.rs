//! `RedisStore` on a real `redis-server` (one per test, started by the test), in
//! real time. Every assertion is an invariant that holds however loaded the
//! machine is; the deadlines are watchdogs, never measurements.
//!
//! Without `redis-server` on PATH each test writes one line saying it did not
//! run, unless `SEAWALL_REQUIRE_REDIS=1` (set by CI) makes that a failure.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use seawall_circuit_breaker::{CircuitBreakerConfig, State, TripPolicy};
use seawall_fleet::{Fleet, Keys, LeaseReply, LeaseRequest, LeaseStatus, RedisStore, Store, Token};
use support::redis_server::RedisServer;
use support::{instance, load, most_overlapping, total, Dependency, Instance, Tally};
use tokio::time::{timeout, Instant};

/// How long any wait that must end may take before the test gives up.
const WATCHDOG: Duration = Duration::from_secs(60);
/// Each instance's call rhythm.
const PERIOD: Duration = Duration::from_millis(20);

/// Trips on 3 failures, opens for 1 s; a probe may run 2 s, far beyond the
/// dependency's latency, so only a stall of seconds could stretch one past it.
fn breaker() -> CircuitBreakerConfig {
    CircuitBreakerConfig {
        policy: TripPolicy::ConsecutiveFailures { threshold: 3 },
        open_for: Duration::from_secs(1),
        half_open_timeout: Duration::from_secs(2),
        ..CircuitBreakerConfig::default()
    }
}

/// A fleet of its own (its own connection) for instance `i`, as a process of its own would have.
fn fleet(url: &str, i: usize) -> Fleet<RedisStore> {
    Fleet::builder(RedisStore::new(url).unwrap())
        .prefix("drill")
        // Generous, so a loaded machine does not look like a store outage.
        .store_timeout(Duration::from_secs(2))
        .probe_window(Duration::from_millis(500))
        .reconnect(Duration::from_millis(200), Duration::from_secs(1))
        .ramp(None)
        .seed(7 + i as u64)
        .build()
        .unwrap()
}

fn instances(
    url: &str,
    n: usize,
    dep: &Arc<Dependency>,
    config: &CircuitBreakerConfig,
) -> Vec<Instance> {
    (0..n)
        .map(|i| instance(i, dep, Some(&fleet(url, i)), config.clone()))
        .collect()
}

/// Keeps the load on, in short rounds, until `done` holds (or the watchdog fires).
async fn load_until(instances: &[Instance], what: &str, done: impl Fn(&[Instance]) -> bool) {
    let deadline = Instant::now() + WATCHDOG;
    while !done(instances) {
        assert!(Instant::now() < deadline, "watchdog: never {what}");
        load(instances, PERIOD, Duration::from_millis(100)).await;
    }
}

fn all_in(state: State) -> impl Fn(&[Instance]) -> bool {
    move |xs| xs.iter().all(|x| x.state() == state)
}

fn all_connected(yes: bool) -> impl Fn(&[Instance]) -> bool {
    move |xs| {
        xs.iter()
            .all(|x| x.coordinated.as_ref().unwrap().snapshot().connected == yes)
    }
}

fn calls(t: Tally) -> u64 {
    t.ok + t.dependency_errors + t.open + t.other
}

fn probes(instances: &[Instance]) -> u64 {
    instances
        .iter()
        .map(|x| x.handle.snapshot().counters)
        .map(|c| c.probe_successes + c.probe_failures)
        .sum()
}

fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_keeps_the_contract() {
    let Some(server) = RedisServer::start("redis_store_keeps_the_contract") else {
        return;
    };
    let store = RedisStore::new(&server.url()).unwrap();
    support::contract::all(&store, "contract").await;
    support::contract::cap_claims(&store, "contract").await;
    support::contract::an_abandoned_claim_changes_nothing(&store, "contract").await;
    support::contract::freed_slots_are_pushed(&store, "contract").await;
}

#[test]
fn bad_input_is_refused_at_build_naming_the_field() {
    for url in [
        "",
        "not a url",
        "http://127.0.0.1/",
        "redis://127.0.0.1:notaport/",
    ] {
        assert_eq!(RedisStore::new(url).unwrap_err().field(), "url", "{url:?}");
    }
    let store = RedisStore::new("redis://127.0.0.1:1/").unwrap();
    for prefix in ["", "a b", "{x}"] {
        let err = Fleet::builder(store.clone())
            .prefix(prefix)
            .build()
            .unwrap_err();
        assert_eq!(err.field(), "prefix");
    }
}

/// Down at start: the build succeeds, operations fail as store errors, the
/// instance keeps its local breaker, and it joins once the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_built_while_redis_is_down_joins_when_it_answers() {
    let Some(mut server) =
        RedisServer::start("a_store_built_while_redis_is_down_joins_when_it_answers")
    else {
        return;
    };
    server.kill();
    let store = RedisStore::new(&server.url()).unwrap();
    let k = Keys::new("late", "freight").unwrap();
    let read = timeout(WATCHDOG, store.read_verdict(&k))
        .await
        .expect("watchdog");
    assert!(read.is_err(), "read from a server that is down: {read:?}");

    let dep = Dependency::new(Duration::from_millis(5));
    dep.fail(true);
    let fleet = fleet(&server.url(), 0);
    let xs = vec![instance(0, &dep, Some(&fleet), breaker())];
    load_until(&xs, "fell back to local mode", all_connected(false)).await;
    load_until(&xs, "tripped on its own", all_in(State::Open)).await;
    server.restart();
    load_until(&xs, "joined", all_connected(true)).await;
    let t = total(&xs);
    assert_eq!(t.other, 0, "a call failed because of the store: {t:?}");
    // The store the instance did not connect at start works now.
    let reply = store
        .take_lease(
            &k,
            LeaseRequest::new(Token(1), Duration::from_secs(60), Default::default()),
        )
        .await
        .unwrap();
    assert!(matches!(reply, LeaseReply::Taken { .. }));
}

/// Five instances, one server, the dependency down then up: never two probes
/// at once, and every instance closes once a probe succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_instances_probe_one_at_a_time_and_all_close() {
    let Some(server) = RedisServer::start("five_instances_probe_one_at_a_time_and_all_close")
    else {
        return;
    };
    let dep = Dependency::new(Duration::from_millis(20));
    dep.fail(true);
    let xs = instances(&server.url(), 5, &dep, &breaker());
    load_until(&xs, "connected", all_connected(true)).await;
    load_until(&xs, "all open", all_in(State::Open)).await;
    // A few open intervals of failed probes, then the dependency recovers.
    load(&xs, PERIOD, Duration::from_secs(4)).await;
    let failed_probes = probes(&xs);
    dep.fail(false);
    load_until(&xs, "all closed", all_in(State::Closed)).await;
    let t = total(&xs);
    let recorded = dep.probes();
    report(&format!(
        "five instances: {} calls, {failed_probes} probes while down, {} probes in all, most at once {}",
        calls(t),
        recorded.len(),
        most_overlapping(&recorded),
    ));
    assert_eq!(t.other, 0, "a call failed because of the store: {t:?}");
    assert!(!recorded.is_empty());
    assert_eq!(dep.max_probes_in_flight(), 1);
    assert_eq!(most_overlapping(&recorded), 1);
    let mut applied = 0;
    for x in &xs {
        let s = x.coordinated.as_ref().unwrap().snapshot();
        assert_eq!(s.store_errors, 0, "{s:?}");
        applied += s.verdicts_applied;
    }
    // Other instances acted on the holders' verdicts (pushed or read) instead of
    // each probing for itself.
    assert!(applied > 0);
}

/// Something that happens to the server, for a while, and how it ends.
struct Outage {
    what: &'static str,
    lasts: Duration,
    begin: fn(&mut RedisServer),
    end: fn(&mut RedisServer),
}

impl Outage {
    /// Three instances open on a failing dependency when the outage begins; they
    /// fall back to their own breakers, keep serving through it, rejoin when it
    /// ends, and close once the dependency heals. No call fails because of the store.
    async fn mid_incident(&self, server: &mut RedisServer) {
        let dep = Dependency::new(Duration::from_millis(20));
        dep.fail(true);
        let xs = instances(&server.url(), 3, &dep, &breaker());
        load_until(&xs, "connected", all_connected(true)).await;
        load_until(&xs, "all open", all_in(State::Open)).await;

        let before = total(&xs);
        (self.begin)(server);
        load_until(&xs, "fell back to local mode", all_connected(false)).await;
        load(&xs, PERIOD, self.lasts).await;
        let during = total(&xs);
        (self.end)(server);
        load_until(&xs, "rejoined", all_connected(true)).await;
        dep.fail(false);
        load_until(&xs, "all closed", all_in(State::Closed)).await;

        let t = total(&xs);
        report(&format!(
            "redis {}: {} calls during the outage, {} failed because of the store; {} calls in all",
            self.what,
            calls(during) - calls(before),
            during.other - before.other,
            calls(t),
        ));
        assert_eq!(t.other, 0, "a call failed because of the store: {t:?}");
        assert!(calls(during) > calls(before));
    }
}

/// Redis killed mid-incident: no call fails because of it, every instance falls
/// back to its own breaker, and all rejoin once it is back on the same port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_incident_fails_no_call_and_the_fleet_rejoins() {
    let Some(mut server) =
        RedisServer::start("redis_killed_mid_incident_fails_no_call_and_the_fleet_rejoins")
    else {
        return;
    };
    // Some intervals in local mode: each breaker probes on its own.
    let outage = Outage {
        what: "killed",
        lasts: Duration::from_secs(3),
        begin: RedisServer::kill,
        end: RedisServer::restart,
    };
    outage.mid_incident(&mut server).await;
}

/// `FLUSHALL` while a probe runs under a lease: the store may grant a second
/// lease, and the documented bound holds: at most two probes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_during_a_lease_overlaps_at_most_two_probes() {
    let Some(server) = RedisServer::start("a_flush_during_a_lease_overlaps_at_most_two_probes")
    else {
        return;
    };
    // Slow probes, so the flush lands while one runs.
    let dep = Dependency::new(Duration::from_millis(800));
    dep.fail(true);
    let config = CircuitBreakerConfig {
        half_open_timeout: Duration::from_secs(3),
        ..breaker()
    };
    let xs = instances(&server.url(), 3, &dep, &config);
    load_until(&xs, "connected", all_connected(true)).await;
    load_until(&xs, "all open", all_in(State::Open)).await;
    load_until(&xs, "a probe in flight", |_| dep.probes_in_flight() > 0).await;
    let before = total(&xs);
    assert_eq!(server.command("FLUSHALL").unwrap(), "+OK");
    // Beyond two lease TTLs (3.5 s each).
    load(&xs, PERIOD, Duration::from_secs(8)).await;
    let during = total(&xs);
    dep.fail(false);
    load_until(&xs, "all closed", all_in(State::Closed)).await;

    let t = total(&xs);
    let recorded = dep.probes();
    report(&format!(
        "flushall: {} calls after the flush, {} failed because of the store; most probes at once {}",
        calls(during) - calls(before),
        during.other - before.other,
        most_overlapping(&recorded),
    ));
    assert_eq!(t.other, 0, "a call failed because of the store: {t:?}");
    assert!(dep.max_probes_in_flight() <= 2);
    assert!(most_overlapping(&recorded) <= 2);
}

/// The lease holder's instance is dropped mid-probe: another instance probes once
/// its lease has run out, and never two probe at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_dropped_mid_probe_is_succeeded_after_its_ttl_never_alongside() {
    let Some(server) =
        RedisServer::start("a_holder_dropped_mid_probe_is_succeeded_after_its_ttl_never_alongside")
    else {
        return;
    };
    let dep = Dependency::new(Duration::from_millis(500));
    dep.fail(true);
    let mut xs = instances(&server.url(), 3, &dep, &breaker());
    load_until(&xs, "connected", all_connected(true)).await;
    load_until(&xs, "all open", all_in(State::Open)).await;
    let holding = |xs: &[Instance]| {
        xs.iter().position(|x| {
            matches!(
                x.coordinated.as_ref().unwrap().snapshot().lease,
                LeaseStatus::Holding { .. }
            )
        })
    };
    load_until(&xs, "a probe in flight under a lease", |xs| {
        dep.probes_in_flight() > 0 && holding(xs).is_some()
    })
    .await;
    let holder = holding(&xs).unwrap();
    // `instance(i, ..)` numbered them by position; the others keep their numbers.
    drop(xs.remove(holder));
    load_until(&xs, "another instance probed", |_| {
        dep.probes().iter().any(|p| p.instance != holder)
    })
    .await;
    let t = total(&xs);
    let recorded = dep.probes();
    report(&format!(
        "holder dropped: {} probes, most at once {}",
        recorded.len(),
        most_overlapping(&recorded)
    ));
    assert_eq!(t.other, 0, "a call failed because of the store: {t:?}");
    assert_eq!(dep.max_probes_in_flight(), 1);
    assert_eq!(most_overlapping(&recorded), 1);
}

/// Redis frozen (SIGSTOP) mid-incident, then thawed: a partition whose queued
/// writes are applied late. No call fails because of it, and the fleet rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_then_resumed_fails_no_call_and_the_fleet_rejoins() {
    let Some(mut server) =
        RedisServer::start("redis_paused_then_resumed_fails_no_call_and_the_fleet_rejoins")
    else {
        return;
    };
    let outage = Outage {
        what: "paused",
        lasts: Duration::from_secs(2),
        begin: |server| server.pause(),
        end: |server| server.resume(),
    };
    outage.mid_incident(&mut server).await;
}

/// Values the store did not write (another program, an older layout) come back
/// as store errors, never as a panic or a made-up lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_values_are_store_errors_not_panics() {
    let Some(server) = RedisServer::start("foreign_values_are_store_errors_not_panics") else {
        return;
    };
    let store = RedisStore::new(&server.url()).unwrap();
    let k = Keys::new("foreign", "freight").unwrap();
    let request = LeaseRequest::new(Token(1), Duration::from_secs(60), Default::default());
    let set = |key: &str, value: &str| {
        assert_eq!(
            server.command(&format!("SET {key} {value}")).unwrap(),
            "+OK"
        );
    };
    set(k.lease(), "garbage");
    assert!(store.take_lease(&k, request).await.is_err());
    set(k.lease(), "someone:notanumber");
    assert!(store.take_lease(&k, request).await.is_err());
    assert_eq!(server.command(&format!("DEL {}", k.lease())).unwrap(), ":1");
    set(k.epoch(), "notanumber");
    assert!(store.take_lease(&k, request).await.is_err());
    set(k.verdict(), "7:X");
    assert!(store.read_verdict(&k).await.is_err());
    // Put right, it works again.
    set(k.epoch(), "7");
    assert!(matches!(
        store.take_lease(&k, request).await.unwrap(),
        LeaseReply::Taken { epoch } if epoch.0 == 8
    ));
}

/// The fleet trip on a real server: one instance's trip opens nobody else; a
/// second one's opens the third, which saw no failure of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_trips_open_a_third_instance_that_saw_no_failure() {
    let Some(server) = RedisServer::start("two_trips_open_a_third_instance_that_saw_no_failure")
    else {
        return;
    };
    let deps: Vec<_> = (0..3)
        .map(|_| Dependency::new(Duration::from_millis(5)))
        .collect();
    let xs: Vec<Instance> = deps
        .iter()
        .enumerate()
        .map(|(i, dep)| {
            let fleet = Fleet::builder(RedisStore::new(&server.url()).unwrap())
                .prefix("trip")
                .store_timeout(Duration::from_secs(2))
                .trip_together(2, Duration::from_secs(600))
                .seed(70 + i as u64)
                .build()
                .unwrap();
            instance(i, dep, Some(&fleet), breaker())
        })
        .collect();
    load_until(&xs, "connected", all_connected(true)).await;
    let snap = |i: usize| xs[i].coordinated.as_ref().unwrap().snapshot();
    deps[0].fail(true);
    load_until(&xs, "instance 0 recorded its trip", |_| {
        snap(0).trips_recorded == 1
    })
    .await;
    // One witness is not enough.
    load(&xs[2..], PERIOD, Duration::from_millis(500)).await;
    assert_eq!(xs[2].state(), State::Closed);
    assert_eq!(snap(2).fleet_trips_applied, 0);
    deps[1].fail(true);
    load_until(&xs, "instance 2 opened with its peers", |xs| {
        xs[2].state() != State::Closed
    })
    .await;
    let s2 = snap(2);
    assert_eq!(
        (s2.fleet_trips_applied, s2.trips_recorded),
        (1, 0),
        "{s2:?}"
    );
    assert_eq!(xs[2].handle.snapshot().counters.failures, 0);
    assert_eq!(total(&xs).other, 0);
}

/// Subscribers of `channel` on the server, by `PUBSUB NUMSUB`.
async fn subscribers_on_server(url: &str, channel: &str) -> i64 {
    let client = ::redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let reply: (String, i64) = ::redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut con)
        .await
        .unwrap();
    reply.1
}

/// Waits (watchdog-bounded) until the server counts `n` subscribers of `channel`.
async fn until_subscribers(url: &str, channel: &str, n: i64) {
    let deadline = Instant::now() + WATCHDOG;
    while subscribers_on_server(url, channel).await != n {
        assert!(
            Instant::now() < deadline,
            "watchdog: never {n} subscribers of {channel}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Dropping the last subscription of a channel (a coordination dropped) ends the
/// server's subscription; one still held keeps it, and a new one gets pushes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_subscriptions_unsubscribe_on_the_server() {
    let Some(server) = RedisServer::start("dropped_subscriptions_unsubscribe_on_the_server") else {
        return;
    };
    let url = server.url();
    let store = RedisStore::new(&url).unwrap();
    let k = Keys::new("unsub", "freight").unwrap();
    let other = Keys::new("unsub", "payments").unwrap();
    let a = store.subscribe(&k).await.unwrap();
    let b = store.subscribe(&k).await.unwrap();
    let kept = store.subscribe(&other).await.unwrap();
    // One connection, one server-side subscription per channel.
    assert_eq!(subscribers_on_server(&url, k.channel()).await, 1);
    drop(a);
    drop(b);
    until_subscribers(&url, k.channel(), 0).await;
    // The other breaker's channel is untouched.
    assert_eq!(subscribers_on_server(&url, other.channel()).await, 1);
    drop(kept);
    until_subscribers(&url, other.channel(), 0).await;

    // Subscribing again works, and hears what is published.
    let mut again = store.subscribe(&k).await.unwrap();
    assert_eq!(subscribers_on_server(&url, k.channel()).await, 1);
    store
        .take_lease(
            &k,
            LeaseRequest::new(Token(9), Duration::from_secs(600), Default::default()),
        )
        .await
        .unwrap();
    store
        .publish_verdict(&k, Token(9), seawall_fleet::ProbeResult::Failed)
        .await
        .unwrap();
    let heard = timeout(WATCHDOG, again.next()).await.expect("watchdog");
    assert!(
        matches!(heard, Some(seawall_fleet::FleetEvent::Verdict(_))),
        "{heard:?}"
    );

    // A coordination dropped leaves no subscription behind.
    drop(again);
    until_subscribers(&url, k.channel(), 0).await;
    let layer = seawall_circuit_breaker::CircuitBreakerLayer::builder("freight")
        .build()
        .unwrap();
    let fleet = Fleet::builder(RedisStore::new(&url).unwrap())
        .prefix("unsub")
        .build()
        .unwrap();
    let coordinated = fleet.coordinate(&layer.handle()).unwrap();
    until_subscribers(&url, k.channel(), 1).await;
    drop(coordinated);
    until_subscribers(&url, k.channel(), 0).await;
}
