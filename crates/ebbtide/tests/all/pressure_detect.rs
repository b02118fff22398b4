//! Detection on this machine, and the whole chain detect → watcher → policy.

#[path = "../pressure_support/mod.rs"]
mod pressure_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebbtide::pressure::{
    detect, BudgetConfig, DetectConfig, Level, MemoryFiles, Policy, SourceKind, Watcher,
};
use pressure_support::{require_root, require_v1_memory, ScratchCgroup};

#[test]
fn every_kind_is_reported_active_or_with_a_reason() {
    let _turn = crate::serial::turn(module_path!());
    let held = Arc::new(AtomicU64::new(0));
    let h = held.clone();
    let cfg = DetectConfig {
        budget: Some((
            BudgetConfig {
                max_cached_bytes: 1000,
                ..Default::default()
            },
            Arc::new(move || h.load(Ordering::Relaxed)),
        )),
        ..Default::default()
    };
    let d = detect(&cfg);
    for s in &d.status {
        eprintln!("{s}");
    }
    for k in SourceKind::ALL {
        assert!(d.status.iter().any(|s| s.kind == k), "{k} not reported");
    }
    for s in &d.status {
        assert!(!s.detail.is_empty(), "{s:?} has no detail/reason");
    }
    let active = d
        .status
        .iter()
        .filter(|s| s.active && s.kind != SourceKind::Explicit)
        .count();
    assert_eq!(active, d.sources.len(), "one active status per source");
    let st = |k: SourceKind| d.status.iter().filter(move |s| s.kind == k);

    if std::env::var_os("MEMORY_PRESSURE_WATCH").is_none() {
        assert_eq!(
            st(SourceKind::Systemd).next().unwrap().detail,
            "MEMORY_PRESSURE_WATCH not set"
        );
    }
    if std::path::Path::new("/proc/pressure/memory").exists() {
        assert_eq!(
            st(SourceKind::Psi).filter(|s| s.active).count(),
            3,
            "three PSI triggers"
        );
    }
    let own = ebbtide::pressure::cgroup::own().unwrap();
    if let Some(v1) = &own.v1_memory {
        let lim: u64 = std::fs::read_to_string(v1.join("memory.limit_in_bytes"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let v2_has_memory = own
            .v2
            .as_ref()
            .is_some_and(|p| p.join("memory.current").exists());
        if lim >= 1 << 62 && !v2_has_memory {
            let h = st(SourceKind::Headroom).next().unwrap();
            assert!(!h.active && h.detail.contains("no limit"), "{h}");
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(
                st(SourceKind::CgroupV1Level).filter(|s| s.active).count(),
                3
            );
        }
    }
    if let Some(v2) = &own.v2 {
        if !v2.join("memory.events").exists() {
            let m = st(SourceKind::MemoryEvents).next().unwrap();
            assert!(!m.active && m.detail.contains("memory.events"), "{m}");
        }
    }
    assert!(st(SourceKind::Budget).next().unwrap().active);

    // The chain: budget over the limit → Critical event → policy drains per-CPU caches.
    let mut w = Watcher::new(d).unwrap();
    let mut policy = Policy::default();
    held.store(1000, Ordering::Relaxed);
    let t = Instant::now();
    let mut got = None;
    while got.is_none() && t.elapsed() < Duration::from_secs(2) {
        for e in w.wait(Some(Duration::from_millis(200))).unwrap() {
            let a = policy.on_event(e.level, e.at);
            if e.kind == SourceKind::Budget {
                got = Some(a);
            }
        }
    }
    let a = got.expect("budget event within 2 s");
    assert_eq!(a.level, Level::Critical);
    assert!(!a.buckets_enabled);
    assert!(a.drain_cpu || a.drain || a.trim);

    // Explicit notification from another thread reaches the watcher promptly.
    held.store(0, Ordering::Relaxed);
    let inj = w.injector();
    std::thread::spawn(move || inj.inject(Level::Low))
        .join()
        .unwrap();
    // (Other sources may report real pressure meanwhile: wait for the explicit one.)
    let t = Instant::now();
    let mut explicit = false;
    while !explicit && t.elapsed() < Duration::from_secs(2) {
        let ev = w.wait(Some(Duration::from_secs(2))).unwrap();
        explicit = ev
            .iter()
            .any(|e| e.kind == SourceKind::Explicit && e.level == Level::Low);
    }
    assert!(explicit, "explicit Low not delivered");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "took {:?}",
        t.elapsed()
    );
}

#[test]
fn headroom_active_for_a_limited_cgroup() {
    let _turn = crate::serial::turn(module_path!());
    if !require_root("headroom_active_for_a_limited_cgroup")
        || !require_v1_memory("headroom detect")
    {
        return;
    }
    let cg = ScratchCgroup::new(32 << 20);
    let cfg = DetectConfig {
        headroom_cgroup: Some(MemoryFiles::V1(cg.dir.clone())),
        ..Default::default()
    };
    let d = detect(&cfg);
    let h = d
        .status
        .iter()
        .find(|s| s.kind == SourceKind::Headroom)
        .unwrap();
    assert!(h.active, "{h}");
    assert!(
        h.detail.contains("limit 33554432") && h.detail.contains("Low < 20% free"),
        "{h}"
    );
}
