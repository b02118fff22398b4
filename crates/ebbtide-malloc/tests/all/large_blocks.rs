//! Blocks above the size classes (the page heap, `pageheap.rs`, and the block table,
//! `huge.rs`) through the C names, in process: memory freed as one size serves another without
//! page faults; freed space that nothing takes again goes back at the free (beyond
//! `DIRTY_FLOOR`); the cached runs go back on `malloc_trim`, a squeeze and the idle pass, a
//! pressure trim keeps only what was reused, and they count in `mallinfo2` and the core's
//! cached bytes; `realloc` keeps contents in place and when it moves.
//!
//! The tests share the process's one page heap, so they run one at a time (`SERIAL`). Every
//! block goes through `black_box`: the compiler knows `malloc` and `free` by name and removes
//! a pair whose block is only written (it did, and a test saw no block freed).

use ebbtide_core::outer::OuterCache;
use ebbtide_malloc::{api, huge, pageheap};
use std::hint::black_box;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

/// One test at a time, no squeeze open.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    ebbtide_core::reclaim::end_squeeze();
    g
}

/// Runs `f` with no squeeze window open, until neither a window opened nor anyone asked the
/// page heap to give memory back while it ran (at most five times), and returns what it
/// returned: the runtime started in this process reacts to the system's memory pressure (the
/// cgroup tests before these put some there) with squeezes and trims, and one between a
/// test's frees and its check gives the page heap's cache back (both cache checks failed in a
/// full run, once with a squeeze, once since with no new window: a trim, or a window already
/// open when `f` started).
fn calm<R>(mut f: impl FnMut() -> R) -> R {
    for _ in 0..5 {
        ebbtide_core::reclaim::end_squeeze();
        let before = (
            ebbtide_core::reclaim::squeeze_until(),
            huge::release_passes(),
        );
        let r = f();
        if (
            ebbtide_core::reclaim::squeeze_until(),
            huge::release_passes(),
        ) == before
        {
            return r;
        }
    }
    panic!("the page heap was squeezed or trimmed during each of five tries: the system is under pressure");
}

/// `malloc(n)`, the block hidden from the optimiser.
///
/// # Safety
/// As `malloc`.
unsafe fn malloc(n: usize) -> *mut u8 {
    // SAFETY: forwarded.
    black_box(unsafe { api::malloc(n) }).cast()
}

/// `free(p)` of a block from [`malloc`].
///
/// # Safety
/// As `free`.
unsafe fn free<T>(p: *mut T) {
    // SAFETY: forwarded.
    unsafe { api::free(black_box(p).cast()) }
}

/// `realloc(p, n)`, the block hidden from the optimiser.
///
/// # Safety
/// As `realloc`.
unsafe fn realloc(p: *mut u8, n: usize) -> *mut u8 {
    // SAFETY: forwarded.
    black_box(unsafe { api::realloc(black_box(p).cast(), n) }).cast()
}

const K: usize = 1024;
const M: usize = 1024 * 1024;

fn page() -> usize {
    ebbtide_core::os::page_size()
}

/// Pages of `[p, p+len)` resident now (`p` page-aligned).
fn resident(p: *mut u8, len: usize) -> usize {
    let mut v = vec![0u8; len.div_ceil(page())];
    // SAFETY: the range is mapped (a block or a free run of the page heap, whose pages stay
    // mapped); v has one byte per page.
    let r = unsafe { libc::mincore(p.cast(), len, v.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore");
    v.iter().filter(|&&b| b & 1 == 1).count()
}

/// Minor page faults of this thread so far.
fn faults() -> i64 {
    // SAFETY: getrusage writes the struct we pass.
    let mut u: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: `&mut u` is valid for writes of one `rusage`.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
    u.ru_minflt
}

fn touch(p: *mut u8, n: usize, v: u8) {
    for o in (0..n).step_by(page()) {
        // SAFETY: o < n, inside a live block of n bytes.
        unsafe { *p.add(o) = v.wrapping_add((o / page()) as u8) };
    }
}

fn holds(p: *mut u8, n: usize, v: u8) -> bool {
    // SAFETY: every offset read is below n, inside a live block.
    (0..n)
        .step_by(page())
        .all(|o| unsafe { *p.add(o) } == v.wrapping_add((o / page()) as u8))
}

#[test]
fn memory_freed_as_one_size_serves_others_without_faults() {
    let _turn = crate::serial::turn(module_path!());
    let _s = alone();
    // SAFETY: every block is used within its size and freed once.
    unsafe {
        let a = malloc(M);
        let guard = malloc(200 * K); // keeps `a` from merging with top
        api::malloc_trim(0); // no other dirty run: the best fit is the one freed below
        touch(a, M, 1);
        let cached = huge::cached_bytes();
        free(a);
        assert!(
            huge::cached_bytes() >= cached + M,
            "the freed megabyte stays cached"
        );
        assert_eq!(resident(a, M), M / page(), "and resident");
        let f0 = faults();
        // Two other sizes, both from the freed megabyte (best fit): no page faults.
        let b = malloc(700 * K);
        let c = malloc(300 * K);
        touch(b, 700 * K, 2);
        touch(c, 300 * K, 3);
        let f1 = faults();
        assert!(
            (b as usize) >= a as usize && (b as usize) + 700 * K <= a as usize + M,
            "700 KiB at {b:p} not in the freed run at {a:p}"
        );
        assert!(
            (c as usize) >= a as usize && (c as usize) + 300 * K <= a as usize + M,
            "300 KiB at {c:p} not in the freed run at {a:p}"
        );
        assert!(f1 - f0 < 10, "{} page faults for reused memory", f1 - f0);
        // calloc over reused (dirty) memory is still zeroed.
        free(b);
        let z = black_box(api::calloc(600, K)).cast::<u8>();
        // SAFETY: a block of 600 KiB.
        assert!(core::slice::from_raw_parts(z, 600 * K)
            .iter()
            .all(|&x| x == 0));
        for p in [z, c, guard] {
            free(p);
        }
        huge::validate().unwrap();
    }
}

#[test]
fn cached_runs_go_back_on_trim_squeeze_and_idle() {
    let _turn = crate::serial::turn(module_path!());
    let _s = alone();
    // SAFETY: every block is used within its size and freed once.
    unsafe {
        // malloc_trim (DRAIN_CPU): everything cached goes. What is cached is what a program
        // reuses: a first round of blocks freed (given back at the free, nothing had taken
        // freed space again), a second round in the same space, freed and kept.
        let guard0 = malloc(64 * K + 1);
        let first: Vec<*mut u8> = (0..8).map(|_| malloc(2 * M)).collect();
        let guard1 = malloc(64 * K + 1);
        for &p in &first {
            free(p);
        }
        let (blocks, cached) = calm(|| {
            let blocks: Vec<*mut u8> = (0..8).map(|_| malloc(2 * M)).collect();
            for &p in &blocks {
                touch(p, 2 * M, 5);
            }
            for &p in &blocks {
                free(p);
            }
            (blocks, huge::cached_bytes())
        });
        assert!(cached >= 16 * M);
        let info = api::mallinfo2();
        assert!(
            info.fordblks >= cached && info.keepcost >= cached,
            "{info:?}"
        );
        assert!(
            ebbtide_core::reclaim::cached_bytes() >= 16 * M as u64,
            "the budget's figure counts the page heap"
        );
        assert_eq!(api::malloc_trim(0), 1);
        assert_eq!(huge::cached_bytes(), 0);
        for &p in &blocks {
            assert_eq!(resident(p, 2 * M), 0, "freed runs given back");
        }
        free(guard0);
        free(guard1);

        // A squeeze drains, and a block freed inside it is not kept. (The space of the blocks
        // above was reused within this period or the last: a 3 MiB block freed is kept.)
        let a = malloc(3 * M);
        let b = malloc(3 * M);
        touch(a, 3 * M, 6);
        touch(b, 3 * M, 7);
        free(a);
        assert!(huge::cached_bytes() >= 3 * M);
        ebbtide_core::reclaim::squeeze(200_000_000);
        assert_eq!(huge::cached_bytes(), 0);
        free(b);
        assert_eq!(huge::cached_bytes(), 0, "nothing kept while squeezing");
        assert_eq!(resident(b, 3 * M), 0);
        ebbtide_core::reclaim::end_squeeze();

        // The idle pass: runs freed more than IDLE_NS ago go, newer ones stay.
        let c = malloc(M);
        let guard = malloc(64 * K + 1);
        touch(c, M, 8);
        free(c);
        let now = ebbtide_core::os::now_ns();
        assert_eq!(huge::HugeCache.periodic(now), 0, "freed just now: kept");
        assert!(huge::cached_bytes() >= M);
        // Idle: it goes at the next pass, or, in a huge region still in use (c's megabyte and
        // the guard's region), once the working set no longer covers it: at most two passes
        // later (docs/design/hugepage-heap.md).
        let given: usize = (1..=3)
            .map(|k| huge::HugeCache.periodic(now + k * (pageheap::IDLE_NS + 1)))
            .sum();
        assert!(given >= M, "{given}");
        assert_eq!(huge::cached_bytes(), 0);
        assert_eq!(resident(c, M), 0);
        free(guard);
        huge::validate().unwrap();
    }
}

#[test]
fn a_pressure_trim_keeps_only_what_was_reused() {
    let _turn = crate::serial::turn(module_path!());
    let _s = alone();
    // SAFETY: every block is used within its size and freed once.
    unsafe {
        api::malloc_trim(0);
        // A burst freed just now, that nobody took again: given back at the frees beyond
        // `DIRTY_FLOOR`, and a Low pressure's trim (the request the reclaim thread makes) gives
        // the rest back though none of it is idle yet.
        let blocks: Vec<*mut u8> = (0..6).map(|_| malloc(M)).collect();
        let guard = malloc(64 * K + 1);
        // Two idle passes: no demand remembered from before, the blocks' own placement (into
        // free space the tests before left, packed into regions in use) included.
        let now = ebbtide_core::os::now_ns();
        huge::HugeCache.periodic(now);
        huge::HugeCache.periodic(now);
        for &p in &blocks {
            touch(p, M, 3);
        }
        for &p in &blocks {
            free(p);
        }
        assert!(
            huge::cached_bytes() <= pageheap::DIRTY_FLOOR,
            "{} kept of 6 MiB nobody reused",
            huge::cached_bytes()
        );
        assert!(
            blocks.iter().map(|&p| resident(p, M)).sum::<usize>() <= pageheap::DIRTY_FLOOR / page(),
            "given back at the frees"
        );
        ebbtide_core::reclaim::reclaim_all(ebbtide_core::reclaim::Request::Trim);
        assert_eq!(huge::cached_bytes(), 0, "nothing reused: nothing kept");
        for &p in &blocks {
            assert_eq!(resident(p, M), 0);
        }
        // A program that keeps reusing its freed blocks keeps (about) what it reuses.
        let held = calm(|| {
            let a = malloc(2 * M);
            touch(a, 2 * M, 4);
            free(a);
            for _ in 0..3 {
                // From the run a left (clean: its free gave it back, then dirty).
                let b = malloc(2 * M);
                touch(b, 2 * M, 5);
                free(b);
            }
            huge::cached_bytes()
        });
        assert!(held >= 2 * M);
        ebbtide_core::reclaim::reclaim_all(ebbtide_core::reclaim::Request::Trim);
        assert!(
            huge::cached_bytes() >= 2 * M,
            "the reused run stays: {} of {held}",
            huge::cached_bytes()
        );
        free(guard);
        api::malloc_trim(0);
        huge::validate().unwrap();
    }
}

#[test]
fn realloc_keeps_contents_in_place_and_moved() {
    let _turn = crate::serial::turn(module_path!());
    let _s = alone();
    // SAFETY: every block is used within its size and freed once.
    unsafe {
        let a = malloc(200 * K);
        touch(a, 200 * K, 11);
        let guard = malloc(100 * K);
        // Shrinking is in place (the tail becomes a free run).
        let b = realloc(a, 100 * K);
        assert_eq!(b, a);
        assert!(holds(b, 100 * K, 11));
        // Growing into the run just freed is in place too.
        let c = realloc(b, 180 * K);
        assert_eq!(c, a, "grown into its own freed tail");
        assert!(holds(c, 100 * K, 11));
        touch(c, 180 * K, 12);
        // A live block right after it: growing moves, with the contents.
        let (x, y) = adjacent_pair();
        touch(x, 300 * K, 13);
        let d = realloc(x, 2 * M);
        assert_ne!(d, x, "a live block follows: it had to move");
        assert!(holds(d, 300 * K, 13));
        free(y);
        free(c);
        // Out of the page heap and back into a size class, contents kept.
        let e = realloc(d, 80 * M);
        assert!(holds(e, 300 * K, 13));
        let f = realloc(e, 1000);
        assert_eq!(*f, 13);
        free(f);
        free(guard);
        huge::validate().unwrap();
    }
}

/// Two live blocks of 300 KiB, the second right after the first (from a fresh 600 KiB run:
/// best fit cuts both from its start).
unsafe fn adjacent_pair() -> (*mut u8, *mut u8) {
    // SAFETY: blocks used within their sizes; the 600 KiB one freed once.
    unsafe {
        let r = malloc(600 * K);
        touch(r, 600 * K, 1);
        let guard = malloc(100 * K); // r's run cannot merge with what follows it
        api::malloc_trim(0); // every other free run is clean: r's is the only dirty one
        free(r);
        let x = malloc(300 * K);
        let y = malloc(300 * K);
        assert_eq!((x, y), (r, r.add(300 * K)), "both from the freed run");
        free(guard);
        (x, y)
    }
}
