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
//! or in the signal handler that may have called `fork`. `fork` is not interposed. The control
//! socket is not restarted in a child (most children `exec` at once, and a socket file left by
//! each would litter the directory).

extern "C" fn child() {
    crate::heap::fork_child();
    crate::runtime_start::rearm_in_child();
}

/// Registers the malloc's child handler, then the core's fork gate. Called at load time.
pub fn register() {
    ebbtide_core::os::atfork_child(child);
    ebbtide_core::forkgate::register();
}
