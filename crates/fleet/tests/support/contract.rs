//! The store contract, generic over `Store`, on any clock: run on `LocalStore`
//! in paused time and on a real Redis in real time. Every check holds however
//! slow the machine is: a lease expected to be held has a TTL far beyond any
//! test, and a lease expected to have expired was waited out from *after* its
//! take answered (so after the store applied it).

use std::time::Duration;

use seawall_fleet::{
    CapKeys, CapStore, Claim, ClaimReply, FleetEpoch, FleetEvent, FleetVerdict, InstanceId, Keys,
    LeaseReply, LeaseRequest, ProbeResult, Store, Token, TripRecord,
};
use tokio::time::{sleep, timeout};

/// Never runs out during a test.
const LONG: Duration = Duration::from_secs(600);
/// Runs out while the test waits `SHORT + GRACE`.
const SHORT: Duration = Duration::from_millis(200);
const GRACE: Duration = Duration::from_millis(50);
/// A watchdog on waits that must end: generous, never an assertion on speed.
const WATCHDOG: Duration = Duration::from_secs(30);

const A: Token = Token(0xaaaa);
const B: Token = Token(0xbbbb);
const C: Token = Token(0xcccc);
const D: Token = Token(0xdddd);

fn keys(prefix: &str) -> Keys {
    Keys::new(prefix, "freight").unwrap()
}

fn take(token: Token, ttl: Duration, seen: u64) -> LeaseRequest {
    LeaseRequest::new(token, ttl, FleetEpoch(seen))
}

fn taken(epoch: u64) -> LeaseReply {
    LeaseReply::Taken {
        epoch: FleetEpoch(epoch),
    }
}

/// `token`'s take of the lease of `k` for `ttl`, having seen epoch `seen`.
async fn take_as<S: Store>(
    store: &S,
    k: &Keys,
    token: Token,
    ttl: Duration,
    seen: u64,
) -> LeaseReply {
    store.take_lease(k, take(token, ttl, seen)).await.unwrap()
}

/// `token` publishing `result` as the holder of the lease of `k`.
async fn publish_as<S: Store>(
    store: &S,
    k: &Keys,
    token: Token,
    result: ProbeResult,
) -> Option<FleetVerdict> {
    store.publish_verdict(k, token, result).await.unwrap()
}

/// Runs every check, each under its own prefix of `prefix`.
pub async fn all<S: Store>(store: &S, prefix: &str) {
    lease_is_exclusive_and_idempotent(store, &format!("{prefix}-lease")).await;
    stale_tokens_are_refused(store, &format!("{prefix}-stale")).await;
    epochs_stay_above_what_the_taker_saw(store, &format!("{prefix}-epochs")).await;
    verdicts_are_pushed_and_the_latest_is_read(store, &format!("{prefix}-push")).await;
    a_fleet_trip_needs_enough_distinct_instances(store, &format!("{prefix}-trip")).await;
    trips_outside_the_window_do_not_count(store, &format!("{prefix}-window")).await;
}

/// One live lease at a time; the same token's take is answered as taken,
/// unchanged; the TTL runs on the store's clock.
pub async fn lease_is_exclusive_and_idempotent<S: Store>(store: &S, prefix: &str) {
    let k = keys(prefix);
    assert_eq!(take_as(store, &k, A, LONG, 0).await, taken(1));
    let waited = Duration::from_millis(100);
    sleep(waited).await;
    match take_as(store, &k, B, LONG, 0).await {
        LeaseReply::Held { epoch, remaining } => {
            assert_eq!(epoch, FleetEpoch(1));
            // At least `waited` of the store's time passed between the two takes.
            assert!(remaining <= LONG - waited, "remaining {remaining:?}");
        }
        other => panic!("a second token took a live lease: {other:?}"),
    }
    // A replayed take of the holder changes nothing.
    assert_eq!(take_as(store, &k, A, LONG, 0).await, taken(1));
    assert!(store.release_lease(&k, A).await.unwrap());
    // Released: the next take gets the next epoch; expired: the one after.
    assert_eq!(take_as(store, &k, B, SHORT, 0).await, taken(2));
    sleep(SHORT + GRACE).await;
    assert_eq!(take_as(store, &k, A, LONG, 0).await, taken(3));
}

/// Release and publish compare the token: a stale holder changes nothing.
pub async fn stale_tokens_are_refused<S: Store>(store: &S, prefix: &str) {
    let k = keys(prefix);
    take_as(store, &k, A, SHORT, 0).await;
    sleep(SHORT + GRACE).await;
    let LeaseReply::Taken { epoch } = take_as(store, &k, B, LONG, 0).await else {
        panic!("the expired lease was still held");
    };
    // A (whose lease expired) can neither publish nor release B's lease.
    assert_eq!(publish_as(store, &k, A, ProbeResult::Succeeded).await, None);
    assert!(!store.release_lease(&k, A).await.unwrap());
    assert_eq!(store.read_verdict(&k).await.unwrap(), None);
    // B can, once; the lease is gone after.
    let expected = FleetVerdict {
        epoch,
        result: ProbeResult::Failed,
    };
    assert_eq!(
        publish_as(store, &k, B, ProbeResult::Failed).await,
        Some(expected)
    );
    // A replayed publish stores the same verdict again: idempotent.
    assert_eq!(
        publish_as(store, &k, B, ProbeResult::Failed).await,
        Some(expected)
    );
    assert_eq!(store.read_verdict(&k).await.unwrap(), Some(expected));
    assert!(store.release_lease(&k, B).await.unwrap());
    assert!(!store.release_lease(&k, B).await.unwrap());
    // After the release, a late publish of B is refused too.
    assert_eq!(publish_as(store, &k, B, ProbeResult::Succeeded).await, None);
    assert_eq!(store.read_verdict(&k).await.unwrap(), Some(expected));
}

/// Epochs start above what the taker has seen, so a store that lost its counter
/// still orders new verdicts after old ones; and they only increase.
pub async fn epochs_stay_above_what_the_taker_saw<S: Store>(store: &S, prefix: &str) {
    let k = keys(prefix);
    assert_eq!(take_as(store, &k, A, LONG, 41).await, taken(42));
    assert!(store.release_lease(&k, A).await.unwrap());
    // A taker that saw less still gets the next one.
    assert_eq!(take_as(store, &k, B, LONG, 3).await, taken(43));
    assert!(store.release_lease(&k, B).await.unwrap());
    // Far beyond what a Lua number (a double) holds exactly.
    let big = (1u64 << 60) + 1;
    assert_eq!(take_as(store, &k, A, LONG, big).await, taken(big + 1));
}

/// Publishing pushes the verdict to every subscriber of that breaker, and a read
/// answers the latest.
pub async fn verdicts_are_pushed_and_the_latest_is_read<S: Store>(store: &S, prefix: &str) {
    let k = keys(prefix);
    let mut one = store.subscribe(&k).await.unwrap();
    let mut two = store.subscribe(&k).await.unwrap();
    let other = Keys::new(prefix, "payments").unwrap();
    let mut elsewhere = store.subscribe(&other).await.unwrap();
    let mut verdicts = Vec::new();
    for (token, result) in [(A, ProbeResult::Succeeded), (B, ProbeResult::Failed)] {
        let LeaseReply::Taken { epoch } = take_as(store, &k, token, LONG, 0).await else {
            panic!("not taken");
        };
        let expected = FleetVerdict { epoch, result };
        assert_eq!(publish_as(store, &k, token, result).await, Some(expected));
        for feed in [&mut one, &mut two] {
            let heard = timeout(WATCHDOG, feed.next()).await.expect("watchdog");
            assert_eq!(heard, Some(FleetEvent::Verdict(expected)));
        }
        assert_eq!(store.read_verdict(&k).await.unwrap(), Some(expected));
        assert!(store.release_lease(&k, token).await.unwrap());
        verdicts.push(expected);
    }
    assert!(verdicts[0].epoch < verdicts[1].epoch);
    assert_eq!(store.read_verdict(&other).await.unwrap(), None);
    // Another breaker's channel heard nothing.
    assert!(timeout(Duration::from_millis(200), elsewhere.next())
        .await
        .is_err());
}

fn trip(instance: Token, within: Duration, instances: u32, seen: u64) -> TripRecord {
    TripRecord::new(instance, within, instances, FleetEpoch(seen))
}

/// `k` distinct instances within the window start one fleet trip, pushed and
/// readable; an instance recorded twice counts once; a success forgets it all.
pub async fn a_fleet_trip_needs_enough_distinct_instances<S: Store>(store: &S, prefix: &str) {
    let k = keys(prefix);
    let mut feed = store.subscribe(&k).await.unwrap();
    let record = |who, seen| store.record_trip(&k, trip(who, LONG, 3, seen));
    let r = record(A, 0).await.unwrap();
    assert_eq!((r.tripped, r.fleet_trip), (1, None));
    // Recorded again (a replay, or a second trip of the same instance): still one.
    let r = record(A, 0).await.unwrap();
    assert_eq!((r.tripped, r.fleet_trip), (1, None));
    let r = record(B, 0).await.unwrap();
    assert_eq!((r.tripped, r.fleet_trip), (2, None));
    assert_eq!(store.read_fleet_trip(&k).await.unwrap(), None);
    // The third: the fleet trips, above what the recorder saw.
    let r = record(C, 41).await.unwrap();
    assert_eq!((r.tripped, r.fleet_trip), (3, Some(FleetEpoch(42))));
    let heard = timeout(WATCHDOG, feed.next()).await.expect("watchdog");
    assert_eq!(heard, Some(FleetEvent::Tripped(FleetEpoch(42))));
    assert_eq!(
        store.read_fleet_trip(&k).await.unwrap(),
        Some(FleetEpoch(42))
    );
    // A fourth joins the fleet trip in force; no second one starts.
    let r = record(D, 0).await.unwrap();
    assert_eq!((r.tripped, r.fleet_trip), (4, Some(FleetEpoch(42))));
    assert!(timeout(Duration::from_millis(200), feed.next())
        .await
        .is_err());
    // The lease counter moved past the fleet trip: a probe after it is newer.
    assert_eq!(take_as(store, &k, A, LONG, 0).await, taken(43));
    // A failure forgets nothing; a success forgets the trips and the fleet trip.
    publish_as(store, &k, A, ProbeResult::Failed).await;
    assert_eq!(
        store.read_fleet_trip(&k).await.unwrap(),
        Some(FleetEpoch(42))
    );
    publish_as(store, &k, A, ProbeResult::Succeeded).await;
    assert_eq!(store.read_fleet_trip(&k).await.unwrap(), None);
    let r = record(B, 0).await.unwrap();
    assert_eq!((r.tripped, r.fleet_trip), (1, None));
}

/// A trip counts for its window by the store's clock, then no longer.
pub async fn trips_outside_the_window_do_not_count<S: Store>(store: &S, prefix: &str) {
    let k = keys(prefix);
    let r = store.record_trip(&k, trip(A, SHORT, 2, 0)).await.unwrap();
    assert_eq!((r.tripped, r.fleet_trip), (1, None));
    sleep(SHORT + GRACE).await;
    let r = store.record_trip(&k, trip(B, SHORT, 2, 0)).await.unwrap();
    assert_eq!((r.tripped, r.fleet_trip), (1, None));
    // Within the window of B's: C makes two.
    let r = store.record_trip(&k, trip(C, LONG, 2, 0)).await.unwrap();
    assert_eq!(r.tripped, 2);
    assert!(r.fleet_trip.is_some());
}

// ----- the cap's claims ----------------------------------------------------------

fn claim(id: u128, seq: u64, demand: u32, held: u32, ttl: Duration, cap: u32) -> Claim {
    Claim::new(InstanceId(id), seq, demand, held, ttl, cap)
}

fn shape(r: &ClaimReply) -> (u32, u32, u32, u64, u32, bool) {
    (
        r.allotment,
        r.cap,
        r.reserved,
        r.demand,
        r.claimants,
        r.stale,
    )
}

/// The claim steps of `CapStore`'s contract, with instances 1, 2 and 3 (so the
/// order of equal demands is known): settling, max-min division, what is
/// reserved, stale copies, expiry, and the cap kept by the store.
pub async fn cap_claims<S: CapStore>(store: &S, prefix: &str) {
    let k = CapKeys::new(prefix, "freight").unwrap();
    // A new record settles one TTL after its first claim: until then, nothing
    // beyond what a claimant holds.
    let r = store.claim(&k, claim(1, 1, 4, 0, SHORT, 10)).await.unwrap();
    assert_eq!(shape(&r), (0, 10, 0, 4, 1, false));
    sleep(SHORT + GRACE).await;
    // Settled (and the first claim expired): fair share = demand.
    let r = store.claim(&k, claim(1, 2, 4, 0, LONG, 10)).await.unwrap();
    assert_eq!(shape(&r), (4, 10, 4, 4, 1, false));
    // Another cap configured: the store's stays. Demands 4 and 10 over 10: 4 and 6.
    let r = store.claim(&k, claim(2, 1, 10, 0, LONG, 12)).await.unwrap();
    assert_eq!(shape(&r), (6, 10, 10, 14, 2, false));
    // A late copy of an applied claim changes nothing.
    let r = store.claim(&k, claim(1, 2, 0, 0, LONG, 10)).await.unwrap();
    assert_eq!(shape(&r), (0, 10, 10, 14, 2, true));
    // A third: fair 3 (of 3, 3, 4), but nothing is free.
    let r = store
        .claim(&k, claim(3, 1, 10, 0, SHORT, 10))
        .await
        .unwrap();
    assert_eq!(shape(&r), (0, 10, 10, 24, 3, false));
    // Instance 1 renews holding its 4: granted its fair 3, 4 stay reserved.
    let r = store.claim(&k, claim(1, 3, 4, 4, LONG, 10)).await.unwrap();
    assert_eq!(shape(&r), (3, 10, 10, 24, 3, false));
    // Instance 3's claim expires by the store's clock: its demand is gone.
    sleep(SHORT + GRACE).await;
    let r = store.claim(&k, claim(2, 2, 10, 6, LONG, 10)).await.unwrap();
    assert_eq!(shape(&r), (6, 10, 10, 14, 2, false));
    // An operator raises the cap: 4 and 10 over 20, and 16 free for instance 2.
    store.set_cap(&k, 20).await.unwrap();
    let r = store.claim(&k, claim(2, 3, 10, 6, LONG, 10)).await.unwrap();
    assert_eq!(shape(&r), (10, 20, 14, 14, 2, false));
}

/// Step 6 of `CapStore`'s contract: a claim that lowers the reservations while
/// another claim wants more is pushed to that claimant's own channel, and only
/// then; then a freed slot reaches the four furthest short of their demand
/// (ties: the higher instance), not every claimant.
pub async fn freed_slots_are_pushed<S: CapStore>(store: &S, prefix: &str) {
    let k = CapKeys::new(prefix, "parcels").unwrap();
    let other = CapKeys::new(prefix, "payments").unwrap();
    let mut watching = store.watch_freed(&k, InstanceId(2)).await.unwrap();
    let mut elsewhere = store.watch_freed(&other, InstanceId(2)).await.unwrap();
    let _ = store.claim(&k, claim(3, 1, 0, 0, SHORT, 10)).await.unwrap();
    sleep(SHORT + GRACE).await;
    // Instance 3 takes all 10 and gives them back with nobody wanting them: no push.
    let r = store.claim(&k, claim(3, 2, 10, 0, LONG, 10)).await.unwrap();
    assert_eq!(r.allotment, 10);
    let r = store.claim(&k, claim(3, 3, 0, 0, LONG, 10)).await.unwrap();
    assert_eq!(r.reserved, 0);
    // Instance 1 takes them; 2 wants them too and gets nothing.
    let r = store.claim(&k, claim(1, 1, 10, 0, LONG, 10)).await.unwrap();
    assert_eq!(r.allotment, 10);
    let r = store.claim(&k, claim(2, 1, 10, 0, LONG, 10)).await.unwrap();
    assert_eq!(r.allotment, 0);
    // Instance 1's demand is gone: freed while 2 wants them, pushed to 2.
    let r = store.claim(&k, claim(1, 2, 0, 0, LONG, 10)).await.unwrap();
    assert_eq!(r.reserved, 0);
    let heard = timeout(WATCHDOG, watching.next()).await.expect("watchdog");
    assert_eq!(heard, Some(FleetEvent::SlotsFreed(InstanceId(1))));
    let r = store.claim(&k, claim(2, 2, 10, 0, LONG, 10)).await.unwrap();
    assert_eq!(r.allotment, 10);

    // Eight claimants short by 1 to 8 (instance 10 + s short by s) behind
    // instance 2's 10: one freed slot is told to 18, 17, 16 and 15 only.
    let mut told = Vec::new();
    for s in 1..=8u32 {
        let id = 10 + u128::from(s);
        told.push((id, store.watch_freed(&k, InstanceId(id)).await.unwrap()));
        let r = store.claim(&k, claim(id, 1, s, 0, LONG, 10)).await.unwrap();
        assert_eq!(r.allotment, 0, "instance {id}");
    }
    let r = store.claim(&k, claim(2, 3, 9, 9, LONG, 10)).await.unwrap();
    assert_eq!(r.reserved, 9);
    for (id, watch) in told.iter_mut().rev().take(4) {
        let heard = timeout(WATCHDOG, watch.next()).await.expect("watchdog");
        assert_eq!(heard, Some(FleetEvent::SlotsFreed(InstanceId(2))), "{id}");
    }
    // A second freed slot is told to the same four (still the furthest short)
    // and to nobody else: the others' channels are empty. (Exact in paused
    // time; on a real server a push still in flight could only hide an error,
    // never invent one.)
    let r = store.claim(&k, claim(2, 4, 8, 8, LONG, 10)).await.unwrap();
    assert_eq!(r.reserved, 8);
    for (id, watch) in told.iter_mut().rev().take(4) {
        let heard = timeout(WATCHDOG, watch.next()).await.expect("watchdog");
        assert_eq!(heard, Some(FleetEvent::SlotsFreed(InstanceId(2))), "{id}");
    }
    for (id, watch) in told.iter_mut().take(4) {
        assert!(
            timeout(Duration::from_millis(1), watch.next())
                .await
                .is_err(),
            "instance {id} was told"
        );
    }
    // Another cap's watchers heard nothing.
    assert!(timeout(Duration::from_millis(200), elsewhere.next())
        .await
        .is_err());
}

/// A claim carrying a deadline (by the store's clock) that has passed when the
/// store runs it is answered `abandoned` and changes nothing: its sender gave
/// up on it, so applying it could only reserve slots nobody admits under. A
/// deadline still ahead is applied as usual.
pub async fn an_abandoned_claim_changes_nothing<S: CapStore>(store: &S, prefix: &str) {
    let k = CapKeys::new(prefix, "abandoned").unwrap();
    let first = store.claim(&k, claim(1, 1, 2, 0, LONG, 10)).await.unwrap();
    assert!(!first.abandoned && !first.stale);
    let now = first.store_ms;
    // Given up on before this store's clock read `now`: a no-op.
    let late = claim(1, 2, 8, 0, LONG, 10).with_deadline_ms(Some(now.saturating_sub(1)));
    let r = store.claim(&k, late).await.unwrap();
    assert!(r.abandoned && r.stale, "{r:?}");
    assert_eq!(
        (r.allotment, r.reserved, r.demand, r.claimants),
        (0, 0, 2, 1)
    );
    // The same seq with a deadline an hour ahead is applied: the no-op kept
    // nothing (not even the seq).
    let timely = claim(1, 2, 8, 0, LONG, 10).with_deadline_ms(Some(now + 3_600_000));
    let r = store.claim(&k, timely).await.unwrap();
    assert!(!r.abandoned && !r.stale, "{r:?}");
    assert_eq!((r.demand, r.claimants), (8, 1));
}
