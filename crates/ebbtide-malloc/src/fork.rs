//! `fork()` leaves a working allocator in the child, and a child that reacts to pressure.
//!
//! The allocator itself: the rseq fast paths hold no lock (a section of another thread is
//! committed by one store: the child's copy has it done or not begun); every path that takes a
//! core lock, and every use of the table of huge blocks, is inside the core's fork gate, which
//! the fork waits to empty after taking glibc's stdio list lock (`ebbtide_core::forkgate`); the
//! zone-creation spin lock is reset in the child. In a single-threaded process nothing is
//! taken, as glibc's own `fork` does. The handlers are registered when the library loads
//! ([`register`]).
//!
//! The runtime: a child has none of its parent's threads. The runtime's fork handler only
//! clears atomics (nothing else is allowed in a handler) and arms the lazy start again
//! (`runtime_start.rs`): the child's threads come back at its first allocation slow path once
//! its footprint is past the threshold — in ordinary program context, never in a fork handler
//! or in the signal handler that may have called `fork`. The control socket is not restarted in
//! a child (most children `exec` at once, and a socket file left by each would litter the
//! directory).
//!
//! `fork` itself is interposed ([`fork`]), for one case: a `fork` from a signal handler that
//! interrupted a `fork` of the same thread. Once the runtime's threads run, the process is
//! multi-threaded for glibc, whose `fork` then holds its own fork lock across the handlers and
//! the system call; a second `fork` on that thread waited on it for ever (glibc's
//! `tst-mallocfork2` hung whenever its 35 MB footprint had started the threads), though the
//! program itself has one thread, where glibc's `fork` is async-signal-safe. The nested call
//! is glibc's `_Fork` (async-signal-safe, no fork handlers; POSIX's answer for a fork in a
//! signal handler), and its child then resets what our own child handlers reset. Every other
//! `fork` is glibc's, unchanged.

use core::cell::Cell;
use core::sync::atomic::{AtomicPtr, Ordering};

extern "C" fn child() {
    crate::heap::fork_child();
    crate::runtime_start::rearm_in_child();
}

/// Registers the malloc's child handler, then the core's fork gate, and finds glibc's `_Fork`.
/// Called at load time (`dlsym` may allocate: never inside a fork).
pub fn register() {
    ebbtide_core::os::atfork_child(child);
    ebbtide_core::forkgate::register();
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no preconditions.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_Fork".as_ptr()) };
    // Relaxed: stored at load, before the program's first `fork` (a library call in between).
    UNDERSCORE_FORK.store(f, Ordering::Relaxed);
}

/// glibc's `_Fork` (glibc 2.34 and later), or null.
static UNDERSCORE_FORK: AtomicPtr<libc::c_void> = AtomicPtr::new(core::ptr::null_mut());

thread_local! {
    /// This thread is inside [`fork`] (glibc's, from before its fork handlers to after them).
    static IN_FORK: Cell<bool> = const { Cell::new(false) };
}

extern "C" {
    /// glibc's `fork` under its other exported name (our `fork` interposes the first).
    fn __fork() -> libc::pid_t;
}

/// `fork(2)` as glibc's, except when called on a thread already inside it (from a signal
/// handler that interrupted it): then glibc's `_Fork`, which takes no lock (see the module
/// docs), and in its child our child handlers' resets.
#[no_mangle]
pub extern "C" fn fork() -> libc::pid_t {
    let nested = IN_FORK.with(|f| f.get());
    let underscore = UNDERSCORE_FORK.load(Ordering::Relaxed);
    if nested && !underscore.is_null() {
        // SAFETY: glibc's `pid_t _Fork(void)`, found by its name at load.
        let pid = unsafe {
            core::mem::transmute::<*mut libc::c_void, extern "C" fn() -> libc::pid_t>(underscore)()
        };
        if pid == 0 {
            ebbtide_core::forkgate::child();
            child();
        }
        return pid;
    }
    IN_FORK.with(|f| f.set(true));
    // SAFETY: glibc's fork, no preconditions.
    let pid = unsafe { __fork() };
    IN_FORK.with(|f| f.set(nested));
    pid
}
