//! Taking cached items back from a zone: the depot down to a target, the per-CPU stacks of some
//! or all CPUs (one fence per CPU), the periodic pass (working set, idle CPUs) and the page
//! pool shrink.

use super::*;

impl ZoneInner {
    /// Trims the depot to `keep` items (coldest buckets first) into their slabs, as `d`
    /// decides ([`Disposal`]); returns the items moved. Bucket slabs never go into a reclaim's
    /// pipeline: bucket kegs are shared by every zone, so their pages are released (and
    /// counted) by `reclaim_all`, not by one zone's reclaim.
    pub(crate) fn trim_depot(&self, keep: u64, d: &mut Disposal<'_>) -> usize {
        let mut moved = 0;
        loop {
            let b = lock(&self.depot).take_cold_above(keep);
            let Some(b) = b else { break };
            // SAFETY: the bucket came out of the depot, so no other thread holds it: its `count`
            // first slots are the items it carries, ours to move, and `Bucket::free` gets a
            // bucket from `Bucket::alloc` that nothing uses afterwards.
            unsafe {
                let n = (*b.as_ptr()).count as usize;
                self.give(&Bucket::slots(b)[..n], d.reborrow());
                moved += n;
                Bucket::free(b);
            }
        }
        moved
    }

    pub(crate) fn periodic(&self, _now_ns: u64) -> usize {
        // 1. Working-set update and trim of what sat untouched above it (everything above it
        //    after a period without demand; a depot idle for `wss::IDLE_PERIODS` has none).
        //    A zone whose caches follow reuse ends a period of it too, and keeps no more than
        //    its cap (`reuse.rs`).
        self.keg.reuse.end_period();
        let keep = {
            let mut d = lock(&self.depot);
            d.wss.update();
            if self.flags.contains(ZoneFlags::NOTRIM) {
                u64::MAX
            } else {
                d.wss.periodic_target().min(self.depot_cap())
            }
        };
        // One decision for the whole pass, from the process state now (a squeeze window, the
        // lazy mode, pressure).
        let mut d = Disposal::current();
        let mut moved = self.trim_depot(keep, &mut d);
        // 2. Idle CPUs: a stack whose word did not change for a whole period saw no operation.
        let mut idle = 0;
        for cpu in self.pcpu.cpus_in_use() {
            let h = self.pcpu.header(cpu);
            let w = h.word.load(Ordering::Relaxed);
            let mark = h.idle_mark.swap(w, Ordering::Relaxed);
            // The word's allocation counter wraps; the pass keeps the total (`Pcpu::fast_allocs`).
            self.pcpu.fold_allocs(cpu);
            if w == mark && (w & pcpu::COUNT_MASK) != 0 {
                idle |= 1u64 << (cpu % 64);
            }
        }
        if idle != 0 {
            // An idle stack gives its whole grant back (`sizing.rs`): it reopens at its floor.
            for cpu in 0..self.pcpu.ncpu() {
                if idle & (1u64 << (cpu % 64)) != 0 {
                    self.pcpu.demand(cpu).grant.store(0, Ordering::Relaxed);
                }
            }
            moved += self.drain_cpus(|cpu| idle & (1u64 << (cpu % 64)) != 0, &mut d);
        }
        let released = self.release_free_slabs(self.keg.reserve_slabs(), &mut d);
        if !d.breaks {
            // Calm: huge pages a drain broke and the program filled again become huge again.
            self.keg.collapse_mended();
        }
        let _ = moved;
        if released > 0 {
            self.counters
                .released_bytes
                .fetch_add(released as u64, Ordering::Relaxed);
        }
        released
    }

    /// Free items the zone holds anywhere: per-CPU stacks, depot, free slots of backed slabs.
    pub(crate) fn free_items(&self) -> usize {
        self.pcpu_items() + lock(&self.depot).wss.nitems as usize + self.keg.counts().free_items
    }

    /// Page-pool shrink (blkback's `shrink_free_pagepool`): keeps at most `target` free items,
    /// coldest first — depot buckets, then per-CPU stacks, then the slabs' pages are released.
    /// Items in use are never touched. `d` is the caller's decision (its pages say whether the
    /// pages leave lazily); the shrink's items go to their slabs as it says, or into the pool's
    /// stash (`stash.rs`) while the stash is open, and a stash that is not (pressure, lazy
    /// freeing off or without a settle delay) is emptied the way pages leave now. Returns the
    /// bytes released.
    pub(crate) fn trim_to(&self, target: usize, d: &mut Disposal<'_>) -> usize {
        let stash = self.stash_open(d.pages);
        let mut released = 0;
        if !stash && self.stash.len() > 0 {
            released += if d.pages.is_lazy() {
                self.drain_stash(&mut Disposal::keep_as(d.pages))
            } else {
                self.drain_stash(&mut Disposal::release())
            };
        }
        let free = self.free_items();
        if free <= target {
            self.count_released(released);
            return released;
        }
        let pcpu = self.pcpu_items();
        let keep_depot = target.saturating_sub(pcpu) as u64;
        // What the depot holds beyond `keep_depot` is beyond the target (with the stacks).
        let mut none = 0;
        let pages = d.pages;
        self.trim_depot(
            keep_depot,
            &mut if stash {
                Disposal::stash(&mut none, pages)
            } else {
                d.reborrow()
            },
        );
        if self.free_items() > target && pcpu > 0 {
            // The stacks are emptied whole: of their items, those that make up the target with
            // what the depot and the slabs still hold stay free (in the slabs).
            let held = lock(&self.depot).wss.nitems as usize + self.keg.counts().free_items;
            let mut room = target.saturating_sub(held);
            let mut to = if stash {
                Disposal::stash(&mut room, pages)
            } else {
                d.reborrow()
            };
            // Only the stacks that hold items: an empty one has nothing to give, and each drain
            // costs a fence (`membarrier`) of its CPU. A push racing with this read is like a
            // push just after the drain: the next shrink sees it.
            self.drain_cpus(|cpu| self.pcpu.count(cpu) > 0, &mut to);
            self.trim_depot(target as u64, &mut to);
        }
        // Free slab slots may hold what the caches no longer do.
        let cached = self.pcpu_items() + lock(&self.depot).wss.nitems as usize;
        let slabs_keep = target.saturating_sub(cached) / self.keg.geo.items_per_slab;
        released += self.release_free_slabs(slabs_keep, d);
        self.count_released(released);
        released
    }

    fn count_released(&self, released: usize) {
        if released > 0 {
            self.counters
                .released_bytes
                .fetch_add(released as u64, Ordering::Relaxed);
        }
    }

    /// Items taken out of a cache, where `d` sends them: to their slabs, or into the stash
    /// (all but the first ones its count keeps as free pages, which go to their slabs).
    fn give(&self, items: &[*mut u8], mut d: Disposal<'_>) {
        let pages = d.pages;
        if let Emptied::Stash(to_slabs) = &mut d.emptied {
            let k = (**to_slabs).min(items.len());
            if k > 0 {
                self.return_to_keg(&items[..k], &mut Disposal::keep_as(pages));
                **to_slabs -= k;
            }
            self.stash_in(&items[k..], pages);
        } else {
            self.return_to_keg(items, &mut d);
        }
    }

    pub(crate) fn pcpu_items(&self) -> usize {
        (0..self.pcpu.ncpu()).map(|c| self.pcpu.count(c)).sum()
    }
}

impl ZoneInner {
    /// Drains the per-CPU stacks of this zone on the CPUs `pick` selects (one fence per CPU),
    /// their items going where `d` decides. Returns the items moved.
    pub(crate) fn drain_cpus(&self, pick: impl Fn(usize) -> bool, d: &mut Disposal<'_>) -> usize {
        let mut buf = [ptr::null_mut::<u8>(); STACK_BUF];
        let mut moved = 0;
        for cpu in self.pcpu.cpus_in_use() {
            if !pick(cpu) {
                continue;
            }
            let h = self.pcpu.header(cpu);
            let _g = lock_header(h);
            self.pcpu.stop_fenced(cpu, h);
            let cap = self.cap_for(cpu);
            moved += self.empty_stopped(cpu, cap, &mut buf, d.reborrow());
        }
        moved
    }

    /// Every cached item of this zone back to the slabs (used before sleeping at `max_items`,
    /// and by a zone's destruction), as the process state decides now.
    pub(crate) fn drain_caches(&self) {
        let mut d = Disposal::current();
        self.drain_cpus(|_| true, &mut d);
        self.trim_depot(0, &mut d);
        self.drain_stash(&mut Disposal::keep_as(d.pages));
    }

    /// Empties this zone's stopped and fenced stack on `cpu` into its slabs (through `buf`,
    /// large enough for a full stack) and reopens the stack with `cap`; the items go where `d`
    /// decides. Returns the items moved.
    pub(super) fn empty_stopped(
        &self,
        cpu: usize,
        cap: u32,
        buf: &mut [*mut u8; STACK_BUF],
        d: Disposal<'_>,
    ) -> usize {
        let mut n = 0;
        self.pcpu
            .take_stopped(cpu, self.pcpu.header(cpu), cap, |p| {
                buf[n] = p;
                n += 1;
            });
        if n > 0 {
            self.give(&buf[..n], d);
        }
        n
    }
}

/// Room for one full per-CPU stack.
const STACK_BUF: usize = crate::pcpu::STORAGE_MAX as usize;

/// Is `z`'s stack on `cpu` one [`drain_cpu_locked`]'s first walk stopped? One that came into use
/// since (opened by its CPU's first slow path) is not that pass's to empty or unlock. Relaxed:
/// the pass wrote this value itself, and no one else writes a lock word they do not hold.
fn stopped_by_drain_all(z: &ZoneInner, cpu: usize) -> bool {
    z.pcpu.header(cpu).lock.load(Ordering::Relaxed) == pcpu::LOCKED_BY_DRAIN_ALL
}

/// DRAIN_CPU over every zone, as the one reclaim in progress: depots, then one loop over CPUs
/// (each stopping every zone's stack on that CPU, one fence, then emptying them), then depots
/// again, then free slabs and the bucket kegs' free slabs back to the OS. `halve`: bucket sizes
/// halve toward their minimum first (UMA, before a per-CPU drain); `keep_reserve`: kegs keep
/// their reserve of free slabs (not while squeezing). Returns the bytes released; 0 if this
/// thread is already reclaiming.
pub(crate) fn drain_cpu_all(halve: bool, keep_reserve: bool) -> usize {
    crate::gate::exclusive(|| {
        let reg = crate::registry::lock();
        // The decision, once: emptied slabs into this session's pipeline (at once while a
        // squeeze window is open and the session keeps reserves).
        let squeezing = crate::gate::squeezing_now();
        let mut sess = Session::begin(keep_reserve);
        let mut d = Disposal::reclaim(&mut sess, squeezing);
        let b = drain_cpu_locked(&reg, halve, keep_reserve, &mut d);
        let b = b + crate::bucket::release_bucket_kegs(&mut sess);
        // Every caller wants the memory now (squeeze, buckets off, DRAIN_CPU, a failed
        // mapping): lazily freed pages go too.
        b + sess.finish() + release_lazy_locked(&reg)
    })
    .unwrap_or(0)
}

/// The pass of [`drain_cpu_all`] with the registry locked, items and emptied slabs going where
/// `d` (a reclaim's decision) sends them; `keep_reserve`: the final release of free slabs keeps
/// each keg's reserve. The bytes `d`'s session releases are counted by its owner.
pub(crate) fn drain_cpu_locked(
    reg: &crate::registry::Locked,
    halve: bool,
    keep_reserve: bool,
    d: &mut Disposal<'_>,
) -> usize {
    reg.for_each(|z: &ZoneInner| {
        if halve {
            z.halve_bucket_size();
        }
        z.trim_depot(0, d);
    });
    let ncpu = os::cpu_count();
    let mut buf = [ptr::null_mut::<u8>(); STACK_BUF];
    for cpu in 0..ncpu {
        let mut any = false;
        reg.for_each(|z: &ZoneInner| {
            if cpu < z.pcpu.ncpu() && z.pcpu.in_use(cpu) {
                let h = z.pcpu.header(cpu);
                pcpu::lock_header_as(h, pcpu::LOCKED_BY_DRAIN_ALL);
                z.pcpu.stop(h);
                any = true;
            }
        });
        if !any {
            continue;
        }
        // One fence for every zone's stack on this CPU; a stop a critical section wrote over
        // (`pcpu.rs`, "A stop a section wrote over") is made again, and fenced again, until
        // every stop holds.
        loop {
            pcpu::fence_cpu(cpu);
            let mut again = false;
            reg.for_each(|z: &ZoneInner| {
                if cpu < z.pcpu.ncpu() && stopped_by_drain_all(z, cpu) {
                    let h = z.pcpu.header(cpu);
                    if !z.pcpu.stop_holds(h) {
                        z.pcpu.stop(h);
                        again = true;
                    }
                }
            });
            if !again {
                break;
            }
        }
        reg.for_each(|z: &ZoneInner| {
            // The stacks the first walk stopped, and only those.
            if cpu < z.pcpu.ncpu() && stopped_by_drain_all(z, cpu) {
                let h = z.pcpu.header(cpu);
                let cap = z.cap_for(cpu);
                z.empty_stopped(cpu, cap, &mut buf, d.reborrow());
                // Release: pairs with the Acquire of the next taker of the header lock taken
                // above (`lock_header_as`), which sees the emptied stack.
                h.lock.store(pcpu::UNLOCKED, Ordering::Release);
            }
        });
    }
    let mut bytes = 0;
    reg.for_each(|z: &ZoneInner| {
        z.trim_depot(0, d);
        let keep = if keep_reserve {
            z.keg.reserve_slabs()
        } else {
            0
        };
        bytes += z.keg.release_free(keep, d);
        z.count_drain_cpu();
    });
    bytes
}

/// A page mapping failed: synchronous DRAIN_CPU of every zone before the caller retries once
/// (counted here and reported to the runtime), then the address space the caches held free
/// goes back ([`unmap_free_all`]): a refused mapping is the address space limit (`RLIMIT_AS`),
/// the map count or the kernel's commit limit, none of which memory given back with
/// `MADV_DONTNEED` lifts.
///
/// Unless memory was freed since the last answer (a slab left entirely free, a large block
/// freed: `gate::note_freed`), at most half the time goes to these answers ([`answer_due`]): a
/// program at its limit asks again and again (a `malloc` that fails walks the larger classes,
/// each refused), and each answer walks every zone and CPU. Four threads failing 800 000
/// `malloc`s took 52 s with an answer to every one, against 4 s under glibc. Items freed into
/// the per-CPU caches are not noted (the free path's cost): a program that frees small blocks
/// and at once asks for another size may wait for the next answer due.
pub(crate) fn on_map_failure() {
    crate::gate::count_map_failure();
    crate::runtime::map_failure();
    let now = os::now_ns();
    // Relaxed: a hint of when the last answer ended; two threads that both see one due both
    // answer (the reclaim lock serialises them), which costs time, not correctness.
    if !crate::gate::take_freed()
        && !answer_due(
            now,
            ANSWER_END.load(Ordering::Relaxed),
            ANSWER_LEN.load(Ordering::Relaxed),
        )
    {
        return;
    }
    drain_cpu_all(true, true);
    unmap_free_all();
    let end = os::now_ns();
    ANSWER_END.store(end, Ordering::Relaxed);
    ANSWER_LEN.store(end - now, Ordering::Relaxed);
}

/// When the last answer to a refused mapping ended and how long it took (ns, the core's clock).
static ANSWER_END: AtomicU64 = AtomicU64::new(0);
static ANSWER_LEN: AtomicU64 = AtomicU64::new(0);

/// The least time between the end of one answer to a refused mapping and the next (ns).
const ANSWER_GAP_MIN_NS: u64 = 100_000;

/// Whether a refused mapping at `now` is answered (drain, address space unmapped), the last
/// answer having ended at `last_end` after `last_len` ns, pure: once as long again as that
/// answer took, at least [`ANSWER_GAP_MIN_NS`], has passed (none before: `last_end` 0).
pub(crate) fn answer_due(now: u64, last_end: u64, last_len: u64) -> bool {
    last_end == 0 || now >= last_end.saturating_add(last_len.max(ANSWER_GAP_MIN_NS))
}

/// Every zone's and bucket keg's empty chunks back to the arena, unmapped
/// (`Keg::unmap_empty_chunks`), then the outer caches' free address space
/// ([`crate::outer::OuterCache::unmap_free`]), as the one reclaim in progress. Returns the bytes
/// of address space unmapped; 0 if this thread is already reclaiming.
pub(crate) fn unmap_free_all() -> usize {
    let kegs = crate::gate::exclusive(|| {
        let reg = crate::registry::lock();
        let mut b = 0;
        reg.for_each(|z: &ZoneInner| b += z.keg.unmap_empty_chunks());
        b + crate::bucket::unmap_empty_bucket_chunks()
    })
    .unwrap_or(0);
    kegs + crate::outer::unmap_free_all()
}

impl ZoneInner {
    /// Free slabs beyond `keep` leave the zone as `d` decides: into the lazy decay when its
    /// pages leave lazily; else released at once, together with the zone's stashed and lazily
    /// freed pages (pressure or a squeeze wants the memory now). Returns the bytes released at
    /// once (lazily freed bytes are counted apart).
    pub(crate) fn release_free_slabs(&self, keep: usize, d: &mut Disposal<'_>) -> usize {
        if d.pages.is_lazy() {
            return self.keg.release_free(keep, d);
        }
        self.drain_stash(&mut Disposal::release())
            + self.keg.release_free(keep, d)
            + self.keg.release_lazy(None)
    }
}

/// A zone is about to fault in `bytes` of fresh pages: release as many lazily freed bytes of
/// the zones (oldest slabs of each zone first), so that memory freed in one size class and
/// waiting in the lazy decay does not stay in RSS beside the pages another class takes anew —
/// the cross-class reuse that allocators whose classes share pages get for free. Nothing when
/// no keg holds lazily freed slabs (two loads; a page pool's stashed pages do not count, the
/// walk would not take them), or when the registry is busy (a reclaim pass is running; never
/// waits for it, so no lock order is at stake). The caller holds no keg lock.
pub(crate) fn make_room(bytes: usize) {
    if crate::lazy::keg_lazy_bytes() == 0 {
        return;
    }
    let Some(reg) = crate::registry::try_lock() else {
        return;
    };
    let mut left = bytes;
    reg.for_each(|z: &ZoneInner| {
        if left > 0 {
            left = left.saturating_sub(z.keg.release_lazy_upto(None, left));
        }
    });
}

/// Every lazily freed page of every zone back now (`MADV_DONTNEED`), with the registry locked
/// (inside a reclaim). Returns the bytes released.
pub(crate) fn release_lazy_locked(reg: &crate::registry::Locked) -> usize {
    if crate::lazy::lazy_held_bytes() == 0 {
        return 0;
    }
    let mut b = 0;
    reg.for_each(|z: &ZoneInner| {
        b += z.drain_stash(&mut Disposal::release()) + z.keg.release_lazy(None)
    });
    b
}

/// The delayed trim over every zone: free slabs beyond a keg's cap held for `EXCESS_DELAY_MS` at
/// `now` leave the free list the way `pages` says (`Keg::trim_expired_excess`). Returns the
/// bytes released now.
pub(crate) fn trim_excess_locked(reg: &crate::registry::Locked, now: u32, pages: Pages) -> usize {
    let mut b = 0;
    reg.for_each(|z: &ZoneInner| b += z.keg.trim_expired_excess(now, pages));
    b
}

/// The decay step over every zone: lazy slabs older than `decay_ms` at `now` go back for good
/// (`MADV_DONTNEED`), those that settled for `settle_ms` are offered (`MADV_FREE`). Returns the
/// bytes released for good. `d`: where the slabs of settled stashed pages go on their way to
/// the lazy list (the caller's decision).
pub(crate) fn release_lazy_due_locked(
    reg: &crate::registry::Locked,
    now: u32,
    decay_ms: u64,
    settle_ms: u64,
    d: &mut Disposal<'_>,
) -> usize {
    let mut b = 0;
    reg.for_each(|z: &ZoneInner| {
        // Stashed pages that settled join the lazy list first (offered, stamped when given up),
        // so the decay below counts from then (`stash.rs`).
        z.stash_settle(now, settle_ms, d);
        b += z.keg.release_lazy(Some((now, decay_ms)));
        z.keg.advise_lazy(now, settle_ms);
    });
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_mappings_are_answered_at_most_half_the_time() {
        assert!(answer_due(5, 0, 0), "the first is answered");
        let (end, len) = (1_000_000_000, 3_000_000);
        assert!(!answer_due(end + 1, end, len));
        assert!(!answer_due(end + len - 1, end, len));
        assert!(answer_due(end + len, end, len), "as long again as it took");
        assert!(
            !answer_due(end + 99_999, end, 10),
            "at least the floor apart"
        );
        assert!(answer_due(end + ANSWER_GAP_MIN_NS, end, 10));
        assert!(answer_due(u64::MAX, u64::MAX - 1, u64::MAX), "no overflow");
    }
}
