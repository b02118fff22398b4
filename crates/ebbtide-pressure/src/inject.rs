//! Explicit pressure notifications from any thread to the watcher.
//!
//! [`Injector::inject`] raises a pending level (the maximum of all levels injected since the
//! watcher last looked) and signals an eventfd that the watcher has in its epoll set. The
//! watcher reads the eventfd first and then takes the pending level, so an injection is never
//! lost: if it lands after the take, its eventfd write lands after the read and wakes the
//! watcher again.

use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use super::fs;
use super::libfd::{LibFd, Lost};
use super::source::SourceError;
use super::Level;

struct Inner {
    efd: LibFd,
    /// 0 = nothing pending, else `level as u8 + 1` (so Normal can be injected too).
    pending: AtomicU8,
}

/// A cloneable, thread-safe handle that wakes the watcher with a level.
#[derive(Clone)]
pub struct Injector {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injector")
            .field("pending", &self.inner.pending.load(Ordering::Relaxed))
            .finish()
    }
}

impl Injector {
    /// A new injector with its own eventfd.
    pub fn new() -> Result<Injector, SourceError> {
        Ok(Injector {
            inner: Arc::new(Inner {
                efd: fs::eventfd()?,
                pending: AtomicU8::new(0),
            }),
        })
    }

    /// Report `level` to the watcher. Never blocks, never allocates. If several levels are
    /// injected before the watcher looks, it sees the highest. Injecting Normal tells the
    /// policy the pressure is over (unless a higher level is pending too).
    pub fn inject(&self, level: Level) {
        // Release pairs with the AcqRel swap in `take`: the watcher that takes this level also
        // sees everything the injecting thread wrote before.
        self.inner
            .pending
            .fetch_max(level as u8 + 1, Ordering::Release);
        self.signal();
    }

    /// Add one to the eventfd, unless the program closed it (then the number may be the
    /// program's: writing 8 bytes into its pipe or socket would corrupt it). The watcher finds
    /// the loss within a second and opens everything again; the pending level stays.
    fn signal(&self) {
        if self.inner.efd.check().is_ok() {
            // The only possible failure is counter overflow (2^64 - 2 unread signals); then
            // the watcher is already woken, so ignoring is correct.
            let _ = fs::eventfd_signal(self.inner.efd.as_raw_fd());
        }
    }

    /// Whether the eventfd is still the injector's (see [`crate::libfd`]).
    pub fn check(&self) -> Result<(), Lost> {
        self.inner.efd.check()
    }

    /// Wakes the watcher without a level: its `wait` returns (with no event for this), so the
    /// loop around it sees changed settings at once. Never blocks, never allocates.
    pub fn wake(&self) {
        self.signal();
    }

    /// The eventfd (readable while a notification is unread).
    pub fn fd(&self) -> RawFd {
        self.inner.efd.as_raw_fd()
    }

    /// Reset the eventfd and take the pending level (watcher side).
    pub fn take(&self) -> Result<Option<Level>, SourceError> {
        fs::eventfd_read(self.inner.efd.as_raw_fd(), Path::new("inject eventfd"))?;
        // AcqRel: acquire pairs with the Release fetch_max in `inject`.
        let v = self.inner.pending.swap(0, Ordering::AcqRel);
        Ok(if v == 0 { None } else { Level::from_u8(v - 1) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_pending_level_wins_and_is_taken_once() {
        let i = Injector::new().unwrap();
        assert_eq!(i.take().unwrap(), None);
        i.inject(Level::Low);
        i.clone().inject(Level::Critical);
        i.inject(Level::Moderate);
        assert_eq!(
            fs::poll_one(i.fd(), libc::POLLIN, 0).unwrap() & libc::POLLIN,
            libc::POLLIN
        );
        assert_eq!(i.take().unwrap(), Some(Level::Critical));
        assert_eq!(i.take().unwrap(), None);
        assert_eq!(fs::poll_one(i.fd(), libc::POLLIN, 0).unwrap(), 0);
        i.inject(Level::Normal);
        assert_eq!(i.take().unwrap(), Some(Level::Normal));
        i.wake();
        assert_eq!(
            fs::poll_one(i.fd(), libc::POLLIN, 0).unwrap() & libc::POLLIN,
            libc::POLLIN
        );
        assert_eq!(i.take().unwrap(), None, "a wake carries no level");
    }
}
