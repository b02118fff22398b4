//! The C names: what `libebbtide_malloc.so` exports and a preload interposes, glibc's
//! `__libc_*` aliases (its own callers use them), and the introspection glibc programs call
//! (`malloc_usable_size`, `malloc_trim`, `mallinfo2`, `malloc_stats`).
//!
//! Contracts kept: `free` never changes `errno`; a failure is NULL with `ENOMEM`
//! (`posix_memalign` returns it and sets `errno`); a bad alignment is `EINVAL` (returned by
//! `posix_memalign`, set by `aligned_alloc`); sizes near
//! `SIZE_MAX` fail without overflow (`calloc`, `reallocarray`, `pvalloc`, the huge path's
//! rounding all check).

use crate::heap;
use core::ffi::{c_int, c_void};

/// `malloc(3)` and `free(3)`: the fast paths (`entry.rs`).
pub use crate::entry::{free, malloc};

/// `calloc(3)`.
///
/// # Safety
/// None beyond C's.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    heap::calloc(n, size).cast()
}

/// `realloc(3)`.
///
/// # Safety
/// As [`free`] for `p`.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, n: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { heap::realloc(p.cast(), n).cast() }
}

/// `reallocarray(3)`: `realloc(p, n * size)` unless the product overflows (then NULL, ENOMEM,
/// `p` untouched).
///
/// # Safety
/// As [`free`] for `p`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: forwarded.
        Some(t) => unsafe { heap::realloc(p.cast(), t).cast() },
        None => {
            ebbtide_core::os::set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

/// `posix_memalign(3)`: `align` must be a power of two and a multiple of `sizeof(void *)`.
///
/// # Safety
/// `out` must be writable.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, n: usize) -> c_int {
    if !align.is_power_of_two() || align < core::mem::size_of::<*mut c_void>() {
        return libc::EINVAL;
    }
    let e = ebbtide_core::os::errno();
    let p = heap::alloc_aligned(align, n);
    if p.is_null() {
        // errno says ENOMEM too, as under glibc and every peer (glibc's tst-malloc-thread-fail
        // reads it); on success it is the caller's, untouched.
        ebbtide_core::os::set_errno(libc::ENOMEM);
        return libc::ENOMEM;
    }
    ebbtide_core::os::set_errno(e);
    // SAFETY: the caller passes a writable pointer.
    unsafe { *out = p.cast() };
    0
}

/// `aligned_alloc(3)`: `align` must be a power of two (EINVAL otherwise).
///
/// # Safety
/// None beyond C's.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, n: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        ebbtide_core::os::set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    heap::alloc_aligned(align, n).cast()
}

/// `memalign(3)`: like glibc, an alignment that is not a power of two is rounded up to one;
/// one above `SIZE_MAX / 2 + 1` is EINVAL.
///
/// # Safety
/// None beyond C's.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: usize, n: usize) -> *mut c_void {
    let Some(a) = align.max(1).checked_next_power_of_two() else {
        ebbtide_core::os::set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    heap::alloc_aligned(a, n).cast()
}

/// `valloc(3)`: page-aligned.
///
/// # Safety
/// None beyond C's.
#[no_mangle]
pub unsafe extern "C" fn valloc(n: usize) -> *mut c_void {
    heap::alloc_aligned(ebbtide_core::os::page_size(), n).cast()
}

/// `pvalloc(3)`: page-aligned, size rounded up to whole pages (0 → one page).
///
/// # Safety
/// None beyond C's.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(n: usize) -> *mut c_void {
    let pg = ebbtide_core::os::page_size();
    match n.max(1).checked_next_multiple_of(pg) {
        Some(r) => heap::alloc_aligned(pg, r).cast(),
        None => {
            ebbtide_core::os::set_errno(libc::ENOMEM);
            core::ptr::null_mut()
        }
    }
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// `p` is NULL or a live block (anything else is reported; 0).
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    // SAFETY: forwarded (the caller's obligation).
    unsafe { heap::usable_size(p.cast()) }
}

/// C23 `free_sized`: the size is not needed (checked mode could use it; it does not yet).
///
/// # Safety
/// As [`free`].
#[no_mangle]
pub unsafe extern "C" fn free_sized(p: *mut c_void, _size: usize) {
    // SAFETY: forwarded.
    unsafe { heap::free(p.cast()) }
}

/// C23 `free_aligned_sized`.
///
/// # Safety
/// As [`free`].
#[no_mangle]
pub unsafe extern "C" fn free_aligned_sized(p: *mut c_void, _align: usize, _size: usize) {
    // SAFETY: forwarded.
    unsafe { heap::free(p.cast()) }
}

/// Obsolete `cfree(3)`, still exported by glibc.
///
/// # Safety
/// As [`free`].
#[no_mangle]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    // SAFETY: forwarded.
    unsafe { heap::free(p.cast()) }
}

/// `malloc_trim(3)`: a DRAIN_CPU (every cache of every zone emptied into its slabs, free slabs
/// given back to the OS). Returns 1 when memory was given back, 0 otherwise. `pad` is ignored:
/// the zones keep no heap top to pad.
///
/// # Safety
/// None.
#[no_mangle]
pub unsafe extern "C" fn malloc_trim(_pad: usize) -> c_int {
    crate::stats::trim()
}

/// `mallinfo2(3)`, with ebbtide's figures (see `stats.rs`).
///
/// # Safety
/// None.
#[no_mangle]
pub unsafe extern "C" fn mallinfo2() -> crate::stats::Mallinfo2 {
    crate::stats::mallinfo2()
}

/// Obsolete `mallinfo(3)`: [`mallinfo2`] with every field clamped to `int`.
///
/// # Safety
/// None.
#[no_mangle]
pub unsafe extern "C" fn mallinfo() -> crate::stats::Mallinfo {
    crate::stats::mallinfo()
}

/// `malloc_stats(3)`: ebbtide's figures on stderr.
///
/// # Safety
/// None.
#[no_mangle]
pub unsafe extern "C" fn malloc_stats() {
    crate::stats::print();
}

// glibc's internal names, called by parts of glibc and by programs that want "the libc
// allocator" explicitly; they are the same allocator here.

/// glibc's alias of [`malloc`].
///
/// # Safety
/// As [`malloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_malloc(n: usize) -> *mut c_void {
    heap::alloc(n).cast()
}

/// glibc's alias of [`free`].
///
/// # Safety
/// As [`free`].
#[no_mangle]
pub unsafe extern "C" fn __libc_free(p: *mut c_void) {
    // SAFETY: forwarded.
    unsafe { heap::free(p.cast()) }
}

/// glibc's alias of [`calloc`].
///
/// # Safety
/// As [`calloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_calloc(n: usize, size: usize) -> *mut c_void {
    heap::calloc(n, size).cast()
}

/// glibc's alias of [`realloc`].
///
/// # Safety
/// As [`realloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_realloc(p: *mut c_void, n: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { heap::realloc(p.cast(), n).cast() }
}

/// glibc's alias of [`memalign`].
///
/// # Safety
/// As [`memalign`].
#[no_mangle]
pub unsafe extern "C" fn __libc_memalign(align: usize, n: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { memalign(align, n) }
}

/// glibc's alias of [`valloc`].
///
/// # Safety
/// As [`valloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_valloc(n: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { valloc(n) }
}

/// glibc's alias of [`pvalloc`].
///
/// # Safety
/// As [`pvalloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_pvalloc(n: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { pvalloc(n) }
}

/// glibc's alias of [`posix_memalign`].
///
/// # Safety
/// As [`posix_memalign`].
#[no_mangle]
pub unsafe extern "C" fn __posix_memalign(out: *mut *mut c_void, align: usize, n: usize) -> c_int {
    // SAFETY: forwarded.
    unsafe { posix_memalign(out, align, n) }
}
