//! Reaction benchmark: `MIB` MiB cached in one zone of each item size,
//! then one DRAIN_CPU; prints the time per GiB given back, against the bare MADV_DONTNEED of the
//! same amount of touched memory measured in the same run. Medians of `REPS` repetitions.
//!
//! Two places the cache can sit ("cache in" column): the zone's **depot** (a zone with per-CPU
//! caches: the freed items wait in buckets, and the drain first puts every one back in its slab)
//! and its **slabs** (a `NOBUCKET` zone: every free went to its slab at once, so the cache is
//! free slabs, in whole huge pages for a dense zone, and the drain only gives pages back).
//!
//! Two denominators: the zone's own slab bytes given back (the cached items: `MIB` MiB for these
//! item sizes, which fill their slabs exactly) — the figure the target is about — and every byte
//! the call reports, which also counts the bucket objects that held the cached pointers (about
//! 13 % more for 64-byte items). The RSS drop column is the process's resident memory
//! (`/proc/self/statm`) before the call minus right after it returned: what the kernel says
//! actually went back by then.
//!
//! The "in huge pages" column is the process's `AnonHugePages` before the call: how much of the
//! cache sat in 2 MiB pages (a dense zone's chunks are huge, `keg/huge.rs`); the bare figures
//! are for 4 KiB and for 2 MiB pages.
//!
//! `cargo run --release -p ebbtide --example reclaim_speed [MIB] [REPS]` (the environment's
//! `RECLAIM_SPEED_SIZES=64,4096` measures only those item sizes)

use ebbtide::{Request, Zone, ZoneFlags, ZoneOptions};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The bare `MADV_DONTNEED` of `bytes` of touched memory, in 4 KiB pages (`huge` false:
/// `MADV_NOHUGEPAGE`) or in 2 MiB pages (`MADV_HUGEPAGE`, 2 MiB aligned), ms per GiB.
fn madvise_ms_per_gib(bytes: usize, huge: bool) -> f64 {
    const HUGE: usize = 2 << 20;
    // SAFETY: a private anonymous mapping, touched, then given back; unmapped at the end.
    unsafe {
        let m = libc::mmap(
            std::ptr::null_mut(),
            bytes + HUGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(m, libc::MAP_FAILED);
        let p = ((m as usize).next_multiple_of(HUGE)) as *mut libc::c_void;
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        libc::madvise(p, bytes, advice);
        std::ptr::write_bytes(p as *mut u8, 1, bytes);
        let t = Instant::now();
        libc::madvise(p, bytes, libc::MADV_DONTNEED);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        libc::munmap(m, bytes + HUGE);
        ms / (bytes as f64 / (1u64 << 30) as f64)
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
        .unwrap_or(5);
    let _ = ebbtide::options::set("reclaim_thread", "false");
    println!(
        "| item size | cache in | cached MiB | in huge pages MiB | ms per GiB of cached items (median of {reps}) | ms per GiB of all bytes returned | bucket MiB returned | RSS drop MiB | bare MADV_DONTNEED ms/GiB, 4 KiB / 2 MiB pages | ratio (items) to 4 KiB / 2 MiB |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let gib = (1u64 << 30) as f64;
    // `RECLAIM_SPEED_SIZES=4096` (comma-separated) measures only those item sizes.
    let sizes: Vec<usize> = std::env::var("RECLAIM_SPEED_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![64, 256, 4096]);
    for (size, slabs) in sizes.iter().flat_map(|&s| [(s, false), (s, true)]) {
        let (name, flags) = if slabs {
            (format!("speed-{size}-slabs"), ZoneFlags::NOBUCKET)
        } else {
            (format!("speed-{size}"), ZoneFlags::default())
        };
        let z = Zone::new(ZoneOptions::new(&name, size).flags(flags)).unwrap();
        let n = (mib << 20) / size;
        let (mut per_item_gib, mut per_all_gib, mut bare) = (Vec::new(), Vec::new(), Vec::new());
        let (mut bucket_mib, mut rss_drop_mib) = (Vec::new(), Vec::new());
        let (mut huge_mib, mut bare_huge) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                let p = z.alloc().unwrap();
                // SAFETY: ours, `size` bytes.
                unsafe { p.as_ptr().write_bytes(1, size) };
                v.push(p);
            }
            for p in v {
                // SAFETY: valid frees.
                unsafe { z.free(p).unwrap() };
            }
            let zone_before = z.snapshot().released_bytes;
            let rss_before = rss_bytes();
            huge_mib.push(anon_huge_bytes() as f64 / (1 << 20) as f64);
            let t = Instant::now();
            let bytes = ebbtide::reclaim::reclaim_all(Request::DrainCpu);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let rss_after = rss_bytes();
            let zone_bytes = z.snapshot().released_bytes - zone_before;
            per_item_gib.push(ms / (zone_bytes as f64 / gib));
            per_all_gib.push(ms / (bytes as f64 / gib));
            bucket_mib.push((bytes as u64 - zone_bytes) as f64 / (1 << 20) as f64);
            rss_drop_mib.push(rss_before.saturating_sub(rss_after) as f64 / (1 << 20) as f64);
            bare.push(madvise_ms_per_gib(mib << 20, false));
            bare_huge.push(madvise_ms_per_gib(mib << 20, true));
        }
        let (o, b, bh) = (median(per_item_gib), median(bare), median(bare_huge));
        println!(
            "| {size} | {} | {mib} | {:.0} | {o:.1} | {:.1} | {:.0} | {:.0} | {b:.1} / {bh:.1} | {:.2} / {:.2} |",
            if slabs { "slabs" } else { "depot" },
            median(huge_mib),
            median(per_all_gib),
            median(bucket_mib),
            median(rss_drop_mib),
            o / b,
            o / bh
        );
        z.destroy().map_err(|e| e.1).unwrap();
    }
}

/// Anonymous memory of this process in huge pages (`/proc/self/smaps_rollup`, `AnonHugePages`).
fn anon_huge_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Resident set size of this process (`/proc/self/statm`, second field, in pages).
fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}
