//! One guest: qemu TCG on the images, the serial control line to its agent, its runtime files.

use std::fs;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::availability::Unavailable;
use crate::images::{images, Images};
use crate::job::{Job, Output};

/// Where the guest sees the VM's work directory ([`Vm::work`] on the host), read-write.
pub const GUEST_WORK: &str = "/ebbtide-work";

/// How the guest is made.
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// Guest memory. Default 1024 MiB.
    pub memory_mib: u32,
    /// Virtual CPUs (TCG threads). Default 2.
    pub cpus: u32,
    /// Size of the raw virtio swap disk (sparse on the host). Default 512 MiB; 0: none.
    pub swap_mib: u32,
    /// Boot the Debian trixie root with systemd as PID 1 (the host's `/` at `/host`).
    pub systemd: bool,
    /// From qemu's start to the agent's `ready`. Default 300 s (TCG on a loaded 2-core host).
    pub boot_limit: Duration,
    /// More kernel command line (e.g. `transparent_hugepage=madvise`).
    pub append: String,
}

impl Default for VmConfig {
    fn default() -> Self {
        VmConfig {
            memory_mib: 1024,
            cpus: 2,
            swap_mib: 512,
            systemd: false,
            boot_limit: Duration::from_secs(300),
            append: String::new(),
        }
    }
}

/// Why a guest failed.
#[derive(Debug)]
pub enum VmError {
    /// No guest can be had on this machine (see [`crate::availability`]).
    Unavailable(Unavailable),
    /// qemu or the guest failed before or while running a job; the text has the console's tail.
    Failed(String),
}

impl std::fmt::Display for VmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VmError::Unavailable(u) => write!(f, "no VM: {u}"),
            VmError::Failed(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for VmError {}

/// A running guest. Invariant: while `dead` is `None`, qemu runs and the agent is idle between
/// [`Vm::run`] calls (one `run` line answered by one `done` line).
pub struct Vm {
    qemu: Child,
    /// Holds the reaper's stdin; dropping it (or this process ending) makes it kill qemu.
    reaper_pipe: Option<ChildStdin>,
    reaper: Child,
    ctl: BufReader<UnixStream>,
    dir: PathBuf,
    next_job: u64,
    dead: Option<String>,
    /// `uname -r` of the guest.
    pub kernel: String,
    /// From qemu's start to the agent's `ready` (host wall time).
    pub boot_time: Duration,
    /// The images booted.
    pub images: Images,
}

impl Vm {
    /// Boots a guest (building the images first if the cache lacks them).
    pub fn boot(cfg: &VmConfig) -> Result<Vm, VmError> {
        let images = images(cfg.systemd).map_err(VmError::Unavailable)?;
        if Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .is_err()
        {
            return Err(VmError::Unavailable(Unavailable::new(
                "qemu-system-x86_64 cannot be run (Debian package qemu-system-x86)",
            )));
        }
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ebbtide-vm-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        let fail = |what: &str, e: std::io::Error| VmError::Failed(format!("{what}: {e}"));
        fs::create_dir_all(dir.join("work/jobs")).map_err(|e| fail("work directory", e))?;
        fs::set_permissions(dir.join("work"), fs::Permissions::from_mode(0o777))
            .map_err(|e| fail("chmod", e))?;
        fs::set_permissions(dir.join("work/jobs"), fs::Permissions::from_mode(0o777))
            .map_err(|e| fail("chmod", e))?;
        let sock = dir.join("ctl.sock");
        let listener = UnixListener::bind(&sock).map_err(|e| fail("control socket", e))?;
        let swap = dir.join("swap.img");
        if cfg.swap_mib > 0 {
            let f = fs::File::create(&swap).map_err(|e| fail("swap disk", e))?;
            f.set_len(u64::from(cfg.swap_mib) << 20)
                .map_err(|e| fail("swap disk", e))?;
        }
        let root_share = match &images.systemd_root {
            Some(r) => r.clone(),
            None => PathBuf::from("/"),
        };
        let mut append = format!(
            "console=ttyS0 loglevel=4 psi=1 panic=-1 mitigations=off ebbtide.root={}",
            if cfg.systemd { "systemd" } else { "host" }
        );
        if cfg.systemd {
            append.push_str(" systemd.show_status=0 systemd.log_level=warning");
        } else if let Some(keep) = kept_host_paths() {
            append.push_str(" ebbtide.keep=");
            append.push_str(&keep);
        }
        if !cfg.append.is_empty() {
            append.push(' ');
            append.push_str(&cfg.append);
        }
        let virtfs = |path: &Path, tag: &str, ro: bool| {
            format!(
                "local,path={},mount_tag={tag},security_model=none,multidevs=remap{}",
                path.display(),
                if ro { ",readonly=on" } else { "" }
            )
        };
        let log = fs::File::create(dir.join("qemu.log")).map_err(|e| fail("qemu log", e))?;
        let mut cmd = Command::new("qemu-system-x86_64");
        cmd.args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ])
        .args(["-machine", "q35,accel=tcg", "-cpu", "max"])
        .args([
            "-smp",
            &cfg.cpus.to_string(),
            "-m",
            &cfg.memory_mib.to_string(),
        ])
        .arg("-kernel")
        .arg(&images.vmlinux)
        .arg("-initrd")
        .arg(&images.initramfs)
        .args(["-append", &append])
        .arg("-serial")
        .arg(format!("file:{}", dir.join("console.log").display()))
        .arg("-chardev")
        .arg(format!("socket,id=ctl,path={}", sock.display()))
        .args(["-serial", "chardev:ctl"])
        .arg("-virtfs")
        .arg(virtfs(&root_share, "root", true))
        .arg("-virtfs")
        .arg(virtfs(&dir.join("work"), "work", false));
        if cfg.systemd {
            cmd.arg("-virtfs").arg(virtfs(Path::new("/"), "host", true));
        }
        if cfg.swap_mib > 0 {
            cmd.arg("-drive").arg(format!(
                "file={},format=raw,if=virtio,cache=unsafe",
                swap.display()
            ));
        }
        let started = Instant::now();
        let log2 = log.try_clone().map_err(|e| fail("qemu log", e))?;
        let qemu = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| {
                VmError::Unavailable(Unavailable::new(format!(
                    "cannot start qemu-system-x86_64: {e}"
                )))
            })?;
        // The reaper: sleeps in `read` until this process's end closes the pipe, then kills qemu
        // and removes the runtime directory.
        let mut reaper = Command::new("sh")
            .args([
                "-c",
                "read _ || true; kill -KILL \"$1\" 2>/dev/null; sleep 0.5; rm -rf \"$2\"",
                "ebbtide-vm-reaper",
            ])
            .arg(qemu.id().to_string())
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| fail("reaper", e))?;
        let reaper_pipe = reaper.stdin.take();
        let mut vm = Vm {
            qemu,
            reaper_pipe,
            reaper,
            // Replaced once qemu connects; a placeholder pair until then.
            ctl: BufReader::new(UnixStream::pair().map_err(|e| fail("socketpair", e))?.0),
            dir,
            next_job: 1,
            dead: None,
            kernel: String::new(),
            boot_time: Duration::ZERO,
            images,
        };
        let deadline = started + cfg.boot_limit;
        let stream = vm.accept(&listener, deadline)?;
        vm.ctl = BufReader::new(stream);
        let ready = vm.read_line(deadline, "the agent's ready line")?;
        let Some(kernel) = ready.strip_prefix("ready ") else {
            return Err(vm.kill(format!("unexpected first line from the agent: {ready:?}")));
        };
        vm.kernel = kernel.trim().to_string();
        vm.boot_time = started.elapsed();
        Ok(vm)
    }

    /// The host side of [`GUEST_WORK`].
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// Whether the guest still runs (no job killed it).
    pub fn alive(&self) -> bool {
        self.dead.is_none()
    }

    /// Runs `job` and returns its output. A job past its limit is killed by the agent (status
    /// 137); a guest that does not answer within the limit plus 60 s is killed and the error
    /// says so (the `Vm` is then dead).
    pub fn run(&mut self, job: &Job) -> Result<Output, VmError> {
        if let Some(why) = &self.dead {
            return Err(VmError::Failed(format!("the guest is gone: {why}")));
        }
        let id = self.next_job;
        self.next_job += 1;
        let jd = self.dir.join("work/jobs").join(id.to_string());
        let io =
            |e: std::io::Error| VmError::Failed(format!("job directory {}: {e}", jd.display()));
        fs::create_dir_all(&jd).map_err(io)?;
        fs::set_permissions(&jd, fs::Permissions::from_mode(0o777)).map_err(io)?;
        fs::write(jd.join("script"), &job.script).map_err(io)?;
        let secs = job.limit.as_secs().max(1);
        let who = match job.user {
            Some((u, g)) => format!("setpriv --reuid={u} --regid={g} --clear-groups "),
            None => String::new(),
        };
        fs::write(
            jd.join("cmd"),
            format!("cd {GUEST_WORK}/jobs/{id} && exec timeout -s KILL {secs} {who}sh ./script\n"),
        )
        .map_err(io)?;
        let started = Instant::now();
        if let Err(e) = self
            .ctl
            .get_mut()
            .write_all(format!("run {id}\n").as_bytes())
        {
            return Err(self.kill(format!("writing to the agent: {e}")));
        }
        let line = self.read_line(
            started + job.limit + Duration::from_secs(60),
            "the job's end",
        )?;
        let host_time = started.elapsed();
        let mut w = line.split_whitespace();
        let (Some("done"), Some(rid), Some(rc)) = (w.next(), w.next(), w.next()) else {
            return Err(self.kill(format!("unexpected line from the agent: {line:?}")));
        };
        if rid != id.to_string() {
            return Err(self.kill(format!("the agent finished job {rid}, expected {id}")));
        }
        let code = rc.parse().unwrap_or(-1);
        let read = |n: &str| {
            String::from_utf8_lossy(&fs::read(jd.join(n)).unwrap_or_default()).into_owned()
        };
        Ok(Output {
            stdout: read("out"),
            stderr: read("err"),
            code,
            host_time,
        })
    }

    fn accept(
        &mut self,
        listener: &UnixListener,
        deadline: Instant,
    ) -> Result<UnixStream, VmError> {
        loop {
            self.check_alive("before connecting its control line")?;
            let mut pfd = libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the call's duration.
            let r = unsafe { libc::poll(&mut pfd, 1, 200) };
            if r > 0 {
                return listener
                    .accept()
                    .map(|(s, _)| s)
                    .map_err(|e| self.kill(format!("accepting qemu's control connection: {e}")));
            }
            if Instant::now() > deadline {
                return Err(self.kill("qemu did not connect its control line in time".into()));
            }
        }
    }

    /// One line from the agent by `deadline`, checking every 500 ms that qemu still runs.
    fn read_line(&mut self, deadline: Instant, what: &str) -> Result<String, VmError> {
        let mut buf = Vec::new();
        let _ = self
            .ctl
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(500)));
        loop {
            match self.ctl.read_until(b'\n', &mut buf) {
                Ok(0) => {
                    return Err(self.kill(format!(
                        "the guest closed its control line waiting for {what}"
                    )))
                }
                Ok(_) if buf.ends_with(b"\n") => {
                    let line = String::from_utf8_lossy(&buf).trim().to_string();
                    if line.is_empty() {
                        buf.clear();
                        continue;
                    }
                    return Ok(line);
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => {
                    return Err(
                        self.kill(format!("reading the control line waiting for {what}: {e}"))
                    )
                }
            }
            self.check_alive(what)?;
            if Instant::now() > deadline {
                return Err(self.kill(format!("timed out waiting for {what}")));
            }
        }
    }

    fn check_alive(&mut self, what: &str) -> Result<(), VmError> {
        match self.qemu.try_wait() {
            Ok(Some(st)) => Err(self.kill(format!("qemu exited ({st}) {what}"))),
            _ => Ok(()),
        }
    }

    /// Kills qemu, marks the guest dead and returns the error with the console's tail.
    fn kill(&mut self, why: String) -> VmError {
        let _ = self.qemu.kill();
        let _ = self.qemu.wait();
        let tail = |name: &str| {
            let s = fs::read_to_string(self.dir.join(name)).unwrap_or_default();
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(25)..].join("\n")
        };
        let msg = format!(
            "{why}\n--- guest console (tail)\n{}\n--- qemu (tail)\n{}",
            tail("console.log"),
            tail("qemu.log")
        );
        self.dead = Some(why);
        VmError::Failed(msg)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if self.dead.is_none() {
            let _ = self.ctl.get_mut().write_all(b"poweroff\n");
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end {
                if let Ok(Some(_)) = self.qemu.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.qemu.kill();
        let _ = self.qemu.wait();
        drop(self.reaper_pipe.take());
        let _ = self.reaper.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The host paths a job on the host's root uses that the guest's fresh `/tmp` and `/run` would
/// hide (`scripts/vm/agent.sh` mounts them back): this checkout and the test binary's target
/// directory when they lie there, `:`-separated; `None` when neither does. A checkout in
/// `/tmp` (a CI runner's, a user's scratch clone) otherwise found none of its own files in the
/// guest. A path with a character the kernel's command line or the list cannot carry is left
/// out (its jobs then fail naming the missing file).
fn kept_host_paths() -> Option<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap_or(root);
    // The binary runs from `<target>/<profile>/deps/`.
    let target = std::env::current_exe()
        .ok()
        .and_then(|e| e.ancestors().nth(3).map(Path::to_path_buf))
        .and_then(|t| t.canonicalize().ok());
    keep_list(std::iter::once(root).chain(target))
}

/// [`kept_host_paths`] of these paths, pure: those under `/tmp` or `/run`, none inside one
/// already listed, none with a blank, `:` or `"`.
fn keep_list(paths: impl IntoIterator<Item = PathBuf>) -> Option<String> {
    let hidden = |p: &Path| p.starts_with("/tmp") || p.starts_with("/run");
    let mut keep: Vec<String> = Vec::new();
    for p in paths {
        let s = p.to_string_lossy().to_string();
        let carried = !s.chars().any(|c| c.is_whitespace() || c == ':' || c == '"');
        let covered = keep.iter().any(|k| p.starts_with(k));
        if hidden(&p) && carried && !covered {
            keep.push(s);
        }
    }
    (!keep.is_empty()).then(|| keep.join(":"))
}

#[cfg(test)]
mod keep_tests {
    use super::*;

    #[test]
    fn only_paths_the_guest_tmp_and_run_hide_are_kept() {
        let l = |v: &[&str]| keep_list(v.iter().map(PathBuf::from));
        assert_eq!(l(&["/work/main", "/work/main/target"]), None);
        assert_eq!(l(&["/tmp/c", "/tmp/c/target"]).as_deref(), Some("/tmp/c"));
        assert_eq!(l(&["/work/main", "/tmp/t"]).as_deref(), Some("/tmp/t"));
        assert_eq!(l(&["/tmp/a", "/run/b"]).as_deref(), Some("/tmp/a:/run/b"));
        assert_eq!(l(&["/tmp/a b", "/tmp/x:y"]), None);
        assert_eq!(l(&["/tmpfoo"]), None);
    }
}
