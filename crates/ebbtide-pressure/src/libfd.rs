//! Descriptors a library holds in a process it does not own.
//!
//! A program is free to close descriptors it did not open — daemons call `closefrom(3)` or
//! `close_range(3, ~0U, 0)` at start, `subprocess` does it in every child before `exec` — and
//! its `open` gets the lowest free number, so it expects to find 0 when it closed its stdin.
//! Under `LD_PRELOAD` the library's sources, epoll set, eventfds and control socket live in
//! such a process. Three rules follow, and [`LibFd`] keeps them:
//!
//! 1. **Out of the way**: a new descriptor moves at once to a high number ([`high_base`]:
//!    half the soft `RLIMIT_NOFILE`, at most 512; numbers below it stay the program's), so the
//!    library never takes the number a program expects from its next `open`, and a program
//!    that closed the library's descriptor is unlikely to get that number again soon.
//! 2. **Never act on a number that is no longer ours**: [`LibFd::check`] compares what the
//!    number refers to now (`fstat`: device, inode, type; `FD_CLOEXEC`, which every library
//!    descriptor has) with what it referred to when adopted. Owners check before they act
//!    (the watcher at least once a second, the control server every round, an injector before
//!    it writes), and treat a lost descriptor as a source that vanished: open again later.
//!    Dropping a lost descriptor does not close the number, which may be the program's now.
//!    Anonymous inodes (eventfd, epoll) all share one inode, so `fstat` cannot tell a
//!    program's own eventfd at the same number from ours: every library descriptor therefore
//!    carries a mark in its open file description, `F_SETSIG` to a number 1–64 taken in turn
//!    (the signal that `O_ASYNC` would send; the library never sets `O_ASYNC`, so nothing is
//!    ever sent), and the check compares it too. A program's descriptor has 0 there unless the
//!    program set it itself; two library descriptors of one process can pass for each other
//!    only when their marks are equal (64 apart in adoption order), which takes more than one
//!    runtime's descriptors in a process — the test suite, not a program.
//! 3. **Forks**: a child inherits the library's descriptors but none of its threads. The
//!    runtime's child handler calls [`close_all_in_child`] (atomics and `close` only); a
//!    `LibFd` dropped in another process than the one that adopted it never closes anything.
//!
//! No `OwnedFd` holds a library descriptor: its `drop` aborts the process in debug builds when
//! the number was closed behind its back ("IO Safety violation"), and in release builds it
//! closes whatever the number is now.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// `fcntl` commands of `<fcntl.h>` (`asm-generic/fcntl.h`, the same on every Linux
/// architecture) that the `libc` crate does not export for glibc.
const F_SETSIG: libc::c_int = 10;
const F_GETSIG: libc::c_int = 11;

/// The next mark (1–64, in turn; see the module docs).
fn next_mark() -> libc::c_int {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    // Relaxed: a counter; any order of adopters is fine.
    (NEXT.fetch_add(1, Ordering::Relaxed) % 64 + 1) as libc::c_int
}

/// The mark of the open file description at `fd` (`F_GETSIG`; 0 when none was set).
fn mark_of(fd: RawFd) -> libc::c_int {
    // SAFETY: F_GETSIG takes no argument; a closed number fails with EBADF.
    unsafe { libc::fcntl(fd, F_GETSIG) }
}

/// What a descriptor referred to when it was adopted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    mode: u32,
    rdev: u64,
}

fn identity(fd: RawFd) -> io::Result<Identity> {
    // SAFETY: `st` is plain old data (all-zero is valid) and fstat writes only into it; a
    // number that is not open only makes fstat fail with EBADF.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `&mut st` is valid for writes of one `stat`; a number that is not open only makes
    // fstat fail with EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Identity {
        dev: st.st_dev,
        ino: st.st_ino,
        mode: st.st_mode,
        rdev: st.st_rdev,
    })
}

/// Why a library descriptor is not ours any more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The number is not open (the program closed it).
    Closed(RawFd),
    /// The number is open but refers to something else (closed and opened again).
    Replaced(RawFd),
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Closed(fd) => write!(f, "descriptor {fd} was closed by the program"),
            Lost::Replaced(fd) => write!(
                f,
                "descriptor {fd} was closed by the program and now refers to another file"
            ),
        }
    }
}

impl std::error::Error for Lost {}

/// The lowest number the library's descriptors take: half the soft `RLIMIT_NOFILE`, at most
/// 512, at least 3 (a limit of 1024 gives 512; a limit of 1 048 576 gives 512 too, so the
/// kernel's descriptor table grows only to 1024 entries). Numbers below it stay the program's.
pub fn high_base() -> RawFd {
    high_base_for(soft_nofile())
}

/// [`high_base`] for a given soft limit (pure, for tests).
pub fn high_base_for(soft_limit: u64) -> RawFd {
    (soft_limit / 2).clamp(3, 512) as RawFd
}

fn soft_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is valid for writes of one rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return 1024;
    }
    r.rlim_cur
}

// ---- the registry of this process's library descriptors, for a forked child ----------------

/// Room for every descriptor the runtime holds at once: the watcher (epoll, injector, up to a
/// dozen sources with two descriptors each) and the control server (listener, wake pipe, up
/// to 16 connections), with room to spare. A descriptor that finds the table full is simply
/// not closed in a child (it is close-on-exec like every library descriptor).
const SLOTS: usize = 96;

// An array-repeat initialiser of a const: each element is its own atomic.
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicI32 = AtomicI32::new(-1);
static REGISTRY: [AtomicI32; SLOTS] = [EMPTY; SLOTS];

fn remember(fd: RawFd) {
    for s in &REGISTRY {
        // AcqRel: pairs with the swap in `close_all_in_child` (and the CAS in `forget`): a child
        // that takes the slot sees the descriptor stored here.
        if s.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

fn forget(fd: RawFd) {
    for s in &REGISTRY {
        // AcqRel: as in `remember`.
        if s.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// In a freshly forked child: close every library descriptor inherited from the parent (their
/// owners are threads that do not exist here). Async-signal-safe: atomics and `close` only.
pub fn close_all_in_child() {
    for s in &REGISTRY {
        // AcqRel: pairs with the CAS in `remember` (see there).
        let fd = s.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the number was a library descriptor in the parent at the fork, so it is
            // the same open file here; no object of this process closes it (a `LibFd` in a
            // process other than its adopter's never closes, see `Drop`).
            unsafe {
                libc::close(fd);
            }
        }
    }
}

/// Library descriptors of this process now (tests and diagnostics).
pub fn registered() -> Vec<RawFd> {
    REGISTRY
        .iter()
        // Acquire: pairs with the CAS in `remember`.
        .map(|s| s.load(Ordering::Acquire))
        .filter(|&fd| fd >= 0)
        .collect()
}

// ---- LibFd ------------------------------------------------------------------------------

/// A descriptor owned by the library inside someone else's process (see the module docs).
#[derive(Debug)]
pub struct LibFd {
    fd: RawFd,
    id: Identity,
    /// Its open file description's `F_GETSIG` mark (0: setting it failed, not compared).
    mark: libc::c_int,
    /// The process that adopted it: only that process closes it.
    pid: u32,
}

impl LibFd {
    /// Adopt `fd`, just returned by a system call with `O_CLOEXEC` (or its equivalent), owned by
    /// nobody else: it moves to the lowest free number at or above [`high_base`] (where the
    /// limit leaves no room, it stays where it is) and is recorded for [`close_all_in_child`].
    ///
    /// # Errors
    /// `fstat` of the new descriptor failed (it is closed then).
    ///
    /// # Safety
    /// `fd` must be open and owned by the caller, who gives up its ownership.
    pub unsafe fn adopt(fd: RawFd) -> io::Result<LibFd> {
        let base = high_base();
        let fd = if fd >= base {
            fd
        } else {
            // SAFETY: F_DUPFD_CLOEXEC only reads its integer argument.
            let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, base) };
            if high >= 0 {
                // SAFETY: the caller owns `fd`, and the duplicate now refers to the same file.
                unsafe { libc::close(fd) };
                high
            } else {
                fd // EMFILE/EINVAL: no room above the base, keep the number we have
            }
        };
        let id = match identity(fd) {
            Ok(id) => id,
            Err(e) => {
                // SAFETY: we own `fd` (the caller's, or our duplicate of it).
                unsafe { libc::close(fd) };
                return Err(e);
            }
        };
        let mut mark = next_mark();
        // SAFETY: F_SETSIG takes an integer argument; it only sets the signal `O_ASYNC` would
        // send, and no library descriptor has `O_ASYNC`.
        if unsafe { libc::fcntl(fd, F_SETSIG, mark) } != 0 || mark_of(fd) != mark {
            mark = 0;
        }
        remember(fd);
        Ok(LibFd {
            fd,
            id,
            mark,
            pid: std::process::id(),
        })
    }

    /// The number (for system calls; check with [`check`](Self::check) before acting on it
    /// when the program may have closed it).
    pub fn raw(&self) -> RawFd {
        self.fd
    }

    /// Set `O_NONBLOCK`.
    pub fn set_nonblocking(&self) -> io::Result<()> {
        // SAFETY: F_GETFL takes no argument.
        let fl = unsafe { libc::fcntl(self.fd, libc::F_GETFL) };
        // SAFETY: F_SETFL takes an integer, no pointer.
        if fl < 0 || unsafe { libc::fcntl(self.fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Whether the number still refers to what was adopted, in the process that adopted it.
    pub fn check(&self) -> Result<(), Lost> {
        if std::process::id() != self.pid {
            return Err(Lost::Closed(self.fd));
        }
        // SAFETY: F_GETFD has no memory-safety preconditions; a closed number fails with EBADF.
        let flags = unsafe { libc::fcntl(self.fd, libc::F_GETFD) };
        if flags < 0 {
            return Err(Lost::Closed(self.fd));
        }
        match identity(self.fd) {
            Err(_) => Err(Lost::Closed(self.fd)),
            Ok(id)
                if id != self.id
                    || flags & libc::FD_CLOEXEC == 0
                    || (self.mark != 0 && mark_of(self.fd) != self.mark) =>
            {
                Err(Lost::Replaced(self.fd))
            }
            Ok(_) => Ok(()),
        }
    }
}

impl AsRawFd for LibFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for LibFd {
    fn drop(&mut self) {
        if self.check().is_err() {
            // Not ours any more (closed, replaced, or inherited by a child that closed it
            // already): closing it could close the program's file.
            if std::process::id() == self.pid {
                forget(self.fd);
            }
            return;
        }
        forget(self.fd);
        // SAFETY: the number still refers to the file this object adopted, in its process.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// `read(2)` on a library descriptor (non-blocking ones return `WouldBlock`).
impl io::Read for &LibFd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes; a bad number only fails.
        let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

/// `send(2)` with `MSG_NOSIGNAL` on a socket, `write(2)` on anything else: a peer that went
/// away is an error (`EPIPE`), never a `SIGPIPE` for the program.
impl io::Write for &LibFd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let sock = self.id.mode & libc::S_IFMT == libc::S_IFSOCK;
        // SAFETY: `buf` is valid for reads of `buf.len()` bytes; a bad number only fails.
        let n = unsafe {
            if sock {
                libc::send(self.fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL)
            } else {
                libc::write(self.fd, buf.as_ptr().cast(), buf.len())
            }
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_is_half_the_limit_between_3_and_512() {
        assert_eq!(high_base_for(1024), 512);
        assert_eq!(high_base_for(1 << 20), 512);
        assert_eq!(high_base_for(256), 128);
        assert_eq!(high_base_for(4), 3);
        assert_eq!(high_base_for(0), 3);
    }

    #[test]
    fn adopted_descriptors_move_up_and_are_registered() {
        let (f, w) = pipe();
        assert!(f.raw() >= high_base(), "{} below {}", f.raw(), high_base());
        assert!(registered().contains(&f.raw()));
        assert_eq!(f.check(), Ok(()));
        let (n, id) = (f.raw(), f.id);
        drop(f);
        // Closed on drop: the number is free, or a parallel test took it for another file.
        assert!(identity(n).map_or(true, |now| now != id), "not closed");
        // SAFETY: the test's write end.
        unsafe { libc::close(w) };
    }

    /// A pipe's read end adopted (an inode of its own, unlike /dev/null or an eventfd, so that
    /// a parallel test adopting a number freed here can never pass for it), and the write end.
    fn pipe() -> (LibFd, RawFd) {
        let mut p = [0; 2];
        // SAFETY: `p` is valid for two ints.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the read end was just created and is owned by nobody else.
        (unsafe { LibFd::adopt(p[0]) }.unwrap(), p[1])
    }

    #[test]
    fn a_replaced_number_is_lost_and_never_closed() {
        let (f, w) = pipe();
        let (other, w2) = pipe();
        replace_behind_our_back(f, other.raw());
        // SAFETY: numbers the test owns.
        unsafe {
            libc::close(w);
            libc::close(w2);
        }
    }

    /// The program closes `f`'s number behind our back and opens its own file `theirs` there,
    /// close-on-exec like ours (dup3 does both at once, so no parallel test can take the number
    /// in between): `f` must find it replaced, and dropping `f` must not close the program's
    /// file. The test's duplicate at the number is closed afterwards.
    fn replace_behind_our_back(f: LibFd, theirs: RawFd) {
        let n = f.raw();
        // SAFETY: dup3 onto a number; the LibFd must cope.
        assert_eq!(unsafe { libc::dup3(theirs, n, libc::O_CLOEXEC) }, n);
        assert_eq!(f.check(), Err(Lost::Replaced(n)));
        drop(f); // must not close the program's file at `n`
                 // SAFETY: F_GETFD on a number the test owns now.
        assert!(unsafe { libc::fcntl(n, libc::F_GETFD) } >= 0, "still open");
        // SAFETY: the number the test's dup3 made.
        unsafe { libc::close(n) };
    }

    #[test]
    fn a_program_eventfd_at_our_number_is_not_taken_for_ours() {
        // SAFETY: eventfd returns a new descriptor (or -1).
        let e = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(e >= 0);
        // SAFETY: just created, owned by nobody else.
        let f = unsafe { LibFd::adopt(e) }.unwrap();
        assert_eq!(f.check(), Ok(()));
        assert!(mark_of(f.raw()) > 0, "marked");
        // The program's own eventfd. Every eventfd is the same anonymous inode: fstat alone
        // would take it for ours.
        // SAFETY: eventfd returns a new descriptor (or -1).
        let theirs = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(theirs >= 0);
        assert_eq!(identity(theirs).unwrap(), f.id, "the same fstat identity");
        replace_behind_our_back(f, theirs);
        // SAFETY: the test's eventfd.
        unsafe { libc::close(theirs) };
    }

    #[test]
    fn a_closed_number_is_lost() {
        let (f, w) = pipe();
        let n = f.raw();
        // SAFETY: closing a number behind the LibFd's back, as a program's closefrom does.
        unsafe { libc::close(n) };
        // Another test may adopt `n` now; it is a different file either way.
        assert!(f.check().is_err());
        drop(f);
        // SAFETY: the test's write end.
        unsafe { libc::close(w) };
    }
}
