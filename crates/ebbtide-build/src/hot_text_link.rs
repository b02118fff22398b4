//! What the build scripts of `libebbtide_malloc.so` (`crates/ebbtide-malloc/build.rs`) and
//! `libebbtide.so` (`crates/ebbtide-capi/build.rs`) share:
//! the `EBBTIDE_HOT_TEXT` switch and the linker script around their lists of hot functions — an
//! output section `.text.hot` before `.text` (`INSERT BEFORE`, which keeps the linker's default
//! script) with every input section in it at a 64-byte boundary (`SUBALIGN(64)`: the entry
//! points), and after it `.text.warm` with the other functions a program runs at the compiler's
//! alignment (see [`link`]). GNU ld and LLD read it. Only the cdylibs are linked with it, and
//! the benchmark binaries that link the C API's rlib with its entry points' part ([`link_bins`]).
//!
//! With it, the library's segments are laid out on 64 KiB boundaries (`-z max-page-size=0x10000`,
//! `-z separate-code`): the executable segment, and with it `.text.hot`, starts at one, and the
//! segments' alignment (`p_align`) is 64 KiB, which glibc's loader (2.35 and later) honours
//! when it places the library. The kernel maps the cached pages of the 64 KiB-aligned window
//! around a page a process touches (fault-around), so a hot section of `n` × 64 KiB starting at
//! a window's start keeps `n` windows resident; placed at a page boundary somewhere in a window,
//! as by the default 4 KiB alignment and the loader's 4 KiB-aligned placement, it kept `n + 1`
//! (and which `n + 1` changed from run to run). Measured (docs/design/benchmarks-record.md, "Without
//! `libgcc_s`, and the hot text on 64 KiB windows"): the library's resident text in a small
//! program 260–316 KB → 256 KB every time.

use std::fmt::Write as _;
use std::path::PathBuf;

/// Whether to link with the script: on Linux, unless `EBBTIDE_HOT_TEXT=off` at build time (for
/// a linker that cannot read it); any value but `on` or `off` stops the build.
pub fn wanted() -> bool {
    println!("cargo:rerun-if-env-changed=EBBTIDE_HOT_TEXT");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return false;
    }
    match std::env::var("EBBTIDE_HOT_TEXT").as_deref() {
        Err(_) | Ok("on") => true,
        Ok("off") => false,
        Ok(other) => panic!("EBBTIDE_HOT_TEXT must be on or off, not {other:?}"),
    }
}

/// Writes `OUT_DIR/file`: the output section `.text.hot` holding `entries` (input section
/// descriptions, one per line, each input section at a 64-byte boundary: the entry points, whose
/// first instructions are the fast paths — where one starts within its cache line moved the C
/// API's single-thread figures by 4 %, docs/design/benchmarks-record.md, "The C entry points at a line's
/// start"), then, if `rest` is not empty, `.text.warm` holding `rest` at the compiler's
/// alignment (16 bytes: a 64-byte boundary for each of its few hundred functions cost 11 KB of
/// padding, most of a 64 KiB window), then `asserts` ([`Checked`]), with a comment naming
/// `generator`; and links the cdylib with it.
pub fn link(generator: &str, file: &str, entries: &str, rest: &str, asserts: &str) {
    let path = write_script(generator, file, entries, rest, asserts);
    println!("cargo:rustc-cdylib-link-arg=-Wl,-T,{}", path.display());
    // 64 KiB windows (see the module docs).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,max-page-size=0x10000");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,separate-code");
}

/// Links the package's binaries with `entries` at 64-byte boundaries in `.text.hot`, as [`link`]
/// does for a cdylib, without its 64 KiB segments: for a benchmark that links the C API's rlib
/// and calls its entry points, so that they start where they start in `libebbtide.so`
/// (`crates/ebbtide-bench/build.rs`).
pub fn link_bins(generator: &str, file: &str, entries: &str) {
    let path = write_script(generator, file, entries, "", "");
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", path.display());
}

/// Input section descriptions that each must match something, with the checks that they do:
/// [`Checked::push`] brackets a description with two symbols, and the script asserts that the
/// linker placed bytes between them, so a description that matches no input section (a stale
/// name) stops the link with a message naming it instead of silently laying out nothing.
#[derive(Default)]
pub struct Checked {
    /// The descriptions with their bracketing symbol assignments (an output section's body).
    pub body: String,
    /// One `ASSERT` per description (the script's `SECTIONS` commands after the sections).
    pub asserts: String,
    count: usize,
}

impl Checked {
    /// Adds `description` (one input section description, e.g. `*(.text.NAME*)`); the link
    /// fails with `message` when it matches no input section. `message` must not contain `"`.
    pub fn push(&mut self, description: &str, message: &str) {
        assert!(
            !message.contains('"'),
            "linker script message with a quote: {message}"
        );
        let i = self.count;
        self.count += 1;
        // HIDDEN: the symbols stay out of the library's dynamic symbol table.
        let _ = writeln!(
            self.body,
            "    HIDDEN(__ebbtide_hot_text_{i}_start = .);\n    {description}\n    HIDDEN(__ebbtide_hot_text_{i}_end = .);"
        );
        let _ = writeln!(
            self.asserts,
            "  ASSERT(__ebbtide_hot_text_{i}_end > __ebbtide_hot_text_{i}_start, \"{message}\")"
        );
    }
}

/// Writes the script of [`link`] ([`script`]) to `OUT_DIR/file` and returns its path.
fn write_script(generator: &str, file: &str, entries: &str, rest: &str, asserts: &str) -> PathBuf {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let path = out.join(file);
    std::fs::write(&path, script(generator, entries, rest, asserts))
        .unwrap_or_else(|e| panic!("write {file}: {e}"));
    path
}

/// The linker script of [`link`]: `.text.hot` holding `entries` at 64-byte boundaries, then
/// `.text.warm` holding `rest` (none when empty), then `asserts` ([`Checked::asserts`]), all
/// inserted before `.text`.
pub fn script(generator: &str, entries: &str, rest: &str, asserts: &str) -> String {
    let warm = if rest.is_empty() {
        String::new()
    } else {
        format!("  .text.warm :\n  {{\n{rest}  }}\n")
    };
    format!(
        "/* Generated by {generator}. */\nSECTIONS\n{{\n  .text.hot : SUBALIGN(64)\n  {{\n{entries}  }}\n{warm}{asserts}}}\nINSERT BEFORE .text;\n"
    )
}
