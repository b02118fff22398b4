//! Zone objects four to a page (`zone/objects.rs`): zones created one after another share the
//! pages of their objects, and zones created and destroyed over and over reuse the slots, so
//! the metadata the process keeps does not grow with the churn. One test: it reads the
//! process-wide metadata figure, which other tests' zones would move (no other module's test
//! runs beside it: `serial.rs`).

use ebbtide_core::{Zone, ZoneOptions};

#[test]
fn zone_objects_share_pages_and_their_slots_are_reused() {
    let _turn = crate::serial::turn(module_path!());
    let ps = ebbtide_core::os::page_size();
    let make = |i: usize| {
        let name = format!("objects-{i}");
        Zone::new(ZoneOptions::new(&name, 64)).unwrap()
    };
    // Eight zones: their objects lie in at most three pages (eight 1 KiB slots, whatever slot
    // the first one got), not eight.
    let zones: Vec<Zone> = (0..8).map(make).collect();
    let raws: Vec<*mut core::ffi::c_void> = zones.into_iter().map(Zone::into_raw).collect();
    let mut pages: Vec<usize> = raws.iter().map(|&z| z as usize / ps).collect();
    pages.sort();
    pages.dedup();
    assert!(
        pages.len() <= 3,
        "8 zone objects in {} pages: {raws:?}",
        pages.len()
    );
    for &z in &raws {
        assert_eq!(
            z as usize % 1024,
            0,
            "{z:p}: a slot starts at a multiple of 1 KiB"
        );
    }
    // Give them back (every zone is empty).
    for z in raws {
        // SAFETY: from `into_raw` just above, not used elsewhere.
        let zone = unsafe { Zone::from_raw(z) };
        zone.destroy().map_err(|(_, e)| e).unwrap();
    }

    // Churn: after one round has mapped what it needs, more rounds map nothing more.
    let round = || {
        let zs: Vec<Zone> = (0..16).map(make).collect();
        for z in zs {
            z.destroy().map_err(|(_, e)| e).unwrap();
        }
    };
    round();
    let before = ebbtide_core::os::metadata_bytes();
    for _ in 0..20 {
        round();
    }
    assert_eq!(
        ebbtide_core::os::metadata_bytes(),
        before,
        "zone churn kept its metadata constant"
    );
}
