//! Lock contention that explains itself: a mutex that counts the times a thread found it held
//! and how long that thread then waited ([`Counted`]), one [`Waits`] per lock class and instance
//! (a zone's depot, a keg), and the process-wide classes as statics ([`ARENA`], [`REGISTRY`],
//! [`PAGE_HEAP`]). Statistics read them; a run on a many-core machine then says which lock its
//! threads queue on, without a profiler (`docs/design/contention.md`).
//!
//! The uncontended path costs what a plain lock costs: one `try_lock` (the same compare-and-swap
//! `lock` makes first). Only when it fails does the thread count a wait, read the clock, block,
//! and read the clock again — work that is small beside a wait for another thread's critical
//! section, and that a thread which did not wait never does.

use crate::os;
use crate::sync::{AtomicU64, Lock, Mutex, MutexGuard, Ordering};

/// The waits of one lock (or one class of locks): how many acquisitions found it held, and the
/// nanoseconds they spent blocked (the core's clock, [`os::now_ns`]; 0 under a fake clock).
#[derive(Debug, Default)]
pub struct Waits {
    count: AtomicU64,
    ns: AtomicU64,
}

/// A reading of [`Waits`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitCount {
    /// Acquisitions that found the lock held and blocked.
    pub waits: u64,
    /// Nanoseconds those acquisitions spent blocked.
    pub wait_ns: u64,
}

impl Waits {
    pub const fn new() -> Waits {
        Waits {
            count: AtomicU64::new(0),
            ns: AtomicU64::new(0),
        }
    }

    /// A mutex over `v` that counts its waits here, with the other mutexes of this class
    /// ([`Counted::counting_in`]).
    pub const fn mutex<T>(&'static self, v: T) -> Counted<T, &'static Waits> {
        Counted::counting_in(self, v)
    }

    /// The counts now (racy: a statistics view).
    pub fn read(&self) -> WaitCount {
        // Relaxed: two independent monotonic counters read for statistics; no other memory is
        // published through them, and a reader may see one update before the other.
        WaitCount {
            waits: self.count.load(Ordering::Relaxed),
            wait_ns: self.ns.load(Ordering::Relaxed),
        }
    }

    /// Counts one wait, blocks on `m` while timing it, and returns the guard.
    #[cold]
    #[inline(never)]
    fn wait<'a, T>(&self, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
        // Relaxed (both adds): statistics counters; the lock itself orders the protected data.
        self.count.fetch_add(1, Ordering::Relaxed);
        let t0 = os::now_ns();
        let g = crate::sync::lock(m);
        self.ns
            .fetch_add(os::now_ns().saturating_sub(t0), Ordering::Relaxed);
        g
    }
}

/// Where a [`Counted`] mutex counts: its own [`Waits`] (one per instance: a zone's depot, a
/// keg), or a static one it shares with the other locks of its class ([`ARENA`], [`PAGE_HEAP`]).
pub trait WaitsIn: Sync {
    fn waits(&self) -> &Waits;
}

impl WaitsIn for Waits {
    #[inline]
    fn waits(&self) -> &Waits {
        self
    }
}

impl WaitsIn for &'static Waits {
    #[inline]
    fn waits(&self) -> &Waits {
        self
    }
}

/// A mutex that counts its waits (see the module docs). Locked with the same `lock` as a plain
/// mutex ([`crate::lock`], through [`Lock`]), so no call site can take it without counting.
pub struct Counted<T, W: WaitsIn = Waits> {
    mutex: Mutex<T>,
    waits: W,
}

impl<T> Counted<T, Waits> {
    /// A mutex with waits of its own.
    pub const fn new(v: T) -> Counted<T, Waits> {
        Counted {
            mutex: Mutex::new(v),
            waits: Waits::new(),
        }
    }
}

impl<T> Counted<T, &'static Waits> {
    /// A mutex that counts in `waits`, shared with the other locks of its class.
    pub const fn counting_in(waits: &'static Waits, v: T) -> Counted<T, &'static Waits> {
        Counted {
            mutex: Mutex::new(v),
            waits,
        }
    }
}

impl<T, W: WaitsIn> Counted<T, W> {
    /// Where this mutex counts.
    pub fn waits(&self) -> &Waits {
        self.waits.waits()
    }

    /// Locks; `on_wait` runs first when the lock is found held (the depot grows its bucket size
    /// there, as UMA does on contention).
    #[inline]
    pub fn lock_or(&self, on_wait: impl FnOnce()) -> MutexGuard<'_, T> {
        if let Some(g) = crate::sync::try_lock(&self.mutex) {
            return g;
        }
        on_wait();
        self.waits.waits().wait(&self.mutex)
    }
}

impl<T, W: WaitsIn> Lock for Counted<T, W> {
    type Data = T;

    #[inline]
    fn acquire(&self) -> MutexGuard<'_, T> {
        self.lock_or(|| {})
    }

    #[inline]
    fn try_acquire(&self) -> Option<MutexGuard<'_, T>> {
        crate::sync::try_lock(&self.mutex)
    }
}

/// The arena's free-chunk mutex (`arena.rs`): kegs taking and giving back 4 MiB chunks.
pub static ARENA: Waits = Waits::new();
/// The registry of live zones (`registry.rs`): zone creation and destruction, reclaim passes,
/// statistics, `make_room`.
pub static REGISTRY: Waits = Waits::new();
/// The page heap of a malloc above the core: the one mutex over its large blocks' page runs
/// and its table of live large and huge blocks (`ebbtide-malloc`'s `huge.rs`). The core never
/// takes it; it keeps the counter so that statistics find it beside the core's own.
pub static PAGE_HEAP: Waits = Waits::new();

/// The process-wide lock classes now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessWaits {
    pub arena: WaitCount,
    pub registry: WaitCount,
    pub page_heap: WaitCount,
}

/// Reads the process-wide lock classes (racy, allocates nothing).
pub fn process() -> ProcessWaits {
    ProcessWaits {
        arena: ARENA.read(),
        registry: REGISTRY.read(),
        page_heap: PAGE_HEAP.read(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder keeps the lock until the other thread has found it held: one wait counted,
    /// with the time it blocked; taking it free counts nothing.
    #[test]
    fn a_wait_is_counted_and_timed_a_free_lock_is_not() {
        let m: Counted<u32> = Counted::new(0);
        *crate::sync::lock(&m) += 1;
        assert_eq!(m.waits().read(), WaitCount::default(), "uncontended");
        let g = crate::sync::lock(&m);
        std::thread::scope(|s| {
            let t = s.spawn(|| *crate::sync::lock(&m) += 1);
            while m.waits().read().waits == 0 {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
            drop(g);
            t.join().unwrap();
        });
        let w = m.waits().read();
        assert_eq!(w.waits, 1, "{w:?}");
        assert!(w.wait_ns >= 4_000_000, "blocked ~5 ms: {w:?}");
        assert_eq!(*crate::sync::lock(&m), 2);
    }

    #[test]
    fn a_shared_class_counts_every_member() {
        static W: Waits = Waits::new();
        static A: Counted<(), &Waits> = W.mutex(());
        let g = crate::sync::lock(&A);
        std::thread::scope(|s| {
            let t = s.spawn(|| drop(A.lock_or(|| {})));
            while W.read().waits == 0 {
                std::thread::yield_now();
            }
            drop(g);
            t.join().unwrap();
        });
        assert_eq!(W.read().waits, 1);
        assert!(core::ptr::eq(A.waits(), &W));
    }
}
