//! Links the benchmark binaries with the C API's fast entry points at 64-byte boundaries, as
//! `libebbtide.so` has them (`../ebbtide-capi/build.rs`): `ebbtide-bench`'s `ebbtide-c` column
//! calls `ebb_zone_alloc` and `ebb_zone_free` linked from the rlib, and where they start within
//! their cache line otherwise moves with every change anywhere in the binary (that column read
//! 3.19–3.21 ns for pair64 with them 16 and 32 bytes into a line, 3.32–3.33 with both at 48, in
//! one alternation: docs/benchmarks.md, "The stop in the word"). `EBBTIDE_HOT_TEXT=off` links
//! without it, as for the libraries.

#[path = "../ebbtide-capi/fast_entries.rs"]
mod fast_entries;
use ebbtide_build::hot_text_link;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../ebbtide-capi/fast_entries.rs");
    if !hot_text_link::wanted() {
        return;
    }
    hot_text_link::link_bins(
        "crates/ebbtide-bench/build.rs",
        "fast-entry.ld",
        &fast_entries::script_body(),
    );
}
