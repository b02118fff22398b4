//! Where zone objects live: four to a page.
//!
//! Zone objects ([`ZoneInner`], under 1 KiB) are carved from shared pages in 1 KiB slots
//! ([`pcpu::OBJECT_SLOT`]), so that a zone costs a quarter of a page of resident memory (a
//! malloc has a zone per size class). A destroyed zone's slot goes on a free list for the next
//! zone; the pages stay mapped (counted in the metadata bytes from the moment they are mapped).
//!
//! Each object starts at a multiple of 1 KiB within its page, and the stacks' colours avoid the
//! first two lines of every 1 KiB of a page (`pcpu.rs`, `colour`): the C entry points read a
//! zone's fast-path constants (at the start of its object) right after storing to a CPU's
//! header, and with both at one page offset some processes ran several times slower
//! (docs/design/zone-objects.md).
//!
//! The list is behind a [`SpinLock`] (a few instructions held, no std mutex code in the malloc
//! library's hot text): taken only by zone creation and destruction, both inside the fork gate
//! (`forkgate.rs`), so a forked child never finds it held by a thread that does not exist
//! there.

use super::ZoneInner;
use crate::os::{self, OsError};
use crate::pcpu::OBJECT_SLOT;
use crate::spin::SpinLock;
use core::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};

const _: () = assert!(
    core::mem::size_of::<ZoneInner>() <= OBJECT_SLOT
        && core::mem::align_of::<ZoneInner>() <= OBJECT_SLOT,
    "a zone object must fit its slot"
);

/// The first free slot; each free slot's first word is the next (null at the end). Read and
/// written only under [`LOCK`] (an atomic for `static` storage, Relaxed under the lock).
static FREE: AtomicPtr<u8> = AtomicPtr::new(ptr::null_mut());
static LOCK: SpinLock = SpinLock::new();

/// A slot for a zone object: `OBJECT_SLOT` bytes, `OBJECT_SLOT`-aligned, not in use; zeroed if
/// fresh from the kernel, otherwise whatever the last zone left (the caller writes a whole
/// object).
pub(super) fn take() -> Result<NonNull<ZoneInner>, OsError> {
    let _held = LOCK.lock();
    let mut head = FREE.load(Ordering::Relaxed);
    if head.is_null() {
        let page = os::page_size();
        let mem = os::map(page)?.as_ptr();
        os::add_metadata(page);
        // The page's slots after the first go on the list, lowest first.
        for i in (1..page / OBJECT_SLOT).rev() {
            // SAFETY: slot i lies inside the fresh page; its first word is ours to write.
            unsafe {
                let s = mem.add(i * OBJECT_SLOT);
                s.cast::<*mut u8>().write(head);
                head = s;
            }
        }
        FREE.store(head, Ordering::Relaxed);
        // SAFETY: a fresh mapping is not null.
        return Ok(unsafe { NonNull::new_unchecked(mem.cast()) });
    }
    // SAFETY: a free slot of the list (under the lock); its first word is the next free slot.
    FREE.store(unsafe { head.cast::<*mut u8>().read() }, Ordering::Relaxed);
    // SAFETY: not null (checked above).
    Ok(unsafe { NonNull::new_unchecked(head.cast()) })
}

/// Gives back the slot of a zone object that was dropped in place.
///
/// # Safety
/// `z` came from [`take`], its object is dropped, and nothing uses the slot any more.
pub(super) unsafe fn give(z: *mut ZoneInner) {
    let _held = LOCK.lock();
    let s = z.cast::<u8>();
    // SAFETY: the slot is ours again (caller); its first word links it.
    unsafe { s.cast::<*mut u8>().write(FREE.load(Ordering::Relaxed)) };
    FREE.store(s, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots are aligned and distinct, also after one went back on the list (that a slot given
    /// back is taken again is `tests/all/zone_objects.rs`'s, alone in its turn of the test
    /// binary: here other tests' zones take from the same list).
    #[test]
    fn slots_are_aligned_and_distinct() {
        let a = take().unwrap().as_ptr();
        let b = take().unwrap().as_ptr();
        assert_ne!(a, b);
        for p in [a, b] {
            assert_eq!(p as usize % OBJECT_SLOT, 0, "{p:p}");
        }
        // Given back and taken again (by this test or another thread's zone): the list stays
        // a list of aligned slots.
        // SAFETY: taken above, never written as objects.
        unsafe { give(b) };
        let c = take().unwrap().as_ptr();
        assert_eq!(c as usize % OBJECT_SLOT, 0, "{c:p}");
        assert_ne!(c, a);
        // SAFETY: `a` and `c` were taken from the list above, never written as objects, given once.
        unsafe {
            give(a);
            give(c);
        }
    }
}
