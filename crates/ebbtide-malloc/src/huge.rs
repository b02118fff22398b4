//! Huge blocks (above the largest size class, or aligned beyond a page): one mapping each,
//! unmapped on `free`, so their memory goes back at once and never sits in a cache.
//!
//! A table of every live huge block (open addressing over a mapping of its own, under one
//! mutex: huge blocks are rare and each costs system calls anyway) lets `free` tell a huge
//! block from a pointer ebbtide never made without touching the pointer's memory, and gives
//! `malloc_usable_size` and `realloc` the block's size. `realloc` of a huge block moves it with
//! `mremap`, copying nothing.
//!
//! ## The cache of freed huge blocks
//! A program that allocates and frees blocks of a few MiB in a loop (a growing dict or list in
//! Python, a buffer per request) would pay a mapping and a page fault per page every time. Up
//! to [`CACHE_BLOCKS`] freed mappings of at most [`CACHE_BLOCK_MAX`] bytes each, and
//! [`CACHE_BYTES`] in all, are kept and handed out again to a request that fits (the smallest
//! that does; its pages beyond an eighth more than asked go back). The cache is an [`ebbtide_core::outer::OuterCache`]: it empties
//! with the zones' caches on every drain, DRAIN_CPU, squeeze and critical pressure, keeps
//! nothing while those are in force, counts in the cached bytes the budget reads, and the
//! periodic pass unmaps what has sat unused for [`CACHE_IDLE_NS`] (the idle give-back).

use core::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const EMPTY: usize = 0;
const GONE: usize = 1;

/// One live block: the address handed out and the mapping holding it.
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    addr: usize,
    map: usize,
    len: usize,
}

/// Freed blocks kept in the cache (the whole mapping is free).
pub const CACHE_BLOCKS: usize = 16;
/// The largest block the cache keeps.
pub const CACHE_BLOCK_MAX: usize = 64 << 20;
/// The most the cache holds in all.
pub const CACHE_BYTES: usize = 32 << 20;
/// A cached block unused for this long goes back at the next periodic pass (1 s, the zones'
/// idle give-back aims at 2 s).
pub const CACHE_IDLE_NS: u64 = 1_000_000_000;

struct Table {
    slots: *mut Slot,
    cap: usize,
    /// Live entries, and entries that are live or tombstones.
    live: usize,
    used: usize,
    /// The cache: `(map, len, freed at)`; `len == 0` is an empty entry.
    cached: [(usize, usize, u64); CACHE_BLOCKS],
    cached_bytes: usize,
}

// SAFETY: the slots mapping is owned by the table and only touched under the mutex.
unsafe impl Send for Table {}

static TABLE: Mutex<Table> = Mutex::new(Table {
    slots: ptr::null_mut(),
    cap: 0,
    live: 0,
    used: 0,
    cached: [(0, 0, 0); CACHE_BLOCKS],
    cached_bytes: 0,
});
static CACHED: AtomicUsize = AtomicUsize::new(0);

static BYTES: AtomicUsize = AtomicUsize::new(0);
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// Bytes mapped for live huge blocks, and how many there are.
pub fn totals() -> (usize, usize) {
    (BYTES.load(Ordering::Relaxed), COUNT.load(Ordering::Relaxed))
}

fn page() -> usize {
    ebbtide_core::os::page_size()
}

fn hash(a: usize, cap: usize) -> usize {
    ((a >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) & (cap - 1)
}

fn map_anon(len: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping has no preconditions.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

fn unmap(p: usize, len: usize) {
    if len > 0 {
        // SAFETY: callers pass whole pages of a mapping this module made and owns.
        unsafe { libc::munmap(p as *mut libc::c_void, len) };
    }
}

impl Table {
    fn find(&self, addr: usize) -> Option<usize> {
        if self.cap == 0 {
            return None;
        }
        let mut i = hash(addr, self.cap);
        loop {
            // SAFETY: i < cap, inside the slots mapping.
            let s = unsafe { *self.slots.add(i) };
            if s.addr == addr {
                return Some(i);
            }
            if s.addr == EMPTY {
                return None;
            }
            i = (i + 1) & (self.cap - 1);
        }
    }

    /// Makes room for one more entry (grows at 1/2 full, counting tombstones). False when no
    /// memory could be mapped for a bigger table.
    fn reserve(&mut self) -> bool {
        if (self.used + 1) * 2 <= self.cap {
            return true;
        }
        let cap = if self.live * 4 < self.cap {
            self.cap // mostly tombstones: rehash at the same size
        } else {
            (self.cap * 2).max(1024)
        };
        let bytes = cap * core::mem::size_of::<Slot>();
        let slots = map_anon(bytes).cast::<Slot>();
        if slots.is_null() {
            return false;
        }
        ebbtide_core::os::add_metadata(bytes);
        let old = (self.slots, self.cap);
        self.slots = slots;
        self.cap = cap;
        self.used = 0;
        self.live = 0;
        for i in 0..old.1 {
            // SAFETY: i < old cap, inside the old mapping, still mapped.
            let s = unsafe { *old.0.add(i) };
            if s.addr > GONE {
                self.put(s);
            }
        }
        if !old.0.is_null() {
            let b = old.1 * core::mem::size_of::<Slot>();
            unmap(old.0 as usize, b);
            ebbtide_core::os::sub_metadata(b);
        }
        true
    }

    fn put(&mut self, s: Slot) {
        let mut i = hash(s.addr, self.cap);
        loop {
            // SAFETY: i < cap (the table has room: `reserve` ran).
            let e = unsafe { &mut *self.slots.add(i) };
            if e.addr == EMPTY || e.addr == GONE {
                if e.addr == EMPTY {
                    self.used += 1;
                }
                *e = s;
                self.live += 1;
                return;
            }
            i = (i + 1) & (self.cap - 1);
        }
    }
}

/// The table's lock, held by the forking thread from `fork_prepare` to `fork_release`.
struct Held(core::cell::UnsafeCell<Option<std::sync::MutexGuard<'static, Table>>>);
// SAFETY: only the forking thread touches it, between its atfork handlers.
unsafe impl Sync for Held {}
static HELD: Held = Held(core::cell::UnsafeCell::new(None));

/// Before `fork` (after the core's fork gate closed): holds the table so the child's copy is
/// whole.
pub fn fork_prepare() {
    let g = ebbtide_core::lock(&TABLE);
    // SAFETY: see `Held`.
    unsafe { *HELD.0.get() = Some(g) };
}

/// After `fork`, parent and child: lets the table go.
pub fn fork_release() {
    // SAFETY: see `Held`; dropping the guard unlocks (in the child too: same thread).
    unsafe { (*HELD.0.get()).take() };
}

/// A huge block of at least `n` bytes aligned to `align` (a power of two), or null (ENOMEM).
pub fn alloc(n: usize, align: usize) -> *mut u8 {
    alloc_fresh(n, align).0
}

/// [`alloc`], and whether the block is fresh from the kernel (all zeroes) rather than a
/// reused mapping from the cache.
pub fn alloc_fresh(n: usize, align: usize) -> (*mut u8, bool) {
    let pg = page();
    let align = align.max(pg);
    let Some(len) = n
        .checked_add(pg - 1)
        .map(|x| x & !(pg - 1))
        .filter(|&l| l > 0 || n == 0)
    else {
        return (ptr::null_mut(), false);
    };
    let len = len.max(pg);
    let Some(span) = len.checked_add(align - pg) else {
        return (ptr::null_mut(), false);
    };
    if span > isize::MAX as usize {
        return (ptr::null_mut(), false);
    }
    if align == pg {
        if let Some(p) = from_cache(len) {
            return (p, false);
        }
    }
    let m = map_anon(span) as usize;
    if m == 0 {
        return (ptr::null_mut(), false);
    }
    // Trim the mapping to the aligned block: whole pages before and after it go back.
    let a = m.next_multiple_of(align);
    unmap(m, a - m);
    unmap(a + len, m + span - (a + len));
    let mut t = ebbtide_core::lock(&TABLE);
    if !t.reserve() {
        drop(t);
        unmap(a, len);
        return (ptr::null_mut(), false);
    }
    t.put(Slot {
        addr: a,
        map: a,
        len,
    });
    BYTES.fetch_add(len, Ordering::Relaxed);
    COUNT.fetch_add(1, Ordering::Relaxed);
    (a as *mut u8, true)
}

/// The smallest cached mapping of at least `len` bytes, made live again; its pages beyond
/// `len + len / 8` go back to the kernel (the reused part keeps its pages: no faults).
fn from_cache(len: usize) -> Option<*mut u8> {
    let mut t = ebbtide_core::lock(&TABLE);
    if t.cached_bytes == 0 {
        return None;
    }
    let best = (0..CACHE_BLOCKS)
        .filter(|&i| t.cached[i].1 >= len)
        .min_by_key(|&i| t.cached[i].1)?;
    if !t.reserve() {
        return None;
    }
    let (map, mut l, _) = t.cached[best];
    t.cached[best] = (0, 0, 0);
    t.cached_bytes -= l;
    CACHED.store(t.cached_bytes, Ordering::Relaxed);
    let keep = (len + len / 8).next_multiple_of(page());
    if l > keep {
        unmap(map + keep, l - keep);
        l = keep;
    }
    t.put(Slot {
        addr: map,
        map,
        len: l,
    });
    BYTES.fetch_add(l, Ordering::Relaxed);
    COUNT.fetch_add(1, Ordering::Relaxed);
    Some(map as *mut u8)
}

/// Keeps a freed mapping in the cache if there is room and caching is allowed; false if the
/// caller must unmap it. Older entries make room for a new one.
fn to_cache(t: &mut Table, map: usize, len: usize) -> bool {
    if len > CACHE_BLOCK_MAX || !ebbtide_core::outer::caching_allowed() {
        return false;
    }
    let now = ebbtide_core::os::now_ns();
    let mut out: [(usize, usize); CACHE_BLOCKS] = [(0, 0); CACHE_BLOCKS];
    let mut nout = 0;
    // Oldest out until the new block fits in bytes and in entries.
    loop {
        let free_slot = (0..CACHE_BLOCKS).find(|&i| t.cached[i].1 == 0);
        if t.cached_bytes + len <= CACHE_BYTES && free_slot.is_some() {
            let i = free_slot.unwrap_or(0);
            t.cached[i] = (map, len, now);
            t.cached_bytes += len;
            break;
        }
        let Some(old) = (0..CACHE_BLOCKS)
            .filter(|&i| t.cached[i].1 != 0)
            .min_by_key(|&i| t.cached[i].2)
        else {
            return false;
        };
        out[nout] = (t.cached[old].0, t.cached[old].1);
        nout += 1;
        t.cached_bytes -= t.cached[old].1;
        t.cached[old] = (0, 0, 0);
    }
    CACHED.store(t.cached_bytes, Ordering::Relaxed);
    for &(m, l) in &out[..nout] {
        unmap(m, l);
    }
    true
}

/// Unmaps cached blocks freed before `older_than` (every one for `u64::MAX`); returns bytes.
fn give_back(older_than: u64) -> usize {
    if CACHED.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let mut out: [(usize, usize); CACHE_BLOCKS] = [(0, 0); CACHE_BLOCKS];
    let mut n = 0;
    {
        let mut t = ebbtide_core::lock(&TABLE);
        for i in 0..CACHE_BLOCKS {
            let (m, l, at) = t.cached[i];
            if l != 0 && at < older_than {
                out[n] = (m, l);
                n += 1;
                t.cached[i] = (0, 0, 0);
                t.cached_bytes -= l;
            }
        }
        CACHED.store(t.cached_bytes, Ordering::Relaxed);
    }
    let mut b = 0;
    for &(m, l) in &out[..n] {
        unmap(m, l);
        b += l;
    }
    b
}

/// The cache as the core sees it (see the module docs).
pub struct HugeCache;

impl ebbtide_core::outer::OuterCache for HugeCache {
    fn held_bytes(&self) -> u64 {
        CACHED.load(Ordering::Relaxed) as u64
    }
    fn periodic(&self, now_ns: u64) -> usize {
        give_back(now_ns.saturating_sub(CACHE_IDLE_NS))
    }
    fn drain(&self) -> usize {
        give_back(u64::MAX)
    }
}

/// Bytes held in the cache of freed huge blocks.
pub fn cached_bytes() -> usize {
    CACHED.load(Ordering::Relaxed)
}

/// Bytes usable at `p` if it is a live huge block.
pub fn usable(p: usize) -> Option<usize> {
    let t = ebbtide_core::lock(&TABLE);
    let i = t.find(p)?;
    // SAFETY: `find` returned an index below cap.
    let s = unsafe { *t.slots.add(i) };
    Some(s.map + s.len - s.addr)
}

/// Unmaps `p` if it is a live huge block; false if it is not one.
pub fn free(p: usize) -> bool {
    let mut t = ebbtide_core::lock(&TABLE);
    let Some(i) = t.find(p) else {
        return false;
    };
    // SAFETY: `find` returned an index below cap.
    let s = unsafe { &mut *t.slots.add(i) };
    let (addr, map, len) = (s.addr, s.map, s.len);
    s.addr = GONE;
    t.live -= 1;
    BYTES.fetch_sub(len, Ordering::Relaxed);
    COUNT.fetch_sub(1, Ordering::Relaxed);
    // Only whole, page-aligned mappings are reusable (an over-aligned block is its own).
    let cached = addr == map && to_cache(&mut t, map, len);
    drop(t);
    if !cached {
        unmap(map, len);
    }
    true
}

/// Resizes the huge block `p` to hold `n` bytes with `mremap` (it may move, nothing is
/// copied). `Err(())` when `p` is no huge block; `Ok(null)` when the kernel refused (the block
/// is unchanged).
pub fn realloc(p: usize, n: usize) -> Result<*mut u8, ()> {
    let pg = page();
    let Some(len) = n.checked_add(pg - 1).map(|x| (x & !(pg - 1)).max(pg)) else {
        return if usable(p).is_some() {
            Ok(ptr::null_mut())
        } else {
            Err(())
        };
    };
    let mut t = ebbtide_core::lock(&TABLE);
    let Some(i) = t.find(p) else {
        return Err(());
    };
    // SAFETY: `find` returned an index below cap.
    let s = unsafe { *t.slots.add(i) };
    if s.map != s.addr {
        // An over-aligned block starts inside its mapping's first page run only if trimming
        // failed; never the case after `alloc`, but stay exact.
        return Ok(ptr::null_mut());
    }
    if len == s.len {
        return Ok(p as *mut u8);
    }
    // SAFETY: [map, map+len) is a mapping this module made; MREMAP_MAYMOVE keeps its contents.
    let q = unsafe { libc::mremap(s.map as *mut libc::c_void, s.len, len, libc::MREMAP_MAYMOVE) };
    if q == libc::MAP_FAILED {
        return Ok(ptr::null_mut());
    }
    let q = q as usize;
    // SAFETY: `find` returned an index below cap.
    let e = unsafe { &mut *t.slots.add(i) };
    if q == p {
        e.len = len;
    } else {
        e.addr = GONE;
        t.live -= 1;
        let ok = t.reserve();
        debug_assert!(ok || t.used < t.cap);
        t.put(Slot {
            addr: q,
            map: q,
            len,
        });
    }
    if len > s.len {
        BYTES.fetch_add(len - s.len, Ordering::Relaxed);
    } else {
        BYTES.fetch_sub(s.len - len, Ordering::Relaxed);
    }
    Ok(q as *mut u8)
}
