//! Child processes that never outlive the lab.
//!
//! [`LabChild`] wraps a spawned [`std::process::Child`] and registers a cleanup action
//! that SIGKILLs and reaps it; the action runs when the `LabChild` is dropped while the
//! child still runs (normal end or panic) or from [`crate::cleanup::run_all`] on
//! SIGINT/SIGTERM. Waiting for the child through [`LabChild::wait`] or
//! [`LabChild::wait_timeout`] disarms the action, so a reaped pid is never signalled.

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::cleanup::{self, CleanupToken};
use crate::error::{Error, Result};

/// A child process that is killed and reaped if the lab lets go of it.
#[derive(Debug)]
pub struct LabChild {
    child: Child,
    token: Option<CleanupToken>,
    status: Option<ExitStatus>,
}

impl LabChild {
    /// Spawns `cmd`.
    pub fn spawn(cmd: &mut Command) -> Result<LabChild> {
        cleanup::creating(|| {
            let child = cmd.spawn().map_err(|e| Error::Command {
                command: format!("{cmd:?}"),
                detail: format!("spawn failed: {e}"),
            })?;
            Ok(Self::adopt(child))
        })
    }

    /// Takes charge of an already spawned child.
    pub fn adopt(child: Child) -> LabChild {
        let pid = child.id() as i32;
        let token = cleanup::register(format!("kill child {pid}"), move || {
            // SAFETY: `pid` is our unreaped child (the token is disarmed before any reaping
            // by `LabChild`), so the pid cannot have been reused; kill and waitpid only
            // take integers and a valid out pointer.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
            }
        });
        LabChild {
            child,
            token: Some(token),
            status: None,
        }
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child's pid as `i32` (for samplers and `kill`).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn reaped(&mut self, status: ExitStatus) -> ExitStatus {
        if let Some(t) = self.token.take() {
            t.disarm();
        }
        self.status = Some(status);
        status
    }

    /// Waits for the child to exit.
    pub fn wait(&mut self) -> Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let pid = self.pid();
        let s = self
            .child
            .wait()
            .map_err(|e| Error::Other(format!("wait for child {pid}: {e}")))?;
        Ok(self.reaped(s))
    }

    /// The exit status if the child has exited, without blocking.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let pid = self.pid();
        match self
            .child
            .try_wait()
            .map_err(|e| Error::Other(format!("wait for child {pid}: {e}")))?
        {
            Some(s) => Ok(Some(self.reaped(s))),
            None => Ok(None),
        }
    }

    /// Waits at most `timeout`; `None` if the child still runs then.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.try_wait()? {
                return Ok(Some(s));
            }
            if start.elapsed() >= timeout {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal` to the child (if it has not been reaped).
    pub fn signal(&self, signal: i32) -> Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        // SAFETY: the child is not reaped (status is None), so the pid is still ours.
        if unsafe { libc::kill(self.pid(), signal) } != 0 {
            return Err(Error::Other(format!(
                "kill({}, {signal}): {}",
                self.pid(),
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    /// SIGKILLs the child and reaps it.
    pub fn kill(&mut self) -> Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let _ = self.child.kill();
        self.wait()
    }

    /// Access to the inner `Child` (e.g. to take its pipes).
    pub fn inner_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for LabChild {
    fn drop(&mut self) {
        // Runs the kill-and-reap action if the child was never reaped.
        drop(self.token.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drop_kills_and_reaps() {
        let c = LabChild::spawn(Command::new("sleep").arg("60")).unwrap();
        let pid = c.pid();
        drop(c);
        // Reaped: no /proc entry (not even a zombie).
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn wait_disarms() {
        let mut c = LabChild::spawn(&mut Command::new("true")).unwrap();
        assert!(c.wait().unwrap().success());
        assert!(c.token.is_none());
        assert!(c.wait_timeout(Duration::ZERO).unwrap().unwrap().success());
        let mut s = LabChild::spawn(Command::new("sleep").arg("60")).unwrap();
        assert_eq!(s.wait_timeout(Duration::from_millis(30)).unwrap(), None);
        assert!(!s.kill().unwrap().success());
    }
}
