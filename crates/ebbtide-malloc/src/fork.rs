//! `fork()` leaves a working allocator in the child, and a child that reacts to pressure.
//!
//! The allocator itself: the rseq fast paths hold no lock (a section of another thread is
//! committed by one store: the child's copy has it done or not begun); every path that takes a
//! core lock is inside the core's fork gate, which the fork waits to empty
//! (`ebbtide_core::forkgate`); the table of huge blocks is held across the fork; the
//! zone-creation spin lock is reset in the child. The handlers are registered when the library
//! loads ([`register`]).
//!
//! The runtime: a child has none of its parent's threads. The runtime's own fork handler only
//! clears atomics (nothing else is allowed in a handler); the threads come back when `fork`
//! has returned in the child — this library interposes `fork` (as it does `malloc`), calls the C
//! library's, and in the child starts the runtime again ([`ebbtide::restart_after_fork`]): ordinary
//! program context, never inside an allocation. The control socket is not restarted in a child
//! (most children `exec` at once, and a socket file left by each would litter the directory).

use core::ffi::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};

extern "C" fn prepare() {
    crate::huge::fork_prepare();
}

extern "C" fn parent() {
    crate::huge::fork_release();
}

extern "C" fn child() {
    crate::huge::fork_release();
    crate::heap::fork_child();
}

/// Registers the malloc's fork handlers, then the core's fork gate (so the gate's prepare runs
/// first: prepare handlers run in reverse order of registration). Called at load time.
pub fn register() {
    ebbtide_core::os::atfork(prepare, parent, child);
    ebbtide_core::forkgate::register();
}

type ForkFn = unsafe extern "C" fn() -> libc::pid_t;

static REAL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// The C library's `fork` (the next definition after this library's).
pub fn resolve() -> Option<ForkFn> {
    let mut p = REAL.load(Ordering::Acquire);
    if p.is_null() {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no preconditions.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"fork".as_ptr()) };
        if p.is_null() {
            return None;
        }
        // Release: pairs with the Acquire above; the value is a code address.
        REAL.store(p, Ordering::Release);
    }
    // SAFETY: `fork` has this signature.
    Some(unsafe { core::mem::transmute::<*mut c_void, ForkFn>(p) })
}

/// `fork(2)`, interposed: the C library's, then the runtime restarted in the child.
///
/// # Safety
/// As the C library's `fork`.
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let pid = match resolve() {
        // SAFETY: the C library's fork.
        Some(f) => unsafe { f() },
        // SAFETY: a raw fork has no preconditions; without the C library's (a static program
        // has no RTLD_NEXT) its atfork handlers do not run, so say so.
        None => unsafe { libc::syscall(libc::SYS_fork) as libc::pid_t },
    };
    if pid == 0 {
        ebbtide::restart_after_fork();
    }
    pid
}
