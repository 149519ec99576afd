// A classifier written as a predicate over the result by value, returning a bool,
// on a service kept as a `BoxCloneSyncService`. What matters in the error: the
// classifier's expected signature,
// "expected closure signature `for<'a> fn(Result<&'a u32, ErrorRef<'a>>) -> _`".
use seawall::circuit_breaker::CircuitBreakerLayer;
use seawall::BoxError;
use tower::util::BoxCloneSyncService;
use tower::{service_fn, Layer};

fn main() -> Result<(), BoxError> {
    let breaker = CircuitBreakerLayer::builder("kv")
        .classifier(|r: Result<u32, ()>| r.is_ok())
        .build()?;
    let inner = service_fn(|n: u32| async move { Ok::<_, std::io::Error>(n) });
    let _kv: BoxCloneSyncService<u32, u32, BoxError> =
        BoxCloneSyncService::new(breaker.layer(inner));
    Ok(())
}
