//! `ebbtide lab malloc`: why a malloc should listen to memory pressure.
//!
//! Two unmodified programs from Debian — `redis-server` and `python3` (`PYTHONMALLOC=malloc`)
//! — each under every allocator ([`variants`]: ebbtide's `libebbtide_malloc.so`, glibc,
//! jemalloc default and `background_thread:true`, mimalloc, tcmalloc, all by `LD_PRELOAD`),
//! each in a fresh memory-limited cgroup (v1 `memory.limit_in_bytes`, and
//! `memory.memsw.limit_in_bytes` allowing a little swap from the experiment's swap file):
//!
//! 1. the program starts and settles; its footprint (`VmRSS + VmSwap`) is `before`;
//! 2. **burst**: real work of the program — redis: `SET`s streamed by `redis-cli --pipe`;
//!    python: a dict of records ([`redis`], [`python`]);
//! 3. **delete**: `FLUSHALL SYNC` / `del` + `gc.collect()`; the program keeps running
//!    (a request, or a few small objects, every 100 ms);
//! 4. *neighbour runs*: one second later a second process in the same cgroup ([`neighbour`])
//!    ramps up to what the group has left when the program is at rest (limit − usage before
//!    the burst − slack) and keeps it in use. Memory the allocator did not give back now has
//!    to go to swap — or, when the group's swap allowance is used up, the OOM killer steps in.
//!    *Idle runs*: no neighbour; the program just keeps running for the idle time.
//!
//! Measured per run ([`metrics`] defines the figures precisely): the program's RSS and
//! footprint over time (100 ms samples, plots), peak and after-delete footprint, the time until
//! the freed memory is back (from the neighbour's start; in idle runs from the delete), what
//! the group swapped out after that (the rises of its swap gauge) and its major faults
//! (`pgmajfault`: swap-ins), OOM kills in the group and whom they hit. cgroup v1 keeps no
//! per-group `pswpin`/`pswpout`; the system-wide ones of `/proc/vmstat` go to `summary.json`
//! only, because other groups on a shared machine swap into the same swap file (seen). For ebbtide, its statistics from the control socket ([`ctl`]): pressure
//! events per source, bytes released.
//!
//! Targets: ebbtide's freed memory back within 3 s of the pressure, within 10 s
//! when idle (aim 2 s); no OOM kill where a peer gets one; the least swap of all.

pub mod ctl;
pub mod metrics;
pub mod neighbour;
pub mod python;
pub mod redis;
pub mod variants;
pub mod vm;

use crate::{lab_setup, loadavg, out_dir, privileged, write_series, write_text, Opts, Scale};
use ebbtide_lab::{
    plot::LinePlot, thousands, Cgroup, CgroupSpec, CgroupVersion, Error, Progress, Result, Sampler,
    SamplerConfig, Series, Summary, SwapFile, Table, VariantRecord,
};
use metrics::Back;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
pub use variants::{Program, Variant};

const MIB: u64 = 1 << 20;
const MIBF: f64 = MIB as f64;

/// Sizes and times of one run of the experiment.
#[derive(Clone, Debug)]
pub struct Params {
    /// Keys `SET` in redis's burst (values of 64–1024 bytes, 544 on average).
    pub redis_keys: u64,
    /// Dict entries of python's burst (about 0.75 KiB each with glibc).
    pub python_entries: u64,
    /// The cgroup's memory limit for redis.
    pub redis_limit: u64,
    /// The cgroup's memory limit for python.
    pub python_limit: u64,
    /// Swap the group may use on top of its limit (`memory.memsw.limit_in_bytes` − limit).
    pub swap_allowance: u64,
    /// The neighbour leaves this much of the limit free when the program is back at rest.
    pub slack: u64,
    /// The neighbour's ramp, bytes per second.
    pub neighbour_rate: u64,
    /// How long the neighbour holds its memory after the ramp.
    pub hold: Duration,
    /// Idle runs: how long to watch after the delete.
    pub idle: Duration,
    /// Pause between the delete and the neighbour's start.
    pub settle: Duration,
    /// Allocators to run (`None`: all found).
    pub only: Option<&'static [&'static str]>,
}

impl Params {
    /// The sizes for a scale.
    pub fn for_scale(s: Scale) -> Params {
        match s {
            Scale::Smoke => Params {
                redis_keys: 60_000,
                python_entries: 50_000,
                redis_limit: 96 * MIB,
                python_limit: 96 * MIB,
                swap_allowance: 16 * MIB,
                slack: 16 * MIB,
                neighbour_rate: 128 * MIB,
                hold: Duration::from_secs(2),
                idle: Duration::from_secs(3),
                settle: Duration::from_millis(500),
                only: Some(&["ebbtide", "glibc", "jemalloc"]),
            },
            Scale::Quick => Params {
                redis_keys: 200_000,
                python_entries: 150_000,
                redis_limit: 192 * MIB,
                python_limit: 192 * MIB,
                swap_allowance: 48 * MIB,
                slack: 24 * MIB,
                neighbour_rate: 128 * MIB,
                hold: Duration::from_secs(5),
                idle: Duration::from_secs(10),
                settle: Duration::from_secs(1),
                only: None,
            },
            Scale::Full => Params {
                redis_keys: 500_000,
                python_entries: 400_000,
                redis_limit: 448 * MIB,
                python_limit: 448 * MIB,
                swap_allowance: 128 * MIB,
                slack: 32 * MIB,
                neighbour_rate: 128 * MIB,
                hold: Duration::from_secs(10),
                idle: Duration::from_secs(30),
                settle: Duration::from_secs(1),
                only: None,
            },
        }
    }

    /// The limit for a program.
    pub fn limit(&self, p: Program) -> u64 {
        match p {
            Program::Redis => self.redis_limit,
            Program::Python => self.python_limit,
        }
    }
}

/// With or without the neighbour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A neighbour in the same cgroup needs the memory.
    Neighbour,
    /// Nobody needs it: idle give-back.
    Idle,
}

impl Mode {
    /// `neighbour` or `idle`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Neighbour => "neighbour",
            Mode::Idle => "idle",
        }
    }
}

/// The program under test, running.
enum Running {
    Redis(redis::RedisServer, Option<redis::Trickle>),
    Python(python::Python),
}

impl Running {
    fn start(
        p: Program,
        cg: Option<&Cgroup>,
        env: &[(String, String)],
        params: &Params,
        dir: &Path,
        tag: &str,
    ) -> Result<Running> {
        Ok(match p {
            Program::Redis => {
                let s = redis::RedisServer::start(cg, env, dir, tag)?;
                let t = redis::Trickle::start(s.sock());
                Running::Redis(s, Some(t))
            }
            Program::Python => {
                Running::Python(python::Python::start(cg, env, params.python_entries)?)
            }
        })
    }

    fn pid(&self) -> i32 {
        match self {
            Running::Redis(s, _) => s.pid(),
            Running::Python(p) => p.pid(),
        }
    }

    /// The burst; returns what was put in, for the record.
    fn burst(&mut self, params: &Params) -> Result<Value> {
        match self {
            Running::Redis(s, _) => {
                let r = s.fill(params.redis_keys, 12)?;
                Ok(
                    json!({"keys": r.keys, "value_mib": r.value_bytes as f64 / MIBF,
                    "fill_s": r.seconds}),
                )
            }
            Running::Python(p) => Ok(json!({"entries": p.burst()?})),
        }
    }

    fn delete(&mut self, params: &Params) -> Result<()> {
        match self {
            Running::Redis(s, _) => s.delete(params.redis_keys),
            Running::Python(p) => p.delete(),
        }
    }

    fn alive(&mut self) -> bool {
        match self {
            Running::Redis(s, _) => s.alive(),
            Running::Python(p) => p.alive(),
        }
    }

    /// redis: `INFO memory` (the allocator line among it).
    fn info(&self) -> Option<std::collections::BTreeMap<String, String>> {
        match self {
            Running::Redis(s, _) => s.conn().ok()?.info_memory().ok(),
            Running::Python(_) => None,
        }
    }

    /// Ends it; returns its exit status and, for redis, the trickle's (ops, errors).
    fn stop(self) -> (String, Option<(u64, u64)>) {
        match self {
            Running::Redis(s, t) => {
                let ops = t.map(|t| t.finish());
                (s.stop(), ops)
            }
            Running::Python(p) => (p.stop(), None),
        }
    }
}

/// Polls a preloaded ebbtide's statistics every 500 ms (ebbtide rows only).
struct StatsPoller {
    stop: Arc<AtomicBool>,
    points: Arc<Mutex<Vec<Value>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl StatsPoller {
    fn start(pid: i32, t0: Instant) -> StatsPoller {
        let stop = Arc::new(AtomicBool::new(false));
        let points = Arc::new(Mutex::new(Vec::new()));
        let (s, p) = (stop.clone(), points.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(st) = ctl::stats_json(pid) {
                    let mut m = ctl::global_figures(&st);
                    m.insert(
                        "t_ms".into(),
                        (t0.elapsed().as_secs_f64() * 1e3).round().into(),
                    );
                    p.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(Value::Object(m));
                }
                for _ in 0..10 {
                    if s.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        StatsPoller {
            stop,
            points,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> Vec<Value> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        std::mem::take(&mut *self.points.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Everything one run measured.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Program.
    pub program: Program,
    /// Mode.
    pub mode: Mode,
    /// Allocator.
    pub alloc: &'static str,
    /// Footprint before the burst, bytes.
    pub before: f64,
    /// Largest footprint of the burst.
    pub peak: f64,
    /// Footprint right after the delete.
    pub after_delete: f64,
    /// Footprint at the end (None: the program was gone).
    pub end: Option<f64>,
    /// RSS at the end.
    pub end_rss: Option<f64>,
    /// When the freed memory was back (from the neighbour's start / the delete).
    pub back: Back,
    /// Seconds observed after the reference time.
    pub observed_s: f64,
    /// Neighbour runs: seconds from the neighbour's start until the group's usage first
    /// reached 95 % of its limit (`None`: never).
    pub limit_reached_s: Option<f64>,
    /// Bytes the group swapped out after the reference time
    /// ([`metrics::group_swapped_out_since`]).
    pub group_swap_out: u64,
    /// The group's major faults (`pgmajfault` of `memory.stat`: swap-ins, and file pages read
    /// back) after the reference time.
    pub group_majfaults: Option<u64>,
    /// System-wide swap-ins, pages, after the reference time (`/proc/vmstat`: also counts
    /// every other group on the machine that swaps into the same swap file).
    pub pswpin: u64,
    /// System-wide swap-outs, pages.
    pub pswpout: u64,
    /// Largest `VmSwap` of the program.
    pub proc_swap_peak: u64,
    /// OOM kills in the group.
    pub oom_kills: u64,
    /// The program survived to the end.
    pub program_alive: bool,
    /// The neighbour finished (neighbour runs).
    pub neighbour_ok: Option<bool>,
    /// The neighbour's ramp seconds.
    pub neighbour_ramp_s: Option<f64>,
    /// Bytes the neighbour asked for.
    pub neighbour_bytes: u64,
    /// The group's peak usage.
    pub cgroup_peak: Option<u64>,
    /// cgroup v2 `memory.events` during the run: (`high`, `max`) notifications (`None` on v1,
    /// which has neither).
    pub memory_events: Option<(u64, u64)>,
    /// Time the group's tasks stalled on memory during the run, ms: (`some`, `full`) of its
    /// `memory.pressure` (`None` where the group has no PSI file).
    pub stall_ms: Option<(f64, f64)>,
    /// Free-form figures for summary.json.
    pub extra: serde_json::Map<String, Value>,
    /// The time series, t = 0 at the reference mark.
    pub series: Series,
    /// The reference time in the series, ms.
    pub ref_ms: f64,
}

/// Shared state of one experiment run.
struct Ctx<'a> {
    params: &'a Params,
    root: bool,
    tmp: PathBuf,
    out: PathBuf,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The group's `pgmajfault` now (v1 `memory.stat`; v2 has it too).
fn group_majfaults(cg: Option<&Cgroup>) -> Option<u64> {
    cg?.reader().memory_stat().ok()?.get("pgmajfault").copied()
}

/// Own process's footprint now.
fn footprint_now(pid: i32) -> Option<u64> {
    let (rss, swap) = ebbtide_lab::sampler::proc_status_mem(pid);
    rss.map(|r| r + swap.unwrap_or(0))
}

fn run_one(ctx: &Ctx, program: Program, v: &Variant, mode: Mode) -> Result<RunResult> {
    let p = ctx.params;
    let tag = format!("{}-{}-{}", program.name(), mode.name(), v.name);
    let limit = p.limit(program);
    // memory.high (v2; v1 has none and ignores it) half the slack below the limit: a program
    // that gave its freed memory back leaves the group at the limit less the slack once the
    // neighbour has ramped up, below it; one that kept it pushes the group over it, and the
    // kernel counts `high` events and throttles there, as in a container with memory.high.
    let cg = if ctx.root {
        Some(Cgroup::create(
            &CgroupSpec::new(format!("malloc-{tag}"))
                .memory_max(limit)
                .memory_high(limit - p.slack / 2)
                .swap_max(p.swap_allowance),
        )?)
    } else {
        None
    };
    let sampler = Sampler::start(SamplerConfig {
        interval: Duration::from_millis(100),
        pid: None,
        cgroup: cg.as_ref().map(|c| c.reader()),
    })?;
    let t0 = Instant::now();
    let oom0 = cg.as_ref().map(|c| c.oom_kills().unwrap_or(0)).unwrap_or(0);
    let events0 = cg.as_ref().and_then(|c| v2_events(c));
    let stall0 = cg.as_ref().and_then(|c| stall_us(c));
    let env = v.env(program);
    let mut prog = Running::start(program, cg.as_ref(), &env, p, &ctx.tmp, &tag)?;
    let pid = prog.pid();
    sampler.set_pid(pid);
    let poller = v.is_ebbtide().then(|| StatsPoller::start(pid, t0));
    std::thread::sleep(Duration::from_millis(500));
    let before = footprint_now(pid).unwrap_or(0) as f64;
    let usage_before = cg.as_ref().and_then(|c| c.usage().ok()).unwrap_or(0);
    sampler.mark("burst", None);
    let burst_ms = ms(t0.elapsed());
    let burst_info = prog.burst(p)?;
    let peak_direct = footprint_now(pid).unwrap_or(0) as f64;
    sampler.mark("burst done", None);
    prog.delete(p)?;
    let deleted_ms = ms(t0.elapsed());
    sampler.mark("deleted", None);
    let after_delete = footprint_now(pid).unwrap_or(0) as f64;
    let mut extra = serde_json::Map::new();
    extra.insert("burst".into(), burst_info);
    let mut neighbour_ok = None;
    let mut neighbour_ramp_s = None;
    let mut neighbour_bytes = 0;
    let ref_ms;
    let majflt_ref;
    match mode {
        Mode::Idle => {
            ref_ms = deleted_ms;
            majflt_ref = group_majfaults(cg.as_ref());
            std::thread::sleep(p.idle);
        }
        Mode::Neighbour => {
            std::thread::sleep(p.settle);
            let cg = cg.as_ref().expect("neighbour runs need the cgroup");
            neighbour_bytes = limit.saturating_sub(usage_before + p.slack);
            let exe = std::env::current_exe()
                .map_err(|e| Error::Other(format!("cannot find this executable: {e}")))?;
            let mut cmd = Command::new(exe);
            cmd.env(crate::CHILD_ENV, "malloc-neighbour")
                .env("EBBTIDE_LAB_NB_BYTES", neighbour_bytes.to_string())
                .env("EBBTIDE_LAB_NB_RATE", p.neighbour_rate.to_string())
                .env("EBBTIDE_LAB_NB_HOLD_MS", p.hold.as_millis().to_string())
                .env_remove("LD_PRELOAD")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            majflt_ref = group_majfaults(Some(cg));
            ref_ms = ms(t0.elapsed());
            sampler.mark("neighbour", None);
            let mut nb = cg.spawn(&mut cmd)?;
            let out = nb.inner_mut().stdout.take();
            let reader = std::thread::spawn(move || {
                let mut s = String::new();
                if let Some(mut o) = out {
                    use std::io::Read;
                    let _ = o.read_to_string(&mut s);
                }
                s
            });
            let ramp_est = neighbour_bytes as f64 / p.neighbour_rate.max(1) as f64;
            let timeout = p.hold + Duration::from_secs_f64(ramp_est * 4.0 + 60.0);
            let st = nb.wait_timeout(timeout)?;
            let text = reader.join().unwrap_or_default();
            neighbour_ok = Some(st.is_some_and(|s| s.success()));
            if st.is_none() {
                let _ = nb.kill();
            }
            sampler.mark("neighbour end", None);
            for l in text.lines() {
                if let Some(r) = l.strip_prefix("EBBTIDE_LAB RESULT ") {
                    if let Ok(v) = serde_json::from_str::<Value>(r) {
                        neighbour_ramp_s = v.get("ramp_s").and_then(Value::as_f64);
                    }
                }
            }
            extra.insert(
                "neighbour_status".into(),
                st.map_or("timeout".into(), |s| s.to_string()).into(),
            );
            // Watch the same window in every run (ramp + hold + 1 s), also when the
            // neighbour was killed early.
            let window = ramp_est + p.hold.as_secs_f64() + 1.0;
            let seen = (ms(t0.elapsed()) - ref_ms) / 1e3;
            std::thread::sleep(Duration::from_secs_f64((window - seen).max(1.0)));
        }
    }
    let observed_s = (ms(t0.elapsed()) - ref_ms) / 1e3;
    let program_alive = prog.alive();
    if let Some(info) = prog.info() {
        for k in [
            "mem_allocator",
            "used_memory",
            "used_memory_rss",
            "allocator_allocated",
            "allocator_resident",
            "mem_fragmentation_ratio",
        ] {
            if let Some(x) = info.get(k) {
                extra.insert(format!("redis_{k}"), x.clone().into());
            }
        }
    }
    // ebbtide: its size classes at the end (what `ebbtide stat PID` shows), for the record.
    let table = v.is_ebbtide().then(|| ctl::stats_table(pid)).flatten();
    let stats = poller.map(|p| p.finish()).unwrap_or_default();
    if let Some(last) = stats.last() {
        extra.insert("ebbtide_stats".into(), last.clone());
    }
    // The series ends while the program still runs (its end state is the last sample).
    let series = sampler.stop()?;
    let (status, trickle) = prog.stop();
    extra.insert("program_exit".into(), status.into());
    if let Some((ops, errs)) = trickle {
        extra.insert("trickle_ops".into(), ops.into());
        extra.insert("trickle_errors".into(), errs.into());
    }
    let group_majfaults = match (majflt_ref, group_majfaults(cg.as_ref())) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let oom_kills = cg
        .as_ref()
        .map(|c| c.oom_kills().unwrap_or(0).saturating_sub(oom0))
        .unwrap_or(0);
    let cgroup_peak = cg.as_ref().and_then(|c| c.peak().ok().flatten());
    let memory_events = match (events0, cg.as_ref().and_then(|c| v2_events(c))) {
        (Some((h0, m0)), Some((h1, m1))) => Some((h1.saturating_sub(h0), m1.saturating_sub(m0))),
        _ => None,
    };
    let stall_ms = match (stall0, cg.as_ref().and_then(|c| stall_us(c))) {
        (Some((s0, f0)), Some((s1, f1))) => Some((
            s1.saturating_sub(s0) as f64 / 1000.0,
            f1.saturating_sub(f0) as f64 / 1000.0,
        )),
        _ => None,
    };
    drop(cg);
    if let Some(t) = &table {
        write_text(&ctx.out, &format!("ebbtide-stat-{tag}.txt"), t)?;
    }
    if !stats.is_empty() {
        let text = serde_json::to_string(&stats).map_err(|e| Error::Other(e.to_string()))?;
        write_text(&ctx.out, &format!("ebbtide-stats-{tag}.json"), &text)?;
    }
    write_series(&ctx.out, &tag, &series)?;
    // The burst's peak: the largest footprint from the burst's start to the end of the
    // delete (the delete's own requests count), also as read directly.
    let peak = metrics::peak_footprint(&series.samples, burst_ms, deleted_ms)
        .map(|x| x as f64)
        .unwrap_or(0.0)
        .max(peak_direct)
        .max(after_delete);
    let threshold = metrics::back_threshold(before, peak);
    let back = metrics::back_after(&series.samples, ref_ms, threshold);
    let limit_reached_s = match mode {
        Mode::Neighbour => metrics::limit_reached_after(&series.samples, ref_ms, limit),
        Mode::Idle => None,
    };
    let (pswpin, pswpout) = metrics::swap_since(&series, ref_ms);
    let group_swap_out = metrics::group_swapped_out_since(&series.samples, ref_ms);
    let end = metrics::last_footprint(&series.samples).map(|x| x as f64);
    let end_rss = series
        .samples
        .last()
        .and_then(|s| s.rss_bytes)
        .map(|x| x as f64);
    Ok(RunResult {
        program,
        mode,
        alloc: v.name,
        before,
        peak,
        after_delete,
        end,
        end_rss,
        back,
        observed_s,
        limit_reached_s,
        group_swap_out,
        group_majfaults,
        pswpin,
        pswpout,
        proc_swap_peak: metrics::peak_proc_swap(&series.samples, ref_ms),
        oom_kills,
        program_alive,
        neighbour_ok,
        neighbour_ramp_s,
        neighbour_bytes,
        cgroup_peak,
        memory_events,
        stall_ms,
        extra,
        series,
        ref_ms,
    })
}

/// The (`high`, `max`) counts of a v2 group's `memory.events`; `None` on v1.
fn v2_events(c: &Cgroup) -> Option<(u64, u64)> {
    if c.version() != CgroupVersion::V2 {
        return None;
    }
    let e = c.reader().events().ok()?;
    Some((*e.get("high")?, *e.get("max")?))
}

/// The group's total memory stall (`some`, `full`), µs, where it has a PSI file.
fn stall_us(c: &Cgroup) -> Option<(u64, u64)> {
    let psi = c.psi().ok().flatten()?;
    Some((psi.some.total_us, psi.full.total_us))
}

fn mibs(b: f64) -> String {
    format!("{:.1}", b / MIBF)
}

fn opt_mibs(b: Option<f64>) -> String {
    b.map_or("gone".into(), mibs)
}

/// The table of one program and mode.
pub fn table(rows: &[&RunResult], mode: Mode) -> String {
    let mut t = match mode {
        Mode::Neighbour => Table::new(&[
            "allocator",
            "before MiB",
            "peak MiB",
            "deleted MiB",
            "end MiB",
            "end RSS MiB",
            "limit reached",
            "back after pressure",
            "swapped out MiB",
            "major faults",
            "OOM kills",
            "killed",
            "events high/max",
            "stalled ms some/full",
        ]),
        Mode::Idle => Table::new(&[
            "allocator",
            "before MiB",
            "peak MiB",
            "deleted MiB",
            "end MiB",
            "returned",
            "back after delete",
        ]),
    };
    for r in rows {
        match mode {
            Mode::Neighbour => {
                let killed = match (r.program_alive, r.neighbour_ok) {
                    (true, Some(true)) => "-".to_string(),
                    (false, Some(true)) => "program".into(),
                    (true, _) => "neighbour".into(),
                    (false, _) => "both".into(),
                };
                t.row(&[
                    r.alloc.to_string(),
                    mibs(r.before),
                    mibs(r.peak),
                    mibs(r.after_delete),
                    opt_mibs(r.end),
                    opt_mibs(r.end_rss),
                    r.limit_reached_s
                        .map_or("never".into(), |x| format!("{x:.1} s")),
                    r.back.text(r.observed_s),
                    mibs(r.group_swap_out as f64),
                    r.group_majfaults.map_or("-".into(), thousands),
                    r.oom_kills.to_string(),
                    killed,
                    r.memory_events
                        .map_or("-".into(), |(h, m)| format!("{h}/{m}")),
                    r.stall_ms
                        .map_or("-".into(), |(s, f)| format!("{s:.0}/{f:.0}")),
                ])
            }
            Mode::Idle => t.row(&[
                r.alloc.to_string(),
                mibs(r.before),
                mibs(r.peak),
                mibs(r.after_delete),
                opt_mibs(r.end),
                format!(
                    "{:.0} %",
                    metrics::returned_pct(r.before, r.peak, r.end.unwrap_or(r.peak))
                ),
                r.back.text(r.observed_s),
            ]),
        };
    }
    t.render()
}

/// The footprint (or RSS) plot of one program and mode, t = 0 at the reference mark.
pub fn plot(rows: &[&RunResult], program: Program, mode: Mode, rss_only: bool) -> LinePlot {
    let what = if rss_only { "RSS" } else { "RSS + swap" };
    let (title, x, mark) = match mode {
        Mode::Neighbour => (
            format!(
                "{}: {what} after the data was deleted, a neighbour in the cgroup needs the memory",
                program.name()
            ),
            "time since the neighbour started (s)",
            "neighbour starts",
        ),
        Mode::Idle => (
            format!(
                "{}: {what} after the data was deleted, idle",
                program.name()
            ),
            "time since the delete (s)",
            "deleted",
        ),
    };
    let mut plot =
        LinePlot::new(&title, x, &format!("{what} of the program (MiB)")).mark(0.0, mark);
    for r in rows {
        let pts = r
            .series
            .samples
            .iter()
            .filter_map(|s| {
                let b = if rss_only {
                    s.rss_bytes
                } else {
                    metrics::footprint(s)
                }?;
                Some(((s.t_ms - r.ref_ms) / 1e3, b as f64 / MIBF))
            })
            .collect();
        plot = plot.line(r.alloc, pts);
    }
    plot
}

/// The targets (module docs), judged on the results: one line each, `met`/`MISSED`/`n/a`.
pub fn verdict(results: &[RunResult]) -> Vec<String> {
    let mut out = Vec::new();
    for program in [Program::Redis, Program::Python] {
        let of = |mode: Mode| -> Vec<&RunResult> {
            results
                .iter()
                .filter(|r| r.program == program && r.mode == mode)
                .collect()
        };
        let nb = of(Mode::Neighbour);
        let idle = of(Mode::Idle);
        let eb_nb = nb.iter().find(|r| r.alloc == "ebbtide");
        let eb_idle = idle.iter().find(|r| r.alloc == "ebbtide");
        let n = program.name();
        if eb_nb.is_none() && eb_idle.is_none() {
            out.push(format!(
                "{n}: n/a — no ebbtide run (library missing or not a malloc)"
            ));
            continue;
        }
        if let Some(e) = eb_nb {
            let ok = e.back.seconds().is_some_and(|s| s <= 3.0);
            out.push(format!(
                "{n}: freed memory back within 3 s of the pressure: {} ({})",
                if ok { "met" } else { "MISSED" },
                e.back.text(e.observed_s)
            ));
            let peer_killed = nb.iter().any(|r| r.alloc != "ebbtide" && r.oom_kills > 0);
            if peer_killed {
                out.push(format!(
                    "{n}: zero OOM kills where a peer is killed: {} (ebbtide {}, peers killed: {})",
                    if e.oom_kills == 0 { "met" } else { "MISSED" },
                    e.oom_kills,
                    nb.iter()
                        .filter(|r| r.alloc != "ebbtide" && r.oom_kills > 0)
                        .map(|r| r.alloc)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            } else {
                out.push(format!(
                    "{n}: zero OOM kills where a peer is killed: n/a (no peer was OOM-killed; ebbtide {})",
                    e.oom_kills
                ));
            }
            // The group's own swap-outs (the system-wide counters also count other groups
            // swapping into the same file); major faults break a tie.
            let swap = |r: &RunResult| (r.group_swap_out, r.group_majfaults.unwrap_or(0));
            let least_peer = nb
                .iter()
                .filter(|r| r.alloc != "ebbtide")
                .map(|r| swap(r))
                .min();
            match least_peer {
                Some(m) => out.push(format!(
                    "{n}: the least swap of all: {} (ebbtide swapped out {} MiB with {} major \
                     faults; the least of the peers {} MiB with {})",
                    if swap(e) <= m { "met" } else { "MISSED" },
                    mibs(swap(e).0 as f64),
                    thousands(swap(e).1),
                    mibs(m.0 as f64),
                    thousands(m.1)
                )),
                None => out.push(format!("{n}: the least swap of all: n/a (no peer ran)")),
            }
        }
        if let Some(e) = eb_idle {
            let s = e.back.seconds();
            out.push(format!(
                "{n}: idle give-back within 10 s (aim 2 s): {} ({})",
                match s {
                    Some(x) if x <= 2.0 => "met, within the aim",
                    Some(x) if x <= 10.0 => "met",
                    None if e.back == Back::Never && e.observed_s < 10.0 => {
                        "not judged: watched for less than 10 s"
                    }
                    _ => "MISSED",
                },
                e.back.text(e.observed_s)
            ));
        }
    }
    out
}

fn record(r: &RunResult, v: &Variant) -> VariantRecord {
    let mut rec = VariantRecord::new(format!(
        "{}/{}/{}",
        r.program.name(),
        r.mode.name(),
        r.alloc
    ))
    .with("program", r.program.name())
    .with("mode", r.mode.name())
    .with("allocator", r.alloc)
    .with("before_mib", ebbtide_round(r.before / MIBF))
    .with("peak_mib", ebbtide_round(r.peak / MIBF))
    .with("after_delete_mib", ebbtide_round(r.after_delete / MIBF))
    .with("end_mib", r.end.map(|x| ebbtide_round(x / MIBF)))
    .with("end_rss_mib", r.end_rss.map(|x| ebbtide_round(x / MIBF)))
    .with("back_s", r.back.seconds())
    .with(
        "back",
        match r.back {
            Back::After(_) => "back",
            Back::Never => "never",
            Back::Gone => "killed",
        },
    )
    .with("observed_s", ebbtide_round(r.observed_s))
    .with(
        "group_swap_out_mib",
        ebbtide_round(r.group_swap_out as f64 / MIBF),
    )
    .with("group_majfaults", r.group_majfaults)
    .with("system_pswpin", r.pswpin)
    .with("system_pswpout", r.pswpout)
    .with(
        "proc_swap_peak_mib",
        ebbtide_round(r.proc_swap_peak as f64 / MIBF),
    )
    .with("oom_kills", r.oom_kills)
    .with("program_alive", r.program_alive)
    .with("neighbour_ok", r.neighbour_ok)
    .with("neighbour_ramp_s", r.neighbour_ramp_s)
    .with(
        "neighbour_mib",
        ebbtide_round(r.neighbour_bytes as f64 / MIBF),
    )
    .with(
        "cgroup_peak_mib",
        r.cgroup_peak.map(|x| ebbtide_round(x as f64 / MIBF)),
    )
    .with("memory_events_high", r.memory_events.map(|e| e.0))
    .with("memory_events_max", r.memory_events.map(|e| e.1))
    .with("stall_some_ms", r.stall_ms.map(|s| ebbtide_round(s.0)))
    .with("stall_full_ms", r.stall_ms.map(|s| ebbtide_round(s.1)))
    .with(
        "ld_preload",
        v.preload_for(r.program).map(|p| p.display().to_string()),
    )
    .with("malloc_conf", v.malloc_conf)
    .with("ebbtide_conf", v.ebbtide_conf.clone());
    for (k, x) in &r.extra {
        rec.set(k, x.clone());
    }
    rec
}

fn ebbtide_round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Runs the experiment; prints progress, tables and the verdict; writes `summary.json`,
/// `tables.txt`, `series-*.json`, the plots and (ebbtide rows) `ebbtide-stats-*.json` (global
/// figures every 500 ms) and `ebbtide-stat-*.txt` (the size classes at the end) into
/// `opts.out`. Without root only the idle runs happen, outside any cgroup.
pub fn run_malloc(opts: &Opts) -> Result<Summary> {
    let p = Params::for_scale(opts.scale);
    run_malloc_with(opts, &p)
}

/// [`run_malloc`] with explicit sizes.
pub fn run_malloc_with(opts: &Opts, p: &Params) -> Result<Summary> {
    let out = out_dir(opts)?;
    let root = privileged(
        "malloc",
        "only the idle runs, outside any cgroup (no neighbour, no swap, no OOM)",
    );
    let _lock = lab_setup(root)?;
    let python = python::interpreter();
    for (tool, pkg) in [
        (PathBuf::from("redis-server"), "redis-server"),
        (PathBuf::from("redis-cli"), "redis-tools"),
        (python.clone(), "python3"),
    ] {
        if Command::new(&tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            return Err(Error::Other(format!(
                "lab malloc needs {} (Debian: apt-get install {pkg})",
                tool.display()
            )));
        }
    }
    let version = |prog: &Path| -> String {
        Command::new(prog)
            .arg("--version")
            .output()
            .map(|o| {
                let t = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                t.lines().next().unwrap_or("").trim().to_string()
            })
            .unwrap_or_default()
    };
    let programs_note = format!(
        "programs: {} ({}); {} ({})",
        python.display(),
        version(&python),
        "redis-server",
        version(Path::new("redis-server"))
    );
    let lib = ebbtide_lab::malloc_lib::locate_or_build();
    let (mut vars, missing) = variants::variants(lib);
    if let Some(only) = p.only {
        vars.retain(|v| only.contains(&v.name));
    }
    let mut summary = Summary::new("malloc");
    summary.note(format!(
        "scale {}; redis: {} keys, limit {} MiB; python: {} entries, limit {} MiB; swap \
         allowance {} MiB; neighbour slack {} MiB at {} MiB/s, held {} s; idle {} s; load \
         average at start {}",
        opts.scale.as_str(),
        p.redis_keys,
        p.redis_limit / MIB,
        p.python_entries,
        p.python_limit / MIB,
        p.swap_allowance / MIB,
        p.slack / MIB,
        p.neighbour_rate / MIB,
        p.hold.as_secs(),
        p.idle.as_secs(),
        loadavg()
    ));
    summary.note(programs_note);
    for m in &missing {
        eprintln!("malloc: {m}");
        summary.note(m.clone());
    }
    if let Some(e) = vars.iter().find(|v| v.is_ebbtide()) {
        summary.note(format!(
            "ebbtide: {} (EBBTIDE_CONF={})",
            e.preload
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            e.ebbtide_conf.as_deref().unwrap_or("")
        ));
    }
    // A scratch directory for the sockets (short paths: a Unix socket path has 108 bytes).
    let tmp = std::env::temp_dir().join(format!("ebbtide-lab-malloc-{}", std::process::id()));
    let _tmp_token = ebbtide_lab::cleanup::creating(|| {
        std::fs::create_dir_all(&tmp)
            .map_err(|e| Error::Other(format!("mkdir {}: {e}", tmp.display())))?;
        let tmp2 = tmp.clone();
        Ok::<_, Error>(ebbtide_lab::cleanup::register(
            format!("remove {}", tmp.display()),
            move || {
                let _ = std::fs::remove_dir_all(&tmp2);
            },
        ))
    })?;
    let swap = if root {
        Some(SwapFile::create(p.swap_allowance * 2 + 64 * MIB)?)
    } else {
        None
    };
    let modes: &[Mode] = if root {
        &[Mode::Neighbour, Mode::Idle]
    } else {
        &[Mode::Idle]
    };
    let ctx = Ctx {
        params: p,
        root,
        tmp: tmp.clone(),
        out: out.clone(),
    };
    let mut progress = Progress::new("malloc", 2 * modes.len() * vars.len());
    let mut results: Vec<RunResult> = Vec::new();
    for program in [Program::Redis, Program::Python] {
        for &mode in modes {
            for v in &vars {
                progress.begin(&format!("{} {} {}", program.name(), mode.name(), v.name));
                match run_one(&ctx, program, v, mode) {
                    Ok(r) => {
                        progress.note(&format!(
                            "{} {} {}: before {} MiB, peak {} MiB, deleted {} MiB, end {} MiB, back {}, group swapped out {} MiB, major faults {}, OOM kills {}",
                            program.name(),
                            mode.name(),
                            v.name,
                            mibs(r.before),
                            mibs(r.peak),
                            mibs(r.after_delete),
                            opt_mibs(r.end),
                            r.back.text(r.observed_s),
                            mibs(r.group_swap_out as f64),
                            r.group_majfaults.map_or("-".into(), thousands),
                            r.oom_kills
                        ));
                        summary.push(record(&r, v));
                        results.push(r);
                    }
                    Err(e) => {
                        progress.note(&format!(
                            "{} {} {} failed: {e}",
                            program.name(),
                            mode.name(),
                            v.name
                        ));
                        summary.push(
                            VariantRecord::new(format!(
                                "{}/{}/{}",
                                program.name(),
                                mode.name(),
                                v.name
                            ))
                            .with("error", e.to_string()),
                        );
                    }
                }
            }
        }
    }
    progress.finish();
    drop(swap);
    let mut tables = String::new();
    for program in [Program::Redis, Program::Python] {
        for &mode in modes {
            let rows: Vec<&RunResult> = results
                .iter()
                .filter(|r| r.program == program && r.mode == mode)
                .collect();
            if rows.is_empty() {
                continue;
            }
            let head = match mode {
                Mode::Neighbour => format!(
                    "{}: deleted data, then a neighbour needs the memory (limit {} MiB + {} MiB swap; \
                     footprint = RSS + swap; back = within 10 % of the burst above `before`; \
                     times from the neighbour's start; limit reached = group usage >= 95 % of \
                     the limit)",
                    program.name(),
                    p.limit(program) / MIB,
                    p.swap_allowance / MIB
                ),
                Mode::Idle => format!(
                    "{}: deleted data, idle for {} s (footprint = RSS + swap)",
                    program.name(),
                    p.idle.as_secs()
                ),
            };
            tables.push_str(&format!("{head}\n{}\n", table(&rows, mode)));
            let name = format!("malloc-{}-{}", program.name(), mode.name());
            plot(&rows, program, mode, false).write_svg(&out.join(format!("{name}.svg")))?;
            if mode == Mode::Neighbour {
                plot(&rows, program, mode, true).write_svg(&out.join(format!("{name}-rss.svg")))?;
            }
        }
    }
    if let Some(r) = results.iter().find(|r| r.program == Program::Redis) {
        if let Some(a) = r.extra.get("redis_mem_allocator") {
            tables.push_str(&format!(
                "redis INFO memory reports mem_allocator:{} under every preload (compiled in; \
                 malloc/free/malloc_usable_size bind to the preloaded library, nallocx/mallctl \
                 stay jemalloc's)\n",
                a.as_str().unwrap_or("?")
            ));
        }
    }
    let verdict = verdict(&results);
    tables.push_str(
        "\nTargets (memory back within 3 s of the pressure, 10 s idle; no OOM kill; least swap):\n",
    );
    for l in &verdict {
        tables.push_str(&format!("  {l}\n"));
        summary.note(l.clone());
    }
    print!("\n{tables}");
    write_text(&out, "tables.txt", &tables)?;
    summary.write_to(&out)?;
    eprintln!("malloc: wrote {}", out.display());
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_force_swap_when_nothing_is_given_back() {
        for s in [Scale::Smoke, Scale::Quick, Scale::Full] {
            let p = Params::for_scale(s);
            for prog in [Program::Redis, Program::Python] {
                let limit = p.limit(prog);
                // The neighbour takes what is left at rest minus the slack; a program that
                // keeps even half its burst cached pushes the group past its limit + swap.
                assert!(p.slack < limit / 4, "{s:?}");
                assert!(p.swap_allowance < limit / 2, "{s:?}");
            }
        }
    }

    fn result(alloc: &'static str, mode: Mode, back: Back, swap: u64, oom: u64) -> RunResult {
        RunResult {
            program: Program::Redis,
            mode,
            alloc,
            before: 10.0 * MIBF,
            peak: 100.0 * MIBF,
            after_delete: 90.0 * MIBF,
            end: Some(12.0 * MIBF),
            end_rss: Some(12.0 * MIBF),
            back,
            observed_s: 10.0,
            limit_reached_s: Some(1.0),
            group_swap_out: swap * 4096,
            group_majfaults: Some(swap / 10),
            pswpin: 0,
            pswpout: swap,
            proc_swap_peak: 0,
            oom_kills: oom,
            program_alive: oom == 0,
            neighbour_ok: Some(true),
            neighbour_ramp_s: Some(1.0),
            neighbour_bytes: 0,
            cgroup_peak: None,
            memory_events: None,
            stall_ms: None,
            extra: Default::default(),
            series: Series {
                interval_ms: 100.0,
                counter_source: ebbtide_lab::CounterSource::SystemVmstat,
                samples: vec![],
                marks: vec![],
                errors: vec![],
            },
            ref_ms: 0.0,
        }
    }

    #[test]
    fn verdict_judges_each_target() {
        let rs = vec![
            result("ebbtide", Mode::Neighbour, Back::After(0.4), 10, 0),
            result("glibc", Mode::Neighbour, Back::Gone, 5000, 1),
            result("jemalloc", Mode::Neighbour, Back::Never, 3000, 0),
            result("ebbtide", Mode::Idle, Back::After(1.5), 0, 0),
        ];
        let v = verdict(&rs);
        let redis: Vec<&String> = v.iter().filter(|l| l.starts_with("redis")).collect();
        assert_eq!(redis.len(), 4, "{v:?}");
        assert!(redis[0].contains("met (0.4 s)"), "{v:?}");
        assert!(
            redis[1].contains("met") && redis[1].contains("glibc"),
            "{v:?}"
        );
        assert!(
            redis[2].contains("met (ebbtide swapped out 0.0 MiB"),
            "{v:?}"
        );
        assert!(redis[3].contains("within the aim"), "{v:?}");
        assert!(v.iter().any(|l| l.starts_with("python: n/a")));

        let rs = vec![
            result("ebbtide", Mode::Neighbour, Back::After(4.0), 4000, 1),
            result("glibc", Mode::Neighbour, Back::Gone, 3000, 1),
            result("ebbtide", Mode::Idle, Back::Never, 0, 0),
        ];
        let v = verdict(&rs);
        assert_eq!(
            v.iter().filter(|l| l.contains("MISSED")).count(),
            4,
            "{v:?}"
        );
    }

    #[test]
    fn tables_render_every_row() {
        let a = result("ebbtide", Mode::Neighbour, Back::After(0.4), 10, 0);
        let b = result("glibc", Mode::Neighbour, Back::Gone, 5000, 1);
        let t = table(&[&a, &b], Mode::Neighbour);
        assert!(
            t.contains("0.4 s") && t.contains("killed") && t.contains("19.5"),
            "{t}"
        );
        let c = result("ebbtide", Mode::Idle, Back::Never, 0, 0);
        let t = table(&[&c], Mode::Idle);
        assert!(t.contains("not in 10 s") && t.contains("98 %"), "{t}");
    }
}
