#![deny(unsafe_op_in_unsafe_fn)]
//! Memory pressure: where the signals come from, and what to do about them.
//!
//! This crate turns the operating system's memory pressure signals into [`Level`]s and the
//! levels into reclaim [`Actions`]. It is layered:
//!
//! 1. **Sources** ([`Source`]): one per signal and fd. Each reads one kernel interface and
//!    reports `Outcome::Event(level)`.
//! 2. **Detection** ([`detect`]): builds every source that works on this machine and reports
//!    every kind as active (what it watches) or inactive (why not) in [`SourceStatus`].
//! 3. **Watcher** ([`Watcher`]): an epoll loop owning the sources plus an eventfd for explicit
//!    notifications ([`Injector`]); returns [`PressureEvent`]s. Misbehaving sources are dropped
//!    with a reason (and replaced by their fallback), never spun on.
//! 4. **Policy** ([`Policy`]): a pure state machine, events + `now` → [`Actions`].
//!
//! It depends on nothing of the allocator (the layer below the `ebbtide` runtime, beside
//! `ebbtide-core`): the reclaim thread of the `ebbtide` crate runs:
//!
//! ```no_run
//! use ebbtide_pressure::{detect, DetectConfig, Policy, Watcher};
//! use std::time::{Duration, Instant};
//! let mut watcher = Watcher::new(detect(&DetectConfig::default())).expect("epoll");
//! let injector = watcher.injector(); // give to notify(level) callers on any thread
//! let mut policy = Policy::default();
//! loop {
//!     let now = Instant::now();
//!     let timeout = policy.next_deadline(now).map(|t| t - now).unwrap_or(Duration::from_secs(1));
//!     let events = watcher.wait(Some(timeout)).expect("epoll_wait");
//!     let now = Instant::now();
//!     let mut actions = policy.tick(now);
//!     for ev in events {
//!         actions = policy.on_event(ev.level, ev.at);
//!         // carry out actions.trim / drain / drain_cpu, publish squeeze_until and
//!         // buckets_enabled to the zones
//!     }
//!     # break;
//! }
//! ```
//!
//! # Sources
//!
//! | kind | interface | levels | defaults | inactive when |
//! |------|-----------|--------|----------|---------------|
//! | [`systemd`] | `$MEMORY_PRESSURE_WATCH` (file: POLLPRI; FIFO/socket: POLLIN, read and discard) after writing base64-decoded `$MEMORY_PRESSURE_WRITE` (only if set) | each notification → one level | Moderate; writes nothing when `$MEMORY_PRESSURE_WRITE` is unset | variable unset, empty or `/dev/null`; malformed base64 (error names the variable) |
//! | [`psi`] | PSI trigger on own cgroup v2 `memory.pressure`, else (absent, or EACCES/EINVAL opening or arming it) `/proc/pressure/memory`; window rounded up to 2 s multiples on EINVAL; POLLERR re-resolves | one trigger (fd) per level | Low `some 70000 2000000`, Moderate `some 100000 2000000`, Critical `full 100000 2000000` (GLib) | no PSI file; trigger rejected |
//! | [`cgroup_v1_event`] | v1 `memory.pressure_level` + `cgroup.event_control` + eventfd | low/medium/critical → Low/Moderate/Critical | all three, mode local (reclaim aimed at this cgroup only), one report per wake-up (renews the squeeze window) | no v1 memory controller; EACCES |
//! | [`headroom`] | v2 `memory.current` vs min(`memory.high`, `memory.max`); v1 `memory.usage_in_bytes` vs `memory.limit_in_bytes` | free < 20 % Low, < 10 % Moderate, < 5 % Critical | polled 1 s far → 10 ms close, steeply (cubic) near the limit; the library's own lazily freed pages are not counted as usage | no limit (v1 reads 9223372036854771712) |
//! | [`memory_events`] | v2 `memory.events` (POLLPRI, re-read) | `high` grew → Moderate; `max`/`oom`/`oom_kill` grew → Critical | | no memory controller on v2 |
//! | [`budget`] | the core's cached bytes vs `max_cached_bytes` | ≥ 80 % Low, ≥ 90 % Moderate, ≥ 100 % Critical | polled every 100 ms | no budget configured |
//! | explicit | [`Injector::inject`] from any thread | any | | always active |
//!
//! Runtime failures: a source whose fd errors (POLLERR, peer closed, cgroup removed, file
//! vanished) is dropped, its status turns inactive with the error as the reason, and its
//! fallback takes over: PSI on an explicit file → the own cgroup's file or `/proc`; systemd →
//! a PSI trigger made of its WRITE bytes (what systemd's own library does); v1 level and
//! headroom on the own cgroup → the own cgroup as `/proc/self/cgroup` names it then.
//!
//! Every descriptor is a [`libfd::LibFd`]: moved to a high number out of the program's way,
//! checked before use, never closed once the program has closed it; a loss fails the watcher
//! ([`SourceError::Lost`]) and its owner opens everything again.
//!
//! Polled sources (headroom, budget) repeat a persisting non-Normal level every 500 ms so the
//! policy's level hold (2.5 s) does not lapse while the condition lasts; headroom repeats a
//! Moderate or Critical level at every poll, so the squeeze window is renewed at the poll's
//! cadence (milliseconds near the limit) for as long as the cgroup stays close to it.
//!
//! # Level → actions (see [`policy`])
//!
//! | level | actions | rate limit (default) |
//! |-------|---------|----------------------|
//! | Low | trim depots to the working set, bucket sizes step down | `trim_min_interval_ms` 1000 |
//! | Moderate | squeeze window `squeeze_until = max(squeeze_until, now + squeeze_ms)` (10 ms, extended by every event) + drain whole depots | `drain_min_interval_ms` 250 |
//! | Critical | squeeze + drain per-CPU caches, buckets disabled while Critical holds | `drain_cpu_min_interval_ms` 1000 |
//!
//! A level is held `level_hold_ms` (2500) after its last event, then decays; buckets are
//! re-enabled when the held level drops below Critical.

pub mod budget;
pub mod cgroup;
pub mod cgroup_v1_event;
mod detect;
pub mod fs;
pub mod headroom;
mod inject;
mod level;
pub mod libfd;
pub mod memory_events;
pub mod policy;
pub mod psi;
mod source;
pub mod systemd;
mod watcher;

pub use budget::{budget_level, BudgetConfig, BudgetSource, HeldBytes};
pub use cgroup::CgroupPaths;
pub use cgroup_v1_event::{V1Level, V1LevelConfig, V1LevelSource, V1Mode};
pub use detect::{detect, detect_with, DetectConfig, Detected, MemoryEventsConfig};
pub use headroom::{
    headroom_level, pace_rate, poll_interval, runway_interval, HeadroomConfig, HeadroomSource,
    MemoryFiles,
};
pub use inject::Injector;
pub use level::{Level, ParseLevelError};
pub use memory_events::MemoryEventsSource;
pub use policy::{Actions, Policy, PolicyConfig};
pub use psi::{PsiConfig, PsiSource, PsiTrigger, Stall};
pub use source::{
    Outcome, PressureEvent, Readiness, Source, SourceError, SourceKind, SourceStatus,
};
pub use systemd::{SystemdConfig, SystemdSource};
pub use watcher::{Watcher, WatcherConfig};
