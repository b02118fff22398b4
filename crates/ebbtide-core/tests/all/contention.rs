//! Contention that explains itself (`docs/design/contention.md`): a thread that finds a zone's
//! lock held counts a wait and the time it blocked; a thread alone counts nothing; items freed
//! on one CPU and taken by another through the depot count as remote frees.

use ebbtide_core::{os, Zone, ZoneFlags, ZoneOptions};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[path = "../support/pin.rs"]
mod pin;
#[path = "../../../ebbtide/tests/support/skip.rs"]
mod skip;

/// Set by the test before a free: the next `fini` holds the keg lock for [`HOLD`].
static ARMED: AtomicBool = AtomicBool::new(false);
/// Set by `fini` once it holds the keg lock.
static IN_FINI: AtomicBool = AtomicBool::new(false);
const HOLD: Duration = Duration::from_millis(50);

/// Runs with the keg lock held (the core's hook contract): when armed, keeps it for `HOLD`.
unsafe extern "C" fn slow_fini(_item: *mut c_void, _size: usize, _arg: *mut c_void) {
    if ARMED.swap(false, Ordering::SeqCst) {
        IN_FINI.store(true, Ordering::SeqCst);
        std::thread::sleep(HOLD);
    }
}

/// One thread frees into the slabs and keeps the keg lock 50 ms inside `fini`; the test's
/// thread allocates meanwhile and blocks on it: the keg counts that wait, about 50 ms of it.
#[test]
fn a_thread_blocked_on_the_keg_lock_is_counted() {
    let _turn = crate::serial::turn(module_path!());
    // NOBUCKET: every free and allocation goes to the slabs, under the keg lock.
    let z = Zone::new(
        ZoneOptions::new("contention-keg", 64)
            .flags(ZoneFlags::NOBUCKET)
            .hooks(None, Some(slow_fini), None, None, std::ptr::null_mut()),
    )
    .unwrap();
    assert_eq!(
        z.snapshot().keg_waits.waits,
        0,
        "a fresh zone has waited for nothing"
    );
    // A loaded machine may run the allocation only after the holder let go: try a few times.
    let mut tries = 0;
    let mut held = Vec::new();
    while z.snapshot().keg_waits.waits == 0 && tries < 10 {
        tries += 1;
        let p = z.alloc().unwrap();
        IN_FINI.store(false, Ordering::SeqCst);
        ARMED.store(true, Ordering::SeqCst);
        let addr = p.as_ptr() as usize;
        std::thread::scope(|s| {
            let zr = &z;
            let holder = s.spawn(move || {
                // SAFETY: an item of this zone, freed once.
                unsafe { zr.free(std::ptr::NonNull::new(addr as *mut u8).unwrap()) }.unwrap()
            });
            let deadline = Instant::now() + Duration::from_secs(10);
            while !IN_FINI.load(Ordering::SeqCst) {
                assert!(Instant::now() < deadline, "fini never ran");
                std::thread::yield_now();
            }
            // The holder is inside fini, under the keg lock: this import waits for it.
            held.push(z.alloc().unwrap());
            holder.join().unwrap();
        });
    }
    let s = z.snapshot();
    assert!(
        s.keg_waits.waits >= 1,
        "{tries} tries, no wait counted: {:?}",
        s.keg_waits
    );
    assert!(
        s.keg_waits.wait_ns >= 5_000_000,
        "the wait lasted about {HOLD:?}: {:?}",
        s.keg_waits
    );
    assert_eq!(s.depot_waits.waits, 0, "NOBUCKET: no depot in use");
    for p in held {
        // SAFETY: items of this zone, freed once.
        unsafe { z.free(p) }.unwrap();
    }
}

/// Two threads on two CPUs hammer one zone with buckets of one item, each holding 2,000 items
/// at a time, more than a CPU's stack may ever hold (its storage): every round goes to the
/// depot hundreds of times on each CPU, and within a few seconds one thread finds it held.
#[test]
fn two_threads_on_a_tiny_cache_wait_for_the_depot() {
    let _turn = crate::serial::turn(module_path!());
    if os::cpu_count() < 2 {
        skip::skip(
            "two_threads_on_a_tiny_cache_wait_for_the_depot",
            "one CPU here: two threads never hold the depot lock at the same time",
        );
        return;
    }
    let z = Zone::new(ZoneOptions::new("contention-depot", 64).bucket_items(1)).unwrap();
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    std::thread::scope(|s| {
        for cpu in 0..2 {
            let (z, stop) = (&z, &stop);
            s.spawn(move || {
                pin::pin(cpu);
                let mut live = Vec::with_capacity(2_000);
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..2_000 {
                        live.push(z.alloc().unwrap());
                    }
                    for p in live.drain(..) {
                        // SAFETY: items of this zone, freed once.
                        unsafe { z.free(p) }.unwrap();
                    }
                }
            });
        }
        while z.snapshot().depot_waits.waits == 0 && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let s = z.snapshot();
    assert!(
        s.depot_waits.waits >= 1,
        "no depot wait in {:?} of two threads: {s:?}",
        start.elapsed()
    );
    assert!(s.depot_waits.wait_ns > 0, "{:?}", s.depot_waits);
}

/// One thread alone, with as much depot and slab traffic: nothing waits, nothing is remote.
#[test]
fn one_thread_alone_waits_for_nothing() {
    let _turn = crate::serial::turn(module_path!());
    pin::pin_here();
    let z = Zone::new(ZoneOptions::new("contention-alone", 64).bucket_items(1)).unwrap();
    let mut live = Vec::new();
    for round in 0..2_000 {
        for _ in 0..(16 + round % 50) {
            live.push(z.alloc().unwrap());
        }
        for p in live.drain(..) {
            // SAFETY: items of this zone, freed once.
            unsafe { z.free(p) }.unwrap();
        }
    }
    let s = z.snapshot();
    assert!(
        s.pcpu_overflows > 100 && s.pcpu_underflows > 100,
        "the run went to the depot: {s:?}"
    );
    assert_eq!(
        (s.depot_waits, s.keg_waits, s.stash_waits),
        Default::default(),
        "{s:?}"
    );
    assert_eq!((s.remote_buckets, s.remote_frees), (0, 0), "{s:?}");
}

/// Items freed on CPU 0 and allocated on CPU 1 (one thread, moved): they travel through the
/// depot in buckets CPU 0's full stack flushed, and count as remote frees; allocated again on
/// CPU 0 they do not.
#[test]
fn frees_taken_by_another_cpu_are_remote() {
    let _turn = crate::serial::turn(module_path!());
    if os::cpu_count() < 2 {
        skip::skip(
            "frees_taken_by_another_cpu_are_remote",
            "one CPU here: no other CPU to take the items",
        );
        return;
    }
    let z = Zone::new(ZoneOptions::new("contention-remote", 64).bucket_items(4)).unwrap();
    let cycle = |alloc_cpu: usize, free_cpu: usize| {
        pin::pin(alloc_cpu);
        let items: Vec<_> = (0..64).map(|_| z.alloc().unwrap()).collect();
        pin::pin(free_cpu);
        for p in items {
            // SAFETY: items of this zone, freed once.
            unsafe { z.free(p) }.unwrap();
        }
    };
    // Warm up on CPU 0 only: the depot fills with CPU 0's buckets, nothing crosses.
    cycle(0, 0);
    cycle(0, 0);
    let s = z.snapshot();
    assert_eq!((s.remote_buckets, s.remote_frees), (0, 0), "{s:?}");
    assert!(s.depot.nitems > 0, "CPU 0 flushed buckets: {s:?}");
    // CPU 1 allocates what CPU 0 freed.
    pin::pin(1);
    let items: Vec<_> = (0..64).map(|_| z.alloc().unwrap()).collect();
    let s = z.snapshot();
    assert!(s.remote_buckets >= 1, "{s:?}");
    assert!(
        s.remote_frees >= s.remote_buckets && s.remote_frees <= 4 * s.remote_buckets,
        "buckets of at most 4 items: {s:?}"
    );
    for p in items {
        // SAFETY: items of this zone, freed once.
        unsafe { z.free(p) }.unwrap();
    }
}
