//! Kegs: the slab layer. A keg owns chunks from the [arena](crate::arena), cuts them into slabs
//! of one [geometry](crate::slab::Geometry), hands items out in batches and takes them back.
//!
//! Slabs sit on five lists: `partial` (some items free), `free` (all free, pages backed), `lazy`
//! (all free, pages released lazily: settling, or offered to the kernel with `MADV_FREE`; newest
//! first), `releasing` (all free, pages being released by a reclaim's session) and `clean` (all
//! free, pages released). Full slabs are on no list. Allocation prefers partial slabs, then free
//! ones, then lazy ones (no fault unless the kernel took their pages meanwhile), then clean ones
//! (whose pages fault in on first touch), then a slab of the newest chunk that was never used,
//! then a new chunk; it never looks at `releasing`.
//!
//! Where a slab that becomes entirely free goes, and how pages leave, is the caller's
//! [disposal decision](crate::disposal): the keg reads no process state of its own.
//!
//! **No `MADV_DONTNEED` runs under the keg lock.** A slab being released synchronously is taken
//! off every list (`ninflight`, state `Clean`: a free into it is a double free), the lock is
//! dropped for the `madvise`, and it goes onto `clean` when that is done ([`handoff`]). Inside a
//! reclaim the slab goes to the `releasing` list and the [release pipeline](crate::release) does
//! the `madvise`; the session then calls [`crate::release::Releasing::complete_releases`], which
//! splices the whole list onto `clean` in O(1). `MADV_FREE`, which only marks pages, runs under
//! the lock when a slab becomes lazy: the slab stays allocatable, so the mark must not race with
//! a reuse ([`lazily`]).
//!
//! Locking: one mutex per keg protects the lists, the slab metadata and the counters. It is the
//! innermost lock of the allocator: nothing is called with it held except the `fini` hook
//! (documented: hooks must not call into the same zone).
//!
//! **Metadata is written as slabs are first used** ("carved", [`carve`]), not when the chunk
//! arrives: a chunk of 4 KiB slabs has about a thousand slab descriptors, and writing them all
//! makes a program that uses many size classes a little touch pages of descriptors it never
//! needs (`docs/design/carve-on-first-use.md`). Only the newest chunk has never-used slabs,
//! always its last `uncarved`; their descriptors are still zero (mapped with the chunk, in its
//! descriptor area: `arena.rs`), which reads as a `Clean` slab with no free item, so a free into
//! one is refused like a free into any clean slab.
//!
//! Files, one concern each: [`lists`] (the intrusive slab lists), [`carve`] (chunks, carving,
//! import), [`cursor`] (taking items back, with its cursor over the current slab), [`excess`]
//! (the free-slab cap and its delay, a pure rule of inputs and time), [`lazily`] (the lazy list:
//! settle, offer, release), [`handoff`] (releasing free slabs: synchronously with the lock
//! dropped, or handed to a reclaim's session), [`empty`] (empty chunks back to the arena,
//! unmapped, when a mapping was refused), [`validate`] (the consistency check).
//!
//! Counting invariant (checked by [`Keg::validate`]):
//! `backed_slabs * items_per_slab == items_out + free_items`, where `items_out` are the items
//! handed to the layers above (per-CPU caches, depot, users) and `free_items` the free items in
//! backed slabs.

mod carve;
mod cursor;
mod empty;
mod excess;
mod handoff;
mod huge;
mod lazily;
mod lists;
mod validate;

pub(crate) use carve::colour_of;
#[cfg(test)]
pub(crate) use carve::COLOURS;
use excess::end_excess;
pub(crate) use excess::EXCESS_KEGS;
use handoff::Deferred;
pub use huge::HugeCounts;
pub(crate) use huge::HUGE_PENDING;
use lists::{list_push, list_remove};

use crate::arena::{self, Arena, CHUNK_SIZE};
use crate::disposal::{Disposal, Emptied, Pages};
pub use crate::error::InvalidKind;
use crate::os::{self, OsError};
use crate::release::Session;
use crate::slab::{Geometry, SlabMeta, SlabState, CHUNK_HEADER};
use crate::sync::lock;
use core::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes of slabs whose pages are backed, over all kegs (the allocator's share of RSS).
/// Relaxed everywhere: a gauge that orders no other memory; every change is made under the lock
/// of the keg whose slabs moved, so a keg's `validate` sees it agree with that keg.
pub(crate) static MAPPED_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes released since the process started, over all kegs. Relaxed everywhere, as
/// [`MAPPED_BYTES`].
pub(crate) static RELEASED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Bytes of item slabs backed by memory now, over every keg.
pub fn mapped_bytes() -> u64 {
    MAPPED_BYTES.load(Ordering::Relaxed) as u64
}

/// Bytes released so far, over every keg.
pub fn released_bytes() -> u64 {
    RELEASED_BYTES.load(Ordering::Relaxed)
}

#[repr(C)]
struct ChunkHeader {
    keg: *const Keg,
    next: *mut ChunkHeader,
    /// Mapped `MADV_HUGEPAGE` in whole huge pages (`huge.rs`): set when the keg takes it, or
    /// under the keg lock when the keg becomes dense (`make_older_chunks_huge`); never cleared.
    huge: bool,
    /// Bit `h`: huge page `h` was broken (slabs of it given back while others stayed) and is
    /// not known to be whole again (`huge.rs`, `collapse_mended`). Lock held.
    broken: u8,
    /// Huge pages of this chunk the keg collapsed, ever (the stats' `huge_collapsed`: a
    /// per-chunk count, as the zone object has no room left). Lock held.
    collapsed: u32,
    /// Slabs of this chunk on the free list: all of them, and the chunk may go back whole
    /// without a look at each (`huge.rs`, `release_whole_pages`). Changes where `nfree_slabs`
    /// does, under the lock.
    nfree: u32,
    /// Slabs of this chunk that may ever be carved: all (`slabs_per_chunk`), or, for a chunk
    /// whose next pages another mapping took before they were carved (`Keg::abandon_newest`),
    /// those carved until then. Lock held.
    limit: u32,
}

const _: () = assert!(core::mem::size_of::<ChunkHeader>() <= CHUNK_HEADER);

struct KegInner {
    partial: *mut SlabMeta,
    free: *mut SlabMeta,
    clean: *mut SlabMeta,
    /// Clean slabs whose pages a release session is releasing (see the module docs), and the
    /// last of them (for the O(1) splice onto `clean`).
    releasing: *mut SlabMeta,
    releasing_tail: *mut SlabMeta,
    /// Lazily freed slabs, newest first, and the oldest of them (where the decay starts).
    lazy: *mut SlabMeta,
    lazy_tail: *mut SlabMeta,
    chunks: *mut ChunkHeader,
    nchunks: usize,
    /// Chunks mapped huge (`huge.rs`). The three huge counters are `u32`s (a zone object, which
    /// holds its keg, fits 1 KiB: `zone/objects.rs`); 2^32 chunks or huge pages is 8 PiB.
    huge_chunks: u32,
    /// Free slabs (on the free list) of huge chunks (`huge.rs`): the last to go.
    nfree_huge: u32,
    /// Huge pages given back whole, ever.
    huge_released: u32,
    /// Slabs of the newest chunk (`chunks`) never used: its last `uncarved`, whose metadata is
    /// still zero (see the module docs). Clean slabs on no list.
    uncarved: usize,
    npartial: usize,
    nfree_slabs: usize,
    nclean: usize,
    nreleasing: usize,
    /// Clean slabs on no list: a thread took them off their list under the lock and gives their
    /// pages back with the lock dropped (`madvise` never runs under a keg lock); they go onto
    /// `clean` when it is done. Nothing can allocate from them meanwhile (they are on no list)
    /// and a free into them is refused as a double free (their state is `Clean`).
    ninflight: usize,
    nlazy: usize,
    nfull: usize,
    /// Slabs whose pages are backed (partial + full + free).
    backed_slabs: usize,
    /// Free items in backed slabs.
    free_items: usize,
    /// Items handed out of the keg.
    items_out: usize,
    released_bytes: u64,
    /// Bytes offered with `MADV_FREE` / taken back from the lazy list by allocation, ever.
    lazy_freed_bytes: u64,
    lazy_reused_bytes: u64,
    /// When the keg first held more free slabs than its cap since it last did not
    /// ([`crate::lazy::now_ms`], never 0); 0 while it holds at most its cap. See
    /// [`EXCESS_DELAY_MS`].
    excess_since: u32,
}

// SAFETY: the raw pointers point into chunks owned by the keg; they are only dereferenced with
// the keg mutex held.
unsafe impl Send for KegInner {}

impl KegInner {
    /// No chunks, no slabs; `released_bytes` carried over.
    fn empty(released_bytes: u64) -> KegInner {
        KegInner {
            partial: ptr::null_mut(),
            free: ptr::null_mut(),
            clean: ptr::null_mut(),
            releasing: ptr::null_mut(),
            releasing_tail: ptr::null_mut(),
            lazy: ptr::null_mut(),
            lazy_tail: ptr::null_mut(),
            chunks: ptr::null_mut(),
            nchunks: 0,
            huge_chunks: 0,
            nfree_huge: 0,
            huge_released: 0,
            uncarved: 0,
            npartial: 0,
            nfree_slabs: 0,
            nclean: 0,
            nreleasing: 0,
            ninflight: 0,
            nlazy: 0,
            nfull: 0,
            backed_slabs: 0,
            free_items: 0,
            items_out: 0,
            released_bytes,
            lazy_freed_bytes: 0,
            lazy_reused_bytes: 0,
            excess_since: 0,
        }
    }
}

/// A snapshot of a keg's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KegCounts {
    pub chunks: usize,
    pub partial_slabs: usize,
    pub free_slabs: usize,
    pub clean_slabs: usize,
    /// Clean slabs whose release is in progress (zero outside a reclaim).
    pub releasing_slabs: usize,
    /// Lazily freed slabs (`MADV_FREE`, not yet reused or released for good).
    pub lazy_slabs: usize,
    pub full_slabs: usize,
    pub backed_slabs: usize,
    pub free_items: usize,
    pub items_out: usize,
    pub released_bytes: u64,
    /// Bytes offered with `MADV_FREE`, ever.
    pub lazy_freed_bytes: u64,
    /// Bytes of lazily freed slabs taken back by allocation, ever.
    pub lazy_reused_bytes: u64,
    /// Chunks mapped huge (the keg was dense when it took them, `HUGE_AFTER`).
    pub huge_chunks: usize,
    /// Huge pages given back whole (one `MADV_DONTNEED` of 2 MiB each), ever.
    pub huge_released: u64,
}

/// The slab layer of one zone (or of the internal bucket storage).
pub(crate) struct Keg {
    pub(crate) geo: Geometry,
    pub(crate) tag: u64,
    pub(crate) arena: &'static Arena,
    /// Free slabs a reclaim keeps backed ([`Keg::release_free`]; UMA's keg reserve, in slabs).
    reserve_slabs: usize,
    /// Free slabs kept backed outside a reclaim: the slabs a free leaves entirely free beyond
    /// this many are released, at once or after [`EXCESS_DELAY_MS`] (`usize::MAX`: all
    /// kept, the default; see [`Keg::keep_free_at_most`]).
    free_cap: usize,
    /// Reuse of this keg's free slabs and of its zone's depot (`reuse.rs`): for a zone that
    /// opted in, the free slabs kept are those its working set of reuse calls for
    /// ([`Keg::free_cap_now`]).
    pub(crate) reuse: crate::reuse::Reuse,
    /// Written beside the tag in the chunk map entry of every chunk of this keg (see
    /// `arena.rs`, "The hint"): a zone's keg carries its per-CPU stacks' base; 0 for none.
    chunk_hint: u64,
    inner: crate::contention::Counted<KegInner>,
}

// SAFETY: all mutable state is behind the mutex; `geo`, `tag` and `arena` are immutable.
unsafe impl Sync for Keg {}

// SAFETY: the raw pointers a keg holds (in `inner`, behind the mutex) point into chunks it owns,
// not into any thread's data, so the keg may move to another thread; `arena` is a `&'static`.
unsafe impl Send for Keg {}

/// Where a valid item lives.
#[derive(Clone, Copy)]
pub(crate) struct ItemLoc {
    pub(crate) slab: *mut SlabMeta,
    pub(crate) index: usize,
}

impl Keg {
    /// A keg for items of `item_size` bytes (already a multiple of the alignment).
    pub(crate) fn new(item_size: usize, reserve_slabs: usize) -> Result<Keg, OsError> {
        let arena = arena::get()?;
        let tag = arena.new_tag();
        Ok(Keg {
            geo: Geometry::for_item(item_size).coloured(colour_of(tag)),
            tag,
            arena,
            reserve_slabs,
            free_cap: usize::MAX,
            reuse: crate::reuse::Reuse::new(None),
            chunk_hint: 0,
            inner: crate::contention::Counted::new(KegInner::empty(0)),
        })
    }

    /// Gives every descriptor the live bitmap of checked mode ([`Keg::mark_live`]); before the
    /// keg's first chunk.
    pub(crate) fn with_live_bits(mut self) -> Keg {
        debug_assert!(lock(&self.inner).chunks.is_null());
        self.geo = self.geo.with_live_bits();
        self
    }

    /// Sets the hint written beside the tag of each chunk the keg will own (before its first).
    pub(crate) fn with_chunk_hint(mut self, hint: u64) -> Keg {
        self.chunk_hint = hint;
        self
    }

    /// Keeps at most `slabs` entirely free slabs backed between reclaims: the slabs a free
    /// empties beyond them go back (with the keg lock dropped, adjacent slabs in one call)
    /// before the free returns under pressure or without lazy freeing, else once the excess has
    /// lasted [`EXCESS_DELAY_MS`], as jemalloc and tcmalloc hand an empty slab back to the pages
    /// every size class shares. Memory freed in one size class then stops counting in
    /// the process's RSS instead of waiting for the next reclaim (a malloc: `heap.rs`).
    pub(crate) fn keep_free_at_most(mut self, slabs: usize) -> Keg {
        self.free_cap = slabs;
        self
    }

    /// Bounds the free slabs kept (and, through [`Keg::reuse`], the zone's depot) by the working
    /// set of reuse, at least `floor_bytes` (`reuse.rs`).
    pub(crate) fn reuse_floor(mut self, floor_bytes: usize) -> Keg {
        self.reuse = crate::reuse::Reuse::new(Some(floor_bytes));
        self
    }

    /// The entirely free slabs the keg keeps now: its fixed cap ([`Keg::keep_free_at_most`]),
    /// or for a zone whose caches follow reuse, the cap of its working set within the fixed
    /// one, at least one slab. `usize::MAX`: all kept until a reclaim.
    #[inline]
    pub(crate) fn free_cap_now(&self) -> usize {
        let cap = self
            .reuse
            .cap_units(self.free_cap as u64, self.geo.slab_size as u64);
        usize::try_from(cap).unwrap_or(usize::MAX).max(1)
    }

    /// The descriptor of slab `i` of the chunk at `chunk` (in its descriptor area, `arena.rs`).
    #[inline]
    pub(super) fn meta(&self, chunk: usize, i: usize) -> *mut SlabMeta {
        (self.arena.desc_of(chunk) + CHUNK_HEADER + i * self.geo.meta_size) as *mut SlabMeta
    }

    /// The header of the chunk at `chunk` (one of this keg's), at its descriptor area's start.
    #[inline]
    fn header(&self, chunk: usize) -> *mut ChunkHeader {
        self.arena.desc_of(chunk) as *mut ChunkHeader
    }

    /// The chunk whose header is `c`.
    #[inline]
    fn chunk_at(&self, c: *const ChunkHeader) -> usize {
        self.arena.chunk_of_desc(c as usize)
    }

    /// The header of the chunk of the slab `s` describes (a valid meta of this keg): the start
    /// of the descriptor area `s` lies in.
    #[inline]
    fn header_of(s: *const SlabMeta) -> *mut ChunkHeader {
        (s as usize & !(arena::DESC_STRIDE - 1)) as *mut ChunkHeader
    }

    #[inline]
    pub(super) fn slab_base(&self, s: *mut SlabMeta) -> usize {
        let chunk = self.arena.chunk_of_desc(s as usize);
        // SAFETY: `s` is a valid meta (callers hold the lock or own the slab).
        let idx = unsafe { (*s).index } as usize;
        chunk + self.geo.first_slab + (idx << self.geo.slab_shift)
    }

    /// Is `addr` in one of this keg's chunks? (O(1), touches only the chunk map.)
    #[inline]
    pub(crate) fn owns(&self, addr: usize) -> bool {
        self.arena.tag_of(addr) == self.tag
    }

    /// Locates the item at `addr`, checking it is the start of an item of this keg. Does not look
    /// at the free bitmap (that needs the lock).
    #[inline]
    pub(crate) fn locate(&self, addr: usize) -> Result<ItemLoc, InvalidKind> {
        if !self.owns(addr) {
            return Err(InvalidKind::NotInZone);
        }
        self.locate_owned(addr)
    }

    /// [`Keg::locate`] for an address already known to lie in one of this keg's chunks.
    #[inline(always)]
    pub(super) fn locate_owned(&self, addr: usize) -> Result<ItemLoc, InvalidKind> {
        let chunk = addr & !(CHUNK_SIZE - 1);
        let off = addr - chunk;
        let Some(rel) = off.checked_sub(self.geo.first_slab) else {
            return Err(InvalidKind::NotAnItem);
        };
        let slab = rel >> self.geo.slab_shift;
        if slab >= self.geo.slabs_per_chunk {
            return Err(InvalidKind::NotAnItem);
        }
        let in_slab = rel & (self.geo.slab_size - 1);
        if in_slab >= self.geo.items_bytes {
            return Err(InvalidKind::NotAnItem);
        }
        let (index, exact) = self.geo.div_item(in_slab);
        if !exact {
            return Err(InvalidKind::Misaligned);
        }
        Ok(ItemLoc {
            slab: self.meta(chunk, slab),
            index,
        })
    }

    /// The free slabs a reclaim keeps backed when it keeps the reserve ([`Keg::release_free`]).
    pub(crate) fn reserve_slabs(&self) -> usize {
        self.reserve_slabs
    }

    /// Counters.
    pub(crate) fn counts(&self) -> KegCounts {
        let g = lock(&self.inner);
        KegCounts {
            chunks: g.nchunks,
            partial_slabs: g.npartial,
            free_slabs: g.nfree_slabs,
            clean_slabs: g.nclean + g.uncarved,
            releasing_slabs: g.nreleasing,
            lazy_slabs: g.nlazy,
            full_slabs: g.nfull,
            backed_slabs: g.backed_slabs,
            free_items: g.free_items,
            items_out: g.items_out,
            released_bytes: g.released_bytes,
            lazy_freed_bytes: g.lazy_freed_bytes,
            lazy_reused_bytes: g.lazy_reused_bytes,
            huge_chunks: g.huge_chunks as usize,
            huge_released: g.huge_released as u64,
        }
    }

    /// The huge pages of the keg's huge chunks: holding memory, partly used, broken. A walk over
    /// the huge chunks' slab descriptors under the lock (nothing for a keg with none): for the
    /// stats, not for a policy.
    pub(crate) fn huge_pages(&self) -> HugeCounts {
        self.huge_counts(&lock(&self.inner))
    }

    /// Items handed out of the keg and not yet returned.
    pub(crate) fn items_out(&self) -> usize {
        lock(&self.inner).items_out
    }

    /// Acquisitions of this keg's mutex that found it held (statistics).
    pub(crate) fn lock_waits(&self) -> crate::contention::WaitCount {
        self.inner.waits().read()
    }

    /// Returns every chunk to the arena. Fails (changing nothing) while items are out.
    pub(crate) fn destroy(&self) -> Result<(), usize> {
        let mut g = lock(&self.inner);
        if g.items_out != 0 {
            return Err(g.items_out);
        }
        // Release sessions complete before their reclaim returns, and no reclaim runs on a keg
        // being destroyed (see `release::Session::complete`).
        debug_assert_eq!(g.nreleasing, 0, "keg destroyed during a release session");
        let backed = g.backed_slabs * self.geo.slab_size;
        // Relaxed gauges, changed under the keg lock (see `MAPPED_BYTES`).
        MAPPED_BYTES.fetch_sub(backed, Ordering::Relaxed);
        end_excess(&mut g);
        // Lazily freed slabs go back with their chunks, for good.
        let mut lazy = 0;
        let mut s = g.lazy;
        while !s.is_null() {
            // SAFETY: a valid meta on the lazy list; lock held.
            unsafe {
                crate::lazy::gauge((*s).advised).fetch_sub(self.geo.slab_size, Ordering::Relaxed);
                s = (*s).next;
            }
            lazy += self.geo.slab_size;
        }
        let backed = backed + lazy;
        RELEASED_BYTES.fetch_add(backed as u64, Ordering::Relaxed);
        let mut c = g.chunks;
        while !c.is_null() {
            let touched = self.meta_touched(self.carved(&g, c));
            // SAFETY: `c` is a valid chunk header; we read `next` before the chunk (and its
            // descriptor area, which holds the header) is freed, and nothing uses the chunk any
            // more (no items out).
            unsafe {
                let next = (*c).next;
                let chunk = self.chunk_at(c);
                self.arena
                    .free_chunk(NonNull::new_unchecked(chunk as *mut u8));
                os::sub_metadata(touched);
                c = next;
            }
        }
        *g = KegInner::empty(g.released_bytes + backed as u64);
        Ok(())
    }

    /// Checked mode: marks the item live (handed to a user). Returns false if it already was.
    /// The keg has the live bitmap ([`Keg::with_live_bits`]).
    pub(crate) fn mark_live(&self, loc: ItemLoc) -> bool {
        assert!(self.geo.live, "mark_live on a keg without the live bitmap");
        let (w, b) = (loc.index / 64, loc.index % 64);
        // SAFETY: `loc` came from `locate` on this keg, so the meta is valid; the live bitmap is
        // only accessed atomically.
        let word =
            unsafe { &*(SlabMeta::live_bits(loc.slab, self.geo.words).add(w) as *const AtomicU64) };
        // AcqRel: pairs with the AcqRel `fetch_and` of `mark_dead` on another CPU, so the
        // allocation that sets the bit happens after the free that cleared it (the item's
        // ownership moves through this word in checked mode).
        word.fetch_or(1 << b, Ordering::AcqRel) & (1 << b) == 0
    }

    /// Checked mode: marks the item no longer live. Returns false if it was not live (a double
    /// free or a pointer never handed out). The keg has the live bitmap.
    pub(crate) fn mark_dead(&self, loc: ItemLoc) -> bool {
        assert!(self.geo.live, "mark_dead on a keg without the live bitmap");
        let (w, b) = (loc.index / 64, loc.index % 64);
        // SAFETY: as in `mark_live`.
        let word =
            unsafe { &*(SlabMeta::live_bits(loc.slab, self.geo.words).add(w) as *const AtomicU64) };
        // AcqRel: pairs with `mark_live`'s `fetch_or` (see there).
        word.fetch_and(!(1 << b), Ordering::AcqRel) & (1 << b) != 0
    }
}

#[cfg(test)]
mod bulk_tests;
#[cfg(test)]
pub(crate) mod tests;
