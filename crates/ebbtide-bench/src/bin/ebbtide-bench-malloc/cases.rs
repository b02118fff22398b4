//! The cases: the C program's (`benches/c/malloc/mallocbench.c`, one process per run) and the
//! real programs' (python3, sqlite3, redis-server driven by redis-benchmark), and how one run of
//! one case under one allocator goes.

use crate::allocators::Allocator;
use crate::child::{self, Exit};
use crate::contention::{self, Counters};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A case of the C program.
    C,
    /// `python3 -S workload.py`; `pymalloc`: CPython's small-object allocator in front
    /// (`PYTHONMALLOC=pymalloc`), else every object a malloc (`PYTHONMALLOC=malloc`).
    Python { pymalloc: bool },
    /// `sqlite3 :memory:` reading `bulk.sql`.
    Sqlite,
    /// `redis-server` (preloaded) driven by `redis-benchmark` (not preloaded).
    Redis,
}

pub struct Case {
    pub name: &'static str,
    pub kind: Kind,
    pub what: &'static str,
    /// For a case of the C program whose thread count `--threads` sets: the fewest threads it
    /// runs with (prodcons: 2, a producer and a consumer). None: one thread, or a program.
    pub min_threads: Option<usize>,
}

impl Case {
    pub fn unit(&self) -> &'static str {
        match self.kind {
            Kind::C => "ns/op",
            _ => "ms",
        }
    }
}

const fn c(name: &'static str, what: &'static str) -> Case {
    Case {
        name,
        kind: Kind::C,
        what,
        min_threads: None,
    }
}

/// A case of the C program whose thread count is a parameter.
const fn threaded(name: &'static str, min: usize, what: &'static str) -> Case {
    Case {
        name,
        kind: Kind::C,
        what,
        min_threads: Some(min),
    }
}

/// One row of the tables: a case, at a thread count for a threaded case of a sweep.
#[derive(Clone, Copy)]
pub struct Row {
    pub case: &'static Case,
    /// `--threads` for the C program; None: the case's default.
    pub threads: Option<usize>,
}

impl Row {
    pub fn plain(case: &'static Case) -> Row {
        Row {
            case,
            threads: None,
        }
    }

    /// The name in the tables: `larson (16)` in a sweep, else the case's name.
    pub fn label(&self) -> String {
        match self.threads {
            Some(t) => format!("{} ({t})", self.case.name),
            None => self.case.name.to_string(),
        }
    }

    /// The name in the `--log` file (one word): `larson@16`, else the case's name.
    pub fn key(&self) -> String {
        match self.threads {
            Some(t) => format!("{}@{t}", self.case.name),
            None => self.case.name.to_string(),
        }
    }
}

/// The cases of `--sweep` (issue 43): a larson-like server, producer/consumer pairs, thread
/// generations handing objects over, each at every thread count, and one mixed-size
/// single-thread case.
pub const SWEEP: &[&str] = &["larson", "prodcons", "thread_handover", "live_mixed"];

/// The rows of `cases` at the thread counts `threads`: a threaded case once per count (counts
/// below its minimum left out), any other case once (a single-thread case of the C program
/// labelled as 1 thread).
pub fn rows(cases: &[&'static Case], threads: &[usize]) -> Vec<Row> {
    let mut v = Vec::new();
    for &case in cases {
        match case.min_threads {
            Some(min) => v.extend(threads.iter().filter(|&&t| t >= min).map(|&t| Row {
                case,
                threads: Some(t),
            })),
            None if case.kind == Kind::C => v.push(Row {
                case,
                threads: Some(1),
            }),
            None => v.push(Row::plain(case)),
        }
    }
    v
}

/// The thread counts of a sweep: 1, 2, 4, 8, 16 and `ncpu`, ascending, each once.
pub fn sweep_threads(ncpu: usize) -> Vec<usize> {
    let mut t = vec![1, 2, 4, 8, 16, ncpu.max(1)];
    t.sort_unstable();
    t.dedup();
    t
}

pub const CASES: &[Case] = &[
    c("pair_small", "malloc+free of one object, 16-256 B, one thread"),
    c("pair_mixed", "malloc+free of one object, 16 B-32 KiB, one thread"),
    c("live_small", "1 000 live objects of 16-256 B, random one replaced"),
    c("live_big", "200 000 live objects of 16-512 B, random one replaced"),
    c("live_mixed", "20 000 live objects of 16 B-16 KiB, random one replaced"),
    threaded(
        "prodcons",
        2,
        "producer thread mallocs 16 B-1 KiB, consumer thread frees (sweep: threads/2 pairs)",
    ),
    threaded(
        "larson",
        1,
        "server pattern: threads replace objects in regions that rotate between them",
    ),
    c("realloc_grow", "16 buffers grown by realloc from 8 B to 256 KiB (+1/8 per step)"),
    c("large", "32 live blocks of 64 KiB-4 MiB, random one replaced, every page written"),
    threaded(
        "thread_churn",
        1,
        "short-lived threads, 2 000 objects each, half freed by the main thread",
    ),
    c("fragmentation", "400 000 small objects, 7/8 freed, the volume re-allocated as 512 B-4 KiB"),
    threaded(
        "thread_handover",
        1,
        "generations of short-lived threads, each freeing the 1 000 objects its predecessor left",
    ),
    c(
        "tlb_random",
        "512 MiB of 64-256 B objects linked in a random order, followed for 3 passes (TLB-bound)",
    ),
    Case {
        name: "python_malloc",
        kind: Kind::Python { pymalloc: false },
        what: "python3 object/dict/string/json churn, PYTHONMALLOC=malloc (every object a malloc)",
        min_threads: None,
    },
    Case {
        name: "python_pymalloc",
        kind: Kind::Python { pymalloc: true },
        what: "the same with CPython's pymalloc in front (only > 512 B and arenas reach malloc)",
        min_threads: None,
    },
    Case {
        name: "sqlite_bulk",
        kind: Kind::Sqlite,
        what: "sqlite3 :memory:, 200 000 rows in one transaction, two indexes, update, delete",
        min_threads: None,
    },
    Case {
        name: "redis",
        kind: Kind::Redis,
        what: "redis-server under redis-benchmark: 6 commands x 200 000 requests, 50 clients, pipeline 16",
        min_threads: None,
    },
];

pub fn find(name: &str) -> Option<&'static Case> {
    CASES.iter().find(|c| c.name == name)
}

/// What every run needs.
pub struct Ctx {
    /// The compiled C program.
    pub exe: PathBuf,
    /// The compiled launcher (`launch.c`).
    pub launcher: PathBuf,
    /// Multiplies every case's amount of work.
    pub scale: f64,
    pub timeout: Duration,
    /// Scratch directory for outputs and generated inputs.
    pub dir: PathBuf,
    /// `benches/c/malloc/` of the repository.
    pub src: PathBuf,
    /// The counters' reader (`stats_at_exit.so`), preloaded in the C cases' ebbtide runs;
    /// None: no counters.
    pub counters: Option<PathBuf>,
}

/// One run's figures.
#[derive(Clone, Debug)]
pub struct Sample {
    /// ns per op (C cases) or wall ms (programs).
    pub value: f64,
    pub rss_kib: u64,
    pub extras: Vec<(String, f64)>,
    /// What the program printed, for the cross-allocator comparison (python, sqlite).
    pub output: Option<Printed>,
    /// ebbtide's lock-wait and remote-free counters at the run's end, when they were asked for
    /// (`Err`: why they could not be read).
    pub counters: Option<Result<Counters, String>>,
}

/// A program's standard output and the command that printed it.
#[derive(Clone, Debug)]
pub struct Printed {
    pub text: String,
    pub repro: String,
}

/// A run that did not produce a valid figure.
#[derive(Clone, Debug)]
pub struct Failure {
    pub reason: String,
    /// A shell command that runs the same thing.
    pub repro: String,
}

/// Programs a case needs that are missing (the case is skipped then).
pub fn missing_programs(case: &Case) -> Vec<&'static str> {
    let need: &[&'static str] = match case.kind {
        Kind::C => &[],
        Kind::Python { .. } => &["/usr/bin/python3"],
        Kind::Sqlite => &["sqlite3"],
        Kind::Redis => &["redis-server", "redis-benchmark", "redis-cli"],
    };
    need.iter()
        .copied()
        .filter(|p| child::which(p).is_none())
        .collect()
}

/// A cheap invocation of the case's preloaded program, for the `LD_DEBUG=bindings` check; its
/// key (cases running the same program share the check). None for the C program, whose
/// `#info` line says where each function comes from in every run.
pub fn version_command(case: &Case) -> Option<(&'static str, Command)> {
    let (key, prog, args): (&str, &str, &[&str]) = match case.kind {
        Kind::C => return None,
        Kind::Python { .. } => ("python3", "/usr/bin/python3", &["-S", "-c", "pass"]),
        Kind::Sqlite => ("sqlite3", "sqlite3", &["-version"]),
        Kind::Redis => ("redis-server", "redis-server", &["--version"]),
    };
    let mut cmd = Command::new(prog);
    cmd.args(args).env_remove("LD_PRELOAD");
    Some((key, cmd))
}

fn scaled(n: f64, scale: f64) -> u64 {
    ((n * scale).round() as u64).max(1)
}

/// One run of `row` under `a`.
pub fn run(ctx: &Ctx, row: &Row, a: &Allocator) -> Result<Sample, Failure> {
    let case = row.case;
    match case.kind {
        Kind::C => run_c(ctx, case, row.threads, a),
        Kind::Python { pymalloc } => run_python(ctx, a, pymalloc),
        Kind::Sqlite => run_sqlite(ctx, a),
        Kind::Redis => run_redis(ctx, a),
    }
}

fn fail(reason: impl Into<String>, repro: &str) -> Failure {
    Failure {
        reason: reason.into(),
        repro: repro.to_string(),
    }
}

/// The last lines of a child's stderr, for a failure message.
fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let t = lines[lines.len().saturating_sub(3)..].join(" | ");
    if t.is_empty() {
        "(no stderr)".into()
    } else {
        t
    }
}

fn run_c(ctx: &Ctx, case: &Case, threads: Option<usize>, a: &Allocator) -> Result<Sample, Failure> {
    let scale = ctx.scale.to_string();
    let mut args = vec!["--case", case.name, "--label", a.name, "--scale", &scale];
    // Only a threaded case takes the count (a single-thread one is labelled 1 in a sweep).
    let t = threads
        .filter(|_| case.min_threads.is_some())
        .map(|t| t.to_string());
    if let Some(t) = &t {
        args.extend(["--threads", t]);
    }
    let repro = format!(
        "{} {} {}",
        a.shell_prefix(),
        ctx.exe.display(),
        args.join(" ")
    );
    let report = ctx.dir.join("c.rss");
    let stats = ctx.dir.join("c.stats");
    let counted = ctx.counters.as_deref().filter(|_| !a.is_peer());
    let mut cmd = match counted {
        Some(shim) => {
            let _ = std::fs::remove_file(&stats);
            a.launch_counted(&ctx.launcher, &report, shim, &stats, &ctx.exe)
        }
        None => a.launch(&ctx.launcher, &report, &ctx.exe),
    };
    cmd.args(args);
    let o = child::run(&mut cmd, None, &ctx.dir, "c", ctx.timeout, Some(&report))
        .map_err(|e| fail(e, &repro))?;
    let counters = counted.map(|_| {
        let threads = t.as_deref().map_or(1, |t| t.parse().unwrap_or(1));
        contention::read(&stats, o.waited.wall.as_nanos() as u64, threads)
    });
    if !o.waited.exit.ok() {
        return Err(fail(
            format!("{}: {}", o.waited.exit, tail(&o.stderr)),
            &repro,
        ));
    }
    let (value, extras) = parse_c_output(&o.stdout, case.name, a.name, &a.defining_file())
        .map_err(|e| fail(e, &repro))?;
    Ok(Sample {
        value,
        rss_kib: o.waited.maxrss_kib,
        extras,
        output: None,
        counters,
    })
}

/// The C program's output: `#info` (every allocation function from `want`), one result line
/// for `case` and `label`, `#done`. Returns ns per op and the extra `key=value` figures.
pub fn parse_c_output(
    text: &str,
    case: &str,
    label: &str,
    want: &str,
) -> Result<(f64, Vec<(String, f64)>), String> {
    let mut info = false;
    let mut done = false;
    let mut result = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("#info ") {
            for key in ["malloc_from", "free_from", "realloc_from", "calloc_from"] {
                let from = rest
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                    .ok_or_else(|| format!("#info without {key}: {line:?}"))?;
                if !from.ends_with(want) {
                    return Err(format!(
                        "{key}={from}, not {want}: the preload did not take (or the library \
                         does not export that function)"
                    ));
                }
            }
            info = true;
        } else if line == "#done" {
            done = true;
        } else if line.starts_with('#') {
            continue;
        } else {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 5 || f[0] != case || f[1] != label || result.is_some() {
                return Err(format!("unexpected line {line:?}"));
            }
            let v: f64 = f[2]
                .parse()
                .map_err(|_| format!("bad figure in {line:?}"))?;
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("bad figure in {line:?}"));
            }
            let mut extras = Vec::new();
            for kv in &f[5..] {
                let (k, x) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("bad extra {kv:?} in {line:?}"))?;
                let x: f64 = x.parse().map_err(|_| format!("bad extra {kv:?}"))?;
                extras.push((k.to_string(), x));
            }
            result = Some((v, extras));
        }
    }
    match (info, result, done) {
        (false, _, _) => Err("no #info line".into()),
        (_, None, _) => Err(format!("no result line for {case}")),
        (_, _, false) => Err("no #done line".into()),
        (true, Some(r), true) => Ok(r),
    }
}

fn program_sample(o: &child::Outcome, repro: &str) -> Result<Sample, Failure> {
    if !o.waited.exit.ok() {
        return Err(fail(
            format!("{}: {}", o.waited.exit, tail(&o.stderr)),
            repro,
        ));
    }
    Ok(Sample {
        value: o.waited.wall.as_secs_f64() * 1e3,
        rss_kib: o.waited.maxrss_kib,
        extras: Vec::new(),
        output: Some(Printed {
            text: o.stdout.clone(),
            repro: repro.to_string(),
        }),
        counters: None,
    })
}

fn run_python(ctx: &Ctx, a: &Allocator, pymalloc: bool) -> Result<Sample, Failure> {
    let script = ctx.src.join("workload.py");
    let scale = ctx.scale.to_string();
    let mode = if pymalloc { "pymalloc" } else { "malloc" };
    let repro = format!(
        "PYTHONMALLOC={mode} {} /usr/bin/python3 -S {} {scale}",
        a.shell_prefix(),
        script.display()
    );
    let report = ctx.dir.join("python.rss");
    let mut cmd = a.launch(&ctx.launcher, &report, "/usr/bin/python3");
    cmd.arg("-S")
        .arg(&script)
        .arg(&scale)
        .env("PYTHONMALLOC", mode);
    let o = child::run(
        &mut cmd,
        None,
        &ctx.dir,
        "python",
        ctx.timeout,
        Some(&report),
    )
    .map_err(|e| fail(e, &repro))?;
    program_sample(&o, &repro)
}

fn run_sqlite(ctx: &Ctx, a: &Allocator) -> Result<Sample, Failure> {
    let rows = scaled(200_000.0, ctx.scale);
    let input = ctx.dir.join(format!("bulk-{rows}.sql"));
    if !input.exists() {
        let body = std::fs::read_to_string(ctx.src.join("bulk.sql"))
            .map_err(|e| fail(format!("cannot read bulk.sql: {e}"), ""))?;
        std::fs::write(
            &input,
            format!("CREATE TEMP TABLE n(rows); INSERT INTO n VALUES ({rows});\n{body}"),
        )
        .map_err(|e| fail(format!("cannot write {}: {e}", input.display()), ""))?;
    }
    let repro = format!(
        "{} sqlite3 :memory: < {}",
        a.shell_prefix(),
        input.display()
    );
    let report = ctx.dir.join("sqlite.rss");
    let mut cmd = a.launch(&ctx.launcher, &report, "sqlite3");
    cmd.arg(":memory:");
    let o = child::run(
        &mut cmd,
        Some(&input),
        &ctx.dir,
        "sqlite",
        ctx.timeout,
        Some(&report),
    )
    .map_err(|e| fail(e, &repro))?;
    let s = program_sample(&o, &repro)?;
    if !o.stderr.trim().is_empty() {
        return Err(fail(
            format!("sqlite3 reported: {}", tail(&o.stderr)),
            &repro,
        ));
    }
    Ok(s)
}

/// The redis-server of one run: killed and reaped if the run ends before it exits by itself.
struct Server {
    pid: u32,
    start: Instant,
    reaped: bool,
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: `pid` is our child, not reaped yet (reaped is set after `wait`), and the
            // leader of its own process group (child::spawn): -pid is that group only.
            unsafe {
                libc::kill(-(self.pid as libc::pid_t), libc::SIGKILL);
                libc::kill(self.pid as libc::pid_t, libc::SIGKILL);
            }
            child::wait(self.pid, self.start, Duration::from_secs(10));
        }
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free TCP port: {e}"))
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

fn redis_cli(port: u16, args: &[&str]) -> Result<String, String> {
    let out = Command::new("redis-cli")
        .env_remove("LD_PRELOAD")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .map_err(|e| format!("cannot run redis-cli: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Counts the string keys redis-benchmark wrote whose value is not its 100 bytes (Lua, so the
/// server's own allocations are exercised once more).
const CHECK_SCRIPT: &str = "local bad = 0 \
    for _, k in ipairs(redis.call('keys', 'key:*')) do \
      if redis.call('strlen', k) ~= 100 then bad = bad + 1 end \
    end \
    return bad";

fn run_redis(ctx: &Ctx, a: &Allocator) -> Result<Sample, Failure> {
    let requests = scaled(200_000.0, ctx.scale).to_string();
    let port = free_port().map_err(|e| fail(e, ""))?;
    let p = port.to_string();
    let server_args = [
        "--port",
        &p,
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
        "--daemonize",
        "no",
    ];
    let bench_args = [
        "-h",
        "127.0.0.1",
        "-p",
        &p,
        "-q",
        "--csv",
        "-n",
        &requests,
        "-r",
        "100000",
        "-d",
        "100",
        "-c",
        "50",
        "-P",
        "16",
        "-t",
        "set,get,lpush,lpop,sadd,hset",
    ];
    let repro = format!(
        "{} redis-server {} & sleep 1; redis-benchmark {}; redis-cli -p {p} eval \"{CHECK_SCRIPT}\" 0; redis-cli -p {p} shutdown nosave",
        a.shell_prefix(),
        server_args.map(|s| if s.is_empty() { "''" } else { s }).join(" "),
        bench_args.join(" ")
    );
    let report = ctx.dir.join("redis-server.rss");
    let _ = std::fs::remove_file(&report);
    let mut cmd = a.launch(&ctx.launcher, &report, "redis-server");
    cmd.args(server_args);
    let start = Instant::now();
    let pid =
        child::spawn(&mut cmd, None, &ctx.dir, "redis-server").map_err(|e| fail(e, &repro))?;
    let mut server = Server {
        pid,
        start,
        reaped: false,
    };
    let server_err = |ctx: &Ctx| {
        tail(&std::fs::read_to_string(ctx.dir.join("redis-server.out")).unwrap_or_default())
    };
    loop {
        if ping(port) {
            break;
        }
        if child::exited(pid) {
            let mut w = child::wait(pid, start, Duration::from_secs(1));
            server.reaped = true;
            child::apply_report(&mut w, &report);
            return Err(fail(
                format!(
                    "redis-server ended before serving: {}: {}",
                    w.exit,
                    server_err(ctx)
                ),
                &repro,
            ));
        }
        if start.elapsed() > Duration::from_secs(20) {
            return Err(fail(
                "redis-server does not answer PING within 20 s",
                &repro,
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut bench = Command::new("redis-benchmark");
    bench.args(bench_args).env_remove("LD_PRELOAD");
    let o = child::run(
        &mut bench,
        None,
        &ctx.dir,
        "redis-benchmark",
        ctx.timeout,
        None,
    )
    .map_err(|e| fail(e, &repro))?;
    if !o.waited.exit.ok() || child::exited(pid) {
        return Err(fail(
            format!(
                "redis-benchmark: {} (server {}): {} {}",
                o.waited.exit,
                if child::exited(pid) { "died" } else { "alive" },
                tail(&o.stderr),
                server_err(ctx)
            ),
            &repro,
        ));
    }
    let tests = o
        .stdout
        .lines()
        .filter(|l| l.starts_with("\"") && !l.starts_with("\"test\""))
        .count();
    if tests != 6 {
        return Err(fail(
            format!(
                "redis-benchmark ran {tests} of 6 tests: {}",
                tail(&o.stdout)
            ),
            &repro,
        ));
    }
    let dbsize = redis_cli(port, &["dbsize"]).map_err(|e| fail(e, &repro))?;
    let bad = redis_cli(port, &["eval", CHECK_SCRIPT, "0"]).map_err(|e| fail(e, &repro))?;
    let keys: u64 = dbsize.parse().unwrap_or(0);
    if keys == 0 || bad != "0" {
        return Err(fail(
            format!("data check failed: dbsize {dbsize:?}, keys with a wrong value {bad:?}"),
            &repro,
        ));
    }
    let _ = redis_cli(port, &["shutdown", "nosave"]);
    let mut w = child::wait(pid, start, Duration::from_secs(20));
    server.reaped = true;
    child::apply_report(&mut w, &report);
    if !(w.exit.ok() || w.exit == Exit::Signal(libc::SIGTERM)) {
        return Err(fail(
            format!("redis-server at shutdown: {}: {}", w.exit, server_err(ctx)),
            &repro,
        ));
    }
    Ok(Sample {
        value: o.waited.wall.as_secs_f64() * 1e3,
        rss_kib: w.maxrss_kib,
        extras: vec![("keys".into(), keys as f64)],
        output: None,
        counters: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "#info label=x malloc_from=/l/libx.so free_from=/l/libx.so \
                        realloc_from=/l/libx.so calloc_from=/l/libx.so ncpu=2\n";

    #[test]
    fn c_output_is_checked() {
        let ok = format!("{INFO}larson x 12.5 100 1.2\n#done\n");
        assert_eq!(
            parse_c_output(&ok, "larson", "x", "libx.so").unwrap().0,
            12.5
        );
        let ex = format!("{INFO}fragmentation x 9.0 100 1.2 rss_mib=3.5 live_mib=1.0\n#done\n");
        let (_, e) = parse_c_output(&ex, "fragmentation", "x", "libx.so").unwrap();
        assert_eq!(e, vec![("rss_mib".into(), 3.5), ("live_mib".into(), 1.0)]);
        // The wrong allocator, a missing line, a bad figure, no #done: refused.
        assert!(parse_c_output(&ok, "larson", "x", "liby.so")
            .unwrap_err()
            .contains("malloc_from"));
        let half = ok.replace("calloc_from=/l/libx.so", "calloc_from=/l/libc.so.6");
        assert!(parse_c_output(&half, "larson", "x", "libx.so")
            .unwrap_err()
            .contains("calloc_from"));
        assert!(parse_c_output(&ok, "large", "x", "libx.so").is_err());
        assert!(parse_c_output(&ok, "larson", "y", "libx.so").is_err());
        assert!(parse_c_output(
            &format!("{INFO}larson x nan 1 1\n#done\n"),
            "larson",
            "x",
            "libx.so"
        )
        .is_err());
        assert!(parse_c_output(
            &format!("{INFO}larson x 1.0 1 1\n"),
            "larson",
            "x",
            "libx.so"
        )
        .is_err());
        assert!(parse_c_output("larson x 1.0 1 1\n#done\n", "larson", "x", "libx.so").is_err());
    }

    #[test]
    fn sweep_rows() {
        assert_eq!(sweep_threads(2), vec![1, 2, 4, 8, 16]);
        assert_eq!(sweep_threads(16), vec![1, 2, 4, 8, 16]);
        assert_eq!(sweep_threads(12), vec![1, 2, 4, 8, 12, 16]);
        assert_eq!(sweep_threads(64), vec![1, 2, 4, 8, 16, 64]);
        let cases: Vec<&'static Case> = SWEEP.iter().map(|n| find(n).unwrap()).collect();
        let labels: Vec<String> = rows(&cases, &[1, 2, 4]).iter().map(Row::label).collect();
        assert_eq!(
            labels,
            [
                "larson (1)",
                "larson (2)",
                "larson (4)",
                "prodcons (2)",
                "prodcons (4)",
                "thread_handover (1)",
                "thread_handover (2)",
                "thread_handover (4)",
                "live_mixed (1)"
            ]
        );
        let r = rows(&[find("larson").unwrap(), find("redis").unwrap()], &[8]);
        assert_eq!(r[0].key(), "larson@8");
        assert_eq!(r[1].key(), "redis");
        assert_eq!(r[1].threads, None);
    }

    #[test]
    fn case_table() {
        let mut names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CASES.len(), "case names are unique");
        assert_eq!(find("larson").unwrap().unit(), "ns/op");
        assert_eq!(find("redis").unwrap().unit(), "ms");
        assert!(find("nope").is_none());
    }
}
