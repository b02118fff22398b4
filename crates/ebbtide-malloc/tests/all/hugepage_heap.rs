//! The page heap by hugepage (issue 42, docs/design/hugepage-heap.md), in process through the C
//! names: blocks of 4 MiB fill 2 MiB regions that are eligible for huge pages before their
//! first touch (backed by huge pages where THP is not `never`), a small block alone stays on
//! small pages, and a drain (`malloc_trim(0)`) gives a freed 64 MiB set back as whole 2 MiB
//! regions: counted whole, nothing in part, no huge page broken, no page left resident, the
//! huge pages gone from `AnonHugePages`.
//!
//! The tests share the process's one page heap, so they run one at a time (`SERIAL`).

use ebbtide_malloc::{api, huge, regions::REGION};
use std::hint::black_box;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

const K: usize = 1024;
const M: usize = 1024 * 1024;

fn alone() -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ebbtide_core::reclaim::end_squeeze();
    g
}

/// `malloc(n)`, hidden from the optimiser.
///
/// # Safety
/// As `malloc`.
unsafe fn malloc(n: usize) -> *mut u8 {
    // SAFETY: forwarded.
    black_box(unsafe { api::malloc(n) }).cast()
}

/// `free(p)`, hidden from the optimiser.
///
/// # Safety
/// As `free`.
unsafe fn free(p: *mut u8) {
    // SAFETY: forwarded.
    unsafe { api::free(black_box(p).cast()) }
}

fn page() -> usize {
    ebbtide_core::os::page_size()
}

fn touch(p: *mut u8, n: usize) {
    for o in (0..n).step_by(page()) {
        // SAFETY: o < n, inside a live block of n bytes.
        unsafe { *p.add(o) = 1 };
    }
}

/// Pages of `[p, p+len)` resident now.
fn resident(p: usize, len: usize) -> usize {
    let mut v = vec![0u8; len.div_ceil(page())];
    // SAFETY: the range is the page heap's, mapped; v has one byte per page.
    let r = unsafe { libc::mincore(p as *mut libc::c_void, len, v.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore");
    v.iter().filter(|&&b| b & 1 == 1).count()
}

/// THP's mode (`always`, `madvise`, `never`), or `None` without THP.
fn thp_mode() -> Option<String> {
    let t = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let a = t.find('[')?;
    let b = a + t[a..].find(']')?;
    Some(t[a + 1..b].to_string())
}

/// One mapping of `/proc/self/smaps`: its range, `AnonHugePages` in bytes, `THPeligible`.
struct Mapping {
    start: usize,
    end: usize,
    huge: usize,
    eligible: bool,
}

/// The mappings of this process overlapping `[lo, hi)`.
fn mappings(lo: usize, hi: usize) -> Vec<Mapping> {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut found: Vec<Mapping> = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = head.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = a < hi && b > lo;
                if inside {
                    found.push(Mapping {
                        start: a,
                        end: b,
                        huge: 0,
                        eligible: true,
                    });
                }
                continue;
            }
        }
        let Some(m) = found.last_mut().filter(|_| inside) else {
            continue;
        };
        if let Some(v) = line.strip_prefix("AnonHugePages:") {
            m.huge = v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<usize>()
                .unwrap()
                * K;
        } else if let Some(v) = line.strip_prefix("THPeligible:") {
            m.eligible = v.trim() == "1";
        }
    }
    found
}

/// The mappings overlapping `[lo, hi)`, one line each (range, `AnonHugePages`, `THPeligible`):
/// what a failed assertion about them shows.
fn smaps_entries(lo: usize, hi: usize) -> String {
    mappings(lo, hi)
        .iter()
        .map(|m| {
            format!(
                "\n  {:#x}-{:#x} ({} KiB) AnonHugePages {} KiB THPeligible {}",
                m.start,
                m.end,
                (m.end - m.start) / K,
                m.huge / K,
                u8::from(m.eligible)
            )
        })
        .collect()
}

/// For the mappings of this process overlapping `[lo, hi)`: the sum of their `AnonHugePages`
/// in bytes, and whether every one is `THPeligible: 1`.
fn smaps(lo: usize, hi: usize) -> (usize, bool) {
    let found = mappings(lo, hi);
    (
        found.iter().map(|m| m.huge).sum(),
        found.iter().all(|m| m.eligible),
    )
}

#[test]
fn a_drain_gives_a_freed_64_mib_set_back_in_whole_hugepages() {
    let _turn = crate::serial::turn(module_path!());
    let _s = alone();
    let thp = thp_mode();
    let huge_pages = thp.as_deref().is_some_and(|m| m != "never");
    // SAFETY: every block is used within its size and freed once.
    unsafe {
        api::malloc_trim(0);
        // What is cached is what the program reuses: a first round freed (given back at the
        // free), a second in the same space, touched, freed and kept.
        let first: Vec<*mut u8> = (0..16).map(|_| malloc(4 * M)).collect();
        // Blocks above the first round keep its runs below `top` (runs at `top` lower it, and
        // the space above `top` is no working set): a small block would go into a region in
        // use elsewhere, and a 4 MiB one into free space below, if there is some.
        let mut guards = vec![malloc(4 * M)];
        let last = *first.iter().max().unwrap();
        while guards.iter().all(|&g| g < last) {
            guards.push(malloc(4 * M));
        }
        for &p in &first {
            free(p);
        }
        let set: Vec<*mut u8> = (0..16).map(|_| malloc(4 * M)).collect();
        let lo = set.iter().map(|&p| p as usize).min().unwrap();
        let hi = set.iter().map(|&p| p as usize).max().unwrap() + 4 * M;
        for &p in &set {
            assert_eq!(
                p as usize % REGION,
                0,
                "a block of 4 MiB starts on a region"
            );
            touch(p, 4 * M);
        }
        let c0 = huge::hugepage_counts();
        assert!(c0.huge >= 32, "the set's 32 regions are huge: {c0:?}");
        let (hp_live, eligible) = smaps(lo, hi);
        if huge_pages {
            assert!(eligible, "the set's mappings are THPeligible (THP {thp:?})");
            assert!(
                hp_live >= 2 * M,
                "THP {thp:?}: no huge page backs the set ({hp_live} bytes of AnonHugePages)"
            );
        }
        for &p in &set {
            free(p);
        }
        // Kept: freed space the heap reused (its working set), while caching is allowed (no
        // squeeze, buckets on: the runtime's reaction to the machine's pressure may switch
        // them off, and then nothing is kept — said, not hidden).
        assert!(
            huge::cached_bytes() >= 64 * M,
            "{} bytes cached of 64 MiB freed; caching allowed now: {}",
            huge::cached_bytes(),
            ebbtide_core::outer::caching_allowed()
        );
        assert_eq!(resident(lo, hi - lo), (hi - lo) / page(), "kept resident");
        let c1 = huge::hugepage_counts();
        let s1 = ebbtide::stats::collect().global;
        assert_eq!(api::malloc_trim(0), 1);
        // Read before the statistics below are collected: their buffers (a few zones' worth
        // beyond 64 KiB in a process where many tests made zones) are the page heap's blocks,
        // and the one a growing buffer leaves behind is cached again.
        assert_eq!(huge::cached_bytes(), 0);
        let c2 = huge::hugepage_counts();
        // The statistics say the same (`ebbtide stat`, Prometheus: page_heap_*).
        let s2 = ebbtide::stats::collect().global;
        assert!(
            s2.page_heap_released_whole_bytes - s1.page_heap_released_whole_bytes >= 64 * M as u64,
            "the stats' whole give-back: {} -> {}",
            s1.page_heap_released_whole_bytes,
            s2.page_heap_released_whole_bytes
        );
        assert_eq!(s2.page_heap_huge_pages, c2.huge as u64);
        assert!(
            c2.whole_bytes - c1.whole_bytes >= 64 * M as u64,
            "given back whole: {c1:?} -> {c2:?}"
        );
        assert_eq!(c2.part_bytes, c1.part_bytes, "nothing in part: {c2:?}");
        assert_eq!(c2.breaks, c1.breaks, "no huge page broken: {c2:?}");
        assert!(c2.huge <= c0.huge - 32, "no longer huge: {c2:?}");
        assert_eq!(resident(lo, hi - lo), 0, "the set's pages went back");
        let (hp_after, _) = smaps(lo, hi);
        if huge_pages {
            assert!(
                hp_after + 2 * M <= hp_live,
                "AnonHugePages {hp_live} -> {hp_after}"
            );
        }
        for g in guards {
            free(g);
        }
        huge::validate().unwrap();
    }
}

/// A small block alone in a fresh region stays on small pages (its mapping not THP-eligible):
/// small programs stay small whatever THP's mode.
#[test]
fn a_small_block_alone_stays_on_small_pages() {
    let _turn = crate::serial::turn(module_path!());
    let _s = alone();
    // SAFETY: every block is used within its size and freed once.
    unsafe {
        api::malloc_trim(0);
        // Fill up to a region boundary so that the next small block opens a fresh region.
        let big = malloc(4 * M);
        let small = malloc(256 * K);
        touch(small, 256 * K);
        let r = small as usize & !(REGION - 1);
        let (hp, eligible) = smaps(r, r + REGION);
        assert_eq!(
            hp,
            0,
            "no huge page behind a lone 256 KiB block (block {small:p}, region {r:#x}, the 4 MiB \
             block {big:p}); the mappings over the region:{}",
            smaps_entries(r, r + REGION)
        );
        if thp_mode().is_some() {
            assert!(!eligible, "its region is MADV_NOHUGEPAGE");
        }
        free(small);
        free(big);
        api::malloc_trim(0);
        huge::validate().unwrap();
    }
}
