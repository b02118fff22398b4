//! The synchronisation shim: every atomic and lock of the core comes from here, so the per-CPU
//! protocol can be model-checked with `loom` (`RUSTFLAGS="--cfg loom"`), as tokio and crossbeam do.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

/// Locks a mutex, ignoring poisoning: the core's critical sections leave their data consistent at
/// every point where user code (a hook) can panic, so a poisoned lock is still a valid lock.
/// Exported (as `ebbtide_core::lock`) as the one such helper of the workspace: every crate above
/// keeps the same rule for its own locks (state consistent wherever a callback can panic).
#[inline]
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(loom)]
    {
        m.lock().unwrap()
    }
    #[cfg(not(loom))]
    {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Tries to lock without waiting; `None` when another thread holds the lock (contention).
#[inline]
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        #[cfg(not(loom))]
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(_) => None,
    }
}
