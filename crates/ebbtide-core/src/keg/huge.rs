//! Huge pages in a keg (docs/design/hugepage-heap.md): which chunks are huge, which of their
//! 2 MiB pages may go back whole, how many an idle trim may break, and what the stats count.
//!
//! ```text
//!  chunk (4 MiB) of a dense keg, mapped in one step, MADV_HUGEPAGE
//!  | colour | slab | slab | ... | slab |slab| slab | ... | slab | tail |
//!  └──────────── huge page 0 ──────────┴──────── huge page 1 ───────────┘
//!    each goes back whole (one MADV_DONTNEED of 2 MiB, with the colour pages or the tail no
//!    slab holds) once every slab inside it is free; the chunk whole (4 MiB, the slab across
//!    the border too) once all its slabs are. Its descriptors lie outside it (`arena.rs`, "The
//!    descriptor span"), so no page of it holds anything but slabs.
//! ```
//!
//! **Which chunks.** A zone's keg's chunks are `MADV_NOHUGEPAGE` until it is dense (the
//! allocator's bucket kegs, which no program walks, stay so): once it holds
//! [`HUGE_AFTER`] of backed slabs, each chunk it takes is `MADV_HUGEPAGE` ([`chunk_thp`],
//! pure), and its older chunks are made huge too ([`Keg::make_older_chunks_huge`]), so its
//! slabs sit in huge pages on `madvise` and `always` hosts alike (Temeraire's gain: fewer TLB
//! misses for the program's small objects). A small program's kegs never get there: it stays as
//! small as with no huge page at all (docs/design/thp-policy.md).
//!
//! **A page given back in part is split first** (`Arena::release_pages`, `os::split_huge`): a
//! partial `MADV_DONTNEED` of a huge page drops the RSS at once but leaves the memory cgroup
//! charged the whole 2 MiB until the kernel splits the page under pressure; split first, the
//! part given back is uncharged at once (`python3`'s million 40-byte objects after
//! `malloc_trim`: 5 MiB charged, 46 without the split).
//!
//! **Give-back order.** Whole free chunks and huge pages first (no split, microseconds a page),
//! then the free slabs outside huge pages, then — breaking huge pages — the free slabs in them
//! ([`Keg::release_free`]'s three passes, `handoff.rs`). Under pressure, a squeeze, a reclaim or
//! a drain (the decision's `breaks`) every free slab may go; in a calm pass a partly used huge
//! page is broken only beyond [`idle_breaks`]: its free slabs are where the keg's next
//! allocations go, and a page broken is 4 KiB pages until the kernel collapses it again. Free
//! slabs in huge pages never go lazily (`MADV_FREE` of part of a huge page splits it): when the
//! free-slab cap (`excess.rs`, itself sized by recent reuse) asks for slabs, whole pages go,
//! then the slabs outside huge pages (lazily or now), then those in them (now). Exempt from the
//! cap, a class whose use swings would keep up to half its huge pages' slabs free. In a reclaim
//! a slab emptied into a huge page waits on the free list for the reclaim's
//! [`Keg::release_free`], which takes whole pages first.
//!
//! **Counting.** `nfree_huge` (free slabs in huge pages) and each chunk header's `nfree` (its
//! slabs on the free list: all of them, and the chunk goes back whole without a walk over its
//! descriptors) change under the keg lock wherever a slab enters or leaves the free list;
//! [`Keg::validate`] recounts them. The stats' huge page counts are a walk over the huge chunks'
//! slab descriptors when asked ([`Keg::huge_counts`]).

use super::*;
use crate::arena::HUGE_PAGE;

/// Bytes of backed slabs from which a keg's next chunks are huge. A huge page is backed whole
/// as soon as a slab in it is touched, up to 2 MiB more than the keg uses: a sixteenth of what
/// a keg this full holds. At 8 MiB for every keg the suite's `live_mixed` (20,000 objects of
/// 16 B–16 KiB) peaked at 76 MiB against 60 (docs/design/hugepage-heap.md).
pub const HUGE_AFTER: usize = 32 << 20;

/// In a process whose kegs hold [`HUGE_PROCESS`] of slabs, a keg's next chunks are huge from
/// this much: a large working set spread over many size classes (512 MiB of 64–256-byte objects
/// is nine classes of under 64 MiB) misses the TLB as much as one class would.
pub const HUGE_AFTER_IN_LARGE: usize = 8 << 20;

/// Bytes of backed slabs over every keg from which [`HUGE_AFTER_IN_LARGE`] applies: there the
/// newest huge page of each keg that holds 8 MiB or more costs at most a quarter of that keg and
/// less than a tenth of the process in practice.
pub const HUGE_PROCESS: usize = 256 << 20;

/// Huge pages per chunk.
pub(crate) const PAGES_PER_CHUNK: usize = CHUNK_SIZE / HUGE_PAGE;
const _: () = assert!(CHUNK_SIZE.is_multiple_of(HUGE_PAGE));

/// The huge page policy of the next chunk of a keg holding `backed_bytes` of backed slabs, in a
/// process whose kegs hold `process_bytes` ([`MAPPED_BYTES`]).
pub(crate) fn chunk_thp(backed_bytes: usize, process_bytes: usize) -> os::Thp {
    let after = if process_bytes >= HUGE_PROCESS {
        HUGE_AFTER_IN_LARGE
    } else {
        HUGE_AFTER
    };
    if backed_bytes >= after {
        os::Thp::Huge
    } else {
        os::Thp::Never
    }
}

/// Huge pages collapsed per keg per call of [`Keg::collapse_mended`]: a keg crosses
/// [`HUGE_AFTER`] with 8 chunks (16 pages), [`HUGE_AFTER_IN_LARGE`] with 2.
pub(super) const CONVERT_MAX: usize = 16;
const _: () = assert!(CONVERT_MAX <= 32); // `ToCollapse::collapse`'s bits

/// Set when a keg made its older chunks huge ([`Keg::make_older_chunks_huge`]), or found more
/// pages to collapse than one call takes: the runtime's next pass over the pools collapses them
/// ([`crate::reclaim::collapse_pending`]). Relaxed: it only starts a walk, which reads the
/// chunks' marks under their keg locks.
pub(crate) static HUGE_PENDING: core::sync::atomic::AtomicBool =
    core::sync::atomic::AtomicBool::new(false);

/// The huge pages [`Keg::collapse_mended`] collapses once the keg lock is dropped (a copy of
/// 2 MiB each: not under the lock).
pub(super) struct ToCollapse {
    ranges: [(usize, usize); CONVERT_MAX],
    n: usize,
}

/// Pages of a huge page that may be absent from memory when it is collapsed: an eighth of it,
/// and in a chunk's first page the colour pages before slab 0 too (never touched). A collapse
/// backs the whole 2 MiB: a page whose slabs all hold memory by the keg's count can still be
/// half absent — items of slabs taken clean again fault in only as they are written — and
/// collapsing such pages raised `live_mixed`'s peak RSS from 65 to 82 MiB (its 16 KiB class,
/// 18 pages collapsed, each about half absent; no faster). khugepaged's own default
/// (`max_ptes_none` 511) would collapse a page with one page present. Pure.
pub(super) fn collapse_allowance(first_page: bool, colour_pages: usize, page_size: usize) -> usize {
    HUGE_PAGE / page_size / 8 + if first_page { colour_pages } else { 0 }
}

impl ToCollapse {
    pub(super) fn new() -> ToCollapse {
        ToCollapse {
            ranges: [(0, 0); CONVERT_MAX],
            n: 0,
        }
    }

    fn full(&self) -> bool {
        self.n == CONVERT_MAX
    }

    fn push(&mut self, addr: usize, len: usize) {
        self.ranges[self.n] = (addr, len);
        self.n += 1;
    }

    /// Collapses the ranges into huge pages; call it with the keg lock dropped. Items in them
    /// stay where they are and may be used meanwhile (the kernel copies under its locks).
    /// Returns the ranges the kernel collapsed, bit `i` for range `i`.
    pub(super) fn collapse(&self) -> u32 {
        let mut done = 0;
        for (i, &(addr, len)) in self.ranges[..self.n].iter().enumerate() {
            // SAFETY: a range of a chunk of ours (non-null), mapped and `MADV_HUGEPAGE`.
            let at = unsafe { NonNull::new_unchecked(addr as *mut u8) };
            if os::collapse(at, len) {
                done |= 1 << i;
            }
        }
        done
    }
}

/// How many free slabs of partly used huge pages a calm trim may release (breaking their
/// pages), pure: those beyond both the keg's recent demand (`demand`, slabs taken again lately,
/// `reuse.rs`) and half the slabs those pages hold (`slabs`): a huge page is broken only while
/// the huge pages are less than half used and the program did not take that much lately —
/// the hysteresis that keeps a keg whose use swings from breaking and refaulting its pages.
pub fn idle_breaks(free: usize, slabs: usize, demand: usize) -> usize {
    free.saturating_sub(demand.max(slabs / 2))
}

/// What the stats count of a keg's huge pages ([`Keg::huge_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugeCounts {
    /// Huge pages (of huge chunks) that hold memory: a slab in them backed.
    pub pages: usize,
    /// Of them, pages partly used: some of their slabs hold items, some do not.
    pub partly_used: usize,
    /// Of them, pages broken: some of their slabs were given back while the rest stays.
    pub broken: usize,
    /// Huge pages the keg collapsed, ever ([`Keg::collapse_mended`]).
    pub collapsed: usize,
}

/// The slabs of one huge page, by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct PageUse {
    /// Slabs overlapping the page that hold items (partial or full).
    pub(super) used: usize,
    /// Free slabs (backed, on the free list) lying entirely inside the page.
    pub(super) free_inside: usize,
    /// Free slabs overlapping the page.
    pub(super) free: usize,
    /// Carved slabs overlapping the page whose pages were given back (clean, or offered).
    pub(super) released: usize,
    /// Slabs overlapping the page never carved.
    pub(super) uncarved: usize,
    /// Slabs entirely inside the page: `[inside.0, inside.1)`.
    pub(super) inside: (usize, usize),
}

impl PageUse {
    /// The page may go back whole: no slab overlapping it holding an item, and every slab
    /// inside it free (so taken off the free list, they are all of it the release touches; a
    /// page with a clean, lazy or never carved slab inside was broken or is not yet full, and
    /// goes by its slabs).
    pub(super) fn whole_free(&self) -> bool {
        self.used == 0 && self.free_inside > 0 && self.free_inside == self.inside.1 - self.inside.0
    }
}

impl Keg {
    /// Whether slab `s` (a valid meta of this keg) lies in huge pages: its chunk is huge.
    #[inline]
    pub(super) fn in_huge(&self, s: *mut SlabMeta) -> bool {
        let hdr = Keg::header_of(s);
        // SAFETY: a slab's descriptor lies in its chunk's descriptor area, after the header the
        // keg wrote when it took the chunk (`grow`); its `huge` changes only under the keg
        // lock, which the callers hold.
        unsafe { (*hdr).huge }
    }

    /// Makes the keg's chunks huge when it becomes dense (its first huge chunk, `grow`): each
    /// older chunk whose slabs all hold memory (partial, full or free: none released, lazy or in
    /// flight, and all carved) is mapped whole, marked `MADV_HUGEPAGE`, counted huge, and noted
    /// as two pages to collapse: the runtime's thread collapses them within a pass over the
    /// pools ([`HUGE_PENDING`], [`Keg::collapse_mended`]), not this allocation (collapsing the
    /// 32 MiB a keg crosses with took one `malloc` 22–27 ms). Without it the first 8–32 MiB of
    /// every class stayed on 4 KiB pages: `tlb_random` on THP `always` had 160 MiB of its 600
    /// there and chased 1.26× slower than jemalloc (docs/design/hugepage-heap.md). `g` is this
    /// keg's locked state.
    pub(super) fn make_older_chunks_huge(&self, g: &mut KegInner) {
        let mut c = g.chunks;
        while !c.is_null() {
            let chunk = self.chunk_at(c);
            let carved = self.carved(g, c);
            let mut free = 0;
            let mut backed = carved == self.geo.slabs_per_chunk;
            for i in 0..carved {
                if !backed {
                    break;
                }
                // SAFETY: `s` is a carved slab's descriptor of this chunk; lock held.
                match unsafe { (*self.meta(chunk, i)).state } {
                    SlabState::Partial | SlabState::Full => {}
                    SlabState::Free => free += 1,
                    SlabState::Clean | SlabState::Lazy => backed = false,
                }
            }
            // SAFETY: `c` is a valid chunk header of this keg; lock held.
            let huge = unsafe { (*c).huge };
            if backed
                && !huge
                && self
                    .arena
                    .map_through(chunk, chunk + CHUNK_SIZE, os::Thp::Huge)
                    .is_ok()
            {
                // SAFETY: the chunk is ours and mapped whole (just above).
                let at = unsafe { NonNull::new_unchecked(chunk as *mut u8) };
                os::set_thp(at, CHUNK_SIZE, os::Thp::Huge);
                // SAFETY: as above; `huge` and `broken` change here under the lock (`huge`
                // only false to true).
                unsafe {
                    (*c).huge = true;
                    (*c).broken = (1 << PAGES_PER_CHUNK) - 1;
                }
                g.huge_chunks += 1;
                g.nfree_huge += free;
                HUGE_PENDING.store(true, Ordering::Relaxed);
            }
            // SAFETY: as above.
            c = unsafe { (*c).next };
        }
    }

    /// Notes that slab `s` (a valid meta of this keg, in a huge chunk) goes back on its own: the
    /// huge pages it overlaps are broken until [`Keg::collapse_mended`] finds them whole again.
    /// Lock held.
    pub(super) fn mark_broken(&self, s: *mut SlabMeta) {
        let chunk = self.arena.chunk_of_desc(s as usize);
        let (a, len) = self.release_span(s);
        let (first, last) = ((a - chunk) / HUGE_PAGE, (a + len - 1 - chunk) / HUGE_PAGE);
        let hdr = Keg::header_of(s);
        for h in first..=last {
            // SAFETY: the chunk's header, written by `grow`; the caller holds the lock, under
            // which `broken` changes.
            unsafe { (*hdr).broken |= 1 << h };
        }
    }

    /// Collapses the huge pages noted as not huge (broken by a release, or made huge after
    /// their pages were touched) whose slabs all hold memory (none given back, all carved) and
    /// whose pages are in memory but for [`collapse_allowance`] (`mincore`, under the lock: a
    /// few microseconds a page, as the slab walk):
    /// after a drain broke them, the slabs taken again fault in 4 KiB pages until khugepaged
    /// passes, which scans 16 MiB every 10 s by default. At most [`CONVERT_MAX`] pages a call
    /// (more left: [`HUGE_PENDING`] set again), the copies with the lock dropped; call it when
    /// calm (a collapse takes a free huge page). Returns the pages collapsed.
    pub(crate) fn collapse_mended(&self) -> usize {
        let mut conv = ToCollapse::new();
        {
            let g = lock(&self.inner);
            if g.huge_chunks == 0 {
                return 0;
            }
            let (ps, colour) = (os::page_size(), colour_of(self.tag));
            let mut c = g.chunks;
            while !c.is_null() && !conv.full() {
                let chunk = self.chunk_at(c);
                // SAFETY: `c` is a valid chunk header of this keg; lock held.
                let broken = unsafe { (*c).broken };
                for h in 0..PAGES_PER_CHUNK {
                    if broken & (1 << h) == 0 || conv.full() {
                        continue;
                    }
                    let u = self.page_use(chunk, self.carved(&g, c), h);
                    if u.released != 0 || u.uncarved != 0 {
                        continue;
                    }
                    // Filled by the keg's count; in memory? (A collapse backs all of it.)
                    let page = chunk + h * HUGE_PAGE;
                    // SAFETY: a page of a chunk of ours: non-null, mapped (a huge chunk is
                    // mapped whole).
                    let at = unsafe { NonNull::new_unchecked(page as *mut u8) };
                    let ok = collapse_allowance(h == 0, colour, ps);
                    if os::resident_pages(at, HUGE_PAGE).is_some_and(|r| r + ok < HUGE_PAGE / ps) {
                        continue; // stays broken: a later pass looks again
                    }
                    // SAFETY: as above; `broken` changes under the lock.
                    unsafe { (*c).broken &= !(1 << h) };
                    conv.push(page, HUGE_PAGE);
                }
                // SAFETY: as above.
                c = unsafe { (*c).next };
            }
            if conv.full() {
                HUGE_PENDING.store(true, Ordering::Relaxed);
            }
        }
        let done = conv.collapse();
        if done != 0 {
            let _g = lock(&self.inner);
            for (i, &(addr, _)) in conv.ranges[..conv.n].iter().enumerate() {
                // Still ours: an empty chunk may have gone back to the arena, unmapped, while
                // the lock was dropped (`empty.rs`); under the lock its tag cannot change.
                if done & (1 << i) != 0 && self.owns(addr) {
                    let hdr = self.header(addr & !(CHUNK_SIZE - 1));
                    // SAFETY: the header of a chunk of this keg (its tag is ours, read under
                    // the lock that a chunk leaves the keg under); the lock is held.
                    unsafe { (*hdr).collapsed += 1 };
                }
            }
        }
        done.count_ones() as usize
    }

    /// Releases the part of the newest chunk's huge page not carved yet, if that chunk is
    /// huge: its first touch backed the whole page, and no slab holds that part to give it back
    /// (a drain that broke the page left up to 2 MiB a keg resident). Under the keg lock, the
    /// one `madvise` that is: only the lock keeps a carve out of that range; at most 2 MiB, once
    /// per release that may break pages. `g` is this keg's locked state.
    pub(super) fn release_uncarved(&self, g: &KegInner) {
        let c = g.chunks;
        // SAFETY: `c` is the newest chunk's valid header; lock held.
        if c.is_null() || g.uncarved == 0 || !unsafe { (*c).huge } {
            return;
        }
        let chunk = self.chunk_at(c);
        let carved = self.geo.slabs_per_chunk - g.uncarved;
        let from = self.geo.first_slab + (carved << self.geo.slab_shift);
        let to = os::round_up(from, HUGE_PAGE).min(CHUNK_SIZE);
        if to > from {
            // SAFETY: the chunk's header; lock held (`broken` changes under it).
            unsafe { (*c).broken |= 1 << (from / HUGE_PAGE) };
            // SAFETY: the chunk's range past its last carved slab, up to the end of that slab's
            // huge page (or the chunk): mapped (a huge chunk is mapped whole), never handed out,
            // and no carve reaches it while the lock is held. (The page's split, if it is one
            // part of a huge page, costs the lock a copy of nothing: tens of microseconds.)
            unsafe { self.arena.release_pages(chunk + from, to - from) };
        }
    }

    /// The range whose pages go back when slab `s` (a valid meta of this keg) is released: the
    /// slab's, and for slab 0 of a huge chunk the colour pages before it too (backed by huge
    /// page 0 and used by nothing). Releasing them again later is harmless: nothing touches
    /// them.
    #[inline]
    pub(super) fn release_span(&self, s: *mut SlabMeta) -> (usize, usize) {
        let base = self.slab_base(s);
        // SAFETY: `s` is a valid meta (callers hold the lock or own the slab).
        if unsafe { (*s).index } == 0 && self.in_huge(s) {
            let colour = colour_of(self.tag) * os::page_size();
            (base - colour, self.geo.slab_size + colour)
        } else {
            (base, self.geo.slab_size)
        }
    }

    /// The slabs of huge page `h` of `chunk` (`carved` of them carved), by state. Lock held.
    pub(super) fn page_use(&self, chunk: usize, carved: usize, h: usize) -> PageUse {
        let (first, shift) = (self.geo.first_slab, self.geo.slab_shift);
        let slab = self.geo.slab_size;
        let n = self.geo.slabs_per_chunk;
        let (a, b) = (h * HUGE_PAGE, (h + 1) * HUGE_PAGE); // offsets in the chunk
                                                           // Overlapping: start < b and end > a. Inside: start >= a and end <= b.
        let lo = a.saturating_sub(first) >> shift;
        let hi = (b.saturating_sub(first).div_ceil(slab)).min(n);
        let in_lo = a.saturating_sub(first).div_ceil(slab);
        let in_hi = (b.saturating_sub(first) >> shift).min(n);
        let mut u = PageUse {
            inside: (in_lo, in_hi.max(in_lo)),
            ..PageUse::default()
        };
        for i in lo..hi {
            if i >= carved {
                u.uncarved += 1;
                continue;
            }
            let s = self.meta(chunk, i);
            // SAFETY: `s` is a carved slab's descriptor of this chunk; the caller holds the lock.
            let (state, advised) = unsafe { ((*s).state, (*s).advised) };
            match state {
                SlabState::Partial | SlabState::Full => u.used += 1,
                SlabState::Free => {
                    u.free += 1;
                    if (in_lo..in_hi).contains(&i) {
                        u.free_inside += 1;
                    }
                }
                SlabState::Clean => u.released += 1,
                SlabState::Lazy => u.released += usize::from(advised),
            }
        }
        u
    }

    /// The slabs of chunk `c`'s huge page `h` by state, or `None` when `c` is not huge (a huge
    /// chunk is mapped whole when taken). `g` is this keg's locked state, `c` one of its chunks.
    fn huge_page_use(&self, g: &KegInner, c: *mut ChunkHeader, h: usize) -> Option<PageUse> {
        // SAFETY: `c` is a valid chunk header of this keg; lock held.
        if !unsafe { (*c).huge } {
            return None;
        }
        let chunk = self.chunk_at(c);
        debug_assert_eq!(self.arena.mapped_bytes(chunk), CHUNK_SIZE);
        Some(self.page_use(chunk, self.carved(g, c), h))
    }

    /// The huge page counts of the stats: a walk over the huge chunks' descriptors (lock held).
    pub(super) fn huge_counts(&self, g: &KegInner) -> HugeCounts {
        let mut k = HugeCounts::default();
        if g.huge_chunks == 0 {
            return k;
        }
        let mut c = g.chunks;
        while !c.is_null() {
            // SAFETY: `c` is a valid chunk header of this keg; lock held.
            k.collapsed += unsafe { (*c).collapsed } as usize;
            for h in 0..PAGES_PER_CHUNK {
                let Some(u) = self.huge_page_use(g, c, h).filter(|u| u.used + u.free > 0) else {
                    continue;
                };
                k.pages += 1;
                if u.used > 0 && u.free + u.released + u.uncarved > 0 {
                    k.partly_used += 1;
                }
                if u.released > 0 {
                    k.broken += 1;
                }
            }
            // SAFETY: `c` is a valid chunk header of this keg (chunks stay on its list
            // while it lives); lock held.
            c = unsafe { (*c).next };
        }
        k
    }

    /// Pass 0 of a release: the free slabs of every whole free huge page (at most `to_release`
    /// slabs' worth, and at least one page when any is due) go off the free list and into `d`'s
    /// pages to release (or the session's), one run per page: the whole page where its slabs
    /// tile it (counted in `huge_released`), and a chunk whose slabs are all free (at least half
    /// a chunk due) as one run of both pages, the slabs straddling the pages' border with them.
    /// Returns the lock and the bytes counted as released now; adds to `left`
    /// the free slabs of huge pages left partly used and the slabs those pages hold (what
    /// [`idle_breaks`] weighs).
    pub(super) fn release_whole_pages<'g>(
        &'g self,
        mut g: crate::sync::MutexGuard<'g, KegInner>,
        to_release: usize,
        sess: &mut Session,
        d: &mut Deferred,
        left: &mut (usize, usize),
    ) -> (crate::sync::MutexGuard<'g, KegInner>, usize) {
        let (mut taken, mut released) = (0, 0);
        let (first, shift, n) = (
            self.geo.first_slab,
            self.geo.slab_shift,
            self.geo.slabs_per_chunk,
        );
        let mut c = g.chunks;
        while !c.is_null() {
            let chunk = self.chunk_at(c);
            // SAFETY: `c` is a valid chunk header of this keg; lock held.
            let (huge, nfree) = unsafe { ((*c).huge, (*c).nfree as usize) };
            if huge && nfree == n && to_release - taken.min(to_release) >= n / 2 {
                // Every slab carved and free: the chunk whole, its colour pages and tail with it
                // (no slab's).
                let (g2, bytes) = self.release_run(g, chunk, (0, n), (chunk, CHUNK_SIZE), sess, d);
                g = g2;
                g.huge_released += PAGES_PER_CHUNK as u32;
                taken += n;
                released += bytes;
                // SAFETY: `c` is a valid chunk header of this keg: across the lock drops in
                // `release_run` a slab of ours is in flight or releasing, and no chunk leaves
                // the list meanwhile (`empty.rs`); lock held.
                c = unsafe { (*c).next };
                continue;
            }
            for h in 0..PAGES_PER_CHUNK {
                match self.huge_page_use(&g, c, h) {
                    None => {}
                    Some(u) if taken >= to_release || !u.whole_free() => {
                        // A page with items: its free slabs go only by breaking it. A page
                        // holding no item costs nothing broken (its slabs count, not it).
                        left.0 += u.free;
                        if u.used > 0 {
                            left.1 += u.used + u.free + u.released + u.uncarved;
                        }
                    }
                    Some(u) => {
                        // Whole free: every slab inside it is carved and free (`whole_free`).
                        // The run of the page's slabs, with the colour pages before slab 0 and
                        // the chunk's tail after its last slab (no slab's: nothing ever hands
                        // them out): the whole page where the slabs start and end on its borders
                        // (4 KiB slabs always), so the kernel frees the huge page without
                        // splitting it.
                        let addr = if u.inside.0 == 0 {
                            chunk
                        } else {
                            chunk + first + (u.inside.0 << shift)
                        };
                        let end = if u.inside.1 == n {
                            chunk + (h + 1) * HUGE_PAGE
                        } else {
                            chunk + first + (u.inside.1 << shift)
                        };
                        let (g2, bytes) =
                            self.release_run(g, chunk, u.inside, (addr, end - addr), sess, d);
                        g = g2;
                        if end - addr == HUGE_PAGE {
                            g.huge_released += 1;
                        }
                        taken += u.inside.1 - u.inside.0;
                        released += bytes;
                    }
                }
            }
            // SAFETY: `c` is a valid chunk header of this keg: across the lock drops above a
            // slab of ours is in flight or releasing, and no chunk leaves the list meanwhile
            // (`empty.rs`); lock held.
            c = unsafe { (*c).next };
        }
        (g, released)
    }

    /// Takes slabs `[slabs.0, slabs.1)` of `chunk` (carved, free, on the free list) off the free
    /// list and gives back `range` (`(addr, len)`: their pages, with pages of the chunk no slab
    /// holds), through the session when one is active, else through `d`. Returns the lock
    /// (dropped and taken again when a batch is full) and the bytes counted as released now.
    fn release_run<'g>(
        &'g self,
        mut g: crate::sync::MutexGuard<'g, KegInner>,
        chunk: usize,
        slabs: (usize, usize),
        (addr, len): (usize, usize),
        sess: &mut Session,
        d: &mut Deferred,
    ) -> (crate::sync::MutexGuard<'g, KegInner>, usize) {
        let mut released = 0;
        for i in slabs.0..slabs.1 {
            let s = self.meta(chunk, i);
            // SAFETY: `s` is a carved slab of this chunk on the free list (the caller's
            // guarantee); lock held.
            unsafe { self.unlist_free(&mut g, s) };
            if sess.active() {
                // SAFETY: `s` is entirely free and now on no list; lock held.
                unsafe { self.to_releasing(&mut g, s) };
            } else {
                // SAFETY: `s` is entirely free and now on no list; lock held. Chained through
                // `next` (it is on no list) until its page is gone.
                unsafe {
                    self.to_inflight(&mut g, s);
                    (*s).next = d.chained;
                }
                d.chained = s;
                d.nchained += 1;
                released += self.geo.slab_size;
            }
        }
        if sess.active() {
            sess.add(addr, len);
            if sess.has_overflow() {
                drop(g);
                sess.release_overflow();
                g = lock(&self.inner);
            }
        } else {
            d.pages[d.npages] = (addr, len);
            d.npages += 1;
            if d.full() {
                g = self.release_deferred(g, d);
            }
        }
        (g, released)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` and `AnonHugePages` (kB) of the mapping holding `addr`, from
    /// `/proc/self/smaps`.
    fn smaps_of(addr: usize) -> (String, u64) {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        let (mut flags, mut huge_kb) = (String::new(), 0);
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                    continue;
                }
            }
            if !inside {
                continue;
            }
            if let Some(v) = line.strip_prefix("AnonHugePages:") {
                huge_kb = v.trim().trim_end_matches("kB").trim().parse().unwrap();
            }
            if let Some(v) = line.strip_prefix("VmFlags:") {
                flags = v.trim().to_string();
            }
        }
        (flags, huge_kb)
    }

    /// A keg of 64-byte items with `n` items handed out and written; the items.
    /// The keg's chunks (lock taken).
    fn chunks_of(k: &Keg) -> Vec<usize> {
        let g = lock(&k.inner);
        let mut v = Vec::new();
        let mut c = g.chunks;
        while !c.is_null() {
            v.push(k.chunk_at(c));
            // SAFETY: a valid chunk header of this keg; lock held.
            c = unsafe { (*c).next };
        }
        v
    }

    /// Root on a system with THP on: the frames' flags are readable (`os::page_in_thp`) and
    /// the huge chunks are huge pages; elsewhere the split checks are skipped, saying so.
    fn root() -> bool {
        let r = os::thp_observable();
        if !r {
            eprintln!("not root or THP off: the huge page splits are not checked");
        }
        r
    }

    fn dense_keg(n: usize) -> (Keg, Vec<*mut u8>) {
        // A zone's keg (a hint: no zone reads it here), the kind that goes huge, with colour
        // pages (a keg's colour comes from its tag: the next keg's differs).
        let k = loop {
            let k = Keg::new(64, 0).unwrap();
            if colour_of(k.tag) != 0 {
                break k.with_chunk_hint(0x1000);
            }
            k.destroy().unwrap();
        };
        let v = crate::keg::tests::import_n(&k, n);
        for &p in &v {
            // SAFETY: an item of ours, 64 bytes.
            unsafe { p.write_bytes(0x5a, 64) };
        }
        (k, v)
    }

    #[test]
    fn a_dense_kegs_chunks_are_huge_and_go_back_whole_pages_first() {
        // HUGE_AFTER and 12 MiB more of items: the chunks after the first HUGE_AFTER are taken
        // huge, and the first ones, all backed, were made huge when the keg became dense.
        let (k, v) = dense_keg((HUGE_AFTER + (12 << 20)) / 64);
        let c = k.validate().unwrap();
        assert!(c.huge_chunks >= 11, "{c:?}");
        assert_eq!(c.huge_chunks, c.chunks, "{c:?}");
        assert!(v
            .iter()
            .all(|&p| k.in_huge(k.locate(p as usize).ok().unwrap().slab)));
        for p in [v[0], *v.last().unwrap()] {
            let (flags, _) = smaps_of(p as usize);
            assert!(
                flags.split(' ').any(|f| f == "hg"),
                "MADV_HUGEPAGE: {flags}"
            );
        }
        let stats = k.huge_pages();
        // Both huge pages of every huge chunk: the newest chunk's second only once its slabs
        // reach it.
        assert!(
            stats.pages + 1 >= 2 * c.huge_chunks && stats.pages <= 2 * c.huge_chunks,
            "{stats:?}"
        );
        assert_eq!(stats.broken, 0, "{stats:?}");
        // Everything back onto the free list (a keep decision with no cap: all kept).
        let mut d = Disposal::keep();
        k.take_back(&v, &mut d, None::<fn(*mut u8)>, |_, _| panic!("invalid"));
        let c = k.validate().unwrap();
        assert_eq!(c.items_out, 0);
        // The pages that may go back whole: both huge pages of each huge chunk whose slabs were
        // all carved (the newest chunk's may not be): the descriptors lie in no chunk.
        let whole = {
            let g = lock(&k.inner);
            let mut n = 0;
            let mut ch = g.chunks;
            while !ch.is_null() {
                // SAFETY: a valid chunk header of this keg; lock held.
                if unsafe { (*ch).huge } {
                    let carved = k.carved(&g, ch);
                    for h in 0..PAGES_PER_CHUNK {
                        n += usize::from(k.page_use(k.chunk_at(ch), carved, h).whole_free());
                    }
                }
                // SAFETY: `c` is a valid chunk header of this keg (chunks stay on its list
                // while it lives); lock held.
                ch = unsafe { (*ch).next };
            }
            n
        };
        assert!(
            whole + 2 >= 2 * c.huge_chunks && whole > 0,
            "{whole} of {c:?}"
        );
        // A calm release: every huge page goes back whole (no item in them), the newest
        // chunk's uncarved part apart.
        let mut calm = Disposal::keep();
        calm.breaks = false;
        let bytes = k.release_free(0, &mut calm);
        let c = k.validate().unwrap();
        assert_eq!(c.free_slabs, 0, "{c:?}");
        // Every page that could went back whole (4 KiB slabs tile a page exactly).
        assert_eq!(c.huge_released as usize, whole, "{c:?}");
        assert!(c.huge_released > 0);
        assert_eq!(bytes as u64, c.released_bytes);
        assert_eq!(k.huge_pages().partly_used, 0);
        k.destroy().unwrap();
    }

    #[test]
    fn a_reclaims_session_gives_whole_huge_pages_back_too() {
        let (k, v) = dense_keg((HUGE_AFTER + (12 << 20)) / 64);
        k.take_back(&v, &mut Disposal::keep(), None::<fn(*mut u8)>, |_, _| {
            panic!("invalid")
        });
        let before = k.validate().unwrap();
        let mut sess = crate::release::Session::begin_wait(true);
        assert_eq!(
            k.release_free(0, &mut Disposal::reclaim(&mut sess, false)),
            0
        );
        let mid = k.validate().unwrap();
        assert_eq!(mid.free_slabs, 0);
        assert_eq!(mid.releasing_slabs, before.free_slabs);
        assert_eq!(sess.finish(), before.free_slabs * 4096);
        let c = k.validate().unwrap();
        assert_eq!((c.free_slabs, c.backed_slabs, c.releasing_slabs), (0, 0, 0));
        // The huge pages went as whole runs: one per huge chunk whose page was all carved.
        assert!(
            c.huge_released + 1 >= c.huge_chunks as u64 && c.huge_released > 0,
            "{c:?}"
        );
        assert_eq!(k.huge_pages().pages, 0);
        k.destroy().unwrap();
    }

    #[test]
    fn a_calm_release_does_not_break_huge_pages_in_use() {
        let (k, v) = dense_keg((HUGE_AFTER + (12 << 20)) / 64);
        // In every huge chunk, every other slab keeps one item: pages half used.
        let keep: Vec<*mut u8> = v
            .iter()
            .copied()
            .filter(|&p| {
                let loc = k.locate(p as usize).ok().unwrap();
                // SAFETY: a valid meta of this keg.
                let i = unsafe { (*loc.slab).index };
                k.in_huge(loc.slab) && i % 2 == 0 && loc.index == 0
            })
            .collect();
        let back: Vec<*mut u8> = v.iter().copied().filter(|p| !keep.contains(p)).collect();
        k.take_back(&back, &mut Disposal::keep(), None::<fn(*mut u8)>, |_, _| {
            panic!("invalid")
        });
        let before = k.validate().unwrap();
        assert!(before.free_slabs > 0);
        let huge_free = lock(&k.inner).nfree_huge as usize;
        assert!(huge_free > 0);
        let mut calm = Disposal::keep();
        calm.breaks = false;
        k.release_free(0, &mut calm);
        let c = k.validate().unwrap();
        // The small chunks' free slabs went; the huge pages, half used, were not broken.
        assert_eq!(c.free_slabs, huge_free, "{c:?}");
        assert_eq!(c.huge_released, 0);
        assert_eq!(k.huge_pages().broken, 0);
        assert!(k.huge_pages().partly_used > 0);
        // Under pressure they break.
        k.release_free(0, &mut Disposal::keep());
        let c = k.validate().unwrap();
        assert_eq!(c.free_slabs, 0, "{c:?}");
        assert!(k.huge_pages().broken > 0);
        k.take_back(&keep, &mut Disposal::keep(), None::<fn(*mut u8)>, |_, _| {
            panic!("invalid")
        });
        k.release_free(0, &mut Disposal::keep());
        k.destroy().unwrap();
    }

    /// A drained huge chunk goes back whole, both its huge pages as huge pages (no split: its
    /// descriptors lie in the descriptor span, `arena.rs`), colour pages and all; taken again,
    /// it faults in as huge pages again.
    #[test]
    fn a_drained_huge_chunk_goes_back_whole() {
        let (k, v) = dense_keg((HUGE_AFTER + (12 << 20)) / 64);
        // The chunks taken huge (faulted in as huge pages; root reads the frames' flags).
        let taken_huge: Vec<usize> = chunks_of(&k)
            .into_iter()
            .filter(|&c| os::page_in_thp(c) == Some(true))
            .collect();
        if root() {
            assert!(
                taken_huge.len() >= 3,
                "{} chunks in huge pages",
                taken_huge.len()
            );
        }
        k.take_back(&v, &mut Disposal::keep(), None::<fn(*mut u8)>, |_, _| {
            panic!("invalid")
        });
        // A drain: every free slab goes.
        let before = k.validate().unwrap();
        k.release_free(0, &mut Disposal::keep());
        let c = k.validate().unwrap();
        assert_eq!((c.free_slabs, c.backed_slabs), (0, 0), "{c:?}");
        // Every chunk all carved went back as its two huge pages (the newest chunk's carved
        // pages one by one).
        assert!(
            c.huge_released as usize + 2 >= 2 * before.huge_chunks,
            "{before:?} then {c:?}"
        );
        assert_eq!(k.huge_pages().broken, 0, "none split");
        let g = lock(&k.inner);
        let mut ch = g.chunks;
        let mut huge = 0;
        while !ch.is_null() {
            let chunk = k.chunk_at(ch);
            // SAFETY: a valid chunk header of this keg; lock held.
            if unsafe { (*ch).huge } {
                huge += 1;
                assert_eq!(
                    crate::keg::tests::resident_pages(chunk, CHUNK_SIZE),
                    0,
                    "huge chunk {chunk:#x}: nothing left, the colour pages neither"
                );
                assert!(
                    crate::keg::tests::resident_pages(k.arena.desc_of(chunk), os::page_size()) > 0,
                    "its descriptors stay"
                );
            }
            // SAFETY: as above.
            ch = unsafe { (*ch).next };
        }
        assert!(huge >= 11);
        drop(g);
        // Taken again and written: the chunks fault in huge pages again, none left in 4 KiB
        // pages by a split (but the newest, carved in part: its carved slabs went one by one).
        let again = crate::keg::tests::import_n(&k, v.len());
        for &p in &again {
            // SAFETY: an item of ours, 64 bytes.
            unsafe { p.write_bytes(0x6b, 64) };
        }
        let newest = chunks_of(&k)[0];
        for &c in taken_huge.iter().filter(|&&c| c != newest) {
            assert_eq!(
                os::page_in_thp(c + HUGE_PAGE),
                Some(true),
                "{c:#x}'s second page"
            );
            assert_eq!(
                os::page_in_thp(c + colour_of(k.tag) * os::page_size()),
                Some(true),
                "{c:#x}'s first page"
            );
        }
        k.take_back(
            &again,
            &mut Disposal::keep(),
            None::<fn(*mut u8)>,
            |_, _| panic!("invalid"),
        );
        k.validate().unwrap();
        k.destroy().unwrap();
    }

    #[test]
    fn a_broken_huge_page_filled_again_is_collapsed_again() {
        // Items written as they are taken, as a program does: the older chunks' pages fault in
        // as 4 KiB pages before the keg becomes dense and marks them huge. (Written only after
        // all were taken, they fault in huge pages at once wherever the kernel has free huge
        // pages, and nothing is left to collapse.)
        let (k, mut v) = dense_keg(0);
        while v.len() < (HUGE_AFTER + (12 << 20)) / 64 {
            for p in crate::keg::tests::import_n(&k, 4096) {
                // SAFETY: an item of ours, 64 bytes.
                unsafe { p.write_bytes(0x5a, 64) };
                v.push(p);
            }
        }
        // The older chunks, made huge when the keg became dense, collapsed (16 pages a call).
        let chunk = v[0] as usize & !(CHUNK_SIZE - 1);
        let (_, before_kb) = smaps_of(chunk);
        let mut collapsed = 0;
        loop {
            let n = k.collapse_mended();
            if n == 0 {
                break;
            }
            collapsed += n;
        }
        assert!(
            collapsed >= 16,
            "{collapsed} pages of the older chunks collapsed"
        );
        let (_, after_kb) = smaps_of(chunk);
        // The oldest chunk's mapping (it may hold more chunks): both its pages huge now.
        assert!(
            after_kb > before_kb && after_kb >= 4096,
            "{before_kb} kB, then {after_kb} kB"
        );
        // The oldest chunk's first page: its items back but for one slab's, and released under
        // pressure: the page is broken (its other slabs given back while that one stays).
        let kept_slab = v[0] as usize & !(k.geo.slab_size - 1);
        let mine: Vec<*mut u8> = v
            .iter()
            .copied()
            .filter(|&p| {
                let a = p as usize;
                a >= chunk && a < chunk + HUGE_PAGE && a & !(k.geo.slab_size - 1) != kept_slab
            })
            .collect();
        let pages = k.huge_pages().pages;
        k.take_back(&mine, &mut Disposal::keep(), None::<fn(*mut u8)>, |_, _| {
            panic!("invalid")
        });
        k.release_free(0, &mut Disposal::keep());
        assert_eq!(k.huge_pages().pages, pages, "the page still holds memory");
        assert_eq!(k.huge_pages().broken, 1, "and is broken");
        // Taken again (clean slabs before new ones: this page's), it faults in 4 KiB pages.
        let again = crate::keg::tests::import_n(&k, mine.len());
        assert!(again
            .iter()
            .all(|&p| p as usize >= chunk && (p as usize) < chunk + HUGE_PAGE));
        // Taken but not yet written: whole by the keg's count, but its 4 KiB pages are not in
        // memory, and a collapse would back them all: left broken for a later pass.
        assert_eq!(k.collapse_mended(), 0, "an absent page is not collapsed");
        for &p in &again {
            // SAFETY: an item of ours, 64 bytes.
            unsafe { p.write_bytes(0x6b, 64) };
        }
        let (_, huge_kb) = smaps_of(chunk);
        let counted = k.huge_pages().collapsed;
        assert_eq!(counted, collapsed, "the stats count every page collapsed");
        assert_eq!(k.collapse_mended(), 1, "the first page, whole again");
        let (_, now_kb) = smaps_of(chunk);
        assert_eq!(now_kb, huge_kb + 2048, "one more huge page in the mapping");
        // SAFETY: items of ours, written above.
        assert!(again.iter().all(|&p| unsafe { *p.add(63) } == 0x6b));
        assert_eq!(k.huge_pages().collapsed, counted + 1);
        assert_eq!(k.collapse_mended(), 0, "nothing broken any more");
        k.validate().unwrap();
    }

    #[test]
    fn a_collapse_allows_an_eighth_of_the_page_absent_and_the_colour_pages() {
        assert_eq!(collapse_allowance(false, 37, 4096), 64);
        assert_eq!(collapse_allowance(true, 37, 4096), 64 + 37);
        assert_eq!(collapse_allowance(true, 0, 4096), 64);
    }

    #[test]
    fn a_keg_goes_huge_once_it_holds_huge_after_of_slabs() {
        assert_eq!(chunk_thp(0, 0), os::Thp::Never);
        assert_eq!(chunk_thp(HUGE_AFTER - 4096, HUGE_AFTER), os::Thp::Never);
        assert_eq!(chunk_thp(HUGE_AFTER, HUGE_AFTER), os::Thp::Huge);
        // In a process with a large working set, from HUGE_AFTER_IN_LARGE.
        assert_eq!(
            chunk_thp(HUGE_AFTER_IN_LARGE, HUGE_PROCESS - 1),
            os::Thp::Never
        );
        assert_eq!(
            chunk_thp(HUGE_AFTER_IN_LARGE - 4096, HUGE_PROCESS),
            os::Thp::Never
        );
        assert_eq!(chunk_thp(HUGE_AFTER_IN_LARGE, HUGE_PROCESS), os::Thp::Huge);
    }

    #[test]
    fn an_idle_trim_breaks_only_beyond_half_the_pages_and_the_demand() {
        // 1,000 slabs in partly used pages, 600 of them free: 100 may go.
        assert_eq!(idle_breaks(600, 1000, 0), 100);
        // Half used or more: nothing.
        assert_eq!(idle_breaks(500, 1000, 0), 0);
        // The program took 550 slabs again lately: 50 may go.
        assert_eq!(idle_breaks(600, 1000, 550), 50);
        assert_eq!(idle_breaks(0, 0, 0), 0);
    }
}
