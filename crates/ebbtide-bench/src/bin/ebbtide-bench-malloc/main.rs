//! ebbtide-bench-malloc: `libebbtide_malloc.so` against glibc, jemalloc, mimalloc and tcmalloc
//! as the process's malloc, every one through `LD_PRELOAD`, in one run (issue 12,
//! "Benchmarks").
//!
//! Cases: the project's own C program (`benches/c/malloc/mallocbench.c`, compiled here with the
//! system `cc -O2`) and real programs (python3, sqlite3, redis-server + redis-benchmark); see
//! `cases.rs`. Every (allocator, case, round) is one fresh process; rounds are interleaved
//! (each round runs every case under every allocator, the starting allocator rotating). The
//! process's peak RSS is its `ru_maxrss` (wait4). A run that crashes, hangs, corrupts an
//! object, or prints something else than the other allocators' runs marks that allocator's
//! case as failed (reported with a command that reproduces it) and the run goes on.
//!
//! Prints markdown: the environment, times (median [min–max]) with ebbtide's ratio to the
//! fastest peer, peak RSS with the ratio to the median peer, and the verdict against the
//! issue's targets.
//!
//! `--sweep` (issue 43) runs the threaded cases at 1, 2, 4, 8, 16 and the machine's CPU count
//! threads and prints one row per (case, threads) in issue 43's shape, and under it, per ebbtide
//! row, the malloc's lock waits, time blocked and remote frees at the runs' end (`contention.rs`).
//! `--prebuilt`,
//! `--peer-libs` and `--work` let it run from a packed folder (`scripts/pack-bench.sh`) on a
//! machine without a compiler, Rust or this source tree.

mod allocators;
mod cases;
mod child;
mod contention;
mod outputs;
mod report;
mod stats;

use allocators::Allocator;
use cases::{Case, Ctx, Kind, Row, CASES};
use report::{Cell, Report};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: ebbtide-bench-malloc [--quick] [--sweep] [--threads LIST] [--no-counters] [--rounds N]
                            [--scale F] [--cases LIST] [--only LIST] [--lib PATH]
                            [--baseline PATH] [--timeout S] [--log FILE] [--prebuilt DIR]
                            [--peer-libs DIR] [--work DIR]
       ebbtide-bench-malloc --build-programs DIR
  --quick        3 rounds at scale 0.25 (a few minutes); default: 11 rounds at scale 1
  --sweep        the many-core sweep (issue 43): larson, prodcons (threads/2 pairs),
                 thread_handover at 1, 2, 4, 8, 16 and this machine's CPU count threads,
                 live_mixed at 1; a table per (case, threads): ebbtide, the best peer, the
                 ratio, peak RSS and its ratio to the lowest peer. Default 5 rounds at scale
                 1 (--quick: 2 rounds at scale 0.1); --cases narrows it
  --threads LIST comma-separated thread counts (each 1-256) for the threaded cases
                 (larson, prodcons, thread_churn, thread_handover): one row per count;
                 with --sweep it replaces the sweep's counts
  --no-counters  with thread counts (--sweep, --threads), the ebbtide runs do not serve the
                 control socket nor read ebbtide's lock waits and remote frees at their end
                 (default: they do, and a line per ebbtide row says where time went)
  --rounds N     rounds (every round runs every case under every allocator once)
  --scale F      multiplies every case's work (iterations, rows, requests), 0 < F <= 100
  --cases LIST   comma-separated case names, or `c` (the C program's cases), `programs`
                 (python3, sqlite3, redis); default: all
  --only LIST    allocators, default ebbtide,glibc,jemalloc,mimalloc,tcmalloc; also
                 ebbtide-norseq: ebbtide with GLIBC_TUNABLES=glibc.pthread.rseq=0 (shown, not
                 compared)
  --lib PATH     libebbtide_malloc.so to preload for `ebbtide` (default: $EBBTIDE_MALLOC_LIB,
                 else beside this executable, else built with cargo build -p ebbtide-malloc);
                 copied into the work directory before the run
  --baseline PATH  another libebbtide_malloc.so (say, a build of the commit before a change),
                 run in the same rounds as a column `ebbtide-baseline` (shown, not compared
                 with the peers): an A/B of two builds within one run
  --timeout S    seconds one run may take before it is killed and counted a hang (default 120)
  --log FILE     write every run as `round case allocator value rss_kib status` to FILE
                 (a sweep's case as case@threads; an ebbtide run with counters adds
                 waits_CLASS=N wait_ns_CLASS=N per lock class, remote_frees=N, wall_ns=N,
                 threads=N)
  --prebuilt DIR take the compiled mallocbench, launch and stats_at_exit.so from DIR instead of compiling
                 them (a machine without a C compiler)
  --peer-libs DIR  look for the peers' libraries (libjemalloc.so.2, libmimalloc.so.2,
                 libtcmalloc_minimal.so.4) in DIR before the system's library directories
  --work DIR     the run's scratch directory goes under DIR (default: target/mallocbench
                 of the source tree)
  --build-programs DIR  compile mallocbench, launch and stats_at_exit.so into DIR and exit (what
                 scripts/pack-bench.sh packs)";

struct Args {
    rounds: usize,
    scale: f64,
    cases: Vec<&'static Case>,
    only: Vec<String>,
    lib: Option<PathBuf>,
    baseline: Option<PathBuf>,
    timeout: Duration,
    log: Option<PathBuf>,
    /// The thread counts of the threaded cases: one row per count (None: each case's default).
    threads: Option<Vec<usize>>,
    prebuilt: Option<PathBuf>,
    peer_libs: Option<PathBuf>,
    work: Option<PathBuf>,
    /// Read ebbtide's contention counters in the runs with a thread count (`--no-counters`).
    counters: bool,
}

fn bad(m: &str) -> ! {
    eprintln!("ebbtide-bench-malloc: {m}\n{USAGE}");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        rounds: 11,
        scale: 1.0,
        cases: CASES.iter().collect(),
        only: allocators::DEFAULT.iter().map(|s| s.to_string()).collect(),
        lib: None,
        baseline: None,
        timeout: Duration::from_secs(120),
        log: None,
        threads: None,
        prebuilt: None,
        peer_libs: None,
        work: None,
        counters: true,
    };
    let (mut rounds, mut scale) = (None, None);
    let mut quick = false;
    let mut sweep = false;
    let mut cases_given = false;
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        match k.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            "--quick" => {
                quick = true;
                continue;
            }
            "--sweep" => {
                sweep = true;
                continue;
            }
            "--no-counters" => {
                a.counters = false;
                continue;
            }
            _ => {}
        }
        let v = it
            .next()
            .unwrap_or_else(|| bad(&format!("{k} needs a value")));
        let list = |v: &str| v.split(',').map(str::to_string).collect::<Vec<_>>();
        match k.as_str() {
            "--rounds" => {
                rounds = Some(match v.parse::<usize>() {
                    Ok(n) if n >= 1 => n,
                    _ => bad(&format!("--rounds {v}: a whole number of at least 1")),
                })
            }
            "--scale" => {
                scale = Some(match v.parse::<f64>() {
                    Ok(x) if x > 0.0 && x <= 100.0 => x,
                    _ => bad(&format!("--scale {v}: a number above 0, at most 100")),
                })
            }
            "--cases" => {
                let mut cs: Vec<&'static Case> = Vec::new();
                for n in list(&v) {
                    let add: Vec<&'static Case> = match n.as_str() {
                        "all" => CASES.iter().collect(),
                        "c" => CASES.iter().filter(|c| c.kind == Kind::C).collect(),
                        "programs" => CASES.iter().filter(|c| c.kind != Kind::C).collect(),
                        _ => vec![cases::find(&n).unwrap_or_else(|| {
                            bad(&format!(
                                "unknown case {n:?} (cases: {}, or c, programs, all)",
                                CASES.iter().map(|c| c.name).collect::<Vec<_>>().join(" ")
                            ))
                        })],
                    };
                    for c in add {
                        if !cs.iter().any(|x| x.name == c.name) {
                            cs.push(c);
                        }
                    }
                }
                a.cases = cs;
                cases_given = true;
            }
            "--threads" => {
                let mut ts = Vec::new();
                for t in list(&v) {
                    match t.trim().parse::<usize>() {
                        Ok(n) if (1..=256).contains(&n) => {
                            if !ts.contains(&n) {
                                ts.push(n)
                            }
                        }
                        _ => bad(&format!(
                            "--threads {v}: {t:?} is not a thread count (a whole number 1-256)"
                        )),
                    }
                }
                a.threads = Some(ts);
            }
            "--prebuilt" => a.prebuilt = Some(PathBuf::from(v)),
            "--peer-libs" => a.peer_libs = Some(PathBuf::from(v)),
            "--work" => a.work = Some(PathBuf::from(v)),
            "--build-programs" => {
                let dir = PathBuf::from(v);
                if let Err(e) = std::fs::create_dir_all(&dir) {
                    bad(&format!("--build-programs {}: {e}", dir.display()));
                }
                for n in ["mallocbench", "launch", contention::SHIM] {
                    match compile(&dir, n) {
                        Ok(p) => println!("{}", p.display()),
                        Err(e) => {
                            eprintln!("ebbtide-bench-malloc: {e}");
                            std::process::exit(1)
                        }
                    }
                }
                std::process::exit(0)
            }
            "--only" => {
                a.only = list(&v);
                for n in &a.only {
                    if !allocators::NAMES.contains(&n.as_str()) {
                        bad(&format!(
                            "unknown allocator {n:?} (allocators: {})",
                            allocators::NAMES.join(", ")
                        ));
                    }
                }
            }
            "--lib" => a.lib = Some(PathBuf::from(v)),
            "--baseline" => a.baseline = Some(PathBuf::from(v)),
            "--timeout" => {
                a.timeout = match v.parse::<u64>() {
                    Ok(s) if s >= 1 => Duration::from_secs(s),
                    _ => bad(&format!("--timeout {v}: whole seconds, at least 1")),
                }
            }
            "--log" => a.log = Some(PathBuf::from(v)),
            _ => bad(&format!("unknown option {k}")),
        }
    }
    if sweep {
        if !cases_given {
            a.cases = cases::SWEEP.iter().filter_map(|n| cases::find(n)).collect();
        }
        if a.threads.is_none() {
            a.threads = Some(cases::sweep_threads(ncpu()));
        }
        a.rounds = rounds.unwrap_or(if quick { 2 } else { 5 });
        a.scale = scale.unwrap_or(if quick { 0.1 } else { 1.0 });
    } else {
        a.rounds = rounds.unwrap_or(if quick { 3 } else { 11 });
        a.scale = scale.unwrap_or(if quick { 0.25 } else { 1.0 });
    }
    a
}

fn ncpu() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The rows of the run: one per case, or with `--threads`/`--sweep` one per (threaded case,
/// thread count).
fn rows_of(a: &Args) -> Vec<Row> {
    match &a.threads {
        Some(t) => cases::rows(&a.cases, t),
        None => a.cases.iter().map(|&c| Row::plain(c)).collect(),
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// Compiles `benches/c/malloc/NAME.c` into `dir/NAME` with `$CC` (default cc); the counters'
/// reader, `crates/ebbtide-bench/c/stats_at_exit.c`, into the shared object `dir/`[`contention::SHIM`].
fn compile(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let exe = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let shared = name == contention::SHIM;
    let src = match shared {
        true => Path::new(env!("CARGO_MANIFEST_DIR")).join("c/stats_at_exit.c"),
        false => root().join(format!("benches/c/malloc/{name}.c")),
    };
    let out = Command::new(&cc)
        .args(if shared {
            &["-shared", "-fPIC"][..]
        } else {
            &[]
        })
        .args([
            "-O2",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-pthread",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .output()
        .map_err(|e| format!("cannot run the C compiler {cc:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "compiling {} failed ({}):\n{}",
            src.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(exe)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .env_remove("LD_PRELOAD")
        .output()
        .ok()
        .and_then(|o| {
            let t = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&t)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "?".into())
}

/// HEAD of the git tree the library was built in, if it is in one.
fn source_commit(lib: &Path) -> Option<String> {
    let mut d = lib.canonicalize().ok()?;
    while d.pop() {
        if d.join(".git").exists() {
            let o = Command::new("git")
                .arg("-C")
                .arg(&d)
                .args(["log", "-1", "--format=%h %cI"])
                .output()
                .ok()?;
            return Some(format!(
                "{} at {}",
                String::from_utf8_lossy(&o.stdout).trim(),
                d.display()
            ));
        }
    }
    None
}

fn print_environment(
    a: &Args,
    rows: &[Row],
    allocs: &[Allocator],
    lib_about: Option<&(String, PathBuf)>,
    counted: bool,
) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default();
    println!("# ebbtide-bench-malloc");
    println!();
    println!("- date: {}", utc_now());
    println!("- cpu: {cpu} ({} online)", ncpu());
    println!(
        "- kernel: {}",
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    println!("- glibc: {}", glibc_version());
    match &a.prebuilt {
        Some(d) => println!("- C programs: prebuilt, from {}", d.display()),
        None => println!(
            "- cc: {}",
            first_line(
                &std::env::var("CC").unwrap_or_else(|_| "cc".into()),
                &["--version"]
            )
        ),
    }
    let has = |k: fn(&Kind) -> bool| rows.iter().any(|r| k(&r.case.kind));
    if has(|k| matches!(k, Kind::Python { .. })) {
        println!(
            "- python3: {}",
            first_line("/usr/bin/python3", &["--version"])
        );
    }
    if has(|k| *k == Kind::Sqlite) {
        println!("- sqlite3: {}", first_line("sqlite3", &["-version"]));
    }
    if has(|k| *k == Kind::Redis) {
        println!(
            "- redis-server: {}",
            first_line("redis-server", &["--version"])
        );
    }
    if let Ok(t) = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") {
        println!("- THP: {}", t.trim());
    }
    for al in allocs {
        println!("- {}: {}", al.name, al.shell_prefix());
    }
    if let Some((about, src)) = lib_about {
        println!("- libebbtide_malloc.so: {about}");
        if let Some(c) = source_commit(src) {
            println!(
                "- HEAD of the git tree that holds that file, at the start of the run (the \
                 library's source only if it was built there): {c}"
            );
        }
    }
    for v in [
        "MALLOC_CONF",
        "GLIBC_TUNABLES",
        "EBBTIDE_CONF",
        "MIMALLOC_SHOW_STATS",
    ] {
        if let Ok(x) = std::env::var(v) {
            println!("- environment: {v}={x} (inherited by every run)");
        }
    }
    println!(
        "- rounds: {}, scale {}, timeout {} s per run",
        a.rounds,
        a.scale,
        a.timeout.as_secs()
    );
    println!(
        "- cases: {}",
        a.cases.iter().map(|c| c.name).collect::<Vec<_>>().join(" ")
    );
    if let Some(t) = &a.threads {
        println!(
            "- threads: {}",
            t.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    if counted {
        println!(
            "- counters: the C cases' ebbtide runs serve the control socket (EBBTIDE_CONF \
             gains control_socket=1) and preload {} after the library, which reads the \
             malloc's lock waits and remote frees as the program exits (--no-counters: off)",
            contention::SHIM
        );
    }
    println!("- load average before: {}", loadavg());
}

/// The time now as `YYYY-MM-DD HH:MM:SS UTC`, from the clock alone (a packed machine may have
/// no `date` on its PATH).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let t = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// glibc's version as the running process sees it (no `ldd` needed on a packed machine).
fn glibc_version() -> String {
    // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
    unsafe {
        let p = libc::gnu_get_libc_version();
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// Ends a run that cannot start: the message, the run directory removed, exit status 1.
fn give_up(dir: &Path, msg: &str) -> ! {
    eprintln!("ebbtide-bench-malloc: {msg}");
    let _ = std::fs::remove_dir_all(dir);
    std::process::exit(1)
}

fn main() {
    let a = parse_args();
    // Everything of this run (the program, the library's copy, outputs, inputs) in a directory
    // of its own: runs in parallel (tests) do not mix; kept when something failed, since the
    // reproducers name files in it.
    let dir = a
        .work
        .clone()
        .unwrap_or_else(|| target_dir().join("mallocbench"))
        .join(format!("run-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| bad(&format!("cannot create {}: {e}", dir.display())));
    let rows = rows_of(&a);
    let counted = a.counters && rows.iter().any(|r| r.threads.is_some());
    let programs: &[&str] = match counted {
        true => &["mallocbench", "launch", contention::SHIM],
        false => &["mallocbench", "launch"],
    };
    let mut built = programs.iter().map(|&n| match &a.prebuilt {
        Some(d) => {
            let p = d.join(n);
            if !p.is_file() {
                let hint = match n == contention::SHIM {
                    true => " (pack again, or give --no-counters)",
                    false => "",
                };
                give_up(
                    &dir,
                    &format!("--prebuilt {}: no {n} there{hint}", d.display()),
                )
            }
            p
        }
        None => compile(&dir, n).unwrap_or_else(|e| give_up(&dir, &e)),
    });
    let (exe, launcher) = (built.next().unwrap(), built.next().unwrap());
    let shim = built.next();
    if let Some(s) = &shim {
        if let Err(e) = allocators::preloadable(s) {
            give_up(&dir, &format!("{}: {e}", contention::SHIM));
        }
    }
    let mut allocs = Vec::new();
    let mut lib_about = None;
    let wants = |n: &str| a.only.iter().any(|o| o == n);
    if wants("ebbtide") || wants("ebbtide-norseq") {
        match allocators::ebbtide(a.lib.as_deref(), &dir) {
            Ok((al, about)) => {
                let src = a
                    .lib
                    .clone()
                    .or_else(|| ebbtide_lab::malloc_lib::locate().ok())
                    .unwrap_or_else(|| al.preload.clone());
                if wants("ebbtide-norseq") {
                    allocs.push(al.variant("ebbtide-norseq", allocators::NORSEQ_ENV));
                }
                if wants("ebbtide") {
                    allocs.insert(0, al);
                }
                lib_about = Some((about, src));
            }
            Err(e) => give_up(
                &dir,
                &format!(
                    "libebbtide_malloc.so: {e}\n(give --lib PATH, or --only \
                     glibc,jemalloc,mimalloc,tcmalloc to run the peers alone)"
                ),
            ),
        }
    }
    if let Some(b) = &a.baseline {
        match allocators::ebbtide(Some(b), &dir) {
            Ok((al, about)) => {
                eprintln!("baseline: {about}");
                let at = usize::from(allocs.first().is_some_and(|x| x.name == "ebbtide"));
                allocs.insert(at, al.renamed("ebbtide-baseline"));
            }
            Err(e) => give_up(&dir, &format!("--baseline: {e}")),
        }
    }
    allocs.extend(allocators::peers(&a.only, a.peer_libs.as_deref()));
    if allocs.is_empty() {
        give_up(&dir, "no allocator to run");
    }
    for al in &allocs {
        if let Err(e) = allocators::preloadable(&al.preload) {
            give_up(&dir, &format!("{}: {e}", al.name));
        }
    }
    let mut case_list: Vec<Row> = Vec::new();
    for r in rows {
        let miss = cases::missing_programs(r.case);
        if miss.is_empty() {
            case_list.push(r);
        } else {
            eprintln!(
                "skipping {}: {} not installed (Debian: python3, sqlite3, redis-server, redis-tools)",
                r.case.name,
                miss.join(", ")
            );
        }
    }
    let ctx = Ctx {
        exe,
        launcher,
        scale: a.scale,
        timeout: a.timeout,
        dir: dir.clone(),
        src: root().join("benches/c/malloc"),
        counters: shim,
    };
    print_environment(&a, &case_list, &allocs, lib_about.as_ref(), counted);

    let mut results: Vec<Vec<Cell>> = case_list
        .iter()
        .map(|_| allocs.iter().map(|_| Cell::default()).collect())
        .collect();
    // The preload must take in every program: one LD_DEBUG=bindings check per program and
    // allocator; a failed check fails the allocator's cases of that program without running.
    let mut checked: Vec<(&str, &str, Result<(), String>)> = Vec::new();
    for (ci, c) in case_list.iter().enumerate() {
        for (i, al) in allocs.iter().enumerate() {
            let Some((key, cmd)) = cases::version_command(c.case) else {
                continue;
            };
            let r = match checked.iter().find(|x| x.0 == key && x.1 == al.name) {
                Some(x) => x.2.clone(),
                None => {
                    let r = allocators::check_bindings(cmd, al, &dir);
                    checked.push((key, al.name, r.clone()));
                    r
                }
            };
            if let Err(e) = r {
                results[ci][i].failure = Some(cases::Failure {
                    reason: format!("binding check: {e}"),
                    repro: format!(
                        "LD_BIND_NOW=1 LD_DEBUG=bindings {} {key} ... 2>&1 | grep \"symbol \\`malloc'\"",
                        al.shell_prefix()
                    ),
                });
            }
        }
    }

    let started = Instant::now();
    let mut log = String::new();
    for round in 0..a.rounds {
        for (ci, c) in case_list.iter().enumerate() {
            for k in 0..allocs.len() {
                let i = (k + round + ci) % allocs.len();
                if results[ci][i].failure.is_some() {
                    continue;
                }
                let r = cases::run(&ctx, c, &allocs[i]);
                match r {
                    Ok(s) => {
                        let counted = match &s.counters {
                            Some(Ok(k)) => k.log_fields(),
                            Some(Err(e)) => {
                                eprintln!(
                                    "no counters from {} under {}: {e}",
                                    c.label(),
                                    allocs[i].name
                                );
                                String::new()
                            }
                            None => String::new(),
                        };
                        log += &format!(
                            "{round} {} {} {} {} ok{counted}\n",
                            c.key(),
                            allocs[i].name,
                            s.value,
                            s.rss_kib
                        );
                        results[ci][i].samples.push(s);
                    }
                    Err(f) => {
                        eprintln!(
                            "FAILED {} under {}: {}",
                            c.label(),
                            allocs[i].name,
                            f.reason
                        );
                        log += &format!(
                            "{round} {} {} - - failed: {}\n",
                            c.key(),
                            allocs[i].name,
                            f.reason
                        );
                        results[ci][i].failure = Some(f);
                    }
                }
            }
        }
        eprintln!(
            "round {}/{} done, {:.0} s (load {})",
            round + 1,
            a.rounds,
            started.elapsed().as_secs_f64(),
            loadavg()
        );
    }
    outputs::check(&case_list, &mut results, &allocs);
    if let Some(f) = &a.log {
        std::fs::write(f, &log)
            .unwrap_or_else(|e| eprintln!("cannot write --log {}: {e}", f.display()));
    }
    println!("- load average after: {}", loadavg());
    // Another process may switch THP during a long run (tests of THP policies do): say so.
    if let Ok(t) = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled") {
        println!("- THP after: {}", t.trim());
    }
    println!("- run time: {:.0} s", started.elapsed().as_secs_f64());
    println!();
    println!("Cases:");
    println!();
    for c in a
        .cases
        .iter()
        .filter(|c| case_list.iter().any(|r| r.case.name == c.name))
    {
        println!("- `{}` ({}): {}", c.name, c.unit(), c.what);
    }
    println!();
    Report {
        cases: &case_list,
        allocs: &allocs,
        results: &results,
        rounds: a.rounds,
    }
    .print();
    let failed = results.iter().flatten().any(|c| c.failure.is_some());
    if failed {
        eprintln!("kept {} (the failures' reproducers use it)", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(super::civil_from_days(20_785), (2026, 11, 28));
    }
}
