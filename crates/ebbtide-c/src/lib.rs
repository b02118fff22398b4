//! The C API of ebbtide as Rust code: the `ebb_*` entry points `include/ebbtide.h` declares.
//! `crates/ebbtide-capi` links this crate into `libebbtide.so` / `libebbtide.a` (its build
//! script places the fast entry points); `ebbtide-bench` calls the same functions from Rust.
//! The runtime is the crate `ebbtide` (docs/design/crate-names.md).
//!
//! Conventions (see `docs/c-api.md`):
//!
//! * Every function reports failure through its return value (`NULL`, `-1`, `0` for the
//!   length-returning stats calls) and sets `errno`; [`ebb_last_error`] returns a message
//!   saying what was wrong (per thread, until the next failure on that thread).
//! * No Rust panic crosses the boundary: every entry point runs its body under
//!   [`std::panic::catch_unwind`]. A caught panic is reported as `EIO`, or, in the functions
//!   without an error return ([`ebb_zone_free`], [`ebb_pool_put`]), aborts the
//!   process after a message on stderr.
//! * Invalid frees (not an item of the zone, misaligned, double free in checked mode) are
//!   printed on stderr, counted ([`ebb_invalid_frees`]) and never applied.
//!
//! * Page pools (`ebb_pool_*`), explicit pressure (`ebb_pressure_notify`) and low-memory
//!   handlers (`ebb_lowmem_register`) wrap `ebbtide::PagePool`, `ebbtide::pressure::notify` and
//!   `ebbtide::reclaimer::register_lowmem_handler_c`.
#![deny(unsafe_op_in_unsafe_fn)]

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::mem::ManuallyDrop;
use core::ptr::{self, NonNull};
use ebbtide::options::OptionErrorKind;
use ebbtide::reclaimer::{HandlerId, LowmemHandler};
use ebbtide::stats::{GlobalStatsC, PoolStats, PoolStatsC, ZoneStats, ZoneStatsC};
use ebbtide::zone::{FastFree, FiniHook, InitHook};
use ebbtide::{
    AllocError, CreateError, Level, LimitMode, PagePool, Request, Zone, ZoneFlags, ZoneOptions,
};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

mod entry;
pub use entry::{ebb_zone_alloc, ebb_zone_free};

/// `EBB_ZONE_NOTRIM`: never trim the depot to its working set.
pub const EBB_ZONE_NOTRIM: c_uint = ZoneFlags::NOTRIM.0;
/// `EBB_ZONE_NOBUCKET`: no per-CPU caches or depot.
pub const EBB_ZONE_NOBUCKET: c_uint = ZoneFlags::NOBUCKET.0;
/// `EBB_ZONE_CHECKED`: full checks on every free (double frees caught at once).
pub const EBB_ZONE_CHECKED: c_uint = ZoneFlags::CHECKED.0;
/// `EBB_ZONE_ZERO`: zero each item on allocation.
pub const EBB_ZONE_ZERO: c_uint = ZoneFlags::ZERO.0;
/// `EBB_LIMIT_FAIL`: at `max_items`, fail at once.
pub const EBB_LIMIT_FAIL: c_int = 0;
/// `EBB_LIMIT_WAIT`: at `max_items`, sleep until an item comes back.
pub const EBB_LIMIT_WAIT: c_int = 1;
/// `EBB_RECLAIM_TRIM`.
pub const EBB_RECLAIM_TRIM: c_int = Request::Trim as c_int;
/// `EBB_RECLAIM_DRAIN`.
pub const EBB_RECLAIM_DRAIN: c_int = Request::Drain as c_int;
/// `EBB_RECLAIM_DRAIN_CPU`.
pub const EBB_RECLAIM_DRAIN_CPU: c_int = Request::DrainCpu as c_int;
/// `EBB_PRESSURE_NONE` .. `EBB_PRESSURE_CRITICAL`: the levels of `ebb_pressure_notify` and
/// `ebb_pressure_level` (`ebbtide::Level` as an integer; the values are fixed by the issue).
pub const EBB_PRESSURE_NONE: c_int = 0;
/// See [`EBB_PRESSURE_NONE`].
pub const EBB_PRESSURE_LOW: c_int = 1;
/// See [`EBB_PRESSURE_NONE`].
pub const EBB_PRESSURE_MODERATE: c_int = 2;
/// See [`EBB_PRESSURE_NONE`].
pub const EBB_PRESSURE_CRITICAL: c_int = 3;
/// Largest `struct ebb_zone_options` size accepted (a larger `size` field is taken for garbage).
pub const EBB_ZONE_OPTIONS_MAX_SIZE: usize = 4096;

/// The version string, NUL-terminated.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// `struct ebb_zone_options` (version 1). Callers set `size = sizeof(struct ebb_zone_options)`;
/// every field left 0 means its default. Later versions only append fields, so a caller
/// compiled against an older header passes a smaller `size` and gets defaults for the rest.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EbbZoneOptions {
    /// `sizeof(struct ebb_zone_options)` as the caller knows it.
    pub size: usize,
    /// Item alignment: 0 = default (8, or 16 for items of 16 bytes or more); else a power of two
    /// up to the page size.
    pub align: usize,
    /// Run when an item leaves a slab; non-zero return fails the allocation.
    pub init: Option<InitHook>,
    /// Run when an item returns to a slab.
    pub fini: Option<FiniHook>,
    /// Run on every allocation; non-zero return fails the allocation.
    pub ctor: Option<InitHook>,
    /// Run on every free.
    pub dtor: Option<FiniHook>,
    /// Passed to every hook.
    pub hook_arg: *mut c_void,
    /// At most this many items out of the slabs (cached items count); 0 = no limit.
    pub max_items: usize,
    /// `EBB_LIMIT_FAIL` (0) or `EBB_LIMIT_WAIT` (1).
    pub limit_mode: c_int,
    /// `EBB_ZONE_*` flags.
    pub flags: c_uint,
    /// Free slabs kept backed when reclaiming, in items.
    pub reserve_items: usize,
    /// Most items the depot may hold; 0 = no cap.
    pub depot_max_items: u64,
    /// Bytes of entirely free slabs kept backed between reclaims (at least one slab); a free
    /// that empties a slab beyond them gives its pages back. 0 = all kept until a reclaim.
    pub free_slabs_max_bytes: u64,
    /// Non-zero: the depot's and the free slabs' caps follow the zone's working set of reuse
    /// (bytes allocations took again from them lately), at least this many bytes each, at
    /// most the caps above. 0 = fixed caps only.
    pub reuse_floor_bytes: u64,
}

impl EbbZoneOptions {
    /// All defaults (what a zeroed struct means).
    pub const fn zeroed() -> Self {
        EbbZoneOptions {
            size: core::mem::size_of::<EbbZoneOptions>(),
            align: 0,
            init: None,
            fini: None,
            ctor: None,
            dtor: None,
            hook_arg: ptr::null_mut(),
            max_items: 0,
            limit_mode: 0,
            flags: 0,
            reserve_items: 0,
            depot_max_items: 0,
            free_slabs_max_bytes: 0,
            reuse_floor_bytes: 0,
        }
    }

    /// `(member, offset, size)` of every member, in order (checked against the C header).
    pub fn members() -> Vec<(&'static str, usize, usize)> {
        use core::mem::{offset_of, size_of};
        macro_rules! m {
            ($($f:ident: $t:ty),*) => { vec![$((stringify!($f), offset_of!(EbbZoneOptions, $f), size_of::<$t>())),*] };
        }
        m!(size: usize, align: usize, init: Option<InitHook>, fini: Option<FiniHook>,
           ctor: Option<InitHook>, dtor: Option<FiniHook>, hook_arg: *mut c_void,
           max_items: usize, limit_mode: c_int, flags: c_uint, reserve_items: usize,
           depot_max_items: u64, free_slabs_max_bytes: u64, reuse_floor_bytes: u64)
    }

    /// The `size` values a caller may pass: the end of every member (older versions of the
    /// struct end at one of them), and anything larger whose unknown tail is zero.
    pub fn valid_sizes() -> Vec<usize> {
        Self::members().iter().map(|(_, o, s)| o + s).collect()
    }
}

/// Opaque handle of a zone (`ebb_zone *`): the pointer of [`Zone::into_raw`], plus one (`FAST`)
/// when the zone takes the fast paths, that is, is not careful (hooks, checked, zeroing, or
/// the per-CPU layer in locked mode; fixed at creation).
///
/// The bit is there for `ebb_zone_alloc` and `ebb_zone_free`: one test of the handle, which
/// arrives in a register, says both "not NULL" and "not careful" (NULL and a careful zone's
/// handle have bit 0 clear), where the zone's `careful` word would be one more load on every
/// call, and those paths are bound by their loads; the minus one folds into the fields'
/// displacements (`entry.rs`). Zone objects are 1 KiB aligned (`objects.rs`), so bit 0 of the
/// pointer is free. Every other entry point takes the zone through `zone_ptr`.
pub enum EbbZone {}

/// Bit 0 of an [`EbbZone`] handle: the zone takes the fast paths.
const FAST: usize = 1;

/// The zone object of a handle (its bit 0 cleared).
#[inline(always)]
fn zone_ptr(h: *const EbbZone) -> *mut c_void {
    (h as usize & !FAST) as *mut c_void
}

/// Does the handle's zone take the fast paths (bit 0 set: not NULL, not careful)?
#[inline(always)]
fn fast_handle(h: *const EbbZone) -> bool {
    h as usize & FAST != 0
}

// ---------------------------------------------------------------------------------------------
// errno and the last error message

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records a failure: errno and this thread's message.
fn fail(errno: c_int, msg: impl Into<String>) {
    let mut m = msg.into().into_bytes();
    m.retain(|&b| b != 0);
    let c = CString::new(m).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = c);
    ebbtide::os::set_errno(errno);
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Runs `f`; a panic becomes `EIO` and the value `on_panic`.
fn guard<R>(func: &str, on_panic: R, f: impl FnOnce() -> R) -> R {
    // The runtime's hooks, before anything can create a zone: the load-time constructor of the
    // Rust runtime is not linked into every C program (a static link pulls in only the objects
    // whose symbols it needs), so every entry point's guarded path installs them (idempotent).
    ebbtide::install_runtime();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            fail(
                libc::EIO,
                format!("{func}: internal error (Rust panic): {}", panic_text(&*p)),
            );
            on_panic
        }
    }
}

/// Runs `f`; a panic aborts the process after a message on stderr (for functions without an
/// error return).
fn guard_abort(func: &str, f: impl FnOnce()) {
    ebbtide::install_runtime(); // as in `guard`
    if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
        let _ = writeln!(
            std::io::stderr(),
            "ebbtide: {func}: internal error (Rust panic): {}; aborting",
            panic_text(&*p)
        );
        std::process::abort();
    }
}

/// A C string argument as `&str`; `None` (EINVAL recorded) if NULL or not UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that lives for `'a`.
unsafe fn c_str<'a>(func: &str, what: &str, p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        fail(libc::EINVAL, format!("{func}: {what} is NULL"));
        return None;
    }
    // SAFETY: non-null; the caller guarantees NUL termination and lifetime.
    match unsafe { CStr::from_ptr(p) }.to_str() {
        Ok(s) => Some(s),
        Err(_) => {
            fail(libc::EINVAL, format!("{func}: {what} is not valid UTF-8"));
            None
        }
    }
}

/// Copies `text` into `buf` with snprintf semantics; returns `text.len()`.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes of writes.
unsafe fn copy_out(text: &[u8], buf: *mut c_char, len: usize) -> usize {
    if !buf.is_null() && len > 0 {
        let n = text.len().min(len - 1);
        // SAFETY: `buf` has room for `len` bytes and n + 1 <= len; `text` does not overlap a
        // buffer the caller owns (it is our own String).
        unsafe {
            ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    text.len()
}

// ---------------------------------------------------------------------------------------------
// zones

/// Live zone handles created through this API: `ebb_zone_destroy` refuses anything else
/// (double destroy, garbage). Only create and destroy take this lock.
static LIVE_ZONES: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// Invalid frees seen through this API (also counted per zone by the core).
static INVALID_FREES: AtomicU64 = AtomicU64::new(0);

fn live_zones() -> ebbtide::Gated<'static, BTreeSet<usize>> {
    ebbtide::lock_gated(&LIVE_ZONES)
}

/// Borrows the zone behind a handle without taking ownership.
///
/// # Safety
/// `z` is a live handle from `ebb_zone_create*`.
unsafe fn borrow_zone(z: *mut EbbZone) -> ManuallyDrop<Zone> {
    // SAFETY: caller's guarantee; ManuallyDrop keeps the handle's ownership with the caller.
    ManuallyDrop::new(unsafe { Zone::from_raw(zone_ptr(z)) })
}

fn create_errno(e: &CreateError) -> c_int {
    match e {
        CreateError::Config(_) => libc::EINVAL,
        CreateError::Os(_) => libc::ENOMEM,
    }
}

fn create(func: &str, name: &str, size: usize, o: &EbbZoneOptions) -> *mut EbbZone {
    let mut zo = ZoneOptions::new(name, size);
    if o.align != 0 {
        zo = zo.align(o.align);
    }
    let mode = match o.limit_mode {
        EBB_LIMIT_FAIL => LimitMode::Fail,
        EBB_LIMIT_WAIT => LimitMode::Wait,
        m => {
            fail(
                libc::EINVAL,
                format!(
                    "{func}: limit_mode {m} is neither EBB_LIMIT_FAIL (0) nor EBB_LIMIT_WAIT (1)"
                ),
            );
            return ptr::null_mut();
        }
    };
    if o.flags & !ZoneFlags::ALL != 0 {
        fail(
            libc::EINVAL,
            format!(
                "{func}: unknown flag bits {:#x} (known: EBB_ZONE_NOTRIM|NOBUCKET|CHECKED|ZERO = {:#x})",
                o.flags & !ZoneFlags::ALL,
                ZoneFlags::ALL
            ),
        );
        return ptr::null_mut();
    }
    zo = zo
        .flags(ZoneFlags(o.flags))
        .max_items(o.max_items, mode)
        .hooks(o.init, o.fini, o.ctor, o.dtor, o.hook_arg)
        .reserve_items(o.reserve_items);
    if o.depot_max_items != 0 {
        zo = zo.depot_max_items(o.depot_max_items);
    }
    if o.free_slabs_max_bytes != 0 {
        zo = zo.free_slabs_max_bytes(usize::try_from(o.free_slabs_max_bytes).unwrap_or(usize::MAX));
    }
    if o.reuse_floor_bytes != 0 {
        zo = zo.reuse_floor_bytes(usize::try_from(o.reuse_floor_bytes).unwrap_or(usize::MAX));
    }
    match Zone::new(zo) {
        Ok(z) => {
            let p = z.into_raw();
            debug_assert_eq!(p as usize & FAST, 0, "zone objects are 1 KiB aligned");
            // SAFETY: `p` is the zone just made, live.
            let fast = unsafe { Zone::fast_consts_raw(p) }.is_some();
            let h = (p as usize | if fast { FAST } else { 0 }) as *mut EbbZone;
            live_zones().insert(h as usize);
            h
        }
        Err(e) => {
            fail(create_errno(&e), format!("{func}: {e}"));
            ptr::null_mut()
        }
    }
}

/// Creates a zone of `size`-byte items. `align` 0 = default. NULL with errno EINVAL on bad
/// arguments, ENOMEM when the zone's metadata cannot be mapped.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ebb_zone_create(
    name: *const c_char,
    size: usize,
    align: usize,
    flags: c_uint,
) -> *mut EbbZone {
    const F: &str = "ebb_zone_create";
    guard(F, ptr::null_mut(), || {
        // SAFETY: caller's guarantee on `name`.
        let Some(name) = (unsafe { c_str(F, "name", name) }) else {
            return ptr::null_mut();
        };
        let o = EbbZoneOptions {
            align,
            flags,
            ..EbbZoneOptions::zeroed()
        };
        create(F, name, size, &o)
    })
}

/// Creates a zone with options (`opts` NULL = all defaults); see [`EbbZoneOptions`] for the
/// versioning rule of `opts->size`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `opts` is NULL or points to at least
/// `opts->size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ebb_zone_create_ex(
    name: *const c_char,
    item_size: usize,
    opts: *const EbbZoneOptions,
) -> *mut EbbZone {
    const F: &str = "ebb_zone_create_ex";
    guard(F, ptr::null_mut(), || {
        // SAFETY: caller's guarantee on `name`.
        let Some(name) = (unsafe { c_str(F, "name", name) }) else {
            return ptr::null_mut();
        };
        let mut o = EbbZoneOptions::zeroed();
        if !opts.is_null() {
            // SAFETY: the caller's struct starts with its `size` member (a size_t).
            let given = unsafe { ptr::read_unaligned(opts.cast::<usize>()) };
            let ours = core::mem::size_of::<EbbZoneOptions>();
            if given < ours && !EbbZoneOptions::valid_sizes().contains(&given) {
                fail(
                    libc::EINVAL,
                    format!("{F}: opts->size {given} is not the size of any version of struct ebb_zone_options (this library's is {ours})"),
                );
                return ptr::null_mut();
            }
            if given > EBB_ZONE_OPTIONS_MAX_SIZE {
                fail(
                    libc::EINVAL,
                    format!("{F}: opts->size {given} is implausible (this library's struct is {ours} bytes); was it set to sizeof(struct ebb_zone_options)?"),
                );
                return ptr::null_mut();
            }
            if given > ours {
                // SAFETY: the caller vouches for `given` readable bytes.
                let tail = unsafe {
                    core::slice::from_raw_parts(opts.cast::<u8>().add(ours), given - ours)
                };
                if let Some(i) = tail.iter().position(|&b| b != 0) {
                    fail(
                        libc::EINVAL,
                        format!("{F}: opts->size {given} is larger than this library's struct ebb_zone_options ({ours} bytes) and byte {} of the unknown tail is not zero (an option this version does not know)", ours + i),
                    );
                    return ptr::null_mut();
                }
            }
            let n = given.min(ours);
            // SAFETY: `n` bytes are readable at `opts` (caller) and writable at `o`; every
            // prefix ending at a member boundary of a zeroed `EbbZoneOptions` overwritten with
            // the caller's bytes is a valid value (all members are plain data or nullable fn
            // pointers).
            unsafe {
                ptr::copy_nonoverlapping(
                    opts.cast::<u8>(),
                    (&mut o as *mut EbbZoneOptions).cast::<u8>(),
                    n,
                )
            };
        }
        create(F, name, item_size, &o)
    })
}

/// `ebb_zone_alloc` beyond this CPU's stack: the slow paths, hooks, errors, all under the guard.
///
/// `extern "C"` (cannot unwind: the guard catches every panic) so that the entry point's call
/// to it is a tail call (`jmp`): with a call that might unwind, the entry point needs an abort
/// landing pad around it and hence a stack frame, a push and a pop on its fast path too. The
/// same holds for `zone_free_guarded`.
///
/// # Safety
/// As `ebb_zone_alloc`.
#[inline(never)]
unsafe extern "C" fn zone_alloc_guarded(zone: *mut EbbZone) -> *mut c_void {
    const F: &str = "ebb_zone_alloc";
    #[cfg(test)]
    entry::tests::count_slow_alloc();
    guard(F, ptr::null_mut(), || {
        if zone.is_null() {
            fail(libc::EINVAL, format!("{F}: zone is NULL"));
            return ptr::null_mut();
        }
        // SAFETY: caller's guarantee (a live zone).
        match unsafe { Zone::alloc_raw(zone_ptr(zone)) } {
            Ok(p) => p.as_ptr().cast(),
            Err(e) => {
                let errno = match e {
                    AllocError::OutOfMemory(_) | AllocError::LimitReached { .. } => libc::ENOMEM,
                    AllocError::InitFailed | AllocError::CtorFailed => libc::ECANCELED,
                };
                // SAFETY: the caller's guarantee that `zone` is a live handle, checked non-null above.
                let z = unsafe { borrow_zone(zone) };
                fail(errno, format!("{F}: zone '{}': {e}", z.name()));
                ptr::null_mut()
            }
        }
    })
}

fn report_invalid_free(f: &str, e: ebbtide::InvalidFree) {
    INVALID_FREES.fetch_add(1, Ordering::Relaxed);
    let _ = writeln!(std::io::stderr(), "{e}; not freed");
    ebbtide::error::misuse_reported();
    fail(libc::EINVAL, format!("{f}: {e}"));
}

/// `ebb_zone_free` beyond this CPU's stack (full stack, careful zone, invalid pointer, NULLs).
///
/// # Safety
/// As `ebb_zone_free`.
#[inline(never)]
unsafe extern "C" fn zone_free_guarded(zone: *mut EbbZone, item: *mut c_void) {
    const F: &str = "ebb_zone_free";
    #[cfg(test)]
    entry::tests::count_slow_free();
    guard_abort(F, || {
        let Some(p) = NonNull::new(item.cast::<u8>()) else {
            return;
        };
        if zone.is_null() {
            INVALID_FREES.fetch_add(1, Ordering::Relaxed);
            let _ = writeln!(
                std::io::stderr(),
                "ebbtide: invalid free of {p:p}: zone is NULL; not freed"
            );
            fail(libc::EINVAL, format!("{F}: zone is NULL"));
            return;
        }
        // SAFETY: caller's guarantee (a live zone, ownership of a valid item); invalid pointers
        // are detected by `free_raw` without touching their memory.
        if let Err(e) = unsafe { Zone::free_raw(zone_ptr(zone), p) } {
            report_invalid_free(F, e);
        }
    })
}

/// `ebb_zone_free` of a fast handle's zone past its fast path, from where it stopped (`how`):
/// NULL does nothing, anything else goes to the zone's resume (the invalid-pointer report, the
/// slow path, the double free), which tests nothing again. Under the guard, as
/// `zone_free_guarded`.
///
/// # Safety
/// `zone` is a live handle; `item` as `ebb_zone_free` requires; `how` is what the zone's fast
/// path returned for `item` just now.
#[cold]
#[inline(never)]
unsafe extern "C" fn zone_free_missed(zone: *mut EbbZone, item: *mut c_void, how: FastFree) {
    const F: &str = "ebb_zone_free";
    #[cfg(test)]
    entry::tests::count_slow_free();
    guard_abort(F, || {
        let Some(p) = NonNull::new(item.cast::<u8>()) else {
            return;
        };
        // SAFETY: a live zone, `p` not null and as the caller guarantees it, `how` its fast
        // path's answer for `p` (the caller's guarantee).
        if let Err(e) = unsafe { Zone::free_raw_resume(zone_ptr(zone), p, how) } {
            report_invalid_free(F, e);
        }
    })
}

/// Destroys a zone. 0, or -1 with errno EBUSY (items still in use; nothing freed, the zone stays
/// usable), EINVAL (NULL, or not a live zone handle: double destroy).
///
/// # Safety
/// `zone` is NULL or a pointer returned by `ebb_zone_create*`; no other thread uses the zone
/// during the call.
#[no_mangle]
pub unsafe extern "C" fn ebb_zone_destroy(zone: *mut EbbZone) -> c_int {
    const F: &str = "ebb_zone_destroy";
    guard(F, -1, || {
        if zone.is_null() {
            fail(libc::EINVAL, format!("{F}: zone is NULL"));
            return -1;
        }
        let mut live = live_zones();
        if !live.contains(&(zone as usize)) {
            fail(
                libc::EINVAL,
                format!("{F}: {zone:p} is not a live zone (already destroyed?)"),
            );
            return -1;
        }
        // SAFETY: a live handle (checked above); the caller guarantees exclusive use, and
        // ownership goes back to the caller on failure (into_raw below).
        let z = unsafe { Zone::from_raw(zone_ptr(zone)) };
        match z.destroy() {
            Ok(()) => {
                live.remove(&(zone as usize));
                0
            }
            Err((z, busy)) => {
                let _ = z.into_raw();
                fail(libc::EBUSY, format!("{F}: {busy}"));
                -1
            }
        }
    })
}

/// The usable size of the zone's items (requested size rounded up to the alignment); 0 with
/// errno EINVAL for a NULL zone.
///
/// # Safety
/// `zone` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ebb_zone_item_size(zone: *const EbbZone) -> usize {
    const F: &str = "ebb_zone_item_size";
    guard(F, 0, || {
        if zone.is_null() {
            fail(libc::EINVAL, format!("{F}: zone is NULL"));
            return 0;
        }
        // SAFETY: caller's guarantee.
        unsafe { borrow_zone(zone.cast_mut()) }.item_size()
    })
}

/// Gives one zone's cached memory back to the OS: bytes given back, or -1 errno EINVAL.
///
/// # Safety
/// `zone` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ebb_zone_reclaim(zone: *mut EbbZone, request: c_int) -> i64 {
    const F: &str = "ebb_zone_reclaim";
    guard(F, -1, || {
        if zone.is_null() {
            fail(libc::EINVAL, format!("{F}: zone is NULL"));
            return -1;
        }
        let Some(req) = Request::from_raw(request) else {
            fail(libc::EINVAL, format!("{F}: request {request} is not EBB_RECLAIM_TRIM (1), EBB_RECLAIM_DRAIN (2) or EBB_RECLAIM_DRAIN_CPU (3)"));
            return -1;
        };
        // SAFETY: caller's guarantee.
        let z = unsafe { borrow_zone(zone) };
        i64::try_from(z.reclaim(req)).unwrap_or(i64::MAX)
    })
}

/// Invalid frees seen through the C API since the process started.
#[no_mangle]
pub extern "C" fn ebb_invalid_frees() -> u64 {
    INVALID_FREES.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------------
// page pools

/// Opaque handle of a page pool (`ebb_pool *`): a `Box<PagePool>` made at creation (not an
/// allocation hot path) and given back by `ebb_pool_destroy`.
pub enum EbbPool {}

/// Live pool handles created through this API: `ebb_pool_destroy` refuses anything else.
static LIVE_POOLS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn live_pools() -> ebbtide::Gated<'static, BTreeSet<usize>> {
    ebbtide::lock_gated(&LIVE_POOLS)
}

/// The pool behind a handle.
///
/// # Safety
/// `p` is a live handle from `ebb_pool_create`, and stays live while the reference is used.
unsafe fn pool_ref<'a>(p: *const EbbPool) -> &'a PagePool {
    // SAFETY: caller's guarantee: a pointer from Box::into_raw, not yet destroyed.
    unsafe { &*p.cast::<PagePool>() }
}

/// The core's pool marks "not a pool" with `usize::MAX` free pages: keep the cap below it.
fn pool_cap(n: usize) -> usize {
    n.min(usize::MAX - 1)
}

/// Creates a pool of page-sized, page-aligned buffers keeping at most `max_buffer_pages` free
/// pages between shrinks. NULL with errno EINVAL (bad name), ENOMEM (metadata not mapped).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ebb_pool_create(
    name: *const c_char,
    max_buffer_pages: usize,
) -> *mut EbbPool {
    const F: &str = "ebb_pool_create";
    guard(F, ptr::null_mut(), || {
        // SAFETY: caller's guarantee on `name`.
        let Some(name) = (unsafe { c_str(F, "name", name) }) else {
            return ptr::null_mut();
        };
        match PagePool::new(name, pool_cap(max_buffer_pages)) {
            Ok(pool) => {
                let p = Box::into_raw(Box::new(pool));
                live_pools().insert(p as usize);
                p.cast()
            }
            Err(e) => {
                fail(create_errno(&e), format!("{F}: {e}"));
                ptr::null_mut()
            }
        }
    })
}

/// One page-sized, page-aligned buffer. NULL with errno ENOMEM (no memory), EINVAL (NULL pool).
///
/// # Safety
/// `pool` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ebb_pool_get(pool: *mut EbbPool) -> *mut c_void {
    const F: &str = "ebb_pool_get";
    guard(F, ptr::null_mut(), || {
        if pool.is_null() {
            fail(libc::EINVAL, format!("{F}: pool is NULL"));
            return ptr::null_mut();
        }
        // SAFETY: caller's guarantee.
        let p = unsafe { pool_ref(pool) };
        match p.get() {
            Ok(page) => page.as_ptr().cast(),
            Err(e) => {
                let errno = match e {
                    AllocError::OutOfMemory(_) | AllocError::LimitReached { .. } => libc::ENOMEM,
                    AllocError::InitFailed | AllocError::CtorFailed => libc::ECANCELED,
                };
                fail(errno, format!("{F}: pool '{}': {e}", p.zone().name()));
                ptr::null_mut()
            }
        }
    })
}

/// Returns a buffer to its pool. `page` NULL does nothing. An invalid put (not a page of this
/// pool, not a page's start) is printed on stderr, counted and not applied; errno EINVAL.
///
/// # Safety
/// `pool` is NULL or a live handle; if `page` is a page of `pool`, the caller owns it.
#[no_mangle]
pub unsafe extern "C" fn ebb_pool_put(pool: *mut EbbPool, page: *mut c_void) {
    const F: &str = "ebb_pool_put";
    guard_abort(F, || {
        let Some(page) = NonNull::new(page.cast::<u8>()) else {
            return;
        };
        if pool.is_null() {
            INVALID_FREES.fetch_add(1, Ordering::Relaxed);
            let _ = writeln!(
                std::io::stderr(),
                "ebbtide: invalid free of {page:p}: pool is NULL; not freed"
            );
            fail(libc::EINVAL, format!("{F}: pool is NULL"));
            return;
        }
        // SAFETY: caller's guarantee.
        let p = unsafe { pool_ref(pool) };
        // SAFETY: caller's guarantee (ownership of a valid page); invalid pointers are detected
        // without touching their memory.
        if let Err(e) = unsafe { p.put(page) } {
            INVALID_FREES.fetch_add(1, Ordering::Relaxed);
            let _ = writeln!(std::io::stderr(), "{e}; not freed");
            fail(libc::EINVAL, format!("{F}: {e}"));
        }
    })
}

/// Destroys a pool. 0, or -1 with errno EBUSY (pages still in use; nothing freed, the pool stays
/// usable), EINVAL (NULL, or not a live pool handle: double destroy).
///
/// # Safety
/// `pool` is NULL or a pointer returned by `ebb_pool_create`; no other thread uses the pool
/// during the call.
#[no_mangle]
pub unsafe extern "C" fn ebb_pool_destroy(pool: *mut EbbPool) -> c_int {
    const F: &str = "ebb_pool_destroy";
    guard(F, -1, || {
        if pool.is_null() {
            fail(libc::EINVAL, format!("{F}: pool is NULL"));
            return -1;
        }
        let mut live = live_pools();
        if !live.contains(&(pool as usize)) {
            fail(
                libc::EINVAL,
                format!("{F}: {pool:p} is not a live pool (already destroyed?)"),
            );
            return -1;
        }
        // Out of the live set while the pool is moved out of its box: if `destroy` panicked,
        // the handle would not be destroyed (or dropped) a second time.
        live.remove(&(pool as usize));
        let slot = pool.cast::<PagePool>();
        // SAFETY: a live handle (checked above) made by Box::into_raw; the caller guarantees
        // exclusive use. The pool is moved out, the box's memory stays ours.
        let p = unsafe { ptr::read(slot) };
        match p.destroy() {
            Ok(()) => {
                // SAFETY: the allocation of the box, whose value was moved out above.
                drop(unsafe { Box::from_raw(slot.cast::<core::mem::MaybeUninit<PagePool>>()) });
                0
            }
            Err((p, busy)) => {
                // Back into the same box: the caller's handle stays valid.
                // SAFETY: the box's memory, empty since the read above.
                unsafe { ptr::write(slot, p) };
                live.insert(pool as usize);
                fail(libc::EBUSY, format!("{F}: {busy}"));
                -1
            }
        }
    })
}

/// Changes the pool's cap of free pages (takes effect at the next shrink). 0, or -1 errno
/// EINVAL (NULL pool).
///
/// # Safety
/// `pool` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ebb_pool_set_max_buffer_pages(
    pool: *mut EbbPool,
    max_buffer_pages: usize,
) -> c_int {
    const F: &str = "ebb_pool_set_max_buffer_pages";
    guard(F, -1, || {
        if pool.is_null() {
            fail(libc::EINVAL, format!("{F}: pool is NULL"));
            return -1;
        }
        // SAFETY: caller's guarantee.
        unsafe { pool_ref(pool) }.set_max_buffer_pages(pool_cap(max_buffer_pages));
        0
    })
}

/// Shrinks the pool to its cap now (to 0 free pages while a squeeze window is open), as the
/// reclaim thread does every `pool_shrink_interval_ms`. Bytes given back to the OS, or -1 errno
/// EINVAL (NULL pool). Pages in use are never touched.
///
/// # Safety
/// `pool` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ebb_pool_shrink(pool: *mut EbbPool) -> i64 {
    const F: &str = "ebb_pool_shrink";
    guard(F, -1, || {
        if pool.is_null() {
            fail(libc::EINVAL, format!("{F}: pool is NULL"));
            return -1;
        }
        // SAFETY: caller's guarantee.
        i64::try_from(unsafe { pool_ref(pool) }.shrink()).unwrap_or(i64::MAX)
    })
}

fn pool_stats(s: &ebbtide::PoolSnapshot) -> PoolStats {
    PoolStats {
        zone: ZoneStats::from(&s.zone),
        max_buffer_pages: s.max_buffer_pages,
        free_pages: s.free_pages,
        pages_in_use: s.pages_in_use,
        squeezed: s.squeezed,
    }
}

/// Fills `*out` with one pool's statistics. 0, or -1 errno EINVAL (NULL) / EIO.
///
/// # Safety
/// `pool` is NULL or a live handle; `out` is NULL or valid for one element.
#[no_mangle]
pub unsafe extern "C" fn ebb_pool_stats(pool: *mut EbbPool, out: *mut PoolStatsC) -> c_int {
    const F: &str = "ebb_pool_stats";
    guard(F, -1, || {
        if pool.is_null() || out.is_null() {
            fail(libc::EINVAL, format!("{F}: pool or out is NULL"));
            return -1;
        }
        // SAFETY: caller's guarantee.
        let s = pool_stats(&unsafe { pool_ref(pool) }.snapshot()).to_c();
        // SAFETY: caller's guarantee.
        unsafe { out.write(s) };
        0
    })
}

// ---------------------------------------------------------------------------------------------
// memory pressure and low-memory handlers

/// Reports memory pressure of `level` (`EBB_PRESSURE_*`): the reclaim thread applies the policy
/// at once (low-memory handlers, then TRIM / DRAIN and a squeeze window / DRAIN_CPU and no
/// per-CPU caches); without a reclaim thread it is applied on this thread before returning.
/// 0, or -1 errno EINVAL for a level outside 0..=3 (nothing happens then).
#[no_mangle]
pub extern "C" fn ebb_pressure_notify(level: c_int) -> c_int {
    const F: &str = "ebb_pressure_notify";
    guard(F, -1, || {
        let Some(l) = Level::from_raw(level) else {
            fail(
                libc::EINVAL,
                format!("{F}: level {level} is not EBB_PRESSURE_NONE (0), LOW (1), MODERATE (2) or CRITICAL (3)"),
            );
            return -1;
        };
        ebbtide::pressure::notify(l);
        0
    })
}

/// The pressure level in effect (`EBB_PRESSURE_*`), as the policy holds it; -1 errno EIO on an
/// internal error.
#[no_mangle]
pub extern "C" fn ebb_pressure_level() -> c_int {
    guard("ebb_pressure_level", -1, || {
        ebbtide::pressure::current_level() as c_int
    })
}

/// Most low-memory handlers registered at once (the core's limit).
pub const EBB_LOWMEM_MAX: usize = 16;

/// Handlers registered through this API: the C handle is the index here.
static LOWMEM: Mutex<[Option<HandlerId>; EBB_LOWMEM_MAX]> = Mutex::new([None; EBB_LOWMEM_MAX]);

fn lowmem() -> ebbtide::Gated<'static, [Option<HandlerId>; EBB_LOWMEM_MAX]> {
    ebbtide::lock_gated(&LOWMEM)
}

/// Registers `f(level, arg)`, called when pressure rises or the allocator is about to reclaim
/// for pressure: on the reclaim thread (or the thread calling `ebb_pressure_notify` when there
/// is none), before the allocator reclaims, with no allocator lock held. A handle >= 0, or -1
/// errno EINVAL (`f` NULL) / ENOSPC (16 handlers registered).
#[no_mangle]
pub extern "C" fn ebb_lowmem_register(f: Option<LowmemHandler>, arg: *mut c_void) -> c_int {
    const F: &str = "ebb_lowmem_register";
    guard(F, -1, || {
        let Some(f) = f else {
            fail(libc::EINVAL, format!("{F}: fn is NULL"));
            return -1;
        };
        let mut slots = lowmem();
        let Some(i) = slots.iter().position(Option::is_none) else {
            fail(
                libc::ENOSPC,
                format!("{F}: {EBB_LOWMEM_MAX} handlers are registered already"),
            );
            return -1;
        };
        match ebbtide::reclaimer::register_lowmem_handler_c(f, arg) {
            Some(id) => {
                slots[i] = Some(id);
                i as c_int
            }
            None => {
                fail(
                    libc::ENOSPC,
                    format!("{F}: {EBB_LOWMEM_MAX} handlers are registered already"),
                );
                -1
            }
        }
    })
}

/// Unregisters a handler. 0, or -1 errno EINVAL (not a registered handle). A call of the handler
/// already under way on the reclaim thread may still finish after this returns.
#[no_mangle]
pub extern "C" fn ebb_lowmem_unregister(handle: c_int) -> c_int {
    const F: &str = "ebb_lowmem_unregister";
    guard(F, -1, || {
        let mut slots = lowmem();
        let id = usize::try_from(handle)
            .ok()
            .and_then(|i| slots.get_mut(i))
            .and_then(Option::take);
        match id {
            Some(id) => {
                ebbtide::reclaimer::unregister_lowmem_handler_c(id);
                0
            }
            None => {
                fail(
                    libc::EINVAL,
                    format!("{F}: {handle} is not a registered handler"),
                );
                -1
            }
        }
    })
}

// ---------------------------------------------------------------------------------------------
// reclaim, stats, tunables, version

/// Reclaims from every zone: bytes given back to the OS, or -1 with errno EINVAL for an
/// unknown request.
#[no_mangle]
pub extern "C" fn ebb_reclaim(request: c_int) -> i64 {
    const F: &str = "ebb_reclaim";
    guard(F, -1, || {
        let Some(req) = Request::from_raw(request) else {
            fail(libc::EINVAL, format!("{F}: request {request} is not EBB_RECLAIM_TRIM (1), EBB_RECLAIM_DRAIN (2) or EBB_RECLAIM_DRAIN_CPU (3)"));
            return -1;
        };
        i64::try_from(ebbtide::reclaim::reclaim_all(req)).unwrap_or(i64::MAX)
    })
}

/// The statistics as JSON, snprintf semantics: writes at most `len - 1` bytes and a NUL (when
/// `len > 0`), returns the length of the whole text. 0 (never a valid length) with errno EIO on
/// internal error. `buf` may be NULL when `len` is 0.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ebb_stats_json(buf: *mut c_char, len: usize) -> usize {
    guard("ebb_stats_json", 0, || {
        let json = ebbtide::stats::collect().to_json();
        // SAFETY: caller's guarantee on buf/len.
        unsafe { copy_out(json.as_bytes(), buf, len) }
    })
}

/// Fills `out[0..n]` with one `struct ebbtide_zone_stats` per zone (oldest first) and returns
/// the number of zones (may exceed `n`: call again with a larger array). `out` may be NULL
/// when `n` is 0. `(size_t)-1` with errno EIO on internal error.
///
/// # Safety
/// `out` is NULL or valid for `n` elements.
#[no_mangle]
pub unsafe extern "C" fn ebb_stats_zones(out: *mut ZoneStatsC, n: usize) -> usize {
    guard("ebb_stats_zones", usize::MAX, || {
        let snap = ebbtide::stats::collect();
        if !out.is_null() {
            for (i, z) in snap.zones.iter().take(n).enumerate() {
                // SAFETY: i < n; the caller vouches for n elements.
                unsafe { out.add(i).write(z.to_c()) };
            }
        }
        snap.zones.len()
    })
}

/// Fills `out[0..n]` with one `struct ebbtide_pool_stats` per page pool (oldest first) and
/// returns the number of pools (may exceed `n`). `out` may be NULL when `n` is 0. `(size_t)-1`
/// with errno EIO on internal error.
///
/// # Safety
/// `out` is NULL or valid for `n` elements.
#[no_mangle]
pub unsafe extern "C" fn ebb_stats_pools(out: *mut PoolStatsC, n: usize) -> usize {
    guard("ebb_stats_pools", usize::MAX, || {
        let snap = ebbtide::stats::collect();
        if !out.is_null() {
            for (i, p) in snap.pools.iter().take(n).enumerate() {
                // SAFETY: i < n; the caller vouches for n elements.
                unsafe { out.add(i).write(p.to_c()) };
            }
        }
        snap.pools.len()
    })
}

/// Fills `*out` with the global statistics. 0, or -1 errno EINVAL (NULL) / EIO.
///
/// # Safety
/// `out` is NULL or valid for one element.
#[no_mangle]
pub unsafe extern "C" fn ebb_stats_global(out: *mut GlobalStatsC) -> c_int {
    const F: &str = "ebb_stats_global";
    guard(F, -1, || {
        if out.is_null() {
            fail(libc::EINVAL, format!("{F}: out is NULL"));
            return -1;
        }
        let g = ebbtide::stats::collect().global.to_c();
        // SAFETY: caller's guarantee.
        unsafe { out.write(g) };
        0
    })
}

fn option_errno(k: &OptionErrorKind) -> c_int {
    match k {
        OptionErrorKind::UnknownName { .. } => libc::ENOENT,
        _ => libc::EINVAL,
    }
}

/// Reads a tunable as text (canonical form, as `ebb_set` accepts it), snprintf semantics:
/// returns the length of the value, or -1 with errno EINVAL (NULL/bad name) / ENOENT (no such
/// tunable).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `buf` is NULL or valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ebb_get(name: *const c_char, buf: *mut c_char, len: usize) -> c_int {
    const F: &str = "ebb_get";
    guard(F, -1, || {
        // SAFETY: caller's guarantee.
        let Some(name) = (unsafe { c_str(F, "name", name) }) else {
            return -1;
        };
        match ebbtide::options::get(name) {
            // SAFETY: caller's guarantee on buf/len.
            Ok(v) => c_int::try_from(unsafe { copy_out(v.as_bytes(), buf, len) }).unwrap_or(-1),
            Err(e) => {
                fail(option_errno(&e.kind), format!("{F}: {e}"));
                -1
            }
        }
    })
}

/// Sets a tunable from text. 0, or -1 with errno ENOENT (no such tunable) / EINVAL (NULL, bad
/// value, out of range, start-up only, breaks a cross-tunable rule); nothing is changed on
/// failure. `ebb_last_error()` says why.
///
/// # Safety
/// `name` and `value` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn ebb_set(name: *const c_char, value: *const c_char) -> c_int {
    const F: &str = "ebb_set";
    guard(F, -1, || {
        // SAFETY: caller's guarantee.
        let Some(name) = (unsafe { c_str(F, "name", name) }) else {
            return -1;
        };
        // SAFETY: caller's guarantee.
        let Some(value) = (unsafe { c_str(F, "value", value) }) else {
            return -1;
        };
        match ebbtide::options::set(name, value) {
            Ok(()) => 0,
            Err(e) => {
                fail(option_errno(&e.kind), format!("{F}: {e}"));
                -1
            }
        }
    })
}

/// Every tunable as `name=value\n` lines, snprintf semantics (returns the whole length; 0 with
/// errno EIO on internal error).
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ebb_options_list(buf: *mut c_char, len: usize) -> usize {
    guard("ebb_options_list", 0, || {
        let mut s = String::new();
        for o in ebbtide::options::list() {
            s.push_str(o.def.name);
            s.push('=');
            s.push_str(&o.value);
            s.push('\n');
        }
        // SAFETY: caller's guarantee on buf/len.
        unsafe { copy_out(s.as_bytes(), buf, len) }
    })
}

/// The library version, e.g. `"0.1.0"` (static storage).
#[no_mangle]
pub extern "C" fn ebb_version() -> *const c_char {
    VERSION.as_ptr().cast()
}

/// This thread's message about its last failed call (empty string if none). Valid until the
/// next failing call on this thread.
#[no_mangle]
pub extern "C" fn ebb_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|l| l.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host memory pressure is not these tests' subject, and when it reaches their process (its
    /// runtime watches the host's and the cgroup's signals) it opens squeeze windows in which
    /// caches keep nothing, by design — which changes what the fast-path and double-free checks
    /// below see (two of them failed together so, run right after the experiments' swap-heavy
    /// smoke runs). So this test process's runtime starts no pressure source: set before
    /// `main`, while the process has one thread and before any zone reads its configuration.
    #[used]
    #[link_section = ".init_array"]
    static NO_PRESSURE_SOURCES: extern "C" fn() = no_pressure_sources;

    extern "C" fn no_pressure_sources() {
        std::env::set_var("EBBTIDE_SOURCES", "none");
    }

    /// Bit 0 of a handle is set exactly for a zone on the fast paths; a careful zone's handle
    /// (checked, zeroing, hooks) has it clear, and both kinds allocate, free, report an invalid
    /// or immediate double free, and destroy through the same entry points.
    #[test]
    fn the_handle_bit_tells_the_fast_zones() {
        let _serial = INVALID_FREES_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // What this test checks happens at the top of this CPU's stack (an immediate double
        // free, the next allocation's item): stay on one CPU, a migration would change stacks.
        ebbtide_core::os::pin_to_current_cpu();
        // SAFETY: a NUL-terminated name, valid flags; the zone is destroyed below.
        let plain = unsafe { ebb_zone_create(c"handle-plain".as_ptr(), 48, 0, 0) };
        let checked =
            // SAFETY: a NUL-terminated name, valid flags; the zone is destroyed below.
            unsafe { ebb_zone_create(c"handle-checked".as_ptr(), 48, 0, EBB_ZONE_CHECKED) };
        // SAFETY: a NUL-terminated name, valid flags; the zone is destroyed below.
        let zeroed = unsafe { ebb_zone_create(c"handle-zero".as_ptr(), 48, 0, EBB_ZONE_ZERO) };
        assert!(!plain.is_null() && !checked.is_null() && !zeroed.is_null());
        // SAFETY: a live zone.
        let rseq = unsafe { Zone::fast_consts_raw(zone_ptr(plain)) }.is_some();
        assert_eq!(
            fast_handle(plain),
            rseq,
            "plain: on the fast paths where rseq is"
        );
        assert!(!fast_handle(checked) && !fast_handle(zeroed));
        assert!(!fast_handle(ptr::null()));
        for z in [plain, checked, zeroed] {
            // No pass of the runtime's (a resize trimming the fresh stack, an idle drain) may
            // move `a` off the stack's top between the two frees: the second would then look
            // like a first (the test failed once so in a loaded full run).
            ebbtide_core::reclaim::without_reclaims(|| {
                // SAFETY: live zones; each item freed once, then the invalid frees are refused.
                unsafe {
                    assert_eq!(ebb_zone_item_size(z), 48);
                    let a = ebb_zone_alloc(z);
                    let b = ebb_zone_alloc(z);
                    assert!(!a.is_null() && !b.is_null() && a != b);
                    a.cast::<u8>().write_bytes(0x5a, 48);
                    ebb_zone_free(z, a);
                    let before = ebb_invalid_frees();
                    ebb_zone_free(z, a); // immediate double free: the top of the stack (or checked)
                    ebb_zone_free(z, b.cast::<u8>().add(8).cast()); // not an item start
                    assert_eq!(ebb_invalid_frees(), before + 2, "both refused");
                    ebb_zone_free(z, b);
                }
            });
            // SAFETY: a live zone, every item back.
            unsafe {
                assert_eq!(ebb_zone_destroy(z), 0);
                assert_eq!(ebb_zone_destroy(z), -1, "a double destroy is refused");
            }
        }
    }

    /// Serialises the tests that count `ebb_invalid_frees` (a process-wide counter) around
    /// their own invalid frees.
    pub(crate) static INVALID_FREES_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The fast `free` tests the owner by the chunk's hint (the owning zone's stacks): an item
    /// of another zone of the same size, which passes the item test, is refused and stays its
    /// zone's; so is an item of a destroyed zone's given-back chunk (its hint cleared).
    #[test]
    fn an_item_of_another_zone_is_refused_by_the_owner_test() {
        let _serial = INVALID_FREES_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // What this test checks happens at the top of this CPU's stack (an immediate double
        // free, the next allocation's item): stay on one CPU, a migration would change stacks.
        ebbtide_core::os::pin_to_current_cpu();
        // SAFETY: live zones; every item freed once to its own zone, the rest refused.
        unsafe {
            let a = ebb_zone_create(c"owner-a".as_ptr(), 64, 0, 0);
            let b = ebb_zone_create(c"owner-b".as_ptr(), 64, 0, 0);
            assert!(!a.is_null() && !b.is_null());
            let pa = ebb_zone_alloc(a);
            let pb = ebb_zone_alloc(b);
            assert!(!pa.is_null() && !pb.is_null());
            let before = ebb_invalid_frees();
            ebb_zone_free(a, pb);
            ebb_zone_free(b, pa);
            assert_eq!(
                ebb_invalid_frees(),
                before + 2,
                "each refused by the other zone"
            );
            // Both still their zones' own: freed there, then handed out again (no pass of the
            // runtime's moving them off their stacks' tops in between).
            ebbtide_core::reclaim::without_reclaims(|| {
                ebb_zone_free(a, pa);
                ebb_zone_free(b, pb);
                assert_eq!(ebb_invalid_frees(), before + 2);
                assert_eq!(ebb_zone_alloc(a), pa, "a's stack top");
                assert_eq!(ebb_zone_alloc(b), pb, "b's stack top");
            });
            ebb_zone_free(a, pa);
            ebb_zone_free(b, pb);
            assert_eq!(ebb_zone_destroy(b), 0);
            // b's chunks are given back (their hints cleared): a pointer into one is no item of
            // a live zone.
            ebb_zone_free(a, pb);
            assert_eq!(
                ebb_invalid_frees(),
                before + 3,
                "a destroyed zone's item refused"
            );
            assert_eq!(ebb_zone_destroy(a), 0);
        }
    }

    #[test]
    fn options_sizes_are_member_ends() {
        let v = EbbZoneOptions::valid_sizes();
        assert_eq!(*v.last().unwrap(), core::mem::size_of::<EbbZoneOptions>());
        assert_eq!(v[0], core::mem::size_of::<usize>());
    }

    #[test]
    fn panics_become_eio() {
        let r = guard("t", -7, || -> i32 { panic!("boom") });
        assert_eq!(r, -7);
        // SAFETY: errno slot of this thread.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EIO);
        // SAFETY: ebb_last_error returns a NUL-terminated string owned by this thread.
        let m = unsafe { CStr::from_ptr(ebb_last_error()) }
            .to_str()
            .unwrap();
        assert!(m.contains("boom"), "{m}");
    }

    /// `guard_abort` (used where no error return exists) aborts with a message; run in a child
    /// process (this test binary again, filtered to this test, with a marker variable).
    #[test]
    fn panics_without_error_return_abort_cleanly() {
        if std::env::var_os("EBBTIDE_CAPI_ABORT_CHILD").is_some() {
            guard_abort("ebb_test_fn", || panic!("kaboom"));
            unreachable!("guard_abort returned after a panic");
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "tests::panics_without_error_return_abort_cleanly",
                "--nocapture",
            ])
            .env("EBBTIDE_CAPI_ABORT_CHILD", "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("ebbtide: ebb_test_fn: internal error (Rust panic): kaboom; aborting"),
            "{err}"
        );
    }
}

#[cfg(test)]
mod abi_check;
