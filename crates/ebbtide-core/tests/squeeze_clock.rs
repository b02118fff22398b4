// A test binary of its own, outside tests/all/: it drives the process-wide fake clock from the process's start.
//! The squeeze window on the core's one time base, driven by a fake clock: it opens for exactly
//! its duration, extends but never shortens, and closes caches meanwhile. (Its own test binary:
//! the fake clock is process-wide.)

use ebbtide_core::os::fault::set_fake_clock;
use ebbtide_core::reclaim::{self, Response};
use ebbtide_core::{Zone, ZoneOptions};

#[test]
fn squeeze_window_follows_the_fake_clock() {
    let t0 = 1_000_000_000_000u64;
    set_fake_clock(Some(t0));
    let z = Zone::new(ZoneOptions::new("squeeze-clock", 128)).unwrap();
    let items: Vec<_> = (0..256).map(|_| z.alloc().unwrap()).collect();
    for p in items {
        // SAFETY: items of ours, freed once.
        unsafe { z.free(p).unwrap() };
    }
    assert!(z.snapshot().free > 0);
    assert!(!reclaim::squeezing_now());

    reclaim::respond(Response {
        squeeze_ns: Some(10_000_000),
        ..Response::default()
    });
    assert_eq!(reclaim::squeeze_until(), t0 + 10_000_000);
    assert!(reclaim::squeezing_now());
    let s = z.snapshot();
    assert_eq!((s.cached_items_pcpu, s.cached_bytes_depot), (0, 0), "{s:?}");
    // While the window is open a free goes straight to its slab (nothing cached).
    let p = z.alloc().unwrap();
    // SAFETY: ours, freed once.
    unsafe { z.free(p).unwrap() };
    assert_eq!(z.snapshot().cached_items_pcpu, 0);

    // A shorter window does not shorten it; a longer one extends it.
    set_fake_clock(Some(t0 + 5_000_000));
    reclaim::squeeze(1_000_000);
    assert_eq!(reclaim::squeeze_until(), t0 + 10_000_000);
    reclaim::squeeze(20_000_000);
    assert_eq!(reclaim::squeeze_until(), t0 + 25_000_000);

    set_fake_clock(Some(t0 + 24_999_999));
    assert!(reclaim::squeezing_now());
    set_fake_clock(Some(t0 + 25_000_000));
    assert!(
        !reclaim::squeezing_now(),
        "closed at its end, to the nanosecond"
    );
    assert_eq!(z.snapshot().squeeze_windows, 3);
    set_fake_clock(None);
    z.destroy().map_err(|e| e.1).unwrap();
}
