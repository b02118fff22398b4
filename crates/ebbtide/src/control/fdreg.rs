//! The control server's file descriptors, in a fixed table of atomics, so that a forked child
//! can close them (see [`close_all_in_child`]) without taking a lock or allocating.
//!
//! A child of `fork` has no control thread, yet it inherits the listening socket and every
//! client connection. If it kept them, a client would not see end-of-file when the parent
//! closes its side, and the child could keep the parent's socket alive. The `pthread_atfork`
//! child handler therefore closes every descriptor registered here.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};

/// Listener, wake pipe (two ends) and the connections, with room to spare.
const SLOTS: usize = super::server::MAX_CONNECTIONS + 8;

// An array-repeat initialiser of a const: each element is its own atomic.
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicI32 = AtomicI32::new(-1);
static FDS: [AtomicI32; SLOTS] = [EMPTY; SLOTS];

/// Record `fd` as the server's. If the table is full the descriptor is simply not recorded
/// (a child would then inherit it; never the case with the connection limit above).
pub fn remember(fd: RawFd) {
    for s in &FDS {
        // AcqRel: pairs with the swap in `close_all_in_child` (and the CAS in `forget`): a
        // child that takes the slot sees the descriptor stored here.
        if s.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// Stop tracking `fd` (the caller is about to close it).
pub fn forget(fd: RawFd) {
    for s in &FDS {
        // AcqRel: as in `remember`.
        if s.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// In a freshly forked child: close every recorded descriptor. Async-signal-safe (atomics
/// and `close` only).
pub fn close_all_in_child() {
    for s in &FDS {
        // AcqRel: pairs with the CAS in `remember` (see there).
        let fd = s.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the descriptor was the server's in the parent and is inherited by this
            // child, where no Rust object owns it any more (the objects owning it belong to
            // the control thread, which does not exist here; their memory is leaked, never
            // dropped, see `super::forget_after_fork`).
            unsafe {
                libc::close(fd);
            }
        }
    }
}
