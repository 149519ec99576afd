//! A keyed breaker's metric series are bounded by its configuration, not by the
//! keys clients send; per-key series are an opt-in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(feature = "metrics")]

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use seawall_circuit_breaker::{
    CircuitBreakerConfig, CircuitBreakerLayer, CircuitOpen, Forced, KeyedHandle, State, TripPolicy,
};
use seawall_core::BoxError;
use tower::{service_fn, Layer, Service, ServiceExt};

use seawall_test_support::{paused_runtime, Series};

/// Requests are host names; those starting with `down` fail.
fn suppliers() -> impl Service<String, Response = (), Error = BoxError> + Clone {
    service_fn(|host: String| async move {
        if host.starts_with("down") {
            Err::<(), BoxError>("connection refused".into())
        } else {
            Ok(())
        }
    })
}

#[test]
fn five_thousand_keys_leave_a_bounded_number_of_series_by_default() {
    let series = Series::default();
    metrics::with_local_recorder(&series, || {
        let layer = CircuitBreakerLayer::builder("suppliers")
            .jitter(0.0)
            .consecutive_failures(1)
            .keyed(|host: &String| host.clone())
            .max_keys(16)
            .build()
            .unwrap();
        let handle = layer.handle();
        let svc = layer.layer(suppliers());
        paused_runtime().block_on(async {
            for i in 0..5_000 {
                // Every thousandth key is down: its breaker opens and stays.
                let host = if i % 1_000 == 0 {
                    format!("down-{i}.example")
                } else {
                    format!("{i}.example")
                };
                let _ = svc.clone().oneshot(host).await;
            }
        });
        assert_eq!(handle.len(), 16);
        assert_eq!(
            handle.open_keys().len(),
            5,
            "open breakers are never evicted"
        );
        assert_eq!(handle.evicted(), 5_000 - 16);
        // The state gauge counts the breakers alive: evicted ones left it.
        assert_eq!(
            series.gauges_sum("seawall_breaker_state", "name=suppliers"),
            16.0
        );
        assert_eq!(
            series.gauge("seawall_breaker_state{name=suppliers,state=open}"),
            5.0
        );
    });
    let names = series.names();
    let breaker: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("seawall_breaker_"))
        .collect();
    // The series the layer registered when built: calls by outcome (6), slow
    // calls, stale outcomes, probes by result (3), shadow rejections by cause (3),
    // the automatic transitions (4) and the state gauge by state (6). No operator
    // acted, no reason was given.
    assert_eq!(breaker.len(), 24, "{breaker:#?}");
    assert!(
        breaker
            .iter()
            .all(|n| n.contains("name=suppliers") && !n.contains("key=")),
        "{breaker:#?}"
    );
    // Registered once, when the layer was built: the 5,000 new keys registered
    // nothing.
    let registered = series.registrations.load(Ordering::Relaxed);
    assert_eq!(registered, 24, "{registered} registrations");
}

#[test]
fn per_key_series_are_an_opt_in_with_a_key_label() {
    let series = Series::default();
    metrics::with_local_recorder(&series, || {
        let layer = CircuitBreakerLayer::builder("routes")
            .jitter(0.0)
            .consecutive_failures(1)
            .keyed(|route: &String| route.clone())
            .max_keys(4)
            .per_key_metrics()
            .build()
            .unwrap();
        let handle = layer.handle();
        let svc = layer.layer(suppliers());
        paused_runtime().block_on(async {
            let _ = svc.clone().oneshot("down-a".to_owned()).await;
            for route in ["b", "c", "d", "e", "f", "g"] {
                svc.clone().oneshot(route.to_owned()).await.unwrap();
            }
        });
        assert_eq!(handle.len(), 4);
        assert_eq!(
            series.gauge("seawall_breaker_state{key=down-a,name=routes,state=open}"),
            1.0
        );
        // An evicted key's series stay (the facade cannot remove one), at 0.
        assert!(handle.get(&"b".to_owned()).is_none());
        assert_eq!(
            series.gauge("seawall_breaker_state{key=b,name=routes,state=closed}"),
            0.0
        );
        assert_eq!(
            series.counter("seawall_breaker_calls_total{key=b,name=routes,outcome=success}"),
            1
        );
        // At most `max_keys` breakers are counted in a state at once.
        assert_eq!(
            series.gauges_sum("seawall_breaker_state", "name=routes"),
            4.0
        );
    });
    let keys: std::collections::BTreeSet<String> = series
        .names()
        .iter()
        .filter_map(|n| n.split("key=").nth(1))
        .map(|rest| rest.split([',', '}']).next().unwrap_or("").to_owned())
        .collect();
    assert_eq!(keys.len(), 7, "one set of series per key seen: {keys:?}");
}

#[test]
fn a_key_made_while_the_configuration_changes_gets_the_new_one() {
    let series: &'static Series = Box::leak(Box::default());
    let handle: Arc<OnceLock<KeyedHandle<String>>> = Arc::default();
    let stricter = CircuitBreakerConfig {
        policy: TripPolicy::ConsecutiveFailures { threshold: 2 },
        jitter: Some(0.0),
        ..CircuitBreakerConfig::default()
    };
    {
        // Registering a new key's per-key series (user code, run while its
        // breaker is made) reconfigures the layer, as another thread could: the
        // new key cannot be in the map yet.
        let handle = Arc::clone(&handle);
        let stricter = stricter.clone();
        let _ = series.on_register.set(Box::new(move || {
            if let Some(h) = handle.get() {
                if h.config() != stricter {
                    h.reconfigure(stricter.clone()).unwrap();
                }
            }
        }));
    }
    metrics::with_local_recorder(series, || {
        let layer = CircuitBreakerLayer::builder("suppliers")
            .jitter(0.0)
            .consecutive_failures(5)
            .keyed(|host: &String| host.clone())
            .max_keys(4)
            .per_key_metrics()
            .build()
            .unwrap();
        let _ = handle.set(layer.handle());
        let svc = layer.layer(suppliers());
        paused_runtime().block_on(async {
            svc.clone().oneshot("a.example".to_owned()).await.unwrap();
        });
        let h = layer.handle();
        assert_eq!(h.config(), stricter);
        assert_eq!(h.get(&"a.example".to_owned()).unwrap().config(), stricter);
    });
}

#[test]
fn a_key_made_while_an_operator_forces_the_layer_is_forced_too() {
    let series: &'static Series = Box::leak(Box::default());
    let handle: Arc<OnceLock<KeyedHandle<String>>> = Arc::default();
    {
        // Registering a new key's per-key series (user code, run while its
        // breaker is made) forces the layer open, as another thread could: the
        // `force` cannot reach the new key's breaker, not in the map yet. Once:
        // the force's own transition registers a counter too.
        let handle = Arc::clone(&handle);
        let forced_once = std::sync::atomic::AtomicBool::new(false);
        let _ = series.on_register.set(Box::new(move || {
            if let Some(h) = handle.get() {
                if !forced_once.swap(true, Ordering::SeqCst) {
                    h.force(Forced::Open);
                }
            }
        }));
    }
    metrics::with_local_recorder(series, || {
        let layer = CircuitBreakerLayer::builder("suppliers")
            .jitter(0.0)
            .keyed(|host: &String| host.clone())
            .max_keys(4)
            .per_key_metrics()
            .build()
            .unwrap();
        let _ = handle.set(layer.handle());
        let svc = layer.layer(suppliers());
        let answer = paused_runtime().block_on(svc.clone().oneshot("a.example".to_owned()));
        let h = layer.handle();
        assert_eq!(h.forced(), Some(Forced::Open));
        // The new key caught up before its first call was admitted.
        assert!(answer.unwrap_err().is::<CircuitOpen>());
        let a = h.get(&"a.example".to_owned()).unwrap();
        assert_eq!(a.snapshot().state, State::ForcedOpen);
        h.release();
        assert_eq!(a.snapshot().state, State::Closed);
    });
}
