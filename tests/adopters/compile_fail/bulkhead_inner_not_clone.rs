// A client that is not `Clone` under a bulkhead, layered and called the way users
// write it: the bulkhead drives the inner service from its response future on a
// clone taken at call time, so it needs `S: Clone`, and says so where it is layered.
// What matters in the error: "consider annotating `Store` with `#[derive(Clone)]`".
use std::future::Ready;
use std::task::{Context, Poll};

use seawall::bulkhead::BulkheadLayer;
use seawall::BoxError;
use tower::{Layer, Service, ServiceExt};

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

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let bulkhead = BulkheadLayer::builder("kv").build()?;
    let kv = bulkhead.layer(Store);
    let value = tokio::spawn(async move { kv.oneshot("k1".to_string()).await }).await??;
    assert_eq!(value, "k1");
    Ok(())
}
