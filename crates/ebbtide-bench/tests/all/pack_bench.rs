//! The packed sweep travels (issue 43): `scripts/pack-bench.sh --from <this profile>` packs the
//! benchmark, the compiled C program, both ebbtide libraries and the peers' libraries; the
//! folder, moved elsewhere, runs from a third directory with a scrubbed environment (`env -i`,
//! a PATH with `sh` and `cat` only, and `cc`, `gcc`, `cargo`, `rustc` there as traps that
//! record being called) at a tiny scale, two thread counts, one round; every row of the sweep
//! must have ebbtide's and the best peer's figures, and no run may fail; every row has a line of
//! ebbtide's lock waits and remote frees read at its runs' end (numbers, in the printout and the
//! `--log`), and no peer has one. A runner whose run fails (a packed file missing; a folder path
//! LD_PRELOAD cannot carry) must exit non-zero. Nothing here asserts a timing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The cargo profile directory that holds this test's `ebbtide-bench-malloc`.
fn profile_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_ebbtide-bench-malloc"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn show(o: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Both ebbtide libraries beside the driver, in its profile (a no-op when they are built).
fn build_libraries(profile: &Path) {
    let target = profile.parent().unwrap();
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root())
        .args(["build", "-q", "-p", "ebbtide-malloc", "-p", "ebbtide-capi"])
        .arg("--target-dir")
        .arg(target);
    match profile.file_name().unwrap().to_str().unwrap() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        p => {
            cmd.args(["--profile", p]);
        }
    }
    let o = cmd.output().expect("run cargo");
    assert!(o.status.success(), "building the libraries: {}", show(&o));
}

/// A PATH directory with `sh` and `cat`, and traps for a compiler or cargo: each writes its
/// name into `marker` and fails.
fn scrubbed_path(dir: &Path, marker: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for t in ["sh", "cat"] {
        let real = ["/bin", "/usr/bin"]
            .iter()
            .map(|d| Path::new(d).join(t))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("no {t} in /bin or /usr/bin"));
        std::os::unix::fs::symlink(real, dir.join(t)).unwrap();
    }
    for t in ["cc", "gcc", "clang", "cargo", "rustc", "ld"] {
        let p = dir.join(t);
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho {t} >> '{}'\nexit 127\n", marker.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn the_packed_sweep_runs_elsewhere_with_its_files_only() {
    let _turn = crate::serial::turn(module_path!());
    let profile = profile_dir();
    build_libraries(&profile);
    let base = std::env::temp_dir().join(format!("pack-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let packed = base.join("packed");
    let o = Command::new("bash")
        .arg(root().join("scripts/pack-bench.sh"))
        .arg("--from")
        .arg(&profile)
        .arg(&packed)
        .output()
        .expect("run scripts/pack-bench.sh");
    assert!(o.status.success(), "pack-bench.sh: {}", show(&o));
    for f in [
        "run.sh",
        "ABOUT",
        "bin/ebbtide-bench-malloc",
        "bin/mallocbench",
        "bin/launch",
        "bin/stats_at_exit.so",
        "lib/libebbtide_malloc.so",
        "lib/libebbtide.so",
        "peers/libjemalloc.so.2",
        "peers/libmimalloc.so.2",
        "peers/libtcmalloc_minimal.so.4",
        "peers/libstdc++.so.6",
    ] {
        assert!(packed.join(f).is_file(), "{f} not packed");
    }
    assert!(
        !packed.join("peers/libc.so.6").exists(),
        "glibc itself is the target's"
    );
    // Packing into a folder that is not empty is refused.
    let again = Command::new("bash")
        .arg(root().join("scripts/pack-bench.sh"))
        .arg("--from")
        .arg(&profile)
        .arg(&packed)
        .output()
        .unwrap();
    assert!(!again.status.success(), "{}", show(&again));

    // Moved, then run from a third directory with nothing of this machine's tool chain.
    let moved = base.join("moved-elsewhere");
    std::fs::rename(&packed, &moved).unwrap();
    let cwd = base.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let bin = base.join("path");
    let marker = base.join("called");
    scrubbed_path(&bin, &marker);
    let tmp = base.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let run = |args: &[&str]| {
        Command::new(moved.join("run.sh"))
            .args(args)
            .env_clear()
            .env("PATH", &bin)
            .env("TMPDIR", &tmp)
            .current_dir(&cwd)
            .output()
            .expect("run the packed run.sh")
    };
    let log = base.join("sweep.log");
    let o = run(&[
        "--threads",
        "1,2",
        "--rounds",
        "1",
        "--scale",
        "0.01",
        "--log",
        log.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "the packed runner failed: {}", show(&o));
    assert!(
        !marker.exists(),
        "the packed run called {}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
    assert!(out.contains("commit: "), "ABOUT printed: {out}");
    assert!(
        out.contains(&format!(
            "- C programs: prebuilt, from {}",
            moved.join("bin").display()
        )),
        "{out}"
    );
    for p in [
        "libjemalloc.so.2",
        "libmimalloc.so.2",
        "libtcmalloc_minimal.so.4",
    ] {
        let want = format!("LD_PRELOAD={}", moved.join("peers").join(p).display());
        assert!(out.contains(&want), "{want} not in\n{out}");
    }
    assert!(
        out.contains("| case (threads) | ebbtide | best peer | ebbtide / best |"),
        "{out}"
    );
    let peers = ["glibc", "jemalloc", "mimalloc", "tcmalloc"];
    for row in [
        "larson (1)",
        "larson (2)",
        "prodcons (2)",
        "thread_handover (1)",
        "thread_handover (2)",
        "live_mixed (1)",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("| {row} | ")))
            .unwrap_or_else(|| panic!("no row {row:?} in\n{out}"));
        let f: Vec<&str> = line.split(" | ").collect();
        let ebb: f64 = f[1]
            .parse()
            .unwrap_or_else(|_| panic!("ebbtide's figure in {line}"));
        assert!(ebb > 0.0, "{line}");
        assert!(
            peers.iter().any(|p| f[2].starts_with(p)),
            "best peer in {line}"
        );
        assert!(f[3].starts_with("**") && f[3].ends_with("**"), "{line}");
        let rss: f64 = f[4].parse().unwrap_or_else(|_| panic!("RSS in {line}"));
        assert!(rss > 1.0, "{line}");
    }
    assert!(!out.contains("prodcons (1)"), "{out}");
    assert!(!out.contains("## Failures"), "{out}");
    contention_lines(&out, &std::fs::read_to_string(&log).expect("--log written"));
    assert!(out.contains("## Sweep verdict"), "{out}");
    // The scratch directory went under TMPDIR and was removed after a clean run.
    let left: Vec<_> = std::fs::read_dir(tmp.join("ebbtide-sweep"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");

    // LD_PRELOAD splits at spaces: a folder whose path has one is refused with a message.
    let spaced = base.join("with space");
    std::fs::rename(&moved, &spaced).unwrap();
    let o = Command::new(spaced.join("run.sh"))
        .args(["--threads", "1", "--rounds", "1", "--scale", "0.01"])
        .env_clear()
        .env("PATH", &bin)
        .env("TMPDIR", &tmp)
        .current_dir(&cwd)
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("space or colon"),
        "{}",
        show(&o)
    );
    std::fs::rename(&spaced, &moved).unwrap();

    // A pack missing the counters' reader: the runner fails, naming it and the way out.
    std::fs::rename(moved.join("bin/stats_at_exit.so"), base.join("shim")).unwrap();
    let o = run(&["--threads", "1", "--rounds", "1", "--scale", "0.01"]);
    assert!(!o.status.success(), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("no stats_at_exit.so there (pack again, or give --no-counters)"),
        "{}",
        show(&o)
    );
    std::fs::rename(base.join("shim"), moved.join("bin/stats_at_exit.so")).unwrap();

    // A pack missing its C program: the runner fails, naming it.
    std::fs::remove_file(moved.join("bin/mallocbench")).unwrap();
    let o = run(&["--threads", "1", "--rounds", "1", "--scale", "0.01"]);
    assert!(!o.status.success(), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no mallocbench there"),
        "{}",
        show(&o)
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// The sweep's contention section: one line per row for ebbtide, with a count and a time per
/// lock class, remote frees and the share of time waiting, and none for a peer; the `--log`
/// lines of ebbtide's runs carry the same counters, the peers' none.
fn contention_lines(out: &str, log: &str) {
    let section = out
        .split("## Where ebbtide's time went")
        .nth(1)
        .unwrap_or_else(|| panic!("no contention section in\n{out}"))
        .split("\n## ")
        .next()
        .unwrap();
    for row in [
        "larson (1)",
        "larson (2)",
        "prodcons (2)",
        "thread_handover (1)",
        "thread_handover (2)",
        "live_mixed (1)",
    ] {
        let prefix = format!("- {row}, ebbtide: lock waits / time blocked: ");
        let line = section
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no counters for {row} in\n{section}"));
        let rest = &line[prefix.len()..];
        let (classes, tail) = rest.split_once("; remote frees ").expect(line);
        let names: Vec<&str> = classes
            .split(", ")
            .map(|c| {
                // "depot 12 / 3.10 ms"
                let f: Vec<&str> = c.split(' ').collect();
                assert_eq!(f.len(), 5, "{c} in {line}");
                f[1].parse::<u64>()
                    .unwrap_or_else(|_| panic!("{c} in {line}"));
                f[3].parse::<f64>()
                    .unwrap_or_else(|_| panic!("{c} in {line}"));
                assert!(["ns", "µs", "ms", "s"].contains(&f[4]), "{c} in {line}");
                f[0]
            })
            .collect();
        assert_eq!(
            names,
            ["depot", "keg", "stash", "arena", "registry", "page_heap"],
            "{line}"
        );
        let (remote, share) = tail.split_once("; waiting ").expect(line);
        remote.parse::<u64>().unwrap_or_else(|_| panic!("{line}"));
        let pct: f64 = share
            .split(" % of ")
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{line}"));
        assert!((0.0..=100.0).contains(&pct), "{line}");
        let threads = row[row.find('(').unwrap() + 1..row.len() - 1].to_string();
        assert!(
            share.contains(&format!(" % of {threads} thread")),
            "{row}: {line}"
        );
    }
    for p in ["glibc", "jemalloc", "mimalloc", "tcmalloc"] {
        assert!(!section.contains(&format!(", {p}: ")), "{p} in\n{section}");
    }
    for l in log.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f[2] == "ebbtide" {
            assert_eq!(f.len(), 6 + 12 + 3, "{l}");
            assert!(f[6..].iter().all(|kv| kv
                .split_once('=')
                .is_some_and(|(_, v)| v.parse::<u64>().is_ok())));
            assert!(
                l.contains(" waits_depot=") && l.contains(" remote_frees="),
                "{l}"
            );
        } else {
            assert_eq!(f.len(), 6, "{l}");
        }
    }
    assert!(log.lines().any(|l| l.contains(" ebbtide ")), "{log}");
}
