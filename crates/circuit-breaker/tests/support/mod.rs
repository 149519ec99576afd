//! Test fixtures: a failing supplier and a call pattern for the metrics and tracing
//! tests and the counting supplier of the service and hooks tests (`counting`).
#![allow(dead_code, unreachable_pub)]

pub mod counting;

use std::sync::{Arc, Mutex};

use seawall_core::BoxError;
use tower::{service_fn, Service, ServiceExt};

pub type Req = http::Request<()>;

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// 3 successes, then 14 calls to a failing supplier: the default policy trips when the
/// window holds 10 outcomes (3 successes, 7 failures), the last 7 are rejected.
pub async fn drive<S>(svc: &mut S, failing: &Arc<Mutex<bool>>)
where
    S: Service<Req, Response = (), Error = BoxError>,
{
    for _ in 0..3 {
        svc.ready().await.unwrap().call(Req::new(())).await.unwrap();
    }
    *failing.lock().unwrap() = true;
    for _ in 0..14 {
        let _ = svc.ready().await.unwrap().call(Req::new(())).await;
    }
}

pub fn supplier(
    failing: Arc<Mutex<bool>>,
) -> impl Service<Req, Response = (), Error = BoxError, Future: Send> + Clone {
    service_fn(move |_req: Req| {
        let fail = *failing.lock().unwrap();
        async move {
            if fail {
                Err::<(), BoxError>("down".into())
            } else {
                Ok(())
            }
        }
    })
}
