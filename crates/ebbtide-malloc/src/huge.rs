//! Blocks above the size classes, and the table of every live one.
//!
//! * **Large** blocks (above [`crate::heap::SMALL_MAX`], up to [`HEAP_MAX`]) are page runs of
//!   the page heap (`pageheap.rs`): freed, they stay resident as dirty runs that serve any
//!   later size without page faults, until the idle pass, a drain or the limit gives them back.
//! * **Huge** blocks (above [`HEAP_MAX`], aligned beyond it, grown by `realloc` beyond
//!   [`REMAP_ABOVE`], or any block while the page heap is off: its reservation failed under
//!   `ulimit -v`, or it is full) are mappings of their own, unmapped on `free`; `realloc`
//!   resizes them with `mremap`, copying nothing.
//!
//! A table of every live block (open addressing over a mapping of its own) lets `free` tell
//! such a block from a pointer ebbtide never made without touching the pointer's memory, and
//! gives `malloc_usable_size` and `realloc` the block's size. One mutex covers the table and the
//! page heap: a large block costs microseconds of page writes, the lock tens of nanoseconds.
//!
//! Every entry point runs inside the core's fork gate (`ebbtide_core::forkgate`): a `fork`
//! waits until no thread is inside, so the child's copy of the table and the page heap is whole
//! and its mutex free, without a lock held across the fork (held, it made the fork wait on a
//! thread that waited on stdio: glibc bug 19431).
//!
//! A freed block leaves a tombstone with its address, so a second `free` of it is reported as a
//! double free while the tombstone lasts (until its slot is reused or the table rehashed); a
//! page of the page heap that no block holds is a double free (or a pointer into freed
//! memory) for as long as the page heap exists.
//!
//! The page heap's dirty runs are the cache of this module, an
//! [`ebbtide_core::outer::OuterCache`]: they go back on every drain, DRAIN_CPU, squeeze and
//! critical pressure, nothing is kept while those are in force, they count in the cached bytes
//! the `max_cached_bytes` budget reads, the periodic pass gives back what has sat unused for
//! [`crate::pageheap::IDLE_NS`] (the idle give-back), and a pressure trim leaves no more than
//! the heap's working set ([`crate::pageheap::PageHeap::trim`]).

use crate::pageheap::{self, PageHeap};
use core::ptr::{self, NonNull};
use ebbtide_core::contention::{Counted, Waits, PAGE_HEAP};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const EMPTY: usize = 0;

/// A tombstone: the address of the block that was freed, with its low bit set (block
/// addresses are page-aligned). It keeps the probe chains whole as any tombstone does, and
/// remembers the address until the slot is reused or the table rehashed, so that a second
/// `free` of it is told apart from a pointer ebbtide never made ([`free`]).
const fn tombstone(addr: usize) -> usize {
    addr | 1
}

/// Whether a slot's address is a live block's (not empty, not a tombstone).
const fn is_live(addr: usize) -> bool {
    addr != EMPTY && addr & 1 == 0
}

/// One live block: the address handed out and the mapping holding it.
#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    addr: usize,
    map: usize,
    len: usize,
}

/// The largest block of the page heap; above it (or aligned beyond it) a block is a mapping
/// of its own.
pub const HEAP_MAX: usize = 64 << 20;
/// A block that `realloc` grows beyond this is a mapping of its own (one copy when it leaves the
/// page heap or its class, then `mremap`, no copy): a buffer doubled again and again (sqlite's,
/// to 64 MiB) would otherwise leave each old copy behind in the page heap as a free run no
/// later request fits, and copy ever more at each step.
pub const REMAP_ABOVE: usize = 1 << 20;

struct Table {
    slots: *mut Slot,
    cap: usize,
    /// Live entries, and entries that are live or tombstones.
    live: usize,
    used: usize,
    /// The large blocks' pages and the free runs between them.
    heap: PageHeap,
}

// SAFETY: the slots mapping is owned by the table and only touched under the mutex; the page
// heap likewise (see its `Send`).
unsafe impl Send for Table {}

/// Counts its waits in the core's page-heap class (statistics: `lock_waits_page_heap`).
static TABLE: Counted<Table, &Waits> = PAGE_HEAP.mutex(Table {
    slots: ptr::null_mut(),
    cap: 0,
    live: 0,
    used: 0,
    heap: PageHeap::new(pageheap::RESERVE_MAX),
});
/// The page heap's dirty bytes, mirrored after every change under the mutex, for readers that
/// must not take it (the budget, `mallinfo2`).
static CACHED: AtomicUsize = AtomicUsize::new(0);

static BYTES: AtomicUsize = AtomicUsize::new(0);
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// The most [`BYTES`] and [`COUNT`] have been (glibc's `max mmap bytes` and `max mmap regions`
/// in `malloc_stats`). Relaxed, as the counts: statistics, ordered with nothing.
static MAX_BYTES: AtomicUsize = AtomicUsize::new(0);
static MAX_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Bytes mapped for live huge blocks, and how many there are.
pub fn totals() -> (usize, usize) {
    (BYTES.load(Ordering::Relaxed), COUNT.load(Ordering::Relaxed))
}

/// The most bytes and blocks [`totals`] has counted at once so far.
pub fn peaks() -> (usize, usize) {
    (
        MAX_BYTES.load(Ordering::Relaxed),
        MAX_COUNT.load(Ordering::Relaxed),
    )
}

/// Counts a block of `len` bytes more (and `blocks` more blocks), and the peaks.
fn count_up(len: usize, blocks: usize) {
    let b = BYTES.fetch_add(len, Ordering::Relaxed) + len;
    let n = COUNT.fetch_add(blocks, Ordering::Relaxed) + blocks;
    MAX_BYTES.fetch_max(b, Ordering::Relaxed);
    MAX_COUNT.fetch_max(n, Ordering::Relaxed);
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

    /// Whether `addr` was a block freed since its slot was last reused or the table rehashed
    /// (its tombstone is on `addr`'s probe chain).
    fn was_freed(&self, addr: usize) -> bool {
        if self.cap == 0 || !addr.is_multiple_of(page()) {
            return false;
        }
        let mut i = hash(addr, self.cap);
        loop {
            // SAFETY: i < cap, inside the slots mapping.
            let s = unsafe { *self.slots.add(i) };
            if s.addr == tombstone(addr) {
                return true;
            }
            if s.addr == EMPTY {
                return false;
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
        let Some(m) = NonNull::new(slots) else {
            return false;
        };
        // A hash table is touched sparsely: never huge pages (docs/design/thp-policy.md).
        ebbtide_core::os::no_huge_pages(m.cast(), bytes);
        ebbtide_core::os::add_metadata(bytes);
        let old = (self.slots, self.cap);
        self.slots = slots;
        self.cap = cap;
        self.used = 0;
        self.live = 0;
        for i in 0..old.1 {
            // SAFETY: i < old cap, inside the old mapping, still mapped.
            let s = unsafe { *old.0.add(i) };
            if is_live(s.addr) {
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
            if !is_live(e.addr) {
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

/// A block of at least `n` bytes aligned to `align` (a power of two), or null (ENOMEM).
pub fn alloc(n: usize, align: usize) -> *mut u8 {
    alloc_fresh(n, align).0
}

/// [`alloc`], and whether the block is all zero pages (fresh from the kernel or given back
/// since its last use) rather than reused dirty memory.
pub fn alloc_fresh(n: usize, align: usize) -> (*mut u8, bool) {
    alloc_or_retry(n, align, true)
}

/// [`alloc_in`]; when it fails, the caches' free address space goes back (the core's
/// `mapping_refused`: the size classes' empty chunks, the page heap's free runs and the span
/// above its top, unmapped) and it tries once more: under `RLIMIT_AS`, memory a program freed
/// in small blocks then serves a large one, as under glibc. A request that could never be
/// mapped ([`could_ever_map`]) fails at once: a program probing with absurd sizes does not
/// empty every cache each time.
fn alloc_or_retry(n: usize, align: usize, heap: bool) -> (*mut u8, bool) {
    let r = alloc_in(n, align, heap);
    if !r.0.is_null() || !could_ever_map(n) {
        return r;
    }
    ebbtide_core::reclaim::mapping_refused();
    alloc_in(n, align, heap)
}

/// Whether `n` bytes could ever be mapped in this process: no more than `RLIMIT_AS` allows,
/// nor than memory and swap together (more is what the kernel's overcommit heuristic refuses;
/// no bound where they cannot be read). Two system calls, on the failure path only; allocates
/// nothing (this is `malloc`).
fn could_ever_map(n: usize) -> bool {
    use ebbtide_core::os;
    let n = n as u64;
    if n > isize::MAX as u64 || os::address_space_limit().is_some_and(|limit| n > limit) {
        return false;
    }
    let (ram, swap) = os::memory_and_swap();
    ram == 0 || n <= ram.saturating_add(swap)
}

/// [`alloc_fresh`], from the page heap only if `heap` (and the block fits it).
fn alloc_in(n: usize, align: usize, heap: bool) -> (*mut u8, bool) {
    // Inside the fork gate: a fork copies the table and the page heap whole.
    let _inside = ebbtide_core::forkgate::enter();
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
    if heap && len <= HEAP_MAX && align <= HEAP_MAX {
        let mut t = ebbtide_core::lock(&TABLE);
        if !t.reserve() {
            return (ptr::null_mut(), false);
        }
        if let Some((a, zeroed)) = t.heap.alloc(len, align) {
            t.put(Slot {
                addr: a,
                map: a,
                len,
            });
            CACHED.store(t.heap.dirty_bytes(), Ordering::Relaxed);
            count_up(len, 1);
            drop(t);
            if zeroed {
                // Fresh pages (never used, or given back): lazily freed slabs of the size
                // classes make room first (the core's `reclaim::make_room`).
                ebbtide_core::reclaim::make_room(len);
            }
            return (a as *mut u8, zeroed);
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
    count_up(len, 1);
    drop(t);
    ebbtide_core::reclaim::make_room(len);
    (a as *mut u8, true)
}

/// A block of at least `n` bytes that is a mapping of its own (for `realloc` beyond
/// [`REMAP_ABOVE`]), or null.
pub fn alloc_mapping(n: usize) -> *mut u8 {
    alloc_or_retry(n, 1, false).0
}

/// Which dirty runs [`release_runs`] releases.
#[derive(Clone, Copy)]
enum Release {
    /// The periodic pass: runs freed before the time; a period of the working set ends.
    Idle(u64),
    /// A pressure trim: those, and the oldest beyond the working set.
    Trim(u64),
    /// Every run.
    All,
}

/// Calls of the page heap's release entry points (the idle pass, a trim, a drain, an unmap of
/// its free space) so far, whoever made them. Relaxed: a count read to learn whether the cache
/// was asked to shrink between two reads (tests), ordered with nothing.
static RELEASE_PASSES: AtomicU64 = AtomicU64::new(0);

/// How many times the page heap was asked to give memory back so far ([`RELEASE_PASSES`]): a
/// program's frees that give runs back beyond the cache's floor are not counted.
pub fn release_passes() -> u64 {
    RELEASE_PASSES.load(Ordering::Relaxed)
}

/// Releases the page heap's dirty runs as `how` says; returns the bytes.
fn release_runs(how: Release) -> usize {
    RELEASE_PASSES.fetch_add(1, Ordering::Relaxed);
    // The periodic pass always runs: it ends a period even when nothing is held.
    let empty = CACHED.load(Ordering::Relaxed) == 0;
    if empty && !matches!(how, Release::Idle(_)) {
        return 0;
    }
    with_heap(|h| match how {
        Release::Idle(before) => {
            let b = h.release_idle(before);
            h.end_period();
            b
        }
        Release::Trim(before) => h.trim(before),
        Release::All => h.release_older_than(u64::MAX),
    })
}

/// Runs `f` on the page heap (inside the fork gate, the table locked), then publishes the
/// dirty bytes it leaves ([`CACHED`]).
fn with_heap<R>(f: impl FnOnce(&mut PageHeap) -> R) -> R {
    let _inside = ebbtide_core::forkgate::enter();
    let mut t = ebbtide_core::lock(&TABLE);
    let r = f(&mut t.heap);
    CACHED.store(t.heap.dirty_bytes(), Ordering::Relaxed);
    r
}

/// The page heap's dirty runs as the core sees them (see the module docs).
pub struct HugeCache;

impl ebbtide_core::outer::OuterCache for HugeCache {
    fn held_bytes(&self) -> u64 {
        CACHED.load(Ordering::Relaxed) as u64
    }
    fn periodic(&self, now_ns: u64) -> usize {
        release_runs(Release::Idle(now_ns.saturating_sub(pageheap::IDLE_NS)))
    }
    fn trim(&self, now_ns: u64) -> usize {
        release_runs(Release::Trim(now_ns.saturating_sub(pageheap::IDLE_NS)))
    }
    fn drain(&self) -> usize {
        release_runs(Release::All)
    }
    fn unmap_free(&self) -> usize {
        RELEASE_PASSES.fetch_add(1, Ordering::Relaxed);
        with_heap(|h| {
            h.release_older_than(u64::MAX);
            h.unmap_above_top()
        })
    }
    fn huge_pages(&self) -> ebbtide_core::outer::HugePages {
        let c = hugepage_counts();
        ebbtide_core::outer::HugePages {
            huge: c.huge as u64,
            partly_used: c.partial as u64,
            broken: c.broken as u64,
            released_whole_bytes: c.whole_bytes,
        }
    }
}

/// Bytes held free and resident for reuse (the page heap's dirty runs).
pub fn cached_bytes() -> usize {
    CACHED.load(Ordering::Relaxed)
}

/// Bytes in blocks of the page heap, and its free resident bytes (for tests and stats).
pub fn heap_bytes() -> (usize, usize) {
    let _inside = ebbtide_core::forkgate::enter();
    let t = ebbtide_core::lock(&TABLE);
    (t.heap.live_bytes(), t.heap.dirty_bytes())
}

/// The page heap's 2 MiB regions: how many are huge, partly used and broken now, and the
/// bytes given back whole and in part so far (stats, `malloc_stats`; `regions.rs`).
pub fn hugepage_counts() -> crate::regions::Counts {
    let _inside = ebbtide_core::forkgate::enter();
    let t = ebbtide_core::lock(&TABLE);
    t.heap.region_counts()
}

/// Bytes usable at `p` if it is a live block of this module.
pub fn usable(p: usize) -> Option<usize> {
    let _inside = ebbtide_core::forkgate::enter();
    let t = ebbtide_core::lock(&TABLE);
    let i = t.find(p)?;
    // SAFETY: `find` returned an index below cap.
    let s = unsafe { *t.slots.add(i) };
    Some(s.map + s.len - s.addr)
}

/// What [`free`] found at `p`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freed {
    /// A live block: freed (into the page heap, or unmapped).
    Done,
    /// A block of this module freed before (its tombstone is still in the table), or a page
    /// of the page heap that no block holds: a double free. `large` says which kind.
    Twice { large: bool },
    /// Inside a live block of this module, not at its start.
    Interior,
    /// Not this module's (nothing was changed).
    NotOurs,
}

/// Frees `p` if it is a live block (into the page heap, or unmapped); else says what `p` is.
pub fn free(p: usize) -> Freed {
    let _inside = ebbtide_core::forkgate::enter();
    let mut t = ebbtide_core::lock(&TABLE);
    let Some(i) = t.find(p) else {
        return t.not_live(p);
    };
    // SAFETY: `find` returned an index below cap.
    let s = unsafe { &mut *t.slots.add(i) };
    let (map, len) = (s.map, s.len);
    s.addr = tombstone(p);
    t.live -= 1;
    // Address space a refused mapping's next answer may give back (the core's rate limit does
    // not hold it off).
    ebbtide_core::reclaim::note_freed();
    BYTES.fetch_sub(len, Ordering::Relaxed);
    COUNT.fetch_sub(1, Ordering::Relaxed);
    if t.heap.contains(map) {
        let keep = ebbtide_core::outer::caching_allowed();
        t.heap.free(map, len, ebbtide_core::os::now_ns(), keep);
        CACHED.store(t.heap.dirty_bytes(), Ordering::Relaxed);
        return Freed::Done;
    }
    drop(t);
    unmap(map, len);
    Freed::Done
}

impl Table {
    /// What `p`, no live block's start, is (the error path of [`free`]: it may scan the table).
    fn not_live(&self, p: usize) -> Freed {
        let in_heap = self.heap.contains(p);
        if self.was_freed(p) {
            return Freed::Twice { large: in_heap };
        }
        for i in 0..self.cap {
            // SAFETY: i < cap, inside the slots mapping.
            let s = unsafe { *self.slots.add(i) };
            if is_live(s.addr) && p > s.addr && p < s.map + s.len {
                return Freed::Interior;
            }
        }
        // A page-aligned address in the page heap that no block holds was a large block's
        // start or lies in one freed since: the tombstone is gone (slot reused), the run is not.
        if in_heap && p.is_multiple_of(page()) {
            return Freed::Twice { large: true };
        }
        Freed::NotOurs
    }
}

/// What [`realloc`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resized {
    /// The block holds `n` bytes now, at this address.
    Done(*mut u8),
    /// Not in place: the caller allocates, copies and frees.
    Move,
    /// The kernel refused (`mremap`): the block is unchanged.
    Failed,
    /// `p` is no block of this module.
    NotOurs,
}

/// Resizes the block `p` to hold `n` bytes where it can without a copy: a large block shrinks
/// in place (its tail a dirty run) or grows into the free runs after it up to
/// [`REMAP_ABOVE`]; a huge block is resized by `mremap` (it may move, nothing is copied).
pub fn realloc(p: usize, n: usize) -> Resized {
    let r = realloc_in(p, n);
    if r != Resized::Failed || !could_ever_map(n) {
        return r;
    }
    // Refused by the kernel (`mremap` under `RLIMIT_AS`): the caches' free address space goes
    // back and it tries once more, as [`alloc_or_retry`] does. Without it a buffer grown by
    // `realloc` under a limit stopped where memory the program had freed still held address
    // space (glibc's `tst-dynarray-fail` failed 9 times in 12).
    ebbtide_core::reclaim::mapping_refused();
    realloc_in(p, n)
}

/// [`realloc`], one try.
fn realloc_in(p: usize, n: usize) -> Resized {
    let pg = page();
    let Some(len) = n.checked_add(pg - 1).map(|x| (x & !(pg - 1)).max(pg)) else {
        return if usable(p).is_some() {
            Resized::Failed
        } else {
            Resized::NotOurs
        };
    };
    let _inside = ebbtide_core::forkgate::enter();
    let mut t = ebbtide_core::lock(&TABLE);
    let Some(i) = t.find(p) else {
        return Resized::NotOurs;
    };
    // SAFETY: `find` returned an index below cap.
    let s = unsafe { *t.slots.add(i) };
    if len == s.len {
        return Resized::Done(p as *mut u8);
    }
    if t.heap.contains(s.map) {
        let done = if len < s.len {
            let keep = ebbtide_core::outer::caching_allowed();
            t.heap
                .shrink_in_place(s.map, s.len, len, ebbtide_core::os::now_ns(), keep);
            true
        } else {
            len <= REMAP_ABOVE && t.heap.grow_in_place(s.map, s.len, len)
        };
        if !done {
            return Resized::Move;
        }
        CACHED.store(t.heap.dirty_bytes(), Ordering::Relaxed);
        // SAFETY: `find` returned an index below cap.
        unsafe { (*t.slots.add(i)).len = len };
        adjust(s.len, len);
        return Resized::Done(p as *mut u8);
    }
    if s.map != s.addr {
        // An over-aligned block starts inside its mapping's first page run only if trimming
        // failed; never the case after `alloc`, but stay exact.
        return Resized::Move;
    }
    // SAFETY: [map, map+len) is a mapping this module made; MREMAP_MAYMOVE keeps its contents.
    let q = unsafe { libc::mremap(s.map as *mut libc::c_void, s.len, len, libc::MREMAP_MAYMOVE) };
    if q == libc::MAP_FAILED {
        return Resized::Failed;
    }
    let q = q as usize;
    // SAFETY: `find` returned an index below cap.
    let e = unsafe { &mut *t.slots.add(i) };
    if q == p {
        e.len = len;
    } else {
        e.addr = tombstone(p);
        t.live -= 1;
        let ok = t.reserve();
        debug_assert!(ok || t.used < t.cap);
        t.put(Slot {
            addr: q,
            map: q,
            len,
        });
    }
    adjust(s.len, len);
    Resized::Done(q as *mut u8)
}

fn adjust(old: usize, new: usize) {
    if new > old {
        count_up(new - old, 0);
    } else {
        BYTES.fetch_sub(old - new, Ordering::Relaxed);
    }
}

/// The page heap's invariants ([`PageHeap::validate`]), for tests.
pub fn validate() -> Result<(), String> {
    let _inside = ebbtide_core::forkgate::enter();
    let r = ebbtide_core::lock(&TABLE).heap.validate();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes no limit or memory could hold are not retried; sizes that fit are.
    #[test]
    fn only_a_size_that_could_be_mapped_is_retried() {
        assert!(could_ever_map(1 << 20));
        assert!(!could_ever_map(usize::MAX));
        assert!(
            !could_ever_map(isize::MAX as usize),
            "beyond memory and swap"
        );
    }
}
