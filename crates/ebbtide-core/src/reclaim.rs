//! Reclaim entry points: give cached memory back to the OS, for one zone or for all.
//!
//! | request | what it does | bucket size |
//! |---|---|---|
//! | [`Request::Trim`] | working-set update, depot down to its WSS, free slabs beyond the reserve back to the OS; outer caches down to their working set ([`crate::outer`]) | −1 |
//! | [`Request::Drain`] | whole depot to the slabs, free slabs back to the OS | −1 |
//! | [`Request::DrainCpu`] | depot, then every CPU's stack (one loop over CPUs draining every zone on each, one `membarrier` per CPU), then the depot again; free slabs back | halved toward the minimum first |
//!
//! Every call returns the bytes released, all of them released by the time it
//! returns. Inside a reclaim, slabs left entirely free are released through a
//! release session (`release.rs`) as soon as they are free, overlapping the kernel's work
//! with the sorting of the remaining items (and sharing it with a helper thread); the session
//! ends before the call returns. Reclaims are serialised and re-entry proof (`gate.rs`).
//!
//! The squeeze window and the "buckets disabled" switch are read by every zone (`gate.rs`);
//! they are set here, and [`respond`] carries out one policy step (squeeze, buckets off, a
//! request) with at most one pass over the CPUs.

pub use crate::gate::{
    buckets_enabled, map_failures, note_freed, renew_squeeze, squeeze_until, squeezed_ns,
    squeezing, squeezing_now,
};

use crate::bucket;
use crate::disposal::{Disposal, Emptied};
use crate::gate::{self, exclusive};
use crate::os;
use crate::release::Session;
use crate::sync::{lock, Ordering};
use crate::zone::{
    drain_cpu_all, on_map_failure, release_lazy_due_locked, release_lazy_locked, Zone, ZoneFlags,
    ZoneInner,
};

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

/// One step of a pressure policy, carried out by [`respond`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// Open (or extend) a squeeze window of this many nanoseconds.
    pub squeeze_ns: Option<u64>,
    /// Enable or disable bucket caching in every zone.
    pub buckets_enabled: Option<bool>,
    /// A reclaim request.
    pub request: Option<Request>,
}

/// Carries out `r` with at most one pass over the CPUs: a squeeze window, disabling buckets and a
/// DRAIN_CPU all need every CPU's stack emptied, and one DRAIN_CPU (one `membarrier` per CPU)
/// serves all three. Returns the bytes released.
pub fn respond(r: Response) -> usize {
    let _inside = crate::forkgate::enter();
    let squeeze = match r.squeeze_ns {
        Some(ns) => {
            gate::extend_squeeze(os::now_ns(), ns);
            true
        }
        None => false,
    };
    let mut disabled_now = false;
    match r.buckets_enabled {
        Some(false) => disabled_now = !gate::set_buckets_disabled(true),
        Some(true) => {
            gate::set_buckets_disabled(false);
        }
        None => {}
    }
    let drain_cpu = r.request == Some(Request::DrainCpu);
    if squeeze || disabled_now || drain_cpu {
        if squeeze {
            crate::registry::lock().for_each(|z: &ZoneInner| z.count_squeeze());
        }
        // Bucket sizes halve for a DRAIN_CPU and when buckets go off (UMA), not for a squeeze
        // alone; a squeeze keeps no reserve of free slabs.
        let b = drain_cpu_all(drain_cpu || disabled_now, !squeeze);
        return b + crate::outer::drain_all();
    }
    match r.request {
        Some(req) => reclaim_all(req),
        None => 0,
    }
}

/// Closes an open squeeze window at once (the runtime's explicit end of pressure). Caches reopen
/// on their next slow path.
pub fn end_squeeze() {
    let _inside = crate::forkgate::enter();
    gate::end_squeeze();
}

/// Enables or disables bucket caching in every zone. Disabling closes every per-CPU stack and
/// drains them (DRAIN_CPU); enabling lets each CPU reopen on its next slow path. Returns the bytes
/// released.
pub fn set_buckets_enabled(on: bool) -> usize {
    let _inside = crate::forkgate::enter();
    respond(Response {
        buckets_enabled: Some(on),
        ..Response::default()
    })
}

/// Opens (or extends) a squeeze window of `duration_ns`: caches keep nothing until it ends.
/// Drains every zone's caches at once (the reclaim code enforces the window itself, so an idle
/// cache cannot miss it). Returns the bytes released.
pub fn squeeze(duration_ns: u64) -> usize {
    let _inside = crate::forkgate::enter();
    respond(Response {
        squeeze_ns: Some(duration_ns),
        ..Response::default()
    })
}

/// Runs `f` with every pass over the caches held off (the runtime's periodic, resize and
/// pressure passes, and any reclaim on another thread, wait for it: `f` runs as the one reclaim
/// in progress), so no pass moves an item between two of `f`'s operations. For tests whose
/// check is about the top of a CPU's stack; `f` must not wait for another thread that could
/// be waiting to reclaim, nor create or destroy a zone (a reclaim inside `f` returns at once).
#[doc(hidden)]
pub fn without_reclaims<R>(f: impl FnOnce() -> R) -> R {
    let mut f = Some(f);
    match exclusive(|| (f.take().unwrap())()) {
        Some(r) => r,
        // Already inside a reclaim on this thread: nothing else runs one meanwhile.
        None => (f.take().unwrap())(),
    }
}

/// Reclaims from one zone.
fn reclaim_zone(z: &ZoneInner, req: Request) -> usize {
    exclusive(|| {
        let mut sess = Session::begin(true);
        let b = reclaim_zone_locked(z, req, &mut Disposal::reclaim(&mut sess, squeezing_now()));
        b + sess.finish()
    })
    .unwrap_or(0)
}

/// One zone's part of a reclaim, its items and emptied slabs going where `d` (the reclaim's
/// decision) sends them; the free slabs beyond the reserve are released at the end.
fn reclaim_zone_locked(z: &ZoneInner, req: Request, d: &mut Disposal<'_>) -> usize {
    let mut bytes = 0;
    match req {
        Request::Trim => {
            let keep = {
                let mut d = lock(&z.depot);
                d.wss.update();
                if z.flags.contains(ZoneFlags::NOTRIM) {
                    u64::MAX
                } else {
                    d.wss.trim_target()
                }
            };
            z.trim_depot(keep, d);
            z.shrink_bucket_size();
        }
        Request::Drain => {
            z.trim_depot(0, d);
            z.shrink_bucket_size();
        }
        Request::DrainCpu => {
            z.halve_bucket_size();
            z.trim_depot(0, d);
            z.drain_cpus(|_| true, d);
            z.trim_depot(0, d);
        }
    }
    bytes += z.keg.release_free(z.keg.reserve_slabs(), d);
    match req {
        Request::Trim => z.count_trim(),
        Request::Drain => z.count_drain(),
        Request::DrainCpu => z.count_drain_cpu(),
    }
    bytes
}

/// Reclaims from every zone; returns the bytes released.
pub fn reclaim_all(req: Request) -> usize {
    let _inside = crate::forkgate::enter();
    if req == Request::DrainCpu {
        return drain_cpu_all(true, true) + crate::outer::drain_all();
    }
    let outer = match req {
        Request::Trim => crate::outer::trim_all(os::now_ns()),
        _ => crate::outer::drain_all(),
    };
    outer
        + exclusive(|| {
            let reg = crate::registry::lock();
            let mut sess = Session::begin(true);
            let mut d = Disposal::reclaim(&mut sess, squeezing_now());
            let mut b = 0;
            reg.for_each(|z: &ZoneInner| b += reclaim_zone_locked(z, req, &mut d));
            let b = b + bucket::release_bucket_kegs(&mut sess);
            // A pressure reclaim wants the memory now: lazily freed pages go too.
            b + sess.finish() + release_lazy_locked(&reg)
        })
        .unwrap_or(0)
}

/// A mapping outside the zones was refused (a malloc's large block: `RLIMIT_AS` reached, the
/// map count, the commit limit): what a zone does before it retries its own (DRAIN_CPU of every
/// zone, then the address space the caches hold free unmapped: empty chunks, the outer caches'
/// free space), counted as a failed mapping. The caller retries once. Call it with no lock of
/// the core held.
pub fn mapping_refused() {
    let _inside = crate::forkgate::enter();
    on_map_failure();
}

/// Sets how free pages leave the caches without pressure (the runtime's `lazy_free`,
/// `lazy_settle_ms` and `lazy_decay_ms` tunables; see [`crate::lazy`]). Turning it off gives
/// every lazily freed page back at once.
pub fn configure_lazy(enabled: bool, settle_ms: u64, decay_ms: u64) {
    let _inside = crate::forkgate::enter();
    let was = crate::lazy::set(enabled, settle_ms, decay_ms);
    if was && !enabled {
        purge_lazy_all();
    }
}

/// Fresh pages of `bytes` are about to be used outside the zones (a malloc's large blocks):
/// as many lazily freed bytes of the zones go back first, oldest slabs first, so that memory one
/// size class freed does not stay in RSS beside them (see `zone::make_room`, which a zone's own
/// import of fresh slabs calls). Never waits: nothing when no zone holds lazily freed pages or
/// when a reclaim pass holds the registry. Call it with no lock of the core held.
pub fn make_room(bytes: usize) {
    let _inside = crate::forkgate::enter();
    crate::zone::make_room(bytes);
}

/// Pressure: every lazily freed page of every zone goes back now (`MADV_DONTNEED`). Returns the
/// bytes released.
pub fn purge_lazy_all() -> usize {
    let _inside = crate::forkgate::enter();
    if crate::lazy::lazy_held_bytes() == 0 {
        return 0;
    }
    release_lazy_locked(&crate::registry::lock())
}

/// The decay step (run by the runtime every `pool_shrink_interval_ms`): lazy slabs older than
/// `lazy_decay_ms` at `now` go back for good, those that settled for `lazy_settle_ms` are
/// offered with `MADV_FREE`. Returns the bytes released for good.
pub fn decay_lazy(now: u32) -> usize {
    let _inside = crate::forkgate::enter();
    if crate::lazy::lazy_held_bytes() == 0 {
        return 0;
    }
    let reg = crate::registry::lock();
    release_lazy_due_locked(
        &reg,
        now,
        crate::lazy::decay_ms(),
        crate::lazy::settle_ms(),
        &mut Disposal::current(),
    )
}

/// The delayed step of free slabs beyond a zone's cap (run by the runtime every
/// `pool_shrink_interval_ms`, beside [`decay_lazy`]): a keg that has held more free slabs than
/// its cap for `EXCESS_DELAY_MS` (10 ms) at `now` moves the excess into the lazy decay, or
/// releases it under pressure (`keg/excess.rs`). Walks the zones only when some keg holds an
/// excess. Returns the bytes released now.
pub fn release_excess(now: u32) -> usize {
    let _inside = crate::forkgate::enter();
    if crate::keg::EXCESS_KEGS.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let reg = crate::registry::lock();
    crate::zone::trim_excess_locked(&reg, now, Disposal::pages_now(squeezing_now()))
}

/// Collapses into huge pages what a keg noted when it became dense (its older chunks,
/// `keg/huge.rs`): on the runtime's thread, soon after (it calls this every pass over the pools),
/// not in the allocation that crossed. Walks the zones only when something is pending
/// ([`crate::keg::HUGE_PENDING`]); nothing while memory is wanted (a collapse takes a free huge
/// page: the next calm pass). Returns the huge pages collapsed.
pub fn collapse_pending() -> usize {
    let _inside = crate::forkgate::enter();
    if !crate::keg::HUGE_PENDING.load(Ordering::Relaxed) || Disposal::current().breaks {
        return 0;
    }
    crate::keg::HUGE_PENDING.store(false, Ordering::Relaxed);
    let reg = crate::registry::lock();
    let mut n = 0;
    reg.for_each(|z: &ZoneInner| n += z.keg.collapse_mended());
    n
}

/// The periodic pass over every zone without pressure (working-set update, idle trim, idle
/// per-CPU stacks drained); returns the bytes released.
pub fn periodic_all(now_ns: u64) -> usize {
    let _inside = crate::forkgate::enter();
    exclusive(|| {
        let reg = crate::registry::lock();
        let mut b = 0;
        reg.for_each(|z: &ZoneInner| b += z.periodic(now_ns));
        b + bucket::release_bucket_kegs(&mut Session::inactive())
    })
    .unwrap_or(0)
        + crate::outer::periodic_all(now_ns)
}

/// The resize pass (run by the runtime's reclaim thread every `pool_shrink_interval_ms`): every
/// (zone, CPU) stack's capacity follows its misses since the last pass, within the per-CPU
/// budget ([`crate::sizing::budget`]); stacks left above their new capacity are trimmed to it.
/// `now_ns` from [`os::now_ns`] (a fake clock in tests). Returns what it did; nothing if this
/// thread is already reclaiming.
pub fn resize_pcpu(now_ns: u64) -> crate::zone::ResizeReport {
    exclusive(|| {
        let reg = crate::registry::lock();
        crate::zone::resize_locked(
            &reg,
            now_ns,
            crate::sizing::budget(),
            crate::sizing::DEFAULT_QUIET_NS,
        )
    })
    .unwrap_or_default()
}

/// Enforces every page pool's cap (`max_buffer_pages`, 0 while squeezing); returns the bytes
/// released.
pub fn shrink_pools() -> usize {
    let _inside = crate::forkgate::enter();
    let mut d = Disposal::current();
    let squeezing = matches!(d.emptied, Emptied::Release);
    exclusive(|| {
        let reg = crate::registry::lock();
        let mut b = 0;
        reg.for_each(|z: &ZoneInner| {
            let max = z.pool_max.load(Ordering::Relaxed);
            if max != usize::MAX {
                b += z.trim_to(if squeezing { 0 } else { max }, &mut d);
            }
        });
        b
    })
    .unwrap_or(0)
}

/// Bytes of free items held in caches and free slab slots, over every zone, plus what the outer
/// caches hold ([`crate::outer`]): the budget source.
pub fn cached_bytes() -> u64 {
    let _inside = crate::forkgate::enter();
    let reg = crate::registry::lock();
    let mut b = 0u64;
    reg.for_each(|z: &ZoneInner| b += (z.free_items() * z.item_size) as u64);
    drop(reg);
    b + crate::outer::held_bytes()
}

impl Zone {
    /// Reclaims the zone's cached memory (`req`: trim, drain or drain every CPU) and releases
    /// its free slabs; returns the bytes released.
    pub fn reclaim(&self, req: Request) -> usize {
        reclaim_zone(self.inner(), req)
    }

    /// Opens the zone's caches again after a test or an explicit drain (normally lazy).
    pub fn reopen_caches(&self) {
        self.inner().open_all_caps();
    }
}
