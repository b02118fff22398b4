//! [`BareStacks`]: the critical sections on stacks no zone owns, for the benchmarks. It stays
//! in the core, not in `ebbtide-bench`, because it is built from the per-CPU layer's private
//! parts (a `Pcpu` mapping, its header lock and cap, `RseqRef`'s sections), which the core does
//! not export; exporting them for one benchmark would widen the crate's API for no user.

use super::*;

/// Per-CPU stacks with nothing around them, for benchmarks: the fast path's own critical
/// sections ([`RseqRef::pop`], [`RseqRef::push`]) on stacks no zone owns, with no ownership check,
/// no `careful` test and no slow path. `ebbtide-bench` times it beside `Zone::alloc`/`Zone::free`
/// as the floor of the design; it is not an allocator (the items are whatever the caller gave).
#[doc(hidden)]
pub struct BareStacks {
    pcpu: Pcpu,
    fast: RseqRef,
}

impl BareStacks {
    /// Stacks of [`STORAGE_MAX`] slots, each CPU's holding `per_cpu` items from `item`, open for
    /// pushes up to full. `None` without rseq (locked mode has no critical sections to time).
    pub fn new(per_cpu: usize, mut item: impl FnMut() -> *mut u8) -> Option<BareStacks> {
        let pcpu = Pcpu::new(STORAGE_MAX, os::cpu_count()).ok()?;
        if !pcpu.is_rseq() || per_cpu > STORAGE_MAX as usize {
            // SAFETY: empty and never shared.
            unsafe { pcpu.unmap() };
            return None;
        }
        for cpu in 0..pcpu.ncpu() {
            let h = pcpu.header(cpu);
            let g = lock_header(h);
            for i in 0..per_cpu {
                // SAFETY: i < per_cpu <= storage; the stacks are not shared yet, so nothing else
                // touches this one.
                unsafe { *pcpu.slot(cpu, i) = item() };
            }
            h.word.store(per_cpu as u64, Ordering::Relaxed);
            // Release (in set_cap and the lock's drop): the slots and count are visible to the
            // first critical section that sees the stack open.
            pcpu.set_cap(&g, h, STORAGE_MAX);
        }
        let fast = pcpu.rseq_ref();
        Some(BareStacks { pcpu, fast })
    }

    /// The fast path's pop: null when this CPU's stack is empty.
    #[inline(always)]
    pub fn pop(&self) -> *mut u8 {
        // SAFETY: `fast` comes from our Pcpu, in rseq mode (checked in `new`).
        unsafe { self.fast.pop() }
    }

    /// The fast path's push: false when this CPU's stack is full (or `p` is its top).
    // `p` is stored and handed back by a later `pop`, never dereferenced.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    #[inline(always)]
    pub fn push(&self, p: *mut u8) -> bool {
        // SAFETY: `fast` comes from our Pcpu, whose mapping lives as long as `self`, and the
        // Pcpu is in rseq mode (checked in `new`).
        unsafe { self.fast.push(p) == Push::Done }
    }
}

impl Drop for BareStacks {
    fn drop(&mut self) {
        // SAFETY: no more use (we are being dropped); the items belong to the caller.
        unsafe { self.pcpu.unmap() };
    }
}

// SAFETY: shared use reaches the stacks only through the rseq sections (`pop`, `push`), which
// serialise the threads of one CPU on its stack; the items are opaque pointers, never read.
unsafe impl Sync for BareStacks {}
// SAFETY: the mapping is owned by the value (unmapped by its drop on whichever thread) and
// holds no thread-bound state.
unsafe impl Send for BareStacks {}
