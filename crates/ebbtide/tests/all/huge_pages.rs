//! A dense zone's huge pages as the statistics show them (issue 42): a zone that holds more than
//! `HUGE_AFTER` (32 MiB) of slabs makes its chunks huge pages, two each; they show in `huge_pages` and
//! the process's `AnonHugePages`, and a DRAIN_CPU gives them back — each chunk's second whole
//! (`huge_released`), its first (the descriptors') by its slabs — with nothing left in huge pages.

use ebbtide::{Request, Zone, ZoneOptions};
use std::ptr::NonNull;

/// `AnonHugePages` of this process, in kB.
fn anon_huge_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .map(|v| v.trim().trim_end_matches("kB").trim().parse().unwrap())
        .unwrap()
}

fn zone_stats(name: &str) -> ebbtide::stats::ZoneStats {
    ebbtide::stats::collect()
        .zones
        .into_iter()
        .find(|z| z.name == name)
        .unwrap()
}

#[test]
fn a_dense_zone_shows_its_huge_pages_and_gives_them_back_whole() {
    let _turn = crate::serial::turn(module_path!());
    let _ = ebbtide::options::set("reclaim_thread", "false");
    let name = "huge-pages-256";
    let z = Zone::new(ZoneOptions::new(name, 256)).unwrap();
    let huge_before = anon_huge_kb();
    // 64 MiB of items: from 32 MiB on, the zone's chunks are huge pages, the older ones too.
    let n = (64 << 20) / 256;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let p = z.alloc().unwrap();
        // SAFETY: an item of ours, 256 bytes.
        unsafe { p.as_ptr().write_bytes(0x5a, 256) };
        v.push(p);
    }
    let s = zone_stats(name);
    // 64 MiB in 17 chunks, every one huge once the zone held 32 MiB (the older ones made huge
    // then), two huge pages each (the newest chunk's second may not be reached yet).
    assert!((31..=36).contains(&s.huge_pages), "{s:?}");
    assert_eq!((s.huge_broken, s.huge_released), (0, 0));
    // The chunks taken before 32 MiB are on 4 KiB pages until collapsed: the reclaim thread's
    // next pass over the pools does it (off here: called as it would).
    let small = anon_huge_kb().saturating_sub(huge_before);
    assert!(
        ebbtide::reclaim::collapse_pending() >= 14,
        "the older chunks' pages collapsed"
    );
    let in_huge = anon_huge_kb().saturating_sub(huge_before);
    // More of the process in huge pages (by how much depends on what else the process frees).
    assert!(in_huge > small, "{small} kB, then {in_huge} kB");
    let collapsed = zone_stats(name).huge_collapsed;
    assert!(collapsed >= 14, "huge_collapsed {collapsed}");
    // The kernel may fall back to small pages when it has no free huge page; a machine that has
    // memory to spare (every one this runs on) backs most of them.
    assert!(
        in_huge >= 2048 * (s.huge_pages - 2),
        "{in_huge} kB in huge pages for {} huge pages",
        s.huge_pages
    );
    for p in v.drain(..) {
        // SAFETY: allocated above, freed once.
        unsafe { z.free(NonNull::new_unchecked(p.as_ptr())).unwrap() };
    }
    ebbtide::reclaim::reclaim_all(Request::DrainCpu);
    let s = zone_stats(name);
    // The second huge page of every huge chunk but the newest went back whole (the first
    // holds the descriptors: broken).
    assert!(s.huge_released >= 14, "{s:?}");
    assert_eq!((s.huge_pages, s.huge_partly_used), (0, 0), "{s:?}");
    assert!(
        anon_huge_kb() <= huge_before,
        "huge pages left after the drain"
    );
    z.destroy().map_err(|e| e.1).unwrap();
}
