//! Messages about bad pointers, written with one `write(2)` system call from a stack buffer
//! (no allocation: they are emitted from inside `free` and `realloc`; no libc `write`: that is
//! a cancellation point). The first [`MAX_MESSAGES`] are printed; after that one line says the
//! rest are counted only. With `abort_on_error` the first one ends the process (`SIGABRT`).

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicU64, Ordering};

/// Messages printed before the rest are only counted.
pub const MAX_MESSAGES: u64 = 16;

/// Bad pointers seen (all of them, printed or not).
static BAD: AtomicU64 = AtomicU64::new(0);

/// How many bad pointers the malloc was given.
pub fn bad_pointers() -> u64 {
    BAD.load(Ordering::Relaxed)
}

struct Buf {
    b: [u8; 320],
    n: usize,
}

impl Write for Buf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.b.len() - self.n;
        let k = s.len().min(room);
        self.b[self.n..self.n + k].copy_from_slice(&s.as_bytes()[..k]);
        self.n += k;
        Ok(())
    }
}

/// Counts a bad pointer and prints `ebbtide: <message>` unless past the limit; with
/// `abort_on_error` it is always printed and the process ends with `SIGABRT`
/// ([`ebbtide_core::error::misuse_reported`]).
pub fn bad_pointer(args: fmt::Arguments<'_>) {
    let n = BAD.fetch_add(1, Ordering::Relaxed);
    if ebbtide_core::runtime::abort_on_error() {
        line(args);
        ebbtide_core::error::misuse_reported();
    }
    if n < MAX_MESSAGES {
        line(args);
    } else if n == MAX_MESSAGES {
        line(format_args!(
            "more bad pointers: counted, not printed (mallinfo2 and `ebbtide stat` show the count)"
        ));
    }
}

/// Prints `ebbtide: <message>\n` on stderr.
pub fn line(args: fmt::Arguments<'_>) {
    let mut b = Buf { b: [0; 320], n: 0 };
    let _ = b.write_str("ebbtide: ");
    let _ = b.write_fmt(args);
    if b.n == b.b.len() {
        b.n -= 1;
    }
    b.b[b.n] = b'\n';
    ebbtide_core::os::write_stderr(&b.b[..b.n + 1]);
}

#[cfg(test)]
pub(crate) mod tests {
    /// Serialises the tests that count [`super::bad_pointers`] (a process-wide count) around
    /// their own bad pointers.
    pub(crate) static BAD_POINTER_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
}
