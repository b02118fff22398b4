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
//! a per-scrape amount — 200 scrapes of 1 page each would already pass it.
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

fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
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
    let rss0 = rss_kb(pid);
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
    let rss1 = rss_kb(pid);
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
        rss1 <= rss0 + RSS_SLACK_KB,
        "{what}: RSS grew from {rss0} kB to {rss1} kB over {SCRAPES} scrapes (bound {RSS_SLACK_KB} kB)"
    );
    eprintln!(
        "{what}: {SCRAPES} scrapes: requests {} unchanged, RSS {rss0} kB -> {rss1} kB",
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
