// A test binary of its own, outside tests/all/: it changes the process-wide tunables at run time and re-runs itself for start-up ones.
//! Every tunable in the options table has an observable effect (review: `checked` was parsed and
//! documented but nothing applied it). Each tunable has an entry in [`EFFECTS`] naming the test
//! that changes it and observes a difference from its default; [`every_tunable_has_an_effect_test`]
//! fails when a tunable is added to the table without one, or when a named test is missing.
//!
//! Effects that need a whole process (start-up tunables, threads) are observed in other test
//! binaries (named in the table); the rest are observed here, one test per group, in one process
//! with the tunables changed at run time (serialised: the options are process-wide).

#[path = "support/skip.rs"]
mod skip;
use ebbtide::pressure::{
    detect, headroom_level, poll_interval, runway_interval, HeadroomSource, Level, MemoryFiles,
    Outcome, Policy, Readiness, Source, SourceKind,
};
use ebbtide::{options, reclaimer};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Tunable → (test file under the workspace root, test function) observing its effect.
const EFFECTS: &[(&str, &str, &str)] = &[
    (
        "abort_on_error",
        "crates/ebbtide-malloc/tests/all/trust.rs",
        "abort_on_error_ends_the_process_with_sigabrt_after_the_message",
    ),
    (
        "runtime_start_bytes",
        "crates/ebbtide-malloc/tests/all/trust.rs",
        "a_small_program_has_no_runtime_thread_and_a_big_one_gets_them",
    ),
    (
        "lazy_free",
        "crates/ebbtide/tests/tunable_effects.rs",
        "lazy_tunables_change_how_pages_leave",
    ),
    (
        "lazy_settle_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "lazy_tunables_change_how_pages_leave",
    ),
    (
        "lazy_decay_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "lazy_tunables_change_how_pages_leave",
    ),
    (
        "squeeze_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "policy_tunables_change_the_decisions",
    ),
    (
        "trim_interval_ms",
        "crates/ebbtide/tests/reclaimer.rs",
        "idle_memory_goes_back_without_pressure",
    ),
    (
        "pool_shrink_interval_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "pool_tunables_change_the_pools",
    ),
    (
        "max_buffer_pages",
        "crates/ebbtide/tests/tunable_effects.rs",
        "pool_tunables_change_the_pools",
    ),
    (
        "max_cached_bytes",
        "crates/ebbtide/tests/source_retune.rs",
        "a_budget_set_at_run_time_starts_the_budget_source_and_is_enforced",
    ),
    (
        "pcpu_budget_bytes",
        "crates/ebbtide/tests/tunable_effects.rs",
        "pcpu_budget_bounds_what_the_per_cpu_caches_grow_to",
    ),
    (
        "drain_cpu_min_interval_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "policy_tunables_change_the_decisions",
    ),
    (
        "drain_min_interval_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "policy_tunables_change_the_decisions",
    ),
    (
        "trim_min_interval_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "policy_tunables_change_the_decisions",
    ),
    (
        "level_hold_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "policy_tunables_change_the_decisions",
    ),
    (
        "psi_low_stall_us",
        "crates/ebbtide/tests/tunable_effects.rs",
        "psi_tunables_change_the_triggers",
    ),
    (
        "psi_moderate_stall_us",
        "crates/ebbtide/tests/tunable_effects.rs",
        "psi_tunables_change_the_triggers",
    ),
    (
        "psi_critical_stall_us",
        "crates/ebbtide/tests/tunable_effects.rs",
        "psi_tunables_change_the_triggers",
    ),
    (
        "psi_window_us",
        "crates/ebbtide/tests/tunable_effects.rs",
        "psi_tunables_change_the_triggers",
    ),
    (
        "headroom_low_pct",
        "crates/ebbtide/tests/tunable_effects.rs",
        "headroom_tunables_change_the_source",
    ),
    (
        "headroom_moderate_pct",
        "crates/ebbtide/tests/tunable_effects.rs",
        "headroom_tunables_change_the_source",
    ),
    (
        "headroom_critical_pct",
        "crates/ebbtide/tests/tunable_effects.rs",
        "headroom_tunables_change_the_source",
    ),
    (
        "headroom_min_interval_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "headroom_tunables_change_the_source",
    ),
    (
        "headroom_max_interval_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "headroom_tunables_change_the_source",
    ),
    (
        "headroom_repeat_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "headroom_tunables_change_the_source",
    ),
    (
        "headroom_growth_bytes",
        "crates/ebbtide/tests/tunable_effects.rs",
        "headroom_tunables_change_the_source",
    ),
    (
        "sources",
        "crates/ebbtide/tests/tunable_effects.rs",
        "sources_chooses_the_sources",
    ),
    (
        "sources_delay_ms",
        "crates/ebbtide/tests/tunable_effects.rs",
        "sources_delay_ms_holds_the_sources_back",
    ),
    (
        "reclaim_thread",
        "crates/ebbtide/tests/critical_once.rs",
        "a_critical_event_fences_each_cpu_once",
    ),
    (
        "release_thread",
        "crates/ebbtide/tests/release_thread.rs",
        "without_the_release_thread_reclaim_still_gives_everything_back",
    ),
    (
        "control_socket",
        "crates/ebbtide/tests/control_socket.rs",
        "turning_off_through_the_socket_and_back_on",
    ),
    (
        "checked",
        "crates/ebbtide-capi/tests/c_tests.rs",
        "c_test_checked_tunable",
    ),
];

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets tunables for the duration of a closure, then puts the defaults back.
fn with<R>(pairs: &[(&str, &str)], f: impl FnOnce() -> R) -> R {
    options::set_many(pairs).unwrap();
    let r = f();
    let defaults: Vec<(String, String)> = options::list()
        .into_iter()
        .filter(|s| pairs.iter().any(|(k, _)| *k == s.def.name))
        .map(|s| (s.def.name.to_string(), s.default.clone()))
        .collect();
    let d: Vec<(&str, &str)> = defaults
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    options::set_many(&d).unwrap();
    r
}

#[test]
fn every_tunable_has_an_effect_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut problems = Vec::new();
    for s in options::list() {
        let name = s.def.name;
        let Some(&(_, file, test)) = EFFECTS.iter().find(|e| e.0 == name) else {
            problems.push(format!(
                "tunable `{name}` has no entry in EFFECTS (no test of its effect)"
            ));
            continue;
        };
        match std::fs::read_to_string(root.join(file)) {
            Ok(src) if src.contains(&format!("fn {test}(")) => {}
            Ok(_) => problems.push(format!("`{name}`: {file} has no test `{test}`")),
            Err(e) => problems.push(format!("`{name}`: {file}: {e}")),
        }
    }
    for (name, _, _) in EFFECTS {
        if !options::list().iter().any(|s| s.def.name == *name) {
            problems.push(format!("EFFECTS names `{name}`, which is not a tunable"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The policy the reclaim thread builds from the tunables (`reclaimer::policy_config`), driven
/// with fake time: each policy tunable changes a decision.
#[test]
fn policy_tunables_change_the_decisions() {
    let _s = serial();
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let policy = || Policy::new(reclaimer::policy_config());

    // squeeze_ms: the window a Moderate event opens.
    let window = |p: &mut Policy| {
        let a = p.on_event(Level::Moderate, t0);
        a.squeeze_until.map(|u| u - t0)
    };
    assert_eq!(window(&mut policy()), Some(Duration::from_millis(10)));
    let w = with(&[("squeeze_ms", "250")], || window(&mut policy()));
    assert_eq!(w, Some(Duration::from_millis(250)));

    // The rate limits: a second event 1 ms after the first repeats the action only when the
    // interval allows it.
    let twice = |level: Level, pick: fn(&ebbtide::pressure::Actions) -> bool| {
        let mut p = policy();
        let first = pick(&p.on_event(level, ms(0)));
        let second = pick(&p.on_event(level, ms(1)));
        (first, second)
    };
    assert_eq!(twice(Level::Critical, |a| a.drain_cpu), (true, false));
    let r = with(&[("drain_cpu_min_interval_ms", "0")], || {
        twice(Level::Critical, |a| a.drain_cpu)
    });
    assert_eq!(
        r,
        (true, true),
        "drain_cpu_min_interval_ms=0 lets DRAIN_CPU repeat"
    );
    assert_eq!(twice(Level::Moderate, |a| a.drain), (true, false));
    let r = with(&[("drain_min_interval_ms", "0")], || {
        twice(Level::Moderate, |a| a.drain)
    });
    assert_eq!(r, (true, true), "drain_min_interval_ms=0 lets DRAIN repeat");
    assert_eq!(twice(Level::Low, |a| a.trim), (true, false));
    let r = with(&[("trim_min_interval_ms", "0")], || {
        twice(Level::Low, |a| a.trim)
    });
    assert_eq!(r, (true, true), "trim_min_interval_ms=0 lets TRIM repeat");

    // level_hold_ms: how long a level outlives its last event.
    let level_after = |after: u64| {
        let mut p = policy();
        p.on_event(Level::Moderate, ms(0));
        p.tick(ms(after)).level
    };
    assert_eq!(level_after(1000), Level::Moderate, "default hold 2500 ms");
    let l = with(&[("level_hold_ms", "100")], || level_after(1000));
    assert_eq!(l, Level::Normal, "level_hold_ms=100: decayed after 1 s");
}

/// PSI triggers opened from the tunables (`reclaimer::detect_config` → `detect`): each stall
/// and the window show in what the kernel accepted.
#[test]
fn psi_tunables_change_the_triggers() {
    let _s = serial();
    if !Path::new("/proc/pressure/memory").exists() {
        skip::skip(
            "psi_tunables_change_the_triggers",
            "no /proc/pressure/memory (kernel without PSI)",
        );
        return;
    }
    let psi_details = || {
        let d = detect(&reclaimer::detect_config());
        d.status
            .iter()
            .filter(|s| s.kind == SourceKind::Psi && s.active)
            .map(|s| s.detail.clone())
            .collect::<Vec<_>>()
            .join("\n")
    };
    // `sources` is start-up only; this process runs with the default (every source).
    let base = psi_details();
    for want in [
        "some 70000 2000000",
        "some 100000 2000000",
        "full 100000 2000000",
    ] {
        assert!(base.contains(want), "default triggers: {base}");
    }
    let changed = with(
        &[
            ("psi_low_stall_us", "50000"),
            ("psi_moderate_stall_us", "150000"),
            ("psi_critical_stall_us", "200000"),
            ("psi_window_us", "4000000"),
        ],
        psi_details,
    );
    for want in [
        "some 50000 4000000",
        "some 150000 4000000",
        "full 200000 4000000",
    ] {
        assert!(changed.contains(want), "changed triggers: {changed}");
    }
}

/// A fake cgroup v2 directory with `memory.current` and `memory.max`.
struct FakeCgroup(std::path::PathBuf);

impl FakeCgroup {
    fn new() -> FakeCgroup {
        let d = std::env::temp_dir().join(format!("ebbtide-effects-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        FakeCgroup(d)
    }
    fn set(&self, used_pct: u64) {
        std::fs::write(self.0.join("memory.max"), "1000000\n").unwrap();
        std::fs::write(self.0.join("memory.high"), "max\n").unwrap();
        std::fs::write(
            self.0.join("memory.current"),
            format!("{}\n", used_pct * 10_000),
        )
        .unwrap();
    }
    fn source(&self, now: Instant) -> HeadroomSource {
        HeadroomSource::open(
            MemoryFiles::V2(self.0.clone()),
            reclaimer::detect_config().headroom,
            now,
        )
        .unwrap()
    }
}

impl Drop for FakeCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The headroom source as the reclaim thread configures it (`reclaimer::detect_config`), on a
/// fake cgroup: thresholds change the level, intervals the poll times, `repeat_ms` when a
/// persisting level is reported again.
#[test]
fn headroom_tunables_change_the_source() {
    let _s = serial();
    let level = |used_pct: u64| {
        let cfg = reclaimer::detect_config().headroom;
        headroom_level(used_pct * 10_000, 1_000_000, &cfg)
    };
    assert_eq!(level(85), Level::Low, "15 % free < 20 %");
    assert_eq!(
        with(&[("headroom_low_pct", "10")], || level(85)),
        Level::Normal
    );
    assert_eq!(level(92), Level::Moderate, "8 % free < 10 %");
    assert_eq!(
        with(&[("headroom_moderate_pct", "5")], || level(92)),
        Level::Low
    );
    assert_eq!(level(96), Level::Critical, "4 % free < 5 %");
    assert_eq!(
        with(&[("headroom_critical_pct", "3")], || level(96)),
        Level::Moderate
    );

    let cg = FakeCgroup::new();
    let t0 = Instant::now();
    // Poll intervals (the source's pure pacing rule, fed the config the reclaim thread builds):
    // the shortest at the limit, the longest far from it.
    let interval = |free: f64| poll_interval(free, &reclaimer::detect_config().headroom);
    assert_eq!(interval(0.0), Duration::from_millis(10));
    assert_eq!(
        with(&[("headroom_min_interval_ms", "3")], || interval(0.0)),
        Duration::from_millis(3)
    );
    assert_eq!(interval(1.0), Duration::from_millis(1000));
    assert_eq!(
        with(&[("headroom_max_interval_ms", "4000")], || interval(1.0)),
        Duration::from_millis(4000)
    );
    // growth_per_s: the runway bound (112 MiB limit, half used: 98 ms at 256 MiB/s; 1 GiB/s
    // makes it a quarter of that; 0 leaves no bound while nothing is seen growing).
    let mib = 1u64 << 20;
    let runway = || {
        let cfg = reclaimer::detect_config().headroom;
        runway_interval(56 * mib, 112 * mib, cfg.growth_per_s as f64, &cfg)
    };
    assert_eq!(runway(), Some(Duration::from_micros(98_437)));
    assert_eq!(
        with(&[("headroom_growth_bytes", "1G")], runway),
        Some(Duration::from_micros(24_609))
    );
    assert_eq!(with(&[("headroom_growth_bytes", "0")], runway), None);
    // repeat_ms: a persisting Low (15 % free) is reported again only after repeat_ms.
    let reported_again_after_100ms = || {
        cg.set(85);
        let mut s = cg.source(t0);
        let first = s.on_ready(Readiness::default(), t0).unwrap();
        assert_eq!(first, Outcome::Event(Level::Low));
        let later = t0 + Duration::from_millis(100);
        s.on_ready(Readiness::default(), later).unwrap() == Outcome::Event(Level::Low)
    };
    assert!(!reported_again_after_100ms(), "default repeat 500 ms");
    assert!(with(
        &[("headroom_repeat_ms", "50")],
        reported_again_after_100ms
    ));
}

/// Runs the ignored test `name` of this binary in a child process with `env` added; returns its
/// standard output (the child must succeed).
fn child(name: &str, env: &[(&str, &str)]) -> String {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {name} {env:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `sources` (start-up only): the set of kinds the reclaim thread watches.
#[test]
fn sources_chooses_the_sources() {
    let active = |env: &[(&str, &str)]| {
        let out = child("child_print_active_sources", env);
        out.lines()
            .find_map(|l| l.split_once("ACTIVE=").map(|x| x.1))
            .expect("child printed its sources")
            .to_string()
    };
    let none = active(&[("EBBTIDE_SOURCES", "none")]);
    assert_eq!(
        none, "explicit",
        "sources=none: only explicit notifications"
    );
    if Path::new("/proc/pressure/memory").exists() {
        let psi = active(&[("EBBTIDE_SOURCES", "psi")]);
        assert_eq!(psi, "explicit,psi", "sources=psi");
    }
}

#[test]
#[ignore = "helper process of sources_chooses_the_sources"]
fn child_print_active_sources() {
    let _z = ebbtide::Zone::new(ebbtide::ZoneOptions::new("effects-sources", 64)).unwrap();
    let t = Instant::now();
    let mut names = Vec::new();
    while t.elapsed() < Duration::from_secs(5) {
        let s = ebbtide::stats::collect();
        names = s
            .sources
            .iter()
            .filter(|x| x.active)
            .map(|x| x.name.clone())
            .collect::<Vec<_>>();
        if reclaimer::running() && !names.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    names.sort();
    println!("ACTIVE={}", names.join(","));
}

/// `sources_delay_ms` (start-up only): the sources open that long after the reclaim thread
/// starts, not before.
#[test]
fn sources_delay_ms_holds_the_sources_back() {
    let out = child(
        "child_sources_delay",
        &[
            ("EBBTIDE_SOURCES", "headroom"),
            ("EBBTIDE_SOURCES_DELAY_MS", "1500"),
        ],
    );
    let early = out
        .lines()
        .find_map(|l| l.split_once("EARLY=").map(|x| x.1))
        .expect("child printed its early sources");
    assert_eq!(early, "", "sources open before the delay: {out}");
    let late_ms: u64 = out
        .lines()
        .find_map(|l| l.split_once("OPENED_MS=").map(|x| x.1))
        .and_then(|v| v.parse().ok())
        .expect("child saw the sources open");
    assert!(
        late_ms >= 1400,
        "opened after {late_ms} ms, before the 1500 ms delay"
    );
}

#[test]
#[ignore = "helper process of sources_delay_ms_holds_the_sources_back"]
fn child_sources_delay() {
    let t = Instant::now();
    let _z = ebbtide::Zone::new(ebbtide::ZoneOptions::new("effects-delay", 64)).unwrap();
    let listed = || {
        // Every source the thread opened is listed (active or not, with its reason).
        ebbtide::stats::collect()
            .sources
            .iter()
            .map(|x| x.name.clone())
            .filter(|n| n != "explicit")
            .collect::<Vec<_>>()
            .join(",")
    };
    std::thread::sleep(Duration::from_millis(500));
    println!("EARLY={}", listed());
    while t.elapsed() < Duration::from_secs(10) {
        if !listed().is_empty() {
            println!("OPENED_MS={}", t.elapsed().as_millis());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Page pools: `max_buffer_pages` is the cap of a pool made with the default cap, and
/// `pool_shrink_interval_ms` is how soon the reclaim thread enforces a cap. In a child process
/// with no pressure source, so that real pressure cannot squeeze the pool meanwhile.
#[test]
fn pool_tunables_change_the_pools() {
    let out = child("child_pool_tunables", &[("EBBTIDE_SOURCES", "none")]);
    assert!(out.contains("POOL-OK"), "{out}");
}

#[test]
#[ignore = "helper process of pool_tunables_change_the_pools"]
fn child_pool_tunables() {
    let p = ebbtide::PagePool::with_default_cap("effects-default").unwrap();
    assert_eq!(p.max_buffer_pages(), 1024);
    let q = with(&[("max_buffer_pages", "16")], || {
        ebbtide::PagePool::with_default_cap("effects-16").unwrap()
    });
    assert_eq!(q.max_buffer_pages(), 16);
    // Fill q above its cap and leave it to the reclaim thread. A new interval takes effect
    // after the timer already set fires, so each case first waits that out.
    let free_after = |interval: &str| {
        with(&[("pool_shrink_interval_ms", interval)], || {
            std::thread::sleep(Duration::from_millis(300));
            let pages: Vec<_> = (0..200).map(|_| q.get().unwrap()).collect();
            for pg in pages {
                // SAFETY: pages of ours, put back once.
                unsafe { q.put(pg).unwrap() };
            }
            std::thread::sleep(Duration::from_millis(600));
            q.snapshot().free_pages
        })
    };
    assert!(
        reclaimer::running(),
        "the reclaim thread runs (started with the first pool)"
    );
    let slow = free_after("60s");
    assert!(
        slow > 16,
        "pool_shrink_interval_ms=60s: not shrunk within 600 ms ({slow})"
    );
    assert_eq!(
        free_after("50"),
        16,
        "pool_shrink_interval_ms=50: shrunk to the cap"
    );
    p.destroy().map_err(|e| e.1).unwrap();
    q.shrink();
    q.destroy().map_err(|e| e.1).unwrap();
    println!("POOL-OK");
}

/// `lazy_free`, `lazy_settle_ms`, `lazy_decay_ms`, as the reclaim thread applies them: where a
/// pool shrink without pressure puts its pages (settling, offered with `MADV_FREE`, or given
/// back at once) and how long they stay. Child processes with no pressure source.
#[test]
fn lazy_tunables_change_how_pages_leave() {
    let run = |env: &[(&str, &str)]| {
        let mut e = vec![("EBBTIDE_SOURCES", "none")];
        e.extend_from_slice(env);
        let out = child("child_lazy_after_shrink", &e);
        out.lines()
            .find_map(|l| l.split_once("LAZY=").map(|x| x.1.to_string()))
            .expect("child printed its figures")
    };
    // Defaults (on, settle 100 ms, decay 1 s): settling first, none left after 2 s.
    assert_eq!(run(&[]), "pending>0 offered=0 after2s=0");
    // lazy_free=false: straight back (MADV_DONTNEED), nothing lazy at all.
    assert_eq!(
        run(&[("EBBTIDE_LAZY_FREE", "false")]),
        "pending=0 offered=0 after2s=0"
    );
    // lazy_settle_ms=0: offered with MADV_FREE at once.
    assert_eq!(
        run(&[("EBBTIDE_LAZY_SETTLE_MS", "0")]),
        "pending=0 offered>0 after2s=0"
    );
    // lazy_decay_ms=60s: still lazy after 2 s.
    assert_eq!(
        run(&[("EBBTIDE_LAZY_DECAY_MS", "60s")]),
        "pending>0 offered=0 after2s>0"
    );
}

/// `pcpu_budget_bytes`, as the reclaim thread applies it: a 256-byte zone bursting 256 items at
/// a time on one CPU grows its stack there past UMA's bucket pair (124) with the default
/// budget, to no more than the budget allows with a small one, and not at all with 0. Child
/// processes with no pressure source.
#[test]
fn pcpu_budget_bounds_what_the_per_cpu_caches_grow_to() {
    let run = |env: &[(&str, &str)]| {
        let mut e = vec![("EBBTIDE_SOURCES", "none")];
        e.extend_from_slice(env);
        let out = child("child_pcpu_grows", &e);
        let v = out
            .lines()
            .find_map(|l| l.split_once("CAPACITY=").map(|x| x.1.to_string()))
            .expect("child printed its figures");
        v.trim().parse::<u32>().unwrap()
    };
    // Default (1.5 MiB): the burst's 256 items fit after a few passes.
    let default = run(&[]);
    assert!(default >= 256, "default budget: capacity {default}");
    // 16 KiB = 64 items of 256 B above the floor (124): grown, within the budget.
    let small = run(&[("EBBTIDE_PCPU_BUDGET_BYTES", "16K")]);
    assert!(
        (125..=124 + 64).contains(&small),
        "16 KiB: capacity {small}"
    );
    // 0: UMA's bucket pair only.
    assert_eq!(run(&[("EBBTIDE_PCPU_BUDGET_BYTES", "0")]), 124);
}

#[test]
#[ignore = "helper process of pcpu_budget_bounds_what_the_per_cpu_caches_grow_to"]
fn child_pcpu_grows() {
    let cpu = ebbtide::os::cpu_count() - 1;
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET on an index below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
            0
        );
    }
    let z = ebbtide::Zone::new(ebbtide::ZoneOptions::new("effects-pcpu", 256)).unwrap();
    assert!(reclaimer::running());
    // Bursts for 1 s: the reclaim thread's resize pass runs every pool_shrink_interval_ms.
    let t = Instant::now();
    let mut v = Vec::with_capacity(256);
    while t.elapsed() < Duration::from_secs(1) {
        for _ in 0..256 {
            v.push(z.alloc().unwrap());
        }
        for p in v.drain(..) {
            // SAFETY: items of ours, freed once.
            unsafe { z.free(p).unwrap() };
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("CAPACITY={}", z.snapshot().per_cpu[cpu].capacity);
}

#[test]
#[ignore = "helper process of lazy_tunables_change_how_pages_leave"]
fn child_lazy_after_shrink() {
    let pool = ebbtide::PagePool::new("effects-lazy", 0).unwrap();
    let _ = pool.snapshot();
    let pages: Vec<_> = (0..256).map(|_| pool.get().unwrap()).collect();
    for pg in &pages {
        // SAFETY: pages of ours.
        unsafe { pg.as_ptr().write_bytes(1, 4096) };
    }
    for pg in pages {
        // SAFETY: pages of ours, put back once.
        unsafe { pool.put(pg).unwrap() };
    }
    // The reclaim thread configured the lazy mode from the tunables when it started.
    assert!(reclaimer::running());
    pool.shrink();
    let (pending, offered) = (
        ebbtide::lazy::lazy_pending_bytes(),
        ebbtide::lazy::lazy_bytes(),
    );
    std::thread::sleep(Duration::from_secs(2));
    let after = ebbtide::lazy::lazy_held_bytes();
    let f = |name: &str, v: u64| format!("{name}{}", if v > 0 { ">0" } else { "=0" });
    println!(
        "LAZY={} {} {}",
        f("pending", pending),
        f("offered", offered),
        f("after2s", after)
    );
    pool.destroy().map_err(|e| e.1).unwrap();
}

/// What `detect_config` makes of the tunables (everything but the closures).
fn detect_projection() -> String {
    let c = reclaimer::detect_config();
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?}",
        c.systemd,
        c.psi,
        c.v1_level,
        c.headroom,
        c.memory_events,
        c.budget.as_ref().map(|b| b.0)
    )
}

/// The reclaim thread re-detects its sources when one of `reclaimer::source_tunables()` changes:
/// that list must be exactly the tunables `detect_config` reads. Each run-time tunable is moved
/// off its default (to its minimum or maximum) and back: it changes `detect_config` if and only
/// if it is on the list. (Start-up-only tunables cannot move here; those on the list must be
/// start-up only for a reason the table gives.)
#[test]
fn source_tunables_are_exactly_what_detect_config_reads() {
    let _s = serial();
    let listed = reclaimer::source_tunables();
    let mut problems = Vec::new();
    for s in options::list() {
        let def = s.def;
        let on_list = listed.contains(&def.tunable);
        if !def.runtime {
            continue;
        }
        let before = detect_projection();
        // The first value off the default that the table's cross rules accept.
        let candidates = [
            def.max,
            def.min,
            def.default + 1,
            def.default.saturating_sub(1),
        ];
        let Some(text) = candidates
            .into_iter()
            .filter(|&v| v != def.default && (def.min..=def.max).contains(&v))
            .map(|v| options::parse::canonical(def, v))
            .find(|t| options::set(def.name, t).is_ok())
        else {
            problems.push(format!(
                "{}: no value off the default is accepted",
                def.name
            ));
            continue;
        };
        let after = detect_projection();
        options::set(def.name, &s.default).unwrap();
        assert_eq!(
            detect_projection(),
            before,
            "{} restored from {text}",
            def.name
        );
        let changed = after != before;
        if changed != on_list {
            problems.push(format!(
                "{}: detect_config {} but it is {}on source_tunables()",
                def.name,
                if changed {
                    "changes"
                } else {
                    "does not change"
                },
                if on_list { "" } else { "not " }
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
