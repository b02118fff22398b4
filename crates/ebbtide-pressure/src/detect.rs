//! Detection: build every source that can work here and say why the others cannot.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::budget::{BudgetConfig, BudgetSource, HeldBytes};
use super::cgroup::{self, CgroupPaths};
use super::cgroup_v1_event::{V1LevelConfig, V1LevelSource};
use super::headroom::{HeadroomConfig, HeadroomSource, MemoryFiles};
use super::memory_events::MemoryEventsSource;
use super::psi::{self, PsiConfig, PsiSource};
use super::source::{Source, SourceKind, SourceStatus};
use super::systemd::{SystemdConfig, SystemdSource};

/// Configuration of detection (all sources). `Default` gives the documented defaults and no
/// budget.
#[derive(Clone, Default)]
pub struct DetectConfig {
    /// systemd protocol.
    pub systemd: SystemdConfig,
    /// PSI triggers.
    pub psi: PsiConfig,
    /// cgroup v1 `memory.pressure_level`.
    pub v1_level: V1LevelConfig,
    /// Headroom against the cgroup limit.
    pub headroom: HeadroomConfig,
    /// Use this cgroup for headroom instead of the own one.
    pub headroom_cgroup: Option<MemoryFiles>,
    /// Bytes the headroom source subtracts from the usage it reads (the library's own lazily
    /// freed pages; see [`HeadroomSource::excluding`]).
    pub headroom_exclude: Option<HeldBytes>,
    /// Watch cgroup v2 `memory.events`. Default true (see [`DetectConfig::default`]).
    pub memory_events: MemoryEventsConfig,
    /// The library's own budget: thresholds and the function giving the bytes held.
    pub budget: Option<(BudgetConfig, HeldBytes)>,
}

/// Configuration of the `memory.events` source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryEventsConfig {
    /// Use it at all. Default true.
    pub enabled: bool,
    /// Use this cgroup v2 directory instead of the own one.
    pub cgroup: Option<PathBuf>,
}

impl Default for MemoryEventsConfig {
    fn default() -> Self {
        MemoryEventsConfig {
            enabled: true,
            cgroup: None,
        }
    }
}

/// The result of [`detect`]: the working sources and one status line per source or per
/// inactive kind.
pub struct Detected {
    /// Sources to hand to the [`Watcher`](super::Watcher).
    pub sources: Vec<Box<dyn Source>>,
    /// Every known kind, active (with what it watches) or inactive (with the reason).
    pub status: Vec<SourceStatus>,
}

impl std::fmt::Debug for Detected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detected")
            .field("status", &self.status)
            .finish()
    }
}

impl Detected {
    fn push(&mut self, s: Box<dyn Source>) {
        self.status
            .push(SourceStatus::active(s.kind(), s.describe()));
        self.sources.push(s);
    }
    fn off(&mut self, kind: SourceKind, reason: impl Into<String>) {
        self.status.push(SourceStatus::inactive(kind, reason));
    }
}

/// Detect with the process environment and the own cgroups.
pub fn detect(cfg: &DetectConfig) -> Detected {
    let cg = cgroup::own().map_err(|e| e.to_string());
    detect_with(cfg, &|k| std::env::var_os(k), cg)
}

/// Detect with a given environment lookup and cgroup resolution (for tests).
pub fn detect_with(
    cfg: &DetectConfig,
    env: &dyn Fn(&str) -> Option<OsString>,
    cgroups: Result<CgroupPaths, String>,
) -> Detected {
    let now = Instant::now();
    let mut d = Detected {
        sources: Vec::new(),
        status: Vec::new(),
    };
    let cg_reason = |what: &str| match &cgroups {
        Err(e) => format!("cannot resolve own cgroup: {e}"),
        Ok(_) => format!("no {what}"),
    };

    // systemd protocol.
    if !cfg.systemd.enabled {
        d.off(SourceKind::Systemd, "disabled by configuration");
    } else {
        match SystemdSource::from_env_with(&cfg.systemd, env) {
            Ok(Ok(s)) => d.push(Box::new(s)),
            Ok(Err(reason)) => d.off(SourceKind::Systemd, reason),
            Err(e) => d.off(SourceKind::Systemd, e.to_string()),
        }
    }

    // PSI.
    let triggers = cfg.psi.triggers();
    if !cfg.psi.enabled {
        d.off(SourceKind::Psi, "disabled by configuration");
    } else if triggers.is_empty() {
        d.off(SourceKind::Psi, "no PSI triggers configured");
    } else {
        match &cfg.psi.path {
            Some(path) => {
                for (level, trig) in triggers {
                    match PsiSource::open(path, level, trig) {
                        Ok(s) => d.push(Box::new(s)),
                        Err(e) => {
                            d.off(SourceKind::Psi, format!("{level} trigger \"{trig}\": {e}"))
                        }
                    }
                }
            }
            None => {
                let cands = psi::memory_pressure_candidates(cgroups.as_ref().ok());
                for (level, trig) in triggers {
                    match PsiSource::open_first(&cands, level, trig) {
                        Ok(s) => d.push(Box::new(s)),
                        Err(e) => {
                            d.off(SourceKind::Psi, format!("{level} trigger \"{trig}\": {e}"))
                        }
                    }
                }
            }
        }
    }

    // cgroup v1 memory.pressure_level.
    let v1_own = cfg.v1_level.cgroup.is_none();
    let v1_dir = cfg
        .v1_level
        .cgroup
        .clone()
        .or_else(|| cgroups.as_ref().ok().and_then(|c| c.v1_memory.clone()));
    if !cfg.v1_level.enabled {
        d.off(SourceKind::CgroupV1Level, "disabled by configuration");
    } else if cfg.v1_level.levels.is_empty() {
        d.off(SourceKind::CgroupV1Level, "no levels configured");
    } else {
        match v1_dir {
            None => d.off(
                SourceKind::CgroupV1Level,
                cg_reason("cgroup v1 memory controller mounted for this process"),
            ),
            Some(dir) => {
                let coalesce = Duration::from_millis(cfg.v1_level.coalesce_ms);
                for &l in &cfg.v1_level.levels {
                    match V1LevelSource::open(&dir, l, cfg.v1_level.mode, coalesce) {
                        Ok(s) if v1_own => d.push(Box::new(s.following_own_cgroup())),
                        Ok(s) => d.push(Box::new(s)),
                        Err(e) => d.off(SourceKind::CgroupV1Level, format!("{}: {e}", l.name())),
                    }
                }
            }
        }
    }

    // Headroom.
    let headroom_own = cfg.headroom_cgroup.is_none();
    let files = cfg
        .headroom_cgroup
        .clone()
        .or_else(|| super::headroom::own_memory_files(cgroups.as_ref().ok()?));
    if !cfg.headroom.enabled {
        d.off(SourceKind::Headroom, "disabled by configuration");
    } else {
        match files {
            None => d.off(
                SourceKind::Headroom,
                cg_reason("memory controller for this process (neither v2 memory.current nor v1 memory.usage_in_bytes)"),
            ),
            Some(files) => match HeadroomSource::open(files, cfg.headroom, now).map(|s| {
                match &cfg.headroom_exclude {
                    Some(f) => s.excluding(f.clone()),
                    None => s,
                }
            }) {
                Ok(s) if headroom_own => d.push(Box::new(s.following_own_cgroup())),
                Ok(s) => d.push(Box::new(s)),
                Err(e) => d.off(SourceKind::Headroom, e.to_string()),
            },
        }
    }

    // memory.events.
    let ev_dir = cfg
        .memory_events
        .cgroup
        .clone()
        .or_else(|| cgroups.as_ref().ok().and_then(|c| c.v2.clone()));
    if !cfg.memory_events.enabled {
        d.off(SourceKind::MemoryEvents, "disabled by configuration");
    } else {
        match ev_dir {
            None => d.off(
                SourceKind::MemoryEvents,
                cg_reason("cgroup v2 mounted for this process"),
            ),
            Some(dir) if !dir.join("memory.events").exists() => d.off(
                SourceKind::MemoryEvents,
                format!(
                    "no memory.events in {} (memory controller not enabled on cgroup v2)",
                    dir.display()
                ),
            ),
            Some(dir) => match MemoryEventsSource::open(&dir) {
                Ok(s) => d.push(Box::new(s)),
                Err(e) => d.off(SourceKind::MemoryEvents, e.to_string()),
            },
        }
    }

    // Budget.
    match &cfg.budget {
        None => d.off(SourceKind::Budget, "no max_cached_bytes configured"),
        Some((bc, held)) => match BudgetSource::new(held.clone(), *bc, now) {
            Ok(s) => d.push(Box::new(s)),
            Err(e) => d.off(SourceKind::Budget, e.to_string()),
        },
    }

    d.status.push(SourceStatus::active(
        SourceKind::Explicit,
        "inject eventfd (Watcher::injector)",
    ));
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reported_with_reason() {
        let cfg = DetectConfig {
            psi: PsiConfig {
                enabled: false,
                ..Default::default()
            },
            ..Default::default()
        };
        let d = detect_with(&cfg, &|_| None, Err("test: no cgroup".into()));
        for k in SourceKind::ALL {
            assert!(
                d.status.iter().any(|s| s.kind == k),
                "{k} missing from {:?}",
                d.status
            );
        }
        let reason = |k| {
            d.status
                .iter()
                .find(|s| s.kind == k)
                .unwrap()
                .detail
                .clone()
        };
        assert_eq!(reason(SourceKind::Systemd), "MEMORY_PRESSURE_WATCH not set");
        assert_eq!(reason(SourceKind::Psi), "disabled by configuration");
        assert!(reason(SourceKind::CgroupV1Level).contains("test: no cgroup"));
        assert!(reason(SourceKind::Headroom).contains("test: no cgroup"));
        assert_eq!(reason(SourceKind::Budget), "no max_cached_bytes configured");
        assert!(d.sources.is_empty());
    }

    #[test]
    fn bad_write_variable_is_reported() {
        let env = |k: &str| match k {
            "MEMORY_PRESSURE_WATCH" => Some(OsString::from("/proc/pressure/memory")),
            "MEMORY_PRESSURE_WRITE" => Some(OsString::from("not base64!")),
            _ => None,
        };
        let cfg = DetectConfig {
            psi: PsiConfig {
                enabled: false,
                ..Default::default()
            },
            ..Default::default()
        };
        let d = detect_with(&cfg, &env, Ok(CgroupPaths::default()));
        let s = d
            .status
            .iter()
            .find(|s| s.kind == SourceKind::Systemd)
            .unwrap();
        assert!(
            !s.active && s.detail.contains("MEMORY_PRESSURE_WRITE"),
            "{s}"
        );
    }
}
