//! An immediate double free (`free(p); free(p)`) is caught in default mode, on the fast path,
//! by comparing with the top of this CPU's stack inside the critical section: refused with an
//! error naming the zone and the address, counted, and never applied — the item is not handed
//! out twice. (Review: it used to hand `p` out twice with no message.)

use ebbtide_core::{InvalidKind, Zone, ZoneOptions};

#[path = "../support/pin.rs"]
mod pin;

#[test]
fn free_p_free_p_is_refused_and_p_is_handed_out_once() {
    let _turn = crate::serial::turn(module_path!());
    // "The top of this CPU's stack" must stay one stack between the two frees (a migration in
    // between is the case the cheap check does not cover).
    pin::pin_here();
    let z = Zone::new(ZoneOptions::new("df-default", 64)).unwrap();
    // Warm this CPU's stack so the frees below go to it (caches open after the first slow path).
    let warm: Vec<_> = (0..64).map(|_| z.alloc().unwrap()).collect();
    for p in warm {
        // SAFETY: items of ours, freed once.
        unsafe { z.free(p).unwrap() };
    }
    for round in 0..1000 {
        let p = z.alloc().unwrap();
        // SAFETY: `p` is ours.
        unsafe { z.free(p).unwrap() };
        // SAFETY: the second free is the bug under test; the zone must refuse it without
        // touching `p`.
        let e = unsafe { z.free(p) }.expect_err("immediate double free accepted");
        assert_eq!(e.kind, InvalidKind::DoubleFree, "round {round}");
        let msg = e.to_string();
        assert!(
            msg.contains("df-default") && msg.contains(&format!("{:#x}", p.as_ptr() as usize)),
            "{msg}"
        );
        let a = z.alloc().unwrap();
        let b = z.alloc().unwrap();
        assert_ne!(a, b, "round {round}: the same item handed out twice");
        // SAFETY: items of ours, freed once.
        unsafe {
            z.free(b).unwrap();
            z.free(a).unwrap();
        }
    }
    let s = z.snapshot();
    assert_eq!(s.invalid_frees, 1000);
    assert_eq!(s.used, 0);
    z.validate().unwrap();
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn the_raw_entry_points_refuse_it_too() {
    let _turn = crate::serial::turn(module_path!());
    // "The top of this CPU's stack" must stay one stack between the two frees (a migration in
    // between is the case the cheap check does not cover).
    pin::pin_here();
    let z = Zone::new(ZoneOptions::new("df-raw", 256)).unwrap();
    let raw = z.into_raw();
    // SAFETY: `raw` is a live zone; items are ours and freed once except the refused second
    // free of `p`.
    unsafe {
        let p = Zone::alloc_raw(raw).unwrap();
        Zone::free_raw(raw, p).unwrap();
        // The fast path reports the duplicate, the resume path turns it into the error.
        let how = Zone::free_fast_raw::<ebbtide_core::zone::Raw>(raw, p.as_ptr());
        assert_eq!(how, ebbtide_core::zone::FastFree::Duplicate);
        let e = Zone::free_raw_resume(raw, p, how).unwrap_err();
        assert_eq!(e.kind, InvalidKind::DoubleFree);
        let a = Zone::alloc_raw(raw).unwrap();
        let b = Zone::alloc_raw(raw).unwrap();
        assert_ne!(a, b);
        Zone::free_raw(raw, a).unwrap();
        Zone::free_raw(raw, b).unwrap();
        Zone::from_raw(raw).destroy().map_err(|e| e.1).unwrap();
    }
}
