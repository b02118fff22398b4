//! Finding a process's control socket and talking to it: one connection per request.
//!
//! A request has one deadline for all of it (connect, send, reply), and the connect never
//! waits: a process that is stopped or stalled, whose listen queue is full, is reported at once
//! instead of blocking the caller.

use crate::error::CliError;
use ebbtide::control::path;
use ebbtide::control::protocol::{decode_reply, Reply, ReplyError, Request};
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long we wait for a reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The effective uid of `pid` (from `/proc/<pid>/status`).
pub fn process_uid(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The command name of `pid` (`/proc/<pid>/comm`), or `?`.
pub fn process_comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The cgroup whose memory limit applies to `pid`, from `/proc/<pid>/cgroup`: the path of the
/// cgroup v1 `memory` controller's hierarchy when the memory controller is bound to v1 (hybrid
/// hosts), else the cgroup v2 path (the `0::` line). Empty when unreadable.
pub fn process_cgroup(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map(|s| cgroup_of(&s))
        .unwrap_or_default()
}

/// [`process_cgroup`] of the text of a `/proc/<pid>/cgroup` file.
pub fn cgroup_of(text: &str) -> String {
    let mut unified = None;
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return path.to_string();
        }
        if id == "0" && controllers.is_empty() {
            unified = Some(path.to_string());
        }
    }
    unified.unwrap_or_default()
}

/// Every directory that may hold control sockets: our own socket directories, every
/// `/tmp/ebbtide-<uid>/` and every `/run/user/<uid>/ebbtide/` (whether we may read them or not).
pub fn all_socket_dirs() -> Vec<PathBuf> {
    let mut dirs = dirs_for(None, None);
    let mut add_glob = |parent: &str, prefix: &str, child: Option<&str>| {
        if let Ok(rd) = std::fs::read_dir(parent) {
            let mut found: Vec<PathBuf> = rd
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .map(|e| match child {
                    Some(c) => e.path().join(c),
                    None => e.path(),
                })
                .collect();
            found.sort();
            for d in found {
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
        }
    };
    add_glob("/tmp", "ebbtide-", None);
    add_glob("/run/user", "", Some("ebbtide"));
    dirs
}

/// `XDG_RUNTIME_DIR` from the environment of `pid`, if we may read it.
fn process_xdg(pid: u32) -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"XDG_RUNTIME_DIR="))
        .map(|v| std::ffi::OsStr::from_bytes(v).to_os_string())
}

/// Every directory a socket of a process running as `uid` (with `xdg` in its environment)
/// may be in, ours first, without duplicates.
pub fn dirs_for(uid: Option<u32>, xdg: Option<std::ffi::OsString>) -> Vec<PathBuf> {
    let mut dirs = path::candidate_dirs(std::env::var_os("XDG_RUNTIME_DIR"), path::euid());
    if let Some(uid) = uid {
        dirs.extend(path::candidate_dirs(xdg, uid));
        dirs.extend(path::candidate_dirs(
            Some(format!("/run/user/{uid}").into()),
            uid,
        ));
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for d in dirs {
        if !out.contains(&d) {
            out.push(d);
        }
    }
    out
}

/// The control socket of `pid`, with clear errors for a missing process, a process without a
/// socket, and a socket we may not reach.
pub fn find_socket(pid: u32) -> Result<PathBuf, CliError> {
    if pid == 0 || !path::pid_alive(pid) {
        return Err(CliError::NoSuchProcess(pid));
    }
    let uid = process_uid(pid);
    let mut looked = Vec::new();
    let mut denied = None;
    for dir in dirs_for(uid, process_xdg(pid)) {
        let sock = path::socket_path_in(&dir, pid);
        match std::fs::symlink_metadata(&sock) {
            Ok(md) if md.file_type().is_socket() => return Ok(sock),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                let owner = std::fs::metadata(&dir)
                    .map(|m| format!("uid {}", m.uid()))
                    .unwrap_or_else(|_| "another user".into());
                denied.get_or_insert(format!(
                    "cannot look into {} (owned by {owner}, mode 0700; you are uid {}): only \
                     the same user or root may use the control socket",
                    dir.display(),
                    path::euid()
                ));
            }
            Err(_) => {}
        }
        looked.push(sock);
    }
    if let Some(detail) = denied {
        return Err(CliError::PermissionDenied { pid, detail });
    }
    Err(CliError::NoSocket {
        pid,
        comm: process_comm(pid),
        looked,
    })
}

/// `connect(2)` to the Unix stream socket at `path` without waiting: a listener whose queue of
/// pending connections is full (its process stopped or stalled) gives `EAGAIN` at once.
fn connect_now(path: &Path) -> io::Result<UnixStream> {
    // SAFETY: socket(2) has no memory preconditions; the result is checked below.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a descriptor socket(2) just returned to us, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path too long or not a path: {} ({} bytes; at most {})",
                path.display(),
                bytes.len(),
                addr.sun_path.len() - 1
            ),
        ));
    }
    for (d, &b) in addr.sun_path.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: (1) `fd` is an open socket; (2) `addr` is an initialised sockaddr_un and `len`
    // (at most its size, checked above) covers the family, the path and its NUL; (3) the
    // kernel only reads `addr` during the call.
    let r = unsafe {
        libc::connect(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let s = UnixStream::from(fd);
    s.set_nonblocking(false)?;
    Ok(s)
}

/// Connect to `sock` (of `pid`), mapping errors to their meaning; reads and writes on the
/// stream then wait at most `timeout` each.
pub fn connect(pid: u32, sock: &Path, timeout: Duration) -> Result<UnixStream, CliError> {
    let s = connect_now(sock).map_err(|e| match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => CliError::PermissionDenied {
            pid,
            detail: format!(
                "cannot connect to {} ({e}; it is mode 0600 and you are uid {}): only the \
                 same user or root may use the control socket",
                sock.display(),
                path::euid()
            ),
        },
        Some(libc::ECONNREFUSED) => CliError::Stale(sock.to_path_buf()),
        Some(libc::ENOENT) => CliError::NoSocket {
            pid,
            comm: process_comm(pid),
            looked: vec![sock.to_path_buf()],
        },
        Some(libc::EAGAIN) => CliError::Io {
            what: format!(
                "process {pid} does not accept connections on {} (its queue of pending \
                 connections is full: is it stopped or stalled?)",
                sock.display()
            ),
            err: io::Error::from(io::ErrorKind::WouldBlock),
        },
        _ => CliError::Io {
            what: format!("cannot connect to {}", sock.display()),
            err: e,
        },
    })?;
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    Ok(s)
}

/// Send one request on a fresh connection and return the payload of an `ok` reply.
pub fn request_at(pid: u32, sock: &Path, req: &Request) -> Result<String, CliError> {
    request_with_timeout(pid, sock, req, REPLY_TIMEOUT)
}

/// [`request_at`] taking at most `timeout` for all of it: connecting, sending and every read
/// of the reply.
pub fn request_with_timeout(
    pid: u32,
    sock: &Path,
    req: &Request,
    timeout: Duration,
) -> Result<String, CliError> {
    request_until(pid, sock, req, Instant::now() + timeout)
}

/// [`request_at`] finished by `deadline` or failed with a timeout ([`is_timeout`]).
pub fn request_until(
    pid: u32,
    sock: &Path,
    req: &Request,
    deadline: Instant,
) -> Result<String, CliError> {
    let started = Instant::now();
    let left = |what: &str| -> Result<Duration, CliError> {
        let now = Instant::now();
        if now >= deadline {
            return Err(CliError::Io {
                what: format!(
                    "no reply within {} ms from {} ({what})",
                    deadline.saturating_duration_since(started).as_millis(),
                    sock.display()
                ),
                err: io::Error::from(io::ErrorKind::TimedOut),
            });
        }
        // A zero timeout means "none" to setsockopt: never pass one.
        Ok((deadline - now).max(Duration::from_millis(1)))
    };
    let mut s = connect(pid, sock, left("connecting")?)?;
    let mut line = req.to_line();
    line.push('\n');
    let io_err = |what: &str, err| CliError::Io {
        what: format!("{what} {}", sock.display()),
        err,
    };
    // A server that refuses us writes one `err` line and closes, possibly before our request
    // is sent: on a failed write, still read what it said.
    let write_error = s.write_all(line.as_bytes()).err();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        match decode_reply(&buf) {
            Ok((Reply::Ok(p), _)) => return Ok(p),
            Ok((Reply::Err(m), _)) => return Err(server_error(pid, m)),
            Err(ReplyError::Malformed(m)) => return Err(CliError::Protocol(m)),
            Err(ReplyError::Incomplete) => {}
        }
        let _ = s.set_read_timeout(Some(left("waiting for the reply")?));
        let n = match s.read(&mut chunk) {
            Ok(0) if write_error.is_some() => {
                return Err(io_err(
                    "cannot send the request to",
                    write_error.expect("checked"),
                ))
            }
            Ok(n) => n,
            Err(_) if write_error.is_some() => {
                return Err(io_err(
                    "cannot send the request to",
                    write_error.expect("checked"),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io_err(
                    &format!(
                        "no reply within {} ms from",
                        deadline.saturating_duration_since(started).as_millis()
                    ),
                    io::Error::from(io::ErrorKind::TimedOut),
                ))
            }
            Err(e) => return Err(io_err("cannot read the reply from", e)),
        };
        if n == 0 {
            return Err(CliError::Protocol(format!(
                "the connection closed after {} bytes, before the reply was complete",
                buf.len()
            )));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Whether `e` says the process did not answer in time (or could not take our connection).
pub fn is_timeout(e: &CliError) -> bool {
    matches!(e, CliError::Io { err, .. }
        if matches!(err.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock))
}

/// [`find_socket`] then [`request_at`].
pub fn request(pid: u32, socket: Option<&Path>, req: &Request) -> Result<String, CliError> {
    let sock = match socket {
        Some(p) => p.to_path_buf(),
        None => find_socket(pid)?,
    };
    request_at(pid, &sock, req)
}

fn server_error(pid: u32, message: String) -> CliError {
    match message.strip_prefix("permission denied: ") {
        Some(detail) => CliError::PermissionDenied {
            pid,
            detail: format!("the process refused us: {detail}"),
        },
        None => CliError::Server(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_prefers_the_memory_controller() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/3f17\n1:cpu:/\n0::/\n";
        assert_eq!(cgroup_of(hybrid), "/process_api/3f17");
        let joined = "5:cpu,memory:/a/b\n0::/c\n";
        assert_eq!(cgroup_of(joined), "/a/b");
        assert_eq!(
            cgroup_of("0::/system.slice/x.service\n"),
            "/system.slice/x.service"
        );
        assert_eq!(cgroup_of("3:cpu:/z\n"), "");
        assert_eq!(cgroup_of(""), "");
    }

    #[test]
    fn connect_reports_missing_and_refused_sockets() {
        let dir = std::env::temp_dir().join(format!("ebbtide-client-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("1.sock");
        assert!(matches!(
            connect(std::process::id(), &missing, Duration::from_secs(1)),
            Err(CliError::NoSocket { .. })
        ));
        // A socket nobody listens on any more.
        let stale = dir.join("2.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(matches!(
            connect(std::process::id(), &stale, Duration::from_secs(1)),
            Err(CliError::Stale(_))
        ));
        let long = dir.join("x".repeat(200));
        let e = connect(1, &long, Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("too long"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_listener_that_never_accepts_costs_the_deadline_not_more() {
        let dir = std::env::temp_dir().join(format!("ebbtide-client-stall-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("3.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let t = Instant::now();
        let e = request_with_timeout(
            std::process::id(),
            &sock,
            &Request::Ping,
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(is_timeout(&e), "{e}");
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{:?}",
            t.elapsed()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
