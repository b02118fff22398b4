//! A CPU's allocations from a fresh zone come out in ascending address order: the slabs hand a
//! bucket's items out ascending and the per-CPU stack is LIFO, so the slow path reverses them
//! before pushing (hardware prefetchers follow ascending streams; docs/benchmarks.md,
//! "Ascending addresses"). Fails when the stack hands a bucket out from its highest item down.

use ebbtide_core::{Zone, ZoneOptions};

#[path = "../support/pin.rs"]
mod pin;

#[test]
fn a_fresh_zone_hands_out_ascending_addresses() {
    let _turn = crate::serial::turn(module_path!());
    pin::pin_last_cpu();
    for size in [16usize, 64, 256, 1024] {
        let z = Zone::new(ZoneOptions::new("ascending", size)).unwrap();
        // Within the first bucket (16 items of 1 KiB, 254 of 16 B).
        let n = 16;
        let v: Vec<usize> = (0..n)
            .map(|_| z.alloc().unwrap().as_ptr() as usize)
            .collect();
        for w in v.windows(2) {
            assert!(
                w[1] > w[0],
                "{size}-byte items not ascending: {:#x} then {:#x} (all: {v:x?})",
                w[0],
                w[1]
            );
        }
        assert_eq!(
            v[n - 1] - v[0],
            (n - 1) * z.item_size(),
            "{size}-byte items not adjacent: {v:x?}"
        );
        for p in v {
            // SAFETY: items of this zone, each freed once.
            unsafe {
                z.free(std::ptr::NonNull::new(p as *mut u8).unwrap())
                    .unwrap()
            };
        }
    }
}
