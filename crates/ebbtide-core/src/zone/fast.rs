//! The fast paths: one rseq critical section per operation, no lock, no system call, no
//! allocation. A zone's constants for them ([`Fast`]) are kept by value in the zone and in every
//! handle; anything unusual (hooks, checked or zeroing zones, locked mode) sets a `careful` bit
//! and goes to the slow paths (`slow.rs`) with one test.

use super::{unlikely, Zone, ZoneInner};
use crate::arena::CHUNK_SIZE;
use crate::error::{AllocError, InvalidFree};
use crate::pcpu::{Push, RseqRef};
use crate::sync::Ordering;
use core::ffi::c_void;
use core::ptr::{self, NonNull};

/// Everything `Zone::alloc` and `Zone::free` read on their fast paths, fixed at creation. Kept by
/// value in the zone and in each [`Zone`] handle: a handle is immutable plain data (no interior
/// mutability), so the compiler may keep these in registers across a loop of allocations, where
/// loads through the zone object would be repeated after every critical section (its `asm!`
/// may write memory).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Fast {
    pub(super) pcpu: RseqRef,
    // The item test's fields next (offsets within a 4 MiB chunk, packed two to a word).
    /// The slabs' range within a chunk, both ends in one word so that `free` reads them with
    /// one load (the C entry points are bound by their loads, docs/benchmarks.md, "Loads, not
    /// instructions"): the offset of the first slab in the low 32 bits, the end of the last
    /// slab relative to it (`slabs_per_chunk << slab_shift`) in the high 32. Kept packed
    /// where the C entry points ran as fast with the four halves apart: the Rust paths keep
    /// these in registers across a loop, and four more registers cost them spills
    /// (docs/benchmarks.md, "The stacks' address as the owner test").
    pub(super) slab_range: u64,
    /// `slab_size - 1` in the low 32 bits, `item_check(item_size, items_per_slab).1` (the
    /// bound, below the slab size, so below 2^32) in the high 32: one load for both.
    pub(super) mask_bound: u64,
    /// `item_check(item_size, items_per_slab).0`.
    pub(super) item_magic: u64,
    /// `C_*` bits: any set bit sends both operations to their careful paths.
    pub(super) careful: u32,
    pub(super) tag: u64,
    /// The arena's base (where its chunk map starts) and its length in bytes
    /// ([`crate::arena::map_entry_in`]).
    pub(super) arena_base: usize,
    pub(super) arena_len: usize,
}

/// The constants of the item-start test: for `x` below the slab size (< 2^32),
/// `x * magic (mod 2^64) < bound` iff `x = q * d` with `q < n` (`d` = item size, `n` = items per
/// slab).
///
/// With `magic = ceil(2^64 / d)` and `e = d * magic - 2^64` (0 <= e < d), a multiple `x = q * d`
/// gives `x * magic = q * e (mod 2^64)`, and any other `x < 2^32` gives at least `magic`
/// (Lemire, Kaser, Kurz, "Faster remainder by direct computation", 2019). For `d` not a power of
/// two, `e > 0`, so `q < n` iff `q * e < n * e`, and `n * e < n * d <= slab < magic` keeps
/// non-multiples out. For a power of two, `e = 0` and `d` divides the slab (no tail), so every
/// multiple below the slab size is an item: bound 1 (only `x * magic = 0`).
pub(crate) fn item_check(d: usize, n: usize) -> (u64, u64) {
    let d = d as u64;
    let magic = (u64::MAX / d).wrapping_add(1);
    if d.is_power_of_two() {
        (magic, 1)
    } else {
        let e = d.wrapping_mul(magic);
        (magic, n as u64 * e)
    }
}

/// The item-start test with [`item_check`]'s constants: is the offset `x` within a slab the
/// start of one of its items?
#[inline(always)]
pub(crate) fn passes_item_check(x: u32, magic: u64, bound: u64) -> bool {
    (x as u64).wrapping_mul(magic) < bound
}

impl Fast {
    /// O(1) check that `a` is the start of an item of this zone, reading only the chunk map.
    #[inline(always)]
    pub(super) fn is_item(&self, a: usize) -> bool {
        // SAFETY: the arena's base and length (copied from it when the zone was made).
        let Some(e) = (unsafe { crate::arena::map_entry_in(self.arena_base, self.arena_len, a) })
        else {
            return false;
        };
        // Acquire: pairs with the Release store of the tag in `Arena::alloc_chunk` (the chunk's
        // header is initialised before its tag is published).
        let chunk_tag = e.tag.load(Ordering::Acquire);
        if unlikely(chunk_tag != self.tag) {
            return false;
        }
        self.is_item_in_chunk(a)
    }

    /// The part of [`Fast::is_item`] after the chunk's tag: `a` lies in a chunk of this zone's
    /// keg (the caller read its tag); is it an item start?
    #[inline(always)]
    pub(super) fn is_item_in_chunk(&self, a: usize) -> bool {
        // Each test its own predictable branch: folded into one flag (`setcc`/`and`) they cost
        // more instructions than they save.
        // In 32 bits: the offset within the chunk (< 2^22) and the fields are u32 (64-bit
        // arithmetic on zero-extended fields cost two instructions more). An offset below the
        // first slab wraps to at least 2^32 - 2^22, far above the slabs' end, so the range
        // test still refuses it.
        let range = self.slab_range;
        let rel = ((a as u32) & (CHUNK_SIZE as u32 - 1)).wrapping_sub(range as u32);
        if unlikely(rel >= (range >> 32) as u32) {
            return false;
        }
        // One multiply and one compare for "a multiple of the item size, below the slab's last
        // item" (see `item_check`).
        let mask_bound = self.mask_bound;
        passes_item_check(rel & mask_bound as u32, self.item_magic, mask_bound >> 32)
    }
}

/// The fast path of [`Zone::alloc`]: `f` is the zone's [`Fast`] (the handle's copy or the zone's
/// own), `z` the zone.
#[inline(always)]
pub(super) fn alloc_with(f: &Fast, z: &ZoneInner) -> Result<NonNull<u8>, AllocError> {
    if !unlikely(f.careful != 0) {
        // SAFETY: careful == 0 means C_LOCKED is clear: the per-CPU layer is in rseq mode.
        let p = unsafe { f.pcpu.pop() };
        if !unlikely(p.is_null()) {
            // SAFETY: non-null checked above.
            return Ok(unsafe { NonNull::new_unchecked(p) });
        }
        return z.alloc_slow();
    }
    z.alloc_careful()
}

/// The fast path of [`Zone::free`] (arguments as in [`alloc_with`]).
///
/// # Safety
/// As [`Zone::free`].
#[inline(always)]
pub(super) unsafe fn free_with(f: &Fast, z: &ZoneInner, p: NonNull<u8>) -> Result<(), InvalidFree> {
    let a = p.as_ptr() as usize;
    if unlikely(!f.is_item(a)) {
        return Err(z.invalid_now(a));
    }
    if !unlikely(f.careful != 0) {
        // SAFETY: careful == 0: rseq mode (as in `alloc_with`).
        return match unsafe { f.pcpu.push(p.as_ptr()) } {
            Push::Done => Ok(()),
            Push::Full => z.free_slow(p.as_ptr()),
            Push::Duplicate => Err(z.duplicate_now(a)),
        };
    }
    z.free_careful(p.as_ptr())
}

/// The body of [`Zone::alloc_fast_raw`] (the zone's own offset: the C API has the zone in a
/// register; see `RseqRef::pop_in_place`).
///
/// # Safety
/// `f` is the constants of a live zone.
#[inline(always)]
unsafe fn alloc_fast_in(f: &Fast) -> *mut u8 {
    if f.careful != 0 {
        return ptr::null_mut();
    }
    // SAFETY: careful == 0: rseq mode. The in-place form reads the base inside the section: a
    // C call keeps nothing in registers, and fewer live registers spare the entry point a save
    // and restore.
    unsafe { RseqRef::pop_in_place::<false>(&f.pcpu) }
}

/// The rest of [`Zone::free_fast_raw`], once the item test is done (`is_item`): the careful
/// test, then the push onto this CPU's stack (the offset as in `RseqRef::pop_in_place`).
///
/// # Safety
/// `f` is the constants of a live zone; as [`Zone::free_raw`] for `p`; `is_item` is true only
/// if `p` is the start of an item of the zone.
#[inline(always)]
unsafe fn push_if_item(f: &Fast, p: NonNull<u8>, is_item: bool) -> FastFree {
    if unlikely(!is_item) {
        return FastFree::Invalid;
    }
    if unlikely(f.careful != 0) {
        return FastFree::Careful;
    }
    // SAFETY: careful == 0: rseq mode; the item passed the check. In-place form: as in
    // `alloc_fast_in`.
    match unsafe { RseqRef::push_in_place::<false>(&f.pcpu, p.as_ptr()) } {
        Push::Done => FastFree::Done,
        Push::Full => FastFree::Full,
        Push::Duplicate => FastFree::Duplicate,
    }
}

/// A copy of one zone's fast-path constants, for a caller that keeps its zones in tables of its
/// own and looks one up on every call (the malloc: by size class, and by the tag of the chunk
/// a freed block lies in). Kept in such a table, the fast paths read the constants from the
/// entry, whose address is computed from the index, instead of first loading the zone's address
/// from a table and then the constants from the zone: one dependent load less per call.
///
/// Plain data (no interior mutability); valid as long as the zone it was copied from
/// ([`Zone::fast_consts_raw`]) is not destroyed. The slow paths still need the zone itself.
///
/// Only a zone whose fast paths apply has them: a careful zone (hooks, checked, zeroing,
/// locked mode: fixed at creation) has none, so these paths skip the careful test (a load, a
/// compare and a branch each), and `free_fast_owned` returns no reason: with both, the malloc
/// suite's `live_small` ran 6 % and `pair_mixed` 19 % faster (docs/benchmarks.md, "Fewer
/// instructions on the malloc's fast paths").
///
/// **Its own layout, not a copy of the zone's `Fast`.** Its `free` takes the offset from the
/// chunk's first slab from the chunk's start word (`arena.rs`, "The start word"), whose entry
/// that caller loads anyway for the tag, and compares with each figure in a word of its own, as
/// a memory operand: 4 instructions fewer than `Fast`'s packed test (counting the start word's
/// load), and the malloc suite's `pair_mixed` and `live_small` ran 2-4 % faster
/// (docs/benchmarks.md, "The start word"). `Fast` keeps its packed test: the C entry point reads
/// no tag, and there the start word put the entry's load on the item test's chain (its pair
/// cases ran 3-4 % slower).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct FastConsts {
    pub(super) pcpu: RseqRef,
    // Everything the malloc's `malloc` and `free` read, so that with an 8-byte key before it
    // (its table entries) all of it lies in an entry's first 64 bytes.
    /// Bytes of a chunk's slabs (`slabs_per_chunk << slab_shift`).
    pub(super) slabs_len: u64,
    /// `item_check(item_size, items_per_slab)`.
    pub(super) item_magic: u64,
    pub(super) item_bound: u64,
    /// `slab_size - 1`.
    pub(super) slab_mask: u32,
    /// `C_*` bits: always 0 (only a zone that is not careful has these constants).
    careful: u32,
    tag: u64,
}

// What the malloc reads of a table entry (its 8-byte key, then `FastConsts` up to the tag) lies
// in the entry's first 64 bytes.
const _: () = assert!(core::mem::offset_of!(FastConsts, tag) + 8 <= 64);

impl FastConsts {
    /// [`Zone::alloc_fast_raw`] of the zone these constants were copied from: an item from
    /// this CPU's stack, or null (stack empty).
    ///
    /// # Safety
    /// The zone must not be destroyed.
    #[inline(always)]
    pub unsafe fn alloc_fast(&self) -> *mut u8 {
        debug_assert_eq!(self.careful, 0);
        // SAFETY: constants exist only for a zone that is not careful (`fast_consts_raw`):
        // rseq mode. In-place form: as in `alloc_fast_in`.
        unsafe { RseqRef::pop_in_place::<true>(&self.pcpu) }
    }

    /// The fast path of [`Zone::free_raw`] for the zone these constants were copied from, for a
    /// caller that has already read the entry of the chunk holding `p` ([`crate::owner_entry`])
    /// and found its tag to be this zone's ([`FastConsts::tag`]), as a malloc's `free` does to
    /// find the zone: the arena and tag tests are not repeated, only the range and item tests
    /// by the entry's `start` word, and the push finds the stacks from the entry's `hint`
    /// (`arena.rs`, "The hint", "The start word").
    /// True when `p` is on this CPU's stack; false changed nothing (not an item, the stack full
    /// or closed, or `p` its top: an immediate double free), and [`Zone::free_raw`] then does
    /// the whole free, reporting what was wrong.
    ///
    /// # Safety
    /// As [`Zone::free_raw`] for that zone; [`crate::owner_entry`] of `p` gave this zone's tag
    /// with `hint` and `start`.
    #[inline(always)]
    pub unsafe fn free_fast_owned(&self, p: NonNull<u8>, hint: u64, start: u64) -> bool {
        debug_assert_eq!(self.careful, 0);
        if unlikely(!self.is_item_from(p.as_ptr() as usize, start)) {
            return false;
        }
        // SAFETY: constants exist only for a zone that is not careful (`fast_consts_raw`): rseq
        // mode; `p` passed the range and item tests by its chunk's start word, which the
        // caller's tag test completes; the hint is the zone's (its chunk's entry, whose tag is
        // the zone's).
        let pushed = unsafe { RseqRef::push_at::<true>(&self.pcpu, hint, p.as_ptr()) };
        matches!(pushed, Push::Done)
    }

    /// Is `a`, in a chunk of this zone whose start word is `start`, the start of an item?
    /// `a - start` below the slabs' length is inside the slabs (below the first slab it wraps
    /// far above); then the item start within its slab, as in `Fast::is_item_in_chunk`.
    #[inline(always)]
    fn is_item_from(&self, a: usize, start: u64) -> bool {
        let rel = (a as u64).wrapping_sub(start);
        // Each test its own predictable branch (as in `Fast::is_item_in_chunk`).
        if unlikely(rel >= self.slabs_len) {
            return false;
        }
        // The offset in the slab in 32 bits: `rel` is below the slabs' length, so below 2^22.
        passes_item_check(
            (rel as u32) & self.slab_mask,
            self.item_magic,
            self.item_bound,
        )
    }

    /// The word the chunk map entries of this zone's chunks carry beside the tag (its per-CPU
    /// stacks; `arena.rs`, "The hint"); never 0.
    pub fn stacks_hint(&self) -> u64 {
        self.pcpu.hint()
    }

    /// The tag of the zone's chunks (as [`Zone::tag_raw`]).
    pub fn tag(&self) -> u64 {
        self.tag
    }
}

/// `x`, hidden from the optimiser: equal in value, but the compiler cannot tell, so it cannot
/// replace one by the other (costs at most a register move).
#[inline(always)]
fn opaque(mut x: u64) -> u64 {
    // SAFETY: an empty assembly block: reads and writes nothing but the register it is given.
    unsafe {
        core::arch::asm!("/* {0} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags));
    }
    x
}

/// What [`Zone::free_fast_raw`] did; anything but `Done` changed nothing, and
/// [`Zone::free_raw_resume`] finishes the free from there without repeating the check or the
/// push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FastFree {
    /// On this CPU's stack: done.
    Done,
    /// Not an item of the zone.
    Invalid,
    /// The zone is careful (hooks, checked, zeroing, locked mode): the careful path.
    Careful,
    /// This CPU's stack is full or closed: the slow path.
    Full,
    /// The item is the top of this CPU's stack: an immediate double free.
    Duplicate,
}

impl Zone {
    /// Allocates one item. Fast path: one rseq critical section, no lock, no system call.
    #[inline(always)]
    pub fn alloc(&self) -> Result<NonNull<u8>, AllocError> {
        alloc_with(&self.fast, self.inner())
    }

    /// Frees an item of this zone.
    ///
    /// The pointer is checked in O(1) without touching its memory: outside this zone's slabs,
    /// inside slab metadata, or not at the start of an item → `Err`, nothing changed. A double free
    /// is caught at once in checked mode (`ZoneFlags::CHECKED` or the `checked` tunable), and
    /// otherwise when the item reaches its slab (reported on stderr and counted, never applied).
    ///
    /// # Safety
    /// If `p` is a valid item of this zone, the caller must own it (allocated and not freed) and
    /// not use it afterwards.
    #[inline(always)]
    pub unsafe fn free(&self, p: NonNull<u8>) -> Result<(), InvalidFree> {
        // SAFETY: forwarded.
        unsafe { free_with(&self.fast, self.inner(), p) }
    }

    /// [`Zone::alloc`] on a raw zone pointer (the C API), reading the fast-path constants in
    /// place rather than copying them into a handle first.
    ///
    /// # Safety
    /// `z` must come from [`Zone::into_raw`] and the zone must not be destroyed meanwhile.
    #[inline(always)]
    pub unsafe fn alloc_raw(z: *mut c_void) -> Result<NonNull<u8>, AllocError> {
        // SAFETY: a live zone (caller's guarantee).
        let z = unsafe { &*z.cast::<ZoneInner>() };
        alloc_with(&z.fast, z)
    }

    /// Only the fast path of [`Zone::alloc_raw`]: the item from this CPU's stack, or null when
    /// the stack is empty or the zone is careful (then call [`Zone::alloc_raw`]). Never runs a
    /// hook, takes a lock or panics, so a C entry point needs no unwind guard around it.
    ///
    /// # Safety
    /// As [`Zone::alloc_raw`].
    #[inline(always)]
    pub unsafe fn alloc_fast_raw(z: *mut c_void) -> *mut u8 {
        // SAFETY: a live zone (caller's guarantee).
        unsafe { alloc_fast_in(&(*z.cast::<ZoneInner>()).fast) }
    }

    /// Only the fast path of [`Zone::free_raw`]: [`FastFree::Done`] when `p` passed the item
    /// check and went onto this CPU's stack; anything else changed nothing and says where to
    /// go on ([`Zone::free_raw_resume`]). Never panics, runs no hook, takes no lock.
    ///
    /// # Safety
    /// As [`Zone::free_raw`].
    #[inline(always)]
    pub unsafe fn free_fast_raw(z: *mut c_void, p: NonNull<u8>) -> FastFree {
        // SAFETY: forwarded (a non-null pointer is one case of the other's).
        unsafe { Zone::free_fast_raw_ptr(z, p.as_ptr()) }
    }

    /// [`Zone::free_fast_raw`] of a pointer that may be null (C's `free(NULL)`): null lies below
    /// every arena, so it fails the item test as any pointer from elsewhere does
    /// ([`FastFree::Invalid`]), and the caller needs no test of its own before this one.
    ///
    /// # Safety
    /// As [`Zone::free_raw`] when `p` is not null.
    #[inline(always)]
    pub unsafe fn free_fast_raw_ptr(z: *mut c_void, p: *mut u8) -> FastFree {
        // SAFETY: a live zone (caller's guarantee).
        let f = unsafe { &(*z.cast::<ZoneInner>()).fast };
        // `is_item(0)`: `0 - arena_base` wraps to at least `arena_len` (the arena does not reach
        // the end of the address space), so null is never an item.
        if unlikely(!f.is_item(p as usize)) {
            return FastFree::Invalid;
        }
        // SAFETY: `p` passed the item test, so it is not null; the rest forwarded. The zone's
        // own offset: the C API has the zone in a register (see `RseqRef::pop_in_place`).
        unsafe { push_if_item(f, NonNull::new_unchecked(p), true) }
    }

    /// [`Zone::alloc_fast_raw`] for a zone its caller knows is not careful (the C API: a bit of
    /// its handle), without the `careful` test: one load fewer per call.
    ///
    /// # Safety
    /// As [`Zone::alloc_raw`], and the zone is not careful ([`Zone::fast_consts_raw`] gave
    /// `Some`).
    #[inline(always)]
    pub unsafe fn alloc_fast_plain(z: *mut c_void) -> *mut u8 {
        // SAFETY: a live zone (caller's guarantee).
        let f = unsafe { &(*z.cast::<ZoneInner>()).fast };
        debug_assert_eq!(f.careful, 0);
        // SAFETY: not careful (caller): rseq mode. The stacks' base is loaded before the
        // section, not inside it (`pop_in_place`): the compiler then reads it from the zone
        // with a displacement from the handle's register instead of first forming the zone's
        // address for the section's operand (one instruction fewer).
        unsafe { f.pcpu.pop() }
    }

    /// The fast path of `ebb_zone_free` for a zone its caller knows is not careful: true when
    /// `p` passed the item check and went onto this CPU's stack; false changed nothing (not an
    /// item of the zone, the stack full or closed, `p` its top, or NULL), and
    /// [`Zone::free_raw`] then does the whole free, checking the pointer again. Unlike
    /// [`Zone::free_fast_raw`] it makes no `careful` test and says nothing of why: one load
    /// fewer per call. Never panics, runs no hook, takes no lock.
    ///
    /// **The owner test by the stacks' address.** Where `Fast::is_item` compares the chunk's
    /// tag with the zone's, this compares the chunk's hint (the owning zone's per-CPU stacks,
    /// `arena.rs`, "The hint") with the zone's stacks' base, which the push needs anyway: one
    /// load of the zone fewer, and the push's base in a register (docs/benchmarks.md, "The
    /// stacks' address as the owner test"). Equal hints mean the same keg: every keg of a zone
    /// carries its own zone's stacks, which no other live zone shares (each has its own
    /// mapping), kegs without stacks carry 0, a chunk never handed out reads 0, and a chunk
    /// given back has its hint cleared before it is marked free (`Arena::free_chunk`), so a
    /// later zone whose stacks reuse a destroyed zone's address never matches that zone's old
    /// chunks.
    ///
    /// # Safety
    /// As [`Zone::free_raw`] when `p` is not null, and the zone is not careful
    /// ([`Zone::fast_consts_raw`] gave `Some`).
    #[inline(always)]
    pub unsafe fn free_fast_plain(z: *mut c_void, p: *mut u8) -> bool {
        // SAFETY: a live zone (caller's guarantee).
        let f = unsafe { &(*z.cast::<ZoneInner>()).fast };
        debug_assert_eq!(f.careful, 0);
        // Null lies below the arena (as in `free_fast_raw_ptr`).
        // SAFETY: the arena's base and length (copied from it when the zone was made).
        let Some(e) =
            (unsafe { crate::arena::map_entry_in(f.arena_base, f.arena_len, p as usize) })
        else {
            return false;
        };
        let base = f.pcpu.hint();
        // Acquire: pairs with the Release store of the hint in `Arena::alloc_chunk` (as the tag
        // in `is_item`; the push reads nothing of the chunk, so this is for symmetry only).
        // Compared with an opaque copy of the base: past an equality test the compiler may use
        // either side for the other, and the push must take the base loaded from the zone, not
        // the one loaded through the pointer (in a pair of calls the pointer comes late, and a
        // push waiting for it ran 4.83 against 3.30 ns: docs/benchmarks.md, "Loads, not
        // instructions", last paragraph).
        if unlikely(e.hint.load(Ordering::Acquire) != opaque(base)) {
            return false;
        }
        if unlikely(!f.is_item_in_chunk(p as usize)) {
            return false;
        }
        // SAFETY: not careful (caller): rseq mode; `p` passed the owner and item tests (so it
        // is not null); `base` is the zone's own stacks' hint.
        let pushed = unsafe { RseqRef::push_at::<false>(&f.pcpu, base, p) };
        matches!(pushed, Push::Done)
    }

    /// A copy of the fast-path constants of a raw zone, for a caller that keeps them in its own
    /// table ([`FastConsts`]); `None` for a careful zone (hooks, checked, zeroing, locked mode),
    /// whose every operation takes the careful path: such a caller leaves its entry empty and
    /// goes the zone's way ([`Zone::alloc_raw`], [`Zone::free_raw`]).
    ///
    /// # Safety
    /// As [`Zone::alloc_raw`].
    pub unsafe fn fast_consts_raw(z: *mut c_void) -> Option<FastConsts> {
        // SAFETY: a live zone (caller's guarantee).
        let f = unsafe { (*z.cast::<ZoneInner>()).fast };
        (f.careful == 0).then_some(FastConsts {
            pcpu: f.pcpu,
            slabs_len: f.slab_range >> 32,
            item_magic: f.item_magic,
            item_bound: f.mask_bound >> 32,
            slab_mask: f.mask_bound as u32,
            careful: f.careful,
            tag: f.tag,
        })
    }

    /// Finishes a free that [`Zone::free_fast_raw`] did not complete, from where it stopped
    /// (`how`, what it returned): the pointer is not checked again and the stack not tried
    /// again.
    ///
    /// # Safety
    /// As [`Zone::free_raw`]; `how` must be what `free_fast_raw(z, p)`, or
    /// [`FastConsts::free_fast_owned`] of `z`'s constants, returned just now.
    #[inline(never)]
    pub unsafe fn free_raw_resume(
        z: *mut c_void,
        p: NonNull<u8>,
        how: FastFree,
    ) -> Result<(), InvalidFree> {
        // SAFETY: a live zone (caller's guarantee).
        let z = unsafe { &*z.cast::<ZoneInner>() };
        let a = p.as_ptr() as usize;
        match how {
            FastFree::Done => Ok(()),
            FastFree::Invalid => Err(z.invalid_now(a)),
            FastFree::Careful => z.free_careful(p.as_ptr()),
            FastFree::Full => z.free_slow(p.as_ptr()),
            FastFree::Duplicate => Err(z.duplicate_now(a)),
        }
    }

    /// The tag of the zone's keg: [`crate::owner_tag`] returns it for every address inside the
    /// zone's chunks (item or not), and no other keg of the process has it.
    ///
    /// # Safety
    /// As [`Zone::alloc_raw`].
    #[inline(always)]
    pub unsafe fn tag_raw(z: *mut c_void) -> u64 {
        // SAFETY: a live zone (caller's guarantee).
        unsafe { (*z.cast::<ZoneInner>()).fast.tag }
    }

    /// [`Zone::free`] on a raw zone pointer (the C API).
    ///
    /// # Safety
    /// As [`Zone::alloc_raw`] for `z`, and as [`Zone::free`] for `p`.
    #[inline(always)]
    pub unsafe fn free_raw(z: *mut c_void, p: NonNull<u8>) -> Result<(), InvalidFree> {
        // SAFETY: a live zone (caller's guarantee); `p` forwarded.
        unsafe {
            let z = &*z.cast::<ZoneInner>();
            free_with(&z.fast, z, p)
        }
    }
}

#[cfg(all(test, not(loom)))]
#[cfg(all(test, not(loom)))]
mod tests {
    use super::{item_check, passes_item_check};
    use crate::slab::Geometry;
    use crate::zone::{Zone, ZoneFlags, ZoneOptions};
    use core::ptr::NonNull;

    /// A careful zone has no fast-path constants (their paths skip the careful test); a plain
    /// zone's constants allocate and free through them.
    #[test]
    fn only_a_zone_that_is_not_careful_has_fast_constants() {
        let careful = Zone::new(ZoneOptions::new("consts-checked", 64).flags(ZoneFlags::CHECKED))
            .unwrap()
            .into_raw();
        // SAFETY: a live zone, never destroyed in this test.
        let consts = unsafe { Zone::fast_consts_raw(careful) };
        assert!(consts.is_none());
        let plain = Zone::new(ZoneOptions::new("consts-plain", 64))
            .unwrap()
            .into_raw();
        // SAFETY: `plain` is a live zone, never destroyed in this test.
        let f = unsafe { Zone::fast_consts_raw(plain) }.expect("a plain zone has constants");
        // SAFETY: `plain` is a live zone. The first allocation of a fresh zone misses (empty
        // stack): the slow path fills the stack, then the constants' fast path serves.
        let p = unsafe { Zone::alloc_raw(plain) }.unwrap();
        // SAFETY: `f` are the constants of the live zone `plain`.
        let q = unsafe { f.alloc_fast() };
        assert!(
            !q.is_null(),
            "the stack the slow path filled serves the fast path"
        );
        let o = crate::owner_entry(q as usize);
        assert_eq!(o.tag, f.tag());
        // SAFETY: q is an item of this zone, its chunk's entry read just now; freed once.
        let freed = unsafe { f.free_fast_owned(NonNull::new(q).unwrap(), o.hint, o.start) };
        assert!(freed);
        // Not an item start: refused, nothing changed.
        // SAFETY: an address inside p's item; the fast path only tests it.
        let inside = unsafe { NonNull::new_unchecked(p.as_ptr().add(8)) };
        // SAFETY: `inside` is not an item start; the fast path tests it and refuses.
        let freed = unsafe { f.free_fast_owned(inside, o.hint, o.start) };
        assert!(!freed);
        // The chunk's metadata, below the first slab (the start word): refused.
        let chunk = q as usize & !(crate::arena::CHUNK_SIZE - 1);
        assert!(
            (chunk as u64) < o.start,
            "the slabs start after the metadata"
        );
        for meta in [chunk, chunk + 64, o.start as usize - 64] {
            // SAFETY: an address in q's chunk; the fast path only tests it.
            let m = unsafe { NonNull::new_unchecked(meta as *mut u8) };
            // SAFETY: `m` lies in the chunk's metadata; the fast path tests it and refuses.
            let freed = unsafe { f.free_fast_owned(m, o.hint, o.start) };
            assert!(!freed, "{meta:#x}");
        }
        // SAFETY: p is an item of this zone, freed once.
        unsafe { Zone::free_raw(plain, p).unwrap() };
    }

    /// The one-compare item test agrees with "multiple of the size, below the last item" at every
    /// offset of the slab, for every 8-aligned size up to 4 KiB and a spread of larger ones.
    #[test]
    pub(super) fn item_check_is_exact() {
        let sizes = (8..=4096).step_by(8).chain([
            4104,
            5000 & !7,
            8192,
            12288,
            65536 - 8,
            65536,
            100_000,
            1 << 20,
        ]);
        for d in sizes {
            let g = Geometry::for_item(d);
            let (magic, bound) = item_check(g.item_size, g.items_per_slab);
            for x in 0..g.slab_size {
                let fast = passes_item_check(x as u32, magic, bound);
                let slow = x % d == 0 && x / d < g.items_per_slab;
                assert_eq!(fast, slow, "size {d}, offset {x}, slab {}", g.slab_size);
            }
        }
    }
}
