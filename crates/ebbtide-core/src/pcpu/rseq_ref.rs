//! The typed entry to the critical sections for the fast path (`zone/fast.rs`): what it needs
//! of a [`Pcpu`], by value, and one method per section it runs.

#[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
use super::rseq;
use super::{Pcpu, Push, NO_RSEQ};

/// What the rseq fast path needs of a [`Pcpu`], by value: the zone copies it into every handle
/// (`Zone` is immutable plain data, so a loop of allocations keeps these in registers).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct RseqRef {
    pub(super) base: *mut u8,
    pub(super) rseq_off: isize,
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
    /// Taken from a live [`Pcpu`] in rseq mode (its mapping outlives the call).
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
    /// chain (`docs/design/pcpu.md`, "The rseq offset in a static").
    ///
    /// # Safety
    /// Taken from a live [`Pcpu`] in rseq mode (its mapping outlives the call).
    #[inline(always)]
    pub(crate) unsafe fn pop_in_place<const STATIC_OFF: bool>(this: &RseqRef) -> *mut u8 {
        debug_assert!(this.rseq_off != NO_RSEQ);
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        {
            // SAFETY: `this.base` is a live Pcpu's mapping, a header and its slots for every
            // CPU id (`Pcpu::new`; the caller's contract), immutable for the call (a shared
            // reference to plain data); the offset is glibc's either way (`in_place_offset`:
            // rseq mode, caller).
            unsafe { rseq::pop_in(this, this.in_place_offset::<STATIC_OFF>()) }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom))))]
        unreachable!("rseq mode without rseq support compiled in")
    }

    /// [`RseqRef::push`] onto the stacks at `hint`, the [`RseqRef::hint`] of `this`'s
    /// stacks as the chunk map entry of the item's chunk carries it; the offset as in
    /// [`RseqRef::pop_in_place`]. For a `free` that reaches `this` through the pointer (chunk
    /// map, then a table indexed by the tag): the stack's address then waits for the entry's
    /// load only, not for the table's.
    ///
    /// # Safety
    /// Taken from a live [`Pcpu`] in rseq mode (its mapping outlives the call). `hint` is `this`'s stacks' hint.
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
            // SAFETY: `hint` is this live Pcpu's base (caller), its mapping a header and its
            // slots for every CPU id (`Pcpu::new`); the offset is glibc's (`in_place_offset`:
            // rseq mode, caller).
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
    /// Taken from a live [`Pcpu`] in rseq mode (its mapping outlives the call).
    #[inline(always)]
    pub(crate) unsafe fn push_in_place<const STATIC_OFF: bool>(
        this: &RseqRef,
        item: *mut u8,
    ) -> Push {
        debug_assert!(this.rseq_off != NO_RSEQ);
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        {
            // SAFETY: `this.base` is a live Pcpu's mapping, a header and its slots for every
            // CPU id (`Pcpu::new`; the caller's contract), immutable for the call (a shared
            // reference to plain data); the offset is glibc's (`in_place_offset`: rseq mode).
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
    /// Taken from a live [`Pcpu`] in rseq mode (its mapping outlives the call).
    #[inline(always)]
    pub(crate) unsafe fn push(self, item: *mut u8) -> Push {
        debug_assert!(self.rseq_off != NO_RSEQ);
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom)))]
        {
            // SAFETY: base is the live Pcpu's mapping, a header and its slots for every CPU id
            // (`Pcpu::new`); rseq_off came from glibc (rseq mode: the caller's contract).
            unsafe { rseq::push(self.base, self.rseq_off, item) }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(miri), not(loom))))]
        {
            let _ = item;
            unreachable!("rseq mode without rseq support compiled in")
        }
    }
}
