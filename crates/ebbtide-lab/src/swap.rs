//! Swap files for experiments.
//!
//! [`SwapFile::create`] makes `/var/tmp/ebbtide-lab-swap-<pid>-<seq>` (mode 600, filled by
//! `fallocate(2)`, or by writing zeros where that fails or where the kernel refuses a
//! preallocated file), runs `mkswap`, enables it with `swapon(2)` and checks that
//! `/proc/swaps` lists it. Dropping the guard — or [`crate::cleanup::run_all`] on a
//! signal — `swapoff(2)`s and deletes it.
//!
//! `mkswap` comes from Debian's `util-linux` package (`swapon`/`swapoff` binaries are in
//! `mount`, but the lab calls the system calls directly and does not need them).

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cleanup::{self, CleanupToken};
use crate::error::{read_to_string, Error, Result};

/// Default directory for lab swap files (on the root file system, ext4 here; tmpfs cannot
/// hold swap files).
pub const SWAP_DIR: &str = "/var/tmp";
/// File name prefix of lab swap files.
pub const SWAP_PREFIX: &str = "ebbtide-lab-swap-";
/// Priority of lab swap files (`swapon -p`): above the kernel's negative defaults, so the
/// lab's file is used before any swap the machine already has.
pub const SWAP_PRIORITY: i16 = 100;

// <linux/swap.h>
const SWAP_FLAG_PREFER: libc::c_int = 0x8000;
const SWAP_FLAG_PRIO_MASK: libc::c_int = 0x7fff;

/// One line of `/proc/swaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapEntry {
    /// Device or file.
    pub filename: PathBuf,
    /// `file` or `partition`.
    pub kind: String,
    /// Size, KiB.
    pub size_kib: u64,
    /// Used, KiB.
    pub used_kib: u64,
    /// Priority.
    pub priority: i64,
}

/// Parses `/proc/swaps` (a header line, then one line per active swap area).
pub fn parse_proc_swaps(text: &str) -> Vec<SwapEntry> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 5 {
                return None;
            }
            Some(SwapEntry {
                // Paths with spaces are escaped as \040 by the kernel.
                filename: PathBuf::from(f[0].replace("\\040", " ")),
                kind: f[1].to_string(),
                size_kib: f[2].parse().ok()?,
                used_kib: f[3].parse().ok()?,
                priority: f[4].parse().ok()?,
            })
        })
        .collect()
}

/// The active swap areas.
pub fn active_swaps() -> Result<Vec<SwapEntry>> {
    Ok(parse_proc_swaps(&read_to_string("/proc/swaps")?))
}

/// Whether `/proc/swaps` lists `path`.
pub fn is_active(path: &Path) -> Result<bool> {
    Ok(active_swaps()?.iter().any(|e| e.filename == path))
}

/// Finds `mkswap` in `$PATH`, `/sbin` or `/usr/sbin`.
pub fn find_mkswap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join("mkswap"))
        .find(|p| p.is_file())
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// An active lab swap file; dropping it runs `swapoff` and deletes it.
#[derive(Debug)]
pub struct SwapFile {
    path: PathBuf,
    size: u64,
    token: Option<CleanupToken>,
}

impl SwapFile {
    /// Creates and enables a swap file of `size_bytes` in [`SWAP_DIR`].
    pub fn create(size_bytes: u64) -> Result<SwapFile> {
        Self::create_in(Path::new(SWAP_DIR), size_bytes)
    }

    /// Creates and enables a swap file of `size_bytes` in `dir` with [`SWAP_PRIORITY`].
    pub fn create_in(dir: &Path, size_bytes: u64) -> Result<SwapFile> {
        Self::create_with_priority(dir, size_bytes, SWAP_PRIORITY)
    }

    /// Creates and enables a swap file of `size_bytes` in `dir` with swap priority
    /// `priority` (0..=32767; higher is used first).
    pub fn create_with_priority(dir: &Path, size_bytes: u64, priority: i16) -> Result<SwapFile> {
        if priority < 0 {
            return Err(Error::Other(format!(
                "swap priority {priority}: must be 0..=32767"
            )));
        }
        let page = page_size();
        let size = size_bytes / page * page;
        if size < 10 * page {
            return Err(Error::Other(format!(
                "swap file of {size_bytes} bytes is too small (mkswap needs at least 10 pages)"
            )));
        }
        let mkswap = find_mkswap().ok_or_else(|| {
            Error::Unsupported(
                "`mkswap` not found in $PATH, /sbin or /usr/sbin: install Debian's \
                 `util-linux` package (apt-get install util-linux)"
                    .into(),
            )
        })?;
        let path = dir.join(format!(
            "{SWAP_PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        // Register before the file exists so a failure half-way still removes it, all inside
        // `creating` so a signal's cleanup never runs between the registration and swapon.
        cleanup::creating(|| Self::make(path, size, priority, &mkswap))
    }

    fn make(path: PathBuf, size: u64, priority: i16, mkswap: &Path) -> Result<SwapFile> {
        let p2 = path.clone();
        let token = cleanup::register(
            format!("swapoff and delete {}", path.display()),
            move || {
                if let Err(e) = disable_and_remove(&p2) {
                    eprintln!("ebbtide-lab: {e}");
                }
            },
        );
        let swap = SwapFile {
            path,
            size,
            token: Some(token),
        };
        swap.fill(size, true)?;
        swap.mkswap(mkswap)?;
        if let Err(e) = swapon(&swap.path, priority) {
            // Some file systems refuse preallocated (unwritten) extents: retry with zeros.
            if e.raw_os_error() == Some(libc::EINVAL) {
                swap.fill(size, false)?;
                swap.mkswap(mkswap)?;
                swapon(&swap.path, priority)?;
            } else {
                return Err(e);
            }
        }
        if !is_active(&swap.path)? {
            return Err(Error::Other(format!(
                "swapon({}) succeeded but /proc/swaps does not list it",
                swap.path.display()
            )));
        }
        Ok(swap)
    }

    fn fill(&self, size: u64, try_fallocate: bool) -> Result<()> {
        let _ = std::fs::remove_file(&self.path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&self.path)
            .map_err(|e| Error::io("create", &self.path, e))?;
        let mut done = false;
        if try_fallocate {
            // SAFETY: `f` is an open, writable file descriptor owned by this function;
            // fallocate(2) only reads its integer arguments.
            let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, size as libc::off_t) };
            done = r == 0;
        }
        if !done {
            let chunk = vec![0u8; 1 << 20];
            let mut left = size;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                f.write_all(&chunk[..n])
                    .map_err(|e| Error::io("write zeros to", &self.path, e))?;
                left -= n as u64;
            }
        }
        f.sync_all().map_err(|e| Error::io("fsync", &self.path, e))
    }

    fn mkswap(&self, mkswap: &Path) -> Result<()> {
        let out = Command::new(mkswap)
            .arg(&self.path)
            .output()
            .map_err(|e| Error::Command {
                command: format!("{} {}", mkswap.display(), self.path.display()),
                detail: e.to_string(),
            })?;
        if !out.status.success() {
            return Err(Error::Command {
                command: format!("{} {}", mkswap.display(), self.path.display()),
                detail: format!(
                    "{}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        Ok(())
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The priority `/proc/swaps` shows for this file.
    pub fn priority(&self) -> Result<Option<i64>> {
        Ok(active_swaps()?
            .iter()
            .find(|e| e.filename == self.path)
            .map(|e| e.priority))
    }

    /// Size in bytes (rounded down to whole pages).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// KiB of this file in use now, from `/proc/swaps`.
    pub fn used_kib(&self) -> Result<u64> {
        Ok(active_swaps()?
            .iter()
            .find(|e| e.filename == self.path)
            .map(|e| e.used_kib)
            .unwrap_or(0))
    }

    /// Disables and deletes the file now (same as dropping it).
    pub fn remove(mut self) -> bool {
        self.token.take().map(|t| t.run()).unwrap_or(false)
    }
}

impl Drop for SwapFile {
    fn drop(&mut self) {
        drop(self.token.take());
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Other(format!("path {} contains a NUL byte", path.display())))
}

fn swapon(path: &Path, priority: i16) -> Result<()> {
    let c = cpath(path)?;
    let flags = SWAP_FLAG_PREFER | (libc::c_int::from(priority) & SWAP_FLAG_PRIO_MASK);
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let r = unsafe { libc::swapon(c.as_ptr(), flags) };
    if r != 0 {
        return Err(Error::io("swapon", path, std::io::Error::last_os_error()));
    }
    Ok(())
}

fn swapoff(path: &Path) -> Result<()> {
    let c = cpath(path)?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let r = unsafe { libc::swapoff(c.as_ptr()) };
    if r != 0 {
        return Err(Error::io("swapoff", path, std::io::Error::last_os_error()));
    }
    Ok(())
}

fn disable_and_remove(path: &Path) -> Result<()> {
    if is_active(path)? {
        swapoff(path)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("delete", path, e)),
    }
}

/// Disables and deletes lab swap files of dead processes: those listed in `/proc/swaps`
/// anywhere, and files with the prefix in [`SWAP_DIR`].
pub(crate) fn cleanup_leftover_swapfiles() -> Result<Vec<String>> {
    let mut candidates: Vec<PathBuf> = active_swaps()?
        .into_iter()
        .map(|e| e.filename)
        .filter(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy().starts_with(SWAP_PREFIX))
                .unwrap_or(false)
        })
        .collect();
    if let Ok(rd) = std::fs::read_dir(SWAP_DIR) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(SWAP_PREFIX) {
                let p = e.path();
                if !candidates.contains(&p) {
                    candidates.push(p);
                }
            }
        }
    }
    let mut removed = Vec::new();
    for p in candidates {
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let Some(pid) = cleanup::owner_pid(&name, SWAP_PREFIX) else {
            continue;
        };
        if cleanup::pid_alive(pid) {
            continue;
        }
        match disable_and_remove(&p) {
            Ok(()) => removed.push(format!("swap file {}", p.display())),
            Err(e) => eprintln!("ebbtide-lab: cannot remove leftover swap file: {e}"),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_swaps() {
        let t = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                 /var/tmp/ebbtide-lab-swap-42-0          file\t\t262140\t\t1024\t\t-2\n\
                 /dev/sda2                               partition\t8388604\t\t0\t\t-3\n";
        let e = parse_proc_swaps(t);
        assert_eq!(e.len(), 2);
        assert_eq!(
            e[0].filename,
            PathBuf::from("/var/tmp/ebbtide-lab-swap-42-0")
        );
        assert_eq!(e[0].size_kib, 262140);
        assert_eq!(e[0].used_kib, 1024);
        assert_eq!(e[0].priority, -2);
        assert_eq!(e[1].kind, "partition");
        assert!(parse_proc_swaps("Filename Type Size Used Priority\n").is_empty());
    }
}
