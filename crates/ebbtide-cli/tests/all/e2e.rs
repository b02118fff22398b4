//! End to end: the real `ebbtide` binary against `ebbtide-demo`, a process using the library
//! with its control socket on. Covers ls, stat (table, JSON validated against the documented
//! fields, Prometheus), get, set, pressure, the error cases, another uid being refused, and
//! `top` in a real terminal (tmux).

#[path = "../../../ebbtide/tests/support/skip.rs"]
mod skip;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

const EBBTIDE: &str = env!("CARGO_BIN_EXE_ebbtide");
const DEMO: &str = env!("CARGO_BIN_EXE_ebbtide-demo");

struct Demo {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
    sock: PathBuf,
}

impl Demo {
    /// Start the demo; `xdg`: its `XDG_RUNTIME_DIR` (None: unset, socket in /tmp).
    fn start(xdg: Option<&Path>) -> Demo {
        let mut cmd = Command::new(DEMO);
        cmd.args(["--seconds", "120"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        clean_env(&mut cmd);
        match xdg {
            Some(d) => cmd.env("XDG_RUNTIME_DIR", d),
            None => cmd.env_remove("XDG_RUNTIME_DIR"),
        };
        let mut child = cmd.spawn().expect("spawn ebbtide-demo");
        let stdin = child.stdin.take().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let mut w = line.split_whitespace();
        assert_eq!(w.next(), Some("ready"), "demo said {line:?}");
        let pid: u32 = w.next().unwrap().parse().unwrap();
        assert_eq!(pid, child.id());
        let sock = PathBuf::from(w.next().unwrap());
        Demo {
            child,
            stdin: Some(stdin),
            pid,
            sock,
        }
    }
}

impl Demo {
    /// SIGKILL: the process gets no chance to remove its socket.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stdin = None;
    }
}

impl Drop for Demo {
    /// Closing stdin asks the demo to exit normally (its socket is removed at exit).
    fn drop(&mut self) {
        self.stdin = None;
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// No EBBTIDE_* variable of the test's environment leaks into children.
fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("EBBTIDE_") {
            cmd.env_remove(k);
        }
    }
}

fn ebbtide(args: &[&str]) -> Output {
    let mut cmd = Command::new(EBBTIDE);
    cmd.args(args);
    clean_env(&mut cmd);
    cmd.output().expect("run ebbtide")
}

fn stdout_ok(args: &[&str]) -> String {
    let o = ebbtide(args);
    assert!(
        o.status.success(),
        "ebbtide {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn stderr_fail(args: &[&str]) -> String {
    let o = ebbtide(args);
    assert!(
        !o.status.success(),
        "ebbtide {args:?} should fail; printed {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(o.status.code(), Some(1));
    String::from_utf8(o.stderr).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ebbtide-e2e-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn abi_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ABI/testing")
}

/// The JSON keys a docs/ABI stats file documents under `prefix` (`zones[]`, `global`, ...).
fn documented_keys(file: &str, prefix: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(abi_dir().join(file)).unwrap();
    let entries = ebbtide::abi::parse(&text).unwrap();
    let mut keys = BTreeSet::new();
    for e in entries {
        for l in e.description.lines() {
            if let Some(rest) = l.trim().strip_prefix("JSON:") {
                let path = rest.trim();
                if let Some(key) = path.strip_prefix(prefix).and_then(|k| k.strip_prefix('.')) {
                    keys.insert(key.to_string());
                }
            }
        }
    }
    assert!(!keys.is_empty(), "no JSON keys documented in {file}");
    keys
}

fn keys_of(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

fn zone<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["zones"]
        .as_array()
        .unwrap()
        .iter()
        .find(|z| z["name"] == name)
        .unwrap_or_else(|| panic!("zone {name} missing"))
}

#[test]
fn ls_stat_get_set_pressure() {
    let _turn = crate::serial::turn(module_path!());
    let demo = Demo::start(None);
    let pid = demo.pid.to_string();
    let p = pid.as_str();

    let ls = stdout_ok(&["ls"]);
    let line = ls
        .lines()
        .find(|l| l.split_whitespace().next() == Some(p))
        .unwrap_or_else(|| panic!("pid {p} not listed:\n{ls}"));
    assert!(line.contains("ebbtide-demo"), "{line}");
    assert!(line.contains("ebbtide 0.1.0 protocol 1"), "{line}");
    assert!(line.ends_with(&demo.sock.display().to_string()), "{line}");
    assert!(ls.starts_with("  PID") || ls.contains("PID  USER"), "{ls}");

    let table = stdout_ok(&["stat", p]);
    let head = table
        .lines()
        .find(|l| l.starts_with("ITEM"))
        .expect("table header");
    for col in ["SIZE", "LIMIT", "USED", "FREE", "REQ", "FAIL", "SLEEP"] {
        assert!(head.contains(col), "{head}");
    }
    for z in ["demo-small:", "demo-buf:", "demo-page:"] {
        assert!(table.lines().any(|l| l.starts_with(z)), "{z} in\n{table}");
    }

    // JSON: exactly the documented fields.
    let json: Value = serde_json::from_str(&stdout_ok(&["stat", p, "--json"])).unwrap();
    assert_eq!(json["version"], 1);
    assert_eq!(
        keys_of(&json),
        ["global", "pools", "sources", "version", "zones"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    assert_eq!(
        keys_of(&json["global"]),
        documented_keys("stats-global", "global")
    );
    let zone_keys = documented_keys("stats-zone", "zones[]");
    for z in json["zones"].as_array().unwrap() {
        assert_eq!(keys_of(z), zone_keys);
    }
    for s in json["sources"].as_array().unwrap() {
        assert_eq!(keys_of(s), documented_keys("stats-global", "sources[]"));
        // An active source names what it reads (its file or descriptor); an inactive one
        // reads nothing and says why.
        let (active, watches, reason) = (
            s["active"].as_bool().unwrap(),
            s["watches"].as_str().unwrap(),
            s["reason"].as_str().unwrap(),
        );
        if active && s["name"] != "explicit" {
            assert!(!watches.is_empty() && reason.is_empty(), "{s}");
        } else if !active {
            assert!(watches.is_empty() && !reason.is_empty(), "{s}");
        }
    }
    if let Some(psi) = json["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "psi" && s["active"] == true)
    {
        let w = psi["watches"].as_str().unwrap();
        assert!(
            w.contains("/memory.pressure") || w.contains("/proc/pressure/memory"),
            "{psi}"
        );
    }
    let small = zone(&json, "demo-small");
    assert_eq!(small["size"], 64);
    assert!(small["used"].as_u64().unwrap() >= 2500, "{small}");
    assert!(small["requests"].as_u64().unwrap() >= 5000, "{small}");

    let prom = stdout_ok(&["stat", p, "--prometheus"]);
    ebbtide::stats::check_exposition(&prom).unwrap();
    assert!(prom.contains("zone=\"demo-page\""), "{prom}");

    // Tunables.
    assert_eq!(stdout_ok(&["get", p, "squeeze_ms"]), "10\n");
    let all = stdout_ok(&["get", p]);
    assert_eq!(all.lines().count(), ebbtide::options::TABLE.len());
    assert!(all.contains("control_socket = true"), "{all}");
    assert_eq!(
        stdout_ok(&["set", p, "squeeze_ms=25", "max_buffer_pages=7"]),
        "squeeze_ms=25\nmax_buffer_pages=7\n"
    );
    assert_eq!(stdout_ok(&["get", p, "squeeze_ms"]), "25\n");
    let e = stderr_fail(&["set", p, "squeeze_ms=30,squeez_ms=1"]);
    assert_eq!(
        e,
        "ebbtide: error: control socket entry 2 'squeez_ms=1': unknown tunable 'squeez_ms'; \
         did you mean 'squeeze_ms'?\n"
    );
    assert_eq!(stdout_ok(&["get", p, "squeeze_ms"]), "25\n", "all or none");
    assert_eq!(
        stderr_fail(&["get", p, "nope"]),
        "ebbtide: error: unknown tunable 'nope'\n"
    );
    let e = stderr_fail(&["set", p, "squeeze_ms"]);
    assert!(e.contains("'squeeze_ms' is not NAME=VALUE"), "{e}");

    // Pressure.
    let before = zone(&json, "demo-small")["reclaim_drain_cpu"]
        .as_u64()
        .unwrap();
    let r = stdout_ok(&["pressure", p, "critical"]);
    assert!(r.starts_with("injected critical: released "), "{r}");
    let json: Value = serde_json::from_str(&stdout_ok(&["stat", p, "--json"])).unwrap();
    let small = zone(&json, "demo-small");
    assert!(
        small["reclaim_drain_cpu"].as_u64().unwrap() > before,
        "{small}"
    );
    assert_eq!(small["buckets_enabled"], false);
    assert!(stdout_ok(&["pressure", p, "normal"]).starts_with("injected normal"));
    let json: Value = serde_json::from_str(&stdout_ok(&["stat", p, "--json"])).unwrap();
    assert_eq!(zone(&json, "demo-small")["buckets_enabled"], true);
    let r = stdout_ok(&["pressure", p, "moderate"]);
    assert!(r.starts_with("injected moderate: released "), "{r}");
    let r = stdout_ok(&["pressure", p, "low"]);
    assert!(r.starts_with("injected low: released "), "{r}");
    let e = stderr_fail(&["pressure", p, "medium"]);
    assert!(e.contains("invalid pressure level \"medium\""), "{e}");

    // A silent client holding a connection does not delay the command.
    let _silent = UnixStream::connect(&demo.sock).unwrap();
    let t = Instant::now();
    stdout_ok(&["stat", p]);
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn clear_errors() {
    let _turn = crate::serial::turn(module_path!());
    // No such process: a child that has been reaped.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let g = gone_pid.to_string();
    assert_eq!(
        stderr_fail(&["stat", &g]),
        format!("ebbtide: error: no such process: {g}\n")
    );
    // A process without a socket.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let s = sleeper.id().to_string();
    let e = stderr_fail(&["get", &s]);
    assert!(
        e.starts_with(&format!(
            "ebbtide: error: process {s} (sleep) has no control socket (looked for "
        )),
        "{e}"
    );
    assert!(e.contains("EBBTIDE_CONTROL_SOCKET=1"), "{e}");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    // Bad arguments are clap's job.
    let o = ebbtide(&["stat", "notapid"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid value 'notapid'"));
}

#[test]
fn stale_sockets_are_not_listed() {
    let _turn = crate::serial::turn(module_path!());
    let xdg = scratch("stale");
    let demo = Demo::start(Some(&xdg));
    let pid = demo.pid.to_string();
    assert!(demo.sock.starts_with(xdg.join("ebbtide")));
    let sock = demo.sock.clone();
    let run_ls = |all: bool| {
        let mut cmd = Command::new(EBBTIDE);
        cmd.arg("ls").env("XDG_RUNTIME_DIR", &xdg);
        if all {
            cmd.arg("--all");
        }
        String::from_utf8(cmd.output().unwrap().stdout).unwrap()
    };
    assert!(run_ls(false).contains(&sock.display().to_string()));
    // SIGKILL: no chance to clean up.
    demo.kill();
    assert!(sock.exists());
    assert!(!run_ls(false).contains(&sock.display().to_string()));
    let all = run_ls(true);
    let line = all
        .lines()
        .find(|l| l.starts_with(&pid) || l.trim_start().starts_with(&pid));
    assert!(
        line.is_some_and(|l| l.contains("stale (process gone)")),
        "{all}"
    );
    // The next demo in that directory removes it.
    let demo2 = Demo::start(Some(&xdg));
    assert!(!sock.exists() || demo2.pid.to_string() == pid);
    let sock2 = demo2.sock.clone();
    drop(demo2);
    assert!(!sock2.exists(), "a normal exit removes the socket");
    std::fs::remove_dir_all(&xdg).unwrap();
}

/// A copy of the binary every user may run (the build tree may not be reachable).
fn public_binary() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = scratch("bin");
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let b = d.join("ebbtide");
    std::fs::copy(EBBTIDE, &b).unwrap();
    std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o755)).unwrap();
    b
}

fn as_nobody(bin: &Path, args: &[&str]) -> Output {
    // The copy was just written: a child another test forks at that moment holds the write
    // descriptor until it execs, and exec of the copy fails with ETXTBSY (setpriv exits 126).
    for _ in 0..50 {
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(bin)
            .args(args)
            .output()
            .expect("setpriv");
        if o.status.code() != Some(126) || !String::from_utf8_lossy(&o.stderr).contains("busy") {
            return o;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{} stayed busy (ETXTBSY) for 5 s", bin.display());
}

#[test]
fn another_uid_is_refused() {
    let _turn = crate::serial::turn(module_path!());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip::skip(
            "another_uid_is_refused",
            "needs root to run a client as uid 65534",
        );
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        skip::skip(
            "another_uid_is_refused",
            "setpriv is not installed (apt-get install util-linux)",
        );
        return;
    }
    let bin = public_binary();
    // 1. The default layout: /tmp/ebbtide-0 is 0700, the socket 0600.
    let demo = Demo::start(None);
    let p = demo.pid.to_string();
    let o = as_nobody(&bin, &["stat", &p]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.starts_with(&format!(
            "ebbtide: error: permission denied for process {p}: cannot look into /tmp/ebbtide-0 \
             (owned by uid 0, mode 0700; you are uid 65534)"
        )),
        "{e}"
    );
    let o = as_nobody(&bin, &["get", &p, "--socket", demo.sock.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("permission denied"), "{e}");
    drop(demo);

    // 2. Even with the modes opened up, the server's SO_PEERCRED check refuses.
    use std::os::unix::fs::PermissionsExt;
    let xdg = scratch("peer");
    std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o755)).unwrap();
    let demo = Demo::start(Some(&xdg));
    let p = demo.pid.to_string();
    std::fs::set_permissions(xdg.join("ebbtide"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&demo.sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = as_nobody(
        &bin,
        &[
            "get",
            &p,
            "squeeze_ms",
            "--socket",
            demo.sock.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.starts_with(&format!(
            "ebbtide: error: permission denied for process {p}: the process refused us: peer \
             uid 65534 (pid "
        )),
        "{e}"
    );
    assert!(
        e.contains("running as uid 0 (only uid 0 and root may)"),
        "{e}"
    );
    // Root is still served.
    assert_eq!(stdout_ok(&["get", &p, "squeeze_ms"]), "10\n");
    drop(demo);
    std::fs::remove_dir_all(&xdg).unwrap();
    std::fs::remove_dir_all(bin.parent().unwrap()).unwrap();
}

struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .env("TERM", "xterm-256color")
            .output()
            .expect("tmux")
    }

    fn capture(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    /// Wait until the pane shows `what`; return the screen.
    fn wait_for(&self, what: &str) -> String {
        let t = Instant::now();
        loop {
            let screen = self.capture();
            if screen.contains(what) {
                return screen;
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "'{what}' never appeared; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn have_tmux() -> bool {
    if Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return true;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let _ = Command::new("apt-get")
            .args(["install", "-y", "-qq", "tmux"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output();
    }
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn top_in_a_real_terminal() {
    let _turn = crate::serial::turn(module_path!());
    if !have_tmux() {
        skip::skip(
            "top_in_a_real_terminal",
            "tmux is not installed and could not be (apt-get install tmux)",
        );
        return;
    }
    let demo = Demo::start(None);
    let p = demo.pid.to_string();
    let tmux = Tmux {
        socket: format!("ebbtide-e2e-{}", std::process::id()),
    };
    let command = format!("{EBBTIDE} top {p} --interval-ms 300; sleep 30");
    let o = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "200",
        "-y",
        "40",
        &command,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let screen = tmux.wait_for("demo-page");
    assert!(
        screen.contains(&format!("ebbtide top - pid {p} (ebbtide-demo)")),
        "{screen}"
    );
    assert!(screen.contains("sort: USED desc"), "{screen}");
    assert!(screen.contains("pressure: normal"), "{screen}");
    for h in [
        "ITEM",
        "SIZE",
        "USED",
        "FREE",
        "REQ/s",
        "DWAIT",
        "KWAIT",
        "REMOTE",
        "lock waits: depot ",
        "demo-small",
        "demo-buf",
        "events",
    ] {
        assert!(screen.contains(h), "{h} missing:\n{screen}");
    }
    // Sorted by USED, largest first: demo-small (2500) above demo-buf (400) above demo-page.
    let row = |name: &str| screen.lines().position(|l| l.contains(name)).unwrap();
    assert!(row("demo-small") < row("demo-buf") && row("demo-buf") < row("demo-page"));

    // A key changes the sort column; another reverses it.
    tmux.cmd(&["send-keys", "-t", "top", "s"]);
    tmux.wait_for("sort: FREE desc");
    tmux.cmd(&["send-keys", "-t", "top", "r"]);
    let screen = tmux.wait_for("sort: FREE asc");
    let row = |name: &str| screen.lines().position(|l| l.contains(name)).unwrap();
    assert!(row("demo-page") < row("demo-small"), "{screen}");

    // Injected pressure shows in the header and the events pane.
    stdout_ok(&["pressure", &p, "moderate"]);
    let screen = tmux.wait_for("pressure injected moderate");
    assert!(screen.contains("(last injected: moderate)"), "{screen}");

    // q quits and gives the terminal back.
    tmux.cmd(&["send-keys", "-t", "top", "q"]);
    let t = Instant::now();
    while tmux.capture().contains("ebbtide top - pid") {
        assert!(t.elapsed() < Duration::from_secs(10), "top did not quit");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn hostile_clients_do_not_block_the_command() {
    let _turn = crate::serial::turn(module_path!());
    let demo = Demo::start(None);
    let p = demo.pid.to_string();
    let sock = demo.sock.clone();
    // 1 MiB without a newline from one client, a silent one, and one that never reads.
    let flood = std::thread::spawn(move || {
        if let Ok(mut s) = UnixStream::connect(&sock) {
            let _ = s.write_all(&vec![b'a'; 1 << 20]);
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
        }
    });
    let _silent = UnixStream::connect(&demo.sock).unwrap();
    let mut greedy = UnixStream::connect(&demo.sock).unwrap();
    let _ = greedy.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = greedy.write_all("stats json\n".repeat(300).as_bytes());
    for _ in 0..10 {
        let t = Instant::now();
        assert!(stdout_ok(&["get", &p, "squeeze_ms"]).ends_with('\n'));
        assert!(
            t.elapsed() < Duration::from_millis(900),
            "{:?}",
            t.elapsed()
        );
    }
    flood.join().unwrap();
}
