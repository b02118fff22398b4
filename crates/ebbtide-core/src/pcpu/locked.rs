//! Locked mode and the header lock: without rseq (old glibc, valgrind, `EBBTIDE_RSEQ=0`, loom,
//! miri) every operation takes the header lock of `sched_getcpu()`'s stack; in either mode
//! drainers and cap writers take the same lock (module docs of `pcpu`, "Locked mode").

use super::*;
use crate::sync::AtomicU32;

/// A spin lock on a header's `lock` word. Holders are short (no system call except the drainer's
/// one membarrier per CPU), so waiters spin briefly, then yield.
pub(crate) struct HeaderGuard<'a>(pub(super) &'a AtomicU32);

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
            // Acquire: pairs with the Release of the previous holder's unlock.
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
    #[inline]
    pub(super) fn locked_cpu(&self) -> usize {
        os::current_cpu() % self.ncpu as usize
    }

    #[cold]
    pub(super) fn locked_pop(&self) -> *mut u8 {
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
    pub(super) fn locked_push(&self, item: *mut u8) -> Push {
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

    /// [`Pcpu::pop_batch`] under the header lock.
    pub(super) fn locked_pop_batch(&self, dst: &mut [*mut u8]) -> usize {
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

    /// [`Pcpu::push_batch`] under the header lock.
    pub(super) fn locked_push_batch(&self, src: &[*mut u8]) -> usize {
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
}
