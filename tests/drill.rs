//! The failure drill over real loopback sockets, with shortened timings.
//!
//! Real time is the exception to the no-sleep rule here (paused time would
//! auto-advance while the test waits on sockets), so the assertions are invariants
//! that hold under any load: limits never exceeded, no dependency call in an open
//! epoch but probes, no invented price, every slot released.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/drill/scenario.rs"]
mod scenario;

use std::io::Write;
use std::time::Duration;

use scenario::freight::{Mode, PRICE_CENTS};
use scenario::load::Endpoint;
use scenario::DrillConfig;

fn test_config() -> DrillConfig {
    let mut c = DrillConfig::fast();
    c.phase = Duration::from_secs(3);
    c.policy.open_for = Duration::from_secs(1);
    c.policy.dwell = Duration::from_secs(1);
    c.policy.probe_ratio = 0.5;
    c.policy.probe_window = Duration::from_secs(1);
    c.policy.probe_successes = 3;
    c
}

#[tokio::test(flavor = "current_thread")]
async fn the_drill_keeps_its_promises() {
    let config = test_config();
    let obs = scenario::run(config).await.unwrap();
    let rows = obs.rows();
    let table = scenario::report::table(&rows);
    assert_eq!(rows.len(), scenario::SCHEDULE.len(), "{table}");

    for (row, phase) in rows.iter().zip(&obs.phases) {
        // The bulkhead never lets more than its limits in.
        assert!(row.max_active <= 8, "{table}");
        assert!(row.max_queued <= 10, "{table}");
        // Rejections happen only at those limits.
        if row.unavailable.contains_key("capacity_full") {
            assert_eq!((row.max_active, row.max_queued), (8, 10), "{table}");
        }
        if row.unavailable.contains_key("queue_timeout") {
            assert_eq!(row.max_active, 8, "{table}");
        }
        // No call reaches the supplier while the breaker is open, except probes.
        assert_eq!(row.calls_while_open, 0, "{table}");
        // The page without a dependency is never refused.
        assert_eq!(row.products_failed, 0, "{table}");
        // Nothing the supplier did not quote is ever shown, and nothing is held
        // once a phase's budget has run out.
        assert_eq!(row.invented_prices, 0, "{table}");
        assert_eq!(row.held_after, 0, "{table}");
        // While the supplier cannot quote in time, nobody gets a price or an order:
        // a late answer is a deadline rejection, never a success past the budget.
        if matches!(
            phase.mode,
            Mode::Slow | Mode::Refusing | Mode::ServerError | Mode::BusinessRefusal
        ) {
            assert_eq!(row.quotes_served, 0, "{table}");
            assert_eq!(row.checkouts_confirmed, 0, "{table}");
        }
    }
    let slow = &rows[1];
    assert!(
        slow.unavailable.contains_key("timeout") || slow.unavailable.contains_key("breaker_open"),
        "{table}"
    );
    // The 5xx phase is injected by the shop's fault layer in front of a healthy
    // supplier: none of its calls reaches the supplier.
    let five_xx = &rows[3];
    assert_eq!(five_xx.supplier_received, 0, "{table}");
    assert!(
        five_xx.unavailable.contains_key("supplier_error")
            || five_xx.unavailable.contains_key("breaker_open"),
        "{table}"
    );
    let business = &rows[4];
    assert!(
        business.unavailable.contains_key("business_refusal"),
        "{table}"
    );

    // Every price shown is the supplier's.
    assert!(obs
        .answers
        .iter()
        .filter(|a| matches!(a.endpoint, Endpoint::Quote | Endpoint::Checkout))
        .all(|a| a.price_cents.is_none_or(|p| p == PRICE_CENTS)));

    // The breaker opened, and closed again only through a probe.
    let changes: Vec<(&str, &str)> = obs
        .breaker_changes
        .iter()
        .map(|c| (c.from.as_str(), c.to.as_str()))
        .collect();
    assert!(changes.contains(&("closed", "open")), "{changes:?}");
    assert!(!changes.contains(&("open", "closed")), "{changes:?}");
    assert_eq!(changes.last().map(|c| c.1), Some("closed"), "{changes:?}");
    assert_eq!(
        changes.last().map(|c| c.0),
        Some("half_open"),
        "{changes:?}"
    );

    // Recommendations fell at once and climbed back.
    let levels: Vec<(&str, &str)> = obs
        .level_changes
        .iter()
        .map(|c| (c.from.as_str(), c.to.as_str()))
        .collect();
    assert_eq!(
        levels.first(),
        Some(&("personalized", "popular")),
        "{levels:?}"
    );
    assert_eq!(
        levels.last(),
        Some(&("popular", "personalized")),
        "{levels:?}"
    );

    // Every slot is released at the end.
    assert_eq!(obs.held_at_end, 0);
}

/// The overload phase over loopback: three classes through one bulkhead, then
/// the same load through a plain one. What must hold under any load: no class
/// holds more than its share of the 8 slots (default 90 %: 7, sheddable 50 %: 4),
/// a critical call is never the one displaced, a bulkhead without classes never
/// displaces, every price is the supplier's and every slot comes back.
#[tokio::test(flavor = "current_thread")]
async fn the_overload_phase_keeps_each_class_within_its_share() {
    use scenario::overload::{self, OverloadConfig};

    let p = test_config().policy;
    let run = overload::run(&p, OverloadConfig::three_times(Duration::from_secs(2)))
        .await
        .unwrap();
    let table = overload::table(&run, &p);
    let rows = run.rows();
    assert_eq!(rows.len(), 6, "{table}");
    let row = |side: &str, class: &str| {
        rows.iter()
            .find(|r| r.side == side && r.class == class)
            .unwrap()
    };
    for (class, share) in [("critical", 8), ("default", 7), ("sheddable", 4)] {
        let with = row("classes", class);
        assert!(with.requests > 0, "{table}");
        assert!(
            with.most_at_once <= share,
            "{class} over its share\n{table}"
        );
        let without = row("FIFO", class);
        assert!(!without.rejected.contains_key("displaced"), "{table}");
        for r in [with, without] {
            assert_eq!(r.invented_prices, 0, "{table}");
        }
    }
    assert!(
        !row("classes", "critical")
            .rejected
            .contains_key("displaced"),
        "{table}"
    );
    assert!(run.most_at_once(0) <= 8, "{table}");
    assert!(run.most_at_once(1) <= 8, "{table}");
    for side in &run.sides {
        assert_eq!(side.held_at_end, 0, "{} held slots\n{table}", side.label);
    }
}

/// The shop's document in a fleet caps freight as users would: a
/// `[fleet.caps.freight]` table, checked when the document loads.
#[test]
fn the_fleet_document_caps_freight_in_its_fleet_table() {
    let p = test_config().policy;
    let document = scenario::shop::document_in_fleet(&p, Some("local"));
    let policies = seawall::config::Policies::from_toml(&document).unwrap();
    let fleet = policies.fleet().unwrap();
    let cap = fleet.caps["freight"].config().unwrap();
    assert_eq!(cap.cap, 8);
    assert_eq!(cap.longest_call, p.budget);
    // The default mode: an instance cut off from the store serves its share.
    assert_eq!(cap.mode, seawall::fleet::CapMode::default());
    assert!(scenario::shop::document(&p).find("[fleet").is_none());
    let strict = scenario::shop::Policy {
        strict_cap: true,
        ..p
    };
    let document = scenario::shop::document_in_fleet(&strict, Some("local"));
    let policies = seawall::config::Policies::from_toml(&document).unwrap();
    let cap = policies.fleet().unwrap().caps["freight"].config().unwrap();
    assert_eq!(cap.mode, seawall::fleet::CapMode::Strict);
}

/// `--fleet 3` with the store (a `redis-server` when one is on PATH) stopped
/// half-way through the first phase and left down for the whole incident. In
/// the cap's default mode every instance keeps serving at its share of the cap,
/// and its breaker recovers on its own: the final, healthy phase serves quotes
/// (in strict mode the cap would refuse them all).
#[tokio::test(flavor = "current_thread")]
async fn the_fleet_drill_keeps_serving_quotes_with_its_store_stopped_mid_run() {
    let store = scenario::fleet::FleetStore::start().unwrap();
    let mut config = test_config();
    config.stop_store_after = Some(config.phase / 2);
    let run = scenario::run_fleet(config, 3, &store).await.unwrap();
    let rows = run.obs.rows();
    let table = scenario::report::table_with_fleet(&rows, Some(&run.probes));
    let last = rows.last().unwrap();
    assert!(
        last.quotes_served > 0,
        "no quote served in the last phase with the store down ({}): {table}",
        store.label()
    );
}

/// `--fleet 3` on the in-process store (the drill's own choice when no
/// `redis-server` is on PATH): the coordinated fleet never has two probes at its
/// supplier at once, and no call reaches a supplier from an open breaker.
#[tokio::test(flavor = "current_thread")]
async fn the_fleet_drill_probes_one_at_a_time_with_coordination() {
    let store = scenario::fleet::FleetStore::local();
    assert!(store.label().contains("LocalStore"), "{}", store.label());
    let run = scenario::run_fleet(test_config(), 3, &store).await.unwrap();
    let rows = run.obs.rows();
    let table = scenario::report::table_with_fleet(&rows, Some(&run.probes));
    assert_eq!(run.probes.len(), scenario::SCHEDULE.len(), "{table}");
    assert_eq!(run.most_probes_at_once, 1, "{table}");
    assert_eq!(run.calls_while_open, 0, "{table}");
    // The freight bulkheads share the cap of the document's `[fleet.caps.freight]`
    // (8, the supplier's capacity) across the fleet: the capped fleet's clients never
    // have more calls in flight toward it, give or take one per instance (a lease
    // handed over while a call ends); the independent fleet's may have N times as
    // many.
    let (capped, alone) = run.supplier_high_water;
    assert_eq!(run.fleet_cap, 8, "{table}");
    let cap = run.fleet_cap as usize;
    assert!(
        capped <= cap + 3,
        "capped fleet's supplier saw {capped}: {table}"
    );
    assert!(alone <= 3 * cap + 3, "{alone}");
    let _ = writeln!(
        std::io::stderr(),
        "supplier high-water mark: capped fleet {capped}, independent fleet {alone} (cap {cap})"
    );
    let coordinated: usize = run.probes.iter().map(|p| p.coordinated.probes).sum();
    let independent: usize = run.probes.iter().map(|p| p.independent.probes).sum();
    assert!(coordinated > 0 && independent > 0, "{table}");
    for row in &rows {
        assert_eq!(row.invented_prices, 0, "{table}");
    }
    // The observed instance recovered.
    assert!(
        run.obs
            .breaker_changes
            .last()
            .is_some_and(|c| c.to == "closed"),
        "{table}"
    );
}

#[test]
fn probes_are_grouped_into_open_intervals() {
    use scenario::report::Rounds;
    let t0 = tokio::time::Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let open_for = Duration::from_secs(10);
    // Three together, then one a whole interval later, then two 6 s apart.
    let starts = [at(0), at(3), at(40), at(10_000), at(20_000), at(26_000)];
    assert_eq!(
        Rounds::from_starts(&starts, open_for),
        Rounds {
            probes: 6,
            intervals: 4,
            most: 3
        }
    );
    assert_eq!(Rounds::from_starts(&[], open_for), Rounds::default());
}

#[test]
fn the_load_report_counts_requests_in_flight_together() {
    use scenario::load::{Answer, Endpoint};
    let t0 = tokio::time::Instant::now();
    let answer = |sent_ms: u64, took_ms: u64| Answer {
        endpoint: Endpoint::ALL[0],
        phase: 0,
        sent_at: t0 + Duration::from_millis(sent_ms),
        latency: Duration::from_millis(took_ms),
        status: 200,
        price_cents: None,
        reason: None,
    };
    // 0–100 and 50–80 overlap; 100–150 starts as the first ends: two at most.
    let answers = [answer(0, 100), answer(50, 30), answer(100, 50)];
    assert_eq!(scenario::report::peak_in_flight(&answers), 2);
    assert_eq!(scenario::report::peak_in_flight(&[]), 0);
}
