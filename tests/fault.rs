//! Fault injection end to end: each kind of fault against a real hyper server and a
//! real tonic server over 127.0.0.1 (the assertions are marks and counts, which hold
//! under any load); injections started through the admin routes and from a policy
//! file, in paused time, ending by themselves; refused control requests that change
//! nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../examples/shared/grpc_quote.rs"]
mod grpc_quote;
mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::Router;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use seawall::admin::{self, AdminToken};
use seawall::config::{LoadError, Policies};
use seawall::core::{find_rejection, BoxError, DeadlineLayer, RejectionKind};
use seawall::fault::{Fault, FaultKind, FaultLayer, Injected, InjectedFault, InjectionConfig};
use seawall::LayerHandle;
use tower::{Layer, Service, ServiceExt};

use grpc_quote::{QuoteRequest, QuotesClient, QuotesServer};

const MINUTE: Duration = Duration::from_secs(60);
/// A fault table without injections: the policy may be rehearsed from the admin routes.
const NO_INJECTION: &str = "[policies.freight.fault]\n";
const TOKEN: &str = "rehearsal-token-0123456789";

/// A supplier that quotes, counting what it receives.
async fn supplier() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let received = Arc::new(AtomicUsize::new(0));
    let seen = received.clone();
    let addr = support::serve_http1(move |_req| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                b"{\"price_cents\":1250}",
            ))))
        }
    })
    .await;
    (addr, received)
}

fn quote(addr: std::net::SocketAddr) -> Request<Empty<Bytes>> {
    Request::get(format!("http://{addr}/quote?to=PT-1000"))
        .body(Empty::new())
        .unwrap()
}

/// The hyper-util client behind an HTTP fault layer with `fault` injected.
fn faulty_client(
    fault: &Fault,
) -> impl Service<
    Request<Empty<Bytes>>,
    Response = Response<seawall::fault::FaultBody<hyper::body::Incoming>>,
    Error = BoxError,
> + Clone {
    let faults = FaultLayer::new("freight", Default::default())
        .unwrap()
        .http();
    faults
        .handle()
        .inject(InjectionConfig::lasting(fault, MINUTE).route("/quote"))
        .unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    faults.layer(client)
}

#[tokio::test]
async fn over_loopback_http_each_fault_is_injected_and_marked() {
    let (addr, received) = supplier().await;

    // An error status: the supplier is not called.
    let res = faulty_client(&Fault::HttpStatus(StatusCode::SERVICE_UNAVAILABLE))
        .oneshot(quote(addr))
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(
        res.extensions().get::<InjectedFault>().unwrap().kind,
        FaultKind::HttpStatus
    );
    assert_eq!(received.load(Ordering::SeqCst), 0);

    // Refused and reset: transport errors, the supplier not called.
    for (fault, io) in [
        (Fault::Refused, std::io::ErrorKind::ConnectionRefused),
        (Fault::Reset, std::io::ErrorKind::ConnectionReset),
    ] {
        let err = faulty_client(&fault)
            .oneshot(quote(addr))
            .await
            .unwrap_err();
        let injected = Injected::find(&*err).unwrap();
        assert_eq!(injected.kind(), fault.kind());
        let source = std::error::Error::source(injected).unwrap();
        assert_eq!(source.downcast_ref::<std::io::Error>().unwrap().kind(), io);
    }
    assert_eq!(received.load(Ordering::SeqCst), 0);

    // A hang: the caller's deadline ends it, the supplier is not called.
    let hang = DeadlineLayer::new(Duration::from_millis(50))
        .unwrap()
        .layer(faulty_client(&Fault::hang()));
    let err = hang.oneshot(quote(addr)).await.unwrap_err();
    assert!(
        find_rejection(&*err).map(|r| r.kind()) == Some(RejectionKind::DeadlineExceeded)
            || Injected::find(&*err).is_some_and(|i| i.kind() == FaultKind::Hang),
        "{err}"
    );
    assert_eq!(received.load(Ordering::SeqCst), 0);

    // A latency: the supplier answers, the answer is marked and intact.
    let res = faulty_client(&Fault::latency(Duration::from_millis(20)))
        .oneshot(quote(addr))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.extensions().get::<InjectedFault>().is_some());
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"{\"price_cents\":1250}");
    assert_eq!(received.load(Ordering::SeqCst), 1);

    // A slow body: every byte arrives, later.
    let res = faulty_client(&Fault::SlowBody {
        per_frame: Duration::from_millis(10),
    })
    .oneshot(quote(addr))
    .await
    .unwrap();
    assert!(res.body().is_faulted());
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"{\"price_cents\":1250}");

    // A failing body: headers on time, then the body is cut short.
    let res = faulty_client(&Fault::FailingBody { after_bytes: 5 })
        .oneshot(quote(addr))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let err = res.into_body().collect().await.unwrap_err();
    assert_eq!(
        Injected::find(&*err).unwrap().kind(),
        FaultKind::FailingBody
    );
    assert_eq!(received.load(Ordering::SeqCst), 3);

    // Another route is untouched.
    let track = Request::get(format!("http://{addr}/track"))
        .body(Empty::new())
        .unwrap();
    let res = faulty_client(&Fault::Refused).oneshot(track).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.extensions().get::<InjectedFault>().is_none());
    assert_eq!(received.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn over_loopback_grpc_each_fault_reaches_a_tonic_client() {
    let server = QuotesServer::default();
    let addr = server.serve().await.unwrap();
    let faults = FaultLayer::new("quotes", Default::default())
        .unwrap()
        .http();
    let handle = faults.handle();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let mut client = QuotesClient::new(faults.layer(channel));
    let request = || QuoteRequest {
        destination: "lisbon".into(),
    };

    // Nothing injected: a quote.
    assert!(client.get(request()).await.is_ok());
    assert_eq!(server.received(), 1);

    let id = handle
        .inject(InjectionConfig::lasting(&Fault::GrpcStatus(14), MINUTE))
        .unwrap();
    let status = client.get(request()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(handle.stop(id));

    // Refused, reset and a hang to its bound: errors, the server not called.
    for fault in [
        Fault::Refused,
        Fault::Reset,
        Fault::Hang {
            at_most: Duration::from_millis(20),
        },
    ] {
        let id = handle
            .inject(InjectionConfig::lasting(&fault, MINUTE))
            .unwrap();
        let status = client.get(request()).await.unwrap_err();
        assert_ne!(status.code(), tonic::Code::Ok, "{fault:?}");
        assert!(handle.stop(id));
    }
    assert_eq!(server.received(), 1);

    // A latency: the server answers, the answer carries the mark.
    let id = handle
        .inject(InjectionConfig::lasting(
            &Fault::latency(Duration::from_millis(10)),
            MINUTE,
        ))
        .unwrap();
    let reply = client.get(request()).await.unwrap();
    assert!(reply.extensions().get::<InjectedFault>().is_some());
    assert!(handle.stop(id));

    // A body cut short before its first byte: the message never arrives whole.
    handle
        .inject(InjectionConfig::lasting(
            &Fault::FailingBody { after_bytes: 0 },
            MINUTE,
        ))
        .unwrap();
    let status = client.get(request()).await.unwrap_err();
    assert_ne!(status.code(), tonic::Code::Ok);
    assert_eq!(server.received(), 3);
    handle.stop_all();
    let reply = client.get(request()).await.unwrap();
    assert!(reply.extensions().get::<InjectedFault>().is_none());
}

/// A policy document with a freight policy; `fault` is its fault table (an empty
/// one lets the admin routes inject).
fn document(fault: &str) -> String {
    format!(
        "[policies.freight]\nbreaker = {{}}\n{fault}\n[dependencies]\nfreight-supplier = \"freight\"\n"
    )
}

/// An RFC 3339 time `from_now` away (negative: in the past), to the second.
fn rfc3339(from_now: i64) -> String {
    let now = SystemTime::now();
    let t = if from_now >= 0 {
        now + Duration::from_secs(from_now.unsigned_abs())
    } else {
        now - Duration::from_secs(from_now.unsigned_abs())
    };
    // Through an injection's own serialisation: the crate writes RFC 3339.
    let config = InjectionConfig::new(&Fault::Reset, t);
    let text = toml::to_string(&seawall::fault::FaultConfig::default().with(config)).unwrap();
    text.split('"')
        .skip_while(|s| !s.ends_with("until = "))
        .nth(1)
        .unwrap()
        .to_owned()
}

fn admin_app(policies: &Policies) -> Router {
    Router::new().nest(
        "/admin",
        admin::router(policies.clone(), Some(AdminToken::new(TOKEN).unwrap())),
    )
}

async fn post(app: &Router, path: &str, token: Option<&str>) -> (StatusCode, String) {
    let mut req = Request::post(path);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The freight client of a policy: a fault layer in front of a dependency that
/// answers its input.
fn freight(policies: &Policies) -> impl Service<u32, Response = u32, Error = BoxError> + Clone {
    let faults = policies.fault("freight", |b| b.seed(1)).unwrap();
    faults.layer(tower::service_fn(
        |n: u32| async move { Ok::<_, BoxError>(n) },
    ))
}

#[tokio::test(start_paused = true)]
async fn an_injection_started_through_the_admin_route_ends_by_itself() {
    let policies = Policies::from_toml(&document(NO_INJECTION)).unwrap();
    let mut client = freight(&policies);
    let app = admin_app(&policies);

    let (status, body) = post(
        &app,
        "/admin/policies/freight/fault/inject?kind=refused&percent=100&for=90s",
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    let injection = &answer["fault"]["injections"][0];
    assert_eq!(injection["kind"], "refused");
    assert_eq!(injection["origin"], "operator");
    assert_eq!(injection["remaining"], "90000ms");

    let err = client.ready().await.unwrap().call(1).await.unwrap_err();
    assert!(Injected::find(&*err).is_some());

    tokio::time::advance(Duration::from_secs(90)).await;
    assert_eq!(client.ready().await.unwrap().call(2).await.unwrap(), 2);
    let snapshot = policies.snapshot();
    assert!(snapshot.policies["freight"]
        .fault
        .as_ref()
        .unwrap()
        .injections
        .is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_refused_control_request_changes_nothing() {
    let policies = Policies::from_toml(&document(NO_INJECTION)).unwrap();
    let mut client = freight(&policies);
    let app = admin_app(&policies);
    let inject = "/admin/policies/freight/fault/inject?kind=reset&for=10m";

    // No credentials, a wrong token.
    assert_eq!(post(&app, inject, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        post(&app, inject, Some("guess-guess-guess-guess")).await.0,
        StatusCode::FORBIDDEN
    );
    // An end already past, one too far, none at all, an unknown kind.
    let past = format!(
        "/admin/policies/freight/fault/inject?kind=reset&until={}",
        rfc3339(-60)
    );
    let (status, body) = post(&app, &past, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.contains("until"), "{body}");
    for bad in [
        "/admin/policies/freight/fault/inject?kind=reset&for=25h",
        "/admin/policies/freight/fault/inject?kind=reset",
        "/admin/policies/freight/fault/inject?kind=meteor&for=1m",
        "/admin/policies/freight/fault/inject?kind=http_status&for=1m",
    ] {
        let (status, body) = post(&app, bad, Some(TOKEN)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
    }
    // And the admin token alone cannot stop what is not there.
    assert_eq!(
        post(&app, "/admin/policies/freight/fault/stop?id=7", Some(TOKEN))
            .await
            .0,
        StatusCode::NOT_FOUND
    );

    let handles = policies.handles("freight").unwrap();
    assert!(handles.fault.unwrap().snapshot().injections.is_empty());
    for n in 0..5 {
        assert_eq!(client.ready().await.unwrap().call(n).await.unwrap(), n);
    }
}

#[tokio::test(start_paused = true)]
async fn an_operator_stops_one_injection_through_the_admin_route() {
    let policies = Policies::from_toml(&document(NO_INJECTION)).unwrap();
    let mut client = freight(&policies);
    let app = admin_app(&policies);
    let (status, body) = post(
        &app,
        "/admin/policies/freight/fault/inject?kind=latency&delay=2s&for=5m",
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let fault = policies.handles("freight").unwrap().fault.unwrap();
    let id = fault.snapshot().injections[0].id;
    let stop = format!("/admin/policies/freight/fault/stop?id={id}");
    assert_eq!(post(&app, &stop, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(fault.snapshot().injections.len(), 1);
    assert_eq!(post(&app, &stop, Some(TOKEN)).await.0, StatusCode::OK);
    assert!(fault.snapshot().injections.is_empty());
    let start = tokio::time::Instant::now();
    assert_eq!(client.ready().await.unwrap().call(3).await.unwrap(), 3);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_policy_file_injects_until_its_time_and_a_past_one_is_refused() {
    let table = |until: &str| {
        format!(
            "[[policies.freight.fault.injections]]\nkind = \"http_status\"\nstatus = 503\npercent = 100\nuntil = \"{until}\"\n"
        )
    };
    // Past: refused, naming the field; nothing is built.
    let err = Policies::from_toml(&document(&table(&rfc3339(-5)))).unwrap_err();
    assert!(matches!(err, LoadError::Invalid { .. }), "{err}");
    assert_eq!(
        err.fields(),
        ["policies.freight.fault.injections[0].until"],
        "{err}"
    );
    // More than a day ahead: refused too.
    let err = Policies::from_toml(&document(&table(&rfc3339(25 * 3600)))).unwrap_err();
    assert_eq!(err.fields(), ["policies.freight.fault.injections[0].until"]);

    // Ahead: in force from the start, on an HTTP client.
    let policies = Policies::from_toml(&document(&table(&rfc3339(120)))).unwrap();
    let faults = policies.fault("freight", |b| b).unwrap().http();
    let handle = faults.handle();
    let svc = faults.layer(tower::service_fn(|_req: Request<()>| async {
        Ok::<_, BoxError>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    }));
    let res = svc.clone().oneshot(Request::new(())).await.unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(
        handle.snapshot().injections[0].origin,
        seawall::fault::Origin::Config
    );

    // Applying a document whose table has no injection stops the file's at once;
    // one without the table is refused (a section added or removed needs a restart).
    let err = policies.apply_toml(&document("")).unwrap_err();
    assert!(matches!(err, LoadError::NeedsRestart { .. }), "{err}");
    assert_eq!(handle.snapshot().injections.len(), 1);
    policies.apply_toml(&document(NO_INJECTION)).unwrap();
    assert!(handle.snapshot().injections.is_empty());
    assert_eq!(
        svc.clone()
            .oneshot(Request::new(()))
            .await
            .unwrap()
            .status(),
        200
    );

    // Applying a document whose injection is past is refused whole.
    let err = policies
        .apply_toml(&document(&table(&rfc3339(-1))))
        .unwrap_err();
    assert_eq!(err.fields(), ["policies.freight.fault.injections[0].until"]);
    assert!(handle.snapshot().injections.is_empty());

    // Revert goes back to the start-up document, but its injection's time is
    // checked again: ahead still, so it is back in force …
    policies.revert();
    assert_eq!(handle.snapshot().injections.len(), 1);
    assert_eq!(handle.config().injections.len(), 1);
}

#[test]
fn the_fault_feature_is_off_by_default() {
    let manifest = include_str!("../Cargo.toml");
    let default = manifest
        .lines()
        .find(|l| l.starts_with("default = "))
        .unwrap();
    assert!(!default.contains("\"fault\""), "{default}");
}

/// The README's stack for rehearsing one's own dependency, over loopback: the
/// breaker's classifier wrapped in `rehearsal`, the fault layer innermost. The
/// injected 503s trip the breaker as real ones would, and the breaker's outcome
/// counters say they were a rehearsal; real answers carry no such reason.
#[test]
fn the_readme_stack_trips_on_injected_failures_and_counts_them_as_rehearsal() {
    use seawall::core::HttpStatus;
    use seawall::fault::rehearsal;
    use tower::ServiceBuilder;

    let series = seawall_test_support::Series::default();
    metrics::with_local_recorder(&series, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (addr, received) = supplier().await;
            let policies = Policies::from_toml(
                "[policies.freight]\nbreaker = { policy = { kind = \"count_window\", size = 4, min_calls = 4, failure_rate = 0.5 }, open_for = \"1m\" }\n[policies.freight.fault]\n",
            )
            .unwrap();
            let faults = policies.fault("freight", |b| b).unwrap().http();
            let breaker = policies
                .circuit_breaker("freight", |b| b.classifier(rehearsal(HttpStatus::default())))
                .unwrap();
            let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
            let stack = ServiceBuilder::new()
                .layer(breaker)
                .layer(faults.clone())
                .service(client);

            // Two real answers first: successes, no reason.
            for _ in 0..2 {
                let res = stack.clone().oneshot(quote(addr)).await.unwrap();
                assert_eq!(res.status(), 200);
            }
            faults
                .handle()
                .inject(InjectionConfig::lasting(
                    &Fault::HttpStatus(StatusCode::SERVICE_UNAVAILABLE),
                    MINUTE,
                ))
                .unwrap();
            for _ in 0..2 {
                let res = stack.clone().oneshot(quote(addr)).await.unwrap();
                assert_eq!(res.status(), 503);
            }
            let breaker = policies.handles("freight").unwrap().breaker.unwrap();
            assert_eq!(breaker.state(), seawall::circuit_breaker::State::Open);
            assert_eq!(received.load(Ordering::SeqCst), 2);
        });
    });
    assert_eq!(
        series.counter(
            "seawall_breaker_outcome_reasons_total{name=freight,outcome=failure,reason=rehearsal}"
        ),
        2,
        "{:#?}",
        series.names()
    );
    assert_eq!(
        series.counter(
            "seawall_breaker_outcome_reasons_total{name=freight,outcome=success,reason=rehearsal}"
        ),
        0
    );
    assert_eq!(
        series
            .counter("seawall_fault_injected_total{fault=http_status,name=freight,rehearsal=true}"),
        2
    );
}

/// The hyper-util client behind an HTTP fault layer, with `fault` injected on every
/// route if given.
fn client_with(
    fault: Option<&Fault>,
) -> impl Service<
    Request<Empty<Bytes>>,
    Response = Response<seawall::fault::FaultBody<hyper::body::Incoming>>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    let faults = FaultLayer::new("freight", Default::default())
        .unwrap()
        .http();
    if let Some(fault) = fault {
        faults
            .handle()
            .inject(InjectionConfig::lasting(fault, MINUTE))
            .unwrap();
    }
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    faults.layer(client)
}

/// Three calls to `addr` through a breaker held until each body ends (as an HTTP
/// client's is), each from its own task, then the transition they made.
async fn trip_through(
    client: impl Service<
            Request<Empty<Bytes>>,
            Response = Response<seawall::fault::FaultBody<hyper::body::Incoming>>,
            Error = BoxError,
            Future = impl Send,
        > + Clone
        + Send
        + 'static,
    addr: std::net::SocketAddr,
) -> seawall::circuit_breaker::CircuitBreakerEvent {
    use seawall::circuit_breaker::CircuitBreakerLayer;
    use seawall::core::HttpStatus;
    let breaker = CircuitBreakerLayer::builder("freight")
        .consecutive_failures(3)
        .classifier(seawall::fault::rehearsal(HttpStatus::default()))
        .build()
        .unwrap()
        .hold_until_body_end();
    let mut transitions = breaker.handle().subscribe();
    let service = breaker.layer(client);
    for _ in 0..3 {
        let call = service.clone().oneshot(quote(addr));
        tokio::spawn(async move {
            match call.await {
                Ok(res) => res.into_body().collect().await.map(|_| ()),
                Err(e) => Err(e),
            }
        })
        .await
        .unwrap()
        .ok();
    }
    transitions.recv().await.unwrap()
}

#[tokio::test]
async fn a_trip_completed_by_injected_failures_is_marked_as_a_rehearsal() {
    use seawall::circuit_breaker::State;
    let (addr, _) = supplier().await;
    // Injected 503s, decided at the headers.
    let t = trip_through(
        client_with(Some(&Fault::HttpStatus(StatusCode::SERVICE_UNAVAILABLE))),
        addr,
    )
    .await;
    assert_eq!(
        (t.from, t.to, t.rehearsal),
        (State::Closed, State::Open, true)
    );
    // Bodies cut short by the fault, decided when each body ends.
    let t = trip_through(
        client_with(Some(&Fault::FailingBody { after_bytes: 5 })),
        addr,
    )
    .await;
    assert_eq!(
        (t.from, t.to, t.rehearsal),
        (State::Closed, State::Open, true)
    );

    // A supplier that really answers 503: an incident, not a rehearsal.
    let failing = support::serve_http1(|_req| async {
        let mut res = Response::new(Full::new(Bytes::new()));
        *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        Ok::<_, Infallible>(res)
    })
    .await;
    let t = trip_through(client_with(None), failing).await;
    assert_eq!(
        (t.from, t.to, t.rehearsal),
        (State::Closed, State::Open, false)
    );
}

#[tokio::test]
async fn a_level_change_completed_by_injected_failures_is_marked_as_a_rehearsal() {
    use seawall::core::HttpStatus;
    use seawall::degradation::DegradationLayer;
    let (addr, received) = supplier().await;
    let degradation = DegradationLayer::builder("freight")
        .inner_level("direct")
        .level("spare", client_with(None))
        .consecutive_failures(2)
        .classifier(seawall::fault::rehearsal(HttpStatus::default()))
        .build()
        .unwrap();
    let mut changes = degradation.handle().subscribe();
    let service = degradation.layer(client_with(Some(&Fault::Refused)));
    for _ in 0..2 {
        let call = service.clone().oneshot(quote(addr));
        let err = tokio::spawn(call).await.unwrap().unwrap_err();
        assert!(Injected::find(&*err).is_some(), "{err}");
    }
    let change = changes.recv().await.unwrap();
    assert_eq!(
        (&*change.from.name, &*change.to.name, change.rehearsal),
        ("direct", "spare", true)
    );
    // The spare level reaches the real supplier.
    let res = service.oneshot(quote(addr)).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(received.load(Ordering::SeqCst), 1);
}
