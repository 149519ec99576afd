//! Fixtures shared by the tests of seawall's crates, so that each is written once:
//!
//! - [`Series`], a metrics recorder keeping every series as an exporter would;
//! - [`Stream`], a response body the test feeds frame by frame;
//! - [`paused_runtime`], a current-thread runtime on Tokio's paused clock;
//! - [`RedisServer`], a `redis-server` of a test's own on a free loopback port;
//! - [`watchdog`], which runs a scenario that would deadlock if a lock were held
//!   across user code, and fails the test instead of hanging it.
//!
//! Only tests use it (a dev-dependency); it depends on none of seawall's crates, so
//! any of them can use it without a cycle.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod body;
mod redis_server;
mod series;

pub use body::{Sent, Stream};
pub use redis_server::RedisServer;
pub use series::Series;

/// A current-thread runtime whose clock starts paused: timers fire as soon as
/// nothing else can run, so tests take no real time and assert exact instants.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds")
}

/// Runs `scenario` on a thread of its own and returns what it returns; panics with
/// `deadlocked` if it has not finished within a minute, and says so if it panicked.
///
/// A watchdog, not a timing check: a minute is far beyond what any scenario takes
/// on a loaded machine, so only a deadlock (a lock held while user code runs that
/// needs it) gets there.
pub fn watchdog<T: Send + 'static>(
    deadlocked: &str,
    scenario: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(scenario());
    });
    match finished.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(out) => out,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{deadlocked}"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the scenario panicked"),
    }
}
