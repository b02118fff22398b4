//! ebbtide-bench-c: ebbtide's C API through `libebbtide.so` against the peers' `malloc`/`free`
//! through `LD_PRELOAD`, all from one C program (`benches/c/allocbench.c`).
//!
//! Builds `libebbtide.so` (`cargo build --release -p ebbtide-capi`, unless `--lib-dir`), compiles
//! the C program with the system C compiler (`$CC`, default `cc`, `-O2`) against it, then runs
//! interleaved rounds: every round starts one fresh process per allocator (`ebbtide`: the
//! `ebb_zone_*` calls, no preload; `glibc`: `malloc`/`free`, no preload; `jemalloc`, `mimalloc`,
//! `tcmalloc`: `malloc`/`free` with the Debian library in `LD_PRELOAD`), the starting allocator
//! rotating from round to round. A fresh process per run means a fresh address-space layout
//! (ASLR) per sample. Prints the environment, a markdown table of medians [min–max] with the
//! ratio ebbtide / fastest peer, a table of ebbtide / each peer paired by round (median and
//! quartiles of the per-round ratio), a table of spreads (max/min) and, with `--diag`, what the
//! ebbtide processes saw per run (the method: `docs/benchmarks.md`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const USAGE: &str = "usage: ebbtide-bench-c [--reps N] [--cases a,b,...] [--min-ms MS] [--iters N]
                       [--lib-dir DIR] [--baseline-dir DIR] [--profile P] [--diag]
                       [--diag-out FILE] [--only a,b]
  --reps N        rounds; every round runs each allocator once in a fresh process (default 21)
  --cases LIST    cases, comma separated (default all: pair64 pair256 pair4096 live256_64
                  live256_256 live256_4096 cross2_64)
  --min-ms MS     each measurement lasts at least MS ms (default 20)
  --iters N       fixed iteration count per measurement (no warm-up, no calibration; for tests)
  --lib-dir DIR   use the libebbtide.so in DIR instead of building it
  --baseline-dir DIR  also run the libebbtide.so in DIR (say, a build of the commit before a
                  change) as `ebbtide-baseline`, the same program with LD_LIBRARY_PATH=DIR:
                  an A/B of two builds within one run (its paired column is ebbtide / it)
  --profile P     cargo profile to build libebbtide.so with (default release)
  --diag          the C program prints per-run diagnostics; the driver summarises the ebbtide
                  runs (CPU, migrations, context switches, faults, zone counters, addresses)
  --diag-out FILE also write every run's output lines (with round and allocator) to FILE
  --only LIST     allocators to run (default: ebbtide,glibc,jemalloc,mimalloc,tcmalloc)";

const CASES: &[&str] = &[
    "pair64",
    "pair256",
    "pair4096",
    "live256_64",
    "live256_256",
    "live256_4096",
    "cross2_64",
];

/// The allocators: name and, for a peer other than glibc, the Debian library for `LD_PRELOAD`.
const ALLOCATORS: &[(&str, Option<&str>)] = &[
    ("ebbtide", None),
    ("glibc", None),
    ("jemalloc", Some("libjemalloc.so.2")),
    ("mimalloc", Some("libmimalloc.so.2")),
    ("tcmalloc", Some("libtcmalloc_minimal.so.4")),
];

const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
];

struct Args {
    reps: usize,
    cases: Vec<String>,
    min_ms: f64,
    iters: u64,
    lib_dir: Option<PathBuf>,
    baseline_dir: Option<PathBuf>,
    profile: String,
    diag: bool,
    diag_out: Option<PathBuf>,
    only: Vec<String>,
}

fn parse_args() -> Args {
    let mut a = Args {
        reps: 21,
        cases: CASES.iter().map(|c| c.to_string()).collect(),
        min_ms: 20.0,
        iters: 0,
        lib_dir: None,
        baseline_dir: None,
        profile: "release".into(),
        diag: false,
        diag_out: None,
        only: ALLOCATORS.iter().map(|(n, _)| n.to_string()).collect(),
    };
    let mut it = std::env::args().skip(1);
    let bad = |m: &str| -> ! {
        eprintln!("ebbtide-bench-c: {m}\n{USAGE}");
        std::process::exit(2)
    };
    while let Some(k) = it.next() {
        if k == "-h" || k == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if k == "--diag" {
            a.diag = true;
            continue;
        }
        let v = it
            .next()
            .unwrap_or_else(|| bad(&format!("{k} needs a value")));
        let list = |v: &str| v.split(',').map(str::to_string).collect::<Vec<_>>();
        match k.as_str() {
            "--reps" => a.reps = v.parse().unwrap_or_else(|_| bad("bad --reps")),
            "--cases" => a.cases = list(&v),
            "--min-ms" => a.min_ms = v.parse().unwrap_or_else(|_| bad("bad --min-ms")),
            "--iters" => a.iters = v.parse().unwrap_or_else(|_| bad("bad --iters")),
            "--lib-dir" => a.lib_dir = Some(PathBuf::from(v)),
            "--baseline-dir" => a.baseline_dir = Some(PathBuf::from(v)),
            "--profile" => a.profile = v,
            "--diag-out" => a.diag_out = Some(PathBuf::from(v)),
            "--only" => a.only = list(&v),
            _ => bad(&format!("unknown option {k}")),
        }
    }
    for c in &a.cases {
        if !CASES.contains(&c.as_str()) {
            bad(&format!("unknown case {c}"));
        }
    }
    for n in &a.only {
        if !ALLOCATORS.iter().any(|(m, _)| m == n) {
            bad(&format!("unknown allocator {n}"));
        }
    }
    if a.reps == 0 {
        bad("--reps must be at least 1");
    }
    a
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        eprintln!(
            "{what} failed ({cmd:?}): {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::process::exit(1);
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `libebbtide.so`'s directory: `--lib-dir`, or a fresh `cargo build -p ebbtide-capi`.
fn library(a: &Args) -> PathBuf {
    if let Some(d) = &a.lib_dir {
        return d.clone();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!(
        "building libebbtide.so: {cargo} build --profile {} -p ebbtide-capi",
        a.profile
    );
    run_ok(
        Command::new(&cargo)
            .args(["build", "--profile", &a.profile, "-p", "ebbtide-capi"])
            .arg("--target-dir")
            .arg(target_dir())
            .current_dir(root()),
        "cargo build",
    );
    let sub = match a.profile.as_str() {
        "dev" | "test" => "debug",
        "bench" => "release",
        p => p,
    };
    target_dir().join(sub)
}

/// Compiles `benches/c/allocbench.c` against the library in `lib` into
/// `target/cbench/<profile>/allocbench`; returns the program.
fn compile(lib: &Path, profile: &str) -> PathBuf {
    let so = lib.join("libebbtide.so");
    if !so.exists() {
        eprintln!("{} missing", so.display());
        std::process::exit(1);
    }
    let out_dir = target_dir().join("cbench").join(profile);
    std::fs::create_dir_all(&out_dir).expect("create target/cbench");
    let exe = out_dir.join("allocbench");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    run_ok(
        Command::new(&cc)
            .args([
                "-O2",
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
            ])
            .arg("-pthread")
            .arg("-I")
            .arg(root().join("include"))
            .arg(root().join("benches/c/allocbench.c"))
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(lib)
            .arg("-lebbtide")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-ldl"),
        "compiling benches/c/allocbench.c",
    );
    exe
}

fn find_lib(file: &str) -> Option<PathBuf> {
    LIB_DIRS
        .iter()
        .map(|d| Path::new(d).join(file))
        .find(|p| p.exists())
}

/// One allocator to run: name and the library to preload (peers other than glibc).
struct Runner {
    name: &'static str,
    preload: Option<PathBuf>,
    /// `LD_LIBRARY_PATH` for the run: where `ebbtide-baseline` finds its `libebbtide.so`
    /// (the program's run path is a RUNPATH, which `LD_LIBRARY_PATH` overrides).
    lib_path: Option<PathBuf>,
}

fn runners(only: &[String]) -> Vec<Runner> {
    let mut v = Vec::new();
    for (name, so) in ALLOCATORS {
        if !only.iter().any(|o| o == name) {
            continue;
        }
        let preload = match so {
            None => None,
            Some(f) => match find_lib(f) {
                Some(p) => Some(p),
                None => {
                    eprintln!(
                        "skipping {name}: {f} not found in {} (Debian: apt-get install {})",
                        LIB_DIRS.join(", "),
                        match *name {
                            "jemalloc" => "libjemalloc2",
                            "mimalloc" => "libmimalloc2.0",
                            _ => "libtcmalloc-minimal4",
                        }
                    );
                    continue;
                }
            },
        };
        v.push(Runner {
            name,
            preload,
            lib_path: None,
        });
    }
    v
}

/// What one process printed: `case allocator ns` lines, and the `#` lines.
struct RunOut {
    ns: BTreeMap<String, f64>,
    comments: Vec<String>,
}

/// Parses the program's output; checks every result line names `label` and that the malloc in
/// use is the one asked for (`expect_from`: a substring of the defining object's path).
fn parse_run(text: &str, label: &str, expect_from: Option<&str>) -> Result<RunOut, String> {
    let mut ns = BTreeMap::new();
    let mut comments = Vec::new();
    let mut done = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix('#') {
            if let Some(d) = rest.strip_prefix("done cases=") {
                done = d.trim().parse::<usize>().ok();
            }
            if let (Some(info), Some(want)) = (rest.strip_prefix("info "), expect_from) {
                let from = kv(info, "malloc_from").unwrap_or("");
                if !from.contains(want) {
                    return Err(format!(
                        "{label}: malloc comes from {from}, not {want} (LD_PRELOAD not applied?)"
                    ));
                }
            }
            comments.push(line.to_string());
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [case, alloc, v] if CASES.contains(case) && *alloc == label => {
                let v: f64 = v.parse().map_err(|_| format!("bad figure in {line:?}"))?;
                if !(v.is_finite() && v > 0.0) {
                    return Err(format!("bad figure in {line:?}"));
                }
                ns.insert(case.to_string(), v);
            }
            _ => return Err(format!("unexpected line {line:?}")),
        }
    }
    match done {
        Some(n) if n == ns.len() => Ok(RunOut { ns, comments }),
        Some(n) => Err(format!("#done says {n} cases, {} result lines", ns.len())),
        None => Err("no #done line".into()),
    }
}

/// `key=value` in a whitespace-separated line.
fn kv<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn run_once(exe: &Path, r: &Runner, a: &Args) -> RunOut {
    let mut cmd = Command::new(exe);
    cmd.env_remove("LD_PRELOAD")
        .arg("--alloc")
        .arg(if r.name.starts_with("ebbtide") {
            "ebbtide"
        } else {
            "malloc"
        })
        .args(["--label", r.name, "--cases", &a.cases.join(",")])
        .args(["--min-ms", &a.min_ms.to_string()]);
    if a.iters > 0 {
        cmd.args(["--iters", &a.iters.to_string()]);
    }
    if a.diag {
        cmd.arg("--diag");
    }
    if let Some(p) = &r.preload {
        cmd.env("LD_PRELOAD", p);
    }
    if let Some(d) = &r.lib_path {
        cmd.env("LD_LIBRARY_PATH", d);
    }
    let text = run_ok(&mut cmd, r.name);
    let want = match (r.name, &r.preload) {
        (_, Some(p)) => Some(p.file_name().unwrap().to_str().unwrap().to_string()),
        ("glibc", None) => Some("libc.so".to_string()),
        _ => None,
    };
    parse_run(&text, r.name, want.as_deref()).unwrap_or_else(|e| {
        eprintln!("{}: {e}\n{text}", r.name);
        std::process::exit(1)
    })
}

// ---------------------------------------------------------------- statistics

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => s[n / 2],
        _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Ratios of `a` to `b` taken round by round (`a[r] / b[r]`: two processes of one round, which
/// ran within about a second of each other), as (median, first quartile, third quartile). On a
/// host whose clock moves between seconds, a round's processes share most of what moved, so the
/// paired ratio is steadier than the ratio of two medians over all rounds.
fn paired_ratio(a: &[f64], b: &[f64]) -> (f64, f64, f64) {
    let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    r.sort_by(f64::total_cmp);
    if r.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let q = |f: f64| r[(f * (r.len() - 1) as f64).round() as usize];
    (median(&r), q(0.25), q(0.75))
}

/// The threshold between a fast and a slow mode, if the samples have a slow mode: twice the
/// median of the faster half (the fast mode's typical value), when at least one sample reaches
/// it. Samples below the threshold are fast. None: one mode.
fn bimodal_threshold(v: &[f64]) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.len() < 2 {
        return None;
    }
    let t = 2.0 * median(&s[..s.len().div_ceil(2)]);
    (s[s.len() - 1] >= t).then_some(t)
}

// ---------------------------------------------------------------- environment

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "?".into())
}

fn print_environment(a: &Args, rs: &[Runner]) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("# ebbtide-bench-c");
    println!();
    println!(
        "- date: {}",
        first_line("date", &["-u", "+%Y-%m-%d %H:%M:%S UTC"])
    );
    println!(
        "- cpu: {cpu} ({} online)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("- kernel: {}", kernel.trim());
    println!("- glibc: {}", first_line("ldd", &["--version"]));
    println!(
        "- cc: {}",
        first_line(
            &std::env::var("CC").unwrap_or_else(|_| "cc".into()),
            &["--version"]
        )
    );
    for r in rs {
        match &r.preload {
            Some(p) => println!("- {}: LD_PRELOAD={}", r.name, p.display()),
            None if r.name == "ebbtide" => {
                println!("- ebbtide: ebb_zone_alloc/ebb_zone_free through libebbtide.so")
            }
            None if r.lib_path.is_some() => println!(
                "- {}: ebb_zone_alloc/ebb_zone_free through LD_LIBRARY_PATH={}",
                r.name,
                r.lib_path.as_ref().unwrap().display()
            ),
            None => println!("- {}: the process's own malloc/free", r.name),
        }
    }
    println!(
        "- rounds: {}, min {} ms per measurement{}",
        a.reps,
        a.min_ms,
        if a.iters > 0 {
            format!(", fixed {} iterations", a.iters)
        } else {
            String::new()
        }
    );
    println!("- load average before: {}", loadavg());
}

// ---------------------------------------------------------------- main

fn main() {
    let a = parse_args();
    let lib = library(&a);
    let exe = compile(&lib, &a.profile);
    let mut rs = runners(&a.only);
    if let Some(d) = &a.baseline_dir {
        if !d.join("libebbtide.so").is_file() {
            eprintln!("--baseline-dir {}: no libebbtide.so there", d.display());
            std::process::exit(2);
        }
        let at = usize::from(rs.first().is_some_and(|r| r.name == "ebbtide"));
        rs.insert(
            at,
            Runner {
                name: "ebbtide-baseline",
                preload: None,
                lib_path: Some(d.clone()),
            },
        );
    }
    if rs.is_empty() {
        eprintln!("no allocator to run");
        std::process::exit(1);
    }
    print_environment(&a, &rs);
    // samples[case][allocator index] and, per ebbtide run, its #diag lines.
    let mut samples: BTreeMap<String, Vec<Vec<f64>>> = a
        .cases
        .iter()
        .map(|c| (c.clone(), vec![Vec::new(); rs.len()]))
        .collect();
    let mut diags: Vec<(usize, &str, RunOut)> = Vec::new();
    let mut log = String::new();
    for round in 0..a.reps {
        for k in 0..rs.len() {
            let i = (k + round) % rs.len();
            let out = run_once(&exe, &rs[i], &a);
            for (c, v) in &out.ns {
                samples.get_mut(c).unwrap()[i].push(*v);
                log += &format!("round={round} {c} {} {v}\n", rs[i].name);
            }
            for l in &out.comments {
                log += &format!("round={round} {l}\n");
            }
            diags.push((round, rs[i].name, out));
        }
        eprintln!("round {}/{} done (load {})", round + 1, a.reps, loadavg());
    }
    if let Some(f) = &a.diag_out {
        std::fs::write(f, &log).expect("write --diag-out");
    }
    println!("- load average after: {}", loadavg());
    println!();
    print_tables(&a, &rs, &samples);
    if a.diag {
        print_diag(&a, &diags);
    }
}

fn print_tables(a: &Args, rs: &[Runner], samples: &BTreeMap<String, Vec<Vec<f64>>>) {
    let names: Vec<&str> = rs.iter().map(|r| r.name).collect();
    let peers: Vec<usize> = (0..rs.len()).filter(|i| names[*i] != "ebbtide").collect();
    let eb = names.iter().position(|n| *n == "ebbtide");
    println!("| case | {} | ebbtide / fastest peer |", names.join(" | "));
    println!("|---|{}---:|", "---:|".repeat(names.len()));
    for c in &a.cases {
        let s = &samples[c];
        let cells: Vec<String> = s
            .iter()
            .map(|v| format!("{:.2} [{:.2}–{:.2}]", median(v), min(v), max(v)))
            .collect();
        let best = peers
            .iter()
            .map(|i| (median(&s[*i]), names[*i]))
            .min_by(|x, y| x.0.total_cmp(&y.0));
        let ratio = match (eb, best) {
            (Some(e), Some((b, n))) => format!("**{:.2}** ({n})", median(&s[e]) / b),
            _ => "—".into(),
        };
        println!("| {c} | {} | {ratio} |", cells.join(" | "));
    }
    println!();
    println!(
        "Cells: ns per operation, median [min–max] over {} runs, each a fresh process.",
        a.reps
    );
    println!();
    if let (Some(e), false) = (eb, peers.is_empty()) {
        println!("ebbtide / each peer, paired by round (median [q25–q75] over the rounds of the ratio of the two processes of one round):");
        println!();
        let pn: Vec<&str> = peers.iter().map(|i| names[*i]).collect();
        println!("| case | {} |", pn.join(" | "));
        println!("|---|{}", "---:|".repeat(pn.len()));
        for c in &a.cases {
            let s = &samples[c];
            let cells: Vec<String> = peers
                .iter()
                .map(|i| {
                    let (m, lo, hi) = paired_ratio(&s[e], &s[*i]);
                    format!("{m:.3} [{lo:.3}–{hi:.3}]")
                })
                .collect();
            println!("| {c} | {} |", cells.join(" | "));
        }
        println!();
    }
    println!("Spread between runs (max / min):");
    println!();
    println!(
        "| case | {} | ebbtide within the peers' widest? |",
        names.join(" | ")
    );
    println!("|---|{}---|", "---:|".repeat(names.len()));
    for c in &a.cases {
        let s = &samples[c];
        let sp: Vec<f64> = s.iter().map(|v| max(v) / min(v)).collect();
        let widest = peers.iter().map(|i| sp[*i]).fold(f64::NAN, f64::max);
        let verdict = match eb {
            Some(e) if !widest.is_nan() => {
                if sp[e] <= widest {
                    "yes".to_string()
                } else {
                    format!("**no** ({:.2} > {widest:.2})", sp[e])
                }
            }
            _ => "—".into(),
        };
        let cells: Vec<String> = sp.iter().map(|x| format!("{x:.2}")).collect();
        println!("| {c} | {} | {verdict} |", cells.join(" | "));
    }
    println!();
}

/// Per ebbtide run: the figure and what its `#diag` line says, grouped fast / slow.
fn print_diag(a: &Args, diags: &[(usize, &str, RunOut)]) {
    const KEYS: &[&str] = &[
        "cpu_ns",
        "other_threads_cpu_ms",
        "cpu_start",
        "cpu_end",
        "migrations",
        "switches",
        "invol_switches",
        "minflt",
        "pressure_events",
        "buckets_enabled",
        "reclaim_drain_cpu",
        "pcpu_count",
        "slot_lo12",
        "requests",
        "depot_nitems_before",
        "depot_nitems_after",
        "bucket_size",
        "live_array_lo12",
        "stack_local_lo12",
        "item_lo12",
    ];
    println!("## ebbtide runs, per process (--diag)");
    println!();
    println!(
        "Classified by the measuring thread's CPU time per operation (cpu_ns), which time \
         slices lost to other processes do not inflate; ns is the wall-clock figure."
    );
    for c in &a.cases {
        // (round, wall ns, cpu ns, the case's #diag line) of every ebbtide run, in round order.
        let runs: Vec<(usize, f64, f64, &str)> = diags
            .iter()
            .filter(|(_, n, _)| *n == "ebbtide")
            .filter_map(|(round, _, out)| {
                let l = out
                    .comments
                    .iter()
                    .find(|l| l.starts_with(&format!("#diag {c} ")))?;
                let cpu = kv(l, "cpu_ns")?.parse().ok()?;
                Some((*round, *out.ns.get(c)?, cpu, l.as_str()))
            })
            .collect();
        if runs.is_empty() {
            continue;
        }
        let cpu: Vec<f64> = runs.iter().map(|r| r.2).filter(|v| *v > 0.0).collect();
        let thr = bimodal_threshold(&cpu);
        println!();
        match thr {
            Some(t) => println!(
                "### {c}: bimodal, {} fast (cpu_ns < {t:.2}) and {} slow runs",
                cpu.iter().filter(|v| **v < t).count(),
                cpu.iter().filter(|v| **v >= t).count()
            ),
            None => println!("### {c}: one mode (no run at twice the faster half's median cpu_ns)"),
        }
        println!();
        println!("| round | ns | class | {} |", KEYS.join(" | "));
        println!("|---:|---:|---|{}", "---:|".repeat(KEYS.len()));
        for (round, v, cpu, l) in &runs {
            let class = match thr {
                Some(t) if *cpu >= t => "slow",
                Some(_) => "fast",
                None => "-",
            };
            let cells: Vec<&str> = KEYS.iter().map(|k| kv(l, k).unwrap_or("-")).collect();
            println!("| {round} | {v:.2} | {class} | {} |", cells.join(" | "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(min(&[3.0, 1.0]), 1.0);
        assert_eq!(max(&[3.0, 1.0]), 3.0);
    }

    #[test]
    fn paired_ratio_pairs_the_rounds() {
        // A clock that halves every other round: the medians' ratio sees the rounds mixed, the
        // paired ratio the 0.9 of every round.
        let b = [4.0, 8.0, 4.0, 8.0, 4.0];
        let a: Vec<f64> = b.iter().map(|x| x * 0.9).collect();
        let (m, lo, hi) = paired_ratio(&a, &b);
        assert!((m - 0.9).abs() < 1e-12 && (lo - 0.9).abs() < 1e-12 && (hi - 0.9).abs() < 1e-12);
        let (m, lo, hi) = paired_ratio(&[1.0, 2.0, 3.0, 4.0, 5.0], &[1.0; 5]);
        assert_eq!((m, lo, hi), (3.0, 2.0, 4.0));
        assert!(paired_ratio(&[], &[]).0.is_nan());
    }

    #[test]
    fn bimodal_threshold_twice_the_fast_mode() {
        // The figures: 8 runs at 3.3 ns, 3 at 10.6-10.7 ns.
        let v = [
            3.3, 3.31, 10.6, 3.29, 10.7, 3.32, 3.3, 3.28, 10.65, 3.3, 3.31,
        ];
        let t = bimodal_threshold(&v).expect("two modes");
        assert!(t > 3.32 && t < 10.6, "{t}");
        assert_eq!(v.iter().filter(|x| **x >= t).count(), 3);
        // Intermediate values do not hide the slow mode (a widest-gap rule would).
        let w = [4.1, 4.2, 4.3, 4.5, 5.4, 6.0, 7.9, 11.7, 11.8];
        let t = bimodal_threshold(&w).expect("two modes");
        assert_eq!(w.iter().filter(|x| **x >= t).count(), 2);
        assert_eq!(bimodal_threshold(&[3.3, 3.4, 3.5, 4.0, 6.0]), None);
        assert_eq!(bimodal_threshold(&[3.3]), None);
    }

    #[test]
    fn parse_checks_labels_count_and_preload() {
        let ok = "#info allocator=jemalloc mode=malloc malloc_from=/usr/lib/libjemalloc.so.2\n\
                  pair64 jemalloc 4.5\nlive256_64 jemalloc 5.0\n#done cases=2\n";
        let r = parse_run(ok, "jemalloc", Some("libjemalloc.so.2")).unwrap();
        assert_eq!(r.ns["pair64"], 4.5);
        assert_eq!(r.ns.len(), 2);
        assert!(parse_run(ok, "jemalloc", Some("libmimalloc")).is_err());
        assert!(parse_run(ok, "glibc", None).is_err());
        let short = "pair64 jemalloc 4.5\n#done cases=2\n";
        assert!(parse_run(short, "jemalloc", None).is_err());
        assert!(parse_run("pair64 jemalloc 4.5\n", "jemalloc", None).is_err());
        assert!(parse_run("pair64 jemalloc nan\n#done cases=1\n", "jemalloc", None).is_err());
    }
}
