//! The rseq critical sections, in assembly: the only code of the crate that runs inside a
//! restartable sequence. Few primitives — [`pop`], [`push`], their forms reading the stacks'
//! base from memory ([`pop_in`], [`push_in`]), and the batch moves of the slow path
//! ([`pop_batch`], [`push_batch`]) — all behind one prologue (`rseq_enter!`) and one epilogue
//! (`rseq_exit!`), as tcmalloc's `percpu_tcmalloc.h` keeps its sections. The protocol they
//! follow is the module docs of `pcpu` ("Fast path (rseq mode)", "Room, not cap", "The CPU id
//! test"); the typed entry to them is `RseqRef` (`rseq_ref.rs`).

use core::sync::atomic::{AtomicIsize, Ordering};
use std::sync::OnceLock;

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

static OFFSET: OnceLock<Option<isize>> = OnceLock::new();

/// `offset`'s value once it is `Some` (0 before), for `fast_offset`.
pub static OFF_FAST: AtomicIsize = AtomicIsize::new(0);

/// The rseq offset, for the in-place critical sections of a malloc's `free`
/// (`RseqRef::pop_in_place::<true>`), read from a static rather than from the zone's
/// constants: that `free` finds the zone through the pointer (chunk map, tag, the zone's
/// constants), and with the offset among those constants the CPU id's load waited for that
/// chain too, which the next allocation's header load then waited for (measured:
/// `docs/design/pcpu.md`, "The rseq offset in a static"). Valid once a zone in rseq
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

/// The one prologue of every critical section: arm the descriptor (label 2, re-armed on every
/// restart), read the CPU id (label 3, the section's start; negative: an unregistered thread,
/// out to 7), and locate this CPU's header in rax: `(cpu << STRIDE_SHIFT)` plus the stacks'
/// base, added by `$base` (from a register, `addq {base}, %rax`, or from memory,
/// `addq {base_at}({r}), %rax`: the only way two sections' prologues differ).
macro_rules! rseq_enter {
    ($base:expr) => {
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
            $base,
            "\n",
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
    // SAFETY: `base` maps a header of `1 << STRIDE_SHIFT` bytes, then its slots, for every CPU
    // id the kernel can report, and `off` is glibc's rseq offset (this function's contract):
    // the prologue's `%fs:off` accesses hit this thread's registered `struct rseq`, and a
    // non-negative id locates this CPU's header in rax. The kernel restarts the section from
    // label 2 if the thread is preempted, migrated or signalled before the commit store (the
    // abort handler follows glibc's x86 RSEQ_SIG; the descriptor is in __rseq_cs), so no other
    // thread's operation on this stack interleaves with it.
    // It loads `word` once (count 0: empty, closed or stopped, out with null), reads slot
    // count - 1 (count <= storage: inside the stack) and commits with one store of `word`.
    unsafe {
        core::arch::asm!(
            rseq_enter!("addq {base}, %rax"),
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
/// `base` maps a header and its slots for every CPU id, `off` is glibc's rseq
/// offset.
#[inline(always)]
pub(super) unsafe fn push(base: *mut u8, off: isize, item: *mut u8) -> super::Push {
    // SAFETY: `base` maps a header of `1 << STRIDE_SHIFT` bytes, then its slots, for every CPU
    // id the kernel can report, and `off` is glibc's rseq offset (this function's contract):
    // the prologue's `%fs:off` accesses hit this thread's registered `struct rseq`, and a
    // non-negative id locates this CPU's header in rax. The kernel restarts the section from
    // label 2 if the thread is preempted, migrated or signalled before the commit store (the
    // abort handler follows glibc's x86 RSEQ_SIG; the descriptor is in __rseq_cs), so no other
    // thread's operation on this stack interleaves with it.
    // The slot written is items[count] with room > 0, so count < count + room <= storage.
    // The slot read is items[count - 1], the header's always-zero `below_items` when count is
    // 0 (a stopped stack reads count 0 too). One commit store of `word`.
    // Success falls through; a full stack leaves through the `full` label (asm goto) from the
    // out-of-line exit, a duplicate of the top through `dup`, before any store.
    unsafe {
        core::arch::asm!(
            rseq_enter!("addq {base}, %rax"),
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

/// [`pop`] with the base read from `*r` inside the section.
///
/// # Safety
/// `r` points to a `RseqRef` whose fields satisfy [`pop`]'s requirements, immutable for
/// the call; `off` is its `rseq_off`.
#[inline(always)]
pub(super) unsafe fn pop_in(r: *const super::RseqRef, off: isize) -> *mut u8 {
    let out: usize;
    // SAFETY: `(*r).base` maps a header of `1 << STRIDE_SHIFT` bytes, then its slots, for every CPU
    // id the kernel can report, and `off` is glibc's rseq offset (this function's contract; `*r` is immutable for the call, so a restart re-reads the same base):
    // the prologue's `%fs:off` accesses hit this thread's registered `struct rseq`, and a
    // non-negative id locates this CPU's header in rax. The kernel restarts the section from
    // label 2 if the thread is preempted, migrated or signalled before the commit store (the
    // abort handler follows glibc's x86 RSEQ_SIG; the descriptor is in __rseq_cs), so no other
    // thread's operation on this stack interleaves with it.
    // Then `pop`'s body: one load of `word` (count 0: out with null), slot count - 1 (inside
    // the stack: count <= storage), one commit store.
    unsafe {
        core::arch::asm!(
            rseq_enter!("addq {base_at}({r}), %rax"),
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
/// `r` points to a `RseqRef` whose base maps a header and its slots for every CPU id,
/// immutable for the call; `off` is glibc's rseq offset.
#[inline(always)]
pub(super) unsafe fn push_in(r: *const super::RseqRef, off: isize, item: *mut u8) -> super::Push {
    // SAFETY: `(*r).base` maps a header of `1 << STRIDE_SHIFT` bytes, then its slots, for every CPU
    // id the kernel can report, and `off` is glibc's rseq offset (this function's contract; `*r` is immutable for the call, so a restart re-reads the same base):
    // the prologue's `%fs:off` accesses hit this thread's registered `struct rseq`, and a
    // non-negative id locates this CPU's header in rax. The kernel restarts the section from
    // label 2 if the thread is preempted, migrated or signalled before the commit store (the
    // abort handler follows glibc's x86 RSEQ_SIG; the descriptor is in __rseq_cs), so no other
    // thread's operation on this stack interleaves with it.
    // Then `push`'s body: slot items[count] written only with room > 0 (count < storage),
    // items[count - 1] read (`below_items` at count 0), one commit store.
    unsafe {
        core::arch::asm!(
            rseq_enter!("addq {base_at}({r}), %rax"),
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
/// `base` maps a header and its slots for every CPU id, `off` is glibc's rseq offset, and
/// `dst` has room for `max` pointers.
#[inline(never)]
pub(super) unsafe fn pop_batch(base: *mut u8, off: isize, dst: *mut *mut u8, max: usize) -> usize {
    let n: usize;
    // SAFETY: `base` maps a header of `1 << STRIDE_SHIFT` bytes, then its slots, for every CPU
    // id the kernel can report, and `off` is glibc's rseq offset (this function's contract):
    // the prologue's `%fs:off` accesses hit this thread's registered `struct rseq`, and a
    // non-negative id locates this CPU's header in rax. The kernel restarts the section from
    // label 2 if the thread is preempted, migrated or signalled before the commit store (the
    // abort handler follows glibc's x86 RSEQ_SIG; the descriptor is in __rseq_cs), so no other
    // thread's operation on this stack interleaves with it.
    // It copies n <= min(count, max) slots below `count` into `dst` (room for `max`: the
    // contract) and commits count - n and room + n with one store (the allocation counter
    // unchanged: a batch move is not an allocation).
    unsafe {
        core::arch::asm!(
            rseq_enter!("addq {base}, %rax"),
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
/// `base` maps a header and its slots for every CPU id, `off` is glibc's rseq offset, and
/// `src` holds `len` pointers.
#[inline(never)]
pub(super) unsafe fn push_batch(
    base: *mut u8,
    off: isize,
    src: *const *mut u8,
    len: usize,
) -> usize {
    let k: usize;
    // SAFETY: `base` maps a header of `1 << STRIDE_SHIFT` bytes, then its slots, for every CPU
    // id the kernel can report, and `off` is glibc's rseq offset (this function's contract):
    // the prologue's `%fs:off` accesses hit this thread's registered `struct rseq`, and a
    // non-negative id locates this CPU's header in rax. The kernel restarts the section from
    // label 2 if the thread is preempted, migrated or signalled before the commit store (the
    // abort handler follows glibc's x86 RSEQ_SIG; the descriptor is in __rseq_cs), so no other
    // thread's operation on this stack interleaves with it.
    // It reads k <= min(room, len) pointers from `src` (`len` of them: the contract), writes
    // them at items[count..count + k] (count + room <= storage) and commits count + k and
    // room - k with one store.
    unsafe {
        core::arch::asm!(
            rseq_enter!("addq {base}, %rax"),
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
