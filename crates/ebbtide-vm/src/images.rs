//! The kernel, initramfs and trixie root a guest boots, built by `scripts/vm/build.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::availability::Unavailable;

/// What `build.sh` produced, in its cache directory.
#[derive(Debug, Clone)]
pub struct Images {
    /// Decompressed ELF kernel (qemu's PVH entry).
    pub vmlinux: PathBuf,
    /// The initramfs (busybox, modules, `init`, `agent.sh`).
    pub initramfs: PathBuf,
    /// `linux-image-… VERSION busybox VERSION`.
    pub versions: String,
    /// The Debian trixie root (systemd as PID 1), when asked for.
    pub systemd_root: Option<PathBuf>,
}

/// `scripts/vm/` of this workspace.
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/vm")
}

/// Builds (or finds in the cache) the images; with `systemd`, also the trixie root. Once per
/// process for each kind. The error carries `build.sh`'s own words (a missing package, a
/// failed download).
pub fn images(systemd: bool) -> Result<Images, Unavailable> {
    static PLAIN: OnceLock<Result<Images, Unavailable>> = OnceLock::new();
    static SYSTEMD: OnceLock<Result<Images, Unavailable>> = OnceLock::new();
    let cell = if systemd { &SYSTEMD } else { &PLAIN };
    cell.get_or_init(|| build(systemd)).clone()
}

fn build(systemd: bool) -> Result<Images, Unavailable> {
    let script = scripts_dir().join("build.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script);
    if systemd {
        cmd.arg("--systemd");
    }
    let out = cmd
        .output()
        .map_err(|e| Unavailable::new(format!("cannot run {}: {e}", script.display())))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(Unavailable::new(format!(
            "{} failed ({}):\n{}",
            script.display(),
            out.status,
            tail.join("\n")
        )));
    }
    let dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .ok_or_else(|| Unavailable::new(format!("{} printed no directory", script.display())))?;
    let read = |name: &str| std::fs::read_to_string(dir.join(name));
    let versions = read("versions")
        .map_err(|e| Unavailable::new(format!("{}: {e}", dir.join("versions").display())))?
        .trim()
        .to_string();
    let systemd_root = if systemd {
        let line = read("systemd-root").map_err(|e| {
            Unavailable::new(format!("{}: {e}", dir.join("systemd-root").display()))
        })?;
        let root = line.trim().strip_prefix("systemd_root=").map(PathBuf::from);
        Some(root.ok_or_else(|| {
            Unavailable::new(format!(
                "{}: malformed ({line:?})",
                dir.join("systemd-root").display()
            ))
        })?)
    } else {
        None
    };
    Ok(Images {
        vmlinux: dir.join("vmlinux"),
        initramfs: dir.join("initramfs.gz"),
        versions,
        systemd_root,
    })
}
