//! PSI triggers (Linux `Documentation/accounting/psi.rst`).
//!
//! A trigger is `"<some|full> <stall_us> <window_us>"` written, **with its trailing NUL**, to a
//! pressure file opened `O_RDWR|O_NONBLOCK`; the file then polls `POLLPRI` at most once per
//! window while the stall threshold is exceeded. One trigger per open file, so each level has
//! its own fd (its own [`PsiSource`]).
//!
//! The file is the own cgroup v2 `memory.pressure` if it exists and accepts the trigger, else
//! `/proc/pressure/memory` (an unprivileged process gets EACCES on a root-owned cgroup file).
//! Default thresholds are GLib's `GMemoryMonitor` PSI backend:
//!
//! | level    | trigger                 |
//! |----------|-------------------------|
//! | Low      | `some 70000 2000000`    |
//! | Moderate | `some 100000 2000000`   |
//! | Critical | `full 100000 2000000`   |
//!
//! Without CAP_SYS_RESOURCE, kernels ≥ 6.5 accept only windows that are multiples of 2 s: on
//! `EINVAL` the window is rounded up to the next multiple of 2 s (at most 10 s) and the write
//! retried on a fresh fd. `POLLERR` means the cgroup went away: the source re-resolves its file
//! (own cgroup again, then `/proc/pressure/memory`) and re-arms.

use std::fmt;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use super::cgroup;
use super::fs;
use super::libfd::LibFd;
use super::source::{Outcome, Readiness, Source, SourceError, SourceKind};
use super::Level;

/// The system-wide memory pressure file.
pub const PROC_PRESSURE_MEMORY: &str = "/proc/pressure/memory";

/// Smallest window the kernel accepts (500 ms).
pub const MIN_WINDOW_US: u64 = 500_000;
/// Largest window the kernel accepts (10 s).
pub const MAX_WINDOW_US: u64 = 10_000_000;
/// Unprivileged windows must be a multiple of this (2 s).
pub const UNPRIV_WINDOW_STEP_US: u64 = 2_000_000;

/// `some` (at least one task stalled) or `full` (all non-idle tasks stalled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// `some`.
    Some,
    /// `full`.
    Full,
}

/// One PSI trigger specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsiTrigger {
    /// `some` or `full`.
    pub stall: Stall,
    /// Stall threshold within the window, in µs (> 0, ≤ window).
    pub stall_us: u64,
    /// Window, in µs (500 000 ..= 10 000 000).
    pub window_us: u64,
}

impl PsiTrigger {
    /// A `some` trigger.
    pub const fn some(stall_us: u64, window_us: u64) -> PsiTrigger {
        PsiTrigger {
            stall: Stall::Some,
            stall_us,
            window_us,
        }
    }
    /// A `full` trigger.
    pub const fn full(stall_us: u64, window_us: u64) -> PsiTrigger {
        PsiTrigger {
            stall: Stall::Full,
            stall_us,
            window_us,
        }
    }

    /// Check the kernel's rules: threshold > 0 and ≤ window, window in 500 ms ..= 10 s.
    pub fn validate(&self) -> Result<(), String> {
        if self.stall_us == 0 {
            return Err(format!("{self}: stall threshold must be > 0"));
        }
        if self.stall_us > self.window_us {
            return Err(format!("{self}: stall threshold exceeds the window"));
        }
        if !(MIN_WINDOW_US..=MAX_WINDOW_US).contains(&self.window_us) {
            return Err(format!("{self}: window must be 500000..=10000000 us"));
        }
        Ok(())
    }

    /// The bytes to write: the trigger text plus the trailing NUL the kernel expects.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = self.to_string().into_bytes();
        v.push(0);
        v
    }

    /// The trigger with its window rounded up to a multiple of 2 s (capped at 10 s), as
    /// unprivileged writers need; `None` if it already is one.
    pub fn rounded_for_unprivileged(&self) -> Option<PsiTrigger> {
        let step = UNPRIV_WINDOW_STEP_US;
        let w = self.window_us.div_ceil(step).max(1) * step;
        let w = w.min(MAX_WINDOW_US / step * step);
        (w != self.window_us).then_some(PsiTrigger {
            window_us: w,
            ..*self
        })
    }
}

impl fmt::Display for PsiTrigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self.stall {
            Stall::Some => "some",
            Stall::Full => "full",
        };
        write!(f, "{s} {} {}", self.stall_us, self.window_us)
    }
}

impl FromStr for PsiTrigger {
    type Err = String;
    /// Parse `"some 70000 2000000"` (a trailing NUL is accepted).
    fn from_str(s: &str) -> Result<PsiTrigger, String> {
        let t = s.trim_end_matches('\0').trim();
        let parts: Vec<&str> = t.split_ascii_whitespace().collect();
        let [kind, stall, window] = parts[..] else {
            return Err(format!(
                "PSI trigger {s:?}: expected \"<some|full> <stall_us> <window_us>\""
            ));
        };
        let stall_kind = match kind {
            "some" => Stall::Some,
            "full" => Stall::Full,
            _ => return Err(format!("PSI trigger {s:?}: kind must be some or full")),
        };
        let num = |x: &str| {
            x.parse::<u64>()
                .map_err(|_| format!("PSI trigger {s:?}: {x:?} is not a number"))
        };
        let trig = PsiTrigger {
            stall: stall_kind,
            stall_us: num(stall)?,
            window_us: num(window)?,
        };
        trig.validate()?;
        Ok(trig)
    }
}

/// Configuration of the PSI sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PsiConfig {
    /// Use PSI at all. Default true.
    pub enabled: bool,
    /// Trigger for Low (`None` = no Low trigger). Default `some 70000 2000000`.
    pub low: Option<PsiTrigger>,
    /// Trigger for Moderate. Default `some 100000 2000000`.
    pub moderate: Option<PsiTrigger>,
    /// Trigger for Critical. Default `full 100000 2000000`.
    pub critical: Option<PsiTrigger>,
    /// Use this pressure file instead of resolving the own cgroup's.
    pub path: Option<PathBuf>,
}

impl PsiConfig {
    /// Default stall threshold of the Low trigger (`some`), µs: GLib's `GMemoryMonitor`. The one
    /// place the PSI defaults are written (the runtime's tunables table takes them from here).
    pub const DEFAULT_LOW_STALL_US: u64 = 70_000;
    /// Default stall threshold of the Moderate trigger (`some`), µs.
    pub const DEFAULT_MODERATE_STALL_US: u64 = 100_000;
    /// Default stall threshold of the Critical trigger (`full`), µs.
    pub const DEFAULT_CRITICAL_STALL_US: u64 = 100_000;
    /// Default window of every trigger, µs (unprivileged processes need a multiple of 2 s).
    pub const DEFAULT_WINDOW_US: u64 = 2_000_000;
}

impl Default for PsiConfig {
    fn default() -> Self {
        let w = PsiConfig::DEFAULT_WINDOW_US;
        PsiConfig {
            enabled: true,
            low: Some(PsiTrigger::some(PsiConfig::DEFAULT_LOW_STALL_US, w)),
            moderate: Some(PsiTrigger::some(PsiConfig::DEFAULT_MODERATE_STALL_US, w)),
            critical: Some(PsiTrigger::full(PsiConfig::DEFAULT_CRITICAL_STALL_US, w)),
            path: None,
        }
    }
}

impl PsiConfig {
    /// The configured (level, trigger) pairs, Low first.
    pub fn triggers(&self) -> Vec<(Level, PsiTrigger)> {
        [
            (Level::Low, self.low),
            (Level::Moderate, self.moderate),
            (Level::Critical, self.critical),
        ]
        .into_iter()
        .filter_map(|(l, t)| t.map(|t| (l, t)))
        .collect()
    }
}

/// The pressure files to try, best first: the own cgroup v2 `memory.pressure` (if it
/// exists), then `/proc/pressure/memory` (if it exists). Opening the first may still fail
/// (e.g. EACCES for an unprivileged process on a root-owned cgroup file); callers then try the
/// next ([`arm_first`]).
pub fn memory_pressure_candidates(own: Option<&cgroup::CgroupPaths>) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(dir) = own.and_then(|c| c.v2.as_ref()) {
        let p = dir.join("memory.pressure");
        if p.exists() {
            v.push(p);
        }
    }
    let proc = Path::new(PROC_PRESSURE_MEMORY);
    if proc.exists() {
        v.push(proc.to_path_buf());
    }
    v
}

/// Candidates for the calling process (resolving its own cgroup now).
pub fn own_memory_pressure_candidates() -> Vec<PathBuf> {
    memory_pressure_candidates(cgroup::own().ok().as_ref())
}

/// Arm `trigger` on the first candidate that accepts it. The error lists every attempt.
pub fn arm_first(
    candidates: &[PathBuf],
    trigger: PsiTrigger,
) -> Result<(PathBuf, LibFd, PsiTrigger), SourceError> {
    if candidates.is_empty() {
        return Err(SourceError::invalid(format!(
            "no memory.pressure in the own cgroup v2 and no {PROC_PRESSURE_MEMORY} (kernel without PSI, or psi=0)"
        )));
    }
    let mut errors = Vec::new();
    for p in candidates {
        match arm(p, trigger) {
            Ok((fd, eff)) => return Ok((p.clone(), fd, eff)),
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(SourceError::invalid(errors.join("; ")))
}

/// Open `path` and arm `trigger` on it. On EINVAL with a window that is not a multiple of
/// 2 s, retry once on a fresh fd with the rounded window. Returns the fd and the trigger in
/// effect.
pub fn arm(path: &Path, trigger: PsiTrigger) -> Result<(LibFd, PsiTrigger), SourceError> {
    trigger.validate().map_err(SourceError::invalid)?;
    let fd = fs::open(path, libc::O_RDWR | libc::O_NONBLOCK)?;
    match fs::write_once(
        fd.as_raw_fd(),
        &trigger.to_bytes(),
        path,
        &format!("writing PSI trigger \"{trigger}\" to"),
    ) {
        Ok(()) => Ok((fd, trigger)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let Some(rounded) = trigger.rounded_for_unprivileged() else {
                return Err(e);
            };
            drop(fd);
            let fd = fs::open(path, libc::O_RDWR | libc::O_NONBLOCK)?;
            fs::write_once(
                fd.as_raw_fd(),
                &rounded.to_bytes(),
                path,
                &format!("writing PSI trigger \"{rounded}\" (window rounded to 2 s) to"),
            )?;
            Ok((fd, rounded))
        }
        Err(e) => Err(e),
    }
}

/// One PSI trigger mapped to one level.
#[derive(Debug)]
pub struct PsiSource {
    fd: LibFd,
    path: PathBuf,
    level: Level,
    requested: PsiTrigger,
    effective: PsiTrigger,
    /// Explicit path given: do not re-resolve on POLLERR.
    pinned: bool,
    /// Re-resolutions since the last event; bounded by [`MAX_RERESOLVE`].
    reresolved: u32,
}

/// Consecutive POLLERR re-resolutions without an event before the source gives up (a file
/// that errors right after re-arming would otherwise keep the watcher busy).
pub const MAX_RERESOLVE: u32 = 3;

impl PsiSource {
    /// Arm `trigger` on an explicit pressure file; POLLERR then ends the source.
    pub fn open(path: &Path, level: Level, trigger: PsiTrigger) -> Result<PsiSource, SourceError> {
        let (fd, effective) = arm(path, trigger)?;
        Ok(PsiSource {
            fd,
            path: path.to_path_buf(),
            level,
            requested: trigger,
            effective,
            pinned: true,
            reresolved: 0,
        })
    }

    /// Arm `trigger` on the own cgroup's `memory.pressure`, else on `/proc/pressure/memory`;
    /// POLLERR re-resolves.
    pub fn open_own(level: Level, trigger: PsiTrigger) -> Result<PsiSource, SourceError> {
        Self::open_first(&own_memory_pressure_candidates(), level, trigger)
    }

    /// Arm `trigger` on the first of `candidates` that accepts it (see
    /// [`memory_pressure_candidates`]); POLLERR re-resolves.
    pub fn open_first(
        candidates: &[PathBuf],
        level: Level,
        trigger: PsiTrigger,
    ) -> Result<PsiSource, SourceError> {
        let (path, fd, effective) = arm_first(candidates, trigger)?;
        Ok(PsiSource {
            fd,
            path,
            level,
            requested: trigger,
            effective,
            pinned: false,
            reresolved: 0,
        })
    }

    /// Treat the file as the own cgroup's choice: on POLLERR, re-resolve instead of failing.
    pub fn following_own_cgroup(mut self) -> Self {
        self.pinned = false;
        self
    }

    /// The pressure file in use.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The trigger in effect (the window may have been rounded).
    pub fn trigger(&self) -> PsiTrigger {
        self.effective
    }

    /// The level it reports.
    pub fn level(&self) -> Level {
        self.level
    }
}

impl Source for PsiSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Psi
    }

    fn describe(&self) -> String {
        let rounded = if self.effective != self.requested {
            format!(" (requested \"{}\", window rounded)", self.requested)
        } else {
            String::new()
        };
        format!(
            "{}: \"{}\"{rounded} -> {}",
            self.path.display(),
            self.effective,
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
        libc::EPOLLPRI as u32
    }

    fn next_poll(&self, _now: Instant) -> Option<Instant> {
        None
    }

    fn on_ready(&mut self, r: Readiness, _now: Instant) -> Result<Outcome, SourceError> {
        if r.error || r.hangup {
            if self.pinned {
                return Err(SourceError::Gone(format!(
                    "POLLERR on {} (cgroup removed?)",
                    self.path.display()
                )));
            }
            // Re-resolve: the own cgroup may have moved or vanished. Bounded: one attempt
            // per POLLERR, at most MAX_RERESOLVE in a row without an event in between.
            if self.reresolved >= MAX_RERESOLVE {
                return Err(SourceError::Gone(format!(
                    "POLLERR on {} after {} re-resolutions without an event",
                    self.path.display(),
                    self.reresolved
                )));
            }
            let (path, fd, eff) = arm_first(&own_memory_pressure_candidates(), self.requested)
                .map_err(|e| {
                    SourceError::Gone(format!(
                        "POLLERR on {} and re-resolving failed: {e}",
                        self.path.display()
                    ))
                })?;
            self.fd = fd;
            self.path = path;
            self.effective = eff;
            self.reresolved += 1;
            return Ok(Outcome::Quiet);
        }
        if r.priority {
            self.reresolved = 0;
            return Ok(Outcome::Event(self.level));
        }
        Ok(Outcome::Spurious)
    }

    fn fallback(&self) -> Option<Result<Box<dyn Source>, SourceError>> {
        let others: Vec<PathBuf> = own_memory_pressure_candidates()
            .into_iter()
            .filter(|p| *p != self.path)
            .collect();
        if others.is_empty() {
            return None;
        }
        Some(
            PsiSource::open_first(&others, self.level, self.requested)
                .map(|s| Box::new(s) as Box<dyn Source>),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_strings() {
        let t = PsiTrigger::some(70_000, 2_000_000);
        assert_eq!(t.to_string(), "some 70000 2000000");
        assert_eq!(t.to_bytes(), b"some 70000 2000000\0");
        assert_eq!(
            "full 100000 2000000\0".parse::<PsiTrigger>(),
            Ok(PsiTrigger::full(100_000, 2_000_000))
        );
        assert_eq!(
            " some 1000 500000 ".parse::<PsiTrigger>(),
            Ok(PsiTrigger::some(1000, 500_000))
        );
        assert!("half 1 2".parse::<PsiTrigger>().is_err());
        assert!("some 1".parse::<PsiTrigger>().is_err());
        assert!("some x 500000".parse::<PsiTrigger>().is_err());
        assert!("some 0 500000"
            .parse::<PsiTrigger>()
            .unwrap_err()
            .contains("> 0"));
        assert!("some 600000 500000"
            .parse::<PsiTrigger>()
            .unwrap_err()
            .contains("exceeds"));
        assert!("some 1000 400000".parse::<PsiTrigger>().is_err());
        assert!("some 1000 10000001".parse::<PsiTrigger>().is_err());
    }

    #[test]
    fn window_rounding() {
        assert_eq!(
            PsiTrigger::some(1000, 2_000_000).rounded_for_unprivileged(),
            None
        );
        assert_eq!(
            PsiTrigger::some(1000, 500_000).rounded_for_unprivileged(),
            Some(PsiTrigger::some(1000, 2_000_000))
        );
        assert_eq!(
            PsiTrigger::some(1000, 2_000_001).rounded_for_unprivileged(),
            Some(PsiTrigger::some(1000, 4_000_000))
        );
        assert_eq!(
            PsiTrigger::some(1000, 9_500_000).rounded_for_unprivileged(),
            Some(PsiTrigger::some(1000, 10_000_000))
        );
        assert_eq!(
            PsiTrigger::some(1000, 10_000_000).rounded_for_unprivileged(),
            None
        );
    }

    #[test]
    fn default_config() {
        let c = PsiConfig::default();
        let t = c.triggers();
        assert_eq!(t.len(), 3);
        assert_eq!(t[0], (Level::Low, PsiTrigger::some(70_000, 2_000_000)));
        assert_eq!(
            t[2],
            (Level::Critical, PsiTrigger::full(100_000, 2_000_000))
        );
        for (_, t) in t {
            t.validate().unwrap();
        }
    }
}
