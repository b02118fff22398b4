//! The unwinder linked into the shared libraries `libebbtide_malloc.so` and `libebbtide.so`
//! (their build scripts; `crates/ebbtide-malloc/tests/all/hot_text.rs` checks the result), instead
//! of a dependency on `libgcc_s.so.1`.
//!
//! Rust's standard library unwinds with the C compiler's unwinder: its `unwind` crate links
//! `-lgcc_s` on `*-linux-gnu`, so every program that preloads the malloc also loads
//! `libgcc_s.so.1`, and its ~100 KB of pages (the loader reads its headers, symbol tables and
//! relocations; the kernel maps 64 KiB around every page touched) count in the resident memory
//! of every such program — a fifth of what the malloc's own library adds to a small process
//! (docs/design/benchmarks-record.md, "Without `libgcc_s`, and the hot text on 64 KiB windows"). Nothing of
//! it runs unless a panic unwinds (the reclaim thread's `catch_unwind`, the C API's
//! panic-to-`EIO` guard), which never happens in a correct run.
//!
//! GCC ships the same unwinder as a static archive, `libgcc_eh.a`, built with hidden
//! visibility: linked into a shared library its `_Unwind_*` functions serve that library's own
//! frames and are not exported, so a C++ program's exceptions keep their own unwinder
//! (`libgcc_s.so.1`, loaded by `libstdc++`). The link is steered with the linker's own search:
//! the cdylib's link line gets `-L OUT_DIR/static-unwind`, a directory holding a linker script
//! named `libgcc_s.so` that reads `libgcc_eh.a` and `libgcc.a` by their full paths (asked of
//! the C compiler, `cc -print-file-name`). GNU ld and LLD search every `-L` directory for every
//! `-l`, whatever the order of the two on the command line, and the user's directories before
//! the compiler driver's own, so rustc's `-lgcc_s` finds this script first; the rlib (for
//! `#[global_allocator]` users) is untouched, and so is every other link of the workspace.
//!
//! On where the compiler has a `libgcc_eh.a` (GCC on a glibc system); `EBBTIDE_STATIC_UNWIND=on|off`
//! at build time decides instead (any other value stops the build; `on` without the archives
//! stops it with their names).

use std::path::PathBuf;
use std::process::Command;

/// The two archives (see the module docs), when the build links them.
pub fn archives() -> Option<(PathBuf, PathBuf)> {
    println!("cargo:rerun-if-env-changed=EBBTIDE_STATIC_UNWIND");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    match std::env::var("EBBTIDE_STATIC_UNWIND").as_deref() {
        Ok("off") => None,
        Ok("on") => Some(compiler_archives().unwrap_or_else(|| {
            panic!(
                "EBBTIDE_STATIC_UNWIND=on, but the C compiler has no libgcc_eh.a and libgcc.a \
                 (cc -print-file-name=libgcc_eh.a)"
            )
        })),
        Ok(other) => panic!("EBBTIDE_STATIC_UNWIND must be on or off, not {other:?}"),
        Err(_) if linux_gnu => compiler_archives(),
        Err(_) => None,
    }
}

/// `libgcc_eh.a` and `libgcc.a` of the C compiler, when it has both. Also what
/// `crates/ebbtide-malloc/tests/all/hot_text.rs` expects of the build.
pub fn compiler_archives() -> Option<(PathBuf, PathBuf)> {
    Some((compiler_file("libgcc_eh.a")?, compiler_file("libgcc.a")?))
}

/// Adds the search directory with the `libgcc_s.so` script to the cdylib's link, when
/// [`archives`] are there.
pub fn link() {
    let Some((eh, gcc)) = archives() else {
        return;
    };
    let dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("static-unwind");
    std::fs::create_dir_all(&dir).expect("create OUT_DIR/static-unwind");
    let script = format!(
        "/* Written by ebbtide-build's unwind_link.rs: this cdylib's -lgcc_s resolved by\n   \
         GCC's static unwinder, hidden in the library, instead of libgcc_s.so.1. */\n\
         GROUP ( {} {} )\n",
        eh.display(),
        gcc.display()
    );
    std::fs::write(dir.join("libgcc_s.so"), script)
        .expect("write OUT_DIR/static-unwind/libgcc_s.so");
    println!("cargo:rustc-cdylib-link-arg=-L{}", dir.display());
}

/// The full path of a file of the C compiler's own libraries (`cc -print-file-name`), or `None`
/// when the compiler does not have it (it then prints the bare name back).
fn compiler_file(name: &str) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let out = Command::new(cc)
        .arg(format!("-print-file-name={name}"))
        .output()
        .ok()?;
    let p = PathBuf::from(std::str::from_utf8(&out.stdout).ok()?.trim());
    (p.is_absolute() && p.is_file()).then_some(p)
}
