//! Overload with priorities, simulated: one bulkhead in front of one supplier,
//! offered 0.5× to 4× what the supplier can serve, in paused time (ten simulated
//! seconds per point in well under a second of real time), the same arrivals for
//! every policy.
//!
//! Run with `cargo run --example overload`. It prints, for each queue policy
//! (first in first out; controlled delay with adaptive LIFO; classes; classes with
//! the controlled delay) at the
//! default `max_wait` of 20 ms and at a long one of 1 s, the goodput (calls served
//! within their deadline, per second), the critical calls' share served in time,
//! and the p99 latency of the calls served; and writes
//! `target/overload/goodput.svg`.
//!
//! The supplier: 10 calls at once, 50 ms each (capacity 200 calls/s); the
//! bulkhead lets 10 in and queues 100 more. Every call has a 300 ms deadline, and
//! its class is critical for 10 % of the arrivals, default for 30 % and sheddable
//! for 60 % (critical 0.3×, default 0.9×, sheddable 1.8× at 3× load).
#![allow(clippy::print_stdout)]

#[path = "overload/sim.rs"]
mod sim;

use std::path::PathBuf;
use std::time::Duration;

use seawall::BoxError;
use sim::Policy;

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> Result<(), BoxError> {
    let local = tokio::task::LocalSet::new();
    let points = local
        .run_until(async {
            let mut points = Vec::new();
            for max_wait in [Duration::from_millis(20), Duration::from_secs(1)] {
                for policy in Policy::ALL {
                    for load in sim::LOADS {
                        points.push(sim::point(policy, max_wait, load).await?);
                    }
                }
            }
            Ok::<_, BoxError>(points)
        })
        .await?;
    println!("{}", sim::table(&points));
    let dir = PathBuf::from("target").join("overload");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("goodput.svg");
    std::fs::write(&path, sim::svg(&points))?;
    println!("wrote {}", path.display());
    Ok(())
}
