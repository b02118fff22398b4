//! Statics the fast paths read, addressed relative to the instruction pointer.
//!
//! A static of another crate (or of a crate built as `rlib` and `cdylib` at once, as
//! `ebbtide-malloc` is) is reached through the GOT in position-independent code: one load of its
//! address, then the load of the value. rustc does not mark such statics local, emits plain
//! `GOTPCREL` relocations, which GNU ld does not relax, and runs no link-time optimisation for a
//! package that also builds an `rlib` — and in the end every one of them is local to the link
//! unit that holds it (the `.so`'s version script exports only the C names). So `malloc` read
//! three addresses from the GOT and `free` five before their real loads.
//!
//! Those loads are off the latency chains, but they are loads: the core's load queue and the
//! reorder window hold fewer of a program's own misses while they are in flight. In the
//! malloc's `live_big` (200,000 live blocks replaced at random, each replacement reading a cold
//! block) the library built with fat LTO — the same code with every such static read directly —
//! took 135 ns per replacement against 175 (docs/design/benchmarks-record.md, "Statics without
//! the GOT").
//! [`local_ref!`](crate::local_ref) gets the same without LTO: the static's address from one
//! `lea` relative to `rip`, which the linker resolves in the link unit.
//!
//! Only for statics of this workspace's crates, which always end up in the same link unit as the
//! code that reads them (a `.so`, an executable): the static must not be preemptible at link time
//! (it is not: rustc exports no Rust static from a `cdylib`, and executables bind locally).

/// A `&'static` reference to the static `$s`, its address computed relative to `rip` (x86-64;
/// elsewhere a plain reference). See the module docs (`ebbtide_core::local`) for when it applies.
#[macro_export]
macro_rules! local_ref {
    ($s:path) => {{
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            let addr: usize;
            // SAFETY: `lea` computes the address of the static `$s` (no memory is read or
            // written, no flags change); the static lives for the whole program, so the
            // reference made from it below is valid for 'static.
            unsafe {
                ::core::arch::asm!(
                    "lea {addr}, [rip + {s}]",
                    addr = out(reg) addr,
                    s = sym $s,
                    options(pure, nomem, nostack, preserves_flags)
                );
            }
            // SAFETY: `addr` is the address of `$s` (the `lea` above).
            unsafe { $crate::local::same_type(&$s, addr) }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        {
            &$s
        }
    }};
}

/// `addr` as a reference of the type of `like`, which is only there for its type (the
/// optimiser drops the unused address; [`local_ref!`](crate::local_ref) passes the static
/// itself).
///
/// # Safety
/// `addr` is the address of the static `like` refers to.
#[doc(hidden)]
#[inline(always)]
pub unsafe fn same_type<T>(like: &'static T, addr: usize) -> &'static T {
    let _ = like;
    // SAFETY: `addr` is the address of a `'static` `T` (the caller's guarantee), so the
    // reference is valid for `'static` and shared like `like`.
    unsafe { &*(addr as *const T) }
}
