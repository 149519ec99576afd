//! What a keyed layer costs per call with 10, 10^3 and 10^5 keys resident, and what
//! a call with a never-seen key costs at each size (a flood of fresh keys, each one
//! evicting another): the new-key cost should not grow with the map.
//!
//! Run with `cargo run --release --example keyed_cost`. Keys are `u64`s, so the
//! figures are the layers' own cost, not the cost of extracting a key; the inner
//! service answers at once. Each figure is the median of five runs.
#![allow(clippy::print_stdout)]

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use seawall::bulkhead::KeyedBulkheadLayer;
use seawall::circuit_breaker::CircuitBreakerLayer;
use seawall::core::BoxError;
use tower::{Layer, Service};

const SIZES: [usize; 3] = [10, 1_000, 100_000];
/// Calls are spread over this many of the resident keys (all of them when fewer).
const SPREAD: u64 = 1_000;
const CALLS: u64 = 200_000;
const FRESH: u64 = 50_000;
const RUNS: usize = 5;

fn answer(_key: u64) -> Ready<Result<(), Infallible>> {
    ready(Ok(()))
}

fn key(req: &u64) -> u64 {
    *req
}

/// One call, driven to completion on this thread (the inner service is ready and
/// answers at once, so nothing waits).
fn call<S: Service<u64, Error = BoxError>>(svc: &mut S, cx: &mut Context<'_>, req: u64) {
    assert!(matches!(svc.poll_ready(cx), Poll::Ready(Ok(()))));
    let mut future = pin!(svc.call(req));
    loop {
        if let Poll::Ready(result) = future.as_mut().poll(cx) {
            black_box(result.is_ok());
            return;
        }
    }
}

/// A xorshift generator: the resident keys a call picks, uniformly.
struct Spread(u64);

impl Spread {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

struct Row {
    per_call: f64,
    new_key: f64,
}

/// Per-call and per-new-key nanoseconds for a service over a map of `n` keys.
fn measure<S: Service<u64, Error = BoxError>>(mut svc: S, n: usize) -> Row {
    let mut cx = Context::from_waker(Waker::noop());
    for k in 0..n as u64 {
        call(&mut svc, &mut cx, k);
    }
    let spread = SPREAD.min(n as u64);
    let mut pick = Spread(0x9E37_79B9_7F4A_7C15);
    let started = Instant::now();
    for _ in 0..CALLS {
        let k = pick.next(spread);
        call(&mut svc, &mut cx, k);
    }
    let per_call = started.elapsed().as_nanos() as f64 / CALLS as f64;
    // Never-seen keys, each evicting a resident one.
    let started = Instant::now();
    for fresh in 0..FRESH {
        call(&mut svc, &mut cx, (1 << 40) + fresh);
    }
    let new_key = started.elapsed().as_nanos() as f64 / FRESH as f64;
    Row { per_call, new_key }
}

/// The floor under any map of `n` keys: a plain `HashMap` that inserts a fresh key
/// with a freshly allocated value and removes (and frees) the oldest, with no lock,
/// no eviction policy and no layer. Its growth with `n` is the memory hierarchy's
/// (cache and TLB misses on a cold entry), not an algorithm's.
fn baseline(n: usize) -> Row {
    let mut map: std::collections::HashMap<u64, std::sync::Arc<Vec<u8>>> = (0..n as u64)
        .map(|k| (k, std::sync::Arc::new(vec![0; 512])))
        .collect();
    let started = Instant::now();
    for fresh in 0..FRESH {
        let k = n as u64 + fresh;
        map.insert(k, std::sync::Arc::new(vec![0; 512]));
        black_box(map.remove(&(k - n as u64)));
    }
    let new_key = started.elapsed().as_nanos() as f64 / FRESH as f64;
    Row {
        per_call: f64::NAN,
        new_key,
    }
}

fn median(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn report(layer: &str, n: usize, run: impl Fn() -> Result<Row, BoxError>) -> Result<(), BoxError> {
    let rows = (0..RUNS).map(|_| run()).collect::<Result<Vec<Row>, _>>()?;
    let per_call = median(rows.iter().map(|r| r.per_call).collect());
    let new_key = median(rows.iter().map(|r| r.new_key).collect());
    let per_call = if per_call.is_nan() {
        "–".to_owned()
    } else {
        format!("{per_call:.0} ns")
    };
    println!("| {layer} | {n} | {per_call} | {new_key:.0} ns |");
    Ok(())
}

fn main() -> Result<(), BoxError> {
    println!("| layer | keys resident | per call (over 10^3 keys) | per never-seen key |");
    println!("|---|---:|---:|---:|");
    for n in SIZES {
        report("keyed breaker", n, || {
            let layer = CircuitBreakerLayer::builder("suppliers").build_keyed(n, key)?;
            Ok(measure(layer.layer(tower::service_fn(answer)), n))
        })?;
    }
    for n in SIZES {
        report("std HashMap floor", n, || Ok(baseline(n)))?;
    }
    for n in SIZES {
        report("keyed bulkhead", n, || {
            let layer = KeyedBulkheadLayer::builder("suppliers", key)
                .max_keys(n)
                .build()?;
            Ok(measure(layer.layer(tower::service_fn(answer)), n))
        })?;
    }
    Ok(())
}
