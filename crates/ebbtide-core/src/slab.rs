//! Slabs: runs of pages cut into items, described by metadata kept in their chunk's descriptor
//! area (`arena.rs`, "The descriptor span").
//!
//! ```text
//!  chunk (4 MiB)          = | colour | slab 0 | slab 1 | ... | slab n-1 | tail |
//!  its descriptor area    = | ChunkHeader | SlabMeta[0] .. SlabMeta[n-1] |      (256 KiB apart)
//!  SlabMeta               = links (partial/free/clean list) | nfree | state | free bitmap
//!                           [| live bitmap: checked kegs only]
//! ```
//!
//! The colour is a keg's number of untouched pages before slab 0 (`keg::colour_of`): it keeps
//! the first slabs of different kegs, 4 MiB apart, out of one TLB set.
//!
//! Metadata lives outside the items ("off-page" in UMA's words), so an item is never written by
//! the allocator while it is free: items keep their constructed state between uses (type-stable
//! memory, what UMA's init/fini hooks rely on), and a slab of 4096-byte items wastes nothing.
//!
//! Invariants (checked by [`crate::keg::Keg::validate`]):
//! * `nfree == popcount(free bitmap)`, and no bit is set at or beyond `items_per_slab`;
//! * state `Clean`, `Lazy` or `Free` ⇔ `nfree == items_per_slab`; `Full` ⇔ `nfree == 0`;
//! * a `Clean` slab's pages are not backed (released or never touched); a `Lazy` slab's are
//!   backed until the kernel takes them (not counted as backed); every other state's are.
//! * in checked mode, `live` bits are a subset of the items not in the free bitmap.

use crate::arena::{CHUNK_SIZE, DESC_STRIDE};
use crate::os;

/// Slab states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum SlabState {
    /// All items free, pages given back to the OS (or never touched).
    Clean = 0,
    /// All items free, pages offered to the kernel with `MADV_FREE` (see [`crate::lazy`]):
    /// still charged until the kernel takes them or they decay to `Clean`.
    Lazy = 4,
    /// All items free, pages backed.
    Free = 1,
    /// Some items out.
    Partial = 2,
    /// All items out.
    Full = 3,
}

/// Per-slab metadata; the two bitmaps of `words` u64 each follow it in memory.
#[repr(C)]
pub(crate) struct SlabMeta {
    pub(crate) next: *mut SlabMeta,
    pub(crate) prev: *mut SlabMeta,
    pub(crate) nfree: u32,
    pub(crate) index: u32,
    pub(crate) state: SlabState,
    /// A `Lazy` slab whose pages were offered with `MADV_FREE` (else it waits for the settle
    /// delay, see [`crate::lazy`]); meaningless in other states.
    pub(crate) advised: bool,
    /// When the slab became `Lazy` ([`crate::lazy::now_ms`]); meaningless in other states.
    pub(crate) lazy_at: u32,
}

/// Size of the fixed part of [`SlabMeta`], before the bitmaps.
pub(crate) const META_FIXED: usize = 32;
const _: () = assert!(core::mem::size_of::<SlabMeta>() <= META_FIXED);

/// Size of the chunk header before the slab metadata array (in the chunk's descriptor area).
pub(crate) const CHUNK_HEADER: usize = 64;

/// How many descriptors of `meta_size` bytes a chunk's descriptor area holds after its header.
const fn descriptors_fitting(meta_size: usize) -> usize {
    (DESC_STRIDE - CHUNK_HEADER) / meta_size
}

/// The geometry of a keg's slabs, computed once from the item size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Item size rounded up to the alignment (the stride between items).
    pub(crate) item_size: usize,
    /// Bytes per slab (a power of two, at least one page).
    pub(crate) slab_size: usize,
    pub(crate) slab_shift: u32,
    pub(crate) items_per_slab: usize,
    /// `items_per_slab * item_size`: offsets in a slab at or beyond it are its unused tail.
    pub(crate) items_bytes: usize,
    /// `ceil(2^64 / item_size)`, for division without a divide instruction: for `x < 2^32`,
    /// `x / item_size == (x * item_magic) >> 64` and `x % item_size == 0` iff
    /// `x * item_magic mod 2^64 < item_magic` (Lemire, Kaser and Kurz, "Faster remainder by direct
    /// computation", 2019). Offsets inside a slab are below `MAX_ITEM_SIZE`-sized slabs, far
    /// below 2^32.
    pub(crate) item_magic: u64,
    /// u64 words per bitmap.
    pub(crate) words: usize,
    /// Bytes per SlabMeta including its bitmaps: the free bitmap, and the live one in a
    /// checked keg ([`Geometry::with_live_bits`]).
    pub(crate) meta_size: usize,
    /// The descriptors carry the live bitmap (checked mode).
    pub(crate) live: bool,
    /// Slabs per chunk.
    pub(crate) slabs_per_chunk: usize,
    /// Offset of slab 0 from the chunk start (page aligned): the keg's colour pages.
    pub(crate) first_slab: usize,
}

/// Largest item a keg serves.
pub(crate) const MAX_ITEM_SIZE: usize = 1 << 20;

impl Geometry {
    /// Chooses the slab size for items of `item_size` bytes (already rounded to the alignment):
    /// the smallest power-of-two number of pages whose tail waste is at most 1/64 of the slab,
    /// looking up to 64 KiB (or the item size, for bigger items); failing that, the least
    /// wasteful candidate. This is UMA's keg layout rule with off-page metadata.
    pub(crate) fn for_item(item_size: usize) -> Geometry {
        debug_assert!(item_size > 0 && item_size <= MAX_ITEM_SIZE);
        let ps = os::page_size();
        let limit = (64 * 1024)
            .max(item_size.next_power_of_two())
            .min(MAX_ITEM_SIZE);
        let mut best = (usize::MAX, 0usize); // (waste * 1024 / slab, slab)
        let mut slab = ps.max(item_size.next_power_of_two().min(ps));
        while slab <= limit {
            if slab >= item_size {
                let waste = slab % item_size;
                let frac = waste * 1024 / slab;
                if waste * 64 <= slab {
                    best = (frac, slab);
                    break;
                }
                if frac < best.0 {
                    best = (frac, slab);
                }
            }
            slab *= 2;
        }
        let slab_size = best.1;
        let items_per_slab = slab_size / item_size;
        let words = items_per_slab.div_ceil(64);
        let meta_size = META_FIXED + 8 * words;
        // The descriptors fit their area: 8-byte items, the most, take 96 KiB of 256 (160 with
        // the live bitmap).
        let n = (CHUNK_SIZE / slab_size).min(descriptors_fitting(meta_size));
        Geometry {
            item_size,
            slab_size,
            slab_shift: slab_size.trailing_zeros(),
            items_per_slab,
            items_bytes: items_per_slab * item_size,
            item_magic: (u64::MAX / item_size as u64).wrapping_add(1),
            words,
            meta_size,
            live: false,
            slabs_per_chunk: n,
            first_slab: 0,
        }
    }

    /// This geometry with the live bitmap in every descriptor (a checked keg: checked mode
    /// marks each item handed out there, `Keg::mark_live`); unchecked kegs' descriptors are
    /// that much smaller (a third for 8- and 16-byte items). The slabs still fit: 8-byte items'
    /// descriptors take 160 KiB of the 256 with it.
    pub(crate) fn with_live_bits(mut self) -> Geometry {
        if !self.live {
            self.live = true;
            self.meta_size += 8 * self.words;
            self.slabs_per_chunk = self
                .slabs_per_chunk
                .min(descriptors_fitting(self.meta_size));
        }
        self
    }

    /// This geometry with slab 0 moved `colour` pages further into the chunk (`keg::colour_of`;
    /// fewer slabs if the last no longer fits). The skipped pages are never touched.
    pub(crate) fn coloured(mut self, colour: usize) -> Geometry {
        let ps = os::page_size();
        self.first_slab += colour * ps;
        self.slabs_per_chunk = self
            .slabs_per_chunk
            .min((CHUNK_SIZE - self.first_slab) / self.slab_size);
        self
    }

    /// `(x / item_size, x % item_size == 0)` for an offset `x` inside a slab, by multiplication.
    #[inline(always)]
    pub(crate) fn div_item(&self, x: usize) -> (usize, bool) {
        debug_assert!(x < 1 << 32);
        let p = (x as u128) * (self.item_magic as u128);
        ((p >> 64) as usize, (p as u64) < self.item_magic)
    }

    /// UMA's efficiency: item bytes per byte of memory used for a slab, in percent (metadata
    /// counted: its descriptor, its share of the chunk's header and colour pages).
    pub(crate) fn efficiency_pct(&self) -> f64 {
        let shared = (CHUNK_HEADER + self.first_slab) as f64 / self.slabs_per_chunk as f64;
        let per_slab = (self.slab_size + self.meta_size) as f64 + shared;
        100.0 * (self.items_per_slab * self.item_size) as f64 / per_slab
    }
}

impl SlabMeta {
    /// The free bitmap (1 = free in the slab).
    ///
    /// # Safety
    /// `this` must point to a SlabMeta laid out with `words` bitmap words.
    #[inline]
    pub(crate) unsafe fn free_bits(this: *mut SlabMeta, _words: usize) -> *mut u64 {
        // SAFETY: the bitmaps follow the fixed part (caller's guarantee).
        unsafe { (this as *mut u8).add(META_FIXED).cast() }
    }

    /// The live bitmap (checked mode: 1 = handed out to a user); only in a geometry
    /// [`Geometry::with_live_bits`].
    ///
    /// # Safety
    /// As [`SlabMeta::free_bits`], in a geometry with the live bitmap (`live`).
    #[inline]
    pub(crate) unsafe fn live_bits(this: *mut SlabMeta, words: usize) -> *mut u64 {
        // SAFETY: the live bitmap follows the free bitmap (caller's guarantee).
        unsafe { (this as *mut u8).add(META_FIXED + 8 * words).cast() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_small_items_fill_a_page() {
        let g = Geometry::for_item(64);
        assert_eq!(g.slab_size, 4096);
        assert_eq!(g.items_per_slab, 64);
        assert!(g.first_slab + g.slabs_per_chunk * g.slab_size <= CHUNK_SIZE);
        assert!(g.efficiency_pct() > 98.5, "{}", g.efficiency_pct());
    }

    #[test]
    fn geometry_pages_and_odd_sizes() {
        let g = Geometry::for_item(4096);
        assert_eq!((g.slab_size, g.items_per_slab), (4096, 1));
        let g = Geometry::for_item(3000);
        assert!(
            g.slab_size % 3000 * 64 <= g.slab_size || g.slab_size == 64 * 1024,
            "{g:?}"
        );
        assert!(g.efficiency_pct() > 90.0, "{g:?} {}", g.efficiency_pct());
        let g = Geometry::for_item(MAX_ITEM_SIZE);
        assert_eq!(g.items_per_slab, 1);
        assert!(g.slabs_per_chunk >= 3);
        for size in (8..5000).step_by(8) {
            let g = Geometry::for_item(size);
            assert!(g.items_per_slab >= 1 && g.slabs_per_chunk >= 1, "{size}");
            assert_eq!(
                g.slabs_per_chunk * g.slab_size,
                CHUNK_SIZE,
                "{size}: uncoloured, slabs fill the chunk (no descriptor in it)"
            );
            assert!(
                CHUNK_HEADER + g.slabs_per_chunk * g.meta_size <= DESC_STRIDE,
                "{size}: the descriptors fit their area"
            );
            assert!(g.efficiency_pct() > 85.0, "{size}: {}", g.efficiency_pct());
        }
    }

    #[test]
    fn a_coloured_geometry_still_fits_its_chunk() {
        let ps = os::page_size();
        for size in
            (8..5000)
                .step_by(8)
                .chain([8192, 12288, 16384, 65536, 512 * 1024, MAX_ITEM_SIZE])
        {
            let g = Geometry::for_item(size);
            for colour in [0, 1, 37, crate::keg::COLOURS - 1] {
                let c = g.coloured(colour);
                assert_eq!(c.first_slab, g.first_slab + colour * ps, "{size} {colour}");
                assert!(c.slabs_per_chunk >= 1 && c.slabs_per_chunk <= g.slabs_per_chunk);
                assert!(
                    c.first_slab + c.slabs_per_chunk * c.slab_size <= CHUNK_SIZE,
                    "{size} {colour}: {c:?}"
                );
                // As many slabs as still fit: one more would not.
                assert!(
                    c.first_slab + (c.slabs_per_chunk + 1) * c.slab_size > CHUNK_SIZE
                        || c.slabs_per_chunk == g.slabs_per_chunk
                );
                let c0 = g.coloured(0);
                assert_eq!(c0, g);
            }
        }
    }

    /// The live bitmap only where asked for: a descriptor grows by one bitmap, the slabs per
    /// chunk stay, and it is idempotent.
    #[test]
    fn the_live_bitmap_is_in_checked_geometries_only() {
        for size in [8, 16, 64, 100, 4096, MAX_ITEM_SIZE] {
            let g = Geometry::for_item(size).coloured(37);
            assert!(!g.live);
            assert_eq!(g.meta_size, META_FIXED + 8 * g.words, "{size}");
            let l = g.with_live_bits();
            assert!(l.live);
            assert_eq!(l.meta_size, META_FIXED + 16 * g.words, "{size}");
            assert_eq!(l.slabs_per_chunk, g.slabs_per_chunk, "{size}");
            assert!(CHUNK_HEADER + l.slabs_per_chunk * l.meta_size <= DESC_STRIDE);
            assert_eq!(l.with_live_bits(), l);
        }
    }

    #[test]
    fn magic_division_is_exact_over_a_slab() {
        for size in (8..=5000)
            .step_by(8)
            .chain([8192, 12288, 65536, MAX_ITEM_SIZE])
        {
            let g = Geometry::for_item(size);
            for x in (0..g.slab_size).step_by(if size < 512 { 1 } else { 7 }) {
                assert_eq!(g.div_item(x), (x / size, x % size == 0), "{size} {x}");
            }
            for x in [g.slab_size - 1, g.items_bytes, g.items_bytes - 1] {
                assert_eq!(g.div_item(x), (x / size, x % size == 0), "{size} {x}");
            }
        }
    }
}
