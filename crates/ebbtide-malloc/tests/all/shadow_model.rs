//! The allocator against a shadow model: random sequences of malloc, calloc, realloc,
//! reallocarray, the aligned functions and free (through the C names, in process), each block
//! filled with its own pattern; after every step every live block must still hold its pattern,
//! be aligned as asked and report a usable size at least its size, and no two live blocks may
//! overlap.

use ebbtide_malloc::api;
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    Malloc(usize),
    Calloc(usize, usize),
    Realloc(usize, usize),
    Aligned(u32, usize),
    Free(usize),
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..160,
        3 => 160usize..5000,
        2 => 5000usize..300_000,
        1 => 1_000_000usize..2_500_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => size().prop_map(Op::Malloc),
        1 => (0usize..64, 0usize..300).prop_map(|(a, b)| Op::Calloc(a, b)),
        3 => (any::<usize>(), size()).prop_map(|(i, n)| Op::Realloc(i, n)),
        2 => (3u32..22, size()).prop_map(|(a, n)| Op::Aligned(a, n)),
        4 => any::<usize>().prop_map(Op::Free),
    ]
}

struct Block {
    size: usize,
    align: usize,
    seed: u8,
}

fn fill(p: *mut u8, n: usize, seed: u8) {
    for i in (0..n).step_by(61).chain(n.checked_sub(1)) {
        // SAFETY: i < n, inside a live block of n bytes.
        unsafe { *p.add(i) = seed.wrapping_add(i as u8) };
    }
}

/// Whether the first `keep` bytes of a block filled by `fill(p, n, seed)` still hold what it
/// wrote there.
fn holds(p: *mut u8, n: usize, keep: usize, seed: u8) -> bool {
    (0..n)
        .step_by(61)
        .chain(n.checked_sub(1))
        .filter(|&i| i < keep)
        // SAFETY: i < keep, inside the live block.
        .all(|i| unsafe { *p.add(i) } == seed.wrapping_add(i as u8))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn blocks_keep_their_contents(ops in proptest::collection::vec(op(), 1..120)) {
        let _turn = crate::serial::turn(module_path!());
        let mut live: BTreeMap<usize, Block> = BTreeMap::new();
        let mut seed = 0u8;
        for o in ops {
            seed = seed.wrapping_add(37);
            // SAFETY: every pointer passed back comes from `live`, owned by the model.
            unsafe {
                match o {
                    Op::Malloc(n) => {
                        let p = api::malloc(n).cast::<u8>();
                        prop_assert!(!p.is_null());
                        fill(p, n, seed);
                        live.insert(p as usize, Block { size: n, align: 8, seed });
                    }
                    Op::Calloc(a, b) => {
                        let p = api::calloc(a, b).cast::<u8>();
                        prop_assert!(!p.is_null());
                        let n = a * b;
                        prop_assert!((0..n).step_by(7).all(|i| *p.add(i) == 0), "calloc not zeroed");
                        fill(p, n, seed);
                        live.insert(p as usize, Block { size: n, align: 8, seed });
                    }
                    Op::Realloc(i, n) => {
                        if live.is_empty() { continue; }
                        let k = *live.keys().nth(i % live.len()).unwrap();
                        let b = live.remove(&k).unwrap();
                        let p = api::realloc(k as *mut _, n.max(1)).cast::<u8>();
                        prop_assert!(!p.is_null());
                        let keep = b.size.min(n.max(1));
                        prop_assert!(holds(p, b.size, keep, b.seed), "realloc lost contents");
                        fill(p, n.max(1), seed);
                        live.insert(p as usize, Block { size: n.max(1), align: 8, seed });
                    }
                    Op::Aligned(shift, n) => {
                        let a = 1usize << shift;
                        let mut p = core::ptr::null_mut();
                        prop_assert_eq!(api::posix_memalign(&mut p, a, n), 0);
                        let p = p.cast::<u8>();
                        fill(p, n, seed);
                        live.insert(p as usize, Block { size: n, align: a, seed });
                    }
                    Op::Free(i) => {
                        if live.is_empty() { continue; }
                        let k = *live.keys().nth(i % live.len()).unwrap();
                        live.remove(&k);
                        api::free(k as *mut _);
                    }
                }
            }
            let mut end = 0usize;
            for (&a, b) in &live {
                prop_assert!(a >= end, "blocks overlap at {:#x}", a);
                prop_assert_eq!(a % b.align, 0);
                prop_assert!(holds(a as *mut u8, b.size, b.size, b.seed), "block {:#x} changed", a);
                // SAFETY: a live block.
                let usable = unsafe { api::malloc_usable_size(a as *mut _) };
                prop_assert!(usable >= b.size, "usable {} < {}", usable, b.size);
                end = a + b.size;
            }
        }
        for (a, _) in live {
            // SAFETY: a live block, freed once.
            unsafe { api::free(a as *mut _) };
        }
    }
}
