// A test binary of its own, outside tests/all/: it re-runs itself as a child that closes every descriptor, runtime threads and sources included.
//! A program closes every descriptor above 2 it did not open (`close_range(3, ~0U, 0)`, as
//! daemons and `subprocess` children do): the runtime goes on, out of the program's way, and
//! gets everything back — the pressure sources within about two seconds, the control socket at
//! the same path, the injector — without a line on stderr and without touching the program's
//! own descriptors.
//!
//! The process that closes its descriptors is this test binary run again as a child
//! (`CLOSED_DESCRIPTORS_CHILD=1`), so the test harness keeps its own.

use ebbtide::pressure::libfd;
use ebbtide::{control, reclaimer, Level};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn ping(path: &Path) -> String {
    let Ok(mut s) = UnixStream::connect(path) else {
        return "connect failed".into();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"ping\n").unwrap();
    let mut out = vec![0u8; 64];
    let n = s.read(&mut out).unwrap_or(0);
    String::from_utf8_lossy(&out[..n]).trim().to_string()
}

fn active_sources() -> usize {
    reclaimer::pressure_state()
        .statuses
        .iter()
        .filter(|s| s.active)
        .count()
}

/// Waits until `f` holds, up to `limit`; returns how long it took.
fn wait_for(limit: Duration, f: impl Fn() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn child() {
    let path = control::start().unwrap();
    ebbtide::start_runtime();
    // A zone starts the reclaim thread; its watcher opens the sources.
    let _zone = ebbtide::Zone::new(ebbtide::ZoneOptions::new("closed-descriptors", 64)).unwrap();
    wait_for(Duration::from_secs(10), || active_sources() > 0).expect("sources opened");
    let before = active_sources();
    let opens = reclaimer::pressure_state().source_opens;
    println!("\nBASE={}", libfd::high_base());
    println!("BEFORE_FDS={:?}", libfd::registered());
    // A descriptor of the program's own, below the library's: it must survive everything.
    let mut p = [0; 2];
    // SAFETY: `p` is valid for two ints.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);

    // SAFETY: closing every descriptor above 2, as a daemon does; the runtime must cope.
    let r = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    assert_eq!(r, 0, "close_range: {}", std::io::Error::last_os_error());
    // The program opens its own files again, at the lowest numbers.
    // SAFETY: `p` is valid for two ints.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    println!("PROGRAM_PIPE={} {}", p[0], p[1]);

    // The watcher finds the loss within a second and opens the sources a second later.
    let back = wait_for(Duration::from_secs(10), || {
        reclaimer::pressure_state().source_opens > opens && active_sources() == before
    });
    println!("SOURCES_BACK={:?}", back.map(|d| d.as_millis()));
    let ctl = wait_for(Duration::from_secs(10), || ping(&path).starts_with("ok"));
    println!("CONTROL_BACK={:?}", ctl.map(|d| d.as_millis()));
    println!("PING={}", ping(&path));
    reclaimer::notify(Level::Moderate);
    let held = wait_for(Duration::from_secs(5), || {
        reclaimer::level() >= Level::Moderate
    });
    println!("NOTIFY_SEEN={}", held.is_some());
    println!("AFTER_FDS={:?}", libfd::registered());
    // The program's pipe is intact: a byte written comes out.
    // SAFETY: the program's own pipe ends; one-byte buffers.
    let ok = unsafe {
        libc::write(p[1], b"x".as_ptr().cast(), 1) == 1 && {
            let mut b = 0u8;
            libc::read(p[0], (&mut b as *mut u8).cast(), 1) == 1 && b == b'x'
        }
    };
    println!("PROGRAM_PIPE_OK={ok}");
    std::io::stdout().flush().unwrap();
}

#[test]
fn child_entry() {
    if std::env::var_os("CLOSED_DESCRIPTORS_CHILD").is_some() {
        child();
    }
}

fn value<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.split_once(&format!("{key}=")).map(|(_, v)| v))
        .unwrap_or_else(|| panic!("no {key} in the child's output:\n{out}"))
}

#[test]
fn the_runtime_survives_and_recovers_when_the_program_closes_its_descriptors() {
    let xdg = std::env::temp_dir().join(format!("ebbtide-closedfds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&xdg);
    std::fs::create_dir_all(&xdg).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("CLOSED_DESCRIPTORS_CHILD", "1")
        .env("XDG_RUNTIME_DIR", &xdg)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&xdg);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "child failed: {text}\n{err}");
    assert!(
        !err.contains("ebbtide"),
        "the runtime wrote to the program's stderr: {err}"
    );
    let base: i32 = value(&text, "BASE").parse().unwrap();
    let parse = |k: &str| -> Vec<i32> {
        value(&text, k)
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse().unwrap())
            .collect()
    };
    let (before, after) = (parse("BEFORE_FDS"), parse("AFTER_FDS"));
    assert!(
        !before.is_empty() && before.iter().all(|&fd| fd >= base),
        "{before:?}"
    );
    assert!(
        !after.is_empty() && after.iter().all(|&fd| fd >= base),
        "{after:?}"
    );
    // The program's next descriptors are the lowest free ones, never the library's.
    assert_eq!(value(&text, "PROGRAM_PIPE"), "3 4", "{text}");
    assert_ne!(
        value(&text, "SOURCES_BACK"),
        "None",
        "sources not back: {text}"
    );
    assert_ne!(
        value(&text, "CONTROL_BACK"),
        "None",
        "control socket not back: {text}"
    );
    assert!(value(&text, "PING").starts_with("ok"), "{text}");
    assert_eq!(value(&text, "NOTIFY_SEEN"), "true", "{text}");
    assert_eq!(value(&text, "PROGRAM_PIPE_OK"), "true", "{text}");
}
