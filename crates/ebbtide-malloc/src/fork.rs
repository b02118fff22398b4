//! `fork()` leaves a working allocator in the child, and a child that reacts to pressure.
//!
//! The allocator itself: the rseq fast paths hold no lock (a section interrupted by the fork
//! in another thread simply never committed in the child's copy); the slow paths' locks are
//! taken by the core's fork gate before the fork and let go on both sides after it
//! (`prepare`/`parent`/`child` below, registered with `pthread_atfork` when the library loads).
//!
//! The runtime: a child has none of its parent's threads. The runtime's own fork handler only
//! clears atomics (nothing else is allowed in a handler); the threads come back when `fork`
//! has returned in the child — this library interposes `fork` (as it does `malloc`), calls the C
//! library's, and in the child starts the runtime again ([`ebbtide::start_runtime`]): ordinary
//! program context, never inside an allocation. The control socket is not restarted in a child
//! (most children `exec` at once, and a socket file left by each would litter the directory).

use core::ffi::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};

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
        ebbtide::start_runtime();
    }
    pid
}
