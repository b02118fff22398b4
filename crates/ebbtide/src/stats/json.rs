//! JSON emitter (hand-written: no dependency, fields in declaration order).

use super::{Snapshot, Stats, Value, STATS_VERSION};
use std::fmt::Write;

/// Append `s` as a JSON string literal (RFC 8259 escaping).
pub(crate) fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn object<S: Stats>(out: &mut String, s: &S) {
    out.push('{');
    let mut first = true;
    s.for_each(&mut |f, v| {
        if !first {
            out.push(',');
        }
        first = false;
        string(out, f.name);
        out.push(':');
        match v {
            Value::Text(t) => string(out, t),
            Value::U64(n) => {
                let _ = write!(out, "{n}");
            }
            Value::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        }
    });
    out.push('}');
}

fn array<S: Stats>(out: &mut String, key: &str, items: &[S]) {
    out.push(',');
    string(out, key);
    out.push_str(":[");
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        object(out, s);
    }
    out.push(']');
}

pub(crate) fn snapshot(s: &Snapshot) -> String {
    let mut out = String::with_capacity(1024 + 1024 * (s.zones.len() + s.pools.len()));
    let _ = write!(out, "{{\"version\":{STATS_VERSION},\"global\":");
    object(&mut out, &s.global);
    array(&mut out, "sources", &s.sources);
    array(&mut out, "zones", &s.zones);
    array(&mut out, "pools", &s.pools);
    out.push('}');
    out
}
