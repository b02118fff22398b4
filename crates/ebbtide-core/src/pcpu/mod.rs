//! Per-CPU caches: one stack of free items per (zone, CPU), touched without locks or atomic
//! read-modify-writes, and drainable from any thread at any time.
//!
//! # Layout
//! ```text
//!  zone.pcpu.base + (cpu << STRIDE_SHIFT) - 64:   Demand: misses counted by the slow path, the
//!                                                 grant set by the resize pass (`sizing.rs`)
//!  zone.pcpu.base + (cpu << STRIDE_SHIFT):        (8 KiB per CPU: two pages)
//!  +0   word   u64  = count (bits 0-9) | room (bits 10-19) | fast allocations (bits 20-63)
//!                     the one field the fast path reads and the commit store's target
//!  +8   cap    u32    the cap the stack was last opened to: count + room when nothing moved
//!                     since (not read by the fast path; snapshots, the slow path's resync)
//!  +12  held   u32    0 while open; while stopped, STOPPED | the count the stop took away
//!  +16  lock   u32    serialises drainers and cap writers (and every op in locked mode)
//!  +24  idle_mark u64 `word` at the last periodic pass: unchanged means no operation since
//!  +32  allocs_seen u64  the fast allocations counted at the last periodic pass (the word's
//!                     44-bit counter widened: see [`Pcpu::fast_allocs`])
//!  +64  items  [*mut u8; storage]   LIFO: items[count-1] is the hottest; storage <= 1008
//!                                    (the last line of the stride is the next CPU's Demand)
//! ```
//! `base` is `colour` bytes (a multiple of 64, never 0) into the mapping's first page, so every
//! CPU's demand line is in the page of its header, which its first operation touches anyway: a
//! zone's per-CPU memory is one page per CPU that uses it (two once its stack holds more than
//! about 500 items), not a page more for the demand lines (a small preloaded program with 26
//! zones: about 90 KiB less peak RSS, `docs/design/pcpu.md`, "Demand lines in the header's
//! page"); and none on a CPU that never uses it: stacks open on their CPU's first slow path,
//! and no pass over all CPUs writes a stack not in use (`Pcpu::in_use`).
//! The stack is UMA's per-CPU alloc + free bucket pair laid end to end: its cap is `2 *
//! bucket_size` plus what the resize pass granted it for its misses (at most 1008, what fits in
//! 8 KiB), a miss on allocation refills one bucket from the depot, a miss on free flushes one
//! bucket to it. (UMA's third, cross-domain bucket has no use on a single NUMA domain.)
//!
//! **Room, not cap.** The word carries the free slots left below the cap (`room`), not the cap:
//! a push needs `room > 0` and a pop `count > 0`, each tested on the word it loaded anyway, so a
//! critical section loads one header field, not two (the fast path from C is bound by its loads:
//! `docs/design/pcpu.md`, "The stop in the word"). A push moves one slot from room to count, a pop
//! one back (and counts an allocation): `count + room`, the stack's capacity, never changes in a
//! critical section. It changes only by a compare-and-swap of a cap writer (`Pcpu::set_cap`),
//! which holds the header lock. A critical section that loaded the word before that CAS and
//! commits after it writes the old capacity back: a cap change from another CPU can be lost,
//! which leaves the stack at its old capacity (never above its storage). The slow path of the
//! stack's own CPU finds and mends that on its next miss (`ZoneInner::sync_cap`). A cap lowered
//! below the count leaves `room` at 0; pops under it then open room the cap does not leave,
//! which the next miss takes back the same way, and the resize pass moves what a stack holds
//! above its cap to the slabs (stop, fence, `Pcpu::take_stopped_above`).
//!
//! # Fast path (rseq mode)
//! glibc registers a restartable sequence area for every thread (`__rseq_offset`). `Pcpu::pop`
//! and `Pcpu::push` are rseq critical sections in inline assembly: read the CPU id, locate the
//! header, load `word`, check `count` (pop) or `room` (push) in it, move the item, and commit
//! with **one 8-byte store of `word`**. If the thread is preempted, migrated or
//! signalled before that store, the kernel restarts the section from the top, so two threads never
//! interleave on one CPU's stack and the fast path needs no lock and no `lock`-prefixed
//! instruction. A thread whose rseq area is not registered sees a CPU id out of range and takes
//! the slow path, which then bypasses the per-CPU layer.
//!
//! **The CPU id test.** A registered thread's id is always below the kernel's `nr_cpu_ids`; an
//! unregistered one reads -1 or -2. The sections test only the sign, not `id < ncpu`: where the
//! constants come from memory (the C entry points, the malloc) the compare with `ncpu` was a
//! load on every call, and those paths are bound by their loads (`docs/design/pcpu.md`, "The
//! CPU id by its sign"). That is sound because rseq mode is used only when `ncpu` covers every
//! possible id: `os::cpu_count` is one more than the highest id in
//! `/sys/devices/system/cpu/possible`, rseq mode needs that file read (`os::cpu_ids_covered`),
//! and a `Pcpu` for fewer CPUs is in locked mode (`Pcpu::new`).
//!
//! # Remote drain (rseq mode)
//! A drainer (the reclaim code, on any thread) takes the `lock` of each header it wants, then
//! **stops** it: one atomic `fetch_and` sets `count` and `room` in `word` to 0 (every section then
//! fails: nothing to pop, no room to push) and the count it took goes to `held`. It then calls
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, FLAG_CPU, cpu)`, which returns only after
//! every critical section that was running on that CPU has been aborted or has committed, and
//! acts as a full barrier there.
//!
//! **A stop a section wrote over.** A section that loaded `word` before the stop and commits after
//! it stores its own word over the stop (a plain store, not a read-modify-write): that section's
//! operation happened, and the stack is open again. The fence cannot prevent it, only end it: after
//! the fence no section that started before the stop is still running. So the drainer looks again:
//! if `count` and `room` are still 0, the stop held and the stack is the drainer's (no commit can
//! recreate that word: a push commits `count >= 1`, a pop `room >= 1`); if not, it stops again with
//! the count now there and fences again, until a stop holds (`Pcpu::stop_fenced`; the pass over all
//! zones of a CPU does the same per CPU, `zone/drain.rs`). Each repetition needs a section that
//! started in the few nanoseconds between a load and a store, on that CPU, just before the stop.
//!
//! The drainer then owns the stack: empties it (or keeps part, or only reads it) and reopens it
//! with one Release store of `word` carrying the count left and the room of the new cap; the
//! next section that loads it sees the stack as the drainer left it. One membarrier covers every
//! zone stopped on that CPU, so `DRAIN_CPU` makes one IPI per CPU, not per zone. The owning thread never cooperates: an idle, descheduled or exited thread's
//! cache drains the same way.
//!
//! With one field for the sections to load there is no load order to get right: a stop kept in
//! a field of its own would have to be loaded before `word`, or a section could combine a
//! pre-drain count with a reopened stack and hand out an item twice (`docs/design/pcpu.md`,
//! "The stop in the word").
//!
//! # Locked mode
//! Without rseq (old glibc, valgrind, `EBBTIDE_RSEQ=0`, or under loom/miri) every operation takes
//! the header `lock` of `sched_getcpu()`'s stack. Drainers take the same lock and need no fence.
//!
//! # What the fast path may never do
//! Lock, make a system call, allocate, or write anything but its own CPU's stack; it reads the
//! header word and one item slot, and writes one slot and the header word.
//!
//! # Files
//! `word.rs` the header word's encoding and the per-CPU lines; `rseq.rs` the critical sections
//! (assembly, one prologue); `rseq_ref.rs` the fast path's typed entry to them; `locked.rs` the
//! header lock and locked mode; `drain.rs` caps, stops and fences; `bare.rs` the benchmarks'
//! bare stacks; this file the stacks of a zone (`Pcpu`) and the operations that pick a mode.

#[cfg(not(loom))]
mod bare;
mod drain;
mod locked;
#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
mod rseq;
mod rseq_ref;
mod word;

#[cfg(not(loom))]
#[doc(hidden)]
pub use bare::BareStacks;
pub use drain::fences;
// The loom build compiles no zone, the only user of some of these.
#[cfg_attr(loom, allow(unused_imports))]
pub(crate) use drain::fence_cpu;
#[cfg_attr(loom, allow(unused_imports))]
pub(crate) use locked::{lock_header, lock_header_as, HeaderGuard, LOCKED_BY_DRAIN_ALL, UNLOCKED};
#[cfg_attr(loom, allow(unused_imports))]
pub(crate) use rseq_ref::RseqRef;
#[allow(unused_imports)]
use word::*;
#[cfg_attr(loom, allow(unused_imports))]
pub(crate) use word::{
    allocs_since, Demand, Header, COUNT_MASK, HDR, POP_ADD, PUSH_SUB, ROOM_MASK, STORAGE_MAX,
    STRIDE_SHIFT,
};

use crate::os::{self, OsError};
use crate::sync::Ordering;
#[cfg(loom)]
use crate::sync::{AtomicU32, AtomicU64};
use core::ptr::{self, NonNull};

/// What a push did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Push {
    /// The item is on this CPU's stack.
    Done,
    /// The stack has no room (full, stopped, or closed: cap 0): nothing changed.
    Full,
    /// The item is already the top of this CPU's stack: an immediate double free
    /// (`free(p); free(p)`), refused; nothing changed.
    Duplicate,
}

/// How the per-CPU layer synchronises (decided once per process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// rseq critical sections, membarrier for remote drains.
    Rseq,
    /// A lock per (zone, CPU).
    Locked,
}

/// Sentinel for "no rseq" in [`Pcpu::rseq_off`].
const NO_RSEQ: isize = isize::MIN;

/// glibc's rseq offset as a static, valid once a zone in rseq mode exists (`rseq::fast_offset`);
/// public (hidden) for the malloc's tests, which see from it whether rseq is in use.
#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
#[doc(hidden)]
pub use rseq::OFF_FAST;

/// The process-wide mode.
pub fn mode() -> Mode {
    if rseq_offset() == NO_RSEQ {
        Mode::Locked
    } else {
        Mode::Rseq
    }
}

fn rseq_offset() -> isize {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
    {
        rseq::offset().unwrap_or(NO_RSEQ)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom))))]
    {
        NO_RSEQ
    }
}

/// The per-CPU stacks of one zone.
pub(crate) struct Pcpu {
    base: *mut u8,
    stride: usize,
    ncpu: u32,
    /// Item slots per CPU (the largest cap).
    pub(crate) storage: u32,
    rseq_off: isize,
    map_len: usize,
    /// `ncpu` [`Demand`] lines after the stacks (null in the loom model, which has none).
    demand: *const Demand,
}

// SAFETY: `base` and `demand` point into a mapping the Pcpu owns (unmapped only by `unmap`,
// which takes the last user's word that nothing uses it), with no thread-bound state.
unsafe impl Send for Pcpu {}
// SAFETY: shared use touches the stacks only through the protocols of the module docs: rseq
// sections on the running CPU's stack, the header lock for locked mode, drainers and cap
// writers, stop + fence for remote drains; the demand lines are atomics.
unsafe impl Sync for Pcpu {}

impl Pcpu {
    /// Per-CPU stacks of `storage` slots each (at most [`STORAGE_MAX`]), for `ncpu` CPUs, every
    /// stack closed (count and room 0) until [`Pcpu::set_cap`] opens it. Stacks are
    /// `1 << STRIDE_SHIFT` bytes apart whatever `storage` is (the critical sections rely on it).
    pub(crate) fn new(storage: u32, ncpu: usize) -> Result<Pcpu, OsError> {
        assert!(
            storage <= STORAGE_MAX,
            "per-CPU storage {storage} above {STORAGE_MAX}"
        );
        let stride = 1usize << STRIDE_SHIFT;
        // One page more than the stacks need, and the stacks start at a "colour" offset in it
        // (a multiple of 64 bytes, never 0, different for successive zones): with every zone's
        // headers at offset 0 of a page, all the headers of the zones a program uses map to the
        // same L1 cache set, and beyond its ways they evict each other on every operation (a
        // malloc uses dozens of size classes at once). CPU 0's demand line is in the 64 bytes
        // before its header, every other CPU's in the last line of the previous stride.
        let map_len = stride * ncpu + os::page_size();
        let base = os::map(map_len)?.as_ptr();
        os::add_metadata(map_len);
        let c = colour();
        debug_assert!(c >= DEMAND && c < os::page_size());
        // SAFETY: colour() < page size, inside the extra page of the mapping.
        let base = unsafe { base.add(c) };
        let p = Pcpu {
            base,
            stride,
            ncpu: ncpu as u32,
            storage,
            // Stacks for fewer CPUs than the process may run on stay in locked mode: the
            // sections do not compare the id with `ncpu` (module docs, "The CPU id test").
            rseq_off: if ncpu >= os::cpu_count() {
                rseq_offset()
            } else {
                NO_RSEQ
            },
            map_len,
            // SAFETY: colour() >= 64, so the line before the first header is inside the fresh
            // zeroed mapping, 64-aligned; zero is a valid `Demand` (atomics).
            demand: unsafe { base.sub(DEMAND) }.cast::<Demand>(),
        };
        for cpu in 0..ncpu {
            // SAFETY: the header lies inside the fresh zeroed mapping; AtomicU32/AtomicU64 are
            // valid for the all-zero bit pattern, so the header is already initialised.
            let _ = p.header(cpu);
        }
        Ok(p)
    }

    /// Per-CPU stacks in locked mode for the loom model, on memory the caller provides
    /// (`ncpu * stride()` bytes, 64-aligned): the headers are written here (loom's atomics are
    /// not valid as zero bytes, unlike the real ones in a fresh mapping).
    ///
    /// # Safety
    /// `mem` is valid, 64-aligned, unused, and outlives the returned stacks.
    #[cfg(loom)]
    pub(crate) unsafe fn with_memory(mem: *mut u8, storage: u32, ncpu: usize) -> Pcpu {
        let p = Pcpu {
            base: mem,
            stride: Self::loom_stride(storage),
            ncpu: ncpu as u32,
            storage,
            rseq_off: NO_RSEQ,
            map_len: 0,
            demand: ptr::null(),
        };
        for cpu in 0..ncpu {
            // SAFETY: inside the caller's memory, 64-aligned (stride is a multiple of 64).
            unsafe {
                p.base.add(cpu * p.stride).cast::<Header>().write(Header {
                    word: AtomicU64::new(0),
                    cap: AtomicU32::new(0),
                    held: AtomicU32::new(0),
                    lock: AtomicU32::new(0),
                    idle_mark: AtomicU64::new(0),
                    allocs_seen: AtomicU64::new(0),
                    _pad: [0; 2],
                    below_items: 0,
                })
            };
        }
        p
    }

    /// Bytes per CPU of [`Pcpu::with_memory`].
    #[cfg(loom)]
    pub(crate) fn loom_stride(storage: u32) -> usize {
        HDR + os::round_up(storage as usize * 8, 64)
    }

    pub(crate) fn ncpu(&self) -> usize {
        self.ncpu as usize
    }

    /// Did anything ever reach this CPU's stack: opened, stopped, locked, or an operation? A
    /// stack nothing reached is all zeros in a mapping nothing wrote there, so its page may
    /// still be the kernel's shared zero page: reading it costs no memory, writing it costs a
    /// page — per zone and per CPU, 4 KiB × CPUs × size classes in a malloc on a large machine.
    /// So stacks are opened lazily, by the first slow path on their CPU
    /// (`ZoneInner::sync_cap`), and every pass over all CPUs (drains, the resize pass, idle
    /// detection, cap and grant changes) skips a stack not in use: it holds no item and no
    /// grant, and it is closed. (A stack used once and then emptied and closed looks unused
    /// again: skipping it loses nothing either.) Racing with the first opening is harmless: the
    /// pass sees an empty stack either way, as if the opening came just after it.
    pub(crate) fn in_use(&self, cpu: usize) -> bool {
        let h = self.header(cpu);
        // Relaxed: a hint whose staleness is harmless (see above).
        h.word.load(Ordering::Relaxed) != 0
            || h.cap.load(Ordering::Relaxed) != 0
            || h.held.load(Ordering::Relaxed) != 0
            || h.lock.load(Ordering::Relaxed) != UNLOCKED
            || (!self.demand.is_null() && self.demand(cpu).grant.load(Ordering::Relaxed) != 0)
    }

    /// The CPUs whose stack is [`Pcpu::in_use`], in order: what every pass over all CPUs visits.
    pub(crate) fn cpus_in_use(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.ncpu()).filter(|&cpu| self.in_use(cpu))
    }

    #[inline]
    pub(crate) fn header(&self, cpu: usize) -> &Header {
        debug_assert!(cpu < self.ncpu as usize);
        // SAFETY: cpu < ncpu, so the header lies inside our mapping; it is 64-aligned.
        unsafe { &*(self.base.add(cpu * self.stride) as *const Header) }
    }

    /// The demand line of a CPU's stack (not in the loom model).
    pub(crate) fn demand(&self, cpu: usize) -> &Demand {
        assert!(cpu < self.ncpu as usize && !self.demand.is_null());
        // SAFETY: cpu < ncpu and the lines exist (checked): the line before CPU `cpu`'s header,
        // inside our mapping (the first one in front of the stacks, the others at the end of the
        // previous stride, beyond its `STORAGE_MAX` slots), 64-aligned, valid for the mapping's
        // lifetime.
        unsafe {
            &*self
                .demand
                .cast::<u8>()
                .add(cpu * self.stride)
                .cast::<Demand>()
        }
    }

    #[inline]
    fn slot(&self, cpu: usize, i: usize) -> *mut *mut u8 {
        debug_assert!(i < self.storage as usize);
        // SAFETY: i < storage, so the slot lies inside this CPU's stride.
        unsafe { self.base.add(cpu * self.stride + HDR + i * 8).cast() }
    }

    /// Is the per-CPU layer usable by this thread? (False for a thread without an rseq area in
    /// rseq mode: it must bypass the stacks.)
    pub(crate) fn usable(&self) -> bool {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        if self.rseq_off != NO_RSEQ {
            return rseq::cpu_id(self.rseq_off) < self.ncpu;
        }
        true
    }

    /// The CPU the caller is on, as the per-CPU layer sees it.
    pub(crate) fn this_cpu(&self) -> usize {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        if self.rseq_off != NO_RSEQ {
            let c = rseq::cpu_id(self.rseq_off);
            if c < self.ncpu {
                return c as usize;
            }
        }
        self.locked_cpu()
    }

    /// Does this layer run on rseq critical sections (else on header locks)?
    #[inline]
    pub(crate) fn is_rseq(&self) -> bool {
        self.rseq_off != NO_RSEQ
    }

    /// The hottest item of this CPU's stack, or null (either mode).
    #[inline(always)]
    pub(crate) fn pop(&self) -> *mut u8 {
        if self.is_rseq() {
            // SAFETY: rseq mode checked just now.
            return unsafe { self.rseq_ref().pop() };
        }
        self.locked_pop()
    }

    /// Pushes onto this CPU's stack; false when it is full or stopped (either mode).
    #[inline(always)]
    pub(crate) fn push(&self, item: *mut u8) -> Push {
        if self.is_rseq() {
            // SAFETY: rseq mode checked just now.
            return unsafe { self.rseq_ref().push(item) };
        }
        self.locked_push(item)
    }

    /// Moves up to `dst.len()` items from this CPU's stack into `dst`; returns how many.
    pub(crate) fn pop_batch(&self, dst: &mut [*mut u8]) -> usize {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        if self.rseq_off != NO_RSEQ {
            // SAFETY: rseq mode (checked just now): `base` is this Pcpu's mapping, a header and
            // its slots for every CPU id (`new`), `rseq_off` glibc's; `dst` has room for
            // `dst.len()` pointers.
            return unsafe {
                rseq::pop_batch(self.base, self.rseq_off, dst.as_mut_ptr(), dst.len())
            };
        }
        self.locked_pop_batch(dst)
    }

    /// Moves items from `src` onto this CPU's stack while there is room; returns how many were
    /// taken (`src[..k]`).
    pub(crate) fn push_batch(&self, src: &[*mut u8]) -> usize {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        if self.rseq_off != NO_RSEQ {
            // SAFETY: rseq mode (checked just now): `base` is this Pcpu's mapping, a header and
            // its slots for every CPU id (`new`), `rseq_off` glibc's; `src` holds `src.len()`
            // pointers.
            return unsafe { rseq::push_batch(self.base, self.rseq_off, src.as_ptr(), src.len()) };
        }
        self.locked_push_batch(src)
    }

    /// Items on a CPU's stack now (racy read, for statistics and idle detection; a stopped
    /// stack's count is the one its stop took).
    pub(crate) fn count(&self, cpu: usize) -> usize {
        let h = self.header(cpu);
        match h.held.load(Ordering::Relaxed) {
            0 => count_of(h.word.load(Ordering::Relaxed)) as usize,
            held => (held & !HELD_STOPPED) as usize,
        }
    }

    /// Free slots below a CPU's cap now (racy read: for sizing a refill).
    pub(crate) fn room(&self, cpu: usize) -> usize {
        room_of(self.header(cpu).word.load(Ordering::Relaxed)) as usize
    }

    /// Fast-path allocations served by a CPU's stack: the total at the last fold widened by
    /// the word's counter since (`allocs_since`). Racy read, for statistics.
    pub(crate) fn fast_allocs(&self, cpu: usize) -> u64 {
        let h = self.header(cpu);
        // Acquire: pairs with the Release in `fold_allocs`, so the word loaded next is at least
        // the one that fold read (a counter behind the fold would look like a wrap).
        let seen = h.allocs_seen.load(Ordering::Acquire);
        allocs_since(seen, h.word.load(Ordering::Relaxed) >> ALLOC_SHIFT)
    }

    /// Folds the word's allocation counter into the 64-bit total, so the total stays exact
    /// across the counter's wrap (see [`allocs_since`]). For the periodic pass, which runs one
    /// at a time (the reclaim lock): the only writer of `allocs_seen`.
    pub(crate) fn fold_allocs(&self, cpu: usize) {
        let h = self.header(cpu);
        let seen = h.allocs_seen.load(Ordering::Relaxed);
        let total = allocs_since(seen, h.word.load(Ordering::Relaxed) >> ALLOC_SHIFT);
        // Release: see `fast_allocs`.
        h.allocs_seen.store(total, Ordering::Release);
    }

    /// Unmaps the stacks.
    ///
    /// # Safety
    /// The stacks must be empty and unused from now on.
    pub(crate) unsafe fn unmap(&self) {
        if self.map_len > 0 {
            // The mapping starts at the page holding `base` (the colour is below a page).
            let start = (self.base as usize) & !(os::page_size() - 1);
            // SAFETY: the mapping is ours and no longer used (caller's guarantee).
            unsafe { os::unmap(NonNull::new_unchecked(start as *mut u8), self.map_len) };
            os::sub_metadata(self.map_len);
        }
    }

    /// Is `item` on one of the stacks now? Racy: reads each CPU's count and slots without
    /// stopping the stack, so an item pushed or popped meanwhile may be missed or seen (for
    /// confirming a suspected double free, never for ownership).
    #[cfg(not(loom))]
    #[allow(dead_code)]
    pub(crate) fn holds_racy(&self, item: *mut u8) -> bool {
        self.cpus_in_use().any(|cpu| {
            let n = self.count(cpu).min(self.storage as usize);
            (0..n).any(|i| {
                // SAFETY: i < storage, so the slot lies in this CPU's stride of the mapping,
                // which lives as long as the Pcpu. Read as an atomic: critical sections and
                // drainers write slots concurrently (plain stores in `asm!` or under the
                // header lock), and a relaxed load of an aligned word is never torn.
                let slot = unsafe {
                    &*self
                        .slot(cpu, i)
                        .cast::<core::sync::atomic::AtomicPtr<u8>>()
                };
                slot.load(core::sync::atomic::Ordering::Relaxed) == item
            })
        })
    }
}

/// Zone objects lie in slots of this many bytes, at multiples of it within their pages
/// (`zone/objects.rs`); their fast-path constants are in a slot's first two lines, which the
/// stacks' colours avoid.
pub(crate) const OBJECT_SLOT: usize = 1024;

/// The next stacks' colour: successive multiples of 64 bytes below a page, skipping the first
/// two lines of every [`OBJECT_SLOT`] (where zone objects keep their fast-path constants; this
/// skips 0 and 64 too, so CPU 0's demand line fits before the base), in a stride of 5 cache
/// lines so neighbours in creation order are far apart.
fn colour() -> usize {
    // A plain std atomic (not the loom shim): a counter with no ordering to model.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    loop {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let c = (n * 5 % 64) * 64;
        if c % OBJECT_SLOT >= 2 * 64 {
            return c;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn open(p: &Pcpu, cap: u32) {
        for cpu in 0..p.ncpu() {
            let h = p.header(cpu);
            let g = lock_header(h);
            p.set_cap(&g, h, cap);
        }
    }

    /// The critical sections index the stacks by any non-negative CPU id ("The CPU id test"):
    /// stacks for fewer CPUs than the process may run on never use them (locked mode), and
    /// stacks for all of them do where rseq is available.
    #[test]
    fn only_stacks_for_every_possible_cpu_use_the_critical_sections() {
        let all = Pcpu::new(8, os::cpu_count()).unwrap();
        assert_eq!(all.is_rseq(), rseq_offset() != NO_RSEQ);
        if os::cpu_count() > 1 {
            let fewer = Pcpu::new(8, os::cpu_count() - 1).unwrap();
            assert!(
                !fewer.is_rseq(),
                "stacks for fewer CPUs than possible in rseq mode"
            );
            open(&fewer, 4);
            // Locked mode still works, on whichever CPU this runs (the id taken modulo ncpu).
            assert_eq!(fewer.push(8 as *mut u8), Push::Done);
            assert_eq!(fewer.pop(), 8 as *mut u8);
            // SAFETY: empty again and never shared.
            unsafe { fewer.unmap() };
        } else {
            eprintln!("one possible CPU: no smaller Pcpu to try");
        }
        // SAFETY: empty and never shared.
        unsafe { all.unmap() };
    }

    #[test]
    fn push_pop_lifo_and_caps() {
        let p = Pcpu::new(8, os::cpu_count()).unwrap();
        assert_eq!(
            p.push(ptr::dangling_mut::<u8>()),
            Push::Full,
            "a new stack is closed"
        );
        open(&p, 4);
        // Pin to one CPU so the stack is one stack.
        let cpu = p.this_cpu();
        let mut pushed = 0;
        for i in 1..=10usize {
            if p.push((i * 8) as *mut u8) == Push::Done {
                pushed += 1;
            }
        }
        // Migration could spread pushes over CPUs; count in total.
        let total: usize = (0..p.ncpu()).map(|c| p.count(c)).sum();
        assert_eq!(total, pushed);
        assert!(pushed >= 4);
        let _ = cpu;
        let mut got = vec![];
        loop {
            let x = p.pop();
            if x.is_null() {
                // maybe migrated: drain the others by stopping them
                break;
            }
            got.push(x as usize);
        }
        let mut rest = vec![];
        for cpu in 0..p.ncpu() {
            let h = p.header(cpu);
            let _g = lock_header(h);
            p.stop_fenced(cpu, h);
            p.take_stopped(cpu, h, 4, |x| rest.push(x as usize));
        }
        got.extend(rest);
        got.sort();
        let mut want: Vec<usize> = (1..=10).map(|i| i * 8).collect();
        want.truncate(pushed);
        assert_eq!(got, want, "every pushed item comes back exactly once");
        // SAFETY: empty and unused.
        unsafe { p.unmap() };
    }

    #[test]
    fn demand_lines_share_their_header_page_and_no_stack_reaches_them() {
        let ncpu = os::cpu_count().max(2);
        let ps = os::page_size();
        for _ in 0..70 {
            // Every colour comes round in 64 zones.
            let p = Pcpu::new(STORAGE_MAX, ncpu).unwrap();
            for cpu in 0..ncpu {
                let h = p.header(cpu) as *const Header as usize;
                let d = p.demand(cpu) as *const Demand as usize;
                assert_eq!(d + DEMAND, h, "cpu {cpu}: the line before the header");
                assert_eq!(d / ps, h / ps, "cpu {cpu}: in the header's page");
                // The last slot of the previous stack ends at this demand line.
                if cpu > 0 {
                    let last = p.slot(cpu - 1, STORAGE_MAX as usize - 1) as usize;
                    assert_eq!(last + 8, d, "cpu {cpu}");
                }
            }
            let start = p.demand(0) as *const Demand as usize & !(ps - 1);
            let end = p.slot(ncpu - 1, STORAGE_MAX as usize - 1) as usize + 8;
            assert!(end <= start + p.map_len, "stacks inside the mapping");
            // SAFETY: empty and unused.
            unsafe { p.unmap() };
        }
    }

    #[test]
    fn batches() {
        let p = Pcpu::new(16, os::cpu_count()).unwrap();
        open(&p, 16);
        let src: Vec<*mut u8> = (1..=20usize).map(|i| (i * 16) as *mut u8).collect();
        let k = p.push_batch(&src);
        assert!(k <= 16 && k > 0);
        let mut dst = vec![ptr::null_mut(); 32];
        let mut n = 0;
        // Drain everything (the thread may migrate between calls; stop+take the rest).
        n += p.pop_batch(&mut dst);
        for cpu in 0..p.ncpu() {
            let h = p.header(cpu);
            let _g = lock_header(h);
            p.stop_fenced(cpu, h);
            p.take_stopped(cpu, h, 16, |x| {
                dst[n] = x;
                n += 1;
            });
        }
        assert_eq!(n, k);
        let mut got: Vec<usize> = dst[..n].iter().map(|&x| x as usize).collect();
        got.sort();
        assert_eq!(got, (1..=k).map(|i| i * 16).collect::<Vec<_>>());
        // SAFETY: empty and unused.
        unsafe { p.unmap() };
    }

    fn item(i: usize) -> *mut u8 {
        (i * 8) as *mut u8
    }

    /// The word's room follows the cap: pushes stop at the cap, a cap lowered below the count
    /// leaves no room, pops under it open room that `cap_holds` reports and `set_cap` takes back,
    /// a stopped stack refuses both operations and keeps its count, and a drainer reopens it with
    /// the room of its new cap.
    #[test]
    fn room_follows_the_cap_and_a_stop_refuses_everything() {
        let cpu = os::pin_to_current_cpu();
        let p = Pcpu::new(16, os::cpu_count()).unwrap();
        let h = p.header(cpu);
        let set = |cap: u32| {
            let g = lock_header(h);
            p.set_cap(&g, h, cap);
        };
        set(8);
        assert_eq!((p.count(cpu), p.room(cpu)), (0, 8));
        for i in 1..=8 {
            assert_eq!(p.push(item(i)), Push::Done, "push {i} of 8");
        }
        assert_eq!(p.push(item(9)), Push::Full, "at the cap");
        assert_eq!(
            p.push(item(8)),
            Push::Duplicate,
            "the top again, even when full"
        );
        assert_eq!((p.count(cpu), p.room(cpu)), (8, 0));
        assert!(p.cap_holds(h, 8));
        // Lowered below the count: no room, and the cap holds.
        set(4);
        assert_eq!((p.count(cpu), p.room(cpu)), (8, 0));
        assert!(p.cap_holds(h, 4));
        assert!(!p.cap_holds(h, 8), "the cap set is 4");
        // A pop opens a slot of room the lowered cap does not leave: found, and taken back.
        assert_eq!(p.pop(), item(8));
        assert_eq!((p.count(cpu), p.room(cpu)), (7, 1));
        assert!(!p.cap_holds(h, 4));
        set(4);
        assert_eq!((p.count(cpu), p.room(cpu)), (7, 0));
        assert_eq!(p.push(item(8)), Push::Full);
        for want in (4..=7).rev() {
            assert_eq!(p.pop(), item(want));
        }
        set(4);
        assert_eq!((p.count(cpu), p.room(cpu)), (3, 1));
        assert_eq!(p.push(item(4)), Push::Done);
        assert_eq!(p.push(item(5)), Push::Full);
        // Raised: room up to the new cap, never above the storage.
        set(100);
        assert_eq!(
            (p.count(cpu), p.room(cpu)),
            (4, 12),
            "the cap is clamped to 16"
        );
        assert_eq!(h.cap.load(Ordering::Relaxed), 16);
        // Stopped: nothing to pop, no room to push, the count kept in `held`.
        let g = lock_header(h);
        assert_eq!(p.stop_fenced(cpu, h), 1, "no section wrote over the stop");
        assert_eq!(h.word.load(Ordering::Relaxed) & STOP_MASK, 0);
        assert_eq!(p.count(cpu), 4);
        assert!(p.in_use(cpu));
        assert!(p.pop().is_null(), "a stopped stack pops nothing");
        assert_eq!(p.push(item(9)), Push::Full, "a stopped stack takes nothing");
        let mut got = Vec::new();
        assert_eq!(p.take_stopped_above(cpu, h, 1, 6, |x| got.push(x)), 3);
        assert_eq!(got, vec![item(4), item(3), item(2)], "hottest first");
        drop(g);
        assert_eq!((p.count(cpu), p.room(cpu)), (1, 5), "reopened with cap 6");
        assert_eq!(p.pop(), item(1));
        assert!(p.pop().is_null());
        // SAFETY: empty and unused.
        unsafe { p.unmap() };
    }

    /// The allocation counter in the word is 44 bits; the total survives its wrap as long as a
    /// fold comes in between (`allocs_since`, `fold_allocs`).
    #[test]
    fn the_allocation_total_survives_the_counter_wrap() {
        let top = 1u64 << ALLOC_BITS;
        assert_eq!(allocs_since(0, 5), 5);
        assert_eq!(allocs_since(top - 2, 1), top + 1, "across the wrap");
        assert_eq!(
            allocs_since(3 * top + 7, 9),
            3 * top + 9,
            "after three wraps"
        );
        assert_eq!(allocs_since(3 * top + 7, 7), 3 * top + 7, "nothing since");
        let cpu = os::pin_to_current_cpu();
        let p = Pcpu::new(16, os::cpu_count()).unwrap();
        let h = p.header(cpu);
        {
            let g = lock_header(h);
            p.set_cap(&g, h, 16);
        }
        for i in 1..=3 {
            assert_eq!(p.push(item(i)), Push::Done);
        }
        // Two allocations before the counter wraps (the stack is this test's alone).
        let w = h.word.load(Ordering::Relaxed);
        h.word.store(
            (w & STOP_MASK) | ((top - 2) << ALLOC_SHIFT),
            Ordering::Relaxed,
        );
        p.fold_allocs(cpu);
        assert_eq!(p.fast_allocs(cpu), top - 2);
        for _ in 0..3 {
            assert!(!p.pop().is_null());
        }
        assert_eq!(h.word.load(Ordering::Relaxed) >> ALLOC_SHIFT, 1, "wrapped");
        assert_eq!(p.fast_allocs(cpu), top + 1);
        p.fold_allocs(cpu);
        assert_eq!(p.fast_allocs(cpu), top + 1);
        assert_eq!(
            (p.count(cpu), p.room(cpu)),
            (0, 16),
            "the wrap left count and room alone"
        );
        // SAFETY: empty and unused.
        unsafe { p.unmap() };
    }

    #[test]
    fn mode_is_rseq_here() {
        // The project's machines run glibc >= 2.35 on Linux >= 5.10; locked mode would mean the
        // fast path silently lost its rseq sections.
        if std::env::var_os("EBBTIDE_RSEQ").is_none() && cfg!(target_arch = "x86_64") {
            assert_eq!(mode(), Mode::Rseq);
        }
    }
}

/// The real per-CPU code (locked mode: every operation under the header lock; remote drains by
/// lock → stop → fence → take → reopen) under loom: every interleaving of a user of one CPU's
/// stack (push, then pop) and a drainer keeps every item in exactly one place and hands none out
/// twice. (The rseq sections are assembly, out of loom's reach; their protocol is
/// modelled in `tests/loom_pcpu.rs`.)
///
/// Run: `RUSTFLAGS="--cfg loom" cargo test --release -p ebbtide-core --lib loom_tests`.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// 64-aligned memory for the stacks, freed at the end of the model run.
    struct Mem(*mut u8, std::alloc::Layout);
    // SAFETY: plain memory owned by the model; every access goes through the Pcpu protocols.
    unsafe impl Send for Mem {}
    // SAFETY: plain memory owned by the model; every shared access goes through the Pcpu
    // protocols (header locks in the model's locked mode).
    unsafe impl Sync for Mem {}
    impl Mem {
        fn new(len: usize) -> Mem {
            let l = std::alloc::Layout::from_size_align(len, 64).unwrap();
            // SAFETY: a non-zero size.
            Mem(unsafe { std::alloc::alloc_zeroed(l) }, l)
        }
    }
    impl Drop for Mem {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout.
            unsafe { std::alloc::dealloc(self.0, self.1) };
        }
    }

    fn item(i: usize) -> *mut u8 {
        (i * 8) as *mut u8
    }

    #[test]
    fn locked_users_and_drainer() {
        // The header lock is a spin lock: every failed attempt is a branch of the model.
        let mut b = loom::model::Builder::new();
        b.max_branches = 100_000;
        if b.preemption_bound.is_none() {
            b.preemption_bound = Some(2);
        }
        b.check(|| {
            let mem = Arc::new(Mem::new(Pcpu::loom_stride(2)));
            // SAFETY: `mem` is 64-aligned, large enough for one CPU, and outlives the stacks
            // (dropped after every thread is joined).
            let p = Arc::new(unsafe { Pcpu::with_memory(mem.0, 2, 1) });
            {
                let h = p.header(0);
                let g = lock_header(h);
                p.set_cap(&g, h, 2);
                // One item cached before the threads start.
                drop(g);
                assert_eq!(p.push(item(1)), Push::Done);
            }
            let user = |mine: usize| {
                let p = p.clone();
                thread::spawn(move || {
                    os::set_model_cpu(0);
                    let mut held = Vec::new();
                    match p.push(item(mine)) {
                        Push::Done => {}
                        Push::Full => held.push(item(mine)),
                        Push::Duplicate => panic!("item {mine} was never pushed before"),
                    }
                    let q = p.pop();
                    if !q.is_null() {
                        held.push(q);
                    }
                    held
                })
            };
            let a = user(2);
            let drainer = {
                let p = p.clone();
                thread::spawn(move || {
                    let h = p.header(0);
                    let _g = lock_header(h);
                    p.stop_fenced(0, h);
                    let mut got = Vec::new();
                    p.take_stopped(0, h, 2, |x| got.push(x));
                    got
                })
            };
            let mut all: Vec<usize> = Vec::new();
            all.extend(a.join().unwrap().into_iter().map(|x| x as usize));
            all.extend(drainer.join().unwrap().into_iter().map(|x| x as usize));
            os::set_model_cpu(0);
            loop {
                let q = p.pop();
                if q.is_null() {
                    break;
                }
                all.push(q as usize);
            }
            all.sort_unstable();
            assert_eq!(all, vec![8, 16], "every item in exactly one place");
            drop(p);
            drop(mem);
        });
    }
}
