//! The Prometheus output checked by Prometheus's own linter, `promtool check metrics` (Debian
//! package `prometheus`, installed by `.ci/run`): the sample snapshot (odd zone names, escaped
//! text, every field), a page of several processes with extra labels, and an empty snapshot.
//!
//! Without promtool the test fails under CI (`CI` set) and as root (who can install it), and
//! is skipped with a message otherwise.

use ebbtide::stats::{check_exposition, Exposition, MetricType, Snapshot};

#[path = "../support/prometheus_tools.rs"]
mod prometheus_tools;
use prometheus_tools::check_metrics as check;

#[test]
fn promtool_accepts_the_output() {
    let _turn = crate::serial::turn(module_path!());
    let Some(tool) = prometheus_tools::tool("promtool") else {
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
