//! Memory-limited cgroups for experiment workloads, on cgroup v1 or v2.
//!
//! [`MemoryHierarchy::detect`] finds the hierarchy that has the **memory controller**:
//! a cgroup2 mount whose `cgroup.controllers` lists `memory` (pure v2 machines), else a
//! cgroup v1 mount with the `memory` option (hybrid machines such as this project's,
//! where `/sys/fs/cgroup/memory` is v1 and `/sys/fs/cgroup/unified` is a v2 tree with
//! PSI but no controllers).
//!
//! [`Cgroup::create`] makes `ebbtide-lab-<pid>-<seq>-<name>` below this process's own
//! cgroup (v1), or below the nearest ancestor that can delegate `memory` to children
//! (v2's "no internal processes" rule), writes the limits, and registers a cleanup
//! action that kills the remaining tasks, waits for them, and removes the directory.
//! On v1 with a v2 tree mounted beside it, a twin directory of the same name is made in
//! the v2 tree so the group's own `memory.pressure` (PSI) can be read.
//!
//! Limits on the two versions:
//!
//! | [`CgroupSpec`] field | v1 file                                      | v2 file           |
//! |----------------------|----------------------------------------------|-------------------|
//! | `memory_max`         | `memory.limit_in_bytes`                      | `memory.max`      |
//! | `memory_high`        | — (ignored, reported by [`Cgroup::notes`])   | `memory.high`     |
//! | `swap_max`           | `memory.memsw.limit_in_bytes` = max + swap   | `memory.swap.max` |
//! | `swappiness`         | `memory.swappiness`                          | — (ignored)       |

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::child::LabChild;
use crate::cleanup::{self, CleanupToken};
use crate::error::{read_to_string, read_u64, write_file, Error, Result};
use crate::psi::Psi;

/// Every cgroup the lab creates has a name starting with this.
pub const CGROUP_PREFIX: &str = "ebbtide-lab-";

/// Which cgroup interface holds the memory controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CgroupVersion {
    /// Legacy hierarchy: `memory.limit_in_bytes` and friends.
    V1,
    /// Unified hierarchy: `memory.max`, `memory.current`, ...
    V2,
}

/// One line of `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcCgroupLine {
    /// Hierarchy id (0 for the v2 tree).
    pub hierarchy: u32,
    /// Controllers bound to the hierarchy (empty for v2).
    pub controllers: Vec<String>,
    /// Path of the process's cgroup, relative to the hierarchy's root.
    pub path: String,
}

/// Parses `/proc/<pid>/cgroup`.
pub fn parse_proc_cgroup(text: &str) -> Result<Vec<ProcCgroupLine>> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Error::Parse {
                what: "/proc/self/cgroup".into(),
                detail: format!("line {line:?} is not id:controllers:path"),
            });
        };
        let hierarchy = id.parse().map_err(|_| Error::Parse {
            what: "/proc/self/cgroup".into(),
            detail: format!("bad hierarchy id in {line:?}"),
        })?;
        out.push(ProcCgroupLine {
            hierarchy,
            controllers: ctl
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            path: path.to_string(),
        });
    }
    Ok(out)
}

/// A cgroup file system mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// `cgroup` (v1) or `cgroup2`.
    pub fstype: String,
    /// Root of the mount inside the hierarchy (usually `/`; a sub path in some containers).
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Super options (for v1 these name the controllers, e.g. `rw,memory`).
    pub super_options: Vec<String>,
}

/// Parses the cgroup mounts out of `/proc/self/mountinfo`.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.len() < sep + 4 || sep < 6 {
            continue;
        }
        let fstype = fields[sep + 1];
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        out.push(CgroupMount {
            fstype: fstype.to_string(),
            root: unescape_mountinfo(fields[3]),
            mount_point: PathBuf::from(unescape_mountinfo(fields[4])),
            super_options: fields[sep + 3].split(',').map(str::to_string).collect(),
        });
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Ok(v) =
                u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("x"), 8)
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Maps a cgroup path (relative to the hierarchy root) to a directory under a mount.
pub fn cgroup_dir(mount: &CgroupMount, cgroup_path: &str) -> PathBuf {
    let root = mount.root.trim_end_matches('/');
    let rel = cgroup_path.strip_prefix(root).unwrap_or(cgroup_path);
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        mount.mount_point.clone()
    } else {
        mount.mount_point.join(rel)
    }
}

/// Where the memory controller lives on this machine, and where the lab makes its groups.
#[derive(Debug, Clone)]
pub struct MemoryHierarchy {
    /// The interface of the memory controller.
    pub version: CgroupVersion,
    /// Mount point of the hierarchy with the memory controller.
    pub mount_point: PathBuf,
    /// This process's own cgroup directory in that hierarchy.
    pub own_dir: PathBuf,
    /// The directory new lab cgroups are created in.
    pub base_dir: PathBuf,
    /// On v1: this process's directory in a v2 tree mounted beside it (for PSI), if any.
    pub psi_base_dir: Option<PathBuf>,
}

impl MemoryHierarchy {
    /// Finds the memory controller (v2 preferred when it has it, else v1) from
    /// `/proc/self/mountinfo` and `/proc/self/cgroup`.
    pub fn detect() -> Result<Self> {
        let mounts = parse_mountinfo(&read_to_string("/proc/self/mountinfo")?);
        let lines = parse_proc_cgroup(&read_to_string("/proc/self/cgroup")?)?;
        let v2_line = lines
            .iter()
            .find(|l| l.hierarchy == 0 && l.controllers.is_empty());
        let v2_mount = mounts.iter().find(|m| m.fstype == "cgroup2");

        if let (Some(m), Some(l)) = (v2_mount, v2_line) {
            let controllers =
                read_to_string(m.mount_point.join("cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "memory") {
                let own_dir = cgroup_dir(m, &l.path);
                let base_dir = v2_delegating_base(&m.mount_point, &own_dir)?;
                return Ok(MemoryHierarchy {
                    version: CgroupVersion::V2,
                    mount_point: m.mount_point.clone(),
                    own_dir,
                    base_dir,
                    psi_base_dir: None,
                });
            }
        }
        let v1_mount = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.super_options.iter().any(|o| o == "memory"));
        let v1_line = lines
            .iter()
            .find(|l| l.controllers.iter().any(|c| c == "memory"));
        if let (Some(m), Some(l)) = (v1_mount, v1_line) {
            let own_dir = cgroup_dir(m, &l.path);
            let psi_base_dir = match (v2_mount, v2_line) {
                (Some(m2), Some(l2)) => {
                    let d = cgroup_dir(m2, &l2.path);
                    d.join("memory.pressure").exists().then_some(d)
                }
                _ => None,
            };
            return Ok(MemoryHierarchy {
                version: CgroupVersion::V1,
                mount_point: m.mount_point.clone(),
                base_dir: own_dir.clone(),
                own_dir,
                psi_base_dir,
            });
        }
        Err(Error::Unsupported(
            "no cgroup hierarchy with the memory controller: neither a cgroup2 mount whose \
             cgroup.controllers lists `memory` nor a cgroup v1 mount with the `memory` option \
             (see /proc/self/mountinfo)"
                .into(),
        ))
    }
}

/// On v2 a cgroup can only give `memory` to its children if it has no processes of its own
/// (the root excepted). Walk up from the own cgroup to the first directory whose
/// `cgroup.subtree_control` has `memory` or can be given it.
fn v2_delegating_base(mount: &Path, own: &Path) -> Result<PathBuf> {
    let mut dir = own.to_path_buf();
    loop {
        let sc = dir.join("cgroup.subtree_control");
        let ctl = read_to_string(&sc).unwrap_or_default();
        if ctl.split_whitespace().any(|c| c == "memory") {
            return Ok(dir);
        }
        if write_file(&sc, "+memory").is_ok() {
            return Ok(dir);
        }
        if dir == mount {
            return Err(Error::Unsupported(format!(
                "no cgroup between {} and {} can delegate the memory controller \
                 (writing +memory to cgroup.subtree_control failed everywhere)",
                own.display(),
                mount.display()
            )));
        }
        match dir.parent() {
            Some(p) => dir = p.to_path_buf(),
            None => {
                return Err(Error::Unsupported(format!(
                    "{} is not under {}",
                    own.display(),
                    mount.display()
                )))
            }
        }
    }
}

/// Limits for a new cgroup. `None` leaves the kernel's default.
#[derive(Debug, Clone, Default)]
pub struct CgroupSpec {
    /// Short name; becomes part of the directory name (`ebbtide-lab-<pid>-<seq>-<name>`).
    pub name: String,
    /// Hard memory limit in bytes (v1 `memory.limit_in_bytes`, v2 `memory.max`).
    pub memory_max: Option<u64>,
    /// v2 only: `memory.high` in bytes (throttling and reclaim above it).
    pub memory_high: Option<u64>,
    /// Swap the group may use, in bytes (v2 `memory.swap.max`; v1 writes
    /// `memory.memsw.limit_in_bytes` = `memory_max` + this).
    pub swap_max: Option<u64>,
    /// v1 only: `memory.swappiness` (0–100; 200 on recent kernels).
    pub swappiness: Option<u32>,
}

impl CgroupSpec {
    /// A spec with only a name.
    pub fn new(name: impl Into<String>) -> Self {
        CgroupSpec {
            name: name.into(),
            ..Default::default()
        }
    }
    /// Sets the hard memory limit.
    pub fn memory_max(mut self, bytes: u64) -> Self {
        self.memory_max = Some(bytes);
        self
    }
    /// Sets the v2 `memory.high`.
    pub fn memory_high(mut self, bytes: u64) -> Self {
        self.memory_high = Some(bytes);
        self
    }
    /// Sets the swap allowance.
    pub fn swap_max(mut self, bytes: u64) -> Self {
        self.swap_max = Some(bytes);
        self
    }
    /// Sets the v1 swappiness.
    pub fn swappiness(mut self, v: u32) -> Self {
        self.swappiness = Some(v);
        self
    }
}

/// Read-only view of a lab cgroup's files; cheap to clone and `Send`, for samplers.
#[derive(Debug, Clone)]
pub struct CgroupReader {
    /// Interface version.
    pub version: CgroupVersion,
    /// The memory cgroup directory.
    pub dir: PathBuf,
    /// A v2 directory with this group's `memory.pressure` (same as `dir` on v2).
    pub psi_dir: Option<PathBuf>,
}

/// Swap counters of a cgroup's `memory.stat`, where the kernel has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupSwapCounters {
    /// Pages swapped in.
    pub pswpin: u64,
    /// Pages swapped out.
    pub pswpout: u64,
}

impl CgroupReader {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Memory charged to the group now, bytes (v1 `memory.usage_in_bytes`, v2 `memory.current`).
    pub fn usage(&self) -> Result<u64> {
        match self.version {
            CgroupVersion::V1 => read_u64(self.file("memory.usage_in_bytes")),
            CgroupVersion::V2 => read_u64(self.file("memory.current")),
        }
    }

    /// Peak usage, bytes (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`, absent before
    /// Linux 5.19).
    pub fn peak(&self) -> Result<Option<u64>> {
        match self.version {
            CgroupVersion::V1 => read_u64(self.file("memory.max_usage_in_bytes")).map(Some),
            CgroupVersion::V2 => {
                let f = self.file("memory.peak");
                if f.exists() {
                    read_u64(f).map(Some)
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// The hard limit in bytes (`u64::MAX` when unlimited on v2; v1's "unlimited" is
    /// 9223372036854771712).
    pub fn limit(&self) -> Result<u64> {
        match self.version {
            CgroupVersion::V1 => read_u64(self.file("memory.limit_in_bytes")),
            CgroupVersion::V2 => read_u64(self.file("memory.max")),
        }
    }

    /// Swap used by the group now, bytes (v1: `swap` of `memory.stat`; v2
    /// `memory.swap.current`). `None` when swap accounting is off.
    pub fn swap_usage(&self) -> Result<Option<u64>> {
        match self.version {
            CgroupVersion::V1 => Ok(self.memory_stat()?.get("swap").copied()),
            CgroupVersion::V2 => {
                let f = self.file("memory.swap.current");
                if f.exists() {
                    read_u64(f).map(Some)
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// The group's `memory.stat` as a map.
    pub fn memory_stat(&self) -> Result<BTreeMap<String, u64>> {
        let f = self.file("memory.stat");
        Ok(parse_flat_keyed(&read_to_string(&f)?))
    }

    /// `pswpin`/`pswpout` from the group's `memory.stat`. v2 kernels of recent years have
    /// them; v1 never does (its `memory.stat` has only the `swap` gauge), so this is
    /// `None` there and callers fall back to the system-wide `/proc/vmstat`.
    pub fn swap_counters(&self) -> Result<Option<CgroupSwapCounters>> {
        let stat = self.memory_stat()?;
        Ok(match (stat.get("pswpin"), stat.get("pswpout")) {
            (Some(&i), Some(&o)) => Some(CgroupSwapCounters {
                pswpin: i,
                pswpout: o,
            }),
            _ => None,
        })
    }

    /// OOM kills in the group (v1 `oom_kill` of `memory.oom_control`; v2 `oom_kill` of
    /// `memory.events`).
    pub fn oom_kills(&self) -> Result<u64> {
        let name = match self.version {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        };
        let f = self.file(name);
        let map = parse_flat_keyed(&read_to_string(&f)?);
        map.get("oom_kill").copied().ok_or_else(|| Error::Parse {
            what: f.display().to_string(),
            detail: "no oom_kill line (kernel older than 4.13?)".into(),
        })
    }

    /// v2 `memory.events` (`low`, `high`, `max`, `oom`, `oom_kill`, ...); on v1, `failcnt`
    /// and the `memory.oom_control` lines.
    pub fn events(&self) -> Result<BTreeMap<String, u64>> {
        match self.version {
            CgroupVersion::V2 => Ok(parse_flat_keyed(&read_to_string(
                self.file("memory.events"),
            )?)),
            CgroupVersion::V1 => {
                let mut m = parse_flat_keyed(&read_to_string(self.file("memory.oom_control"))?);
                m.insert("failcnt".into(), read_u64(self.file("memory.failcnt"))?);
                Ok(m)
            }
        }
    }

    /// The group's memory PSI, if a v2 directory for it exists with `memory.pressure`.
    pub fn psi(&self) -> Result<Option<Psi>> {
        match &self.psi_dir {
            Some(d) => {
                let f = d.join("memory.pressure");
                Psi::parse(&read_to_string(&f)?)
                    .map(Some)
                    .map_err(|detail| Error::Parse {
                        what: f.display().to_string(),
                        detail,
                    })
            }
            None => Ok(None),
        }
    }

    /// Pids of the processes in the group.
    pub fn procs(&self) -> Result<Vec<i32>> {
        procs_of(&self.dir)
    }
}

/// Parses "key value" lines into a map; lines whose value is not an integer are skipped.
pub fn parse_flat_keyed(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let k = it.next()?;
            let v = it.next()?.parse().ok()?;
            Some((k.to_string(), v))
        })
        .collect()
}

fn procs_of(dir: &Path) -> Result<Vec<i32>> {
    let f = dir.join("cgroup.procs");
    Ok(read_to_string(&f)?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect())
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A lab cgroup. Dropping it kills the tasks still in it, waits for them, and removes the
/// directory (and its v2 twin for PSI) — also when dropped by unwinding, and at most
/// once together with [`crate::cleanup::run_all`].
#[derive(Debug)]
pub struct Cgroup {
    reader: CgroupReader,
    notes: Vec<String>,
    token: Option<CleanupToken>,
}

impl Cgroup {
    /// Creates a cgroup on the detected hierarchy.
    pub fn create(spec: &CgroupSpec) -> Result<Cgroup> {
        let h = MemoryHierarchy::detect()?;
        Self::create_in(&h, spec)
    }

    /// Creates a cgroup on the given hierarchy.
    pub fn create_in(h: &MemoryHierarchy, spec: &CgroupSpec) -> Result<Cgroup> {
        let clean_name: String = spec
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let dirname = format!(
            "{CGROUP_PREFIX}{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            clean_name
        );
        let dir = h.base_dir.join(&dirname);
        // Made and registered as one step against a signal's cleanup (see `cleanup::creating`).
        let mut cg = cleanup::creating(|| Self::make_dirs(h, dir, &dirname))?;
        cg.apply(spec)?; // on error, `cg` drops and removes the directory
        Ok(cg)
    }

    /// Makes the group's directory (and on v1 its PSI twin) and registers their removal.
    fn make_dirs(h: &MemoryHierarchy, dir: PathBuf, dirname: &str) -> Result<Cgroup> {
        std::fs::create_dir(&dir).map_err(|e| Error::io("mkdir", &dir, e))?;
        let psi_dir = match h.version {
            CgroupVersion::V2 => Some(dir.clone()),
            CgroupVersion::V1 => h.psi_base_dir.as_ref().and_then(|b| {
                let d = b.join(dirname);
                match std::fs::create_dir(&d) {
                    Ok(()) => Some(d),
                    Err(e) => {
                        eprintln!("ebbtide-lab: no per-group PSI: mkdir {}: {e}", d.display());
                        None
                    }
                }
            }),
        };
        let reader = CgroupReader {
            version: h.version,
            dir: dir.clone(),
            psi_dir: psi_dir.clone(),
        };
        let dirs: Vec<PathBuf> = std::iter::once(dir.clone())
            .chain(psi_dir.filter(|p| *p != dir))
            .collect();
        let token = cleanup::register(format!("remove cgroup {}", dir.display()), move || {
            for d in &dirs {
                if let Err(e) = remove_cgroup_dir(d, Duration::from_secs(10)) {
                    eprintln!("ebbtide-lab: {e}");
                }
            }
        });
        Ok(Cgroup {
            reader,
            notes: Vec::new(),
            token: Some(token),
        })
    }

    fn apply(&mut self, spec: &CgroupSpec) -> Result<()> {
        let f = |n: &str| self.reader.dir.join(n);
        match self.reader.version {
            CgroupVersion::V1 => {
                if let Some(s) = spec.swappiness {
                    write_file(f("memory.swappiness"), &s.to_string())?;
                }
                if let Some(m) = spec.memory_max {
                    write_file(f("memory.limit_in_bytes"), &m.to_string())?;
                }
                if let Some(s) = spec.swap_max {
                    let memsw = f("memory.memsw.limit_in_bytes");
                    if !memsw.exists() {
                        return Err(Error::Unsupported(format!(
                            "{} is missing: swap accounting is off (boot with swapaccount=1)",
                            memsw.display()
                        )));
                    }
                    let base = match spec.memory_max {
                        Some(m) => m,
                        None => self.reader.limit()?,
                    };
                    write_file(memsw, &base.saturating_add(s).to_string())?;
                }
                if spec.memory_high.is_some() {
                    self.notes
                        .push("memory_high ignored: cgroup v1 has no memory.high".into());
                }
            }
            CgroupVersion::V2 => {
                if let Some(m) = spec.memory_max {
                    write_file(f("memory.max"), &m.to_string())?;
                }
                if let Some(m) = spec.memory_high {
                    write_file(f("memory.high"), &m.to_string())?;
                }
                if let Some(s) = spec.swap_max {
                    write_file(f("memory.swap.max"), &s.to_string())?;
                }
                if spec.swappiness.is_some() {
                    self.notes
                        .push("swappiness ignored: cgroup v2 has no per-group swappiness".into());
                }
            }
        }
        Ok(())
    }

    /// A read-only, clonable view of the group's files.
    pub fn reader(&self) -> CgroupReader {
        self.reader.clone()
    }

    /// The memory cgroup directory.
    pub fn dir(&self) -> &Path {
        &self.reader.dir
    }

    /// The v2 directory with this group's PSI, if any.
    pub fn psi_dir(&self) -> Option<&Path> {
        self.reader.psi_dir.as_deref()
    }

    /// The interface version.
    pub fn version(&self) -> CgroupVersion {
        self.reader.version
    }

    /// Settings of the spec that this interface could not apply.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    fn procs_files(&self) -> Vec<PathBuf> {
        let mut v = vec![self.reader.dir.join("cgroup.procs")];
        if let Some(p) = &self.reader.psi_dir {
            if *p != self.reader.dir {
                v.push(p.join("cgroup.procs"));
            }
        }
        v
    }

    /// Moves a running process (all its threads) into the group.
    pub fn add_pid(&self, pid: i32) -> Result<()> {
        for f in self.procs_files() {
            write_file(&f, &pid.to_string())?;
        }
        Ok(())
    }

    /// Makes `cmd` join this group in the child between fork and exec, so the workload
    /// never runs outside the limit. (It writes "0" — "the writing process" — to each
    /// `cgroup.procs`; only open/write/close run in the child.)
    pub fn configure_command(&self, cmd: &mut Command) -> Result<()> {
        let files: Vec<CString> = self
            .procs_files()
            .iter()
            .map(|p| {
                CString::new(p.as_os_str().as_bytes())
                    .map_err(|_| Error::Other(format!("path {} contains a NUL byte", p.display())))
            })
            .collect::<Result<_>>()?;
        // SAFETY: the closure runs in the forked child before exec. It only calls
        // open(2), write(2), close(2) and reads errno — all async-signal-safe — on
        // CStrings allocated before the fork; it allocates nothing and takes no locks.
        unsafe {
            cmd.pre_exec(move || {
                for f in &files {
                    let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                    let err = std::io::Error::last_os_error();
                    libc::close(fd);
                    if n != 1 {
                        return Err(err);
                    }
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// Spawns `cmd` inside the group (see [`Cgroup::configure_command`]). The returned
    /// [`LabChild`] is killed and reaped if it is dropped unwaited.
    pub fn spawn(&self, cmd: &mut Command) -> Result<LabChild> {
        self.configure_command(cmd)?;
        cleanup::creating(|| {
            let child = cmd.spawn().map_err(|e| Error::Command {
                command: format!("{cmd:?}"),
                detail: format!(
                    "spawn into cgroup {} failed: {e}",
                    self.reader.dir.display()
                ),
            })?;
            Ok(LabChild::adopt(child))
        })
    }

    /// Pids in the group.
    pub fn procs(&self) -> Result<Vec<i32>> {
        self.reader.procs()
    }

    /// Memory charged now (see [`CgroupReader::usage`]).
    pub fn usage(&self) -> Result<u64> {
        self.reader.usage()
    }

    /// Peak memory (see [`CgroupReader::peak`]).
    pub fn peak(&self) -> Result<Option<u64>> {
        self.reader.peak()
    }

    /// OOM kills (see [`CgroupReader::oom_kills`]).
    pub fn oom_kills(&self) -> Result<u64> {
        self.reader.oom_kills()
    }

    /// PSI of the group (see [`CgroupReader::psi`]).
    pub fn psi(&self) -> Result<Option<Psi>> {
        self.reader.psi()
    }

    /// Kills every task in the group with SIGKILL and waits (up to `timeout`) until the
    /// group is empty.
    pub fn kill_all(&self, timeout: Duration) -> Result<()> {
        kill_and_wait(&self.reader.dir, timeout)
    }

    /// Removes the group now (same as dropping it), returning whether it was still there.
    pub fn remove(mut self) -> bool {
        self.token.take().map(|t| t.run()).unwrap_or(false)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        drop(self.token.take());
    }
}

fn kill_and_wait(dir: &Path, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let pids = match procs_of(dir) {
            Ok(p) => p,
            // The group is gone, or the directory is not a cgroup (no cgroup.procs).
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        if pids.is_empty() {
            return Ok(());
        }
        for pid in &pids {
            // SAFETY: kill(2) has no memory-safety preconditions; a stale pid yields ESRCH.
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        if start.elapsed() > timeout {
            return Err(Error::Other(format!(
                "tasks {pids:?} still in {} after SIGKILL and {timeout:?}",
                dir.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills the tasks of a lab cgroup and its lab sub-groups, then removes the directories.
fn remove_cgroup_dir(dir: &Path, timeout: Duration) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    // Children first (a lab cgroup may hold sub-groups made by experiment code).
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_cgroup_dir(&e.path(), timeout)?;
            }
        }
    }
    kill_and_wait(dir, timeout)?;
    let start = Instant::now();
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            // EBUSY while the killed tasks finish exiting.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(Error::io("rmdir", dir, e)),
        }
    }
}

/// The inode of the initial pid namespace (`PROC_PID_INIT_INO` in the kernel).
const INIT_PID_NS: &str = "pid:[4026531836]";

/// Whether this process sees global pids (it runs in the initial pid namespace).
fn in_initial_pid_namespace() -> bool {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|l| l.as_os_str() == INIT_PID_NS)
        .unwrap_or(false)
}

/// Removes lab cgroups left by dead processes.
///
/// Where to look: a creator pid can only be judged dead if pids are global, so in the
/// initial pid namespace every cgroup mount (v1 and v2) is searched; in a container only
/// the directories where this process itself would create groups (a process of another
/// pid namespace may have the same pid number and be alive).
pub(crate) fn cleanup_leftover_cgroups() -> Result<Vec<String>> {
    let roots: Vec<PathBuf> = if in_initial_pid_namespace() {
        parse_mountinfo(&read_to_string("/proc/self/mountinfo")?)
            .into_iter()
            .map(|m| m.mount_point)
            .collect()
    } else {
        match MemoryHierarchy::detect() {
            Ok(h) => std::iter::once(h.base_dir).chain(h.psi_base_dir).collect(),
            Err(_) => Vec::new(),
        }
    };
    let mut removed = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for root in roots {
        if !seen.insert(root.clone()) {
            continue;
        }
        let mut found = Vec::new();
        find_lab_dirs(&root, 0, &mut found);
        for d in found {
            let name = d.file_name().map(|n| n.to_string_lossy().into_owned());
            let Some(pid) = name.and_then(|n| cleanup::owner_pid(&n, CGROUP_PREFIX)) else {
                continue;
            };
            if cleanup::pid_alive(pid) {
                continue;
            }
            match remove_cgroup_dir(&d, Duration::from_secs(10)) {
                Ok(()) => removed.push(format!("cgroup {}", d.display())),
                Err(e) => eprintln!("ebbtide-lab: cannot remove leftover: {e}"),
            }
        }
    }
    Ok(removed)
}

fn find_lab_dirs(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > 8 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let p = e.path();
        if e.file_name().to_string_lossy().starts_with(CGROUP_PREFIX) {
            out.push(p);
        } else {
            find_lab_dirs(&p, depth + 1, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_CGROUP: &str = "9:name=systemd:/\n4:memory:/process_api/95f9\n1:cpu:/\n0::/\n";

    #[test]
    fn parses_proc_cgroup() {
        let l = parse_proc_cgroup(HYBRID_CGROUP).unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(l[1].controllers, vec!["memory".to_string()]);
        assert_eq!(l[1].path, "/process_api/95f9");
        assert_eq!(l[3].hierarchy, 0);
        assert!(l[3].controllers.is_empty());
        assert!(parse_proc_cgroup("garbage").is_err());
    }

    #[test]
    fn parses_mountinfo_and_maps_paths() {
        let text = "\
30 24 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
35 24 0:31 / /sys/fs/cgroup/memory rw,nosuid shared:9 - cgroup cgroup rw,memory
40 24 0:40 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct
22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].fstype, "cgroup2");
        assert!(m[1].super_options.iter().any(|o| o == "memory"));
        assert_eq!(
            cgroup_dir(&m[1], "/process_api/x"),
            PathBuf::from("/sys/fs/cgroup/memory/process_api/x")
        );
        assert_eq!(
            cgroup_dir(&m[0], "/"),
            PathBuf::from("/sys/fs/cgroup/unified")
        );
        // A container whose mount root is a sub path.
        assert_eq!(
            cgroup_dir(&m[2], "/docker/abc/child"),
            PathBuf::from("/sys/fs/cgroup/cpu/child")
        );
    }

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }

    /// The v2 code paths against a fake cgroup directory (this machine has no v2 memory
    /// controller): limits written to the right files, counters read from them.
    #[test]
    fn v2_files_on_a_fake_tree() {
        let base =
            std::env::temp_dir().join(format!("ebbtide-lab-unit-fakecg-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let h = MemoryHierarchy {
            version: CgroupVersion::V2,
            mount_point: base.clone(),
            own_dir: base.clone(),
            base_dir: base.clone(),
            psi_base_dir: None,
        };
        let cg = Cgroup::create_in(
            &h,
            &CgroupSpec::new("fake v2")
                .memory_max(64 << 20)
                .memory_high(48 << 20)
                .swap_max(256 << 20)
                .swappiness(10),
        )
        .unwrap();
        let d = cg.dir().to_path_buf();
        assert!(d
            .file_name()
            .unwrap()
            .to_string_lossy()
            .ends_with("-fake_v2"));
        let rd = |n: &str| std::fs::read_to_string(d.join(n)).unwrap();
        assert_eq!(rd("memory.max"), (64u64 << 20).to_string());
        assert_eq!(rd("memory.high"), (48u64 << 20).to_string());
        assert_eq!(rd("memory.swap.max"), (256u64 << 20).to_string());
        assert_eq!(cg.notes().len(), 1, "swappiness is v1 only");
        let w = |n: &str, t: &str| std::fs::write(d.join(n), t).unwrap();
        w("memory.current", "1234\n");
        w("memory.peak", "5678\n");
        w("memory.swap.current", "4096\n");
        w("memory.events", "low 0\nhigh 5\nmax 2\noom 1\noom_kill 1\n");
        w("memory.stat", "anon 100\npswpin 7\npswpout 9\n");
        w("memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n");
        w("cgroup.procs", "");
        let r = cg.reader();
        assert_eq!(r.usage().unwrap(), 1234);
        assert_eq!(r.peak().unwrap(), Some(5678));
        assert_eq!(r.limit().unwrap(), 64 << 20);
        assert_eq!(r.swap_usage().unwrap(), Some(4096));
        assert_eq!(r.oom_kills().unwrap(), 1);
        assert_eq!(r.events().unwrap()["high"], 5);
        assert_eq!(
            r.swap_counters().unwrap(),
            Some(CgroupSwapCounters {
                pswpin: 7,
                pswpout: 9
            })
        );
        assert_eq!(r.psi().unwrap().unwrap().some.total_us, 42);
        assert!(r.procs().unwrap().is_empty());
        // A real cgroupfs removes its files with the directory; the fake needs help.
        for e in std::fs::read_dir(&d).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        assert!(cg.remove());
        assert!(!d.exists());
        std::fs::remove_dir(&base).unwrap();
    }

    #[test]
    fn parses_oom_control_and_events() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(parse_flat_keyed(v1)["oom_kill"], 3);
        let v2 = "low 0\nhigh 12\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n";
        let m = parse_flat_keyed(v2);
        assert_eq!(m["high"], 12);
        assert_eq!(m["oom_kill"], 1);
    }
}
