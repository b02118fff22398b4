//! The watcher: one epoll set holding every event-driven source and the injector's eventfd,
//! with a timeout computed from the polled sources' `next_poll`.
//!
//! [`Watcher::wait`] blocks until at least one event is available or the timeout passes, and
//! returns the events. It never spins:
//!
//! * a source whose fd is reported ready but yields nothing ([`Outcome::Spurious`])
//!   `max_spurious` times in a row (default 100) is dropped with the reason "fd stuck ready";
//! * a source returning an error is dropped, its status becomes inactive with the error as
//!   the reason, and its [`Source::fallback`] (if any) replaces it — at most
//!   `max_fallbacks` (default 16) times over the watcher's life;
//! * polled sources are only run when their `next_poll` has passed, and epoll sleeps until
//!   the earliest of them;
//! * the program may close descriptors it did not open ([`crate::libfd`]): at least once every
//!   [`FD_CHECK_EVERY`] (and whenever epoll reports an invalid descriptor) the watcher checks
//!   its epoll set, its injector and every source's descriptors, and a loss is the watcher's
//!   error ([`Watcher::wait`] fails and names the descriptor): its owner drops it and opens
//!   the sources again. epoll never waits longer than that period.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::inject::Injector;
use super::libfd::{LibFd, Lost};
use super::source::{
    Outcome, PressureEvent, Readiness, Source, SourceError, SourceKind, SourceStatus,
};
use super::Detected;

const INJECT_TOKEN: u64 = u64::MAX;

/// Watcher tunables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatcherConfig {
    /// Consecutive spurious fd wake-ups after which a source is dropped. Default 100.
    pub max_spurious: u32,
    /// Fallback replacements allowed over the watcher's life. Default 16.
    pub max_fallbacks: u32,
}

impl Default for WatcherConfig {
    fn default() -> Self {
        WatcherConfig {
            max_spurious: 100,
            max_fallbacks: 16,
        }
    }
}

struct Slot {
    token: u64,
    source: Box<dyn Source>,
    registered: Option<RawFd>,
    spurious: u32,
    status_idx: usize,
    /// Earliest next timer dispatch: a polled source that fails to move its `next_poll`
    /// forward is still polled at most once per [`MIN_POLL_SPACING`].
    not_before: Option<Instant>,
}

/// How often the watcher checks that its descriptors are still its own (at most this long
/// between a program's `closefrom` and the watcher's error).
pub const FD_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Minimum spacing of two timer dispatches of one source.
pub const MIN_POLL_SPACING: Duration = Duration::from_millis(1);

impl Slot {
    fn next_poll(&self, now: Instant) -> Option<Instant> {
        let t = self.source.next_poll(now)?;
        Some(match self.not_before {
            Some(nb) => t.max(nb),
            None => t,
        })
    }
}

/// The epoll loop object. Owns the sources and the injector eventfd.
pub struct Watcher {
    epfd: LibFd,
    /// When the descriptors were last checked.
    checked: Instant,
    slots: Vec<Slot>,
    next_token: u64,
    injector: Injector,
    status: Vec<SourceStatus>,
    cfg: WatcherConfig,
    fallbacks_used: u32,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("status", &self.status)
            .finish()
    }
}

impl Watcher {
    /// A watcher over the detected sources. A source whose fd cannot be added to epoll is
    /// dropped with the reason in its status.
    pub fn new(detected: Detected) -> Result<Watcher, SourceError> {
        Self::with_config(detected, WatcherConfig::default())
    }

    /// As [`new`](Self::new) with explicit tunables.
    pub fn with_config(detected: Detected, cfg: WatcherConfig) -> Result<Watcher, SourceError> {
        // SAFETY: epoll_create1 has no memory-safety preconditions.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(SourceError::io(
                "creating",
                std::path::Path::new("epoll"),
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: `fd` was just returned by epoll_create1 and is owned by nobody else.
        let epfd = unsafe { LibFd::adopt(fd) }
            .map_err(|e| SourceError::io("checking", std::path::Path::new("epoll"), e))?;
        let injector = Injector::new()?;
        let mut w = Watcher {
            epfd,
            checked: Instant::now(),
            slots: Vec::new(),
            next_token: 0,
            injector,
            status: detected.status,
            cfg,
            fallbacks_used: 0,
        };
        w.ctl(
            libc::EPOLL_CTL_ADD,
            w.injector.fd(),
            libc::EPOLLIN as u32,
            INJECT_TOKEN,
        )
        .map_err(|e| {
            SourceError::io(
                "adding the inject eventfd to",
                std::path::Path::new("epoll"),
                e,
            )
        })?;
        if !w.status.iter().any(|s| s.kind == SourceKind::Explicit) {
            w.status.push(SourceStatus::active(
                SourceKind::Explicit,
                "inject eventfd (Watcher::injector)",
            ));
        }
        let mut used = vec![false; w.status.len()];
        for source in detected.sources {
            let (kind, desc) = (source.kind(), source.describe());
            let idx = (0..used.len()).find(|&i| {
                !used[i]
                    && w.status[i].active
                    && w.status[i].kind == kind
                    && w.status[i].detail == desc
            });
            if let Some(i) = idx {
                used[i] = true;
            }
            let idx = idx.unwrap_or_else(|| {
                w.status
                    .push(SourceStatus::active(source.kind(), source.describe()));
                w.status.len() - 1
            });
            w.add_slot(source, idx);
        }
        Ok(w)
    }

    /// A watcher over explicitly built sources (tests, or a core that builds its own).
    pub fn from_sources(sources: Vec<Box<dyn Source>>) -> Result<Watcher, SourceError> {
        Self::new(Detected {
            sources,
            status: Vec::new(),
        })
    }

    /// Add one more source at run time.
    pub fn add(&mut self, source: Box<dyn Source>) {
        self.status
            .push(SourceStatus::active(source.kind(), source.describe()));
        let idx = self.status.len() - 1;
        self.add_slot(source, idx);
    }

    /// A handle for explicit notifications from any thread.
    pub fn injector(&self) -> Injector {
        self.injector.clone()
    }

    /// Every known source kind, active or not, with details or reasons. Updated when sources
    /// fail at run time.
    pub fn status(&self) -> &[SourceStatus] {
        &self.status
    }

    /// Number of sources still registered (the injector not counted).
    pub fn active_sources(&self) -> usize {
        self.slots.len()
    }

    /// Whether every descriptor of the watcher is still its own: the epoll set, the injector's
    /// eventfd and every source's (see [`crate::libfd`]).
    pub fn check_fds(&self) -> Result<(), Lost> {
        self.epfd.check()?;
        self.injector.check()?;
        for s in &self.slots {
            s.source.check_fds()?;
        }
        Ok(())
    }

    fn lost(e: Lost) -> SourceError {
        SourceError::Lost(e)
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call; bad fds only make
        // epoll_ctl fail.
        if unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn add_slot(&mut self, source: Box<dyn Source>, status_idx: usize) {
        let token = self.next_token;
        self.next_token += 1;
        let fd = source.fd();
        if let Some(fd) = fd {
            if let Err(e) = self.ctl(libc::EPOLL_CTL_ADD, fd, source.epoll_events(), token) {
                self.status[status_idx] = SourceStatus::inactive(
                    source.kind(),
                    format!("{}: cannot be watched with epoll: {e}", source.describe()),
                );
                return;
            }
        }
        self.slots.push(Slot {
            token,
            source,
            registered: fd,
            spurious: 0,
            status_idx,
            not_before: None,
        });
    }

    fn fail(&mut self, idx: usize, reason: String) {
        let slot = self.slots.remove(idx);
        if let Some(fd) = slot.registered {
            // The fd is still open (owned by the source): remove it before the source closes it.
            let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
        }
        let kind = slot.source.kind();
        self.status[slot.status_idx] = SourceStatus::inactive(
            kind,
            format!(
                "failed at run time: {reason} (was: {})",
                slot.source.describe()
            ),
        );
        if self.fallbacks_used >= self.cfg.max_fallbacks {
            return;
        }
        match slot.source.fallback() {
            Some(Ok(next)) => {
                self.fallbacks_used += 1;
                self.status.push(SourceStatus::active(
                    next.kind(),
                    format!("fallback: {}", next.describe()),
                ));
                let i = self.status.len() - 1;
                self.add_slot(next, i);
            }
            Some(Err(e)) => {
                self.fallbacks_used += 1;
                self.status[slot.status_idx]
                    .detail
                    .push_str(&format!("; fallback failed: {e}"));
            }
            None => {}
        }
    }

    fn dispatch(
        &mut self,
        idx: usize,
        ready: Readiness,
        now: Instant,
        out: &mut Vec<PressureEvent>,
    ) {
        let slot = &mut self.slots[idx];
        match slot.source.on_ready(ready, now) {
            Ok(Outcome::Event(level)) => {
                slot.spurious = 0;
                out.push(PressureEvent {
                    kind: slot.source.kind(),
                    level,
                    at: now,
                });
            }
            Ok(Outcome::Quiet) => slot.spurious = 0,
            Ok(Outcome::Spurious) => {
                if !ready.timer {
                    slot.spurious += 1;
                    if slot.spurious >= self.cfg.max_spurious {
                        let n = slot.spurious;
                        self.fail(
                            idx,
                            format!("fd stuck ready: {n} consecutive spurious wake-ups"),
                        );
                        return;
                    }
                }
            }
            Err(e) => {
                self.fail(idx, e.to_string());
                return;
            }
        }
        // The source may have replaced its fd (PSI re-resolving): re-register.
        let slot = &self.slots[idx];
        let (new_fd, old_fd, token, events) = (
            slot.source.fd(),
            slot.registered,
            slot.token,
            slot.source.epoll_events(),
        );
        if new_fd != old_fd {
            if let Some(fd) = old_fd {
                // The old fd is already closed when replaced, which removed it from epoll;
                // ENOENT/EBADF here are expected and harmless.
                let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
            }
            if let Some(fd) = new_fd {
                if let Err(e) = self.ctl(libc::EPOLL_CTL_ADD, fd, events, token) {
                    self.fail(idx, format!("re-registering new fd: {e}"));
                    return;
                }
            }
            self.slots[idx].registered = new_fd;
            let d = self.slots[idx].source.describe();
            let si = self.slots[idx].status_idx;
            self.status[si].detail = d;
        }
    }

    fn run_due(&mut self, now: Instant, out: &mut Vec<PressureEvent>) {
        let mut i = 0;
        while i < self.slots.len() {
            let token = self.slots[i].token;
            if self.slots[i].next_poll(now).is_some_and(|t| t <= now) {
                self.slots[i].not_before = Some(now + MIN_POLL_SPACING);
                self.dispatch(i, Readiness::TIMER, now, out);
            }
            // Advance unless slot i was removed.
            if self.slots.get(i).is_some_and(|s| s.token == token) {
                i += 1;
            }
        }
    }

    /// The earliest `next_poll` of all polled sources.
    pub fn next_poll(&self, now: Instant) -> Option<Instant> {
        self.slots.iter().filter_map(|s| s.next_poll(now)).min()
    }

    /// Wait until at least one pressure event is available, `timeout` passes (`None` = no
    /// timeout), or the injector is woken ([`Injector::wake`]). Returns the events (empty on
    /// timeout or wake). Errors only for epoll failures; source failures are handled inside
    /// (see the module docs).
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<Vec<PressureEvent>, SourceError> {
        let mut out = Vec::new();
        self.wait_into(timeout, &mut out)?;
        Ok(out)
    }

    /// [`Watcher::wait`] into `out` (cleared first): a caller that keeps `out` with room for
    /// the events of one wake-up allocates nothing when events come (the reclaim thread of a
    /// sleeping program must not move its allocator's counters: `docs/design/observer.md`).
    pub fn wait_into(
        &mut self,
        timeout: Option<Duration>,
        out: &mut Vec<PressureEvent>,
    ) -> Result<(), SourceError> {
        out.clear();
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
        loop {
            let now = Instant::now();
            if now.saturating_duration_since(self.checked) >= FD_CHECK_EVERY {
                self.checked = now;
                self.check_fds().map_err(Self::lost)?;
            }
            self.run_due(now, out);
            if !out.is_empty() {
                return Ok(());
            }
            let next = match (deadline, self.next_poll(now)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // Never sleep past the next descriptor check.
            let next = Some(next.map_or(self.checked + FD_CHECK_EVERY, |t| {
                t.min(self.checked + FD_CHECK_EVERY)
            }));
            let ms: i32 = match next {
                None => -1,
                Some(t) => {
                    let d = t.saturating_duration_since(now);
                    // Round up so we never wake just before the deadline and spin.
                    let ms = d.as_micros().div_ceil(1000);
                    ms.min(i32::MAX as u128) as i32
                }
            };
            // SAFETY: `evs` is a valid buffer of 16 epoll_event entries.
            let n = unsafe {
                libc::epoll_wait(
                    self.epfd.as_raw_fd(),
                    evs.as_mut_ptr(),
                    evs.len() as i32,
                    ms,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                self.check_fds().map_err(Self::lost)?;
                return Err(SourceError::io(
                    "waiting on",
                    std::path::Path::new("epoll"),
                    e,
                ));
            }
            let now = Instant::now();
            let mut woken = false;
            for ev in &evs[..n as usize] {
                let (token, bits) = (ev.u64, ev.events);
                if token == INJECT_TOKEN {
                    match self.injector.take()? {
                        Some(level) => out.push(PressureEvent {
                            kind: SourceKind::Explicit,
                            level,
                            at: now,
                        }),
                        None => woken = true,
                    }
                    continue;
                }
                if let Some(idx) = self.slots.iter().position(|s| s.token == token) {
                    self.dispatch(idx, Readiness::from_epoll(bits), now, out);
                }
            }
            self.run_due(now, out);
            if !out.is_empty() || woken || deadline.is_some_and(|d| now >= d) {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Level;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn a_wake_ends_the_wait_without_an_event() {
        let mut w = Watcher::from_sources(Vec::new()).unwrap();
        let inj = w.injector();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            inj.wake();
        });
        let start = Instant::now();
        let ev = w.wait(Some(Duration::from_secs(10))).unwrap();
        assert!(ev.is_empty());
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "woken, not timed out"
        );
        t.join().unwrap();
    }
    use std::sync::Arc;

    /// A program's `closefrom(3)` closes the watcher's descriptors: the next wait fails within
    /// about a second, naming a descriptor, and dropping the watcher neither aborts (debug
    /// builds abort when an `OwnedFd` finds its number closed) nor closes numbers it lost.
    #[test]
    fn descriptors_closed_by_the_program_fail_the_wait_not_the_process() {
        let mut w = Watcher::from_sources(Vec::new()).unwrap();
        let fds = [w.epfd.raw(), w.injector.fd()];
        for fd in fds {
            // SAFETY: closing the watcher's numbers behind its back, as a program would.
            unsafe { libc::close(fd) };
        }
        let start = Instant::now();
        let e = w
            .wait(Some(Duration::from_secs(5)))
            .unwrap_err()
            .to_string();
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "found after {:?}",
            start.elapsed()
        );
        assert!(
            e.contains("descriptor") && e.contains("closed by the program"),
            "{e}"
        );
        drop(w);
    }

    /// An fd that is always readable (an eventfd with a count that is never read) and a
    /// source that never consumes it.
    struct Stuck {
        efd: LibFd,
        calls: Arc<AtomicU32>,
    }

    impl Source for Stuck {
        fn kind(&self) -> SourceKind {
            SourceKind::Psi
        }
        fn describe(&self) -> String {
            "stuck test source".into()
        }
        fn fd(&self) -> Option<RawFd> {
            Some(self.efd.as_raw_fd())
        }
        fn epoll_events(&self) -> u32 {
            libc::EPOLLIN as u32
        }
        fn next_poll(&self, _now: Instant) -> Option<Instant> {
            None
        }
        fn on_ready(&mut self, _r: Readiness, _now: Instant) -> Result<Outcome, SourceError> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            Ok(Outcome::Spurious)
        }
    }

    struct Ticker {
        next: Instant,
        every: Duration,
        fired: u32,
    }

    impl Source for Ticker {
        fn kind(&self) -> SourceKind {
            SourceKind::Budget
        }
        fn describe(&self) -> String {
            "ticker".into()
        }
        fn fd(&self) -> Option<RawFd> {
            None
        }
        fn epoll_events(&self) -> u32 {
            0
        }
        fn next_poll(&self, _now: Instant) -> Option<Instant> {
            Some(self.next)
        }
        fn on_ready(&mut self, _r: Readiness, now: Instant) -> Result<Outcome, SourceError> {
            self.next = now + self.every;
            self.fired += 1;
            Ok(if self.fired.is_multiple_of(3) {
                Outcome::Event(Level::Low)
            } else {
                Outcome::Quiet
            })
        }
    }

    /// A polled source that never moves its `next_poll` forward.
    struct Lazy {
        start: Instant,
        calls: Arc<AtomicU32>,
    }

    impl Source for Lazy {
        fn kind(&self) -> SourceKind {
            SourceKind::Headroom
        }
        fn describe(&self) -> String {
            "lazy".into()
        }
        fn fd(&self) -> Option<RawFd> {
            None
        }
        fn epoll_events(&self) -> u32 {
            0
        }
        fn next_poll(&self, _now: Instant) -> Option<Instant> {
            Some(self.start)
        }
        fn on_ready(&mut self, _r: Readiness, _now: Instant) -> Result<Outcome, SourceError> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            Ok(Outcome::Quiet)
        }
    }

    #[test]
    fn polled_source_that_never_advances_is_throttled() {
        let calls = Arc::new(AtomicU32::new(0));
        let src = Lazy {
            start: Instant::now(),
            calls: calls.clone(),
        };
        let mut w = Watcher::from_sources(vec![Box::new(src)]).unwrap();
        let t = Instant::now();
        assert!(w.wait(Some(Duration::from_millis(100))).unwrap().is_empty());
        let el = t.elapsed();
        let n = calls.load(Ordering::Relaxed) as u128;
        // At most one poll per MIN_POLL_SPACING (1 ms), plus rounding.
        assert!(n >= 10 && n <= el.as_millis() + 2, "{n} polls in {el:?}");
    }

    #[test]
    fn stuck_fd_is_disabled_not_spun_on() {
        let efd = crate::fs::eventfd().unwrap();
        crate::fs::eventfd_signal(efd.as_raw_fd()).unwrap();
        let calls = Arc::new(AtomicU32::new(0));
        let mut w = Watcher::from_sources(vec![Box::new(Stuck {
            efd,
            calls: calls.clone(),
        })])
        .unwrap();
        assert_eq!(w.active_sources(), 1);
        let t = Instant::now();
        let ev = w.wait(Some(Duration::from_millis(200))).unwrap();
        assert!(ev.is_empty());
        assert_eq!(
            calls.load(Ordering::Relaxed),
            100,
            "dropped after exactly max_spurious wake-ups"
        );
        assert_eq!(w.active_sources(), 0);
        let st = w
            .status()
            .iter()
            .find(|s| s.kind == SourceKind::Psi)
            .unwrap();
        assert!(!st.active && st.detail.contains("stuck ready"), "{st}");
        // The rest of the wait sleeps instead of spinning.
        assert!(t.elapsed() >= Duration::from_millis(190));
    }

    #[test]
    fn thread_safety_of_handles() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        // The watcher moves to the reclaim thread; injectors are shared by every thread.
        send::<Watcher>();
        send_sync::<Injector>();
    }

    #[test]
    fn inject_wakes_and_is_not_lost() {
        let mut w = Watcher::from_sources(Vec::new()).unwrap();
        let inj = w.injector();
        let th = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            inj.inject(Level::Moderate);
            inj.inject(Level::Low);
        });
        let t = Instant::now();
        // The waiter may wake between the two injections (a loaded machine): then the Low comes
        // as a second event. Either way the Moderate arrives and nothing else does.
        let mut seen = Vec::new();
        while !seen
            .iter()
            .any(|e: &PressureEvent| e.level == Level::Moderate)
        {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "inject lost: {seen:?}"
            );
            seen.extend(w.wait(Some(Duration::from_secs(5))).unwrap());
        }
        th.join().unwrap();
        seen.extend(w.wait(Some(Duration::from_millis(20))).unwrap());
        assert!(seen.len() <= 2, "{seen:?}");
        assert!(seen
            .iter()
            .all(|e| e.kind == SourceKind::Explicit && e.level >= Level::Low));
        // Nothing left over.
        assert!(w.wait(Some(Duration::from_millis(20))).unwrap().is_empty());
    }

    #[test]
    fn polled_source_drives_timeout() {
        let now = Instant::now();
        let every = Duration::from_millis(20);
        let mut w = Watcher::from_sources(vec![Box::new(Ticker {
            next: now,
            every,
            fired: 0,
        })])
        .unwrap();
        let t = Instant::now();
        let ev = w.wait(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].level, Level::Low);
        let el = t.elapsed();
        // Third poll: two intervals of 20 ms after the first.
        assert!(
            el >= Duration::from_millis(38) && el < Duration::from_secs(2),
            "{el:?}"
        );
        assert!(w
            .status()
            .iter()
            .any(|s| s.kind == SourceKind::Explicit && s.active));
    }
}
