//! Kegs: the slab layer. A keg owns chunks from the [arena](crate::arena), cuts them into slabs
//! of one [geometry](crate::slab::Geometry) and hands out and takes back items in batches.
//!
//! Slabs sit on four lists: `partial` (some items free), `free` (all free, pages backed), `lazy`
//! (all free, pages offered to the kernel with `MADV_FREE`, newest first) and `clean` (all free,
//! pages given back). Full slabs are on no list. Allocation prefers partial slabs, then free
//! ones, then lazy ones (no fault unless the kernel took their pages meanwhile), then clean ones
//! (whose pages fault in on first touch), then a slab of the newest chunk that was never used,
//! then a new chunk. [`Keg::reclaim`] moves free slabs
//! beyond the reserve to `clean`, giving their pages back with one `madvise` per run of adjacent
//! slabs; [`Keg::lazy_keep`] moves them to `lazy` instead, and [`Keg::purge_lazy`] moves lazy
//! slabs (all, or those older than a delay, oldest first) on to `clean` (see [`crate::lazy`]).
//! No `MADV_DONTNEED` runs under the keg lock: slabs being given back are taken off every list
//! (`ninflight`, state `Clean`), the lock is dropped for the `madvise`, and they go onto `clean`
//! when it is done. (`MADV_FREE`, which only marks pages, still runs under the lock when a slab
//! becomes lazy: the slab stays allocatable, so the mark must not race with a reuse.)
//!
//! Inside a reclaim, pages go back through the [release pipeline](crate::release) instead: a slab
//! left entirely free by `Keg::take_back` (beyond the reserve), or picked by `Keg::reclaim_in`,
//! becomes `Clean` at once (so a free into it is a double free) but waits on a fourth list,
//! `releasing`, which allocation never looks at, until the session has seen its `madvise` done
//! and calls [`crate::release::Releasing::complete_releases`], which splices the whole list onto `clean` in O(1). The
//! keg lock is not held during those `madvise` calls, so allocation from the keg goes on.
//!
//! Locking: one mutex per keg protects the lists, the slab metadata and the counters. It is the
//! innermost lock of the allocator: nothing is called with it held except the `fini` hook
//! (documented: hooks must not call into the same zone).
//!
//! **Metadata is written as slabs are first used** ("carved"), not when the chunk arrives: a
//! chunk of 4 KiB slabs has about a thousand slab descriptors, 12 pages of them for 16-byte
//! items; writing them all made a small preloaded program (26–28 size classes used a little)
//! touch about 1 MiB of descriptors it never needed (measured: `docs/benchmarks.md`, Issue 12,
//! "Peak RSS: where the memory goes"). Only the newest chunk has never-used slabs, always its
//! last `uncarved`; their descriptors are still the chunk's zero pages, which read as a `Clean`
//! slab with no free item, so a free into one is refused like a free into any clean slab.
//! mimalloc commits its segments' page descriptors the same way, as pages are first used.
//!
//! Counting invariant (checked by [`Keg::validate`]):
//! `backed_slabs * items_per_slab == items_out + free_items`, where `items_out` are the items
//! handed to the layers above (per-CPU caches, depot, users) and `free_items` the free items in
//! backed slabs.

use crate::arena::{self, Arena, CHUNK_SIZE};
use crate::disposal::{Disposal, Emptied, Pages};
use crate::os::{self, OsError};
use crate::release::Session;
use crate::slab::{Geometry, SlabMeta, SlabState, CHUNK_HEADER};
use crate::sync::{lock, Mutex};
use core::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bytes of slabs whose pages are backed, over all kegs (the allocator's share of RSS).
pub(crate) static MAPPED_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Bytes given back to the OS since the process started, over all kegs.
pub(crate) static RELEASED_BYTES: AtomicU64 = AtomicU64::new(0);

/// How long a keg may hold more entirely free slabs than its cap ([`Keg::keep_free_at_most`])
/// on its free list, when no one is short of memory: a free that empties one slab more than the
/// cap keeps it there (allocatable without a fault or any bookkeeping) and the excess leaves the
/// free list once it has lasted this long, at the keg's next free or on the runtime's next
/// periodic step ([`Keg::release_expired_excess`]), whichever comes first — into the lazy decay
/// ([`crate::lazy`]: settling, then `MADV_FREE`, back for good after `lazy_decay_ms` or as soon
/// as another zone or the malloc's large blocks need fresh pages, `zone::make_room`), not back
/// to the kernel at once. Under pressure (or in a squeeze window:
/// [`crate::lazy::release_kind_now`]), or without the runtime (lazy freeing off), the excess
/// goes back at once as before. mimalloc's purge delay (10 ms) is the anchor: a program that
/// frees a class's blocks and allocates them again within it pays nothing at all, and one that
/// frees everything at its end (the malloc benchmark's `fragmentation` case: ~20 % of its time
/// was those `madvise` calls, docs/benchmarks.md, "A/B of the caps") does not wait for the
/// kernel's zapping. Going into the lazy decay rather than back (2026-11-24): a class freed in
/// one phase of a program and allocated again in a later one (`python3 workload.py`: the 64-byte
/// objects of a dropped tree, then of a dict) took its pages back without faults — a third
/// fewer page faults in the whole run — while memory that another class needs still goes back
/// as that class grows, so peak RSS stays where it was (docs/benchmarks.md, "The free-slab
/// cap's excess into the lazy decay").
pub(crate) const EXCESS_DELAY_MS: u64 = 10;

/// Kegs holding an excess over their cap now (`excess_since != 0`, changed under each keg's
/// lock): the periodic step walks the zones only when some do. Relaxed throughout: the count
/// orders nothing; a stale read costs one walk for nothing, or delays a give-back by one step.
pub(crate) static EXCESS_KEGS: AtomicUsize = AtomicUsize::new(0);

/// Bytes of item slabs backed by memory now, over every keg.
pub fn mapped_bytes() -> u64 {
    MAPPED_BYTES.load(Ordering::Relaxed) as u64
}

/// Bytes given back to the OS so far, over every keg.
pub fn released_bytes() -> u64 {
    RELEASED_BYTES.load(Ordering::Relaxed)
}

pub use crate::error::InvalidKind;

#[repr(C)]
struct ChunkHeader {
    keg: *const Keg,
    next: *mut ChunkHeader,
}
const _: () = assert!(core::mem::size_of::<ChunkHeader>() <= CHUNK_HEADER);

struct KegInner {
    partial: *mut SlabMeta,
    free: *mut SlabMeta,
    clean: *mut SlabMeta,
    /// Clean slabs whose pages a release session is giving back (see the module docs), and the
    /// last of them (for the O(1) splice onto `clean`).
    releasing: *mut SlabMeta,
    releasing_tail: *mut SlabMeta,
    /// Lazily freed slabs, newest first, and the oldest of them (where the decay starts).
    lazy: *mut SlabMeta,
    lazy_tail: *mut SlabMeta,
    chunks: *mut ChunkHeader,
    nchunks: usize,
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
    /// Lazily freed slabs (`MADV_FREE`, not yet reused or given back for good).
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
}

/// The slab layer of one zone (or of the internal bucket storage).
pub(crate) struct Keg {
    pub(crate) geo: Geometry,
    pub(crate) tag: u64,
    pub(crate) arena: &'static Arena,
    /// Free slabs kept backed by [`Keg::reclaim`] (UMA's keg reserve, in slabs).
    reserve_slabs: usize,
    /// Free slabs kept backed outside a reclaim: the slabs a free leaves entirely free beyond
    /// this many go back to the OS, at once or after [`EXCESS_DELAY_MS`] (`usize::MAX`: all
    /// kept, the default; see [`Keg::keep_free_at_most`]).
    free_cap: usize,
    /// Reuse of this keg's free slabs and of its zone's depot (`reuse.rs`): for a zone that
    /// opted in, the free slabs kept are those its working set of reuse calls for
    /// ([`Keg::free_cap_now`]).
    pub(crate) reuse: crate::reuse::Reuse,
    /// Written beside the tag in the chunk map entry of every chunk of this keg (see
    /// `arena.rs`, "The hint"): a zone's keg carries its per-CPU stacks' base; 0 for none.
    chunk_hint: u64,
    inner: Mutex<KegInner>,
}

// SAFETY: all mutable state is behind the mutex; `geo`, `tag` and `arena` are immutable.
unsafe impl Sync for Keg {}
// SAFETY: as above.
unsafe impl Send for Keg {}

/// Distinct page colours of slab 0 (see [`colour_of`]): 128 pages. A second-level TLB of
/// today's x86 cores has some hundreds of sets; measured on this project's machine (AMD,
/// family 26), 16 colours gained a third of what 64 did, and 128 no more than 64.
pub(crate) const COLOURS: usize = 128;

/// How many pages past its metadata slab 0 of every chunk of the keg with `tag` starts, pure.
///
/// Chunks are 4 MiB aligned, so without it the first slabs of every keg start at (nearly) the
/// same offset in their chunks, and the pages a program uses most — the first slabs of each
/// size class — have virtual page numbers equal modulo 1024. A set-associative TLB indexes
/// its sets by the low bits of the page number: forty classes' first pages then compete for
/// the ways of one set, and a program touching objects of many classes misses in the TLB on
/// most accesses (the malloc's `larson` case on one CPU: 12.8 → 9.7 ns per replacement with
/// the colours; docs/benchmarks.md, "Slab colours"). Bonwick's slab allocator colours slabs
/// by cache lines for the same reason within a cache; here the unit is the page and the
/// structure the TLB. Consecutive tags are 37 pages apart (37 is prime to 128, so the first
/// 128 kegs all differ). The cost is address space only: the skipped pages are never touched,
/// and a chunk holds fewer slabs when the last no longer fits.
pub(crate) fn colour_of(tag: u64) -> usize {
    ((tag >> 1) as usize).wrapping_mul(37) % COLOURS
}

/// Stops a keg's excess clock, if it runs (keg lock held: `g` is its state).
fn end_excess(g: &mut KegInner) {
    if g.excess_since != 0 {
        g.excess_since = 0;
        EXCESS_KEGS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What [`Keg::take_back_in`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TakenBack {
    /// Bytes given back to the OS during the call.
    pub(crate) bytes: usize,
    /// Valid items returned to their slabs.
    pub(crate) valid: usize,
}

/// [`Keg::take_back_in`]'s cache of the slab it is working on: its state, free count and one
/// bitmap word, plus the items returned but not yet counted in the keg's counters, and what the
/// fast path may do without looking further.
struct Cursor {
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
    unsafe fn sync(&mut self, g: &mut KegInner) {
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
    unsafe fn load(&mut self, s: *mut SlabMeta, base: usize, bits: *mut u64) {
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
    unsafe fn load_word(&mut self, at: *mut u64) {
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
    fn refresh_fast(&mut self, ips: u32, items_bytes: usize) {
        if self.state == SlabState::Partial && !self.word_at.is_null() && self.nfree < ips {
            self.fast_limit = items_bytes;
            self.fast_left = ips - self.nfree - 1;
        } else {
            self.fast_limit = 0;
            self.fast_left = 0;
        }
    }
}

/// [`Keg::take_back_in`]'s state between items.
struct Work<'a> {
    /// Slabs emptied in give-back mode, taken off every list (`ninflight`), whose pages go back
    /// once the lock is dropped.
    deferred: Deferred,
    cur: Cursor,
    /// The last chunk found to be ours.
    our_chunk: usize,
    out: TakenBack,
    /// Slabs left entirely free go back to the OS before the call returns ([`Emptied::Release`]).
    release: bool,
    /// A slab emptied beyond the free cap stays on the free list for now ([`EXCESS_DELAY_MS`]).
    delay_excess: bool,
    /// [`Keg::free_cap_now`] when the work began.
    free_cap: usize,
    keep: usize,
    session: Option<&'a mut Session>,
}

/// Slabs whose pages a thread gives back with the keg lock dropped (see `KegInner::ninflight`).
struct Deferred {
    slabs: [*mut SlabMeta; DEFERRED],
    n: usize,
}

/// Slabs given back per round of dropping the lock.
const DEFERRED: usize = 64;

impl Deferred {
    fn new() -> Deferred {
        Deferred {
            slabs: [ptr::null_mut(); DEFERRED],
            n: 0,
        }
    }

    fn full(&self) -> bool {
        self.n == DEFERRED
    }
}

/// Where a valid item lives.
#[derive(Clone, Copy)]
pub(crate) struct ItemLoc {
    pub(crate) slab: *mut SlabMeta,
    pub(crate) index: usize,
}

unsafe fn list_push(head: &mut *mut SlabMeta, s: *mut SlabMeta) {
    // SAFETY: `s` and `*head` (when non-null) are valid metas of this keg; the caller holds the
    // keg lock.
    unsafe {
        (*s).prev = ptr::null_mut();
        (*s).next = *head;
        if !(*head).is_null() {
            (**head).prev = s;
        }
    }
    *head = s;
}

unsafe fn list_remove(head: &mut *mut SlabMeta, s: *mut SlabMeta) {
    // SAFETY: `s` is on the list at `head`; its neighbours are valid metas; keg lock held.
    unsafe {
        if (*s).prev.is_null() {
            debug_assert_eq!(*head, s);
            *head = (*s).next;
        } else {
            (*(*s).prev).next = (*s).next;
        }
        if !(*s).next.is_null() {
            (*(*s).next).prev = (*s).prev;
        }
        (*s).next = ptr::null_mut();
        (*s).prev = ptr::null_mut();
    }
}

/// `MADV_FREE` on `[addr, addr+len)`, falling back to `MADV_DONTNEED` where it is refused.
///
/// # Safety
/// As [`os::release`]: whole free slabs of ours, holding no live item.
unsafe fn offer(addr: usize, len: usize) {
    // SAFETY: caller's guarantee; slab addresses are never null.
    unsafe {
        let p = NonNull::new_unchecked(addr as *mut u8);
        if !os::release_lazy(p, len) {
            os::release(p, len);
        }
    }
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
            inner: Mutex::new(KegInner::empty(0)),
        })
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

    #[inline]
    fn meta(&self, chunk: usize, i: usize) -> *mut SlabMeta {
        (chunk + CHUNK_HEADER + i * self.geo.meta_size) as *mut SlabMeta
    }

    #[inline]
    fn slab_base(&self, s: *mut SlabMeta) -> usize {
        let chunk = s as usize & !(CHUNK_SIZE - 1);
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
    fn locate_owned(&self, addr: usize) -> Result<ItemLoc, InvalidKind> {
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

    /// Takes a new chunk; its slabs are carved from it as they are needed ([`Keg::carve`]).
    /// Only when the newest chunk has no slab left to carve.
    fn grow(&self, g: &mut KegInner) -> Result<(), OsError> {
        debug_assert_eq!(g.uncarved, 0);
        let chunk = self
            .arena
            .alloc_chunk(self.tag, self.chunk_hint, self.geo.first_slab)?;
        let hdr = chunk.as_ptr() as *mut ChunkHeader;
        // SAFETY: the chunk is committed, zeroed and ours; the header lies in its first
        // `first_slab` bytes, which no item overlaps.
        unsafe {
            hdr.write(ChunkHeader {
                keg: self,
                next: g.chunks,
            });
        }
        g.chunks = hdr;
        g.nchunks += 1;
        g.uncarved = self.geo.slabs_per_chunk;
        os::add_metadata(self.meta_touched(0));
        Ok(())
    }

    /// Bytes of a chunk's metadata area in memory once its first `carved` slabs are carved: the
    /// pages holding the header and their descriptors.
    fn meta_touched(&self, carved: usize) -> usize {
        os::round_up(CHUNK_HEADER + carved * self.geo.meta_size, os::page_size())
    }

    /// How many slabs of `chunk` (one of this keg's) have been carved: all but the newest
    /// chunk's `uncarved`. Walks over a chunk's slabs stop there.
    fn carved(&self, g: &KegInner, chunk: *mut ChunkHeader) -> usize {
        if chunk == g.chunks {
            self.geo.slabs_per_chunk - g.uncarved
        } else {
            self.geo.slabs_per_chunk
        }
    }

    /// Writes the descriptor of the newest chunk's next never-used slab (all items free, pages
    /// untouched) and returns it: a `Clean` slab on no list. `g.uncarved` must be non-zero.
    ///
    /// # Safety
    /// `g` is this keg's locked state.
    unsafe fn carve(&self, g: &mut KegInner) -> *mut SlabMeta {
        debug_assert!(g.uncarved > 0 && !g.chunks.is_null());
        let i = self.geo.slabs_per_chunk - g.uncarved;
        let s = self.meta(g.chunks as usize, i);
        // SAFETY: slab `i` of the newest chunk was never carved: its descriptor lies in the
        // chunk's metadata area (i < slabs_per_chunk), is zero and referenced by nothing; the
        // lock is held.
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
                    list_remove(&mut g.free, s);
                    (*s).state = SlabState::Partial;
                    list_push(&mut g.partial, s);
                }
                g.nfree_slabs -= 1;
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
                // SAFETY: as above.
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
                    if g.uncarved == 0 {
                        if let Err(e) = self.grow(&mut g) {
                            if n > 0 {
                                break;
                            }
                            return Err(e);
                        }
                    }
                    // The slab's pages mapped before it is carved (arena.rs, address space on
                    // demand).
                    let i = self.geo.slabs_per_chunk - g.uncarved;
                    let chunk = g.chunks as usize;
                    let end = chunk + self.geo.first_slab + ((i + 1) << self.geo.slab_shift);
                    if let Err(e) = self.arena.map_through(chunk, end) {
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
        // Under the lock, as before: `validate` and the lazy passes see keg and gauges agree.
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

    /// Returns items to their slabs. Each pointer is checked first; invalid ones are skipped and
    /// reported through `invalid(ptr, kind)` (called with the keg lock held: it must not call
    /// into this keg). `fini` (if any) runs on each valid item before its bit is set. `emptied`
    /// says what happens to a slab that becomes entirely free. Returns the bytes given back (only
    /// [`Emptied::GiveBack`] gives any back here; the pipeline's are counted when its session
    /// completes) and the number of valid items.
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
                if overflow {
                    drop(g);
                    if let Some(s) = w.session.as_deref_mut() {
                        s.drain_overflow();
                    }
                    g = lock(&self.inner);
                }
                if w.deferred.n > 0 {
                    g = self.give_back_deferred(g, &mut w.deferred);
                }
            }
        }
        // SAFETY: the cursor's slab and word (if any) are valid metas of this keg; lock held.
        unsafe { w.cur.sync(&mut g) };
        if w.deferred.n > 0 {
            g = self.give_back_deferred(g, &mut w.deferred);
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

    /// Trims the free list to `cap` slabs: without pressure (`pages` lazily) the slabs beyond
    /// it go into the lazy decay ([`crate::lazy`]: they settle, are offered with `MADV_FREE`, are
    /// released after `lazy_decay_ms` unless allocation takes them again first, and at once when
    /// another zone needs fresh pages, `zone::make_room`); else they are released now. Returns
    /// the bytes released now.
    fn trim_excess(&self, cap: usize, pages: Pages) -> usize {
        self.release_free(
            cap,
            &mut Disposal {
                emptied: Emptied::Keep,
                pages,
            },
        )
    }

    /// Whether the free slabs beyond the cap go back now. With `delay` (no pressure, lazy
    /// freeing on) only once the keg has held more than its cap for [`EXCESS_DELAY_MS`]
    /// (`now` is read only when it holds more); without it, whenever it holds more. Starts or
    /// ends the keg's excess clock; a new excess after a give-back starts its own delay.
    fn excess_due(
        &self,
        g: &mut KegInner,
        cap: usize,
        delay: bool,
        now: impl FnOnce() -> u32,
    ) -> bool {
        let over = g.nfree_slabs > cap;
        if !over || !delay {
            end_excess(g);
            return over;
        }
        let now = now();
        if g.excess_since == 0 {
            g.excess_since = now.max(1);
            EXCESS_KEGS.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if crate::lazy::expired(g.excess_since, now, EXCESS_DELAY_MS) {
            end_excess(g);
            return true;
        }
        false
    }

    /// The periodic step (the runtime's, every `pool_shrink_interval_ms`): the free slabs beyond
    /// the cap leave the free list if the keg has held them for [`EXCESS_DELAY_MS`] at `now`
    /// (into the lazy decay when `pages` says lazily, else released at once,
    /// [`Keg::trim_excess`]). Returns the bytes released now. Also what starts the excess clock
    /// of a keg whose cap fell below what it holds (a zone whose working set of reuse shrank at
    /// the end of a period: `ZoneInner::periodic`).
    pub(crate) fn trim_expired_excess(&self, now: u32, pages: Pages) -> usize {
        let cap = self.free_cap_now();
        if cap == usize::MAX {
            return 0;
        }
        let due = self.excess_due(&mut lock(&self.inner), cap, pages.is_lazy(), || now);
        if due {
            self.trim_excess(cap, pages)
        } else {
            0
        }
    }

    /// Gives the pages of the deferred slabs back with the keg lock dropped, then puts the slabs
    /// on the clean list. Returns the lock, taken again.
    fn give_back_deferred<'g>(
        &'g self,
        g: crate::sync::MutexGuard<'g, KegInner>,
        d: &mut Deferred,
    ) -> crate::sync::MutexGuard<'g, KegInner> {
        drop(g);
        // Address order, so that adjacent slabs go back in one call whatever order they came in.
        d.slabs[..d.n].sort_unstable_by_key(|&s| self.slab_base(s));
        let mut i = 0;
        while i < d.n {
            // Adjacent slabs (emptied in address order by a drain) go back in one call.
            let start = self.slab_base(d.slabs[i]);
            let mut len = self.geo.slab_size;
            while i + 1 < d.n && self.slab_base(d.slabs[i + 1]) == start + len {
                len += self.geo.slab_size;
                i += 1;
            }
            // SAFETY: the slabs are ours, entirely free, and on no list (`ninflight`): nothing
            // hands them out or frees into them until they are back on a list.
            unsafe { os::release(NonNull::new_unchecked(start as *mut u8), len) };
            i += 1;
        }
        let mut g = lock(&self.inner);
        for &s in &d.slabs[..d.n] {
            // SAFETY: `s` is a valid meta of this keg, Clean, on no list; lock held.
            unsafe { list_push(&mut g.clean, s) };
        }
        g.nclean += d.n;
        g.ninflight -= d.n;
        d.n = 0;
        g
    }

    /// [`Keg::take_back_in`] for one item, in full generality. Leaves the cursor on the item's slab
    /// (when it is one of ours) with its fast-path fields up to date.
    #[inline(never)]
    fn take_back_general<F: FnMut(*mut u8)>(
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
                    // SAFETY: as above.
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
                    // SAFETY: as above; `l.slab` is a valid meta of this keg.
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
                    // SAFETY: as above.
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
            if cur.state == SlabState::Full {
                (*s).state = SlabState::Partial;
                cur.state = SlabState::Partial;
                g.nfull -= 1;
                g.npartial += 1;
                list_push(&mut g.partial, s);
            }
            if cur.nfree == ips {
                cur.sync(g);
                list_remove(&mut g.partial, s);
                g.npartial -= 1;
                // Beyond the cap: back at once, unless the excess may wait (`EXCESS_DELAY_MS`:
                // then onto the free list, and `take_back_in`'s end decides).
                let over_cap =
                    w.session.is_none() && !w.delay_excess && g.nfree_slabs >= w.free_cap;
                if w.release || over_cap {
                    // On no list until its pages are gone: given back once the lock is
                    // dropped (`give_back_deferred`), never under it.
                    (*s).state = SlabState::Clean;
                    g.ninflight += 1;
                    g.backed_slabs -= 1;
                    g.free_items -= self.geo.items_per_slab;
                    w.deferred.slabs[w.deferred.n] = s;
                    w.deferred.n += 1;
                    w.out.bytes += self.geo.slab_size;
                } else if g.nfree_slabs >= w.keep
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
                }
                cur.state = (*s).state;
            }
            cur.refresh_fast(ips, self.geo.items_bytes);
        }
    }

    /// Makes `s` (entirely free, on no list) a `Clean` slab on the `releasing` list. Its pages are
    /// still backed and counted in MAPPED_BYTES until [`crate::release::Releasing::complete_releases`].
    ///
    /// # Safety
    /// `s` is a valid meta of this keg with every item free, on no list; `g` is this keg's locked
    /// state.
    unsafe fn to_releasing(&self, g: &mut KegInner, s: *mut SlabMeta) {
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
    fn account_release(&self, g: &mut KegInner, bytes: usize) {
        g.released_bytes += bytes as u64;
        MAPPED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
        RELEASED_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Releases the pages of free slabs until at most `keep` free slabs stay backed, as `d`
    /// decides: through its release session when it carries an active one (the slabs wait on
    /// the `releasing` list and their bytes are counted when the session completes: returns 0
    /// for them); into the lazy decay when its pages leave lazily ([`Keg::lazy_keep`], stamped by
    /// its clock; returns 0: lazily freed bytes are counted apart); else at once, with the keg
    /// lock dropped for the `madvise` (one per run of adjacent slabs), returning the bytes.
    pub(crate) fn release_free(&self, keep: usize, d: &mut Disposal<'_>) -> usize {
        let pages = d.pages;
        match d.session() {
            Some(sess) if sess.active() => self.release_free_to(keep, sess),
            _ if pages.is_lazy() => {
                self.lazy_keep(keep, (pages.clock)(), pages.settle_ms == 0);
                0
            }
            _ => self.release_free_to(keep, &mut Session::inactive()),
        }
    }

    /// [`Keg::release_free`] into `sess` (an inactive one: released here, with the lock dropped).
    fn release_free_to(&self, keep: usize, sess: &mut Session) -> usize {
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
        let mut to_release = g.nfree_slabs - keep;
        let mut released = 0;
        let mut d = Deferred::new();
        let mut c = g.chunks;
        while !c.is_null() && to_release > 0 {
            let chunk = c as usize;
            for i in 0..self.carved(&g, c) {
                if to_release == 0 {
                    break;
                }
                let s = self.meta(chunk, i);
                // SAFETY: `s` is a valid meta of this chunk; lock held.
                if unsafe { (*s).state } != SlabState::Free {
                    continue;
                }
                g.nfree_slabs -= 1;
                to_release -= 1;
                // SAFETY: `s` is on the free list; lock held.
                unsafe { list_remove(&mut g.free, s) };
                if sess.active() {
                    // SAFETY: `s` is entirely free and now on no list; lock held.
                    unsafe { self.to_releasing(&mut g, s) };
                    sess.add(self.slab_base(s), self.geo.slab_size);
                    if sess.has_overflow() {
                        drop(g);
                        sess.drain_overflow();
                        g = lock(&self.inner);
                    }
                    continue;
                }
                // SAFETY: as above; on no list until its pages are gone (`give_back_deferred`).
                unsafe { (*s).state = SlabState::Clean };
                g.ninflight += 1;
                g.backed_slabs -= 1;
                g.free_items -= self.geo.items_per_slab;
                d.slabs[d.n] = s;
                d.n += 1;
                released += self.geo.slab_size;
                if d.full() {
                    // Chunks stay on the keg's list while it lives: `c` stays valid.
                    g = self.give_back_deferred(g, &mut d);
                }
            }
            // SAFETY: `c` is a valid chunk header of this keg; lock held.
            c = unsafe { (*c).next };
        }
        if d.n > 0 {
            g = self.give_back_deferred(g, &mut d);
        }
        if released > 0 {
            self.account_release(&mut g, released);
        }
        released
    }

    /// The free slabs [`Keg::reclaim`] keeps backed when asked to keep the reserve.
    pub(crate) fn reserve_slabs(&self) -> usize {
        self.reserve_slabs
    }

    /// Takes `s` off the lazy list (keeping its tail right).
    ///
    /// # Safety
    /// `s` is on this keg's lazy list; `g` is this keg's locked state.
    unsafe fn lazy_remove(&self, g: &mut KegInner, s: *mut SlabMeta) {
        // SAFETY: caller's guarantee: `s` and its neighbours are valid metas of this keg.
        unsafe {
            if g.lazy_tail == s {
                g.lazy_tail = (*s).prev;
            }
            list_remove(&mut g.lazy, s);
        }
        g.nlazy -= 1;
    }

    /// Moves free slabs to the lazy list until at most `keep` stay backed, stamping them with
    /// `now_ms`. With `advise`, their pages are offered with `MADV_FREE` at once (one call per run
    /// of adjacent slabs); otherwise [`Keg::advise_lazy`] does it once they settled, unless
    /// allocation took them back first (then no system call at all). Where the kernel refuses
    /// `MADV_FREE` a run is given back with `MADV_DONTNEED` instead (the slabs are then lazy in
    /// name only; their later purge is a no-op for the kernel). Returns the bytes moved.
    pub(crate) fn lazy_keep(&self, keep: usize, now_ms: u32, advise: bool) -> usize {
        let mut g = lock(&self.inner);
        if g.nfree_slabs <= keep {
            return 0;
        }
        let mut to_move = g.nfree_slabs - keep;
        let mut moved = 0;
        if !advise {
            // No system call to batch: take them straight off the free list.
            while to_move > 0 {
                let s = g.free;
                // SAFETY: `s` heads the free list (nfree_slabs > keep, so it is non-null), an
                // entirely free slab; lock held.
                unsafe {
                    list_remove(&mut g.free, s);
                    (*s).state = SlabState::Lazy;
                    (*s).advised = false;
                    (*s).lazy_at = now_ms;
                    if g.lazy.is_null() {
                        g.lazy_tail = s;
                    }
                    list_push(&mut g.lazy, s);
                }
                g.nfree_slabs -= 1;
                g.nlazy += 1;
                g.backed_slabs -= 1;
                g.free_items -= self.geo.items_per_slab;
                to_move -= 1;
                moved += self.geo.slab_size;
            }
        }
        let mut c = g.chunks;
        while !c.is_null() && to_move > 0 {
            let chunk = c as usize;
            let carved = self.carved(&g, c);
            let mut run: Option<(usize, usize)> = None; // (first slab, count)
            for i in 0..=carved {
                let s = self.meta(chunk, i.min(carved.max(1) - 1));
                // SAFETY: `s` is a valid meta of this chunk (slab 0's is, carved or zero); lock
                // held.
                let take = i < carved && to_move > 0 && unsafe { (*s).state == SlabState::Free };
                if take {
                    g.nfree_slabs -= 1;
                    to_move -= 1;
                    // SAFETY: `s` is on the free list, entirely free; lock held.
                    unsafe {
                        list_remove(&mut g.free, s);
                        (*s).state = SlabState::Lazy;
                        (*s).advised = advise;
                        (*s).lazy_at = now_ms;
                        if g.lazy.is_null() {
                            g.lazy_tail = s;
                        }
                        list_push(&mut g.lazy, s);
                    }
                    g.nlazy += 1;
                    g.backed_slabs -= 1;
                    g.free_items -= self.geo.items_per_slab;
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
            crate::lazy::LAZY_PENDING_BYTES.fetch_sub(advised, Ordering::Relaxed);
            crate::lazy::LAZY_BYTES.fetch_add(advised, Ordering::Relaxed);
            crate::lazy::LAZY_FREED_BYTES.fetch_add(advised as u64, Ordering::Relaxed);
        }
        advised
    }

    /// Gives lazily freed slabs back for good (`MADV_DONTNEED`, then `clean`), oldest first:
    /// all of them (`older_than` `None`), or those lazily freed at least `delay_ms` before
    /// `now_ms` (`Some((now_ms, delay_ms))`, see [`crate::lazy::expired`]). Adjacent slabs go back
    /// in one call. Returns the bytes given back.
    pub(crate) fn purge_lazy(&self, older_than: Option<(u32, u64)>) -> usize {
        self.purge_lazy_upto(older_than, usize::MAX)
    }

    /// [`Keg::purge_lazy`] that stops once `limit` bytes are on their way back (the slab that
    /// reaches it included).
    pub(crate) fn purge_lazy_upto(&self, older_than: Option<(u32, u64)>, limit: usize) -> usize {
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
            // SAFETY: as above. Off every list and `Clean` until its pages are gone
            // (`give_back_deferred`, with the lock dropped): nothing allocates from it meanwhile.
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
                g = self.give_back_deferred(g, &mut d);
            }
        }
        if d.n > 0 {
            g = self.give_back_deferred(g, &mut d);
        }
        if released > 0 {
            g.released_bytes += released as u64;
            RELEASED_BYTES.fetch_add(released as u64, Ordering::Relaxed);
            crate::lazy::LAZY_BYTES.fetch_sub(released - pending, Ordering::Relaxed);
            crate::lazy::LAZY_PENDING_BYTES.fetch_sub(pending, Ordering::Relaxed);
        }
        released
    }

    /// Calls `f(addr, len)` once per run of adjacent slabs starting at `bases` (sorted here).
    /// Returns the bytes of all of them.
    fn runs(&self, bases: &mut [usize], mut f: impl FnMut(usize, usize)) -> usize {
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
        }
    }

    /// Walks every slab and checks the invariants of [`crate::slab`] and of this module against
    /// the counters. Returns the counters when they hold.
    pub(crate) fn validate(&self) -> Result<KegCounts, String> {
        let g = lock(&self.inner);
        let ips = self.geo.items_per_slab;
        let (mut np, mut nf, mut nc, mut nfull, mut free_items) = (0, 0, 0, 0, 0);
        let mut nl = 0;
        let mut c = g.chunks;
        let mut nchunks = 0;
        while !c.is_null() {
            nchunks += 1;
            let chunk = c as usize;
            if self.arena.tag_of(chunk) != self.tag {
                return Err(format!("chunk {chunk:#x} is not tagged with this keg"));
            }
            let carved = self.carved(&g, c);
            for i in carved..self.geo.slabs_per_chunk {
                let s = self.meta(chunk, i) as *const u8;
                // SAFETY: inside the chunk's metadata area (i < slabs_per_chunk); lock held.
                let zero = unsafe {
                    core::slice::from_raw_parts(s, self.geo.meta_size)
                        .iter()
                        .all(|&b| b == 0)
                };
                if !zero {
                    return Err(format!(
                        "slab {i} of chunk {chunk:#x}: never carved but its metadata is written"
                    ));
                }
                nc += 1;
            }
            for i in 0..carved {
                let s = self.meta(chunk, i);
                // SAFETY: valid meta; lock held.
                let (state, nfree, pop) = unsafe {
                    let bits = SlabMeta::free_bits(s, self.geo.words);
                    let mut pop = 0;
                    for w in 0..self.geo.words {
                        let word = *bits.add(w);
                        let valid = (ips - w * 64).min(64);
                        if valid < 64 && word >> valid != 0 {
                            return Err(format!(
                                "slab {i} of chunk {chunk:#x}: bit beyond items_per_slab"
                            ));
                        }
                        pop += word.count_ones() as usize;
                    }
                    ((*s).state, (*s).nfree as usize, pop)
                };
                if nfree != pop {
                    return Err(format!(
                        "slab {i} of chunk {chunk:#x}: nfree {nfree} != popcount {pop}"
                    ));
                }
                let ok = match state {
                    SlabState::Clean => {
                        nc += 1;
                        nfree == ips
                    }
                    SlabState::Lazy => {
                        nl += 1;
                        nfree == ips
                    }
                    SlabState::Free => {
                        nf += 1;
                        free_items += nfree;
                        nfree == ips
                    }
                    SlabState::Partial => {
                        np += 1;
                        free_items += nfree;
                        nfree > 0 && nfree < ips
                    }
                    SlabState::Full => {
                        nfull += 1;
                        nfree == 0
                    }
                };
                if !ok {
                    return Err(format!(
                        "slab {i} of chunk {chunk:#x}: state {state:?} with nfree {nfree}"
                    ));
                }
            }
            // SAFETY: valid chunk header; lock held.
            c = unsafe { (*c).next };
        }
        let count_list = |mut s: *mut SlabMeta| {
            let mut n = 0;
            while !s.is_null() {
                n += 1;
                // SAFETY: list of valid metas; lock held.
                s = unsafe { (*s).next };
            }
            n
        };
        let lists = (
            count_list(g.partial),
            count_list(g.free),
            count_list(g.clean),
            count_list(g.releasing),
        );
        if count_list(g.lazy) != g.nlazy || nl != g.nlazy {
            return Err(format!(
                "lazy list {} / counter {} disagree with states ({nl})",
                count_list(g.lazy),
                g.nlazy
            ));
        }
        if lists != (np, nf, g.nclean, g.nreleasing)
            || (
                g.npartial,
                g.nfree_slabs,
                g.nclean + g.uncarved + g.nreleasing + g.ninflight,
                g.nfull,
            ) != (np, nf, nc, nfull)
        {
            return Err(format!(
                "slab lists {lists:?} / counters {:?} disagree with states {:?}",
                (g.npartial, g.nfree_slabs, g.nclean, g.nreleasing, g.nfull),
                (np, nf, nc, nfull)
            ));
        }
        let mut last = g.releasing;
        // SAFETY: list of valid metas; lock held.
        unsafe {
            while !last.is_null() && !(*last).next.is_null() {
                last = (*last).next;
            }
        }
        if last != g.releasing_tail {
            return Err("releasing list: tail is not the last slab".into());
        }
        let mut last = g.lazy;
        // SAFETY: list of valid metas; lock held.
        unsafe {
            while !last.is_null() && !(*last).next.is_null() {
                last = (*last).next;
            }
        }
        if last != g.lazy_tail {
            return Err("lazy list: tail is not the last slab".into());
        }
        if nchunks != g.nchunks || g.backed_slabs != np + nf + nfull || g.free_items != free_items {
            return Err(format!(
                "keg counters: chunks {} (walked {nchunks}), backed {} (walked {}), free items {} (walked {free_items})",
                g.nchunks,
                g.backed_slabs,
                np + nf + nfull,
                g.free_items
            ));
        }
        if g.backed_slabs * ips != g.items_out + g.free_items {
            return Err(format!(
                "backed_slabs*items_per_slab {} != items_out {} + free_items {}",
                g.backed_slabs * ips,
                g.items_out,
                g.free_items
            ));
        }
        drop(g);
        Ok(self.counts())
    }

    /// Items handed out of the keg and not yet returned.
    pub(crate) fn items_out(&self) -> usize {
        lock(&self.inner).items_out
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
            // SAFETY: `c` is a valid chunk header; we read `next` before the chunk is freed, and
            // nothing uses the chunk any more (no items out).
            unsafe {
                let next = (*c).next;
                self.arena.free_chunk(NonNull::new_unchecked(c as *mut u8));
                os::sub_metadata(touched);
                c = next;
            }
        }
        *g = KegInner::empty(g.released_bytes + backed as u64);
        Ok(())
    }

    /// Checked mode: marks the item live (handed to a user). Returns false if it already was.
    pub(crate) fn mark_live(&self, loc: ItemLoc) -> bool {
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
    /// free or a pointer never handed out).
    pub(crate) fn mark_dead(&self, loc: ItemLoc) -> bool {
        let (w, b) = (loc.index / 64, loc.index % 64);
        // SAFETY: as in `mark_live`.
        let word =
            unsafe { &*(SlabMeta::live_bits(loc.slab, self.geo.words).add(w) as *const AtomicU64) };
        // AcqRel: pairs with `mark_live`'s `fetch_or` (see there).
        word.fetch_and(!(1 << b), Ordering::AcqRel) & (1 << b) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Takes `items` back with `fini` run on each: slabs emptied go back to the OS at once with
    /// `release`, else onto the free list. Returns the bytes released.
    fn take_back(
        k: &Keg,
        items: &[*mut u8],
        release: bool,
        fini: impl FnMut(*mut u8),
        invalid: impl FnMut(*mut u8, InvalidKind),
    ) -> usize {
        let mut d = if release {
            Disposal::release()
        } else {
            Disposal::keep()
        };
        k.take_back(items, &mut d, Some(fini), invalid).bytes
    }

    #[test]
    fn import_release_reclaim() {
        let k = Keg::new(64, 0).unwrap();
        let mut v = vec![ptr::null_mut(); 1000];
        assert_eq!(k.import(&mut v).unwrap(), 1000);
        let c = k.validate().unwrap();
        assert_eq!(c.items_out, 1000);
        assert_eq!(c.backed_slabs, 1000usize.div_ceil(64));
        let mut sorted = v.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 1000, "no item handed out twice");
        for p in &v {
            assert!(k.owns(*p as usize));
            // SAFETY: the item is ours, 64 bytes.
            unsafe { p.write_bytes(0x5a, 64) };
        }
        let mut bad = vec![];
        take_back(&k, &v, false, |_| {}, |p, kind| bad.push((p, kind)));
        assert!(bad.is_empty());
        let c = k.validate().unwrap();
        assert_eq!(c.items_out, 0);
        assert_eq!(c.free_slabs, 16);
        assert_eq!(k.release_free(0, &mut Disposal::keep()), 16 * 4096);
        let c = k.validate().unwrap();
        assert_eq!((c.free_slabs, c.backed_slabs), (0, 0));
        k.destroy().unwrap();
    }

    #[test]
    fn lazy_slabs_are_reused_first_and_decay_oldest_first() {
        let ps = os::page_size();
        let k = Keg::new(ps, 0).unwrap();
        let mut v = vec![ptr::null_mut(); 8];
        assert_eq!(k.import(&mut v).unwrap(), 8);
        for p in &v {
            // SAFETY: pages of ours.
            unsafe { p.write_bytes(7, ps) };
        }
        take_back(&k, &v[..4], false, |_| {}, |_, _| panic!("invalid"));
        // Fake time: the first four go lazy at t = 1000 ms, the next four at t = 1600 ms.
        assert_eq!(k.lazy_keep(0, 1000, true), 4 * ps);
        take_back(&k, &v[4..], false, |_| {}, |_, _| panic!("invalid"));
        assert_eq!(k.lazy_keep(0, 1600, true), 4 * ps);
        let c = k.validate().unwrap();
        assert_eq!((c.lazy_slabs, c.free_slabs, c.backed_slabs), (8, 0, 0));
        assert_eq!(c.lazy_freed_bytes, 8 * ps as u64);
        // Allocation takes the newest lazy slabs first (no fault unless the kernel took them).
        let mut w = vec![ptr::null_mut(); 2];
        k.import(&mut w).unwrap();
        let c = k.validate().unwrap();
        assert_eq!((c.lazy_slabs, c.lazy_reused_bytes), (6, 2 * ps as u64));
        assert!(w.iter().all(|p| v[4..].contains(p)), "newest first");
        // Decay with fake time and a 1000 ms delay: nothing at 1999, the older four at 2000,
        // the rest at 2600.
        assert_eq!(k.purge_lazy(Some((1999, 1000))), 0);
        assert_eq!(k.purge_lazy(Some((2000, 1000))), 4 * ps);
        assert_eq!(k.validate().unwrap().lazy_slabs, 2);
        assert_eq!(k.purge_lazy(Some((2600, 1000))), 2 * ps);
        let c = k.validate().unwrap();
        assert_eq!((c.lazy_slabs, c.clean_slabs >= 6), (0, true));
        // A free into a lazily freed slab is a double free; a purge without delay takes all.
        take_back(&k, &w, false, |_| {}, |_, _| panic!("invalid"));
        k.lazy_keep(0, 3000, true);
        let mut bad = vec![];
        take_back(&k, &w[..1], false, |_| {}, |p, kind| bad.push((p, kind)));
        assert_eq!(bad, vec![(w[0], InvalidKind::DoubleFree)]);
        assert_eq!(k.purge_lazy(None), 2 * ps);
        k.validate().unwrap();
        k.destroy().unwrap();
    }

    #[test]
    fn settling_slabs_are_offered_after_the_settle_delay_unless_reused() {
        let ps = os::page_size();
        let k = Keg::new(ps, 0).unwrap();
        let mut v = vec![ptr::null_mut(); 6];
        k.import(&mut v).unwrap();
        for p in &v {
            // SAFETY: pages of ours.
            unsafe { p.write_bytes(9, ps) };
        }
        take_back(&k, &v, false, |_| {}, |_, _| panic!("invalid"));
        // Given up at t = 500 ms, not offered yet (settle 100 ms).
        assert_eq!(k.lazy_keep(0, 500, false), 6 * ps);
        assert_eq!(k.counts().lazy_freed_bytes, 0, "no MADV_FREE yet");
        // Reused within the settle delay: taken back without any system call.
        let mut w = vec![ptr::null_mut(); 2];
        k.import(&mut w).unwrap();
        assert_eq!(k.advise_lazy(599, 100), 0, "still settling");
        assert_eq!(k.advise_lazy(600, 100), 4 * ps);
        assert_eq!(k.advise_lazy(700, 100), 0, "offered once");
        let c = k.validate().unwrap();
        assert_eq!((c.lazy_slabs, c.lazy_freed_bytes), (4, 4 * ps as u64));
        // The decay counts from when the slabs were given up.
        assert_eq!(k.purge_lazy(Some((1499, 1000))), 0);
        assert_eq!(k.purge_lazy(Some((1500, 1000))), 4 * ps);
        take_back(&k, &w, false, |_| {}, |_, _| panic!("invalid"));
        k.lazy_keep(0, 2000, false);
        assert_eq!(
            k.purge_lazy(None),
            2 * ps,
            "pressure: settling slabs go too"
        );
        k.validate().unwrap();
        k.destroy().unwrap();
    }

    #[test]
    fn invalid_pointers_are_reported_not_applied() {
        let k = Keg::new(48, 0).unwrap();
        let other = Keg::new(48, 0).unwrap();
        let mut v = [ptr::null_mut(); 4];
        k.import(&mut v).unwrap();
        let mut w = [ptr::null_mut(); 1];
        other.import(&mut w).unwrap();
        let mut x = 0u64;
        let bogus = [
            (&mut x as *mut u64).cast::<u8>(),
            w[0],
            v[0].wrapping_add(8),
            (v[0] as usize & !(CHUNK_SIZE - 1)) as *mut u8,
        ];
        let mut bad = vec![];
        take_back(&k, &bogus, false, |_| {}, |p, kind| bad.push((p, kind)));
        assert_eq!(
            bad.iter().map(|b| b.1).collect::<Vec<_>>(),
            vec![
                InvalidKind::NotInZone,
                InvalidKind::NotInZone,
                InvalidKind::Misaligned,
                InvalidKind::NotAnItem
            ]
        );
        take_back(&k, &v[..1], false, |_| {}, |_, _| panic!("valid"));
        let mut bad = vec![];
        take_back(&k, &v[..1], false, |_| {}, |p, kind| bad.push((p, kind)));
        assert_eq!(bad, vec![(v[0], InvalidKind::DoubleFree)]);
        k.validate().unwrap();
        assert_eq!(
            k.destroy(),
            Err(3),
            "destroy with live items fails and changes nothing"
        );
        k.validate().unwrap();
        take_back(&k, &v[1..], false, |_| {}, |_, _| panic!("valid"));
        take_back(&other, &w, false, |_| {}, |_, _| panic!("valid"));
        k.destroy().unwrap();
        other.destroy().unwrap();
    }

    #[test]
    fn kegs_made_one_after_another_start_their_slabs_on_different_pages() {
        let colours: std::collections::HashSet<usize> =
            (1..=COLOURS as u64).map(|i| colour_of(2 * i)).collect();
        assert_eq!(
            colours.len(),
            COLOURS,
            "consecutive tags: every colour once"
        );
        assert!((0..1000u64).all(|i| colour_of(2 * i) < COLOURS));
        let a = Keg::new(64, 0).unwrap();
        let b = Keg::new(64, 0).unwrap();
        assert_ne!(a.geo.first_slab, b.geo.first_slab);
        assert_eq!(
            b.geo.first_slab - Geometry::for_item(64).first_slab,
            colour_of(b.tag) * os::page_size()
        );
        a.destroy().unwrap();
        b.destroy().unwrap();
    }

    #[test]
    fn slab_metadata_is_written_as_slabs_are_first_used() {
        let ps = os::page_size();
        let resident = |addr: usize, len: usize| {
            let mut vec = vec![0u8; len.div_ceil(ps)];
            // SAFETY: a committed chunk of ours (page aligned); one byte per page.
            let r = unsafe { libc::mincore(addr as *mut _, len, vec.as_mut_ptr()) };
            assert_eq!(r, 0);
            vec.iter().filter(|&&b| b & 1 != 0).count()
        };
        // 16-byte items: 4 KiB slabs, about a thousand descriptors of 48 bytes (12 pages).
        let k = Keg::new(16, 0).unwrap();
        let g = k.geo;
        assert!(g.first_slab >= 8 * ps, "{g:?}");
        let mut v = vec![ptr::null_mut(); 3 * g.items_per_slab];
        assert_eq!(k.import(&mut v).unwrap(), v.len());
        let chunk = v[0] as usize & !(CHUNK_SIZE - 1);
        assert_eq!(
            resident(chunk, g.first_slab),
            1,
            "three slabs: one page of metadata"
        );
        let c = k.validate().unwrap();
        assert_eq!(c.backed_slabs, 3);
        assert_eq!(
            c.clean_slabs,
            g.slabs_per_chunk - 3,
            "never-used slabs count as clean"
        );
        // A pointer into a slab never carved was never handed out.
        let never = (chunk + g.first_slab + 10 * g.slab_size) as *mut u8;
        let mut bad = vec![];
        take_back(&k, &[never], false, |_| {}, |p, kind| bad.push((p, kind)));
        assert_eq!(bad, vec![(never, InvalidKind::NotAnItem)]);
        k.validate().unwrap();
        // Given back and reused: clean slabs are taken before new ones are carved.
        take_back(&k, &v, false, |_| {}, |_, _| panic!("valid"));
        assert_eq!(k.release_free(0, &mut Disposal::keep()), 3 * g.slab_size);
        assert_eq!(k.import(&mut v).unwrap(), v.len());
        let mut bases: Vec<usize> = v.iter().map(|&p| p as usize & !(g.slab_size - 1)).collect();
        bases.sort_unstable();
        bases.dedup();
        assert!(bases
            .iter()
            .all(|&b| b < chunk + g.first_slab + 3 * g.slab_size));
        take_back(&k, &v, false, |_| {}, |_, _| panic!("valid"));
        // Every slab of the chunk, then the next chunk.
        let mut all = vec![ptr::null_mut(); (g.slabs_per_chunk + 1) * g.items_per_slab];
        assert_eq!(k.import(&mut all).unwrap(), all.len());
        let c = k.validate().unwrap();
        assert_eq!((c.chunks, c.backed_slabs), (2, g.slabs_per_chunk + 1));
        let meta_pages = os::round_up(CHUNK_HEADER + g.slabs_per_chunk * g.meta_size, ps) / ps;
        assert_eq!(
            resident(chunk, g.first_slab),
            meta_pages,
            "every descriptor written, the colour's pages never touched"
        );
        take_back(&k, &all, false, |_| {}, |_, _| panic!("valid"));
        assert_eq!(
            k.release_free(0, &mut Disposal::keep()),
            (g.slabs_per_chunk + 1) * g.slab_size
        );
        k.validate().unwrap();
        k.destroy().unwrap();
    }

    #[test]
    fn free_slabs_beyond_the_cap_go_back_when_emptied() {
        let k = Keg::new(256, 0).unwrap().keep_free_at_most(2);
        let g = k.geo;
        let mut v = vec![ptr::null_mut(); 5 * g.items_per_slab];
        assert_eq!(k.import(&mut v).unwrap(), v.len());
        for p in &v {
            // SAFETY: our item of 256 bytes: every page of the five slabs becomes resident.
            unsafe { p.write_bytes(1, 256) };
        }
        let before = k.counts().released_bytes;
        let r = k.take_back(
            &v,
            &mut Disposal::keep(),
            None::<fn(*mut u8)>,
            |_, _| panic!(),
        );
        assert_eq!(r.valid, v.len());
        assert_eq!(r.bytes, 3 * g.slab_size, "all but two slabs given back");
        let c = k.validate().unwrap();
        assert_eq!((c.free_slabs, c.backed_slabs), (2, 2));
        assert_eq!(c.released_bytes - before, 3 * g.slab_size as u64);
        // Without a cap everything stays backed until a reclaim.
        let k2 = Keg::new(256, 0).unwrap();
        k2.import(&mut v).unwrap();
        let r = k2.take_back(
            &v,
            &mut Disposal::keep(),
            None::<fn(*mut u8)>,
            |_, _| panic!(),
        );
        assert_eq!((r.bytes, k2.validate().unwrap().free_slabs), (0, 5));
        k.destroy().unwrap();
        k2.destroy().unwrap();
    }

    #[test]
    fn release_empty_gives_pages_back_at_once() {
        let k = Keg::new(4096, 0).unwrap();
        let mut v = [ptr::null_mut(); 8];
        k.import(&mut v).unwrap();
        assert_eq!(take_back(&k, &v, true, |_| {}, |_, _| panic!()), 8 * 4096);
        let c = k.validate().unwrap();
        assert_eq!((c.backed_slabs, c.clean_slabs > 0), (0, true));
        k.destroy().unwrap();
    }
}

#[cfg(test)]
mod bulk_tests {
    //! The bulk release path (`take_back`'s cursor and fast path) and the release pipeline.
    use super::*;
    use crate::release::Session;

    /// Takes `items` back with `fini` run on each: slabs emptied go back to the OS at once with
    /// `release`, else onto the free list. Returns the bytes released.
    fn take_back(
        k: &Keg,
        items: &[*mut u8],
        release: bool,
        fini: impl FnMut(*mut u8),
        invalid: impl FnMut(*mut u8, InvalidKind),
    ) -> usize {
        let mut d = if release {
            Disposal::release()
        } else {
            Disposal::keep()
        };
        k.take_back(items, &mut d, Some(fini), invalid).bytes
    }

    fn import_n(k: &Keg, n: usize) -> Vec<*mut u8> {
        let mut v = vec![ptr::null_mut(); n];
        let mut got = 0;
        while got < n {
            got += k.import(&mut v[got..]).unwrap();
        }
        v
    }

    /// Pages of `[addr, addr + len)` resident in memory.
    fn resident_pages(addr: usize, len: usize) -> usize {
        let ps = os::page_size();
        let mut vec = vec![0u8; len.div_ceil(ps)];
        // SAFETY: the range is mapped memory of ours (page aligned); `vec` has one byte per page.
        let r = unsafe { libc::mincore(addr as *mut _, len, vec.as_mut_ptr()) };
        assert_eq!(r, 0);
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    fn no_invalid(p: *mut u8, k: InvalidKind) {
        panic!("unexpected invalid pointer {p:?}: {k:?}")
    }

    #[test]
    fn pipeline_release_empties_slabs_and_gives_pages_back() {
        let k = Keg::new(64, 0).unwrap();
        let v = import_n(&k, 64 * 40);
        for p in &v {
            // SAFETY: ours, 64 bytes: every page of the 40 slabs becomes resident.
            unsafe { p.write_bytes(0xa5, 64) };
        }
        let slabs: Vec<usize> = {
            let mut s: Vec<usize> = v.iter().map(|&p| p as usize & !4095).collect();
            s.sort();
            s.dedup();
            s
        };
        assert_eq!(slabs.len(), 40);
        assert!(slabs.iter().all(|&s| resident_pages(s, 4096) == 1));
        let mut sess = Session::begin_wait(true);
        // In bucket-sized batches, in reverse (as a drain does).
        let mut rev = v.clone();
        rev.reverse();
        let mut valid = 0;
        for c in rev.chunks(254) {
            let r = k.take_back(
                c,
                &mut Disposal::reclaim(&mut sess, false),
                None::<fn(*mut u8)>,
                no_invalid,
            );
            assert_eq!(r.bytes, 0, "pipeline bytes are counted by the session");
            valid += r.valid;
        }
        assert_eq!(valid, v.len());
        let c = k.validate().unwrap();
        assert_eq!(
            (c.items_out, c.backed_slabs, c.releasing_slabs, c.free_slabs),
            (0, 0, 40, 0),
            "emptied slabs wait on `releasing`, not backed, not allocatable"
        );
        assert_eq!(sess.finish(), 40 * 4096);
        let c = k.validate().unwrap();
        assert_eq!((c.releasing_slabs, c.released_bytes), (0, 40 * 4096));
        assert!(c.clean_slabs >= 40);
        for &s in &slabs {
            assert_eq!(resident_pages(s, 4096), 0, "slab {s:#x} still resident");
        }
        k.destroy().unwrap();
    }

    #[test]
    fn pipeline_keeps_the_reserve_and_inactive_session_keeps_everything() {
        let k = Keg::new(64, 3).unwrap();
        let v = import_n(&k, 64 * 10);
        let mut sess = Session::begin_wait(true);
        k.take_back(
            &v[..64 * 5],
            &mut Disposal::reclaim(&mut sess, false),
            None::<fn(*mut u8)>,
            no_invalid,
        );
        let c = k.validate().unwrap();
        assert_eq!((c.free_slabs, c.releasing_slabs), (3, 2));
        assert_eq!(sess.finish(), 2 * 4096);
        // An inactive session means Keep.
        let mut off = Session::inactive();
        k.take_back(
            &v[64 * 5..],
            &mut Disposal::reclaim(&mut off, false),
            None::<fn(*mut u8)>,
            no_invalid,
        );
        let c = k.validate().unwrap();
        assert_eq!((c.free_slabs, c.releasing_slabs, c.backed_slabs), (8, 0, 8));
        // reclaim_in through a session: all but the reserve, counted at the end.
        let mut sess = Session::begin_wait(true);
        assert_eq!(
            k.release_free(k.reserve_slabs(), &mut Disposal::reclaim(&mut sess, false)),
            0
        );
        assert_eq!(k.validate().unwrap().releasing_slabs, 5);
        assert_eq!(sess.finish(), 5 * 4096);
        let c = k.validate().unwrap();
        assert_eq!((c.free_slabs, c.backed_slabs), (3, 3));
        k.destroy().unwrap();
    }

    #[test]
    fn bad_pointers_inside_a_bulk_release_are_reported_not_applied() {
        let k = Keg::new(64, 0).unwrap();
        let other = Keg::new(64, 0).unwrap();
        let v = import_n(&k, 64 * 3);
        let w = import_n(&other, 1);
        // Free slab 2 entirely first: its items are double frees afterwards.
        take_back(&k, &v[128..], false, |_| {}, no_invalid);
        let mut x = 0u64;
        let batch = [
            v[0],
            v[1],
            v[1],                 // double free inside the batch, in the cached word
            v[2].wrapping_add(8), // misaligned, inside the cached slab
            v[3],
            v[130], // already free (whole free slab)
            w[0],   // another keg's item
            (&mut x as *mut u64).cast(),
            v[64], // next slab
            v[0],  // double free, back in the first slab
            v[65],
            (v[0] as usize & !(CHUNK_SIZE - 1)) as *mut u8, // the chunk header
            v[66],
        ];
        let mut bad = vec![];
        let mut seen = vec![];
        let mut sess = Session::begin_wait(true);
        let r = k.take_back(
            &batch,
            &mut Disposal::reclaim(&mut sess, false),
            Some(|p| seen.push(p)),
            |p, kind| bad.push((p, kind)),
        );
        assert_eq!(sess.finish(), 0);
        assert_eq!(r.valid, 6);
        assert_eq!(
            seen,
            vec![v[0], v[1], v[3], v[64], v[65], v[66]],
            "fini on valid items only"
        );
        assert_eq!(
            bad,
            vec![
                (v[1], InvalidKind::DoubleFree),
                (v[2].wrapping_add(8), InvalidKind::Misaligned),
                (v[130], InvalidKind::DoubleFree),
                (w[0], InvalidKind::NotInZone),
                ((&mut x as *mut u64).cast(), InvalidKind::NotInZone),
                (v[0], InvalidKind::DoubleFree),
                (
                    (v[0] as usize & !(CHUNK_SIZE - 1)) as *mut u8,
                    InvalidKind::NotAnItem
                ),
            ]
        );
        let c = k.validate().unwrap();
        assert_eq!(c.items_out, 128 - 6);
        // The same batch without fini (the fast path) reports the same and applies nothing.
        let mut bad2 = vec![];
        let r = k.take_back(
            &batch,
            &mut Disposal::keep(),
            None::<fn(*mut u8)>,
            |p, kind| bad2.push((p, kind)),
        );
        assert_eq!(r.valid, 0);
        assert_eq!(bad2.len(), batch.len());
        assert!(bad2
            .iter()
            .all(|b| b.1 != InvalidKind::NotAnItem || b.0 == batch[11]));
        assert_eq!(k.validate().unwrap().items_out, 128 - 6);
        take_back(&k, &v[..128], false, |_| {}, |_, _| {});
        take_back(&other, &w, false, |_| {}, no_invalid);
        assert_eq!(k.validate().unwrap().items_out, 0);
        k.destroy().unwrap();
        other.destroy().unwrap();
    }

    /// Random batches (duplicates, already free items, misaligned pointers, several slabs and
    /// bitmap words, item sizes with and without a fast path) against a shadow set.
    #[test]
    fn bulk_release_matches_a_shadow_model() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for &size in &[16usize, 64, 96, 256, 4096] {
            let k = Keg::new(size, 1).unwrap();
            let mut out: Vec<*mut u8> = import_n(&k, 3000);
            let mut free: Vec<*mut u8> = vec![];
            for round in 0..60 {
                let mut batch = vec![];
                let n = (next() % 400) as usize;
                for _ in 0..n {
                    let r = next() % 100;
                    if r < 80 && !out.is_empty() {
                        let i = (next() as usize) % out.len();
                        batch.push(out.swap_remove(i));
                    } else if r < 90 && !batch.is_empty() {
                        batch.push(batch[(next() as usize) % batch.len()]);
                    } else if r < 95 && !free.is_empty() {
                        batch.push(free[(next() as usize) % free.len()]);
                    } else if !batch.is_empty() {
                        batch.push(batch[0].wrapping_add(8));
                    }
                }
                if round % 3 == 0 {
                    batch.sort();
                }
                // Expected: the first occurrence of an item taken out of `out` is valid.
                let mut seen = std::collections::HashSet::new();
                let mut expect_valid = 0;
                let mut expect_bad = 0;
                let taken: std::collections::HashSet<*mut u8> = batch
                    .iter()
                    .copied()
                    .filter(|p| !free.contains(p) && (*p as usize).is_multiple_of(8))
                    .collect();
                for &p in &batch {
                    if taken.contains(&p) && k.locate(p as usize).is_ok() && seen.insert(p) {
                        expect_valid += 1;
                    } else {
                        expect_bad += 1;
                    }
                }
                let mut bad = 0;
                let mut sess = Session::begin_wait(round % 2 == 0);
                let mut mode = match round % 3 {
                    0 => Disposal::reclaim(&mut sess, false),
                    1 => Disposal::keep(),
                    _ => Disposal::release(),
                };
                let r = k.take_back(&batch, &mut mode, None::<fn(*mut u8)>, |_, _| bad += 1);
                sess.finish();
                assert_eq!(
                    (r.valid, bad),
                    (expect_valid, expect_bad),
                    "size {size} round {round}"
                );
                free.extend(seen);
                k.validate().unwrap();
                // Give some back out (the keg may hand out any free item, also ones in `free`).
                let again = import_n(&k, (next() % 200) as usize);
                for p in again {
                    if let Some(i) = free.iter().position(|&f| f == p) {
                        free.swap_remove(i);
                    }
                    out.push(p);
                }
                let c = k.validate().unwrap();
                assert_eq!(c.items_out, out.len(), "size {size} round {round}");
            }
            take_back(&k, &out, false, |_| {}, no_invalid);
            k.destroy().unwrap();
        }
    }

    /// Allocation goes on while another thread releases through the pipeline: a slab is never
    /// handed out while its pages are being given back (its contents would turn to zeros).
    #[test]
    fn concurrent_alloc_during_pipeline_release() {
        let k = std::sync::Arc::new(Keg::new(64, 0).unwrap());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let user = {
            let (k, stop) = (k.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rounds = 0u64;
                while !stop.load(Ordering::Relaxed) || rounds < 50 {
                    let v = import_n(&k, 300);
                    for (i, p) in v.iter().enumerate() {
                        // SAFETY: ours, 64 bytes.
                        unsafe { p.write_bytes(i as u8 | 1, 64) };
                    }
                    std::thread::yield_now();
                    for (i, p) in v.iter().enumerate() {
                        for b in 0..64 {
                            // SAFETY: ours, 64 bytes.
                            let got = unsafe { *p.add(b) };
                            assert_eq!(got, i as u8 | 1, "item {p:?} changed under its owner");
                        }
                    }
                    take_back(&k, &v, false, |_| {}, no_invalid);
                    rounds += 1;
                }
            })
        };
        for _ in 0..30 {
            let v = import_n(&k, 64 * 200);
            for p in &v {
                // SAFETY: ours, 64 bytes.
                unsafe { p.write_bytes(0xee, 64) };
            }
            let mut sess = Session::begin_wait(false);
            for c in v.chunks(254) {
                k.take_back(
                    c,
                    &mut Disposal::reclaim(&mut sess, false),
                    None::<fn(*mut u8)>,
                    no_invalid,
                );
            }
            k.release_free(0, &mut Disposal::reclaim(&mut sess, false));
            sess.finish();
            k.validate().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        user.join().unwrap();
        let c = k.validate().unwrap();
        assert_eq!((c.items_out, c.releasing_slabs), (0, 0));
        k.destroy().unwrap();
    }

    /// No `madvise` under the keg lock (review: the squeeze's give-back and the synchronous
    /// reclaim ran it with the lock held, stalling every allocation from the keg meanwhile).
    /// Each give-back here is slowed to 100 ms; another thread must still get the lock at once.
    #[test]
    fn pages_go_back_with_the_keg_lock_dropped() {
        let k = Keg::new(4096, 0).unwrap();
        let longest_wait = |give_back: &dyn Fn()| {
            let done = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                let waiter = s.spawn(|| {
                    let mut worst = std::time::Duration::ZERO;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        let t = std::time::Instant::now();
                        let _ = k.counts(); // takes the keg lock
                        worst = worst.max(t.elapsed());
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    worst
                });
                std::thread::sleep(std::time::Duration::from_millis(20));
                crate::os::fault::set_release_delay_us(100_000);
                give_back();
                crate::os::fault::set_release_delay_us(0);
                done.store(true, std::sync::atomic::Ordering::Relaxed);
                waiter.join().unwrap()
            })
        };
        // The squeeze: slabs emptied by a release in give-back mode.
        let v = import_n(&k, 8);
        let w = longest_wait(&|| {
            let r = k.take_back(
                &v,
                &mut Disposal::release(),
                None::<fn(*mut u8)>,
                |p, kind| panic!("{p:?}: {kind:?}"),
            );
            assert_eq!(r.bytes, 8 * 4096);
        });
        assert!(
            w < std::time::Duration::from_millis(50),
            "lock held {w:?} during madvise"
        );
        // The synchronous reclaim of free slabs (every other slab, so one madvise per slab).
        let v = import_n(&k, 16);
        let keep: Vec<_> = v.iter().step_by(2).copied().collect();
        let drop_: Vec<_> = v.iter().skip(1).step_by(2).copied().collect();
        take_back(
            &k,
            &drop_,
            false,
            |_| {},
            |p, kind| panic!("{p:?}: {kind:?}"),
        );
        let w = longest_wait(&|| assert_eq!(k.release_free(0, &mut Disposal::keep()), 8 * 4096));
        assert!(
            w < std::time::Duration::from_millis(50),
            "lock held {w:?} during madvise"
        );
        take_back(
            &k,
            &keep,
            false,
            |_| {},
            |p, kind| panic!("{p:?}: {kind:?}"),
        );
        k.release_free(0, &mut Disposal::keep());
        let c = k.validate().unwrap();
        assert_eq!((c.items_out, c.backed_slabs), (0, 0));
        k.destroy().unwrap();
    }

    /// More kegs than a session tracks at once, and far more runs than the ring holds (every
    /// other slab of a chunk: one-page runs, so runs also find the ring full and wait in the
    /// session's overflow until the owner drops the keg lock).
    #[test]
    fn many_kegs_and_fragmented_runs() {
        let kegs: Vec<Keg> = (0..20).map(|_| Keg::new(4096, 0).unwrap()).collect();
        let items: Vec<Vec<*mut u8>> = kegs.iter().map(|k| import_n(k, 600)).collect();
        for v in &items {
            for p in v {
                // SAFETY: ours, 4096 bytes.
                unsafe { p.write_bytes(1, 4096) };
            }
        }
        let mut sess = Session::begin_wait(true);
        for (k, v) in kegs.iter().zip(&items) {
            let odd: Vec<*mut u8> = v.iter().copied().skip(1).step_by(2).collect();
            k.take_back(
                &odd,
                &mut Disposal::reclaim(&mut sess, false),
                None::<fn(*mut u8)>,
                no_invalid,
            );
        }
        // The session tracks 16 kegs: the other 4 kept their emptied slabs on the free list...
        let waiting: Vec<usize> = kegs.iter().map(|k| k.counts().free_slabs).collect();
        assert_eq!(
            waiting.iter().filter(|&&n| n == 300).count(),
            4,
            "{waiting:?}"
        );
        assert_eq!(
            waiting.iter().filter(|&&n| n == 0).count(),
            16,
            "{waiting:?}"
        );
        // ... which the reclaim's final pass hands over (completing the first 16 to make room).
        for k in &kegs {
            assert_eq!(
                k.release_free(k.reserve_slabs(), &mut Disposal::reclaim(&mut sess, false)),
                0
            );
        }
        assert_eq!(sess.finish(), 20 * 300 * 4096);
        for (k, v) in kegs.iter().zip(&items) {
            let c = k.validate().unwrap();
            assert_eq!(
                (c.items_out, c.releasing_slabs, c.backed_slabs),
                (300, 0, 300)
            );
            for p in v.iter().skip(1).step_by(2) {
                assert_eq!(resident_pages(*p as usize, 4096), 0);
            }
            for p in v.iter().step_by(2) {
                assert_eq!(
                    resident_pages(*p as usize, 4096),
                    1,
                    "a live item was released"
                );
            }
            take_back(
                &k,
                &v.iter().copied().step_by(2).collect::<Vec<_>>(),
                false,
                |_| {},
                no_invalid,
            );
            k.destroy().unwrap();
        }
    }
}
