//! The drill's overload phase: three classes of freight quotes through one
//! bulkhead, offered about three times what the supplier can serve, then the
//! same load through a plain first-in-first-out bulkhead.
//!
//! Each side has a shop of its own and a supplier of its own that takes 15 to
//! 45 ms a quote, 30 on average (8 at once over the bulkhead: about 267
//! quotes/s), offered Poisson arrivals. A shop's `/checkout` asks
//! for a quote as **critical**, `/quote` (browsing) as **default** and
//! `/prefetch` as **sheddable**, writing the class on its outgoing call; one shop's
//! bulkhead reads it (its shares and lines per class), the other's does not.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use seawall::bulkhead::Handle;
use seawall::config::Policies;
use seawall::core::duration_format;
use seawall::core::{find_rejection, Criticality, CriticalityHeader, FullCause, RejectionKind};
use seawall::BoxError;
use serde_json::{json, Value};
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

use super::freight::{Freight, PRICE_CENTS};
use super::load::{self, Answer, Arrivals, Endpoint, Rates};
use super::report::{by_cause, most_in_flight, percentile};
use super::shop::Policy;
use super::tap::{Admitted, TapLayer};

/// The overload phase's load and supplier.
#[derive(Debug, Clone, Copy)]
pub struct OverloadConfig {
    pub duration: Duration,
    /// How long the supplier takes to quote on average (from half to one and a
    /// half times it): with the bulkhead's 8 at once, its capacity is
    /// `8 / service_time` quotes per second.
    pub service_time: Duration,
    /// Requests per second per route: `/checkout` (critical), `/quote` (default),
    /// `/prefetch` (sheddable).
    pub rates: Rates,
}

impl OverloadConfig {
    /// About 3× the supplier's 267 quotes/s (30 ms a quote on average, 8 at
    /// once): critical 0.3×, default 0.9×, sheddable 1.8×, Poisson arrivals,
    /// for `duration`. The supplier is quick on purpose: a critical call waits
    /// for the next slot to free, and at the drill's 20 ms `max_wait` that must
    /// come well within 20 ms (with 8 slots of 30 ms, one frees every 4 ms).
    pub fn three_times(duration: Duration) -> Self {
        Self {
            duration,
            service_time: Duration::from_millis(30),
            rates: Rates {
                arrivals: Arrivals::Poisson { seed: 2026 },
                checkout: 80,
                quote: 240,
                prefetch: 480,
                recommendations: 0,
                products: 0,
            },
        }
    }

    /// The quotes per second the supplier serves over a bulkhead of `policy`.
    pub fn capacity(&self, policy: &Policy) -> f64 {
        policy.max_concurrent as f64 / self.service_time.as_secs_f64()
    }
}

/// The class a route asks its quote as.
pub fn class_of(endpoint: Endpoint) -> Criticality {
    match endpoint {
        Endpoint::Checkout => Criticality::Critical,
        Endpoint::Prefetch => Criticality::Sheddable,
        _ => Criticality::Default,
    }
}

/// The routes of the overload phase, the most critical first.
pub const ROUTES: [Endpoint; 3] = [Endpoint::Checkout, Endpoint::Quote, Endpoint::Prefetch];

/// The overload shop's policy: the drill's freight budget and bulkhead, with the
/// classes' shares written out (they are the defaults).
pub fn document(p: &Policy) -> String {
    let d = duration_format::format;
    format!(
        r#"
[policies.freight]
deadline = "{budget}"

[policies.freight.bulkhead]
max_concurrent = {max_concurrent}
queue = {{ max_queue = {max_queue}, max_wait = "{max_wait}", shares = {{ default = 90, sheddable = 50 }} }}
"#,
        budget = d(p.budget),
        max_concurrent = p.max_concurrent,
        max_queue = p.max_queue,
        max_wait = d(p.max_wait),
    )
}

type Quotes = BoxCloneSyncService<http::Request<Empty<Bytes>>, u64, BoxError>;

#[derive(Clone)]
struct Shop {
    supplier: SocketAddr,
    quotes: Quotes,
}

/// One side of the phase, running.
pub struct Side {
    pub addr: SocketAddr,
    pub bulkhead: Handle,
    /// Every call the bulkhead let through, with its class.
    pub admitted: TapLayer,
    /// Kept for as long as the side runs: dropped, the supplier stops.
    supplier: Freight,
}

/// Starts a supplier and a shop over it, whose bulkhead reads the classes when
/// `classes` is true.
pub async fn start(p: &Policy, config: &OverloadConfig, classes: bool) -> Result<Side, BoxError> {
    let supplier = Freight::start_taking(config.service_time)?;
    let policies = Policies::from_toml(&document(p))?;
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build_http::<Empty<Bytes>>();
    // The shop wrote the class itself: its own bulkhead trusts it.
    let bulkhead = policies.bulkhead("freight")?;
    let handle = bulkhead.handle();
    let admitted = TapLayer::new(p.budget, std::sync::Arc::new(|| "–"));
    let fetch = tower::service_fn(move |req: http::Request<Empty<Bytes>>| {
        let call = client.request(req);
        async move {
            let res = call.await?;
            let status = res.status();
            let body = res.into_body().collect().await?.to_bytes();
            if !status.is_success() {
                return Err::<u64, BoxError>(format!("supplier answered {status}").into());
            }
            let json: Value = serde_json::from_slice(&body)?;
            json["price_cents"]
                .as_u64()
                .ok_or_else(|| "quote without a price".into())
        }
    });
    let deadline = policies.deadline("freight")?;
    let quotes = if classes {
        BoxCloneSyncService::new(
            ServiceBuilder::new()
                .layer(deadline)
                .layer(bulkhead.criticality(CriticalityHeader::new().trusted(true)))
                .layer(admitted.clone())
                .service(fetch),
        )
    } else {
        BoxCloneSyncService::new(
            ServiceBuilder::new()
                .layer(deadline)
                .layer(bulkhead)
                .layer(admitted.clone())
                .service(fetch),
        )
    };
    let shop = Shop {
        supplier: supplier.addr(),
        quotes,
    };
    let app = Router::new()
        .route("/checkout", get(checkout))
        .route("/quote", get(browse))
        .route("/prefetch", get(prefetch))
        .with_state(shop);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(Side {
        addr,
        bulkhead: handle,
        admitted,
        supplier,
    })
}

async fn checkout(State(shop): State<Shop>) -> (StatusCode, Json<Value>) {
    ask(&shop, Criticality::Critical).await
}

async fn browse(State(shop): State<Shop>) -> (StatusCode, Json<Value>) {
    ask(&shop, Criticality::Default).await
}

async fn prefetch(State(shop): State<Shop>) -> (StatusCode, Json<Value>) {
    ask(&shop, Criticality::Sheddable).await
}

/// Asks the supplier for a quote as `class`, written on the outgoing call.
async fn ask(shop: &Shop, class: Criticality) -> (StatusCode, Json<Value>) {
    let mut req = http::Request::get(format!("http://{}/quote?to=PT-1000", shop.supplier))
        .body(Empty::new())
        .unwrap_or_default();
    CriticalityHeader::new().write(req.headers_mut(), class);
    match shop.quotes.clone().oneshot(req).await {
        Ok(cents) => (StatusCode::OK, Json(json!({ "price_cents": cents }))),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "price_cents": null, "reason": cause(&e) })),
        ),
    }
}

/// Why a quote was not served, as the table names it.
fn cause(err: &BoxError) -> &'static str {
    match find_rejection(&**err).map(|r| (r.kind(), r.full_cause())) {
        Some((RejectionKind::BulkheadFull, Some(FullCause::Displaced))) => "displaced",
        Some((RejectionKind::BulkheadFull, _)) => "capacity_full",
        Some((RejectionKind::BulkheadTimeout, _)) => "queue_timeout",
        Some((RejectionKind::DeadlineExceeded, _)) => "timeout",
        _ => "supplier_error",
    }
}

/// What one side saw.
pub struct SideRun {
    pub label: &'static str,
    pub answers: Vec<Answer>,
    pub admitted: Vec<Admitted>,
    /// Slots still held or waited for once the load stopped and the calls ended.
    pub held_at_end: usize,
}

/// What the phase saw: the side with classes, then the plain FIFO side.
pub struct OverloadRun {
    pub config: OverloadConfig,
    pub budget: Duration,
    pub sides: [SideRun; 2],
}

/// Runs the phase: the same load through the side with classes, then through
/// the plain one (one after the other, so that neither takes the other's CPU).
pub async fn run(p: &Policy, config: OverloadConfig) -> Result<OverloadRun, BoxError> {
    let classes = drive(p, &config, true, "classes").await?;
    let fifo = drive(p, &config, false, "FIFO").await?;
    Ok(OverloadRun {
        config,
        budget: p.budget,
        sides: [classes, fifo],
    })
}

/// Starts one side, offers it the load, and waits for its last calls.
async fn drive(
    p: &Policy,
    config: &OverloadConfig,
    classes: bool,
    label: &'static str,
) -> Result<SideRun, BoxError> {
    let side = start(p, config, classes).await?;
    let (_, tags) = load::Tags::new(1);
    let answers = load::run(side.addr, config.rates, config.duration, tags).await;
    Ok(SideRun {
        label,
        answers,
        admitted: side.admitted.log(),
        held_at_end: drained(&side.bulkhead, p.budget).await,
    })
}

/// The slots `bulkhead` still holds or queues once its last calls have ended:
/// every call is bounded by the budget, so this is zero at once unless a slot
/// leaked (a machine too busy to run the deadline's timer gets a hundred budgets).
async fn drained(bulkhead: &Handle, budget: Duration) -> usize {
    let held = || {
        let s = bulkhead.snapshot();
        s.active + s.queued
    };
    let give_up = tokio::time::Instant::now() + budget * 100;
    while held() > 0 && tokio::time::Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held()
}

/// One line of the phase's table: one class on one side.
#[derive(Debug, Clone, Default)]
pub struct ClassRow {
    pub side: &'static str,
    pub class: &'static str,
    pub requests: usize,
    /// Quotes served with the supplier's price within the budget.
    pub served_in_budget: usize,
    /// p99 of the quotes served.
    pub p99_served: Duration,
    /// Quotes not served, by cause.
    pub rejected: BTreeMap<String, usize>,
    /// Prices the supplier never quoted (never any).
    pub invented_prices: usize,
    /// The most calls of the class the bulkhead had let through at once.
    pub most_at_once: usize,
}

impl ClassRow {
    /// The share of the class's requests served within the budget, in percent.
    pub fn served_share(&self) -> f64 {
        if self.requests == 0 {
            return 0.0;
        }
        100.0 * self.served_in_budget as f64 / self.requests as f64
    }
}

impl OverloadRun {
    /// One row per side and class, the side with classes first.
    pub fn rows(&self) -> Vec<ClassRow> {
        let mut rows = Vec::new();
        for side in &self.sides {
            for endpoint in ROUTES {
                let class = class_of(endpoint);
                let answers: Vec<&Answer> = side
                    .answers
                    .iter()
                    .filter(|a| a.endpoint == endpoint)
                    .collect();
                let served: Vec<Duration> = answers
                    .iter()
                    .filter(|a| a.status == 200 && a.price_cents.is_some())
                    .map(|a| a.latency)
                    .collect();
                let mut rejected = BTreeMap::new();
                for a in answers.iter().filter(|a| a.status != 200) {
                    let why = a.reason.clone().unwrap_or_else(|| "unknown".into());
                    *rejected.entry(why).or_insert(0) += 1;
                }
                rows.push(ClassRow {
                    side: side.label,
                    class: class.as_str(),
                    requests: answers.len(),
                    served_in_budget: served.iter().filter(|l| **l <= self.budget).count(),
                    p99_served: percentile(served, 0.99),
                    rejected,
                    invented_prices: answers
                        .iter()
                        .filter(|a| a.price_cents.is_some_and(|c| c != PRICE_CENTS))
                        .count(),
                    most_at_once: most_at_once(&side.admitted, Some(class), self.budget),
                });
            }
        }
        rows
    }

    /// The most calls `side` had let through at once, all classes together.
    pub fn most_at_once(&self, side: usize) -> usize {
        self.sides
            .get(side)
            .map_or(0, |s| most_at_once(&s.admitted, None, self.budget))
    }
}

/// The most calls of `class` (of any class with `None`) in flight at once past
/// the bulkhead.
fn most_at_once(admitted: &[Admitted], class: Option<Criticality>, budget: Duration) -> usize {
    let of_class = admitted
        .iter()
        .filter(|c| class.is_none() || c.class == class);
    most_in_flight(of_class, budget)
}

/// The phase's table, as printed.
pub fn table(run: &OverloadRun, p: &Policy) -> String {
    let mut out = String::new();
    let capacity = run.config.capacity(p);
    let _ = writeln!(
        out,
        "overload: the supplier takes {:?} a quote on average ({capacity:.0} quotes/s over {} at once); offered {} requests/s \
         (critical {:.1}×, default {:.1}×, sheddable {:.1}×) for {:?}, budget {:?}, queue {} / {:?}",
        run.config.service_time,
        p.max_concurrent,
        run.config.rates.checkout + run.config.rates.quote + run.config.rates.prefetch,
        f64::from(run.config.rates.checkout) / capacity,
        f64::from(run.config.rates.quote) / capacity,
        f64::from(run.config.rates.prefetch) / capacity,
        run.config.duration,
        run.budget,
        p.max_queue,
        p.max_wait,
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| bulkhead | class | requests | served within the budget | p99 served | not served (by cause) | most at once |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---|---:|");
    for r in run.rows() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} % | {} ms | {} | {} |",
            r.side,
            r.class,
            r.requests,
            r.served_share(),
            r.p99_served.as_millis(),
            by_cause(&r.rejected),
            r.most_at_once,
        );
    }
    out
}
