//! Idle give-back with default settings, without pressure: a burst of `MIB` MiB is
//! freed, then the process allocates nothing; prints cached/mapped bytes over time until the
//! reclaim thread's periodic pass has given everything back, for good (lazily freed pages
//! decayed too). Target: ≤ 10 s.
//!
//! `cargo run --release -p ebbtide --example idle_giveback [MIB]`
use ebbtide::{Zone, ZoneOptions};
use std::time::{Duration, Instant};

fn rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1 << 20) as f64
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256);
    let z = Zone::new(ZoneOptions::new("idle-64", 64)).unwrap();
    let n = (mib << 20) / 64;
    // A worker thread makes the burst and then parks, as an idle service's threads do.
    let zr: &'static Zone = Box::leak(Box::new(z));
    std::thread::spawn(move || {
        let v: Vec<_> = (0..n).map(|_| zr.alloc().unwrap()).collect();
        for p in &v {
            // SAFETY: items of ours.
            unsafe { p.as_ptr().write_bytes(1, 64) };
        }
        for p in v {
            // SAFETY: valid frees.
            unsafe { zr.free(p).unwrap() };
        }
    })
    .join()
    .unwrap();
    let t = Instant::now();
    println!("t_s\trss_mib\tmapped_mib\tcached_mib\tlazy_mib");
    let mut lazily = None;
    loop {
        let s = ebbtide::stats::collect();
        let mapped = s.global.mapped_bytes as f64 / (1 << 20) as f64;
        // Lazily freed pages (settling or MADV_FREE) are out of the caches but still in RSS.
        let lazy = s.global.lazy_bytes + s.global.lazy_pending_bytes;
        println!(
            "{:.1}\t{:.1}\t{:.1}\t{:.1}\t{:.1}",
            t.elapsed().as_secs_f64(),
            rss_mib(),
            mapped,
            s.global.cached_bytes as f64 / (1 << 20) as f64,
            lazy as f64 / (1 << 20) as f64
        );
        if s.global.mapped_bytes == 0 && lazily.is_none() {
            lazily = Some(t.elapsed().as_secs_f64());
        }
        if s.global.mapped_bytes == 0 && lazy == 0 {
            println!(
                "all {mib} MiB out of the caches after {:.2} s and given back for good after {:.2} s idle (trim_interval_ms = {}, lazy_free = {}, lazy_decay_ms = {})",
                lazily.unwrap_or(0.0),
                t.elapsed().as_secs_f64(),
                ebbtide::options::get("trim_interval_ms").unwrap(),
                ebbtide::options::get("lazy_free").unwrap(),
                ebbtide::options::get("lazy_decay_ms").unwrap()
            );
            break;
        }
        if t.elapsed() > Duration::from_secs(60) {
            println!("not given back within 60 s");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
