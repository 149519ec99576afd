//! Side-by-side cost of seawall's layers and of their peers, in one run, as one table.
//!
//! ```text
//! cargo bench -p seawall-benches                      # full run (half a minute when quiet)
//! cargo bench -p seawall-benches -- --quick           # smoke run (well under a minute)
//! cargo bench -p seawall-benches -- --rounds 2000 --runs 7 breaker   # only rows matching "breaker"
//! ```
//!
//! # Why a custom harness and not criterion
//!
//! The question is "what does each layer add per call, compared with the others, on
//! the same machine at the same moment". criterion answers a different one well
//! (how long does *one* function take, with a careful statistical model), and it
//! cannot give what the comparison needs:
//!
//! - **Interleaving.** criterion measures one benchmark to completion, then the next.
//!   On a shared 2-core machine the clock speed and the neighbours' load drift over
//!   seconds, so two subjects measured a minute apart differ by more than the few
//!   nanoseconds we compare. Here every round runs a short batch of *every* subject,
//!   in rotating order, and the figure is the median over rounds: drift hits all
//!   subjects alike and cancels out of the differences.
//! - **Hand-driven futures.** Each call is `poll_ready`, `call`, one `poll` with
//!   [`Waker::noop`], inside a tokio runtime context (so tokio's clock and timers
//!   work), without an executor in the loop: what is left is the layer's own cost.
//!   A future that does not complete at once is finished with `block_on` and the
//!   figure is marked as waiting.
//! - **Allocations.** A counting global allocator (below; `unsafe` is allowed in this
//!   bench-only package) gives allocations per call and heap bytes per instance,
//!   which criterion does not measure.
//! - **Contended throughput.** 64 tasks on a 2-worker multi-thread runtime call clones
//!   of one shared instance for a fixed time; that figure moves by up to 40 % between
//!   runs here, so it is taken in several interleaved runs and printed as the median
//!   with its spread, and ratios to peers are computed within each run.
//! - **One table.** The output is the markdown table the README shows, plus the
//!   ratios against the figures issue 10 sets.
//!
//! # What is measured
//!
//! Every subject takes `http::Request<()>` and wraps a trivial `tower::service_fn`
//! that returns `Ok(http::Response<()>)` at once (or, where a path needs it, fails at
//! once or never completes). "+ns" is the subject's median per-call time minus the
//! bare service's median (so request construction and the loop cancel out); the
//! second-path column is measured and subtracted the same way. Breakers are opened by
//! real failures (not forced), with an open interval long enough to stay open.
//! No timing is asserted anywhere: this prints figures, it does not judge a build.

use std::alloc::{GlobalAlloc, Layout, System};
use std::any::Any;
use std::cell::Cell;
use std::convert::Infallible;
use std::fmt;
use std::future::{poll_fn, Future};
use std::hint::black_box;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use http::{Request, Response};
use tokio::runtime::Runtime;
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};

// ---------------------------------------------------------------------------------
// Counting allocator: counts only on a thread that asked for it, so the idle
// runtime threads and the contended phase never touch the counters.

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES_IN: AtomicU64 = AtomicU64::new(0);
static BYTES_OUT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNT_HERE: Cell<bool> = const { Cell::new(false) };
}

fn counting_here() -> bool {
    COUNT_HERE.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged;
// the counters are plain atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting_here() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES_IN.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if counting_here() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES_IN.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if counting_here() {
            BYTES_OUT.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counting_here() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES_IN.fetch_add(new_size as u64, Ordering::Relaxed);
            BYTES_OUT.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Clone, Copy)]
struct AllocSnapshot {
    allocs: u64,
    bytes_in: u64,
    bytes_out: u64,
}

/// Runs `f` with allocation counting on for this thread; returns its result and
/// (allocations, net live bytes) during it.
fn counted<T>(f: impl FnOnce() -> T) -> (T, u64, i64) {
    let snap = || AllocSnapshot {
        allocs: ALLOCS.load(Ordering::Relaxed),
        bytes_in: BYTES_IN.load(Ordering::Relaxed),
        bytes_out: BYTES_OUT.load(Ordering::Relaxed),
    };
    let before = snap();
    COUNT_HERE.with(|c| c.set(true));
    let out = f();
    COUNT_HERE.with(|c| c.set(false));
    let after = snap();
    let live =
        (after.bytes_in - before.bytes_in) as i64 - (after.bytes_out - before.bytes_out) as i64;
    (out, after.allocs - before.allocs, live)
}

// ---------------------------------------------------------------------------------
// Requests, responses and the trivial inner services.

type Req = Request<()>;
type Res = Response<()>;

/// The error of the failing inner service (zero-sized: boxing it does not allocate).
#[derive(Debug, Clone, Copy)]
struct Fail;

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dependency failed")
    }
}

impl std::error::Error for Fail {}

fn ok_inner(
) -> impl Service<Req, Response = Res, Error = Infallible, Future: Send + Unpin + 'static>
       + Clone
       + Send
       + Sync
       + 'static {
    service_fn(|_req: Req| std::future::ready(Ok::<_, Infallible>(Response::new(()))))
}

fn fail_inner() -> impl Service<Req, Response = Res, Error = Fail, Future: Send + 'static>
       + Clone
       + Send
       + Sync
       + 'static {
    service_fn(|_req: Req| std::future::ready(Err::<Res, _>(Fail)))
}

/// Never completes: holds a permit for as long as its future lives.
fn pending_inner() -> impl Service<Req, Response = Res, Error = Infallible, Future: Send + 'static>
       + Clone
       + Send
       + Sync
       + 'static {
    service_fn(|_req: Req| std::future::pending::<Result<Res, Infallible>>())
}

/// How many times a [`CountedFail`] future was polled: an open breaker must not
/// poll its inner service, and the bench checks that it does not.
static INNER_POLLS: AtomicUsize = AtomicUsize::new(0);

struct CountedFail;

impl Future for CountedFail {
    type Output = Result<Res, Fail>;
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        INNER_POLLS.fetch_add(1, Ordering::Relaxed);
        Poll::Ready(Err(Fail))
    }
}

/// Fails every call, counting the calls that really reach it (used to trip breakers).
fn counted_fail_inner() -> impl Service<Req, Response = Res, Error = Fail, Future: Send + 'static>
       + Clone
       + Send
       + Sync
       + 'static {
    service_fn(|_req: Req| CountedFail)
}

// ---------------------------------------------------------------------------------
// Reference designs: one hot-path ingredient each, to show where nanoseconds go.

/// What a [`Reference`] layer does per call, and nothing else.
#[derive(Clone, Copy, Debug)]
enum Ingredient {
    /// One `fetch_add` on a counter shared by all clones.
    FetchAdd,
    /// One `Arc` clone moved into the response future (dropped when it completes).
    ArcInFuture,
    /// One read of tokio's clock.
    Clock,
    /// One small value inserted into the request's extensions.
    Extension,
}

impl Ingredient {
    fn label(self) -> &'static str {
        match self {
            Ingredient::FetchAdd => "reference: one shared `fetch_add` per call",
            Ingredient::ArcInFuture => "reference: one `Arc` clone into the response future",
            Ingredient::Clock => "reference: one `tokio::time::Instant::now()` per call",
            Ingredient::Extension => "reference: one request-extension insert per call",
        }
    }
}

#[derive(Clone)]
struct Reference<S> {
    inner: S,
    ingredient: Ingredient,
    shared: Arc<AtomicU64>,
}

#[derive(Clone, Copy)]
struct Marker(#[allow(dead_code)] u64);

struct RefFuture<F> {
    inner: F,
    _arc: Option<Arc<AtomicU64>>,
}

impl<F: Future + Unpin> Future for RefFuture<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        Pin::new(&mut self.inner).poll(cx)
    }
}

impl<S> Service<Req> for Reference<S>
where
    S: Service<Req>,
    S::Future: Unpin,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = RefFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        let mut arc = None;
        match self.ingredient {
            Ingredient::FetchAdd => {
                self.shared.fetch_add(1, Ordering::Relaxed);
            }
            Ingredient::ArcInFuture => arc = Some(Arc::clone(&self.shared)),
            Ingredient::Clock => {
                black_box(tokio::time::Instant::now());
            }
            Ingredient::Extension => {
                req.extensions_mut().insert(Marker(1));
            }
        }
        RefFuture {
            inner: self.inner.call(req),
            _arc: arc,
        }
    }
}

// ---------------------------------------------------------------------------------
// Adapters for the peers that are not tower layers.

/// failsafe 1.3 wrapped as a tower service, as its docs suggest (`breaker.call(fut)`).
#[derive(Clone)]
struct Failsafe<S, B> {
    inner: S,
    breaker: B,
}

impl<S, B> Service<Req> for Failsafe<S, B>
where
    S: Service<Req>,
    B: failsafe::futures::CircuitBreaker,
{
    type Response = S::Response;
    type Error = failsafe::Error<S::Error>;
    type Future = failsafe::futures::ResponseFuture<
        S::Future,
        B::FailurePolicy,
        B::Instrument,
        failsafe::Any,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(failsafe::Error::Inner)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.breaker.call(self.inner.call(req))
    }
}

/// recloser 1.4's `AsyncRecloser` wrapped as a tower service.
#[derive(Clone)]
struct Recloser<S> {
    inner: S,
    breaker: recloser::AsyncRecloser,
}

impl<S> Service<Req> for Recloser<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = recloser::Error<S::Error>;
    type Future = recloser::RecloserFuture<S::Future, recloser::AnyError>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(recloser::Error::Inner)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.breaker.call(self.inner.call(req))
    }
}

// ---------------------------------------------------------------------------------
// Driving calls by hand.

/// Whether a call ended in `Ok`.
#[inline(always)]
fn drive<S>(svc: &mut S, cx: &mut Context<'_>, rt: &Runtime, waited: &mut bool) -> bool
where
    S: Service<Req>,
{
    let ready = match svc.poll_ready(cx) {
        Poll::Ready(r) => r,
        Poll::Pending => {
            *waited = true;
            rt.block_on(poll_fn(|cx| svc.poll_ready(cx)))
        }
    };
    if let Err(e) = ready {
        black_box(e);
        return false;
    }
    let mut fut = pin!(svc.call(black_box(Request::new(()))));
    let out = match fut.as_mut().poll(cx) {
        Poll::Ready(out) => out,
        Poll::Pending => {
            *waited = true;
            rt.block_on(fut.as_mut())
        }
    };
    let ok = out.is_ok();
    drop(black_box(out));
    ok
}

/// One measured path of one configuration, type-erased.
trait Subject {
    /// Runs `n` calls; returns the elapsed time.
    fn batch(&mut self, rt: &Runtime, n: u64) -> Duration;
    /// One call; whether it was `Ok`.
    fn once(&mut self, rt: &Runtime) -> bool;
    /// Whether some call did not complete synchronously.
    fn waited(&self) -> bool;
    /// Size of the response future (moved at least once per call).
    fn future_size(&self) -> usize;
    /// Calls per second with `tasks` tasks on `mt`, through clones of a fresh instance.
    fn contended(
        &self,
        mt: &Runtime,
        tasks: usize,
        warm: Duration,
        measure: Duration,
    ) -> Option<Contended>;
}

type Build<S> = Arc<dyn Fn() -> S>;

struct Case<S> {
    svc: S,
    /// In-flight calls (and whatever else) that keep a bulkhead full.
    _keep: Vec<Box<dyn Any>>,
    waited: bool,
    /// Builds a fresh instance for the contended phase (main paths only).
    fresh: Option<Build<S>>,
}

impl<S> Subject for Case<S>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    fn batch(&mut self, rt: &Runtime, n: u64) -> Duration {
        let mut cx = Context::from_waker(Waker::noop());
        let mut waited = false;
        let start = Instant::now();
        for _ in 0..n {
            black_box(drive(&mut self.svc, &mut cx, rt, &mut waited));
        }
        let elapsed = start.elapsed();
        self.waited |= waited;
        elapsed
    }

    fn once(&mut self, rt: &Runtime) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let mut waited = false;
        let ok = drive(&mut self.svc, &mut cx, rt, &mut waited);
        self.waited |= waited;
        ok
    }

    fn waited(&self) -> bool {
        self.waited
    }

    fn future_size(&self) -> usize {
        std::mem::size_of::<S::Future>()
    }

    fn contended(
        &self,
        mt: &Runtime,
        tasks: usize,
        warm: Duration,
        measure: Duration,
    ) -> Option<Contended> {
        let fresh = self.fresh.as_ref()?;
        let svc = {
            let _g = mt.enter();
            fresh()
        };
        Some(contended(&svc, mt, tasks, warm, measure))
    }
}

/// Below this many cores a contended measurement is retried (up to three times).
const MIN_CORES: f64 = 1.6;

const WAITING: u8 = 0;
const WARMING: u8 = 1;
const MEASURING: u8 = 2;
const STOPPED: u8 = 3;

/// One contended measurement: calls per second, and how many cores the process
/// really had meanwhile (less than 2 when other work on the machine took a core).
#[derive(Clone, Copy)]
struct Contended {
    rate: f64,
    cores: f64,
}

/// CPU time used so far by all threads of this process (Linux; `None` elsewhere).
fn process_cpu_ns() -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

fn contended<S>(svc: &S, mt: &Runtime, tasks: usize, warm: Duration, measure: Duration) -> Contended
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    let phase = Arc::new(AtomicU8::new(WAITING));
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let mut svc = svc.clone();
            let phase = Arc::clone(&phase);
            mt.spawn(async move {
                while phase.load(Ordering::Acquire) == WAITING {
                    tokio::task::yield_now().await;
                }
                let mut seen = WARMING;
                let mut calls = 0u64;
                loop {
                    let now = phase.load(Ordering::Relaxed);
                    if now != seen {
                        if now == STOPPED {
                            break;
                        }
                        seen = now;
                        calls = 0;
                    }
                    if let Ok(ready) = svc.ready().await {
                        black_box(ready.call(Request::new(())).await.is_ok());
                    }
                    calls += 1;
                }
                // A task that never ran while measuring reports nothing.
                if seen == MEASURING {
                    calls
                } else {
                    0
                }
            })
        })
        .collect();
    phase.store(WARMING, Ordering::Release);
    std::thread::sleep(warm);
    phase.store(MEASURING, Ordering::Release);
    let cpu_before = process_cpu_ns();
    let start = Instant::now();
    std::thread::sleep(measure);
    phase.store(STOPPED, Ordering::Release);
    let elapsed = start.elapsed();
    let cpu_after = process_cpu_ns();
    let total: u64 = mt.block_on(async {
        let mut total = 0;
        for h in handles {
            total += h.await.expect("bench task panicked");
        }
        total
    });
    let cores = match (cpu_before, cpu_after) {
        (Some(a), Some(b)) => (b - a) as f64 / elapsed.as_nanos() as f64,
        _ => f64::NAN,
    };
    Contended {
        rate: total as f64 / elapsed.as_secs_f64(),
        cores,
    }
}

// ---------------------------------------------------------------------------------
// Rows of the table.

/// What the second-path figure is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Open,
    Full,
    Served,
    OpenServed,
    Probing,
}

impl Path {
    fn label(self) -> &'static str {
        match self {
            Path::Open => "open",
            Path::Full => "full",
            Path::Served => "serving the fallback",
            Path::OpenServed => "breaker open, fallback serves",
            Path::Probing => "probing: 5 % of calls try the level above",
        }
    }
}

/// Stable identifiers used by the ratio section.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Id {
    Bare,
    TowerLimit,
    TowerShed,
    TrBreaker,
    TrBulkhead,
    TrFallback,
    Failsafe,
    Recloser,
    Deadline,
    SwBreaker,
    SwBulkhead,
    SwDegradation,
    SwFallback,
    SwStack,
    SwStackDegradation,
    Reference,
}

struct Second {
    path: Path,
    subject: Box<dyn Subject>,
    /// Expected outcome of each call on this path (`None`: mixed).
    expect_ok: Option<bool>,
    /// Whether the inner service must not be reached (checked with `INNER_POLLS`).
    inner_untouched: bool,
    samples: Vec<f64>,
    allocs: Option<f64>,
}

struct Row {
    id: Id,
    label: String,
    main: Box<dyn Subject>,
    samples: Vec<f64>,
    contended: Vec<f64>,
    /// Cores the process had during each contended measurement.
    cores: Vec<f64>,
    allocs: Option<f64>,
    heap: Option<i64>,
    heap_of: Box<dyn Fn(&Runtime) -> i64>,
    second: Option<Second>,
    /// Calls per batch, calibrated in warm-up.
    batch: u64,
    second_batch: u64,
}

/// Live heap of one instance: built and called once, measured while alive. A first
/// instance is built and called uncounted so that process-wide lazy state (tracing
/// callsites, epoch collectors, metrics registration) is not charged to it.
fn heap_of<S>(rt: &Runtime, build: &dyn Fn() -> S) -> i64
where
    S: Service<Req>,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut waited = false;
    let mut first = build();
    drive(&mut first, &mut cx, rt, &mut waited);
    let (instance, _, live) = counted(|| {
        let mut s = build();
        drive(&mut s, &mut cx, rt, &mut waited);
        s
    });
    drop(instance);
    live
}

impl Row {
    fn new<S, F>(id: Id, label: impl Into<String>, build: F) -> Row
    where
        S: Service<Req> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Response: Send + 'static,
        S::Error: Send + 'static,
        F: Fn() -> S + 'static,
    {
        let build: Build<S> = Arc::new(build);
        let b2 = Arc::clone(&build);
        Row {
            id,
            label: label.into(),
            main: Box::new(Case {
                svc: build(),
                _keep: Vec::new(),
                waited: false,
                fresh: Some(Arc::clone(&build)),
            }),
            samples: Vec::new(),
            contended: Vec::new(),
            cores: Vec::new(),
            allocs: None,
            heap: None,
            heap_of: Box::new(move |rt| heap_of(rt, &*b2)),
            second: None,
            batch: 1,
            second_batch: 1,
        }
    }

    /// Adds the second path, on an instance already put in that state.
    fn second<S>(mut self, path: Path, expect_ok: Option<bool>, prepared: Prepared<S>) -> Row
    where
        S: Service<Req> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Response: Send + 'static,
        S::Error: Send + 'static,
    {
        self.second = Some(Second {
            path,
            subject: Box::new(Case {
                svc: prepared.svc,
                _keep: prepared.keep,
                waited: false,
                fresh: None,
            }),
            expect_ok,
            inner_untouched: matches!(path, Path::Open | Path::OpenServed),
            samples: Vec::new(),
            allocs: None,
        });
        self
    }
}

/// A service put in a state (open, full) with whatever keeps it there.
struct Prepared<S> {
    svc: S,
    keep: Vec<Box<dyn Any>>,
}

impl<S> Prepared<S> {
    fn plain(svc: S) -> Self {
        Prepared {
            svc,
            keep: Vec::new(),
        }
    }
}

/// Calls `svc` (whose inner is [`counted_fail_inner`]) until a call no longer
/// reaches the inner service: the breaker is open.
fn trip<S>(rt: &Runtime, mut svc: S) -> Prepared<S>
where
    S: Service<Req>,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut waited = false;
    for _ in 0..10_000 {
        let before = INNER_POLLS.load(Ordering::Relaxed);
        drive(&mut svc, &mut cx, rt, &mut waited);
        if INNER_POLLS.load(Ordering::Relaxed) == before {
            return Prepared::plain(svc);
        }
    }
    panic!("breaker did not open after 10000 failures");
}

/// Starts `n` calls through clones of `svc` (whose inner never completes) and keeps
/// them in flight: the bulkhead or limit is full.
fn fill<S>(svc: S, n: usize) -> Prepared<S>
where
    S: Service<Req> + Clone + 'static,
    S::Future: 'static,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut keep: Vec<Box<dyn Any>> = Vec::new();
    for _ in 0..n {
        let mut holder = svc.clone();
        match holder.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => {}
            _ => panic!("could not start a call to fill the bulkhead"),
        }
        let mut fut = Box::pin(holder.call(Request::new(())));
        assert!(
            fut.as_mut().poll(&mut cx).is_pending(),
            "a filling call completed"
        );
        keep.push(Box::new(holder));
        keep.push(Box::new(fut));
    }
    Prepared { svc, keep }
}

// ---------------------------------------------------------------------------------
// The subjects.

/// seawall's fallback answering with a value when the primary fails or is rejected.
macro_rules! sw_fallback {
    () => {
        seawall::fallback::FallbackLayer::builder("bench")
            .on_rejections(seawall::fallback::Rejections::ALL)
            .on_failure(seawall::ErrorsAsFailures)
            .value(Response::new(()))
            .build()
            .expect("valid config")
    };
}

fn rows(rt: &Runtime) -> Vec<Row> {
    use seawall::bulkhead::BulkheadLayer as SwBulkheadLayer;
    use seawall::core::DeadlineLayer;
    use seawall::degradation::{DegradationLayer, Fixed};
    use tower_resilience::bulkhead::BulkheadLayer as TrBulkheadLayer;
    use tower_resilience::circuitbreaker::CircuitBreakerLayer as TrBreakerLayer;
    use tower_resilience::fallback::FallbackLayer as TrFallbackLayer;

    let hour = Duration::from_secs(3600);
    let mut rows = Vec::new();

    rows.push(Row::new(Id::Bare, "bare service_fn", ok_inner));

    rows.push(Row::new(
        Id::TowerLimit,
        "tower ConcurrencyLimit(100)",
        || {
            ServiceBuilder::new()
                .concurrency_limit(100)
                .service(ok_inner())
        },
    ));

    rows.push(
        Row::new(
            Id::TowerShed,
            "tower LoadShed + ConcurrencyLimit(100)",
            || {
                ServiceBuilder::new()
                    .load_shed()
                    .concurrency_limit(100)
                    .service(ok_inner())
            },
        )
        .second(
            Path::Full,
            Some(false),
            fill(
                ServiceBuilder::new()
                    .load_shed()
                    .concurrency_limit(1)
                    .service(pending_inner()),
                1,
            ),
        ),
    );

    rows.push(
        Row::new(
            Id::TrBreaker,
            "tower-resilience 0.13 CircuitBreaker (count window 100)",
            || {
                TrBreakerLayer::builder()
                    .sliding_window_size(100)
                    .build()
                    .expect("valid config")
                    .layer(ok_inner())
            },
        )
        .second(
            Path::Open,
            Some(false),
            trip(
                rt,
                TrBreakerLayer::builder()
                    .sliding_window_size(100)
                    .minimum_number_of_calls(100)
                    .wait_duration_in_open(hour)
                    .build()
                    .expect("valid config")
                    .layer(counted_fail_inner()),
            ),
        ),
    );

    rows.push(
        Row::new(
            Id::TrBulkhead,
            "tower-resilience 0.13 Bulkhead(100), reject when full",
            || {
                TrBulkheadLayer::builder()
                    .max_concurrent_calls(100)
                    .reject_when_full()
                    .build()
                    .expect("valid config")
                    .layer(ok_inner())
            },
        )
        .second(
            Path::Full,
            Some(false),
            fill(
                TrBulkheadLayer::builder()
                    .max_concurrent_calls(1)
                    .reject_when_full()
                    .build()
                    .expect("valid config")
                    .layer(pending_inner()),
                1,
            ),
        ),
    );

    rows.push(
        Row::new(
            Id::TrFallback,
            "tower-resilience 0.13 Fallback (value)",
            || TrFallbackLayer::<Req, Res, Infallible>::value(Response::new(())).layer(ok_inner()),
        )
        .second(
            Path::Served,
            Some(true),
            Prepared::plain(
                TrFallbackLayer::<Req, Res, Fail>::value(Response::new(())).layer(fail_inner()),
            ),
        ),
    );

    rows.push(
        Row::new(
            Id::Failsafe,
            "failsafe 1.3 CircuitBreaker (default policy)",
            || Failsafe {
                inner: ok_inner(),
                breaker: failsafe::Config::new().build(),
            },
        )
        .second(
            Path::Open,
            Some(false),
            trip(
                rt,
                Failsafe {
                    inner: counted_fail_inner(),
                    breaker: failsafe::Config::new()
                        .failure_policy(failsafe::failure_policy::consecutive_failures(
                            5,
                            failsafe::backoff::constant(hour),
                        ))
                        .build(),
                },
            ),
        ),
    );

    rows.push(
        Row::new(
            Id::Recloser,
            "recloser 1.4 AsyncRecloser (ring 100)",
            || Recloser {
                inner: ok_inner(),
                breaker: recloser::Recloser::custom().closed_len(100).build().into(),
            },
        )
        .second(
            Path::Open,
            Some(false),
            trip(
                rt,
                Recloser {
                    inner: counted_fail_inner(),
                    breaker: recloser::Recloser::custom()
                        .closed_len(100)
                        .open_wait(hour)
                        .build()
                        .into(),
                },
            ),
        ),
    );

    rows.push(Row::new(
        Id::Deadline,
        "seawall DeadlineLayer(300 ms)",
        || {
            DeadlineLayer::new(Duration::from_millis(300))
                .expect("valid budget")
                .layer(ok_inner())
        },
    ));

    rows.push(
        Row::new(
            Id::SwBulkhead,
            "seawall bulkhead (100 active, queue 10)",
            || {
                SwBulkheadLayer::builder("bench")
                    .max_concurrent(100)
                    .build()
                    .expect("valid config")
                    .layer(ok_inner())
            },
        )
        .second(
            Path::Full,
            Some(false),
            fill(
                SwBulkheadLayer::builder("bench")
                    .max_concurrent(1)
                    .max_queue(0)
                    .build()
                    .expect("valid config")
                    .layer(pending_inner()),
                1,
            ),
        ),
    );

    rows.push(
        Row::new(Id::SwBreaker, "seawall breaker (count window 100)", || {
            sw_breaker().layer(ok_inner())
        })
        .second(
            Path::Open,
            Some(false),
            trip(rt, sw_breaker().layer(counted_fail_inner())),
        ),
    );

    rows.push(
        Row::new(Id::SwFallback, "seawall fallback (value)", || {
            sw_fallback!().layer(ok_inner())
        })
        .second(
            Path::Served,
            Some(true),
            Prepared::plain(sw_fallback!().layer(fail_inner())),
        ),
    );

    rows.push(
        Row::new(
            Id::SwDegradation,
            "seawall degradation (3 levels, steady at the best)",
            || sw_degradation(Duration::from_secs(60)).layer(ok_inner()),
        )
        .second(Path::Probing, None, {
            // The best level fails: the layer falls to "reduced", dwells 1 ms, then
            // sends 5 % of the calls as probes to the (still failing) best level, so
            // it keeps probing and never climbs.
            let layer = sw_degradation(Duration::from_millis(1));
            let handle = layer.handle();
            let svc = drive_until(rt, layer.layer(fail_inner()), || {
                handle.snapshot().level_name != "full"
            });
            std::thread::sleep(Duration::from_millis(5));
            Prepared::plain(svc)
        }),
    );

    rows.push(
        Row::new(
            Id::SwStack,
            "seawall stack: fallback → deadline → bulkhead → breaker",
            || {
                ServiceBuilder::new()
                    .layer(sw_fallback!())
                    .layer(DeadlineLayer::new(Duration::from_millis(300)).expect("valid budget"))
                    .layer(sw_bulkhead())
                    .layer(sw_breaker())
                    .service(ok_inner())
            },
        )
        .second(
            Path::OpenServed,
            Some(true),
            trip(
                rt,
                ServiceBuilder::new()
                    .layer(sw_fallback!())
                    .layer(DeadlineLayer::new(Duration::from_millis(300)).expect("valid budget"))
                    .layer(sw_bulkhead())
                    .layer(sw_breaker())
                    .service(counted_fail_inner()),
            ),
        ),
    );

    // Not a recommended configuration: shows what the deadline adds to the stack.
    rows.push(Row::new(
        Id::Reference,
        "seawall stack without its DeadlineLayer: fallback → bulkhead → breaker",
        || {
            ServiceBuilder::new()
                .layer(sw_fallback!())
                .layer(sw_bulkhead())
                .layer(sw_breaker())
                .service(ok_inner())
        },
    ));

    rows.push(Row::new(
        Id::SwStackDegradation,
        "seawall stack with degradation: fallback → degradation → (deadline → bulkhead → breaker) per level",
        || {
            let level = || {
                ServiceBuilder::new()
                    .layer(DeadlineLayer::new(Duration::from_millis(300)).expect("valid budget"))
                    .layer(sw_bulkhead())
                    .layer(sw_breaker())
                    .service(ok_inner())
            };
            let degradation = DegradationLayer::builder("bench")
                .level("reduced", level())
                .level("message", Fixed::new(Response::new(())))
                .build()
                .expect("valid config");
            ServiceBuilder::new()
                .layer(sw_fallback!())
                .layer(degradation)
                .service(level())
        },
    ));

    for ingredient in [
        Ingredient::FetchAdd,
        Ingredient::ArcInFuture,
        Ingredient::Clock,
        Ingredient::Extension,
    ] {
        rows.push(Row::new(Id::Reference, ingredient.label(), move || {
            Reference {
                inner: ok_inner(),
                ingredient,
                shared: Arc::new(AtomicU64::new(0)),
            }
        }));
    }

    rows
}

/// seawall's breaker over a count window of 100 calls (at least 100, half failing
/// trips it), open for an hour once tripped.
fn sw_breaker() -> seawall::circuit_breaker::CircuitBreakerLayer {
    seawall::circuit_breaker::CircuitBreakerLayer::builder("bench")
        .count_window(100, 100, 0.5)
        .open_for(Duration::from_secs(3600))
        .build()
        .expect("valid config")
}

/// seawall's bulkhead with 100 slots and the default queue.
fn sw_bulkhead() -> seawall::bulkhead::BulkheadLayer {
    seawall::bulkhead::BulkheadLayer::builder("bench")
        .max_concurrent(100)
        .build()
        .expect("valid config")
}

/// Three levels: the inner service, "reduced" (a trivial service) and a fixed message.
fn sw_degradation(min_dwell: Duration) -> seawall::degradation::DegradationLayer<Req, Res> {
    use seawall::degradation::{DegradationLayer, Fixed};
    DegradationLayer::builder("bench")
        .level("reduced", ok_inner())
        .level("message", Fixed::new(Response::new(())))
        .min_dwell(min_dwell)
        .build()
        .expect("valid config")
}

/// Calls `svc` until `done()`; panics after 10 000 calls.
fn drive_until<S>(rt: &Runtime, mut svc: S, done: impl Fn() -> bool) -> S
where
    S: Service<Req>,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut waited = false;
    for _ in 0..10_000 {
        if done() {
            return svc;
        }
        drive(&mut svc, &mut cx, rt, &mut waited);
    }
    panic!("the state was not reached after 10000 calls");
}

// ---------------------------------------------------------------------------------
// Measuring.

struct Options {
    rounds: usize,
    runs: usize,
    warm: Duration,
    measure: Duration,
    tasks: usize,
    filter: Option<String>,
    quick: bool,
}

fn options() -> Options {
    let mut o = Options {
        rounds: 400,
        runs: 9,
        warm: Duration::from_millis(20),
        measure: Duration::from_millis(100),
        tasks: 64,
        filter: None,
        quick: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => {
                o.quick = true;
                o.rounds = 40;
                o.runs = 3;
                o.warm = Duration::from_millis(10);
                o.measure = Duration::from_millis(40);
            }
            "--rounds" => {
                o.rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--rounds N")
            }
            "--runs" => o.runs = args.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--measure-ms" => {
                o.measure = Duration::from_millis(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .expect("--measure-ms N"),
                )
            }
            // cargo passes `--bench`; other flags are ignored too.
            s if s.starts_with('-') => {}
            s => o.filter = Some(s.to_owned()),
        }
    }
    o.rounds = o.rounds.max(3);
    o.runs = o.runs.max(3);
    o
}

/// Calls per batch so that one batch lasts about `target`: estimated from the fastest
/// of five batches of 64 calls (one preempted batch must not shrink the batch size,
/// or the cold start of every batch would dominate the figure), at least 16 calls
/// per batch; a subject that waits on a timer gets one call per batch.
fn calibrate(s: &mut dyn Subject, rt: &Runtime, target: Duration) -> u64 {
    const PROBE: u64 = 64;
    let fastest = (0..5).map(|_| s.batch(rt, PROBE)).min().unwrap_or(target);
    if s.waited() {
        return 1;
    }
    let per_call = (fastest.as_nanos() as u64 / PROBE).max(1);
    (target.as_nanos() as u64 / per_call).clamp(16, 1 << 16)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

fn measure(rows: &mut [Row], rt: &Runtime, mt: &Runtime, o: &Options) {
    let target = Duration::from_micros(40);
    // Warm-up, calibration and a check that each path does what its label says.
    for row in rows.iter_mut() {
        row.batch = calibrate(row.main.as_mut(), rt, target);
        assert!(
            row.main.once(rt),
            "{}: the admitted path did not answer Ok",
            row.label
        );
        if let Some(second) = row.second.as_mut() {
            second.subject.batch(rt, 16);
            let before = INNER_POLLS.load(Ordering::Relaxed);
            let ok = second.subject.once(rt);
            if let Some(expect) = second.expect_ok {
                assert_eq!(ok, expect, "{}: {:?} path", row.label, second.path);
            }
            if second.inner_untouched {
                assert_eq!(
                    INNER_POLLS.load(Ordering::Relaxed),
                    before,
                    "{}: open breaker reached the inner service",
                    row.label
                );
            }
            row.second_batch = calibrate(second.subject.as_mut(), rt, target);
        }
    }

    // Single task, interleaved rounds in rotating order.
    let mut order: Vec<(usize, bool)> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        order.push((i, false));
        if row.second.is_some() {
            order.push((i, true));
        }
    }
    for round in 0..o.rounds {
        let k = order.len();
        for j in 0..k {
            let (i, second) = order[(round + j) % k];
            let row = &mut rows[i];
            if second {
                let n = row.second_batch;
                let s = row.second.as_mut().expect("second path");
                let t = s.subject.batch(rt, n);
                s.samples.push(t.as_nanos() as f64 / n as f64);
            } else {
                let n = row.batch;
                let t = row.main.batch(rt, n);
                row.samples.push(t.as_nanos() as f64 / n as f64);
            }
        }
    }

    // Allocations per call and heap per instance.
    for row in rows.iter_mut() {
        let n = row.batch.clamp(16, 4096);
        let (_, allocs, _) = counted(|| row.main.batch(rt, n));
        row.allocs = Some(allocs as f64 / n as f64);
        row.heap = Some((row.heap_of)(rt));
        if let Some(s) = row.second.as_mut() {
            let n = row.second_batch.clamp(16, 4096);
            let (_, allocs, _) = counted(|| s.subject.batch(rt, n));
            s.allocs = Some(allocs as f64 / n as f64);
        }
    }

    // Contended throughput: interleaved runs.
    for run in 0..o.runs {
        let k = rows.len();
        for j in 0..k {
            let i = (run + j) % k;
            let row = &mut rows[i];
            // A measurement during which another process took one of the two cores
            // measures something else (one core, no cache-line bouncing): retry it.
            let mut best: Option<Contended> = None;
            for _ in 0..3 {
                let Some(c) = row.main.contended(mt, o.tasks, o.warm, o.measure) else {
                    break;
                };
                if best.is_none_or(|b| c.cores > b.cores) {
                    best = Some(c);
                }
                if c.cores.is_nan() || c.cores >= MIN_CORES {
                    break;
                }
            }
            if let Some(c) = best {
                row.contended.push(c.rate);
                row.cores.push(c.cores);
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Printing.

fn fmt_ns(x: f64) -> String {
    if x.abs() < 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

fn fmt_added(x: f64) -> String {
    let s = fmt_ns(x);
    if x >= 0.0 {
        format!("+{s}")
    } else {
        s
    }
}

fn fmt_rate(x: f64) -> String {
    if x >= 100e6 {
        format!("{:.0} M", x / 1e6)
    } else if x >= 1e6 {
        format!("{:.1} M", x / 1e6)
    } else {
        format!("{:.0} k", x / 1e3)
    }
}

fn fmt_allocs(x: f64) -> String {
    if (x - x.round()).abs() < 0.01 {
        format!("{}", x.round())
    } else {
        format!("{x:.2}")
    }
}

fn fmt_time(t: Duration) -> String {
    let ns = t.as_nanos() as f64;
    if ns >= 1e6 {
        format!("≈{:.1} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("≈{:.1} µs", ns / 1e3)
    } else {
        fmt_ns(ns)
    }
}

/// YYYY-MM-DD (UTC) from the system clock.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Howard Hinnant's civil_from_days.
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".to_owned())
}

struct Figures {
    bare: f64,
}

impl Figures {
    fn added(&self, row: &Row) -> f64 {
        median(&row.samples) - self.bare
    }

    fn second(&self, row: &Row) -> Option<f64> {
        row.second.as_ref().map(|s| median(&s.samples) - self.bare)
    }
}

fn print_table(rows: &[Row], o: &Options, load_before: &str) {
    let bare = rows
        .iter()
        .find(|r| r.id == Id::Bare)
        .map(|r| median(&r.samples))
        .unwrap_or(0.0);
    let f = Figures { bare };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    println!();
    println!(
        "Measured {} on {} ({} cores), load average {} before / {} after; {} single-task rounds, {} contended runs of {} ms{}.",
        today(),
        cpu_model(),
        cores,
        load_before,
        loadavg(),
        o.rounds,
        o.runs,
        o.measure.as_millis(),
        if o.quick { " (--quick: indicative only)" } else { "" },
    );
    println!();
    println!(
        "| configuration | +ns/call closed/admitted (1 task) | calls/s, {} tasks on 2 workers, one shared instance (median, min–max of {} runs) | +ns on the second path | allocs per call | heap B per instance | response future B |",
        o.tasks, o.runs
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let added = if row.id == Id::Bare {
            format!("+0 ({} ns)", fmt_ns(bare))
        } else {
            fmt_added(f.added(row))
        };
        let added = if row.main.waited() {
            format!("{added} (waits)")
        } else {
            added
        };
        let rate = if row.contended.is_empty() {
            "–".to_owned()
        } else {
            let (lo, hi) = min_max(&row.contended);
            format!(
                "{} ({}–{})",
                fmt_rate(median(&row.contended)),
                fmt_rate(lo),
                fmt_rate(hi)
            )
        };
        let second = match &row.second {
            None => "–".to_owned(),
            Some(s) => {
                let v = f.second(row).unwrap_or(f64::NAN);
                if s.subject.waited() {
                    format!(
                        "{} ({}, waits)",
                        fmt_time(Duration::from_nanos(v.max(0.0) as u64)),
                        s.path.label()
                    )
                } else {
                    format!("{} ({})", fmt_ns(v), s.path.label())
                }
            }
        };
        let allocs = match (&row.allocs, row.second.as_ref().and_then(|s| s.allocs)) {
            (Some(a), Some(b)) => format!("{} / {}", fmt_allocs(*a), fmt_allocs(b)),
            (Some(a), None) => fmt_allocs(*a),
            _ => "?".to_owned(),
        };
        let heap = row
            .heap
            .map(|h| h.to_string())
            .unwrap_or_else(|| "?".to_owned());
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            row.label,
            added,
            rate,
            second,
            allocs,
            heap,
            row.main.future_size()
        );
    }
    println!();
    println!(
        "\"+ns\" is the median per-call time minus the bare service's ({} ns: building the \
         request and response and moving them), futures driven by hand with a no-op waker; \
         allocs per call are given as closed/admitted path / second path; \"waits\": the call \
         did not complete on its first poll and was finished by the runtime (tower-resilience's \
         bulkhead rejects only when a zero-length `tokio::time::timeout` fires on the next \
         timer tick). Heap per instance: live bytes after building one instance and calling it once.",
        fmt_ns(bare)
    );
    let cores: Vec<f64> = rows
        .iter()
        .flat_map(|r| r.cores.iter().copied())
        .filter(|c| !c.is_nan())
        .collect();
    if !cores.is_empty() {
        let (lo, _) = min_max(&cores);
        let below = cores.iter().filter(|&&c| c < MIN_CORES).count();
        println!();
        println!(
            "Contended measurements: the process had {:.2} cores (median) while measuring, \
             lowest {:.2}; {} of {} had fewer than {} even after three tries (another process \
             held a core: such a figure is closer to one core without cache-line bouncing).",
            median(&cores),
            lo,
            below,
            cores.len(),
            MIN_CORES
        );
    }
    print_ratios(rows, &f);
}

fn find(rows: &[Row], id: Id) -> Option<&Row> {
    rows.iter().find(|r| r.id == id)
}

/// One line of the targets table.
struct Target {
    what: &'static str,
    seawall: String,
    reference: String,
    reached: bool,
}

fn verdict(reached: bool) -> &'static str {
    if reached {
        "reached"
    } else {
        "**missed**"
    }
}

/// Per-run ratio of `row`'s contended throughput to the best of `peers` in the same run.
fn ratio_to_best(row: &Row, peers: &[&Row]) -> Option<(f64, f64, f64)> {
    let runs = row.contended.len();
    let ratios: Vec<f64> = (0..runs)
        .filter_map(|r| {
            let best = peers
                .iter()
                .filter_map(|p| p.contended.get(r).copied())
                .fold(f64::NEG_INFINITY, f64::max);
            (best > 0.0).then(|| row.contended[r] / best)
        })
        .collect();
    if ratios.is_empty() {
        return None;
    }
    let (lo, hi) = min_max(&ratios);
    Some((median(&ratios), lo, hi))
}

fn fmt_ratio((m, lo, hi): (f64, f64, f64)) -> String {
    format!("{m:.2}× ({lo:.2}–{hi:.2})")
}

fn print_ratios(rows: &[Row], f: &Figures) {
    let mut t: Vec<Target> = Vec::new();
    let tr = find(rows, Id::TrBreaker);
    let rc = find(rows, Id::Recloser);
    let fs = find(rows, Id::Failsafe);
    let limit = find(rows, Id::TowerLimit);
    let trf = find(rows, Id::TrFallback);

    if let Some(b) = find(rows, Id::SwBreaker) {
        let a = f.added(b);
        t.push(Target {
            what: "breaker closed: added ≤ 30 ns",
            seawall: fmt_added(a),
            reference: "30".into(),
            reached: a <= 30.0,
        });
        if let Some(rc) = rc {
            let r = f.added(rc);
            t.push(Target {
                what: "breaker closed: under recloser's",
                seawall: fmt_added(a),
                reference: format!("recloser {} ({:.2}×)", fmt_added(r), a / r),
                reached: a <= r,
            });
        }
        if let Some(tr) = tr {
            let r = f.added(tr);
            t.push(Target {
                what: "breaker closed: ≤ a tenth of tower-resilience's",
                seawall: fmt_added(a),
                reference: format!("tower-resilience {} ({:.2}×)", fmt_added(r), a / r),
                reached: a <= r / 10.0,
            });
        }
        let peers: Vec<&Row> = [tr, rc, fs].into_iter().flatten().collect();
        if let Some(ratio) = ratio_to_best(b, &peers) {
            t.push(Target {
                what: "breaker contended: ≥ 1.5× the best peer breaker (per-run ratio)",
                seawall: fmt_rate(median(&b.contended)),
                reference: format!("best peer per run: {}", fmt_ratio(ratio)),
                reached: ratio.0 >= 1.5,
            });
        }
        if let Some(allocs) = b.allocs {
            t.push(Target {
                what: "breaker closed: zero allocations per call",
                seawall: fmt_allocs(allocs),
                reference: "0".into(),
                reached: allocs == 0.0,
            });
        }
        if let Some(heap) = b.heap {
            t.push(Target {
                what: "breaker heap with a 100-call window ≤ 512 B",
                seawall: format!("{heap} B"),
                reference: "512 B".into(),
                reached: heap <= 512,
            });
        }
        if let (Some(open), Some(s)) = (f.second(b), b.second.as_ref()) {
            t.push(Target {
                what: "breaker open: rejection ≤ 40 ns",
                seawall: fmt_ns(open),
                reference: format!(
                    "40; recloser {}, failsafe {}, tower-resilience {}",
                    rc.and_then(|r| f.second(r)).map(fmt_ns).unwrap_or_default(),
                    fs.and_then(|r| f.second(r)).map(fmt_ns).unwrap_or_default(),
                    tr.and_then(|r| f.second(r)).map(fmt_ns).unwrap_or_default(),
                ),
                reached: open <= 40.0 && !s.subject.waited(),
            });
        }
    }

    if let Some(b) = find(rows, Id::SwBulkhead) {
        let a = f.added(b);
        if let Some(limit) = limit {
            let l = f.added(limit);
            t.push(Target {
                what: "bulkhead admitted: no slower than tower ConcurrencyLimit (1 task)",
                seawall: fmt_added(a),
                reference: format!("ConcurrencyLimit {} ({:.2}×)", fmt_added(l), a / l),
                reached: a <= l,
            });
            if let Some(ratio) = ratio_to_best(b, &[limit]) {
                t.push(Target {
                    what: "bulkhead contended: ≥ 0.9× ConcurrencyLimit (per-run ratio)",
                    seawall: fmt_rate(median(&b.contended)),
                    reference: format!("ConcurrencyLimit per run: {}", fmt_ratio(ratio)),
                    reached: ratio.0 >= 0.9,
                });
            }
        }
        if let (Some(full), Some(s)) = (f.second(b), b.second.as_ref()) {
            t.push(Target {
                what: "bulkhead full: synchronous rejection ≤ 50 ns",
                seawall: format!(
                    "{}{}",
                    fmt_ns(full),
                    if s.subject.waited() {
                        " (waits)"
                    } else {
                        " (synchronous)"
                    }
                ),
                reference: format!(
                    "50; LoadShed {}",
                    find(rows, Id::TowerShed)
                        .and_then(|r| f.second(r))
                        .map(fmt_ns)
                        .unwrap_or_default()
                ),
                reached: full <= 50.0 && !s.subject.waited(),
            });
        }
        if let Some(allocs) = b.allocs {
            t.push(Target {
                what: "bulkhead admitted: zero allocations per call",
                seawall: fmt_allocs(allocs),
                reference: "0".into(),
                reached: allocs == 0.0,
            });
        }
    }

    if let Some(b) = find(rows, Id::SwFallback) {
        let a = f.added(b);
        t.push(Target {
            what: "fallback primary ok: added ≤ 20 ns",
            seawall: fmt_added(a),
            reference: format!(
                "20; tower-resilience {}",
                trf.map(|r| fmt_added(f.added(r))).unwrap_or_default()
            ),
            reached: a <= 20.0,
        });
        if let (Some(served), Some(trs)) = (f.second(b), trf.and_then(|r| f.second(r))) {
            t.push(Target {
                what: "fallback serving a value: ≤ half of tower-resilience's",
                seawall: fmt_ns(served),
                reference: format!("tower-resilience {} ({:.2}×)", fmt_ns(trs), served / trs),
                reached: served <= trs / 2.0,
            });
        }
    }

    if let Some(b) = find(rows, Id::SwDegradation) {
        let a = f.added(b);
        t.push(Target {
            what: "degradation at a steady level: added ≤ 30 ns",
            seawall: fmt_added(a),
            reference: "30".into(),
            reached: a <= 30.0,
        });
    }

    for (id, what) in [
        (
            Id::SwStack,
            "full stack (fallback, deadline, bulkhead, breaker) < one tower-resilience breaker",
        ),
        (
            Id::SwStackDegradation,
            "full stack with degradation < one tower-resilience breaker",
        ),
    ] {
        if let (Some(b), Some(tr)) = (find(rows, id), tr) {
            let (a, r) = (f.added(b), f.added(tr));
            t.push(Target {
                what,
                seawall: fmt_added(a),
                reference: format!("tower-resilience breaker {} ({:.2}×)", fmt_added(r), a / r),
                reached: a < r,
            });
        }
    }

    println!();
    if t.is_empty() {
        println!("No seawall policy row was measured, so no target of issue 10 is checked.");
    } else {
        println!("Targets of issue 10 (ratios to the peers in this run):");
        println!();
        println!("| target | seawall | reference in this run | verdict |");
        println!("|---|---:|---|---|");
        for x in &t {
            println!(
                "| {} | {} | {} | {} |",
                x.what,
                x.seawall,
                x.reference,
                verdict(x.reached)
            );
        }
    }
    let missing: Vec<&str> = [
        (Id::SwBreaker, "breaker"),
        (Id::SwBulkhead, "bulkhead"),
        (Id::SwDegradation, "degradation"),
        (Id::SwFallback, "fallback"),
        (Id::SwStack, "full stack"),
        (Id::SwStackDegradation, "full stack with degradation"),
    ]
    .into_iter()
    .filter(|(id, _)| find(rows, *id).is_none())
    .map(|(_, name)| name)
    .collect();
    if !missing.is_empty() {
        println!();
        println!("Not in this table: {}.", missing.join(", "));
    }
}

fn main() {
    let o = options();
    let load_before = loadavg();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("current-thread runtime");
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("multi-thread runtime");
    let _guard = rt.enter();

    let mut rows = rows(&rt);
    if let Some(filter) = &o.filter {
        let filter = filter.to_lowercase();
        rows.retain(|r| r.id == Id::Bare || r.label.to_lowercase().contains(&filter));
    }
    let started = Instant::now();
    measure(&mut rows, &rt, &mt, &o);
    print_table(&rows, &o, &load_before);
    eprintln!("(took {:.1} s)", started.elapsed().as_secs_f64());
}
