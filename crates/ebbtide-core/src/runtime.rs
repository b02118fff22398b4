//! What the core needs from the runtime above it, passed in.
//!
//! The core knows nothing of pressure sources, options, statistics formats, the control socket
//! or threads. The runtime (the `ebbtide` crate, or a malloc built on the core) installs one
//! [`Hooks`] value at load time; until then, and in a program that links the core alone, every
//! hook is a no-op and every setting has its documented default.
//!
//! | hook / setting | called or read | never from |
//! |---|---|---|
//! | [`Hooks::before_create`] | at the start of [`crate::Zone::new`] (so also of every page pool) | allocation, free, reclaim |
//! | [`Hooks::map_failure`] | after a failed mapping was answered with a DRAIN_CPU | (any path: it must only count) |
//! | [`set_checked_by_default`] | read once per zone creation | |
//! | [`crate::release::set_helper_running`] | read by every release session | |
//! | [`set_abort_on_error`] | read by [`crate::error::misuse_reported`] after every misuse report | |
//!
//! `before_create` is where a runtime reads its configuration and starts its threads: zone
//! creation may allocate and block, allocation may not. The core never starts a thread and
//! never calls the global allocator itself.

use crate::sync::{AtomicBool, Ordering};
use core::sync::atomic::AtomicPtr;

/// The runtime's entry points, called by the core.
pub struct Hooks {
    /// Called at the start of every zone creation, before the zone's settings are read: the
    /// runtime reads its configuration (e.g. [`set_checked_by_default`]) and starts its threads.
    /// May allocate; must not create zones itself.
    pub before_create: fn(),
    /// A mapping failed and the core reclaimed (DRAIN_CPU) before retrying: count it. Called
    /// from allocation paths: must not allocate, block or start anything.
    pub map_failure: fn(),
}

fn nothing() {}

static NONE: Hooks = Hooks {
    before_create: nothing,
    map_failure: nothing,
};

static HOOKS: AtomicPtr<Hooks> = AtomicPtr::new(core::ptr::null_mut());

/// Installs the runtime's hooks (the last installation wins). Cheap and allocation-free: safe
/// to call from a load-time constructor.
pub fn install(h: &'static Hooks) {
    // Release: pairs with the Acquire in `hooks`, so a thread that sees the pointer sees the
    // (immutable, 'static) value behind it.
    HOOKS.store(h as *const Hooks as *mut Hooks, Ordering::Release);
}

fn hooks() -> &'static Hooks {
    // Acquire: pairs with the Release store in `install`.
    let p = HOOKS.load(Ordering::Acquire);
    if p.is_null() {
        &NONE
    } else {
        // SAFETY: only `install` stores here, always a `&'static Hooks`.
        unsafe { &*p }
    }
}

/// Calls [`Hooks::before_create`].
pub(crate) fn before_create() {
    (hooks().before_create)()
}

/// Calls [`Hooks::map_failure`].
pub(crate) fn map_failure() {
    (hooks().map_failure)()
}

static CHECKED_DEFAULT: AtomicBool = AtomicBool::new(false);

/// Whether zones created from now on run in checked mode (the runtime's `checked` tunable).
pub fn checked_by_default() -> bool {
    CHECKED_DEFAULT.load(Ordering::Relaxed)
}

/// Sets the default of checked mode for zones created from now on.
pub fn set_checked_by_default(on: bool) {
    CHECKED_DEFAULT.store(on, Ordering::Relaxed);
}

/// Whether a detected misuse (double free, bad pointer) ends the process with `SIGABRT` (the
/// runtime's `abort_on_error` tunable); the flag lives with the reporting ([`crate::error`]).
pub fn abort_on_error() -> bool {
    crate::error::abort_on_error()
}

/// Sets whether a detected misuse ends the process (see [`abort_on_error`]).
pub fn set_abort_on_error(on: bool) {
    crate::error::set_abort_on_error(on);
}
