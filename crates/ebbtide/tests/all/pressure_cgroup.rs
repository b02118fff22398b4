//! Real cgroup v1 tests (root only): `memory.pressure_level` events and headroom levels
//! against a scratch memory cgroup with a memory hog inside.

#[path = "../pressure_support/mod.rs"]
mod pressure_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ebbtide::pressure::headroom::{headroom_level, runway_interval};
use ebbtide::pressure::{
    HeadroomConfig, HeadroomSource, Level, MemoryFiles, Source, SourceKind, V1Level, V1LevelSource,
    V1Mode, Watcher,
};
use pressure_support::{make_file, require_root, require_v1_memory, Hog, ScratchCgroup, TempDir};

const MIB: u64 = 1 << 20;

#[test]
#[ignore = "helper process of the pressure tests (memory hog); run by them, not directly"]
fn hog_main() {
    let _turn = crate::serial::turn(module_path!());
    pressure_support::hog_main();
}

#[test]
fn v1_pressure_level_fires_and_is_coalesced() {
    let _turn = crate::serial::turn(module_path!());
    if !require_root("v1_pressure_level_fires_and_is_coalesced")
        || !require_v1_memory("v1 pressure level")
    {
        return;
    }
    let cg = ScratchCgroup::new(64 * MIB);
    let tmp = TempDir::new("v1file");
    let file = tmp.0.join("cache.bin");
    make_file(&file, 48);

    let coalesce = Duration::from_millis(100);
    let sources: Vec<Box<dyn Source>> = V1Level::ALL
        .iter()
        .map(|&l| {
            Box::new(V1LevelSource::open(&cg.dir, l, V1Mode::Default, coalesce).unwrap())
                as Box<dyn Source>
        })
        .collect();
    let mut w = Watcher::from_sources(sources).unwrap();
    assert_eq!(w.active_sources(), 3);
    for s in w.status() {
        eprintln!("{s}");
    }
    // Quiet before the hog runs.
    assert!(w.wait(Some(Duration::from_millis(100))).unwrap().is_empty());

    let mut hog = Hog::spawn(&cg.dir);
    assert_eq!(hog.cmd("grow 36").as_deref(), Some("ok 36"));
    // 36 MiB anonymous + reading a 48 MiB file over and over in a 64 MiB cgroup: the page
    // cache must be reclaimed continuously.
    assert!(hog.send(&format!("thrash {} 6", file.display())));

    let start = Instant::now();
    let mut events = Vec::new();
    while start.elapsed() < Duration::from_secs(15) {
        events.extend(w.wait(Some(Duration::from_millis(500))).unwrap());
        if events.len() >= 3 && start.elapsed() > Duration::from_secs(2) {
            break;
        }
    }
    let mut per_level: BTreeMap<Level, Vec<Instant>> = BTreeMap::new();
    for e in &events {
        assert_eq!(e.kind, SourceKind::CgroupV1Level);
        per_level.entry(e.level).or_default().push(e.at);
    }
    eprintln!(
        "v1 pressure events within {:?}: {:?}",
        start.elapsed(),
        per_level
            .iter()
            .map(|(l, v)| (l.to_string(), v.len()))
            .collect::<Vec<_>>()
    );
    assert!(
        !events.is_empty(),
        "no memory.pressure_level event within 15 s of reclaim in a 64 MiB cgroup"
    );
    assert!(
        per_level.contains_key(&Level::Low),
        "low fires first/always: {per_level:?}"
    );
    // Coalescing: at most one report per level per 100 ms.
    for times in per_level.values() {
        for pair in times.windows(2) {
            assert!(
                pair[1] - pair[0] >= coalesce,
                "two reports of one level within {:?}",
                pair[1] - pair[0]
            );
        }
    }
    // Push into the limit: critical must fire (the hog is then OOM-killed, which is fine).
    hog.send("grow 200");
    let start = Instant::now();
    let mut critical = false;
    while !critical && start.elapsed() < Duration::from_secs(15) {
        critical = w
            .wait(Some(Duration::from_millis(500)))
            .unwrap()
            .iter()
            .any(|e| e.level == Level::Critical);
    }
    assert!(
        critical,
        "no critical event while the hog ran into the 64 MiB limit"
    );
    drop(hog);
}

#[test]
fn headroom_levels_as_usage_approaches_limit() {
    let _turn = crate::serial::turn(module_path!());
    if !require_root("headroom_levels_as_usage_approaches_limit") || !require_v1_memory("headroom")
    {
        return;
    }
    let limit = 128 * MIB;
    let cg = ScratchCgroup::new(limit);
    let cfg = HeadroomConfig::default();
    let src = HeadroomSource::open(MemoryFiles::V1(cg.dir.clone()), cfg, Instant::now()).unwrap();
    let mut w = Watcher::from_sources(vec![Box::new(src)]).unwrap();
    // Empty cgroup: far from the limit, no event. The pace starts tight (nothing is known of the
    // last window) and follows the tightest reading of the last one to two windows
    // (`headroom::pace_free`): after one window of far readings the share's interval is the long
    // one, and the runway's bound rules (`headroom::runway_interval`: 121.6 MiB to the Critical
    // threshold at 256 MiB/s, halved, 237 ms), not the share's second.
    assert!(w.wait(Some(Duration::from_millis(50))).unwrap().is_empty());
    let np = w.next_poll(Instant::now()).unwrap();
    assert!(
        np <= Instant::now() + Duration::from_millis(cfg.min_interval_ms + 5),
        "polls fast at first"
    );
    assert!(w
        .wait(Some(Duration::from_millis(cfg.max_interval_ms + 150)))
        .unwrap()
        .is_empty());
    let np = w.next_poll(Instant::now()).unwrap();
    let runway = runway_interval(cg.usage(), limit, cfg.growth_per_s as f64, &cfg).unwrap();
    assert!(
        runway > Duration::from_millis(200) && runway < Duration::from_millis(cfg.max_interval_ms),
        "{runway:?}"
    );
    let left = np.saturating_duration_since(Instant::now());
    assert!(
        left <= runway + Duration::from_millis(5),
        "next in {left:?}, runway {runway:?}"
    );
    // Just past that poll, the next one is a runway away.
    assert!(w
        .wait(Some(left + Duration::from_millis(3)))
        .unwrap()
        .is_empty());
    let left = w
        .next_poll(Instant::now())
        .unwrap()
        .saturating_duration_since(Instant::now());
    assert!(
        left > runway / 2 && left <= runway + Duration::from_millis(5),
        "polls at the runway's pace far from the limit: next in {left:?}, runway {runway:?}"
    );

    let mut hog = Hog::spawn(&cg.dir);
    let mut seen: Vec<(Level, u64)> = Vec::new();
    let mut mib = 60u64;
    while mib < 127 {
        match hog.cmd(&format!("grow {mib}")) {
            Some(_) => {}
            None => panic!("hog died at {mib} MiB (usage {})", cg.usage()),
        }
        let usage = cg.usage();
        let expected = headroom_level(usage, limit, &cfg);
        if expected != Level::Normal && seen.last().map(|s| s.0) != Some(expected) {
            // The source must report the new level within its (shrinking) poll interval.
            let t = Instant::now();
            let mut got = None;
            while got.is_none() && t.elapsed() < Duration::from_secs(2) {
                let ev = w.wait(Some(Duration::from_millis(100))).unwrap();
                got = ev
                    .iter()
                    .rev()
                    .find(|e| e.kind == SourceKind::Headroom)
                    .map(|e| e.level);
            }
            let now_usage = cg.usage();
            let level = got.unwrap_or_else(|| {
                panic!("no headroom event at usage {usage} (expected {expected})")
            });
            assert!(
                level == expected || level == headroom_level(now_usage, limit, &cfg),
                "reported {level}, usage {usage} -> expected {expected}"
            );
            eprintln!(
                "usage {:.1} MiB of 128: {level} after {:?}",
                usage as f64 / MIB as f64,
                t.elapsed()
            );
            seen.push((level, usage));
            if level == Level::Critical {
                break;
            }
        }
        mib += 1;
    }
    let levels: Vec<Level> = seen.iter().map(|s| s.0).collect();
    assert_eq!(
        levels,
        vec![Level::Low, Level::Moderate, Level::Critical],
        "{seen:?}"
    );
    // Close to the limit the source polls fast.
    let np = w.next_poll(Instant::now()).unwrap();
    assert!(
        np <= Instant::now() + Duration::from_millis(20),
        "polls every 10 ms near the limit"
    );
    // Critical is reported at every poll while it lasts (each renews the squeeze window, as the
    // kernel's shrinker runs on every reclaim pass): about one per 10 ms poll, no storm.
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed() < Duration::from_millis(1200) {
        n += w.wait(Some(Duration::from_millis(100))).unwrap().len();
    }
    assert!(
        (20..=1200 / cfg.min_interval_ms as usize + 10).contains(&n),
        "{n} repeats in 1.2 s (one per poll, polls every {} ms)",
        cfg.min_interval_ms
    );
    drop(hog);
}

#[test]
fn v1_source_dropped_when_its_cgroup_is_removed() {
    let _turn = crate::serial::turn(module_path!());
    if !require_root("v1_source_dropped_when_its_cgroup_is_removed")
        || !require_v1_memory("v1 removal")
    {
        return;
    }
    let cg = ScratchCgroup::new(64 * MIB);
    let src = V1LevelSource::open(
        &cg.dir,
        V1Level::Low,
        V1Mode::Default,
        Duration::from_millis(100),
    )
    .unwrap();
    let mut w = Watcher::from_sources(vec![Box::new(src)]).unwrap();
    assert!(w.wait(Some(Duration::from_millis(50))).unwrap().is_empty());
    let dir = cg.dir.clone();
    drop(cg); // rmdir: the kernel signals the eventfd once more
    assert!(!dir.exists());
    let t = Instant::now();
    while w.active_sources() > 0 && t.elapsed() < Duration::from_secs(2) {
        assert!(w.wait(Some(Duration::from_millis(100))).unwrap().is_empty());
    }
    let st = w
        .status()
        .iter()
        .find(|s| s.kind == SourceKind::CgroupV1Level)
        .unwrap();
    assert!(!st.active && st.detail.contains("was removed"), "{st}");
    // No fallback for an explicit cgroup, and no busy loop afterwards.
    assert_eq!(w.active_sources(), 0);
    let t = Instant::now();
    w.wait(Some(Duration::from_millis(100))).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(95));
}
