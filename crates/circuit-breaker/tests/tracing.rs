//! Tracing events, captured by a subscriber of our own. (Alone in its test binary:
//! tracing caches per-callsite interest across threads.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(feature = "tracing")]

use std::sync::{Arc, Mutex};

use seawall_circuit_breaker::{CircuitBreakerLayer, Forced, Handle, State};
use seawall_core::find_rejection;
use tower::{Layer, Service, ServiceExt};

mod support;
use support::{drive, runtime, supplier};

mod tracing_events {
    use super::*;
    use std::fmt::Write;

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Level, Metadata, Subscriber};

    #[derive(Clone, Default)]
    struct Capture {
        events: Arc<Mutex<Vec<(Level, String)>>>,
        /// When set, every event also reads this breaker's snapshot, as a
        /// subscriber of a user's might.
        reads: Option<Handle>,
        states_read: Arc<Mutex<Vec<State>>>,
    }

    struct Fields(String);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let _ = write!(self.0, "{}={:?} ", field.name(), value);
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            metadata.target().starts_with("seawall::circuit_breaker")
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            self.events
                .lock()
                .unwrap()
                .push((*event.metadata().level(), fields.0));
            if let Some(handle) = &self.reads {
                let state = handle.snapshot().state;
                self.states_read.lock().unwrap().push(state);
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn a_subscriber_may_read_the_breaker_while_a_transition_is_logged() {
        let layer = CircuitBreakerLayer::builder("quotes")
            .jitter(0.0)
            .build()
            .unwrap();
        let capture = Capture {
            reads: Some(layer.handle()),
            ..Capture::default()
        };
        let subscriber = capture.clone();
        // Logging under the breaker's lock would deadlock the driving thread.
        let deadlocked = "the breaker logged a transition while holding its lock";
        seawall_test_support::watchdog(deadlocked, move || {
            let failing = Arc::new(Mutex::new(false));
            tracing::subscriber::with_default(subscriber, || {
                let mut svc = layer.layer(supplier(Arc::clone(&failing)));
                runtime().block_on(drive(&mut svc, &failing));
            });
        });
        // The read made while the trip was logged saw the breaker open.
        assert!(capture.states_read.lock().unwrap().contains(&State::Open));
    }

    #[test]
    fn transitions_and_rejections_are_logged() {
        let capture = Capture::default();
        let failing = Arc::new(Mutex::new(false));
        tracing::subscriber::with_default(capture.clone(), || {
            let layer = CircuitBreakerLayer::builder("quotes")
                .jitter(0.0)
                .build()
                .unwrap();
            let mut svc = layer.layer(supplier(Arc::clone(&failing)));
            runtime().block_on(drive(&mut svc, &failing));
        });
        let events = capture.events.lock().unwrap();
        let opened: Vec<_> = events
            .iter()
            .filter(|(_, f)| f.contains("to=\"open\""))
            .collect();
        assert_eq!(opened.len(), 1, "{events:?}");
        assert_eq!(opened[0].0, Level::WARN);
        assert!(opened[0].1.contains("name=\"quotes\""));
        assert!(opened[0].1.contains("cause=\"failure_rate\""));
        let rejected: Vec<_> = events
            .iter()
            .filter(|(level, f)| *level == Level::DEBUG && f.contains("call rejected"))
            .collect();
        assert_eq!(rejected.len(), 7, "{events:?}");
        // An open breaker's rejection names the wait.
        assert!(rejected.iter().all(|(_, f)| f.contains("retry_after_ms=")));
    }

    /// A forced-open rejection carries no retry-after (only an operator ends it),
    /// so its log line promises none.
    #[test]
    fn a_forced_open_rejection_is_logged_without_a_retry_after() {
        let capture = Capture::default();
        tracing::subscriber::with_default(capture.clone(), || {
            let layer = CircuitBreakerLayer::builder("quotes")
                .jitter(0.0)
                .build()
                .unwrap();
            let mut svc = layer.layer(supplier(Arc::new(Mutex::new(false))));
            runtime().block_on(async {
                // Readied while closed, then forced open: `call` decides.
                let ready = svc.ready().await.unwrap();
                layer.handle().force(Forced::Open);
                let first = ready.call(http::Request::new(())).await;
                // Readied while forced open: `poll_ready` already saw it.
                let second = svc.ready().await.unwrap().call(http::Request::new(()));
                for err in [first.unwrap_err(), second.await.unwrap_err()] {
                    let open = find_rejection(&*err).expect("a rejection");
                    assert_eq!(open.retry_after(), None);
                }
            });
        });
        let events = capture.events.lock().unwrap();
        let rejected: Vec<_> = events
            .iter()
            .filter(|(_, f)| f.contains("call rejected"))
            .collect();
        assert_eq!(rejected.len(), 2, "{events:?}");
        assert!(
            rejected.iter().all(|(_, f)| !f.contains("retry_after_ms")),
            "{events:?}"
        );
    }
}
