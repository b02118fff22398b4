//! Empty chunks back to the arena, unmapped: the address space a size class holds free serves
//! any other mapping when the limit (`RLIMIT_AS`) is reached. A keg otherwise keeps every chunk
//! it took until it is destroyed, so under a limit memory freed in one class could never serve
//! a larger class or a large block (glibc, mimalloc and tcmalloc unmap or reuse it).

use super::*;

/// Chunks unmapped by one call at most: the walk under the lock is bounded, and what a failed
/// mapping needs is a few chunks, not all of them.
const UNMAP_MAX: usize = 64;

impl Keg {
    /// Gives back to the arena, unmapped ([`Arena::unmap_chunk`]), every chunk of this keg (up
    /// to [`UNMAP_MAX`]) whose carved slabs all hold no item (free, lazy or clean; the newest
    /// chunk's never-carved slabs with them). Returns the bytes of address space unmapped. For
    /// a mapping refused (`zone/drain.rs`, `on_map_failure`, after the drain that emptied the
    /// caches): `munmap` runs under the keg lock, as in [`Keg::destroy`], on that rare path only.
    ///
    /// Nothing while a slab of the keg is in flight or releasing: every walk over the keg's
    /// chunks that drops the lock with a chunk in hand (`handoff.rs`, `huge.rs`'s
    /// `release_run`, `cursor.rs`) has such a slab in flight or releasing while it is dropped,
    /// so no walk resumes in a chunk gone; and with none, a clean slab is on the clean list.
    pub(crate) fn unmap_empty_chunks(&self) -> usize {
        let mut g = lock(&self.inner);
        if g.ninflight != 0 || g.nreleasing != 0 {
            return 0;
        }
        let mut bytes = 0;
        let mut unmapped = 0;
        let mut prev: *mut ChunkHeader = ptr::null_mut();
        let mut c = g.chunks;
        while !c.is_null() && unmapped < UNMAP_MAX {
            // SAFETY: `c` is a valid chunk header of this keg; lock held.
            let next = unsafe { (*c).next };
            let chunk = self.chunk_at(c);
            let carved = self.carved(&g, c);
            // SAFETY: carved slabs' descriptors of this chunk; lock held.
            let empty = (0..carved).all(|i| unsafe {
                matches!(
                    (*self.meta(chunk, i)).state,
                    SlabState::Free | SlabState::Lazy | SlabState::Clean
                )
            });
            if !empty {
                prev = c;
                c = next;
                continue;
            }
            // SAFETY: every carved slab of the chunk holds no item and is on the list its state
            // names (none in flight or releasing); lock held.
            unsafe { self.unlist_chunk_slabs(&mut g, chunk, carved) };
            if c == g.chunks {
                // The newest: its never-carved slabs go with it; the next newest has none.
                g.uncarved = 0;
            }
            if prev.is_null() {
                g.chunks = next;
            } else {
                // SAFETY: `prev` is the valid chunk header before `c` on the list; lock held.
                unsafe { (*prev).next = next };
            }
            g.nchunks -= 1;
            // SAFETY: as above.
            g.huge_chunks -= u32::from(unsafe { (*c).huge });
            os::sub_metadata(self.meta_touched(carved));
            // SAFETY: the chunk is this keg's, off its list, no slab of it on any list or in
            // anyone's hands (no item out: every carved slab was free, lazy or clean; none in
            // flight); its header, in the descriptor area, is read no more.
            bytes += unsafe {
                self.arena
                    .unmap_chunk(NonNull::new_unchecked(chunk as *mut u8))
            };
            unmapped += 1;
            c = next;
        }
        if g.nfree_slabs <= self.free_cap_now() {
            end_excess(&mut g);
        }
        bytes
    }

    /// Takes the first `carved` slabs of `chunk` (each free, lazy or clean) off their lists,
    /// their counts and gauges with them; the pages of free and lazy ones count as released
    /// (they go with the chunk's mapping).
    ///
    /// # Safety
    /// `chunk` is one of this keg's; each of its first `carved` slabs holds no item and is on
    /// the list its state names; `g` is this keg's locked state.
    unsafe fn unlist_chunk_slabs(&self, g: &mut KegInner, chunk: usize, carved: usize) {
        let slab = self.geo.slab_size;
        let mut released = 0;
        for i in 0..carved {
            let s = self.meta(chunk, i);
            // SAFETY: the caller's guarantee: `s` is on the list its state names.
            unsafe {
                match (*s).state {
                    SlabState::Free => {
                        self.unlist_free(g, s);
                        g.backed_slabs -= 1;
                        g.free_items -= self.geo.items_per_slab;
                        MAPPED_BYTES.fetch_sub(slab, Ordering::Relaxed);
                        released += slab;
                    }
                    SlabState::Lazy => {
                        self.lazy_remove(g, s);
                        crate::lazy::gauge((*s).advised).fetch_sub(slab, Ordering::Relaxed);
                        released += slab;
                    }
                    SlabState::Clean => {
                        list_remove(&mut g.clean, s);
                        g.nclean -= 1;
                    }
                    SlabState::Partial | SlabState::Full => {
                        debug_assert!(false, "a slab holding items in an empty chunk")
                    }
                }
            }
        }
        // Relaxed gauge, changed under the keg lock (see `MAPPED_BYTES`).
        RELEASED_BYTES.fetch_add(released as u64, Ordering::Relaxed);
        g.released_bytes += released as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keg::tests::{import_n, take_back};

    fn give_back(k: &Keg, items: &[*mut u8], release: bool) {
        take_back(
            k,
            items,
            release,
            |_| {},
            |p, kind| panic!("{p:?}: {kind:?}"),
        );
    }

    /// The chunks whose slabs all went back (released or kept free) leave the keg, unmapped; a
    /// chunk with an item out stays; the keg takes chunks again afterwards and stays consistent.
    #[test]
    fn empty_chunks_go_back_unmapped_and_the_keg_grows_again() {
        let k = Keg::new(4096, 0).unwrap();
        let per_chunk = k.geo.slabs_per_chunk * k.geo.items_per_slab;
        let items = import_n(&k, 3 * per_chunk + 5);
        assert_eq!(k.counts().chunks, 4);
        let chunk_of = |p: *mut u8| p as usize & !(CHUNK_SIZE - 1);
        // One item of the oldest chunk stays out; of the rest, half go back released (clean
        // slabs), half kept (free slabs).
        let oldest = chunk_of(items[0]);
        let (keep, back): (Vec<_>, Vec<_>) = items.iter().partition(|&&p| chunk_of(p) == oldest);
        let (keep, back): (Vec<*mut u8>, Vec<*mut u8>) = (keep[..1].to_vec(), {
            let mut b = back;
            b.extend_from_slice(&keep[1..]);
            b
        });
        let (a, b) = back.split_at(back.len() / 2);
        give_back(&k, a, true);
        give_back(&k, b, false);
        let before = k.validate().unwrap();
        assert!(before.free_slabs > 0 && before.clean_slabs > 0);
        let unmapped = k.unmap_empty_chunks();
        let c = k.validate().unwrap();
        assert_eq!(
            c.chunks, 1,
            "three empty chunks unmapped, the one with an item kept"
        );
        assert!(unmapped >= 3 * CHUNK_SIZE / 2, "{unmapped} bytes unmapped");
        assert_eq!(c.items_out, 1);
        let gone = |p: &&*mut u8| chunk_of(**p) != oldest;
        for p in back.iter().filter(gone) {
            assert_eq!(
                k.arena.tag_of(*p as usize),
                0,
                "an unmapped chunk is the arena's"
            );
        }
        let last = *back.iter().filter(gone).last().unwrap() as usize;
        assert!(
            !crate::arena::tests::is_mapped(last & !(os::page_size() - 1)),
            "its pages are unmapped"
        );
        // Taken again: chunks mapped anew, items usable.
        let again = import_n(&k, 2 * per_chunk);
        for &p in &again {
            // SAFETY: a 4096-byte item of ours.
            unsafe { p.write_bytes(0x3c, 4096) };
        }
        k.validate().unwrap();
        give_back(&k, &again, false);
        give_back(&k, &keep, true);
        k.unmap_empty_chunks();
        let c = k.validate().unwrap();
        assert_eq!((c.chunks, c.items_out, c.backed_slabs), (0, 0, 0));
        k.destroy().unwrap();
    }
}
