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
use seawall_circuit_breaker::{CircuitBreakerLayer, State};
use seawall_core::BoxError;
use seawall_fleet::{
    ActionKind, CapConfig, CapKeys, CapStore, Capped, Claim, Fleet, FleetAction, FleetEpoch,
    FleetSecret, InstanceId, Keys, LeaseReply, LeaseRequest, LeaseStatus, ProbeResult, RedisStore,
    Store, Token, TripRecord,
};
use support::redis_server::RedisServer;
use support::watch::{query, until};
use tokio::time::sleep;
use tower::{service_fn, Layer, Service, ServiceExt};

fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Subscribers of `channel` on the server (`PUBSUB NUMSUB`); `-1` while it does
/// not answer.
async fn numsub(url: &str, channel: &str) -> i64 {
    let mut cmd = ::redis::cmd("PUBSUB");
    cmd.arg("NUMSUB").arg(channel);
    query::<(String, i64)>(url, &cmd).await.map_or(-1, |r| r.1)
}

/// The cap keys of `freight` under the tests' prefix.
fn freight_keys() -> CapKeys {
    CapKeys::new("incident", "freight").unwrap()
}

/// A freight bulkhead of 8 capped at 6 fleet-wide through `fleet`, renewed every
/// 100 ms; the layer is returned to keep it alive.
fn capped_freight(fleet: &Fleet<RedisStore>) -> (BulkheadLayer, Capped) {
    let bulkhead = BulkheadLayer::builder("freight")
        .max_concurrent(8)
        .build()
        .unwrap();
    let config = CapConfig::new(6)
        .renew_every(Duration::from_millis(100))
        .ttl(Duration::from_millis(500));
    let capped = fleet.cap(&bulkhead.handle(), config).unwrap();
    (bulkhead, capped)
}

/// Flushes `server`, lets `capped` renew a few times, and gives the cap the
/// store then keeps for freight (what the instance gave back to it).
async fn after_flush(server: &RedisServer, capped: &Capped) -> Option<u32> {
    assert_eq!(server.command("FLUSHALL").unwrap(), "+OK");
    let renewals = capped.snapshot().renewals;
    until("a few renewals after the flush", || async {
        capped.snapshot().renewals > renewals + 3
    })
    .await;
    let mut cmd = ::redis::cmd("HGET");
    cmd.arg(freight_keys().claims()).arg("g");
    query::<Option<u32>>(&server.url(), &cmd).await.flatten()
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
    // The cap listens on its instance's own channel of freed slots.
    let freed = CapKeys::new("incident", "freight")
        .unwrap()
        .freed_for(capped.snapshot().instance);
    let both = |n: i64| {
        let url = url.clone();
        let (v, f) = (verdicts.channel().to_owned(), freed.clone());
        move || {
            let (url, v, f) = (url.clone(), v.clone(), f.clone());
            async move { numsub(&url, &v).await == n && numsub(&url, &f).await == n }
        }
    };
    until("subscribed before the restart", both(1)).await;
    let before = (
        numsub(&url, verdicts.channel()).await,
        numsub(&url, &freed).await,
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
        numsub(&url, &freed).await,
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

async fn pttl(url: &str, key: &str) -> i64 {
    let mut cmd = ::redis::cmd("PTTL");
    cmd.arg(key);
    query(url, &cmd).await.unwrap()
}

/// Every key the fleet writes has a TTL (no key of an old prefix lives
/// forever), and using a key refreshes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_expires_and_use_refreshes_it() {
    let Some(server) = RedisServer::start("every_key_expires_and_use_refreshes_it") else {
        return;
    };
    let url = server.url();
    let key_ttl = Duration::from_secs(600);
    let store = RedisStore::builder(&url).key_ttl(key_ttl).build().unwrap();
    let k = Keys::new("ttl", "freight").unwrap();
    let request = LeaseRequest::new(Token(1), Duration::from_secs(60), FleetEpoch(0));
    store.take_lease(&k, request).await.unwrap();
    store
        .publish_verdict(&k, Token(1), ProbeResult::Failed)
        .await
        .unwrap();
    let trip = TripRecord::new(Token(2), Duration::from_secs(60), 2, FleetEpoch(0));
    store.record_trip(&k, trip).await.unwrap();
    store
        .record_trip(
            &k,
            TripRecord::new(Token(3), Duration::from_secs(60), 2, FleetEpoch(0)),
        )
        .await
        .unwrap();
    let cap = CapKeys::new("ttl", "freight").unwrap();
    let claim = Claim::new(InstanceId(1), 1, 2, 0, Duration::from_secs(3), 4);
    store.claim(&cap, claim).await.unwrap();

    let keys: Vec<String> = query(&url, ::redis::cmd("KEYS").arg("ttl:*"))
        .await
        .unwrap();
    assert!(keys.len() >= 6, "{keys:?}");
    for key in &keys {
        let left = pttl(&url, key).await;
        assert!(left > 0, "{key} has no TTL ({left})");
    }
    // Use refreshes it: a counter about to expire lives on after a health check.
    let _: () = query(&url, ::redis::cmd("PEXPIRE").arg(k.epoch()).arg(60_000))
        .await
        .unwrap();
    store.touch(&k, FleetEpoch(0)).await.unwrap();
    let left = pttl(&url, k.epoch()).await;
    assert!(
        left > 60_000,
        "the touch did not refresh the counter: {left}"
    );
    report(&format!("keys written: {keys:?}"));
}

/// The rule: every connected instance raises the epoch counter to the highest
/// epoch it has seen at each health check, so a counter lost to a flush, an
/// eviction or an expiry comes back above it, and a new lease's epoch is newer
/// than every verdict the instance knows (it would ignore an older one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epochs_never_go_backwards_after_the_counter_is_lost() {
    let Some(server) = RedisServer::start("epochs_never_go_backwards_after_the_counter_is_lost")
    else {
        return;
    };
    let url = server.url();
    let fleet = fleet(&url);
    let breaker = CircuitBreakerLayer::builder("freight").build().unwrap();
    let coordinated = fleet.coordinate(&breaker.handle()).unwrap();
    let store = RedisStore::new(&url).unwrap();
    let k = Keys::new("incident", "freight").unwrap();
    let request = LeaseRequest::new(Token(1), Duration::from_secs(60), FleetEpoch(56));
    assert_eq!(
        store.take_lease(&k, request).await.unwrap(),
        LeaseReply::Taken {
            epoch: FleetEpoch(57)
        }
    );
    store
        .publish_verdict(&k, Token(1), ProbeResult::Failed)
        .await
        .unwrap();
    store.release_lease(&k, Token(1)).await.unwrap();
    until("the instance saw epoch 57", || async {
        coordinated.snapshot().fleet_epoch == FleetEpoch(57)
    })
    .await;

    for loss in ["FLUSHALL", "expiry"] {
        if loss == "FLUSHALL" {
            assert_eq!(server.command("FLUSHALL").unwrap(), "+OK");
        } else {
            assert_eq!(server.command(&format!("DEL {}", k.epoch())).unwrap(), ":1");
        }
        until(
            "the counter is back above what the instance saw",
            || async {
                let mut cmd = ::redis::cmd("GET");
                cmd.arg(k.epoch());
                let counter: Option<u64> = query(&url, &cmd).await.flatten();
                counter.is_some_and(|c| c >= 57)
            },
        )
        .await;
        // A newcomer that saw nothing takes a lease newer than epoch 57.
        let request = LeaseRequest::new(Token(9), Duration::from_secs(60), FleetEpoch(0));
        let LeaseReply::Taken { epoch } = store.take_lease(&k, request).await.unwrap() else {
            panic!("the lease was held");
        };
        assert!(
            epoch > FleetEpoch(57),
            "{loss}: epoch {epoch} went backwards"
        );
        store.release_lease(&k, Token(9)).await.unwrap();
        report(&format!(
            "after {loss}: a newcomer's lease has epoch {epoch}"
        ));
    }
}

/// An eviction policy other than `noeviction` is reported (log and snapshots);
/// a server that refuses `CONFIG GET` is tolerated: coordination goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_policy_that_may_evict_the_fleet_is_reported() {
    let Some(server) =
        RedisServer::start("an_eviction_policy_that_may_evict_the_fleet_is_reported")
    else {
        return;
    };
    let url = server.url();
    assert_eq!(
        server
            .command("CONFIG SET maxmemory-policy allkeys-lru")
            .unwrap(),
        "+OK"
    );
    let fleet = fleet(&url);
    let breaker = CircuitBreakerLayer::builder("freight").build().unwrap();
    let coordinated = fleet.coordinate(&breaker.handle()).unwrap();
    let bulkhead = BulkheadLayer::builder("freight").build().unwrap();
    let config = CapConfig::new(4)
        .renew_every(Duration::from_millis(100))
        .ttl(Duration::from_millis(500));
    let capped = fleet.cap(&bulkhead.handle(), config).unwrap();
    until("the breaker's snapshot warns", || async {
        coordinated
            .snapshot()
            .store_warning
            .is_some_and(|w| w.contains("allkeys-lru"))
    })
    .await;
    until("the cap's snapshot warns", || async {
        capped.snapshot().store_warning.is_some()
    })
    .await;
    report(&format!("{:?}", coordinated.snapshot().store_warning));

    // A user not allowed CONFIG: no warning, and coordination works.
    assert_eq!(
        server
            .command("ACL SETUSER limited on >secret ~* &* +@all -config")
            .unwrap(),
        "+OK"
    );
    let limited = format!("redis://limited:secret@127.0.0.1:{}/", server.port());
    let fleet = Fleet::builder(RedisStore::new(&limited).unwrap())
        .prefix("limited")
        .health_every(Duration::from_millis(100))
        .build()
        .unwrap();
    let other = CircuitBreakerLayer::builder("freight").build().unwrap();
    let coordinated = fleet.coordinate(&other.handle()).unwrap();
    until("a few health checks answered", || async {
        let s = coordinated.snapshot();
        s.connected && s.health_checks >= 3
    })
    .await;
    let s = coordinated.snapshot();
    assert_eq!(s.store_warning, None, "{s:?}");
    assert!(s.connected);
}

/// A graceful shutdown drains the capped bulkhead's calls, deletes its claim
/// and releases the probe lease it holds, instead of leaving them to their TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_gives_the_claim_and_the_lease_back() {
    let Some(server) = RedisServer::start("a_graceful_shutdown_gives_the_claim_and_the_lease_back")
    else {
        return;
    };
    let url = server.url();
    let fleet = fleet(&url);

    // The cap: one call running when the shutdown starts.
    let bulkhead = BulkheadLayer::builder("parcels")
        .max_concurrent(4)
        .max_queue(0)
        .build()
        .unwrap();
    let handle = bulkhead.handle();
    let config = CapConfig::new(4)
        .renew_every(Duration::from_millis(100))
        .ttl(Duration::from_secs(1));
    let capped = fleet.cap(&handle, config).unwrap();
    let instance = capped.instance();
    let svc = bulkhead.layer(service_fn(|()| async {
        sleep(Duration::from_millis(300)).await;
        Ok::<_, BoxError>(())
    }));
    until("a call admitted under the cap", || {
        tokio::spawn(svc.clone().oneshot(()));
        let active = handle.snapshot().active;
        async move { active > 0 }
    })
    .await;
    let claims = CapKeys::new("incident", "parcels").unwrap();
    let field = format!("i:{instance}");
    let exists = |field: String| {
        let (url, key) = (url.clone(), claims.claims().to_owned());
        async move {
            let mut cmd = ::redis::cmd("HEXISTS");
            cmd.arg(key).arg(field);
            query::<i64>(&url, &cmd).await.unwrap()
        }
    };
    assert_eq!(exists(field.clone()).await, 1);
    let done = capped.shutdown(Duration::from_secs(20)).await;
    assert_eq!(done.still_running, 0, "{done:?}");
    assert!(done.released, "{done:?}");
    assert_eq!(handle.allotment(), Some(0));
    assert_eq!(exists(field).await, 0, "the claim outlived the shutdown");

    // The breaker: trips, takes the probe lease at its interval's end, and
    // shuts down holding it.
    let breaker = CircuitBreakerLayer::builder("freight")
        .consecutive_failures(1)
        .open_for(Duration::from_millis(100))
        .half_open_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let coordinated = fleet.coordinate(&breaker.handle()).unwrap();
    until("connected", || async { coordinated.snapshot().connected }).await;
    // The first call fails; the probe after it hangs, holding the lease.
    let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut sick = breaker.layer(service_fn(move |()| {
        let first = first.swap(false, std::sync::atomic::Ordering::SeqCst);
        async move {
            if first {
                return Err::<(), BoxError>("down".into());
            }
            std::future::pending().await
        }
    }));
    let _ = sick.ready().await.unwrap().call(()).await;
    let coordination = &coordinated;
    let breaker_handle = breaker.handle();
    until("the lease held, its probe in flight", || {
        // A call asks the gate for the probe, which has the lease taken.
        tokio::spawn(sick.clone().oneshot(()));
        let holding = matches!(coordination.snapshot().lease, LeaseStatus::Holding { .. });
        let probing = breaker_handle.snapshot().probes_in_flight > 0;
        async move { holding && probing }
    })
    .await;
    let lease = Keys::new("incident", "freight").unwrap();
    let mut cmd = ::redis::cmd("EXISTS");
    cmd.arg(lease.lease());
    assert_eq!(query::<i64>(&url, &cmd).await, Some(1));
    let done = coordinated.shutdown().await;
    assert!(done.released, "{done:?}");
    assert_eq!(
        query::<i64>(&url, &cmd).await,
        Some(0),
        "the lease outlived the shutdown"
    );
}

/// An operator's `set_cap` is configuration: after a FLUSHALL the instances give
/// it back to the store (not their configured cap) until an operator clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_cap_outlives_a_flush_until_it_is_cleared() {
    let Some(server) = RedisServer::start("an_operators_cap_outlives_a_flush_until_it_is_cleared")
    else {
        return;
    };
    let url = server.url();
    let fleet = fleet(&url);
    let (_bulkhead, capped) = capped_freight(&fleet);
    let heard = |cap: u32| {
        let capped = &capped;
        move || async move { capped.snapshot().store_cap == Some(cap) }
    };
    until("the configured cap stored", heard(6)).await;

    fleet.set_cap("freight", 4).await.unwrap();
    until("the instance heard the operator's cap", heard(4)).await;
    // Given back to the flushed store.
    assert_eq!(after_flush(&server, &capped).await, Some(4));
    assert_eq!(capped.snapshot().store_cap, Some(4));

    // Cleared: the configured cap again, and after a flush too.
    fleet.clear_cap("freight").await.unwrap();
    until("the configured cap back", heard(6)).await;
    assert_eq!(after_flush(&server, &capped).await, Some(6));
}

/// With the fleet's secret, an operator's cap is signed: the instances take up
/// a signed one and give it back to a flushed store, and a cap written into
/// Redis unsigned or under another secret is refused (counted, never given
/// back): after a flush the store has the operator's signed cap again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_badly_signed_operators_cap_is_ignored_and_never_given_back() {
    let Some(server) =
        RedisServer::start("a_badly_signed_operators_cap_is_ignored_and_never_given_back")
    else {
        return;
    };
    let url = server.url();
    let signed_by = |byte: u8| {
        Fleet::builder(RedisStore::new(&url).unwrap())
            .prefix("incident")
            .store_timeout(Duration::from_millis(500))
            .secret(Some(FleetSecret::new(vec![byte; 32]).unwrap()))
            .build()
            .unwrap()
    };
    let fleet = signed_by(5);
    let (_bulkhead, capped) = capped_freight(&fleet);
    let heard = |cap: u32| {
        let capped = &capped;
        move || async move { capped.snapshot().store_cap == Some(cap) }
    };
    until("the configured cap stored", heard(6)).await;

    // Signed: taken up, and given back to a flushed store with its signature.
    fleet.set_cap("freight", 4).await.unwrap();
    until("the instance heard the operator's cap", heard(4)).await;
    assert_eq!(after_flush(&server, &capped).await, Some(4));
    assert_eq!(after_flush(&server, &capped).await, Some(4));
    assert_eq!(capped.snapshot().operator_caps_refused, 0);

    // Under another secret: the store divides it, the instance does not take it up.
    signed_by(9).set_cap("freight", 2).await.unwrap();
    until("the store's cap at 2", heard(2)).await;
    until("the badly signed cap refused", || async {
        capped.snapshot().operator_caps_refused == 1
    })
    .await;
    assert_eq!(after_flush(&server, &capped).await, Some(4));

    // Unsigned, as a store writer (or an instance without the secret) writes it.
    fleet.store().set_cap(&freight_keys(), 3).await.unwrap();
    until("the store's cap at 3", heard(3)).await;
    until("the unsigned cap refused", || async {
        capped.snapshot().operator_caps_refused == 2
    })
    .await;
    assert_eq!(after_flush(&server, &capped).await, Some(4));
    // Each refused once, however many renewals heard it.
    assert_eq!(capped.snapshot().operator_caps_refused, 2);
}

/// An operator's fleet action on a real Redis: three instances apply it, each
/// ends it by itself at its expiry; an action written straight into Redis by
/// someone without the fleet's secret is refused by each and audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_action_applies_everywhere_expires_by_itself_and_a_forged_one_is_refused() {
    let Some(server) = RedisServer::start(
        "a_fleet_action_applies_everywhere_expires_by_itself_and_a_forged_one_is_refused",
    ) else {
        return;
    };
    let url = server.url();
    let secret = || Some(FleetSecret::new(vec![3; 32]).unwrap());
    let nodes: Vec<_> = (0..3)
        .map(|_| {
            let fleet = Fleet::builder(RedisStore::new(&url).unwrap())
                .prefix("actions")
                .store_timeout(Duration::from_millis(500))
                .health_every(Duration::from_millis(200))
                .secret(secret())
                .build()
                .unwrap();
            let breaker = CircuitBreakerLayer::builder("freight").build().unwrap();
            let handle = breaker.handle();
            let coordinated = fleet.coordinate(&handle).unwrap();
            (fleet, handle, coordinated)
        })
        .collect();
    let all = |state: State| {
        let handles: Vec<_> = nodes.iter().map(|(_, h, _)| h.clone()).collect();
        move || {
            let ok = handles.iter().all(|h| h.state() == state);
            async move { ok }
        }
    };
    until("every instance connected", || async {
        nodes.iter().all(|(_, _, c)| c.snapshot().connected)
    })
    .await;

    let forged = FleetAction::issue(
        &FleetSecret::new(vec![4; 32]).unwrap(),
        "actions",
        "freight",
        ActionKind::ForceOpen,
        "looks official",
        "ops",
        Duration::from_secs(600),
        nodes[0].0.wall_ms(),
    )
    .unwrap();
    let written: Option<i64> = query(
        &url,
        ::redis::cmd("HSET")
            .arg(Keys::new("actions", "freight").unwrap().actions())
            .arg(&forged.id)
            .arg(forged.encode()),
    )
    .await;
    assert_eq!(written, Some(1));
    until("each instance refused the forged action", || async {
        nodes
            .iter()
            .all(|(_, _, c)| c.snapshot().actions_refused == 1)
    })
    .await;
    assert!(nodes.iter().all(|(_, h, _)| h.state() == State::Closed));

    let action = nodes[1]
        .0
        .act(
            "freight",
            ActionKind::ForceOpen,
            "supplier migrating",
            "ops",
            Duration::from_secs(3),
        )
        .await
        .unwrap();
    until("every instance applied it", all(State::ForcedOpen)).await;
    until("every instance ended it at its expiry", all(State::Closed)).await;
    // Each instance audits its expiry after it has closed its breaker: wait for
    // the three entries, then check they were made by the expiry, not earlier (at
    // or after it by the fleets' clocks on this one host, within their rounding).
    until("every instance audited the expiry", || async {
        let log = nodes[0].0.audit_log("freight", 100).await.unwrap();
        let expired = log
            .iter()
            .filter(|e| e.action == action.id && e.event == "expired");
        expired.count() == 3
    })
    .await;
    let log = nodes[0].0.audit_log("freight", 100).await.unwrap();
    let expired: Vec<_> = log
        .iter()
        .filter(|e| e.action == action.id && e.event == "expired")
        .collect();
    assert_eq!(expired.len(), 3, "{log:?}");
    assert!(expired.iter().all(|e| e.at_ms + 5 >= action.expires_at_ms));
    let refused = log
        .iter()
        .filter(|e| e.action == forged.id && e.event == "refused: bad signature")
        .count();
    assert_eq!(refused, 3);
    report(&format!("fleet action: {} audit entries", log.len()));
}
