//! `ebb_zone_alloc` and `ebb_zone_free`: the C API's fast paths, in Rust on every target.
//!
//! A handle with its bit set ([`fast_handle`]) is a live zone that is not careful: its fast
//! paths are the core's one fast path for the [`Plain`] caller (no careful test, the stacks'
//! base read inside the critical section). A careful or NULL zone goes to
//! `zone_alloc_guarded` / `zone_free_guarded`, which do the whole operation under the unwind
//! guard; a fast path that misses (an empty or full stack, a pointer that fails the item test,
//! the duplicate of the stack's top) goes to `zone_alloc_guarded` / `zone_free_missed`, the
//! latter resuming the free from the fast path's answer without testing again. The fast paths never panic,
//! run no hook and take no lock, so they need no guard. Hand-written assembly entry points
//! were measured against this path and dropped (`docs/design/fast-path.md`).

use crate::{fast_handle, zone_alloc_guarded, zone_free_guarded, zone_free_missed, EbbZone, FAST};
use core::ffi::c_void;
use ebbtide::zone::{FastFree, Plain};
use ebbtide::Zone;

/// The zone object of a handle whose bit 0 is set ([`fast_handle`]): minus one, which the
/// compiler folds into the displacements of the fields' loads.
#[inline(always)]
fn fast_zone_ptr(h: *const EbbZone) -> *mut c_void {
    (h as usize).wrapping_sub(FAST) as *mut c_void
}

/// Allocates one item. NULL with errno: ENOMEM (no memory, or the zone's limit reached in
/// `EBB_LIMIT_FAIL` mode), ECANCELED (an init or ctor hook refused the item), EINVAL (NULL
/// zone), EIO (internal error).
///
/// # Safety
/// `zone` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ebb_zone_alloc(zone: *mut EbbZone) -> *mut c_void {
    if fast_handle(zone) {
        // SAFETY: a live zone (caller's guarantee), not careful (the handle's bit is set only
        // for such a zone, `create`).
        if let Ok(p) = unsafe { Zone::alloc_fast_raw::<Plain>(fast_zone_ptr(zone)) } {
            return p.as_ptr().cast();
        }
    }
    // SAFETY: `zone` is NULL or a live handle (the caller's guarantee), as the guarded path
    // requires; the fast path changed nothing.
    unsafe { zone_alloc_guarded(zone) }
}

/// Frees an item. `item` NULL does nothing. An invalid free (not an item of this zone, not
/// at an item's start, a double free caught in checked mode) is printed on stderr, counted
/// and not applied; errno is set to EINVAL.
///
/// # Safety
/// `zone` is NULL or a live handle; if `item` is an item of `zone`, the caller owns it.
#[no_mangle]
pub unsafe extern "C" fn ebb_zone_free(zone: *mut EbbZone, item: *mut c_void) {
    if fast_handle(zone) {
        // SAFETY: a live zone (caller's guarantee), not careful (the handle's bit); the fast
        // path tests the pointer without touching it (NULL fails its owner test) and cannot
        // panic.
        let how = unsafe { Zone::free_fast_raw::<Plain>(fast_zone_ptr(zone), item.cast()) };
        if how != FastFree::Done {
            // SAFETY: `zone` is a live handle and `item` as the caller guarantees it; `how` is
            // what the zone's fast path just returned for `item`.
            unsafe { zone_free_missed(zone, item, how) };
        }
        return;
    }
    // SAFETY: `zone` and `item` as the caller guarantees them, which is the guarded path's
    // contract.
    unsafe { zone_free_guarded(zone, item) }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::tests::INVALID_FREES_TESTS;
    use crate::{
        ebb_invalid_frees, ebb_zone_alloc, ebb_zone_create, ebb_zone_destroy, ebb_zone_free,
        fast_handle, EbbZone,
    };
    use core::ffi::c_void;
    use core::sync::atomic::{AtomicU64, Ordering};

    thread_local! {
        /// This thread's calls of the slow paths (`zone_alloc_guarded`, `zone_free_guarded`):
        /// how a test sees whether the entry points' fast paths took a call.
        ///
        /// Atomics, though each is this thread's: the optimiser does not see the assembly's
        /// jumps to the slow paths that count, and it keeps no atomic's value across a call.
        static SLOW: [AtomicU64; 2] = const { [AtomicU64::new(0), AtomicU64::new(0)] };
    }

    pub(crate) fn count_slow_alloc() {
        SLOW.with(|c| c[0].fetch_add(1, Ordering::Relaxed));
    }

    pub(crate) fn count_slow_free() {
        SLOW.with(|c| c[1].fetch_add(1, Ordering::Relaxed));
    }

    fn slow() -> (u64, u64) {
        SLOW.with(|c| (c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed)))
    }

    /// Every live item is taken by the fast paths of both entry points (its free pushes it
    /// without the slow path, the next allocation pops it back); every pointer that is not an
    /// item start of the zone — inside an item, in the chunk's metadata below its first slab,
    /// another zone's item, outside the arena — is refused by the fast path, then reported as
    /// an invalid free by the slow path and not applied. Item sizes with and without a power of
    /// two, a slab tail and several items per cache line.
    #[test]
    fn the_fast_paths_take_every_item_and_refuse_everything_else() {
        let _serial = INVALID_FREES_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // The test thread is the harness's for this test only: pinned until it ends.
        ebbtide_core::os::pin_to_current_cpu();
        // SAFETY: a valid name; the zone is destroyed at the end.
        let other = unsafe { ebb_zone_create(c"entry-other".as_ptr(), 64, 0, 0) };
        assert!(!other.is_null());
        // SAFETY: a live zone.
        let foreign = unsafe { ebb_zone_alloc(other) };
        assert!(!foreign.is_null());
        let outside = Box::new(0u64);
        for size in [8usize, 24, 48, 64, 96, 256, 1000, 4096, 5000] {
            let name = std::ffi::CString::new(format!("entry-{size}")).unwrap();
            // SAFETY: a valid name; the zone is used by this thread only and destroyed below.
            let z = unsafe { ebb_zone_create(name.as_ptr(), size, 0, 0) };
            assert!(!z.is_null());
            if !fast_handle(z) {
                eprintln!("entry: rseq unavailable, zones take the slow paths; skipped");
                // SAFETY: a live zone with no items out.
                unsafe { ebb_zone_destroy(z) };
                break;
            }
            // SAFETY: a live zone; every item allocated here is freed once below.
            let live: Vec<*mut c_void> = (0..32).map(|_| unsafe { ebb_zone_alloc(z) }).collect();
            assert!(live.iter().all(|p| !p.is_null()));
            for &p in &live {
                let before = slow();
                // SAFETY: `p` is a live item of `z`, owned here; popped back at once.
                let q = unsafe {
                    ebb_zone_free(z, p);
                    ebb_zone_alloc(z)
                };
                assert_eq!(slow(), before, "size {size}: item {p:p} took a slow path");
                assert_eq!(
                    q, p,
                    "size {size}: the free pushed {p:p}, the pop gave {q:p}"
                );
            }
            let mut bad: Vec<*mut c_void> = Vec::new();
            for &p in &live[..4] {
                let a = p as usize;
                let inside = (1..size.min(64)).chain([size / 2, size - 8, size - 1]);
                for d in inside.filter(|d| (1..size).contains(d)) {
                    bad.push((a + d) as *mut c_void);
                }
                let o = ebbtide_core::owner_entry(a);
                let chunk = a & !((4usize << 20) - 1); // the arena's 4 MiB chunks
                assert!(o.start as usize >= chunk && o.start as usize <= a);
                for k in [0, 8, 64, 4096] {
                    if chunk + k < o.start as usize {
                        bad.push((chunk + k) as *mut c_void);
                    }
                }
            }
            bad.push(foreign);
            bad.push(&*outside as *const u64 as *mut c_void);
            bad.push(8 as *mut c_void);
            for &b in &bad {
                let (before, invalid) = (slow(), ebb_invalid_frees());
                // SAFETY: `b` is not an item of `z`: the free is refused, nothing is touched.
                unsafe { ebb_zone_free(z, b) };
                assert_eq!(
                    slow().1,
                    before.1 + 1,
                    "size {size}: {b:p} passed the fast path"
                );
                assert_eq!(
                    ebb_invalid_frees(),
                    invalid + 1,
                    "size {size}: {b:p} not reported"
                );
            }
            // Nothing refused was applied: the live items are still the zone's, and free.
            for &p in &live {
                // SAFETY: live items of `z`, each freed once.
                unsafe { ebb_zone_free(z, p) };
            }
            // SAFETY: every item is back.
            assert_eq!(unsafe { ebb_zone_destroy(z) }, 0, "size {size}");
        }
        // SAFETY: the foreign item is still `other`'s (its refused free changed nothing).
        unsafe {
            ebb_zone_free(other, foreign);
            assert_eq!(ebb_zone_destroy(other), 0);
        }
    }

    /// The allocation's fast path leaves for the slow path, arguments intact, where the stack
    /// is empty, and the free's where the popped item is freed twice in a row (the stack's top).
    #[test]
    fn the_fast_paths_leave_for_the_slow_paths_with_their_arguments() {
        let _serial = INVALID_FREES_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // The test thread is the harness's for this test only: pinned until it ends.
        ebbtide_core::os::pin_to_current_cpu();
        // SAFETY: a valid name; the zone is used by this thread only and destroyed below.
        let z: *mut EbbZone = unsafe { ebb_zone_create(c"entry-leave".as_ptr(), 128, 0, 0) };
        assert!(!z.is_null());
        if !fast_handle(z) {
            eprintln!("entry: rseq unavailable, zones take the slow paths; skipped");
            // SAFETY: a live zone with no items out.
            unsafe { ebb_zone_destroy(z) };
            return;
        }
        // The first allocation finds an empty stack: the slow path fills it and returns an item.
        let before = slow();
        // SAFETY: a live zone.
        let p = unsafe { ebb_zone_alloc(z) };
        assert!(!p.is_null());
        assert_eq!(
            slow().0,
            before.0 + 1,
            "a fresh zone's first allocation is slow"
        );
        // An immediate double free: the fast path sees the stack's top and leaves; the slow
        // path reports it and does not apply it.
        let invalid = ebb_invalid_frees();
        // SAFETY: `p` is owned here; its second free is refused.
        unsafe {
            ebb_zone_free(z, p);
            ebb_zone_free(z, p);
        }
        assert_eq!(
            ebb_invalid_frees(),
            invalid + 1,
            "the double free is reported"
        );
        // SAFETY: `p` is on the stack once: allocated again, freed again.
        unsafe {
            let q = ebb_zone_alloc(z);
            assert_eq!(q, p);
            ebb_zone_free(z, q);
            assert_eq!(ebb_zone_destroy(z), 0);
        }
    }
}
