//! A bulkhead that finds its own limit: a simulated supplier whose capacity moves
//! (c = 50 → 10 → 80 parallel servers, 100 ms each, a queue of 2c, then instant
//! 503s) under an open-loop load above capacity, in paused time (90 simulated
//! seconds per policy run in a few real ones).
//!
//! Run with `cargo run --example adaptive`. It prints one table per phase, for a
//! static limit too high (200), a static limit too low (5), AIMD and the latency
//! gradient, and writes `target/adaptive/limit.svg`: each limit against c.
//!
//! What to look for: a limit of 200 lets the supplier's queue (and 503s) into the
//! callers' latency; a limit of 5 leaves most of the capacity unused; both adaptive
//! limits follow c within seconds, keep the queue short and use the capacity.
#![allow(clippy::print_stdout)]

#[path = "adaptive/sim.rs"]
mod sim;

use std::path::PathBuf;

use seawall::BoxError;
use sim::Scenario;

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), BoxError> {
    let scenario = Scenario::standard();
    let mut runs = Vec::new();
    for policy in sim::policies(&scenario) {
        runs.push(sim::run(&scenario, policy, 7).await?);
    }
    println!("{}", sim::tables(&runs));
    let dir = PathBuf::from("target").join("adaptive");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("limit.svg");
    std::fs::write(&path, sim::svg(&runs))?;
    println!("wrote {}", path.display());
    Ok(())
}
