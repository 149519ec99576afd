//! A small fleet in one process: instances with a coordinated breaker in front of
//! one shared dependency that knows which of its requests are probes.
#![allow(dead_code, unreachable_pub)] // each test file uses a part

pub mod contract;
pub mod redis_server;
pub mod servers;
pub mod supplier;
pub mod watch;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seawall_bulkhead::BulkheadLayer;
use seawall_circuit_breaker::{CircuitBreakerConfig, CircuitBreakerLayer, Handle, State};
use seawall_core::{
    find_rejection, with_reason, BoxError, ErrorsAsFailures, RejectionKind, SeededRandom, REHEARSAL,
};
use seawall_fleet::{Coordinated, Fleet, RedisStore, Store};
use tokio::time::Instant;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, Layer, ServiceExt};

pub type Svc = BoxCloneSyncService<http::Request<()>, &'static str, BoxError>;

/// Lets `d` of paused time pass with every timer firing in order: tokio's
/// auto-advance, which `advance` alone does not give to chains of timers. No real
/// time passes.
pub async fn run_for(d: Duration) {
    tokio::time::sleep(d).await;
}

/// The events `log` has of `action`, sorted: what each instance and the issuer
/// recorded of it, in an order that does not depend on who wrote first.
pub fn events(
    log: &[seawall_fleet::AuditEntry],
    action: &seawall_fleet::FleetAction,
) -> Vec<String> {
    let mut events: Vec<String> = log
        .iter()
        .filter(|e| e.action == action.id)
        .map(|e| e.event.clone())
        .collect();
    events.sort();
    events
}

/// One request that reached the dependency while its breaker was half-open.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    pub instance: usize,
    pub start: Instant,
    pub end: Instant,
}

/// The shared dependency: fails while told to, answers after `latency`, and
/// keeps the probes it received.
#[derive(Default)]
pub struct Dependency {
    failing: AtomicBool,
    /// Its failures are a rehearsal's: injected, and marked so.
    injected: AtomicBool,
    latency_ms: AtomicU64,
    calls: AtomicU64,
    probes_in_flight: AtomicUsize,
    max_probes_in_flight: AtomicUsize,
    probes: Mutex<Vec<Probe>>,
}

impl Dependency {
    pub fn new(latency: Duration) -> Arc<Self> {
        let d = Arc::new(Self::default());
        d.latency_ms
            .store(latency.as_millis() as u64, Ordering::SeqCst);
        d
    }
    pub fn fail(&self, yes: bool) {
        self.failing.store(yes, Ordering::SeqCst);
    }
    /// Marks its failures as injected by a rehearsal (the breaker's classifier
    /// gives them the reason `REHEARSAL`).
    pub fn inject(&self, yes: bool) {
        self.injected.store(yes, Ordering::SeqCst);
    }
    pub fn set_latency(&self, latency: Duration) {
        self.latency_ms
            .store(latency.as_millis() as u64, Ordering::SeqCst);
    }
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
    pub fn probes(&self) -> Vec<Probe> {
        self.probes.lock().unwrap().clone()
    }
    pub fn probes_in_flight(&self) -> usize {
        self.probes_in_flight.load(Ordering::SeqCst)
    }
    pub fn max_probes_in_flight(&self) -> usize {
        self.max_probes_in_flight.load(Ordering::SeqCst)
    }
}

/// Counts a probe in flight until dropped (answered or cancelled).
struct InFlight {
    dep: Arc<Dependency>,
    instance: usize,
    start: Instant,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.dep.probes_in_flight.fetch_sub(1, Ordering::SeqCst);
        self.dep.probes.lock().unwrap().push(Probe {
            instance: self.instance,
            start: self.start,
            end: Instant::now(),
        });
    }
}

/// What one call came back with.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub ok: u64,
    pub dependency_errors: u64,
    pub open: u64,
    /// Anything else: none must ever happen (the store never fails a call).
    pub other: u64,
}

pub struct Instance {
    pub handle: Handle,
    pub svc: Svc,
    pub coordinated: Option<Coordinated>,
    pub tally: Arc<Mutex<Tally>>,
}

impl Instance {
    pub fn state(&self) -> State {
        self.handle.state()
    }

    /// One call, recorded in the tally.
    pub async fn call(&self) {
        call_into(self.svc.clone(), Arc::clone(&self.tally)).await;
    }
}

/// One call through `svc`, recorded in `tally`.
pub async fn call_into(svc: Svc, tally: Arc<Mutex<Tally>>) {
    let result = svc.oneshot(http::Request::new(())).await;
    let mut t = tally.lock().unwrap();
    match result {
        Ok(_) => t.ok += 1,
        Err(e) => match find_rejection(&*e) {
            Some(r) if r.kind() == RejectionKind::CircuitOpen => t.open += 1,
            Some(_) => t.other += 1,
            None if e.to_string() == "supplier down" => t.dependency_errors += 1,
            None => t.other += 1,
        },
    }
}

/// The breaker every test instance runs: 3 failures in a row open it for 10 s,
/// a probe times out after 2 s.
pub fn breaker_config() -> CircuitBreakerConfig {
    CircuitBreakerConfig {
        policy: seawall_circuit_breaker::TripPolicy::ConsecutiveFailures { threshold: 3 },
        open_for: Duration::from_secs(10),
        half_open_timeout: Duration::from_secs(2),
        ..CircuitBreakerConfig::default()
    }
}

/// How an injected failure's message ends.
const INJECTED: &str = "(injected)";

/// An instance called `freight`, coordinated by `fleet` (over any store) if given.
pub fn instance<S: Store>(
    i: usize,
    dep: &Arc<Dependency>,
    fleet: Option<&Fleet<S>>,
    config: CircuitBreakerConfig,
) -> Instance {
    let layer = CircuitBreakerLayer::builder("freight")
        .config(config)
        .random_source(SeededRandom::new(1000 + i as u64))
        .classifier(with_reason(ErrorsAsFailures, |result, _| match result {
            Err(e) if e.to_string().ends_with(INJECTED) => Some(REHEARSAL),
            _ => None,
        }))
        .build()
        .unwrap();
    let handle = layer.handle();
    let coordinated = fleet.map(|f| f.coordinate(&handle).unwrap());
    let dep = Arc::clone(dep);
    let probe_handle = handle.clone();
    let inner = service_fn(move |_: http::Request<()>| {
        let dep = Arc::clone(&dep);
        dep.calls.fetch_add(1, Ordering::SeqCst);
        let in_flight = (probe_handle.state() == State::HalfOpen).then(|| {
            let n = dep.probes_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            dep.max_probes_in_flight.fetch_max(n, Ordering::SeqCst);
            InFlight {
                dep: Arc::clone(&dep),
                instance: i,
                start: Instant::now(),
            }
        });
        let failing = dep.failing.load(Ordering::SeqCst);
        let injected = dep.injected.load(Ordering::SeqCst);
        let latency = Duration::from_millis(dep.latency_ms.load(Ordering::SeqCst));
        async move {
            let _in_flight = in_flight;
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            if failing && injected {
                Err::<&'static str, BoxError>(format!("supplier down {INJECTED}").into())
            } else if failing {
                Err::<&'static str, BoxError>("supplier down".into())
            } else {
                Ok("quote")
            }
        }
    });
    Instance {
        handle,
        svc: BoxCloneSyncService::new(layer.layer(inner)),
        coordinated,
        tally: Arc::default(),
    }
}

/// A steady load: every instance takes a call every `period`, each call spawned
/// so a slow one does not hold the next back, for `d` of paused time.
pub async fn load(instances: &[Instance], period: Duration, d: Duration) {
    let end = Instant::now() + d;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if Instant::now() >= end {
            return;
        }
        for inst in instances {
            tokio::spawn(call_into(inst.svc.clone(), Arc::clone(&inst.tally)));
        }
    }
}

pub fn total(instances: &[Instance]) -> Tally {
    let mut sum = Tally::default();
    for inst in instances {
        let t = *inst.tally.lock().unwrap();
        sum.ok += t.ok;
        sum.dependency_errors += t.dependency_errors;
        sum.open += t.open;
        sum.other += t.other;
    }
    sum
}

/// Most probes in flight at the dependency at once, from the recorded intervals
/// (a probe ending at the instant another starts does not overlap it).
pub fn most_overlapping(probes: &[Probe]) -> usize {
    let mut edges: Vec<(Instant, i32)> = probes
        .iter()
        .flat_map(|p| [(p.start, 1), (p.end, -1)])
        .collect();
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

/// One instance of the cap tests over Redis: a fleet of its own (its own
/// connection to the store at `url`, store operations timing out after 250 ms) and
/// the bulkhead it caps, `freight`, of 10 active calls without a queue.
pub fn capped_instance(url: &str, prefix: &str, seed: u64) -> (Fleet<RedisStore>, BulkheadLayer) {
    let fleet = Fleet::builder(RedisStore::new(url).unwrap())
        .prefix(prefix)
        .store_timeout(Duration::from_millis(250))
        .seed(seed)
        .build()
        .unwrap();
    let layer = BulkheadLayer::builder("freight")
        .max_concurrent(10)
        .max_queue(0)
        .build()
        .unwrap();
    (fleet, layer)
}
