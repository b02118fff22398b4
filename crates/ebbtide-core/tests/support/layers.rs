//! The layer checker shared by the crates' `layers` tests (included with `#[path]`): the
//! crate's documented layer order (the line of `src/lib.rs` starting "Layer order (bottom
//! first):") against the `crate::…` paths of its modules' code.

use std::collections::BTreeMap;
use std::path::Path;

/// The order from the doc line "Layer order (bottom first): a, b, c."
fn documented_order(lib: &str) -> Vec<String> {
    let line = lib
        .lines()
        .find(|l| l.contains("Layer order (bottom first):"))
        .expect("src/lib.rs documents the layer order");
    let list = line.split("):").nth(1).unwrap();
    list.trim()
        .trim_end_matches('.')
        .split(',')
        .map(|s| s.trim().trim_matches('`').to_string())
        .collect()
}

/// Braces that open (positive) or close (negative) code blocks on a line, not counting those in
/// string or character literals.
fn brace_delta(code: &str) -> i64 {
    let b = code.as_bytes();
    let (mut d, mut i) = (0i64, 0usize);
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            // A character literal `'{'`, `'}'` or `'\''` (a lifetime has no closing quote).
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'') => i += 3,
            b'{' => d += 1,
            b'}' => d -= 1,
            _ => {}
        }
        i += 1;
    }
    d
}

/// Code lines of a file: no comments, and no item under `#[cfg(test)]`/`#[cfg(all(test …`
/// (only that item: the code after it is read again).
pub fn code_lines(src: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    // Set by a test-only attribute until its item ends: the depth of braces seen in it so far,
    // and whether its body has opened.
    let mut skipping: Option<(i64, bool)> = None;
    for (i, l) in src.lines().enumerate() {
        let t = l.trim_start();
        if t.starts_with("//") {
            continue;
        }
        let code = match l.find("//") {
            Some(k) => &l[..k],
            None => l,
        };
        if skipping.is_none() && (t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test"))
        {
            skipping = Some((0, false));
            continue;
        }
        if let Some((depth, opened)) = skipping.as_mut() {
            let ct = code.trim();
            if !*opened && ct.starts_with("#[") {
                continue; // further attributes of the same item
            }
            let delta = brace_delta(code);
            *depth += delta;
            *opened |= code.contains('{');
            // The item ends where its braces close, or at its `;` when it has no body
            // (`mod tests;`, a `use`).
            if (*opened && *depth <= 0) || (!*opened && ct.ends_with(';')) {
                skipping = None;
            }
            continue;
        }
        out.push((i + 1, code.to_string()));
    }
    out
}

fn files_of(src: &Path, module: &str) -> Vec<std::path::PathBuf> {
    let single = src.join(format!("{module}.rs"));
    if single.exists() {
        return vec![single];
    }
    let dir = src.join(module);
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("module {module}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    v.sort();
    v
}

/// Checks the crate whose `src` is `src`: panics with every module that reaches up.
pub fn check(src: &Path) {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let order = documented_order(&lib);
    let rank: BTreeMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    // Every module declared in lib.rs is in the order, and the other way round.
    let declared: Vec<String> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
                .or_else(|| l.strip_prefix("mod "))?;
            // File modules only (`mod x;`); an inline `mod x { … }` is part of the root.
            rest.strip_suffix(';').map(str::to_string)
        })
        .collect();
    let mut d = declared.clone();
    d.sort();
    let mut o = order.clone();
    o.sort();
    assert_eq!(
        d, o,
        "modules declared in lib.rs vs the documented layer order"
    );

    let mut problems = Vec::new();
    for m in &order {
        for f in files_of(src, m) {
            let text = std::fs::read_to_string(&f).unwrap();
            for (n, line) in code_lines(&text) {
                if line.contains("crate::{") {
                    problems.push(format!(
                        "{}:{n}: grouped `crate::{{…}}` import (name one module per path)",
                        f.display()
                    ));
                }
                let mut rest = line.as_str();
                while let Some(k) = rest.find("crate::") {
                    let after = &rest[k + 7..];
                    let name: String = after
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if let Some(&r) = rank.get(name.as_str()) {
                        if name != *m && r >= rank[m.as_str()] {
                            problems.push(format!(
                                "{}:{n}: `{m}` reaches up to `{name}`: {}",
                                f.display(),
                                line.trim()
                            ));
                        }
                    }
                    rest = after;
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "layer violations:\n{}",
        problems.join("\n")
    );
}
