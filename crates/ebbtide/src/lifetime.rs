//! The runtime's threads never keep a process alive: when every other thread has ended (a
//! program whose `main` called `pthread_exit`, or a child forked from a worker thread whose
//! thread function returned), they end too, and the C library's last-thread exit ends the
//! process as it would have without them. [`alone`] is asked every `pool_shrink_interval_ms`
//! by the reclaim thread and every second by the release helper; each registers itself here.

use std::sync::atomic::Ordering;

/// Thread ids of the runtime's threads alive in this process (0 = free slot).
static RUNTIME_TIDS: [std::sync::atomic::AtomicI32; 4] =
    [const { std::sync::atomic::AtomicI32::new(0) }; 4];

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// In a forked child (async-signal-safe: atomics only): the parent's runtime threads do not
/// exist here.
pub(crate) fn forget_all_in_child() {
    for t in &RUNTIME_TIDS {
        t.store(0, Ordering::Relaxed);
    }
}

/// Records the calling thread as one of the runtime's; returns its id.
pub(crate) fn register_runtime_thread() -> i32 {
    let me = gettid();
    for t in &RUNTIME_TIDS {
        if t.compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            break;
        }
    }
    me
}

/// Forgets a runtime thread that is ending.
pub(crate) fn unregister_runtime_thread(tid: i32) {
    for t in &RUNTIME_TIDS {
        let _ = t.compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Whether every thread of the process but the runtime's has ended (zombies count as ended:
/// a thread-group leader that called `pthread_exit` stays a zombie until the process ends).
/// `false` when it cannot tell (no `/proc`).
pub(crate) fn alone() -> bool {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<i32>().ok()) else {
            continue;
        };
        // Acquire: pairs with the AcqRel of `register_runtime_thread`.
        if RUNTIME_TIDS
            .iter()
            .any(|t| t.load(Ordering::Acquire) == tid)
        {
            continue;
        }
        match std::fs::read_to_string(e.path().join("stat")) {
            // The state follows the command name's closing parenthesis.
            Ok(st) => match st
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
            {
                Some('Z') | Some('X') => continue,
                _ => return false,
            },
            Err(_) => continue, // ended while we looked
        }
    }
    true
}

/// Runs `f` (a thread spawn) with every signal blocked on the calling thread, so the thread it
/// starts inherits a full mask: signals are the program's, and a signal the program blocks on
/// its own threads must stay pending for it (`sigwait`, `sigpending`) instead of being
/// delivered to — and killing the process from — a runtime thread. The caller's mask is put
/// back before returning. jemalloc's background threads do the same.
pub(crate) fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: sigfillset and pthread_sigmask on sigset_t values on this stack; the old mask is
    // restored on the same thread below.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        r
    }
}
