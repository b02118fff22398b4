//! JSON emitter (hand-written: no dependency, fields in declaration order). Generic over the
//! sink, so that the control socket writes straight into its own buffer (`live.rs`).

use super::{Field, Snapshot, Stats, Value, STATS_VERSION};
use std::fmt::{self, Write};

/// Append `s` as a JSON string literal (RFC 8259 escaping).
pub(crate) fn string<W: Write + ?Sized>(out: &mut W, s: &str) -> fmt::Result {
    out.write_char('"')?;
    string_body(out, s)?;
    out.write_char('"')
}

/// `s` escaped as inside a JSON string literal, without the quotes.
pub(crate) fn string_body<W: Write + ?Sized>(out: &mut W, s: &str) -> fmt::Result {
    for c in s.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if (c as u32) < 0x20 => write!(out, "\\u{:04x}", c as u32)?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

/// Writes a text field's value in place of the struct's own (`Ok(true)`), or declines
/// (`Ok(false)`: the struct's value is written).
pub(crate) type TextOverride<'a, W> =
    &'a mut dyn FnMut(&'static Field, &mut W) -> Result<bool, fmt::Error>;

/// `s` as one JSON object; text fields may be written by `text` instead (the live writer's
/// names and joined lists, which it does not copy into the struct).
pub(crate) fn object_with<S: Stats, W: Write>(
    out: &mut W,
    s: &S,
    text: TextOverride<'_, W>,
) -> fmt::Result {
    out.write_char('{')?;
    let mut first = true;
    let mut r = Ok(());
    s.for_each(&mut |f, v| {
        if r.is_err() {
            return;
        }
        r = (|| {
            if !first {
                out.write_char(',')?;
            }
            first = false;
            string(out, f.name)?;
            out.write_char(':')?;
            match v {
                Value::Text(t) => {
                    if !text(f, out)? {
                        string(out, t)?;
                    }
                }
                Value::U64(n) => write!(out, "{n}")?,
                Value::Bool(b) => out.write_str(if b { "true" } else { "false" })?,
            }
            Ok(())
        })();
    });
    r?;
    out.write_char('}')
}

fn object<S: Stats, W: Write>(out: &mut W, s: &S) -> fmt::Result {
    object_with(out, s, &mut |_, _| Ok(false))
}

fn array<S: Stats, W: Write>(out: &mut W, key: &str, items: &[S]) -> fmt::Result {
    array_open(out, key)?;
    for (i, s) in items.iter().enumerate() {
        if i > 0 {
            out.write_char(',')?;
        }
        object(out, s)?;
    }
    out.write_char(']')
}

/// `,"key":[` — an array of the snapshot object opens.
pub(crate) fn array_open<W: Write + ?Sized>(out: &mut W, key: &str) -> fmt::Result {
    out.write_char(',')?;
    string(out, key)?;
    out.write_str(":[")
}

/// `{"version":N,"global":` — the snapshot object opens.
pub(crate) fn snapshot_open<W: Write + ?Sized>(out: &mut W) -> fmt::Result {
    write!(out, "{{\"version\":{STATS_VERSION},\"global\":")
}

pub(crate) fn snapshot(s: &Snapshot) -> String {
    let mut out = String::with_capacity(1024 + 1024 * (s.zones.len() + s.pools.len()));
    // Writing into a String cannot fail.
    let _ = (|| {
        snapshot_open(&mut out)?;
        object(&mut out, &s.global)?;
        array(&mut out, "sources", &s.sources)?;
        array(&mut out, "zones", &s.zones)?;
        array(&mut out, "pools", &s.pools)?;
        out.write_char('}')
    })();
    out
}
