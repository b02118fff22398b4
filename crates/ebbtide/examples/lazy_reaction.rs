//! What lazily freed pages change: a page pool of `MIB` MiB is filled, touched and
//! given back without pressure, then either reused or taken by pressure. Per GiB, medians of
//! `REPS`:
//!
//! * `shrink`: the pool's shrink to 0 free pages — `MADV_FREE` (lazy) against `MADV_DONTNEED`;
//! * `reuse`: getting and writing every page again — no fault after `MADV_FREE` (the kernel did
//!   not need the pages), one fault per page after `MADV_DONTNEED`;
//! * `pressure`: the reaction when pressure comes after a lazy shrink — every lazily freed page
//!   goes back with `MADV_DONTNEED` (`lazy::purge_all`), with the RSS it drops.
//!
//! `cargo run --release -p ebbtide --example lazy_reaction [MIB] [REPS]`
use ebbtide::PagePool;
use std::ptr::NonNull;
use std::time::Instant;

fn rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1 << 20) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn fill(pool: &PagePool, n: usize, v: u8) -> Vec<NonNull<u8>> {
    let pages: Vec<_> = (0..n).map(|_| pool.get().unwrap()).collect();
    for p in &pages {
        // SAFETY: whole pages of ours.
        unsafe { p.as_ptr().write_bytes(v, 4096) };
    }
    pages
}

fn put(pool: &PagePool, pages: Vec<NonNull<u8>>) {
    for p in pages {
        // SAFETY: pages of this pool, put back once.
        unsafe { pool.put(p).unwrap() };
    }
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1024);
    let reps: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    // No reclaim thread: the mode is set directly, as the reclaim thread does from the tunables.
    let _ = ebbtide::options::set("reclaim_thread", "false");
    let _ = ebbtide::options::set("sources", "none");
    let n = (mib << 20) / 4096;
    let per_gib = |ms: f64| ms * 1024.0 / mib as f64;
    let pool = PagePool::new("lazy-reaction", 0).unwrap();
    let (mut shrink_lazy, mut shrink_now, mut reuse_lazy, mut reuse_now) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut purge, mut purge_drop) = (Vec::new(), Vec::new());
    for r in 0..reps {
        for lazy in [true, false] {
            ebbtide::lazy::configure(lazy, 0, 600_000);
            let pages = fill(&pool, n, r as u8);
            put(&pool, pages);
            let t = Instant::now();
            pool.shrink();
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let pages = fill(&pool, n, r as u8 + 1);
            let reuse = t.elapsed().as_secs_f64() * 1e3;
            put(&pool, pages);
            if lazy {
                shrink_lazy.push(per_gib(ms));
                reuse_lazy.push(per_gib(reuse));
                // Pressure after a lazy shrink: the reaction gives every lazily freed page back.
                pool.shrink();
                let rss = rss_mib();
                let t = Instant::now();
                ebbtide::lazy::purge_all();
                purge.push(per_gib(t.elapsed().as_secs_f64() * 1e3));
                purge_drop.push(rss - rss_mib());
            } else {
                shrink_now.push(per_gib(ms));
                reuse_now.push(per_gib(reuse));
                pool.shrink();
            }
        }
    }
    println!("| {mib} MiB page pool, ms per GiB (median of {reps}) | MADV_FREE (lazy_free) | MADV_DONTNEED |");
    println!("|---|---:|---:|");
    println!(
        "| shrink to 0 free pages | {:.1} | {:.1} |",
        median(shrink_lazy),
        median(shrink_now)
    );
    println!(
        "| get and write every page again | {:.1} | {:.1} |",
        median(reuse_lazy),
        median(reuse_now)
    );
    println!(
        "| pressure after the lazy shrink: all lazily freed pages back | {:.1} (RSS -{:.0} MiB) | - |",
        median(purge),
        median(purge_drop)
    );
    pool.destroy().map_err(|e| e.1).unwrap();
}
