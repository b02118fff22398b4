//! Prometheus's own tools for the tests that check ebbtide's output against them (shared by
//! `crates/ebbtide/tests/all/prometheus_promtool.rs` and `crates/ebbtide-cli/tests/all/exporter.rs`,
//! included with `#[path]`).

#[path = "skip.rs"]
mod skip;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A Prometheus tool (`promtool`, `prometheus`) from PATH. Missing, it fails the test under CI
/// (`CI` set: `.ci/run` installs it) and is `None` otherwise: the test skips ([`skip::skip`]).
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        skip::skip(
            &skip::current_test(),
            &format!("{name} is not installed (apt-get install prometheus)"),
        );
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
