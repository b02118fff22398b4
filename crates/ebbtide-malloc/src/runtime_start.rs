//! When the runtime's threads start in a process running this malloc: lazily, from an
//! allocation's slow path, once the footprint passes `runtime_start_bytes`
//! (`docs/design/lazy-runtime.md`).
//!
//! Until then the process has no thread of ours: a short or small program (`python3 -c pass`,
//! `setpriv`, `unshare --user`) stays single-threaded as under glibc, so the kernel's
//! single-thread-only calls (`unshare(CLONE_NEWUSER)`), glibc's set*id broadcast and `fork`
//! from a signal handler behave as they do there. Nothing is lost: below the threshold there
//! is little to give back, and every cache still answers `malloc_trim` and the budget on the
//! caller's thread.
//!
//! * **Where.** [`maybe_start`] at the end of the class slow path and of a block above the
//!   classes: no lock of ours is held there, so the start may allocate (it re-enters `malloc`
//!   like any code) and create threads. One relaxed load while armed or not.
//! * **Once.** The first thread past the threshold disarms ([`ARMED`] swapped off) and starts;
//!   the allocations of the start itself find it disarmed (no re-entry).
//! * **Never in a fork.** Not while this thread is between the fork gate's prepare and its
//!   child or parent handler (an allocating fork handler run after ours); a forked child is
//!   armed again ([`rearm_in_child`], atomics only) and starts at its own first slow path past
//!   the threshold, in ordinary program context.
//! * **Cancellation off** around the start: it opens files and creates threads, which contain
//!   cancellation points, and a user thread cancelled inside `malloc` would unwind through
//!   frames that cannot unwind.
//! * **At load** instead when `runtime_start_bytes=0`, or when the configuration asks for what
//!   needs a thread (`sources` or `control_socket` set explicitly); at `max_cached_bytes`
//!   when that budget is set lower than the threshold.

use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use ebbtide::options::{self, Tunable};

extern "C" {
    // glibc's (POSIX); not in the `libc` crate.
    fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
}
/// `PTHREAD_CANCEL_DISABLE` (glibc's `pthread.h`: ENABLE 0, DISABLE 1).
const PTHREAD_CANCEL_DISABLE: c_int = 1;

/// Set while the threads are to start at the next slow path past [`START_AT`].
static ARMED: AtomicBool = AtomicBool::new(false);
/// Footprint in bytes at which they start.
static START_AT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// At load (the library's constructor, outside any allocation): the configuration read, the
/// control socket if configured, and the threads started now or armed for later.
pub(crate) fn at_load() {
    ebbtide::prepare_runtime();
    let mut at = options::get_u64(Tunable::RuntimeStartBytes);
    let budget = options::get_u64(Tunable::MaxCachedBytes);
    if budget > 0 {
        at = at.min(budget);
    }
    if explicitly_set(b"EBBTIDE_SOURCES", b"sources") || options::get_bool(Tunable::ControlSocket) {
        at = 0;
    }
    if at == 0 {
        START_AT.store(0, Ordering::Relaxed);
        ebbtide::start_threads();
        return;
    }
    START_AT.store(at.min(usize::MAX as u64) as usize, Ordering::Relaxed);
    // Relaxed: START_AT is read after ARMED by the same rule (a stale START_AT only delays).
    ARMED.store(true, Ordering::Relaxed);
}

/// Whether the environment names the tunable (its own variable or an `EBBTIDE_CONF` entry).
fn explicitly_set(var: &[u8], conf_name: &[u8]) -> bool {
    crate::env::raw_var(var).is_some()
        || crate::env::raw_var(b"EBBTIDE_CONF")
            .and_then(|c| crate::env::conf_value(c, conf_name))
            .is_some()
}

/// Bytes this malloc holds from the system: slabs of the size classes, blocks above them, the
/// page heap's free resident runs.
fn footprint() -> usize {
    ebbtide_core::mapped_bytes() as usize + crate::huge::totals().0 + crate::huge::cached_bytes()
}

/// From the slow paths, holding no lock: starts the threads once the footprint is past the
/// threshold.
#[inline(always)]
pub(crate) fn maybe_start() {
    if ARMED.load(Ordering::Relaxed) {
        start_if_due();
    } else if ebbtide::reclaimer::sources_requested() {
        open_sources();
    }
}

#[cold]
#[inline(never)]
fn start_if_due() {
    if footprint() < START_AT.load(Ordering::Relaxed) || ebbtide_core::forkgate::forking() {
        return;
    }
    // AcqRel: one thread wins; the start's own allocations see it disarmed.
    if !ARMED.swap(false, Ordering::AcqRel) {
        return;
    }
    // The start's allocations are the library's own, on the program's thread (`heap.rs`).
    as_library_work(ebbtide::start_threads);
}

/// The reclaim thread asked for the pressure sources' delayed opening (`sources_delay_ms`):
/// opened here, inside this allocation, with no lock of the allocator held, so that a
/// single-threaded program cannot see an `open` of ours take its lowest free descriptor
/// (`ebbtide/src/reclaimer/handoff.rs`). Under the same conditions as the start: not in a fork,
/// cancellation off, `errno` kept; never on a thread of the runtime's (or in the library's own
/// code), which is what the request is there to avoid.
#[cold]
#[inline(never)]
fn open_sources() {
    if ebbtide_core::forkgate::forking() || ebbtide::in_library_code() {
        return;
    }
    as_library_work(ebbtide::reclaimer::open_if_requested);
}

/// Runs `f`, the library's own work (it opens files, creates threads, allocates), on a program
/// thread inside one of its allocations: cancellation off around it (`open` and thread creation
/// are cancellation points; a cancelled user thread must not unwind through `malloc`), the
/// program's `errno` kept, and its allocations marked the library's own (`heap.rs`). Inlined
/// into its two cold callers, as the start was written before (their code in the hot text).
#[inline(always)]
fn as_library_work(f: impl FnOnce()) {
    let mut old = 0;
    // SAFETY: pthread_setcancelstate with a valid out-pointer; restored below on this thread.
    unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
    let e = ebbtide_core::os::errno();
    {
        let _own = ebbtide::LibraryCode::enter();
        f();
    }
    ebbtide_core::os::set_errno(e);
    // SAFETY: pthread_setcancelstate with a state it returned above; a null out-pointer is
    // allowed. The previous state back on this thread.
    unsafe { pthread_setcancelstate(old, core::ptr::null_mut()) };
}

/// In a forked child (a fork handler: atomics only): the parent's threads do not exist here;
/// the child starts its own at its first slow path past the threshold, if the parent's start
/// was armed or done (never before the library's constructor ran).
pub(crate) fn rearm_in_child() {
    if START_AT.load(Ordering::Relaxed) != usize::MAX {
        ARMED.store(true, Ordering::Relaxed);
    }
}

/// Whether the threads are still to start (for tests and `ebbtide stat`).
pub fn armed() -> bool {
    ARMED.load(Ordering::Relaxed)
}
