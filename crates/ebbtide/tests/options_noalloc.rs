// A test binary of its own, outside tests/all/: its counting #[global_allocator] is the whole process's.
//! The readers the allocator uses on hot-ish paths never allocate (and, being single atomic
//! loads, never lock): checked with a counting global allocator.

use ebbtide::options::{self, Tunable, Watcher};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees carry over; the thread-local counter is const-initialised and so
// never allocates itself.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by `System.alloc` with this `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: `ptr`/`layout` come from `System` (see `alloc`); the caller upholds the rest.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocations<R>(f: impl FnOnce() -> R) -> usize {
    let before = ALLOCS.with(Cell::get);
    std::hint::black_box(f());
    ALLOCS.with(Cell::get) - before
}

#[test]
fn readers_do_not_allocate() {
    options::set("squeeze_ms", "12").unwrap();
    let mut w = Watcher::new();
    let n = allocations(|| {
        let mut sum = 0u64;
        for t in Tunable::ALL {
            sum = sum.wrapping_add(options::get_u64(t));
        }
        sum += u64::from(options::get_bool(Tunable::Checked));
        sum += options::get_duration(Tunable::SqueezeMs).as_millis() as u64;
        sum += options::get_duration(Tunable::PsiWindowUs).as_micros() as u64;
        sum += u64::from(options::sources().contains("psi"));
        sum += options::generation();
        sum += options::last_changed(Tunable::SqueezeMs);
        sum += u64::from(w.changed());
        sum += options::snapshot().get(Tunable::SqueezeMs);
        sum
    });
    assert_eq!(n, 0, "a reader allocated");
    // The counter works: the text API allocates.
    assert!(allocations(|| options::get("squeeze_ms").unwrap()) > 0);
}
