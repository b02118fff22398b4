//! Behaviour of the zone API: allocation, every kind of bad free, destroy, hooks, limits,
//! checked mode, reclaim and the squeeze window.

use ebbtide::{AllocError, InvalidKind, LimitMode, Request, Zone, ZoneFlags, ZoneOptions};
use std::collections::HashSet;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// These tests check exact accounting: no reclaim thread may trim behind their back.
fn quiet() {
    let _ = ebbtide::options::set("reclaim_thread", "false");
    assert!(!ebbtide::reclaimer::running());
}

fn zone(name: &str, size: usize) -> Zone {
    Zone::new(ZoneOptions::new(name, size)).unwrap()
}

#[test]
fn items_are_distinct_aligned_and_writable() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let z = zone("distinct", 48);
    assert_eq!(z.item_size(), 48);
    let mut seen = HashSet::new();
    let mut v = vec![];
    for i in 0..10_000 {
        let p = z.alloc().unwrap();
        assert_eq!(p.as_ptr() as usize % 16, 0);
        // SAFETY: the item is ours, 48 bytes.
        unsafe { p.as_ptr().write_bytes(i as u8, 48) };
        assert!(seen.insert(p.as_ptr() as usize), "item handed out twice");
        v.push(p);
    }
    let c = z.validate().unwrap();
    assert_eq!(c.used, 10_000);
    for p in v {
        // SAFETY: allocated above, freed once.
        unsafe { z.free(p).unwrap() };
    }
    let c = z.validate().unwrap();
    assert_eq!(c.used, 0);
    assert_eq!(c.items_mapped, c.used + c.pcpu + c.depot + c.free_in_slabs);
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn bad_options_name_the_option() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let e = Zone::new(ZoneOptions::new("z", 0))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("'size'"), "{e}");
    let e = Zone::new(ZoneOptions::new("z", 8).align(3))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("'align'") && e.contains("power of two"), "{e}");
    let e = Zone::new(ZoneOptions::new("z", 8).align(1 << 20))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("'align'"), "{e}");
    let e = Zone::new(ZoneOptions::new("z", 2 << 20))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("'size'") && e.contains("largest"), "{e}");
    let e = Zone::new(ZoneOptions::new("", 8))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("'name'"), "{e}");
    let long = "x".repeat(64);
    let e = Zone::new(ZoneOptions::new(&long, 8))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("'name'") && e.contains("63"), "{e}");
}

#[test]
fn invalid_frees_are_refused_and_change_nothing() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    // A victim whose chunk starts with colour pages, so that the chunk's start is no item (a
    // zone of colour 0, one in 64 tags, starts its slab 0 there).
    let (z, a) = loop {
        let z = zone("victim", 64);
        let a = z.alloc().unwrap();
        let chunk = a.as_ptr() as usize & !((4 << 20) - 1);
        if ebbtide_core::owner_entry(a.as_ptr() as usize).start as usize != chunk {
            break (z, a);
        }
        // SAFETY: the item just allocated, freed once.
        unsafe { z.free(a).unwrap() };
        z.destroy().map_err(|e| e.1).unwrap();
    };
    let other = zone("other", 64);
    let b = other.alloc().unwrap();
    let mut local = [0u64; 8];
    let stack_ptr = NonNull::new(local.as_mut_ptr().cast::<u8>()).unwrap();
    let heap = Box::into_raw(Box::new([0u8; 64]));
    let cases = [
        (stack_ptr, InvalidKind::NotInZone),
        (
            NonNull::new(heap.cast::<u8>()).unwrap(),
            InvalidKind::NotInZone,
        ),
        (b, InvalidKind::NotInZone),
        (
            NonNull::new(a.as_ptr().wrapping_add(8)).unwrap(),
            InvalidKind::Misaligned,
        ),
        (
            NonNull::new((a.as_ptr() as usize & !((4 << 20) - 1)) as *mut u8).unwrap(),
            InvalidKind::NotAnItem,
        ),
    ];
    for (p, kind) in cases {
        // SAFETY: each pointer is invalid for this zone; free must refuse it without touching it.
        let e = unsafe { z.free(p) }.unwrap_err();
        assert_eq!(e.kind, kind, "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("'victim'") && msg.contains(&format!("{:#x}", p.as_ptr() as usize)),
            "{msg}"
        );
    }
    assert_eq!(z.snapshot().invalid_frees, 5);
    // SAFETY: the heap box was never given to the zone.
    drop(unsafe { Box::from_raw(heap) });
    z.validate().unwrap();
    // SAFETY: valid frees.
    unsafe {
        z.free(a).unwrap();
        other.free(b).unwrap();
    }
    z.destroy().map_err(|e| e.1).unwrap();
    other.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn checked_mode_catches_double_free_at_once() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let z = Zone::new(ZoneOptions::new("checked", 32).flags(ZoneFlags::CHECKED)).unwrap();
    let a = z.alloc().unwrap();
    // SAFETY: first free valid; the second is the double free under test.
    unsafe {
        z.free(a).unwrap();
        let e = z.free(a).unwrap_err();
        assert_eq!(e.kind, InvalidKind::DoubleFree);
        assert!(e.to_string().contains("double free"));
    }
    let c = z.validate().unwrap();
    assert_eq!(c.used, 0);
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn default_mode_double_free_is_caught_at_the_slab_and_not_applied() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let z = Zone::new(ZoneOptions::new("late", 64).flags(ZoneFlags::NOBUCKET)).unwrap();
    let a = z.alloc().unwrap();
    let keep = z.alloc().unwrap();
    // SAFETY: first free valid; the second is the double free under test.
    unsafe {
        z.free(a).unwrap();
        z.free(a).unwrap(); // reaches the slab, is reported on stderr, counted, not applied
    }
    assert_eq!(z.snapshot().invalid_frees, 1);
    let c = z.validate().unwrap();
    assert_eq!(c.used, 1);
    // SAFETY: valid free.
    unsafe { z.free(keep).unwrap() };
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn destroy_with_live_items_fails_with_the_count() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let z = zone("busy", 128);
    let v: Vec<_> = (0..3).map(|_| z.alloc().unwrap()).collect();
    let (z, busy) = z.destroy().unwrap_err();
    assert_eq!(busy.live_items, 3);
    assert!(
        busy.to_string().contains("3 items are still in use"),
        "{busy}"
    );
    // Nothing was freed: the items are still usable and the zone still works.
    for p in &v {
        // SAFETY: live items of 128 bytes.
        unsafe { p.as_ptr().write_bytes(7, 128) };
    }
    z.validate().unwrap();
    for p in v {
        // SAFETY: valid frees.
        unsafe { z.free(p).unwrap() };
    }
    z.destroy().map_err(|e| e.1).unwrap();
}

static INITS: AtomicUsize = AtomicUsize::new(0);
static FINIS: AtomicUsize = AtomicUsize::new(0);
static CTORS: AtomicUsize = AtomicUsize::new(0);
static DTORS: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn init(item: *mut c_void, size: usize, arg: *mut c_void) -> i32 {
    assert_eq!(arg as usize, 0xabc);
    // SAFETY: the zone passes a live item of `size` bytes.
    unsafe { item.cast::<u8>().write_bytes(0x11, size) };
    INITS.fetch_add(1, Ordering::SeqCst);
    0
}
unsafe extern "C" fn fini(_: *mut c_void, _: usize, _: *mut c_void) {
    FINIS.fetch_add(1, Ordering::SeqCst);
}
unsafe extern "C" fn ctor(item: *mut c_void, _: usize, _: *mut c_void) -> i32 {
    // SAFETY: init ran on this item when it left its slab: its first byte is 0x11 or what the
    // user wrote before freeing (type-stable memory).
    let b = unsafe { *item.cast::<u8>() };
    assert!(b == 0x11 || b == 0x22);
    CTORS.fetch_add(1, Ordering::SeqCst);
    0
}
unsafe extern "C" fn dtor(item: *mut c_void, _: usize, _: *mut c_void) {
    // SAFETY: a live item being freed.
    unsafe { *item.cast::<u8>() = 0x22 };
    DTORS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn hooks_run_at_the_right_layers() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let z = Zone::new(ZoneOptions::new("hooks", 40).hooks(
        Some(init),
        Some(fini),
        Some(ctor),
        Some(dtor),
        0xabc as *mut c_void,
    ))
    .unwrap();
    let v: Vec<_> = (0..1000).map(|_| z.alloc().unwrap()).collect();
    assert_eq!(CTORS.load(Ordering::SeqCst), 1000);
    let inits = INITS.load(Ordering::SeqCst);
    assert!(
        inits >= 1000,
        "init runs when items leave the slabs: {inits}"
    );
    for p in v {
        // SAFETY: valid frees.
        unsafe { z.free(p).unwrap() };
    }
    assert_eq!(DTORS.load(Ordering::SeqCst), 1000);
    // Items in caches keep their constructed state: fini only when they reach the slabs.
    let finis_before = FINIS.load(Ordering::SeqCst);
    assert!(finis_before < inits);
    z.reclaim(Request::DrainCpu);
    assert_eq!(
        FINIS.load(Ordering::SeqCst),
        INITS.load(Ordering::SeqCst),
        "every init matched by a fini"
    );
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn limit_fail_mode() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let z = Zone::new(ZoneOptions::new("limited", 64).max_items(100, LimitMode::Fail)).unwrap();
    let mut v = vec![];
    loop {
        match z.alloc() {
            Ok(p) => v.push(p),
            Err(AllocError::LimitReached { max_items }) => {
                assert_eq!(max_items, 100);
                break;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(v.len() <= 100);
    }
    assert_eq!(
        v.len(),
        100,
        "cached items count toward the limit, all can be used"
    );
    assert!(z.snapshot().fails >= 1);
    for p in v {
        // SAFETY: valid frees.
        unsafe { z.free(p).unwrap() };
    }
    z.validate().unwrap();
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn limit_wait_mode_sleeps_until_an_item_comes_back() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let z = Arc::new(
        Zone::new(ZoneOptions::new("waiting", 64).max_items(10, LimitMode::Wait)).unwrap(),
    );
    let v: Vec<_> = (0..10).map(|_| z.alloc().unwrap()).collect();
    let z2 = z.clone();
    let t = std::thread::spawn(move || {
        let p = z2.alloc().unwrap(); // sleeps
        p.as_ptr() as usize
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!t.is_finished(), "the allocation must wait at the limit");
    let first = v[0];
    // SAFETY: valid free; wakes the sleeper.
    unsafe { z.free(first).unwrap() };
    let got = t.join().unwrap();
    assert!(z.snapshot().sleeps >= 1);
    // SAFETY: valid frees.
    unsafe {
        z.free(NonNull::new(got as *mut u8).unwrap()).unwrap();
        for p in &v[1..] {
            z.free(*p).unwrap();
        }
    }
    z.validate().unwrap();
    let z = Arc::try_unwrap(z).ok().unwrap();
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn reclaim_requests_give_memory_back_and_report_bytes() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let z = zone("reclaimable", 256);
    let v: Vec<_> = (0..20_000).map(|_| z.alloc().unwrap()).collect();
    for p in v {
        // SAFETY: valid frees.
        unsafe { z.free(p).unwrap() };
    }
    let s = z.snapshot();
    assert!(s.mapped_bytes >= 20_000 * 256);
    let trimmed = z.reclaim(Request::Trim);
    let drained = z.reclaim(Request::Drain);
    let cpu = z.reclaim(Request::DrainCpu);
    let after = z.snapshot();
    assert_eq!(after.cached_items_pcpu, 0);
    assert_eq!(after.depot.nitems, 0);
    assert_eq!(after.mapped_bytes, 0, "all slabs given back: {after:?}");
    assert_eq!(
        (trimmed + drained + cpu) as u64,
        s.mapped_bytes,
        "every byte accounted"
    );
    assert_eq!(
        (
            after.reclaim_trim,
            after.reclaim_drain,
            after.reclaim_drain_cpu
        ),
        (1, 1, 1)
    );
    assert!(after.bucket_size >= after.bucket_size_min);
    // And the zone still works.
    let p = z.alloc().unwrap();
    // SAFETY: valid free.
    unsafe { z.free(p).unwrap() };
    z.validate().unwrap();
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn injected_mapping_failure_reclaims_and_retries_once() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let z = zone("mapfail", 4096);
    let before = ebbtide::reclaim::map_failures();
    // The first commit fails; the zone drains caches and retries once, which succeeds.
    ebbtide::os::fault::fail_next_commits(1);
    let mut v = vec![];
    for _ in 0..2000 {
        v.push(z.alloc().unwrap());
    }
    assert!(ebbtide::reclaim::map_failures() > before);
    // Two failures in a row: out of memory, reported as such.
    let mut err = None;
    for _ in 0..5000 {
        ebbtide::os::fault::fail_next_commits(2);
        match z.alloc() {
            Ok(p) => v.push(p),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    ebbtide::os::fault::fail_next_commits(0);
    match err {
        Some(AllocError::OutOfMemory(e)) => assert_eq!(e.errno, libc::ENOMEM),
        other => panic!("expected out of memory, got {other:?}"),
    }
    for p in v {
        // SAFETY: valid frees.
        unsafe { z.free(p).unwrap() };
    }
    z.validate().unwrap();
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn collected_stats_carry_the_zone_and_global_figures() {
    let _turn = crate::serial::turn(module_path!());
    quiet();
    let z = zone("stats-visible", 100);
    let v: Vec<_> = (0..500).map(|_| z.alloc().unwrap()).collect();
    let snap = ebbtide::stats::collect();
    let zs = snap
        .zones
        .iter()
        .find(|s| s.name == "stats-visible")
        .expect("zone listed");
    assert_eq!((zs.size, zs.used), (100, 500));
    assert!(zs.requests >= 500);
    assert!(snap.global.mapped_bytes >= 500 * 112);
    let j: serde_json::Value = serde_json::from_str(&snap.to_json()).unwrap();
    let zj = j["zones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["name"] == "stats-visible")
        .unwrap();
    assert_eq!(zj["used"], 500);
    for p in v {
        // SAFETY: valid frees.
        unsafe { z.free(p).unwrap() };
    }
    z.destroy().map_err(|e| e.1).unwrap();
}
