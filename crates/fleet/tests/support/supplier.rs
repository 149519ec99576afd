//! A loopback hyper server standing for a supplier with a real concurrency
//! limit: it counts its own requests in flight at every change, and stops work on
//! a request whose client went away (hyper drops the handler when the connection
//! closes), so abandoned calls do not inflate its count for long.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use seawall_core::BoxError;
use tokio::net::TcpListener;

#[derive(Debug, Default)]
pub struct Counts {
    now: AtomicUsize,
    most: AtomicUsize,
    served: AtomicU64,
    /// Requests whose handler was dropped before answering (the client left).
    abandoned: AtomicU64,
}

pub struct Supplier {
    pub addr: SocketAddr,
    pub counts: Arc<Counts>,
    task: tokio::task::AbortHandle,
}

impl Drop for Supplier {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct InFlight {
    counts: Arc<Counts>,
    answered: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counts.now.fetch_sub(1, Ordering::SeqCst);
        if !self.answered {
            self.counts.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Supplier {
    /// Listens on a free loopback port; each request takes `work`.
    pub async fn start(work: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Counts::default());
        let c = Arc::clone(&counts);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let c = Arc::clone(&c);
                tokio::spawn(async move {
                    let svc = service_fn(move |_req: Request<Incoming>| {
                        let counts = Arc::clone(&c);
                        async move {
                            let n = counts.now.fetch_add(1, Ordering::SeqCst) + 1;
                            counts.most.fetch_max(n, Ordering::SeqCst);
                            let mut in_flight = InFlight {
                                counts: Arc::clone(&counts),
                                answered: false,
                            };
                            tokio::time::sleep(work).await;
                            in_flight.answered = true;
                            counts.served.fetch_add(1, Ordering::SeqCst);
                            drop(in_flight);
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                                b"quote",
                            ))))
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            addr,
            counts,
            task: task.abort_handle(),
        }
    }

    /// The most requests it had in flight at once.
    pub fn most(&self) -> usize {
        self.counts.most.load(Ordering::SeqCst)
    }

    /// Starts the high-water mark again from the requests in flight now.
    pub fn reset_most(&self) {
        let now = self.counts.now.load(Ordering::SeqCst);
        self.counts.most.store(now, Ordering::SeqCst);
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.counts.now.load(Ordering::SeqCst)
    }

    pub fn served(&self) -> u64 {
        self.counts.served.load(Ordering::SeqCst)
    }

    pub fn abandoned(&self) -> u64 {
        self.counts.abandoned.load(Ordering::SeqCst)
    }
}

/// A hyper client calling `addr`, as a Tower service of `()`, each call bounded
/// by `longest` (dropping the request closes its connection, which ends the
/// supplier's work on it).
pub fn client(
    addr: SocketAddr,
    longest: Duration,
) -> impl tower::Service<(), Response = (), Error = BoxError, Future = impl Send> + Clone + Send + Sync
{
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let uri: hyper::Uri = format!("http://{addr}/quote").parse().unwrap();
    tower::service_fn(move |()| {
        let client = client.clone();
        let uri = uri.clone();
        async move {
            let call = async {
                let res = client.get(uri).await?;
                let _ = res.into_body().collect().await?;
                Ok::<(), BoxError>(())
            };
            match tokio::time::timeout(longest, call).await {
                Ok(result) => result,
                Err(_) => Err("the call outlived its bound".into()),
            }
        }
    })
}
