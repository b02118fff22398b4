//! The control thread's byte buffers, mapped from the OS: an observation must not take memory
//! from the program's allocator (in a malloc process that is ebbtide's zones, whose request
//! counters and footprint the observer reports), so requests and replies live here instead.
//!
//! A [`MapBuf`] is empty and unmapped until the first byte; it grows by doubling with
//! `mremap` up to [`MAX_BYTES`] and gives its pages back when [`MapBuf::release`]d or dropped.
//! The server releases a connection's reply buffer as soon as the reply is written, so the
//! memory an observation holds is bounded by one reply per open connection and returns to 0
//! between scrapes.

use std::fmt;
use std::ptr::NonNull;

/// Largest buffer: a reply above it is refused with an error (the clients' own limit,
/// [`super::protocol::MAX_REPLY`]).
pub const MAX_BYTES: usize = super::protocol::MAX_REPLY;

/// Smallest mapping (one page on every supported machine).
const MIN_MAP: usize = 4096;

/// A growable byte buffer in its own anonymous mapping.
pub struct MapBuf {
    /// Start of the mapping; dangling (never read) while `cap == 0`.
    ptr: *mut u8,
    len: usize,
    /// Bytes mapped (0: nothing mapped).
    cap: usize,
}

// SAFETY: the mapping is owned by the buffer alone; nothing else holds its address.
unsafe impl Send for MapBuf {}

impl MapBuf {
    /// An empty buffer with nothing mapped.
    pub const fn new() -> MapBuf {
        MapBuf {
            ptr: NonNull::dangling().as_ptr(),
            len: 0,
            cap: 0,
        }
    }

    /// The bytes written.
    pub fn as_slice(&self) -> &[u8] {
        if self.cap == 0 {
            return &[];
        }
        // SAFETY: the first `len` bytes of the live mapping were written (`len <= cap`).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Bytes written.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes mapped now.
    #[cfg(test)]
    pub fn mapped(&self) -> usize {
        self.cap
    }

    /// Forget the bytes, keep the mapping.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Drop the first `n` bytes (at most all), moving the rest to the front.
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        if n == 0 {
            return;
        }
        // SAFETY: source and destination lie inside the first `len` bytes of the mapping;
        // `copy` allows overlap.
        unsafe { std::ptr::copy(self.ptr.add(n), self.ptr, self.len - n) };
        self.len -= n;
    }

    /// Unmap: back to an empty buffer holding no memory.
    pub fn release(&mut self) {
        if self.cap != 0 {
            // SAFETY: `ptr`/`cap` are exactly the live mapping this buffer owns (non-null while
            // `cap != 0`); nothing borrows it (`&mut self`).
            unsafe { ebbtide_core::os::unmap(NonNull::new_unchecked(self.ptr), self.cap) };
        }
        // Field by field: assigning a whole `MapBuf` would drop (and unmap) this one again.
        self.ptr = NonNull::dangling().as_ptr();
        self.len = 0;
        self.cap = 0;
    }

    /// Append `bytes`; false (nothing appended) when the buffer would pass [`MAX_BYTES`] or
    /// the OS refuses the memory.
    pub fn push(&mut self, bytes: &[u8]) -> bool {
        let Some(need) = self.len.checked_add(bytes.len()) else {
            return false;
        };
        if need > self.cap && !self.grow(need) {
            return false;
        }
        // SAFETY: `len + bytes.len() <= cap`: the destination is inside the mapping, which
        // `bytes` (borrowed from elsewhere) cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(self.len), bytes.len())
        };
        self.len = need;
        true
    }

    /// Overwrite `bytes.len()` bytes at `at` (inside what is written).
    pub fn overwrite(&mut self, at: usize, bytes: &[u8]) {
        assert!(at + bytes.len() <= self.len, "overwrite past the end");
        // SAFETY: inside the first `len` bytes of the mapping (checked above).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(at), bytes.len()) };
    }

    fn grow(&mut self, need: usize) -> bool {
        if need > MAX_BYTES {
            return false;
        }
        let new_cap = need.next_power_of_two().clamp(MIN_MAP, MAX_BYTES);
        let p = if self.cap == 0 {
            ebbtide_core::os::map(new_cap)
        } else {
            // SAFETY: `ptr`/`cap` are exactly the live mapping this buffer owns (from `os::map`
            // or `os::remap`, `cap` a power of two of pages); the old address is not used
            // after success.
            unsafe { ebbtide_core::os::remap(NonNull::new_unchecked(self.ptr), self.cap, new_cap) }
        };
        let Ok(p) = p else {
            return false;
        };
        self.ptr = p.as_ptr();
        self.cap = new_cap;
        true
    }
}

impl Default for MapBuf {
    fn default() -> MapBuf {
        MapBuf::new()
    }
}

impl Drop for MapBuf {
    fn drop(&mut self) {
        self.release();
    }
}

impl fmt::Write for MapBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.push(s.as_bytes()) {
            Ok(())
        } else {
            Err(fmt::Error)
        }
    }
}

impl fmt::Debug for MapBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapBuf")
            .field("len", &self.len)
            .field("mapped", &self.cap)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    #[test]
    fn grows_consumes_and_gives_back() {
        let mut b = MapBuf::new();
        assert_eq!((b.len(), b.mapped()), (0, 0));
        assert!(b.push(b"hello "));
        assert_eq!(b.mapped(), MIN_MAP);
        for i in 0..10_000 {
            write!(b, "{i},").unwrap();
        }
        assert!(b.as_slice().starts_with(b"hello 0,1,2,"));
        assert!(b.mapped().is_power_of_two() && b.mapped() >= b.len());
        b.consume(6);
        assert!(b.as_slice().starts_with(b"0,1,2,"));
        b.overwrite(0, b"X");
        assert!(b.as_slice().starts_with(b"X,1,2,"));
        b.release();
        assert_eq!((b.len(), b.mapped(), b.as_slice()), (0, 0, &[][..]));
    }

    #[test]
    fn refuses_past_the_limit() {
        let mut b = MapBuf::new();
        assert!(!b.push(&vec![0u8; MAX_BYTES + 1]));
        assert!(b.is_empty());
    }
}
