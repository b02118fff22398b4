// A test binary of its own, outside tests/all/: it sets the process-wide fake clock and per-CPU budget from the process's start.
//! Per-CPU capacity that follows demand, on real zones, driven by a fake clock: a stack that
//! misses grows within the per-CPU budget and then stops missing; a stack that stopped missing
//! gives capacity back to one that misses; what the caches hold at rest stays within the
//! budget; Low pressure, a DRAIN_CPU and idleness take grants back; while caching is off no
//! capacity is given. (Its own test binary, one test: the fake clock and the budget are
//! process-wide.)

use ebbtide_core::os::fault::set_fake_clock;
use ebbtide_core::reclaim::{self, Request};
use ebbtide_core::{sizing, Zone, ZoneOptions};
use std::ptr::NonNull;

#[path = "support/pin.rs"]
mod pin;
use pin::pin_last_cpu;

const MS: u64 = 1_000_000;

/// `rounds` of "allocate `n`, then free those `n`" (the burst pattern that overflows a stack
/// smaller than `n`).
fn bursts(z: &Zone, n: usize, rounds: usize) {
    let mut v: Vec<NonNull<u8>> = Vec::with_capacity(n);
    for _ in 0..rounds {
        for _ in 0..n {
            v.push(z.alloc().unwrap());
        }
        for p in v.drain(..) {
            // SAFETY: items of ours, freed once.
            unsafe { z.free(p).unwrap() };
        }
    }
}

fn misses(z: &Zone) -> u64 {
    let s = z.snapshot();
    s.pcpu_underflows + s.pcpu_overflows
}

/// Per CPU: (bytes held now, bytes of capacity) over the given zones.
fn held_and_capacity(zones: &[&Zone], cpu: usize) -> (u64, u64) {
    let (mut held, mut cap) = (0, 0);
    for z in zones {
        let s = z.snapshot();
        held += s.per_cpu[cpu].items as u64 * s.item_size as u64;
        cap += s.per_cpu[cpu].capacity as u64 * s.item_size as u64;
    }
    (held, cap)
}

#[test]
fn capacity_follows_misses_within_the_budget() {
    let cpu = pin_last_cpu();
    let t0 = 1_000_000_000_000u64;
    set_fake_clock(Some(t0));
    // The budget is what demand adds above the floors (2 zones × 124 slots × 256 B = 62 KiB,
    // on top): 392 slots of grant.
    let budget = 392 * 256;
    let floors = 2 * 124 * 256;
    sizing::set_budget(budget);
    let a = Zone::new(ZoneOptions::new("sizing-a", 256)).unwrap();
    let b = Zone::new(ZoneOptions::new("sizing-b", 256)).unwrap();
    // A stack opens on its CPU's first slow path (`Pcpu::in_use`): one operation on each.
    assert_eq!(a.snapshot().per_cpu[cpu].capacity, 0);
    bursts(&a, 1, 1);
    bursts(&b, 1, 1);
    let floor = a.snapshot().per_cpu[cpu].capacity;
    assert_eq!(floor, 124, "256-byte items: UMA's bucket pair of 62");

    // A burst of 256 overflows a 124-slot stack every round.
    bursts(&a, 256, 8);
    let m0 = misses(&a);
    assert!(m0 >= 8, "{m0} misses");
    let r = reclaim::resize_pcpu(t0 + 100 * MS);
    assert!(r.grown_slots > 0, "{r:?}");
    let sa = a.snapshot();
    assert!(
        sa.per_cpu[cpu].grant > 0 && sa.per_cpu[cpu].capacity > floor,
        "{:?}",
        sa.per_cpu
    );
    assert_eq!(sa.per_cpu[cpu].interval_misses, m0);
    // A few more passes while it still misses, then the burst fits: no more misses.
    for k in 2..6 {
        bursts(&a, 256, 4);
        reclaim::resize_pcpu(t0 + k * 100 * MS);
    }
    let before = misses(&a);
    bursts(&a, 256, 20);
    assert_eq!(misses(&a) - before, 0, "{:?}", a.snapshot().per_cpu[cpu]);
    let (held, cap) = held_and_capacity(&[&a, &b], cpu);
    assert!(
        held <= budget + floors && cap <= budget + floors,
        "held {held}, capacity {cap}, budget {budget} above floors {floors}"
    );
    let grant_a = a.snapshot().per_cpu[cpu].grant;

    // B starts missing while A is idle from misses but was missing 0.5 s ago: B gets only what
    // is free.
    bursts(&b, 256, 8);
    reclaim::resize_pcpu(t0 + 1_000 * MS);
    let (ga, gb) = (
        a.snapshot().per_cpu[cpu].grant,
        b.snapshot().per_cpu[cpu].grant,
    );
    assert_eq!(ga, grant_a, "A missed recently: it keeps its grant");
    let (_, cap) = held_and_capacity(&[&a, &b], cpu);
    assert!(cap <= budget + floors);
    // 1 s after A's last miss, A is quiet and gives back (half its grant per pass) what B needs.
    bursts(&b, 256, 8);
    reclaim::resize_pcpu(t0 + 1_600 * MS);
    let (ga2, gb2) = (
        a.snapshot().per_cpu[cpu].grant,
        b.snapshot().per_cpu[cpu].grant,
    );
    assert!(ga2 < ga && gb2 > gb, "A {ga} -> {ga2}, B {gb} -> {gb2}");
    assert!(ga2 >= ga / 2, "at most half per pass");
    bursts(&b, 256, 8);
    reclaim::resize_pcpu(t0 + 1_700 * MS);
    // What the caches hold at rest stays within the budget above the floors (A's stack was
    // trimmed to its cap).
    let (held, cap) = held_and_capacity(&[&a, &b], cpu);
    assert!(
        held <= budget + floors && cap <= budget + floors,
        "held {held}, capacity {cap}, budget {budget} above floors {floors}"
    );
    for z in [&a, &b] {
        let c = z.snapshot().per_cpu[cpu];
        assert!(c.items <= c.capacity, "{c:?}");
        z.validate().unwrap();
    }

    // A lower budget is applied by the next pass, down to the floors.
    sizing::set_budget(0);
    let r = reclaim::resize_pcpu(t0 + 1_800 * MS);
    assert!(r.taken_slots > 0, "{r:?}");
    for z in [&a, &b] {
        let c = z.snapshot().per_cpu[cpu];
        assert_eq!((c.grant, c.capacity), (0, floor), "{c:?}");
        assert!(c.items <= c.capacity, "{c:?}");
    }
    sizing::set_budget(budget);

    // Low pressure takes a quarter back (at least a bucket's worth), a DRAIN_CPU halves (and
    // drains).
    bursts(&b, 256, 8);
    reclaim::resize_pcpu(t0 + 1_900 * MS);
    let g = b.snapshot().per_cpu[cpu].grant;
    assert!(g >= 62, "{g}");
    b.reclaim(Request::Trim);
    let after = g - 62u32.max(g.div_ceil(4));
    assert_eq!(b.snapshot().per_cpu[cpu].grant, after);
    b.reclaim(Request::DrainCpu);
    assert_eq!(b.snapshot().per_cpu[cpu].grant, after / 2);

    // An idle stack loses its whole grant (two periodic passes without an operation).
    bursts(&b, 256, 8);
    reclaim::resize_pcpu(t0 + 2_000 * MS);
    assert!(b.snapshot().per_cpu[cpu].grant > 0);
    b.periodic(t0 + 2_100 * MS);
    b.periodic(t0 + 2_200 * MS);
    let c = b.snapshot().per_cpu[cpu];
    assert_eq!((c.grant, c.items), (0, 0), "{c:?}");

    // No caching (buckets disabled, as under Critical pressure): caps 0, nothing granted.
    reclaim::set_buckets_enabled(false);
    bursts(&b, 256, 4);
    let r = reclaim::resize_pcpu(t0 + 2_300 * MS);
    assert_eq!(r.grown_slots, 0);
    assert_eq!(b.snapshot().pcpu_capacity, 0);
    reclaim::set_buckets_enabled(true);

    // Small items: the floor is UMA's pair of 254-item buckets (508), and the stack can grow
    // past it (storage 1008) — a burst of 600 stops missing.
    let c = Zone::new(ZoneOptions::new("sizing-c", 64)).unwrap();
    bursts(&c, 1, 1);
    assert_eq!(c.snapshot().per_cpu[cpu].capacity, 508);
    for k in 0..4 {
        bursts(&c, 600, 4);
        reclaim::resize_pcpu(t0 + (2_400 + 100 * k) * MS);
    }
    let cap = c.snapshot().per_cpu[cpu].capacity;
    assert!(cap >= 600, "64-byte stack grew to {cap}");
    let before = misses(&c);
    bursts(&c, 600, 10);
    assert_eq!(misses(&c) - before, 0);
    c.destroy().map_err(|e| e.1).unwrap();

    set_fake_clock(None);
    for z in [a, b] {
        z.destroy().map_err(|e| e.1).unwrap();
    }
}
