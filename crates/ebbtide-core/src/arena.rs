//! The arena: one reservation of address space, cut into 4 MiB chunks that kegs own.
//!
//! ```text
//!  arena base (CHUNK_SIZE aligned)                                         base + len
//!  | chunk map | descriptor span | chunk k | chunk k+1 | ...            | chunk n-1 |
//!                 | 256 KiB per chunk: header, slab descriptors |   ^ owned by a keg: slabs only
//!  chunk map: the arena's first chunk(s), one 32-byte entry per chunk (the map's own entries
//!  read 0), readable for every chunk (committed at once, its pages zero-filled as touched):
//!    tag word:
//!      0            never handed out (above the bump pointer)
//!      even tag     owned by the keg with that tag (tags are never reused)
//!      odd          free, value = (next free chunk index << 1) | 1
//!    hint word: the owning keg's hint (its zone's per-CPU stacks), written before the tag;
//!      0 for a chunk never handed out or given back (cleared before the free mark)
//!    start word: the address of the chunk's first slab (the owning keg's `first_slab` bytes
//!      in), written before the tag; 0 for a chunk never handed out or given back
//! ```
//!
//! **The start word** spares the malloc's `free`, which reads the entry for the tag anyway, the
//! range test's arithmetic: `p - start` is `p`'s offset from the chunk's first slab, compared
//! with the slabs' length as one word ([`crate::zone::FastConsts`]) — no chunk mask, no packed
//! offset to load and shift (docs/design/free-owner-check.md). It is meaningful only with the
//! tag it was read with: the tag names the keg, the start word where that keg's slabs begin in
//! this chunk.
//!
//! **The hint** is the one word a `free` needs after the pointer to reach the stack it pushes
//! onto: the owning zone's per-CPU stacks ([`crate::zone::FastConsts::stacks_hint`]). It sits
//! beside the tag in the entry, so [`owner_entry`] reads both with the one load that starts at
//! the pointer; without it the stacks' address came from a second table indexed by the tag, one
//! more load between the pointer and the store (docs/design/free-owner-check.md). A
//! keg's hint is fixed before its first chunk and written before the tag (which is stored with
//! Release), so a reader that saw the tag with Acquire reads that keg's hint: a later owner's
//! (or 0) only if the chunk was freed meanwhile, which only the destruction of the owning zone does,
//! after which a free into it is the caller's error anyway. The fast path reads the hint only
//! after its tag test (`FastConsts::free_fast`); a given-back chunk's hint is cleared all the
//! same, so that no reader of the hint alone could take it for a later zone's (a zone made later
//! may get a destroyed zone's stacks' address).
//!
//! **The descriptor span** (docs/design/side-descriptors.md): every chunk has
//! [`DESC_STRIDE`] bytes of address space in a span after the map, at
//! [`Arena::desc_of`] (the chunk's offset in the arena divided by 16), for its keg's header and
//! slab descriptors; a chunk holds slabs only. So every 2 MiB of a huge chunk can go back whole
//! (a descriptor in a huge page kept that page from going back but by splitting it: 37–78 ms per
//! GiB given back against 2–3), and no write past an item's end reaches a descriptor. A chunk's
//! area is mapped when the chunk is handed out, as far as its owner's descriptors reach
//! ([`Arena::map_desc_through`], in steps of [`DESC_STEP`], all of them,
//! as a free into a slab never carved reads its descriptor), `MADV_NOHUGEPAGE` (a keg writes its
//! descriptors as it carves: the pages it never writes stay unbacked), its extent in the entry's
//! `mapped` word; a chunk given back has its descriptors given back with it, so they read as
//! zeros to the next owner. An address in the span (or the map) is nobody's: its chunk entries
//! read 0.
//!
//! **The map at the base**: the base and the length alone find an address's entry
//! ([`map_entry_in`]: `off = addr - base`, outside iff `off >= len`, the entry at
//! `base + 32 * (off >> CHUNK_SHIFT)`), so a `free` reads two words, not a third for the map's
//! address: the C entry points are bound by their loads (docs/design/free-owner-check.md). A
//! zone's fast-path constants and the malloc's [`owner_entry`] both keep those two.
//!
//! The chunk map is what makes a `free` of any pointer safe to check in O(1) without touching the
//! pointer's memory: an address outside the arena, or in a chunk another keg owns, is rejected
//! before anything is written. It is also what a future `malloc`-replacement `free(ptr)` needs.
//!
//! **Address space on demand** (docs/design/address-space.md): the arena's span is found once
//! with [`os::reserve_span`] (far from other mappings), then everything of it but the map is unmapped at once; a chunk is
//! mapped ([`os::map_at`]) when first handed out and never unmapped: giving memory back is
//! done per slab with `MADV_DONTNEED` (see [`crate::os`]). Within a chunk too, only what its
//! keg uses is mapped: its descriptors (in the descriptor span) and the pages before its first
//! slab when the chunk is handed out, then the slabs in steps as the keg carves them
//! ([`FIRST_STEP`]s through the first [`CHUNK_STEP`], then [`CHUNK_STEP`]s: [`step_end`];
//! [`Arena::map_through`]; the entry's `mapped` word says how far), so a size class that holds
//! a few items costs its colour pages and first slab in 64 KiB steps of address space, not
//! 4 MiB. So `RLIMIT_AS` counts the chunks in
//! use, not the span: a limit lowered at run time stops the arena where it stands, as it stops
//! glibc's heap. A chunk of the span that another mapping took meanwhile is skipped: its entry
//! stays 0 (nobody's), so a pointer into it goes the way of any foreign pointer. The span is
//! four times the machine's memory and swap ([`span_for`]), which bounds the map (32 bytes per
//! 4 MiB: 1 MiB for 128 GiB) that every chunk, used or not, has an entry in.
//!
//! **Huge pages per chunk** (docs/design/thp-policy.md, docs/design/hugepage-heap.md): a chunk
//! is `MADV_NOHUGEPAGE` unless its keg asks for [`os::Thp::Huge`] when it takes it: a keg
//! touches a chunk sparsely (the header, a slab or two) until it is dense, and on THP `always`
//! each first touch of a 2 MiB stretch would fault in 2 MiB. A dense keg's chunk is mapped
//! whole in one step and `MADV_HUGEPAGE` (the first touch of each half faults in one huge
//! page, on `madvise` hosts too), the mark noted in its entry, so that a release of part of one
//! of its huge pages splits it first ([`Arena::release_pages`]). A
//! chunk freed by a destroyed zone is released whole and goes on the free list for reuse; its
//! next owner's policy is applied to what it has mapped when it is handed out again.

use crate::os::{self, OsError};
use core::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// log2 of the chunk size.
pub(crate) const CHUNK_SHIFT: usize = 22;
/// Bytes per chunk (4 MiB).
pub(crate) const CHUNK_SIZE: usize = 1 << CHUNK_SHIFT;

/// The largest span (a map of 8 MiB).
const SPAN_MAX: usize = 1 << 40;
/// The smallest span chosen by the machine's size (a map of 256 KiB).
const SPAN_MIN: usize = 1 << 35;
/// The least span accepted where a free stretch of the chosen span cannot be found (a tight
/// `ulimit -v` set before start).
const ARENA_MIN: usize = 1 << 25;

/// How far a chunk is mapped for its first `need` bytes: [`FIRST_STEP`]s through the first
/// [`CHUNK_STEP`], whole [`CHUNK_STEP`]s beyond (at most the chunk), pure.
fn step_end(need: usize) -> usize {
    let step = if need <= CHUNK_STEP {
        FIRST_STEP
    } else {
        CHUNK_STEP
    };
    os::round_up(need, step).min(CHUNK_SIZE)
}

/// The arena's span on a machine with `ram` bytes of memory and `swap` bytes of swap: four
/// times all that could ever be resident, rounded up to a power of two, within
/// [`SPAN_MIN`]..=[`SPAN_MAX`] (the largest where the sizes are unknown, 0). Only the map's
/// entry per chunk costs address space up front.
pub(crate) fn span_for(ram: u64, swap: u64) -> usize {
    if ram == 0 {
        return SPAN_MAX;
    }
    let want = ram.saturating_add(swap).saturating_mul(4);
    let want = usize::try_from(want).unwrap_or(SPAN_MAX);
    want.checked_next_power_of_two()
        .unwrap_or(SPAN_MAX)
        .clamp(SPAN_MIN, SPAN_MAX)
}
/// A chunk is mapped in steps of this many bytes as its owner carves slabs
/// ([`Arena::map_through`]) once it reaches that far; before, in [`FIRST_STEP`]s.
pub(crate) const CHUNK_STEP: usize = 256 << 10;
/// A chunk's mapping grows in steps of this many bytes through its first [`CHUNK_STEP`]: a
/// size class that holds a few items costs its colour pages and first slab rounded up to it,
/// not a whole step (every mapped byte counts against `RLIMIT_AS`; a small program uses some
/// sixty classes).
pub(crate) const FIRST_STEP: usize = 64 << 10;
/// A huge page (x86-64's and arm64's PMD size with 4 KiB pages): a chunk holds two.
pub(crate) const HUGE_PAGE: usize = 2 << 20;
const _: () = assert!(
    CHUNK_SIZE.is_multiple_of(HUGE_PAGE)
        && HUGE_PAGE.is_multiple_of(CHUNK_STEP)
        && CHUNK_STEP.is_multiple_of(FIRST_STEP)
);

/// The bit of an entry's `mapped` word that marks a huge chunk: set by [`Arena::map_through`]
/// with [`os::Thp::Huge`] (never cleared while the chunk has its owner), cleared when the chunk
/// is freed. The word's low 32 bits are the chunk's bytes mapped, bits 32–62 its descriptor
/// area's ([`DESC_MAPPED_SHIFT`]).
const HUGE_MARK: u64 = 1 << 63;

/// Where an entry's `mapped` word keeps the bytes of the chunk's descriptor area mapped.
const DESC_MAPPED_SHIFT: u32 = 32;
/// The chunk's own bytes mapped, in an entry's `mapped` word.
const CHUNK_MAPPED: u64 = (1 << DESC_MAPPED_SHIFT) - 1;
/// The descriptor area's bytes mapped, in an entry's `mapped` word (shifted).
const DESC_MAPPED: u64 = !HUGE_MARK & !CHUNK_MAPPED;

/// Bytes of address space per chunk in the descriptor span (module docs): its keg's header and
/// slab descriptors (at most 160 KiB: 8-byte items in checked mode, `slab::Geometry`). A sixteenth of a chunk,
/// so a chunk's area is its offset in the arena divided by 16.
pub(crate) const DESC_STRIDE: usize = CHUNK_SIZE >> DESC_SHIFT;
/// log2 of `CHUNK_SIZE / DESC_STRIDE`.
pub(crate) const DESC_SHIFT: usize = 4;
/// A chunk's descriptor area is mapped in steps of this many bytes
/// ([`Arena::map_desc_through`]): four pages, as far as a class's descriptors reach (64 KiB
/// for the classes of one-page slabs, a page or two for most larger ones), since every mapped
/// byte counts against `RLIMIT_AS` (a small program uses some sixty classes).
pub(crate) const DESC_STEP: usize = 16 << 10;
const _: () = assert!(DESC_STRIDE.is_multiple_of(DESC_STEP) && (CHUNK_SIZE as u64) < CHUNK_MAPPED);

/// Bytes of a chunk map entry.
const ENTRY: usize = core::mem::size_of::<MapEntry>();

/// The `errno` of an [`OsError`] that says another mapping lies where the arena maps
/// (`MAP_FIXED_NOREPLACE`'s own answer); see [`Arena::taken`].
pub(crate) const TAKEN: i32 = libc::EEXIST;

pub(crate) struct Arena {
    pub(crate) base: usize,
    pub(crate) len: usize,
    /// One entry per chunk (see the module docs).
    pub(crate) map: *const MapEntry,
    /// The descriptor span's start (module docs): chunk `i`'s area is `DESC_STRIDE * i` bytes
    /// in.
    desc: usize,
    /// Chunks below this index have been handed out at least once (and are mapped) or were
    /// taken by another mapping (skipped, their entries 0).
    bump: AtomicUsize,
    /// The free chunk list and the map pages counted, protected by the mutex.
    free: crate::contention::Counted<FreeList, &'static crate::contention::Waits>,
    next_tag: AtomicU64,
}

/// What the arena's mutex protects.
struct FreeList {
    /// Head of the free chunk list (index + 1, 0 = empty).
    head: usize,
    /// The map page (index) holding the last new chunk's entry, counted as metadata.
    map_page: usize,
}

/// One chunk's entry in the chunk map (see the module docs).
#[repr(C, align(32))]
pub(crate) struct MapEntry {
    pub(crate) tag: AtomicU64,
    pub(crate) hint: AtomicU64,
    pub(crate) start: AtomicU64,
    /// Bytes of the chunk mapped, from its start ([`Arena::map_through`]), and of its
    /// descriptor area ([`Arena::map_desc_through`], above [`DESC_MAPPED_SHIFT`]), with
    /// [`HUGE_MARK`] for a huge chunk; 0 for a chunk never handed out. Written by the chunk's one
    /// owner (under its keg's lock) or by `alloc_chunk` and `free_chunk` (under the arena's
    /// mutex, the chunk unowned).
    pub(crate) mapped: AtomicU64,
}

impl MapEntry {
    /// The `mapped` word's bytes of the chunk. Relaxed: the chunk's owner (or the arena's
    /// mutex, for an unowned chunk) orders the writes; see the field's docs.
    fn mapped_bytes(&self) -> usize {
        (self.mapped.load(Ordering::Relaxed) & CHUNK_MAPPED) as usize
    }

    /// The `mapped` word's bytes of the descriptor area. Relaxed: as [`MapEntry::mapped_bytes`].
    fn desc_bytes(&self) -> usize {
        ((self.mapped.load(Ordering::Relaxed) & DESC_MAPPED) >> DESC_MAPPED_SHIFT) as usize
    }

    /// Whether the `mapped` word carries [`HUGE_MARK`]. Relaxed: read as a hint by a releasing
    /// thread (`Arena::release_pages` says why a stale value is harmless).
    fn is_huge(&self) -> bool {
        self.mapped.load(Ordering::Relaxed) & HUGE_MARK != 0
    }
}

// SAFETY: `map` points to a mapping owned by the arena for the life of the process; it is only
// accessed through atomics.
unsafe impl Send for Arena {}
// SAFETY: shared use is sound: all mutable state is atomics or behind the arena's mutex, and
// `map` stays mapped for the life of the process.
unsafe impl Sync for Arena {}

static ARENA: OnceLock<Result<Arena, OsError>> = OnceLock::new();

/// The arena's base and length for [`owner_tag`]: a malloc's `free` reads them inline on every
/// call, where [`get`] is a call into `OnceLock`. `len` stays 0 until the arena exists (then
/// every address is "outside"). One static, read through [`local_ref!`](crate::local_ref): one
/// `lea` for both, no GOT load (`local.rs`). Public (hidden) for
/// [`owner_entry_raw`], which inlines into other crates.
#[doc(hidden)]
#[repr(C)]
pub struct View {
    base: AtomicUsize,
    len: AtomicUsize,
}

#[doc(hidden)]
pub static VIEW: View = View {
    base: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
};

/// The process's arena, reserved on first use.
pub(crate) fn get() -> Result<&'static Arena, OsError> {
    match ARENA.get_or_init(|| {
        let r = Arena::reserve();
        if let Ok(a) = &r {
            VIEW.base.store(a.base, Ordering::Relaxed);
            // Release: pairs with the Acquire in `owner_entry`; the base and the committed map
            // are visible to a reader that sees the length.
            VIEW.len.store(a.len, Ordering::Release);
        }
        r
    }) {
        Ok(a) => Ok(a),
        Err(e) => Err(*e),
    }
}

impl Arena {
    fn reserve() -> Result<Arena, OsError> {
        let (ram, swap) = os::memory_and_swap();
        let map_len_of = |len: usize| os::round_up((len >> CHUNK_SHIFT) * ENTRY, os::page_size());
        let mut len = span_for(ram, swap);
        let base = loop {
            // (Under an address-space limit, only the map is mapped: `os::reserve_span`.)
            match os::reserve_span(len, CHUNK_SIZE, map_len_of(len)) {
                Ok(p) => break p,
                Err(e) if len <= ARENA_MIN => return Err(e),
                Err(_) => len /= 2,
            }
        };
        let nchunks = len >> CHUNK_SHIFT;
        let map_len = map_len_of(len);
        // The map in the first chunks, never handed out (`bump` starts after them).
        let map_chunks = map_len.div_ceil(CHUNK_SIZE);
        // The descriptor span after it (module docs), never handed out either.
        let desc_chunks = (nchunks * DESC_STRIDE).div_ceil(CHUNK_SIZE);
        debug_assert!(map_chunks + desc_chunks < nchunks);
        // SAFETY: the first `map_len` bytes of our fresh reservation, page aligned.
        if let Err(e) = unsafe { os::commit(base, map_len) } {
            // SAFETY: `base` is the reservation made above, unused.
            unsafe { os::unmap(base, len) };
            return Err(e);
        }
        // The rest of the span goes back until its chunks are handed out (module docs).
        // SAFETY: the reservation's part after the map, page aligned, unused.
        unsafe {
            os::unmap(
                NonNull::new_unchecked(base.as_ptr().add(map_len)),
                len - map_len,
            )
        };
        Ok(Arena {
            base: base.as_ptr() as usize,
            len,
            map: base.as_ptr().cast(),
            desc: base.as_ptr() as usize + map_chunks * CHUNK_SIZE,
            bump: AtomicUsize::new(map_chunks + desc_chunks),
            free: crate::contention::ARENA.mutex(FreeList {
                head: 0,
                map_page: usize::MAX,
            }),
            next_tag: AtomicU64::new(1),
        })
    }

    /// A new keg tag: even, non-zero, never reused.
    pub(crate) fn new_tag(&self) -> u64 {
        self.next_tag.fetch_add(1, Ordering::Relaxed) << 1
    }

    #[inline]
    fn entry(&self, idx: usize) -> &AtomicU64 {
        &self.map_entry(idx).tag
    }

    #[inline]
    fn map_entry(&self, idx: usize) -> &MapEntry {
        debug_assert!(idx < self.len >> CHUNK_SHIFT);
        // SAFETY: idx < nchunks, and the map holds one entry per chunk for the life of the
        // process.
        unsafe { &*self.map.add(idx) }
    }

    /// The tag of the chunk holding `addr`, or 0 when `addr` is outside the arena or in a chunk
    /// no keg owns. Never touches `addr` itself.
    #[inline]
    pub(crate) fn tag_of(&self, addr: usize) -> u64 {
        let off = addr.wrapping_sub(self.base);
        if off >= self.len {
            return 0;
        }
        // Acquire: pairs with the Release store of the tag in `alloc_chunk`, so the chunk's
        // header (written before the tag) is visible to whoever goes on to locate an item in it.
        let t = self.entry(off >> CHUNK_SHIFT).load(Ordering::Acquire);
        if t & 1 == 1 {
            0
        } else {
            t
        }
    }

    /// Hands a chunk to the keg with `tag` and `hint` whose first slab lies `first_slab` bytes
    /// into a chunk (see the module docs), mapped through its first `first_slab` bytes at least
    /// (the keg maps its slabs with [`Arena::map_through`] before carving them) and its
    /// descriptor area through `desc_bytes` at least, with the huge page policy `thp` (module
    /// docs). The chunk's memory and its descriptor area read as zeros.
    pub(crate) fn alloc_chunk(
        &self,
        tag: u64,
        hint: u64,
        first_slab: usize,
        desc_bytes: usize,
        thp: os::Thp,
    ) -> Result<NonNull<u8>, OsError> {
        debug_assert!(first_slab < CHUNK_SIZE && desc_bytes > 0 && desc_bytes <= DESC_STRIDE);
        debug_assert!(tag != 0 && tag & 1 == 0);
        // Injected failures hit every chunk acquisition, also a reused chunk that needs no commit.
        if os::fault::should_fail() {
            return Err(OsError {
                call: "arena chunk (injected)",
                errno: libc::ENOMEM,
            });
        }
        let nchunks = self.len >> CHUNK_SHIFT;
        let mut free = crate::sync::lock(&self.free);
        loop {
            let idx = self.next_chunk(&mut free, nchunks, thp)?;
            let chunk = self.base + (idx << CHUNK_SHIFT);
            // The owner's colour pages (its first `first_slab` bytes, at least a page: a huge
            // chunk whole) and the first of its descriptors mapped before it is handed out; a
            // chunk back from the free list keeps what it had mapped.
            let end = chunk + first_slab.max(os::page_size());
            let mapped = self.map_through(chunk, end, thp);
            match mapped.and_then(|()| self.map_desc_through(chunk, desc_bytes)) {
                Ok(()) => {}
                // Another mapping in its way: lost to the arena (what was mapped of it goes),
                // and the next chunk is tried, as `map_new_chunk` passes over one.
                Err(e) if Self::taken(&e) => {
                    self.lose_chunk(idx);
                    continue;
                }
                Err(e) => {
                    // Back on the free list, as it was (a new chunk: its first step mapped,
                    // unowned; hint and start word are 0: never set, or cleared).
                    self.push_free(&mut free, idx);
                    return Err(e);
                }
            }
            let e = self.map_entry(idx);
            // Release: published with the tag's Release store just below, which every reader
            // of the hint tests first (`FastConsts::free_fast`).
            e.hint.store(hint, Ordering::Release);
            // Relaxed: read only with the tag (`owner_entry`), which publishes it.
            e.start
                .store((chunk + first_slab) as u64, Ordering::Relaxed);
            // Release: a thread that reads this tag (tag_of, Acquire) sees the chunk's header,
            // which the keg initialises before publishing any item of the chunk, and the hint.
            self.entry(idx).store(tag, Ordering::Release);
            // SAFETY: inside the reservation, non-null.
            return Ok(unsafe { NonNull::new_unchecked(chunk as *mut u8) });
        }
    }

    /// Whether `e` says another mapping lies where the arena maps ([`Arena::map_through`]):
    /// the chunk is lost, the address space elsewhere is not.
    pub(crate) fn taken(e: &OsError) -> bool {
        e.errno == TAKEN
    }

    /// Chunk `idx` (unowned, off the free list, its hint and start word 0), which another
    /// mapping overlaps: what of it and its descriptors is ours goes back to the kernel, and
    /// it is lost to the arena (owned by nobody, on no list). The caller holds the free mutex.
    fn lose_chunk(&self, idx: usize) {
        let chunk = self.base + (idx << CHUNK_SHIFT);
        let (mapped, desc) = (
            self.map_entry(idx).mapped_bytes(),
            self.map_entry(idx).desc_bytes(),
        );
        // SAFETY: the chunk's first `mapped` bytes and its descriptor area's first `desc` are
        // our mappings (the entry says how far each reaches), used by nobody (unowned).
        unsafe {
            if mapped > 0 {
                os::unmap(NonNull::new_unchecked(chunk as *mut u8), mapped);
            }
            if desc > 0 {
                os::unmap(NonNull::new_unchecked(self.desc_of(chunk) as *mut u8), desc);
            }
        }
        // Relaxed: the chunk is unowned and stays so; nobody reads the word again.
        self.map_entry(idx).mapped.store(0, Ordering::Relaxed);
        // Release: as in `push_free` (a reader of the entry sees no owner).
        self.entry(idx).store(0, Ordering::Release);
    }

    /// The next chunk to hand out (the free mutex's contents `free` held): one from the free
    /// list with something mapped (made `thp`), or the next never handed out; its first step
    /// mapped either way.
    fn next_chunk(
        &self,
        free: &mut FreeList,
        nchunks: usize,
        thp: os::Thp,
    ) -> Result<usize, OsError> {
        let mut reused = None;
        while free.head != 0 {
            let idx = free.head - 1;
            let e = self.entry(idx).load(Ordering::Relaxed);
            debug_assert!(e & 1 == 1);
            free.head = (e >> 1) as usize;
            // The new owner's policy on what the last one mapped (given back whole, untouched).
            let mapped = self.map_entry(idx).mapped_bytes();
            // SAFETY: a chunk of the span, mapped through `mapped` bytes (its entry says so).
            let at =
                unsafe { NonNull::new_unchecked((self.base + (idx << CHUNK_SHIFT)) as *mut u8) };
            if mapped > 0 {
                os::set_thp(at, mapped, thp);
                reused = Some(idx);
                break;
            }
            // Unmapped when given back (`unmap_chunk`): its first step mapped again, as a new
            // chunk's (`map_new_chunk`), unless another mapping took its place meanwhile.
            // SAFETY: a chunk of the span, ours (free, on no keg), nothing of ours mapped in it.
            match unsafe { self.map_first_step(idx) } {
                Ok(os::MapAt::Mapped) => {
                    reused = Some(idx);
                    break;
                }
                // Lost to the arena, as a chunk `map_new_chunk` passes over: off the free list,
                // owned by nobody (Release: as in `free_chunk`).
                Ok(os::MapAt::Taken) => self.entry(idx).store(0, Ordering::Release),
                Err(e) => {
                    self.push_free(free, idx);
                    return Err(e);
                }
            }
        }
        if let Some(idx) = reused {
            return Ok(idx);
        }
        let idx = self.map_new_chunk(nchunks)?;
        // The chunk map is touched a page at a time as chunks are first used (the first chunk's
        // entry shares its page with the map's own entries, never written).
        let page = idx * ENTRY / os::page_size();
        if page != free.map_page {
            free.map_page = page;
            os::add_metadata(os::page_size());
        }
        Ok(idx)
    }

    /// Maps the first step of the next chunk of the span never handed out, skipping chunks
    /// another mapping took; its index. The caller holds the mutex (`bump` changes only under
    /// it).
    fn map_new_chunk(&self, nchunks: usize) -> Result<usize, OsError> {
        loop {
            let idx = self.bump.load(Ordering::Relaxed);
            if idx >= nchunks {
                return Err(OsError {
                    call: "arena (address space exhausted)",
                    errno: libc::ENOMEM,
                });
            }
            // SAFETY: a chunk of the arena's span never handed out: unmapped by `reserve` and
            // mapped by nobody of ours since (`bump` is past every chunk this arena mapped).
            let r = unsafe { self.map_first_step(idx)? };
            self.bump.store(idx + 1, Ordering::Relaxed);
            if r == os::MapAt::Mapped {
                return Ok(idx);
            }
        }
    }

    /// Maps the first [`FIRST_STEP`] of chunk `idx` (`MADV_NOHUGEPAGE` until its owner's policy
    /// is known) and, when that succeeds, records it in the chunk's entry; [`os::MapAt::Taken`]
    /// when another mapping lies there. The caller holds the free mutex.
    ///
    /// # Safety
    /// Chunk `idx` is of this arena's span, owned by no keg, and nothing of ours is mapped in
    /// it (never handed out, or unmapped when given back).
    unsafe fn map_first_step(&self, idx: usize) -> Result<os::MapAt, OsError> {
        // SAFETY: inside the span, chunk (hence page) aligned, non-null; the caller's guarantee.
        let r = unsafe {
            os::map_at(
                NonNull::new_unchecked((self.base + (idx << CHUNK_SHIFT)) as *mut u8),
                FIRST_STEP,
                os::Thp::Never,
            )?
        };
        if r == os::MapAt::Mapped {
            // Relaxed: the chunk is unowned; its next owner reads the word under the free mutex.
            self.map_entry(idx)
                .mapped
                .store(FIRST_STEP as u64, Ordering::Relaxed);
        }
        Ok(r)
    }

    /// Puts chunk `idx` (unowned, its hint and start word 0) on the free list `free` (the free
    /// mutex's contents, held).
    fn push_free(&self, free: &mut FreeList, idx: usize) {
        // Release: pairs with the Acquire loads in `tag_of` and the fast path's item check; a
        // reader that sees the "free" mark (odd value) sees the chunk given back (no stale
        // header can pass for a keg's). The free-list link in the entry itself is read under
        // the `free` mutex only.
        self.entry(idx)
            .store(((free.head as u64) << 1) | 1, Ordering::Release);
        free.head = idx + 1;
    }

    /// Maps the chunk at `chunk` (one of this arena's, handed out or being handed out) from its
    /// start through `end` at least, in steps of [`CHUNK_STEP`] — a chunk of policy
    /// [`os::Thp::Huge`] (the owner's, the same for every call on one chunk) whole, in one step,
    /// with what was mapped before marked huge too: the owner calls it before it carves a slab
    /// (address space on demand, module docs). Memory past what is mapped is not: nothing may
    /// touch a slab before it was carved. An error when the limit (`RLIMIT_AS`) is reached, or,
    /// with [`TAKEN`] ([`Arena::taken`]), when another mapping lies in the chunk's way (a program
    /// may place one anywhere in the span: it is not reserved, `os::reserve_span`); the owner
    /// then carves no further in this chunk (`Keg::abandon_newest`).
    pub(crate) fn map_through(
        &self,
        chunk: usize,
        end: usize,
        thp: os::Thp,
    ) -> Result<(), OsError> {
        debug_assert!(chunk.is_multiple_of(CHUNK_SIZE) && end > chunk && end - chunk <= CHUNK_SIZE);
        let e = self.map_entry((chunk - self.base) >> CHUNK_SHIFT);
        // Relaxed: the chunk's one owner (or `alloc_chunk` before it publishes the chunk) is
        // the only writer, serialised by its lock; see the field's docs.
        let word = e.mapped.load(Ordering::Relaxed);
        let have = (word & CHUNK_MAPPED) as usize;
        let desc = word & DESC_MAPPED;
        let mark = if thp == os::Thp::Huge {
            HUGE_MARK
        } else {
            word & HUGE_MARK
        };
        // A huge chunk whole: a huge page backs only an aligned 2 MiB all mapped with the mark.
        let want = if thp == os::Thp::Huge {
            CHUNK_SIZE
        } else {
            step_end(end - chunk)
        };
        if want <= have {
            if mark != word & HUGE_MARK {
                // A chunk mapped whole before it became huge (`make_older_chunks_huge`).
                // Relaxed: as the load above.
                e.mapped.store(have as u64 | desc | mark, Ordering::Relaxed);
            }
            return Ok(());
        }
        if thp == os::Thp::Huge && have > 0 {
            // What was mapped before the owner's policy was known (`map_new_chunk`'s first
            // step, a previous owner's steps) is marked too.
            // SAFETY: the chunk's mapped start, ours.
            os::set_thp(
                unsafe { NonNull::new_unchecked(chunk as *mut u8) },
                have,
                thp,
            );
        }
        // SAFETY: [chunk + have, chunk + want) is a page-aligned piece of the chunk, which is
        // ours (handed out by this arena); nothing of ours is mapped there (`mapped` says how
        // far the chunk's mapping reaches).
        let r = unsafe {
            os::map_at(
                NonNull::new_unchecked((chunk + have) as *mut u8),
                want - have,
                thp,
            )?
        };
        if r == os::MapAt::Taken {
            return Err(OsError {
                call: "arena chunk (its next pages taken by another mapping)",
                errno: TAKEN,
            });
        }
        e.mapped.store(want as u64 | desc | mark, Ordering::Relaxed);
        Ok(())
    }

    /// Bytes of the chunk at `chunk` (one of this arena's) mapped from its start: written only by
    /// its owner under its lock ([`Arena::map_through`]), which the caller holds.
    pub(crate) fn mapped_bytes(&self, chunk: usize) -> usize {
        self.map_entry((chunk - self.base) >> CHUNK_SHIFT)
            .mapped_bytes()
    }

    /// Bytes of the descriptor area of the chunk at `chunk` (one of this arena's) mapped:
    /// written only when the chunk is handed out or given back, which its owner's lock (held by
    /// the caller) orders.
    pub(crate) fn desc_mapped_bytes(&self, chunk: usize) -> usize {
        self.map_entry((chunk - self.base) >> CHUNK_SHIFT)
            .desc_bytes()
    }

    /// The descriptor area of the chunk at `chunk` (one of this arena's, chunk aligned):
    /// [`DESC_STRIDE`] bytes, [`DESC_STRIDE`] aligned (module docs). Pure arithmetic.
    #[inline]
    pub(crate) fn desc_of(&self, chunk: usize) -> usize {
        self.desc + ((chunk - self.base) >> DESC_SHIFT)
    }

    /// The chunk whose descriptor area holds `addr` (the inverse of [`Arena::desc_of`]).
    #[inline]
    pub(crate) fn chunk_of_desc(&self, addr: usize) -> usize {
        self.base + (((addr - self.desc) & !(DESC_STRIDE - 1)) << DESC_SHIFT)
    }

    /// Maps the descriptor area of the chunk at `chunk` (one of this arena's, being handed
    /// out) through its first `bytes` at least, in steps of [`DESC_STEP`], `MADV_NOHUGEPAGE`
    /// (module docs). Errors as [`Arena::map_through`].
    fn map_desc_through(&self, chunk: usize, bytes: usize) -> Result<(), OsError> {
        debug_assert!(bytes > 0 && bytes <= DESC_STRIDE);
        let e = self.map_entry((chunk - self.base) >> CHUNK_SHIFT);
        let have = e.desc_bytes();
        if bytes <= have {
            return Ok(());
        }
        let want = os::round_up(bytes, DESC_STEP).min(DESC_STRIDE);
        let area = self.desc_of(chunk);
        // SAFETY: [area + have, area + want) is a page-aligned piece of the chunk's descriptor
        // area, which is ours (the chunk is handed out by this arena, the span unmapped by
        // `reserve`); nothing of ours is mapped there (`mapped` says how far it reaches).
        let r = unsafe {
            os::map_at(
                NonNull::new_unchecked((area + have) as *mut u8),
                want - have,
                os::Thp::Never,
            )?
        };
        if r == os::MapAt::Taken {
            return Err(OsError {
                call: "arena descriptors (their next pages taken by another mapping)",
                errno: TAKEN,
            });
        }
        // Relaxed: as in `map_through` (the chunk's one owner writes the word).
        let word = e.mapped.load(Ordering::Relaxed);
        let keep = word & !DESC_MAPPED;
        e.mapped
            .store(keep | (want as u64) << DESC_MAPPED_SHIFT, Ordering::Relaxed);
        Ok(())
    }

    /// Gives back `[addr, addr + len)` (page aligned, inside one chunk or across adjacent
    /// chunks of this arena, each mapped there, holding nothing anyone uses), in one
    /// `madvise`. In a huge chunk each huge page the range covers only in part is split first
    /// ([`os::split_huge`]), so the part given back leaves the memory cgroup's charge now, not
    /// when the kernel gets round to splitting the page; a page the range covers whole goes back
    /// as a huge page. A page split before (a broken one) costs the one `madvise` more.
    ///
    /// # Safety
    /// As [`os::release`]: the range is mapped memory of the caller's chunk and unused.
    pub(crate) unsafe fn release_pages(&self, addr: usize, len: usize) {
        let end = addr + len;
        debug_assert!(len > 0 && addr >= self.base && end <= self.base + self.len);
        let mut chunk = addr & !(CHUNK_SIZE - 1);
        while chunk < end {
            // The mark is set under the owner's lock before any slab of a huge page is carved
            // from it and cleared only once the owner gave the chunk back; a caller that
            // released a slab reads its owner's mark or (for a chunk just made huge by
            // `make_older_chunks_huge`, whose pages are still 4 KiB) an older one, and then only
            // skips a split that would have had nothing to split.
            if self.map_entry((chunk - self.base) >> CHUNK_SHIFT).is_huge() {
                let (from, to) = (addr.max(chunk), end.min(chunk + CHUNK_SIZE));
                let mut h = from & !(HUGE_PAGE - 1);
                while h < to {
                    let part = from.max(h);
                    if part != h || to < h + HUGE_PAGE {
                        // SAFETY: `part` is a page of the range (non-null, mapped, unused).
                        os::split_huge(unsafe { NonNull::new_unchecked(part as *mut u8) });
                    }
                    h += HUGE_PAGE;
                }
            }
            chunk += CHUNK_SIZE;
        }
        // SAFETY: the caller's guarantee.
        unsafe { os::release(NonNull::new_unchecked(addr as *mut u8), len) };
    }

    /// Takes a chunk back: its pages are given back to the OS and it goes on the free list.
    ///
    /// # Safety
    /// `chunk` must have come from [`Arena::alloc_chunk`] and nothing may use it any more.
    pub(crate) unsafe fn free_chunk(&self, chunk: NonNull<u8>) {
        // SAFETY: the caller's guarantee.
        unsafe { self.take_chunk_back(chunk, false) };
    }

    /// [`Arena::free_chunk`], its mapping and its descriptor area's undone (`munmap`): the
    /// address space goes back too, for any other mapping (the page heap's, a program's) when
    /// the limit (`RLIMIT_AS`) is reached (`Keg::unmap_empty_chunks`). Its next owner maps it
    /// again from its start, like a chunk never handed out. Returns the bytes unmapped.
    ///
    /// # Safety
    /// As [`Arena::free_chunk`].
    pub(crate) unsafe fn unmap_chunk(&self, chunk: NonNull<u8>) -> usize {
        // SAFETY: the caller's guarantee.
        unsafe { self.take_chunk_back(chunk, true) }
    }

    /// [`Arena::free_chunk`] or, if `unmap`, [`Arena::unmap_chunk`]; the bytes unmapped.
    ///
    /// # Safety
    /// As [`Arena::free_chunk`].
    unsafe fn take_chunk_back(&self, chunk: NonNull<u8>, unmap: bool) -> usize {
        let idx = (chunk.as_ptr() as usize - self.base) >> CHUNK_SHIFT;
        let (mapped, desc) = (
            self.map_entry(idx).mapped_bytes(),
            self.map_entry(idx).desc_bytes(),
        );
        let area = self.desc_of(chunk.as_ptr() as usize);
        let give_back: unsafe fn(NonNull<u8>, usize) = if unmap { os::unmap } else { os::release };
        // SAFETY: the caller guarantees the chunk is ours and unused; its first `mapped` bytes
        // are mapped, and its descriptor area's first `desc` (its own, read by nobody now).
        unsafe {
            give_back(chunk, mapped);
            if desc > 0 {
                give_back(NonNull::new_unchecked(area as *mut u8), desc);
            }
        }
        let kept = if unmap { (0, 0) } else { (mapped, desc) };
        let mut free = crate::sync::lock(&self.free);
        // Relaxed: the chunk is unowned; its next owner reads the word under this mutex. The
        // huge mark goes; what is mapped stays (nothing, unmapped).
        self.map_entry(idx).mapped.store(
            kept.0 as u64 | (kept.1 as u64) << DESC_MAPPED_SHIFT,
            Ordering::Relaxed,
        );
        // The hint first: a free chunk matches no zone's stacks (a zone made later may get a
        // destroyed zone's stacks' address).
        let e = self.map_entry(idx);
        e.hint.store(0, Ordering::Release);
        // Relaxed: read only with an owner's tag, which the store below replaces.
        e.start.store(0, Ordering::Relaxed);
        self.push_free(&mut free, idx);
        if unmap {
            mapped + desc
        } else {
            0
        }
    }
}

/// The tag of the keg owning the chunk that holds `addr`, or 0 when no keg of this process's
/// arena owns it (outside the arena, never handed out, or free). Reads only the chunk map,
/// never `addr`: what a malloc's `free(ptr)` uses to find the size class of any pointer, with
/// [`crate::Zone::tag_raw`] giving each zone's tag. 0 too when the arena could not be reserved.
#[inline(always)]
pub fn owner_tag(addr: usize) -> u64 {
    owner_entry(addr).tag
}

/// What the chunk map says of the chunk holding an address ([`owner_entry`]; module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkOwner {
    /// The owning keg's tag ([`owner_tag`]), 0 for none.
    pub tag: u64,
    /// The owning keg's hint (its zone's per-CPU stacks), 0 for none.
    pub hint: u64,
    /// The chunk's start word ("The start word"), for
    /// [`FastConsts::free_fast`](crate::zone::FastConsts::free_fast); 0 for none.
    pub start: u64,
}

/// [`owner_tag`], the owning keg's hint and the chunk's start word (see the module docs); all
/// 0 where `owner_tag` gives 0. The hint and the start word are those of the keg the tag names
/// (or, if the chunk changed hands since, of a later owner: only after the owning zone was
/// destroyed).
#[inline(always)]
pub fn owner_entry(addr: usize) -> ChunkOwner {
    let o = owner_entry_raw(addr);
    // An odd word is a free chunk's link (module docs): nobody's.
    if o.tag & 1 == 1 {
        ChunkOwner::default()
    } else {
        o
    }
}

/// [`owner_entry`] without its test for a free chunk: the entry's words as stored, so the tag
/// is odd for a chunk on the free list (its link: module docs) and 0 for one never handed out
/// or outside the arena. For a caller that looks the tag up in a table whose keys are even
/// tags (the malloc's `free`): an odd value finds no entry, and the test is one branch less.
#[inline(always)]
pub fn owner_entry_raw(addr: usize) -> ChunkOwner {
    let view = crate::local_ref!(VIEW);
    // Acquire: pairs with the Release store in `get`.
    let len = view.len.load(Ordering::Acquire);
    // SAFETY: VIEW holds (0, 0) until the arena exists, then its base and length (the base
    // stored before the length, which was loaded first).
    let Some(e) = (unsafe { map_entry_in(view.base.load(Ordering::Relaxed), len, addr) }) else {
        return ChunkOwner::default();
    };
    ChunkOwner {
        // Acquire: as in `Arena::tag_of` (and the hint and start word, stored before the tag,
        // are visible).
        tag: e.tag.load(Ordering::Acquire),
        hint: e.hint.load(Ordering::Relaxed),
        start: e.start.load(Ordering::Relaxed),
    }
}

/// The chunk map entry of the chunk holding `addr` in the arena at `base` of `len` bytes,
/// `None` outside it (module docs, "The map at the base"). Reads nothing but the map: the
/// caller has loaded the base and the length (a zone keeps them among its fast-path
/// constants, the malloc's `free` in a static).
///
/// # Safety
/// `(base, len)` is `(0, 0)` (no arena) or the process's arena's [`Arena::base`] and
/// [`Arena::len`].
#[inline(always)]
pub(crate) unsafe fn map_entry_in(
    base: usize,
    len: usize,
    addr: usize,
) -> Option<&'static MapEntry> {
    let off = addr.wrapping_sub(base);
    if off >= len {
        return None;
    }
    // SAFETY: the arena's base and length (caller), and `off` below the length, so the entry
    // lies in the chunk map, which starts at the base and lives as long as the process.
    Some(unsafe { &*((base as *const MapEntry).add(off >> CHUNK_SHIFT)) })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Whether the page at `p` (page aligned, non-null) is mapped (by anyone): `mincore`
    /// fails on a range that is not.
    pub(crate) fn is_mapped(p: usize) -> bool {
        os::resident_pages(NonNull::new(p as *mut u8).unwrap(), os::page_size()).is_some()
    }

    /// A chunk given back unmapped (`unmap_chunk`) is unmapped, mapped again (zero) for its
    /// next owner, and passed over when another mapping took its place meanwhile. A private
    /// arena: no other test takes its chunks.
    #[test]
    fn an_unmapped_chunk_is_mapped_again_or_passed_over_when_taken() {
        let a: &'static Arena = Box::leak(Box::new(Arena::reserve().unwrap()));
        let t = a.new_tag();
        let take = || a.alloc_chunk(t, 0, 4096, 4096, os::Thp::Never).unwrap();
        let (c1, c2) = (take(), take());
        let (p1, p2) = (c1.as_ptr() as usize, c2.as_ptr() as usize);
        // SAFETY: the first page of a chunk just taken, mapped (its first step).
        unsafe { c1.as_ptr().write_bytes(0x77, 4096) };
        // SAFETY: ours, unused from here.
        let b = unsafe { a.unmap_chunk(c1) };
        assert!(b >= FIRST_STEP + DESC_STEP, "{b} bytes unmapped");
        assert!(!is_mapped(p1) && !is_mapped(a.desc_of(p1)));
        assert_eq!(a.tag_of(p1), 0);
        let c3 = take();
        assert_eq!(c3, c1, "the free chunk first");
        assert!(is_mapped(p1) && a.mapped_bytes(p1) >= 4096);
        // SAFETY: its first page, mapped again.
        assert!(unsafe { core::slice::from_raw_parts(c3.as_ptr(), 4096) }
            .iter()
            .all(|&x| x == 0));
        // SAFETY: both ours, unused from here; c2 last, so first on the free list.
        unsafe {
            a.unmap_chunk(c3);
            a.unmap_chunk(c2);
        }
        // Another mapping takes c2's place.
        // SAFETY: a page nobody maps (c2 was just unmapped); undone below.
        let foreign = unsafe {
            libc::mmap(
                p2 as *mut libc::c_void,
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        assert_eq!(foreign as usize, p2);
        // SAFETY: the mapping just made.
        unsafe { (foreign as *mut u8).write(0x42) };
        let c4 = take();
        assert_eq!(c4, c1, "c2 passed over, c1 taken");
        assert_eq!(a.tag_of(p2), 0, "c2 is nobody's");
        // SAFETY: the foreign mapping, untouched by the arena.
        assert_eq!(unsafe { (foreign as *const u8).read() }, 0x42);
        let c5 = take();
        assert!(c5 != c1 && c5 != c2, "a new chunk next");
        // SAFETY: the foreign mapping made above.
        unsafe { libc::munmap(foreign, 4096) };
    }

    #[test]
    fn chunks_are_tagged_and_reused() {
        let a = get().unwrap();
        let t1 = a.new_tag();
        let t2 = a.new_tag();
        assert!(t1 != t2 && t1 & 1 == 0 && t2 & 1 == 0);
        let c1 = a
            .alloc_chunk(t1, 0x1000, 4096, 4096, os::Thp::Never)
            .unwrap();
        assert_eq!(c1.as_ptr() as usize % CHUNK_SIZE, 0);
        assert_eq!(a.tag_of(c1.as_ptr() as usize + 12345), t1);
        assert_eq!(a.tag_of(0x1000), 0, "outside the arena");
        let inside = c1.as_ptr() as usize + 777;
        assert_eq!(
            (owner_entry(inside).tag, owner_entry(inside).hint),
            (t1, 0x1000),
            "the tag and the keg's hint"
        );
        assert_eq!(owner_entry(0x1000), ChunkOwner::default());
        // SAFETY: c1 came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c1) };
        assert_eq!(
            a.tag_of(c1.as_ptr() as usize),
            0,
            "free chunks belong to nobody"
        );
        assert_eq!(
            owner_entry(inside),
            ChunkOwner::default(),
            "nor their hints"
        );
        let c2 = a.alloc_chunk(t2, 0, 4096, 4096, os::Thp::Never).unwrap();
        assert_eq!(a.tag_of(c2.as_ptr() as usize), t2);
        // SAFETY: c2 came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c2) };
    }

    /// The base and the length find every address's entry: nothing below the base or from the
    /// end on, the map's own chunk owned by nobody and never handed out, and a chunk's entry at
    /// the map (the base) plus 32 bytes per chunk.
    #[test]
    fn the_base_and_length_bound_the_arena_and_find_the_map() {
        let a = get().unwrap();
        assert_eq!(a.map as usize, a.base, "the map is the arena's first chunk");
        let entry = |b: usize, l: usize, x: usize| {
            // SAFETY: every caller below passes the arena's base and length, or (0, 0) for "no
            // arena"; `map_entry_in` only reads the map inside those bounds.
            unsafe { map_entry_in(b, l, x) }
        };
        assert!(entry(a.base, a.len, a.base - 1).is_none(), "below the base");
        assert!(entry(a.base, a.len, a.base + a.len).is_none(), "the end");
        assert!(entry(a.base, a.len, usize::MAX).is_none());
        assert!(entry(a.base, a.len, 0).is_none(), "NULL");
        assert!(
            entry(0, 0, a.base + CHUNK_SIZE).is_none(),
            "no arena: nothing inside"
        );
        let e0 = entry(a.base, a.len, a.base + 5).expect("the map's own chunk is inside");
        assert_eq!(e0 as *const MapEntry, a.map);
        assert_eq!(
            e0.tag.load(Ordering::Relaxed),
            0,
            "the map's chunk belongs to nobody"
        );
        assert_eq!(owner_entry(a.base + 64), ChunkOwner::default());
        let t = a.new_tag();
        let c = a
            .alloc_chunk(t, 0x2000, 4096, 4096, os::Thp::Never)
            .unwrap();
        let addr = c.as_ptr() as usize;
        assert!(
            addr >= a.base + CHUNK_SIZE,
            "the map's chunk is never handed out"
        );
        for x in [addr, addr + 99, addr + CHUNK_SIZE - 1] {
            let e = entry(a.base, a.len, x).unwrap();
            assert_eq!(
                e as *const MapEntry as usize,
                a.base + ((addr - a.base) >> CHUNK_SHIFT) * ENTRY
            );
        }
        let last = entry(a.base, a.len, a.base + a.len - 1).unwrap();
        assert_eq!(
            last as *const MapEntry as usize,
            a.base + ((a.len >> CHUNK_SHIFT) - 1) * ENTRY,
            "the last chunk's entry"
        );
        assert_eq!(
            owner_entry(addr + 99),
            ChunkOwner {
                tag: t,
                hint: 0x2000,
                start: addr as u64 + 4096
            }
        );
        // SAFETY: c came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c) };
    }

    /// A chunk given back keeps no hint (the C entry points' `free` tests the hint alone, and a
    /// later zone's stacks may reuse a destroyed zone's address).
    #[test]
    fn a_free_chunk_has_no_hint() {
        let a = get().unwrap();
        let c = a
            .alloc_chunk(a.new_tag(), 0x3000, 4096, 4096, os::Thp::Never)
            .unwrap();
        // SAFETY: the arena's base and length.
        let e = unsafe { map_entry_in(a.base, a.len, c.as_ptr() as usize + 5) }.unwrap();
        assert_eq!(e.hint.load(Ordering::Relaxed), 0x3000);
        // SAFETY: c came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c) };
        assert_eq!(
            e.hint.load(Ordering::Relaxed),
            0,
            "a free chunk matches no zone's stacks"
        );
        assert_eq!(e.tag.load(Ordering::Relaxed) & 1, 1, "marked free");
    }

    /// The span follows the machine: four times memory and swap as a power of two, between
    /// 32 GiB and 1 TiB, 1 TiB where the sizes are unknown.
    #[test]
    fn the_span_is_four_times_memory_and_swap() {
        const G: u64 = 1 << 30;
        assert_eq!(span_for(24 * G, 0), 128 << 30);
        assert_eq!(span_for(16 * G, 16 * G), 128 << 30);
        assert_eq!(span_for(32 * G, 0), 128 << 30);
        assert_eq!(span_for(33 * G, 0), 256 << 30);
        assert_eq!(span_for(G, 0), SPAN_MIN, "small machines get the least");
        assert_eq!(span_for(4096 * G, 0), SPAN_MAX, "large ones the most");
        assert_eq!(span_for(0, 0), SPAN_MAX, "unknown: the most");
        assert_eq!(span_for(u64::MAX, u64::MAX), SPAN_MAX);
    }

    /// Only the map and the chunks handed out are mapped (module docs): the next chunk of the
    /// span is not, and a chunk another mapping took is skipped, its entry nobody's.
    #[test]
    fn chunks_are_mapped_on_demand_and_foreign_ones_skipped() {
        let a = get().unwrap();
        let ps = os::page_size();
        let foreign = {
            let _held = crate::sync::lock(&a.free);
            let idx = a.bump.load(Ordering::Relaxed);
            assert!(idx < a.len >> CHUNK_SHIFT, "span exhausted");
            let p = a.base + (idx << CHUNK_SHIFT);
            assert!(
                !is_mapped(p),
                "the next chunk of the span is not mapped yet"
            );
            // SAFETY: the chunk is unmapped (above); a page of someone else's there.
            let r =
                unsafe { os::map_at(NonNull::new_unchecked(p as *mut u8), ps, os::Thp::Eligible) };
            assert_eq!(r, Ok(os::MapAt::Mapped));
            p
        };
        // Chunks from the free list first (other tests give theirs back), then new ones.
        let t = a.new_tag();
        let mut got = Vec::new();
        while a.bump.load(Ordering::Relaxed) <= (foreign - a.base) >> CHUNK_SHIFT {
            assert!(
                got.len() < 64,
                "the bump pointer never passed the foreign chunk"
            );
            got.push(a.alloc_chunk(t, 0x5000, ps, 4096, os::Thp::Never).unwrap());
        }
        assert_eq!(a.tag_of(foreign), 0, "nobody's");
        assert_eq!(owner_entry(foreign + 8), ChunkOwner::default());
        // SAFETY: the chunks came from alloc_chunk, mapped and ours; the foreign page is ours.
        unsafe {
            for c in got {
                assert_ne!(c.as_ptr() as usize, foreign, "the foreign chunk is skipped");
                c.as_ptr().add(FIRST_STEP - 1).write(7);
                assert!(
                    a.map_entry((c.as_ptr() as usize - a.base) >> CHUNK_SHIFT)
                        .mapped
                        .load(Ordering::Relaxed)
                        >= FIRST_STEP as u64
                );
                assert_eq!(a.tag_of(c.as_ptr() as usize), t);
                a.free_chunk(c);
            }
            os::unmap(NonNull::new_unchecked(foreign as *mut u8), ps);
        }
    }

    /// A chunk's mapping grows by 64 KiB through its first 256 KiB, by 256 KiB beyond.
    #[test]
    fn the_first_steps_are_small() {
        let k = 1 << 10;
        for (need, end) in [
            (1, 64 * k),
            (64 * k, 64 * k),
            (64 * k + 1, 128 * k),
            (200 * k, 256 * k),
            (256 * k, 256 * k),
            (256 * k + 1, 512 * k),
            (CHUNK_SIZE - 1, CHUNK_SIZE),
            (CHUNK_SIZE, CHUNK_SIZE),
        ] {
            assert_eq!(step_end(need), end, "{need}");
        }
    }

    /// A chunk is mapped through its first slab's start when handed out, then in steps as its owner asks
    /// ([`Arena::map_through`]); what lies beyond is not mapped, and a chunk given back and
    /// handed out again keeps its mapping.
    #[test]
    fn a_chunk_is_mapped_in_steps_as_its_owner_asks() {
        let a = get().unwrap();
        let ps = os::page_size();
        // A first slab beyond the first step, in a chunk nobody mapped further before (other
        // tests give back chunks mapped whole).
        let first = CHUNK_STEP + 3 * ps;
        let mut held = Vec::new();
        let c = loop {
            let c = a
                .alloc_chunk(a.new_tag(), 0x6000, first, 4096, os::Thp::Never)
                .unwrap();
            if a.mapped_bytes(c.as_ptr() as usize) == 2 * CHUNK_STEP {
                break c;
            }
            held.push(c);
        };
        for h in held {
            // SAFETY: `h` came from alloc_chunk and is unused.
            unsafe { a.free_chunk(h) };
        }
        let chunk = c.as_ptr() as usize;
        assert!(
            is_mapped(chunk) && is_mapped(chunk + first - ps),
            "the pages before the first slab"
        );
        assert!(is_mapped(chunk + 2 * CHUNK_STEP - ps), "in whole steps");
        assert!(!is_mapped(chunk + 2 * CHUNK_STEP), "nothing beyond");
        a.map_through(chunk, chunk + 2 * CHUNK_STEP + 1, os::Thp::Never)
            .unwrap();
        assert!(is_mapped(chunk + 3 * CHUNK_STEP - ps) && !is_mapped(chunk + 3 * CHUNK_STEP));
        a.map_through(chunk, chunk + ps, os::Thp::Never).unwrap(); // already: nothing to do
        a.map_through(chunk, chunk + CHUNK_SIZE, os::Thp::Never)
            .unwrap();
        assert!(is_mapped(chunk + CHUNK_SIZE - ps), "all of it");
        // SAFETY: c came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c) };
        assert!(
            is_mapped(chunk + CHUNK_SIZE - ps),
            "a chunk given back stays mapped"
        );
    }

    /// A chunk's descriptor area (module docs, "The descriptor span"): in the span after the
    /// map, one [`DESC_STRIDE`] per chunk, found from the chunk and back; mapped from the first
    /// step the owner asks for, in steps, no further; nobody's in the chunk map; zero again
    /// for the next owner of a chunk given back, and its extent kept apart from the chunk's own
    /// and from the huge mark.
    #[test]
    fn a_chunk_has_its_descriptor_area_in_the_span() {
        let a = get().unwrap();
        let ps = os::page_size();
        let t = a.new_tag();
        let c = a.alloc_chunk(t, 0x8000, 0, 100, os::Thp::Huge).unwrap();
        let chunk = c.as_ptr() as usize;
        let d = a.desc_of(chunk);
        assert!(
            d > a.base && d + DESC_STRIDE <= chunk,
            "in the span, below the chunks"
        );
        assert_eq!(d % DESC_STRIDE, 0);
        assert_eq!(d - a.desc, ((chunk - a.base) >> CHUNK_SHIFT) * DESC_STRIDE);
        for x in [d, d + 64, d + DESC_STRIDE - 1] {
            assert_eq!(a.chunk_of_desc(x), chunk);
        }
        assert_eq!(a.chunk_of_desc(d + DESC_STRIDE), chunk + CHUNK_SIZE);
        assert_eq!(a.tag_of(d), 0, "the span is nobody's");
        assert_eq!(owner_entry(d + 8), ChunkOwner::default());
        assert!(
            is_mapped(d + DESC_STEP - ps) && !is_mapped(d + DESC_STEP),
            "one step"
        );
        // SAFETY: the chunk's descriptor area, mapped through its first step; ours. (Word 5:
        // past any keg's header, before its descriptors: no other test's keg that gets the
        // chunk next writes it.)
        unsafe { (d as *mut u64).add(5).write(0xdead) };
        a.map_desc_through(chunk, DESC_STEP + 1).unwrap();
        assert!(is_mapped(d + 2 * DESC_STEP - ps) && !is_mapped(d + 2 * DESC_STEP));
        a.map_desc_through(chunk, 10).unwrap(); // already: nothing to do
        assert_eq!(a.mapped_bytes(chunk), CHUNK_SIZE, "the chunk's own extent");
        assert!(a.map_entry((chunk - a.base) >> CHUNK_SHIFT).is_huge());
        assert_eq!(
            a.map_entry((chunk - a.base) >> CHUNK_SHIFT).desc_bytes(),
            2 * DESC_STEP
        );
        // SAFETY: c came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c) };
        // SAFETY: its descriptor area stays mapped (two steps), whoever owns the chunk next.
        assert_eq!(unsafe { (d as *const u64).add(5).read() }, 0, "zero again");
        assert!(is_mapped(d + 2 * DESC_STEP - ps), "the mapping stays");
    }

    /// A huge chunk's mark, and what `release_pages` does with it: a range that covers part of
    /// a huge page splits that page (each of the two when it crosses the middle), one that covers
    /// a huge page whole leaves the other alone; a chunk given back loses the mark.
    #[test]
    fn a_release_in_part_of_a_huge_page_splits_it() {
        let a = get().unwrap();
        let ps = os::page_size();
        let c = a
            .alloc_chunk(a.new_tag(), 0x7000, ps, 4096, os::Thp::Huge)
            .unwrap();
        let chunk = c.as_ptr() as usize;
        let huge = |at: usize| a.map_entry((at - a.base) >> CHUNK_SHIFT).is_huge();
        assert!(huge(chunk), "marked by map_through with Thp::Huge");
        assert_eq!(
            a.mapped_bytes(chunk),
            CHUNK_SIZE,
            "mapped whole, the mark apart"
        );
        // SAFETY: the chunk is ours, mapped whole; both huge pages touched.
        unsafe { c.as_ptr().write_bytes(1, CHUNK_SIZE) };
        let thp = |at: usize| os::page_in_thp(at);
        let checkable = os::thp_observable();
        if checkable {
            assert_eq!(
                (thp(chunk), thp(chunk + HUGE_PAGE)),
                (Some(true), Some(true))
            );
        } else {
            eprintln!("not root or THP off: the splits are not checked");
        }
        // The middle 8 pages: the last 4 of page 0, the first 4 of page 1.
        // SAFETY: pages of our chunk, holding nothing anyone uses.
        unsafe { a.release_pages(chunk + HUGE_PAGE - 4 * ps, 8 * ps) };
        if checkable {
            assert_eq!(thp(chunk), Some(false), "page 0 split");
            assert_eq!(thp(chunk + CHUNK_SIZE - ps), Some(false), "page 1 split");
        }
        // SAFETY: as above.
        let kept = unsafe { *(chunk as *const u8).add(HUGE_PAGE - 5 * ps) };
        assert_eq!(kept, 1, "the pages around the range keep their contents");
        // SAFETY: as above; read back as zeros.
        assert_eq!(unsafe { *(chunk as *const u8).add(HUGE_PAGE) }, 0);
        // SAFETY: c came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c) };
        assert!(!huge(chunk), "the mark goes with the owner");
    }

    /// One release across two adjacent huge chunks: the huge pages it covers in part, in both
    /// chunks, are split; those it covers whole go whole; the rest keeps its contents.
    #[test]
    fn a_release_across_adjacent_chunks_splits_each_part() {
        let a = get().unwrap();
        let ps = os::page_size();
        let mut held: Vec<NonNull<u8>> = Vec::new();
        let (c1, c2) = loop {
            let c = a
                .alloc_chunk(a.new_tag(), 0x9000, ps, 4096, os::Thp::Huge)
                .unwrap();
            if let Some(&prev) = held.last() {
                if c.as_ptr() as usize == prev.as_ptr() as usize + CHUNK_SIZE {
                    held.pop();
                    break (prev, c);
                }
            }
            assert!(held.len() < 64, "no two adjacent chunks");
            held.push(c);
        };
        for h in held {
            // SAFETY: `h` came from alloc_chunk and is unused.
            unsafe { a.free_chunk(h) };
        }
        let (x, y) = (c1.as_ptr() as usize, c2.as_ptr() as usize);
        // SAFETY: both chunks are ours, mapped whole; every page touched.
        unsafe {
            c1.as_ptr().write_bytes(1, CHUNK_SIZE);
            c2.as_ptr().write_bytes(2, CHUNK_SIZE);
        }
        // The last 4 pages of c1, c2's first huge page whole and 4 pages of its second.
        // SAFETY: pages of our chunks, holding nothing anyone uses.
        unsafe { a.release_pages(y - 4 * ps, 4 * ps + HUGE_PAGE + 4 * ps) };
        if os::thp_observable() {
            assert_eq!(os::page_in_thp(x), Some(true), "c1's first page untouched");
            assert_eq!(
                os::page_in_thp(y - 5 * ps),
                Some(false),
                "c1's second page split"
            );
            assert_eq!(
                os::page_in_thp(y + CHUNK_SIZE - ps),
                Some(false),
                "c2's second split"
            );
        }
        // SAFETY: as above.
        unsafe {
            assert_eq!(*(y as *const u8).sub(5 * ps), 1, "kept");
            assert_eq!(*(y as *const u8).sub(4 * ps), 0, "given back");
            assert_eq!(*(y as *const u8).add(HUGE_PAGE - 1), 0, "given back whole");
            assert_eq!(*(y as *const u8).add(HUGE_PAGE + 4 * ps), 2, "kept");
            a.free_chunk(c1);
            a.free_chunk(c2);
        }
    }

    /// A chunk handed out carries its first slab's address as its start word; given back, 0.
    #[test]
    fn a_chunk_carries_its_start_word_until_given_back() {
        let a = get().unwrap();
        let t = a.new_tag();
        let c = a
            .alloc_chunk(t, 0x4000, 3 * crate::os::page_size(), 4096, os::Thp::Never)
            .unwrap();
        let chunk = c.as_ptr() as usize;
        // SAFETY: the arena's base and length.
        let e = unsafe { map_entry_in(a.base, a.len, chunk + 5) }.unwrap();
        let start = e.start.load(Ordering::Relaxed);
        assert_eq!(start, (chunk + 3 * crate::os::page_size()) as u64);
        assert_eq!(owner_entry(chunk + CHUNK_SIZE - 1).start, start);
        // SAFETY: c came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c) };
        assert_eq!(e.start.load(Ordering::Relaxed), 0);
        assert_eq!(owner_entry(chunk).start, 0, "no owner, no start");
    }
}
