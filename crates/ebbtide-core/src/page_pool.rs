//! Page pools in xen-blkback's style, built on the zone machinery.
//!
//! A [`PagePool`] is a zone of page-sized, page-aligned items whose free pages are capped:
//! every `pool_shrink_interval_ms` (blkback's `LRU_INTERVAL`, 100 ms) the reclaim thread shrinks
//! each pool to `max_buffer_pages` free pages — or to **0 while a squeeze window is open**
//! (blkback's `buffer_squeeze_end`, opened for `squeeze_ms` by Moderate pressure). Pages in use are
//! never touched; only free pages go back, coldest first (depot, then per-CPU stacks), with one
//! `madvise` per run of adjacent pages: `MADV_DONTNEED` under pressure (a squeeze window or a
//! pressure level above Normal), otherwise lazily ([`crate::lazy`]: no system call for
//! `lazy_settle_ms`, then `MADV_FREE`, `MADV_DONTNEED` after `lazy_decay_ms`), so the worst-case
//! squeeze of the seed (`max_buffer_pages` 0, every round of I/O releases every page) reuses
//! its pages without a page fault, as blkback reuses pages the kernel's allocator hands back;
//! and without the slabs' bookkeeping either: a shrink puts the pages it releases lazily in
//! the pool's stash (`zone/stash.rs`), an array from which its next miss takes them, as the
//! kernel's per-CPU page lists hand a freed page back.
//!
//! Unlike blkback, where an idle ring that sleeps 100 ms can miss a 10 ms window, the reclaim
//! thread enforces the squeeze the moment pressure arrives (every zone's caches are drained and
//! frees go straight back to the OS while the window lasts), so an idle pool cannot miss it.

use crate::error::{AllocError, CreateError, InvalidFree, ZoneBusy};
use crate::os;
use crate::zone::{Zone, ZoneOptions, ZoneSnapshot};
use core::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

static DEFAULT_CAP: AtomicUsize = AtomicUsize::new(1024);

/// Sets the cap of pools made by [`PagePool::with_default_cap`] from now on (the runtime's
/// `max_buffer_pages` tunable).
pub fn set_default_cap(max_buffer_pages: usize) {
    DEFAULT_CAP.store(max_buffer_pages, Ordering::Relaxed);
}

/// A pool of page-sized, page-aligned buffers.
pub struct PagePool {
    zone: Zone,
}

/// Page-pool figures on top of its zone's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolSnapshot {
    pub zone: ZoneSnapshot,
    pub max_buffer_pages: u64,
    pub free_pages: u64,
    pub pages_in_use: u64,
    pub squeezed: bool,
}

impl PagePool {
    /// A pool keeping at most `max_buffer_pages` free pages between shrinks.
    pub fn new(name: &str, max_buffer_pages: usize) -> Result<PagePool, CreateError> {
        let ps = os::page_size();
        let zone = Zone::new(ZoneOptions::new(name, ps).align(ps))?;
        zone.inner()
            .pool_max
            .store(max_buffer_pages, Ordering::Relaxed);
        // Where its shrinks put the pages they release lazily (`zone/stash.rs`); on failure
        // the zone, still empty, is destroyed by its drop.
        zone.inner().enable_stash()?;
        Ok(PagePool { zone })
    }

    /// A pool with the default cap as its cap ([`set_default_cap`]: the runtime's
    /// `max_buffer_pages` tunable; 1024, as blkback, when no runtime set it).
    pub fn with_default_cap(name: &str) -> Result<PagePool, CreateError> {
        // Zone creation first: it lets the runtime read its configuration (and set the cap).
        let pool = Self::new(name, usize::MAX - 1)?;
        pool.set_max_buffer_pages(DEFAULT_CAP.load(Ordering::Relaxed));
        Ok(pool)
    }

    /// One page-sized, page-aligned buffer.
    #[inline]
    pub fn get(&self) -> Result<NonNull<u8>, AllocError> {
        self.zone.alloc()
    }

    /// Returns a buffer to the pool.
    ///
    /// # Safety
    /// As [`Zone::free`]: the caller owns `page` (from [`PagePool::get`]) and does not use it
    /// afterwards.
    #[inline]
    pub unsafe fn put(&self, page: NonNull<u8>) -> Result<(), InvalidFree> {
        // SAFETY: the caller's guarantee is the zone's.
        unsafe { self.zone.free(page) }
    }

    /// Changes the cap (takes effect at the next shrink).
    pub fn set_max_buffer_pages(&self, n: usize) {
        self.zone
            .inner()
            .pool_max
            .store(n.min(usize::MAX - 1), Ordering::Relaxed);
    }

    /// The cap.
    pub fn max_buffer_pages(&self) -> usize {
        self.zone.inner().pool_max.load(Ordering::Relaxed)
    }

    /// Shrinks to the cap now (0 while squeezing), as the reclaim thread does every
    /// `pool_shrink_interval_ms`. Returns the bytes released.
    pub fn shrink(&self) -> usize {
        // Takes the zone's locks (depot, stacks' headers, stash, keg): inside the fork gate, as
        // every other path that does (`forkgate.rs`).
        let _inside = crate::forkgate::enter();
        // The decision, once: a squeeze window releases everything at once, else pages leave
        // lazily or now as lazy freeing and pressure say.
        let mut d = crate::disposal::Disposal::current();
        let target = if matches!(d.emptied, crate::disposal::Emptied::Release) {
            0
        } else {
            self.max_buffer_pages()
        };
        self.zone.inner().trim_to(target, &mut d)
    }

    /// Figures.
    pub fn snapshot(&self) -> PoolSnapshot {
        let z = self.zone.snapshot();
        PoolSnapshot {
            max_buffer_pages: self.max_buffer_pages() as u64,
            free_pages: z.free,
            pages_in_use: z.used,
            squeezed: crate::gate::squeezing_now(),
            zone: z,
        }
    }

    /// The underlying zone.
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// Destroys the pool; fails while pages are in use, changing nothing.
    // The handle is large on purpose (it carries the fast-path constants by value, see `Fast`);
    // handing it back by value on this cold path is what the caller needs.
    #[allow(clippy::result_large_err)]
    pub fn destroy(self) -> Result<(), (PagePool, ZoneBusy)> {
        self.zone
            .destroy()
            .map_err(|(zone, e)| (PagePool { zone }, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_pages_are_page_aligned_and_capped() {
        let ps = os::page_size();
        let pool = PagePool::new("test-pool", 16).unwrap();
        let pages: Vec<_> = (0..200).map(|_| pool.get().unwrap()).collect();
        for p in &pages {
            assert_eq!(p.as_ptr() as usize % ps, 0);
            // SAFETY: a page of ours.
            unsafe { p.as_ptr().write_bytes(1, ps) };
        }
        for p in pages {
            // SAFETY: valid puts.
            unsafe { pool.put(p).unwrap() };
        }
        assert!(pool.snapshot().free_pages >= 200);
        let released = pool.shrink();
        let s = pool.snapshot();
        assert_eq!(s.free_pages, 16, "{s:?}");
        assert_eq!(s.pages_in_use, 0);
        assert_eq!(released, (200 - 16) * ps);
        pool.set_max_buffer_pages(0);
        pool.shrink();
        assert_eq!(pool.snapshot().free_pages, 0);
        assert_eq!(pool.snapshot().zone.mapped_bytes, 0);
        pool.destroy().map_err(|e| e.1).unwrap();
    }

    #[test]
    fn a_miss_refills_a_batch_and_a_shrink_to_zero_still_empties_the_pool() {
        let pool = PagePool::new("test-pool-refill", 0).unwrap();
        // A plain zone of the same size imports a bucket (2 pages) per miss: 32 misses for 64.
        let pages: Vec<_> = (0..64).map(|_| pool.get().unwrap()).collect();
        let s = pool.snapshot();
        if s.zone.buckets_enabled && s.zone.pcpu_capacity > 0 {
            // Each miss brings the stack's room + 1 (5 here: the floor is 2 buckets of 2), so 13
            // misses on one CPU; a bucket per miss would take 32. Margin for a CPU migration.
            assert!(
                s.zone.pcpu_underflows < 64 / 3,
                "{} misses for 64 pages",
                s.zone.pcpu_underflows
            );
            assert!(
                s.free_pages < crate::sizing::POOL_REFILL_BATCH as u64,
                "{s:?}"
            );
        }
        for p in pages {
            // SAFETY: valid puts.
            unsafe { pool.put(p).unwrap() };
        }
        pool.shrink();
        let s = pool.snapshot();
        assert_eq!((s.free_pages, s.pages_in_use), (0, 0), "{s:?}");
        assert_eq!(s.zone.mapped_bytes, 0);
        pool.destroy().map_err(|e| e.1).unwrap();
    }

    #[test]
    fn shrink_never_touches_pages_in_use() {
        let ps = os::page_size();
        let pool = PagePool::new("test-pool-inuse", 0).unwrap();
        let keep: Vec<_> = (0..50).map(|_| pool.get().unwrap()).collect();
        for (i, p) in keep.iter().enumerate() {
            // SAFETY: pages of ours.
            unsafe { p.as_ptr().write_bytes(i as u8, ps) };
        }
        let tmp: Vec<_> = (0..50).map(|_| pool.get().unwrap()).collect();
        for p in tmp {
            // SAFETY: valid puts.
            unsafe { pool.put(p).unwrap() };
        }
        pool.shrink();
        let s = pool.snapshot();
        assert_eq!((s.free_pages, s.pages_in_use), (0, 50));
        for (i, p) in keep.iter().enumerate() {
            // SAFETY: pages still in use, untouched by the shrink.
            assert!(unsafe { core::slice::from_raw_parts(p.as_ptr(), ps) }
                .iter()
                .all(|&b| b == i as u8));
        }
        for p in keep {
            // SAFETY: valid puts.
            unsafe { pool.put(p).unwrap() };
        }
        pool.destroy().map_err(|e| e.1).unwrap();
    }
}
