//! Prometheus's own tools for the tests that check ebbtide's output against them (shared by
//! `crates/ebbtide/tests/prometheus_promtool.rs` and `crates/ebbtide-cli/tests/exporter.rs`,
//! included with `#[path]`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A Prometheus tool (`promtool`, `prometheus`) from PATH. Missing, it fails the test under CI
/// (`CI` set) and as root (who can install it; `.ci/run` does), and is `None` (the test skips
/// with a message) otherwise.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            std::env::var_os("CI").is_none() && !root,
            "{name} is not installed: install the Debian package 'prometheus' (.ci/run does)"
        );
        eprintln!("SKIPPED: {name} is not installed (apt-get install prometheus)");
    }
    found
}

/// `promtool check metrics` of `text`: whether it passed, and what it said.
pub fn check_metrics(promtool: &Path, text: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}
