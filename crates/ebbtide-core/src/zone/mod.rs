//! Zones: the allocator's unit — one item size, one set of hooks, per-CPU caches over a depot
//! over a keg.
//!
//! Allocation order: this CPU's stack → a full bucket from the depot → a bucket's worth of items
//! imported from the keg (slabs, then new pages). Free order: this CPU's stack → flush a bucket's
//! worth to the depot → (depot full, buckets disabled or squeezing) straight to the slabs.
//!
//! Counting (see also `keg/mod.rs`):
//! `items_out(keg) == used + Σ per-CPU counts + depot items + stashed pages` (a page pool's
//! pages given back lazily, `stash.rs`; none for other zones), hence
//! `items in backed slabs == used + per-CPU + depot + free in slabs + stashed pages`. `used` is derived from the
//! other three; the property test checks it against a shadow model of live items, and
//! [`Zone::validate`] checks every other term by walking the structures.

mod create;
mod drain;
mod fast;
mod limit;
mod objects;
mod resize;
mod slow;
mod snapshot;
mod stash;

pub(crate) use drain::{
    drain_cpu_all, make_room, on_map_failure, release_lazy_due_locked, release_lazy_locked,
    trim_excess_locked,
};
pub use fast::{
    clear_free_key, free_key, AllocMiss, Base, Caller, FastConsts, FastFree, Handle, Plain, Raw,
    Table,
};
pub(crate) use resize::resize_locked;
pub use resize::ResizeReport;
pub use snapshot::{CpuStack, ZoneCheck, ZoneSnapshot};

use crate::bucket::{self, Bucket, BUCKET_MAX};
use crate::depot::DepotInner;
use crate::disposal::{Disposal, Emptied, Pages};
use crate::error::{
    report, AllocError, ConfigError, CreateError, InvalidFree, InvalidKind, ZoneBusy, ZoneName,
};
use crate::keg::Keg;
use crate::os;
use crate::pcpu::{self, lock_header, Pcpu};
use crate::registry::{Link, Linked};
use crate::release::Session;
use crate::slab::MAX_ITEM_SIZE;
use crate::sync::{lock, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};
use core::ffi::{c_int, c_void};
use core::ptr::{self, NonNull};
use fast::{item_check, Fast};

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
    /// Bytes of entirely free slabs kept backed between reclaims (rounded down to slabs, at
    /// least one); a free that empties a slab beyond them gives its pages back at once.
    /// `usize::MAX` (default): all kept until a reclaim.
    pub free_slabs_max_bytes: usize,
    /// Bound the depot's and the free slabs' caps (the two above, or none) by the zone's working
    /// set of reuse, at least this many bytes each (`reuse.rs`): memory the program does not
    /// take again goes back even below the fixed caps. `None` (default): the fixed caps only.
    pub reuse_floor_bytes: Option<usize>,
    /// A bucket's starting (and smallest) size in items, which also sets the floor of every
    /// CPU's stack (two buckets); contention and the pressure rules move it as for any zone.
    /// 0 (default): UMA's table, [`crate::bucket_size_for`] (8–16 KiB of items up to a
    /// page). A malloc with a hundred size classes passes smaller buckets: the floors of its
    /// classes are memory every CPU keeps.
    pub bucket_items: u32,
    /// Call the runtime's [`crate::runtime::Hooks::before_create`] (default). A malloc creating
    /// its size-class zones inside an allocation turns it off: the hook may allocate and start
    /// threads, which must not happen there; such a runtime starts itself at load time.
    pub runtime_hook: bool,
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
            free_slabs_max_bytes: usize::MAX,
            reuse_floor_bytes: None,
            bucket_items: 0,
            runtime_hook: true,
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
    pub fn free_slabs_max_bytes(mut self, n: usize) -> Self {
        self.free_slabs_max_bytes = n;
        self
    }
    /// See [`ZoneOptions::reuse_floor_bytes`] (the field).
    pub fn reuse_floor_bytes(mut self, floor: usize) -> Self {
        self.reuse_floor_bytes = Some(floor);
        self
    }
    /// See [`ZoneOptions::bucket_items`] (the field).
    pub fn bucket_items(mut self, n: u32) -> Self {
        self.bucket_items = n;
        self
    }
    /// Creates the zone without calling the runtime's `before_create` hook (see
    /// [`ZoneOptions::runtime_hook`]): no allocation, no thread, only system calls.
    pub fn without_runtime_hook(mut self) -> Self {
        self.runtime_hook = false;
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
    /// Bytes of stashed pages taken again by misses (`stash.rs`), ever.
    stash_reused_bytes: AtomicU64,
    /// Depot buckets one CPU's stack flushed and another CPU's stack took, and their items
    /// (the zone's remote frees: `docs/design/contention.md`).
    remote_buckets: AtomicU64,
    remote_frees: AtomicU64,
}

/// The zone object; lives in a 1 KiB slot of a page shared with other zones' objects
/// (`objects.rs`).
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
    pub(crate) depot: crate::contention::Counted<DepotInner>,
    /// `ZoneOptions::depot_max_items`, the depot's fixed cap ([`ZoneInner::depot_cap`] applies
    /// it, bounded by reuse for a zone that opted in; read without the depot lock).
    pub(crate) depot_max_items: u64,
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
    /// Page pools: the pages a shrink gave back lazily (`stash.rs`); no storage for plain zones.
    pub(crate) stash: stash::Stash,
    /// On the registry's list of live zones (guarded by the registry lock).
    link: Link,
}

// SAFETY: the raw pointers are the zone's own mappings (pcpu, chunk map of the 'static arena) and
// the hook argument, which the creator vouches may be used from any thread (documented on
// `Zone::new`). All mutable state is atomics or behind mutexes.
unsafe impl Send for ZoneInner {}
// SAFETY: as for `Send`: shared references only reach atomics, mutexes and immutable fields.
unsafe impl Sync for ZoneInner {}

// SAFETY: `link` and `from_link` are inverse: both go through the offset of the `link` field.
unsafe impl Linked for ZoneInner {
    fn link(p: *mut Self) -> *mut Link {
        // SAFETY: `p` points to a live zone (the registry's callers' guarantee); no reference
        // is made.
        unsafe { ptr::addr_of_mut!((*p).link) }
    }
    fn from_link(l: *mut Link) -> *mut Self {
        l.cast::<u8>()
            .wrapping_sub(core::mem::offset_of!(ZoneInner, link))
            .cast()
    }
}

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
// SAFETY: as for `Send`: `&Zone` only reaches the `Sync` zone and the plain-data copy `fast`.
unsafe impl Sync for Zone {}

#[inline(always)]
fn unlikely(b: bool) -> bool {
    #[cold]
    fn cold() {}
    if b {
        cold();
    }
    b
}

impl Zone {
    #[inline(always)]
    pub(crate) fn inner(&self) -> &ZoneInner {
        // SAFETY: the ZoneInner lives until `destroy`, which consumes the Zone.
        unsafe { self.inner.as_ref() }
    }

    /// The zone's name.
    pub fn name(&self) -> &str {
        self.inner().name.as_str()
    }

    /// The usable size of an item (the requested size rounded up to the alignment).
    pub fn item_size(&self) -> usize {
        self.inner().item_size
    }

    /// The periodic pass without pressure (working-set update, idle trim); `now_ns` from a
    /// monotonic clock. Returns the bytes given back.
    pub fn periodic(&self, now_ns: u64) -> usize {
        let _inside = crate::forkgate::enter();
        self.inner().periodic(now_ns)
    }

    /// The address of `cpu`'s stack header (`cpu` below the CPU count): for tests that look at
    /// which of the zone's pages were written.
    #[doc(hidden)]
    pub fn stack_header_addr(&self, cpu: usize) -> usize {
        assert!(cpu < self.inner().pcpu.ncpu(), "cpu {cpu} out of range");
        self.inner().pcpu.header(cpu) as *const pcpu::Header as usize
    }

    /// Counters merged from every layer.
    pub fn snapshot(&self) -> ZoneSnapshot {
        let _inside = crate::forkgate::enter();
        self.inner().snapshot()
    }

    /// Walks every layer and checks the counting invariants (see the module docs). Stops every
    /// CPU's stack briefly to count it exactly.
    pub fn validate(&self) -> Result<ZoneCheck, String> {
        let _inside = crate::forkgate::enter();
        self.inner().validate()
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

    /// An immediate double free caught on a push (`p` is the top of this CPU's stack): counted,
    /// not applied.
    #[cold]
    fn duplicate_now(&self, a: usize) -> InvalidFree {
        self.counters.invalid_frees.fetch_add(1, Ordering::Relaxed);
        InvalidFree {
            zone: self.name,
            addr: a,
            kind: InvalidKind::DoubleFree,
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
            || !crate::gate::buckets_enabled()
            || crate::gate::squeezing_now()
            || self.limit_full.load(Ordering::Relaxed)
        {
            0
        } else {
            2 * self.bucket_size.load(Ordering::Relaxed)
        }
    }

    /// The cap `cpu`'s stack should have now: the floor (`2 × bucket_size`, see
    /// [`ZoneInner::bucket_target_cap`]) plus what the resize pass granted it (`sizing.rs`),
    /// within the storage; 0 while caching is off.
    pub(crate) fn cap_for(&self, cpu: usize) -> u32 {
        let floor = self.bucket_target_cap();
        if floor == 0 {
            return 0;
        }
        let grant = self.pcpu.demand(cpu).grant.load(Ordering::Relaxed);
        floor.saturating_add(grant).min(self.pcpu.storage)
    }

    fn caching(&self) -> bool {
        self.bucket_target_cap() > 0 && self.pcpu.usable()
    }

    /// Opens every CPU's stack in use to its current target cap (the others open on their CPU's
    /// first slow path: see `Pcpu::in_use`).
    pub(crate) fn open_all_caps(&self) {
        for cpu in self.pcpu.cpus_in_use() {
            let h = self.pcpu.header(cpu);
            let g = lock_header(h);
            self.pcpu.set_cap(&g, h, self.cap_for(cpu));
        }
    }

    /// Closes every CPU's stack to pushes (no fence needed: see `Pcpu::set_cap`).
    pub(crate) fn close_all_caps(&self) {
        for cpu in self.pcpu.cpus_in_use() {
            let h = self.pcpu.header(cpu);
            let g = lock_header(h);
            self.pcpu.set_cap(&g, h, 0);
        }
    }

    /// Brings this CPU's cap to the target if it drifted (bucket size changed, caching
    /// re-enabled, a grant changed), or if its word no longer carries the room of its cap (a
    /// cap change a critical section wrote over, or pops under a cap lowered below the count:
    /// `pcpu.rs`, "Room, not cap").
    fn sync_cap(&self) {
        let cpu = self.pcpu.this_cpu();
        let h = self.pcpu.header(cpu);
        let want = self.cap_for(cpu);
        if !self.pcpu.cap_holds(h, want) {
            let g = lock_header(h);
            // Under the lock the stack is not stopped (drainers hold the lock while it is).
            self.pcpu.set_cap(&g, h, want);
        }
    }

    /// Low pressure (TRIM, and the DRAIN of Moderate): the bucket size steps down by one (UMA)
    /// and every CPU's grant by a quarter, at least a bucket's worth (`sizing::after_trim`). Caps
    /// follow on the next slow path or resize pass.
    pub(crate) fn shrink_bucket_size(&self) {
        let bs = self.bucket_size.load(Ordering::Relaxed);
        if bs > self.bucket_min {
            self.bucket_size.store(bs - 1, Ordering::Relaxed);
        }
        self.map_grants(|g| crate::sizing::after_trim(g, bs));
    }

    /// Before a per-CPU drain: the bucket size halves toward its minimum (UMA), and so does every
    /// CPU's grant (`sizing::after_drain_cpu`).
    pub(crate) fn halve_bucket_size(&self) {
        let bs = self.bucket_size.load(Ordering::Relaxed);
        self.bucket_size
            .store((self.bucket_min + bs) / 2, Ordering::Relaxed);
        self.map_grants(crate::sizing::after_drain_cpu);
    }

    /// Applies `f` to every CPU's grant (reclaim paths only: they run one at a time).
    pub(crate) fn map_grants(&self, f: impl Fn(u32) -> u32) {
        for cpu in 0..self.pcpu.ncpu() {
            let d = self.pcpu.demand(cpu);
            let old = d.grant.load(Ordering::Relaxed);
            let new = f(old);
            // Only a change is written: the demand line of a CPU that never used the zone is in
            // a page nothing wrote yet (`Pcpu::in_use`).
            if new != old {
                d.grant.store(new, Ordering::Relaxed);
            }
        }
    }

    /// A slow-path trip past this CPU's stack while caching (an underflow when `alloc`, else an
    /// overflow): counted for the resize pass, nothing else.
    fn count_miss(&self, alloc: bool) {
        let d = self.pcpu.demand(self.pcpu.this_cpu());
        let c = if alloc { &d.underflows } else { &d.overflows };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_trim(&self) {
        self.counters.trims.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_drain(&self) {
        self.counters.drains.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_drain_cpu(&self) {
        self.counters.drain_cpus.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_squeeze(&self) {
        self.counters.squeezes.fetch_add(1, Ordering::Relaxed);
    }
}

/// Calls `f` with the counters and the name of every live zone, oldest first, allocating
/// nothing: each snapshot is [`ZoneInner::snapshot_counts`]'s (`per_cpu` empty, its sums in the
/// `pcpu_*` fields). For observers that must not touch the program's allocator (the control
/// socket). `f` runs under the registry lock, which a malloc's zone creation takes: it must
/// not allocate, create or destroy a zone.
pub fn visit_snapshots(mut f: impl FnMut(&ZoneSnapshot, &str)) {
    let _inside = crate::forkgate::enter();
    let reg = crate::registry::lock();
    reg.for_each_oldest_first(|z: &ZoneInner| f(&z.snapshot_counts(), z.name.as_str()));
}

/// Snapshots of every live zone, oldest first (for statistics: allocates the result, so never
/// call it from an allocation path).
///
/// Nothing is allocated while the registry lock is held: when the core serves as the process's
/// `malloc`, an allocation under it could need a new size-class zone, whose creation takes the
/// same lock. Room is reserved first (retrying if zones were created meanwhile), the unnamed
/// snapshots and inline names are copied under the lock, and the names become strings after it.
pub fn snapshots() -> Vec<ZoneSnapshot> {
    let _inside = crate::forkgate::enter();
    let mut room = 16;
    loop {
        let mut v: Vec<(ZoneSnapshot, ZoneName)> = Vec::with_capacity(room);
        let mut fits = true;
        {
            let reg = crate::registry::lock();
            reg.for_each(|z: &ZoneInner| {
                if v.len() < v.capacity() {
                    v.push((z.snapshot_unnamed(), z.name));
                } else {
                    fits = false;
                }
            });
            if !fits {
                room = reg.count() + 16;
            }
        }
        if fits {
            v.reverse();
            return v
                .into_iter()
                .map(|(mut s, n)| {
                    s.name = n.as_str().to_string();
                    s
                })
                .collect();
        }
    }
}
