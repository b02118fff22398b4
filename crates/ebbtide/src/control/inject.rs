//! `pressure <level>`: what the control socket does with an injected pressure level.
//!
//! Everything goes through the one function [`inject`]. Today it acts on the reclaim layer
//! directly, because the pressure layer in this tree has no process-wide entry point (its
//! [`crate::pressure::Injector`] belongs to a watcher the reclaim thread will own). When
//! `crate::pressure::notify(level)` exists, the body of [`inject`] should become that one call,
//! so an injected level goes through the same policy (rate limits, level hold, statistics
//! `events_explicit`) as a real pressure event.
//!
//! | level | action now |
//! |---|---|
//! | normal | [`reclaim::set_buckets_enabled`]`(true)` |
//! | low | [`reclaim::reclaim_all`]`(Trim)` |
//! | moderate | [`reclaim::squeeze`]`(squeeze_ms)` then [`reclaim::reclaim_all`]`(Drain)` |
//! | critical | [`reclaim::set_buckets_enabled`]`(false)` then [`reclaim::reclaim_all`]`(DrainCpu)` |
//!
//! Runs on the control thread, never on an allocating thread; it takes only the reclaim
//! layer's own locks, never while holding anything of the control server's.

use crate::options::{self, Tunable};
use crate::pressure::Level;
use crate::reclaim::{self, Request};

/// What an injection did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Injected {
    /// The level.
    pub level: Level,
    /// Bytes given back to the OS.
    pub released_bytes: usize,
}

/// Act on `level` as described in the module docs. The one place to redirect to the pressure
/// layer's notify.
pub fn inject(level: Level) -> Injected {
    let released_bytes = match level {
        Level::Normal => reclaim::set_buckets_enabled(true),
        Level::Low => reclaim::reclaim_all(Request::Trim),
        Level::Moderate => {
            let ms = options::get_u64(Tunable::SqueezeMs);
            reclaim::squeeze(ms.saturating_mul(1_000_000)) + reclaim::reclaim_all(Request::Drain)
        }
        Level::Critical => {
            reclaim::set_buckets_enabled(false) + reclaim::reclaim_all(Request::DrainCpu)
        }
    };
    Injected {
        level,
        released_bytes,
    }
}
