//! The page heap's mutex counts its waits (`docs/design/contention.md`): two threads on two
//! CPUs that allocate and free large blocks (page runs of the page heap, under its one mutex
//! with the block table) soon find it held, and the process's statistics say so.

use ebbtide_malloc::api;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[path = "../../../ebbtide-core/tests/support/pin.rs"]
mod pin;
#[path = "../../../ebbtide/tests/support/skip.rs"]
mod skip;

#[test]
fn two_threads_of_large_blocks_wait_for_the_page_heap() {
    let _turn = crate::serial::turn(module_path!());
    if ebbtide_core::os::cpu_count() < 2 {
        skip::skip(
            "two_threads_of_large_blocks_wait_for_the_page_heap",
            "one CPU here: two threads never hold the page heap's mutex at the same time",
        );
        return;
    }
    let before = ebbtide_core::contention::process().page_heap;
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    std::thread::scope(|s| {
        for cpu in 0..2 {
            let stop = &stop;
            s.spawn(move || {
                pin::pin(cpu);
                while !stop.load(Ordering::Relaxed) {
                    // 256 KiB: above the size classes, a run of the page heap.
                    // SAFETY: malloc/free pairs; the block is freed once, unused in between.
                    unsafe {
                        let p = black_box(api::malloc(256 << 10));
                        assert!(!p.is_null());
                        api::free(p);
                    }
                }
            });
        }
        while ebbtide_core::contention::process().page_heap.waits == before.waits
            && start.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let after = ebbtide_core::contention::process().page_heap;
    assert!(
        after.waits > before.waits && after.wait_ns > before.wait_ns,
        "no page heap wait in {:?}: {before:?} -> {after:?}",
        start.elapsed()
    );
    // The statistics read the same counter.
    let g = ebbtide::stats::collect().global;
    assert!(g.lock_waits_page_heap >= after.waits, "{g:?}");
    assert!(g.lock_wait_ns_page_heap >= after.wait_ns, "{g:?}");
}
