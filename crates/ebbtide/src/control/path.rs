//! Where control sockets live, and the checks that make the directory safe to use.
//!
//! One socket per process, named `<pid>.sock`, in
//!
//! 1. `$XDG_RUNTIME_DIR/ebbtide/` when `XDG_RUNTIME_DIR` is set to an absolute path, else
//! 2. `/tmp/ebbtide-<uid>/`.
//!
//! The directory is created with mode 0700. Before it is used it must be a real directory (not
//! a symbolic link), owned by the effective uid, with no access for group or others; otherwise
//! the server refuses to start and says which check failed. (In `/tmp` anybody could have
//! created `ebbtide-<uid>` first; these checks keep another user from seeing or replacing our
//! socket.)

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// File name suffix of a control socket.
pub const SUFFIX: &str = ".sock";

/// The candidate directories for `uid`, in the order the server picks one: from
/// `xdg_runtime_dir` (if given, absolute and non-empty), then `/tmp/ebbtide-<uid>`.
pub fn candidate_dirs(xdg_runtime_dir: Option<OsString>, uid: u32) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(x) = xdg_runtime_dir {
        let p = PathBuf::from(x);
        if p.is_absolute() {
            v.push(p.join("ebbtide"));
        }
    }
    v.push(PathBuf::from(format!("/tmp/ebbtide-{uid}")));
    v
}

/// The directory this process serves its socket in (from the environment and the effective
/// uid). Not created or checked here: see [`ensure_private_dir`].
pub fn socket_dir() -> PathBuf {
    candidate_dirs(std::env::var_os("XDG_RUNTIME_DIR"), euid())
        .into_iter()
        .next()
        .expect("candidate_dirs always yields the /tmp fallback")
}

/// `<dir>/<pid>.sock`.
pub fn socket_path_in(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}{SUFFIX}"))
}

/// The process id a socket file name stands for (`"123.sock"` → 123).
pub fn pid_of(file_name: &std::ffi::OsStr) -> Option<u32> {
    let s = std::str::from_utf8(file_name.as_bytes()).ok()?;
    let digits = s.strip_suffix(SUFFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&p| p > 0)
}

/// The effective uid.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether a process with this pid exists (it may belong to another user).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks for existence and permission; no signal is sent.
    let r = unsafe { libc::kill(p, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Create `dir` (mode 0700, parents as needed) if it is missing, then check it: a directory,
/// not a symbolic link, owned by `uid`, no group or other permissions. The error names the
/// directory and the failed check.
pub fn ensure_private_dir(dir: &Path, uid: u32) -> io::Result<()> {
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() && !parent.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: parent directory does not exist", dir.display()),
            ));
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot create {}: {e}", dir.display()),
            ))
        }
    }
    check_private_dir(dir, uid)
}

/// The checks of [`ensure_private_dir`] without creating anything.
pub fn check_private_dir(dir: &Path, uid: u32) -> io::Result<()> {
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing socket directory {}: {why}", dir.display()),
        ))
    };
    let md = std::fs::symlink_metadata(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot stat {}: {e}", dir.display())))?;
    if md.file_type().is_symlink() {
        return refuse("it is a symbolic link".into());
    }
    if !md.is_dir() {
        return refuse("it is not a directory".into());
    }
    if md.uid() != uid {
        return refuse(format!("owned by uid {}, not by uid {uid}", md.uid()));
    }
    if md.mode() & 0o077 != 0 {
        return refuse(format!(
            "mode {:03o} gives access to group or others (want 0700)",
            md.mode() & 0o777
        ));
    }
    Ok(())
}

/// Remove sockets in `dir` whose process is gone. Returns the paths removed. Files that are
/// not `<pid>.sock` sockets are left alone. It runs in the program's process (the control
/// thread's start): the directory is read through a library descriptor, above the numbers the
/// program's next `open` or `dup` takes ([`names_in`]).
pub fn remove_stale(dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(names) = names_in(dir) else {
        return removed;
    };
    for name in names {
        let Some(pid) = pid_of(&name) else {
            continue;
        };
        let path = dir.join(&name);
        let is_socket = std::fs::symlink_metadata(&path)
            .map(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
            .unwrap_or(false);
        if is_socket && !pid_alive(pid) && std::fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

/// The names in directory `dir` but `.` and `..`, read through a descriptor moved above the
/// program's numbers at once (`ebbtide_pressure::libfd`): `std::fs::read_dir` would hold the
/// lowest free number for the whole listing, on our thread, while the program runs.
fn names_in(dir: &Path) -> io::Result<Vec<OsString>> {
    use std::os::unix::ffi::OsStringExt;
    let held = ebbtide_pressure::fs::open(dir, libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(|e| io::Error::other(e.to_string()))?;
    // The stream takes a descriptor of its own (closed by `closedir`), as high as `held`.
    // SAFETY: F_DUPFD_CLOEXEC only reads its integer argument.
    let d = unsafe { libc::fcntl(held.raw(), libc::F_DUPFD_CLOEXEC, held.raw()) };
    if d < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `d` is an open directory descriptor we own; the stream owns it from here.
    let stream = unsafe { libc::fdopendir(d) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `d` is still ours to close.
        unsafe { libc::close(d) };
        return Err(e);
    }
    let mut names = Vec::new();
    loop {
        // SAFETY: a live stream; the entry it returns is valid until the next call on it.
        let e = unsafe { libc::readdir(stream) };
        if e.is_null() {
            break;
        }
        // SAFETY: `d_name` of a returned entry is a NUL-terminated name.
        let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes();
        if name != b"." && name != b".." {
            names.push(OsString::from_vec(name.to_vec()));
        }
    }
    // SAFETY: the stream from fdopendir above, closed once (with its descriptor).
    unsafe { libc::closedir(stream) };
    Ok(names)
}

/// The `<pid>.sock` sockets in `dir` as `(pid, path)`, sorted by pid, whether or not their
/// process is alive.
pub fn list_dir(dir: &Path) -> io::Result<Vec<(u32, PathBuf)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let Some(pid) = pid_of(&e.file_name()) else {
            continue;
        };
        let is_socket = e
            .file_type()
            .map(|t| std::os::unix::fs::FileTypeExt::is_socket(&t))
            .unwrap_or(false);
        if is_socket {
            v.push((pid, e.path()));
        }
    }
    v.sort();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("ebbtide-path-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn candidates() {
        assert_eq!(
            candidate_dirs(Some("/run/user/5".into()), 5),
            vec![
                PathBuf::from("/run/user/5/ebbtide"),
                "/tmp/ebbtide-5".into()
            ]
        );
        assert_eq!(
            candidate_dirs(Some("relative".into()), 7),
            vec![PathBuf::from("/tmp/ebbtide-7")]
        );
        assert_eq!(
            candidate_dirs(None, 0),
            vec![PathBuf::from("/tmp/ebbtide-0")]
        );
    }

    #[test]
    fn pid_names() {
        assert_eq!(pid_of("123.sock".as_ref()), Some(123));
        assert_eq!(pid_of("0.sock".as_ref()), None);
        assert_eq!(pid_of("x.sock".as_ref()), None);
        assert_eq!(pid_of(".sock".as_ref()), None);
        assert_eq!(pid_of("12.sock.bak".as_ref()), None);
        assert_eq!(pid_of("+12.sock".as_ref()), None);
    }

    #[test]
    fn private_dir_checks() {
        let d = tmp("priv");
        ensure_private_dir(&d, euid()).unwrap();
        let md = std::fs::metadata(&d).unwrap();
        assert_eq!(md.mode() & 0o777, 0o700);
        // Idempotent.
        ensure_private_dir(&d, euid()).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = ensure_private_dir(&d, euid()).unwrap_err().to_string();
        assert!(e.contains("mode 755"), "{e}");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = ensure_private_dir(&d, euid() + 1).unwrap_err().to_string();
        assert!(e.contains("owned by uid"), "{e}");
        let link = tmp("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let e = ensure_private_dir(&link, euid()).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let file = d.join("plain");
        std::fs::write(&file, b"x").unwrap();
        let e = ensure_private_dir(&file, euid()).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn stale_sockets_are_removed() {
        let d = tmp("stale");
        ensure_private_dir(&d, euid()).unwrap();
        // A pid far above pid_max (4194304 at most on Linux) is never alive.
        let dead = socket_path_in(&d, 999_999_999);
        let live = socket_path_in(&d, std::process::id());
        let _a = std::os::unix::net::UnixListener::bind(&dead).unwrap();
        let _b = std::os::unix::net::UnixListener::bind(&live).unwrap();
        std::fs::write(d.join("42.txt"), b"").unwrap();
        assert_eq!(list_dir(&d).unwrap().len(), 2);
        assert_eq!(remove_stale(&d), vec![dead.clone()]);
        assert!(!dead.exists());
        assert!(live.exists());
        assert!(d.join("42.txt").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
