//! Shared helpers of the `pressure_*` integration tests: a scratch v1 memory cgroup that is
//! always removed, and a memory hog child process driven over stdin/stdout.
//!
//! The hog is the test binary itself, re-executed with `--ignored --exact MODULE::hog_main` and
//! `EBBTIDE_HOG=1`; each test file that uses it defines
//! `#[test] #[ignore] fn hog_main() { pressure_support::hog_main() }`.
//! Commands (one per line on stdin): `grow <MiB>` touches anonymous memory up to that total and
//! answers `ok <MiB>`; `thrash <path> <secs>` reads the file over and over for that long
//! (page cache churn inside the cgroup limit = reclaim stalls) and answers `done`.

#![allow(dead_code)]

#[path = "../support/skip.rs"]
pub mod skip;
use std::ffi::CString;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const V1_MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";
pub const PREFIX: &str = "ebbtide-test-";

/// True if running as root; otherwise prints why the test is skipped.
pub fn require_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        skip::skip(test, &format!("needs root to create cgroups (euid {euid})"));
        return false;
    }
    true
}

/// True if the cgroup v1 memory hierarchy is mounted with pressure_level support.
pub fn require_v1_memory(test: &str) -> bool {
    let ok = Path::new(V1_MEMORY_ROOT)
        .join("memory.pressure_level")
        .exists();
    if !ok {
        skip::skip(
            test,
            &format!("no cgroup v1 memory hierarchy at {V1_MEMORY_ROOT}"),
        );
    }
    ok
}

fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn procs(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Kill every process in `dir`, move any survivors to the parent, rmdir (retried: the
/// kernel needs a moment after the last task exits).
fn remove_cgroup(dir: &Path) {
    for p in procs(dir) {
        if let Ok(pid) = p.parse::<i32>() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let parent = dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(V1_MEMORY_ROOT));
    for _ in 0..200 {
        for p in procs(dir) {
            let _ = fs::write(parent.join("cgroup.procs"), p);
        }
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    eprintln!("warning: could not remove cgroup {}", dir.display());
}

/// Remove leftovers of earlier crashed runs: `ebbtide-test-<pid>-<n>` whose pid is dead.
fn remove_leftovers() {
    let Ok(rd) = fs::read_dir(V1_MEMORY_ROOT) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid: i32 = rest
            .split('-')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if pid != std::process::id() as i32 && !pid_alive(pid) {
            eprintln!("removing leftover cgroup {}", e.path().display());
            remove_cgroup(&e.path());
        }
    }
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A scratch v1 memory cgroup with a limit; Drop kills its tasks and removes it, also on panic.
pub struct ScratchCgroup {
    pub dir: PathBuf,
}

impl ScratchCgroup {
    pub fn new(limit_bytes: u64) -> ScratchCgroup {
        remove_leftovers();
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = Path::new(V1_MEMORY_ROOT).join(format!("{PREFIX}{}-{n}", std::process::id()));
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let g = ScratchCgroup { dir };
        fs::write(g.dir.join("memory.limit_in_bytes"), limit_bytes.to_string()).unwrap_or_else(
            |e| panic!("setting memory.limit_in_bytes of {}: {e}", g.dir.display()),
        );
        // No swap on these machines; keep it explicit so the hog cannot swap elsewhere.
        let _ = fs::write(g.dir.join("memory.swappiness"), "0");
        g
    }

    pub fn usage(&self) -> u64 {
        fs::read_to_string(self.dir.join("memory.usage_in_bytes"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for ScratchCgroup {
    fn drop(&mut self) {
        remove_cgroup(&self.dir);
    }
}

/// Makes `cmd`'s child join `cgroup` (v1 or v2: writes "0" to its `cgroup.procs`) between fork
/// and exec, so everything it allocates is charged there from its first instruction.
pub fn join_cgroup_before_exec(cmd: &mut Command, cgroup: &Path) {
    let procs = CString::new(cgroup.join("cgroup.procs").as_os_str().as_bytes()).unwrap();
    // SAFETY: the hook only calls async-signal-safe functions (open, write, close) on data
    // prepared before fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // "0" = the writing process itself.
            let r = libc::write(fd, b"0".as_ptr().cast(), 1);
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            if r != 1 {
                return Err(e);
            }
            Ok(())
        });
    }
}

/// The hog child process, placed in a cgroup before it runs any code of its own.
pub struct Hog {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Hog {
    /// Start the hog inside `cgroup` (its pid is written to `cgroup.procs` between fork and
    /// exec, so everything it allocates is charged there).
    pub fn spawn(cgroup: &Path) -> Hog {
        let exe = std::env::current_exe().expect("current_exe");
        // The test `hog_main` beside the module that includes this file: test names are module
        // paths without the crate's (`all::pressure_psi::pressure_support` -> `pressure_psi::hog_main`).
        let here = module_path!();
        let hog_main = format!(
            "{}::hog_main",
            &here[here.find("::").map_or(0, |i| i + 2)..here.rfind("::").unwrap_or(0)]
        );
        let mut cmd = Command::new(exe);
        cmd.args([
            "--ignored",
            "--exact",
            &hog_main,
            "--nocapture",
            "--test-threads=1",
        ])
        .env("EBBTIDE_HOG", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        join_cgroup_before_exec(&mut cmd, cgroup);
        let mut child = cmd.spawn().expect("spawning the hog");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Hog {
            child,
            stdin,
            stdout,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send a command; returns the reply line, or None if the hog died (OOM-killed).
    pub fn cmd(&mut self, line: &str) -> Option<String> {
        writeln!(self.stdin, "{line}").ok()?;
        self.stdin.flush().ok()?;
        self.reply()
    }

    /// Send a command without waiting for the reply.
    pub fn send(&mut self, line: &str) -> bool {
        writeln!(self.stdin, "{line}").is_ok() && self.stdin.flush().is_ok()
    }

    pub fn reply(&mut self) -> Option<String> {
        loop {
            let mut s = String::new();
            if self.stdout.read_line(&mut s).ok()? == 0 {
                return None;
            }
            // The test harness prints its own text ("running 1 test", "test hog_main ... "
            // without a newline): look for the marker anywhere in the line.
            if let Some(i) = s.find("HOG ") {
                return Some(s[i + 4..].trim().to_string());
            }
        }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Body of the hog process (call from an `#[ignore]`d `hog_main` test).
pub fn hog_main() {
    if std::env::var_os("EBBTIDE_HOG").is_none() {
        eprintln!("hog_main is the memory hog helper of the pressure tests; nothing to do");
        return;
    }
    let mut held: Vec<Box<[u8]>> = Vec::new();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["grow", mib] => {
                let mib: usize = mib.parse().unwrap();
                while held.len() < mib {
                    let mut b = vec![0u8; 1 << 20].into_boxed_slice();
                    for i in (0..b.len()).step_by(4096) {
                        b[i] = 1;
                    }
                    held.push(b);
                }
                let _ = writeln!(out, "HOG ok {}", held.len());
            }
            ["thrash", path, secs] => {
                let end = Instant::now() + Duration::from_secs(secs.parse().unwrap());
                let mut buf = vec![0u8; 1 << 20];
                while Instant::now() < end {
                    let mut f = fs::File::open(path).unwrap();
                    while f.read(&mut buf).unwrap_or(0) > 0 {}
                }
                let _ = writeln!(out, "HOG done");
            }
            ["exit"] => break,
            _ => {
                let _ = writeln!(out, "HOG error unknown command {line:?}");
            }
        }
        let _ = out.flush();
    }
}

/// A scratch directory under the temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `tag` must not contain '-'. Leftovers of crashed runs (dead pid) are removed first.
    pub fn new(tag: &str) -> TempDir {
        if let Ok(rd) = fs::read_dir(std::env::temp_dir()) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(rest) = name.strip_prefix(PREFIX) else {
                    continue;
                };
                let pid: i32 = rest
                    .split('-')
                    .nth(1)
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
                if pid > 0 && pid != std::process::id() as i32 && !pid_alive(pid) {
                    let _ = fs::remove_dir_all(e.path());
                }
            }
        }
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("{PREFIX}{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Create a file of `mib` MiB of non-zero data (written to disk, so its page cache is
/// reclaimable).
pub fn make_file(path: &Path, mib: usize) {
    let mut f = fs::File::create(path).unwrap();
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..mib {
        f.write_all(&chunk).unwrap();
    }
    f.sync_all().unwrap();
    // Evict it from the page cache so the hog's reads charge it to the hog's cgroup.
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise takes no pointers; `f` is an open file.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}
