//! The periodic pass on a real zone, driven step by step (no reclaim thread, explicit passes):
//! memory freed in one go with no allocation demand leaves the depot at the first pass; a zone
//! in steady use (a batch taken from the depot and given back every period) keeps its working
//! set pass after pass, and the pass's own trims do not inflate the estimate; once the zone
//! stops, two passes empty its depot. (`wss.rs` has the same rules as unit tests on the pure
//! estimator; this checks that the zone feeds it the right events.)

use ebbtide_core::{Zone, ZoneOptions};

const S: u64 = 1_000_000_000;

#[path = "../support/items.rs"]
mod items;
use items::{alloc_n, free_all};

fn depot(z: &Zone) -> u64 {
    z.snapshot().depot.nitems
}

#[test]
fn freed_data_leaves_at_the_first_pass_without_demand() {
    let _turn = crate::serial::turn(module_path!());
    let z = Zone::new(ZoneOptions::new("idle-decay-delete", 64)).unwrap();
    let mut now = S;
    // A burst (from the slabs: the depot is empty), a pass, then its delete.
    let v = alloc_n(&z, 100_000);
    z.periodic(now);
    free_all(&z, v);
    let before = depot(&z);
    assert!(before > 50_000, "the frees filled the depot: {before}");
    now += 2 * S;
    z.periodic(now);
    let s = z.snapshot();
    assert_eq!(
        s.depot.nitems, 0,
        "a period with frees alone is not demand: {:?}",
        s.depot
    );
    assert_eq!(s.depot.idle, 1);
    z.validate().unwrap();
}

#[test]
fn burst_and_delete_in_one_period_leave_at_the_second_pass() {
    let _turn = crate::serial::turn(module_path!());
    let z = Zone::new(ZoneOptions::new("idle-decay-burst", 64)).unwrap();
    let mut now = S;
    z.periodic(now);
    free_all(&z, alloc_n(&z, 100_000));
    let before = depot(&z);
    now += 2 * S;
    z.periodic(now);
    // The allocations reached the depot (it was empty: they went on to the slabs): demand, so
    // what the period touched stays one more period, as for a zone in steady use.
    let s = z.snapshot();
    assert_eq!((s.depot.nitems, s.depot.idle), (before, 0), "{:?}", s.depot);
    now += 2 * S;
    z.periodic(now);
    assert_eq!(depot(&z), 0, "untouched for a whole period, no working set");
    z.validate().unwrap();
}

#[test]
fn a_zone_in_steady_use_keeps_its_working_set_then_decays() {
    let _turn = crate::serial::turn(module_path!());
    let z = Zone::new(ZoneOptions::new("idle-decay-steady", 64)).unwrap();
    let mut now = S;
    let batch = 50_000;
    // Warm-up: the depot fills and the estimate learns the batch.
    for _ in 0..3 {
        free_all(&z, alloc_n(&z, batch));
        now += 2 * S;
        z.periodic(now);
    }
    for round in 0..10 {
        let v = alloc_n(&z, batch);
        free_all(&z, v);
        let held = depot(&z);
        now += 2 * S;
        z.periodic(now);
        let s = z.snapshot();
        assert_eq!(s.depot.idle, 0, "round {round}: the batch was demand");
        // Per-CPU stacks absorb part of each batch (the thread may move between CPUs), so the
        // depot's level varies a little between rounds; the pass must not take from it below
        // the batch it served.
        assert!(
            s.depot.nitems * 10 >= held * 9,
            "round {round}: the pass trimmed a zone in use from {held} to {} ({:?})",
            s.depot.nitems,
            s.depot
        );
        assert!(
            s.depot.wss <= batch as u64,
            "round {round}: estimate above the batch: {:?}",
            s.depot
        );
    }
    assert!(depot(&z) > 0);
    // The zone stops: one pass keeps (a decayed) working set, the second empties the depot.
    now += 2 * S;
    z.periodic(now);
    now += 2 * S;
    z.periodic(now);
    let s = z.snapshot();
    assert_eq!((s.depot.nitems, s.depot.wss), (0, 0), "{:?}", s.depot);
    z.validate().unwrap();
}
