//! Lease exclusivity under random interleavings: while the store is healthy, never
//! two probes at the dependency at once, and never two in one open interval,
//! whatever the number of instances, their call rhythms, the store's delays and
//! the dependency's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use proptest::prelude::*;
use seawall_circuit_breaker::State;
use seawall_fleet::{Faults, Fleet, LocalStore};
use support::{breaker_config, call_into, instance, most_overlapping, run_for, Dependency};
use tokio::time::Instant;

#[derive(Debug, Clone)]
struct Case {
    /// Per instance: call period and first-call offset, in ms.
    rhythms: Vec<(u64, u64)>,
    store_latency_ms: u64,
    store_jitter_ms: u64,
    dependency_ms: u64,
    failing_s: u64,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec((20u64..600, 0u64..600), 2..7),
        0u64..30,
        0u64..20,
        1u64..1500,
        5u64..45,
        any::<u64>(),
    )
        .prop_map(
            |(rhythms, store_latency_ms, store_jitter_ms, dependency_ms, failing_s, seed)| Case {
                rhythms,
                store_latency_ms,
                store_jitter_ms,
                dependency_ms,
                failing_s,
                seed,
            },
        )
}

/// Runs one case for 80 s of paused time; returns the probes seen and whether
/// every instance ended closed.
fn run(case: &Case) -> (Vec<support::Probe>, usize, bool) {
    let rt = seawall_test_support::paused_runtime();
    rt.block_on(async {
        let store = LocalStore::with_seed(case.seed);
        store
            .set_faults(
                Faults::latency(Duration::from_millis(case.store_latency_ms))
                    .with_latency_jitter(Duration::from_millis(case.store_jitter_ms)),
            )
            .unwrap();
        let fleet = Fleet::builder(store).seed(case.seed).build().unwrap();
        let dep = Dependency::new(Duration::from_millis(case.dependency_ms));
        let instances: Vec<_> = (0..case.rhythms.len())
            .map(|i| instance(i, &dep, Some(&fleet), breaker_config()))
            .collect();
        run_for(Duration::from_millis(50)).await;
        dep.fail(true);
        let start = Instant::now();
        for (inst, &(period, offset)) in instances.iter().zip(&case.rhythms) {
            let (svc, tally) = (inst.svc.clone(), inst.tally.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(
                    start + Duration::from_millis(offset),
                    Duration::from_millis(period),
                );
                loop {
                    tick.tick().await;
                    tokio::spawn(call_into(svc.clone(), tally.clone()));
                }
            });
        }
        run_for(Duration::from_secs(case.failing_s)).await;
        dep.fail(false);
        run_for(Duration::from_secs(80 - case.failing_s)).await;
        let closed = instances.iter().all(|i| i.state() == State::Closed);
        (dep.probes(), dep.max_probes_in_flight(), closed)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn never_two_probes_at_once_nor_two_in_one_interval(case in case()) {
        let (probes, most_in_flight, closed) = run(&case);
        prop_assert!(most_in_flight <= 1, "{most_in_flight} probes at once: {probes:?}");
        prop_assert!(most_overlapping(&probes) <= 1);
        // Each failed probe reopens every instance for at least the 10 s interval.
        let mut starts: Vec<Instant> = probes.iter().map(|p| p.start).collect();
        starts.sort();
        for pair in starts.windows(2) {
            prop_assert!(pair[1] - pair[0] >= Duration::from_secs(10), "{probes:?}");
        }
        // And the fleet recovered: the dependency was healthy for 35 s or more.
        prop_assert!(closed);
    }
}
