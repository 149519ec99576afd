//! The freight dependency: a hyper server on 127.0.0.1 whose behaviour follows the
//! drill's schedule where only a server can play it: it closes its listener to refuse
//! connections, and answers a business 404. The slow and 5xx phases are played by
//! the shop's fault layer in front of it (`scenario::rehearsal`), so it stays
//! healthy then, as a real supplier during a rehearsal would. It runs on its own
//! thread and runtime, like a remote supplier, and counts every request it receives.
//! The recommender is another instance, still answering 503 itself in `ServerError`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use seawall::core::{RandomSource, SeededRandom};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

/// How the supplier behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Answers a price at once.
    Healthy,
    /// The phase where the supplier is slower than the shop's budget, played by the
    /// shop's fault layer: a server in this mode answers as a healthy one.
    Slow,
    /// Listener closed and live keep-alive connections dropped: connections are refused.
    Refusing,
    /// Answers 503.
    ServerError,
    /// Answers 404 "no quote for this destination": a business answer, not sickness.
    BusinessRefusal,
    /// Shut down for good.
    Stopped,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Healthy => "healthy",
            Mode::Slow => "slow",
            Mode::Refusing => "refusing",
            Mode::ServerError => "5xx",
            Mode::BusinessRefusal => "business 404",
            Mode::Stopped => "stopped",
        }
    }

    fn accepts(self) -> bool {
        !matches!(self, Mode::Refusing | Mode::Stopped)
    }
}

/// The price the supplier quotes, in cents. The shop must never show another.
pub const PRICE_CENTS: u64 = 1250;

/// A running supplier.
pub struct Freight {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    in_flight: Arc<InFlight>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Freight {
    /// Starts the supplier on an ephemeral loopback port, healthy, answering at once.
    pub fn start() -> std::io::Result<Self> {
        Self::start_taking(Duration::ZERO)
    }

    /// [`start`](Self::start), each answer taking half to one and a half times
    /// `service_time`, `service_time` on average (the overload phase's supplier,
    /// whose capacity is the calls let in at once over it).
    pub fn start_taking(service_time: Duration) -> std::io::Result<Self> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(Mode::Healthy);
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let seen = arrivals.clone();
        let in_flight = Arc::new(InFlight::default());
        let counted = in_flight.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("freight".into())
            .spawn(move || {
                runtime.block_on(serve(
                    std_listener,
                    addr,
                    mode_rx,
                    seen,
                    counted,
                    service_time,
                ));
            })?;
        Ok(Self {
            addr,
            mode,
            arrivals,
            in_flight,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// The most requests it had in flight at once (a request whose client went
    /// away stops counting when its connection closes).
    pub fn most_in_flight(&self) -> usize {
        self.in_flight.most.load(Ordering::SeqCst)
    }

    /// Arrival instants of every request received so far.
    pub fn arrivals(&self) -> Vec<Instant> {
        self.arrivals.lock().map(|a| a.clone()).unwrap_or_default()
    }
}

impl Drop for Freight {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Stopped);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Requests in flight at the supplier, and the most at once.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// Counts one request in flight until dropped (answered, or its connection gone).
struct Serving(Arc<InFlight>);

impl Serving {
    fn new(counts: &Arc<InFlight>) -> Self {
        let n = counts.now.fetch_add(1, Ordering::SeqCst) + 1;
        counts.most.fetch_max(n, Ordering::SeqCst);
        Self(counts.clone())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve(
    first: std::net::TcpListener,
    addr: SocketAddr,
    mut mode_rx: watch::Receiver<Mode>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    in_flight: Arc<InFlight>,
    service_time: Duration,
) {
    let mut initial = Some(first);
    loop {
        let mode = *mode_rx.borrow_and_update();
        if mode == Mode::Stopped {
            return;
        }
        if !mode.accepts() {
            if mode_rx.changed().await.is_err() {
                return;
            }
            continue;
        }
        let listener = match initial.take() {
            Some(l) => TcpListener::from_std(l),
            None => TcpListener::bind(addr).await,
        };
        let Ok(listener) = listener else {
            // The port is briefly unavailable: try again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    tokio::spawn(connection(stream, mode_rx.clone(), arrivals.clone(), in_flight.clone(), service_time));
                }
                changed = mode_rx.changed() => {
                    if changed.is_err() { return; }
                    if !mode_rx.borrow().accepts() { break; }
                }
            }
        }
        // Dropping the listener here closes the port: new connections are refused.
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    mode_rx: watch::Receiver<Mode>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    in_flight: Arc<InFlight>,
    service_time: Duration,
) {
    let handler_mode = mode_rx.clone();
    let svc = service_fn(move |_req: Request<Incoming>| {
        let mode = *handler_mode.borrow();
        let nth = arrivals.lock().map_or(0, |mut a| {
            a.push(Instant::now());
            a.len()
        });
        // Half to one and a half times the service time, as a real supplier's
        // answers vary (the same sequence on every run).
        let takes = service_time.mul_f64(0.5 + SeededRandom::new(nth as u64).next_f64());
        let serving = Serving::new(&in_flight);
        async move {
            if !takes.is_zero() {
                tokio::time::sleep(takes).await;
            }
            let answer = answer(mode);
            drop(serving);
            Ok::<_, std::convert::Infallible>(answer)
        }
    });
    let conn = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), svc);
    let mut killer = mode_rx;
    tokio::select! {
        _ = conn => {}
        _ = killer.wait_for(|m| !m.accepts()) => {
            // Dropping the connection future closes the socket under the client's pool.
        }
    }
}

fn answer(mode: Mode) -> Response<Full<Bytes>> {
    let (status, body) = match mode {
        Mode::Healthy | Mode::Slow => {
            (StatusCode::OK, format!("{{\"price_cents\":{PRICE_CENTS}}}"))
        }
        Mode::ServerError | Mode::Refusing | Mode::Stopped => (
            StatusCode::SERVICE_UNAVAILABLE,
            "supplier overloaded".to_owned(),
        ),
        Mode::BusinessRefusal => (
            StatusCode::NOT_FOUND,
            "no quote for this destination".to_owned(),
        ),
    };
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    res
}
