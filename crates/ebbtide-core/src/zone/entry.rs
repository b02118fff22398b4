//! The C entry points' view of a zone, as numbers.
//!
//! `libebbtide.so`'s `ebb_zone_alloc` and `ebb_zone_free` are naked functions written in
//! assembly (`ebbtide-capi`, `src/entry.rs`), and so are `libebbtide_malloc.so`'s `malloc` and
//! `free` (`ebbtide-malloc`, `src/entry.rs`, which read a [`FastConsts`] in the malloc's own
//! tables where these read the zone). The C API's: the handle's bit test, the owner and item tests
//! of [`Zone::free_fast_plain`](super::Zone::free_fast_plain) and the critical sections of
//! `pcpu.rs`, with nothing the compiler would add around them (a register copy to keep the push
//! on the zone's stacks' base, the test of a popped item for null that stands for the section's
//! failure exit, the shifts that unpack two fields loaded as one word): eight instructions
//! fewer per pair of calls, measured in docs/benchmarks.md ("The C entry points in assembly").
//!
//! What they read is given here, derived from the types with `offset_of!` and `size_of`, so a
//! change of layout changes the assembly's operands with it, and what the assembly assumes of
//! the layout beyond offsets is asserted at compile time below. The per-CPU protocol they follow
//! is `pcpu.rs`'s ("Room, not cap", "The CPU id test", the sections' shape above `rseq_enter!`),
//! the owner test is the chunk's hint (`arena.rs`, "The hint"), the item test
//! [`item_check`](super::fast)'s.

use super::fast::{Fast, FastConsts};
use super::ZoneInner;
use crate::arena::{self, MapEntry, CHUNK_SHIFT, CHUNK_SIZE};
use crate::pcpu::{self, Header};
use core::mem::{offset_of, size_of};

/// Offsets from a zone object's address (what [`Zone::into_raw`](super::Zone::into_raw)
/// returns) and the constants of the chunk map and the per-CPU stacks that the C entry points
/// in assembly use.
pub struct CEntry;

/// Offset of a [`Fast`] field within the zone object.
const fn fast_at(field: usize) -> usize {
    offset_of!(ZoneInner, fast) + field
}

impl CEntry {
    /// The per-CPU stacks' base (a pointer): CPU `c`'s header is at `base + (c << STRIDE_SHIFT)`.
    /// It is also the hint a chunk map entry carries for the owning zone (the owner test).
    pub const STACKS: usize = fast_at(offset_of!(Fast, pcpu) + pcpu::RSEQ_REF_BASE);
    /// glibc's `__rseq_offset` (an `isize`): the thread pointer plus it is this thread's `struct
    /// rseq`.
    pub const RSEQ_OFFSET: usize = fast_at(offset_of!(Fast, pcpu) + pcpu::RSEQ_REF_OFF);
    /// The arena's base (a `usize`), where its chunk map starts.
    pub const ARENA_BASE: usize = fast_at(offset_of!(Fast, arena_base));
    /// The arena's length in bytes (a `usize`).
    pub const ARENA_LEN: usize = fast_at(offset_of!(Fast, arena_len));
    /// The first slab's offset within a chunk (a `u32`, the low half of the packed range).
    pub const SLABS_FIRST: usize = fast_at(offset_of!(Fast, slab_range));
    /// The slabs' length within a chunk from the first (a `u32`, the high half).
    pub const SLABS_LEN: usize = Self::SLABS_FIRST + 4;
    /// `slab_size - 1` (a `u32`, the low half of `mask_bound`).
    pub const SLAB_MASK: usize = fast_at(offset_of!(Fast, mask_bound));
    /// The item test's bound (a `u32`, the high half; compared with a 64-bit product).
    pub const ITEM_BOUND: usize = Self::SLAB_MASK + 4;
    /// The item test's multiplier (a `u64`).
    pub const ITEM_MAGIC: usize = fast_at(offset_of!(Fast, item_magic));

    /// `(p - arena base) >> MAP_SHIFT`, masked with [`CEntry::MAP_MASK`], is the byte offset
    /// of `p`'s chunk map entry from the arena's base.
    pub const MAP_SHIFT: u32 = CHUNK_SHIFT as u32 - size_of::<MapEntry>().trailing_zeros();
    /// Clears the chunk offset's bits that survive [`CEntry::MAP_SHIFT`] (an `i32` immediate).
    pub const MAP_MASK: i32 = -(size_of::<MapEntry>() as i32);
    /// Offset of the hint within a chunk map entry.
    pub const MAP_HINT: usize = offset_of!(MapEntry, hint);
    /// Offset of the tag within a chunk map entry.
    pub const MAP_TAG: usize = offset_of!(MapEntry, tag);
    /// Offset of the start word (the chunk's first slab) within a chunk map entry.
    pub const MAP_START: usize = offset_of!(MapEntry, start);
    /// A chunk's offset bits (an `i32` immediate).
    pub const CHUNK_MASK: i32 = (CHUNK_SIZE - 1) as i32;

    /// log2 of the distance between two CPUs' headers.
    pub const STRIDE_SHIFT: u32 = pcpu::STRIDE_SHIFT;
    /// The header's `word` (count | room | allocations) is at offset 0 of the header.
    pub const WORD: usize = offset_of!(Header, word);
    /// `word`'s count field.
    pub const COUNT_MASK: u32 = pcpu::COUNT_MASK as u32;
    /// `word`'s room field.
    pub const ROOM_MASK: u32 = pcpu::ROOM_MASK as u32;
    /// What a push subtracts from `word`.
    pub const PUSH_SUB: u32 = pcpu::PUSH_SUB as u32;
    /// What a pop adds to `word`.
    pub const POP_ADD: u32 = pcpu::POP_ADD as u32;
    /// `header + TOP + 8 * count` is the top item's slot (the always-zero `below_items` when
    /// the count is 0).
    pub const TOP: usize = pcpu::HDR - 8;
    /// `header + SLOT + 8 * count` is the slot a push writes.
    pub const SLOT: usize = pcpu::HDR;

    /// The malloc's view: offsets within a [`FastConsts`] (the copy of a zone's constants a
    /// malloc keeps in its own tables) of the stacks' base, ...
    pub const CONSTS_STACKS: usize = offset_of!(FastConsts, pcpu) + pcpu::RSEQ_REF_BASE;
    /// ... of the slabs' length within a chunk (a `u64`), ...
    pub const CONSTS_SLABS_LEN: usize = offset_of!(FastConsts, slabs_len);
    /// ... of the item test's multiplier and bound (`u64`s), ...
    pub const CONSTS_ITEM_MAGIC: usize = offset_of!(FastConsts, item_magic);
    pub const CONSTS_ITEM_BOUND: usize = offset_of!(FastConsts, item_bound);
    /// ... and of `slab_size - 1` (a `u32`).
    pub const CONSTS_SLAB_MASK: usize = offset_of!(FastConsts, slab_mask);
    /// Offsets of the arena's base and length in [`ARENA_VIEW`](crate::ARENA_VIEW).
    pub const VIEW_BASE: usize = arena::VIEW_BASE;
    pub const VIEW_LEN: usize = arena::VIEW_LEN;

    /// Offset of `cpu_id` in glibc's (the kernel's) `struct rseq`.
    pub const RSEQ_CPU_ID: usize = 4;
    /// Offset of `rseq_cs` in `struct rseq`.
    pub const RSEQ_CS: usize = 8;
}

// What the assembly assumes beyond the offsets.
// The map index is one shift and one mask: entries a power of two, smaller than a chunk.
const _: () = assert!(size_of::<MapEntry>().is_power_of_two());
const _: () = assert!(size_of::<MapEntry>() < CHUNK_SIZE);
// The chunk offset fits an `and` with a sign-extended 32-bit immediate, and so does the mask.
const _: () = assert!(CHUNK_SIZE - 1 <= i32::MAX as usize);
// The packed halves are read as `u32`s at +0 and +4: little-endian.
const _: () = assert!(cfg!(target_endian = "little"));
// Every constant used as an immediate of a 32-bit instruction fits one.
const _: () = assert!(pcpu::COUNT_MASK <= u32::MAX as u64 && pcpu::ROOM_MASK < 1 << 31);
const _: () = assert!(pcpu::PUSH_SUB < 1 << 31 && pcpu::POP_ADD < 1 << 31);
// The word the sections load and commit is the header's first.
const _: () = assert!(offset_of!(Header, word) == 0);
// The fields the assembly reads as 32-bit halves are 64-bit words; the malloc's `u32` is one.
const _: () = assert!(offset_of!(Fast, slab_range) % 8 == 0);
const _: () = assert!(offset_of!(Fast, mask_bound) % 8 == 0);
const _: () = assert!(offset_of!(FastConsts, slab_mask) % 4 == 0);

/// `naked_asm!` for an entry point with the operands every one of them uses added after the
/// caller's templates and operands (which end with a comma): the constants the section macros
/// below name (`rseq_cs`, `cpu_id`, `shift`, `word`, `count_mask`) and the stack's `top` slot,
/// from [`CEntry`]; AT&T syntax.
#[doc(hidden)]
#[macro_export]
macro_rules! entry_naked_asm {
    ($($t:tt)*) => {
        ::core::arch::naked_asm!(
            $($t)*
            rseq_cs = const $crate::zone::CEntry::RSEQ_CS,
            cpu_id = const $crate::zone::CEntry::RSEQ_CPU_ID,
            shift = const $crate::zone::CEntry::STRIDE_SHIFT,
            word = const $crate::zone::CEntry::WORD,
            count_mask = const $crate::zone::CEntry::COUNT_MASK,
            top = const $crate::zone::CEntry::TOP,
            options(att_syntax),
        )
    };
}

/// The start of an entry point's critical section in assembly (`pcpu.rs`'s shape, in the
/// registers every entry point uses): arm the descriptor (label `2`, `rax` scratch), read the
/// CPU id (label `3`, the section's start; negative: unregistered, out to `7f`), find this
/// CPU's header in `rcx` from the stacks' base in `r8` and glibc's rseq offset in `r9`, load
/// its word once into `rdx` and its count into `r10`. The caller's template names the operands
/// `rseq_cs`, `cpu_id`, `shift`, `word` and `count_mask` ([`CEntry`]'s constants of the same
/// meaning), and goes on with its test of the count's flags.
#[doc(hidden)]
#[macro_export]
macro_rules! entry_section_head {
    () => {
        concat!(
            "2:\n",
            "leaq 9f(%rip), %rax\n",
            "movq %rax, %fs:{rseq_cs}(%r9)\n",
            "3:\n",
            "movl %fs:{cpu_id}(%r9), %ecx\n",
            "testl %ecx, %ecx\n",
            "js 7f\n",
            "shlq ${shift}, %rcx\n",
            "addq %r8, %rcx\n",
            "movq {word}(%rcx), %rdx\n",
            "movl %edx, %r10d\n",
            "andl ${count_mask}, %r10d\n",
        )
    };
}

/// The end of an entry point's critical section, right after its commit store: `pcpu.rs`'s
/// `rseq_exit!` (the post-commit label `4`, then out of line in section `__rseq_failure` the
/// abort handler after glibc's signature, which restarts from the arming, the failure exit at
/// label `7` — `$fail`: the caller's way to its slow path, the arguments as the slow path wants
/// them — and the descriptor, label `9`, section `__rseq_cs`), then the return, which lands
/// right after label `4` (the out-of-line parts are other sections).
#[doc(hidden)]
#[macro_export]
macro_rules! entry_section_tail {
    ($fail:expr) => {
        concat!($crate::rseq_exit!($fail), "ret\n")
    };
}
