//! One lab run at a time on a machine.
//!
//! Experiments and tests that create swap files and cgroups measure system-wide swap
//! traffic, so two of them at once spoil each other's numbers (and compete for memory).
//! [`LabLock::acquire`] serialises them with a Linux *abstract* Unix socket name: only one
//! process can bind it, the kernel releases it when the holder exits or dies — even by
//! SIGKILL — and no file is left behind.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The abstract socket name used by [`LabLock::acquire`].
pub const LAB_LOCK_NAME: &str = "ebbtide-lab-exclusive";

/// Held while it lives; dropping it lets the next lab run go.
#[derive(Debug)]
pub struct LabLock {
    _listener: UnixListener,
}

impl LabLock {
    /// Waits up to `timeout` for the machine-wide lab lock. Prints one line on stderr if
    /// it has to wait.
    pub fn acquire(timeout: Duration) -> Result<LabLock> {
        Self::acquire_named(LAB_LOCK_NAME, timeout)
    }

    /// Like [`LabLock::acquire`] with another name (for tests of the lock itself).
    pub fn acquire_named(name: &str, timeout: Duration) -> Result<LabLock> {
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| Error::Other(format!("abstract socket name {name:?}: {e}")))?;
        let start = Instant::now();
        let mut told = false;
        loop {
            match UnixListener::bind_addr(&addr) {
                Ok(l) => return Ok(LabLock { _listener: l }),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    if start.elapsed() >= timeout {
                        return Err(Error::Other(format!(
                            "another lab run holds the lock @{name} (abstract Unix socket) \
                             after waiting {timeout:?}"
                        )));
                    }
                    if !told {
                        eprintln!("ebbtide-lab: waiting for another lab run to finish (@{name})");
                        told = true;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => {
                    return Err(Error::Other(format!(
                        "bind abstract Unix socket @{name}: {e}"
                    )))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_and_released_on_drop() {
        let name = format!("ebbtide-lab-unit-lock-{}", std::process::id());
        let a = LabLock::acquire_named(&name, Duration::ZERO).unwrap();
        assert!(LabLock::acquire_named(&name, Duration::from_millis(150)).is_err());
        drop(a);
        let _b = LabLock::acquire_named(&name, Duration::ZERO).unwrap();
    }
}
