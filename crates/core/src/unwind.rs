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
    let watch = PanicWatch::arm(on_panic);
    let out = f();
    watch.disarm();
    out
}

/// [`on_unwind`] as a value: armed around code that is not a closure, so a call
/// that takes a large request by value (an `http::Request` is 224 bytes) is made
/// with it directly instead of after moving it into a closure's captures.
///
/// Dropping the watch while it is armed runs `on_panic`, whatever the reason: a
/// panic unwinding through it, but also an early exit (`?`, `return`,
/// `ready!`) between [`arm`](Self::arm) and [`disarm`](Self::disarm). So keep
/// the watched code to one call whose result is bound to a local, disarm, and
/// only then act on the result.
///
/// ```
/// use std::panic::{catch_unwind, AssertUnwindSafe};
/// use seawall_core::PanicWatch;
///
/// fn call(panics: bool) -> u32 {
///     assert!(!panics, "the dependency's client panicked");
///     7
/// }
///
/// let mut seen = false;
/// let caught = catch_unwind(AssertUnwindSafe(|| {
///     let watch = PanicWatch::arm(|| seen = true);
///     let out = call(true);
///     watch.disarm();
///     out
/// }));
/// assert!(caught.is_err());
/// assert!(seen);
///
/// let mut seen = false;
/// let watch = PanicWatch::arm(|| seen = true);
/// assert_eq!(call(false), 7);
/// watch.disarm();
/// assert!(!seen);
/// ```
#[must_use = "dropped at once, the watch runs `on_panic` at once: disarm it after the watched code"]
pub struct PanicWatch<G: FnOnce()>(Option<G>);

impl<G: FnOnce()> PanicWatch<G> {
    /// Starts watching: `on_panic` runs if the watch is dropped before
    /// [`disarm`](Self::disarm). `on_panic` must not panic itself (a panic while
    /// unwinding aborts the process).
    #[inline]
    pub fn arm(on_panic: G) -> Self {
        Self(Some(on_panic))
    }

    /// Stops watching: the watched code returned.
    #[inline]
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl<G: FnOnce()> std::fmt::Debug for PanicWatch<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PanicWatch")
            .field("armed", &self.0.is_some())
            .finish()
    }
}

impl<G: FnOnce()> Drop for PanicWatch<G> {
    #[inline]
    fn drop(&mut self) {
        if let Some(on_panic) = self.0.take() {
            on_panic();
        }
    }
}
