//! ABI documentation generated from the code: the tunables table, the stats lists and the control
//! socket's verbs and limits. The top of this crate's layers: it reads every module below and
//! nothing reads it but the tests and tools that check `docs/ABI/`.
//!
//! `docs/ABI/<level>/<file>` holds entries in the format of the Linux ABI files (see
//! `docs/ABI/README`), with `Version:` instead of `KernelVersion:`:
//!
//! ```text
//! What:        ebbtide.opt.squeeze_ms (env EBBTIDE_SQUEEZE_MS, EBBTIDE_CONF, API, control socket)
//! Date:        November 2026
//! Version:    0.1.0
//! Contact:    ebbtide developers
//! Description:
//!         ...
//! Users:        ...
//! ```
//!
//! [`expected_files`] renders what the code says; [`parse`] reads a file back. The test
//! `tests/all/abi_docs.rs` fails when the two disagree and rewrites the files with
//! `EBBTIDE_BLESS=1`, keeping each entry's `Date:` and `Users:` (the only hand-kept parts).

pub mod control;

use crate::options::parse::{self, canonical, human, range_text};
use crate::options::{AbiLevel, Kind, ENV_RESERVED, ENV_RESERVED_PREFIXES, TABLE};
use crate::stats::{self, Field, FieldType, GlobalStats, PoolStats, SourceStats, Stats, ZoneStats};

/// `Date:` of entries created now.
pub const DATE: &str = "November 2026";
/// `Contact:` of every entry.
pub const CONTACT: &str = "ebbtide developers";
/// `Users:` of entries nobody registered for yet.
pub const NO_USERS: &str =
    "None registered yet. Programs relying on this interface should add their name here.";

/// One documented interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Full `What:` text; its first word is the key.
    pub what: String,
    /// `Date:`.
    pub date: String,
    /// `Version:`.
    pub version: String,
    /// `Contact:`.
    pub contact: String,
    /// `Description:` (lines without their indentation).
    pub description: String,
    /// `Users:`.
    pub users: String,
}

impl Entry {
    /// The interface's dotted name (first word of `What:`).
    pub fn key(&self) -> &str {
        self.what.split_whitespace().next().unwrap_or("")
    }
}

/// One file under `docs/ABI/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct File {
    /// Path relative to `docs/ABI/`, e.g. `testing/options`.
    pub path: String,
    /// Entries in order.
    pub entries: Vec<Entry>,
}

fn entry(what: String, description: String, users: &str) -> Entry {
    Entry {
        what,
        date: DATE.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        contact: CONTACT.into(),
        description,
        users: users.into(),
    }
}

fn tunable_entries(level: AbiLevel) -> Vec<Entry> {
    TABLE
        .iter()
        .filter(|d| d.level == level)
        .map(|d| {
            let channels = if d.runtime {
                "EBBTIDE_CONF, API, control socket"
            } else {
                "EBBTIDE_CONF, API before start-up"
            };
            let what = format!("ebbtide.opt.{} (env {}, {channels})", d.name, d.env_name());
            let default = match d.kind {
                Kind::Bool | Kind::Count | Kind::Words(_) => canonical(d, d.default),
                _ => format!("{} ({})", canonical(d, d.default), human(d, d.default)),
            };
            let description = format!(
                "{}.\n\n{}\n\nDefault:\t{default}\nRange:\t\t{}\nUnit:\t\t{}\nSyntax:\t\t{}\nChangeable:\t{}",
                capitalise(d.summary),
                d.doc,
                range_text(d),
                d.kind.unit(),
                parse::expected(d),
                if d.runtime {
                    "at run time (takes effect at the next use; see options::generation)"
                } else {
                    "start-up only (environment, or the API before the allocator starts)"
                }
            );
            entry(what, description, NO_USERS)
        })
        .collect()
}

/// The setting channels themselves: syntax and rules shared by every tunable.
fn conf_entry() -> Entry {
    let reserved = ENV_RESERVED
        .iter()
        .map(|s| s.to_string())
        .chain(ENV_RESERVED_PREFIXES.iter().map(|p| format!("{p}*")))
        .collect::<Vec<_>>()
        .join(", ");
    entry(
        "ebbtide.conf (env EBBTIDE_CONF and EBBTIDE_<NAME>, API, control socket)".into(),
        format!(
            "How tunables are set. EBBTIDE_CONF holds name=value entries separated by \
             commas, e.g. EBBTIDE_CONF=squeeze_ms=20,max_cached_bytes=64M. A list value \
             may continue after a comma (sources=psi,cgroup1,checked=true), or use '+' or \
             '|' between its words. Each tunable also has its own variable EBBTIDE_<NAME> \
             (the name upper-cased), which wins over the same name in EBBTIDE_CONF.\n\n\
             The environment is read once, when the allocator starts (or at the first \
             options::init_from_env call). Every variable starting with EBBTIDE_ must name \
             a tunable or be one of: {reserved}.\n\n\
             Every batch (the whole environment, one set_many or apply_conf call, one \
             control-socket request) is all or nothing: if any entry is unknown, \
             malformed, out of range, given twice, start-up only after start-up, or breaks \
             a rule between tunables, nothing changes and every error is reported. Rules \
             between tunables: each psi_*_stall_us at most psi_window_us; nonzero headroom \
             levels ordered headroom_critical_pct <= headroom_moderate_pct <= \
             headroom_low_pct.\n\n\
             Reading back (options::get, the control socket) gives the canonical text: \
             integers without unit (the unit is in the name), true/false, word lists \
             comma-separated or none."
        ),
        NO_USERS,
    )
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn field_description(group: &str, json_path: &str, c_name: &str, f: &Field) -> String {
    let c_member = match f.ty {
        FieldType::Text => format!("char {}[EBBTIDE_STATS_TEXT_LEN]", f.name),
        _ => format!("uint64_t {}", f.name),
    };
    let prometheus = match f.kind {
        stats::FieldKind::Label => format!("label {group}=\"...\" on every {group} metric"),
        _ => stats::prometheus_name(group, f),
    };
    let mut d = format!(
        "{}\n\nKind:\t\t{}\nType:\t\t{}\nUnit:\t\t{}\nJSON:\t\t{json_path}.{}\nPrometheus:\t{prometheus}\nC:\t\tstruct {c_name}: {c_member}",
        f.description,
        f.kind.word(),
        f.ty.word(),
        f.unit.word(),
        f.name
    );
    if !f.column.is_empty() {
        d.push_str(&format!("\nTable column:\t{}", f.column));
    }
    d
}

fn stats_entries<S: Stats>(key: &str, json_path: &str, c_api: &[&str]) -> Vec<Entry> {
    S::fields()
        .into_iter()
        .map(|f| {
            let what = format!("{key}.{} (stats: JSON, Prometheus, table, C)", f.name);
            let users = if c_api.contains(&f.name) {
                "ebbtide C API (include/ebbtide.h) reads this JSON key."
            } else {
                NO_USERS
            };
            entry(
                what,
                field_description(S::GROUP, json_path, S::C_NAME, f),
                users,
            )
        })
        .collect()
}

/// Every file the code documents, with its entries as the code says they must read.
pub fn expected_files() -> Vec<File> {
    let mut files = Vec::new();
    for level in [
        AbiLevel::Stable,
        AbiLevel::Testing,
        AbiLevel::Obsolete,
        AbiLevel::Removed,
    ] {
        let mut entries = tunable_entries(level);
        if level == AbiLevel::Testing {
            entries.insert(0, conf_entry());
        }
        if !entries.is_empty() {
            files.push(File {
                path: format!("{}/options", level.dir()),
                entries,
            });
        }
    }
    files.push(File {
        path: "testing/stats-zone".into(),
        entries: stats_entries::<ZoneStats>(
            "ebbtide.zone.<zone>",
            "zones[]",
            stats::C_API_ZONE_FIELDS,
        ),
    });
    files.push(File {
        path: "testing/stats-pool".into(),
        entries: stats_entries::<PoolStats>("ebbtide.pool.<pool>", "pools[]", &[]),
    });
    let mut global = vec![entry(
        "ebbtide.stats.version (stats: JSON, C)".into(),
        format!(
            "Version of the snapshot layout; currently {}. Bumped when a field is removed or \
             changes meaning; adding fields does not bump it.\n\nJSON:\t\tversion (top level)\n\
             C:\t\t#define EBBTIDE_STATS_VERSION",
            stats::STATS_VERSION
        ),
        NO_USERS,
    )];
    global.extend(stats_entries::<GlobalStats>(
        "ebbtide.global",
        "global",
        stats::C_API_GLOBAL_FIELDS,
    ));
    global.extend(stats_entries::<SourceStats>(
        "ebbtide.source.<source>",
        "sources[]",
        &[],
    ));
    files.push(File {
        path: "testing/stats-global".into(),
        entries: global,
    });
    // The control socket's requests (generated from its verb table).
    files.push(control::file());
    files
}

/// Render entries in the file format (tab-separated tags, description indented by two tabs).
pub fn render(entries: &[Entry]) -> String {
    let mut out = String::new();
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("What:\t\t{}\n", e.what));
        out.push_str(&format!("Date:\t\t{}\n", e.date));
        out.push_str(&format!("Version:\t{}\n", e.version));
        out.push_str(&format!("Contact:\t{}\n", e.contact));
        out.push_str("Description:\n");
        for line in e.description.lines() {
            if line.is_empty() {
                out.push('\n');
            } else if line.contains('\t') {
                // "Label:\tvalue" lines stay whole.
                out.push_str(&format!("\t\t{line}\n"));
            } else {
                for wrapped in wrap(line, 72) {
                    out.push_str(&format!("\t\t{wrapped}\n"));
                }
            }
        }
        out.push_str(&format!("Users:\t\t{}\n", e.users));
    }
    out
}

const TAGS: [&str; 6] = ["What", "Date", "Version", "Contact", "Description", "Users"];

/// Parse a file in the format [`render`] writes (hand edits with other indentation are fine:
/// continuation lines are any lines not starting with a tag). Every entry must have all six
/// tags, `What:` first.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut raw: Vec<Vec<(&str, String)>> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let tag = TAGS
            .iter()
            .find(|t| line.strip_prefix(**t).is_some_and(|r| r.starts_with(':')));
        match tag {
            Some(&tag) => {
                let value = line[tag.len() + 1..].trim().to_string();
                if tag == "What" {
                    raw.push(Vec::new());
                }
                let Some(cur) = raw.last_mut() else {
                    return Err(format!("line {}: '{tag}:' before any 'What:'", n + 1));
                };
                if cur.iter().any(|(t, _)| *t == tag) {
                    return Err(format!("line {}: second '{tag}:' in one entry", n + 1));
                }
                cur.push((tag, value));
            }
            None => {
                if let Some((_, value)) = raw.last_mut().and_then(|e| e.last_mut()) {
                    value.push('\n');
                    value.push_str(line.trim());
                } else if !line.trim().is_empty() {
                    return Err(format!("line {}: text before the first 'What:'", n + 1));
                }
            }
        }
    }
    raw.into_iter()
        .map(|fields| {
            let get = |tag: &str| -> Result<String, String> {
                let v = fields
                    .iter()
                    .find(|(t, _)| *t == tag)
                    .map(|(_, v)| v.trim().to_string())
                    .ok_or_else(|| format!("entry '{}' has no '{tag}:'", fields[0].1))?;
                if v.is_empty() {
                    return Err(format!("entry '{}' has an empty '{tag}:'", fields[0].1));
                }
                Ok(v)
            };
            Ok(Entry {
                what: get("What")?,
                date: get("Date")?,
                version: get("Version")?,
                contact: get("Contact")?,
                description: get("Description")?,
                users: get("Users")?,
            })
        })
        .collect()
}

/// Split prose into lines of at most `width` characters (longer words stay whole).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// Normalise a description for comparison: one line per paragraph (paragraphs are separated
/// by blank lines), words separated by single spaces. Wrapping and indentation do not matter.
/// A paragraph of `Label:<tab>value` lines stays one line per label.
pub fn normalise(description: &str) -> String {
    let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
    description
        .split("\n\n")
        .flat_map(|p| {
            if p.contains('\t') {
                p.lines().map(words).collect::<Vec<_>>()
            } else {
                vec![words(p)]
            }
        })
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Differences between the documented `actual` entries of one file and the `expected` ones
/// from the code (ignoring `Date:` and `Users:`, which are kept by hand): one message each.
pub fn compare(path: &str, expected: &[Entry], actual: &[Entry]) -> Vec<String> {
    let mut problems = Vec::new();
    for e in expected {
        match actual.iter().find(|a| a.key() == e.key()) {
            None => problems.push(format!("{path}: {} is not documented", e.key())),
            Some(a) => {
                if a.what != e.what {
                    problems.push(format!(
                        "{path}: What: of {} reads '{}', code says '{}'",
                        e.key(),
                        a.what,
                        e.what
                    ));
                }
                if a.contact != e.contact {
                    problems.push(format!("{path}: Contact: of {} differs", e.key()));
                }
                let (want, got) = (normalise(&e.description), normalise(&a.description));
                if want != got {
                    let line = want
                        .lines()
                        .zip(got.lines().chain(std::iter::repeat("<missing>")))
                        .find(|(w, g)| w != g)
                        .map(|(w, g)| format!("documented '{g}', code says '{w}'"))
                        .unwrap_or_else(|| "extra lines in the documentation".into());
                    problems.push(format!("{path}: Description: of {}: {line}", e.key()));
                }
            }
        }
    }
    for a in actual {
        if !expected.iter().any(|e| e.key() == a.key()) {
            problems.push(format!(
                "{path}: {} is documented but not in the code",
                a.key()
            ));
        }
    }
    let mut keys: Vec<&str> = actual.iter().map(Entry::key).collect();
    keys.sort_unstable();
    for w in keys.windows(2) {
        if w[0] == w[1] {
            problems.push(format!("{path}: {} is documented twice", w[0]));
        }
    }
    problems
}

/// The file as the code would write it, keeping `Date:`, `Version:` and `Users:` of entries
/// already documented in `existing` (a parse of the current file, if any).
pub fn regenerate(file: &File, existing: &[Entry]) -> String {
    let entries: Vec<Entry> = file
        .entries
        .iter()
        .map(|e| match existing.iter().find(|a| a.key() == e.key()) {
            Some(a) => Entry {
                date: a.date.clone(),
                version: a.version.clone(),
                users: a.users.clone(),
                ..e.clone()
            },
            None => e.clone(),
        })
        .collect();
    render(&entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_parse_round_trip() {
        for f in expected_files() {
            let text = render(&f.entries);
            let back = parse(&text).unwrap();
            assert_eq!(back.len(), f.entries.len());
            assert!(compare(&f.path, &f.entries, &back).is_empty());
        }
    }

    #[test]
    fn compare_finds_disagreements() {
        let files = expected_files();
        let f = &files[0];
        let mut doc = f.entries.clone();
        let i = doc
            .iter()
            .position(|e| e.key() == "ebbtide.opt.squeeze_ms")
            .unwrap();
        doc[i].description = doc[i].description.replace("Default:\t10", "Default:\t11");
        doc.pop();
        doc.push(Entry {
            what: "ebbtide.opt.gone".into(),
            ..doc[1].clone()
        });
        let problems = compare(&f.path, &f.entries, &doc);
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].contains("Default: 11"), "{}", problems[0]);
    }

    #[test]
    fn parse_rejects_malformed() {
        assert!(parse("Date: x\n").is_err());
        assert!(parse("What: a\nDate: x\n").is_err());
        assert!(parse("What: a\nWhat: b\n").is_err());
        assert!(parse("What: a\nDate: x\nDate: y\n").is_err());
    }
}
