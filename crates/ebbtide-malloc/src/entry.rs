//! `malloc` and `free`: the fast paths every program calls, in Rust ([`heap::alloc`],
//! [`heap::free`], inlined here), on every target.
//!
//! `free` reads as five functions, top to bottom: this one; [`heap::free`] (the chunk map
//! entry of the pointer, the tag's entry in the tag table); `FastConsts::free_fast` (the one
//! owner/item test and the one push, which says why it missed); `heap::free_missed` (the zone
//! of the tag); the zone's resume (`free_missed` in the core's `zone/fast.rs`), which goes to
//! the invalid-pointer report, the careful path or the slow path without testing the pointer
//! or pushing again. Hand-written assembly entry points were measured against this path and
//! dropped (`docs/design/fast-path.md`).

use crate::heap;
use core::ffi::c_void;

/// `malloc(3)`.
///
/// # Safety
/// None beyond C's: the result is a fresh block or NULL.
#[no_mangle]
pub unsafe extern "C" fn malloc(n: usize) -> *mut c_void {
    heap::alloc(n).cast()
}

/// `free(3)`.
///
/// # Safety
/// `p` is NULL or a live block of this allocator, not used afterwards (anything else is
/// reported and not applied).
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: the caller's guarantee is `heap::free`'s.
    unsafe { heap::free(p.cast()) }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{free as free_sym, malloc as malloc_sym};
    use crate::report::{bad_pointers, tests::BAD_POINTER_TESTS};
    use crate::slowcount::slow;
    use core::ffi::c_void;

    /// The arena's chunk size (`ebbtide_core`'s `arena.rs`): a block's chunk starts at its
    /// address rounded down to it.
    const CHUNK_SIZE: usize = 4 << 20;

    /// `malloc` through a pointer the optimiser cannot see through: called by its name, it is
    /// C's allocation function to the optimiser, which may drop a call whose block is only
    /// tested and freed (it dropped a `malloc(5000)` and its `free`, slow paths and all).
    ///
    /// # Safety
    /// As C's `malloc`.
    unsafe fn malloc(n: usize) -> *mut c_void {
        let f = core::hint::black_box(malloc_sym as unsafe extern "C" fn(usize) -> *mut c_void);
        // SAFETY: `f` is this crate's `malloc`, whose contract (none beyond C's) is this one's.
        unsafe { f(n) }
    }

    /// `free` through a pointer, as [`malloc`].
    ///
    /// # Safety
    /// As C's `free` (anything else is reported and not applied).
    unsafe fn free(p: *mut c_void) {
        let f = core::hint::black_box(free_sym as unsafe extern "C" fn(*mut c_void));
        // SAFETY: `f` is this crate's `free`; `p` as C's `free` requires (the caller's
        // guarantee).
        unsafe { f(p) }
    }

    /// Every live block of the table's sizes is taken by the fast paths of both `free` and
    /// `malloc` (no slow-path call; the next `malloc` of its size gives it back), and every
    /// pointer that is not a block start — inside a block, in its chunk's metadata below the
    /// first slab, outside the arena — leaves the fast path of `free` and is reported as a bad
    /// pointer, not applied.
    #[test]
    fn the_fast_paths_take_every_block_and_refuse_everything_else() {
        let _serial = BAD_POINTER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        // The test thread is the harness's for this test only: pinned until it ends.
        ebbtide_core::os::pin_to_current_cpu();
        if ebbtide_core::pcpu::OFF_FAST.load(core::sync::atomic::Ordering::Relaxed) == 0 {
            // SAFETY: a fresh block, freed at once: the zones of the table exist after it.
            unsafe { free(malloc(8)) };
        }
        let outside = 0u64;
        for size in [1usize, 8, 24, 64, 136, 256, 520, 1000, 1024] {
            let mut live = [core::ptr::null_mut::<c_void>(); 32];
            for b in live.iter_mut() {
                // SAFETY: C's malloc; each block freed once below.
                *b = unsafe { malloc(size) };
                assert!(!b.is_null());
            }
            for &p in &live {
                let before = slow();
                // SAFETY: `p` is a live block, owned here; its size's next malloc gives it back.
                let q = unsafe {
                    free(p);
                    malloc(size)
                };
                assert_eq!(slow(), before, "size {size}: block {p:p} took a slow path");
                assert_eq!(q, p, "size {size}: free pushed {p:p}, malloc gave {q:p}");
            }
            let a = live[0] as usize;
            let block = crate::classes::size(crate::classes::class_of(size));
            let mut bad: Vec<usize> = [1, 7, block / 2, block - 1]
                .into_iter()
                .filter(|d| (1..block).contains(d))
                .map(|d| a + d)
                .collect();
            let o = ebbtide_core::owner_entry(a);
            let chunk = a & !(CHUNK_SIZE - 1);
            for k in [0, 8, 64] {
                if chunk + k < o.start as usize {
                    bad.push(chunk + k);
                }
            }
            bad.push(&outside as *const u64 as usize);
            for &b in &bad {
                let (before, reported) = (slow(), bad_pointers());
                // SAFETY: `b` is not a block start: reported, not applied, nothing touched.
                unsafe { free(b as *mut c_void) };
                assert_eq!(
                    slow().1,
                    before.1 + 1,
                    "size {size}: {b:#x} passed the fast path"
                );
                assert_eq!(
                    bad_pointers(),
                    reported + 1,
                    "size {size}: {b:#x} not reported"
                );
            }
            for &p in &live {
                // SAFETY: live blocks, each freed once (the refused frees changed nothing).
                unsafe { free(p) };
            }
        }
    }

    /// `malloc` above the size table's range takes the class's stack as the table's sizes do;
    /// `free(NULL)` takes its slow path, which does nothing; an immediate double free leaves
    /// `free`'s fast path and is reported.
    #[test]
    fn the_fast_paths_leave_for_the_slow_paths() {
        let _serial = BAD_POINTER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        ebbtide_core::os::pin_to_current_cpu();
        // SAFETY: C's malloc and free: the class of 5000 bytes exists and its stack holds
        // blocks after it.
        unsafe { free(malloc(5000)) };
        let before = slow();
        // SAFETY: C's malloc; freed below.
        let big = unsafe { malloc(5000) };
        assert!(!big.is_null());
        assert_eq!(
            slow().0,
            before.0,
            "5000 bytes: past the table, the class by the formula, then the class's stack"
        );
        let before = slow();
        // SAFETY: free(NULL) does nothing.
        unsafe { free(core::ptr::null_mut()) };
        assert_eq!(slow().1, before.1 + 1, "NULL lies outside the arena");
        // SAFETY: `p` is freed once; its second free is refused.
        unsafe {
            let p = malloc(48);
            free(p);
            let reported = bad_pointers();
            free(p);
            assert_eq!(bad_pointers(), reported + 1, "the double free is reported");
            // Not applied: the block is on the stack once, so two allocations in a row are two
            // blocks (another test's thread on this CPU may take `p` in between, which can only
            // make them differ: the check cannot fail for that).
            let (a, b) = (malloc(48), malloc(48));
            assert_ne!(a, b, "and not applied: the block is on the stack once");
            free(a);
            free(b);
            free(big);
        }
    }
}
