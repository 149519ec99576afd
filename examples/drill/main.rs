//! The failure drill: an outage rehearsal, run for real on 127.0.0.1.
//!
//! ```text
//! cargo run --release --example drill            # the real durations (about 3 minutes)
//! cargo run --release --example drill -- --fast  # the same drill in about a minute
//! cargo run --release --example drill -- --fast --serve-dashboard  # and watch it live
//! ```
//!
//! `--serve-dashboard[=ADDR]` serves the shop on `ADDR` (127.0.0.1:3000 by
//! default) and prints the address of its incident dashboard (`/admin`), so that
//! the shop can be watched and inspected while the drill runs; the shop stays up
//! after the report until the process is stopped. The dashboard's controls need
//! the token in `SEAWALL_ADMIN_TOKEN`; without it the dashboard is read-only.
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

use std::net::SocketAddr;
use std::path::PathBuf;

use scenario::report;
use scenario::shop::Serve;
use scenario::DrillConfig;
use seawall::admin::AdminToken;

/// The address `--serve-dashboard[=ADDR]` asks for, if it does.
fn dashboard_addr() -> Result<Option<SocketAddr>, seawall::BoxError> {
    for arg in std::env::args().skip(1) {
        if arg == "--serve-dashboard" {
            return Ok(Some(SocketAddr::from(([127, 0, 0, 1], 3000))));
        }
        if let Some(addr) = arg.strip_prefix("--serve-dashboard=") {
            return Ok(Some(addr.parse()?));
        }
    }
    Ok(None)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), seawall::BoxError> {
    logs::install();
    let fast = std::env::args().any(|a| a == "--fast");
    let dashboard = dashboard_addr()?;
    let serve = match dashboard {
        Some(addr) => Serve {
            addr,
            token: AdminToken::from_env("SEAWALL_ADMIN_TOKEN")?,
        },
        None => Serve::default(),
    };
    let controls = serve.token.is_some();
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
    let obs = scenario::run_serving(config, serve, |addr| {
        if dashboard.is_some() {
            println!(
                "dashboard: http://{addr}/admin ({})",
                if controls {
                    "controls with the token in SEAWALL_ADMIN_TOKEN"
                } else {
                    "read-only: set SEAWALL_ADMIN_TOKEN for its controls"
                }
            );
        }
    })
    .await?;
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
    if dashboard.is_some() {
        println!("the shop stays up for inspection on its dashboard; stop the process to end");
        std::future::pending::<()>().await;
    }
    Ok(())
}
