// A test binary of its own, outside tests/all/: release_thread is a start-up tunable and it counts the process's threads.
//! `release_thread=false`: no `ebbtide-release` helper thread is started, and a large reclaim
//! still gives every cached page back (on the calling thread).
//! Its own test binary: `release_thread` is a start-up tunable.

use ebbtide::{options, reclaim, Request, Zone, ZoneOptions};
use std::ptr::NonNull;

fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

#[test]
fn without_the_release_thread_reclaim_still_gives_everything_back() {
    options::set("release_thread", "false").unwrap();
    options::set("sources", "none").unwrap();
    let z = Zone::new(ZoneOptions::new("no-helper", 64)).unwrap();
    let n = (64 << 20) / 64;
    let v: Vec<NonNull<u8>> = (0..n).map(|_| z.alloc().unwrap()).collect();
    for p in &v {
        // SAFETY: items of ours, 64 bytes each.
        unsafe { p.as_ptr().write_bytes(0x5a, 64) };
    }
    for p in v {
        // SAFETY: valid frees.
        unsafe { z.free(p).unwrap() };
    }
    let back = reclaim::reclaim_all(Request::DrainCpu);
    assert!(
        back >= 64 << 20,
        "all 64 MiB of items given back, got {back}"
    );
    let s = z.snapshot();
    assert_eq!(s.cached_bytes_pcpu + s.cached_bytes_depot, 0);
    let names = thread_names();
    assert!(
        !names.iter().any(|n| n == "ebbtide-release"),
        "no release helper with release_thread=false: {names:?}"
    );
}
