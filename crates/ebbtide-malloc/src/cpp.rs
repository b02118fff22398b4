//! The C++ allocation operators by their Itanium names (`operator new`/`delete`, array,
//! sized, `nothrow_t` and `align_val_t` forms), so a C++ program's `new` is ebbtide's too.
//!
//! `operator new` follows the standard: on failure it calls the installed new handler
//! (`std::get_new_handler()`, found in the C++ runtime with `dlsym`) and tries again, and with no
//! handler throws `std::bad_alloc` for real — the exception is built and thrown with the C++
//! runtime's own `__cxa_allocate_exception`/`__cxa_throw` and unwinds through these
//! `extern "C-unwind"` functions into the caller's handler. Nothing of the C++ runtime is
//! linked: a C program loads no `libstdc++`, and a C++ program has it already. The `nothrow`
//! forms return NULL when there is no handler; with one, they hand the request to libstdc++'s
//! own `nothrow` form (found with `dlsym(RTLD_NEXT)`), which calls the throwing form — ours —
//! inside its `try`/`catch`: a handler that throws `std::bad_alloc` (or a handler that gives up)
//! ends in NULL, as the standard says. Rust cannot catch a C++ exception (it aborts), so the
//! catch is libstdc++'s. Before, such an exception unwound out of the `nothrow` form
//! (gperftools' `tcmalloc_unittest`, `OperatorsNewOOMs`, aborted; it passes under glibc).

use crate::heap;
use core::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

type NewHandler = unsafe extern "C-unwind" fn();

fn sym(cache: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    sym_in(cache, libc::RTLD_DEFAULT, name)
}

/// `name` looked up with `dlsym(handle, ..)` (`RTLD_DEFAULT`, or `RTLD_NEXT`: the definition
/// after this library's), cached in `cache`; null without one.
fn sym_in(cache: &AtomicPtr<c_void>, handle: *mut c_void, name: &CStr) -> *mut c_void {
    // Acquire, paired with the Release below: the cached value is `dlsym`'s answer, an address
    // that needs no other memory to be read; the pair costs nothing more than Relaxed here
    // (plain moves on x86-64) and a racing thread at worst asks `dlsym` twice.
    let p = cache.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    // SAFETY: dlsym with RTLD_DEFAULT or RTLD_NEXT (from this library's code) and a
    // NUL-terminated name has no preconditions.
    let p = unsafe { libc::dlsym(handle, name.as_ptr() as *const c_char) };
    // Release: see the load above.
    cache.store(p, Ordering::Release);
    p
}

fn new_handler() -> Option<NewHandler> {
    static GET: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let g = sym(&GET, c"_ZSt15get_new_handlerv");
    if g.is_null() {
        return None;
    }
    // SAFETY: `std::get_new_handler()` has this signature in every C++ ABI of Linux.
    let get: unsafe extern "C" fn() -> Option<NewHandler> = unsafe { core::mem::transmute(g) };
    // SAFETY: calling it has no preconditions.
    unsafe { get() }
}

#[cold]
fn throw_bad_alloc() -> ! {
    static ALLOC: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    static THROW: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    static TI: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    static VT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    static DTOR: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let a = sym(&ALLOC, c"__cxa_allocate_exception");
    let t = sym(&THROW, c"__cxa_throw");
    let ti = sym(&TI, c"_ZTISt9bad_alloc");
    let vt = sym(&VT, c"_ZTVSt9bad_alloc");
    let d = sym(&DTOR, c"_ZNSt9bad_allocD1Ev");
    if a.is_null() || t.is_null() || ti.is_null() || vt.is_null() || d.is_null() {
        crate::report::line(format_args!(
            "operator new: out of memory, and no C++ runtime to throw std::bad_alloc with; aborting"
        ));
        std::process::abort();
    }
    // SAFETY: the C++ ABI's signatures (Itanium C++ ABI §2.4): __cxa_allocate_exception(size)
    // returns room for the exception object; std::bad_alloc is one vtable pointer, which
    // points 16 bytes into its vtable (past offset-to-top and the typeinfo pointer);
    // __cxa_throw takes the object, its typeinfo and destructor, and unwinds (never returns)
    // through these C-unwind frames.
    unsafe {
        let alloc: unsafe extern "C" fn(usize) -> *mut c_void = core::mem::transmute(a);
        let throw: unsafe extern "C-unwind" fn(
            *mut c_void,
            *mut c_void,
            unsafe extern "C" fn(*mut c_void),
        ) -> ! = core::mem::transmute(t);
        let dtor: unsafe extern "C" fn(*mut c_void) = core::mem::transmute(d);
        let e = alloc(core::mem::size_of::<*const u8>());
        e.cast::<*const u8>().write(vt.cast::<u8>().add(16));
        throw(e, ti, dtor)
    }
}

/// One try at a block of `n` bytes aligned to `align` (0: the natural alignment).
fn try_alloc(n: usize, align: usize) -> *mut c_void {
    if align > 16 {
        heap::alloc_aligned(align, n).cast()
    } else {
        heap::alloc(n).cast()
    }
}

fn new_impl(n: usize, align: usize, nothrow: bool) -> *mut c_void {
    loop {
        let p = try_alloc(n, align);
        if !p.is_null() {
            return p.cast();
        }
        match new_handler() {
            // SAFETY: the program's own new handler, called as the standard says.
            Some(h) => unsafe { h() },
            None if nothrow => return core::ptr::null_mut(),
            None => throw_bad_alloc(),
        }
    }
}

fn delete(p: *mut c_void) {
    // SAFETY: `operator delete` is given NULL or a block from `operator new` (the caller's
    // obligation in C++); anything else is reported and not applied.
    unsafe { heap::free(p.cast()) }
}

macro_rules! new_ops {
    ($($name:ident ( $($arg:ident : $t:ty),* ) => $align:expr, $nothrow:expr;)*) => {$(
        /// A C++ allocation operator (see the module docs).
        #[no_mangle]
        pub extern "C-unwind" fn $name(n: usize $(, $arg: $t)*) -> *mut c_void {
            new_impl(n, $align, $nothrow)
        }
    )*};
}

new_ops! {
    _Znwm() => 0, false;
    _Znam() => 0, false;
    _ZnwmSt11align_val_t(al: usize) => al, false;
    _ZnamSt11align_val_t(al: usize) => al, false;
}

/// A `nothrow` form: the block, or, when allocation fails and a new handler is installed,
/// what libstdc++'s own `nothrow` form `name` answers (it calls our throwing form inside its
/// `try`/`catch`: NULL when the handler throws or gives up); without that form, the handler
/// is called here as by [`new_impl`].
fn nothrow_impl(
    n: usize,
    align: usize,
    nt: *const c_void,
    slot: &AtomicPtr<c_void>,
    name: &'static [u8],
) -> *mut c_void {
    let p = try_alloc(n, align);
    if !p.is_null() || new_handler().is_none() {
        return p;
    }
    // libstdc++'s definition, the one after this library's.
    let f = CStr::from_bytes_with_nul(name)
        .map_or(core::ptr::null_mut(), |c| sym_in(slot, libc::RTLD_NEXT, c));
    if f.is_null() {
        return new_impl(n, align, true);
    }
    if align == 0 {
        // SAFETY: libstdc++'s `operator new(size_t, const nothrow_t&) noexcept` (or the
        // array form), found by its Itanium name.
        let f: extern "C" fn(usize, *const c_void) -> *mut c_void =
            unsafe { core::mem::transmute(f) };
        f(n, nt)
    } else {
        // SAFETY: libstdc++'s `operator new(size_t, align_val_t, const nothrow_t&) noexcept`
        // (or the array form), found by its Itanium name.
        let f: extern "C" fn(usize, usize, *const c_void) -> *mut c_void =
            unsafe { core::mem::transmute(f) };
        f(n, align, nt)
    }
}

macro_rules! nothrow_ops {
    ($($name:ident ( $($arg:ident : $t:ty),* ) => $align:expr;)*) => {$(
        /// A C++ `nothrow` allocation operator (see the module docs).
        #[no_mangle]
        pub extern "C" fn $name(n: usize $(, $arg: $t)*, nt: *const c_void) -> *mut c_void {
            static NEXT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
            // The symbol's own name, NUL-terminated.
            nothrow_impl(n, $align, nt, &NEXT, concat!(stringify!($name), "\0").as_bytes())
        }
    )*};
}

nothrow_ops! {
    _ZnwmRKSt9nothrow_t() => 0;
    _ZnamRKSt9nothrow_t() => 0;
    _ZnwmSt11align_val_tRKSt9nothrow_t(al: usize) => al;
    _ZnamSt11align_val_tRKSt9nothrow_t(al: usize) => al;
}

macro_rules! delete_ops {
    ($($name:ident ( $($arg:ident : $t:ty),* );)*) => {$(
        /// A C++ deallocation operator (see the module docs).
        #[no_mangle]
        pub extern "C" fn $name(p: *mut c_void $(, $arg: $t)*) {
            delete(p)
        }
    )*};
}

delete_ops! {
    _ZdlPv();
    _ZdaPv();
    _ZdlPvm(_n: usize);
    _ZdaPvm(_n: usize);
    _ZdlPvRKSt9nothrow_t(_nt: *const c_void);
    _ZdaPvRKSt9nothrow_t(_nt: *const c_void);
    _ZdlPvSt11align_val_t(_al: usize);
    _ZdaPvSt11align_val_t(_al: usize);
    _ZdlPvmSt11align_val_t(_n: usize, _al: usize);
    _ZdaPvmSt11align_val_t(_n: usize, _al: usize);
    _ZdlPvSt11align_val_tRKSt9nothrow_t(_al: usize, _nt: *const c_void);
    _ZdaPvSt11align_val_tRKSt9nothrow_t(_al: usize, _nt: *const c_void);
}
