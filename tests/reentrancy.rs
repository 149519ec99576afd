//! A tracing subscriber is user code: from inside any seawall event it may read back
//! the layer that emitted it (its handle's snapshot, or the policies' snapshot)
//! without deadlocking the request or the operator action that emitted the event.
//! One scenario per crate, each with a subscriber that reads on every event.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use seawall::bulkhead::{BulkheadConfig, BulkheadLayer};
use seawall::circuit_breaker::{CircuitBreakerLayer, Forced, State};
use seawall::config::Policies;
use seawall::core::BoxError;
use seawall::degradation::{DegradationLayer, Fixed};
use seawall::fallback::{FallbackLayer, Rejections};
use seawall::ServiceBuilderExt;
use tower::{service_fn, Layer, Service, ServiceBuilder, ServiceExt};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Counts seawall events, and runs `read` inside each one.
#[derive(Clone)]
struct Reading {
    read: Arc<dyn Fn() + Send + Sync>,
    events: Arc<AtomicUsize>,
}

impl Subscriber for Reading {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("seawall")
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {
        self.events.fetch_add(1, Ordering::Relaxed);
        (self.read)();
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Runs `scenario` on its own thread with a subscriber that calls `read` in every
/// event; the number of events seen. The wait is a watchdog, not a timing check:
/// an event emitted under a lock that `read` needs deadlocks the scenario.
fn with_reader(
    read: impl Fn() + Send + Sync + 'static,
    scenario: impl FnOnce() + Send + 'static,
) -> usize {
    let events = Arc::new(AtomicUsize::new(0));
    let subscriber = Reading {
        read: Arc::new(read),
        events: Arc::clone(&events),
    };
    let deadlocked = "deadlock: an event was emitted under a lock its subscriber needed";
    seawall_test_support::watchdog(deadlocked, move || {
        tracing::subscriber::with_default(subscriber, scenario);
    });
    events.load(Ordering::Relaxed)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    seawall_test_support::paused_runtime().block_on(f)
}

type Req = http::Request<()>;
type Res = http::Response<()>;

fn req() -> Req {
    http::Request::new(())
}

fn failing() -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone + Send {
    service_fn(|_: Req| async { Err::<Res, BoxError>("supplier: 503".into()) })
}

/// A dependency that never answers.
fn hanging() -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone + Send {
    service_fn(|_: Req| std::future::pending::<Result<Res, BoxError>>())
}

/// Sends `n` requests through `svc`, one after the other, whatever they answer.
fn send<S>(svc: &S, n: usize)
where
    S: Service<Req> + Clone,
{
    block_on(async {
        for _ in 0..n {
            let _ = svc.clone().oneshot(req()).await;
        }
    });
}

/// `call`, polled once: it must be waiting (holding what it was admitted to).
fn started<F: Future>(call: F) -> Pin<Box<F>> {
    let mut call = Box::pin(call);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(call.as_mut().poll(&mut cx).is_pending());
    call
}

/// `config` with room for `max_concurrent` calls.
fn wider(config: BulkheadConfig, max_concurrent: usize) -> BulkheadConfig {
    BulkheadConfig {
        max_concurrent,
        ..config
    }
}

/// A reader for [`with_reader`]: `read` on a clone of `handle`.
fn reading<H, T>(
    handle: &H,
    read: impl Fn(&H) -> T + Send + Sync + 'static,
) -> impl Fn() + Send + Sync
where
    H: Clone + Send + Sync + 'static,
{
    let handle = handle.clone();
    move || drop(read(&handle))
}

#[test]
fn breaker_operator_actions_while_a_subscriber_reads_the_breaker() {
    let layer = CircuitBreakerLayer::builder("quotes")
        .consecutive_failures(2)
        .build()
        .unwrap();
    let handle = layer.handle();
    let events = with_reader(reading(&handle, |h| h.snapshot()), move || {
        send(&layer.layer(failing()), 3);
        assert_eq!(handle.state(), State::Open);
        handle.force(Forced::Closed);
        handle.force(Forced::Open);
        handle.disable();
        handle.reset();
        handle.reconfigure(handle.config()).unwrap();
        handle.revert();
    });
    assert!(events >= 5, "{events} events");
}

#[test]
fn keyed_breaker_reconfigured_while_a_subscriber_reads_every_key() {
    let layer = CircuitBreakerLayer::builder("hosts")
        .consecutive_failures(1)
        .keyed(|r: &Req| r.uri().path().to_owned())
        .max_keys(8)
        .build()
        .unwrap();
    let handle = layer.handle();
    let events = with_reader(reading(&handle, |h| h.snapshots()), move || {
        send(&layer.layer(failing()), 2);
        handle.reconfigure(handle.config()).unwrap();
        handle.revert().unwrap();
    });
    assert!(events >= 2, "{events} events");
}

#[test]
fn bulkhead_rejections_and_changes_while_a_subscriber_reads_the_bulkhead() {
    let layer = BulkheadLayer::builder("freight")
        .max_concurrent(1)
        .max_queue(0)
        .build()
        .unwrap();
    let handle = layer.handle();
    let events = with_reader(reading(&handle, |h| h.snapshot()), move || {
        let svc = layer.layer(hanging());
        block_on(async {
            let _held = started(svc.clone().oneshot(req()));
            assert!(svc.clone().oneshot(req()).await.is_err());
        });
        handle.reconfigure(wider(handle.config(), 2)).unwrap();
        handle.revert();
    });
    assert!(events >= 2, "{events} events");
}

#[test]
fn bulkhead_events_while_subscribers_read_and_steer_the_bulkhead() {
    use seawall::bulkhead::{BulkheadEvent, LimitCause};
    let layer = BulkheadLayer::builder("freight")
        .max_concurrent(2)
        .max_queue(0)
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut events = handle.subscribe();
    let reader = handle.clone();
    // Inside every log line: read the bulkhead and take a subscription of its own.
    let traced = with_reader(
        move || {
            drop(reader.snapshot());
            drop(reader.subscribe());
        },
        move || {
            let svc = layer.layer(hanging());
            block_on(async {
                let a = started(svc.clone().oneshot(req()));
                let b = started(svc.clone().oneshot(req()));
                // Saturated, then relieved once one of the two slots is free.
                assert!(svc.clone().oneshot(req()).await.is_err());
                drop(a);
                drop(b);
            });
            handle.force(1).unwrap();
            handle.release();
            // A broadcast subscriber steering the bulkhead from what it receives.
            let mut kinds = Vec::new();
            while let Ok(event) = events.try_recv() {
                kinds.push(match event {
                    BulkheadEvent::Saturated { .. } => "saturated",
                    BulkheadEvent::Relieved { .. } => {
                        handle.force(2).unwrap();
                        "relieved"
                    }
                    BulkheadEvent::LimitChanged {
                        cause: LimitCause::Forced,
                        ..
                    } => "forced",
                    BulkheadEvent::LimitChanged {
                        cause: LimitCause::Released,
                        ..
                    } => {
                        handle.release();
                        "released"
                    }
                    _ => "other",
                });
            }
            assert_eq!(
                kinds,
                [
                    "saturated",
                    "relieved",
                    "forced",
                    "released",
                    "forced",
                    "released"
                ]
            );
            assert!(!handle.snapshot().limit_forced);
        },
    );
    // Saturated, relieved, and a force and a release twice.
    assert!(traced >= 6, "{traced} events");
}

#[test]
fn keyed_bulkhead_reconfigured_while_a_subscriber_reads_every_key() {
    let layer = BulkheadLayer::builder("hosts")
        .max_concurrent(1)
        .keyed(|r: &Req| r.uri().path().to_owned())
        .build()
        .unwrap();
    let handle = layer.handle();
    let events = with_reader(reading(&handle, |h| h.snapshot()), move || {
        let ok = service_fn(|_: Req| async { Ok::<Res, BoxError>(http::Response::new(())) });
        let svc = layer.layer(ok);
        block_on(async { svc.clone().oneshot(req()).await.unwrap() });
        handle.reconfigure(wider(handle.config(), 3)).unwrap();
        handle.revert();
    });
    assert!(events >= 1, "{events} events");
}

#[test]
fn degradation_changes_and_controls_while_a_subscriber_reads_the_layer() {
    let layer = DegradationLayer::builder("quotes")
        .consecutive_failures(2)
        .level("canned", Fixed::new(http::Response::new(())))
        .build()
        .unwrap();
    let handle = layer.handle();
    let events = with_reader(reading(&handle, |h| h.snapshot()), move || {
        send(&layer.layer(failing()), 2);
        assert_eq!(handle.level().index, 1);
        handle.force(0).unwrap();
        handle.release();
        handle.set_floor("canned").unwrap();
        handle.clear_floor();
        handle.reconfigure(handle.config()).unwrap();
        handle.revert();
    });
    // The level change, then one event per control at least.
    assert!(events >= 7, "{events} events");
}

#[test]
fn fallback_serving_and_controls_while_a_subscriber_reads_the_fallback() {
    let layer = FallbackLayer::builder("freight")
        .on_rejections(Rejections::ALL)
        .on_error::<seawall::core::CircuitOpen>()
        .value("no quote".to_owned())
        .unmarked()
        .build()
        .unwrap();
    let handle = layer.handle();
    let events = with_reader(reading(&handle, |h| h.snapshot()), move || {
        let open = service_fn(|_: Req| async {
            Err::<String, BoxError>(Box::new(seawall::core::CircuitOpen::new(
                "supplier".into(),
                Duration::from_secs(1),
            )))
        });
        let svc = layer.layer(open);
        block_on(async {
            assert_eq!(svc.clone().oneshot(req()).await.unwrap(), "no quote");
        });
        handle.force();
        handle.release();
        handle.disable();
        handle.enable();
        handle.reconfigure(handle.config()).unwrap();
        handle.revert();
    });
    assert!(events >= 1, "{events} events");
}

const POLICIES: &str = support::freight_policy!();

#[test]
fn policies_apply_refuse_and_revert_while_a_subscriber_reads_the_policies() {
    let policies = Policies::from_toml(POLICIES).unwrap();
    let reader = policies.clone();
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&reads);
    let events = with_reader(
        move || {
            let snapshot = reader.snapshot();
            assert!(snapshot.policies.contains_key("freight"));
            counted.fetch_add(1, Ordering::Relaxed);
        },
        move || {
            let _svc = ServiceBuilder::new()
                .bulkhead(policies.bulkhead("freight").unwrap())
                .circuit_breaker(policies.circuit_breaker("freight", |b| b).unwrap())
                .service(failing());
            let changed = POLICIES.replace("open_for = \"10s\"", "open_for = \"30s\"");
            policies.apply_toml(&changed).unwrap();
            // Adding a policy cannot be done at run time: refused, with an event.
            let grown = format!("{changed}\n[policies.other]\ndeadline = \"1s\"\n");
            assert!(policies.apply_toml(&grown).is_err());
            policies.revert();
            assert_eq!(policies.generation(), 2);
        },
    );
    // Applied, refused, reverted, and the handles' own reconfiguration events.
    assert!(events >= 3, "{events} events");
    assert_eq!(reads.load(Ordering::Relaxed), events);
}
