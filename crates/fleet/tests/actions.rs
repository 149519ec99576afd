//! Operators' fleet actions over `LocalStore` in paused time: signed, applied by
//! every coordinating instance at its next health check (also one that joins
//! later), ended by each instance's own timer at the expiry, audited; forged and
//! unverifiable ones refused; a local operator's later change wins.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use seawall_circuit_breaker::{CircuitBreakerLayer, Forced, Handle, State};
use seawall_fleet::{
    ActionError, ActionKind, Coordinated, Fleet, FleetAction, FleetSecret, Keys, LocalStore, Store,
    WallClock,
};
use support::{events, run_for};

const POLICY: &str = "freight";

fn secret() -> FleetSecret {
    FleetSecret::new(vec![7; 32]).unwrap()
}

struct Node {
    fleet: Fleet<LocalStore>,
    handle: Handle,
    coordinated: Coordinated,
}

fn node(store: &LocalStore, secret: Option<FleetSecret>, seed: u64) -> Node {
    // One wall clock for the test's instances, moving with the paused time
    // (real hosts' clocks agree through NTP).
    thread_local! {
        static CLOCK: WallClock = WallClock::new();
    }
    let fleet = Fleet::builder(store.clone())
        .prefix("shop")
        .seed(seed)
        .secret(secret)
        .wall_clock(CLOCK.with(|c| *c))
        .build()
        .unwrap();
    let handle = CircuitBreakerLayer::builder(POLICY)
        .build()
        .unwrap()
        .handle();
    let coordinated = fleet.coordinate(&handle).unwrap();
    Node {
        fleet,
        handle,
        coordinated,
    }
}

/// An instance with the fleet's secret.
fn signed(store: &LocalStore, seed: u64) -> Node {
    node(store, Some(secret()), seed)
}

/// Forces `POLICY` open on every instance for `ttl`, issued through `fleet`.
async fn force_open(fleet: &Fleet<LocalStore>, reason: &str, ttl: Duration) -> FleetAction {
    fleet
        .act(POLICY, ActionKind::ForceOpen, reason, "ops", ttl)
        .await
        .unwrap()
}

fn states(nodes: &[&Node]) -> Vec<State> {
    nodes.iter().map(|n| n.handle.state()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_fleet_action_reaches_every_instance_and_each_ends_it_at_its_expiry() {
    let store = LocalStore::new();
    let (a, b, c) = (signed(&store, 1), signed(&store, 2), signed(&store, 3));
    run_for(Duration::from_secs(2)).await;
    assert_eq!(states(&[&a, &b, &c]), vec![State::Closed; 3]);

    let ttl = Duration::from_secs(60);
    let action = force_open(&b.fleet, "supplier migrating", ttl).await;
    // Every instance's next health check (every second) applies it.
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(states(&[&a, &b, &c]), vec![State::ForcedOpen; 3]);
    let held = a.coordinated.snapshot().fleet_action.unwrap();
    assert_eq!(held.action.id, action.id);
    assert!(held.remaining <= ttl && held.remaining >= ttl - Duration::from_secs(2));

    // An instance started 20 s later applies it, and ends it with the others.
    run_for(Duration::from_secs(20)).await;
    let d = signed(&store, 4);
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(d.handle.state(), State::ForcedOpen);
    let left = d.coordinated.snapshot().fleet_action.unwrap().remaining;
    assert!(left <= Duration::from_secs(39), "{left:?}");

    // Just before the expiry all four hold it; just after, none does.
    run_for(ttl - Duration::from_millis(22_200) - Duration::from_millis(500)).await;
    assert_eq!(states(&[&a, &b, &c, &d]), vec![State::ForcedOpen; 4]);
    run_for(Duration::from_secs(1)).await;
    assert_eq!(states(&[&a, &b, &c, &d]), vec![State::Closed; 4]);
    assert!(a.coordinated.snapshot().fleet_action.is_none());

    // The audit log says who issued it, where it applied and where it ended.
    let log = a.fleet.audit_log(POLICY, 100).await.unwrap();
    let mut want = vec!["applied"; 4];
    want.extend(["expired"; 4]);
    want.push("issued");
    want.sort_unstable();
    assert_eq!(events(&log, &action), want);
    assert!(log
        .iter()
        .all(|e| e.reason == "supplier migrating" && e.signer == "ops"));
    let instances: std::collections::BTreeSet<&str> = log
        .iter()
        .filter(|e| e.event == "applied")
        .map(|e| e.instance.as_str())
        .collect();
    assert_eq!(instances.len(), 4, "one entry per instance");
}

#[tokio::test(start_paused = true)]
async fn forged_unsigned_and_unverifiable_actions_are_refused_and_audited() {
    let store = LocalStore::new();
    let (a, b) = (signed(&store, 1), signed(&store, 2));
    run_for(Duration::from_secs(2)).await;
    // Written straight into the store by someone without the fleet's secret.
    let forged = FleetAction::issue(
        &FleetSecret::new(vec![8; 32]).unwrap(),
        "shop",
        POLICY,
        ActionKind::ForceOpen,
        "looks official",
        "ops",
        Duration::from_secs(600),
        a.fleet.wall_ms(),
    )
    .unwrap();
    let keys = Keys::new("shop", POLICY).unwrap();
    store
        .post_action(&keys, &forged.id, forged.encode(), Duration::from_secs(600))
        .await
        .unwrap();
    // A signed action copied under another id: a replay.
    let real = a
        .fleet
        .act(
            POLICY,
            ActionKind::Reset,
            "clean slate",
            "ops",
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let copy_id = "f".repeat(32);
    store
        .post_action(&keys, &copy_id, real.encode(), Duration::from_secs(60))
        .await
        .unwrap();
    store
        .post_action(
            &keys,
            "junk",
            "not an action".into(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(states(&[&a, &b]), vec![State::Closed; 2]);
    for n in [&a, &b] {
        let s = n.coordinated.snapshot();
        assert_eq!(s.actions_refused, 3, "{s:?}");
        assert!(s.fleet_action.is_none());
    }
    // Decided once: more health checks refuse nothing more.
    run_for(Duration::from_secs(5)).await;
    assert_eq!(a.coordinated.snapshot().actions_refused, 3);
    let log = a.fleet.audit_log(POLICY, 100).await.unwrap();
    let refused = |why: &str| {
        log.iter()
            .filter(|e| e.event == format!("refused: {why}"))
            .count()
    };
    assert_eq!(refused("bad signature"), 2);
    assert_eq!(refused("replayed under another id"), 2);
    assert_eq!(refused("malformed"), 2);
    // The copy is refused under the real action's id; the real one applied.
    let replayed = "refused: replayed under another id";
    assert_eq!(
        events(&log, &real),
        vec!["applied", "applied", "issued", replayed, replayed]
    );

    // An instance without a secret neither reads nor applies actions, and
    // its fleet cannot issue one.
    let c = node(&store, None, 3);
    let ops = store.ops();
    run_for(Duration::from_secs(3)).await;
    assert_eq!(c.coordinated.snapshot().actions_refused, 0);
    match c
        .fleet
        .act(
            POLICY,
            ActionKind::ForceOpen,
            "x",
            "",
            Duration::from_secs(1),
        )
        .await
    {
        Err(ActionError::Off) => {}
        other => panic!("{other:?}"),
    }
    assert!(store.ops() > ops, "the others kept reading");
}

#[tokio::test(start_paused = true)]
async fn a_revert_ends_the_action_early_and_a_local_operator_s_change_wins() {
    let store = LocalStore::new();
    let (a, b, c) = (signed(&store, 1), signed(&store, 2), signed(&store, 3));
    // c was forced closed by its own operator before the fleet action.
    c.handle.force(Forced::Closed);
    run_for(Duration::from_secs(2)).await;
    let open = force_open(&a.fleet, "drain", Duration::from_secs(600)).await;
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(states(&[&a, &b, &c]), vec![State::ForcedOpen; 3]);
    // b's operator releases b meanwhile: that later, local change wins.
    b.handle.release();
    let revert = a
        .fleet
        .act(
            POLICY,
            ActionKind::Revert(open.id.clone()),
            "done early",
            "ops",
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    run_for(Duration::from_millis(1100)).await;
    // a: back to its own policy; b: left as its operator set it; c: back to
    // the local force it had before.
    assert_eq!(
        states(&[&a, &b, &c]),
        vec![State::Closed, State::Closed, State::ForcedClosed]
    );
    let log = a.fleet.audit_log(POLICY, 100).await.unwrap();
    let reverted = format!("reverted by {}", revert.id);
    let reverted = reverted.as_str();
    assert_eq!(
        events(&log, &open),
        vec!["applied", "applied", "applied", "issued", reverted, reverted, reverted]
    );
    // Long after, nothing comes back.
    run_for(Duration::from_secs(700)).await;
    assert_eq!(
        states(&[&a, &b, &c]),
        vec![State::Closed, State::Closed, State::ForcedClosed]
    );
}

#[tokio::test(start_paused = true)]
async fn bad_actions_are_refused_at_issue_naming_the_field() {
    let store = LocalStore::new();
    let a = signed(&store, 1);
    let field = |r: Result<FleetAction, ActionError>| match r {
        Err(ActionError::Config(e)) => e.field().to_owned(),
        other => panic!("{other:?}"),
    };
    let f = &a.fleet;
    assert_eq!(
        field(
            f.act(
                POLICY,
                ActionKind::ForceOpen,
                "",
                "ops",
                Duration::from_secs(1)
            )
            .await
        ),
        "reason"
    );
    assert_eq!(
        field(
            f.act(
                POLICY,
                ActionKind::ForceOpen,
                "why",
                "ops",
                Duration::from_secs(5 * 3600)
            )
            .await
        ),
        "ttl"
    );
    assert!(f.actions(POLICY).await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_coordination_dropped_while_an_action_holds_hands_the_breaker_back() {
    let store = LocalStore::new();
    let a = signed(&store, 1);
    run_for(Duration::from_secs(2)).await;
    force_open(&a.fleet, "drain", Duration::from_secs(600)).await;
    run_for(Duration::from_millis(1100)).await;
    assert_eq!(a.handle.state(), State::ForcedOpen);
    // Nothing would end the force once the coordination is gone: it ends now.
    let Node {
        handle,
        coordinated,
        fleet: _fleet,
    } = a;
    drop(coordinated);
    assert_eq!(handle.state(), State::Closed);
}
