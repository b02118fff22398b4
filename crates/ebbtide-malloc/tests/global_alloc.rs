// A test binary of its own, outside tests/all/: it installs ebbtide as the #[global_allocator] of its process.
//! A real Rust workload on ebbtide as `#[global_allocator]`: text processing with strings,
//! vectors, maps and sorting on several threads that hand data to each other, checked against
//! a computation done before, with every block provably ebbtide's; then the pressure
//! machinery: a critical notification gives the dropped working set back.

use ebbtide_malloc::heap::{owner, Owner};
use ebbtide_malloc::EbbtideMalloc;
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;

#[global_allocator]
static ALLOC: EbbtideMalloc = EbbtideMalloc;

fn text(seed: u64, words: usize) -> String {
    let mut s = String::new();
    let mut x = seed;
    for i in 0..words {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let w = (x >> 33) % 5000;
        s.push_str(&format!("w{w}"));
        s.push(if i % 17 == 16 { '\n' } else { ' ' });
    }
    s
}

fn counts(t: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for w in t.split_whitespace() {
        *m.entry(w.to_string()).or_insert(0) += 1;
    }
    m
}

#[test]
fn threads_build_and_merge_word_counts() {
    let texts: Vec<String> = (0..4).map(|i| text(i, 60_000)).collect();
    let expected = {
        let mut all = BTreeMap::new();
        for t in &texts {
            for (w, c) in counts(t) {
                *all.entry(w).or_insert(0) += c;
            }
        }
        all
    };
    // Producers count, the consumer merges: every map is built on one thread and freed on
    // another.
    let (tx, rx) = mpsc::channel::<HashMap<String, usize>>();
    let handles: Vec<_> = texts
        .clone()
        .into_iter()
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut m = HashMap::new();
                for line in t.lines() {
                    let mut words: Vec<&str> = line.split(' ').filter(|w| !w.is_empty()).collect();
                    words.sort_unstable();
                    for w in words {
                        *m.entry(w.to_owned()).or_insert(0) += 1;
                    }
                }
                tx.send(m).unwrap();
            })
        })
        .collect();
    drop(tx);
    let mut merged: BTreeMap<String, usize> = BTreeMap::new();
    for m in rx {
        for (w, c) in m {
            *merged.entry(w).or_insert(0) += c;
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(merged, expected);
    // The blocks are ebbtide's: a small box in a size class, a large vector a huge block.
    let b = Box::new([7u8; 100]);
    assert!(matches!(owner(b.as_ptr() as usize), Owner::Class(_)));
    let v = vec![1u8; 3 << 20];
    assert_eq!(owner(v.as_ptr() as usize), Owner::Huge);
    // Over-aligned layouts.
    #[repr(align(4096))]
    struct Page([u8; 4096]);
    let p = Box::new(Page([0; 4096]));
    assert_eq!(&*p as *const Page as usize % 4096, 0);
    assert!(p.0.iter().all(|&b| b == 0));
}

#[test]
fn critical_pressure_gives_the_dropped_working_set_back() {
    let before = ebbtide_malloc::stats::mallinfo2();
    let data: Vec<Vec<u64>> = (0..200_000).map(|i| vec![i; 8]).collect();
    let grown = ebbtide_malloc::stats::mallinfo2();
    assert!(
        grown.uordblks >= before.uordblks + 200_000 * 64,
        "{grown:?}"
    );
    drop(data);
    // Most of the dropped set goes back without pressure (the depot and free-slab caps of each
    // class, `heap.rs`): the empty slabs beyond a class's cap leave its mapped bytes once the
    // excess has lasted 10 ms (into the lazy decay, or back when another class grows),
    // at the class's next free or the reclaim thread's next step (every 100 ms); what the
    // caches keep of it is bounded, and pressure takes that too.
    let t0 = std::time::Instant::now();
    let mut dropped = ebbtide_malloc::stats::mallinfo2();
    while dropped.arena + 200_000 * 64 / 2 > grown.arena && t0.elapsed().as_secs() < 3 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        dropped = ebbtide_malloc::stats::mallinfo2();
    }
    assert!(
        dropped.arena + 200_000 * 64 / 2 <= grown.arena,
        "mapped {} -> {} after the drop",
        grown.arena,
        dropped.arena
    );
    // What the classes still map is mostly their capped caches (this test holds little else).
    assert!(dropped.arena >= 512 * 1024, "{dropped:?}");
    // The reclaim thread applies the policy (at once, asynchronously): wait for it.
    ebbtide::pressure::notify(ebbtide::Level::Critical);
    let t0 = std::time::Instant::now();
    let mut after = ebbtide_malloc::stats::mallinfo2();
    while after.arena * 2 > dropped.arena && t0.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(10));
        after = ebbtide_malloc::stats::mallinfo2();
    }
    ebbtide::pressure::notify(ebbtide::Level::Normal);
    assert!(
        after.arena * 2 <= dropped.arena,
        "mapped {} -> {} under critical pressure",
        dropped.arena,
        after.arena
    );
}
