//! Three instance *processes* sharing a cap of 6 on one `redis-server`, in front
//! of one loopback hyper supplier in the parent that counts its requests in
//! flight: the test binary re-executes itself (`SEAWALL_CAP_CHILD` selects the
//! role), so claims are contended across real processes and connections.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall_core::{find_rejection, RejectionKind};
use seawall_fleet::{CapConfig, CapMode};
use support::redis_server::RedisServer;
use support::supplier::{client, Supplier};
use tokio::time::{sleep, Instant};
use tower::{Layer, ServiceExt};

const ROLE: &str = "SEAWALL_CAP_CHILD";
const INSTANCES: usize = 3;
const CAP: u32 = 6;
/// A watchdog for the whole run; never a measurement.
const WATCHDOG: Duration = Duration::from_secs(120);
const LONGEST: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_never_exceed_the_fleet_wide_cap() {
    if std::env::var_os(ROLE).is_some() {
        return; // a child runs only `cap_instance_process`
    }
    let Some(server) = RedisServer::start("three_processes_never_exceed_the_fleet_wide_cap") else {
        return;
    };
    let supplier = Supplier::start(Duration::from_millis(20)).await;
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..INSTANCES)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "cap_instance_process",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ROLE, i.to_string())
                .env("SEAWALL_CAP_REDIS", server.url())
                .env("SEAWALL_CAP_SUPPLIER", supplier.addr.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    let pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let waits = children
        .into_iter()
        .map(|mut child| tokio::task::spawn_blocking(move || child.wait()));
    let all = futures_like_join(waits.collect());
    let statuses = match tokio::time::timeout(WATCHDOG, all).await {
        Ok(statuses) => statuses,
        Err(_) => {
            for pid in &pids {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
            panic!("watchdog: the instance processes did not finish");
        }
    };
    let _ = writeln!(
        std::io::stderr(),
        "three processes, cap {CAP}: {} requests served, supplier high-water mark {}, {} abandoned",
        supplier.served(),
        supplier.most(),
        supplier.abandoned()
    );
    // Each child asserted that no call failed because of the store.
    assert!(statuses.iter().all(|s| s.success()), "{statuses:?}");
    assert!(supplier.served() > 0);
    assert!(
        supplier.most() <= CAP as usize,
        "supplier saw {}",
        supplier.most()
    );
}

/// Awaits every handle in order (the children run meanwhile all the same).
async fn futures_like_join(
    handles: Vec<tokio::task::JoinHandle<std::io::Result<std::process::ExitStatus>>>,
) -> Vec<std::process::ExitStatus> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap().unwrap());
    }
    out
}

/// The child's role: one instance whose bulkhead is capped fleet-wide, with
/// twelve callers back to back until three seconds after its first call served.
/// Does nothing unless started by the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cap_instance_process() {
    let Some(i) = std::env::var(ROLE)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        return;
    };
    let url = std::env::var("SEAWALL_CAP_REDIS").unwrap();
    let addr = std::env::var("SEAWALL_CAP_SUPPLIER")
        .unwrap()
        .parse()
        .unwrap();
    let (fleet, layer) = support::capped_instance(&url, "processes", i as u64);
    let handle = layer.handle();
    let config = CapConfig::new(CAP)
        .renew_every(Duration::from_millis(100))
        .ttl(Duration::from_millis(700))
        .longest_call(LONGEST)
        .mode(CapMode::Strict);
    let capped = fleet.cap(&handle, config).unwrap();
    let svc = layer.layer(client(addr, LONGEST));
    let other = Arc::new(AtomicU64::new(0));
    let served = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // The callers start at once: their rejections are the demand that brings the
    // first allotment.
    let workers: Vec<_> = (0..12)
        .map(|_| {
            let (svc, other, served) = (svc.clone(), Arc::clone(&other), Arc::clone(&served));
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    match svc.clone().oneshot(()).await {
                        Ok(()) => {
                            served.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => {
                            let full = find_rejection(&*e)
                                .is_some_and(|r| r.kind() == RejectionKind::BulkheadFull);
                            if !full {
                                other.fetch_add(1, Ordering::SeqCst);
                            }
                            sleep(Duration::from_millis(2)).await;
                        }
                    }
                }
            })
        })
        .collect();
    let start = Instant::now();
    while served.load(Ordering::SeqCst) == 0 {
        assert!(start.elapsed() < WATCHDOG, "instance {i}: never served");
        sleep(Duration::from_millis(5)).await;
    }
    // Three seconds of contention once this instance is in.
    sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(
        other.load(Ordering::SeqCst),
        0,
        "instance {i}: a call failed otherwise"
    );
    assert!(capped.snapshot().renewals > 0);
    drop(capped);
}
