//! A memory hog to run as a child process inside a lab cgroup.
//!
//! The hog allocates `bytes`, writes one byte per page (so every page is resident and
//! charged), and, with `retouch`, keeps writing every page again until `duration` has
//! passed — under a memory limit smaller than `bytes` that forces the kernel to swap pages
//! out and back in. Without `retouch` it touches once and then sleeps out `duration`.
//!
//! It is started by re-executing a binary with environment variables: the binary calls
//! [`main_if_requested`] first thing in `main` (or in a test that the test binary is asked
//! to run), which runs the hog and exits when [`HOG_ENV`] is set.

use std::process::Command;
use std::time::{Duration, Instant};

/// Bytes to touch; its presence makes [`main_if_requested`] run the hog.
pub const HOG_ENV: &str = "EBBTIDE_LAB_HOG";
/// Seconds to run (fractional allowed; default 0: touch once and exit).
pub const HOG_SECS_ENV: &str = "EBBTIDE_LAB_HOG_SECS";
/// `1` to keep re-touching every page until the time is up.
pub const HOG_RETOUCH_ENV: &str = "EBBTIDE_LAB_HOG_RETOUCH";

/// What the hog does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HogSpec {
    /// Bytes to allocate and touch.
    pub bytes: u64,
    /// Keep writing every page again until `duration` is over.
    pub retouch: bool,
    /// How long to run in total.
    pub duration: Duration,
}

/// What the hog did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HogReport {
    /// Pages written in total (over all passes).
    pub pages_touched: u64,
    /// Complete passes over the buffer.
    pub passes: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl HogSpec {
    /// Sets the environment of `cmd` so that [`main_if_requested`] in it runs this hog.
    pub fn apply_env(&self, cmd: &mut Command) {
        cmd.env(HOG_ENV, self.bytes.to_string())
            .env(HOG_SECS_ENV, self.duration.as_secs_f64().to_string())
            .env(HOG_RETOUCH_ENV, if self.retouch { "1" } else { "0" });
    }

    /// Reads the spec from the environment; `None` if [`HOG_ENV`] is unset.
    pub fn from_env() -> Option<Result<HogSpec, String>> {
        let bytes = std::env::var(HOG_ENV).ok()?;
        Some(Self::parse(
            &bytes,
            std::env::var(HOG_SECS_ENV).ok().as_deref(),
            std::env::var(HOG_RETOUCH_ENV).ok().as_deref(),
        ))
    }

    /// Parses the three variables' values.
    pub fn parse(
        bytes: &str,
        secs: Option<&str>,
        retouch: Option<&str>,
    ) -> Result<HogSpec, String> {
        let bytes = bytes
            .trim()
            .parse::<u64>()
            .map_err(|e| format!("{HOG_ENV}={bytes:?}: not a byte count: {e}"))?;
        let secs = match secs {
            Some(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{HOG_SECS_ENV}={s:?}: not a duration in seconds"))?,
            None => 0.0,
        };
        let retouch = matches!(retouch.map(str::trim), Some("1" | "true" | "yes"));
        Ok(HogSpec {
            bytes,
            retouch,
            duration: Duration::from_secs_f64(secs),
        })
    }
}

/// Runs the hog in this process.
pub fn run(spec: &HogSpec) -> HogReport {
    const PAGE: usize = 4096;
    let start = Instant::now();
    let len = usize::try_from(spec.bytes).expect("hog size fits in usize");
    let mut buf = vec![0u8; len];
    let mut pages_touched = 0u64;
    let mut passes = 0u64;
    let mut stamp = 1u8;
    loop {
        for (i, b) in buf.iter_mut().step_by(PAGE).enumerate() {
            *b = stamp;
            pages_touched += 1;
            if spec.retouch && passes > 0 && i % 256 == 0 && start.elapsed() >= spec.duration {
                break;
            }
        }
        std::hint::black_box(&mut buf);
        passes += 1;
        stamp = stamp.wrapping_add(1).max(1);
        if !spec.retouch || start.elapsed() >= spec.duration {
            break;
        }
    }
    if let Some(rest) = spec.duration.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    std::hint::black_box(&buf);
    HogReport {
        pages_touched,
        passes,
        elapsed: start.elapsed(),
    }
}

/// If [`HOG_ENV`] is set: runs the hog, prints a report line on stderr and exits the
/// process (status 0, or 2 for a bad spec). Otherwise returns and does nothing.
pub fn main_if_requested() {
    match HogSpec::from_env() {
        None => {}
        Some(Err(e)) => {
            eprintln!("ebbtide-lab hog: {e}");
            std::process::exit(2);
        }
        Some(Ok(spec)) => {
            let r = run(&spec);
            eprintln!(
                "ebbtide-lab hog: {} MiB, {} pages written in {} pass(es), {:.2}s",
                spec.bytes >> 20,
                r.pages_touched,
                r.passes,
                r.elapsed.as_secs_f64()
            );
            std::process::exit(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_spec() {
        let s = HogSpec::parse("1048576", Some("1.5"), Some("1")).unwrap();
        assert_eq!(s.bytes, 1 << 20);
        assert!(s.retouch);
        assert_eq!(s.duration, Duration::from_millis(1500));
        let s = HogSpec::parse("10", None, None).unwrap();
        assert!(!s.retouch && s.duration.is_zero());
        assert!(HogSpec::parse("ten", None, None).is_err());
        assert!(HogSpec::parse("10", Some("-1"), None).is_err());
    }

    #[test]
    fn touches_every_page() {
        let r = run(&HogSpec {
            bytes: 1 << 20,
            retouch: false,
            duration: Duration::ZERO,
        });
        assert_eq!(r.pages_touched, 256);
        assert_eq!(r.passes, 1);
        let r = run(&HogSpec {
            bytes: 1 << 20,
            retouch: true,
            duration: Duration::from_millis(50),
        });
        assert!(r.passes >= 2, "{r:?}");
        assert!(r.elapsed >= Duration::from_millis(50));
    }

    #[test]
    fn env_round_trip() {
        let spec = HogSpec {
            bytes: 4096,
            retouch: true,
            duration: Duration::from_millis(250),
        };
        let mut cmd = Command::new("true");
        spec.apply_env(&mut cmd);
        let envs: std::collections::HashMap<_, _> = cmd
            .get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.unwrap().to_string_lossy().into_owned(),
                )
            })
            .collect();
        let back = HogSpec::parse(
            &envs[HOG_ENV],
            Some(&envs[HOG_SECS_ENV]),
            Some(&envs[HOG_RETOUCH_ENV]),
        )
        .unwrap();
        assert_eq!(back, spec);
    }
}
