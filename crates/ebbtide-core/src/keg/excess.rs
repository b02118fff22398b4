//! The free-slab cap and its delay: when the free slabs a keg holds beyond its cap leave the
//! free list. The rule ([`excess_step`]) is a pure function of the keg's count, its cap, the
//! caller's decision and the time; the keg keeps only the clock it starts.

use super::*;

/// How long a keg may hold more entirely free slabs than its cap ([`Keg::keep_free_at_most`])
/// on its free list when its decision says pages leave lazily: a free that empties one slab more
/// than the cap keeps it there (allocatable without a fault or any bookkeeping), and the excess
/// leaves the free list once it has lasted this long — at the keg's next free or on the
/// runtime's next periodic step ([`Keg::trim_expired_excess`]), whichever comes first — into
/// the lazy decay ([`crate::lazy`]), not back to the kernel at once. When pages leave now
/// (pressure, a squeeze window, lazy freeing off) the excess is released at once. Why 10 ms and
/// why the lazy decay rather than a release: `docs/design/keg-records.md`, "The free-slab cap's
/// delay".
pub(crate) const EXCESS_DELAY_MS: u64 = 10;

/// Kegs holding an excess over their cap now (`excess_since != 0`, changed under each keg's
/// lock): the periodic step walks the zones only when some do. Relaxed throughout: the count
/// orders nothing; a stale read costs one walk for nothing, or delays a trim by one step.
pub(crate) static EXCESS_KEGS: AtomicUsize = AtomicUsize::new(0);

/// Stops a keg's excess clock, if it runs (keg lock held: `g` is its state).
pub(super) fn end_excess(g: &mut KegInner) {
    if g.excess_since != 0 {
        g.excess_since = 0;
        EXCESS_KEGS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The excess rule, pure: a keg holding `nfree` free slabs with cap `cap`, its excess clock
/// started at `since` (0: not running), at `now` (the lazy clock, [`crate::lazy::now_ms`]).
/// Returns the clock's new start (0: stopped) and whether the slabs beyond the cap leave the
/// free list now. Without `delay` (pages leave now) they leave whenever there are any; with it,
/// once the keg has held more than its cap for [`EXCESS_DELAY_MS`]: the first call over the cap
/// starts the clock (never at 0, which means stopped), a later one past the delay stops it and
/// says yes, and a new excess after that starts a delay of its own.
pub(super) fn excess_step(
    nfree: usize,
    cap: usize,
    delay: bool,
    since: u32,
    now: u32,
) -> (u32, bool) {
    let over = nfree > cap;
    if !over || !delay {
        return (0, over);
    }
    if since == 0 {
        return (now.max(1), false);
    }
    if crate::lazy::expired(since, now, EXCESS_DELAY_MS) {
        return (0, true);
    }
    (since, false)
}

impl Keg {
    /// Trims the free list to `cap` slabs: without pressure (`pages` lazily) the slabs beyond
    /// it go into the lazy decay ([`crate::lazy`]: they settle, are offered with `MADV_FREE`, are
    /// released after `lazy_decay_ms` unless allocation takes them again first, and at once when
    /// another zone needs fresh pages, `zone::make_room`); else they are released now. Returns
    /// the bytes released now.
    pub(super) fn trim_excess(&self, cap: usize, pages: Pages) -> usize {
        // Whole free huge pages first, huge pages broken last, as many as the cap asks
        // (`huge.rs`): the cap bounds every free slab.
        let lazy = pages
            .is_lazy()
            .then(|| ((pages.clock)(), pages.settle_ms == 0));
        self.release_free_to(cap, &mut Session::inactive(), lazy, false)
    }

    /// Whether the free slabs beyond the cap leave the free list now ([`excess_step`] on the
    /// keg's state, under its lock `g`); `now` is read only when the keg holds more than `cap`
    /// with `delay`. Starts or stops the keg's excess clock (and [`EXCESS_KEGS`] with it).
    pub(super) fn excess_due(
        &self,
        g: &mut KegInner,
        cap: usize,
        delay: bool,
        now: impl FnOnce() -> u32,
    ) -> bool {
        let over = g.nfree_slabs > cap;
        let now = if over && delay { now() } else { 0 };
        let (since, due) = excess_step(g.nfree_slabs, cap, delay, g.excess_since, now);
        match (g.excess_since, since) {
            (0, 0) => {}
            (0, _) => {
                g.excess_since = since;
                EXCESS_KEGS.fetch_add(1, Ordering::Relaxed);
            }
            (_, 0) => end_excess(g),
            _ => {}
        }
        due
    }

    /// The periodic step (the runtime's, every `pool_shrink_interval_ms`): the free slabs beyond
    /// the cap leave the free list if the keg has held them for [`EXCESS_DELAY_MS`] at `now`
    /// (into the lazy decay when `pages` says lazily, else released at once,
    /// [`Keg::trim_excess`]). Returns the bytes released now. Also what starts the excess clock
    /// of a keg whose cap fell below what it holds (a zone whose working set of reuse shrank at
    /// the end of a period: `ZoneInner::periodic`).
    pub(crate) fn trim_expired_excess(&self, now: u32, pages: Pages) -> usize {
        let cap = self.free_cap_now();
        if cap == usize::MAX {
            return 0;
        }
        let due = self.excess_due(&mut lock(&self.inner), cap, pages.is_lazy(), || now);
        if due {
            self.trim_excess(cap, pages)
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_excess_waits_its_delay_only_when_pages_leave_lazily() {
        // At or under the cap: nothing due, the clock stops.
        assert_eq!(excess_step(4, 4, true, 500, 900), (0, false));
        // Pages leave now: due at once, no clock.
        assert_eq!(excess_step(5, 4, false, 0, 900), (0, true));
        assert_eq!(excess_step(5, 4, false, 500, 900), (0, true));
        // Lazily: the first excess starts the clock (never at 0)...
        assert_eq!(excess_step(5, 4, true, 0, 1000), (1000, false));
        assert_eq!(excess_step(5, 4, true, 0, 0), (1, false));
        // ... which runs for EXCESS_DELAY_MS, then the excess leaves and the clock stops.
        assert_eq!(
            excess_step(6, 4, true, 1000, 1000 + EXCESS_DELAY_MS as u32 - 1),
            (1000, false)
        );
        assert_eq!(
            excess_step(6, 4, true, 1000, 1000 + EXCESS_DELAY_MS as u32),
            (0, true)
        );
        // Across the wrap of the millisecond clock.
        let at = u32::MAX - 3;
        assert_eq!(
            excess_step(5, 4, true, at, at.wrapping_add(EXCESS_DELAY_MS as u32)),
            (0, true)
        );
    }
}
