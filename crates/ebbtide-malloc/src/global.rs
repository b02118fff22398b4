//! The Rust global allocator: `#[global_allocator] static A: ebbtide_malloc::EbbtideMalloc =
//! ebbtide_malloc::EbbtideMalloc;` — the same size classes, zones and pressure machinery as the
//! C names. A program that links this crate also gets the C names (its C libraries allocate
//! from the same zones), exactly as if `libebbtide_malloc.so` were preloaded.
//!
//! `dealloc` knows the size: it tries the zone of the size's class first (the zone's O(1) item
//! check proves the block is its), which saves the chunk-map lookup of `free`; a block that is
//! not there (over-aligned, huge) takes the `free` path.

use crate::{classes, heap};
use core::alloc::{GlobalAlloc, Layout};
use ebbtide_core::zone::{FastFree, Raw};
use ebbtide_core::Zone;

/// ebbtide as Rust's global allocator.
#[derive(Clone, Copy, Debug, Default)]
pub struct EbbtideMalloc;

#[inline(always)]
fn plain(l: Layout) -> bool {
    // Class 0 (8 bytes) is 8-aligned, every other class at least 16-aligned.
    l.align() <= 8 || (l.align() <= 16 && l.size() > 8)
}

// SAFETY: every block comes from the heap, is at least `size` bytes and `align`-aligned
// (plain requests by the class table's alignment, others through `alloc_aligned`), and is
// handed back to the heap exactly once by `dealloc`/`realloc`.
unsafe impl GlobalAlloc for EbbtideMalloc {
    #[inline(always)]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if plain(l) {
            heap::alloc(l.size())
        } else {
            heap::alloc_aligned(l.align(), l.size())
        }
    }

    #[inline(always)]
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if plain(l) && l.size() <= heap::SMALL_MAX {
            if let Some(z) = heap::zone_if_created(classes::class_of(l.size())) {
                // SAFETY: p is a live block (GlobalAlloc contract), non-null; the zone is
                // published and never destroyed; its item check rejects a block of another zone
                // without changing anything.
                let how = unsafe { Zone::free_fast_raw::<Raw>(z, p) };
                match how {
                    FastFree::Done => return,
                    FastFree::Invalid => {}
                    // SAFETY: forwarded; `how` is what free_fast_raw returned.
                    _ => return unsafe { heap::free_resume(z, p, how) },
                }
            }
        }
        // SAFETY: forwarded (GlobalAlloc contract).
        unsafe { heap::free(p) }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if plain(l) {
            heap::calloc(1, l.size())
        } else {
            let p = heap::alloc_aligned(l.align(), l.size());
            if !p.is_null() {
                // SAFETY: a fresh block of at least `size` bytes.
                unsafe { core::ptr::write_bytes(p, 0, l.size()) };
            }
            p
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        // SAFETY: the layout with the new size is valid (GlobalAlloc contract).
        let nl = unsafe { Layout::from_size_align_unchecked(n, l.align()) };
        if plain(l) && plain(nl) {
            // SAFETY: forwarded (GlobalAlloc contract).
            return unsafe { heap::realloc(p, n) };
        }
        // SAFETY: a valid layout (above).
        let q = unsafe { self.alloc(nl) };
        if !q.is_null() {
            // SAFETY: both live, distinct, at least min(old, new) bytes.
            unsafe {
                core::ptr::copy_nonoverlapping(p, q, l.size().min(n));
                self.dealloc(p, l);
            }
        }
        q
    }
}
