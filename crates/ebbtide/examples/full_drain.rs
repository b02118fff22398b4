//! Measures what a full drain gives back: N items allocated and written, all freed, then
//! DRAIN_CPU; prints RSS before, at the peak and after, and the library's own counts.
//! `cargo run --release -p ebbtide --example full_drain [items] [size]`
use ebbtide::{Request, Zone, ZoneOptions};

fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4096
}

fn main() {
    let mut a = std::env::args().skip(1);
    let n: usize = a.next().map_or(2_000_000, |s| s.parse().unwrap());
    let size: usize = a.next().map_or(64, |s| s.parse().unwrap());
    ebbtide::options::set_many(&[("reclaim_thread", "false"), ("sources", "none")]).unwrap();
    // The pointer array is touched before the baseline, so only the allocator's memory counts.
    let mut v: Vec<*mut u8> = vec![std::ptr::null_mut(); n];
    v.clear();
    let base = rss();
    let z = Zone::new(ZoneOptions::new("full-drain", size)).unwrap();
    for _ in 0..n {
        let p = z.alloc().unwrap().as_ptr();
        // SAFETY: `p` is a fresh item of `z`, `size` bytes long and writable.
        unsafe { p.write_bytes(0x5a, size) };
        v.push(p);
    }
    let peak = rss();
    for p in v.drain(..) {
        // SAFETY: `p` is a non-null item of `z`, allocated above and freed once here.
        unsafe { z.free(std::ptr::NonNull::new_unchecked(p)).unwrap() };
    }
    let back = ebbtide::reclaim::reclaim_all(Request::DrainCpu);
    let after = rss();
    let s = ebbtide::stats::collect();
    println!(
        "items {n} x {size} B: base {} MiB, peak +{:.1} MiB, after +{:.2} MiB ({:.2} % of item bytes); reclaim said {back} B; mapped {} metadata {:?}",
        base >> 20,
        (peak - base) as f64 / 1048576.0,
        (after as f64 - base as f64) / 1048576.0,
        (after as f64 - base as f64) * 100.0 / (n * size) as f64,
        s.global.mapped_bytes,
        "n/a"
    );
}
