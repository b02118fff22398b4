//! PSI triggers against the real kernel: trigger acceptance (window rounding for callers
//! without CAP_SYS_RESOURCE) and, as root, real events provoked by a memory hog thrashing the
//! page cache inside a small v1 memory cgroup (memcg reclaim and refaults count as memory
//! stalls in `/proc/pressure/memory`).

#[path = "../pressure_support/mod.rs"]
mod pressure_support;

use std::path::Path;
use std::time::{Duration, Instant};

use ebbtide::pressure::fs::poll_one;
use ebbtide::pressure::{Level, PsiSource, PsiTrigger, Source, SourceKind, SystemdSource, Watcher};
use pressure_support::{make_file, require_root, require_v1_memory, Hog, ScratchCgroup, TempDir};

const MIB: u64 = 1 << 20;
const PROC: &str = "/proc/pressure/memory";

#[test]
#[ignore = "helper process of the pressure tests (memory hog); run by them, not directly"]
fn hog_main() {
    let _turn = crate::serial::turn(module_path!());
    pressure_support::hog_main();
}

fn have_psi() -> bool {
    let ok = Path::new(PROC).exists();
    if !ok {
        pressure_support::skip::skip(
            &pressure_support::skip::current_test(),
            &format!("no {PROC} (kernel without PSI)"),
        );
    }
    ok
}

#[test]
fn trigger_accepted_window_rounded_if_needed() {
    let _turn = crate::serial::turn(module_path!());
    if !have_psi() {
        return;
    }
    // 500 ms is only allowed with CAP_SYS_RESOURCE; otherwise the source retries with 2 s.
    let s = PsiSource::open(Path::new(PROC), Level::Low, PsiTrigger::some(1000, 500_000)).unwrap();
    let eff = s.trigger();
    assert!(
        eff == PsiTrigger::some(1000, 500_000) || eff == PsiTrigger::some(1000, 2_000_000),
        "effective trigger {eff}"
    );
    eprintln!("effective trigger: {}", s.describe());
    let re = poll_one(s.fd().unwrap(), libc::POLLPRI, 10).unwrap();
    assert_eq!(re & (libc::POLLERR | libc::POLLNVAL), 0);
    // The cgroup v2 file of the own cgroup takes triggers as well, when it exists.
    // The own cgroup's file is preferred; an unprivileged process may get EACCES there
    // (root-owned cgroup v2 file) and then uses /proc/pressure/memory.
    let cands = ebbtide::pressure::psi::own_memory_pressure_candidates();
    let own = PsiSource::open_own(Level::Moderate, PsiTrigger::some(100_000, 2_000_000)).unwrap();
    eprintln!("own: {} (candidates {cands:?})", own.describe());
    assert!(cands.iter().any(|c| c == own.path()));
    // Invalid triggers are refused before any write.
    assert!(PsiSource::open(Path::new(PROC), Level::Low, PsiTrigger::some(0, 2_000_000)).is_err());
}

#[test]
fn psi_event_under_real_memcg_reclaim() {
    let _turn = crate::serial::turn(module_path!());
    if !have_psi()
        || !require_root("psi_event_under_real_memcg_reclaim")
        || !require_v1_memory("psi")
    {
        return;
    }
    let cg = ScratchCgroup::new(64 * MIB);
    let tmp = TempDir::new("psifile");
    let file = tmp.0.join("cache.bin");
    make_file(&file, 48);

    let psi = PsiSource::open(
        Path::new(PROC),
        Level::Moderate,
        PsiTrigger::some(1000, 500_000),
    )
    .unwrap();
    // The systemd protocol's regular-file path on the same kind of file.
    let sd = SystemdSource::open(Path::new(PROC), b"some 1000 2000000\0", Level::Low).unwrap();
    let mut w = Watcher::from_sources(vec![Box::new(psi), Box::new(sd)]).unwrap();

    let mut hog = Hog::spawn(&cg.dir);
    assert_eq!(hog.cmd("grow 36").as_deref(), Some("ok 36"));
    assert!(hog.send(&format!("thrash {} 10", file.display())));
    let start = Instant::now();
    let (mut psi_seen, mut sd_seen) = (None, None);
    while (psi_seen.is_none() || sd_seen.is_none()) && start.elapsed() < Duration::from_secs(12) {
        for e in w.wait(Some(Duration::from_millis(500))).unwrap() {
            match e.kind {
                SourceKind::Psi => psi_seen = psi_seen.or(Some(e.at - start)),
                SourceKind::Systemd => sd_seen = sd_seen.or(Some(e.at - start)),
                k => panic!("unexpected {k}"),
            }
        }
    }
    eprintln!("PSI trigger event after {psi_seen:?}, systemd regular-file event after {sd_seen:?}");
    assert!(
        psi_seen.is_some(),
        "no PSI event within 12 s of page cache thrashing in a 64 MiB cgroup"
    );
    assert!(
        sd_seen.is_some(),
        "no systemd-protocol (PSI file) event within 12 s"
    );
    drop(hog);
}

/// A v2 child cgroup removed while a trigger is armed on it: POLLERR, the source is dropped
/// with the reason, and the fallback (the own cgroup's file, else /proc) takes over.
#[test]
fn pollerr_on_removed_v2_cgroup_falls_back() {
    let _turn = crate::serial::turn(module_path!());
    if !have_psi() || !require_root("pollerr_on_removed_v2_cgroup_falls_back") {
        return;
    }
    let Ok(own) = ebbtide::pressure::cgroup::own() else {
        return;
    };
    let Some(v2) = own.v2 else {
        pressure_support::skip::skip(
            &pressure_support::skip::current_test(),
            "no cgroup v2 mount",
        );
        return;
    };
    let child = v2.join(format!("ebbtide-test-{}-psi", std::process::id()));
    struct Rmdir(std::path::PathBuf);
    impl Drop for Rmdir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    if let Err(e) = std::fs::create_dir(&child) {
        pressure_support::skip::skip(
            &pressure_support::skip::current_test(),
            &format!("cannot create {}: {e}", child.display()),
        );
        return;
    }
    let guard = Rmdir(child.clone());
    let file = child.join("memory.pressure");
    if !file.exists() {
        pressure_support::skip::skip(
            &pressure_support::skip::current_test(),
            &format!("{} does not exist", file.display()),
        );
        return;
    }
    let src =
        PsiSource::open(&file, Level::Critical, PsiTrigger::full(100_000, 2_000_000)).unwrap();
    let mut w = Watcher::from_sources(vec![Box::new(src)]).unwrap();
    assert!(w.wait(Some(Duration::from_millis(50))).unwrap().is_empty());
    std::fs::remove_dir(&child).unwrap();
    drop(guard);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(2) {
        w.wait(Some(Duration::from_millis(100))).unwrap();
        if w.status()
            .iter()
            .any(|s| s.kind == SourceKind::Psi && !s.active)
        {
            break;
        }
    }
    for s in w.status() {
        eprintln!("{s}");
    }
    let failed = w
        .status()
        .iter()
        .find(|s| s.kind == SourceKind::Psi && !s.active)
        .expect("source dropped");
    assert!(failed.detail.contains("POLLERR"), "{failed}");
    let fb = w
        .status()
        .iter()
        .find(|s| s.kind == SourceKind::Psi && s.active)
        .expect("fallback active");
    assert!(
        fb.detail.starts_with("fallback:") && fb.detail.contains("full 100000 2000000"),
        "{fb}"
    );
    assert_eq!(w.active_sources(), 1);
    // No spinning afterwards: waiting 200 ms takes few wake-ups (only real PSI events,
    // e.g. from the hog of the concurrent test, at most one per 2 s window, end a wait early).
    let t = Instant::now();
    let mut returns = 0;
    while t.elapsed() < Duration::from_millis(200) {
        w.wait(Some(Duration::from_millis(200).saturating_sub(t.elapsed())))
            .unwrap();
        returns += 1;
    }
    assert!(returns <= 3, "{returns} returns from wait in 200 ms");
}
