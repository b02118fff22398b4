//! The consistency check of a keg: every list, count and bitmap against the counting invariant
//! (module documentation); for tests and `ZoneInner::validate`.

use super::*;

impl Keg {
    /// Walks every slab and checks the invariants of [`crate::slab`] and of this module against
    /// the counters. Returns the counters when they hold.
    pub(crate) fn validate(&self) -> Result<KegCounts, String> {
        let g = lock(&self.inner);
        let ips = self.geo.items_per_slab;
        let (mut np, mut nf, mut nc, mut nfull, mut free_items) = (0, 0, 0, 0, 0);
        let mut nl = 0;
        let (mut nhuge, mut nf_huge) = (0, 0);
        let mut c = g.chunks;
        let mut nchunks = 0;
        while !c.is_null() {
            nchunks += 1;
            let chunk = self.chunk_at(c);
            // SAFETY: valid chunk header; lock held.
            let huge = unsafe { (*c).huge };
            nhuge += usize::from(huge);
            if self.arena.tag_of(chunk) != self.tag {
                return Err(format!("chunk {chunk:#x} is not tagged with this keg"));
            }
            let carved = self.carved(&g, c);
            // Every descriptor readable: a free into a slab never carved reads one.
            let desc_mapped = self.arena.desc_mapped_bytes(chunk);
            if desc_mapped < self.meta_touched(self.geo.slabs_per_chunk) {
                return Err(format!(
                    "chunk {chunk:#x}: descriptors mapped through {desc_mapped} bytes only"
                ));
            }
            for i in carved..self.geo.slabs_per_chunk {
                let s = self.meta(chunk, i) as *const u8;
                // SAFETY: inside the chunk's descriptor area (i < slabs_per_chunk), mapped
                // (just checked); lock held.
                let zero = unsafe {
                    core::slice::from_raw_parts(s, self.geo.meta_size)
                        .iter()
                        .all(|&b| b == 0)
                };
                if !zero {
                    return Err(format!(
                        "slab {i} of chunk {chunk:#x}: never carved but its metadata is written"
                    ));
                }
                // The newest chunk's uncarved slabs count as clean; those past an abandoned
                // chunk's limit (`Keg::abandon_newest`) are no slabs at all.
                // SAFETY: valid chunk header; lock held.
                if i < unsafe { (*c).limit } as usize {
                    nc += 1;
                }
            }
            let nf_before = nf;
            for i in 0..carved {
                let s = self.meta(chunk, i);
                // SAFETY: valid meta; lock held.
                let (state, nfree, pop) = unsafe {
                    let bits = SlabMeta::free_bits(s, self.geo.words);
                    let mut pop = 0;
                    for w in 0..self.geo.words {
                        let word = *bits.add(w);
                        let valid = (ips - w * 64).min(64);
                        if valid < 64 && word >> valid != 0 {
                            return Err(format!(
                                "slab {i} of chunk {chunk:#x}: bit beyond items_per_slab"
                            ));
                        }
                        pop += word.count_ones() as usize;
                    }
                    ((*s).state, (*s).nfree as usize, pop)
                };
                if nfree != pop {
                    return Err(format!(
                        "slab {i} of chunk {chunk:#x}: nfree {nfree} != popcount {pop}"
                    ));
                }
                let ok = match state {
                    SlabState::Clean => {
                        nc += 1;
                        nfree == ips
                    }
                    SlabState::Lazy => {
                        nl += 1;
                        nfree == ips
                    }
                    SlabState::Free => {
                        nf += 1;
                        nf_huge += usize::from(huge && self.in_huge(s));
                        free_items += nfree;
                        nfree == ips
                    }
                    SlabState::Partial => {
                        np += 1;
                        free_items += nfree;
                        nfree > 0 && nfree < ips
                    }
                    SlabState::Full => {
                        nfull += 1;
                        nfree == 0
                    }
                };
                if !ok {
                    return Err(format!(
                        "slab {i} of chunk {chunk:#x}: state {state:?} with nfree {nfree}"
                    ));
                }
            }
            // SAFETY: valid chunk header; lock held.
            let counted = unsafe { (*c).nfree } as usize;
            if counted != nf - nf_before {
                return Err(format!(
                    "chunk {chunk:#x}: {counted} free slabs counted, {} found",
                    nf - nf_before
                ));
            }
            // SAFETY: valid chunk header; lock held.
            c = unsafe { (*c).next };
        }
        let count_list = |mut s: *mut SlabMeta| {
            let mut n = 0;
            while !s.is_null() {
                n += 1;
                // SAFETY: list of valid metas; lock held.
                s = unsafe { (*s).next };
            }
            n
        };
        let lists = (
            count_list(g.partial),
            count_list(g.free),
            count_list(g.clean),
            count_list(g.releasing),
        );
        if count_list(g.lazy) != g.nlazy || nl != g.nlazy {
            return Err(format!(
                "lazy list {} / counter {} disagree with states ({nl})",
                count_list(g.lazy),
                g.nlazy
            ));
        }
        if lists != (np, nf, g.nclean, g.nreleasing)
            || (
                g.npartial,
                g.nfree_slabs,
                g.nclean + g.uncarved + g.nreleasing + g.ninflight,
                g.nfull,
            ) != (np, nf, nc, nfull)
        {
            return Err(format!(
                "slab lists {lists:?} / counters {:?} disagree with states {:?}",
                (g.npartial, g.nfree_slabs, g.nclean, g.nreleasing, g.nfull),
                (np, nf, nc, nfull)
            ));
        }
        let mut last = g.releasing;
        // SAFETY: list of valid metas; lock held.
        unsafe {
            while !last.is_null() && !(*last).next.is_null() {
                last = (*last).next;
            }
        }
        if last != g.releasing_tail {
            return Err("releasing list: tail is not the last slab".into());
        }
        let mut last = g.lazy;
        // SAFETY: list of valid metas; lock held.
        unsafe {
            while !last.is_null() && !(*last).next.is_null() {
                last = (*last).next;
            }
        }
        if last != g.lazy_tail {
            return Err("lazy list: tail is not the last slab".into());
        }
        if nchunks != g.nchunks || g.backed_slabs != np + nf + nfull || g.free_items != free_items {
            return Err(format!(
                "keg counters: chunks {} (walked {nchunks}), backed {} (walked {}), free items {} (walked {free_items})",
                g.nchunks,
                g.backed_slabs,
                np + nf + nfull,
                g.free_items
            ));
        }
        if (g.huge_chunks as usize, g.nfree_huge as usize) != (nhuge, nf_huge) {
            return Err(format!(
                "huge chunks {} / their free slabs {} disagree with the walk ({nhuge}, {nf_huge})",
                g.huge_chunks, g.nfree_huge
            ));
        }
        if g.backed_slabs * ips != g.items_out + g.free_items {
            return Err(format!(
                "backed_slabs*items_per_slab {} != items_out {} + free_items {}",
                g.backed_slabs * ips,
                g.items_out,
                g.free_items
            ));
        }
        drop(g);
        Ok(self.counts())
    }
}
