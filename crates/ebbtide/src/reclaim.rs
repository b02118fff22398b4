//! Reclaim entry points: give cached memory back to the OS, for one zone or for all.
//!
//! | request | what it does | bucket size |
//! |---|---|---|
//! | [`Request::Trim`] | working-set update, depot down to its WSS, free slabs beyond the reserve back to the OS | −1 |
//! | [`Request::Drain`] | whole depot to the slabs, free slabs back to the OS | −1 |
//! | [`Request::DrainCpu`] | depot, then every CPU's stack (one loop over CPUs draining every zone on each, one `membarrier` per CPU), then the depot again; free slabs back | halved toward the minimum first |
//!
//! Every call returns the bytes given back to the OS, all of them given back by the time it
//! returns. Inside a reclaim, slabs left entirely free go back to the OS through a
//! release session (`release.rs`) as soon as they are free, overlapping the kernel's work
//! with the sorting of the remaining items (and sharing it with a helper thread); the session
//! ends before the call returns. Reclaim is serialised by one mutex and
//! re-entry proof: a reclaim called from inside a reclaim (a `fini` hook, a low-memory handler)
//! returns 0 at once instead of deadlocking.
//!
//! The squeeze window (blkback's `buffer_squeeze_end`) and the "buckets disabled" switch (UMA
//! under critical memory) also live here: while either holds, every zone's per-CPU stacks are
//! closed to frees, frees go straight to the slabs and, during a squeeze, a slab that becomes
//! empty goes back to the OS at once.

use crate::bucket;
use crate::os;
use crate::pcpu::{self, lock_header};
use crate::release::Session;
use crate::sync::{lock, AtomicBool, AtomicU64, Mutex, Ordering};
use crate::zone::{Zone, ZoneInner};
use std::cell::Cell;

/// A reclaim request (the values are the C ABI's `EBB_RECLAIM_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Request {
    Trim = 1,
    Drain = 2,
    DrainCpu = 3,
}

impl Request {
    /// From the C ABI value.
    pub fn from_raw(v: i32) -> Option<Request> {
        match v {
            1 => Some(Request::Trim),
            2 => Some(Request::Drain),
            3 => Some(Request::DrainCpu),
            _ => None,
        }
    }
}

static RECLAIM: Mutex<()> = Mutex::new(());
thread_local! {
    static IN_RECLAIM: Cell<bool> = const { Cell::new(false) };
}
static SQUEEZE_UNTIL: AtomicU64 = AtomicU64::new(0);
static BUCKETS_DISABLED: AtomicBool = AtomicBool::new(false);
static MAP_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Runs `f` as the one reclaim in progress; `None` if this thread is already reclaiming.
fn exclusive<R>(f: impl FnOnce() -> R) -> Option<R> {
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

/// Is bucket caching enabled (not disabled by critical memory pressure)?
#[inline]
pub fn buckets_enabled() -> bool {
    !BUCKETS_DISABLED.load(Ordering::Relaxed)
}

/// Enables or disables bucket caching in every zone. Disabling closes every per-CPU stack and
/// drains them (DRAIN_CPU); enabling lets each CPU reopen on its next slow path. Returns the bytes
/// given back.
pub fn set_buckets_enabled(on: bool) -> usize {
    let was = BUCKETS_DISABLED.swap(!on, Ordering::SeqCst);
    if !on && !was {
        return reclaim_all(Request::DrainCpu);
    }
    0
}

/// Opens (or extends) a squeeze window of `duration_ns`: caches keep nothing until it ends.
/// Drains every zone's caches at once (the reclaim code enforces the window itself, so an idle
/// cache cannot miss it). Returns the bytes given back.
pub fn squeeze(duration_ns: u64) -> usize {
    let now = os::now_ns();
    let until = now + duration_ns;
    let prev = SQUEEZE_UNTIL.fetch_max(until, Ordering::SeqCst);
    count_squeezed(prev, now, until);
    exclusive(|| {
        let reg = crate::registry::lock();
        reg.for_each(|z| z.count_squeeze());
        crate::lazy::purge_locked(&reg);
        let mut sess = Session::begin(false);
        let b = drain_cpu_locked(&reg, true, &mut sess);
        b + sess.finish()
    })
    .unwrap_or(0)
}

static SQUEEZED_NS: AtomicU64 = AtomicU64::new(0);

/// Adds the part of the window `now..until` that the window ending at `prev` did not cover.
fn count_squeezed(prev: u64, now: u64, until: u64) {
    let from = prev.max(now);
    if until > from {
        SQUEEZED_NS.fetch_add(until - from, Ordering::Relaxed);
    }
}

/// Renews an open squeeze window to last at least `duration_ns` from now: the caller is told
/// `true` and nothing else needs doing (the window's caches are already closed and frees go
/// straight back to the OS). `false` when no window is open: the caller opens one with
/// [`squeeze`]. Cheap (two atomics, no lock), so it may run on every pressure signal.
pub fn renew_squeeze(duration_ns: u64) -> bool {
    let now = os::now_ns();
    let cur = SQUEEZE_UNTIL.load(Ordering::Relaxed);
    if cur == 0 || cur <= now {
        return false;
    }
    let until = now + duration_ns;
    // SeqCst as in `squeeze`: one order of window ends for every thread.
    let prev = SQUEEZE_UNTIL.fetch_max(until, Ordering::SeqCst);
    count_squeezed(prev, now, until);
    true
}

/// Total time covered by squeeze windows so far (ns; a window still open counts to its end).
pub fn squeezed_ns() -> u64 {
    SQUEEZED_NS.load(Ordering::Relaxed)
}

/// A page mapping failed: synchronous DRAIN_CPU of every zone before the caller retries once.
pub(crate) fn on_map_failure() {
    MAP_FAILURES.fetch_add(1, Ordering::Relaxed);
    crate::reclaimer::count_map_failure();
    reclaim_all(Request::DrainCpu);
}

/// Mapping failures seen (each followed by a DRAIN_CPU and one retry).
pub fn map_failures() -> u64 {
    MAP_FAILURES.load(Ordering::Relaxed)
}

/// Reclaims from one zone.
pub(crate) fn reclaim_zone(z: &ZoneInner, req: Request) -> usize {
    exclusive(|| {
        let mut sess = Session::begin(true);
        let b = reclaim_zone_locked(z, req, &mut sess);
        b + sess.finish()
    })
    .unwrap_or(0)
}

/// One zone's reclaim; the bytes `sess` gives back are counted by its owner.
fn reclaim_zone_locked(z: &ZoneInner, req: Request, sess: &mut Session) -> usize {
    let mut bytes = 0;
    match req {
        Request::Trim => {
            let keep = {
                let mut d = lock(&z.depot);
                d.wss.update();
                if z.flags.contains(crate::zone::ZoneFlags::NOTRIM) {
                    u64::MAX
                } else {
                    d.wss.trim_target()
                }
            };
            z.trim_depot_in(keep, Some(sess));
            z.shrink_bucket_size();
        }
        Request::Drain => {
            z.trim_depot_in(0, Some(sess));
            z.shrink_bucket_size();
        }
        Request::DrainCpu => {
            z.halve_bucket_size();
            z.trim_depot_in(0, Some(sess));
            drain_zone_cpus_in(z, |_| true, Some(sess));
            z.trim_depot_in(0, Some(sess));
        }
    }
    bytes += z.keg.reclaim_in(true, sess);
    z.count_reclaim(req, bytes);
    bytes
}

/// Reclaims from every zone; returns the bytes given back.
pub fn reclaim_all(req: Request) -> usize {
    exclusive(|| {
        let reg = crate::registry::lock();
        let mut sess = Session::begin(true);
        let bytes = match req {
            Request::Trim | Request::Drain => {
                let mut b = 0;
                reg.for_each(|z| b += reclaim_zone_locked(z, req, &mut sess));
                b
            }
            Request::DrainCpu => drain_cpu_locked(&reg, false, &mut sess),
        };
        let b = bytes + bucket::reclaim_bucket_kegs_in(&mut sess);
        b + sess.finish() + crate::lazy::purge_locked(&reg)
    })
    .unwrap_or(0)
}

/// DRAIN_CPU over every zone: one loop over CPUs, each stopping every zone's stack on that CPU,
/// one fence, then emptying them. The bytes `sess` gives back are counted by its owner.
fn drain_cpu_locked(reg: &crate::registry::Locked, squeeze: bool, sess: &mut Session) -> usize {
    reg.for_each(|z| {
        if !squeeze {
            z.halve_bucket_size();
        }
        z.trim_depot_in(0, Some(sess));
    });
    let ncpu = os::cpu_count();
    let mut buf = [core::ptr::null_mut::<u8>(); 2 * bucket::BUCKET_MAX as usize];
    for cpu in 0..ncpu {
        let mut any = false;
        reg.for_each(|z| {
            if cpu < z.pcpu.ncpu() {
                let h = z.pcpu.header(cpu);
                core::mem::forget(lock_header(h));
                z.pcpu.stop(h);
                any = true;
            }
        });
        if !any {
            continue;
        }
        pcpu::fence_cpu(cpu);
        reg.for_each(|z| {
            if cpu < z.pcpu.ncpu() {
                let h = z.pcpu.header(cpu);
                let cap = if squeeze { 0 } else { z.bucket_target_cap() };
                empty_stopped(z, cpu, cap, &mut buf, Some(sess));
                // The header lock taken (and forgotten) above.
                h.lock.store(0, Ordering::Release);
            }
        });
    }
    let mut bytes = 0;
    reg.for_each(|z| {
        z.trim_depot_in(0, Some(sess));
        bytes += z.keg.reclaim_in(!squeeze, sess);
        z.count_reclaim(Request::DrainCpu, 0);
    });
    bytes
}

/// The periodic pass over every zone without pressure (working-set update, idle trim, idle
/// per-CPU stacks drained); returns the bytes given back.
pub fn periodic_all(now_ns: u64) -> usize {
    exclusive(|| {
        let reg = crate::registry::lock();
        let mut b = 0;
        reg.for_each(|z| b += z.periodic(now_ns));
        b + bucket::reclaim_bucket_kegs()
    })
    .unwrap_or(0)
}

/// Enforces every page pool's cap (`max_buffer_pages`, 0 while squeezing); returns the bytes
/// given back.
pub fn shrink_pools() -> usize {
    let squeezing = squeezing_now();
    exclusive(|| {
        let reg = crate::registry::lock();
        let mut b = 0;
        reg.for_each(|z| {
            let max = z.pool_max.load(Ordering::Relaxed);
            if max != usize::MAX {
                b += z.shrink_to(if squeezing { 0 } else { max });
            }
        });
        b
    })
    .unwrap_or(0)
}

/// Bytes of free items held in caches and free slab slots, over every zone (the budget source).
pub fn cached_bytes() -> u64 {
    let reg = crate::registry::lock();
    let mut b = 0u64;
    reg.for_each(|z| b += (z.free_items() * z.item_size) as u64);
    b
}

/// Empties a zone's stopped and fenced stack on `cpu` into its slabs (through `buf`, large enough
/// for a full stack) and reopens the stack with `cap`. Returns the items moved.
fn empty_stopped(
    z: &ZoneInner,
    cpu: usize,
    cap: u32,
    buf: &mut [*mut u8; 2 * bucket::BUCKET_MAX as usize],
    sess: Option<&mut Session>,
) -> usize {
    let mut n = 0;
    z.pcpu.take_stopped(cpu, z.pcpu.header(cpu), cap, |p| {
        buf[n] = p;
        n += 1;
    });
    if n > 0 {
        z.release_to_keg_in(&buf[..n], sess);
    }
    n
}

/// Drains the per-CPU stacks of one zone on the CPUs `pick` selects (one fence per CPU). Returns
/// the items moved to the slabs.
pub(crate) fn drain_zone_cpus(z: &ZoneInner, pick: impl Fn(usize) -> bool) -> usize {
    drain_zone_cpus_in(z, pick, None)
}

/// [`drain_zone_cpus`] inside a reclaim (emptied slabs go to the session's release pipeline).
fn drain_zone_cpus_in(
    z: &ZoneInner,
    pick: impl Fn(usize) -> bool,
    mut sess: Option<&mut Session>,
) -> usize {
    let mut buf = [core::ptr::null_mut::<u8>(); 2 * bucket::BUCKET_MAX as usize];
    let mut moved = 0;
    for cpu in 0..z.pcpu.ncpu() {
        if !pick(cpu) {
            continue;
        }
        let h = z.pcpu.header(cpu);
        let _g = lock_header(h);
        z.pcpu.stop(h);
        pcpu::fence_cpu(cpu);
        moved += empty_stopped(z, cpu, z.bucket_target_cap(), &mut buf, sess.as_deref_mut());
    }
    moved
}

/// Every cached item of one zone back to the slabs (used before sleeping at `max_items`).
pub(crate) fn drain_zone_caches(z: &ZoneInner) {
    drain_zone_cpus(z, |_| true);
    z.trim_depot(0);
}

impl Zone {
    /// Opens the zone's caches again after a test or an explicit drain (normally lazy).
    pub fn reopen_caches(&self) {
        self.inner().open_all_caps();
    }
}
