//! The dependency's own backoff signals, over a real loopback hyper server: a retry
//! is not sent before a `Retry-After`, not at all when that does not fit in the
//! deadline, and never after a "do not retry" pushback. Real time: only invariants
//! (at least, at most) are asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use seawall::core::{DeadlineLayer, DeadlineRetry, HttpPushback, Jitter, RetryHandle};
use seawall::{BoxError, HttpStatus, ServiceBuilderExt};
use tower::{ServiceBuilder, ServiceExt};

const MS: Duration = Duration::from_millis(1);

/// A loopback server answering its n-th request (from 0) with `answer(n)`, the
/// arrival of each request recorded.
async fn server(answer: fn(usize) -> Response<Full<Bytes>>) -> (String, Arc<Mutex<Vec<Instant>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/quote", listener.local_addr().unwrap());
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = arrivals.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req: Request<Incoming>| {
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(Instant::now());
                        seen.len() - 1
                    };
                    async move { Ok::<_, Infallible>(answer(n)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (url, arrivals)
}

fn answer(status: u16, header: Option<(&'static str, &'static str)>) -> Response<Full<Bytes>> {
    let mut res = Response::builder().status(status);
    if let Some((name, value)) = header {
        res = res.header(name, value);
    }
    res.body(Full::new(Bytes::from_static(b"-"))).unwrap()
}

/// GETs `url` through Deadline(`budget`) → Retry(3 attempts, `HttpPushback`) → client.
async fn get(url: &str, budget: Duration) -> (u16, RetryHandle) {
    let policy = DeadlineRetry::builder("supplier")
        .max_attempts(3)
        .min_attempt_time(50 * MS)
        .backoff(MS, 10 * MS, Jitter::Full)
        .classifier(HttpStatus::default())
        .pushback(HttpPushback)
        .build()
        .unwrap();
    let handle = policy.handle();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let svc = ServiceBuilder::new()
        .deadline(DeadlineLayer::new(budget).unwrap())
        .deadline_retry(policy)
        .map_err(BoxError::from)
        .service(client);
    let req = Request::get(url).body(Full::new(Bytes::new())).unwrap();
    let res: Response<Incoming> = svc.oneshot(req).await.unwrap();
    (res.status().as_u16(), handle)
}

#[tokio::test]
async fn a_retry_waits_for_the_dependencys_retry_after() {
    let (url, arrivals) = server(|n| {
        if n == 0 {
            answer(503, Some(("retry-after", "1")))
        } else {
            answer(200, None)
        }
    })
    .await;
    let (status, retries) = get(&url, Duration::from_secs(3)).await;
    assert_eq!(status, 200);
    let arrivals = arrivals.lock().unwrap();
    assert_eq!(arrivals.len(), 2);
    let gap = arrivals[1] - arrivals[0];
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
    assert_eq!(retries.snapshot().retries, 1);
}

#[tokio::test]
async fn a_retry_after_past_the_deadline_is_not_waited_for() {
    let (url, arrivals) = server(|_| answer(429, Some(("retry-after", "2")))).await;
    let (status, retries) = get(&url, Duration::from_millis(500)).await;
    // The caller gets the 429 itself: a wait for the retry-after would have ended
    // at the 500 ms deadline with an error instead.
    assert_eq!(status, 429);
    assert_eq!(arrivals.lock().unwrap().len(), 1);
    let seen = retries.snapshot();
    assert_eq!((seen.retries, seen.refused_deadline), (0, 1));
}

#[tokio::test]
async fn a_do_not_retry_pushback_ends_the_retries() {
    let (url, arrivals) = server(|_| answer(503, Some(("grpc-retry-pushback-ms", "-1")))).await;
    let (status, retries) = get(&url, Duration::from_secs(3)).await;
    assert_eq!(status, 503);
    assert_eq!(arrivals.lock().unwrap().len(), 1);
    let seen = retries.snapshot();
    assert_eq!((seen.retries, seen.refused_pushback), (0, 1));

    // Without the signal the same 503 is retried, every attempt used.
    let (url, arrivals) = server(|_| answer(503, None)).await;
    let (status, _) = get(&url, Duration::from_secs(3)).await;
    assert_eq!(status, 503);
    assert_eq!(arrivals.lock().unwrap().len(), 3);
}
