//! The list of live zones, for reclaim and statistics: an intrusive doubly linked list through
//! the zone objects, behind one mutex. The list knows nothing of zones: an object on it embeds a
//! [`Link`] and says where ([`Linked`]), so the registry sits below the zone layer.
//!
//! Lock order: registry → per-CPU header locks → depot → keg. A reclaim of all zones holds the
//! registry lock for its whole pass, so no zone can be destroyed under it; hooks therefore must
//! not create or destroy zones.

use crate::contention::{Counted, Waits};
use core::ptr;
use std::sync::MutexGuard;

/// The links of one object on the list, guarded by the registry lock.
#[derive(Debug)]
pub(crate) struct Link {
    next: *mut Link,
    prev: *mut Link,
}

impl Link {
    pub(crate) const fn new() -> Link {
        Link {
            next: ptr::null_mut(),
            prev: ptr::null_mut(),
        }
    }
}

/// An object that embeds a [`Link`].
///
/// # Safety
/// `link` and `from_link` must be inverse: `from_link(link(p)) == p` for every live `p`.
pub(crate) unsafe trait Linked {
    /// The object's link.
    fn link(p: *mut Self) -> *mut Link;
    /// The object a link belongs to.
    fn from_link(l: *mut Link) -> *mut Self;
}

struct Reg {
    head: *mut Link,
    count: usize,
}

// SAFETY: the links are only followed with the mutex held, while their objects are live (an
// object unlinks itself under the mutex before it is unmapped).
unsafe impl Send for Reg {}

static REG: Counted<Reg, &Waits> = crate::contention::REGISTRY.mutex(Reg {
    head: ptr::null_mut(),
    count: 0,
});

/// The registry, locked.
pub(crate) struct Locked(MutexGuard<'static, Reg>);

/// Locks the registry.
pub(crate) fn lock() -> Locked {
    Locked(crate::sync::lock(&REG))
}

/// Locks the registry if nobody holds it (this thread included); `None` otherwise.
pub(crate) fn try_lock() -> Option<Locked> {
    crate::sync::try_lock(&REG).map(Locked)
}

/// Puts `z` (live, not on the list) at the head of the list.
pub(crate) fn insert<T: Linked>(z: *mut T) {
    let mut r = lock();
    let r = &mut *r.0;
    let l = T::link(z);
    // SAFETY: `l` is the link of a live object not yet on the list; the head (if any) is the link
    // of a live object; lock held.
    unsafe {
        (*l).prev = ptr::null_mut();
        (*l).next = r.head;
        if !r.head.is_null() {
            (*r.head).prev = l;
        }
    }
    r.head = l;
    r.count += 1;
}

impl Locked {
    /// Unlinks `z` (an object on the list).
    pub(crate) fn unlink<T: Linked>(&mut self, z: *mut T) {
        let r = &mut *self.0;
        let l = T::link(z);
        // SAFETY: `l` is on the list; its neighbours are links of live objects; lock held.
        unsafe {
            if (*l).prev.is_null() {
                r.head = (*l).next;
            } else {
                (*(*l).prev).next = (*l).next;
            }
            if !(*l).next.is_null() {
                (*(*l).next).prev = (*l).prev;
            }
        }
        r.count -= 1;
    }

    /// How many objects are on the list.
    pub(crate) fn count(&self) -> usize {
        self.0.count
    }

    /// Calls `f` on every live object, oldest first (the tail, then back along `prev`).
    /// Every object on the list must be a `T`.
    pub(crate) fn for_each_oldest_first<T: Linked>(&self, mut f: impl FnMut(&T)) {
        let mut l = self.0.head;
        // SAFETY: links on the list belong to live `T`s while the lock (`self`) is held; both
        // loops only follow them.
        unsafe {
            while !l.is_null() && !(*l).next.is_null() {
                l = (*l).next;
            }
            while !l.is_null() {
                f(&*T::from_link(l));
                l = (*l).prev;
            }
        }
    }

    /// Calls `f` on every live object, newest first. Every object on the list must be a `T`
    /// (the core registers zones only).
    pub(crate) fn for_each<T: Linked>(&self, mut f: impl FnMut(&T)) {
        let mut l = self.0.head;
        while !l.is_null() {
            // SAFETY: links on the list belong to live `T`s while the lock is held.
            unsafe {
                f(&*T::from_link(l));
                l = (*l).next;
            }
        }
    }
}
