//! The sources' delayed opening, handed to a program thread.
//!
//! An `open` takes the program's lowest free descriptor number for a moment before
//! `ebbtide_pressure::libfd` moves it above the program's range. At the runtime's start the
//! thread that started it waits while the threads open theirs (`lifetime::Opening`), but the
//! malloc's sources open a second later (`sources_delay_ms`: a PSI trigger torn down at exit
//! costs a short process tens of milliseconds), on the reclaim thread, while the program runs
//! on — so a program counting on its lowest free number (CPython's `test_os.test_fd_leak`)
//! could see the next one. So when a program thread will come by (the malloc says so:
//! [`open_on_program_threads`]), the reclaim thread asks ([`request`]) instead of opening, and
//! the next allocation slow path of a program thread opens the sources inside its allocation
//! ([`open_if_requested`]) and hands the watcher over ([`take`]); a single-threaded program
//! cannot be looking then. When none comes within [`FALLBACK`] (an idle program), the reclaim
//! thread takes the request back ([`withdraw`]) and opens them itself.
//!
//! Orderings: REQUESTED is swapped (AcqRel) by whoever opens — the one program thread that
//! finds it set, or the reclaim thread withdrawing it — so exactly one opens. The watcher goes
//! through READY under its gated lock (a fork waits for it); WAKE is the futex word the reclaim
//! thread sleeps on without a watcher, bumped (Release) after the deposit.

use super::*;
use std::sync::atomic::AtomicU32;

/// Set by the malloc at load: its allocation slow paths call [`open_if_requested`].
static ON_PROGRAM_THREADS: AtomicBool = AtomicBool::new(false);
/// A delayed opening asked of the program's threads and not yet taken.
static REQUESTED: AtomicBool = AtomicBool::new(false);
/// What the program thread opened, with its process generation: `Some(None)` when the watcher
/// could not be opened (reported already), so the reclaim thread does not wait for it.
static READY: Mutex<Option<(u64, Option<Watcher>)>> = Mutex::new(None);
/// Bumped after each deposit; the reclaim thread sleeps on it while it has no watcher.
static WAKE: AtomicU32 = AtomicU32::new(0);

/// How long the reclaim thread waits for a program thread before opening the sources itself:
/// a working program takes an allocation slow path far sooner (a size class's refill), and an
/// idle one gets its sources this much after `sources_delay_ms` (tests and users wait about
/// that long for them).
pub(super) const FALLBACK: Duration = Duration::from_millis(100);

/// The malloc's allocation slow paths will open the sources (see the module doc). Inlined
/// into the malloc's constructor, which every program runs (its hot text, `hot-text.txt`).
#[inline]
pub fn open_on_program_threads() {
    ON_PROGRAM_THREADS.store(true, Ordering::Relaxed);
}

/// Whether delayed openings go to the program's threads.
pub(super) fn on_program_threads() -> bool {
    ON_PROGRAM_THREADS.load(Ordering::Relaxed)
}

/// Asks the program's threads to open the sources.
pub(super) fn request() {
    REQUESTED.store(true, Ordering::Release);
}

/// Takes the request back: `true` when no program thread took it (the caller opens), `false`
/// when one did (its watcher comes through [`take`]).
pub(super) fn withdraw() -> bool {
    REQUESTED.swap(false, Ordering::AcqRel)
}

/// Whether an opening is asked for: one relaxed load, for the malloc's slow paths.
#[inline]
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// On a program thread, inside an allocation (no lock of the allocator held): opens the
/// sources if asked and no other thread took the request, and hands the watcher over.
#[cold]
pub fn open_if_requested() {
    if !REQUESTED.swap(false, Ordering::AcqRel) {
        return;
    }
    // Acquire: pairs with the fork handler's increment (a stale generation is dropped).
    let gen = FORKS.load(Ordering::Acquire);
    let w = thread::open_watcher(gen);
    *lock_gated(&READY) = Some((gen, w));
    // Release: the deposit above is visible to the reclaim thread that sees the new count.
    WAKE.fetch_add(1, Ordering::Release);
    ebbtide_core::os::futex_wake(&WAKE, i32::MAX);
}

/// The watcher a program thread opened for generation `gen`: `Some(None)` when it could not
/// open one, `None` when nothing was deposited (yet).
pub(super) fn take(gen: u64) -> Option<Option<Watcher>> {
    match lock_gated(&READY).take() {
        Some((g, w)) if g == gen => Some(w),
        _ => None,
    }
}

/// Sleeps for at most `timeout`, or until a program thread deposits a watcher.
pub(super) fn sleep(timeout: Duration) {
    let seen = WAKE.load(Ordering::Acquire);
    if lock_gated(&READY).is_some() {
        return;
    }
    // Rounded up: a timeout under a millisecond must still sleep, not return at once.
    let ms = timeout.as_micros().div_ceil(1000).min(u64::MAX as u128) as u64;
    ebbtide_core::os::futex_wait_for(&WAKE, seen, Some(ms));
}

/// In a forked child (atomics only): no request stands; a deposit of the parent's is dropped
/// by its generation.
pub(super) fn after_fork_child() {
    REQUESTED.store(false, Ordering::Relaxed);
}
