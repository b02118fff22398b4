//! The C API's fast entry points, as the linker scripts place them: `libebbtide.so`'s
//! (`build.rs`) and the benchmark's that links the C API's rlib (`../ebbtide-bench/build.rs`),
//! so that both call them from the same place within a cache line.

/// The entry points every allocation from C goes through, in the order they are laid out.
pub const FAST: [&str; 4] = [
    "ebb_zone_alloc",
    "ebb_zone_free",
    "ebb_pool_get",
    "ebb_pool_put",
];

/// The input section descriptions of [`FAST`] (rustc puts each function in its own section,
/// `.text.<symbol>`; these are `#[no_mangle]`), one per line.
pub fn script_body() -> String {
    FAST.iter().map(|n| format!("    *(.text.{n})\n")).collect()
}
