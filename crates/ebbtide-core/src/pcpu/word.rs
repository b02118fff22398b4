//! The header word and the per-CPU memory layout: the constants the critical sections use as
//! immediates, the `word` fields (count | room | fast allocations) and their pure accessors, and
//! the two per-CPU lines ([`Header`], [`Demand`]). Layout and protocol: the module docs of
//! `pcpu` ("Layout", "Room, not cap").

use crate::sync::{AtomicU32, AtomicU64};

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
/// header stays at its colour's offset of its page (see [`OBJECT_SLOT`](super::OBJECT_SLOT)).
pub(crate) const STRIDE_SHIFT: u32 = 13;
/// Item slots per CPU stack: what fits in the stride after the header and before the next
/// CPU's demand line (1008).
pub(crate) const STORAGE_MAX: u32 = (((1usize << STRIDE_SHIFT) - HDR - DEMAND) / 8) as u32;
/// Bytes of a [`Demand`] line, just before its CPU's header.
pub(super) const DEMAND: usize = 64;
/// `word`'s count field: items on the stack (at most [`STORAGE_MAX`]).
pub(crate) const COUNT_MASK: u64 = (1 << ROOM_SHIFT) - 1;
/// Where `word`'s room field starts: free slots below the cap.
pub(super) const ROOM_SHIFT: u32 = 10;
pub(super) const ROOM_ONE: u64 = 1 << ROOM_SHIFT;
pub(crate) const ROOM_MASK: u64 = COUNT_MASK << ROOM_SHIFT;
/// Where `word`'s allocation counter starts: the fast allocations, modulo 2^[`ALLOC_BITS`].
pub(super) const ALLOC_SHIFT: u32 = 2 * ROOM_SHIFT;
pub(super) const ALLOC_ONE: u64 = 1 << ALLOC_SHIFT;
/// Width of `word`'s allocation counter.
pub(super) const ALLOC_BITS: u32 = 64 - ALLOC_SHIFT;
/// What a push subtracts from `word`: one slot from the room, one item onto the count.
pub(crate) const PUSH_SUB: u64 = ROOM_ONE - 1;
/// What a pop adds to `word`: one item off the count, one slot back to the room, one fast
/// allocation counted.
pub(crate) const POP_ADD: u64 = ROOM_ONE + ALLOC_ONE - 1;
/// `count` and `room`: both 0 in a stopped stack (and in a closed empty one).
pub(super) const STOP_MASK: u64 = COUNT_MASK | ROOM_MASK;
/// `held`'s flag: the stack is stopped (the low bits: the count the stop took).
pub(super) const HELD_STOPPED: u32 = 1 << 31;
const _: () = assert!(STORAGE_MAX as u64 <= COUNT_MASK);
// The sections' immediates are 32-bit: the room test's mask and the pop's addend fit.
const _: () = assert!(ROOM_MASK < 1 << 31 && ROOM_ONE + ALLOC_ONE - 1 < 1 << 31);

/// A word's count.
#[inline]
pub(super) fn count_of(w: u64) -> u32 {
    (w & COUNT_MASK) as u32
}

/// A word's room.
#[inline]
pub(super) fn room_of(w: u64) -> u32 {
    ((w & ROOM_MASK) >> ROOM_SHIFT) as u32
}

/// `w` with `count` items and the room of `cap` (0 when the count is at or above it).
#[inline]
pub(super) fn with_count_and_cap(w: u64, count: u32, cap: u32) -> u64 {
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
    pub(super) held: AtomicU32,
    pub(crate) lock: AtomicU32,
    /// The `word` seen by the last periodic pass (idle detection; written by the reclaim code).
    pub(crate) idle_mark: AtomicU64,
    /// Fast allocations at the last fold ([`Pcpu::fold_allocs`](super::Pcpu::fold_allocs)).
    pub(super) allocs_seen: AtomicU64,
    pub(super) _pad: [u64; 2],
    /// Always 0, never written: the slot "below" item 0, which the push section's duplicate
    /// check (`items[count - 1] == item`) reads when the stack is empty, so the check needs no
    /// branch on `count > 0`. Zero is never an item.
    pub(super) below_items: u64,
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
