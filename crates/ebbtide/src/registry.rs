//! The list of live zones, for reclaim and statistics: an intrusive doubly linked list through
//! the zone objects, behind one mutex.
//!
//! Lock order: registry → per-CPU header locks → depot → keg. A reclaim of all zones holds the
//! registry lock for its whole pass, so no zone can be destroyed under it; hooks therefore must
//! not create or destroy zones.

use crate::zone::ZoneInner;
use core::ptr;
use std::sync::{Mutex, MutexGuard};

pub(crate) struct Reg {
    head: *mut ZoneInner,
    count: usize,
}

// SAFETY: the zone pointers are only followed with the mutex held, while the zones are live
// (a zone unlinks itself under the mutex before it is unmapped).
unsafe impl Send for Reg {}

static REG: Mutex<Reg> = Mutex::new(Reg {
    head: ptr::null_mut(),
    count: 0,
});

/// The registry, locked.
pub(crate) struct Locked(MutexGuard<'static, Reg>);

/// Locks the registry.
pub(crate) fn lock() -> Locked {
    Locked(crate::sync::lock(&REG))
}

pub(crate) fn insert(z: *mut ZoneInner) {
    let mut r = lock();
    let r = &mut *r.0;
    // SAFETY: `z` is a live zone not yet on the list; the head (if any) is live; lock held.
    unsafe {
        (*z).reg_prev = ptr::null_mut();
        (*z).reg_next = r.head;
        if !r.head.is_null() {
            (*r.head).reg_prev = z;
        }
    }
    r.head = z;
    r.count += 1;
}

impl Locked {
    /// Unlinks `z` (a zone on the list).
    pub(crate) fn unlink(&mut self, z: *mut ZoneInner) {
        let r = &mut *self.0;
        // SAFETY: `z` is on the list; its neighbours are live zones; lock held.
        unsafe {
            if (*z).reg_prev.is_null() {
                r.head = (*z).reg_next;
            } else {
                (*(*z).reg_prev).reg_next = (*z).reg_next;
            }
            if !(*z).reg_next.is_null() {
                (*(*z).reg_next).reg_prev = (*z).reg_prev;
            }
        }
        r.count -= 1;
    }

    /// Calls `f` on every live zone, newest first.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&ZoneInner)) {
        let mut z = self.0.head;
        while !z.is_null() {
            // SAFETY: zones on the list are live while the lock is held.
            unsafe {
                f(&*z);
                z = (*z).reg_next;
            }
        }
    }
}
