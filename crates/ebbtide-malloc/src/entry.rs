//! `malloc` and `free`: the fast paths every program calls.
//!
//! On x86-64 Linux they are naked functions in assembly, as the C API's `ebb_zone_alloc` and
//! `ebb_zone_free` are (`crates/ebbtide-capi/src/entry.rs`), with the same critical sections
//! (`ebbtide_core::entry_section_head!`, `entry_section_tail!`); elsewhere they are the Rust
//! [`heap::alloc`] and [`heap::free`]. They do what those do on their fast paths, in the same
//! order, and leave for the same slow paths with the same arguments:
//!
//! - `malloc(n)`, `n` within the size table (1 KiB): the class from the table, the class's
//!   entry in `CLASS_FAST`, unpublished → `alloc_class_slow(c)`; pop this CPU's stack of the
//!   class's zone, empty → `alloc_class_slow(c)`. Larger `n` → `alloc_beyond_table(n)` (the
//!   class by the formula and the same steps in Rust, or a large block).
//! - `free(p)`: outside the arena → `free_tagged(p, 0)`; the chunk map entry's tag, no entry of
//!   `TAG_FAST` for it (not a tag of a class zone, a free chunk's odd word, nobody's 0) →
//!   `free_tagged(p, tag)`; the range and item tests by the entry's start word
//!   (`FastConsts::free_fast_owned`) and the push onto the stacks the entry's hint names,
//!   refused (not an item, full or closed, an immediate double free) →
//!   `free_again_tag(tag / 2, p)`.
//!
//! Why assembly: what the compiler could not leave out of the Rust paths — in `malloc` a
//! compare with the larger size limit before the table's, the popped item's test for null
//! (the section's failure exit, an `asm!` with outputs cannot jump) and a register copy, two
//! additions for the entry's address; in `free` a copy of the pointer, the address of the
//! arena's view formed before its two loads, and a taken jump where the arena's path and the
//! outside path met. 28 instructions to `ret` for `malloc` against 35, 47 for `free` against
//! 53 (`objdump -d`); measured in docs/benchmarks.md, "The malloc's entry points in assembly".
//! What they read of the tables, a chunk map entry and a stack is `ebbtide_core::zone::CEntry`
//! and this crate's `heap::SLOT_*`.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub use asm::{free, malloc};
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub use portable::{free, malloc};

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod asm {
    use crate::classes::{SMALL, TABLE_MAX};
    use crate::heap::{
        alloc_beyond_table, alloc_class_slow, free_again_tag, free_tagged, FastSlot, CLASS_FAST,
        SLOT_CONSTS, SLOT_KEY, SLOT_SHIFT, TAGS, TAG_FAST,
    };
    use core::ffi::c_void;
    use ebbtide_core::zone::CEntry;
    use ebbtide_core::{
        entry_naked_asm as naked_asm, entry_section_head as section_head,
        entry_section_tail as section_tail,
    };

    /// `malloc(3)`.
    ///
    /// # Safety
    /// None beyond C's: the result is a fresh block or NULL.
    #[no_mangle]
    #[unsafe(naked)]
    pub unsafe extern "C" fn malloc(n: usize) -> *mut c_void {
        // rdi: the size, then the class (kept for the tail jump); rax, rcx: the entry's
        // offset and the table; then the section's registers (r8 the stacks' base, r9 glibc's
        // rseq offset, rcx the header, rdx its word, r10 the count) and rax the item.
        //
        // SAFETY (what the assembly relies on): 1. `SMALL` has an entry for every `(n + 7) >> 3`
        // with `n <= TABLE_MAX`, each a class below `NCLASSES` (`classes.rs`,
        // `table_and_formula_agree_and_fit`), so the entry read is inside `CLASS_FAST`. 2. An
        // entry's constants are read only after its key was seen published (x86 loads are
        // acquire loads; `FastSlot::publish` writes the constants, then the key with Release),
        // and a published zone is never destroyed: its stacks stay mapped. 3. `OFF_FAST` holds
        // glibc's rseq offset once a zone in rseq mode exists, which a published entry implies
        // (only zones in rseq mode have constants). 4. The section is `Pcpu::pop`'s (as in
        // `ebb_zone_alloc`); every other outcome jumps to a slow path before any store, with
        // no stack frame.
        naked_asm!(
            "cmpq ${table_max}, %rdi",
            "ja {beyond}",
            // The class: SMALL[(n + 7) / 8].
            "addq $7, %rdi",
            "shrq $3, %rdi",
            "leaq {small}(%rip), %rax",
            "movzbl (%rax,%rdi), %edi",
            // The class's entry: unpublished, out.
            "movq %rdi, %rax",
            "shlq ${slot_shift}, %rax",
            "leaq {class_fast}(%rip), %rcx",
            "cmpq ${empty}, {key}(%rcx,%rax)",
            "je {slow}",
            "movq {stacks}(%rcx,%rax), %r8",
            "movq {off_fast}(%rip), %r9",
            section_head!(),
            // Empty (or stopped, or closed): out.
            "jz 7f",
            "movq {top}(%rcx,%r10,8), %rax",
            "addq ${pop_add}, %rdx",
            "movq %rdx, {word}(%rcx)",
            section_tail!("jmp {slow}\n"),
            table_max = const TABLE_MAX,
            beyond = sym alloc_beyond_table,
            small = sym SMALL,
            slot_shift = const SLOT_SHIFT,
            class_fast = sym CLASS_FAST,
            empty = const FastSlot::EMPTY as i64,
            key = const SLOT_KEY,
            slow = sym alloc_class_slow,
            stacks = const SLOT_CONSTS + CEntry::CONSTS_STACKS,
            off_fast = sym ebbtide_core::pcpu::OFF_FAST,
            pop_add = const CEntry::POP_ADD,
        )
    }

    /// `free(3)`.
    ///
    /// # Safety
    /// `p` is NULL or a live block of this allocator, not used afterwards (anything else is
    /// reported and not applied).
    #[no_mangle]
    #[unsafe(naked)]
    pub unsafe extern "C" fn free(p: *mut c_void) {
        // rdi: the pointer, rsi: the chunk's tag (both kept for the tail jumps); rax: the map
        // entry; rcx: the tag's table entry; then the section's registers, as in `malloc`.
        //
        // SAFETY (what the assembly relies on): 1. The arena's view is (0, 0) until the arena
        // exists, then its base and length (the base stored first, the length with Release;
        // the length is loaded first here and x86 keeps both pairs in order, so a length seen
        // non-zero comes with its base); an address outside gives no map read.
        // 2. Inside, the entry read is the map's entry of the address's chunk (`arena.rs`), and
        // `tag < 2 * TAGS` bounds the table entry read to `TAG_FAST`. 3. As in `malloc`, the
        // constants are read after their key; the key is the tag itself, so the zone they
        // describe owns the chunk, and its hint and start word came with the tag (written
        // before it with Release, `Arena::alloc_chunk`). 4. The range and item tests are
        // `FastConsts::free_fast_owned`'s (exact: `item_check_is_exact`); the pointer's memory
        // is never read. 5. The section is `Pcpu::push`'s onto the stacks the hint names (as
        // in `ebb_zone_free`); every other outcome jumps to a slow path before any store, with
        // no stack frame.
        naked_asm!(
            // In the arena: `p - base < len` (NULL and every address outside wrap above). The
            // length first: it is stored after the base (Release), so a length seen comes with
            // its base (`owner_entry_raw`'s Acquire; x86 keeps two loads in order).
            "movq {view}+{view_len}(%rip), %rdx",
            "movq {view}+{view_base}(%rip), %rax",
            "movq %rdi, %rcx",
            "subq %rax, %rcx",
            "cmpq %rdx, %rcx",
            "jae 8f",
            // The chunk's map entry, its tag.
            "shrq ${map_shift}, %rcx",
            "andq ${map_mask}, %rcx",
            "addq %rcx, %rax",
            "movq {map_tag}(%rax), %rsi",
            // The tag's entry in TAG_FAST, published with the tag as its key.
            "cmpq ${tags2}, %rsi",
            "jae {tagged}",
            "movq %rsi, %rdx",
            "shrq $1, %rdx",
            "shlq ${slot_shift}, %rdx",
            "leaq {tag_fast}(%rip), %rcx",
            "addq %rdx, %rcx",
            "cmpq %rsi, {key}(%rcx)",
            "jne {tagged}",
            // Inside the chunk's slabs and at an item's start, by the start word.
            "movq %rdi, %rdx",
            "subq {map_start}(%rax), %rdx",
            "cmpq {slabs_len}(%rcx), %rdx",
            "jae 7f",
            "andl {slab_mask}(%rcx), %edx",
            "imulq {magic}(%rcx), %rdx",
            "cmpq {bound}(%rcx), %rdx",
            "jae 7f",
            "movq {map_hint}(%rax), %r8",
            "movq {off_fast}(%rip), %r9",
            section_head!(),
            // The stack's top (an immediate double free) or no room (full, stopped): out.
            "cmpq %rdi, {top}(%rcx,%r10,8)",
            "je 7f",
            "testl ${room_mask}, %edx",
            "jz 7f",
            "movq %rdi, {slot}(%rcx,%r10,8)",
            "subq ${push_sub}, %rdx",
            "movq %rdx, {word}(%rcx)",
            // Out: the zone's whole free (`free_again_tag(tag / 2, p)`); and for an address
            // outside the arena, `free_tagged(p, 0)`.
            section_tail!(concat!(
                "shrq $1, %rsi\n",
                "xchgq %rsi, %rdi\n",
                "jmp {again}\n",
                "8:\n",
                "xorl %esi, %esi\n",
                "jmp {tagged}\n",
            )),
            view = sym ebbtide_core::ARENA_VIEW,
            view_base = const CEntry::VIEW_BASE,
            view_len = const CEntry::VIEW_LEN,
            map_shift = const CEntry::MAP_SHIFT,
            map_mask = const CEntry::MAP_MASK,
            map_tag = const CEntry::MAP_TAG,
            tags2 = const 2 * TAGS,
            tagged = sym free_tagged,
            slot_shift = const SLOT_SHIFT,
            tag_fast = sym TAG_FAST,
            key = const SLOT_KEY,
            map_start = const CEntry::MAP_START,
            slabs_len = const SLOT_CONSTS + CEntry::CONSTS_SLABS_LEN,
            slab_mask = const SLOT_CONSTS + CEntry::CONSTS_SLAB_MASK,
            magic = const SLOT_CONSTS + CEntry::CONSTS_ITEM_MAGIC,
            bound = const SLOT_CONSTS + CEntry::CONSTS_ITEM_BOUND,
            map_hint = const CEntry::MAP_HINT,
            off_fast = sym ebbtide_core::pcpu::OFF_FAST,
            room_mask = const CEntry::ROOM_MASK,
            slot = const CEntry::SLOT,
            push_sub = const CEntry::PUSH_SUB,
            again = sym free_again_tag,
        )
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod portable {
    use crate::heap;
    use core::ffi::c_void;

    /// `malloc(3)`.
    ///
    /// # Safety
    /// None beyond C's: the result is a fresh block or NULL.
    #[no_mangle]
    pub unsafe extern "C" fn malloc(n: usize) -> *mut c_void {
        heap::alloc(n).cast()
    }

    /// `free(3)`.
    ///
    /// # Safety
    /// `p` is NULL or a live block of this allocator, not used afterwards (anything else is
    /// reported and not applied).
    #[no_mangle]
    pub unsafe extern "C" fn free(p: *mut c_void) {
        // SAFETY: forwarded.
        unsafe { heap::free(p.cast()) }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{free as free_sym, malloc as malloc_sym};
    use crate::report::{bad_pointers, tests::BAD_POINTER_TESTS};
    use crate::slowcount::slow;
    use core::ffi::c_void;

    /// `malloc` through a pointer the optimiser cannot see through: called by its name, it is
    /// C's allocation function to the optimiser, which may drop a call whose block is only
    /// tested and freed (it dropped a `malloc(5000)` and its `free`, slow paths and all).
    ///
    /// # Safety
    /// As C's `malloc`.
    unsafe fn malloc(n: usize) -> *mut c_void {
        let f = core::hint::black_box(malloc_sym as unsafe extern "C" fn(usize) -> *mut c_void);
        // SAFETY: forwarded.
        unsafe { f(n) }
    }

    /// `free` through a pointer, as [`malloc`].
    ///
    /// # Safety
    /// As C's `free` (anything else is reported and not applied).
    unsafe fn free(p: *mut c_void) {
        let f = core::hint::black_box(free_sym as unsafe extern "C" fn(*mut c_void));
        // SAFETY: forwarded.
        unsafe { f(p) }
    }

    /// Every live block of the table's sizes is taken by the fast paths of both `free` and
    /// `malloc` (no slow-path call; the next `malloc` of its size gives it back), and every
    /// pointer that is not a block start — inside a block, in its chunk's metadata below the
    /// first slab, outside the arena — leaves the fast path of `free` and is reported as a bad
    /// pointer, not applied.
    #[test]
    fn the_fast_paths_take_every_block_and_refuse_everything_else() {
        let _serial = BAD_POINTER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        // The test thread is the harness's for this test only: pinned until it ends.
        ebbtide_core::os::pin_to_current_cpu();
        if ebbtide_core::pcpu::OFF_FAST.load(core::sync::atomic::Ordering::Relaxed) == 0 {
            // SAFETY: a fresh block, freed at once: the zones of the table exist after it.
            unsafe { free(malloc(8)) };
        }
        let outside = 0u64;
        for size in [1usize, 8, 24, 64, 136, 256, 520, 1000, 1024] {
            let mut live = [core::ptr::null_mut::<c_void>(); 32];
            for b in live.iter_mut() {
                // SAFETY: C's malloc; each block freed once below.
                *b = unsafe { malloc(size) };
                assert!(!b.is_null());
            }
            for &p in &live {
                let before = slow();
                // SAFETY: `p` is a live block, owned here; its size's next malloc gives it back.
                let q = unsafe {
                    free(p);
                    malloc(size)
                };
                assert_eq!(slow(), before, "size {size}: block {p:p} took a slow path");
                assert_eq!(q, p, "size {size}: free pushed {p:p}, malloc gave {q:p}");
            }
            let a = live[0] as usize;
            let block = crate::classes::size(crate::classes::class_of(size));
            let mut bad: Vec<usize> = [1, 7, block / 2, block - 1]
                .into_iter()
                .filter(|d| (1..block).contains(d))
                .map(|d| a + d)
                .collect();
            let o = ebbtide_core::owner_entry(a);
            let chunk = a & !(ebbtide_core::zone::CEntry::CHUNK_MASK as usize);
            for k in [0, 8, 64] {
                if chunk + k < o.start as usize {
                    bad.push(chunk + k);
                }
            }
            bad.push(&outside as *const u64 as usize);
            for &b in &bad {
                let (before, reported) = (slow(), bad_pointers());
                // SAFETY: `b` is not a block start: reported, not applied, nothing touched.
                unsafe { free(b as *mut c_void) };
                assert_eq!(
                    slow().1,
                    before.1 + 1,
                    "size {size}: {b:#x} passed the fast path"
                );
                assert_eq!(
                    bad_pointers(),
                    reported + 1,
                    "size {size}: {b:#x} not reported"
                );
            }
            for &p in &live {
                // SAFETY: live blocks, each freed once (the refused frees changed nothing).
                unsafe { free(p) };
            }
        }
    }

    /// `malloc` above the size table's range and `free(NULL)` take their slow paths, which do
    /// the whole operation; an immediate double free leaves `free`'s fast path and is
    /// reported.
    #[test]
    fn the_fast_paths_leave_for_the_slow_paths() {
        let _serial = BAD_POINTER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        ebbtide_core::os::pin_to_current_cpu();
        // SAFETY: C's malloc and free: the class of 5000 bytes exists and its stack holds
        // blocks after it.
        unsafe { free(malloc(5000)) };
        let before = slow();
        // SAFETY: C's malloc; freed below.
        let big = unsafe { malloc(5000) };
        assert!(!big.is_null());
        assert_eq!(
            slow().0,
            before.0 + 1,
            "5000 bytes: past the table, then the class's stack"
        );
        let before = slow();
        // SAFETY: free(NULL) does nothing.
        unsafe { free(core::ptr::null_mut()) };
        assert_eq!(slow().1, before.1 + 1, "NULL lies outside the arena");
        // SAFETY: `p` is freed once; its second free is refused.
        unsafe {
            let p = malloc(48);
            free(p);
            let reported = bad_pointers();
            free(p);
            assert_eq!(bad_pointers(), reported + 1, "the double free is reported");
            assert_eq!(
                malloc(48),
                p,
                "and not applied: the block is on the stack once"
            );
            free(p);
            free(big);
        }
    }
}
