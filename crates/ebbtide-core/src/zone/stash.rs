//! A page pool's lazily given-back pages, kept as the kernel keeps freed pages on its per-CPU
//! page lists.
//!
//! blkback's worst case (`max_buffer_pages` 0) releases every page after each round of I/O
//! and allocates it again for the next: `free_page` puts it on the CPU's `pcp` list, and
//! `alloc_page` takes it off again, a few instructions each way; the buddy allocator sees a
//! batch only when the list passes its high mark. The zone's own way back is longer: items to
//! their slabs (`Keg::take_back`: the slab located, its bitmap and state, two list moves),
//! free slabs to the lazy list (`Keg::release_free_lazily`), and an import that takes them off it again —
//! some hundred instructions per page, 3 % of the seed's dd throughput (perf of `lab blkback`'s
//! overhead child, docs/experiments.md §1), which its statistics then find.
//!
//! So when a page pool's shrink gives pages back lazily (no pressure, `lazy_settle_ms` > 0:
//! [`ZoneInner::stash_open`]), they come here instead: an array of pages with the time each was
//! given up, at most [`STASH_PAGES`] (what does not fit takes the slabs' way). They are given
//! back as far as every figure goes — not free in the pool (`max_buffer_pages` counts none of
//! them), not mapped, settling in the lazy gauge, as the lazy list's slabs are — and the pool's
//! next miss takes the newest first, a batch under one lock, before it imports from the slabs.
//! Pages older than `lazy_settle_ms` move to the keg's lazy list, offered with `MADV_FREE` at
//! once (the decay pass, [`ZoneInner::stash_settle`]), and decay from there as any lazy slab.
//! Whatever gives pages back with `MADV_DONTNEED` (a squeeze, a pressure level, TRIM, DRAIN,
//! DRAIN_CPU, lazy freeing turned off) empties the stash first, the same way
//! ([`ZoneInner::drain_stash`]); a zone's destruction and a sleeper at `max_items` take the
//! pages back to the slabs.
//!
//! To the keg the pages are still handed out (as a cache's items are): the counting equation
//! (`zone/mod.rs`) gains one term, `items_out == used + per-CPU + depot + stash`. A double free
//! of a stashed page is then what a double free of a cached item is: caught at once by a
//! checked zone, else when the page reaches its slab.

use super::*;
use crate::lazy;

/// Most pages one stash holds: 4 MiB of pages, blkback's default `max_buffer_pages` (1024).
/// The seed's dd releases 352 pages per round; the kernel's `pcp->high` is of this order.
pub(crate) const STASH_PAGES: usize = 1024;

/// One stashed page and when it was given up ([`lazy::now_ms`]).
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    page: *mut u8,
    at: u32,
}

/// The array, oldest at index 0; the stamps never decrease towards the top (pages go in with
/// the time of their shrink and come out from the top).
struct StashInner {
    slots: *mut Slot,
    cap: usize,
    n: usize,
}

/// A page pool's stash (empty and without storage for every other zone).
pub(crate) struct Stash {
    inner: crate::contention::Counted<StashInner>,
    /// Pages held: written under the lock, read without it by the miss path (Relaxed: a stale
    /// 0 costs an import from the slabs, a stale non-zero one lock for nothing).
    len: AtomicUsize,
}

// SAFETY: `slots` is the stash's own mapping, only dereferenced with the mutex held.
unsafe impl Send for StashInner {}

impl Stash {
    /// No storage: [`Stash::enable`] gives it some.
    pub(crate) fn none() -> Stash {
        Stash {
            inner: crate::contention::Counted::new(StashInner {
                slots: ptr::null_mut(),
                cap: 0,
                n: 0,
            }),
            len: AtomicUsize::new(0),
        }
    }

    /// Maps room for `cap` pages (once; later calls change nothing).
    pub(crate) fn enable(&self, cap: usize) -> Result<(), os::OsError> {
        let mut g = lock(&self.inner);
        if !g.slots.is_null() || cap == 0 {
            return Ok(());
        }
        let len = os::round_up(cap * core::mem::size_of::<Slot>(), os::page_size());
        let m = os::map(len)?;
        os::add_metadata(len);
        g.slots = m.as_ptr().cast();
        g.cap = len / core::mem::size_of::<Slot>();
        Ok(())
    }

    pub(crate) fn enabled(&self) -> bool {
        lock(&self.inner).cap > 0
    }

    /// Acquisitions of the stash mutex that found it held (statistics).
    pub(crate) fn lock_waits(&self) -> crate::contention::WaitCount {
        self.inner.waits().read()
    }

    /// Pages held (racy outside the lock, see `len`).
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Puts `pages` in with the stamp `at`; returns how many fit (the first ones).
    fn put(&self, pages: &[*mut u8], at: u32) -> usize {
        let mut g = lock(&self.inner);
        let k = pages.len().min(g.cap - g.n);
        for (i, &p) in pages[..k].iter().enumerate() {
            // SAFETY: n + i < cap, inside the mapping; lock held.
            unsafe { g.slots.add(g.n + i).write(Slot { page: p, at }) };
        }
        g.n += k;
        self.len.store(g.n, Ordering::Relaxed);
        k
    }

    /// Takes up to `out.len()` pages, newest first; returns how many.
    fn take(&self, out: &mut [*mut u8]) -> usize {
        let mut g = lock(&self.inner);
        let k = out.len().min(g.n);
        for (i, o) in out[..k].iter_mut().enumerate() {
            // SAFETY: n - 1 - i < n <= cap; lock held.
            *o = unsafe { (*g.slots.add(g.n - 1 - i)).page };
        }
        g.n -= k;
        self.len.store(g.n, Ordering::Relaxed);
        k
    }

    /// Takes up to `out.len()` of the oldest pages: those given up at least `delay_ms` before
    /// `now` (`Some((now, delay_ms))`, [`lazy::expired`]) or any (`None`). Returns how many and
    /// the oldest stamp among them.
    fn take_old(&self, older_than: Option<(u32, u64)>, out: &mut [*mut u8]) -> (usize, u32) {
        let mut g = lock(&self.inner);
        let mut k = 0;
        let mut first_at = 0;
        while k < out.len() && k < g.n {
            // SAFETY: k < n <= cap; lock held.
            let s = unsafe { *g.slots.add(k) };
            if older_than.is_some_and(|(now, d)| !lazy::expired(s.at, now, d)) {
                break; // stamps do not decrease upwards: the rest are younger
            }
            if k == 0 {
                first_at = s.at;
            }
            out[k] = s.page;
            k += 1;
        }
        if k > 0 {
            // SAFETY: both ranges lie within the first n slots of the mapping; `copy` allows
            // the overlap.
            unsafe { ptr::copy(g.slots.add(k), g.slots, g.n - k) };
            g.n -= k;
            self.len.store(g.n, Ordering::Relaxed);
        }
        (k, first_at)
    }
}

impl Drop for Stash {
    fn drop(&mut self) {
        let g = lock(&self.inner);
        if !g.slots.is_null() {
            let len = g.cap * core::mem::size_of::<Slot>();
            // SAFETY: the stash's own mapping of `len` bytes (`enable`); the zone is being
            // destroyed and emptied its stash first, so nothing reads it again.
            unsafe { os::unmap(NonNull::new_unchecked(g.slots.cast()), len) };
            os::sub_metadata(len);
        }
    }
}

impl Stash {
    /// The pages held, oldest first, with their stamps (for [`ZoneInner::stash_validate`]).
    fn contents(&self) -> Vec<(usize, u32)> {
        let g = lock(&self.inner);
        (0..g.n)
            // SAFETY: i < n <= cap; lock held.
            .map(|i| unsafe { *g.slots.add(i) })
            .map(|s| (s.page as usize, s.at))
            .collect()
    }
}

/// Pages moved per lock of the stash by the flushes.
const FLUSH_BATCH: usize = 256;

impl ZoneInner {
    /// Gives this zone (a page pool's) a stash of [`STASH_PAGES`].
    pub(crate) fn enable_stash(&self) -> Result<(), os::OsError> {
        self.stash.enable(STASH_PAGES)
    }

    /// Whether a shrink's pages go to the stash now: a page pool's zone with one, pages leaving
    /// lazily (no pressure, no squeeze window, lazy freeing on), and a settle delay to wait
    /// (with `lazy_settle_ms` 0 pages are offered at once: the slabs' way does that).
    pub(crate) fn stash_open(&self, pages: Pages) -> bool {
        pages.is_lazy() && pages.settle_ms > 0 && self.stash.enabled()
    }

    /// Bytes of `n` stashed pages, and the gauges they move between: a stashed page is not
    /// mapped (`keg::mapped_bytes`) but settling (`lazy_pending_bytes`), as a lazy slab that
    /// waits for its `MADV_FREE`. `into`: into the stash (else out of it).
    fn stash_gauges(&self, n: usize, into: bool) {
        let bytes = n * self.keg.geo.item_size;
        if bytes == 0 {
            return;
        }
        if into {
            crate::keg::MAPPED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
            lazy::STASH_PENDING_BYTES.fetch_add(bytes, Ordering::Relaxed);
        } else {
            lazy::STASH_PENDING_BYTES.fetch_sub(bytes, Ordering::Relaxed);
            crate::keg::MAPPED_BYTES.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Pages a shrink gives up lazily (`how`: its decision's pages, and their clock): into the
    /// stash, and what does not fit to the slabs (onto the free list).
    pub(crate) fn stash_in(&self, pages: &[*mut u8], how: Pages) {
        let k = self.stash.put(pages, (how.clock)());
        self.stash_gauges(k, true);
        if k < pages.len() {
            self.return_to_keg(&pages[k..], &mut Disposal::keep_as(how));
        }
    }

    /// A miss takes up to `out.len()` stashed pages (newest first); returns how many. They
    /// count as reuse of lazily freed pages, as a lazy slab taken by an import does.
    pub(crate) fn stash_take(&self, out: &mut [*mut u8]) -> usize {
        if self.stash.len() == 0 {
            return 0;
        }
        let n = self.stash.take(out);
        if n > 0 {
            self.stash_gauges(n, false);
            let bytes = n * self.keg.geo.item_size;
            self.keg.reuse.took(bytes);
            self.counters
                .stash_reused_bytes
                .fetch_add(bytes as u64, Ordering::Relaxed);
        }
        n
    }

    /// [`ZoneInner::validate`]'s check of the stash: every page an item of this zone, none
    /// twice, stamps in order. Returns the pages held.
    pub(crate) fn stash_validate(&self) -> Result<usize, String> {
        let c = self.stash.contents();
        let name = self.name.as_str();
        for (i, &(p, at)) in c.iter().enumerate() {
            if !self.is_item(p) || self.keg.locate(p).is_err() {
                return Err(format!(
                    "zone '{name}': stashed page {p:#x} is not an item of it"
                ));
            }
            // Older than its predecessor (the clock wraps: compare the difference's sign).
            if i > 0 && (c[i - 1].1.wrapping_sub(at) as i32) > 0 {
                return Err(format!(
                    "zone '{name}': stash stamps out of order at {i} ({} then {at})",
                    c[i - 1].1
                ));
            }
        }
        let mut pages: Vec<usize> = c.iter().map(|x| x.0).collect();
        pages.sort_unstable();
        if let Some(w) = pages.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("zone '{name}': page {:#x} stashed twice", w[0]));
        }
        Ok(c.len())
    }

    /// The decay pass's step: pages stashed at least `settle_ms` before `now` go to the keg's
    /// lazy list, offered with `MADV_FREE` at once (they have settled), stamped with the time
    /// they were given up so that their decay counts from then. Returns their bytes.
    /// `d`: where the slabs go on their way (the decay pass's decision).
    pub(crate) fn stash_settle(&self, now: u32, settle_ms: u64, d: &mut Disposal<'_>) -> usize {
        let mut moved = 0;
        let mut buf = [ptr::null_mut::<u8>(); FLUSH_BATCH];
        loop {
            let (n, at) = self.stash.take_old(Some((now, settle_ms)), &mut buf);
            if n == 0 {
                break;
            }
            self.stash_gauges(n, false);
            let before = self.keg.counts().free_slabs;
            self.return_to_keg(&buf[..n], d);
            moved += self.keg.release_free_lazily(before, at, true);
            if n < buf.len() {
                break;
            }
        }
        moved
    }

    /// Every stashed page back to the slabs, whose emptied slabs go where `d` sends them:
    /// released at once ([`Disposal::release`]: pressure wants the memory), or kept as free
    /// slabs (a zone being destroyed, a sleeper at `max_items`). Returns the bytes released.
    pub(crate) fn drain_stash(&self, d: &mut Disposal<'_>) -> usize {
        let mut bytes = 0;
        let mut buf = [ptr::null_mut::<u8>(); FLUSH_BATCH];
        while self.stash.len() > 0 {
            let (n, _) = self.stash.take_old(None, &mut buf);
            if n == 0 {
                break;
            }
            self.stash_gauges(n, false);
            bytes += self.return_to_keg(&buf[..n], d);
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(n: usize) -> Vec<*mut u8> {
        (1..=n).map(|i| (i * 4096) as *mut u8).collect()
    }

    #[test]
    fn the_newest_come_out_first_and_the_oldest_settle_first() {
        let s = Stash::none();
        assert_eq!(s.put(&pages(3), 5), 0, "no storage, nothing fits");
        s.enable(8).unwrap();
        let cap = lock(&s.inner).cap;
        assert!(cap >= 8);
        let p = pages(cap + 2);
        assert_eq!(s.put(&p[..3], 100), 3);
        assert_eq!(s.put(&p[3..6], 140), 3);
        assert_eq!(s.len(), 6);
        let mut out = [ptr::null_mut(); 2];
        assert_eq!(s.take(&mut out), 2);
        assert_eq!(out, [p[5], p[4]]);
        // Stamped 100: settled at 150 with a delay of 50, those of 140 not yet.
        let mut old = [ptr::null_mut(); 8];
        assert_eq!(s.take_old(Some((149, 50)), &mut old), (0, 0));
        assert_eq!(s.take_old(Some((150, 50)), &mut old), (3, 100));
        assert_eq!(&old[..3], &p[..3]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.take(&mut out), 1);
        assert_eq!(out[0], p[3]);
        // Full: the first `cap` fit.
        assert_eq!(s.put(&p, 300), cap);
        assert_eq!(s.take_old(None, &mut old), (8, 300));
        assert_eq!(s.len(), cap - 8);
    }
}
