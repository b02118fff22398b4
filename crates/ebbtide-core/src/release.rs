//! The release pipeline: pages of emptied slabs are released on a helper thread while the
//! reclaiming thread is still putting cached items back into their slabs, so a large drain costs
//! about the larger of the two (item work, kernel work) instead of their sum, and the tail of the
//! kernel work is shared by both threads.
//!
//! ```text
//!  reclaiming thread: items → slabs ─► slab emptied ─► Session::add (page bitmap per chunk)
//!                                                        │ maximal runs of adjacent pages
//!                                                        ▼
//!                              ring of RING runs ──► helper thread: madvise, DONE += 1
//!                                                        │
//!  Session::finish: madvise what is left in the ring itself, wait until DONE == POSTED, then
//!  every enlisted keg moves its `releasing` slabs to `clean` and counts the bytes.
//! ```
//!
//! * **Nothing is asynchronous to the caller.** A session ends (`finish`, or its `Drop`) only
//!   after every run it posted has been released; the bytes a reclaim reports are bytes already
//!   gone, and no helper work outlives the call (so no keg or chunk can go away under the helper).
//! * **Concurrent allocation is safe.** A slab handed to a session is marked `Clean` (further frees
//!   into it are double frees) but sits on its keg's `releasing` list, which allocation never looks
//!   at, until the session has seen its `madvise` complete (`keg/handoff.rs`).
//! * **Kegs.** A session remembers (up to 16) the kegs it took slabs from, to complete them at the
//!   end; a keg it has no room for keeps its emptied slabs on the free list, and the reclaim's
//!   final `Keg::release_free` pass hands them over (completing the others first).
//! * **One session at a time.** The ring belongs to one session (`BUSY`); a session that finds it
//!   taken is inactive and its callers take the old synchronous paths. Reclaims are serialised
//!   anyway, so this is only a guard.
//! * **No global allocation** on any of these paths: the ring is static, the session lives on the
//!   caller's stack, the helper is woken through a futex word. The helper ([`serve_forever`]) is
//!   started by the runtime on a thread of its own (the core starts no thread), sleeps on a futex when there is
//!   nothing to do, never touches allocator metadata (only `madvise` on ranges it is given) and is
//!   detached: process exit does not wait for it. Without it (one CPU, failed spawn, a forked
//!   child before its next zone creation, loom, miri) the reclaiming thread does every `madvise`
//!   itself.

use crate::arena::CHUNK_SIZE;
use crate::os;
use core::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// Runs in flight at most (posted, not yet released).
const RING: usize = 64;
/// A chunk's waiting pages are posted once they reach this many bytes (never, with a whole
/// chunk: a chunk's slabs are smaller than the chunk), when a fifth chunk needs the slot, or at
/// the end. Whole chunks measured better than 1 MiB runs here (fewer `madvise` calls, each with
/// its fixed cost and TLB flush); the helper still starts within a few chunks of a drain.
pub(crate) const MAX_RUN: usize = CHUNK_SIZE;
/// Runs of adjacent chunks (a drain gives back whole chunks of one keg, which lie side by side
/// in the arena) are posted as one of up to this many bytes: each `madvise` flushes the other
/// CPUs' TLBs of the process once (an IPI to each), and one per 4 MiB chunk cost the drain of
/// 1 GiB of free slabs more than the kernel's own work.
pub(crate) const MAX_COALESCE: usize = 8 * CHUNK_SIZE;
/// What a session completes at its end: an owner of slabs handed to the session (a keg), which
/// moves them from its `releasing` list to `clean` once their pages are gone and returns their
/// bytes. Defined here so that the pipeline sits below the kegs that use it.
pub(crate) trait Releasing {
    /// Called once the session has seen every run it posted released.
    fn complete_releases(&self) -> usize;
}

/// Most kegs one session serves before it completes what it has and starts over.
const MAX_KEGS: usize = 16;

struct Slot {
    addr: AtomicUsize,
    len: AtomicUsize,
}

static SLOTS: [Slot; RING] = [const {
    Slot {
        addr: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
    }
}; RING];
/// Runs posted (written by the session owner only).
static POSTED: AtomicUsize = AtomicUsize::new(0);
/// Runs claimed by a consumer (helper or owner).
static CLAIMED: AtomicUsize = AtomicUsize::new(0);
/// Runs released.
static DONE: AtomicUsize = AtomicUsize::new(0);
/// A session owns the ring.
static BUSY: AtomicBool = AtomicBool::new(false);
/// The helper's futex word: 1 while it sleeps (or is about to), 0 otherwise.
static SLEEPING: AtomicU32 = AtomicU32::new(0);
/// A helper was started in this process (cleared in a forked child, which has none).
static WORKER_UP: AtomicBool = AtomicBool::new(false);
/// Runs the helper released (statistics and tests).
static WORKER_RUNS: AtomicUsize = AtomicUsize::new(0);

/// Claims the next posted run, if any.
fn claim() -> Option<(usize, usize)> {
    loop {
        let c = CLAIMED.load(Ordering::Relaxed);
        // Acquire: pairs with the Release store of POSTED in `post`, so the slot's contents
        // written before it are visible.
        if c == POSTED.load(Ordering::Acquire) {
            return None;
        }
        let s = &SLOTS[c % RING];
        // Read before claiming: once `c` is claimed, another consumer may finish it and the
        // producer may reuse the slot. While `c` is unclaimed, fewer than `c + 1` runs can be done,
        // so the producer (which waits for DONE > index - RING) has not reused it; the reads below
        // happen before our successful CAS (Release part of AcqRel), which happens before any
        // later claim and hence before the DONE increment the producer acquires before reuse.
        // A failed CAS discards what was read.
        let addr = s.addr.load(Ordering::Relaxed);
        let len = s.len.load(Ordering::Relaxed);
        if CLAIMED
            .compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return Some((addr, len));
        }
    }
}

/// Sets bits `[first, end)` of a page bitmap, a word at a time.
fn set_pages(bits: &mut [u64], first: usize, end: usize) {
    let mut pg = first;
    while pg < end {
        let (w, b) = (pg / 64, pg % 64);
        let k = (64 - b).min(end - pg);
        bits[w] |= (u64::MAX >> (64 - k)) << b;
        pg += k;
    }
}

/// The first run of set bits of a page bitmap at or after bit `from` and below `npg` (a
/// multiple of 64), as `[start, end)`; `None` when there is none. A word at a time: `>>`
/// brings in zeros, so a word's count of ones stops at its top.
fn next_run(bits: &[u64], from: usize, npg: usize) -> Option<(usize, usize)> {
    let mut pg = from;
    while pg < npg {
        let rest = bits[pg / 64] >> (pg % 64);
        if rest == 0 {
            pg = (pg / 64 + 1) * 64; // the rest of this word is clear
            continue;
        }
        pg += rest.trailing_zeros() as usize;
        let start = pg;
        while pg < npg {
            let b = pg % 64;
            let ones = (bits[pg / 64] >> b).trailing_ones() as usize;
            pg += ones;
            if b + ones < 64 {
                break;
            }
        }
        return Some((start, pg));
    }
    None
}

/// The run `held` and `run` (`(addr, len)`) make together when they are adjacent, in either
/// order, and no longer than [`MAX_COALESCE`]; `None` otherwise (or with nothing held). Pure.
pub(crate) fn coalesced(held: (usize, usize), run: (usize, usize)) -> Option<(usize, usize)> {
    let ((h, hl), (a, l)) = (held, run);
    if hl == 0 || hl + l > MAX_COALESCE {
        None
    } else if h + hl == a {
        Some((h, hl + l))
    } else if a + l == h {
        Some((a, hl + l))
    } else {
        None
    }
}

/// Gives a run of a chunk's pages back through the arena, which splits the huge pages the run
/// covers in part (`Arena::release_pages`).
///
/// # Safety
/// As [`os::release`]: slabs of an arena chunk, page aligned, unused.
unsafe fn release_pages(addr: usize, len: usize) {
    match crate::arena::get() {
        // SAFETY: the caller's guarantee.
        Ok(a) => unsafe { a.release_pages(addr, len) },
        // No arena, no chunk: unreachable for a run of slabs, released plainly all the same.
        // SAFETY: the caller's guarantee.
        Err(_) => unsafe { os::release(NonNull::new_unchecked(addr as *mut u8), len) },
    }
}

/// Gives one claimed run back and counts it done.
fn release_run(addr: usize, len: usize) {
    // SAFETY: runs are only posted by a session for slabs it took off every list of their keg
    // under the keg lock: committed memory of ours that holds no live item and that nothing
    // hands out until the session has seen this run done.
    unsafe { release_pages(addr, len) };
    // Release: the session's Acquire load of DONE sees the madvise finished before it lets the
    // slabs be allocated again.
    DONE.fetch_add(1, Ordering::Release);
}

/// One round of the helper: every run posted so far, then sleep until the next is posted (or
/// for at most `max_sleep_ms`).
fn helper_pass(max_sleep_ms: Option<u64>) {
    {
        // Inside the fork gate while runs are claimed and not yet done (a child must not wait
        // for a run its parent's helper had claimed); never while asleep.
        let _inside = crate::forkgate::enter();
        while let Some((a, l)) = claim() {
            release_run(a, l);
            WORKER_RUNS.fetch_add(1, Ordering::Relaxed);
        }
    }
    // Dekker with `post`: we store SLEEPING = 1 then load POSTED; `post` stores POSTED then
    // swaps SLEEPING. All SeqCst, so either we see the new run or `post` sees us asleep and
    // wakes us (futex_wait returns at once if the word is no longer 1).
    SLEEPING.store(1, Ordering::SeqCst);
    if CLAIMED.load(Ordering::SeqCst) != POSTED.load(Ordering::SeqCst) {
        SLEEPING.store(0, Ordering::SeqCst);
        return;
    }
    os::futex_wait_for(&SLEEPING, 1, max_sleep_ms);
    SLEEPING.store(0, Ordering::SeqCst);
}

/// The helper's loop: releases every run posted by any session, sleeping on a futex word
/// between them. Never returns. A runtime runs it on a thread of its own (the core starts no
/// thread) and says so with [`set_helper_running`]; without one, sessions do every `madvise`
/// themselves when they finish.
pub fn serve_forever() -> ! {
    loop {
        helper_pass(None);
    }
}

/// [`serve_forever`] while `keep()` says so, asked at least every `check_ms` (it may be asked
/// more often). Returns when it said no: a runtime whose threads must not keep a process alive
/// ends the helper this way (see the `ebbtide` crate's `threads`).
pub fn serve_while(check_ms: u64, mut keep: impl FnMut() -> bool) {
    while keep() {
        helper_pass(Some(check_ms));
    }
}

/// Whether a helper thread serves the ring in this process (set by the runtime that started it;
/// cleared by the runtime in a forked child, which has none).
pub fn set_helper_running(on: bool) {
    // Release/Acquire: pairs with `helper_running`; a thread that sees `true` also sees whatever
    // the runtime did before starting the helper.
    WORKER_UP.store(on, Ordering::Release);
}

/// See [`set_helper_running`].
pub fn helper_running() -> bool {
    WORKER_UP.load(Ordering::Acquire)
}

/// Runs released by the helper thread since the process started.
pub fn helper_runs() -> usize {
    WORKER_RUNS.load(Ordering::Relaxed)
}

/// Pages of one chunk waiting to be posted: a bitmap of the chunk's pages.
#[derive(Clone, Copy)]
struct Pending {
    /// Chunk base; 0 = slot unused.
    chunk: usize,
    npages: usize,
    /// Last use (for eviction).
    stamp: u64,
    bits: [u64; CHUNK_PAGES_MAX / 64],
}

/// Pages per chunk at the smallest page size we support (4 KiB).
const CHUNK_PAGES_MAX: usize = CHUNK_SIZE / 4096;
/// Chunks with pages waiting at once (a drain interleaves item slabs with bucket slabs).
const PENDING: usize = 4;

/// Hands the run `[addr, addr + len)` to the helper (or releases it here when the ring is
/// full). Only the session owning the ring calls this.
///
/// Returns false, posting nothing, when the ring is full (the helper is behind).
fn post(addr: usize, len: usize) -> bool {
    let p = POSTED.load(Ordering::Relaxed);
    // Acquire: the consumer that finished run `p - RING` read its slot before (see `claim`).
    if p.wrapping_sub(DONE.load(Ordering::Acquire)) >= RING {
        return false;
    }
    let s = &SLOTS[p % RING];
    s.addr.store(addr, Ordering::Relaxed);
    s.len.store(len, Ordering::Relaxed);
    // SeqCst: a Release at least, for the slot contents (see `claim`); SeqCst for the Dekker
    // handshake with the sleeping helper (see `helper_main`).
    POSTED.store(p + 1, Ordering::SeqCst);
    if SLEEPING.swap(0, Ordering::SeqCst) == 1 {
        os::futex_wake(&SLEEPING, 1);
    }
    true
}

/// Runs one flush can produce at most (every other page of a chunk), and the held one
/// ([`Session::emit`]).
const OVERFLOW: usize = CHUNK_PAGES_MAX / 2 + 1;

/// One reclaim's use of the pipeline. See the module documentation.
///
/// Slabs are not posted one by one: a drain empties them almost, but not quite, in address order
/// (per-CPU stacks are LIFO), so the session collects their pages in a bitmap per chunk and posts
/// maximal runs of adjacent pages when the chunk's slot is needed for a newer chunk (or at the
/// end; see [`MAX_RUN`]).
pub(crate) struct Session {
    active: bool,
    pending: [Pending; PENDING],
    clock: u64,
    kegs: [Option<NonNull<dyn Releasing>>; MAX_KEGS],
    nkegs: usize,
    /// Bytes released by completed kegs so far.
    bytes: usize,
    /// Free slabs each keg keeps backed: its reserve, or none.
    keep_reserve: bool,
    /// Runs that found the ring full: released by the owner at its next call of
    /// [`Session::release_overflow`], which callers make with no keg lock held (a `madvise` never
    /// runs under a keg lock).
    overflow: [(usize, usize); OVERFLOW],
    noverflow: usize,
    /// The last run flushed, not yet posted: the next one is added to it when adjacent
    /// ([`MAX_COALESCE`]); `(0, 0)` for none. Posted before the session completes its kegs.
    held: (usize, usize),
}

impl Session {
    /// A session; inactive when another one owns the ring. `keep_reserve`: kegs keep their
    /// reserve of free slabs backed (false while squeezing).
    pub(crate) fn begin(keep_reserve: bool) -> Session {
        // Acquire: pairs with the Release store in `Drop` of the previous owner, whose ring
        // indices we continue from.
        let active = BUSY
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        Session {
            active,
            keep_reserve,
            ..Session::inactive()
        }
    }

    /// Tests: an active session, waiting while another test (or a reclaim) owns the ring.
    #[cfg(test)]
    pub(crate) fn begin_wait(keep_reserve: bool) -> Session {
        loop {
            let s = Session::begin(keep_reserve);
            if s.active {
                return s;
            }
            drop(s);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// An inactive session: every keg operation given it takes the synchronous path.
    pub(crate) fn inactive() -> Session {
        Session {
            active: false,
            pending: [Pending {
                chunk: 0,
                npages: 0,
                stamp: 0,
                bits: [0; CHUNK_PAGES_MAX / 64],
            }; PENDING],
            clock: 0,
            kegs: [None; MAX_KEGS],
            nkegs: 0,
            bytes: 0,
            keep_reserve: true,
            overflow: [(0, 0); OVERFLOW],
            noverflow: 0,
            held: (0, 0),
        }
    }

    /// Whether runs wait in the overflow: the caller should drop its keg lock and call
    /// [`Session::release_overflow`] before it adds more.
    #[inline]
    pub(crate) fn has_overflow(&self) -> bool {
        self.noverflow > 0
    }

    /// Gives back the runs that found the ring full, on this thread. Call with no keg lock held.
    pub(crate) fn release_overflow(&mut self) {
        for &(a, l) in &self.overflow[..self.noverflow] {
            // SAFETY: each run is whole slabs enlisted kegs took off every list under their
            // locks (on their `releasing` lists, `Clean`), perhaps across adjacent chunks and
            // with pages of them no slab holds: committed memory of ours holding no live item,
            // which nothing hands out until this session completes those kegs.
            unsafe { release_pages(a, l) };
        }
        self.noverflow = 0;
    }

    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.active
    }

    #[inline]
    pub(crate) fn keep_reserve(&self) -> bool {
        self.keep_reserve
    }

    /// Registers `k` as a keg whose `releasing` slabs this session completes, completing the
    /// kegs enlisted so far first if the table is full. Must be called without any keg lock held
    /// (completing takes their locks).
    pub(crate) fn enlist(&mut self, k: &(dyn Releasing + 'static)) {
        if self.active && !self.try_enlist(k) {
            self.complete();
            let ok = self.try_enlist(k);
            debug_assert!(ok);
        }
    }

    /// Registers `k` if the table has room (or it is already there); never blocks, so it may be
    /// called with `k`'s lock held. False: `k` must not hand this session any slab.
    pub(crate) fn try_enlist(&mut self, k: &(dyn Releasing + 'static)) -> bool {
        let kp = NonNull::from(k);
        if !self.active {
            return false;
        }
        // Most recent first: a drain hands over one keg's slabs at a time.
        let same = |x: &Option<NonNull<dyn Releasing>>| {
            x.is_some_and(|x| x.cast::<u8>() == kp.cast::<u8>())
        };
        if self.kegs[..self.nkegs].iter().rev().any(same) {
            return true;
        }
        if self.nkegs == MAX_KEGS {
            return false;
        }
        self.kegs[self.nkegs] = Some(kp);
        self.nkegs += 1;
        true
    }

    /// Adds `[addr, addr + len)` (whole slabs of an enlisted keg, taken off its lists; page
    /// aligned, inside one chunk) to the pages to release. Called with that keg's lock held;
    /// never blocks and never gives pages back itself: runs that find the ring full wait in the
    /// overflow, which the caller drains after dropping the lock ([`Session::has_overflow`]).
    pub(crate) fn add(&mut self, addr: usize, len: usize) {
        debug_assert!(self.active);
        let ps = os::page_size();
        let chunk = addr & !(CHUNK_SIZE - 1);
        debug_assert!(
            addr.is_multiple_of(ps) && len.is_multiple_of(ps) && addr + len <= chunk + CHUNK_SIZE
        );
        debug_assert!(CHUNK_SIZE / ps <= CHUNK_PAGES_MAX);
        self.clock += 1;
        let i = match self.pending.iter().position(|p| p.chunk == chunk) {
            Some(i) => i,
            None => {
                // A free slot, else the least recently used one, flushed.
                let i = (0..PENDING)
                    .min_by_key(|&i| (self.pending[i].chunk != 0, self.pending[i].stamp))
                    .unwrap_or(0);
                self.flush(i);
                self.pending[i].chunk = chunk;
                i
            }
        };
        let p = &mut self.pending[i];
        p.stamp = self.clock;
        set_pages(&mut p.bits, (addr - chunk) / ps, (addr - chunk + len) / ps);
        p.npages += len / ps;
        if p.npages * ps >= MAX_RUN {
            self.flush(i);
        }
    }

    /// Posts the runs of adjacent pages waiting in slot `i` and empties it.
    fn flush(&mut self, i: usize) {
        let p = self.pending[i];
        self.pending[i].chunk = 0;
        if p.chunk == 0 || p.npages == 0 {
            return;
        }
        self.pending[i].npages = 0;
        self.pending[i].bits = [0; CHUNK_PAGES_MAX / 64];
        let ps = os::page_size();
        let npg = CHUNK_SIZE / ps;
        let mut pg = 0;
        while let Some((start, end)) = next_run(&p.bits, pg, npg) {
            pg = end;
            self.emit(p.chunk + start * ps, (end - start) * ps);
        }
    }

    /// Adds the run `[a, a + l)` to the held one when they are adjacent (in either order, up to
    /// [`MAX_COALESCE`]), else posts the held run and holds this one.
    fn emit(&mut self, a: usize, l: usize) {
        if let Some(m) = coalesced(self.held, (a, l)) {
            self.held = m;
            return;
        }
        self.post_held();
        self.held = (a, l);
    }

    /// Posts the held run, if any.
    fn post_held(&mut self) {
        let (a, l) = core::mem::take(&mut self.held);
        if l > 0 && !post(a, l) {
            // Callers drain the overflow after every `add`, and one flush yields at most
            // OVERFLOW runs (the held one with them), so there is room.
            self.overflow[self.noverflow] = (a, l);
            self.noverflow += 1;
        }
    }

    /// Waits until every posted run is released, doing unclaimed ones here.
    fn finish_ring(&mut self) {
        for i in 0..PENDING {
            self.flush(i);
            // Flushing may leave runs in the overflow (ring full): release them now, before the
            // kegs are told their slabs are clean. (No keg lock is held here.)
            self.release_overflow();
        }
        self.post_held();
        self.release_overflow();
        while let Some((a, l)) = claim() {
            release_run(a, l);
        }
        let posted = POSTED.load(Ordering::Relaxed);
        let mut spins = 0u32;
        // Acquire: pairs with the Release increment in `release_run` (the madvise is finished).
        while DONE.load(Ordering::Acquire) != posted {
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Gives back everything handed over so far and lets the enlisted kegs reuse the slabs.
    fn complete(&mut self) {
        if !self.active {
            return;
        }
        self.finish_ring();
        for k in self.kegs[..self.nkegs].iter().flatten() {
            // SAFETY: enlisted kegs outlive the session: kegs are destroyed only with no reclaim
            // in progress on them (zone destruction owns the zone; bucket kegs are never
            // destroyed), and a session never outlives the reclaim that opened it.
            self.bytes += unsafe { k.as_ref() }.complete_releases();
        }
        self.nkegs = 0;
    }

    /// Ends the session; returns the bytes released through it.
    pub(crate) fn finish(mut self) -> usize {
        self.complete();
        self.bytes
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.complete();
        if self.active {
            self.active = false;
            // Release: the next owner sees our ring indices (see `begin`).
            BUSY.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disposal::Disposal;
    use crate::keg::tests::{import_n, xorshift};
    use crate::keg::Keg;

    fn release_all(k: &Keg, v: &[*mut u8], s: &mut Session) {
        k.take_back(
            v,
            &mut Disposal::reclaim(s, false),
            None::<fn(*mut u8)>,
            |p, kind| panic!("{p:?}: {kind:?}"),
        );
    }

    #[test]
    fn the_helper_gives_runs_back_while_the_owner_waits() {
        static HELPER: std::sync::Once = std::sync::Once::new();
        HELPER.call_once(|| {
            std::thread::spawn(|| serve_forever());
            set_helper_running(true);
        });
        let k = Keg::new(4096, 0).unwrap();
        // 24 MiB of one-page slabs: six chunks, so chunks are posted (evicted from the four
        // pending slots) before the session finishes.
        let v = import_n(&k, 6144);
        for p in &v {
            // SAFETY: ours, 4096 bytes.
            unsafe { p.write_bytes(7, 4096) };
        }
        let mut s = Session::begin_wait(true);
        let before = helper_runs();
        release_all(&k, &v, &mut s);
        // The owner does not claim anything until it finishes: give the helper time.
        let t = std::time::Instant::now();
        while helper_runs() == before && t.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
            assert!(helper_runs() > before, "the helper never ran");
        }
        assert_eq!(s.finish(), 6144 * 4096);
        for p in &v {
            // SAFETY: the slabs are ours and mapped; released, they read as zeros.
            assert_eq!(unsafe { *p.add(100) }, 0);
        }
        let c = k.validate().unwrap();
        assert_eq!((c.backed_slabs, c.releasing_slabs), (0, 0));
        k.destroy().unwrap();
    }

    /// Adjacent runs coalesce in either order up to `MAX_COALESCE`; apart, overlapping or with
    /// nothing held they do not.
    #[test]
    fn adjacent_runs_coalesce_up_to_the_limit() {
        let c = CHUNK_SIZE;
        assert_eq!(coalesced((0, 0), (c, c)), None, "nothing held");
        assert_eq!(coalesced((c, c), (2 * c, c)), Some((c, 2 * c)), "above");
        assert_eq!(coalesced((2 * c, c), (c, c)), Some((c, 2 * c)), "below");
        assert_eq!(coalesced((c, c), (3 * c, c)), None, "a gap");
        assert_eq!(coalesced((c, c), (c + 4096, c)), None, "overlapping");
        assert_eq!(
            coalesced((c, MAX_COALESCE - 4096), (c + MAX_COALESCE - 4096, 4096)),
            Some((c, MAX_COALESCE))
        );
        assert_eq!(
            coalesced((c, MAX_COALESCE), (c + MAX_COALESCE, 4096)),
            None,
            "the limit"
        );
    }

    /// The page bitmap's runs, set and found a word at a time, against a bit-by-bit model.
    #[test]
    fn page_runs_match_a_bit_by_bit_model() {
        const NPG: usize = 1024;
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut rnd = |n: usize| (next() % n as u64) as usize;
        for round in 0..500 {
            let mut bits = [0u64; NPG / 64];
            let mut model = [false; NPG];
            for _ in 0..rnd(12) {
                let first = rnd(NPG);
                let len = [1, 63, 64, 65, 200, NPG][rnd(6)].min(NPG - first);
                set_pages(&mut bits, first, first + len);
                model[first..first + len].iter_mut().for_each(|b| *b = true);
            }
            if round == 0 {
                set_pages(&mut bits, 0, NPG);
                model = [true; NPG];
            }
            for (i, &m) in model.iter().enumerate() {
                assert_eq!(
                    bits[i / 64] >> (i % 64) & 1 == 1,
                    m,
                    "round {round} bit {i}"
                );
            }
            let mut want = vec![];
            let mut i = 0;
            while i < NPG {
                if model[i] {
                    let s = i;
                    while i < NPG && model[i] {
                        i += 1;
                    }
                    want.push((s, i));
                } else {
                    i += 1;
                }
            }
            let mut got = vec![];
            let mut pg = 0;
            while let Some((s, e)) = next_run(&bits, pg, NPG) {
                got.push((s, e));
                pg = e;
            }
            assert_eq!(got, want, "round {round}");
        }
    }

    #[test]
    fn dropping_a_session_completes_it_and_frees_the_ring() {
        let k = Keg::new(256, 0).unwrap();
        let v = import_n(&k, 16 * 50);
        {
            let mut s = Session::begin_wait(true);
            release_all(&k, &v, &mut s);
            assert!(!Session::begin(true).active(), "one session at a time");
            assert_eq!(k.validate().unwrap().releasing_slabs, 50);
        } // dropped without finish (as on unwinding)
        let c = k.validate().unwrap();
        assert_eq!((c.releasing_slabs, c.released_bytes), (0, 50 * 4096));
        let s = Session::begin_wait(true);
        assert!(s.active());
        drop(s);
        k.destroy().unwrap();
    }

    #[test]
    fn an_inactive_session_takes_the_synchronous_paths() {
        let k = Keg::new(64, 0).unwrap();
        let v = import_n(&k, 64 * 4);
        let owner = Session::begin_wait(true);
        let mut other = Session::begin(true);
        assert!(!other.active());
        release_all(&k, &v, &mut other);
        let c = k.validate().unwrap();
        assert_eq!((c.free_slabs, c.releasing_slabs), (4, 0));
        // `release_free` with it releases the pages at once (the keg lock dropped for the
        // `madvise`) and says so.
        assert_eq!(
            k.release_free(0, &mut Disposal::reclaim(&mut other, false)),
            4 * 4096
        );
        assert_eq!(other.finish(), 0);
        drop(owner);
        k.destroy().unwrap();
    }
}
