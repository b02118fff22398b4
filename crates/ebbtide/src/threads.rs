//! The runtime's threads, started lazily, and the one fork handler that forgets them in a child.
//!
//! | thread | started by | what it runs |
//! |---|---|---|
//! | `ebbtide-reclaim` | [`start_runtime`] | the reclaim loop ([`crate::reclaimer`]) |
//! | `ebbtide-release` | [`start_runtime`] | the core's release helper ([`ebbtide_core::release::serve_forever`]) |
//!
//! [`start_runtime`] runs at a zone's creation ([`before_zone_create`]), at an explicit
//! [`crate::pressure::notify`], and — in a process running the malloc — from an allocation's
//! slow path once the malloc's footprint passes `runtime_start_bytes`
//! (`docs/design/lazy-runtime.md`). [`prepare_runtime`] is everything but the threads: the
//! configuration read and pushed into the core, the fork handlers; the malloc runs it at load.
//!
//! The runtime's threads never keep a process alive (see `lifetime.rs`).
//!
//! [`start_runtime`] returns once the threads it started have opened their start-up
//! descriptors (the pressure sources, `/proc/self/stat`), or after a second
//! ([`crate::lifetime::Opening`]): an `open` takes the lowest free number for a moment before
//! the descriptor moves above the program's range (`ebbtide_pressure::libfd`), and done on a
//! thread of ours while the program runs on, that moment could hand the program descriptor 4
//! where it expects 3 (CPython's `test_os.test_fd_leak` failed so, once, under a loaded full
//! run). Done while the thread that started the runtime waits inside its allocation, a
//! single-threaded program sees nothing.
//!
//! A forked child has none of its parent's threads. The fork handler only clears atomics
//! (async-signal-safe: POSIX allows nothing else in the child of a multithreaded process before
//! `exec`); the child starts its own threads at its next zone creation, pressure notification
//! or (the malloc) slow path past the threshold, never from inside the fork.

use crate::options::{self, Tunable};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

/// The core's hook ([`ebbtide_core::runtime::Hooks::before_create`]): a zone is being created,
/// so the runtime starts ([`start_runtime`]).
pub(crate) fn before_zone_create() {
    start_runtime();
}

/// Everything but the threads: the fork handlers registered, the configuration read (once: the
/// environment is frozen at the first start path) and the settings the core reads pushed into
/// it. Starts nothing; may allocate.
pub(crate) fn prepare_runtime() {
    register_fork_handler();
    options::freeze_startup_reported();
    ebbtide_core::runtime::set_checked_by_default(options::get_bool(Tunable::Checked));
    ebbtide_core::runtime::set_abort_on_error(options::get_bool(Tunable::AbortOnError));
    ebbtide_core::page_pool::set_default_cap(options::get_u64(Tunable::MaxBufferPages) as usize);
    static SUBSCRIBE: Once = Once::new();
    SUBSCRIBE.call_once(|| options::subscribe(on_change));
}

/// `abort_on_error` changes at run time (the core reads its own copy).
fn on_change(t: Tunable, _: u64) {
    if t == Tunable::AbortOnError {
        // The current value, not the one passed: concurrent setters may interleave callbacks.
        ebbtide_core::runtime::set_abort_on_error(options::get_bool(Tunable::AbortOnError));
    }
}

/// [`prepare_runtime`], then the threads that should run and do not (cheap when they run);
/// returns once their start-up descriptors are open (module doc).
pub(crate) fn start_runtime() {
    prepare_runtime();
    crate::reclaimer::ensure_started();
    ensure_release_helper();
    crate::lifetime::wait_opened();
}

/// Set once a release helper was started in this process, or found unnecessary (one CPU, or
/// switched off); cleared in a forked child.
static HELPER_TRIED: AtomicBool = AtomicBool::new(false);

/// CPUs this thread may run on (`sched_getaffinity`). Not `available_parallelism`, which also
/// reads the cgroup's CPU quota through allocated paths: in the malloc, a size class touched at
/// start-up for one answer.
fn usable_cpus() -> usize {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return 1;
        }
        libc::CPU_COUNT(&set).max(1) as usize
    }
}

fn ensure_release_helper() {
    // AcqRel swap: exactly one caller goes on to start the helper; it pairs with the Release
    // store of the fork handler, so a child that cleared the flag starts its own.
    if cfg!(miri) || HELPER_TRIED.swap(true, Ordering::AcqRel) {
        return;
    }
    if usable_cpus() < 2 {
        return; // nothing to overlap with
    }
    if options::get_u64(Tunable::ReleaseThread) == 0 {
        return; // switched off (release_thread=false): the reclaiming thread does it all
    }
    let opening = crate::lifetime::Opening::new();
    let r = crate::lifetime::with_signals_blocked(|| {
        std::thread::Builder::new()
            .name("ebbtide-release".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                let me = crate::lifetime::register_runtime_thread();
                crate::lifetime::open_descriptors();
                drop(opening);
                let mut last = std::time::Instant::now();
                ebbtide_core::release::serve_while(1000, || {
                    // The scan of /proc at most once a second, however often runs are posted.
                    if last.elapsed() < std::time::Duration::from_secs(1) {
                        return true;
                    }
                    last = std::time::Instant::now();
                    !crate::lifetime::alone()
                });
                ebbtide_core::release::set_helper_running(false);
                crate::lifetime::unregister_runtime_thread(me);
            })
    });
    match r {
        Ok(_) => ebbtide_core::release::set_helper_running(true),
        Err(e) => ebbtide_core::error::report(format_args!(
            "ebbtide: cannot start the page release helper ({e}); reclaim gives pages back on the calling thread"
        )),
    }
}

extern "C" fn after_fork_child() {
    // Only atomics and `close` (async-signal-safe). The child has one thread: Release only orders this
    // store before whatever the child does next (it pairs with the AcqRel swap in
    // `ensure_release_helper`).
    HELPER_TRIED.store(false, Ordering::Release);
    crate::lifetime::forget_all_in_child();
    ebbtide_core::release::set_helper_running(false);
    crate::reclaimer::after_fork_child();
    // The parent's sources, epoll set and control socket belong to threads that do not exist
    // here: close them (atomics and `close`, async-signal-safe).
    ebbtide_pressure::libfd::close_all_in_child();
}

pub(crate) fn register_fork_handler() {
    static ONCE: Once = Once::new();
    // The handler only uses atomics and `close` (async-signal-safe).
    ONCE.call_once(|| {
        ebbtide_core::os::atfork_child(after_fork_child);
        // The core's locks across a fork: no thread inside the core while memory is copied.
        ebbtide_core::forkgate::register();
    });
}
