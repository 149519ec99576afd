//! The failure drill: an outage rehearsal, run for real on 127.0.0.1.
//!
//! ```text
//! cargo run --release --example drill            # the real durations (about 4 minutes)
//! cargo run --release --example drill -- --fast  # the same drill in about a minute and a half
//! cargo run --release --example drill -- --fast --serve-dashboard  # and watch it live
//! cargo run --release --example drill -- --fast --only-overload   # phase 7 alone
//! cargo run --release --example drill -- --fast --fleet 3   # three instances, one store
//! cargo run --release --example drill -- --fast --fleet 3 --strict-cap   # the cap in strict mode
//! cargo run --release --example drill -- --fast --fleet 3 --kill-redis   # the store stopped mid-run
//! ```
//!
//! `--fleet N` runs N shop instances whose freight breakers coordinate through one
//! store, and whose freight bulkheads share one fleet-wide cap (the policy
//! document's `[fleet.caps.freight]`, 8): a `redis-server` the drill starts on a free loopback port, or
//! an in-process `LocalStore` when none is on PATH (the output says which). Beside
//! them run N instances that do not coordinate, against a supplier of their own,
//! under the same schedule and load; the table (of the first coordinated instance)
//! gains each fleet's probes per open interval at its supplier, and the output
//! each fleet's high-water mark of freight calls in flight (at most 8 across the
//! capped fleet, up to 8 × N for the other), counted at the shops' clients.
//! The cap runs in its default mode: an instance cut off from the store (Redis
//! killed mid-run) keeps serving at the cap divided by the instances it last
//! knew; `--strict-cap` puts it in strict mode (such an instance refuses every
//! capped call until the store answers again).
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
//! (10 outcomes, 5 failures, open 10 s, one probe) → fault layer → client. The slow
//! and 5xx phases are injected by that fault layer (`seawall::fault`) in front of a
//! healthy supplier, as a team would rehearse them against its real dependency;
//! the refusing phase closes the supplier's listener, and the 404 is the
//! supplier's own answer. It prints one table row per phase and writes an SVG
//! timeline.
//!
//! Phase 7 overloads one freight bulkhead at about 3× its supplier's capacity with
//! critical checkout quotes, default browsing quotes and sheddable prefetches,
//! first with classes, then the same load through the same bulkhead without them,
//! and prints per class the share served within the budget, the p99 of the quotes
//! served and why the others were not (`scenario::overload`).
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

/// The instances `--fleet N` asks for, if it does (2 to 16).
fn fleet_size() -> Result<Option<usize>, seawall::BoxError> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = match arg.strip_prefix("--fleet=") {
            Some(v) => v.to_owned(),
            None if arg == "--fleet" => args.next().ok_or("--fleet needs a number of instances")?,
            None => continue,
        };
        let n: usize = value
            .parse()
            .map_err(|_| format!("--fleet: `{value}` is not a number of instances"))?;
        if !(2..=16).contains(&n) {
            return Err(format!("--fleet: {n} instances; a fleet here has 2 to 16").into());
        }
        return Ok(Some(n));
    }
    Ok(None)
}

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
    let fleet = fleet_size()?;
    if fleet.is_some() && dashboard.is_some() {
        return Err("--fleet and --serve-dashboard do not go together: pick one".into());
    }
    let serve = match dashboard {
        Some(addr) => Serve {
            addr,
            token: AdminToken::from_env("SEAWALL_ADMIN_TOKEN")?,
        },
        None => Serve::default(),
    };
    let controls = serve.token.is_some();
    let mut config = if fast {
        DrillConfig::fast()
    } else {
        DrillConfig::real()
    };
    config.policy.strict_cap = std::env::args().any(|a| a == "--strict-cap");
    if std::env::args().any(|a| a == "--kill-redis") {
        // Half-way through the third phase, for the rest of the run.
        config.stop_store_after = Some(config.phase * 5 / 2);
    }
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
    if let Some(n) = fleet {
        return run_fleet(config, n).await;
    }
    if std::env::args().any(|a| a == "--only-overload") {
        return overload(&config).await;
    }
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

    overload(&config).await?;
    if dashboard.is_some() {
        println!("the shop stays up for inspection on its dashboard; stop the process to end");
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// Phase 7: three classes of quotes through one bulkhead at about 3× what the
/// supplier serves, next to the same load through a plain FIFO bulkhead.
async fn overload(config: &DrillConfig) -> Result<(), seawall::BoxError> {
    println!();
    println!(
        "phase 7, overload: checkout quotes critical, browsing quotes default, prefetches sheddable, through one bulkhead"
    );
    let overload = scenario::overload::OverloadConfig::three_times(config.phase);
    let run = scenario::overload::run(&config.policy, overload).await?;
    print!("{}", scenario::overload::table(&run, &config.policy));
    let critical = |side: &str| {
        run.rows()
            .iter()
            .find(|r| r.side == side && r.class == "critical")
            .map_or(0.0, scenario::overload::ClassRow::served_share)
    };
    println!(
        "critical quotes served within the budget: {:.1} % with classes (goal: at least 99 %), {:.1} % first in, first out",
        critical("classes"),
        critical("FIFO"),
    );
    Ok(())
}

/// `--fleet N`: the drill on two fleets of N instances, one coordinated.
async fn run_fleet(config: DrillConfig, n: usize) -> Result<(), seawall::BoxError> {
    let store = scenario::fleet::FleetStore::start()?;
    println!("fleet: {n} coordinated instances sharing {}", store.label());
    println!(
        "        and {n} instances deciding alone, against a supplier of their own, same schedule and load"
    );
    let run = scenario::run_fleet(config, n, &store).await?;
    let rows = run.obs.rows();
    println!();
    print!("{}", report::table_with_fleet(&rows, Some(&run.probes)));
    println!();
    let most = |pick: fn(&report::FleetProbes) -> report::Rounds| {
        run.probes.iter().map(|p| pick(p).most).max().unwrap_or(0)
    };
    let sum = |pick: fn(&report::FleetProbes) -> report::Rounds| {
        run.probes.iter().fold((0, 0), |(p, i), f| {
            (p + pick(f).probes, i + pick(f).intervals)
        })
    };
    let (cp, ci) = sum(|f| f.coordinated);
    let (ip, ii) = sum(|f| f.independent);
    println!(
        "supplier probes per open interval across the fleet of {n}: coordinated at most {} ({cp} in {ci} intervals), independent at most {} ({ip} in {ii} intervals)",
        most(|f| f.coordinated),
        most(|f| f.independent),
    );
    println!(
        "most probes in flight at once, coordinated fleet: {}; calls that reached a supplier from an open breaker, both fleets: {}",
        run.most_probes_at_once, run.calls_while_open
    );
    let (capped, alone) = run.supplier_high_water;
    println!(
        "freight calls in flight at once toward the supplier (counted at the shops' clients): coordinated fleet {capped} \
         (freight bulkheads capped fleet-wide at {}), independent fleet {alone} (up to {} × {n} = {})",
        run.fleet_cap,
        config.policy.max_concurrent,
        config.policy.max_concurrent * n,
    );
    let dir = PathBuf::from("target").join("drill");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("timeline-fleet.svg");
    std::fs::write(&path, report::svg(&run.obs))?;
    println!("timeline (first coordinated instance): {}", path.display());
    Ok(())
}
