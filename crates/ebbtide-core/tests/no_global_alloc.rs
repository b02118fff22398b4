// A test binary of its own, outside tests/all/: its counting #[global_allocator] is the whole process's.
//! No global allocator on the allocator's paths: a counting `#[global_allocator]` counts the
//! allocations made by threads that armed a thread-local flag. Zones are created unarmed
//! (creation may allocate); then allocation, free, cross-thread free, every reclaim request
//! (per zone and for all zones), the periodic pass, the squeeze window, the "buckets disabled"
//! switch, `validate` (which builds a `String` only on failure) and a sleep at `max_items` run armed
//! and must not allocate at all — including the first use of lazily created state (bucket kegs,
//! the reclaim machinery), since nothing is warmed up before arming.
//!
//! Everything runs in one `#[test]` (the counters are process-wide, and squeeze / buckets
//! disabled are process-wide switches).

use ebbtide_core::{LimitMode, Request, Zone, ZoneFlags, ZoneOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;

static ARMED_ALLOCS: AtomicUsize = AtomicUsize::new(0);
static LAST_SIZE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if ARMED.try_with(|a| a.get()).unwrap_or(false) {
        ARMED_ALLOCS.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: forwards to System; the bookkeeping neither allocates nor touches the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        LAST_SIZE.store(l.size(), Ordering::Relaxed);
        // SAFETY: caller's contract, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note();
        LAST_SIZE.store(l.size(), Ordering::Relaxed);
        // SAFETY: caller's contract, forwarded.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note();
        LAST_SIZE.store(n, Ordering::Relaxed);
        // SAFETY: caller's contract, forwarded.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: caller's contract, forwarded.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` armed and returns how many global allocations this thread made in it.
fn armed<R>(what: &str, f: impl FnOnce() -> R) -> R {
    let before = ARMED_ALLOCS.load(Ordering::SeqCst);
    ARMED.with(|a| a.set(true));
    let r = f();
    ARMED.with(|a| a.set(false));
    let n = ARMED_ALLOCS.load(Ordering::SeqCst) - before;
    assert_eq!(
        n,
        0,
        "{what}: {n} global allocation(s) (last size {})",
        LAST_SIZE.load(Ordering::Relaxed)
    );
    r
}

const N: usize = 2000;

fn churn(z: &Zone, store: &mut [usize]) {
    for s in store.iter_mut() {
        *s = z.alloc().unwrap().as_ptr() as usize;
    }
    for &s in store.iter() {
        // SAFETY: allocated just above, freed once.
        unsafe { z.free(NonNull::new_unchecked(s as *mut u8)).unwrap() };
    }
}

#[test]
fn allocator_paths_never_use_the_global_allocator() {
    let zones = [
        Zone::new(ZoneOptions::new("noalloc-16", 16)).unwrap(),
        Zone::new(ZoneOptions::new("noalloc-4096", 4096)).unwrap(),
        Zone::new(ZoneOptions::new("noalloc-checked", 100).flags(ZoneFlags::CHECKED)).unwrap(),
        Zone::new(ZoneOptions::new("noalloc-nobucket", 48).flags(ZoneFlags::NOBUCKET)).unwrap(),
    ];
    let limited =
        Zone::new(ZoneOptions::new("noalloc-limit", 64).max_items(1, LimitMode::Wait)).unwrap();
    let mut store = vec![0usize; N];

    // The armed probe really counts.
    let before = ARMED_ALLOCS.load(Ordering::SeqCst);
    ARMED.with(|a| a.set(true));
    drop(std::hint::black_box(vec![1u8; 10]));
    ARMED.with(|a| a.set(false));
    assert_eq!(ARMED_ALLOCS.load(Ordering::SeqCst), before + 1);

    for z in &zones {
        armed("alloc/free (first use)", || churn(z, &mut store));
        armed("alloc/free", || churn(z, &mut store));
        for req in [Request::Trim, Request::Drain, Request::DrainCpu] {
            armed("zone.reclaim", || z.reclaim(req));
        }
        armed("periodic", || z.periodic(5_000_000_000));
        // validate builds a String only when it fails.
        let c = armed("validate", || z.validate()).unwrap();
        assert_eq!(c.used, 0);
    }
    for req in [Request::Trim, Request::Drain, Request::DrainCpu] {
        armed("reclaim_all", || ebbtide_core::reclaim::reclaim_all(req));
    }
    armed("set_buckets_enabled(false)", || {
        ebbtide_core::reclaim::set_buckets_enabled(false)
    });
    armed("alloc/free with buckets disabled", || {
        churn(&zones[0], &mut store)
    });
    armed("set_buckets_enabled(true)", || {
        ebbtide_core::reclaim::set_buckets_enabled(true)
    });
    armed("squeeze", || ebbtide_core::reclaim::squeeze(1_000_000));
    armed("alloc/free around a squeeze", || {
        churn(&zones[1], &mut store)
    });

    // Cross-thread frees: one thread allocates, another frees; both armed. The hand-off goes
    // through a preallocated array and atomics, so the test itself allocates nothing armed.
    let ready = AtomicBool::new(false);
    let handed = &mut store[..];
    let handed_ptr = handed.as_mut_ptr() as usize;
    std::thread::scope(|s| {
        let zs = &zones;
        let ready = &ready;
        s.spawn(move || {
            armed("alloc for another thread", || {
                for i in 0..N {
                    let p = zs[i % 2].alloc().unwrap().as_ptr() as usize;
                    // SAFETY: the array has N slots; the freeing thread reads them only after
                    // `ready` (Release/Acquire).
                    unsafe { (handed_ptr as *mut usize).add(i).write(p) };
                }
                ready.store(true, Ordering::Release);
            })
        });
        s.spawn(move || {
            while !ready.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            armed("cross-thread free", || {
                for i in 0..N {
                    // SAFETY: written before `ready`.
                    let p = unsafe { (handed_ptr as *const usize).add(i).read() };
                    // SAFETY: allocated by the other thread from zs[i % 2], freed once.
                    unsafe {
                        zs[i % 2]
                            .free(NonNull::new_unchecked(p as *mut u8))
                            .unwrap()
                    };
                }
                ebbtide_core::reclaim::reclaim_all(Request::DrainCpu);
            })
        });
    });

    // A sleep at max_items: the holder keeps the only item until the sleeper is asleep (seen in
    // the zone's SLEEP counter, read by this unarmed thread), then frees it; the sleeper wakes
    // with it. Both threads armed.
    let held = limited.alloc().unwrap().as_ptr() as usize;
    let sleeper_done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let l = &limited;
        let sd = &sleeper_done;
        let t = s.spawn(move || {
            armed("alloc that sleeps at max_items", || {
                let p = l.alloc().unwrap();
                sd.store(true, Ordering::Release);
                // SAFETY: ours, freed once.
                unsafe { l.free(p).unwrap() };
            })
        });
        while limited.snapshot().sleeps == 0 {
            std::thread::yield_now();
        }
        assert!(
            !sleeper_done.load(Ordering::Acquire),
            "allocated past max_items"
        );
        armed("free that wakes a sleeper", || {
            // SAFETY: allocated above, freed once.
            unsafe {
                limited
                    .free(NonNull::new_unchecked(held as *mut u8))
                    .unwrap()
            }
        });
        t.join().unwrap();
    });
    assert!(sleeper_done.load(Ordering::Acquire));

    for z in &zones {
        assert_eq!(z.validate().unwrap().used, 0);
    }
}
