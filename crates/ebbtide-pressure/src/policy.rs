//! The reclaim policy: a pure state machine from pressure events to reclaim actions.
//!
//! No I/O, no clock, no lock: every call takes `now`, so tests drive it with fake time
//! (the way jemalloc's decay module is tested). The reclaim thread owns one [`Policy`], feeds it
//! every [`PressureEvent`](super::PressureEvent) with [`Policy::on_event`], calls
//! [`Policy::tick`] whenever it wakes without an event, and carries out the returned
//! [`Actions`].
//!
//! # Rules
//!
//! | event level | actions                                                                 |
//! |-------------|-------------------------------------------------------------------------|
//! | Low         | `trim` (depots down to their working set, bucket sizes step down), at most once per `trim_min_interval_ms`; **renews an open squeeze window** to `now + squeeze_ms` (never opens one) |
//! | Moderate    | squeeze window `squeeze_until = max(squeeze_until, now + squeeze_ms)` (every event extends it); `drain` (whole depot) at most once per `drain_min_interval_ms`, else `trim` if its rate allows |
//! | Critical    | the Moderate squeeze; `drain_cpu` at most once per `drain_cpu_min_interval_ms`, else `drain`/`trim` as their rates allow; `buckets_enabled = false` while the level stays Critical |
//! | Normal      | an explicit "pressure is over": the held level drops to Normal at once, buckets are re-enabled; no reclaim |
//!
//! The **current level** is the highest level seen within the last `level_hold_ms`: each level
//! remembers when it was last reported, so Critical decays to Moderate (if Moderate events still
//! arrive) or straight to Normal once no event came for `level_hold_ms`. Buckets come back as
//! soon as the current level is below Critical.
//!
//! Renewal follows the kernel's shrinker, which runs on every reclaim pass: while the cgroup
//! keeps reclaiming, every signal (cgroup v1 `low` fires on each reclaim pass) keeps the window
//! open. Renewing is free of rate limits because it costs nothing (the reclaim thread only moves
//! the window's end); the expensive actions below keep theirs.
//!
//! A heavier action includes the lighter ones and resets their rate limits: a `drain_cpu`
//! counts as a drain and a trim, a `drain` as a trim. So a storm of events (10 000 in a second)
//! yields at most `1 + 1000 / min_interval` actions of each kind.

use std::time::{Duration, Instant};

use super::Level;

/// Tunables of the policy. Units are in the names; all may change at run time (build a new
/// config and call [`Policy::set_config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyConfig {
    /// Minimum time between two `trim` actions. Default 1000 ms (UMA rate-limits its page
    /// daemon low-memory trim to once per 10 s; we are a process, not a kernel, and trims are
    /// cheap). 0 = no limit.
    pub trim_min_interval_ms: u64,
    /// Length of the squeeze window opened (or extended) by every Moderate or Critical event.
    /// Default 10 ms, as xen-blkback's `buffer_squeeze_duration_ms`. 0 = no squeeze.
    pub squeeze_ms: u64,
    /// Minimum time between two `drain` actions. Default 250 ms. 0 = no limit.
    pub drain_min_interval_ms: u64,
    /// Minimum time between two `drain_cpu` actions. Default 1000 ms (UMA's reclaim thread
    /// runs at most once per second). 0 = no limit.
    pub drain_cpu_min_interval_ms: u64,
    /// How long a level stays current without a new event of that level. Default 2500 ms:
    /// PSI reports at most once per window (2 s by default) while a stall continues, so the
    /// hold must outlast one window plus delivery jitter, or a steady stall would flicker
    /// back to Normal between two reports.
    pub level_hold_ms: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            trim_min_interval_ms: 1000,
            squeeze_ms: 10,
            drain_min_interval_ms: 250,
            drain_cpu_min_interval_ms: 1000,
            level_hold_ms: 2500,
        }
    }
}

/// What the reclaim thread must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actions {
    /// Trim every zone's depot to its working set and step bucket sizes down.
    pub trim: bool,
    /// Drain every zone's whole depot.
    pub drain: bool,
    /// Drain the depots, then every per-CPU cache (one loop over CPUs for all zones), then the
    /// depots again.
    pub drain_cpu: bool,
    /// While `now <` this instant the depots are squeezed to zero instead of their working set
    /// (`None` = no squeeze window open).
    pub squeeze_until: Option<Instant>,
    /// Whether per-CPU buckets may be used; `false` while the level is Critical (frees go
    /// straight to slabs).
    pub buckets_enabled: bool,
    /// The current (held) level after this step.
    pub level: Level,
}

impl Actions {
    /// True if any reclaim (`trim`, `drain`, `drain_cpu`) is requested.
    pub fn any_reclaim(&self) -> bool {
        self.trim || self.drain || self.drain_cpu
    }
}

/// The policy state machine. See the module docs for the rules.
#[derive(Debug, Clone)]
pub struct Policy {
    cfg: PolicyConfig,
    /// Last time each level (index = `Level as usize`, 0 unused) was reported.
    last_seen: [Option<Instant>; 4],
    last_trim: Option<Instant>,
    last_drain: Option<Instant>,
    last_drain_cpu: Option<Instant>,
    squeeze_until: Option<Instant>,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// True if an action last done at `last` may run again at `now` given `min_ms`.
fn due(last: Option<Instant>, now: Instant, min_ms: u64) -> bool {
    match last {
        None => true,
        Some(t) => now.saturating_duration_since(t) >= ms(min_ms),
    }
}

impl Policy {
    /// A policy at level Normal with nothing done yet.
    pub fn new(cfg: PolicyConfig) -> Policy {
        Policy {
            cfg,
            last_seen: [None; 4],
            last_trim: None,
            last_drain: None,
            last_drain_cpu: None,
            squeeze_until: None,
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// Replace the configuration; the state (held levels, rate-limit clocks) is kept.
    pub fn set_config(&mut self, cfg: PolicyConfig) {
        self.cfg = cfg;
    }

    /// The current level at `now`: the highest level reported within `level_hold_ms`.
    pub fn level(&self, now: Instant) -> Level {
        for level in [Level::Critical, Level::Moderate, Level::Low] {
            if let Some(t) = self.last_seen[level as usize] {
                if now.saturating_duration_since(t) < ms(self.cfg.level_hold_ms) {
                    return level;
                }
            }
        }
        Level::Normal
    }

    fn squeeze(&self, now: Instant) -> Option<Instant> {
        self.squeeze_until.filter(|&t| t > now)
    }

    fn state(&self, now: Instant) -> Actions {
        let level = self.level(now);
        Actions {
            trim: false,
            drain: false,
            drain_cpu: false,
            squeeze_until: self.squeeze(now),
            buckets_enabled: level < Level::Critical,
            level,
        }
    }

    /// Feed one pressure event of `level` seen at `now`; returns what to do.
    pub fn on_event(&mut self, level: Level, now: Instant) -> Actions {
        if level == Level::Normal {
            self.last_seen = [None; 4];
            return self.state(now);
        }
        self.last_seen[level as usize] = Some(now);
        if level >= Level::Moderate && self.cfg.squeeze_ms > 0 {
            let end = now + ms(self.cfg.squeeze_ms);
            self.squeeze_until = Some(self.squeeze_until.map_or(end, |t| t.max(end)));
        } else if self.squeeze(now).is_some() {
            // Low: reclaim goes on, so an open window is renewed (see the module docs).
            let end = now + ms(self.cfg.squeeze_ms);
            self.squeeze_until = self.squeeze_until.map(|t| t.max(end));
        }
        let mut a = self.state(now);
        if level == Level::Critical
            && due(self.last_drain_cpu, now, self.cfg.drain_cpu_min_interval_ms)
        {
            a.drain_cpu = true;
            self.last_drain_cpu = Some(now);
            self.last_drain = Some(now);
            self.last_trim = Some(now);
        } else if level >= Level::Moderate
            && due(self.last_drain, now, self.cfg.drain_min_interval_ms)
        {
            a.drain = true;
            self.last_drain = Some(now);
            self.last_trim = Some(now);
        } else if due(self.last_trim, now, self.cfg.trim_min_interval_ms) {
            a.trim = true;
            self.last_trim = Some(now);
        }
        a
    }

    /// Advance time without an event: decays the level and closes an expired squeeze window.
    /// Never requests reclaim.
    pub fn tick(&mut self, now: Instant) -> Actions {
        if self.squeeze_until.is_some_and(|t| t <= now) {
            self.squeeze_until = None;
        }
        self.state(now)
    }

    /// When the next [`tick`](Policy::tick) would change something (squeeze end or level
    /// decay), so the reclaim thread can sleep until then. `None` = nothing pending.
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        let mut next = self.squeeze(now);
        for t in self.last_seen.iter().flatten() {
            let end = *t + ms(self.cfg.level_hold_ms);
            if end > now {
                next = Some(next.map_or(end, |n| n.min(end)));
            }
        }
        next
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new(PolicyConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now()
    }

    #[test]
    fn low_trims_rate_limited() {
        let s = t0();
        let mut p = Policy::default();
        let a = p.on_event(Level::Low, s);
        assert!(a.trim && !a.drain && !a.drain_cpu);
        assert_eq!(a.level, Level::Low);
        assert!(a.buckets_enabled);
        assert_eq!(a.squeeze_until, None, "Low does not squeeze");
        assert!(!p.on_event(Level::Low, s + ms(999)).trim);
        assert!(p.on_event(Level::Low, s + ms(1000)).trim);
    }

    #[test]
    fn moderate_squeezes_and_extends() {
        let s = t0();
        let mut p = Policy::default();
        let a = p.on_event(Level::Moderate, s);
        assert_eq!(a.squeeze_until, Some(s + ms(10)));
        assert!(a.drain);
        let a = p.on_event(Level::Moderate, s + ms(5));
        assert_eq!(a.squeeze_until, Some(s + ms(15)), "repeated signal extends");
        assert!(!a.drain, "drain rate limited");
        // A Low event renews the open window (reclaim goes on) and never shortens it.
        let a = p.on_event(Level::Low, s + ms(6));
        assert_eq!(a.squeeze_until, Some(s + ms(16)));
        let a = p.on_event(Level::Low, s + ms(2));
        assert_eq!(a.squeeze_until, Some(s + ms(16)));
        // Window expires.
        assert_eq!(p.tick(s + ms(16)).squeeze_until, None);
        assert_eq!(
            p.tick(s + ms(14)).squeeze_until,
            None,
            "expired window stays closed"
        );
    }

    #[test]
    fn low_renews_an_open_window_but_never_opens_one() {
        let s = t0();
        let mut p = Policy::default();
        assert_eq!(p.on_event(Level::Low, s).squeeze_until, None);
        p.on_event(Level::Moderate, s + ms(1));
        // Reclaim goes on: every Low signal keeps the window open.
        for i in 1..=100u64 {
            let a = p.on_event(Level::Low, s + ms(1 + 5 * i));
            assert_eq!(a.squeeze_until, Some(s + ms(1 + 5 * i + 10)));
        }
        // No signal for a window's length: it closes, and Low does not reopen it.
        assert_eq!(p.tick(s + ms(511 + 10)).squeeze_until, None);
        assert_eq!(p.on_event(Level::Low, s + ms(530)).squeeze_until, None);
    }

    #[test]
    fn renewal_is_not_rate_limited_but_drains_are() {
        let s = t0();
        let mut p = Policy::default();
        let (mut drains, mut renewed) = (0, 0);
        // 1000 Moderate signals a millisecond apart (cgroup v1 while reclaiming).
        for i in 0..1000u64 {
            let now = s + ms(i);
            let a = p.on_event(Level::Moderate, now);
            drains += a.drain as u32;
            renewed += (a.squeeze_until == Some(now + ms(10))) as u32;
        }
        assert_eq!(renewed, 1000, "every signal renews the window");
        assert_eq!(drains, 4, "DRAIN stays rate limited (250 ms)");
    }

    #[test]
    fn squeeze_never_moves_backwards_with_config_change() {
        let s = t0();
        let mut p = Policy::new(PolicyConfig {
            squeeze_ms: 100,
            ..Default::default()
        });
        p.on_event(Level::Moderate, s);
        p.set_config(PolicyConfig {
            squeeze_ms: 10,
            ..Default::default()
        });
        let a = p.on_event(Level::Moderate, s + ms(1));
        assert_eq!(a.squeeze_until, Some(s + ms(100)));
    }

    #[test]
    fn moderate_drain_rate_limited_then_trim() {
        let s = t0();
        let mut p = Policy::default();
        assert!(p.on_event(Level::Moderate, s).drain);
        let a = p.on_event(Level::Moderate, s + ms(100));
        assert!(
            !a.drain && !a.trim,
            "drain counts as trim for the trim clock"
        );
        assert!(p.on_event(Level::Moderate, s + ms(250)).drain);
    }

    #[test]
    fn critical_drain_cpu_and_buckets() {
        let s = t0();
        let mut p = Policy::default();
        let a = p.on_event(Level::Critical, s);
        assert!(a.drain_cpu);
        assert!(!a.buckets_enabled);
        assert_eq!(a.level, Level::Critical);
        assert_eq!(a.squeeze_until, Some(s + ms(10)));
        // Within a second: no second drain_cpu; a drain once 250 ms passed.
        let a = p.on_event(Level::Critical, s + ms(100));
        assert!(!a.drain_cpu && !a.drain && !a.trim);
        let a = p.on_event(Level::Critical, s + ms(300));
        assert!(!a.drain_cpu && a.drain);
        assert!(p.on_event(Level::Critical, s + ms(1000)).drain_cpu);
        // Buckets stay disabled while Critical is held.
        assert!(!p.tick(s + ms(3499)).buckets_enabled);
        // Decay: 2500 ms after the last Critical event.
        let a = p.tick(s + ms(3500));
        assert!(a.buckets_enabled);
        assert_eq!(a.level, Level::Normal);
    }

    #[test]
    fn decay_steps_through_lower_held_levels() {
        let s = t0();
        let mut p = Policy::default();
        p.on_event(Level::Critical, s);
        p.on_event(Level::Moderate, s + ms(1500));
        assert_eq!(p.level(s + ms(2499)), Level::Critical);
        let a = p.tick(s + ms(2500));
        assert_eq!(a.level, Level::Moderate);
        assert!(a.buckets_enabled, "re-enabled below Critical");
        assert_eq!(p.tick(s + ms(3999)).level, Level::Moderate);
        assert_eq!(p.tick(s + ms(4000)).level, Level::Normal);
        assert_eq!(p.next_deadline(s + ms(4000)), None);
    }

    #[test]
    fn next_deadline_reports_squeeze_and_decay() {
        let s = t0();
        let mut p = Policy::default();
        assert_eq!(p.next_deadline(s), None);
        p.on_event(Level::Moderate, s);
        assert_eq!(p.next_deadline(s), Some(s + ms(10)));
        assert_eq!(p.next_deadline(s + ms(10)), Some(s + ms(2500)));
    }

    #[test]
    fn normal_event_clears_level() {
        let s = t0();
        let mut p = Policy::default();
        p.on_event(Level::Critical, s);
        let a = p.on_event(Level::Normal, s + ms(1));
        assert_eq!(a.level, Level::Normal);
        assert!(a.buckets_enabled);
        assert!(!a.any_reclaim());
    }

    #[test]
    fn lower_event_does_not_lower_level() {
        let s = t0();
        let mut p = Policy::default();
        p.on_event(Level::Critical, s);
        let a = p.on_event(Level::Low, s + ms(10));
        assert_eq!(a.level, Level::Critical);
        assert!(!a.buckets_enabled);
    }

    #[test]
    fn storm_is_bounded() {
        let s = t0();
        for level in [Level::Low, Level::Moderate, Level::Critical] {
            let mut p = Policy::default();
            let (mut trims, mut drains, mut cpus) = (0, 0, 0);
            for i in 0..10_000u64 {
                // 10 000 events spread over one second (100 µs apart).
                let a = p.on_event(level, s + Duration::from_micros(i * 100));
                trims += a.trim as u32;
                drains += a.drain as u32;
                cpus += a.drain_cpu as u32;
            }
            let total = trims + drains + cpus;
            match level {
                Level::Low => assert_eq!((trims, drains, cpus), (1, 0, 0)),
                Level::Moderate => assert_eq!((trims, drains, cpus), (0, 4, 0)),
                _ => assert_eq!((trims, drains, cpus), (0, 3, 1)),
            }
            assert!(total <= 5, "{level}: {total} actions");
        }
    }

    #[test]
    fn zero_intervals_mean_no_limit() {
        let s = t0();
        let mut p = Policy::new(PolicyConfig {
            trim_min_interval_ms: 0,
            squeeze_ms: 0,
            drain_min_interval_ms: 0,
            drain_cpu_min_interval_ms: 0,
            level_hold_ms: 0,
        });
        assert!(p.on_event(Level::Low, s).trim);
        assert!(p.on_event(Level::Low, s).trim);
        let a = p.on_event(Level::Critical, s);
        assert!(a.drain_cpu);
        assert_eq!(a.squeeze_until, None);
        assert_eq!(a.level, Level::Normal, "hold 0: the level never holds");
    }
}
