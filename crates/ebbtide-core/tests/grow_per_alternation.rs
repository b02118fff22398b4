// A test binary of its own, outside tests/all/: no resize pass may have run in the process before it (the rooms and budget are process-wide).
//! Growth at the miss follows alternations: an overflow grows its stack by one bucket only if
//! the stack underflowed since it last grew (and since the last pass). A stack that underflowed
//! once and then only receives frees — before the process's first resize pass, the case of a
//! consumer's CPU that made one allocation at start — grows once, not at every overflow; each
//! further underflow between overflows allows one more bucket. (Its own test binary: the budget
//! and the rooms are process-wide; no resize pass runs here, as before a process's first.)

use ebbtide_core::{sizing, Zone, ZoneOptions};
use std::ptr::NonNull;

#[path = "support/pin.rs"]
mod pin;
use pin::pin_last_cpu;

#[path = "support/items.rs"]
mod items;
use items::{alloc_n, free_all};

#[test]
fn one_underflow_then_only_frees_grows_one_bucket() {
    let cpu = pin_last_cpu();
    let size = 4096u64; // bucket 2: floor 4 slots
    sizing::set_budget(1024 * size);
    let z = Zone::new(ZoneOptions::new("grow-per-alternation", size as usize)).unwrap();

    // Items allocated on another CPU (no underflow on ours), then one allocation here: the
    // stack's single underflow.
    let other = (cpu + ebbtide_core::os::cpu_count() - 1) % ebbtide_core::os::cpu_count();
    let far: Vec<usize> = std::thread::scope(|sc| {
        sc.spawn(|| {
            pin::pin(other);
            alloc_n(&z, 300)
                .into_iter()
                .map(|p| p.as_ptr() as usize)
                .collect()
        })
        .join()
        .unwrap()
    });
    let one = z.alloc().unwrap();
    let s = z.snapshot().per_cpu[cpu];
    assert_eq!((s.underflows, s.grant), (1, 0), "{s:?}");

    // Then only frees here: many overflows, one bucket of growth.
    let far: Vec<NonNull<u8>> = far
        .into_iter()
        .map(|a| NonNull::new(a as *mut u8).unwrap())
        .collect();
    free_all(&z, far);
    let s = z.snapshot().per_cpu[cpu];
    assert!(s.overflows >= 50, "{s:?}");
    assert_eq!(s.grant, 2, "one bucket for one alternation: {s:?}");
    assert_eq!(s.capacity, 6, "{s:?}");

    // Each underflow between overflows allows one more bucket: empty the stack (allocations
    // that end in an underflow), then fill it again (frees that overflow), three times.
    let mut grant = s.grant;
    for round in 0..3 {
        let v = alloc_n(&z, s.capacity as usize + 8);
        let under = z.snapshot().per_cpu[cpu].underflows;
        free_all(&z, v);
        let t = z.snapshot().per_cpu[cpu];
        assert!(t.underflows >= under, "{t:?}");
        assert_eq!(t.grant, grant + 2, "round {round}: one more bucket: {t:?}");
        grant = t.grant;
    }
    // SAFETY: ours, freed once.
    unsafe { z.free(one).unwrap() };
    z.reclaim(ebbtide_core::reclaim::Request::DrainCpu);
    z.destroy().map_err(|e| e.1).unwrap();
}
