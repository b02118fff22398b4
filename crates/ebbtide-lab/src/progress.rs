//! Progress lines on stderr: what runs, elapsed time, ETA.
//!
//! Each step prints one whole line (`[squeeze 3/10] variant 10ms, run 2 — elapsed 41.2s,
//! ETA 1m36s`), never carriage returns or cursor movement, so the output reads the same in
//! a terminal, a pipe, a CI log or a file.

use std::io::Write;
use std::time::{Duration, Instant};

/// Progress of a run of `total` steps.
#[derive(Debug)]
pub struct Progress {
    label: String,
    total: usize,
    started: usize,
    start: Instant,
    quiet: bool,
}

impl Progress {
    /// Starts timing a run of `total` steps named `label`.
    pub fn new(label: &str, total: usize) -> Progress {
        Progress {
            label: label.into(),
            total,
            started: 0,
            start: Instant::now(),
            quiet: false,
        }
    }

    /// Prints nothing (for tests and `--quiet`).
    pub fn quiet(mut self, quiet: bool) -> Progress {
        self.quiet = quiet;
        self
    }

    /// Announces the next step and returns the line printed.
    pub fn begin(&mut self, what: &str) -> String {
        let done = self.started;
        self.started += 1;
        let elapsed = self.start.elapsed();
        let eta = match eta(elapsed, done, self.total) {
            Some(d) => fmt_duration(d),
            None => "?".into(),
        };
        let line = format!(
            "[{} {}/{}] {what} — elapsed {}, ETA {eta}",
            self.label,
            self.started,
            self.total,
            fmt_duration(elapsed)
        );
        self.emit(&line);
        line
    }

    /// Prints a note under the current step and returns it.
    pub fn note(&self, msg: &str) -> String {
        let line = format!("[{}] {msg}", self.label);
        self.emit(&line);
        line
    }

    /// Prints the closing line and returns it.
    pub fn finish(&self) -> String {
        let line = format!(
            "[{}] done: {} step(s) in {}",
            self.label,
            self.started,
            fmt_duration(self.start.elapsed())
        );
        self.emit(&line);
        line
    }

    fn emit(&self, line: &str) {
        if !self.quiet {
            let mut e = std::io::stderr().lock();
            let _ = writeln!(e, "{line}");
            let _ = e.flush();
        }
    }
}

/// Remaining time if the `total - done` remaining steps take as long on average as the
/// `done` finished ones; `None` before the first step finished.
pub fn eta(elapsed: Duration, done: usize, total: usize) -> Option<Duration> {
    if done == 0 {
        return None;
    }
    let left = total.saturating_sub(done) as u32;
    Some(elapsed / done as u32 * left)
}

/// `12.3s`, `4m05s`, `1h02m`.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        let s = s as u64;
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        let s = s as u64;
        format!("{}h{:02}m", s / 3600, s / 60 % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_and_format() {
        assert_eq!(eta(Duration::from_secs(10), 0, 5), None);
        assert_eq!(
            eta(Duration::from_secs(10), 2, 5),
            Some(Duration::from_secs(15))
        );
        assert_eq!(eta(Duration::from_secs(10), 5, 5), Some(Duration::ZERO));
        assert_eq!(fmt_duration(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(fmt_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(fmt_duration(Duration::from_secs(3720)), "1h02m");
    }

    #[test]
    fn lines() {
        let mut p = Progress::new("exp", 3).quiet(true);
        let l = p.begin("variant a");
        assert!(l.starts_with("[exp 1/3] variant a — elapsed "), "{l}");
        assert!(l.ends_with("ETA ?"), "{l}");
        let l = p.begin("variant b");
        assert!(
            l.starts_with("[exp 2/3] variant b") && !l.ends_with('?'),
            "{l}"
        );
        assert_eq!(p.note("hello"), "[exp] hello");
        assert!(p.finish().starts_with("[exp] done: 2 step(s) in "));
    }
}
