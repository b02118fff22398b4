// A test binary of its own, outside tests/all/: the lazy-free tunables and mode are process-wide and read by the reclaim thread.
//! The lazy-free tunables act through the reclaim thread (which owns them): `lazy_free` decides
//! between `MADV_FREE` and `MADV_DONTNEED` for a pool shrink without pressure, `lazy_settle_ms`
//! how long a page given up waits before `MADV_FREE`, `lazy_decay_ms` when it goes back for good.
//!
//! Its own process (the options and the lazy mode are process-wide); no pressure source, so the
//! level stays Normal.

use ebbtide::PagePool;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

fn cycle(pool: &PagePool, n: usize) {
    let pages: Vec<NonNull<u8>> = (0..n).map(|_| pool.get().unwrap()).collect();
    for p in &pages {
        // SAFETY: whole pages of ours.
        unsafe { p.as_ptr().write_bytes(5, 4096) };
    }
    for p in pages {
        // SAFETY: pages of this pool, put back once.
        unsafe { pool.put(p).unwrap() };
    }
}

#[path = "support/pool_stats.rs"]
mod pool_stats;

/// Bytes of every page the test's pool holds (free or in use).
fn held() -> u64 {
    pool_stats::of("lazy-tunables").pages_mapped * 4096
}

fn global() -> ebbtide::stats::GlobalStats {
    ebbtide::stats::collect().global
}

/// Waits up to `limit` for `f` to hold; returns how long it took.
fn within(limit: Duration, f: impl Fn() -> bool) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return Some(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn lazy_tunables_change_how_pages_leave() {
    ebbtide::options::set("sources", "none").unwrap();
    ebbtide::options::set("lazy_settle_ms", "60000").unwrap();
    ebbtide::options::set("lazy_decay_ms", "600000").unwrap();
    const N: usize = 1024;
    // The first zone starts the reclaim thread, which applies the tunables.
    let pool = PagePool::new("lazy-tunables", 0).unwrap();
    assert!(
        within(Duration::from_secs(5), ebbtide::lazy::enabled).is_some(),
        "the reclaim thread did not turn lazy_free on"
    );
    assert_eq!(ebbtide::lazy::settle_ms(), 60_000);

    // lazy_settle_ms 60 s: given up, settling, not offered. The pool holds the N pages and what
    // a miss imported beyond the one it served (a refill batch per CPU at most).
    cycle(&pool, N);
    let bytes = held();
    let slack = pool_stats::refill_slack();
    assert!(bytes >= (N * 4096) as u64 && bytes <= (N * 4096) as u64 + slack);
    assert_eq!(pool.shrink(), 0);
    let g = global();
    assert_eq!((g.lazy_pending_bytes, g.lazy_bytes), (bytes, 0));

    // lazy_settle_ms 0 at run time: the next decay step (every pool_shrink_interval_ms) offers
    // them with MADV_FREE.
    ebbtide::options::set("lazy_settle_ms", "0").unwrap();
    assert!(
        within(Duration::from_secs(5), || global().lazy_bytes == bytes).is_some(),
        "not offered after lazy_settle_ms=0: {:?}",
        global()
    );

    // lazy_decay_ms 200: they go back for good within about 200 ms + one check interval.
    let released0 = global().released_bytes;
    ebbtide::options::set("lazy_decay_ms", "200").unwrap();
    let took = within(Duration::from_secs(5), || {
        let g = global();
        g.lazy_bytes == 0 && g.lazy_pending_bytes == 0
    });
    assert!(took.is_some(), "no decay: {:?}", global());
    assert!(global().released_bytes - released0 >= bytes);

    // lazy_free false: a shrink without pressure gives pages back at once.
    ebbtide::options::set("lazy_free", "false").unwrap();
    assert!(within(Duration::from_secs(5), || !ebbtide::lazy::enabled()).is_some());
    cycle(&pool, N);
    let bytes = held();
    assert_eq!(pool.shrink() as u64, bytes, "MADV_DONTNEED at once");
    let g = global();
    assert_eq!((g.lazy_pending_bytes, g.lazy_bytes), (0, 0));
    pool.destroy().map_err(|e| e.1).unwrap();
}
