//! A background thread that records memory and swap time series.
//!
//! Every `interval` it records one [`Sample`]: the watched process's RSS and swapped-out
//! size (`VmRSS`/`VmSwap` of `/proc/<pid>/status`), the cgroup's usage and swap, the swap
//! traffic since the start ([`SwapMeter`]) and the group's PSI `some` total. Experiment
//! code adds [`Mark`]s ("pressure event, level 2") through a [`Marker`] from any thread.
//! [`Sampler::stop`] joins the thread and returns the [`Series`].

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cgroup::CgroupReader;
use crate::error::{Error, Result};
use crate::vmstat::{CounterSource, SwapMeter};

/// One point in time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Milliseconds since the sampler started.
    pub t_ms: f64,
    /// RSS of the watched process, bytes (None when no pid or it has exited).
    pub rss_bytes: Option<u64>,
    /// Swapped-out memory of the watched process, bytes.
    pub proc_swap_bytes: Option<u64>,
    /// The cgroup's charged memory, bytes.
    pub cgroup_usage_bytes: Option<u64>,
    /// The cgroup's swap use, bytes.
    pub cgroup_swap_bytes: Option<u64>,
    /// Pages swapped in since the start (see [`Series::counter_source`]).
    pub pswpin: u64,
    /// Pages swapped out since the start.
    pub pswpout: u64,
    /// The group's PSI `some` total stall in µs since the start, where available.
    pub psi_some_us: Option<u64>,
}

/// An event noted by the experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// Milliseconds since the sampler started.
    pub t_ms: f64,
    /// What happened ("pressure", "phase 2", ...).
    pub label: String,
    /// A level or value that goes with it, if any.
    pub level: Option<f64>,
}

/// What a sampler recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Requested interval, ms.
    pub interval_ms: f64,
    /// Where `pswpin`/`pswpout` came from.
    pub counter_source: CounterSource,
    /// Samples in time order.
    pub samples: Vec<Sample>,
    /// Marks in the order they were made.
    pub marks: Vec<Mark>,
    /// Read errors met while sampling (first few), so gaps are explained.
    pub errors: Vec<String>,
}

impl Series {
    /// Final swap traffic (the last sample's counters), or zeros.
    pub fn swap_totals(&self) -> (u64, u64) {
        self.samples
            .last()
            .map(|s| (s.pswpin, s.pswpout))
            .unwrap_or((0, 0))
    }

    /// Largest RSS seen, bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        self.samples.iter().filter_map(|s| s.rss_bytes).max()
    }

    /// Largest cgroup usage seen, bytes.
    pub fn peak_cgroup_usage(&self) -> Option<u64> {
        self.samples
            .iter()
            .filter_map(|s| s.cgroup_usage_bytes)
            .max()
    }
}

/// Adds marks to a running sampler; clonable and `Send`.
#[derive(Debug, Clone)]
pub struct Marker {
    start: Instant,
    marks: Arc<Mutex<Vec<Mark>>>,
}

impl Marker {
    /// Notes `label` (with an optional `level`) at the current time.
    pub fn mark(&self, label: impl Into<String>, level: Option<f64>) {
        let t_ms = self.start.elapsed().as_secs_f64() * 1e3;
        self.marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Mark {
                t_ms,
                label: label.into(),
                level,
            });
    }
}

/// What to sample.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Time between samples.
    pub interval: Duration,
    /// Process whose RSS to record (can also be set later with [`Sampler::set_pid`]).
    pub pid: Option<i32>,
    /// Group whose usage, swap and PSI to record.
    pub cgroup: Option<CgroupReader>,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            interval: Duration::from_millis(100),
            pid: None,
            cgroup: None,
        }
    }
}

/// A running sampler thread. Dropping it stops the thread and discards the series.
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    pid: Arc<AtomicI32>,
    marker: Marker,
    handle: Option<JoinHandle<(Vec<Sample>, Vec<String>)>>,
    interval: Duration,
    source: CounterSource,
}

impl Sampler {
    /// Starts sampling now (the first sample is taken at t = 0).
    pub fn start(cfg: SamplerConfig) -> Result<Sampler> {
        if cfg.interval.is_zero() {
            return Err(Error::Other("sampler interval must be > 0".into()));
        }
        let meter = SwapMeter::start(cfg.cgroup.clone())?;
        let source = meter.source();
        let start = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let pid = Arc::new(AtomicI32::new(cfg.pid.unwrap_or(0)));
        let marker = Marker {
            start,
            marks: Arc::new(Mutex::new(Vec::new())),
        };
        let (stop2, pid2, interval, cgroup) = (stop.clone(), pid.clone(), cfg.interval, cfg.cgroup);
        let psi0 = cgroup
            .as_ref()
            .and_then(|c| c.psi().ok().flatten())
            .map(|p| p.some.total_us);
        let handle = std::thread::Builder::new()
            .name("ebbtide-lab-sampler".into())
            .spawn(move || {
                let mut samples = Vec::new();
                let mut errors = Vec::new();
                let mut note = |e: String| {
                    if errors.len() < 20 && !errors.contains(&e) {
                        errors.push(e);
                    }
                };
                let mut next = start;
                loop {
                    let t_ms = start.elapsed().as_secs_f64() * 1e3;
                    let p = pid2.load(Ordering::Relaxed);
                    let (rss, pswap) = if p > 0 {
                        proc_status_mem(p)
                    } else {
                        (None, None)
                    };
                    let (mut usage, mut cswap, mut psi) = (None, None, None);
                    if let Some(c) = &cgroup {
                        match c.usage() {
                            Ok(u) => usage = Some(u),
                            Err(e) => note(e.to_string()),
                        }
                        match c.swap_usage() {
                            Ok(s) => cswap = s,
                            Err(e) => note(e.to_string()),
                        }
                        if let (Ok(Some(now)), Some(p0)) = (c.psi(), psi0) {
                            psi = Some(now.some.total_us.saturating_sub(p0));
                        }
                    }
                    let (pswpin, pswpout) = match meter.delta() {
                        Ok(d) => (d.pswpin, d.pswpout),
                        Err(e) => {
                            note(e.to_string());
                            samples
                                .last()
                                .map(|s: &Sample| (s.pswpin, s.pswpout))
                                .unwrap_or((0, 0))
                        }
                    };
                    samples.push(Sample {
                        t_ms,
                        rss_bytes: rss,
                        proc_swap_bytes: pswap,
                        cgroup_usage_bytes: usage,
                        cgroup_swap_bytes: cswap,
                        pswpin,
                        pswpout,
                        psi_some_us: psi,
                    });
                    if stop2.load(Ordering::Relaxed) {
                        break;
                    }
                    next += interval;
                    let now = Instant::now();
                    if next > now {
                        // Sleep in short steps so stop() returns quickly.
                        while Instant::now() < next && !stop2.load(Ordering::Relaxed) {
                            std::thread::sleep(
                                (next - Instant::now()).min(Duration::from_millis(20)),
                            );
                        }
                    } else {
                        next = now; // fell behind: do not try to catch up in a burst
                    }
                }
                (samples, errors)
            })
            .map_err(|e| Error::Other(format!("cannot start the sampler thread: {e}")))?;
        Ok(Sampler {
            stop,
            pid,
            marker,
            handle: Some(handle),
            interval: cfg.interval,
            source,
        })
    }

    /// Changes the process whose RSS is recorded (0 or negative: none).
    pub fn set_pid(&self, pid: i32) {
        self.pid.store(pid, Ordering::Relaxed);
    }

    /// A handle for adding marks.
    pub fn marker(&self) -> Marker {
        self.marker.clone()
    }

    /// Adds a mark now.
    pub fn mark(&self, label: impl Into<String>, level: Option<f64>) {
        self.marker.mark(label, level);
    }

    /// Stops the thread (after one last sample) and returns what it recorded.
    pub fn stop(mut self) -> Result<Series> {
        self.stop.store(true, Ordering::Relaxed);
        let handle = self.handle.take().expect("sampler joined twice");
        let (samples, errors) = handle
            .join()
            .map_err(|_| Error::Other("the sampler thread panicked".into()))?;
        let marks = self
            .marker
            .marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Ok(Series {
            interval_ms: self.interval.as_secs_f64() * 1e3,
            counter_source: self.source,
            samples,
            marks,
            errors,
        })
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// `VmRSS` and `VmSwap` of `/proc/<pid>/status`, bytes.
pub fn proc_status_mem(pid: i32) -> (Option<u64>, Option<u64>) {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(t) => parse_status_mem(&t),
        Err(_) => (None, None),
    }
}

/// Parses `VmRSS` and `VmSwap` (kB) out of a `/proc/<pid>/status` text, in bytes.
pub fn parse_status_mem(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmSwap:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status() {
        let t = "Name:\tx\nVmPeak:\t  9000 kB\nVmRSS:\t    2048 kB\nVmSwap:\t      16 kB\n";
        assert_eq!(parse_status_mem(t), (Some(2048 * 1024), Some(16 * 1024)));
        assert_eq!(parse_status_mem("Name: kthread\n"), (None, None));
    }

    #[test]
    fn samples_own_rss_and_marks() {
        let s = Sampler::start(SamplerConfig {
            interval: Duration::from_millis(10),
            pid: Some(std::process::id() as i32),
            cgroup: None,
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(60));
        s.mark("event", Some(2.0));
        std::thread::sleep(Duration::from_millis(30));
        let series = s.stop().unwrap();
        assert!(
            series.samples.len() >= 4,
            "{} samples",
            series.samples.len()
        );
        assert!(series.samples.iter().all(|x| x.rss_bytes.unwrap() > 0));
        assert!(series.samples.windows(2).all(|w| w[0].t_ms <= w[1].t_ms));
        assert_eq!(series.marks.len(), 1);
        assert!(series.marks[0].t_ms >= 50.0);
        assert_eq!(series.counter_source, CounterSource::SystemVmstat);
    }
}
