//! # ebbtide-experiments: the seeds' experiments on a real machine
//!
//! Four experiments, each a `pub fn run_*(&Opts) -> Result<Summary>` that checks privileges,
//! takes the lab lock, removes leftovers of interrupted runs, runs every variant in a fresh
//! child process (this same binary, re-executed with `EBBTIDE_LAB_CHILD=<mode>`, placed in its
//! memory cgroup before exec), prints progress and the seed's tables, and writes
//! `summary.json`, `tables.txt` and SVG plots into the output folder:
//!
//! | function          | seed      | what                                                                |
//! |-------------------|-----------|---------------------------------------------------------------------|
//! | [`run_blkback`]   | 000, 001  | page pools of many block devices vs a guest in a limited cgroup     |
//! | [`run_uma`]       | 002       | caches on/off throughput; caches with/without back pressure at a tight limit |
//! | [`run_idle`]      | —         | memory after a burst, while idle: ebbtide vs glibc, jemalloc, mimalloc, tcmalloc |
//! | [`run_malloc`]    | —         | unmodified redis-server and python3 under every malloc in a limited cgroup: deleted data, a neighbour that needs the memory, idle give-back |
//!
//! A binary that calls these functions must call [`child_main_if_requested`] first thing in
//! `main`: the variants are that binary re-executed.
//!
//! Child protocol: the child writes lines `EBBTIDE_LAB MARK <level> <label>` (pressure events,
//! phase marks), `EBBTIDE_LAB PROG <json>` (progress, kept in case the child is killed) and one
//! `EBBTIDE_LAB RESULT <json>` (its figures) on stdout. Everything else is passed through.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod blkback;
pub mod idle;
pub mod malloc;
pub mod uma;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use blkback::run_blkback;
pub use ebbtide_lab::{Error, Result, Summary};
pub use idle::run_idle;
pub use malloc::run_malloc;
pub use uma::run_uma;

use ebbtide_lab::{Cgroup, LabChild, Sampler};
use serde_json::Value;

/// Size of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Tiny sizes, seconds: checks the machinery (CI).
    Smoke,
    /// A smaller version, about 1–3 minutes per experiment on a 2-core machine.
    Quick,
    /// The full sizes, those of the published results.
    Full,
}

impl Scale {
    /// `smoke`, `quick` or `full`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scale::Smoke => "smoke",
            Scale::Quick => "quick",
            Scale::Full => "full",
        }
    }
}

/// Options common to every experiment.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Output folder (created).
    pub out: PathBuf,
    /// Size of the run.
    pub scale: Scale,
    /// Overrides the number of repetitions where an experiment repeats runs.
    pub runs: Option<usize>,
}

impl Opts {
    /// Options with an output folder and a scale.
    pub fn new(out: impl Into<PathBuf>, scale: Scale) -> Opts {
        Opts {
            out: out.into(),
            scale,
            runs: None,
        }
    }
}

/// The environment variable naming the child mode.
pub const CHILD_ENV: &str = "EBBTIDE_LAB_CHILD";
const TAG: &str = "EBBTIDE_LAB ";

/// If this process is a variant child (`EBBTIDE_LAB_CHILD` set), runs it and exits; else
/// returns. Call it first thing in `main` of any binary that runs the experiments.
pub fn child_main_if_requested() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let code = match mode.as_str() {
        "blkback" => blkback::child_main(),
        "uma-throughput" => uma::child_throughput(),
        "uma-pressure" => uma::child_pressure(),
        "idle" => idle::child_main(),
        "malloc-neighbour" => malloc::neighbour::child_main(),
        other => {
            eprintln!("ebbtide-lab: unknown child mode {other:?}");
            2
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

// ---------------------------------------------------------------------------------------------
// Child side.

/// Writes one protocol line.
pub(crate) fn emit(kind: &str, payload: &str) {
    let out = std::io::stdout();
    let mut o = out.lock();
    let _ = writeln!(o, "{TAG}{kind} {payload}");
    let _ = o.flush();
}

/// A required numeric child parameter from `EBBTIDE_LAB_<name>`.
pub(crate) fn env_u64(name: &str) -> u64 {
    let key = format!("EBBTIDE_LAB_{name}");
    match std::env::var(&key) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{key}={v:?} is not a whole number")),
        Err(_) => panic!("{key} is not set (child parameters come from the parent)"),
    }
}

/// A child parameter string.
pub(crate) fn env_str(name: &str) -> String {
    let key = format!("EBBTIDE_LAB_{name}");
    std::env::var(&key).unwrap_or_else(|_| panic!("{key} is not set"))
}

/// The process's resident set in bytes (`/proc/self/statm`).
pub(crate) fn self_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no memory-safety preconditions.
    let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    pages * ps
}

/// A thread that reports ebbtide's pressure events as `MARK` lines, at most one per
/// `min_gap` (the cgroup v1 source fires thousands of times; the count is in the result).
pub(crate) fn spawn_pressure_reporter(stop: Arc<std::sync::atomic::AtomicBool>) {
    std::thread::spawn(move || {
        let mut last_events = 0u64;
        let mut last_mark = Instant::now() - Duration::from_secs(1);
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(25));
            let g = ebbtide::stats::collect().global;
            if g.pressure_events > last_events && last_mark.elapsed() >= Duration::from_secs(1) {
                emit(
                    "MARK",
                    &format!("{} pressure:{}", g.last_event_level, g.last_event_source),
                );
                last_mark = Instant::now();
                last_events = g.pressure_events;
            }
        }
    });
}

/// ebbtide's pressure figures for a child's result.
pub(crate) fn pressure_figures() -> serde_json::Map<String, Value> {
    let g = ebbtide::stats::collect().global;
    let mut m = serde_json::Map::new();
    m.insert("pressure_events".into(), g.pressure_events.into());
    m.insert("events_psi".into(), g.events_psi.into());
    m.insert("events_cgroup1".into(), g.events_cgroup1.into());
    m.insert("events_headroom".into(), g.events_headroom.into());
    m.insert("events_events".into(), g.events_events.into());
    m.insert("events_systemd".into(), g.events_systemd.into());
    m.insert("released_bytes".into(), g.released_bytes.into());
    m.insert("squeezed_ms".into(), g.squeezed_ms.into());
    m.insert("lazy_freed_bytes".into(), g.lazy_freed_bytes.into());
    m.insert("lazy_bytes".into(), g.lazy_bytes.into());
    m
}

/// xorshift64*: enough randomness for burst sizes, no dependency.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next() % (hi - lo + 1)
    }
}

// ---------------------------------------------------------------------------------------------
// Parent side.

/// What a child run produced.
#[derive(Debug, Default)]
pub(crate) struct ChildRun {
    /// `RESULT` payload, if the child got that far.
    pub result: Option<Value>,
    /// Last `PROG` payload.
    pub progress: Option<Value>,
    /// Exit status as text (`exit status: 0`, `signal: 9 (SIGKILL)`), or `timeout`.
    pub status: String,
    /// Exited with status 0.
    pub success: bool,
    /// Killed by SIGKILL (the OOM killer, in a limited group).
    pub sigkill: bool,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl ChildRun {
    /// A whole number from the result, else from the last progress line.
    pub fn int(&self, key: &str) -> Option<u64> {
        self.result
            .as_ref()
            .and_then(|r| r.get(key))
            .or_else(|| self.progress.as_ref().and_then(|p| p.get(key)))
            .and_then(Value::as_u64)
    }

    /// A number from the result, else from the last progress line.
    pub fn num(&self, key: &str) -> Option<f64> {
        self.result
            .as_ref()
            .and_then(|r| r.get(key))
            .or_else(|| self.progress.as_ref().and_then(|p| p.get(key)))
            .and_then(Value::as_f64)
    }
}

/// Runs this binary as a child in `mode` with `env`, inside `cg` if given, with marks going
/// to `sampler`. Kills it after `timeout`.
pub(crate) fn run_child(
    mode: &str,
    env: &[(String, String)],
    cg: Option<&Cgroup>,
    sampler: Option<&Sampler>,
    timeout: Duration,
) -> Result<ChildRun> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::Other(format!("cannot find this executable to re-run it: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.env(CHILD_ENV, mode)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let mut child = match cg {
        Some(cg) => cg.spawn(&mut cmd)?,
        None => LabChild::spawn(&mut cmd)?,
    };
    // On Ctrl-C/SIGTERM the cleanup registry runs instead of destructors: make it kill this
    // child too (a child outside a cgroup would otherwise outlive the run). Disarmed once the
    // child is reaped, so a reused pid is never signalled.
    let pid = child.pid();
    let kill_token = ebbtide_lab::cleanup::register(format!("kill child {pid}"), move || {
        // SAFETY: kill(2) on our own unreaped child's pid (the token is disarmed after reaping).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    if let Some(s) = sampler {
        s.set_pid(child.pid());
        s.mark("start", None);
    }
    let stdout = child
        .inner_mut()
        .stdout
        .take()
        .ok_or_else(|| Error::Other("child stdout not piped".into()))?;
    let marker = sampler.map(|s| s.marker());
    let shared: Arc<Mutex<(Option<Value>, Option<Value>)>> = Arc::new(Mutex::new((None, None)));
    let sh = shared.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Some(rest) = line.strip_prefix(TAG) else {
                println!("{line}");
                continue;
            };
            let (kind, payload) = rest.split_once(' ').unwrap_or((rest, ""));
            match kind {
                "MARK" => {
                    if let Some(m) = &marker {
                        let (lvl, label) = payload.split_once(' ').unwrap_or(("", payload));
                        m.mark(label, lvl.parse::<f64>().ok());
                    }
                }
                "PROG" | "RESULT" => {
                    if let Ok(v) = serde_json::from_str::<Value>(payload) {
                        let mut g = sh.lock().unwrap_or_else(|e| e.into_inner());
                        if kind == "PROG" {
                            g.1 = Some(v);
                        } else {
                            g.0 = Some(v);
                        }
                    }
                }
                _ => println!("{line}"),
            }
        }
    });
    let status = child.wait_timeout(timeout)?;
    let mut run = ChildRun {
        seconds: t0.elapsed().as_secs_f64(),
        ..ChildRun::default()
    };
    match status {
        Some(st) => {
            use std::os::unix::process::ExitStatusExt;
            run.status = st.to_string();
            run.success = st.success();
            run.sigkill = st.signal() == Some(libc::SIGKILL);
        }
        None => {
            let _ = child.kill();
            run.status = format!("timeout after {} s, killed", timeout.as_secs());
        }
    }
    kill_token.disarm();
    let _ = reader.join();
    let g = shared.lock().unwrap_or_else(|e| e.into_inner());
    run.result = g.0.clone();
    run.progress = g.1.clone();
    Ok(run)
}

/// Checks privileges; prints what is missing. Returns whether cgroups and swap can be used.
pub(crate) fn privileged(experiment: &str, without: &str) -> bool {
    let caps = ebbtide_lab::privilege::check();
    if caps.full() {
        return true;
    }
    eprintln!(
        "ebbtide-lab {experiment}: memory cgroups and a swap file need root (CAP_SYS_ADMIN, \
         a writable memory cgroup hierarchy, mkswap/swapon). What is missing:\n{}\
         Running without them: {without}. Run as root (e.g. `sudo`) for the rest.",
        caps.report()
    );
    false
}

/// Lock, signal handlers, leftovers: the start of every experiment.
pub(crate) fn lab_setup(root: bool) -> Result<Option<ebbtide_lab::LabLock>> {
    let lock = ebbtide_lab::LabLock::acquire(Duration::from_secs(900))?;
    ebbtide_lab::install_signal_handlers()?;
    if root {
        ebbtide_lab::cleanup_leftovers()?;
    }
    Ok(Some(lock))
}

/// Creates the output folder.
pub(crate) fn out_dir(opts: &Opts) -> Result<PathBuf> {
    std::fs::create_dir_all(&opts.out)
        .map_err(|e| Error::Other(format!("cannot create {}: {e}", opts.out.display())))?;
    Ok(opts.out.clone())
}

/// Writes `tables.txt`.
pub(crate) fn write_text(dir: &Path, name: &str, text: &str) -> Result<()> {
    let p = dir.join(name);
    std::fs::write(&p, text).map_err(|e| Error::Other(format!("write {}: {e}", p.display())))
}

/// A copy of `s` whose marks are fit for a plot: the first pressure event is labelled
/// `pressure`, later ones carry no label (they come about once a second; their lines remain),
/// other marks keep theirs except `start`.
pub fn tidy_marks(s: &ebbtide_lab::Series) -> ebbtide_lab::Series {
    let mut out = s.clone();
    let mut first = true;
    out.marks
        .retain(|m| m.label != "start" && m.label != "guest ready");
    for m in &mut out.marks {
        if m.label.starts_with("pressure") {
            m.label = if first {
                "pressure".into()
            } else {
                String::new()
            };
            m.level = None;
            first = false;
        }
    }
    out
}

/// Rewrites the SVG plots of an experiment's output folder from its `series-*.json` files
/// (blkback, uma); returns the files written.
pub fn replot(experiment: &str, dir: &Path) -> Result<Vec<PathBuf>> {
    let load = |name: &str| -> Option<ebbtide_lab::Series> {
        let t = std::fs::read_to_string(dir.join(format!("series-{name}.json"))).ok()?;
        serde_json::from_str(&t).ok()
    };
    let mut written = Vec::new();
    match experiment {
        "blkback" => {
            let all: Vec<(String, ebbtide_lab::Series)> =
                ["before", "after", "after-1ms", "after-100ms"]
                    .iter()
                    .filter_map(|n| load(n).map(|s| (n.to_string(), s)))
                    .collect();
            written.extend(blkback::plots(dir, &all)?);
        }
        "uma" => {
            let all: Vec<(&'static str, ebbtide_lab::Series)> =
                ["no-back-pressure", "back-pressure"]
                    .iter()
                    .filter_map(|n| load(&format!("{n}-1")).map(|s| (*n, s)))
                    .collect();
            written.extend(uma::plots(dir, &all)?);
        }
        x => return Err(Error::Other(format!("replot: no series plots for {x:?}"))),
    }
    Ok(written)
}

/// Writes a variant's time series as `series-<name>.json` (samples and marks).
pub(crate) fn write_series(dir: &Path, name: &str, s: &ebbtide_lab::Series) -> Result<()> {
    let text = serde_json::to_string(s).map_err(|e| Error::Other(format!("series: {e}")))?;
    write_text(dir, &format!("series-{name}.json"), &text)
}

/// Mean of the cgroup usage (else RSS) samples, bytes.
pub(crate) fn mean_usage(s: &ebbtide_lab::Series) -> Option<f64> {
    let v: Vec<f64> = s
        .samples
        .iter()
        .filter_map(|x| x.cgroup_usage_bytes.or(x.rss_bytes))
        .map(|b| b as f64)
        .collect();
    if v.is_empty() {
        None
    } else {
        Some(v.iter().sum::<f64>() / v.len() as f64)
    }
}

/// Peak of the cgroup usage (else RSS) samples, bytes.
pub(crate) fn peak_usage(s: &ebbtide_lab::Series) -> Option<u64> {
    s.peak_cgroup_usage().or_else(|| s.peak_rss())
}

/// MiB, one decimal.
pub(crate) fn mib(b: f64) -> f64 {
    (b / (1u64 << 20) as f64 * 10.0).round() / 10.0
}

/// Load average now (for the notes: the machine is shared).
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Usage of the lab command line (shared by `ebbtide-lab` and `ebbtide lab`).
pub const USAGE: &str = "\
usage: ebbtide lab <blkback|uma|idle|malloc|all> [--quick | --smoke | --full] [--out DIR] [--runs N]
       ebbtide lab malloc --vm [--thp always|madvise|both] [--quick | --smoke | --full] [--out DIR]

  blkback  seeds 000/001: page pools of many block devices vs a guest in a memory-limited
           cgroup with a swap file; before/after the squeeze, squeeze durations 1/10/100 ms,
           worst-case squeezing overhead (max_pgs 0 vs 1024, ministat + Welch t-test)
  uma      seed 002: request-server throughput with caches on/off; caches with/without
           back pressure under a tight memory limit (OOM kills, swap, throughput)
  idle     a burst, then idleness: RSS over time for ebbtide, glibc, jemalloc (default and
           background_thread:true), mimalloc, tcmalloc (peers via LD_PRELOAD)
  malloc   unmodified redis-server and python3 in a memory-limited cgroup with a
           swap file: a burst, the data deleted, then a neighbour needs the memory (and the
           same without it, idle); RSS, swap, OOM kills, time until the freed memory is
           back, for libebbtide_malloc.so and every peer (all by LD_PRELOAD)
  all      all four, into DIR/blkback, DIR/uma, DIR/idle, DIR/malloc

  --quick  a smaller version (about 1-3 minutes per experiment on 2 cores)
  --smoke  tiny sizes, seconds: checks the machinery
  --full   the measurements of docs/experiments.md (default)
  --out    output folder (default: lab-out/<experiment>)
  --runs   repetitions where an experiment repeats runs
  --vm     (malloc only) run it in a guest with Debian's stock kernel under qemu: cgroup v2
           (memory.max, memory.high), the groups' memory.events and stall time in the tables;
           one guest per THP mode, results in DIR/thp-always and DIR/thp-madvise
  --thp    with --vm: the guests' transparent_hugepage mode (default both)

       ebbtide lab replot <blkback|uma> DIR   redraw DIR's SVGs from its series-*.json

Root is needed for cgroups and swap files; without it, the parts that need neither run.
Everything created (cgroups, swap file) is removed at the end, on Ctrl-C, on a crash, and
leftovers of an interrupted earlier run are removed at the start.";

/// The lab's command line: `args` without the program name. Returns the process exit code.
/// Call [`child_main_if_requested`] first thing in `main`: variants re-execute the binary.
pub fn cli_main(argv: Vec<String>) -> i32 {
    cli_main_as("ebbtide-lab", argv)
}

/// [`cli_main`] for a program that prefixes its errors with `prog` (`ebbtide` for `ebbtide lab`),
/// so the lab's errors read as the rest of that program's: `PROG: error: WHAT`.
pub fn cli_main_as(prog: &str, argv: Vec<String>) -> i32 {
    if argv.first().map(String::as_str) == Some("replot") {
        // ebbtide-lab replot <blkback|uma> DIR: redraw the SVGs from series-*.json.
        let (Some(e), Some(d)) = (argv.get(1), argv.get(2)) else {
            eprintln!("{prog}: error: replot needs an experiment and a folder\nusage: ebbtide lab replot <blkback|uma> DIR");
            return 2;
        };
        match replot(e, std::path::Path::new(d)) {
            Ok(files) => files.iter().for_each(|f| println!("wrote {}", f.display())),
            Err(err) => {
                eprintln!("{prog}: error: {err}");
                return 1;
            }
        }
        return 0;
    }
    let mut args = argv.into_iter();
    let mut what = None;
    let mut scale = Scale::Full;
    let mut out: Option<PathBuf> = None;
    let mut runs = None;
    let mut vm = false;
    let mut thp = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--vm" => vm = true,
            "--thp" => {
                let v = args.next().unwrap_or_default();
                match malloc::vm::Thp::parse_list(&v) {
                    Some(l) => thp = Some(l),
                    None => {
                        eprintln!("{prog}: error: --thp takes always, madvise or both, not {v:?}\n\n{USAGE}");
                        return 2;
                    }
                }
            }
            "--quick" => scale = Scale::Quick,
            "--smoke" => scale = Scale::Smoke,
            "--full" => scale = Scale::Full,
            "--out" => out = args.next().map(PathBuf::from),
            "--runs" => {
                runs = args.next().and_then(|v| v.parse().ok());
                if runs.is_none() {
                    eprintln!("{prog}: error: --runs needs a number\n\n{USAGE}");
                    return 2;
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return 0;
            }
            x if !x.starts_with('-') && what.is_none() => what = Some(x.to_string()),
            x => {
                eprintln!("{prog}: error: unknown argument {x:?}\n\n{USAGE}");
                return 2;
            }
        }
    }
    let Some(what) = what else {
        eprintln!(
            "{prog}: error: which experiment? (blkback, uma, idle, malloc or all)\n\n{USAGE}"
        );
        return 2;
    };
    let list: Vec<&str> = match what.as_str() {
        "all" => vec!["blkback", "uma", "idle", "malloc"],
        "blkback" | "uma" | "idle" | "malloc" => vec![what.as_str()],
        x => {
            eprintln!("{prog}: error: unknown experiment {x:?} (expected blkback, uma, idle, malloc or all)\n\n{USAGE}");
            return 2;
        }
    };
    if thp.is_some() && !vm {
        eprintln!("{prog}: error: --thp goes with --vm (it sets the guest's THP mode)\n\n{USAGE}");
        return 2;
    }
    if vm {
        if list != ["malloc"] {
            eprintln!(
                "{prog}: error: --vm runs only the malloc experiment (lab malloc --vm)\n\n{USAGE}"
            );
            return 2;
        }
        let opts = Opts {
            out: out.unwrap_or_else(|| PathBuf::from("lab-out/malloc-vm")),
            scale,
            runs,
        };
        let modes = thp.unwrap_or_else(|| vec![malloc::vm::Thp::Always, malloc::vm::Thp::Madvise]);
        return match malloc::vm::run_malloc_vm(&opts, &modes) {
            Ok(dirs) => {
                dirs.iter().for_each(|d| println!("wrote {}", d.display()));
                0
            }
            Err(err) => {
                eprintln!("{prog}: error: lab malloc --vm: {err}");
                1
            }
        };
    }
    let mut failed = false;
    for e in &list {
        let dir = match (&out, list.len()) {
            (Some(o), 1) => o.clone(),
            (Some(o), _) => o.join(e),
            (None, _) => PathBuf::from("lab-out").join(e),
        };
        let opts = Opts {
            out: dir,
            scale,
            runs,
        };
        let r = match *e {
            "blkback" => run_blkback(&opts),
            "uma" => run_uma(&opts),
            "malloc" => run_malloc(&opts),
            _ => run_idle(&opts),
        };
        if let Err(err) = r {
            eprintln!("{prog}: error: lab {e}: {err}");
            failed = true;
        }
    }
    if failed {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--vm` goes with `malloc` only and `--thp` with `--vm`; bad values are named. (None of
    /// these boots a guest: they fail before.)
    #[test]
    fn vm_options_are_checked_before_anything_runs() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(cli_main(a(&["idle", "--vm"])), 2);
        assert_eq!(cli_main(a(&["all", "--vm"])), 2);
        assert_eq!(cli_main(a(&["malloc", "--thp", "always"])), 2);
        assert_eq!(cli_main(a(&["malloc", "--vm", "--thp", "never"])), 2);
        assert_eq!(cli_main(a(&["malloc", "--vm", "--thp"])), 2);
    }

    #[test]
    fn rng_range_stays_in_bounds() {
        let mut r = Rng::new(3);
        for _ in 0..10_000 {
            let v = r.range(512, 3072);
            assert!((512..=3072).contains(&v));
        }
        assert_eq!(r.range(5, 5), 5);
        assert_eq!(r.range(7, 2), 7);
    }

    #[test]
    fn blkback_sizes_make_before_exceed_and_after_fit() {
        for s in [Scale::Smoke, Scale::Quick, Scale::Full] {
            let p = blkback::Params::for_scale(s);
            let limit = p.limit_bytes();
            // Resting pools + guest exceed the limit; the guest alone leaves room for bursts.
            assert!(p.pool_bytes() + p.guest_bytes() > limit, "{s:?}");
            assert!(p.guest_bytes() * 10 <= limit * 6, "{s:?}");
            assert!(
                p.burst_max > p.max_pgs,
                "bursts must exceed max_buffer_pages"
            );
        }
    }

    #[test]
    fn tidy_marks_keeps_lines_and_one_label() {
        let mark = |t, l: &str| ebbtide_lab::sampler::Mark {
            t_ms: t,
            label: l.into(),
            level: Some(2.0),
        };
        let s = ebbtide_lab::Series {
            interval_ms: 100.0,
            counter_source: ebbtide_lab::CounterSource::SystemVmstat,
            samples: Vec::new(),
            marks: vec![
                mark(0.0, "start"),
                mark(1.0, "pressure:cgroup1"),
                mark(2.0, "pressure:psi"),
                mark(3.0, "freed"),
            ],
            errors: Vec::new(),
        };
        let t = tidy_marks(&s);
        let labels: Vec<&str> = t.marks.iter().map(|m| m.label.as_str()).collect();
        assert_eq!(labels, ["pressure", "", "freed"]);
    }
}
