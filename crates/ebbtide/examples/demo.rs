//! The main job until `ebbtide lab` exists: a service keeps a burst of freed objects cached, then
//! memory pressure is reported and the caches give the memory back. Prints RSS at each step,
//! measured from /proc/self/statm, and the time the reclaim took.
//!
//! `cargo run --release -p ebbtide --example demo [MiB]` (default 512).

use ebbtide::{Request, Zone, ZoneOptions};
use std::time::Instant;

fn rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    pages * ebbtide::os::page_size() as f64 / (1 << 20) as f64
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(512);
    let sizes = [64usize, 256, 4096];
    let zones: Vec<Zone> = sizes
        .iter()
        .map(|&s| Zone::new(ZoneOptions::new(&format!("demo-{s}"), s)).unwrap())
        .collect();
    println!(
        "ebbtide demo: {} CPUs, rseq per-CPU caches: {:?}",
        ebbtide::os::cpu_count(),
        ebbtide::pcpu_mode()
    );
    println!("{:<44} {:>10}", "step", "RSS MiB");
    println!("{:<44} {:>10.1}", "start", rss_mib());

    // A burst: allocate and touch `mib` MiB spread over three zones, then free it all.
    let per_zone = (mib << 20) / sizes.len();
    let mut live: Vec<Vec<std::ptr::NonNull<u8>>> = Vec::new();
    for (z, &s) in zones.iter().zip(&sizes) {
        let n = per_zone / s;
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            let p = z.alloc().expect("alloc");
            // SAFETY: the item is ours, `s` bytes.
            unsafe { p.as_ptr().write_bytes(i as u8, s) };
            v.push(p);
        }
        live.push(v);
    }
    println!(
        "{:<44} {:>10.1}",
        format!("after a burst of {mib} MiB"),
        rss_mib()
    );
    for (z, v) in zones.iter().zip(live) {
        for p in v {
            // SAFETY: allocated above, freed once.
            unsafe { z.free(p).expect("free") };
        }
    }
    let snap = ebbtide::stats::collect();
    println!(
        "{:<44} {:>10.1}   (cached by ebbtide: {:.1} MiB)",
        "all freed, kept in caches and slabs",
        rss_mib(),
        snap.global.cached_bytes as f64 / (1 << 20) as f64
    );

    // Pressure: the response a Critical level triggers (DRAIN_CPU over all zones).
    let t = Instant::now();
    let bytes = ebbtide::reclaim::reclaim_all(Request::DrainCpu);
    let ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "{:<44} {:>10.1}   ({:.1} MiB given back in {:.1} ms = {:.0} ms/GiB)",
        "after DRAIN_CPU",
        rss_mib(),
        bytes as f64 / (1 << 20) as f64,
        ms,
        ms / (bytes as f64 / (1u64 << 30) as f64)
    );
    print!("\n{}", ebbtide::stats::collect().to_table());
    for z in zones {
        z.destroy().map_err(|e| e.1).expect("destroy");
    }
}
