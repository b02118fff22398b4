//! The OS boundary: every system call the allocator core makes goes through this module.
//!
//! | call | used for | precondition |
//! |---|---|---|
//! | [`reserve`] / [`reserve_span`] | find a free stretch of address space (`PROT_NONE`, `MAP_NORESERVE`, never huge; a span far from other mappings) | none |
//! | [`map_at`] | map a piece of such a stretch readable and writable when first needed (`MAP_FIXED_NOREPLACE`) | page aligned |
//! | [`commit`] | make part of a reservation readable and writable (`mprotect`) | range inside a reservation, page aligned |
//! | [`set_thp`] / [`no_huge_pages`] | mark a region for transparent huge pages: a sparse one off them (`MADV_NOHUGEPAGE`), a dense one on them, under THP `madvise` too (`MADV_HUGEPAGE`) | range mapped |
//! | [`collapse`] | make a dense keg's older chunks huge pages now (`MADV_COLLAPSE`) | range mapped, `MADV_HUGEPAGE` |
//! | [`release`] | give the pages of a free slab back (`MADV_DONTNEED`) | range inside a committed chunk, page aligned |
//! | [`release_lazy`] | offer the pages of a free slab to the kernel (`MADV_FREE`), see [`crate::lazy`] | as `release` |
//! | [`map`] / [`remap`] / [`unmap`] | metadata pages (zone objects, per-CPU arrays, tables that grow; never huge) | length a multiple of the page size |
//! | `futex_wait` / `futex_wake` | the page release helper's sleep (`release.rs`) | a process-private word |
//! | [`page_size`], [`cpu_count`], [`current_cpu`], [`now_ns`], [`memory_and_swap`] | facts | none |
//!
//! **Why `MADV_DONTNEED` and not `munmap` to give memory back.** Both drop the pages at once
//! (about 75 ms per GiB of touched memory on a 2-vCPU VM) and both lower RSS and the cgroup charge immediately.
//! `MADV_DONTNEED` keeps the mapping: the address range stays ours, so a slab can be reused without
//! a new `mmap`, the kernel never has to split a VMA (no `vm.max_map_count` exhaustion after many
//! partial releases), and our chunk map stays valid, so a stale pointer into a released slab is
//! still recognised as ours and reported rather than faulting. `MADV_FREE` is not used where memory
//! must go now: it is lazy, and until the kernel actually reclaims, the pages still count against
//! the cgroup limit. `munmap` is used only when a whole reservation is torn down.
//! `MADV_FREE` is used only where promptness is not needed ([`release_lazy`], chosen by
//! [`crate::lazy`]): a page offered that way that nobody else needed is reused without a fault.
//!
//! **Address space on demand** (docs/design/address-space.md). Every range the process maps
//! counts against `RLIMIT_AS`, `PROT_NONE` reservations included, so a large region is found
//! with [`reserve_span`], everything of it not needed yet is unmapped again at once, and its pieces
//! are mapped with [`map_at`] as they are first needed: a limit lowered at run time is then
//! met where the heap grows, as under glibc, and `VSZ` is what is in use. A piece someone else
//! mapped meanwhile is [`MapAt::Taken`]; the caller skips it.
//!
//! **Huge pages** (docs/design/thp-policy.md). With transparent huge pages on `always`, the
//! first touch of any 2 MiB-aligned stretch of an eligible mapping faults in a whole 2 MiB
//! page. Sparse regions (the arena's chunks and its map, the page heap's address space) and
//! metadata are marked `MADV_NOHUGEPAGE` before their first touch: [`reserve`], [`map_at`]
//! and [`map`] do it themselves, so no region of the library is eligible unless a caller asks
//! ([`Thp::Eligible`]).
//!
//! Tests inject failures with [`fault::fail_next_commits`]: the next N commits fail with `ENOMEM`,
//! exactly as a refused `mprotect` of a strict-overcommit system would.

use core::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// An error from the OS boundary: which call failed and its `errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OsError {
    /// The system call that failed.
    pub call: &'static str,
    /// Its `errno`.
    pub errno: i32,
}

impl core::fmt::Display for OsError {
    /// As `std::io::Error`'s ("Cannot allocate memory (os error 12)"), but with no allocation:
    /// it is written when memory has run out (`strerror_r` into a buffer on the stack).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut buf = [0u8; 128];
        // SAFETY: strerror_r (the XSI one, the libc crate's binding) writes a NUL-terminated
        // message of at most `buf.len()` bytes into `buf` ("Unknown error N" for an unknown
        // number, returning EINVAL), or leaves it as it was.
        unsafe { libc::strerror_r(self.errno, buf.as_mut_ptr().cast(), buf.len()) };
        let len = buf.iter().position(|&b| b == 0).unwrap_or(0);
        match core::str::from_utf8(&buf[..len]) {
            Ok(msg) if !msg.is_empty() => {
                write!(f, "{} failed: {msg} (os error {})", self.call, self.errno)
            }
            _ => write!(f, "{} failed: os error {}", self.call, self.errno),
        }
    }
}

impl std::error::Error for OsError {}

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno` (what a C entry point reports its failure with).
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);

/// Bytes of physical memory and of swap (`sysinfo(2)`; no allocation), `(0, 0)` if refused.
pub fn memory_and_swap() -> (u64, u64) {
    // SAFETY: an all-zero sysinfo is a valid value of the plain C struct.
    let mut i: libc::sysinfo = unsafe { core::mem::zeroed() };
    // SAFETY: sysinfo writes the struct we pass.
    if unsafe { libc::sysinfo(&mut i) } != 0 {
        return (0, 0);
    }
    let unit = u64::from(i.mem_unit.max(1));
    (i.totalram as u64 * unit, i.totalswap as u64 * unit)
}

/// The OS page size (cached after the first call).
#[inline]
pub fn page_size() -> usize {
    let p = PAGE_SIZE.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let s = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let s = if s > 0 { s as usize } else { 4096 };
    PAGE_SIZE.store(s, Ordering::Relaxed);
    s
}

/// Number of CPU ids the kernel may report: one more than the highest CPU in
/// `/sys/devices/system/cpu/possible` (the kernel's `nr_cpu_ids`; every id `sched_getcpu` or
/// rseq returns is below it), and never below `_SC_NPROCESSORS_CONF`. Per-CPU arrays are sized
/// by it, so every id is covered.
///
/// Read once and cached: an open/read/close, and every zone creation asks (a malloc creates its
/// first dozen zones while a process starts). `possible` can list holes ("0-3,8-11"), where a
/// count of its CPUs (glibc's `_SC_NPROCESSORS_CONF`) would fall short of the highest id.
pub fn cpu_count() -> usize {
    cpu_ids().0
}

/// Whether [`cpu_count`] is known to exceed every CPU id the kernel can report (it was read from
/// `/sys/devices/system/cpu/possible`). The rseq critical sections index the per-CPU stacks by
/// the id after testing only that it is not negative (an unregistered thread's), so they are
/// used only when this holds (`pcpu.rs`, "The CPU id test").
pub fn cpu_ids_covered() -> bool {
    cpu_ids().1
}

/// `(count, covered)` for [`cpu_count`] and [`cpu_ids_covered`], cached.
fn cpu_ids() -> (usize, bool) {
    // 0: not read yet; else count << 1 | covered. Relaxed: every thread computes the same value
    // from the same file, so a race only reads it twice.
    static CPUS: AtomicUsize = AtomicUsize::new(0);
    let c = CPUS.load(Ordering::Relaxed);
    if c != 0 {
        return (c >> 1, c & 1 == 1);
    }
    // SAFETY: sysconf has no preconditions.
    let conf = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    let conf = if conf > 0 { conf as usize } else { 1 };
    let (n, covered) = match possible_cpu_bound() {
        Some(bound) => (bound.max(conf), true),
        None => (conf, false),
    };
    CPUS.store(n << 1 | covered as usize, Ordering::Relaxed);
    (n, covered)
}

/// One more than the highest CPU id in `/sys/devices/system/cpu/possible`, or `None` when the
/// file cannot be read or parsed. Reads with `open`/`read` into a stack buffer: no allocation
/// (a malloc's first zone asks).
fn possible_cpu_bound() -> Option<usize> {
    let mut buf = [0u8; 4096];
    // SAFETY: a NUL-terminated path; the descriptor is closed below on every path.
    let fd = unsafe {
        libc::open(
            c"/sys/devices/system/cpu/possible".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let mut len = 0;
    while len < buf.len() {
        // SAFETY: reads into the unused tail of `buf`.
        let r = unsafe { libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len) };
        if r < 0 && errno() == libc::EINTR {
            continue;
        }
        if r <= 0 {
            break;
        }
        len += r as usize;
    }
    // SAFETY: our descriptor, closed once.
    unsafe { libc::close(fd) };
    parse_possible(&buf[..len])
}

/// The bound of [`possible_cpu_bound`] from the file's text ("0-1\n", "0", "0-3,8-11\n"): the
/// last number plus one; `None` unless the text is a non-empty list of numbers and ranges
/// (a file cut short by the buffer fails here too).
fn parse_possible(text: &[u8]) -> Option<usize> {
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    let mut last: Option<usize> = None;
    for item in text.split(|&b| b == b',') {
        for num in item.splitn(2, |&b| b == b'-') {
            if num.is_empty() || num.len() > 9 || !num.iter().all(u8::is_ascii_digit) {
                return None;
            }
            last = Some(
                num.iter()
                    .fold(0usize, |v, &d| v * 10 + (d - b'0') as usize),
            );
        }
    }
    last.map(|m| m + 1)
}

#[cfg(loom)]
loom::thread_local! {
    static MODEL_CPU: core::cell::Cell<usize> = core::cell::Cell::new(0);
}

/// Under loom: the CPU the calling model thread "runs on" ([`current_cpu`]), set by the model.
#[cfg(loom)]
pub fn set_model_cpu(cpu: usize) {
    MODEL_CPU.with(|c| c.set(cpu));
}

/// The CPU this thread runs on now (may be stale the moment it returns); 0 if unknown.
#[inline]
pub fn current_cpu() -> usize {
    #[cfg(loom)]
    {
        MODEL_CPU.with(|c| c.get())
    }
    #[cfg(miri)]
    {
        0
    }
    #[cfg(not(any(miri, loom)))]
    {
        // SAFETY: sched_getcpu has no preconditions.
        let c = unsafe { libc::sched_getcpu() };
        if c < 0 {
            0
        } else {
            c as usize
        }
    }
}

/// Pins the calling thread to the CPU it runs on and returns that CPU: for tests and
/// benchmarks whose next allocation must pop the stack their last free pushed. Never called by
/// the allocator itself.
#[cfg(not(any(miri, loom)))]
pub fn pin_to_current_cpu() -> usize {
    let cpu = current_cpu();
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET on an index below CPU_SETSIZE
    // (a CPU id the kernel reported); sched_setaffinity reads the set only.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, core::mem::size_of_val(&set), &set)
    };
    assert_eq!(rc, 0, "sched_setaffinity to CPU {cpu}");
    cpu
}

/// Monotonic time in nanoseconds (`CLOCK_MONOTONIC`): the core's one time base (squeeze
/// windows, idle detection). Tests may replace it with a fake clock ([`fault::set_fake_clock`]).
#[inline]
pub fn now_ns() -> u64 {
    let fake = fault::FAKE_NOW.load(Ordering::Relaxed);
    if fake != 0 {
        return fake;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Fault injection for tests (compiled in every build; one thread-local load on the commit path).
///
/// Injection is per thread, so a test that injects failures cannot disturb tests running in
/// parallel threads of the same test binary.
pub mod fault {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static FAIL_COMMITS: Cell<u32> = const { Cell::new(0) };
    }
    pub(super) static FAILED: AtomicU32 = AtomicU32::new(0);

    /// The next `n` page acquisitions made by this thread fail with `ENOMEM`: [`super::commit`],
    /// [`super::map`], and a keg taking a chunk from the arena (fresh or reused).
    pub fn fail_next_commits(n: u32) {
        FAIL_COMMITS.with(|c| c.set(n));
    }

    thread_local! {
        static RELEASE_DELAY_US: Cell<u32> = const { Cell::new(0) };
    }

    /// The fake clock's reading in ns; 0 = the real clock.
    pub(super) static FAKE_NOW: AtomicU64 = AtomicU64::new(0);

    /// Test hook: [`super::now_ns`] returns `ns` from now on for every thread (`None`: the real
    /// clock again). For tests of time-dependent core state (squeeze windows) in their own
    /// process.
    pub fn set_fake_clock(ns: Option<u64>) {
        // 0 stands for "real clock", so a fake reading of 0 is stored as 1 ns.
        FAKE_NOW.store(ns.map_or(0, |n| n.max(1)), Ordering::Relaxed);
    }

    /// Test hook: every page give-back ([`super::release`]) by this thread sleeps `us`
    /// microseconds first, so a test can see what else waits for it (no lock may).
    pub fn set_release_delay_us(us: u32) {
        RELEASE_DELAY_US.with(|c| c.set(us));
    }

    pub(crate) fn release_delay() {
        let us = RELEASE_DELAY_US.with(|c| c.get());
        if us > 0 {
            std::thread::sleep(std::time::Duration::from_micros(us as u64));
        }
    }

    /// How many commits or maps failed because of injection since the process started.
    pub fn injected_failures() -> u32 {
        // SeqCst (here and in `should_fail`): a plain counter read by tests after joining the
        // threads that failed; the strongest order costs nothing on this cold path.
        FAILED.load(Ordering::SeqCst)
    }

    #[inline]
    pub(crate) fn should_fail() -> bool {
        FAIL_COMMITS.with(|c| {
            let n = c.get();
            if n == 0 {
                return false;
            }
            c.set(n - 1);
            // SeqCst: see `injected_failures`, the reader this counter exists for.
            FAILED.fetch_add(1, Ordering::SeqCst);
            true
        })
    }
}

/// Reserves `len` bytes of address space, inaccessible and not charged, aligned to `align`
/// (a power of two at least the page size).
pub fn reserve(len: usize, align: usize) -> Result<NonNull<u8>, OsError> {
    reserve_near(0, len, align)
}

/// Lowest address [`reserve_span`] aims at (4 TiB).
const SPAN_HINT_LO: usize = 4 << 40;
/// How many 1 TiB slots above it (to 64 TiB: below a PIE's text and heap at about 85 TiB and
/// the shared libraries and mappings at about 127 TiB).
const SPAN_HINT_SLOTS: usize = 60;

/// [`reserve`] for a span that grows by [`map_at`] long after: aimed at a random 1 TiB slot
/// from 4 to 64 TiB, far below where the kernel puts other mappings (from the top of the
/// address space down), so that nothing lands in the span's unmapped part in practice (a
/// piece taken is skipped, `map_at`). mimalloc aims its segments at 2–4 TiB the same way.
/// Where the slot is not free, the kernel's choice.
///
/// The whole `len` is reserved (proof that the stretch is free now), except under an
/// address-space limit (`RLIMIT_AS`) too low to hold it: every byte of a `PROT_NONE`
/// reservation counts against the limit, though the callers keep only the span's first
/// `hold` bytes mapped. Then only those are mapped, exactly at the start of a free slot
/// ([`place_span`]), and the span is presumed free as it is in practice; `Err` where no slot
/// takes even them.
pub fn reserve_span(len: usize, align: usize, hold: usize) -> Result<NonNull<u8>, OsError> {
    debug_assert!(len <= 1 << 40 && align <= 1 << 40 && hold <= len);
    match reserve_near(span_hint(0), len, align) {
        Err(e) if e.errno == libc::ENOMEM && address_space_limit().is_some() => place_span(hold, e),
        r => r,
    }
}

/// The start of a random 1 TiB slot in 4..64 TiB ([`reserve_span`]), the `n`th draw.
fn span_hint(n: u64) -> usize {
    let mut r = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into the buffer; it never blocks with
    // GRND_NONBLOCK (and then the clock stands in).
    let got = unsafe { libc::getrandom(r.as_mut_ptr().cast(), 8, libc::GRND_NONBLOCK) };
    let x = if got == 8 {
        u64::from_ne_bytes(r)
    } else {
        now_ns().wrapping_add(n).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    };
    SPAN_HINT_LO + ((x as usize % SPAN_HINT_SLOTS) << 40)
}

/// The address-space limit (`RLIMIT_AS`'s soft limit) in bytes; `None` when there is none (or
/// it cannot be read). No allocation.
pub fn address_space_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// How many random slots [`place_span`] tries before it gives up.
const PLACE_TRIES: u64 = 8;

/// [`reserve_span`] under an address-space limit: `hold` bytes (at least a page) mapped
/// `PROT_NONE` exactly at the start of a random slot that nothing occupies
/// (`MAP_FIXED_NOREPLACE`; a slot whose start is taken — the other span, a `MAP_FIXED` user —
/// is passed over). A slot start is 1 TiB aligned, so every alignment a span asks holds.
/// `first` is the full reservation's error, returned if no slot is found.
fn place_span(hold: usize, first: OsError) -> Result<NonNull<u8>, OsError> {
    let hold = round_up(hold.max(1), page_size());
    for n in 0..PLACE_TRIES {
        let slot = span_hint(n);
        // SAFETY: the range is nobody's if free (a slot of the spans' region), and nothing
        // mapped there is replaced.
        let r = unsafe {
            map_exactly(
                slot,
                hold,
                libc::PROT_NONE,
                libc::MAP_NORESERVE,
                "mmap(PROT_NONE span start)",
            )?
        };
        if r == MapAt::Mapped {
            // SAFETY: non-null, the mapping just made.
            let r = unsafe { NonNull::new_unchecked(slot as *mut u8) };
            no_huge_pages(r, hold);
            return Ok(r);
        }
    }
    Err(first)
}

fn reserve_near(hint: usize, len: usize, align: usize) -> Result<NonNull<u8>, OsError> {
    debug_assert!(align.is_power_of_two() && align >= page_size());
    let total = len + align;
    // SAFETY: an anonymous PROT_NONE mapping, the address a hint only (no MAP_FIXED), has no
    // preconditions.
    let p = unsafe {
        libc::mmap(
            hint as *mut libc::c_void,
            total,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(OsError {
            call: "mmap(PROT_NONE reservation)",
            errno: errno(),
        });
    }
    let start = p as usize;
    let aligned = (start + align - 1) & !(align - 1);
    // Trim the unaligned head and the tail so exactly [aligned, aligned + len) stays reserved.
    // SAFETY: both ranges lie inside the mapping just created and are page aligned.
    unsafe {
        if aligned > start {
            libc::munmap(start as *mut _, aligned - start);
        }
        let end = aligned + len;
        let map_end = start + total;
        if map_end > end {
            libc::munmap(end as *mut _, map_end - end);
        }
    }
    // SAFETY: `aligned` is inside a successful mapping, hence non-null.
    let r = unsafe { NonNull::new_unchecked(aligned as *mut u8) };
    // Before any commit: an `mprotect`ed piece keeps the flag (a VMA split copies it).
    no_huge_pages(r, len);
    Ok(r)
}

/// Whether a mapping may be backed by transparent huge pages (docs/design/thp-policy.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Thp {
    /// `MADV_NOHUGEPAGE`: sparse data and metadata, where one touch would fault in 2 MiB.
    Never,
    /// The system's policy (`always`: huge where aligned): dense data that fills its pages.
    Eligible,
    /// `MADV_HUGEPAGE`: huge where aligned also on `madvise` hosts: dense data the allocator
    /// itself fills (a dense keg's chunks, `keg/huge.rs`).
    Huge,
}

/// What [`map_at`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapAt {
    /// The range is mapped, readable and writable, zero-filled.
    Mapped,
    /// Something else is mapped in the range (nothing was changed): skip it.
    Taken,
}

/// Maps `[addr, addr+len)` readable and writable, exactly there and only if nothing is mapped
/// in that range (`MAP_FIXED_NOREPLACE`; where a kernel before 4.17 takes the address as a
/// hint and maps elsewhere, that mapping is undone and the range reported [`MapAt::Taken`]).
/// `ENOMEM` (an `RLIMIT_AS` reached, `vm.max_map_count`) is an error. Pages are charged when
/// first touched.
///
/// # Safety
/// `addr` and `len` are page aligned, and the range, if free, is the caller's to map: a range
/// of a region found with [`reserve`] that the caller unmapped and nobody else has mapped.
pub unsafe fn map_at(addr: NonNull<u8>, len: usize, thp: Thp) -> Result<MapAt, OsError> {
    if fault::should_fail() {
        return Err(OsError {
            call: "mmap(MAP_FIXED_NOREPLACE)",
            errno: libc::ENOMEM,
        });
    }
    // SAFETY: the caller's range, if free; nothing mapped there is replaced.
    let r = unsafe {
        map_exactly(
            addr.as_ptr() as usize,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            0,
            "mmap(MAP_FIXED_NOREPLACE)",
        )?
    };
    if r == MapAt::Mapped {
        set_thp(addr, len, thp);
    }
    Ok(r)
}

/// Maps `[addr, addr+len)` anonymous and private with `prot` (and the `extra` flags), exactly
/// there and only if nothing is mapped in that range (`MAP_FIXED_NOREPLACE`): [`MapAt::Taken`]
/// when something is (`EEXIST`), or when a kernel before 4.17 took the address as a hint (that
/// mapping undone). Any other failure is an error named `call`.
///
/// # Safety
/// `addr` and `len` are page aligned, and the range, if free, is the caller's to map.
unsafe fn map_exactly(
    addr: usize,
    len: usize,
    prot: libc::c_int,
    extra: libc::c_int,
    call: &'static str,
) -> Result<MapAt, OsError> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the range is the caller's.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE | extra,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let errno = errno();
        if errno == libc::EEXIST {
            return Ok(MapAt::Taken);
        }
        return Err(OsError { call, errno });
    }
    if p as usize != addr {
        // A kernel without MAP_FIXED_NOREPLACE placed it elsewhere: not ours to keep.
        // SAFETY: the mapping just made, unused.
        unsafe { libc::munmap(p, len) };
        return Ok(MapAt::Taken);
    }
    Ok(MapAt::Mapped)
}

/// Marks `[ptr, ptr+len)` (mapped, page aligned) with `thp`: `MADV_NOHUGEPAGE` for
/// [`Thp::Never`], `MADV_HUGEPAGE` for [`Thp::Huge`] (each advice replaces the other), nothing
/// for [`Thp::Eligible`] (no advice clears a mark: a fresh mapping has none). Takes effect for
/// pages not yet touched; a 2 MiB-aligned stretch already touched and marked huge is collapsed
/// later by khugepaged. For dense regions only (docs/design/hugepage-heap.md). A kernel without
/// THP refuses with `EINVAL`: nothing to do then.
pub fn set_thp(ptr: NonNull<u8>, len: usize, thp: Thp) {
    let advice = match thp {
        Thp::Never => libc::MADV_NOHUGEPAGE,
        Thp::Huge => libc::MADV_HUGEPAGE,
        Thp::Eligible => return,
    };
    // SAFETY: madvise with (NO)HUGEPAGE changes no contents; on a range that is not mapped it
    // fails with ENOMEM and marks only the mapped part.
    unsafe { libc::madvise(ptr.as_ptr().cast(), len, advice) };
}

/// `MADV_COLLAPSE` (Linux 6.1; not in every libc crate target's constants).
const MADV_COLLAPSE: libc::c_int = 25;

/// Collapses the pages of `[ptr, ptr+len)` (mapped, `MADV_HUGEPAGE`, 2 MiB aligned) into huge
/// pages now (`MADV_COLLAPSE`): the kernel copies what is there into a huge page per aligned
/// 2 MiB, contents kept, concurrent access safe. Returns whether it did; a kernel before 6.1
/// (`EINVAL`) or one with no huge page free (`EAGAIN`, `ENOMEM`) leaves the pages as they are,
/// for khugepaged.
pub fn collapse(ptr: NonNull<u8>, len: usize) -> bool {
    // SAFETY: MADV_COLLAPSE changes no contents (the kernel copies them into the huge page under
    // its locks); on a range that is not mapped it fails and changes nothing.
    unsafe { libc::madvise(ptr.as_ptr().cast(), len, MADV_COLLAPSE) == 0 }
}

/// Pages of `[ptr, ptr+len)` (page aligned, at most 512 pages: one huge page of 4 KiB pages)
/// in memory now (`mincore`); `None` if the range is longer or the call fails. What a
/// [`collapse`] would add: it backs the whole range.
pub fn resident_pages(ptr: NonNull<u8>, len: usize) -> Option<usize> {
    const MAX: usize = 512;
    let n = len.div_ceil(page_size());
    if n > MAX {
        return None;
    }
    let mut v = [0u8; MAX];
    // SAFETY: `v` has room for one byte per page of the range (n <= MAX); mincore only reads
    // the page tables and fails with ENOMEM (changing nothing) on a range not mapped.
    let r = unsafe { libc::mincore(ptr.as_ptr().cast(), len, v.as_mut_ptr()) };
    (r == 0).then(|| v[..n].iter().filter(|&&b| b & 1 != 0).count())
}

/// Marks `[ptr, ptr+len)` `MADV_NOHUGEPAGE` ([`set_thp`] with [`Thp::Never`]): never backed
/// by transparent huge pages, whatever the system's setting. Call it before the first touch.
pub fn no_huge_pages(ptr: NonNull<u8>, len: usize) {
    set_thp(ptr, len, Thp::Never);
}

/// Makes `[ptr, ptr+len)` of a reservation readable and writable. Pages are only charged when
/// first touched.
///
/// # Safety
/// The range must lie inside a reservation made by [`reserve`] and be page aligned.
pub unsafe fn commit(ptr: NonNull<u8>, len: usize) -> Result<(), OsError> {
    if fault::should_fail() {
        return Err(OsError {
            call: "mprotect(commit)",
            errno: libc::ENOMEM,
        });
    }
    // SAFETY: the caller guarantees the range is ours and page aligned.
    let r = unsafe { libc::mprotect(ptr.as_ptr().cast(), len, libc::PROT_READ | libc::PROT_WRITE) };
    if r != 0 {
        return Err(OsError {
            call: "mprotect(commit)",
            errno: errno(),
        });
    }
    Ok(())
}

/// Gives the pages of `[ptr, ptr+len)` back to the OS; the range stays mapped and reads as
/// zeros afterwards.
///
/// # Safety
/// The range must be committed memory of ours, page aligned, and hold nothing anyone still uses.
pub unsafe fn release(ptr: NonNull<u8>, len: usize) {
    fault::release_delay();
    // SAFETY: the caller guarantees the range is ours, page aligned and unused.
    let r = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_DONTNEED) };
    debug_assert_eq!(r, 0, "madvise(MADV_DONTNEED) failed");
}

/// `MADV_COLD` (Linux 5.4; not in every libc crate target's constants).
const MADV_COLD: libc::c_int = 20;

/// Splits the transparent huge page holding the page at `ptr` (page aligned, mapped) into 4 KiB
/// pages now, so that a `MADV_DONTNEED` of part of it frees and uncharges that part at once.
/// Without the split the kernel only queues a partly unmapped huge page for a split under
/// memory pressure, and until then the memory cgroup stays charged the whole 2 MiB (a
/// `malloc_trim` of 80 MiB of 40-byte objects: RSS 11 MiB, 49 MiB charged). `MADV_COLD` of a
/// range that covers part of a huge page splits it (`madvise_cold_or_pageout_pte_range`), then
/// moves the page at `ptr` to the inactive list: the caller releases that page next, or it is one
/// it can spare the nudge. Nothing on a 4 KiB page, a page shared with a forked child (the
/// kernel does not split those), a kernel before 5.4 (`EINVAL`) or one that could not lock the
/// page: the split then waits for the kernel, as before.
pub fn split_huge(ptr: NonNull<u8>) {
    // SAFETY: MADV_COLD changes no contents (it only ages pages); on a range that is not mapped
    // it fails and changes nothing.
    unsafe { libc::madvise(ptr.as_ptr().cast(), page_size(), MADV_COLD) };
}

/// Whether the page at `addr` (mapped and touched) is part of a transparent huge page, read from
/// `/proc/self/pagemap` and `/proc/kpageflags` (`KPF_THP`); `None` where they cannot be read or
/// the page is not present (the frame numbers are shown to root only). For tests and
/// diagnostics: a page of a huge page broken by a partial release stays part of it until the
/// huge page is split ([`split_huge`]).
pub fn page_in_thp(addr: usize) -> Option<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let word = |path: &str, index: u64| -> Option<u64> {
        let mut f = std::fs::File::open(path).ok()?;
        f.seek(SeekFrom::Start(index * 8)).ok()?;
        let mut b = [0u8; 8];
        f.read_exact(&mut b).ok()?;
        Some(u64::from_le_bytes(b))
    };
    let entry = word("/proc/self/pagemap", (addr / page_size()) as u64)?;
    // Bit 63: present; bits 0-54: the frame number (0 when hidden).
    let pfn = entry & ((1 << 55) - 1);
    if entry & (1 << 63) == 0 || pfn == 0 {
        return None;
    }
    const KPF_THP: u64 = 1 << 22;
    Some(word("/proc/kpageflags", pfn)? & KPF_THP != 0)
}

/// Whether [`page_in_thp`] can show a huge page here: root (the frames' flags are readable)
/// and THP not `never` (a `MADV_HUGEPAGE` range can be backed by huge pages). For tests of the
/// splits, which skip those checks elsewhere.
pub fn thp_observable() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|m| !m.contains("[never]"))
}

/// Offers the pages of `[ptr, ptr+len)` to the kernel with `MADV_FREE`: they stay mapped and
/// charged (RSS, cgroup usage) until the kernel needs memory and takes them; a write before
/// that keeps the page and costs no fault, after it the page faults in zeroed. Returns false
/// (having done nothing) where `MADV_FREE` is not available (kernels before 4.5: `EINVAL`);
/// the caller then uses [`release`].
///
/// # Safety
/// As [`release`]; afterwards the contents are undefined (old data or zeros) until written.
pub unsafe fn release_lazy(ptr: NonNull<u8>, len: usize) -> bool {
    // SAFETY: the caller guarantees the range is ours, page aligned and unused.
    let r = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_FREE) };
    r == 0
}

/// Sleeps while `word` holds `expected`, for at most `timeout_ms` (no limit for `None`);
/// returns at once if it does not hold it, and may return spuriously. A raw system call: not a
/// cancellation point, and no libc state touched.
pub fn futex_wait_for(word: &AtomicU32, expected: u32, timeout_ms: Option<u64>) {
    let ts = timeout_ms.map(|ms| libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    });
    let tp = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT_PRIVATE on a valid, aligned u32 that lives as long as the call (a
    // static in practice); the timeout is null (no limit) or points to a timespec on this
    // stack, relative as FUTEX_WAIT wants.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            tp,
        );
    }
}

/// Wakes up to `waiters` threads sleeping in [`futex_wait_for`] on `word` (`i32::MAX`: all).
pub fn futex_wake(word: &AtomicU32, waiters: i32) {
    // SAFETY: FUTEX_WAKE_PRIVATE on a valid, aligned u32; wakes at most `waiters` threads.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            waiters,
        );
    }
}

/// glibc's registered rseq area: `(__rseq_offset, __rseq_size)`, or `None` when this libc
/// exports neither (not glibc, or older than 2.35). A size below 20 means not registered.
pub fn glibc_rseq_area() -> Option<(isize, u32)> {
    // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names has no preconditions.
    let (off, size) = unsafe {
        (
            libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()),
            libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()),
        )
    };
    if off.is_null() || size.is_null() {
        return None;
    }
    // SAFETY: glibc defines these as `const ptrdiff_t __rseq_offset` and
    // `const unsigned int __rseq_size`, valid for the life of the process.
    Some(unsafe { (*(off as *const isize), *(size as *const u32)) })
}

const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_int = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_int = 1 << 8;
const MEMBARRIER_CMD_FLAG_CPU: libc::c_uint = 1;

/// Registers the process for `MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ`; false if the kernel
/// refuses (then remote drains cannot use rseq fences).
pub fn membarrier_register_rseq() -> bool {
    // SAFETY: membarrier registration has no memory-safety preconditions.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ,
            0,
            0,
        ) == 0
    }
}

/// Restarts every rseq critical section running on `cpu` (and fences it): one
/// `membarrier(PRIVATE_EXPEDITED_RSEQ, FLAG_CPU, cpu)`. False if the kernel refused.
pub fn membarrier_rseq_cpu(cpu: usize) -> bool {
    // SAFETY: membarrier has no memory-safety preconditions.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ,
            MEMBARRIER_CMD_FLAG_CPU,
            cpu as libc::c_int,
        ) == 0
    }
}

/// Registers fork handlers (`pthread_atfork`): `child` runs in the child after a fork. It must
/// only do what is async-signal-safe (in practice: store to atomics).
pub fn atfork_child(child: extern "C" fn()) {
    // SAFETY: registers a handler; the caller's obligation (async-signal-safe body) is stated
    // above and in every handler's comment.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// Registers all three fork handlers (`pthread_atfork`). `prepare` runs in the forking thread
/// before the fork (it may wait); `parent` and `child` after it, and like every child handler
/// `child` must only do what is async-signal-safe.
pub fn atfork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: registers handlers; the obligations on their bodies are stated above.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

static METADATA_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes of the library's own metadata in memory: zone objects, per-CPU stacks, chunk headers
/// with their slab descriptors, and the used pages of the chunk map. Beside the kegs'
/// `mapped_bytes` (slabs of items and of buckets), this accounts for every byte the library maps
/// and touches.
pub fn metadata_bytes() -> u64 {
    METADATA_BYTES.load(Ordering::Relaxed) as u64
}

/// Counts `n` more bytes of metadata (see [`metadata_bytes`]).
pub fn add_metadata(n: usize) {
    METADATA_BYTES.fetch_add(n, Ordering::Relaxed);
}

/// Counts `n` bytes of metadata gone.
pub fn sub_metadata(n: usize) {
    METADATA_BYTES.fetch_sub(n, Ordering::Relaxed);
}

/// Maps `len` bytes of fresh zeroed memory (a multiple of the page size) for metadata, never
/// backed by huge pages (metadata is touched sparsely).
pub fn map(len: usize) -> Result<NonNull<u8>, OsError> {
    if fault::should_fail() {
        return Err(OsError {
            call: "mmap",
            errno: libc::ENOMEM,
        });
    }
    // SAFETY: an anonymous mapping at a kernel-chosen address has no preconditions.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(OsError {
            call: "mmap",
            errno: errno(),
        });
    }
    // SAFETY: a successful mmap never returns null here (we did not ask for address 0).
    let m = unsafe { NonNull::new_unchecked(p.cast()) };
    no_huge_pages(m, len);
    Ok(m)
}

/// Grows a mapping obtained from [`map`] from `old` to `new` bytes (multiples of the page
/// size), moving it where it does not fit in place (`mremap`, `MREMAP_MAYMOVE`: the pages
/// move, nothing is copied); its contents are kept, the rest reads as zeros, never huge.
///
/// # Safety
/// `[ptr, ptr+old)` is exactly a mapping of ours from [`map`] (or this function); on success
/// it is no longer valid and the returned address is used instead.
pub unsafe fn remap(ptr: NonNull<u8>, old: usize, new: usize) -> Result<NonNull<u8>, OsError> {
    if fault::should_fail() {
        return Err(OsError {
            call: "mremap",
            errno: libc::ENOMEM,
        });
    }
    // SAFETY: the caller guarantees the range is exactly one of our mappings.
    let p = unsafe { libc::mremap(ptr.as_ptr().cast(), old, new, libc::MREMAP_MAYMOVE) };
    if p == libc::MAP_FAILED {
        return Err(OsError {
            call: "mremap",
            errno: errno(),
        });
    }
    // SAFETY: a successful mremap never returns null (the old mapping was not at 0).
    let m = unsafe { NonNull::new_unchecked(p.cast::<u8>()) };
    // The moved VMA keeps its flags; the grown part is marked too (one VMA).
    no_huge_pages(m, new);
    Ok(m)
}

/// Unmaps memory obtained from [`map`] or a whole [`reserve`]d range.
///
/// # Safety
/// The range must be exactly one we mapped and nothing may use it afterwards.
pub unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: the caller guarantees the range is ours and unused.
    unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
}

/// Rounds `n` up to a multiple of `to` (a power of two).
#[inline]
pub const fn round_up(n: usize, to: usize) -> usize {
    (n + to - 1) & !(to - 1)
}

/// Writes `msg` to standard error with one `write(2)` (no allocation, no lock; a message of up
/// to `PIPE_BUF` bytes is not interleaved with other writers). Errors are ignored: there is
/// nowhere left to report them.
pub fn write_stderr(msg: &[u8]) {
    // A raw system call, not libc's `write`: that one is a cancellation point, and a thread
    // cancelled inside the allocator would unwind through frames that cannot unwind (the
    // process aborts). Short writes and EINTR are carried on; other errors drop the rest.
    let mut rest = msg;
    while !rest.is_empty() {
        // SAFETY: writes `rest.len()` initialised bytes from a live slice to fd 2.
        let n = unsafe { libc::syscall(libc::SYS_write, 2, rest.as_ptr(), rest.len()) };
        if n > 0 {
            rest = &rest[n as usize..];
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        } else {
            return;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The possible-CPU list gives one more than its highest id, holes and all; anything else
    /// is refused (and the per-CPU sections then stay off, `cpu_ids_covered`).
    #[test]
    fn possible_cpus_give_the_highest_id_plus_one() {
        assert_eq!(parse_possible(b"0-1\n"), Some(2));
        assert_eq!(parse_possible(b"0\n"), Some(1));
        assert_eq!(parse_possible(b"0"), Some(1));
        assert_eq!(parse_possible(b"0-3,8-11\n"), Some(12));
        assert_eq!(parse_possible(b"0,2\n"), Some(3));
        for bad in [
            &b""[..],
            b"\n",
            b"0-",
            b"-1",
            b"0-1,",
            b"a",
            b"0-1\n\n",
            b"0 1",
            b"0-1,,2",
        ] {
            assert_eq!(
                parse_possible(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // This machine's: the count covers every CPU the process can run on.
        assert!(
            cpu_ids_covered(),
            "/sys/devices/system/cpu/possible unreadable here"
        );
        assert!(cpu_count() >= 1 && current_cpu() < cpu_count());
    }

    #[test]
    fn reserve_commit_release_roundtrip() {
        let ps = page_size();
        let r = reserve(16 * ps, 8 * ps).unwrap();
        assert_eq!(r.as_ptr() as usize % (8 * ps), 0);
        // SAFETY: the range is inside the reservation and page aligned.
        unsafe {
            commit(r, 4 * ps).unwrap();
            r.as_ptr().write_bytes(0xab, 4 * ps);
            release(r, 4 * ps);
            assert_eq!(*r.as_ptr().add(ps), 0, "released pages read as zero");
            unmap(r, 16 * ps);
        }
    }

    #[test]
    fn lazy_release_keeps_the_mapping() {
        let ps = page_size();
        let r = reserve(4 * ps, ps).unwrap();
        // SAFETY: the range is inside the reservation and page aligned.
        unsafe {
            commit(r, 4 * ps).unwrap();
            r.as_ptr().write_bytes(0xcd, 4 * ps);
            assert!(release_lazy(r, 4 * ps), "MADV_FREE refused");
            // Still mapped and writable: a write takes the page back (old data or zeros before).
            let b = *r.as_ptr();
            assert!(b == 0xcd || b == 0, "{b:#x}");
            r.as_ptr().write_bytes(1, 4 * ps);
            assert_eq!(*r.as_ptr().add(3 * ps), 1);
            unmap(r, 4 * ps);
        }
    }

    #[test]
    fn injected_commit_failure() {
        let ps = page_size();
        let r = reserve(ps, ps).unwrap();
        let before = fault::injected_failures();
        fault::fail_next_commits(1);
        // SAFETY: inside the reservation.
        let e = unsafe { commit(r, ps) }.unwrap_err();
        assert_eq!(e.errno, libc::ENOMEM);
        assert!(fault::injected_failures() > before);
        // SAFETY: inside the reservation.
        unsafe {
            commit(r, ps).unwrap();
            unmap(r, ps);
        }
    }

    /// The `VmFlags` of the mapping holding `addr` in `/proc/self/smaps` (`nh`: never huge).
    fn vm_flags(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) =
                        (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                    {
                        inside = a <= addr && addr < b;
                        continue;
                    }
                }
            }
            if inside {
                if let Some(f) = line.strip_prefix("VmFlags:") {
                    return f.to_string();
                }
            }
        }
        panic!("{addr:#x} not in /proc/self/smaps")
    }

    /// `map_at` maps exactly where asked and only there, refuses a place taken, and marks
    /// the range never huge unless asked otherwise; `map`, `remap` and a reservation are never
    /// huge (docs/design/thp-policy.md).
    /// An error reads as `std::io::Error`'s, written without allocating.
    #[test]
    fn an_os_error_reads_as_io_errors_do() {
        for errno in [libc::ENOMEM, libc::EEXIST, libc::EINVAL] {
            let e = OsError {
                call: "mmap",
                errno,
            };
            assert_eq!(
                e.to_string(),
                format!("mmap failed: {}", std::io::Error::from_raw_os_error(errno))
            );
        }
        assert_eq!(
            OsError {
                call: "x",
                errno: 99999
            }
            .to_string(),
            format!("x failed: {}", std::io::Error::from_raw_os_error(99999))
        );
    }

    #[test]
    fn map_at_and_the_huge_page_marks() {
        let ps = page_size();
        let never = |a: usize| vm_flags(a).split_whitespace().any(|f| f == "nh");
        let span = reserve_span(64 * ps, ps, 0).unwrap();
        assert!(never(span.as_ptr() as usize), "a reservation");
        // SAFETY: the reservation just made, unused; its place is ours.
        unsafe { unmap(span, 64 * ps) };
        let at = |i: usize| {
            // SAFETY: inside the span found above.
            unsafe { NonNull::new_unchecked(span.as_ptr().add(i * ps)) }
        };
        // SAFETY: pieces of the span just unmapped; nobody else maps there (the test's own).
        unsafe {
            assert_eq!(map_at(at(0), 4 * ps, Thp::Never), Ok(MapAt::Mapped));
            assert_eq!(
                map_at(at(2), 4 * ps, Thp::Never),
                Ok(MapAt::Taken),
                "overlaps"
            );
            assert_eq!(map_at(at(8), 4 * ps, Thp::Eligible), Ok(MapAt::Mapped));
            at(3).as_ptr().write(1);
            at(11).as_ptr().write(1);
        }
        assert!(never(at(0).as_ptr() as usize));
        assert!(
            !never(at(8).as_ptr() as usize),
            "eligible: the system's policy"
        );
        let m = map(2 * ps).unwrap();
        assert!(never(m.as_ptr() as usize), "metadata");
        // SAFETY: `m` is a mapping from `map`, replaced by the result.
        let m = unsafe { remap(m, 2 * ps, 64 * ps) }.unwrap();
        assert!(never(m.as_ptr() as usize + 63 * ps), "grown metadata");
        // SAFETY: the mappings made above, unused now.
        unsafe {
            unmap(m, 64 * ps);
            unmap(at(0), 4 * ps);
            unmap(at(8), 4 * ps);
        }
    }

    /// Memory and swap are facts of the machine: some memory, and no more than 2^50 bytes.
    #[test]
    fn memory_and_swap_are_read() {
        let (ram, swap) = memory_and_swap();
        assert!(ram > 1 << 20 && ram < 1 << 50, "{ram}");
        assert!(swap < 1 << 50, "{swap}");
    }

    #[test]
    fn facts() {
        assert!(page_size().is_power_of_two());
        assert!(cpu_count() >= 1);
        assert!(current_cpu() < cpu_count());
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a);
    }
}
