//! The lazy list: free slabs released lazily (settling, then offered with `MADV_FREE`), taken back
//! by allocation first, released for good after a delay or when memory is needed elsewhere
//! ([`crate::lazy`] holds the settings, gauges and the pure delay rule).

use super::*;

/// `MADV_FREE` on `[addr, addr+len)`, falling back to `MADV_DONTNEED` where it is refused.
///
/// # Safety
/// As [`os::release`]: whole free slabs of ours, holding no live item.
pub(super) unsafe fn offer(addr: usize, len: usize) {
    // SAFETY: caller's guarantee; slab addresses are never null.
    unsafe {
        let p = NonNull::new_unchecked(addr as *mut u8);
        if !os::release_lazy(p, len) {
            os::release(p, len);
        }
    }
}

impl Keg {
    /// Moves free slab `s` onto the lazy list (newest first), stamped `now_ms`; `advised`: its
    /// pages are (about to be) offered with `MADV_FREE`.
    ///
    /// # Safety
    /// `s` is a valid meta of this keg on the free list; `g` is this keg's locked state.
    unsafe fn free_to_lazy(&self, g: &mut KegInner, s: *mut SlabMeta, advised: bool, now_ms: u32) {
        // SAFETY: caller's guarantee.
        unsafe {
            self.unlist_free(g, s);
            (*s).state = SlabState::Lazy;
            (*s).advised = advised;
            (*s).lazy_at = now_ms;
            if g.lazy.is_null() {
                g.lazy_tail = s;
            }
            list_push(&mut g.lazy, s);
        }
        g.nlazy += 1;
        g.backed_slabs -= 1;
        g.free_items -= self.geo.items_per_slab;
    }

    /// Moves free slabs to the lazy list until at most `keep` stay backed, stamping them with
    /// `now_ms`. With `advise`, their pages are offered with `MADV_FREE` at once (one call per run
    /// of adjacent slabs); otherwise [`Keg::advise_lazy`] does it once they settled, unless
    /// allocation took them back first (then no system call at all). Where the kernel refuses
    /// `MADV_FREE` a run is released with `MADV_DONTNEED` instead (the slabs are then lazy in
    /// name only; their later purge is a no-op for the kernel). Returns the bytes moved.
    ///
    /// Only the free slabs outside huge pages: `MADV_FREE` of part of a huge page would split it
    /// (`huge.rs`); `keep` counts those.
    pub(crate) fn release_free_lazily(&self, keep: usize, now_ms: u32, advise: bool) -> usize {
        let mut g = lock(&self.inner);
        let small = g.nfree_slabs - g.nfree_huge as usize;
        if small <= keep {
            return 0;
        }
        let mut to_move = small - keep;
        let mut moved = 0;
        if !advise && g.huge_chunks == 0 {
            // No system call to batch: take them straight off the free list.
            while to_move > 0 {
                let s = g.free;
                // SAFETY: `s` heads the free list (nfree_slabs > keep, so it is non-null), an
                // entirely free slab; lock held.
                unsafe { self.free_to_lazy(&mut g, s, false, now_ms) };
                to_move -= 1;
                moved += self.geo.slab_size;
            }
        }
        let mut c = g.chunks;
        while !c.is_null() && to_move > 0 {
            let chunk = self.chunk_at(c);
            let carved = self.carved(&g, c);
            let mut run: Option<(usize, usize)> = None; // (first slab, count)
            for i in 0..=carved {
                let s = self.meta(chunk, i.min(carved.max(1) - 1));
                // SAFETY: `s` is a valid meta of this chunk (slab 0's is, carved or zero); lock
                // held.
                let take = i < carved
                    && to_move > 0
                    && unsafe { (*s).state == SlabState::Free }
                    && !self.in_huge(s);
                if take {
                    to_move -= 1;
                    // SAFETY: `s` is on the free list, entirely free; lock held.
                    unsafe { self.free_to_lazy(&mut g, s, advise, now_ms) };
                    run = Some(match run {
                        Some((first, n)) => (first, n + 1),
                        None => (i, 1),
                    });
                } else if let Some((first, n)) = run.take() {
                    let addr = chunk + self.geo.first_slab + (first << self.geo.slab_shift);
                    let len = n << self.geo.slab_shift;
                    if advise {
                        // SAFETY: the run is `n` entirely free slabs of this chunk: committed
                        // memory of ours that holds no live item.
                        unsafe { offer(addr, len) };
                    }
                    moved += len;
                }
            }
            // SAFETY: `c` is a valid chunk header of this keg; lock held.
            c = unsafe { (*c).next };
        }
        // Relaxed gauges, changed under the keg lock (see `MAPPED_BYTES`).
        MAPPED_BYTES.fetch_sub(moved, Ordering::Relaxed);
        crate::lazy::gauge(advise).fetch_add(moved, Ordering::Relaxed);
        if advise {
            g.lazy_freed_bytes += moved as u64;
            crate::lazy::LAZY_FREED_BYTES.fetch_add(moved as u64, Ordering::Relaxed);
        }
        moved
    }

    /// Offers the pages of lazy slabs that waited at least `settle_ms` before `now_ms` and were
    /// not offered yet with `MADV_FREE` (adjacent slabs in one call). Returns their bytes.
    pub(crate) fn advise_lazy(&self, now_ms: u32, settle_ms: u64) -> usize {
        let mut g = lock(&self.inner);
        let mut bases = [0usize; 128];
        let mut n = 0;
        let mut advised = 0;
        let mut s = g.lazy_tail;
        // Oldest first; the list is in `lazy_at` order, so the first young one ends the walk.
        while !s.is_null() {
            // SAFETY: (1) `s` is on the lazy list, a valid meta, and the lock is held, so we may
            // read and write it and follow `prev`; (2) `offer` (in the closure) gets runs of
            // lazy slabs of this keg collected under this lock: entirely free, no live item.
            unsafe {
                if !(*s).advised {
                    if !crate::lazy::expired((*s).lazy_at, now_ms, settle_ms) {
                        break;
                    }
                    (*s).advised = true;
                    bases[n] = self.slab_base(s);
                    n += 1;
                    if n == bases.len() {
                        advised += self.runs(&mut bases[..n], |a, l| offer(a, l));
                        n = 0;
                    }
                }
                s = (*s).prev;
            }
        }
        // SAFETY: each base is a lazy slab of this keg, entirely free, still on the lazy list
        // under our lock.
        advised += self.runs(&mut bases[..n], |a, l| unsafe { offer(a, l) });
        if advised > 0 {
            g.lazy_freed_bytes += advised as u64;
            // Relaxed gauges, changed under the keg lock (see `MAPPED_BYTES`).
            crate::lazy::LAZY_PENDING_BYTES.fetch_sub(advised, Ordering::Relaxed);
            crate::lazy::LAZY_BYTES.fetch_add(advised, Ordering::Relaxed);
            crate::lazy::LAZY_FREED_BYTES.fetch_add(advised as u64, Ordering::Relaxed);
        }
        advised
    }

    /// Gives lazily freed slabs back for good (`MADV_DONTNEED`, then `clean`), oldest first:
    /// all of them (`older_than` `None`), or those lazily freed at least `delay_ms` before
    /// `now_ms` (`Some((now_ms, delay_ms))`, see [`crate::lazy::expired`]). Adjacent slabs go back
    /// in one call. Returns the bytes released.
    pub(crate) fn release_lazy(&self, older_than: Option<(u32, u64)>) -> usize {
        self.release_lazy_upto(older_than, usize::MAX)
    }

    /// [`Keg::release_lazy`] that stops once `limit` bytes are on their way back (the slab that
    /// reaches it included).
    pub(crate) fn release_lazy_upto(&self, older_than: Option<(u32, u64)>, limit: usize) -> usize {
        let mut g = lock(&self.inner);
        let mut d = Deferred::new();
        let (mut released, mut pending) = (0, 0);
        loop {
            let s = g.lazy_tail;
            if s.is_null() {
                break;
            }
            // SAFETY: `s` is the oldest slab of the lazy list, a valid meta; lock held.
            let (at, advised) = unsafe { ((*s).lazy_at, (*s).advised) };
            if released >= limit
                || older_than.is_some_and(|(now, delay)| !crate::lazy::expired(at, now, delay))
            {
                break;
            }
            // SAFETY: `s` is the oldest slab of the lazy list, a valid meta of this keg; lock held.
            // Off every list and `Clean` until its pages are gone (`release_deferred`, with the
            // lock dropped): nothing allocates from it meanwhile.
            unsafe {
                self.lazy_remove(&mut g, s);
                (*s).state = SlabState::Clean;
            }
            g.ninflight += 1;
            if !advised {
                pending += self.geo.slab_size;
            }
            released += self.geo.slab_size;
            d.slabs[d.n] = s;
            d.n += 1;
            if d.full() {
                g = self.release_deferred(g, &mut d);
            }
        }
        if d.n > 0 {
            g = self.release_deferred(g, &mut d);
        }
        if released > 0 {
            g.released_bytes += released as u64;
            // Relaxed gauges, changed under the keg lock (see `MAPPED_BYTES`).
            RELEASED_BYTES.fetch_add(released as u64, Ordering::Relaxed);
            crate::lazy::LAZY_BYTES.fetch_sub(released - pending, Ordering::Relaxed);
            crate::lazy::LAZY_PENDING_BYTES.fetch_sub(pending, Ordering::Relaxed);
        }
        released
    }
}
