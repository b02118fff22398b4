//! Places the C API's fast entry points in `libebbtide.so`: `ebb_zone_alloc`, `ebb_zone_free`,
//! `ebb_pool_get` and `ebb_pool_put` go into an output section `.text.hot` before `.text`, each
//! at a 64-byte boundary (`SUBALIGN(64)`), in that order.
//!
//! Without it the linker puts them wherever the rest of the code leaves them, and where a
//! function starts within its cache line moves with every change elsewhere in the library:
//! `ebb_zone_alloc` 16 and `ebb_zone_free` 0 bytes into a line at `4d1d5e4`, 48 and 32 bytes
//! one commit later (which changed neither function), and every single-thread case of
//! `ebbtide-bench-c` 0.3 ns (4 %) slower for it (docs/benchmarks.md, "The C entry points at a
//! line's start"). rustc puts each function in its own section (`.text.<symbol>`; these are
//! `#[no_mangle]`), so a linker script can pick them; `INSERT BEFORE .text` keeps the linker's
//! default script for everything else. GNU ld and LLD read it. Only the cdylib is linked with
//! it; `libebbtide.a` and the rlib are laid out by their users' links. `EBBTIDE_HOT_TEXT=off`
//! at build time links without it (as for `libebbtide_malloc.so`).
//!
//! Both are also linked with packed relative relocations where the loader reads them
//! (`ebbtide_build::relr_link`), and with GCC's static unwinder instead of `libgcc_s.so.1`
//! (`ebbtide_build::unwind_link`).

use ebbtide_build::{hot_text_link, relr_link, unwind_link};

#[path = "fast_entries.rs"]
mod fast_entries;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=fast_entries.rs");
    relr_link::link();
    unwind_link::link();
    if !hot_text_link::wanted() {
        return;
    }
    hot_text_link::link(
        "crates/ebbtide-capi/build.rs",
        "fast-entry.ld",
        &fast_entries::script_body(),
        "",
        "",
    );
}
