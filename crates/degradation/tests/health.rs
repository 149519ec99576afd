//! The health monitor with paused time: checks at 0 s, 10 s, 20 s...; the test looks
//! in between (at 5 s, 15 s, ...) so it never races a check.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seawall_degradation::features::{Feature, FeatureMode, FeaturePlan, Features, Tier};
use seawall_degradation::health::{CheckConfig, HealthMonitor, HealthStatus};
use seawall_degradation::{DegradationLayer, Fixed};
use tower::{service_fn, Layer, ServiceExt};

const S: Duration = Duration::from_secs(1);

/// A check whose result the test sets, counting its runs.
#[derive(Clone, Default)]
struct Switch {
    failing: Arc<AtomicBool>,
    runs: Arc<AtomicUsize>,
}

impl Switch {
    fn fail(&self, yes: bool) {
        self.failing.store(yes, Ordering::SeqCst);
    }
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
    fn check(
        &self,
    ) -> impl FnMut() -> std::future::Ready<Result<(), &'static str>> + Send + 'static {
        let s = self.clone();
        move || {
            s.runs.fetch_add(1, Ordering::SeqCst);
            std::future::ready(if s.failing.load(Ordering::SeqCst) {
                Err("connection refused")
            } else {
                Ok(())
            })
        }
    }
}

fn config() -> CheckConfig {
    CheckConfig {
        interval: 10 * S,
        timeout: 2 * S,
        degraded_after: 2,
        unhealthy_after: 4,
    }
}

#[tokio::test(start_paused = true)]
async fn statuses_follow_the_consecutive_failure_thresholds() {
    let switch = Switch::default();
    let monitor = HealthMonitor::builder()
        .check("provider", config(), switch.check())
        .start()
        .unwrap();
    assert_eq!(
        monitor.report().status("provider"),
        Some(HealthStatus::Unknown)
    );
    assert!(!monitor.report().is_usable("provider"));
    tokio::time::sleep(5 * S).await;
    assert_eq!(switch.runs(), 1, "the first check runs at start");
    assert_eq!(
        monitor.report().status("provider"),
        Some(HealthStatus::Healthy)
    );

    switch.fail(true);
    let expected = [
        HealthStatus::Healthy, // 1 failure < degraded_after
        HealthStatus::Degraded,
        HealthStatus::Degraded,
        HealthStatus::Unhealthy, // 4 failures
        HealthStatus::Unhealthy,
    ];
    for (i, status) in expected.into_iter().enumerate() {
        tokio::time::sleep(10 * S).await;
        let report = monitor.report();
        let dep = report.get("provider").unwrap();
        assert_eq!(dep.status, status, "after {} failures", i + 1);
        assert_eq!(dep.consecutive_failures as usize, i + 1);
        assert_eq!(dep.last_error.as_deref(), Some("connection refused"));
        // Degraded still counts as usable; unhealthy does not.
        assert_eq!(
            report.is_usable("provider"),
            status != HealthStatus::Unhealthy
        );
    }
    switch.fail(false);
    tokio::time::sleep(10 * S).await;
    let report = monitor.report();
    assert_eq!(report.status("provider"), Some(HealthStatus::Healthy));
    assert_eq!(report.get("provider").unwrap().consecutive_failures, 0);
    assert_eq!(report.usable().collect::<Vec<_>>(), ["provider"]);
}

#[tokio::test(start_paused = true)]
async fn a_check_that_overruns_its_timeout_is_a_failure() {
    let monitor = HealthMonitor::builder()
        .check(
            "slow",
            CheckConfig {
                degraded_after: 1,
                ..config()
            },
            || async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok::<(), &'static str>(())
            },
        )
        .start()
        .unwrap();
    tokio::time::sleep(5 * S).await;
    let report = monitor.report();
    let dep = report.get("slow").unwrap();
    assert_eq!(dep.status, HealthStatus::Degraded);
    assert_eq!(dep.latency, Some(2 * S));
    assert!(dep.last_error.as_deref().unwrap().contains("timed out"));
}

#[tokio::test(start_paused = true)]
async fn stop_ends_the_checks_and_keeps_the_last_report() {
    let switch = Switch::default();
    let mut monitor = HealthMonitor::builder()
        .check("provider", config(), switch.check())
        .start()
        .unwrap();
    let reports = monitor.subscribe();
    tokio::time::sleep(25 * S).await;
    assert_eq!(switch.runs(), 3);
    assert!(monitor.is_running());
    monitor.stop();
    assert!(!monitor.is_running());
    tokio::time::sleep(100 * S).await;
    assert_eq!(switch.runs(), 3);
    assert_eq!(
        monitor.report().status("provider"),
        Some(HealthStatus::Healthy)
    );
    // The tasks, and the report sender they held, are gone; the last report stays.
    assert!(reports.has_changed().is_err());
    assert_eq!(
        reports.borrow().status("provider"),
        Some(HealthStatus::Healthy)
    );
}

#[tokio::test(start_paused = true)]
async fn dropping_the_monitor_ends_its_tasks() {
    let switch = Switch::default();
    let token = Arc::new(());
    let held = token.clone();
    let mut check = switch.check();
    let monitor = HealthMonitor::builder()
        .check("provider", config(), move || {
            let _held = &held;
            check()
        })
        .check("other", config(), switch.check())
        .start()
        .unwrap();
    tokio::time::sleep(15 * S).await;
    assert_eq!(switch.runs(), 4);
    assert_eq!(Arc::strong_count(&token), 2, "the task holds the check");
    drop(monitor);
    // The aborted tasks are dropped, with their checks, at the runtime's next turn.
    tokio::task::yield_now().await;
    assert_eq!(Arc::strong_count(&token), 1, "the task ended");
    tokio::time::sleep(100 * S).await;
    assert_eq!(switch.runs(), 4);
}

#[tokio::test(start_paused = true)]
async fn the_monitor_drives_a_degradation_floor() {
    let switch = Switch::default();
    let layer = DegradationLayer::builder("chat")
        .level("reduced", Fixed::new("short"))
        .level("message", Fixed::new("sorry"))
        .seed(3)
        .build()
        .unwrap();
    let handle = layer.handle();
    let reduced = handle.level_index("reduced").unwrap();
    let _monitor = HealthMonitor::builder()
        .check("provider-a", config(), switch.check())
        .drive_floor(handle.clone(), move |report| {
            (!report.is_usable("provider-a")).then_some(reduced)
        })
        .start()
        .unwrap();
    let full = service_fn(|_: ()| async { Ok::<_, std::convert::Infallible>("full") });
    let svc = layer.layer(full);

    tokio::time::sleep(5 * S).await;
    assert_eq!(handle.level().index, 0);
    assert_eq!(handle.snapshot().state.floor, None);
    assert_eq!(svc.clone().oneshot(()).await.unwrap(), "full");

    // Unhealthy after the 4th failure (at 40 s): traffic moves off before users see it.
    switch.fail(true);
    tokio::time::sleep(30 * S).await;
    assert_eq!(handle.level().index, 0);
    tokio::time::sleep(10 * S).await;
    assert_eq!(handle.level().index, 1);
    assert_eq!(handle.snapshot().state.floor, Some(1));
    assert_eq!(svc.clone().oneshot(()).await.unwrap(), "short");

    // Healthy again: the floor goes, but the level climbs back only through probes.
    switch.fail(false);
    tokio::time::sleep(10 * S).await;
    assert_eq!(handle.snapshot().state.floor, None);
    assert_eq!(handle.level().index, 1);
}

#[tokio::test(start_paused = true)]
async fn the_monitor_publishes_feature_modes_for_handlers() {
    let payments = Switch::default();
    let recs = Switch::default();
    let plan = FeaturePlan::new([
        Feature::new("checkout", Tier::Critical, ["payments"]),
        Feature::new("recommendations", Tier::NiceToHave, ["recs", "payments"]),
    ])
    .unwrap();
    let monitor = HealthMonitor::builder()
        .check("payments", config(), payments.check())
        .check("recs", config(), recs.check())
        .plan(plan)
        .start()
        .unwrap();
    let layer = monitor.features_layer().unwrap();
    let handler = service_fn(|req: http::Request<()>| async move {
        let f = req.extensions().get::<Features>().cloned().unwrap();
        Ok::<_, std::convert::Infallible>((f.mode("checkout"), f.mode("recommendations")))
    });
    let svc = layer.layer(handler);
    // Before any check, nothing is known to be healthy.
    let (checkout, recommendations) = svc.clone().oneshot(http::Request::new(())).await.unwrap();
    assert_eq!(checkout, Some(FeatureMode::Degraded));
    assert_eq!(recommendations, Some(FeatureMode::Disabled));

    use FeatureMode::{Degraded, Disabled, Normal};
    // What starts failing, how long it has to show, then checkout's and
    // recommendations' modes.
    for (failing, wait, modes) in [
        (None, 5 * S, (Normal, Normal)),
        (Some(&recs), 40 * S, (Normal, Disabled)),
        (Some(&payments), 40 * S, (Degraded, Disabled)),
    ] {
        if let Some(dependency) = failing {
            dependency.fail(true);
        }
        tokio::time::sleep(wait).await;
        let got = svc.clone().oneshot(http::Request::new(())).await.unwrap();
        assert_eq!(got, (Some(modes.0), Some(modes.1)), "after {wait:?}");
    }
    assert!(monitor.features().is_some());
}

#[tokio::test(start_paused = true)]
async fn the_builder_validates() {
    let ok = || async { Ok::<(), &'static str>(()) };
    let e = HealthMonitor::builder().start().unwrap_err();
    assert_eq!(e.field(), "checks");
    let e = HealthMonitor::builder()
        .check("a", config(), ok)
        .check("a", config(), ok)
        .start()
        .unwrap_err();
    assert_eq!(e.field(), "checks");
    let refused = |bad: CheckConfig| {
        let e = HealthMonitor::builder().check("a", bad, ok).start();
        e.unwrap_err().field().to_owned()
    };
    let no_interval = CheckConfig {
        interval: Duration::ZERO,
        ..config()
    };
    assert_eq!(refused(no_interval), "checks.a.interval");
    let one_failure = CheckConfig {
        unhealthy_after: 1,
        ..config()
    };
    assert_eq!(refused(one_failure), "checks.a.unhealthy_after");
}

#[test]
fn starting_outside_a_runtime_is_an_error_not_a_panic() {
    let e = HealthMonitor::builder()
        .check("a", config(), || async { Ok::<(), &'static str>(()) })
        .start()
        .unwrap_err();
    assert_eq!(e.field(), "runtime");
}
