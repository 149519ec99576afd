//! A provider that flaps faster than the dwell, for a simulated hour: the machine with
//! dwell, hysteresis and whole-window probes stays put; the naive one ping-pongs.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use seawall_core::{Outcome, SeededRandom};
use seawall_degradation::{DegradationConfig, DegradationMachine};
use tokio::time::Instant;

const LEVELS: usize = 4; // full, reduced, router, message
const HOUR: Duration = Duration::from_secs(3600);
const STEP: Duration = Duration::from_millis(100); // 10 requests a second
const HEALTHY: Duration = Duration::from_secs(40);
const FAILING: Duration = Duration::from_secs(20);

/// The best level's provider: 40 s healthy, 20 s failing, over and over (both phases
/// shorter than the 60 s dwell). The lower levels always answer.
fn provider_fails(level: usize, since_start: Duration) -> bool {
    let period = (HEALTHY + FAILING).as_millis();
    level == 0 && since_start.as_millis() % period >= HEALTHY.as_millis()
}

/// Runs the hour and returns the number of level changes.
fn simulate(config: DegradationConfig) -> usize {
    let t0 = Instant::now();
    let mut m =
        DegradationMachine::new(LEVELS, config, Box::new(SeededRandom::new(42)), t0).unwrap();
    let mut changes = 0;
    let mut elapsed = Duration::ZERO;
    while elapsed < HOUR {
        let now = t0 + elapsed;
        let (ticket, climbed) = m.route(now);
        changes += usize::from(climbed.is_some());
        let outcome = if provider_fails(ticket.level(), elapsed) {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        changes += usize::from(m.record(ticket, outcome, now).is_some());
        elapsed += STEP;
    }
    changes
}

#[test]
fn a_flapping_provider_does_not_make_the_levels_ping_pong() {
    let config = DegradationConfig::default();
    // Each climb needs the dwell and then a whole probe window at the level it climbs
    // from, both counted from entering that level: climbs are at least
    // `min_dwell + probe_window` apart. Each fall is matched by an earlier climb, except
    // for the first `LEVELS - 1` falls.
    let max_climbs = HOUR.as_secs() / (config.min_dwell + config.probe_window).as_secs();
    let bound = 2 * max_climbs as usize + (LEVELS - 1);
    let steady = simulate(config);
    assert!(steady >= 1, "the provider did fail: at least one fall");
    assert!(steady <= bound, "{steady} changes, bound {bound}");

    // The same probes without dwell or hysteresis: climb on one probe success, fall on
    // five failures — the ping-pong to avoid.
    let naive = simulate(DegradationConfig {
        min_dwell: Duration::ZERO,
        probe_window: Duration::ZERO,
        probe_successes_to_recover: 1,
        probe_max_failure_rate: 1.0,
        ..DegradationConfig::default()
    });
    assert!(naive >= 10 * steady, "naive {naive} vs steady {steady}");
    // It flaps at least once per failing phase: 60 falls in the hour, as many climbs.
    let periods = HOUR.as_secs() / (HEALTHY + FAILING).as_secs();
    assert!(naive >= 2 * periods as usize - 1, "naive {naive}");
}
