//! Fleet-wide degradation floors over `LocalStore` in paused time: applied by
//! every following instance at its next health check (also one that starts
//! later), ended by each instance's own timer at the expiry (back to the floor
//! it had), a local change winning; reverted early; forged ones and a level an
//! instance lacks refused and audited.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use seawall_fleet::{
    ActionKind, Fleet, FleetAction, FleetSecret, FloorFollower, FloorTarget, Keys, LocalStore,
    Store, WallClock,
};
use support::{events, run_for};

const POLICY: &str = "assistant";

/// A degradation policy's floor with `levels` levels, as a test sees it.
struct Floor {
    levels: usize,
    floor: Mutex<Option<usize>>,
}

impl FloorTarget for Floor {
    fn name(&self) -> &str {
        POLICY
    }
    fn floor(&self) -> Option<usize> {
        *self.floor.lock().unwrap()
    }
    fn set_floor(&self, level: usize) -> bool {
        if level >= self.levels {
            return false;
        }
        *self.floor.lock().unwrap() = Some(level);
        true
    }
    fn clear_floor(&self) {
        *self.floor.lock().unwrap() = None;
    }
}

struct Node {
    fleet: Fleet<LocalStore>,
    floor: Arc<Floor>,
    follower: FloorFollower,
}

fn node(store: &LocalStore, levels: usize, floor: Option<usize>) -> Node {
    // One wall clock for the test's instances, moving with the paused time.
    thread_local! {
        static CLOCK: WallClock = WallClock::new();
    }
    let fleet = Fleet::builder(store.clone())
        .prefix("shop")
        .secret(Some(FleetSecret::new(vec![7; 32]).unwrap()))
        .wall_clock(CLOCK.with(|c| *c))
        .build()
        .unwrap();
    let target = Arc::new(Floor {
        levels,
        floor: Mutex::new(floor),
    });
    let follower = fleet.follow_floor(target.clone()).unwrap();
    Node {
        fleet,
        floor: target,
        follower,
    }
}

fn floors(nodes: &[&Node]) -> Vec<Option<usize>> {
    nodes.iter().map(|n| n.floor.floor()).collect()
}

async fn floor(node: &Node, level: u32, ttl: Duration) -> FleetAction {
    node.follower
        .act(ActionKind::Floor(level), "model overloaded", "ops", ttl)
        .await
        .unwrap()
}

async fn revert(node: &Node, action: &FleetAction) -> FleetAction {
    node.follower
        .act(
            ActionKind::Revert(action.id.clone()),
            "model back",
            "ops",
            Duration::from_secs(60),
        )
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_fleet_floor_holds_every_instance_a_joiner_too_and_each_ends_it_at_its_expiry() {
    let store = LocalStore::new();
    // One instance had a local floor of its own before the fleet's.
    let (a, b) = (node(&store, 3, None), node(&store, 3, Some(1)));
    run_for(Duration::from_secs(2)).await;

    let action = floor(&a, 2, Duration::from_secs(60)).await;
    assert_eq!(action.kind, ActionKind::Floor(2));
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(floors(&[&a, &b]), vec![Some(2), Some(2)]);
    let held = b.follower.snapshot().fleet_action.unwrap();
    assert_eq!(held.action.id, action.id);
    assert!(held.remaining <= Duration::from_secs(59), "{held:?}");

    // Started after the action was issued: it applies it, and ends it with the others.
    run_for(Duration::from_secs(20)).await;
    let c = node(&store, 3, None);
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(floors(&[&a, &b, &c]), vec![Some(2); 3]);

    // Just before the expiry, still held; just after, each back to what it had.
    run_for(Duration::from_secs(35)).await;
    assert_eq!(floors(&[&a, &b, &c]), vec![Some(2); 3]);
    run_for(Duration::from_secs(3)).await;
    assert_eq!(floors(&[&a, &b, &c]), vec![None, Some(1), None]);
    assert!(a.follower.snapshot().fleet_action.is_none());

    let log = a.follower.audit_log(100).await.unwrap();
    assert_eq!(
        events(&log, &action),
        ["applied", "applied", "applied", "expired", "expired", "expired", "issued"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_local_change_wins_and_a_revert_ends_the_floor_early() {
    let store = LocalStore::new();
    let (a, b) = (node(&store, 3, None), node(&store, 3, None));
    run_for(Duration::from_secs(2)).await;
    let action = floor(&a, 1, Duration::from_secs(600)).await;
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(floors(&[&a, &b]), vec![Some(1), Some(1)]);

    // An operator of `b` lowers its floor by hand: at the end, `b` keeps it.
    assert!(b.floor.set_floor(2));
    let revert = revert(&a, &action).await;
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(floors(&[&a, &b]), vec![None, Some(2)]);
    let log = a.follower.audit_log(100).await.unwrap();
    let reverted = format!("reverted by {}", revert.id);
    assert_eq!(
        events(&log, &action),
        [
            "applied",
            "applied",
            "issued",
            reverted.as_str(),
            reverted.as_str()
        ]
    );
    // Dropping a follower with nothing in force changes nothing.
    drop(b.follower);
    assert_eq!(b.floor.floor(), Some(2));
}

#[tokio::test(start_paused = true)]
async fn forged_floors_and_a_level_an_instance_lacks_are_refused_and_audited() {
    let store = LocalStore::new();
    // `small` has two levels only.
    let (big, small) = (node(&store, 3, None), node(&store, 2, None));
    run_for(Duration::from_secs(2)).await;

    // Written straight into the store by someone without the fleet's secret.
    let forged = FleetAction::issue(
        &FleetSecret::new(vec![8; 32]).unwrap(),
        "shop",
        POLICY,
        ActionKind::Floor(2),
        "looks official",
        "ops",
        Duration::from_secs(600),
        big.fleet.wall_ms(),
    )
    .unwrap();
    let keys = Keys::new("shop", POLICY).unwrap();
    store
        .post_action(&keys, &forged.id, forged.encode(), Duration::from_secs(600))
        .await
        .unwrap();
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(floors(&[&big, &small]), vec![None, None]);

    let deep = floor(&big, 2, Duration::from_secs(600)).await;
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(floors(&[&big, &small]), vec![Some(2), None]);
    assert_eq!(big.follower.snapshot().actions_refused, 1);
    assert_eq!(small.follower.snapshot().actions_refused, 2);

    let log = big.follower.audit_log(100).await.unwrap();
    assert_eq!(
        events(&log, &forged),
        ["refused: bad signature", "refused: bad signature"]
    );
    assert_eq!(
        events(&log, &deep),
        ["applied", "issued", "refused: no level 2"]
    );
    // Decided once: more health checks refuse nothing more.
    run_for(Duration::from_secs(5)).await;
    assert_eq!(small.follower.snapshot().actions_refused, 2);
    // Dropping a follower ends the fleet's floor there as its expiry would.
    drop(big.follower);
    assert_eq!(big.floor.floor(), None);
}

#[test]
fn a_floor_s_level_is_part_of_what_is_signed_and_of_the_record() {
    let secret = FleetSecret::new(vec![7; 32]).unwrap();
    let now = 1_800_000_000_000;
    let action = FleetAction::issue(
        &secret,
        "shop",
        POLICY,
        ActionKind::Floor(2),
        "why",
        "ops",
        Duration::from_secs(60),
        now,
    )
    .unwrap();
    let read = FleetAction::decode(&action.encode()).unwrap();
    assert_eq!(read.kind, ActionKind::Floor(2));
    assert_eq!(read.check(Some(&secret), "shop", &action.id, now), Ok(()));
    // The same record with another level does not check.
    let other = FleetAction::decode(&action.encode().replace("floor:2", "floor:1")).unwrap();
    assert!(other.check(Some(&secret), "shop", &action.id, now).is_err());
    assert_eq!(ActionKind::parse("floor:x"), None);
    assert_eq!(ActionKind::parse("floor:"), None);
    assert_eq!(ActionKind::parse("floor:-1"), None);
    assert_eq!(ActionKind::parse("floor:+1"), None);
    assert_eq!(ActionKind::parse("floor:3"), Some(ActionKind::Floor(3)));
}

#[tokio::test(start_paused = true)]
async fn a_breaker_coordinated_under_the_same_name_leaves_floor_actions_to_the_follower() {
    use seawall_circuit_breaker::{CircuitBreakerLayer, State};
    let store = LocalStore::new();
    let n = node(&store, 3, None);
    let handle = CircuitBreakerLayer::builder(POLICY)
        .build()
        .unwrap()
        .handle();
    let coordinated = n.fleet.coordinate(&handle).unwrap();
    run_for(Duration::from_secs(2)).await;
    let action = floor(&n, 1, Duration::from_secs(60)).await;
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(n.floor.floor(), Some(1));
    assert_eq!(handle.state(), State::Closed);
    let s = coordinated.snapshot();
    assert_eq!(s.actions_refused, 0, "{s:?}");
    assert!(s.fleet_action.is_none(), "{s:?}");
    let log = n.follower.audit_log(100).await.unwrap();
    assert_eq!(events(&log, &action), ["applied", "issued"]);

    // Its revert is the follower's too: decided and audited once, by it.
    let revert = revert(&n, &action).await;
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(n.floor.floor(), None);
    let log = n.follower.audit_log(100).await.unwrap();
    assert_eq!(events(&log, &revert), ["applied", "issued"]);
    assert_eq!(coordinated.snapshot().actions_refused, 0);
}
