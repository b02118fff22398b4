//! The OS boundary: every system call the allocator core makes goes through this module.
//!
//! | call | used for | precondition |
//! |---|---|---|
//! | [`reserve`] | address space for the arena (`PROT_NONE`, `MAP_NORESERVE`) | none |
//! | [`commit`] | make a chunk of the reservation readable and writable (`mprotect`) | range inside a reservation, page aligned |
//! | [`release`] | give the pages of a free slab back (`MADV_DONTNEED`) | range inside a committed chunk, page aligned |
//! | [`release_lazy`] | offer the pages of a free slab to the kernel (`MADV_FREE`), see [`crate::lazy`] | as `release` |
//! | [`map`] / [`unmap`] | metadata pages (zone objects, per-CPU arrays) | length a multiple of the page size |
//! | `futex_wait` / `futex_wake` | the page release helper's sleep (`release.rs`) | a process-private word |
//! | [`page_size`], [`cpu_count`], [`current_cpu`], [`now_ns`] | facts | none |
//!
//! **Why `MADV_DONTNEED` and not `munmap` to give memory back.** Both drop the pages at once
//! (about 75 ms per GiB here, anchors §5) and both lower RSS and the cgroup charge immediately.
//! `MADV_DONTNEED` keeps the mapping: the address range stays ours, so a slab can be reused without
//! a new `mmap`, the kernel never has to split a VMA (no `vm.max_map_count` exhaustion after many
//! partial releases), and our chunk map stays valid, so a stale pointer into a released slab is
//! still recognised as ours and reported rather than faulting. `MADV_FREE` is not used where memory
//! must go now: it is lazy, and until the kernel actually reclaims, the pages still count against
//! the cgroup limit. `munmap` is used only when a whole reservation is torn down.
//! `MADV_FREE` is used only where promptness is not needed ([`release_lazy`], chosen by
//! [`crate::lazy`]): a page offered that way that nobody else needed is reused without a fault.
//!
//! Tests inject failures with [`fault::fail_next_commits`]: the next N commits fail with `ENOMEM`,
//! exactly as a refused `mprotect` of a strict-overcommit system would.

use core::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// An error from the OS boundary: which call failed and its `errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OsError {
    /// The system call that failed.
    pub call: &'static str,
    /// Its `errno`.
    pub errno: i32,
}

impl core::fmt::Display for OsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} failed: {}",
            self.call,
            std::io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for OsError {}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);

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

/// Number of CPU ids the kernel may report (`_SC_NPROCESSORS_CONF`): per-CPU arrays are sized by
/// it, so every id `sched_getcpu` or rseq can return is covered.
pub fn cpu_count() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    if n > 0 {
        n as usize
    } else {
        1
    }
}

/// The CPU this thread runs on now (may be stale the moment it returns); 0 if unknown.
#[inline]
pub fn current_cpu() -> usize {
    #[cfg(miri)]
    {
        0
    }
    #[cfg(not(miri))]
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

/// Monotonic time in nanoseconds (`CLOCK_MONOTONIC`).
#[inline]
pub fn now_ns() -> u64 {
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

    /// How many commits or maps failed because of injection since the process started.
    pub fn injected_failures() -> u32 {
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
            FAILED.fetch_add(1, Ordering::SeqCst);
            true
        })
    }
}

/// Reserves `len` bytes of address space, inaccessible and not charged, aligned to `align`
/// (a power of two at least the page size).
pub fn reserve(len: usize, align: usize) -> Result<NonNull<u8>, OsError> {
    debug_assert!(align.is_power_of_two() && align >= page_size());
    let total = len + align;
    // SAFETY: an anonymous PROT_NONE mapping at a kernel-chosen address has no preconditions.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
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
            errno: last_errno(),
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
    Ok(unsafe { NonNull::new_unchecked(aligned as *mut u8) })
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
            errno: last_errno(),
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
    // SAFETY: the caller guarantees the range is ours, page aligned and unused.
    let r = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_DONTNEED) };
    debug_assert_eq!(r, 0, "madvise(MADV_DONTNEED) failed");
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

/// Sleeps while `word` holds `expected` (returns at once if it does not; may return spuriously).
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: FUTEX_WAIT_PRIVATE on a valid, aligned u32 that lives as long as the call (a
    // static in practice); a null timeout waits without limit.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            core::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wakes one thread sleeping in [`futex_wait`] on `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE_PRIVATE on a valid, aligned u32; wakes at most one waiter.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

/// Maps `len` bytes of fresh zeroed memory (a multiple of the page size) for metadata.
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
            errno: last_errno(),
        });
    }
    // SAFETY: a successful mmap never returns null here (we did not ask for address 0).
    Ok(unsafe { NonNull::new_unchecked(p.cast()) })
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

#[cfg(test)]
mod tests {
    use super::*;

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
