//! Finding a process's control socket and talking to it: one connection per request.

use crate::error::CliError;
use ebbtide::control::path;
use ebbtide::control::protocol::{decode_reply, Reply, ReplyError, Request};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

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

/// Connect to `sock` (of `pid`), mapping errors to their meaning.
pub fn connect(pid: u32, sock: &Path, timeout: Duration) -> Result<UnixStream, CliError> {
    let s = UnixStream::connect(sock).map_err(|e| match e.raw_os_error() {
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

/// [`request_at`] waiting at most `timeout` for each read or write.
pub fn request_with_timeout(
    pid: u32,
    sock: &Path,
    req: &Request,
    timeout: Duration,
) -> Result<String, CliError> {
    let mut s = connect(pid, sock, timeout)?;
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
                    &format!("no reply within {} ms from", timeout.as_millis()),
                    e,
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
