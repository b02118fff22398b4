//! `pressure <level>`: what the control socket does with an injected pressure level.
//!
//! [`inject`] calls [`crate::pressure::notify`], so an injected level goes through the same
//! policy as a real pressure event (rate limits, squeeze window, level hold, buckets disabled
//! while Critical, statistics `events_explicit`), carried out by the reclaim thread (or on this
//! thread when there is none). `normal` ends the pressure state at once (level Normal, buckets
//! back on, rate limits reset).
//!
//! The reply reports the bytes given back while the reclaim thread acted, observed for up to
//! 200 ms (the global `released_bytes` counter before and after; a concurrent reclaim in the same
//! window is included).
//!
//! Runs on the control thread, never on an allocating thread; it takes no lock of the control
//! server while it waits.

use crate::pressure::Level;

/// What an injection did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Injected {
    /// The level.
    pub level: Level,
    /// Bytes given back to the OS.
    pub released_bytes: usize,
}

/// Report `level` to the pressure layer and wait briefly for its response (module docs).
pub fn inject(level: Level) -> Injected {
    let released = || crate::stats::collect().global.released_bytes;
    let before = released();
    crate::pressure::notify(level);
    let t = std::time::Instant::now();
    let mut after = released();
    while level != Level::Normal && t.elapsed() < std::time::Duration::from_millis(200) {
        std::thread::sleep(std::time::Duration::from_millis(10));
        let now = released();
        if now == after && crate::pressure::current_level() >= level {
            break;
        }
        after = now;
    }
    Injected {
        level,
        released_bytes: after.saturating_sub(before) as usize,
    }
}
