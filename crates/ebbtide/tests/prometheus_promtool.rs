//! The Prometheus output checked by Prometheus's own linter, `promtool check metrics` (Debian
//! package `prometheus`, installed by `.ci/run`): the sample snapshot (odd zone names, escaped
//! text, every field), a page of several processes with extra labels, and an empty snapshot.
//!
//! Without promtool the test fails under CI (`CI` set) and as root (who can install it), and
//! is skipped with a message otherwise.

use ebbtide::stats::{check_exposition, Exposition, MetricType, Snapshot};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn promtool() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file())
}

fn required() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    std::env::var_os("CI").is_some() || unsafe { libc::geteuid() } == 0
}

/// `promtool check metrics` of `text`: its exit status and what it said.
fn check(tool: &PathBuf, text: &str) -> (bool, String) {
    let mut child = Command::new(tool)
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
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn promtool_accepts_the_output() {
    let Some(tool) = promtool() else {
        assert!(
            !required(),
            "promtool is not installed: install the Debian package 'prometheus' (.ci/run does)"
        );
        eprintln!("SKIPPED promtool_accepts_the_output: promtool not installed (apt-get install prometheus)");
        return;
    };
    // The linter itself works here: it refuses what the old output had.
    let (ok, said) = check(
        &tool,
        "# HELP ebbtide_squeeze_until_ms x\n# TYPE ebbtide_squeeze_until_ms gauge\nebbtide_squeeze_until_ms 0\n",
    );
    assert!(!ok && said.contains("abbreviated units"), "{said}");

    let sample = Snapshot::sample().to_prometheus();
    let (ok, said) = check(&tool, &sample);
    assert!(
        ok,
        "promtool refused the sample snapshot:\n{said}\n{sample}"
    );

    let mut e = Exposition::new();
    let mut other = Snapshot::sample();
    other.zones.push(other.zones[0].clone());
    other.global.last_event_source.clear();
    e.add_snapshot(
        &Snapshot::sample(),
        &[("pid", "1"), ("comm", "a"), ("cgroup", "/")],
    );
    e.add_snapshot(
        &other,
        &[
            ("pid", "2"),
            ("comm", "b"),
            ("cgroup", "/system.slice/b.service"),
        ],
    );
    e.add_f64(
        "ebbtide_exporter_scrape_duration_seconds",
        "Time the scrape took.",
        MetricType::Gauge,
        &[],
        0.012,
    );
    let page = e.render();
    check_exposition(&page).unwrap();
    let (ok, said) = check(&tool, &page);
    assert!(ok, "promtool refused a two-process page:\n{said}\n{page}");

    let (ok, said) = check(&tool, &Snapshot::default().to_prometheus());
    assert!(ok, "promtool refused an empty snapshot:\n{said}");
}
