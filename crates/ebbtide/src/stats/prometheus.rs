//! Prometheus text exposition format (version 0.0.4) emitter and a small checker.
//!
//! Metric names: `ebbtide_<group>_<field>` for zones, pools and sources
//! (`ebbtide_zone_used_items{zone="..."}`), `ebbtide_<field>` for global figures. The unit is
//! appended when the field name does not carry it already; counters end in `_total`; text
//! fields other than the instance name become `<metric>_info{<field>="text"} 1`.

use super::{Field, FieldKind, Snapshot, Stats, Unit, Value};
use std::fmt::Write;

/// The Prometheus metric name of `field` in `group`.
pub fn metric_name(group: &str, field: &Field) -> String {
    let mut name = String::from("ebbtide_");
    if group != "global" {
        name.push_str(group);
        name.push('_');
    }
    name.push_str(field.name);
    let suffix = match field.unit {
        Unit::Bytes => "bytes",
        Unit::Items => "items",
        Unit::Pages => "pages",
        Unit::Percent => "pct",
        Unit::Millis => "ms",
        _ => "",
    };
    if !suffix.is_empty() && !field.name.split('_').any(|w| w == suffix || w == "nitems") {
        name.push('_');
        name.push_str(suffix);
    }
    match field.kind {
        FieldKind::Counter => name.push_str("_total"),
        FieldKind::Info => name.push_str("_info"),
        FieldKind::Label | FieldKind::Gauge => {}
    }
    name
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

/// Emit every field of every instance of one group, one metric family at a time.
fn group<S: Stats>(out: &mut String, items: &[&S]) {
    if items.is_empty() {
        return;
    }
    // Values per instance, in field order.
    let rows: Vec<Vec<(&'static Field, String, Option<u64>)>> = items
        .iter()
        .map(|s| {
            let mut row = Vec::new();
            s.for_each(&mut |f, v| {
                let text = match v {
                    Value::Text(t) => t.to_string(),
                    _ => String::new(),
                };
                row.push((f, text, v.as_u64()));
            });
            row
        })
        .collect();
    let label_of = |row: &Vec<(&'static Field, String, Option<u64>)>| {
        row.iter()
            .find(|(f, _, _)| f.kind == FieldKind::Label)
            .map(|(_, t, _)| format!("{}=\"{}\"", S::GROUP, escape_label(t)))
    };
    for (i, field) in S::fields().into_iter().enumerate() {
        if field.kind == FieldKind::Label {
            continue;
        }
        let name = metric_name(S::GROUP, field);
        let ty = if field.kind == FieldKind::Counter {
            "counter"
        } else {
            "gauge"
        };
        let _ = writeln!(
            out,
            "# HELP {name} {} Unit: {}.",
            escape_help(field.description),
            field.unit.word()
        );
        let _ = writeln!(out, "# TYPE {name} {ty}");
        for row in &rows {
            let (_, text, num) = &row[i];
            let mut labels: Vec<String> = label_of(row).into_iter().collect();
            let value = match field.kind {
                FieldKind::Info => {
                    labels.push(format!("{}=\"{}\"", field.name, escape_label(text)));
                    1
                }
                _ => num.unwrap_or(0),
            };
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {value}");
            } else {
                let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
            }
        }
    }
}

pub(crate) fn snapshot(s: &Snapshot) -> String {
    let mut out = String::new();
    group(&mut out, &[&s.global]);
    group(&mut out, &s.sources.iter().collect::<Vec<_>>());
    group(&mut out, &s.zones.iter().collect::<Vec<_>>());
    group(&mut out, &s.pools.iter().collect::<Vec<_>>());
    out
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

    #[test]
    fn names() {
        let f = |name| {
            super::super::ZoneStats::OWN_FIELDS
                .iter()
                .find(|f| f.name == name)
                .unwrap()
        };
        assert_eq!(metric_name("zone", f("used")), "ebbtide_zone_used_items");
        assert_eq!(
            metric_name("zone", f("requests")),
            "ebbtide_zone_requests_total"
        );
        assert_eq!(
            metric_name("zone", f("released_bytes")),
            "ebbtide_zone_released_bytes_total"
        );
        assert_eq!(
            metric_name("zone", f("depot_nitems")),
            "ebbtide_zone_depot_nitems"
        );
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
