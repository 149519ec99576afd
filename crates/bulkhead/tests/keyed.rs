//! One bulkhead per key, with a bound on keys.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::time::Duration;

use seawall_bulkhead::{BulkheadConfig, KeyedBulkheadLayer};
use seawall_core::{find_rejection, RejectionKind};
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

#[tokio::test(start_paused = true)]
async fn each_key_has_its_own_bulkhead() {
    let l = KeyedBulkheadLayer::builder("suppliers", host)
        .max_concurrent(1)
        .max_queue(0)
        .build()
        .unwrap();
    let h = l.handle();
    let mut svc = l.layer(service_fn(hang));
    let mut a = task::spawn(svc.call(req("a.example")));
    let mut b = task::spawn(svc.call(req("b.example")));
    assert_pending!(a.poll());
    assert_pending!(b.poll());
    // `a` is full; `b` was not affected by it.
    let mut a2 = task::spawn(svc.call(req("a.example")));
    let err = assert_ready!(a2.poll()).unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::BulkheadFull
    );
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
    let l = KeyedBulkheadLayer::builder("suppliers", host)
        .max_concurrent(1)
        .max_queue(0)
        .max_keys(2)
        .build()
        .unwrap();
    let h = l.handle();
    let mut svc = l.layer(service_fn(hang));
    let mut a = task::spawn(svc.call(req("a")));
    let mut b = task::spawn(svc.call(req("b")));
    assert_pending!(a.poll());
    assert_pending!(b.poll());

    // Two busy keys: a third key is rejected at once, known keys still work.
    let mut c = task::spawn(svc.call(req("c")));
    let err = assert_ready!(c.poll()).unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::BulkheadFull
    );
    assert_eq!(find_rejection(&*err).unwrap().name(), Some("suppliers"));
    assert_eq!(h.snapshot().rejected_key_limit, 1);

    // `a` goes idle: the next new key takes its place, forgetting `a`.
    drop(a);
    let mut c = task::spawn(svc.call(req("c")));
    assert_pending!(c.poll());
    let s = h.snapshot();
    assert_eq!((s.keys, s.evicted, s.active), (2, 1, 2));
    assert!(h.snapshot_of(&"a").is_none());
    assert_eq!(h.snapshot_of(&"c").unwrap().active, 1);
}

#[tokio::test(start_paused = true)]
async fn reconfigure_changes_every_key_and_revert_restores() {
    let l = KeyedBulkheadLayer::builder("suppliers", host)
        .max_concurrent(1)
        .max_queue(5)
        .build()
        .unwrap();
    let h = l.handle();
    let mut svc = l.layer(service_fn(hang));
    let mut calls: Vec<_> = ["a", "a", "b", "b"]
        .into_iter()
        .map(|k| task::spawn(svc.call(req(k))))
        .collect();
    for f in &mut calls {
        assert_pending!(f.poll());
    }
    assert_eq!((h.snapshot().active, h.snapshot().queued), (2, 2));
    let wider = BulkheadConfig {
        max_concurrent: 2,
        ..h.config()
    };
    h.reconfigure(wider).unwrap();
    assert_eq!((h.snapshot().active, h.snapshot().queued), (4, 0));
    // New keys get the new limits too.
    let mut d1 = task::spawn(svc.call(req("d")));
    let mut d2 = task::spawn(svc.call(req("d")));
    assert_pending!(d1.poll());
    assert_pending!(d2.poll());
    assert_eq!(h.snapshot_of(&"d").unwrap().active, 2);

    assert_eq!(
        h.reconfigure(BulkheadConfig {
            max_wait: Duration::ZERO,
            ..wider
        })
        .unwrap_err()
        .field(),
        "max_wait"
    );
    h.revert();
    assert_eq!(h.config().max_concurrent, 1);
    assert_eq!(h.snapshot_of(&"d").unwrap().max_concurrent, 1);
}

#[test]
fn the_key_bound_is_validated() {
    let err = KeyedBulkheadLayer::builder("suppliers", host)
        .max_keys(0)
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "max_keys");
}
