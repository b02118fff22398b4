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

/// A lock [`lock`] takes: a plain mutex, or one that counts its waits
/// (`contention::Counted`: the core's locks on allocation paths).
pub trait Lock {
    /// What the lock protects.
    type Data;
    /// Takes the lock, waiting if needed (poisoning ignored, see [`lock`]).
    fn acquire(&self) -> MutexGuard<'_, Self::Data>;
    /// Takes the lock if nobody holds it.
    fn try_acquire(&self) -> Option<MutexGuard<'_, Self::Data>>;
}

impl<T> Lock for Mutex<T> {
    type Data = T;

    #[inline]
    fn acquire(&self) -> MutexGuard<'_, T> {
        #[cfg(loom)]
        {
            self.lock().unwrap()
        }
        #[cfg(not(loom))]
        {
            self.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    #[inline]
    fn try_acquire(&self) -> Option<MutexGuard<'_, T>> {
        match self.try_lock() {
            Ok(g) => Some(g),
            #[cfg(not(loom))]
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(_) => None,
        }
    }
}

/// Locks a mutex, ignoring poisoning: the core's critical sections leave their data consistent at
/// every point where user code (a hook) can panic, so a poisoned lock is still a valid lock.
/// Exported (as `ebbtide_core::lock`) as the one such helper of the workspace: every crate above
/// keeps the same rule for its own locks (state consistent wherever a callback can panic).
/// A counting mutex (`contention::Counted`) counts here when it finds the lock held.
#[inline]
pub fn lock<L: Lock + ?Sized>(m: &L) -> MutexGuard<'_, L::Data> {
    m.acquire()
}

/// Tries to lock without waiting; `None` when another thread holds the lock (contention).
#[inline]
pub(crate) fn try_lock<L: Lock + ?Sized>(m: &L) -> Option<MutexGuard<'_, L::Data>> {
    m.try_acquire()
}
