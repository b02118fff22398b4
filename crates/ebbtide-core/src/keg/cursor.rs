//! Taking items back into their slabs: one pass over a batch with a cursor that caches the
//! current slab (its state, free count and one bitmap word), so a drain of millions of items
//! touches each slab's metadata once; the fate of a slab the pass leaves entirely free is the
//! caller's [`Disposal`].

use super::*;

/// What [`Keg::take_back`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TakenBack {
    /// Bytes released during the call.
    pub(crate) bytes: usize,
    /// Valid items returned to their slabs.
    pub(crate) valid: usize,
}

/// [`Keg::take_back`]'s cache of the slab it is working on: its state, free count and one
/// bitmap word, plus the items returned but not yet counted in the keg's counters, and what the
/// fast path may do without looking further.
pub(super) struct Cursor {
    slab: *mut SlabMeta,
    /// The slab's first item (meaningless while `slab` is null).
    base: usize,
    /// The slab's free bitmap.
    bits: *mut u64,
    state: SlabState,
    nfree: u32,
    word_at: *mut u64,
    word: u64,
    pending: usize,
    /// The fast path takes items at offsets below this from `base`: the slab's item bytes while
    /// it is partial and a word is cached, 0 otherwise.
    fast_limit: usize,
    /// Items the fast path may still free in this slab (all but the one that empties it).
    fast_left: u32,
}

impl Default for Cursor {
    fn default() -> Cursor {
        Cursor {
            slab: ptr::null_mut(),
            base: 0,
            bits: ptr::null_mut(),
            state: SlabState::Clean,
            nfree: 0,
            word_at: ptr::null_mut(),
            word: 0,
            pending: 0,
            fast_limit: 0,
            fast_left: 0,
        }
    }
}

impl Cursor {
    /// Writes the cached values back; they stay cached (memory now agrees with them).
    ///
    /// # Safety
    /// `slab` and `word_at` (when non-null) are valid for writes; `g` is the locked keg they
    /// belong to.
    #[inline(always)]
    pub(super) unsafe fn sync(&mut self, g: &mut KegInner) {
        // SAFETY: caller's guarantee.
        unsafe {
            if !self.word_at.is_null() {
                *self.word_at = self.word;
            }
            if !self.slab.is_null() {
                (*self.slab).nfree = self.nfree;
            }
        }
        g.items_out -= self.pending;
        g.free_items += self.pending;
        self.pending = 0;
    }

    /// Starts caching slab `s`, whose first item is at `base` and free bitmap at `bits` (after a
    /// `sync`).
    ///
    /// # Safety
    /// `s` is a valid meta; its keg is locked.
    #[inline(always)]
    pub(super) unsafe fn load(&mut self, s: *mut SlabMeta, base: usize, bits: *mut u64) {
        self.slab = s;
        self.base = base;
        self.bits = bits;
        self.word_at = ptr::null_mut();
        self.fast_limit = 0;
        // SAFETY: caller's guarantee.
        unsafe {
            self.state = (*s).state;
            self.nfree = (*s).nfree;
        }
    }

    /// Caches the bitmap word at `at` (of the cached slab), writing the previous one back.
    ///
    /// # Safety
    /// `at` is a word of the cached slab's free bitmap; its keg is locked.
    #[inline(always)]
    pub(super) unsafe fn load_word(&mut self, at: *mut u64) {
        if at != self.word_at {
            // SAFETY: caller's guarantee; the previous word is of the same slab.
            unsafe {
                if !self.word_at.is_null() {
                    *self.word_at = self.word;
                }
                self.word = *at;
            }
            self.word_at = at;
        }
    }

    /// Recomputes what the fast path may do: items of a partial slab with a cached word, all but
    /// the one that would empty it.
    #[inline(always)]
    pub(super) fn refresh_fast(&mut self, ips: u32, items_bytes: usize) {
        if self.state == SlabState::Partial && !self.word_at.is_null() && self.nfree < ips {
            self.fast_limit = items_bytes;
            self.fast_left = ips - self.nfree - 1;
        } else {
            self.fast_limit = 0;
            self.fast_left = 0;
        }
    }
}

/// [`Keg::take_back`]'s state between items.
pub(super) struct Work<'a> {
    /// Slabs emptied under `Emptied::Release` (or beyond the cap), taken off every list
    /// (`ninflight`), whose pages are released once the lock is dropped.
    deferred: Deferred,
    cur: Cursor,
    /// The last chunk found to be ours.
    our_chunk: usize,
    out: TakenBack,
    /// Slabs left entirely free are released before the call returns ([`Emptied::Release`]).
    release: bool,
    /// A slab emptied beyond the free cap stays on the free list for now ([`EXCESS_DELAY_MS`]).
    delay_excess: bool,
    /// [`Keg::free_cap_now`] when the work began.
    free_cap: usize,
    keep: usize,
    session: Option<&'a mut Session>,
}

impl Keg {
    /// Returns items to their slabs. Each pointer is checked first; invalid ones are skipped and
    /// reported through `invalid(ptr, kind)` (called with the keg lock held: it must not call
    /// into this keg). `fini` (if any) runs on each valid item before its bit is set. `d` (the
    /// caller's decision) says what happens to a slab that becomes entirely free, and how the
    /// free slabs beyond the keg's cap leave. Returns the bytes released (only
    /// [`Emptied::Release`] and the free-slab cap release any here; the pipeline's are counted
    /// when its session completes) and the number of valid items.
    ///
    /// Speed (a drain returns millions of items): a [`Cursor`] caches the current slab's state,
    /// free count and one bitmap word, plus the items not yet added to the keg's counters, and
    /// writes them back when it moves to another slab, before it calls `fini` or `invalid`, and at
    /// the end, so the keg is consistent whenever other code runs (a panicking hook leaves a
    /// valid, if poisoned, lock). Items in the cached word of a partial slab that do not empty it
    /// take a five-instruction path with every value in registers (no `fini` to run); everything
    /// else (another slab or word, an invalid pointer, a double free, the slab's last item, a
    /// state change) goes through [`Keg::take_back_general`], which checks everything.
    pub(crate) fn take_back<F: FnMut(*mut u8)>(
        &self,
        items: &[*mut u8],
        d: &mut Disposal<'_>,
        mut fini: Option<F>,
        mut invalid: impl FnMut(*mut u8, InvalidKind),
    ) -> TakenBack {
        let pages = d.pages;
        let (release, session) = match &mut d.emptied {
            Emptied::Keep | Emptied::Stash(_) => (false, None),
            Emptied::Release => (true, None),
            Emptied::Pipeline(s) if s.active() => (false, Some(&mut **s)),
            Emptied::Pipeline(_) => (false, None),
        };
        let keep = match &session {
            Some(s) if s.keep_reserve() => self.reserve_slabs,
            _ => 0,
        };
        let fast = fini.is_none();
        let free_cap = self.free_cap_now();
        let delay_excess =
            session.is_none() && !release && free_cap != usize::MAX && pages.is_lazy();
        let mut g = lock(&self.inner);
        let mut w = Work {
            deferred: Deferred::new(),
            cur: Cursor::default(),
            our_chunk: usize::MAX,
            out: TakenBack { bytes: 0, valid: 0 },
            release,
            delay_excess,
            free_cap,
            keep,
            session,
        };
        let mut i = 0;
        while i < items.len() {
            if fast {
                let c = &mut w.cur;
                let (base, limit, word_at) = (c.base, c.fast_limit, c.word_at);
                let (mut word, mut left, start) = (c.word, c.fast_left, i);
                while i < items.len() {
                    let off = (items[i] as usize).wrapping_sub(base);
                    if off >= limit {
                        break;
                    }
                    let (index, exact) = self.geo.div_item(off);
                    let bit = 1u64 << (index % 64);
                    let at = c.bits.wrapping_add(index / 64);
                    if !exact || at != word_at || word & bit != 0 || left == 0 {
                        break;
                    }
                    word |= bit;
                    left -= 1;
                    i += 1;
                }
                let k = i - start;
                c.word = word;
                c.fast_left = left;
                c.nfree += k as u32;
                c.pending += k;
                w.out.valid += k;
                if i == items.len() {
                    break;
                }
            }
            self.take_back_general(items[i], &mut g, &mut w, &mut fini, &mut invalid);
            i += 1;
            let overflow = w.session.as_deref().is_some_and(|s| s.has_overflow());
            if w.deferred.full() || overflow {
                // SAFETY: the cursor's slab and word are valid metas of this keg; lock held.
                unsafe { w.cur.sync(&mut g) };
                w.cur = Cursor::default(); // the slab may change while the lock is dropped
                                           // And the chunk: an empty one may go back to the arena meanwhile
                                           // (`empty.rs`), and to another keg.
                w.our_chunk = usize::MAX;
                if overflow {
                    drop(g);
                    if let Some(s) = w.session.as_deref_mut() {
                        s.release_overflow();
                    }
                    g = lock(&self.inner);
                }
                if w.deferred.n > 0 {
                    g = self.release_deferred(g, &mut w.deferred);
                }
            }
        }
        // SAFETY: the cursor's slab and word (if any) are valid metas of this keg; lock held.
        unsafe { w.cur.sync(&mut g) };
        if w.deferred.n > 0 {
            g = self.release_deferred(g, &mut w.deferred);
        }
        if w.out.bytes > 0 {
            self.account_release(&mut g, w.out.bytes);
        }
        if w.session.is_none() && self.excess_due(&mut g, w.free_cap, w.delay_excess, pages.clock) {
            drop(g);
            w.out.bytes += self.trim_excess(w.free_cap, pages);
        }
        w.out
    }

    /// [`Keg::take_back`] for one item, in full generality. Leaves the cursor on the item's slab
    /// (when it is one of ours) with its fast-path fields up to date.
    #[inline(never)]
    pub(super) fn take_back_general<F: FnMut(*mut u8)>(
        &self,
        p: *mut u8,
        g: &mut KegInner,
        w: &mut Work<'_>,
        fini: &mut Option<F>,
        invalid: &mut impl FnMut(*mut u8, InvalidKind),
    ) {
        let cur = &mut w.cur;
        let addr = p as usize;
        let in_cur = addr.wrapping_sub(cur.base);
        let (s, index) = if !cur.slab.is_null() && in_cur < self.geo.items_bytes {
            // Inside the items of the slab the cursor holds: this is what `locate_owned` finds.
            let (index, exact) = self.geo.div_item(in_cur);
            if !exact {
                // SAFETY: the cursor's slab and word (if any) are valid; lock held.
                unsafe { cur.sync(g) };
                invalid(p, InvalidKind::Misaligned);
                return;
            }
            (cur.slab, index)
        } else {
            if addr & !(CHUNK_SIZE - 1) != w.our_chunk {
                if !self.owns(addr) {
                    // SAFETY: the cursor's slab and word (if any) are valid metas of this keg,
                    // loaded under the lock we hold.
                    unsafe { cur.sync(g) };
                    invalid(p, InvalidKind::NotInZone);
                    return;
                }
                // A chunk of ours cannot change hands while we hold the lock (only `destroy`
                // frees chunks), so later items in it skip the chunk map.
                w.our_chunk = addr & !(CHUNK_SIZE - 1);
            }
            match self.locate_owned(addr) {
                Ok(l) => {
                    // SAFETY: the cursor's slab and word (if any) are valid metas of this keg,
                    // loaded under the lock we hold; `l.slab` is a valid meta of this keg
                    // (`locate_owned` found it in one of our chunks) and its bitmap has
                    // `geo.words` words.
                    unsafe {
                        cur.sync(g);
                        cur.load(
                            l.slab,
                            self.slab_base(l.slab),
                            SlabMeta::free_bits(l.slab, self.geo.words),
                        );
                    }
                    (l.slab, l.index)
                }
                Err(k) => {
                    // SAFETY: the cursor's slab and word (if any) are valid metas of this keg,
                    // loaded under the lock we hold.
                    unsafe { cur.sync(g) };
                    invalid(p, k);
                    return;
                }
            }
        };
        let bit = 1u64 << (index % 64);
        let ips = self.geo.items_per_slab as u32;
        // SAFETY: `s` is the cursor's slab, a valid meta of this keg; its bitmap has `words` words
        // and `index / 64` is below that; the lock is held, so the cursor's cached copies are the
        // only writers.
        unsafe {
            if matches!(
                cur.state,
                SlabState::Clean | SlabState::Free | SlabState::Lazy
            ) {
                // A clean slab with no free item is one never carved (zero metadata): nothing
                // was ever handed out of it.
                let never = cur.state == SlabState::Clean && cur.nfree == 0;
                cur.sync(g);
                invalid(
                    p,
                    if never {
                        InvalidKind::NotAnItem
                    } else {
                        InvalidKind::DoubleFree
                    },
                );
                return;
            }
            cur.load_word(cur.bits.add(index / 64));
            if cur.word & bit != 0 {
                cur.sync(g);
                invalid(p, InvalidKind::DoubleFree);
                cur.refresh_fast(ips, self.geo.items_bytes);
                return;
            }
            if let Some(f) = fini.as_mut() {
                cur.sync(g);
                f(p);
            }
            cur.word |= bit;
            cur.nfree += 1;
            cur.pending += 1;
            w.out.valid += 1;
            // A full slab this item empties (one item a slab: 2 KiB and larger classes) goes
            // from full to free without a stop on the partial list.
            let emptied_full = cur.state == SlabState::Full && cur.nfree == ips;
            if cur.state == SlabState::Full {
                (*s).state = SlabState::Partial;
                cur.state = SlabState::Partial;
                g.nfull -= 1;
                if !emptied_full {
                    g.npartial += 1;
                    list_push(&mut g.partial, s);
                }
            }
            if cur.nfree == ips {
                cur.sync(g);
                // A refused mapping's next answer may find this chunk empty (`gate.rs`).
                crate::gate::note_freed();
                if !emptied_full {
                    list_remove(&mut g.partial, s);
                    g.npartial -= 1;
                }
                // Beyond the cap: back at once, unless the excess may wait (`EXCESS_DELAY_MS`:
                // then onto the free list, and `take_back`'s end decides).
                // A slab in a huge page goes onto the free list, beyond the cap or in a
                // reclaim: the trim at the end, or the reclaim's `release_free`, releases whole
                // huge pages before it breaks one (`huge.rs`).
                let huge = self.in_huge(s);
                let over_cap =
                    !huge && w.session.is_none() && !w.delay_excess && g.nfree_slabs >= w.free_cap;
                if w.release || over_cap {
                    if huge {
                        self.mark_broken(s);
                    }
                    // On no list until its pages are gone: released once the lock is
                    // dropped (`release_deferred`), never under it.
                    self.to_inflight(g, s);
                    w.deferred.slabs[w.deferred.n] = s;
                    w.deferred.n += 1;
                    w.out.bytes += self.geo.slab_size;
                } else if !huge
                    && g.nfree_slabs >= w.keep
                    && w.session.as_deref_mut().is_some_and(|x| x.try_enlist(self))
                {
                    self.to_releasing(g, s);
                    if let Some(sess) = w.session.as_deref_mut() {
                        sess.add(self.slab_base(s), self.geo.slab_size);
                    }
                } else {
                    (*s).state = SlabState::Free;
                    list_push(&mut g.free, s);
                    g.nfree_slabs += 1;
                    g.nfree_huge += u32::from(huge);
                    (*Keg::header_of(s)).nfree += 1;
                }
                cur.state = (*s).state;
            }
            cur.refresh_fast(ips, self.geo.items_bytes);
        }
    }

    /// Takes `s` off the free list, with the counters of free slabs (`nfree_huge` too, for a
    /// slab in a huge page: `huge.rs`).
    ///
    /// # Safety
    /// `s` is a valid meta of this keg on the free list; `g` is this keg's locked state.
    pub(super) unsafe fn unlist_free(&self, g: &mut KegInner, s: *mut SlabMeta) {
        // SAFETY: caller's guarantee.
        // SAFETY: caller's guarantee; the header of `s`'s chunk, written by `grow`.
        unsafe {
            list_remove(&mut g.free, s);
            (*Keg::header_of(s)).nfree -= 1;
        }
        g.nfree_slabs -= 1;
        g.nfree_huge -= u32::from(self.in_huge(s));
    }

    /// Makes `s` (entirely free, on no list) a `Clean` slab on no list whose pages the caller
    /// releases with the lock dropped (`ninflight`, `release_deferred`): nothing allocates from
    /// it or frees into it meanwhile (a free into it is refused as a double free).
    ///
    /// # Safety
    /// As [`Keg::to_releasing`].
    pub(super) unsafe fn to_inflight(&self, g: &mut KegInner, s: *mut SlabMeta) {
        // SAFETY: caller's guarantee.
        unsafe { (*s).state = SlabState::Clean };
        g.ninflight += 1;
        g.backed_slabs -= 1;
        g.free_items -= self.geo.items_per_slab;
    }

    /// Makes `s` (entirely free, on no list) a `Clean` slab on the `releasing` list. Its pages are
    /// still backed and counted in MAPPED_BYTES until [`crate::release::Releasing::complete_releases`].
    ///
    /// # Safety
    /// `s` is a valid meta of this keg with every item free, on no list; `g` is this keg's locked
    /// state.
    pub(super) unsafe fn to_releasing(&self, g: &mut KegInner, s: *mut SlabMeta) {
        // SAFETY: caller's guarantee.
        unsafe {
            (*s).state = SlabState::Clean;
            if g.releasing.is_null() {
                g.releasing_tail = s;
            }
            list_push(&mut g.releasing, s);
        }
        g.nreleasing += 1;
        g.backed_slabs -= 1;
        g.free_items -= self.geo.items_per_slab;
    }
}
