//! Zones: the allocator's unit — one item size, one set of hooks, per-CPU caches over a depot
//! over a keg.
//!
//! Allocation order: this CPU's stack → a full bucket from the depot → a bucket's worth of items
//! imported from the keg (slabs, then new pages). Free order: this CPU's stack → flush a bucket's
//! worth to the depot → (depot full, buckets disabled or squeezing) straight to the slabs.
//!
//! Counting (see also [`crate::keg`]):
//! `items_out(keg) == used + Σ per-CPU counts + depot items`, hence
//! `items in backed slabs == used + per-CPU + depot + free in slabs`. `used` is derived from the
//! other three; the property test checks it against a shadow model of live items, and
//! [`Zone::validate`] checks every other term by walking the structures.

use crate::arena::CHUNK_SIZE;
use crate::bucket::{self, Bucket, BUCKET_MAX};
use crate::depot::DepotInner;
use crate::error::{report, AllocError, ConfigError, CreateError, InvalidFree, ZoneBusy};
use crate::keg::{Emptied, InvalidKind, Keg};
use crate::os;
use crate::pcpu::{self, lock_header, Pcpu, RseqRef};
use crate::reclaim::{self, Request};
use crate::release::Session;
use crate::slab::MAX_ITEM_SIZE;
use crate::sync::{
    lock, try_lock, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering,
};
use core::ffi::{c_int, c_void};
use core::ptr::{self, NonNull};
use std::sync::atomic::AtomicU64 as StdAtomicU64;

/// Hook run when an item leaves a slab (`init`) or on every allocation (`ctor`). Returns 0 on
/// success; anything else fails the allocation. Hooks must not allocate from or free to the same
/// zone; `fini` runs with the keg lock held.
pub type InitHook = unsafe extern "C" fn(item: *mut c_void, size: usize, arg: *mut c_void) -> c_int;
/// Hook run when an item returns to a slab (`fini`) or on every free (`dtor`).
pub type FiniHook = unsafe extern "C" fn(item: *mut c_void, size: usize, arg: *mut c_void);

/// What an allocation does when the zone is at `max_items`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitMode {
    /// Sleep until an item comes back (FIFO among sleepers; counted as SLEEP).
    Wait,
    /// Fail at once (counted as FAIL).
    Fail,
}

/// Zone flags (the values are part of the C ABI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZoneFlags(pub u32);

impl ZoneFlags {
    /// Never trim this zone's depot to its working set (UMA_ZONE_NOTRIM); drains still apply.
    pub const NOTRIM: ZoneFlags = ZoneFlags(1 << 0);
    /// No per-CPU caches or depot: every allocation and free goes to the slabs (UMA_ZONE_NOBUCKET).
    pub const NOBUCKET: ZoneFlags = ZoneFlags(1 << 1);
    /// Full checks on every free: double frees are caught at once (costs two atomic operations).
    pub const CHECKED: ZoneFlags = ZoneFlags(1 << 2);
    /// Zero each item on allocation.
    pub const ZERO: ZoneFlags = ZoneFlags(1 << 3);
    /// All flags known to this version.
    pub const ALL: u32 = 0b1111;

    pub fn contains(self, f: ZoneFlags) -> bool {
        self.0 & f.0 == f.0
    }
}

impl core::ops::BitOr for ZoneFlags {
    type Output = ZoneFlags;
    fn bitor(self, o: ZoneFlags) -> ZoneFlags {
        ZoneFlags(self.0 | o.0)
    }
}

/// A zone's name, stored inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ZoneName {
    bytes: [u8; 63],
    len: u8,
}

impl ZoneName {
    fn new(s: &str) -> Result<ZoneName, ConfigError> {
        let bad = |why| ConfigError::BadName {
            name_len: s.len(),
            why,
        };
        if s.is_empty() {
            return Err(bad("empty"));
        }
        if s.len() > 63 {
            return Err(bad("longer than 63 bytes"));
        }
        if s.bytes()
            .any(|b| b.is_ascii_control() || b == b'"' || b == b'\\')
        {
            return Err(bad("contains a control character, a quote or a backslash"));
        }
        let mut bytes = [0; 63];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Ok(ZoneName {
            bytes,
            len: s.len() as u8,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("?")
    }
}

impl core::fmt::Debug for ZoneName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Options of a new zone.
#[derive(Clone, Copy, Debug)]
pub struct ZoneOptions<'a> {
    pub name: &'a str,
    pub size: usize,
    /// Power of two up to the page size; the item size is rounded up to it. Default 8 (16 for
    /// items of 16 bytes or more).
    pub align: usize,
    pub init: Option<InitHook>,
    pub fini: Option<FiniHook>,
    pub ctor: Option<InitHook>,
    pub dtor: Option<FiniHook>,
    /// Passed to every hook.
    pub hook_arg: *mut c_void,
    /// At most this many items out of the slabs at once (cached items count); 0 = no limit.
    pub max_items: usize,
    pub limit_mode: LimitMode,
    pub flags: ZoneFlags,
    /// Free slabs kept backed when reclaiming (UMA's keg reserve), in items (rounded up to slabs).
    pub reserve_items: usize,
    /// Most items the depot may hold (UMA's `bucket_max`); `u64::MAX` = no cap.
    pub depot_max_items: u64,
}

impl<'a> ZoneOptions<'a> {
    /// Options for a zone of `size`-byte items named `name`, everything else default.
    pub fn new(name: &'a str, size: usize) -> Self {
        ZoneOptions {
            name,
            size,
            align: if size >= 16 { 16 } else { 8 },
            init: None,
            fini: None,
            ctor: None,
            dtor: None,
            hook_arg: ptr::null_mut(),
            max_items: 0,
            limit_mode: LimitMode::Fail,
            flags: ZoneFlags::default(),
            reserve_items: 0,
            depot_max_items: u64::MAX,
        }
    }
    pub fn align(mut self, a: usize) -> Self {
        self.align = a;
        self
    }
    pub fn flags(mut self, f: ZoneFlags) -> Self {
        self.flags = f;
        self
    }
    pub fn max_items(mut self, n: usize, mode: LimitMode) -> Self {
        self.max_items = n;
        self.limit_mode = mode;
        self
    }
    pub fn hooks(
        mut self,
        init: Option<InitHook>,
        fini: Option<FiniHook>,
        ctor: Option<InitHook>,
        dtor: Option<FiniHook>,
        arg: *mut c_void,
    ) -> Self {
        (self.init, self.fini, self.ctor, self.dtor, self.hook_arg) = (init, fini, ctor, dtor, arg);
        self
    }
    pub fn reserve_items(mut self, n: usize) -> Self {
        self.reserve_items = n;
        self
    }
    pub fn depot_max_items(mut self, n: u64) -> Self {
        self.depot_max_items = n;
        self
    }

    fn item_size(&self) -> Result<usize, ConfigError> {
        let ps = os::page_size();
        if self.size == 0 {
            return Err(ConfigError::SizeZero);
        }
        if !self.align.is_power_of_two() || self.align > ps {
            return Err(ConfigError::BadAlign {
                align: self.align,
                page_size: ps,
            });
        }
        // Items hold at least a pointer-sized, pointer-aligned word so any type fits.
        let a = self.align.max(8);
        let size = self.size.checked_add(a - 1).map(|s| s & !(a - 1));
        match size {
            Some(s) if s <= MAX_ITEM_SIZE => Ok(s),
            _ => Err(ConfigError::SizeTooLarge {
                size: self.size,
                max: MAX_ITEM_SIZE,
            }),
        }
    }
}

// Bits of `ZoneInner::careful`: anything that keeps an operation off the rseq fast path. One
// word tested once per operation, so the fast path makes a single test for all of them.
const C_CTOR: u32 = 1;
const C_DTOR: u32 = 2;
const C_CHECKED: u32 = 4;
const C_ZERO: u32 = 8;
/// The per-CPU layer runs in locked mode (no rseq): `Pcpu::pop`/`push` instead of the sections.
const C_LOCKED: u32 = 16;

struct LimitState {
    sleepers: u32,
    next_ticket: u64,
    serving: u64,
}

/// Event counters of a zone (slow paths only; the fast path counts in the per-CPU word).
#[derive(Default)]
struct Counters {
    slow_allocs: AtomicU64,
    fails: AtomicU64,
    sleeps: AtomicU64,
    invalid_frees: AtomicU64,
    depot_contention: AtomicU64,
    trims: AtomicU64,
    drains: AtomicU64,
    drain_cpus: AtomicU64,
    released_bytes: AtomicU64,
    squeezes: AtomicU64,
}

/// Everything `Zone::alloc` and `Zone::free` read on their fast paths, fixed at creation. Kept by
/// value in the zone and in each [`Zone`] handle: a handle is immutable plain data (no interior
/// mutability), so the compiler may keep these in registers across a loop of allocations, where
/// loads through the zone object would be repeated after every critical section (its `asm!`
/// may write memory).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Fast {
    pcpu: RseqRef,
    /// `C_*` bits: any set bit sends both operations to their careful paths.
    careful: u32,
    arena_base: usize,
    arena_len: usize,
    chunk_map: *const StdAtomicU64,
    tag: u64,
    first_slab: usize,
    slab_mask: usize,
    /// End of the last slab relative to `first_slab`: `slabs_per_chunk << slab_shift`.
    slabs_end: usize,
    /// `item_check(item_size, items_per_slab)`.
    item_magic: u64,
    item_bound: u64,
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

impl Fast {
    /// O(1) check that `a` is the start of an item of this zone, reading only the chunk map.
    #[inline(always)]
    fn is_item(&self, a: usize) -> bool {
        let off = a.wrapping_sub(self.arena_base);
        if off >= self.arena_len {
            return false;
        }
        // SAFETY: off < arena_len, so the index is inside the chunk map, which lives as long as
        // the process.
        let tag = unsafe {
            (*self.chunk_map.add(off >> crate::arena::CHUNK_SHIFT)).load(Ordering::Acquire)
        };
        if unlikely(tag != self.tag) {
            return false;
        }
        // Each test its own predictable branch: folded into one flag (`setcc`/`and`) they cost
        // more instructions than they save.
        let rel = (a & (CHUNK_SIZE - 1)).wrapping_sub(self.first_slab);
        if unlikely(rel >= self.slabs_end) {
            return false;
        }
        // One multiply and one compare for "a multiple of the item size, below the slab's last
        // item" (see `item_check`).
        ((rel & self.slab_mask) as u64).wrapping_mul(self.item_magic) < self.item_bound
    }
}

/// The zone object; lives in its own mapped pages.
#[repr(C)]
pub(crate) struct ZoneInner {
    // Read by the fast paths: kept together at the start.
    /// The fast paths' constants (also copied into every [`Zone`] handle).
    fast: Fast,
    pub(crate) pcpu: Pcpu,
    // The rest.
    pub(crate) name: ZoneName,
    pub(crate) item_size: usize,
    pub(crate) requested_size: usize,
    pub(crate) align: usize,
    pub(crate) flags: ZoneFlags,
    init: Option<InitHook>,
    fini: Option<FiniHook>,
    ctor: Option<InitHook>,
    dtor: Option<FiniHook>,
    hook_arg: *mut c_void,
    pub(crate) keg: Keg,
    pub(crate) depot: Mutex<DepotInner>,
    pub(crate) bucket_size: AtomicU32,
    pub(crate) bucket_min: u32,
    pub(crate) bucket_max: u32,
    max_items: usize,
    limit_mode: LimitMode,
    items_reserved: AtomicUsize,
    limit: Mutex<LimitState>,
    limit_cv: Condvar,
    limit_full: AtomicBool,
    counters: Counters,
    /// Page pools: free pages kept between shrinks (`max_buffer_pages`); `usize::MAX` for plain
    /// zones.
    pub(crate) pool_max: AtomicUsize,
    // Registry links, guarded by the registry lock.
    pub(crate) reg_next: *mut ZoneInner,
    pub(crate) reg_prev: *mut ZoneInner,
    map_len: usize,
}

// SAFETY: the raw pointers are the zone's own mappings (pcpu, chunk map of the 'static arena) and
// the hook argument, which the creator vouches may be used from any thread (documented on
// `Zone::new`). All mutable state is atomics or behind mutexes.
unsafe impl Send for ZoneInner {}
// SAFETY: as above.
unsafe impl Sync for ZoneInner {}

/// A zone: a cache of items of one size. Cheap to share (`&Zone` is `Send + Sync`).
///
/// The handle is about 100 bytes: besides the pointer to the zone it carries a copy of the fast
/// path's constants, so that allocation loops keep them in registers. Share it by reference (or
/// in an `Arc`/`static`); moving it is a plain copy of those bytes.
pub struct Zone {
    inner: NonNull<ZoneInner>,
    /// A copy of `inner.fast` (see [`Fast`]).
    fast: Fast,
}

// SAFETY: ZoneInner is Send + Sync; Zone is a pointer to it with unique ownership of destruction.
unsafe impl Send for Zone {}
// SAFETY: as above.
unsafe impl Sync for Zone {}

/// A point-in-time view of a zone's counters (merged from the per-CPU words on read).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZoneSnapshot {
    pub name: String,
    pub size: usize,
    pub item_size: usize,
    pub align: usize,
    pub limit: usize,
    pub used: u64,
    pub free: u64,
    pub requests: u64,
    pub frees: u64,
    pub fails: u64,
    pub sleeps: u64,
    pub invalid_frees: u64,
    pub bucket_size: u32,
    pub bucket_size_min: u32,
    pub bucket_size_max: u32,
    pub buckets_enabled: bool,
    pub depot: crate::wss::Wss,
    pub depot_buckets: usize,
    pub cached_items_pcpu: u64,
    pub cached_bytes_pcpu: u64,
    pub cached_bytes_depot: u64,
    pub free_items_slabs: u64,
    pub free_bytes_slabs: u64,
    pub slab_bytes: usize,
    pub items_per_slab: usize,
    pub pages_mapped: u64,
    pub mapped_bytes: u64,
    pub efficiency_pct: f64,
    pub reclaim_trim: u64,
    pub reclaim_drain: u64,
    pub reclaim_drain_cpu: u64,
    pub released_bytes: u64,
    /// Bytes of lazily freed slabs now (`MADV_FREE`, see [`crate::lazy`]).
    pub lazy_bytes: u64,
    /// Bytes offered with `MADV_FREE`, ever; and those taken back by allocation.
    pub lazy_freed_bytes: u64,
    pub lazy_reused_bytes: u64,
    pub squeeze_windows: u64,
    pub depot_contention: u64,
    /// Page pools: `max_buffer_pages`; `u64::MAX` for plain zones.
    pub pool_max_buffer_pages: u64,
}

/// The result of [`Zone::validate`]: the terms of the counting equation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneCheck {
    /// Items in backed slabs.
    pub items_mapped: usize,
    pub used: usize,
    pub pcpu: usize,
    pub depot: usize,
    pub free_in_slabs: usize,
}

#[inline(always)]
fn unlikely(b: bool) -> bool {
    #[cold]
    fn cold() {}
    if b {
        cold();
    }
    b
}

/// The fast path of [`Zone::alloc`]: `f` is the zone's [`Fast`] (the handle's copy or the zone's
/// own), `z` the zone.
#[inline(always)]
fn alloc_with(f: &Fast, z: &ZoneInner) -> Result<NonNull<u8>, AllocError> {
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
unsafe fn free_with(f: &Fast, z: &ZoneInner, p: NonNull<u8>) -> Result<(), InvalidFree> {
    let a = p.as_ptr() as usize;
    if unlikely(!f.is_item(a)) {
        return Err(z.invalid_now(a));
    }
    if !unlikely(f.careful != 0) {
        // SAFETY: careful == 0: rseq mode (as in `alloc_with`).
        if unsafe { f.pcpu.push(p.as_ptr()) } {
            return Ok(());
        }
        z.free_slow(p.as_ptr());
        return Ok(());
    }
    z.free_careful(p.as_ptr())
}

impl Zone {
    /// Creates a zone.
    ///
    /// The hook argument (if any) is passed to the hooks from whatever thread allocates or
    /// frees; the caller vouches that this is sound.
    pub fn new(o: ZoneOptions<'_>) -> Result<Zone, CreateError> {
        let item_size = o.item_size()?;
        let name = ZoneName::new(o.name)?;
        if o.flags.0 & !ZoneFlags::ALL != 0 {
            return Err(ConfigError::BadFlags {
                flags: o.flags.0,
                known: ZoneFlags::ALL,
            }
            .into());
        }
        if o.max_items > (1usize << 48) {
            return Err(ConfigError::BadLimit {
                why: "above 2^48 items",
            }
            .into());
        }
        let ips = crate::slab::Geometry::for_item(item_size).items_per_slab;
        let keg = Keg::new(item_size, o.reserve_items.div_ceil(ips))?;
        let geo = keg.geo;
        let bmin = bucket::bucket_size_for(item_size);
        let bmax = BUCKET_MAX;
        let pcpu = Pcpu::new((2 * bmax).min(crate::pcpu::STORAGE_MAX), os::cpu_count())?;
        let arena = keg.arena;
        let mut careful = 0;
        if o.ctor.is_some() {
            careful |= C_CTOR;
        }
        if o.dtor.is_some() {
            careful |= C_DTOR;
        }
        if o.flags.contains(ZoneFlags::CHECKED) || crate::checked_by_default() {
            careful |= C_CHECKED;
        }
        if o.flags.contains(ZoneFlags::ZERO) {
            careful |= C_ZERO;
        }
        if !pcpu.is_rseq() {
            careful |= C_LOCKED;
        }
        let fast = Fast {
            pcpu: pcpu.rseq_ref(),
            careful,
            arena_base: arena.base,
            arena_len: arena.len,
            chunk_map: arena.map.cast(),
            tag: keg.tag,
            first_slab: geo.first_slab,
            slab_mask: geo.slab_size - 1,
            slabs_end: geo.slabs_per_chunk << geo.slab_shift,
            item_magic: item_check(geo.item_size, geo.items_per_slab).0,
            item_bound: item_check(geo.item_size, geo.items_per_slab).1,
        };
        let z = ZoneInner {
            fast,
            pcpu,
            name,
            item_size,
            requested_size: o.size,
            align: o.align,
            flags: o.flags,
            init: o.init,
            fini: o.fini,
            ctor: o.ctor,
            dtor: o.dtor,
            hook_arg: o.hook_arg,
            keg,
            depot: Mutex::new(DepotInner::new(o.depot_max_items)),
            bucket_size: AtomicU32::new(bmin),
            bucket_min: bmin,
            bucket_max: bmax,
            max_items: o.max_items,
            limit_mode: o.limit_mode,
            items_reserved: AtomicUsize::new(0),
            limit: Mutex::new(LimitState {
                sleepers: 0,
                next_ticket: 0,
                serving: 0,
            }),
            limit_cv: Condvar::new(),
            limit_full: AtomicBool::new(false),
            counters: Counters::default(),
            pool_max: AtomicUsize::new(usize::MAX),
            reg_next: ptr::null_mut(),
            reg_prev: ptr::null_mut(),
            map_len: 0,
        };
        let map_len = os::round_up(core::mem::size_of::<ZoneInner>(), os::page_size());
        let mem = match os::map(map_len) {
            Ok(m) => m.cast::<ZoneInner>(),
            Err(e) => {
                // SAFETY: the stacks are new and unused.
                unsafe { z.pcpu.unmap() };
                return Err(e.into());
            }
        };
        // SAFETY: `mem` is a fresh mapping large enough and page (hence suitably) aligned.
        unsafe {
            mem.as_ptr().write(z);
            (*mem.as_ptr()).map_len = map_len;
        }
        let zone = Zone { inner: mem, fast };
        zone.inner().open_all_caps();
        crate::registry::insert(mem.as_ptr());
        crate::reclaimer::ensure_started();
        crate::release::ensure_worker();
        Ok(zone)
    }

    #[inline(always)]
    pub(crate) fn inner(&self) -> &ZoneInner {
        // SAFETY: the ZoneInner lives until `destroy`, which consumes the Zone.
        unsafe { self.inner.as_ref() }
    }

    /// Allocates one item. Fast path: one rseq critical section, no lock, no system call.
    #[inline(always)]
    pub fn alloc(&self) -> Result<NonNull<u8>, AllocError> {
        alloc_with(&self.fast, self.inner())
    }

    /// Frees an item of this zone.
    ///
    /// The pointer is checked in O(1) without touching its memory: outside this zone's slabs,
    /// inside slab metadata, or not at the start of an item → `Err`, nothing changed. A double free
    /// is caught at once in checked mode ([`ZoneFlags::CHECKED`] or the `checked` tunable), and
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
        let f = unsafe { &(*z.cast::<ZoneInner>()).fast };
        if f.careful != 0 {
            return ptr::null_mut();
        }
        // SAFETY: careful == 0: rseq mode.
        unsafe { f.pcpu.pop() }
    }

    /// Only the fast path of [`Zone::free_raw`]: true when `p` passed the item check and went
    /// onto this CPU's stack; false changes nothing (then call [`Zone::free_raw`], which also
    /// reports an invalid pointer). Never panics.
    ///
    /// # Safety
    /// As [`Zone::free_raw`].
    #[inline(always)]
    pub unsafe fn free_fast_raw(z: *mut c_void, p: NonNull<u8>) -> bool {
        // SAFETY: a live zone (caller's guarantee).
        let f = unsafe { &(*z.cast::<ZoneInner>()).fast };
        // SAFETY: careful == 0: rseq mode; the item passed the check.
        f.careful == 0 && f.is_item(p.as_ptr() as usize) && unsafe { f.pcpu.push(p.as_ptr()) }
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

    /// The zone's name.
    pub fn name(&self) -> &str {
        self.inner().name.as_str()
    }

    /// The usable size of an item (the requested size rounded up to the alignment).
    pub fn item_size(&self) -> usize {
        self.inner().item_size
    }

    /// Gives cached memory back to the OS; returns the bytes given back.
    pub fn reclaim(&self, req: Request) -> usize {
        reclaim::reclaim_zone(self.inner(), req)
    }

    /// The periodic pass without pressure (working-set update, idle trim); `now_ns` from a
    /// monotonic clock. Returns the bytes given back.
    pub fn periodic(&self, now_ns: u64) -> usize {
        self.inner().periodic(now_ns)
    }

    /// Counters merged from every layer.
    pub fn snapshot(&self) -> ZoneSnapshot {
        self.inner().snapshot()
    }

    /// Walks every layer and checks the counting invariants (see the module docs). Stops every
    /// CPU's stack briefly to count it exactly.
    pub fn validate(&self) -> Result<ZoneCheck, String> {
        self.inner().validate()
    }

    /// Destroys the zone, giving all its memory back. Fails while items are in use, changing
    /// nothing; the zone is handed back with the error.
    // The handle is large on purpose (it carries the fast-path constants by value, see `Fast`);
    // handing it back by value on this cold path is what the caller needs.
    #[allow(clippy::result_large_err)]
    pub fn destroy(self) -> Result<(), (Zone, ZoneBusy)> {
        let z = self.inner.as_ptr();
        // SAFETY: `self` is the only handle; destruction is exclusive by ownership.
        match unsafe { ZoneInner::destroy(z) } {
            Ok(()) => {
                core::mem::forget(self);
                Ok(())
            }
            Err(live) => {
                let busy = ZoneBusy {
                    zone: self.inner().name,
                    live_items: live,
                };
                Err((self, busy))
            }
        }
    }

    /// Wraps a raw zone pointer (C API).
    ///
    /// # Safety
    /// `p` must come from [`Zone::into_raw`] and be used as a unique owner afterwards.
    pub unsafe fn from_raw(p: *mut c_void) -> Zone {
        // SAFETY: caller's guarantee: non-null pointer from into_raw.
        let inner: NonNull<ZoneInner> = unsafe { NonNull::new_unchecked(p.cast()) };
        Zone {
            inner,
            // SAFETY: a live zone (caller's guarantee).
            fast: unsafe { inner.as_ref().fast },
        }
    }

    /// Gives up ownership, returning a raw pointer for [`Zone::from_raw`].
    pub fn into_raw(self) -> *mut c_void {
        let p = self.inner.as_ptr();
        core::mem::forget(self);
        p.cast()
    }
}

impl Drop for Zone {
    /// Destroys the zone if no item is in use; otherwise leaves it alive (its items stay valid) and
    /// says so on stderr.
    fn drop(&mut self) {
        // SAFETY: as in `destroy`.
        if let Err(live) = unsafe { ZoneInner::destroy(self.inner.as_ptr()) } {
            report(format_args!(
                "ebbtide: zone '{}' dropped with {live} items in use; it is kept alive",
                self.inner().name.as_str()
            ));
        }
    }
}

impl ZoneInner {
    fn is_item(&self, a: usize) -> bool {
        self.fast.is_item(a)
    }

    #[cold]
    fn invalid_now(&self, a: usize) -> InvalidFree {
        self.counters.invalid_frees.fetch_add(1, Ordering::Relaxed);
        let kind = match self.keg.locate(a) {
            Err(k) => k,
            Ok(_) => InvalidKind::DoubleFree,
        };
        InvalidFree {
            zone: self.name,
            addr: a,
            kind,
        }
    }

    /// Reports a bad pointer found late (when it reached its slab); never applied.
    fn invalid_late(&self, p: *mut u8, kind: InvalidKind) {
        self.counters.invalid_frees.fetch_add(1, Ordering::Relaxed);
        report(format_args!(
            "{}",
            InvalidFree {
                zone: self.name,
                addr: p as usize,
                kind
            }
        ));
    }

    /// The cap every CPU's stack should have now: 0 while caching is off for any reason.
    pub(crate) fn bucket_target_cap(&self) -> u32 {
        if self.flags.contains(ZoneFlags::NOBUCKET)
            || !reclaim::buckets_enabled()
            || reclaim::squeezing_now()
            || self.limit_full.load(Ordering::Relaxed)
        {
            0
        } else {
            2 * self.bucket_size.load(Ordering::Relaxed)
        }
    }

    fn caching(&self) -> bool {
        self.bucket_target_cap() > 0 && self.pcpu.usable()
    }

    /// Opens every CPU's stack to the current target cap.
    pub(crate) fn open_all_caps(&self) {
        let cap = self.bucket_target_cap();
        for cpu in 0..self.pcpu.ncpu() {
            let h = self.pcpu.header(cpu);
            let g = lock_header(h);
            self.pcpu.set_cap(&g, h, cap);
        }
    }

    /// Closes every CPU's stack to pushes (no fence needed: see `Pcpu::set_cap`).
    pub(crate) fn close_all_caps(&self) {
        for cpu in 0..self.pcpu.ncpu() {
            let h = self.pcpu.header(cpu);
            let g = lock_header(h);
            self.pcpu.set_cap(&g, h, 0);
        }
    }

    /// Brings this CPU's cap to the target if it drifted (bucket size changed, caching re-enabled).
    fn sync_cap(&self) {
        let cpu = self.pcpu.this_cpu();
        let h = self.pcpu.header(cpu);
        let want = self.bucket_target_cap();
        if h.cap.load(Ordering::Relaxed) != want && h.floor.load(Ordering::Relaxed) == 0 {
            let g = lock_header(h);
            if h.floor.load(Ordering::Relaxed) == 0 {
                self.pcpu.set_cap(&g, h, want);
            }
        }
    }

    fn lock_depot(&self) -> crate::sync::MutexGuard<'_, DepotInner> {
        if let Some(g) = try_lock(&self.depot) {
            return g;
        }
        // Contention: UMA grows the bucket size by one each time the depot lock is found held.
        self.counters
            .depot_contention
            .fetch_add(1, Ordering::Relaxed);
        let bs = self.bucket_size.load(Ordering::Relaxed);
        if bs < self.bucket_max {
            self.bucket_size.store(bs + 1, Ordering::Relaxed);
        }
        lock(&self.depot)
    }

    #[cold]
    #[inline(never)]
    fn alloc_careful(&self) -> Result<NonNull<u8>, AllocError> {
        let p = match NonNull::new(self.pcpu.pop()) {
            Some(p) => p,
            None => self.alloc_slow()?,
        };
        if self.fast.careful & C_CHECKED != 0 {
            if let Ok(loc) = self.keg.locate(p.as_ptr() as usize) {
                if !self.keg.mark_live(loc) {
                    report(format_args!(
                        "ebbtide: internal error: zone '{}' handed out live item {:p} twice",
                        self.name.as_str(),
                        p
                    ));
                }
            }
        }
        if self.fast.careful & C_ZERO != 0 {
            // SAFETY: the item is ours, item_size bytes.
            unsafe { p.as_ptr().write_bytes(0, self.item_size) };
        }
        if let Some(ctor) = self.ctor {
            // SAFETY: hook contract: called with an item of this zone and the zone's argument.
            if unsafe { ctor(p.as_ptr().cast(), self.item_size, self.hook_arg) } != 0 {
                self.counters.fails.fetch_add(1, Ordering::Relaxed);
                if self.fast.careful & C_CHECKED != 0 {
                    if let Ok(loc) = self.keg.locate(p.as_ptr() as usize) {
                        self.keg.mark_dead(loc);
                    }
                }
                self.free_cached(p.as_ptr());
                return Err(AllocError::CtorFailed);
            }
        }
        Ok(p)
    }

    #[cold]
    #[inline(never)]
    fn alloc_slow(&self) -> Result<NonNull<u8>, AllocError> {
        self.counters.slow_allocs.fetch_add(1, Ordering::Relaxed);
        crate::reclaimer::ensure_started();
        if self.caching() {
            self.sync_cap();
            // A full bucket from the depot: one item for the caller, the rest onto this CPU.
            let b = self.lock_depot().take();
            if let Some(b) = b {
                // SAFETY: `b` came out of the depot, so it is ours and full.
                unsafe {
                    let n = (*b.as_ptr()).count as usize;
                    let slots = Bucket::slots(b);
                    let item = slots[n - 1];
                    let k = self.pcpu.push_batch(&slots[..n - 1]);
                    if k < n - 1 {
                        self.release_to_keg(&slots[k..n - 1]);
                    }
                    Bucket::free(b);
                    return Ok(NonNull::new_unchecked(item));
                }
            }
            // Import a bucket's worth from the slabs.
            let mut tmp = [ptr::null_mut::<u8>(); BUCKET_MAX as usize];
            let want = self
                .bucket_size
                .load(Ordering::Relaxed)
                .clamp(1, BUCKET_MAX) as usize;
            let n = self.import(&mut tmp[..want])?;
            let item = tmp[n - 1];
            let k = self.pcpu.push_batch(&tmp[..n - 1]);
            if k < n - 1 {
                self.release_to_keg(&tmp[k..n - 1]);
            }
            // SAFETY: import returns non-null items.
            return Ok(unsafe { NonNull::new_unchecked(item) });
        }
        // Caching off (NOBUCKET, buckets disabled, squeeze, limit sleepers, thread without rseq):
        // use what the depot still holds, else one item from the slabs.
        let b = if self.flags.contains(ZoneFlags::NOBUCKET) {
            None
        } else {
            lock(&self.depot).take()
        };
        if let Some(b) = b {
            // SAFETY: as above.
            unsafe {
                let n = (*b.as_ptr()).count as usize;
                let slots = Bucket::slots(b);
                let item = slots[n - 1];
                (*b.as_ptr()).count -= 1;
                if n > 1 {
                    if let Err(b) = lock(&self.depot).put(b, false) {
                        self.release_to_keg(&Bucket::slots(b)[..n - 1]);
                        Bucket::free(b);
                    }
                } else {
                    Bucket::free(b);
                }
                return Ok(NonNull::new_unchecked(item));
            }
        }
        let mut one = [ptr::null_mut()];
        self.import(&mut one)?;
        // SAFETY: import returns non-null items.
        Ok(unsafe { NonNull::new_unchecked(one[0]) })
    }

    /// Takes items from the keg, honouring `max_items` and running `init`. On a failed mapping,
    /// reclaims (synchronous DRAIN_CPU) and retries once before reporting out of memory.
    fn import(&self, out: &mut [*mut u8]) -> Result<usize, AllocError> {
        let want = self.reserve_items(out.len())?;
        let n = match self.keg.import(&mut out[..want]) {
            Ok(n) => n,
            Err(_) => {
                reclaim::on_map_failure();
                match self.keg.import(&mut out[..want]) {
                    Ok(n) => n,
                    Err(e) => {
                        self.unreserve(want);
                        self.counters.fails.fetch_add(1, Ordering::Relaxed);
                        return Err(AllocError::OutOfMemory(e));
                    }
                }
            }
        };
        if n < want {
            self.unreserve(want - n);
        }
        if let Some(init) = self.init {
            let mut ok = 0;
            for i in 0..n {
                // SAFETY: hook contract.
                if unsafe { init(out[i].cast(), self.item_size, self.hook_arg) } == 0 {
                    out.swap(ok, i);
                    ok += 1;
                }
            }
            if ok < n {
                // Items whose init failed never left the slab as far as fini is concerned.
                self.keg
                    .release(&out[ok..n], false, |_| {}, |p, k| self.invalid_late(p, k));
                self.unreserve(n - ok);
                if ok == 0 {
                    self.counters.fails.fetch_add(1, Ordering::Relaxed);
                    return Err(AllocError::InitFailed);
                }
            }
            return Ok(ok);
        }
        Ok(n)
    }

    fn reserve_items(&self, want: usize) -> Result<usize, AllocError> {
        if self.max_items == 0 {
            return Ok(want);
        }
        loop {
            let cur = self.items_reserved.load(Ordering::Relaxed);
            let room = self.max_items.saturating_sub(cur);
            if room > 0 {
                let take = want.min(room);
                if self
                    .items_reserved
                    .compare_exchange(cur, cur + take, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return Ok(take);
                }
                continue;
            }
            match self.limit_mode {
                LimitMode::Fail => {
                    self.counters.fails.fetch_add(1, Ordering::Relaxed);
                    return Err(AllocError::LimitReached {
                        max_items: self.max_items,
                    });
                }
                LimitMode::Wait => self.wait_for_room(),
            }
        }
    }

    /// Sleeps (FIFO) until items come back to the slabs. Before the first sleep, cached items
    /// are pushed back to the slabs so they can satisfy the sleepers.
    fn wait_for_room(&self) {
        self.counters.sleeps.fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.limit);
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.sleepers += 1;
        if st.sleepers == 1 {
            self.limit_full.store(true, Ordering::SeqCst);
            drop(st);
            self.close_all_caps();
            reclaim::drain_zone_caches(self);
            st = lock(&self.limit);
        }
        loop {
            let room = self.items_reserved.load(Ordering::Acquire) < self.max_items;
            if room && st.serving == ticket {
                break;
            }
            #[cfg(not(loom))]
            {
                let (g, _) = self
                    .limit_cv
                    .wait_timeout(st, std::time::Duration::from_millis(50))
                    .unwrap_or_else(|e| e.into_inner());
                st = g;
            }
            #[cfg(loom)]
            {
                st = self.limit_cv.wait(st).unwrap();
            }
        }
        st.serving += 1;
        st.sleepers -= 1;
        if st.sleepers == 0 {
            self.limit_full.store(false, Ordering::SeqCst);
        }
        drop(st);
        self.limit_cv.notify_all();
    }

    fn unreserve(&self, n: usize) {
        if self.max_items == 0 || n == 0 {
            return;
        }
        self.items_reserved.fetch_sub(n, Ordering::AcqRel);
        if self.limit_full.load(Ordering::Acquire) {
            let _g = lock(&self.limit);
            self.limit_cv.notify_all();
        }
    }

    /// Returns items to the slabs (fini, validation, accounting, squeeze release).
    pub(crate) fn release_to_keg(&self, items: &[*mut u8]) -> usize {
        self.release_to_keg_in(items, None)
    }

    /// [`ZoneInner::release_to_keg`] inside a reclaim: with an active session, slabs it leaves
    /// entirely free go to the session's release pipeline (their bytes are counted when the
    /// session completes, not returned here).
    pub(crate) fn release_to_keg_in(&self, items: &[*mut u8], sess: Option<&mut Session>) -> usize {
        let squeezing = reclaim::squeezing_now();
        let emptied = match sess {
            // A session that keeps reserves would keep some of what a squeeze gives back.
            Some(s) if s.active() && !(squeezing && s.keep_reserve()) => Emptied::Pipeline(s),
            _ if squeezing => Emptied::GiveBack,
            _ => Emptied::Keep,
        };
        let invalid = |p, k| self.invalid_late(p, k);
        let r = match self.fini {
            Some(f) => self.keg.release_in(
                items,
                emptied,
                // SAFETY: hook contract.
                Some(|p: *mut u8| unsafe { f(p.cast(), self.item_size, self.hook_arg) }),
                invalid,
            ),
            None => self
                .keg
                .release_in(items, emptied, None::<fn(*mut u8)>, invalid),
        };
        let (released, valid) = (r.bytes, r.valid);
        self.unreserve(valid);
        if released > 0 {
            self.counters
                .released_bytes
                .fetch_add(released as u64, Ordering::Relaxed);
        }
        released
    }

    #[cold]
    #[inline(never)]
    fn free_careful(&self, p: *mut u8) -> Result<(), InvalidFree> {
        if self.fast.careful & C_CHECKED != 0 {
            match self.keg.locate(p as usize) {
                Ok(loc) => {
                    if !self.keg.mark_dead(loc) {
                        self.counters.invalid_frees.fetch_add(1, Ordering::Relaxed);
                        return Err(InvalidFree {
                            zone: self.name,
                            addr: p as usize,
                            kind: InvalidKind::DoubleFree,
                        });
                    }
                }
                Err(kind) => {
                    return Err(InvalidFree {
                        zone: self.name,
                        addr: p as usize,
                        kind,
                    })
                }
            }
        }
        if let Some(dtor) = self.dtor {
            // SAFETY: hook contract.
            unsafe { dtor(p.cast(), self.item_size, self.hook_arg) };
        }
        self.free_cached(p);
        Ok(())
    }

    /// Frees an item that passed the checks and its dtor.
    fn free_cached(&self, p: *mut u8) {
        if self.pcpu.push(p) {
            return;
        }
        self.free_slow(p);
    }

    #[cold]
    #[inline(never)]
    fn free_slow(&self, p: *mut u8) {
        if self.caching() {
            self.sync_cap();
            // Flush a bucket's worth from this CPU to the depot, then retry.
            let bs = self
                .bucket_size
                .load(Ordering::Relaxed)
                .clamp(1, BUCKET_MAX);
            if let Some(b) = Bucket::alloc(bs) {
                // SAFETY: `b` is a fresh bucket of at least `bs` slots, ours alone.
                unsafe {
                    let slots = Bucket::slots(b);
                    let n = self.pcpu.pop_batch(&mut slots[..bs as usize]);
                    if n > 0 {
                        (*b.as_ptr()).count = n as u32;
                        let r = self.lock_depot().put(b, true);
                        if let Err(b) = r {
                            self.release_to_keg(&Bucket::slots(b)[..n]);
                            Bucket::free(b);
                        }
                    } else {
                        Bucket::free(b);
                    }
                }
                if self.pcpu.push(p) {
                    return;
                }
            }
        }
        self.release_to_keg(&[p]);
    }

    /// Empties the depot (`keep` items stay) into the slabs; returns items moved.
    pub(crate) fn trim_depot(&self, keep: u64) -> usize {
        self.trim_depot_in(keep, None)
    }

    /// [`ZoneInner::trim_depot`] inside a reclaim: emptied item slabs go to the session's release
    /// pipeline. Bucket slabs do not: bucket kegs are shared by every zone, so their pages are
    /// given back (and counted) by `reclaim_all`, not by one zone's reclaim.
    pub(crate) fn trim_depot_in(&self, keep: u64, mut sess: Option<&mut Session>) -> usize {
        let mut moved = 0;
        loop {
            let b = lock(&self.depot).take_cold_above(keep);
            let Some(b) = b else { break };
            // SAFETY: the bucket came out of the depot; ours alone.
            unsafe {
                let n = (*b.as_ptr()).count as usize;
                self.release_to_keg_in(&Bucket::slots(b)[..n], sess.as_deref_mut());
                moved += n;
                Bucket::free(b);
            }
        }
        moved
    }

    pub(crate) fn shrink_bucket_size(&self) {
        let bs = self.bucket_size.load(Ordering::Relaxed);
        if bs > self.bucket_min {
            self.bucket_size.store(bs - 1, Ordering::Relaxed);
        }
    }

    pub(crate) fn halve_bucket_size(&self) {
        let bs = self.bucket_size.load(Ordering::Relaxed);
        self.bucket_size
            .store((self.bucket_min + bs) / 2, Ordering::Relaxed);
    }

    pub(crate) fn count_reclaim(&self, req: Request, bytes: usize) {
        let c = match req {
            Request::Trim => &self.counters.trims,
            Request::Drain => &self.counters.drains,
            Request::DrainCpu => &self.counters.drain_cpus,
        };
        c.fetch_add(1, Ordering::Relaxed);
        let _ = bytes;
    }

    pub(crate) fn count_squeeze(&self) {
        self.counters.squeezes.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn periodic(&self, _now_ns: u64) -> usize {
        // 1. Working-set update and trim of what sat untouched above it.
        let keep = {
            let mut d = lock(&self.depot);
            d.wss.update();
            if self.flags.contains(ZoneFlags::NOTRIM) {
                u64::MAX
            } else {
                d.wss.periodic_target()
            }
        };
        let mut moved = self.trim_depot(keep);
        // 2. Idle CPUs: a stack whose word did not change for a whole period saw no operation.
        let mut idle = 0;
        for cpu in 0..self.pcpu.ncpu() {
            let h = self.pcpu.header(cpu);
            let w = h.word.load(Ordering::Relaxed);
            let mark = h.idle_mark.swap(w, Ordering::Relaxed);
            if w == mark && (w & 0xffff) != 0 {
                idle |= 1u64 << (cpu % 64);
            }
        }
        if idle != 0 {
            moved += reclaim::drain_zone_cpus(self, |cpu| idle & (1u64 << (cpu % 64)) != 0);
        }
        let released = self.release_free_slabs(self.keg.reserve_slabs());
        let _ = moved;
        if released > 0 {
            self.counters
                .released_bytes
                .fetch_add(released as u64, Ordering::Relaxed);
        }
        released
    }

    /// Free items the zone holds anywhere: per-CPU stacks, depot, free slots of backed slabs.
    pub(crate) fn free_items(&self) -> usize {
        self.pcpu_items() + lock(&self.depot).wss.nitems as usize + self.keg.counts().free_items
    }

    /// Page-pool shrink (blkback's `shrink_free_pagepool`): keeps at most `target` free items,
    /// coldest first — depot buckets, then per-CPU stacks, then the slabs' pages go back to the
    /// OS. Items in use are never touched. Returns the bytes given back.
    pub(crate) fn shrink_to(&self, target: usize) -> usize {
        let free = self.free_items();
        if free <= target {
            return 0;
        }
        let pcpu = self.pcpu_items();
        let keep_depot = target.saturating_sub(pcpu) as u64;
        self.trim_depot(keep_depot);
        if self.free_items() > target && pcpu > 0 {
            reclaim::drain_zone_cpus(self, |_| true);
            self.trim_depot(target as u64);
        }
        // Free slab slots may hold what the caches no longer do.
        let cached = self.pcpu_items() + lock(&self.depot).wss.nitems as usize;
        let slabs_keep = target.saturating_sub(cached) / self.keg.geo.items_per_slab;
        let released = self.release_free_slabs(slabs_keep);
        if released > 0 {
            self.counters
                .released_bytes
                .fetch_add(released as u64, Ordering::Relaxed);
        }
        released
    }

    pub(crate) fn pcpu_items(&self) -> usize {
        (0..self.pcpu.ncpu()).map(|c| self.pcpu.count(c)).sum()
    }

    pub(crate) fn snapshot(&self) -> ZoneSnapshot {
        let d = {
            let g = lock(&self.depot);
            (g.wss, g.nbuckets)
        };
        let kc = self.keg.counts();
        let pcpu_items = self.pcpu_items() as u64;
        let cached = pcpu_items + d.0.nitems;
        let used = (kc.items_out as u64).saturating_sub(cached);
        let fast: u64 = (0..self.pcpu.ncpu())
            .map(|c| self.pcpu.fast_allocs(c))
            .sum();
        let requests = fast + self.counters.slow_allocs.load(Ordering::Relaxed);
        let geo = self.keg.geo;
        let size = self.item_size as u64;
        ZoneSnapshot {
            name: self.name.as_str().to_string(),
            size: self.requested_size,
            item_size: self.item_size,
            align: self.align,
            limit: self.max_items,
            used,
            free: cached + kc.free_items as u64,
            requests,
            frees: requests.saturating_sub(used),
            fails: self.counters.fails.load(Ordering::Relaxed),
            sleeps: self.counters.sleeps.load(Ordering::Relaxed),
            invalid_frees: self.counters.invalid_frees.load(Ordering::Relaxed),
            bucket_size: self.bucket_size.load(Ordering::Relaxed),
            bucket_size_min: self.bucket_min,
            bucket_size_max: self.bucket_max,
            buckets_enabled: self.bucket_target_cap() > 0,
            depot: d.0,
            depot_buckets: d.1,
            cached_items_pcpu: pcpu_items,
            cached_bytes_pcpu: pcpu_items * size,
            cached_bytes_depot: d.0.nitems * size,
            free_items_slabs: kc.free_items as u64,
            free_bytes_slabs: kc.free_items as u64 * size,
            slab_bytes: geo.slab_size,
            items_per_slab: geo.items_per_slab,
            pages_mapped: (kc.backed_slabs * geo.slab_size / os::page_size()) as u64,
            mapped_bytes: (kc.backed_slabs * geo.slab_size) as u64,
            efficiency_pct: geo.efficiency_pct(),
            reclaim_trim: self.counters.trims.load(Ordering::Relaxed),
            reclaim_drain: self.counters.drains.load(Ordering::Relaxed),
            reclaim_drain_cpu: self.counters.drain_cpus.load(Ordering::Relaxed),
            released_bytes: kc.released_bytes,
            lazy_bytes: (kc.lazy_slabs * geo.slab_size) as u64,
            lazy_freed_bytes: kc.lazy_freed_bytes,
            lazy_reused_bytes: kc.lazy_reused_bytes,
            squeeze_windows: self.counters.squeezes.load(Ordering::Relaxed),
            depot_contention: self.counters.depot_contention.load(Ordering::Relaxed),
            pool_max_buffer_pages: match self.pool_max.load(Ordering::Relaxed) {
                usize::MAX => u64::MAX,
                n => n as u64,
            },
        }
    }

    fn validate(&self) -> Result<ZoneCheck, String> {
        // Count every CPU's stack exactly: stop, fence, count, reopen (items stay where they are).
        let mut pcpu_items = 0;
        for cpu in 0..self.pcpu.ncpu() {
            let h = self.pcpu.header(cpu);
            let _g = lock_header(h);
            let cap = h.cap.load(Ordering::Relaxed);
            self.pcpu.stop(h);
            pcpu::fence_cpu(cpu);
            let c = self.pcpu.count(cpu);
            if c > self.pcpu.storage as usize {
                // Leave the stack open (items untouched): a failed check must not stop a CPU.
                self.pcpu.reopen(h, cap);
                return Err(format!(
                    "cpu {cpu}: count {c} above storage {}",
                    self.pcpu.storage
                ));
            }
            // Every cached item must be an item of this zone.
            let mut bad = None;
            let n = self.pcpu.peek_stopped(cpu, h, |p| {
                if bad.is_none() && !self.is_item(p as usize) {
                    bad = Some(p);
                }
            });
            self.pcpu.reopen(h, cap);
            if let Some(p) = bad {
                return Err(format!(
                    "cpu {cpu}: cached pointer {p:p} is not an item of zone '{}'",
                    self.name.as_str()
                ));
            }
            pcpu_items += n;
        }
        let depot_items = lock(&self.depot).validate()? as usize;
        let kc = self.keg.validate()?;
        let cached = pcpu_items + depot_items;
        if kc.items_out < cached {
            return Err(format!(
                "zone '{}': {} items out of the slabs but {cached} cached ({pcpu_items} per-CPU + {depot_items} depot)",
                self.name.as_str(),
                kc.items_out
            ));
        }
        if self.max_items > 0 && self.items_reserved.load(Ordering::Relaxed) != kc.items_out {
            return Err(format!(
                "zone '{}': limit accounting {} != items out of the slabs {}",
                self.name.as_str(),
                self.items_reserved.load(Ordering::Relaxed),
                kc.items_out
            ));
        }
        Ok(ZoneCheck {
            items_mapped: kc.backed_slabs * self.keg.geo.items_per_slab,
            used: kc.items_out - cached,
            pcpu: pcpu_items,
            depot: depot_items,
            free_in_slabs: kc.free_items,
        })
    }

    /// # Safety
    /// `z` must be a live zone that no other thread uses during the call.
    unsafe fn destroy(z: *mut ZoneInner) -> Result<(), usize> {
        // SAFETY: caller's guarantee.
        let zr = unsafe { &*z };
        {
            let mut reg = crate::registry::lock();
            let pcpu_items = zr.pcpu_items();
            let depot_items = lock(&zr.depot).wss.nitems as usize;
            let out = zr.keg.items_out();
            let used = out.saturating_sub(pcpu_items + depot_items);
            if used > 0 {
                return Err(used);
            }
            reclaim::drain_zone_cpus(zr, |_| true);
            zr.trim_depot(0);
            zr.keg.destroy()?;
            reg.unlink(z);
        }
        // SAFETY: the zone is unlinked, empty and unused; its mappings are ours.
        unsafe {
            zr.pcpu.unmap();
            let len = zr.map_len;
            ptr::drop_in_place(z);
            os::unmap(NonNull::new_unchecked(z.cast()), len);
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::item_check;
    use crate::slab::Geometry;

    /// The one-compare item test agrees with "multiple of the size, below the last item" at every
    /// offset of the slab, for every 8-aligned size up to 4 KiB and a spread of larger ones.
    #[test]
    fn item_check_is_exact() {
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
                let fast = (x as u64).wrapping_mul(magic) < bound;
                let slow = x % d == 0 && x / d < g.items_per_slab;
                assert_eq!(fast, slow, "size {d}, offset {x}, slab {}", g.slab_size);
            }
        }
    }
}
