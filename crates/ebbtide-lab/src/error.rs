//! One error type for the lab: every variant names the file or command that failed.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong, and where.
#[derive(Debug)]
pub enum Error {
    /// A file system operation on `path` failed.
    Io {
        /// What was being done ("write", "mkdir", "read", ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// An external command failed or could not be started.
    Command {
        /// The command line.
        command: String,
        /// Exit status or spawn error, and stderr if any.
        detail: String,
    },
    /// The lab lacks a privilege or a kernel feature; the text says what is needed.
    Unsupported(String),
    /// A file had content the lab could not parse.
    Parse {
        /// The file (or pseudo file) that was parsed.
        what: String,
        /// What was wrong.
        detail: String,
    },
    /// Anything else, described in words.
    Other(String),
}

/// The lab's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An [`Error::Io`] for `op` on `path`.
    pub fn io(op: &'static str, path: impl AsRef<Path>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// The raw OS error number, if this is an I/O error that carries one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => {
                write!(f, "{op} {}: {source}", path.display())
            }
            Error::Command { command, detail } => write!(f, "command `{command}` failed: {detail}"),
            Error::Unsupported(s) => write!(f, "not possible here: {s}"),
            Error::Parse { what, detail } => write!(f, "cannot parse {what}: {detail}"),
            Error::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Reads a whole file as text, naming the file on error.
pub(crate) fn read_to_string(path: impl AsRef<Path>) -> Result<String> {
    let path = path.as_ref();
    std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))
}

/// Writes `contents` to an existing (pseudo) file, naming the file on error.
pub(crate) fn write_file(path: impl AsRef<Path>, contents: &str) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, contents).map_err(|e| Error::io("write", path, e))
}

/// Reads a file holding one unsigned integer ("max" reads as `u64::MAX`).
pub(crate) fn read_u64(path: impl AsRef<Path>) -> Result<u64> {
    let path = path.as_ref();
    let text = read_to_string(path)?;
    let t = text.trim();
    if t == "max" {
        return Ok(u64::MAX);
    }
    t.parse().map_err(|e| Error::Parse {
        what: path.display().to_string(),
        detail: format!("{t:?} is not an unsigned integer: {e}"),
    })
}
