//! The reclaim thread: started lazily, supervised (restarted after a panic), forgotten in a
//! forked child; its loop waits on the watcher and the timers and runs the policy.
//!
//! Orderings of the lifecycle flags (STARTED, THREAD_DISABLED, FORKS, INJECT_PANIC): argued
//! once where they are declared (`reclaimer/mod.rs`); every use here is one side of those pairs.

use super::config::{configure_lazy, configure_sizing, source_settings};
use super::handoff;
use super::*;

/// Called by the runtime's fork handler (`threads.rs`) in a child: it has no reclaim thread;
/// the next zone creation or notification starts one. Only atomics here.
pub(crate) fn after_fork_child() {
    FORKS.fetch_add(1, Ordering::AcqRel);
    STARTED.store(false, Ordering::Release);
    handoff::after_fork_child();
}

/// Starts the reclaim thread if it should run and does not (cheap when it runs: one load).
#[inline]
pub fn ensure_started() {
    if STARTED.load(Ordering::Acquire) || THREAD_DISABLED.load(Ordering::Relaxed) {
        return;
    }
    start_slow();
}

/// Who is deciding whether to start the thread: 0 for nobody, else `(FORKS << 1) | 1` of the
/// decider's process generation. Not a mutex: a decision held by a thread of the parent at the
/// moment of a `fork` would stay held for ever in the child (the parent's thread does not exist
/// there; a child of `c_programs::stress_threads_forks_and_drains` hung on it for 20 minutes),
/// so a child takes over a decision of an older generation.
static DECIDING: AtomicU64 = AtomicU64::new(0);

/// Takes the decision for this process generation, or `None` when a live thread of this
/// generation holds it (it decides; the caller has nothing to wait for). Never waits.
fn take_decision() -> Option<Decision> {
    let gen = FORKS.load(Ordering::Acquire);
    let mine = (gen << 1) | 1;
    let mut cur = DECIDING.load(Ordering::Acquire);
    loop {
        if cur == mine {
            return None; // another thread of this process decides now
        }
        // Free, or held by a thread of an older generation (a parent's, before a fork).
        // Acquire on success: pairs with the Release of the last decider's `drop`, whose flags
        // this decision reads.
        match DECIDING.compare_exchange(cur, mine, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => return Some(Decision),
            Err(now) => cur = now,
        }
    }
}

/// The decision held ([`take_decision`]); given up when dropped.
struct Decision;

impl Drop for Decision {
    fn drop(&mut self) {
        // Release: the flags this decision set are visible to the next decider's Acquire.
        DECIDING.store(0, Ordering::Release);
    }
}

#[cold]
pub(super) fn start_slow() {
    // One decision at a time, made before any flag says so: `running()` never reports a thread
    // that the decision is about to turn down (a test asserting "no reclaim thread" right after
    // setting reclaim_thread=false once saw STARTED set a moment before THREAD_DISABLED). A
    // caller that finds the decision taken leaves it to its taker.
    let Some(_one) = take_decision() else {
        return;
    };
    if STARTED.load(Ordering::Acquire) || THREAD_DISABLED.load(Ordering::Acquire) {
        return;
    }
    options::freeze_startup_reported();
    if !options::get_bool(Tunable::ReclaimThread) {
        THREAD_DISABLED.store(true, Ordering::Release);
        return;
    }
    configure_lazy();
    configure_sizing();
    static SUBSCRIBE: std::sync::Once = std::sync::Once::new();
    SUBSCRIBE.call_once(|| options::subscribe(wake_on_change));
    let gen = FORKS.load(Ordering::Acquire);
    STARTED.store(true, Ordering::Release);
    let opening = crate::lifetime::Opening::new();
    let r = crate::lifetime::with_signals_blocked(|| {
        std::thread::Builder::new()
            .name("ebbtide-reclaim".into())
            .spawn(move || supervise(gen, opening))
    });
    if let Err(e) = r {
        ebbtide_core::error::report(format_args!(
            "ebbtide: cannot start the reclaim thread ({e}); pressure is handled on notify only"
        ));
        THREAD_DISABLED.store(true, Ordering::Release);
        reclaim::configure_lazy(false, 0, 0); // nothing would decay lazily freed pages
    }
}

/// A tunable changed: wake the reclaim thread so that new intervals and thresholds take effect
/// now, not when the sleep computed from the old ones ends.
pub(super) fn wake_on_change(_: Tunable, _: u64) {
    if let Some((_, inj)) = &lock_gated(&SHARED).injector {
        inj.wake();
    }
}

/// Runs the loop, again after a panic; `opening` is dropped once the loop opened its start-up
/// descriptors (`crate::lifetime::Opening`), or when the thread ends without.
pub(super) fn supervise(gen: u64, opening: crate::lifetime::Opening) {
    let mut opening = Some(opening);
    loop {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(gen, &mut opening)));
        match r {
            Ok(()) => return,
            Err(e) => {
                let n = PANICS.fetch_add(1, Ordering::Relaxed) + 1;
                let msg = e
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| e.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                ebbtide_core::error::report(format_args!(
                    "ebbtide: reclaim thread panicked ({msg}); restart {n}/10"
                ));
                // Until the loop is back, notify() applies pressure on the caller's thread.
                lock_gated(&SHARED).injector = None;
                if n >= 10 {
                    ebbtide_core::error::report(format_args!(
                        "ebbtide: reclaim thread stopped after 10 panics; pressure is handled on notify only"
                    ));
                    THREAD_DISABLED.store(true, Ordering::Release);
                    reclaim::configure_lazy(false, 0, 0); // nothing would decay them any more
                    lock_gated(&SHARED).injector = None;
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Detects the sources and opens a watcher on them, publishing its injector and statuses.
pub(super) fn open_watcher(gen: u64) -> Option<Watcher> {
    let watcher = match Watcher::new(pressure::detect(&detect_config())) {
        Ok(w) => {
            super::events::SOURCE_OPENS.fetch_add(1, Ordering::Relaxed);
            Some(w)
        }
        Err(e) => {
            ebbtide_core::error::report(format_args!(
                "ebbtide: pressure watcher unavailable ({e}); periodic work only"
            ));
            None
        }
    };
    let mut sh = lock_gated(&SHARED);
    sh.injector = watcher.as_ref().map(|w| (gen, w.injector()));
    sh.statuses = watcher
        .as_ref()
        .map(|w| w.status().to_vec())
        .unwrap_or_default();
    watcher
}

pub(super) fn run(gen: u64, opening: &mut Option<crate::lifetime::Opening>) {
    let me = crate::lifetime::register_runtime_thread();
    crate::lifetime::open_descriptors();
    let mut settings = source_settings();
    let start = Instant::now();
    // The sources open after `sources_delay_ms` (0: now); a delayed opening is asked of a
    // program thread when one will come by (`handoff.rs`), done here after `FALLBACK` if none.
    let delay = options::get_duration(Tunable::SourcesDelayMs);
    let mut open_at = Some(start + delay);
    let mut awaiting: Option<Instant> = None;
    let mut watcher = None;
    let mut opt_gen = options::global().generation();
    let mut next_periodic = start + options::get_duration(Tunable::TrimIntervalMs);
    let mut next_pools = start + options::get_duration(Tunable::PoolShrinkIntervalMs);
    // The events of one wake-up, with room for more than a wake-up brings (one per source and
    // an explicit one): allocated here, at the thread's start, never when pressure comes.
    let mut events = Vec::with_capacity(64);
    loop {
        if FORKS.load(Ordering::Acquire) != gen {
            return; // we are a stale copy in a forked child (cannot happen: threads do not fork)
        }
        if INJECT_PANIC.swap(false, Ordering::SeqCst) {
            panic!("injected panic (test hook)");
        }
        let now = Instant::now();
        if open_at.is_some_and(|t| now >= t) {
            open_at = None;
            if handoff::on_program_threads() && !delay.is_zero() {
                handoff::request();
                awaiting = Some(now + handoff::FALLBACK);
            } else {
                watcher = open_watcher(gen);
            }
        }
        if let Some(t) = awaiting {
            if let Some(w) = handoff::take(gen) {
                awaiting = None;
                watcher = w;
            } else if now >= t {
                if handoff::withdraw() {
                    awaiting = None;
                    watcher = open_watcher(gen);
                } else {
                    // A program thread took the request and is opening: its watcher comes.
                    awaiting = Some(now + handoff::FALLBACK);
                }
            }
        }
        // The start-up descriptors are open (or the sources wait for `sources_delay_ms`).
        drop(opening.take());
        let mut deadline = next_periodic.min(next_pools);
        if let Some(t) = open_at.or(awaiting) {
            deadline = deadline.min(t);
        }
        if let Some(d) = with_policy(|p| p.next_deadline(now)) {
            deadline = deadline.min(d);
        }
        let timeout = deadline.saturating_duration_since(now);
        events.clear();
        match watcher.as_mut() {
            Some(w) => match w.wait_into(Some(timeout), &mut events) {
                Ok(()) => {}
                Err(e) => {
                    // A program may close descriptors it did not open (closefrom(3) in a
                    // daemon): open the sources again in a second rather than give up. That is
                    // ordinary program behaviour, not worth a line on the program's stderr: the
                    // sources' statuses say it (`ebbtide stat`). Other failures are reported.
                    let why = format!("{e}; opening the sources again in 1 s");
                    if !matches!(e, pressure::SourceError::Lost(_)) {
                        ebbtide_core::error::report(format_args!(
                            "ebbtide: pressure watcher failed ({why})"
                        ));
                    }
                    watcher = None;
                    let mut sh = lock_gated(&SHARED);
                    sh.injector = None;
                    for s in sh.statuses.iter_mut().filter(|s| s.active) {
                        *s = pressure::SourceStatus::inactive(s.kind, why.clone());
                    }
                    drop(sh);
                    open_at = Some(Instant::now() + Duration::from_secs(1));
                }
            },
            None => handoff::sleep(timeout),
        }
        if let Some(w) = watcher.as_ref() {
            // Copied only when changed: a copy allocates (a string per source), and a sleeping
            // program's counters must not move every wake-up (`docs/design/observer.md`).
            let mut sh = lock_gated(&SHARED);
            if sh.statuses.as_slice() != w.status() {
                sh.statuses = w.status().to_vec();
            }
        }
        for ev in events.iter() {
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
            if crate::lifetime::alone() {
                // Every other thread has ended: end too, so that the process ends as it would
                // without us (see `lifetime`).
                crate::lifetime::unregister_runtime_thread(me);
                lock_gated(&SHARED).injector = None;
                THREAD_DISABLED.store(true, Ordering::Release);
                return;
            }
            let now_ms = ebbtide_core::lazy::now_ms();
            reclaim::decay_lazy(now_ms);
            // Free slabs a class keeps beyond its cap for longer than 10 ms go into the lazy
            // decay (the core's `keg/excess.rs`).
            reclaim::release_excess(now_ms);
            reclaim::shrink_pools();
            // A class that became dense made its older chunks huge: collapse them here, not in
            // the allocation that crossed (the core's `keg/huge.rs`).
            reclaim::collapse_pending();
            // Per-CPU capacity follows the misses of the last interval (`sizing.rs`).
            reclaim::resize_pcpu(crate::os::now_ns());
            next_pools = now + options::get_duration(Tunable::PoolShrinkIntervalMs);
        }
        let g = options::global().generation();
        if g != opt_gen {
            opt_gen = g;
            with_policy(|p| p.set_config(policy_config()));
            configure_lazy();
            configure_sizing();
            // New intervals take effect now, not after the old timer fires.
            next_periodic = next_periodic.min(now + options::get_duration(Tunable::TrimIntervalMs));
            next_pools = next_pools.min(now + options::get_duration(Tunable::PoolShrinkIntervalMs));
            let new = source_settings();
            if new != settings {
                settings = new;
                // (An opening asked of a program thread reads the new settings itself.)
                if open_at.is_none() && awaiting.is_none() {
                    drop(watcher.take()); // closes the old sources' descriptors first
                    watcher = open_watcher(gen);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_left_by_a_parent_before_fork_is_taken_over_and_a_live_one_is_not_waited_for() {
        let gen = FORKS.load(Ordering::Acquire);
        // A live decider of this generation: the caller leaves the decision to it, at once.
        DECIDING.store((gen << 1) | 1, Ordering::Release);
        assert!(take_decision().is_none());
        // A decision held when the process forked (an older generation, as a child sees its
        // parent's): taken over.
        DECIDING.store((gen.wrapping_sub(1) << 1) | 1, Ordering::Release);
        let d = take_decision().expect("a ghost decision is taken over");
        assert_eq!(DECIDING.load(Ordering::Acquire), (gen << 1) | 1);
        drop(d);
        assert_eq!(DECIDING.load(Ordering::Acquire), 0);
        assert!(take_decision().is_some());
    }
}
