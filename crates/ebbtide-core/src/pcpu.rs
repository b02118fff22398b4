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
//! zones: about 90 KiB less peak RSS, docs/benchmarks.md, Issue 12, "Peak RSS: where the memory
//! goes"); and none on a CPU that never uses it: stacks open on their CPU's first slow path,
//! and no pass over all CPUs writes a stack not in use (`Pcpu::in_use`).
//! The stack is UMA's per-CPU alloc + free bucket pair laid end to end: its cap is `2 *
//! bucket_size` plus what the resize pass granted it for its misses (at most 1008, what fits in
//! 8 KiB), a miss on allocation refills one bucket from the depot, a miss on free flushes one
//! bucket to it. (UMA's third, cross-domain bucket has no use on a single NUMA domain.)
//!
//! **Room, not cap.** The word carries the free slots left below the cap (`room`), not the cap:
//! a push needs `room > 0` and a pop `count > 0`, each tested on the word it loaded anyway, so a
//! critical section loads one header field, not two (the fast path from C is bound by its loads:
//! docs/benchmarks.md, "The stop in the word"). A push moves one slot from room to count, a pop
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
//! load on every call, and those paths are bound by their loads (docs/benchmarks.md, "Loads,
//! not instructions"). That is sound because rseq mode is used only when `ncpu` covers every
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
//! zone stopped on that CPU, so `DRAIN_CPU` makes one IPI per CPU, not per zone (the review point
//! of seed 002). The owning thread never cooperates: an idle, descheduled or exited thread's
//! cache drains the same way.
//!
//! With one field for the sections to load there is no load order to get right. Before
//! (docs/benchmarks.md, "The stop in the word") the stop lived in two fields of its own (`cap`
//! for pushes, `floor` for pops), every section had to load its stop field before `word` (the
//! other order let a section combine a pre-drain count with a reopened floor and hand out an
//! item twice: found by `tests/stress.rs` and the loom model), and each section paid one load
//! more.
//!
//! # Locked mode
//! Without rseq (old glibc, valgrind, `EBBTIDE_RSEQ=0`, or under loom/miri) every operation takes
//! the header `lock` of `sched_getcpu()`'s stack. Drainers take the same lock and need no fence.
//!
//! # What the fast path may never do
//! Lock, make a system call, allocate, or write anything but its own CPU's stack; it reads the
//! header word and one item slot, and writes one slot and the header word.

use crate::os::{self, OsError};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use core::ptr::{self, NonNull};

/// Offset of the items from the header.
pub(crate) const HDR: usize = 64;
/// log2 of the distance between two CPUs' stacks of a zone: 8 KiB per (zone, CPU), so the
/// critical sections locate their header with a shift instead of a multiplication.
///
/// Two pages rather than one so that capacity can follow demand (`sizing.rs`) above UMA's
/// bucket pair of 2 × 254 items: with one page the stack of a zone of small items started at
/// its storage (504 slots) and could not grow, and a burst of 256 allocations then 256 frees
/// missed twice per round. The memory cost is address space: the second page of a stack is
/// touched only when the stack holds more than 504 items, which the per-CPU budget bounds; a
/// header stays at its colour's offset of its page (see [`OBJECT_SLOT`]).
pub(crate) const STRIDE_SHIFT: u32 = 13;
/// Item slots per CPU stack: what fits in the stride after the header and before the next
/// CPU's demand line (1008).
pub(crate) const STORAGE_MAX: u32 = (((1usize << STRIDE_SHIFT) - HDR - DEMAND) / 8) as u32;
/// Bytes of a [`Demand`] line, just before its CPU's header.
const DEMAND: usize = 64;
/// `word`'s count field: items on the stack (at most [`STORAGE_MAX`]).
pub(crate) const COUNT_MASK: u64 = (1 << ROOM_SHIFT) - 1;
/// Where `word`'s room field starts: free slots below the cap.
const ROOM_SHIFT: u32 = 10;
const ROOM_ONE: u64 = 1 << ROOM_SHIFT;
pub(crate) const ROOM_MASK: u64 = COUNT_MASK << ROOM_SHIFT;
/// Where `word`'s allocation counter starts: the fast allocations, modulo 2^[`ALLOC_BITS`].
const ALLOC_SHIFT: u32 = 2 * ROOM_SHIFT;
const ALLOC_ONE: u64 = 1 << ALLOC_SHIFT;
/// Width of `word`'s allocation counter.
const ALLOC_BITS: u32 = 64 - ALLOC_SHIFT;
/// What a push subtracts from `word`: one slot from the room, one item onto the count.
pub(crate) const PUSH_SUB: u64 = ROOM_ONE - 1;
/// What a pop adds to `word`: one item off the count, one slot back to the room, one fast
/// allocation counted.
pub(crate) const POP_ADD: u64 = ROOM_ONE + ALLOC_ONE - 1;
/// `count` and `room`: both 0 in a stopped stack (and in a closed empty one).
const STOP_MASK: u64 = COUNT_MASK | ROOM_MASK;
/// `held`'s flag: the stack is stopped (the low bits: the count the stop took).
const HELD_STOPPED: u32 = 1 << 31;
const _: () = assert!(STORAGE_MAX as u64 <= COUNT_MASK);
// The sections' immediates are 32-bit: the room test's mask and the pop's addend fit.
const _: () = assert!(ROOM_MASK < 1 << 31 && ROOM_ONE + ALLOC_ONE - 1 < 1 << 31);

/// A word's count.
#[inline]
fn count_of(w: u64) -> u32 {
    (w & COUNT_MASK) as u32
}

/// A word's room.
#[inline]
fn room_of(w: u64) -> u32 {
    ((w & ROOM_MASK) >> ROOM_SHIFT) as u32
}

/// `w` with `count` items and the room of `cap` (0 when the count is at or above it).
#[inline]
fn with_count_and_cap(w: u64, count: u32, cap: u32) -> u64 {
    debug_assert!(count as u64 <= COUNT_MASK && cap as u64 <= COUNT_MASK);
    (w & !STOP_MASK) | count as u64 | ((cap.saturating_sub(count) as u64) << ROOM_SHIFT)
}

/// The fast allocations counted so far, from the total at the last fold (`seen`) and the word's
/// counter now (`now`, the low [`ALLOC_BITS`] bits of the total): exact while fewer than
/// 2^44 allocations (about 12 hours of one CPU allocating from one zone without a pause, at
/// 2.5 ns each) happen between two folds. A pure function, tested across the wrap.
pub(crate) fn allocs_since(seen: u64, now: u64) -> u64 {
    let mask = (1u64 << ALLOC_BITS) - 1;
    seen.wrapping_add(now.wrapping_sub(seen) & mask)
}

/// One CPU's header (see the module docs for the layout).
#[repr(C, align(64))]
pub(crate) struct Header {
    pub(crate) word: AtomicU64,
    /// The cap last set (see the module docs, "Room, not cap").
    pub(crate) cap: AtomicU32,
    /// 0 while open; `HELD_STOPPED | count` while stopped (written under the lock).
    held: AtomicU32,
    pub(crate) lock: AtomicU32,
    /// The `word` seen by the last periodic pass (idle detection; written by the reclaim code).
    pub(crate) idle_mark: AtomicU64,
    /// Fast allocations at the last fold ([`Pcpu::fold_allocs`]).
    allocs_seen: AtomicU64,
    _pad: [u64; 2],
    /// Always 0, never written: the slot "below" item 0, which the push section's duplicate
    /// check (`items[count - 1] == item`) reads when the stack is empty, so the check needs no
    /// branch on `count > 0`. Zero is never an item.
    below_items: u64,
}
#[cfg(not(loom))]
const _: () = assert!(core::mem::size_of::<Header>() == HDR);
#[cfg(not(loom))]
const _: () = assert!(core::mem::offset_of!(Header, below_items) == HDR - 8);

/// What one CPU's stack of a zone asked of the slow path, and what the resize pass granted it
/// (see `sizing.rs`). One cache line per (zone, CPU), the line before the CPU's header: in the
/// header's page, not the line the fast path writes. The slow path adds to the miss counters
/// (Relaxed: statistics, read by the resize pass and snapshots) and, growing at a miss, to
/// `grant` and `grown` (Relaxed RMWs: a pass storing `grant` meanwhile may overwrite the
/// increment, which only leaves the stack at the pass's figure; the pass recomputes its CPU's
/// room from the grants it stores). Everything else is written by the resize pass and the
/// reclaim paths, which run one at a time (the reclaim lock), so plain Relaxed loads and stores
/// suffice there.
#[repr(C, align(64))]
pub(crate) struct Demand {
    /// Allocations that found this stack empty while caching was on (slow path).
    pub(crate) underflows: core::sync::atomic::AtomicU64,
    /// Frees that found this stack full while caching was on (slow path).
    pub(crate) overflows: core::sync::atomic::AtomicU64,
    /// `underflows + overflows` at the last resize pass.
    pub(crate) seen: core::sync::atomic::AtomicU64,
    /// Misses counted by the last resize pass (in its interval).
    pub(crate) interval_misses: core::sync::atomic::AtomicU64,
    /// When a resize pass last saw misses (ns, `os::now_ns`; 0 = never).
    pub(crate) last_miss_ns: core::sync::atomic::AtomicU64,
    /// Slots granted above the floor (`2 × bucket_size`). The resize pass stores it; a miss
    /// adds to it (`sizing::grow_at_miss`).
    pub(crate) grant: core::sync::atomic::AtomicU32,
    /// Slots misses added to `grant` since the last pass (swapped to 0 by the pass).
    pub(crate) grown: core::sync::atomic::AtomicU32,
    /// `grown` as the last pass took it (what its interval's misses already got).
    pub(crate) interval_grown: core::sync::atomic::AtomicU32,
    /// The low 32 bits of `underflows` at the last pass (underflows since = the difference).
    pub(crate) under_seen: core::sync::atomic::AtomicU32,
    /// Underflows counted by the last pass (of its `interval_misses`).
    pub(crate) interval_under: core::sync::atomic::AtomicU32,
    /// The low 32 bits of `underflows` when a miss last grew this stack
    /// (`ZoneInner::grow_at_miss`): the next growth at a miss needs an underflow after it.
    pub(crate) under_at_grow: core::sync::atomic::AtomicU32,
}
#[cfg(not(loom))]
const _: () = assert!(core::mem::size_of::<Demand>() == DEMAND);

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

/// Right after the commit store: the post-commit label, then (out of line) the abort handler,
/// the failure exit `$fail`, and the descriptor: one text of the abort handler and the
/// descriptor for every section.
macro_rules! rseq_exit {
    ($fail:expr) => {
        concat!(
            "4:\n",
            ".pushsection __rseq_failure, \"ax\"\n",
            ".long 0x53053053\n",
            "5:\n",
            "jmp 2b\n",
            "7:\n",
            $fail,
            ".popsection\n",
            ".pushsection __rseq_cs, \"aw\"\n",
            ".balign 32\n",
            "9:\n",
            ".long 0, 0\n",
            ".quad 3b, 4b - 3b, 5b\n",
            ".popsection\n",
        )
    };
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
mod rseq {
    use core::sync::atomic::{AtomicIsize, Ordering};
    use std::sync::OnceLock;

    static OFFSET: OnceLock<Option<isize>> = OnceLock::new();

    /// `offset`'s value once it is `Some` (0 before), for `fast_offset`.
    pub static OFF_FAST: AtomicIsize = AtomicIsize::new(0);

    /// The rseq offset, for the in-place critical sections of a malloc's `free`
    /// (`RseqRef::pop_in_place::<true>`), read from a static rather than from the zone's
    /// constants: that `free` finds the zone through the pointer (chunk map, tag, the zone's
    /// constants), and with the offset among those constants the CPU id's load waited for that
    /// chain too, which the next allocation's header load then waited for (`pair_small` 8.3
    /// against 10.0 ns with the offset here, docs/benchmarks.md). Valid once a zone in rseq
    /// mode exists: [`offset`] stores it before it first returns `Some`, and a zone is in rseq
    /// mode only if `offset` returned `Some` when the zone was created, which happens before
    /// any call of the zone's fast paths.
    #[inline(always)]
    pub(super) fn fast_offset() -> isize {
        // Relaxed: stored once, before any zone that could call this was created (see above).
        // Through `local_ref!`: no GOT load before it (`local.rs`).
        crate::local_ref!(OFF_FAST).load(Ordering::Relaxed)
    }

    /// The thread-pointer offset of glibc's rseq area, if rseq can be used for per-CPU caches.
    pub(super) fn offset() -> Option<isize> {
        *OFFSET.get_or_init(|| {
            if matches!(std::env::var_os("EBBTIDE_RSEQ"), Some(v) if v == "0") {
                return None;
            }
            let (off, size) = crate::os::glibc_rseq_area()?;
            if size < 20 {
                return None; // rseq not registered (disabled by tunable, or the kernel refused)
            }
            if !crate::os::membarrier_register_rseq() {
                return None;
            }
            // The sections index the stacks by any non-negative id (module docs, "The CPU id
            // test"): only with a CPU count known to cover every id.
            if !crate::os::cpu_ids_covered() {
                return None;
            }
            // The calling thread must see a valid CPU id through the area.
            let cpu = cpu_id(off);
            if (cpu as usize) < crate::os::cpu_count() {
                // Relaxed: see `fast_offset`.
                OFF_FAST.store(off, Ordering::Relaxed);
                Some(off)
            } else {
                None
            }
        })
    }

    /// This thread's CPU id as the rseq area reports it (u32::MAX-ish when unregistered).
    #[inline]
    pub(super) fn cpu_id(off: isize) -> u32 {
        let cpu: u32;
        // SAFETY: reads 4 bytes of this thread's rseq area at %fs:off+4, which glibc keeps mapped
        // for the thread's lifetime.
        unsafe {
            core::arch::asm!("movl %fs:4({off}), {cpu:e}", off = in(reg) off, cpu = out(reg) cpu,
                options(att_syntax, nostack, readonly, preserves_flags));
        }
        cpu
    }

    /// Restarts every rseq critical section running on `cpu` and fences it.
    pub(super) fn fence_cpu(cpu: usize) -> bool {
        crate::os::membarrier_rseq_cpu(cpu)
    }

    // Every critical section below has the same shape, built from these two pieces:
    //
    //   2: store the address of descriptor 9 into rseq_cs   (re-armed on every restart)
    //   3: [start_ip] read the CPU id; negative (unregistered thread) -> 7
    //      rax = base + (cpu << STRIDE_SHIFT)                 (this CPU's header)
    //      ... the section's own checks (failing -> 7) and moves, committing with one store of
    //      `word` ...
    //   4: [post_commit_ip] success falls through to the code after the asm
    //
    //   out of line, in section __rseq_failure (as librseq does), so that the hot path is one
    //   straight run of instructions with no jump over never-executed bytes:
    //      RSEQ_SIG, then 5: [abort_ip] jmp 2b                 (restart from the top)
    //      7: the section's failure exit (given by the section), jumping back or to a label
    //   9: the descriptor {version 0, flags 0, start_ip 3b, post_commit_offset 4b-3b, abort_ip 5b}
    //
    // Operands every section passes: `off` (glibc's rseq offset), `base`, and `shift`
    // (= STRIDE_SHIFT); rax is the header pointer and must be declared clobbered.

    /// The start of a critical section: arm the descriptor, locate this CPU's header in rax.
    macro_rules! rseq_enter {
        () => {
            concat!(
                "2:\n",
                "leaq 9f(%rip), %rax\n",
                "movq %rax, %fs:8({off})\n",
                "3:\n",
                "movl %fs:4({off}), %eax\n",
                // Negative: unregistered (module docs, "The CPU id test").
                "testl %eax, %eax\n",
                "js 7f\n",
                "shlq ${shift}, %rax\n",
                "addq {base}, %rax\n",
            )
        };
    }

    /// Pops the top item of this CPU's stack; null when empty, stopped, or unregistered.
    ///
    /// # Safety
    /// `base` must point to one header of `1 << STRIDE_SHIFT` bytes for every CPU id the kernel
    /// can report (module docs, "The CPU id test"), each followed by its item
    /// slots, and `off` must be glibc's rseq offset.
    #[inline(always)]
    pub(super) unsafe fn pop(base: *mut u8, off: isize) -> *mut u8 {
        let out: usize;
        // SAFETY: an rseq critical section (module docs of `pcpu`). It reads the header and slot
        // of the CPU it runs on (a non-negative id: below the CPU count, which covers every
        // possible id; count <= storage by invariant)
        // and commits with one store of `word`. The abort handler is preceded by glibc's x86
        // RSEQ_SIG and restarts from the top; the descriptor lives in section __rseq_cs.
        // `word` is the only header field loaded (module docs, "Room, not cap"): count 0 means
        // empty, closed or stopped.
        unsafe {
            core::arch::asm!(
                rseq_enter!(),
                "movq (%rax), %rcx",
                "movl %ecx, %edx",
                "andl ${count_mask}, %edx",
                "jz 7f",
                "movq 56(%rax,%rdx,8), {out}",
                "addq ${pop_add}, %rcx",
                "movq %rcx, (%rax)",
                rseq_exit!("xorl {out:e}, {out:e}\njmp 4b\n"),
                off = in(reg) off,
                base = in(reg) base,
                shift = const super::STRIDE_SHIFT,
                count_mask = const super::COUNT_MASK,
                pop_add = const super::POP_ADD,
                out = out(reg) out,
                out("rax") _,
                out("rcx") _,
                out("rdx") _,
                options(att_syntax, nostack),
            );
        }
        out as *mut u8
    }

    /// Pushes `item` on this CPU's stack; false when full, stopped, or unregistered.
    ///
    /// # Safety
    /// As [`pop`].
    #[inline(always)]
    pub(super) unsafe fn push(base: *mut u8, off: isize, item: *mut u8) -> super::Push {
        // SAFETY: as in `pop`; the slot written is items[count] with room > 0, so count <
        // count + room <= storage. The slot read is items[count - 1], the header's always-zero
        // `below_items` when count is 0 (count <= storage, so inside the page; a stopped stack
        // reads count 0 too).
        // Success falls through; a full stack leaves through the `full` label (asm goto) from the
        // out-of-line exit, a duplicate of the top through `dup`, before any store.
        unsafe {
            core::arch::asm!(
                rseq_enter!(),
                "movq (%rax), %rcx",
                "movl %ecx, %edx",
                "andl ${count_mask}, %edx",
                "cmpq {item}, 56(%rax,%rdx,8)",
                "je {dup}",
                "testl ${room_mask}, %ecx",
                "jz 7f",
                "movq {item}, 64(%rax,%rdx,8)",
                "subq ${push_sub}, %rcx",
                "movq %rcx, (%rax)",
                rseq_exit!("jmp {full}\n"),
                off = in(reg) off,
                base = in(reg) base,
                shift = const super::STRIDE_SHIFT,
                item = in(reg) item,
                count_mask = const super::COUNT_MASK,
                room_mask = const super::ROOM_MASK,
                push_sub = const super::PUSH_SUB,
                out("rax") _,
                out("rcx") _,
                out("rdx") _,
                full = label { return super::Push::Full; },
                dup = label { return super::Push::Duplicate; },
                options(att_syntax, nostack),
            );
        }
        super::Push::Done
    }

    /// The start of a critical section that reads the stacks' base from memory (`{r}` points
    /// to it, at offset `{base_at}`) instead of a register, and tests the CPU id's sign instead
    /// of comparing it with the CPU count (module docs, "The CPU id test"): for callers that
    /// keep nothing in registers across calls (the C entry points, the malloc).
    macro_rules! rseq_enter_in {
        () => {
            concat!(
                "2:\n",
                "leaq 9f(%rip), %rax\n",
                "movq %rax, %fs:8({off})\n",
                "3:\n",
                "movl %fs:4({off}), %eax\n",
                // Negative: unregistered (module docs, "The CPU id test").
                "testl %eax, %eax\n",
                "js 7f\n",
                "shlq ${shift}, %rax\n",
                "addq {base_at}({r}), %rax\n",
            )
        };
    }

    /// [`pop`] with the base read from `*r` inside the section.
    ///
    /// # Safety
    /// `r` points to a `RseqRef` whose fields satisfy [`pop`]'s requirements, immutable for
    /// the call; `off` is its `rseq_off`.
    #[inline(always)]
    pub(super) unsafe fn pop_in(r: *const super::RseqRef, off: isize) -> *mut u8 {
        let out: usize;
        // SAFETY: as in `pop`; `*r` is read-only memory of the caller's (a zone's constants), so
        // re-reading it after a restart reads the same values.
        unsafe {
            core::arch::asm!(
                rseq_enter_in!(),
                "movq (%rax), %rcx",
                "movl %ecx, %edx",
                "andl ${count_mask}, %edx",
                "jz 7f",
                "movq 56(%rax,%rdx,8), {out}",
                "addq ${pop_add}, %rcx",
                "movq %rcx, (%rax)",
                rseq_exit!("xorl {out:e}, {out:e}\njmp 4b\n"),
                off = in(reg) off,
                r = in(reg) r,
                base_at = const core::mem::offset_of!(super::RseqRef, base),
                shift = const super::STRIDE_SHIFT,
                count_mask = const super::COUNT_MASK,
                pop_add = const super::POP_ADD,
                out = out(reg) out,
                out("rax") _,
                out("rcx") _,
                out("rdx") _,
                options(att_syntax, nostack),
            );
        }
        out as *mut u8
    }

    /// [`push`] with the base read from `*r` inside the section.
    ///
    /// # Safety
    /// As [`pop_in`].
    #[inline(always)]
    pub(super) unsafe fn push_in(
        r: *const super::RseqRef,
        off: isize,
        item: *mut u8,
    ) -> super::Push {
        // SAFETY: as in `push` and `pop_in`.
        unsafe {
            core::arch::asm!(
                rseq_enter_in!(),
                "movq (%rax), %rcx",
                "movl %ecx, %edx",
                "andl ${count_mask}, %edx",
                "cmpq {item}, 56(%rax,%rdx,8)",
                "je {dup}",
                "testl ${room_mask}, %ecx",
                "jz 7f",
                "movq {item}, 64(%rax,%rdx,8)",
                "subq ${push_sub}, %rcx",
                "movq %rcx, (%rax)",
                rseq_exit!("jmp {full}\n"),
                off = in(reg) off,
                r = in(reg) r,
                base_at = const core::mem::offset_of!(super::RseqRef, base),
                shift = const super::STRIDE_SHIFT,
                item = in(reg) item,
                count_mask = const super::COUNT_MASK,
                room_mask = const super::ROOM_MASK,
                push_sub = const super::PUSH_SUB,
                out("rax") _,
                out("rcx") _,
                out("rdx") _,
                full = label { return super::Push::Full; },
                dup = label { return super::Push::Duplicate; },
                options(att_syntax, nostack),
            );
        }
        super::Push::Done
    }

    /// Pops up to `max` items into `dst` (hottest first); returns how many.
    ///
    /// # Safety
    /// As [`pop`]; `dst` must have room for `max` pointers.
    #[inline(never)]
    pub(super) unsafe fn pop_batch(
        base: *mut u8,
        off: isize,
        dst: *mut *mut u8,
        max: usize,
    ) -> usize {
        let n: usize;
        // SAFETY: as in `pop`; copies n <= count slots below `count` into `dst` and commits
        // count - n and room + n (allocation counter unchanged: a batch move is not an
        // allocation).
        unsafe {
            core::arch::asm!(
                rseq_enter!(),
                "movq (%rax), %rcx",
                "movl %ecx, %edx",
                "andl ${count_mask}, %edx",
                "jz 7f",
                "movq %rdx, %r8",
                "cmpq {max}, %r8",
                "jbe 10f",
                "movq {max}, %r8",
                "10:",
                "xorl %r9d, %r9d",
                "11:",
                "cmpq %r8, %r9",
                "jae 12f",
                "movq %rdx, %r10",
                "subq %r9, %r10",
                "movq 56(%rax,%r10,8), %r11",
                "movq %r11, ({dst},%r9,8)",
                "incq %r9",
                "jmp 11b",
                "12:",
                "subq %r8, %rcx",
                "movq %r8, %r9",
                "shlq ${room_shift}, %r9",
                "addq %r9, %rcx",
                "movq %rcx, (%rax)",
                rseq_exit!("xorl %r8d, %r8d\njmp 4b\n"),
                "movq %r8, {n}",
                off = in(reg) off,
                base = in(reg) base,
                shift = const super::STRIDE_SHIFT,
                dst = in(reg) dst,
                max = in(reg) max,
                count_mask = const super::COUNT_MASK,
                room_shift = const super::ROOM_SHIFT,
                n = out(reg) n,
                out("rax") _,
                out("rcx") _,
                out("rdx") _,
                out("r8") _,
                out("r9") _,
                out("r10") _,
                out("r11") _,
                options(att_syntax, nostack),
            );
        }
        n
    }

    /// Pushes up to `len` items from `src`; returns how many were taken (`src[..k]`).
    ///
    /// # Safety
    /// As [`pop`]; `src` must hold `len` pointers.
    #[inline(never)]
    pub(super) unsafe fn push_batch(
        base: *mut u8,
        off: isize,
        src: *const *mut u8,
        len: usize,
    ) -> usize {
        let k: usize;
        // SAFETY: as in `pop`; writes k <= room slots at items[count..] (count + room <=
        // storage) and commits count + k and room - k.
        unsafe {
            core::arch::asm!(
                rseq_enter!(),
                "movq (%rax), %rcx",
                "movq %rcx, %r8",
                "shrq ${room_shift}, %r8",
                "andl ${count_mask}, %r8d",
                "jz 7f",
                "movl %ecx, %edx",
                "andl ${count_mask}, %edx",
                "cmpq {len}, %r8",
                "jbe 10f",
                "movq {len}, %r8",
                "10:",
                "xorl %r9d, %r9d",
                "11:",
                "cmpq %r8, %r9",
                "jae 12f",
                "movq ({src},%r9,8), %r11",
                "leaq (%rdx,%r9), %r10",
                "movq %r11, 64(%rax,%r10,8)",
                "incq %r9",
                "jmp 11b",
                "12:",
                "addq %r8, %rcx",
                "movq %r8, %r9",
                "shlq ${room_shift}, %r9",
                "subq %r9, %rcx",
                "movq %rcx, (%rax)",
                rseq_exit!("xorl %r8d, %r8d\njmp 4b\n"),
                "movq %r8, {k}",
                off = in(reg) off,
                base = in(reg) base,
                shift = const super::STRIDE_SHIFT,
                src = in(reg) src,
                len = in(reg) len,
                count_mask = const super::COUNT_MASK,
                room_shift = const super::ROOM_SHIFT,
                k = out(reg) k,
                out("rax") _,
                out("rcx") _,
                out("rdx") _,
                out("r8") _,
                out("r9") _,
                out("r10") _,
                out("r11") _,
                options(att_syntax, nostack),
            );
        }
        k
    }
}

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

// SAFETY: the stacks are only touched through the protocols above (rseq sections, header locks,
// stop + fence); `base` is owned by the Pcpu.
unsafe impl Send for Pcpu {}
// SAFETY: as above.
unsafe impl Sync for Pcpu {}

/// A spin lock on a header's `lock` word. Holders are short (no system call except the drainer's
/// one membarrier per CPU), so waiters spin briefly, then yield.
pub(crate) struct HeaderGuard<'a>(&'a AtomicU32);

impl Drop for HeaderGuard<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire in `lock_header_as`; publishes the header and slot
        // writes made while the lock was held.
        self.0.store(UNLOCKED, Ordering::Release);
    }
}

/// The `lock` word of a header no one holds.
pub(crate) const UNLOCKED: u32 = 0;
/// The `lock` word of a header held through a [`HeaderGuard`].
const LOCKED: u32 = 1;
/// The `lock` word of a header held by the DRAIN_CPU pass over every zone (`drain_cpu_locked`:
/// one at a time, registry locked, gate exclusive), which stops a CPU's stacks of every zone
/// before its one fence and releases them after: the value tells that pass, on its second
/// walk, which locks are its own.
pub(crate) const LOCKED_BY_DRAIN_ALL: u32 = 2;

pub(crate) fn lock_header(h: &Header) -> HeaderGuard<'_> {
    lock_header_as(h, LOCKED);
    HeaderGuard(&h.lock)
}

/// Takes a header's lock, writing `holder` (not [`UNLOCKED`]) into it. The holder releases it by
/// storing [`UNLOCKED`] with Release ordering (as [`HeaderGuard`]'s drop does).
pub(crate) fn lock_header_as(h: &Header, holder: u32) {
    debug_assert!(holder != UNLOCKED);
    let mut spins = 0u32;
    loop {
        // Acquire: pairs with the Release of the previous holder's unlock. (Strong under loom,
        // which models the weak form's spurious failures as endless branches.)
        #[cfg(not(loom))]
        let r =
            h.lock
                .compare_exchange_weak(UNLOCKED, holder, Ordering::Acquire, Ordering::Relaxed);
        #[cfg(loom)]
        let r = h
            .lock
            // Acquire: as above.
            .compare_exchange(UNLOCKED, holder, Ordering::Acquire, Ordering::Relaxed);
        if r.is_ok() {
            return;
        }
        spins += 1;
        #[cfg(loom)]
        {
            // Let the holder run (loom explores every interleaving anyway).
            let _ = spins;
            loom::thread::yield_now();
        }
        #[cfg(not(loom))]
        if spins < 64 {
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

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

    #[inline]
    fn locked_cpu(&self) -> usize {
        os::current_cpu() % self.ncpu as usize
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

    #[cold]
    fn locked_pop(&self) -> *mut u8 {
        let cpu = self.locked_cpu();
        let h = self.header(cpu);
        let _g = lock_header(h);
        let w = h.word.load(Ordering::Relaxed);
        let c = count_of(w);
        if c == 0 {
            return ptr::null_mut();
        }
        // SAFETY: c - 1 < count <= storage; we hold the header lock.
        let item = unsafe { *self.slot(cpu, c as usize - 1) };
        h.word
            .store(w - 1 + ROOM_ONE + ALLOC_ONE, Ordering::Relaxed);
        item
    }

    #[cold]
    fn locked_push(&self, item: *mut u8) -> Push {
        let cpu = self.locked_cpu();
        let h = self.header(cpu);
        let _g = lock_header(h);
        let w = h.word.load(Ordering::Relaxed);
        let c = count_of(w);
        // SAFETY: c - 1 < count <= storage; we hold the header lock.
        if c > 0 && unsafe { *self.slot(cpu, c as usize - 1) } == item {
            return Push::Duplicate;
        }
        if room_of(w) == 0 {
            return Push::Full;
        }
        // SAFETY: c < count + room <= storage; we hold the header lock.
        unsafe { *self.slot(cpu, c as usize) = item };
        h.word.store(w + 1 - ROOM_ONE, Ordering::Relaxed);
        Push::Done
    }

    /// Moves up to `dst.len()` items from this CPU's stack into `dst`; returns how many.
    pub(crate) fn pop_batch(&self, dst: &mut [*mut u8]) -> usize {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        if self.rseq_off != NO_RSEQ {
            // SAFETY: as in `pop`; dst has room for dst.len() pointers.
            return unsafe {
                rseq::pop_batch(self.base, self.rseq_off, dst.as_mut_ptr(), dst.len())
            };
        }
        let cpu = self.locked_cpu();
        let h = self.header(cpu);
        let _g = lock_header(h);
        let w = h.word.load(Ordering::Relaxed);
        let c = count_of(w) as usize;
        let n = c.min(dst.len());
        for (i, d) in dst.iter_mut().take(n).enumerate() {
            // SAFETY: c - 1 - i < count <= storage; header lock held.
            *d = unsafe { *self.slot(cpu, c - 1 - i) };
        }
        h.word
            .store(w - n as u64 + n as u64 * ROOM_ONE, Ordering::Relaxed);
        n
    }

    /// Moves items from `src` onto this CPU's stack while there is room; returns how many were
    /// taken (`src[..k]`).
    pub(crate) fn push_batch(&self, src: &[*mut u8]) -> usize {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        if self.rseq_off != NO_RSEQ {
            // SAFETY: as in `pop`; src holds src.len() pointers.
            return unsafe { rseq::push_batch(self.base, self.rseq_off, src.as_ptr(), src.len()) };
        }
        let cpu = self.locked_cpu();
        let h = self.header(cpu);
        let _g = lock_header(h);
        let w = h.word.load(Ordering::Relaxed);
        let c = count_of(w) as usize;
        let k = (room_of(w) as usize).min(src.len());
        for (i, s) in src.iter().take(k).enumerate() {
            // SAFETY: c + i < count + room <= storage; header lock held.
            unsafe { *self.slot(cpu, c + i) = *s };
        }
        h.word
            .store(w + k as u64 - k as u64 * ROOM_ONE, Ordering::Relaxed);
        k
    }

    /// Sets a CPU's cap: `room` in the word becomes what the cap leaves above the count, by a
    /// compare-and-swap (no fence: a lower cap only sends more pushes to the slow path). A
    /// critical section on the stack's CPU that loaded the word before the CAS may write the
    /// old room back (module docs, "Room, not cap"); [`Pcpu::cap_holds`]
    /// tells the stack's own CPU whether it did. Never on a stopped stack: callers hold the
    /// header lock, which drainers hold while a stack is stopped.
    pub(crate) fn set_cap(&self, g: &HeaderGuard<'_>, h: &Header, cap: u32) {
        debug_assert!(core::ptr::eq(g.0, &h.lock));
        debug_assert_eq!(
            h.held.load(Ordering::Relaxed),
            0,
            "set_cap on a stopped stack"
        );
        let cap = cap.min(self.storage);
        h.cap.store(cap, Ordering::Relaxed);
        // Release: the slots and count written before (a new stack's items, `BareStacks`) are
        // visible to the first critical section that sees the room. Relaxed loads: the update
        // retries with the word seen. `None` (the room already right) leaves the word alone.
        let _ = h
            .word
            .fetch_update(Ordering::Release, Ordering::Relaxed, |w| {
                let new = with_count_and_cap(w, count_of(w), cap);
                (new != w).then_some(new)
            });
    }

    /// Does this stack's word carry the room its cap `cap` leaves (or is it stopped, which its
    /// drainer reopens)? False after a cap change a critical section wrote over (see
    /// [`Pcpu::set_cap`]) or a cap lowered below the count that pops have since opened room
    /// under. Racy read: for the slow path of the stack's own CPU, which then sets the cap.
    pub(crate) fn cap_holds(&self, h: &Header, cap: u32) -> bool {
        let w = h.word.load(Ordering::Relaxed);
        let cap = cap.min(self.storage);
        h.held.load(Ordering::Relaxed) != 0
            || (h.cap.load(Ordering::Relaxed) == cap
                && room_of(w) == cap.saturating_sub(count_of(w)))
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

    /// Stops a CPU's stack (the caller holds its header lock): `count` and `room` to 0 by one
    /// atomic read-modify-write, the count kept in `held`. A fence of that CPU ([`fence_cpu`]) must
    /// follow, and then [`Pcpu::stop_holds`] decides whether the stack is the caller's or must
    /// be stopped again (module docs, "A stop a section wrote over"); [`Pcpu::stop_fenced`]
    /// does all three.
    pub(crate) fn stop(&self, h: &Header) {
        // SeqCst: the stop must be visible to the target CPU before the fence's IPI (the
        // membarrier system call is a full barrier on the caller's side too).
        let w = h.word.fetch_and(!STOP_MASK, Ordering::SeqCst);
        // Relaxed: read only by holders of the header lock (and racy statistics).
        h.held.store(HELD_STOPPED | count_of(w), Ordering::Relaxed);
    }

    /// After [`Pcpu::stop`] and a fence of the stack's CPU: did the stop hold? If not, a
    /// critical section that loaded the word before the stop committed over it, and the caller
    /// must stop and fence again.
    pub(crate) fn stop_holds(&self, h: &Header) -> bool {
        // Acquire: pairs with the fence (membarrier, then `fence_cpu`'s SeqCst fence): a commit
        // over the stop made before the fence returned is seen here.
        h.word.load(Ordering::Acquire) & STOP_MASK == 0
    }

    /// Stops a CPU's stack (header lock held), fences the CPU, and repeats until the stop
    /// holds: afterwards the stack is the caller's until it reopens it. Returns the fences
    /// issued (1 unless a stop was written over).
    pub(crate) fn stop_fenced(&self, cpu: usize, h: &Header) -> usize {
        let mut fences = 0;
        loop {
            self.stop(h);
            fence_cpu(cpu);
            fences += 1;
            if self.stop_holds(h) {
                return fences;
            }
        }
    }

    /// The count of a stopped stack (what the stop that held took away).
    fn held_count(&self, h: &Header) -> usize {
        // Relaxed: written by this thread's `stop` (the caller holds the header lock).
        let held = h.held.load(Ordering::Relaxed);
        debug_assert!(held & HELD_STOPPED != 0, "not a stopped stack");
        let c = (held & !HELD_STOPPED) as usize;
        debug_assert!(c <= self.storage as usize);
        c
    }

    /// Visits the items of a stopped (and fenced) stack, coldest first, without changing it.
    pub(crate) fn peek_stopped(&self, cpu: usize, h: &Header, mut f: impl FnMut(*mut u8)) -> usize {
        // The slots: ordered before us by `stop_holds`'s Acquire load after the fence (the last
        // critical section's commit, after its slot write, was seen by it).
        let c = self.held_count(h);
        for i in 0..c {
            // SAFETY: i < count <= storage; the stack is stopped and fenced, so it is ours.
            f(unsafe { *self.slot(cpu, i) });
        }
        c
    }

    /// Reopens a stopped stack with its items in place, with `cap`.
    pub(crate) fn reopen(&self, h: &Header, cap: u32) {
        let c = self.held_count(h) as u32;
        self.reopen_with(h, c, cap);
    }

    /// Reopens a stopped stack holding `count` items (its slots below `count`) with `cap`: one
    /// store of the word.
    fn reopen_with(&self, h: &Header, count: u32, cap: u32) {
        let cap = cap.min(self.storage);
        h.cap.store(cap, Ordering::Relaxed);
        h.held.store(0, Ordering::Relaxed);
        // Relaxed: the stack is stopped and fenced, so no one else writes the word now.
        let w = h.word.load(Ordering::Relaxed);
        // Release: pairs with the next critical section's load of the word (and HeaderGuard's
        // release): every write to the stack made while it was stopped is visible before it is
        // open.
        h.word
            .store(with_count_and_cap(w, count, cap), Ordering::Release);
    }

    /// Empties a stopped (and fenced) stack into `f`, hottest first, and reopens it with `cap`.
    /// Returns how many items were taken.
    pub(crate) fn take_stopped(
        &self,
        cpu: usize,
        h: &Header,
        cap: u32,
        f: impl FnMut(*mut u8),
    ) -> usize {
        self.take_stopped_above(cpu, h, 0, cap, f)
    }

    /// Takes the items of a stopped (and fenced) stack above `keep` into `f`, hottest first, and
    /// reopens it with `cap` (items below `keep` stay in place). Returns how many were taken.
    pub(crate) fn take_stopped_above(
        &self,
        cpu: usize,
        h: &Header,
        keep: usize,
        cap: u32,
        mut f: impl FnMut(*mut u8),
    ) -> usize {
        // The slots: as in `peek_stopped`.
        let c = self.held_count(h);
        let keep = keep.min(c);
        for i in (keep..c).rev() {
            // SAFETY: i < count <= storage; the stack is stopped and fenced, so it is ours.
            f(unsafe { *self.slot(cpu, i) });
        }
        self.reopen_with(h, keep as u32, cap);
        c - keep
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

/// What the rseq fast path needs of a [`Pcpu`], by value: the zone copies it into every handle
/// (`Zone` is immutable plain data, so a loop of allocations keeps these in registers).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct RseqRef {
    base: *mut u8,
    rseq_off: isize,
}

impl Pcpu {
    /// The fast-path view; only meaningful in rseq mode ([`Pcpu::is_rseq`]).
    pub(crate) fn rseq_ref(&self) -> RseqRef {
        RseqRef {
            base: self.base,
            rseq_off: self.rseq_off,
        }
    }
}

impl RseqRef {
    /// The stacks' base as the word a chunk map entry carries for a `free` (see `arena.rs`,
    /// "The hint", and [`RseqRef::push_at`]).
    pub(crate) fn hint(&self) -> u64 {
        self.base as u64
    }

    /// The fast pop: one rseq critical section.
    ///
    /// # Safety
    /// Taken from a live [`Pcpu`] in rseq mode.
    #[inline(always)]
    pub(crate) unsafe fn pop(self) -> *mut u8 {
        debug_assert!(self.rseq_off != NO_RSEQ);
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        {
            // SAFETY: base is the Pcpu's mapping with 1 << STRIDE_SHIFT bytes for every possible
            // CPU (`Pcpu::new`); rseq_off came from glibc (caller: not the sentinel).
            unsafe { rseq::pop(self.base, self.rseq_off) }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom))))]
        unreachable!("rseq mode without rseq support compiled in")
    }

    /// The rseq offset of the in-place sections: `this`'s or the static's (see
    /// [`RseqRef::pop_in_place`]); the same value, since a zone in rseq mode exists only once
    /// `rseq::offset` returned it.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
    #[inline(always)]
    fn in_place_offset<const STATIC_OFF: bool>(&self) -> isize {
        debug_assert_eq!(rseq::fast_offset(), self.rseq_off);
        if STATIC_OFF {
            rseq::fast_offset()
        } else {
            self.rseq_off
        }
    }

    /// [`RseqRef::pop`] reading the base from `*this` inside the critical
    /// section (fewer registers: for the C entry points, which hold nothing across calls).
    ///
    /// The rseq offset comes from `this` (`STATIC_OFF` false) or from a static
    /// (`rseq::fast_offset`, `STATIC_OFF` true). The same value either way; what differs is
    /// what the CPU id's load waits for: a caller that has `this` early (the C API, the zone in
    /// a register) does best with `this`'s (one load), a caller that finds `this` through the
    /// pointer it frees (a malloc's `free`) with the static's, which does not wait for that
    /// chain (docs/benchmarks.md, "shorter chains").
    ///
    /// # Safety
    /// As [`RseqRef::pop`].
    #[inline(always)]
    pub(crate) unsafe fn pop_in_place<const STATIC_OFF: bool>(this: &RseqRef) -> *mut u8 {
        debug_assert!(this.rseq_off != NO_RSEQ);
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        {
            // SAFETY: as in `pop`; `this` is immutable for the call (a shared reference); the
            // offset is glibc's either way (`in_place_offset`).
            unsafe { rseq::pop_in(this, this.in_place_offset::<STATIC_OFF>()) }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom))))]
        unreachable!("rseq mode without rseq support compiled in")
    }

    /// [`RseqRef::push`] onto the stacks at `hint`, the [`RseqRef::hint`] of `this`'s
    /// stacks as the chunk map entry of the item's chunk carries it; the offset as in
    /// [`RseqRef::pop_in_place`]. For a `free` that reaches `this` through the pointer (chunk
    /// map, then a table indexed by the tag): the stack's address then waits for the entry's
    /// load only, not for the table's (docs/benchmarks.md, "The chunk's hint").
    ///
    /// # Safety
    /// As [`RseqRef::pop`], and `hint` is `this`'s stacks' hint.
    #[inline(always)]
    pub(crate) unsafe fn push_at<const STATIC_OFF: bool>(
        this: &RseqRef,
        hint: u64,
        item: *mut u8,
    ) -> Push {
        debug_assert!(this.rseq_off != NO_RSEQ);
        debug_assert_eq!(hint, this.base as u64);
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        {
            // SAFETY: as in `push`: `hint` is this Pcpu's base (caller), the offset glibc's
            // (`in_place_offset`).
            unsafe { rseq::push(hint as *mut u8, this.in_place_offset::<STATIC_OFF>(), item) }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom))))]
        {
            let _ = (hint, item);
            unreachable!("rseq mode without rseq support compiled in")
        }
    }

    /// [`RseqRef::push`] reading the base from `*this` inside the critical
    /// section; the offset as in [`RseqRef::pop_in_place`].
    ///
    /// # Safety
    /// As [`RseqRef::pop`].
    #[inline(always)]
    pub(crate) unsafe fn push_in_place<const STATIC_OFF: bool>(
        this: &RseqRef,
        item: *mut u8,
    ) -> Push {
        debug_assert!(this.rseq_off != NO_RSEQ);
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        {
            // SAFETY: as in `push_in_place`'s sibling `pop_in_place`.
            unsafe { rseq::push_in(this, this.in_place_offset::<STATIC_OFF>(), item) }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom))))]
        {
            let _ = item;
            unreachable!("rseq mode without rseq support compiled in")
        }
    }

    /// The fast push: one rseq critical section; false when full or stopped.
    ///
    /// # Safety
    /// As [`RseqRef::pop`].
    #[inline(always)]
    pub(crate) unsafe fn push(self, item: *mut u8) -> Push {
        debug_assert!(self.rseq_off != NO_RSEQ);
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        {
            // SAFETY: as in `pop`.
            unsafe { rseq::push(self.base, self.rseq_off, item) }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom))))]
        {
            let _ = item;
            unreachable!("rseq mode without rseq support compiled in")
        }
    }
}

/// Per-CPU stacks with nothing around them, for benchmarks: the fast path's own critical
/// sections ([`RseqRef::pop`], [`RseqRef::push`]) on stacks no zone owns, with no ownership check,
/// no `careful` test and no slow path. `ebbtide-bench` times it beside `Zone::alloc`/`Zone::free`
/// as the floor of the design; it is not an allocator (the items are whatever the caller gave).
#[doc(hidden)]
#[cfg(not(loom))]
pub struct BareStacks {
    pcpu: Pcpu,
    fast: RseqRef,
}

#[cfg(not(loom))]
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
        // SAFETY: as in `pop`.
        unsafe { self.fast.push(p) == Push::Done }
    }
}

#[cfg(not(loom))]
impl Drop for BareStacks {
    fn drop(&mut self) {
        // SAFETY: no more use (we are being dropped); the items belong to the caller.
        unsafe { self.pcpu.unmap() };
    }
}

// SAFETY: as for Pcpu: the stacks are only touched through the rseq sections.
#[cfg(not(loom))]
unsafe impl Sync for BareStacks {}
// SAFETY: as above.
#[cfg(not(loom))]
unsafe impl Send for BareStacks {}

/// After stopping stacks on `cpu`, waits until no critical section can still be running there
/// with the old header values. In locked mode the header locks already exclude everyone.
pub(crate) fn fence_cpu(cpu: usize) {
    FENCES.fetch_add(1, Ordering::Relaxed);
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
    if mode() == Mode::Rseq {
        let ok = rseq::fence_cpu(cpu);
        // Registration succeeded at start, so the command is available; the kernel only refuses
        // a CPU id it does not know, which cpu_count() rules out.
        assert!(
            ok,
            "membarrier(PRIVATE_EXPEDITED_RSEQ) failed for cpu {cpu}"
        );
    }
    let _ = cpu;
    // SeqCst fence: the drainer's side of the stop protocol (pairs with the stop store in
    // `stop` and, in locked mode, with the header lock's Release on unlock): loads after it see
    // every operation that committed before the CPU observed the stop.
    crate::sync::fence(Ordering::SeqCst);
}

static FENCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Remote fences (one `membarrier` per CPU in rseq mode) issued so far: every drain of another
/// CPU's stack costs one per CPU, shared by all zones drained in the same pass.
pub fn fences() -> u64 {
    FENCES.load(Ordering::Relaxed)
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
    // SAFETY: as for Send.
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
