//! A supplier that counts what reaches it, shared by the service and hooks tests.

use std::future::{ready, Ready};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use seawall_core::BoxError;
use tower::{Service, ServiceExt};

pub type Req = http::Request<&'static str>;

pub fn req() -> Req {
    http::Request::new("quote")
}

/// An inner service that counts `poll_ready` and `call`, and fails while told to.
#[derive(Clone, Default)]
pub struct Counting {
    polls: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
    failing: Arc<AtomicBool>,
}

impl Counting {
    pub fn polls(&self) -> usize {
        self.polls.load(Ordering::SeqCst)
    }
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    /// `(polls, calls)`, to compare before and after.
    pub fn seen(&self) -> (usize, usize) {
        (self.polls(), self.calls())
    }
    pub fn fail(&self, yes: bool) {
        self.failing.store(yes, Ordering::SeqCst);
    }
}

impl Service<Req> for Counting {
    type Response = &'static str;
    type Error = BoxError;
    type Future = Ready<Result<&'static str, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            ready(Err("supplier down".into()))
        } else {
            ready(Ok("quote"))
        }
    }
}

/// `poll_ready` then `call`, as a caller must.
pub async fn send<S>(svc: &mut S) -> Result<&'static str, BoxError>
where
    S: Service<Req, Response = &'static str, Error = BoxError>,
{
    svc.ready().await?.call(req()).await
}
