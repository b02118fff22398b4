//! `ebbtide-lab uma`: seed 002, UMA caches and their back pressure.
//!
//! The workload is an allocation-heavy request server: `threads` worker threads in a ring;
//! each request allocates 32 objects of mixed sizes (64 B to 4 KiB, small ones more often),
//! writes a header into each; every 16 requests the thread hands its objects to the next
//! thread, which frees them — every object is freed by a thread other than the one that
//! allocated it. One worker per CPU.
//!
//! (a) Throughput, caches on (per-CPU stacks and depot) against caches off
//!     (`ZoneFlags::NOBUCKET`: every allocation and free goes to the slabs), n runs each.
//! (b) A tight memory limit: the same server moves its load through phases; each phase holds
//!     a large live set in one size class (objects fully written), then frees it and moves to
//!     the next size class. Freed memory stays in that class's caches until something gives it
//!     back. Caches with back pressure (default sources) against caches without it
//!     (`EBBTIDE_SOURCES=none`; the periodic working-set trim still runs), in a cgroup whose
//!     memory+swap limit leaves little swap: OOM kills, swap traffic, throughput.

use crate::{
    emit, env_u64, lab_setup, loadavg, mean_usage, mib, out_dir, peak_usage, pressure_figures,
    privileged, run_child, spawn_pressure_reporter, write_series, write_text, ChildRun, Opts, Rng,
    Scale,
};
use ebbtide::{Zone, ZoneFlags, ZoneOptions};
use ebbtide_lab::{
    plot, stats, thousands, Cgroup, CgroupSpec, Progress, Result, Sampler, SamplerConfig, Series,
    Summary, SwapFile, Table, VariantRecord,
};
use serde_json::json;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const SIZES: [usize; 7] = [64, 128, 256, 512, 1024, 2048, 4096];
/// Relative frequency of each size in a request (small objects dominate).
const WEIGHTS: [u64; 7] = [32, 24, 16, 12, 8, 5, 3];
const PER_REQUEST: usize = 32;
/// Requests handed to the next thread at once (one queue operation per handoff).
const HANDOFF: usize = 16;

/// Sizes of one uma run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Worker threads.
    pub threads: u64,
    /// Seconds per throughput run.
    pub tp_seconds: u64,
    /// Throughput runs per variant.
    pub tp_runs: usize,
    /// Cgroup limit for (b).
    pub limit_bytes: u64,
    /// Swap the group may use on top of the limit in (b).
    pub swap_bytes: u64,
    /// Live set per phase in (b).
    pub phase_bytes: u64,
    /// Seconds per pressure run.
    pub pr_seconds: u64,
    /// Pressure runs per variant.
    pub pr_runs: usize,
}

impl Params {
    /// The sizes for a scale.
    pub fn for_scale(s: Scale) -> Params {
        match s {
            Scale::Smoke => Params {
                threads: 2,
                tp_seconds: 2,
                tp_runs: 2,
                limit_bytes: 96 * MIB,
                swap_bytes: 32 * MIB,
                phase_bytes: 48 * MIB,
                pr_seconds: 5,
                pr_runs: 1,
            },
            Scale::Quick => Params {
                threads: 2,
                tp_seconds: 4,
                tp_runs: 3,
                limit_bytes: 256 * MIB,
                swap_bytes: 64 * MIB,
                phase_bytes: 128 * MIB,
                pr_seconds: 15,
                pr_runs: 1,
            },
            Scale::Full => Params {
                threads: 2,
                tp_seconds: 8,
                tp_runs: 8,
                limit_bytes: 512 * MIB,
                swap_bytes: 128 * MIB,
                phase_bytes: 256 * MIB,
                pr_seconds: 30,
                pr_runs: 3,
            },
        }
    }
}

fn zones(nobucket: bool) -> Arc<Vec<Zone>> {
    let flags = if nobucket {
        ZoneFlags::NOBUCKET
    } else {
        ZoneFlags::default()
    };
    Arc::new(
        SIZES
            .iter()
            .map(|&s| {
                Zone::new(ZoneOptions::new(&format!("uma-{s}"), s).flags(flags)).expect("zone")
            })
            .collect(),
    )
}

/// A batch of objects in flight between threads: (zone index, pointer).
struct Batch(Vec<(u8, NonNull<u8>)>);
// SAFETY: the pointers are items owned by whoever holds the batch; zones are Sync and items
// may be freed from any thread.
unsafe impl Send for Batch {}

fn pick_size(rng: &mut Rng) -> usize {
    let total: u64 = WEIGHTS.iter().sum();
    let mut r = rng.next() % total;
    for (i, w) in WEIGHTS.iter().enumerate() {
        if r < *w {
            return i;
        }
        r -= w;
    }
    0
}

fn free_batch(zones: &[Zone], b: Batch) {
    for (zi, p) in b.0 {
        // SAFETY: `p` came from `zones[zi].alloc()` and is freed exactly once, here.
        if let Err(e) = unsafe { zones[zi as usize].free(p) } {
            eprintln!("uma child: free failed: {e}");
        }
    }
}

/// (a): requests per second of the ring server. `EBBTIDE_LAB_NOBUCKET` 0/1.
pub(crate) fn child_throughput() -> i32 {
    let threads = env_u64("THREADS") as usize;
    let seconds = env_u64("SECONDS");
    let zs = zones(env_u64("NOBUCKET") == 1);
    let stop = Arc::new(AtomicBool::new(false));
    let mut txs: Vec<Option<SyncSender<Batch>>> = Vec::new();
    let mut rxs: Vec<Option<Receiver<Batch>>> = Vec::new();
    for _ in 0..threads {
        let (tx, rx) = sync_channel::<Batch>(4);
        txs.push(Some(tx));
        rxs.push(Some(rx));
    }
    let t0 = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let tx = txs[(i + 1) % threads].clone().expect("sender");
            let rx = rxs[i].take().expect("receiver");
            let (zs, stop) = (zs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(i as u64 + 7);
                let mut requests = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut b = Vec::with_capacity(PER_REQUEST * HANDOFF);
                    for k in 0..PER_REQUEST * HANDOFF {
                        let zi = pick_size(&mut rng);
                        match zs[zi].alloc() {
                            Ok(p) => {
                                // SAFETY: a fresh item of at least 64 bytes, ours.
                                unsafe { p.as_ptr().write_bytes(k as u8, 16) };
                                b.push((zi as u8, p));
                            }
                            Err(e) => {
                                eprintln!("uma child: alloc failed: {e}");
                                return (requests, rx);
                            }
                        }
                    }
                    // Hand the request on; while the next thread's queue is full, serve
                    // our own queue (never block: the ring must not deadlock at the stop).
                    let mut batch = Batch(b);
                    loop {
                        match tx.try_send(batch) {
                            Ok(()) => break,
                            Err(TrySendError::Full(b)) => {
                                if stop.load(Ordering::Relaxed) {
                                    free_batch(&zs, b);
                                    break;
                                }
                                batch = b;
                                match rx.try_recv() {
                                    Ok(x) => free_batch(&zs, x),
                                    Err(_) => std::thread::yield_now(),
                                }
                            }
                            Err(TrySendError::Disconnected(b)) => {
                                free_batch(&zs, b);
                                break;
                            }
                        }
                    }
                    requests += HANDOFF as u64;
                    match rx.recv_timeout(Duration::from_millis(100)) {
                        Ok(b) => free_batch(&zs, b),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                (requests, rx)
            })
        })
        .collect();
    drop(txs);
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut requests = 0;
    let mut leftover = Vec::new();
    for h in handles {
        let (n, rx) = h.join().expect("worker");
        requests += n;
        leftover.push(rx);
    }
    let secs = t0.elapsed().as_secs_f64();
    for rx in leftover {
        while let Ok(b) = rx.try_recv() {
            free_batch(&zs, b);
        }
    }
    emit(
        "RESULT",
        &json!({"requests": requests, "seconds": secs, "requests_per_s": requests as f64 / secs,
                "objects_per_s": (requests * PER_REQUEST as u64) as f64 / secs})
        .to_string(),
    );
    0
}

/// (b): phases of large live sets in rotating size classes, in a tight group.
pub(crate) fn child_pressure() -> i32 {
    let threads = env_u64("THREADS") as usize;
    let seconds = env_u64("SECONDS");
    let phase_bytes = env_u64("PHASE_BYTES") as usize;
    let zs = zones(false);
    let stop = Arc::new(AtomicBool::new(false));
    spawn_pressure_reporter(stop.clone());
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(seconds);
    let bytes_done = Arc::new(AtomicU64::new(0));
    let mut phases = 0u64;
    // Larger classes only: 256 B .. 4 KiB.
    let classes = [2usize, 3, 4, 5, 6];
    while Instant::now() < deadline {
        let zi = classes[phases as usize % classes.len()];
        let size = SIZES[zi];
        let per_thread = phase_bytes / threads / size;
        // Each thread allocates and writes its share; the next thread frees it.
        let batches: Vec<Batch> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let zs = &zs;
                    s.spawn(move || {
                        let mut v = Vec::with_capacity(per_thread);
                        for k in 0..per_thread {
                            match zs[zi].alloc() {
                                Ok(p) => {
                                    // SAFETY: a fresh item of `size` bytes, ours.
                                    unsafe { p.as_ptr().write_bytes((k + t) as u8, size) };
                                    v.push((zi as u8, p));
                                }
                                Err(e) => {
                                    eprintln!("uma child: alloc failed: {e}");
                                    break;
                                }
                            }
                        }
                        Batch(v)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("worker")).collect()
        });
        // Hold the live set briefly (requests being served), then hand each share on.
        std::thread::sleep(Duration::from_millis(100));
        std::thread::scope(|s| {
            let n = batches.len();
            let mut bs: Vec<Option<Batch>> = batches.into_iter().map(Some).collect();
            bs.rotate_left(1 % n.max(1));
            for b in bs.into_iter().flatten() {
                let zs = &zs;
                s.spawn(move || free_batch(zs, b));
            }
        });
        phases += 1;
        let done = bytes_done.fetch_add((per_thread * threads * size) as u64, Ordering::Relaxed)
            + (per_thread * threads * size) as u64;
        let el = t0.elapsed().as_secs_f64();
        emit(
            "PROG",
            &json!({"phases": phases, "bytes": done, "seconds": el,
                    "mb_per_s": done as f64 / el / 1e6})
            .to_string(),
        );
    }
    stop.store(true, Ordering::Relaxed);
    let el = t0.elapsed().as_secs_f64();
    let done = bytes_done.load(Ordering::Relaxed);
    let mut r = pressure_figures();
    r.insert("phases".into(), phases.into());
    r.insert("bytes".into(), done.into());
    r.insert("seconds".into(), el.into());
    r.insert("mb_per_s".into(), (done as f64 / el / 1e6).into());
    r.insert(
        "cached_bytes_end".into(),
        ebbtide::stats::collect().global.cached_bytes.into(),
    );
    emit("RESULT", &serde_json::Value::Object(r).to_string());
    0
}

struct PrOutcome {
    name: &'static str,
    run: ChildRun,
    series: Series,
    oom_kills: u64,
}

/// Writes `memory.svg` and `swap.svg` of (b), first run of each variant.
pub(crate) fn plots(
    out: &std::path::Path,
    firsts: &[(&'static str, Series)],
) -> Result<Vec<std::path::PathBuf>> {
    if firsts.is_empty() {
        return Ok(Vec::new());
    }
    let tidy: Vec<(&str, Series)> = firsts
        .iter()
        .map(|(n, s)| (*n, crate::tidy_marks(s)))
        .collect();
    let refs: Vec<(&str, &Series)> = tidy.iter().map(|(n, s)| (*n, s)).collect();
    let m = out.join("memory.svg");
    plot::memory_plot(
        "uma (b): cgroup memory under a tight limit, first run",
        &refs,
    )
    .write_svg(&m)?;
    let w = out.join("swap.svg");
    plot::swap_plot("uma (b): swap traffic, first run", &refs).write_svg(&w)?;
    Ok(vec![m, w])
}

/// Runs the uma experiment; prints progress and tables; writes `summary.json`, `tables.txt`,
/// `memory.svg`, `swap.svg` into `opts.out`.
pub fn run_uma(opts: &Opts) -> Result<Summary> {
    let mut p = Params::for_scale(opts.scale);
    p.threads = (ebbtide::os::cpu_count() as u64).max(2);
    if let Some(r) = opts.runs {
        p.tp_runs = r.max(2);
        p.pr_runs = r.max(1);
    }
    let out = out_dir(opts)?;
    let root = privileged(
        "uma",
        "(a) throughput with caches on/off; (b) under a memory limit is skipped",
    );
    let _lock = lab_setup(root)?;
    let mut summary = Summary::new("uma");
    summary.note(format!(
        "scale {}; {} threads; (a) {} s x {} runs; (b) limit {} MiB + {} MiB swap, phases of {} MiB, {} s x {} runs; load average at start {}",
        opts.scale.as_str(), p.threads, p.tp_seconds, p.tp_runs, p.limit_bytes / MIB,
        p.swap_bytes / MIB, p.phase_bytes / MIB, p.pr_seconds, p.pr_runs, loadavg()
    ));
    let total = 2 * p.tp_runs + if root { 2 * p.pr_runs } else { 0 };
    let mut progress = Progress::new("uma", total);
    let mut tables = String::new();

    // (a) Throughput.
    let mut rps: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for run in 0..p.tp_runs {
        for (k, (name, nob)) in [("caches-on", 0), ("caches-off", 1)]
            .into_iter()
            .enumerate()
        {
            progress.begin(&format!("(a) {name}, run {}", run + 1));
            let env = vec![
                ("EBBTIDE_LAB_THREADS".to_string(), p.threads.to_string()),
                ("EBBTIDE_LAB_SECONDS".to_string(), p.tp_seconds.to_string()),
                ("EBBTIDE_LAB_NOBUCKET".to_string(), nob.to_string()),
            ];
            match run_child(
                "uma-throughput",
                &env,
                None,
                None,
                Duration::from_secs(p.tp_seconds + 60),
            ) {
                Ok(r) if r.success => {
                    let v = r.num("requests_per_s").unwrap_or(0.0);
                    progress.note(&format!("{v:.0} requests/s"));
                    rps[k].push(v.round());
                }
                Ok(r) => {
                    progress.note(&format!("run failed: {}", r.status));
                }
                Err(e) => {
                    progress.note(&format!("run failed: {e}"));
                }
            }
        }
    }
    let med = |v: &[f64]| stats::Summary::of(v).map(|s| s.median);
    let ratio = match (med(&rps[0]), med(&rps[1])) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    for (k, name) in ["caches-on", "caches-off"].into_iter().enumerate() {
        summary.push(
            VariantRecord::new(name)
                .with("requests_per_s", med(&rps[k]))
                .with("requests_per_s_runs", &rps[k])
                .with("objects_per_request", PER_REQUEST)
                .with("threads", p.threads),
        );
    }
    if let Some(t) = stats::ministat_table(
        "caches",
        &[("off", &rps[1][..]), ("on", &rps[0][..])],
        stats::TTest::Welch,
        95.0,
    ) {
        tables.push_str(&format!(
            "(a) Throughput, requests/s ({} objects each, freed by another thread)\n{t}",
            PER_REQUEST
        ));
        if let Some(r) = ratio {
            tables.push_str(&format!(
                "caches on / caches off = {r:.2}x (target >= 2x)\n\n"
            ));
            summary.note(format!("throughput ratio caches on/off: {r:.2}"));
        }
    }

    // (b) Tight limit.
    let mut outcomes: Vec<PrOutcome> = Vec::new();
    if root {
        let swap = SwapFile::create(p.limit_bytes * 2)?;
        for run in 0..p.pr_runs {
            for (name, sources) in [("no-back-pressure", Some("none")), ("back-pressure", None)] {
                progress.begin(&format!(
                    "(b) {name}, run {}: limit {} MiB",
                    run + 1,
                    p.limit_bytes / MIB
                ));
                let cg = Cgroup::create(
                    &CgroupSpec::new(format!("uma-{name}"))
                        .memory_max(p.limit_bytes)
                        .swap_max(p.swap_bytes)
                        .swappiness(60),
                )?;
                let sampler = Sampler::start(SamplerConfig {
                    interval: Duration::from_millis(100),
                    pid: None,
                    cgroup: Some(cg.reader()),
                })?;
                let mut env = vec![
                    ("EBBTIDE_LAB_THREADS".to_string(), p.threads.to_string()),
                    ("EBBTIDE_LAB_SECONDS".to_string(), p.pr_seconds.to_string()),
                    (
                        "EBBTIDE_LAB_PHASE_BYTES".to_string(),
                        p.phase_bytes.to_string(),
                    ),
                ];
                if let Some(s) = sources {
                    env.push(("EBBTIDE_SOURCES".into(), s.into()));
                }
                let r = run_child(
                    "uma-pressure",
                    &env,
                    Some(&cg),
                    Some(&sampler),
                    Duration::from_secs(p.pr_seconds + 120),
                );
                let series = sampler.stop()?;
                let oom_kills = cg.oom_kills().unwrap_or(0);
                drop(cg);
                match r {
                    Ok(run) => {
                        let (i, o) = series.swap_totals();
                        progress.note(&format!(
                            "{name}: {}, OOM kills {oom_kills}, pswpin {} pswpout {}, {:.0} MB/s",
                            run.status,
                            thousands(i),
                            thousands(o),
                            run.num("mb_per_s").unwrap_or(0.0)
                        ));
                        outcomes.push(PrOutcome {
                            name,
                            run,
                            series,
                            oom_kills,
                        });
                    }
                    Err(e) => {
                        progress.note(&format!("{name} failed: {e}"));
                    }
                }
            }
        }
        drop(swap);
        if let Some(o) = outcomes.first() {
            summary.note(format!(
                "swap counters: {}",
                o.series.counter_source.as_str()
            ));
        }
        let mut t = Table::new(&[
            "",
            "run",
            "OOM kills",
            "exit",
            "pswpin",
            "pswpout",
            "MB/s",
            "peak MiB",
            "events",
        ]);
        for (i, o) in outcomes.iter().enumerate() {
            write_series(&out, &format!("{}-{}", o.name, i / 2 + 1), &o.series)?;
            let (si, so) = o.series.swap_totals();
            t.row(&[
                o.name.to_string(),
                (i / 2 + 1).to_string(),
                o.oom_kills.to_string(),
                if o.run.success {
                    "ok".to_string()
                } else if o.run.sigkill {
                    "SIGKILL".to_string()
                } else {
                    o.run.status.clone()
                },
                thousands(si),
                thousands(so),
                format!("{:.0}", o.run.num("mb_per_s").unwrap_or(0.0)),
                format!("{:.0}", mib(peak_usage(&o.series).unwrap_or(0) as f64)),
                thousands(o.run.num("pressure_events").unwrap_or(0.0) as u64),
            ]);
            summary.push(
                VariantRecord::new(o.name)
                    .with("run", i / 2 + 1)
                    .with("oom_kills", o.oom_kills)
                    .with("killed", o.run.sigkill)
                    .with("status", o.run.status.as_str())
                    .with("pswpin", si)
                    .with("pswpout", so)
                    .with("mb_per_s", o.run.num("mb_per_s"))
                    .with("phases", o.run.int("phases"))
                    .with("peak_mib", peak_usage(&o.series).map(|b| mib(b as f64)))
                    .with("mean_mib", mean_usage(&o.series).map(mib))
                    .with("pressure_events", o.run.int("pressure_events"))
                    .with("limit_mib", p.limit_bytes / MIB)
                    .with("swap_allowed_mib", p.swap_bytes / MIB),
            );
        }
        tables.push_str(&format!(
            "(b) Tight limit ({} MiB + {} MiB swap), phases of {} MiB live in rotating size classes\n{}",
            p.limit_bytes / MIB,
            p.swap_bytes / MIB,
            p.phase_bytes / MIB,
            t.render()
        ));
    } else {
        summary.note("(b) skipped: not privileged");
    }
    progress.finish();
    print!("\n{tables}");
    write_text(&out, "tables.txt", &tables)?;
    summary.write_to(&out)?;
    let firsts: Vec<(&'static str, Series)> = ["no-back-pressure", "back-pressure"]
        .iter()
        .filter_map(|n| outcomes.iter().find(|o| o.name == *n))
        .map(|o| (o.name, o.series.clone()))
        .collect();
    plots(&out, &firsts)?;
    eprintln!("uma: wrote {}", out.display());
    Ok(summary)
}
