//! The heap: one zone per size class, created on first use, and the operations of `malloc` on
//! them. Everything here is reached from the C names (`api.rs`), the C++ operators (`cpp.rs`)
//! and the Rust allocator (`global.rs`).
//!
//! ## Finding a block's class
//! `free(p)` has no size and no zone: the core's chunk map gives the tag of the keg owning the
//! 4 MiB chunk around `p` and, beside it, the zone's per-CPU stacks' hint
//! ([`ebbtide_core::owner_entry_raw`], one load, never touching `p`); a table of 4096 bytes maps
//! tags to classes, and `TAG_FAST` tags to the zones' constants. The push onto this CPU's
//! stack takes the stacks' address from the entry's hint, so it waits for one load after the
//! pointer, not two (the constants feed only tests that branch); the item test takes the
//! pointer's offset from the chunk's first slab from the entry's start word, read with them.
//! Tags are handed out in order of keg creation and never reused; the first zones of a process
//! have small tags. A tag past the table (more than 4095 kegs made before a class's zone:
//! possible only in a program that also makes thousands of zones itself) is found by comparing
//! the classes' tags one by one.
//!
//! ## Creating a class's zone inside an allocation
//! The zone is created on the first request for its class, under one mutex, without the
//! runtime's creation hook (which may allocate and start threads): only system calls. If that
//! creation re-enters `malloc` on the same thread (a library allocating under us), the nested
//! request is served from the bootstrap area (`bootstrap.rs`); other threads wait on the mutex.
//! The zone pointer is published with Release after the zone and its tag entry are complete;
//! the fast path loads it with Acquire.

use crate::classes::{self, NCLASSES};
use crate::{bootstrap, huge, report};
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::mem::MaybeUninit;
use core::ptr::{self, NonNull};
use ebbtide_core::os::{errno, set_errno};
use ebbtide_core::spin::SpinLock;
use ebbtide_core::zone::{clear_free_key, FastConsts, FastFree, Raw, Table};
use ebbtide_core::{InvalidFree, Zone, ZoneOptions};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicU8, Ordering};

/// Requests up to this many bytes take a size class; above it a block of the page heap
/// (`huge.rs`, `pageheap.rs`), where memory freed by one size serves any other without page
/// faults. The classes above it (to 1 MiB) serve only aligned requests that fit no smaller
/// class, never more than this many bytes.
pub const SMALL_MAX: usize = 64 << 10;

static ZONES: [AtomicPtr<c_void>; NCLASSES] = [const { AtomicPtr::new(ptr::null_mut()) }; NCLASSES];

pub(crate) const TAGS: usize = 4096;
/// `class + 1` for the keg tag `2 * i`; 0 = no class of ours.
static TAG_CLASS: [AtomicU8; TAGS] = [const { AtomicU8::new(0) }; TAGS];
/// The fast-path constants of every class's zone, and of the zone of each keg tag: `malloc` and
/// `free` read them from the entry of their class or tag (an address computed from the index),
/// not through the zone's address loaded from `ZONES` first: one dependent load less on each
/// path (see [`FastConsts`]). A tag's entry is published after `TAG_CLASS` and `ZONES`, so
/// whoever sees it finds the zone as `ZONES[TAG_CLASS[i] - 1]` (the slow paths past `free`'s).
pub(crate) static CLASS_FAST: [FastSlot; NCLASSES] = [const { FastSlot::empty() }; NCLASSES];
pub(crate) static TAG_FAST: [FastSlot; TAGS] = [const { FastSlot::empty() }; TAGS];

/// A table entry of [`CLASS_FAST`] / [`TAG_FAST`]: a zone's constants, published by `key`. Two
/// cache lines, so that no entry shares a line with another's; the key first, so that what
/// `malloc` and `free` read of an entry (the key, the stacks' base, the item test, the tag)
/// lies in its first line (the core's `FastConsts` keeps them within 56 bytes).
#[repr(C, align(128))]
pub(crate) struct FastSlot {
    /// [`FastSlot::EMPTY`] until `consts` is written; then the zone's tag.
    key: AtomicU64,
    consts: UnsafeCell<MaybeUninit<FastConsts>>,
}

// SAFETY: `consts` is written once, by the zone's creator under the creation lock, before `key`
// is stored with Release; it is read only after `key` was seen set with Acquire, and never
// written again (a zone is never destroyed, a class or tag never gets a second zone).
unsafe impl Sync for FastSlot {}

impl FastSlot {
    const fn empty() -> FastSlot {
        FastSlot {
            consts: UnsafeCell::new(MaybeUninit::uninit()),
            key: AtomicU64::new(Self::EMPTY),
        }
    }

    /// The key of an entry not published: no word of the chunk map ever reads so (keg tags are
    /// even; a free chunk's odd word holds the next free chunk's index, far below 2^63; 0 is
    /// memory nobody owns), so `free` looks the map's word up as it is ([`owner_entry_raw`]),
    /// with no test of its own for 0 or odd.
    ///
    /// [`owner_entry_raw`]: ebbtide_core::owner_entry_raw
    pub(crate) const EMPTY: u64 = u64::MAX;

    /// Publishes the constants (once, under the creation lock).
    fn publish(&self, c: FastConsts) {
        // SAFETY: only the zone's creator writes, once, before the Release below; readers read
        // only after seeing the key (see the `Sync` impl).
        unsafe { (*self.consts.get()).write(c) };
        // Release: pairs with the Acquire in `get`.
        debug_assert!(c.tag() != 0 && c.tag() & 1 == 0);
        self.key.store(c.tag(), Ordering::Release);
    }

    /// The constants, if published with key `key` (a chunk map word: [`FastSlot::EMPTY`]
    /// never is one).
    #[inline(always)]
    fn get(&self, key: u64) -> Option<&FastConsts> {
        debug_assert_ne!(key, Self::EMPTY);
        // Acquire: pairs with the Release in `publish` (the constants are written).
        if self.key.load(Ordering::Acquire) == key {
            // SAFETY: published (the key is EMPTY until then, and `key` is not EMPTY).
            Some(unsafe { (*self.consts.get()).assume_init_ref() })
        } else {
            None
        }
    }

    /// The constants, if published at all.
    #[inline(always)]
    fn get_any(&self) -> Option<&FastConsts> {
        // Acquire: as in `get`.
        if self.key.load(Ordering::Acquire) != Self::EMPTY {
            // SAFETY: as in `get`.
            Some(unsafe { (*self.consts.get()).assume_init_ref() })
        } else {
            None
        }
    }
}

/// Some class's tag did not fit in `TAG_CLASS`.
static TAG_OVERFLOW: AtomicBool = AtomicBool::new(false);

/// The zone-creation lock: a spin lock (creation is rare and short) rather than a mutex, so a
/// forked child can reset it (see `fork.rs`): the creator may have been outside the core's fork
/// gate, holding it, when another thread forked.
static CREATE: SpinLock = SpinLock::new();

/// In a forked child (one thread): the creation lock and the creator are the parent's other
/// threads' business no more. A zone made but not yet published by such a thread is made
/// again when needed (the first stays unused).
///
/// A zone another thread of the parent had published in `ZONES` but not yet in the constants
/// tables is published there now (the child has one thread: no reader races the
/// write), so that its class keeps the fast paths.
pub fn fork_child() {
    CREATING.store(0, Ordering::Relaxed);
    // SAFETY: the child's one thread; a holder stayed in the parent.
    unsafe { CREATE.reset() };
    publish_missing_constants();
}

/// Publishes the constants of every zone that is in `ZONES` (with its tag in `TAG_CLASS`) but
/// not in `CLASS_FAST` / `TAG_FAST` (only a fork between the creator's stores leaves one so).
/// The caller must be the only writer of the tables (a forked child's one thread, or a zone no
/// other thread creates).
fn publish_missing_constants() {
    for c in 0..NCLASSES {
        let z = ZONES[c].load(Ordering::Acquire);
        if !z.is_null() && CLASS_FAST[c].get_any().is_none() {
            // SAFETY: a published zone, never destroyed. A careful zone has no constants.
            if let Some(f) = unsafe { Zone::fast_consts_raw(z) } {
                CLASS_FAST[c].publish(f);
            }
        }
    }
    for (i, slot) in TAG_FAST.iter().enumerate() {
        let c = TAG_CLASS[i].load(Ordering::Relaxed);
        if c == 0 {
            continue;
        }
        let z = ZONES[c as usize - 1].load(Ordering::Acquire);
        // The zone of the class may be a later one than the tag's (its first creator forked
        // away before publishing it): only the tag's own zone goes into the tag's entry.
        // SAFETY: a published zone (non-null checked first), never destroyed.
        if !z.is_null() && unsafe { Zone::tag_raw(z) } >> 1 == i as u64 && slot.get_any().is_none()
        {
            // SAFETY: `z` is a published zone (non-null, tested just above), never destroyed.
            if let Some(f) = unsafe { Zone::fast_consts_raw(z) } {
                slot.publish(f);
            }
        }
    }
}
/// The thread creating a zone now (0 = none): its nested requests go to the bootstrap area.
static CREATING: AtomicI32 = AtomicI32::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

enum Get {
    Zone(*mut c_void),
    /// Re-entered from this thread's own zone creation.
    Nested,
    Failed,
}

/// The zone of class `c`, created if needed.
fn zone(c: usize) -> Get {
    let z = ZONES[c].load(Ordering::Acquire);
    if !z.is_null() {
        return Get::Zone(z);
    }
    let tid = gettid();
    if CREATING.load(Ordering::Relaxed) == tid {
        return Get::Nested;
    }
    let _g = CREATE.lock();
    let z = ZONES[c].load(Ordering::Acquire);
    if !z.is_null() {
        return Get::Zone(z);
    }
    CREATING.store(tid, Ordering::Relaxed);
    if !STARTED.swap(true, Ordering::Relaxed) {
        // Before the first zone: checked mode as the environment asks (read in place).
        ebbtide_core::runtime::set_checked_by_default(crate::env::checked());
    }
    let mut name = [0u8; 24];
    let name = zone_name(&mut name, classes::size(c));
    let opts = ZoneOptions::new(name, classes::size(c))
        .align(classes::natural_align(c))
        .depot_max_items(depot_max_items(classes::size(c)))
        .bucket_items(bucket_items(classes::size(c)))
        .free_slabs_max_bytes(free_slabs_max_bytes(classes::size(c)));
    let opts = match reuse_floor_bytes(classes::size(c)) {
        Some(floor) => opts.reuse_floor_bytes(floor),
        None => opts,
    };
    // (A refused mapping is answered, and the creation tried once more, by `Zone::new`.)
    let r = Zone::new(opts.without_runtime_hook());
    // CREATING stays set until the result is handled: reporting a failure may allocate, and
    // a nested request must go to the bootstrap area, not wait for the lock this thread holds
    // (under `ulimit -v` it spun forever).
    let got = match r {
        Ok(zone) => {
            let raw = zone.into_raw();
            // SAFETY: a zone just created, never destroyed.
            let tag = unsafe { Zone::tag_raw(raw) };
            // SAFETY: `raw` is the zone just created, never destroyed. None for a careful zone
            // (checked mode): its entries stay empty and every call goes the zone's way.
            let consts = unsafe { Zone::fast_consts_raw(raw) };
            let i = (tag >> 1) as usize;
            if i < TAGS {
                TAG_CLASS[i].store(c as u8 + 1, Ordering::Relaxed);
            } else {
                TAG_OVERFLOW.store(true, Ordering::Relaxed);
            }
            // Release: pairs with the Acquire loads of `ZONES` (`zone`, the paths past `malloc`'s
            // and `free`'s) and `class_of_tag`: a thread that sees the zone sees it initialised
            // and its tag entry stored. The fast paths read the constants' entries, published
            // the same way after it (`FastSlot::publish`), so a thread that sees a tag's entry
            // also sees `ZONES[c]` (`free_resume_tag`).
            ZONES[c].store(raw, Ordering::Release);
            if let Some(consts) = consts {
                if i < TAGS {
                    TAG_FAST[i].publish(consts);
                }
                CLASS_FAST[c].publish(consts);
            }
            Get::Zone(raw)
        }
        Err(e) => {
            static REPORTED: AtomicBool = AtomicBool::new(false);
            if !REPORTED.swap(true, Ordering::Relaxed) {
                report::line(format_args!(
                    "cannot create the zone for {}-byte blocks: {e}; such requests take a \
                     larger class's free blocks or a mapping of their own, or fail with \
                     ENOMEM (reported once)",
                    classes::size(c)
                ));
            }
            Get::Failed
        }
    };
    CREATING.store(0, Ordering::Relaxed);
    got
}

/// Bytes of full buckets a class's depot holds at most (above it a flushed bucket goes back to
/// its slabs), for the classes up to [`CAPPED_MAX`].
///
/// Without a cap, everything a program frees in a class and does not allocate again stays in
/// that class's depot: `PYTHONMALLOC=malloc python3 workload.py` ended with 53 MB of free items
/// in depots, 30 MB of them 64-byte objects of a tree built and dropped at the start, which no
/// other class could use (docs/design/benchmarks-record.md, "Peak RSS: where the memory goes"). tcmalloc's
/// transfer cache, the same layer, holds at most 64 batches of a class (at most 32 objects
/// each); jemalloc has no such layer (its thread caches flush to the slabs).
pub const DEPOT_BYTES: usize = 256 * 1024;
/// Bytes of entirely free slabs a class keeps between reclaims: the slabs a free empties beyond
/// them leave the class's free list once the excess has lasted 10 ms, into the lazy decay (at
/// once back under pressure; the core's `keg::EXCESS_DELAY_MS`), and go back for good as soon
/// as another class, or a large block, needs fresh pages (the core's `make_room`), so memory
/// freed in one class stops counting in RSS while another class grows (jemalloc and tcmalloc
/// hand empty slabs/spans to pages every class shares; here each class has its own chunks, so
/// giving the pages back is the way across), and a class that takes them again first does so
/// without a fault.
pub const FREE_SLAB_BYTES: usize = 256 * 1024;

/// The largest class the page-sized caps ([`DEPOT_BYTES`], [`FREE_SLAB_BYTES`]) apply to. Above
/// it a block is a run of pages that a program frees and allocates again through several
/// classes in turn (a buffer grown by `realloc`), and giving an emptied slab's pages back at once
/// makes every reuse a fresh fault: `mallocbench --case realloc_grow --scale 0.3` went from 869
/// to 4 833 ns per call with these caps on every class, and `live_mixed` (16 B–16 KiB) from
/// 49–55 to 81 ns with them up to 32 KiB. The classes above a page up to [`MID_MAX`] get the
/// larger caps below.
pub const CAPPED_MAX: usize = 4096;

/// The largest class with a cap at all; above it (up to 64 KiB, then the page heap) a class
/// keeps what it caches until the idle pass, a trim or pressure.
pub const MID_MAX: usize = 16 * 1024;
/// The depot cap of the classes above [`CAPPED_MAX`] up to [`MID_MAX`], bytes (64 to 256 blocks).
pub const MID_DEPOT_BYTES: usize = 1 << 20;
/// The free-slab cap of the classes above [`CAPPED_MAX`] up to [`MID_MAX`], bytes.
///
/// `redis-server` under the suite's `redis-benchmark` frees 20 MB of 8 KiB blocks (its lists'
/// 8 KiB listpack nodes, `LPUSH` then `LPOP`) and allocates other classes afterwards: with no cap
/// above a page those 20 MB stayed in the 8 KiB class's depot and the server peaked at 86.7 MiB
/// (the peers 61.9–69.4); with these caps at 69.8 MiB, `live_mixed` (which replaces blocks of
/// 16 B–16 KiB at random) as fast as without them, where caps of a page's size (256 KiB) up to
/// 16 KiB gave 68.2 MiB but `live_mixed` 51–52 ns instead of 41–47 (alternated runs,
/// docs/design/benchmarks-record.md, "Caps for the classes up to 16 KiB").
pub const MID_FREE_SLAB_BYTES: usize = 2 << 20;

/// The floor of the caps that follow reuse (the classes above [`CAPPED_MAX`]): what a class
/// keeps in its depot, and in free slabs, however little a program takes again. 64 KiB: with
/// 256 KiB `redis` peaked 0.6 MiB higher (docs/design/benchmarks-record.md, "Caches bounded by
/// reuse").
pub const REUSE_FLOOR: usize = 64 * 1024;

/// Whether a class of `size`-byte blocks bounds its caches by reuse, and its floor: the classes
/// above [`CAPPED_MAX`] do (`ebbtide_core::reuse`).
///
/// Their fixed caps (1 MiB of depot and 2 MiB of free slabs up to [`MID_MAX`], none above) are
/// what a class swinging by a megabyte needs to run without faults (`live_mixed`, a `realloc`
/// growing a buffer through them), and what a class keeps after a program stopped using it:
/// `redis-server` under the suite's `redis-benchmark` kept 3.9 MB of the 8 KiB list nodes it
/// had popped (its depot and free slabs at their caps) through the sets and hashes that came
/// after (`ebbtide stat` after its `LPOP` phase). Bounded by the bytes taken again within a
/// period or two, a class keeps what it reuses and gives back what nobody takes: `redis`
/// 69.4 → 66.6 MiB, nothing slower. The classes up to a page keep their fixed caps of 256 KiB.
pub fn reuse_floor_bytes(size: usize) -> Option<usize> {
    (size > CAPPED_MAX).then_some(REUSE_FLOOR)
}

/// The depot cap of a class of `size`-byte blocks, in items (no cap above [`MID_MAX`]).
pub fn depot_max_items(size: usize) -> u64 {
    if size > MID_MAX {
        u64::MAX
    } else if size > CAPPED_MAX {
        (MID_DEPOT_BYTES / size) as u64
    } else {
        (DEPOT_BYTES / size) as u64
    }
}

/// The free-slab cap of a class of `size`-byte blocks, in bytes (none above [`MID_MAX`]).
pub fn free_slabs_max_bytes(size: usize) -> usize {
    if size > MID_MAX {
        usize::MAX
    } else if size > CAPPED_MAX {
        MID_FREE_SLAB_BYTES
    } else {
        FREE_SLAB_BYTES
    }
}

/// The bucket of a class of `size`-byte blocks, in items (0: the core's table, UMA's): up to
/// 2 KiB, the bucket UMA's table gives a block twice as large — half the bytes, 4–8 KiB of
/// blocks from 16 B on, in the core's bucket capacities (254, 126, … 4; at least 4, and the
/// 8-byte class has the largest, 254 blocks).
///
/// Every CPU a class runs on keeps a floor of two buckets in its stack, and a program touches
/// tens of the hundred classes: with UMA's buckets `prodcons` (a producer's and a consumer's
/// CPU over the 32 classes of 16 B–1 KiB) peaked at 5.9–6.4 MiB, with these at 5.4–5.5 (the
/// median peer 4.7), `thread_churn` 7.2–7.4 → 7.0–7.1 MiB, and no case slower
/// (docs/design/benchmarks-record.md, "Half-size buckets for the malloc"). tcmalloc moves at most 32 blocks
/// per transfer, jemalloc's thread caches hold at most 200 a class.
pub fn bucket_items(size: usize) -> u32 {
    if size <= 2048 {
        ebbtide_core::bucket_size_for(2 * size).max(4)
    } else {
        0
    }
}

fn zone_name(buf: &mut [u8; 24], size: usize) -> &str {
    let mut digits = [0u8; 20];
    let mut n = size;
    let mut k = 0;
    loop {
        digits[k] = b'0' + (n % 10) as u8;
        k += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf[..7].copy_from_slice(b"malloc-");
    for i in 0..k {
        buf[7 + i] = digits[k - 1 - i];
    }
    core::str::from_utf8(&buf[..7 + k]).unwrap_or("malloc")
}

/// The live zone of every class created so far, with its class.
pub fn zones() -> impl Iterator<Item = (usize, *mut c_void)> {
    (0..NCLASSES).filter_map(|c| {
        let z = ZONES[c].load(Ordering::Acquire);
        (!z.is_null()).then_some((c, z))
    })
}

/// The class of the zone whose keg has `tag`, if it is one of ours. `tag` may be any word of the
/// chunk map ([`ebbtide_core::owner_entry_raw`]): 0 and a free chunk's odd word are nobody's.
#[inline(always)]
fn class_of_tag(tag: u64) -> Option<usize> {
    // An odd word would find the class of the even tag below it.
    if tag & 1 == 1 {
        return None;
    }
    let i = (tag >> 1) as usize;
    if i < TAGS {
        let c = TAG_CLASS[i].load(Ordering::Relaxed);
        if c != 0 {
            return Some(c as usize - 1);
        }
        if !TAG_OVERFLOW.load(Ordering::Relaxed) || tag == 0 {
            return None;
        }
    }
    class_of_tag_slow(tag)
}

#[cold]
fn class_of_tag_slow(tag: u64) -> Option<usize> {
    if tag == 0 {
        return None;
    }
    // SAFETY: zones are never destroyed.
    zones()
        .find(|&(_, z)| unsafe { Zone::tag_raw(z) } == tag)
        .map(|(c, _)| c)
}

/// What a pointer handed to `free`/`realloc` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// In the chunks of class `c`'s zone (an item start or not: the zone checks).
    Class(usize),
    /// A live block above the classes (`huge.rs`: the page heap's or a mapping of its own).
    Huge,
    Bootstrap,
    /// Not ebbtide's: from before the preload, another allocator, or no allocation at all.
    Foreign,
}

/// Who owns `p` (never touches `p`'s memory).
pub fn owner(p: usize) -> Owner {
    if let Some(c) = class_of_tag(ebbtide_core::owner_tag(p)) {
        return Owner::Class(c);
    }
    if bootstrap::contains(p) {
        return Owner::Bootstrap;
    }
    if huge::usable(p).is_some() {
        return Owner::Huge;
    }
    Owner::Foreign
}

/// `malloc(n)`. The size table's range is tested first, so the commonest sizes make one
/// compare before the table's load; the larger classes and the large blocks are out of line.
#[inline(always)]
pub fn alloc(n: usize) -> *mut u8 {
    if n <= classes::TABLE_MAX {
        return alloc_in_class(classes::class_of(n));
    }
    alloc_beyond_table(n)
}

/// `malloc(n)` for `n` above the size table's range: the class by the formula, or a large
/// block. `extern "C"` (it cannot unwind) so that `malloc` reaches it by a tail jump, with no
/// stack frame of its own.
#[inline(never)]
extern "C" fn alloc_beyond_table(n: usize) -> *mut u8 {
    if n <= SMALL_MAX {
        return alloc_in_class(classes::class_above_table(n));
    }
    alloc_huge(n, 0)
}

/// A block of class `c`: this CPU's stack of the class's zone, else the slow path.
#[inline(always)]
fn alloc_in_class(c: usize) -> *mut u8 {
    debug_assert!(c < classes::NCLASSES);
    // SAFETY: the callers take `c` from `class_of` or `class_above_table`, which map every
    // size up to `MAX_CLASS_SIZE` (above SMALL_MAX) to a class below NCLASSES (`classes.rs`,
    // `table_and_formula_agree_and_fit`, checks every size). Unchecked because the bounds
    // check's panic call gave `malloc` a stack frame (a push and a pop on every call) and a
    // compare on its chain.
    // The table through `local_ref!`: no GOT load for its address (`ebbtide_core::local`).
    let slot = unsafe { ebbtide_core::local_ref!(CLASS_FAST).get_unchecked(c) };
    if let Some(f) = slot.get_any() {
        // SAFETY: the constants of a published zone, never destroyed; only a zone that is not
        // careful has them (`Zone::fast_consts_raw`).
        if let Ok(p) = unsafe { f.alloc_fast::<Table>() } {
            return p.as_ptr();
        }
    }
    alloc_class_slow(c)
}

/// An item of class `c`, past the fast path. `extern "C"` (it cannot unwind) so that the fast
/// paths reach it by a tail call and need no stack frame of their own.
#[cold]
#[inline(never)]
pub extern "C" fn alloc_class_slow(c: usize) -> *mut u8 {
    #[cfg(test)]
    crate::slowcount::count_slow_alloc();
    match zone(c) {
        // SAFETY: a published zone, never destroyed.
        Get::Zone(z) => match unsafe { Zone::alloc_raw(z) } {
            Ok(p) => {
                // SAFETY: allocated just now, at least 8 bytes (every class): the free mark
                // `free` left in it goes (`Caller::KEYED`; the fast path clears its own).
                unsafe { clear_free_key(p.as_ptr()) };
                // No lock held here: the runtime may start (`runtime_start.rs`).
                crate::runtime_start::maybe_start();
                p.as_ptr()
            }
            Err(_) => refused(c),
        },
        Get::Nested => {
            let p = bootstrap::alloc(classes::size(c), classes::natural_align(c));
            if p.is_null() {
                enomem()
            } else {
                p
            }
        }
        Get::Failed => refused(c),
    }
}

/// Class `c` cannot serve: its zone could not be made or cannot grow (an `RLIMIT_AS` reached,
/// a refused mapping). A free item of a larger class that is at least as aligned serves
/// instead, if one is there: a keg keeps its chunks, so without this the address space one
/// class holds free could never serve another under the limit (glibc, mimalloc and tcmalloc
/// reuse it; a program that filled the limit with one size and freed it all got NULL for any
/// size whose class had no zone yet). Else a mapping of its own (`huge.rs`), anywhere the
/// kernel has room: the arena's next address space may be another mapping's (a program that
/// filled the address space and gave some back elsewhere, as libc-test's `malloc-brk-fail`
/// does: glibc falls back to `mmap` when `brk` fails). A page for a small block, in that
/// emergency only; not the page heap's free space, so that a `malloc` fails where the kernel
/// has no room, as that test and glibc expect. Else the library's reserve or `ENOMEM`.
#[cold]
#[inline(never)]
fn refused(c: usize) -> *mut u8 {
    let align = classes::natural_align(c);
    for k in c + 1..classes::NCLASSES {
        let z = ZONES[k].load(Ordering::Acquire);
        if z.is_null() || classes::natural_align(k) < align {
            continue;
        }
        // SAFETY: a published zone, never destroyed.
        if let Ok(p) = unsafe { Zone::alloc_raw(z) } {
            // SAFETY: allocated just now, at least 8 bytes: as in `alloc_class_slow`.
            unsafe { clear_free_key(p.as_ptr()) };
            return p.as_ptr();
        }
    }
    if align <= ebbtide_core::os::page_size() {
        let p = huge::alloc_mapping(classes::size(c));
        if !p.is_null() {
            return p;
        }
    }
    library_block_or_enomem(classes::size(c), align)
}

#[cold]
fn enomem() -> *mut u8 {
    set_errno(libc::ENOMEM);
    ptr::null_mut()
}

/// An allocation the heap could not serve (`RLIMIT_AS` reached, say): a block of the bootstrap
/// area if the library's own code asked ([`ebbtide::LibraryCode`]: Rust's allocation-error
/// handler would abort the program for the library's sake), else `ENOMEM` as the program's
/// requests get.
#[cold]
fn library_block_or_enomem(n: usize, align: usize) -> *mut u8 {
    if align <= 4096 && ebbtide::in_library_code() {
        let p = bootstrap::alloc(n, align);
        if !p.is_null() {
            return p;
        }
    }
    enomem()
}

#[cold]
#[inline(never)]
extern "C" fn alloc_huge(n: usize, align: usize) -> *mut u8 {
    let p = huge::alloc(n, align.max(1));
    if p.is_null() {
        library_block_or_enomem(n, align.max(16))
    } else {
        // No lock held here: the runtime may start (`runtime_start.rs`).
        crate::runtime_start::maybe_start();
        p
    }
}

/// `calloc(n, size)`: a block above the classes made of zero pages (fresh from the kernel, or
/// given back since its last use) is not written (its pages stay untouched until used); one
/// reusing dirty pages is cleared.
pub fn calloc(n: usize, size: usize) -> *mut u8 {
    let Some(total) = n.checked_mul(size) else {
        return enomem();
    };
    if total > SMALL_MAX {
        let (p, fresh) = huge::alloc_fresh(total, 1);
        if p.is_null() {
            return enomem();
        }
        crate::runtime_start::maybe_start();
        if !fresh {
            // SAFETY: a block of at least `total` bytes, just allocated.
            unsafe { ptr::write_bytes(p, 0, total) };
        }
        return p;
    }
    let p = alloc(total);
    if !p.is_null() {
        // SAFETY: p is a fresh block of at least `total` bytes.
        unsafe { ptr::write_bytes(p, 0, total) };
    }
    p
}

/// A block of `n` bytes aligned to `align` (a power of two; the caller checked).
pub fn alloc_aligned(align: usize, n: usize) -> *mut u8 {
    if align <= 8 {
        return alloc(n);
    }
    if align <= 16 {
        return alloc(n.max(16));
    }
    if align <= ebbtide_core::os::page_size() && n <= SMALL_MAX {
        if let Some(c) = classes::class_aligned(n, align).filter(|&c| classes::size(c) <= SMALL_MAX)
        {
            let z = ZONES[c].load(Ordering::Acquire);
            if !z.is_null() {
                // SAFETY: a published zone, never destroyed.
                if let Ok(p) = unsafe { Zone::alloc_fast_raw::<Raw>(z) } {
                    // SAFETY: allocated just now, at least 8 bytes: as in `alloc_class_slow`.
                    unsafe { clear_free_key(p.as_ptr()) };
                    return p.as_ptr();
                }
            }
            return alloc_class_slow(c);
        }
    }
    alloc_huge(n, align)
}

/// `free(p)`. Keeps `errno`.
///
/// # Safety
/// `p` is null or a block from this heap that the caller owns and will not use again; anything
/// else is reported and not applied (as far as it can be detected: a pointer inside a live
/// block of ours is indistinguishable from a block start only if it is one).
#[inline(always)]
pub unsafe fn free(p: *mut u8) {
    // The map's words as they are: a free chunk's odd word or nobody's 0 finds no entry (the
    // keys are even tags), and `free_tagged` takes both for nobody's.
    let o = ebbtide_core::owner_entry_raw(p as usize);
    let i = (o.tag >> 1) as usize;
    if i < TAGS {
        // The table through `local_ref!`, as `CLASS_FAST` in `alloc`.
        if let Some(f) = ebbtide_core::local_ref!(TAG_FAST)[i].get(o.tag) {
            // SAFETY: the entry's key is the chunk's tag (0, for addresses nobody owns, and a
            // free chunk's odd word match no entry), so the constants are the owning zone's,
            // which is published, never destroyed and not careful (only such a zone has
            // constants); `p` forwarded from the caller.
            let how = unsafe { f.free_fast::<Table>(p, &o) };
            if how != FastFree::Done {
                // SAFETY: `how` is what the fast path of entry `i`'s zone returned for `p`.
                unsafe { free_missed(i, p, how) };
            }
            return;
        }
    }
    // SAFETY: `free_tagged`'s contract is `free`'s (the caller's), and `o.tag` is `p`'s map
    // word as it requires.
    unsafe { free_tagged(p, o.tag) }
}

/// `free` of a pointer whose tag is not in the tag table: a class past it, or not a class.
/// `extern "C"` (it cannot unwind), as [`free_missed`], so that `free` reaches both by a tail
/// jump and needs no stack frame of its own.
///
/// # Safety
/// As [`free`].
#[cold]
#[inline(never)]
pub(crate) unsafe extern "C" fn free_tagged(p: *mut u8, tag: u64) {
    #[cfg(test)]
    crate::slowcount::count_slow_free();
    // `tag` is the chunk map's word as `free` read it (`class_of_tag` takes any).
    if let Some(c) = class_of_tag(tag) {
        let z = ZONES[c].load(Ordering::Acquire);
        // SAFETY: the zone is published and never destroyed (its tag maps to it); `Raw`
        // assumes nothing of it and tests the owner; `p` forwarded.
        let how = unsafe { Zone::free_fast_raw::<Raw>(z, p) };
        if how != FastFree::Done {
            // SAFETY: `z` is published and never destroyed; `p` is not null (its chunk has `z`'s
            // tag) and owned as `free` requires; `how` is what `z`'s fast path just returned.
            unsafe { free_resume(z, p, how) };
        }
        return;
    }
    // SAFETY: `free_other`'s contract is `free`'s (the caller's).
    unsafe { free_other(p) }
}

/// A `free` that the fast path of tag entry `i`'s zone (published: its [`TAG_FAST`] entry was)
/// did not finish (`how`: not an item, this CPU's stack full or closed, an immediate double
/// free): the zone goes on from there.
///
/// # Safety
/// As [`free`]; `how` is what that zone's fast path returned for `p` just now.
#[cold]
#[inline(never)]
unsafe extern "C" fn free_missed(i: usize, p: *mut u8, how: FastFree) {
    #[cfg(test)]
    crate::slowcount::count_slow_free();
    // Relaxed: `TAG_CLASS[i]` and `ZONES[c]` were stored before the tag's entry was published
    // (Release), which the caller saw (Acquire).
    let c = TAG_CLASS[i].load(Ordering::Relaxed) as usize - 1;
    // SAFETY: the zone of entry `i`; the rest forwarded.
    unsafe { free_resume(ZONES[c].load(Ordering::Relaxed), p, how) }
}

/// A free the zone's fast path did not finish: [`Zone::free_raw_resume`], reported.
///
/// # Safety
/// As [`Zone::free_raw_resume`]; `p` is not null (the callers found it in a chunk with `z`'s
/// tag, or got it from `GlobalAlloc::dealloc`).
#[inline]
pub unsafe fn free_resume(z: *mut c_void, p: *mut u8, how: FastFree) {
    // SAFETY: `p` is not null and the rest is `free_raw_resume`'s contract (the caller's).
    zone_free_reported(p, || unsafe {
        Zone::free_raw_resume(z, NonNull::new_unchecked(p), how)
    });
}

/// The zone's part of a `free` of `p` past its fast path (`free_zone`): `errno` kept (C's
/// `free` never changes it), a pointer the zone refused reported (nothing was applied).
fn zone_free_reported(p: *mut u8, free_zone: impl FnOnce() -> Result<(), InvalidFree>) {
    let e = errno();
    if let Err(err) = free_zone() {
        report::bad_pointer(format_args!(
            "free({p:p}) in '{}': {}; not applied",
            err.zone.as_str(),
            err.kind.describe()
        ));
    }
    set_errno(e);
}

/// `free` of anything that is not in a class's chunks.
///
/// # Safety
/// As [`free`].
#[cold]
#[inline(never)]
unsafe extern "C" fn free_other(p: *mut u8) {
    if p.is_null() || bootstrap::contains(p as usize) {
        return;
    }
    let e = errno();
    match huge::free(p as usize) {
        huge::Freed::Done => {}
        huge::Freed::Twice { large } => report::bad_pointer(format_args!(
            "free({p:p}): double free: the {} block is already free; not applied",
            if large {
                "large (page-run)"
            } else {
                "huge (own mapping)"
            }
        )),
        huge::Freed::Interior => report::bad_pointer(format_args!(
            "free({p:p}): pointer is inside a large block but not at its start; not applied"
        )),
        huge::Freed::NotOurs => report::bad_pointer(format_args!(
            "free({p:p}): not a block ebbtide allocated (from before ebbtide was loaded, \
             another allocator, or no allocation); not applied"
        )),
    }
    set_errno(e);
}

/// `malloc_usable_size(p)`; 0 (and a message) for a pointer that is not ours.
///
/// # Safety
/// `p` is null or a pointer the caller got from this heap (a bootstrap block's size is read
/// from in front of it); anything else is recognised without being touched.
pub unsafe fn usable_size(p: *mut u8) -> usize {
    if p.is_null() {
        return 0;
    }
    match owner(p as usize) {
        Owner::Class(c) => classes::size(c),
        Owner::Huge => huge::usable(p as usize).unwrap_or(0),
        // SAFETY: p is a bootstrap block (it is inside the area; blocks are all that's there).
        Owner::Bootstrap => unsafe { bootstrap::size(p) },
        Owner::Foreign => {
            report::bad_pointer(format_args!(
                "malloc_usable_size({p:p}): not a block ebbtide allocated; answered 0"
            ));
            0
        }
    }
}

/// `realloc(p, n)`: in place while the class still fits (`n` no more than its size and not
/// below half of it); a block above the classes in place where the page heap allows (shrunk,
/// or grown into the free runs after it) or by `mremap` for a huge block; else allocate (an
/// eighth more when growing), copy and free. `n == 0` frees and returns null (glibc's
/// behaviour).
///
/// # Safety
/// As [`free`] for `p`.
pub unsafe fn realloc(p: *mut u8, n: usize) -> *mut u8 {
    if p.is_null() {
        return alloc(n);
    }
    if n == 0 {
        // SAFETY: `free`'s contract is `realloc`'s for `p` (the caller's), and `p` is not used
        // again.
        unsafe { free(p) };
        return ptr::null_mut();
    }
    let old = match owner(p as usize) {
        Owner::Class(c) => {
            let s = classes::size(c);
            if n <= s && (n >= s / 2 || s <= 128) {
                return p;
            }
            s
        }
        Owner::Huge => {
            if n > SMALL_MAX {
                match huge::realloc(p as usize, n) {
                    huge::Resized::Done(q) => return q,
                    huge::Resized::Failed => return enomem(),
                    huge::Resized::Move | huge::Resized::NotOurs => {}
                }
            }
            huge::usable(p as usize).unwrap_or(0)
        }
        // SAFETY: p is a bootstrap block.
        Owner::Bootstrap => unsafe { bootstrap::size(p) },
        Owner::Foreign => {
            report::bad_pointer(format_args!(
                "realloc({p:p}, {n}): not a block ebbtide allocated; not applied, returned NULL"
            ));
            return enomem();
        }
    };
    // Growing by a copy: an eighth of headroom, so that a buffer grown step by step (a string
    // builder, a vector) moves at most every other step instead of at every step (in the page
    // heap the headroom's pages are not touched until used). Beyond `REMAP_ABOVE` a mapping of
    // its own instead, which grows from then on by `mremap`, without a copy.
    let q = if n > old && n > huge::REMAP_ABOVE {
        let q = huge::alloc_mapping(n);
        if q.is_null() {
            return enomem();
        }
        q
    } else {
        let q = alloc(if n > old { n + n / 8 } else { n });
        if q.is_null() {
            return q;
        }
        q
    };
    // SAFETY: both blocks are live, distinct, and at least min(old, n) bytes long.
    unsafe {
        ptr::copy_nonoverlapping(p, q, old.min(n));
        free(p);
    }
    q
}

/// The zone of class `c` if it exists (never creates one).
#[inline(always)]
pub fn zone_if_created(c: usize) -> Option<*mut c_void> {
    let z = ZONES[c].load(Ordering::Acquire);
    (!z.is_null()).then_some(z)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Up to 2 KiB a class's bucket holds 4–8 KiB of blocks in one of the core's bucket
    /// capacities; above, the core's table; the zones are created with it.
    #[test]
    fn buckets_hold_four_to_eight_kib_up_to_two_kib() {
        for c in 0..classes::NCLASSES {
            let size = classes::size(c);
            let b = bucket_items(size);
            if size <= 2048 {
                assert!([4, 8, 16, 30, 62, 126, 254].contains(&b), "{size}: {b}");
                let bytes = b as usize * size;
                // The 8-byte class: the largest bucket, 2 KiB.
                assert!(
                    (4000..=8192).contains(&bytes) || b == ebbtide_core::BUCKET_MAX,
                    "{size} B x {b} = {bytes}"
                );
                assert!(b < ebbtide_core::bucket_size_for(size) || size <= 32);
            } else {
                assert_eq!(b, 0, "{size}");
            }
        }
        let p = alloc(300);
        assert!(!p.is_null());
        let c = classes::class_of(300);
        let snap = crate::stats::class_snapshots()
            .into_iter()
            .find(|(k, _)| *k == c)
            .expect("the class was created")
            .1;
        assert_eq!(snap.bucket_size_min, bucket_items(classes::size(c)));
        // SAFETY: allocated above, freed once.
        unsafe { free(p) };
    }

    /// `free` of a pointer into a chunk the arena took back (its map word odd, the free list's
    /// link: `free` reads the word as it is) is a bad pointer, reported and not applied, like
    /// one into memory nobody owns.
    #[test]
    fn free_into_a_chunk_given_back_is_a_bad_pointer() {
        // A zone of the core's own, destroyed: its chunk goes back onto the arena's free list.
        let z = Zone::new(ZoneOptions::new("given-back", 4000)).unwrap();
        let item = z.alloc().unwrap();
        let a = item.as_ptr() as usize;
        // SAFETY: allocated just above, freed once.
        unsafe { z.free(item).unwrap() };
        let tag = ebbtide_core::owner_tag(a);
        assert!(tag != 0 && tag & 1 == 0);
        z.destroy().map_err(|(_, e)| e).unwrap();
        let word = ebbtide_core::owner_entry_raw(a).tag;
        if word & 1 == 0 {
            // Another test's zone took the chunk meanwhile (tests run in parallel): what this
            // test is about cannot be set up now.
            assert_ne!(word, tag, "a chunk given back keeps no tag");
            return;
        }
        assert_eq!(
            ebbtide_core::owner_entry(a),
            ebbtide_core::ChunkOwner::default()
        );
        // The tests that report bad pointers take turns, so the count is this test's.
        let _serial = crate::report::tests::BAD_POINTER_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = crate::report::bad_pointers();
        // SAFETY: an address in a chunk nobody owns; `free` only reads the chunk map for it.
        unsafe { free(a as *mut u8) };
        assert_eq!(
            crate::report::bad_pointers(),
            before + 1,
            "reported as not ours, not applied"
        );
    }

    /// The constants tables: an entry is found only under its own tag's key, and the entries
    /// of a class's zone are published with it and match it.
    #[test]
    fn a_constants_entry_is_found_only_under_its_own_key() {
        let empty = FastSlot::empty();
        assert!(empty.get_any().is_none());
        for word in [0, 1, 2, 3, (1 << 19) | 1] {
            assert!(
                empty.get(word).is_none(),
                "no chunk map word ({word:#x}: nobody's, a free chunk's, a tag) finds an empty entry"
            );
        }

        let p = alloc(200);
        assert!(!p.is_null());
        let c = classes::class_of(200);
        let z = ZONES[c].load(Ordering::Acquire);
        assert!(!z.is_null());
        // SAFETY: a published zone, never destroyed.
        let tag = unsafe { Zone::tag_raw(z) };
        assert_eq!(ebbtide_core::owner_tag(p as usize), tag);
        let by_class = CLASS_FAST[c]
            .get_any()
            .expect("the class's entry is published");
        assert_eq!(by_class.tag(), tag);
        let i = (tag >> 1) as usize;
        assert!(i < TAGS);
        let by_tag = TAG_FAST[i].get(tag).expect("the tag's entry is published");
        assert_eq!(by_tag.tag(), tag);
        assert!(TAG_FAST[i].get(tag ^ 2).is_none());
        // The hint: the chunk map entry carries the zone's stacks.
        let hint = by_class.stacks_hint();
        assert_ne!(hint, 0);
        assert_eq!(by_tag.stacks_hint(), hint);
        let o = ebbtide_core::owner_entry(p as usize);
        assert_eq!((o.tag, o.hint), (tag, hint));
        // SAFETY: ours, from `alloc`.
        unsafe { free(p) };
    }

    /// A zone in `ZONES` whose constants are not in `CLASS_FAST` / `TAG_FAST` (its creator forked
    /// away between its stores) gets them from the child's fixup, so its class keeps the fast
    /// paths.
    #[test]
    fn the_fork_fixup_publishes_the_constants_a_creator_left_unpublished() {
        // 1664-byte blocks: a class no other test of this crate uses.
        let n = 1664;
        let c = classes::class_of(n);
        let p = alloc(n);
        assert!(!p.is_null());
        // SAFETY: ours, from `alloc`.
        unsafe { free(p) };
        let z = ZONES[c].load(Ordering::Acquire);
        // SAFETY: a published zone, never destroyed.
        let tag = unsafe { Zone::tag_raw(z) };
        let i = (tag >> 1) as usize;
        // What a forked child finds when the parent's creator was between its stores.
        CLASS_FAST[c].key.store(FastSlot::EMPTY, Ordering::Relaxed);
        TAG_FAST[i].key.store(FastSlot::EMPTY, Ordering::Relaxed);
        assert!(CLASS_FAST[c].get_any().is_none());
        assert!(TAG_FAST[i].get_any().is_none());
        let q = alloc(n);
        assert!(!q.is_null(), "the slow path still serves the class");
        publish_missing_constants();
        let f = CLASS_FAST[c].get_any().expect("published by the fixup");
        assert_eq!(f.tag(), tag);
        let f = TAG_FAST[i]
            .get(tag)
            .expect("the tag's entry published by the fixup");
        assert_eq!(f.tag(), tag);
        // SAFETY: ours, from `alloc`.
        unsafe { free(q) };
    }

    /// Memory freed in one class and not allocated again does not stay in that class: past the
    /// per-CPU caches, the depot cap and the free-slab cap, its pages go back to the OS.
    #[test]
    fn a_class_keeps_a_bounded_amount_of_freed_memory() {
        // 96-byte blocks: a class no other test of this crate uses.
        let n = 100_000;
        let c = classes::class_of(96);
        let blocks: Vec<usize> = (0..n)
            .map(|_| {
                let p = alloc(96);
                assert!(!p.is_null());
                // SAFETY: a fresh 96-byte block.
                unsafe { p.write_bytes(0xa5, 96) };
                p as usize
            })
            .collect();
        let snap = |c: usize| {
            crate::stats::class_snapshots()
                .into_iter()
                .find(|s| s.0 == c)
                .unwrap()
                .1
        };
        let full = snap(c);
        assert!(
            full.mapped_bytes >= (n * 96) as u64,
            "{}",
            full.mapped_bytes
        );
        for &p in &blocks {
            // SAFETY: our blocks, freed once.
            unsafe { free(p as *mut u8) };
        }
        // What stays: the per-CPU stacks, the depot (capped), at most FREE_SLAB_BYTES of empty
        // slabs, and the slabs the cached blocks keep partly used. Without the caps all of it
        // stayed (the depot took every bucket). The empty slabs beyond the cap go back at once
        // without the runtime, or after 10 ms (`EXCESS_DELAY_MS` in the core's `keg/excess.rs`) at the
        // class's next free or the runtime's next periodic step (every 100 ms by default) with
        // it: wait for that, within a bound that a loaded machine still meets.
        // Every byte mapped at `full` is still mapped, lazily freed (`MADV_FREE`: the idle trim
        // may move slabs there while we wait) or given back. A slab on its way back (its pages
        // being advised with the keg lock dropped) is in none of the three for a moment:
        // `backed_slabs` drops before `released_bytes` grows, so a snapshot taken while the
        // runtime gives slabs back can fall in between. Wait that out as well.
        let accounted = |s: &ebbtide_core::ZoneSnapshot| {
            s.released_bytes + s.mapped_bytes + s.lazy_bytes >= full.mapped_bytes
        };
        let t0 = std::time::Instant::now();
        let mut s = snap(c);
        while (s.mapped_bytes * 5 > full.mapped_bytes || !accounted(&s))
            && t0.elapsed() < std::time::Duration::from_secs(3)
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
            s = snap(c);
        }
        assert!(s.cached_bytes_depot <= DEPOT_BYTES as u64);
        assert!(
            s.mapped_bytes * 5 <= full.mapped_bytes,
            "{} bytes still backed of {} (per-CPU {}, depot {})",
            s.mapped_bytes,
            full.mapped_bytes,
            s.cached_bytes_pcpu,
            s.cached_bytes_depot
        );
        assert!(
            accounted(&s),
            "released {} + mapped {} + lazy {} < {} mapped when full",
            s.released_bytes,
            s.mapped_bytes,
            s.lazy_bytes,
            full.mapped_bytes
        );
    }

    #[test]
    fn caps_are_bytes_in_two_tiers() {
        assert_eq!(depot_max_items(64), (DEPOT_BYTES / 64) as u64);
        assert_eq!(
            depot_max_items(CAPPED_MAX),
            (DEPOT_BYTES / CAPPED_MAX) as u64
        );
        assert_eq!(free_slabs_max_bytes(CAPPED_MAX), FREE_SLAB_BYTES);
        assert_eq!(depot_max_items(8192), (MID_DEPOT_BYTES / 8192) as u64);
        assert_eq!(depot_max_items(MID_MAX), (MID_DEPOT_BYTES / MID_MAX) as u64);
        assert_eq!(free_slabs_max_bytes(CAPPED_MAX + 512), MID_FREE_SLAB_BYTES);
        assert_eq!(free_slabs_max_bytes(MID_MAX), MID_FREE_SLAB_BYTES);
        assert_eq!(depot_max_items(MID_MAX + 2048), u64::MAX);
        assert_eq!(free_slabs_max_bytes(MID_MAX + 2048), usize::MAX);
        assert_eq!(free_slabs_max_bytes(1 << 20), usize::MAX);
        assert_eq!(reuse_floor_bytes(CAPPED_MAX), None);
        assert_eq!(reuse_floor_bytes(CAPPED_MAX + 512), Some(REUSE_FLOOR));
        assert_eq!(reuse_floor_bytes(MID_MAX + 2048), Some(REUSE_FLOOR));
        // Every capped class's depot holds at least a few blocks.
        for c in 0..classes::NCLASSES {
            let size = classes::size(c);
            if size <= MID_MAX {
                assert!(depot_max_items(size) >= 64, "{size}");
            }
        }
    }
}
