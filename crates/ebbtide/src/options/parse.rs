//! Parsers and formatters for tunable values and for `EBBTIDE_CONF`.
//!
//! Every function here is total: any input string gives a value or an error, never a panic
//! (checked by the property tests in `tests/all/options_props.rs` and the `conf_parser` fuzz target).

use super::error::{OptionError, OptionErrorKind};
use super::table::{lookup, Kind, TunableDef, TABLE};

/// Parse `text` as a value of `def`, including the range check.
pub fn parse_value(def: &'static TunableDef, text: &str) -> Result<u64, OptionErrorKind> {
    let s = text.trim();
    let bad = |expected: String| OptionErrorKind::BadSyntax {
        name: def.name,
        value: text.to_string(),
        expected,
    };
    let out_of_range = || OptionErrorKind::OutOfRange {
        name: def.name,
        value: text.to_string(),
        range: range_text(def),
    };
    let v = match def.kind {
        Kind::Bool => match s.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => 1,
            "false" | "0" | "no" | "off" => 0,
            _ => return Err(bad(expected(def))),
        },
        Kind::Count => match parse_uint(s) {
            Num::Ok(v) => v,
            Num::Overflow => return Err(out_of_range()),
            Num::Bad => return Err(bad(expected(def))),
        },
        Kind::Percent => {
            let digits = s.strip_suffix('%').map(str::trim_end).unwrap_or(s);
            match parse_uint(digits) {
                Num::Ok(v) => v,
                Num::Overflow => return Err(out_of_range()),
                Num::Bad => return Err(bad(expected(def))),
            }
        }
        Kind::Millis | Kind::Micros | Kind::Bytes => {
            let (num, suffix) = split_number(s);
            let n = match parse_uint(num) {
                Num::Ok(v) => v,
                Num::Overflow => return Err(out_of_range()),
                Num::Bad => return Err(bad(expected(def))),
            };
            let suffix = suffix.trim();
            let scaled = match def.kind {
                Kind::Bytes => bytes_multiplier(suffix).map(|m| n.checked_mul(m).map(Ok)),
                Kind::Millis => duration_in(suffix, 1_000).map(|r| r.apply(n)),
                _ => duration_in(suffix, 1).map(|r| r.apply(n)),
            };
            match scaled {
                None => return Err(bad(expected(def))),
                Some(None) => return Err(out_of_range()),
                Some(Some(Ok(v))) => v,
                Some(Some(Err(()))) => {
                    return Err(bad(format!("a whole number of {}", def.kind.unit())))
                }
            }
        }
        Kind::Words(words) => parse_words(words, s).map_err(bad)?,
    };
    if v < def.min || v > def.max {
        return Err(out_of_range());
    }
    Ok(v)
}

/// What a value of `def` must look like, for error messages.
pub fn expected(def: &TunableDef) -> String {
    match def.kind {
        Kind::Bool => "true or false (also 1/0, yes/no, on/off)".into(),
        Kind::Count => "a whole number".into(),
        Kind::Percent => "a whole number of percent, optionally followed by '%'".into(),
        Kind::Millis => {
            "a whole number of milliseconds, optionally with a unit (us, ms, s, min)".into()
        }
        Kind::Micros => "a whole number of microseconds, optionally with a unit (us, ms, s)".into(),
        Kind::Bytes => {
            "a whole number of bytes, optionally with a binary suffix (K, M, G, T or KiB, MiB, GiB, TiB)"
                .into()
        }
        Kind::Words(words) => format!(
            "'none' or a list of words from {{{}}} separated by ',', '+' or '|'",
            words.join(", ")
        ),
    }
}

/// The accepted range with units, e.g. `0ms..=60000ms` or `0..=256TiB`.
pub fn range_text(def: &TunableDef) -> String {
    match def.kind {
        Kind::Bool => "false or true".into(),
        Kind::Words(words) => format!("'none' or any of {}", words.join(", ")),
        _ => format!("{}..={}", human(def, def.min), human(def, def.max)),
    }
}

/// The canonical text of a stored value: what `options::get` returns. Integers carry no unit
/// (the unit is in the name); lists are comma-separated in table order. Parsing the result
/// with [`parse_value`] gives `v` back.
pub fn canonical(def: &TunableDef, v: u64) -> String {
    match def.kind {
        Kind::Bool => if v != 0 { "true" } else { "false" }.into(),
        Kind::Words(words) => words_text(words, v, ","),
        _ => v.to_string(),
    }
}

/// A value for people: with its unit (`10ms`, `64MiB`, `20%`).
pub fn human(def: &TunableDef, v: u64) -> String {
    match def.kind {
        Kind::Bool | Kind::Count => canonical(def, v),
        Kind::Words(words) => words_text(words, v, ","),
        Kind::Millis => format!("{v}ms"),
        Kind::Micros => format!("{v}us"),
        Kind::Percent => format!("{v}%"),
        Kind::Bytes => {
            const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
            for (unit, shift) in UNITS {
                if v != 0 && v.trailing_zeros() >= shift {
                    return format!("{}{unit}", v >> shift);
                }
            }
            format!("{v}")
        }
    }
}

fn words_text(words: &[&str], mask: u64, sep: &str) -> String {
    let picked: Vec<&str> = words
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, w)| *w)
        .collect();
    if picked.is_empty() {
        "none".into()
    } else {
        picked.join(sep)
    }
}

fn parse_words(words: &[&str], s: &str) -> Result<u64, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(0);
    }
    let mut mask = 0u64;
    let mut any = false;
    for w in s.split([',', '+', '|']) {
        let w = w.trim();
        if w.is_empty() {
            continue;
        }
        any = true;
        match words.iter().position(|x| x.eq_ignore_ascii_case(w)) {
            Some(i) => mask |= 1 << i,
            None => {
                let mut msg = format!(
                    "'none' or a list of words from {{{}}}; '{w}' is not one of them",
                    words.join(", ")
                );
                if let Some(s) = suggestions(w, words.iter().copied()).first() {
                    msg.push_str(&format!(" (did you mean '{s}'?)"));
                }
                return Err(msg);
            }
        }
    }
    if !any {
        return Err(format!(
            "'none' or a list of words from {{{}}}, not an empty list",
            words.join(", ")
        ));
    }
    Ok(mask)
}

enum Num {
    Ok(u64),
    Overflow,
    Bad,
}

/// Digits with optional `_` separators between them.
fn parse_uint(s: &str) -> Num {
    let s = s.trim();
    if s.is_empty() || s.starts_with('_') || s.ends_with('_') {
        return Num::Bad;
    }
    let mut v: u64 = 0;
    let mut overflow = false;
    for c in s.chars() {
        match c {
            '_' => continue,
            '0'..='9' => {
                let d = u64::from(c as u8 - b'0');
                match v.checked_mul(10).and_then(|x| x.checked_add(d)) {
                    Some(x) => v = x,
                    None => overflow = true,
                }
            }
            _ => return Num::Bad,
        }
    }
    if overflow {
        Num::Overflow
    } else {
        Num::Ok(v)
    }
}

/// Split `123ms` into `("123", "ms")`.
fn split_number(s: &str) -> (&str, &str) {
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '_'))
        .map_or(s.len(), |(i, _)| i);
    s.split_at(end)
}

fn bytes_multiplier(suffix: &str) -> Option<u64> {
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        _ => return None,
    };
    Some(1u64 << shift)
}

/// A conversion from a written duration unit into the tunable's base unit, as a ratio.
struct Ratio {
    mul: u64,
    div: u64,
}

impl Ratio {
    /// `None`: overflow. `Some(Err)`: not a whole number of base units.
    fn apply(&self, n: u64) -> Option<Result<u64, ()>> {
        let x = n.checked_mul(self.mul)?;
        Some(if x % self.div == 0 {
            Ok(x / self.div)
        } else {
            Err(())
        })
    }
}

/// `base_us`: microseconds per base unit (1000 for milliseconds, 1 for microseconds).
fn duration_in(suffix: &str, base_us: u64) -> Option<Ratio> {
    let unit_us: u64 = match suffix {
        "us" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        "min" if base_us >= 1_000 => 60_000_000,
        "" => base_us,
        _ => return None,
    };
    Some(if unit_us >= base_us {
        Ratio {
            mul: unit_us / base_us,
            div: 1,
        }
    } else {
        Ratio {
            mul: 1,
            div: base_us / unit_us,
        }
    })
}

/// Levenshtein distance on ASCII-lower-cased text (small inputs only).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The closest candidates to `word` by edit distance: all at the smallest distance, if that
/// distance is at most a third of the word's length (at least 2), at most three.
pub fn suggestions<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    if word.chars().count() > 64 {
        return Vec::new();
    }
    let limit = (word.chars().count() / 3).max(2);
    let mut best: Vec<(usize, &str)> = candidates
        .map(|c| (edit_distance(word, c), c))
        .filter(|&(d, _)| d <= limit)
        .collect();
    let Some(min) = best.iter().map(|&(d, _)| d).min() else {
        return Vec::new();
    };
    best.retain(|&(d, _)| d == min);
    best.truncate(3);
    best.into_iter().map(|(_, c)| c).collect()
}

/// Closest tunable names to `name`.
pub fn name_suggestions(name: &str) -> Vec<&'static str> {
    suggestions(name, TABLE.iter().map(|d| d.name))
}

/// One parsed, validated `name=value` assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// Which tunable.
    pub def: &'static TunableDef,
    /// The stored value.
    pub value: u64,
}

/// Resolve `name` and parse `value` (no start-up or cross-tunable checks).
pub fn parse_assignment(name: &str, value: &str) -> Result<Assignment, OptionErrorKind> {
    let name = name.trim();
    let def = lookup(name).ok_or_else(|| OptionErrorKind::UnknownName {
        name: name.to_string(),
        suggestions: name_suggestions(name),
    })?;
    Ok(Assignment {
        def,
        value: parse_value(def, value)?,
    })
}

/// Parse the `EBBTIDE_CONF` syntax: `name=value` entries separated by commas. A list value may
/// go on after a comma (`sources=psi,cgroup1,checked=true`): a piece without `=` continues
/// the previous entry when that entry is a list of words. Empty pieces are ignored.
///
/// Returns every valid assignment, or every error found (each with its origin
/// `"<origin> entry N"`); a name given twice is an error.
pub fn parse_conf(conf: &str, origin: &str) -> Result<Vec<Assignment>, Vec<OptionError>> {
    // Group pieces into entries first, so that list continuations are joined.
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut errors = Vec::new();
    let mut last_is_list = false;
    for piece in conf.split(',') {
        if piece.trim().is_empty() {
            continue;
        }
        match piece.split_once('=') {
            Some((name, value)) => {
                let name = name.trim();
                last_is_list = matches!(lookup(name).map(|d| d.kind), Some(Kind::Words(_)));
                entries.push((name.to_string(), value.to_string()));
            }
            None if last_is_list => {
                if let Some(last) = entries.last_mut() {
                    last.1.push(',');
                    last.1.push_str(piece);
                }
            }
            None => {
                errors.push(OptionError::new(
                    OptionErrorKind::MissingEquals {
                        entry: piece.trim().to_string(),
                    },
                    format!("{origin} entry {}", entries.len() + errors.len() + 1),
                ));
            }
        }
    }
    let mut out: Vec<Assignment> = Vec::new();
    for (i, (name, value)) in entries.iter().enumerate() {
        let here = format!("{origin} entry {} '{name}={}'", i + 1, value.trim());
        match parse_assignment(name, value) {
            Ok(a) => {
                if out.iter().any(|b| std::ptr::eq(b.def, a.def)) {
                    errors.push(OptionError::new(
                        OptionErrorKind::Duplicate { name: a.def.name },
                        here,
                    ));
                } else {
                    out.push(a);
                }
            }
            Err(kind) => errors.push(OptionError::new(kind, here)),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::table::{def, Tunable};

    fn p(t: Tunable, s: &str) -> Result<u64, OptionErrorKind> {
        parse_value(def(t), s)
    }

    #[test]
    fn durations() {
        assert_eq!(p(Tunable::SqueezeMs, "10"), Ok(10));
        assert_eq!(p(Tunable::SqueezeMs, " 10ms "), Ok(10));
        assert_eq!(p(Tunable::SqueezeMs, "2s"), Ok(2000));
        assert_eq!(p(Tunable::SqueezeMs, "1min"), Ok(60_000));
        assert_eq!(p(Tunable::SqueezeMs, "3000us"), Ok(3));
        assert!(matches!(
            p(Tunable::SqueezeMs, "1500us"),
            Err(OptionErrorKind::BadSyntax { .. })
        ));
        assert!(matches!(
            p(Tunable::SqueezeMs, "2min"),
            Err(OptionErrorKind::OutOfRange { .. })
        ));
        assert_eq!(p(Tunable::PsiWindowUs, "2s"), Ok(2_000_000));
        assert!(p(Tunable::PsiWindowUs, "1min").is_err());
        assert!(matches!(
            p(Tunable::SqueezeMs, "ten"),
            Err(OptionErrorKind::BadSyntax { .. })
        ));
        assert!(matches!(
            p(Tunable::SqueezeMs, "99999999999999999999999"),
            Err(OptionErrorKind::OutOfRange { .. })
        ));
    }

    #[test]
    fn bytes() {
        let t = Tunable::MaxCachedBytes;
        assert_eq!(p(t, "0"), Ok(0));
        assert_eq!(p(t, "64K"), Ok(64 << 10));
        assert_eq!(p(t, "64 KiB"), Ok(64 << 10));
        assert_eq!(p(t, "3M"), Ok(3 << 20));
        assert_eq!(p(t, "1g"), Ok(1 << 30));
        assert_eq!(p(t, "2GiB"), Ok(2 << 30));
        assert_eq!(p(t, "256TiB"), Ok(1 << 48));
        assert!(matches!(
            p(t, "257T"),
            Err(OptionErrorKind::OutOfRange { .. })
        ));
        assert!(matches!(
            p(t, "1KB"),
            Err(OptionErrorKind::BadSyntax { .. })
        ));
        assert!(matches!(p(t, "-1"), Err(OptionErrorKind::BadSyntax { .. })));
        assert_eq!(human(def(t), 3 << 20), "3MiB");
        assert_eq!(human(def(t), 1000), "1000");
        assert_eq!(range_text(def(t)), "0..=256TiB");
    }

    #[test]
    fn bools_percent_counts() {
        assert_eq!(p(Tunable::Checked, "YES"), Ok(1));
        assert_eq!(p(Tunable::Checked, "off"), Ok(0));
        assert!(p(Tunable::Checked, "2").is_err());
        assert_eq!(p(Tunable::HeadroomLowPct, "20%"), Ok(20));
        assert!(matches!(
            p(Tunable::HeadroomLowPct, "101"),
            Err(OptionErrorKind::OutOfRange { .. })
        ));
        assert_eq!(p(Tunable::MaxBufferPages, "4_294_967_296"), Ok(1 << 32));
        assert!(p(Tunable::MaxBufferPages, "4294967297").is_err());
        assert!(p(Tunable::MaxBufferPages, "_1").is_err());
        assert!(p(Tunable::MaxBufferPages, "").is_err());
    }

    #[test]
    fn words() {
        let t = Tunable::Sources;
        assert_eq!(p(t, "none"), Ok(0));
        assert_eq!(p(t, "psi"), Ok(0b10));
        assert_eq!(p(t, "psi+systemd"), Ok(0b11));
        assert_eq!(p(t, "budget|psi,psi"), Ok(0b100010));
        let Err(OptionErrorKind::BadSyntax { expected, .. }) = p(t, "psy") else {
            panic!("psy accepted")
        };
        assert!(expected.contains("did you mean 'psi'"), "{expected}");
        assert!(p(t, ",").is_err());
        assert_eq!(canonical(def(t), 0b100010), "psi,budget");
        assert_eq!(canonical(def(t), 0), "none");
    }

    #[test]
    fn edit_distances_and_suggestions() {
        assert_eq!(edit_distance("squeez_ms", "squeeze_ms"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("KITTEN", "sitting"), 3);
        assert_eq!(name_suggestions("squeez_ms"), vec!["squeeze_ms"]);
        assert_eq!(name_suggestions("SQUEEZE_MS"), vec!["squeeze_ms"]);
        assert!(name_suggestions("completely_unrelated").is_empty());
    }

    #[test]
    fn conf_lists_continue_after_commas() {
        let a = parse_conf("sources=psi,cgroup1,checked=true", "EBBTIDE_CONF").unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].value, 0b110);
        assert_eq!(a[1].value, 1);
        assert_eq!(parse_conf(" , ,", "x"), Ok(vec![]));
    }

    #[test]
    fn conf_reports_every_error() {
        let errs = parse_conf(
            "squeez_ms=5,trim_interval_ms=1,checked,max_cached_bytes=1Q,squeeze_ms=5,squeeze_ms=6",
            "EBBTIDE_CONF",
        )
        .unwrap_err();
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(errs.len(), 5, "{text:#?}");
        assert!(text.iter().any(|t| t.contains("did you mean 'squeeze_ms'")));
        assert!(text.iter().any(|t| t.contains("100ms..=3600000ms")));
        assert!(text.iter().any(|t| t.contains("expected 'name=value'")));
        assert!(text.iter().any(|t| t.contains("binary suffix")));
        assert!(text.iter().any(|t| t.contains("more than once")));
    }
}
