//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

/// A unique file under the system's temporary directory, removed on drop.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn with(text: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "seawall-test-{}-{}.toml",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, text).unwrap();
        Self(path)
    }

    pub fn write(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Serves HTTP/1 on a fresh loopback port, every request answered by `handle`,
/// until the runtime ends: the address.
pub async fn serve_http1<F, Fut>(handle: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let svc = hyper::service::service_fn(handle.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// Closed, and every call it saw (`n`) a success.
#[cfg(feature = "circuit-breaker")]
pub fn assert_closed_after_successes(breaker: &seawall::circuit_breaker::Handle, n: u64) {
    assert_eq!(breaker.state(), seawall::circuit_breaker::State::Closed);
    let counters = breaker.snapshot().counters;
    assert_eq!((counters.successes, counters.failures), (n, 0));
}

/// The `freight` policy the policy documents of these tests start with: a
/// deadline, a bulkhead that queues nothing, a count-window breaker. A macro, so
/// `concat!` can extend it into a longer document.
#[allow(unused_macros)] // each test file uses a part
macro_rules! freight_policy {
    () => {
        r#"
[policies.freight]
deadline = "300ms"

[policies.freight.bulkhead]
max_concurrent = 2
queue = { max_queue = 0, max_wait = "20ms" }

[policies.freight.breaker]
policy = { kind = "count_window", size = 4, min_calls = 4, failure_rate = 0.5 }
open_for = "10s"
"#
    };
}
#[allow(unused_imports)] // each test file uses a part
pub(crate) use freight_policy;
