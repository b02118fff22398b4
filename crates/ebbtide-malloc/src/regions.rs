//! The page heap's span cut into 2 MiB hugepage regions ([`REGION`], the span's base aligned
//! to it): the bytes in blocks of each, which regions are eligible for transparent huge pages,
//! and the policies that decide (pure functions, tested alone). Temeraire's HugePageFiller is
//! the anchor (docs/design/hugepage-heap.md).
//!
//! ```text
//!  base        base+2M       base+4M       base+6M
//!  | region 0    | region 1    | region 2    |
//!  |blk|  free   |    block    |blk| |blk|   |   used: 0.5 / 2 / 1.2 MiB
//!                   huge (dense)   partly used
//! ```
//!
//! * **used**: bytes of blocks in the region (free runs and what lies above `top` are not).
//! * **huge**: the region is `MADV_HUGEPAGE`; the rest of the heap is `MADV_NOHUGEPAGE`
//!   (docs/design/thp-policy.md). A region turns huge when it is wholly mapped and [`dense`];
//!   it stays huge while its free pages stay resident, and stops being huge when any of it is
//!   given back: whole (the region holds no block: one `MADV_DONTNEED` frees the huge page
//!   without splitting it), or in part (**broken**: the kernel splits the huge page).
//! * **broken**: given back in part while huge, not since made huge again or given back whole.
//!
//! The region table is one `u32` per region of the span (128 KiB of address space for 64 GiB,
//! its pages touched as the heap grows): the used bytes in the low bits, two flags above.
//! Invariants (checked by [`Regions::validate_counts`] and the page heap's `validate`): the
//! counts are the number of regions in each state; a region above `top` holds no block.
//!
//! Nothing here locks: the page heap's one caller serialises every call.

use core::ptr::{self, NonNull};

/// A hugepage region: the x86-64 PMD size, the size transparent huge pages have.
pub const REGION: usize = 2 << 20;

const HUGE: u32 = 1 << 31;
const BROKEN: u32 = 1 << 30;
const USED: u32 = (1 << 22) - 1;

/// Whether a region with `used` bytes in blocks (wholly mapped) is made eligible for a huge
/// page: at least half of it in blocks. khugepaged collapses an eligible region with a single
/// page present (`max_ptes_none` 511 by default), faulting the rest in as zeros, and a fresh
/// region's first touch faults the whole 2 MiB: eligible at half full, a huge page costs at
/// most twice the bytes its blocks use (a region filled at once by a block of 2 MiB or more
/// costs nothing more). Below half, small pages.
pub fn dense(used: usize) -> bool {
    used >= REGION / 2
}

/// Whether a region whose blocks grow from `before` to `after` bytes turns huge now (wholly
/// mapped): when it is [`dense`], and either full or already in use. A region no block used
/// before has no page mapped: made eligible, its next touch would fault in all 2 MiB for the
/// part the block holds (eligible when merely dense: 76.4 against 75.3 MiB of peak RSS for
/// `python3 -S benches/c/malloc/workload.py 1`, whose tables leave such parts); one already in
/// use has its pages mapped small, so
/// being eligible only lets khugepaged collapse it, at most twice the bytes in use.
pub fn turns_huge(before: usize, after: usize) -> bool {
    dense(after) && (after == REGION || before > 0)
}

/// The idle pass's hysteresis: whether an idle dirty run in a huge region that still holds
/// blocks goes back (splitting the huge page) while the heap caches `dirty` bytes and blocks
/// took `working_set` bytes of free runs lately ([`crate::pageheap::PageHeap::working_set`]):
/// only what the working set does not cover. Space the heap keeps reusing stays in its huge
/// page; pressure and drains break as needed.
pub fn break_when_idle(dirty: usize, working_set: usize) -> bool {
    dirty > working_set
}

/// Whether a block of `len` bytes placed where the first region it touches holds `first_used`
/// bytes in blocks and the last `last_used` (the same region for a block inside one) starts
/// using a region that held none: Temeraire packs small requests into the hugepages already in
/// use, so that empty ones go back whole. Blocks of a region or more fill regions of their own.
pub fn opens_empty(len: usize, first_used: usize, last_used: usize) -> bool {
    len < REGION && (first_used == 0 || last_used == 0)
}

/// Counts of the regions' states and of what went back, for stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Regions eligible for huge pages now (dense when made so).
    pub huge: usize,
    /// Regions partly in blocks now (some bytes, less than all).
    pub partial: usize,
    /// Regions given back in part while huge (the huge page split), not whole since.
    pub broken: usize,
    /// Bytes of dirty runs given back as whole regions (no huge page split).
    pub whole_bytes: u64,
    /// Bytes of dirty runs given back in part of a region.
    pub part_bytes: u64,
    /// Times a huge region was given back in part.
    pub breaks: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct Regions {
    base: usize,
    table: *mut u32,
    n: usize,
    /// Highest region touched so far, and the table's pages counted as metadata.
    high: usize,
    pages: usize,
    counts: Counts,
}

fn page() -> usize {
    ebbtide_core::os::page_size()
}

impl Default for Regions {
    fn default() -> Regions {
        Regions::new()
    }
}

impl Regions {
    /// No table yet ([`Regions::init`]).
    pub const fn new() -> Regions {
        Regions {
            base: 0,
            table: ptr::null_mut(),
            n: 0,
            high: 0,
            pages: 0,
            counts: Counts {
                huge: 0,
                partial: 0,
                broken: 0,
                whole_bytes: 0,
                part_bytes: 0,
                breaks: 0,
            },
        }
    }

    /// Maps the table for a span of `len` bytes at `base` (aligned to [`REGION`]); false if
    /// no memory could be mapped.
    pub fn init(&mut self, base: usize, len: usize) -> bool {
        debug_assert!(base.is_multiple_of(REGION));
        let n = len.div_ceil(REGION);
        let bytes = (n * 4).next_multiple_of(page());
        let Ok(t) = ebbtide_core::os::map(bytes) else {
            return false;
        };
        self.base = base;
        self.table = t.as_ptr().cast();
        self.n = n;
        true
    }

    /// Undoes [`Regions::init`] (the span could not be had).
    pub fn unmap(&mut self) {
        if !self.table.is_null() {
            let bytes = (self.n * 4).next_multiple_of(page());
            // SAFETY: the table's own mapping, unused from here on.
            unsafe { ebbtide_core::os::unmap(NonNull::new_unchecked(self.table.cast()), bytes) };
            self.table = ptr::null_mut();
        }
    }

    /// The region holding `addr` (inside the span).
    pub fn index(&self, addr: usize) -> usize {
        (addr - self.base) / REGION
    }

    /// The first address of region `i`.
    pub fn start(&self, i: usize) -> usize {
        self.base + i * REGION
    }

    fn get(&self, i: usize) -> u32 {
        debug_assert!(i < self.n);
        if i > self.high {
            return 0;
        }
        // SAFETY: i < n, inside the table (zero where never written).
        unsafe { *self.table.add(i) }
    }

    fn set(&mut self, i: usize, v: u32) {
        debug_assert!(i < self.n);
        if i > self.high || self.pages == 0 {
            self.high = self.high.max(i);
            let pages = ((self.high + 1) * 4).div_ceil(page());
            if pages > self.pages {
                ebbtide_core::os::add_metadata((pages - self.pages) * page());
                self.pages = pages;
            }
        }
        // SAFETY: i < n, inside the table.
        unsafe { *self.table.add(i) = v };
    }

    /// Bytes in blocks in region `i`.
    pub fn used(&self, i: usize) -> usize {
        (self.get(i) & USED) as usize
    }

    /// Whether region `i` is eligible for huge pages now.
    pub fn is_huge(&self, i: usize) -> bool {
        self.get(i) & HUGE != 0
    }

    /// The counts now.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Adds to the bytes given back whole or in part.
    pub fn count_given_back(&mut self, whole: usize, part: usize) {
        self.counts.whole_bytes += whole as u64;
        self.counts.part_bytes += part as u64;
    }

    fn set_used(&mut self, i: usize, used: usize) {
        let v = self.get(i);
        let old = (v & USED) as usize;
        let was = old > 0 && old < REGION;
        let is = used > 0 && used < REGION;
        match (was, is) {
            (false, true) => self.counts.partial += 1,
            (true, false) => self.counts.partial -= 1,
            _ => {}
        }
        self.set(i, (v & !USED) | used as u32);
    }

    /// `[a, b)` became a block: its regions' used bytes grow, and those now wholly below
    /// `mapped` that [`turns_huge`] says turn huge (`MADV_HUGEPAGE`, one call per stretch) —
    /// before the block's first touch, so a region it fills faults in as one huge page.
    pub fn fill(&mut self, a: usize, b: usize, mapped: usize) {
        let (lo, hi) = (self.index(a), self.index(b - 1) + 1);
        let mut stretch: Option<(usize, usize)> = None;
        for i in lo..hi {
            let s = self.start(i);
            let before = self.used(i);
            let used = before + b.min(s + REGION) - a.max(s);
            self.set_used(i, used);
            let v = self.get(i);
            if v & HUGE == 0 && turns_huge(before, used) && s + REGION <= mapped {
                self.counts.huge += 1;
                if v & BROKEN != 0 {
                    self.counts.broken -= 1;
                }
                self.set(i, (v | HUGE) & !BROKEN);
                stretch = match stretch {
                    Some((x, y)) if y == i => Some((x, i + 1)),
                    Some((x, y)) => {
                        self.advise(x, y);
                        Some((i, i + 1))
                    }
                    None => Some((i, i + 1)),
                };
            }
        }
        if let Some((x, y)) = stretch {
            self.advise(x, y);
        }
    }

    fn advise(&self, x: usize, y: usize) {
        // SAFETY: regions of the span, wholly mapped (checked by the caller against `mapped`).
        let p = unsafe { NonNull::new_unchecked(self.start(x) as *mut u8) };
        ebbtide_core::os::set_thp(p, (y - x) * REGION, ebbtide_core::os::Thp::Huge);
    }

    /// `[a, b)`, a block, was freed: its regions' used bytes shrink (their pages stay as they
    /// are until given back).
    pub fn empty(&mut self, a: usize, b: usize) {
        for i in self.index(a)..self.index(b - 1) + 1 {
            let s = self.start(i);
            let used = self.used(i) - (b.min(s + REGION) - a.max(s));
            self.set_used(i, used);
        }
    }

    /// Regions `[lo, hi)`, holding no block, were given back whole: none is huge or broken any
    /// more. The huge ones are marked `MADV_NOHUGEPAGE` again (one call), so that a small
    /// block there later faults in its own pages, not 2 MiB.
    pub fn given_back_whole(&mut self, lo: usize, hi: usize) {
        let mut any = false;
        for i in lo..hi {
            let v = self.get(i);
            debug_assert_eq!(v & USED, 0);
            if v & HUGE != 0 {
                self.counts.huge -= 1;
                any = true;
            }
            if v & BROKEN != 0 {
                self.counts.broken -= 1;
            }
            if v & (HUGE | BROKEN) != 0 {
                self.set(i, v & USED);
            }
        }
        if any {
            // SAFETY: regions of the span that were mapped (they were huge).
            let p = unsafe { NonNull::new_unchecked(self.start(lo) as *mut u8) };
            ebbtide_core::os::no_huge_pages(p, (hi - lo) * REGION);
        }
    }

    /// Region `i` is being given back in part: if it was huge, it is broken now (counted, and
    /// `MADV_NOHUGEPAGE` again, so that khugepaged does not fill its free pages back in).
    /// Returns whether it was huge.
    pub fn break_huge(&mut self, i: usize) -> bool {
        let v = self.get(i);
        if v & HUGE == 0 {
            return false;
        }
        self.counts.huge -= 1;
        self.counts.breaks += 1;
        if v & BROKEN == 0 {
            self.counts.broken += 1;
        }
        self.set(i, (v & !HUGE) | BROKEN);
        // SAFETY: a region of the span that was mapped (it was huge).
        let p = unsafe { NonNull::new_unchecked(self.start(i) as *mut u8) };
        ebbtide_core::os::no_huge_pages(p, REGION);
        true
    }

    /// Checks that the counts match the flags and used bytes of regions `[0, n)`, and that
    /// `used(i)` is what `expected(i)` says; the first mismatch, as text.
    pub fn validate_counts(&self, expected: impl Fn(usize) -> usize) -> Result<(), String> {
        let mut c = Counts {
            whole_bytes: self.counts.whole_bytes,
            part_bytes: self.counts.part_bytes,
            breaks: self.counts.breaks,
            ..Counts::default()
        };
        if self.table.is_null() {
            return (self.counts == c)
                .then_some(())
                .ok_or_else(|| format!("counts {:?} without a table", self.counts));
        }
        for i in 0..=self.high.min(self.n - 1) {
            let v = self.get(i);
            let used = (v & USED) as usize;
            if used != expected(i) {
                return Err(format!(
                    "region {i}: used {used} but the blocks hold {}",
                    expected(i)
                ));
            }
            if used > REGION {
                return Err(format!("region {i}: used {used} above the region"));
            }
            c.partial += (used > 0 && used < REGION) as usize;
            c.huge += (v & HUGE != 0) as usize;
            c.broken += (v & BROKEN != 0) as usize;
            if v & HUGE != 0 && v & BROKEN != 0 {
                return Err(format!("region {i}: huge and broken"));
            }
        }
        if c != self.counts {
            return Err(format!(
                "counts {:?} but the regions say {c:?}",
                self.counts
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: usize = 1 << 20;

    #[test]
    fn policy_dense_at_half() {
        assert!(!dense(0));
        assert!(!dense(M - 4096));
        assert!(dense(M));
        assert!(dense(REGION));
    }

    #[test]
    fn policy_turns_huge_full_or_already_in_use() {
        // Filled at once: huge; half filled at once: not (its first touch would fault 2 MiB).
        assert!(turns_huge(0, REGION));
        assert!(!turns_huge(0, 3 * M / 2));
        // Already in use and dense now: huge (khugepaged's to collapse).
        assert!(turns_huge(4096, M));
        assert!(turns_huge(M, 3 * M / 2));
        // Not dense: never.
        assert!(!turns_huge(4096, M - 4096));
    }

    #[test]
    fn policy_break_only_beyond_the_working_set() {
        assert!(break_when_idle(10 * M, 0));
        assert!(break_when_idle(10 * M, 9 * M));
        assert!(!break_when_idle(10 * M, 10 * M));
        assert!(!break_when_idle(0, 0));
    }

    #[test]
    fn policy_opens_empty() {
        // A small block into a region already in use: fine; into an empty one, or spilling
        // into an empty one: opens it.
        assert!(!opens_empty(64 << 10, 100, 100));
        assert!(opens_empty(64 << 10, 0, 0));
        assert!(opens_empty(64 << 10, 100, 0));
        // A region or more: never counted against.
        assert!(!opens_empty(REGION, 0, 0));
        assert!(!opens_empty(3 * M, 0, 0));
    }

    #[test]
    fn fill_and_empty_count_and_turn_dense_regions_huge() {
        let len = 8 * REGION;
        let base = ebbtide_core::os::reserve(len, REGION).unwrap().as_ptr() as usize;
        let mut r = Regions::new();
        assert!(r.init(base, len));
        // Half a region: partly used, not huge yet (not dense: just under half).
        r.fill(base, base + M - 4096, base + len);
        assert_eq!(r.counts().partial, 1);
        assert_eq!(r.counts().huge, 0);
        // Dense now, but not wholly mapped: still not huge.
        r.fill(base + M - 4096, base + M + 4096, base + M + 4096);
        assert_eq!(r.counts().huge, 0);
        r.fill(base + M + 4096, base + M + 8192, base + len);
        assert_eq!(r.counts().huge, 1);
        assert!(r.is_huge(0));
        // A block over regions 1..=3 partly: 1 and 2 whole, 3 a quarter.
        r.fill(base + REGION, base + 3 * REGION + M / 2, base + len);
        assert_eq!(r.used(1), REGION);
        assert_eq!(r.used(3), M / 2);
        assert_eq!(r.counts().huge, 3);
        assert_eq!(r.counts().partial, 2);
        r.validate_counts(|i| [M + 8192, REGION, REGION, M / 2, 0, 0, 0, 0][i])
            .unwrap();
        // Freed: the used bytes go, the flags stay until given back.
        r.empty(base + REGION, base + 3 * REGION + M / 2);
        assert_eq!(r.counts().partial, 1);
        assert_eq!(r.counts().huge, 3);
        r.given_back_whole(1, 4);
        assert_eq!(r.counts().huge, 1);
        assert!(r.break_huge(0));
        assert!(!r.break_huge(0), "broken once");
        assert_eq!(r.counts().broken, 1);
        assert_eq!(r.counts().breaks, 1);
        r.validate_counts(|i| if i == 0 { M + 8192 } else { 0 })
            .unwrap();
        // Dense again after a break: huge again, no longer broken.
        r.fill(base + M + 8192, base + REGION, base + len);
        assert_eq!((r.counts().huge, r.counts().broken), (1, 0));
        assert!(
            r.validate_counts(|_| 0).is_err(),
            "a wrong expectation is caught"
        );
        r.unmap();
        // SAFETY: the reservation made above, unused.
        unsafe { ebbtide_core::os::unmap(NonNull::new_unchecked(base as *mut u8), len) };
    }
}
