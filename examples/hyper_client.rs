//! A hyper-util client behind seawall's recommended stack, calling a local supplier
//! that is healthy, then slow, then failing, then healthy again:
//!
//! ```text
//! FallbackLayer        the last quote the supplier sent, with its age, while it is
//!                      valid (30 s); otherwise an explicit "no quote"
//! DeadlineLayer(300ms) the budget of the call, retries included, body included
//! DeadlineRetry        the one layer that retries: 3 attempts, jittered waits, a budget
//! BulkheadLayer(4)     at most 4 calls to the supplier at once, each holding its slot
//!                      until the response body has been read (hold_until_body_end)
//! CircuitBreakerLayer  HTTP status classifier: 5xx, 429 and transport errors fail;
//!                      a call is judged when its body ends (hold_until_body_end)
//! hyper-util Client
//! ```
//!
//! **Until the body ends.** A client's call is not over when the response's headers
//! arrive: the connection streams the body after them, and the body can still stall
//! or fail. So both the bulkhead and the breaker are held until the body ends
//! (`hold_until_body_end`): the slot is freed, and the breaker judges the call, when
//! the caller has read the body to its end (or it failed, or was dropped: a dropped
//! body is a cancelled call, not recorded); the request's deadline bounds the body
//! too. The response type becomes `Response<Guarded<..>>`, which the fallback wraps
//! in an `Either` with its own body (`EitherResponse`), so its answer need not be
//! the supplier's body type. The burst at the end shows a slot held by an unread
//! body.
//!
//! **The fallback never invents a price.** It answers with the last quote the
//! supplier really sent, unchanged, with its `Age` and its source in the headers,
//! while that quote is younger than its declared validity; with nothing valid it
//! answers "no quote" (`Unavailable`), which the caller shows as such.
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
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use seawall::bulkhead::BulkheadLayer;
use seawall::circuit_breaker::CircuitBreakerLayer;
use seawall::core::{DeadlineLayer, DeadlineRetry, Jitter, RetrySnapshot};
use seawall::fallback::http::{served, EitherResponse};
use seawall::fallback::{FallbackLayer, FallbackRequest, Rejections, Trigger, Unavailable};
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

/// How long a quote stays valid once the supplier sent it: what the supplier
/// agreed to honour (here, for the example, 30 s).
const QUOTE_VALIDITY: Duration = Duration::from_secs(30);

/// Where the cached quote's headers say it came from.
const QUOTE_SOURCE: &str = "x-quote-source";

/// The last quote the supplier sent, and when it arrived: the only thing the
/// fallback may answer with. Cloned handles share it.
#[derive(Clone, Default)]
struct LastQuote(Arc<Mutex<Option<(Bytes, tokio::time::Instant)>>>);

impl LastQuote {
    /// Keeps `quote`, read to its end from the supplier's answer.
    fn store(&self, quote: Bytes) {
        let now = tokio::time::Instant::now();
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((quote, now));
    }

    /// The quote and its age, if it is still within its validity.
    fn fresh(&self) -> Option<(Bytes, Duration)> {
        let last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (quote, at) = last.as_ref()?;
        let age = at.elapsed();
        (age < QUOTE_VALIDITY).then(|| (quote.clone(), age))
    }

    /// The fallback's answer: the cached quote with its `Age` (whole seconds, as
    /// HTTP caches give it) and source, or an explicit "no quote".
    fn answer(&self) -> Result<Response<Full<Bytes>>, BoxError> {
        let Some((quote, age)) = self.fresh() else {
            return Err(
                Unavailable::new("no quote: none from the supplier within its validity").into(),
            );
        };
        let mut res = Response::new(Full::new(quote));
        res.headers_mut()
            .insert(header::AGE, HeaderValue::from(age.as_secs()));
        res.headers_mut().insert(
            QUOTE_SOURCE,
            HeaderValue::from_static("cache: last quote from freight-supplier, valid 30 s"),
        );
        Ok(res)
    }
}

fn quote_request(addr: SocketAddr) -> http::Result<Request<Full<Bytes>>> {
    Request::get(format!("http://{addr}/quote?to=PT-1000")).body(Full::default())
}

/// What the caller got: the supplier's answer (kept in `last` as the latest
/// quote), or the fallback's and why. The body is read to its end: that is when
/// the bulkhead frees the call's slot and the breaker judges it.
async fn describe<B>(
    result: Result<EitherResponse<B, Full<Bytes>>, BoxError>,
    last: &LastQuote,
) -> String
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let res = match result {
        Ok(res) => res,
        Err(e) => match Unavailable::find(&*e) {
            Some(no_quote) => return format!("fallback: {}", no_quote.reason()),
            None => return format!("error: {e}"),
        },
    };
    let served = served(&res).cloned();
    let status = res.status();
    let age = res.headers().get(header::AGE).cloned();
    let body = match res.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return format!("{status}, body failed: {e}"),
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    let cached = |why: &str| {
        let age = age.as_ref().and_then(|a| a.to_str().ok()).unwrap_or("?");
        format!("{why}, cached {text}, age {age} s")
    };
    match served.map(|s| s.trigger()) {
        None => {
            if status.is_success() {
                last.store(body);
            }
            format!("served {status}: {text}")
        }
        Some(Trigger::Rejected(RejectionKind::CircuitOpen)) => cached("breaker open"),
        Some(t) => cached(&format!("fallback ({t})")),
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
    let last = LastQuote::default();
    let fallback = FallbackLayer::builder("freight-quote")
        .on_rejections(Rejections::ALL) // open breaker, full bulkhead, deadline
        .on_failure(HttpStatus::default()) // a 5xx answer or a transport error
        .sync_fn({
            // The last quote the supplier sent, while valid; never a made-up price.
            let last = last.clone();
            move |_r: FallbackRequest<()>| last.answer()
        })
        .either_body()
        .build()?;
    let (breaker_handle, bulkhead_handle) = (breaker.handle(), bulkhead.handle());
    let retry_handle = retry.handle();

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    // Client stacks hold the slot and the breaker's verdict until the body ends.
    let quotes = ServiceBuilder::new()
        .fallback(fallback)
        .deadline(DeadlineLayer::new(Duration::from_millis(300))?)
        .deadline_retry(retry)
        .bulkhead(bulkhead.hold_until_body_end())
        .circuit_breaker(breaker.hold_until_body_end())
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
            let what = describe(quotes.clone().oneshot(quote_request(addr)?).await, &last).await;
            println!(
                "call {n:>2}: {what:<62} breaker {:?}, supplier hits {}, {}",
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
    // Every answer is in before any body is read: the 4 admitted calls still hold
    // their slots (their bodies are unread), the other 2 were turned away.
    let mut answers = Vec::new();
    for call in burst {
        answers.push(call.await?);
    }
    println!(
        "   all answers in, no body read yet: {} slots held",
        bulkhead_handle.snapshot().active
    );
    for answer in answers {
        n += 1;
        println!("call {n:>2}: {}", describe(answer, &last).await);
    }
    println!(
        "   every body read: {} slots held",
        bulkhead_handle.snapshot().active
    );

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
