// A test binary of its own, outside tests/all/: it counts the stacks the process-wide passes have written since the process started.
//! A zone's per-CPU stack costs memory only on the CPUs that use it: a thread pinned to one CPU
//! allocates and frees, every pass over all CPUs runs (periodic trim and idle detection, the
//! resize pass, a DRAIN_CPU, a validation, Low pressure's step-down, caches closed and reopened),
//! and the other CPUs' stack pages are still unwritten — the page table says so
//! (`/proc/self/pagemap`). Before, creating a zone opened every CPU's stack and wrote its page:
//! 4 KiB × CPUs per size class of a malloc. (Its own test binary: the affinity is per thread,
//! but the passes are process-wide.)

#[path = "../../ebbtide/tests/support/skip.rs"]
mod skip;
use ebbtide_core::reclaim::{self, Request};
use ebbtide_core::{Zone, ZoneOptions};
use std::io::{Read, Seek, SeekFrom};
use std::ptr::NonNull;

#[path = "support/pin.rs"]
mod pin;
use pin::pin;

/// Whether the page holding `addr` is a page of this process's own (present and exclusively
/// mapped: `pagemap` bits 63 and 56). A page never touched is not present; one only read is the
/// kernel's shared zero page, present but not exclusive. Neither costs memory.
fn written(addr: usize) -> bool {
    let mut f = std::fs::File::open("/proc/self/pagemap").expect("open /proc/self/pagemap");
    f.seek(SeekFrom::Start((addr / 4096 * 8) as u64))
        .expect("seek in pagemap");
    let mut b = [0u8; 8];
    f.read_exact(&mut b).expect("read pagemap");
    let e = u64::from_le_bytes(b);
    e & (1 << 63) != 0 && e & (1 << 56) != 0
}

#[test]
fn only_the_cpus_that_use_a_zone_write_its_stacks() {
    let n = ebbtide_core::os::cpu_count();
    if n < 2 {
        skip::skip(
            "only_the_cpus_that_use_a_zone_write_its_stacks",
            "one CPU here: no other CPU's stack to look at",
        );
        return;
    }
    pin(0);
    let zones: Vec<Zone> = (0..4)
        .map(|i| Zone::new(ZoneOptions::new(&format!("lazy-{i}"), 64 << i)).unwrap())
        .collect();
    // A fresh zone has opened no stack.
    for z in &zones {
        assert!(z
            .snapshot()
            .per_cpu
            .iter()
            .all(|c| !c.in_use && c.capacity == 0));
    }
    // Use them on CPU 0: bursts that miss (and so count demand), some items left cached.
    let mut keep = Vec::new();
    for z in &zones {
        let mut v: Vec<NonNull<u8>> = (0..600).map(|_| z.alloc().unwrap()).collect();
        for p in v.drain(100..) {
            // SAFETY: items of ours, freed once.
            unsafe { z.free(p).unwrap() };
        }
        keep.push(v);
    }
    // Every pass over all CPUs, each one at least once.
    reclaim::resize_pcpu(ebbtide_core::os::now_ns());
    for z in &zones {
        z.periodic(ebbtide_core::os::now_ns());
        z.periodic(ebbtide_core::os::now_ns() + 1_000_000_000);
        z.validate().unwrap();
        z.reclaim(Request::Trim);
    }
    reclaim::reclaim_all(Request::DrainCpu);
    for z in &zones {
        z.reopen_caches();
        // Still usable on CPU 0 after the drain.
        let p = z.alloc().unwrap();
        // SAFETY: ours, freed once.
        unsafe { z.free(p).unwrap() };
    }
    for (i, z) in zones.iter().enumerate() {
        let s = z.snapshot();
        assert!(s.per_cpu[0].in_use, "zone {i}: CPU 0 used it");
        assert!(
            written(z.stack_header_addr(0)),
            "zone {i}: CPU 0's stack page was written"
        );
        for cpu in 1..n {
            assert!(
                !s.per_cpu[cpu].in_use,
                "zone {i}, CPU {cpu}: {:?}",
                s.per_cpu[cpu]
            );
            assert_eq!(s.per_cpu[cpu].capacity, 0);
            assert!(
                !written(z.stack_header_addr(cpu)),
                "zone {i}: CPU {cpu} never used the zone, yet its stack page was written"
            );
        }
    }
    // The other CPU opens its own stack on its first use, and caches there.
    pin(1);
    let z = &zones[0];
    let v: Vec<NonNull<u8>> = (0..10).map(|_| z.alloc().unwrap()).collect();
    for p in v {
        // SAFETY: ours, freed once.
        unsafe { z.free(p).unwrap() };
    }
    let s = z.snapshot();
    assert!(s.per_cpu[1].in_use, "{:?}", s.per_cpu[1]);
    assert!(s.per_cpu[1].capacity > 0, "{:?}", s.per_cpu[1]);
    assert!(s.per_cpu[1].items > 0, "{:?}", s.per_cpu[1]);
    assert!(written(z.stack_header_addr(1)));
    for (z, v) in zones.iter().zip(keep) {
        for p in v {
            // SAFETY: ours, freed once.
            unsafe { z.free(p).unwrap() };
        }
    }
}
