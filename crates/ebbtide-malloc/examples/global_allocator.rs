//! ebbtide as a Rust program's global allocator, and what it gives back under pressure.
//!
//! ```text
//! cargo run --release -p ebbtide-malloc --example global_allocator
//! ```
//!
//! Builds a word index of a generated text (strings, vectors, a hash map — ordinary Rust
//! allocation), drops it, and shows the allocator's figures before and after a critical
//! pressure notification (what the reclaim thread does when PSI, the cgroup or systemd report
//! pressure).

use ebbtide_malloc::EbbtideMalloc;
use std::collections::HashMap;

#[global_allocator]
static ALLOC: EbbtideMalloc = EbbtideMalloc;

fn mib(b: usize) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn main() {
    let mut index: HashMap<String, Vec<usize>> = HashMap::new();
    let mut seed = 12345u64;
    for pos in 0..2_000_000 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let word = format!("w{}", (seed >> 40) % 200_000);
        index.entry(word).or_default().push(pos);
    }
    let m = ebbtide_malloc::stats::mallinfo2();
    println!(
        "index of {} words: in use {}, mapped {}",
        index.len(),
        mib(m.uordblks),
        mib(m.arena)
    );
    drop(index);
    let m = ebbtide_malloc::stats::mallinfo2();
    println!(
        "dropped:            in use {}, free in caches and slabs {}, mapped {}",
        mib(m.uordblks),
        mib(m.fordblks),
        mib(m.arena)
    );
    // The reclaim thread applies the policy at once, on its own thread.
    let t0 = std::time::Instant::now();
    ebbtide::pressure::notify(ebbtide::Level::Critical);
    let mut m = ebbtide_malloc::stats::mallinfo2();
    while m.arena > (1 << 20) && t0.elapsed().as_secs() < 3 {
        std::thread::sleep(std::time::Duration::from_millis(1));
        m = ebbtide_malloc::stats::mallinfo2();
    }
    println!(
        "critical pressure:  mapped {} after {:.1} ms",
        mib(m.arena),
        t0.elapsed().as_secs_f64() * 1e3
    );
    ebbtide::pressure::notify(ebbtide::Level::Normal);
}
