//! Low-memory handlers (UMA's `vm_lowmem` event): registered by the application, run before
//! the allocator reclaims, with no allocator lock held.

use super::*;

pub(super) const MAX_HANDLERS: usize = 16;

/// A low-memory handler with the C ABI: called with the level (0..=3) and its argument.
pub type LowmemHandler = unsafe extern "C" fn(level: core::ffi::c_int, arg: *mut core::ffi::c_void);

#[derive(Clone, Copy)]
pub(super) struct Handler {
    f: Option<LowmemHandler>,
    rust: Option<fn(Level)>,
    arg: usize,
}

pub(super) static HANDLERS: Mutex<[Handler; MAX_HANDLERS]> = Mutex::new(
    [Handler {
        f: None,
        rust: None,
        arg: 0,
    }; MAX_HANDLERS],
);

/// Identifies a registered handler (for [`unregister_lowmem_handler_c`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandlerId(usize);

/// Registers a low-memory handler (UMA's `vm_lowmem` event): called with the new level before
/// the allocator reclaims, on the reclaim thread (or the thread calling [`notify`] when there is
/// no reclaim thread). No allocator lock is held while it runs: it may allocate and free, but must
/// not create or destroy zones and should return quickly. At most 16; `false` when full.
pub fn register_lowmem_handler(f: fn(Level)) -> bool {
    add_handler(Handler {
        f: None,
        rust: Some(f),
        arg: 0,
    })
    .is_some()
}

/// Removes a handler registered before; returns whether it was found.
pub fn unregister_lowmem_handler(f: fn(Level)) -> bool {
    let mut hs = lock_gated(&HANDLERS);
    for h in hs.iter_mut() {
        if h.rust.is_some_and(|g| g as usize == f as usize) {
            *h = Handler {
                f: None,
                rust: None,
                arg: 0,
            };
            return true;
        }
    }
    false
}

/// The C form of [`register_lowmem_handler`]: `f(level, arg)`. `None` when 16 are registered.
pub fn register_lowmem_handler_c(
    f: LowmemHandler,
    arg: *mut core::ffi::c_void,
) -> Option<HandlerId> {
    add_handler(Handler {
        f: Some(f),
        rust: None,
        arg: arg as usize,
    })
}

/// Removes a handler registered with [`register_lowmem_handler_c`].
pub fn unregister_lowmem_handler_c(id: HandlerId) -> bool {
    let mut hs = lock_gated(&HANDLERS);
    match hs.get_mut(id.0) {
        Some(h) if h.f.is_some() => {
            *h = Handler {
                f: None,
                rust: None,
                arg: 0,
            };
            true
        }
        _ => false,
    }
}

pub(super) fn add_handler(new: Handler) -> Option<HandlerId> {
    let mut hs = lock_gated(&HANDLERS);
    let i = hs.iter().position(|h| h.f.is_none() && h.rust.is_none())?;
    hs[i] = new;
    Some(HandlerId(i))
}

pub(super) fn run_handlers(level: Level) {
    // Copy out so no lock is held while handlers run (they may register or unregister).
    let hs = *lock_gated(&HANDLERS);
    for h in hs {
        if let Some(f) = h.rust {
            f(level);
        }
        if let Some(f) = h.f {
            // SAFETY: the registrant vouches that `f` may be called with `arg` from the reclaim
            // thread (documented on register_lowmem_handler_c).
            unsafe { f(level as core::ffi::c_int, h.arg as *mut core::ffi::c_void) };
        }
    }
}
