//! A page pool's stash (`zone/stash.rs`), driven step by step without the reclaim thread: the
//! pages a shrink gives back lazily leave the pool (no free page, nothing mapped, counted as
//! lazily freed) and the next round gets the very same pages back without the slabs; those
//! that settle move to the keg's lazy list and are offered with `MADV_FREE`; pressure, a
//! purge and lazy freeing turned off give them back at once; what does not fit takes the
//! slabs' way; a pool with stashed pages can be destroyed. One test: the lazy mode is global.

use ebbtide_core::{lazy, reclaim, PagePool};
use std::collections::HashSet;
use std::ptr::NonNull;

const ROUND: usize = 352; // the seed's dd: 32 requests of 11 segments

fn ps() -> usize {
    ebbtide_core::os::page_size()
}

fn get(pool: &PagePool, n: usize) -> Vec<NonNull<u8>> {
    (0..n)
        .map(|i| {
            let p = pool.get().unwrap();
            // SAFETY: a whole page of ours.
            unsafe { p.as_ptr().write_bytes(i as u8, ps()) };
            p
        })
        .collect()
}

fn put(pool: &PagePool, v: &[NonNull<u8>]) {
    for &p in v {
        // SAFETY: pages of this pool, put back once.
        unsafe { pool.put(p).unwrap() };
    }
}

/// A round of `ROUND` pages, put back, then the pool's shrink; returns the pages stashed.
fn round_then_shrink(pool: &PagePool) -> usize {
    let v = get(pool, ROUND);
    put(pool, &v);
    pool.shrink();
    check(pool).stashed
}

fn check(pool: &PagePool) -> ebbtide_core::zone::ZoneCheck {
    let c = pool.zone().validate().unwrap();
    assert_eq!(
        c.items_mapped,
        c.used + c.pcpu + c.depot + c.free_in_slabs,
        "{c:?}"
    );
    c
}

#[test]
fn a_lazy_shrink_stashes_its_pages_and_the_next_round_takes_them_back() {
    let _turn = crate::serial::turn(module_path!());
    let ps = ps();
    // Lazy freeing on, a settle delay no step below reaches by itself, no decay.
    reclaim::configure_lazy(true, 600_000, 600_000);
    lazy::set_pressure(false);
    let pool = PagePool::new("test-stash", 0).unwrap();

    // 1. A round, then the shrink to 0 (the seed's worst case): every page leaves the pool.
    // (The last refill may have brought a few pages more than the round took: `extra`.)
    let first = get(&pool, ROUND);
    put(&pool, &first);
    assert_eq!(pool.shrink(), 0, "lazily: nothing given back to the OS yet");
    let s = pool.snapshot();
    assert_eq!((s.free_pages, s.pages_in_use), (0, 0), "{s:?}");
    assert_eq!(
        s.zone.mapped_bytes, 0,
        "stashed pages are not mapped: {s:?}"
    );
    let n0 = check(&pool).stashed;
    let extra = n0 - ROUND;
    assert!(extra < 64, "{n0} stashed");
    assert_eq!(s.zone.lazy_bytes, (n0 * ps) as u64, "{s:?}");
    // Settling, but on no keg's lazy list: a zone's room-making (`zone::make_room`, which
    // walks the kegs' lazy lists) has nothing to look for.
    assert_eq!(lazy::lazy_pending_bytes(), (n0 * ps) as u64);
    assert_eq!(lazy::keg_lazy_bytes(), 0);

    // 2. The next round gets the same pages, all from the stash (counted as lazy reuse).
    let reused0 = s.zone.lazy_reused_bytes;
    let second = get(&pool, ROUND);
    let s = pool.snapshot();
    // (A refill takes what the stack has room for: the whole stash here.)
    assert_eq!(
        s.zone.lazy_reused_bytes - reused0,
        (n0 * ps) as u64,
        "{s:?}"
    );
    assert_eq!(s.zone.lazy_bytes, 0, "{s:?}");
    assert_eq!(s.zone.mapped_bytes, (n0 * ps) as u64, "no new page: {s:?}");
    let a: HashSet<_> = first.iter().collect();
    let b: HashSet<_> = second.iter().collect();
    assert!(
        b.difference(&a).count() <= extra,
        "the stash handed back the pages it was given"
    );
    assert_eq!(check(&pool).stashed, 0);
    assert_eq!(s.pages_in_use, ROUND as u64);

    // 3. Pressure empties the stash at the next shrink, with MADV_DONTNEED.
    put(&pool, &second);
    pool.shrink();
    assert_eq!(check(&pool).stashed, n0);
    lazy::set_pressure(true);
    let back = pool.shrink();
    lazy::set_pressure(false);
    assert_eq!(back, n0 * ps, "under pressure the stash goes back at once");
    let s = pool.snapshot();
    assert_eq!((s.zone.mapped_bytes, s.zone.lazy_bytes), (0, 0), "{s:?}");
    assert_eq!(check(&pool).stashed, 0);

    // 4. A purge of every lazily freed page (what a pressure reclaim does) takes the stash too.
    assert!(round_then_shrink(&pool) >= ROUND);
    assert!(reclaim::purge_lazy_all() >= ROUND * ps);
    assert_eq!(check(&pool).stashed, 0);
    assert_eq!(pool.snapshot().zone.lazy_bytes, 0);

    // 5. Pages that settled move to the lazy list, offered with MADV_FREE, stamped when they
    //    were given up; the decay then gives them back for good.
    reclaim::configure_lazy(true, 1, 600_000);
    assert!(round_then_shrink(&pool) >= ROUND);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let offered = lazy::lazy_bytes();
    reclaim::decay_lazy(lazy::now_ms());
    let c = check(&pool);
    assert_eq!(c.stashed, 0);
    assert_eq!(c.items_mapped, 0, "{c:?}");
    assert!(lazy::lazy_bytes() >= offered + (ROUND * ps) as u64);
    assert!(pool.snapshot().zone.lazy_bytes >= (ROUND * ps) as u64);
    reclaim::configure_lazy(true, 1, 0);
    reclaim::decay_lazy(lazy::now_ms().wrapping_add(10));
    assert_eq!(pool.snapshot().zone.lazy_bytes, 0, "decayed for good");

    // 6. More than the stash holds: the rest takes the slabs' way (the lazy list), and both
    //    come back.
    reclaim::configure_lazy(true, 600_000, 600_000);
    let big = 1500;
    let v = get(&pool, big);
    put(&pool, &v);
    pool.shrink();
    let c = check(&pool);
    assert!(c.stashed > 0 && c.stashed < big, "{c:?}");
    let lazy_now = pool.snapshot().zone.lazy_bytes;
    assert!(
        lazy_now >= (big * ps) as u64 && lazy_now < ((big + 64) * ps) as u64,
        "{lazy_now}"
    );
    assert_eq!(pool.snapshot().free_pages, 0);
    let v = get(&pool, big);
    assert_eq!(check(&pool).stashed, 0);
    put(&pool, &v);

    // 7. Lazy freeing turned off gives the stash back; so does a shrink with no settle delay
    //    (pages are then offered at once, the slabs' way).
    pool.shrink();
    assert!(check(&pool).stashed > 0);
    reclaim::configure_lazy(false, 600_000, 600_000);
    assert_eq!(check(&pool).stashed, 0);
    assert_eq!(pool.snapshot().zone.mapped_bytes, 0);
    reclaim::configure_lazy(true, 600_000, 600_000);
    assert!(round_then_shrink(&pool) >= ROUND);
    reclaim::configure_lazy(true, 0, 600_000);
    pool.shrink();
    assert_eq!(check(&pool).stashed, 0);
    assert_eq!(pool.snapshot().zone.mapped_bytes, 0);

    // 8. A pool holding stashed pages is destroyed like any empty pool.
    reclaim::configure_lazy(true, 600_000, 600_000);
    assert!(round_then_shrink(&pool) >= ROUND);
    pool.destroy().map_err(|e| e.1).unwrap();

    // 9. A pool with a cap keeps that many free pages; only those beyond it are stashed.
    let capped = PagePool::new("test-stash-16", 16).unwrap();
    let v = get(&capped, 200);
    put(&capped, &v);
    capped.shrink();
    let s = capped.snapshot();
    assert_eq!(s.free_pages, 16, "{s:?}");
    let c = check(&capped);
    assert!(c.stashed >= 200 - 16 && c.stashed < 200, "{c:?}");
    assert_eq!(c.items_mapped, 16, "only the kept pages stay mapped: {c:?}");
    capped.destroy().map_err(|e| e.1).unwrap();
    reclaim::configure_lazy(false, 0, 1000);
}
