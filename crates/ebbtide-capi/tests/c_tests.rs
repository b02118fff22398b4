//! Builds `libebbtide.so` / `libebbtide.a` (a nested `cargo build -p ebbtide-capi` into this
//! target directory, test profile), then with the system C compiler (`$CC`, default `cc`):
//!
//! * compiles `tests/c/*.c` with `-std=c11 -Wall -Wextra -Werror -pedantic` against the shared
//!   library and runs them;
//! * compiles them again with `-fsanitize=address,undefined -fno-sanitize-recover=all` against
//!   the static library and runs them (leak detection on);
//! * builds and runs the example `examples/c/bufpool.c` (shared and static);
//! * checks that the exported `ebb_*` symbols (`nm -D`, and `nm` on the archive) are exactly the
//!   functions `include/ebbtide.h` declares;
//! * installs with `scripts/install-capi.sh` into a `DESTDIR` and builds the example with
//!   `pkg-config --cflags --libs ebbtide` from there.
//!
//! Any failure fails `cargo test`. Header constants and layouts are checked by the unit tests
//! in `src/abi_check.rs`.

#[path = "../../ebbtide-malloc/tests/support/nested_build.rs"]
mod nested_build;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Libraries the static archive needs (`--print native-static-libs`).
const STATIC_LIBS: &[&str] = &["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"];
const CFLAGS: &[&str] = &["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-g"];
const SANITIZE: &[&str] = &[
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
];
/// Functions the issue asks for: all must be declared and exported.
const REQUIRED: &[&str] = &[
    "ebb_zone_create",
    "ebb_zone_alloc",
    "ebb_zone_free",
    "ebb_zone_destroy",
    "ebb_pool_create",
    "ebb_pool_get",
    "ebb_pool_put",
    "ebb_pool_destroy",
    "ebb_pressure_notify",
    "ebb_lowmem_register",
    "ebb_lowmem_unregister",
    "ebb_reclaim",
    "ebb_stats_json",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

fn show(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Builds the library once per test process; returns the directory holding it.
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = nested_build::cargo_build(&root(), "ebbtide-capi", "test", "debug");
        for f in ["libebbtide.so", "libebbtide.a"] {
            assert!(dir.join(f).exists(), "{} missing", dir.join(f).display());
        }
        dir
    })
}

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("capi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[derive(Clone, Copy, PartialEq)]
enum Link {
    Shared,
    Static,
    StaticSanitized,
}

/// Compiles `sources` into `exe` against the fresh library.
fn compile(sources: &[PathBuf], exe: &Path, link: Link) {
    let lib = lib_dir();
    let mut cmd = Command::new(cc());
    cmd.args(CFLAGS)
        .arg("-pthread")
        .arg("-I")
        .arg(root().join("include"));
    cmd.arg("-I").arg(root().join("tests/c"));
    if link == Link::StaticSanitized {
        cmd.args(SANITIZE);
    }
    cmd.args(sources).arg("-o").arg(exe);
    match link {
        Link::Shared => {
            cmd.arg("-L")
                .arg(lib)
                .arg("-lebbtide")
                .arg(format!("-Wl,-rpath,{}", lib.display()));
        }
        Link::Static | Link::StaticSanitized => {
            cmd.arg(lib.join("libebbtide.a")).args(STATIC_LIBS);
        }
    }
    let out = cmd.output().expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling {sources:?} failed ({cmd:?}):\n{}",
        show(&out)
    );
}

fn run(exe: &Path) -> Output {
    run_with(exe, &[])
}

fn run_with(exe: &Path, env: &[(&str, &str)]) -> Output {
    let out = Command::new(exe)
        .envs(env.iter().copied())
        .env(
            "ASAN_OPTIONS",
            "detect_leaks=1:abort_on_error=0:halt_on_error=1",
        )
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        .output()
        .expect("run the C test");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        exe.display(),
        show(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("Sanitizer") && !err.contains("runtime error"),
        "{} printed sanitizer reports:\n{err}",
        exe.display()
    );
    out
}

fn c_test(name: &str, link: Link) {
    let dir = scratch(&format!(
        "{name}-{}",
        match link {
            Link::Shared => "so",
            Link::Static => "a",
            Link::StaticSanitized => "asan",
        }
    ));
    let exe = dir.join(name);
    compile(&[root().join(format!("tests/c/{name}.c"))], &exe, link);
    let out = run(&exe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(" 0 failed"),
        "{name}: no summary line:\n{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sanitizer runtimes present? (libasan/libubsan come with gcc's libgcc-*-dev.)
fn sanitizers_available() -> bool {
    let dir = scratch("sancheck");
    let src = dir.join("t.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let ok = Command::new(cc())
        .args(SANITIZE)
        .arg(&src)
        .arg("-o")
        .arg(dir.join("t"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let _ = std::fs::remove_dir_all(&dir);
    ok
}

fn require_sanitizers() {
    assert!(
        sanitizers_available(),
        "{} cannot link -fsanitize=address,undefined: install the sanitizer runtimes \
         (Debian: apt-get install libasan8 libubsan1)",
        cc()
    );
}

#[test]
fn c_test_api_shared() {
    c_test("test_api", Link::Shared);
}

#[test]
fn c_test_api_static() {
    c_test("test_api", Link::Static);
}

#[test]
fn c_test_api_asan_ubsan() {
    require_sanitizers();
    c_test("test_api", Link::StaticSanitized);
}

#[test]
fn c_test_threads_shared() {
    c_test("test_threads", Link::Shared);
}

#[test]
fn c_test_threads_asan_ubsan() {
    require_sanitizers();
    c_test("test_threads", Link::StaticSanitized);
}

#[test]
fn c_test_pressure_shared() {
    c_test("test_pressure", Link::Shared);
}

#[test]
fn c_test_pressure_asan_ubsan() {
    require_sanitizers();
    c_test("test_pressure", Link::StaticSanitized);
}

/// Double frees through the C API, default mode and `EBBTIDE_CHECKED=1` (the `checked`
/// tunable, which used to do nothing), against the shared and the static library.
#[test]
fn c_test_checked_tunable() {
    for link in [Link::Shared, Link::Static] {
        let dir = scratch(&format!("checked-{}", link == Link::Shared));
        let exe = dir.join("test_checked");
        compile(&[root().join("tests/c/test_checked.c")], &exe, link);
        for env in [&[][..], &[("EBBTIDE_CHECKED", "1")][..]] {
            let out = run_with(&exe, env);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains(" 0 failed"), "{env:?}: {stdout}");
            if env.is_empty() {
                assert!(stdout.contains("(default)"), "{stdout}");
            } else {
                assert!(stdout.contains("EBBTIDE_CHECKED=1"), "{stdout}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn c_example_bufpool() {
    for link in [Link::Shared, Link::StaticSanitized] {
        if link == Link::StaticSanitized {
            require_sanitizers();
        }
        let dir = scratch("example");
        let exe = dir.join("bufpool");
        compile(&[root().join("examples/c/bufpool.c")], &exe, link);
        let out = run(&exe);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("released"), "{stdout}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `ebb_xxx` names of the functions the header declares.
fn header_functions() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("include/ebbtide.h")).unwrap();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let l = line.trim_start();
        if l.starts_with("/*")
            || l.starts_with('*')
            || l.starts_with('#')
            || l.starts_with("typedef")
        {
            continue;
        }
        // A declaration: `type name(args);` or `type *name(args);`.
        if let Some(open) = l.find('(') {
            let before = &l[..open];
            let name = before
                .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap();
            if name.starts_with("ebb_") && l.trim_end().ends_with(");") {
                out.insert(name.to_string());
            }
        }
    }
    out
}

fn defined_ebb_symbols(args: &[&str], file: &Path) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(args)
        .arg(file)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm failed:\n{}", show(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace().rev();
            let name = w.next()?;
            let kind = w.next()?;
            (kind == "T" && name.starts_with("ebb_")).then(|| name.to_string())
        })
        .collect()
}

#[test]
fn exported_symbols_match_header() {
    let declared = header_functions();
    assert!(
        declared.len() >= 15,
        "parsed too few declarations: {declared:?}"
    );
    for r in REQUIRED {
        assert!(declared.contains(*r), "{r} is not declared in ebbtide.h");
    }
    let lib = lib_dir();
    let so = defined_ebb_symbols(&["-D", "--defined-only"], &lib.join("libebbtide.so"));
    assert_eq!(
        so, declared,
        "libebbtide.so exports (left) differ from ebbtide.h declarations (right)"
    );
    let a = defined_ebb_symbols(&["--defined-only"], &lib.join("libebbtide.a"));
    assert_eq!(
        a, declared,
        "libebbtide.a defines (left) differ from ebbtide.h declarations (right)"
    );
    // Nothing but the C API leaks out of the shared library.
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib.join("libebbtide.so"))
        .output()
        .unwrap();
    let other: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .filter(|n| !n.starts_with("ebb_"))
        .collect();
    assert!(other.is_empty(), "unexpected exports: {other:?}");
}

/// The fast entry points (`build.rs`) each start a 64-byte line, inside `.text.hot`, whatever
/// the rest of the library does to the layout.
#[test]
fn fast_entry_points_start_cache_lines() {
    let so = lib_dir().join("libebbtide.so");
    let out = Command::new("readelf")
        .arg("-SW")
        .arg(&so)
        .output()
        .expect("run readelf (binutils)");
    assert!(out.status.success(), "readelf failed:\n{}", show(&out));
    // "  [15] .text.hot  PROGBITS  0000000000035d00 034d00 00085a 00  AX  0   0 64"
    let hot = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let i = f.iter().position(|w| *w == ".text.hot")?;
            let addr = u64::from_str_radix(f.get(i + 2)?, 16).ok()?;
            let size = u64::from_str_radix(f.get(i + 4)?, 16).ok()?;
            Some((addr, addr + size))
        })
        .expect("libebbtide.so has a .text.hot section (built with EBBTIDE_HOT_TEXT=off?)");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("run nm (binutils)");
    let syms = String::from_utf8_lossy(&out.stdout).to_string();
    for name in [
        "ebb_zone_alloc",
        "ebb_zone_free",
        "ebb_pool_get",
        "ebb_pool_put",
    ] {
        let addr = syms
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3 && f[2] == name).then(|| u64::from_str_radix(f[0], 16).ok())?
            })
            .unwrap_or_else(|| panic!("{name} not exported"));
        assert!(
            (hot.0..hot.1).contains(&addr),
            "{name} at {addr:#x}, outside .text.hot {:#x}..{:#x}",
            hot.0,
            hot.1
        );
        assert_eq!(addr % 64, 0, "{name} at {addr:#x}: not at a line's start");
    }
}

#[test]
fn install_and_pkg_config() {
    let dest = scratch("install");
    let prefix = "/opt/ebbtide-test";
    let out = Command::new("sh")
        .arg(root().join("scripts/install-capi.sh"))
        .env("PREFIX", prefix)
        .env("DESTDIR", &dest)
        .env("EBBTIDE_LIB_DIR", lib_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "install-capi.sh failed:\n{}",
        show(&out)
    );
    let base = dest.join(prefix.trim_start_matches('/'));
    for f in [
        "include/ebbtide.h",
        "lib/libebbtide.so",
        "lib/libebbtide.a",
        "lib/pkgconfig/ebbtide.pc",
    ] {
        assert!(base.join(f).exists(), "{f} not installed");
    }
    let pc = std::fs::read_to_string(base.join("lib/pkgconfig/ebbtide.pc")).unwrap();
    assert!(pc.contains(&format!("prefix={prefix}\n")), "{pc}");
    assert!(
        pc.contains(&format!("Version: {}\n", env!("CARGO_PKG_VERSION"))),
        "{pc}"
    );
    if Command::new("pkg-config")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("pkg-config is not installed (Debian: apt-get install pkg-config)");
    }
    let flags = |args: &[&str]| {
        let o = Command::new("pkg-config")
            .args(args)
            .arg("ebbtide")
            .env("PKG_CONFIG_PATH", base.join("lib/pkgconfig"))
            .env("PKG_CONFIG_SYSROOT_DIR", &dest)
            .output()
            .unwrap();
        assert!(o.status.success(), "pkg-config {args:?}:\n{}", show(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let cflags = flags(&["--cflags"]);
    let libs = flags(&["--libs"]);
    let static_libs = flags(&["--libs", "--static"]);
    assert!(libs.contains("-lebbtide"), "{libs}");
    assert!(static_libs.contains("-lpthread"), "{static_libs}");
    // Build the example with exactly what pkg-config says, as a user would.
    let exe = dest.join("bufpool");
    let mut cmd = Command::new(cc());
    cmd.args(CFLAGS)
        .args(cflags.split_whitespace())
        .arg(root().join("examples/c/bufpool.c"))
        .arg("-o")
        .arg(&exe)
        .args(libs.split_whitespace())
        .arg(format!("-Wl,-rpath,{}", base.join("lib").display()));
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}:\n{}", show(&out));
    run(&exe);
    let _ = std::fs::remove_dir_all(&dest);
}
