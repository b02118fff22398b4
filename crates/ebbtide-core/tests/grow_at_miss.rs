// A test binary of its own, outside tests/all/: it reads the per-CPU rooms before any resize pass of the process has run.
//! A stack whose frees find it full after it underflowed grows at once, one bucket per such
//! alternation (`grow_per_alternation.rs`), out of its CPU's room
//! (the part of the per-CPU budget the last resize pass left unallocated), without waiting for a
//! pass; allocations that find it empty do not grow it; the pass recomputes the room and grows
//! only for the misses that did not already take their bucket; with no room nothing grows.
//! (Its own test binary, one test: the budget and the rooms are process-wide.)

use ebbtide_core::reclaim;
use ebbtide_core::{sizing, Zone, ZoneOptions};
use std::ptr::NonNull;

#[path = "support/pin.rs"]
mod pin;
use pin::pin_last_cpu;

#[path = "support/items.rs"]
mod items;
use items::{alloc_n, free_all};

#[test]
fn frees_that_find_the_stack_full_grow_it_at_once_within_the_room() {
    let cpu = pin_last_cpu();
    let size = 4096u64; // bucket 2: floor 4 slots
    let budget = 64 * size;
    sizing::set_budget(budget);
    let z = Zone::new(ZoneOptions::new("grow-at-miss", size as usize)).unwrap();
    // Before any pass on this CPU its room is the whole budget.
    assert_eq!(sizing::room(cpu), budget);

    // Allocations that find the stack empty: no growth (and the floor, 4 slots, does not count
    // against the budget).
    let v = alloc_n(&z, 40);
    let s = z.snapshot().per_cpu[cpu];
    assert_eq!((s.capacity, s.grant), (4, 0), "{s:?}");
    assert!(s.underflows > 0, "{s:?}");
    assert_eq!(sizing::room(cpu), budget);

    // Frees that find it full after those underflows: a bucket (2 slots), at once.
    free_all(&z, v);
    let s = z.snapshot().per_cpu[cpu];
    assert!(s.overflows > 0, "{s:?}");
    assert!(s.grant >= 2 && s.grant.is_multiple_of(2), "{s:?}");
    assert_eq!(s.capacity, 4 + s.grant);
    assert!(s.items > 4, "the stack holds more than its floor: {s:?}");
    assert_eq!(sizing::room(cpu), budget - s.grant as u64 * size);

    // The pass, with a budget it need not cut: of its misses it counts those of alternations
    // (2 × min(underflows, overflows)), one bucket (2 slots) each, less what the overflows
    // already took at once; then the room is the budget less what the stack counts (its
    // grant).
    let grant_before = s.grant;
    // This CPU's first pass: all of them.
    let alternating = 2 * s.underflows.min(s.overflows) as u32;
    sizing::set_budget(1024 * size);
    let t0 = ebbtide_core::os::now_ns();
    reclaim::resize_pcpu(t0);
    let s = z.snapshot().per_cpu[cpu];
    let storage_left = 1008 - 4 - grant_before;
    let want = (2 * alternating)
        .saturating_sub(grant_before)
        .min(storage_left);
    assert!(want > 0, "the case should leave the pass something to grow");
    assert_eq!(
        s.grant,
        grant_before + want,
        "grant {grant_before} before the pass, {alternating} alternating misses: {s:?}"
    );
    assert_eq!(sizing::room(cpu), 1024 * size - s.grant as u64 * size);

    // No room: the stack stays at what it has, however often it overflows.
    sizing::set_budget(s.grant as u64 * size);
    reclaim::resize_pcpu(t0 + 1);
    let cap = z.snapshot().per_cpu[cpu].capacity;
    assert_eq!(sizing::room(cpu), 0);
    let v = alloc_n(&z, 3 * cap as usize);
    free_all(&z, v);
    let s = z.snapshot().per_cpu[cpu];
    assert!(s.overflows > 0);
    assert_eq!(s.capacity, cap, "{s:?}");

    // Growth never passes the storage.
    sizing::set_budget(u64::MAX / 2);
    reclaim::resize_pcpu(t0 + 2);
    let v = alloc_n(&z, 3000);
    free_all(&z, v);
    let s = z.snapshot().per_cpu[cpu];
    assert!(s.capacity <= 1008 && s.items <= s.capacity, "{s:?}");
    z.reclaim(ebbtide_core::reclaim::Request::DrainCpu);
    z.destroy().map_err(|e| e.1).unwrap();

    // A stack that only receives frees (a consumer's CPU: another CPU allocates) grows neither
    // at its overflows nor in the pass: every miss moves a bucket to the depot whatever its
    // capacity.
    let c = Zone::new(ZoneOptions::new("grow-at-miss-consumer", size as usize)).unwrap();
    let other = (cpu + ebbtide_core::os::cpu_count() - 1) % ebbtide_core::os::cpu_count();
    let items = std::thread::scope(|sc| {
        sc.spawn(|| {
            pin::pin(other);
            // As addresses: NonNull is not Send.
            alloc_n(&c, 200)
                .into_iter()
                .map(|p| p.as_ptr() as usize)
                .collect::<Vec<usize>>()
        })
        .join()
        .unwrap()
    });
    let items: Vec<NonNull<u8>> = items
        .into_iter()
        .map(|a| NonNull::new(a as *mut u8).unwrap())
        .collect();
    reclaim::resize_pcpu(t0 + 4);
    free_all(&c, items);
    let s = c.snapshot().per_cpu[cpu];
    assert!(s.overflows > 0 && s.underflows == 0, "{s:?}");
    assert_eq!(s.grant, 0, "overflows only: no growth at the miss: {s:?}");
    reclaim::resize_pcpu(t0 + 5);
    let s = c.snapshot().per_cpu[cpu];
    assert_eq!(s.grant, 0, "overflows only: no growth in the pass: {s:?}");
    sizing::set_budget(sizing::DEFAULT_BUDGET_BYTES);
    reclaim::resize_pcpu(t0 + 6);
    c.reclaim(ebbtide_core::reclaim::Request::DrainCpu);
    c.destroy().map_err(|e| e.1).unwrap();
}
