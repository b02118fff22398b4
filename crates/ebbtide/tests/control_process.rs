// A test binary of its own, outside tests/all/: its children exit with the control socket open; the socket and its tunable are the process's.
//! Process life of the control socket: removed at exit, not served by a forked child, stale
//! sockets of dead processes cleaned, a hostile directory refused.
//!
//! The exit cases run this test binary again as a child (`CONTROL_PROCESS_CHILD=<case>`),
//! because a process can exit only once.

use ebbtide::control;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The tests spawn children and one sets an environment variable: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn ping(path: &Path) -> std::io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"ping\n")?;
    let mut out = vec![0u8; 64];
    let n = s.read(&mut out)?;
    Ok(String::from_utf8_lossy(&out[..n]).into_owned())
}

/// Child side: start, print the path, exit in the way `case` says.
fn child(case: &str) {
    let p = if case == "env" {
        // Only the environment (EBBTIDE_CONTROL_SOCKET=1) and the tunable subscription made
        // by the module's load-time constructor.
        assert!(ebbtide::options::init_from_env().is_empty());
        control::socket_path().expect("EBBTIDE_CONTROL_SOCKET=1 started the server")
    } else {
        control::start().unwrap()
    };
    if case == "env" {
        println!("\nSOCKET={}", p.display());
        assert!(p.exists());
        return;
    }
    println!("\nSOCKET={}", p.display());
    std::io::stdout().flush().unwrap();
    match case {
        "exit" => std::process::exit(0),
        "return" => {}
        "kill" => {
            // SAFETY: raising SIGKILL on ourselves has no memory-safety preconditions.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        }
        other => panic!("unknown case {other}"),
    }
}

fn run_child(case: &str, xdg: &Path) -> PathBuf {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env("CONTROL_PROCESS_CHILD", case)
        .env("XDG_RUNTIME_DIR", xdg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("SOCKET="))
        .unwrap_or_else(|| panic!("no socket path from the child: {text}"));
    PathBuf::from(line)
}

#[test]
fn child_entry() {
    if let Ok(case) = std::env::var("CONTROL_PROCESS_CHILD") {
        child(&case);
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ebbtide-ctlproc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn exit_removes_the_socket_and_kill_leaves_a_stale_one_that_is_cleaned() {
    if std::env::var_os("CONTROL_PROCESS_CHILD").is_some() {
        return;
    }
    let _g = serial();
    let xdg = scratch("exit");
    for case in ["exit", "return"] {
        let p = run_child(case, &xdg);
        assert!(p.starts_with(xdg.join("ebbtide")), "{}", p.display());
        assert!(!p.exists(), "{case}: {} left behind", p.display());
    }
    let stale = run_child("kill", &xdg);
    assert!(stale.exists(), "SIGKILL cannot clean up");
    // The next server in the same directory removes it.
    let p = run_child("exit", &xdg);
    assert!(
        !stale.exists(),
        "stale socket {} not cleaned",
        stale.display()
    );
    assert!(!p.exists());
    std::fs::remove_dir_all(&xdg).unwrap();
}

#[test]
fn refuses_a_directory_of_another_owner_or_too_open() {
    if std::env::var_os("CONTROL_PROCESS_CHILD").is_some() {
        return;
    }
    let _g = serial();
    use std::os::unix::fs::PermissionsExt;
    let xdg = scratch("open");
    std::fs::create_dir(xdg.join("ebbtide")).unwrap();
    std::fs::set_permissions(xdg.join("ebbtide"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture"])
        .env("CONTROL_PROCESS_CHILD", "exit")
        .env("XDG_RUNTIME_DIR", &xdg)
        .output()
        .unwrap();
    // It falls back to /tmp/ebbtide-<uid> rather than using the open directory.
    let text = String::from_utf8_lossy(&out.stdout);
    let uid = control::path::euid();
    assert!(
        text.contains(&format!("/tmp/ebbtide-{uid}/")),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_dir(xdg.join("ebbtide")).unwrap().count(), 0);
    let e = control::path::ensure_private_dir(&xdg.join("ebbtide"), uid).unwrap_err();
    assert!(e.to_string().contains("mode 777"), "{e}");
    std::fs::remove_dir_all(&xdg).unwrap();
}

#[test]
fn forked_child_does_not_serve_the_parents_socket() {
    if std::env::var_os("CONTROL_PROCESS_CHILD").is_some() {
        return;
    }
    let _g = serial();
    let xdg = scratch("fork");
    // SAFETY: set before the server starts; no other test in this binary reads it
    // concurrently (the others pass it to children through Command::env).
    unsafe { std::env::set_var("XDG_RUNTIME_DIR", &xdg) };
    let path = control::start().unwrap();
    assert_eq!(ping(&path).unwrap(), "ok 5\npong\n");
    // SAFETY: the child only calls async-signal-safe functions and functions that are safe
    // after fork in a glibc process (the control module's checks, stat, _exit): it never
    // takes a lock another parent thread could hold, except the control module's own state
    // lock, which the parent does not hold while forking here.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // Child: no control thread, no socket of its own, and the parent's socket untouched.
        let code = if control::is_running() {
            1
        } else if !path.exists() {
            2
        } else {
            0
        };
        // SAFETY: _exit ends the child without running the parent's atexit handlers twice.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child; `status` is valid for writing.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert!(libc::WIFEXITED(status), "child status {status}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "1: child serves; 2: socket gone"
    );
    // The parent still serves.
    assert_eq!(ping(&path).unwrap(), "ok 5\npong\n");

    // A child that exits normally (running atexit handlers) leaves the parent's socket alone,
    // and a child may start its own.
    // SAFETY: the child calls only functions that are safe after fork in a glibc process (the
    // control module's start, exit): the one lock it takes that a parent thread could hold, the
    // control module's state lock, is not held by the parent while it forks here.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = match control::start() {
            Ok(p) if p != path && p.exists() => 0,
            Ok(_) => 3,
            Err(_) => 4,
        };
        // A normal exit: atexit handlers run in the child.
        std::process::exit(code);
    }
    // SAFETY: waiting for our own child; `status` is valid for writing.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "3: same path; 4: start failed"
    );
    assert!(path.exists(), "a child's exit removed the parent's socket");
    assert!(
        !control::path::socket_path_in(path.parent().unwrap(), pid as u32).exists(),
        "the child's own socket is removed at its exit"
    );
    assert_eq!(ping(&path).unwrap(), "ok 5\npong\n");
    control::stop();
    assert!(!path.exists());
    std::fs::remove_dir_all(&xdg).unwrap();
}

#[test]
fn the_environment_turns_it_on() {
    if std::env::var_os("CONTROL_PROCESS_CHILD").is_some() {
        return;
    }
    let _g = serial();
    let xdg = scratch("env");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture"])
        .env("CONTROL_PROCESS_CHILD", "env")
        .env("EBBTIDE_CONTROL_SOCKET", "1")
        .env("XDG_RUNTIME_DIR", &xdg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let sock = text
        .lines()
        .find_map(|l| l.strip_prefix("SOCKET="))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(sock.starts_with(&xdg.join("ebbtide").display().to_string()));
    assert!(!Path::new(sock).exists(), "removed at exit");
    std::fs::remove_dir_all(&xdg).unwrap();
}
