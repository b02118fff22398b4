//! What a zone can say about itself: its counters merged from every layer ([`ZoneSnapshot`])
//! and the counting invariants checked by walking every layer ([`ZoneCheck`]).

use super::*;

/// A point-in-time view of a zone's counters (merged from the per-CPU words on read).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZoneSnapshot {
    pub name: String,
    pub size: usize,
    pub item_size: usize,
    pub align: usize,
    pub limit: usize,
    pub used: u64,
    pub free: u64,
    pub requests: u64,
    pub frees: u64,
    pub fails: u64,
    pub sleeps: u64,
    pub invalid_frees: u64,
    pub bucket_size: u32,
    pub bucket_size_min: u32,
    pub bucket_size_max: u32,
    pub buckets_enabled: bool,
    pub depot: crate::wss::Wss,
    pub depot_buckets: usize,
    pub cached_items_pcpu: u64,
    pub cached_bytes_pcpu: u64,
    pub cached_bytes_depot: u64,
    pub free_items_slabs: u64,
    pub free_bytes_slabs: u64,
    pub slab_bytes: usize,
    pub items_per_slab: usize,
    pub pages_mapped: u64,
    pub mapped_bytes: u64,
    pub efficiency_pct: f64,
    pub reclaim_trim: u64,
    pub reclaim_drain: u64,
    pub reclaim_drain_cpu: u64,
    pub released_bytes: u64,
    /// Bytes of lazily freed slabs now (`MADV_FREE`, see [`crate::lazy`]).
    pub lazy_bytes: u64,
    /// Bytes offered with `MADV_FREE`, ever; and those taken back by allocation.
    pub lazy_freed_bytes: u64,
    pub lazy_reused_bytes: u64,
    pub squeeze_windows: u64,
    pub depot_contention: u64,
    /// Acquisitions of the depot mutex that found it held, and the time they waited.
    pub depot_waits: crate::contention::WaitCount,
    /// The same for the keg mutex (slab lists: imports and frees to the slabs).
    pub keg_waits: crate::contention::WaitCount,
    /// The same for a page pool's stash mutex (0 for other zones).
    pub stash_waits: crate::contention::WaitCount,
    /// Depot buckets one CPU's stack flushed and another CPU's stack took
    /// (`docs/design/contention.md`).
    pub remote_buckets: u64,
    /// The items of those buckets: freed on one CPU, handed to another through the depot.
    pub remote_frees: u64,
    /// Huge pages of the zone's huge chunks holding memory, partly used, broken
    /// (`keg/huge.rs`); and those given back whole, ever.
    pub huge_pages: u64,
    pub huge_partly_used: u64,
    pub huge_broken: u64,
    pub huge_released: u64,
    /// Huge pages the zone's keg collapsed (`MADV_COLLAPSE`), ever.
    pub huge_collapsed: u64,
    /// Page pools: `max_buffer_pages`; `u64::MAX` for plain zones.
    pub pool_max_buffer_pages: u64,
    /// Σ over CPUs of each stack's capacity now (items; 0 while caching is off).
    pub pcpu_capacity: u64,
    /// `pcpu_capacity × item_size`.
    pub pcpu_capacity_bytes: u64,
    /// Allocations that found this CPU's stack empty (slow path while caching), every CPU.
    pub pcpu_underflows: u64,
    /// Frees that found this CPU's stack full (slow path while caching), every CPU.
    pub pcpu_overflows: u64,
    /// Largest capacity of one CPU's stack.
    pub pcpu_capacity_max: u64,
    /// Σ over CPUs of the misses the last resize pass counted.
    pub pcpu_interval_misses: u64,
    /// One entry per CPU, in CPU order.
    pub per_cpu: Vec<CpuStack>,
}

/// One CPU's stack of a zone (racy reads: a statistics view).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStack {
    /// Pushes allowed while the count is below it (0: stopped or caching off).
    pub capacity: u32,
    /// Slots granted above the floor (`2 × bucket_size`) by the resize pass.
    pub grant: u32,
    /// Items on the stack.
    pub items: u32,
    pub underflows: u64,
    pub overflows: u64,
    /// Misses the last resize pass counted (in its interval).
    pub interval_misses: u64,
    /// Whether this CPU ever opened the stack (`Pcpu::in_use`): a stack not in use has not
    /// written its page.
    pub in_use: bool,
}

/// The result of [`Zone::validate`]: the terms of the counting equation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneCheck {
    /// Items in backed slabs.
    pub items_mapped: usize,
    pub used: usize,
    pub pcpu: usize,
    pub depot: usize,
    pub free_in_slabs: usize,
    /// Pages a page pool's shrink gave back lazily and holds in its stash (`stash.rs`): out of
    /// the slabs, in none of the terms above.
    pub stashed: usize,
}

impl ZoneInner {
    pub(crate) fn snapshot(&self) -> ZoneSnapshot {
        let mut s = self.snapshot_unnamed();
        s.name = self.name.as_str().to_string();
        s
    }

    /// [`ZoneInner::snapshot_counts`] with the per-CPU view (`per_cpu`, one allocation).
    pub(crate) fn snapshot_unnamed(&self) -> ZoneSnapshot {
        let mut s = self.snapshot_counts();
        s.per_cpu = (0..self.pcpu.ncpu())
            .map(|cpu| self.cpu_stack(cpu))
            .collect();
        s
    }

    /// One CPU's stack (racy reads).
    fn cpu_stack(&self, cpu: usize) -> CpuStack {
        let h = self.pcpu.header(cpu);
        let d = self.pcpu.demand(cpu);
        CpuStack {
            capacity: h.cap.load(Ordering::Relaxed),
            grant: d.grant.load(Ordering::Relaxed),
            items: self.pcpu.count(cpu) as u32,
            underflows: d.underflows.load(Ordering::Relaxed),
            overflows: d.overflows.load(Ordering::Relaxed),
            interval_misses: d.interval_misses.load(Ordering::Relaxed),
            in_use: self.pcpu.in_use(cpu),
        }
    }

    /// The zone's counters with an empty name and no `per_cpu` entries (their sums are in
    /// the `pcpu_*` fields): allocates nothing (`String::new()`, `Vec::new()`), so it may run
    /// under the registry lock, which a malloc's zone creation takes, and on the control
    /// thread, whose observations must not touch the program's allocator.
    pub(crate) fn snapshot_counts(&self) -> ZoneSnapshot {
        let d = {
            let g = lock(&self.depot);
            (g.wss, g.nbuckets)
        };
        let kc = self.keg.counts();
        let hp = self.keg.huge_pages();
        let pcpu_items = self.pcpu_items() as u64;
        let cached = pcpu_items + d.0.nitems;
        // A page pool's stashed pages (`stash.rs`) are out of the slabs but given back: neither
        // used nor free nor mapped; they count as lazily freed.
        let stashed = self.stash.len();
        let used = (kc.items_out as u64).saturating_sub(cached + stashed as u64);
        let fast: u64 = (0..self.pcpu.ncpu())
            .map(|c| self.pcpu.fast_allocs(c))
            .sum();
        let requests = fast + self.counters.slow_allocs.load(Ordering::Relaxed);
        let geo = self.keg.geo;
        let stashed_bytes = stashed * geo.item_size;
        let mapped = (kc.backed_slabs * geo.slab_size).saturating_sub(stashed_bytes);
        let size = self.item_size as u64;
        let (mut capacity, mut capacity_max, mut underflows, mut overflows, mut misses) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        for cpu in 0..self.pcpu.ncpu() {
            let c = self.cpu_stack(cpu);
            capacity += c.capacity as u64;
            capacity_max = capacity_max.max(c.capacity as u64);
            underflows += c.underflows;
            overflows += c.overflows;
            misses += c.interval_misses;
        }
        ZoneSnapshot {
            name: String::new(),
            size: self.requested_size,
            item_size: self.item_size,
            align: self.align,
            limit: self.max_items,
            used,
            free: cached + kc.free_items as u64,
            requests,
            frees: requests.saturating_sub(used),
            fails: self.counters.fails.load(Ordering::Relaxed),
            sleeps: self.counters.sleeps.load(Ordering::Relaxed),
            invalid_frees: self.counters.invalid_frees.load(Ordering::Relaxed),
            bucket_size: self.bucket_size.load(Ordering::Relaxed),
            bucket_size_min: self.bucket_min,
            bucket_size_max: self.bucket_max,
            buckets_enabled: self.bucket_target_cap() > 0,
            depot: d.0,
            depot_buckets: d.1,
            cached_items_pcpu: pcpu_items,
            cached_bytes_pcpu: pcpu_items * size,
            cached_bytes_depot: d.0.nitems * size,
            free_items_slabs: kc.free_items as u64,
            free_bytes_slabs: kc.free_items as u64 * size,
            slab_bytes: geo.slab_size,
            items_per_slab: geo.items_per_slab,
            pages_mapped: (mapped / os::page_size()) as u64,
            mapped_bytes: mapped as u64,
            efficiency_pct: geo.efficiency_pct(),
            reclaim_trim: self.counters.trims.load(Ordering::Relaxed),
            reclaim_drain: self.counters.drains.load(Ordering::Relaxed),
            reclaim_drain_cpu: self.counters.drain_cpus.load(Ordering::Relaxed),
            released_bytes: kc.released_bytes,
            lazy_bytes: (kc.lazy_slabs * geo.slab_size + stashed_bytes) as u64,
            lazy_freed_bytes: kc.lazy_freed_bytes,
            lazy_reused_bytes: kc.lazy_reused_bytes
                + self.counters.stash_reused_bytes.load(Ordering::Relaxed),
            squeeze_windows: self.counters.squeezes.load(Ordering::Relaxed),
            depot_contention: self.counters.depot_contention.load(Ordering::Relaxed),
            depot_waits: self.depot.waits().read(),
            keg_waits: self.keg.lock_waits(),
            stash_waits: self.stash.lock_waits(),
            remote_buckets: self.counters.remote_buckets.load(Ordering::Relaxed),
            remote_frees: self.counters.remote_frees.load(Ordering::Relaxed),
            huge_pages: hp.pages as u64,
            huge_partly_used: hp.partly_used as u64,
            huge_broken: hp.broken as u64,
            huge_released: kc.huge_released,
            huge_collapsed: hp.collapsed as u64,
            pool_max_buffer_pages: match self.pool_max.load(Ordering::Relaxed) {
                usize::MAX => u64::MAX,
                n => n as u64,
            },
            pcpu_capacity: capacity,
            pcpu_capacity_bytes: capacity * size,
            pcpu_underflows: underflows,
            pcpu_overflows: overflows,
            pcpu_capacity_max: capacity_max,
            pcpu_interval_misses: misses,
            per_cpu: Vec::new(),
        }
    }

    pub(super) fn validate(&self) -> Result<ZoneCheck, String> {
        // Count every CPU's stack exactly: stop, fence, count, reopen (items stay where they are).
        let mut pcpu_items = 0;
        // A stack not in use is empty, and its page unwritten (`Pcpu::in_use`).
        for cpu in self.pcpu.cpus_in_use() {
            let h = self.pcpu.header(cpu);
            let _g = lock_header(h);
            let cap = h.cap.load(Ordering::Relaxed);
            self.pcpu.stop_fenced(cpu, h);
            let c = self.pcpu.count(cpu);
            if c > self.pcpu.storage as usize {
                // Leave the stack open (items untouched): a failed check must not stop a CPU.
                self.pcpu.reopen(h, cap);
                return Err(format!(
                    "cpu {cpu}: count {c} above storage {}",
                    self.pcpu.storage
                ));
            }
            // Every cached item must be an item of this zone.
            let mut bad = None;
            let n = self.pcpu.peek_stopped(cpu, h, |p| {
                if bad.is_none() && !self.is_item(p as usize) {
                    bad = Some(p);
                }
            });
            self.pcpu.reopen(h, cap);
            if let Some(p) = bad {
                return Err(format!(
                    "cpu {cpu}: cached pointer {p:p} is not an item of zone '{}'",
                    self.name.as_str()
                ));
            }
            pcpu_items += n;
        }
        let depot_items = lock(&self.depot).validate()? as usize;
        let stashed = self.stash_validate()?;
        let kc = self.keg.validate()?;
        let cached = pcpu_items + depot_items + stashed;
        if kc.items_out < cached {
            return Err(format!(
                "zone '{}': {} items out of the slabs but {cached} cached ({pcpu_items} per-CPU + {depot_items} depot + {stashed} stashed)",
                self.name.as_str(),
                kc.items_out
            ));
        }
        if self.max_items > 0 && self.items_reserved.load(Ordering::Relaxed) != kc.items_out {
            return Err(format!(
                "zone '{}': limit accounting {} != items out of the slabs {}",
                self.name.as_str(),
                self.items_reserved.load(Ordering::Relaxed),
                kc.items_out
            ));
        }
        Ok(ZoneCheck {
            items_mapped: (kc.backed_slabs * self.keg.geo.items_per_slab)
                .checked_sub(stashed)
                .ok_or_else(|| {
                    format!(
                        "zone '{}': {stashed} stashed pages but only {} items in backed slabs",
                        self.name.as_str(),
                        kc.backed_slabs * self.keg.geo.items_per_slab
                    )
                })?,
            used: kc.items_out - cached,
            pcpu: pcpu_items,
            depot: depot_items,
            free_in_slabs: kc.free_items,
            stashed,
        })
    }
}
