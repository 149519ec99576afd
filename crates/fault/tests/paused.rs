//! The fault layer in paused time: rates exactly (the draws are given), expiry,
//! each kind of fault, the marks, and configuration errors that name the field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// The HTTP faults and the metrics need their features (`cargo test --all-features`).
#![cfg(all(feature = "http", feature = "metrics"))]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use seawall_core::{BoxError, Classify, Deadline, ErrorRef, ErrorsAsFailures, Outcome};
use seawall_fault::{
    rehearsal, Fault, FaultConfig, FaultKind, FaultLayer, Injected, InjectedFault, InjectionConfig,
    MAX_INJECTION, REHEARSAL,
};
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};

const MINUTE: Duration = Duration::from_secs(60);

/// An inner service that counts its calls and answers at once.
fn counting() -> (
    Arc<AtomicUsize>,
    impl Service<
            u32,
            Response = u32,
            Error = Infallible,
            Future = std::future::Ready<Result<u32, Infallible>>,
        > + Clone,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let svc = service_fn(move |n: u32| {
        seen.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok::<_, Infallible>(n))
    });
    (calls, svc)
}

/// Draws 0.00, 0.01, … 0.99, then again: a rate of p % fires on exactly p of 100.
fn hundredths() -> impl FnMut() -> f64 + Send + 'static {
    let mut i = 0u32;
    move || {
        let x = f64::from(i % 100) / 100.0;
        i += 1;
        x
    }
}

#[tokio::test(start_paused = true)]
async fn a_rate_injects_exactly_its_share_of_the_calls() {
    let layer = FaultLayer::builder("freight")
        .random(hundredths())
        .build()
        .unwrap();
    let handle = layer.handle();
    handle
        .inject(InjectionConfig::lasting(&Fault::Reset, MINUTE).percent(25.0))
        .unwrap();
    let (calls, inner) = counting();
    let mut svc = layer.layer(inner);
    let mut failed = 0;
    for n in 0..200 {
        match svc.ready().await.unwrap().call(n).await {
            Ok(answer) => assert_eq!(answer, n),
            Err(e) => {
                let injected = Injected::find(&*e).expect("marked");
                assert_eq!(injected.kind(), FaultKind::Reset);
                assert_eq!(injected.policy(), "freight");
                let io = e
                    .source()
                    .unwrap()
                    .downcast_ref::<std::io::Error>()
                    .unwrap();
                assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
                failed += 1;
            }
        }
    }
    assert_eq!(failed, 50);
    // An injected transport error never reaches the dependency.
    assert_eq!(calls.load(Ordering::SeqCst), 150);
    assert_eq!(handle.snapshot().injections[0].injected, 50);
}

#[tokio::test(start_paused = true)]
async fn a_seeded_rate_repeats_call_for_call() {
    let run = || async {
        let layer = FaultLayer::builder("freight").seed(42).build().unwrap();
        layer
            .handle()
            .inject(InjectionConfig::lasting(&Fault::Refused, MINUTE).percent(30.0))
            .unwrap();
        let (_, inner) = counting();
        let mut svc = layer.layer(inner);
        let mut pattern = Vec::new();
        for n in 0..100 {
            pattern.push(svc.ready().await.unwrap().call(n).await.is_err());
        }
        pattern
    };
    let (a, b) = (run().await, run().await);
    assert_eq!(a, b);
    let fired = a.iter().filter(|x| **x).count();
    assert!(fired > 0 && fired < 100, "{fired}");
}

#[tokio::test(start_paused = true)]
async fn an_injection_turns_itself_off_at_its_expiry() {
    let layer = FaultLayer::new("freight", FaultConfig::new()).unwrap();
    let handle = layer.handle();
    let (_, inner) = counting();
    let mut svc = layer.layer(inner);
    handle
        .inject(InjectionConfig::lasting(&Fault::Refused, MINUTE))
        .unwrap();
    assert!(svc.ready().await.unwrap().call(1).await.is_err());
    tokio::time::advance(MINUTE - Duration::from_millis(10)).await;
    assert!(svc.ready().await.unwrap().call(2).await.is_err());
    assert!(handle.is_armed());
    tokio::time::advance(Duration::from_millis(10)).await;
    assert_eq!(svc.ready().await.unwrap().call(3).await.unwrap(), 3);
    assert!(!handle.is_armed());
    assert!(handle.snapshot().injections.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_added_latency_holds_the_answer_back() {
    let layer = FaultLayer::new("freight", FaultConfig::new()).unwrap();
    layer
        .handle()
        .inject(InjectionConfig::lasting(
            &Fault::latency(Duration::from_millis(800)),
            MINUTE,
        ))
        .unwrap();
    let (calls, inner) = counting();
    let svc = layer.layer(inner);
    let start = Instant::now();
    assert_eq!(svc.oneshot(7).await.unwrap(), 7);
    assert_eq!(start.elapsed(), Duration::from_millis(800));
    // The dependency got the request, on time.
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_hang_lasts_until_the_callers_deadline_or_its_bound() {
    let layer = FaultLayer::new("freight", FaultConfig::new()).unwrap();
    layer
        .handle()
        .inject(InjectionConfig::lasting(
            &Fault::Hang {
                at_most: Duration::from_secs(5),
            },
            MINUTE,
        ))
        .unwrap();
    let (calls, inner) = counting();
    let mut svc = layer.layer(inner);

    // With a deadline 300 ms away: the hang ends with it.
    let start = Instant::now();
    let deadline = Deadline::after(start, Duration::from_millis(300));
    let call = deadline.sync_scope(|| svc.call(1));
    let err = call.await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(300));
    assert_eq!(Injected::find(&*err).unwrap().kind(), FaultKind::Hang);

    // Without one: the bound.
    let start = Instant::now();
    let err = svc.ready().await.unwrap().call(2).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    let io = err
        .source()
        .unwrap()
        .downcast_ref::<std::io::Error>()
        .unwrap();
    assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn an_injection_with_a_key_touches_only_that_key() {
    let layer = FaultLayer::new("suppliers", FaultConfig::new())
        .unwrap()
        .keyed(|n: &u32| Some(if n.is_multiple_of(2) { "even" } else { "odd" }.to_owned()));
    layer
        .handle()
        .inject(InjectionConfig::lasting(&Fault::Refused, MINUTE).key("odd"))
        .unwrap();
    let (_, inner) = counting();
    let mut svc = layer.layer(inner);
    for n in 0..10 {
        let answer = svc.ready().await.unwrap().call(n).await;
        assert_eq!(answer.is_err(), n % 2 == 1, "{n}");
    }
}

type Answer = std::future::Ready<Result<http::Response<Full<Bytes>>, Infallible>>;

fn http_supplier() -> impl Service<
    http::Request<()>,
    Response = http::Response<Full<Bytes>>,
    Error = Infallible,
    Future = Answer,
> + Clone {
    service_fn(|_req: http::Request<()>| {
        std::future::ready(Ok(http::Response::new(Full::new(Bytes::from_static(
            b"{\"price_cents\":1250}",
        )))))
    })
}

fn get(path: &str) -> http::Request<()> {
    http::Request::get(format!("http://freight.internal{path}"))
        .body(())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_http_status_is_answered_for_the_matching_route_only() {
    let layer = FaultLayer::new("freight", FaultConfig::new())
        .unwrap()
        .http();
    layer
        .handle()
        .inject(
            InjectionConfig::lasting(
                &Fault::HttpStatus(http::StatusCode::SERVICE_UNAVAILABLE),
                MINUTE,
            )
            .route("/quote"),
        )
        .unwrap();
    let mut svc = layer.layer(http_supplier());
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(get("/quote?to=PT"))
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    let mark = res.extensions().get::<InjectedFault>().unwrap();
    assert_eq!(mark.kind, FaultKind::HttpStatus);
    assert_eq!(&*mark.policy, "freight");
    assert!(res
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .is_empty());

    let res = svc
        .ready()
        .await
        .unwrap()
        .call(get("/track"))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.extensions().get::<InjectedFault>().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_slow_body_waits_before_each_frame_and_a_failing_one_is_cut() {
    let layer = FaultLayer::new("freight", FaultConfig::new())
        .unwrap()
        .http();
    let handle = layer.handle();
    let id = handle
        .inject(InjectionConfig::lasting(
            &Fault::SlowBody {
                per_frame: Duration::from_millis(500),
            },
            MINUTE,
        ))
        .unwrap();
    let mut svc = layer.layer(http_supplier());
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(get("/quote"))
        .await
        .unwrap();
    let start = Instant::now();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"{\"price_cents\":1250}");
    // One data frame, then the end: each waited.
    assert_eq!(start.elapsed(), Duration::from_millis(1000));
    assert!(handle.stop(id));

    handle
        .inject(InjectionConfig::lasting(
            &Fault::FailingBody { after_bytes: 4 },
            MINUTE,
        ))
        .unwrap();
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(get("/quote"))
        .await
        .unwrap();
    assert!(res.extensions().get::<InjectedFault>().is_some());
    let err = res.into_body().collect().await.unwrap_err();
    assert_eq!(
        Injected::find(&*err).unwrap().kind(),
        FaultKind::FailingBody
    );
}

#[tokio::test(start_paused = true)]
async fn a_grpc_status_is_a_trailers_only_answer() {
    let layer = FaultLayer::new("freight", FaultConfig::new())
        .unwrap()
        .http();
    layer
        .handle()
        .inject(InjectionConfig::lasting(&Fault::GrpcStatus(14), MINUTE))
        .unwrap();
    let res = layer
        .layer(http_supplier())
        .oneshot(get("/freight.Quotes/Get"))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["grpc-status"], "14");
    assert_eq!(res.headers()["content-type"], "application/grpc");
}

#[tokio::test(start_paused = true)]
async fn http_faults_never_fire_on_a_layer_for_other_requests() {
    let layer = FaultLayer::new("freight", FaultConfig::new()).unwrap();
    layer
        .handle()
        .inject(InjectionConfig::lasting(
            &Fault::HttpStatus(http::StatusCode::BAD_GATEWAY),
            MINUTE,
        ))
        .unwrap();
    let (calls, inner) = counting();
    assert_eq!(layer.layer(inner).oneshot(5).await.unwrap(), 5);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn the_rehearsal_classifier_keeps_the_outcome_and_names_the_reason() {
    let classifier = rehearsal(ErrorsAsFailures);
    let layer = FaultLayer::new("freight", FaultConfig::new()).unwrap();
    layer
        .handle()
        .inject(InjectionConfig::lasting(&Fault::Refused, MINUTE))
        .unwrap();
    let (_, inner) = counting();
    let err = tokio_block_on(layer.layer(inner).oneshot(1)).unwrap_err();
    let input = Err::<&http::Response<()>, _>(ErrorRef::from(&*err));
    assert_eq!(classifier.classify(input), Outcome::Failure);
    assert_eq!(classifier.reason(input, Outcome::Failure), Some(REHEARSAL));

    let real: BoxError = "connection refused".into();
    let input = Err::<&http::Response<()>, _>(ErrorRef::from(&*real));
    assert_eq!(classifier.reason(input, Outcome::Failure), None);

    let mut marked = http::Response::new(());
    marked.extensions_mut().insert(InjectedFault {
        kind: FaultKind::Latency,
        policy: "freight".into(),
    });
    assert_eq!(
        classifier.reason(Ok(&marked), Outcome::Success),
        Some(REHEARSAL)
    );
}

fn tokio_block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn metrics_carry_the_rehearsal_label() {
    let series = seawall_test_support::Series::default();
    metrics::with_local_recorder(&series, || {
        let layer = FaultLayer::new("freight", FaultConfig::new()).unwrap();
        layer
            .handle()
            .inject(InjectionConfig::lasting(&Fault::Refused, MINUTE))
            .unwrap();
        let (_, inner) = counting();
        let mut svc = layer.layer(inner);
        for n in 0..3 {
            assert!(tokio_block_on(svc.call(n)).is_err());
        }
    });
    assert_eq!(
        series.counter("seawall_fault_injected_total{fault=refused,name=freight,rehearsal=true}"),
        3
    );
    // Every series of the layer says it is a rehearsal.
    assert!(series.names().iter().all(|n| n.contains("rehearsal=true")));
    assert_eq!(
        series.gauge("seawall_fault_injections_active{name=freight,rehearsal=true}"),
        1.0
    );
}

#[test]
fn an_expiry_past_or_beyond_a_day_is_refused_naming_the_field() {
    let now = SystemTime::now();
    let refused = |until: SystemTime| {
        FaultConfig::new()
            .with(InjectionConfig::new(&Fault::Refused, until))
            .validate_at(now)
            .unwrap_err()
    };
    let past = refused(now - Duration::from_secs(1));
    assert_eq!(past.field(), "injections[0].until");
    assert!(past.problem().contains("past"), "{past}");
    let far = refused(now + MAX_INJECTION + Duration::from_secs(1));
    assert_eq!(far.field(), "injections[0].until");
    assert!(FaultConfig::new()
        .with(InjectionConfig::new(&Fault::Refused, now + MAX_INJECTION))
        .validate_at(now)
        .is_ok());
    // A layer is never built with one.
    assert!(FaultLayer::new(
        "freight",
        FaultConfig::new().with(InjectionConfig::new(&Fault::Refused, now - MINUTE))
    )
    .is_err());
}

#[test]
fn parameters_are_checked_per_kind() {
    let until = SystemTime::now() + MINUTE;
    let field = |c: InjectionConfig| {
        c.validate_at(SystemTime::now())
            .unwrap_err()
            .field()
            .to_owned()
    };
    let mut c = InjectionConfig::new(&Fault::Refused, until);
    c.status = Some(503);
    assert_eq!(field(c), "status");
    let mut c = InjectionConfig::new(&Fault::latency(Duration::from_millis(10)), until);
    c.delay = None;
    assert_eq!(field(c), "delay");
    let mut c = InjectionConfig::new(&Fault::latency(Duration::from_millis(10)), until);
    c.delay_max = Some(Duration::from_millis(5));
    assert_eq!(field(c), "delay_max");
    assert_eq!(
        field(InjectionConfig::new(&Fault::GrpcStatus(0), until)),
        "grpc_code"
    );
    assert_eq!(
        field(InjectionConfig::new(&Fault::GrpcStatus(17), until)),
        "grpc_code"
    );
    let mut c = InjectionConfig::new(&Fault::Refused, until);
    c.kind = FaultKind::HttpStatus;
    c.status = Some(99);
    assert_eq!(field(c), "status");
    for percent in [-1.0, 100.5, f64::NAN] {
        assert_eq!(
            field(InjectionConfig::new(&Fault::Reset, until).percent(percent)),
            "percent"
        );
    }
    assert_eq!(
        field(InjectionConfig::new(&Fault::Reset, until).route("quote")),
        "route"
    );
}

#[cfg(feature = "serde")]
#[test]
fn injections_read_from_toml_with_an_rfc3339_expiry() {
    let until = humantime_in(MINUTE);
    let text = format!(
        r#"
        [[injections]]
        kind = "http_status"
        status = 503
        percent = 50
        until = "{until}"
        route = "/quote"

        [[injections]]
        kind = "latency"
        delay = "800ms"
        delay_max = "1s"
        until = "{until}"
        "#
    );
    let config: FaultConfig = toml::from_str(&text).unwrap();
    config.validate().unwrap();
    assert_eq!(config.injections.len(), 2);
    assert_eq!(
        config.injections[0].fault().unwrap(),
        Fault::HttpStatus(http::StatusCode::SERVICE_UNAVAILABLE)
    );
    assert_eq!(config.injections[1].percent, 100.0);
    // Another offset than UTC is refused rather than misread.
    let text = "[[injections]]\nkind = \"reset\"\nuntil = \"2026-12-07T20:00:00+01:00\"\n";
    assert!(toml::from_str::<FaultConfig>(text).is_err());
    // An expiry is mandatory.
    assert!(toml::from_str::<FaultConfig>("[[injections]]\nkind = \"reset\"\n").is_err());
}

#[cfg(feature = "serde")]
fn humantime_in(d: Duration) -> String {
    let t = SystemTime::now() + d;
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    // Through the crate's own parser and back: an RFC 3339 time to the second.
    let s = seawall_fault_rfc3339(secs);
    assert!(seawall_fault::rfc3339::parse(&s).is_ok(), "{s}");
    s
}

/// `secs` after the epoch as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days).
#[cfg(feature = "serde")]
fn seawall_fault_rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
