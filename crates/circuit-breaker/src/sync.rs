//! The atomics and the mutex of a breaker's shared state: `std`'s, or loom's when
//! the crate's own tests are built with `--cfg loom`, so the loom models drive the
//! production [`Breaker`](crate::state::Breaker), not a copy of it.
//!
//! Only `cfg(all(test, loom))` switches: a user who builds with `--cfg loom` for
//! their own models still gets plain `std` types here.

#[cfg(all(test, loom))]
pub(crate) use loom::sync::{atomic::AtomicU64, Mutex, MutexGuard};
#[cfg(not(all(test, loom)))]
pub(crate) use std::sync::{atomic::AtomicU64, Mutex, MutexGuard};
