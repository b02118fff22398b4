//! `ebbtide lab malloc --vm`: the malloc experiment on a stock kernel's cgroup v2, where the
//! host's memory controller is not v2 (ours is v1).
//!
//! Each THP mode asked for (`--thp always|madvise|both`, default both) boots its own guest
//! (crate `ebbtide-vm`: Debian's kernel under qemu, the host's `/` as its root, so the same
//! binaries, `redis-server`, `python3` and the peers' libraries run unchanged) with
//! `transparent_hugepage=MODE` on the kernel command line, and runs this very lab there as root:
//! the groups are v2 (`memory.max`, `memory.high`, `memory.swap.max`), so the tables gain the
//! groups' `memory.events` `high`/`max` counts and their PSI stall time. The results land in
//! `OUT/thp-MODE/` (the guest's console of the lab in `guest.log`); `OUT/README.txt` names the
//! kernel, the modes and the guest's wall times.
//!
//! Swap: the lab makes its swap file in `/var/tmp`, which in the guest is a tmpfs overlay that
//! cannot hold one, so the job first turns the guest's virtio swap disk into an ext4 file system
//! mounted there. Times in the results are the guest's: TCG runs it 8–40× slower than the
//! host, so compare allocators within one guest run, not with the host's tables.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ebbtide_lab::{Error, Result};
use ebbtide_vm::{Job, Vm, VmConfig, VmError, GUEST_WORK};

use crate::{Opts, Scale};

/// A THP mode of the guest's kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Thp {
    /// `transparent_hugepage=always` (Debian's, RHEL's, Fedora's default).
    Always,
    /// `transparent_hugepage=madvise` (our hosts').
    Madvise,
}

impl Thp {
    /// The kernel's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Thp::Always => "always",
            Thp::Madvise => "madvise",
        }
    }

    /// `always`, `madvise` or `both` (always first).
    pub fn parse_list(s: &str) -> Option<Vec<Thp>> {
        match s {
            "always" => Some(vec![Thp::Always]),
            "madvise" => Some(vec![Thp::Madvise]),
            "both" => Some(vec![Thp::Always, Thp::Madvise]),
            _ => None,
        }
    }
}

/// How long the guest may take for one run of the lab (TCG, 8–40× the host's time).
fn guest_limit(scale: Scale) -> Duration {
    match scale {
        Scale::Smoke => Duration::from_secs(45 * 60),
        Scale::Quick => Duration::from_secs(3 * 3600),
        Scale::Full => Duration::from_secs(10 * 3600),
    }
}

/// `s` quoted for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command line that runs the lab's malloc experiment with `exe` (the `ebbtide` command
/// takes it as `lab malloc`, `ebbtide-lab` as `malloc`).
pub fn lab_command(exe: &Path, opts: &Opts, out: &str) -> Vec<String> {
    let mut v = vec![exe.display().to_string()];
    if exe.file_name().and_then(|n| n.to_str()) == Some("ebbtide") {
        v.push("lab".into());
    }
    v.push("malloc".into());
    v.push(format!("--{}", opts.scale.as_str()));
    v.push("--out".into());
    v.push(out.into());
    if let Some(n) = opts.runs {
        v.push("--runs".into());
        v.push(n.to_string());
    }
    v
}

/// The guest's job: swap-capable `/var/tmp` on the virtio disk, the facts, then the lab with
/// the host's `libebbtide_malloc.so`.
pub fn job_script(lab: &[String], lib: &Path) -> String {
    let cmd: Vec<String> = lab.iter().map(|a| quote(a)).collect();
    format!(
        "swapoff -a 2>/dev/null\n\
         mkfs.ext4 -q -F /dev/vda || exit 90\n\
         mount -t ext4 /dev/vda /var/tmp || exit 91\n\
         echo KERNEL=$(uname -r)\n\
         echo THP=$(cat /sys/kernel/mm/transparent_hugepage/enabled)\n\
         echo CGROUP=$(stat -f -c %T /sys/fs/cgroup)\n\
         EBBTIDE_MALLOC_LIB={lib} {cmd}\n\
         rc=$?\n\
         umount /var/tmp\n\
         exit $rc\n",
        lib = quote(&lib.display().to_string()),
        cmd = cmd.join(" "),
    )
}

/// Copies the directory tree `from` into `to` (created).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dst = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_tree(&e.path(), &dst)?;
        } else {
            std::fs::copy(e.path(), &dst)?;
        }
    }
    Ok(())
}

/// Runs the malloc experiment in one guest per THP mode of `modes`; results under `opts.out`.
pub fn run_malloc_vm(opts: &Opts, modes: &[Thp]) -> Result<Vec<PathBuf>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::Other(
            "lab malloc --vm needs root (qemu's images are built into /var/cache/ebbtide-vm, \
             and the experiment runs as root in the guest)"
                .into(),
        ));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Error::Other(format!("the running executable's path: {e}")))?;
    let lib = ebbtide_lab::malloc_lib::locate_or_build().map_err(Error::Other)?;
    std::fs::create_dir_all(&opts.out)
        .map_err(|e| Error::Other(format!("mkdir {}: {e}", opts.out.display())))?;
    let mut readme = String::from(
        "ebbtide lab malloc --vm: the malloc experiment in a guest with a stock kernel's cgroup v2\n\
         (times are the guest's: TCG, 8-40x slower than the host)\n\n",
    );
    let mut dirs = Vec::new();
    for &mode in modes {
        let cfg = VmConfig {
            append: format!("transparent_hugepage={}", mode.as_str()),
            swap_mib: 1024,
            ..VmConfig::default()
        };
        eprintln!(
            "lab malloc --vm: booting a guest with THP {}",
            mode.as_str()
        );
        let mut vm = Vm::boot(&cfg).map_err(|e| match e {
            VmError::Unavailable(u) => Error::Other(format!("no VM here: {u}")),
            VmError::Failed(s) => Error::Other(format!("booting the guest failed: {s}")),
        })?;
        let guest_out = format!("{GUEST_WORK}/out");
        let lab = lab_command(&exe, opts, &guest_out);
        eprintln!(
            "lab malloc --vm: guest {} booted in {:.0} s; running {}",
            vm.kernel,
            vm.boot_time.as_secs_f64(),
            lab.join(" ")
        );
        let job = Job::new(job_script(&lab, &lib)).limit(guest_limit(opts.scale));
        let o = vm
            .run(&job)
            .map_err(|e| Error::Other(format!("the guest's run: {e}")))?;
        let dir = opts.out.join(format!("thp-{}", mode.as_str()));
        let _ = std::fs::remove_dir_all(&dir);
        let from = vm.work().join("out");
        if from.is_dir() {
            copy_tree(&from, &dir)
                .map_err(|e| Error::Other(format!("copying the guest's results: {e}")))?;
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Other(format!("mkdir {}: {e}", dir.display())))?;
        std::fs::write(
            dir.join("guest.log"),
            format!("--- stdout\n{}\n--- stderr\n{}", o.stdout, o.stderr),
        )
        .map_err(|e| Error::Other(format!("writing guest.log: {e}")))?;
        drop(vm);
        let _ = writeln!(
            readme,
            "thp-{}: kernel {}, THP {}, cgroup fs {}, exit status {}, {:.0} s (host wall time)",
            mode.as_str(),
            o.value("KERNEL").unwrap_or("?"),
            o.value("THP").unwrap_or("?"),
            o.value("CGROUP").unwrap_or("?"),
            o.code,
            o.host_time.as_secs_f64()
        );
        if o.code != 0 {
            let tail: Vec<&str> = o.stderr.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(Error::Other(format!(
                "the lab in the guest (THP {}) ended with status {} (see {}):\n{}",
                mode.as_str(),
                o.code,
                dir.join("guest.log").display(),
                tail.join("\n")
            )));
        }
        dirs.push(dir);
    }
    std::fs::write(opts.out.join("README.txt"), readme)
        .map_err(|e| Error::Other(format!("writing README.txt: {e}")))?;
    Ok(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_runs_the_lab_with_the_hosts_library_on_an_ext4_var_tmp() {
        let opts = Opts {
            out: PathBuf::from("x"),
            scale: Scale::Smoke,
            runs: Some(2),
        };
        let lab = lab_command(Path::new("/t/ebbtide"), &opts, "/ebbtide-work/out");
        assert_eq!(
            lab,
            [
                "/t/ebbtide",
                "lab",
                "malloc",
                "--smoke",
                "--out",
                "/ebbtide-work/out",
                "--runs",
                "2"
            ]
        );
        let lab2 = lab_command(Path::new("/t/ebbtide-lab"), &opts, "/o");
        assert_eq!(lab2[..2], ["/t/ebbtide-lab", "malloc"]);
        let s = job_script(&lab, Path::new("/t/it's.so"));
        let mount = s.find("mount -t ext4 /dev/vda /var/tmp").unwrap();
        let run = s
            .find("EBBTIDE_MALLOC_LIB='/t/it'\\''s.so' '/t/ebbtide' 'lab'")
            .unwrap();
        assert!(mount < run, "{s}");
        assert_eq!(
            Thp::parse_list("both").unwrap(),
            [Thp::Always, Thp::Madvise]
        );
        assert!(Thp::parse_list("never").is_none());
    }
}
