//! Throughput with several tasks calling clones of one shared instance.
//!
//! The tasks run on a 2-worker multi-thread runtime and call the way a user's code
//! does (`ready().await`, then `call().await`) for a fixed time after a warm-up.
//! The process's CPU time is read around the measurement: a run during which
//! another process took a core measures something else (one core, no cache-line
//! bouncing), so the caller retries it.

use std::hint::black_box;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Request;
use tokio::runtime::Runtime;
use tower::{Service, ServiceExt};

use super::Req;

/// Worker threads of the contended runtime.
pub(crate) const WORKERS: usize = 2;

/// One contended measurement: calls per second, and how many cores the process
/// really had meanwhile.
#[derive(Clone, Copy)]
pub(crate) struct Contended {
    pub(crate) rate: f64,
    pub(crate) cores: f64,
}

impl Contended {
    /// Whether the process had (nearly) the cores `tasks` tasks can use.
    pub(crate) fn had_its_cores(&self, tasks: usize) -> bool {
        self.cores.is_nan() || self.cores >= 0.8 * tasks.min(WORKERS) as f64
    }
}

const WAITING: u8 = 0;
const WARMING: u8 = 1;
const MEASURING: u8 = 2;
const STOPPED: u8 = 3;

/// CPU time used so far by all threads of this process (Linux; `None` elsewhere).
fn process_cpu_ns() -> Option<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// Calls per second with `tasks` tasks on `mt`, each calling its own clone of `svc`.
pub(crate) fn contended<S>(
    svc: &S,
    mt: &Runtime,
    tasks: usize,
    warm: Duration,
    measure: Duration,
) -> Contended
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
