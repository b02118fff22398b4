//! `ebbtide exporter` end to end, against `ebbtide-demo` processes, Prometheus's linter and the
//! real Prometheus server (Debian package `prometheus`, installed by `.ci/run`):
//!
//! * `stat --prometheus` and the exporter give the same metric names, the names documented in
//!   `docs/ABI/`, and `promtool check metrics` accepts both;
//! * the HTTP contract: 404, 405, 400 for malformed requests, a clear error and exit status 1
//!   on a port in use, a bounded number of connection threads;
//! * a stopped process costs its own series only, within its timeout; a killed one disappears;
//! * a Prometheus server scrapes the exporter, and its HTTP API returns a zone's series with
//!   the right labels and value;
//! * the examples in `docs/prometheus/` are valid (`promtool check config`, `check rules`,
//!   `test rules`; the systemd unit's command line runs) and `docs/exporter.md` shows them as
//!   they are.
//!
//! Without `promtool`/`prometheus` a test fails under CI (`CI` set) or as root (who can
//! install them), and is skipped with a message otherwise. Every server and process started
//! here is killed by a guard, also when a test fails. Only 127.0.0.1 is used, on free ports.

use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

const EBBTIDE: &str = env!("CARGO_BIN_EXE_ebbtide");
const DEMO: &str = env!("CARGO_BIN_EXE_ebbtide-demo");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// No EBBTIDE_* variable of the test's environment leaks into children.
fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("EBBTIDE_") {
            cmd.env_remove(k);
        }
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[path = "../../../ebbtide/tests/support/prometheus_tools.rs"]
mod prometheus_tools;
#[path = "../../../ebbtide/tests/support/skip.rs"]
mod skip;
use prometheus_tools::{check_metrics as promtool_check, tool};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ebbtide-exporter-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A child process killed (and reaped) when dropped.
struct Guard {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Removed after the child is gone.
    dir: Option<PathBuf>,
}

impl Guard {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child, which we have not reaped (so the pid is still ours).
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(r, 0, "kill({}, {sig})", self.child.id());
    }

    /// SIGSTOP, then waits until every thread of the process is stopped: `kill` returns once
    /// the signal is queued, and until the thread chosen to take it runs, the others (the
    /// control thread among them) go on — on a loaded machine long enough to answer a scrape.
    fn stop(&self) {
        self.signal(libc::SIGSTOP);
        let tasks = format!("/proc/{}/task", self.child.id());
        let t = Instant::now();
        loop {
            let all_stopped = std::fs::read_dir(&tasks)
                .expect("the process's tasks")
                .flatten()
                .all(|e| {
                    std::fs::read_to_string(e.path().join("stat")).is_ok_and(|st| {
                        // The state follows the command's closing parenthesis.
                        st.rsplit_once(") ")
                            .is_some_and(|(_, rest)| rest.starts_with('T'))
                    })
                });
            if all_stopped {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "pid {} not stopped after 10 s",
                self.child.id()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Guard {
    /// SIGKILL: no chance to remove its control socket.
    fn kill_now(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Guard {
    /// A demo exits by itself when its stdin closes (and removes its socket); anything still
    /// running after that, or without stdin, is killed.
    fn drop(&mut self) {
        if self.stdin.take().is_some() {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(3) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// `ebbtide-demo`: three zones, its control socket on; returns once it serves.
fn demo() -> Guard {
    let mut cmd = Command::new(DEMO);
    cmd.args(["--seconds", "300"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env_remove("XDG_RUNTIME_DIR");
    clean_env(&mut cmd);
    let mut child = cmd.spawn().expect("spawn ebbtide-demo");
    let stdin = child.stdin.take();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let g = Guard {
        child,
        stdin,
        dir: None,
    };
    assert!(line.starts_with("ready "), "demo said {line:?}");
    g
}

/// `ebbtide exporter --listen 127.0.0.1:<port> <extra>`, once it serves.
fn exporter(port: u16, extra: &[&str]) -> Guard {
    let mut cmd = Command::new(EBBTIDE);
    cmd.args(["exporter", "--listen", &format!("127.0.0.1:{port}")])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    clean_env(&mut cmd);
    let mut child = cmd.spawn().expect("spawn ebbtide exporter");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let g = Guard {
        child,
        stdin: None,
        dir: None,
    };
    assert_eq!(
        line,
        format!("ebbtide exporter: serving http://127.0.0.1:{port}/metrics\n")
    );
    g
}

struct HttpReply {
    status: u16,
    headers: String,
    body: String,
}

/// Send `request` as is to 127.0.0.1:`port` and read the reply until the server closes.
fn raw(port: u16, request: &[u8]) -> HttpReply {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    HttpReply {
        status,
        headers: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

fn get(port: u16, path: &str) -> HttpReply {
    raw(
        port,
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
}

/// The names of the metric families that have samples in `text` (optionally only the samples
/// that carry `label`).
fn families(text: &str, label: Option<&str>) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter(|l| label.is_none_or(|x| l.contains(x)))
        .map(|l| l[..l.find(['{', ' ']).unwrap()].to_string())
        .collect()
}

/// The value of the one sample of `family` whose line contains every one of `labels`.
fn sample(text: &str, family: &str, labels: &[&str]) -> Option<String> {
    let mut found = text
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && labels.iter().all(|x| l.contains(x)));
    let line = found.next()?;
    assert!(found.next().is_none(), "two samples of {family} {labels:?}");
    Some(line.rsplit(' ').next().unwrap().to_string())
}

/// The value of the sample of `family` that has no labels.
fn plain(text: &str, family: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{family} ")))
        .unwrap_or_else(|| panic!("no {family} in {text}"))
        .to_string()
}

/// The memory cgroup of `pid`, as the exporter must label it: the v1 memory controller's path
/// if the memory controller is on v1, else the v2 path.
fn memory_cgroup(pid: u32) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let v1 = text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, c, p) = (f.next()?, f.next()?, f.next()?);
        c.split(',').any(|c| c == "memory").then(|| p.to_string())
    });
    v1.unwrap_or_else(|| {
        text.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or("")
            .to_string()
    })
}

/// The metric families `docs/ABI/testing/stats-*` document (their `Prometheus:` lines).
fn documented_families() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for f in ["stats-zone", "stats-pool", "stats-global"] {
        let text = std::fs::read_to_string(repo().join("docs/ABI/testing").join(f)).unwrap();
        for l in text.lines() {
            if let Some(rest) = l.trim().strip_prefix("Prometheus:") {
                let name = rest.trim();
                if name.starts_with("label ") {
                    continue;
                }
                out.insert(name.split('{').next().unwrap().to_string());
            }
        }
    }
    assert!(out.len() > 40, "{out:?}");
    out
}

#[test]
fn stat_and_exporter_give_the_same_documented_names() {
    let _turn = crate::serial::turn(module_path!());
    let promtool = tool("promtool");
    let d = demo();
    let pid = d.pid().to_string();
    let stat_now = || {
        let o = Command::new(EBBTIDE)
            .args(["stat", &pid, "--prometheus"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    // The source families appear once the demo's reclaim thread has looked for its pressure
    // sources (at its start, which a loaded machine may delay): wait for that first.
    let t0 = std::time::Instant::now();
    while !stat_now().contains("ebbtide_source_active")
        && t0.elapsed() < std::time::Duration::from_secs(20)
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let port = free_port();
    // Every zone's own series, as stat shows them (the default sums them per size range).
    let _e = exporter(port, &["--per-zone"]);
    let pid_label = format!("pid=\"{pid}\"");
    // The same names: the families of the demo's series in the exporter are those of stat.
    // (Read a few times: a pressure event between the two reads may add an info family.)
    let mut tries = 0;
    let (stat, page, from_stat) = loop {
        let r = get(port, "/metrics");
        assert_eq!(r.status, 200);
        assert!(
            r.headers
                .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
            "{}",
            r.headers
        );
        let stat = stat_now();
        let page = r.body;
        ebbtide::stats::check_exposition(&stat).unwrap();
        ebbtide::stats::check_exposition(&page).unwrap();
        let from_stat = families(&stat, None);
        let all: BTreeSet<String> = families(&page, Some(&pid_label));
        // The size-range sums are the exporter's own: each sums a zone family of the same
        // name (ebbtide_zones_X sums ebbtide_zone_X), but for the two it computes.
        for f in all.iter().filter(|f| f.starts_with("ebbtide_zones_")) {
            let zone = f.replacen("ebbtide_zones_", "ebbtide_zone_", 1);
            assert!(
                all.contains(&zone)
                    || f == "ebbtide_zones_in_range"
                    || f == "ebbtide_zones_used_bytes",
                "{f} sums no zone family"
            );
        }
        let from_exporter: BTreeSet<String> = all
            .into_iter()
            .filter(|f| !f.starts_with("ebbtide_exporter_") && !f.starts_with("ebbtide_zones_"))
            .collect();
        tries += 1;
        if from_stat == from_exporter || tries == 3 {
            assert_eq!(from_stat, from_exporter);
            break (stat, page, from_stat);
        }
    };
    // ... documented in docs/ABI (the demo has no page pool and no pressure event yet, so
    // no pool families and no text to show).
    let documented = documented_families();
    assert!(
        from_stat.is_subset(&documented),
        "undocumented: {:?}",
        from_stat.difference(&documented).collect::<Vec<_>>()
    );
    for f in documented.difference(&from_stat) {
        assert!(
            f.starts_with("ebbtide_pool_") || f.ends_with("_info"),
            "{f} documented but not shown"
        );
    }
    for old in [
        "ebbtide_last_event_ms_ago",
        "ebbtide_squeeze_until_ms",
        "ebbtide_events_psi_total",
        "ebbtide_zone_efficiency_pct",
    ] {
        assert!(!stat.contains(old) && !page.contains(old), "{old}");
    }
    assert_eq!(
        stat.matches("ebbtide_source_events_total{source=").count(),
        8
    );

    // Values and labels.
    let comm = "comm=\"ebbtide-demo\"";
    let cgroup = format!("cgroup=\"{}\"", memory_cgroup(d.pid()));
    let labels = [pid_label.as_str(), comm, &cgroup, "zone=\"demo-page\""];
    assert_eq!(
        sample(&page, "ebbtide_zone_size_bytes", &labels).as_deref(),
        Some("4096")
    );
    assert_eq!(
        sample(&stat, "ebbtide_zone_size_bytes", &["zone=\"demo-page\""]).as_deref(),
        Some("4096")
    );
    let used: u64 = sample(
        &page,
        "ebbtide_zone_used_items",
        &[&pid_label, "zone=\"demo-small\""],
    )
    .unwrap()
    .parse()
    .unwrap();
    assert!(used >= 2500, "{used}");
    assert_eq!(
        sample(
            &page,
            "ebbtide_exporter_process_up",
            &[&pid_label, comm, &cgroup]
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        plain(&page, "ebbtide_exporter_scrapes_total"),
        tries.to_string()
    );
    let seen: u64 = plain(&page, "ebbtide_exporter_processes_seen")
        .parse()
        .unwrap();
    let scraped: u64 = plain(&page, "ebbtide_exporter_processes_scraped")
        .parse()
        .unwrap();
    assert!(
        seen >= 1 && scraped >= 1 && scraped <= seen,
        "{seen} {scraped}"
    );

    let Some(promtool) = promtool else { return };
    for (what, text) in [("stat --prometheus", &stat), ("the exporter", &page)] {
        let (ok, said) = promtool_check(&promtool, text);
        assert!(ok, "promtool check metrics refused {what}:\n{said}\n{text}");
    }
}

#[test]
fn http_contract() {
    let _turn = crate::serial::turn(module_path!());
    let port = free_port();
    let e = exporter(
        port,
        &[
            "--max-connections",
            "2",
            "--http-timeout",
            "1",
            "--timeout-ms",
            "500",
        ],
    );
    let r = get(port, "/nope");
    assert_eq!(r.status, 404);
    assert_eq!(r.body, "not found: /nope (the metrics are at /metrics)\n");
    let r = raw(
        port,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    );
    assert_eq!(r.status, 405);
    assert!(r.headers.contains("allow: get"), "{}", r.headers);
    assert_eq!(get(port, "/").status, 200);
    for bad in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
        b"\xff\xfe\xfd\r\n\r\n",
        b"GET /metrics HTTP/7.0\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\n\r\n",
    ] {
        let r = raw(port, bad);
        assert_eq!(
            r.status,
            400,
            "{:?}: {}",
            String::from_utf8_lossy(bad),
            r.body
        );
    }
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Long: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 64 * 1024));
    huge.extend(b"\r\n\r\n");
    let r = raw(port, &huge);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(get(port, "/metrics").status, 200, "still serving");

    // A port in use: a clear error, exit status 1, nothing served.
    let o = Command::new(EBBTIDE)
        .args(["exporter", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with(&format!(
            "ebbtide: error: cannot listen on 127.0.0.1:{port} (--listen 127.0.0.1:{port}): the \
             address is already in use"
        )),
        "{err}"
    );
    // Bad syntax is a usage error (exit status 2) naming what was wrong.
    let o = Command::new(EBBTIDE)
        .args(["exporter", "--listen", ":9466"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no address before ':9466'"));

    // Bounded connections: 40 clients that send nothing hold at most 2 threads; the others
    // wait in the listen queue.
    let threads = || {
        std::fs::read_dir(format!("/proc/{}/task", e.pid()))
            .unwrap()
            .count()
    };
    let before = threads();
    let idle: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let during = threads();
    assert!(
        during <= before + 2,
        "{during} threads with 40 idle clients ({before} before)"
    );
    drop(idle);
    // Six silent clients ahead of us, two served at a time, cut off after 1 s each: our
    // request is answered after about 3 s, not never.
    let silent: Vec<TcpStream> = (0..6)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let t = Instant::now();
    let r = get(port, "/metrics");
    assert_eq!(r.status, 200);
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    drop(silent);
    assert!(threads() <= before + 2);
}

#[test]
fn a_stopped_process_costs_only_its_own_series() {
    let _turn = crate::serial::turn(module_path!());
    let a = demo();
    let b = demo();
    let port = free_port();
    // A timeout long enough for a running process on a loaded test machine (two cores, the
    // other tests' processes), short enough to tell a stopped one.
    let _e = exporter(
        port,
        &[
            "--timeout-ms",
            "1500",
            "--scrape-timeout-ms",
            "6000",
            "--zone",
            "demo-small",
        ],
    );
    let (pa, pb) = (
        format!("pid=\"{}\"", a.pid()),
        format!("pid=\"{}\"", b.pid()),
    );
    let page = get(port, "/metrics").body;
    assert!(sample(
        &page,
        "ebbtide_zone_used_items",
        &[&pb, "zone=\"demo-small\""]
    )
    .is_some());

    b.stop();
    let t = Instant::now();
    let r = get(port, "/metrics");
    let took = t.elapsed();
    assert_eq!(r.status, 200);
    let page = r.body;
    ebbtide::stats::check_exposition(&page).unwrap();
    assert!(took < Duration::from_millis(6500), "{took:?}");
    let exporter_lines: String = page
        .lines()
        .filter(|l| l.starts_with("ebbtide_exporter_"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        sample(
            &page,
            "ebbtide_zone_used_items",
            &[&pa, "zone=\"demo-small\""]
        )
        .is_some(),
        "the running process's series are there:\n{exporter_lines}"
    );
    assert!(
        !page
            .lines()
            .any(|l| l.contains(&pb) && !l.starts_with("ebbtide_exporter_")),
        "the stopped process has no statistics in this scrape"
    );
    assert_eq!(
        sample(&page, "ebbtide_exporter_process_up", &[&pb]).as_deref(),
        Some("0")
    );
    let stalled: f64 = sample(
        &page,
        "ebbtide_exporter_process_scrape_duration_seconds",
        &[&pb],
    )
    .unwrap()
    .parse()
    .unwrap();
    assert!((1.4..3.0).contains(&stalled), "{stalled}");
    let timeouts: u64 = sample(
        &page,
        "ebbtide_exporter_errors_total",
        &["reason=\"timeout\""],
    )
    .unwrap()
    .parse()
    .unwrap();
    assert!(timeouts >= 1);

    // Running again: back in the next scrapes.
    b.signal(libc::SIGCONT);
    let t = Instant::now();
    loop {
        let page = get(port, "/metrics").body;
        if sample(&page, "ebbtide_exporter_process_up", &[&pb]).as_deref() == Some("1") {
            assert!(sample(
                &page,
                "ebbtide_zone_used_items",
                &[&pb, "zone=\"demo-small\""]
            )
            .is_some());
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{page}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Killed: its stale socket stays, but the process is gone, and so are its series.
    let gone = a.pid();
    let stale = PathBuf::from(format!("/tmp/ebbtide-{}/{gone}.sock", euid()));
    a.kill_now();
    assert!(stale.exists(), "SIGKILL leaves the socket behind");
    let page = get(port, "/metrics").body;
    assert!(!page.contains(&format!("pid=\"{gone}\"")), "{page}");
    assert!(sample(
        &page,
        "ebbtide_zone_used_items",
        &[&pb, "zone=\"demo-small\""]
    )
    .is_some());
}

/// Percent-encode a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query to the Prometheus HTTP API: the `data.result` array.
fn query(port: u16, q: &str) -> Vec<Value> {
    let r = get(port, &format!("/api/v1/query?query={}", encode(q)));
    assert_eq!(r.status, 200, "{q}: {}", r.body);
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["status"], "success", "{v}");
    v["data"]["result"].as_array().unwrap().clone()
}

#[test]
fn prometheus_scrapes_the_exporter() {
    let _turn = crate::serial::turn(module_path!());
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let d = demo();
    let pid = d.pid().to_string();
    let exporter_port = free_port();
    let _e = exporter(exporter_port, &["--zone", "demo-*"]);
    let prom_port = free_port();
    let dir = scratch("prometheus");
    let rules = repo().join("docs/prometheus/ebbtide-alerts.yml");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {}\n\
         scrape_configs:\n  - job_name: ebbtide\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n",
        rules.canonicalize().unwrap().display()
    );
    std::fs::write(dir.join("prometheus.yml"), &config).unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(prometheus)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let _prom = Guard {
        child,
        stdin: None,
        dir: Some(dir.clone()),
    };
    let log = || std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
    let t = Instant::now();
    while !TcpStream::connect(("127.0.0.1", prom_port))
        .is_ok_and(|_| get(prom_port, "/-/ready").status == 200)
    {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "prometheus not ready:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Wait for a scrape that has the demo's zone.
    let q = format!("ebbtide_zone_size_bytes{{zone=\"demo-page\",pid=\"{pid}\"}}");
    let t = Instant::now();
    let result = loop {
        let r = query(prom_port, &q);
        if !r.is_empty() {
            break r;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no series {q}:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(result.len(), 1, "{result:?}");
    let m = &result[0]["metric"];
    assert_eq!(m["__name__"], "ebbtide_zone_size_bytes");
    assert_eq!(m["job"], "ebbtide");
    assert_eq!(m["instance"], format!("127.0.0.1:{exporter_port}"));
    assert_eq!(m["pid"], pid.as_str());
    assert_eq!(m["comm"], "ebbtide-demo");
    assert_eq!(m["cgroup"], memory_cgroup(d.pid()).as_str());
    assert_eq!(m["zone"], "demo-page");
    assert_eq!(m.as_object().unwrap().len(), 7, "{m}");
    assert_eq!(result[0]["value"][1], "4096");

    let used = query(
        prom_port,
        &format!("ebbtide_zone_used_items{{zone=\"demo-small\",pid=\"{pid}\"}}"),
    );
    let used: u64 = used[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(used >= 2500, "{used}");
    // One events family with a source label, eight sources.
    let events = query(
        prom_port,
        &format!("ebbtide_source_events_total{{pid=\"{pid}\"}}"),
    );
    assert_eq!(events.len(), 8, "{events:?}");
    assert!(events.iter().any(|e| e["metric"]["source"] == "psi"));
    // The target is up, and the page had nothing Prometheus had to drop.
    let up = query(prom_port, "up{job=\"ebbtide\"}");
    assert_eq!(up[0]["value"][1], "1", "{up:?}");
    // (Prometheus's own counters, from its own /metrics.)
    let own = get(prom_port, "/metrics").body;
    for q in [
        "prometheus_target_scrapes_sample_duplicate_timestamp_total",
        "prometheus_target_scrapes_sample_out_of_order_total",
        "prometheus_target_scrapes_sample_out_of_bounds_total",
    ] {
        assert_eq!(plain(&own, q), "0", "{q}");
    }

    // The alert rules of docs/prometheus/ loaded and evaluate without error.
    let r = get(prom_port, "/api/v1/rules");
    let v: Value = serde_json::from_str(&r.body).unwrap();
    let rules: Vec<&Value> = v["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    let names: BTreeSet<&str> = rules.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert!(
        names.contains("EbbtidePressureWithoutGiveBack"),
        "{names:?}"
    );
    let t = Instant::now();
    loop {
        let r = get(prom_port, "/api/v1/rules");
        let v: Value = serde_json::from_str(&r.body).unwrap();
        let healths: Vec<String> = v["data"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
            .map(|r| r["health"].as_str().unwrap().to_string())
            .collect();
        if healths.iter().all(|h| h == "ok") {
            break;
        }
        assert!(
            healths.iter().all(|h| h != "err") && t.elapsed() < Duration::from_secs(30),
            "{v}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The fenced block that follows `<!-- file: PATH -->` in `docs/exporter.md`, for each such
/// marker.
fn doc_blocks() -> Vec<(String, String)> {
    let md = std::fs::read_to_string(repo().join("docs/exporter.md")).unwrap();
    let mut out = Vec::new();
    let mut lines = md.lines();
    while let Some(l) = lines.next() {
        let Some(path) = l
            .strip_prefix("<!-- file: ")
            .and_then(|r| r.strip_suffix(" -->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap();
        assert!(
            fence.starts_with("```"),
            "{path}: no code block after the marker"
        );
        let mut body = String::new();
        for l in lines.by_ref() {
            if l == "```" {
                break;
            }
            body.push_str(l);
            body.push('\n');
        }
        out.push((path.to_string(), body));
    }
    out
}

#[test]
fn docs_examples_are_valid() {
    let _turn = crate::serial::turn(module_path!());
    // docs/exporter.md shows the files as they are.
    let blocks = doc_blocks();
    assert!(blocks.len() >= 3, "{blocks:?}");
    for (path, body) in &blocks {
        let file = std::fs::read_to_string(repo().join(path)).unwrap();
        assert_eq!(&file, body, "docs/exporter.md shows {path} differently");
    }
    // The systemd unit's command line is one the exporter accepts: run it once.
    let unit =
        std::fs::read_to_string(repo().join("docs/prometheus/ebbtide-exporter.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let mut words = exec.split_whitespace();
    assert!(words.next().unwrap().ends_with("/ebbtide"));
    let args: Vec<&str> = words.collect();
    assert_eq!(args[0], "exporter");
    let o = Command::new(EBBTIDE)
        .args(&args)
        .arg("--once")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("ebbtide_exporter_scrapes_total 1\n"));

    let Some(promtool) = tool("promtool") else {
        return;
    };
    let dir = repo().join("docs/prometheus");
    for args in [
        vec!["check", "rules", "ebbtide-alerts.yml"],
        vec!["check", "config", "prometheus.yml"],
        vec!["test", "rules", "ebbtide-alerts.test.yml"],
    ] {
        let o = Command::new(&promtool)
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // The rules test can fail: a process that does give memory back must not raise the alert.
    let tmp = scratch("rules");
    std::fs::copy(
        dir.join("ebbtide-alerts.yml"),
        tmp.join("ebbtide-alerts.yml"),
    )
    .unwrap();
    let test = std::fs::read_to_string(dir.join("ebbtide-alerts.test.yml")).unwrap();
    assert!(test.contains("'0+65536x40'"));
    std::fs::write(tmp.join("t.yml"), test.replace("'0+65536x40'", "'0x40'")).unwrap();
    let o = Command::new(&promtool)
        .args(["test", "rules", "t.yml"])
        .current_dir(&tmp)
        .output()
        .unwrap();
    assert!(!o.status.success(), "the alert test cannot fail");
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// The series of process `pid` on an exporter page (sample lines with its `pid` label).
fn series_of(page: &str, pid: u32) -> Vec<&str> {
    let label = format!("pid=\"{pid}\"");
    page.lines()
        .filter(|l| !l.starts_with('#') && l.contains(&label))
        .collect()
}

/// A real program with ebbtide as its malloc (`ebbtide run`, which preloads
/// libebbtide_malloc.so with the control socket on), its memory spread over every size class,
/// then asleep; returns once its control socket answers.
fn malloc_process(test: &str) -> Option<Guard> {
    if !Path::new("/usr/bin/python3").exists() {
        skip::skip(
            test,
            "/usr/bin/python3 is missing (apt-get install python3)",
        );
        return None;
    }
    let script = "import sys, time\n\
                  keep = [bytearray(n) for n in range(1, 1 << 19, 2053)]\n\
                  keep += [bytearray(n) for n in range(1, 4096)]\n\
                  print('ready', flush=True)\n\
                  time.sleep(300)\n";
    let mut cmd = Command::new(EBBTIDE);
    cmd.args(["run", "--", "/usr/bin/python3", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env_remove("XDG_RUNTIME_DIR");
    clean_env(&mut cmd);
    let mut child = cmd.spawn().expect("spawn ebbtide run");
    let stdin = child.stdin.take();
    let out = child.stdout.take().unwrap();
    let g = Guard {
        child,
        stdin,
        dir: None,
    };
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    assert_eq!(
        line, "ready\n",
        "the program under ebbtide run said {line:?}"
    );
    let t0 = Instant::now();
    loop {
        let o = Command::new(EBBTIDE)
            .args(["stat", &g.pid().to_string(), "--json"])
            .output()
            .unwrap();
        if o.status.success() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the control socket of {} does not answer: {}",
            g.pid(),
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(g)
}

/// The fleet's budget: a malloc process costs at most 300 series by default, counted on a real
/// scrape of a real preloaded program that uses every size class; `--per-zone` still gives
/// every zone's own series, and the sums add up to them.
#[test]
fn a_malloc_process_costs_at_most_300_series() {
    let _turn = crate::serial::turn(module_path!());
    let Some(p) = malloc_process("a_malloc_process_costs_at_most_300_series") else {
        return;
    };
    let pid = p.pid();
    let port = free_port();
    let e = exporter(port, &[]);
    let page = get(port, "/metrics").body;
    ebbtide::stats::check_exposition(&page).unwrap();
    let bounded = series_of(&page, pid);
    assert!(
        bounded.len() <= 300,
        "{} series for one malloc process:\n{}",
        bounded.len(),
        bounded.join("\n")
    );
    assert!(
        bounded.iter().all(|l| !l.starts_with("ebbtide_zone_")),
        "no zone's own series by default"
    );
    drop(e);

    let port = free_port();
    let _e = exporter(port, &["--per-zone"]);
    let full = get(port, "/metrics").body;
    ebbtide::stats::check_exposition(&full).unwrap();
    let detailed = series_of(&full, pid);
    let zones = full
        .lines()
        .filter(|l| {
            l.starts_with("ebbtide_zone_size_bytes{") && l.contains(&format!("pid=\"{pid}\""))
        })
        .count();
    // The program touched every size class: the bound is not met by having few zones.
    assert!(zones >= 40, "{zones} zones");
    assert!(
        detailed.len() > 10 * bounded.len() / 2,
        "{} vs {}",
        detailed.len(),
        bounded.len()
    );
    let in_ranges: usize = full
        .lines()
        .filter(|l| {
            l.starts_with("ebbtide_zones_in_range{") && l.contains(&format!("pid=\"{pid}\""))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(in_ranges, zones, "every zone is in one size range");
    println!(
        "one malloc process: {} series by default, {} with --per-zone ({zones} zones)",
        bounded.len(),
        detailed.len()
    );
}
