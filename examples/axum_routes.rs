//! A small shop on axum with per-route policies loaded from a TOML file, a
//! Prometheus `/metrics` endpoint, and an admin route.
//!
//! ```sh
//! cargo run --example axum_routes            # drives a few requests against itself, prints them, exits
//! cargo run --example axum_routes -- --serve # keeps serving on 127.0.0.1:3000: open the printed dashboard URL
//! ```
//!
//! Routes (policies from `examples/axum_routes.toml`):
//!
//! | route | dependency | its stack, outermost first |
//! |---|---|---|
//! | `GET /quote/{destination}` | freight supplier | fallback ("no quote", never a made-up price) → deadline → bulkhead → breaker |
//! | `GET /recommendations` | recommendations service | fallback (the editors' list) → deadline → bulkhead → breaker |
//! | `GET /assistant` | language model | respond → degradation (full → canned answers) → deadline |
//! | `GET /products` | none | untouched |
//! | `GET /metrics` | | Prometheus text |
//! | `/admin` | | the incident dashboard (live, in a browser); controls with the admin token |
//! | `/admin/...` | | snapshots for anyone; changes with the admin token |
//!
//! The dependencies are a second loopback server whose behaviour can be switched:
//! `POST /control/{freight|recommendations|llm}/{healthy|failing|slow}`.
//!
//! Options: `--serve`, `--addr 127.0.0.1:3000`, `--config <file>`, `--admin-token
//! <token>` (or the `SEAWALL_ADMIN_TOKEN` environment variable, which keeps it out
//! of the process list), `--metrics-out <file>` (the self-driving run writes its last
//! scrape there). Without a token, `--serve` refuses every change (403); the
//! self-driving run makes up a token for itself.
//!
//! Logs go to stderr, filtered by `RUST_LOG` (default `info`): breaker transitions,
//! degradation changes, admin actions and reloads appear as they happen.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "shared/logs.rs"]
mod logs;
#[path = "shared/prometheus.rs"]
mod prometheus;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use metrics_exporter_prometheus::PrometheusHandle;
use seawall::admin::{self, AdminToken};
use seawall::axum::FixedResponse;
use seawall::config::Policies;
use seawall::core::{
    with_reason, AdmissionAsFailure, BoxError, ClassifyInput, HttpStatus, Outcome, RandomSource,
    SeededRandom,
};
use seawall::ServiceBuilderExt;
use tokio::net::TcpListener;
use tower::ServiceBuilder;

const TOKEN_VAR: &str = "SEAWALL_ADMIN_TOKEN";

type Client = hyper_util::client::legacy::Client<HttpConnector, Empty<Bytes>>;

// ---------------------------------------------------------------------------
// The dependencies: one loopback server, each dependency switchable.

const HEALTHY: u8 = 0;
const FAILING: u8 = 1;
const SLOW: u8 = 2;

#[derive(Default)]
struct Modes {
    freight: AtomicU8,
    recommendations: AtomicU8,
    llm: AtomicU8,
}

impl Modes {
    fn of(&self, dependency: &str) -> Option<&AtomicU8> {
        match dependency {
            "freight" => Some(&self.freight),
            "recommendations" => Some(&self.recommendations),
            "llm" => Some(&self.llm),
            _ => None,
        }
    }
}

/// Answers `ok` as the dependency's mode says: healthy, failing (503), slow (2 s).
async fn behave(mode: &AtomicU8, ok: Response) -> Response {
    match mode.load(Ordering::Relaxed) {
        FAILING => (StatusCode::SERVICE_UNAVAILABLE, "overloaded\n").into_response(),
        SLOW => {
            tokio::time::sleep(Duration::from_secs(2)).await;
            ok
        }
        _ => ok,
    }
}

fn suppliers(modes: Arc<Modes>) -> Router {
    Router::new()
        .route(
            "/freight/{destination}",
            get(|State(m): State<Arc<Modes>>, Path(dest): Path<String>| async move {
                let ok = if dest == "atlantis" {
                    (StatusCode::NOT_FOUND, "no rate for that destination\n").into_response()
                } else {
                    format!("{{\"destination\":\"{dest}\",\"price\":\"12.50 EUR\"}}").into_response()
                };
                behave(&m.freight, ok).await
            }),
        )
        .route(
            "/recommendations",
            get(|State(m): State<Arc<Modes>>| async move {
                behave(&m.recommendations, "for you: hiking boots, rain jacket\n".into_response()).await
            }),
        )
        .route(
            "/llm",
            get(|State(m): State<Arc<Modes>>| async move {
                behave(&m.llm, "Parcels to Lisbon take 2 days.\n".into_response()).await
            }),
        )
        .route(
            "/control/{dependency}/{mode}",
            post(|State(m): State<Arc<Modes>>, Path((dep, mode)): Path<(String, String)>| async move {
                let value = match mode.as_str() {
                    "healthy" => HEALTHY,
                    "failing" => FAILING,
                    "slow" => SLOW,
                    _ => return (StatusCode::NOT_FOUND, "healthy, failing or slow\n").into_response(),
                };
                match m.of(&dep) {
                    Some(slot) => {
                        slot.store(value, Ordering::Relaxed);
                        format!("{dep} is now {mode}\n").into_response()
                    }
                    None => (StatusCode::NOT_FOUND, "freight, recommendations or llm\n").into_response(),
                }
            }),
        )
        .with_state(modes)
}

// ---------------------------------------------------------------------------
// The shop.

#[derive(Clone)]
struct Shop {
    client: Client,
    suppliers: SocketAddr,
}

impl Shop {
    /// GETs `path` from the dependencies: its status and body, or `None` if unreachable.
    async fn fetch(&self, path: &str) -> Option<(StatusCode, String)> {
        let url = format!("http://{}{path}", self.suppliers);
        let req = Request::get(url).body(Empty::new()).ok()?;
        let res = self.client.request(req).await.ok()?;
        let status = res.status();
        let body = res.into_body().collect().await.ok()?.to_bytes();
        Some((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

async fn quote(State(shop): State<Shop>, Path(destination): Path<String>) -> Response {
    // The application counts its business answers itself: seawall's breaker sees a
    // 404 as a success (HttpStatus), so "no rate" is never mistaken for a sick supplier.
    let (result, response) = match shop.fetch(&format!("/freight/{destination}")).await {
        Some((StatusCode::OK, body)) => ("quoted", (StatusCode::OK, body).into_response()),
        Some((StatusCode::NOT_FOUND, _)) => (
            "no_rate",
            (
                StatusCode::NOT_FOUND,
                "no freight rate for that destination\n",
            )
                .into_response(),
        ),
        _ => (
            "supplier_error",
            (StatusCode::BAD_GATEWAY, "freight supplier unavailable\n").into_response(),
        ),
    };
    metrics::counter!("shop_quote_answers_total", "result" => result).increment(1);
    response
}

async fn recommendations(State(shop): State<Shop>) -> Response {
    match shop.fetch("/recommendations").await {
        Some((StatusCode::OK, body)) => body.into_response(),
        _ => (StatusCode::BAD_GATEWAY, "recommendations unavailable\n").into_response(),
    }
}

async fn assistant(State(shop): State<Shop>) -> Response {
    match shop.fetch("/llm").await {
        Some((StatusCode::OK, body)) => body.into_response(),
        _ => (StatusCode::BAD_GATEWAY, "language model unavailable\n").into_response(),
    }
}

async fn products() -> &'static str {
    "catalogue: hiking boots, rain jacket, tent\n"
}

/// Why a freight answer was not a failure: a 404 "no rate for that destination" is the
/// supplier's business answer. The breaker still counts it as a success (it says
/// nothing bad about the supplier's health), and counts it apart under this reason in
/// `seawall_breaker_outcome_reasons_total`.
fn business_refusal(
    result: ClassifyInput<'_, Response>,
    _outcome: Outcome,
) -> Option<&'static str> {
    match result {
        Ok(res) if res.status() == StatusCode::NOT_FOUND => Some("business_refusal"),
        _ => None,
    }
}

/// The policy `route` uses in the document.
fn policy_of(policies: &Policies, route: &str) -> Result<String, BoxError> {
    policies
        .policy_for_route(route)
        .ok_or_else(|| format!("the policy file maps no policy to `{route}`").into())
}

fn shop(
    policies: &Policies,
    suppliers: SocketAddr,
    prometheus: PrometheusHandle,
    token: Option<AdminToken>,
) -> Result<Router, BoxError> {
    // GET /quote/{destination}: a supplier that fails or is slow is cut off by the
    // deadline, limited by the bulkhead, short-circuited by the breaker; the
    // fallback then answers an explicit "no quote" (503 + Retry-After), never a price.
    let freight = policy_of(policies, "/quote/{destination}")?;
    let quote_stack = ServiceBuilder::new()
        .fallback(policies.fallback(&freight, |b| {
            b.unavailable::<Response>("no valid freight quote")
                .http_server()
        })?)
        .deadline(policies.deadline(&freight)?)
        .bulkhead(policies.bulkhead(&freight)?)
        .circuit_breaker(policies.circuit_breaker(&freight, |b| {
            b.classifier(with_reason(HttpStatus::default(), business_refusal))
        })?);

    // GET /recommendations: the declared alternative is the editors' list.
    let recs = policy_of(policies, "/recommendations")?;
    let recs_stack = ServiceBuilder::new()
        .fallback(policies.fallback(&recs, |b| {
            b.sync_fn(|_req| {
                let mut res = Response::new(Body::from("editors' picks: tent, headlamp\n"));
                res.headers_mut()
                    .insert("x-served-by", header::HeaderValue::from_static("fallback"));
                Ok::<_, Infallible>(res)
            })
            .http_server()
        })?)
        .deadline(policies.deadline(&recs)?)
        .bulkhead(policies.bulkhead(&recs)?)
        .circuit_breaker(policies.circuit_breaker(&recs, |b| b.classifier(HttpStatus::default()))?);

    // GET /assistant: degrades to canned answers after repeated failures, climbs
    // back through probes. A 502 from the handler is a failure of the level.
    let assistant_policy = policy_of(policies, "/assistant")?;
    let canned = FixedResponse::<Body>::new(
        StatusCode::OK,
        "Our assistant is busy. Delivery times: https://example.com/delivery\n",
    )
    .header(header::HeaderName::from_static("x-served-by"), "canned");
    let assistant_stack = ServiceBuilder::new()
        .respond()
        .degradation(policies.degradation(&assistant_policy, |b| {
            b.classifier(AdmissionAsFailure(HttpStatus::default()))
                .level("canned", canned)
        })?)
        .deadline(policies.deadline(&assistant_policy)?);

    let state = Shop {
        client: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http(),
        suppliers,
    };
    Ok(Router::new()
        .route("/quote/{destination}", get(quote).route_layer(quote_stack))
        .route(
            "/recommendations",
            get(recommendations).route_layer(recs_stack),
        )
        .route("/assistant", get(assistant).route_layer(assistant_stack))
        .route("/products", get(products))
        .route(
            "/metrics",
            get(move || std::future::ready(prometheus.render())),
        )
        .nest("/admin", admin::router(policies.clone(), token))
        .with_state(state))
}

// ---------------------------------------------------------------------------
// Command line.

struct Args {
    serve: bool,
    addr: Option<SocketAddr>,
    config: PathBuf,
    token: Option<String>,
    metrics_out: Option<PathBuf>,
}

fn args() -> Result<Args, BoxError> {
    let mut out = Args {
        serve: false,
        addr: None,
        config: PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/axum_routes.toml"
        )),
        token: None,
        metrics_out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| it.next().ok_or_else(|| format!("{flag} needs a value"));
        match arg.as_str() {
            "--serve" => out.serve = true,
            "--addr" => out.addr = Some(value("--addr")?.parse()?),
            "--config" => out.config = value("--config")?.into(),
            "--admin-token" => out.token = Some(value("--admin-token")?),
            "--metrics-out" => out.metrics_out = Some(value("--metrics-out")?.into()),
            "-h" | "--help" => {
                println!(
                    "usage: axum_routes [--serve] [--addr 127.0.0.1:3000] [--config FILE] [--admin-token TOKEN] [--metrics-out FILE]\n\
                     The admin token may also come from {TOKEN_VAR}. Logs: RUST_LOG (default info)."
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument `{other}` (try --help)").into()),
        }
    }
    Ok(out)
}

fn demo_token() -> String {
    let mut random = SeededRandom::from_entropy();
    (0..4)
        .map(|_| format!("{:08x}", (random.next_f64() * f64::from(u32::MAX)) as u32))
        .collect()
}

async fn bind(addr: SocketAddr, app: Router) -> Result<SocketAddr, BoxError> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(local)
}

/// The shop and its dependencies, serving on loopback.
pub(crate) struct Running {
    pub(crate) shop: SocketAddr,
    pub(crate) suppliers: SocketAddr,
}

/// Starts the dependencies (on an ephemeral loopback port) and the shop on
/// `listener`, both served until the runtime ends. The dashboard's browser tests
/// start the example this way.
pub(crate) async fn start(
    policies: &Policies,
    listener: TcpListener,
    prometheus: PrometheusHandle,
    token: Option<AdminToken>,
) -> Result<Running, BoxError> {
    let modes = Arc::new(Modes::default());
    let suppliers = bind(SocketAddr::from(([127, 0, 0, 1], 0)), suppliers(modes)).await?;
    let app = shop(policies, suppliers, prometheus, token)?;
    let shop = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(Running { shop, suppliers })
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), BoxError> {
    let args = args()?;
    logs::install();
    // Install the recorder before building layers: they register their metrics when
    // built. It also describes every metric and runs the recorder's upkeep.
    let prometheus = prometheus::install()?;
    // The application describes its own metrics too (after the recorder, like seawall's).
    metrics::describe_counter!(
        "shop_quote_answers_total",
        metrics::Unit::Count,
        "Answers of GET /quote, by result: quoted, no_rate, supplier_error."
    );
    let policies = Policies::load(&args.config)?;

    let token = match (&args.token, AdminToken::from_env(TOKEN_VAR)?) {
        (Some(t), _) => Some(AdminToken::new(t.clone())?),
        (None, Some(t)) => Some(t),
        (None, None) => None,
    };
    let (token, demo) = match (token, args.serve) {
        (Some(t), _) => (Some(t), None),
        (None, true) => (None, None),
        (None, false) => {
            let t = demo_token();
            (Some(AdminToken::new(t.clone())?), Some(t))
        }
    };

    let default_port = if args.serve { 3000 } else { 0 };
    let addr = args
        .addr
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], default_port)));
    if !addr.ip().is_loopback() {
        println!("warning: serving on {addr}: the admin snapshots are readable by anyone who can reach it");
    }
    let has_token = token.is_some();
    let Running { shop, suppliers } =
        start(&policies, TcpListener::bind(addr).await?, prometheus, token).await?;

    println!("seawall axum_routes example");
    println!("policies: {}", args.config.display());
    for (route, policy) in &policies.started_with().routes {
        println!("  {route:<22} uses policy `{policy}`");
    }

    if args.serve {
        println!("shop on http://{shop}, dependencies on http://{suppliers}");
        println!("dashboard: http://{shop}/admin");
        println!("try:");
        println!("  curl http://{shop}/quote/lisbon");
        println!(
            "  curl -X POST http://{suppliers}/control/freight/failing   # then repeat the quote"
        );
        println!("  curl http://{shop}/admin/policies");
        if has_token {
            println!(
                "  curl -X POST -H \"Authorization: Bearer ${TOKEN_VAR}\" http://{shop}/admin/policies/freight/breaker/reset"
            );
        } else {
            println!(
                "  (changes are disabled: no admin token; set {TOKEN_VAR} or pass --admin-token)"
            );
        }
        println!("  curl http://{shop}/metrics");
        std::future::pending::<()>().await;
        return Ok(());
    }

    println!("shop on http://{shop}, dependencies on http://{suppliers}");
    println!("admin token: made up for this run (set {TOKEN_VAR} to choose one)\n");
    let scrape = drive(shop, suppliers, demo.as_deref().unwrap_or_default()).await?;
    if let Some(path) = &args.metrics_out {
        // The tour trims bodies; the text format ends with a line feed.
        std::fs::write(path, format!("{scrape}\n"))?;
        println!("  (the last scrape is in {})", path.display());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The self-driving tour.

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

async fn call(
    client: &Client,
    method: Method,
    url: String,
    token: Option<String>,
) -> Result<Answer, BoxError> {
    let mut req = Request::builder().method(method).uri(url);
    if let Some(token) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let res = client.request(req.body(Empty::new())?).await?;
    let (parts, body) = res.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).trim_end().to_owned(),
    })
}

fn line(what: &str, a: &Answer) {
    let status = a.status.as_u16();
    let first = a.body.lines().next().unwrap_or_default();
    println!("  {what:<48} {status}  {first}");
}

/// The tour; returns the last scrape of `/metrics`.
async fn drive(shop: SocketAddr, suppliers: SocketAddr, token: &str) -> Result<String, BoxError> {
    let client: Client =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http();
    let get = |path: &str| call(&client, Method::GET, format!("http://{shop}{path}"), None);
    let admin = |path: &str, token: Option<&str>| {
        let token = token.map(str::to_owned);
        call(
            &client,
            Method::POST,
            format!("http://{shop}/admin{path}"),
            token,
        )
    };
    let control = |dep: &str, mode: &str| {
        call(
            &client,
            Method::POST,
            format!("http://{suppliers}/control/{dep}/{mode}"),
            None,
        )
    };

    println!("1. Every dependency healthy");
    for path in [
        "/products",
        "/quote/lisbon",
        "/quote/atlantis",
        "/recommendations",
        "/assistant",
    ] {
        line(&format!("GET {path}"), &get(path).await?);
    }
    println!("  (a 404 \"no rate\" is a business answer: the breaker counts it as a success)\n");

    println!("2. The freight supplier starts failing (503 on every call)");
    control("freight", "failing").await?;
    let mut runs: Vec<(u16, usize, Option<String>)> = Vec::new();
    for _ in 0..12 {
        let a = get("/quote/lisbon").await?;
        let retry = a
            .headers
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match runs.last_mut() {
            Some((s, n, _)) if *s == a.status.as_u16() => *n += 1,
            _ => runs.push((a.status.as_u16(), 1, retry)),
        }
    }
    let summary: Vec<String> = runs
        .iter()
        .map(|(s, n, retry)| match retry {
            Some(r) => format!("{s} x{n} (Retry-After: {r})"),
            None => format!("{s} x{n}"),
        })
        .collect();
    println!("  GET /quote/lisbon x12: {}", summary.join(", then "));
    println!("  (502: the supplier's failure passed through; 503: the breaker opened, the fallback says \"no quote\")");
    for path in ["/products", "/recommendations"] {
        line(
            &format!("GET {path}  (other routes unaffected)"),
            &get(path).await?,
        );
    }
    let snap: serde_json::Value =
        serde_json::from_str(&get("/admin/policies/freight").await?.body)?;
    let breaker = &snap["breaker"];
    println!(
        "  admin snapshot: freight breaker {} for {}, retry after {}; calls {}, failures {}, short-circuited {}\n",
        breaker["state"], breaker["in_state_for"], breaker["retry_after"],
        breaker["counters"]["calls"], breaker["counters"]["failures"], breaker["counters"]["short_circuited"],
    );

    println!(
        "3. The recommendations service is slow (2 s): its 200 ms deadline and fallback answer"
    );
    control("recommendations", "slow").await?;
    let a = get("/recommendations").await?;
    let by = a
        .headers
        .get("x-served-by")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("the service");
    line(&format!("GET /recommendations  (served by {by})"), &a);
    control("recommendations", "healthy").await?;
    println!();

    println!("4. Operations through the admin route");
    let floor = "/policies/assistant/degradation/set-floor?level=canned";
    line(
        &format!("POST {floor}  no token"),
        &admin(floor, None).await?,
    );
    line(
        &format!("POST {floor}  wrong token"),
        &admin(floor, Some("not-the-token-at-all")).await?,
    );
    let a = admin(floor, Some(token)).await?;
    let snap: serde_json::Value = serde_json::from_str(&a.body)?;
    println!(
        "  {:<48} {}  level now {}, floor {}",
        format!("POST {floor}  with the token"),
        a.status.as_u16(),
        snap["degradation"]["level_name"],
        snap["degradation"]["floor"],
    );
    let a = get("/assistant").await?;
    let by = a
        .headers
        .get("x-served-by")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("the model");
    line(&format!("GET /assistant  (served by {by})"), &a);
    let a = admin("/policies/assistant/degradation/clear-floor", Some(token)).await?;
    let snap: serde_json::Value = serde_json::from_str(&a.body)?;
    println!(
        "  {:<48} {}  floor now {} (the level climbs back through probes)",
        "POST /policies/assistant/degradation/clear-floor",
        a.status.as_u16(),
        snap["degradation"]["floor"],
    );
    control("freight", "healthy").await?;
    let a = admin("/policies/freight/breaker/reset", Some(token)).await?;
    let snap: serde_json::Value = serde_json::from_str(&a.body)?;
    println!(
        "  {:<48} {}  breaker now {}",
        "POST /policies/freight/breaker/reset",
        a.status.as_u16(),
        snap["breaker"]["state"],
    );
    line("GET /quote/lisbon", &get("/quote/lisbon").await?);
    for path in ["/reload", "/revert"] {
        let a = admin(path, Some(token)).await?;
        let snap: serde_json::Value = serde_json::from_str(&a.body)?;
        println!(
            "  {:<48} {}  generation {}, as started: {}",
            format!("POST {path}"),
            a.status.as_u16(),
            snap["generation"],
            snap["as_started"],
        );
    }
    println!();

    println!("5. GET /metrics (the freight policy's series that moved)");
    let metrics = get("/metrics").await?.body;
    for l in metrics.lines().filter(|l| {
        l.starts_with("seawall_") && l.contains("name=\"freight\"") && !l.ends_with(" 0")
    }) {
        println!("  {l}");
    }
    for l in metrics
        .lines()
        .filter(|l| l.starts_with("shop_quote_answers_total"))
    {
        println!("  {l}");
    }
    let series = metrics
        .lines()
        .filter(|l| l.starts_with("seawall_"))
        .count();
    println!("  ({series} seawall series in all; `--serve` keeps the shop running)");
    Ok(metrics)
}
