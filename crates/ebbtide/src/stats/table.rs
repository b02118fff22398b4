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
    table(&mut out, &s.zones.iter().collect::<Vec<_>>());
    if !s.pools.is_empty() {
        out.push('\n');
        table(&mut out, &s.pools.iter().collect::<Vec<_>>());
    }
    out
}
