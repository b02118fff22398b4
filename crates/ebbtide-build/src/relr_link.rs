//! Packed relative relocations (`DT_RELR`) for the shared libraries `libebbtide_malloc.so` and
//! `libebbtide.so` (their build scripts; `crates/ebbtide-malloc/tests/all/hot_text.rs` checks the
//! result).
//!
//! A shared library's pointers to itself (vtables, string tables, the `&'static` data of every
//! crate) are fixed up by the dynamic loader at every start: one 24-byte `Elf64_Rela` each in
//! `.rela.dyn` — 1,700 of them in `libebbtide_malloc.so`, 43 KiB with the rest — which `ld.so`
//! reads page by page, so they and the read-only data around them (the kernel maps 64 KiB
//! around each page a process touches) count in the resident memory of every program that
//! preloads the malloc. `-z pack-relative-relocs` (GNU ld 2.38, LLD 15) encodes them as a
//! bitmap, `.relr.dyn`: 0.5 KiB. Measured (docs/design/benchmarks-record.md, "`prodcons`'s peak RSS taken
//! apart, and packed relative relocations"): the library's resident read-only segment in
//! `sleep 1` 168–176 → 96 KB, in the malloc suite's `prodcons` 164 → 96–100 KB.
//!
//! The loader must know the format: glibc 2.36 or later (the library then requires the version
//! `GLIBC_ABI_DT_RELR`, so an older loader refuses it with that name instead of misreading it).
//! The build looks at the build machine's glibc (`getconf GNU_LIBC_VERSION`), where the
//! libraries are built to run; `EBBTIDE_RELR=on|off` at build time decides instead (any other
//! value stops the build).

use std::process::Command;

/// Whether to link with packed relative relocations (see the module docs).
pub fn wanted() -> bool {
    println!("cargo:rerun-if-env-changed=EBBTIDE_RELR");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    match std::env::var("EBBTIDE_RELR").as_deref() {
        Ok("on") => true,
        Ok("off") => false,
        Ok(other) => panic!("EBBTIDE_RELR must be on or off, not {other:?}"),
        Err(_) => linux_gnu && host_loader_reads_relr(),
    }
}

/// Adds the linker flag to the cdylib's link when [`wanted`].
pub fn link() {
    if wanted() {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the build machine's loader reads `DT_RELR`: glibc 2.36 or later. Also what
/// `crates/ebbtide-malloc/tests/all/hot_text.rs` expects of the build.
pub fn host_loader_reads_relr() -> bool {
    host_glibc().is_some_and(|v| v >= (2, 36))
}

/// The build machine's glibc version, from `getconf GNU_LIBC_VERSION` ("glibc 2.36"); `None`
/// when it cannot be read (not glibc, no `getconf`).
pub fn host_glibc() -> Option<(u32, u32)> {
    let out = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    parse_glibc(std::str::from_utf8(&out.stdout).ok()?)
}

/// "glibc 2.36" → (2, 36).
fn parse_glibc(s: &str) -> Option<(u32, u32)> {
    let v = s.trim().strip_prefix("glibc ")?;
    let mut it = v.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    Some((major, minor))
}
