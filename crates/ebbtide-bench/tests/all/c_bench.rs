//! Behaviour (not speed) of the C benchmark: `ebbtide-bench-c` builds `libebbtide.so` (test
//! profile, this target directory, as `ebbtide-capi`'s C tests do) and `benches/c/allocbench.c`
//! with the system C compiler, and runs every case once per round with tiny fixed iteration
//! counts. Checked: the program's output format, that every case ran for ebbtide and glibc (and
//! for each peer whose Debian library is installed, with `LD_PRELOAD` in effect), and the
//! tables the driver prints. Nothing here asserts a timing.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// The tests share one build of the program: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const CASES: &[&str] = &[
    "pair64",
    "pair256",
    "pair4096",
    "live256_64",
    "live256_256",
    "live256_4096",
    "cross2_64",
];

/// `target/` of this test binary (`.../target/<profile>/deps/c_bench-HASH`).
fn target_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

fn driver(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ebbtide-bench-c"))
        .args(["--profile", "test"])
        .args(args)
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("run ebbtide-bench-c");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "ebbtide-bench-c {args:?}: {}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

fn peer_installed(file: &str) -> bool {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
    ]
    .iter()
    .any(|d| Path::new(d).join(file).exists())
}

/// The driver end to end: two rounds of every case for every allocator present, every run's
/// lines kept with `--diag-out`; the tables name every case and allocator.
#[test]
fn driver_runs_every_case_for_every_allocator() {
    let _turn = crate::serial::turn(module_path!());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let log = std::env::temp_dir().join(format!("c_bench-{}.log", std::process::id()));
    let log_s = log.to_str().unwrap();
    let (stdout, stderr) = driver(&[
        "--reps",
        "2",
        "--iters",
        "300",
        "--min-ms",
        "0",
        "--diag",
        "--diag-out",
        log_s,
    ]);
    let text = std::fs::read_to_string(&log).expect("--diag-out written");
    let _ = std::fs::remove_file(&log);

    let mut names = vec!["ebbtide", "glibc"];
    for (n, f) in [
        ("jemalloc", "libjemalloc.so.2"),
        ("mimalloc", "libmimalloc.so.2"),
        ("tcmalloc", "libtcmalloc_minimal.so.4"),
    ] {
        if peer_installed(f) {
            names.push(n);
        } else {
            assert!(stderr.contains(&format!("skipping {n}")), "{stderr}");
        }
    }
    for n in &names {
        for c in CASES {
            // One result line per round: "round=R case allocator ns".
            for round in 0..2 {
                let prefix = format!("round={round} {c} {n} ");
                let line = text
                    .lines()
                    .find(|l| l.starts_with(&prefix))
                    .unwrap_or_else(|| panic!("no {prefix:?} in\n{text}"));
                let v: f64 = line[prefix.len()..].parse().expect("a number");
                assert!(v.is_finite() && v > 0.0, "{line}");
            }
            // ebbtide's runs carry the zone's counters: every case's requests were served.
            if *n == "ebbtide" {
                let diag = text
                    .lines()
                    .find(|l| l.contains(&format!("#diag {c} ebbtide ")))
                    .unwrap_or_else(|| panic!("no #diag for {c}"));
                let req: u64 = diag
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("requests="))
                    .expect("requests=")
                    .parse()
                    .unwrap();
                assert!(req >= 300, "{c}: requests={req} for 300 iterations: {diag}");
                assert!(diag.contains("pcpu_count="), "{diag}");
            }
        }
    }
    // The tables: one row per case with a cell per allocator and a ratio.
    let header = format!("| case | {} | ebbtide / fastest peer |", names.join(" | "));
    assert!(stdout.contains(&header), "{header:?} not in\n{stdout}");
    for c in CASES {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {c} | ")))
            .unwrap_or_else(|| panic!("no row for {c}:\n{stdout}"));
        assert_eq!(row.matches('[').count(), names.len(), "{row}");
        assert!(row.contains("**"), "no ratio in {row}");
    }
    assert!(
        stdout.contains("Spread between runs (max / min)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("## ebbtide runs, per process (--diag)"),
        "{stdout}"
    );
    assert!(stdout.contains("- load average before: "), "{stdout}");
}

/// The C program directly, as a C user runs it: the `case allocator ns` lines and `#done`.
#[test]
fn program_output_format_ebbtide_and_glibc() {
    let _turn = crate::serial::turn(module_path!());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The driver builds it (and the library) into target/cbench/test/allocbench.
    driver(&[
        "--reps", "1", "--iters", "64", "--min-ms", "0", "--only", "glibc", "--cases", "pair64",
    ]);
    let exe = target_dir().join("cbench/test/allocbench");
    for (mode, label) in [("ebbtide", "ebbtide"), ("malloc", "glibc")] {
        let out = Command::new(&exe)
            .env_remove("LD_PRELOAD")
            .args([
                "--alloc", mode, "--label", label, "--iters", "64", "--min-ms", "0",
            ])
            .output()
            .expect("run allocbench");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{mode}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let results: Vec<Vec<&str>> = stdout
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect())
            .collect();
        let ran: Vec<&str> = results.iter().map(|f| f[0]).collect();
        assert_eq!(ran, CASES, "{stdout}");
        for f in &results {
            assert_eq!(f.len(), 3, "{f:?}");
            assert_eq!(f[1], label);
            assert!(f[2].parse::<f64>().unwrap() > 0.0, "{f:?}");
        }
        assert!(stdout.contains("#done cases=7"), "{stdout}");
        let info = stdout
            .lines()
            .find(|l| l.starts_with("#info "))
            .expect("#info");
        assert!(
            info.contains("malloc_from=") && info.contains("libc.so"),
            "{info}"
        );
    }
    // A bad case is refused (exit 2), not silently skipped.
    let bad = Command::new(&exe)
        .args(["--alloc", "malloc", "--cases", "pair63"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
