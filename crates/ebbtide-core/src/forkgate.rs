//! The fork gate: what lets a process `fork()` while other threads are inside the core, and
//! leaves the child a core whose locks are all free and whose structures are consistent — what
//! a `malloc` built on the core needs (glibc's own malloc takes its arena locks around `fork`
//! for the same reason).
//!
//! Every path that may take a core lock (the slow and careful paths of allocation and free,
//! zone creation and destruction, every reclaim entry point, snapshots, the release helper's
//! passes) runs inside `enter`; the lock-free rseq fast paths do not (a critical section is
//! committed by one store, so the child's copy of memory holds it done or not started).
//! [`prepare`] (before the fork) closes the gate to new entries and waits until no thread is
//! inside; [`parent`] and [`child`] (after it) open it again. The child, whose only thread is
//! the forking one, finds every core lock free: nobody held one when memory was copied.
//!
//! Entries nest: a thread already inside (a reclaim run from a slow path, a hook) passes
//! without waiting, counted by a thread-local depth, so a thread never waits on a fork that
//! waits on it. A thread that finds the gate closed yields until it opens (forks are rare and
//! short; a futex would be the same at a cost in code).
//!
//! Handlers: every runtime calls [`register`], which registers [`prepare`], [`parent`] and
//! [`child`] with `pthread_atfork` once per process. A runtime's own locks that threads take
//! while inside the gate (a malloc's table of huge blocks) are taken by its prepare handler
//! after the core's (registered before it: prepare handlers run in reverse order).

use crate::sync::{AtomicUsize, Ordering};
use std::cell::Cell;

/// Set while a fork is pending; the other bits count threads inside.
const CLOSED: usize = 1 << (usize::BITS - 1);

static STATE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Proof of being inside the gate; leaving when dropped.
pub(crate) struct Inside(());

/// Enters the gate (waits while a fork is pending, unless this thread is already inside).
#[inline]
pub(crate) fn enter() -> Inside {
    let d = DEPTH.with(|d| {
        let v = d.get();
        d.set(v + 1);
        v
    });
    if d == 0 {
        let mut s = STATE.load(Ordering::Relaxed);
        loop {
            if s & CLOSED != 0 {
                std::thread::yield_now();
                s = STATE.load(Ordering::Relaxed);
                continue;
            }
            // Acquire: pairs with the Release in `open`: what the forking thread did before
            // reopening is seen by whoever enters after.
            match STATE.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => break,
                Err(v) => s = v,
            }
        }
    }
    Inside(())
}

impl Drop for Inside {
    #[inline]
    fn drop(&mut self) {
        let d = DEPTH.with(|d| {
            let v = d.get() - 1;
            d.set(v);
            v
        });
        if d == 0 {
            // Release: pairs with the Acquire loads in `prepare`: everything this thread wrote
            // inside (under core locks, now released) is in memory before the fork copies it.
            STATE.fetch_sub(1, Ordering::Release);
        }
    }
}

/// Leaves the gate for a sleep (a `max_items` allocation waiting for room), entering again when
/// dropped. Only for the outermost entry of a thread (depth 1): a nested sleeper would hold its
/// caller's locks across the fork anyway.
pub(crate) struct Paused(u32);

/// See [`Paused`].
pub(crate) fn pause() -> Paused {
    let d = DEPTH.with(|d| d.replace(0));
    if d > 0 {
        // Release: as in `Inside::drop`.
        STATE.fetch_sub(1, Ordering::Release);
    }
    Paused(d)
}

impl Drop for Paused {
    fn drop(&mut self) {
        if self.0 > 0 {
            let inside = enter();
            core::mem::forget(inside);
            DEPTH.with(|d| d.set(self.0));
        }
    }
}

/// Before `fork`: closes the gate and waits until no thread is inside. Must not be called by a
/// thread that is inside (a fork from a hook run by the core: it would wait for itself).
pub fn prepare() {
    // Acquire: pairs with the Release of `Inside::drop`.
    let s = STATE.fetch_or(CLOSED, Ordering::Acquire);
    debug_assert!(s & CLOSED == 0, "nested fork gate");
    let mine = DEPTH.with(|d| d.get());
    // A thread inside the gate cannot wait for itself: then it counts as one of those inside.
    let allowed = if mine > 0 { 1 } else { 0 };
    while STATE.load(Ordering::Acquire) & !CLOSED > allowed {
        std::thread::yield_now();
    }
}

fn open() {
    // Release: pairs with the Acquire of `enter`.
    STATE.fetch_and(!CLOSED, Ordering::Release);
}

/// After `fork`, in the parent: opens the gate.
pub fn parent() {
    open();
}

/// After `fork`, in the child: opens the gate. Only this thread exists; the count is what it
/// was at `prepare` (this thread's own entry, if any).
pub fn child() {
    let mine = DEPTH.with(|d| d.get());
    STATE.store(if mine > 0 { 1 } else { 0 }, Ordering::Release);
}

extern "C" fn on_prepare() {
    prepare();
}
extern "C" fn on_parent() {
    parent();
}
extern "C" fn on_child() {
    child();
}

/// Registers [`prepare`], [`parent`] and [`child`] with `pthread_atfork`, once per process
/// (every runtime on the core calls it; a second registration would close the gate twice).
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| crate::os::atfork(on_prepare, on_parent, on_child));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn prepare_waits_for_those_inside_and_holds_new_ones_off() {
        let inside = enter();
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let forker = std::thread::spawn(move || {
            prepare();
            d2.store(true, Ordering::SeqCst);
            // A new entry from another thread must wait now.
            let entered = Arc::new(AtomicBool::new(false));
            let e2 = entered.clone();
            let t = std::thread::spawn(move || {
                let _i = enter();
                e2.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(
                !entered.load(Ordering::SeqCst),
                "entered while a fork was pending"
            );
            parent();
            t.join().unwrap();
            assert!(entered.load(Ordering::SeqCst));
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !done.load(Ordering::SeqCst),
            "prepare did not wait for the thread inside"
        );
        // Nested entries do not wait (the fork is pending now).
        {
            let _nested = enter();
        }
        drop(inside);
        forker.join().unwrap();
        assert_eq!(STATE.load(Ordering::SeqCst) & CLOSED, 0);
    }
}
