//! `/proc/vmstat` counters and swap-traffic deltas.
//!
//! The seed experiments count pages swapped in (`pswpin`) and out (`pswpout`). The kernel
//! keeps these system-wide in `/proc/vmstat`; a v2 cgroup's `memory.stat` has them per
//! group on recent kernels, v1's never does. [`SwapMeter`] takes the per-group counters
//! when it can and says in [`CounterSource`] which one it used, because the system-wide
//! counters also count other processes on a shared machine.

use std::collections::BTreeMap;

use crate::cgroup::CgroupReader;
use crate::error::{read_to_string, Result};

/// A snapshot of `/proc/vmstat`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmStat {
    counters: BTreeMap<String, u64>,
}

impl VmStat {
    /// Parses the text of `/proc/vmstat` ("name value" per line).
    pub fn parse(text: &str) -> VmStat {
        VmStat {
            counters: crate::cgroup::parse_flat_keyed(text),
        }
    }

    /// Reads `/proc/vmstat` now.
    pub fn read() -> Result<VmStat> {
        Ok(VmStat::parse(&read_to_string("/proc/vmstat")?))
    }

    /// A counter, if the kernel has it.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters.get(name).copied()
    }

    /// Pages swapped in since boot.
    pub fn pswpin(&self) -> u64 {
        self.get("pswpin").unwrap_or(0)
    }

    /// Pages swapped out since boot.
    pub fn pswpout(&self) -> u64 {
        self.get("pswpout").unwrap_or(0)
    }

    /// Major page faults since boot.
    pub fn pgmajfault(&self) -> u64 {
        self.get("pgmajfault").unwrap_or(0)
    }

    /// `self - earlier` for every counter present in both (saturating at 0, since a few
    /// vmstat entries are gauges that may fall).
    pub fn delta(&self, earlier: &VmStat) -> VmStat {
        VmStat {
            counters: self
                .counters
                .iter()
                .filter_map(|(k, v)| {
                    earlier
                        .counters
                        .get(k)
                        .map(|e| (k.clone(), v.saturating_sub(*e)))
                })
                .collect(),
        }
    }

    /// All counters.
    pub fn counters(&self) -> &BTreeMap<String, u64> {
        &self.counters
    }
}

/// Where swap counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterSource {
    /// `pswpin`/`pswpout` of the group's own `memory.stat` (v2): only the group's traffic.
    CgroupMemoryStat,
    /// `/proc/vmstat`: the whole machine's traffic (v1, or no group given).
    SystemVmstat,
}

impl CounterSource {
    /// The name recorded in summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            CounterSource::CgroupMemoryStat => "cgroup memory.stat",
            CounterSource::SystemVmstat => "/proc/vmstat (system-wide)",
        }
    }
}

/// Swap traffic in pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SwapTraffic {
    /// Pages swapped in.
    pub pswpin: u64,
    /// Pages swapped out.
    pub pswpout: u64,
}

/// Reads cumulative swap counters from the best source and gives deltas from a start.
#[derive(Debug, Clone)]
pub struct SwapMeter {
    cgroup: Option<CgroupReader>,
    source: CounterSource,
    start: SwapTraffic,
}

impl SwapMeter {
    /// Starts metering now: per group if `cgroup`'s `memory.stat` has `pswpin`/`pswpout`,
    /// else system-wide.
    pub fn start(cgroup: Option<CgroupReader>) -> Result<SwapMeter> {
        let (cgroup, source) = match cgroup {
            Some(c) if c.swap_counters()?.is_some() => (Some(c), CounterSource::CgroupMemoryStat),
            _ => (None, CounterSource::SystemVmstat),
        };
        let mut m = SwapMeter {
            cgroup,
            source,
            start: SwapTraffic::default(),
        };
        m.start = m.read_cumulative()?;
        Ok(m)
    }

    /// Which counters are used.
    pub fn source(&self) -> CounterSource {
        self.source
    }

    fn read_cumulative(&self) -> Result<SwapTraffic> {
        if let Some(c) = &self.cgroup {
            if let Some(s) = c.swap_counters()? {
                return Ok(SwapTraffic {
                    pswpin: s.pswpin,
                    pswpout: s.pswpout,
                });
            }
        }
        let v = VmStat::read()?;
        Ok(SwapTraffic {
            pswpin: v.pswpin(),
            pswpout: v.pswpout(),
        })
    }

    /// Pages swapped in/out since [`SwapMeter::start`]. If the group is gone (its counters
    /// can no longer be read), the error says so.
    pub fn delta(&self) -> Result<SwapTraffic> {
        let now = self.read_cumulative()?;
        Ok(SwapTraffic {
            pswpin: now.pswpin.saturating_sub(self.start.pswpin),
            pswpout: now.pswpout.saturating_sub(self.start.pswpout),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_diffs() {
        let a = VmStat::parse("nr_free_pages 100\npswpin 10\npswpout 20\npgmajfault 5\n");
        let b = VmStat::parse("nr_free_pages 50\npswpin 15\npswpout 220\npgmajfault 9\nnew 1\n");
        let d = b.delta(&a);
        assert_eq!(d.pswpin(), 5);
        assert_eq!(d.pswpout(), 200);
        assert_eq!(d.pgmajfault(), 4);
        assert_eq!(d.get("nr_free_pages"), Some(0));
        assert_eq!(d.get("new"), None);
        assert_eq!(a.get("missing"), None);
    }

    #[test]
    fn reads_real_vmstat() {
        let v = VmStat::read().unwrap();
        assert!(
            v.get("pswpout").is_some(),
            "this kernel has no pswpout in /proc/vmstat"
        );
        assert!(v.get("nr_free_pages").unwrap() > 0);
    }
}
