//! Fixtures shared by the tests of seawall's crates, so that each is written once:
//!
//! - [`Series`], a metrics recorder keeping every series as an exporter would;
//! - [`Stream`], a response body the test feeds frame by frame;
//! - [`paused_runtime`], a current-thread runtime on Tokio's paused clock.
//!
//! Only tests use it (a dev-dependency); it depends on none of seawall's crates, so
//! any of them can use it without a cycle.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod body;
mod series;

pub use body::{Sent, Stream};
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
