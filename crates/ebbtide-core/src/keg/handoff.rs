//! Releasing free slabs: synchronously, with the keg lock dropped for every `madvise`
//! ([`Deferred`]), or handed to a reclaim's release session, whose completion moves them from
//! `releasing` to `clean` ([`crate::release::Releasing`]).

use super::*;

/// Slabs whose pages a thread releases with the keg lock dropped (see `KegInner::ninflight`):
/// single slabs (`slabs`, adjacent ones in one call), and the slabs of whole free huge pages
/// (`pages`: one call per page for its run of slabs, the whole 2 MiB where they tile it), chained
/// through `next` (`chained`: as many as a page holds, more than `slabs` has room for). Every
/// byte released is a slab taken off its list under the lock: nothing else can hand it out
/// while the lock is dropped.
pub(super) struct Deferred {
    pub(super) slabs: [*mut SlabMeta; DEFERRED],
    pub(super) n: usize,
    pub(super) pages: [(usize, usize); DEFERRED_PAGES],
    pub(super) npages: usize,
    pub(super) chained: *mut SlabMeta,
    pub(super) nchained: usize,
}

/// Slabs released per round of dropping the lock.
pub(super) const DEFERRED: usize = 64;
/// Whole huge pages released per round of dropping the lock.
pub(super) const DEFERRED_PAGES: usize = 16;

impl Deferred {
    pub(super) fn new() -> Deferred {
        Deferred {
            slabs: [ptr::null_mut(); DEFERRED],
            n: 0,
            pages: [(0, 0); DEFERRED_PAGES],
            npages: 0,
            chained: ptr::null_mut(),
            nchained: 0,
        }
    }

    pub(super) fn full(&self) -> bool {
        self.n == DEFERRED || self.npages == DEFERRED_PAGES
    }

    fn is_empty(&self) -> bool {
        self.n == 0 && self.npages == 0
    }
}

impl crate::release::Releasing for Keg {
    /// Called by a release session once the `madvise` of every slab it was handed is complete:
    /// the `releasing` slabs become ordinary clean slabs and their bytes are counted as given
    /// back. Returns those bytes.
    fn complete_releases(&self) -> usize {
        let mut g = lock(&self.inner);
        if g.nreleasing == 0 {
            return 0;
        }
        let (head, tail) = (g.releasing, g.releasing_tail);
        // SAFETY: `head..=tail` is the releasing list of valid metas of this keg, `g.clean` (when
        // non-null) the head of the clean list; lock held.
        unsafe {
            (*tail).next = g.clean;
            if !g.clean.is_null() {
                (*g.clean).prev = tail;
            }
        }
        g.clean = head;
        g.releasing = ptr::null_mut();
        g.releasing_tail = ptr::null_mut();
        let n = g.nreleasing;
        g.nclean += n;
        g.nreleasing = 0;
        let bytes = n * self.geo.slab_size;
        self.account_release(&mut g, bytes);
        bytes
    }
}

impl Keg {
    /// Gives the pages of the deferred slabs back with the keg lock dropped, then puts the slabs
    /// on the clean list. Returns the lock, taken again.
    pub(super) fn release_deferred<'g>(
        &'g self,
        g: crate::sync::MutexGuard<'g, KegInner>,
        d: &mut Deferred,
    ) -> crate::sync::MutexGuard<'g, KegInner> {
        drop(g);
        // Address order, adjacent runs (whole chunks side by side) in one call up to
        // `MAX_COALESCE`: one TLB flush each (`release.rs`).
        let pages = &mut d.pages[..d.npages];
        pages.sort_unstable_by_key(|&(addr, _)| addr);
        let mut i = 0;
        while i < pages.len() {
            let mut run = pages[i];
            while let Some(m) = pages
                .get(i + 1)
                .and_then(|&next| crate::release::coalesced(run, next))
            {
                run = m;
                i += 1;
            }
            let (addr, len) = run;
            // SAFETY: runs of slabs of ours, entirely free, `Clean` and on no list (chained in
            // `d`, `release_whole_pages`), perhaps with pages of their chunks no slab holds
            // (colour, tail): nothing hands them out or frees into them meanwhile.
            unsafe { self.arena.release_pages(addr, len) };
            i += 1;
        }
        // Address order, so that adjacent slabs go back in one call whatever order they came in.
        d.slabs[..d.n].sort_unstable_by_key(|&s| self.slab_base(s));
        let mut i = 0;
        while i < d.n {
            // Adjacent slabs (emptied in address order by a drain) go back in one call, from
            // the first one's span (`release_span`: slab 0's colour pages too).
            let start = self.slab_base(d.slabs[i]);
            let (from, _) = self.release_span(d.slabs[i]);
            let mut len = self.geo.slab_size;
            while i + 1 < d.n && self.slab_base(d.slabs[i + 1]) == start + len {
                len += self.geo.slab_size;
                i += 1;
            }
            // SAFETY: the slabs are ours, entirely free, and on no list (`ninflight`): nothing
            // hands them out or frees into them until they are back on a list; the colour pages
            // before slab 0 are used by nothing.
            unsafe { self.arena.release_pages(from, start + len - from) };
            i += 1;
        }
        let mut g = lock(&self.inner);
        for &s in &d.slabs[..d.n] {
            // SAFETY: `s` is a valid meta of this keg, Clean, on no list; lock held.
            unsafe { list_push(&mut g.clean, s) };
        }
        let mut s = d.chained;
        while !s.is_null() {
            // SAFETY: the chain holds valid metas of this keg, Clean, on no list, linked through
            // `next` (`release_whole_pages`); `next` is read before the push rewrites it.
            unsafe {
                let next = (*s).next;
                list_push(&mut g.clean, s);
                s = next;
            }
        }
        g.nclean += d.n + d.nchained;
        g.ninflight -= d.n + d.nchained;
        d.n = 0;
        d.npages = 0;
        d.chained = ptr::null_mut();
        d.nchained = 0;
        g
    }

    pub(super) fn account_release(&self, g: &mut KegInner, bytes: usize) {
        g.released_bytes += bytes as u64;
        // Relaxed gauges, changed under the keg lock (see `MAPPED_BYTES`).
        MAPPED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
        RELEASED_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Releases the pages of free slabs until at most `keep` free slabs stay backed, as `d`
    /// decides: through its release session when it carries an active one (the slabs wait on
    /// the `releasing` list and their bytes are counted when the session completes: returns 0
    /// for them); into the lazy decay when its pages leave lazily ([`Keg::release_free_lazily`],
    /// stamped by its clock; lazily freed bytes are counted apart), except the free slabs of
    /// huge chunks, which never go lazily (`huge.rs`) and are released now; else at once, with
    /// the keg lock dropped for the `madvise` (one per run of adjacent slabs, one per whole huge
    /// page), returning the bytes. Whole free huge pages go first, huge pages are broken last,
    /// and without `d.breaks` no more than [`super::huge::idle_breaks`] allows.
    pub(crate) fn release_free(&self, keep: usize, d: &mut Disposal<'_>) -> usize {
        let pages = d.pages;
        let idle = !d.breaks;
        match d.session() {
            Some(sess) if sess.active() => self.release_free_to(keep, sess, None, idle),
            _ => {
                let lazy = pages
                    .is_lazy()
                    .then(|| ((pages.clock)(), pages.settle_ms == 0));
                self.release_free_to(keep, &mut Session::inactive(), lazy, idle)
            }
        }
    }

    /// [`Keg::release_free`] into `sess` (an inactive one: released here, with the lock dropped).
    /// Three passes: whole free huge pages (`huge.rs`); the free slabs of chunks that are not
    /// huge — lazily when `lazy` gives the clock's `now` and whether to offer at once
    /// ([`Keg::release_free_lazily`]); the free slabs of huge chunks, breaking their pages, when
    /// `idle` no more than [`super::huge::idle_breaks`]. Returns the bytes released now.
    pub(crate) fn release_free_to(
        &self,
        keep: usize,
        sess: &mut Session,
        lazy: Option<(u32, bool)>,
        idle: bool,
    ) -> usize {
        if sess.active() {
            if lock(&self.inner).nfree_slabs <= keep {
                return 0;
            }
            // Not under our lock: enlisting may complete the session's other kegs.
            sess.enlist(self);
        }
        let mut g = lock(&self.inner);
        if g.nfree_slabs <= keep {
            return 0;
        }
        let mut released = 0;
        let mut d = Deferred::new();
        // (free slabs of partly used huge pages, slabs those pages hold)
        let mut left = (0, 0);
        if g.huge_chunks > 0 {
            let to_release = g.nfree_slabs - keep;
            let (g2, bytes) = self.release_whole_pages(g, to_release, sess, &mut d, &mut left);
            g = g2;
            released += bytes;
        }
        // The small chunks' share of what is left to release: all of it that they hold.
        let small = g.nfree_slabs - g.nfree_huge as usize;
        let small_take = g.nfree_slabs.saturating_sub(keep).min(small);
        if let Some((now, advise)) = lazy {
            if small_take > 0 {
                if !d.is_empty() {
                    g = self.release_deferred(g, &mut d);
                }
                drop(g);
                self.release_free_lazily(small - small_take, now, advise);
                g = lock(&self.inner);
            }
        }
        // Pass 1 takes the free slabs outside huge pages (`huge.rs`), pass 2 those in them.
        for huge in [false, true] {
            if huge && g.huge_chunks == 0 || !huge && lazy.is_some() {
                continue;
            }
            let mut budget = if huge {
                g.nfree_slabs.saturating_sub(keep)
            } else {
                small_take
            };
            if huge && idle {
                let demand = (self.reuse.working_set() / self.geo.slab_size as u64) as usize;
                budget = budget.min(super::huge::idle_breaks(left.0, left.1, demand));
            }
            let mut c = g.chunks;
            while !c.is_null() && budget > 0 {
                let chunk = self.chunk_at(c);
                // SAFETY: `c` is a valid chunk header of this keg: a chunk leaves the list
                // only in `unmap_empty_chunks` (`empty.rs`), which does nothing while a slab
                // is in flight or releasing, as one of ours is across each lock drop below;
                // lock held.
                if huge && !unsafe { (*c).huge } {
                    // SAFETY: `c` is a valid chunk header of this keg (chunks stay on its list
                    // while it lives); lock held.
                    c = unsafe { (*c).next };
                    continue;
                }
                for i in 0..self.carved(&g, c) {
                    if budget == 0 {
                        break;
                    }
                    let s = self.meta(chunk, i);
                    // SAFETY: `s` is a valid meta of this chunk; lock held.
                    if unsafe { (*s).state } != SlabState::Free || self.in_huge(s) != huge {
                        continue;
                    }
                    budget -= 1;
                    if huge {
                        self.mark_broken(s);
                    }
                    // SAFETY: `s` is on the free list; lock held.
                    unsafe { self.unlist_free(&mut g, s) };
                    if sess.active() {
                        // SAFETY: `s` is entirely free and now on no list; lock held.
                        unsafe { self.to_releasing(&mut g, s) };
                        let (addr, len) = self.release_span(s);
                        sess.add(addr, len);
                        if sess.has_overflow() {
                            drop(g);
                            sess.release_overflow();
                            g = lock(&self.inner);
                        }
                        continue;
                    }
                    // SAFETY: `s` is a valid meta of this chunk, entirely free and now on no
                    // list; lock held.
                    unsafe { self.to_inflight(&mut g, s) };
                    d.slabs[d.n] = s;
                    d.n += 1;
                    released += self.geo.slab_size;
                    if d.full() {
                        g = self.release_deferred(g, &mut d);
                    }
                }
                // SAFETY: `c` is a valid chunk header of this keg; lock held.
                c = unsafe { (*c).next };
            }
        }
        if !idle {
            self.release_uncarved(&g);
        }
        if !d.is_empty() {
            g = self.release_deferred(g, &mut d);
        }
        if released > 0 {
            self.account_release(&mut g, released);
        }
        released
    }

    /// Calls `f(addr, len)` once per run of adjacent slabs starting at `bases` (sorted here).
    /// Returns the bytes of all of them.
    pub(super) fn runs(&self, bases: &mut [usize], mut f: impl FnMut(usize, usize)) -> usize {
        bases.sort_unstable();
        let slab = self.geo.slab_size;
        let mut i = 0;
        while i < bases.len() {
            let mut j = i + 1;
            while j < bases.len() && bases[j] == bases[j - 1] + slab {
                j += 1;
            }
            f(bases[i], (j - i) * slab);
            i = j;
        }
        bases.len() * slab
    }
}
