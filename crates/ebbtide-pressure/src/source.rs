//! The common interface of every pressure source, its errors and its status report.

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Level;

/// Which kind of signal a source reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceKind {
    /// systemd's `$MEMORY_PRESSURE_WATCH` protocol.
    Systemd,
    /// A PSI trigger on the own cgroup's `memory.pressure` or `/proc/pressure/memory`.
    Psi,
    /// cgroup v1 `memory.pressure_level` through `cgroup.event_control`.
    CgroupV1Level,
    /// Own cgroup usage against its limit (polled).
    Headroom,
    /// cgroup v2 `memory.events` counters (`high`, `max`, `oom`, `oom_kill`).
    MemoryEvents,
    /// The library's own cache budget (`max_cached_bytes`).
    Budget,
    /// An explicit `notify(level)` through the watcher's [`Injector`](super::Injector).
    Explicit,
}

impl SourceKind {
    /// Every kind, in the order `detect` reports them.
    pub const ALL: [SourceKind; 7] = [
        SourceKind::Systemd,
        SourceKind::Psi,
        SourceKind::CgroupV1Level,
        SourceKind::Headroom,
        SourceKind::MemoryEvents,
        SourceKind::Budget,
        SourceKind::Explicit,
    ];

    /// Short lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            SourceKind::Systemd => "systemd",
            SourceKind::Psi => "psi",
            SourceKind::CgroupV1Level => "cgroup-v1-pressure-level",
            SourceKind::Headroom => "headroom",
            SourceKind::MemoryEvents => "memory-events",
            SourceKind::Budget => "budget",
            SourceKind::Explicit => "explicit",
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a source woke up: epoll readiness flags of its fd, or its poll time came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readiness {
    /// EPOLLIN.
    pub readable: bool,
    /// EPOLLPRI (PSI triggers, kernfs notifications).
    pub priority: bool,
    /// EPOLLERR.
    pub error: bool,
    /// EPOLLHUP / EPOLLRDHUP.
    pub hangup: bool,
    /// The source's [`Source::next_poll`] instant has passed.
    pub timer: bool,
}

impl Readiness {
    /// A wake-up because the poll time came.
    pub const TIMER: Readiness = Readiness {
        readable: false,
        priority: false,
        error: false,
        hangup: false,
        timer: true,
    };

    /// Decode epoll event bits.
    pub fn from_epoll(events: u32) -> Readiness {
        Readiness {
            readable: events & libc::EPOLLIN as u32 != 0,
            priority: events & libc::EPOLLPRI as u32 != 0,
            error: events & libc::EPOLLERR as u32 != 0,
            hangup: events & (libc::EPOLLHUP | libc::EPOLLRDHUP) as u32 != 0,
            timer: false,
        }
    }
}

/// What a source made of a wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Pressure at this level.
    Event(Level),
    /// Input was consumed but nothing is to be reported (coalesced, below threshold, re-armed).
    Quiet,
    /// Woken but nothing was there. Many in a row mean the fd is stuck ready: the watcher
    /// disables the source rather than spin.
    Spurious,
}

/// The reporting rule of the polled sources (headroom, budget): a level other than Normal is
/// reported when it changes, and otherwise at most once per `repeat_ms`.
#[derive(Debug, Clone, Copy)]
pub struct LevelReporter {
    last_level: Level,
    last_report: Option<Instant>,
}

impl Default for LevelReporter {
    fn default() -> Self {
        LevelReporter {
            last_level: Level::Normal,
            last_report: None,
        }
    }
}

impl LevelReporter {
    /// The level measured at `now`; returns what to report.
    pub fn observe(&mut self, level: Level, now: Instant, repeat_ms: u64) -> Outcome {
        let changed = level != self.last_level;
        self.last_level = level;
        if level == Level::Normal {
            return Outcome::Quiet;
        }
        let repeat = self
            .last_report
            .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_millis(repeat_ms));
        if changed || repeat {
            self.last_report = Some(now);
            Outcome::Event(level)
        } else {
            Outcome::Quiet
        }
    }

    /// The last level measured.
    pub fn last_level(&self) -> Level {
        self.last_level
    }
}

/// One pressure signal.
///
/// A source is either **event-driven** (it has an [`fd`](Source::fd) that the watcher registers
/// in epoll with [`epoll_events`](Source::epoll_events)) or **polled** (its
/// [`next_poll`](Source::next_poll) is `Some`), or both. The watcher calls
/// [`on_ready`](Source::on_ready) when the fd is ready or the poll time has come. After every
/// call the watcher re-reads `fd()`: a source may replace its fd (PSI re-resolving its cgroup)
/// and is then re-registered. An `Err` from `on_ready` means the source is broken for good: the
/// watcher drops it, records the error as the reason in its status, and tries a fallback.
pub trait Source: Send {
    /// The kind of signal.
    fn kind(&self) -> SourceKind;
    /// What the source watches, for the status report (path, thresholds, level).
    fn describe(&self) -> String;
    /// The fd to register in epoll, if event-driven.
    fn fd(&self) -> Option<RawFd>;
    /// The epoll event mask for [`fd`](Source::fd) (`EPOLLIN` or `EPOLLPRI`).
    fn epoll_events(&self) -> u32;
    /// When the source wants to be polled next (`None` = only when its fd is ready).
    fn next_poll(&self, now: Instant) -> Option<Instant>;
    /// Handle a wake-up.
    fn on_ready(&mut self, ready: Readiness, now: Instant) -> Result<Outcome, SourceError>;
    /// After this source failed for good: a replacement to use instead (`None` = no
    /// fallback). PSI on an explicit file falls back to the own cgroup's file; systemd's
    /// protocol falls back to a PSI trigger built from its WRITE bytes, as systemd's own
    /// library does.
    fn fallback(&self) -> Option<Result<Box<dyn Source>, SourceError>> {
        None
    }
    /// Whether every descriptor of the source is still its own (the program may close
    /// descriptors it did not open, see [`crate::libfd`]). The watcher checks at least once a
    /// second and treats a loss as the watcher's failure: everything is opened again.
    fn check_fds(&self) -> Result<(), crate::libfd::Lost> {
        Ok(())
    }
}

/// Errors of pressure sources. Every variant names the file or variable concerned.
#[derive(Debug)]
pub enum SourceError {
    /// A system call on `path` failed while `what` (e.g. "opening", "writing the trigger to").
    Io {
        /// The operation.
        what: String,
        /// The file, socket or pseudo-file.
        path: PathBuf,
        /// The OS error.
        err: io::Error,
    },
    /// Malformed input (environment variable, file content, configuration).
    Invalid(String),
    /// The watched object went away (cgroup removed, peer closed, POLLERR).
    Gone(String),
    /// The program closed (or replaced) one of the library's descriptors: not an error of the
    /// system, an ordinary thing for a program to do (see [`crate::libfd`]). The owner opens
    /// everything again, quietly.
    Lost(crate::libfd::Lost),
}

impl SourceError {
    pub(crate) fn io(what: impl Into<String>, path: &Path, err: io::Error) -> SourceError {
        SourceError::Io {
            what: what.into(),
            path: path.to_path_buf(),
            err,
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> SourceError {
        SourceError::Invalid(msg.into())
    }

    /// The OS error number, if this is an I/O error.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            SourceError::Io { err, .. } => err.raw_os_error(),
            _ => None,
        }
    }
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::Io { what, path, err } => {
                let name = err.raw_os_error().and_then(errno_name);
                match name {
                    Some(n) => write!(f, "{n} {what} {}: {err}", path.display()),
                    None => write!(f, "{what} {}: {err}", path.display()),
                }
            }
            SourceError::Invalid(m) => f.write_str(m),
            SourceError::Gone(m) => write!(f, "gone: {m}"),
            SourceError::Lost(l) => write!(f, "{l}"),
        }
    }
}

impl std::error::Error for SourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SourceError::Io { err, .. } => Some(err),
            _ => None,
        }
    }
}

fn errno_name(e: i32) -> Option<&'static str> {
    Some(match e {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINVAL => "EINVAL",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ENOTSUP => "EOPNOTSUPP",
        _ => return None,
    })
}

/// Whether a source kind is in use, and what it watches or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStatus {
    /// The kind.
    pub kind: SourceKind,
    /// True if a source of this kind is registered.
    pub active: bool,
    /// Active: what it watches (path, thresholds). Inactive: the reason.
    pub detail: String,
}

impl SourceStatus {
    /// An active status.
    pub fn active(kind: SourceKind, detail: impl Into<String>) -> SourceStatus {
        SourceStatus {
            kind,
            active: true,
            detail: detail.into(),
        }
    }
    /// An inactive status with its reason.
    pub fn inactive(kind: SourceKind, reason: impl Into<String>) -> SourceStatus {
        SourceStatus {
            kind,
            active: false,
            detail: reason.into(),
        }
    }
}

impl fmt::Display for SourceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.active { "active" } else { "inactive" };
        write!(f, "{:<26} {state:<8} {}", self.kind.name(), self.detail)
    }
}

/// A pressure event delivered by the watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PressureEvent {
    /// The source kind that reported it.
    pub kind: SourceKind,
    /// The level.
    pub level: Level,
    /// When the watcher saw it.
    pub at: Instant,
}
