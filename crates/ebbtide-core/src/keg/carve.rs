//! Chunks and carving: where slabs come from. A keg grows by a chunk of the arena, writes a
//! slab's metadata when the slab is first used, and imports items for the layers above from
//! partial, free, lazy, clean and never-used slabs in that order.

use super::*;

/// Distinct page colours of slab 0 (see [`colour_of`]): 64 pages. 16 colours gained a third
/// of what 64 did and 128 no more than 64 (`docs/design/keg-records.md`, "Slab colours"); each
/// colour page is memory in a huge chunk (`huge.rs`), so no more than that.
pub(crate) const COLOURS: usize = 64;

/// How many pages into every chunk of the keg with `tag` its slab 0 starts, pure.
///
/// Chunks are 4 MiB aligned, so without it the first slabs of every keg start at (nearly) the
/// same offset in their chunks, and the pages a program uses most — the first slabs of each
/// size class — have virtual page numbers equal modulo 1024. A set-associative TLB indexes
/// its sets by the low bits of the page number: forty classes' first pages then compete for
/// the ways of one set, and a program touching objects of many classes misses in the TLB on
/// most accesses (measured: `docs/design/keg-records.md`, "Slab colours"). Bonwick's slab allocator colours slabs
/// by cache lines for the same reason within a cache; here the unit is the page and the
/// structure the TLB. Consecutive tags are 37 pages apart (37 is prime to 64, so the first 64
/// kegs all differ). The cost is address space only — the skipped pages are never touched,
/// and a chunk holds fewer slabs when the last no longer fits — except in a huge chunk, whose
/// first huge page backs them until slab 0 goes back (`huge.rs`).
pub(crate) fn colour_of(tag: u64) -> usize {
    ((tag >> 1) as usize).wrapping_mul(37) % COLOURS
}

impl Keg {
    /// Takes a new chunk; its slabs are carved from it as they are needed ([`Keg::carve`]).
    /// Only when the newest chunk has no slab left to carve.
    pub(super) fn grow(&self, g: &mut KegInner) -> Result<(), OsError> {
        debug_assert_eq!(g.uncarved, 0);
        // Only a zone's keg (its chunks carry the zone's stacks, `chunk_hint`) goes huge: the
        // allocator's own bucket arrays, which no program walks, stay on small pages.
        let thp = if self.chunk_hint != 0 {
            super::huge::chunk_thp(
                g.backed_slabs * self.geo.slab_size,
                MAPPED_BYTES.load(Ordering::Relaxed),
            )
        } else {
            os::Thp::Never
        };
        let chunk = self.arena.alloc_chunk(
            self.tag,
            self.chunk_hint,
            self.geo.first_slab,
            self.meta_touched(self.geo.slabs_per_chunk),
            thp,
        )?;
        if thp == os::Thp::Huge && g.huge_chunks == 0 {
            // Dense from now: the older chunks go huge too (`huge.rs`).
            self.make_older_chunks_huge(g);
        }
        let hdr = self.header(chunk.as_ptr() as usize);
        // SAFETY: the chunk is ours, its descriptor area mapped whole (every descriptor's
        // bytes) and zero; no item lies there.
        unsafe {
            hdr.write(ChunkHeader {
                keg: self,
                next: g.chunks,
                huge: thp == os::Thp::Huge,
                broken: 0,
                collapsed: 0,
                nfree: 0,
                limit: self.geo.slabs_per_chunk as u32,
            });
        }
        g.chunks = hdr;
        g.nchunks += 1;
        g.huge_chunks += u32::from(thp == os::Thp::Huge);
        g.uncarved = self.geo.slabs_per_chunk;
        os::add_metadata(self.meta_touched(0));
        Ok(())
    }

    /// Bytes of a chunk's metadata area in memory once its first `carved` slabs are carved: the
    /// pages holding the header and their descriptors.
    pub(super) fn meta_touched(&self, carved: usize) -> usize {
        os::round_up(CHUNK_HEADER + carved * self.geo.meta_size, os::page_size())
    }

    /// How many slabs of `chunk` (one of this keg's) have been carved: its `limit` (all, but
    /// for a chunk abandoned by [`Keg::abandon_newest`]), less the newest chunk's `uncarved`.
    /// Walks over a chunk's slabs stop there.
    pub(super) fn carved(&self, g: &KegInner, chunk: *mut ChunkHeader) -> usize {
        // SAFETY: a valid chunk header of this keg; the caller holds the lock (`g`).
        let limit = unsafe { (*chunk).limit } as usize;
        if chunk == g.chunks {
            limit - g.uncarved
        } else {
            limit
        }
    }

    /// The newest chunk's next pages were taken by another mapping before its slabs there
    /// were carved (`map_through` said so): it keeps the slabs carved so far and gets no more
    /// (they are never mapped), and the next slab comes from a new chunk (`grow`). Before, the
    /// keg failed every later carve with ENOMEM while address space was free elsewhere (a
    /// mapping placed after the heap: libc-test's `malloc-brk-fail`).
    ///
    /// # Safety
    /// `g` is this keg's locked state with a newest chunk.
    pub(super) unsafe fn abandon_newest(&self, g: &mut KegInner) {
        debug_assert!(!g.chunks.is_null());
        // SAFETY: the newest chunk's header (the caller's guarantee); lock held.
        unsafe { (*g.chunks).limit -= g.uncarved as u32 };
        g.uncarved = 0;
    }

    /// Writes the descriptor of the newest chunk's next never-used slab (all items free, pages
    /// untouched) and returns it: a `Clean` slab on no list. `g.uncarved` must be non-zero.
    ///
    /// # Safety
    /// `g` is this keg's locked state.
    pub(super) unsafe fn carve(&self, g: &mut KegInner) -> *mut SlabMeta {
        debug_assert!(g.uncarved > 0 && !g.chunks.is_null());
        let i = self.geo.slabs_per_chunk - g.uncarved;
        let s = self.meta(self.chunk_at(g.chunks), i);
        // SAFETY: slab `i` of the newest chunk was never carved: its descriptor lies in the
        // chunk's descriptor area (i < slabs_per_chunk), mapped whole by `grow`, zero and
        // referenced by nothing; the lock is held.
        unsafe {
            s.write(SlabMeta {
                next: ptr::null_mut(),
                prev: ptr::null_mut(),
                nfree: self.geo.items_per_slab as u32,
                index: i as u32,
                state: SlabState::Clean,
                advised: false,
                lazy_at: 0,
            });
            let bits = SlabMeta::free_bits(s, self.geo.words);
            for w in 0..self.geo.words {
                let lo = w * 64;
                let n = (self.geo.items_per_slab - lo).min(64);
                *bits.add(w) = if n == 64 { !0 } else { (1u64 << n) - 1 };
            }
        }
        g.uncarved -= 1;
        os::add_metadata(self.meta_touched(i + 1) - self.meta_touched(i));
        s
    }

    /// Takes up to `out.len()` items out of the slabs. Returns how many were taken (at least 1
    /// unless an error is returned).
    pub(crate) fn import(&self, out: &mut [*mut u8]) -> Result<usize, OsError> {
        self.import_fresh(out, &mut 0)
    }

    /// [`Keg::import`], adding to `fresh` the bytes of the slabs it backs anew (from the clean
    /// list or never used): pages the caller's items will fault in, which no cached page of
    /// this keg could serve.
    pub(crate) fn import_fresh(
        &self,
        out: &mut [*mut u8],
        fresh: &mut usize,
    ) -> Result<usize, OsError> {
        let mut g = lock(&self.inner);
        let mut n = 0;
        // Global gauges change once per call, not once per slab: a page pool imports a batch of
        // one-page slabs, and a locked add per slab on these shared lines was most of this
        // function's time (perf, docs/experiments.md §1). [mapped, reused offered, reused settling]
        let mut gauges = [0usize; 3];
        // Bytes of slabs handed out again (free, lazy or clean lists): reuse (`reuse.rs`).
        let mut reused = 0;
        while n < out.len() {
            let s = if !g.partial.is_null() {
                g.partial
            } else if !g.free.is_null() {
                let s = g.free;
                // SAFETY: `s` is on the free list; lock held.
                unsafe {
                    self.unlist_free(&mut g, s);
                    (*s).state = SlabState::Partial;
                    list_push(&mut g.partial, s);
                }
                g.npartial += 1;
                reused += self.geo.slab_size;
                s
            } else if !g.lazy.is_null() {
                // The newest lazily freed slab: the likeliest to still have its pages.
                let s = g.lazy;
                // SAFETY: `s` is on the lazy list; lock held.
                unsafe {
                    self.lazy_remove(&mut g, s);
                    (*s).state = SlabState::Partial;
                    list_push(&mut g.partial, s);
                }
                g.npartial += 1;
                g.backed_slabs += 1;
                g.free_items += self.geo.items_per_slab;
                g.lazy_reused_bytes += self.geo.slab_size as u64;
                reused += self.geo.slab_size;
                gauges[0] += self.geo.slab_size;
                // SAFETY: `s` is the lazy slab just taken off the lazy list, a valid meta of this
                // keg; the lock is held, so nothing else writes it.
                gauges[if unsafe { (*s).advised } { 1 } else { 2 }] += self.geo.slab_size;
                s
            } else {
                let s = if !g.clean.is_null() {
                    let s = g.clean;
                    // SAFETY: `s` is on the clean list; lock held.
                    unsafe { list_remove(&mut g.clean, s) };
                    g.nclean -= 1;
                    reused += self.geo.slab_size;
                    s
                } else {
                    let mapped = loop {
                        if g.uncarved == 0 {
                            if let Err(e) = self.grow(&mut g) {
                                break Err(e);
                            }
                        }
                        // The slab's pages mapped before it is carved (arena.rs, address space
                        // on demand; its descriptor was mapped with the chunk).
                        let i = self.geo.slabs_per_chunk - g.uncarved;
                        let chunk = self.chunk_at(g.chunks);
                        let end = chunk + self.geo.first_slab + ((i + 1) << self.geo.slab_shift);
                        // SAFETY: the newest chunk's header, written by `grow`; lock held.
                        let thp = if unsafe { (*g.chunks).huge } {
                            os::Thp::Huge
                        } else {
                            os::Thp::Never
                        };
                        match self.arena.map_through(chunk, end, thp) {
                            Ok(()) => break Ok(()),
                            // SAFETY: lock held; the newest chunk exists (just mapped into).
                            Err(e) if Arena::taken(&e) => unsafe { self.abandon_newest(&mut g) },
                            Err(e) => break Err(e),
                        }
                    };
                    if let Err(e) = mapped {
                        if n > 0 {
                            break;
                        }
                        return Err(e);
                    }
                    // SAFETY: lock held; the newest chunk has a slab to carve.
                    unsafe { self.carve(&mut g) }
                };
                // SAFETY: `s` is a clean slab on no list; lock held.
                unsafe {
                    (*s).state = SlabState::Partial;
                    list_push(&mut g.partial, s);
                }
                g.npartial += 1;
                g.backed_slabs += 1;
                g.free_items += self.geo.items_per_slab;
                gauges[0] += self.geo.slab_size;
                *fresh += self.geo.slab_size;
                s
            };
            let base = self.slab_base(s);
            // SAFETY: `s` is a valid partial slab with nfree > 0; lock held.
            unsafe {
                let bits = SlabMeta::free_bits(s, self.geo.words);
                let mut w = 0;
                while n < out.len() && (*s).nfree > 0 {
                    while *bits.add(w) == 0 {
                        w += 1;
                    }
                    let word = *bits.add(w);
                    let b = word.trailing_zeros() as usize;
                    *bits.add(w) = word & (word - 1);
                    out[n] = (base + (w * 64 + b) * self.geo.item_size) as *mut u8;
                    n += 1;
                    (*s).nfree -= 1;
                }
                if (*s).nfree == 0 {
                    list_remove(&mut g.partial, s);
                    (*s).state = SlabState::Full;
                    g.npartial -= 1;
                    g.nfull += 1;
                }
            }
        }
        g.free_items -= n;
        g.items_out += n;
        // Relaxed gauges (`MAPPED_BYTES`), changed under the keg lock so that `validate` and the
        // lazy passes see keg and gauges agree.
        if gauges[0] > 0 {
            MAPPED_BYTES.fetch_add(gauges[0], Ordering::Relaxed);
        }
        for (advised, bytes) in [(true, gauges[1]), (false, gauges[2])] {
            if bytes > 0 {
                crate::lazy::gauge(advised).fetch_sub(bytes, Ordering::Relaxed);
            }
        }
        if reused > 0 {
            self.reuse.took(reused);
        }
        Ok(n)
    }
}
