//! A hyper-util client behind seawall's recommended stack, calling a local supplier
//! that is healthy, then slow, then failing, then healthy again:
//!
//! ```text
//! FallbackLayer        a clearly marked stale quote when the supplier cannot answer
//! DeadlineLayer(300ms) the budget of the call, retries included
//! DeadlineRetry        the one layer that retries: 3 attempts, jittered waits, a budget
//! BulkheadLayer(4)     at most 4 calls to the supplier at once
//! CircuitBreakerLayer  HTTP status classifier: 5xx, 429 and transport errors fail
//! hyper-util Client
//! ```
//!
//! Each line shows what the caller got (the supplier's answer, or the fallback and
//! why), the breaker's state after the call, how many requests reached the
//! supplier (while the breaker is open, none do) and what the retry layer did.
//! While the supplier fails, the first failing call is retried twice; the retry
//! budget (one retry in reserve, plus one per five first attempts) then refuses
//! further retries, so the supplier sees each later call once, until the breaker
//! opens and its rejection, which is never retried, answers at once. The slow call
//! spends the whole budget and is not retried.
//!
//! Run with `cargo run --example hyper_client` (finishes by itself in about 2 s).
#![allow(clippy::print_stdout)]

#[path = "shared/logs.rs"]
mod logs;
#[path = "shared/phases.rs"]
mod phases;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::CircuitBreakerLayer;
use seawall::core::{DeadlineLayer, DeadlineRetry, Jitter, RetrySnapshot};
use seawall::fallback::http::{served, EitherResponse};
use seawall::fallback::{FallbackLayer, FallbackRequest, Rejections, Trigger};
use seawall::{BoxError, HttpStatus, RejectionKind, ServiceBuilderExt};
use tower::{ServiceBuilder, ServiceExt};

/// The supplier: answers `status` after `delay_ms`, counting the requests it gets.
#[derive(Clone, Default)]
struct Supplier {
    status: Arc<AtomicU16>,
    delay_ms: Arc<AtomicU64>,
    received: Arc<AtomicUsize>,
}

impl Supplier {
    fn set(&self, status: u16, delay: Duration) {
        self.status.store(status, Ordering::SeqCst);
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    async fn handle(self, _req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
        self.received.fetch_add(1, Ordering::SeqCst);
        let delay = self.delay_ms.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let status = StatusCode::from_u16(self.status.load(Ordering::SeqCst))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = if status.is_success() {
            "quote: 12.50 EUR"
        } else {
            "supplier overloaded"
        };
        let mut res = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *res.status_mut() = status;
        Ok(res)
    }

    async fn serve(&self) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let supplier = self.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let supplier = supplier.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| supplier.clone().handle(req));
                    // A connection the client dropped (a call past its deadline) ends here.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(addr)
    }
}

fn quote_request(addr: SocketAddr) -> http::Result<Request<Full<Bytes>>> {
    Request::get(format!("http://{addr}/quote?to=PT-1000")).body(Full::default())
}

/// What the caller got: the supplier's answer, or the fallback's and why.
async fn describe(result: Result<EitherResponse<Incoming, Full<Bytes>>, BoxError>) -> String {
    let res = match result {
        Ok(res) => res,
        Err(e) => return format!("error: {e}"),
    };
    let served = served(&res).cloned();
    let status = res.status();
    let body = match res.into_body().collect().await {
        Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        Err(e) => return format!("{status}, body failed: {e}"),
    };
    match served.map(|s| s.trigger()) {
        None => format!("served {status}: {body}"),
        Some(Trigger::Rejected(RejectionKind::CircuitOpen)) => {
            format!("breaker open, fallback: {body}")
        }
        Some(t) => format!("fallback ({t}): {body}"),
    }
}

/// What the retry layer did for one call, from its counters before and after.
fn retries_of(before: &RetrySnapshot, after: &RetrySnapshot) -> String {
    let mut parts = Vec::new();
    match after.retries - before.retries {
        0 => {}
        1 => parts.push("1 retry".to_owned()),
        n => parts.push(format!("{n} retries")),
    }
    for (refused, why) in [
        (
            after.refused_budget - before.refused_budget,
            "retry refused by the budget",
        ),
        (
            after.refused_deadline - before.refused_deadline,
            "retry refused: no time left",
        ),
        (
            after.refused_attempts - before.refused_attempts,
            "attempts used up",
        ),
    ] {
        if refused > 0 {
            parts.push(why.to_owned());
        }
    }
    if parts.is_empty() {
        "no retry".to_owned()
    } else {
        parts.join(", ")
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    logs::install();
    let supplier = Supplier::default();
    supplier.set(200, Duration::ZERO);
    let addr = supplier.serve().await?;

    let breaker = CircuitBreakerLayer::builder("freight-supplier")
        .count_window(10, 10, 0.5) // trips at 50 % failures of the last 10 attempts
        .open_for(Duration::from_secs(1))
        .classifier(HttpStatus::default())
        .build()?;
    let retry = DeadlineRetry::builder("freight-supplier")
        .classifier(HttpStatus::default()) // a 503 is retried, a 404 would not be
        .max_attempts(3) // the first included
        .min_attempt_time(Duration::from_millis(50))
        .backoff(
            Duration::from_millis(10),
            Duration::from_millis(100),
            Jitter::Full,
        )
        // A small budget, so that it shows within a few calls: 20 % of the first
        // attempts of the last 10 s, plus 1.
        .budget(0.2, 1, Duration::from_secs(10))
        .build()?;
    let bulkhead = BulkheadLayer::builder("freight-supplier")
        .max_concurrent(4)
        .max_queue(0)
        .build()?;
    let fallback = FallbackLayer::builder("freight-quote")
        .on_rejections(Rejections::ALL) // open breaker, full bulkhead, deadline
        .on_failure(HttpStatus::default()) // a 5xx answer or a transport error
        .sync_fn(|_r: FallbackRequest<()>| {
            // A real service would read a cache with an agreed validity; it never
            // invents a price.
            let body = Full::new(Bytes::from_static(b"stale quote: 12.40 EUR"));
            Ok::<_, BoxError>(Response::new(body))
        })
        .either_body()
        .build()?;
    let (breaker_handle, bulkhead_handle) = (breaker.handle(), bulkhead.handle());
    let retry_handle = retry.handle();

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let quotes = ServiceBuilder::new()
        .fallback(fallback)
        .deadline(DeadlineLayer::new(Duration::from_millis(300))?)
        .deadline_retry(retry)
        .bulkhead(bulkhead)
        .circuit_breaker(breaker)
        .service(client);

    let script: [(&str, u16, Duration, usize); 4] = [
        ("supplier healthy", 200, Duration::ZERO, 3),
        (
            "supplier slow (1 s, budget 300 ms)",
            200,
            Duration::from_secs(1),
            1,
        ),
        ("supplier failing with 503", 503, Duration::ZERO, 5),
        (phases::RECOVERED, 200, Duration::ZERO, 2),
    ];
    let mut n = 0;
    for (phase, status, delay, calls) in script {
        supplier.set(status, delay);
        phases::begin(phase).await;
        for _ in 0..calls {
            n += 1;
            let before = retry_handle.snapshot();
            let what = describe(quotes.clone().oneshot(quote_request(addr)?).await).await;
            println!(
                "call {n:>2}: {what:<58} breaker {:?}, supplier hits {}, {}",
                breaker_handle.state(),
                supplier.received.load(Ordering::SeqCst),
                retries_of(&before, &retry_handle.snapshot())
            );
        }
    }

    println!("-- a burst of 6 concurrent calls, supplier takes 100 ms, bulkhead of 4");
    supplier.set(200, Duration::from_millis(100));
    let requests = (0..6)
        .map(|_| quote_request(addr))
        .collect::<Result<Vec<_>, _>>()?;
    let burst: Vec<_> = requests
        .into_iter()
        .map(|req| tokio::spawn(quotes.clone().oneshot(req)))
        .collect();
    for call in burst {
        n += 1;
        println!("call {n:>2}: {}", describe(call.await?).await);
    }

    let b = breaker_handle.snapshot().counters;
    let k = bulkhead_handle.snapshot();
    println!("-- totals");
    println!(
        "breaker: {} successes, {} failures ({} timeouts), {} short-circuited",
        b.successes, b.failures, b.timeouts, b.short_circuited
    );
    println!(
        "bulkhead: {} admitted, {} rejected, {} active",
        k.admitted, k.rejected_full, k.active
    );
    let r = retry_handle.snapshot();
    println!(
        "retry: {} attempts ({} first), {} retries; refused by the budget {}, by the deadline {}; attempts used up {}",
        r.attempts,
        r.attempts - r.retries,
        r.retries,
        r.refused_budget,
        r.refused_deadline,
        r.refused_attempts
    );
    Ok(())
}
