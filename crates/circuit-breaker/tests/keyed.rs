//! One breaker per key, with a bounded number of keys.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::future::{ready, Future, Ready};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use seawall_circuit_breaker::{
    CircuitBreakerConfig, CircuitBreakerLayer, Forced, KeyedCircuitBreaker,
    KeyedCircuitBreakerLayer, KeyedHandle, State, TripPolicy,
};
use seawall_core::{find_rejection, BoxError, ErrorsAsFailures, LayerHandle, RejectionKind};
use tokio::time::advance;
use tower::{Layer, Service, ServiceExt};

type Req = http::Request<&'static str>;

fn to(host: &str) -> Req {
    http::Request::builder()
        .uri(format!("http://{host}/quote"))
        .body("quote")
        .unwrap()
}

fn host(req: &Req) -> String {
    req.uri().host().unwrap_or("").to_owned()
}

/// Hosts listed as down fail; every call is counted per host.
#[derive(Clone, Default)]
struct Suppliers {
    down: Arc<Mutex<Vec<String>>>,
    calls: Arc<Mutex<HashMap<String, usize>>>,
}

impl Suppliers {
    fn down(&self, h: &str) {
        self.down.lock().unwrap().push(h.to_owned());
    }
    fn calls(&self, h: &str) -> usize {
        self.calls.lock().unwrap().get(h).copied().unwrap_or(0)
    }
}

impl Service<Req> for Suppliers {
    type Response = &'static str;
    type Error = BoxError;
    type Future = Ready<Result<&'static str, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let h = host(&req);
        *self.calls.lock().unwrap().entry(h.clone()).or_default() += 1;
        if self.down.lock().unwrap().contains(&h) {
            ready(Err("connection refused".into()))
        } else {
            ready(Ok("quote"))
        }
    }
}

async fn send<S>(svc: &mut S, h: &str) -> Result<&'static str, BoxError>
where
    S: Service<Req, Response = &'static str, Error = BoxError>,
{
    svc.ready().await?.call(to(h)).await
}

fn is_open_rejection(err: &BoxError, name: &str) -> bool {
    find_rejection(&**err)
        .is_some_and(|r| r.kind() == RejectionKind::CircuitOpen && r.name() == Some(name))
}

type HostKey = fn(&Req) -> String;

/// One breaker per host, opening after `failures` in a row, for at most `max_keys` hosts.
fn per_host(
    failures: u32,
    max_keys: usize,
) -> KeyedCircuitBreakerLayer<String, HostKey, ErrorsAsFailures> {
    CircuitBreakerLayer::builder("suppliers")
        .jitter(0.0)
        .consecutive_failures(failures)
        .keyed(host as HostKey)
        .max_keys(max_keys)
        .build()
        .unwrap()
}

type PerHost = KeyedCircuitBreaker<Suppliers, String, HostKey, ErrorsAsFailures>;

/// [`per_host`] over suppliers of which the hosts in `down` fail, with its handle.
fn per_host_over(
    failures: u32,
    max_keys: usize,
    down: &[&str],
) -> (KeyedHandle<String>, Suppliers, PerHost) {
    let layer = per_host(failures, max_keys);
    let suppliers = Suppliers::default();
    for h in down {
        suppliers.down(h);
    }
    (layer.handle(), suppliers.clone(), layer.layer(suppliers))
}

/// The state of `h`'s breaker, which must exist.
fn state_of(handle: &KeyedHandle<String>, h: &str) -> State {
    handle.get(&h.to_owned()).unwrap().state()
}

#[tokio::test(start_paused = true)]
async fn one_sick_host_is_cut_off_while_the_others_keep_working() {
    let (handle, suppliers, mut svc) = per_host_over(3, 8, &["a.example"]);
    for _ in 0..3 {
        send(&mut svc, "a.example").await.unwrap_err();
        send(&mut svc, "b.example").await.unwrap();
    }
    for _ in 0..10 {
        let err = send(&mut svc, "a.example").await.unwrap_err();
        assert!(is_open_rejection(&err, "suppliers/a.example"), "{err}");
        assert_eq!(send(&mut svc, "b.example").await.unwrap(), "quote");
    }
    assert_eq!(
        suppliers.calls("a.example"),
        3,
        "the open host gets nothing more"
    );
    assert_eq!(suppliers.calls("b.example"), 13);
    assert_eq!(state_of(&handle, "a.example"), State::Open);
    assert_eq!(state_of(&handle, "b.example"), State::Closed);
    assert_eq!(handle.open_keys(), vec!["a.example".to_owned()]);
    // The open host recovers on its own schedule.
    advance(Duration::from_secs(10)).await;
    suppliers.down.lock().unwrap().clear();
    send(&mut svc, "a.example").await.unwrap();
    assert_eq!(state_of(&handle, "a.example"), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_full_map_evicts_a_closed_key_not_used_lately() {
    let (handle, _, mut svc) = per_host_over(1, 3, &["sick.example"]);
    send(&mut svc, "sick.example").await.unwrap_err(); // opens, oldest
    send(&mut svc, "b.example").await.unwrap();
    send(&mut svc, "c.example").await.unwrap();
    send(&mut svc, "b.example").await.unwrap(); // b was used again, c was not
    send(&mut svc, "d.example").await.unwrap();
    let mut keys = handle.keys();
    keys.sort();
    assert_eq!(keys, vec!["b.example", "d.example", "sick.example"]);
    assert_eq!(handle.len(), 3);
    // The open key was older but is never evicted: it still rejects.
    let err = send(&mut svc, "sick.example").await.unwrap_err();
    assert!(is_open_rejection(&err, "suppliers/sick.example"));
}

#[tokio::test(start_paused = true)]
async fn when_every_key_is_open_new_keys_share_the_overflow_breaker() {
    let (handle, suppliers, mut svc) =
        per_host_over(1, 2, &["a.example", "b.example", "c.example"]);
    send(&mut svc, "a.example").await.unwrap_err();
    send(&mut svc, "b.example").await.unwrap_err();
    assert!(handle.overflow().is_none());
    // c cannot evict an open breaker: it goes through the overflow breaker.
    send(&mut svc, "c.example").await.unwrap_err();
    let overflow = handle.overflow().unwrap();
    assert_eq!(overflow.name(), "suppliers/overflow");
    assert_eq!(overflow.state(), State::Open);
    let err = send(&mut svc, "d.example").await.unwrap_err();
    assert!(is_open_rejection(&err, "suppliers/overflow"));
    assert_eq!(suppliers.calls("d.example"), 0);
    let mut keys = handle.keys();
    keys.sort();
    assert_eq!(keys, vec!["a.example", "b.example"]);
}

#[tokio::test(start_paused = true)]
async fn reconfiguring_applies_to_every_key_and_to_new_ones() {
    let (handle, _, mut svc) = per_host_over(5, 8, &["a.example", "b.example"]);
    send(&mut svc, "a.example").await.unwrap_err();
    let stricter = CircuitBreakerConfig {
        policy: TripPolicy::ConsecutiveFailures { threshold: 2 },
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    handle.reconfigure(stricter.clone()).unwrap();
    assert_eq!(handle.config(), stricter);
    send(&mut svc, "a.example").await.unwrap_err();
    assert_eq!(state_of(&handle, "a.example"), State::Open);
    send(&mut svc, "b.example").await.unwrap_err();
    send(&mut svc, "b.example").await.unwrap_err();
    assert_eq!(state_of(&handle, "b.example"), State::Open);
    let bad = CircuitBreakerConfig {
        half_open_max: 0,
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    assert_eq!(
        handle.reconfigure(bad).unwrap_err().field(),
        "half_open_max"
    );
    handle.revert().unwrap();
    assert_eq!(
        handle.config().policy,
        TripPolicy::ConsecutiveFailures { threshold: 5 }
    );
    assert_eq!(handle.snapshots().len(), 2);
}

#[test]
fn zero_keys_is_a_config_error() {
    let err = CircuitBreakerLayer::builder("suppliers")
        .jitter(0.0)
        .keyed(host)
        .max_keys(0)
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "max_keys");
}

/// An inner service that, from `poll_ready` and `call`, reads the keyed layer's
/// handle and calls the keyed layer again with a new key (an insert that evicts):
/// both deadlock if the map's lock were held while the inner service runs.
struct Nested {
    layer: seawall_circuit_breaker::KeyedCircuitBreakerLayer<
        String,
        fn(&Req) -> String,
        seawall_core::ErrorsAsFailures,
    >,
    nested: usize,
}

impl Service<Req> for Nested {
    type Response = &'static str;
    type Error = BoxError;
    type Future = Ready<Result<&'static str, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        drop(self.layer.handle().snapshots());
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        drop(self.layer.handle().keys());
        self.nested += 1;
        let mut again = self.layer.layer(Suppliers::default());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(again.poll_ready(&mut cx).is_ready());
        let nested = format!("nested-{}-{}", self.nested, host(&req));
        let mut answer = std::pin::pin!(again.call(to(&nested)));
        assert!(matches!(
            answer.as_mut().poll(&mut cx),
            Poll::Ready(Ok("quote"))
        ));
        ready(Ok("quote"))
    }
}

#[test]
fn the_inner_service_may_use_the_keyed_layer_while_it_is_polled_and_called() {
    let deadlocked = "the keyed layer deadlocked with its inner service";
    let evicted = seawall_test_support::watchdog(deadlocked, || {
        let layer = CircuitBreakerLayer::builder("suppliers")
            .jitter(0.0)
            .keyed(host as fn(&Req) -> String)
            .max_keys(2)
            .build()
            .unwrap();
        let handle = layer.handle();
        let mut svc = layer.layer(Nested {
            layer: layer.clone(),
            nested: 0,
        });
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for h in ["a.example", "b.example", "c.example"] {
            assert!(svc.poll_ready(&mut cx).is_ready());
            let mut answer = std::pin::pin!(svc.call(to(h)));
            assert!(matches!(
                answer.as_mut().poll(&mut cx),
                Poll::Ready(Ok("quote"))
            ));
        }
        handle.evicted()
    });
    // Six keys went through a map of two.
    assert_eq!(evicted, 4);
}

/// The settings a plain layer is built with, given to a keyed one by `.keyed(..)`.
fn three_strikes() -> seawall_circuit_breaker::CircuitBreakerBuilder {
    CircuitBreakerLayer::builder("suppliers")
        .jitter(0.0)
        .consecutive_failures(3)
        .open_for(Duration::from_secs(30))
}

#[tokio::test(start_paused = true)]
async fn one_builder_makes_a_shared_breaker_or_one_per_key_with_the_same_settings() {
    let shared = three_strikes().build().unwrap();
    let keyed = three_strikes().keyed(host).max_keys(2).build().unwrap();
    assert_eq!(shared.handle().config(), keyed.handle().config());
    assert_eq!(keyed.handle().max_keys(), 2);
    let default = three_strikes().keyed(host).build().unwrap();
    assert_eq!(
        default.handle().max_keys(),
        seawall_circuit_breaker::DEFAULT_MAX_KEYS
    );

    let suppliers = Suppliers::default();
    suppliers.down("a.example");
    let mut one = shared.layer(suppliers.clone());
    let mut per_host = keyed.layer(suppliers.clone());
    for _ in 0..3 {
        send(&mut one, "a.example").await.unwrap_err();
        send(&mut per_host, "a.example").await.unwrap_err();
    }
    // Three failures trip both; the shared breaker turns every host away, the
    // keyed one only the sick host.
    let err = send(&mut one, "b.example").await.unwrap_err();
    assert!(is_open_rejection(&err, "suppliers"), "{err}");
    let err = send(&mut per_host, "a.example").await.unwrap_err();
    assert!(is_open_rejection(&err, "suppliers/a.example"), "{err}");
    assert_eq!(send(&mut per_host, "b.example").await.unwrap(), "quote");
}

#[tokio::test(start_paused = true)]
async fn forcing_open_holds_every_key_and_the_keys_seen_while_forced() {
    let (handle, suppliers, mut svc) = per_host_over(3, 8, &[]);
    send(&mut svc, "a.example").await.unwrap();
    send(&mut svc, "b.example").await.unwrap();
    handle.force(Forced::Open);
    assert_eq!(handle.forced(), Some(Forced::Open));
    for h in ["a.example", "b.example", "c.example"] {
        let err = send(&mut svc, h).await.unwrap_err();
        assert!(is_open_rejection(&err, &format!("suppliers/{h}")), "{err}");
        assert_eq!(state_of(&handle, h), State::ForcedOpen);
    }
    assert_eq!(suppliers.calls("a.example"), 1);
    assert_eq!(suppliers.calls("c.example"), 0, "a new key is forced too");
    // A forced breaker is not plainly closed: none is counted as open by a trip.
    assert!(handle.open_keys().is_empty());

    handle.release();
    assert_eq!(handle.forced(), None);
    for h in ["a.example", "b.example", "c.example", "d.example"] {
        assert_eq!(send(&mut svc, h).await.unwrap(), "quote");
        assert_eq!(state_of(&handle, h), State::Closed);
    }
    assert_eq!(suppliers.calls("c.example"), 1);
}

#[tokio::test(start_paused = true)]
async fn forcing_closed_lets_a_failing_key_through_and_release_leaves_a_tripped_key_alone() {
    let (handle, suppliers, mut svc) = per_host_over(2, 8, &["a.example", "b.example"]);
    send(&mut svc, "b.example").await.unwrap_err();
    send(&mut svc, "b.example").await.unwrap_err();
    assert_eq!(state_of(&handle, "b.example"), State::Open);
    // Forced closed: every call reaches the failing host and none trips it.
    handle.force(Forced::Closed);
    for _ in 0..5 {
        send(&mut svc, "a.example").await.unwrap_err();
        send(&mut svc, "b.example").await.unwrap_err();
    }
    assert_eq!(suppliers.calls("a.example"), 5);
    assert_eq!(suppliers.calls("b.example"), 7);
    assert_eq!(state_of(&handle, "a.example"), State::ForcedClosed);
    assert_eq!(state_of(&handle, "b.example"), State::ForcedClosed);
    // A key an operator took out of the force by itself is left as it is.
    handle.get(&"b.example".to_owned()).unwrap().reset();
    send(&mut svc, "b.example").await.unwrap_err();
    send(&mut svc, "b.example").await.unwrap_err();
    assert_eq!(state_of(&handle, "b.example"), State::Open);
    handle.release();
    assert_eq!(state_of(&handle, "a.example"), State::Closed);
    assert_eq!(state_of(&handle, "b.example"), State::Open);
}

#[tokio::test(start_paused = true)]
async fn force_reaches_the_overflow_breaker_and_the_snapshot_shows_it() {
    let (handle, suppliers, mut svc) =
        per_host_over(1, 2, &["a.example", "b.example", "c.example"]);
    for h in ["a.example", "b.example", "c.example"] {
        send(&mut svc, h).await.unwrap_err();
    }
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.name, "suppliers");
    assert_eq!((snapshot.max_keys, snapshot.evicted), (2, 0));
    assert_eq!(snapshot.forced, None);
    let mut keys: Vec<(String, State)> = snapshot
        .keys
        .iter()
        .map(|(k, s)| (k.clone(), s.state))
        .collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        keys,
        vec![
            ("a.example".to_owned(), State::Open),
            ("b.example".to_owned(), State::Open)
        ]
    );
    assert_eq!(snapshot.overflow.map(|s| s.state), Some(State::Open));

    handle.force(Forced::Closed);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.forced, Some(Forced::Closed));
    assert!(snapshot
        .keys
        .iter()
        .all(|(_, s)| s.state == State::ForcedClosed));
    assert_eq!(
        snapshot.overflow.map(|s| s.state),
        Some(State::ForcedClosed)
    );
    // Still two keys, none evictable: d goes through the forced overflow breaker.
    send(&mut svc, "d.example").await.unwrap();
    assert_eq!(suppliers.calls("d.example"), 1);
    assert_eq!(handle.len(), 2);
}

#[cfg(feature = "serde")]
#[tokio::test(start_paused = true)]
async fn the_keyed_snapshot_serializes_for_an_operator_endpoint() {
    let (handle, _suppliers, mut svc) = per_host_over(1, 8, &["a.example"]);
    send(&mut svc, "a.example").await.unwrap_err();
    handle.force(Forced::Open);
    let json = serde_json::to_value(handle.snapshot()).unwrap();
    assert_eq!(json["name"], "suppliers");
    assert_eq!(json["max_keys"], 8);
    assert_eq!(json["forced"], "open");
    assert_eq!(json["keys"][0][0], "a.example");
    assert_eq!(json["keys"][0][1]["state"], "forced_open");
    assert_eq!(json["keys"][0][1]["counters"]["failures"], 1);
    assert!(json["overflow"].is_null());
    handle.release();
    assert!(serde_json::to_value(handle.snapshot()).unwrap()["forced"].is_null());
}

/// What code that treats every layer alike does with a handle: force, look,
/// reconfigure, revert, release, all through the trait.
fn operate<H: LayerHandle>(
    handle: &H,
    forced: H::Forced,
    config: H::Config,
) -> (H::Snapshot, H::Config) {
    handle.force(forced).unwrap();
    let while_forced = handle.snapshot();
    handle.reconfigure(config).unwrap();
    let reconfigured = handle.config();
    handle.revert();
    handle.release();
    (while_forced, reconfigured)
}

#[tokio::test(start_paused = true)]
async fn a_keyed_handle_is_a_layer_handle() {
    let (handle, _, mut svc) = per_host_over(5, 8, &[]);
    send(&mut svc, "a.example").await.unwrap();
    assert_eq!(LayerHandle::name(&handle), "suppliers");
    let stricter = CircuitBreakerConfig {
        policy: TripPolicy::ConsecutiveFailures { threshold: 2 },
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    let (while_forced, reconfigured) = operate(&handle, Forced::Open, stricter.clone());
    assert_eq!(while_forced.forced, Some(Forced::Open));
    assert_eq!(while_forced.keys[0].1.state, State::ForcedOpen);
    assert_eq!(reconfigured, stricter);
    assert_eq!(
        LayerHandle::config(&handle).policy,
        TripPolicy::ConsecutiveFailures { threshold: 5 }
    );
    assert_eq!(state_of(&handle, "a.example"), State::Closed);
    assert_eq!(handle.forced(), None);
}

/// Keys arriving on two threads while a third forces and releases the layer, and
/// more once the last `force` has returned: however the creation of a key's
/// breaker interleaves with `force` and `release`, every key ends as the last
/// `force` says (a breaker built while the setting changed, or after it, catches
/// up with it).
#[test]
fn keys_created_while_force_and_release_race_end_as_the_last_one_says() {
    for last in [Forced::Open, Forced::Closed] {
        let layer = per_host(3, 1_000);
        let handle = layer.handle();
        let forced = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for thread in 0..2 {
                let mut svc = layer.layer(Suppliers::default());
                let forced = &forced;
                scope.spawn(move || {
                    let mut cx = Context::from_waker(std::task::Waker::noop());
                    for i in 0..220 {
                        if i == 200 {
                            while !forced.load(std::sync::atomic::Ordering::SeqCst) {
                                std::thread::yield_now();
                            }
                        }
                        let h: &'static str =
                            Box::leak(format!("{thread}-{i}.example").into_boxed_str());
                        assert!(svc.poll_ready(&mut cx).is_ready());
                        let mut answer = std::pin::pin!(svc.call(to(h)));
                        assert!(answer.as_mut().poll(&mut cx).is_ready());
                    }
                });
            }
            let handle = handle.clone();
            let forced = &forced;
            scope.spawn(move || {
                for _ in 0..100 {
                    handle.force(last);
                    handle.release();
                }
                handle.force(last);
                forced.store(true, std::sync::atomic::Ordering::SeqCst);
            });
        });
        let held = match last {
            Forced::Open => State::ForcedOpen,
            Forced::Closed => State::ForcedClosed,
        };
        assert_eq!(handle.len(), 440);
        for (key, snapshot) in handle.snapshots() {
            assert_eq!(snapshot.state, held, "{key}");
        }
        handle.release();
        for (key, snapshot) in handle.snapshots() {
            assert_eq!(snapshot.state, State::Closed, "{key}");
        }
    }
}
