//! The allocators under test, each behind the same two-call interface for one fixed item size.
//!
//! Every peer is called directly (no `GlobalAlloc` indirection, no LD_PRELOAD): ebbtide through
//! `Zone::alloc`/`Zone::free`, mimalloc through `mi_malloc`/`mi_free`, jemalloc through its
//! prefixed `malloc`/`sdallocx` (sized free, the cheapest free it offers), glibc through
//! `libc::malloc`/`libc::free`, and gperftools tcmalloc (if installed) through
//! `tc_malloc`/`tc_free_sized`, loaded with `dlopen(RTLD_LOCAL)` so it does not replace glibc's
//! `malloc` for the rest of the process.

use core::ffi::c_void;
use core::ptr::NonNull;
use ebbtide::{Zone, ZoneOptions};

/// One allocator bound to one item size.
pub trait Alloc: Sync {
    fn alloc(&self) -> *mut u8;
    /// # Safety
    /// `p` came from `alloc` of this object and is freed once.
    unsafe fn free(&self, p: *mut u8);
}

pub struct Ebbtide(pub Zone);

impl Ebbtide {
    pub fn new(size: usize) -> Ebbtide {
        let name = format!("bench{size}");
        Ebbtide(Zone::new(ZoneOptions::new(&name, size)).expect("Zone::new"))
    }
}

impl Alloc for Ebbtide {
    #[inline(always)]
    fn alloc(&self) -> *mut u8 {
        match self.0.alloc() {
            Ok(p) => p.as_ptr(),
            Err(e) => oom(&e),
        }
    }
    #[inline(always)]
    unsafe fn free(&self, p: *mut u8) {
        // SAFETY: forwarded contract; p is non-null because it came from `alloc`.
        if let Err(e) = unsafe { self.0.free(NonNull::new_unchecked(p)) } {
            bad_free(&e);
        }
    }
}

#[cold]
#[inline(never)]
fn oom(e: &dyn core::fmt::Debug) -> ! {
    panic!("allocation failed: {e:?}")
}

#[cold]
#[inline(never)]
fn bad_free(e: &dyn core::fmt::Debug) {
    panic!("free failed: {e:?}")
}

#[inline(always)]
fn check(p: *mut c_void) -> *mut u8 {
    if p.is_null() {
        oom(&"null");
    }
    p.cast()
}

pub struct Mimalloc(pub usize);

impl Alloc for Mimalloc {
    #[inline(always)]
    fn alloc(&self) -> *mut u8 {
        // SAFETY: mi_malloc has no preconditions.
        check(unsafe { libmimalloc_sys::mi_malloc(self.0) })
    }
    #[inline(always)]
    unsafe fn free(&self, p: *mut u8) {
        // SAFETY: p came from mi_malloc.
        unsafe { libmimalloc_sys::mi_free(p.cast()) }
    }
}

pub struct Jemalloc(pub usize);

impl Alloc for Jemalloc {
    #[inline(always)]
    fn alloc(&self) -> *mut u8 {
        // SAFETY: jemalloc's malloc has no preconditions.
        check(unsafe { tikv_jemalloc_sys::malloc(self.0) })
    }
    #[inline(always)]
    unsafe fn free(&self, p: *mut u8) {
        // SAFETY: p came from jemalloc's malloc with this size.
        unsafe { tikv_jemalloc_sys::sdallocx(p.cast(), self.0, 0) }
    }
}

pub struct Glibc(pub usize);

impl Alloc for Glibc {
    #[inline(always)]
    fn alloc(&self) -> *mut u8 {
        // SAFETY: malloc has no preconditions.
        check(unsafe { libc::malloc(self.0) })
    }
    #[inline(always)]
    unsafe fn free(&self, p: *mut u8) {
        // SAFETY: p came from malloc.
        unsafe { libc::free(p.cast()) }
    }
}

type MallocFn = unsafe extern "C" fn(usize) -> *mut c_void;
type FreeSizedFn = unsafe extern "C" fn(*mut c_void, usize);

#[derive(Clone, Copy)]
pub struct TcFns {
    malloc: MallocFn,
    free_sized: FreeSizedFn,
}

/// gperftools tcmalloc's entry points, if `libtcmalloc_minimal.so.4` can be loaded.
pub fn tcmalloc_fns() -> Option<TcFns> {
    if !cfg!(feature = "tcmalloc") {
        return None;
    }
    static FNS: std::sync::OnceLock<Option<TcFns>> = std::sync::OnceLock::new();
    *FNS.get_or_init(|| {
        // SAFETY: dlopen/dlsym with NUL-terminated names; the symbols have the C signatures
        // declared in gperftools/tcmalloc.h.
        unsafe {
            let h = libc::dlopen(
                c"libtcmalloc_minimal.so.4".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            );
            if h.is_null() {
                return None;
            }
            let m = libc::dlsym(h, c"tc_malloc".as_ptr());
            let f = libc::dlsym(h, c"tc_free_sized".as_ptr());
            if m.is_null() || f.is_null() {
                return None;
            }
            Some(TcFns {
                malloc: core::mem::transmute::<*mut c_void, MallocFn>(m),
                free_sized: core::mem::transmute::<*mut c_void, FreeSizedFn>(f),
            })
        }
    })
}

pub struct Tcmalloc(pub usize, pub TcFns);

impl Alloc for Tcmalloc {
    #[inline(always)]
    fn alloc(&self) -> *mut u8 {
        // SAFETY: tc_malloc has no preconditions.
        check(unsafe { (self.1.malloc)(self.0) })
    }
    #[inline(always)]
    unsafe fn free(&self, p: *mut u8) {
        // SAFETY: p came from tc_malloc with this size.
        unsafe { (self.1.free_sized)(p.cast(), self.0) }
    }
}

type EbbAllocFn = unsafe extern "C" fn(*mut ebbtide_c::EbbZone) -> *mut c_void;
type EbbFreeFn = unsafe extern "C" fn(*mut ebbtide_c::EbbZone, *mut c_void);

/// ebbtide through its C API: `ebb_zone_alloc` / `ebb_zone_free` called through function
/// pointers the optimiser cannot see through, so every operation is an out-of-line call with
/// the zone's constants loaded from the zone object, as a C program gets it. (The Rust API
/// instead inlines its fast path into the caller's loop.) Not a peer: reported beside ebbtide.
pub struct EbbtideC {
    zone: *mut ebbtide_c::EbbZone,
    alloc: EbbAllocFn,
    free: EbbFreeFn,
}

// SAFETY: a zone may be used from any thread (the C API's contract, as `Zone: Send + Sync`).
unsafe impl Send for EbbtideC {}
// SAFETY: the C API's functions may be called on a zone from several threads at once (the same
// contract as `Zone: Sync`); the function pointers are immutable.
unsafe impl Sync for EbbtideC {}

impl EbbtideC {
    pub fn new(size: usize) -> EbbtideC {
        let name = std::ffi::CString::new(format!("bench-c{size}")).unwrap();
        // SAFETY: a NUL-terminated name; align 0 = default, no flags.
        let zone = unsafe { ebbtide_c::ebb_zone_create(name.as_ptr(), size, 0, 0) };
        assert!(!zone.is_null(), "ebb_zone_create failed");
        EbbtideC {
            zone,
            alloc: std::hint::black_box(ebbtide_c::ebb_zone_alloc as EbbAllocFn),
            free: std::hint::black_box(ebbtide_c::ebb_zone_free as EbbFreeFn),
        }
    }
}

impl Alloc for EbbtideC {
    #[inline(always)]
    fn alloc(&self) -> *mut u8 {
        // SAFETY: a live zone from ebb_zone_create.
        check(unsafe { (self.alloc)(self.zone) })
    }
    #[inline(always)]
    unsafe fn free(&self, p: *mut u8) {
        // SAFETY: p came from ebb_zone_alloc of this zone.
        unsafe { (self.free)(self.zone, p.cast()) }
    }
}

/// The allocators by name, in the order they are reported. The first two are ebbtide (Rust API,
/// C API); the rest are the peers.
pub const ALL: &[&str] = &[
    "ebbtide",
    "ebbtide-c",
    "mimalloc",
    "jemalloc",
    "glibc",
    "tcmalloc",
];

/// Is `name` one of the peers (not one of ebbtide's own columns)?
pub fn is_peer(name: &str) -> bool {
    !name.starts_with("ebbtide")
}

/// Names of the allocators present in this build / on this machine.
pub fn present() -> Vec<&'static str> {
    ALL.iter()
        .copied()
        .filter(|n| *n != "tcmalloc" || tcmalloc_fns().is_some())
        .collect()
}

/// Calls `f` with the named allocator bound to `size` (monomorphised per allocator).
pub trait WithAlloc {
    type Out;
    fn run<A: Alloc>(self, a: &A) -> Self::Out;
}

/// Dispatches `w` to the named allocator. ebbtide zones are made once per size and reused (a
/// zone is the long-lived object its users keep), so they are passed in.
pub fn with_alloc<W: WithAlloc>(name: &str, size: usize, zones: &Zones, w: W) -> W::Out {
    match name {
        "ebbtide" => w.run(zones.get(size)),
        "ebbtide-c" => w.run(zones.get_c(size)),
        "mimalloc" => w.run(&Mimalloc(size)),
        "jemalloc" => w.run(&Jemalloc(size)),
        "glibc" => w.run(&Glibc(size)),
        "tcmalloc" => w.run(&Tcmalloc(size, tcmalloc_fns().expect("tcmalloc absent"))),
        _ => panic!("unknown allocator {name}"),
    }
}

/// One ebbtide zone per item size used by the benchmarks.
pub struct Zones {
    z64: Ebbtide,
    z256: Ebbtide,
    c64: EbbtideC,
    c256: EbbtideC,
}

impl Zones {
    pub fn new() -> Zones {
        Zones {
            z64: Ebbtide::new(64),
            z256: Ebbtide::new(256),
            c64: EbbtideC::new(64),
            c256: EbbtideC::new(256),
        }
    }
    pub fn get(&self, size: usize) -> &Ebbtide {
        match size {
            64 => &self.z64,
            256 => &self.z256,
            _ => panic!("no zone of size {size}"),
        }
    }
    pub fn get_c(&self, size: usize) -> &EbbtideC {
        match size {
            64 => &self.c64,
            256 => &self.c256,
            _ => panic!("no zone of size {size}"),
        }
    }
}
