//! The disposal decision: where memory that leaves a cache goes, taken once by the caller at the
//! top (the free path, the periodic trim, a reclaim, the squeeze, a page-pool shrink, a zone's
//! destruction) and passed down through the zone and depot into the keg, which acts on it and
//! reads no process state of its own.
//!
//! A decision answers two questions:
//!
//! * **Where a slab left entirely free goes** ([`Emptied`]): onto its keg's free list (under the
//!   keg's free-slab cap), back to the OS before the call returns (the squeeze window), into a
//!   reclaim's release pipeline ([`crate::release`]), or — for a page pool's shrink — the items
//!   go into the zone's stash and never reach a slab.
//! * **How pages leave when they leave without a reclaim** ([`Pages`]): lazily (settle, then
//!   `MADV_FREE`, [`crate::lazy`]) or now (`MADV_DONTNEED`), with the lazy settings and the
//!   clock the lazy stamps come from.
//!
//! [`Disposal::current`] is the only place that reads the process-wide switches (the lazy mode,
//! the pressure flag, the squeeze window); every other constructor is pure, so a keg's policy is
//! a function of its inputs and the time its decision carries (tests pass a fake clock).

use crate::lazy::{self, ReleaseKind};
use crate::release::Session;

/// How pages leave a cache outside a reclaim, decided once with the rest of the decision.
#[derive(Clone, Copy)]
pub(crate) struct Pages {
    /// Lazily (no pressure, lazy freeing on, no squeeze window) or now.
    pub(crate) kind: ReleaseKind,
    /// The settle delay of lazily freed slabs (0: `MADV_FREE` at once).
    pub(crate) settle_ms: u64,
    /// The lazy slabs' clock ([`lazy::now_ms`], or a fake one in tests); read only when a stamp
    /// or a delay is needed, so a free that empties no slab reads no clock.
    pub(crate) clock: fn() -> u32,
}

impl Pages {
    /// Pages go back with `MADV_DONTNEED` (pressure, a squeeze, lazy freeing off).
    pub(crate) const NOW: Pages = Pages {
        kind: ReleaseKind::Now,
        settle_ms: 0,
        clock: lazy::now_ms,
    };

    /// Lazily, with these settings: pure (tests, and [`Disposal::current`]).
    pub(crate) fn lazy(settle_ms: u64, clock: fn() -> u32) -> Pages {
        Pages {
            kind: ReleaseKind::Lazy,
            settle_ms,
            clock,
        }
    }

    #[inline]
    pub(crate) fn is_lazy(&self) -> bool {
        self.kind == ReleaseKind::Lazy
    }
}

/// Where a slab left entirely free by a take-back goes.
pub(crate) enum Emptied<'s> {
    /// Onto the free list; its pages stay backed, except the slabs beyond the keg's free-slab cap
    /// (back at once, or after the excess delay when [`Pages`] says lazily).
    Keep,
    /// Its pages are released before the call returns, with the keg lock dropped (the
    /// squeeze window).
    Release,
    /// Beyond the keg's reserve (none when the session keeps no reserve), to the session's
    /// release pipeline; onto the free list within it, or when the session cannot take one more
    /// keg (the reclaim's final [`crate::keg::Keg::release_free`] releases those). An inactive
    /// session means [`Emptied::Keep`].
    Pipeline(&'s mut Session),
    /// A page pool's shrink: the items go into the zone's stash (`zone/stash.rs`) to be given up
    /// lazily, except the first ones, counted here, which the shrink keeps as free pages (those
    /// go to their slabs as with [`Emptied::Keep`]). A keg given this decision treats it as
    /// `Keep`: the zone splits the items before they reach it.
    Stash(&'s mut usize),
}

/// The disposal decision. See the module documentation.
pub(crate) struct Disposal<'s> {
    pub(crate) emptied: Emptied<'s>,
    pub(crate) pages: Pages,
    /// Whether the huge pages of dense kegs may be broken as needed (pressure, a squeeze, a
    /// reclaim, an explicit drain); without it (a calm periodic pass, the free path) only
    /// whole free huge pages go back and a partly used one is broken only beyond the idle
    /// allowance (`keg/huge.rs`, [`crate::keg::idle_breaks`]).
    pub(crate) breaks: bool,
}

impl<'s> Disposal<'s> {
    /// The decision of a caller outside a reclaim (the free path, the periodic trim and
    /// shrink, a resize): from the process state now. In a squeeze window emptied slabs go back
    /// at once; otherwise onto the free list, and pages leave lazily only when lazy freeing is
    /// on and no pressure is reported ([`lazy::release_kind`]). The one reader of those
    /// switches; one clock read at most (and none while no squeeze window was ever opened).
    pub(crate) fn current() -> Disposal<'static> {
        let squeezing = crate::gate::squeezing_now();
        // Memory wanted now: pages leave at once and huge pages may break.
        let wanted = squeezing || lazy::under_pressure();
        Disposal {
            emptied: if squeezing {
                Emptied::Release
            } else {
                Emptied::Keep
            },
            pages: Self::pages_when(wanted),
            breaks: wanted,
        }
    }

    /// Slabs emptied go onto the free list, pages leave as `pages` says, and huge pages break
    /// only under pressure (`pages` says now while no lazy freeing is on, too: then they
    /// break). Pure.
    pub(crate) fn keep_as(pages: Pages) -> Disposal<'static> {
        Disposal {
            emptied: Emptied::Keep,
            pages,
            breaks: !pages.is_lazy(),
        }
    }

    /// [`Pages`] from the process state: lazily only with lazy freeing on, no pressure and no
    /// squeeze window (`squeezing`, read by the caller).
    pub(crate) fn pages_now(squeezing: bool) -> Pages {
        Self::pages_when(squeezing || lazy::under_pressure())
    }

    /// [`Pages`] when memory is `wanted` now (pressure or a squeeze window) or not: lazily only
    /// with lazy freeing on and memory not wanted.
    fn pages_when(wanted: bool) -> Pages {
        match lazy::release_kind(lazy::enabled(), wanted) {
            ReleaseKind::Lazy => Pages::lazy(lazy::settle_ms(), lazy::now_ms),
            ReleaseKind::Now => Pages::NOW,
        }
    }

    /// Slabs emptied go onto the free list; pages that leave, leave now. Pure: what a keg of
    /// buckets, a zone's destruction and tests use.
    pub(crate) fn keep() -> Disposal<'static> {
        Disposal {
            emptied: Emptied::Keep,
            pages: Pages::NOW,
            breaks: true,
        }
    }

    /// Slabs emptied are released before the call returns (the squeeze). Pure.
    pub(crate) fn release() -> Disposal<'static> {
        Disposal {
            emptied: Emptied::Release,
            pages: Pages::NOW,
            breaks: true,
        }
    }

    /// A reclaim's decision: emptied slabs into `sess`'s pipeline, pages that leave otherwise
    /// leave now (a reclaim wants the memory). `squeezing` (read once by the reclaim's entry
    /// point): a session that keeps reserves would keep some of what a squeeze releases, so
    /// then the slabs go back at once; an inactive session keeps them on the free list for the
    /// reclaim's final [`crate::keg::Keg::release_free`] (or releases them at once while
    /// squeezing). Pure.
    pub(crate) fn reclaim(sess: &'s mut Session, squeezing: bool) -> Disposal<'s> {
        let emptied = if sess.active() && !(squeezing && sess.keep_reserve()) {
            Emptied::Pipeline(sess)
        } else if squeezing {
            Emptied::Release
        } else {
            Emptied::Keep
        };
        Disposal {
            emptied,
            pages: Pages::NOW,
            breaks: true,
        }
    }

    /// A page pool's shrink into its stash: `to_slabs` items still go to their slabs first.
    pub(crate) fn stash(to_slabs: &'s mut usize, pages: Pages) -> Disposal<'s> {
        Disposal {
            emptied: Emptied::Stash(to_slabs),
            pages,
            breaks: !pages.is_lazy(),
        }
    }

    /// The same decision for a shorter borrow (it is passed down by `&mut` through loops).
    pub(crate) fn reborrow(&mut self) -> Disposal<'_> {
        Disposal {
            emptied: match &mut self.emptied {
                Emptied::Keep => Emptied::Keep,
                Emptied::Release => Emptied::Release,
                Emptied::Pipeline(s) => Emptied::Pipeline(s),
                Emptied::Stash(n) => Emptied::Stash(n),
            },
            pages: self.pages,
            breaks: self.breaks,
        }
    }

    /// The release session a reclaim passes down, if any (active or not).
    pub(crate) fn session(&mut self) -> Option<&mut Session> {
        match &mut self.emptied {
            Emptied::Pipeline(s) => Some(s),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reclaim_that_keeps_reserves_releases_at_once_while_squeezing() {
        let mut inactive = Session::inactive();
        assert!(matches!(
            Disposal::reclaim(&mut inactive, false).emptied,
            Emptied::Keep
        ));
        assert!(matches!(
            Disposal::reclaim(&mut inactive, true).emptied,
            Emptied::Release
        ));
        let mut s = Session::begin_wait(true);
        assert!(matches!(
            Disposal::reclaim(&mut s, false).emptied,
            Emptied::Pipeline(_)
        ));
        assert!(matches!(
            Disposal::reclaim(&mut s, true).emptied,
            Emptied::Release
        ));
        drop(s);
        let mut s = Session::begin_wait(false);
        assert!(matches!(
            Disposal::reclaim(&mut s, true).emptied,
            Emptied::Pipeline(_)
        ));
        assert!(!Disposal::reclaim(&mut s, true).pages.is_lazy());
    }
}
