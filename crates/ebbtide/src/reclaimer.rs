//! The reclaim thread: one thread per process that watches every pressure source, runs the
//! policy, and carries out its actions on every zone and page pool.
//!
//! ```text
//!  sources (epoll) ──► Watcher::wait ──► Policy::on_event / tick ──► Actions ──► handlers, then
//!  notify(level) ──► Injector ─┘                                               squeeze / TRIM /
//!  timers: trim_interval_ms ──► periodic_all (WSS update, idle trim)            DRAIN / DRAIN_CPU /
//!          pool_shrink_interval_ms ──► shrink_pools (max_buffer_pages)          buckets on/off
//! ```
//!
//! * Started lazily by the first zone (and again in a forked child, whose first zone operation
//!   starts it), unless the `reclaim_thread` tunable is off; then [`notify`] applies the policy
//!   on the caller's thread and nothing runs in the background.
//! * A panic inside the loop is caught, reported on stderr and counted; the loop restarts after
//!   100 ms (sources re-detected). After 10 panics the thread stops and [`notify`] falls back to
//!   the synchronous path, so pressure is still handled.
//! * The thread is detached: process exit never waits for it.
//! * Low-memory handlers registered with [`register_lowmem_handler`] run on the reclaim thread
//!   (or the notifying thread) before the allocator reclaims, with the new level. They must not
//!   block for long, must not create or destroy zones, and may allocate and free.

use crate::options::{self, Tunable};
use crate::pressure::{
    self, Actions, BudgetConfig, DetectConfig, Injector, Level, Policy, PolicyConfig, PsiTrigger,
    SourceKind, SourceStatus, Watcher,
};
use crate::reclaim::{self, Request};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static STARTED: AtomicBool = AtomicBool::new(false);
static THREAD_DISABLED: AtomicBool = AtomicBool::new(false);
static PANICS: AtomicU64 = AtomicU64::new(0);
static LEVEL: AtomicU8 = AtomicU8::new(0);
/// Events per source kind, in [`kind_index`] order, then the total.
static EVENTS: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];
static LAST_EVENT: AtomicU64 = AtomicU64::new(0); // kind << 8 | level, +1 (0 = none)
static LAST_EVENT_NS: AtomicU64 = AtomicU64::new(0);
static FORKS: AtomicU64 = AtomicU64::new(0);
static INJECT_PANIC: AtomicBool = AtomicBool::new(false);

/// Test hook: the reclaim loop panics once at its next iteration (to test recovery).
#[doc(hidden)]
pub fn inject_panic_for_test() {
    INJECT_PANIC.store(true, Ordering::SeqCst);
    if let Some((_, inj)) = &crate::sync::lock(&SHARED).injector {
        inj.inject(Level::Normal);
    }
}

struct Shared {
    injector: Option<(u64, Injector)>,
    statuses: Vec<SourceStatus>,
    policy: Option<Policy>,
}

static SHARED: Mutex<Shared> = Mutex::new(Shared {
    injector: None,
    statuses: Vec::new(),
    policy: None,
});

/// Index of a source kind in the event counters (and the stats names).
fn kind_index(k: SourceKind) -> usize {
    match k {
        SourceKind::Systemd => 0,
        SourceKind::Psi => 1,
        SourceKind::CgroupV1Level => 2,
        SourceKind::Headroom => 3,
        SourceKind::MemoryEvents => 4,
        SourceKind::Budget => 5,
        SourceKind::Explicit => 6,
    }
}
const MMAP_FAILURE: usize = 7;
const KIND_NAMES: [&str; 8] = [
    "systemd",
    "psi",
    "cgroup1",
    "headroom",
    "events",
    "budget",
    "explicit",
    "mmap_failure",
];

const MAX_HANDLERS: usize = 16;

/// A low-memory handler with the C ABI: called with the level (0..=3) and its argument.
pub type LowmemHandler = unsafe extern "C" fn(level: core::ffi::c_int, arg: *mut core::ffi::c_void);

#[derive(Clone, Copy)]
struct Handler {
    f: Option<LowmemHandler>,
    rust: Option<fn(Level)>,
    arg: usize,
}
static HANDLERS: Mutex<[Handler; MAX_HANDLERS]> = Mutex::new(
    [Handler {
        f: None,
        rust: None,
        arg: 0,
    }; MAX_HANDLERS],
);

/// Identifies a registered handler (for [`unregister_lowmem_handler_c`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandlerId(usize);

/// Registers a low-memory handler (UMA's `vm_lowmem` event): called with the new level before
/// the allocator reclaims, on the reclaim thread (or the thread calling [`notify`] when there is
/// no reclaim thread). No allocator lock is held while it runs: it may allocate and free, but must
/// not create or destroy zones and should return quickly. At most 16; `false` when full.
pub fn register_lowmem_handler(f: fn(Level)) -> bool {
    add_handler(Handler {
        f: None,
        rust: Some(f),
        arg: 0,
    })
    .is_some()
}

/// Removes a handler registered before; returns whether it was found.
pub fn unregister_lowmem_handler(f: fn(Level)) -> bool {
    let mut hs = crate::sync::lock(&HANDLERS);
    for h in hs.iter_mut() {
        if h.rust.is_some_and(|g| g as usize == f as usize) {
            *h = Handler {
                f: None,
                rust: None,
                arg: 0,
            };
            return true;
        }
    }
    false
}

/// The C form of [`register_lowmem_handler`]: `f(level, arg)`. `None` when 16 are registered.
pub fn register_lowmem_handler_c(
    f: LowmemHandler,
    arg: *mut core::ffi::c_void,
) -> Option<HandlerId> {
    add_handler(Handler {
        f: Some(f),
        rust: None,
        arg: arg as usize,
    })
}

/// Removes a handler registered with [`register_lowmem_handler_c`].
pub fn unregister_lowmem_handler_c(id: HandlerId) -> bool {
    let mut hs = crate::sync::lock(&HANDLERS);
    match hs.get_mut(id.0) {
        Some(h) if h.f.is_some() => {
            *h = Handler {
                f: None,
                rust: None,
                arg: 0,
            };
            true
        }
        _ => false,
    }
}

fn add_handler(new: Handler) -> Option<HandlerId> {
    let mut hs = crate::sync::lock(&HANDLERS);
    let i = hs.iter().position(|h| h.f.is_none() && h.rust.is_none())?;
    hs[i] = new;
    Some(HandlerId(i))
}

fn run_handlers(level: Level) {
    // Copy out so no lock is held while handlers run (they may register or unregister).
    let hs = *crate::sync::lock(&HANDLERS);
    for h in hs {
        if let Some(f) = h.rust {
            f(level);
        }
        if let Some(f) = h.f {
            // SAFETY: the registrant vouches that `f` may be called with `arg` from the reclaim
            // thread (documented on register_lowmem_handler_c).
            unsafe { f(level as core::ffi::c_int, h.arg as *mut core::ffi::c_void) };
        }
    }
}

/// The current pressure level (as the policy holds it).
pub fn level() -> Level {
    Level::from_u8(LEVEL.load(Ordering::Relaxed)).unwrap_or(Level::Normal)
}

/// Reports memory pressure explicitly (xenbus `reclaim_memory`'s analogue): the reclaim thread
/// applies the policy for `level` at once; without a reclaim thread it is applied on this thread
/// before returning. Never lost: a notify while the thread is busy is kept as a pending maximum.
/// `Level::Normal` ends the pressure state at once (level Normal, buckets enabled, rate limits
/// reset), on this thread.
pub fn notify(level: Level) {
    count_event(SourceKind::Explicit, level);
    ensure_started();
    if level == Level::Normal {
        // An explicit Normal ends the pressure state at once: the policy starts afresh (level
        // Normal, buckets back on, rate limits cleared) instead of waiting for the hold to decay.
        let now = Instant::now();
        let (actions, epoch) = decide(|p| {
            *p = Policy::new(policy_config());
            // Actions decided before this reset are stale from now on (see `decide`).
            POLICY_EPOCH.fetch_add(1, Ordering::Relaxed);
            p.tick(now)
        });
        apply(&actions, epoch, now);
        return;
    }
    let gen = FORKS.load(Ordering::Acquire);
    if !THREAD_DISABLED.load(Ordering::Acquire) && STARTED.load(Ordering::Acquire) {
        let sh = crate::sync::lock(&SHARED);
        if let Some((g, inj)) = &sh.injector {
            if *g == gen {
                inj.inject(level);
                return;
            }
        }
    }
    // No reclaim thread (disabled, not up yet, restarting, or stopped after panics): apply here.
    let now = Instant::now();
    let (actions, epoch) = decide(|p| {
        p.tick(now);
        p.on_event(level, now)
    });
    apply(&actions, epoch, now);
}

/// Runs `f` on the one policy of the process (shared by the thread and the synchronous path, so
/// the level and the rate limits are the same whoever applies them).
fn with_policy<R>(f: impl FnOnce(&mut Policy) -> R) -> R {
    let mut sh = crate::sync::lock(&SHARED);
    let p = sh
        .policy
        .get_or_insert_with(|| Policy::new(policy_config()));
    f(p)
}

/// Bumped (under the policy's lock) whenever an explicit Normal resets the policy.
static POLICY_EPOCH: AtomicU64 = AtomicU64::new(0);

/// Runs a policy step and returns its actions with the epoch they were decided in (read under
/// the same lock as the step). [`apply`] drops actions of an older epoch: a thread that decided
/// "Critical: buckets off" just before an explicit Normal must not carry that out after the
/// Normal's own actions (found by the CLI end-to-end test: `pressure critical` then `pressure
/// normal` could leave buckets disabled).
fn decide(f: impl FnOnce(&mut Policy) -> Actions) -> (Actions, u64) {
    with_policy(|p| {
        let a = f(p);
        (a, POLICY_EPOCH.load(Ordering::Relaxed))
    })
}

fn count_event(kind: SourceKind, level: Level) {
    count_index(kind_index(kind), level);
}

fn count_index(i: usize, level: Level) {
    EVENTS[i].fetch_add(1, Ordering::Relaxed);
    EVENTS[8].fetch_add(1, Ordering::Relaxed);
    LAST_EVENT.store(((i as u64) << 8 | level as u64) + 1, Ordering::Relaxed);
    LAST_EVENT_NS.store(crate::os::now_ns(), Ordering::Relaxed);
}

/// A failed mapping was handled (DRAIN_CPU and a retry): counted as a Critical event.
pub(crate) fn count_map_failure() {
    count_index(MMAP_FAILURE, Level::Critical);
}

extern "C" fn after_fork_child() {
    // The child has no reclaim thread: the next zone operation starts one. Only atomics here.
    FORKS.fetch_add(1, Ordering::AcqRel);
    STARTED.store(false, Ordering::Release);
}

/// Starts the reclaim thread if it should run and does not (cheap when it runs: one load).
#[inline]
pub fn ensure_started() {
    if STARTED.load(Ordering::Acquire) || THREAD_DISABLED.load(Ordering::Relaxed) {
        return;
    }
    start_slow();
}

#[cold]
fn start_slow() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let errors = options::freeze_startup();
    for e in errors {
        crate::error::report(format_args!(
            "ebbtide: ignoring the environment's settings: {e}"
        ));
    }
    if !options::get_bool(Tunable::ReclaimThread) {
        THREAD_DISABLED.store(true, Ordering::Release);
        return;
    }
    configure_lazy();
    static ATFORK: std::sync::Once = std::sync::Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a child handler that only touches atomics (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    });
    let gen = FORKS.load(Ordering::Acquire);
    let r = std::thread::Builder::new()
        .name("ebbtide-reclaim".into())
        .spawn(move || supervise(gen));
    if let Err(e) = r {
        crate::error::report(format_args!(
            "ebbtide: cannot start the reclaim thread ({e}); pressure is handled on notify only"
        ));
        THREAD_DISABLED.store(true, Ordering::Release);
        crate::lazy::configure(false, 0, 0); // nothing would decay lazily freed pages
    }
}

fn supervise(gen: u64) {
    loop {
        let r = std::panic::catch_unwind(|| run(gen));
        match r {
            Ok(()) => return,
            Err(e) => {
                let n = PANICS.fetch_add(1, Ordering::Relaxed) + 1;
                let msg = e
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| e.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                crate::error::report(format_args!(
                    "ebbtide: reclaim thread panicked ({msg}); restart {n}/10"
                ));
                // Until the loop is back, notify() applies pressure on the caller's thread.
                crate::sync::lock(&SHARED).injector = None;
                if n >= 10 {
                    crate::error::report(format_args!(
                        "ebbtide: reclaim thread stopped after 10 panics; pressure is handled on notify only"
                    ));
                    THREAD_DISABLED.store(true, Ordering::Release);
                    crate::sync::lock(&SHARED).injector = None;
                    crate::lazy::configure(false, 0, 0); // nothing would decay them any more
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Policy settings from the tunables.
pub fn policy_config() -> PolicyConfig {
    PolicyConfig {
        trim_min_interval_ms: options::get_u64(Tunable::TrimMinIntervalMs),
        squeeze_ms: options::get_u64(Tunable::SqueezeMs),
        drain_min_interval_ms: options::get_u64(Tunable::DrainMinIntervalMs),
        drain_cpu_min_interval_ms: options::get_u64(Tunable::DrainCpuMinIntervalMs),
        level_hold_ms: options::get_u64(Tunable::LevelHoldMs),
    }
}

/// Source detection settings from the tunables.
pub fn detect_config() -> DetectConfig {
    let src = options::sources();
    let mut cfg = DetectConfig::default();
    cfg.systemd.enabled = src.contains("systemd");
    cfg.psi.enabled = src.contains("psi");
    let window = options::get_u64(Tunable::PsiWindowUs);
    cfg.psi.low = Some(PsiTrigger::some(
        options::get_u64(Tunable::PsiLowStallUs),
        window,
    ));
    cfg.psi.moderate = Some(PsiTrigger::some(
        options::get_u64(Tunable::PsiModerateStallUs),
        window,
    ));
    cfg.psi.critical = Some(PsiTrigger::full(
        options::get_u64(Tunable::PsiCriticalStallUs),
        window,
    ));
    cfg.v1_level.enabled = src.contains("cgroup1");
    cfg.headroom.enabled = src.contains("headroom");
    cfg.headroom.low_free = options::get_u64(Tunable::HeadroomLowPct) as f64 / 100.0;
    cfg.headroom.moderate_free = options::get_u64(Tunable::HeadroomModeratePct) as f64 / 100.0;
    cfg.headroom.critical_free = options::get_u64(Tunable::HeadroomCriticalPct) as f64 / 100.0;
    cfg.headroom.min_interval_ms = options::get_u64(Tunable::HeadroomMinIntervalMs);
    cfg.headroom.max_interval_ms = options::get_u64(Tunable::HeadroomMaxIntervalMs);
    cfg.headroom.repeat_ms = options::get_u64(Tunable::HeadroomRepeatMs);
    // The cgroup's usage counts our MADV_FREE'd pages until the kernel takes them, which it does
    // first and without I/O: not pressure. Pages still settling are not excluded: the kernel can
    // only swap those (measured: excluding them let the quick blkback run reach its limit at
    // start, where lazily given-up pool pages hid the growth from the headroom source).
    cfg.headroom_exclude = Some(Arc::new(crate::lazy::lazy_bytes));
    cfg.memory_events.enabled = src.contains("events");
    let budget = options::get_u64(Tunable::MaxCachedBytes);
    if src.contains("budget") && budget > 0 {
        let held: pressure::HeldBytes = Arc::new(reclaim::cached_bytes);
        cfg.budget = Some((
            BudgetConfig {
                max_cached_bytes: budget,
                ..BudgetConfig::default()
            },
            held,
        ));
    }
    cfg
}

/// The tunables [`detect_config`] reads: when any of them changes at run time, the reclaim thread
/// detects and opens its sources again, so new thresholds and intervals take effect at once.
const SOURCE_TUNABLES: &[Tunable] = &[
    Tunable::Sources,
    Tunable::PsiWindowUs,
    Tunable::PsiLowStallUs,
    Tunable::PsiModerateStallUs,
    Tunable::PsiCriticalStallUs,
    Tunable::HeadroomLowPct,
    Tunable::HeadroomModeratePct,
    Tunable::HeadroomCriticalPct,
    Tunable::HeadroomMinIntervalMs,
    Tunable::HeadroomMaxIntervalMs,
    Tunable::HeadroomRepeatMs,
    Tunable::MaxCachedBytes,
];

fn source_settings() -> [u64; SOURCE_TUNABLES.len()] {
    core::array::from_fn(|i| options::get_u64(SOURCE_TUNABLES[i]))
}

/// Detects the sources and opens a watcher on them, publishing its injector and statuses.
fn open_watcher(gen: u64) -> Option<Watcher> {
    let watcher = match Watcher::new(pressure::detect(&detect_config())) {
        Ok(w) => Some(w),
        Err(e) => {
            crate::error::report(format_args!(
                "ebbtide: pressure watcher unavailable ({e}); periodic work only"
            ));
            None
        }
    };
    let mut sh = crate::sync::lock(&SHARED);
    sh.injector = watcher.as_ref().map(|w| (gen, w.injector()));
    sh.statuses = watcher
        .as_ref()
        .map(|w| w.status().to_vec())
        .unwrap_or_default();
    watcher
}

fn run(gen: u64) {
    let mut settings = source_settings();
    let mut watcher = open_watcher(gen);
    let mut opt_gen = options::global().generation();
    let start = Instant::now();
    let mut next_periodic = start + options::get_duration(Tunable::TrimIntervalMs);
    let mut next_pools = start + options::get_duration(Tunable::PoolShrinkIntervalMs);
    loop {
        if FORKS.load(Ordering::Acquire) != gen {
            return; // we are a stale copy in a forked child (cannot happen: threads do not fork)
        }
        if INJECT_PANIC.swap(false, Ordering::SeqCst) {
            panic!("injected panic (test hook)");
        }
        let now = Instant::now();
        let mut deadline = next_periodic.min(next_pools);
        if let Some(d) = with_policy(|p| p.next_deadline(now)) {
            deadline = deadline.min(d);
        }
        let timeout = deadline.saturating_duration_since(now);
        let events = match watcher.as_mut() {
            Some(w) => match w.wait(Some(timeout)) {
                Ok(ev) => ev,
                Err(e) => {
                    crate::error::report(format_args!(
                        "ebbtide: pressure watcher failed ({e}); periodic work only"
                    ));
                    watcher = None;
                    crate::sync::lock(&SHARED).injector = None;
                    Vec::new()
                }
            },
            None => {
                std::thread::sleep(timeout);
                Vec::new()
            }
        };
        if let Some(w) = watcher.as_ref() {
            crate::sync::lock(&SHARED).statuses = w.status().to_vec();
        }
        for ev in events {
            if ev.kind != SourceKind::Explicit {
                count_event(ev.kind, ev.level);
            }
            let (a, epoch) = decide(|p| p.on_event(ev.level, ev.at));
            apply(&a, epoch, Instant::now());
        }
        let now = Instant::now();
        let (a, epoch) = decide(|p| p.tick(now));
        apply(&a, epoch, now);
        if now >= next_periodic {
            reclaim::periodic_all(crate::os::now_ns());
            next_periodic = now + options::get_duration(Tunable::TrimIntervalMs);
        }
        if now >= next_pools {
            crate::lazy::decay_all(crate::lazy::now_ms());
            reclaim::shrink_pools();
            next_pools = now + options::get_duration(Tunable::PoolShrinkIntervalMs);
        }
        let g = options::global().generation();
        if g != opt_gen {
            opt_gen = g;
            with_policy(|p| p.set_config(policy_config()));
            configure_lazy();
            // New intervals take effect now, not after the old timer fires.
            next_periodic = next_periodic.min(now + options::get_duration(Tunable::TrimIntervalMs));
            next_pools = next_pools.min(now + options::get_duration(Tunable::PoolShrinkIntervalMs));
            let new = source_settings();
            if new != settings {
                settings = new;
                drop(watcher.take()); // closes the old sources' descriptors first
                watcher = open_watcher(gen);
            }
        }
    }
}

static SQUEEZE_APPLIED: Mutex<Option<Instant>> = Mutex::new(None);
/// The policy's last bucket decision: 0 none yet, 1 enabled, 2 disabled.
static BUCKETS_DECISION: AtomicU8 = AtomicU8::new(0);

static APPLY: Mutex<()> = Mutex::new(());
thread_local! {
    static IN_APPLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Carries out the policy's actions (also used on the synchronous path). Serialised: the reclaim
/// thread and a thread calling [`notify`] must not interleave (a slow Critical drain could
/// otherwise overwrite a later Normal's "buckets on"). A handler that notifies from inside runs
/// its actions at once rather than waiting for itself.
fn apply(a: &Actions, epoch: u64, now: Instant) {
    if IN_APPLY.with(|f| f.get()) {
        return apply_locked(a, now);
    }
    let _g = crate::sync::lock(&APPLY);
    // Relaxed suffices: the epoch is written under the policy lock, which the Normal's own apply
    // took (and released) before it took APPLY; whoever holds APPLY after it sees the bump.
    if epoch != POLICY_EPOCH.load(Ordering::Relaxed) {
        return; // decided before an explicit Normal reset the policy (see `decide`)
    }
    IN_APPLY.with(|f| f.set(true));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_APPLY.with(|f| f.set(false));
        }
    }
    let _reset = Reset;
    apply_locked(a, now);
}

fn apply_locked(a: &Actions, now: Instant) {
    let prev = LEVEL.swap(a.level as u8, Ordering::Relaxed);
    crate::lazy::set_pressure(a.level > Level::Normal);
    let new_squeeze = match a.squeeze_until {
        Some(until) if until > now => {
            let mut last = crate::sync::lock(&SQUEEZE_APPLIED);
            if last.is_none_or(|l| until > l) {
                *last = Some(until);
                Some(until - now)
            } else {
                None
            }
        }
        _ => None,
    };
    // Renewing an open window (every signal while the cgroup reclaims, as the kernel's shrinker
    // runs on every reclaim pass) costs two atomics; only opening one runs handlers and drains.
    let renewed = new_squeeze.is_some_and(|d| reclaim::renew_squeeze(d.as_nanos() as u64));
    if a.any_reclaim() || (new_squeeze.is_some() && !renewed) || a.level as u8 > prev {
        run_handlers(a.level);
    }
    if let Some(d) = new_squeeze.filter(|_| !renewed) {
        reclaim::squeeze(d.as_nanos() as u64);
        reclaim::shrink_pools();
    }
    // Disabling buckets drains every CPU itself (DRAIN_CPU): do it first, once. Only a change of
    // the policy's own decision is carried out, so an explicit `set_buckets_enabled` by the
    // application is not undone at the next tick.
    let mut drained_cpus = false;
    let decision = if a.buckets_enabled { 1 } else { 2 };
    let previous = BUCKETS_DECISION.swap(decision, Ordering::Relaxed);
    if previous != decision && (previous != 0 || !a.buckets_enabled) {
        reclaim::set_buckets_enabled(a.buckets_enabled);
        drained_cpus = !a.buckets_enabled;
    }
    if a.drain_cpu && !drained_cpus {
        reclaim::reclaim_all(Request::DrainCpu);
    } else if a.drain && !drained_cpus {
        reclaim::reclaim_all(Request::Drain);
    } else if a.trim {
        reclaim::reclaim_all(Request::Trim);
    }
}

/// Fills the pressure part of a statistics snapshot.
pub(crate) fn fill_stats(s: &mut crate::stats::Snapshot) {
    let g = &mut s.global;
    g.pressure_level = LEVEL.load(Ordering::Relaxed) as u64;
    g.pressure_events = EVENTS[8].load(Ordering::Relaxed);
    g.events_systemd = EVENTS[0].load(Ordering::Relaxed);
    g.events_psi = EVENTS[1].load(Ordering::Relaxed);
    g.events_cgroup1 = EVENTS[2].load(Ordering::Relaxed);
    g.events_headroom = EVENTS[3].load(Ordering::Relaxed);
    g.events_events = EVENTS[4].load(Ordering::Relaxed);
    g.events_budget = EVENTS[5].load(Ordering::Relaxed);
    g.events_explicit = EVENTS[6].load(Ordering::Relaxed);
    g.events_mmap_failure = EVENTS[7].load(Ordering::Relaxed);
    let last = LAST_EVENT.load(Ordering::Relaxed);
    if last != 0 {
        let v = last - 1;
        g.last_event_source = KIND_NAMES[(v >> 8) as usize % 8].to_string();
        g.last_event_level = v & 0xff;
        g.last_event_ms_ago =
            crate::os::now_ns().saturating_sub(LAST_EVENT_NS.load(Ordering::Relaxed)) / 1_000_000;
    }
    let sh = crate::sync::lock(&SHARED);
    let thread = if THREAD_DISABLED.load(Ordering::Relaxed) {
        "reclaim thread off (reclaim_thread=false, failed to start, or stopped after panics)"
    } else if !STARTED.load(Ordering::Relaxed) {
        "reclaim thread not started yet (no zone created)"
    } else {
        ""
    };
    // One entry per kind: PSI and cgroup v1 register one source per level.
    let mut sources: Vec<crate::stats::SourceStats> = Vec::new();
    for st in &sh.statuses {
        let name = KIND_NAMES[kind_index(st.kind)];
        match sources.iter_mut().find(|s| s.name == name) {
            Some(s) => {
                if st.active {
                    s.active = true;
                    s.reason.clear();
                } else if !s.active && !s.reason.contains(&st.detail) {
                    s.reason = format!("{}; {}", s.reason, st.detail);
                }
            }
            None => sources.push(crate::stats::SourceStats {
                name: name.to_string(),
                active: st.active,
                reason: if st.active {
                    String::new()
                } else {
                    st.detail.clone()
                },
            }),
        }
    }
    s.sources = sources;
    if s.sources.is_empty() && !thread.is_empty() {
        s.sources.push(crate::stats::SourceStats {
            name: "explicit".into(),
            active: true,
            reason: String::new(),
        });
        for n in ["systemd", "psi", "cgroup1", "headroom", "events", "budget"] {
            s.sources.push(crate::stats::SourceStats {
                name: n.into(),
                active: false,
                reason: thread.into(),
            });
        }
    }
}

/// Lazily freed pages (`MADV_FREE`) only with a reclaim thread, which decays them.
fn configure_lazy() {
    crate::lazy::configure(
        options::get_bool(Tunable::LazyFree),
        options::get_u64(Tunable::LazySettleMs),
        options::get_u64(Tunable::LazyDecayMs),
    );
}

/// Panics of the reclaim thread so far.
pub fn panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// Whether the reclaim thread is running (or starting).
pub fn running() -> bool {
    STARTED.load(Ordering::Acquire) && !THREAD_DISABLED.load(Ordering::Acquire)
}
