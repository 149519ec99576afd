//! A supplier answered by hand: each request's body is a channel on which the test
//! sends the status to answer with, so the test decides when and how each call ends.
#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::future::Future;
use std::pin::Pin;

use seawall_core::BoxError;
use tokio::sync::oneshot;
use tokio_test::{assert_pending, assert_ready, task};
use tower::Service;

/// The request carries the channel its answer comes on.
pub type Req = http::Request<oneshot::Receiver<u16>>;
pub type Res = http::Response<()>;
/// A call in flight, boxed so that calls through different services share one type.
pub type Call = task::Spawn<Pin<Box<dyn Future<Output = Result<Res, BoxError>> + Send>>>;

/// Answers each call with the status the test sends on its request's channel.
pub async fn supplier(req: Req) -> Result<Res, BoxError> {
    let code = req.into_body().await?;
    let mut res = http::Response::new(());
    *res.status_mut() = http::StatusCode::from_u16(code)?;
    Ok(res)
}

/// A request for `path`, and the sender that answers it.
pub fn request(path: &str) -> (Req, oneshot::Sender<u16>) {
    let (tx, rx) = oneshot::channel();
    let mut req = http::Request::new(rx);
    *req.uri_mut() = path.parse().unwrap();
    (req, tx)
}

/// Starts a call for `path` and checks it is in flight: running or waiting for a slot.
pub fn call<S>(svc: &mut S, path: &str) -> (Call, oneshot::Sender<u16>)
where
    S: Service<Req, Response = Res, Error = BoxError>,
    S::Future: Send + 'static,
{
    let (req, tx) = request(path);
    let fut: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(svc.call(req));
    let mut call = task::spawn(fut);
    assert_pending!(call.poll());
    (call, tx)
}

/// Answers a running call with `status` and checks it completes.
pub fn answer(mut call: Call, tx: oneshot::Sender<u16>, status: u16) {
    tx.send(status).unwrap();
    assert_ready!(call.poll()).unwrap();
}
