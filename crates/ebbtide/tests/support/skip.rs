//! The one way a test skips: when what it needs is missing on this machine (a program, a
//! Debian package, root, a kernel feature). Included with `#[path]` by every test crate that
//! can skip, so the rule is the same everywhere:
//!
//! * under CI (`CI` set to anything but `false` or `0`; `.ci/run` sets it and installs
//!   everything) a skip is a failure: the test panics, naming what is missing;
//! * otherwise the test returns early and the skip is recorded: a line on standard error, and
//!   one line appended to the file `$EBBTIDE_TEST_SKIPS` names, if set (`scripts/test.sh` sets
//!   it and counts the lines, so its summary shows skipped tests as skipped, never as passed).

#![allow(dead_code)]

use std::io::Write;

/// Whether this run is CI's, where nothing may be skipped.
pub fn ci() -> bool {
    match std::env::var("CI") {
        Ok(v) => !matches!(v.trim(), "" | "0" | "false"),
        Err(_) => false,
    }
}

/// Skip `test` because of `why` (what is missing and how to get it); panics under CI.
/// The caller returns right after.
pub fn skip(test: &str, why: &str) {
    assert!(
        !ci(),
        "{test}: {why} (under CI nothing is skipped: .ci/run installs what the tests need)"
    );
    eprintln!("SKIPPED {test}: {why}");
    if let Some(path) = std::env::var_os("EBBTIDE_TEST_SKIPS") {
        // One write of one line with O_APPEND: lines from tests in parallel do not interleave.
        let line = format!("{test}: {}\n", why.replace('\n', " "));
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!(
                "{test}: skipped ({why}), and the skip cannot be recorded in {}: {e}",
                std::path::Path::new(&path).display()
            );
        }
    }
}

/// The running test's name (the test harness names each test's thread after it).
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string()
}

/// Whether the tests run as root; otherwise skips `test` (a failure under CI).
pub fn need_root(test: &str, why: &str) -> bool {
    if euid() == Some(0) {
        return true;
    }
    skip(test, &format!("needs root: {why}"));
    false
}

/// The effective uid, from `/proc/self/status` (no dependency on `libc` for the crates that
/// include this file).
pub fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}
