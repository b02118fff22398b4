//! Caches beside the zones: memory a runtime above the core keeps outside any zone (a malloc's
//! recently freed huge mappings) that must go back by the same paths as the zones' — the idle
//! trim, every drain, DRAIN_CPU, a squeeze, buckets off under critical pressure — and count in
//! the cached bytes the budget reads.
//!
//! A pressure trim (`Request::Trim`: a Low event, `ebb_reclaim(TRIM)`) asks each cache for the
//! same as the zones' trim: keep what recent demand used, give back the rest
//! ([`OuterCache::trim`]); the periodic pass only gives back what has been idle.
//!
//! A runtime registers a `&'static dyn OuterCache` once; the reclaim entry points (`reclaim.rs`)
//! call every registered cache after the zones, with no core lock held. A cache asks
//! [`caching_allowed`] before keeping anything (no caching in a squeeze window or while buckets
//! are disabled, as for the zones).

use crate::sync::{lock, Mutex};

/// A cache kept beside the zones (see the module docs).
pub trait OuterCache: Sync {
    /// Bytes of free memory held now.
    fn held_bytes(&self) -> u64;
    /// The periodic pass without pressure at `now_ns` (the core's clock): give back what has
    /// been idle. Returns the bytes given back.
    fn periodic(&self, now_ns: u64) -> usize;
    /// A pressure trim at `now_ns`: keep at most what the cache's recent demand used (its
    /// working set, as the zones keep their depots' WSS), give back the rest and what has been
    /// idle. Returns the bytes given back. The default is the periodic pass.
    fn trim(&self, now_ns: u64) -> usize {
        self.periodic(now_ns)
    }
    /// Gives back everything held (drains, DRAIN_CPU, squeeze, buckets off). Returns the bytes.
    fn drain(&self) -> usize;
    /// A mapping was refused (`RLIMIT_AS` reached, say): gives back everything held, as
    /// [`OuterCache::drain`], and unmaps the address space that leaves unused, so that any
    /// other mapping may take it. Returns the bytes unmapped. The default is a drain (nothing
    /// unmapped).
    fn unmap_free(&self) -> usize {
        self.drain();
        0
    }
    /// Its huge pages, for the statistics (none by default).
    fn huge_pages(&self) -> HugePages {
        HugePages::default()
    }
}

/// What an outer cache says of the huge pages of its memory (the malloc's page heap: its 2 MiB
/// regions, `ebbtide-malloc/src/regions.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugePages {
    /// Huge pages (regions made eligible while dense) now.
    pub huge: u64,
    /// Regions partly in use now.
    pub partly_used: u64,
    /// Huge pages given back in part (split) and not whole since.
    pub broken: u64,
    /// Bytes given back as whole huge pages, ever.
    pub released_whole_bytes: u64,
}

/// The huge pages of every registered cache, summed. Allocates nothing (the observer's
/// statistics call it).
pub fn huge_pages() -> HugePages {
    let mut t = HugePages::default();
    each(|c| {
        let h = c.huge_pages();
        t.huge += h.huge;
        t.partly_used += h.partly_used;
        t.broken += h.broken;
        t.released_whole_bytes += h.released_whole_bytes;
    });
    t
}

const MAX: usize = 8;

static CACHES: Mutex<[Option<&'static dyn OuterCache>; MAX]> = Mutex::new([None; MAX]);

/// Registers `c` (at most eight per process; `false` when full or already registered).
pub fn register(c: &'static dyn OuterCache) -> bool {
    let mut cs = lock(&CACHES);
    let me = c as *const dyn OuterCache as *const ();
    if cs
        .iter()
        .flatten()
        .any(|x| core::ptr::eq(*x as *const dyn OuterCache as *const (), me))
    {
        return false;
    }
    match cs.iter_mut().find(|s| s.is_none()) {
        Some(s) => {
            *s = Some(c);
            true
        }
        None => false,
    }
}

fn each(mut f: impl FnMut(&'static dyn OuterCache)) {
    // Copied out: the caches run with no lock of this module held.
    let cs = *lock(&CACHES);
    for c in cs.into_iter().flatten() {
        f(c);
    }
}

/// Whether a cache may keep memory now: not in a squeeze window, not while buckets are
/// disabled.
pub fn caching_allowed() -> bool {
    crate::gate::buckets_enabled() && !crate::gate::squeezing_now()
}

pub(crate) fn periodic_all(now_ns: u64) -> usize {
    let mut b = 0;
    each(|c| b += c.periodic(now_ns));
    b
}

pub(crate) fn trim_all(now_ns: u64) -> usize {
    let mut b = 0;
    each(|c| b += c.trim(now_ns));
    b
}

pub(crate) fn drain_all() -> usize {
    let mut b = 0;
    each(|c| b += c.drain());
    b
}

pub(crate) fn unmap_free_all() -> usize {
    let mut b = 0;
    each(|c| b += c.unmap_free());
    b
}

/// Bytes held by every registered outer cache now (statistics; the budget counts them too).
pub fn held_bytes() -> u64 {
    let mut b = 0;
    each(|c| b += c.held_bytes());
    b
}
