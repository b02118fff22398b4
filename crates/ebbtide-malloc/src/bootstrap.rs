//! Blocks for allocations that re-enter the malloc while it creates a size-class zone on the
//! same thread (a `dlsym` or the C library allocating under us), and for the library's own
//! allocations that the heap cannot serve (an `RLIMIT_AS` reached: `heap.rs`
//! `library_block_or_enomem`, [`ebbtide::LibraryCode`]), which would otherwise end in Rust's
//! abort: a bump allocator over a static buffer, each block with its size in front. Such blocks
//! are never reused; freeing one is accepted and does nothing, `realloc` copies out of it. In
//! practice zone creation makes only system calls and the heap serves the library, so this is
//! a guard that should stay unused (`used_bytes` says).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

const LEN: usize = 256 * 1024;
const HEADER: usize = 16;

#[repr(C, align(4096))]
struct Area(UnsafeCell<[u8; LEN]>);
// SAFETY: disjoint blocks are handed out by an atomic bump pointer; each block is written only
// by its owner.
unsafe impl Sync for Area {}

static AREA: Area = Area(UnsafeCell::new([0; LEN]));
static NEXT: AtomicUsize = AtomicUsize::new(0);

fn base() -> usize {
    AREA.0.get() as usize
}

/// A block of `n` bytes aligned to `align` (≤ 4096), or null when the area is used up.
pub fn alloc(n: usize, align: usize) -> *mut u8 {
    let align = align.max(HEADER);
    let mut cur = NEXT.load(Ordering::Relaxed);
    loop {
        let start = (base() + cur + HEADER).next_multiple_of(align) - base();
        let Some(end) = start.checked_add(n) else {
            return core::ptr::null_mut();
        };
        if end > LEN {
            return core::ptr::null_mut();
        }
        match NEXT.compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {
                let p = (base() + start) as *mut u8;
                // SAFETY: [start - HEADER, end) lies in the area and is ours alone (the bump
                // pointer moved past it); the header is 8-aligned (start is 16-aligned).
                unsafe { p.sub(8).cast::<usize>().write(n) };
                return p;
            }
            Err(c) => cur = c,
        }
    }
}

/// Whether `p` points into the area.
pub fn contains(p: usize) -> bool {
    p.wrapping_sub(base()) < LEN
}

/// The size a block of the area was allocated with.
///
/// # Safety
/// `p` must be a block returned by [`alloc`].
pub unsafe fn size(p: *const u8) -> usize {
    // SAFETY: the header in front of every block (caller's guarantee).
    unsafe { p.sub(8).cast::<usize>().read() }
}

/// Bytes handed out from the area.
pub fn used_bytes() -> usize {
    NEXT.load(Ordering::Relaxed)
}
