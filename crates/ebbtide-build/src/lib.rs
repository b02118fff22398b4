//! What the build scripts of ebbtide's shared libraries share, as a build dependency
//! (`[build-dependencies] ebbtide-build`): how `libebbtide_malloc.so` (`crates/ebbtide-malloc`)
//! and `libebbtide.so` (`crates/ebbtide-capi`) are linked, and the benchmark binaries that call
//! the C API's entry points (`crates/ebbtide-bench`).
//!
//! * [`hot_text_link`]: the linker script that gathers the hot functions (`EBBTIDE_HOT_TEXT`),
//!   each listed name checked to match a function;
//! * [`relr_link`]: packed relative relocations where the loader reads them (`EBBTIDE_RELR`);
//! * [`unwind_link`]: GCC's static unwinder instead of `libgcc_s.so.1`
//!   (`EBBTIDE_STATIC_UNWIND`).
//!
//! Each reads the build script's environment (`OUT_DIR`, `CARGO_CFG_*`, its switch) and prints
//! cargo's directives; called from anything but a build script they have no effect on a link.

pub mod hot_text_link;
pub mod relr_link;
pub mod unwind_link;
