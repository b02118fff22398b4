//! Errors of the zone API. Every error names what was wrong: the option and why, the zone and the
//! address, the count of live items.

use crate::os::OsError;
use core::fmt;

/// A zone option that cannot be used, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `size` is 0.
    SizeZero,
    /// `size` (after rounding to the alignment) is above the largest item a zone serves.
    SizeTooLarge { size: usize, max: usize },
    /// `align` is not a power of two, or above the page size.
    BadAlign { align: usize, page_size: usize },
    /// The name is empty, too long, or contains a NUL byte or a character the stats formats
    /// cannot carry.
    BadName { name_len: usize, why: &'static str },
    /// `flags` has bits this version does not know.
    BadFlags { flags: u32, known: u32 },
    /// `max_items` is set together with a flag that contradicts it, or out of range.
    BadLimit { why: &'static str },
    /// `bucket_items` is above the largest bucket, [`crate::BUCKET_MAX`] items.
    BadBucket { items: u32, max: u32 },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::SizeZero => write!(f, "invalid zone option 'size': 0 (an item must have at least 1 byte)"),
            ConfigError::SizeTooLarge { size, max } => {
                write!(f, "invalid zone option 'size': {size} bytes is above the largest item size {max}")
            }
            ConfigError::BadAlign { align, page_size } => write!(
                f,
                "invalid zone option 'align': {align} (must be a power of two from 1 to the page size {page_size})"
            ),
            ConfigError::BadName { name_len, why } => write!(f, "invalid zone option 'name' ({name_len} bytes): {why}"),
            ConfigError::BadFlags { flags, known } => write!(
                f,
                "invalid zone option 'flags': {flags:#x} has unknown bits {:#x} (known: {known:#x})",
                flags & !known
            ),
            ConfigError::BadLimit { why } => write!(f, "invalid zone option 'max_items': {why}"),
            ConfigError::BadBucket { items, max } => write!(
                f,
                "invalid zone option 'bucket_items': {items} (at most {max}; 0 = the size table's)"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// The OS refused memory (after reclaiming and retrying once).
    OutOfMemory(OsError),
    /// The zone is at `max_items` and was created to fail rather than wait.
    LimitReached { max_items: usize },
    /// The zone's init hook refused the item.
    InitFailed,
    /// The zone's ctor hook refused the item.
    CtorFailed,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::OutOfMemory(e) => write!(f, "out of memory: {e}"),
            AllocError::LimitReached { max_items } => {
                write!(f, "zone limit of {max_items} items reached")
            }
            AllocError::InitFailed => write!(f, "the zone's init hook failed"),
            AllocError::CtorFailed => write!(f, "the zone's ctor hook failed"),
        }
    }
}

impl std::error::Error for AllocError {}

/// A pointer handed to `free` that the zone cannot take back. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidFree {
    /// The zone's name (up to 63 bytes, as given at creation).
    pub zone: ZoneName,
    /// The address passed.
    pub addr: usize,
    /// What is wrong with it.
    pub kind: InvalidKind,
}

impl fmt::Display for InvalidFree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ebbtide: invalid free of {:#x} to zone '{}': {}",
            self.addr,
            self.zone.as_str(),
            self.kind.describe()
        )
    }
}

impl std::error::Error for InvalidFree {}

/// A zone could not be destroyed because items are still in use; nothing was freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneBusy {
    /// The zone's name.
    pub zone: ZoneName,
    /// Items allocated and not freed.
    pub live_items: usize,
}

impl fmt::Display for ZoneBusy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot destroy zone '{}': {} items are still in use",
            self.zone.as_str(),
            self.live_items
        )
    }
}

impl std::error::Error for ZoneBusy {}

/// Any error of zone creation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateError {
    /// A bad option.
    Config(ConfigError),
    /// The OS refused the zone's metadata.
    Os(OsError),
}

impl fmt::Display for CreateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CreateError::Config(e) => e.fmt(f),
            CreateError::Os(e) => write!(f, "cannot create zone: {e}"),
        }
    }
}

impl std::error::Error for CreateError {}

impl From<ConfigError> for CreateError {
    fn from(e: ConfigError) -> Self {
        CreateError::Config(e)
    }
}

impl From<OsError> for CreateError {
    fn from(e: OsError) -> Self {
        CreateError::Os(e)
    }
}

/// Writes a message to stderr without allocating (usable inside the allocator).
pub fn report(args: fmt::Arguments<'_>) {
    struct Buf {
        b: [u8; 512],
        n: usize,
    }
    impl fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let room = self.b.len() - 1 - self.n;
            let k = s.len().min(room);
            self.b[self.n..self.n + k].copy_from_slice(&s.as_bytes()[..k]);
            self.n += k;
            Ok(())
        }
    }
    let mut buf = Buf { b: [0; 512], n: 0 };
    let _ = fmt::write(&mut buf, args);
    buf.b[buf.n] = b'\n';
    crate::os::write_stderr(&buf.b[..buf.n + 1]);
}

/// Set by the runtime's `abort_on_error` tunable ([`crate::runtime::set_abort_on_error`]).
/// Relaxed: a flag read on its own, ordered with nothing else.
static ABORT_ON_ERROR: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether a reported misuse ends the process.
pub(crate) fn abort_on_error() -> bool {
    ABORT_ON_ERROR.load(core::sync::atomic::Ordering::Relaxed)
}

/// See [`abort_on_error`].
pub(crate) fn set_abort_on_error(on: bool) {
    ABORT_ON_ERROR.store(on, core::sync::atomic::Ordering::Relaxed);
}

/// Called after a misuse (double free, bad pointer) was reported: ends the process with
/// `SIGABRT` when the runtime asked for it ([`crate::runtime::set_abort_on_error`]), as glibc's
/// malloc does at every detected misuse; returns otherwise (the misuse was not applied).
pub fn misuse_reported() {
    if abort_on_error() {
        // SAFETY: abort has no preconditions; it unblocks and raises SIGABRT, never returns.
        unsafe { libc::abort() };
    }
}

/// A zone's name, stored inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ZoneName {
    bytes: [u8; 63],
    len: u8,
}

impl ZoneName {
    pub(crate) fn new(s: &str) -> Result<ZoneName, ConfigError> {
        let bad = |why| ConfigError::BadName {
            name_len: s.len(),
            why,
        };
        if s.is_empty() {
            return Err(bad("empty"));
        }
        if s.len() > 63 {
            return Err(bad("longer than 63 bytes"));
        }
        if s.bytes()
            .any(|b| b.is_ascii_control() || b == b'"' || b == b'\\')
        {
            return Err(bad("contains a control character, a quote or a backslash"));
        }
        let mut bytes = [0; 63];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Ok(ZoneName {
            bytes,
            len: s.len() as u8,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("?")
    }
}

impl core::fmt::Debug for ZoneName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// What is wrong with a pointer handed back to a keg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidKind {
    /// Not inside any slab of this zone (another zone's memory, or not allocator memory at all).
    NotInZone,
    /// Inside the zone's slab metadata or the unused tail of a slab.
    NotAnItem,
    /// Inside an item but not at its start.
    Misaligned,
    /// The item is already free.
    DoubleFree,
}

impl InvalidKind {
    /// What is wrong, in words (for messages).
    pub fn describe(self) -> &'static str {
        match self {
            InvalidKind::NotInZone => "pointer is not inside any slab of this zone",
            InvalidKind::NotAnItem => "pointer is inside the zone's memory but not inside an item",
            InvalidKind::Misaligned => "pointer is inside an item but not at its start",
            InvalidKind::DoubleFree => "double free: the item is already free",
        }
    }
}
