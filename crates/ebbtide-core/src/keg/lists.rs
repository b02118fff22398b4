//! The intrusive slab lists (`partial`, `free`, `lazy`, `releasing`, `clean`): doubly linked
//! through the slabs' metadata, every operation under the keg lock.

use super::*;

/// Pushes `s` onto the list at `head`.
///
/// # Safety
/// `s` is a valid meta of this keg on no list, `*head` (when non-null) the valid head of one of
/// its lists, and the caller holds the keg lock.
pub(super) unsafe fn list_push(head: &mut *mut SlabMeta, s: *mut SlabMeta) {
    // SAFETY: `s` and `*head` (when non-null) are valid metas of this keg; the caller holds the
    // keg lock.
    unsafe {
        (*s).prev = ptr::null_mut();
        (*s).next = *head;
        if !(*head).is_null() {
            (**head).prev = s;
        }
    }
    *head = s;
}

/// Takes `s` off the list at `head`.
///
/// # Safety
/// `s` is on the list at `head`, its neighbours are valid metas of this keg, and the caller
/// holds the keg lock.
pub(super) unsafe fn list_remove(head: &mut *mut SlabMeta, s: *mut SlabMeta) {
    // SAFETY: `s` is on the list at `head`; its neighbours are valid metas; keg lock held.
    unsafe {
        if (*s).prev.is_null() {
            debug_assert_eq!(*head, s);
            *head = (*s).next;
        } else {
            (*(*s).prev).next = (*s).next;
        }
        if !(*s).next.is_null() {
            (*(*s).next).prev = (*s).prev;
        }
        (*s).next = ptr::null_mut();
        (*s).prev = ptr::null_mut();
    }
}

impl Keg {
    /// Takes `s` off the lazy list (keeping its tail right).
    ///
    /// # Safety
    /// `s` is on this keg's lazy list; `g` is this keg's locked state.
    pub(super) unsafe fn lazy_remove(&self, g: &mut KegInner, s: *mut SlabMeta) {
        // SAFETY: caller's guarantee: `s` and its neighbours are valid metas of this keg.
        unsafe {
            if g.lazy_tail == s {
                g.lazy_tail = (*s).prev;
            }
            list_remove(&mut g.lazy, s);
        }
        g.nlazy -= 1;
    }
}
