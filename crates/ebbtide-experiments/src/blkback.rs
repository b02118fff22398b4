//! `ebbtide-lab blkback`: seeds 000/001, xen-blkback's page-pool squeeze.
//!
//! The model: `devices` virtual block devices, each with its own [`PagePool`]
//! (`max_buffer_pages` 1024) and one I/O thread. The I/O thread serves bursts of dd-like
//! 4 KiB writes: it takes every page of a burst from the pool at once (grant-mapped pages in
//! flight; a burst is 512–3072 pages, so a pool holds more than `max_buffer_pages` until the
//! next shrink), copies 4 KiB into each (the grant copy), `pwrite`s it into the device's
//! backing store (a tmpfs file, like the seed's ramdisk), puts the pages back, and shrinks its
//! pool (blkback shrinks when a round of I/O handling finishes; ebbtide's reclaim thread also
//! shrinks every 100 ms). Between bursts the device thinks for a random time. A "guest"
//! working set in the same memory cgroup is re-touched continuously, so whatever of it is
//! swapped out comes back in as swap-ins.
//!
//! Sizes are relative to the pools: resting pools (`devices × max_buffer_pages` pages) are
//! 8/15 of the cgroup limit, the guest 2/3 of it. Without the squeeze, pools + guest are
//! ≈ 1.25× the limit, so the group swaps; squeezed pools leave ≈ 0.75× (plus bursts).
//!
//! Variants: `before` (`EBBTIDE_SOURCES=none`: no pressure input, periodic shrink to
//! `max_buffer_pages` only), `after` with `squeeze_ms` 1, 10 (default) and 100, and the overhead
//! test: one device, `max_buffer_pages` 0 (worst-case squeezing: every round of I/O gives every
//! page back) against 1024, n runs each, MB/s.

use crate::{
    emit, env_str, env_u64, lab_setup, loadavg, mean_usage, mib, out_dir, peak_usage,
    pressure_figures, privileged, run_child, spawn_pressure_reporter, write_series, write_text,
    ChildRun, Opts, Rng, Scale,
};
use ebbtide::PagePool;
use ebbtide_lab::{
    plot, stats, thousands, Cgroup, CgroupSpec, Progress, Result, Sampler, SamplerConfig, Series,
    Summary, SwapFile, Table, VariantRecord,
};
use serde_json::json;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
const MIB: u64 = 1 << 20;

/// Sizes of one blkback run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Virtual block devices (pools, I/O threads).
    pub devices: u64,
    /// `max_buffer_pages` of every pool in the pressure variants.
    pub max_pgs: u64,
    /// Burst size range, pages.
    pub burst_min: u64,
    /// Burst size range, pages.
    pub burst_max: u64,
    /// Mean think time between bursts, ms (uniform 0..2×).
    pub think_ms: u64,
    /// Backing-store pages per device (written circularly).
    pub store_pages: u64,
    /// Seconds per pressure variant.
    pub seconds: u64,
    /// Squeeze durations to sweep, ms (10 is `after`).
    pub durations: Vec<u64>,
    /// Overhead test: runs per `max_pgs` value.
    pub overhead_runs: usize,
    /// Overhead test: pages written per run (the seed: 256 × 512).
    pub overhead_pages: u64,
    /// Guest working set, percent of the limit.
    pub guest_pct: u64,
}

impl Params {
    /// The sizes for a scale.
    pub fn for_scale(s: Scale) -> Params {
        match s {
            Scale::Smoke => Params {
                devices: 8,
                max_pgs: 1024,
                burst_min: 256,
                burst_max: 1536,
                think_ms: 60,
                store_pages: 64,
                seconds: 6,
                durations: vec![10],
                overhead_runs: 2,
                overhead_pages: 8192,
                guest_pct: 50,
            },
            Scale::Quick => Params {
                devices: 32,
                max_pgs: 1024,
                burst_min: 512,
                burst_max: 3072,
                think_ms: 150,
                store_pages: 64,
                seconds: 20,
                durations: vec![1, 10, 100],
                overhead_runs: 5,
                overhead_pages: 32768,
                guest_pct: 50,
            },
            Scale::Full => Params {
                devices: 64,
                max_pgs: 1024,
                burst_min: 512,
                burst_max: 3072,
                think_ms: 150,
                store_pages: 64,
                seconds: 60,
                durations: vec![1, 10, 100],
                overhead_runs: 10,
                overhead_pages: 256 * 512,
                guest_pct: 50,
            },
        }
    }

    /// Tuning knobs from the environment (`EBBTIDE_LAB_BLKBACK_{DEVICES,SECONDS,GUEST_PCT,
    /// THINK_MS,DURATIONS}`; durations comma-separated), for exploring the model.
    pub fn with_env_overrides(mut self) -> Params {
        let num = |k: &str| {
            std::env::var(format!("EBBTIDE_LAB_BLKBACK_{k}"))
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let Some(v) = num("DEVICES") {
            self.devices = v.max(1);
        }
        if let Some(v) = num("SECONDS") {
            self.seconds = v.max(1);
        }
        if let Some(v) = num("GUEST_PCT") {
            self.guest_pct = v.min(95);
        }
        if let Some(v) = num("THINK_MS") {
            self.think_ms = v;
        }
        if let Ok(v) = std::env::var("EBBTIDE_LAB_BLKBACK_DURATIONS") {
            let d: Vec<u64> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            if !d.is_empty() {
                self.durations = d;
            }
        }
        self
    }

    /// Resting pools, bytes.
    pub fn pool_bytes(&self) -> u64 {
        self.devices * self.max_pgs * PAGE as u64
    }

    /// The cgroup limit: resting pools are 8/15 of it.
    pub fn limit_bytes(&self) -> u64 {
        (self.pool_bytes() * 15 / 8) & !(MIB - 1)
    }

    /// The guest working set: `guest_pct` of the limit.
    pub fn guest_bytes(&self) -> u64 {
        (self.limit_bytes() * self.guest_pct / 100) & !(MIB - 1)
    }
}

// ---------------------------------------------------------------------------------------------
// Child.

/// The backing store: an unnamed tmpfs file (`O_TMPFILE` in /dev/shm, gone when the process
/// exits, so a killed run leaves nothing), else an unnamed file in /var/tmp.
fn backing_store(bytes: u64) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut last = None;
    for dir in ["/dev/shm", "/var/tmp", "/tmp"] {
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
        {
            Ok(f) => {
                f.set_len(bytes)?;
                return Ok(f);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no directory for the backing store")))
}

/// Where a round's data comes from.
enum Source<'a> {
    /// A fixed 4 KiB pattern (the pressure test).
    Pattern(&'a [u8; PAGE]),
    /// The guest's `dd if=/dev/zero bs=4k`: one 4 KiB `read` of /dev/zero per block.
    DevZero(&'a std::fs::File, &'a mut [u8; PAGE]),
}

/// One round of I/O: `n` pages taken from the pool at once (grant-mapped), the data of each
/// block copied in (the grant copy), written to the store at `slot..` with one `pwritev` per
/// request of `seg` segments, put back; then the pool is shrunk (end of I/O handling).
/// Returns bytes written.
#[allow(clippy::too_many_arguments)]
fn io_round(
    pool: &PagePool,
    store: &std::fs::File,
    base_page: u64,
    store_pages: u64,
    slot: &mut u64,
    n: usize,
    seg: usize,
    src: &mut Source<'_>,
    inflight: &mut Vec<NonNull<u8>>,
) -> u64 {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    inflight.clear();
    for _ in 0..n {
        match pool.get() {
            Ok(p) => inflight.push(p),
            Err(e) => {
                eprintln!("blkback child: page pool get failed: {e}");
                break;
            }
        }
    }
    for p in inflight.iter() {
        let data: &[u8; PAGE] = match src {
            Source::Pattern(d) => d,
            Source::DevZero(f, buf) => {
                let mut f: &std::fs::File = f;
                if f.read_exact(&mut buf[..]).is_err() {
                    eprintln!("blkback child: read /dev/zero failed");
                }
                buf
            }
        };
        // SAFETY: `p` is a page-sized, page-aligned buffer from the pool, owned by this thread
        // until it is put back below; `data` is a distinct 4 KiB array.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr(), PAGE) };
    }
    let mut bytes = 0;
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(seg);
    for req in inflight.chunks(seg.max(1)) {
        // A request's segments are contiguous on the device; wrap to the store's start.
        let first = *slot % store_pages;
        let first = if first + req.len() as u64 > store_pages {
            0
        } else {
            first
        };
        *slot = first + req.len() as u64;
        iov.clear();
        iov.extend(req.iter().map(|p| libc::iovec {
            iov_base: p.as_ptr().cast(),
            iov_len: PAGE,
        }));
        let off = ((base_page + first) * PAGE as u64) as libc::off_t;
        // SAFETY: every iovec points to a whole page of ours, valid for reads until the pages
        // are put back below; `iov` has `req.len()` initialised entries.
        let w = unsafe { libc::pwritev(store.as_raw_fd(), iov.as_ptr(), iov.len() as i32, off) };
        if w > 0 {
            bytes += w as u64;
        }
    }
    for p in inflight.drain(..) {
        // SAFETY: each page came from `pool.get()` above and is put back exactly once.
        if let Err(e) = unsafe { pool.put(p) } {
            eprintln!("blkback child: put failed: {e}");
        }
    }
    pool.shrink();
    bytes
}

/// Counting semaphore: the CPUs that serve rings. blkback's ring threads run on the host's
/// few CPUs; with one slot per CPU a burst runs to its end instead of being preempted by 60
/// other ring threads while its pages are in flight.
struct Slots {
    free: Mutex<usize>,
    cv: Condvar,
}

impl Slots {
    fn acquire(&self) {
        let mut f = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *f == 0 {
            f = self.cv.wait(f).unwrap_or_else(|e| e.into_inner());
        }
        *f -= 1;
    }
    fn release(&self) {
        *self.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cv.notify_one();
    }
}

/// The child: `EBBTIDE_LAB_MODE` = `pressure` (devices + guest) or `throughput` (one device).
pub(crate) fn child_main() -> i32 {
    let mode = env_str("MODE");
    let devices = env_u64("DEVICES") as usize;
    let max_pgs = env_u64("MAX_PGS") as usize;
    let store_pages = env_u64("STORE_PAGES");
    let store = match backing_store(devices as u64 * store_pages * PAGE as u64) {
        Ok(f) => Arc::new(f),
        Err(e) => {
            eprintln!("blkback child: backing store: {e}");
            return 1;
        }
    };
    let pools: Vec<Arc<PagePool>> = (0..devices)
        .map(|i| Arc::new(PagePool::new(&format!("blkback-vbd{i}"), max_pgs).expect("page pool")))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));

    if mode == "throughput" {
        // The seed's dd: `count` pages of 4 KiB, requests of 11 segments, 32 requests per ring
        // round; the pool is shrunk after every round (to 0 in the worst case).
        let count = env_u64("PAGES");
        let pool = &pools[0];
        let zero = match std::fs::File::open("/dev/zero") {
            Ok(f) => f,
            Err(e) => {
                eprintln!("blkback child: /dev/zero: {e}");
                return 1;
            }
        };
        let mut buf = [0u8; PAGE];
        let mut src = Source::DevZero(&zero, &mut buf);
        let mut inflight = Vec::with_capacity(352);
        let mut slot = 0;
        let t0 = Instant::now();
        let mut bytes = 0;
        let mut left = count;
        while left > 0 {
            let n = left.min(32 * 11);
            bytes += io_round(
                pool,
                &store,
                0,
                store_pages,
                &mut slot,
                n as usize,
                11,
                &mut src,
                &mut inflight,
            );
            left -= n;
        }
        let secs = t0.elapsed().as_secs_f64();
        let mut r = pressure_figures();
        r.insert("bytes".into(), bytes.into());
        r.insert("seconds".into(), secs.into());
        r.insert("mb_per_s".into(), (bytes as f64 / secs / 1e6).into());
        emit("RESULT", &serde_json::Value::Object(r).to_string());
        return 0;
    }

    let seconds = env_u64("SECONDS");
    let guest_bytes = env_u64("GUEST_BYTES") as usize;
    let (bmin, bmax, think) = (
        env_u64("BURST_MIN"),
        env_u64("BURST_MAX"),
        env_u64("THINK_MS"),
    );
    spawn_pressure_reporter(stop.clone());
    let slots = Arc::new(Slots {
        free: Mutex::new(env_u64("SLOTS").max(1) as usize),
        cv: Condvar::new(),
    });

    // The guest: a working set touched page by page, over and over (about one pass per 250 ms).
    let guest_stop = stop.clone();
    let guest_passes = Arc::new(AtomicU64::new(0));
    let gp = guest_passes.clone();
    let guest = std::thread::spawn(move || {
        let mut mem = vec![0u8; guest_bytes];
        let mut pass = 0u8;
        while !guest_stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            pass = pass.wrapping_add(1);
            for off in (0..mem.len()).step_by(PAGE) {
                mem[off] = mem[off].wrapping_add(pass);
                mem[off + 64] = pass;
            }
            gp.fetch_add(1, Ordering::Relaxed);
            if let Some(rest) = Duration::from_millis(250).checked_sub(t.elapsed()) {
                std::thread::sleep(rest);
            }
        }
        std::hint::black_box(&mem);
    });
    emit("MARK", " guest ready");

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let t0 = Instant::now();
    let threads: Vec<_> = pools
        .iter()
        .enumerate()
        .map(|(i, pool)| {
            let (pool, store, written, stop, slots) = (
                pool.clone(),
                store.clone(),
                written.clone(),
                stop.clone(),
                slots.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng::new(i as u64 + 1);
                let mut src = [0u8; PAGE];
                src.iter_mut()
                    .enumerate()
                    .for_each(|(j, b)| *b = (i + j) as u8);
                let mut inflight = Vec::with_capacity(bmax as usize);
                let mut slot = 0;
                // Devices start at random points of their think time.
                std::thread::sleep(Duration::from_millis(rng.range(0, 2 * think)));
                while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                    let n = rng.range(bmin, bmax) as usize;
                    slots.acquire();
                    let b = io_round(
                        &pool,
                        &store,
                        i as u64 * store_pages,
                        store_pages,
                        &mut slot,
                        n,
                        64,
                        &mut Source::Pattern(&src),
                        &mut inflight,
                    );
                    slots.release();
                    written.fetch_add(b, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(rng.range(0, 2 * think)));
                }
            })
        })
        .collect();
    // Progress once a second (in case the child is killed).
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1));
        if std::env::var_os("EBBTIDE_LAB_DEBUG").is_some() {
            let st = ebbtide::stats::collect();
            eprintln!(
                "debug: lazy {} MiB, squeezed {} ms, level {}, events {} (h {}, c {}), sources {:?}",
                st.global.lazy_bytes >> 20,
                st.global.squeezed_ms,
                st.global.pressure_level,
                st.global.pressure_events,
                st.global.events_headroom,
                st.global.events_cgroup1,
                st.sources
                    .iter()
                    .map(|s| format!("{}:{} {}", s.name, s.active, s.reason))
                    .collect::<Vec<_>>()
            );
        }
        let w = written.load(Ordering::Relaxed);
        emit(
            "PROG",
            &json!({"bytes": w, "seconds": t0.elapsed().as_secs_f64(),
                    "mb_per_s": w as f64 / t0.elapsed().as_secs_f64() / 1e6})
            .to_string(),
        );
    }
    for t in threads {
        let _ = t.join();
    }
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = guest.join();
    let bytes = written.load(Ordering::Relaxed);
    let mut r = pressure_figures();
    r.insert("bytes".into(), bytes.into());
    r.insert("seconds".into(), secs.into());
    r.insert("mb_per_s".into(), (bytes as f64 / secs / 1e6).into());
    r.insert(
        "guest_passes".into(),
        guest_passes.load(Ordering::Relaxed).into(),
    );
    let pool_free: u64 = pools.iter().map(|p| p.snapshot().free_pages).sum();
    r.insert("pool_free_pages_end".into(), pool_free.into());
    emit("RESULT", &serde_json::Value::Object(r).to_string());
    0
}

// ---------------------------------------------------------------------------------------------
// Parent.

/// Swap devices active now (`/proc/swaps` entries). The swap counters on cgroup v1 are the
/// system's, so a second device (another user's swap file) means the counts may not all be ours.
fn swap_devices() -> usize {
    std::fs::read_to_string("/proc/swaps")
        .map(|s| s.lines().skip(1).filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}

struct PressureOutcome {
    name: String,
    /// Most swap devices seen at the start and the end of the variant.
    swap_devices: usize,
    squeeze_ms: Option<u64>,
    run: ChildRun,
    series: Series,
    oom_kills: u64,
}

fn pressure_variant(
    p: &Params,
    name: &str,
    squeeze_ms: Option<u64>,
    progress: &mut Progress,
) -> Result<PressureOutcome> {
    progress.begin(&format!(
        "{name}: {} devices, limit {} MiB, guest {} MiB, {} s",
        p.devices,
        p.limit_bytes() / MIB,
        p.guest_bytes() / MIB,
        p.seconds
    ));
    let cg = Cgroup::create(
        &CgroupSpec::new(format!("blkback-{name}"))
            .memory_max(p.limit_bytes())
            .swappiness(60),
    )?;
    let sampler = Sampler::start(SamplerConfig {
        interval: Duration::from_millis(100),
        pid: None,
        cgroup: Some(cg.reader()),
    })?;
    let devices_start = swap_devices();
    let mut env: Vec<(String, String)> = vec![
        ("EBBTIDE_LAB_MODE".into(), "pressure".into()),
        ("EBBTIDE_LAB_DEVICES".into(), p.devices.to_string()),
        ("EBBTIDE_LAB_MAX_PGS".into(), p.max_pgs.to_string()),
        ("EBBTIDE_LAB_STORE_PAGES".into(), p.store_pages.to_string()),
        ("EBBTIDE_LAB_SECONDS".into(), p.seconds.to_string()),
        (
            "EBBTIDE_LAB_GUEST_BYTES".into(),
            p.guest_bytes().to_string(),
        ),
        ("EBBTIDE_LAB_BURST_MIN".into(), p.burst_min.to_string()),
        ("EBBTIDE_LAB_BURST_MAX".into(), p.burst_max.to_string()),
        ("EBBTIDE_LAB_THINK_MS".into(), p.think_ms.to_string()),
        (
            "EBBTIDE_LAB_SLOTS".into(),
            ebbtide::os::cpu_count().to_string(),
        ),
        ("EBBTIDE_MAX_BUFFER_PAGES".into(), p.max_pgs.to_string()),
    ];
    match squeeze_ms {
        None => {
            // blkback before the patch: no pressure input; a shrink gives pages to the kernel at
            // once (the kernel's page allocator frees them). Lazily freed pages would stay in the
            // group's usage with nothing to purge them, and flatter the reduction.
            env.push(("EBBTIDE_SOURCES".into(), "none".into()));
            env.push(("EBBTIDE_LAZY_FREE".into(), "false".into()));
        }
        Some(ms) => env.push(("EBBTIDE_SQUEEZE_MS".into(), ms.to_string())),
    }
    let run = run_child(
        "blkback",
        &env,
        Some(&cg),
        Some(&sampler),
        Duration::from_secs(p.seconds + 120),
    );
    let series = sampler.stop()?;
    let swap_devices = devices_start.max(swap_devices());
    let oom_kills = cg.oom_kills().unwrap_or(0);
    drop(cg);
    let run = run?;
    let (i, o) = series.swap_totals();
    progress.note(&format!(
        "{name}: pswpin {} pswpout {}, {:.0} MB/s, peak {} MiB, {}",
        thousands(i),
        thousands(o),
        run.num("mb_per_s").unwrap_or(0.0),
        peak_usage(&series).unwrap_or(0) / MIB,
        run.status
    ));
    if swap_devices > 1 {
        progress.note(&format!(
            "{name}: {swap_devices} swap devices were active: the system-wide swap counts may include another user's"
        ));
    }
    Ok(PressureOutcome {
        name: name.into(),
        swap_devices,
        squeeze_ms,
        run,
        series,
        oom_kills,
    })
}

fn overhead_run(p: &Params, max_pgs: u64) -> Result<ChildRun> {
    let env: Vec<(String, String)> = vec![
        ("EBBTIDE_LAB_MODE".into(), "throughput".into()),
        ("EBBTIDE_LAB_DEVICES".into(), "1".into()),
        ("EBBTIDE_LAB_MAX_PGS".into(), max_pgs.to_string()),
        ("EBBTIDE_LAB_STORE_PAGES".into(), "16384".into()),
        ("EBBTIDE_LAB_PAGES".into(), p.overhead_pages.to_string()),
    ];
    run_child("blkback", &env, None, None, Duration::from_secs(300))
}

/// Pressure events per second of the run (all sources).
fn events_per_s(run: &ChildRun) -> Option<f64> {
    let secs = run.num("seconds")?;
    (secs > 0.0).then(|| run.num("pressure_events").unwrap_or(0.0) / secs)
}

/// Share of the run covered by squeeze windows, percent.
fn squeezed_pct(run: &ChildRun) -> Option<f64> {
    let secs = run.num("seconds")?;
    let ms = run.num("squeezed_ms")?;
    (secs > 0.0).then(|| (100.0 * ms / 1000.0 / secs).min(100.0))
}

/// The seeds' figures: (pswpin, pswpout) before, after (10 ms) for v9 and v10, and the sweep.
const SEED_BEFORE: (u64, u64) = (76_672, 185_799);
const SEED_V9: [(u64, u64, u64); 3] = [(1, 707, 5_095), (10, 867, 3_967), (100, 362, 3_348)];
const SEED_V10: [(u64, u64, u64); 3] = [(1, 852, 6_424), (10, 212, 3_325), (100, 203, 3_340)];

fn reduction(before: u64, after: u64) -> f64 {
    if before == 0 {
        0.0
    } else {
        100.0 * (1.0 - after as f64 / before as f64)
    }
}

/// The short verdict that ends the run: each target, met or missed (by how much), side by side
/// with the seeds' numbers.
fn verdict(
    outcomes: &[PressureOutcome],
    mbs: &[Vec<f64>; 2],
    c: Option<&stats::Comparison>,
) -> String {
    let find = |n: &str| outcomes.iter().find(|o| o.name == n);
    let mut t = Table::new(&["", "seed v9 (000)", "seed v10 (001)", "ebbtide, this run"]);
    let pair = |(i, o): (u64, u64)| format!("{} / {}", thousands(i), thousands(o));
    let mut lines = Vec::new();
    let before = find("before").map(|o| o.series.swap_totals());
    let after = find("after").map(|o| o.series.swap_totals());
    t.row(&[
        "before pswpin / pswpout".to_string(),
        pair(SEED_BEFORE),
        pair(SEED_BEFORE),
        before.map_or("-".into(), pair),
    ]);
    t.row(&[
        "after (10 ms)".to_string(),
        pair((SEED_V9[1].1, SEED_V9[1].2)),
        pair((SEED_V10[1].1, SEED_V10[1].2)),
        after.map_or("-".into(), pair),
    ]);
    let red = |b: (u64, u64), a: (u64, u64)| {
        format!(
            "{:.1} % / {:.1} %",
            reduction(b.0, a.0),
            reduction(b.1, a.1)
        )
    };
    t.row(&[
        "reduction".to_string(),
        red(SEED_BEFORE, (SEED_V9[1].1, SEED_V9[1].2)),
        red(SEED_BEFORE, (SEED_V10[1].1, SEED_V10[1].2)),
        match (before, after) {
            (Some(b), Some(a)) => red(b, a),
            _ => "-".into(),
        },
    ]);
    let mut sweep: Vec<(u64, (u64, u64))> = outcomes
        .iter()
        .filter_map(|o| o.squeeze_ms.map(|ms| (ms, o.series.swap_totals())))
        .collect();
    sweep.sort();
    for &(ms, v9i, v9o) in &SEED_V9 {
        let v10 = SEED_V10.iter().find(|x| x.0 == ms).unwrap();
        let ours = sweep.iter().find(|x| x.0 == ms).map(|x| x.1);
        t.row(&[
            format!("{ms} ms"),
            pair((v9i, v9o)),
            pair((v10.1, v10.2)),
            ours.map_or("-".into(), pair),
        ]);
    }
    let med = |v: &[f64]| stats::Summary::of(v).map(|s| s.median);
    t.row(&[
        "max_pgs 0 vs 1024 (median MB/s)".to_string(),
        "420 vs 416".to_string(),
        "420 vs 416".to_string(),
        match (med(&mbs[0]), med(&mbs[1])) {
            (Some(a), Some(b)) => format!("{a:.0} vs {b:.0}"),
            _ => "-".into(),
        },
    ]);
    let ours_verdict = c.map_or("too few runs".to_string(), |c| {
        if c.significant {
            format!(
                "Difference at 95.0% confidence (max_pgs 0 {:+.0} % against 1024)",
                -c.difference_pct / (1.0 + c.difference_pct / 100.0)
            )
        } else {
            "No difference proven at 95.0% confidence".to_string()
        }
    });
    t.row(&[
        "verdict".to_string(),
        "No difference proven".to_string(),
        "No difference proven".to_string(),
        ours_verdict.clone(),
    ]);
    // Targets.
    match (before, after) {
        (Some(b), Some(a)) => {
            let (ri, ro) = (reduction(b.0, a.0), reduction(b.1, a.1));
            let worst = ri.min(ro);
            lines.push(if worst >= 99.0 {
                format!("swap: MET, pswpin -{ri:.1} %, pswpout -{ro:.1} % (target >= 99 %)")
            } else {
                format!(
                    "swap: MISSED by {:.1} points, pswpin -{ri:.1} %, pswpout -{ro:.1} % (target >= 99 %)",
                    99.0 - worst
                )
            });
        }
        _ => lines.push("swap: not measured (needs root)".to_string()),
    }
    if let Some(l) = duration_line(&sweep, before) {
        lines.push(l);
    }
    lines.push(format!(
        "overhead: {} ({ours_verdict}; seed: No difference proven at 95.0% confidence)",
        if c.is_some_and(|c| !c.significant) {
            "MET"
        } else {
            "MISSED"
        }
    ));
    format!(
        "Verdict, side by side with the seeds\n{}{}\n",
        t.render(),
        lines.join("\n")
    )
}

/// Writes `memory.svg`, `swap.svg` (before vs after) and `swap-durations.svg` (the sweep).
/// The verdict's line on the duration table (`sweep`: squeeze ms and swap-ins / swap-outs of
/// each `after` variant, by duration), pure. `None` with fewer than three durations.
fn duration_line(sweep: &[(u64, (u64, u64))], before: Option<(u64, u64)>) -> Option<String> {
    if sweep.len() < 3 {
        return None;
    }
    let tot = |x: (u64, u64)| x.0 + x.1;
    let (first, last) = (sweep[0].1, sweep[sweep.len() - 1].1);
    let ten = sweep.iter().find(|x| x.0 == 10).map(|x| x.1);
    // "Close" as in the seed (v10: 3,537 vs 3,543 pages at 10 and 100 ms): within 20 %, or
    // within 0.1 % of the swap before, the level at which single runs differ by chance.
    let chance = before.map_or(0, tot) / 1000;
    let slack = |t: u64| (t / 5).max(chance);
    let shape = ten.is_some_and(|t| tot(first) >= tot(t) && tot(last) <= tot(t) + slack(tot(t)));
    // Every duration at the level where single runs differ by chance: their order says nothing,
    // and the seed's excess at 1 ms (a window that closed before the pools shrank) is absent.
    let flat = before.is_some() && sweep.iter().all(|x| tot(x.1) <= chance);
    Some(format!(
        "duration: {}{} (seed: 1 ms the most swap, 10 and 100 ms lower and close: 100 ms within 20 % or 0.1 % of before of 10 ms; here {})",
        if shape { "seed's shape" } else { "NOT the seed's shape" },
        if flat {
            format!(
                " — flat: every duration within 0.1 % of before ({} pages), so their order is chance",
                thousands(chance)
            )
        } else {
            String::new()
        },
        sweep
            .iter()
            .map(|(ms, x)| format!("{ms} ms {}", thousands(tot(*x))))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

pub(crate) fn plots(
    out: &std::path::Path,
    all: &[(String, Series)],
) -> Result<Vec<std::path::PathBuf>> {
    let tidy: Vec<(String, Series)> = all
        .iter()
        .map(|(n, s)| (n.clone(), crate::tidy_marks(s)))
        .collect();
    let pick = |f: &dyn Fn(&str) -> bool| -> Vec<(&str, &Series)> {
        tidy.iter()
            .filter(|(n, _)| f(n))
            .map(|(n, s)| (n.as_str(), s))
            .collect()
    };
    let mut written = Vec::new();
    let main = pick(&|n| n == "before" || n == "after");
    if !main.is_empty() {
        let p = out.join("memory.svg");
        plot::memory_plot("blkback: cgroup memory, before vs after", &main).write_svg(&p)?;
        written.push(p);
        let p = out.join("swap.svg");
        plot::swap_plot("blkback: swap traffic, before vs after", &main).write_svg(&p)?;
        written.push(p);
    }
    let sweep = pick(&|n| n.starts_with("after"));
    if sweep.len() > 1 {
        let p = out.join("swap-durations.svg");
        plot::swap_plot("blkback: swap traffic by squeeze duration", &sweep).write_svg(&p)?;
        written.push(p);
    }
    Ok(written)
}

/// Runs the blkback experiment; prints progress and the seed's tables; writes `summary.json`,
/// `tables.txt`, `memory.svg`, `swap.svg` into `opts.out`.
pub fn run_blkback(opts: &Opts) -> Result<Summary> {
    let mut p = Params::for_scale(opts.scale).with_env_overrides();
    if let Some(r) = opts.runs {
        p.overhead_runs = r.max(2);
    }
    let out = out_dir(opts)?;
    let root = privileged(
        "blkback",
        "the overhead test (max_pgs 0 vs 1024, MB/s); the swap-in/out variants are skipped",
    );
    let _lock = lab_setup(root)?;
    let mut summary = Summary::new("blkback");
    summary.note(format!(
        "scale {}; {} devices, max_buffer_pages {}, bursts {}-{} pages, think {} ms mean, limit {} MiB, guest {} MiB, {} s per variant; load average at start {}",
        opts.scale.as_str(), p.devices, p.max_pgs, p.burst_min, p.burst_max, p.think_ms,
        p.limit_bytes() / MIB, p.guest_bytes() / MIB, p.seconds, loadavg()
    ));
    let n_pressure = if root { 1 + p.durations.len() } else { 0 };
    let mut progress = Progress::new("blkback", n_pressure + 2 * p.overhead_runs);
    let mut tables = String::new();
    let mut outcomes: Vec<PressureOutcome> = Vec::new();

    if root {
        // Swap: twice the limit, so `before` never runs out of it.
        let swap = SwapFile::create(p.limit_bytes() * 2)?;
        let mut variants: Vec<(String, Option<u64>)> = vec![("before".into(), None)];
        for &d in &p.durations {
            let name = if d == 10 {
                "after".to_string()
            } else {
                format!("after-{d}ms")
            };
            variants.push((name, Some(d)));
        }
        for (name, sq) in &variants {
            match pressure_variant(&p, name, *sq, &mut progress) {
                Ok(o) => outcomes.push(o),
                Err(e) => {
                    progress.note(&format!("{name} failed: {e}"));
                    summary.push(VariantRecord::new(name.as_str()).with("error", e.to_string()));
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
    } else {
        summary.note("pressure variants skipped: not privileged");
    }

    for o in &outcomes {
        write_series(&out, &o.name, &o.series)?;
        let (i, out_) = o.series.swap_totals();
        let mut r = VariantRecord::new(o.name.as_str())
            .with("pswpin", i)
            .with("pswpout", out_)
            .with("mb_per_s", o.run.num("mb_per_s"))
            .with("peak_mib", peak_usage(&o.series).map(|b| mib(b as f64)))
            .with("mean_mib", mean_usage(&o.series).map(mib))
            .with("pressure_events", o.run.int("pressure_events"))
            .with("events_cgroup1", o.run.int("events_cgroup1"))
            .with("events_headroom", o.run.int("events_headroom"))
            .with("events_psi", o.run.int("events_psi"))
            .with("events_per_s", events_per_s(&o.run))
            .with("squeezed_ms", o.run.int("squeezed_ms"))
            .with("squeezed_pct", squeezed_pct(&o.run))
            .with("lazy_freed_bytes", o.run.int("lazy_freed_bytes"))
            .with("oom_kills", o.oom_kills)
            .with("swap_devices", o.swap_devices)
            .with("status", o.run.status.as_str())
            .with("seconds", o.run.seconds);
        if let Some(ms) = o.squeeze_ms {
            r.set("squeeze_ms", ms);
        }
        summary.push(r);
    }

    // The seed's tables.
    let find = |n: &str| outcomes.iter().find(|o| o.name == n);
    let mut t1 = Table::new(&["", "pswpin", "pswpout"]);
    for n in ["before", "after"] {
        if let Some(o) = find(n) {
            let (i, out_) = o.series.swap_totals();
            t1.row(&[n, &thousands(i), &thousands(out_)]);
        }
    }
    if let (Some(b), Some(a)) = (find("before"), find("after")) {
        let (bi, bo) = b.series.swap_totals();
        let (ai, ao) = a.series.swap_totals();
        let red = |b: u64, a: u64| {
            if b == 0 {
                "n/a (no swap before)".to_string()
            } else {
                format!("{:.1} %", 100.0 * (1.0 - a as f64 / b as f64))
            }
        };
        tables.push_str(&format!(
            "Memory pressure test\n{}reduction: pswpin {}, pswpout {} (target >= 99 %)\n\n",
            t1.render(),
            red(bi, ai),
            red(bo, ao)
        ));
        summary.note(format!(
            "reduction after vs before: pswpin {}, pswpout {}",
            red(bi, ai),
            red(bo, ao)
        ));
    } else if !outcomes.is_empty() {
        tables.push_str(&format!("Memory pressure test\n{}\n", t1.render()));
    }
    if p.durations.len() > 1 {
        let mut t2 = Table::new(&["duration", "pswpin", "pswpout"]);
        for o in outcomes.iter().filter(|o| o.squeeze_ms.is_some()) {
            let (i, out_) = o.series.swap_totals();
            t2.row(&[
                o.squeeze_ms.unwrap_or(0).to_string(),
                thousands(i),
                thousands(out_),
            ]);
        }
        tables.push_str(&format!("Squeeze duration (ms)\n{}\n", t2.render()));
    }
    if !outcomes.is_empty() {
        let mut t3 = Table::new(&[
            "",
            "MB/s",
            "peak MiB",
            "mean MiB",
            "events",
            "events/s cgroup1",
            "headroom",
            "psi",
            "squeezed",
            "OOM kills",
        ]);
        for o in &outcomes {
            let rate = |k: &str| {
                let secs = o.run.num("seconds").unwrap_or(0.0);
                match (o.run.num(k), secs > 0.0) {
                    (Some(n), true) => format!("{:.0}", n / secs),
                    _ => "-".into(),
                }
            };
            t3.row(&[
                o.name.clone(),
                format!("{:.0}", o.run.num("mb_per_s").unwrap_or(0.0)),
                format!("{:.0}", mib(peak_usage(&o.series).unwrap_or(0) as f64)),
                format!("{:.0}", mib(mean_usage(&o.series).unwrap_or(0.0))),
                thousands(o.run.num("pressure_events").unwrap_or(0.0) as u64),
                rate("events_cgroup1"),
                rate("events_headroom"),
                rate("events_psi"),
                squeezed_pct(&o.run).map_or("-".into(), |p| format!("{p:.1} %")),
                o.oom_kills.to_string(),
            ]);
        }
        tables.push_str(&format!("Per variant\n{}\n", t3.render()));
    }

    // Overhead: alternate 0 and 1024 so drift of a shared machine hits both alike.
    let mut mbs: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for run in 0..p.overhead_runs {
        for (k, max) in [0u64, 1024].into_iter().enumerate() {
            progress.begin(&format!("overhead max_pgs {max}, run {}", run + 1));
            match overhead_run(&p, max) {
                Ok(r) if r.success => {
                    let v = r.num("mb_per_s").unwrap_or(0.0);
                    progress.note(&format!("{v:.0} MB/s"));
                    mbs[k].push(v.round());
                }
                Ok(r) => {
                    progress.note(&format!("overhead run failed: {}", r.status));
                }
                Err(e) => {
                    progress.note(&format!("overhead run failed: {e}"));
                }
            }
        }
    }
    for (k, max) in [0u64, 1024].into_iter().enumerate() {
        summary.push(
            VariantRecord::new(format!("overhead-max_pgs-{max}"))
                .with("max_buffer_pages", max)
                .with("mb_per_s_runs", &mbs[k])
                .with("mb_per_s", stats::Summary::of(&mbs[k]).map(|s| s.median)),
        );
    }
    if let Some(t) = stats::ministat_table(
        "max_pgs",
        &[("0", &mbs[0][..]), ("1024", &mbs[1][..])],
        stats::TTest::Welch,
        95.0,
    ) {
        tables.push_str(&format!(
            "Performance overhead test (MB/s, {} pages of 4 KiB per run)\n{t}",
            p.overhead_pages
        ));
        summary.note(t);
    }
    let overhead = stats::compare(&mbs[0], &mbs[1], stats::TTest::Welch, 95.0);
    let v = verdict(&outcomes, &mbs, overhead.as_ref());
    tables.push_str(&format!("\n{v}"));
    summary.note(v);
    progress.finish();
    print!("\n{tables}");
    write_text(&out, "tables.txt", &tables)?;
    summary.write_to(&out)?;
    let all: Vec<(String, Series)> = outcomes
        .iter()
        .map(|o| (o.name.clone(), o.series.clone()))
        .collect();
    plots(&out, &all)?;
    eprintln!("blkback: wrote {}", out.display());
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_duration_line_names_the_seeds_shape_and_a_flat_table() {
        let before = Some((600_000, 600_000)); // chance level: 1,200 pages
        let sweep = |a: u64, b: u64, c: u64| vec![(1, (0, a)), (10, (0, b)), (100, (0, c))];
        // The seed's v10: 1 ms clearly worst, 10 and 100 close.
        let l = duration_line(&sweep(7_276, 3_537, 3_543), before).unwrap();
        assert!(l.starts_with("duration: seed's shape ("), "{l}");
        // 1 ms below 10 ms, well above chance: not the shape, not flat.
        let l = duration_line(&sweep(2_000, 9_000, 9_100), before).unwrap();
        assert!(l.starts_with("duration: NOT the seed's shape ("), "{l}");
        // Tens of pages everywhere: the order is chance, whichever it is.
        let l = duration_line(&sweep(13, 18, 29), before).unwrap();
        assert!(
            l.starts_with("duration: NOT the seed's shape — flat: every duration within 0.1 % of before (1,200 pages)"),
            "{l}"
        );
        let l = duration_line(&sweep(31, 14, 5), before).unwrap();
        assert!(l.starts_with("duration: seed's shape — flat:"), "{l}");
        assert!(l.ends_with("here 1 ms 31, 10 ms 14, 100 ms 5)"), "{l}");
        assert_eq!(duration_line(&sweep(1, 2, 3)[..2], before), None);
    }
}
