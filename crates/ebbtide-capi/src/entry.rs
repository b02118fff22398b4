//! `ebb_zone_alloc` and `ebb_zone_free`: the C API's fast paths.
//!
//! On x86-64 Linux they are naked functions in assembly; everything beyond this CPU's stack
//! (a careful or NULL zone, an empty or full stack, a pointer that fails a test, the duplicate
//! of the stack's top) leaves by a tail jump to `zone_alloc_guarded` / `zone_free_guarded`
//! with the arguments untouched, and those do the whole operation under the unwind guard,
//! checking the pointer again and reporting what was wrong.
//!
//! Why assembly: compiled from Rust ([`Zone::alloc_fast_plain`], [`Zone::free_fast_plain`],
//! which other targets still use) the two functions carry instructions the compiler cannot
//! leave out: `alloc` tests the popped item for null, which stands for the section's failure
//! exit because an `asm!` with outputs cannot jump to a label, and copies it into the return
//! register; `free` copies the stacks' base to compare it with the chunk's hint (the `opaque`
//! that keeps the push on the base loaded from the zone), and loads the packed slab range and
//! item bound as 64-bit words, then shifts their halves apart. Here the section's failure exit
//! is the tail jump itself, the hint is compared in memory, and the halves are 32-bit memory
//! operands: 19 instructions for `alloc` (22 before) and 41 for `free` (46), `ret` included. Measured in
//! docs/benchmarks.md, "The C entry points in assembly".
//!
//! What they read of a zone, a chunk map entry and a stack is [`CEntry`] (offsets derived from
//! the core's types, checked there at compile time). The protocol is `pcpu.rs`'s, section for
//! section the same as `Pcpu::pop` and `Pcpu::push` (module docs of `ebbtide_core::pcpu`):
//! arm the descriptor, read the CPU id (negative: unregistered, out), find this CPU's header,
//! load its word once, test it, commit with one store of it; the abort handler, preceded by
//! glibc's `RSEQ_SIG`, restarts from the arming. The owner and item tests are those of
//! `Zone::free_fast_plain` (the chunk's hint against the zone's stacks' base, then the slab
//! range and `item_check`'s multiply), in the same order.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use asm::{ebb_zone_alloc, ebb_zone_free};
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub use portable::{ebb_zone_alloc, ebb_zone_free};

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod asm {
    use crate::{zone_alloc_guarded, zone_free_guarded, EbbZone, FAST};
    use core::ffi::c_void;
    use ebbtide_rt::zone::CEntry;

    // Both sections are `ebbtide_core`'s `entry_section_head!` and `entry_section_tail!`
    // (`pcpu.rs`'s shape; registers: r8 the stacks' base, r9 glibc's rseq offset, both loaded
    // from the zone before the section, rcx this CPU's header, rdx its word, r10 the count).
    use ebbtide_rt::{
        entry_naked_asm as naked_asm, entry_section_head as section_head,
        entry_section_tail as section_tail,
    };

    /// Allocates one item. NULL with errno: ENOMEM (no memory, or the zone's limit reached in
    /// `EBB_LIMIT_FAIL` mode), ECANCELED (an init or ctor hook refused the item), EINVAL (NULL
    /// zone), EIO (internal error).
    ///
    /// The fast path (module docs): a handle with its bit set is a live zone in rseq mode
    /// that is not careful; pop this CPU's stack in one critical section.
    ///
    /// # Safety
    /// `zone` is NULL or a live handle.
    #[no_mangle]
    #[unsafe(naked)]
    pub unsafe extern "C" fn ebb_zone_alloc(zone: *mut EbbZone) -> *mut c_void {
        // rdi: the handle (kept for the tail jump); rax: the item.
        //
        // SAFETY (what the assembly relies on): 1. a handle with bit 0 set is a live zone that
        // is not careful (the caller's contract; `create` sets the bit only then), so the
        // fields at `CEntry`'s displacements are initialised and fixed for the zone's life,
        // and its per-CPU layer is in rseq mode: %fs plus glibc's offset is this thread's
        // registered `struct rseq`, and `base + (cpu << STRIDE_SHIFT)` is a mapped header for
        // every non-negative CPU id (`pcpu.rs`, "The CPU id test"). 2. The section is
        // `Pcpu::pop`'s: one load of the word, the slot below the count (count <= storage, so
        // inside the stack), one commit store; the kernel restarts it from the arming on
        // preemption, migration or a signal, before the commit. 3. Every other outcome jumps
        // to the slow path before any store, with rdi as it came and no stack frame.
        naked_asm!(
            "testb ${fast}, %dil",
            "jz {slow}",
            "movq {stacks}(%rdi), %r8",
            "movq {rseq_off}(%rdi), %r9",
            section_head!(),
            // Empty (or stopped, or closed): out.
            "jz 7f",
            "movq {top}(%rcx,%r10,8), %rax",
            "addq ${pop_add}, %rdx",
            "movq %rdx, {word}(%rcx)",
            section_tail!("jmp {slow}\n"),
            fast = const FAST,
            slow = sym zone_alloc_guarded,
            stacks = const CEntry::STACKS as isize - FAST as isize,
            rseq_off = const CEntry::RSEQ_OFFSET as isize - FAST as isize,
            pop_add = const CEntry::POP_ADD,
        )
    }

    /// Frees an item. `item` NULL does nothing. An invalid free (not an item of this zone, not
    /// at an item's start, a double free caught in checked mode) is printed on stderr, counted
    /// and not applied; errno is set to EINVAL.
    ///
    /// The fast path (module docs): for a handle with its bit set, `item` inside the arena, its
    /// chunk's hint the zone's stacks' base (the owner), inside the chunk's slabs and at an
    /// item's start (the item test), and not the top of this CPU's stack (an immediate double
    /// free), push it in one critical section. It reads the pointer's chunk map entry, never the
    /// item's memory; NULL lies below the arena.
    ///
    /// # Safety
    /// `zone` is NULL or a live handle; if `item` is an item of `zone`, the caller owns it.
    #[no_mangle]
    #[unsafe(naked)]
    pub unsafe extern "C" fn ebb_zone_free(zone: *mut EbbZone, item: *mut c_void) {
        // rdi: the handle, rsi: the item (both kept for the tail jump); rax and rcx: the tests'
        // scratch before the section.
        //
        // SAFETY (what the assembly relies on): 1. as in `ebb_zone_alloc`, a handle with bit 0
        // set is a live zone, not careful, in rseq mode. 2. The map entry read is inside the
        // arena's map: `item - base < len` bounds the chunk index by the arena's chunks, and
        // the map has an entry for each (`arena.rs`); the item's own memory is never read, so
        // any pointer may be passed. 3. Only an item start of a chunk of this zone's keg passes:
        // the hint equals the zone's stacks' base only in its own chunks (`Zone::
        // free_fast_plain`, "The owner test by the stacks' address"), the range and
        // `item_check`'s multiply are exact (`item_check_is_exact`). 4. The section is
        // `Pcpu::push`'s: the slot written is `items[count]` with room > 0, so count < cap <=
        // storage; the top compared is `items[count - 1]` or the always-zero `below_items`.
        // 5. Every other outcome jumps to the slow path before any store, rdi and rsi as they
        // came, no stack frame.
        naked_asm!(
            "testb ${fast}, %dil",
            "jz {slow}",
            // In the arena: `item - base < len` (NULL wraps above).
            "movq {arena_base}(%rdi), %rax",
            "movq %rsi, %rcx",
            "subq %rax, %rcx",
            "cmpq {arena_len}(%rdi), %rcx",
            "jae {slow}",
            // The owner: the chunk's map entry's hint is this zone's stacks' base.
            "shrq ${map_shift}, %rcx",
            "andq ${map_mask}, %rcx",
            "movq {stacks}(%rdi), %r8",
            "cmpq %r8, {hint}(%rax,%rcx)",
            "jne {slow}",
            // Inside the chunk's slabs: `offset - first < len` in 32 bits (below the first it
            // wraps above).
            "movl %esi, %eax",
            "andl ${chunk_mask}, %eax",
            "subl {slabs_first}(%rdi), %eax",
            "cmpl {slabs_len}(%rdi), %eax",
            "jae {slow}",
            // At an item's start: `(offset & slab mask) * magic < bound` (`item_check`).
            "andl {slab_mask}(%rdi), %eax",
            "imulq {magic}(%rdi), %rax",
            "movl {bound}(%rdi), %ecx",
            "cmpq %rcx, %rax",
            "jae {slow}",
            "movq {rseq_off}(%rdi), %r9",
            section_head!(),
            // The stack's top (an immediate double free) or no room (full, stopped): out.
            "cmpq %rsi, {top}(%rcx,%r10,8)",
            "je 7f",
            "testl ${room_mask}, %edx",
            "jz 7f",
            "movq %rsi, {slot}(%rcx,%r10,8)",
            "subq ${push_sub}, %rdx",
            "movq %rdx, {word}(%rcx)",
            section_tail!("jmp {slow}\n"),
            fast = const FAST,
            slow = sym zone_free_guarded,
            arena_base = const CEntry::ARENA_BASE as isize - FAST as isize,
            arena_len = const CEntry::ARENA_LEN as isize - FAST as isize,
            map_shift = const CEntry::MAP_SHIFT,
            map_mask = const CEntry::MAP_MASK,
            stacks = const CEntry::STACKS as isize - FAST as isize,
            hint = const CEntry::MAP_HINT,
            chunk_mask = const CEntry::CHUNK_MASK,
            slabs_first = const CEntry::SLABS_FIRST as isize - FAST as isize,
            slabs_len = const CEntry::SLABS_LEN as isize - FAST as isize,
            slab_mask = const CEntry::SLAB_MASK as isize - FAST as isize,
            magic = const CEntry::ITEM_MAGIC as isize - FAST as isize,
            bound = const CEntry::ITEM_BOUND as isize - FAST as isize,
            rseq_off = const CEntry::RSEQ_OFFSET as isize - FAST as isize,
            room_mask = const CEntry::ROOM_MASK,
            slot = const CEntry::SLOT,
            push_sub = const CEntry::PUSH_SUB,
        )
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod portable {
    use crate::{fast_handle, zone_alloc_guarded, zone_free_guarded, EbbZone, FAST};
    use core::ffi::c_void;
    use ebbtide_rt::Zone;

    /// The zone object of a handle whose bit 0 is set ([`fast_handle`]): minus one, which the
    /// compiler folds into the displacements of the fields' loads.
    #[inline(always)]
    fn fast_zone_ptr(h: *const EbbZone) -> *mut c_void {
        (h as usize).wrapping_sub(FAST) as *mut c_void
    }

    /// Allocates one item. NULL with errno: ENOMEM (no memory, or the zone's limit reached in
    /// `EBB_LIMIT_FAIL` mode), ECANCELED (an init or ctor hook refused the item), EINVAL (NULL
    /// zone), EIO (internal error).
    ///
    /// # Safety
    /// `zone` is NULL or a live handle.
    #[no_mangle]
    pub unsafe extern "C" fn ebb_zone_alloc(zone: *mut EbbZone) -> *mut c_void {
        if fast_handle(zone) {
            // SAFETY: caller's guarantee (a live zone), not careful (the handle's bit). The
            // fast path cannot panic, so it runs outside the unwind guard.
            let p = unsafe { Zone::alloc_fast_plain(fast_zone_ptr(zone)) };
            if !p.is_null() {
                return p.cast();
            }
        }
        // SAFETY: forwarded.
        unsafe { zone_alloc_guarded(zone) }
    }

    /// Frees an item. `item` NULL does nothing. An invalid free (not an item of this zone, not
    /// at an item's start, a double free caught in checked mode) is printed on stderr, counted
    /// and not applied; errno is set to EINVAL.
    ///
    /// # Safety
    /// `zone` is NULL or a live handle; if `item` is an item of `zone`, the caller owns it.
    #[no_mangle]
    pub unsafe extern "C" fn ebb_zone_free(zone: *mut EbbZone, item: *mut c_void) {
        // SAFETY: caller's guarantee (a live zone, ownership of the item), not careful (the
        // handle's bit); the fast path checks the pointer without touching it (NULL fails its
        // item test) and cannot panic.
        if fast_handle(zone) && unsafe { Zone::free_fast_plain(fast_zone_ptr(zone), item.cast()) } {
            return;
        }
        // SAFETY: forwarded.
        unsafe { zone_free_guarded(zone, item) }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::tests::INVALID_FREES_TESTS;
    use crate::{
        ebb_invalid_frees, ebb_zone_alloc, ebb_zone_create, ebb_zone_destroy, ebb_zone_free,
        fast_handle, EbbZone,
    };
    use core::ffi::c_void;
    use core::sync::atomic::{AtomicU64, Ordering};

    thread_local! {
        /// This thread's calls of the slow paths (`zone_alloc_guarded`, `zone_free_guarded`):
        /// how a test sees whether the entry points' fast paths took a call.
        ///
        /// Atomics, though each is this thread's: the optimiser does not see the assembly's
        /// jumps to the slow paths that count, and it keeps no atomic's value across a call.
        static SLOW: [AtomicU64; 2] = const { [AtomicU64::new(0), AtomicU64::new(0)] };
    }

    pub(crate) fn count_slow_alloc() {
        SLOW.with(|c| c[0].fetch_add(1, Ordering::Relaxed));
    }

    pub(crate) fn count_slow_free() {
        SLOW.with(|c| c[1].fetch_add(1, Ordering::Relaxed));
    }

    fn slow() -> (u64, u64) {
        SLOW.with(|c| (c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed)))
    }

    /// Every live item is taken by the fast paths of both entry points (its free pushes it
    /// without the slow path, the next allocation pops it back); every pointer that is not an
    /// item start of the zone — inside an item, in the chunk's metadata below its first slab,
    /// another zone's item, outside the arena — is refused by the fast path, then reported as
    /// an invalid free by the slow path and not applied. Item sizes with and without a power of
    /// two, a slab tail and several items per cache line.
    #[test]
    fn the_fast_paths_take_every_item_and_refuse_everything_else() {
        let _serial = INVALID_FREES_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // The test thread is the harness's for this test only: pinned until it ends.
        ebbtide_core::os::pin_to_current_cpu();
        // SAFETY: a valid name; the zone is destroyed at the end.
        let other = unsafe { ebb_zone_create(c"entry-other".as_ptr(), 64, 0, 0) };
        assert!(!other.is_null());
        // SAFETY: a live zone.
        let foreign = unsafe { ebb_zone_alloc(other) };
        assert!(!foreign.is_null());
        let outside = Box::new(0u64);
        for size in [8usize, 24, 48, 64, 96, 256, 1000, 4096, 5000] {
            let name = std::ffi::CString::new(format!("entry-{size}")).unwrap();
            // SAFETY: a valid name; the zone is used by this thread only and destroyed below.
            let z = unsafe { ebb_zone_create(name.as_ptr(), size, 0, 0) };
            assert!(!z.is_null());
            if !fast_handle(z) {
                eprintln!("entry: rseq unavailable, zones take the slow paths; skipped");
                // SAFETY: a live zone with no items out.
                unsafe { ebb_zone_destroy(z) };
                break;
            }
            // SAFETY: a live zone; every item allocated here is freed once below.
            let live: Vec<*mut c_void> = (0..32).map(|_| unsafe { ebb_zone_alloc(z) }).collect();
            assert!(live.iter().all(|p| !p.is_null()));
            for &p in &live {
                let before = slow();
                // SAFETY: `p` is a live item of `z`, owned here; popped back at once.
                let q = unsafe {
                    ebb_zone_free(z, p);
                    ebb_zone_alloc(z)
                };
                assert_eq!(slow(), before, "size {size}: item {p:p} took a slow path");
                assert_eq!(
                    q, p,
                    "size {size}: the free pushed {p:p}, the pop gave {q:p}"
                );
            }
            let mut bad: Vec<*mut c_void> = Vec::new();
            for &p in &live[..4] {
                let a = p as usize;
                let inside = (1..size.min(64)).chain([size / 2, size - 8, size - 1]);
                for d in inside.filter(|d| (1..size).contains(d)) {
                    bad.push((a + d) as *mut c_void);
                }
                let o = ebbtide_core::owner_entry(a);
                let chunk = a & !(ebbtide_core::zone::CEntry::CHUNK_MASK as usize);
                assert!(o.start as usize >= chunk && o.start as usize <= a);
                for k in [0, 8, 64, 4096] {
                    if chunk + k < o.start as usize {
                        bad.push((chunk + k) as *mut c_void);
                    }
                }
            }
            bad.push(foreign);
            bad.push(&*outside as *const u64 as *mut c_void);
            bad.push(8 as *mut c_void);
            for &b in &bad {
                let (before, invalid) = (slow(), ebb_invalid_frees());
                // SAFETY: `b` is not an item of `z`: the free is refused, nothing is touched.
                unsafe { ebb_zone_free(z, b) };
                assert_eq!(
                    slow().1,
                    before.1 + 1,
                    "size {size}: {b:p} passed the fast path"
                );
                assert_eq!(
                    ebb_invalid_frees(),
                    invalid + 1,
                    "size {size}: {b:p} not reported"
                );
            }
            // Nothing refused was applied: the live items are still the zone's, and free.
            for &p in &live {
                // SAFETY: live items of `z`, each freed once.
                unsafe { ebb_zone_free(z, p) };
            }
            // SAFETY: every item is back.
            assert_eq!(unsafe { ebb_zone_destroy(z) }, 0, "size {size}");
        }
        // SAFETY: the foreign item is still `other`'s (its refused free changed nothing).
        unsafe {
            ebb_zone_free(other, foreign);
            assert_eq!(ebb_zone_destroy(other), 0);
        }
    }

    /// The allocation's fast path leaves for the slow path, arguments intact, where the stack
    /// is empty, and the free's where the popped item is freed twice in a row (the stack's top).
    #[test]
    fn the_fast_paths_leave_for_the_slow_paths_with_their_arguments() {
        let _serial = INVALID_FREES_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // The test thread is the harness's for this test only: pinned until it ends.
        ebbtide_core::os::pin_to_current_cpu();
        // SAFETY: a valid name; the zone is used by this thread only and destroyed below.
        let z: *mut EbbZone = unsafe { ebb_zone_create(c"entry-leave".as_ptr(), 128, 0, 0) };
        assert!(!z.is_null());
        if !fast_handle(z) {
            eprintln!("entry: rseq unavailable, zones take the slow paths; skipped");
            // SAFETY: a live zone with no items out.
            unsafe { ebb_zone_destroy(z) };
            return;
        }
        // The first allocation finds an empty stack: the slow path fills it and returns an item.
        let before = slow();
        // SAFETY: a live zone.
        let p = unsafe { ebb_zone_alloc(z) };
        assert!(!p.is_null());
        assert_eq!(
            slow().0,
            before.0 + 1,
            "a fresh zone's first allocation is slow"
        );
        // An immediate double free: the fast path sees the stack's top and leaves; the slow
        // path reports it and does not apply it.
        let invalid = ebb_invalid_frees();
        // SAFETY: `p` is owned here; its second free is refused.
        unsafe {
            ebb_zone_free(z, p);
            ebb_zone_free(z, p);
        }
        assert_eq!(
            ebb_invalid_frees(),
            invalid + 1,
            "the double free is reported"
        );
        // SAFETY: `p` is on the stack once: allocated again, freed again.
        unsafe {
            let q = ebb_zone_alloc(z);
            assert_eq!(q, p);
            ebb_zone_free(z, q);
            assert_eq!(ebb_zone_destroy(z), 0);
        }
    }
}
