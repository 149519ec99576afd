//! Allocation counting: a global allocator that counts only on a thread that asked
//! for it, so the idle runtime threads and the contended phase never touch the
//! counters.
//!
//! `unsafe` is needed to implement [`GlobalAlloc`]; this bench-only package does not
//! opt into the workspace lints (which forbid it in the library crates).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES_IN: AtomicU64 = AtomicU64::new(0);
static BYTES_OUT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNT_HERE: Cell<bool> = const { Cell::new(false) };
}

fn counting_here() -> bool {
    COUNT_HERE.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged;
// the counters are plain atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting_here() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES_IN.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if counting_here() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES_IN.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if counting_here() {
            BYTES_OUT.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counting_here() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            BYTES_IN.fetch_add(new_size as u64, Ordering::Relaxed);
            BYTES_OUT.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Clone, Copy)]
struct Snapshot {
    allocs: u64,
    bytes_in: u64,
    bytes_out: u64,
}

fn snapshot() -> Snapshot {
    Snapshot {
        allocs: ALLOCS.load(Ordering::Relaxed),
        bytes_in: BYTES_IN.load(Ordering::Relaxed),
        bytes_out: BYTES_OUT.load(Ordering::Relaxed),
    }
}

/// Runs `f` with allocation counting on for this thread; returns its result and
/// (allocations, net live bytes) during it.
pub(crate) fn counted<T>(f: impl FnOnce() -> T) -> (T, u64, i64) {
    let before = snapshot();
    COUNT_HERE.with(|c| c.set(true));
    let out = f();
    COUNT_HERE.with(|c| c.set(false));
    let after = snapshot();
    let live =
        (after.bytes_in - before.bytes_in) as i64 - (after.bytes_out - before.bytes_out) as i64;
    (out, after.allocs - before.allocs, live)
}
