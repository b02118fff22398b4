//! One job in the guest: a shell script, who runs it, how long it may take.

use std::time::Duration;

/// A shell script the guest's agent runs with `sh` (the guest root's `/bin/sh`).
#[derive(Debug, Clone)]
pub struct Job {
    /// The script. It starts in [`GUEST_WORK`](crate::GUEST_WORK)`/jobs/ID` with `PATH` set.
    pub script: String,
    /// Run as this uid and gid (through `setpriv`, no supplementary groups); root when `None`.
    pub user: Option<(u32, u32)>,
    /// Guest-side limit: the agent kills the job after it (`timeout -s KILL`); the host gives the
    /// guest this plus a margin before it kills the whole guest.
    pub limit: Duration,
}

impl Job {
    /// `script` as root with a 120 s limit.
    pub fn new(script: impl Into<String>) -> Job {
        Job {
            script: script.into(),
            user: None,
            limit: Duration::from_secs(120),
        }
    }
    /// Run as `uid`:`gid`.
    pub fn user(mut self, uid: u32, gid: u32) -> Job {
        self.user = Some((uid, gid));
        self
    }
    /// Time limit.
    pub fn limit(mut self, limit: Duration) -> Job {
        self.limit = limit;
        self
    }
}

/// What a job left.
#[derive(Debug, Clone)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    /// The script's exit status as `sh` reports it (137 = killed by the limit).
    pub code: i32,
    /// Wall time on the host from `run` to `done`.
    pub host_time: Duration,
}

impl Output {
    /// Panics, showing both streams, unless the exit status is 0.
    #[track_caller]
    pub fn success(&self, what: &str) -> &Self {
        assert!(
            self.code == 0,
            "{what}: exit status {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.stdout,
            self.stderr
        );
        self
    }

    /// The value of the first stdout line `KEY=VALUE` (after trimming), if any.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
    }
}
