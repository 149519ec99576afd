//! The atomics and the mutex of the admission semaphore: `std`'s, or loom's when the
//! crate's own tests are built with `--cfg loom`, so the loom models drive the
//! production [`Semaphore`](crate::semaphore::Semaphore), not a copy of it.
//!
//! Only `cfg(all(test, loom))` switches: a user who builds with `--cfg loom` for
//! their own models still gets plain `std` types here.

#[cfg(all(test, loom))]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicU64, AtomicUsize},
    Mutex, MutexGuard,
};
#[cfg(not(all(test, loom)))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicU64, AtomicUsize},
    Mutex, MutexGuard,
};
