//! Lazily freed pages: `MADV_FREE` where nobody is short of memory, `MADV_DONTNEED` where the
//! memory must go now, and the decay of lazily freed pages that stay unused.
//!
//! The kernel's page allocator hands a page freed by xen-blkback back to it without a fault. A
//! userspace cache that releases a page with `MADV_DONTNEED` pays a page fault (and the
//! kernel's zeroing) when it uses that address again: 9–14 µs on a nested VM, more than the rest
//! of a 4 KiB I/O. `MADV_FREE` offers the page instead: the kernel takes it only when it needs
//! memory, and a write before that keeps it, with no fault. So pages leave a cache in one of two
//! ways ([`release_kind`], a pure function):
//!
//! | situation | call | where |
//! |---|---|---|
//! | no pressure (level Normal, no squeeze window), `lazy_free` on (the reclaim thread runs) | none, then `MADV_FREE` after `lazy_settle_ms` → slab `Lazy` | the periodic pool shrink to `max_buffer_pages`, [`PagePool::shrink`](crate::PagePool::shrink), the idle trim, the free slabs a keg has held beyond its cap for `EXCESS_DELAY_MS` |
//! | the pressure level is above Normal, a squeeze window is open, or a pressure reclaim runs | `MADV_DONTNEED` → slab `Clean` | the squeeze, TRIM / DRAIN / DRAIN_CPU, and every lazy slab at once ([`crate::reclaim::purge_lazy_all`]) |
//!
//! Lazily freed pages still count in RSS and in the cgroup's usage until the kernel takes them.
//! So they **decay**, as jemalloc's dirty → muzzy → clean: a free slab given up becomes `Lazy`
//! (stamped with [`now_ms`]) and *settles* for `lazy_settle_ms` without any system call (a reuse
//! then costs nothing at all, as the kernel's per-CPU page lists hand a freed page back); then it
//! is offered with `MADV_FREE`; and a lazy slab nobody reused for `lazy_decay_ms` since it was
//! given up goes back with `MADV_DONTNEED`. The decay does both steps, run by the reclaim
//! thread every `pool_shrink_interval_ms` ([`crate::reclaim::decay_lazy`]); [`expired`] is the
//! pure rule for both delays. Lazily freed slabs also go back, oldest first, when a zone is
//! about to fault in fresh slabs or the malloc's page heap fresh pages: as many bytes as those
//! (`zone::make_room`, [`crate::reclaim::make_room`]), so that they never stay in RSS beside
//! memory a program needs anew.
//! Allocation takes the newest lazy slab first (the likeliest to still have its pages); the
//! decay takes the oldest.
//!
//! The runtime (the reclaim thread, which owns the tunables) sets the mode with
//! [`crate::reclaim::configure_lazy`]; the core reads no option. This module holds the settings,
//! the gauges and the pure rules, below the kegs that use them; what walks every zone is in the
//! zone layer (`zone/drain.rs`) and the reclaim entry points; which way pages leave is read from
//! these settings once per operation, by the caller's disposal decision
//! (`crate::disposal::Disposal::current`), never by a keg. The default here is off, so a process
//! without the reclaim thread (which would never release lazily freed pages for good) releases
//! pages with `MADV_DONTNEED`.
//!
//! Figures: [`lazy_bytes`] (offered with `MADV_FREE` now), [`lazy_pending_bytes`] (settling
//! now), [`lazy_freed_bytes`] (offered, ever), per keg the bytes offered and the bytes taken back
//! by allocation. `LazyFree` in `/proc/self/smaps_rollup` counts the pages of [`lazy_bytes`]
//! while they are neither reused nor taken by the kernel (`tests/lazy_free.rs`).

use crate::os;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Bytes of lazy slabs offered with `MADV_FREE` now, over all kegs (part of RSS until the kernel
/// takes them; `LazyFree` in smaps).
pub(crate) static LAZY_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Bytes of lazy slabs still settling (not offered yet), over all kegs.
pub(crate) static LAZY_PENDING_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Bytes of page-pool pages settling in their zones' stashes (`zone/stash.rs`): pending as the
/// kegs' settling slabs, but on no keg's lazy list, so [`keg_lazy_bytes`] leaves them out.
pub(crate) static STASH_PENDING_BYTES: AtomicUsize = AtomicUsize::new(0);

/// The gauge a lazy slab counts in: offered (`advised`) or settling.
pub(crate) fn gauge(advised: bool) -> &'static AtomicUsize {
    if advised {
        &LAZY_BYTES
    } else {
        &LAZY_PENDING_BYTES
    }
}
/// Bytes offered with `MADV_FREE` since the process started.
pub(crate) static LAZY_FREED_BYTES: AtomicU64 = AtomicU64::new(0);

static ENABLED: AtomicBool = AtomicBool::new(false);
static PRESSURE: AtomicBool = AtomicBool::new(false);
static DECAY_MS: AtomicU64 = AtomicU64::new(1000);
static SETTLE_MS: AtomicU64 = AtomicU64::new(0);

/// How free pages leave a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseKind {
    /// `MADV_DONTNEED`: gone from RSS and the cgroup's usage at once; a reuse faults.
    Now,
    /// `MADV_FREE`: the kernel takes the pages when it needs memory; a reuse before costs nothing.
    Lazy,
}

/// The choice, pure: lazily only when it is enabled and no pressure asks for the memory now.
pub fn release_kind(lazy_enabled: bool, under_pressure: bool) -> ReleaseKind {
    if lazy_enabled && !under_pressure {
        ReleaseKind::Lazy
    } else {
        ReleaseKind::Now
    }
}

/// Is a slab lazily freed at `lazy_at` due to go back for good at `now` (both [`now_ms`])?
/// Pure; the millisecond clock wraps after 49 days and the difference is taken modulo 2^32.
pub fn expired(lazy_at: u32, now: u32, delay_ms: u64) -> bool {
    u64::from(now.wrapping_sub(lazy_at)) >= delay_ms
}

/// The coarse clock of lazy slabs: monotonic milliseconds, modulo 2^32.
pub fn now_ms() -> u32 {
    (os::now_ns() / 1_000_000) as u32
}

/// Sets the mode (the runtime calls [`crate::reclaim::configure_lazy`] with the `lazy_free`,
/// `lazy_settle_ms` and `lazy_decay_ms` tunables; that call also gives every lazily freed page
/// back when the mode is turned off). Returns whether it was on.
pub(crate) fn set(enabled: bool, settle_ms: u64, decay_ms: u64) -> bool {
    DECAY_MS.store(decay_ms, Ordering::Relaxed);
    SETTLE_MS.store(settle_ms, Ordering::Relaxed);
    ENABLED.swap(enabled, Ordering::Relaxed)
}

/// Tells the core whether the process is under memory pressure (the runtime calls this with the
/// policy's held level: anything above Normal). While it is, pages leave with `MADV_DONTNEED`:
/// in a cgroup near its limit, lazily freed pages would fill the limit and make the kernel
/// reclaim (and swap) other memory before it gets to them.
pub fn set_pressure(on: bool) {
    PRESSURE.store(on, Ordering::Relaxed);
}

/// Whether the runtime reported pressure (see [`set_pressure`]).
pub fn under_pressure() -> bool {
    PRESSURE.load(Ordering::Relaxed)
}

/// Whether free pages leave lazily where there is no pressure.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The settle delay in use (0: `MADV_FREE` at once).
pub fn settle_ms() -> u64 {
    SETTLE_MS.load(Ordering::Relaxed)
}

/// The decay delay in use.
pub fn decay_ms() -> u64 {
    DECAY_MS.load(Ordering::Relaxed)
}

/// Bytes of lazy slabs offered with `MADV_FREE` now.
pub fn lazy_bytes() -> u64 {
    LAZY_BYTES.load(Ordering::Relaxed) as u64
}

/// Bytes still settling (taken out of the caches, not offered yet): the kegs' settling slabs and
/// the page pools' stashed pages.
pub fn lazy_pending_bytes() -> u64 {
    (LAZY_PENDING_BYTES.load(Ordering::Relaxed) + STASH_PENDING_BYTES.load(Ordering::Relaxed))
        as u64
}

/// Bytes on the kegs' lazy lists (offered or settling), without the stashes' pages: what
/// `zone::make_room` can release (a stash settles only on the decay's step). A gauge read
/// without a lock, so a hint: a walk it starts may find less (the walk takes each keg's lock).
pub fn keg_lazy_bytes() -> u64 {
    (LAZY_BYTES.load(Ordering::Relaxed) + LAZY_PENDING_BYTES.load(Ordering::Relaxed)) as u64
}

/// Both: what a cache gave up without pressure and the kernel has not taken (still in the
/// cgroup's usage, not pressure).
pub fn lazy_held_bytes() -> u64 {
    lazy_bytes() + lazy_pending_bytes()
}

/// Bytes offered with `MADV_FREE` ever.
pub fn lazy_freed_bytes() -> u64 {
    LAZY_FREED_BYTES.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice() {
        assert_eq!(release_kind(true, false), ReleaseKind::Lazy);
        assert_eq!(release_kind(true, true), ReleaseKind::Now, "pressure: now");
        assert_eq!(release_kind(false, false), ReleaseKind::Now, "off: now");
        assert_eq!(release_kind(false, true), ReleaseKind::Now);
    }

    #[test]
    fn decay_with_fake_time() {
        // Lazily freed at t = 5000 ms, delay 1000 ms.
        assert!(!expired(5000, 5000, 1000));
        assert!(!expired(5000, 5999, 1000));
        assert!(expired(5000, 6000, 1000));
        assert!(expired(5000, 60_000, 1000));
        // Delay 0: due at once.
        assert!(expired(5000, 5000, 0));
        // Across the wrap of the 32-bit millisecond clock.
        let at = u32::MAX - 100;
        assert!(!expired(at, at.wrapping_add(999), 1000));
        assert!(expired(at, at.wrapping_add(1000), 1000));
        assert!(expired(at, 2000, 1000));
    }
}
