//! A measuring tap placed between the bulkhead and the breaker: it sees every call
//! the bulkhead admitted, exactly when it starts and ends, and asks a probe what
//! state the breaker is in at that moment.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use seawall::core::{Criticality, CriticalityHeader, Deadline, CRITICALITY_HEADER};
use tokio::time::Instant;
use tower::{Layer, Service};

/// One admitted call.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub started: Instant,
    /// When its future completed or was dropped.
    pub ended: Option<Instant>,
    /// Time between the deadline being set and the call being admitted.
    pub admission_wait: Duration,
    /// The breaker's state label when the call was admitted past the bulkhead.
    pub breaker_state: &'static str,
    /// The class the shop wrote on the call (the overload phase's calls have one).
    pub class: Option<Criticality>,
}

#[derive(Clone)]
pub struct TapLayer {
    budget: Duration,
    breaker_state: Arc<dyn Fn() -> &'static str + Send + Sync>,
    log: Arc<Mutex<Vec<Admitted>>>,
}

impl TapLayer {
    pub fn new(
        budget: Duration,
        breaker_state: Arc<dyn Fn() -> &'static str + Send + Sync>,
    ) -> Self {
        Self {
            budget,
            breaker_state,
            log: Arc::default(),
        }
    }

    pub fn log(&self) -> Vec<Admitted> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl<S> Layer<S> for TapLayer {
    type Service = Tap<S>;
    fn layer(&self, inner: S) -> Tap<S> {
        Tap {
            inner,
            tap: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Tap<S> {
    inner: S,
    tap: TapLayer,
}

impl<S, B> Service<http::Request<B>> for Tap<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let now = Instant::now();
        let admission_wait = Deadline::current()
            .map(|d| (now + self.tap.budget).saturating_duration_since(d.instant()))
            .unwrap_or_default();
        let index = {
            let mut log = self.tap.log.lock().unwrap_or_else(|p| p.into_inner());
            log.push(Admitted {
                started: now,
                ended: None,
                admission_wait,
                breaker_state: (self.tap.breaker_state)(),
                class: req
                    .headers()
                    .contains_key(CRITICALITY_HEADER)
                    .then(|| CriticalityHeader::new().trusted(true).read(req.headers())),
            });
            log.len() - 1
        };
        let end = EndMark {
            log: self.tap.log.clone(),
            index,
        };
        let fut = self.inner.call(req);
        Box::pin(async move {
            let out = fut.await;
            drop(end);
            out
        })
    }
}

/// Marks the end of a call when dropped: on completion and on cancellation alike.
struct EndMark {
    log: Arc<Mutex<Vec<Admitted>>>,
    index: usize,
}

impl Drop for EndMark {
    fn drop(&mut self) {
        if let Ok(mut log) = self.log.lock() {
            if let Some(a) = log.get_mut(self.index) {
                a.ended = Some(Instant::now());
            }
        }
    }
}
