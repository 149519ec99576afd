//! The harness: timing, batching, calibration, quartiles, allocation counting and
//! contended throughput. It knows nothing of the subjects but that each is a
//! `Service<Req>`, put in the state its path needs.
//!
//! Each path of each subject is a [`Probe`]. Every round runs one short batch of
//! every probe in both [`Mode`]s, in rotating order, so that the machine's drift
//! over the run hits every probe alike; a figure is a per-call time per round, and
//! the report compares figures round by round (see [`stats`]).

mod alloc;
mod contended;
mod drive;
mod processes;
pub(crate) mod stats;

use std::any::Any;
use std::fmt;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use http::{Request, Response};
use tokio::runtime::Runtime;
use tower::Service;

pub(crate) use alloc::counted;
pub(crate) use contended::WORKERS;
pub(crate) use drive::{by_hand, Thin};
pub(crate) use processes::{export, pooled, CHILD};

use crate::options::Runs;
use contended::{contended, Contended};
use drive::{awaited_batch, awaited_once};

/// What every subject takes.
pub(crate) type Req = Request<()>;
/// What every subject answers.
pub(crate) type Res = Response<()>;

/// How a call is made (see [`drive`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    /// `poll_ready`, `call`, one `poll`, with a no-op waker.
    Hand,
    /// `ready().await`, `call().await` on a `current_thread` runtime, between two
    /// thin adapters.
    Awaited,
}

impl Mode {
    pub(crate) const ALL: [Mode; 2] = [Mode::Hand, Mode::Awaited];

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Hand => "hand-driven",
            Mode::Awaited => "awaited",
        })
    }
}

/// One measured path of one configuration, type-erased.
trait Subject {
    /// Runs `n` calls; returns the elapsed time.
    fn batch(&mut self, mode: Mode, rt: &Runtime, n: u64) -> Duration;
    /// One call; whether it was `Ok`.
    fn once(&mut self, mode: Mode, rt: &Runtime) -> bool;
    /// `Pending`s seen per call so far (readiness or response future).
    fn pending_share(&self, mode: Mode) -> f64;
    /// Size of the response future (built and moved at least once per call).
    fn future_size(&self) -> usize;
}

struct Case<S> {
    /// The service behind the outer adapter of the awaited mode (the hand-driven
    /// mode calls the service itself).
    svc: Thin<S>,
    /// In-flight calls (and whatever else) that keep the service in its state.
    _keep: Vec<Box<dyn Any>>,
    /// Calls made and `Pending`s seen, per mode.
    calls: [u64; 2],
    pending: [u64; 2],
}

impl<S> Case<S> {
    fn tally(&mut self, mode: Mode, calls: u64, pending: u64) {
        self.calls[mode.index()] += calls;
        self.pending[mode.index()] += pending;
    }
}

impl<S: Service<Req>> Subject for Case<S> {
    fn batch(&mut self, mode: Mode, rt: &Runtime, n: u64) -> Duration {
        let (elapsed, pending) = match mode {
            Mode::Hand => {
                let mut cx = Context::from_waker(Waker::noop());
                let mut pending = 0;
                let svc = self.svc.get_mut();
                let start = Instant::now();
                for _ in 0..n {
                    black_box(by_hand(svc, &mut cx, rt, &mut pending));
                }
                (start.elapsed(), pending)
            }
            Mode::Awaited => awaited_batch(&mut self.svc, rt, n),
        };
        self.tally(mode, n, pending);
        elapsed
    }

    fn once(&mut self, mode: Mode, rt: &Runtime) -> bool {
        let (ok, pending) = match mode {
            Mode::Hand => {
                let mut cx = Context::from_waker(Waker::noop());
                let mut pending = 0;
                let ok = by_hand(self.svc.get_mut(), &mut cx, rt, &mut pending);
                (ok, pending)
            }
            Mode::Awaited => awaited_once(&mut self.svc, rt),
        };
        self.tally(mode, 1, pending);
        ok
    }

    fn pending_share(&self, mode: Mode) -> f64 {
        let i = mode.index();
        self.pending[i] as f64 / self.calls[i].max(1) as f64
    }

    fn future_size(&self) -> usize {
        std::mem::size_of::<S::Future>()
    }
}

/// What one probe measured in one mode.
#[derive(Default)]
pub(crate) struct Figures {
    /// Nanoseconds per call, one value per round.
    pub(crate) samples: Vec<f64>,
    /// Allocations per call.
    pub(crate) allocs: Option<f64>,
    /// `Pending`s seen per call (readiness or response future).
    pub(crate) pending: f64,
    /// Whether calls on this path wait (at least one `Pending` every other call):
    /// the figure is then the whole call, not a cost added to the bare row.
    pub(crate) waited: bool,
    /// Calls per batch, calibrated in warm-up.
    batch: u64,
}

/// One path of one subject, measured in both modes.
pub(crate) struct Probe {
    name: String,
    subject: Box<dyn Subject>,
    expect_ok: Option<bool>,
    untouched: Option<&'static AtomicUsize>,
    figures: [Figures; 2],
}

impl Probe {
    /// A probe of `svc`, kept in its state by `keep`. Each call must end in `Ok` or
    /// `Err` as `expect_ok` says (`None`: mixed), and, with `untouched`, must not
    /// move that count of calls reaching the inner service.
    pub(crate) fn new<S>(
        name: String,
        svc: S,
        keep: Vec<Box<dyn Any>>,
        expect_ok: Option<bool>,
        untouched: Option<&'static AtomicUsize>,
    ) -> Probe
    where
        S: Service<Req> + 'static,
    {
        Probe {
            name,
            subject: Box::new(Case {
                svc: Thin::new(svc),
                _keep: keep,
                calls: [0; 2],
                pending: [0; 2],
            }),
            expect_ok,
            untouched,
            figures: Default::default(),
        }
    }

    pub(crate) fn figures(&self, mode: Mode) -> &Figures {
        &self.figures[mode.index()]
    }

    /// Size of the response future of the service measured.
    pub(crate) fn future_size(&self) -> usize {
        self.subject.future_size()
    }

    /// One call in `mode`, checked against what the path promises.
    fn check(&mut self, mode: Mode, rt: &Runtime) {
        let before = self.untouched.map(|c| c.load(Ordering::Relaxed));
        let ok = self.subject.once(mode, rt);
        if let Some(expect) = self.expect_ok {
            assert_eq!(ok, expect, "{} ({mode}): unexpected outcome", self.name);
        }
        if let (Some(count), Some(before)) = (self.untouched, before) {
            assert_eq!(
                count.load(Ordering::Relaxed),
                before,
                "{} ({mode}): the call reached the inner service",
                self.name
            );
        }
    }

    /// Calls per batch so that one batch lasts about `target`, estimated from the
    /// fastest of five batches of 64 calls (one preempted batch must not shrink the
    /// batch, or the cold start of every batch would dominate the figure). A call
    /// that alone lasts longer (one waiting on a timer) is measured one at a time.
    fn calibrate(&mut self, mode: Mode, rt: &Runtime, target: Duration) -> u64 {
        const PROBE: u64 = 64;
        if self.subject.batch(mode, rt, 1) >= target {
            return 1;
        }
        let fastest = (0..5)
            .map(|_| self.subject.batch(mode, rt, PROBE))
            .min()
            .unwrap_or(target);
        let per_call = (fastest.as_nanos() as u64 / PROBE).max(1);
        (target.as_nanos() as u64 / per_call).clamp(1, 1 << 16)
    }

    /// One batch in `mode`, recorded as one sample.
    fn sample(&mut self, mode: Mode, rt: &Runtime) {
        let n = self.figures[mode.index()].batch;
        let t = self.subject.batch(mode, rt, n);
        self.figures[mode.index()]
            .samples
            .push(t.as_nanos() as f64 / n as f64);
    }
}

/// How long one batch should last: long enough that reading the clock around it
/// is noise, short enough that a round of every probe takes a few milliseconds.
const BATCH: Duration = Duration::from_micros(40);

/// Warms up and checks every probe, then measures them in `rounds` interleaved
/// rounds (both modes in every round), then counts their allocations per call.
pub(crate) fn single_task(probes: &mut [&mut Probe], rt: &Runtime, rounds: usize) {
    for p in probes.iter_mut() {
        for mode in Mode::ALL {
            p.check(mode, rt);
            let batch = p.calibrate(mode, rt, BATCH);
            p.figures[mode.index()].batch = batch;
        }
    }
    let order: Vec<(usize, Mode)> = (0..probes.len())
        .flat_map(|i| Mode::ALL.map(|m| (i, m)))
        .collect();
    let k = order.len();
    for round in 0..rounds {
        for j in 0..k {
            let (i, mode) = order[(round + j) % k];
            probes[i].sample(mode, rt);
        }
    }
    for p in probes.iter_mut() {
        for mode in Mode::ALL {
            let n = p.figures[mode.index()].batch.clamp(16, 4096);
            let (_, allocs, _) = counted(|| p.subject.batch(mode, rt, n));
            let pending = p.subject.pending_share(mode);
            let f = &mut p.figures[mode.index()];
            f.allocs = Some(allocs as f64 / n as f64);
            f.pending = pending;
            f.waited = pending >= 0.5;
        }
    }
}

/// Runs one probe in `mode` for about `length` (for `perf`); wall-clock nanoseconds
/// per call (preemption included) and the calls made.
pub(crate) fn spin(probe: &mut Probe, mode: Mode, rt: &Runtime, length: Duration) -> (f64, u64) {
    probe.check(mode, rt);
    let n = probe.calibrate(mode, rt, Duration::from_millis(1));
    let (start, mut calls) = (Instant::now(), 0);
    while start.elapsed() < length {
        probe.subject.batch(mode, rt, n);
        calls += n;
    }
    (start.elapsed().as_nanos() as f64 / calls as f64, calls)
}

/// Builds one instance of a subject.
pub(crate) type Build<S> = Arc<dyn Fn() -> S>;

type Run = Box<dyn Fn(&Runtime, usize, Duration, Duration) -> Contended>;

/// Calls per second at one number of tasks, one value per run.
#[derive(Default)]
pub(crate) struct Throughput {
    pub(crate) rates: Vec<f64>,
    /// Cores the process had during each run.
    pub(crate) cores: Vec<f64>,
}

/// A subject's admitted path under several tasks, through clones of one fresh
/// instance per run.
pub(crate) struct Contender {
    run: Run,
    /// One entry per number of tasks in [`Runs::tasks`].
    pub(crate) by_tasks: Vec<Throughput>,
}

impl Contender {
    pub(crate) fn new<S>(build: Build<S>) -> Contender
    where
        S: Service<Req> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Response: Send + 'static,
        S::Error: Send + 'static,
    {
        Contender {
            run: Box::new(move |mt, tasks, warm, measure| {
                let svc = {
                    let _g = mt.enter();
                    build()
                };
                contended(&svc, mt, tasks, warm, measure)
            }),
            by_tasks: Vec::new(),
        }
    }
}

/// Contended throughput of every contender at every number of tasks, in `runs`
/// interleaved runs. A run during which the process had fewer cores than its tasks
/// could use is retried (up to three times; the best is kept).
pub(crate) fn throughput(contenders: &mut [&mut Contender], mt: &Runtime, o: &Runs) {
    for c in contenders.iter_mut() {
        c.by_tasks = o.tasks.iter().map(|_| Throughput::default()).collect();
    }
    let k = contenders.len();
    for run in 0..o.runs {
        for (t, &tasks) in o.tasks.iter().enumerate() {
            for j in 0..k {
                let c = &mut contenders[(run + j) % k];
                let mut best: Option<Contended> = None;
                for _ in 0..3 {
                    let m = (c.run)(mt, tasks, o.warm, o.measure);
                    if best.is_none_or(|b| m.cores > b.cores) {
                        best = Some(m);
                    }
                    if m.had_its_cores(tasks) {
                        break;
                    }
                }
                if let Some(m) = best {
                    c.by_tasks[t].rates.push(m.rate);
                    c.by_tasks[t].cores.push(m.cores);
                }
            }
        }
    }
}

/// Live heap bytes of one instance of a subject.
pub(crate) struct Heap {
    of: Box<dyn Fn(&Runtime) -> i64>,
    pub(crate) bytes: Option<i64>,
}

impl Heap {
    pub(crate) fn new<S: Service<Req> + 'static>(build: Build<S>) -> Heap {
        Heap {
            of: Box::new(move |rt| heap_of(rt, &*build)),
            bytes: None,
        }
    }

    pub(crate) fn measure(&mut self, rt: &Runtime) {
        self.bytes = Some((self.of)(rt));
    }
}

/// Live heap of one instance: built and called once, measured while alive. A first
/// instance is built and called uncounted so that process-wide lazy state (tracing
/// callsites, epoch collectors, metrics registration) is not charged to it.
fn heap_of<S: Service<Req>>(rt: &Runtime, build: &dyn Fn() -> S) -> i64 {
    let mut cx = Context::from_waker(Waker::noop());
    let mut pending = 0;
    let mut first = build();
    by_hand(&mut first, &mut cx, rt, &mut pending);
    let (instance, _, live) = counted(|| {
        let mut s = build();
        by_hand(&mut s, &mut cx, rt, &mut pending);
        s
    });
    drop(instance);
    live
}
