// rust-lang/rust#64552, with tower's own `Timeout` and no seawall layer: a
// `service_fn` closure whose `async` block returns `Result<_, BoxError>` cannot be
// awaited through a middleware whose error is `BoxError` inside `tokio::spawn`.
// What matters in the error: "is not general enough". When this case starts to
// compile, the compiler is fixed: drop the workaround note (name the inner error
// type) from the README and the adopter suite, and this case.
use std::time::Duration;

use tower::{service_fn, BoxError, ServiceBuilder, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let svc = ServiceBuilder::new()
        .timeout(Duration::from_secs(1))
        .service(service_fn(|key: String| async move { Ok::<_, BoxError>(key) }));
    let _ = tokio::spawn(async move { svc.oneshot("k1".to_owned()).await }).await?;
    Ok(())
}
