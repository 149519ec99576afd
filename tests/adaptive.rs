//! Adaptive bulkheads: the simulated supplier of the `adaptive` example against the
//! issue's goals, the limit gauge, and adaptive limits in policy files.
//!
//! The simulation runs in paused time and is deterministic: the same seed gives the
//! same figures on every machine. The goals are the issue's numbers, written here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../examples/adaptive/sim.rs"]
mod sim;

use std::time::Duration;

use seawall::bulkhead::adaptive::{AimdConfig, GradientConfig};
use seawall::bulkhead::{AdaptiveConfig, BulkheadConfig, BulkheadLayer, OverloadStatus};
use seawall::config::{LoadError, Policies, PolicyDocument};
use sim::{PhaseReport, Policy, Run, Scenario};
use tower::{service_fn, Layer, ServiceExt};

async fn simulate(pick: &str) -> (Run, Vec<PhaseReport>) {
    let scenario = Scenario::standard();
    let policy = sim::policies(&scenario)
        .into_iter()
        .find(|p| p.label() == pick)
        .unwrap();
    let run = sim::run(&scenario, policy, 7).await.unwrap();
    let phases = run.phases();
    (run, phases)
}

/// The issue's goals, checked one by one so a failure says which.
fn assert_meets_goals(run: &Run, phases: &[PhaseReport]) {
    let table = sim::tables(std::slice::from_ref(run));
    let s = run.scenario.service_time;
    assert_eq!(phases.len(), 3, "{table}");
    for (p, r) in phases.iter().enumerate() {
        let settled = r.settled_after.unwrap_or(Duration::MAX);
        assert!(
            settled <= Duration::from_secs(10),
            "phase {}: settled after {settled:?}\n{table}",
            p + 1
        );
        assert!(r.p99 <= 2 * s, "phase {}: p99 {:?}\n{table}", p + 1, r.p99);
        assert!(
            r.throughput >= 0.9,
            "phase {}: {:.3} of capacity\n{table}",
            p + 1,
            r.throughput
        );
    }
}

#[tokio::test(start_paused = true)]
async fn aimd_settles_within_10_s_of_every_change_then_keeps_p99_and_throughput() {
    let (run, phases) = simulate("aimd").await;
    assert_meets_goals(&run, &phases);
    assert!(run.peak_active <= 200, "never above max_limit");
}

#[tokio::test(start_paused = true)]
async fn the_gradient_settles_within_10_s_of_every_change_then_keeps_p99_and_throughput() {
    let (run, phases) = simulate("gradient").await;
    assert_meets_goals(&run, &phases);
    assert!(run.peak_active <= 200, "never above max_limit");
}

#[tokio::test(start_paused = true)]
async fn a_static_limit_too_high_lets_the_suppliers_queue_into_latency() {
    let (run, phases) = simulate("static 200").await;
    let table = sim::tables(std::slice::from_ref(&run));
    let s = run.scenario.service_time;
    // Every phase: a standing queue (never settled) and p99 beyond 2 × s.
    for r in &phases {
        assert!(r.settled_after.is_none(), "{table}");
        assert!(r.p99 > 2 * s, "{table}");
    }
    // And instant 503s when the queue overflows (c = 50 and c = 10).
    assert!(
        phases[0].unavailable > 0 && phases[1].unavailable > 0,
        "{table}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_static_limit_too_low_leaves_capacity_unused() {
    let (run, phases) = simulate("static 5").await;
    let table = sim::tables(std::slice::from_ref(&run));
    for r in &phases {
        assert!(r.throughput < 0.9, "{table}");
        assert!(r.settled_after.is_none(), "{table}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_limit_gauge_follows_the_limit_in_force() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    let layer = metrics::with_local_recorder(&recorder, || {
        BulkheadLayer::builder("gauged")
            .adaptive(AimdConfig {
                initial_limit: 10,
                ..AimdConfig::default()
            })
            .build()
            .unwrap()
            .overload(OverloadStatus::default())
    });
    let handle = layer.handle();
    let gauge = || {
        prometheus
            .render()
            .lines()
            .find(|l| l.starts_with("seawall_bulkhead_limit{"))
            .map(|l| l.rsplit(' ').next().unwrap().to_owned())
    };
    assert_eq!(gauge().as_deref(), Some("10"));
    let unavailable = service_fn(|_req: http::Request<()>| async {
        let mut res = http::Response::new(());
        *res.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        Ok::<_, seawall::BoxError>(res)
    });
    let svc = layer.layer(unavailable);
    svc.oneshot(http::Request::new(())).await.unwrap();
    assert_eq!(handle.snapshot().limit, 9);
    assert_eq!(gauge().as_deref(), Some("9"));
    handle.force(3).unwrap();
    assert_eq!(gauge().as_deref(), Some("3"));
    handle.release();
    assert_eq!(gauge().as_deref(), Some("3"));
}

// ---- in a policy file ----------------------------------------------------------

const ADAPTIVE: &str = r#"
[policies.freight.bulkhead]
queue = { max_queue = 10, max_wait = "20ms" }
adaptive = { algorithm = "aimd", initial_limit = 10, min_limit = 2, max_limit = 50, backoff = 0.8, timeout = "150ms" }

[policies.search.bulkhead]
adaptive = { algorithm = "gradient", min_limit = 4, tolerance = 0.2, min_rtt_every = "1m" }
"#;

#[test]
fn an_adaptive_section_reads_as_the_algorithms_configuration() {
    let doc = PolicyDocument::from_toml(ADAPTIVE).unwrap();
    let expected = [
        (
            "freight",
            AdaptiveConfig::Aimd(AimdConfig {
                initial_limit: 10,
                min_limit: 2,
                max_limit: 50,
                backoff: 0.8,
                timeout: Duration::from_millis(150),
                ..AimdConfig::default()
            }),
        ),
        (
            "search",
            AdaptiveConfig::Gradient(GradientConfig {
                min_limit: 4,
                tolerance: 0.2,
                min_rtt_every: Duration::from_secs(60),
                ..GradientConfig::default()
            }),
        ),
    ];
    for (policy, adaptive) in expected {
        let bulkhead = doc.policies[policy].bulkhead.unwrap();
        assert_eq!(bulkhead.adaptive, Some(adaptive), "{policy}");
    }
    // The queue beside the adaptive limit is read too.
    assert_eq!(
        doc.policies["freight"].bulkhead.unwrap().queue.max_queue,
        10
    );
    // No section, no algorithm: the fixed limit of old.
    let plain = PolicyDocument::from_toml("[policies.p.bulkhead]\nmax_concurrent = 3\n").unwrap();
    assert_eq!(plain.policies["p"].bulkhead.unwrap().adaptive, None);
}

#[test]
fn an_invalid_adaptive_setting_is_named_by_its_path() {
    let cases = [
        (
            "min_limit = 0",
            "policies.freight.bulkhead.adaptive.min_limit",
        ),
        (
            "min_limit = 9, initial_limit = 4",
            "policies.freight.bulkhead.adaptive.initial_limit",
        ),
        (
            "min_limit = 5, initial_limit = 4, max_limit = 3",
            "policies.freight.bulkhead.adaptive.max_limit",
        ),
        (
            "backoff = 1.0",
            "policies.freight.bulkhead.adaptive.backoff",
        ),
        (
            "timeout = \"0ms\"",
            "policies.freight.bulkhead.adaptive.timeout",
        ),
        (
            "sample_every = 3",
            "policies.freight.bulkhead.adaptive.sample_every",
        ),
    ];
    for (settings, field) in cases {
        let text = format!(
            "[policies.freight.bulkhead]\nadaptive = {{ algorithm = \"aimd\", {settings} }}\n"
        );
        let e = PolicyDocument::from_toml(&text).unwrap_err();
        assert!(matches!(e, LoadError::Invalid { .. }), "{settings}: {e:?}");
        assert_eq!(e.fields(), [field], "{settings}: {e}");
    }
    let text =
        "[policies.freight.bulkhead]\nadaptive = { algorithm = \"gradient\", jitter = 2.0 }\n";
    let e = PolicyDocument::from_toml(text).unwrap_err();
    assert_eq!(
        e.fields(),
        ["policies.freight.bulkhead.adaptive.jitter"],
        "{e}"
    );
}

#[test]
fn a_malformed_adaptive_section_is_refused_with_what_is_wrong() {
    for (settings, said) in [
        ("algorithm = \"vegas\"", "vegas"),
        ("algorithm = \"aimd\", min_limt = 3", "min_limt"),
        ("min_limit = 3", "algorithm"),
        ("algorithm = \"gradient\", window = \"250\"", "no unit"),
    ] {
        let text = format!("[policies.freight.bulkhead]\nadaptive = {{ {settings} }}\n");
        let e = PolicyDocument::from_toml(&text).unwrap_err();
        assert!(
            matches!(e, LoadError::Malformed { .. }),
            "{settings}: {e:?}"
        );
        let message = e.to_string();
        assert!(message.contains(said), "{settings}: {message}");
        assert!(
            e.fields()
                .iter()
                .any(|f| f.starts_with("policies.freight.bulkhead")),
            "{settings}: {e}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn policies_build_an_adaptive_bulkhead_and_change_its_algorithm_live() {
    let policies = Policies::from_toml(ADAPTIVE).unwrap();
    let layer = policies
        .bulkhead("freight")
        .unwrap()
        .overload(OverloadStatus::default());
    let handle = policies.handles("freight").unwrap().bulkhead.unwrap();
    let s = handle.snapshot();
    assert_eq!((s.limit, s.adaptive.unwrap().algorithm), (10, "aimd"));

    let overloaded = service_fn(|_req: http::Request<()>| async {
        let mut res = http::Response::new(());
        *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
        Ok::<_, seawall::BoxError>(res)
    });
    layer
        .layer(overloaded)
        .oneshot(http::Request::new(()))
        .await
        .unwrap();
    assert_eq!(handle.snapshot().limit, 8, "10 × 0.8");

    // A wider maximum: the algorithm starts again from the limit in force.
    policies
        .apply_toml(&ADAPTIVE.replace("max_limit = 50", "max_limit = 80"))
        .unwrap();
    let s = handle.snapshot();
    assert_eq!((s.limit, s.adaptive.unwrap().algorithm), (8, "aimd"));
    let BulkheadConfig { adaptive, .. } = handle.config();
    assert!(matches!(adaptive, Some(AdaptiveConfig::Aimd(c)) if c.max_limit == 80));

    // Another algorithm, live.
    policies
        .apply_toml(&ADAPTIVE.replace("algorithm = \"aimd\", initial_limit = 10, min_limit = 2, max_limit = 50, backoff = 0.8, timeout = \"150ms\"", "algorithm = \"gradient\", min_limit = 2"))
        .unwrap();
    let s = handle.snapshot();
    assert_eq!(s.adaptive.unwrap().algorithm, "gradient");
    // Back to the start-up document.
    policies.revert();
    let s = handle.snapshot();
    assert_eq!(s.adaptive.unwrap().algorithm, "aimd");

    // The snapshot and the document serialise the section as it was written.
    let json = serde_json::to_string(&policies.snapshot()).unwrap();
    assert!(json.contains(r#""adaptive":{"algorithm":"aimd""#), "{json}");
    assert!(json.contains(r#""limit":"#), "{json}");
}

#[test]
fn the_simulated_policies_are_the_documented_ones() {
    // The example's AIMD is given a timeout near the supplier's latency; the
    // gradient runs on its defaults.
    let scenario = Scenario::standard();
    let policies = sim::policies(&scenario);
    let labels: Vec<String> = policies.iter().map(Policy::label).collect();
    assert_eq!(labels, ["static 200", "static 5", "aimd", "gradient"]);
    let Policy::Adaptive(_, AdaptiveConfig::Aimd(aimd)) = policies[2] else {
        panic!("{:?}", policies[2]);
    };
    assert_eq!(aimd.timeout, Duration::from_millis(120));
    let Policy::Adaptive(_, AdaptiveConfig::Gradient(g)) = policies[3] else {
        panic!("{:?}", policies[3]);
    };
    assert_eq!(g, GradientConfig::default());
}
