//! Waiting on a real server: a condition polled under a watchdog (a bound on a
//! wait that must end, never a measurement), and one command on a connection of
//! the test's own.

use std::time::Duration;

use tokio::time::{sleep, Instant};

/// How long any wait that must end may take before the test gives up.
pub const WATCHDOG: Duration = Duration::from_secs(60);

/// Waits until `done` answers true; fails the test after [`WATCHDOG`].
pub async fn until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WATCHDOG;
    while !done().await {
        assert!(Instant::now() < deadline, "watchdog: never {what}");
        sleep(Duration::from_millis(20)).await;
    }
}

/// One command on a connection of the test's own; `None` while the server does
/// not answer or refuses it.
pub async fn query<T: ::redis::FromRedisValue>(url: &str, cmd: &::redis::Cmd) -> Option<T> {
    let client = ::redis::Client::open(url).ok()?;
    let connect = client.get_multiplexed_async_connection();
    let mut con = tokio::time::timeout(Duration::from_secs(2), connect)
        .await
        .ok()?
        .ok()?;
    tokio::time::timeout(Duration::from_secs(2), cmd.query_async(&mut con))
        .await
        .ok()?
        .ok()
}
