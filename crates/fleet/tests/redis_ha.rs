//! The fleet on Redis as operators run it for high availability: a replica a
//! URL may still point at after a failover, and a primary behind a sentinel that
//! fails over. Real servers started by each test, real time; every assertion is
//! an invariant, the deadlines are watchdogs.
//!
//! Without `redis-server` on PATH each test writes one line saying it did not
//! run, unless `SEAWALL_REQUIRE_REDIS=1` (set by CI) makes that a failure.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall_bulkhead::BulkheadLayer;
use seawall_circuit_breaker::CircuitBreakerLayer;
use seawall_core::{find_rejection, BoxError, RejectionKind};
use seawall_fleet::{
    CapConfig, CapKeys, CapStore, Claim, Fleet, InstanceId, RedisStore, StoreError,
};
use support::redis_server::RedisServer;
use support::servers::Proc;
use support::watch::{query, until, WATCHDOG};
use tokio::time::sleep;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, Layer, ServiceExt};

fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

async fn info_replication(url: &str) -> String {
    let mut cmd = ::redis::cmd("INFO");
    cmd.arg("replication");
    query::<String>(url, &cmd).await.unwrap_or_default()
}

/// A replica of `primary`, in sync.
async fn replica_of(primary: u16) -> Proc {
    let replica = Proc::node(&["--replicaof", "127.0.0.1", &primary.to_string()]);
    let url = replica.url();
    until("the replica in sync", || {
        let url = url.clone();
        async move {
            info_replication(&url)
                .await
                .contains("master_link_status:up")
        }
    })
    .await;
    replica
}

/// A write refused as `READONLY` (a URL still pointing at the old primary after
/// a failover) is the store unavailable, said so, not a server error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_replica_is_reported_as_the_store_unavailable() {
    let Some(primary) =
        RedisServer::start("a_read_only_replica_is_reported_as_the_store_unavailable")
    else {
        return;
    };
    let replica = replica_of(primary.port()).await;
    let store = RedisStore::new(&replica.url()).unwrap();
    let keys = CapKeys::new("ha", "freight").unwrap();
    let claim = Claim::new(InstanceId(1), 1, 2, 0, Duration::from_secs(3), 4);
    match store.claim(&keys, claim).await {
        Err(StoreError::Unavailable(why)) => {
            assert!(why.contains("read-only replica"), "{why}");
            report(&format!("a claim on a replica: store unavailable: {why}"));
        }
        other => panic!("a write to a replica answered {other:?}"),
    }
}

/// What the calls of one instance came back with.
#[derive(Default)]
struct Calls {
    ok: AtomicU64,
    full: AtomicU64,
    other: AtomicU64,
}

/// A primary, its replica and a sentinel; `SENTINEL FAILOVER` under load. No
/// call fails because of the store, and the fleet rejoins on the new primary
/// (the sentinel asked again once the old one answers `READONLY`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_fails_no_call_and_the_fleet_rejoins() {
    let Some(primary) =
        RedisServer::start("a_sentinel_failover_fails_no_call_and_the_fleet_rejoins")
    else {
        return;
    };
    let replica = replica_of(primary.port()).await;
    let sentinel = Proc::sentinel("seawall", primary.port());
    let sentinel_url = sentinel.url();
    let named = || {
        let url = sentinel_url.clone();
        async move {
            let mut cmd = ::redis::cmd("SENTINEL");
            cmd.arg("get-master-addr-by-name").arg("seawall");
            query::<(String, u16)>(&url, &cmd).await.map(|(_, p)| p)
        }
    };
    assert_eq!(named().await, Some(primary.port()));

    let store = RedisStore::sentinel("seawall", [sentinel.addr()])
        .build()
        .unwrap();
    let fleet = Fleet::builder(store)
        .prefix("ha")
        .store_timeout(Duration::from_millis(500))
        .reconnect(Duration::from_millis(100), Duration::from_millis(500))
        .health_every(Duration::from_millis(100))
        .build()
        .unwrap();
    let breaker = CircuitBreakerLayer::builder("freight").build().unwrap();
    let coordinated = fleet.coordinate(&breaker.handle()).unwrap();
    let bulkhead = BulkheadLayer::builder("freight")
        .max_concurrent(4)
        .max_queue(0)
        .build()
        .unwrap();
    let handle = bulkhead.handle();
    let capped = fleet
        .cap(
            &handle,
            CapConfig::new(4)
                .renew_every(Duration::from_millis(100))
                .ttl(Duration::from_millis(600)),
        )
        .unwrap();
    let supplier = service_fn(|()| async {
        sleep(Duration::from_millis(5)).await;
        Ok::<_, BoxError>(())
    });
    let svc: BoxCloneSyncService<(), (), BoxError> =
        BoxCloneSyncService::new(breaker.layer(bulkhead.layer(supplier)));
    let calls = Arc::new(Calls::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..6 {
        let (svc, calls, stop) = (svc.clone(), Arc::clone(&calls), Arc::clone(&stop));
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match svc.clone().oneshot(()).await {
                    Ok(()) => calls.ok.fetch_add(1, Ordering::SeqCst),
                    Err(e) => match find_rejection(&*e).map(|r| r.kind()) {
                        Some(RejectionKind::BulkheadFull) => {
                            sleep(Duration::from_millis(2)).await;
                            calls.full.fetch_add(1, Ordering::SeqCst)
                        }
                        _ => calls.other.fetch_add(1, Ordering::SeqCst),
                    },
                };
            }
        }));
    }
    until("coordinating with the whole cap handed out", || async {
        coordinated.snapshot().connected && handle.allotment() == Some(4)
    })
    .await;

    // The failover: the sentinel promotes the replica and demotes the primary.
    until("the sentinel accepted the failover", || {
        let url = sentinel_url.clone();
        async move {
            let mut cmd = ::redis::cmd("SENTINEL");
            cmd.arg("FAILOVER").arg("seawall");
            query::<String>(&url, &cmd).await.is_some()
        }
    })
    .await;
    until("the sentinel names the replica", || async {
        named().await == Some(replica.port)
    })
    .await;
    let old = primary.url();
    until("the old primary demoted", || {
        let old = old.clone();
        async move { info_replication(&old).await.contains("role:slave") }
    })
    .await;

    // Every write now reaches the old primary as READONLY until the store asks
    // the sentinel again: renewals resume only on the new primary.
    let renewals = capped.snapshot().renewals;
    let claims = CapKeys::new("ha", "freight").unwrap();
    let field = format!("i:{}", capped.instance());
    let new_primary = replica.url();
    until("renewing on the new primary", || {
        let (url, key, field) = (
            new_primary.clone(),
            claims.claims().to_owned(),
            field.clone(),
        );
        let renewed = capped.snapshot().renewals > renewals + 2;
        async move {
            let mut cmd = ::redis::cmd("HEXISTS");
            cmd.arg(key).arg(field);
            renewed && query::<i64>(&url, &cmd).await == Some(1)
        }
    })
    .await;
    until("coordinating again with the whole cap", || async {
        coordinated.snapshot().connected && handle.allotment() == Some(4)
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    let (ok, full, other) = (
        calls.ok.load(Ordering::SeqCst),
        calls.full.load(Ordering::SeqCst),
        calls.other.load(Ordering::SeqCst),
    );
    report(&format!(
        "sentinel failover: {ok} calls served, {full} refused full, {other} failed because of \
         the store; breaker {:?}; cap {:?}",
        coordinated.snapshot(),
        capped.snapshot()
    ));
    assert_eq!(other, 0, "a call failed because of the store");
    assert!(ok > 0);
}

/// Three cluster nodes, their slots assigned by `redis-cli --cluster create`.
#[cfg(feature = "redis-cluster")]
async fn cluster() -> Option<Vec<Proc>> {
    let args = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
    ];
    let nodes: Vec<Proc> = (0..3).map(|_| Proc::node(&args)).collect();
    let mut create = std::process::Command::new("redis-cli");
    create.arg("--cluster").arg("create");
    for node in &nodes {
        create.arg(node.addr());
    }
    let created = create
        .arg("--cluster-yes")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match created {
        Ok(status) => assert!(status.success(), "redis-cli --cluster create: {status}"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var("SEAWALL_REQUIRE_REDIS").map_or(true, |v| v != "1"),
                "SEAWALL_REQUIRE_REDIS=1 but redis-cli is not on PATH"
            );
            report("!!! the cluster test DID NOT RUN: redis-cli is not on PATH (apt-get install redis-tools)");
            return None;
        }
        Err(e) => panic!("redis-cli: {e}"),
    }
    for node in &nodes {
        let url = node.url();
        until("the cluster's state ok on every node", || {
            let url = url.clone();
            async move {
                let mut cmd = ::redis::cmd("CLUSTER");
                cmd.arg("INFO");
                query::<String>(&url, &cmd)
                    .await
                    .is_some_and(|info| info.contains("cluster_state:ok"))
            }
        })
        .await;
    }
    Some(nodes)
}

/// On a 3-node Redis Cluster the store keeps its whole contract (each breaker's
/// and cap's keys in one slot, pushes sharded), and a fleet coordinates and
/// hands out its caps for names whose slots live on different nodes.
#[cfg(feature = "redis-cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_keeps_the_contract_and_the_fleet_coordinates() {
    let Some(probe) =
        RedisServer::start("a_redis_cluster_keeps_the_contract_and_the_fleet_coordinates")
    else {
        return;
    };
    drop(probe);
    let Some(nodes) = cluster().await else {
        return;
    };
    let urls: Vec<String> = nodes.iter().map(Proc::url).collect();
    let store = RedisStore::cluster(urls.clone()).build().unwrap();
    support::contract::all(&store, "cluster").await;
    support::contract::cap_claims(&store, "cluster").await;
    support::contract::an_abandoned_claim_changes_nothing(&store, "cluster").await;
    support::contract::freed_slots_are_pushed(&store, "cluster").await;

    let fleet = Fleet::builder(RedisStore::cluster(urls.clone()).build().unwrap())
        .prefix("ha")
        .store_timeout(Duration::from_millis(500))
        .health_every(Duration::from_millis(100))
        .build()
        .unwrap();
    let names = ["freight", "payments", "parcels", "search", "stock", "tax"];
    let mut held = Vec::new();
    for name in names {
        let breaker = CircuitBreakerLayer::builder(name).build().unwrap();
        let bulkhead = BulkheadLayer::builder(name)
            .max_concurrent(4)
            .max_queue(0)
            .build()
            .unwrap();
        let coordinated = fleet.coordinate(&breaker.handle()).unwrap();
        let config = CapConfig::new(2)
            .renew_every(Duration::from_millis(100))
            .ttl(Duration::from_millis(500));
        let capped = fleet.cap(&bulkhead.handle(), config).unwrap();
        held.push((breaker, bulkhead, coordinated, capped));
    }
    // Every cap is claimed (its hash written on the node that owns its slot),
    // and every coordination connected and answering health checks.
    until(
        "every name coordinated and claimed on the cluster",
        || async {
            held.iter().all(|(_, _, c, capped)| {
                let s = c.snapshot();
                s.connected && s.health_checks > 2 && capped.snapshot().renewals > 2
            })
        },
    )
    .await;
    let mut owners = std::collections::BTreeSet::new();
    for name in names {
        let key = CapKeys::new("ha", name).unwrap();
        for node in &nodes {
            let mut cmd = ::redis::cmd("EXISTS");
            cmd.arg(key.claims());
            if query::<i64>(&node.url(), &cmd).await == Some(1) {
                owners.insert(node.port);
            }
        }
    }
    report(&format!(
        "cluster: the caps' hashes live on {} of 3 nodes",
        owners.len()
    ));
    assert!(
        owners.len() >= 2,
        "every name landed on one node: {owners:?}"
    );
    let errors: u64 = held
        .iter()
        .map(|(_, _, c, capped)| c.snapshot().store_errors + capped.snapshot().store_errors)
        .sum();
    report(&format!("cluster: {errors} store errors in all"));
}

/// A private CA, a server certificate for 127.0.0.1 and a client certificate,
/// all PEM: (ca, server cert, server key, client cert, client key).
#[cfg(feature = "tls-rustls")]
fn certificates() -> (String, String, String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "seawall test CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &ca, &ca_key)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["seawall-client".to_owned()])
        .unwrap()
        .signed_by(&client_key, &ca, &ca_key)
        .unwrap();
    (
        ca.pem(),
        server.pem(),
        server_key.serialize_pem(),
        client.pem(),
        client_key.serialize_pem(),
    )
}

/// Over TLS (`redis-server --tls-port`, certificates the test makes, client
/// certificates required): the store keeps its contract and a fleet
/// coordinates; without the client certificate the server refuses it; the CA
/// and client certificate without a `rediss://` URL are refused at build.
#[cfg(feature = "tls-rustls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_with_a_private_ca_and_a_client_certificate() {
    let Some(probe) = RedisServer::start("over_tls_with_a_private_ca_and_a_client_certificate")
    else {
        return;
    };
    drop(probe);
    let (ca, cert, key, client_cert, client_key) = certificates();
    let server = Proc::tls_node(&ca, &cert, &key);
    let url = format!("rediss://127.0.0.1:{}/", server.port);
    let store = RedisStore::builder(url.as_str())
        .tls_ca(ca.as_bytes())
        .tls_client_cert(client_cert.as_bytes(), client_key.as_bytes())
        .build()
        .unwrap();
    support::contract::all(&store, "tls").await;

    let fleet = Fleet::builder(store)
        .prefix("tls")
        .health_every(Duration::from_millis(100))
        .build()
        .unwrap();
    let breaker = CircuitBreakerLayer::builder("freight").build().unwrap();
    let coordinated = fleet.coordinate(&breaker.handle()).unwrap();
    until("coordinating over TLS", || async {
        let s = coordinated.snapshot();
        s.connected && s.health_checks > 2
    })
    .await;

    // No client certificate: the server refuses the handshake.
    let anonymous = RedisStore::builder(url.as_str())
        .tls_ca(ca.as_bytes())
        .build()
        .unwrap();
    let keys = seawall_fleet::Keys::new("tls", "freight").unwrap();
    let refused = tokio::time::timeout(
        WATCHDOG,
        seawall_fleet::Store::read_verdict(&anonymous, &keys),
    )
    .await
    .expect("watchdog");
    assert!(refused.is_err(), "{refused:?}");
    report(&format!(
        "without a client certificate: {}",
        refused.unwrap_err()
    ));

    let plain = RedisStore::builder(format!("redis://127.0.0.1:{}/", server.port))
        .tls_ca(ca.as_bytes())
        .build();
    assert_eq!(plain.unwrap_err().field(), "tls");
}
