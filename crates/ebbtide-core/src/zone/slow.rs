//! The slow paths: a full bucket from the depot or a bucket's worth from the slabs on
//! allocation; a bucket's worth flushed to the depot, or the item straight to its slab, on free;
//! and the careful paths of hooked, checked and zeroing zones.

use super::*;
use crate::pcpu::Push;

impl ZoneInner {
    pub(super) fn lock_depot(&self) -> crate::sync::MutexGuard<'_, DepotInner> {
        // Contention (counted as a wait of the depot as well): UMA grows the bucket size by one
        // each time the depot lock is found held.
        self.depot.lock_or(|| {
            self.counters
                .depot_contention
                .fetch_add(1, Ordering::Relaxed);
            let bs = self.bucket_size.load(Ordering::Relaxed);
            if bs < self.bucket_max {
                self.bucket_size.store(bs + 1, Ordering::Relaxed);
            }
        })
    }

    /// A bucket that CPU `from` flushed, taken by this CPU with its `n` items: remote frees
    /// if the CPUs differ (racy reads of the CPU id, as every per-CPU statistic: the thread may
    /// move between the two reads).
    fn count_remote(&self, from: u32, n: usize) {
        if from != crate::bucket::NO_CPU && from as usize != self.pcpu.this_cpu() {
            // Relaxed: statistics counters, read alone.
            self.counters.remote_buckets.fetch_add(1, Ordering::Relaxed);
            self.counters
                .remote_frees
                .fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn alloc_careful(&self) -> Result<NonNull<u8>, AllocError> {
        let _inside = crate::forkgate::enter();
        let p = match NonNull::new(self.pcpu.pop()) {
            Some(p) => p,
            None => self.alloc_slow()?,
        };
        if self.fast.c.careful & C_CHECKED != 0 {
            if let Ok(loc) = self.keg.locate(p.as_ptr() as usize) {
                if !self.keg.mark_live(loc) {
                    report(format_args!(
                        "ebbtide: internal error: zone '{}' handed out live item {:p} twice",
                        self.name.as_str(),
                        p
                    ));
                }
            }
        }
        if self.fast.c.careful & C_ZERO != 0 {
            // SAFETY: the item is ours, item_size bytes.
            unsafe { p.as_ptr().write_bytes(0, self.item_size) };
        }
        if let Some(ctor) = self.ctor {
            // SAFETY: hook contract: called with an item of this zone and the zone's argument.
            if unsafe { ctor(p.as_ptr().cast(), self.item_size, self.hook_arg) } != 0 {
                self.counters.fails.fetch_add(1, Ordering::Relaxed);
                if self.fast.c.careful & C_CHECKED != 0 {
                    if let Ok(loc) = self.keg.locate(p.as_ptr() as usize) {
                        self.keg.mark_dead(loc);
                    }
                }
                let _ = self.free_cached(p.as_ptr()); // just allocated: cannot be a double free
                return Err(AllocError::CtorFailed);
            }
        }
        Ok(p)
    }

    /// Most items the depot keeps now: its fixed cap (`ZoneOptions::depot_max_items`), or for a
    /// zone whose caches follow reuse, the cap of its working set within it (`reuse.rs`).
    pub(crate) fn depot_cap(&self) -> u64 {
        self.keg
            .reuse
            .cap_units(self.depot_max_items, self.keg.geo.item_size as u64)
    }

    #[cold]
    #[inline(never)]
    pub(super) fn alloc_slow(&self) -> Result<NonNull<u8>, AllocError> {
        let _inside = crate::forkgate::enter();
        self.counters.slow_allocs.fetch_add(1, Ordering::Relaxed);
        if self.caching() {
            self.count_miss(true);
            self.sync_cap();
            // A full bucket from the depot: one item for the caller, the rest onto this CPU.
            let b = self.lock_depot().take();
            if let Some(b) = b {
                // SAFETY: `b` came out of the depot, so it is ours and full.
                unsafe {
                    let n = (*b.as_ptr()).count as usize;
                    self.count_remote((*b.as_ptr()).cpu, n);
                    self.keg.reuse.took(n * self.keg.geo.item_size);
                    let slots = Bucket::slots(b);
                    let item = slots[n - 1];
                    let k = self.pcpu.push_batch(&slots[..n - 1]);
                    if k < n - 1 {
                        self.return_to_keg(&slots[k..n - 1], &mut Disposal::current());
                    }
                    Bucket::free(b);
                    return Ok(NonNull::new_unchecked(item));
                }
            }
            // Import a bucket's worth from the slabs (a page pool: a batch, see `refill_want`),
            // or for a page pool first the pages its shrink gave back lazily (`stash.rs`).
            let mut tmp = [ptr::null_mut::<u8>(); BUCKET_MAX as usize];
            let want = self.refill_want();
            let mut n = self.stash_take(&mut tmp[..want]);
            if n == 0 {
                n = self.import(&mut tmp[..want])?;
                // The slabs hand items out in ascending address order and the stack is LIFO:
                // reversed, the caller and the next pops get them ascending, the order
                // hardware prefetchers follow (docs/design/benchmarks-record.md, "Ascending
                // addresses"; `tests/ascending.rs` holds it).
                tmp[..n].reverse();
            }
            let item = tmp[n - 1];
            let k = self.pcpu.push_batch(&tmp[..n - 1]);
            if k < n - 1 {
                self.return_to_keg(&tmp[k..n - 1], &mut Disposal::current());
            }
            // SAFETY: import returns non-null items.
            return Ok(unsafe { NonNull::new_unchecked(item) });
        }
        // Caching off (NOBUCKET, buckets disabled, squeeze, limit sleepers, thread without rseq):
        // use what the depot still holds, else one item from the slabs.
        let b = if self.flags.contains(ZoneFlags::NOBUCKET) {
            None
        } else {
            lock(&self.depot).take()
        };
        if let Some(b) = b {
            // SAFETY: `b` came out of the depot, so it is ours alone and holds `count` items
            // (the depot keeps only non-empty buckets), so `slots[n - 1]` is an item.
            unsafe {
                let n = (*b.as_ptr()).count as usize;
                self.keg.reuse.took(self.keg.geo.item_size);
                let slots = Bucket::slots(b);
                let item = slots[n - 1];
                (*b.as_ptr()).count -= 1;
                if n > 1 {
                    let cap = self.depot_cap();
                    if let Err(b) = lock(&self.depot).put(b, false, cap) {
                        self.return_to_keg(&Bucket::slots(b)[..n - 1], &mut Disposal::current());
                        Bucket::free(b);
                    }
                } else {
                    Bucket::free(b);
                }
                return Ok(NonNull::new_unchecked(item));
            }
        }
        let mut one = [ptr::null_mut()];
        if self.stash_take(&mut one) == 0 {
            self.import(&mut one)?;
        }
        // SAFETY: import returns non-null items.
        Ok(unsafe { NonNull::new_unchecked(one[0]) })
    }

    /// Items one import from the slabs brings on an allocation miss: a bucket's worth (UMA).
    /// A page pool's zone refills this CPU's stack with up to
    /// [`crate::sizing::POOL_REFILL_BATCH`] pages at once, within the room its stack has: the
    /// kernel's per-CPU page lists refill `pcp->batch` pages in one `rmqueue_bulk`, and page-sized
    /// items have buckets of 2, so a pool emptied by every shrink (`max_buffer_pages` 0) would
    /// otherwise take the slow path and the keg lock for every second page.
    fn refill_want(&self) -> usize {
        let bs = self
            .bucket_size
            .load(Ordering::Relaxed)
            .clamp(1, BUCKET_MAX) as usize;
        if self.pool_max.load(Ordering::Relaxed) == usize::MAX {
            return bs;
        }
        // Racy reads (the thread may move to another CPU): `push_batch` takes what fits and the
        // caller returns the rest to the slabs.
        let room = self.pcpu.room(self.pcpu.this_cpu());
        crate::sizing::pool_refill(bs, room)
    }

    /// Takes items from the keg, honouring `max_items` and running `init`. On a failed mapping,
    /// reclaims (synchronous DRAIN_CPU) and retries once before reporting out of memory.
    pub(super) fn import(&self, out: &mut [*mut u8]) -> Result<usize, AllocError> {
        let want = self.reserve_items(out.len())?;
        let mut fresh = 0;
        let n = match self.keg.import_fresh(&mut out[..want], &mut fresh) {
            Ok(n) => n,
            Err(_) => {
                drain::on_map_failure();
                match self.keg.import(&mut out[..want]) {
                    Ok(n) => n,
                    Err(e) => {
                        self.unreserve(want);
                        self.counters.fails.fetch_add(1, Ordering::Relaxed);
                        return Err(AllocError::OutOfMemory(e));
                    }
                }
            }
        };
        if n < want {
            self.unreserve(want - n);
        }
        if fresh > 0 {
            drain::make_room(fresh);
        }
        if let Some(init) = self.init {
            let mut ok = 0;
            for i in 0..n {
                // SAFETY: hook contract.
                if unsafe { init(out[i].cast(), self.item_size, self.hook_arg) } == 0 {
                    out.swap(ok, i);
                    ok += 1;
                }
            }
            if ok < n {
                // Items whose init failed never left the slab as far as fini is concerned.
                self.keg.take_back(
                    &out[ok..n],
                    &mut Disposal::current(),
                    None::<fn(*mut u8)>,
                    |p, k| self.invalid_late(p, k),
                );
                self.unreserve(n - ok);
                if ok == 0 {
                    self.counters.fails.fetch_add(1, Ordering::Relaxed);
                    return Err(AllocError::InitFailed);
                }
            }
            return Ok(ok);
        }
        Ok(n)
    }

    #[cold]
    #[inline(never)]
    pub(super) fn free_careful(&self, p: *mut u8) -> Result<(), InvalidFree> {
        let _inside = crate::forkgate::enter();
        if self.fast.c.careful & C_CHECKED != 0 {
            match self.keg.locate(p as usize) {
                Ok(loc) => {
                    if !self.keg.mark_dead(loc) {
                        self.counters.invalid_frees.fetch_add(1, Ordering::Relaxed);
                        return Err(InvalidFree {
                            zone: self.name,
                            addr: p as usize,
                            kind: InvalidKind::DoubleFree,
                        });
                    }
                }
                Err(kind) => {
                    return Err(InvalidFree {
                        zone: self.name,
                        addr: p as usize,
                        kind,
                    })
                }
            }
        }
        if let Some(dtor) = self.dtor {
            // SAFETY: hook contract.
            unsafe { dtor(p.cast(), self.item_size, self.hook_arg) };
        }
        self.free_cached(p)
    }

    /// Frees an item that passed the checks and its dtor.
    pub(super) fn free_cached(&self, p: *mut u8) -> Result<(), InvalidFree> {
        match self.pcpu.push(p) {
            Push::Done => Ok(()),
            Push::Full => self.free_slow(p),
            Push::Duplicate => Err(self.duplicate_now(p as usize)),
        }
    }

    /// A free whose item already carried the free mark (`FastFree::Suspect`, a keyed caller:
    /// `Caller::KEYED`): a double free if the item is in a cache — any CPU's stack of this
    /// zone or the depot — which is reported and not applied. Otherwise the item goes
    /// straight to its slab, not to a cache: if it is already free there the keg reports the
    /// double free and applies nothing, and if the mark was a user's word by chance the item
    /// is freed as any other. The other CPUs' stacks are read without stopping them: an item
    /// that moves between caches during the look (another CPU's concurrent pop or flush) can
    /// be missed, so this catches a double free of a cached item, not every racing one.
    #[cold]
    #[inline(never)]
    pub(super) fn free_suspect(&self, p: *mut u8) -> Result<(), InvalidFree> {
        let _inside = crate::forkgate::enter();
        if self.pcpu.holds_racy(p) || lock(&self.depot).contains(p) {
            return Err(self.duplicate_now(p as usize));
        }
        self.return_to_keg(&[p], &mut Disposal::current());
        Ok(())
    }

    #[cold]
    #[inline(never)]
    pub(super) fn free_slow(&self, p: *mut u8) -> Result<(), InvalidFree> {
        let _inside = crate::forkgate::enter();
        if self.caching() {
            self.count_miss(false);
            // The free found the stack full: grow it at once if the CPU's room allows (an
            // allocation that finds it empty fetches a bucket whatever the capacity, so only
            // this side grows between passes; see `sizing.rs`), and then the item fits.
            let grew = self.grow_at_miss();
            self.sync_cap();
            if grew {
                match self.pcpu.push(p) {
                    Push::Done => return Ok(()),
                    Push::Duplicate => return Err(self.duplicate_now(p as usize)),
                    // Stopped by a drainer meanwhile, or moved to another CPU: as before.
                    Push::Full => {}
                }
            }
            // Flush a bucket's worth from this CPU to the depot, then retry.
            let bs = self
                .bucket_size
                .load(Ordering::Relaxed)
                .clamp(1, BUCKET_MAX);
            if let Some(b) = Bucket::alloc(bs) {
                // SAFETY: `b` is a fresh bucket of at least `bs` slots, ours alone.
                unsafe {
                    let slots = Bucket::slots(b);
                    let n = self.pcpu.pop_batch(&mut slots[..bs as usize]);
                    if n > 0 {
                        (*b.as_ptr()).count = n as u32;
                        (*b.as_ptr()).cpu = self.pcpu.this_cpu() as u32;
                        let cap = self.depot_cap();
                        let mut d = self.lock_depot();
                        let r = d.put(b, true, cap);
                        // A cap that fell with the working set (`reuse.rs`): the coldest
                        // bucket beyond it leaves too, one per refused bucket, so the frees
                        // that find the depot over its cap bring it down to it.
                        let cold = if r.is_err() {
                            d.take_cold_above(cap)
                        } else {
                            None
                        };
                        drop(d);
                        if let Err(b) = r {
                            self.return_to_keg(&Bucket::slots(b)[..n], &mut Disposal::current());
                            Bucket::free(b);
                        }
                        if let Some(c) = cold {
                            let k = (*c.as_ptr()).count as usize;
                            self.return_to_keg(&Bucket::slots(c)[..k], &mut Disposal::current());
                            Bucket::free(c);
                        }
                    } else {
                        Bucket::free(b);
                    }
                }
                // The flush opened room in the word; under a cap lowered below the count it
                // opened more than the cap leaves (`pcpu.rs`, "Room, not cap"): set it again.
                self.sync_cap();
                match self.pcpu.push(p) {
                    Push::Done => return Ok(()),
                    Push::Duplicate => return Err(self.duplicate_now(p as usize)),
                    Push::Full => {}
                }
            }
        }
        self.return_to_keg(&[p], &mut Disposal::current());
        Ok(())
    }

    /// Takes items back into their slabs (fini, validation, accounting); `d` says where slabs
    /// left entirely free go (see [`Disposal`]: the caller decides, once). Returns the bytes
    /// released before the call returns (a reclaim's pipeline counts its own when its session
    /// completes).
    pub(crate) fn return_to_keg(&self, items: &[*mut u8], d: &mut Disposal<'_>) -> usize {
        let invalid = |p, k| self.invalid_late(p, k);
        let r = match self.fini {
            Some(f) => self.keg.take_back(
                items,
                d,
                // SAFETY: hook contract.
                Some(|p: *mut u8| unsafe { f(p.cast(), self.item_size, self.hook_arg) }),
                invalid,
            ),
            None => self.keg.take_back(items, d, None::<fn(*mut u8)>, invalid),
        };
        let (released, valid) = (r.bytes, r.valid);
        self.unreserve(valid);
        if released > 0 {
            self.counters
                .released_bytes
                .fetch_add(released as u64, Ordering::Relaxed);
        }
        released
    }
}
