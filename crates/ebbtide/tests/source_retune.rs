// A test binary of its own, outside tests/all/: sources is a start-up tunable and the pressure state is process-wide.
//! Source tunables changed at run time take effect at once: the reclaim thread notices the new
//! option generation, detects its sources again and re-opens them (here: the library's own
//! budget, switched on by setting `max_cached_bytes` after the thread started).
//! Its own test binary: `sources` is a start-up tunable and the pressure state is process-wide.

use ebbtide::{options, stats, Zone, ZoneOptions};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

fn budget_active() -> bool {
    stats::collect()
        .sources
        .iter()
        .any(|s| s.name == "budget" && s.active)
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn a_budget_set_at_run_time_starts_the_budget_source_and_is_enforced() {
    // Only the budget source (no real machine signals), no budget yet.
    options::set("sources", "budget").unwrap();
    options::set("max_cached_bytes", "0").unwrap();
    let z = Zone::new(ZoneOptions::new("retune", 256)).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || !stats::collect()
            .sources
            .is_empty()),
        "the reclaim thread publishes its sources"
    );
    assert!(!budget_active(), "no budget, no budget source");

    // 16 MiB cached.
    let v: Vec<NonNull<u8>> = (0..65536).map(|_| z.alloc().unwrap()).collect();
    for p in v {
        // SAFETY: valid frees of our items.
        unsafe { z.free(p).unwrap() };
    }
    let cached = |z: &Zone| {
        let s = z.snapshot();
        s.cached_bytes_pcpu + s.cached_bytes_depot
    };
    assert!(cached(&z) >= 15 << 20, "16 MiB cached: {}", cached(&z));

    // A 2 MiB budget, set while the thread runs: the source starts and the cache shrinks.
    options::set("max_cached_bytes", "2MiB").unwrap();
    assert!(
        wait_until(Duration::from_secs(5), budget_active),
        "budget source active after the change: {:?}",
        stats::collect().sources
    );
    assert!(
        wait_until(Duration::from_secs(10), || cached(&z) <= 4 << 20),
        "cache trimmed toward the 2 MiB budget, still {} bytes",
        cached(&z)
    );

    // And off again: the source goes away.
    options::set("max_cached_bytes", "0").unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || !budget_active()),
        "budget source gone after max_cached_bytes = 0"
    );
}
