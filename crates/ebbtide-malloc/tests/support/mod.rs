//! Running unmodified programs under glibc's malloc and under `libebbtide_malloc.so`
//! (`LD_PRELOAD`), for `tests/all/real_programs.rs`.
//!
//! * [`lib`] builds the library once per test process (a nested `cargo build -p ebbtide-malloc
//!   --profile test` into this test's own target directory: [`nested_build`], which the C API
//!   tests include too).
//! * [`run`] starts a program with its output in files, under one [`Malloc`], and kills its
//!   whole process group when it outlives its time limit (a hang is a failure, never a stuck
//!   test run).
//! * [`same_as_glibc`] is the check every real program gets: same exit status, same stdout, and
//!   no `ebbtide:` message on stderr.
//! * [`installed`] finds a program of a Debian package, or says which package is missing.

#![allow(dead_code)] // each helper is used by some tests of the file that includes this module

pub mod nested_build;

#[path = "../../../ebbtide/tests/support/skip.rs"]
pub mod skip;
use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The allocator a program runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malloc {
    /// The C library's own malloc (no preload).
    Glibc,
    /// `libebbtide_malloc.so` through `LD_PRELOAD`.
    Ebbtide,
}

impl Malloc {
    pub fn name(self) -> &'static str {
        match self {
            Malloc::Glibc => "glibc",
            Malloc::Ebbtide => "ebbtide",
        }
    }
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// `tests/programs/NAME` of this crate.
pub fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(name)
}

/// Builds `libebbtide_malloc.so` once per test process (test profile, this test's target
/// directory) and returns its path.
pub fn lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| build_lib("test", "debug"))
}

/// `cargo build -p ebbtide-malloc --profile PROFILE` into this test's target directory; the
/// library's path (`target/DIR/libebbtide_malloc.so`, `DIR` being where the profile builds).
pub fn build_lib(profile: &str, dir: &str) -> PathBuf {
    let lib = nested_build::cargo_build(&root(), "ebbtide-malloc", profile, dir)
        .join("libebbtide_malloc.so");
    assert!(lib.exists(), "{} missing after the build", lib.display());
    lib
}

/// The allocation functions a C program and the C library inside it call.
pub const C_NAMES: &[&str] = &[
    "malloc",
    "free",
    "calloc",
    "realloc",
    "posix_memalign",
    "aligned_alloc",
    "malloc_usable_size",
];

/// A fresh scratch directory for one test (removed first if a previous run left it).
pub fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("realprogs-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Whether `path` (a program of Debian package `package`) is installed. Missing, it fails the
/// test under CI (`CI` set: `.ci/run` installs the package) and is `false` otherwise, with a
/// message naming the package, so the caller skips.
pub fn installed(path: &str, package: &str) -> bool {
    if Path::new(path).exists() {
        return true;
    }
    skip::skip(
        &skip::current_test(),
        &format!("{path} is missing (apt-get install {package})"),
    );
    false
}

/// A command for `program` with nothing of the caller's environment that would change which
/// malloc it gets or how it behaves: no `LD_PRELOAD`, no `EBBTIDE_CONF`, no Python variables;
/// stdin from /dev/null unless the caller sets another.
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    for v in [
        "LD_PRELOAD",
        "LD_DEBUG",
        "LD_DEBUG_OUTPUT",
        "EBBTIDE_CONF",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONDEVMODE",
        "MALLOC_CHECK_",
        "GLIBC_TUNABLES",
    ] {
        c.env_remove(v);
    }
    c.env("LC_ALL", "C.UTF-8").env("TZ", "UTC");
    c.stdin(Stdio::null());
    c
}

/// What a finished program did.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub secs: f64,
}

impl Run {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// The last `n` lines of stderr, for failure messages.
    pub fn stderr_tail(&self, n: usize) -> String {
        tail(&self.stderr, n)
    }
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Sets `cmd` up to run under `malloc`.
pub fn with_malloc(cmd: &mut Command, malloc: Malloc) {
    match malloc {
        Malloc::Glibc => cmd.env_remove("LD_PRELOAD"),
        Malloc::Ebbtide => cmd.env("LD_PRELOAD", lib()),
    };
}

/// Runs `cmd` under `malloc` to the end, its stdout and stderr in `dir/TAG.{out,err}`; kills
/// its process group and fails the test after `limit`.
pub fn run(mut cmd: Command, malloc: Malloc, dir: &Path, tag: &str, limit: Duration) -> Run {
    with_malloc(&mut cmd, malloc);
    let out_path = dir.join(format!("{tag}.{}.out", malloc.name()));
    let err_path = dir.join(format!("{tag}.{}.err", malloc.name()));
    cmd.stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .process_group(0);
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{tag}: cannot start {:?}: {e}", cmd.get_program()));
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            // Where every process of the group stands, before it goes: a hang that does not
            // come back on demand is only understood from this.
            let stacks = hang_report(child.id() as i32);
            // SAFETY: kill(2) of the process group this test created; no memory involved.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            let err = std::fs::read_to_string(&err_path).unwrap_or_default();
            let out = std::fs::read_to_string(&out_path).unwrap_or_default();
            panic!(
                "{tag} under {}: still running after {limit:?}, killed (a hang)\n--- stdout (tail)\n{}\n--- stderr (tail)\n{}\n--- processes of the group\n{stacks}",
                malloc.name(),
                tail(&out, 30),
                tail(&err, 30)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let secs = t0.elapsed().as_secs_f64();
    // Whatever the program left running in its group (daemons it started) goes with it.
    // SAFETY: kill(2) of the process group this test created; no memory involved.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    Run {
        status,
        stdout: std::fs::read(&out_path).unwrap(),
        stderr: String::from_utf8_lossy(&std::fs::read(&err_path).unwrap()).into_owned(),
        secs,
    }
}

/// Every process of process group `pgid`: its command line, each thread's state and kernel
/// wait channel, and (where `gdb` is installed) every thread's backtrace.
fn hang_report(pgid: i32) -> String {
    let mut r = String::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return "(no /proc)".into();
    };
    for e in procs.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // Fields after the command's closing parenthesis: state, ppid, pgrp.
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        if rest.split(' ').nth(2).and_then(|g| g.parse::<i32>().ok()) != Some(pgid) {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        r.push_str(&format!("pid {pid}: {}\n", cmd.trim_end()));
        if let Ok(tasks) = std::fs::read_dir(e.path().join("task")) {
            for t in tasks.flatten() {
                let st = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                let state = st.rsplit_once(") ").map_or("?", |(_, x)| &x[..1]);
                let wchan = std::fs::read_to_string(t.path().join("wchan")).unwrap_or_default();
                r.push_str(&format!(
                    "  thread {} {state} {wchan}\n",
                    t.file_name().to_string_lossy()
                ));
            }
        }
        if let Ok(o) = Command::new("gdb")
            .args([
                "-q",
                "-batch",
                "-p",
                &pid.to_string(),
                "-ex",
                "thread apply all bt",
            ])
            .output()
        {
            for l in String::from_utf8_lossy(&o.stdout).lines() {
                if l.starts_with('#') || l.starts_with("Thread") {
                    // Frames of generic Rust code run long; the function and place fit in 200.
                    r.push_str(&format!("  {}\n", l.chars().take(200).collect::<String>()));
                }
            }
        }
    }
    r
}

/// How a process ended, for messages.
pub fn describe(s: &ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => format!("{s}"),
    }
}

/// Fails the test unless stderr is free of the malloc's messages.
pub fn no_ebbtide_messages(what: &str, r: &Run) {
    let bad: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("ebbtide:"))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: the malloc complained on stderr:\n{}",
        bad.join("\n")
    );
}

/// The check of a real program: `glibc` succeeded (else the test itself is wrong), `ebbtide`
/// ended the same way, printed the same stdout, and said nothing on stderr as the malloc.
pub fn same_as_glibc(what: &str, glibc: &Run, ebbtide: &Run) {
    assert!(
        glibc.status.success(),
        "{what} fails under glibc already ({}): the test is wrong\n{}",
        describe(&glibc.status),
        glibc.stderr_tail(30)
    );
    assert_eq!(
        describe(&glibc.status),
        describe(&ebbtide.status),
        "{what}: under ebbtide it ended differently\n--- stderr under ebbtide (tail)\n{}",
        ebbtide.stderr_tail(40)
    );
    if glibc.stdout != ebbtide.stdout {
        let g = glibc.stdout_str();
        let e = ebbtide.stdout_str();
        let (i, (a, b)) = g
            .lines()
            .zip(e.lines())
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .unwrap_or((g.lines().count().min(e.lines().count()), ("<end>", "<end>")));
        panic!(
            "{what}: stdout differs from glibc's (glibc {} lines, ebbtide {} lines); first difference at line {}:\n  glibc:   {a}\n  ebbtide: {b}\n--- stderr under ebbtide (tail)\n{}",
            g.lines().count(),
            e.lines().count(),
            i + 1,
            ebbtide.stderr_tail(20)
        );
    }
    no_ebbtide_messages(what, ebbtide);
}

/// Compiles `source` (C or C++ by its extension) into `dir/NAME` with the system compilers
/// (`cc`, `g++`) and returns the executable, or `None` (skip) when the compiler is missing.
pub fn compile(source: &Path, dir: &Path, extra: &[&str]) -> Option<PathBuf> {
    let cpp = source.extension().is_some_and(|e| e == "cpp");
    let (compiler, package) = if cpp {
        ("/usr/bin/g++", "g++")
    } else {
        ("/usr/bin/cc", "gcc")
    };
    if !installed(compiler, package) {
        return None;
    }
    let exe = dir.join(source.file_stem().unwrap());
    // Linked under another name and renamed into place: a path that is run is never a file a
    // linker still has open for writing (exec would fail with "Text file busy").
    let partial = dir.join(format!(
        "{}.partial",
        source.file_stem().unwrap().to_string_lossy()
    ));
    let mut c = Command::new(compiler);
    if cpp {
        c.arg("-std=c++17");
    } else {
        c.arg("-std=gnu11");
    }
    let out = c
        .args(["-O2", "-g", "-pthread", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&partial)
        .arg(source)
        .args(extra)
        .output()
        .expect("run the compiler");
    assert!(
        out.status.success(),
        "{compiler} {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&partial, &exe).unwrap();
    Some(exe)
}
