//! Budget: the library's own cache limit, like UMA's `uma_kmem_limit`.
//!
//! The allocator core supplies a function returning the bytes it holds in caches; the source
//! compares them with `max_cached_bytes` (used fraction, defaults):
//!
//! | cached / max_cached_bytes | level    |
//! |---------------------------|----------|
//! | ≥ 100 %                   | Critical |
//! | ≥ 90 %                    | Moderate |
//! | ≥ 80 %                    | Low      |
//!
//! `max_cached_bytes == 0` means "no budget" (always Normal). Polled every `interval_ms`
//! (default 100 ms); a non-Normal level is reported on change and every `repeat_ms` (500 ms)
//! while it lasts. The core may also call [`budget_level`] directly on its slow paths.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::source::{LevelReporter, Outcome, Readiness, Source, SourceError, SourceKind};
use super::Level;

/// Thresholds of the budget source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetConfig {
    /// The budget in bytes; 0 = none (source inactive).
    pub max_cached_bytes: u64,
    /// Low at or above this fraction of the budget. Default 0.80.
    pub low_used: f64,
    /// Moderate at or above. Default 0.90.
    pub moderate_used: f64,
    /// Critical at or above. Default 1.00.
    pub critical_used: f64,
    /// Poll interval. Default 100 ms.
    pub interval_ms: u64,
    /// Re-report a persisting level this often. Default 500 ms.
    pub repeat_ms: u64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            max_cached_bytes: 0,
            low_used: 0.80,
            moderate_used: 0.90,
            critical_used: 1.00,
            interval_ms: 100,
            repeat_ms: 500,
        }
    }
}

/// The level for `held` cached bytes against the budget. Pure.
pub fn budget_level(held: u64, cfg: &BudgetConfig) -> Level {
    if cfg.max_cached_bytes == 0 {
        return Level::Normal;
    }
    let used = held as f64 / cfg.max_cached_bytes as f64;
    if used >= cfg.critical_used {
        Level::Critical
    } else if used >= cfg.moderate_used {
        Level::Moderate
    } else if used >= cfg.low_used {
        Level::Low
    } else {
        Level::Normal
    }
}

/// A function giving the bytes currently held in caches (cheap; called on the reclaim
/// thread, e.g. a sum of per-CPU counters or one atomic load).
pub type HeldBytes = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Polled budget source.
pub struct BudgetSource {
    held: HeldBytes,
    cfg: BudgetConfig,
    next: Instant,
    reporter: LevelReporter,
}

impl fmt::Debug for BudgetSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetSource")
            .field("cfg", &self.cfg)
            .field("last_level", &self.reporter.last_level())
            .finish()
    }
}

impl BudgetSource {
    /// Watch `held()` against `cfg.max_cached_bytes` (which must be > 0).
    pub fn new(
        held: HeldBytes,
        cfg: BudgetConfig,
        now: Instant,
    ) -> Result<BudgetSource, SourceError> {
        if cfg.max_cached_bytes == 0 {
            return Err(SourceError::invalid("max_cached_bytes is 0 (no budget)"));
        }
        Ok(BudgetSource {
            held,
            cfg,
            next: now,
            reporter: LevelReporter::default(),
        })
    }
}

impl Source for BudgetSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Budget
    }

    fn describe(&self) -> String {
        let c = &self.cfg;
        format!(
            "max_cached_bytes {}; Low >= {:.0}%, Moderate >= {:.0}%, Critical >= {:.0}%; every {} ms",
            c.max_cached_bytes,
            c.low_used * 100.0,
            c.moderate_used * 100.0,
            c.critical_used * 100.0,
            c.interval_ms
        )
    }

    fn fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    fn epoll_events(&self) -> u32 {
        0
    }

    fn next_poll(&self, _now: Instant) -> Option<Instant> {
        Some(self.next)
    }

    fn on_ready(&mut self, _r: Readiness, now: Instant) -> Result<Outcome, SourceError> {
        self.next = now + Duration::from_millis(self.cfg.interval_ms.max(1));
        let level = budget_level((self.held)(), &self.cfg);
        Ok(self.reporter.observe(level, now, self.cfg.repeat_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn levels() {
        let c = BudgetConfig {
            max_cached_bytes: 1000,
            ..Default::default()
        };
        assert_eq!(budget_level(0, &c), Level::Normal);
        assert_eq!(budget_level(799, &c), Level::Normal);
        assert_eq!(budget_level(800, &c), Level::Low);
        assert_eq!(budget_level(900, &c), Level::Moderate);
        assert_eq!(budget_level(1000, &c), Level::Critical);
        assert_eq!(budget_level(5000, &c), Level::Critical);
        assert_eq!(
            budget_level(5000, &BudgetConfig::default()),
            Level::Normal,
            "no budget"
        );
    }

    #[test]
    fn source_reports_changes_and_repeats() {
        let held = Arc::new(AtomicU64::new(0));
        let h = held.clone();
        let s0 = Instant::now();
        let cfg = BudgetConfig {
            max_cached_bytes: 100,
            ..Default::default()
        };
        let mut s =
            BudgetSource::new(Arc::new(move || h.load(Ordering::Relaxed)), cfg, s0).unwrap();
        assert_eq!(s.next_poll(s0), Some(s0));
        assert_eq!(s.on_ready(Readiness::TIMER, s0).unwrap(), Outcome::Quiet);
        assert_eq!(s.next_poll(s0), Some(s0 + Duration::from_millis(100)));
        held.store(95, Ordering::Relaxed);
        let t = s0 + Duration::from_millis(100);
        assert_eq!(
            s.on_ready(Readiness::TIMER, t).unwrap(),
            Outcome::Event(Level::Moderate)
        );
        assert_eq!(
            s.on_ready(Readiness::TIMER, t + Duration::from_millis(100))
                .unwrap(),
            Outcome::Quiet
        );
        assert_eq!(
            s.on_ready(Readiness::TIMER, t + Duration::from_millis(500))
                .unwrap(),
            Outcome::Event(Level::Moderate),
            "repeated while it lasts"
        );
        held.store(100, Ordering::Relaxed);
        assert_eq!(
            s.on_ready(Readiness::TIMER, t + Duration::from_millis(600))
                .unwrap(),
            Outcome::Event(Level::Critical),
            "change reported at once"
        );
        assert!(BudgetSource::new(Arc::new(|| 0), BudgetConfig::default(), s0).is_err());
    }
}
