//! The OS boundary of the pressure module: every open, read, write, eventfd and socket call
//! goes through here, and every error names the file and the operation.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::libfd::LibFd;
use super::SourceError;

/// `path` as a C string; fails on an interior NUL.
pub(crate) fn cpath(path: &Path) -> Result<CString, SourceError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| SourceError::invalid(format!("path {} contains a NUL byte", path.display())))
}

/// Open `path` with `flags` (O_CLOEXEC is always added), as a library descriptor (moved out
/// of the program's way, see [`LibFd`]). Public for the runtime's own one-time reads in the
/// program's process (the control socket's directory listing).
pub fn open(path: &Path, flags: libc::c_int) -> Result<LibFd, SourceError> {
    let c = cpath(path)?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call; open has no other
    // preconditions.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(SourceError::io("opening", path, io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by open, is valid and owned by nobody else.
    unsafe { LibFd::adopt(fd) }.map_err(|e| SourceError::io("checking", path, e))
}

/// Write all of `buf` to `fd` in one `write` call (kernel control files need the whole
/// command in one write); a short write is an error.
pub(crate) fn write_once(
    fd: RawFd,
    buf: &[u8],
    path: &Path,
    what: &str,
) -> Result<(), SourceError> {
    // SAFETY: `buf` is valid for `buf.len()` bytes for the duration of the call; an invalid fd
    // only makes write fail with EBADF.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(SourceError::io(what, path, io::Error::last_os_error()));
    }
    if n as usize != buf.len() {
        return Err(SourceError::io(
            what,
            path,
            io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {n} of {} bytes", buf.len()),
            ),
        ));
    }
    Ok(())
}

/// Read whatever is available from a non-blocking `fd` into a scratch buffer and discard it.
/// Returns the number of bytes read (0 = end of file / peer closed); `Ok(None)` if nothing
/// was available (EAGAIN).
pub(crate) fn read_discard(fd: RawFd, path: &Path) -> Result<Option<usize>, SourceError> {
    let mut buf = [0u8; 512];
    let mut total = 0usize;
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes; an invalid fd only makes read
        // fail with EBADF.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(if total == 0 { None } else { Some(total) }),
                _ => return Err(SourceError::io("reading", path, e)),
            }
        }
        if n == 0 {
            return Ok(Some(total));
        }
        total += n as usize;
        if (n as usize) < buf.len() {
            return Ok(Some(total));
        }
    }
}

/// Read a whole small file from offset 0 through an already open fd (`pread`), for files
/// whose change notification is tied to the open file (kernfs `memory.events`).
pub(crate) fn pread_string(fd: RawFd, path: &Path) -> Result<String, SourceError> {
    let mut buf = vec![0u8; 4096];
    let mut len = 0usize;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        // SAFETY: the pointer and length describe the unused tail of `buf`, valid for writes.
        let n = unsafe {
            libc::pread(
                fd,
                buf[len..].as_mut_ptr().cast(),
                buf.len() - len,
                len as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(SourceError::io("reading", path, e));
        }
        if n == 0 {
            break;
        }
        len += n as usize;
    }
    buf.truncate(len);
    String::from_utf8(buf)
        .map_err(|_| SourceError::invalid(format!("{} is not UTF-8", path.display())))
}

/// Read a whole (small) file as a string, through a library descriptor ([`open`]): the runtime
/// reads `/proc/self/mountinfo` and the like on its own thread while the program runs, and a
/// low number held for the whole read is one the program's next `open` or `dup` does not get
/// (CPython's `test_os.test_fd_leak`, which checks that the lowest free number is unchanged
/// after a loop, failed once under a CPU hog with the runtime starting meanwhile). Moved high
/// at once, the number the program expects is taken for three system calls, not a read.
pub(crate) fn read_string(path: &Path) -> Result<String, SourceError> {
    let fd = open(path, libc::O_RDONLY)?;
    pread_string(fd.raw(), path)
}

/// Parse `"max"` (→ `Some(None)`) or a decimal number (→ `Some(Some(n))`).
pub(crate) fn parse_limit(s: &str) -> Option<Option<u64>> {
    let t = s.trim();
    if t == "max" {
        return Some(None);
    }
    t.parse::<u64>().ok().map(Some)
}

/// A new non-blocking, close-on-exec eventfd.
pub(crate) fn eventfd() -> Result<LibFd, SourceError> {
    // SAFETY: eventfd has no memory-safety preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(SourceError::io(
            "creating",
            Path::new("eventfd"),
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: `fd` was just returned by eventfd, is valid and owned by nobody else.
    unsafe { LibFd::adopt(fd) }.map_err(|e| SourceError::io("checking", Path::new("eventfd"), e))
}

/// Read and reset an eventfd counter; `Ok(0)` if it was zero (EAGAIN).
pub(crate) fn eventfd_read(fd: RawFd, what: &Path) -> Result<u64, SourceError> {
    let mut v = 0u64;
    loop {
        // SAFETY: `v` is a valid, writable 8-byte buffer for the duration of the call.
        let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            return Ok(v);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(0),
            _ if n >= 0 => {
                return Err(SourceError::invalid(format!(
                    "{}: short eventfd read of {n} bytes",
                    what.display()
                )))
            }
            _ => return Err(SourceError::io("reading", what, e)),
        }
    }
}

/// Add 1 to an eventfd counter. Never fails in practice (the counter would have to reach
/// 2^64-2); errors are returned anyway.
pub(crate) fn eventfd_signal(fd: RawFd) -> io::Result<()> {
    let one = 1u64;
    // SAFETY: `one` is a valid 8-byte buffer for the duration of the call.
    let n = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    if n == 8 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Connect a non-blocking, close-on-exec AF_UNIX stream socket to `path`.
pub(crate) fn connect_unix(path: &Path) -> Result<LibFd, SourceError> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(SourceError::invalid(format!(
            "socket path {} is longer than {} bytes",
            path.display(),
            addr.sun_path.len() - 1
        )));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket has no memory-safety preconditions.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(SourceError::io(
            "creating a socket for",
            path,
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: `fd` was just returned by socket and is owned by nobody else.
    let sock = unsafe { LibFd::adopt(fd) }
        .map_err(|e| SourceError::io("checking a socket for", path, e))?;
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    loop {
        // SAFETY: `addr` is a valid sockaddr_un and `len` does not exceed its size.
        let r = unsafe {
            libc::connect(
                sock.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if r == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(SourceError::io("connecting to", path, e));
        }
    }
    sock.set_nonblocking()
        .map_err(|e| SourceError::io("setting O_NONBLOCK on", path, e))?;
    Ok(sock)
}

/// `poll` one fd for `events` with a timeout in milliseconds; returns `revents`.
pub fn poll_one(fd: RawFd, events: libc::c_short, timeout_ms: i32) -> io::Result<libc::c_short> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r >= 0 {
            return Ok(p.revents);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(parse_limit("max\n"), Some(None));
        assert_eq!(parse_limit("67108864\n"), Some(Some(67108864)));
        assert_eq!(
            parse_limit("9223372036854771712"),
            Some(Some(9223372036854771712))
        );
        assert_eq!(parse_limit("-1"), None);
        assert_eq!(parse_limit(""), None);
    }

    #[test]
    fn read_string_reads_whole_files_through_a_library_descriptor() {
        // /proc/self/mountinfo: a seq_file, often beyond the first 4 KiB buffer.
        let p = Path::new("/proc/self/mountinfo");
        let ours = read_string(p).unwrap();
        assert_eq!(ours, std::fs::read_to_string(p).unwrap());
        assert!(!ours.is_empty());
    }

    #[test]
    fn errors_name_the_file() {
        let e = read_string(Path::new("/nonexistent/ebbtide/x")).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("/nonexistent/ebbtide/x") && s.contains("opening"),
            "{s}"
        );
        let e = open(Path::new("/nonexistent/ebbtide/y"), libc::O_RDONLY).unwrap_err();
        assert!(
            e.to_string().contains("opening /nonexistent/ebbtide/y"),
            "{e}"
        );
    }

    #[test]
    fn eventfd_counts() {
        let fd = eventfd().unwrap();
        assert_eq!(
            eventfd_read(fd.as_raw_fd(), Path::new("eventfd")).unwrap(),
            0
        );
        eventfd_signal(fd.as_raw_fd()).unwrap();
        eventfd_signal(fd.as_raw_fd()).unwrap();
        assert_eq!(
            eventfd_read(fd.as_raw_fd(), Path::new("eventfd")).unwrap(),
            2
        );
    }
}
