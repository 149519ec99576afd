//! Hedged requests against a long-tailed supplier: a real hyper server on loopback
//! that answers most requests in about 5 ms and one in a hundred in about 500 ms.
//!
//! The same 2,000 requests (20 callers, 100 each) go through Deadline(1 s) → client
//! three times: with no hedging, with a hedge after a fixed 20 ms, and with a hedge
//! at the 95th percentile of recent first attempts. For each, the caller's p50 and
//! p99, p99.9 and the extra load on the supplier (its requests beyond one per call).
//!
//! Run with `cargo run --release --example hedging`.
#![allow(clippy::print_stdout)]

#[path = "shared/logs.rs"]
mod logs;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use seawall::core::{BoxError, DeadlineLayer, HedgeLayer, HttpStatus};
use seawall::ServiceBuilderExt;
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};

const CALLERS: usize = 20;
const PER_CALLER: usize = 100;

type Stack = BoxCloneService<Request<Full<Bytes>>, Response<Incoming>, BoxError>;

/// The supplier: every hundredth request it receives takes 500 ms, the others 5 ms.
async fn supplier() -> Result<(String, Arc<AtomicUsize>), BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/quote", listener.local_addr()?);
    let received = Arc::new(AtomicUsize::new(0));
    let count = received.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let n = count.fetch_add(1, Ordering::Relaxed);
                    async move {
                        let takes = if n % 100 == 99 { 500 } else { 5 };
                        tokio::time::sleep(Duration::from_millis(takes)).await;
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                            b"12.50 EUR",
                        ))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok((url, received))
}

/// Sends every request through `stack`; the sorted latencies.
async fn run(stack: Stack, url: &str) -> Vec<Duration> {
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let stack = stack.clone();
        let url = url.to_owned();
        callers.spawn(async move {
            let mut took = Vec::with_capacity(PER_CALLER);
            for _ in 0..PER_CALLER {
                let req = Request::get(&url)
                    .body(Full::new(Bytes::new()))
                    .unwrap_or_default();
                let started = Instant::now();
                if stack.clone().oneshot(req).await.is_ok() {
                    took.push(started.elapsed());
                }
            }
            took
        });
    }
    let mut all = Vec::new();
    while let Some(Ok(took)) = callers.join_next().await {
        all.extend(took);
    }
    all.sort();
    all
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * p / 100.0).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    logs::install();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let deadline = || DeadlineLayer::new(Duration::from_secs(1));
    let hedged = |layer: HedgeLayer<HttpStatus>| -> Result<Stack, BoxError> {
        Ok(BoxCloneService::new(
            ServiceBuilder::new()
                .deadline(deadline()?)
                .hedge(layer)
                .map_err(BoxError::from)
                .service(client.clone()),
        ))
    };
    let budget = |b: seawall::core::HedgeBuilder| {
        b.classifier(HttpStatus::default())
            .budget(0.1, 10, Duration::from_secs(10))
    };
    let modes: Vec<(&str, Stack, Option<seawall::core::HedgeHandle>)> = {
        let plain = BoxCloneService::new(
            ServiceBuilder::new()
                .deadline(deadline()?)
                .map_err(BoxError::from)
                .service(client.clone()),
        );
        let fixed =
            budget(HedgeLayer::builder("fixed").fixed_delay(Duration::from_millis(20))).build()?;
        let fixed_handle = fixed.handle();
        let p95 = budget(HedgeLayer::builder("p95").percentile_delay(95.0)).build()?;
        let p95_handle = p95.handle();
        vec![
            ("no hedging", plain, None),
            (
                "hedge after a fixed 20 ms",
                hedged(fixed)?,
                Some(fixed_handle),
            ),
            (
                "hedge at the p95 of first attempts",
                hedged(p95)?,
                Some(p95_handle),
            ),
        ]
    };
    println!(
        "{} requests ({CALLERS} callers × {PER_CALLER}) to a loopback supplier: 5 ms, and 500 ms for one request in 100\n",
        CALLERS * PER_CALLER
    );
    println!(
        "| configuration | p50 | p99 | p99.9 | max | supplier requests | extra load | hedges sent / won |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, stack, handle) in modes {
        let (url, received) = supplier().await?;
        let took = run(stack, &url).await;
        let calls = CALLERS * PER_CALLER;
        let seen = received.load(Ordering::Relaxed);
        let hedges = handle
            .map(|h| {
                let s = h.snapshot();
                format!("{} / {}", s.hedges_sent, s.hedges_won)
            })
            .unwrap_or_else(|| "–".into());
        println!(
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {seen} | +{:.1} % | {hedges} |",
            percentile(&took, 50.0).as_secs_f64() * 1e3,
            percentile(&took, 99.0).as_secs_f64() * 1e3,
            percentile(&took, 99.9).as_secs_f64() * 1e3,
            took.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
            (seen.saturating_sub(calls)) as f64 * 100.0 / calls as f64,
        );
    }
    Ok(())
}
