//! What this process may do: check before an experiment, and say what is missing.
//!
//! [`check`] probes, without side effects that outlive it:
//! * effective uid and `CAP_SYS_ADMIN` (bit 21 of `CapEff` in `/proc/self/status`), needed
//!   by `swapon(2)`/`swapoff(2)`;
//! * the memory cgroup: detect the hierarchy, then create and remove a probe directory
//!   where lab cgroups go;
//! * `mkswap` on the path and a writable swap directory;
//! * PSI (`/proc/pressure/memory`).
//!
//! [`Capabilities::report`] turns that into a message that names what is needed and
//! which parts of an experiment can still run.

use std::path::{Path, PathBuf};

use crate::cgroup::{CgroupVersion, MemoryHierarchy, CGROUP_PREFIX};

/// The result of [`check`].
#[derive(Debug, Clone)]
pub struct Capabilities {
    /// Effective user id.
    pub euid: u32,
    /// `CAP_SYS_ADMIN` is in the effective set.
    pub cap_sys_admin: bool,
    /// Where lab cgroups can be made (version, directory), or why not.
    pub memory_cgroup: Result<(CgroupVersion, PathBuf), String>,
    /// Path of `mkswap` if swap files can be made and enabled, or why not.
    pub swap: Result<PathBuf, String>,
    /// `/proc/pressure/memory` is readable.
    pub psi: bool,
}

/// Probes the process's privileges and the machine's features.
pub fn check() -> Capabilities {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let cap_sys_admin = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| parse_cap_eff(&t))
        .map(|caps| caps & (1 << 21) != 0)
        .unwrap_or(false);
    let memory_cgroup = probe_cgroup();
    let swap = probe_swap(cap_sys_admin);
    let psi = crate::psi::Psi::system().is_ok();
    Capabilities {
        euid,
        cap_sys_admin,
        memory_cgroup,
        swap,
        psi,
    }
}

/// The `CapEff` mask of a `/proc/<pid>/status` text.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
}

fn probe_cgroup() -> Result<(CgroupVersion, PathBuf), String> {
    let h = MemoryHierarchy::detect().map_err(|e| e.to_string())?;
    let probe = h
        .base_dir
        .join(format!("{CGROUP_PREFIX}{}-probe", std::process::id()));
    match std::fs::create_dir(&probe) {
        Ok(()) => {
            let _ = std::fs::remove_dir(&probe);
            Ok((h.version, h.base_dir))
        }
        Err(e) => Err(format!(
            "cannot create a cgroup in {} ({e}): run as root, or (v2) delegate a subtree with \
             the memory controller to this user",
            h.base_dir.display()
        )),
    }
}

fn probe_swap(cap_sys_admin: bool) -> Result<PathBuf, String> {
    if !cap_sys_admin {
        return Err("swapon(2) needs CAP_SYS_ADMIN: run as root".into());
    }
    let mkswap = crate::swap::find_mkswap()
        .ok_or_else(|| "`mkswap` not found: install Debian's `util-linux` package".to_string())?;
    let dir = Path::new(crate::swap::SWAP_DIR);
    let c = std::ffi::CString::new(crate::swap::SWAP_DIR).expect("no NUL");
    // SAFETY: `c` is a valid NUL-terminated path; access(2) only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!("{} is not writable", dir.display()));
    }
    Ok(mkswap)
}

impl Capabilities {
    /// Lab cgroups can be created.
    pub fn can_cgroup(&self) -> bool {
        self.memory_cgroup.is_ok()
    }

    /// Lab swap files can be created and enabled.
    pub fn can_swap(&self) -> bool {
        self.swap.is_ok()
    }

    /// Everything an experiment needs is there.
    pub fn full(&self) -> bool {
        self.can_cgroup() && self.can_swap()
    }

    /// A multi-line report: one line per capability, and, when something is missing, what
    /// still runs.
    pub fn report(&self) -> String {
        let mut s = format!(
            "user: euid {}{}, CAP_SYS_ADMIN {}\n",
            self.euid,
            if self.euid == 0 { " (root)" } else { "" },
            if self.cap_sys_admin { "yes" } else { "no" }
        );
        match &self.memory_cgroup {
            Ok((v, d)) => {
                s += &format!("memory cgroup: yes ({v:?}, groups go in {})\n", d.display())
            }
            Err(e) => s += &format!("memory cgroup: NO — {e}\n"),
        }
        match &self.swap {
            Ok(m) => s += &format!("swap files: yes (mkswap at {})\n", m.display()),
            Err(e) => s += &format!("swap files: NO — {e}\n"),
        }
        s += &format!(
            "PSI: {}\n",
            if self.psi {
                "yes (/proc/pressure/memory)"
            } else {
                "no (kernel without CONFIG_PSI or booted with psi=0)"
            }
        );
        if !self.full() {
            s += "what still runs: statistics and ministat verdicts, tables, summary.json, \
                  plots, sampling of process RSS and /proc/vmstat";
            if !self.can_cgroup() {
                s += "; workloads run without a memory limit, so no cgroup usage, peak or OOM \
                      counts and little or no memory pressure";
            }
            if !self.can_swap() {
                s += "; no swap file of the lab's own: pswpin/pswpout come only from swap that is \
                      already active (see /proc/swaps), or stay 0";
            }
            s += "\n";
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_capeff() {
        let t = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        let c = parse_cap_eff(t).unwrap();
        assert!(c & (1 << 21) != 0);
        assert_eq!(parse_cap_eff("CapEff:\t0000000000000000\n"), Some(0));
        assert_eq!(parse_cap_eff("nothing"), None);
    }

    #[test]
    fn report_names_missing_parts() {
        let caps = Capabilities {
            euid: 1000,
            cap_sys_admin: false,
            memory_cgroup: Err("cannot create a cgroup in /sys/fs/cgroup/x".into()),
            swap: Err("swapon(2) needs CAP_SYS_ADMIN: run as root".into()),
            psi: true,
        };
        let r = caps.report();
        assert!(r.contains("memory cgroup: NO — cannot create a cgroup"));
        assert!(r.contains("swap files: NO — swapon(2) needs CAP_SYS_ADMIN"));
        assert!(r.contains("what still runs: statistics"));
        assert!(!caps.full());
    }

    #[test]
    fn real_check_is_consistent() {
        let c = check();
        if c.euid == 0 && c.cap_sys_admin {
            assert!(c.can_cgroup(), "{}", c.report());
        }
        assert!(c.report().contains("user: euid"));
    }
}
