//! `docs/ABI/` must say what the code says.
//!
//! Fails when a tunable or a stats field is missing from the documentation, documented with a
//! different default, range, unit, kind or name, or documented but gone from the code.
//! `EBBTIDE_BLESS=1 cargo test -p ebbtide --test all abi_docs` rewrites the generated files,
//! keeping each entry's `Date:`, `Version:` and `Users:`.

use ebbtide::abi::{compare, expected_files, parse, regenerate};
use ebbtide::options::TABLE;
use ebbtide::stats::{GlobalStats, PoolStats, SourceStats, Stats, ZoneStats};
use std::path::{Path, PathBuf};

fn abi_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ABI")
}

fn bless() -> bool {
    std::env::var_os("EBBTIDE_BLESS").is_some_and(|v| v != "0")
}

#[test]
fn generated_docs_cover_everything() {
    let _turn = crate::serial::turn(module_path!());
    let files = expected_files();
    let count = |prefix: &str| -> usize {
        files
            .iter()
            .flat_map(|f| &f.entries)
            .filter(|e| e.key().starts_with(prefix))
            .count()
    };
    assert_eq!(count("ebbtide.opt."), TABLE.len());
    assert_eq!(count("ebbtide.zone."), ZoneStats::fields().len());
    assert_eq!(count("ebbtide.pool."), PoolStats::fields().len());
    assert_eq!(count("ebbtide.global."), GlobalStats::fields().len());
    assert_eq!(count("ebbtide.source."), SourceStats::fields().len());
    for d in TABLE.iter() {
        let e = files
            .iter()
            .flat_map(|f| &f.entries)
            .find(|e| e.key() == format!("ebbtide.opt.{}", d.name))
            .unwrap();
        assert!(e.what.contains(&d.env_name()));
    }
}

#[test]
fn docs_match_code() {
    let _turn = crate::serial::turn(module_path!());
    let dir = abi_dir();
    let mut problems = Vec::new();
    let expected = expected_files();
    for f in &expected {
        let path = dir.join(&f.path);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let existing = match parse(&text) {
            Ok(e) => e,
            Err(e) => {
                problems.push(format!("{}: {e}", f.path));
                Vec::new()
            }
        };
        if bless() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, regenerate(f, &existing)).unwrap();
            continue;
        }
        if text.is_empty() {
            problems.push(format!("{} is missing", f.path));
            continue;
        }
        problems.extend(compare(&f.path, &f.entries, &existing));
    }
    // No documented interface outside the generated files, except in removed/ (which documents
    // what is gone) and the READMEs.
    for level in ["stable", "testing", "obsolete", "removed"] {
        let readme = dir.join(level).join("README");
        if !readme.is_file() {
            problems.push(format!("{level}/README is missing"));
        }
        if level == "removed" {
            continue;
        }
        let Ok(read) = std::fs::read_dir(dir.join(level)) else {
            problems.push(format!("{level}/ is missing"));
            continue;
        };
        for file in read {
            let file = file.unwrap();
            let name = format!("{level}/{}", file.file_name().to_string_lossy());
            if name.ends_with("/README") || expected.iter().any(|f| f.path == name) {
                continue;
            }
            let text = std::fs::read_to_string(file.path()).unwrap_or_default();
            if text.lines().any(|l| l.starts_with("What:")) {
                problems.push(format!(
                    "{name} documents interfaces the code does not generate"
                ));
            }
        }
    }
    if !dir.join("README").is_file() {
        problems.push("README is missing".into());
    }
    assert!(
        problems.is_empty(),
        "docs/ABI disagrees with the code ({} problems; regenerate with EBBTIDE_BLESS=1 \
         cargo test -p ebbtide --test all abi_docs):\n{}",
        problems.len(),
        problems.join("\n")
    );
}
