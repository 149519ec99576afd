//! Metrics, captured by a recorder of our own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(feature = "metrics")]

use std::sync::{Arc, Mutex};

use seawall_circuit_breaker::CircuitBreakerLayer;
use tower::Layer;

mod support;
use support::{drive, runtime, supplier};

mod metrics_export {
    use super::*;
    use seawall_test_support::Series;

    #[test]
    fn counters_by_outcome_transitions_and_a_state_gauge() {
        let registry = Series::default();
        let failing = Arc::new(Mutex::new(false));
        let layer = metrics::with_local_recorder(&registry, || {
            let layer = CircuitBreakerLayer::builder("quotes")
                .jitter(0.0)
                .build()
                .unwrap();
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

/// A recorder is user code: one that reads the breaker while a series is being
/// registered (an operator's transition registers its counter at first use) is
/// answered, not deadlocked on the breaker's lock.
#[test]
fn a_recorder_reading_the_breaker_while_registering_an_operators_transition_is_answered() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    use seawall_circuit_breaker::{Forced, Handle, State};
    use seawall_test_support::{watchdog, Series};

    let (state, counted, reads) = watchdog(
        "registering an operator's transition held the breaker's lock",
        || {
            let registry = Series::default();
            let handle: Arc<OnceLock<Handle>> = Arc::default();
            let reads = Arc::new(AtomicU64::new(0));
            {
                let handle = Arc::clone(&handle);
                let reads = Arc::clone(&reads);
                let _ = registry.on_register.set(Box::new(move || {
                    if let Some(h) = handle.get() {
                        let _ = h.snapshot();
                        reads.fetch_add(1, Ordering::SeqCst);
                    }
                }));
            }
            metrics::with_local_recorder(&registry, || {
                let layer = CircuitBreakerLayer::builder("quotes")
                    .jitter(0.0)
                    .build()
                    .unwrap();
                let _ = handle.set(layer.handle());
                layer.handle().force(Forced::Open);
                (
                    layer.handle().state(),
                    registry.counter(
                        "seawall_breaker_transitions_total{from=closed,name=quotes,to=forced_open}",
                    ),
                    reads.load(Ordering::SeqCst),
                )
            })
        },
    );
    assert_eq!(state, State::ForcedOpen);
    assert_eq!(counted, 1);
    assert!(reads >= 1, "the recorder never read the breaker");
}
