//! Checks `include/ebbtide.h` against this crate and the core: the stats block is
//! `ebbtide::stats::c_header()` verbatim; every constant, member offset and struct size the
//! header gives is what the Rust side uses (a generated C program prints them); the version.
//! Symbols are checked against the built library in `tests/c_tests.rs`.

use super::*;
use ebbtide::stats::{PoolStatsC, SourceStatsC};
use std::path::{Path, PathBuf};
use std::process::Command;

const BEGIN: &str = "/* BEGIN ebbtide::stats::c_header() */\n";
const END: &str = "/* END ebbtide::stats::c_header() */\n";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn header_path() -> PathBuf {
    root().join("include/ebbtide.h")
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// The stats block of the header is `c_header()`; `EBBTIDE_BLESS=1` rewrites it.
#[test]
fn header_stats_block() {
    let path = header_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find(BEGIN).expect("BEGIN marker in ebbtide.h") + BEGIN.len();
    let end = text.find(END).expect("END marker in ebbtide.h");
    let want = ebbtide::stats::c_header();
    if text[start..end] != want {
        if std::env::var_os("EBBTIDE_BLESS").is_some() {
            let new = format!("{}{}{}", &text[..start], want, &text[end..]);
            std::fs::write(&path, new).unwrap();
            return;
        }
        panic!(
            "include/ebbtide.h: the stats block differs from ebbtide::stats::c_header(); \
             run `EBBTIDE_BLESS=1 cargo test -p ebbtide-capi header_stats_block`"
        );
    }
}

/// `#define EBB_VERSION "x.y.z"` is the crate version.
#[test]
fn header_version() {
    let text = std::fs::read_to_string(header_path()).unwrap();
    let want = format!("#define EBB_VERSION \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(text.contains(&want), "ebbtide.h lacks `{want}`");
    assert_eq!(VERSION.trim_end_matches('\0'), env!("CARGO_PKG_VERSION"));
}

/// What the C side must print, line by line.
fn expected() -> Vec<String> {
    let mut out = Vec::new();
    let consts: &[(&str, i64)] = &[
        ("EBB_PRESSURE_NONE", EBB_PRESSURE_NONE.into()),
        ("EBB_PRESSURE_LOW", EBB_PRESSURE_LOW.into()),
        ("EBB_PRESSURE_MODERATE", EBB_PRESSURE_MODERATE.into()),
        ("EBB_PRESSURE_CRITICAL", EBB_PRESSURE_CRITICAL.into()),
        ("EBB_RECLAIM_TRIM", Request::Trim as i64),
        ("EBB_RECLAIM_DRAIN", Request::Drain as i64),
        ("EBB_RECLAIM_DRAIN_CPU", Request::DrainCpu as i64),
        ("EBB_ZONE_NOTRIM", ZoneFlags::NOTRIM.0.into()),
        ("EBB_ZONE_NOBUCKET", ZoneFlags::NOBUCKET.0.into()),
        ("EBB_ZONE_CHECKED", ZoneFlags::CHECKED.0.into()),
        ("EBB_ZONE_ZERO", ZoneFlags::ZERO.0.into()),
        ("EBB_LIMIT_FAIL", EBB_LIMIT_FAIL.into()),
        ("EBB_LIMIT_WAIT", EBB_LIMIT_WAIT.into()),
        ("EBB_LOWMEM_MAX", EBB_LOWMEM_MAX as i64),
        (
            "EBBTIDE_STATS_VERSION",
            ebbtide::stats::STATS_VERSION.into(),
        ),
        ("EBBTIDE_STATS_TEXT_LEN", ebbtide::stats::C_TEXT_LEN as i64),
    ];
    for (n, v) in consts {
        out.push(format!("const {n} {v}"));
    }
    // The issue fixes these values; the Rust constants must agree too.
    assert_eq!(
        (
            EBB_PRESSURE_NONE,
            EBB_PRESSURE_LOW,
            EBB_PRESSURE_MODERATE,
            EBB_PRESSURE_CRITICAL
        ),
        (0, 1, 2, 3)
    );
    // ... and are ebbtide::Level's values, both ways.
    for (c, l) in [
        (EBB_PRESSURE_NONE, Level::Normal),
        (EBB_PRESSURE_LOW, Level::Low),
        (EBB_PRESSURE_MODERATE, Level::Moderate),
        (EBB_PRESSURE_CRITICAL, Level::Critical),
    ] {
        assert_eq!(l as c_int, c);
        assert_eq!(Level::from_raw(c), Some(l));
    }
    assert_eq!(Level::from_raw(-1), None);
    assert_eq!(Level::from_raw(4), None);
    assert_eq!(
        (EBB_RECLAIM_TRIM, EBB_RECLAIM_DRAIN, EBB_RECLAIM_DRAIN_CPU),
        (1, 2, 3)
    );
    assert_eq!(
        (
            EBB_ZONE_NOTRIM,
            EBB_ZONE_NOBUCKET,
            EBB_ZONE_CHECKED,
            EBB_ZONE_ZERO
        ),
        (1, 2, 4, 8)
    );
    out.push(format!(
        "sizeof ebb_zone_options {}",
        core::mem::size_of::<EbbZoneOptions>()
    ));
    for (m, off, size) in EbbZoneOptions::members() {
        out.push(format!("member ebb_zone_options {m} {off} {size}"));
    }
    type Group = (&'static str, usize, Vec<(&'static str, usize)>);
    let stats: [Group; 4] = [
        (
            "ebbtide_zone_stats",
            core::mem::size_of::<ZoneStatsC>(),
            ZoneStatsC::member_offsets(),
        ),
        (
            "ebbtide_pool_stats",
            core::mem::size_of::<PoolStatsC>(),
            PoolStatsC::member_offsets(),
        ),
        (
            "ebbtide_global_stats",
            core::mem::size_of::<GlobalStatsC>(),
            GlobalStatsC::member_offsets(),
        ),
        (
            "ebbtide_source_stats",
            core::mem::size_of::<SourceStatsC>(),
            SourceStatsC::member_offsets(),
        ),
    ];
    for (s, size, members) in stats {
        out.push(format!("sizeof {s} {size}"));
        for (m, off) in members {
            out.push(format!("offset {s} {m} {off}"));
        }
    }
    out
}

/// A C program that prints, from the header, the lines of [`expected`].
fn c_program(lines: &[String]) -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"ebbtide.h\"\n\
         #define MSIZE(s, m) sizeof(((struct s *)0)->m)\nint main(void) {\n",
    );
    for l in lines {
        let w: Vec<&str> = l.split(' ').collect();
        let stmt = match w[0] {
            "const" => format!(
                "printf(\"const {0} %lld\\n\", (long long)({0}));",
                w[1]
            ),
            "sizeof" => format!(
                "printf(\"sizeof {0} %zu\\n\", sizeof(struct {0}));",
                w[1]
            ),
            "member" => format!(
                "printf(\"member {0} {1} %zu %zu\\n\", offsetof(struct {0}, {1}), MSIZE({0}, {1}));",
                w[1], w[2]
            ),
            "offset" => format!(
                "printf(\"offset {0} {1} %zu\\n\", offsetof(struct {0}, {1}));",
                w[1], w[2]
            ),
            other => unreachable!("{other}"),
        };
        c.push_str("    ");
        c.push_str(&stmt);
        c.push('\n');
    }
    c.push_str("    return 0;\n}\n");
    c
}

/// Constants, struct sizes and member offsets as compiled from the header equal the Rust side.
#[test]
fn header_constants_and_layouts() {
    let want = expected();
    let dir = std::env::temp_dir().join(format!("ebbtide-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("abi_check.c");
    let exe = dir.join("abi_check");
    std::fs::write(&src, c_program(&want)).unwrap();
    let out = Command::new(cc())
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(root().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "abi_check.c does not compile against ebbtide.h (a member or constant is missing?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let got: Vec<String> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let diff: Vec<String> = want
        .iter()
        .zip(&got)
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("  Rust: {w}\n  C:    {g}"))
        .collect();
    assert!(
        diff.is_empty() && want.len() == got.len(),
        "ebbtide.h disagrees with the Rust side:\n{}",
        diff.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The header compiles on its own as C99, C11 and C17, and as C++11 when a C++ compiler is
/// installed.
#[test]
fn header_compiles_standalone() {
    let dir = std::env::temp_dir().join(format!("ebbtide-hdr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("h.c");
    std::fs::write(
        &src,
        "#include \"ebbtide.h\"\nint main(void) { return 0; }\n",
    )
    .unwrap();
    for std in ["-std=c99", "-std=c11", "-std=c17"] {
        let out = Command::new(cc())
            .args([
                std,
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
                "-I",
            ])
            .arg(root().join("include"))
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{std}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // C++ (the extern "C" block), when a C++ compiler is installed.
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let src = dir.join("h.cc");
    std::fs::write(
        &src,
        "#include \"ebbtide.h\"\nint main() { return ebb_version() == nullptr; }\n",
    )
    .unwrap();
    if let Ok(out) = Command::new(&cxx)
        .args([
            "-std=c++11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
            "-I",
        ])
        .arg(root().join("include"))
        .arg(&src)
        .output()
    {
        assert!(
            out.status.success(),
            "C++: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
