//! Quick fast-path timing (no peers; the comparison lives in crates/ebbtide-bench):
//! ns per alloc+free pair, back to back and with 256 live, medians of 15 runs.
use ebbtide::{Zone, ZoneOptions};
use std::hint::black_box;
use std::time::Instant;

#[inline(never)]
fn pair(z: &Zone, n: usize) {
    for _ in 0..n {
        let p = z.alloc().unwrap();
        black_box(p);
        // SAFETY: just allocated.
        unsafe { z.free(p).unwrap() };
    }
}

#[inline(never)]
fn live256(z: &Zone, rounds: usize) {
    let mut v = [std::ptr::NonNull::<u8>::dangling(); 256];
    for _ in 0..rounds {
        for s in v.iter_mut() {
            *s = z.alloc().unwrap();
        }
        for s in v.iter() {
            // SAFETY: allocated above.
            unsafe { z.free(black_box(*s)).unwrap() };
        }
    }
}

fn main() {
    let _ = ebbtide::options::set("reclaim_thread", "false");
    for size in [64, 256] {
        let z = Zone::new(ZoneOptions::new("pair", size)).unwrap();
        let mut a = vec![];
        let mut b = vec![];
        for _ in 0..15 {
            let t = Instant::now();
            pair(&z, 10_000_000);
            a.push(t.elapsed().as_nanos() as f64 / 1e7);
            let t = Instant::now();
            live256(&z, 40_000);
            b.push(t.elapsed().as_nanos() as f64 / (40_000.0 * 256.0));
        }
        a.sort_by(|x, y| x.partial_cmp(y).unwrap());
        b.sort_by(|x, y| x.partial_cmp(y).unwrap());
        println!(
            "size {size}: pair {:.2} ns (min {:.2}), live256 {:.2} ns (min {:.2})",
            a[7], a[0], b[7], b[0]
        );
    }
}
