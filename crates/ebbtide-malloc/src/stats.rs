//! What glibc's introspection calls report under ebbtide: `mallinfo2`, `mallinfo`,
//! `malloc_stats`, and `malloc_trim`'s DRAIN_CPU.
//!
//! | `mallinfo2` field | ebbtide's figure |
//! |---|---|
//! | `arena` | bytes of slabs mapped and backed for the size classes (`mapped_bytes` of their zones) |
//! | `ordblks` | free blocks held: per-CPU caches + depot + free in slabs |
//! | `smblks`, `usmblks`, `fsmblks` | 0 (no fastbins, no `sbrk` maximum) |
//! | `hblks`, `hblkhd` | blocks above the classes (page heap and own mappings) and their bytes |
//! | `uordblks` | bytes in blocks handed out: class blocks × class size, plus `hblkhd` |
//! | `fordblks` | bytes of free blocks held (`ordblks` × their class sizes), plus the page heap's free resident runs |
//! | `keepcost` | bytes a `malloc_trim` would give back now: free blocks in backed slabs and caches, and the page heap's free resident runs |

use crate::{classes, heap, huge};
use core::ffi::c_int;
use ebbtide_core::{Request, Zone, ZoneSnapshot};
use std::mem::ManuallyDrop;

/// glibc's `struct mallinfo2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mallinfo2 {
    pub arena: usize,
    pub ordblks: usize,
    pub smblks: usize,
    pub hblks: usize,
    pub hblkhd: usize,
    pub usmblks: usize,
    pub fsmblks: usize,
    pub uordblks: usize,
    pub fordblks: usize,
    pub keepcost: usize,
}

/// glibc's `struct mallinfo` (every field an `int`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mallinfo {
    pub arena: c_int,
    pub ordblks: c_int,
    pub smblks: c_int,
    pub hblks: c_int,
    pub hblkhd: c_int,
    pub usmblks: c_int,
    pub fsmblks: c_int,
    pub uordblks: c_int,
    pub fordblks: c_int,
    pub keepcost: c_int,
}

/// A snapshot of every size class's zone created so far, with its class.
pub fn class_snapshots() -> Vec<(usize, ZoneSnapshot)> {
    heap::zones()
        .map(|(c, z)| {
            // SAFETY: a published zone, never destroyed; ManuallyDrop keeps the borrowed handle
            // from destroying it.
            let zone = ManuallyDrop::new(unsafe { Zone::from_raw(z) });
            (c, zone.snapshot())
        })
        .collect()
}

/// `mallinfo2()`.
pub fn mallinfo2() -> Mallinfo2 {
    let mut m = Mallinfo2::default();
    for (c, s) in class_snapshots() {
        let size = classes::size(c);
        m.arena += s.mapped_bytes as usize;
        m.ordblks += s.free as usize;
        m.uordblks += s.used as usize * size;
        m.fordblks += s.free as usize * size;
        m.keepcost += (s.free_bytes_slabs + s.cached_bytes_pcpu + s.cached_bytes_depot) as usize;
    }
    let (hb, hn) = huge::totals();
    m.hblks = hn;
    m.hblkhd = hb;
    m.uordblks += hb;
    let cached = huge::cached_bytes();
    m.fordblks += cached;
    m.keepcost += cached;
    m
}

/// `mallinfo()`.
pub fn mallinfo() -> Mallinfo {
    let m = mallinfo2();
    let c = |v: usize| v.min(c_int::MAX as usize) as c_int;
    Mallinfo {
        arena: c(m.arena),
        ordblks: c(m.ordblks),
        smblks: c(m.smblks),
        hblks: c(m.hblks),
        hblkhd: c(m.hblkhd),
        usmblks: c(m.usmblks),
        fsmblks: c(m.fsmblks),
        uordblks: c(m.uordblks),
        fordblks: c(m.fordblks),
        keepcost: c(m.keepcost),
    }
}

/// `malloc_trim`: DRAIN_CPU; 1 if bytes went back to the OS.
pub fn trim() -> c_int {
    (ebbtide_core::reclaim::reclaim_all(Request::DrainCpu) > 0) as c_int
}

/// `malloc_stats()`: one line per size class in use, then totals, on stderr.
pub fn print() {
    let mut out = String::from("ebbtide malloc: class  in use  free  mapped\n");
    for (c, s) in class_snapshots() {
        if s.used + s.free == 0 {
            continue;
        }
        out += &format!(
            "ebbtide malloc: {:>7} {:>7} {:>5} {:>8}\n",
            classes::size(c),
            s.used,
            s.free,
            s.mapped_bytes
        );
    }
    let m = mallinfo2();
    out += &format!(
        "ebbtide malloc: in use {} bytes, free {} bytes, mapped {} bytes, huge {} blocks / {} bytes, bad pointers {}\n",
        m.uordblks,
        m.fordblks,
        m.arena,
        m.hblks,
        m.hblkhd,
        crate::report::bad_pointers()
    );
    let r = huge::hugepage_counts();
    out += &format!(
        "ebbtide malloc: page heap 2 MiB regions: {} huge, {} partly used, {} broken; given back {} bytes whole, {} in part, {} huge pages broken\n",
        r.huge, r.partial, r.broken, r.whole_bytes, r.part_bytes, r.breaks
    );
    // glibc's closing lines, in its format: programs and tests that read `malloc_stats` look
    // for them (glibc's tst-malloc-stats-cancellation checks "max mmap bytes"). Its counters
    // are `unsigned int` but the last.
    let (max_bytes, max_blocks) = huge::peaks();
    out += &format!(
        "Total (incl. mmap):\nsystem bytes     = {:>10}\nin use bytes     = {:>10}\nmax mmap regions = {:>10}\nmax mmap bytes   = {:>10}\n",
        (m.arena + m.hblkhd) as u32,
        m.uordblks as u32,
        max_blocks as u32,
        max_bytes
    );
    // A raw write (not libc's, a cancellation point): `malloc_stats` may run on a thread that
    // is being cancelled, which must not unwind through this Rust frame.
    ebbtide_core::os::write_stderr(out.as_bytes());
}
