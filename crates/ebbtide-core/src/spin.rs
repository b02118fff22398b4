//! A spin lock for rare, short critical sections that must not use a std mutex: one whose
//! holder a forked child must be able to forget ([`SpinLock::reset`]: the malloc's zone
//! creation, whose creator may be another thread of the parent), or one whose code must stay
//! small (the zone objects' free list, `zone/objects.rs`, in the malloc library's hot text).
//! Waiters yield the CPU between tries. Built on std's atomics, not the loom shim: nothing here
//! is part of the per-CPU protocol loom models.

use std::sync::atomic::{AtomicBool, Ordering};

/// See the module docs.
pub struct SpinLock {
    held: AtomicBool,
}

/// Holds its [`SpinLock`] until dropped.
pub struct SpinGuard<'a>(&'a SpinLock);

impl SpinLock {
    #[inline]
    pub const fn new() -> SpinLock {
        SpinLock {
            held: AtomicBool::new(false),
        }
    }

    /// Waits for the lock (yielding between tries) and takes it.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_> {
        // Acquire: pairs with the Release in `SpinGuard::drop` (what the last holder wrote).
        while self
            .held
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        SpinGuard(self)
    }

    /// Frees the lock whoever holds it.
    ///
    /// # Safety
    /// No thread that could hold it is running: a forked child's one thread, about a holder
    /// that stayed in the parent (its guard is never dropped here).
    #[inline]
    pub unsafe fn reset(&self) {
        // Release: as a guard's drop.
        self.held.store(false, Ordering::Release);
    }
}

impl Default for SpinLock {
    fn default() -> Self {
        SpinLock::new()
    }
}

impl Drop for SpinGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: pairs with the Acquire in `SpinLock::lock`.
        self.0.held.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Two threads each add 10^5 times under the lock with a non-atomic read-modify-write:
    /// no update is lost.
    #[test]
    fn excludes_and_resets() {
        static L: SpinLock = SpinLock::new();
        static N: AtomicUsize = AtomicUsize::new(0);
        let add = || {
            for _ in 0..100_000 {
                let _g = L.lock();
                // Load then store (not fetch_add): only the lock keeps updates from being lost.
                N.store(N.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
        };
        std::thread::scope(|s| {
            s.spawn(add);
            s.spawn(add);
        });
        assert_eq!(N.load(Ordering::Relaxed), 200_000);
        // A holder that never comes back (a forked child's view): reset frees the lock.
        core::mem::forget(L.lock());
        // SAFETY: the guard above is forgotten and no other thread uses `L` any more.
        unsafe { L.reset() };
        drop(L.lock());
    }
}
