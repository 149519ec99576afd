//! One bulkhead per key, with a bound on keys.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::time::Duration;

use seawall_bulkhead::{BulkheadConfig, BulkheadLayer, KeyedBulkheadLayer, QueuePolicy};
use seawall_core::{find_rejection, BoxError, LayerHandle, RejectionKind};
use tokio_test::{assert_pending, assert_ready, task};
use tower::{service_fn, Layer, Service};

type Req = http::Request<&'static str>;

fn req(host: &'static str) -> Req {
    http::Request::new(host)
}

fn host(req: &Req) -> &'static str {
    req.body()
}

fn hang(_req: Req) -> std::future::Pending<Result<(), Infallible>> {
    std::future::pending()
}

/// The settings a plain layer is built with, given to a keyed one by `.keyed(..)`.
fn one_at_a_time() -> seawall_bulkhead::BulkheadBuilder {
    BulkheadLayer::builder("suppliers")
        .max_concurrent(1)
        .max_queue(0)
}

/// Calls for each host in turn, then checks every call is in flight: running or
/// waiting for a slot. All are made before any is polled.
fn started<S, const N: usize>(svc: &mut S, hosts: [&'static str; N]) -> [task::Spawn<S::Future>; N]
where
    S: Service<Req>,
    S::Response: std::fmt::Debug,
    S::Error: std::fmt::Debug,
{
    let mut calls = hosts.map(|h| task::spawn(svc.call(req(h))));
    for call in &mut calls {
        assert_pending!(call.poll());
    }
    calls
}

/// A call for `host` the bulkhead turns away on its first poll: its error.
fn rejected<S>(svc: &mut S, host: &'static str) -> BoxError
where
    S: Service<Req, Error = BoxError>,
    S::Response: std::fmt::Debug,
{
    let mut call = task::spawn(svc.call(req(host)));
    assert_ready!(call.poll()).unwrap_err()
}

fn kind(err: &BoxError) -> RejectionKind {
    find_rejection(&**err).expect("a seawall rejection").kind()
}

#[tokio::test(start_paused = true)]
async fn each_key_has_its_own_bulkhead() {
    let l = one_at_a_time().keyed(host).build().unwrap();
    let h = l.handle();
    let mut svc = l.layer(service_fn(hang));
    let _calls = started(&mut svc, ["a.example", "b.example"]);
    // `a` is full; `b` was not affected by it.
    let err = rejected(&mut svc, "a.example");
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
    assert_eq!(h.snapshot_of(&"a.example").unwrap().rejected_full, 1);
    assert_eq!(h.snapshot_of(&"b.example").unwrap().rejected_full, 0);
    let s = h.snapshot();
    assert_eq!((s.keys, s.active, s.queued), (2, 2, 0));
    let mut keys = h.keys();
    keys.sort_unstable();
    assert_eq!(keys, ["a.example", "b.example"]);
}

#[tokio::test(start_paused = true)]
async fn at_the_key_bound_idle_keys_are_evicted_and_busy_keys_turn_new_ones_away() {
    let l = one_at_a_time().keyed(host).max_keys(2).build().unwrap();
    let h = l.handle();
    let mut svc = l.layer(service_fn(hang));
    let [a, _b] = started(&mut svc, ["a", "b"]);

    // Two busy keys: a third key is rejected at once, known keys still work.
    let err = rejected(&mut svc, "c");
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
    assert_eq!(find_rejection(&*err).unwrap().name(), Some("suppliers"));
    assert_eq!(h.snapshot().rejected_key_limit, 1);

    // `a` goes idle: the next new key takes its place, forgetting `a`.
    drop(a);
    let _c = started(&mut svc, ["c"]);
    let s = h.snapshot();
    assert_eq!((s.keys, s.evicted, s.active), (2, 1, 2));
    assert!(h.snapshot_of(&"a").is_none());
    assert_eq!(h.snapshot_of(&"c").unwrap().active, 1);
}

#[tokio::test(start_paused = true)]
async fn reconfigure_changes_every_key_and_revert_restores() {
    let l = one_at_a_time().max_queue(5).keyed(host).build().unwrap();
    let h = l.handle();
    let mut svc = l.layer(service_fn(hang));
    let _calls = started(&mut svc, ["a", "a", "b", "b"]);
    assert_eq!((h.snapshot().active, h.snapshot().queued), (2, 2));
    let wider = BulkheadConfig {
        max_concurrent: 2,
        ..h.config()
    };
    h.reconfigure(wider).unwrap();
    assert_eq!((h.snapshot().active, h.snapshot().queued), (4, 0));
    // New keys get the new limits too.
    let _d = started(&mut svc, ["d", "d"]);
    assert_eq!(h.snapshot_of(&"d").unwrap().active, 2);

    assert_eq!(
        h.reconfigure(BulkheadConfig {
            queue: QueuePolicy {
                max_wait: Duration::ZERO,
                ..wider.queue
            },
            ..wider
        })
        .unwrap_err()
        .field(),
        "queue.max_wait"
    );
    h.revert();
    assert_eq!(h.config().max_concurrent, 1);
    assert_eq!(h.snapshot_of(&"d").unwrap().max_concurrent, 1);
}

#[test]
fn the_key_bound_is_validated() {
    let err = BulkheadLayer::builder("suppliers")
        .keyed(host)
        .max_keys(0)
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "max_keys");
}

/// An inner service that, from `call`, reads the keyed layer's handle and calls
/// the keyed layer again with a new key (an insert that evicts): both deadlock if
/// the map's lock were held while the inner service runs.
#[derive(Clone)]
struct Nested {
    layer: KeyedByBody,
    depth: usize,
}

/// A keyed bulkhead with one key per request body.
type KeyedByBody = KeyedBulkheadLayer<String, fn(&http::Request<String>) -> String>;

impl Nested {
    /// `layer` around a `Nested` that uses `layer` again, `depth` levels down.
    fn inside(layer: &KeyedByBody, depth: usize) -> <KeyedByBody as Layer<Nested>>::Service {
        layer.layer(Nested {
            layer: layer.clone(),
            depth,
        })
    }
}

impl Service<http::Request<String>> for Nested {
    type Response = ();
    type Error = Infallible;
    type Future = std::future::Ready<Result<(), Infallible>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        drop(self.layer.handle().snapshot());
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<String>) -> Self::Future {
        drop(self.layer.handle().keys());
        if self.depth == 0 {
            let mut again = Nested::inside(&self.layer, 1);
            let nested = http::Request::new(format!("nested-{}", req.body()));
            let mut answer = task::spawn(again.call(nested));
            assert!(assert_ready!(answer.poll()).is_ok());
        }
        std::future::ready(Ok(()))
    }
}

#[test]
fn the_inner_service_may_use_the_keyed_layer_while_it_is_polled_and_called() {
    let deadlocked = "the keyed layer deadlocked with its inner service";
    let s = seawall_test_support::watchdog(deadlocked, || {
        let body = (|r: &http::Request<String>| r.body().clone()) as fn(&_) -> String;
        let layer = BulkheadLayer::builder("suppliers")
            .keyed(body)
            .max_keys(2)
            .build()
            .unwrap();
        let mut svc = Nested::inside(&layer, 0);
        for key in ["a", "b", "c"] {
            let mut answer = task::spawn(svc.call(http::Request::new(key.to_owned())));
            assert!(assert_ready!(answer.poll()).is_ok());
        }
        layer.handle().snapshot()
    });
    // Six keys went through a map of two, none turned away.
    assert_eq!((s.keys, s.evicted, s.rejected_key_limit), (2, 4, 0));
}

#[tokio::test(start_paused = true)]
async fn a_flood_of_new_keys_never_evicts_a_busy_key() {
    let l = BulkheadLayer::builder("suppliers")
        .max_concurrent(1)
        .max_queue(1)
        .keyed(|r: &http::Request<String>| r.body().clone())
        .max_keys(16)
        .build()
        .unwrap();
    let h = l.handle();
    let hang = |_req: http::Request<String>| std::future::pending::<Result<(), Infallible>>();
    let mut svc = l.layer(service_fn(hang));
    // Eight keys busy: one call active and one waiting each.
    let mut busy = Vec::new();
    for k in 0..8 {
        for _ in 0..2 {
            let mut f = task::spawn(svc.call(http::Request::new(format!("busy-{k}"))));
            assert_pending!(f.poll());
            busy.push(f);
        }
    }
    let done = |_req: http::Request<String>| std::future::ready(Ok::<(), Infallible>(()));
    let mut quick = l.layer(service_fn(done));
    for fresh in 0..10_000 {
        let mut f = task::spawn(quick.call(http::Request::new(format!("fresh-{fresh}"))));
        assert!(assert_ready!(f.poll()).is_ok());
    }
    let s = h.snapshot();
    assert_eq!(
        (s.keys, s.active, s.queued, s.rejected_key_limit),
        (16, 8, 8, 0)
    );
    for k in 0..8 {
        let b = h.snapshot_of(&format!("busy-{k}")).unwrap();
        assert_eq!((b.active, b.queued), (1, 1));
    }
    assert_eq!(s.evicted, 10_000 - 8);
}

#[tokio::test(start_paused = true)]
async fn one_builder_makes_a_shared_bulkhead_or_one_per_key_with_the_same_limits() {
    let shared = one_at_a_time().build().unwrap();
    let keyed = one_at_a_time().keyed(host).max_keys(2).build().unwrap();
    assert_eq!(shared.handle().config(), keyed.handle().config());
    assert_eq!(keyed.handle().snapshot().max_keys, 2);
    let default = one_at_a_time().keyed(host).build().unwrap();
    assert_eq!(
        default.handle().snapshot().max_keys,
        seawall_bulkhead::DEFAULT_MAX_KEYS
    );

    let mut one = shared.layer(service_fn(hang));
    let mut per_host = keyed.layer(service_fn(hang));
    let mut a = task::spawn(one.call(req("a.example")));
    let mut a_keyed = task::spawn(per_host.call(req("a.example")));
    assert_pending!(a.poll());
    assert_pending!(a_keyed.poll());
    // One slot: the shared bulkhead turns another host away, the keyed one only
    // the same host.
    let err = rejected(&mut one, "b.example");
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
    let _b_keyed = started(&mut per_host, ["b.example"]);
    let err = rejected(&mut per_host, "a.example");
    assert_eq!(kind(&err), RejectionKind::BulkheadFull);
}

#[tokio::test(start_paused = true)]
async fn forcing_a_limit_holds_every_key_and_the_keys_seen_while_forced() {
    let l = one_at_a_time().keyed(host).build().unwrap();
    let h = l.handle();
    let mut svc = l.layer(service_fn(hang));
    let _a = started(&mut svc, ["a"]);
    assert_eq!(kind(&rejected(&mut svc, "a")), RejectionKind::BulkheadFull);

    h.force(3).unwrap();
    assert_eq!(h.snapshot().forced, Some(3));
    // `a` takes two more calls, and `b`, first seen while forced, three.
    let _more = started(&mut svc, ["a", "a", "b", "b", "b"]);
    assert_eq!(kind(&rejected(&mut svc, "a")), RejectionKind::BulkheadFull);
    assert_eq!(kind(&rejected(&mut svc, "b")), RejectionKind::BulkheadFull);
    for key in ["a", "b"] {
        let s = h.snapshot_of(&key).unwrap();
        assert_eq!((s.limit, s.limit_forced, s.active), (3, true, 3), "{key}");
    }
    // Reconfiguring keeps the force, as for one bulkhead.
    h.reconfigure(BulkheadConfig {
        max_concurrent: 2,
        ..h.config()
    })
    .unwrap();
    assert_eq!(h.snapshot_of(&"b").unwrap().limit, 3);

    h.release();
    assert_eq!(h.snapshot().forced, None);
    for key in ["a", "b"] {
        let s = h.snapshot_of(&key).unwrap();
        assert_eq!((s.limit, s.limit_forced), (2, false), "{key}");
    }
    let _c = started(&mut svc, ["c", "c"]);
    assert_eq!(h.snapshot_of(&"c").unwrap().limit, 2);
    assert_eq!(kind(&rejected(&mut svc, "c")), RejectionKind::BulkheadFull);
}

#[test]
fn a_forced_limit_out_of_range_is_refused_and_changes_nothing() {
    let l = one_at_a_time().keyed(host).build().unwrap();
    let h = l.handle();
    for bad in [0, (1 << 20) + 1, usize::MAX] {
        assert_eq!(h.force(bad).unwrap_err().field(), "limit");
    }
    assert_eq!(h.snapshot().forced, None);
}

/// What code that treats every layer alike does with a handle, through the trait.
fn operate<H: LayerHandle>(handle: &H, forced: H::Forced) -> H::Snapshot {
    handle.force(forced).unwrap();
    let while_forced = handle.snapshot();
    handle.revert();
    handle.release();
    while_forced
}

#[tokio::test(start_paused = true)]
async fn a_keyed_handle_is_a_layer_handle() {
    let l = one_at_a_time().keyed(host).build().unwrap();
    let h = l.handle();
    let mut svc = l.layer(service_fn(hang));
    let _a = started(&mut svc, ["a"]);
    assert_eq!(LayerHandle::name(&h), "suppliers");
    assert_eq!(LayerHandle::config(&h).max_concurrent, 1);
    let while_forced = operate(&h, 4);
    assert_eq!((while_forced.forced, while_forced.active), (Some(4), 1));
    let s = h.snapshot_of(&"a").unwrap();
    assert_eq!((s.limit, s.limit_forced), (1, false));
    assert_eq!(h.snapshot().forced, None);
}

/// Keys arriving on two threads while a third forces and releases the layer, and
/// more once the last `force` has returned: however the creation of a key's
/// bulkhead interleaves with `force` and `release`, every key ends holding the
/// last forced limit (a bulkhead built while the setting changed, or after it,
/// catches up with it).
#[test]
fn keys_created_while_force_and_release_race_end_as_the_last_one_says() {
    let l = one_at_a_time().keyed(host).max_keys(1_000).build().unwrap();
    let h = l.handle();
    let keys: Vec<&'static str> = (0..440)
        .map(|i| &*Box::leak(format!("{i}.example").into_boxed_str()))
        .collect();
    let forced = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for half in keys.chunks(220) {
            let mut svc = l.layer(service_fn(|_req: Req| {
                std::future::ready(Ok::<_, Infallible>(()))
            }));
            let forced = &forced;
            scope.spawn(move || {
                let (racing, after) = half.split_at(200);
                for &key in racing {
                    let mut call = task::spawn(svc.call(req(key)));
                    assert_ready!(call.poll()).unwrap();
                }
                while !forced.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                for &key in after {
                    let mut call = task::spawn(svc.call(req(key)));
                    assert_ready!(call.poll()).unwrap();
                }
            });
        }
        let h = h.clone();
        let forced = &forced;
        scope.spawn(move || {
            for limit in 1..=100 {
                h.force(limit).unwrap();
                h.release();
            }
            h.force(7).unwrap();
            forced.store(true, std::sync::atomic::Ordering::SeqCst);
        });
    });
    assert_eq!(h.snapshot().keys, 440);
    for key in &keys {
        let s = h.snapshot_of(key).unwrap();
        assert_eq!((s.limit, s.limit_forced), (7, true), "{key}");
    }
    h.release();
    for key in &keys {
        let s = h.snapshot_of(key).unwrap();
        assert_eq!((s.limit, s.limit_forced), (1, false), "{key}");
    }
}
