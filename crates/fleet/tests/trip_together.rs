//! The fleet trip (`trip_together`) over `LocalStore`, instances in one process,
//! with tokio's paused clock. Each instance has a dependency of its own, so one
//! instance can be sick (its own path failing) while the others are healthy.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use seawall_circuit_breaker::{Cause, Forced, State};
use seawall_fleet::{Faults, Fleet, Keys, LocalStore};
use support::{breaker_config, instance, load, run_for, Dependency, Instance};
use tokio::time::Instant;

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);
const WINDOW: Duration = Duration::from_secs(30);

struct Fleetlet {
    store: LocalStore,
    deps: Vec<Arc<Dependency>>,
    instances: Vec<Instance>,
}

/// `n` instances, each with its own dependency, coordinated with a fleet trip of
/// `k` within `within` (none when `k` is `None`).
fn fleetlet(n: usize, k: Option<u32>, within: Duration, seed: u64) -> Fleetlet {
    let store = LocalStore::with_seed(seed);
    store.set_faults(Faults::latency(2 * MS)).unwrap();
    let mut builder = Fleet::builder(store.clone()).seed(seed);
    if let Some(k) = k {
        builder = builder.trip_together(k, within);
    }
    let fleet = builder.build().unwrap();
    let deps: Vec<_> = (0..n).map(|_| Dependency::new(20 * MS)).collect();
    let instances = deps
        .iter()
        .enumerate()
        .map(|(i, dep)| instance(i, dep, Some(&fleet), breaker_config()))
        .collect();
    Fleetlet {
        store,
        deps,
        instances,
    }
}

impl Fleetlet {
    /// Trips instance `i` on its own evidence: its dependency fails three calls.
    async fn trip(&self, i: usize) {
        self.deps[i].fail(true);
        for _ in 0..3 {
            self.instances[i].call().await;
        }
        assert_eq!(self.instances[i].state(), State::Open, "instance {i}");
    }

    fn states(&self) -> Vec<State> {
        self.instances.iter().map(Instance::state).collect()
    }

    fn snapshot(&self, i: usize) -> seawall_fleet::FleetSnapshot {
        self.instances[i].coordinated.as_ref().unwrap().snapshot()
    }

    fn fleet_trip(&self) -> Option<seawall_fleet::FleetEpoch> {
        self.store
            .peek_fleet_trip(&Keys::new("seawall", "freight").unwrap())
    }

    fn probes(&self) -> usize {
        self.deps.iter().map(|d| d.probes().len()).sum()
    }
}

#[tokio::test(start_paused = true)]
async fn k_minus_one_trips_open_nobody_else() {
    let f = fleetlet(5, Some(3), WINDOW, 1);
    run_for(S).await;
    f.trip(0).await;
    f.trip(1).await;
    load(&f.instances[2..], 100 * MS, 20 * S).await;
    assert_eq!(
        f.states()[2..],
        [State::Closed, State::Closed, State::Closed]
    );
    assert_eq!(f.fleet_trip(), None);
    for i in 0..5 {
        let snap = f.snapshot(i);
        assert_eq!(snap.trips_recorded, u64::from(i < 2), "instance {i}");
        assert_eq!(snap.fleet_trips_applied, 0, "instance {i}");
    }
    // The healthy instances' calls all went through.
    for i in 2..5 {
        let t = *f.instances[i].tally.lock().unwrap();
        assert_eq!((t.open, t.dependency_errors, t.other), (0, 0, 0));
        assert!(t.ok > 0);
    }
}

#[tokio::test(start_paused = true)]
async fn k_trips_within_the_window_open_the_rest_and_one_probe_recovers_all() {
    let f = fleetlet(5, Some(3), WINDOW, 2);
    run_for(S).await;
    let mut transitions: Vec<_> = f.instances.iter().map(|i| i.handle.subscribe()).collect();
    f.trip(0).await;
    f.trip(1).await;
    run_for(S).await;
    assert_eq!(f.states()[2..], [State::Closed; 3]);
    f.trip(2).await;
    // The store's push reaches the others within its latency.
    run_for(100 * MS).await;
    assert!(f.fleet_trip().is_some());
    assert_eq!(f.states(), [State::Open; 5]);
    for (i, transitions) in transitions.iter_mut().enumerate().skip(3) {
        let t = transitions.try_recv().unwrap();
        assert_eq!(
            (t.from, t.to, t.cause),
            (State::Closed, State::Open, Cause::PeersTripped)
        );
        let snap = f.snapshot(i);
        assert_eq!((snap.fleet_trips_applied, snap.trips_recorded), (1, 0));
        // Opened without a failure of its own.
        assert_eq!(f.instances[i].handle.snapshot().counters.failures, 0);
        assert_eq!(f.deps[i].calls(), 0);
    }
    // The dependency recovers everywhere: one probe, under the lease, closes the fleet.
    for d in &f.deps {
        d.fail(false);
    }
    load(&f.instances, 100 * MS, 20 * S).await;
    assert_eq!(f.states(), [State::Closed; 5]);
    assert_eq!(f.probes(), 1);
    // The success forgot the fleet trip; nobody opens again on it.
    assert_eq!(f.fleet_trip(), None);
    load(&f.instances, 100 * MS, 2 * WINDOW).await;
    assert_eq!(f.states(), [State::Closed; 5]);
    for i in 0..5 {
        assert_eq!(f.snapshot(i).fleet_trips_applied, u64::from(i >= 3));
    }
}

#[tokio::test(start_paused = true)]
async fn trips_further_apart_than_the_window_do_not_count_together() {
    let within = 10 * S;
    let f = fleetlet(3, Some(2), within, 3);
    run_for(S).await;
    f.trip(0).await;
    // Instance 0 stays sick; instance 1 trips one window and a bit later.
    load(&f.instances[2..], 100 * MS, within + S).await;
    f.trip(1).await;
    load(&f.instances[2..], 100 * MS, 20 * S).await;
    assert_eq!(f.instances[2].state(), State::Closed);
    assert_eq!(f.fleet_trip(), None);
    assert_eq!(f.snapshot(2).fleet_trips_applied, 0);
    // Both trips were recorded; they just did not overlap in the window.
    assert_eq!(
        f.snapshot(0).trips_recorded + f.snapshot(1).trips_recorded,
        2
    );
}

#[tokio::test(start_paused = true)]
async fn without_trip_together_no_trip_is_recorded_and_nobody_follows() {
    let f = fleetlet(4, None, WINDOW, 4);
    run_for(S).await;
    let ops = f.store.ops();
    for i in 0..3 {
        f.trip(i).await;
    }
    load(&f.instances[3..], 100 * MS, 5 * S).await;
    assert_eq!(f.instances[3].state(), State::Closed);
    assert!((0..4).all(|i| f.snapshot(i).trips_recorded == 0));
    // The closed instance made no store operation in all that time.
    let closed_ops = f.snapshot(3).store_ops;
    load(&f.instances[3..], 100 * MS, 5 * S).await;
    assert_eq!(f.snapshot(3).store_ops, closed_ops);
    assert!(f.store.ops() > ops);
}

#[tokio::test(start_paused = true)]
async fn operators_win_and_a_forced_open_is_no_trip_to_count() {
    let f = fleetlet(5, Some(2), WINDOW, 5);
    run_for(S).await;
    // An operator opens instance 4 and pins instance 3 closed.
    f.instances[4].handle.force(Forced::Open);
    f.instances[3].handle.force(Forced::Closed);
    // One real trip and one forced open: not two trips.
    f.trip(0).await;
    load(&f.instances[1..3], 100 * MS, 5 * S).await;
    assert_eq!(f.fleet_trip(), None);
    assert_eq!(f.states()[1..3], [State::Closed, State::Closed]);
    // A second real trip: the fleet trips. The forced ones stay as the operator left them.
    f.trip(1).await;
    run_for(100 * MS).await;
    assert!(f.fleet_trip().is_some());
    assert_eq!(
        f.states(),
        [
            State::Open,
            State::Open,
            State::Open,
            State::ForcedClosed,
            State::ForcedOpen
        ]
    );
    assert_eq!(f.snapshot(3).fleet_trips_applied, 0);
    // Recovery: the lease holder's verdict closes the tripped ones; the operator's
    // stay. Reset afterwards, instance 3 is not opened by the old fleet trip.
    for d in &f.deps {
        d.fail(false);
    }
    load(&f.instances, 100 * MS, 20 * S).await;
    assert_eq!(f.states()[..3], [State::Closed; 3]);
    assert_eq!(f.states()[3..], [State::ForcedClosed, State::ForcedOpen]);
    f.instances[3].handle.reset();
    load(&f.instances[..4], 100 * MS, WINDOW).await;
    assert_eq!(f.states()[..4], [State::Closed; 4]);
}

#[tokio::test(start_paused = true)]
async fn a_verdict_from_before_the_fleet_trip_does_not_close_those_it_opened() {
    let f = fleetlet(4, Some(2), WINDOW, 6);
    for d in &f.deps {
        d.fail(true);
    }
    run_for(S).await;
    f.trip(0).await;
    let keys = Keys::new("seawall", "freight").unwrap();
    // Instance 0's interval ends and it takes the lease; its probe (1.5 s, long
    // enough for a fleet trip to land while it runs) is still to come.
    for d in &f.deps {
        d.fail(false);
    }
    f.deps[0].fail(true);
    f.deps[0].set_latency(1500 * MS);
    let started = Instant::now();
    while f.store.peek_lease(&keys).is_none() {
        load(&f.instances[..1], 100 * MS, 100 * MS).await;
        assert!(Instant::now() - started < 20 * S, "no lease taken");
    }
    let lease_epoch = f.store.peek_lease(&keys).unwrap().0;
    // Instance 1 trips now: the fleet trip is newer than the lease.
    f.trip(1).await;
    run_for(100 * MS).await;
    let fleet_trip = f.fleet_trip().unwrap();
    assert!(fleet_trip > lease_epoch);
    assert_eq!(f.instances[2].state(), State::Open);
    assert_eq!(f.snapshot(2).fleet_trips_applied, 1);
    // Instance 0's probe fails, as its path still does; its verdict is older than
    // the fleet trip, so it restarts nobody the fleet trip opened.
    let in_state_for = f.instances[2].handle.snapshot().in_state_for;
    load(&f.instances[..1], 100 * MS, 3 * S).await;
    assert_eq!(f.deps[0].probes().len(), 1);
    let snap = f.instances[2].handle.snapshot();
    assert_eq!(snap.state, State::Open);
    assert!(snap.in_state_for >= in_state_for + 3 * S, "{snap:?}");
    assert_eq!(f.snapshot(2).verdicts_applied, 0);
}

#[tokio::test(start_paused = true)]
async fn with_every_push_lost_a_closed_instance_still_follows_within_half_a_window() {
    let f = fleetlet(3, Some(2), WINDOW, 7);
    f.store
        .set_faults(Faults::latency(2 * MS).with_push_loss(1.0))
        .unwrap();
    run_for(S).await;
    f.trip(0).await;
    f.trip(1).await;
    run_for(100 * MS).await;
    assert!(f.fleet_trip().is_some());
    let tripped_at = Instant::now();
    while f.instances[2].state() == State::Closed {
        load(&f.instances[2..], 100 * MS, 100 * MS).await;
        assert!(
            Instant::now() - tripped_at <= WINDOW / 2 + S,
            "not opened within half a window"
        );
    }
    assert_eq!(f.instances[2].state(), State::Open);
    assert_eq!(f.snapshot(2).fleet_trips_applied, 1);
}

#[tokio::test(start_paused = true)]
async fn a_rehearsal_trip_is_no_evidence_for_tripping_the_fleet() {
    let f = fleetlet(3, Some(2), WINDOW, 4);
    run_for(S).await;
    // Instance 0 rehearses: its dependency's failures are injected.
    f.deps[0].inject(true);
    f.trip(0).await;
    assert!(f.instances[0].handle.snapshot().rehearsal_trip);
    // Instance 1 trips for real: with the rehearsal's, two within the window.
    f.trip(1).await;
    assert!(!f.instances[1].handle.snapshot().rehearsal_trip);
    load(&f.instances[2..], 100 * MS, 20 * S).await;
    assert_eq!(f.instances[2].state(), State::Closed);
    assert_eq!(f.fleet_trip(), None);
    assert_eq!(
        (f.snapshot(0).trips_recorded, f.snapshot(1).trips_recorded),
        (0, 1)
    );
    assert_eq!(f.snapshot(2).fleet_trips_applied, 0);
}

#[tokio::test(start_paused = true)]
async fn a_probe_a_rehearsal_answered_gives_the_fleet_no_verdict() {
    let f = fleetlet(1, None, WINDOW, 5);
    run_for(S).await;
    f.trip(0).await;
    // Still failing, now by injection: the probes fail, nothing is published.
    f.deps[0].inject(true);
    load(&f.instances, 100 * MS, 40 * S).await;
    let snap = f.snapshot(0);
    assert!(snap.leases_taken >= 2, "{snap:?}");
    assert_eq!(snap.verdicts_published, 0, "{snap:?}");
    assert_ne!(f.instances[0].state(), State::Closed);
    // Really failing: the next probe's failure is the fleet's news.
    f.deps[0].inject(false);
    load(&f.instances, 100 * MS, 40 * S).await;
    assert!(f.snapshot(0).verdicts_published >= 1);
}
