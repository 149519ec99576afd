//! The overload simulation of the `overload` example: one bulkhead in front of one
//! supplier of fixed capacity, open-loop Poisson arrivals of three classes, in paused
//! time. Deterministic: the same arrivals for every policy, on every machine.
//!
//! The supplier: 10 calls at once, 50 ms each (capacity 200 calls/s); the bulkhead
//! lets 10 in and queues 100 more. Every call has a 300 ms deadline, and its class
//! is critical for 10 % of the arrivals, default for 30 % and sheddable for 60 %
//! (critical 0.3×, default 0.9×, sheddable 1.8× at 3× load).
#![allow(dead_code, unreachable_pub)]

use std::cell::RefCell;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::Duration;

use seawall::bulkhead::{BulkheadLayer, ControlledDelay, QueuePolicy};
use seawall::core::{BoxError, Criticality, Deadline};
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};

/// What the supplier serves at once, and how long each call takes.
const SERVERS: usize = 10;
const SERVICE: Duration = Duration::from_millis(50);
/// Calls per second the supplier can serve.
const CAPACITY: f64 = SERVERS as f64 / 0.05;
const BUDGET: Duration = Duration::from_millis(300);
const RUN: Duration = Duration::from_secs(10);
/// The offered loads, in multiples of the supplier's capacity.
pub const LOADS: [f64; 6] = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0];

/// A queue policy of the bulkhead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// First in, first out, the default.
    Fifo,
    /// Controlled delay with adaptive LIFO (100 ms interval, 5 ms target).
    ControlledDelay,
    /// Classes with the default shares (default 90 %, sheddable 50 %).
    Classes,
    /// Classes and the controlled delay together.
    ClassesControlledDelay,
}

impl Policy {
    /// Every policy, in the table's order.
    pub const ALL: [Policy; 4] = [
        Self::Fifo,
        Self::ControlledDelay,
        Self::Classes,
        Self::ClassesControlledDelay,
    ];

    /// Its name in the table and the chart.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fifo => "FIFO",
            Self::ControlledDelay => "CoDel+LIFO",
            Self::Classes => "classes",
            Self::ClassesControlledDelay => "classes+CoDel",
        }
    }

    fn delayed(self) -> bool {
        matches!(self, Self::ControlledDelay | Self::ClassesControlledDelay)
    }
}

/// One point: a policy, a `max_wait`, a load.
#[derive(Debug)]
pub struct Point {
    /// The queue policy.
    pub policy: Policy,
    /// The bulkhead's `max_wait`.
    pub max_wait: Duration,
    /// Offered load, in multiples of the supplier's capacity.
    pub load: f64,
    /// Calls served within their deadline per second.
    pub goodput: f64,
    /// Of the critical calls offered, the share served within their deadline.
    pub critical_in_time: f64,
    /// Of the sheddable calls offered, the share served within their deadline.
    pub sheddable_in_time: f64,
    /// The 99th percentile latency of the calls served (in time or not).
    pub p99: Duration,
}

#[derive(Debug, Default)]
struct Tally {
    offered: [u64; 3],
    good: [u64; 3],
    served: Vec<Duration>,
}

/// A small deterministic generator (xorshift), so every policy sees the same arrivals.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn class_of(u: f64) -> Criticality {
    if u < 0.1 {
        Criticality::Critical
    } else if u < 0.4 {
        Criticality::Default
    } else {
        Criticality::Sheddable
    }
}

fn layer(policy: Policy, max_wait: Duration) -> Result<BulkheadLayer, BoxError> {
    let queue = QueuePolicy {
        max_queue: 100,
        max_wait,
        controlled_delay: policy.delayed().then(ControlledDelay::default),
        ..QueuePolicy::default()
    };
    Ok(BulkheadLayer::builder("supplier")
        .max_concurrent(SERVERS)
        .queue(queue)
        .build()?)
}

/// Offers `load` × capacity for `RUN` through `svc`, Poisson arrivals from `seed`.
async fn offer<S>(svc: S, load: f64, seed: u64) -> Tally
where
    S: Service<Criticality, Response = (), Error = BoxError> + Clone + 'static,
    S::Future: 'static,
{
    let tally = Rc::new(RefCell::new(Tally::default()));
    let mut rng = Rng(seed);
    let start = Instant::now();
    let rate = load * CAPACITY;
    let mut tasks = Vec::new();
    while start.elapsed() < RUN {
        let gap = -(1.0 - rng.next()).ln() / rate;
        tokio::time::sleep(Duration::from_secs_f64(gap)).await;
        let class = class_of(rng.next());
        tally.borrow_mut().offered[class.index()] += 1;
        let arrived = Instant::now();
        let deadline = Deadline::after(arrived, BUDGET);
        let call = deadline.scope(svc.clone().oneshot(class));
        let tally = Rc::clone(&tally);
        tasks.push(tokio::task::spawn_local(async move {
            if call.await.is_ok() {
                let took = arrived.elapsed();
                let mut t = tally.borrow_mut();
                t.served.push(took);
                if took <= BUDGET {
                    t.good[class.index()] += 1;
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    Rc::try_unwrap(tally).map_or_else(|_| Tally::default(), RefCell::into_inner)
}

fn supplier(
) -> impl Service<Criticality, Response = (), Error = Infallible, Future: 'static> + Clone {
    service_fn(|_class: Criticality| async {
        tokio::time::sleep(SERVICE).await;
        Ok::<_, Infallible>(())
    })
}

/// Runs one point (needs a paused clock and a `LocalSet`).
pub async fn point(policy: Policy, max_wait: Duration, load: f64) -> Result<Point, BoxError> {
    let layer = layer(policy, max_wait)?;
    let tally = match policy {
        Policy::Classes | Policy::ClassesControlledDelay => {
            let svc = layer.criticality(|c: &Criticality| *c).layer(supplier());
            offer(svc, load, 7).await
        }
        Policy::Fifo | Policy::ControlledDelay => offer(layer.layer(supplier()), load, 7).await,
    };
    let mut served = tally.served;
    served.sort();
    let p99 = served
        .get((served.len() * 99 / 100).min(served.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default();
    let share =
        |c: Criticality| tally.good[c.index()] as f64 / tally.offered[c.index()].max(1) as f64;
    Ok(Point {
        policy,
        max_wait,
        load,
        goodput: tally.good.iter().sum::<u64>() as f64 / RUN.as_secs_f64(),
        critical_in_time: share(Criticality::Critical),
        sheddable_in_time: share(Criticality::Sheddable),
        p99,
    })
}

/// The points as a Markdown table.
pub fn table(points: &[Point]) -> String {
    let mut out = String::from(
        "| max_wait | policy | load | goodput (calls/s) | critical in time | sheddable in time | p99 served |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for p in points {
        let _ = writeln!(
            out,
            "| {:?} | {} | {:.1}× | {:.0} | {:.1} % | {:.1} % | {:.0} ms |",
            p.max_wait,
            p.policy.name(),
            p.load,
            p.goodput,
            p.critical_in_time * 100.0,
            p.sheddable_in_time * 100.0,
            p.p99.as_secs_f64() * 1000.0
        );
    }
    out
}

/// Goodput against load, one line per policy and `max_wait`.
pub fn svg(points: &[Point]) -> String {
    let (w, h, left, bottom) = (640.0, 440.0, 60.0, 120.0);
    let x = |load: f64| left + (load - 0.5) / 3.5 * (w - left - 20.0);
    let y = |goodput: f64| h - bottom - goodput / 250.0 * (h - bottom - 20.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"14\">goodput (calls/s served within their 300 ms deadline) against offered load</text>\n"
    );
    for g in [0.0, 50.0, 100.0, 150.0, 200.0, 250.0] {
        let _ = writeln!(
            out,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y0}\" y2=\"{y0}\" stroke=\"#ddd\"/><text x=\"20\" y=\"{}\">{g}</text>",
            w - 20.0,
            y(g) + 4.0,
            y0 = y(g),
        );
    }
    for load in LOADS {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\">{load}×</text>",
            x(load) - 8.0,
            h - bottom + 16.0
        );
    }
    let colours = [
        ("FIFO", "#888"),
        ("CoDel+LIFO", "#d62728"),
        ("classes", "#1f77b4"),
        ("classes+CoDel", "#2ca02c"),
    ];
    for (row, (name, colour)) in colours.into_iter().enumerate() {
        for (column, (max_wait, dash)) in [
            (Duration::from_millis(20), ""),
            (Duration::from_secs(1), "6 4"),
        ]
        .into_iter()
        .enumerate()
        {
            let line: Vec<String> = points
                .iter()
                .filter(|p| p.policy.name() == name && p.max_wait == max_wait)
                .map(|p| format!("{:.1},{:.1}", x(p.load), y(p.goodput)))
                .collect();
            let _ = writeln!(
                out,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>",
                line.join(" ")
            );
            // The legend, under the chart: a row per policy, a column per max_wait.
            let lx = left + column as f64 * 280.0;
            let ly = h - bottom + 44.0 + row as f64 * 18.0;
            let _ = writeln!(
                out,
                "<line x1=\"{lx}\" x2=\"{}\" y1=\"{ly}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\"/><text x=\"{}\" y=\"{}\">{name}, max_wait {:?}</text>",
                lx + 30.0,
                lx + 36.0,
                ly + 4.0,
                max_wait
            );
        }
    }
    out.push_str("</svg>\n");
    out
}
