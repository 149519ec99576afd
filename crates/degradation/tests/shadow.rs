//! Shadow mode: the same requests, once enforcing and once in shadow. The shadow
//! run serves every request at the best level, counts exactly the requests the
//! enforcing run served lower (counted here from the answers), and its machine
//! goes through the same levels.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use seawall_core::BoxError;
use seawall_degradation::{DegradationLayer, Fixed};
use tokio::time::{advance, Instant};
use tower::{service_fn, Layer, ServiceExt};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The best level fails from 2 s to 12 s after the start, whoever calls it, and
/// for one request at 14 s, 15 s and 16 s (while the machine probes it: a probe
/// that fails restarts the recovery, a request served lower meanwhile must not).
fn full_is_down(start: Instant) -> bool {
    let t = Instant::now().saturating_duration_since(start);
    (ms(2_000)..ms(12_000)).contains(&t)
        || [14_000, 15_000, 16_000]
            .iter()
            .any(|&at| (ms(at)..ms(at + 100)).contains(&t))
}

#[derive(Debug, Default)]
struct Run {
    /// Requests answered by the best level, by the lower one, and failed.
    full: u64,
    message: u64,
    failed: u64,
    /// The level in force after each request.
    levels: Vec<usize>,
    shadow_rejections: u64,
}

async fn drive(shadow: bool) -> Run {
    let start = Instant::now();
    let full = service_fn(move |(): ()| async move {
        if full_is_down(start) {
            Err::<&'static str, BoxError>("provider down".into())
        } else {
            Ok("full")
        }
    });
    let layer = DegradationLayer::builder("answers")
        .inner_level("full")
        .level("message", Fixed::new("message"))
        .consecutive_failures(3)
        .min_dwell(ms(10_000))
        .probe_ratio(0.5)
        .probe_window(Duration::ZERO)
        .probe_successes_to_recover(6)
        .seed(7)
        .shadow(shadow)
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(full);
    let mut run = Run::default();
    // One request every 250 ms for 30 s.
    for _ in 0..120 {
        match svc.clone().oneshot(()).await {
            Ok("full") => run.full += 1,
            Ok("message") => run.message += 1,
            Ok(other) => panic!("{other}"),
            Err(_) => run.failed += 1,
        }
        run.levels.push(handle.level().index);
        advance(ms(250)).await;
    }
    run.shadow_rejections = handle.snapshot().shadow_rejections;
    run
}

#[tokio::test(start_paused = true)]
async fn shadow_counts_exactly_what_enforcement_serves_lower_and_serves_all_at_the_best_level() {
    let enforcing = drive(false).await;
    let shadow = drive(true).await;

    // The script falls, dwells, probes and climbs back.
    assert!(enforcing.message > 0, "{enforcing:?}");
    assert!(enforcing.levels.contains(&1) && enforcing.levels.last() == Some(&0));
    assert_eq!(enforcing.shadow_rejections, 0);

    assert_eq!(shadow.message, 0, "{shadow:?}");
    assert_eq!(shadow.shadow_rejections, enforcing.message);
    assert_eq!(shadow.levels, enforcing.levels);
    // What was not served lower went to the best level in both runs.
    assert_eq!(
        shadow.full + shadow.failed,
        enforcing.full + enforcing.failed + enforcing.message
    );
}

#[tokio::test(start_paused = true)]
async fn switching_shadow_at_run_time_takes_effect_on_the_next_request_and_force_is_obeyed() {
    let layer = DegradationLayer::builder("answers")
        .inner_level("full")
        .level("message", Fixed::new("message"))
        .build()
        .unwrap();
    let handle = layer.handle();
    let svc = layer.layer(service_fn(|(): ()| async { Ok::<_, BoxError>("full") }));
    handle.set_floor("message").unwrap();
    assert_eq!(svc.clone().oneshot(()).await.unwrap(), "message");

    handle.set_shadow(true).unwrap();
    assert!(handle.is_shadow());
    assert_eq!(svc.clone().oneshot(()).await.unwrap(), "full");
    let s = handle.snapshot();
    assert!(s.shadow);
    assert_eq!((s.level_name.as_str(), s.shadow_rejections), ("message", 1));

    // An operator's forced level is served even in shadow mode.
    handle.force("message").unwrap();
    assert_eq!(svc.clone().oneshot(()).await.unwrap(), "message");
    handle.release();
    assert_eq!(svc.clone().oneshot(()).await.unwrap(), "full");

    handle.set_shadow(false).unwrap();
    assert_eq!(svc.clone().oneshot(()).await.unwrap(), "message");
    handle.set_shadow(true).unwrap();
    handle.revert();
    assert!(!handle.is_shadow());
    assert_eq!(handle.snapshot().shadow_rejections, 2);
}
