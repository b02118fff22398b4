//! Headroom: the own cgroup's usage against its limit, polled.
//!
//! * cgroup v2: `memory.current` against the lower of `memory.high` and `memory.max`
//!   (`max` = unlimited).
//! * cgroup v1: `memory.usage_in_bytes` against `memory.limit_in_bytes`; the kernel reports
//!   "unlimited" as 9223372036854771712 (`PAGE_COUNTER_MAX` in bytes), so any limit of
//!   2^62 bytes or more counts as unlimited and leaves the source inactive ("no limit").
//!
//! The level follows the fraction of the limit still free (defaults):
//!
//! | free fraction | level    |
//! |---------------|----------|
//! | < 5 %         | Critical |
//! | < 10 %        | Moderate |
//! | < 20 %        | Low      |
//!
//! The poll interval shrinks as headroom shrinks: `max_interval_ms` (1 s) while at least twice
//! the Low threshold is free, `min_interval_ms` (10 ms) at the Critical threshold, and in
//! between the **cube** of the position: the rate rises steeply near the limit (defaults: 123 ms
//! at 22 % free, 33 ms at 15 %, 18 ms at 12 %), so a cache regrowing toward the limit is seen
//! within milliseconds, not a second. The interval is also bounded by the **runway**
//! ([`runway_interval`]): the time in which usage growing at `growth_per_s` (256 MiB/s), or at
//! the rate seen since the previous reading if that is faster, would use up half of the bytes
//! left before the Critical threshold. A share of the limit says nothing about how fast a
//! neighbour can fill what is left: in a small group (112 MiB, half free) a neighbour faulting
//! at 100 MiB/s reaches `memory.max` within a second, between two polls at the share's pace,
//! and at `memory.max` only the `events` source is left, racing the kernel's OOM killer (the
//! VM test `memory_max_reached_no_oom_kill_for_ebbtide` lost that race one run in a few).
//! A Low level is reported when it changes and then again
//! every `repeat_ms` (500 ms) while it lasts, so the policy's level hold stays fresh without a
//! storm; the pace follows the tightest reading of the last one to two `max_interval_ms`
//! ([`pace_free`]), because usage swings fast: right after a squeeze the group is far from its
//! limit, and a few hundred milliseconds later back at it. Moderate and Critical are reported at
//! **every** poll while they last: each renews the
//! squeeze window (free), as the kernel's shrinker runs on every reclaim pass.
//!
//! The usage counts the library's own lazily freed pages (`MADV_FREE`) until the kernel takes
//! them. They are not pressure: the kernel can take them without I/O. (Pages a cache gave up
//! that still wait for their `MADV_FREE` are usage like any other: the kernel could only swap
//! them.) The runtime hands
//! the source a function giving those bytes ([`HeadroomSource::excluding`]), and the source
//! subtracts them from the usage it reads.
//! (Tunables `headroom_min_interval_ms`, `headroom_max_interval_ms`, `headroom_repeat_ms`.)
//! The limit is re-read every poll (it may change at run time).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::fs;
use super::libfd::LibFd;
use super::source::{LevelReporter, Outcome, Readiness, Source, SourceError, SourceKind};
use super::Level;

/// Limits at or above this are "unlimited" (v1 reports 9223372036854771712).
pub const UNLIMITED_THRESHOLD: u64 = 1 << 62;

/// Free-fraction thresholds and poll intervals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadroomConfig {
    /// Use the source at all. Default true.
    pub enabled: bool,
    /// Low when less than this fraction of the limit is free. Default [`HeadroomConfig::DEFAULT_LOW_PCT`] %.
    pub low_free: f64,
    /// Moderate below this. Default [`HeadroomConfig::DEFAULT_MODERATE_PCT`] %.
    pub moderate_free: f64,
    /// Critical below this. Default [`HeadroomConfig::DEFAULT_CRITICAL_PCT`] %.
    pub critical_free: f64,
    /// Poll interval close to the limit. Default [`HeadroomConfig::DEFAULT_MIN_INTERVAL_MS`].
    pub min_interval_ms: u64,
    /// Poll interval far from the limit. Default [`HeadroomConfig::DEFAULT_MAX_INTERVAL_MS`].
    pub max_interval_ms: u64,
    /// Re-report a persisting non-Normal level this often. Default [`HeadroomConfig::DEFAULT_REPEAT_MS`].
    pub repeat_ms: u64,
    /// Bytes per second the usage is assumed able to grow between two polls ([`runway_interval`]);
    /// 0 = only the growth seen. Default [`HeadroomConfig::DEFAULT_GROWTH_PER_S`].
    pub growth_per_s: u64,
}

impl HeadroomConfig {
    /// Default Low threshold: free share of the limit below which the level is Low, percent.
    /// The one place the headroom defaults are written (the runtime's tunables table takes them
    /// from here).
    pub const DEFAULT_LOW_PCT: u64 = 20;
    /// Default Moderate threshold, percent free.
    pub const DEFAULT_MODERATE_PCT: u64 = 10;
    /// Default Critical threshold, percent free.
    pub const DEFAULT_CRITICAL_PCT: u64 = 5;
    /// Default shortest poll interval (at the limit), ms.
    pub const DEFAULT_MIN_INTERVAL_MS: u64 = 10;
    /// Default longest poll interval (far from the limit), ms.
    pub const DEFAULT_MAX_INTERVAL_MS: u64 = 1000;
    /// Default interval at which a persisting level is reported again, ms.
    pub const DEFAULT_REPEAT_MS: u64 = 500;
    /// Default growth rate the poll pace assumes, bytes per second: a few page-faulting threads
    /// of a neighbour (one thread faults 1-4 GiB/s natively), scaled down to what a poll can
    /// still catch without polling an idle group fast (50 MiB to the Critical threshold: a poll
    /// every 98 ms; 512 MiB: every second).
    pub const DEFAULT_GROWTH_PER_S: u64 = 256 << 20;
}

impl Default for HeadroomConfig {
    fn default() -> Self {
        HeadroomConfig {
            enabled: true,
            low_free: HeadroomConfig::DEFAULT_LOW_PCT as f64 / 100.0,
            moderate_free: HeadroomConfig::DEFAULT_MODERATE_PCT as f64 / 100.0,
            critical_free: HeadroomConfig::DEFAULT_CRITICAL_PCT as f64 / 100.0,
            min_interval_ms: HeadroomConfig::DEFAULT_MIN_INTERVAL_MS,
            max_interval_ms: HeadroomConfig::DEFAULT_MAX_INTERVAL_MS,
            repeat_ms: HeadroomConfig::DEFAULT_REPEAT_MS,
            growth_per_s: HeadroomConfig::DEFAULT_GROWTH_PER_S,
        }
    }
}

/// Fraction of `limit` still free (0.0 when usage ≥ limit).
pub fn free_fraction(usage: u64, limit: u64) -> f64 {
    if limit == 0 || usage >= limit {
        return 0.0;
    }
    (limit - usage) as f64 / limit as f64
}

/// The level for `usage` against `limit`. Pure.
pub fn headroom_level(usage: u64, limit: u64, cfg: &HeadroomConfig) -> Level {
    let free = free_fraction(usage, limit);
    if free < cfg.critical_free {
        Level::Critical
    } else if free < cfg.moderate_free {
        Level::Moderate
    } else if free < cfg.low_free {
        Level::Low
    } else {
        Level::Normal
    }
}

/// The poll interval for a free fraction. Pure.
pub fn poll_interval(free: f64, cfg: &HeadroomConfig) -> Duration {
    let far = 2.0 * cfg.low_free;
    let close = cfg.critical_free;
    let (lo, hi) = (
        cfg.min_interval_ms as f64,
        cfg.max_interval_ms.max(cfg.min_interval_ms) as f64,
    );
    let ms = if free >= far {
        hi
    } else if free <= close || far <= close {
        lo
    } else {
        let x = (free - close) / (far - close);
        lo + (hi - lo) * x * x * x
    };
    Duration::from_micros((ms * 1000.0) as u64)
}

/// The runway bound on the poll interval: the time in which usage growing at `rate` bytes per
/// second would use up half of the bytes left between `usage` and the Critical threshold, so at
/// least one more poll comes before the group gets there; at least `min_interval_ms`; `None`
/// when nothing grows (`rate` 0). Halving leaves the reaction (a squeeze) as much time as the
/// poll. Pure.
pub fn runway_interval(
    usage: u64,
    limit: u64,
    rate: f64,
    cfg: &HeadroomConfig,
) -> Option<Duration> {
    if rate <= 0.0 || !rate.is_finite() {
        return None;
    }
    let critical_at = limit as f64 * (1.0 - cfg.critical_free);
    let runway = (critical_at - usage as f64).max(0.0);
    let ms = (runway / 2.0 / rate * 1000.0).max(cfg.min_interval_ms as f64);
    Some(Duration::from_micros((ms.min(1e12) * 1000.0) as u64))
}

/// The growth rate the pace assumes, bytes per second: the larger of `growth_per_s` and the
/// growth from `prev` to `usage` over `elapsed` (a shrinking usage, or no time passed, counts as
/// none seen). Pure.
pub fn pace_rate(prev: u64, usage: u64, elapsed: Duration, cfg: &HeadroomConfig) -> f64 {
    let seen = if elapsed.is_zero() {
        0.0
    } else {
        usage.saturating_sub(prev) as f64 / elapsed.as_secs_f64()
    };
    seen.max(cfg.growth_per_s as f64)
}

/// The free fraction that sets the poll pace: the lowest of `now_free` and the lows of the current
/// and the previous window (each `max_interval_ms` long) — a group that was close to its limit a
/// moment ago can be there again within milliseconds (caches regrow in bursts right after a
/// squeeze let them shrink), so the pace relaxes only after a whole window without tight readings.
/// Pure: the state is passed in and returned.
pub fn pace_free(now_free: f64, pace: &mut PaceWindow, now: Instant, window: Duration) -> f64 {
    match pace.start {
        Some(s) if now.saturating_duration_since(s) < window => {}
        Some(s) if now.saturating_duration_since(s) < 2 * window => {
            pace.prev_min = pace.cur_min;
            pace.cur_min = f64::INFINITY;
            pace.start = Some(s + window);
        }
        // The first reading, or one after a long silence: nothing is known about the last
        // window, so it counts as tight (a process starting in a full group polls fast at once).
        _ => {
            pace.prev_min = 0.0;
            pace.cur_min = f64::INFINITY;
            pace.start = Some(now);
        }
    }
    pace.cur_min = pace.cur_min.min(now_free);
    now_free.min(pace.cur_min).min(pace.prev_min)
}

/// The state of [`pace_free`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaceWindow {
    start: Option<Instant>,
    cur_min: f64,
    prev_min: f64,
}

impl Default for PaceWindow {
    fn default() -> Self {
        PaceWindow {
            start: None,
            cur_min: f64::INFINITY,
            prev_min: f64::INFINITY,
        }
    }
}

/// Which files give usage and limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryFiles {
    /// cgroup v1 memory directory.
    V1(PathBuf),
    /// cgroup v2 directory (with the memory controller enabled).
    V2(PathBuf),
}

impl MemoryFiles {
    /// The cgroup directory.
    pub fn dir(&self) -> &Path {
        match self {
            MemoryFiles::V1(p) | MemoryFiles::V2(p) => p,
        }
    }

    /// Read (usage, limit) once; limit `None` = unlimited. Opens the files for this one
    /// reading; a [`HeadroomSource`] keeps them open instead.
    pub fn read(&self) -> Result<(u64, Option<u64>), SourceError> {
        HeldFiles::open(self)?.read()
    }

    /// The usage file, then the limit files (v1: `memory.limit_in_bytes`; v2: `memory.high`
    /// and `memory.max`).
    fn paths(&self) -> (PathBuf, Vec<PathBuf>) {
        match self {
            MemoryFiles::V1(d) => (
                d.join("memory.usage_in_bytes"),
                vec![d.join("memory.limit_in_bytes")],
            ),
            MemoryFiles::V2(d) => (
                d.join("memory.current"),
                vec![d.join("memory.high"), d.join("memory.max")],
            ),
        }
    }
}

/// The memory files held open as library descriptors and read with `pread` at every poll.
/// A poll near the limit comes every few milliseconds; opening the files each time would put
/// a descriptor of ours at the program's lowest free number again and again (a daemon that
/// closed stdin and opens `/dev/null` expecting 0 could get 3), see [`crate::libfd`].
struct HeldFiles {
    v1: bool,
    usage: (PathBuf, LibFd),
    limits: Vec<(PathBuf, LibFd)>,
}

impl HeldFiles {
    fn open(files: &MemoryFiles) -> Result<HeldFiles, SourceError> {
        let (usage, limits) = files.paths();
        let open = |p: PathBuf| -> Result<(PathBuf, LibFd), SourceError> {
            let fd = fs::open(&p, libc::O_RDONLY)?;
            Ok((p, fd))
        };
        Ok(HeldFiles {
            v1: matches!(files, MemoryFiles::V1(_)),
            usage: open(usage)?,
            limits: limits.into_iter().map(open).collect::<Result<_, _>>()?,
        })
    }

    fn read(&self) -> Result<(u64, Option<u64>), SourceError> {
        let number = |(p, fd): &(PathBuf, LibFd)| -> Result<Option<u64>, SourceError> {
            let s = fs::pread_string(fd.as_raw_fd(), p)?;
            fs::parse_limit(&s).ok_or_else(|| {
                SourceError::invalid(format!(
                    "{}: expected a number{}, found {:?}",
                    p.display(),
                    if self.v1 { "" } else { " or \"max\"" },
                    s.trim()
                ))
            })
        };
        let usage = number(&self.usage)?.ok_or_else(|| {
            SourceError::invalid(format!(
                "{}: expected a number, found \"max\"",
                self.usage.0.display()
            ))
        })?;
        let mut limit: Option<u64> = None;
        for f in &self.limits {
            if let Some(l) = number(f)? {
                limit = Some(limit.map_or(l, |m| m.min(l)));
            }
        }
        Ok((usage, limit.filter(|&l| l < UNLIMITED_THRESHOLD)))
    }

    fn check(&self) -> Result<(), crate::libfd::Lost> {
        self.usage.1.check()?;
        self.limits.iter().try_for_each(|(_, fd)| fd.check())
    }
}

/// Polled headroom source on one cgroup.
pub struct HeadroomSource {
    files: MemoryFiles,
    held: HeldFiles,
    cfg: HeadroomConfig,
    next: Instant,
    reporter: LevelReporter,
    last_reading: (u64, u64),
    /// The cgroup is the process's own: on failure, re-resolve it as a fallback.
    follow_own: bool,
    /// Bytes of the usage that are not pressure (the library's lazily freed pages).
    exclude: Option<super::budget::HeldBytes>,
    pace: PaceWindow,
    /// When `last_reading` was read (`None` until the first poll), for the growth rate.
    last_at: Option<Instant>,
}

impl std::fmt::Debug for HeadroomSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeadroomSource")
            .field("files", &self.files)
            .field("cfg", &self.cfg)
            .field("last_reading", &self.last_reading)
            .field("excluding", &self.exclude.is_some())
            .finish()
    }
}

/// The memory files of the process's own cgroup: v2 if it has the memory controller, else
/// v1 memory. `None` if neither exists.
pub fn own_memory_files(paths: &super::CgroupPaths) -> Option<MemoryFiles> {
    if let Some(v2) = paths
        .v2
        .as_ref()
        .filter(|p| p.join("memory.current").exists())
    {
        return Some(MemoryFiles::V2(v2.clone()));
    }
    paths
        .v1_memory
        .as_ref()
        .filter(|p| p.join("memory.usage_in_bytes").exists())
        .map(|p| MemoryFiles::V1(p.clone()))
}

impl HeadroomSource {
    /// Watch `files`. Fails with [`SourceError::Invalid`] "no limit" when the cgroup is
    /// unlimited, so detection reports it inactive.
    pub fn open(
        files: MemoryFiles,
        cfg: HeadroomConfig,
        now: Instant,
    ) -> Result<HeadroomSource, SourceError> {
        let held = HeldFiles::open(&files)?;
        let (usage, limit) = held.read()?;
        let Some(limit) = limit else {
            return Err(SourceError::invalid(format!(
                "no limit: {} memory limit is unlimited",
                match &files {
                    MemoryFiles::V1(d) => format!("cgroup v1 {}", d.display()),
                    MemoryFiles::V2(d) => format!("cgroup v2 {}", d.display()),
                }
            )));
        };
        Ok(HeadroomSource {
            files,
            held,
            cfg,
            next: now,
            reporter: LevelReporter::default(),
            last_reading: (usage, limit),
            follow_own: false,
            exclude: None,
            pace: PaceWindow::default(),
            last_at: None,
        })
    }

    /// Subtract `f()` from every usage read: memory the cgroup counts that is not pressure (the
    /// library's own lazily freed pages, which the kernel takes first and without I/O).
    pub fn excluding(mut self, f: super::budget::HeldBytes) -> Self {
        self.exclude = Some(f);
        self
    }

    /// Mark the cgroup as the process's own: if reading fails (the process was moved and the
    /// cgroup removed), the fallback watches the cgroup `/proc/self/cgroup` names then.
    pub fn following_own_cgroup(mut self) -> Self {
        self.follow_own = true;
        self
    }

    /// The last (usage, limit) read.
    pub fn last_reading(&self) -> (u64, u64) {
        self.last_reading
    }

    /// Read now and return the current level (also used by [`Source::on_ready`]).
    pub fn sample(&mut self, now: Instant) -> Result<Level, SourceError> {
        let (usage, limit) = self.held.read()?;
        let usage = usage.saturating_sub(self.exclude.as_ref().map_or(0, |f| f()));
        let Some(limit) = limit else {
            // Limit removed at run time: no pressure from here; keep polling slowly.
            self.last_reading = (usage, u64::MAX);
            self.last_at = Some(now);
            self.next = now + Duration::from_millis(self.cfg.max_interval_ms);
            return Ok(Level::Normal);
        };
        // No time since a first reading: no growth seen.
        let elapsed = self
            .last_at
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        let rate = pace_rate(self.last_reading.0, usage, elapsed, &self.cfg);
        self.last_reading = (usage, limit);
        self.last_at = Some(now);
        let window = Duration::from_millis(self.cfg.max_interval_ms.max(self.cfg.min_interval_ms));
        let pace = pace_free(free_fraction(usage, limit), &mut self.pace, now, window);
        let share = poll_interval(pace, &self.cfg);
        self.next =
            now + runway_interval(usage, limit, rate, &self.cfg).map_or(share, |r| r.min(share));
        Ok(headroom_level(usage, limit, &self.cfg))
    }
}

impl Source for HeadroomSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Headroom
    }

    fn describe(&self) -> String {
        let c = &self.cfg;
        format!(
            "{}: usage {} of limit {}; Low < {:.0}% free, Moderate < {:.0}%, Critical < {:.0}%; poll {}..{} ms, paced for growth of {} MiB/s",
            self.files.dir().display(),
            self.last_reading.0,
            self.last_reading.1,
            c.low_free * 100.0,
            c.moderate_free * 100.0,
            c.critical_free * 100.0,
            c.min_interval_ms,
            c.max_interval_ms,
            c.growth_per_s >> 20
        )
    }

    fn fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    fn epoll_events(&self) -> u32 {
        0
    }

    fn next_poll(&self, _now: Instant) -> Option<Instant> {
        Some(self.next)
    }

    fn on_ready(&mut self, _r: Readiness, now: Instant) -> Result<Outcome, SourceError> {
        let level = self.sample(now)?;
        // Moderate and Critical at every poll (each renews the squeeze window); Low as configured.
        let repeat = if level >= Level::Moderate {
            0
        } else {
            self.cfg.repeat_ms
        };
        Ok(self.reporter.observe(level, now, repeat))
    }

    fn check_fds(&self) -> Result<(), crate::libfd::Lost> {
        self.held.check()
    }

    fn fallback(&self) -> Option<Result<Box<dyn Source>, SourceError>> {
        if !self.follow_own {
            return None;
        }
        let files = own_memory_files(&super::cgroup::own().ok()?)?;
        if files == self.files {
            return None;
        }
        let exclude = self.exclude.clone();
        Some(
            HeadroomSource::open(files, self.cfg, Instant::now()).map(|s| {
                let s = s.following_own_cgroup();
                Box::new(match exclude {
                    Some(f) => s.excluding(f),
                    None => s,
                }) as Box<dyn Source>
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_math() {
        let c = HeadroomConfig::default();
        let mib = 1 << 20;
        let lim = 100 * mib;
        assert_eq!(headroom_level(0, lim, &c), Level::Normal);
        assert_eq!(
            headroom_level(80 * mib, lim, &c),
            Level::Normal,
            "exactly 20% free"
        );
        assert_eq!(headroom_level(80 * mib + 1, lim, &c), Level::Low);
        assert_eq!(headroom_level(90 * mib + 1, lim, &c), Level::Moderate);
        assert_eq!(headroom_level(95 * mib + 1, lim, &c), Level::Critical);
        assert_eq!(
            headroom_level(200 * mib, lim, &c),
            Level::Critical,
            "over the limit"
        );
        assert_eq!(headroom_level(0, 0, &c), Level::Critical, "zero limit");
        assert_eq!(free_fraction(25, 100), 0.75);
    }

    #[test]
    fn interval_shrinks() {
        let c = HeadroomConfig::default();
        assert_eq!(poll_interval(1.0, &c), Duration::from_millis(1000));
        assert_eq!(poll_interval(0.40, &c), Duration::from_millis(1000));
        assert_eq!(poll_interval(0.05, &c), Duration::from_millis(10));
        assert_eq!(poll_interval(0.0, &c), Duration::from_millis(10));
        let mid = poll_interval(0.2, &c);
        assert!(
            mid > Duration::from_millis(10) && mid < Duration::from_millis(1000),
            "{mid:?}"
        );
        // Steep near the limit: milliseconds, not a second.
        assert_eq!(poll_interval(0.22, &c).as_millis(), 123);
        assert_eq!(poll_interval(0.15, &c).as_millis(), 33);
        assert!(poll_interval(0.12, &c) < Duration::from_millis(20));
        let mut prev = Duration::MAX;
        for i in (0..=100).rev() {
            let d = poll_interval(i as f64 / 100.0, &c);
            assert!(d <= prev, "monotonic");
            prev = d;
        }
    }

    #[test]
    fn runway_bounds_the_interval_by_bytes_left() {
        let c = HeadroomConfig::default();
        let mib = 1u64 << 20;
        let rate = c.growth_per_s as f64;
        // 112 MiB limit, 56 MiB used: 50.4 MiB to the Critical threshold, half of it at
        // 256 MiB/s is 98 ms, where the share (50 % free) alone gives a second.
        let r = runway_interval(56 * mib, 112 * mib, rate, &c).unwrap();
        assert_eq!(r.as_millis(), 98, "{r:?}");
        assert_eq!(poll_interval(0.5, &c), Duration::from_millis(1000));
        // A big group far from its limit: the runway is seconds, the share's pace rules.
        let r = runway_interval(4096 * mib, 8192 * mib, rate, &c).unwrap();
        assert!(r > Duration::from_secs(7), "{r:?}");
        // At or past the Critical threshold: the shortest interval.
        assert_eq!(
            runway_interval(110 * mib, 112 * mib, rate, &c),
            Some(Duration::from_millis(10))
        );
        assert_eq!(
            runway_interval(200 * mib, 112 * mib, rate, &c),
            Some(Duration::from_millis(10))
        );
        // Nothing growing and nothing assumed: no bound.
        assert_eq!(runway_interval(56 * mib, 112 * mib, 0.0, &c), None);
    }

    #[test]
    fn pace_rate_is_the_faster_of_assumed_and_seen_growth() {
        let c = HeadroomConfig::default();
        let mib = 1u64 << 20;
        let ms = Duration::from_millis;
        assert_eq!(pace_rate(0, 0, ms(100), &c), c.growth_per_s as f64);
        // 100 MiB in 100 ms: 1 GiB/s seen.
        assert_eq!(pace_rate(0, 100 * mib, ms(100), &c), (1000 * mib) as f64);
        // Shrinking usage or no time passed: nothing seen.
        assert_eq!(pace_rate(100 * mib, 0, ms(100), &c), c.growth_per_s as f64);
        assert_eq!(pace_rate(0, 100 * mib, ms(0), &c), c.growth_per_s as f64);
        let none = HeadroomConfig {
            growth_per_s: 0,
            ..c
        };
        assert_eq!(pace_rate(5, 5, ms(100), &none), 0.0);
    }

    #[test]
    fn pace_follows_the_tightest_recent_reading() {
        let s = Instant::now();
        let w = Duration::from_millis(1000);
        let mut p = PaceWindow::default();
        // Nothing known yet: tight until a whole window says otherwise.
        assert_eq!(pace_free(0.5, &mut p, s, w), 0.0);
        assert_eq!(pace_free(0.5, &mut p, s + w + w / 10, w), 0.5);
        let mut p = PaceWindow::default();
        pace_free(0.5, &mut p, s, w);
        assert_eq!(pace_free(0.05, &mut p, s + w / 10, w), 0.0);
        assert_eq!(pace_free(0.45, &mut p, s + w + w / 20, w), 0.05);
        let mut p = PaceWindow::default();
        pace_free(0.5, &mut p, s - w, w);
        assert_eq!(pace_free(0.05, &mut p, s + w / 10, w), 0.05);
        // Right after a squeeze: far from the limit, but the pace stays tight.
        assert_eq!(pace_free(0.45, &mut p, s + w / 5, w), 0.05);
        // Next window: the previous window's low still counts.
        assert_eq!(pace_free(0.45, &mut p, s + w + w / 2, w), 0.05);
        // A whole window without a tight reading: relaxed.
        assert_eq!(pace_free(0.45, &mut p, s + 2 * w + w / 2, w), 0.45);
        // After a long gap nothing is known again: tight.
        assert_eq!(pace_free(0.3, &mut p, s + 10 * w, w), 0.0);
        let c = HeadroomConfig::default();
        assert!(poll_interval(0.05, &c) <= Duration::from_millis(10));
    }

    #[test]
    fn v1_unlimited_is_inactive() {
        // The root of the v1 memory hierarchy is always unlimited, if mounted.
        let root = Path::new("/sys/fs/cgroup/memory");
        if !root.join("memory.limit_in_bytes").exists() {
            eprintln!(
                "skipped: no cgroup v1 memory hierarchy at {}",
                root.display()
            );
            return;
        }
        let e = HeadroomSource::open(
            MemoryFiles::V1(root.into()),
            HeadroomConfig::default(),
            Instant::now(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no limit"), "{e}");
    }
}

#[cfg(test)]
mod file_tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("ebbtide-unit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// cgroup v2 file semantics on plain files (this machine has no v2 memory controller).
    #[test]
    fn v2_files_limit_is_min_of_high_and_max() {
        let d = scratch("v2");
        let w = |n: &str, v: &str| std::fs::write(d.join(n), v).unwrap();
        w("memory.current", "900\n");
        w("memory.high", "max\n");
        w("memory.max", "max\n");
        let f = MemoryFiles::V2(d.clone());
        assert_eq!(f.read().unwrap(), (900, None));
        let e =
            HeadroomSource::open(f.clone(), HeadroomConfig::default(), Instant::now()).unwrap_err();
        assert!(e.to_string().contains("no limit: cgroup v2"), "{e}");
        w("memory.max", "1000\n");
        assert_eq!(f.read().unwrap(), (900, Some(1000)));
        w("memory.high", "950\n");
        assert_eq!(f.read().unwrap(), (900, Some(950)));
        let now = Instant::now();
        let mut s = HeadroomSource::open(f.clone(), HeadroomConfig::default(), now).unwrap();
        assert_eq!(
            s.on_ready(Readiness::TIMER, now).unwrap(),
            Outcome::Event(Level::Moderate)
        );
        assert_eq!(
            s.next_poll(now),
            Some(now + poll_interval(50.0 / 950.0, &HeadroomConfig::default()))
        );
        // Moderate is reported at every poll while it lasts (renewal), Low only on change.
        assert_eq!(
            s.on_ready(Readiness::TIMER, now).unwrap(),
            Outcome::Event(Level::Moderate)
        );
        // Excluded bytes (our lazily freed pages) are not usage: 900 - 200 of 950 is Normal.
        let mut x = HeadroomSource::open(f.clone(), HeadroomConfig::default(), now)
            .unwrap()
            .excluding(std::sync::Arc::new(|| 200));
        assert_eq!(x.on_ready(Readiness::TIMER, now).unwrap(), Outcome::Quiet);
        assert_eq!(x.last_reading(), (700, 950));
        w("memory.current", "bogus\n");
        let e = s.on_ready(Readiness::TIMER, now).unwrap_err();
        assert!(
            e.to_string().contains("memory.current") && e.to_string().contains("bogus"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The source paces a small group by the bytes left, and faster once it sees fast growth.
    #[test]
    fn a_small_group_half_free_is_polled_within_its_runway() {
        let d = scratch("runway");
        let mib = 1u64 << 20;
        let w = |n: &str, v: u64| std::fs::write(d.join(n), format!("{v}\n")).unwrap();
        w("memory.current", 56 * mib);
        std::fs::write(d.join("memory.high"), "max\n").unwrap();
        w("memory.max", 112 * mib);
        let c = HeadroomConfig::default();
        let t0 = Instant::now();
        let mut s = HeadroomSource::open(MemoryFiles::V2(d.clone()), c, t0).unwrap();
        // The first reading counts as tight ([`pace_free`]); one window later the share (50 %
        // free) alone would wait a second, the runway (50.4 MiB at 256 MiB/s, halved) 98 ms.
        assert_eq!(s.on_ready(Readiness::TIMER, t0).unwrap(), Outcome::Quiet);
        let t1 = t0 + Duration::from_millis(1100);
        assert_eq!(s.on_ready(Readiness::TIMER, t1).unwrap(), Outcome::Quiet);
        assert_eq!(poll_interval(0.5, &c), Duration::from_millis(1000));
        let first = s.next_poll(t1).unwrap() - t1;
        assert_eq!(first.as_millis(), 98, "{first:?}");
        // 40 MiB more 50 ms later (800 MiB/s seen): 10.4 MiB of runway halved at that rate is
        // 6.5 ms, so the floor (10 ms), where the assumed rate would give 20 ms.
        let t2 = t1 + Duration::from_millis(50);
        w("memory.current", 96 * mib);
        assert_eq!(
            s.on_ready(Readiness::TIMER, t2).unwrap(),
            Outcome::Event(Level::Low)
        );
        let second = s.next_poll(t2).unwrap() - t2;
        assert_eq!(second, Duration::from_millis(10), "{second:?}");
        assert_eq!(
            runway_interval(96 * mib, 112 * mib, c.growth_per_s as f64, &c)
                .unwrap()
                .as_millis(),
            20
        );
        // Without the assumed growth and with none seen, the share paces alone again.
        let quiet = HeadroomConfig {
            growth_per_s: 0,
            ..c
        };
        let mut q = HeadroomSource::open(MemoryFiles::V2(d.clone()), quiet, t0).unwrap();
        w("memory.current", 56 * mib);
        q.on_ready(Readiness::TIMER, t0).unwrap();
        q.on_ready(Readiness::TIMER, t1).unwrap();
        assert_eq!(q.next_poll(t1), Some(t1 + Duration::from_millis(1000)));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
