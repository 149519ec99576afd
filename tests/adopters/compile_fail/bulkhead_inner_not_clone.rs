// A client that is not `Clone` under a bulkhead, on a service kept as a
// `BoxCloneSyncService`: the bulkhead drives the inner service from its response
// future on a clone taken at call time, so it needs `S: Clone`. What matters in the
// error: "consider annotating `Store` with `#[derive(Clone)]`".
use std::future::Ready;
use std::task::{Context, Poll};

use seawall::bulkhead::BulkheadLayer;
use seawall::BoxError;
use tower::util::BoxCloneSyncService;
use tower::{Layer, Service};

struct Store;

impl Service<String> for Store {
    type Response = String;
    type Error = std::io::Error;
    type Future = Ready<Result<String, std::io::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, key: String) -> Self::Future {
        std::future::ready(Ok(key))
    }
}

fn main() -> Result<(), BoxError> {
    let bulkhead = BulkheadLayer::builder("kv").build()?;
    let _kv: BoxCloneSyncService<String, String, BoxError> =
        BoxCloneSyncService::new(bulkhead.layer(Store));
    Ok(())
}
