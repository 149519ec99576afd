//! Policy documents: loading (a good document; each bad field named by its path),
//! and applying a changed document at run time without losing state.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

mod support;
use support::TempFile;

use seawall::bulkhead::QueuePolicy;
use seawall::circuit_breaker::{Forced, State, TripPolicy};
use seawall::config::{LoadError, Policies, PolicyDocument};
use seawall::core::{find_rejection, BoxError, RejectionKind};
use seawall::ServiceBuilderExt;
use tower::{service_fn, Service, ServiceBuilder, ServiceExt};

const EXAMPLE: &str = include_str!("../examples/axum_routes.toml");

const GOOD: &str = concat!(
    support::freight_policy!(),
    r#"
[policies.freight.fallback]
on_rejections = ["circuit_open", "bulkhead_full"]

[policies.assistant.degradation]
failures_to_degrade = 3

[routes]
"/quote" = "freight"

[dependencies]
freight-supplier = "freight"
"#
);

#[test]
fn the_examples_document_and_a_good_one_load() {
    let doc = PolicyDocument::from_toml(EXAMPLE).unwrap();
    assert_eq!(
        doc.policies.keys().collect::<Vec<_>>(),
        ["assistant", "freight", "recommendations"]
    );
    assert_eq!(
        doc.policy_for_route("/quote/{destination}"),
        Some("freight")
    );
    assert_eq!(doc.policy_for_route("/products"), None);
    let freight = &doc.policies["freight"];
    assert_eq!(freight.deadline, Some(Duration::from_millis(300)));
    let bulkhead = freight.bulkhead.unwrap();
    assert_eq!(
        (
            bulkhead.max_concurrent,
            bulkhead.queue.max_queue,
            bulkhead.queue.max_wait
        ),
        (8, 10, Duration::from_millis(20))
    );

    let policies = Policies::from_toml(GOOD).unwrap();
    assert_eq!(
        policies.policy_for_route("/quote").as_deref(),
        Some("freight")
    );
    assert_eq!(
        policies
            .policy_for_dependency("freight-supplier")
            .as_deref(),
        Some("freight")
    );
    let breaker = policies.document().policies["freight"]
        .breaker
        .clone()
        .unwrap();
    assert_eq!(
        breaker.policy,
        TripPolicy::CountWindow {
            size: 4,
            min_calls: 4,
            failure_rate: 0.5
        }
    );
    // Left-out fields take the crate's defaults (documented in each crate).
    let degradation = policies.document().policies["assistant"]
        .degradation
        .clone()
        .unwrap();
    assert_eq!(degradation.failures_to_degrade, 3);
    assert_eq!(degradation.min_dwell, Duration::from_secs(60));
}

#[test]
fn a_policy_file_breaker_is_jittered_by_default_and_keeps_an_explicit_jitter() {
    let text = r#"
[policies.jittered]
breaker = { open_for = "10s" }

[policies.exact]
breaker = { open_for = "10s", jitter = 0.0 }

[policies.wide]
breaker = { open_for = "10s", jitter = 0.5 }
"#;
    let policies = Policies::from_toml(text).unwrap();
    let jittered = policies.circuit_breaker("jittered", |b| b).unwrap();
    assert_eq!(jittered.handle().config().jitter, None);
    assert_eq!(
        jittered.handle().config().effective_jitter(),
        seawall::circuit_breaker::DEFAULT_JITTER
    );
    let exact = policies.circuit_breaker("exact", |b| b).unwrap();
    assert_eq!(exact.handle().config().jitter, Some(0.0));
    let wide = policies.circuit_breaker("wide", |b| b).unwrap();
    assert_eq!(wide.handle().config().jitter, Some(0.5));
    // Out of [0, 1]: refused, naming the field by its path.
    let (fields, _) = refused("[policies.bad]\nbreaker = { jitter = 1.5 }\n");
    assert!(
        fields.iter().any(|f| f.ends_with("breaker.jitter")),
        "{fields:?}"
    );
}

/// The fields `text` is refused for, and the error's message.
fn refused(text: &str) -> (Vec<String>, String) {
    let e = PolicyDocument::from_toml(text).unwrap_err();
    let fields = e.fields().into_iter().map(str::to_owned).collect();
    (fields, e.to_string())
}

/// Malformed documents: each refused with the field it names and a word of its message.
const MALFORMED: &[(&str, &str, &str)] = &[
    (
        "[policies.freight.bulkhead]\nmax_concurent = 4\n",
        "policies.freight.bulkhead.max_concurent",
        "unknown field",
    ),
    (
        "[policies.freight.bulkhead.queue]\nmax_wait = \"20\"\n",
        "policies.freight.bulkhead.queue.max_wait",
        "no unit",
    ),
    (
        "[policies.freight.bulkhead]\nqueue = { max_queue = \"ten\" }\n",
        "policies.freight.bulkhead.queue.max_queue",
        "invalid type",
    ),
    (
        "[policies.freight.bulkhed]\nmax_queue = 1\n",
        "policies.freight.bulkhed",
        "unknown field",
    ),
    (
        "[policies.freight.breaker]\npolicy = { kind = \"count_windw\", size = 10 }\n",
        "policies.freight.breaker.policy.kind",
        "count_windw",
    ),
    (
        "[policies.freight.fallback]\non_rejections = [\"circuit_opened\"]\n",
        "policies.freight.fallback.on_rejections[0]",
        "circuit_opened",
    ),
    (
        "[policies.freight]\ndeadline = 300\n",
        "policies.freight.deadline",
        "invalid type",
    ),
    (
        "[routes]\n\"/quote\" = 1\n",
        "routes.\"/quote\"",
        "invalid type",
    ),
    // A misspelled top-level table: the unknown key is `polices`, where it is written.
    ("[polices.f]\nbulkhead = {}\n", "polices", "unknown field"),
    ("polices = 1\n", "polices", "unknown field"),
    ("[rootes]\n\"/q\" = \"f\"\n", "rootes", "unknown field"),
    (
        "[policies.f]\ndeadline = \"1s\"\n[policies.f.breaker.polcy]\nkind = \"count_window\"\n",
        "policies.f.breaker.polcy",
        "unknown field",
    ),
];

#[test]
fn each_malformed_field_is_named_with_its_line() {
    for (text, field, said) in MALFORMED {
        let e = PolicyDocument::from_toml(text).unwrap_err();
        assert!(matches!(e, LoadError::Malformed { .. }), "{text}: {e:?}");
        assert_eq!(e.fields(), [*field], "{text}: {e}");
        let message = e.to_string();
        assert!(message.contains(said), "{text}: {message}");
        assert!(message.starts_with("policy document:"), "{message}");
        let LoadError::Malformed { line_column, .. } = e else {
            unreachable!()
        };
        assert!(line_column.is_some_and(|(line, _)| line >= 1), "{text}");
    }
    // A syntax error has a line and column, even when no field can be named.
    let e = PolicyDocument::from_toml("[policies.freight\n").unwrap_err();
    assert!(
        matches!(
            e,
            LoadError::Malformed {
                line_column: Some((1, _)),
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn the_bulkhead_queue_is_a_nested_table_whose_unknown_keys_are_named() {
    let doc = PolicyDocument::from_toml(
        "[policies.q.bulkhead]\nmax_concurrent = 3\n\
         [policies.q.bulkhead.queue]\nmax_queue = 4\nmax_wait = \"50ms\"\n",
    )
    .unwrap();
    let bulkhead = doc.policies["q"].bulkhead.unwrap();
    assert_eq!(bulkhead.max_concurrent, 3);
    let queue: QueuePolicy = bulkhead.queue;
    assert_eq!(
        (queue.max_queue, queue.max_wait),
        (4, Duration::from_millis(50))
    );
    // Inline, with a field left out: it keeps its default (20 ms).
    let doc =
        PolicyDocument::from_toml("[policies.q.bulkhead]\nqueue = { max_queue = 0 }\n").unwrap();
    let queue = doc.policies["q"].bulkhead.unwrap().queue;
    assert_eq!(
        (queue.max_queue, queue.max_wait),
        (0, Duration::from_millis(20))
    );

    let (fields, message) = refused("[policies.q.bulkhead.queue]\nmax_waiters = 4\n");
    assert_eq!(
        fields,
        ["policies.q.bulkhead.queue.max_waiters"],
        "{message}"
    );
    assert!(message.contains("unknown field"), "{message}");
    // The classes' shares: a nested table of the queue; left out, the defaults.
    let doc = PolicyDocument::from_toml(
        "[policies.q.bulkhead.queue]\nshares = { default = 80, sheddable = 20 }\n",
    )
    .unwrap();
    let shares = doc.policies["q"].bulkhead.unwrap().queue.shares;
    assert_eq!((shares.default, shares.sheddable), (80, 20));
    let shares = QueuePolicy::default().shares;
    assert_eq!((shares.default, shares.sheddable), (90, 50));
    let (fields, message) = refused("[policies.q.bulkhead.queue]\nshares = { critical = 100 }\n");
    assert_eq!(
        fields,
        ["policies.q.bulkhead.queue.shares.critical"],
        "{message}"
    );
    // Controlled delay: off unless its table is there; its fields keep defaults.
    assert_eq!(QueuePolicy::default().controlled_delay, None);
    let doc = PolicyDocument::from_toml(
        "[policies.q.bulkhead.queue]\ncontrolled_delay = { target = \"2ms\", lifo = false }\n",
    )
    .unwrap();
    let delay = doc.policies["q"]
        .bulkhead
        .unwrap()
        .queue
        .controlled_delay
        .unwrap();
    assert_eq!(
        (delay.interval, delay.target, delay.lifo),
        (Duration::from_millis(100), Duration::from_millis(2), false)
    );
    // The queue's keys belong to its table: one level up they are unknown.
    let (fields, message) = refused("[policies.q.bulkhead]\nmax_wait = \"20ms\"\n");
    assert_eq!(fields, ["policies.q.bulkhead.max_wait"], "{message}");
    assert!(message.contains("unknown field"), "{message}");
}

#[test]
fn durations_are_read_as_humantime_users_write_them() {
    let doc = PolicyDocument::from_toml(
        "[policies.q]\ndeadline = \"1.5s\"\n[policies.q.bulkhead.queue]\nmax_wait = \"250ms\"\n\
         [policies.q.breaker]\nopen_for = \"1m30s\"\n",
    )
    .unwrap();
    let q = &doc.policies["q"];
    assert_eq!(q.deadline, Some(Duration::from_millis(1500)));
    assert_eq!(
        q.bulkhead.unwrap().queue.max_wait,
        Duration::from_millis(250)
    );
    assert_eq!(
        q.breaker.as_ref().unwrap().open_for,
        Duration::from_secs(90)
    );
    let (fields, message) = refused("[policies.q]\ndeadline = \"3 fortnights\"\n");
    assert_eq!(fields, ["policies.q.deadline"], "{message}");
    assert!(message.contains("unknown unit"), "{message}");
}

/// Well-formed documents with an invalid value: each refused naming the field.
const INVALID: &[(&str, &str)] = &[
    (
        "[policies.quote.breaker]\npolicy = { kind = \"count_window\", size = 10, min_calls = 10, failure_rate = 1.5 }\n",
        "policies.quote.breaker.policy.failure_rate",
    ),
    (
        "[policies.quote.breaker]\nopen_for = \"0s\"\n",
        "policies.quote.breaker.open_for",
    ),
    (
        "[policies.quote.bulkhead]\nmax_concurrent = 0\n",
        "policies.quote.bulkhead.max_concurrent",
    ),
    (
        "[policies.quote.bulkhead.queue]\nshares = { default = 40, sheddable = 50 }\n",
        "policies.quote.bulkhead.queue.shares.sheddable",
    ),
    (
        "[policies.quote.bulkhead.queue.shares]\ndefault = 120\n",
        "policies.quote.bulkhead.queue.shares.default",
    ),
    (
        "[policies.quote.bulkhead.queue.controlled_delay]\ntarget = \"0ms\"\n",
        "policies.quote.bulkhead.queue.controlled_delay.target",
    ),
    (
        "[policies.quote.bulkhead.queue]\nmax_wait = \"0ms\"\n",
        "policies.quote.bulkhead.queue.max_wait",
    ),
    (
        "[policies.quote.degradation]\nprobe_ratio = 0.0\n",
        "policies.quote.degradation.probe_ratio",
    ),
    (
        "[policies.quote.fallback]\nstep_timeouts = [{ step = \"cache\", timeout = \"0ms\" }]\n",
        "policies.quote.fallback.step_timeouts",
    ),
    ("[policies.quote]\ndeadline = \"0ms\"\n", "policies.quote.deadline"),
    // Past the one-year maximum: refused when loaded, not a panic on the first call.
    (
        "[policies.quote]\ndeadline = \"18446744073709551615s\"\n",
        "policies.quote.deadline",
    ),
    (
        "[policies.quote.bulkhead]\nqueue = { max_wait = \"18446744073709551615s\" }\n",
        "policies.quote.bulkhead.queue.max_wait",
    ),
    (
        "[policies.quote.breaker]\nopen_for = \"9000h\"\n",
        "policies.quote.breaker.open_for",
    ),
    (
        "[policies.quote.degradation]\nrate_window = \"18446744073709551610s\"\n",
        "policies.quote.degradation.rate_window",
    ),
    (
        "[policies.quote.fallback]\nstep_timeouts = [{ step = \"cache\", timeout = \"18446744073709551615s\" }]\n",
        "policies.quote.fallback.step_timeouts",
    ),
    ("[policies.quote]\n", "policies.quote"),
    (
        "[policies.quote]\ndeadline = \"1s\"\n[routes]\n\"/quote\" = \"qoute\"\n",
        "routes.\"/quote\"",
    ),
    (
        "[policies.quote]\ndeadline = \"1s\"\n[dependencies]\nfreight-supplier = \"freight\"\n",
        "dependencies.freight-supplier",
    ),
];

#[test]
fn each_invalid_value_is_named_by_its_path_in_the_document() {
    for (text, field) in INVALID {
        let (fields, message) = refused(text);
        assert_eq!(fields, [*field], "{text}: {message}");
        assert!(message.contains(&format!("`{field}`")), "{message}");
    }
}

#[test]
fn every_invalid_value_is_reported_at_once() {
    let text = r#"
[policies.freight.bulkhead]
max_concurrent = 0
[policies.freight.breaker]
jitter = 2.0
[policies.assistant.degradation]
failures_to_degrade = 0
[routes]
"/quote" = "fraight"
"#;
    let (fields, _) = refused(text);
    assert_eq!(
        fields,
        [
            "policies.assistant.degradation.failures_to_degrade",
            "policies.freight.bulkhead.max_concurrent",
            "policies.freight.breaker.jitter",
            "routes.\"/quote\"",
        ]
    );
}

#[test]
fn a_file_is_named_in_its_errors() {
    let file = TempFile::with("[policies.freight.bulkhead.queue]\nmax_wait = \"20\"\n");
    let e = Policies::load(&file.0).unwrap_err();
    let message = e.to_string();
    assert!(
        message.starts_with(&format!(
            "{}:2:12: `policies.freight.bulkhead.queue.max_wait`",
            file.0.display()
        )),
        "{message}"
    );
    let missing = std::env::temp_dir().join("seawall-config-test-does-not-exist.toml");
    assert!(matches!(
        Policies::load(&missing),
        Err(LoadError::Read { .. })
    ));
    assert!(matches!(
        Policies::from_toml(GOOD).unwrap().reload(),
        Err(LoadError::NoFile)
    ));
}

#[test]
fn layers_are_built_once_per_policy_and_must_be_declared() {
    let policies = Policies::from_toml(GOOD).unwrap();
    let _first = policies.bulkhead("freight").unwrap();
    let again = policies.bulkhead("freight").unwrap_err();
    assert_eq!(again.field(), "policies.freight.bulkhead");
    assert!(again.problem().contains("already built"));
    assert_eq!(
        policies.bulkhead("assistant").unwrap_err().field(),
        "policies.assistant.bulkhead"
    );
    assert_eq!(
        policies.deadline("nope").unwrap_err().field(),
        "policies.nope"
    );
    // A fallback whose document selects no trigger for a strategy without one is refused
    // by the fallback's own builder, named in the document.
    let policies = Policies::from_toml("[policies.quote]\nfallback = {}\n").unwrap();
    let e = policies
        .fallback("quote", |b| {
            b.unavailable::<http::Response<String>>("no quote")
        })
        .unwrap_err();
    assert_eq!(e.field(), "policies.quote.fallback.triggers");
}

/// A service that fails until told otherwise, behind the freight policy's stack.
fn freight_stack(
    policies: &Policies,
) -> impl Service<http::Request<()>, Response = http::Response<()>, Error = BoxError>
       + Clone
       + Send
       + 'static {
    ServiceBuilder::new()
        .deadline(policies.deadline("freight").unwrap())
        .bulkhead(policies.bulkhead("freight").unwrap())
        .circuit_breaker(policies.circuit_breaker("freight", |b| b).unwrap())
        .service(service_fn(|req: http::Request<()>| async move {
            if req.uri().path() == "/hang" {
                std::future::pending::<()>().await;
            }
            if req.uri().path() == "/fail" {
                return Err::<http::Response<()>, BoxError>("supplier: 503".into());
            }
            Ok(http::Response::new(()))
        }))
}

fn request(path: &str) -> http::Request<()> {
    http::Request::get(path).body(()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn applying_a_changed_document_keeps_an_open_breaker_open_and_held_slots() {
    let policies = Policies::from_toml(GOOD).unwrap();
    let svc = freight_stack(&policies);
    let handles = policies.handles("freight").unwrap();
    let (breaker, bulkhead) = (handles.breaker.unwrap(), handles.bulkhead.unwrap());

    // Four failures of four: the breaker opens.
    for _ in 0..4 {
        svc.clone().oneshot(request("/fail")).await.unwrap_err();
    }
    assert_eq!(breaker.state(), State::Open);
    let err = svc.clone().oneshot(request("/ok")).await.unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::CircuitOpen
    );

    // A changed document: a bigger window, a longer interval, a smaller bulkhead.
    let changed = GOOD
        .replace("size = 4, min_calls = 4", "size = 20, min_calls = 10")
        .replace("open_for = \"10s\"", "open_for = \"30s\"")
        .replace("max_concurrent = 2", "max_concurrent = 1");
    policies.apply_toml(&changed).unwrap();
    assert_eq!(policies.generation(), 1);
    assert_eq!(breaker.state(), State::Open, "the open breaker stays open");
    assert_eq!(
        breaker.config().policy,
        TripPolicy::CountWindow {
            size: 20,
            min_calls: 10,
            failure_rate: 0.5
        }
    );
    let err = svc.clone().oneshot(request("/ok")).await.unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::CircuitOpen
    );
    let snapshot = policies.snapshot();
    assert!(!snapshot.as_started);
    assert!(snapshot.policies["freight"].changed_at_run_time);
    assert!(!snapshot.policies["assistant"].changed_at_run_time);

    // Back to the start-up document: still open (its state is not configuration).
    policies.revert();
    assert_eq!(breaker.state(), State::Open);
    assert_eq!(
        breaker.config().policy,
        TripPolicy::CountWindow {
            size: 4,
            min_calls: 4,
            failure_rate: 0.5
        }
    );
    assert!(policies.snapshot().as_started);

    // Held bulkhead slots survive a change of limits.
    breaker.force(Forced::Closed);
    let mut hung = Box::pin(svc.clone().oneshot(request("/hang")));
    let waker = std::task::Waker::noop();
    assert!(hung
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
        .is_pending());
    assert_eq!(bulkhead.snapshot().active, 1);
    policies.apply_toml(&changed).unwrap();
    assert_eq!(bulkhead.snapshot().active, 1);
    assert_eq!(bulkhead.snapshot().max_concurrent, 1);
    // The one slot is held: the next call is turned away (no queue).
    let err = svc.clone().oneshot(request("/ok")).await.unwrap_err();
    assert_eq!(
        find_rejection(&*err).unwrap().kind(),
        RejectionKind::BulkheadFull
    );
    drop(hung);
    assert_eq!(bulkhead.snapshot().active, 0);
}

#[tokio::test(start_paused = true)]
async fn what_cannot_change_at_run_time_is_refused_as_a_whole_and_named() {
    let policies = Policies::from_toml(GOOD).unwrap();
    let _svc = freight_stack(&policies);
    let bulkhead = policies.handles("freight").unwrap().bulkhead.unwrap();

    let changed = GOOD
        .replace("max_concurrent = 2", "max_concurrent = 5")
        .replace("deadline = \"300ms\"", "deadline = \"1s\"")
        .replace("\"/quote\" = \"freight\"", "\"/quote\" = \"assistant\"")
        .replace(
            "[policies.assistant.degradation]",
            "[policies.extra]\ndeadline = \"1s\"\n[policies.assistant.degradation]",
        )
        .replace(
            "[policies.freight.fallback]\non_rejections = [\"circuit_open\", \"bulkhead_full\"]\n",
            "",
        );
    let e = policies.apply_toml(&changed).unwrap_err();
    assert!(matches!(e, LoadError::NeedsRestart { .. }), "{e:?}");
    assert_eq!(
        e.fields(),
        [
            "policies.extra",
            "policies.freight.fallback",
            "policies.freight.deadline",
            "routes.\"/quote\"",
        ]
    );
    // Nothing was applied, not even the valid bulkhead change.
    assert_eq!(bulkhead.snapshot().max_concurrent, 2);
    assert_eq!(policies.generation(), 0);

    // An invalid document is refused before anything changes.
    let e = policies
        .apply_toml(&GOOD.replace("max_concurrent = 2", "max_concurrent = 0"))
        .unwrap_err();
    assert_eq!(e.fields(), ["policies.freight.bulkhead.max_concurrent"]);
    assert_eq!(bulkhead.snapshot().max_concurrent, 2);
}

#[tokio::test(start_paused = true)]
async fn a_fallback_step_timeout_must_name_a_step_of_the_built_fallback() {
    let policies = Policies::from_toml(GOOD).unwrap();
    let fallback = policies
        .fallback("freight", |b| {
            b.step("cache", Duration::from_millis(100), |_req| async {
                Err::<http::Response<()>, BoxError>("miss".into())
            })
            .step_unavailable("no-quote", "no quote")
        })
        .unwrap();
    let handle = fallback.handle();
    let with_timeout = |step: &str| {
        GOOD.replace(
            "on_rejections = [\"circuit_open\", \"bulkhead_full\"]",
            &format!(
                "on_rejections = [\"circuit_open\"]\nstep_timeouts = [{{ step = \"{step}\", timeout = \"50ms\" }}]"
            ),
        )
    };
    let e = policies.apply_toml(&with_timeout("cahce")).unwrap_err();
    assert_eq!(
        e.fields(),
        ["policies.freight.fallback.step_timeouts[0].step"]
    );
    assert_eq!(
        handle.snapshot().step("cache").unwrap().timeout,
        Some(Duration::from_millis(100))
    );

    policies.apply_toml(&with_timeout("cache")).unwrap();
    assert_eq!(
        handle.snapshot().step("cache").unwrap().timeout,
        Some(Duration::from_millis(50))
    );
    assert_eq!(
        handle.config().on_rejections.iter().collect::<Vec<_>>(),
        [RejectionKind::CircuitOpen]
    );
    policies.revert();
    assert_eq!(
        handle.snapshot().step("cache").unwrap().timeout,
        Some(Duration::from_millis(100))
    );
}

#[tokio::test(start_paused = true)]
async fn a_layer_built_after_a_change_starts_with_the_document_in_force_and_reverts_to_the_first() {
    let policies = Policies::from_toml(GOOD).unwrap();
    policies
        .apply_toml(&GOOD.replace("max_concurrent = 2", "max_concurrent = 6"))
        .unwrap();
    let _layer = policies.bulkhead("freight").unwrap();
    let bulkhead = policies.handles("freight").unwrap().bulkhead.unwrap();
    assert_eq!(bulkhead.snapshot().max_concurrent, 6);
    policies.revert();
    assert_eq!(bulkhead.snapshot().max_concurrent, 2);
}

#[tokio::test(start_paused = true)]
async fn reload_reads_the_file_again() {
    let file = TempFile::with(GOOD);
    let policies = Policies::load(&file.0).unwrap();
    let _svc = freight_stack(&policies);
    let bulkhead = policies.handles("freight").unwrap().bulkhead.unwrap();
    file.write(&GOOD.replace("max_concurrent = 2", "max_concurrent = 3"));
    policies.reload().unwrap();
    assert_eq!(bulkhead.snapshot().max_concurrent, 3);
    assert_eq!(
        policies.snapshot().file.as_deref(),
        Some(&*file.0.display().to_string())
    );

    file.write(&GOOD.replace("max_concurrent = 2", "max_concurrent = 0"));
    let e = policies.reload().unwrap_err();
    assert!(
        e.to_string().starts_with(&file.0.display().to_string()),
        "{e}"
    );
    assert_eq!(bulkhead.snapshot().max_concurrent, 3);
}

/// Errors inside an inline table, where the parser points at the whole table.
const INLINE: &[(&str, &str)] = &[
    (
        "[policies.freight.breaker]\npolicy = { kind = \"count_window\", size = \"ten\", min_calls = 4, failure_rate = 0.5 }\n",
        "policies.freight.breaker.policy.size",
    ),
    (
        "[policies.freight.breaker]\npolicy = { kind = \"count_window\", size = 10, failure_rate = 0.5 }\n",
        "policies.freight.breaker.policy.min_calls",
    ),
    (
        "[policies.freight.breaker]\npolicy = { kind = \"count_window\", sise = 10, min_calls = 4, failure_rate = 0.5 }\n",
        "policies.freight.breaker.policy.sise",
    ),
];

#[test]
fn an_error_inside_an_inline_policy_table_names_the_inner_field() {
    for (text, field) in INLINE {
        let e = PolicyDocument::from_toml(text).unwrap_err();
        assert_eq!(e.fields(), [*field], "{text}: {e}");
    }
}

#[test]
fn a_document_nested_too_deep_names_its_position() {
    let text = format!(
        "[policies.q]\ndeadline = \"1s\"\n{} = 1\n",
        vec!["a"; 20_000].join(".")
    );
    let e = PolicyDocument::from_toml(&text).unwrap_err();
    let LoadError::Malformed { line_column, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(*line_column, Some((3, 1)), "{e}");
    assert!(e.to_string().contains("nested deeper"), "{e}");
}

// ---------------------------------------------------------------------------
// Shadow mode in the document.

const SHADOWED: &str = r#"
[policies.freight]
deadline = "300ms"
deadline_shadow = true
bulkhead = { max_concurrent = 2, shadow = true }
breaker = { shadow = true }

[policies.assistant]
degradation = { shadow = true }
"#;

#[test]
fn shadow_settings_load_and_a_bad_one_is_named() {
    let doc = PolicyDocument::from_toml(SHADOWED).unwrap();
    let freight = &doc.policies["freight"];
    assert!(freight.deadline_shadow);
    assert!(freight.bulkhead.unwrap().shadow);
    assert!(freight.breaker.as_ref().unwrap().shadow);
    assert!(
        doc.policies["assistant"]
            .degradation
            .as_ref()
            .unwrap()
            .shadow
    );
    // Left out, every layer enforces.
    let good = PolicyDocument::from_toml(GOOD).unwrap();
    assert!(!good.policies["freight"].deadline_shadow);
    assert!(!good.policies["freight"].breaker.as_ref().unwrap().shadow);

    for (text, field) in [
        (
            "[policies.freight.breaker]\nshadow = \"yes\"\n",
            "policies.freight.breaker.shadow",
        ),
        (
            "[policies.freight.bulkhead]\nshadow = 1\n",
            "policies.freight.bulkhead.shadow",
        ),
        (
            "[policies.freight]\ndeadline = \"1s\"\ndeadline_shadow = \"on\"\n",
            "policies.freight.deadline_shadow",
        ),
        (
            "[policies.freight.degradation]\nshadows = true\n",
            "policies.freight.degradation.shadows",
        ),
    ] {
        let (fields, message) = refused(text);
        assert_eq!(fields, [field], "{text}: {message}");
    }
    // A deadline shadow with no deadline to shadow.
    let (fields, message) = refused("[policies.freight]\ndeadline_shadow = true\nbreaker = {}\n");
    assert_eq!(fields, ["policies.freight.deadline_shadow"], "{message}");
    assert!(message.contains("needs a `deadline`"), "{message}");
}

#[tokio::test(start_paused = true)]
async fn shadow_settings_reach_the_layers_and_change_at_run_time() {
    let policies = Policies::from_toml(SHADOWED).unwrap();
    let deadline = policies.deadline("freight").unwrap();
    let _bulkhead = policies.bulkhead("freight").unwrap();
    let _breaker = policies.circuit_breaker("freight", |b| b).unwrap();
    // A second deadline layer of the policy shares the first one's switch.
    let again = policies.deadline("freight").unwrap();
    assert!(deadline.handle().is_shadow() && again.handle().is_shadow());
    let handles = policies.handles("freight").unwrap();
    assert!(handles.deadline.as_ref().unwrap().is_shadow());
    assert!(handles.bulkhead.as_ref().unwrap().is_shadow());
    assert!(handles.breaker.as_ref().unwrap().is_shadow());

    // A document that enforces: applied through the handles, keeping their state.
    let enforcing = SHADOWED
        .replace("deadline_shadow = true\n", "")
        .replace(", shadow = true }", " }")
        .replace("breaker = { shadow = true }", "breaker = {}");
    policies.apply_toml(&enforcing).unwrap();
    assert!(!again.handle().is_shadow());
    assert!(!handles.bulkhead.as_ref().unwrap().is_shadow());
    assert!(!handles.breaker.as_ref().unwrap().is_shadow());
    let snapshot = policies.snapshot();
    assert_eq!(
        snapshot.policies["freight"]
            .deadline
            .as_ref()
            .map(|d| d.shadow),
        Some(false)
    );
    // Back to the start-up document: shadow again.
    policies.revert();
    assert!(deadline.handle().is_shadow());
    assert!(handles.breaker.as_ref().unwrap().is_shadow());
}

/// Whether the dotted `path` (`routes."/quote"`, `fallback.on_rejections[0]`) is a
/// key or an item of the TOML document `text`.
fn in_document(text: &str, path: &str) -> bool {
    let mut value = toml::Value::Table(toml::from_str(text).unwrap());
    let mut rest = path;
    while !rest.is_empty() {
        let (key, after) = match rest.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"').unwrap();
                (&quoted[..end], &quoted[end + 1..])
            }
            None => {
                let end = rest.find(['.', '[']).unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        let Some(next) = value.get(key) else {
            return false;
        };
        value = next.clone();
        rest = after;
        while let Some(indexed) = rest.strip_prefix('[') {
            let end = indexed.find(']').unwrap();
            let Some(item) = value.get(indexed[..end].parse::<usize>().unwrap()) else {
                return false;
            };
            value = item.clone();
            rest = &indexed[end + 1..];
        }
        rest = rest.strip_prefix('.').unwrap_or(rest);
    }
    true
}

#[test]
fn every_field_named_in_an_error_is_in_the_document() {
    let texts = MALFORMED
        .iter()
        .map(|(text, _, _)| *text)
        .chain(INVALID.iter().chain(INLINE).map(|(text, _)| *text))
        // A syntax error names no field; the others must name one.
        .filter(|text| toml::from_str::<toml::Table>(text).is_ok());
    for text in texts {
        let e = PolicyDocument::from_toml(text).unwrap_err();
        let fields = e.fields();
        assert!(!fields.is_empty(), "{text}: names no field: {e}");
        for field in fields {
            // A missing field is named where it belongs: its table is in the document.
            let missing = e.to_string().contains("missing field");
            let written = match field.rsplit_once('.') {
                Some((table, _)) if missing => table,
                _ => field,
            };
            assert!(
                in_document(text, written),
                "{text}: `{field}` is not in it: {e}"
            );
        }
    }
}

#[test]
fn every_section_key_is_the_field_the_document_reads() {
    use seawall::config::Section;
    for section in [
        Section::Fallback,
        Section::Degradation,
        Section::Bulkhead,
        Section::Breaker,
    ] {
        let text = format!("[policies.p.{}]\n", section.key());
        let doc = PolicyDocument::from_toml(&text).unwrap();
        assert_eq!(doc.policies["p"].sections(), [section], "{text}");
    }
}
