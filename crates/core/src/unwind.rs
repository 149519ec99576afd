//! Seeing a panic pass through: how a layer records a panicking dependency as a failure.
//!
//! A layer that hands a call to an inner service must record a panic in that service
//! (in `poll_ready`, `call` or its future's `poll`) as a failure, as every peer
//! resilience library does: a client that panics on every response must still trip
//! a breaker. Checking [`std::thread::panicking`] in a `Drop` is not enough, because
//! under `catch_unwind` (tower-http's `CatchPanicLayer`, or a runtime catching a
//! task's panic) the future is dropped *after* unwinding has ended and looks merely
//! cancelled. [`on_unwind`] puts a guard in the very frame that calls the inner
//! service, so the mark is made while the panic unwinds through it.

/// Runs `f`; if it panics, runs `on_panic` while the panic unwinds through this
/// frame, then lets the panic continue.
///
/// `on_panic` must not panic itself (a panic while unwinding aborts the process).
/// Costs nothing measurable when `f` returns: the guard is disarmed without a branch
/// on the hot path beyond a flag.
///
/// ```
/// use std::panic::{catch_unwind, AssertUnwindSafe};
/// use seawall_core::on_unwind;
///
/// let mut seen = false;
/// let caught = catch_unwind(AssertUnwindSafe(|| {
///     on_unwind(|| -> u32 { panic!("the dependency's client panicked") }, || seen = true)
/// }));
/// assert!(caught.is_err());
/// assert!(seen);
///
/// let mut seen = false;
/// assert_eq!(on_unwind(|| 7, || seen = true), 7);
/// assert!(!seen);
/// ```
#[inline]
pub fn on_unwind<R>(f: impl FnOnce() -> R, on_panic: impl FnOnce()) -> R {
    let mut watch = Watch(Some(on_panic));
    let out = f();
    watch.0 = None;
    out
}

/// Runs its closure when dropped while still armed, that is, during unwinding.
struct Watch<G: FnOnce()>(Option<G>);

impl<G: FnOnce()> Drop for Watch<G> {
    #[inline]
    fn drop(&mut self) {
        if let Some(on_panic) = self.0.take() {
            on_panic();
        }
    }
}
