//! Buckets: arrays of free item pointers that move between the per-CPU caches and the depot.
//!
//! Bucket objects are themselves allocated from internal kegs (one per capacity class), so
//! bucket memory comes from the allocator's own pages, never from the global allocator.
//!
//! The size table is UMA's `bucket_select`: the starting (and minimum) bucket size of a zone
//! from its item size; contention grows it up to [`BUCKET_MAX`].

use crate::disposal::Disposal;
use crate::keg::Keg;
use crate::os::OsError;
use crate::release::Session;
use core::ptr::{self, NonNull};
use std::sync::OnceLock;

/// The largest bucket, in items.
pub const BUCKET_MAX: u32 = 254;

/// Capacity classes of bucket objects.
const CLASSES: [u32; 9] = [1, 2, 4, 8, 16, 30, 62, 126, 254];

/// A bucket: header, then `cap` item pointers.
#[repr(C)]
pub(crate) struct Bucket {
    pub(crate) next: *mut Bucket,
    pub(crate) prev: *mut Bucket,
    pub(crate) count: u32,
    pub(crate) cap: u32,
    /// The CPU whose stack filled it ([`NO_CPU`]: none), so that the depot can tell a bucket
    /// that moves items between CPUs (statistics: a zone's remote frees).
    pub(crate) cpu: u32,
}

/// [`Bucket::cpu`] of a bucket no CPU's stack filled.
pub(crate) const NO_CPU: u32 = u32::MAX;
const HEADER: usize = core::mem::size_of::<Bucket>();

/// UMA's bucket size for an item size, with one change above a page.
///
/// Up to a page the table is UMA's: a bucket holds 8–16 KiB of items. Above a page UMA's bucket
/// holds one item, so a stack at its floor (two items) would miss on every other operation.
/// Items above a page up to 16 KiB get buckets of about 16 KiB of items, at least two (4.6 KiB:
/// 3; 8–16 KiB: 2), as tcmalloc moves at least two objects per transfer
/// (docs/design/bucket-sizes.md). Above 16 KiB a bucket stays one item, so the floor of a CPU's
/// stack (two buckets) stays two items.
pub fn bucket_size_for(item_size: usize) -> u32 {
    match item_size {
        0..=64 => 254,
        65..=128 => 126,
        129..=256 => 62,
        257..=512 => 30,
        513..=1024 => 16,
        1025..=2048 => 8,
        2049..=3072 => 4,
        3073..=4096 => 2,
        4097..=16384 => ((16384 / item_size) as u32).max(2),
        _ => 1,
    }
}

static KEGS: OnceLock<Result<[Keg; 9], OsError>> = OnceLock::new();

fn kegs() -> Result<&'static [Keg; 9], OsError> {
    let r = KEGS.get_or_init(|| {
        let mk = |cap: u32| Keg::new(HEADER + 8 * cap as usize, 0);
        Ok([
            mk(1)?,
            mk(2)?,
            mk(4)?,
            mk(8)?,
            mk(16)?,
            mk(30)?,
            mk(62)?,
            mk(126)?,
            mk(254)?,
        ])
    });
    match r {
        Ok(k) => Ok(k),
        Err(e) => Err(*e),
    }
}

fn class_of(cap: u32) -> usize {
    CLASSES
        .iter()
        .position(|&c| c >= cap)
        .unwrap_or(CLASSES.len() - 1)
}

impl Bucket {
    /// An empty bucket holding at least `cap` items (at most [`BUCKET_MAX`]).
    pub(crate) fn alloc(cap: u32) -> Option<NonNull<Bucket>> {
        let ks = kegs().ok()?;
        let c = class_of(cap.min(BUCKET_MAX));
        let mut p = [ptr::null_mut()];
        ks[c].import(&mut p).ok()?;
        let b = p[0] as *mut Bucket;
        // SAFETY: `b` is a fresh item of HEADER + 8*CLASSES[c] bytes from the bucket keg,
        // suitably aligned (keg items are 8-aligned).
        unsafe {
            b.write(Bucket {
                next: ptr::null_mut(),
                prev: ptr::null_mut(),
                count: 0,
                cap: CLASSES[c],
                cpu: NO_CPU,
            });
            Some(NonNull::new_unchecked(b))
        }
    }

    /// Returns an (emptied) bucket object to its keg.
    ///
    /// # Safety
    /// `b` must come from [`Bucket::alloc`] and not be used afterwards.
    pub(crate) unsafe fn free(b: NonNull<Bucket>) {
        // SAFETY: the caller guarantees `b` is a live bucket.
        let cap = unsafe { (*b.as_ptr()).cap };
        if let Ok(ks) = kegs() {
            ks[class_of(cap)].take_back(
                &[b.as_ptr().cast()],
                &mut Disposal::keep(),
                None::<fn(*mut u8)>,
                |p, k| {
                    panic!(
                        "internal error: bucket {p:?} rejected by its keg: {}",
                        k.describe()
                    )
                },
            );
        }
    }

    /// The item slots of a bucket.
    ///
    /// # Safety
    /// `b` must be a live bucket; the slice must not outlive it or alias another borrow.
    #[inline]
    pub(crate) unsafe fn slots<'a>(b: NonNull<Bucket>) -> &'a mut [*mut u8] {
        // SAFETY: the slots follow the header inside the bucket object (caller's guarantee).
        unsafe {
            let cap = (*b.as_ptr()).cap as usize;
            core::slice::from_raw_parts_mut((b.as_ptr() as *mut u8).add(HEADER).cast(), cap)
        }
    }
}

/// Releases the pages of every free bucket slab: through `sess` when it is active (bytes counted
/// when it completes), else at once (returned). Bucket slabs never go into the lazy decay: they
/// are shared by every zone, and a periodic pass or a reclaim wants them gone.
pub(crate) fn release_bucket_kegs(sess: &mut Session) -> usize {
    match KEGS.get() {
        Some(Ok(ks)) => ks
            .iter()
            .map(|k| k.release_free(0, &mut Disposal::reclaim(&mut *sess, false)))
            .sum(),
        _ => 0,
    }
}

/// The bucket kegs' empty chunks back to the arena, unmapped (`Keg::unmap_empty_chunks`, after a
/// refused mapping). Returns the bytes of address space unmapped.
pub(crate) fn unmap_empty_bucket_chunks() -> usize {
    match KEGS.get() {
        Some(Ok(ks)) => ks.iter().map(|k| k.unmap_empty_chunks()).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_uma_up_to_a_page_and_pairs_up_to_16_kib() {
        assert_eq!(bucket_size_for(16), 254);
        assert_eq!(bucket_size_for(64), 254);
        assert_eq!(bucket_size_for(128), 126);
        assert_eq!(bucket_size_for(256), 62);
        assert_eq!(bucket_size_for(512), 30);
        assert_eq!(bucket_size_for(1024), 16);
        assert_eq!(bucket_size_for(2048), 8);
        assert_eq!(bucket_size_for(3072), 4);
        assert_eq!(bucket_size_for(4096), 2);
        assert_eq!(bucket_size_for(4608), 3);
        assert_eq!(bucket_size_for(8192), 2);
        assert_eq!(bucket_size_for(16384), 2);
        assert_eq!(bucket_size_for(16385), 1);
        assert_eq!(bucket_size_for(5000), 3);
        assert_eq!(bucket_size_for(1 << 20), 1);
    }

    #[test]
    fn buckets_come_from_their_class() {
        for want in [1, 3, 16, 17, 254, 300] {
            let b = Bucket::alloc(want).unwrap();
            // SAFETY: `b` is live and used only here.
            unsafe {
                let s = Bucket::slots(b);
                assert!(s.len() as u32 >= want.min(BUCKET_MAX));
                s.fill(ptr::null_mut());
                Bucket::free(b);
            }
        }
    }
}
