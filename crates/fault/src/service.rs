//! The service: asks the handle whether this call gets a fault (one atomic load when
//! nothing is injected), and what kind of requests it serves, through
//! [`Requests`](crate::Requests).

use std::task::{Context, Poll};

use seawall_core::BoxError;
use tower_service::Service;

use crate::fault::Fault;
use crate::future::FaultFuture;
use crate::handle::Handle;
use crate::machine::Facts;
use crate::requests::{AnyRequest, Requests, Responses};

/// The service a [`FaultLayer`](crate::FaultLayer) builds. Clones share the handle.
#[derive(Debug, Clone)]
pub struct FaultService<S, R = AnyRequest> {
    inner: S,
    handle: Handle,
    requests: R,
}

impl<S, R> FaultService<S, R> {
    pub(crate) fn new(inner: S, handle: Handle, requests: R) -> Self {
        Self {
            inner,
            handle,
            requests,
        }
    }

    /// The layer's handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, Req, R> Service<Req> for FaultService<S, R>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    R: Requests<Req> + Responses<S::Response>,
{
    type Response = R::Response;
    type Error = BoxError;
    type Future = FaultFuture<S::Future, S::Response, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        if !self.handle.is_armed() {
            return FaultFuture::pass(self.inner.call(req), self.requests.clone());
        }
        let decision = {
            let key = self.requests.key(&req);
            let facts = Facts {
                route: self.requests.route(&req),
                key: key.as_deref(),
            };
            self.handle.decide(&facts, R::HTTP)
        };
        let Some(decision) = decision else {
            return FaultFuture::pass(self.inner.call(req), self.requests.clone());
        };
        let policy = self.handle.name_arc().clone();
        match decision.fault {
            Fault::Refused | Fault::Reset | Fault::Hang { .. } => {
                FaultFuture::fail(&decision.fault, policy, self.requests.clone())
            }
            Fault::HttpStatus(_) | Fault::GrpcStatus(_) => {
                match self.requests.answer(&decision.fault, &policy) {
                    Some(answer) => FaultFuture::answer(answer, self.requests.clone()),
                    None => FaultFuture::pass(self.inner.call(req), self.requests.clone()),
                }
            }
            Fault::Latency { .. } | Fault::SlowBody { .. } | Fault::FailingBody { .. } => {
                FaultFuture::call_with(
                    self.inner.call(req),
                    decision.fault,
                    policy,
                    self.requests.clone(),
                )
            }
        }
    }
}
