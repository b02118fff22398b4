use super::*;

/// How long a keg may hold more entirely free slabs than its cap ([`Keg::keep_free_at_most`])
/// on its free list, when no one is short of memory: a free that empties one slab more than the
/// cap keeps it there (allocatable without a fault or any bookkeeping) and the excess leaves the
/// free list once it has lasted this long, at the keg's next free or on the runtime's next
/// periodic step ([`Keg::release_expired_excess`]), whichever comes first — into the lazy decay
/// ([`crate::lazy`]: settling, then `MADV_FREE`, back for good after `lazy_decay_ms` or as soon
/// as another zone or the malloc's large blocks need fresh pages, `zone::make_room`), not back
/// to the kernel at once. Under pressure (or in a squeeze window:
/// [`crate::lazy::release_kind_now`]), or without the runtime (lazy freeing off), the excess
/// goes back at once as before. mimalloc's purge delay (10 ms) is the anchor: a program that
/// frees a class's blocks and allocates them again within it pays nothing at all, and one that
/// frees everything at its end (the malloc benchmark's `fragmentation` case: ~20 % of its time
/// was those `madvise` calls, docs/benchmarks.md, "A/B of the caps") does not wait for the
/// kernel's zapping. Going into the lazy decay rather than back (2026-11-24): a class freed in
/// one phase of a program and allocated again in a later one (`python3 workload.py`: the 64-byte
/// objects of a dropped tree, then of a dict) took its pages back without faults — a third
/// fewer page faults in the whole run — while memory that another class needs still goes back
/// as that class grows, so peak RSS stays where it was (docs/benchmarks.md, "The free-slab
/// cap's excess into the lazy decay").
pub(crate) const EXCESS_DELAY_MS: u64 = 10;

/// Kegs holding an excess over their cap now (`excess_since != 0`, changed under each keg's
/// lock): the periodic step walks the zones only when some do. Relaxed throughout: the count
/// orders nothing; a stale read costs one walk for nothing, or delays a give-back by one step.
pub(crate) static EXCESS_KEGS: AtomicUsize = AtomicUsize::new(0);

/// Stops a keg's excess clock, if it runs (keg lock held: `g` is its state).
pub(super) fn end_excess(g: &mut KegInner) {
    if g.excess_since != 0 {
        g.excess_since = 0;
        EXCESS_KEGS.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Keg {
    /// Trims the free list to `cap` slabs: without pressure (`pages` lazily) the slabs beyond
    /// it go into the lazy decay ([`crate::lazy`]: they settle, are offered with `MADV_FREE`, are
    /// released after `lazy_decay_ms` unless allocation takes them again first, and at once when
    /// another zone needs fresh pages, `zone::make_room`); else they are released now. Returns
    /// the bytes released now.
    pub(super) fn trim_excess(&self, cap: usize, pages: Pages) -> usize {
        self.release_free(
            cap,
            &mut Disposal {
                emptied: Emptied::Keep,
                pages,
            },
        )
    }

    /// Whether the free slabs beyond the cap go back now. With `delay` (no pressure, lazy
    /// freeing on) only once the keg has held more than its cap for [`EXCESS_DELAY_MS`]
    /// (`now` is read only when it holds more); without it, whenever it holds more. Starts or
    /// ends the keg's excess clock; a new excess after a give-back starts its own delay.
    pub(super) fn excess_due(
        &self,
        g: &mut KegInner,
        cap: usize,
        delay: bool,
        now: impl FnOnce() -> u32,
    ) -> bool {
        let over = g.nfree_slabs > cap;
        if !over || !delay {
            end_excess(g);
            return over;
        }
        let now = now();
        if g.excess_since == 0 {
            g.excess_since = now.max(1);
            EXCESS_KEGS.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if crate::lazy::expired(g.excess_since, now, EXCESS_DELAY_MS) {
            end_excess(g);
            return true;
        }
        false
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
