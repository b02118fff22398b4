//! One child process: started with its output in files, in a process group of its own, waited
//! for with a deadline (the group SIGKILLed when it passes). Its peak RSS comes from the
//! launcher's report (`benches/c/malloc/launch.c`) when it was started through it, else from
//! `wait4`'s rusage (which, for a child spawned from this process, includes this process's own
//! high-water mark: see launch.c).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `prog` if it names a file, else the first `PATH` directory that has it.
pub fn which(prog: &str) -> Option<std::path::PathBuf> {
    if prog.contains('/') {
        return Path::new(prog)
            .is_file()
            .then(|| std::path::PathBuf::from(prog));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(prog))
            .find(|p| p.is_file())
    })
}

/// How a child ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// Killed by us after the deadline.
    Timeout(Duration),
}

impl Exit {
    pub fn ok(&self) -> bool {
        *self == Exit::Code(0)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit status {c}"),
            Exit::Signal(s) => write!(f, "killed by signal {s} ({})", signal_name(*s)),
            Exit::Timeout(d) => write!(f, "no exit within {} s (hang?), killed", d.as_secs()),
        }
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGKILL => "SIGKILL",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGTERM => "SIGTERM",
        _ => "?",
    }
}

/// A finished child.
pub struct Waited {
    pub exit: Exit,
    /// `ru_maxrss` of the child: its peak resident set, KiB.
    pub maxrss_kib: u64,
    /// From just before the spawn (as given to [`wait`]) to the exit.
    pub wall: Duration,
}

/// A finished child with what it printed.
pub struct Outcome {
    pub waited: Waited,
    pub stdout: String,
    pub stderr: String,
}

/// Starts `cmd` with stdin from `stdin` (or /dev/null) and stdout/stderr into `dir/NAME.out`
/// and `dir/NAME.err`, as the leader of a new process group; returns its pid.
pub fn spawn(
    cmd: &mut Command,
    stdin: Option<&Path>,
    dir: &Path,
    name: &str,
) -> Result<u32, String> {
    let open = |ext: &str| {
        let p = dir.join(format!("{name}.{ext}"));
        File::create(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))
    };
    cmd.stdout(Stdio::from(open("out")?))
        .stderr(Stdio::from(open("err")?))
        .process_group(0);
    match stdin {
        Some(p) => {
            let f = File::open(p).map_err(|e| format!("cannot open {}: {e}", p.display()))?;
            cmd.stdin(Stdio::from(f));
        }
        None => {
            cmd.stdin(Stdio::null());
        }
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    // The child is reaped by `wait` (wait4), not by std: dropping the handle leaves it alone.
    Ok(child.id())
}

/// Whether `pid` (our child) has exited, without reaping it.
pub fn exited(pid: u32) -> bool {
    // SAFETY: a zeroed siginfo_t is a valid out-parameter; waitid with WNOHANG|WNOWAIT only
    // inspects our own child and leaves it waitable.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r == 0 && info.si_pid() != 0
    }
}

/// Waits for our child `pid` at most `timeout`, then SIGKILLs it; reaps it with `wait4`.
/// `start` is when it was spawned (for the wall time).
pub fn wait(pid: u32, start: Instant, timeout: Duration) -> Waited {
    // The watchdog kills only while the child is unreaped: it holds `done` while killing, and
    // the child is reaped only after `done` is set (waitid WNOWAIT first), so the pid cannot
    // have been reused by then.
    let done = std::sync::Arc::new(std::sync::Mutex::new(false));
    let (tx, rx) = mpsc::channel::<()>();
    let d2 = done.clone();
    let dog = std::thread::spawn(move || {
        let left = timeout.saturating_sub(start.elapsed());
        if rx.recv_timeout(left).is_err() {
            let g = d2.lock().unwrap_or_else(|e| e.into_inner());
            if !*g {
                // SAFETY: `pid` is our unreaped child (see above) and leads its own process
                // group (spawn), so -pid names that group and nothing else; SIGKILL has no
                // other effect.
                unsafe {
                    libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
                return true;
            }
        }
        false
    });
    loop {
        // SAFETY: as in `exited`, blocking: waits for our own child without reaping it.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    let wall = start.elapsed();
    *done.lock().unwrap_or_else(|e| e.into_inner()) = true;
    let _ = tx.send(());
    let killed = dog.join().unwrap_or(false);
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter; wait4 reaps our exited child.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::wait4(pid as libc::pid_t, &mut status, 0, &mut ru);
        ru
    };
    let exit = if killed {
        Exit::Timeout(timeout)
    } else if libc::WIFEXITED(status) {
        Exit::Code(libc::WEXITSTATUS(status))
    } else {
        Exit::Signal(libc::WTERMSIG(status))
    };
    Waited {
        exit,
        maxrss_kib: ru.ru_maxrss.max(0) as u64,
        wall,
    }
}

/// The launcher's report (`maxrss_kib=N exit=C signal=S`): the program's exit and peak RSS.
pub fn read_report(path: &Path) -> Option<(Exit, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let get = |k: &str| -> Option<i64> {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    let (rss, code, sig) = (get("maxrss_kib")?, get("exit")?, get("signal")?);
    let exit = if sig != 0 {
        Exit::Signal(sig as i32)
    } else {
        Exit::Code(code as i32)
    };
    Some((exit, rss.max(0) as u64))
}

/// What the launcher reported replaces the launcher's own exit and rusage (unless it was
/// killed for the deadline, or wrote nothing: then the launcher's exit stands, RSS 0).
pub fn apply_report(w: &mut Waited, report: &Path) {
    if matches!(w.exit, Exit::Timeout(_)) {
        return;
    }
    match read_report(report) {
        Some((exit, rss)) => {
            w.exit = exit;
            w.maxrss_kib = rss;
        }
        None => w.maxrss_kib = 0,
    }
}

/// [`spawn`] + [`wait`] + what it printed; with `report`, the launcher's report (see
/// [`apply_report`]).
pub fn run(
    cmd: &mut Command,
    stdin: Option<&Path>,
    dir: &Path,
    name: &str,
    timeout: Duration,
    report: Option<&Path>,
) -> Result<Outcome, String> {
    let start = Instant::now();
    if let Some(r) = report {
        let _ = std::fs::remove_file(r);
    }
    let pid = spawn(cmd, stdin, dir, name)?;
    let mut waited = wait(pid, start, timeout);
    if let Some(r) = report {
        apply_report(&mut waited, r);
    }
    let read = |ext: &str| {
        std::fs::read(dir.join(format!("{name}.{ext}")))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    Ok(Outcome {
        waited,
        stdout: read("out"),
        stderr: read("err"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("mbench-child-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn exit_code_signal_timeout_and_rss() {
        let d = dir();
        let t = Duration::from_secs(20);
        let o = run(
            Command::new("sh").args(["-c", "echo hi; echo err >&2; exit 3"]),
            None,
            &d,
            "a",
            t,
            None,
        )
        .unwrap();
        assert_eq!(o.waited.exit, Exit::Code(3));
        assert_eq!(o.stdout, "hi\n");
        assert_eq!(o.stderr, "err\n");
        let o = run(
            Command::new("sh").args(["-c", "kill -SEGV $$"]),
            None,
            &d,
            "b",
            t,
            None,
        )
        .unwrap();
        assert_eq!(o.waited.exit, Exit::Signal(libc::SIGSEGV));
        let o = run(
            Command::new("sleep").arg("30"),
            None,
            &d,
            "c",
            Duration::from_millis(200),
            None,
        )
        .unwrap();
        assert!(
            matches!(o.waited.exit, Exit::Timeout(_)),
            "{:?}",
            o.waited.exit
        );
        assert!(o.waited.wall < Duration::from_secs(10));
        // A child that touches 64 MiB has a peak RSS of at least that.
        let o = run(
            Command::new("python3").args(["-c", "b = bytearray(64 << 20); print(len(b))"]),
            None,
            &d,
            "d",
            t,
            None,
        )
        .unwrap();
        assert!(o.waited.exit.ok());
        assert!(o.waited.maxrss_kib >= 64 * 1024, "{}", o.waited.maxrss_kib);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn launcher_report() {
        let d = dir().join("r");
        std::fs::create_dir_all(&d).unwrap();
        let r = d.join("report");
        std::fs::write(&r, "maxrss_kib=1500 exit=3 signal=0\n").unwrap();
        assert_eq!(read_report(&r), Some((Exit::Code(3), 1500)));
        std::fs::write(&r, "maxrss_kib=1564 exit=-1 signal=11\n").unwrap();
        assert_eq!(read_report(&r), Some((Exit::Signal(11), 1564)));
        let mut w = Waited {
            exit: Exit::Code(139),
            maxrss_kib: 9999,
            wall: Duration::ZERO,
        };
        apply_report(&mut w, &r);
        assert_eq!((w.exit.clone(), w.maxrss_kib), (Exit::Signal(11), 1564));
        let mut t = Waited {
            exit: Exit::Timeout(Duration::from_secs(1)),
            maxrss_kib: 5,
            wall: Duration::ZERO,
        };
        apply_report(&mut t, &r);
        assert!(matches!(t.exit, Exit::Timeout(_)));
        std::fs::write(&r, "garbage").unwrap();
        assert_eq!(read_report(&r), None);
        let _ = std::fs::remove_dir_all(&d);
    }
}
