//! The page heap: runs of pages for the blocks above the size classes, carved from one span of
//! address space mapped as it fills, and the free runs kept resident for reuse by any size.
//!
//! ```text
//!  base                                        top                committed            end
//!  | block | dirty | block | clean | dirty | block |  (zero pages)     |  (not mapped)    |
//!          └ free runs: sorted by address, coalesced with neighbours of the same kind ┘
//! ```
//!
//! * A **block** is a page run handed out (its address and length are in the block table of
//!   `huge.rs`, not here).
//! * A **dirty** free run was a block: its pages are resident, so reusing it costs no page
//!   fault and no zeroing. Dirty runs are what this heap caches; their bytes are the
//!   [`PageHeap::dirty_bytes`] the core's budget and `mallinfo2` count.
//! * A **clean** free run is address space only: given back with `MADV_DONTNEED` (its pages
//!   read as zeros and fault in when touched again).
//! * Above `top` nothing was ever handed out or everything went back: all zero pages. `top`
//!   never rests on a clean run (a clean run ending at `top` lowers `top` instead), and the
//!   range `[base, committed)` is mapped readable and writable (in steps of [`COMMIT_STEP`] as
//!   `top` grows), the rest of the span not mapped at all: address space on demand
//!   (docs/design/address-space.md), so an `RLIMIT_AS` lowered at run time stops the heap
//!   where it stands, and `VSZ` counts what is in use. The span is found once far from other
//!   mappings ([`ebbtide_core::os::reserve_span`]); should another mapping take the piece
//!   above `committed`, the heap ends there (`end` lowered) and larger blocks are mappings of
//!   their own. The heap's pages are `MADV_NOHUGEPAGE` ([`HEAP_THP`],
//!   docs/design/thp-policy.md) but for its dense 2 MiB regions, which are `MADV_HUGEPAGE`
//!   (`regions.rs`, docs/design/hugepage-heap.md).
//!
//! Invariants (checked by [`PageHeap::validate`], which the tests run after every step):
//! the runs are sorted, disjoint, inside `[base, top)`, page-aligned, and two adjacent runs
//! are of different kinds; `dirty_bytes` is the sum of the dirty runs' lengths; each 2 MiB
//! region's used bytes are its bytes below `top` in no free run, and the regions' counts
//! (huge, partly used, broken) are the number of regions in each state (`regions.rs`).
//!
//! ## Allocation: best fit, without faults first, packed into hugepage regions
//! 1. the best **dirty** run that holds the block (aligned): no fault at all;
//! 2. else the best group of adjacent free runs (dirty and clean together) that holds it:
//!    address space reused, only its clean pages fault; or
//! 3. the free runs ending at `top` and the zero pages beyond it (`top` moves up).
//!
//! "Best" is Temeraire's order on the span's 2 MiB regions (`regions.rs`): a block smaller
//! than a region does not open a region that holds no block while it fits in one that does
//! ([`regions::opens_empty`]: empty regions stay whole, to go back whole); then the smallest
//! fit; then the densest region. A block of a region or more starts on a region where it fits
//! so (the gap before it stays free for smaller blocks): the regions it fills are wholly in
//! blocks. A region wholly mapped with at least half of it in blocks, and either full or in use
//! before ([`regions::turns_huge`]), is made `MADV_HUGEPAGE` at once, before the block is
//! touched: a region a block fills faults in as one huge page, one filled by smaller blocks
//! over time is collapsed by khugepaged.
//!
//! A freed block becomes a dirty run, merged with its dirty neighbours: memory freed as one
//! size serves any other (what a class per size cannot do: a 1 MiB block freed in one class
//! was no use to a 700 KiB request in the next). Growing a block in place takes the free runs
//! after it; shrinking gives its tail back as a dirty run. The anchors: gperftools' page heap
//! (address-ordered best fit over free spans, "normal" and "returned" spans), jemalloc's
//! extents (`ecache_dirty` and `ecache_retained`, coalescing, the oldest dirty extents purged
//! first), mimalloc's reuse of freed segment spans.
//!
//! ## Giving back
//! By hugepage: the regions that hold no block go back first, whole (their dirty runs' parts
//! turn clean, one `MADV_DONTNEED` per stretch of them frees each huge page without splitting
//! it; they are `MADV_NOHUGEPAGE` again), then the rest of the runs, in part of a region (a
//! huge one is **broken**: split first (`os::split_huge`, so the memory cgroup is uncharged at
//! once), its free pages go back with it, and it
//! is `MADV_NOHUGEPAGE` until dense again). The idle pass breaks a huge region only for what
//! the working set does not cover ([`regions::break_when_idle`]); pressure, drains and the
//! limit at free break as needed. The limit at each free takes the oldest runs first, whole
//! or not (the newest are what a program takes again next), each one's whole free regions
//! whole. Within each kind, dirty runs go back (`MADV_DONTNEED`, they turn clean) oldest
//! first, by every path the zones'
//! caches go back by: the periodic pass (runs idle for [`IDLE_NS`]), a pressure trim (those,
//! then the oldest until what is left is no more than the working set: the freed space blocks
//! took again in this period or the one before — free runs, and space given back into the part
//! above `top` below the highest `top` so far — a period being one periodic pass), every
//! drain, DRAIN_CPU (`malloc_trim`), a squeeze, buckets off under critical pressure and the
//! `max_cached_bytes` budget (the caller, `huge.rs`, is the core's
//! [`ebbtide_core::outer::OuterCache`]); a block freed while caching is not allowed goes back at
//! once; and at every free the dirty bytes are brought under [`dirty_limit`] of the bytes in
//! blocks and the working set (the policy: a pure function, tested alone): freed space that
//! nothing took again goes back at once beyond [`DIRTY_FLOOR`] (mimalloc gives freed pages back
//! 10 ms after their last use).
//!
//! Nothing here locks: the one caller holds the block table's mutex around every call.

use crate::regions::{self, Regions, REGION};
use core::ptr::{self, NonNull};
use ebbtide_core::os::{MapAt, Thp};

/// The heap's span: the most address space it grows to (none of it mapped up front).
pub const RESERVE_MAX: usize = 64 << 30;
/// The least span worth having; where no free stretch that large is found (a `ulimit -v` set
/// before start, tighter than that) the heap stays off (blocks are mappings of their own, as
/// above [`crate::huge::HEAP_MAX`]).
pub const RESERVE_MIN: usize = 256 << 20;
/// Huge pages for the heap's pages as they are mapped (docs/design/thp-policy.md): none until
/// a region is dense (`regions.rs`).
const HEAP_THP: Thp = Thp::Never;
/// `top` is made accessible in steps of this many bytes.
pub const COMMIT_STEP: usize = 1 << 20;
/// Free runs tracked at most (32 bytes each, in a mapping grown as it fills).
pub const MAX_RUNS: usize = 1 << 16;
/// Free runs the table has room for at first (128 KiB of address space; doubled with
/// `mremap` as it fills, up to [`MAX_RUNS`]).
pub const FIRST_RUNS: usize = 1 << 12;
/// A dirty run unused for this long goes back at the next periodic pass (the zones' idle
/// give-back aims at 2 s).
pub const IDLE_NS: u64 = 1_000_000_000;
/// Dirty bytes allowed whatever the working set (see [`dirty_limit`]).
pub const DIRTY_FLOOR: usize = 1 << 20;
/// Dirty bytes always allowed to a heap whose freed space is reused (see [`dirty_limit`]).
pub const DIRTY_MIN: usize = 64 << 20;
/// Dirty bytes never exceeded (see [`dirty_limit`]).
pub const DIRTY_MAX: usize = 1 << 30;

/// The most dirty bytes the heap keeps while `live` bytes are in blocks and blocks took
/// `working_set` bytes of free runs lately ([`PageHeap::working_set`]):
///
/// * no more than the working set, at least [`DIRTY_FLOOR`]: freed space that no block took
///   again is not a cache but a leftover. A program that grows a table by doubling (a Python
///   dict: the new table is larger than all the old ones together, so it comes from `top`)
///   kept every old table resident until the idle pass — 5 MB at the peak of the suite's
///   `python_malloc`, 80.5 MB against mimalloc's 73.9, which gives freed pages back 10 ms
///   after the last use. A program that frees and allocates the same sizes again reuses the
///   runs, and what it reuses it keeps: after one round of faults its working set covers it;
/// * no more than is in use, at least [`DIRTY_MIN`], at most [`DIRTY_MAX`] (a program replacing
///   its large blocks at random needs about that much to find a fit without faults: 32 blocks
///   of 64 KiB–4 MiB, 41–74 MiB live, reached 86 MiB of pages in all in a simulation of best
///   fit that never gave back).
///
/// Time and pressure take the rest (module docs).
pub fn dirty_limit(live: usize, working_set: usize) -> usize {
    working_set
        .max(DIRTY_FLOOR)
        .min(live.clamp(DIRTY_MIN, DIRTY_MAX))
}

/// A placement's rank (lower is better): opens an empty region, room of the free space it
/// is cut from, the density of its region (reversed).
type Rank = (bool, usize, core::cmp::Reverse<usize>);

/// One free run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Run {
    pub addr: usize,
    pub len: usize,
    /// Resident (was a block) rather than given back.
    pub dirty: bool,
    /// When a dirty run was last freed into (the core's clock); 0 for clean runs.
    pub at: u64,
}

impl Run {
    fn end(&self) -> usize {
        self.addr + self.len
    }
}

/// See the module docs.
pub struct PageHeap {
    /// Bytes to try to reserve first.
    reserve_len: usize,
    base: usize,
    end: usize,
    top: usize,
    committed: usize,
    /// The reservation failed at every size: stay off.
    off: bool,
    /// The free runs, sorted by address (a mapping of `runs_cap` entries).
    runs: *mut Run,
    runs_cap: usize,
    n: usize,
    /// Pages of `runs` counted as metadata so far.
    runs_pages: usize,
    dirty: usize,
    live: usize,
    /// Bytes of free runs (dirty or clean) that blocks took since the current period began,
    /// and in the period before (the heap's working set: the freed space it recycles; see
    /// [`PageHeap::trim`] and [`dirty_limit`]).
    demand: usize,
    prev_demand: usize,
    /// The highest `top` so far (lowered only where the span above it is unmapped): the space
    /// between `top` and here held blocks before and was given back into the space above `top`,
    /// so a block taking it again takes freed space (demand), as from a clean run. Without it a
    /// program that frees a burst and allocates it again re-faulted it every time: the burst
    /// went back whole, merged into `top`, and was never counted as reused (four blocks of
    /// 1 MiB freed and taken again in a loop: 1,024 page faults a round, forever).
    high: usize,
    /// Address space lost because the run table was full (never in practice; see `add`).
    lost: usize,
    /// The span's 2 MiB regions: bytes in blocks, which are huge.
    regions: Regions,
}

// SAFETY: the reservation and the run table are owned by the heap; the caller serialises every
// access (the block table's mutex).
unsafe impl Send for PageHeap {}

fn page() -> usize {
    ebbtide_core::os::page_size()
}

impl PageHeap {
    /// A heap that reserves up to `reserve_len` bytes on first use.
    pub const fn new(reserve_len: usize) -> PageHeap {
        PageHeap {
            reserve_len,
            base: 0,
            end: 0,
            top: 0,
            committed: 0,
            off: false,
            runs: ptr::null_mut(),
            runs_cap: 0,
            n: 0,
            runs_pages: 0,
            dirty: 0,
            live: 0,
            demand: 0,
            prev_demand: 0,
            high: 0,
            lost: 0,
            regions: Regions::new(),
        }
    }

    /// Finds the heap's span and maps the run table; false if the heap is off. Nothing of the
    /// span stays mapped: [`PageHeap::take`] maps it in steps of [`COMMIT_STEP`] as `top`
    /// grows (address space on demand, module docs).
    fn ready(&mut self) -> bool {
        if self.base != 0 {
            return true;
        }
        if self.off {
            return false;
        }
        let table = FIRST_RUNS * core::mem::size_of::<Run>();
        let Ok(runs) = ebbtide_core::os::map(table) else {
            // Tried again on the next request.
            return false;
        };
        // Under an address-space limit too low to reserve the span, it is placed unreserved
        // (`reserve_span`); the heap stops where the limit does (`map_at` fails).
        let mut len = self.reserve_len;
        let base = loop {
            if len < RESERVE_MIN.min(self.reserve_len) {
                self.off = true;
                // SAFETY: the run table just mapped, unused.
                unsafe { ebbtide_core::os::unmap(runs, table) };
                return false;
            }
            // Aligned to a region: region i is one huge page's worth of the span.
            match ebbtide_core::os::reserve_span(len, REGION, 0) {
                Ok(p) => break p,
                Err(_) => len /= 2,
            }
        };
        // SAFETY: the reservation just made, unused: only its place is kept.
        unsafe { ebbtide_core::os::unmap(base, len) };
        if !self.regions.init(base.as_ptr() as usize, len) {
            // Tried again on the next request.
            // SAFETY: the run table just mapped, unused.
            unsafe { ebbtide_core::os::unmap(runs, table) };
            return false;
        }
        self.runs = runs.as_ptr().cast();
        self.runs_cap = FIRST_RUNS;
        self.base = base.as_ptr() as usize;
        self.end = self.base + len;
        self.top = self.base;
        self.high = self.base;
        self.committed = self.base;
        true
    }

    /// Whether `addr` is inside the heap's mapped part (a block of this heap, if it is a
    /// block): a mapping of another kind may lie in the span beyond it.
    pub fn contains(&self, addr: usize) -> bool {
        addr.wrapping_sub(self.base) < self.committed - self.base
    }

    /// Bytes of dirty runs: resident free memory, the cache.
    pub fn dirty_bytes(&self) -> usize {
        self.dirty
    }

    /// Bytes in blocks handed out.
    pub fn live_bytes(&self) -> usize {
        self.live
    }

    /// Free runs now (for tests and stats).
    pub fn runs(&self) -> &[Run] {
        if self.runs.is_null() {
            return &[];
        }
        // SAFETY: the first `n` entries of the run table are initialised.
        unsafe { core::slice::from_raw_parts(self.runs, self.n) }
    }

    fn at(&self, i: usize) -> Run {
        debug_assert!(i < self.n);
        // SAFETY: i < n <= MAX_RUNS, inside the run table.
        unsafe { *self.runs.add(i) }
    }

    /// Index of the first run starting at or above `addr`.
    fn lower(&self, addr: usize) -> usize {
        self.runs().partition_point(|r| r.addr < addr)
    }

    fn remove(&mut self, i: usize) -> Run {
        let r = self.at(i);
        // SAFETY: entries i+1..n move down by one, inside the table.
        unsafe { ptr::copy(self.runs.add(i + 1), self.runs.add(i), self.n - i - 1) };
        self.n -= 1;
        if r.dirty {
            self.dirty -= r.len;
        }
        r
    }

    /// Doubles the run table (`mremap`); false at [`MAX_RUNS`] or when no address space is
    /// left (`RLIMIT_AS`).
    fn grow_table(&mut self) -> bool {
        if self.runs_cap >= MAX_RUNS {
            return false;
        }
        let size = core::mem::size_of::<Run>();
        // SAFETY: `runs` is the table's mapping of `runs_cap` entries (from `os::map` or an
        // earlier `remap`), replaced by the new one on success.
        let r = unsafe {
            ebbtide_core::os::remap(
                NonNull::new_unchecked(self.runs.cast()),
                self.runs_cap * size,
                2 * self.runs_cap * size,
            )
        };
        match r {
            Ok(p) => {
                self.runs = p.as_ptr().cast();
                self.runs_cap *= 2;
                true
            }
            Err(_) => false,
        }
    }

    /// Inserts `r` at `i` as it is (no merging); false if the table is full.
    fn insert(&mut self, i: usize, r: Run) -> bool {
        if self.n == self.runs_cap && !self.grow_table() {
            return false;
        }
        // SAFETY: entries i..n move up by one; n < MAX_RUNS, so the last lands inside.
        unsafe {
            ptr::copy(self.runs.add(i), self.runs.add(i + 1), self.n - i);
            *self.runs.add(i) = r;
        }
        self.n += 1;
        let pages = (self.n * core::mem::size_of::<Run>()).div_ceil(page());
        if pages > self.runs_pages {
            ebbtide_core::os::add_metadata((pages - self.runs_pages) * page());
            self.runs_pages = pages;
        }
        if r.dirty {
            self.dirty += r.len;
        }
        true
    }

    /// Adds the free range `[addr, addr+len)` as a run of its kind, merged with neighbours of
    /// the same kind; a clean run ending at `top` lowers `top` instead.
    fn add(&mut self, mut addr: usize, mut len: usize, dirty: bool, mut at: u64) {
        let mut i = self.lower(addr);
        if i > 0 {
            let p = self.at(i - 1);
            if p.end() == addr && p.dirty == dirty {
                self.remove(i - 1);
                i -= 1;
                addr = p.addr;
                len += p.len;
                at = at.max(p.at);
            }
        }
        if i < self.n {
            let nx = self.at(i);
            if nx.addr == addr + len && nx.dirty == dirty {
                self.remove(i);
                len += nx.len;
                at = at.max(nx.at);
            }
        }
        if !dirty && addr + len == self.top {
            self.top = addr;
            return;
        }
        let r = Run {
            addr,
            len,
            dirty,
            at: if dirty { at } else { 0 },
        };
        if !self.insert(i, r) {
            // The table is full (65 536 runs between blocks, or no address space left to grow
            // it): the pages go back, the address space stays unused.
            if dirty {
                release(addr, len);
            }
            self.lost += len;
        }
    }

    /// The regions `[lo, hi)` that the dirty run `r` touches and that hold no block (one
    /// stretch: only the first and the last region it touches may hold blocks), if any.
    fn free_regions(&self, r: &Run) -> Option<(usize, usize)> {
        let (mut lo, mut hi) = (
            self.regions.index(r.addr),
            self.regions.index(r.end() - 1) + 1,
        );
        if self.regions.used(lo) != 0 {
            lo += 1;
        }
        if hi > lo && self.regions.used(hi - 1) != 0 {
            hi -= 1;
        }
        (lo < hi).then_some((lo, hi))
    }

    /// Whether the dirty run `r` touches a huge region (giving it back splits a huge page).
    fn touches_huge(&self, r: &Run) -> bool {
        (self.regions.index(r.addr)..self.regions.index(r.end() - 1) + 1)
            .any(|i| self.regions.is_huge(i))
    }

    /// Turns every dirty byte in `[x, y)` clean, keeping the runs' parts outside it as they
    /// were (no system call: the caller gives the pages back).
    fn turn_clean(&mut self, x: usize, y: usize) {
        loop {
            let mut i = self.lower(x);
            if i > 0 && self.at(i - 1).end() > x {
                i -= 1;
            }
            let Some(j) = (i..self.n)
                .take_while(|&j| self.at(j).addr < y)
                .find(|&j| self.at(j).dirty)
            else {
                return;
            };
            let r = self.remove(j);
            let (cx, cy) = (r.addr.max(x), r.end().min(y));
            // The dirty parts first: their neighbours are not dirty (runs are maximal), so
            // they stay as they were; then the clean part merges with its clean neighbours.
            if r.addr < cx {
                self.add(r.addr, cx - r.addr, true, r.at);
            }
            if cy < r.end() {
                self.add(cy, r.end() - cy, true, r.at);
            }
            self.add(cx, cy - cx, false, 0);
        }
    }

    /// Gives back the regions `[lo, hi)`, which hold no block, whole: the dirty runs' parts in
    /// them turn clean and one `MADV_DONTNEED` covers them (what is mapped of them, `top` and
    /// above included): a huge page goes back without being split. Returns the dirty bytes.
    fn give_back_regions(&mut self, lo: usize, hi: usize) -> usize {
        let (x, y) = (self.regions.start(lo), self.regions.start(hi));
        let dirty = self.dirty;
        self.turn_clean(x, y);
        let end = y.min(self.committed);
        if end > x {
            release(x, end - x);
        }
        self.regions.given_back_whole(lo, hi);
        let b = dirty - self.dirty;
        self.regions.count_given_back(b, 0);
        b
    }

    /// Gives the dirty run `i` back to the kernel; it turns clean. Whole regions it holds go
    /// back whole ([`PageHeap::give_back_regions`]), the rest in part, breaking the huge
    /// regions it touches. Returns the bytes.
    fn clean(&mut self, i: usize) -> usize {
        let r = self.at(i);
        let mut b = 0;
        if let Some((lo, hi)) = self.free_regions(&r) {
            b += self.give_back_regions(lo, hi);
        }
        // What is left of it: at most one piece before the regions given back, one after,
        // each inside `r` (nothing else turns dirty meanwhile).
        loop {
            let j = self.lower(r.addr);
            let Some(p) = (j..self.n)
                .take_while(|&k| self.at(k).addr < r.end())
                .map(|k| self.at(k))
                .find(|p| p.dirty)
            else {
                break;
            };
            b += self.clean_part(p);
        }
        b
    }

    /// Gives back the dirty run `r` (in no region wholly free): the huge regions it touches
    /// are broken — split first (`os::split_huge`: the part given back is uncharged from the
    /// memory cgroup at once, not when the kernel splits the page) — and their free pages that
    /// the split leaves mapped as small pages (clean runs a collapse filled in, what lies above
    /// `top`) go back with it.
    fn clean_part(&mut self, r: Run) -> usize {
        let i = self.lower(r.addr);
        debug_assert_eq!(self.at(i), r);
        self.remove(i);
        for k in self.regions.index(r.addr)..self.regions.index(r.end() - 1) + 1 {
            if self.regions.is_huge(k) {
                let at = r.addr.max(self.regions.start(k));
                // SAFETY: a page of the run (non-null, mapped, a free run's).
                ebbtide_core::os::split_huge(unsafe { NonNull::new_unchecked(at as *mut u8) });
            }
        }
        release(r.addr, r.len);
        self.add(r.addr, r.len, false, 0);
        self.regions.count_given_back(0, r.len);
        for k in self.regions.index(r.addr)..self.regions.index(r.end() - 1) + 1 {
            if self.regions.break_huge(k) {
                let (x, y) = (self.regions.start(k), self.regions.start(k) + REGION);
                let mut j = self.lower(x);
                if j > 0 && self.at(j - 1).end() > x {
                    j -= 1;
                }
                while j < self.n && self.at(j).addr < y {
                    let c = self.at(j);
                    if !c.dirty {
                        let (cx, cy) = (c.addr.max(x), c.end().min(y));
                        release(cx, cy - cx);
                    }
                    j += 1;
                }
                let (tx, ty) = (self.top.max(x), y.min(self.committed));
                if tx < ty {
                    release(tx, ty - tx);
                }
            }
        }
        r.len
    }

    /// Takes `[a, b)` out of the free runs and the space above `top`: pieces of runs outside
    /// it stay free as they were. Returns whether every byte of it is a zero page (nothing of
    /// it was dirty), or `None` when the range could not be made accessible.
    fn take(&mut self, a: usize, b: usize) -> Option<bool> {
        if b > self.end {
            return None;
        }
        if b > self.committed {
            let c = b.next_multiple_of(COMMIT_STEP).min(self.end);
            // SAFETY: [committed, c) lies inside the span, page aligned, and nothing of ours is
            // mapped there (the heap maps only below `committed`).
            let r = unsafe {
                ebbtide_core::os::map_at(
                    NonNull::new_unchecked(self.committed as *mut u8),
                    c - self.committed,
                    HEAP_THP,
                )
            };
            match r {
                Ok(MapAt::Mapped) => self.committed = c,
                Ok(MapAt::Taken) => {
                    // Another mapping lies in the way: the heap ends here.
                    self.end = self.committed;
                    return None;
                }
                // The limit (RLIMIT_AS) reached: the request is a mapping of its own or fails.
                Err(_) => return None,
            }
        }
        let old_top = self.top;
        let mut zeroed = true;
        let mut i = self.lower(a);
        if i > 0 && self.at(i - 1).end() > a {
            i -= 1;
        }
        let mut pieces: [Option<Run>; 2] = [None, None];
        while i < self.n && self.at(i).addr < b {
            let r = self.remove(i);
            zeroed &= !r.dirty;
            // Freed space taken again, dirty or clean: a clean run reused is space the heap
            // would have served without faults had it kept it.
            self.demand += r.end().min(b) - r.addr.max(a);
            if r.addr < a {
                pieces[0] = Some(Run {
                    len: a - r.addr,
                    ..r
                });
            }
            if r.end() > b {
                pieces[1] = Some(Run {
                    addr: b,
                    len: r.end() - b,
                    ..r
                });
            }
        }
        // The pieces are what they were next to (maximal runs stay maximal).
        for p in pieces.into_iter().flatten() {
            let j = self.lower(p.addr);
            if !self.insert(j, p) {
                // One run cut in two with the table full: as in `add`.
                if p.dirty {
                    release(p.addr, p.len);
                }
                self.lost += p.len;
            }
        }
        if b > old_top {
            self.top = b;
            // Space given back into `top` taken again: freed space reused.
            self.demand += b.min(self.high).saturating_sub(a.max(old_top));
            self.high = self.high.max(b);
            if a > old_top {
                // An alignment gap above the old top: a clean run now below `top`.
                self.add(old_top, a - old_top, false, 0);
            }
        }
        self.live += b - a;
        self.regions.fill(a, b, self.committed);
        Some(zeroed)
    }

    /// A block of `len` bytes (a multiple of the page) aligned to `align` (a power of two, at
    /// least a page): its address and whether it is all zero pages. `None` when the heap is
    /// off or its reservation is full.
    pub fn alloc(&mut self, len: usize, align: usize) -> Option<(usize, bool)> {
        debug_assert!(len > 0 && len.is_multiple_of(page()) && align.is_power_of_two());
        if !self.ready() {
            return None;
        }
        // A block of a region or more starts on a region where it can (its regions then
        // fault in as huge pages); any other where its alignment puts it.
        let fit = |rs: usize, re: usize| {
            let at = |al: usize| {
                let a = rs.checked_next_multiple_of(al)?;
                (a.checked_add(len)? <= re).then_some(a)
            };
            (len >= REGION)
                .then(|| at(align.max(REGION)))
                .flatten()
                .or_else(|| at(align))
        };
        // Among fits: first not opening an empty region while one in use fits
        // (`regions::opens_empty`), then the smallest, then the densest region.
        let rank = |a: usize, room: usize| {
            let (first, last) = (
                self.regions.used(self.regions.index(a)),
                self.regions.used(self.regions.index(a + len - 1)),
            );
            (
                regions::opens_empty(len, first, last),
                room,
                core::cmp::Reverse(first),
            )
        };
        // 1. The best dirty run that holds it.
        let mut best: Option<(Rank, usize)> = None;
        for r in self.runs() {
            if r.dirty && r.len >= len {
                if let Some(a) = fit(r.addr, r.end()) {
                    let k = rank(a, r.len);
                    if best.is_none_or(|(b, _)| k < b) {
                        best = Some((k, a));
                    }
                }
            }
        }
        // 2. The best group of adjacent free runs that holds it, or the runs at `top` and the
        //    zero pages above it (3.: as large as the span, so any group of the same rank fits
        //    better).
        if best.is_none() {
            let mut top_start = self.top;
            let mut i = 0;
            while i < self.n {
                let rs = self.at(i).addr;
                let mut j = i;
                while j + 1 < self.n && self.at(j + 1).addr == self.at(j).end() {
                    j += 1;
                }
                let re = self.at(j).end();
                if re == self.top {
                    top_start = rs;
                } else if re - rs >= len {
                    if let Some(a) = fit(rs, re) {
                        let k = rank(a, re - rs);
                        if best.is_none_or(|(b, _)| k < b) {
                            best = Some((k, a));
                        }
                    }
                }
                i = j + 1;
            }
            if let Some(a) = fit(top_start, self.end) {
                let k = rank(a, usize::MAX);
                if best.is_none_or(|(b, _)| k < b) {
                    best = Some((k, a));
                }
            }
        }
        let (_, a) = best?;
        let zeroed = self.take(a, a + len)?;
        Some((a, zeroed))
    }

    /// Frees the block `[addr, addr+len)`: a dirty run if `keep` (caching is allowed), else
    /// given back at once. Then the dirty bytes are brought under [`dirty_limit`] of the bytes
    /// in use and the working set, oldest first.
    pub fn free(&mut self, addr: usize, len: usize, now: u64, keep: bool) {
        debug_assert!(self.contains(addr) && len.is_multiple_of(page()));
        self.live -= len;
        self.regions.empty(addr, addr + len);
        self.add(addr, len, true, now);
        if !keep {
            // Nothing is kept: the run it joined goes back now (whole regions whole).
            if let Some(i) = self.lower(addr + 1).checked_sub(1) {
                let r = self.at(i);
                if r.dirty && r.end() > addr {
                    self.clean(i);
                }
            }
        }
        // Oldest first, not whole regions first: the newest runs are what the program takes
        // again next (whole first cost 3 MiB more peak RSS on the suite's `python_malloc`,
        // 78.4 against 75.4 MiB, its tables freed and allocated larger).
        let limit = dirty_limit(self.live, self.working_set());
        self.release_above(u64::MAX, limit, limit, false);
    }

    /// Grows the block `[addr, addr+old)` to `new` bytes where the free runs after it (and the
    /// zero pages above `top`) reach that far; false (nothing changed) otherwise.
    pub fn grow_in_place(&mut self, addr: usize, old: usize, new: usize) -> bool {
        debug_assert!(new > old && new.is_multiple_of(page()));
        let (c, b) = (addr + old, addr + new);
        let mut cur = c;
        let mut i = self.lower(c);
        while cur < b {
            if i < self.n && self.at(i).addr == cur {
                cur = self.at(i).end();
                i += 1;
            } else if cur == self.top {
                cur = self.end;
            } else {
                return false;
            }
        }
        if b > self.end {
            return false;
        }
        self.take(c, b).is_some()
    }

    /// Shrinks the block `[addr, addr+old)` to `new` bytes: the tail is freed as by
    /// [`PageHeap::free`].
    pub fn shrink_in_place(&mut self, addr: usize, old: usize, new: usize, now: u64, keep: bool) {
        debug_assert!(new < old && new > 0);
        self.free(addr + new, old - new, now, keep);
    }

    /// The oldest dirty run last freed into before `before` that `pick` accepts.
    fn oldest_dirty(&self, before: u64, pick: impl Fn(&Run) -> bool) -> Option<usize> {
        self.runs()
            .iter()
            .enumerate()
            .filter(|(_, r)| r.dirty && r.at < before && pick(r))
            .min_by_key(|(_, r)| r.at)
            .map(|(i, _)| i)
    }

    /// Gives back dirty runs last freed into before `before`, oldest first, while more than
    /// `keep` dirty bytes are left: if `whole_first`, first the regions that hold no block,
    /// whole (no huge page split; oldest run first), then the rest — a run touching a huge
    /// region only while more than `keep_huge` (at least `keep`) are left. Each run's whole
    /// free regions go back whole in any case ([`PageHeap::clean`]). Returns the bytes.
    fn release_above(
        &mut self,
        before: u64,
        keep: usize,
        keep_huge: usize,
        whole_first: bool,
    ) -> usize {
        let mut b = 0;
        while whole_first && self.dirty > keep {
            let Some(i) = self.oldest_dirty(before, |r| self.free_regions(r).is_some()) else {
                break;
            };
            let (lo, hi) = self.free_regions(&self.at(i)).unwrap_or((0, 0));
            b += self.give_back_regions(lo, hi);
        }
        while self.dirty > keep {
            let breaking = self.dirty > keep_huge;
            let Some(i) = self.oldest_dirty(before, |r| breaking || !self.touches_huge(r)) else {
                break;
            };
            b += self.clean(i);
        }
        b
    }

    /// Gives back every dirty run last freed into before `before` (all of them for
    /// `u64::MAX`: a drain), whole regions first; returns the bytes.
    pub fn release_older_than(&mut self, before: u64) -> usize {
        self.release_above(before, 0, 0, true)
    }

    /// Unmaps the span above `top` (from the first region boundary at or above it to
    /// `committed`): address space for other mappings when a mapping was refused
    /// (`RLIMIT_AS` reached: the caller drained the dirty runs first, so `top` rests on the
    /// highest block). Its regions hold no block; their huge-page marks go with them. Mapped
    /// again in [`COMMIT_STEP`]s as `top` grows, as at the start. Returns the bytes unmapped.
    pub fn unmap_above_top(&mut self) -> usize {
        if self.base == 0 {
            return 0;
        }
        let from = self.base + (self.top - self.base).next_multiple_of(REGION);
        if from >= self.committed {
            return 0;
        }
        let (lo, hi) = (
            self.regions.index(from),
            self.regions.index(self.committed - 1) + 1,
        );
        self.regions.given_back_whole(lo, hi);
        let len = self.committed - from;
        // SAFETY: [from, committed) is the heap's mapped part above `top` (page aligned: base
        // and REGION are), where no block and no free run lies; nothing reads it afterwards
        // (`contains` ends at the new `committed`).
        unsafe { ebbtide_core::os::unmap(NonNull::new_unchecked(from as *mut u8), len) };
        self.committed = from;
        self.high = self.high.min(from);
        len
    }

    /// The idle pass: gives back every dirty run last freed into before `before`, whole
    /// regions first, except in huge regions still in use: those only beyond the working set
    /// ([`regions::break_when_idle`], the hysteresis on recent demand: a huge page the heap
    /// keeps reusing is not split). Returns the bytes.
    pub fn release_idle(&mut self, before: u64) -> usize {
        let ws = self.working_set();
        // `release_above` breaks while dirty > keep_huge: the policy's own words.
        debug_assert!(regions::break_when_idle(ws + 1, ws));
        self.release_above(before, 0, ws, true)
    }

    /// Ends a period of the working set (the periodic pass): the current demand becomes the
    /// previous one.
    pub fn end_period(&mut self) {
        self.prev_demand = self.demand;
        self.demand = 0;
    }

    /// The working set: bytes of free runs that blocks took in this period or the one before,
    /// whichever is more.
    pub fn working_set(&self) -> usize {
        self.demand.max(self.prev_demand)
    }

    /// Tests of other mechanisms than the working set: as if blocks had reused `bytes` of free
    /// runs in this period, so that the dirty bytes they free stay.
    #[cfg(test)]
    fn assume_working_set(&mut self, bytes: usize) {
        self.demand = bytes;
    }

    /// A pressure trim: gives back every dirty run last freed into before `before`, then the
    /// oldest dirty runs until no more than [`PageHeap::working_set`] is left (UMA's trim of a
    /// depot to its working-set estimate, here in bytes: a heap whose freed runs nobody took
    /// again keeps nothing); whole regions first each time, huge pages broken as needed.
    /// Returns the bytes.
    pub fn trim(&mut self, before: u64) -> usize {
        let ws = self.working_set();
        self.release_above(before, 0, 0, true) + self.release_above(u64::MAX, ws, ws, true)
    }

    /// The regions' counts (huge, partly used, broken; bytes given back whole and in part).
    pub fn region_counts(&self) -> regions::Counts {
        self.regions.counts()
    }

    /// Checks the invariants of the module docs; the first one broken, as text.
    pub fn validate(&self) -> Result<(), String> {
        let pg = page();
        if self.base != 0 && !(self.top <= self.high && self.high <= self.end) {
            return Err(format!(
                "top {:#x} above the highest top {:#x}, or that beyond the span's end {:#x}",
                self.top, self.high, self.end
            ));
        }
        let mut dirty = 0;
        let mut prev: Option<Run> = None;
        for r in self.runs() {
            if r.len == 0 || !r.addr.is_multiple_of(pg) || !r.len.is_multiple_of(pg) {
                return Err(format!("run {r:?} empty or not page-aligned"));
            }
            if r.addr < self.base || r.end() > self.top {
                return Err(format!(
                    "run {r:?} outside [base, top) = [{:#x}, {:#x})",
                    self.base, self.top
                ));
            }
            if let Some(p) = prev {
                if p.end() > r.addr {
                    return Err(format!("runs {p:?} and {r:?} overlap or are unsorted"));
                }
                if p.end() == r.addr && p.dirty == r.dirty {
                    return Err(format!("runs {p:?} and {r:?} should have merged"));
                }
            }
            if r.dirty {
                dirty += r.len;
            } else if r.end() == self.top {
                return Err(format!("clean run {r:?} rests on top"));
            }
            prev = Some(*r);
        }
        if dirty != self.dirty {
            return Err(format!("dirty bytes {} but runs hold {dirty}", self.dirty));
        }
        if self.top > self.committed || self.committed > self.end {
            return Err("top above committed or committed above end".into());
        }
        // Each region's used bytes are what lies below `top` and in no free run.
        let mut used = Vec::new();
        if self.top > self.base {
            let last = self.regions.index(self.top - 1);
            used = (0..=last)
                .map(|i| {
                    let s = self.regions.start(i);
                    self.top.min(s + REGION) - s
                })
                .collect();
            for r in self.runs() {
                let lo = self.regions.index(r.addr);
                for (i, u) in used
                    .iter_mut()
                    .enumerate()
                    .take(self.regions.index(r.end() - 1) + 1)
                    .skip(lo)
                {
                    let s = self.regions.start(i);
                    *u -= r.end().min(s + REGION) - r.addr.max(s);
                }
            }
        }
        self.regions
            .validate_counts(|i| used.get(i).copied().unwrap_or(0))
    }
}

/// Gives the pages of a free run back; they read as zeros afterwards.
fn release(addr: usize, len: usize) {
    // SAFETY: callers pass whole pages of the committed part of the reservation that hold no
    // block (a free run).
    unsafe { ebbtide_core::os::release(NonNull::new_unchecked(addr as *mut u8), len) };
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: usize = 1024;
    const M: usize = 1024 * 1024;

    fn heap() -> PageHeap {
        PageHeap::new(RESERVE_MIN)
    }

    /// Pages of `[addr, addr+len)` resident now.
    fn resident(addr: usize, len: usize) -> usize {
        let pg = page();
        let mut v = vec![0u8; len / pg];
        // SAFETY: the range is mapped (inside the heap's committed part); v has one byte per
        // page.
        let r = unsafe { libc::mincore(addr as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(r, 0);
        v.iter().filter(|&&b| b & 1 == 1).count()
    }

    /// Whether the page at `p` (page aligned, non-null) is mapped (by anyone): `mincore`
    /// fails on a range that is not.
    fn mapped(p: usize) -> bool {
        ebbtide_core::os::resident_pages(NonNull::new(p as *mut u8).unwrap(), page()).is_some()
    }

    fn write(addr: usize, len: usize, v: u8) {
        // SAFETY: a block of the heap under test, `len` bytes, handed out to the test.
        unsafe { ptr::write_bytes(addr as *mut u8, v, len) };
    }

    /// Drained, the span above `top` is unmapped from the region boundary above the highest
    /// block ([`PageHeap::unmap_above_top`]), and mapped again as `top` grows.
    #[test]
    fn the_span_above_top_is_unmapped_and_mapped_again() {
        let mut h = heap();
        let (a, _) = h.alloc(64 * K, page()).unwrap();
        let (b, _) = h.alloc(5 * M, page()).unwrap();
        let (c, _) = h.alloc(3 * M, page()).unwrap();
        write(b, 5 * M, 1);
        write(c, 3 * M, 2);
        h.free(c, 3 * M, 1, true);
        h.free(b, 5 * M, 1, true);
        h.release_older_than(u64::MAX);
        h.validate().unwrap();
        let unmapped = h.unmap_above_top();
        assert!(unmapped >= 8 * M, "{unmapped} bytes unmapped");
        assert_eq!(h.unmap_above_top(), 0, "nothing left to unmap");
        assert!(mapped(a) && !mapped(a + REGION) && !mapped(c));
        assert!(h.contains(a) && !h.contains(a + REGION));
        h.validate().unwrap();
        let (d, zeroed) = h.alloc(6 * M, page()).unwrap();
        assert!(zeroed);
        write(d, 6 * M, 3);
        assert!(mapped(d + 6 * M - page()));
        h.free(d, 6 * M, 2, true);
        h.free(a, 64 * K, 2, true);
        h.validate().unwrap();
    }

    /// Only what `top` needs is mapped, in steps of [`COMMIT_STEP`]: the rest of the span is
    /// not, and is not the heap's ([`PageHeap::contains`]).
    #[test]
    fn the_span_is_mapped_as_top_grows() {
        let mut h = heap();
        let (a, _) = h.alloc(3 * page(), page()).unwrap();
        assert!(mapped(a) && mapped(a + COMMIT_STEP - page()));
        assert!(!mapped(a + COMMIT_STEP), "one step mapped");
        assert!(h.contains(a + COMMIT_STEP - 1) && !h.contains(a + COMMIT_STEP));
        let (b, _) = h.alloc(COMMIT_STEP, page()).unwrap();
        assert!(mapped(b + COMMIT_STEP - page()) && !mapped(a + 3 * COMMIT_STEP));
        write(b, COMMIT_STEP, 1);
        h.validate().unwrap();
    }

    /// The run table starts small and grows (`mremap`) as runs are added, keeping them.
    #[test]
    fn the_run_table_grows_as_it_fills() {
        let mut h = heap();
        let n = FIRST_RUNS + 100;
        let blocks: Vec<usize> = (0..2 * n)
            .map(|_| h.alloc(page(), page()).unwrap().0)
            .collect();
        assert_eq!(h.runs_cap, FIRST_RUNS, "no run yet: the first table");
        for &b in blocks.iter().step_by(2) {
            h.free(b, page(), 1, true);
        }
        assert_eq!(h.runs().len(), n, "every other page a run of its own");
        assert!(h.runs_cap > FIRST_RUNS && h.runs_cap <= MAX_RUNS);
        assert_eq!(h.lost, 0);
        h.validate().unwrap();
    }

    #[test]
    fn policy_limit() {
        // Nothing reused: the floor, whatever is in use.
        assert_eq!(dirty_limit(0, 0), DIRTY_FLOOR);
        assert_eq!(dirty_limit(100 * M, 0), DIRTY_FLOOR);
        // Reused: the working set, within the bounds set by what is in use.
        assert_eq!(dirty_limit(100 * M, 30 * M), 30 * M);
        assert_eq!(dirty_limit(0, 30 * M), 30 * M);
        assert_eq!(dirty_limit(0, 100 * M), DIRTY_MIN);
        assert_eq!(dirty_limit(100 * M, 200 * M), 100 * M);
        assert_eq!(dirty_limit(usize::MAX, usize::MAX), DIRTY_MAX);
    }

    #[test]
    fn freed_memory_serves_other_sizes_without_faults() {
        let mut h = heap();
        h.assume_working_set(4 * M);
        let (a, z) = h.alloc(M, page()).unwrap();
        assert!(z, "fresh pages are zero");
        let (b, _) = h.alloc(256 * K, page()).unwrap();
        write(a, M, 1);
        write(b, 256 * K, 2);
        h.free(a, M, 1, true);
        h.validate().unwrap();
        assert_eq!(h.dirty_bytes(), M);
        // Two blocks of other sizes fit in the freed megabyte: both dirty, no fresh page.
        let (c, zc) = h.alloc(700 * K, page()).unwrap();
        let (d, zd) = h.alloc(300 * K, page()).unwrap();
        assert!(!zc && !zd);
        assert!(c >= a && c + 700 * K <= a + M, "reused the freed run");
        assert!(d >= a && d + 300 * K <= a + M, "reused the rest of it");
        assert_eq!(h.dirty_bytes(), M - 1000 * K);
        h.validate().unwrap();
        assert_eq!(
            resident(c, 700 * K),
            700 * K / page(),
            "the reused pages stayed"
        );
        // Freed again, the pieces merge back into one run with what was left.
        h.free(c, 700 * K, 2, true);
        h.free(d, 300 * K, 3, true);
        h.validate().unwrap();
        assert!(h
            .runs()
            .iter()
            .any(|r| r.addr == a && r.len == M && r.dirty));
        h.free(b, 256 * K, 4, true);
        h.validate().unwrap();
        // Everything free and dirty: one run from the base to top.
        assert_eq!(h.runs().len(), 1);
        assert_eq!(h.live_bytes(), 0);
    }

    #[test]
    fn give_back_turns_runs_clean_and_lowers_top() {
        let mut h = heap();
        h.assume_working_set(4 * M);
        let (a, _) = h.alloc(2 * M, page()).unwrap();
        let (b, _) = h.alloc(M, page()).unwrap();
        let (c, _) = h.alloc(M, page()).unwrap();
        write(a, 4 * M, 7);
        h.free(a, 2 * M, 10, true);
        h.free(c, M, 20, true);
        assert_eq!(h.dirty_bytes(), 3 * M);
        assert_eq!(resident(a, 2 * M), 2 * M / page());
        // The idle pass: only what was freed before 15 goes.
        assert_eq!(h.release_older_than(15), 2 * M);
        h.validate().unwrap();
        assert_eq!(h.dirty_bytes(), M);
        assert_eq!(resident(a, 2 * M), 0, "given back to the kernel");
        assert_eq!(resident(b, M), M / page(), "the live block is untouched");
        // A drain: all of it; the clean run at top lowers top.
        assert_eq!(h.release_older_than(u64::MAX), M);
        h.validate().unwrap();
        assert_eq!(h.dirty_bytes(), 0);
        assert_eq!(
            h.runs().len(),
            1,
            "the clean run below b stays, the one at top is gone"
        );
        // Clean memory reads as zeros and is reused (address space) before growing top.
        let (d, z) = h.alloc(2 * M, page()).unwrap();
        assert_eq!(d, a);
        assert!(z);
        // SAFETY: d is a live block of 2 MiB that the heap just handed out, readable.
        let block = unsafe { core::slice::from_raw_parts(d as *const u8, 2 * M) };
        assert!(block.iter().all(|&x| x == 0));
    }

    #[test]
    fn pressure_trim_keeps_the_working_set_oldest_first() {
        let mut h = heap();
        let blocks: Vec<usize> = (0..4).map(|_| h.alloc(M / 2, page()).unwrap().0).collect();
        let _guard = h.alloc(M / 2, page()).unwrap(); // keeps the runs below top
                                                      // Freed at 10, 20, 30, 40 with no block taken from a dirty run since: no demand.
        for (i, &b) in blocks.iter().enumerate().step_by(2) {
            h.free(b, M / 2, 10 * (i as u64 + 1), true);
        }
        assert_eq!(h.working_set(), 0);
        assert_eq!(h.dirty_bytes(), M);
        // Nothing is idle before 5, but nobody reused the cache: a trim takes it all.
        assert_eq!(h.trim(5), M);
        assert_eq!(h.dirty_bytes(), 0);
        h.validate().unwrap();

        // Demand: two blocks take 384 KiB of dirty pages between them.
        for (i, &b) in blocks.iter().enumerate().skip(1).step_by(2) {
            h.free(b, M / 2, 100 + i as u64, true);
        }
        let (x, zx) = h.alloc(256 * K, page()).unwrap();
        let (y, zy) = h.alloc(128 * K, page()).unwrap();
        assert!(!zx && !zy, "both from dirty runs");
        assert_eq!(h.working_set(), 384 * K);
        h.free(x, 256 * K, 200, true);
        h.free(y, 128 * K, 201, true);
        assert_eq!(h.dirty_bytes(), M);
        // The trim keeps no more than the working set; the oldest runs go first.
        let given = h.trim(5);
        assert!(h.dirty_bytes() <= 384 * K, "{}", h.dirty_bytes());
        assert_eq!(given + h.dirty_bytes(), M);
        assert!(h.runs().iter().filter(|r| r.dirty).all(|r| r.at >= 103));
        h.validate().unwrap();
        // One period later the demand is still remembered; two periods without reuse, none.
        h.end_period();
        assert_eq!(h.working_set(), 384 * K);
        h.end_period();
        assert_eq!(h.working_set(), 0);
        h.trim(5);
        assert_eq!(h.dirty_bytes(), 0);
        h.validate().unwrap();
    }

    #[test]
    fn freed_space_nobody_takes_again_goes_back_beyond_the_floor() {
        let mut h = heap();
        // A table grown by doubling: each new one is larger than all the old ones together,
        // so it comes from top, and the old one is freed.
        let (mut table, mut len) = (h.alloc(M, page()).unwrap().0, M);
        let first = table;
        write(table, len, 1);
        for step in 1..4u64 {
            let (t, zeroed) = h.alloc(2 * len, page()).unwrap();
            assert!(zeroed, "from the zero pages above top");
            write(t, 2 * len, 1);
            h.free(table, len, step, true);
            (table, len) = (t, 2 * len);
            assert_eq!(h.working_set(), 0, "no free run was taken again");
            assert!(h.dirty_bytes() <= DIRTY_FLOOR, "{}", h.dirty_bytes());
            h.validate().unwrap();
        }
        // The old tables (1 + 2 + 4 MiB) went back to the kernel at their frees.
        assert_eq!(resident(first, 7 * M), 0);
        assert_eq!(resident(table, len), len / page());
        // A size allocated and freed again: the first time its pages fault (the clean runs
        // are reused), then it counts in the working set and stays resident between uses.
        let (a, zeroed) = h.alloc(3 * M, page()).unwrap();
        assert!(zeroed && a < table, "the old tables' address space, clean");
        assert_eq!(h.working_set(), 3 * M);
        write(a, 3 * M, 2);
        h.free(a, 3 * M, 10, true);
        assert_eq!(h.dirty_bytes(), 3 * M, "kept: the working set covers it");
        let (b, zeroed) = h.alloc(3 * M, page()).unwrap();
        assert!(!zeroed && b == a, "the same pages, no fault");
        assert_eq!(resident(b, 3 * M), 3 * M / page());
        h.validate().unwrap();
        // Two periods without reuse and the working set is gone: freed again, it goes back.
        h.end_period();
        h.end_period();
        h.free(b, 3 * M, 20, true);
        assert_eq!(h.dirty_bytes(), 0);
        assert_eq!(resident(b, 3 * M), 0);
        h.validate().unwrap();
    }

    #[test]
    fn a_burst_given_back_into_top_and_taken_again_is_reused() {
        let mut h = heap();
        let round = |h: &mut PageHeap, at: u64| {
            let blocks: Vec<(usize, bool)> = (0..4).map(|_| h.alloc(M, page()).unwrap()).collect();
            for &(b, _) in &blocks {
                write(b, M, 3);
            }
            for &(b, _) in &blocks {
                h.free(b, M, at, true);
            }
            h.validate().unwrap();
            blocks
        };
        // The first burst: nobody took freed space again, so it goes back at the frees and,
        // the highest blocks of the heap, merges into the space above `top`.
        let first = round(&mut h, 1);
        assert!(first.iter().all(|&(_, z)| z));
        assert_eq!(h.dirty_bytes(), 0);
        assert_eq!(h.working_set(), 0);
        // The second takes that space again from above `top`: freed space reused, as from a
        // clean run (its pages fault once more) ...
        let second = round(&mut h, 2);
        assert!(second.iter().all(|&(_, z)| z));
        assert_eq!(h.working_set(), 4 * M);
        assert_eq!(h.dirty_bytes(), 4 * M, "kept: the working set covers it");
        // ... and the third reuses its pages, no fault.
        let third = round(&mut h, 3);
        assert!(third.iter().all(|&(_, z)| !z), "{third:?}");
        assert_eq!(resident(third[0].0, M), M / page());
        // Space above the highest `top` so far is new, not reused: 8 MiB on the 4 MiB dirty
        // run count 4.
        let ws = h.working_set();
        let (x, z) = h.alloc(8 * M, page()).unwrap();
        assert!(!z && x == third[0].0, "{x:#x}");
        assert_eq!(h.working_set(), ws + 4 * M);
        h.free(x, 8 * M, 4, true);
        h.validate().unwrap();
    }

    #[test]
    fn not_keeping_gives_back_at_once() {
        let mut h = heap();
        let (a, _) = h.alloc(M, page()).unwrap();
        let (_b, _) = h.alloc(M, page()).unwrap();
        write(a, M, 3);
        h.free(a, M, 1, false);
        assert_eq!(h.dirty_bytes(), 0);
        assert_eq!(resident(a, M), 0);
        h.validate().unwrap();
    }

    #[test]
    fn dirty_bytes_stay_under_the_limit_oldest_first() {
        let mut h = heap();
        h.assume_working_set(200 * M);
        let blocks: Vec<usize> = (0..100)
            .map(|_| h.alloc(2 * M, page()).unwrap().0)
            .collect();
        // Free every other block (no merging): 50 runs of 2 MiB = 100 MiB dirty, live 100 MiB.
        for (i, &b) in blocks.iter().enumerate().step_by(2) {
            h.free(b, 2 * M, i as u64 + 1, true);
        }
        assert_eq!(h.live_bytes(), 100 * M);
        assert_eq!(h.dirty_bytes(), 100 * M);
        // Three more: live 94 MiB, so at most 94 MiB dirty; the oldest runs went first.
        for i in [1, 3, 5] {
            h.free(blocks[i], 2 * M, 100 + i as u64, true);
        }
        h.validate().unwrap();
        assert!(h.dirty_bytes() <= dirty_limit(h.live_bytes(), h.working_set()));
        assert!(
            h.dirty_bytes() >= dirty_limit(h.live_bytes(), h.working_set()) - 2 * M,
            "no more than needed"
        );
        // The newest frees stayed dirty; the oldest went (blocks 4, 6, ..., 12).
        assert!(h
            .runs()
            .iter()
            .filter(|r| r.addr >= blocks[16])
            .all(|r| r.dirty));
        assert!(h.runs().iter().any(|r| r.addr == blocks[4] && !r.dirty));
    }

    #[test]
    fn mixed_runs_are_used_together_and_alignment_is_kept() {
        let mut h = heap();
        let (a, _) = h.alloc(M, page()).unwrap();
        let (b, _) = h.alloc(M, page()).unwrap();
        let (_c, _) = h.alloc(M, page()).unwrap();
        h.free(a, M, 1, true);
        h.release_older_than(u64::MAX); // a's run is clean
        h.free(b, M, 2, true); // b's dirty, next to it
        assert_eq!(h.runs().len(), 2);
        // 2 MiB fit only in the two runs together: not above top.
        let (d, z) = h.alloc(2 * M, page()).unwrap();
        assert_eq!(d, a);
        assert!(!z, "half of it was dirty");
        h.validate().unwrap();
        // An aligned block: the gap before it stays free.
        let (e, _) = h.alloc(64 * K, 2 * M).unwrap();
        assert_eq!(e % (2 * M), 0);
        h.validate().unwrap();
    }

    #[test]
    fn grow_and_shrink_in_place() {
        let mut h = heap();
        let (a, _) = h.alloc(256 * K, page()).unwrap();
        write(a, 256 * K, 9);
        // At top: grows into the zero pages.
        assert!(h.grow_in_place(a, 256 * K, M));
        let (b, _) = h.alloc(M, page()).unwrap();
        assert_eq!(b, a + M);
        // Blocked by b.
        assert!(!h.grow_in_place(a, M, 2 * M));
        // Shrunk: the tail is a dirty run, and growing takes it again.
        h.shrink_in_place(a, M, 512 * K, 1, true);
        assert_eq!(h.dirty_bytes(), 512 * K);
        h.validate().unwrap();
        assert!(h.grow_in_place(a, 512 * K, M));
        assert_eq!(h.dirty_bytes(), 0);
        // SAFETY: a is a live block of 1 MiB whose first 256 KiB were written.
        let head = unsafe { core::slice::from_raw_parts(a as *const u8, 256 * K) };
        assert!(head.iter().all(|&x| x == 9));
        h.free(b, M, 2, true);
        assert!(
            h.grow_in_place(a, M, 3 * M),
            "through the freed block and past top"
        );
        h.validate().unwrap();
        assert_eq!(h.live_bytes(), 3 * M);
    }

    /// Blocks of a region or more start on a region, and a region they fill turns huge
    /// (eligible) before the block is touched; the counts follow.
    #[test]
    fn big_blocks_fill_regions_that_turn_huge() {
        let mut h = heap();
        h.assume_working_set(8 * M);
        let (s, _) = h.alloc(64 * K, page()).unwrap();
        let (a, z) = h.alloc(4 * M, page()).unwrap();
        assert!(z);
        assert_eq!(a % REGION, 0, "on a region");
        assert_eq!(a, s + REGION, "the next region; the gap stays free");
        let c = h.region_counts();
        assert_eq!((c.huge, c.partial), (2, 1), "{c:?}");
        // A small block into the gap: the region in use, not a new one.
        let (b, _) = h.alloc(256 * K, page()).unwrap();
        assert!(b > s && b < a, "{b:#x}");
        h.validate().unwrap();
        write(a, 4 * M, 1);
        // Freed, the regions stay huge (resident) until given back whole.
        h.free(a, 4 * M, 1, true);
        assert_eq!(h.region_counts().huge, 2);
        h.validate().unwrap();
    }

    /// Among free runs that fit, the one in a region already in use, then the one in the
    /// densest region, though a smaller run or an earlier one lies elsewhere.
    #[test]
    fn placement_prefers_regions_in_use_then_the_densest() {
        let mut h = heap();
        h.assume_working_set(64 * M);
        // Region 0: x (512 KiB) and y (512 KiB) in use, z's megabyte given back (clean).
        let (x, _) = h.alloc(M / 2, page()).unwrap();
        let (_y, _) = h.alloc(M / 2, page()).unwrap();
        let (z, _) = h.alloc(M, page()).unwrap();
        // Region 1: u (512 KiB, freed later) and v (1.5 MiB) in use.
        let (u, _) = h.alloc(M / 2, page()).unwrap();
        let (_v, _) = h.alloc(3 * M / 2, page()).unwrap();
        assert_eq!(u, x + REGION);
        write(x, 4 * M, 1);
        h.free(z, M, 1, true);
        assert_eq!(h.release_older_than(2), M);
        h.free(x, M / 2, 5, true);
        h.free(u, M / 2, 6, true);
        h.validate().unwrap();
        // Two dirty runs of 512 KiB: region 0 holds 512 KiB in blocks, region 1 1.5 MiB.
        let (p, zeroed) = h.alloc(M / 2, page()).unwrap();
        assert!(!zeroed);
        assert_eq!(p, u, "the run in the denser region, not the first one");
        h.validate().unwrap();
    }

    /// A small block does not open an empty region while a run in a region in use fits,
    /// though that run is larger.
    #[test]
    fn placement_keeps_empty_regions_empty() {
        let mut h = heap();
        h.assume_working_set(64 * M);
        // Region 0: a (1 MiB), b (512 KiB, freed later), c (512 KiB).
        let (a, _) = h.alloc(M, page()).unwrap();
        let (b, _) = h.alloc(M / 2, page()).unwrap();
        let (_c, _) = h.alloc(M / 2, page()).unwrap();
        // Region 1: w (128 KiB) and t (the rest); region 2: a guard.
        let (w, _) = h.alloc(128 * K, page()).unwrap();
        let (t, _) = h.alloc(REGION - 128 * K, page()).unwrap();
        let (_g, _) = h.alloc(64 * K, page()).unwrap();
        assert_eq!(w, a + REGION);
        write(a, 2 * REGION, 2);
        // Region 1 empty but for w's dirty run of 128 KiB; region 0 a dirty run of 512 KiB.
        h.free(t, REGION - 128 * K, 8, true);
        h.release_older_than(9);
        h.free(b, M / 2, 9, true);
        h.free(w, 128 * K, 10, true);
        h.validate().unwrap();
        assert!(h
            .runs()
            .iter()
            .any(|r| r.addr == w && r.len == 128 * K && r.dirty));
        let (q, zeroed) = h.alloc(64 * K, page()).unwrap();
        assert!(!zeroed);
        assert_eq!(
            q, b,
            "into the region in use, not the smaller run in an empty one"
        );
        assert_eq!(h.regions.used(1), 0, "region 1 still empty");
        h.validate().unwrap();
    }

    /// A trim keeps the working set and gives back a whole free region before an older run
    /// in a region still in use (which would split its huge page).
    #[test]
    fn whole_regions_go_back_before_parts() {
        let mut h = heap();
        // Region 0: a (1.5 MiB, huge) and b (512 KiB); region 1: c (2 MiB); region 2: a guard.
        let (a, _) = h.alloc(3 * M / 2, page()).unwrap();
        let (b, _) = h.alloc(M / 2, page()).unwrap();
        let (c, _) = h.alloc(2 * M, page()).unwrap();
        let (_g, _) = h.alloc(64 * K, page()).unwrap();
        assert_eq!((b, c), (a + 3 * M / 2, a + REGION));
        write(a, 4 * M, 3);
        assert_eq!(h.region_counts().huge, 2);
        h.assume_working_set(4 * M);
        h.free(b, M / 2, 1, true); // older, in a region in use
        h.free(c, 2 * M, 2, true); // newer, a whole region
        assert_eq!(h.dirty_bytes(), 5 * M / 2);
        // A trim down to 1 MiB: the whole region goes, though newer; the older part stays.
        h.assume_working_set(M);
        assert_eq!(h.trim(0), 2 * M);
        assert!(h.runs().iter().any(|r| r.addr == b && r.dirty));
        assert!(h.runs().iter().any(|r| r.addr == c && !r.dirty));
        let k = h.region_counts();
        assert_eq!(
            (k.whole_bytes, k.part_bytes, k.breaks),
            (2 * M as u64, 0, 0)
        );
        assert_eq!(k.huge, 1, "region 1 given back whole is no longer huge");
        h.validate().unwrap();
        // Region 0 faulted in as a huge page (root reads the frames' flags; THP on).
        let thp = ebbtide_core::os::page_in_thp(a);
        if ebbtide_core::os::thp_observable() {
            assert_eq!(thp, Some(true), "region 0 in a huge page");
        }
        // Under a drain the part goes too, breaking region 0's huge page.
        assert_eq!(h.release_older_than(u64::MAX), M / 2);
        if thp == Some(true) {
            // Split before its part went: the block is on pages of its own, the part given
            // back uncharged at once (not charged as part of a huge page until the kernel
            // splits it).
            assert_eq!(
                ebbtide_core::os::page_in_thp(a),
                Some(false),
                "region 0 split"
            );
        }
        let k = h.region_counts();
        assert_eq!(
            (k.part_bytes, k.breaks, k.huge, k.broken),
            (M as u64 / 2, 1, 0, 1)
        );
        assert_eq!(resident(b, M / 2), 0);
        assert_eq!(
            resident(a, 3 * M / 2),
            3 * M / 2 / page(),
            "the block stays"
        );
        h.validate().unwrap();
    }

    /// The idle pass gives back idle whole regions at once, but an idle part of a huge region
    /// in use only once the working set no longer covers it (two periods without reuse).
    #[test]
    fn the_idle_pass_breaks_a_huge_page_only_beyond_the_working_set() {
        let mut h = heap();
        let (a, _) = h.alloc(3 * M / 2, page()).unwrap();
        let (b, _) = h.alloc(M / 2, page()).unwrap();
        let (c, _) = h.alloc(2 * M, page()).unwrap();
        let (_g, _) = h.alloc(64 * K, page()).unwrap();
        write(a, 4 * M, 4);
        h.assume_working_set(4 * M);
        h.free(b, M / 2, 1, true);
        h.free(c, 2 * M, 1, true);
        h.assume_working_set(M);
        // Idle since 1: the whole region goes; the part is covered by the working set.
        assert_eq!(h.release_idle(10), 2 * M);
        assert_eq!(h.dirty_bytes(), M / 2);
        assert_eq!(h.region_counts().breaks, 0);
        h.validate().unwrap();
        h.end_period();
        assert_eq!(
            h.release_idle(10),
            0,
            "the demand of the last period still covers it"
        );
        h.end_period();
        assert_eq!(h.working_set(), 0);
        assert_eq!(h.release_idle(10), M / 2);
        assert_eq!(h.region_counts().breaks, 1);
        assert_eq!(resident(b, M / 2), 0);
        h.validate().unwrap();
    }

    /// A drain of many freed blocks: whole regions in one call each stretch, nothing in part.
    #[test]
    fn a_drain_gives_back_whole_regions() {
        let mut h = heap();
        h.assume_working_set(256 * M);
        let blocks: Vec<usize> = (0..16).map(|_| h.alloc(4 * M, page()).unwrap().0).collect();
        let (_g, _) = h.alloc(64 * K, page()).unwrap();
        for (i, &b) in blocks.iter().enumerate() {
            write(b, 4 * M, 5);
            h.free(b, 4 * M, i as u64, true);
        }
        assert_eq!(h.dirty_bytes(), 64 * M);
        let before = h.region_counts();
        assert_eq!(h.release_older_than(u64::MAX), 64 * M);
        let k = h.region_counts();
        assert_eq!(k.whole_bytes - before.whole_bytes, 64 * M as u64);
        assert_eq!(k.part_bytes - before.part_bytes, 0);
        assert_eq!((k.huge, k.breaks), (0, 0));
        assert_eq!(resident(blocks[0], 64 * M), 0);
        h.validate().unwrap();
    }

    #[test]
    fn random_sequences_keep_the_invariants() {
        let mut h = heap();
        let mut live: Vec<(usize, usize)> = Vec::new();
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for step in 0..3000u64 {
            let r = rnd();
            match r % 7 {
                0..=2 => {
                    let len = (1 + (r >> 8) as usize % 64) * 16 * K;
                    let align = if r & 1 << 40 != 0 { 64 * K } else { page() };
                    if let Some((a, _)) = h.alloc(len, align) {
                        assert_eq!(a % align, 0);
                        for &(b, l) in &live {
                            assert!(a + len <= b || b + l <= a, "overlap");
                        }
                        live.push((a, len));
                    }
                }
                3 | 4 if !live.is_empty() => {
                    let (a, l) = live.swap_remove((r >> 8) as usize % live.len());
                    h.free(a, l, step, r & 1 << 41 != 0);
                }
                5 if !live.is_empty() => {
                    let i = (r >> 8) as usize % live.len();
                    let (a, l) = live[i];
                    let n = (1 + (r >> 20) as usize % 64) * 16 * K;
                    if n > l && h.grow_in_place(a, l, n) {
                        live[i].1 = n;
                    } else if n < l {
                        h.shrink_in_place(a, l, n, step, true);
                        live[i].1 = n;
                    }
                    for (j, &(b, bl)) in live.iter().enumerate() {
                        assert!(j == i || a + live[i].1 <= b || b + bl <= a, "overlap");
                    }
                }
                6 if r & 1 << 42 != 0 => {
                    h.trim(step.saturating_sub(50));
                    assert!(h.dirty_bytes() <= h.working_set());
                    if r & 1 << 43 != 0 {
                        h.end_period();
                    }
                }
                _ => {
                    h.release_older_than(step.saturating_sub(50));
                }
            }
            h.validate().unwrap_or_else(|e| panic!("step {step}: {e}"));
            assert_eq!(h.live_bytes(), live.iter().map(|l| l.1).sum::<usize>());
        }
    }
}
