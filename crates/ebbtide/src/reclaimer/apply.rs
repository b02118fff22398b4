//! Carrying out the policy's actions: handlers, then one `reclaim::respond` per step,
//! serialised between the reclaim thread and `notify` callers.

use super::*;

pub(super) static SQUEEZE_APPLIED: Mutex<Option<Instant>> = Mutex::new(None);

/// The policy's last bucket decision: 0 none yet, 1 enabled, 2 disabled.
pub(super) static BUCKETS_DECISION: AtomicU8 = AtomicU8::new(0);

pub(super) static APPLY: Mutex<()> = Mutex::new(());

thread_local! {
    static IN_APPLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Carries out the policy's actions (also used on the synchronous path). Serialised: the reclaim
/// thread and a thread calling [`notify`] must not interleave (a slow Critical drain could
/// otherwise overwrite a later Normal's "buckets on"). A handler that notifies from inside runs
/// its actions at once rather than waiting for itself.
pub(super) fn apply(a: &Actions, epoch: u64, now: Instant) {
    if IN_APPLY.with(|f| f.get()) {
        return apply_locked(a, now);
    }
    // Inside the fork gate while APPLY is held: a fork waits until it is free, so a child
    // never inherits it held by a thread it does not have (its `notify` and its own reclaim
    // thread then waited on it for ever: `reclaimer.rs`, process_exit_never_waits...). The
    // gate nests (the core's reclaim entry points below enter it again).
    let _g = lock_gated(&APPLY);
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

pub(super) fn apply_locked(a: &Actions, now: Instant) {
    let prev = LEVEL.swap(a.level as u8, Ordering::Relaxed);
    ebbtide_core::lazy::set_pressure(a.level > Level::Normal);
    let new_squeeze = match a.squeeze_until {
        Some(until) if until > now => {
            let mut last = lock_gated(&SQUEEZE_APPLIED);
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
    let opened = new_squeeze.filter(|_| !renewed);
    if a.any_reclaim() || opened.is_some() || a.level as u8 > prev {
        run_handlers(a.level);
    }
    // Only a change of the policy's own bucket decision is carried out, so an explicit
    // `set_buckets_enabled` by the application is not undone at the next tick.
    let decision = if a.buckets_enabled { 1 } else { 2 };
    let previous = BUCKETS_DECISION.swap(decision, Ordering::Relaxed);
    let buckets = (previous != decision && (previous != 0 || !a.buckets_enabled))
        .then_some(a.buckets_enabled);
    let request = if a.drain_cpu {
        Some(Request::DrainCpu)
    } else if a.drain {
        Some(Request::Drain)
    } else if a.trim {
        Some(Request::Trim)
    } else {
        None
    };
    // One call: a squeeze, buckets going off and a DRAIN_CPU share one pass over the CPUs (one
    // membarrier per CPU per event).
    reclaim::respond(reclaim::Response {
        squeeze_ns: opened.map(|d| d.as_nanos() as u64),
        buckets_enabled: buckets,
        request,
    });
    if opened.is_some() {
        reclaim::shrink_pools();
    }
}

/// An explicit Normal closed the window: the next window opened is new, whatever its end.
pub(super) fn forget_squeeze() {
    *lock_gated(&SQUEEZE_APPLIED) = None;
}
