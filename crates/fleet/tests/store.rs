//! The store contract (`support::contract`, generic over `Store` and run on Redis
//! too) checked on `LocalStore` in paused time, and `LocalStore`'s own faults.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use seawall_fleet::{
    Faults, FleetEpoch, Keys, LeaseReply, LeaseRequest, LocalStore, ProbeResult, Store, StoreError,
    Token,
};
use tokio::time::{advance, timeout};

const S: Duration = Duration::from_secs(1);
const A: Token = Token(0xaaaa);
const B: Token = Token(0xbbbb);

fn keys() -> Keys {
    Keys::new("test", "freight").unwrap()
}

fn take(token: Token, ttl: Duration, seen: u64) -> LeaseRequest {
    LeaseRequest::new(token, ttl, FleetEpoch(seen))
}

/// A store, seeded with `seed`, that answers every operation after 5 ms.
fn with_latency(seed: u64) -> LocalStore {
    let store = LocalStore::with_seed(seed);
    store
        .set_faults(Faults::latency(Duration::from_millis(5)))
        .unwrap();
    store
}

#[tokio::test(start_paused = true)]
async fn local_store_keeps_the_contract() {
    support::contract::all(&LocalStore::new(), "test").await;
}

#[tokio::test(start_paused = true)]
async fn local_store_keeps_the_cap_contract() {
    support::contract::cap_claims(&LocalStore::new(), "test").await;
    support::contract::an_abandoned_claim_changes_nothing(&LocalStore::new(), "test").await;
    let store = with_latency(3);
    support::contract::cap_claims(&store, "latency").await;
    support::contract::an_abandoned_claim_changes_nothing(&store, "latency").await;
    support::contract::freed_slots_are_pushed(&store, "latency").await;
    support::contract::freed_slots_are_pushed(&LocalStore::new(), "test").await;
}

#[tokio::test(start_paused = true)]
async fn local_store_keeps_the_contract_with_latency() {
    support::contract::all(&with_latency(1), "test").await;
}

#[tokio::test(start_paused = true)]
async fn a_wipe_forgets_leases_and_verdicts_but_a_taker_that_saw_them_stays_ahead() {
    let store = LocalStore::new();
    let k = keys();
    for token in [A, B] {
        store.take_lease(&k, take(token, S, 0)).await.unwrap();
        store
            .publish_verdict(&k, token, ProbeResult::Failed)
            .await
            .unwrap();
        store.release_lease(&k, token).await.unwrap();
    }
    assert_eq!(store.peek_verdict(&k).unwrap().epoch, FleetEpoch(2));
    store.take_lease(&k, take(A, 10 * S, 2)).await.unwrap();
    store.wipe();
    assert_eq!(store.peek_lease(&k), None);
    assert_eq!(store.read_verdict(&k).await.unwrap(), None);
    // A second lease while the first holder may still probe: the overlap the docs bound.
    assert_eq!(
        store.take_lease(&k, take(B, S, 3)).await.unwrap(),
        LeaseReply::Taken {
            epoch: FleetEpoch(4)
        }
    );
}

#[tokio::test(start_paused = true)]
async fn an_outage_refuses_operations_and_ends_subscriptions() {
    let store = LocalStore::new();
    let k = keys();
    let mut feed = store.subscribe(&k).await.unwrap();
    store.take_lease(&k, take(A, 10 * S, 0)).await.unwrap();
    store.go_down();
    assert!(store.is_down());
    assert!(matches!(
        store.read_verdict(&k).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(store.subscribe(&k).await.is_err());
    assert_eq!(feed.next().await, None);
    store.come_up();
    // The data survived the outage.
    assert_eq!(store.peek_lease(&k).map(|(e, _)| e), Some(FleetEpoch(1)));
    assert!(store.release_lease(&k, A).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_lost_answer_never_comes_but_its_write_was_applied() {
    let store = LocalStore::with_seed(3);
    store
        .set_faults(Faults::latency(Duration::from_millis(10)).with_loss(1.0))
        .unwrap();
    let k = keys();
    let mut applied = 0;
    for i in 0..20u128 {
        let r = timeout(S, store.take_lease(&k, take(Token(i), 10 * S, 0))).await;
        assert!(r.is_err(), "a lost operation answered: {r:?}");
        if store.peek_lease(&k).is_some() {
            applied += 1;
            store.wipe();
        }
    }
    // Lost on the way there (never applied) or on the way back (applied): both
    // happen, as with a real network.
    assert!(applied > 0 && applied < 20, "applied {applied} of 20");
    assert_eq!(store.ops(), 20);
}

#[tokio::test(start_paused = true)]
async fn a_write_given_up_on_is_applied_later() {
    let store = LocalStore::new();
    store.set_faults(Faults::latency(S)).unwrap();
    let k = keys();
    // The caller stops waiting before the request arrives.
    let r = timeout(
        Duration::from_millis(100),
        store.take_lease(&k, take(A, 10 * S, 0)),
    )
    .await;
    assert!(r.is_err());
    assert_eq!(store.peek_lease(&k), None);
    advance(S).await;
    tokio::task::yield_now().await;
    assert_eq!(store.peek_lease(&k).map(|(e, _)| e), Some(FleetEpoch(1)));
}

#[tokio::test(start_paused = true)]
async fn lost_pushes_are_lost_per_subscriber() {
    let store = LocalStore::with_seed(5);
    store.set_faults(Faults::NONE.with_push_loss(0.5)).unwrap();
    let k = keys();
    let mut feeds = Vec::new();
    for _ in 0..40 {
        feeds.push(store.subscribe(&k).await.unwrap());
    }
    store.take_lease(&k, take(A, S, 0)).await.unwrap();
    store
        .publish_verdict(&k, A, ProbeResult::Succeeded)
        .await
        .unwrap();
    let mut heard = 0;
    for feed in &mut feeds {
        if timeout(Duration::from_millis(1), feed.next()).await.is_ok() {
            heard += 1;
        }
    }
    assert!(heard > 5 && heard < 35, "heard {heard} of 40");
    // The stored verdict is there for the reconcile.
    assert!(store.peek_verdict(&k).is_some());
}

#[test]
fn faults_out_of_range_are_refused_naming_the_field() {
    let store = LocalStore::new();
    let cases = [
        (Faults::NONE.with_loss(-0.1), "loss"),
        (Faults::NONE.with_loss(f64::NAN), "loss"),
        (Faults::NONE.with_push_loss(2.0), "push_loss"),
        (Faults::latency(Duration::from_secs(7200)), "latency"),
        (
            Faults::NONE.with_latency_jitter(Duration::MAX),
            "latency_jitter",
        ),
    ];
    for (faults, field) in cases {
        assert_eq!(store.set_faults(faults).unwrap_err().field(), field);
    }
    assert_eq!(store.faults(), Faults::NONE);
}

#[test]
fn keys_are_versioned_and_distinct_for_distinct_names() {
    let k = Keys::new("shop", "freight").unwrap();
    assert_eq!(k.lease(), "shop:v1:breaker:{freight}:lease");
    assert_eq!(k.epoch(), "shop:v1:breaker:{freight}:epoch");
    assert_eq!(k.verdict(), "shop:v1:breaker:{freight}:verdict");
    assert_eq!(k.channel(), "shop:v1:breaker:{freight}:verdicts");
    // Braces, spaces and the escape character itself are escaped, so a name
    // cannot break the hash tag or collide with another.
    let odd = Keys::new("shop", "a}b {c}%").unwrap();
    assert_eq!(odd.lease(), "shop:v1:breaker:{a%7Db%20%7Bc%7D%25}:lease");
    assert_ne!(
        Keys::new("shop", "%7D").unwrap().lease(),
        Keys::new("shop", "}").unwrap().lease()
    );
    for bad in ["", "a b", "{a}", "é", &"x".repeat(65)] {
        assert_eq!(Keys::new(bad, "freight").unwrap_err().field(), "prefix");
    }
}

#[test]
fn an_operation_outside_a_runtime_with_latency_fails_instead_of_panicking() {
    let store = LocalStore::new();
    store
        .set_faults(Faults::latency(Duration::from_millis(1)))
        .unwrap();
    // Polled by a bare executor: no Tokio runtime to carry the request.
    let result = futures_lite_block_on(store.read_verdict(&keys()));
    assert!(matches!(result, Err(StoreError::Unavailable(_))));
}

/// Polls a future to completion on this thread, with no runtime around it.
fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
    }
}
