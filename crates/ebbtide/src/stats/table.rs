//! `vmstat -z` style table.

use super::{Field, FieldKind, Snapshot, Stats, Value};
use std::fmt::Write;

fn cell(v: Value<'_>) -> String {
    match v {
        Value::Text(t) => t.replace(['\n', '\t'], " "),
        Value::U64(n) => n.to_string(),
        Value::Bool(b) => if b { "yes" } else { "no" }.into(),
    }
}

/// Columns of `S` (fields with a column header) and their cells, aligned; text columns left
/// aligned, numbers right aligned, a colon after the label as in `vmstat -z`.
fn table<S: Stats>(out: &mut String, items: &[&S]) {
    let cols: Vec<&'static Field> = S::fields()
        .into_iter()
        .filter(|f| !f.column.is_empty())
        .collect();
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|s| {
            let mut row = Vec::new();
            s.for_each(&mut |f, v| {
                if !f.column.is_empty() {
                    let mut c = cell(v);
                    if f.kind == FieldKind::Label {
                        c.push(':');
                    }
                    row.push(c);
                }
            });
            row
        })
        .collect();
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, f)| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([f.column.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &mut dyn Iterator<Item = (usize, &str)>| {
        let mut l = String::new();
        for (i, c) in cells {
            let left = cols[i].kind != FieldKind::Gauge && cols[i].kind != FieldKind::Counter;
            if i > 0 {
                l.push(' ');
            }
            let pad = widths[i].saturating_sub(c.chars().count());
            if left {
                l.push_str(c);
                if i + 1 < cols.len() {
                    l.push_str(&" ".repeat(pad));
                }
            } else {
                l.push_str(&" ".repeat(pad));
                l.push_str(c);
            }
        }
        l.truncate(l.trim_end().len());
        l
    };
    let _ = writeln!(
        out,
        "{}",
        line(&mut cols.iter().enumerate().map(|(i, f)| (i, f.column)))
    );
    for r in &rows {
        let _ = writeln!(
            out,
            "{}",
            line(&mut r.iter().enumerate().map(|(i, c)| (i, c.as_str())))
        );
    }
}

pub(crate) fn snapshot(s: &Snapshot) -> String {
    let mut out = String::new();
    s.global.for_each(&mut |f, v| {
        let _ = writeln!(out, "{}: {}", f.name, cell(v));
    });
    if !s.sources.is_empty() {
        out.push('\n');
        table(&mut out, &s.sources.iter().collect::<Vec<_>>());
    }
    out.push('\n');
    table(&mut out, &zone_rows(s));
    if !s.pools.is_empty() {
        out.push('\n');
        let mut pools: Vec<_> = s.pools.iter().collect();
        pools.sort_by(|a, b| a.zone.name.cmp(&b.zone.name));
        table(&mut out, &pools);
    }
    out
}

/// The zones in the table's order: by item size, then by name, so a malloc's size classes read
/// from the smallest up whatever order the process created them in (the snapshot keeps the
/// creation order, which is the registry's).
fn zone_rows(s: &Snapshot) -> Vec<&super::ZoneStats> {
    let mut zones: Vec<_> = s.zones.iter().collect();
    zones.sort_by(|a, b| a.size.cmp(&b.size).then_with(|| a.name.cmp(&b.name)));
    zones
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first column of the zone table's rows, in order.
    fn zone_names(table: &str) -> Vec<String> {
        let block = table.split("\n\n").find(|b| b.starts_with("ITEM")).unwrap();
        block
            .lines()
            .skip(1)
            .map(|l| l.split(':').next().unwrap().to_string())
            .collect()
    }

    #[test]
    fn zone_rows_are_sorted_by_size_then_name() {
        let mut s = Snapshot::sample();
        let proto = s.zones[0].clone();
        let zone = |name: &str, size: u64| super::super::ZoneStats {
            name: name.into(),
            size,
            ..proto.clone()
        };
        s.zones = vec![
            zone("malloc-1024", 1024),
            zone("malloc-16", 16),
            zone("b-64", 64),
            zone("malloc-256", 256),
            zone("a-64", 64),
        ];
        assert_eq!(
            zone_names(&s.to_table()),
            ["malloc-16", "a-64", "b-64", "malloc-256", "malloc-1024"]
        );
    }
}
