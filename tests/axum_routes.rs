//! Per-route policies on a real axum server over loopback HTTP: isolation between
//! routes, the admin route's authorization, live reload keeping breaker state, and
//! the metrics endpoint listing every documented metric.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

mod support;
use support::TempFile;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, Route};
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use seawall::admin::{self, AdminToken};
use seawall::axum::FixedResponse;
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::CircuitBreakerLayer;
use seawall::config::Policies;
use seawall::core::{
    AdmissionAsFailure, DeadlineLayer, DeadlineRetry, HedgeLayer, HttpStatus, Jitter,
};
use seawall::degradation::DegradationLayer;
use seawall::fallback::{FallbackLayer, Rejections};
use seawall::ServiceBuilderExt;
use serde_json::Value;
use tokio::sync::Semaphore;
use tower::layer::util::{Identity, Stack};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

const TOKEN: &str = "test-admin-token-0123456789";

const DOCUMENT: &str = r#"
[policies.freight]
deadline = "30s"
bulkhead = { max_concurrent = 2, queue = { max_queue = 0, max_wait = "10ms" } }
breaker = { policy = { kind = "count_window", size = 4, min_calls = 4, failure_rate = 0.5 }, jitter = 0.0, open_for = "60s" }
fallback = { on_rejections = ["circuit_open", "bulkhead_full", "bulkhead_timeout", "deadline_exceeded"] }

[policies.recommendations]
deadline = "30s"
bulkhead = { max_concurrent = 2, queue = { max_queue = 0, max_wait = "10ms" } }
breaker = { policy = { kind = "consecutive_failures", threshold = 3 }, jitter = 0.0, open_for = "60s" }

[policies.assistant]
degradation = { failures_to_degrade = 2, min_dwell = "0s", probe_ratio = 1.0, probe_window = "0s", probe_successes_to_recover = 1 }

[routes]
"/quote" = "freight"
"/recommendations" = "recommendations"
"/assistant" = "assistant"
"#;

// ---------------------------------------------------------------------------
// What axum's `route_layer` asks of a layer, checked at compile time.

fn route_layer<L>(layer: L) -> L
where
    L: Layer<Route> + Clone + Send + Sync + 'static,
    L::Service: Service<Request, Error = Infallible> + Clone + Send + Sync + 'static,
    <L::Service as Service<Request>>::Response: IntoResponse + 'static,
    <L::Service as Service<Request>>::Future: Send + 'static,
{
    layer
}

#[test]
fn the_recommended_stacks_satisfy_route_layer() {
    // Built with the crates' builders, no document: respond → deadline → bulkhead → breaker.
    let respond = route_layer(
        ServiceBuilder::new()
            .respond()
            .deadline(DeadlineLayer::new(Duration::from_millis(300)).unwrap())
            .bulkhead(BulkheadLayer::builder("a").build().unwrap())
            .circuit_breaker(
                CircuitBreakerLayer::builder("a")
                    .jitter(0.0)
                    .classifier(HttpStatus::default())
                    .build()
                    .unwrap(),
            ),
    );
    // A fallback in HTTP server mode outermost instead.
    let fallback = route_layer(
        ServiceBuilder::new()
            .fallback(
                FallbackLayer::builder("b")
                    .on_rejections(Rejections::ALL)
                    .unavailable::<Response>("no answer")
                    .http_server()
                    .build()
                    .unwrap(),
            )
            .deadline(DeadlineLayer::new(Duration::from_millis(300)).unwrap())
            .bulkhead(BulkheadLayer::builder("b").build().unwrap())
            .circuit_breaker(
                CircuitBreakerLayer::builder("b")
                    .jitter(0.0)
                    .build()
                    .unwrap(),
            ),
    );
    // Degradation with a fixed last level, answered by RespondLayer.
    let degradation = route_layer(
        ServiceBuilder::new().respond().degradation(
            DegradationLayer::builder("c")
                .level("fixed", FixedResponse::<Body>::new(StatusCode::OK, "fixed"))
                .build()
                .unwrap(),
        ),
    );
    // And they really are accepted by axum, on one route each.
    let _app: Router = Router::new()
        .route("/a", get(|| async { "a" }).route_layer(respond))
        .route("/b", get(|| async { "b" }).route_layer(fallback))
        .route("/c", get(|| async { "c" }).route_layer(degradation));
}

// ---------------------------------------------------------------------------
// The application under test: dependencies in process, switchable.

const OK: u8 = 0;
const FAIL: u8 = 1;
const HANG: u8 = 2;

/// A dependency whose behaviour the test switches. A hanging call enters, then
/// waits for the gate.
struct Dependency {
    mode: AtomicU8,
    entered: Semaphore,
    gate: Semaphore,
}

impl Default for Dependency {
    fn default() -> Self {
        Self {
            mode: AtomicU8::new(OK),
            entered: Semaphore::new(0),
            gate: Semaphore::new(0),
        }
    }
}

impl Dependency {
    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    async fn call(&self, answer: &'static str) -> Response {
        match self.mode.load(Ordering::SeqCst) {
            FAIL => (StatusCode::BAD_GATEWAY, "dependency failed").into_response(),
            HANG => {
                self.entered.add_permits(1);
                let _permit = self.gate.acquire().await.unwrap();
                answer.into_response()
            }
            _ => answer.into_response(),
        }
    }

    /// Waits until `n` calls are hanging inside the dependency.
    async fn hanging(&self, n: u32) {
        self.entered.acquire_many(n).await.unwrap().forget();
    }

    fn release(&self) {
        self.gate.add_permits(1_000);
    }
}

#[derive(Clone, Default)]
struct Deps {
    freight: Arc<Dependency>,
    recommendations: Arc<Dependency>,
    llm: Arc<Dependency>,
}

const QUOTE: &str = "quote: 12.50 EUR";
const RECOMMENDED: &str = "for you: boots, jacket";
const ASSISTED: &str = "parcels take 2 days";
const CANNED: &str = "assistant busy; see the FAQ";
const CATALOGUE: &str = "catalogue: boots, jacket, tent";

fn policy(policies: &Policies, route: &str) -> String {
    policies.policy_for_route(route).unwrap()
}

/// A route's deadline, bulkhead and breaker (judging by HTTP status), outermost first.
type Guards =
    Stack<CircuitBreakerLayer<HttpStatus>, Stack<BulkheadLayer, Stack<DeadlineLayer, Identity>>>;

fn guards(policies: &Policies, policy: &str) -> Guards {
    ServiceBuilder::new()
        .deadline(policies.deadline(policy).unwrap())
        .bulkhead(policies.bulkhead(policy).unwrap())
        .circuit_breaker(
            policies
                .circuit_breaker(policy, |b| b.classifier(HttpStatus::default()))
                .unwrap(),
        )
        .into_inner()
}

fn app(policies: &Policies, deps: &Deps, token: Option<AdminToken>) -> Router {
    let freight = policy(policies, "/quote");
    let quote_stack = route_layer(
        ServiceBuilder::new()
            .fallback(
                policies
                    .fallback(&freight, |b| {
                        b.unavailable::<Response>("no valid quote").http_server()
                    })
                    .unwrap(),
            )
            .layer(guards(policies, &freight)),
    );
    let recs = policy(policies, "/recommendations");
    let recs_stack = route_layer(
        ServiceBuilder::new()
            .respond()
            .layer(guards(policies, &recs)),
    );
    let assistant = policy(policies, "/assistant");
    let assistant_stack = route_layer(
        ServiceBuilder::new().respond().degradation(
            policies
                .degradation(&assistant, |b| {
                    b.classifier(AdmissionAsFailure(HttpStatus::default()))
                        .seed(7)
                        .level("canned", FixedResponse::<Body>::new(StatusCode::OK, CANNED))
                })
                .unwrap(),
        ),
    );
    Router::new()
        .route(
            "/quote",
            get(|State(d): State<Deps>| async move { d.freight.call(QUOTE).await })
                .route_layer(quote_stack),
        )
        .route(
            "/recommendations",
            get(|State(d): State<Deps>| async move { d.recommendations.call(RECOMMENDED).await })
                .route_layer(recs_stack),
        )
        .route(
            "/assistant",
            get(|State(d): State<Deps>| async move { d.llm.call(ASSISTED).await })
                .route_layer(assistant_stack),
        )
        .route("/products", get(|| async { CATALOGUE }))
        .nest("/admin", admin::router(policies.clone(), token))
        .with_state(deps.clone())
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// An HTTP client over loopback.
#[derive(Clone)]
struct Client {
    addr: SocketAddr,
    http: hyper_util::client::legacy::Client<HttpConnector, Empty<Bytes>>,
}

#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    /// The whole of `res`, its body read to the end.
    async fn read(res: http::Response<hyper::body::Incoming>) -> Self {
        let (parts, body) = res.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Self {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect(&self.body)
    }

    /// Status and body: what a caller sees.
    fn seen(&self) -> (StatusCode, &str) {
        (self.status, &self.body)
    }
}

impl Client {
    fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            http: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn send(&self, method: Method, path: &str, auth: Option<&str>) -> Answer {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        if let Some(auth) = auth {
            req = req.header(header::AUTHORIZATION, auth);
        }
        let res = self
            .http
            .request(req.body(Empty::new()).unwrap())
            .await
            .unwrap();
        Answer::read(res).await
    }

    /// A POST with a body, on a client of its own (the shared one sends no body).
    async fn post_with_body(&self, path: &str, auth: &str, body: &'static str) -> Answer {
        let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .build_http::<http_body_util::Full<Bytes>>();
        let req = http::Request::post(format!("http://{}{path}", self.addr))
            .header(header::AUTHORIZATION, auth)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(http_body_util::Full::new(Bytes::from_static(
                body.as_bytes(),
            )))
            .unwrap();
        let res = http.request(req).await.unwrap();
        Answer::read(res).await
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, auth: Option<&str>) -> Answer {
        self.send(Method::POST, path, auth).await
    }

    async fn admin(&self, path: &str) -> Answer {
        self.post(&format!("/admin{path}"), Some(&format!("Bearer {TOKEN}")))
            .await
    }

    async fn snapshot(&self, policy: &str) -> Value {
        let a = self.get(&format!("/admin/policies/{policy}")).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        a.json()
    }

    /// The snapshot of `policy`'s bulkhead, as the admin route shows it.
    async fn bulkhead(&self, policy: &str) -> Value {
        self.snapshot(policy).await["bulkhead"].clone()
    }

    /// The state of `policy`'s breaker, as the admin route shows it.
    async fn breaker_state(&self, policy: &str) -> Value {
        self.snapshot(policy).await["breaker"]["state"].clone()
    }
}

/// The app of [`DOCUMENT`] over fresh dependencies, serving: the dependencies
/// and a client.
async fn started() -> (Deps, Client) {
    let policies = Policies::from_toml(DOCUMENT).unwrap();
    let deps = Deps::default();
    let client = start(&policies, &deps).await;
    (deps, client)
}

async fn start(policies: &Policies, deps: &Deps) -> Client {
    let token = AdminToken::new(TOKEN).unwrap();
    Client::new(serve(app(policies, deps, Some(token))).await)
}

/// What the routes that do not call the freight supplier answer.
async fn others(client: &Client) -> Vec<Answer> {
    let mut out = Vec::new();
    for path in ["/products", "/recommendations", "/assistant"] {
        out.push(client.get(path).await);
    }
    out
}

fn seen(answers: &[Answer]) -> Vec<(StatusCode, &str)> {
    answers.iter().map(Answer::seen).collect()
}

// ---------------------------------------------------------------------------
// Isolation.

#[tokio::test]
async fn a_failing_dependency_trips_its_routes_breaker_and_no_other_route_changes_its_answers() {
    let (deps, client) = started().await;

    let healthy = others(&client).await;
    assert_eq!(
        seen(&healthy),
        [
            (StatusCode::OK, CATALOGUE),
            (StatusCode::OK, RECOMMENDED),
            (StatusCode::OK, ASSISTED)
        ]
    );
    assert_eq!(client.get("/quote").await.seen(), (StatusCode::OK, QUOTE));

    deps.freight.set(FAIL);
    // The window holds one success: three more failures fill it at 3/4 failed.
    for _ in 0..3 {
        assert_eq!(client.get("/quote").await.status, StatusCode::BAD_GATEWAY);
    }
    let rejected = client.get("/quote").await;
    assert_eq!(rejected.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(rejected.headers[header::RETRY_AFTER], "60");
    assert!(!rejected.body.contains("freight"), "{}", rejected.body);
    assert_eq!(client.breaker_state("freight").await, "open");

    // Every other route answers exactly as before, interleaved with more failures.
    for _ in 0..3 {
        assert_eq!(seen(&others(&client).await), seen(&healthy));
        assert_eq!(
            client.get("/quote").await.status,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    let recs = client.snapshot("recommendations").await;
    assert_eq!(recs["breaker"]["state"], "closed");
    assert_eq!(recs["breaker"]["counters"]["failures"], 0);
    assert_eq!(recs["bulkhead"]["rejected_full"], 0);
}

#[tokio::test]
async fn a_hanging_dependency_fills_only_its_own_bulkhead() {
    let (deps, client) = started().await;
    let healthy = others(&client).await;

    deps.freight.set(HANG);
    let hung: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.get("/quote").await })
        })
        .collect();
    deps.freight.hanging(2).await;
    assert_eq!(client.bulkhead("freight").await["active"], 2);

    // The freight bulkhead is full: the next quote is answered at once, "no quote".
    let full = client.get("/quote").await;
    assert_eq!(full.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(client.bulkhead("freight").await["rejected_full"], 1);
    assert_eq!(
        client.snapshot("freight").await["fallback"]["triggered"][1],
        serde_json::json!({"trigger": "bulkhead_full", "count": 1})
    );
    // The other routes, with their own capacity, answer as before.
    assert_eq!(seen(&others(&client).await), seen(&healthy));

    deps.freight.release();
    for h in hung {
        assert_eq!(h.await.unwrap().seen(), (StatusCode::OK, QUOTE));
    }
    assert_eq!(client.bulkhead("freight").await["active"], 0);
    // The slow calls were no failures of the supplier: the breaker stayed closed.
    assert_eq!(client.breaker_state("freight").await, "closed");
}

// ---------------------------------------------------------------------------
// The admin route.

#[tokio::test]
async fn the_admin_route_reads_for_anyone_and_changes_only_with_the_token() {
    let (_, client) = started().await;

    let all = client.get("/admin/policies").await;
    assert_eq!(all.status, StatusCode::OK);
    assert_eq!(all.headers[header::CONTENT_TYPE], "application/json");
    let all = all.json();
    assert_eq!(all["generation"], 0);
    assert_eq!(all["policies"]["freight"]["breaker"]["state"], "closed");
    assert_eq!(
        all["policies"]["freight"]["config"]["bulkhead"]["max_concurrent"],
        2
    );
    assert_eq!(
        all["policies"]["assistant"]["degradation"]["level_name"],
        "full"
    );
    assert_eq!(all["routes"]["/quote"], "freight");

    let force_open = "/admin/policies/freight/breaker/force-open";
    let none = client.post(force_open, None).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    assert!(none.headers[header::WWW_AUTHENTICATE]
        .to_str()
        .unwrap()
        .starts_with("Bearer"));
    let basic = client.post(force_open, Some("Basic dXNlcjpwYXNz")).await;
    assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
    let wrong = client
        .post(force_open, Some("Bearer test-admin-token-0123456788"))
        .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    // Refused changes changed nothing.
    assert_eq!(client.breaker_state("freight").await, "closed");
    assert_eq!(client.get("/quote").await.seen(), (StatusCode::OK, QUOTE));

    // With the token: applied, and the answer is the new snapshot.
    let done = client.admin("/policies/freight/breaker/force-open").await;
    assert_eq!(done.status, StatusCode::OK);
    assert_eq!(done.json()["breaker"]["state"], "forced_open");
    assert_eq!(client.breaker_state("freight").await, "forced_open");
    assert_eq!(
        client.get("/quote").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let reset = client.admin("/policies/freight/breaker/reset").await;
    assert_eq!(reset.json()["breaker"]["state"], "closed");
    assert_eq!(client.get("/quote").await.seen(), (StatusCode::OK, QUOTE));

    // A degradation floor: the assistant answers from the canned level.
    let floor = "/policies/assistant/degradation/set-floor?level=canned";
    assert_eq!(
        client.post(&format!("/admin{floor}"), None).await.status,
        StatusCode::UNAUTHORIZED
    );
    let set = client.admin(floor).await;
    assert_eq!(set.status, StatusCode::OK);
    assert_eq!(set.json()["degradation"]["level_name"], "canned");
    assert_eq!(set.json()["degradation"]["floor"], 1);
    assert_eq!(
        client.get("/assistant").await.seen(),
        (StatusCode::OK, CANNED)
    );
    let cleared = client
        .admin("/policies/assistant/degradation/clear-floor")
        .await;
    assert_eq!(cleared.json()["degradation"]["floor"], Value::Null);

    // Mistakes are told apart: unknown level, unknown policy, unknown action.
    let bad_level = client
        .admin("/policies/assistant/degradation/force?level=turbo")
        .await;
    assert_eq!(bad_level.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad_level.body.contains("turbo"), "{}", bad_level.body);
    assert_eq!(
        client.admin("/policies/nope/breaker/reset").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        client
            .admin("/policies/freight/breaker/explode")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        client.get("/admin/policies/nope").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn the_admin_route_switches_shadow_mode_only_with_the_token() {
    let (deps, client) = started().await;

    // Trip the recommendations breaker: three failures in a row.
    deps.recommendations.set(FAIL);
    for _ in 0..3 {
        client.get("/recommendations").await;
    }
    deps.recommendations.set(OK);
    let open = client.get("/recommendations").await;
    assert_eq!(open.status, StatusCode::SERVICE_UNAVAILABLE);
    let breaker = &client.snapshot("recommendations").await["breaker"];
    assert_eq!(
        (breaker["state"].as_str(), breaker["shadow"].as_bool()),
        (Some("open"), Some(false))
    );

    let on = "/policies/recommendations/breaker/shadow-on";
    let refused = client.post(&format!("/admin{on}"), None).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let wrong = client
        .post(
            &format!("/admin{on}"),
            Some("Bearer test-admin-token-0123456788"),
        )
        .await;
    assert_eq!(wrong.status, StatusCode::FORBIDDEN);
    assert_eq!(
        client.get("/recommendations").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );

    let done = client.admin(on).await;
    assert_eq!(done.status, StatusCode::OK);
    assert_eq!(done.json()["breaker"]["shadow"], true);
    // Still open, but the call goes through and is counted.
    assert_eq!(
        client.get("/recommendations").await.seen(),
        (StatusCode::OK, RECOMMENDED)
    );
    let breaker = &client.snapshot("recommendations").await["breaker"];
    assert_eq!(breaker["state"], "open");
    assert_eq!(breaker["counters"]["shadow_rejections"], 1);

    let off = client
        .admin("/policies/recommendations/breaker/shadow-off")
        .await;
    assert_eq!(off.json()["breaker"]["shadow"], false);
    assert_eq!(
        client.get("/recommendations").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );

    // The other layers with a shadow mode; the fallback has none.
    for layer in ["deadline", "bulkhead"] {
        let on = client
            .admin(&format!("/policies/freight/{layer}/shadow-on"))
            .await;
        assert_eq!(on.status, StatusCode::OK, "{}", on.body);
        assert_eq!(on.json()[layer]["shadow"], true, "{layer}");
    }
    let on = client
        .admin("/policies/assistant/degradation/shadow-on")
        .await;
    assert_eq!(on.json()["degradation"]["shadow"], true);
    assert_eq!(
        client
            .admin("/policies/freight/fallback/shadow-on")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // Revert undoes every switch.
    let reverted = client.admin("/revert").await.json();
    let freight = &reverted["policies"]["freight"];
    assert_eq!(
        (
            &freight["deadline"]["shadow"],
            &freight["bulkhead"]["shadow"]
        ),
        (&Value::Bool(false), &Value::Bool(false))
    );
    assert_eq!(
        reverted["policies"]["assistant"]["degradation"]["shadow"],
        false
    );
}

#[tokio::test]
async fn without_a_configured_token_every_change_is_forbidden() {
    let policies = Policies::from_toml(DOCUMENT).unwrap();
    let client = Client::new(serve(app(&policies, &Deps::default(), None)).await);
    assert_eq!(client.get("/admin/policies").await.status, StatusCode::OK);
    for auth in [None, Some(format!("Bearer {TOKEN}"))] {
        let a = client
            .post(
                "/admin/policies/freight/breaker/force-open",
                auth.as_deref(),
            )
            .await;
        assert_eq!(a.status, StatusCode::FORBIDDEN);
    }
    assert_eq!(
        client.post("/admin/revert", None).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(client.breaker_state("freight").await, "closed");
}

#[tokio::test]
async fn the_level_parameter_is_percent_decoded() {
    let policies = Policies::from_toml(DOCUMENT).unwrap();
    let client = start(&policies, &Deps::default()).await;
    let set = client
        .admin("/policies/assistant/degradation/set-floor?level=can%6Eed")
        .await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.body);
    assert_eq!(set.json()["degradation"]["level_name"], "canned");
    // An unknown level is named decoded, as the operator meant it.
    let bad = client
        .admin("/policies/assistant/degradation/force?level=tur%62o")
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.body.contains("`turbo`"), "{}", bad.body);
    // Two levels are no level: the query is refused as malformed.
    let twice = client
        .admin("/policies/assistant/degradation/force?level=canned&level=full")
        .await;
    assert_eq!(twice.status, StatusCode::BAD_REQUEST, "{}", twice.body);
}

#[tokio::test]
async fn a_change_sent_with_a_body_is_refused_and_changes_nothing() {
    let policies = Policies::from_toml(DOCUMENT).unwrap();
    let client = start(&policies, &Deps::default()).await;
    let auth = format!("Bearer {TOKEN}");
    for (path, body) in [
        ("/admin/policies/freight/breaker/force-open", "{}"),
        (
            "/admin/policies/assistant/degradation/set-floor",
            "level=canned",
        ),
        ("/admin/revert", "please"),
    ] {
        let a = client.post_with_body(path, &auth, body).await;
        assert_eq!(a.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{path}");
        assert!(a.json()["error"].as_str().unwrap().contains("no body"));
    }
    let freight = client.snapshot("freight").await;
    assert_eq!(freight["breaker"]["state"], "closed");
    let assistant = client.snapshot("assistant").await;
    assert_eq!(assistant["degradation"]["floor"], Value::Null);
    assert_eq!(client.get("/admin/policies").await.json()["generation"], 0);
}

#[tokio::test]
async fn the_bulkhead_limit_is_forced_and_released_with_the_token_and_bad_limits_are_refused() {
    let (deps, client) = started().await;
    let force = "/admin/policies/freight/bulkhead/force?limit=1";
    let limit = |v: &Value| {
        (
            v["bulkhead"]["limit"].clone(),
            v["bulkhead"]["limit_forced"].clone(),
        )
    };

    // Without the token, or with another one: refused, nothing forced.
    assert_eq!(
        client.post(force, None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        client
            .post(force, Some("Bearer not-the-admin-token"))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        limit(&client.snapshot("freight").await),
        (2.into(), false.into())
    );

    // Bad limits: 422 naming the field, nothing forced.
    for (query, says) in [
        ("", "`limit`: needed"),
        ("?limit=many", "`limit`: must be a whole number"),
        ("?limit=-1", "`limit`: must be a whole number"),
        ("?limit=0", "`limit`: must be between 1 and 1048576"),
        ("?limit=1048577", "`limit`: must be between 1 and 1048576"),
    ] {
        let a = client
            .admin(&format!("/policies/freight/bulkhead/force{query}"))
            .await;
        assert_eq!(
            a.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{query}: {}",
            a.body
        );
        let error = a.json()["error"].as_str().unwrap().to_owned();
        assert!(error.contains(says), "{query}: {error}");
    }
    assert_eq!(
        limit(&client.snapshot("freight").await),
        (2.into(), false.into())
    );
    // Sent with a body: refused, nothing forced.
    let a = client
        .post_with_body(force, &format!("Bearer {TOKEN}"), "limit=1")
        .await;
    assert_eq!(a.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // An unknown action, a policy without a bulkhead: 404.
    let a = client.admin("/policies/freight/bulkhead/hold").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = client.admin("/policies/assistant/bulkhead/release").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);

    // Forced at 1 (percent-encoded like any query): the answer is the new snapshot,
    // and the bulkhead admits one call at a time.
    let a = client
        .admin("/policies/freight/bulkhead/force?limit=%31")
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(limit(&a.json()), (1.into(), true.into()));
    deps.freight.set(HANG);
    let hanging = tokio::spawn({
        let client = client.clone();
        async move { client.get("/quote").await }
    });
    deps.freight.hanging(1).await;
    assert_eq!(client.bulkhead("freight").await["active"], 1);
    let turned_away = client.get("/quote").await;
    assert_eq!(turned_away.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(client.bulkhead("freight").await["rejected_full"], 1);

    // Released: back to the configured limit.
    let a = client.admin("/policies/freight/bulkhead/release").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(limit(&a.json()), (2.into(), false.into()));
    deps.freight.release();
    assert_eq!(hanging.await.unwrap().seen(), (StatusCode::OK, QUOTE));
}

#[tokio::test]
async fn anonymous_reads_name_the_policy_file_without_its_path() {
    let file = TempFile::with(DOCUMENT);
    let policies = Policies::load(&file.0).unwrap();
    let client = start(&policies, &Deps::default()).await;
    let name = file.0.file_name().unwrap().to_str().unwrap().to_owned();
    let full = file.0.display().to_string();

    let anonymous = client.get("/admin/policies").await;
    assert_eq!(anonymous.json()["file"], name.as_str());
    assert!(!anonymous.body.contains(&full), "{}", anonymous.body);
    let wrong = client
        .send(
            Method::GET,
            "/admin/policies",
            Some("Bearer test-admin-token-0123456788"),
        )
        .await;
    assert_eq!(wrong.json()["file"], name.as_str());
    // The operator, with the token, sees where the file is.
    let operator = client
        .send(
            Method::GET,
            "/admin/policies",
            Some(&format!("Bearer {TOKEN}")),
        )
        .await;
    assert_eq!(operator.json()["file"], full.as_str());
}

// ---------------------------------------------------------------------------
// Live reload.

#[tokio::test]
async fn reloading_a_changed_file_keeps_an_open_breaker_open() {
    let file = TempFile::with(DOCUMENT);
    let policies = Policies::load(&file.0).unwrap();
    let deps = Deps::default();
    let client = start(&policies, &deps).await;

    deps.freight.set(FAIL);
    for _ in 0..4 {
        assert_eq!(client.get("/quote").await.status, StatusCode::BAD_GATEWAY);
    }
    let before = client.snapshot("freight").await;
    assert_eq!(before["breaker"]["state"], "open");
    let transitions = before["breaker"]["counters"]["transitions"].clone();

    // A new window (size 4 → 8) and interval, a bigger bulkhead.
    file.write(
        &DOCUMENT
            .replace("size = 4, min_calls = 4", "size = 8, min_calls = 8")
            .replace("open_for = \"60s\" }\nfallback", "open_for = \"120s\" }\nfallback")
            .replace(
                "bulkhead = { max_concurrent = 2, queue = { max_queue = 0, max_wait = \"10ms\" } }\nbreaker = { policy = { kind = \"count_window\"",
                "bulkhead = { max_concurrent = 5, queue = { max_queue = 0, max_wait = \"10ms\" } }\nbreaker = { policy = { kind = \"count_window\"",
            ),
    );
    let reloaded = client.admin("/reload").await;
    assert_eq!(reloaded.status, StatusCode::OK, "{}", reloaded.body);
    let all = reloaded.json();
    assert_eq!(all["generation"], 1);
    assert_eq!(all["as_started"], false);
    let freight = &all["policies"]["freight"];
    assert_eq!(freight["changed_at_run_time"], true);
    assert_eq!(freight["config"]["breaker"]["policy"]["size"], 8);
    assert_eq!(freight["config"]["breaker"]["open_for"], "2m");
    assert_eq!(freight["bulkhead"]["max_concurrent"], 5);
    // The breaker is still open: no transition happened.
    assert_eq!(freight["breaker"]["state"], "open");
    assert_eq!(freight["breaker"]["counters"]["transitions"], transitions);
    assert_eq!(
        client.get("/quote").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );

    // A file that changes what cannot change at run time is refused, naming it.
    file.write(&DOCUMENT.replace(
        "deadline = \"30s\"\nbulkhead = { max_concurrent = 2",
        "deadline = \"1s\"\nbulkhead = { max_concurrent = 2",
    ));
    let refused = client.admin("/reload").await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    let why = refused.json()["error"].as_str().unwrap().to_owned();
    assert!(why.contains("`policies.freight.deadline`"), "{why}");
    assert!(why.contains(&file.0.display().to_string()), "{why}");
    assert_eq!(
        client.snapshot("freight").await["config"]["breaker"]["policy"]["size"],
        8
    );

    // Revert: back to the start-up document, the breaker still open.
    let reverted = client.admin("/revert").await.json();
    assert_eq!(reverted["generation"], 2);
    assert_eq!(reverted["as_started"], true);
    let freight = &reverted["policies"]["freight"];
    assert_eq!(freight["config"]["breaker"]["policy"]["size"], 4);
    assert_eq!(freight["bulkhead"]["max_concurrent"], 2);
    assert_eq!(freight["breaker"]["state"], "open");
}

// ---------------------------------------------------------------------------
// Metrics.

/// The process's one Prometheus recorder (a global recorder can be installed once).
fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| PrometheusBuilder::new().install_recorder().unwrap())
}

/// Every metric name in docs/metrics.md's table.
fn documented_names() -> Vec<String> {
    include_str!("../docs/metrics.md")
        .lines()
        // Series that appear with their first use (a classifier's reason) are not
        // expected from this traffic; tests/metrics.rs checks the table in full.
        .filter(|l| !l.contains("| first use |"))
        .filter_map(|l| l.strip_prefix("| `seawall_"))
        .map(|rest| {
            let name = rest.split(['`', '{']).next().unwrap();
            format!("seawall_{name}")
        })
        .collect()
}

#[tokio::test]
async fn the_metrics_endpoint_lists_every_documented_metric() {
    let names = documented_names();
    assert!(names.len() >= 20, "{names:?}");

    // The recorder first: layers register their metrics when they are built.
    let handle = prometheus();
    // The same policies under names of their own, and a deadline shorter than a
    // hanging recommendations call.
    let mut document = DOCUMENT.replace(
        "[policies.recommendations]\ndeadline = \"30s\"",
        "[policies.recommendations]\ndeadline = \"100ms\"",
    );
    for p in ["freight", "recommendations", "assistant"] {
        document = document
            .replace(&format!("[policies.{p}]"), &format!("[policies.m-{p}]"))
            .replace(&format!("= \"{p}\""), &format!("= \"m-{p}\""));
    }
    // A segment with a deadline and no breaker below it: the DeadlineLayer itself
    // sees the budget run out (below a breaker, the breaker sees it first).
    document.push_str("\n[policies.m-slow]\ndeadline = \"50ms\"\n");
    let policies = Policies::from_toml(&document).unwrap();
    let deps = Deps::default();
    let render = handle.clone();
    let slow = ServiceBuilder::new()
        .respond()
        .deadline(policies.deadline("m-slow").unwrap());
    let app = app(&policies, &deps, Some(AdminToken::new(TOKEN).unwrap()))
        .route("/metrics", get(move || std::future::ready(render.render())))
        .route(
            "/slow",
            get(std::future::pending::<&'static str>).route_layer(route_layer(slow)),
        );
    let client = Client::new(serve(app).await);

    // Traffic that moves every kind of metric.
    assert_eq!(client.get("/quote").await.status, StatusCode::OK);
    deps.freight.set(FAIL);
    for _ in 0..4 {
        client.get("/quote").await; // failures, then the breaker opens: transitions, rejections
    }
    // A spent deadline is a gateway timeout, not "unavailable".
    assert_eq!(
        client.get("/slow").await.status,
        StatusCode::GATEWAY_TIMEOUT
    );
    deps.recommendations.set(HANG); // slower than its 100 ms deadline
    assert_eq!(
        client.get("/recommendations").await.status,
        StatusCode::GATEWAY_TIMEOUT
    );
    deps.llm.set(FAIL);
    for _ in 0..3 {
        client.get("/assistant").await; // falls to "canned", then probes the model
    }
    let health = seawall::degradation::health::HealthMonitor::builder()
        .check("m-model", Default::default(), || async {
            Ok::<(), Infallible>(())
        })
        .start()
        .unwrap();
    let mut report = health.subscribe();
    report.changed().await.unwrap();
    deps.recommendations.release();
    // A segment that retries (retries are added in code, not by the policy file): a
    // supplier refusing every connection uses the attempts.
    let retry = DeadlineRetry::builder("m-retry")
        .backoff(Duration::ZERO, Duration::ZERO, Jitter::Full)
        .build()
        .unwrap();
    let refusing = ServiceBuilder::new()
        .deadline(DeadlineLayer::new(Duration::from_secs(1)).unwrap())
        .deadline_retry(retry)
        .service(tower::service_fn(|_req: http::Request<()>| async {
            Err::<(), seawall::BoxError>("connection refused".into())
        }));
    assert!(refusing.oneshot(http::Request::new(())).await.is_err());
    // A hedging layer (added in code too) registers its series when built.
    let _hedge = HedgeLayer::builder("m-hedge").build().unwrap();

    let text = client.get("/metrics").await.body;
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !text.lines().any(|l| l.starts_with(&format!("# TYPE {n} "))))
        .collect();
    assert!(
        missing.is_empty(),
        "documented but not exported: {missing:?}\n{text}"
    );
    // The layers' series carry the policy's name.
    for (metric, name) in [
        ("seawall_breaker_calls_total", "m-freight"),
        ("seawall_bulkhead_admitted_total", "m-freight"),
        ("seawall_fallback_triggered_total", "m-freight"),
        ("seawall_degradation_level", "m-assistant"),
        ("seawall_retry_retries_total", "m-retry"),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(metric) && l.contains(&format!("name=\"{name}\""))),
            "{metric}{{name=\"{name}\"}} not found"
        );
    }
    // Every exported seawall metric is documented.
    let undocumented: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .filter(|n| n.starts_with("seawall_") && !names.iter().any(|d| d == n))
        .collect();
    assert!(
        undocumented.is_empty(),
        "exported but not documented: {undocumented:?}"
    );
}
