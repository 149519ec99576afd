//! Three instance *processes* on one `redis-server` and one loopback dependency:
//! the test binary re-executes itself (`SEAWALL_FLEET_CHILD` selects the role), so
//! the lease is contended across real processes and connections. The dependency,
//! in the parent, counts the probes in flight at once.
#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seawall_circuit_breaker::{CircuitBreakerConfig, CircuitBreakerLayer, State, TripPolicy};
use seawall_core::{find_rejection, BoxError, RejectionKind};
use seawall_fleet::{Fleet, RedisStore};
use support::redis_server::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tower::{service_fn, Layer, ServiceExt};

const ROLE: &str = "SEAWALL_FLEET_CHILD";
const INSTANCES: usize = 3;
/// A watchdog for the whole run; never a measurement.
const WATCHDOG: Duration = Duration::from_secs(120);

/// The shared dependency: fails until every instance has tripped and two probes
/// have failed, then answers; counts probes in flight at once.
#[derive(Default)]
struct Dependency {
    healthy: AtomicBool,
    probes: AtomicUsize,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    failed_calls: Mutex<[u64; INSTANCES]>,
}

impl Dependency {
    fn serve(self: &Arc<Self>, mut stream: TcpStream) {
        let mut line = String::new();
        if BufReader::new(&stream).read_line(&mut line).is_err() {
            return;
        }
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap_or_default();
        let i: usize = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        let probe = kind == "probe";
        if probe {
            let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(n, Ordering::SeqCst);
            self.probes.fetch_add(1, Ordering::SeqCst);
        }
        let healthy = self.healthy.load(Ordering::SeqCst);
        if probe {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        if !healthy {
            let mut failed = self.failed_calls.lock().unwrap();
            if let Some(n) = failed.get_mut(i) {
                *n += 1;
            }
            if failed.iter().all(|&n| n >= 3) && self.probes.load(Ordering::SeqCst) >= 2 {
                self.healthy.store(true, Ordering::SeqCst);
            }
        }
        let _ = stream.write_all(if healthy { b"ok\n" } else { b"fail\n" });
    }
}

#[test]
fn three_processes_probe_one_at_a_time_and_all_close() {
    if std::env::var_os(ROLE).is_some() {
        return; // a child runs only `instance_process`
    }
    let Some(server) = RedisServer::start("three_processes_probe_one_at_a_time_and_all_close")
    else {
        return;
    };
    let dep = Arc::new(Dependency::default());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    {
        let dep = Arc::clone(&dep);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let dep = Arc::clone(&dep);
                std::thread::spawn(move || dep.serve(stream));
            }
        });
    }
    let exe = std::env::current_exe().unwrap();
    let children: Vec<Child> = (0..INSTANCES)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "instance_process",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ROLE, i.to_string())
                .env("SEAWALL_FLEET_REDIS", server.url())
                .env("SEAWALL_FLEET_DEPENDENCY", addr.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    // Each child is waited for on its own thread; the channel's timeout is a
    // watchdog, not a timing check.
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let (done, finished) = std::sync::mpsc::channel();
    for mut child in children {
        let done = done.clone();
        std::thread::spawn(move || {
            let _ = done.send(child.wait());
        });
    }
    let deadline = Instant::now() + WATCHDOG;
    let mut statuses = Vec::new();
    while statuses.len() < pids.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        match finished.recv_timeout(left) {
            Ok(status) => statuses.push(status.unwrap()),
            Err(_) => {
                for pid in &pids {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
                panic!("watchdog: the instance processes did not all close");
            }
        }
    }
    let probes = dep.probes.load(Ordering::SeqCst);
    let most = dep.most_in_flight.load(Ordering::SeqCst);
    let _ = writeln!(
        std::io::stderr(),
        "three processes: {probes} probes across the fleet, most at once {most}"
    );
    // Each child asserted that no call failed because of the store and that it closed.
    assert!(statuses.iter().all(|s| s.success()), "{statuses:?}");
    assert!(dep.healthy.load(Ordering::SeqCst));
    assert!(
        probes >= 2,
        "{probes} probes: at least one failed, then a success"
    );
    assert_eq!(most, 1, "two probes at once across processes");
}

/// The child's role: one coordinated instance calling the parent's dependency
/// every 20 ms until its breaker, having tripped, is closed again. Does nothing
/// unless started by the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_process() {
    let Some(i) = std::env::var(ROLE)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        return;
    };
    let url = std::env::var("SEAWALL_FLEET_REDIS").unwrap();
    let addr = std::env::var("SEAWALL_FLEET_DEPENDENCY").unwrap();
    let fleet = Fleet::builder(RedisStore::new(&url).unwrap())
        .prefix("processes")
        .store_timeout(Duration::from_secs(2))
        .probe_window(Duration::from_millis(500))
        .ramp(None)
        .seed(i as u64)
        .build()
        .unwrap();
    let layer = CircuitBreakerLayer::builder("freight")
        .config(CircuitBreakerConfig {
            policy: TripPolicy::ConsecutiveFailures { threshold: 3 },
            open_for: Duration::from_secs(1),
            half_open_timeout: Duration::from_secs(2),
            ..CircuitBreakerConfig::default()
        })
        .build()
        .unwrap();
    let handle = layer.handle();
    let coordinated = fleet.coordinate(&handle).unwrap();
    let probe_handle = handle.clone();
    let svc = layer.layer(service_fn(move |_: http::Request<()>| {
        let kind = if probe_handle.state() == State::HalfOpen {
            "probe"
        } else {
            "call"
        };
        let addr = addr.clone();
        async move {
            let mut s = tokio::net::TcpStream::connect(&addr).await?;
            s.write_all(format!("{kind} {i}\n").as_bytes()).await?;
            let mut answer = String::new();
            tokio::io::BufReader::new(s).read_line(&mut answer).await?;
            if answer.trim() == "ok" {
                Ok::<_, BoxError>("quote")
            } else {
                Err::<&'static str, BoxError>("supplier down".into())
            }
        }
    }));
    let deadline = tokio::time::Instant::now() + WATCHDOG;
    let mut tripped = false;
    while !(tripped && handle.state() == State::Closed) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "instance {i}: watchdog"
        );
        tripped |= handle.state() != State::Closed;
        if let Err(e) = svc.clone().oneshot(http::Request::new(())).await {
            let open = find_rejection(&*e).is_some_and(|r| r.kind() == RejectionKind::CircuitOpen);
            assert!(
                open || e.to_string() == "supplier down",
                "instance {i}: a call failed because of something else: {e}"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(coordinated);
}
