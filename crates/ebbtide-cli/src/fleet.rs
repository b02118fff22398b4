//! Every ebbtide process on the host that we may talk to, and their statistics gathered in
//! parallel.
//!
//! [`discover`] finds the live `<pid>.sock` sockets in every socket directory (see
//! [`client::all_socket_dirs`]) whose process the control socket's own rule lets us use: the
//! same uid, or we are root. Directories we may not read (another user's, mode 0700) are
//! skipped; so are sockets whose process is gone.
//!
//! [`gather`] asks each process for `stats json` on a few worker threads. Each process gets at
//! most its own timeout, and nothing starts after the whole gather's deadline: a process that
//! stalls (stopped, swapping, its control thread busy) or vanishes costs only its own result,
//! never the others', and never more than its timeout.

use crate::client;
use crate::error::CliError;
use crate::snapshot_json;
use ebbtide::control::path;
use ebbtide::control::protocol::{Format, Request};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A process with a control socket we may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Process id.
    pub pid: u32,
    /// Its sockets (more than one only if a stale socket of an earlier process with the same
    /// pid was left in another directory); tried in order.
    pub sockets: Vec<PathBuf>,
}

/// Why a process's statistics are missing from a gather.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// No complete reply within its timeout, or its listen queue was full.
    Timeout,
    /// The whole gather's deadline passed before its turn came.
    Deadline,
    /// Nobody accepts on its socket any more (it stopped serving).
    Refused,
    /// The socket's permission rules refused us.
    Permission,
    /// It answered `err ...` (for example `busy`: 32 clients already).
    Server,
    /// Its reply was not the statistics we can read (not JSON, another stats version).
    Protocol,
    /// Any other I/O error.
    Io,
    /// The process exited while we asked.
    Vanished,
}

impl Failure {
    /// Every failure, in the order the exporter reports them.
    pub const ALL: [Failure; 8] = [
        Failure::Timeout,
        Failure::Deadline,
        Failure::Refused,
        Failure::Permission,
        Failure::Server,
        Failure::Protocol,
        Failure::Io,
        Failure::Vanished,
    ];

    /// The word for a `reason` label.
    pub const fn reason(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Deadline => "deadline",
            Failure::Refused => "refused",
            Failure::Permission => "permission",
            Failure::Server => "server",
            Failure::Protocol => "protocol",
            Failure::Io => "io",
            Failure::Vanished => "vanished",
        }
    }

    fn of(pid: u32, e: &CliError) -> Failure {
        if !path::pid_alive(pid) {
            return Failure::Vanished;
        }
        match e {
            _ if client::is_timeout(e) => Failure::Timeout,
            CliError::NoSuchProcess(_) | CliError::NoSocket { .. } => Failure::Vanished,
            CliError::Stale(_) => Failure::Refused,
            CliError::PermissionDenied { .. } => Failure::Permission,
            CliError::Server(_) => Failure::Server,
            CliError::Protocol(_) => Failure::Protocol,
            CliError::Io { .. } | CliError::Usage(_) => Failure::Io,
        }
    }
}

/// What one process gave.
#[derive(Debug)]
pub struct Outcome {
    /// Process id.
    pub pid: u32,
    /// Its command name (`/proc/<pid>/comm`, `?` if unreadable).
    pub comm: String,
    /// Its memory cgroup ([`client::process_cgroup`]).
    pub cgroup: String,
    /// Time spent on it.
    pub took: Duration,
    /// Its statistics, or why there are none (with the error in words).
    pub result: Result<snapshot_json::Read, (Failure, String)>,
}

/// Whether the control socket's rule lets us use a process running as `uid`.
fn may_use(uid: Option<u32>, me: u32) -> bool {
    me == 0 || uid == Some(me)
}

/// Every live process with a control socket we may use, by pid.
pub fn discover() -> Vec<Target> {
    let me = path::euid();
    let mut targets: Vec<Target> = Vec::new();
    for dir in client::all_socket_dirs() {
        let Ok(list) = path::list_dir(&dir) else {
            continue;
        };
        for (pid, sock) in list {
            if !path::pid_alive(pid) || !may_use(client::process_uid(pid), me) {
                continue;
            }
            match targets.iter_mut().find(|t| t.pid == pid) {
                Some(t) if !t.sockets.contains(&sock) => t.sockets.push(sock),
                Some(_) => {}
                None => targets.push(Target {
                    pid,
                    sockets: vec![sock],
                }),
            }
        }
    }
    targets.sort_by_key(|t| t.pid);
    targets
}

/// Ask one process for its statistics, finishing by `deadline`.
fn ask(t: &Target, deadline: Instant) -> Result<snapshot_json::Read, (Failure, String)> {
    let mut last = None;
    for sock in &t.sockets {
        match client::request_until(t.pid, sock, &Request::Stats(Format::Json), deadline) {
            Ok(json) => {
                return snapshot_json::parse(&json).map_err(|e| {
                    (
                        Failure::Protocol,
                        format!("statistics of {} unreadable: {e}", sock.display()),
                    )
                })
            }
            // A stale socket of an earlier process with this pid: try the next one.
            Err(e @ (CliError::Stale(_) | CliError::NoSocket { .. })) => last = Some(e),
            Err(e) => return Err((Failure::of(t.pid, &e), e.to_string())),
        }
    }
    let e = last.unwrap_or(CliError::NoSuchProcess(t.pid));
    Err((Failure::of(t.pid, &e), e.to_string()))
}

/// Ask every target for its statistics: `workers` threads at a time, each process within
/// `per_process`, none started after `deadline`. Outcomes come back in the order of `targets`.
pub fn gather(
    targets: &[Target],
    per_process: Duration,
    deadline: Instant,
    workers: usize,
) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Outcome>>> =
        Mutex::new((0..targets.len()).map(|_| None).collect());
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(t) = targets.get(i) else { break };
        let start = Instant::now();
        let comm = client::process_comm(t.pid);
        let cgroup = client::process_cgroup(t.pid);
        let result = if start >= deadline {
            Err((
                Failure::Deadline,
                format!(
                    "process {} not asked: the scrape's deadline had passed",
                    t.pid
                ),
            ))
        } else {
            ask(t, (start + per_process).min(deadline))
        };
        let outcome = Outcome {
            pid: t.pid,
            comm,
            cgroup,
            took: start.elapsed(),
            result,
        };
        results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(outcome);
    };
    let n = workers.clamp(1, targets.len().max(1));
    std::thread::scope(|s| {
        for _ in 1..n {
            s.spawn(work);
        }
        work();
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|o| o.expect("every target is taken by one worker"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn the_socket_rule() {
        assert!(may_use(Some(1000), 1000));
        assert!(may_use(Some(1000), 0));
        assert!(may_use(None, 0));
        assert!(!may_use(Some(1001), 1000));
        assert!(!may_use(None, 1000));
    }

    #[test]
    fn reasons_are_distinct_words() {
        let mut r: Vec<&str> = Failure::ALL.iter().map(|f| f.reason()).collect();
        r.sort_unstable();
        r.dedup();
        assert_eq!(r.len(), Failure::ALL.len());
    }

    /// A stalled process costs its own timeout and nothing else: three "processes" that never
    /// accept, one that answers garbage, one gone, gathered with two workers.
    #[test]
    fn stalls_cost_only_their_timeout() {
        let dir = std::env::temp_dir().join(format!("ebbtide-fleet-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        let mut targets = Vec::new();
        let mut keep = Vec::new();
        for i in 0..3 {
            let p = dir.join(format!("stall{i}.sock"));
            keep.push(UnixListener::bind(&p).unwrap());
            targets.push(Target {
                pid: me,
                sockets: vec![p],
            });
        }
        // Answers one reply that is not statistics.
        let garbage = dir.join("garbage.sock");
        let l = UnixListener::bind(&garbage).unwrap();
        let server = std::thread::spawn(move || {
            use std::io::{BufRead, Write};
            let (s, _) = l.accept().unwrap();
            let mut line = String::new();
            std::io::BufReader::new(&s).read_line(&mut line).unwrap();
            (&s).write_all(b"ok 5\nhello").unwrap();
        });
        targets.push(Target {
            pid: me,
            sockets: vec![garbage],
        });
        targets.push(Target {
            pid: me,
            sockets: vec![dir.join("gone.sock")],
        });
        let t = Instant::now();
        let out = gather(
            &targets,
            Duration::from_millis(300),
            Instant::now() + Duration::from_secs(5),
            2,
        );
        let took = t.elapsed();
        server.join().unwrap();
        // Two workers, three stalls of 300 ms: about 600 ms, far below 3 × 300 + slack.
        assert!(took < Duration::from_millis(2000), "{took:?}");
        let reasons: Vec<Failure> = out
            .iter()
            .map(|o| o.result.as_ref().unwrap_err().0)
            .collect();
        assert_eq!(
            reasons,
            [
                Failure::Timeout,
                Failure::Timeout,
                Failure::Timeout,
                Failure::Protocol,
                Failure::Vanished
            ]
        );
        for o in &out[..3] {
            assert!(o.took < Duration::from_millis(1000), "{:?}", o.took);
        }
        // After the deadline nothing more is asked.
        let out = gather(&targets[..2], Duration::from_secs(1), Instant::now(), 1);
        assert!(out
            .iter()
            .all(|o| o.result.as_ref().unwrap_err().0 == Failure::Deadline));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
