//! The reuse working set of a zone: how many bytes of the memory its caches hold were taken
//! again by allocations lately, and the caps it puts on what its depot and its free slabs keep
//! ([`reuse_cap`], a pure function).
//!
//! A cache is worth its memory only if something takes from it again. A zone with fixed caps
//! keeps up to them whatever happens next: `redis-server` pushes 20 MB of 8 KiB list nodes,
//! pops them all, then fills sets and hashes of other sizes, and the 8 KiB class kept its 1 MiB
//! of depot and 2 MiB of free slabs (and the 16 and 18 KiB classes as much again) through the
//! rest of the run — memory that every peer, whose size classes share their pages, hands to
//! the next phase. Caps sized by reuse keep a class's memory while the program keeps taking it
//! again and give it back when the program stopped: the rule of the malloc's page heap
//! (`ebbtide-malloc/src/pageheap.rs`, `dirty_limit`), here for the size classes' zones.
//!
//! What counts as reuse: a full bucket taken from the depot (its items' bytes), and a slab the
//! keg hands out again from its free, lazily freed or clean lists (the slab's bytes). Slabs cut
//! fresh from a chunk are first use, not reuse; so are items of partially used slabs (memory
//! that is live anyway). A period is the runtime's trim interval (the zone's periodic pass);
//! the working set is the larger of this period's reuse and the last one's, so a class that
//! stops taking memory keeps its caches for one to two periods and then only the floor.
//!
//! A zone opts in with `ZoneOptions::reuse_floor_bytes`; every other zone keeps its fixed caps
//! and pays nothing (one predictable branch on its slow paths).
//!
//! Atomics: the counters are written by allocations under the depot lock or the keg lock (two
//! different locks, so the adds are read-modify-writes) and read without either by the frees
//! that decide what to keep; `Relaxed` throughout, since they order no other memory: a stale
//! read makes one free keep a bucket or a slab more or less than the current figure says,
//! which the next free, the delayed give-back (10 ms) or the next period corrects.

use crate::sync::{AtomicU64, Ordering};

/// What [`Reuse::floor`] holds for a zone that did not opt in.
const OFF: u64 = u64::MAX;

/// The reuse counters of one zone.
pub(crate) struct Reuse {
    /// Bytes a cache keeps whatever the working set ([`OFF`]: fixed caps only).
    floor: u64,
    /// Bytes taken again in the current period.
    cur: AtomicU64,
    /// Bytes taken again in the last complete period.
    prev: AtomicU64,
}

impl Reuse {
    /// Counters of a zone with a `floor` of `floor_bytes`, or of one with fixed caps (`None`).
    pub(crate) fn new(floor_bytes: Option<usize>) -> Reuse {
        Reuse {
            floor: floor_bytes.map_or(OFF, |f| f as u64),
            cur: AtomicU64::new(0),
            prev: AtomicU64::new(0),
        }
    }

    /// Does the zone bound its caches by reuse?
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.floor != OFF
    }

    /// `bytes` of cached memory were taken again (a bucket from the depot, a slab from a list).
    #[inline]
    pub(crate) fn took(&self, bytes: usize) {
        if self.enabled() {
            self.cur.fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }

    /// Ends a period (the zone's periodic pass).
    pub(crate) fn end_period(&self) {
        if self.enabled() {
            self.prev
                .store(self.cur.swap(0, Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// Bytes taken again lately: the larger of this period's and the last one's.
    pub(crate) fn working_set(&self) -> u64 {
        self.cur
            .load(Ordering::Relaxed)
            .max(self.prev.load(Ordering::Relaxed))
    }

    /// The cap of a cache whose fixed cap is `fixed` bytes, now: [`reuse_cap`] of the working
    /// set, or `fixed` itself for a zone that did not opt in.
    #[inline]
    pub(crate) fn cap(&self, fixed: u64) -> u64 {
        if !self.enabled() {
            return fixed;
        }
        reuse_cap(fixed, self.floor, self.working_set())
    }

    /// [`Reuse::cap`] of a cache counted in units of `unit` bytes (a depot's items, a keg's
    /// slabs) whose fixed cap is `fixed` units: `fixed` itself for a zone that did not opt in.
    #[inline]
    pub(crate) fn cap_units(&self, fixed: u64, unit: u64) -> u64 {
        if !self.enabled() {
            return fixed;
        }
        self.cap(fixed.saturating_mul(unit)) / unit
    }
}

/// The bytes a cache (a depot, a keg's free slabs) keeps: its working set of reuse, at least
/// `floor`, at most its `fixed` cap. Pure.
pub fn reuse_cap(fixed: u64, floor: u64, working_set: u64) -> u64 {
    working_set.max(floor).min(fixed)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_the_working_set_between_the_floor_and_the_fixed_cap() {
        let (k, m) = (1u64 << 10, 1u64 << 20);
        assert_eq!(
            reuse_cap(2 * m, 256 * k, 0),
            256 * k,
            "nothing reused: the floor"
        );
        assert_eq!(reuse_cap(2 * m, 256 * k, m), m, "the working set");
        assert_eq!(
            reuse_cap(2 * m, 256 * k, 64 * m),
            2 * m,
            "never above the fixed cap"
        );
        assert_eq!(
            reuse_cap(128 * k, 256 * k, 0),
            128 * k,
            "a fixed cap below the floor wins"
        );
        assert_eq!(reuse_cap(u64::MAX, 256 * k, 5 * m), 5 * m, "no fixed cap");
    }

    #[test]
    fn a_zone_that_stops_reusing_keeps_its_working_set_one_to_two_periods() {
        let r = Reuse::new(Some(64 << 10));
        assert!(r.enabled());
        r.took(3 << 20);
        assert_eq!(r.working_set(), 3 << 20);
        r.end_period();
        assert_eq!(r.working_set(), 3 << 20, "the last period is remembered");
        assert_eq!(r.cap(u64::MAX), 3 << 20);
        r.end_period();
        assert_eq!(r.working_set(), 0, "two periods without reuse: none");
        assert_eq!(r.cap(u64::MAX), 64 << 10, "the floor");
        assert_eq!(r.cap(16 << 10), 16 << 10);
        assert_eq!(r.cap_units(u64::MAX, 4096), 16, "the floor, in 4 KiB units");
        assert_eq!(
            r.cap_units(2, 4096),
            2,
            "a fixed cap below the floor, in units"
        );
    }

    #[test]
    fn a_zone_that_did_not_opt_in_keeps_its_fixed_caps_and_counts_nothing() {
        let r = Reuse::new(None);
        assert!(!r.enabled());
        r.took(1 << 20);
        r.end_period();
        assert_eq!(r.working_set(), 0);
        assert_eq!(r.cap(12345), 12345);
        assert_eq!(r.cap(u64::MAX), u64::MAX);
        assert_eq!(r.cap_units(7, 4096), 7);
        assert_eq!(r.cap_units(u64::MAX, 4096), u64::MAX);
    }
}
