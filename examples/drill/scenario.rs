//! The failure drill, run for real over loopback: a freight supplier
//! that goes slow, refuses connections, fails with 5xx, refuses a destination and
//! recovers, while a bounded load drives the shop.
#![allow(dead_code, unreachable_pub)] // shared by the example and its test, each using a part

#[path = "fleet.rs"]
pub mod fleet;
#[path = "freight.rs"]
pub mod freight;
#[path = "load.rs"]
pub mod load;
#[path = "overload.rs"]
pub mod overload;
#[path = "report.rs"]
pub mod report;
#[path = "shop.rs"]
pub mod shop;
#[path = "tap.rs"]
pub mod tap;

use std::time::Duration;

use seawall::BoxError;
use tokio::time::Instant;

use freight::{Freight, Mode};
use load::{Arrivals, Rates};
use report::{Change, Gauges, Observations, Phase};
use seawall::fault::{Fault, InjectionConfig};
use shop::Policy;

/// The schedule of supplier behaviours, in order.
pub const SCHEDULE: [Mode; 6] = [
    Mode::Healthy,
    Mode::Slow,
    Mode::Refusing,
    Mode::ServerError,
    Mode::BusinessRefusal,
    Mode::Healthy,
];

/// The fault the shop's fault layer injects in a phase, in front of a healthy
/// supplier: the slow phase's latency (well past the budget) and the 5xx phase's
/// `503`. The refusing phase needs a really closed listener (a layer cannot refuse
/// a TCP connection), and the 404 is the supplier's own business answer.
pub fn rehearsal(mode: Mode, slow_delay: Duration) -> Option<Fault> {
    match mode {
        Mode::Slow => Some(Fault::latency(slow_delay)),
        Mode::ServerError => Some(Fault::HttpStatus(http::StatusCode::SERVICE_UNAVAILABLE)),
        _ => None,
    }
}

/// What the freight supplier itself does in a phase: healthy where the fault layer
/// plays the phase.
pub fn supplier_mode(mode: Mode) -> Mode {
    match mode {
        Mode::Slow | Mode::ServerError => Mode::Healthy,
        other => other,
    }
}

/// How the recommender behaves in each phase: it breaks with the freight supplier
/// (slow, refusing) and comes back from the third phase on, so the drill shows its
/// level climbing back slowly once the dwell and a whole probe window have passed.
fn recommender_mode(phase: usize) -> Mode {
    match phase {
        1..=2 => Mode::ServerError,
        _ => Mode::Healthy,
    }
}

/// Timings and rates of one run.
#[derive(Debug, Clone, Copy)]
pub struct DrillConfig {
    pub phase: Duration,
    pub policy: Policy,
    pub rates: Rates,
    /// The latency the fault layer adds in the slow phase (well past the budget).
    pub slow_delay: Duration,
    /// `--fleet N --kill-redis`: the fleet's store is stopped this long into the
    /// run, and stays down.
    pub stop_store_after: Option<Duration>,
}

impl DrillConfig {
    /// The real durations: 300 ms budget, 8 active / 10 queued / 20 ms,
    /// breaker open 10 s, degradation dwell 60 s; 30 s phases.
    pub fn real() -> Self {
        Self {
            phase: Duration::from_secs(30),
            policy: Policy {
                budget: Duration::from_millis(300),
                max_concurrent: 8,
                max_queue: 10,
                max_wait: Duration::from_millis(20),
                open_for: Duration::from_secs(10),
                dwell: Duration::from_secs(60),
                probe_ratio: 0.05,
                probe_window: Duration::from_secs(30),
                probe_successes: 20,
                strict_cap: false,
            },
            rates: Rates {
                arrivals: Arrivals::Fixed,
                quote: 40,
                checkout: 5,
                recommendations: 20,
                products: 20,
                prefetch: 0,
            },
            slow_delay: Duration::from_secs(1),
            stop_store_after: None,
        }
    }

    /// The same drill in about a minute: phases of 8 s, the breaker open for 3 s,
    /// a 5 s dwell and a quicker probe window. Budget and bulkhead limits unchanged.
    pub fn fast() -> Self {
        let mut c = Self::real();
        c.phase = Duration::from_secs(8);
        c.policy.open_for = Duration::from_secs(3);
        c.policy.dwell = Duration::from_secs(5);
        c.policy.probe_ratio = 0.25;
        c.policy.probe_window = Duration::from_secs(3);
        c.policy.probe_successes = 10;
        c
    }
}

/// Runs the whole drill and returns what it saw.
pub async fn run(config: DrillConfig) -> Result<Observations, BoxError> {
    run_serving(config, shop::Serve::default(), |_| {}).await
}

/// [`run`], with the shop on `serve`'s address; `started` is told it once the shop
/// is up (the drill prints its dashboard's address then).
pub async fn run_serving(
    config: DrillConfig,
    serve: shop::Serve,
    started: impl FnOnce(std::net::SocketAddr),
) -> Result<Observations, BoxError> {
    let freight = Freight::start()?;
    let recommender = Freight::start()?;
    let shop = shop::start(freight.addr(), recommender.addr(), config.policy, serve).await?;
    started(shop.addr);
    let mut obs = drive(config, &shop, &[&freight], &recommender, &[]).await?;
    obs.freight_arrivals = freight.arrivals();
    Ok(obs)
}

/// The fleet mode's run: two fleets of `instances` shops each, under the same
/// schedule and the same load per instance, each fleet with a supplier of its
/// own: one coordinating its breakers through `store`, one whose breakers decide
/// alone. The observations are those of the coordinated fleet's first instance,
/// plus the probes each fleet sent its supplier.
pub async fn run_fleet(
    config: DrillConfig,
    instances: usize,
    store: &fleet::FleetStore,
) -> Result<FleetRun, BoxError> {
    let recommender = Freight::start()?;
    let coordinated_supplier = Freight::start()?;
    let independent_supplier = Freight::start()?;
    let mut coordinated = Vec::new();
    let mut independent = Vec::new();
    for _ in 0..instances {
        coordinated.push(
            shop::start_in_fleet(
                coordinated_supplier.addr(),
                recommender.addr(),
                config.policy,
                shop::Serve::default(),
                Some(store),
            )
            .await?,
        );
        independent.push(
            shop::start(
                independent_supplier.addr(),
                recommender.addr(),
                config.policy,
                shop::Serve::default(),
            )
            .await?,
        );
    }
    let (first, rest) = coordinated
        .split_first()
        .ok_or("a fleet needs an instance")?;
    // Every instance serves its admin routes; the first one's fleet page shows all.
    #[allow(clippy::print_stdout)] // the drill's own output, not a library's
    fn say(addr: std::net::SocketAddr) {
        println!("fleet page (every coordinated instance, read-only): http://{addr}/admin#fleet");
    }
    say(first.addr);
    let others: Vec<&shop::Running> = rest.iter().chain(&independent).collect();
    let outage = async {
        if let Some(after) = config.stop_store_after {
            tokio::time::sleep(after).await;
            store.stop();
        }
    };
    let suppliers = [&coordinated_supplier, &independent_supplier];
    let (obs, ()) = tokio::join!(
        drive(config, first, &suppliers, &recommender, &others),
        outage
    );
    let mut obs = obs?;
    obs.freight_arrivals = coordinated_supplier.arrivals();
    let probes = obs
        .phases
        .iter()
        .map(|phase| report::FleetProbes {
            coordinated: report::Rounds::of(&coordinated, phase, config.policy.open_for),
            independent: report::Rounds::of(&independent, phase, config.policy.open_for),
        })
        .collect();
    let calls_while_open = coordinated
        .iter()
        .chain(&independent)
        .flat_map(|s| s.dependency_calls.log())
        .filter(|c| c.breaker_state == "open")
        .count();
    // G as the store keeps it (the `[fleet.caps.freight]` table, stored by the
    // first instance to claim), or as configured before any answer.
    let fleet_cap = first.fleet.as_ref().map_or(0, |m| {
        let s = m.cap.snapshot();
        s.store_cap.unwrap_or(s.cap)
    });
    // The run over, each instance leaves as a rolling deploy's would: stops
    // admitting, drains its freight calls (bounded by their budget), and gives
    // its share of the cap and any probe lease back at once.
    for shop in &coordinated {
        if let Some(member) = &shop.fleet {
            member.cap.shutdown(config.policy.budget).await;
            member.breaker.shutdown().await;
        }
    }
    Ok(FleetRun {
        obs,
        probes,
        calls_while_open,
        fleet_cap,
        supplier_high_water: (
            report::most_calls_at_once(&coordinated, config.policy.budget),
            report::most_calls_at_once(&independent, config.policy.budget),
        ),
        most_probes_at_once: report::most_probes_at_once(&coordinated, config.policy.budget),
    })
}

/// What the fleet mode saw.
pub struct FleetRun {
    /// The coordinated fleet's first instance.
    pub obs: Observations,
    /// Per phase: the probes each fleet sent its supplier, per open interval.
    pub probes: Vec<report::FleetProbes>,
    /// Calls that reached a supplier from an open breaker, in either fleet (never any).
    pub calls_while_open: usize,
    /// The most probes the coordinated fleet had in flight at once.
    pub most_probes_at_once: usize,
    /// The coordinated fleet's freight cap, G.
    pub fleet_cap: u32,
    /// The most freight calls each fleet had in flight at once toward its supplier,
    /// counted on the clients' side (the supplier itself answers at once in the
    /// slow phase, whose latency the fault layer adds): (the coordinated fleet's,
    /// whose freight bulkheads share one cap; the independent fleet's).
    pub supplier_high_water: (usize, usize),
}

/// Plays the schedule on `suppliers` while the load drives `shop` and `others`
/// (each with the same load); observes `shop`.
async fn drive(
    config: DrillConfig,
    shop: &shop::Running,
    suppliers: &[&Freight],
    recommender: &Freight,
    others: &[&shop::Running],
) -> Result<Observations, BoxError> {
    let mut breaker_changes = shop.breaker.subscribe();
    let mut level_changes = shop.degradation.subscribe();
    let (phase_tx, tags) = load::Tags::new(SCHEDULE.len());
    let total = config.phase * SCHEDULE.len() as u32;
    let load = tokio::spawn(load::run(shop.addr, config.rates, total, tags.clone()));
    let other_loads: Vec<_> = others
        .iter()
        .map(|s| tokio::spawn(load::run(s.addr, config.rates, total, tags.clone())))
        .collect();

    let mut obs = Observations {
        budget: config.policy.budget,
        max_concurrent: config.policy.max_concurrent,
        max_queue: config.policy.max_queue,
        ..Observations::default()
    };
    let sample_every = Duration::from_millis(100);
    for (i, mode) in SCHEDULE.iter().enumerate() {
        // A request tagged with a phase must never meet a kinder supplier than
        // that phase's (the load reads the tag while the modes change): into a
        // phase where the supplier quotes, the tag moves first, and the supplier
        // heals once every request tagged before has ended (each is bounded by
        // its budget); into one where it cannot, the supplier changes first.
        let quotes = *mode == Mode::Healthy;
        if quotes {
            phase_tx.send_replace(i);
            tags.drained_before(i).await;
        }
        for supplier in suppliers {
            supplier.set_mode(supplier_mode(*mode));
        }
        // Each injection ends by itself a phase after it should have: the drill
        // stops it first, but nothing stays injected if the drill is cut short.
        for s in std::iter::once(shop).chain(others.iter().copied()) {
            s.faults.stop_all();
            if let Some(fault) = rehearsal(*mode, config.slow_delay) {
                s.faults
                    .inject(InjectionConfig::lasting(&fault, config.phase * 2))?;
            }
        }
        recommender.set_mode(recommender_mode(i));
        if !quotes {
            phase_tx.send_replace(i);
        }
        let start = Instant::now();
        let end = start + config.phase;
        shop.bulkhead.reset_peaks();
        while Instant::now() < end {
            tokio::time::sleep(sample_every.min(end - Instant::now())).await;
            let s = shop.bulkhead.snapshot();
            obs.gauges.push(Gauges {
                at: Instant::now(),
                active: s.active,
                queued: s.queued,
            });
        }
        let s = shop.bulkhead.snapshot();
        obs.high_water.push((s.peak_active, s.peak_queued));
        obs.phases.push(Phase {
            mode: *mode,
            start,
            end,
        });
    }
    obs.answers = load.await?;
    for other in other_loads {
        other.await?;
    }
    // Let the last calls finish their budget, then nothing may hold a slot.
    tokio::time::sleep(config.policy.budget * 2).await;
    let s = shop.bulkhead.snapshot();
    obs.held_at_end = s.active + s.queued;

    while let Ok(t) = breaker_changes.try_recv() {
        obs.breaker_changes.push(Change {
            at: t.at,
            from: t.from.as_str().to_owned(),
            to: t.to.as_str().to_owned(),
        });
    }
    while let Ok(c) = level_changes.try_recv() {
        obs.level_changes.push(Change {
            at: c.at,
            from: c.from.name.to_string(),
            to: c.to.name.to_string(),
        });
    }
    obs.admitted = shop.admitted.log();
    obs.dependency_calls = shop.dependency_calls.log();
    Ok(obs)
}
