//! C API of ebbtide: `libebbtide.so` / `libebbtide.a` with `include/ebbtide.h`.
//!
//! The code is the crate `ebbtide-c` (`crates/ebbtide-c`); this package only links it into the
//! two C libraries, under the library name `ebbtide` that `-lebbtide`, the install script and
//! the .deb read, and places its fast entry points (`build.rs`). Conventions: `docs/c-api.md`;
//! why two packages: `docs/design/crate-names.md`.

// The entry points are `#[no_mangle] extern "C"` functions of `ebbtide-c`: linked into the
// cdylib (exported) and the staticlib through this use.
pub use ebbtide_c::*;
