//! Small on transparent huge pages `always` (issue 38, docs/design/thp-policy.md): the peak
//! RSS (`ru_maxrss`, the kernel's `VmHWM`) of `python3 -c pass` and `/bin/true` under
//! `LD_PRELOAD=libebbtide_malloc.so` is within 1.1× the median of the peers (glibc, and
//! Debian's jemalloc, mimalloc and tcmalloc preloaded the same way), with THP `always` and with
//! THP `madvise`.
//!
//! Root only: the test switches `/sys/kernel/mm/transparent_hugepage/enabled`, a setting of the
//! whole machine, for as long as the runs of one mode take (about a second), and a guard puts
//! the previous setting back when it is dropped: at the end, on a failed assertion (unwinding)
//! and on a panic anywhere in between. Not root, or a kernel without THP, it skips saying so.
//! A missing peer library skips too (and fails under `CI`, where `.ci/run` installs them).

#[path = "../support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Stdio;
use support::{command, compile, installed, lib, program, scratch};

const THP: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
/// Runs per allocator, program and mode; the median counts.
const RUNS: usize = 5;
/// The bound: this much of the peers' median.
const BOUND: f64 = 1.1;

/// The mode in brackets of the sysfs file (`always [madvise] never` gives `madvise`).
fn current_mode(text: &str) -> Option<&str> {
    let a = text.find('[')?;
    let b = a + text[a..].find(']')?;
    Some(&text[a + 1..b])
}

/// Sets THP's mode and puts the previous one back when dropped (also while unwinding from a
/// failed assertion).
struct ThpMode {
    prev: String,
}

impl ThpMode {
    fn set(mode: &str) -> ThpMode {
        let text = std::fs::read_to_string(THP).unwrap();
        let prev = current_mode(&text)
            .unwrap_or_else(|| panic!("{THP}: no mode in brackets in {text:?}"))
            .to_string();
        std::fs::write(THP, mode).unwrap_or_else(|e| panic!("writing {mode} to {THP}: {e}"));
        ThpMode { prev }
    }
}

impl Drop for ThpMode {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(THP, &self.prev) {
            // Nothing else can restore it: say so loudly (a panic while unwinding would abort).
            eprintln!("RESTORING {THP} to {} FAILED: {e}", self.prev);
        }
    }
}

/// Peak RSS in KiB of `argv` run with `preload` (none: glibc's malloc), as `launcher`
/// (`programs/peak_rss.c`, static) reports it: `wait4`'s `ru_maxrss` of a child that was the
/// small launcher until it exec'd the program (a child of this test process would carry the
/// test's own pages in its hiwater mark).
fn peak_kib(launcher: &Path, argv: &[&str], preload: Option<&Path>) -> u64 {
    let mut c = command(launcher);
    c.args(argv).stderr(Stdio::piped()).stdout(Stdio::piped());
    if let Some(p) = preload {
        c.env("LD_PRELOAD", p);
    }
    let out = c.output().unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{argv:?} under {preload:?}: {}, stderr {stderr}",
        out.status
    );
    assert!(
        !stderr.contains("ebbtide:"),
        "{argv:?}: ebbtide said something: {stderr}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("peak_rss printed {text:?}: {e}"))
}

fn median(mut v: Vec<u64>) -> f64 {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
    }
}

#[test]
fn peak_rss_of_small_programs_within_the_peers_on_thp_always_and_madvise() {
    let _turn = crate::serial::turn(module_path!());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: switching {THP} needs root");
        return;
    }
    if !Path::new(THP).exists() {
        eprintln!("SKIPPED: {THP} missing (a kernel without transparent huge pages)");
        return;
    }
    let python = "/usr/bin/python3";
    let dir = "/usr/lib/x86_64-linux-gnu";
    let peers = [
        (
            "jemalloc",
            format!("{dir}/libjemalloc.so.2"),
            "libjemalloc2",
        ),
        (
            "mimalloc",
            format!("{dir}/libmimalloc.so.2"),
            "libmimalloc2.0",
        ),
        (
            "tcmalloc",
            format!("{dir}/libtcmalloc_minimal.so.4"),
            "libtcmalloc-minimal4",
        ),
    ];
    if !installed(python, "python3") || !peers.iter().all(|(_, p, pkg)| installed(p, pkg)) {
        return;
    }
    let Some(launcher) = compile(&program("peak_rss.c"), &scratch("thp-always"), &["-static"])
    else {
        return;
    };
    let ebbtide = lib().to_path_buf(); // built before the window opens
    let mut allocs: Vec<(&str, Option<&Path>)> = vec![("glibc", None)];
    for (name, path, _) in &peers {
        allocs.push((name, Some(Path::new(path))));
    }
    allocs.push(("ebbtide", Some(ebbtide.as_path())));
    let programs: [&[&str]; 2] = [&[python, "-c", "pass"], &["/bin/true"]];

    let mut failures = Vec::new();
    for mode in ["always", "madvise"] {
        // Every run of one mode inside one short window; the guard restores the setting.
        let peaks: Vec<Vec<f64>> = {
            let _thp = ThpMode::set(mode);
            programs
                .iter()
                .map(|argv| {
                    allocs
                        .iter()
                        .map(|(_, pre)| {
                            median((0..RUNS).map(|_| peak_kib(&launcher, argv, *pre)).collect())
                        })
                        .collect()
                })
                .collect()
        };
        for (argv, row) in programs.iter().zip(&peaks) {
            let peer_median = median(row[..4].iter().map(|&x| x as u64).collect());
            let ours = row[4];
            let cells: Vec<String> = allocs
                .iter()
                .zip(row)
                .map(|((n, _), k)| format!("{n} {:.1}", k / 1024.0))
                .collect();
            eprintln!(
                "THP {mode}: {:?} peak RSS MiB: {}; peers' median {:.1}, ebbtide {:.2}x",
                argv.join(" "),
                cells.join(", "),
                peer_median / 1024.0,
                ours / peer_median
            );
            if ours > BOUND * peer_median {
                failures.push(format!(
                    "THP {mode}: {:?}: ebbtide {:.1} MiB > {BOUND} x the peers' median {:.1} MiB",
                    argv.join(" "),
                    ours / 1024.0,
                    peer_median / 1024.0
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_mode_is_the_bracketed_word() {
    let _turn = crate::serial::turn(module_path!());
    assert_eq!(current_mode("always [madvise] never\n"), Some("madvise"));
    assert_eq!(current_mode("[always] madvise never"), Some("always"));
    assert_eq!(current_mode("always madvise never"), None);
}
