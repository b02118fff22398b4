//! The runtime's threads never keep a process alive: when every other thread has ended (a
//! program whose `main` called `pthread_exit`, or a child forked from a worker thread whose
//! thread function returned), they end too, and the C library's last-thread exit ends the
//! process as it would have without them. [`alone`] is asked every `pool_shrink_interval_ms`
//! by the reclaim thread and every second by the release helper and the control thread; each
//! registers itself here.

use ebbtide_pressure::libfd::LibFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

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
    OPENING.store(0, Ordering::Relaxed);
}

/// Records the calling thread as one of the runtime's (in the library's own code for good,
/// [`crate::library_code`]); returns its id.
pub(crate) fn register_runtime_thread() -> i32 {
    crate::library_code::enter_for_good();
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

/// Runtime threads started whose start-up descriptors are not open yet: one per live
/// [`Opening`]. Reset in a forked child ([`forget_all_in_child`]: its holders are threads that do
/// not exist there).
static OPENING: AtomicU32 = AtomicU32::new(0);

/// How long `threads::start_runtime` waits for its threads' descriptors: far above the
/// milliseconds they take; past it the program runs on (only the descriptor numbers are at
/// stake).
const OPENED_WITHIN_MS: u64 = 1000;

/// Held by a starting thread until its start-up descriptors are open; dropping it (also when
/// the spawn failed and the closure holding it was dropped) tells `threads::start_runtime`.
pub(crate) struct Opening(());

impl Opening {
    pub(crate) fn new() -> Opening {
        // AcqRel: ordered before the spawn that moves the token into the thread.
        OPENING.fetch_add(1, Ordering::AcqRel);
        Opening(())
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        // AcqRel: the descriptors opened before are visible to the waiter's Acquire load; the
        // last one out wakes it.
        if OPENING.fetch_sub(1, Ordering::AcqRel) == 1 {
            ebbtide_core::os::futex_wake(&OPENING, i32::MAX);
        }
    }
}

/// Waits until no [`Opening`] is held, for at most [`OPENED_WITHIN_MS`]; a futex wait, no spin.
pub(crate) fn wait_opened() {
    let start = Instant::now();
    let limit = Duration::from_millis(OPENED_WITHIN_MS);
    loop {
        let n = OPENING.load(Ordering::Acquire);
        let spent = start.elapsed();
        if n == 0 || spent >= limit {
            return;
        }
        let left = (limit - spent).as_millis() as u64 + 1;
        ebbtide_core::os::futex_wait_for(&OPENING, n, Some(left));
    }
}

/// Whether every thread of the process but the runtime's has ended (zombies count as ended:
/// a thread-group leader that called `pthread_exit` stays a zombie until the process ends).
/// `false` when it cannot tell (no `/proc`).
///
/// It opens no descriptor in the common case, and never one at the program's lowest free
/// number while it runs (asked every second, a momentary `open` would hand the program
/// descriptor 5 where it expects 3, as CPython's `test_os.test_fd_leak` noticed): the number of
/// threads is the link count of `/proc/self/task`, read with `stat`; only when nothing but
/// the runtime's threads and one more are left is the group leader's state read, from
/// `/proc/self/stat` held open as a library descriptor (`ebbtide_pressure::libfd`).
pub(crate) fn alone() -> bool {
    let Some(threads) = thread_count() else {
        return false;
    };
    // Acquire: pairs with the AcqRel of `register_runtime_thread`.
    let runtime = RUNTIME_TIDS
        .iter()
        .filter(|t| t.load(Ordering::Acquire) != 0)
        .count() as u64;
    // The leader counts until the process ends (also as a zombie): with more threads than the
    // runtime's and the leader, some other thread lives.
    if threads > runtime + 1 {
        return false;
    }
    leader_ended()
}

/// Threads in this process: `/proc/self/task`'s link count is 2 + the number of threads
/// (`proc_task_getattr`). No descriptor is opened.
fn thread_count() -> Option<u64> {
    // SAFETY: `st` is plain old data (all-zero is valid); stat writes only into it and reads a
    // NUL-terminated path literal.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: the path is a NUL-terminated literal and `&mut st` is valid for writes of one `stat`.
    if unsafe { libc::stat(c"/proc/self/task".as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.st_nlink as u64).saturating_sub(2))
}

/// Whether the thread-group leader has ended (zombie or dead), from `/proc/self/stat`, held
/// open ([`with_stat`]): read again with `pread` at offset 0, which makes the kernel generate it
/// anew.
fn leader_ended() -> bool {
    with_stat(|f| {
        let Some(f) = f else {
            return false;
        };
        let mut buf = [0u8; 1024];
        // SAFETY: `buf` is valid for writes of its length; a bad descriptor only fails.
        let n = unsafe { libc::pread(f.raw(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        n > 0 && leader_state_ended(&buf[..n as usize])
    })
}

/// Opens this thread's `/proc/self/stat` now, at the thread's start (`threads.rs`: while the
/// thread that started the runtime waits), so that [`alone`] never opens one later, at a moment
/// the program may be counting on its lowest free descriptor.
pub(crate) fn open_descriptors() {
    with_stat(|_| ());
}

/// Calls `f` with this thread's `/proc/self/stat` descriptor, opened if it is not (or was
/// closed by the program), `None` when it cannot be opened. Each runtime thread holds its own
/// (thread-local): no lock, so nothing a `fork` could copy while held (a forked child's runtime
/// threads are new threads and open their own; the parent's descriptors are closed in the child
/// by the fork handler).
fn with_stat<R>(f: impl FnOnce(Option<&LibFd>) -> R) -> R {
    thread_local! {
        static STAT: std::cell::RefCell<Option<LibFd>> = const { std::cell::RefCell::new(None) };
    }
    STAT.with(|held| {
        let mut held = held.borrow_mut();
        if held.as_ref().is_none_or(|f| f.check().is_err()) {
            // Dropping a lost one closes nothing (see `LibFd`); a new one is opened once.
            // SAFETY: a NUL-terminated path literal; open has no other preconditions.
            let fd = unsafe {
                libc::open(
                    c"/proc/self/stat".as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
            };
            *held = if fd < 0 {
                None
            } else {
                // SAFETY: `fd` was just opened and is owned by nobody else.
                unsafe { LibFd::adopt(fd) }.ok()
            };
        }
        f(held.as_ref())
    })
}

/// Whether a `/proc/PID/stat` line says zombie or dead. The state follows the command name's
/// closing parenthesis (the name may contain parentheses and spaces).
fn leader_state_ended(stat: &[u8]) -> bool {
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    matches!(stat.get(close + 2), Some(b'Z') | Some(b'X'))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_follows_the_last_parenthesis() {
        assert!(leader_state_ended(b"42 (a) b) Z 1 2 3"));
        assert!(leader_state_ended(b"42 (x) X 1"));
        assert!(!leader_state_ended(b"42 (Z) Z) S 1"));
        assert!(!leader_state_ended(b"42 (python3) R 1"));
        assert!(!leader_state_ended(b"garbage"));
    }

    #[test]
    fn this_process_is_not_alone_and_counts_its_threads() {
        assert!(thread_count().expect("/proc") >= 1);
        // This thread and the spawned one, at least (other tests' threads come and go).
        let t = std::thread::spawn(thread_count);
        assert!(t.join().unwrap().unwrap() >= 2);
        assert!(!alone(), "the test's own thread is alive");
        assert!(!leader_ended());
    }
}
