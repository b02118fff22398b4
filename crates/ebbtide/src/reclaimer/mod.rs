//! The reclaim thread: one thread per process that watches every pressure source, runs the
//! policy, and carries out its actions on every zone and page pool.
//!
//! ```text
//!  sources (epoll) ──► Watcher::wait ──► Policy::on_event / tick ──► Actions ──► handlers, then
//!  notify(level) ──► Injector ─┘                                               squeeze / TRIM /
//!  timers: trim_interval_ms ──► periodic_all (WSS update, idle trim)            DRAIN / DRAIN_CPU /
//!          pool_shrink_interval_ms ──► shrink_pools (max_buffer_pages)          buckets on/off
//!                                  ├─► resize_pcpu (per-CPU capacity follows misses,
//!                                  │   within pcpu_budget_bytes)
//!                                  └─► collapse_pending (a class that became dense: its
//!                                      older chunks into huge pages)
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

mod apply;
mod config;
mod events;
mod handlers;
mod handoff;
mod thread;

pub use config::{detect_config, policy_config, source_tunables};
pub(crate) use events::count_map_failure;
pub use events::{
    kind_name, pressure_state, pressure_state_head, with_statuses, PressureState, KIND_NAMES,
};
pub use handlers::{
    register_lowmem_handler, register_lowmem_handler_c, unregister_lowmem_handler,
    unregister_lowmem_handler_c, HandlerId, LowmemHandler,
};
pub use handoff::{open_if_requested, open_on_program_threads, requested as sources_requested};
pub(crate) use thread::after_fork_child;
pub use thread::ensure_started;

use apply::apply;
use events::count_event;
use handlers::run_handlers;

use crate::options::{self, Tunable};
use crate::pressure::{
    self, Actions, BudgetConfig, DetectConfig, Injector, Level, Policy, PolicyConfig, PsiTrigger,
    SourceKind, SourceStatus, Watcher,
};
use crate::reclaim::{self, Request};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// Every critical section here leaves its data consistent: poisoning carries no information.
use ebbtide_core::lock_gated;

// The thread's lifecycle flags. STARTED and THREAD_DISABLED are set (Release / AcqRel swap) by
// the thread that starts or gives up the reclaim thread after it published what goes with them
// (the injector in SHARED, the lazy configuration), and read with Acquire by `notify`, `running`
// and `ensure_started`, which then rely on that state. FORKS counts forks (AcqRel increment in
// the child handler, Acquire loads by the loop and `notify`): a loop or injector of an older
// generation is stale. INJECT_PANIC is a SeqCst test hook (its cost is irrelevant).
static STARTED: AtomicBool = AtomicBool::new(false);
static THREAD_DISABLED: AtomicBool = AtomicBool::new(false);
static PANICS: AtomicU64 = AtomicU64::new(0);
static LEVEL: AtomicU8 = AtomicU8::new(0);
static FORKS: AtomicU64 = AtomicU64::new(0);
static INJECT_PANIC: AtomicBool = AtomicBool::new(false);

/// Test hook: the reclaim loop panics once at its next iteration (to test recovery).
#[doc(hidden)]
pub fn inject_panic_for_test() {
    // SeqCst: the test hook's flag (see the lifecycle flags above).
    INJECT_PANIC.store(true, Ordering::SeqCst);
    if let Some((_, inj)) = &lock_gated(&SHARED).injector {
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

/// The current pressure level (as the policy holds it).
pub fn level() -> Level {
    Level::from_u8(LEVEL.load(Ordering::Relaxed)).unwrap_or(Level::Normal)
}

/// Reports memory pressure explicitly (xenbus `reclaim_memory`'s analogue): the reclaim thread
/// applies the policy for `level` at once; without a reclaim thread it is applied on this thread
/// before returning. Never lost: a notify while the thread is busy is kept as a pending maximum.
/// `Level::Normal` ends the pressure state at once (level Normal, an open squeeze window closed,
/// buckets enabled, rate limits reset), on this thread.
pub fn notify(level: Level) {
    count_event(SourceKind::Explicit, level);
    if level == Level::Normal {
        // An explicit Normal ends the pressure state at once: the policy starts afresh (level
        // Normal, squeeze window closed, buckets back on, rate limits cleared) instead of
        // waiting for the hold to decay.
        reclaim::end_squeeze();
        apply::forget_squeeze();
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
    // Acquire: pairs with the lifecycle flags' Release stores (see the statics above).
    let gen = FORKS.load(Ordering::Acquire);
    if !THREAD_DISABLED.load(Ordering::Acquire) && STARTED.load(Ordering::Acquire) {
        let sh = lock_gated(&SHARED);
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
    let mut sh = lock_gated(&SHARED);
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

/// Panics of the reclaim thread so far.
pub fn panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// Whether the reclaim thread is running (or starting).
pub fn running() -> bool {
    // Acquire: pairs with the lifecycle flags' Release stores (see the statics above).
    STARTED.load(Ordering::Acquire) && !THREAD_DISABLED.load(Ordering::Acquire)
}
