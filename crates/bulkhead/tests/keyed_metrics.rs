//! A keyed bulkhead's metric series are bounded by its configuration, not by the
//! keys clients send; per-key series are an opt-in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(feature = "metrics")]

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};

use seawall_bulkhead::{BulkheadConfig, BulkheadLayer, KeyedHandle};
use seawall_test_support::Series;
use tokio_test::{assert_ready, task};
use tower::{service_fn, Layer, Service};

type Req = http::Request<String>;

fn ok(_req: Req) -> std::future::Ready<Result<(), Infallible>> {
    std::future::ready(Ok(()))
}

fn body(req: &Req) -> String {
    req.body().clone()
}

fn send<S: Service<Req, Response = ()>>(svc: &mut S, key: String)
where
    S::Error: std::fmt::Debug,
{
    let mut answer = task::spawn(svc.call(http::Request::new(key)));
    assert_ready!(answer.poll()).unwrap();
}

#[test]
fn five_thousand_keys_leave_a_bounded_number_of_series_by_default() {
    let series = Series::default();
    metrics::with_local_recorder(&series, || {
        let layer = BulkheadLayer::builder("suppliers")
            .keyed(body)
            .max_keys(16)
            .build()
            .unwrap();
        let mut svc = layer.layer(service_fn(ok));
        for i in 0..5_000 {
            send(&mut svc, format!("{i}.example"));
        }
        assert_eq!(layer.handle().snapshot().evicted, 5_000 - 16);
    });
    let names = series.names();
    // Active, queued, the configured limit and the limit in force, admitted,
    // rejections by cause (full, timeout, keys), abandoned, the wait histogram,
    // shadow rejections by cause (full, timeout, keys) and the calls over the
    // limit: 14 series for any number of keys.
    assert_eq!(names.len(), 14, "{names:#?}");
    assert!(names
        .iter()
        .all(|n| n.contains("name=suppliers") && !n.contains("key=")));
    assert_eq!(
        series.counter("seawall_bulkhead_admitted_total{name=suppliers}"),
        5_000
    );
}

#[test]
fn per_key_series_are_an_opt_in_with_a_key_label() {
    let series = Series::default();
    metrics::with_local_recorder(&series, || {
        let layer = BulkheadLayer::builder("routes")
            .keyed(body)
            .max_keys(4)
            .per_key_metrics()
            .build()
            .unwrap();
        let mut svc = layer.layer(service_fn(ok));
        for route in ["a", "b", "c", "d", "e", "f"] {
            send(&mut svc, route.to_owned());
        }
        send(&mut svc, "f".to_owned());
    });
    assert_eq!(
        series.counter("seawall_bulkhead_admitted_total{key=f,name=routes}"),
        2
    );
    // Evicted keys' series stay (the facade cannot remove one).
    assert_eq!(
        series.counter("seawall_bulkhead_admitted_total{key=a,name=routes}"),
        1
    );
    let per_key = series.names().iter().filter(|n| n.contains("key=")).count();
    assert_eq!(per_key, 6 * 13, "13 series per key seen");
}

#[test]
fn a_key_made_while_the_limits_change_gets_the_new_limits() {
    let series: &'static Series = Box::leak(Box::default());
    let handle: Arc<OnceLock<KeyedHandle<String>>> = Arc::default();
    let wider = BulkheadConfig {
        max_concurrent: 3,
        ..BulkheadConfig::default()
    };
    {
        // Registering a new key's per-key series (user code, run while its
        // bulkhead is made) reconfigures the layer, as another thread could: the
        // new key cannot be in the map yet.
        let handle = Arc::clone(&handle);
        let _ = series.on_register.set(Box::new(move || {
            if let Some(h) = handle.get() {
                if h.config() != wider {
                    h.reconfigure(wider).unwrap();
                }
            }
        }));
    }
    metrics::with_local_recorder(series, || {
        let layer = BulkheadLayer::builder("suppliers")
            .max_concurrent(1)
            .keyed(body)
            .per_key_metrics()
            .build()
            .unwrap();
        let _ = handle.set(layer.handle());
        let mut svc = layer.layer(service_fn(ok));
        send(&mut svc, "a".to_owned());
        let h = layer.handle();
        assert_eq!(h.config().max_concurrent, 3);
        assert_eq!(h.snapshot_of(&"a".to_owned()).unwrap().max_concurrent, 3);
    });
}

#[test]
fn a_keyed_adaptive_layer_reports_the_sum_of_its_keys_limits() {
    use seawall_bulkhead::adaptive::AimdConfig;
    use seawall_core::DeadlineExceeded;
    let series = Series::default();
    let limit = "seawall_bulkhead_limit{name=hosts}";
    metrics::with_local_recorder(&series, || {
        let layer = BulkheadLayer::builder("hosts")
            .adaptive(AimdConfig {
                initial_limit: 10,
                sample_every: 1,
                ..AimdConfig::default()
            })
            .keyed(body)
            .max_keys(2)
            .build()
            .unwrap();
        assert_eq!(series.gauge(limit), 0.0, "no key yet");
        // Timeouts are overload for the default classifier.
        let mut svc = layer.layer(service_fn(|req: Req| {
            std::future::ready(if req.body() == "slow" {
                Err(DeadlineExceeded::new())
            } else {
                Ok(())
            })
        }));
        let mut send = |key: &str| {
            let mut answer = task::spawn(svc.call(http::Request::new(key.to_owned())));
            let _ = assert_ready!(answer.poll());
        };
        send("fast");
        assert_eq!(series.gauge(limit), 10.0);
        send("slow");
        // 10 for fast, and slow's 10 shrunk by its timeout to 9.
        assert_eq!(series.gauge(limit), 19.0);
        assert_eq!(
            layer
                .handle()
                .snapshot_of(&"slow".to_owned())
                .unwrap()
                .limit,
            9
        );
        // A third key evicts one of the two idle ones, taking its limit out.
        send("new");
        assert_eq!(layer.handle().snapshot().evicted, 1);
        let kept: usize = layer
            .handle()
            .keys()
            .iter()
            .map(|k| layer.handle().snapshot_of(k).unwrap().limit)
            .sum();
        assert_eq!(series.gauge(limit), kept as f64);
        assert!(kept == 19 || kept == 20, "{kept}");
    });
}

#[test]
fn a_fixed_keyed_layer_reports_the_sum_of_its_live_keys_limits_too() {
    let series = Series::default();
    let limit = "seawall_bulkhead_limit{name=shops}";
    let configured = "seawall_bulkhead_max_concurrent{name=shops}";
    metrics::with_local_recorder(&series, || {
        let layer = BulkheadLayer::builder("shops")
            .max_concurrent(3)
            .keyed(body)
            .max_keys(2)
            .build()
            .unwrap();
        assert_eq!(series.gauge(limit), 0.0, "no key yet");
        assert_eq!(series.gauge(configured), 3.0);
        let mut svc = layer.layer(service_fn(ok));
        send(&mut svc, "a".to_owned());
        assert_eq!(series.gauge(limit), 3.0);
        send(&mut svc, "b".to_owned());
        assert_eq!(series.gauge(limit), 6.0);
        // A third key evicts an idle one: still two live keys.
        send(&mut svc, "c".to_owned());
        assert_eq!(layer.handle().snapshot().evicted, 1);
        assert_eq!(series.gauge(limit), 6.0);
        // A new limit for every key moves the sum with it.
        layer
            .handle()
            .reconfigure(BulkheadConfig {
                max_concurrent: 5,
                ..layer.handle().config()
            })
            .unwrap();
        assert_eq!(series.gauge(limit), 10.0);
        assert_eq!(series.gauge(configured), 5.0);
    });
}
