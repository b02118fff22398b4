//! Caps, stops and fences: how any thread changes a CPU's stack it does not run on — a cap
//! written by compare-and-swap under the header lock, and a drain by lock, stop, fence
//! (`membarrier`), take, reopen (module docs of `pcpu`, "Remote drain (rseq mode)", "A stop a
//! section wrote over").

use super::*;

impl Pcpu {
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
    pub(super) fn held_count(&self, h: &Header) -> usize {
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
    pub(super) fn reopen_with(&self, h: &Header, count: u32, cap: u32) {
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
        // The slots: ordered before us by `stop_holds`'s Acquire load after the fence (the last
        // critical section's commit, after its slot write, was seen by it).
        let c = self.held_count(h);
        let keep = keep.min(c);
        for i in (keep..c).rev() {
            // SAFETY: i < count <= storage; the stack is stopped and fenced, so it is ours.
            f(unsafe { *self.slot(cpu, i) });
        }
        self.reopen_with(h, keep as u32, cap);
        c - keep
    }
}

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
