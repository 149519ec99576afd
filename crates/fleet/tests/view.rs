//! One view of every replica over `LocalStore` in paused time: each
//! coordinating instance reports every 5 s, one that left drops out within
//! three periods, and a breaker open long is called stuck with the cause the
//! fleet's reports give.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall_circuit_breaker::{Forced, State};
use seawall_fleet::{Fleet, FleetConfig, LocalStore, StuckCause, StuckOpen};
use support::{breaker_config, instance, load, run_for, Dependency, Instance};

fn fleet(store: &LocalStore, seed: u64) -> Fleet<LocalStore> {
    Fleet::builder(store.clone())
        .config(FleetConfig::default())
        .seed(seed)
        .build()
        .unwrap()
}

fn coordinated(node: &Instance) -> &seawall_fleet::Coordinated {
    node.coordinated.as_ref().unwrap()
}

/// The instance's stuck-open flag, as of its last report.
fn stuck(node: &Instance) -> Option<StuckOpen> {
    coordinated(node).snapshot().stuck_open
}

fn three(store: &LocalStore, deps: [&Arc<Dependency>; 3]) -> Vec<Instance> {
    (0..3)
        .map(|i| instance(i, deps[i], Some(&fleet(store, i as u64)), breaker_config()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn every_instance_reports_and_one_that_left_drops_out() {
    let store = LocalStore::new();
    let dep = Dependency::new(Duration::from_millis(5));
    let mut nodes = three(&store, [&dep, &dep, &dep]);
    load(&nodes, Duration::from_millis(100), Duration::from_secs(6)).await;
    let view = nodes[0]
        .coordinated
        .as_ref()
        .unwrap()
        .fleet_view()
        .await
        .unwrap();
    assert_eq!((view.closed, view.open, view.instances.len()), (3, 0, 3));
    assert!(view.ages_ms.iter().all(|age| *age <= 5_000), "{view:?}");
    assert!(view.instances.iter().all(|r| r.calls > 0));
    // Reports cost one operation per instance per 5 s: flat in the fleet size.
    let ops = store.ops();
    run_for(Duration::from_secs(10)).await;
    assert!(store.ops() - ops <= 3 * 2 + 3, "{} ops", store.ops() - ops);

    // One leaves: within three periods (and a report by another) it is gone.
    let gone = nodes.pop().unwrap();
    drop(gone);
    run_for(Duration::from_secs(21)).await;
    let view = nodes[0]
        .coordinated
        .as_ref()
        .unwrap()
        .fleet_view()
        .await
        .unwrap();
    assert_eq!(view.instances.len(), 2, "{view:?}");
}

#[tokio::test(start_paused = true)]
async fn a_breaker_open_here_alone_is_local_and_open_everywhere_is_external() {
    let store = LocalStore::new();
    let (bad, good) = (
        Dependency::new(Duration::from_millis(5)),
        Dependency::new(Duration::from_millis(5)),
    );
    bad.fail(true);
    let nodes = three(&store, [&bad, &good, &good]);
    // Open 10 s at a time: suspect after three intervals and a minute.
    load(&nodes, Duration::from_millis(100), Duration::from_secs(50)).await;
    assert_eq!(nodes[0].state(), State::Open);
    assert!(stuck(&nodes[0]).is_none(), "not yet");
    load(&nodes, Duration::from_millis(100), Duration::from_secs(25)).await;
    let flag = stuck(&nodes[0]).expect("flagged");
    assert_eq!(flag.cause, StuckCause::LocalOnly);
    assert_eq!((flag.others_closed, flag.others_open), (2, 0));
    assert!(flag.open_for_ms >= 60_000);
    assert!(stuck(&nodes[1]).is_none());
    // The flag travels with the report: every instance's view shows it.
    let view = coordinated(&nodes[2]).fleet_view().await.unwrap();
    let flagged: Vec<_> = view
        .instances
        .iter()
        .filter_map(|r| r.stuck_open.as_ref())
        .collect();
    assert_eq!(flagged, [&flag], "{view:?}");
    assert_eq!(view.instances[0].state, "open");
    assert_eq!(view.instances[0].stuck_open.as_ref(), Some(&flag));

    // The dependency fails for everyone: the same breaker is an external failure.
    good.fail(true);
    load(&nodes, Duration::from_millis(100), Duration::from_secs(10)).await;
    let flag = stuck(&nodes[0]).expect("flagged");
    assert_eq!(flag.cause, StuckCause::ExternalFailure, "{flag:?}");
}

#[tokio::test(start_paused = true)]
async fn an_idle_breaker_past_its_interval_is_probe_due_and_a_long_force_is_called_out() {
    let store = LocalStore::new();
    let bad = Dependency::new(Duration::from_millis(5));
    bad.fail(true);
    let good = Dependency::new(Duration::from_millis(5));
    let nodes = three(&store, [&bad, &good, &good]);
    load(&nodes, Duration::from_millis(100), Duration::from_secs(2)).await;
    assert_eq!(nodes[0].state(), State::Open);
    // No call for 90 s: its interval passed long ago, nothing has probed.
    run_for(Duration::from_secs(90)).await;
    assert!(stuck(&nodes[0]).is_none());

    nodes[1].handle.force(Forced::Open);
    run_for(Duration::from_secs(14 * 60)).await;
    assert!(stuck(&nodes[1]).is_none());
    run_for(Duration::from_secs(70)).await;
    let flag = stuck(&nodes[1]).expect("flagged");
    assert_eq!(flag.cause, StuckCause::Forced);
}

#[tokio::test(start_paused = true)]
async fn a_direct_check_of_the_dependency_tells_local_from_external() {
    const NO_ANSWER: u8 = 0;
    const PASSES: u8 = 1;
    const FAILS: u8 = 2;
    let store = LocalStore::new();
    let (bad, good) = (
        Dependency::new(Duration::from_millis(5)),
        Dependency::new(Duration::from_millis(5)),
    );
    // Instance 0's path to the dependency fails; the dependency itself answers.
    bad.fail(true);
    let nodes = three(&store, [&bad, &good, &good]);
    let check = Arc::new(AtomicU8::new(PASSES));
    let answer = Arc::clone(&check);
    coordinated(&nodes[0]).link_dependency_check(move || match answer.load(Ordering::SeqCst) {
        PASSES => Some(true),
        FAILS => Some(false),
        _ => None,
    });
    load(&nodes, Duration::from_millis(100), Duration::from_secs(75)).await;
    let flag = stuck(&nodes[0]).expect("flagged");
    assert_eq!(
        (flag.cause, flag.dependency_check, flag.others_closed),
        (StuckCause::LocalOnly, Some(true), 2)
    );

    // The direct check fails too: whatever the others say, the dependency is down.
    check.store(FAILS, Ordering::SeqCst);
    load(&nodes, Duration::from_millis(100), Duration::from_secs(10)).await;
    let flag = stuck(&nodes[0]).expect("flagged");
    assert_eq!(
        (flag.cause, flag.dependency_check, flag.others_closed),
        (StuckCause::ExternalFailure, Some(false), 2)
    );

    // No answer from the check: the fleet decides, as without one.
    check.store(NO_ANSWER, Ordering::SeqCst);
    load(&nodes, Duration::from_millis(100), Duration::from_secs(10)).await;
    let flag = stuck(&nodes[0]).expect("flagged");
    assert_eq!(
        (flag.cause, flag.dependency_check),
        (StuckCause::LocalOnly, None)
    );
}

#[tokio::test(start_paused = true)]
async fn alone_in_its_fleet_a_passing_check_is_enough_to_call_it_local() {
    let store = LocalStore::new();
    let bad = Dependency::new(Duration::from_millis(5));
    bad.fail(true);
    let node = instance(0, &bad, Some(&fleet(&store, 9)), breaker_config());
    coordinated(&node).link_dependency_check(|| Some(true));
    let nodes = [node];
    load(&nodes, Duration::from_millis(100), Duration::from_secs(75)).await;
    let flag = stuck(&nodes[0]).expect("flagged");
    assert_eq!(
        (flag.cause, flag.others_closed, flag.others_open),
        (StuckCause::LocalOnly, 0, 0)
    );
}

#[cfg(feature = "metrics")]
#[test]
fn the_stuck_open_flag_is_a_gauge_per_cause() {
    let series = seawall_test_support::Series::default();
    let runtime = seawall_test_support::paused_runtime();
    let store = LocalStore::new();
    let (bad, good) = (
        Dependency::new(Duration::from_millis(5)),
        Dependency::new(Duration::from_millis(5)),
    );
    bad.fail(true);
    // The gauges are registered when the coordination starts: instance 0's with
    // this recorder (each process has its own), the others' with none.
    let start = |i: usize, dep: &Arc<Dependency>| {
        runtime
            .block_on(async { instance(i, dep, Some(&fleet(&store, i as u64)), breaker_config()) })
    };
    let first = metrics::with_local_recorder(&series, || start(0, &bad));
    let nodes = [first, start(1, &good), start(2, &good)];
    let gauge = |cause: &str| {
        series.gauge(&format!(
            "seawall_fleet_stuck_open{{cause={cause},name=freight}}"
        ))
    };
    runtime.block_on(load(
        &nodes,
        Duration::from_millis(100),
        Duration::from_secs(50),
    ));
    assert_eq!(gauge("local_only"), 0.0, "not yet");
    runtime.block_on(load(
        &nodes,
        Duration::from_millis(100),
        Duration::from_secs(25),
    ));
    assert_eq!(
        stuck(&nodes[0]).map(|f| f.cause),
        Some(StuckCause::LocalOnly)
    );
    assert_eq!(
        (
            gauge("local_only"),
            gauge("external_failure"),
            gauge("forced")
        ),
        (1.0, 0.0, 0.0)
    );
    good.fail(true);
    runtime.block_on(load(
        &nodes,
        Duration::from_millis(100),
        Duration::from_secs(10),
    ));
    assert_eq!((gauge("local_only"), gauge("external_failure")), (0.0, 1.0));
}
