//! The metrics as an operator reads them: the Prometheus text the examples' recorder
//! exports, read back with a parser made for that format.
//!
//! - The families exported, and their types, are those `docs/metrics.md` lists (its
//!   table is parsed), each with a help text: docs and exposition cannot drift.
//! - Every series documented as registered at build (or at start) is there at zero
//!   before any traffic, with every documented label value.
//! - The counters satisfy the identities `docs/metrics.md` states, on scripted
//!   sequences whose expected counts are written out by hand.
//!
//! Each test uses a recorder of its own (`metrics::with_local_recorder`), built the
//! way the examples build theirs, so tests neither share nor race on the global one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../examples/shared/prometheus.rs"]
mod prometheus;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusRecorder;
use prometheus_parse::{Scrape, Value};
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::{CircuitBreakerLayer, Forced};
use seawall::core::{
    with_reason, BoxError, BulkheadFull, ClassifyInput, DeadlineLayer, DeadlineRetry, HedgeLayer,
    HttpStatus, Outcome, RejectionKind,
};
use seawall::degradation::health::HealthMonitor;
use seawall::degradation::DegradationLayer;
use seawall::fallback::{FallbackLayer, Rejections};
use tokio::sync::Semaphore;
use tower::{service_fn, Layer, Service, ServiceExt};

// ---------------------------------------------------------------------------
// The documented table.

/// One row of `docs/metrics.md`'s table.
#[derive(Debug)]
struct Documented {
    kind: String,
    /// Label name → its documented values (`None`: not enumerated, e.g. `step`).
    labels: BTreeMap<String, Option<BTreeSet<String>>>,
    /// Registered at build (or at start): exported at zero before any traffic.
    from_the_start: bool,
}

/// The text between backticks, in order.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Parses the table of `docs/metrics.md`: metric | kind | labels | emitted by |
/// registered | meaning.
fn documented() -> BTreeMap<String, Documented> {
    let mut out = BTreeMap::new();
    for line in include_str!("../docs/metrics.md").lines() {
        if !line.starts_with("| `seawall_") {
            continue;
        }
        // `\|` separates label values inside a cell.
        let cells: Vec<String> = line
            .replace("\\|", "\u{1}")
            .split('|')
            .map(|c| c.trim().replace('\u{1}', "|"))
            .collect();
        let (name, kind, labels, registered) = (&cells[1], &cells[2], &cells[3], &cells[5]);
        let name = quoted(name).remove(0);
        let mut parsed = BTreeMap::new();
        // `name`, `outcome` = `a` | `b`, `reason`: a label, then its values if enumerated.
        for part in labels.split(", ") {
            let mut sides = part.splitn(2, " = ");
            let Some(label) = quoted(sides.next().unwrap()).into_iter().next() else {
                continue; // "(none)"
            };
            // `<rejection kind>` stands for every kind's label.
            let values = sides.next().map(|v| {
                quoted(v)
                    .into_iter()
                    .flat_map(|value| match value.as_str() {
                        "<rejection kind>" => RejectionKind::ALL
                            .iter()
                            .map(|k| k.as_str().to_owned())
                            .collect(),
                        _ => vec![value],
                    })
                    .collect()
            });
            parsed.insert(label, values);
        }
        out.insert(
            name,
            Documented {
                kind: kind.clone(),
                labels: parsed,
                from_the_start: registered.starts_with("build") || registered == "start",
            },
        );
    }
    assert!(out.len() >= 25, "the table was not read: {out:?}");
    out
}

// ---------------------------------------------------------------------------
// The exposition.

/// One exported family: its type and its series (labels → value; histograms and
/// summaries by their `_count`).
#[derive(Debug, Default)]
struct Family {
    kind: String,
    series: Vec<(BTreeMap<String, String>, f64)>,
}

fn labels_of(sample: &prometheus_parse::Sample) -> BTreeMap<String, String> {
    sample
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Renders `recorder` and reads it back with `prometheus-parse`, by family.
fn scrape(recorder: &PrometheusRecorder) -> (BTreeMap<String, Family>, Scrape) {
    let text = recorder.handle().render();
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for s in &scrape.samples {
        let (name, kind, value) = match &s.value {
            Value::Counter(v) => (s.metric.clone(), "counter", *v),
            Value::Gauge(v) => (s.metric.clone(), "gauge", *v),
            Value::Histogram(buckets) => (
                s.metric.clone(),
                "histogram",
                buckets.last().map_or(0.0, |b| b.count),
            ),
            Value::Summary(_) => (s.metric.clone(), "summary", f64::NAN),
            // A histogram's or summary's `_sum` and `_count`: part of their family.
            Value::Untyped(_) if s.metric.ends_with("_sum") || s.metric.ends_with("_count") => {
                continue
            }
            Value::Untyped(_) => panic!("a sample without a type: {s:?}\n{text}"),
        };
        let family = families.entry(name).or_default();
        family.kind = kind.to_owned();
        family.series.push((labels_of(s), value));
    }
    (families, scrape)
}

/// The value of the series of `family` whose labels include `labels`, summed.
fn value(families: &BTreeMap<String, Family>, family: &str, labels: &[(&str, &str)]) -> f64 {
    let Some(f) = families.get(family) else {
        panic!("{family} is not exported");
    };
    f.series
        .iter()
        .filter(|(l, _)| {
            labels
                .iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
        .sum()
}

/// Runs `f` on a paused current-thread runtime with `recorder` as the recorder.
fn with_recorder<F: Future>(recorder: &PrometheusRecorder, f: impl FnOnce() -> F) -> F::Output {
    let runtime = seawall_test_support::paused_runtime();
    metrics::with_local_recorder(recorder, || runtime.block_on(f()))
}

// ---------------------------------------------------------------------------
// Layers of every kind.

type Req = Request<Behaviour>;
type Res = Response<()>;

/// What the test dependency does with one request.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    Ok,
    /// A 404 "no rate for that destination".
    NotFound,
    /// A 503.
    Fail,
    /// An inner bulkhead's rejection: no evidence about the dependency.
    Rejected,
    /// Answers after this long.
    Slow(Duration),
    /// Never answers.
    Hang,
}

fn dependency() -> impl Service<Req, Response = Res, Error = BoxError, Future: Send> + Clone {
    service_fn(|req: Req| async move {
        let status = match *req.body() {
            Behaviour::Ok => StatusCode::OK,
            Behaviour::NotFound => StatusCode::NOT_FOUND,
            Behaviour::Fail => StatusCode::SERVICE_UNAVAILABLE,
            Behaviour::Rejected => return Err(BulkheadFull::new("inner".into()).into()),
            Behaviour::Slow(d) => {
                tokio::time::sleep(d).await;
                StatusCode::OK
            }
            Behaviour::Hang => std::future::pending().await,
        };
        Ok::<_, BoxError>(Response::builder().status(status).body(()).unwrap())
    })
}

fn business_refusal(result: ClassifyInput<'_, Res>, _outcome: Outcome) -> Option<&'static str> {
    match result {
        Ok(res) if res.status() == StatusCode::NOT_FOUND => Some("business_refusal"),
        _ => None,
    }
}

/// Builds one layer of every kind (and starts a health monitor), as an application
/// does after installing its recorder. Returns what must stay alive.
fn build_every_layer() -> impl Sized {
    let deadline = DeadlineLayer::new(Duration::from_millis(300)).unwrap();
    let bulkhead = BulkheadLayer::builder("shop")
        .max_concurrent(3)
        .build()
        .unwrap();
    let keyed = BulkheadLayer::builder("per-host")
        .max_concurrent(3)
        .keyed(|req: &Req| format!("{:?}", req.body()))
        .build()
        .unwrap();
    let breaker = CircuitBreakerLayer::builder("shop")
        .classifier(with_reason(HttpStatus::default(), business_refusal))
        .build()
        .unwrap();
    let degradation = DegradationLayer::<Req, Res>::builder("assistant")
        .level(
            "canned",
            service_fn(|_req: Req| async { Ok::<_, BoxError>(Response::new(())) }),
        )
        .build()
        .unwrap();
    let fallback = FallbackLayer::builder("shop")
        .on_rejections(Rejections::ALL)
        .unavailable::<Response<String>>("no quote")
        .http_server()
        .build()
        .unwrap();
    let retry = DeadlineRetry::builder("shop").build().unwrap();
    let hedge = HedgeLayer::builder("shop").build().unwrap();
    let health = HealthMonitor::builder()
        .check("model-provider", Default::default(), || async {
            Ok::<(), Infallible>(())
        })
        .start()
        .unwrap();
    (
        deadline,
        bulkhead,
        keyed,
        breaker,
        degradation,
        fallback,
        retry,
        hedge,
        health,
    )
}

// ---------------------------------------------------------------------------
// Docs against exposition.

#[test]
fn every_documented_family_is_exported_with_its_type_and_a_help_text() {
    let recorder = prometheus::builder().unwrap().build_recorder();
    let (families, scrape) = with_recorder(&recorder, || async {
        seawall::metrics::describe();
        let layers = build_every_layer();
        // The families that appear with their first use: a reason, an operator's transition.
        let breaker = CircuitBreakerLayer::builder("used")
            .classifier(with_reason(HttpStatus::default(), business_refusal))
            .build()
            .unwrap();
        let handle = breaker.handle();
        let svc = breaker.layer(dependency());
        svc.oneshot(Req::new(Behaviour::NotFound)).await.unwrap();
        handle.force(Forced::Open);
        // A call with a class turned away (a sheddable share of one slot is none).
        let classed = BulkheadLayer::builder("classed")
            .max_concurrent(1)
            .max_queue(0)
            .build()
            .unwrap()
            .criticality(|_: &&'static str| seawall::core::Criticality::Sheddable);
        let shed = classed.layer(service_fn(|_: &'static str| async {
            Ok::<_, Infallible>(())
        }));
        assert!(shed.oneshot("prefetch").await.is_err());
        let out = scrape(&recorder);
        drop(layers);
        out
    });
    let documented = documented();

    let exported: BTreeSet<&String> = families
        .keys()
        .filter(|n| n.starts_with("seawall_"))
        .collect();
    let listed: BTreeSet<&String> = documented.keys().collect();
    assert_eq!(
        exported, listed,
        "exported (left) and documented (right) differ"
    );
    for (name, doc) in &documented {
        assert_eq!(
            families[name].kind, doc.kind,
            "{name}: exported as {}",
            families[name].kind
        );
        let help = scrape
            .docs
            .get(name)
            .map(String::as_str)
            .unwrap_or_default();
        assert!(help.len() > 20, "{name} has no help text");
    }
    // The histogram is a histogram, with the buckets the examples configure.
    let wait = scrape
        .samples
        .iter()
        .find(|s| s.metric == "seawall_bulkhead_wait_seconds")
        .unwrap();
    let Value::Histogram(buckets) = &wait.value else {
        panic!("{wait:?}");
    };
    let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
    assert_eq!(bounds.first(), Some(&0.0));
    assert_eq!(bounds.iter().filter(|b| b.is_finite()).count(), 15);
}

#[test]
fn documented_series_exist_at_zero_once_the_layers_are_built() {
    let recorder = prometheus::builder().unwrap().build_recorder();
    let families = with_recorder(&recorder, || async {
        let layers = build_every_layer();
        let (families, _) = scrape(&recorder);
        drop(layers);
        families
    });
    for (name, doc) in documented() {
        if !doc.from_the_start {
            assert!(!families.contains_key(&name), "{name} before its first use");
            continue;
        }
        let Some(family) = families.get(&name) else {
            panic!("{name} is documented as registered when built, and is not exported");
        };
        for (label, values) in &doc.labels {
            let seen: BTreeSet<String> = family
                .series
                .iter()
                .filter_map(|(l, _)| l.get(label).cloned())
                .collect();
            assert!(!seen.is_empty(), "{name}: no `{label}` label");
            if let Some(values) = values {
                assert_eq!(
                    &seen, values,
                    "{name}{{{label}}}: exported (left), documented (right)"
                );
            }
        }
        for (labels, v) in &family.series {
            let expected = match (name.as_str(), labels.get("state").map(String::as_str)) {
                ("seawall_breaker_state", Some("closed")) => 1.0,
                // The configured limit, and the limit in force (the built
                // max_concurrent, not adaptive), summed over a keyed layer's live
                // keys: none yet.
                ("seawall_bulkhead_max_concurrent", _) => 3.0,
                ("seawall_bulkhead_limit", _)
                    if labels.get("name").map(String::as_str) == Some("per-host") =>
                {
                    0.0
                }
                ("seawall_bulkhead_limit", _) => 3.0,
                _ => 0.0,
            };
            assert_eq!(*v, expected, "{name}{labels:?}");
        }
    }
    // Four automatic transitions, nothing else, before any has happened.
    assert_eq!(
        families["seawall_breaker_transitions_total"].series.len(),
        4
    );
}

// ---------------------------------------------------------------------------
// The identities.

#[test]
fn breaker_counters_say_one_thing_each_and_add_up() {
    let recorder = prometheus::builder().unwrap().build_recorder();
    let (families, counters) = with_recorder(&recorder, || async {
        let breaker = CircuitBreakerLayer::builder("b")
            .consecutive_failures(2)
            .open_for(Duration::from_secs(10))
            .jitter(0.0)
            .half_open_timeout(Duration::from_secs(5))
            .classifier(with_reason(HttpStatus::default(), business_refusal))
            .build()
            .unwrap();
        let handle = breaker.handle();
        let plain = breaker.layer(dependency());
        let timed = DeadlineLayer::new(Duration::from_secs(1))
            .unwrap()
            .layer(plain.clone());
        let call = |b| plain.clone().oneshot(Req::new(b));
        let call_in_time = |b| timed.clone().oneshot(Req::new(b));

        for _ in 0..3 {
            call(Behaviour::Ok).await.unwrap(); // success 3
        }
        for _ in 0..2 {
            call(Behaviour::NotFound).await.unwrap(); // success 5, business_refusal 2
        }
        call(Behaviour::Rejected).await.unwrap_err(); // ignored 1
        call_in_time(Behaviour::Hang).await.unwrap_err(); // timeout 1 (consecutive 1)
        let mut svc = plain.clone();
        svc.ready().await.unwrap();
        drop(svc.call(Req::new(Behaviour::Hang))); // cancelled 1
        call(Behaviour::Fail).await.unwrap(); // failure 1 (consecutive 2): trips
        for _ in 0..2 {
            call(Behaviour::Ok).await.unwrap_err(); // rejected 2
        }
        // Probe 1 is cut off by the deadline: a probe timeout, and a call timeout.
        tokio::time::sleep(Duration::from_secs(10)).await;
        call_in_time(Behaviour::Hang).await.unwrap_err(); // timeout 2
                                                          // Probe 2 fails.
        tokio::time::sleep(Duration::from_secs(10)).await;
        call(Behaviour::Fail).await.unwrap(); // failure 2
                                              // Probe 3 outlives the half-open timeout: the breaker reopens at 5 s, turns a
                                              // call away at 5.5 s, and the probe's success at 6 s is stale.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let probe = tokio::spawn(call(Behaviour::Slow(Duration::from_secs(6))));
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5500)).await;
        call(Behaviour::Ok).await.unwrap_err(); // rejected 3
        probe.await.unwrap().unwrap(); // success 6, stale 1
                                       // Probe 4 succeeds and closes.
        tokio::time::sleep(Duration::from_secs(10)).await;
        call(Behaviour::Ok).await.unwrap(); // success 7
        (scrape(&recorder).0, handle.snapshot().counters)
    });
    let v = |family: &str, labels: &[(&str, &str)]| {
        value(&families, family, &[&[("name", "b")], labels].concat())
    };
    let calls = |outcome| v("seawall_breaker_calls_total", &[("outcome", outcome)]);
    // Each ended call once, under one outcome: 16 calls were made.
    assert_eq!(CALL_OUTCOMES.map(calls), [7.0, 2.0, 2.0, 1.0, 1.0, 3.0]);
    assert_eq!(v("seawall_breaker_calls_total", &[]), 16.0);
    // Subsets, not second counts.
    assert_eq!(v("seawall_breaker_stale_outcomes_total", &[]), 1.0);
    assert_eq!(v("seawall_breaker_slow_calls_total", &[]), 0.0);
    let probes = |result| v("seawall_breaker_probes_total", &[("result", result)]);
    assert_eq!(
        ["success", "failure", "timeout"].map(probes),
        [1.0, 1.0, 2.0]
    );
    let transitions = |from, to| {
        v(
            "seawall_breaker_transitions_total",
            &[("from", from), ("to", to)],
        )
    };
    assert_eq!(transitions("closed", "open"), 1.0);
    assert_eq!(transitions("open", "half_open"), 4.0);
    assert_eq!(
        transitions("half_open", "open"),
        probes("failure") + probes("timeout")
    );
    assert_eq!(transitions("half_open", "closed"), 1.0);
    assert_eq!(
        v(
            "seawall_breaker_outcome_reasons_total",
            &[("outcome", "success"), ("reason", "business_refusal")]
        ),
        2.0
    );
    // The snapshot counts timeouts among failures; the metrics keep them apart.
    assert_eq!(counters.calls, 16);
    assert_eq!(counters.failures, 4);
    assert_eq!(counters.timeouts, 2);
    assert_eq!(counters.short_circuited, 3);
    assert_eq!(counters.probe_failures, 3);
    assert_eq!(counters.probe_timeouts, 2);
    assert_eq!(counters.stale, 1);
}

/// Every `outcome` label of `seawall_breaker_calls_total`.
const CALL_OUTCOMES: [&str; 6] = [
    "success",
    "failure",
    "timeout",
    "ignored",
    "cancelled",
    "rejected",
];

/// A dependency whose every call waits for a permit of `gate`, then answers.
fn gated(
    gate: &Arc<Semaphore>,
) -> impl Service<Req, Response = Response<()>, Error = BoxError, Future: Send> + Clone {
    let gate = gate.clone();
    service_fn(move |_req: Req| {
        let gate = gate.clone();
        async move {
            gate.acquire().await.unwrap().forget();
            Ok::<_, BoxError>(Response::new(()))
        }
    })
}

#[test]
fn every_call_handed_to_a_bulkhead_ends_once() {
    let recorder = prometheus::builder().unwrap().build_recorder();
    let families = with_recorder(&recorder, || async {
        let gate = Arc::new(Semaphore::new(0));
        let inner = gated(&gate);
        let bulkhead = BulkheadLayer::builder("k")
            .max_concurrent(1)
            .max_queue(1)
            .max_wait(Duration::from_secs(1))
            .build()
            .unwrap();
        let svc = bulkhead.layer(inner);
        let call = || svc.clone().oneshot(Req::new(Behaviour::Ok));

        let a = tokio::spawn(call()); // admitted, holds the slot
        tokio::task::yield_now().await;
        let mut queued = svc.clone();
        queued.ready().await.unwrap();
        let b = queued.call(Req::new(Behaviour::Ok)); // in line
        call().await.unwrap_err(); // full: the line is full too
        drop(b); // abandoned
        call().await.unwrap_err(); // waits 1 s in line: timeout
        gate.add_permits(2);
        a.await.unwrap().unwrap();
        call().await.unwrap(); // admitted at once
        scrape(&recorder).0
    });
    let v = |family: &str, labels: &[(&str, &str)]| {
        value(&families, family, &[&[("name", "k")], labels].concat())
    };
    let admitted = v("seawall_bulkhead_admitted_total", &[]);
    let full = v("seawall_bulkhead_rejected_total", &[("cause", "full")]);
    let timeout = v("seawall_bulkhead_rejected_total", &[("cause", "timeout")]);
    let abandoned = v("seawall_bulkhead_abandoned_total", &[]);
    let queued = v("seawall_bulkhead_queued", &[]);
    assert_eq!(
        [admitted, full, timeout, abandoned, queued],
        [2.0, 1.0, 1.0, 1.0, 0.0]
    );
    // Five calls were handed to it.
    assert_eq!(admitted + full + timeout + abandoned + queued, 5.0);
    // One wait recorded per admitted call; every slot given back.
    assert_eq!(v("seawall_bulkhead_wait_seconds", &[]), admitted);
    assert_eq!(v("seawall_bulkhead_active", &[]), 0.0);
}

#[test]
fn shadow_rejections_are_counted_apart_and_every_call_still_ends_once() {
    let recorder = prometheus::builder().unwrap().build_recorder();
    let (families, breaker, bulkhead, deadline) = with_recorder(&recorder, || async {
        let breaker = CircuitBreakerLayer::builder("s")
            .consecutive_failures(2)
            .open_for(Duration::from_secs(10))
            .jitter(0.0)
            .classifier(HttpStatus::default())
            .shadow(true)
            .build()
            .unwrap();
        let breaker_handle = breaker.handle();
        let plain = breaker.layer(dependency());
        let call = |b| plain.clone().oneshot(Req::new(b));
        call(Behaviour::Fail).await.unwrap(); // failure 1
        call(Behaviour::Fail).await.unwrap(); // failure 2: trips
        call(Behaviour::Ok).await.unwrap(); // open: shadow 1, success 1
        call(Behaviour::Ok).await.unwrap(); // open: shadow 2, success 2
        call(Behaviour::Fail).await.unwrap(); // open: shadow 3, failure 3
        tokio::time::sleep(Duration::from_secs(10)).await;
        let probe = tokio::spawn(call(Behaviour::Slow(Duration::from_secs(1))));
        tokio::task::yield_now().await;
        call(Behaviour::Ok).await.unwrap(); // probe slot taken: shadow 4, success 3
        probe.await.unwrap().unwrap(); // the probe: success 4, closes

        let gate = Arc::new(Semaphore::new(0));
        let held = gated(&gate);
        let bulkhead = BulkheadLayer::builder("s")
            .max_concurrent(1)
            .max_queue(0)
            .shadow(true)
            .build()
            .unwrap();
        let bulkhead_handle = bulkhead.handle();
        let svc = bulkhead.layer(held);
        let calls: Vec<_> = (0..3)
            .map(|_| tokio::spawn(svc.clone().oneshot(Req::new(Behaviour::Ok))))
            .collect();
        tokio::task::yield_now().await;
        // One holds the slot, two went through beyond the limit.
        let (during, _) = scrape(&recorder);
        gate.add_permits(3);
        for c in calls {
            c.await.unwrap().unwrap();
        }

        let deadline = DeadlineLayer::new(Duration::from_millis(100))
            .unwrap()
            .shadow(true);
        let deadline_handle = deadline.handle();
        let late = deadline.layer(dependency());
        late.clone()
            .oneshot(Req::new(Behaviour::Slow(Duration::from_millis(200))))
            .await
            .unwrap(); // late: shadow 1
        late.oneshot(Req::new(Behaviour::Ok)).await.unwrap(); // in time
        let over_limit = value(&during, "seawall_bulkhead_over_limit", &[("name", "s")]);
        assert_eq!(over_limit, 2.0);
        (
            scrape(&recorder).0,
            breaker_handle.snapshot(),
            bulkhead_handle.snapshot(),
            deadline_handle.snapshot(),
        )
    });
    let v = |family: &str, labels: &[(&str, &str)]| {
        value(&families, family, &[&[("name", "s")], labels].concat())
    };
    let calls = |outcome| v("seawall_breaker_calls_total", &[("outcome", outcome)]);
    let shadow = |cause| {
        v(
            "seawall_breaker_shadow_rejections_total",
            &[("cause", cause)],
        )
    };
    assert_eq!(
        ["open", "probe_slots_full", "ramping"].map(shadow),
        [3.0, 1.0, 0.0]
    );
    // Nothing rejected; each of the 7 calls ended once, by how the dependency answered.
    assert_eq!(CALL_OUTCOMES.map(calls), [4.0, 3.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(v("seawall_breaker_calls_total", &[]), 7.0);
    assert!(v("seawall_breaker_shadow_rejections_total", &[]) <= 7.0);
    assert_eq!(breaker.counters.shadow_rejections, 4);
    assert_eq!(breaker.counters.short_circuited, 0);
    assert_eq!(breaker.state, seawall::circuit_breaker::State::Closed);
    assert_eq!(
        v(
            "seawall_breaker_transitions_total",
            &[("from", "half_open"), ("to", "closed")]
        ),
        1.0
    );

    let admitted = v("seawall_bulkhead_admitted_total", &[]);
    let rejected = v("seawall_bulkhead_rejected_total", &[]);
    let shadowed = v(
        "seawall_bulkhead_shadow_rejections_total",
        &[("cause", "full")],
    );
    // Three calls handed to it: one admitted, two through beyond the limit.
    assert_eq!([admitted, rejected, shadowed], [1.0, 0.0, 2.0]);
    assert_eq!(v("seawall_bulkhead_shadow_rejections_total", &[]), 2.0);
    assert_eq!(v("seawall_bulkhead_over_limit", &[]), 0.0);
    assert_eq!(v("seawall_bulkhead_active", &[]), 0.0);
    assert_eq!(v("seawall_bulkhead_wait_seconds", &[]), admitted);
    assert_eq!((bulkhead.shadow_rejected_full, bulkhead.over_limit), (2, 0));

    assert_eq!(
        value(&families, "seawall_deadline_shadow_rejections_total", &[]),
        1.0
    );
    assert_eq!(
        value(&families, "seawall_deadline_exceeded_total", &[]),
        0.0
    );
    assert_eq!(deadline.shadow_rejections, 1);
}

#[test]
fn every_triggered_fallback_ends_once_and_every_rendered_error_has_one_cause() {
    use std::sync::atomic::{AtomicU8, Ordering};

    use bytes::Bytes;
    use http_body_util::Full;
    use seawall::core::DeadlineExceeded;
    use seawall::fallback::{FallbackRequest, Unavailable};

    /// What the primary answers, and what the fallback step does, for one request.
    #[derive(Clone, Copy)]
    enum Primary {
        Ok,
        Status503,
        Full,
        IoError,
        LateDeadline,
    }
    const SERVES: u8 = 0;
    const DECLINES: u8 = 1;
    const FAILS: u8 = 2;

    let recorder = prometheus::builder().unwrap().build_recorder();
    let step = Arc::new(AtomicU8::new(SERVES));
    let families = with_recorder(&recorder, || async {
        let primary = service_fn(|req: Request<Primary>| async move {
            let status = match *req.body() {
                Primary::Ok => StatusCode::OK,
                Primary::Status503 => StatusCode::SERVICE_UNAVAILABLE,
                Primary::Full => return Err(BulkheadFull::new("inner".into()).into()),
                Primary::IoError => {
                    return Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into())
                }
                Primary::LateDeadline => return Err(DeadlineExceeded::new().into()),
            };
            Ok::<_, BoxError>(
                Response::builder()
                    .status(status)
                    .body(Full::new(Bytes::from_static(b"primary")))
                    .unwrap(),
            )
        });
        let fallback = {
            let step = step.clone();
            FallbackLayer::builder("f")
                .on_rejections(Rejections::ADMISSION) // not deadline_exceeded
                .on_failure(HttpStatus::default())
                .sync_fn(
                    move |_req: FallbackRequest<()>| match step.load(Ordering::SeqCst) {
                        SERVES => Ok(Response::new(Full::new(Bytes::from_static(b"cached")))),
                        DECLINES => Err(BoxError::from(Unavailable::new("no quote"))),
                        _ => Err(BoxError::from("cache down")),
                    },
                )
                .http_server()
                .build()
                .unwrap()
        };
        let svc = fallback.layer(primary);
        for (answer, then) in [
            (Primary::Ok, SERVES),           // no fallback
            (Primary::Status503, SERVES),    // failed_response, served
            (Primary::Full, SERVES),         // bulkhead_full, served
            (Primary::Status503, DECLINES),  // failed_response, unavailable (rendered)
            (Primary::IoError, FAILS),       // failed_error, failed then exhausted (rendered)
            (Primary::LateDeadline, SERVES), // no trigger: passed through (rendered)
        ] {
            step.store(then, Ordering::SeqCst);
            let _response = svc.clone().oneshot(Request::new(answer)).await.unwrap();
        }
        scrape(&recorder).0
    });
    let v = |family: &str, labels: &[(&str, &str)]| {
        value(&families, family, &[&[("name", "f")], labels].concat())
    };
    let steps = |outcome| v("seawall_fallback_steps_total", &[("outcome", outcome)]);
    let rendered = |cause| v("seawall_fallback_rendered_total", &[("cause", cause)]);
    let triggered = v("seawall_fallback_triggered_total", &[]);
    let exhausted = v("seawall_fallback_exhausted_total", &[]);
    let passed_through = v("seawall_fallback_passed_through_total", &[]);
    assert_eq!(
        [
            v(
                "seawall_fallback_triggered_total",
                &[("trigger", "failed_response")]
            ),
            v(
                "seawall_fallback_triggered_total",
                &[("trigger", "bulkhead_full")]
            ),
            v(
                "seawall_fallback_triggered_total",
                &[("trigger", "failed_error")]
            ),
        ],
        [2.0, 1.0, 1.0]
    );
    assert_eq!(
        ["served", "unavailable", "failed", "timed_out"].map(steps),
        [2.0, 1.0, 1.0, 0.0]
    );
    assert_eq!([triggered, exhausted, passed_through], [4.0, 1.0, 1.0]);
    // Each triggered fallback ended once: served, declined or exhausted.
    assert_eq!(
        triggered,
        steps("served") + steps("unavailable") + exhausted
    );
    // Each rendered error once, by its cause.
    assert_eq!(rendered("exhausted"), exhausted);
    assert_eq!(rendered("unavailable"), steps("unavailable"));
    assert_eq!(
        v("seawall_fallback_rendered_total", &[]) - rendered("exhausted") - rendered("unavailable"),
        passed_through
    );
    assert_eq!(rendered("deadline_exceeded"), 1.0);
}
