//! cgroup v2 `memory.events`: the counters `low`, `high`, `max`, `oom`, `oom_kill`.
//!
//! The file raises a kernfs notification (`POLLPRI`, with `POLLERR`, in poll/epoll) whenever a
//! counter changes. The source re-reads it through the same fd (which re-arms the
//! notification) and reports when a counter grew: `high` → Moderate (the cgroup is being
//! throttled at `memory.high`), `max`, `oom`, `oom_kill` → Critical. A change of other counters
//! (`low`) is consumed quietly.
//!
//! Needs the memory controller on cgroup v2; on a v1-memory machine the file does not exist
//! and the source is inactive.

use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::fs;
use super::libfd::LibFd;
use super::source::{Outcome, Readiness, Source, SourceError, SourceKind};
use super::Level;

/// The counters of `memory.events` ebbtide looks at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryEvents {
    /// `high`.
    pub high: u64,
    /// `max`.
    pub max: u64,
    /// `oom`.
    pub oom: u64,
    /// `oom_kill`.
    pub oom_kill: u64,
}

/// Parse `memory.events` (`"<name> <count>"` lines; unknown names ignored).
pub fn parse_memory_events(text: &str) -> Result<MemoryEvents, String> {
    let mut e = MemoryEvents::default();
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        let (Some(name), Some(v)) = (it.next(), it.next()) else {
            continue;
        };
        let v: u64 = v
            .parse()
            .map_err(|_| format!("memory.events: bad count in {line:?}"))?;
        match name {
            "high" => e.high = v,
            "max" => e.max = v,
            "oom" => e.oom = v,
            "oom_kill" => e.oom_kill = v,
            _ => {}
        }
    }
    Ok(e)
}

/// The level a change from `old` to `new` signals (Normal = nothing relevant grew).
pub fn events_level(old: &MemoryEvents, new: &MemoryEvents) -> Level {
    if new.max > old.max || new.oom > old.oom || new.oom_kill > old.oom_kill {
        Level::Critical
    } else if new.high > old.high {
        Level::Moderate
    } else {
        Level::Normal
    }
}

/// `memory.events` watcher on one cgroup v2 directory.
#[derive(Debug)]
pub struct MemoryEventsSource {
    fd: LibFd,
    path: PathBuf,
    last: MemoryEvents,
}

impl MemoryEventsSource {
    /// Open `<dir>/memory.events` and read the current counters.
    pub fn open(dir: &Path) -> Result<MemoryEventsSource, SourceError> {
        let path = dir.join("memory.events");
        let fd = fs::open(&path, libc::O_RDONLY | libc::O_NONBLOCK)?;
        let last = parse_memory_events(&fs::pread_string(fd.as_raw_fd(), &path)?)
            .map_err(SourceError::invalid)?;
        Ok(MemoryEventsSource { fd, path, last })
    }
}

impl Source for MemoryEventsSource {
    fn kind(&self) -> SourceKind {
        SourceKind::MemoryEvents
    }

    fn describe(&self) -> String {
        format!(
            "{} (high -> moderate; max, oom, oom_kill -> critical)",
            self.path.display()
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
        // kernfs reports a change as POLLPRI|POLLERR; a vanished cgroup makes the read fail.
        let text = fs::pread_string(self.fd.as_raw_fd(), &self.path)
            .map_err(|e| SourceError::Gone(format!("re-reading {}: {e}", self.path.display())))?;
        let new = parse_memory_events(&text).map_err(SourceError::invalid)?;
        let level = events_level(&self.last, &new);
        let changed = new != self.last;
        self.last = new;
        Ok(match level {
            Level::Normal if changed || r.priority => Outcome::Quiet,
            Level::Normal => Outcome::Spurious,
            l => Outcome::Event(l),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_levels() {
        let a = parse_memory_events("low 0\nhigh 3\nmax 1\noom 0\noom_kill 0\noom_group_kill 0\n")
            .unwrap();
        assert_eq!(
            a,
            MemoryEvents {
                high: 3,
                max: 1,
                oom: 0,
                oom_kill: 0
            }
        );
        assert!(parse_memory_events("high x\n").is_err());
        let mut b = a;
        assert_eq!(events_level(&a, &b), Level::Normal);
        b.high += 1;
        assert_eq!(events_level(&a, &b), Level::Moderate);
        b.oom_kill += 1;
        assert_eq!(events_level(&a, &b), Level::Critical);
        let mut c = a;
        c.max += 5;
        assert_eq!(events_level(&a, &c), Level::Critical);
    }
}

#[cfg(test)]
mod file_tests {
    use super::*;

    /// Re-reading through the same fd sees new counters (plain file stands in for kernfs).
    #[test]
    fn rereads_through_fd() {
        let d = std::env::temp_dir().join(format!("ebbtide-unit-events-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("memory.events");
        std::fs::write(&f, "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n").unwrap();
        let mut s = MemoryEventsSource::open(&d).unwrap();
        let now = Instant::now();
        let pri = Readiness {
            priority: true,
            ..Default::default()
        };
        assert_eq!(s.on_ready(pri, now).unwrap(), Outcome::Quiet);
        assert_eq!(
            s.on_ready(Readiness::default(), now).unwrap(),
            Outcome::Spurious
        );
        std::fs::write(&f, "low 0\nhigh 2\nmax 0\noom 0\noom_kill 0\n").unwrap();
        assert_eq!(
            s.on_ready(pri, now).unwrap(),
            Outcome::Event(Level::Moderate)
        );
        std::fs::write(&f, "low 0\nhigh 2\nmax 0\noom 1\noom_kill 1\n").unwrap();
        assert_eq!(
            s.on_ready(pri, now).unwrap(),
            Outcome::Event(Level::Critical)
        );
        std::fs::write(&f, "low 5\nhigh 2\nmax 0\noom 1\noom_kill 1\n").unwrap();
        assert_eq!(
            s.on_ready(pri, now).unwrap(),
            Outcome::Quiet,
            "low counter is not pressure"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A regular file cannot be put in epoll (EPERM): the watcher reports the source
    /// inactive with that reason instead of failing.
    #[test]
    fn unpollable_fd_is_reported() {
        let d = std::env::temp_dir().join(format!("ebbtide-unit-events2-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("memory.events"), "high 0\n").unwrap();
        let s = MemoryEventsSource::open(&d).unwrap();
        let w = crate::Watcher::from_sources(vec![Box::new(s)]).unwrap();
        assert_eq!(w.active_sources(), 0);
        let st = w
            .status()
            .iter()
            .find(|s| s.kind == SourceKind::MemoryEvents)
            .unwrap();
        assert!(
            !st.active && st.detail.contains("cannot be watched with epoll"),
            "{st}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
