// A test binary of its own, outside tests/all/: it counts every membarrier of the process, so the reclaim thread is off from the start.
//! One Critical event empties every CPU's caches in one pass: one `membarrier` per CPU that has
//! a stack in use, not one for the squeeze window and another for "buckets off" (a defect found
//! in review: the squeeze drained every CPU, then disabling buckets drained them all again).
//!
//! Its own test binary: nothing else may fence CPUs while it counts, so the reclaim thread is off
//! (the policy runs on the notifying thread) and no source is watched.

use ebbtide::{options, pcpu, pressure, Level, Zone, ZoneOptions};

#[test]
fn a_critical_event_fences_each_cpu_once() {
    options::set_many(&[("reclaim_thread", "false"), ("sources", "none")]).unwrap();
    let z = Zone::new(ZoneOptions::new("critical-once", 64)).unwrap();
    let items: Vec<_> = (0..4096).map(|_| z.alloc().unwrap()).collect();
    for p in items {
        // SAFETY: items of ours, freed once.
        unsafe { z.free(p).unwrap() };
    }
    assert!(z.snapshot().free > 0);
    // The CPUs whose stacks some zone uses: a CPU that never opened a stack of any zone has
    // nothing cached and is not fenced (`Pcpu::in_use`).
    let used = (0..ebbtide::os::cpu_count())
        .filter(|&cpu| {
            ebbtide::zone::snapshots()
                .iter()
                .any(|s| s.per_cpu.get(cpu).is_some_and(|c| c.in_use))
        })
        .count();
    assert!(used >= 1);
    let before = pcpu::fences();
    pressure::notify(Level::Critical);
    let fences = pcpu::fences() - before;
    assert_eq!(
        fences as usize, used,
        "one pass over the CPUs in use per Critical event"
    );
    assert!(
        !ebbtide::reclaim::buckets_enabled(),
        "Critical turns buckets off"
    );
    let s = z.snapshot();
    assert_eq!((s.cached_items_pcpu, s.cached_bytes_depot), (0, 0), "{s:?}");
    pressure::notify(Level::Normal);
    assert!(ebbtide::reclaim::buckets_enabled());
    z.destroy().map_err(|e| e.1).unwrap();
}
