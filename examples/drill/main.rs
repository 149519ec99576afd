//! The failure drill: an outage rehearsal, run for real on 127.0.0.1.
//!
//! ```text
//! cargo run --release --example drill            # the real durations (about 3 minutes)
//! cargo run --release --example drill -- --fast  # the same drill in about a minute
//! ```
//!
//! A freight supplier (a hyper server) goes healthy → slow → refusing → 5xx →
//! business 404 → healthy while a bounded load drives an axum shop whose `/quote`
//! is protected by Fallback → Deadline 300 ms → Bulkhead 8/10/20 ms → Breaker
//! (10 outcomes, 5 failures, open 10 s, one probe). It prints one table row per
//! phase and writes an SVG timeline.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "../shared/logs.rs"]
mod logs;

mod scenario;

use std::path::PathBuf;

use scenario::report;
use scenario::DrillConfig;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), seawall::BoxError> {
    logs::install();
    let fast = std::env::args().any(|a| a == "--fast");
    let config = if fast {
        DrillConfig::fast()
    } else {
        DrillConfig::real()
    };
    println!(
        "seawall failure drill ({}): {} phases of {:?}, budget {:?}, bulkhead {}/{}/{:?}, breaker open {:?}",
        if fast { "--fast" } else { "real durations" },
        scenario::SCHEDULE.len(),
        config.phase,
        config.policy.budget,
        config.policy.max_concurrent,
        config.policy.max_queue,
        config.policy.max_wait,
        config.policy.open_for,
    );
    let r = config.rates;
    println!(
        "load: open loop, each request on its own task at a fixed rate (requests/s): \
         /quote {}, /checkout {}, /recommendations {}, /products {} ({} in all)",
        r.quote,
        r.checkout,
        r.recommendations,
        r.products,
        r.quote + r.checkout + r.recommendations + r.products,
    );
    let obs = scenario::run(config).await?;
    let rows = obs.rows();
    println!(
        "concurrency: at most {} requests in flight at once",
        report::peak_in_flight(&obs.answers)
    );
    println!();
    print!("{}", report::table(&rows));
    println!();
    println!(
        "slots held once the load stopped: {}; invented prices: {}",
        obs.held_at_end,
        rows.iter().map(|r| r.invented_prices).sum::<usize>()
    );
    let dir = PathBuf::from("target").join("drill");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("timeline.svg");
    std::fs::write(&path, report::svg(&obs))?;
    println!("timeline: {}", path.display());
    Ok(())
}
