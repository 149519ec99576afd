//! The fleet simulation: 100 and 1000 instances of a service, each with its own
//! circuit breaker in front of one shared supplier that fails for 60 s and then
//! recovers, under a steady load, in paused time (a minute of the fleet's life
//! takes seconds, and every run repeats exactly).
//!
//! ```text
//! cargo run --release --example fleet_sim
//! cargo run --release --example fleet_sim -- --instances 100 --rps 5 --store-latency-ms 2 --store-loss 0.1
//! ```
//!
//! Compares each breaker alone (no jitter, then with jitter) with the breakers
//! coordinated through a `LocalStore` (probe lease and verdicts), with pushes
//! working, with every push lost, and with a share of store operations lost.
//! Prints a markdown table and writes an SVG per fleet size to `target/fleet_sim/`.
//!
//! Then the fleet-wide cap: 100 instances whose bulkheads share G = 64 calls at
//! the supplier, 20 of them with saturating demand at a time, the hot group
//! moving every 10 s; strict mode with the store healthy, lossy and down for 5 s,
//! and available mode with the same outage. A second table, and
//! `target/fleet_sim/cap.svg` (G, the allotments summed, the real concurrency).
//! `--cap-only` runs only that part.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cap;
mod model;
mod report;

use std::path::PathBuf;
use std::time::Duration;

use model::{Mode, SimConfig};

struct Args {
    sizes: Vec<usize>,
    rps: u32,
    store_latency: Duration,
    store_loss: f64,
    seed: u64,
    cap_only: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        sizes: vec![100, 1000],
        rps: 10,
        store_latency: Duration::from_millis(1),
        store_loss: 0.1,
        seed: 1,
        cap_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--instances" => {
                args.sizes = value()?
                    .split(',')
                    .map(|n| n.trim().parse().map_err(|e| format!("--instances: {e}")))
                    .collect::<Result<_, _>>()?;
                if args.sizes.contains(&0) {
                    return Err("--instances: a fleet has at least one instance".into());
                }
            }
            "--rps" => {
                args.rps = value()?.parse().map_err(|e| format!("--rps: {e}"))?;
                if args.rps == 0 || args.rps > 1000 {
                    return Err("--rps: between 1 and 1000 calls per second".into());
                }
            }
            "--store-latency-ms" => {
                let ms: u64 = value()?
                    .parse()
                    .map_err(|e| format!("--store-latency-ms: {e}"))?;
                if ms > 100 {
                    return Err(
                        "--store-latency-ms: at most 100 (the store timeout is 200 ms)".into(),
                    );
                }
                args.store_latency = Duration::from_millis(ms);
            }
            "--store-loss" => {
                args.store_loss = value()?.parse().map_err(|e| format!("--store-loss: {e}"))?;
                if !(0.0..=1.0).contains(&args.store_loss) {
                    return Err("--store-loss: a probability in [0, 1]".into());
                }
            }
            "--cap-only" => args.cap_only = true,
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn main() -> Result<(), seawall::BoxError> {
    let args = parse().map_err(|e| format!("fleet_sim: {e}"))?;
    let dir = PathBuf::from("target").join("fleet_sim");
    std::fs::create_dir_all(&dir)?;
    if !args.cap_only {
        probes(&args, &dir)?;
    }
    caps(&args, &dir)
}

fn caps(args: &Args, dir: &std::path::Path) -> Result<(), seawall::BoxError> {
    use seawall::fleet::CapMode;
    let cases = [
        (cap::StoreCase::Healthy, CapMode::Strict),
        (cap::StoreCase::Lossy(args.store_loss), CapMode::Strict),
        (cap::StoreCase::Outage, CapMode::Strict),
        (
            cap::StoreCase::Outage,
            CapMode::Available { local_share: 1 },
        ),
    ];
    let mut runs = Vec::new();
    for (store, mode) in cases {
        let mut sim = cap::CapSim::new(store, mode);
        sim.seed = args.seed;
        let wall = std::time::Instant::now();
        let run = cap::run(&sim)?;
        eprintln!(
            "  cap, {}: simulated {} s in {:.1} s",
            sim.label(),
            sim.phase.as_secs() * sim.phases as u64,
            wall.elapsed().as_secs_f64()
        );
        runs.push((sim, run));
    }
    let path = dir.join("cap.svg");
    std::fs::write(&path, cap::svg(&runs))?;
    eprintln!("  timeline: {}", path.display());
    println!();
    println!(
        "fleet-wide cap: 100 instances, bulkheads of 8 sharing G = 64 at a supplier of 50 ms; \
         20 instances saturating at a time, the group moving every 10 s; renewals every 500 ms, \
         claims live 1.5 s"
    );
    println!();
    print!("{}", cap::table(&runs));
    Ok(())
}

fn probes(args: &Args, dir: &std::path::Path) -> Result<(), seawall::BoxError> {
    let modes = [
        Mode::Local,
        Mode::LocalJitter,
        Mode::Fleet {
            loss: 0.0,
            push_loss: 0.0,
        },
        Mode::Fleet {
            loss: 0.0,
            push_loss: 1.0,
        },
        Mode::Fleet {
            loss: args.store_loss,
            push_loss: args.store_loss,
        },
    ];
    println!(
        "fleet simulation: supplier down for 60 s, then healthy; {} calls/s per instance; \
         breaker: 5 failures of the last 10 open it for 10 s, probe timeout 2 s; \
         store one-way latency {:?}",
        args.rps, args.store_latency
    );
    let mut rows = Vec::new();
    for &n in &args.sizes {
        let mut runs = Vec::new();
        for mode in modes {
            let mut config = SimConfig::new(n, mode);
            config.rps = args.rps;
            config.store_latency = args.store_latency;
            config.seed = args.seed;
            let wall = std::time::Instant::now();
            let obs = model::run(&config)?;
            eprintln!(
                "  N = {n}, {}: simulated {:?} in {:.1} s",
                mode.label(),
                obs.end,
                wall.elapsed().as_secs_f64()
            );
            rows.push(report::Row::new(n, mode, &obs));
            runs.push((mode, obs));
        }
        let path = dir.join(format!("fleet_n{n}.svg"));
        std::fs::write(&path, report::svg(n, &runs))?;
        eprintln!("  timeline: {}", path.display());
    }
    println!();
    print!("{}", report::table(&rows));
    println!();
    print!("{}", report::goals(&rows));
    Ok(())
}
