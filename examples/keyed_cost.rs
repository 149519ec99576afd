//! What a keyed layer costs per call with 10, 10^3 and 10^5 keys resident, and what
//! a call with a never-seen key costs at each size (a flood of fresh keys, each one
//! evicting another): the new-key cost should not grow with the map.
//!
//! Run with `cargo run --release --example keyed_cost`. Keys are `u64`s, so the
//! figures are the layers' own cost, not the cost of extracting a key; the inner
//! service answers at once.
//!
//! Every round measures every row once, close together in time; each figure is the
//! median over the rounds with its p25–p75. Growth is read per round (the cost at
//! a size over the cost at 10 keys, in the same round), so a machine that slows
//! down between rounds moves both sides alike. Two rows split the new-key cost:
//!
//! - **the map alone** (`KeyedMap<u64, Arc<u64>>`, nothing pinned, no layer): the
//!   lock, the index, the eviction sweep;
//! - **the memory floor**: a plain `HashMap<u64, Box<[u8; 512]>>` that inserts a
//!   fresh key with a fresh value and removes (and frees) the oldest, with no lock,
//!   no eviction policy and no layer. Its growth with the size is the memory
//!   hierarchy's, not an algorithm's: an evicted entry was last touched 10^5 new
//!   keys ago, so its index bucket and its value are no longer in cache, and a
//!   10^5-entry table does not fit in a core's L2.
//!
//! Wall-clock figures move with the machine's load; instruction counts do not. To
//! see that the work per new key is the same at every size, run a flood under
//! `valgrind --tool=cachegrind --cache-sim=yes --LL=2097152,16,64` (a 2 MiB
//! last-level cache, a core's L2) and difference two flood lengths: the map alone
//! runs about 680 instructions per new key at 10 keys and at 10^5, and what grows
//! is the misses, about 1.8 per new key at 10^5, as a plain `HashMap` shows too.
//! `cargo run --release --example keyed_cost -- flood bulkhead 100000 20000` runs
//! only such a flood (`breaker`, `bulkhead` or `map`; the keys resident; the new
//! keys), so two lengths can be differenced.
#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::CircuitBreakerLayer;
use seawall::core::{BoxError, KeyedMap};
use tower::{Layer, Service};

const SIZES: [usize; 3] = [10, 1_000, 100_000];
/// Calls are spread over this many of the resident keys (all of them when fewer).
const SPREAD: u64 = 1_000;
const CALLS: u64 = 100_000;
const FRESH: u64 = 50_000;
const ROUNDS: usize = 9;

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

/// Nanoseconds per iteration of `f` over `0..n`.
fn per(n: u64, mut f: impl FnMut(u64)) -> f64 {
    let started = Instant::now();
    for i in 0..n {
        f(i);
    }
    started.elapsed().as_nanos() as f64 / n as f64
}

/// Per-call and per-new-key nanoseconds for a service over a map of `n` keys.
fn layer_row<S: Service<u64, Error = BoxError>>(mut svc: S, n: usize) -> (f64, f64) {
    let mut cx = Context::from_waker(Waker::noop());
    for k in 0..n as u64 {
        call(&mut svc, &mut cx, k);
    }
    let spread = SPREAD.min(n as u64);
    let mut pick = Spread(0x9E37_79B9_7F4A_7C15);
    let per_call = per(CALLS, |_| call(&mut svc, &mut cx, pick.next(spread)));
    // Never-seen keys, each evicting a resident one.
    let new_key = per(FRESH, |i| call(&mut svc, &mut cx, (1 << 40) + i));
    (per_call, new_key)
}

/// Per-new-key nanoseconds of the map alone, full with `n` keys none of which is
/// pinned.
fn map_row(n: usize) -> f64 {
    let map: KeyedMap<u64, Arc<u64>> = KeyedMap::new(n);
    let insert = |k: u64| {
        let made = map.get_or_insert_with(k, |_| false, |k| Ok::<_, Infallible>(Arc::new(*k)));
        black_box(made.is_ok());
    };
    (0..n as u64).for_each(insert);
    per(FRESH, |i| insert((1 << 40) + i))
}

/// Per-new-key nanoseconds of the memory floor at `n` keys (see the module docs).
fn floor_row(n: usize) -> f64 {
    let n = n as u64;
    let mut map: HashMap<u64, Box<[u8; 512]>> = (0..n).map(|k| (k, Box::new([0; 512]))).collect();
    per(FRESH, |i| {
        black_box(map.remove(&i));
        map.insert(n + i, Box::new([i as u8; 512]));
    })
}

/// The 25th, 50th and 75th percentiles, linearly interpolated.
fn quartiles(values: &[f64]) -> [f64; 3] {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    [0.25, 0.5, 0.75].map(|q| {
        let pos = q * (v.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
    })
}

fn ns(values: &[f64]) -> String {
    let [p25, median, p75] = quartiles(values);
    format!("{median:.0} ns ({p25:.0}–{p75:.0})")
}

fn ratio(values: &[f64]) -> String {
    let [p25, median, p75] = quartiles(values);
    format!("{median:.2}× ({p25:.2}–{p75:.2})")
}

/// One row's figures: per round, per size.
struct Figures {
    label: &'static str,
    /// Empty for the rows that only insert.
    per_call: [Vec<f64>; 3],
    new_key: [Vec<f64>; 3],
}

impl Figures {
    fn new(label: &'static str) -> Self {
        Self {
            label,
            per_call: Default::default(),
            new_key: Default::default(),
        }
    }

    /// The new-key cost at size `i` over the cost at 10 keys, round by round.
    fn growth(&self, i: usize) -> Vec<f64> {
        let base = &self.new_key[0];
        self.new_key[i]
            .iter()
            .zip(base)
            .map(|(x, b)| x / b)
            .collect()
    }
}

/// Calls `one` with `n` keys, then with `fresh` never-seen ones.
fn flood_through(n: usize, fresh: u64, mut one: impl FnMut(&mut Context<'_>, u64)) {
    let mut cx = Context::from_waker(Waker::noop());
    (0..n as u64).for_each(|k| one(&mut cx, k));
    (0..fresh).for_each(|i| one(&mut cx, (1 << 40) + i));
}

/// Only a flood: `n` keys resident, then `fresh` never-seen keys (see the module docs).
fn flood(row: &str, n: usize, fresh: u64) -> Result<(), BoxError> {
    match row {
        "breaker" => {
            let layer = CircuitBreakerLayer::builder("suppliers")
                .keyed(key)
                .max_keys(n)
                .build()?;
            let mut svc = layer.layer(tower::service_fn(answer));
            flood_through(n, fresh, |cx, k| call(&mut svc, cx, k));
        }
        "bulkhead" => {
            let layer = BulkheadLayer::builder("suppliers")
                .keyed(key)
                .max_keys(n)
                .build()?;
            let mut svc = layer.layer(tower::service_fn(answer));
            flood_through(n, fresh, |cx, k| call(&mut svc, cx, k));
        }
        "map" => {
            let map: KeyedMap<u64, Arc<u64>> = KeyedMap::new(n);
            flood_through(n, fresh, |_, k| {
                let made =
                    map.get_or_insert_with(k, |_| false, |k| Ok::<_, Infallible>(Arc::new(*k)));
                black_box(made.is_ok());
            });
        }
        other => return Err(format!("no row {other:?}: breaker, bulkhead or map").into()),
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [what, row, n, fresh] = &args[..] {
        if what == "flood" {
            return flood(row, n.parse()?, fresh.parse()?);
        }
    }
    let mut breaker = Figures::new("keyed breaker");
    let mut bulkhead = Figures::new("keyed bulkhead");
    let mut map = Figures::new("KeyedMap alone");
    let mut floor = Figures::new("std HashMap floor");
    for _ in 0..ROUNDS {
        for (i, &n) in SIZES.iter().enumerate() {
            let layer = CircuitBreakerLayer::builder("suppliers")
                .keyed(key)
                .max_keys(n)
                .build()?;
            let (c, k) = layer_row(layer.layer(tower::service_fn(answer)), n);
            breaker.per_call[i].push(c);
            breaker.new_key[i].push(k);

            let layer = BulkheadLayer::builder("suppliers")
                .keyed(key)
                .max_keys(n)
                .build()?;
            let (c, k) = layer_row(layer.layer(tower::service_fn(answer)), n);
            bulkhead.per_call[i].push(c);
            bulkhead.new_key[i].push(k);

            map.new_key[i].push(map_row(n));
            floor.new_key[i].push(floor_row(n));
        }
    }
    println!("Median of {ROUNDS} rounds (p25–p75).\n");
    println!("| row | keys resident | per call (over 10^3 keys) | per never-seen key | never-seen key vs 10 keys |");
    println!("|---|---:|---:|---:|---:|");
    for row in [&breaker, &bulkhead, &map, &floor] {
        for (i, n) in SIZES.iter().enumerate() {
            let per_call = if row.per_call[i].is_empty() {
                "–".to_owned()
            } else {
                ns(&row.per_call[i])
            };
            let growth = if i == 0 {
                "–".to_owned()
            } else {
                ratio(&row.growth(i))
            };
            let new_key = ns(&row.new_key[i]);
            println!(
                "| {} | {n} | {per_call} | {new_key} | {growth} |",
                row.label
            );
        }
    }
    // The verdict: how much of each layer's growth at 10^5 keys the memory floor
    // shows too, round by round.
    let last = SIZES.len() - 1;
    println!();
    for row in [&breaker, &bulkhead, &map] {
        let extra: Vec<f64> = row.new_key[last]
            .iter()
            .zip(&row.new_key[0])
            .zip(floor.new_key[last].iter().zip(&floor.new_key[0]))
            .map(|((x, b), (fx, fb))| (x - b) - (fx - fb))
            .collect();
        let [p25, median, p75] = quartiles(&extra);
        println!(
            "{}: a never-seen key at {} keys costs {median:.0} ns ({p25:.0}–{p75:.0}) more than at 10 keys beyond what the memory floor adds",
            row.label, SIZES[last]
        );
    }
    Ok(())
}
