//! Who is on the other end: `SO_PEERCRED`, and the rule that decides who may talk to us.
//!
//! A peer is allowed when its uid is our effective uid or 0 (root). The check is made once per
//! connection, right after `accept`, before anything is read; a refused peer gets one
//! `err permission denied: ...` line and the connection is closed. The socket's 0600 mode and
//! its 0700 directory already keep other users out; this check holds even if those were
//! loosened (by an administrator, or a directory on a file system that ignores modes).

use std::io;
use std::os::fd::RawFd;

/// Credentials of a connected peer, as the kernel recorded them at `connect`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: i32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

/// `getsockopt(fd, SOL_SOCKET, SO_PEERCRED)`.
pub fn peer_cred(fd: RawFd) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes and `len` holds the size of `cred`; the
    // kernel writes at most `len` bytes. An invalid fd is reported as an error, not UB.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// The rule: the same uid as `own_uid`, or root. On refusal, the message for the peer.
pub fn check(peer: PeerCred, own_uid: u32) -> Result<(), String> {
    if peer.uid == own_uid || peer.uid == 0 {
        Ok(())
    } else {
        Err(format!(
            "permission denied: peer uid {} (pid {}) may not use the control socket of a \
             process running as uid {own_uid} (only uid {own_uid} and root may)",
            peer.uid, peer.pid
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn socketpair_reports_ourselves() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = peer_cred(a.as_raw_fd()).unwrap();
        assert_eq!(c.pid as u32, std::process::id());
        assert_eq!(c.uid, super::super::path::euid());
        assert!(peer_cred(-1).is_err());
    }

    #[test]
    fn rule() {
        let p = |uid| PeerCred {
            pid: 9,
            uid,
            gid: 0,
        };
        assert!(check(p(1000), 1000).is_ok());
        assert!(check(p(0), 1000).is_ok());
        let e = check(p(65534), 0).unwrap_err();
        assert!(
            e.starts_with("permission denied: peer uid 65534 (pid 9)"),
            "{e}"
        );
        assert!(check(p(1001), 1000).is_err());
    }
}
