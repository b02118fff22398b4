// A test binary of its own, outside tests/all/: one control server per process, started through the process-wide tunable and left running.
//! The control socket in this process: start through the tunable, every request, errors, and
//! hostile clients (silent, oversized, slow readers, too many) that must not stall others.
//!
//! One server per process, so the tests take a lock and leave the server running.

use ebbtide::control::{self, protocol};
use ebbtide::options;
use ebbtide::{Zone, ZoneOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

struct Fixture {
    _zone: Zone,
}

fn setup() -> (MutexGuard<'static, ()>, PathBuf) {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    static FIX: OnceLock<Fixture> = OnceLock::new();
    FIX.get_or_init(|| {
        // SAFETY: set before any thread of this test binary reads the environment variable;
        // the tests in this file are serialised by SERIAL and this runs once.
        unsafe { std::env::remove_var("XDG_RUNTIME_DIR") };
        let z = Zone::new(ZoneOptions::new("ctl-test-zone", 96)).unwrap();
        let p = z.alloc().unwrap();
        // SAFETY: allocated above, freed once.
        unsafe { z.free(p) }.unwrap();
        Fixture { _zone: z }
    });
    options::set("control_socket", "true").unwrap();
    // A previous test may have stopped the server with the tunable left on.
    let path = control::start().unwrap();
    assert_eq!(control::socket_path().as_ref(), Some(&path));
    (g, path)
}

fn connect(path: &PathBuf) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Read one framed reply (the connection's replies may arrive together: keep what follows
/// in `buf` for the next call).
fn read_reply_buffered(s: &mut UnixStream, buf: &mut Vec<u8>) -> protocol::Reply {
    let mut chunk = [0u8; 65536];
    loop {
        match protocol::decode_reply(buf) {
            Ok((r, used)) => {
                buf.drain(..used);
                return r;
            }
            Err(protocol::ReplyError::Incomplete) => {}
            Err(e) => panic!("{e}"),
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before a full reply: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn read_reply(s: &mut UnixStream) -> protocol::Reply {
    read_reply_buffered(s, &mut Vec::new())
}

fn ask(path: &PathBuf, line: &str) -> protocol::Reply {
    let mut s = connect(path);
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    read_reply(&mut s)
}

fn ok(path: &PathBuf, line: &str) -> String {
    match ask(path, line) {
        protocol::Reply::Ok(p) => p,
        protocol::Reply::Err(e) => panic!("{line}: err {e}"),
    }
}

fn err(path: &PathBuf, line: &str) -> String {
    match ask(path, line) {
        protocol::Reply::Err(e) => e,
        protocol::Reply::Ok(p) => panic!("{line}: expected an error, got ok {p}"),
    }
}

#[test]
fn socket_is_private() {
    let (_g, path) = setup();
    let uid = control::path::euid();
    assert_eq!(
        path,
        PathBuf::from(format!("/tmp/ebbtide-{uid}/{}.sock", std::process::id()))
    );
    let md = std::fs::symlink_metadata(&path).unwrap();
    assert_eq!(md.permissions().mode() & 0o777, 0o600);
    assert_eq!(md.uid(), uid);
    let dir = std::fs::symlink_metadata(path.parent().unwrap()).unwrap();
    assert_eq!(dir.permissions().mode() & 0o777, 0o700);
    assert!(dir.is_dir());
}

#[test]
fn every_request() {
    let (_g, path) = setup();
    assert_eq!(ok(&path, "ping"), "pong\n");
    assert_eq!(
        ok(&path, "version"),
        format!(
            "ebbtide {} protocol 1 pid {}\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id()
        )
    );
    assert!(ok(&path, "help").contains("pressure normal|low|moderate|critical"));
    let table = ok(&path, "stats");
    assert!(
        table.contains("ITEM") && table.contains("ctl-test-zone:"),
        "{table}"
    );
    assert_eq!(ok(&path, "stats table"), table.replace("\r", ""));
    let prom = ok(&path, "stats prometheus");
    ebbtide::stats::check_exposition(&prom).unwrap();
    assert!(prom.contains("zone=\"ctl-test-zone\""));
    let json: serde_json::Value = serde_json::from_str(&ok(&path, "stats json")).unwrap();
    assert_eq!(json["version"], 1);
    assert!(json["zones"]
        .as_array()
        .unwrap()
        .iter()
        .any(|z| z["name"] == "ctl-test-zone" && z["size"] == 96));

    assert_eq!(
        ok(&path, "get squeeze_ms"),
        format!("{}\n", options::get("squeeze_ms").unwrap())
    );
    let all = ok(&path, "get");
    assert_eq!(all.lines().count(), options::TABLE.len());
    assert!(all.contains("control_socket = true"));
    assert_eq!(
        ok(&path, "set squeeze_ms=30,trim_interval_ms=3s"),
        "squeeze_ms=30\ntrim_interval_ms=3000\n"
    );
    assert_eq!(options::get("squeeze_ms").unwrap(), "30");
    // All or none, every error named.
    let e = err(&path, "set squeeze_ms=40,squeez_ms=5,max_buffer_pages=x");
    assert!(
        e.contains("unknown tunable 'squeez_ms'; did you mean 'squeeze_ms'?"),
        "{e}"
    );
    assert!(e.contains("max_buffer_pages: cannot parse 'x'"), "{e}");
    assert!(e.starts_with("control socket entry"), "{e}");
    assert_eq!(options::get("squeeze_ms").unwrap(), "30");
    assert_eq!(err(&path, "get nope"), "unknown tunable 'nope'");
    let e = err(&path, "set squeeze_ms=99999999");
    assert!(e.contains("squeeze_ms"), "{e}");

    for level in ["low", "moderate", "critical", "normal"] {
        let r = ok(&path, &format!("pressure {level}"));
        assert!(
            r.starts_with(&format!("injected {level}: released ")),
            "{r}"
        );
    }
    assert!(
        ebbtide::reclaim::buckets_enabled(),
        "normal re-enables buckets"
    );
    let ev = ok(&path, "events");
    assert!(
        ev.contains(" pressure injected critical: released "),
        "{ev}"
    );
    assert!(
        ev.contains(" set squeeze_ms=30,trim_interval_ms=3000"),
        "{ev}"
    );
    assert_eq!(
        control::events::last_injected(),
        Some(ebbtide::pressure::Level::Normal)
    );
}

#[test]
fn malformed_requests_get_errors_and_the_connection_goes_on() {
    let (_g, path) = setup();
    let mut s = connect(&path);
    // Pipelined: every line gets its reply, in order, on one connection.
    s.write_all(b"bogus\n\nstats xml\npressure medium\nget a b\n\xff\xfe\nping\n")
        .unwrap();
    let want = [
        "unknown request 'bogus'",
        "empty request",
        "unknown stats format 'xml'",
        "unknown pressure level 'medium'",
        "'get' takes no argument 'b'",
        "request is not valid UTF-8",
    ];
    let mut buf = Vec::new();
    for w in want {
        match read_reply_buffered(&mut s, &mut buf) {
            protocol::Reply::Err(e) => assert!(e.starts_with(w), "{e} vs {w}"),
            r => panic!("{r:?}"),
        }
    }
    assert_eq!(
        read_reply_buffered(&mut s, &mut buf),
        protocol::Reply::Ok("pong\n".into())
    );
    assert!(buf.is_empty());
    // A last request without newline, then end of file: still answered.
    s.write_all(b"ping").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_reply(&mut s), protocol::Reply::Ok("pong\n".into()));
}

/// Time `n` pings on fresh connections; the slowest one.
fn slowest_ping(path: &PathBuf, n: usize) -> Duration {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            assert_eq!(ok(path, "ping"), "pong\n");
            t.elapsed()
        })
        .max()
        .unwrap()
}

#[test]
fn hostile_clients_do_not_stall_others() {
    let (_g, path) = setup();
    // 1. Silent: connects, sends nothing.
    let mut silent = connect(&path);
    // 2. Half a line, never finished.
    let mut partial = connect(&path);
    partial.write_all(b"stats js").unwrap();
    // 3. 1 MiB without a newline, from a thread (the server stops reading after 4 KiB).
    let oversize_path = path.clone();
    let oversize = std::thread::spawn(move || {
        let mut s = connect(&oversize_path);
        let junk = vec![b'x'; 1 << 20];
        let _ = s.write_all(&junk); // may fail with EPIPE/ECONNRESET once the server closes
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    // 4. Slow reader: asks for many replies and reads none of them.
    let mut slow = connect(&path);
    let many = "stats json\n".repeat(200);
    slow.set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let _ = slow.write_all(many.as_bytes());

    let t = Instant::now();
    let worst = slowest_ping(&path, 50);
    assert!(worst < Duration::from_millis(500), "a ping took {worst:?}");
    // The silent client is told it timed out (1 s), the partial one too.
    let mut buf = String::new();
    silent.read_to_string(&mut buf).unwrap();
    assert_eq!(
        buf,
        "err timeout: no request within 1000 ms; closing the connection\n"
    );
    buf.clear();
    partial.read_to_string(&mut buf).unwrap();
    assert!(
        buf.starts_with("err timeout: request line not finished within 1000 ms (8 bytes"),
        "{buf}"
    );
    assert!(t.elapsed() < Duration::from_secs(3));
    let o = oversize.join().unwrap();
    // The reply may be lost to a reset if the kernel discards it with the unread junk.
    assert!(
        o.is_empty() || o.starts_with("err request too long: 4096 bytes"),
        "{o}"
    );
    // The slow reader is cut off after the write timeout; meanwhile everybody else is served.
    let t = Instant::now();
    while t.elapsed() < control::WRITE_TIMEOUT + Duration::from_secs(2) {
        assert!(slowest_ping(&path, 5) < Duration::from_millis(500));
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut sink = Vec::new();
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Reads what was queued, then end of file (or a reset): the server closed it.
    let t = Instant::now();
    let r = slow.read_to_end(&mut sink);
    if let Err(e) = r {
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    }
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "the server had closed it already"
    );
    // Only what fitted in the socket buffers when the server gave up, not 200 replies.
    let replies = sink.windows(3).filter(|w| w == b"ok ").count();
    assert!(replies < 200, "{replies} replies");
    drop(slow);
    assert_eq!(ok(&path, "ping"), "pong\n");
}

#[test]
fn connection_limit() {
    let (_g, path) = setup();
    // All connected at once (well inside the 1 s read timeout); the server accepts them in
    // order, so the last one is the one over the limit.
    let held: Vec<UnixStream> = (0..control::MAX_CONNECTIONS)
        .map(|_| connect(&path))
        .collect();
    let mut extra = connect(&path);
    let mut buf = String::new();
    extra.read_to_string(&mut buf).unwrap();
    assert!(
        buf.starts_with("err busy: 32 clients are connected already"),
        "{buf}"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(ok(&path, "ping"), "pong\n");
}

#[test]
fn turning_off_through_the_socket_and_back_on() {
    let (_g, path) = setup();
    assert_eq!(
        ok(&path, "set control_socket=false"),
        "control_socket=false\n"
    );
    let t = Instant::now();
    while path.exists() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!path.exists(), "socket removed");
    assert!(!control::is_running());
    assert!(UnixStream::connect(&path).is_err());
    // On again through the API, then stop() and start() directly.
    options::set("control_socket", "on").unwrap();
    assert_eq!(control::socket_path().as_ref(), Some(&path));
    assert_eq!(ok(&path, "ping"), "pong\n");
    control::stop();
    assert!(!path.exists());
    assert_eq!(control::start().unwrap(), path);
    assert_eq!(control::start().unwrap(), path, "idempotent");
    assert_eq!(ok(&path, "ping"), "pong\n");
}

#[test]
fn toggling_from_both_sides_does_not_deadlock() {
    let (_g, path) = setup();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let p = path.clone();
    std::thread::spawn(move || {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        // Requests that turn the socket off and on from the control thread itself.
        let client = std::thread::spawn(move || {
            let mut i = 0u32;
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                let v = if i.is_multiple_of(2) { "false" } else { "true" };
                if let Ok(mut s) = UnixStream::connect(&p) {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let _ = s.write_all(format!("set control_socket={v}\n").as_bytes());
                    let mut sink = Vec::new();
                    let _ = s.read_to_end(&mut sink);
                }
                i += 1;
            }
        });
        // Meanwhile the API stops and starts it, and flips the tunable.
        for i in 0..100 {
            match i % 3 {
                0 => control::stop(),
                1 => {
                    let _ = control::start();
                }
                _ => {
                    let _ = options::set("control_socket", if i % 2 == 0 { "on" } else { "off" });
                }
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        client.join().unwrap();
        done_tx.send(()).unwrap();
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("start/stop from the API and from requests deadlocked");
    // Back to a clean state: on, one socket, answering.
    options::set("control_socket", "true").unwrap();
    assert_eq!(control::start().unwrap(), path);
    assert_eq!(ok(&path, "ping"), "pong\n");
}
