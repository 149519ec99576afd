//! The shop under test: an axum server whose routes use seawall as a real service
//! would. `/quote` and `/checkout` share one protected freight client; the
//! recommendations degrade over their own flaky dependency; `/products` has no
//! dependency at all.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use seawall::admin::{self, AdminToken};
use seawall::circuit_breaker::State as BreakerState;
use seawall::config::Policies;
use seawall::core::duration_format;
use seawall::core::{classify_fn, ClassifyInput, ErrorsAsFailures, RejectionKind};
use seawall::degradation::Fixed;
use seawall::fallback::{Mark, Served, Trigger, Unavailable};
use seawall::fault::{FaultService, HttpRequests};
use seawall::{BoxError, Classify, Outcome};
use serde_json::{json, Value};
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

use super::fleet::{FleetStore, Members, Membership};
use super::tap::TapLayer;

/// What the freight supplier said, as the shop's client understands it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuoteAnswer {
    Price(u64),
    /// "No quote for this destination": a valid business answer.
    NoQuote,
    /// The supplier answered with an error status.
    SupplierError(u16),
}

impl Mark for QuoteAnswer {
    fn mark(&mut self, _served: Served) {}
}

/// A freight answer is a failure of the supplier only when it is a 5xx or 429.
fn supplier_health(result: ClassifyInput<'_, QuoteAnswer>) -> Outcome {
    match result {
        Ok(QuoteAnswer::SupplierError(_)) => Outcome::Failure,
        Ok(_) => Outcome::Success,
        Err(e) => ErrorsAsFailures.classify(Err::<&QuoteAnswer, _>(e)),
    }
}

type Request = http::Request<Empty<Bytes>>;

/// The raw freight client: hyper-util over loopback behind the fault layer that
/// rehearses the supplier's failures, reading the body within the call so a slow
/// body counts against the same budget.
#[derive(Clone)]
struct FreightClient {
    client: FaultService<Client<HttpConnector, Empty<Bytes>>, HttpRequests>,
}

impl Service<Request> for FreightClient {
    type Response = QuoteAnswer;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<QuoteAnswer, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Service::poll_ready(&mut self.client, cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let call = self.client.call(req);
        Box::pin(async move {
            let res = call.await?;
            let status = res.status();
            let body = res.into_body().collect().await?.to_bytes();
            Ok(match status.as_u16() {
                200 => {
                    let json: Value = serde_json::from_slice(&body)?;
                    let cents = json["price_cents"]
                        .as_u64()
                        .ok_or("quote without a price")?;
                    QuoteAnswer::Price(cents)
                }
                404 => QuoteAnswer::NoQuote,
                other => QuoteAnswer::SupplierError(other),
            })
        })
    }
}

/// The drill's policy parameters (the documented defaults).
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub budget: Duration,
    pub max_concurrent: usize,
    pub max_queue: usize,
    pub max_wait: Duration,
    pub open_for: Duration,
    pub dwell: Duration,
    pub probe_ratio: f64,
    pub probe_window: Duration,
    pub probe_successes: u32,
    /// `--strict-cap`: the fleet-wide cap in strict mode (an instance cut off
    /// from the store admits nothing) instead of the default (the cap divided by
    /// the instances last known).
    pub strict_cap: bool,
}

type Quotes = BoxCloneSyncService<Request, QuoteAnswer, BoxError>;

/// Recommendations as the shop renders them.
#[derive(Debug, Clone)]
pub struct Recs {
    level: &'static str,
    items: Vec<&'static str>,
}

type RecsRequest = http::Request<()>;

#[derive(Clone)]
struct Shop {
    freight: SocketAddr,
    quotes: Quotes,
    recs: BoxCloneSyncService<RecsRequest, Recs, BoxError>,
}

/// The drill's policies as a document, as a service loads them from its file: the
/// numbers here, the shape of each stack in code (in [`start`]).
pub fn document(p: &Policy) -> String {
    document_in_fleet(p, None)
}

/// [`document`], with a `[fleet]` table naming `store` when the shop is one of a fleet.
pub fn document_in_fleet(p: &Policy, store: Option<&str>) -> String {
    let d = duration_format::format;
    // The freight supplier takes `max_concurrent` calls at once in all: in a
    // fleet, that is the fleet-wide cap of freight's bulkhead, renewed every
    // 200 ms, its calls bounded by the freight budget.
    let fleet = match store {
        Some(store) => format!(
            r#"
[fleet]
store = "{store}"
prefix = "drill"

[fleet.caps.freight]
cap = {max_concurrent}
renew_every = "200ms"
ttl = "{ttl}"
longest_call = "{budget}"{mode}
"#,
            max_concurrent = p.max_concurrent,
            ttl = d(p.budget + Duration::from_secs(1)),
            budget = d(p.budget),
            mode = if p.strict_cap {
                "\nmode = \"strict\""
            } else {
                ""
            },
        ),
        None => String::new(),
    };
    let policies = format!(
        r#"
[policies.freight]
deadline = "{budget}"
bulkhead = {{ max_concurrent = {max_concurrent}, queue = {{ max_queue = {max_queue}, max_wait = "{max_wait}" }} }}
breaker = {{ policy = {{ kind = "count_window", size = 10, min_calls = 10, failure_rate = 0.5 }}, open_for = "{open_for}", half_open_max = 1 }}
fallback = {{ on_rejections = ["circuit_open", "bulkhead_full", "bulkhead_timeout", "deadline_exceeded", "fallbacks_exhausted"] }}

# Freight may be rehearsed: the drill injects its slow and 5xx phases here.
[policies.freight.fault]

[policies.recommendations]
degradation = {{ failures_to_degrade = 5, min_dwell = "{dwell}", probe_ratio = {probe_ratio}, probe_window = "{probe_window}", probe_successes_to_recover = {probe_successes} }}

[routes]
"/quote" = "freight"
"/checkout" = "freight"
"/recommendations" = "recommendations"

[dependencies]
freight-supplier = "freight"
recommender = "recommendations"
"#,
        budget = d(p.budget),
        max_concurrent = p.max_concurrent,
        max_queue = p.max_queue,
        max_wait = d(p.max_wait),
        open_for = d(p.open_for),
        dwell = d(p.dwell),
        probe_ratio = p.probe_ratio,
        probe_window = d(p.probe_window),
        probe_successes = p.probe_successes,
    );
    policies + &fleet
}

/// Where the shop listens, and the admin token its dashboard's controls need.
#[derive(Debug, Clone)]
pub struct Serve {
    pub addr: SocketAddr,
    pub token: Option<AdminToken>,
}

impl Default for Serve {
    /// An ephemeral loopback port, the dashboard read-only.
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
        }
    }
}

/// The shop's handles, for the drill's observations.
pub struct Running {
    pub addr: SocketAddr,
    pub breaker: seawall::circuit_breaker::Handle,
    pub bulkhead: seawall::bulkhead::Handle,
    pub degradation: seawall::degradation::Handle,
    pub admitted: TapLayer,
    pub dependency_calls: TapLayer,
    /// The instance's part in its fleet, in fleet mode.
    pub fleet: Option<Membership>,
    /// The fault layer in front of the freight client: the drill injects the slow
    /// and 5xx phases through it.
    pub faults: seawall::fault::Handle,
}

pub fn breaker_label(state: BreakerState) -> &'static str {
    state.as_str()
}

/// Builds the shop from [`document`] and serves it, with the admin routes and the
/// dashboard under `/admin`.
pub async fn start(
    freight: SocketAddr,
    recommender: SocketAddr,
    p: Policy,
    serve: Serve,
) -> Result<Running, BoxError> {
    start_in_fleet(freight, recommender, p, serve, None).await
}

/// [`start`], as one instance of a fleet sharing `store` when one is given.
pub async fn start_in_fleet(
    freight: SocketAddr,
    recommender: SocketAddr,
    p: Policy,
    serve: Serve,
    store: Option<&FleetStore>,
) -> Result<Running, BoxError> {
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build_http::<Empty<Bytes>>();
    let url = store.map(FleetStore::url);
    let policies = Policies::from_toml(&document_in_fleet(&p, url.as_deref()))?;

    let breaker =
        policies.circuit_breaker("freight", |b| b.classifier(classify_fn(supplier_health)))?;
    let bulkhead = policies.bulkhead("freight")?;
    let breaker_handle = breaker.handle();
    let fleet = match store {
        Some(store) => Some(store.join(
            &policies,
            Members {
                breaker: &breaker_handle,
                bulkhead: &bulkhead.handle(),
            },
        )?),
        None => None,
    };
    let state_probe = {
        let h = breaker.handle();
        Arc::new(move || breaker_label(h.state())) as Arc<dyn Fn() -> &'static str + Send + Sync>
    };
    // Innermost, in front of the client: the rehearsal's faults reach the breaker,
    // the bulkhead, the deadline and the fallback as the supplier's own would.
    let faults = policies.fault("freight", |b| b)?.http();
    let fault_handle = faults.handle();
    let admitted = TapLayer::new(p.budget, state_probe.clone());
    let dependency_calls = TapLayer::new(p.budget, state_probe);

    let fallback = policies.fallback("freight", |b| {
        b.on_failure(classify_fn(supplier_health))
            .unavailable::<QuoteAnswer>("no valid freight quote")
    })?;

    // No retry layer, on purpose: the drill's policy is not to try again once the
    // budget is spent, and to answer "unavailable" at once. Retries, where a fast
    // transient failure deserves them, would go between the deadline and the bulkhead.
    let quotes = ServiceBuilder::new()
        .layer(fallback)
        .layer(policies.deadline("freight")?)
        .layer(bulkhead.clone())
        .layer(admitted.clone())
        .layer(breaker)
        .layer(dependency_calls.clone())
        .service(FreightClient {
            client: faults.layer(client.clone()),
        });

    let personalized = {
        let client = client.clone();
        tower::service_fn(move |_req: RecsRequest| {
            let uri = format!("http://{recommender}/recommendations");
            let call = uri.parse::<hyper::Uri>().map(|uri| client.get(uri));
            async move {
                let res = tokio::time::timeout(Duration::from_millis(200), call?).await??;
                if !res.status().is_success() {
                    return Err::<Recs, BoxError>(
                        format!("recommender answered {}", res.status()).into(),
                    );
                }
                Ok(Recs {
                    level: "personalized",
                    items: vec!["for you: hiking boots", "for you: rain jacket"],
                })
            }
        })
    };
    let degradation = policies.degradation("recommendations", |b| {
        b.inner_level("personalized")
            .level(
                "popular",
                Fixed::new(Recs {
                    level: "popular",
                    items: vec!["popular: umbrella", "popular: torch"],
                }),
            )
            .level(
                "none",
                Fixed::new(Recs {
                    level: "none",
                    items: vec![],
                }),
            )
            .seed(2026)
    })?;
    let degradation_handle = degradation.handle();
    let recs = BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(degradation)
            .service(personalized),
    );

    let shop = Shop {
        freight,
        quotes: BoxCloneSyncService::new(quotes),
        recs,
    };
    let app = Router::new()
        .route("/quote", get(quote))
        .route("/checkout", get(checkout))
        .route("/recommendations", get(recommendations))
        .route("/products", get(products))
        .nest("/admin", admin::router(policies, serve.token))
        .with_state(shop);
    let listener = tokio::net::TcpListener::bind(serve.addr).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(Running {
        addr,
        breaker: breaker_handle,
        bulkhead: bulkhead.handle(),
        degradation: degradation_handle,
        admitted,
        dependency_calls,
        fleet,
        faults: fault_handle,
    })
}

/// Why there is no quote, as the customer (and the drill's table) sees it.
fn cause(err: &BoxError) -> &'static str {
    let trigger = Unavailable::find(&**err).and_then(Unavailable::trigger);
    match trigger {
        Some(Trigger::Rejected(RejectionKind::DeadlineExceeded)) => "timeout",
        Some(Trigger::Rejected(RejectionKind::BulkheadFull)) => "capacity_full",
        Some(Trigger::Rejected(RejectionKind::BulkheadTimeout)) => "queue_timeout",
        Some(Trigger::Rejected(RejectionKind::CircuitOpen)) => "breaker_open",
        Some(Trigger::FailedResponse) => "supplier_error",
        Some(Trigger::FailedError) => "supplier_unreachable",
        _ => "unavailable",
    }
}

async fn ask_for_quote(shop: &Shop) -> Result<QuoteAnswer, BoxError> {
    let req = http::Request::get(format!("http://{}/quote?to=PT-1000", shop.freight))
        .body(Empty::new())?;
    shop.quotes.clone().oneshot(req).await
}

async fn quote(State(shop): State<Shop>) -> (StatusCode, Json<Value>) {
    match ask_for_quote(&shop).await {
        Ok(QuoteAnswer::Price(cents)) => (StatusCode::OK, Json(json!({ "price_cents": cents }))),
        Ok(QuoteAnswer::NoQuote) => (
            StatusCode::NOT_FOUND,
            Json(json!({ "price_cents": null, "reason": "business_refusal" })),
        ),
        Ok(QuoteAnswer::SupplierError(_)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "price_cents": null, "reason": "supplier_error" })),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "price_cents": null, "reason": cause(&e) })),
        ),
    }
}

/// An order is confirmed only with a price the supplier really quoted:
/// without one, the purchase waits rather than being priced by invention.
async fn checkout(State(shop): State<Shop>) -> (StatusCode, Json<Value>) {
    match ask_for_quote(&shop).await {
        Ok(QuoteAnswer::Price(cents)) => (
            StatusCode::OK,
            Json(json!({ "order": "confirmed", "price_cents": cents })),
        ),
        Ok(QuoteAnswer::NoQuote) => (
            StatusCode::CONFLICT,
            Json(json!({ "order": "refused", "price_cents": null, "reason": "business_refusal" })),
        ),
        Ok(QuoteAnswer::SupplierError(_)) => (
            StatusCode::CONFLICT,
            Json(json!({ "order": "refused", "price_cents": null, "reason": "supplier_error" })),
        ),
        Err(e) => (
            StatusCode::CONFLICT,
            Json(json!({ "order": "refused", "price_cents": null, "reason": cause(&e) })),
        ),
    }
}

async fn recommendations(State(shop): State<Shop>) -> (StatusCode, Json<Value>) {
    match shop.recs.clone().oneshot(http::Request::new(())).await {
        Ok(recs) => (
            StatusCode::OK,
            Json(json!({ "level": recs.level, "items": recs.items })),
        ),
        Err(_) => (
            StatusCode::OK,
            Json(json!({ "level": "failed", "items": [] })),
        ),
    }
}

async fn products() -> Json<Value> {
    Json(json!({ "products": ["hiking boots", "rain jacket", "umbrella", "torch"] }))
}
