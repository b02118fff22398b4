//! Pure figures of one `lab malloc` run, computed from its time series: the program's
//! footprint, when the freed memory was back, swap traffic of a phase.
//!
//! **Footprint** is what the program holds of the machine: `VmRSS + VmSwap` of
//! `/proc/PID/status`. A page the kernel swapped out leaves RSS but not the footprint, so a
//! falling RSS under pressure is not mistaken for memory the allocator gave back.
//!
//! **Back** (the experiment's "time until the freed memory is back"): the first sample at or
//! after a reference time (the neighbour's first touch; in the idle runs the moment the data
//! was deleted) whose footprint is at most `before + 10 % × (peak − before)`, where `before`
//! is the footprint just before the burst and `peak` the largest footprint of the burst. The
//! time is that sample's time minus the reference time (0 when already there).

use ebbtide_lab::{Sample, Series};

/// Share of the burst that may still be held when the memory counts as back.
pub const BACK_SLACK: f64 = 0.10;

/// `VmRSS + VmSwap` of a sample, bytes; `None` when the program was not sampled (gone).
pub fn footprint(s: &Sample) -> Option<u64> {
    s.rss_bytes.map(|r| r + s.proc_swap_bytes.unwrap_or(0))
}

/// The footprint at or below which the burst counts as given back.
pub fn back_threshold(before: f64, peak: f64) -> f64 {
    before + BACK_SLACK * (peak - before).max(0.0)
}

/// When the freed memory was back, relative to a reference time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Back {
    /// Seconds after the reference time.
    After(f64),
    /// Not within the observed time; the program was still running at the end.
    Never,
    /// The program vanished (was killed) before its memory was back.
    Gone,
}

impl Back {
    /// Seconds, if it was back.
    pub fn seconds(self) -> Option<f64> {
        match self {
            Back::After(s) => Some(s),
            _ => None,
        }
    }

    /// `1.2 s`, `never`, `killed`.
    pub fn text(self, observed_s: f64) -> String {
        match self {
            Back::After(s) => format!("{s:.1} s"),
            Back::Never => format!("not in {observed_s:.0} s"),
            Back::Gone => "killed".into(),
        }
    }
}

/// Time from `from_ms` until the footprint is at most `threshold` (see the module doc).
/// A sample without a footprint after the first one with it means the program is gone.
pub fn back_after(samples: &[Sample], from_ms: f64, threshold: f64) -> Back {
    let mut seen = false;
    for s in samples.iter().filter(|s| s.t_ms >= from_ms) {
        match footprint(s) {
            Some(f) => {
                seen = true;
                if f as f64 <= threshold {
                    return Back::After(((s.t_ms - from_ms) / 1e3).max(0.0));
                }
            }
            None if seen => return Back::Gone,
            None => {}
        }
    }
    if seen {
        Back::Never
    } else {
        Back::Gone
    }
}

/// Share of the limit at which the group counts as full (the "limit reached" column).
pub const NEAR_LIMIT: f64 = 0.95;

/// Seconds from `from_ms` until the group's usage first reached `NEAR_LIMIT × limit`;
/// `None` if it never did (a program that gives its memory back early can keep the group
/// below it).
pub fn limit_reached_after(samples: &[Sample], from_ms: f64, limit: u64) -> Option<f64> {
    let thr = NEAR_LIMIT * limit as f64;
    samples
        .iter()
        .filter(|s| s.t_ms >= from_ms)
        .find(|s| s.cgroup_usage_bytes.is_some_and(|u| u as f64 >= thr))
        .map(|s| (s.t_ms - from_ms) / 1e3)
}

/// Swap pages (in, out) between the last sample at or before `from_ms` and the last sample.
pub fn swap_since(s: &Series, from_ms: f64) -> (u64, u64) {
    let base = s
        .samples
        .iter()
        .take_while(|x| x.t_ms <= from_ms)
        .last()
        .map(|x| (x.pswpin, x.pswpout))
        .unwrap_or((0, 0));
    let end = s.swap_totals();
    (end.0.saturating_sub(base.0), end.1.saturating_sub(base.1))
}

/// Bytes the group swapped out after `from_ms`: the sum of the rises of its swap gauge
/// (`swap` of v1 `memory.stat`, `memory.swap.current` on v2) from one sample to the next,
/// starting at the last sample at or before `from_ms`. A lower bound (a page swapped out and
/// freed between two samples is missed), but the group's own: the system-wide `pswpout`
/// also counts every other group that swaps into the same swap file.
pub fn group_swapped_out_since(samples: &[Sample], from_ms: f64) -> u64 {
    let start = samples.iter().rposition(|s| s.t_ms <= from_ms).unwrap_or(0);
    let mut prev: Option<u64> = None;
    let mut total = 0u64;
    for s in &samples[start.min(samples.len())..] {
        if let Some(now) = s.cgroup_swap_bytes {
            if let Some(p) = prev {
                total += now.saturating_sub(p);
            }
            prev = Some(now);
        }
    }
    total
}

/// Largest footprint among samples in `from_ms..=to_ms`.
pub fn peak_footprint(samples: &[Sample], from_ms: f64, to_ms: f64) -> Option<u64> {
    samples
        .iter()
        .filter(|s| s.t_ms >= from_ms && s.t_ms <= to_ms)
        .filter_map(footprint)
        .max()
}

/// The last footprint sampled (the program's state at the end), if it was still there.
pub fn last_footprint(samples: &[Sample]) -> Option<u64> {
    samples.last().and_then(footprint)
}

/// Largest swapped-out size of the program (`VmSwap`) in `from_ms..`.
pub fn peak_proc_swap(samples: &[Sample], from_ms: f64) -> u64 {
    samples
        .iter()
        .filter(|s| s.t_ms >= from_ms)
        .filter_map(|s| s.proc_swap_bytes)
        .max()
        .unwrap_or(0)
}

/// Share of the burst given back by the end: `(peak − end) / (peak − before)`, percent,
/// clamped to 0..=100.
pub fn returned_pct(before: f64, peak: f64, end: f64) -> f64 {
    if peak <= before {
        return 0.0;
    }
    (100.0 * (peak - end) / (peak - before)).clamp(0.0, 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebbtide_lab::CounterSource;

    fn s(t_ms: f64, rss: Option<u64>, swap: Option<u64>, pin: u64, pout: u64) -> Sample {
        Sample {
            t_ms,
            rss_bytes: rss,
            proc_swap_bytes: swap,
            cgroup_usage_bytes: None,
            cgroup_swap_bytes: None,
            pswpin: pin,
            pswpout: pout,
            psi_some_us: None,
        }
    }

    fn series(samples: Vec<Sample>) -> Series {
        Series {
            interval_ms: 100.0,
            counter_source: CounterSource::SystemVmstat,
            samples,
            marks: Vec::new(),
            errors: Vec::new(),
        }
    }

    #[test]
    fn footprint_counts_swap() {
        assert_eq!(footprint(&s(0.0, Some(10), Some(5), 0, 0)), Some(15));
        assert_eq!(footprint(&s(0.0, Some(10), None, 0, 0)), Some(10));
        assert_eq!(footprint(&s(0.0, None, Some(5), 0, 0)), None);
    }

    #[test]
    fn threshold_is_ten_percent_of_the_burst() {
        assert_eq!(back_threshold(100.0, 1100.0), 200.0);
        assert_eq!(back_threshold(100.0, 50.0), 100.0);
    }

    #[test]
    fn back_after_finds_the_first_sample_below() {
        let v = vec![
            s(0.0, Some(1000), None, 0, 0),
            s(1000.0, Some(1000), None, 0, 0),
            s(1100.0, Some(900), None, 0, 0),
            s(1600.0, Some(150), None, 0, 0),
            s(1700.0, Some(100), None, 0, 0),
        ];
        assert_eq!(back_after(&v, 1000.0, 200.0), Back::After(0.6));
        // Already there at the reference time: 0.
        assert_eq!(back_after(&v, 1650.0, 200.0), Back::After(0.05));
        assert_eq!(back_after(&v, 1700.0, 200.0), Back::After(0.0));
        assert_eq!(back_after(&v, 0.0, 50.0), Back::Never);
    }

    #[test]
    fn swapped_out_pages_are_not_back() {
        // RSS falls because the kernel swapped the cache out; the footprint does not.
        let v = vec![
            s(0.0, Some(1000), Some(0), 0, 0),
            s(100.0, Some(300), Some(700), 0, 175),
            s(200.0, Some(100), Some(900), 0, 225),
        ];
        assert_eq!(back_after(&v, 0.0, 200.0), Back::Never);
    }

    #[test]
    fn a_vanished_program_is_gone() {
        let v = vec![
            s(0.0, Some(1000), None, 0, 0),
            s(100.0, None, None, 0, 0),
            s(200.0, Some(10), None, 0, 0),
        ];
        assert_eq!(back_after(&v, 0.0, 200.0), Back::Gone);
        assert_eq!(back_after(&[], 0.0, 200.0), Back::Gone);
        assert_eq!(Back::Gone.text(10.0), "killed");
        assert_eq!(Back::Never.text(10.0), "not in 10 s");
        assert_eq!(Back::After(1.25).text(10.0), "1.2 s");
    }

    #[test]
    fn limit_reached_is_the_first_full_sample() {
        let mut v = vec![
            s(0.0, Some(1), None, 0, 0),
            s(100.0, Some(1), None, 0, 0),
            s(200.0, Some(1), None, 0, 0),
        ];
        v[0].cgroup_usage_bytes = Some(99);
        v[1].cgroup_usage_bytes = Some(50);
        v[2].cgroup_usage_bytes = Some(96);
        assert_eq!(limit_reached_after(&v, 50.0, 100), Some(0.15));
        assert_eq!(limit_reached_after(&v, 0.0, 100), Some(0.0));
        assert_eq!(limit_reached_after(&v, 50.0, 200), None);
    }

    #[test]
    fn swap_since_takes_the_phase_delta() {
        let v = series(vec![
            s(0.0, Some(1), None, 5, 10),
            s(100.0, Some(1), None, 7, 20),
            s(200.0, Some(1), None, 9, 50),
            s(300.0, Some(1), None, 12, 80),
        ]);
        assert_eq!(swap_since(&v, 150.0), (5, 60));
        assert_eq!(swap_since(&v, -1.0), (12, 80));
        assert_eq!(swap_since(&v, 1000.0), (0, 0));
    }

    #[test]
    fn group_swap_out_sums_the_rises() {
        let mut v: Vec<Sample> = (0..6)
            .map(|i| s(i as f64 * 100.0, Some(1), None, 0, 0))
            .collect();
        for (x, g) in v.iter_mut().zip([5, 5, 20, 10, 30, 30]) {
            x.cgroup_swap_bytes = Some(g);
        }
        // From t = 150: samples 100 (5), 200 (20), 300 (10), 400 (30): rises 15 + 20.
        assert_eq!(group_swapped_out_since(&v, 150.0), 35);
        assert_eq!(group_swapped_out_since(&v, 0.0), 35);
        assert_eq!(group_swapped_out_since(&v, 350.0), 20);
        v.iter_mut().for_each(|x| x.cgroup_swap_bytes = None);
        assert_eq!(group_swapped_out_since(&v, 0.0), 0);
        assert_eq!(group_swapped_out_since(&[], 0.0), 0);
    }

    #[test]
    fn peaks_and_returned_share() {
        let v = vec![
            s(0.0, Some(10), None, 0, 0),
            s(100.0, Some(50), Some(20), 0, 0),
            s(200.0, Some(30), Some(60), 0, 0),
        ];
        assert_eq!(peak_footprint(&v, 0.0, 150.0), Some(70));
        assert_eq!(peak_footprint(&v, 0.0, 300.0), Some(90));
        assert_eq!(peak_proc_swap(&v, 150.0), 60);
        assert_eq!(last_footprint(&v), Some(90));
        assert_eq!(returned_pct(10.0, 110.0, 20.0), 90.0);
        assert_eq!(returned_pct(10.0, 110.0, 200.0), 0.0);
        assert_eq!(returned_pct(10.0, 5.0, 1.0), 0.0);
    }
}
