//! Creating and destroying zones.

use super::objects;
use super::*;

impl Zone {
    /// Creates a zone.
    ///
    /// The hook argument (if any) is passed to the hooks from whatever thread allocates or
    /// frees; the caller vouches that this is sound.
    pub fn new(o: ZoneOptions<'_>) -> Result<Zone, CreateError> {
        let _inside = crate::forkgate::enter();
        // The runtime reads its configuration and starts its threads here, never on the
        // allocation paths (see `runtime`).
        if o.runtime_hook {
            crate::runtime::before_create();
        }
        // A mapping refused (`RLIMIT_AS` reached, say): answered as a zone's import answers it
        // (DRAIN_CPU, the caches' free address space unmapped: `drain::on_map_failure`), and
        // one more try.
        Zone::create(o).or_else(|e| match e {
            CreateError::Os(_) => {
                drain::on_map_failure();
                Zone::create(o)
            }
            e => Err(e),
        })
    }

    /// [`Zone::new`] past the runtime's hook, once.
    fn create(o: ZoneOptions<'_>) -> Result<Zone, CreateError> {
        let item_size = o.item_size()?;
        let name = ZoneName::new(o.name)?;
        if o.flags.0 & !ZoneFlags::ALL != 0 {
            return Err(ConfigError::BadFlags {
                flags: o.flags.0,
                known: ZoneFlags::ALL,
            }
            .into());
        }
        if o.max_items > (1usize << 48) {
            return Err(ConfigError::BadLimit {
                why: "above 2^48 items",
            }
            .into());
        }
        let g = crate::slab::Geometry::for_item(item_size);
        let mut keg = Keg::new(item_size, o.reserve_items.div_ceil(g.items_per_slab))?;
        if o.free_slabs_max_bytes != usize::MAX {
            keg = keg.keep_free_at_most((o.free_slabs_max_bytes / g.slab_size).max(1));
        }
        if let Some(floor) = o.reuse_floor_bytes {
            keg = keg.reuse_floor(floor);
        }
        let checked = o.flags.contains(ZoneFlags::CHECKED) || crate::runtime::checked_by_default();
        if checked {
            keg = keg.with_live_bits();
        }
        let geo = keg.geo;
        if o.bucket_items > BUCKET_MAX {
            return Err(ConfigError::BadBucket {
                items: o.bucket_items,
                max: BUCKET_MAX,
            }
            .into());
        }
        let bmin = match o.bucket_items {
            0 => bucket::bucket_size_for(item_size),
            n => n,
        };
        let bmax = BUCKET_MAX;
        let pcpu = Pcpu::new(crate::pcpu::STORAGE_MAX, os::cpu_count())?;
        // Beside the tag of every chunk the keg will own: a `free` finds the stacks from the
        // chunk map entry (`arena.rs`, "The hint").
        keg = keg.with_chunk_hint(pcpu.rseq_ref().hint());
        let arena = keg.arena;
        let mut careful = 0;
        if o.ctor.is_some() {
            careful |= C_CTOR;
        }
        if o.dtor.is_some() {
            careful |= C_DTOR;
        }
        if checked {
            careful |= C_CHECKED;
        }
        if o.flags.contains(ZoneFlags::ZERO) {
            careful |= C_ZERO;
        }
        if !pcpu.is_rseq() {
            careful |= C_LOCKED;
        }
        let (magic, bound) = item_check(geo.item_size, geo.items_per_slab);
        // Below the slab size (`item_check`), which is below the 4 MiB chunk: the slab mask
        // fits its 32 bits.
        assert!(bound < 1 << 32 && geo.slab_size <= 1 << 32, "{geo:?}");
        let fast = Fast {
            c: FastConsts {
                pcpu: pcpu.rseq_ref(),
                // Sizes below the 4 MiB chunk size (`slab.rs`).
                slabs_len: (geo.slabs_per_chunk << geo.slab_shift) as u64,
                item_magic: magic,
                item_bound: bound,
                slab_mask: (geo.slab_size - 1) as u32,
                careful,
                tag: keg.tag,
            },
            arena_base: arena.base,
            arena_len: arena.len,
        };
        let z = ZoneInner {
            fast,
            pcpu,
            name,
            item_size,
            requested_size: o.size,
            align: o.align,
            flags: o.flags,
            init: o.init,
            fini: o.fini,
            ctor: o.ctor,
            dtor: o.dtor,
            hook_arg: o.hook_arg,
            keg,
            depot: crate::contention::Counted::new(DepotInner::new()),
            depot_max_items: o.depot_max_items,
            bucket_size: AtomicU32::new(bmin),
            bucket_min: bmin,
            bucket_max: bmax,
            max_items: o.max_items,
            limit_mode: o.limit_mode,
            items_reserved: AtomicUsize::new(0),
            limit: Mutex::new(LimitState {
                sleepers: 0,
                next_ticket: 0,
                serving: 0,
            }),
            limit_cv: Condvar::new(),
            limit_full: AtomicBool::new(false),
            counters: Counters::default(),
            pool_max: AtomicUsize::new(usize::MAX),
            stash: stash::Stash::none(),
            link: Link::new(),
        };
        // A slot in a page shared with other zones' objects (`objects.rs`).
        let mem = match objects::take() {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: the stacks are new and unused.
                unsafe { z.pcpu.unmap() };
                return Err(e.into());
            }
        };
        // SAFETY: `mem` is a free slot, large enough and aligned for a zone object
        // (`objects.rs`).
        unsafe { mem.as_ptr().write(z) };
        let zone = Zone { inner: mem, fast };
        // No stack is opened here: each opens on its CPU's first slow path, so a CPU that never
        // uses the zone never writes its page (`Pcpu::in_use`).
        crate::registry::insert(mem.as_ptr());
        Ok(zone)
    }

    /// Destroys the zone, giving all its memory back. Fails while items are in use, changing
    /// nothing; the zone is handed back with the error.
    // The handle is large on purpose (it carries the fast-path constants by value, see `Fast`);
    // handing it back by value on this cold path is what the caller needs.
    #[allow(clippy::result_large_err)]
    pub fn destroy(self) -> Result<(), (Zone, ZoneBusy)> {
        let _inside = crate::forkgate::enter();
        let z = self.inner.as_ptr();
        // SAFETY: `self` is the only handle; destruction is exclusive by ownership.
        match unsafe { ZoneInner::destroy(z) } {
            Ok(()) => {
                core::mem::forget(self);
                Ok(())
            }
            Err(live) => {
                let busy = ZoneBusy {
                    zone: self.inner().name,
                    live_items: live,
                };
                Err((self, busy))
            }
        }
    }
}

impl ZoneInner {
    /// # Safety
    /// `z` must be a live zone that no other thread uses during the call.
    pub(super) unsafe fn destroy(z: *mut ZoneInner) -> Result<(), usize> {
        // SAFETY: caller's guarantee.
        let zr = unsafe { &*z };
        {
            let mut reg = crate::registry::lock();
            let pcpu_items = zr.pcpu_items();
            let depot_items = lock(&zr.depot).wss.nitems as usize;
            let out = zr.keg.items_out();
            let used = out.saturating_sub(pcpu_items + depot_items + zr.stash.len());
            if used > 0 {
                return Err(used);
            }
            // Every cached item back onto its slab's free list: the chunks are unmapped next.
            let mut d = Disposal::keep();
            zr.drain_cpus(|_| true, &mut d);
            zr.trim_depot(0, &mut d);
            zr.drain_stash(&mut d);
            zr.keg.destroy()?;
            reg.unlink(z);
        }
        // SAFETY: the zone is unlinked, empty and unused; its mappings are ours.
        unsafe {
            zr.pcpu.unmap();
            ptr::drop_in_place(z);
            objects::give(z);
        }
        Ok(())
    }
}
