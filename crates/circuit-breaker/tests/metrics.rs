//! Metrics, captured by a recorder of our own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(feature = "metrics")]

use std::sync::{Arc, Mutex};

use seawall_circuit_breaker::CircuitBreakerLayer;
use tower::Layer;

mod support;
use support::{drive, render, runtime, supplier};

mod metrics_export {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    /// Keeps every registered counter and gauge under `name{k=v,...}` (labels sorted).
    #[derive(Default)]
    struct Registry {
        values: Mutex<HashMap<String, Arc<AtomicU64>>>,
    }

    impl Registry {
        fn slot(&self, key: &Key) -> Arc<AtomicU64> {
            Arc::clone(self.values.lock().unwrap().entry(render(key)).or_default())
        }

        fn counter(&self, key: &str) -> u64 {
            self.values
                .lock()
                .unwrap()
                .get(key)
                .map_or(0, |v| v.load(Ordering::SeqCst))
        }

        fn gauge(&self, key: &str) -> f64 {
            f64::from_bits(self.counter(key))
        }
    }

    impl Recorder for Registry {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(self.slot(key))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(self.slot(key))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn counters_by_outcome_transitions_and_a_state_gauge() {
        let registry = Registry::default();
        let failing = Arc::new(Mutex::new(false));
        let layer = metrics::with_local_recorder(&registry, || {
            let layer = CircuitBreakerLayer::builder("quotes").build().unwrap();
            assert_eq!(
                registry.gauge("seawall_breaker_state{name=quotes,state=closed}"),
                1.0
            );
            let mut svc = layer.layer(supplier(Arc::clone(&failing)));
            runtime().block_on(drive(&mut svc, &failing));
            layer
        });
        let c = |k: &str| registry.counter(k);
        assert_eq!(
            c("seawall_breaker_calls_total{name=quotes,outcome=success}"),
            3
        );
        assert_eq!(
            c("seawall_breaker_calls_total{name=quotes,outcome=failure}"),
            7
        );
        assert_eq!(
            c("seawall_breaker_calls_total{name=quotes,outcome=rejected}"),
            7
        );
        assert_eq!(
            c("seawall_breaker_transitions_total{from=closed,name=quotes,to=open}"),
            1
        );
        assert_eq!(
            registry.gauge("seawall_breaker_state{name=quotes,state=open}"),
            1.0
        );
        assert_eq!(
            registry.gauge("seawall_breaker_state{name=quotes,state=closed}"),
            0.0
        );
        assert_eq!(
            registry.gauge("seawall_breaker_state{name=quotes,state=half_open}"),
            0.0
        );
        // A breaker that is gone counts in no state.
        drop(layer);
        assert_eq!(
            registry.gauge("seawall_breaker_state{name=quotes,state=open}"),
            0.0
        );
    }
}
