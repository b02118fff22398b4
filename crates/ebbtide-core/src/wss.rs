//! The working-set estimator of a depot, as a pure value: UMA's `zone_domain_update_wss` and its
//! bookkeeping, with the time step passed in by the caller (one call of [`Wss::update`] per
//! period), so tests drive it without a clock.
//!
//! * `nitems`: items in the depot now.
//! * `imax` / `imin`: highest / lowest `nitems` since the last update.
//! * `bimin`: lowest `nitems` since the last new maximum (the bottom of the current allocation
//!   batch); `imax - bimin` is the size of the biggest batch taken from the depot.
//! * `wss = max(wss * 3/4, imax - bimin)`: the biggest batch, decayed by 1/4 per period.
//! * `limin`: long-time minimum of `imin - wss` (items the depot never needed), `timin`: periods
//!   since it last went negative.
//!
//! Invariant: `imax >= nitems >= bimin >= imin`.
//!
//! Inserts that are not demand (per-CPU caches drained into the depot by reclaim) shift the
//! bounds instead of counting as a batch (`insert(n, false)`).
//!
//! ebbtide adds one figure of illumos kmem's reaper: `last_imin`, the lowest level of the period
//! that just ended. Those items were not touched for a whole period; the periodic trim gives back
//! what lies above both the working set and that untouched floor
//! ([`Wss::periodic_target`]).

/// The estimator state of one depot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wss {
    pub nitems: u64,
    pub imax: u64,
    pub imin: u64,
    pub bimin: u64,
    pub wss: u64,
    pub limin: u64,
    pub timin: u64,
    /// `imin` of the period that ended at the last update.
    pub last_imin: u64,
}

impl Wss {
    /// `n` items were put into the depot; `ws` says whether they are demand (a free batch) or a
    /// drained per-CPU cache.
    pub fn insert(&mut self, n: u64, ws: bool) {
        self.nitems += n;
        if ws {
            if self.nitems > self.imax {
                // A new maximum: close the batch that ended at `bimin`, start a new one.
                let old = self.imax;
                if self.wss < old - self.bimin.min(old) {
                    self.wss = old - self.bimin.min(old);
                }
                self.imax = self.nitems;
                self.bimin = self.nitems;
            }
        } else {
            self.imin += n;
            self.bimin += n;
            if self.nitems > self.imax {
                self.imax = self.nitems;
            }
        }
    }

    /// `n` items were taken out of the depot (by an allocation, or by trim/drain).
    pub fn remove(&mut self, n: u64) {
        debug_assert!(n <= self.nitems);
        self.nitems -= n.min(self.nitems);
        if self.nitems < self.imin {
            self.imin = self.nitems;
        }
        if self.nitems < self.bimin {
            self.bimin = self.nitems;
        }
    }

    /// The periodic update (UMA every 20 s; ebbtide every `trim_interval_ms`).
    pub fn update(&mut self) {
        self.wss = (self.wss * 3 / 4).max(self.imax - self.bimin);
        let m = self.imin as i64 - self.wss as i64;
        if m >= 0 {
            let m = m as u64;
            self.limin = if self.limin >= m {
                m
            } else {
                (m + self.limin * 255) / 256
            };
            self.timin += 1;
        } else {
            self.limin = 0;
            self.timin = 0;
        }
        self.last_imin = self.imin;
        // UMA: imax -= (imax - nitems + 1) / 2
        self.imax -= (self.imax - self.nitems).div_ceil(2);
        self.imin = self.nitems;
        self.bimin = self.nitems;
    }

    /// Items to keep when trimming to the working set (`TRIM`).
    pub fn trim_target(&self) -> u64 {
        self.wss
    }

    /// Items to keep in the periodic trim without pressure: the working set, or more if part of
    /// the depot was in use during the last period; what sat untouched above the working set for
    /// a whole period goes. Call right after [`Wss::update`].
    pub fn periodic_target(&self) -> u64 {
        let untouched = self.last_imin.min(self.nitems);
        self.wss.max(self.nitems - untouched)
    }

    /// Checks `imax >= nitems >= bimin >= imin`.
    pub fn check(&self) -> Result<(), String> {
        if self.imax >= self.nitems && self.nitems >= self.bimin && self.bimin >= self.imin {
            Ok(())
        } else {
            Err(format!("wss bounds violated: {self:?}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_size_becomes_wss_and_decays() {
        let mut w = Wss::default();
        w.insert(100, true); // frees fill the depot
        w.remove(80); // a batch of 80 allocations
        w.insert(80, true); // freed again: new maximum closes the batch
        w.check().unwrap();
        w.update();
        assert_eq!(w.wss, 80, "imax 100 - bimin 20: the batch of 80");
        let mut w = Wss {
            nitems: 100,
            imax: 100,
            imin: 100,
            bimin: 100,
            ..Default::default()
        };
        w.remove(80);
        w.insert(80, true);
        w.update();
        assert_eq!(w.wss, 80);
        // Idle periods: the estimate decays by 1/4 each time.
        w.update();
        assert_eq!(w.wss, 60);
        w.update();
        assert_eq!(w.wss, 45);
        w.check().unwrap();
    }

    #[test]
    fn drained_caches_are_not_demand() {
        let mut w = Wss::default();
        w.insert(500, false);
        w.check().unwrap();
        w.update();
        assert_eq!(w.wss, 0, "a drain is not a working set");
        assert_eq!(w.periodic_target(), 0, "untouched for a whole period");
    }

    #[test]
    fn limin_and_timin_follow_the_long_time_minimum() {
        let mut w = Wss {
            nitems: 1000,
            imax: 1000,
            imin: 1000,
            bimin: 1000,
            ..Default::default()
        };
        for _ in 0..10 {
            w.remove(100);
            w.insert(100, true);
            w.update();
        }
        assert_eq!(w.wss, 100);
        assert_eq!(w.timin, 10);
        assert!(w.limin <= 900 && w.limin > 0, "{w:?}");
        // Dip below the working set: limin resets.
        w.remove(950);
        w.update();
        assert_eq!((w.limin, w.timin), (0, 0));
    }

    #[test]
    fn periodic_target_keeps_what_was_touched() {
        let mut w = Wss {
            nitems: 1000,
            imax: 1000,
            imin: 1000,
            bimin: 1000,
            ..Default::default()
        };
        w.remove(300);
        w.insert(300, true);
        w.update();
        // 700 items were never touched; the batch of 300 is the working set.
        assert_eq!(w.periodic_target(), 300);
    }
}
