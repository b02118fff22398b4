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
//! bounds instead of counting as a batch (`insert(n, false)`); so do removals that are not demand
//! (trim and drain, [`Wss::reclaim`]: UMA's `zone_fetch_bucket(..., reclaim = true)`), or the
//! trim itself would look like an allocation batch of its own size at the next update and hold
//! what it left behind for many periods.
//!
//! ebbtide adds two figures of illumos kmem's reaper, for the periodic trim without pressure
//! ([`Wss::periodic_target`]):
//!
//! * `last_imin`, the lowest level of the period that just ended: those items were not touched
//!   for a whole period; what lies above both the working set and that untouched floor goes.
//! * `idle`, how many periods in a row ended without any demand: no allocation reached the
//!   depot (`demand` counts them within the period: items it handed out, and one for every
//!   allocation that found it empty and went on to the slabs). Frees alone are not demand: a
//!   depot that only received items for a whole period (a program that deleted its data) keeps
//!   no more than its working set, and after [`IDLE_PERIODS`] such periods its working set is
//!   0 and the depot empties at that pass. A depot in steady use (some allocation past the
//!   per-CPU stacks every period, served by the depot or not) is never trimmed below its
//!   working set, nor below what it touched in the period.
//!
//! With ebbtide's 2 s period an idle depot is empty 2–4 s after its last allocation; memory a
//! program freed in one go leaves at the first pass after the frees if no allocation came with
//! them in that period, else at the second (UMA's decay alone held a tenth of a burst for 14–16 s:
//! docs/design/idle-decay.md).

/// Periods in a row without demand after which a depot's working set is 0 (kmem reaps what was
/// unused for one interval; one more period keeps a working set across a short pause).
pub const IDLE_PERIODS: u64 = 2;

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
    /// Allocations that reached the depot since the last update: items it handed out, plus one
    /// for each that found it empty ([`Wss::miss`]).
    pub demand: u64,
    /// Periods in a row that ended with `demand == 0` (0: the last one saw demand).
    pub idle: u64,
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

    /// `n` items were taken out of the depot by an allocation (demand).
    pub fn remove(&mut self, n: u64) {
        debug_assert!(n <= self.nitems);
        self.nitems -= n.min(self.nitems);
        self.demand += n;
        if self.nitems < self.imin {
            self.imin = self.nitems;
        }
        if self.nitems < self.bimin {
            self.bimin = self.nitems;
        }
    }

    /// An allocation found the depot empty (and went on to the slabs): demand the depot could
    /// not serve. It keeps the zone from counting as idle; the estimate itself is unchanged
    /// (UMA's working set is what the depot handed out).
    pub fn miss(&mut self) {
        self.demand += 1;
    }

    /// `n` items were taken out of the depot by a trim or drain (not demand): the bounds of the
    /// period shift down with them, so the estimate is not perturbed (UMA). A batch in progress
    /// keeps its size (`imax - bimin` does not grow); `bimin` follows the level down only when
    /// the trim goes below it.
    pub fn reclaim(&mut self, n: u64) {
        debug_assert!(n <= self.nitems);
        let n = n.min(self.nitems);
        self.nitems -= n;
        self.imin -= n.min(self.imin);
        self.imax -= n.min(self.imax);
        if self.bimin > self.nitems {
            self.bimin = self.nitems;
        }
    }

    /// The periodic update (UMA every 20 s; ebbtide every `trim_interval_ms`, and at every
    /// `TRIM` request). A depot without demand for [`IDLE_PERIODS`] periods has no working set.
    pub fn update(&mut self) {
        self.idle = if self.demand == 0 {
            self.idle.saturating_add(1)
        } else {
            0
        };
        self.demand = 0;
        self.wss = if self.idle >= IDLE_PERIODS {
            0
        } else {
            (self.wss * 3 / 4).max(self.imax - self.bimin)
        };
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
    /// the depot was in use during the last period (it saw demand and the items came in or went
    /// out during it); what sat untouched above the working set for a whole period goes, and
    /// in a period without demand everything above the working set goes. Call right after
    /// [`Wss::update`].
    pub fn periodic_target(&self) -> u64 {
        if self.idle > 0 {
            return self.wss;
        }
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

    /// One periodic pass as `ZoneInner::periodic` does it (bucket granularity aside): update,
    /// then trim to the periodic target. Returns the items kept.
    fn pass(w: &mut Wss) -> u64 {
        w.update();
        let keep = w.periodic_target();
        if w.nitems > keep {
            w.reclaim(w.nitems - keep);
        }
        w.check().unwrap();
        w.nitems
    }

    /// A depot holding `n` items at the start of a period, no history.
    fn at(n: u64) -> Wss {
        Wss {
            nitems: n,
            imax: n,
            imin: n,
            bimin: n,
            ..Default::default()
        }
    }

    #[test]
    fn batch_size_becomes_wss_and_decays() {
        let mut w = Wss::default();
        w.insert(100, true); // frees fill the depot
        w.remove(80); // a batch of 80 allocations
        w.insert(80, true); // freed again: new maximum closes the batch
        w.check().unwrap();
        w.update();
        assert_eq!(w.wss, 80, "imax 100 - bimin 20: the batch of 80");
        let mut w = at(100);
        w.remove(80);
        w.insert(80, true);
        w.update();
        assert_eq!(w.wss, 80);
        // Periods with a little demand (one item): the estimate decays by 1/4 each time.
        for want in [60, 45, 33] {
            w.remove(1);
            w.insert(1, true);
            w.update();
            assert_eq!(w.wss, want);
        }
        w.check().unwrap();
    }

    #[test]
    fn a_period_without_demand_keeps_the_working_set_two_drop_it() {
        let mut w = at(100);
        w.remove(80);
        w.insert(80, true);
        w.update();
        assert_eq!((w.wss, w.idle), (80, 0));
        // No allocation for a whole period: UMA's decay once, nothing kept above it.
        w.update();
        assert_eq!((w.wss, w.idle), (60, 1));
        assert_eq!(w.periodic_target(), 60);
        // A second one: no working set left.
        w.update();
        assert_eq!((w.wss, w.idle), (0, 2));
        assert_eq!(w.periodic_target(), 0);
        // Demand again: the estimate starts over from the new batch.
        w.remove(30);
        w.insert(30, true);
        w.update();
        assert_eq!((w.wss, w.idle), (30, 0));
    }

    #[test]
    fn a_trim_is_not_an_allocation_batch() {
        let mut w = at(0);
        w.insert(1000, true); // a burst of frees
        w.remove(10); // a little demand in the same period
        w.insert(10, true);
        w.update();
        assert_eq!(w.wss, 10);
        w.reclaim(900); // trimmed (pressure, or a drain)
        w.check().unwrap();
        w.remove(5); // the zone stays in use
        w.insert(5, true);
        w.update();
        // Before `reclaim` shifted the bounds, the trim counted as a batch of 900 here.
        assert_eq!(w.wss, 7, "max(10 * 3/4, 5): the trim is not demand");
    }

    /// The case of docs/design/idle-decay.md (python, back in 21 s): the periodic pass falls
    /// in the middle of the delete. Items freed before the pass sat untouched for the next period,
    /// those freed after it were touched; the trim of the first must not hold the second.
    #[test]
    fn a_delete_split_by_a_pass_is_gone_at_the_next_pass() {
        let mut w = at(0);
        w.insert(2400, true); // first part of the delete (and a little demand: a live program)
        w.remove(3);
        w.insert(3, true);
        assert_eq!(pass(&mut w), 2400, "touched in this period: kept for now");
        w.insert(330, true); // the rest of the delete, after the pass
        w.remove(3);
        w.insert(3, true);
        assert_eq!(
            pass(&mut w),
            330,
            "the untouched 2400 go, the 330 touched stay"
        );
        w.remove(3);
        w.insert(3, true);
        assert!(
            pass(&mut w) <= 3,
            "untouched for a whole period and not a working set: gone ({w:?})"
        );
    }

    /// The delete in a program whose allocations never reach the depot (served by the per-CPU
    /// stacks): a period of frees alone is not demand, the first pass after it trims to the
    /// working set.
    #[test]
    fn frees_alone_go_at_the_first_pass() {
        let mut w = at(0);
        w.insert(2730, true);
        assert_eq!(pass(&mut w), 0);
        assert_eq!(w.idle, 1);
    }

    /// Allocations that found the depot empty are demand too: a zone whose batches the slabs
    /// served is not idle, and what it freed in the period stays for one more.
    #[test]
    fn misses_are_demand() {
        let mut w = at(0);
        for _ in 0..10 {
            w.miss();
        }
        w.insert(1000, true);
        assert_eq!(pass(&mut w), 1000);
        assert_eq!((w.idle, w.wss), (0, 0));
        assert_eq!(pass(&mut w), 0, "then untouched for a whole period");
    }

    /// A zone in steady use (a batch of 500 taken and given back every period) is never trimmed
    /// below its working set, and the periodic trims do not inflate it.
    #[test]
    fn a_zone_in_steady_use_keeps_its_working_set() {
        let mut w = at(0);
        w.insert(2000, true); // its first frees: more than it will need
        for i in 0..50 {
            w.remove(500);
            w.insert(500, true);
            let kept = pass(&mut w);
            assert!(kept >= 500, "period {i}: kept {kept} < working set 500");
            assert!(w.wss <= 500, "period {i}: wss {} above the batch", w.wss);
        }
        assert_eq!(w.nitems, 500, "the excess went, the working set stayed");
        // It stops: two periods later nothing is left.
        pass(&mut w);
        assert_eq!(pass(&mut w), 0);
    }

    proptest::proptest! {
        /// Any sequence of demand, frees, drained caches, trims and updates keeps the bounds.
        #[test]
        fn bounds_hold(ops in proptest::collection::vec((0u8..5, 0u64..300), 0..200)) {
            let mut w = Wss::default();
            for (op, n) in ops {
                match op {
                    0 => w.insert(n, true),
                    1 => w.insert(n, false),
                    2 => w.remove(n.min(w.nitems)),
                    3 => w.reclaim(n.min(w.nitems)),
                    _ => {
                        w.update();
                        proptest::prop_assert!(w.periodic_target() <= w.nitems.max(w.wss));
                    }
                }
                proptest::prop_assert!(w.check().is_ok(), "{:?}", w);
            }
        }
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
