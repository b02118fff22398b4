//! Caches bounded by reuse (`reuse.rs`, `ZoneOptions::reuse_floor_bytes`) on real zones: memory
//! freed that nothing took again stays cached only up to the floor, while a zone whose program
//! takes its memory again keeps up to its fixed caps; two periods without reuse bring the depot
//! back to the floor. One test function: lazy freeing and the periodic pass are process-wide.

use ebbtide_core::{reclaim, Zone, ZoneOptions};
use std::ptr::NonNull;

const ITEM: usize = 4096; // one item per 4 KiB slab: slabs and items count alike
const FIXED: usize = 256; // the fixed caps, items (depot) and slabs (free slabs)
const FLOOR: usize = 16; // the reuse floor, in items
const N: usize = 1500;

fn zone(name: &str, reuse: bool) -> Zone {
    let o = ZoneOptions::new(name, ITEM)
        .depot_max_items(FIXED as u64)
        .free_slabs_max_bytes(FIXED * ITEM);
    Zone::new(if reuse {
        o.reuse_floor_bytes(FLOOR * ITEM)
    } else {
        o
    })
    .unwrap()
}

fn burst(z: &Zone) {
    let v: Vec<NonNull<u8>> = (0..N).map(|_| z.alloc().unwrap()).collect();
    for p in v {
        // SAFETY: items of ours, freed once.
        unsafe { z.free(p).unwrap() };
    }
}

/// (items in the depot, entirely free slabs kept backed) with nothing allocated.
fn kept(z: &Zone) -> (usize, usize) {
    let s = z.snapshot();
    assert_eq!(s.used, 0, "{s:?}");
    let depot = s.cached_bytes_depot as usize / ITEM;
    let stacks = s.cached_bytes_pcpu as usize / ITEM;
    (depot, s.mapped_bytes as usize / ITEM - depot - stacks)
}

#[test]
fn caches_keep_what_is_taken_again_and_the_floor_of_what_is_not() {
    let _turn = crate::serial::turn(module_path!());
    // Lazy freeing off: slabs beyond a cap go back before the free returns (no timing here).
    reclaim::configure_lazy(false, 0, 1000);
    let fixed = zone("reuse-fixed", false);
    let reuse = zone("reuse-bounded", true);

    // First use: every item comes from fresh slabs; nothing is taken again.
    burst(&fixed);
    burst(&reuse);
    let (fd, ff) = kept(&fixed);
    let (rd, rf) = kept(&reuse);
    assert!(
        fd >= FIXED - 2 && ff >= FIXED - 2,
        "fixed caps keep up to them: depot {fd}, free slabs {ff}"
    );
    assert!(
        rd <= FLOOR && rf <= FLOOR,
        "nothing reused: the floor only ({FLOOR}): depot {rd}, free slabs {rf}"
    );

    // Taken again: the second burst reuses the depot's items, the free slabs and the slabs
    // given back, N items' worth; now the zone keeps up to its fixed caps like the other.
    burst(&reuse);
    let (rd, rf) = kept(&reuse);
    assert!(
        rd >= FIXED - 2 && rf >= FIXED - 2,
        "reused: up to the fixed caps: depot {rd}, free slabs {rf}"
    );

    // Two periods without reuse: the periodic pass brings the depot down to the floor (and
    // gives back the free slabs, as for every zone).
    for _ in 0..2 {
        reclaim::periodic_all(0);
    }
    let (rd, rf) = kept(&reuse);
    assert!(
        rd <= FLOOR && rf <= FLOOR,
        "two periods without reuse: depot {rd}, free slabs {rf}"
    );
    fixed.validate().unwrap();
    reuse.validate().unwrap();
}
