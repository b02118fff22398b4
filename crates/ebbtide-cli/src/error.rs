//! The command's errors: each says what was wrong and, where it helps, what to do.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong talking to a process.
#[derive(Debug)]
pub enum CliError {
    /// No process with this pid.
    NoSuchProcess(u32),
    /// The process exists but serves no control socket.
    NoSocket {
        /// Target.
        pid: u32,
        /// Its command name.
        comm: String,
        /// Where we looked.
        looked: Vec<PathBuf>,
    },
    /// A socket exists but nobody accepts on it (its process no longer serves it).
    Stale(PathBuf),
    /// The file system or the server refused us.
    PermissionDenied {
        /// Target pid.
        pid: u32,
        /// What refused, in words.
        detail: String,
    },
    /// The server answered `err ...` (for example an unknown tunable).
    Server(String),
    /// The server's answer was not a reply.
    Protocol(String),
    /// Another I/O failure, with what we were doing.
    Io {
        /// What we were doing.
        what: String,
        /// The error.
        err: std::io::Error,
    },
    /// Bad command-line input that clap cannot check.
    Usage(String),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::NoSuchProcess(pid) => write!(f, "no such process: {pid}"),
            CliError::NoSocket { pid, comm, looked } => {
                write!(
                    f,
                    "process {pid} ({comm}) has no control socket (looked for "
                )?;
                for (i, p) in looked.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{}", p.display())?;
                }
                write!(
                    f,
                    "); it must use ebbtide and enable the socket: EBBTIDE_CONTROL_SOCKET=1, \
                     options::set(\"control_socket\", \"true\") or control::start()"
                )
            }
            CliError::Stale(p) => write!(
                f,
                "stale control socket {}: nobody accepts connections on it (the process no \
                 longer serves it)",
                p.display()
            ),
            CliError::PermissionDenied { pid, detail } => {
                write!(f, "permission denied for process {pid}: {detail}")
            }
            CliError::Server(m) => write!(f, "{m}"),
            CliError::Protocol(m) => write!(f, "unexpected answer from the control socket: {m}"),
            CliError::Io { what, err } => write!(f, "{what}: {err}"),
            CliError::Usage(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for CliError {}
