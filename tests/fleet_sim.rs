//! The fleet simulation's invariants, on the example's own model with a smaller
//! fleet (the runs are deterministic, so the figures are exact, not statistics).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/fleet_sim/model.rs"]
mod model;

#[path = "../examples/fleet_sim/cap.rs"]
mod cap;

// The cap's chart draws its time axis with the report's; the tables are not used here.
#[path = "../examples/fleet_sim/report.rs"]
#[allow(dead_code)]
mod report;

use std::time::Duration;

use model::{Figures, Mode, SimConfig};

const N: usize = 60;

fn figures(mode: Mode) -> (Figures, model::Observations) {
    let mut config = SimConfig::new(N, mode);
    config.rps = 5;
    config.store_latency = Duration::from_millis(2);
    let obs = model::run(&config).unwrap();
    (obs.figures(), obs)
}

const FLEET: Mode = Mode::Fleet {
    loss: 0.0,
    push_loss: 0.0,
};

#[test]
fn without_coordination_every_instance_probes_in_every_interval() {
    let (f, obs) = figures(Mode::Local);
    // Tripped together, without jitter: every open interval ends for all at once.
    assert_eq!(f.probes_per_interval, N, "{f:?}");
    assert!(f.probes_per_100ms >= N / 2, "{f:?}");
    assert_eq!(obs.other_errors, 0);
    let (jittered, _) = figures(Mode::LocalJitter);
    // Jitter spreads the probes out, but each instance still sends its own.
    assert!(
        jittered.probes_per_100ms < f.probes_per_100ms,
        "{jittered:?}"
    );
    assert!(jittered.probes_per_interval >= N / 2, "{jittered:?}");
}

#[test]
fn the_fleet_lease_sends_one_probe_per_interval_and_the_verdict_closes_everyone_within_a_second() {
    let (f, obs) = figures(FLEET);
    assert_eq!(f.probes_per_interval, 1, "{f:?}");
    // Six failed intervals in the 60 s outage at most, then the good probe.
    assert!(f.total_probes <= 7, "{f:?}");
    let closed = f.first_good_probe_to_all_closed.expect("everyone closed");
    assert!(closed <= Duration::from_secs(1), "{f:?}");
    // The first good probe comes at most one interval (jitter included) plus a
    // probe window after the recovery.
    assert!(
        f.recovery_to_first_good_probe.unwrap() <= Duration::from_secs(13),
        "{f:?}"
    );
    // Through the ramp: far less than the whole fleet's load in the first second.
    assert!(f.load_first_second * 2 < f.steady_load, "{f:?}");
    assert_eq!(obs.other_errors, 0);
    assert_eq!(obs.closed_at_end, N);
}

#[test]
fn with_every_push_lost_everyone_still_closes_within_one_open_interval() {
    let (f, obs) = figures(Mode::Fleet {
        loss: 0.0,
        push_loss: 1.0,
    });
    assert_eq!(f.probes_per_interval, 1, "{f:?}");
    let closed = f.first_good_probe_to_all_closed.expect("everyone closed");
    // One open interval: 10 s, jittered by up to 20 %.
    assert!(closed <= Duration::from_secs(12), "{f:?}");
    assert_eq!(obs.other_errors, 0);
}

#[test]
fn with_a_tenth_of_store_operations_lost_at_most_two_probes_per_interval() {
    let (f, obs) = figures(Mode::Fleet {
        loss: 0.1,
        push_loss: 0.1,
    });
    assert!(f.probes_per_interval <= 2, "{f:?}");
    assert!(f.first_good_probe_to_all_closed.is_some(), "{f:?}");
    assert!(obs.store_errors > 0, "the loss never hit");
    assert_eq!(obs.other_errors, 0);
    assert_eq!(obs.closed_at_end, N);
}

// ----- the fleet-wide cap: 100 instances, G = 64, the hot group moving --------------

fn cap_run(store: cap::StoreCase, mode: seawall::fleet::CapMode) -> (cap::CapSim, cap::CapRun) {
    let mut sim = cap::CapSim::new(store, mode);
    sim.phases = 4;
    let run = cap::run(&sim).unwrap();
    (sim, run)
}

#[test]
fn the_cap_is_never_exceeded_in_strict_mode_and_saturating_demand_uses_90_percent_of_it() {
    for store in [cap::StoreCase::Healthy, cap::StoreCase::Lossy(0.1)] {
        let (sim, run) = cap_run(store, seawall::fleet::CapMode::Strict);
        let label = sim.label();
        assert!(run.most <= 64, "{label}: {} at the supplier", run.most);
        assert!(run.samples.iter().all(|s| s.allotted <= 64), "{label}");
        assert!(
            run.used >= 0.9,
            "{label}: {:.1} % of G used",
            run.used * 100.0
        );
        // Every move of the hot group was followed: two periods for the old
        // group's renewals to see its demand gone and give back, a call, the
        // store's push and the new group's early claims (a few round trips of
        // 2 ms), seen at the next 100 ms sample.
        assert_eq!(run.follow.len(), sim.phases - 1, "{label}");
        let sample = Duration::from_millis(100);
        let bound = sim.renew_every * 2 + sim.supplier_latency + sample;
        assert!(
            run.follow.iter().all(|d| *d <= bound),
            "{label}: {:?}",
            run.follow
        );
        assert_eq!(run.other, 0, "{label}");
        // Calls make no store operation: the renewals, the early claims (at
        // most four a period each, far fewer in fact) and a subscription or two
        // are all there is.
        let periods = (sim.phase * sim.phases as u32).as_millis() / sim.renew_every.as_millis();
        let periods = periods as u64;
        assert!(
            run.early_claims <= sim.instances as u64 * periods,
            "{label}"
        );
        assert!(
            run.store_ops <= sim.instances as u64 * (periods + 4) + run.early_claims,
            "{label}"
        );
        assert!(run.served + run.full > 10 * run.store_ops, "{label}");
    }
}

#[test]
fn a_store_outage_keeps_strict_within_the_cap_and_available_within_its_bound() {
    let (sim, strict) = cap_run(cap::StoreCase::Outage, seawall::fleet::CapMode::Strict);
    assert!(strict.most <= 64, "{}", strict.most);
    assert_eq!(
        strict.lapses, sim.instances as u64,
        "every lease lapsed in the outage"
    );
    // No call waits on the store: none took longer than the supplier.
    assert_eq!(strict.longest_call, sim.supplier_latency);
    assert_eq!(strict.other, 0);
    let share = 1;
    let (sim, available) = cap_run(
        cap::StoreCase::Outage,
        seawall::fleet::CapMode::Available { local_share: share },
    );
    // G plus the cut-off instances' local shares.
    let bound = 64 + sim.instances * share as usize;
    assert!(available.most <= bound, "{}", available.most);
    assert_eq!(available.other, 0);
    // Available mode served calls through the outage; strict refused them.
    assert!(available.served > strict.served);
}
