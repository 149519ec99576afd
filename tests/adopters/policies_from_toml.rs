//! A user keeps their policies in a TOML file, loads it with
//! `seawall::config::Policies::load`, finds the policy of their key-value store in
//! the file's `[dependencies]`, and builds the store's bulkhead → breaker from it
//! around a `service_fn` whose error is `std::io::Error`; calls run in spawned tasks.
//! The test writes the file to a temporary path it creates.
//!
//! Asserted: the breaker follows the file, not the defaults: it opens after the
//! file's two consecutive failures (the default needs ten calls in its window), and
//! its `CircuitOpen` rejection says to retry after the file's 90 s (the default opens
//! for 10 s). The clock is tokio's paused one, so the retry-after is exact.

use std::io;
use std::time::Duration;

use seawall::config::Policies;
use seawall::{find_rejection, BoxError, RejectionKind, ServiceBuilderExt};
use tower::{service_fn, ServiceBuilder, ServiceExt};

const POLICIES: &str = r#"
[policies.kv]
bulkhead = { max_concurrent = 4, queue = { max_queue = 0 } }

[policies.kv.breaker]
policy = { kind = "consecutive_failures", threshold = 2 }
open_for = "90s"
jitter = 0.0

[dependencies]
kv-store = "kv"
"#;

#[tokio::test(start_paused = true)]
async fn a_breaker_built_from_a_policy_file_follows_the_file() -> Result<(), BoxError> {
    let path = std::env::temp_dir().join(format!(
        "seawall-adopters-policies-{}.toml",
        std::process::id()
    ));
    std::fs::write(&path, POLICIES)?;
    let loaded = Policies::load(&path);
    std::fs::remove_file(&path)?;
    let policies = loaded?;

    let name = policies
        .policy_for_dependency("kv-store")
        .ok_or("the file maps no policy to kv-store")?;
    let breaker = policies.circuit_breaker(&name, |b| b)?;
    let handle = breaker.handle();
    let kv = ServiceBuilder::new()
        .bulkhead(policies.bulkhead(&name)?)
        .circuit_breaker(breaker)
        .service(service_fn(|key: String| async move {
            Err::<String, _>(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer for {key}"),
            ))
        }));

    let mut errors = Vec::new();
    for i in 0..3 {
        let kv = kv.clone();
        let result = tokio::spawn(async move { kv.oneshot(format!("session:{i}")).await }).await?;
        errors.push(result.expect_err("the store times out"));
    }
    assert!(find_rejection(&*errors[0]).is_none());
    assert!(find_rejection(&*errors[1]).is_none());
    let rejection = find_rejection(&*errors[2]).expect("the third call is refused");
    assert_eq!(rejection.kind(), RejectionKind::CircuitOpen);
    assert_eq!(rejection.retry_after(), Some(Duration::from_secs(90)));
    assert_eq!(handle.snapshot().counters.failures, 2);
    Ok(())
}
