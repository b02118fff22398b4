//! `summary.json`: one file per experiment run with the machine and one record per variant.
//!
//! ```json
//! {
//!   "experiment": "squeeze-swap",
//!   "machine": {"kernel": "6.18.0", "cpus": 2, "mem_total_bytes": 25769803776,
//!               "date": "2026-11-22T03:10:00Z", "cgroup_memory": "V1", ...},
//!   "variants": [{"variant": "before", "pswpin": 76672, "pswpout": 185799}, ...],
//!   "notes": ["counters: /proc/vmstat (system-wide)"]
//! }
//! ```
//!
//! A [`VariantRecord`] holds named figures (any JSON value), flattened next to its name so
//! experiments choose their own columns (`mb_per_s`, `squeeze_ms`, ...).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// The machine an experiment ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineInfo {
    /// `uname -r`.
    pub kernel: String,
    /// `uname -m`.
    pub arch: String,
    /// Host name.
    pub hostname: String,
    /// Online CPUs.
    pub cpus: usize,
    /// `MemTotal` of `/proc/meminfo`, bytes.
    pub mem_total_bytes: u64,
    /// UTC time of the run, ISO 8601.
    pub date: String,
    /// Which cgroup interface had the memory controller (`V1`/`V2`), if any.
    pub cgroup_memory: Option<String>,
}

impl MachineInfo {
    /// Collects the facts of this machine now.
    pub fn collect() -> MachineInfo {
        // SAFETY: `uts` is a plain C struct that uname(2) fills; zeroed is a valid value.
        let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: `uts` is a valid, writable utsname for the duration of the call.
        let ok = unsafe { libc::uname(&mut uts) } == 0;
        let field = |f: &[libc::c_char]| -> String {
            let bytes: Vec<u8> = f
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let (kernel, arch, hostname) = if ok {
            (
                field(&uts.release),
                field(&uts.machine),
                field(&uts.nodename),
            )
        } else {
            Default::default()
        };
        let mem_total_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
            })
            .map(|kb| kb * 1024)
            .unwrap_or(0);
        MachineInfo {
            kernel,
            arch,
            hostname,
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            mem_total_bytes,
            date: utc_now_iso8601(),
            cgroup_memory: crate::cgroup::MemoryHierarchy::detect()
                .ok()
                .map(|h| format!("{:?}", h.version)),
        }
    }
}

/// One variant's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantRecord {
    /// Name of the variant ("before", "after", "10ms", "jemalloc", ...).
    pub variant: String,
    /// Named figures, flattened next to `variant` in the JSON.
    #[serde(flatten)]
    pub figures: BTreeMap<String, Value>,
}

impl VariantRecord {
    /// A record with no figures yet.
    pub fn new(variant: impl Into<String>) -> VariantRecord {
        VariantRecord {
            variant: variant.into(),
            figures: BTreeMap::new(),
        }
    }

    /// Adds or replaces a figure (numbers, strings, arrays, ...). The key `variant` is
    /// reserved.
    pub fn set(&mut self, name: &str, value: impl Serialize) -> &mut VariantRecord {
        assert_ne!(
            name, "variant",
            "`variant` is the record's name, not a figure"
        );
        let v = serde_json::to_value(value).unwrap_or(Value::Null);
        self.figures.insert(name.to_string(), v);
        self
    }

    /// Builder form of [`VariantRecord::set`].
    pub fn with(mut self, name: &str, value: impl Serialize) -> VariantRecord {
        self.set(name, value);
        self
    }

    /// A figure as f64, if present and numeric.
    pub fn number(&self, name: &str) -> Option<f64> {
        self.figures.get(name).and_then(Value::as_f64)
    }
}

/// The whole `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Experiment name.
    pub experiment: String,
    /// Where it ran.
    pub machine: MachineInfo,
    /// One record per variant, in run order.
    pub variants: Vec<VariantRecord>,
    /// Free-form notes (counter source, skipped parts, verdicts).
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Summary {
    /// An empty summary for `experiment` on this machine.
    pub fn new(experiment: impl Into<String>) -> Summary {
        Summary {
            experiment: experiment.into(),
            machine: MachineInfo::collect(),
            variants: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Appends a variant record.
    pub fn push(&mut self, v: VariantRecord) -> &mut Summary {
        self.variants.push(v);
        self
    }

    /// Appends a note.
    pub fn note(&mut self, n: impl Into<String>) -> &mut Summary {
        self.notes.push(n.into());
        self
    }

    /// Writes `<dir>/summary.json` (creating `dir`), pretty-printed; returns the path.
    pub fn write_to(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        let path = dir.join("summary.json");
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::Other(format!("serialise summary: {e}")))?;
        std::fs::write(&path, text + "\n").map_err(|e| Error::io("write", &path, e))?;
        Ok(path)
    }

    /// Reads a `summary.json`.
    pub fn read(path: &Path) -> Result<Summary> {
        let text = crate::error::read_to_string(path)?;
        serde_json::from_str(&text).map_err(|e| Error::Parse {
            what: path.display().to_string(),
            detail: e.to_string(),
        })
    }
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now_iso8601() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    iso8601_from_unix(secs)
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC).
pub fn iso8601_from_unix(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(iso8601_from_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_from_unix(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601_from_unix(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn writes_and_reads_back() {
        let dir =
            std::env::temp_dir().join(format!("ebbtide-lab-unit-summary-{}", std::process::id()));
        let mut s = Summary::new("unit");
        s.push(
            VariantRecord::new("before")
                .with("pswpin", 76672u64)
                .with("pswpout", 185799u64),
        );
        s.push(
            VariantRecord::new("after")
                .with("mb_per_s", 419.4)
                .with("squeeze_ms", 10),
        );
        s.note("counters: test");
        let path = s.write_to(&dir).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["experiment"], "unit");
        assert_eq!(v["variants"][0]["variant"], "before");
        assert_eq!(v["variants"][0]["pswpout"], 185799);
        assert_eq!(v["variants"][1]["mb_per_s"], 419.4);
        assert!(v["machine"]["cpus"].as_u64().unwrap() >= 1);
        assert!(v["machine"]["kernel"].as_str().unwrap().len() > 1);
        let back = Summary::read(&path).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.variants[1].number("squeeze_ms"), Some(10.0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
