//! A keyed bulkhead with an adaptive limit: one algorithm per key, fed only by that
//! key's calls, driven by hand with a paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use seawall_bulkhead::adaptive::{AimdConfig, GradientConfig};
use seawall_bulkhead::{
    BulkheadConfig, BulkheadLayer, KeyedBulkheadLayer, KeyedHandle, OverloadStatus,
};
use seawall_core::{find_rejection, BoxError, RejectionKind};
use tokio_test::{assert_ready, task};
use tower::{service_fn, Layer, Service};

use support::{answer, call, request, supplier, Req, Res};

/// The key is the URI's path.
fn host(req: &Req) -> String {
    req.uri().path().to_owned()
}

fn aimd() -> AimdConfig {
    AimdConfig {
        initial_limit: 2,
        min_limit: 1,
        max_limit: 20,
        sample_every: 1,
        timeout: Duration::from_secs(1),
        ..AimdConfig::default()
    }
}

fn limit(h: &KeyedHandle<String>, key: &str) -> Option<usize> {
    h.snapshot_of(&key.to_owned()).map(|s| s.limit)
}

fn layer(
    max_keys: usize,
) -> KeyedBulkheadLayer<String, fn(&Req) -> String, seawall_bulkhead::UntilResponse, OverloadStatus>
{
    BulkheadLayer::builder("hosts")
        .max_queue(0)
        .adaptive(aimd())
        .keyed(host as fn(&Req) -> String)
        .max_keys(max_keys)
        .build()
        .unwrap()
        .overload(OverloadStatus::default())
}

/// A keyed adaptive bulkhead over the supplier, and its handle.
fn served(
    max_keys: usize,
) -> (
    impl Service<Req, Response = Res, Error = BoxError, Future: Send + 'static>,
    KeyedHandle<String>,
) {
    let layer = layer(max_keys);
    let h = layer.handle();
    (layer.layer(service_fn(supplier)), h)
}

/// One call on `key`, answered 503 after 10 ms: one overload signal for that key alone.
async fn overload_once<S>(svc: &mut S, key: &str)
where
    S: Service<Req, Response = Res, Error = BoxError>,
    S::Future: Send + 'static,
{
    let (c, tx) = call(svc, key);
    tokio::time::advance(Duration::from_millis(10)).await;
    answer(c, tx, 503);
}

#[tokio::test(start_paused = true)]
async fn each_key_learns_its_own_limit_from_its_own_calls() {
    let (mut svc, h) = served(8);

    // /slow answers 503 twice, in two round trips: its limit falls to the minimum.
    for _ in 0..2 {
        overload_once(&mut svc, "/slow").await;
    }
    assert_eq!(limit(&h, "/slow"), Some(1));
    let adaptive = h
        .snapshot_of(&"/slow".to_owned())
        .unwrap()
        .adaptive
        .unwrap();
    assert_eq!(adaptive.algorithm, "aimd");

    // /fast is served with both of its slots in use: its limit grows.
    let a = call(&mut svc, "/fast");
    let b = call(&mut svc, "/fast");
    tokio::time::advance(Duration::from_millis(10)).await;
    answer(a.0, a.1, 200);
    answer(b.0, b.1, 200);
    assert_eq!(limit(&h, "/fast"), Some(3));
    assert_eq!(
        limit(&h, "/slow"),
        Some(1),
        "another key's answers teach /slow nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn no_key_admits_a_call_while_its_active_calls_are_at_its_limit() {
    let (mut svc, h) = served(8);
    overload_once(&mut svc, "/slow").await;
    assert_eq!(limit(&h, "/slow"), Some(1));

    let _held = call(&mut svc, "/slow");
    let (req, _tx) = request("/slow");
    let mut turned_away = task::spawn(svc.call(req));
    let err = assert_ready!(turned_away.poll()).unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::BulkheadFull
    );
    // Other keys still have their own initial limit.
    let _a = call(&mut svc, "/other");
    let _b = call(&mut svc, "/other");
    assert_eq!(h.snapshot_of(&"/other".to_owned()).unwrap().active, 2);
}

#[tokio::test(start_paused = true)]
async fn a_forgotten_key_comes_back_at_the_initial_limit() {
    let (mut svc, h) = served(1);
    overload_once(&mut svc, "/slow").await;
    assert_eq!(limit(&h, "/slow"), Some(1));
    // One key at most: /other evicts the idle /slow, which then starts over.
    let (c, tx) = call(&mut svc, "/other");
    answer(c, tx, 200);
    assert_eq!(limit(&h, "/slow"), None);
    let (c, tx) = call(&mut svc, "/slow");
    assert_eq!(limit(&h, "/slow"), Some(2));
    answer(c, tx, 200);
    assert_eq!(h.snapshot().evicted, 2);
}

#[tokio::test(start_paused = true)]
async fn reconfiguring_keeps_the_kind_of_limit_and_restarts_every_key_from_its_own() {
    let (mut svc, h) = served(8);
    overload_once(&mut svc, "/slow").await;
    // Served with half its limit in use: /fast grows by one.
    let (c, tx) = call(&mut svc, "/fast");
    answer(c, tx, 200);
    assert_eq!(limit(&h, "/fast"), Some(3));

    // Dropping the algorithm, or a keyed layer built fixed taking one: refused.
    let fixed = BulkheadConfig {
        adaptive: None,
        ..h.config()
    };
    let err = h.reconfigure(fixed).unwrap_err();
    assert_eq!(err.field(), "adaptive");
    let err = BulkheadLayer::builder("fixed")
        .keyed(host)
        .build()
        .unwrap()
        .handle()
        .reconfigure(BulkheadConfig {
            adaptive: Some(aimd().into()),
            ..BulkheadConfig::default()
        })
        .unwrap_err();
    assert_eq!(err.field(), "adaptive");
    // Invalid settings name the field under `adaptive`.
    let bad = BulkheadConfig {
        adaptive: Some(
            AimdConfig {
                min_limit: 0,
                ..aimd()
            }
            .into(),
        ),
        ..h.config()
    };
    assert!(h
        .reconfigure(bad)
        .unwrap_err()
        .field()
        .starts_with("adaptive."));
    assert_eq!(limit(&h, "/slow"), Some(1), "a refusal changes nothing");

    // New settings: every key starts again from its own limit in force.
    let gentler = BulkheadConfig {
        adaptive: Some(
            AimdConfig {
                initial_limit: 5,
                backoff: 0.5,
                ..aimd()
            }
            .into(),
        ),
        ..h.config()
    };
    h.reconfigure(gentler).unwrap();
    assert_eq!(limit(&h, "/slow"), Some(1));
    assert_eq!(limit(&h, "/fast"), Some(3));
    // A key made afterwards starts at the new initial limit.
    let (c, tx) = call(&mut svc, "/new");
    assert_eq!(limit(&h, "/new"), Some(5));
    answer(c, tx, 200);

    // Another algorithm: every key runs it.
    let gradient = BulkheadConfig {
        adaptive: Some(
            GradientConfig {
                initial_limit: 2,
                min_limit: 1,
                max_limit: 20,
                ..GradientConfig::default()
            }
            .into(),
        ),
        ..h.config()
    };
    h.reconfigure(gradient).unwrap();
    for key in ["/slow", "/fast", "/new"] {
        let s = h.snapshot_of(&key.to_owned()).unwrap();
        assert_eq!(s.adaptive.unwrap().algorithm, "gradient", "{key}");
    }
}
