//! The fast paths: one rseq critical section per operation, no lock, no system call, no
//! allocation. There is one of each, [`FastConsts::alloc_fast`] and [`FastConsts::free_fast`],
//! generic over their [`Caller`]: what the caller has already established (the chunk's owner,
//! that the zone is not careful) and where the critical section takes the stacks' base and the
//! rseq offset from. Each says why it missed ([`AllocMiss`], [`FastFree`]), and the slow path
//! resumes from there (`alloc_careful`/`alloc_slow`, [`Zone::free_raw_resume`]) without testing
//! the pointer or trying the stack again: as FreeBSD's `cache_free`, the fast path either
//! finishes or answers once why not.

use super::{unlikely, Zone, ZoneInner};
use crate::arena::ChunkOwner;
use crate::error::{AllocError, InvalidFree};
use crate::pcpu::{Push, RseqRef};
use crate::sync::Ordering;
use core::ffi::c_void;
use core::ptr::NonNull;

/// Where a critical section takes the per-CPU stacks' base from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// The constants' copy, by value: a Rust caller keeps it in a register across a loop of
    /// calls (the section's `asm!` may write memory, so a load through the zone would be
    /// repeated after each).
    Own,
    /// Loaded from the constants inside the section: fewer live registers for a caller that
    /// keeps nothing across calls (a C entry point).
    InPlace,
    /// The chunk map entry's hint (`arena.rs`, "The hint"; a free only, an allocation reads in
    /// place): for a caller that finds the constants through the pointer (chunk map, then a
    /// table indexed by the tag), the push then waits for the entry's load, not the table's.
    Hint,
}

/// A caller of the fast paths, as a type: the paths are monomorphised per caller, and each
/// constant removes a test or picks an operand at compile time (snmalloc's `LocalCache::alloc`
/// with its slow path passed in is the model).
pub trait Caller {
    /// The caller found the constants by the chunk's tag (its table is keyed by the tag), so
    /// the chunk is the zone's: the owner test is left out.
    const OWNER_TESTED: bool;
    /// The caller knows the zone is not careful (only such a zone has [`FastConsts`] for a
    /// table; the C API's handle bit): the careful test is left out.
    const NOT_CAREFUL: bool;
    /// The rseq offset from the process's static rather than the constants: the same value
    /// (a zone in rseq mode exists only once glibc's offset is known); the static's load does
    /// not wait for the chain that found the constants.
    const STATIC_OFF: bool;
    /// Where the stacks' base comes from.
    const BASE: Base;
    /// The free marks the item as freed in its first word ([`free_key`]), and takes an item
    /// that already carries the mark for a double free to confirm ([`FastFree::Suspect`]);
    /// the allocation clears the mark. glibc's tcache key: a double free is caught whenever the
    /// item is still cached, not only when it is the top of this CPU's stack. For a caller
    /// whose items are ordinary memory of its users (the malloc), so the free may write
    /// them; the other callers never touch an item's memory.
    const KEYED: bool = false;
}

/// The mark a [`Caller::KEYED`] free writes into an item's first word: random per process
/// (never 0), so a user's data equals it by chance only (and a suspect is confirmed before it
/// is reported). Set by [`Zone::fast_consts_raw`], before the constants of any zone can reach
/// a keyed caller; the fast paths read it relaxed (it never changes once set).
#[cfg(not(loom))]
static FREE_KEY: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The process's free mark ([`Caller::KEYED`]); 0 before any zone handed out constants.
#[cfg(not(loom))]
#[inline(always)]
pub fn free_key() -> u64 {
    // Through `local_ref!`: no GOT load before it (`local.rs`).
    crate::local_ref!(FREE_KEY).load(core::sync::atomic::Ordering::Relaxed)
}

/// Sets [`FREE_KEY`] once: 64 random bits from the kernel (a clock-derived fallback where
/// `getrandom` fails), never 0.
#[cfg(not(loom))]
fn init_free_key() {
    use core::sync::atomic::Ordering::Relaxed;
    if FREE_KEY.load(Relaxed) != 0 {
        return;
    }
    let mut k = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `k`, which it may.
    let got = unsafe { libc::getrandom((&mut k as *mut u64).cast(), 8, libc::GRND_NONBLOCK) };
    if got != 8 {
        k = crate::os::now_ns() ^ 0x9e37_79b9_7f4a_7c15;
    }
    // Never 0 (a common value of a user's first word); any racing initialiser's value is as
    // good, so the first store wins and the others keep it.
    let _ = FREE_KEY.compare_exchange(0, k | 1 << 63, Relaxed, Relaxed);
}

/// Clears the free mark of an item just allocated ([`Caller::KEYED`]): for a keyed caller's
/// allocations that do not go through [`FastConsts::alloc_fast`] (its slow paths).
///
/// # Safety
/// `p` is an item of at least 8 bytes that the caller has just allocated.
#[inline(always)]
pub unsafe fn clear_free_key(p: *mut u8) {
    // SAFETY: the caller's item, at least 8 bytes and aligned to 8 (every item size is a
    // multiple of 8 from an aligned slab).
    unsafe { p.cast::<u64>().write(0) };
}

/// [`Zone::alloc`] and [`Zone::free`] on a handle, and their raw forms.
pub enum Handle {}
impl Caller for Handle {
    const OWNER_TESTED: bool = false;
    const NOT_CAREFUL: bool = false;
    const STATIC_OFF: bool = false;
    const BASE: Base = Base::Own;
}

/// A raw zone pointer that may be careful, read in place ([`Zone::alloc_fast_raw`] from a
/// caller that holds nothing across calls).
pub enum Raw {}
impl Caller for Raw {
    const OWNER_TESTED: bool = false;
    const NOT_CAREFUL: bool = false;
    const STATIC_OFF: bool = false;
    const BASE: Base = Base::InPlace;
}

/// A raw zone pointer its caller knows is not careful (the C API, by its handle's bit).
pub enum Plain {}
impl Caller for Plain {
    const OWNER_TESTED: bool = false;
    const NOT_CAREFUL: bool = true;
    const STATIC_OFF: bool = false;
    const BASE: Base = Base::InPlace;
}

/// [`FastConsts`] kept in a table keyed by the chunk's tag (the malloc's `free` finds them
/// through the pointer, its `malloc` by the size class).
pub enum Table {}
impl Caller for Table {
    const OWNER_TESTED: bool = true;
    const NOT_CAREFUL: bool = true;
    const STATIC_OFF: bool = true;
    const BASE: Base = Base::Hint;
    const KEYED: bool = true;
}

/// Why [`FastConsts::alloc_fast`] returned no item; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocMiss {
    /// The zone is careful (hooks, checked, zeroing, locked mode): the careful path.
    Careful,
    /// This CPU's stack is empty, stopped or closed: the slow path.
    Empty,
}

/// What [`FastConsts::free_fast`] did; anything but `Done` changed nothing, and
/// [`Zone::free_raw_resume`] finishes the free from there without repeating the test or the
/// push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FastFree {
    /// On this CPU's stack: done.
    Done,
    /// Not an item start of the zone (another owner's chunk, outside the arena, NULL, the
    /// chunk's metadata, inside an item).
    Invalid,
    /// The zone is careful (hooks, checked, zeroing, locked mode): the careful path.
    Careful,
    /// This CPU's stack is full or closed: the slow path.
    Full,
    /// The item is the top of this CPU's stack: an immediate double free.
    Duplicate,
    /// The item already carries the free mark ([`Caller::KEYED`]): a double free of a cached
    /// item, or by chance a user's word equal to the mark; the slow path looks for the item in
    /// the caches to tell which.
    Suspect,
}

/// Everything the fast paths read, fixed at the zone's creation: kept by value in the zone, in
/// every [`Zone`] handle (through [`Fast`]) and in a caller's own tables
/// ([`Zone::fast_consts_raw`]). Plain data (no interior mutability), so the compiler may keep
/// it in registers across a loop of calls; valid as long as its zone is not destroyed.
///
/// With an 8-byte key before it (the malloc's table entries), everything up to the tag lies
/// in the entry's first 64 bytes.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct FastConsts {
    pub(super) pcpu: RseqRef,
    /// Bytes of a chunk's slabs (`slabs_per_chunk << slab_shift`).
    pub(super) slabs_len: u64,
    /// `item_check(item_size, items_per_slab)`.
    pub(super) item_magic: u64,
    pub(super) item_bound: u64,
    /// `slab_size - 1`.
    pub(super) slab_mask: u32,
    /// `C_*` bits: any set bit sends both operations to their careful paths.
    pub(super) careful: u32,
    pub(super) tag: u64,
}

// What the malloc reads of a table entry (its 8-byte key, then `FastConsts` up to the tag) lies
// in the entry's first 64 bytes.
const _: () = assert!(core::mem::offset_of!(FastConsts, tag) + 8 <= 64);

/// A zone's [`FastConsts`] and the arena's base and length, by which a handle finds the chunk
/// map entry of a pointer it is given (a caller with a table reads the arena's static view).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Fast {
    pub(super) c: FastConsts,
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
    /// The chunk map entry of the chunk holding `a` (all zero outside the arena, so NULL and
    /// foreign pointers have tag 0, which no keg has).
    #[inline(always)]
    pub(super) fn owner(&self, a: usize) -> ChunkOwner {
        // SAFETY: the arena's base and length, copied from it when the zone was made (the
        // arena lives as long as the process).
        match unsafe { crate::arena::map_entry_in(self.arena_base, self.arena_len, a) } {
            None => ChunkOwner::default(),
            Some(e) => ChunkOwner {
                // Acquire: pairs with the Release store of the tag in `Arena::alloc_chunk`: the
                // hint and start word, stored before it, are the tag's.
                tag: e.tag.load(Ordering::Acquire),
                hint: e.hint.load(Ordering::Relaxed),
                start: e.start.load(Ordering::Relaxed),
            },
        }
    }

    /// O(1) check that `a` is the start of an item of this zone, reading only the chunk map:
    /// the fast path's own test ([`FastConsts::owns_item`]).
    #[inline(always)]
    pub(super) fn is_item(&self, a: usize) -> bool {
        self.c.owns_item::<false>(a, &self.owner(a))
    }
}

impl FastConsts {
    /// The item/owner test, the only one: the chunk is the zone's (its tag, unless `TESTED`:
    /// the caller compared it), `a` lies inside the chunk's slabs (`a - start` below their
    /// length; below the first slab it wraps far above) and at an item's start within its slab
    /// (one multiply and one compare, [`item_check`]). Each test its own predictable branch:
    /// folded into one flag they cost more instructions than they save.
    #[inline(always)]
    fn owns_item<const TESTED: bool>(&self, a: usize, o: &ChunkOwner) -> bool {
        if !TESTED && unlikely(o.tag != self.tag) {
            return false;
        }
        let rel = (a as u64).wrapping_sub(o.start);
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

    /// The fast path of an allocation: an item from this CPU's stack, or why not (nothing
    /// changed). Never runs a hook, takes a lock or panics, so a C entry point needs no unwind
    /// guard around it.
    ///
    /// # Safety
    /// The zone these constants belong to is not destroyed; if `C::NOT_CAREFUL`, it is not
    /// careful.
    #[inline(always)]
    pub unsafe fn alloc_fast<C: Caller>(&self) -> Result<NonNull<u8>, AllocMiss> {
        if C::NOT_CAREFUL {
            debug_assert_eq!(self.careful, 0);
        } else if unlikely(self.careful != 0) {
            return Err(AllocMiss::Careful);
        }
        // SAFETY: careful == 0 (tested, or the caller's guarantee) means C_LOCKED is clear: the
        // per-CPU layer is in rseq mode, and the zone (so its stacks) is live (caller).
        let p = unsafe {
            match (C::BASE, C::STATIC_OFF) {
                (Base::Own, _) => self.pcpu.pop(),
                (_, true) => RseqRef::pop_in_place::<true>(&self.pcpu),
                (_, false) => RseqRef::pop_in_place::<false>(&self.pcpu),
            }
        };
        let p = NonNull::new(p).ok_or(AllocMiss::Empty)?;
        if C::KEYED {
            // SAFETY: popped just now: the caller's item (items are at least 8 bytes).
            unsafe { clear_free_key(p.as_ptr()) };
        }
        Ok(p)
    }

    /// The fast path of a free of `p` (any pointer, NULL included), whose chunk map entry the
    /// caller read ([`crate::owner_entry_raw`], or a handle's own view of the map): the owner
    /// and item tests, the careful test, one push. `Done`, or why not, with nothing changed.
    /// Reads the chunk map, never `p`'s memory. Never runs a hook, takes a lock or panics.
    ///
    /// # Safety
    /// The zone these constants belong to is not destroyed; if `C::NOT_CAREFUL`, it is not
    /// careful; if `C::OWNER_TESTED`, `o.tag` is this zone's tag; if `p` is an item of the
    /// zone, the caller owns it and does not use it after `Done`.
    #[inline(always)]
    pub unsafe fn free_fast<C: Caller>(&self, p: *mut u8, o: &ChunkOwner) -> FastFree {
        if C::OWNER_TESTED {
            debug_assert_eq!(o.tag, self.tag);
        }
        let owned = if C::OWNER_TESTED {
            self.owns_item::<true>(p as usize, o)
        } else {
            self.owns_item::<false>(p as usize, o)
        };
        if unlikely(!owned) {
            return FastFree::Invalid;
        }
        if C::NOT_CAREFUL {
            debug_assert_eq!(self.careful, 0);
        } else if unlikely(self.careful != 0) {
            return FastFree::Careful;
        }
        if C::KEYED {
            let key = free_key();
            debug_assert_ne!(key, 0);
            let w = p.cast::<u64>();
            // SAFETY: `p` passed the owner and item tests: an item start of this zone, in a
            // mapped slab (a slab's pages are mapped before its items are handed out and only
            // ever dropped with MADV_DONTNEED, which reads back zeros), 8-aligned and at least
            // 8 bytes. Its first word is the caller's item's (owned, or already free: either
            // way nobody else writes it until it is handed out again, which the push below
            // orders after this store).
            unsafe {
                if unlikely(w.read() == key) {
                    return FastFree::Suspect;
                }
                w.write(key);
            }
        }
        // SAFETY: careful == 0: rseq mode; the zone is live (caller). `p` passed the owner and
        // item tests, so it is an item start of this zone (not NULL), and the chunk's hint is
        // this zone's stacks' base (a chunk's hint is its keg's zone's stacks, written before
        // the tag the owner test compared: `arena.rs`, "The hint").
        let pushed = unsafe {
            match (C::BASE, C::STATIC_OFF) {
                (Base::Own, _) => self.pcpu.push(p),
                (Base::InPlace, true) => RseqRef::push_in_place::<true>(&self.pcpu, p),
                (Base::InPlace, false) => RseqRef::push_in_place::<false>(&self.pcpu, p),
                (Base::Hint, true) => RseqRef::push_at::<true>(&self.pcpu, o.hint, p),
                (Base::Hint, false) => RseqRef::push_at::<false>(&self.pcpu, o.hint, p),
            }
        };
        match pushed {
            Push::Done => FastFree::Done,
            Push::Full => FastFree::Full,
            Push::Duplicate => FastFree::Duplicate,
        }
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

impl ZoneInner {
    /// An allocation past its fast path's `miss`: the careful or the slow path.
    #[inline(always)]
    fn alloc_missed(&self, miss: AllocMiss) -> Result<NonNull<u8>, AllocError> {
        match miss {
            AllocMiss::Careful => self.alloc_careful(),
            AllocMiss::Empty => self.alloc_slow(),
        }
    }

    /// A free past its fast path, from where it stopped (`how`): the pointer is not tested
    /// again and the stack not tried again.
    #[cold]
    #[inline(never)]
    fn free_missed(&self, p: *mut u8, how: FastFree) -> Result<(), InvalidFree> {
        let a = p as usize;
        match how {
            FastFree::Done => Ok(()),
            FastFree::Invalid => Err(self.invalid_now(a)),
            FastFree::Careful => self.free_careful(p),
            FastFree::Full => self.free_slow(p),
            FastFree::Duplicate => Err(self.duplicate_now(a)),
            FastFree::Suspect => self.free_suspect(p),
        }
    }

    /// [`Zone::free`]'s body for the zone's constants `f` (a handle's copy or the zone's own).
    ///
    /// # Safety
    /// As [`Zone::free`].
    #[inline(always)]
    unsafe fn free_by(&self, f: &Fast, p: NonNull<u8>) -> Result<(), InvalidFree> {
        let o = f.owner(p.as_ptr() as usize);
        // SAFETY: `f` is this live zone's constants; the rest forwarded.
        match unsafe { f.c.free_fast::<Handle>(p.as_ptr(), &o) } {
            FastFree::Done => Ok(()),
            how => self.free_missed(p.as_ptr(), how),
        }
    }
}

impl Zone {
    /// Allocates one item. Fast path: one rseq critical section, no lock, no system call.
    #[inline(always)]
    pub fn alloc(&self) -> Result<NonNull<u8>, AllocError> {
        // SAFETY: the handle keeps its zone alive; `Handle` assumes nothing of the zone.
        match unsafe { self.fast.c.alloc_fast::<Handle>() } {
            Ok(p) => Ok(p),
            Err(miss) => self.inner().alloc_missed(miss),
        }
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
        // SAFETY: the handle keeps its zone alive; `p` forwarded.
        unsafe { self.inner().free_by(&self.fast, p) }
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
        // SAFETY: the zone's own constants, live; `Handle` assumes nothing of the zone.
        match unsafe { z.fast.c.alloc_fast::<Handle>() } {
            Ok(p) => Ok(p),
            Err(miss) => z.alloc_missed(miss),
        }
    }

    /// [`Zone::free`] on a raw zone pointer (the C API).
    ///
    /// # Safety
    /// As [`Zone::alloc_raw`] for `z`, and as [`Zone::free`] for `p`.
    #[inline(always)]
    pub unsafe fn free_raw(z: *mut c_void, p: NonNull<u8>) -> Result<(), InvalidFree> {
        // SAFETY: a live zone (caller's guarantee).
        let z = unsafe { &*z.cast::<ZoneInner>() };
        // SAFETY: the zone's own constants; `p` forwarded.
        unsafe { z.free_by(&z.fast, p) }
    }

    /// Only the fast path of [`Zone::alloc_raw`] for caller `C` ([`Raw`], or [`Plain`] for a
    /// zone the caller knows is not careful): an item, or why not (then [`Zone::alloc_raw`]
    /// does the whole allocation).
    ///
    /// # Safety
    /// As [`Zone::alloc_raw`]; with [`Plain`], the zone is not careful
    /// ([`Zone::fast_consts_raw`] gave `Some`).
    #[inline(always)]
    pub unsafe fn alloc_fast_raw<C: Caller>(z: *mut c_void) -> Result<NonNull<u8>, AllocMiss> {
        // SAFETY: a live zone (caller's guarantee); `C`'s assumptions forwarded.
        unsafe { (*z.cast::<ZoneInner>()).fast.c.alloc_fast::<C>() }
    }

    /// Only the fast path of [`Zone::free_raw`] for caller `C`, of any pointer (NULL and
    /// foreign pointers fail its owner test: [`FastFree::Invalid`]): `Done`, or where
    /// [`Zone::free_raw_resume`] goes on. Never panics, runs no hook, takes no lock.
    ///
    /// # Safety
    /// As [`Zone::free_raw`] when `p` is not null; `C` may not be [`Table`] (the owner is
    /// tested here), and with [`Plain`] the zone is not careful.
    #[inline(always)]
    pub unsafe fn free_fast_raw<C: Caller>(z: *mut c_void, p: *mut u8) -> FastFree {
        const { assert!(!C::OWNER_TESTED, "free_fast_raw tests the owner itself") };
        // SAFETY: a live zone (caller's guarantee).
        let f = unsafe { &(*z.cast::<ZoneInner>()).fast };
        let o = f.owner(p as usize);
        // SAFETY: a live zone; the owner is tested by the fast path (`C::OWNER_TESTED` false);
        // careful or not as `C` says (caller); `p` forwarded.
        unsafe { f.c.free_fast::<C>(p, &o) }
    }

    /// A copy of the fast-path constants of a raw zone, for a caller that keeps them in its own
    /// table (one dependent load fewer per call than through the zone's address); `None` for a
    /// careful zone (hooks, checked, zeroing, locked mode), whose every operation takes the
    /// careful path: such a caller leaves its entry empty and goes the zone's way
    /// ([`Zone::alloc_raw`], [`Zone::free_raw`]).
    ///
    /// # Safety
    /// As [`Zone::alloc_raw`].
    pub unsafe fn fast_consts_raw(z: *mut c_void) -> Option<FastConsts> {
        // SAFETY: a live zone (caller's guarantee).
        let f = unsafe { (*z.cast::<ZoneInner>()).fast };
        // Before any keyed caller can use these constants.
        #[cfg(not(loom))]
        init_free_key();
        (f.c.careful == 0).then_some(f.c)
    }

    /// Finishes a free that a fast path of `z` did not complete, from where it stopped (`how`,
    /// what it returned): the pointer is not tested again and the stack not tried again.
    ///
    /// # Safety
    /// As [`Zone::free_raw`]; `how` is what [`FastConsts::free_fast`] of `z`'s constants (or
    /// [`Zone::free_fast_raw`] of `z`) returned for `p` just now.
    #[inline(never)]
    pub unsafe fn free_raw_resume(
        z: *mut c_void,
        p: NonNull<u8>,
        how: FastFree,
    ) -> Result<(), InvalidFree> {
        // SAFETY: a live zone (caller's guarantee).
        let z = unsafe { &*z.cast::<ZoneInner>() };
        z.free_missed(p.as_ptr(), how)
    }

    /// The tag of the zone's keg: [`crate::owner_tag`] returns it for every address inside the
    /// zone's chunks (item or not), and no other keg of the process has it.
    ///
    /// # Safety
    /// As [`Zone::alloc_raw`].
    #[inline(always)]
    pub unsafe fn tag_raw(z: *mut c_void) -> u64 {
        // SAFETY: a live zone (caller's guarantee).
        unsafe { (*z.cast::<ZoneInner>()).fast.c.tag }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{item_check, passes_item_check, FastFree, Table};
    use crate::slab::Geometry;
    use crate::zone::{Zone, ZoneFlags, ZoneOptions};

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
        // The first allocation of a fresh zone misses (empty stack): the slow path fills the
        // stack, then the constants' fast path serves.
        // SAFETY: `plain` is a live zone.
        let p = unsafe { Zone::alloc_raw(plain) }.unwrap();
        // SAFETY: `f` are the constants of the live zone `plain`, which is not careful (it has
        // constants).
        let q = unsafe { f.alloc_fast::<Table>() }
            .expect("the stack the slow path filled serves the fast path")
            .as_ptr();
        let o = crate::owner_entry(q as usize);
        assert_eq!(o.tag, f.tag());
        // SAFETY: q is an item of this zone, its chunk's entry read just now; freed once.
        assert_eq!(unsafe { f.free_fast::<Table>(q, &o) }, FastFree::Done);
        // Not an item start (inside p's item, in the same chunk as q): refused, nothing changed.
        let inside = p.as_ptr().wrapping_add(8);
        assert_eq!(
            o,
            crate::owner_entry(inside as usize),
            "p and q share a chunk"
        );
        // SAFETY: live constants of a zone that is not careful; `o` is `inside`'s chunk's entry,
        // which has the zone's tag; the fast path only tests the address and refuses it.
        let how = unsafe { f.free_fast::<Table>(inside, &o) };
        assert_eq!(how, FastFree::Invalid);
        // The chunk's metadata, below the first slab (the start word): refused.
        let chunk = q as usize & !(crate::arena::CHUNK_SIZE - 1);
        assert!(
            (chunk as u64) < o.start,
            "the slabs start after the metadata"
        );
        for meta in [chunk, chunk + 64, o.start as usize - 64] {
            // SAFETY: live constants of a zone that is not careful; `o` is the entry of q's chunk,
            // which holds `meta` and has the zone's tag; the address is only tested, refused.
            let how = unsafe { f.free_fast::<Table>(meta as *mut u8, &o) };
            assert_eq!(how, FastFree::Invalid, "{meta:#x}");
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
