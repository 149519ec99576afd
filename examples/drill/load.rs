//! A bounded load generator: fixed rates per endpoint, stops by itself at the end
//! of the schedule. Every answer is recorded with its phase, latency and kind.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use seawall::core::{RandomSource, SeededRandom};
use tokio::sync::watch;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Endpoint {
    Quote,
    Checkout,
    Recommendations,
    Products,
    /// The overload phase's sheddable quotes (a page prefetching prices).
    Prefetch,
}

impl Endpoint {
    pub const ALL: [Endpoint; 5] = [
        Endpoint::Quote,
        Endpoint::Checkout,
        Endpoint::Recommendations,
        Endpoint::Products,
        Endpoint::Prefetch,
    ];

    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Quote => "/quote",
            Endpoint::Checkout => "/checkout",
            Endpoint::Recommendations => "/recommendations",
            Endpoint::Products => "/products",
            Endpoint::Prefetch => "/prefetch",
        }
    }
}

/// One answer as the customer saw it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub endpoint: Endpoint,
    pub phase: usize,
    pub sent_at: Instant,
    pub latency: Duration,
    pub status: u16,
    /// The price shown to the customer, if any.
    pub price_cents: Option<u64>,
    /// Why there is no price (from the shop's JSON), or the level that served.
    pub reason: Option<String>,
}

/// How requests are spaced in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrivals {
    /// At a fixed period per endpoint.
    Fixed,
    /// Poisson arrivals (exponential gaps) from a seed: the open-loop model of
    /// many independent callers, whose bursts a queue meets in production.
    Poisson { seed: u64 },
}

/// Requests per second for each endpoint.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    pub arrivals: Arrivals,
    pub quote: u32,
    pub checkout: u32,
    pub recommendations: u32,
    pub products: u32,
    pub prefetch: u32,
}

impl Rates {
    fn of(&self, e: Endpoint) -> u32 {
        match e {
            Endpoint::Quote => self.quote,
            Endpoint::Checkout => self.checkout,
            Endpoint::Recommendations => self.recommendations,
            Endpoint::Products => self.products,
            Endpoint::Prefetch => self.prefetch,
        }
    }
}

/// The phase the load tags its requests with, and how many requests of each phase
/// are still in flight: before the supplier becomes kinder, the scenario waits
/// until no request tagged with an earlier, harsher phase can still reach it.
#[derive(Clone)]
pub struct Tags {
    current: watch::Receiver<usize>,
    in_flight: Arc<watch::Sender<Vec<usize>>>,
}

impl Tags {
    /// Tags for `phases` phases, starting at the first; the scenario moves them
    /// with the returned sender.
    pub fn new(phases: usize) -> (watch::Sender<usize>, Self) {
        let (current_tx, current) = watch::channel(0);
        let (in_flight, _) = watch::channel(vec![0; phases]);
        let tags = Self {
            current,
            in_flight: Arc::new(in_flight),
        };
        (current_tx, tags)
    }

    /// A request starts: tagged with the current phase, counted in flight until
    /// the returned guard drops.
    fn start(&self) -> InFlight {
        let phase = *self.current.borrow();
        self.in_flight.send_modify(|n| {
            if let Some(n) = n.get_mut(phase) {
                *n += 1;
            }
        });
        InFlight {
            phase,
            in_flight: Arc::clone(&self.in_flight),
        }
    }

    /// Waits until every request tagged with a phase before `phase` has ended.
    pub async fn drained_before(&self, phase: usize) {
        let mut counts = self.in_flight.subscribe();
        let _ = counts
            .wait_for(|n| n.iter().take(phase).all(|&n| n == 0))
            .await;
    }
}

/// One request in flight, counted under its phase until dropped.
struct InFlight {
    phase: usize,
    in_flight: Arc<watch::Sender<Vec<usize>>>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.in_flight.send_modify(|n| {
            if let Some(n) = n.get_mut(self.phase) {
                *n = n.saturating_sub(1);
            }
        });
    }
}

/// Drives the shop at `rates` for `duration`, tagging answers with the current phase.
pub async fn run(shop: SocketAddr, rates: Rates, duration: Duration, tags: Tags) -> Vec<Answer> {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build_http();
    let answers = Arc::new(Mutex::new(Vec::new()));
    let mut generators = Vec::new();
    for endpoint in Endpoint::ALL {
        let rate = rates.of(endpoint);
        if rate == 0 {
            continue;
        }
        let client = client.clone();
        let answers = answers.clone();
        let tags = tags.clone();
        let mut gap = gaps(rates.arrivals, endpoint, rate);
        generators.push(tokio::spawn(async move {
            let mut in_flight = Vec::new();
            let end = Instant::now() + duration;
            let mut next = Instant::now();
            loop {
                tokio::time::sleep_until(next).await;
                // Open loop: the arrivals keep to their schedule, whatever the
                // shop's answers or the timer's lateness (a millisecond).
                next += gap();
                if Instant::now() >= end {
                    break;
                }
                let client = client.clone();
                let answers = answers.clone();
                let started = tags.start();
                in_flight.push(tokio::spawn(async move {
                    let answer = one(&client, shop, endpoint, started.phase).await;
                    drop(started);
                    if let Ok(mut a) = answers.lock() {
                        a.push(answer);
                    }
                }));
            }
            for t in in_flight {
                let _ = t.await;
            }
        }));
    }
    for g in generators {
        let _ = g.await;
    }
    let mut all = answers.lock().map(|a| a.clone()).unwrap_or_default();
    all.sort_by_key(|a| a.sent_at);
    all
}

/// The gaps between `endpoint`'s requests at `rate` per second.
fn gaps(arrivals: Arrivals, endpoint: Endpoint, rate: u32) -> impl FnMut() -> Duration + Send {
    let period = Duration::from_secs(1) / rate;
    let mut random = match arrivals {
        Arrivals::Fixed => None,
        Arrivals::Poisson { seed } => Some(SeededRandom::new(seed ^ endpoint as u64)),
    };
    move || match random.as_mut() {
        None => period,
        Some(r) => period.mul_f64(-(1.0 - r.next_f64()).ln()),
    }
}

async fn one(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    shop: SocketAddr,
    endpoint: Endpoint,
    phase: usize,
) -> Answer {
    let uri = format!("http://{shop}{}", endpoint.path());
    let sent_at = Instant::now();
    let mut answer = Answer {
        endpoint,
        phase,
        sent_at,
        latency: Duration::ZERO,
        status: 0,
        price_cents: None,
        reason: None,
    };
    let Ok(uri) = uri.parse::<hyper::Uri>() else {
        answer.reason = Some("bad uri".into());
        return answer;
    };
    match client.get(uri).await {
        Ok(res) => {
            answer.status = res.status().as_u16();
            let body = res.into_body().collect().await.map(|b| b.to_bytes());
            answer.latency = sent_at.elapsed();
            if let Ok(body) = body {
                if let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body) {
                    answer.price_cents = json.get("price_cents").and_then(|v| v.as_u64());
                    answer.reason = json
                        .get("reason")
                        .or_else(|| json.get("level"))
                        .and_then(|v| v.as_str())
                        .map(str::to_owned);
                }
            }
        }
        Err(e) => {
            answer.latency = sent_at.elapsed();
            answer.reason = Some(format!("shop unreachable: {e}"));
        }
    }
    answer
}
