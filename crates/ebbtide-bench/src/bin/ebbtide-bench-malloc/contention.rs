//! Where an ebbtide run's time went (issue 43, item 3): the malloc's lock-wait and remote-free
//! counters (`docs/design/contention.md`) at the end of each ebbtide run of a sweep.
//!
//! How they are read: the run preloads `stats_at_exit.so` (`crates/ebbtide-bench/c/`) after
//! `libebbtide_malloc.so` with the control socket on; as the program exits, that asks its own
//! socket for `stats json` and writes it to a file ([`SHIM`], [`STATS_ENV`]). Here: the JSON's
//! counters summed over the zones, and their medians over the rounds (the report prints them).

use serde_json::Value;
use std::path::Path;

/// The preloaded reader's file name (compiled beside mallocbench and launch).
pub const SHIM: &str = "stats_at_exit.so";
/// The variable naming the file the reader writes (not `EBBTIDE_`: the malloc takes an unknown
/// `EBBTIDE_` name for a typo and ignores its whole environment).
pub const STATS_ENV: &str = "MALLOCBENCH_STATS";

/// The lock classes, in the order of the report: per zone (summed over the zones), then per
/// process. Each is `lock_waits_NAME` / `lock_wait_ns_NAME` in the stats JSON.
pub const CLASSES: [(&str, bool); 6] = [
    ("depot", true),
    ("keg", true),
    ("stash", true),
    ("arena", false),
    ("registry", false),
    ("page_heap", false),
];

/// One run's counters, from the process's start to its exit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    /// Waits per class of [`CLASSES`].
    pub waits: [u64; 6],
    /// Nanoseconds blocked per class of [`CLASSES`].
    pub wait_ns: [u64; 6],
    pub remote_frees: u64,
    /// The run's wall time (the launcher's start to its exit), ns.
    pub wall_ns: u64,
    /// The program's threads doing the work (the row's count; 1 for a single-thread case).
    pub threads: u64,
}

impl Counters {
    pub fn total_wait_ns(&self) -> u64 {
        self.wait_ns.iter().sum()
    }

    /// Time blocked over the threads' time (threads × wall time): the share of the run its
    /// threads spent waiting for a lock of ebbtide's.
    pub fn wait_share(&self) -> f64 {
        self.total_wait_ns() as f64 / (self.wall_ns.max(1) as f64 * self.threads.max(1) as f64)
    }

    /// `key=value` fields for the `--log` line.
    pub fn log_fields(&self) -> String {
        let mut s = String::new();
        for (i, (c, _)) in CLASSES.iter().enumerate() {
            s += &format!(
                " waits_{c}={} wait_ns_{c}={}",
                self.waits[i], self.wait_ns[i]
            );
        }
        s + &format!(
            " remote_frees={} wall_ns={} threads={}",
            self.remote_frees, self.wall_ns, self.threads
        )
    }
}

/// The counters of a `stats json` snapshot: the per-zone ones summed over `zones`, the
/// process-wide ones from `global`. A field missing is an error (a library from before the
/// counters, or another format).
pub fn from_json(text: &str, wall_ns: u64, threads: u64) -> Result<Counters, String> {
    if let Some(e) = text.strip_prefix("error: ") {
        return Err(e.trim().to_string());
    }
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("the stats are not JSON ({e})"))?;
    let zones = v
        .get("zones")
        .and_then(Value::as_array)
        .ok_or("the stats have no zones array")?;
    let global = v.get("global").ok_or("the stats have no global object")?;
    let num = |o: &Value, k: &str| {
        o.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("the stats have no {k} (a library without the counters?)"))
    };
    let sum =
        |k: &str| -> Result<u64, String> { zones.iter().try_fold(0u64, |a, z| Ok(a + num(z, k)?)) };
    let mut c = Counters {
        wall_ns,
        threads,
        remote_frees: sum("remote_frees")?,
        ..Counters::default()
    };
    for (i, (name, per_zone)) in CLASSES.iter().enumerate() {
        let (w, ns) = (format!("lock_waits_{name}"), format!("lock_wait_ns_{name}"));
        [c.waits[i], c.wait_ns[i]] = if *per_zone {
            [sum(&w)?, sum(&ns)?]
        } else {
            [num(global, &w)?, num(global, &ns)?]
        };
    }
    Ok(c)
}

/// The reader's file after a run, removed once read; `Err` says why there are no counters.
pub fn read(path: &Path, wall_ns: u64, threads: u64) -> Result<Counters, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("no stats from the run ({}: {e})", path.display()))?;
    let _ = std::fs::remove_file(path);
    from_json(&text, wall_ns, threads)
}

fn median_u64(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    match v.len() {
        0 => 0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2,
    }
}

/// Each figure's median over the runs' counters (None: no run has any).
pub fn median(cs: &[&Counters]) -> Option<Counters> {
    if cs.is_empty() {
        return None;
    }
    let m = |f: &dyn Fn(&Counters) -> u64| median_u64(cs.iter().map(|c| f(c)).collect());
    let mut out = Counters {
        remote_frees: m(&|c| c.remote_frees),
        wall_ns: m(&|c| c.wall_ns),
        threads: m(&|c| c.threads),
        ..Counters::default()
    };
    for i in 0..CLASSES.len() {
        out.waits[i] = m(&|c| c.waits[i]);
        out.wait_ns[i] = m(&|c| c.wait_ns[i]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{"version":1,"global":{"lock_waits_arena":2,"lock_waits_registry":1,
        "lock_waits_page_heap":11,"lock_wait_ns_arena":1250000,"lock_wait_ns_registry":900,
        "lock_wait_ns_page_heap":2000000500},"sources":[],"zones":[
        {"name":"malloc-16","lock_waits_depot":7,"lock_waits_keg":3,"lock_waits_stash":0,
         "lock_wait_ns_depot":21500,"lock_wait_ns_keg":4000000,"lock_wait_ns_stash":0,
         "remote_frees":100,"remote_buckets":2},
        {"name":"malloc-32","lock_waits_depot":1,"lock_waits_keg":0,"lock_waits_stash":5,
         "lock_wait_ns_depot":500,"lock_wait_ns_keg":0,"lock_wait_ns_stash":77,
         "remote_frees":20,"remote_buckets":1}],"pools":[]}"#;

    #[test]
    fn zones_summed_global_taken_and_the_share() {
        let c = from_json(JSON, 1_000_000_000, 4).unwrap();
        assert_eq!(c.waits, [8, 3, 5, 2, 1, 11]);
        assert_eq!(
            c.wait_ns,
            [22_000, 4_000_000, 77, 1_250_000, 900, 2_000_000_500]
        );
        assert_eq!(c.remote_frees, 120);
        let total = 22_000 + 4_000_000 + 77 + 1_250_000 + 900 + 2_000_000_500u64;
        assert_eq!(c.total_wait_ns(), total);
        assert!((c.wait_share() - total as f64 / 4e9).abs() < 1e-12);
        assert!(c.log_fields().contains(" waits_page_heap=11 wait_ns_page_heap=2000000500 remote_frees=120 wall_ns=1000000000 threads=4"));
    }

    #[test]
    fn what_is_not_counters_is_an_error() {
        let old = JSON.replace("\"lock_waits_keg\":0,", "");
        assert!(from_json(&old, 1, 1)
            .unwrap_err()
            .contains("no lock_waits_keg"));
        assert!(from_json("{}", 1, 1).unwrap_err().contains("zones"));
        assert!(from_json("nope", 1, 1).unwrap_err().contains("not JSON"));
        assert_eq!(
            from_json("error: cannot connect to /tmp/x.sock: No such file\n", 1, 1).unwrap_err(),
            "cannot connect to /tmp/x.sock: No such file"
        );
    }

    #[test]
    fn medians_over_the_runs_with_counters() {
        let c = |w: u64| Counters {
            waits: [w; 6],
            wait_ns: [w * 10; 6],
            remote_frees: w,
            wall_ns: 100,
            threads: 2,
        };
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[&c(1), &c(9), &c(4)]), Some(c(4)));
        assert_eq!(median(&[&c(1), &c(9)]), Some(c(5)));
    }
}
