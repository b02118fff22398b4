//! Tests only: this thread's calls of the malloc's slow paths, counted by the slow paths
//! themselves (`heap.rs`), read by the tests of the entry points (`entry.rs`).

use core::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    /// This thread's calls of the slow paths (`alloc_class_slow`;
    /// `free_tagged`, `free_missed`): how a test sees whether `malloc` and `free`
    /// finished on their fast paths.
    ///
    /// Atomics, though each is this thread's: the optimiser keeps no atomic's value across a
    /// call, so a count read after a `malloc` or `free` through a pointer is the slow paths'.
    static SLOW: [AtomicU64; 2] = const { [AtomicU64::new(0), AtomicU64::new(0)] };
}

pub(crate) fn count_slow_alloc() {
    SLOW.with(|c| c[0].fetch_add(1, Ordering::Relaxed));
}

pub(crate) fn count_slow_free() {
    SLOW.with(|c| c[1].fetch_add(1, Ordering::Relaxed));
}

/// This thread's counts: (allocations, frees).
pub(crate) fn slow() -> (u64, u64) {
    SLOW.with(|c| (c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed)))
}
