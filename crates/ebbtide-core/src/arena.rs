//! The arena: one reservation of address space, cut into 4 MiB chunks that kegs own.
//!
//! ```text
//!  arena base (CHUNK_SIZE aligned)                                    base + len
//!  | chunk map | chunk 1 | chunk 2 | ...                     | chunk n-1 |
//!                  ^ owned by a keg: its slab metadata at the start, slabs after it
//!  chunk map: the arena's first chunk(s), one 16-byte entry per chunk (the map's own entries
//!  read 0), readable for every chunk (committed at once, its pages zero-filled as touched):
//!    tag word:
//!      0            never handed out (above the bump pointer)
//!      even tag     owned by the keg with that tag (tags are never reused)
//!      odd          free, value = (next free chunk index << 1) | 1
//!    hint word: the owning keg's hint (its zone's per-CPU stacks), written before the tag;
//!      0 for a chunk never handed out or given back (cleared before the free mark)
//! ```
//!
//! **The hint** is the one word a `free` needs after the pointer to reach the stack it pushes
//! onto: the owning zone's per-CPU stacks ([`crate::zone::FastConsts::stacks_hint`]). It sits
//! beside the tag in the entry, so [`owner_entry`] reads both with the one load that starts at
//! the pointer; without it the stacks' address came from a second table indexed by the tag, one
//! more load between the pointer and the store (docs/benchmarks.md, "The chunk's hint"). A
//! keg's hint is fixed before its first chunk and written before the tag (which is stored with
//! Release), so a reader that saw the tag with Acquire reads that keg's hint: a later owner's
//! (or 0) only if the chunk was freed meanwhile, which only the destruction of the owning zone does,
//! after which a free into it is the caller's error anyway. The C entry points' `free` tests
//! the owner by the hint alone (`Zone::free_fast_plain`: equal to its zone's stacks' base), so
//! a given-back chunk's hint is cleared: a zone made later may get the destroyed zone's stacks'
//! address.
//!
//! **One word for the arena** ([`Arena::word`]): the base's chunk index in the low 32 bits and
//! the number of chunks in the high 32. Since the map is at the base, that word alone finds an
//! address's entry: `idx = (addr >> CHUNK_SHIFT) - low` (outside the arena iff `idx >= high`),
//! the entry at `(low << CHUNK_SHIFT) + 16 * idx`. The malloc's `free` reads it with one load
//! of a static ([`owner_entry`]) where the base, the length and the map's address were three
//! (docs/benchmarks.md, "Loads, not instructions"). A zone's fast-path constants keep the base
//! and the length instead ([`map_entry_in`]): read from the zone as operands of `sub` and
//! `cmp`, two loads and no shifts ran as fast as one load taken apart or faster
//! (docs/benchmarks.md, "The stacks' address as the owner test"). Either way the map is found
//! at the base, so no third field.
//!
//! The chunk map is what makes a `free` of any pointer safe to check in O(1) without touching the
//! pointer's memory: an address outside the arena, or in a chunk another keg owns, is rejected
//! before anything is written. It is also what a future `malloc`-replacement `free(ptr)` needs.
//!
//! Chunks are committed (`mprotect` RW) when first handed out and never decommitted; giving
//! memory back is done per slab with `MADV_DONTNEED` (see [`crate::os`]). A chunk freed by a
//! destroyed zone is released whole and goes on the free list for reuse.

use crate::os::{self, OsError};
use core::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// log2 of the chunk size.
pub(crate) const CHUNK_SHIFT: usize = 22;
/// Bytes per chunk (4 MiB).
pub(crate) const CHUNK_SIZE: usize = 1 << CHUNK_SHIFT;

const ARENA_MAX: usize = 1 << 40; // try 1 TiB of address space first
const ARENA_MIN: usize = 1 << 25; // and accept down to 32 MiB (e.g. under a tight `ulimit -v`)
/// Bytes of a chunk map entry.
const ENTRY: usize = core::mem::size_of::<MapEntry>();

pub(crate) struct Arena {
    pub(crate) base: usize,
    pub(crate) len: usize,
    /// One entry per chunk (see the module docs).
    pub(crate) map: *const MapEntry,
    /// Chunks below this index have been handed out at least once (and are committed).
    bump: AtomicUsize,
    /// The first chunk after the map (`bump`'s first value).
    first: usize,
    /// Head of the free chunk list (index + 1, 0 = empty), protected by the mutex.
    free: Mutex<usize>,
    next_tag: AtomicU64,
}

/// One chunk's entry in the chunk map (see the module docs).
#[repr(C, align(16))]
pub(crate) struct MapEntry {
    pub(crate) tag: AtomicU64,
    pub(crate) hint: AtomicU64,
}

// SAFETY: `map` points to a mapping owned by the arena for the life of the process; it is only
// accessed through atomics.
unsafe impl Send for Arena {}
// SAFETY: as above; all mutable state is atomics or behind the mutex.
unsafe impl Sync for Arena {}

static ARENA: OnceLock<Result<Arena, OsError>> = OnceLock::new();

/// The arena's [`Arena::word`] for [`owner_tag`]: a malloc's `free` reads it inline on every
/// call, where [`get`] is a call into `OnceLock`. 0 until the arena exists (no chunks: every
/// address is "outside"). Read through [`local_ref!`](crate::local_ref): no GOT load
/// (`local.rs`).
static VIEW: AtomicU64 = AtomicU64::new(0);

/// The process's arena, reserved on first use.
pub(crate) fn get() -> Result<&'static Arena, OsError> {
    match ARENA.get_or_init(|| {
        let r = Arena::reserve();
        if let Ok(a) = &r {
            // Release: pairs with the Acquire in `owner_entry`; the committed map is visible to
            // a reader that sees the word.
            VIEW.store(a.word(), Ordering::Release);
        }
        r
    }) {
        Ok(a) => Ok(a),
        Err(e) => Err(*e),
    }
}

impl Arena {
    fn reserve() -> Result<Arena, OsError> {
        let mut len = ARENA_MAX;
        let base = loop {
            match os::reserve(len, CHUNK_SIZE) {
                Ok(p) => break p,
                Err(e) if len <= ARENA_MIN => return Err(e),
                Err(_) => len /= 2,
            }
        };
        let nchunks = len >> CHUNK_SHIFT;
        // The arena word's halves: the base's chunk index and the chunk count, both below 2^32
        // (a reservation without an address hint lies below 2^47, even with 5-level paging).
        if (base.as_ptr() as usize >> CHUNK_SHIFT) >= 1 << 32 || nchunks >= 1 << 32 {
            // SAFETY: `base` is the reservation made above, unused.
            unsafe { os::unmap(base, len) };
            return Err(OsError {
                call: "mmap(arena reservation above 2^54: beyond the arena word)",
                errno: libc::ENOMEM,
            });
        }
        let map_len = os::round_up(nchunks * ENTRY, os::page_size());
        // The map in the first chunks, never handed out (`bump` starts after them).
        let map_chunks = map_len.div_ceil(CHUNK_SIZE);
        // SAFETY: the first `map_len` bytes of our fresh reservation, page aligned.
        if let Err(e) = unsafe { os::commit(base, map_len) } {
            // SAFETY: `base` is the reservation made above, unused.
            unsafe { os::unmap(base, len) };
            return Err(e);
        }
        debug_assert!(map_chunks < nchunks);
        Ok(Arena {
            base: base.as_ptr() as usize,
            len,
            map: base.as_ptr().cast(),
            bump: AtomicUsize::new(map_chunks),
            first: map_chunks,
            free: Mutex::new(0),
            next_tag: AtomicU64::new(1),
        })
    }

    /// The arena in one word (module docs): the base's chunk index | the chunk count << 32.
    pub(crate) fn word(&self) -> u64 {
        (self.base >> CHUNK_SHIFT) as u64 | ((self.len >> CHUNK_SHIFT) as u64) << 32
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

    /// Hands a committed chunk to the keg with `tag` and `hint` (see the module docs). The
    /// chunk's memory reads as zeros.
    pub(crate) fn alloc_chunk(&self, tag: u64, hint: u64) -> Result<NonNull<u8>, OsError> {
        debug_assert!(tag != 0 && tag & 1 == 0);
        // Injected failures hit every chunk acquisition, also a reused chunk that needs no commit.
        if os::fault::should_fail() {
            return Err(OsError {
                call: "arena chunk (injected)",
                errno: libc::ENOMEM,
            });
        }
        let nchunks = self.len >> CHUNK_SHIFT;
        let mut head = crate::sync::lock(&self.free);
        let idx = if *head != 0 {
            let idx = *head - 1;
            let e = self.entry(idx).load(Ordering::Relaxed);
            debug_assert!(e & 1 == 1);
            *head = (e >> 1) as usize;
            idx
        } else {
            let idx = self.bump.load(Ordering::Relaxed);
            if idx >= nchunks {
                return Err(OsError {
                    call: "arena (address space exhausted)",
                    errno: libc::ENOMEM,
                });
            }
            let p = self.base + (idx << CHUNK_SHIFT);
            // SAFETY: the chunk lies inside our reservation and is chunk (hence page) aligned.
            unsafe { os::commit(NonNull::new_unchecked(p as *mut u8), CHUNK_SIZE)? };
            self.bump.store(idx + 1, Ordering::Relaxed);
            // The chunk map is touched a page at a time as chunks are first used (the first
            // chunk's entry shares its page with the map's own entries, never written).
            if idx == self.first || (idx * ENTRY).is_multiple_of(os::page_size()) {
                os::add_metadata(os::page_size());
            }
            idx
        };
        // Release: the C entry points' `free` reads the hint alone (`Zone::free_fast_plain`,
        // Acquire); for the others it is published by the Release store of the tag just below.
        self.map_entry(idx).hint.store(hint, Ordering::Release);
        // Release: a thread that reads this tag (tag_of, Acquire) sees the chunk's header, which
        // the keg initialises before publishing any item of the chunk, and the hint.
        self.entry(idx).store(tag, Ordering::Release);
        // SAFETY: inside the reservation, non-null.
        Ok(unsafe { NonNull::new_unchecked((self.base + (idx << CHUNK_SHIFT)) as *mut u8) })
    }

    /// Takes a chunk back: its pages are given back to the OS and it goes on the free list.
    ///
    /// # Safety
    /// `chunk` must have come from [`Arena::alloc_chunk`] and nothing may use it any more.
    pub(crate) unsafe fn free_chunk(&self, chunk: NonNull<u8>) {
        let idx = (chunk.as_ptr() as usize - self.base) >> CHUNK_SHIFT;
        // SAFETY: the caller guarantees the chunk is ours and unused.
        unsafe { os::release(chunk, CHUNK_SIZE) };
        let mut head = crate::sync::lock(&self.free);
        // The hint first: a free chunk matches no zone's stacks (`Zone::free_fast_plain` tests
        // the hint alone; a zone made later may get a destroyed zone's stacks' address).
        self.map_entry(idx).hint.store(0, Ordering::Release);
        // Release: pairs with the Acquire loads in `tag_of` and the fast path's item check; a
        // reader that sees the "free" mark (odd value) sees the chunk given back (no stale
        // header can pass for a keg's). The free-list link in the entry itself is read under
        // the `free` mutex only.
        self.entry(idx)
            .store(((*head as u64) << 1) | 1, Ordering::Release);
        *head = idx + 1;
    }
}

/// The tag of the keg owning the chunk that holds `addr`, or 0 when no keg of this process's
/// arena owns it (outside the arena, never handed out, or free). Reads only the chunk map,
/// never `addr`: what a malloc's `free(ptr)` uses to find the size class of any pointer, with
/// [`crate::Zone::tag_raw`] giving each zone's tag. 0 too when the arena could not be reserved.
#[inline(always)]
pub fn owner_tag(addr: usize) -> u64 {
    owner_entry(addr).0
}

/// [`owner_tag`] and the owning keg's hint (see the module docs): `(0, 0)` where `owner_tag`
/// gives 0. The hint is that of the keg the tag names (or, if the chunk changed hands since,
/// of a later owner: only after the owning zone was destroyed).
#[inline(always)]
pub fn owner_entry(addr: usize) -> (u64, u64) {
    // Acquire: pairs with the Release store in `get`.
    let word = crate::local_ref!(VIEW).load(Ordering::Acquire);
    // SAFETY: VIEW holds 0 until the arena exists, then its word.
    let Some(e) = (unsafe { map_entry_of(word, addr) }) else {
        return (0, 0);
    };
    // Acquire: as in `Arena::tag_of` (and the hint, stored before the tag, is visible).
    let t = e.tag.load(Ordering::Acquire);
    if t & 1 == 1 {
        (0, 0)
    } else {
        (t, e.hint.load(Ordering::Relaxed))
    }
}

/// The chunk map entry of the chunk holding `addr` in the arena of `word`, `None` outside it.
/// Reads nothing but the word it is given: the caller has loaded it (the fast paths keep it
/// among a zone's constants).
///
/// # Safety
/// `word` is 0 (no arena: every address is outside) or the process's [`Arena::word`].
#[inline(always)]
pub(crate) unsafe fn map_entry_of(word: u64, addr: usize) -> Option<&'static MapEntry> {
    let base_idx = word as u32 as usize;
    let idx = (addr >> CHUNK_SHIFT).wrapping_sub(base_idx);
    if idx >= (word >> 32) as usize {
        return None;
    }
    // SAFETY: `word` is the arena's (caller) and idx < its chunk count, so the entry lies in
    // the chunk map, which starts at the base (`base_idx << CHUNK_SHIFT`) and lives as long as
    // the process.
    Some(unsafe { &*((base_idx << CHUNK_SHIFT) as *const MapEntry).add(idx) })
}

/// The chunk map entry of the chunk holding `addr` in the arena at `base` of `len` bytes,
/// `None` outside it: [`map_entry_of`] for a caller that keeps the base and the length apart
/// (a zone's fast-path constants: each is then the memory operand of the instruction that
/// uses it, where the word took three shifts and two moves to take apart; docs/benchmarks.md,
/// "The stacks' address as the owner test").
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
mod tests {
    use super::*;

    #[test]
    fn chunks_are_tagged_and_reused() {
        let a = get().unwrap();
        let t1 = a.new_tag();
        let t2 = a.new_tag();
        assert!(t1 != t2 && t1 & 1 == 0 && t2 & 1 == 0);
        let c1 = a.alloc_chunk(t1, 0x1000).unwrap();
        assert_eq!(c1.as_ptr() as usize % CHUNK_SIZE, 0);
        assert_eq!(a.tag_of(c1.as_ptr() as usize + 12345), t1);
        assert_eq!(a.tag_of(0x1000), 0, "outside the arena");
        let inside = c1.as_ptr() as usize + 777;
        assert_eq!(
            owner_entry(inside),
            (t1, 0x1000),
            "the tag and the keg's hint"
        );
        assert_eq!(owner_entry(0x1000), (0, 0));
        // SAFETY: c1 came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c1) };
        assert_eq!(
            a.tag_of(c1.as_ptr() as usize),
            0,
            "free chunks belong to nobody"
        );
        assert_eq!(owner_entry(inside), (0, 0), "nor their hints");
        let c2 = a.alloc_chunk(t2, 0).unwrap();
        assert_eq!(a.tag_of(c2.as_ptr() as usize), t2);
        // SAFETY: c2 came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c2) };
    }

    /// The arena's one word finds every address's entry: nothing below the base or from the
    /// end on, the map's own chunk owned by nobody and never handed out, and a chunk's entry at
    /// the map (the base) plus 16 bytes per chunk.
    #[test]
    fn the_arena_word_bounds_the_arena_and_finds_the_map() {
        let a = get().unwrap();
        let w = a.word();
        assert_eq!((w as u32 as usize) << CHUNK_SHIFT, a.base);
        assert_eq!((w >> 32) as usize, a.len >> CHUNK_SHIFT);
        assert_eq!(a.map as usize, a.base, "the map is the arena's first chunk");
        // SAFETY (every call below): `w` is the arena's word, 0 is "no arena".
        let entry = |w: u64, a: usize| unsafe { map_entry_of(w, a) };
        assert!(entry(w, a.base - 1).is_none(), "below the base");
        assert!(entry(w, a.base + a.len).is_none(), "the end");
        assert!(entry(w, usize::MAX).is_none());
        assert!(entry(w, 0).is_none());
        assert!(
            entry(0, a.base + CHUNK_SIZE).is_none(),
            "no arena: nothing inside"
        );
        let e0 = entry(w, a.base + 5).expect("the map's own chunk is inside");
        assert_eq!(e0 as *const MapEntry, a.map);
        assert_eq!(
            e0.tag.load(Ordering::Relaxed),
            0,
            "the map's chunk belongs to nobody"
        );
        assert_eq!(owner_entry(a.base + 64), (0, 0));
        let t = a.new_tag();
        let c = a.alloc_chunk(t, 0x2000).unwrap();
        let addr = c.as_ptr() as usize;
        assert!(
            addr >= a.base + CHUNK_SIZE,
            "the map's chunk is never handed out"
        );
        let e = entry(w, addr + CHUNK_SIZE - 1).unwrap();
        assert_eq!(
            e as *const MapEntry as usize,
            a.base + ((addr - a.base) >> CHUNK_SHIFT) * ENTRY
        );
        assert_eq!(owner_entry(addr + 99), (t, 0x2000));
        // SAFETY: c came from alloc_chunk and is unused.
        unsafe { a.free_chunk(c) };
    }

    /// The base and the length find the same entries as the word, and nothing outside; a chunk
    /// given back keeps no hint (the C entry points' `free` tests the hint alone, and a later
    /// zone's stacks may reuse a destroyed zone's address).
    #[test]
    fn base_and_length_find_the_entries_and_a_free_chunk_has_no_hint() {
        let a = get().unwrap();
        let w = a.word();
        // SAFETY (every call below): the arena's base and length, or (0, 0) for "no arena".
        let entry_in = |b: usize, l: usize, x: usize| unsafe { map_entry_in(b, l, x) };
        assert!(
            entry_in(a.base, a.len, a.base - 1).is_none(),
            "below the base"
        );
        assert!(entry_in(a.base, a.len, a.base + a.len).is_none(), "the end");
        assert!(entry_in(a.base, a.len, 0).is_none(), "NULL");
        assert!(entry_in(a.base, a.len, usize::MAX).is_none());
        assert!(entry_in(0, 0, a.base + CHUNK_SIZE).is_none(), "no arena");
        let c = a.alloc_chunk(a.new_tag(), 0x3000).unwrap();
        let addr = c.as_ptr() as usize;
        for x in [
            a.base,
            a.base + 7,
            addr,
            addr + CHUNK_SIZE / 2,
            a.base + a.len - 1,
        ] {
            let by_len = entry_in(a.base, a.len, x).map(|e| e as *const MapEntry);
            // SAFETY: the arena's word.
            let by_word = unsafe { map_entry_of(w, x) }.map(|e| e as *const MapEntry);
            assert_eq!(by_len, by_word, "address {x:#x}");
        }
        let e = entry_in(a.base, a.len, addr + 5).unwrap();
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
}
