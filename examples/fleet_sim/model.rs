//! The fleet simulation's model: N instances, each with a circuit breaker in front
//! of one shared dependency that fails for a while and recovers, under a steady
//! load, in paused time. Deterministic: every random draw is seeded, and the
//! runtime is single-threaded with its clock paused.
#![allow(dead_code, unreachable_pub)] // shared by the example and its test, each using a part

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use seawall::circuit_breaker::{
    CircuitBreaker, CircuitBreakerConfig, CircuitBreakerLayer, Handle, State,
};
use seawall::core::{find_rejection, BoxError, ErrorsAsFailures, RejectionKind, SeededRandom};
use seawall::fleet::{Coordinated, Faults, Fleet, LocalStore};
use tokio::time::Instant;
use tower::{Layer, Service};

/// How the instances' breakers decide when to probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Each breaker alone, with the breaker's defaults (no jitter, no ramp).
    Local,
    /// Each breaker alone, its open interval jittered by up to 20 %.
    LocalJitter,
    /// Coordinated through one store: probe lease, verdicts, fleet defaults
    /// (jitter 20 %, ramp 10 s from 10 %).
    Fleet {
        /// Chance that a store operation is lost.
        loss: f64,
        /// Chance that a pushed verdict is lost.
        push_loss: f64,
    },
}

impl Mode {
    pub fn label(&self) -> String {
        match *self {
            Mode::Local => "local, no jitter".into(),
            Mode::LocalJitter => "local, jitter 20 %".into(),
            Mode::Fleet { loss, push_loss } => {
                let mut s = String::from("fleet lease");
                if push_loss >= 1.0 {
                    s.push_str(", pushes lost");
                } else if push_loss > 0.0 {
                    s.push_str(&format!(", {:.0} % pushes lost", push_loss * 100.0));
                }
                if loss > 0.0 {
                    s.push_str(&format!(", {:.0} % store loss", loss * 100.0));
                }
                s
            }
        }
    }
}

/// One run's parameters.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub instances: usize,
    pub mode: Mode,
    /// Calls per second on each instance.
    pub rps: u32,
    /// One-way store delay.
    pub store_latency: Duration,
    /// The dependency's response time.
    pub dependency_latency: Duration,
    /// Healthy load before the dependency fails.
    pub warmup: Duration,
    /// How long the dependency fails.
    pub outage: Duration,
    /// How long the run goes on after the dependency recovered.
    pub after: Duration,
    pub seed: u64,
}

impl SimConfig {
    pub fn new(instances: usize, mode: Mode) -> Self {
        Self {
            instances,
            mode,
            rps: 10,
            store_latency: Duration::from_millis(1),
            dependency_latency: Duration::from_millis(20),
            warmup: Duration::from_secs(5),
            outage: Duration::from_secs(60),
            after: Duration::from_secs(40),
            seed: 1,
        }
    }
}

/// The breaker of every instance: the last 10 outcomes, 5 failures among them
/// open it for 10 s; a probe counts as failed after 2 s.
pub fn breaker_config(mode: Mode) -> CircuitBreakerConfig {
    CircuitBreakerConfig {
        open_for: Duration::from_secs(10),
        half_open_timeout: Duration::from_secs(2),
        // `Local` shows a fleet without jitter (set off explicitly); a coordinated
        // breaker sets none and takes the fleet's.
        jitter: match mode {
            Mode::Local => Some(0.0),
            Mode::LocalJitter => Some(0.2),
            Mode::Fleet { .. } => None,
        },
        ..CircuitBreakerConfig::default()
    }
}

/// What the run saw.
#[derive(Debug, Default, Clone)]
pub struct Observations {
    pub instances: usize,
    pub rps: u32,
    pub open_for: Duration,
    pub jitter: f64,
    /// Since the start of the run.
    pub fail_at: Duration,
    pub recover_at: Duration,
    pub end: Duration,
    /// When each call reached the dependency.
    pub dependency_calls: Vec<Duration>,
    /// Probes that reached the dependency: (when, instance, succeeded).
    pub probes: Vec<(Duration, usize, bool)>,
    /// Breaker transitions: (when, instance, new state).
    pub transitions: Vec<(Duration, usize, State)>,
    /// Calls that failed for anything but the dependency's own error or an open
    /// breaker: none ever should.
    pub other_errors: u64,
    pub store_ops: u64,
    pub store_errors: u64,
    pub closed_at_end: usize,
}

/// A lock nobody panics under (a poisoned one is still consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct DepState {
    start: Instant,
    fail_from: Instant,
    fail_until: Instant,
    latency: Duration,
    calls: Mutex<Vec<Duration>>,
    probes: Mutex<Vec<(Duration, usize, bool)>>,
}

/// The dependency as one instance's breaker sees it.
#[derive(Clone)]
struct Dependency {
    state: Arc<DepState>,
    instance: usize,
    handle: Handle,
}

type DepFuture = Pin<Box<dyn Future<Output = Result<&'static str, BoxError>> + Send>>;

impl Service<http::Request<()>> for Dependency {
    type Response = &'static str;
    type Error = BoxError;
    type Future = DepFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: http::Request<()>) -> DepFuture {
        let s = &self.state;
        let now = Instant::now();
        let at = now - s.start;
        lock(&s.calls).push(at);
        let failing = now >= s.fail_from && now < s.fail_until;
        if self.handle.state() == State::HalfOpen {
            lock(&s.probes).push((at, self.instance, !failing));
        }
        let latency = s.latency;
        Box::pin(async move {
            tokio::time::sleep(latency).await;
            if failing {
                Err("supplier down".into())
            } else {
                Ok("quote")
            }
        })
    }
}

struct Node {
    svc: CircuitBreaker<Dependency, ErrorsAsFailures>,
    handle: Handle,
    _coordinated: Option<Coordinated>,
}

fn tally(result: &Result<&'static str, BoxError>, other: &AtomicU64) {
    if let Err(e) = result {
        let expected = match find_rejection(&**e) {
            Some(r) => r.kind() == RejectionKind::CircuitOpen,
            None => e.to_string() == "supplier down",
        };
        if !expected {
            other.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs one simulation on a fresh paused, single-threaded runtime.
pub fn run(config: &SimConfig) -> Result<Observations, BoxError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    rt.block_on(simulate(config))
}

async fn simulate(config: &SimConfig) -> Result<Observations, BoxError> {
    let start = Instant::now();
    let fail_from = start + config.warmup;
    let fail_until = fail_from + config.outage;
    let end = fail_until + config.after;
    let dep = Arc::new(DepState {
        start,
        fail_from,
        fail_until,
        latency: config.dependency_latency,
        calls: Mutex::new(Vec::new()),
        probes: Mutex::new(Vec::new()),
    });
    let store = LocalStore::with_seed(config.seed);
    let fleet = match config.mode {
        Mode::Fleet { loss, push_loss } => {
            store.set_faults(
                Faults::latency(config.store_latency)
                    .with_loss(loss)
                    .with_push_loss(push_loss),
            )?;
            Some(Fleet::builder(store.clone()).seed(config.seed).build()?)
        }
        Mode::Local | Mode::LocalJitter => None,
    };
    let transitions: Arc<Mutex<Vec<(Duration, usize, State)>>> = Arc::default();
    let mut nodes = Vec::with_capacity(config.instances);
    for i in 0..config.instances {
        let layer = CircuitBreakerLayer::builder("supplier")
            .config(breaker_config(config.mode))
            .random_source(SeededRandom::new(
                config.seed ^ ((i as u64 + 1) * 0x9e37_79b9),
            ))
            .build()?;
        let handle = layer.handle();
        let coordinated = match &fleet {
            Some(f) => Some(f.coordinate(&handle)?),
            None => None,
        };
        let mut events = handle.subscribe();
        let log = Arc::clone(&transitions);
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(t) => lock(&log).push((Instant::now() - start, i, t.to)),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        let svc = layer.layer(Dependency {
            state: Arc::clone(&dep),
            instance: i,
            handle: handle.clone(),
        });
        nodes.push(Node {
            svc,
            handle,
            _coordinated: coordinated,
        });
    }

    // The load: every instance calls every `period`, at its own whole-millisecond
    // offset; calls that do not finish at once run as tasks.
    let period = Duration::from_secs(1) / config.rps.max(1);
    let period_ms = period.as_millis().max(1) as u64;
    let mut rng = fastrand::Rng::with_seed(config.seed.wrapping_mul(31).wrapping_add(7));
    let mut calendar: BinaryHeap<Reverse<(Instant, usize)>> = (0..config.instances)
        .map(|i| Reverse((start + Duration::from_millis(rng.u64(0..period_ms)), i)))
        .collect();
    let other = Arc::new(AtomicU64::new(0));
    let mut cx = Context::from_waker(Waker::noop());
    while let Some(Reverse((at, i))) = calendar.pop() {
        if at >= end {
            break;
        }
        if at > Instant::now() {
            tokio::time::sleep_until(at).await;
        }
        calendar.push(Reverse((at + period, i)));
        let node = &mut nodes[i];
        if node.svc.poll_ready(&mut cx).is_pending() {
            continue;
        }
        let mut call = Box::pin(node.svc.call(http::Request::new(())));
        match call.as_mut().poll(&mut cx) {
            Poll::Ready(result) => tally(&result, &other),
            Poll::Pending => {
                let other = Arc::clone(&other);
                tokio::spawn(async move { tally(&call.await, &other) });
            }
        }
    }
    // Let the calls in flight finish.
    tokio::time::sleep(config.dependency_latency * 2).await;

    let store_errors = nodes
        .iter()
        .filter_map(|n| n._coordinated.as_ref())
        .map(|c| c.snapshot().store_errors)
        .sum();
    let closed_at_end = nodes
        .iter()
        .filter(|n| n.handle.state() == State::Closed)
        .count();
    let config_b = breaker_config(config.mode);
    let mut transitions = lock(&transitions).clone();
    transitions.sort_by_key(|t| t.0);
    let mut probes = lock(&dep.probes).clone();
    probes.sort_by_key(|p| p.0);
    let dependency_calls = lock(&dep.calls).clone();
    Ok(Observations {
        instances: config.instances,
        rps: config.rps,
        open_for: config_b.open_for,
        jitter: match config.mode {
            Mode::Local => 0.0,
            Mode::LocalJitter => config_b.effective_jitter(),
            Mode::Fleet { .. } => 0.2,
        },
        fail_at: config.warmup,
        recover_at: config.warmup + config.outage,
        end: end - start,
        dependency_calls,
        probes,
        transitions,
        other_errors: other.load(Ordering::Relaxed),
        store_ops: if fleet.is_some() { store.ops() } else { 0 },
        store_errors,
        closed_at_end,
    })
}

/// The figures the table prints, and the tests assert.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// Most probes reaching the dependency in any window as long as the configured
    /// open interval, from the failure until every instance closed.
    pub probes_per_interval: usize,
    /// Most probes in any 100 ms.
    pub probes_per_100ms: usize,
    pub total_probes: usize,
    /// From the dependency's recovery to the first probe that found it healthy.
    pub recovery_to_first_good_probe: Option<Duration>,
    /// From that probe to the instant every instance was closed.
    pub first_good_probe_to_all_closed: Option<Duration>,
    /// From the recovery to every instance closed.
    pub recovery_to_all_closed: Option<Duration>,
    /// Calls reaching the dependency in the second after the first good probe.
    pub load_first_second: usize,
    /// The steady load the fleet sends while closed, per second.
    pub steady_load: usize,
}

/// Most items of sorted `times` in any window `[t, t + width)`.
fn most_within(times: &[Duration], width: Duration) -> usize {
    let mut most = 0;
    let mut first = 0;
    for (last, t) in times.iter().enumerate() {
        while *t - times[first] >= width {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most
}

impl Observations {
    pub fn figures(&self) -> Figures {
        let first_good = self
            .probes
            .iter()
            .find(|p| p.2 && p.0 >= self.recover_at)
            .map(|p| p.0);
        // Every instance closed: the last move into closed after the recovery, if
        // all of them ended closed.
        let all_closed = (self.closed_at_end == self.instances)
            .then(|| {
                self.transitions
                    .iter()
                    .filter(|t| t.2 == State::Closed && t.0 >= self.recover_at)
                    .map(|t| t.0)
                    .max()
            })
            .flatten();
        let until = all_closed.unwrap_or(self.end);
        let outage_probes: Vec<Duration> = self
            .probes
            .iter()
            .filter(|p| p.0 >= self.fail_at && p.0 <= until)
            .map(|p| p.0)
            .collect();
        let load_first_second = first_good.map_or(0, |g| {
            self.dependency_calls
                .iter()
                .filter(|c| **c >= g && **c < g + Duration::from_secs(1))
                .count()
        });
        Figures {
            probes_per_interval: most_within(&outage_probes, self.open_for),
            probes_per_100ms: most_within(&outage_probes, Duration::from_millis(100)),
            total_probes: outage_probes.len(),
            recovery_to_first_good_probe: first_good.map(|g| g - self.recover_at),
            first_good_probe_to_all_closed: match (first_good, all_closed) {
                (Some(g), Some(c)) => Some(c.saturating_sub(g)),
                _ => None,
            },
            recovery_to_all_closed: all_closed.map(|c| c - self.recover_at),
            load_first_second,
            steady_load: self.instances * self.rps as usize,
        }
    }
}
