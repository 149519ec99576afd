//! Shadow mode: the same sequence of calls, once enforcing and once in shadow. The
//! shadow run must reject nothing, count as shadow rejections exactly the calls the
//! enforcing run turned away (counted here from its errors), and go through the
//! same states: what it lets through never moves the machine.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use seawall_circuit_breaker::{CircuitBreakerLayer, Forced, State};
use seawall_core::{BoxError, CircuitOpen};
use tokio::time::{advance, Instant};
use tokio_test::task;
use tower::{service_fn, Layer, Service, ServiceExt};

/// What the dependency answers for one call, and how long it takes.
#[derive(Debug, Clone, Copy)]
struct Call {
    /// When the call is made, from the start.
    at_ms: u64,
    fail: bool,
    latency_ms: u64,
}

const fn call(at_ms: u64, fail: bool, latency_ms: u64) -> Call {
    Call {
        at_ms,
        fail,
        latency_ms,
    }
}

/// Trip on three failures, open 10 s, one probe, then ramp up over 4 s from half
/// the calls. Failures while open, probe slots taken by a slow probe, the ramp
/// turning calls away, a second trip, a failed probe.
fn script() -> Vec<Call> {
    let mut calls = vec![
        call(0, true, 0),
        call(100, true, 0),
        call(200, true, 0), // trips: open until 10.2 s
        call(1_000, false, 0),
        call(2_000, true, 0),
        call(3_000, false, 50),
        call(10_300, false, 2_000), // the probe, slow
        call(10_500, false, 0),     // probe slot taken
        call(11_000, true, 0),      // probe slot taken
        call(11_500, false, 3_000), // probe slot taken, ends after the close
    ];
    // The probe closes at 12.3 s; the ramp admits a growing share until 16.3 s.
    // Three failures in a row among them: the ramp turns some away, so enforcing
    // sees fewer than three and stays closed; a shadow run must not count the
    // ones it lets through either.
    for i in 0..12 {
        calls.push(call(12_400 + i * 100, (2..5).contains(&i), 10));
    }
    calls.extend([
        call(17_000, true, 0),
        call(17_100, true, 0),
        call(17_200, true, 0), // trips again (open 10 s)
        call(17_300, false, 0),
        call(27_300, true, 0), // the probe fails: open again
        call(27_400, false, 0),
    ]);
    calls
}

type Fut = Pin<Box<dyn Future<Output = Result<&'static str, BoxError>> + Send>>;

/// What one run saw: the rejections by cause (from the errors), the calls that
/// reached the dependency, and the state after each call was made.
#[derive(Debug, Default)]
struct Run {
    rejected: BTreeMap<&'static str, u64>,
    reached: u64,
    states: Vec<State>,
    shadow_rejections: u64,
}

async fn drive(shadow: bool) -> Run {
    let layer = CircuitBreakerLayer::builder("supplier")
        .jitter(0.0)
        .consecutive_failures(3)
        .open_for(Duration::from_secs(10))
        .ramp(Duration::from_secs(4), 0.5)
        .shadow(shadow)
        .build()
        .unwrap();
    let handle = layer.handle();
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = reached.clone();
    let mut svc = layer.layer(service_fn(move |c: Call| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(c.latency_ms)).await;
            if c.fail {
                Err::<&'static str, BoxError>("supplier down".into())
            } else {
                Ok("quote")
            }
        }
    }));
    let start = Instant::now();
    let mut run = Run::default();
    let mut in_flight: Vec<task::Spawn<Fut>> = Vec::new();
    let finish = |run: &mut Run, result: Result<&'static str, BoxError>| {
        if let Err(e) = result {
            if let Some(open) = e.downcast_ref::<CircuitOpen>() {
                *run.rejected.entry(open.cause().as_str()).or_default() += 1;
            }
        }
    };
    let poll_all = |run: &mut Run, in_flight: &mut Vec<task::Spawn<Fut>>| {
        in_flight.retain_mut(|t| match t.poll() {
            std::task::Poll::Ready(result) => {
                finish(run, result);
                false
            }
            std::task::Poll::Pending => true,
        });
    };
    for c in script() {
        let due = start + Duration::from_millis(c.at_ms);
        // Step the clock through the calls in flight, so each ends at its instant.
        while Instant::now() < due {
            advance(Duration::from_millis(10).min(due - Instant::now())).await;
            poll_all(&mut run, &mut in_flight);
        }
        let fut: Fut = Box::pin(svc.ready().await.unwrap().call(c));
        in_flight.push(task::spawn(fut));
        poll_all(&mut run, &mut in_flight);
        run.states.push(handle.state());
    }
    while !in_flight.is_empty() {
        advance(Duration::from_millis(10)).await;
        poll_all(&mut run, &mut in_flight);
    }
    run.reached = reached.load(std::sync::atomic::Ordering::SeqCst);
    run.shadow_rejections = handle.snapshot().counters.shadow_rejections;
    run
}

#[tokio::test(start_paused = true)]
async fn shadow_counts_exactly_what_enforcement_rejects_and_rejects_nothing() {
    let enforcing = drive(false).await;
    let shadow = drive(true).await;
    let total = script().len() as u64;

    // The script exercises every cause a shadow breaker lets through.
    for cause in ["open", "probe_slots_full", "ramping"] {
        assert!(
            enforcing.rejected.get(cause).copied().unwrap_or(0) > 0,
            "the script never rejected for {cause}: {:?}",
            enforcing.rejected
        );
    }
    let rejected: u64 = enforcing.rejected.values().sum();
    assert_eq!(enforcing.reached, total - rejected);
    assert_eq!(enforcing.shadow_rejections, 0);

    assert!(shadow.rejected.is_empty(), "{:?}", shadow.rejected);
    assert_eq!(shadow.reached, total);
    assert_eq!(shadow.shadow_rejections, rejected);
    assert_eq!(shadow.states, enforcing.states);
}

#[tokio::test(start_paused = true)]
async fn switching_shadow_at_run_time_takes_effect_on_the_next_call() {
    let layer = CircuitBreakerLayer::builder("supplier")
        .jitter(0.0)
        .consecutive_failures(1)
        .open_for(Duration::from_secs(10))
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(service_fn(|fail: bool| async move {
        if fail {
            Err::<&'static str, BoxError>("down".into())
        } else {
            Ok("quote")
        }
    }));
    assert!(svc.ready().await.unwrap().call(true).await.is_err());
    assert_eq!(handle.state(), State::Open);
    let open = svc.ready().await.unwrap().call(false).await.unwrap_err();
    assert!(open.downcast_ref::<CircuitOpen>().is_some());

    handle.set_shadow(true);
    assert!(handle.is_shadow());
    assert!(handle.config().shadow);
    assert_eq!(
        svc.ready().await.unwrap().call(false).await.unwrap(),
        "quote"
    );
    // A success let through while open is no probe: still open.
    assert_eq!(handle.state(), State::Open);
    let snapshot = handle.snapshot();
    assert!(snapshot.shadow);
    assert_eq!(snapshot.counters.shadow_rejections, 1);
    assert_eq!(snapshot.counters.short_circuited, 1);

    handle.set_shadow(false);
    let open = svc.ready().await.unwrap().call(false).await.unwrap_err();
    assert!(open.downcast_ref::<CircuitOpen>().is_some());

    // `revert` returns to the built configuration, shadow included.
    handle.set_shadow(true);
    handle.revert();
    assert!(!handle.is_shadow());
    assert_eq!(handle.snapshot().counters.shadow_rejections, 1);
    assert_eq!(handle.snapshot().counters.short_circuited, 2);
}

#[tokio::test(start_paused = true)]
async fn forced_open_rejects_even_in_shadow() {
    let layer = CircuitBreakerLayer::builder("supplier")
        .jitter(0.0)
        .shadow(true)
        .build()
        .unwrap();
    let handle = layer.handle();
    let mut svc = layer.layer(service_fn(|(): ()| async { Ok::<_, BoxError>("quote") }));
    handle.force(Forced::Open);
    let e = svc.ready().await.unwrap().call(()).await.unwrap_err();
    assert!(e.downcast_ref::<CircuitOpen>().is_some());
    assert_eq!(handle.snapshot().counters.shadow_rejections, 0);
    handle.reset();
    assert_eq!(svc.ready().await.unwrap().call(()).await.unwrap(), "quote");
}

#[tokio::test(start_paused = true)]
async fn a_keyed_layer_shadows_every_key_and_switches_them_all() {
    let layer = CircuitBreakerLayer::builder("suppliers")
        .jitter(0.0)
        .consecutive_failures(1)
        .shadow(true)
        .keyed(|(host, _fail): &(&'static str, bool)| *host)
        .max_keys(8)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(service_fn(|(_, fail): (&'static str, bool)| async move {
        if fail {
            Err::<&'static str, BoxError>("down".into())
        } else {
            Ok("quote")
        }
    }));
    assert!(svc.clone().oneshot(("a", true)).await.is_err());
    let a = handle.get(&"a").unwrap();
    assert_eq!(a.state(), State::Open);
    // Open, in shadow: through, and counted on that key's breaker.
    assert_eq!(svc.clone().oneshot(("a", false)).await.unwrap(), "quote");
    assert_eq!(a.snapshot().counters.shadow_rejections, 1);
    assert_eq!(a.state(), State::Open);

    // Enforcing for every key, present and future.
    let mut config = handle.config();
    config.shadow = false;
    handle.reconfigure(config).unwrap();
    let e = svc.clone().oneshot(("a", false)).await.unwrap_err();
    assert!(e.downcast_ref::<CircuitOpen>().is_some());
    assert!(svc.clone().oneshot(("b", true)).await.is_err());
    assert!(svc.clone().oneshot(("b", false)).await.is_err());
    assert!(!handle.get(&"b").unwrap().is_shadow());
}
