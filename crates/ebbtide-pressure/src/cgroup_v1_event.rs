//! cgroup v1 `memory.pressure_level` notifications.
//!
//! Registration: open `memory.pressure_level`, create an eventfd, and write
//! `"<eventfd> <pressure_level fd> <level>[,<mode>]"` to `cgroup.event_control` of the same
//! cgroup. Levels `low|medium|critical` map to Low/Moderate/Critical; modes
//! `default|hierarchy|local` (the kernel's `default`: the event also fires for pressure in
//! descendants, and stops propagating once a listener took it; ebbtide registers `local`: only
//! reclaim aimed at this very cgroup, see [`V1LevelConfig::mode`]).
//!
//! The kernel signals the eventfd in the same tick the limit is hit and on every reclaim pass
//! after it (thousands of times in 15 s), as often as xen-blkback's shrinker callback runs. The
//! source reads (and so resets) the counter on every wake-up and reports one event per wake-up
//! (`coalesce_ms` 0, the default): each renews the squeeze window, which costs nothing, while
//! the policy rate-limits the expensive actions. A `coalesce_ms` above 0 reports at most once per
//! that interval and counts the suppressed wake-ups. The kernel also signals the eventfd when the cgroup is removed, so every reported
//! event first checks that the cgroup directory still exists.

use std::fmt;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::fs;
use super::libfd::LibFd;
use super::source::{Outcome, Readiness, Source, SourceError, SourceKind};
use super::Level;

/// A `memory.pressure_level` level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V1Level {
    /// `low`: reclaiming memory for new allocations.
    Low,
    /// `medium`: swapping/evicting working set.
    Medium,
    /// `critical`: about to OOM.
    Critical,
}

impl V1Level {
    /// The kernel's name.
    pub const fn name(self) -> &'static str {
        match self {
            V1Level::Low => "low",
            V1Level::Medium => "medium",
            V1Level::Critical => "critical",
        }
    }
    /// The ebbtide level it maps to.
    pub const fn level(self) -> Level {
        match self {
            V1Level::Low => Level::Low,
            V1Level::Medium => Level::Moderate,
            V1Level::Critical => Level::Critical,
        }
    }
    /// All three, Low first.
    pub const ALL: [V1Level; 3] = [V1Level::Low, V1Level::Medium, V1Level::Critical];
}

/// Propagation mode of a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum V1Mode {
    /// No mode suffix (kernel default).
    #[default]
    Default,
    /// `hierarchy`: always propagate to ancestors' listeners too.
    Hierarchy,
    /// `local`: only pressure in this very cgroup.
    Local,
}

/// The line to write to `cgroup.event_control`.
pub fn event_control_line(efd: RawFd, level_fd: RawFd, level: V1Level, mode: V1Mode) -> String {
    match mode {
        V1Mode::Default => format!("{efd} {level_fd} {}", level.name()),
        V1Mode::Hierarchy => format!("{efd} {level_fd} {},hierarchy", level.name()),
        V1Mode::Local => format!("{efd} {level_fd} {},local", level.name()),
    }
}

/// Configuration of the cgroup v1 pressure level sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1LevelConfig {
    /// Use them at all. Default true.
    pub enabled: bool,
    /// Which kernel levels to register (one eventfd each). Default all three.
    pub levels: Vec<V1Level>,
    /// Propagation mode. Default [`V1Mode::Local`]: only reclaim whose target is this cgroup
    /// (its own limit, or global reclaim for the root) — the kernel's default mode also passes
    /// up the reclaim of any descendant at *its* limit, which is not this process's pressure;
    /// with every wake-up reported that turned into squeeze windows in a process of the root
    /// cgroup whenever some other cgroup on the machine was at its limit (seen in the CLI's
    /// end-to-end test while other test suites ran).
    pub mode: V1Mode,
    /// Report at most once per this many ms per level; 0 (the default) reports every wake-up.
    pub coalesce_ms: u64,
    /// Use this cgroup directory instead of the own v1 memory cgroup.
    pub cgroup: Option<PathBuf>,
}

impl Default for V1LevelConfig {
    fn default() -> Self {
        V1LevelConfig {
            enabled: true,
            levels: V1Level::ALL.to_vec(),
            mode: V1Mode::Local,
            coalesce_ms: 0,
            cgroup: None,
        }
    }
}

/// Coalescing of a chatty signal: report at most once per interval. Pure; time passed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coalescer {
    interval: Duration,
    last: Option<Instant>,
    /// Signals counted (sum of eventfd counters).
    pub signals: u64,
    /// Signals that were reported.
    pub reported: u64,
}

impl Coalescer {
    /// Report at most once per `interval`.
    pub fn new(interval: Duration) -> Coalescer {
        Coalescer {
            interval,
            last: None,
            signals: 0,
            reported: 0,
        }
    }

    /// `count` new signals at `now`: true if this one is to be reported.
    pub fn signal(&mut self, count: u64, now: Instant) -> bool {
        if count == 0 {
            return false;
        }
        self.signals += count;
        let due = self
            .last
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval);
        if due {
            self.last = Some(now);
            self.reported += 1;
        }
        due
    }
}

/// One `memory.pressure_level` registration (one level) on one cgroup.
pub struct V1LevelSource {
    efd: LibFd,
    // Kept open: the registration lives as long as the pressure_level file is open.
    level_file: LibFd,
    cgroup: PathBuf,
    level_path: PathBuf,
    efd_name: PathBuf,
    v1: V1Level,
    mode: V1Mode,
    coalescer: Coalescer,
    /// The cgroup is the process's own: on failure, re-resolve it as a fallback.
    follow_own: bool,
}

impl fmt::Debug for V1LevelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("V1LevelSource")
            .field("cgroup", &self.cgroup)
            .field("level", &self.v1)
            .field("coalescer", &self.coalescer)
            .finish()
    }
}

impl V1LevelSource {
    /// Register for `v1` pressure on the cgroup v1 memory directory `cgroup`.
    pub fn open(
        cgroup: &Path,
        v1: V1Level,
        mode: V1Mode,
        coalesce: Duration,
    ) -> Result<V1LevelSource, SourceError> {
        let pl_path = cgroup.join("memory.pressure_level");
        let ec_path = cgroup.join("cgroup.event_control");
        let level_file = fs::open(&pl_path, libc::O_RDONLY)?;
        let efd = fs::eventfd()?;
        let line = event_control_line(efd.as_raw_fd(), level_file.as_raw_fd(), v1, mode);
        let ec = fs::open(&ec_path, libc::O_WRONLY)?;
        fs::write_once(
            ec.as_raw_fd(),
            line.as_bytes(),
            &ec_path,
            &format!("registering \"{line}\" with"),
        )?;
        Ok(V1LevelSource {
            efd,
            level_file,
            cgroup: cgroup.to_path_buf(),
            level_path: pl_path.clone(),
            efd_name: PathBuf::from(format!("eventfd for {} {}", pl_path.display(), v1.name())),
            v1,
            mode,
            coalescer: Coalescer::new(coalesce),
            follow_own: false,
        })
    }

    /// Mark the cgroup as the process's own: if it goes away (the process was moved), the
    /// fallback registers again on the cgroup `/proc/self/cgroup` names then.
    pub fn following_own_cgroup(mut self) -> Self {
        self.follow_own = true;
        self
    }

    /// How many kernel signals arrived and how many were reported.
    pub fn counts(&self) -> (u64, u64) {
        (self.coalescer.signals, self.coalescer.reported)
    }
}

impl Source for V1LevelSource {
    fn kind(&self) -> SourceKind {
        SourceKind::CgroupV1Level
    }

    fn describe(&self) -> String {
        let mode = match self.mode {
            V1Mode::Default => "",
            V1Mode::Hierarchy => ",hierarchy",
            V1Mode::Local => ",local",
        };
        let rate = match self.coalescer.interval.as_millis() {
            0 => "every wake-up reported".to_string(),
            n => format!("coalesced to 1 per {n} ms"),
        };
        format!(
            "{}/memory.pressure_level {}{mode} -> {} ({rate})",
            self.cgroup.display(),
            self.v1.name(),
            self.v1.level(),
        )
    }

    fn fd(&self) -> Option<RawFd> {
        Some(self.efd.as_raw_fd())
    }

    fn check_fds(&self) -> Result<(), crate::libfd::Lost> {
        self.efd.check()?;
        self.level_file.check()
    }

    fn epoll_events(&self) -> u32 {
        libc::EPOLLIN as u32
    }

    fn next_poll(&self, _now: Instant) -> Option<Instant> {
        None
    }

    fn on_ready(&mut self, _r: Readiness, now: Instant) -> Result<Outcome, SourceError> {
        let n = fs::eventfd_read(self.efd.as_raw_fd(), &self.efd_name)?;
        if n == 0 {
            return Ok(Outcome::Spurious);
        }
        // The kernel signals once more when the cgroup is removed; check on every signal
        // (one stat), not only on reported ones, or a removal inside a coalescing interval
        // would leave a silently dead source.
        if !self.level_path.exists() {
            return Err(SourceError::Gone(format!(
                "cgroup {} was removed",
                self.cgroup.display()
            )));
        }
        if !self.coalescer.signal(n, now) {
            return Ok(Outcome::Quiet);
        }
        Ok(Outcome::Event(self.v1.level()))
    }

    fn fallback(&self) -> Option<Result<Box<dyn Source>, SourceError>> {
        if !self.follow_own {
            return None;
        }
        let dir = super::cgroup::own().ok()?.v1_memory?;
        if dir == self.cgroup {
            return None;
        }
        Some(
            V1LevelSource::open(&dir, self.v1, self.mode, self.coalescer.interval)
                .map(|s| Box::new(s.following_own_cgroup()) as Box<dyn Source>),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        assert_eq!(
            event_control_line(5, 6, V1Level::Low, V1Mode::Default),
            "5 6 low"
        );
        assert_eq!(
            event_control_line(5, 6, V1Level::Medium, V1Mode::Hierarchy),
            "5 6 medium,hierarchy"
        );
        assert_eq!(
            event_control_line(7, 8, V1Level::Critical, V1Mode::Local),
            "7 8 critical,local"
        );
        assert_eq!(V1Level::Medium.level(), Level::Moderate);
    }

    #[test]
    fn coalescing() {
        let s = Instant::now();
        let mut c = Coalescer::new(Duration::from_millis(100));
        assert!(!c.signal(0, s), "zero count is no signal");
        assert!(c.signal(3, s));
        let mut reported = 1;
        // 10 000 signals over one second: at most one report per 100 ms.
        for i in 1..10_000u64 {
            reported += c.signal(1, s + Duration::from_micros(i * 100)) as u32;
        }
        assert_eq!(reported, 10);
        assert_eq!(c.signals, 3 + 9_999);
        assert_eq!(c.reported, 10);
        assert!(c.signal(1, s + Duration::from_millis(1100)));
    }

    #[test]
    fn default_reports_every_wake_up() {
        assert_eq!(V1LevelConfig::default().coalesce_ms, 0);
        assert_eq!(
            V1LevelConfig::default().mode,
            V1Mode::Local,
            "own reclaim only"
        );
        let s = Instant::now();
        let mut c = Coalescer::new(Duration::ZERO);
        for i in 0..1000u64 {
            assert!(c.signal(2, s + Duration::from_micros(i)));
        }
        assert_eq!((c.signals, c.reported), (2000, 1000));
    }
}
