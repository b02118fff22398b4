// A test binary of its own, outside tests/all/: built only with --cfg loom (the loom stage of scripts/test.sh).
//! A loom model of the per-CPU stack protocol of `src/pcpu.rs` against a concurrent remote drain
//! and a concurrent cap change.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release -p ebbtide-core --test loom_pcpu`
//! (`LOOM_MAX_PREEMPTIONS` bounds the search; the default here is 3.)
//!
//! loom cannot run the rseq assembly, so the model restates the protocol with loom types and makes
//! the kernel's guarantees explicit:
//!
//! * **CPU**: a `Cpu` holds the header (`word` = count | room | allocations, `cap`, `held`,
//!   `lock`, as in `pcpu::Header`) and `STORAGE` item slots. Slots are `loom::cell::UnsafeCell`s,
//!   so loom reports any unordered access between a critical section and the drainer as a data
//!   race.
//! * **rseq critical section**: a section is "one load of `word`, the slot access, one commit
//!   store of `word`". The kernel guarantees that sections on one CPU never interleave (a
//!   preempted section restarts) and that `membarrier(PRIVATE_EXPEDITED_RSEQ, FLAG_CPU, cpu)`
//!   returns only once every section running there has committed or been aborted. Modelled by a
//!   per-CPU `kernel: Mutex<()>` and an abort `epoch`: a section records the epoch, does its load
//!   and slot access, and commits only if the epoch is unchanged; every commit and every fence
//!   bumps the epoch (another section that ran in between = this one was preempted = restart).
//!   What the kernel does *not* order is another CPU's read-modify-write (a drainer's stop, a cap
//!   writer's change) between a section's load and its commit: the model lets those happen there.
//!   The load is `Acquire` because x86 loads are (TSO); the commit writes unconditionally
//!   (`Release`, as x86 stores are), not a CAS, as the real one is a `movq` (see `commit` for why
//!   the model writes it with a `swap`).
//! * **locked mode**: every operation takes the header spin lock (`pcpu::lock_header`, Acquire CAS
//!   / Release store) and no fence is needed.
//! * **drainer** (`ZoneInner::drain_cpus`, `validate`, the resize pass): lock → `stop_fenced`
//!   (`fetch_and` count and room to 0, `held` = the count taken; fence; look again, and stop and
//!   fence again while a commit wrote over the stop) → `take_stopped` (read the slots below the
//!   held count) → reopen (one Release store of `word` with count 0 and the room of the new cap) →
//!   unlock.
//! * **cap writer** (`Pcpu::set_cap`, from the resize pass on another CPU): lock → CAS `word`'s
//!   room to `cap - count` → unlock; a section may write the old room back (lossy by design).
//!
//! Items circulate between a "keg" (a `Mutex<Vec>` standing for the slow path: depot and slabs),
//! the stacks, and the threads; at the end every item must be in exactly one place, no item
//! may be handed to two threads at once, and no stack's count + room exceeds its storage.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// x86 (the only target of rseq mode) orders stores with stores and loads with loads: its plain
/// stores are release stores and its loads acquire loads. The rseq-mode model uses these for the
/// critical sections and the drainer; locked mode keeps the orderings written in pcpu.rs.
const X86_STORE: Ordering = Ordering::Release;
const X86_LOAD: Ordering = Ordering::Acquire;
use loom::sync::{Arc, Mutex};
use loom::thread;

const STORAGE: usize = 2;
const COUNT_MASK: u64 = 0x3ff; // pcpu.rs COUNT_MASK
const ROOM_SHIFT: u32 = 10;
const ROOM_ONE: u64 = 1 << ROOM_SHIFT;
const ROOM_MASK: u64 = COUNT_MASK << ROOM_SHIFT;
const ALLOC_ONE: u64 = 1 << 20;
const STOP_MASK: u64 = COUNT_MASK | ROOM_MASK;

fn count_of(w: u64) -> u64 {
    w & COUNT_MASK
}

fn room_of(w: u64) -> u64 {
    (w & ROOM_MASK) >> ROOM_SHIFT
}

/// pcpu.rs `with_count_and_cap`.
fn with_count_and_cap(w: u64, count: u64, cap: u64) -> u64 {
    (w & !STOP_MASK) | count | (cap.saturating_sub(count) << ROOM_SHIFT)
}

/// `pcpu::Header` + its slots, plus the modelled kernel state of that CPU.
struct Cpu {
    word: AtomicU64, // pcpu.rs: `word` (count | room << 10 | allocs << 20)
    cap: AtomicU32,  // pcpu.rs: `cap` (the cap last set; not read by sections)
    held: AtomicU32, // pcpu.rs: `held` (the count a stop took; 0 = open)
    lock: Mutex<()>, // pcpu.rs: `lock`, a spin lock (Acquire CAS / Release store); a loom Mutex
    // has the same ordering and spares loom the spinning
    items: [UnsafeCell<usize>; STORAGE], // pcpu.rs: `items[storage]` at +64
    kernel: Mutex<()>,                   // model: the CPU itself (sections on it never interleave)
    epoch: AtomicU64, // model: bumped by each commit and each fence (= abort of the others)
}

impl Cpu {
    fn new(cap: u32) -> Cpu {
        Cpu {
            word: AtomicU64::new(with_count_and_cap(0, 0, cap as u64)),
            cap: AtomicU32::new(cap),
            held: AtomicU32::new(0),
            lock: Mutex::new(()),
            items: [UnsafeCell::new(0), UnsafeCell::new(0)],
            kernel: Mutex::new(()),
            epoch: AtomicU64::new(0),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Rseq(Drain),
    Locked,
}

/// What a drainer does after its fence.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Drain {
    /// As pcpu.rs does (`stop_fenced`): look again, stop and fence again while a section's
    /// commit wrote over the stop.
    LookAgain,
    /// Trust the first stop (hands out items twice: see the test at the end).
    TrustTheStop,
}

struct World {
    cpus: [Cpu; 2],
    keg: Mutex<Vec<usize>>,
    /// Items held by threads right now (duplicate hand-out detector).
    live: Mutex<Vec<usize>>,
    mode: Mode,
}

// ---- header lock: pcpu.rs `lock_header` / `HeaderGuard::drop` ----
fn lock_header(c: &Cpu) -> loom::sync::MutexGuard<'_, ()> {
    c.lock.lock().unwrap()
}

// ---- rseq mode: pcpu.rs `rseq::pop` / `rseq::push` ----
/// A section's commit: the real one is a plain store (`movq %rcx, (%rax)`), modelled as a
/// `swap` whose old value is ignored. loom 0.7 lets a plain store take a place in the
/// modification order between the read and the write of another thread's read-modify-write
/// (tokio-rs/loom#254 and #389; the fix, PR #391, is not released), so a plain-store commit
/// racing the drainer's stop (an RMW) made loom report a stop that held while the commit had
/// landed after it: an execution C++ forbids (an RMW reads the last value before its write) and x86
/// cannot produce (its locked RMW and the commit take places in one total store order). A
/// `swap` is an RMW, which loom orders correctly, and writes what the store writes, at the place
/// in the order the store must take: after every write it follows.
fn commit(c: &Cpu, w: u64) {
    c.word.swap(w, X86_STORE);
}

fn rseq_pop(c: &Cpu) -> Option<usize> {
    loop {
        // "2: leaq 9f / movq %rax, %fs:8": enter the section
        let k = c.kernel.lock().unwrap();
        let epoch = c.epoch.load(Ordering::Relaxed);
        let w = c.word.load(X86_LOAD); // movq (%rax), %rcx
        let n = count_of(w) as usize; // movl %ecx, %edx ; andl $0x3ff, %edx
        if n == 0 {
            // jz 7f
            return None;
        }
        // movq 56(%rax,%rdx,8), out
        // SAFETY (model): n - 1 < count <= STORAGE.
        let item = c.items[n - 1].with(|p| unsafe { *p });
        drop(k);
        // <- preemption / fence point inside the section; another CPU's RMW may land here
        let _k = c.kernel.lock().unwrap();
        if c.epoch.load(Ordering::Relaxed) != epoch {
            continue; // aborted: "5: jmp 2b"
        }
        commit(c, w - 1 + ROOM_ONE + ALLOC_ONE); // addq ; movq %rcx, (%rax)
        c.epoch.fetch_add(1, Ordering::Relaxed);
        return Some(item);
    }
}

fn rseq_push(c: &Cpu, item: usize) -> bool {
    loop {
        let k = c.kernel.lock().unwrap();
        let epoch = c.epoch.load(Ordering::Relaxed);
        let w = c.word.load(X86_LOAD); // movq (%rax), %rcx
        let n = count_of(w) as usize;
        if room_of(w) == 0 {
            // testl $ROOM_MASK, %ecx ; jz 7f
            return false;
        }
        // movq {item}, 64(%rax,%rdx,8)   (n < count + room <= STORAGE)
        c.items[n].with_mut(|p| unsafe { *p = item });
        drop(k);
        let _k = c.kernel.lock().unwrap();
        if c.epoch.load(Ordering::Relaxed) != epoch {
            continue;
        }
        commit(c, w + 1 - ROOM_ONE); // subq $0x3ff ; movq %rcx, (%rax)
        c.epoch.fetch_add(1, Ordering::Relaxed);
        return true;
    }
}

// ---- locked mode: pcpu.rs `locked_pop` / `locked_push` ----
fn locked_pop(c: &Cpu) -> Option<usize> {
    let g = lock_header(c);
    let w = c.word.load(Ordering::Relaxed);
    let n = count_of(w) as usize;
    let r = if n == 0 {
        None
    } else {
        let item = c.items[n - 1].with(|p| unsafe { *p });
        c.word
            .store(w - 1 + ROOM_ONE + ALLOC_ONE, Ordering::Relaxed);
        Some(item)
    };
    drop(g);
    r
}

fn locked_push(c: &Cpu, item: usize) -> bool {
    let g = lock_header(c);
    let w = c.word.load(Ordering::Relaxed);
    let n = count_of(w) as usize;
    let ok = room_of(w) > 0;
    if ok {
        c.items[n].with_mut(|p| unsafe { *p = item });
        c.word.store(w + 1 - ROOM_ONE, Ordering::Relaxed);
    }
    drop(g);
    ok
}

// ---- the drainer: pcpu.rs stop / fence_cpu / stop_holds / take_stopped ----
fn fence_cpu(w: &World, cpu: usize) {
    if w.mode != Mode::Locked {
        // membarrier: every section on `cpu` has committed or will abort.
        let _k = w.cpus[cpu].kernel.lock().unwrap();
        w.cpus[cpu].epoch.fetch_add(1, Ordering::Relaxed);
    }
    fence(Ordering::SeqCst); // pcpu.rs fence_cpu: crate::sync::fence(SeqCst)
}

/// pcpu.rs `stop`: count and room to 0 by one RMW (SeqCst), the count taken into `held`.
fn stop(c: &Cpu) {
    let w = c.word.fetch_and(!STOP_MASK, Ordering::SeqCst);
    c.held
        .store((1 << 31) | count_of(w) as u32, Ordering::Relaxed);
}

fn drain(w: &World, cpu: usize, reopen_cap: u32) -> usize {
    let c = &w.cpus[cpu];
    let g = lock_header(c); // let _g = lock_header(h);
                            // stop_fenced:
    loop {
        stop(c);
        fence_cpu(w, cpu);
        // stop_holds: h.word.load(Acquire) & STOP_MASK == 0
        if w.mode == Mode::Rseq(Drain::TrustTheStop)
            || c.word.load(Ordering::Acquire) & STOP_MASK == 0
        {
            break;
        }
    }
    // take_stopped: the slots below the held count.
    let n = (c.held.load(Ordering::Relaxed) & !(1 << 31)) as usize;
    let mut taken = Vec::new();
    for i in (0..n).rev() {
        taken.push(c.items[i].with(|p| unsafe { *p })); // f(*self.slot(cpu, i))
    }
    // reopen_with(h, 0, cap): cap and held Relaxed, the word Release.
    c.cap.store(reopen_cap, Ordering::Relaxed);
    c.held.store(0, Ordering::Relaxed);
    let word = c.word.load(Ordering::Relaxed);
    c.word.store(
        with_count_and_cap(word, 0, reopen_cap as u64),
        Ordering::Release,
    );
    // return_to_keg (still under the header lock, as in drain_cpus)
    w.keg.lock().unwrap().extend(taken);
    drop(g);
    n
}

// ---- the cap writer: pcpu.rs `set_cap` (the resize pass, on another CPU) ----
fn set_cap(c: &Cpu, cap: u32) {
    let _g = lock_header(c);
    c.cap.store(cap, Ordering::Relaxed);
    let _ = c
        .word
        .fetch_update(Ordering::Release, Ordering::Relaxed, |w| {
            let new = with_count_and_cap(w, count_of(w), cap as u64);
            (new != w).then_some(new)
        });
}

// ---- a user thread: Zone::alloc / Zone::free reduced to stack + keg ----
fn alloc(w: &World, cpu: usize) -> usize {
    let c = &w.cpus[cpu];
    let got = match w.mode {
        Mode::Rseq(_) => rseq_pop(c),
        Mode::Locked => locked_pop(c),
    };
    let item = got.unwrap_or_else(|| w.keg.lock().unwrap().pop().expect("keg empty"));
    let mut live = w.live.lock().unwrap();
    assert!(!live.contains(&item), "item {item} handed out twice");
    live.push(item);
    item
}

fn free(w: &World, cpu: usize, item: usize) {
    {
        let mut live = w.live.lock().unwrap();
        let i = live
            .iter()
            .position(|&x| x == item)
            .expect("freeing a non-live item");
        live.swap_remove(i);
    }
    let c = &w.cpus[cpu];
    let ok = match w.mode {
        Mode::Rseq(_) => rseq_push(c, item),
        Mode::Locked => locked_push(c, item),
    };
    if !ok {
        w.keg.lock().unwrap().push(item);
    }
}

fn check_conservation(w: &World, items: usize) {
    // Everything quiescent: drain both CPUs, then every item must be in the keg exactly once.
    drain(w, 0, STORAGE as u32);
    drain(w, 1, STORAGE as u32);
    assert!(w.live.lock().unwrap().is_empty());
    let mut all = w.keg.lock().unwrap().clone();
    all.sort_unstable();
    assert_eq!(
        all,
        (1..=items).collect::<Vec<_>>(),
        "items lost or duplicated"
    );
    for c in &w.cpus {
        let word = c.word.load(Ordering::Relaxed);
        assert_eq!(count_of(word), 0);
        assert_eq!(
            room_of(word),
            STORAGE as u64,
            "the drain reopens with its cap's room"
        );
        assert_eq!(c.held.load(Ordering::Relaxed), 0, "a stack left stopped");
        assert!(c.lock.try_lock().is_ok(), "a header left locked");
    }
}

fn world(mode: Mode, items: usize, cpu0_preload: &[usize]) -> Arc<World> {
    let w = World {
        cpus: [Cpu::new(STORAGE as u32), Cpu::new(STORAGE as u32)],
        keg: Mutex::new(Vec::new()),
        live: Mutex::new(Vec::new()),
        mode,
    };
    // Items 1..=items; some start on CPU 0's stack (as after earlier frees).
    for (i, &it) in cpu0_preload.iter().enumerate() {
        w.cpus[0].items[i].with_mut(|p| unsafe { *p = it });
    }
    w.cpus[0].word.store(
        with_count_and_cap(0, cpu0_preload.len() as u64, STORAGE as u64),
        Ordering::Relaxed,
    );
    let mut keg = w.keg.lock().unwrap();
    for it in 1..=items {
        if !cpu0_preload.contains(&it) {
            keg.push(it);
        }
    }
    drop(keg);
    Arc::new(w)
}

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b
}

/// Two users on CPU 0 (one of them migrates to CPU 1 for its free) against a drainer of CPU 0.
fn users_vs_drainer(mode: Mode) {
    builder().check(move || {
        // 5 items: the users hold at most 2 and the drainer at most STORAGE in flight, so the
        // keg (standing for depot + slabs, which would map more memory) is never empty.
        let w = world(mode, 5, &[1]);
        let a = {
            let w = w.clone();
            thread::spawn(move || {
                let x = alloc(&w, 0);
                free(&w, 0, x);
            })
        };
        let b = {
            let w = w.clone();
            thread::spawn(move || {
                let x = alloc(&w, 0);
                free(&w, 1, x); // migrated to CPU 1 before freeing
            })
        };
        drain(&w, 0, STORAGE as u32);
        a.join().unwrap();
        b.join().unwrap();
        check_conservation(&w, 5);
    });
}

#[test]
fn rseq_mode_users_vs_remote_drain() {
    users_vs_drainer(Mode::Rseq(Drain::LookAgain));
}

#[test]
fn locked_mode_users_vs_remote_drain() {
    users_vs_drainer(Mode::Locked);
}

/// A user on CPU 0 that allocates two items and frees them again, the second first.
fn two_out_two_back(w: &Arc<World>) -> thread::JoinHandle<()> {
    let w = w.clone();
    thread::spawn(move || {
        let x = alloc(&w, 0);
        let y = alloc(&w, 0);
        free(&w, 0, y);
        free(&w, 0, x);
    })
}

/// A full stack being drained while a user pops and pushes back (items cross the stop), and the
/// drainer reopens with a smaller cap.
fn drain_full_stack(mode: Mode) {
    builder().check(move || {
        let w = world(mode, 5, &[1, 2]);
        let u = two_out_two_back(&w);
        drain(&w, 0, 1);
        u.join().unwrap();
        check_conservation(&w, 5);
    });
}

#[test]
fn rseq_mode_full_stack_drain() {
    drain_full_stack(Mode::Rseq(Drain::LookAgain));
}

#[test]
fn locked_mode_full_stack_drain() {
    drain_full_stack(Mode::Locked);
}

/// Two drainers of the same CPU (DRAIN_CPU and a periodic idle drain, or validate) serialise on
/// the header lock while a user works on the stack.
#[test]
fn rseq_mode_two_drainers() {
    builder().check(|| {
        let w = world(Mode::Rseq(Drain::LookAgain), 4, &[1]);
        let d = {
            let w = w.clone();
            thread::spawn(move || {
                drain(&w, 0, STORAGE as u32);
            })
        };
        let u = {
            let w = w.clone();
            thread::spawn(move || {
                let x = alloc(&w, 0);
                free(&w, 0, x);
            })
        };
        drain(&w, 0, STORAGE as u32);
        d.join().unwrap();
        u.join().unwrap();
        check_conservation(&w, 4);
    });
}

/// A cap change from another CPU (the resize pass lowering a cap) while a user pops and pushes:
/// the change may be lost (a section writes the old room back), but no stack ever has more
/// count + room than its storage, and every item stays in one place.
fn cap_change_vs_user(mode: Mode) {
    builder().check(move || {
        let w = world(mode, 5, &[1]);
        let u = two_out_two_back(&w);
        set_cap(&w.cpus[0], 1);
        u.join().unwrap();
        let word = w.cpus[0].word.load(Ordering::Relaxed);
        assert!(
            count_of(word) + room_of(word) <= STORAGE as u64,
            "count {} + room {} above storage",
            count_of(word),
            room_of(word)
        );
        check_conservation(&w, 5);
    });
}

#[test]
fn rseq_mode_cap_change_vs_user() {
    cap_change_vs_user(Mode::Rseq(Drain::LookAgain));
}

#[test]
fn locked_mode_cap_change_vs_user() {
    cap_change_vs_user(Mode::Locked);
}

/// A drainer that trusts its first stop: loom finds an execution where a section that loaded
/// the word before the stop commits over it, and the drainer then works on a stack that is open
/// again: it reads a slot a section writes (a data race on the slot, which loom reports first),
/// or takes an item a section popped (handed out twice). Kept as a regression check of the model
/// itself: the model must be able to see that bug.
#[test]
fn trusting_the_first_stop_is_caught() {
    let r = std::panic::catch_unwind(|| drain_full_stack(Mode::Rseq(Drain::TrustTheStop)));
    let e = r.expect_err("loom found no execution where a drainer trusting its stop fails");
    let msg = e
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        msg.contains("Concurrent read and write accesses to `UnsafeCell`")
            || msg.contains("handed out twice")
            || msg.contains("items lost or duplicated"),
        "the model failed for another reason: {msg}"
    );
}
