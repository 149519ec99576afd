//! A simulated supplier behind a bulkhead, in paused time: the model shared by the
//! `adaptive` example and its tests.
//!
//! The supplier has `c` parallel servers and a fixed service time `s`. A call that
//! finds every server busy waits in its FIFO queue, which holds up to `2c` calls;
//! beyond that it answers `503` at once. When `c` falls, running calls finish and
//! no new one starts until fewer than `c` are busy. The load is open loop (arrivals
//! at a fixed rate, whatever happened to earlier calls) and above capacity in every
//! phase, so a limit that is too high shows up as queueing and 503s, and one that is
//! too low as unused capacity.
#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seawall::bulkhead::adaptive::{AimdConfig, GradientConfig};
use seawall::bulkhead::{AdaptiveConfig, BulkheadLayer, Handle, OverloadStatus};
use seawall::core::{find_rejection, BoxError};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// The resolution of every time series (queue, throughput, limit).
pub const BUCKET: Duration = Duration::from_millis(100);
/// The window over which "settled" is judged.
pub const SETTLE_WINDOW: Duration = Duration::from_secs(2);
/// How long after a change of capacity a policy may take to settle.
pub const SETTLE_DEADLINE: Duration = Duration::from_secs(10);

/// What is simulated.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The supplier's service time `s`.
    pub service_time: Duration,
    /// Each phase's length and the supplier's servers `c` during it.
    pub phases: Vec<(Duration, usize)>,
    /// Arrivals per second (open loop).
    pub rate: u32,
}

impl Scenario {
    /// The issue's scenario: `c` = 50 → 10 → 80, 30 s each, `s` = 100 ms, 1000
    /// arrivals a second (1.25 to 10 times the capacity).
    pub fn standard() -> Self {
        Self {
            service_time: Duration::from_millis(100),
            phases: vec![
                (Duration::from_secs(30), 50),
                (Duration::from_secs(30), 10),
                (Duration::from_secs(30), 80),
            ],
            rate: 1000,
        }
    }

    fn total(&self) -> Duration {
        self.phases.iter().map(|p| p.0).sum()
    }

    fn buckets(&self) -> usize {
        (self.total().as_nanos() / BUCKET.as_nanos()) as usize
    }

    /// The capacity `c` at bucket `i`.
    fn servers_at(&self, i: usize) -> usize {
        let t = BUCKET * i as u32;
        let mut end = Duration::ZERO;
        for &(len, c) in &self.phases {
            end += len;
            if t < end {
                return c;
            }
        }
        self.phases.last().map_or(0, |p| p.1)
    }
}

/// How the bulkhead's limit is set.
#[derive(Debug, Clone, Copy)]
pub enum Policy {
    /// A fixed `max_concurrent`.
    Static(usize),
    /// An adaptive algorithm.
    Adaptive(&'static str, AdaptiveConfig),
}

impl Policy {
    pub fn label(&self) -> String {
        match self {
            Policy::Static(n) => format!("static {n}"),
            Policy::Adaptive(name, _) => (*name).to_owned(),
        }
    }
}

/// The policies compared, as an operator would configure them for this supplier.
pub fn policies(scenario: &Scenario) -> Vec<Policy> {
    vec![
        Policy::Static(200),
        Policy::Static(5),
        // AIMD learns from 503s, and from a latency above `timeout`: the supplier
        // queues before it refuses, so the timeout is what keeps that queue short.
        Policy::Adaptive(
            "aimd",
            AimdConfig {
                timeout: scenario.service_time.mul_f64(1.2),
                ..AimdConfig::default()
            }
            .into(),
        ),
        // The gradient needs no number about the supplier: its defaults.
        Policy::Adaptive("gradient", GradientConfig::default().into()),
    ]
}

/// A time series integrated over buckets.
#[derive(Debug, Clone)]
struct Integral {
    area: Vec<f64>,
    last: Duration,
    value: f64,
}

impl Integral {
    fn new(buckets: usize) -> Self {
        Self {
            area: vec![0.0; buckets],
            last: Duration::ZERO,
            value: 0.0,
        }
    }

    /// The value changes to `value` at `t` (since the start).
    fn set(&mut self, t: Duration, value: f64) {
        let mut from = self.last;
        while from < t {
            let i = (from.as_nanos() / BUCKET.as_nanos()) as usize;
            let bucket_end = BUCKET * (i as u32 + 1);
            let to = bucket_end.min(t);
            if let Some(a) = self.area.get_mut(i) {
                *a += self.value * (to - from).as_secs_f64();
            }
            from = to;
        }
        self.last = t;
        self.value = value;
    }
}

#[derive(Debug)]
struct Supplier {
    start: Instant,
    servers: usize,
    busy: usize,
    queue: VecDeque<oneshot::Sender<()>>,
    queued: Integral,
    served: Vec<u32>,
    unavailable: Vec<u32>,
}

impl Supplier {
    fn t(&self) -> Duration {
        Instant::now().saturating_duration_since(self.start)
    }

    fn bucket(&self) -> usize {
        (self.t().as_nanos() / BUCKET.as_nanos()) as usize
    }

    fn note_queue(&mut self) {
        let (t, len) = (self.t(), self.queue.len() as f64);
        self.queued.set(t, len);
    }

    /// Starts queued calls while a server is free.
    fn start_queued(&mut self) {
        while self.busy < self.servers {
            let Some(next) = self.queue.pop_front() else {
                break;
            };
            // A caller that went away leaves its place to the next one.
            if next.send(()).is_ok() {
                self.busy += 1;
            }
        }
        self.note_queue();
    }
}

enum Entry {
    Now,
    Wait(oneshot::Receiver<()>),
    Unavailable,
}

#[derive(Clone)]
struct SupplierService {
    inner: Arc<Mutex<Supplier>>,
    service_time: Duration,
}

impl SupplierService {
    fn lock(&self) -> std::sync::MutexGuard<'_, Supplier> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn call(self) -> http::Response<()> {
        let called = Instant::now();
        let entry = {
            let mut s = self.lock();
            if s.busy < s.servers {
                s.busy += 1;
                Entry::Now
            } else if s.queue.len() < 2 * s.servers {
                let (tx, rx) = oneshot::channel();
                s.queue.push_back(tx);
                s.note_queue();
                Entry::Wait(rx)
            } else {
                let b = s.bucket();
                if let Some(n) = s.unavailable.get_mut(b) {
                    *n += 1;
                }
                Entry::Unavailable
            }
        };
        match entry {
            Entry::Unavailable => return status(503),
            Entry::Wait(rx) => {
                if rx.await.is_err() {
                    return status(503);
                }
            }
            Entry::Now => {}
        }
        tokio::time::sleep(self.service_time).await;
        let mut s = self.lock();
        s.busy -= 1;
        let b = s.bucket();
        if let Some(n) = s.served.get_mut(b) {
            *n += 1;
        }
        s.start_queued();
        let mut res = status(200);
        res.extensions_mut().insert(Took(called.elapsed()));
        res
    }
}

/// How long the supplier took, from the bulkhead's call to its answer.
#[derive(Debug, Clone, Copy)]
struct Took(Duration);

fn status(code: u16) -> http::Response<()> {
    let mut res = http::Response::new(());
    *res.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
    res
}

impl Service<http::Request<()>> for SupplierService {
    type Response = http::Response<()>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<http::Response<()>, BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: http::Request<()>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.call().await) })
    }
}

/// One call the supplier served.
#[derive(Debug, Clone, Copy)]
pub struct Served {
    /// When it completed, since the start.
    pub at: Duration,
    /// From the bulkhead's call of the supplier to the answer: the supplier's queue
    /// plus `s`. This is the latency the limit governs.
    pub dependency: Duration,
    /// As the caller saw it: the bulkhead's own wait (at most `max_wait`) included.
    pub caller: Duration,
}

/// What the callers saw.
#[derive(Debug, Default)]
struct Calls {
    served: Vec<Served>,
    rejected: Vec<u32>,
}

/// Everything measured in one run, by bucket.
#[derive(Debug)]
pub struct Run {
    pub policy: String,
    pub scenario: Scenario,
    /// Mean supplier queue per bucket.
    pub queue: Vec<f64>,
    /// Calls served per bucket.
    pub served: Vec<u32>,
    /// Instant 503s per bucket.
    pub unavailable: Vec<u32>,
    /// Bulkhead rejections (full or timed out) per bucket.
    pub rejected: Vec<u32>,
    /// The bulkhead's limit at the start of each bucket.
    pub limit: Vec<usize>,
    /// Every call the supplier served.
    pub latencies: Vec<Served>,
    /// The bulkhead's peak of active calls.
    pub peak_active: usize,
}

/// Simulates `policy` through `scenario`. Run it in paused time.
pub async fn run(scenario: &Scenario, policy: Policy, seed: u64) -> Result<Run, BoxError> {
    let start = Instant::now();
    let buckets = scenario.buckets();
    let supplier = Arc::new(Mutex::new(Supplier {
        start,
        servers: scenario.phases.first().map_or(1, |p| p.1),
        busy: 0,
        queue: VecDeque::new(),
        queued: Integral::new(buckets),
        served: vec![0; buckets],
        unavailable: vec![0; buckets],
    }));
    let builder = BulkheadLayer::builder("supplier").seed(seed);
    let builder = match policy {
        Policy::Static(n) => builder.max_concurrent(n),
        Policy::Adaptive(_, config) => builder.adaptive(config),
    };
    let layer = builder.build()?.overload(OverloadStatus::default());
    let handle = layer.handle();
    let svc = layer.layer(SupplierService {
        inner: supplier.clone(),
        service_time: scenario.service_time,
    });
    let calls = Arc::new(Mutex::new(Calls {
        served: Vec::new(),
        rejected: vec![0; buckets],
    }));

    let total = scenario.total();
    let mut limit = vec![0; buckets];
    let gap = Duration::from_secs(1) / scenario.rate;
    let mut next_arrival = start;
    let mut next_bucket = start;
    let mut bucket = 0usize;
    let mut phase_end = start;
    let mut phases = scenario.phases.iter();
    loop {
        let now = Instant::now();
        if now >= phase_end {
            match phases.next() {
                Some(&(len, c)) => {
                    phase_end += len;
                    let mut s = supplier
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    s.servers = c;
                    s.start_queued();
                }
                None => break,
            }
        }
        if now >= next_bucket {
            if let Some(l) = limit.get_mut(bucket) {
                *l = handle.snapshot().limit;
            }
            bucket += 1;
            next_bucket += BUCKET;
        }
        if now >= next_arrival {
            next_arrival += gap;
            let svc = svc.clone();
            let calls = calls.clone();
            tokio::spawn(async move {
                let sent = Instant::now();
                let result = svc.oneshot(http::Request::new(())).await;
                let done = Instant::now();
                let t = done.saturating_duration_since(start);
                let mut c = calls
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match result {
                    Ok(res) if res.status() == http::StatusCode::OK => {
                        let dependency = res
                            .extensions()
                            .get::<Took>()
                            .map_or(Duration::ZERO, |t| t.0);
                        c.served.push(Served {
                            at: t,
                            dependency,
                            caller: done - sent,
                        });
                    }
                    Ok(_) => {}
                    Err(e) => {
                        if find_rejection(&*e).is_some() {
                            let b = (t.as_nanos() / BUCKET.as_nanos()) as usize;
                            if let Some(n) = c.rejected.get_mut(b) {
                                *n += 1;
                            }
                        }
                    }
                }
            });
        }
        let wake = next_arrival.min(next_bucket).min(phase_end);
        tokio::time::sleep_until(wake).await;
    }
    // Let the calls in flight finish, so every slot comes back.
    tokio::time::sleep(scenario.service_time * 40).await;
    let peak_active = handle.snapshot().peak_active;
    check_drained(&handle)?;

    let mut s = supplier
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    s.queued.set(total, 0.0);
    let queue = s
        .queued
        .area
        .iter()
        .map(|a| a / BUCKET.as_secs_f64())
        .collect();
    let c = calls
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(Run {
        policy: policy.label(),
        scenario: scenario.clone(),
        queue,
        served: s.served.clone(),
        unavailable: s.unavailable.clone(),
        rejected: c.rejected.clone(),
        limit,
        latencies: c.served.clone(),
        peak_active,
    })
}

fn check_drained(handle: &Handle) -> Result<(), BoxError> {
    let s = handle.snapshot();
    if s.active != 0 || s.queued != 0 {
        return Err(format!("slots still held after the run: {s:?}").into());
    }
    Ok(())
}

/// One phase's figures for one policy.
#[derive(Debug, Clone)]
pub struct PhaseReport {
    pub servers: usize,
    /// Time from the change of capacity until the policy is settled for the rest of
    /// the phase; `None` if it never is.
    pub settled_after: Option<Duration>,
    /// Served calls per second after settling (or, unsettled, after the deadline),
    /// as a share of capacity.
    pub throughput: f64,
    /// Dependency latency percentiles of the calls served in the same interval.
    pub p50: Duration,
    pub p99: Duration,
    /// The callers' p99 over the same calls (the bulkhead's own wait included).
    pub caller_p99: Duration,
    /// Mean supplier queue over the same interval.
    pub mean_queue: f64,
    /// Instant 503s and bulkhead rejections over the whole phase.
    pub unavailable: u64,
    pub rejected: u64,
    /// The limit's range over the same interval.
    pub limit_min: usize,
    pub limit_max: usize,
}

impl PhaseReport {
    /// The issue's goals: settled within 10 s, then p99 ≤ 2 × s and ≥ 90 % of capacity.
    pub fn meets_goals(&self, service_time: Duration) -> bool {
        self.settled_after.is_some_and(|d| d <= SETTLE_DEADLINE)
            && self.p99 <= service_time * 2
            && self.throughput >= 0.9
    }

    /// Which goals are missed, in words.
    pub fn misses(&self, service_time: Duration) -> Vec<String> {
        let mut out = Vec::new();
        match self.settled_after {
            None => out.push("never settles".to_owned()),
            Some(d) if d > SETTLE_DEADLINE => {
                out.push(format!(
                    "settles {:.1} s late",
                    (d - SETTLE_DEADLINE).as_secs_f64()
                ));
            }
            Some(_) => {}
        }
        if self.p99 > service_time * 2 {
            out.push(format!(
                "p99 {:.2} × s",
                self.p99.as_secs_f64() / service_time.as_secs_f64()
            ));
        }
        if self.throughput < 0.9 {
            out.push(format!("{:.0} % of capacity", self.throughput * 100.0));
        }
        out
    }
}

impl Run {
    fn bucket_of(t: Duration) -> usize {
        (t.as_nanos() / BUCKET.as_nanos()) as usize
    }

    /// Whether the 2 s window starting at bucket `i` is settled for capacity `c`.
    fn window_settled(&self, i: usize, c: usize) -> bool {
        let n = Self::bucket_of(SETTLE_WINDOW);
        let (Some(queue), Some(served)) = (self.queue.get(i..i + n), self.served.get(i..i + n))
        else {
            return false;
        };
        let mean_queue = queue.iter().sum::<f64>() / n as f64;
        let served: u32 = served.iter().sum();
        let capacity =
            c as f64 * SETTLE_WINDOW.as_secs_f64() / self.scenario.service_time.as_secs_f64();
        mean_queue <= (0.2 * c as f64).max(2.0) && f64::from(served) >= 0.9 * capacity
    }

    /// The per-phase figures.
    pub fn phases(&self) -> Vec<PhaseReport> {
        let mut out = Vec::new();
        let mut start = Duration::ZERO;
        for &(len, c) in &self.scenario.phases {
            let end = start + len;
            let (first, last) = (Self::bucket_of(start), Self::bucket_of(end));
            let n = Self::bucket_of(SETTLE_WINDOW);
            // The earliest window start from which every later window is settled.
            let mut settled_from = None;
            for i in (first..=last.saturating_sub(n)).rev() {
                if self.window_settled(i, c) {
                    settled_from = Some(i);
                } else {
                    break;
                }
            }
            let settled_after = settled_from.map(|i| BUCKET * (i - first) as u32);
            let from = settled_from.unwrap_or(Self::bucket_of(start + SETTLE_DEADLINE));
            let served: u32 = self.served[from..last].iter().sum();
            let secs = BUCKET.as_secs_f64() * (last - from) as f64;
            let capacity = c as f64 / self.scenario.service_time.as_secs_f64();
            let throughput = f64::from(served) / secs / capacity;
            let mean_queue = self.queue[from..last].iter().sum::<f64>() / (last - from) as f64;
            let t_from = BUCKET * from as u32;
            let calls: Vec<&Served> = self
                .latencies
                .iter()
                .filter(|c| c.at >= t_from && c.at < end)
                .collect();
            let mut dependency: Vec<Duration> = calls.iter().map(|c| c.dependency).collect();
            let mut caller: Vec<Duration> = calls.iter().map(|c| c.caller).collect();
            dependency.sort_unstable();
            caller.sort_unstable();
            let pct = |sorted: &[Duration], p: f64| {
                sorted
                    .get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1))
                    .copied()
                    .unwrap_or_default()
            };
            let limits = &self.limit[from..last];
            out.push(PhaseReport {
                servers: c,
                settled_after,
                throughput,
                p50: pct(&dependency, 0.50),
                p99: pct(&dependency, 0.99),
                caller_p99: pct(&caller, 0.99),
                mean_queue,
                unavailable: self.unavailable[first..last]
                    .iter()
                    .map(|&n| u64::from(n))
                    .sum(),
                rejected: self.rejected[first..last]
                    .iter()
                    .map(|&n| u64::from(n))
                    .sum(),
                limit_min: limits.iter().copied().min().unwrap_or(0),
                limit_max: limits.iter().copied().max().unwrap_or(0),
            });
            start = end;
        }
        out
    }
}

/// One markdown table per phase, a row per run.
pub fn tables(runs: &[Run]) -> String {
    let mut s = String::new();
    let Some(first) = runs.first() else {
        return s;
    };
    let service = first.scenario.service_time;
    let reports: Vec<Vec<PhaseReport>> = runs.iter().map(Run::phases).collect();
    let mut t = Duration::ZERO;
    for (p, &(len, c)) in first.scenario.phases.iter().enumerate() {
        let _ = writeln!(
            s,
            "### Phase {}: c = {c} ({:.0}–{:.0} s, capacity {:.0} calls/s)\n",
            p + 1,
            t.as_secs_f64(),
            (t + len).as_secs_f64(),
            c as f64 / service.as_secs_f64()
        );
        t += len;
        let _ = writeln!(
            s,
            "| policy | settled after | throughput | p50 | p99 | caller p99 | supplier queue | limit | 503s | rejections | goals |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for (run, phases) in runs.iter().zip(&reports) {
            let r = &phases[p];
            let settled = match r.settled_after {
                Some(d) => format!("{:.1} s", d.as_secs_f64()),
                None => "never".to_owned(),
            };
            let ratio = |d: Duration| d.as_secs_f64() / service.as_secs_f64();
            let misses = r.misses(service);
            let goals = if misses.is_empty() {
                "met".to_owned()
            } else {
                format!("missed: {}", misses.join(", "))
            };
            let limit = if r.limit_min == r.limit_max {
                r.limit_min.to_string()
            } else {
                format!("{}–{}", r.limit_min, r.limit_max)
            };
            let _ = writeln!(
                s,
                "| {} | {settled} | {:.0} % | {:.2} × s | {:.2} × s | {:.2} × s | {:.1} | {limit} | {} | {} | {goals} |",
                run.policy,
                r.throughput * 100.0,
                ratio(r.p50),
                ratio(r.p99),
                ratio(r.caller_p99),
                r.mean_queue,
                r.unavailable,
                r.rejected,
            );
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(
        s,
        "s = {} ms. Throughput, latency, supplier queue and limit are measured from the time the policy settled to the end of the phase (from 10 s after the change when it never settled); 503s and bulkhead rejections over the whole phase. p50 and p99 are the dependency's latency (from the bulkhead's call to the answer: the supplier's queue plus s), which the limit governs; the caller's p99 adds the bulkhead's own wait (at most `max_wait`, 20 ms). Settled: every 2 s window from then on has a mean supplier queue ≤ max(2, 0.2 c) and throughput ≥ 0.9 × capacity. Goals: settled within 10 s, then p99 ≤ 2 × s and ≥ 90 % of capacity.",
        service.as_millis()
    );
    s
}

/// An SVG of each run's limit against the supplier's capacity `c` over time.
pub fn svg(runs: &[Run]) -> String {
    const W: f64 = 960.0;
    const H: f64 = 420.0;
    const LEFT: f64 = 50.0;
    const RIGHT: f64 = 150.0;
    const TOP: f64 = 20.0;
    const BOTTOM: f64 = 40.0;
    let mut s = String::new();
    let Some(first) = runs.first() else {
        return s;
    };
    let n = first.limit.len().max(2) - 1;
    let top_value = runs
        .iter()
        .flat_map(|r| r.limit.iter().copied())
        .chain(first.scenario.phases.iter().map(|p| p.1))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.05;
    let x = |i: usize| LEFT + (i as f64 / n as f64) * (W - LEFT - RIGHT);
    let y = |v: f64| TOP + (1.0 - v / top_value) * (H - TOP - BOTTOM);
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    // Axes and grid.
    let step = if top_value > 100.0 { 50 } else { 10 };
    let mut v = 0;
    while (v as f64) < top_value {
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#e0e0e0\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v}</text>",
            W - RIGHT,
            y(v as f64),
            y(v as f64),
            LEFT - 6.0,
            y(v as f64) + 4.0
        );
        v += step;
    }
    let secs = (BUCKET * n as u32).as_secs();
    for t in (0..=secs).step_by(10) {
        let i = (t as f64 / BUCKET.as_secs_f64()) as usize;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{t} s</text>"#,
            x(i),
            H - BOTTOM + 18.0
        );
    }
    // Capacity c, then each run's limit.
    let cap: Vec<f64> = (0..=n)
        .map(|i| first.scenario.servers_at(i) as f64)
        .collect();
    let mut series = vec![("capacity c".to_owned(), "#000000", 3.0, cap)];
    let colours = [
        "#d62728", "#9467bd", "#1f77b4", "#2ca02c", "#ff7f0e", "#8c564b",
    ];
    for (k, r) in runs.iter().enumerate() {
        series.push((
            format!("{} limit", r.policy),
            colours[k % colours.len()],
            1.5,
            r.limit.iter().map(|&l| l as f64).collect(),
        ));
    }
    for (k, (label, colour, width, values)) in series.iter().enumerate() {
        let mut d = String::new();
        for (i, v) in values.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1} ",
                if i == 0 { "M" } else { "L" },
                x(i),
                y(*v)
            );
        }
        let _ = writeln!(
            s,
            r#"<path d="{d}" fill="none" stroke="{colour}" stroke-width="{width}"/>"#
        );
        let ly = TOP + 16.0 * k as f64 + 10.0;
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="{width}"/><text x="{:.1}" y="{:.1}">{label}</text>"#,
            W - RIGHT + 8.0,
            W - RIGHT + 28.0,
            W - RIGHT + 32.0,
            ly + 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="14">bulkhead limit against supplier capacity c (s = {} ms, load {} calls/s)</text>"#,
        first.scenario.service_time.as_millis(),
        first.scenario.rate
    );
    let _ = writeln!(s, "</svg>");
    s
}
