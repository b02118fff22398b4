//! Prometheus text exposition format (version 0.0.4): the one emitter, and a small checker.
//!
//! Names follow Prometheus's conventions (its "Metric and label naming" page) and pass
//! `promtool check metrics`:
//!
//! * `ebbtide_<group>_<field>` for zones, pools and sources, with the instance's name as a label
//!   (`ebbtide_zone_used_items{zone="..."}`); `ebbtide_<field>` for process-wide figures;
//! * base units, and the unit last: milliseconds become seconds (`_seconds`, value / 1000),
//!   percentages ratios (`_ratio`, value / 100), byte counts end in `_bytes`
//!   (`cached_bytes_pcpu` → `ebbtide_zone_cached_pcpu_bytes`); item and page counts end in
//!   `_items` / `_pages` unless the name says so already;
//! * counters end in `_total` and are typed `counter`; everything else is a `gauge`;
//! * fields that count one thing for different sources or kinds are one family with a label
//!   ([`LABELED`]): `events_psi` is `ebbtide_source_events_total{source="psi"}`, `reclaim_trim`
//!   is `ebbtide_zone_reclaims_total{zone="...",kind="trim"}`;
//! * text other than the instance's name is `<metric>_info{<field>="text"} 1`, with no sample
//!   while the text is empty;
//! * `# HELP` and `# TYPE` once per family, before its samples, which stay together; a family
//!   without samples is left out. Two instances of one group with the same name (zone names
//!   need not be unique) would be one series twice: the second is labelled `name#2`, the
//!   third `name#3`, and so on.
//!
//! [`Exposition`] builds one page from any number of snapshots, each with labels of its own
//! (`ebbtide exporter` adds `pid`, `comm` and `cgroup`), and from samples made by hand (the
//! exporter's own metrics). [`Snapshot::to_prometheus`](super::Snapshot::to_prometheus) is one
//! snapshot without extra labels through the same code, so the two cannot name anything
//! differently.

use super::{Field, FieldKind, PoolStats, Snapshot, SourceStats, Stats, Unit, Value, ZoneStats};
use std::collections::HashMap;
use std::fmt::Write;

/// `Content-Type` of the text exposition format this module writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Prometheus metric type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    /// Only grows; the name ends in `_total`.
    Counter,
    /// A current value.
    Gauge,
}

impl MetricType {
    /// The word in `# TYPE` lines.
    pub const fn word(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
        }
    }
}

/// Counters of one group that Prometheus reads as one family with a label: in `groups`, each
/// counter named `<prefix><value>` is a sample of `ebbtide_[<group>_]<family>_total` with
/// `<label>="<value>"`.
struct Labeled {
    groups: &'static [&'static str],
    prefix: &'static str,
    family: &'static str,
    label: &'static str,
    help: &'static str,
}

/// The families made of several fields (see [`Labeled`]).
const LABELED: &[Labeled] = &[
    Labeled {
        groups: &["global"],
        prefix: "events_",
        family: "source_events",
        label: "source",
        help: "Pressure events received, by source (the names of ebbtide_source_active); they \
               add up to ebbtide_pressure_events_total.",
    },
    Labeled {
        groups: &["zone", "pool", "zones"],
        prefix: "reclaim_",
        family: "reclaims",
        label: "kind",
        help: "Reclaims run, by kind: trim (depot down to its working set), drain (whole \
               depot), drain_cpu (depot, every per-CPU cache, depot again).",
    },
    Labeled {
        groups: &["zone", "pool", "zones"],
        prefix: "lock_waits_",
        family: "lock_waits",
        label: "lock",
        help: "Acquisitions of one of the zone's mutexes that found it held and waited, by lock: \
               depot (full buckets), keg (slab lists), stash (a page pool's lazily given back \
               pages).",
    },
    Labeled {
        groups: &["zone", "pool", "zones"],
        prefix: "lock_wait_ns_",
        family: "lock_wait",
        label: "lock",
        help: "Time the zone's lock waits (the lock_waits family of its group) spent blocked, \
               by lock.",
    },
    Labeled {
        groups: &["global"],
        prefix: "lock_waits_",
        family: "lock_waits",
        label: "lock",
        help: "Acquisitions of a process-wide mutex that found it held and waited, by lock: \
               arena (free 4 MiB chunks), registry (live zones), page_heap (the malloc's large \
               blocks).",
    },
    Labeled {
        groups: &["global"],
        prefix: "lock_wait_ns_",
        family: "lock_wait",
        label: "lock",
        help: "Time the process-wide lock waits (ebbtide_lock_waits_total) spent blocked, by \
               lock.",
    },
];

/// The item-size ranges the zones are summed into by [`Exposition::add_snapshot_bounded`]:
/// the largest item size of each range (bytes; the last takes everything larger) and the
/// range's `size_range` label. Six ranges whatever the size classes: a process's series stay
/// bounded.
pub const SIZE_RANGES: &[(u64, &str)] = &[
    (64, "1-64"),
    (256, "65-256"),
    (1024, "257-1024"),
    (4096, "1025-4096"),
    (32768, "4097-32768"),
    (u64::MAX, "32769+"),
];

/// Index in [`SIZE_RANGES`] of the range holding item size `size`.
pub fn size_range(size: u64) -> usize {
    SIZE_RANGES
        .iter()
        .position(|(max, _)| size <= *max)
        .unwrap_or(SIZE_RANGES.len() - 1)
}

/// The zone gauges that add up over zones of different item sizes (items and bytes held, pages
/// mapped, misses); every counter adds up too. The rest (item size, alignment, slab geometry,
/// bucket sizes, limits, the depot's working-set marks) describe one zone and have no sum.
pub const ZONE_SUMS: &[&str] = &[
    "used",
    "free",
    "depot_nitems",
    "cached_bytes_pcpu",
    "cached_bytes_depot",
    "free_bytes_slabs",
    "pages_mapped",
    "lazy_bytes",
    "pcpu_capacity_bytes",
    "pcpu_interval_misses",
    "huge_pages",
    "huge_partly_used",
    "huge_broken",
];

/// Whether a zone field is summed per size range ([`ZONE_SUMS`] and every counter).
pub fn zone_field_summed(f: &Field) -> bool {
    f.kind == FieldKind::Counter || (f.kind == FieldKind::Gauge && ZONE_SUMS.contains(&f.name))
}

/// Fields whose Prometheus name is not their own (before the unit suffix): a time since or
/// until something reads better as an age or a remaining time once the unit moves to the end.
const RENAMED: &[(&str, &str)] = &[
    ("last_event_ms_ago", "last_event_age"),
    ("squeeze_until_ms", "squeeze_remaining"),
];

/// How one field appears in Prometheus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Series {
    /// The metric family's name (`ebbtide_zone_used_items`).
    pub family: String,
    /// The label that tells this field's samples apart from the other fields of its family
    /// (`source="psi"` for `events_psi`), if the family is made of several fields.
    pub label: Option<(&'static str, String)>,
    /// Counter or gauge.
    pub ty: MetricType,
    /// The sample is the stored integer divided by 10^`scale` (3: milliseconds to seconds,
    /// 2: percent to ratio).
    pub scale: u32,
    /// The family's `# HELP` text (unescaped).
    pub help: String,
}

/// How `field` of `group` (`zone`, `pool`, `global`, `source`) appears in Prometheus.
pub fn series(group: &str, field: &Field) -> Series {
    let labeled = LABELED.iter().find(|l| {
        l.groups.contains(&group)
            && field.kind == FieldKind::Counter
            && field.name.starts_with(l.prefix)
    });
    let base = match labeled {
        Some(l) => l.family,
        None => RENAMED
            .iter()
            .find(|(f, _)| *f == field.name)
            .map_or(field.name, |(_, n)| n),
    };
    let mut words: Vec<&str> = base.split('_').collect();
    // (suffix, words that mean the same unit, scale, unit for HELP)
    let (suffix, same, scale, unit_help): (&str, &[&str], u32, &str) = match field.unit {
        Unit::Bytes => ("bytes", &["bytes"], 0, "bytes"),
        Unit::Millis => ("seconds", &["ms", "seconds"], 3, "seconds"),
        Unit::Nanos => ("seconds", &["ns", "seconds"], 9, "seconds"),
        Unit::Percent => (
            "ratio",
            &["pct", "percent", "ratio"],
            2,
            "ratio (the percentage / 100)",
        ),
        Unit::Items => ("items", &[], 0, field.unit.word()),
        Unit::Pages => ("pages", &[], 0, field.unit.word()),
        _ => ("", &[], 0, field.unit.word()),
    };
    if !same.is_empty() {
        // A base unit: wherever the name says it, it moves to the end.
        words.retain(|w| !same.contains(w));
        words.push(suffix);
    } else if !suffix.is_empty() && !words.iter().any(|w| *w == suffix || *w == "nitems") {
        words.push(suffix);
    }
    let mut family = String::from("ebbtide_");
    if group != "global" {
        family.push_str(group);
        family.push('_');
    }
    family.push_str(&words.join("_"));
    let ty = match field.kind {
        FieldKind::Counter => {
            family.push_str("_total");
            MetricType::Counter
        }
        FieldKind::Info => {
            family.push_str("_info");
            MetricType::Gauge
        }
        FieldKind::Label | FieldKind::Gauge => MetricType::Gauge,
    };
    let (label, help) = match labeled {
        Some(l) => (
            Some((l.label, field.name[l.prefix.len()..].to_string())),
            format!("{} Unit: {unit_help}.", l.help),
        ),
        None => (None, format!("{} Unit: {unit_help}.", field.description)),
    };
    Series {
        family,
        label,
        ty,
        scale,
        help,
    }
}

/// The Prometheus name of `field` in `group` as documentation shows it: the family, and the
/// label value that selects this field when the family is made of several fields
/// (`ebbtide_source_events_total{source="psi"}`).
pub fn metric_name(group: &str, field: &Field) -> String {
    let s = series(group, field);
    match s.label {
        Some((k, v)) => format!("{}{{{k}=\"{}\"}}", s.family, escape_label(&v)),
        None => s.family,
    }
}

/// Escape a label value: backslash, double quote and newline.
pub fn escape_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `v / 10^scale` in decimal, exactly, without trailing zeros (`decimal(1500, 3)` is `1.5`).
fn decimal(v: u64, scale: u32) -> String {
    if scale == 0 {
        return v.to_string();
    }
    let p = 10u64.pow(scale);
    let (int, frac) = (v / p, v % p);
    if frac == 0 {
        return int.to_string();
    }
    let mut f = format!("{frac:0width$}", width = scale as usize);
    while f.ends_with('0') {
        f.pop();
    }
    format!("{int}.{f}")
}

/// A float sample value as Prometheus spells it.
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// One instance's values: its label value (made unique), then per field its text and number.
type Row = (Option<String>, Vec<(String, Option<u64>)>);

struct Family {
    name: String,
    help: String,
    ty: MetricType,
    /// Rendered sample lines, without the newline.
    samples: Vec<String>,
}

/// One exposition page being built: metric families in the order they were first seen, each
/// with its `# HELP` and `# TYPE` once and all its samples together.
///
/// Adding a sample to a family that exists already keeps that family's HELP and type (every
/// family of the snapshots has one HELP and one type by construction; a hand-made sample with
/// another type for an existing name is a bug of the caller, caught by a debug assertion).
/// Rendering leaves out families without samples.
#[derive(Default)]
pub struct Exposition {
    families: Vec<Family>,
    index: HashMap<String, usize>,
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    fn family(&mut self, name: &str, help: &str, ty: MetricType) -> &mut Family {
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => {
                debug_assert!(valid_metric_name(name), "invalid metric name {name}");
                debug_assert!(
                    ty != MetricType::Counter || name.ends_with("_total"),
                    "counter {name} not named *_total"
                );
                self.families.push(Family {
                    name: name.to_string(),
                    help: help.to_string(),
                    ty,
                    samples: Vec::new(),
                });
                self.index.insert(name.to_string(), self.families.len() - 1);
                self.families.len() - 1
            }
        };
        let f = &mut self.families[i];
        debug_assert_eq!(f.ty, ty, "family {name} added with two types");
        f
    }

    /// Add one sample (`value` already spelled as Prometheus reads it) to family `name`,
    /// creating the family with `help` and `ty` if it is new.
    fn push(
        &mut self,
        name: &str,
        help: &str,
        ty: MetricType,
        labels: &[(&str, &str)],
        value: &str,
    ) {
        let mut line = String::with_capacity(name.len() + 16 + 32 * labels.len());
        line.push_str(name);
        if !labels.is_empty() {
            line.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                debug_assert!(valid_label_name(k), "invalid label name {k}");
                if i > 0 {
                    line.push(',');
                }
                let _ = write!(line, "{k}=\"{}\"", escape_label(v));
            }
            line.push('}');
        }
        line.push(' ');
        line.push_str(value);
        self.family(name, help, ty).samples.push(line);
    }

    /// Add a sample with an integer value.
    pub fn add_u64(
        &mut self,
        name: &str,
        help: &str,
        ty: MetricType,
        labels: &[(&str, &str)],
        value: u64,
    ) {
        self.push(name, help, ty, labels, &value.to_string());
    }

    /// Add a sample with a floating-point value (durations measured in seconds).
    pub fn add_f64(
        &mut self,
        name: &str,
        help: &str,
        ty: MetricType,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        self.push(name, help, ty, labels, &float(value));
    }

    /// Add every statistic of `s`, each sample labelled with `labels` first (they must not use
    /// the names `zone`, `pool`, `source`, `kind` or a text field's name).
    pub fn add_snapshot(&mut self, s: &Snapshot, labels: &[(&str, &str)]) {
        self.add_snapshot_where(s, labels, &|_, _| true);
    }

    /// [`Exposition::add_snapshot`] leaving out the fields for which `keep(group, field)` is
    /// false (a reader of an older process's JSON leaves out the fields it did not send).
    pub fn add_snapshot_where(
        &mut self,
        s: &Snapshot,
        labels: &[(&str, &str)],
        keep: &dyn Fn(&str, &Field) -> bool,
    ) {
        self.group(&[&s.global], labels, keep);
        self.group(
            &s.sources.iter().collect::<Vec<&SourceStats>>(),
            labels,
            keep,
        );
        self.group(&s.zones.iter().collect::<Vec<&ZoneStats>>(), labels, keep);
        self.group(&s.pools.iter().collect::<Vec<&PoolStats>>(), labels, keep);
    }

    /// [`Exposition::add_snapshot_where`] at a fleet's scale: the process-wide figures, the
    /// sources and the pools as they are, and the zones summed into the item-size ranges of
    /// [`SIZE_RANGES`] (`ebbtide_zones_*{size_range="65-256"}`, [`ZONE_SUMS`]), so a process costs
    /// a bounded number of series whatever its zones. Zones for which `per_zone(name)` is true
    /// also get their own `ebbtide_zone_*` series (they stay in their range's sums too).
    pub fn add_snapshot_bounded(
        &mut self,
        s: &Snapshot,
        labels: &[(&str, &str)],
        keep: &dyn Fn(&str, &Field) -> bool,
        per_zone: &dyn Fn(&str) -> bool,
    ) {
        self.group(&[&s.global], labels, keep);
        self.group(
            &s.sources.iter().collect::<Vec<&SourceStats>>(),
            labels,
            keep,
        );
        let detailed: Vec<&ZoneStats> = s.zones.iter().filter(|z| per_zone(&z.name)).collect();
        self.group(&detailed, labels, keep);
        self.zone_ranges(&s.zones, labels, keep);
        self.group(&s.pools.iter().collect::<Vec<&PoolStats>>(), labels, keep);
    }

    /// The zones summed per item-size range: the fields of [`ZONE_SUMS`], `used_bytes` (used
    /// items times their size) and the number of zones. A range without zones has no samples.
    fn zone_ranges(
        &mut self,
        zones: &[ZoneStats],
        labels: &[(&str, &str)],
        keep: &dyn Fn(&str, &Field) -> bool,
    ) {
        let fields = ZoneStats::fields();
        let summed: Vec<bool> = fields
            .iter()
            .map(|f| zone_field_summed(f) && keep("zone", f))
            .collect();
        // Per range: the number of zones, Σ used × size, and per field its sum.
        let mut sums: Vec<(u64, u64, Vec<u64>)> =
            vec![(0, 0, vec![0; fields.len()]); SIZE_RANGES.len()];
        for z in zones {
            let r = &mut sums[size_range(z.size)];
            r.0 += 1;
            r.1 = r.1.wrapping_add(z.used.wrapping_mul(z.size));
            let mut i = 0;
            z.for_each(&mut |_, v| {
                if summed[i] {
                    // Counters wrap at 2^64, and so does their sum.
                    r.2[i] = r.2[i].wrapping_add(v.as_u64().unwrap_or(0));
                }
                i += 1;
            });
        }
        let with_range = |range: &'static str| {
            let mut l: Vec<(&str, &str)> = labels.to_vec();
            l.push(("size_range", range));
            l
        };
        let present = || sums.iter().zip(SIZE_RANGES).filter(|((n, _, _), _)| *n > 0);
        for ((n, _, _), (_, range)) in present() {
            self.add_u64(
                "ebbtide_zones_in_range",
                "Zones whose item size is in size_range (the ranges of ebbtide_zones_*).",
                MetricType::Gauge,
                &with_range(range),
                *n,
            );
        }
        for ((_, used_bytes, _), (_, range)) in present() {
            self.add_u64(
                "ebbtide_zones_used_bytes",
                "Sum over the zones whose item size is in size_range: items allocated and not \
                 yet freed, times their size. Unit: bytes.",
                MetricType::Gauge,
                &with_range(range),
                *used_bytes,
            );
        }
        for (i, field) in fields.iter().enumerate() {
            if !summed[i] {
                continue;
            }
            let series = series("zones", field);
            let help = format!(
                "Sum over the zones whose item size is in size_range: {}",
                series.help
            );
            for ((_, _, values), (_, range)) in present() {
                let mut l = with_range(range);
                if let Some((k, v)) = &series.label {
                    l.push((k, v));
                }
                self.push(
                    &series.family,
                    &help,
                    series.ty,
                    &l,
                    &decimal(values[i], series.scale),
                );
            }
        }
    }

    /// Every field of every instance of one group, family by family.
    fn group<S: Stats>(
        &mut self,
        items: &[&S],
        labels: &[(&str, &str)],
        keep: &dyn Fn(&str, &Field) -> bool,
    ) {
        if items.is_empty() {
            return;
        }
        let fields = S::fields();
        let series: Vec<Option<Series>> = fields
            .iter()
            .map(|f| (f.kind != FieldKind::Label && keep(S::GROUP, f)).then(|| series(S::GROUP, f)))
            .collect();
        // Values per instance, in field order, and the instance's label value (made unique).
        let mut seen: HashMap<String, usize> = HashMap::new();
        let rows: Vec<Row> = items
            .iter()
            .map(|s| {
                let mut row = Vec::with_capacity(fields.len());
                let mut name = None;
                s.for_each(&mut |f, v| {
                    if let (FieldKind::Label, Value::Text(t)) = (f.kind, v) {
                        name = Some(t.to_string());
                    }
                    let text = match v {
                        Value::Text(t) => t.to_string(),
                        _ => String::new(),
                    };
                    row.push((text, v.as_u64()));
                });
                let name = name.map(|n| {
                    let k = seen.entry(n.clone()).or_insert(0);
                    *k += 1;
                    if *k == 1 {
                        n
                    } else {
                        format!("{n}#{k}")
                    }
                });
                (name, row)
            })
            .collect();
        for (i, (field, series)) in fields.iter().zip(&series).enumerate() {
            let Some(series) = series else { continue };
            for (name, row) in &rows {
                let (text, num) = &row[i];
                let mut l: Vec<(&str, &str)> = labels.to_vec();
                if let Some(n) = name {
                    l.push((S::GROUP, n));
                }
                if let Some((k, v)) = &series.label {
                    l.push((k, v));
                }
                let value = if field.kind == FieldKind::Info {
                    if text.is_empty() {
                        continue;
                    }
                    l.push((field.name, text));
                    "1".to_string()
                } else {
                    decimal(num.unwrap_or(0), series.scale)
                };
                self.push(&series.family, &series.help, series.ty, &l, &value);
            }
        }
    }

    /// Whether no family has a sample.
    pub fn is_empty(&self) -> bool {
        self.families.iter().all(|f| f.samples.is_empty())
    }

    /// The page: for each family with samples, `# HELP`, `# TYPE` and its samples.
    pub fn render(&self) -> String {
        let size: usize = self
            .families
            .iter()
            .map(|f| {
                f.help.len()
                    + 2 * f.name.len()
                    + 24
                    + f.samples.iter().map(|s| s.len() + 1).sum::<usize>()
            })
            .sum();
        let mut out = String::with_capacity(size);
        for f in self.families.iter().filter(|f| !f.samples.is_empty()) {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.ty.word());
            for s in &f.samples {
                out.push_str(s);
                out.push('\n');
            }
        }
        out
    }
}

pub(crate) fn snapshot(s: &Snapshot) -> String {
    let mut e = Exposition::new();
    e.add_snapshot(s, &[]);
    e.render()
}

fn valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("__")
}

/// Label pairs as parsed: name and unescaped value.
type Labels = Vec<(String, String)>;

/// Parse `{a="x",b="y"}` (after the metric name); returns the label pairs (unescaped) and the
/// rest of the line.
fn parse_labels(s: &str) -> Result<(Labels, &str), String> {
    let Some(mut rest) = s.strip_prefix('{') else {
        return Ok((Vec::new(), s));
    };
    let mut labels = Vec::new();
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without '='")?;
        let name = &rest[..eq];
        if !valid_label_name(name) {
            return Err(format!("invalid label name '{name}'"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value must start with '\"'")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("invalid escape in label value: {other:?}")),
                },
                Some((_, '\n')) => return Err("raw newline in label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((name.to_string(), value));
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err("expected ',' or '}' after a label".into());
        }
    }
}

/// Check text against the exposition format rules this library relies on: valid metric and
/// label names, label values correctly escaped, `# HELP` and `# TYPE` (counter or gauge) once
/// per family and before its samples, each family's samples together, counters named
/// `*_total`, sample values numbers, no duplicate series. Returns the first problem found.
pub fn check_exposition(text: &str) -> Result<(), String> {
    use std::collections::{HashMap, HashSet};
    let mut help: HashSet<String> = HashSet::new();
    let mut types: HashMap<String, String> = HashMap::new();
    let mut finished: HashSet<String> = HashSet::new();
    let mut series: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let err = |m: String| format!("line {}: {m}: {line}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            if !valid_metric_name(name) {
                return Err(err(format!("invalid metric name '{name}'")));
            }
            if !help.insert(name.to_string()) || finished.contains(name) {
                return Err(err("second HELP for a family".into()));
            }
            if let Some(cur) = current.replace(name.to_string()) {
                if cur != name {
                    finished.insert(cur);
                }
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let name = parts.next().unwrap_or("");
            let ty = parts.next().unwrap_or("");
            if !help.contains(name) {
                return Err(err("TYPE without HELP first".into()));
            }
            if !["counter", "gauge"].contains(&ty) || parts.next().is_some() {
                return Err(err(format!("unexpected type '{ty}'")));
            }
            if ty == "counter" && !name.ends_with("_total") {
                return Err(err("counter not named *_total".into()));
            }
            if types.insert(name.to_string(), ty.to_string()).is_some() {
                return Err(err("second TYPE for a family".into()));
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| err("no value".into()))?;
        let name = &line[..name_end];
        if !valid_metric_name(name) {
            return Err(err(format!("invalid metric name '{name}'")));
        }
        if current.as_deref() != Some(name) {
            return Err(err("sample outside its family's HELP/TYPE block".into()));
        }
        if !types.contains_key(name) {
            return Err(err("sample before TYPE".into()));
        }
        let (labels, rest) = parse_labels(&line[name_end..]).map_err(&err)?;
        let mut names: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(err("duplicate label".into()));
        }
        let value = rest
            .strip_prefix(' ')
            .ok_or_else(|| err("missing space before value".into()))?;
        if value.parse::<f64>().is_err() {
            return Err(err(format!("value '{value}' is not a number")));
        }
        let key = format!("{name}{labels:?}");
        if !series.insert(key) {
            return Err(err("duplicate series".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::GlobalStats;

    #[test]
    fn checker_rejects_bad_input() {
        let ok = "# HELP a_total x\n# TYPE a_total counter\na_total{z=\"q\\\"\"} 1\n";
        assert_eq!(check_exposition(ok), Ok(()));
        for bad in [
            "a_total 1\n",
            "# HELP a_total x\na_total 1\n",
            "# HELP a x\n# TYPE a counter\na 1\n",
            "# HELP 1a x\n# TYPE 1a gauge\n1a 1\n",
            "# HELP a x\n# TYPE a gauge\na{z=\"q\"\"} 1\n",
            "# HELP a x\n# TYPE a gauge\na{z=\"q\\x\"} 1\n",
            "# HELP a x\n# TYPE a gauge\na{z=\"q\"} one\n",
            "# HELP a x\n# TYPE a gauge\na 1\na 2\n",
            "# HELP a x\n# TYPE a gauge\n# HELP b x\n# TYPE b gauge\na 1\n",
            "# HELP a x\n# TYPE a gauge\na{1z=\"\"} 1\n",
        ] {
            assert!(check_exposition(bad).is_err(), "accepted: {bad}");
        }
    }

    fn field(fields: &[&'static Field], name: &str) -> &'static Field {
        fields.iter().find(|f| f.name == name).unwrap()
    }

    /// Every family name, pinned: a rename here is a rename for every dashboard and alert.
    #[test]
    fn every_name() {
        let names = |group: &str, fields: Vec<&'static Field>| -> Vec<String> {
            fields
                .iter()
                .filter(|f| f.kind != FieldKind::Label)
                .map(|f| metric_name(group, f))
                .collect()
        };
        assert_eq!(
            names("zone", ZoneStats::fields()),
            [
                "ebbtide_zone_size_bytes",
                "ebbtide_zone_align_bytes",
                "ebbtide_zone_limit_items",
                "ebbtide_zone_used_items",
                "ebbtide_zone_free_items",
                "ebbtide_zone_requests_total",
                "ebbtide_zone_fails_total",
                "ebbtide_zone_sleeps_total",
                "ebbtide_zone_frees_total",
                "ebbtide_zone_bucket_size_items",
                "ebbtide_zone_bucket_size_max_items",
                "ebbtide_zone_depot_nitems",
                "ebbtide_zone_depot_imax_items",
                "ebbtide_zone_depot_imin_items",
                "ebbtide_zone_depot_bimin_items",
                "ebbtide_zone_depot_wss_items",
                "ebbtide_zone_depot_limin_items",
                "ebbtide_zone_depot_timin",
                "ebbtide_zone_cached_pcpu_bytes",
                "ebbtide_zone_cached_depot_bytes",
                "ebbtide_zone_free_slabs_bytes",
                "ebbtide_zone_pages_mapped",
                "ebbtide_zone_slab_bytes",
                "ebbtide_zone_items_per_slab",
                "ebbtide_zone_efficiency_ratio",
                "ebbtide_zone_reclaims_total{kind=\"trim\"}",
                "ebbtide_zone_reclaims_total{kind=\"drain\"}",
                "ebbtide_zone_reclaims_total{kind=\"drain_cpu\"}",
                "ebbtide_zone_released_bytes_total",
                "ebbtide_zone_squeeze_windows_total",
                "ebbtide_zone_buckets_enabled",
                "ebbtide_zone_invalid_frees_total",
                "ebbtide_zone_lazy_bytes",
                "ebbtide_zone_lazy_freed_bytes_total",
                "ebbtide_zone_lazy_reused_bytes_total",
                "ebbtide_zone_pcpu_capacity_items",
                "ebbtide_zone_pcpu_capacity_bytes",
                "ebbtide_zone_pcpu_capacity_max_items",
                "ebbtide_zone_pcpu_underflows_total",
                "ebbtide_zone_pcpu_overflows_total",
                "ebbtide_zone_pcpu_interval_misses",
                "ebbtide_zone_lock_waits_total{lock=\"depot\"}",
                "ebbtide_zone_lock_waits_total{lock=\"keg\"}",
                "ebbtide_zone_lock_waits_total{lock=\"stash\"}",
                "ebbtide_zone_lock_wait_seconds_total{lock=\"depot\"}",
                "ebbtide_zone_lock_wait_seconds_total{lock=\"keg\"}",
                "ebbtide_zone_lock_wait_seconds_total{lock=\"stash\"}",
                "ebbtide_zone_remote_frees_total",
                "ebbtide_zone_remote_buckets_total",
                "ebbtide_zone_huge_pages",
                "ebbtide_zone_huge_partly_used_pages",
                "ebbtide_zone_huge_broken_pages",
                "ebbtide_zone_huge_released_pages_total",
                "ebbtide_zone_huge_collapsed_pages_total",
            ]
        );
        let pool = names("pool", PoolStats::fields());
        assert_eq!(
            pool[pool.len() - 4..],
            [
                "ebbtide_pool_max_buffer_pages",
                "ebbtide_pool_free_pages",
                "ebbtide_pool_pages_in_use",
                "ebbtide_pool_squeezed",
            ]
        );
        assert!(pool.contains(&"ebbtide_pool_reclaims_total{kind=\"drain_cpu\"}".to_string()));
        assert_eq!(
            names("global", GlobalStats::fields()),
            [
                "ebbtide_mapped_bytes",
                "ebbtide_cached_bytes",
                "ebbtide_released_bytes_total",
                "ebbtide_pressure_level",
                "ebbtide_pressure_events_total",
                "ebbtide_source_events_total{source=\"systemd\"}",
                "ebbtide_source_events_total{source=\"psi\"}",
                "ebbtide_source_events_total{source=\"cgroup1\"}",
                "ebbtide_source_events_total{source=\"headroom\"}",
                "ebbtide_source_events_total{source=\"events\"}",
                "ebbtide_source_events_total{source=\"budget\"}",
                "ebbtide_source_events_total{source=\"explicit\"}",
                "ebbtide_source_events_total{source=\"mmap_failure\"}",
                "ebbtide_last_event_source_info",
                "ebbtide_last_event_level",
                "ebbtide_last_event_age_seconds",
                "ebbtide_squeeze_remaining_seconds",
                "ebbtide_metadata_bytes",
                "ebbtide_squeezed_seconds_total",
                "ebbtide_lazy_bytes",
                "ebbtide_lazy_pending_bytes",
                "ebbtide_lazy_freed_bytes_total",
                "ebbtide_source_opens_total",
                "ebbtide_lock_waits_total{lock=\"arena\"}",
                "ebbtide_lock_waits_total{lock=\"registry\"}",
                "ebbtide_lock_waits_total{lock=\"page_heap\"}",
                "ebbtide_lock_wait_seconds_total{lock=\"arena\"}",
                "ebbtide_lock_wait_seconds_total{lock=\"registry\"}",
                "ebbtide_lock_wait_seconds_total{lock=\"page_heap\"}",
                "ebbtide_page_heap_huge_pages",
                "ebbtide_page_heap_partly_used_pages",
                "ebbtide_page_heap_huge_broken_pages",
                "ebbtide_page_heap_released_whole_bytes_total",
            ]
        );
        assert_eq!(
            names("source", SourceStats::fields()),
            [
                "ebbtide_source_active",
                "ebbtide_source_reason_info",
                "ebbtide_source_watches_info"
            ]
        );
        // No name keeps an abbreviated unit.
        for group in [
            names("zone", ZoneStats::fields()),
            names("pool", PoolStats::fields()),
            names("global", GlobalStats::fields()),
        ] {
            for n in group {
                assert!(
                    !n.split(['_', '{'])
                        .any(|w| ["ms", "pct", "us", "ns"].contains(&w)),
                    "{n}"
                );
            }
        }
    }

    #[test]
    fn every_rule_applies_to_a_field() {
        let groups = [
            ("zone", ZoneStats::fields()),
            // The per-size-range sums of the zones.
            ("zones", ZoneStats::fields()),
            ("pool", PoolStats::fields()),
            ("global", GlobalStats::fields()),
            ("source", SourceStats::fields()),
        ];
        for l in LABELED {
            for g in l.groups {
                let (_, fields) = groups.iter().find(|(n, _)| n == g).unwrap();
                let n = fields
                    .iter()
                    .filter(|f| f.name.starts_with(l.prefix) && f.kind == FieldKind::Counter)
                    .count();
                assert!(n >= 2, "{} in {g}: {n} fields", l.prefix);
                // One unit for the whole family.
                let units: Vec<Unit> = fields
                    .iter()
                    .filter(|f| f.name.starts_with(l.prefix))
                    .map(|f| f.unit)
                    .collect();
                assert!(units.windows(2).all(|w| w[0] == w[1]), "{}", l.prefix);
            }
        }
        for (name, _) in RENAMED {
            assert!(
                groups
                    .iter()
                    .any(|(_, fields)| fields.iter().any(|f| f.name == *name)),
                "{name}"
            );
        }
    }

    #[test]
    fn scaled_values_and_help() {
        let g = GlobalStats::fields();
        let s = series("global", field(&g, "last_event_ms_ago"));
        assert_eq!(s.scale, 3);
        assert_eq!(s.ty, MetricType::Gauge);
        assert!(s.help.ends_with("Unit: seconds."), "{}", s.help);
        let z = ZoneStats::fields();
        let e = series("zone", field(&z, "efficiency_pct"));
        assert_eq!(e.scale, 2);
        assert!(e.help.contains("ratio"), "{}", e.help);
        assert_eq!(decimal(1500, 3), "1.5");
        assert_eq!(decimal(1, 3), "0.001");
        assert_eq!(decimal(0, 3), "0");
        assert_eq!(decimal(2000, 3), "2");
        assert_eq!(decimal(98, 2), "0.98");
        assert_eq!(decimal(100, 2), "1");
        assert_eq!(decimal(u64::MAX, 0), "18446744073709551615");
        assert_eq!(float(0.25), "0.25");
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(f64::NAN), "NaN");
        let mut snap = Snapshot::sample();
        snap.global.last_event_ms_ago = 1234;
        let text = snap.to_prometheus();
        assert!(
            text.contains("\nebbtide_last_event_age_seconds 1.234\n"),
            "{text}"
        );
        assert!(text.contains("ebbtide_zone_efficiency_ratio{zone=\"small 64\"} 1\n"));
        // Nanoseconds are seconds to the nanosecond, and the lock is a label.
        assert!(
            text.contains("\nebbtide_lock_wait_seconds_total{lock=\"page_heap\"} 2.0000005\n"),
            "{text}"
        );
        assert!(text.contains(
            "\nebbtide_zone_lock_wait_seconds_total{zone=\"small 64\",lock=\"depot\"} 0.0000215\n"
        ));
        assert!(
            text.contains("\nebbtide_zone_lock_waits_total{zone=\"small 64\",lock=\"keg\"} 3\n")
        );
        assert!(text.contains("ebbtide_source_events_total{source=\"psi\"} 6\n"));
        assert!(text.contains("ebbtide_zone_reclaims_total{zone=\"small 64\",kind=\"trim\"} 5\n"));
    }

    #[test]
    fn many_snapshots_one_page() {
        let a = Snapshot::sample();
        let mut b = Snapshot::sample();
        b.zones.truncate(1);
        b.zones[0].used = 7;
        let mut e = Exposition::new();
        e.add_snapshot(&a, &[("pid", "10"), ("comm", "a")]);
        e.add_snapshot(&b, &[("pid", "20"), ("comm", "b \"x\"")]);
        e.add_u64(
            "ebbtide_exporter_scrapes_total",
            "Scrapes.",
            MetricType::Counter,
            &[],
            3,
        );
        e.add_f64(
            "ebbtide_exporter_scrape_duration_seconds",
            "Time.",
            MetricType::Gauge,
            &[],
            0.5,
        );
        let text = e.render();
        check_exposition(&text).unwrap();
        assert_eq!(
            text.matches("# TYPE ebbtide_zone_used_items gauge\n")
                .count(),
            1
        );
        assert!(text
            .contains("ebbtide_zone_used_items{pid=\"10\",comm=\"a\",zone=\"small 64\"} 1000\n"));
        assert!(text.contains(
            "ebbtide_zone_used_items{pid=\"20\",comm=\"b \\\"x\\\"\",zone=\"small 64\"} 7\n"
        ));
        assert!(text.ends_with(
            "# TYPE ebbtide_exporter_scrape_duration_seconds gauge\nebbtide_exporter_scrape_duration_seconds 0.5\n"
        ));
        // Samples of one family stay together even though they came from two snapshots.
        let lines: Vec<&str> = text.lines().collect();
        let first = lines
            .iter()
            .position(|l| l.starts_with("ebbtide_zone_used_items"))
            .unwrap();
        assert!(lines[first..first + 3]
            .iter()
            .all(|l| l.starts_with("ebbtide_zone_used_items")));
        // A field left out by the filter has no family at all.
        let mut e = Exposition::new();
        e.add_snapshot_where(&a, &[], &|g, f| !(g == "zone" && f.name == "used"));
        let text = e.render();
        assert!(!text.contains("ebbtide_zone_used_items"));
        assert!(text.contains("ebbtide_zone_free_items"));
        assert!(Exposition::new().is_empty());
        assert_eq!(Exposition::new().render(), "");
    }

    #[test]
    fn duplicate_names_and_empty_text() {
        let mut s = Snapshot::sample();
        let dup = s.zones[0].clone();
        s.zones.push(dup.clone());
        s.zones.push(dup);
        s.global.last_event_source.clear();
        let text = s.to_prometheus();
        check_exposition(&text).unwrap();
        assert!(text.contains("ebbtide_zone_used_items{zone=\"small 64\"} 1000\n"));
        assert!(text.contains("ebbtide_zone_used_items{zone=\"small 64#2\"} 1000\n"));
        assert!(text.contains("ebbtide_zone_used_items{zone=\"small 64#3\"} 1000\n"));
        // No sample for empty text, and no HELP/TYPE for a family without samples.
        assert!(!text.contains("ebbtide_last_event_source_info"), "{text}");
        assert!(!text.contains("reason=\"\""), "{text}");
        // An empty snapshot has only the process-wide families.
        let empty = Snapshot::default().to_prometheus();
        check_exposition(&empty).unwrap();
        assert!(!empty.contains("ebbtide_zone_"));
        assert!(empty.contains("ebbtide_mapped_bytes 0\n"));
    }

    #[test]
    fn label_escaping() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape_help("a\\b\nc\"d"), "a\\\\b\\nc\"d");
    }

    #[test]
    fn zones_summed_per_size_range() {
        let mut s = Snapshot::sample();
        // Two more zones in 1-64 and one far above: three ranges in use.
        let mut z = s.zones[0].clone();
        z.name = "tiny 16".into();
        z.size = 16;
        z.used = 5;
        z.requests = 7;
        s.zones.push(z.clone());
        z.name = "tiny 32".into();
        z.size = 32;
        s.zones.push(z.clone());
        z.name = "huge".into();
        z.size = 1 << 20;
        s.zones.push(z);
        let mut e = Exposition::new();
        e.add_snapshot_bounded(&s, &[("pid", "1")], &|_, _| true, &|_| false);
        let page = e.render();
        check_exposition(&page).unwrap();
        assert!(
            !page.contains("ebbtide_zone_used_items"),
            "no per-zone series:\n{page}"
        );
        assert!(page.contains("ebbtide_zones_in_range{pid=\"1\",size_range=\"1-64\"} 3\n"));
        assert!(page.contains("ebbtide_zones_in_range{pid=\"1\",size_range=\"1025-4096\"} 1\n"));
        assert!(page.contains("ebbtide_zones_in_range{pid=\"1\",size_range=\"32769+\"} 1\n"));
        assert!(
            !page.contains("size_range=\"65-256\""),
            "an empty range has no samples"
        );
        // 1000 + 5 + 5 items; 64 * 1000 + 16 * 5 + 32 * 5 bytes; 10000 + 7 + 7 requests.
        assert!(page.contains("ebbtide_zones_used_items{pid=\"1\",size_range=\"1-64\"} 1010\n"));
        assert!(page.contains("ebbtide_zones_used_bytes{pid=\"1\",size_range=\"1-64\"} 64240\n"));
        assert!(
            page.contains("ebbtide_zones_requests_total{pid=\"1\",size_range=\"1-64\"} 10014\n")
        );
        assert!(page.contains(
            "ebbtide_zones_reclaims_total{pid=\"1\",size_range=\"1-64\",kind=\"trim\"} 15\n"
        ));
        // Per-zone facts have no sum.
        for f in [
            "size_bytes",
            "bucket_size_items",
            "efficiency_ratio",
            "depot_wss_items",
        ] {
            assert!(!page.contains(&format!("ebbtide_zones_{f}")), "{f}");
        }
        // The pools and the process-wide figures are as before.
        assert!(page.contains("ebbtide_pool_free_pages{pid=\"1\",pool=\"blk-ring0\"} 12\n"));
        assert!(page.contains("ebbtide_mapped_bytes{pid=\"1\"} 67108864\n"));

        // A zone on the allow list also gets its own series.
        let mut e = Exposition::new();
        e.add_snapshot_bounded(&s, &[], &|_, _| true, &|n| n == "tiny 32");
        let page = e.render();
        check_exposition(&page).unwrap();
        assert!(page.contains("ebbtide_zone_used_items{zone=\"tiny 32\"} 5\n"));
        assert_eq!(page.matches("ebbtide_zone_used_items{").count(), 1);
        assert!(page.contains("ebbtide_zones_used_items{size_range=\"1-64\"} 1010\n"));
    }

    #[test]
    fn size_ranges_cover_every_size() {
        assert_eq!(size_range(1), 0);
        assert_eq!(size_range(64), 0);
        assert_eq!(size_range(65), 1);
        assert_eq!(size_range(4096), 3);
        assert_eq!(size_range(32769), 5);
        assert_eq!(size_range(u64::MAX), 5);
        assert!(SIZE_RANGES.windows(2).all(|w| w[0].0 < w[1].0));
        for name in ZONE_SUMS {
            assert!(
                ZoneStats::fields().iter().any(|f| f.name == *name),
                "ZONE_SUMS names no zone field {name}"
            );
        }
    }
}
