//! systemd's memory pressure protocol (`MemoryPressureWatch=`, systemd `docs/PRESSURE.md`).
//!
//! * `$MEMORY_PRESSURE_WATCH`: the path to watch. Unset → the source is inactive
//!   ("MEMORY_PRESSURE_WATCH not set"; PSI covers the fallback systemd's own library would
//!   use). Empty or `/dev/null` → disabled by the service manager.
//! * `$MEMORY_PRESSURE_WRITE`: base64 of the bytes to write after opening, written **only if
//!   the variable is set** (systemd's `docs/PRESSURE.md`): unset → nothing is written (with a
//!   FIFO, the source would otherwise read its own bytes back as an event). Malformed → an error
//!   naming the variable.
//! * By file type of the path:
//!   - regular file (a PSI file): open `O_RDWR|O_NONBLOCK|O_CLOEXEC`, write, wait for
//!     `POLLPRI`, never read;
//!   - FIFO: open the same way, write, wait for `POLLIN`, read and discard;
//!   - `AF_UNIX` stream socket: connect, write, wait for `POLLIN`, read and discard (the peer
//!     closing the connection ends the source).
//!
//! Every notification maps to one configured level (default [`Level::Moderate`]).
//!
//! Note on FIFOs: the WRITE bytes (when set) go into the same pipe the source reads from;
//! whoever provides the FIFO is expected to read them. Bytes still in the pipe when the watcher
//! first polls are reported as an event.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::fs;
use super::libfd::LibFd;
use super::psi::{PsiSource, PsiTrigger};
use super::source::{Outcome, Readiness, Source, SourceError, SourceKind};
use super::Level;

/// What systemd itself puts in `$MEMORY_PRESSURE_WRITE` for its default
/// `MemoryPressureThresholdSec=200ms`, decoded: the manager's value, never written by ebbtide on
/// its own (only the variable's bytes are written).
pub const DEFAULT_WRITE: &[u8] = b"some 200000 2000000\0";

/// Name of the variable holding the path.
pub const WATCH_VAR: &str = "MEMORY_PRESSURE_WATCH";
/// Name of the variable holding the base64 bytes to write.
pub const WRITE_VAR: &str = "MEMORY_PRESSURE_WRITE";

/// Configuration of the systemd source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemdConfig {
    /// Use the protocol at all. Default true.
    pub enabled: bool,
    /// The level every notification maps to. Default Moderate.
    pub level: Level,
}

impl Default for SystemdConfig {
    fn default() -> Self {
        SystemdConfig {
            enabled: true,
            level: Level::Moderate,
        }
    }
}

/// Decode standard base64 (RFC 4648 alphabet, `=` padding optional, ASCII white space
/// ignored). Returns a description of the first problem on error.
pub fn base64_decode(s: &str) -> Result<Vec<u8>, String> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits, mut pad, mut n) = (0u32, 0u32, 0usize, 0usize);
    for (i, c) in s.bytes().enumerate() {
        if c.is_ascii_whitespace() {
            continue;
        }
        if c == b'=' {
            pad += 1;
            n += 1;
            continue;
        }
        if pad > 0 {
            return Err(format!("data after '=' padding at offset {i}"));
        }
        let v = val(c).ok_or_else(|| format!("invalid character {:?} at offset {i}", c as char))?;
        acc = (acc << 6) | v;
        bits += 6;
        n += 1;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if pad > 2 || (pad > 0 && n % 4 != 0) {
        return Err("bad '=' padding".into());
    }
    if (n - pad) % 4 == 1 {
        return Err("truncated input (length is 1 mod 4)".into());
    }
    if acc != 0 {
        return Err("non-zero trailing bits".into());
    }
    Ok(out)
}

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchRequest {
    /// Inactive, with the reason ("MEMORY_PRESSURE_WATCH not set", "... disabled (/dev/null)").
    Disabled(String),
    /// Watch this path, writing these bytes first.
    Watch {
        /// The path from `$MEMORY_PRESSURE_WATCH`.
        path: PathBuf,
        /// The decoded `$MEMORY_PRESSURE_WRITE`; empty when the variable is unset (nothing is
        /// written).
        write: Vec<u8>,
    },
}

/// Interpret the two variables, given a lookup function (tests pass a fake environment).
pub fn watch_request(env: &dyn Fn(&str) -> Option<OsString>) -> Result<WatchRequest, SourceError> {
    let Some(watch) = env(WATCH_VAR) else {
        return Ok(WatchRequest::Disabled(format!("{WATCH_VAR} not set")));
    };
    if watch.is_empty() {
        return Ok(WatchRequest::Disabled(format!(
            "{WATCH_VAR} is empty (disabled by the service manager)"
        )));
    }
    if watch == "/dev/null" {
        return Ok(WatchRequest::Disabled(format!(
            "{WATCH_VAR}=/dev/null (disabled by the service manager)"
        )));
    }
    let write = match env(WRITE_VAR) {
        None => Vec::new(),
        Some(v) => {
            let s = v.to_str().ok_or_else(|| {
                SourceError::invalid(format!("{WRITE_VAR} is not valid UTF-8 base64"))
            })?;
            base64_decode(s).map_err(|e| {
                SourceError::invalid(format!("{WRITE_VAR} is not valid base64: {e}"))
            })?
        }
    };
    Ok(WatchRequest::Watch {
        path: PathBuf::from(watch),
        write,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Regular file: POLLPRI, never read.
    Pri,
    /// FIFO: POLLIN, read and discard.
    Fifo,
    /// Socket: POLLIN, read and discard; EOF = gone.
    Socket,
}

/// A source following systemd's protocol on one path.
#[derive(Debug)]
pub struct SystemdSource {
    fd: LibFd,
    path: PathBuf,
    mode: Mode,
    level: Level,
    written: usize,
    write: Vec<u8>,
}

impl SystemdSource {
    /// Open `path` according to its file type, write `write` (if not empty), and map every
    /// notification to `level`.
    pub fn open(path: &Path, write: &[u8], level: Level) -> Result<SystemdSource, SourceError> {
        let meta = std::fs::metadata(path).map_err(|e| SourceError::io("stat of", path, e))?;
        let ft = meta.file_type();
        let (fd, mode) = if ft.is_socket() {
            (fs::connect_unix(path)?, Mode::Socket)
        } else if ft.is_fifo() {
            (fs::open(path, libc::O_RDWR | libc::O_NONBLOCK)?, Mode::Fifo)
        } else if ft.is_file() {
            (fs::open(path, libc::O_RDWR | libc::O_NONBLOCK)?, Mode::Pri)
        } else {
            return Err(SourceError::invalid(format!(
                "{WATCH_VAR}={}: not a regular file, FIFO or socket",
                path.display()
            )));
        };
        if !write.is_empty() {
            fs::write_once(
                fd.as_raw_fd(),
                write,
                path,
                "writing MEMORY_PRESSURE_WRITE bytes to",
            )?;
        }
        Ok(SystemdSource {
            fd,
            path: path.to_path_buf(),
            mode,
            level,
            written: write.len(),
            write: write.to_vec(),
        })
    }

    /// Build from the process environment: `Ok(Err(reason))` when disabled or not set.
    pub fn from_env(cfg: &SystemdConfig) -> Result<Result<SystemdSource, String>, SourceError> {
        Self::from_env_with(cfg, &|k| std::env::var_os(k))
    }

    /// As [`from_env`](Self::from_env) with a given variable lookup.
    pub fn from_env_with(
        cfg: &SystemdConfig,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Result<SystemdSource, String>, SourceError> {
        match watch_request(env)? {
            WatchRequest::Disabled(why) => Ok(Err(why)),
            WatchRequest::Watch { path, write } => Ok(Ok(Self::open(&path, &write, cfg.level)?)),
        }
    }

    /// The watched path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Source for SystemdSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Systemd
    }

    fn describe(&self) -> String {
        let m = match self.mode {
            Mode::Pri => "file, POLLPRI",
            Mode::Fifo => "FIFO, POLLIN",
            Mode::Socket => "socket, POLLIN",
        };
        format!(
            "{} ({m}; wrote {} bytes) -> {}",
            self.path.display(),
            self.written,
            self.level
        )
    }

    fn fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn check_fds(&self) -> Result<(), crate::libfd::Lost> {
        self.fd.check()
    }

    fn epoll_events(&self) -> u32 {
        match self.mode {
            Mode::Pri => libc::EPOLLPRI as u32,
            Mode::Fifo | Mode::Socket => libc::EPOLLIN as u32,
        }
    }

    fn next_poll(&self, _now: Instant) -> Option<Instant> {
        None
    }

    fn on_ready(&mut self, r: Readiness, _now: Instant) -> Result<Outcome, SourceError> {
        match self.mode {
            Mode::Pri => {
                if r.error {
                    return Err(SourceError::Gone(format!(
                        "POLLERR on {}",
                        self.path.display()
                    )));
                }
                Ok(if r.priority {
                    Outcome::Event(self.level)
                } else {
                    Outcome::Spurious
                })
            }
            Mode::Fifo | Mode::Socket => match fs::read_discard(self.fd.as_raw_fd(), &self.path)? {
                Some(0) if self.mode == Mode::Socket => Err(SourceError::Gone(format!(
                    "peer closed {}",
                    self.path.display()
                ))),
                Some(n) if n > 0 => Ok(Outcome::Event(self.level)),
                _ if r.error || r.hangup => Err(SourceError::Gone(format!(
                    "error/hangup on {}",
                    self.path.display()
                ))),
                _ => Ok(Outcome::Spurious),
            },
        }
    }

    fn fallback(&self) -> Option<Result<Box<dyn Source>, SourceError>> {
        // systemd's library falls back to the own cgroup's memory.pressure, then
        // /proc/pressure/memory, with the same trigger bytes.
        let text = std::str::from_utf8(&self.write).ok()?;
        let trigger: PsiTrigger = text.parse().ok()?;
        Some(PsiSource::open_own(self.level, trigger).map(|s| Box::new(s) as Box<dyn Source>))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn base64() {
        assert_eq!(
            base64_decode("c29tZSAyMDAwMDAgMjAwMDAwMAA=").unwrap(),
            DEFAULT_WRITE
        );
        assert_eq!(base64_decode("").unwrap(), b"");
        assert_eq!(base64_decode("Zg==").unwrap(), b"f");
        assert_eq!(base64_decode("Zm8=").unwrap(), b"fo");
        assert_eq!(base64_decode("Zm9v").unwrap(), b"foo");
        assert_eq!(
            base64_decode("Zm9vYg").unwrap(),
            b"foob",
            "padding optional"
        );
        assert_eq!(base64_decode("Zm9v\nYmFy").unwrap(), b"foobar");
        assert_eq!(base64_decode("+/+/").unwrap(), [0xfb, 0xff, 0xbf]);
        assert!(base64_decode("Zm9v!").unwrap_err().contains("'!'"));
        assert!(base64_decode("Z").is_err());
        assert!(base64_decode("Zg=x").is_err());
        assert!(base64_decode("Zh==").is_err(), "non-zero trailing bits");
        assert!(base64_decode("Zg===").is_err());
    }

    #[test]
    fn request_from_env() {
        assert_eq!(
            watch_request(&env(&[])).unwrap(),
            WatchRequest::Disabled("MEMORY_PRESSURE_WATCH not set".into())
        );
        for v in ["", "/dev/null"] {
            match watch_request(&env(&[(WATCH_VAR, v)])).unwrap() {
                WatchRequest::Disabled(r) => assert!(r.contains("disabled"), "{r}"),
                w => panic!("{w:?}"),
            }
        }
        assert_eq!(
            watch_request(&env(&[(WATCH_VAR, "/x")])).unwrap(),
            WatchRequest::Watch {
                path: "/x".into(),
                write: Vec::new()
            },
            "nothing is written when MEMORY_PRESSURE_WRITE is unset"
        );
        assert_eq!(
            watch_request(&env(&[(WATCH_VAR, "/x"), (WRITE_VAR, "Zm9v")])).unwrap(),
            WatchRequest::Watch {
                path: "/x".into(),
                write: b"foo".to_vec()
            }
        );
        let e = watch_request(&env(&[(WATCH_VAR, "/x"), (WRITE_VAR, "@@@")])).unwrap_err();
        assert!(e.to_string().contains("MEMORY_PRESSURE_WRITE"), "{e}");
    }

    #[test]
    fn not_a_usable_file_type() {
        let e = SystemdSource::open(Path::new("/"), b"", Level::Low).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = SystemdSource::open(Path::new("/nonexistent/x"), b"", Level::Low).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x"), "{e}");
    }
}
