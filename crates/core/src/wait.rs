//! Whether the call being made may wait in a queue for capacity.
//!
//! A hedge exists to cut the tail: one that waits in a bulkhead's line behind the
//! calls it should overtake only adds load, and holds a queue place a first attempt
//! could have had. The hedging layer makes its hedges' `call`s inside
//! [`without_waiting`]; a bulkhead below it then gives such a call a free slot or
//! turns it away at once as full, never queues it. Like the current deadline, the
//! mark lives on the thread for just that `call` (no allocation, no request
//! extension), so it reaches a bulkhead called directly below, not one behind a
//! `tower::Buffer` (whose worker makes the call on another task).

use std::cell::Cell;

thread_local! {
    static NO_WAIT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (a service's `call`) marked as a call that may not wait in a queue.
pub fn without_waiting<R>(f: impl FnOnce() -> R) -> R {
    /// Restores the mark as it was, also if `f` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            NO_WAIT.with(|w| w.set(self.0));
        }
    }
    let _restore = Restore(NO_WAIT.with(|w| w.replace(true)));
    f()
}

/// Whether the call being made may wait in a queue: `false` inside
/// [`without_waiting`].
#[inline]
pub fn may_wait() -> bool {
    !NO_WAIT.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_holds_inside_and_is_restored_after_nesting_and_panics() {
        assert!(may_wait());
        without_waiting(|| {
            assert!(!may_wait());
            without_waiting(|| assert!(!may_wait()));
            assert!(!may_wait());
        });
        assert!(may_wait());
        let panicked = std::panic::catch_unwind(|| without_waiting(|| panic!("inner call")));
        assert!(panicked.is_err());
        assert!(may_wait());
    }
}
