//! The fleet-wide cap in simulation: N instances, each with a bulkhead capped
//! through one `LocalStore`, in front of a supplier that counts its concurrent
//! calls, with demand moving from one group of instances to the next, in paused
//! time (deterministic: seeded draws, one thread, a paused clock).
#![allow(dead_code, unreachable_pub)] // shared by the example and its test, each using a part

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall::bulkhead::{BulkheadLayer, Handle};
use seawall::core::{find_rejection, BoxError, RejectionKind};
use seawall::fleet::{CapConfig, CapMode, Capped, Faults, Fleet, LocalStore};
use tokio::time::{sleep, sleep_until, Instant};
use tower::util::BoxCloneSyncService;
use tower::{service_fn, Layer, ServiceExt};

/// What the store does during a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StoreCase {
    /// Answers every operation after the configured latency.
    Healthy,
    /// Loses this share of operations (requests or answers).
    Lossy(f64),
    /// Down for `outage` from the middle of the run.
    Outage,
}

/// One run's parameters.
#[derive(Debug, Clone)]
pub struct CapSim {
    pub instances: usize,
    /// G.
    pub cap: u32,
    pub mode: CapMode,
    pub store: StoreCase,
    /// Each instance's own bulkhead limit.
    pub own_limit: usize,
    /// Instances with saturating demand at any time; the group moves every `phase`.
    pub hot: usize,
    pub phase: Duration,
    pub phases: usize,
    /// A hot instance calls this often (saturating: more than its own limit
    /// would be busy at the supplier's latency).
    pub hot_every: Duration,
    /// A cold instance calls this often, or not at all (`None`).
    pub cold_every: Option<Duration>,
    pub supplier_latency: Duration,
    pub renew_every: Duration,
    pub ttl: Duration,
    pub store_latency: Duration,
    pub outage: Duration,
    pub seed: u64,
}

impl CapSim {
    /// 100 instances sharing G = 64, 20 of them hot at a time (each could use 8:
    /// 160 wanted), the hot group moving every 10 s.
    pub fn new(store: StoreCase, mode: CapMode) -> Self {
        Self {
            instances: 100,
            cap: 64,
            mode,
            store,
            own_limit: 8,
            hot: 20,
            phase: Duration::from_secs(10),
            phases: 6,
            hot_every: Duration::from_millis(5),
            cold_every: None,
            supplier_latency: Duration::from_millis(50),
            renew_every: Duration::from_millis(500),
            ttl: Duration::from_millis(1500),
            store_latency: Duration::from_millis(1),
            outage: Duration::from_secs(5),
            seed: 1,
        }
    }

    pub fn label(&self) -> String {
        let store = match self.store {
            StoreCase::Healthy => "store healthy".to_owned(),
            StoreCase::Lossy(p) => format!("{:.0} % store loss", p * 100.0),
            StoreCase::Outage => format!("store down {:?}", self.outage),
        };
        match self.mode {
            CapMode::Strict => format!("strict, {store}"),
            CapMode::Divided { floor } => format!("divided (floor {floor}), {store}"),
            CapMode::Available { local_share } => {
                format!("available (local share {local_share}), {store}")
            }
        }
    }

    fn end(&self) -> Duration {
        self.phase * self.phases as u32
    }

    fn outage_window(&self) -> Option<(Duration, Duration)> {
        (self.store == StoreCase::Outage).then(|| {
            // Mid-phase, so the outage and a move of the hot group do not coincide.
            let from = self.phase * (self.phases / 2) as u32 + self.phase / 3;
            (from, from + self.outage)
        })
    }
}

/// One sample of the fleet, every 100 ms.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub at: Duration,
    /// The most calls at the supplier at once in the 100 ms before (every change).
    pub concurrency: usize,
    /// The allotments summed across the instances at the sample.
    pub allotted: usize,
    /// The allotments of the instances hot at the sample.
    pub hot_allotted: usize,
}

#[derive(Debug, Clone, Default)]
pub struct CapRun {
    pub samples: Vec<Sample>,
    /// The most calls at the supplier at once over the run (every change).
    pub most: usize,
    /// Busy slot-time at the supplier over the saturated stretches, over G × their length.
    pub used: f64,
    /// After each move of the hot group: until the new group held 90 % of G.
    pub follow: Vec<Duration>,
    pub served: u64,
    pub full: u64,
    /// Calls failed for anything but a full bulkhead: none ever should.
    pub other: u64,
    pub store_ops: u64,
    /// Claims sent between renewals on the store's word that slots were freed.
    pub early_claims: u64,
    pub lapses: u64,
    /// The longest any call took (a call never waits on the store).
    pub longest_call: Duration,
}

#[derive(Default)]
struct Supplier {
    now: AtomicUsize,
    most: AtomicUsize,
    window_most: AtomicUsize,
    /// Busy slot-time, in microseconds of calls ended.
    busy_us: AtomicU64,
}

struct Tally {
    served: AtomicU64,
    full: AtomicU64,
    other: AtomicU64,
    longest_us: AtomicU64,
}

struct Node {
    handle: Handle,
    capped: Capped,
}

/// Runs one simulation on a fresh paused, single-threaded runtime.
pub fn run(sim: &CapSim) -> Result<CapRun, BoxError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    rt.block_on(simulate(sim))
}

fn hot_group(sim: &CapSim, phase: usize) -> std::ops::Range<usize> {
    let first = (phase * sim.hot) % sim.instances;
    first..first + sim.hot
}

fn is_hot(sim: &CapSim, phase: usize, i: usize) -> bool {
    let g = hot_group(sim, phase);
    g.contains(&i) || g.contains(&(i + sim.instances))
}

async fn simulate(sim: &CapSim) -> Result<CapRun, BoxError> {
    let start = Instant::now();
    let store = LocalStore::with_seed(sim.seed);
    let mut faults = Faults::latency(sim.store_latency);
    if let StoreCase::Lossy(p) = sim.store {
        faults = faults
            .with_loss(p)
            .with_latency_jitter(sim.store_latency * 2);
    }
    store.set_faults(faults)?;
    let fleet = Fleet::builder(store.clone())
        .store_timeout(Duration::from_millis(100))
        .seed(sim.seed)
        .build()?;
    let config = CapConfig::new(sim.cap)
        .renew_every(sim.renew_every)
        .ttl(sim.ttl)
        .longest_call(sim.supplier_latency * 2)
        .mode(sim.mode);
    let supplier = Arc::new(Supplier::default());
    let tally = Arc::new(Tally {
        served: AtomicU64::new(0),
        full: AtomicU64::new(0),
        other: AtomicU64::new(0),
        longest_us: AtomicU64::new(0),
    });
    let phase_now = Arc::new(AtomicUsize::new(0));
    let mut nodes = Vec::with_capacity(sim.instances);
    for i in 0..sim.instances {
        // Instances started over one period, as a real fleet's are: their
        // renewals spread over T, so every move meets every alignment.
        sleep_until(start + sim.renew_every.mul_f64(i as f64 / sim.instances as f64)).await;
        let layer = BulkheadLayer::builder("supplier")
            .max_concurrent(sim.own_limit)
            .max_queue(0)
            .build()?;
        let handle = layer.handle();
        let capped = fleet.cap(&handle, config)?;
        let s = Arc::clone(&supplier);
        let latency = sim.supplier_latency;
        let svc: BoxCloneSyncService<(), (), BoxError> =
            BoxCloneSyncService::new(layer.layer(service_fn(move |()| {
                let s = Arc::clone(&s);
                async move {
                    let n = s.now.fetch_add(1, Ordering::Relaxed) + 1;
                    s.most.fetch_max(n, Ordering::Relaxed);
                    s.window_most.fetch_max(n, Ordering::Relaxed);
                    sleep(latency).await;
                    s.now.fetch_sub(1, Ordering::Relaxed);
                    s.busy_us
                        .fetch_add(latency.as_micros() as u64, Ordering::Relaxed);
                    Ok::<(), BoxError>(())
                }
            })));
        // The instance's callers: hot ones call every `hot_every`, cold ones every
        // `cold_every` if at all.
        let (tally, phase_now) = (Arc::clone(&tally), Arc::clone(&phase_now));
        let sim_c = sim.clone();
        let end = start + sim.end();
        tokio::spawn(async move {
            // Spread the cold callers over the second.
            sleep(Duration::from_millis((i as u64 * 7919) % 1000)).await;
            while Instant::now() < end {
                let hot = is_hot(&sim_c, phase_now.load(Ordering::Relaxed), i);
                let pause = match (hot, sim_c.cold_every) {
                    (true, _) => sim_c.hot_every,
                    (false, Some(every)) => every,
                    (false, None) => {
                        // Idle: look again shortly for the group to move here.
                        sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let svc = svc.clone();
                let tally = Arc::clone(&tally);
                tokio::spawn(async move {
                    let began = Instant::now();
                    let result = svc.oneshot(()).await;
                    let took = began.elapsed().as_micros() as u64;
                    tally.longest_us.fetch_max(took, Ordering::Relaxed);
                    match result {
                        Ok(()) => tally.served.fetch_add(1, Ordering::Relaxed),
                        Err(e) => match find_rejection(&*e).map(|r| r.kind()) {
                            Some(RejectionKind::BulkheadFull) => {
                                tally.full.fetch_add(1, Ordering::Relaxed)
                            }
                            _ => tally.other.fetch_add(1, Ordering::Relaxed),
                        },
                    };
                });
                sleep(pause).await;
            }
        });
        nodes.push(Node { handle, capped });
    }

    let mut out = CapRun::default();
    let outage = sim.outage_window();
    let tick = Duration::from_millis(100);
    let mut phase = 0;
    let mut moved_at: Option<Duration> = None;
    let mut saturated_us: u64 = 0;
    let mut busy_before = 0u64;
    // The first phase's settling (a new store hands out nothing new for one TTL)
    // and any store outage are not saturated stretches of a working cap.
    while Instant::now() - start < sim.end() {
        sleep(tick).await;
        let at = Instant::now() - start;
        if let Some((from, until)) = outage {
            if at >= from && at < from + tick {
                store.go_down();
            }
            if at >= until && at < until + tick {
                store.come_up();
            }
        }
        let next_phase = ((at.as_nanos() / sim.phase.as_nanos()) as usize).min(sim.phases - 1);
        if next_phase != phase {
            phase = next_phase;
            phase_now.store(phase, Ordering::Relaxed);
            moved_at = Some(at);
        }
        let allotted: usize = nodes.iter().map(|n| n.handle.snapshot().limit).sum();
        let hot_allotted: usize = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| is_hot(sim, phase, *i))
            .map(|(_, n)| n.handle.snapshot().limit)
            .sum();
        if let Some(m) = moved_at {
            if hot_allotted as f64 >= 0.9 * f64::from(sim.cap) {
                out.follow.push(at - m);
                moved_at = None;
            }
        }
        let busy = supplier.busy_us.load(Ordering::Relaxed);
        let in_outage = outage.is_some_and(|(from, until)| at >= from && at < until + sim.ttl);
        // Saturated stretches: past the settling of the first second and the
        // outage's recovery.
        if at > Duration::from_secs(2) && !in_outage {
            saturated_us += tick.as_micros() as u64;
            out.used += (busy - busy_before) as f64;
        }
        busy_before = busy;
        out.samples.push(Sample {
            at,
            concurrency: supplier
                .window_most
                .swap(supplier.now.load(Ordering::Relaxed), Ordering::Relaxed),
            allotted,
            hot_allotted,
        });
    }
    sleep(sim.supplier_latency * 2).await;
    out.used /= saturated_us.max(1) as f64 * f64::from(sim.cap);
    out.most = supplier.most.load(Ordering::Relaxed);
    out.served = tally.served.load(Ordering::Relaxed);
    out.full = tally.full.load(Ordering::Relaxed);
    out.other = tally.other.load(Ordering::Relaxed);
    out.store_ops = store.ops();
    out.lapses = nodes.iter().map(|n| n.capped.snapshot().lapses).sum();
    out.early_claims = nodes.iter().map(|n| n.capped.snapshot().early_claims).sum();
    out.longest_call = Duration::from_micros(tally.longest_us.load(Ordering::Relaxed));
    Ok(out)
}

/// The cap's table: one row per run.
pub fn table(runs: &[(CapSim, CapRun)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| N | G | mode, store | peak concurrency | G used while saturated | demand moved → 90 % of G there (slowest, median) | calls served | refused full | store ops (claims and subscriptions; per call: 0) | per instance per s (early claims) | lapses | longest call | calls failed by the store |"
    );
    let _ = writeln!(
        s,
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (sim, r) in runs {
        let mut moves = r.follow.clone();
        moves.sort_unstable();
        let follow = match (moves.last(), moves.get(moves.len() / 2)) {
            (Some(most), Some(median)) => format!(
                "{:.2} s, median {:.2} s",
                most.as_secs_f64(),
                median.as_secs_f64()
            ),
            _ => "never".to_owned(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} % | {follow} ({} moves) | {} | {} | {} | {:.2} ({}) | {} | {:?} | {} |",
            sim.instances,
            sim.cap,
            sim.label(),
            r.most,
            r.used * 100.0,
            r.follow.len(),
            r.served,
            r.full,
            r.store_ops,
            r.store_ops as f64 / (sim.instances as f64 * sim.end().as_secs_f64()),
            r.early_claims,
            r.lapses,
            r.longest_call,
            r.other,
        );
    }
    s
}

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 200.0;
const ROW: f64 = 140.0;

/// One band per run: G (grey), the allotments summed (orange), the supplier's
/// real concurrency (blue, the most in each 100 ms).
pub fn svg(runs: &[(CapSim, CapRun)]) -> String {
    let Some((first, _)) = runs.first() else {
        return String::new();
    };
    let span = first.end().as_secs_f64().max(0.001);
    let x = |t: Duration| LEFT + t.as_secs_f64() / span * (WIDTH - LEFT - 20.0);
    let height = 60.0 + ROW * runs.len() as f64;
    let mut s = super::report::start_svg(WIDTH, height);
    let _ = writeln!(
        s,
        r#"<text x="8" y="16">N = {}, G = {}: G (grey), allotments summed (orange), supplier concurrency, most per 100 ms (blue); the hot group moves every {:?}</text>"#,
        first.instances, first.cap, first.phase
    );
    super::report::time_axis(&mut s, span, height, x, "#eeeeee");
    for (row, (sim, run)) in runs.iter().enumerate() {
        let top = 44.0 + ROW * row as f64;
        let bottom = top + ROW - 24.0;
        let scale = f64::from(sim.cap) * 1.5;
        let y = |v: f64| bottom - (v / scale).min(1.0) * (ROW - 40.0);
        let _ = writeln!(
            s,
            r#"<text x="8" y="{:.1}">{}</text>"#,
            top + 20.0,
            sim.label()
        );
        if let Some((from, until)) = sim.outage_window() {
            let _ = writeln!(
                s,
                r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#fbeaea"/>"##,
                x(from),
                top,
                x(until) - x(from),
                bottom - top
            );
        }
        let g = y(f64::from(sim.cap));
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{g:.1}" x2="{:.1}" y2="{g:.1}" stroke="#999999" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="#999999">G = {}</text>"##,
            WIDTH - 20.0,
            LEFT - 40.0,
            g + 4.0,
            sim.cap
        );
        for (colour, pick) in [
            ("#e08a1e", (|p: &Sample| p.allotted) as fn(&Sample) -> usize),
            ("#2b6cb0", |p: &Sample| p.concurrency),
        ] {
            let mut path = String::new();
            for (k, p) in run.samples.iter().enumerate() {
                let _ = write!(
                    path,
                    "{}{:.1},{:.1} ",
                    if k == 0 { "M" } else { "L" },
                    x(p.at),
                    y(pick(p) as f64)
                );
            }
            let _ = writeln!(
                s,
                r#"<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>"#
            );
        }
    }
    let _ = writeln!(s, "</svg>");
    s
}
