//! Behaviour (not speed) of the malloc benchmark `ebbtide-bench-malloc`: it compiles
//! `benches/c/malloc/mallocbench.c`, runs every case under every installed peer through
//! `LD_PRELOAD` with a tiny scale, and prints the tables; an allocator that is not really
//! preloaded, or that corrupts memory, is reported as failed with a reproducer while the rest
//! of the run goes on; bad options are refused with a message. Nothing here asserts a timing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/` of this test binary (`.../target/<profile>/deps/malloc_bench-HASH`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

fn driver(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ebbtide-bench-malloc"))
        .args(args)
        .env("CARGO_TARGET_DIR", target_dir())
        .env_remove("EBBTIDE_MALLOC_LIB")
        .output()
        .expect("run ebbtide-bench-malloc")
}

/// stdout and stderr; removes the run directory the driver keeps after a failure ("kept DIR").
fn text(o: &Output) -> (String, String) {
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    for l in stderr.lines() {
        if let Some(d) = l.strip_prefix("kept ").and_then(|r| r.split(" (").next()) {
            if d.contains("/mallocbench/run-") {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
    (String::from_utf8_lossy(&o.stdout).into_owned(), stderr)
}

fn lib_path(file: &str) -> Option<PathBuf> {
    [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
    ]
    .iter()
    .map(|d| Path::new(d).join(file))
    .find(|p| p.exists())
}

fn installed(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

const C_CASES: &[&str] = &[
    "pair_small",
    "pair_mixed",
    "live_small",
    "live_big",
    "live_mixed",
    "prodcons",
    "larson",
    "realloc_grow",
    "large",
    "thread_churn",
    "fragmentation",
    "thread_handover",
    "tlb_random",
];

/// Every case under every installed peer, two rounds: one log line per run, all ok; a table
/// row per case with a cell per allocator; peak RSS of a real size; no verdict without ebbtide.
#[test]
fn every_case_runs_under_every_peer() {
    let _turn = crate::serial::turn(module_path!());
    let mut peers = vec!["glibc"];
    for (n, f) in [
        ("jemalloc", "libjemalloc.so.2"),
        ("mimalloc", "libmimalloc.so.2"),
        ("tcmalloc", "libtcmalloc_minimal.so.4"),
    ] {
        if lib_path(f).is_some() {
            peers.push(n);
        }
    }
    let mut cases: Vec<&str> = C_CASES.to_vec();
    if Path::new("/usr/bin/python3").exists() {
        cases.extend(["python_malloc", "python_pymalloc"]);
    }
    if installed("sqlite3") {
        cases.push("sqlite_bulk");
    }
    if installed("redis-server") && installed("redis-benchmark") && installed("redis-cli") {
        cases.push("redis");
    }
    let log = std::env::temp_dir().join(format!("malloc_bench-{}.log", std::process::id()));
    let o = driver(&[
        "--rounds",
        "2",
        "--scale",
        "0.01",
        "--only",
        &peers.join(","),
        "--cases",
        &cases.join(","),
        "--log",
        log.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{}\n{stdout}\n{stderr}", o.status);
    let runs = std::fs::read_to_string(&log).expect("--log written");
    let _ = std::fs::remove_file(&log);
    for round in 0..2 {
        for c in &cases {
            for p in &peers {
                let prefix = format!("{round} {c} {p} ");
                let line = runs
                    .lines()
                    .find(|l| l.starts_with(&prefix))
                    .unwrap_or_else(|| panic!("no run {prefix:?} in\n{runs}\n{stdout}"));
                let f: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(f.len(), 6, "{line}");
                assert_eq!(f[5], "ok", "{line}");
                let v: f64 = f[3].parse().unwrap();
                let rss: u64 = f[4].parse().unwrap();
                assert!(v > 0.0 && v.is_finite(), "{line}");
                // The program's own peak (launch.c): over 1 MiB (libc and a heap), and not the
                // driver's high-water mark inherited through the spawn: under 1 GiB.
                assert!(rss > 1024 && rss < 1 << 20, "{line}");
            }
        }
    }
    assert_eq!(
        runs.lines().count(),
        2 * cases.len() * peers.len(),
        "{runs}"
    );
    let header = format!(
        "| case | unit | {} | ebbtide / fastest peer |",
        peers.join(" | ")
    );
    assert!(stdout.contains(&header), "{header:?} not in\n{stdout}");
    for c in &cases {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {c} | ")))
            .unwrap_or_else(|| panic!("no row for {c}:\n{stdout}"));
        assert_eq!(row.matches('[').count(), peers.len(), "{row}");
    }
    assert!(stdout.contains("## Peak RSS"), "{stdout}");
    assert!(stdout.contains("fragmentation rss_mib"), "{stdout}");
    assert!(
        stdout.contains("No ebbtide column: no verdict."),
        "{stdout}"
    );
    assert!(!stdout.contains("## Failures"), "{stdout}");
    assert!(stdout.contains("- load average before: "), "{stdout}");
}

/// A "libebbtide_malloc.so" that does not define malloc (here libm) is caught in every C case
/// by the program's own `#info` line, and in a real program by the `LD_DEBUG=bindings` check:
/// failed cells, a failed verdict, reproducers, and the peers' figures still there.
#[test]
fn a_preload_that_does_not_take_is_a_failure() {
    let _turn = crate::serial::turn(module_path!());
    let libm = lib_path("libm.so.6").expect("libm.so.6");
    let mut cases = vec!["pair_small", "larson"];
    if installed("sqlite3") {
        cases.push("sqlite_bulk");
    }
    let o = driver(&[
        "--rounds",
        "1",
        "--scale",
        "0.01",
        "--only",
        "ebbtide,glibc",
        "--cases",
        &cases.join(","),
        "--lib",
        libm.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{}\n{stdout}\n{stderr}", o.status);
    for c in &cases {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {c} | ")))
            .unwrap_or_else(|| panic!("no row for {c}:\n{stdout}"));
        assert!(row.contains("**FAILED**"), "{row}");
        assert_eq!(row.matches('[').count(), 1, "glibc still measured: {row}");
        assert!(stdout.contains(&format!("**{c} / ebbtide**")), "{stdout}");
    }
    assert!(stdout.contains("malloc_from="), "{stdout}");
    assert!(stdout.contains("not libebbtide_malloc-"), "{stdout}");
    if cases.contains(&"sqlite_bulk") {
        assert!(stdout.contains("binding check:"), "{stdout}");
    }
    assert!(stdout.contains("reproduce: `LD_PRELOAD="), "{stdout}");
    assert!(
        stdout.contains("| every case runs correctly | failed: "),
        "{stdout}"
    );
}

/// An allocator whose `realloc` loses the contents (a test library built here, delegating to
/// glibc's `__libc_*` otherwise): `realloc_grow` fails with the program's corruption message;
/// `pair_small` is measured and compared.
#[test]
fn lost_realloc_contents_are_caught() {
    let _turn = crate::serial::turn(module_path!());
    let dir = std::env::temp_dir().join(format!("malloc_bench-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("badrealloc.c");
    std::fs::write(
        &src,
        r#"
#include <stddef.h>
#include <string.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void __libc_free(void *);
void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
void free(void *p) { __libc_free(p); }
void *realloc(void *p, size_t n) {
    void *q = __libc_malloc(n);
    if (q) memset(q, 0, n);
    __libc_free(p);
    return q;
}
"#,
    )
    .unwrap();
    let so = dir.join("libbad.so");
    let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(st.success());
    let o = driver(&[
        "--rounds",
        "2",
        "--scale",
        "0.01",
        "--only",
        "ebbtide,glibc",
        "--cases",
        "pair_small,realloc_grow",
        "--lib",
        so.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{}\n{stdout}\n{stderr}", o.status);
    let row = |c: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {c} | ")))
            .unwrap_or_else(|| panic!("no row for {c}:\n{stdout}"))
            .to_string()
    };
    assert!(row("realloc_grow").contains("**FAILED**"), "{stdout}");
    assert!(stdout.contains("exit status 3"), "{stdout}");
    assert!(stdout.contains("lost contents"), "{stdout}");
    assert_eq!(row("pair_small").matches('[').count(), 2, "{stdout}");
    assert!(row("pair_small").contains("(glibc)"), "{stdout}");
    assert!(stdout.contains("failed: realloc_grow"), "{stdout}");
}

#[test]
fn bad_options_are_refused_with_a_message() {
    let _turn = crate::serial::turn(module_path!());
    for (args, want) in [
        (&["--cases", "pair_big"][..], "unknown case \"pair_big\""),
        (&["--only", "hoard"][..], "unknown allocator \"hoard\""),
        (&["--rounds", "0"][..], "--rounds 0"),
        (&["--scale", "-1"][..], "--scale -1"),
        (&["--timeout", "x"][..], "--timeout x"),
        (&["--rounds"][..], "--rounds needs a value"),
        (&["--frobnicate", "1"][..], "unknown option --frobnicate"),
        (&["--threads", "0"][..], "\"0\" is not a thread count"),
        (&["--threads", "2,x"][..], "\"x\" is not a thread count"),
        (
            &["--sweep", "--threads", "257"][..],
            "\"257\" is not a thread count",
        ),
    ] {
        let o = driver(args);
        let (_, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
    let o = driver(&[
        "--lib",
        "/nonexistent/libebbtide_malloc.so",
        "--cases",
        "pair_small",
    ]);
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/nonexistent/libebbtide_malloc.so: no such file"),
        "{stderr}"
    );
    let o = driver(&["--prebuilt", "/nonexistent", "--only", "glibc", "--sweep"]);
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--prebuilt /nonexistent: no mallocbench there"),
        "{stderr}"
    );
}

/// `--threads`: one row per thread count for a threaded case (prodcons from 2 threads on), a
/// single-thread case once, as `(1)`; the log names each as case@threads; the sweep's table
/// and verdict are printed.
#[test]
fn thread_counts_make_rows() {
    let _turn = crate::serial::turn(module_path!());
    let log = std::env::temp_dir().join(format!("malloc_bench-threads-{}.log", std::process::id()));
    let o = driver(&[
        "--threads",
        "1,3",
        "--rounds",
        "1",
        "--scale",
        "0.01",
        "--only",
        "glibc",
        "--cases",
        "prodcons,larson,pair_small",
        "--log",
        log.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{}\n{stdout}\n{stderr}", o.status);
    let runs = std::fs::read_to_string(&log).expect("--log written");
    let _ = std::fs::remove_file(&log);
    let keys: Vec<&str> = runs.lines().map(|l| l.split(' ').nth(1).unwrap()).collect();
    assert_eq!(
        keys,
        ["prodcons@3", "larson@1", "larson@3", "pair_small@1"],
        "{runs}"
    );
    for row in ["prodcons (3)", "larson (1)", "larson (3)", "pair_small (1)"] {
        assert!(stdout.contains(&format!("| {row} | ")), "{row}: {stdout}");
    }
    assert!(!stdout.contains("prodcons (1)"), "{stdout}");
    assert!(stdout.contains("## Sweep verdict"), "{stdout}");
    assert!(stdout.contains("- threads: 1 3"), "{stdout}");
    // The counters are ebbtide's: a run of peers alone has none to show.
    assert!(!stdout.contains("## Where ebbtide's time went"), "{stdout}");
}
