//! Watching a program is not counted as its work (issue: "the observer's own requests are
//! counted as the program's"): a sleeping program under the malloc preload, and one on the C
//! API (`libebbtide.so`), scraped 200 times by `ebbtide stat`, `stat --prometheus`, the table
//! and `ebbtide exporter`, keeps every zone's request counter, and its RSS grows by at most
//! [`RSS_SLACK_KB`]; `ebbtide top --batch` on it shows 0 REQ/s.
//!
//! Why the RSS bound: the control socket maps each reply's buffer from the OS and unmaps it
//! once written (`docs/design/observer.md`), so memory held between scrapes does not grow at
//! all; the slack covers pages of the program touched for the first time in the window (code
//! and stack pages faulted by a path the warm-up did not take, a kernel socket buffer), never
//! a per-scrape amount — 200 scrapes of 1 page each would already pass it. The RSS counted is
//! the mappings' anonymous and file pages from `smaps`, leaving out a mapping that became a
//! huge page in the window: khugepaged (every 10 s) collapses a dense `MADV_HUGEPAGE` region
//! of the heap by design, filling its absent pages (seen: +680 kB in one of four windows),
//! which no scrape caused; the collapse is named in the failure message if any other growth
//! fails the bound.
//!
//! Every process started here is killed by a guard, also when a test fails.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EBBTIDE: &str = env!("CARGO_BIN_EXE_ebbtide");
const SCRAPES: usize = 200;
/// Largest RSS growth allowed over the scrapes (see the module docs).
const RSS_SLACK_KB: u64 = 128;

#[path = "../../../ebbtide-malloc/tests/support/nested_build.rs"]
mod nested_build;
#[path = "../../../ebbtide/tests/support/skip.rs"]
mod skip;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// No EBBTIDE_* variable of the test's environment leaks into children.
fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("EBBTIDE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env_remove("XDG_RUNTIME_DIR");
}

/// A child killed (and reaped) when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `cmd` (which prints `ready` once set up, then sleeps) in a clean environment plus
/// `env`, and wait for the line.
fn start(mut cmd: Command, env: &[(&str, &str)]) -> Guard {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    clean_env(&mut cmd);
    cmd.envs(env.iter().copied());
    let mut child = cmd.spawn().expect("spawn the program");
    let out = child.stdout.take().unwrap();
    let g = Guard(child);
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n", "the program said {line:?}");
    g
}

fn ebbtide(args: &[&str]) -> String {
    let o = Command::new(EBBTIDE).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "ebbtide {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Every zone's request counter, by name, through `ebbtide stat PID --json`.
fn requests(pid: u32) -> BTreeMap<String, u64> {
    let v: serde_json::Value =
        serde_json::from_str(&ebbtide(&["stat", &pid.to_string(), "--json"])).expect("stats JSON");
    v["zones"]
        .as_array()
        .unwrap()
        .iter()
        .chain(v["pools"].as_array().unwrap())
        .map(|z| {
            (
                z["name"].as_str().unwrap().to_string(),
                z["requests"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// One mapping of `/proc/PID/smaps`: its resident kB and its anonymous huge-page kB.
#[derive(Clone, Copy, PartialEq)]
struct Vma {
    rss: u64,
    huge: u64,
}

/// The process's mappings by their header line (range, flags, offset, file).
fn smaps(pid: u32) -> BTreeMap<String, Vma> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut out = BTreeMap::new();
    let mut cur: Option<String> = None;
    for l in s.lines() {
        let first = l.split_whitespace().next().unwrap_or("");
        if !first.ends_with(':') && first.contains('-') {
            cur = Some(l.to_string());
            out.insert(l.to_string(), Vma { rss: 0, huge: 0 });
            continue;
        }
        let kb = || {
            l.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        if let Some(v) = cur.as_ref().and_then(|c| out.get_mut(c)) {
            match first {
                "Rss:" => v.rss = kb(),
                "AnonHugePages:" => v.huge = kb(),
                _ => {}
            }
        }
    }
    assert!(!out.is_empty(), "no mappings in /proc/{pid}/smaps");
    out
}

/// The RSS growth from `before` to `after` in kB (negative: shrank), over the mappings that did
/// not gain huge pages, and the ones that did (a collapse: see the module docs).
fn rss_growth(before: &BTreeMap<String, Vma>, after: &BTreeMap<String, Vma>) -> (i64, Vec<String>) {
    let collapsed: Vec<&String> = after
        .iter()
        .filter(|(k, v)| v.huge > before.get(*k).map_or(0, |b| b.huge))
        .map(|(k, _)| k)
        .collect();
    let sum = |m: &BTreeMap<String, Vma>| -> i64 {
        m.iter()
            .filter(|(k, _)| !collapsed.contains(k))
            .map(|(_, v)| v.rss as i64)
            .sum()
    };
    let named = collapsed
        .iter()
        .map(|k| {
            let (b, a) = (before.get(*k).copied(), after[*k]);
            format!(
                "{k}: rss {} -> {} kB, huge {} -> {} kB",
                b.map_or(0, |b| b.rss),
                a.rss,
                b.map_or(0, |b| b.huge),
                a.huge
            )
        })
        .collect();
    (sum(after) - sum(before), named)
}

/// Wait until the control socket answers and the program's own start-up is over: reads a
/// second apart agree for 3 s (the runtime's start — its sources opening, its first decay of the
/// start-up footprint — makes a few allocations up to about 5 s after start, with quiet
/// seconds between them). A read itself must not move the counters: with the observer's
/// requests counted they never agree, and the test goes on after 20 s to fail below with the
/// numbers.
fn settle(pid: u32) -> BTreeMap<String, u64> {
    let t0 = Instant::now();
    let mut last = loop {
        let o = Command::new(EBBTIDE)
            .args(["stat", &pid.to_string(), "--json"])
            .output()
            .unwrap();
        if o.status.success() {
            break requests(pid);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the control socket of {pid} does not answer: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let t1 = Instant::now();
    let mut same = 0;
    while same < 3 && t1.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_secs(1));
        let now = requests(pid);
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    last
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn exporter(port: u16) -> Guard {
    let mut cmd = Command::new(EBBTIDE);
    // It asks every process of this uid on the machine, other tests' included: short
    // timeouts keep a stopped one from slowing this test down.
    cmd.args(["exporter", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--timeout-ms", "500", "--scrape-timeout-ms", "3000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    clean_env(&mut cmd);
    let mut child = cmd.spawn().expect("spawn ebbtide exporter");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let g = Guard(child);
    assert!(line.contains("serving http://"), "{line}");
    g
}

fn metrics(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    assert!(buf.starts_with("HTTP/1.1 200"), "{buf}");
    buf
}

/// The scrapes: `stat --json`, `stat` (table), `stat --prometheus` and the exporter's page in
/// turn, [`SCRAPES`] in all; then the checks.
fn watch_and_check(pid: u32, what: &str) {
    let before = settle(pid);
    // One more read after settling: pages touched by the first reads are in the baseline.
    let _ = requests(pid);
    let maps0 = smaps(pid);
    let port = free_port();
    let _e = exporter(port);
    let p = pid.to_string();
    for i in 0..SCRAPES {
        match i % 4 {
            0 => drop(ebbtide(&["stat", &p, "--json"])),
            1 => drop(ebbtide(&["stat", &p])),
            2 => drop(ebbtide(&["stat", &p, "--prometheus"])),
            _ => assert!(metrics(port).contains(&format!("pid=\"{pid}\""))),
        }
    }
    let maps1 = smaps(pid);
    let (grown, collapsed) = rss_growth(&maps0, &maps1);
    let after = requests(pid);
    let moved: Vec<String> = after
        .iter()
        .filter(|(n, r)| before.get(*n) != Some(r))
        .map(|(n, r)| format!("{n}: {:?} -> {r}", before.get(n)))
        .collect();
    assert!(
        moved.is_empty(),
        "{what}: {SCRAPES} scrapes moved the request counters of {} zones (total {} -> {}):\n{}",
        moved.len(),
        before.values().sum::<u64>(),
        after.values().sum::<u64>(),
        moved.join("\n")
    );
    assert!(
        grown <= RSS_SLACK_KB as i64,
        "{what}: RSS grew by {grown} kB over {SCRAPES} scrapes (bound {RSS_SLACK_KB} kB); \
         left out, mappings collapsed into huge pages meanwhile: {collapsed:?}"
    );
    eprintln!(
        "{what}: {SCRAPES} scrapes: requests {} unchanged, RSS grew by {grown} kB \
         (collapsed into huge pages meanwhile, left out: {collapsed:?})",
        after.values().sum::<u64>()
    );

    // `top` in batch mode: after its first table, REQ/s is 0 on every zone.
    let out = ebbtide(&[
        "top",
        &p,
        "--batch",
        "--iterations",
        "3",
        "--interval-ms",
        "500",
    ]);
    let tables: Vec<&str> = out.split("\n\n").filter(|t| !t.trim().is_empty()).collect();
    assert_eq!(tables.len(), 3, "{out}");
    for t in &tables[1..] {
        let mut lines = t.lines().skip_while(|l| !l.starts_with("ITEM"));
        let head = lines
            .next()
            .unwrap_or_else(|| panic!("no table header in:\n{t}"));
        assert!(head.trim_end().ends_with("REQ/s"), "{head}");
        let rows: Vec<&str> = lines.take_while(|l| *l != "events:").collect();
        assert!(!rows.is_empty(), "{t}");
        for r in rows {
            let rate = r.split_whitespace().last().unwrap();
            assert_eq!(
                rate, "0",
                "{what}: top shows REQ/s {rate} on a sleeping program:\n{t}"
            );
        }
    }
}

#[test]
fn rss_growth_leaves_out_only_collapsed_mappings() {
    let m = |v: &[(&str, u64, u64)]| -> BTreeMap<String, Vma> {
        v.iter()
            .map(|(k, rss, huge)| {
                (
                    k.to_string(),
                    Vma {
                        rss: *rss,
                        huge: *huge,
                    },
                )
            })
            .collect()
    };
    let before = m(&[("heap", 1672, 0), ("stack", 100, 0), ("buf", 64, 0)]);
    // The heap collapsed (left out), the stack grew, the reply buffer was unmapped, a new
    // mapping appeared.
    let after = m(&[("heap", 2048, 2048), ("stack", 140, 0), ("leak", 200, 0)]);
    let (grown, collapsed) = rss_growth(&before, &after);
    assert_eq!(grown, 140 + 200 - 100 - 64);
    assert_eq!(collapsed.len(), 1);
    assert!(
        collapsed[0].starts_with("heap: rss 1672 -> 2048 kB"),
        "{collapsed:?}"
    );
    let (grown, collapsed) = rss_growth(&before, &m(&[("heap", 1900, 0)]));
    assert_eq!((grown, collapsed.len()), (1900 - 1672 - 164, 0));
}

#[test]
fn a_sleeping_malloc_program_is_not_moved_by_scrapes() {
    let _turn = crate::serial::turn(module_path!());
    let python = "/usr/bin/python3";
    if !Path::new(python).exists() {
        skip::skip(
            "a_sleeping_malloc_program_is_not_moved_by_scrapes",
            "/usr/bin/python3 is missing (apt-get install python3)",
        );
        return;
    }
    // The library of this tree, built now: `ebbtide run` would take whatever copy lies in
    // the target directory.
    let lib = nested_build::cargo_build(&root(), "ebbtide-malloc", "test", "debug")
        .join("libebbtide_malloc.so");
    let mut cmd = Command::new(EBBTIDE);
    cmd.args([
        "run",
        "--",
        python,
        "-c",
        "import time\nkeep = [bytearray(n) for n in range(1, 70000, 97)]\n\
         print('ready', flush=True)\ntime.sleep(600)\n",
    ]);
    let g = start(cmd, &[("EBBTIDE_MALLOC_LIB", lib.to_str().unwrap())]);
    watch_and_check(g.0.id(), "python3 under the malloc preload");
}

const C_PROGRAM: &str = r#"
#include <ebbtide.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
    ebb_zone *zones[8];
    void *items[8][64];
    for (int z = 0; z < 8; z++) {
        char name[32];
        snprintf(name, sizeof name, "observed-%d", z);
        zones[z] = ebb_zone_create(name, 32u << z, 0, 0);
        if (!zones[z]) return 1;
        for (int i = 0; i < 64; i++) items[z][i] = ebb_zone_alloc(zones[z]);
        for (int i = 0; i < 32; i++) ebb_zone_free(zones[z], items[z][i]);
    }
    puts("ready");
    fflush(stdout);
    sleep(600);
    return 0;
}
"#;

#[test]
fn a_sleeping_c_api_program_is_not_moved_by_scrapes() {
    let _turn = crate::serial::turn(module_path!());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    if Command::new(&cc).arg("--version").output().is_err() {
        skip::skip(
            "a_sleeping_c_api_program_is_not_moved_by_scrapes",
            "no C compiler (apt-get install gcc)",
        );
        return;
    }
    let lib = nested_build::cargo_build(&root(), "ebbtide-capi", "test", "debug");
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("observer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("sleeper.c");
    let exe = dir.join("sleeper");
    std::fs::write(&src, C_PROGRAM).unwrap();
    let o = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg("-lebbtide")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let g = start(Command::new(&exe), &[("EBBTIDE_CONTROL_SOCKET", "1")]);
    watch_and_check(g.0.id(), "a C API program (libebbtide.so)");
    let _ = std::fs::remove_dir_all(&dir);
}
