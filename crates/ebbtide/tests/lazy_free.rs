// A test binary of its own, outside tests/all/: the lazy-free mode is process-wide.
//! Lazily freed pool pages (`MADV_FREE`): the stats agree with the kernel's `LazyFree` in
//! `/proc/self/smaps_rollup`, a reuse costs no page fault, and pressure gives them back.
//!
//! Its own process: the lazy mode is process-wide.

use ebbtide::PagePool;
use std::ptr::NonNull;

/// `LazyFree` of `/proc/self/smaps_rollup`, bytes.
fn smaps_lazyfree() -> u64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").expect("smaps_rollup");
    let line = s
        .lines()
        .find(|l| l.starts_with("LazyFree:"))
        .expect("LazyFree line");
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Minor page faults of this thread so far.
fn minflt() -> u64 {
    // SAFETY: getrusage writes into a zeroed rusage we own.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut ru), 0);
        ru.ru_minflt as u64
    }
}

#[path = "support/pool_stats.rs"]
mod pool_stats;

/// The statistics of the test's pool's zone.
fn zone_stats() -> ebbtide::stats::ZoneStats {
    pool_stats::of("lazy-smaps")
}

fn take(pool: &PagePool, n: usize) -> Vec<NonNull<u8>> {
    (0..n).map(|_| pool.get().unwrap()).collect()
}

fn touch(pages: &[NonNull<u8>], v: u8) {
    for p in pages {
        // SAFETY: whole pages of ours.
        unsafe { p.as_ptr().write_bytes(v, 4096) };
    }
}

fn give(pool: &PagePool, pages: Vec<NonNull<u8>>) {
    for p in pages {
        // SAFETY: pages from this pool, put back once.
        unsafe { pool.put(p).unwrap() };
    }
}

fn lazy_global() -> u64 {
    ebbtide::stats::collect().global.lazy_bytes
}

/// Within 1/8 of `want`, plus 64 KiB (other code of the process may leave a little LazyFree).
fn close(got: u64, want: u64) -> bool {
    got.abs_diff(want) <= want / 8 + (64 << 10)
}

#[test]
fn lazyfree_in_smaps_agrees_with_the_stats_and_reuse_is_free() {
    // No reclaim thread (it would decay or shrink behind our back); lazy mode set directly,
    // as the reclaim thread does from the lazy_free and lazy_decay_ms tunables.
    ebbtide::options::set("reclaim_thread", "false").unwrap();
    ebbtide::options::set("sources", "none").unwrap();
    ebbtide::lazy::configure(true, 0, 600_000);
    if !ebbtide::lazy::enabled() {
        panic!("lazy mode did not stay on");
    }
    const N: usize = 4096; // 16 MiB
    let pool = PagePool::new("lazy-smaps", 0).unwrap();
    let base = smaps_lazyfree();
    let pages = take(&pool, N);
    touch(&pages, 1);
    give(&pool, pages);
    // Every page the pool holds now: the N handed out, and what a miss imported beyond the one
    // it served (at most a refill batch per CPU, never handed out, never touched).
    let held = zone_stats().pages_mapped * 4096;
    let slack = pool_stats::refill_slack();
    assert!(
        held >= (N * 4096) as u64 && held <= (N * 4096) as u64 + slack,
        "{held}"
    );
    // The shrink to max_buffer_pages (0) without pressure: lazily.
    assert_eq!(pool.shrink(), 0, "nothing given back at once");
    let s = ebbtide::stats::collect();
    let ps = zone_stats();
    assert_eq!(ps.lazy_bytes, held);
    assert_eq!(ps.lazy_freed_bytes, held);
    assert_eq!(s.global.lazy_bytes, held);
    let k = smaps_lazyfree() - base.min(smaps_lazyfree());
    assert!(
        close(k, lazy_global()),
        "smaps LazyFree {k} vs stats {}",
        lazy_global()
    );

    // Reuse half: no page fault (the kernel did not need the pages), and LazyFree drops with it.
    let f0 = minflt();
    let again = take(&pool, N / 2);
    touch(&again, 2);
    let faults = minflt() - f0;
    assert!(
        faults < (N / 2 / 10) as u64,
        "{faults} minor faults reusing {} lazily freed pages",
        N / 2
    );
    // What the takes imported back from the lazily freed slabs: the N/2 pages and a batch's
    // worth at most per CPU.
    let reused = zone_stats().lazy_reused_bytes;
    assert!(
        reused >= (N / 2 * 4096) as u64 && reused <= (N / 2 * 4096) as u64 + slack,
        "{reused}"
    );
    assert_eq!(lazy_global(), held - reused);
    let k = smaps_lazyfree().saturating_sub(base);
    assert!(
        close(k, lazy_global()),
        "smaps LazyFree {k} vs stats {}",
        lazy_global()
    );

    // Pressure: every lazily freed page goes back now (MADV_DONTNEED), out of LazyFree and RSS.
    let released0 = ebbtide::stats::collect().global.released_bytes;
    ebbtide::lazy::purge_all();
    assert_eq!(lazy_global(), 0);
    // What stays in LazyFree: the pages the reuse imported onto the CPU's stack beyond those it
    // handed out (at most a refill batch per CPU: `slack`). They left the lazily freed slabs (the
    // stats count them as reused) but were never written, so the kernel still sees them as
    // lazily freed until they are handed out and used; a DRAIN_CPU (what pressure does beside
    // the purge) gives them back with the stacks.
    assert!(
        smaps_lazyfree().saturating_sub(base) <= slack + (64 << 10),
        "LazyFree {} above its {} at the start after the purge (slack {slack})",
        smaps_lazyfree().saturating_sub(base),
        base
    );
    let released = ebbtide::stats::collect().global.released_bytes - released0;
    assert_eq!(released, held - reused);

    // With a settle delay, pages given up wait (no MADV_FREE, not in LazyFree) until the decay
    // step offers them; then LazyFree agrees again.
    give(&pool, again);
    ebbtide::lazy::configure(true, 5_000, 600_000);
    pool.shrink();
    let st = ebbtide::stats::collect().global;
    // Everything free now is what the reuse imported.
    assert_eq!((st.lazy_bytes, st.lazy_pending_bytes), (0, reused));
    // What stays in LazyFree: the pages the reuse imported onto the CPU's stack beyond those it
    // handed out (at most a refill batch per CPU: `slack`). They left the lazily freed slabs (the
    // stats count them as reused) but were never written, so the kernel still sees them as
    // lazily freed until they are handed out and used; a DRAIN_CPU (what pressure does beside
    // the purge) gives them back with the stacks.
    assert!(
        smaps_lazyfree().saturating_sub(base) <= slack + (64 << 10),
        "LazyFree {} above its {} at the start after the purge (slack {slack})",
        smaps_lazyfree().saturating_sub(base),
        base
    );
    ebbtide::lazy::decay_all(ebbtide::lazy::now_ms().wrapping_add(5_000));
    let st = ebbtide::stats::collect().global;
    assert_eq!((st.lazy_bytes, st.lazy_pending_bytes), (reused, 0));
    let k = smaps_lazyfree().saturating_sub(base);
    assert!(
        close(k, lazy_global()),
        "smaps LazyFree {k} vs stats {}",
        lazy_global()
    );
    let again = take(&pool, N / 2);
    touch(&again, 4);

    // For contrast, pages given back with MADV_DONTNEED fault on reuse.
    give(&pool, again);
    ebbtide::lazy::configure(false, 0, 0);
    pool.shrink();
    let f0 = minflt();
    let fresh = take(&pool, N / 2);
    touch(&fresh, 3);
    let faults = minflt() - f0;
    assert!(
        faults >= (N / 2 * 9 / 10) as u64,
        "only {faults} faults after MADV_DONTNEED"
    );
    give(&pool, fresh);
    pool.shrink();
    pool.destroy().map_err(|e| e.1).unwrap();
}
