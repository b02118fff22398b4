//! The gates every zone reads before caching a freed item, and the one-reclaim-at-a-time lock.
//!
//! * The squeeze window (blkback's `buffer_squeeze_end`): while it is open, per-CPU stacks are
//!   closed to frees, frees go straight to the slabs, and a slab that becomes empty goes back to
//!   the OS at once.
//! * "Buckets disabled" (UMA under critical memory): no caching at all until re-enabled.
//! * The reclaim lock: reclaims are serialised and re-entry proof (a reclaim called from inside a
//!   reclaim — a `fini` hook, a low-memory handler — returns at once instead of deadlocking).
//!
//! The gates are plain atomics read with `Relaxed`: a zone that reads a stale "open" caches one
//! more item, which the reclaim that changed the gate drains (it stops and fences every CPU's
//! stack after the store; see `pcpu.rs`). This module sits below the zones; the reclaim entry
//! points (`reclaim.rs`) set the gates.

use crate::os;
use crate::sync::{lock, AtomicBool, AtomicU64, Mutex, Ordering};
use std::cell::Cell;

static RECLAIM: Mutex<()> = Mutex::new(());
thread_local! {
    static IN_RECLAIM: Cell<bool> = const { Cell::new(false) };
}
static SQUEEZE_UNTIL: AtomicU64 = AtomicU64::new(0);
static BUCKETS_DISABLED: AtomicBool = AtomicBool::new(false);
static MAP_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Runs `f` as the one reclaim in progress; `None` if this thread is already reclaiming.
pub(crate) fn exclusive<R>(f: impl FnOnce() -> R) -> Option<R> {
    if IN_RECLAIM.with(|c| c.replace(true)) {
        return None;
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_RECLAIM.with(|c| c.set(false));
        }
    }
    let _reset = Reset;
    let _g = lock(&RECLAIM);
    Some(f())
}

/// Is a squeeze window open at `now_ns`?
#[inline]
pub fn squeezing(now_ns: u64) -> bool {
    let u = SQUEEZE_UNTIL.load(Ordering::Relaxed);
    u != 0 && now_ns < u
}

/// Is a squeeze window open now? (No clock read when no window was ever opened.)
#[inline]
pub fn squeezing_now() -> bool {
    SQUEEZE_UNTIL.load(Ordering::Relaxed) != 0 && squeezing(os::now_ns())
}

/// End of the current squeeze window (monotonic ns; 0 = none so far).
pub fn squeeze_until() -> u64 {
    SQUEEZE_UNTIL.load(Ordering::Relaxed)
}

/// Opens or extends the squeeze window to `now_ns + duration_ns` (never shortens it).
pub(crate) fn extend_squeeze(now_ns: u64, duration_ns: u64) {
    let until = now_ns.saturating_add(duration_ns);
    // SeqCst: ordered before the per-CPU stops of the drain that follows, with the stores of
    // `set_buckets_disabled` (one total order of gate changes for `squeezing`/`buckets_enabled`
    // readers that also read the stop words).
    let prev = SQUEEZE_UNTIL.fetch_max(until, Ordering::SeqCst);
    count_squeezed(prev, now_ns, until);
}

/// Closes the squeeze window now (an explicit end of pressure). Caches reopen on their next slow
/// path, as after a window that ran out.
pub(crate) fn end_squeeze() {
    // SeqCst: as in `extend_squeeze` (one order of window changes).
    SQUEEZE_UNTIL.store(0, Ordering::SeqCst);
}

/// Renews an open squeeze window to last at least `duration_ns` from now: `true` and nothing
/// else needs doing (the window's caches are already closed and frees go straight back to the
/// OS). `false` when no window is open: the caller opens one. Cheap (two atomics, no lock), so it
/// may run on every pressure signal, as the kernel's shrinker runs on every reclaim pass.
pub fn renew_squeeze(duration_ns: u64) -> bool {
    let now = os::now_ns();
    let cur = SQUEEZE_UNTIL.load(Ordering::Relaxed);
    if cur == 0 || cur <= now {
        return false;
    }
    let until = now.saturating_add(duration_ns);
    // SeqCst as in `extend_squeeze`: one order of window ends for every thread.
    let prev = SQUEEZE_UNTIL.fetch_max(until, Ordering::SeqCst);
    count_squeezed(prev, now, until);
    true
}

static SQUEEZED_NS: AtomicU64 = AtomicU64::new(0);

/// Adds the part of the window `now..until` that the window ending at `prev` did not cover.
fn count_squeezed(prev: u64, now: u64, until: u64) {
    let from = prev.max(now);
    if until > from {
        SQUEEZED_NS.fetch_add(until - from, Ordering::Relaxed);
    }
}

/// Total time covered by squeeze windows so far (ns; a window still open counts to its end).
pub fn squeezed_ns() -> u64 {
    SQUEEZED_NS.load(Ordering::Relaxed)
}

/// Is bucket caching enabled (not disabled by critical memory pressure)?
#[inline]
pub fn buckets_enabled() -> bool {
    !BUCKETS_DISABLED.load(Ordering::Relaxed)
}

/// Sets "buckets disabled"; returns the previous value.
pub(crate) fn set_buckets_disabled(off: bool) -> bool {
    // SeqCst: as in `extend_squeeze`.
    BUCKETS_DISABLED.swap(off, Ordering::SeqCst)
}

/// Set when memory went back to a cache's free space (a slab left entirely free, a large
/// block freed) since the last answer to a refused mapping: that answer's rate limit does not
/// apply then (`zone/drain.rs`, `on_map_failure`), so a program that frees and asks again at
/// once is served.
static FREED: AtomicBool = AtomicBool::new(false);

/// Notes memory freed into a cache's free space (see [`FREED`]). Relaxed, and a store only when
/// the flag is clear: a hint read by the next refused mapping, which orders nothing else.
#[inline]
pub fn note_freed() {
    if !FREED.load(Ordering::Relaxed) {
        FREED.store(true, Ordering::Relaxed);
    }
}

/// Whether memory was freed since the last call, and clears the flag (see [`FREED`]).
pub(crate) fn take_freed() -> bool {
    FREED.swap(false, Ordering::Relaxed)
}

/// Counts a failed mapping.
pub(crate) fn count_map_failure() {
    MAP_FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// Mapping failures seen (each followed by a DRAIN_CPU and one retry).
pub fn map_failures() -> u64 {
    MAP_FAILURES.load(Ordering::Relaxed)
}
