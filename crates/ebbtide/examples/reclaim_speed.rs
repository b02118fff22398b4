//! Reaction benchmark (issue 3, benchmark 1): `MIB` MiB cached in one zone of each item size,
//! then one DRAIN_CPU; prints the time per GiB given back, against the bare MADV_DONTNEED of the
//! same amount of touched memory measured in the same run. Medians of `REPS` repetitions.
//!
//! `cargo run --release -p ebbtide --example reclaim_speed [MIB] [REPS]`

use ebbtide::{Request, Zone, ZoneOptions};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn madvise_ms_per_gib(bytes: usize) -> f64 {
    // SAFETY: a private anonymous mapping, touched, then given back; unmapped at the end.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::write_bytes(p as *mut u8, 1, bytes);
        let t = Instant::now();
        libc::madvise(p, bytes, libc::MADV_DONTNEED);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        libc::munmap(p, bytes);
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
    println!("| item size | cached MiB | DRAIN_CPU ms/GiB (median of {reps}) | bare MADV_DONTNEED ms/GiB | ratio |");
    println!("|---:|---:|---:|---:|---:|");
    for size in [64usize, 256, 4096] {
        let z = Zone::new(ZoneOptions::new(&format!("speed-{size}"), size)).unwrap();
        let n = (mib << 20) / size;
        let mut ours = Vec::new();
        let mut bare = Vec::new();
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
            let t = Instant::now();
            let bytes = ebbtide::reclaim::reclaim_all(Request::DrainCpu);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            ours.push(ms / (bytes as f64 / (1u64 << 30) as f64));
            bare.push(madvise_ms_per_gib(mib << 20));
        }
        let (o, b) = (median(ours), median(bare));
        println!("| {size} | {mib} | {o:.1} | {b:.1} | {:.2} |", o / b);
        z.destroy().map_err(|e| e.1).unwrap();
    }
}
