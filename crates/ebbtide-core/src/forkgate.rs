//! The fork gate: what lets a process `fork()` while other threads are inside the core, and
//! leaves the child a core whose locks are all free and whose structures are consistent — what
//! a `malloc` built on the core needs (glibc's own malloc takes its arena locks around `fork`
//! for the same reason).
//!
//! Every path that may take a core lock (the slow and careful paths of allocation and free,
//! zone creation and destruction, every reclaim entry point, snapshots, the release helper's
//! passes) and a runtime's own tables that forks must find whole (a malloc's table of huge
//! blocks) runs inside [`enter`]; the lock-free rseq fast paths do not (a critical section is
//! committed by one store, so the child's copy of memory holds it done or not started).
//! [`prepare`] (before the fork) closes the gate to new entries and waits until no thread is
//! inside; [`parent`] and [`child`] (after it) open it again. The child, whose only thread is
//! the forking one, finds every core lock free: nobody held one when memory was copied.
//!
//! * **Nesting.** Entries nest: a thread already inside (a reclaim run from a slow path, a hook)
//!   passes without waiting, counted by a thread-local depth, so a thread never waits on a fork
//!   that waits on it. The forking thread itself passes a closed gate too (a fork handler run
//!   after ours that allocates): it finishes each entry before `fork` copies memory.
//! * **Sleeping.** A thread that finds the gate closed sleeps on the state word (a futex) until
//!   the fork is over; the forking thread sleeps on the same word until the last thread inside
//!   leaves. Nobody spins.
//! * **stdio before the gate** (glibc bug 19431). glibc's `fork` takes its stdio list lock
//!   after the `pthread_atfork` prepare handlers and its malloc locks after that, because a
//!   thread inside stdio (`getline` growing its buffer, holding its file's lock) may allocate
//!   while a `fflush(NULL)` thread holds the list lock and waits for that file. Our prepare
//!   handler is such a handler: it takes the list lock first (`_IO_list_lock`, recursive, so
//!   glibc's own take after it passes), then closes the gate — the order glibc's malloc uses.
//!   No allocator path takes a stdio lock, so waiting for those inside cannot wait on stdio.
//! * **A fork from inside the core** (a signal handler that interrupted this thread inside the
//!   gate, or a hook): the gate closes but [`prepare`] waits for nobody, since this thread may
//!   hold a lock a thread inside waits on; that child gets what POSIX promises a child forked in
//!   a signal handler.
//! * **Single-threaded processes** (glibc's `__libc_single_threaded`): like glibc's own
//!   `fork`, no lock is taken — nobody else can be inside — so a `fork` from a signal handler
//!   that interrupted a `fork` (POSIX allows it: `fork` is async-signal-safe) does not wait on
//!   the interrupted one.
//!
//! Handlers: every runtime calls [`register`], which registers [`prepare`], [`parent`] and
//! [`child`] with `pthread_atfork` once per process. Registered at load time, before the
//! program's own handlers, they run after those in `prepare` (reverse order) and before them
//! in `parent` and `child`.

use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// Set while a fork is pending; the other bits count threads inside. A real `u32` (not the
/// loom shim's): it is also the futex word every waiter sleeps on.
const CLOSED: u32 = 1 << 31;

static STATE: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// This thread closed the gate for its fork (between `prepare` and `parent`/`child`).
    static FORKING: Cell<bool> = const { Cell::new(false) };
    /// This thread's `prepare` took the locks (the process had other threads), so `parent`
    /// and `child` must give them back.
    static TOOK: Cell<bool> = const { Cell::new(false) };
}

/// Proof of being inside the gate; leaving when dropped.
pub struct Inside(());

/// Enters the gate: sleeps while a fork is pending, unless this thread is already inside or is
/// the one forking. Cheap when open: a thread-local and one compare-and-swap.
#[inline]
pub fn enter() -> Inside {
    let d = DEPTH.with(|d| {
        let v = d.get();
        d.set(v + 1);
        v
    });
    if d == 0 {
        let mut s = STATE.load(Ordering::Relaxed);
        loop {
            if s & CLOSED != 0 && !FORKING.with(|f| f.get()) {
                crate::os::futex_wait_for(&STATE, s, None);
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

/// A process-wide lock of a runtime held inside the gate ([`lock_gated`]): the guard first, then
/// the gate, are released when dropped (fields drop in order).
pub struct Gated<'a, T> {
    guard: crate::sync::MutexGuard<'a, T>,
    _inside: Inside,
}

impl<T> core::ops::Deref for Gated<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> core::ops::DerefMut for Gated<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// Takes `m` (as [`crate::lock`]) inside the gate, so a fork waits until it is free: for a
/// runtime's process-wide lock that a forked child takes again (the reclaimer's tables, the
/// control socket's state, the C API's registries). Taken outside, a child forked while another
/// thread held it inherits it held by a thread it does not have, and its first use waits for
/// ever. Every site of such a lock must use this (one site outside the gate holding it while it
/// allocates could wait on a pending fork that waits on a thread here), and no critical section
/// may wait for another thread (a join) while holding it.
#[inline]
pub fn lock_gated<L: crate::Lock + ?Sized>(m: &L) -> Gated<'_, L::Data> {
    let inside = enter();
    Gated {
        guard: crate::lock(m),
        _inside: inside,
    }
}

/// Leaves the gate (the outermost entry's count).
#[inline]
fn leave() {
    // Release: pairs with the Acquire loads in `prepare`: everything this thread wrote inside
    // (under core locks, now released) is in memory before the fork copies it.
    let prev = STATE.fetch_sub(1, Ordering::Release);
    if prev & CLOSED != 0 {
        // A fork waits for the count to drop (rare: only while one is pending).
        crate::os::futex_wake(&STATE, i32::MAX);
    }
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
            leave();
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
        leave();
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

/// glibc's stdio list lock functions and single-thread flag, looked up once (absent in other C
/// libraries: then no list lock is taken, and the process counts as multi-threaded).
struct Libc {
    list_lock: AtomicPtr<libc::c_void>,
    list_unlock: AtomicPtr<libc::c_void>,
    list_resetlock: AtomicPtr<libc::c_void>,
    single_threaded: AtomicPtr<libc::c_void>,
}

static LIBC: Libc = Libc {
    list_lock: AtomicPtr::new(core::ptr::null_mut()),
    list_unlock: AtomicPtr::new(core::ptr::null_mut()),
    list_resetlock: AtomicPtr::new(core::ptr::null_mut()),
    single_threaded: AtomicPtr::new(core::ptr::null_mut()),
};

/// Looks the C library's symbols up (at registration, outside any fork: `dlsym` may allocate).
fn resolve_libc() {
    let look = |name: &core::ffi::CStr, slot: &AtomicPtr<libc::c_void>| {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name has no preconditions.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        // Relaxed: stored before `pthread_atfork` registers the handlers that read them (the
        // registration is a synchronising library call; the handlers run on later forks).
        slot.store(p, Ordering::Relaxed);
    };
    // The three list-lock functions come together or not at all.
    look(c"_IO_list_lock", &LIBC.list_lock);
    look(c"_IO_list_unlock", &LIBC.list_unlock);
    look(c"_IO_list_resetlock", &LIBC.list_resetlock);
    look(c"__libc_single_threaded", &LIBC.single_threaded);
}

fn call(slot: &AtomicPtr<libc::c_void>) {
    let p = slot.load(Ordering::Relaxed);
    if !p.is_null() {
        // SAFETY: one of glibc's `void _IO_list_*(void)` functions, found by its name.
        unsafe { core::mem::transmute::<*mut libc::c_void, extern "C" fn()>(p)() };
    }
}

/// Whether the process has only ever had one thread (glibc's own test in `fork`); false when
/// the C library does not say.
fn single_threaded() -> bool {
    let p = LIBC.single_threaded.load(Ordering::Relaxed);
    // SAFETY: glibc's `char __libc_single_threaded`, a byte that lives as long as the process.
    // A volatile read: glibc writes it from `pthread_create` on this same thread only.
    !p.is_null() && unsafe { core::ptr::read_volatile(p.cast::<u8>()) } != 0
}

/// Before `fork`: takes the stdio list lock, closes the gate and waits until no thread but this
/// one is inside. In a single-threaded process it does nothing (see the module docs).
pub fn prepare() {
    if single_threaded() {
        TOOK.with(|t| t.set(false));
        return;
    }
    TOOK.with(|t| t.set(true));
    call(&LIBC.list_lock);
    FORKING.with(|f| f.set(true));
    // Acquire: pairs with the Release of `leave`, so what the threads that already left wrote
    // inside the gate is seen here, before the fork copies memory.
    let mut s = STATE.fetch_or(CLOSED, Ordering::Acquire) | CLOSED;
    // A thread inside the gate forks from inside the core: a signal handler that interrupted
    // this thread in an allocation, or a hook. It may hold a core lock another thread inside
    // waits on, so it waits for nobody (waiting deadlocked glibc's `tst-mallocfork2` once the
    // runtime's threads ran): its child gets the core as the interrupted code left it, which
    // is what POSIX promises a child forked from a signal handler (async-signal-safe calls
    // only); the parent is unaffected.
    let inside = DEPTH.with(|d| d.get()) > 0;
    while !inside && s & !CLOSED > 0 {
        crate::os::futex_wait_for(&STATE, s, None);
        // Acquire: pairs with the Release of `leave`: each thread that left while we waited
        // made what it wrote inside the gate visible before the count we read dropped.
        s = STATE.load(Ordering::Acquire);
    }
}

fn open() {
    FORKING.with(|f| f.set(false));
    // Release: pairs with the Acquire of `enter`.
    STATE.fetch_and(!CLOSED, Ordering::Release);
    crate::os::futex_wake(&STATE, i32::MAX);
}

/// After `fork`, in the parent: opens the gate and lets the stdio list lock go.
pub fn parent() {
    if TOOK.with(|t| t.replace(false)) {
        open();
        call(&LIBC.list_unlock);
    }
}

/// After `fork`, in the child: opens the gate. Only this thread exists; the count is what it
/// was at `prepare` (this thread's own entry, if any). The stdio list lock is reset, not
/// unlocked: glibc resets it in a child of a multi-threaded process before this runs.
pub fn child() {
    let mine = DEPTH.with(|d| d.get());
    if TOOK.with(|t| t.replace(false)) {
        FORKING.with(|f| f.set(false));
        // Release: pairs with the Acquire of `enter`. Nobody sleeps here: one thread.
        STATE.store(if mine > 0 { 1 } else { 0 }, Ordering::Release);
        call(&LIBC.list_resetlock);
    }
}

/// Whether this thread is forking: between [`prepare`] and [`parent`] or [`child`] (a fork
/// handler run after ours). A runtime starts no thread here.
pub fn forking() -> bool {
    FORKING.with(|f| f.get())
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
    ONCE.call_once(|| {
        resolve_libc();
        crate::os::atfork(on_prepare, on_parent, on_child)
    });
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
