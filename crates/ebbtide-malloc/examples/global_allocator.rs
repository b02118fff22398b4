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
//!
//! The figures come from `mallinfo2`, whose fields count two kinds of memory apart: blocks of
//! the size classes live in slabs (`arena` is the slabs mapped), blocks above the classes (the
//! hash map's table, a vector's buffer once it outgrows the classes) live in the page heap or
//! their own mappings (`hblkhd`), and `uordblks` ("in use") counts both. So "mapped" below is
//! the sum of all three places the allocator holds memory: the slabs, the blocks above the
//! classes, and the page heap's free resident runs. In use never exceeds it.

use ebbtide_malloc::stats::Mallinfo2;
use ebbtide_malloc::EbbtideMalloc;
use std::collections::HashMap;

#[global_allocator]
static ALLOC: EbbtideMalloc = EbbtideMalloc;

fn mib(b: usize) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// Everything the allocator holds mapped: slabs of the size classes, blocks above the classes,
/// and the page heap's free resident runs (`fordblks` counts them beside the free class blocks).
fn mapped(m: &Mallinfo2) -> usize {
    m.arena + m.hblkhd + ebbtide_malloc::huge::cached_bytes()
}

fn line(what: &str, m: &Mallinfo2) {
    let heap_free = ebbtide_malloc::huge::cached_bytes();
    println!("{what}");
    println!(
        "  in use {} ({} in size classes, {} in blocks above them)",
        mib(m.uordblks),
        mib(m.uordblks - m.hblkhd),
        mib(m.hblkhd)
    );
    println!(
        "  mapped {} ({} of slabs, {} of blocks above the classes, {} free in the page heap)",
        mib(mapped(m)),
        mib(m.arena),
        mib(m.hblkhd),
        mib(heap_free)
    );
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
    let words = index.len();
    line(
        &format!("index of {words} words:"),
        &ebbtide_malloc::stats::mallinfo2(),
    );
    drop(index);
    let m = ebbtide_malloc::stats::mallinfo2();
    line("dropped:", &m);
    println!("  free blocks held in caches and slabs {}", mib(m.fordblks));
    // The reclaim thread applies the policy at once, on its own thread.
    let t0 = std::time::Instant::now();
    ebbtide::pressure::notify(ebbtide::Level::Critical);
    let mut m = ebbtide_malloc::stats::mallinfo2();
    while mapped(&m) > (1 << 20) && t0.elapsed().as_secs() < 3 {
        std::thread::sleep(std::time::Duration::from_millis(1));
        m = ebbtide_malloc::stats::mallinfo2();
    }
    println!("critical pressure:");
    println!(
        "  mapped {} after {:.1} ms",
        mib(mapped(&m)),
        t0.elapsed().as_secs_f64() * 1e3
    );
    ebbtide::pressure::notify(ebbtide::Level::Normal);
}
