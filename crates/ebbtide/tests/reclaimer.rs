// A test binary of its own, outside tests/all/: the pressure state and the reclaim thread are the process's.
//! The reclaim thread end to end: explicit pressure at each level, the squeeze of page pools,
//! idle give-back without pressure, low-memory handlers, panic recovery, fork.
//! One test binary, tests serialised: pressure state is process-wide.

use ebbtide::{options, pressure, Level, PagePool, Zone, ZoneOptions};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// Serialises the tests and starts each from a calm state: level Normal, buckets enabled,
/// default rate limits.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Only explicit pressure here: the machine's real signals (tested in pressure_e2e) would
    // trim caches behind these tests' backs. Start-up only: takes effect before the first zone.
    let _ = options::set("sources", "none");
    options::set("level_hold_ms", "0").unwrap();
    let _z = Zone::new(ZoneOptions::new("rt-calm", 8)).unwrap(); // the reclaim thread runs
    wait_until(Duration::from_secs(5), || {
        pressure::current_level() == Level::Normal && ebbtide::reclaim::buckets_enabled()
    })
    .expect("pressure state calms down");
    // A short hold throughout: the policy derives the level from the last event's time, so a
    // long hold would revive an earlier test's level.
    for (k, v) in [
        ("level_hold_ms", "200"),
        ("trim_min_interval_ms", "0"),
        ("drain_min_interval_ms", "0"),
        ("drain_cpu_min_interval_ms", "0"),
    ] {
        options::set(k, v).unwrap();
    }
    g
}

/// Allocates `n` items, touches them, frees them: they stay cached.
fn burst(z: &Zone, n: usize) {
    let v: Vec<NonNull<u8>> = (0..n).map(|_| z.alloc().unwrap()).collect();
    for p in &v {
        // SAFETY: items of ours.
        unsafe { p.as_ptr().write_bytes(0xee, z.item_size()) };
    }
    for p in v {
        // SAFETY: valid frees.
        unsafe { z.free(p).unwrap() };
    }
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return Some(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn mapped(z: &Zone) -> u64 {
    z.snapshot().mapped_bytes
}

#[test]
fn critical_drains_everything_and_disables_buckets_until_the_level_decays() {
    let _s = serial();
    options::set("level_hold_ms", "400").unwrap();
    let z = Zone::new(ZoneOptions::new("rt-critical", 128)).unwrap();
    burst(&z, 100_000);
    assert!(mapped(&z) >= 100_000 * 128);
    assert!(
        ebbtide::reclaimer::running(),
        "the first zone starts the reclaim thread"
    );
    pressure::notify(Level::Critical);
    let took = wait_until(Duration::from_secs(2), || {
        mapped(&z) == 0 && !ebbtide::reclaim::buckets_enabled()
    })
    .expect("all memory back and buckets disabled after Critical");
    eprintln!(
        "Critical → all of {} KiB back in {took:?}",
        100_000 * 128 / 1024
    );
    assert_eq!(pressure::current_level(), Level::Critical);
    assert!(
        !ebbtide::reclaim::buckets_enabled(),
        "buckets disabled while Critical"
    );
    // While Critical, frees go straight to the slabs: nothing is cached.
    let p = z.alloc().unwrap();
    // SAFETY: valid free.
    unsafe { z.free(p).unwrap() };
    assert_eq!(z.snapshot().cached_items_pcpu, 0);
    // The level decays after level_hold_ms and buckets come back.
    wait_until(Duration::from_secs(5), || {
        ebbtide::reclaim::buckets_enabled()
    })
    .expect("buckets re-enabled");
    assert_eq!(pressure::current_level(), Level::Normal);
    let snap = ebbtide::stats::collect();
    assert!(snap.global.events_explicit >= 1 && snap.global.pressure_events >= 1);
    assert_eq!(snap.global.last_event_source, "explicit");
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn moderate_squeezes_page_pools_to_zero_at_once() {
    let _s = serial();
    options::set("squeeze_ms", "50").unwrap();
    let pool = PagePool::new("rt-pool", 1024).unwrap();
    let ps = ebbtide::os::page_size();
    let pages: Vec<_> = (0..600).map(|_| pool.get().unwrap()).collect();
    for p in &pages {
        // SAFETY: pages of ours.
        unsafe { p.as_ptr().write_bytes(1, ps) };
    }
    let keep = pages[0];
    for p in &pages[1..] {
        // SAFETY: valid puts.
        unsafe { pool.put(*p).unwrap() };
    }
    // Under the cap (1024): the periodic shrink keeps them.
    std::thread::sleep(Duration::from_millis(250));
    let g = ebbtide::stats::collect().global;
    assert!(
        pool.snapshot().free_pages >= 599,
        "{:?} last event {} level {} ({} ms ago), level now {:?}",
        pool.snapshot(),
        g.last_event_source,
        g.last_event_level,
        g.last_event_ms_ago,
        pressure::current_level()
    );
    pressure::notify(Level::Moderate);
    let took = wait_until(Duration::from_secs(2), || pool.snapshot().free_pages == 0)
        .expect("pool squeezed to 0");
    eprintln!("Moderate → pool squeezed from 599 free pages to 0 in {took:?}");
    let s = pool.snapshot();
    assert_eq!(s.pages_in_use, 1, "pages in use are never released");
    // SAFETY: the page in use is intact.
    assert!(unsafe { std::slice::from_raw_parts(keep.as_ptr(), ps) }
        .iter()
        .all(|&b| b == 1));
    assert!(s.zone.squeeze_windows >= 1);
    // SAFETY: valid put.
    unsafe { pool.put(keep).unwrap() };
    options::set("squeeze_ms", "10").unwrap();
    pool.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn idle_memory_goes_back_without_pressure() {
    let _s = serial();
    options::set("trim_interval_ms", "300").unwrap();
    let z = Zone::new(ZoneOptions::new("rt-idle", 64)).unwrap();
    burst(&z, 200_000);
    let before = mapped(&z);
    assert!(before >= 200_000 * 64);
    // No allocation at all from now on: within a few periods everything cached goes back.
    let took =
        wait_until(Duration::from_secs(5), || mapped(&z) == 0).expect("idle cache given back");
    eprintln!(
        "idle: {} KiB back in {took:?} with trim_interval_ms=300",
        before / 1024
    );
    assert!(took <= Duration::from_millis(300 * 5), "took {took:?}");
    options::set("trim_interval_ms", "2000").unwrap();
    z.destroy().map_err(|e| e.1).unwrap();
}

static HANDLED: AtomicUsize = AtomicUsize::new(0);
fn handler(level: Level) {
    if level >= Level::Low {
        HANDLED.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn lowmem_handlers_run_before_reclaim() {
    let _s = serial();
    let z = Zone::new(ZoneOptions::new("rt-handler", 64)).unwrap();
    assert!(pressure::register_lowmem_handler(handler));
    let before = HANDLED.load(Ordering::SeqCst);
    pressure::notify(Level::Low);
    wait_until(Duration::from_secs(2), || {
        HANDLED.load(Ordering::SeqCst) > before
    })
    .expect("handler called");
    assert!(pressure::unregister_lowmem_handler(handler));
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn the_reclaim_thread_survives_a_panic_and_pressure_is_still_handled() {
    let _s = serial();
    let z = Zone::new(ZoneOptions::new("rt-panic", 256)).unwrap();
    let before = ebbtide::reclaimer::panics();
    ebbtide::reclaimer::inject_panic_for_test();
    wait_until(Duration::from_secs(2), || {
        ebbtide::reclaimer::panics() > before
    })
    .expect("panic caught and counted");
    std::thread::sleep(Duration::from_millis(200)); // restarted after 100 ms
    burst(&z, 20_000);
    assert!(mapped(&z) > 0);
    pressure::notify(Level::Critical);
    wait_until(Duration::from_secs(3), || mapped(&z) == 0)
        .expect("pressure handled after the restart");
    wait_until(Duration::from_secs(3), || {
        ebbtide::reclaim::buckets_enabled()
    })
    .expect("level decayed");
    z.destroy().map_err(|e| e.1).unwrap();
}

#[test]
fn a_forked_child_allocates_and_starts_its_own_reclaim_thread() {
    let _s = serial();
    let z = Zone::new(ZoneOptions::new("rt-fork", 64)).unwrap();
    burst(&z, 10_000);
    // SAFETY: fork in a test: the child only uses the allocator (async-signal-unsafe code is
    // acceptable here because the child is a test of exactly that), then _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = std::panic::catch_unwind(|| {
            burst(&z, 10_000);
            pressure::notify(Level::Critical);
            let back = wait_until(Duration::from_secs(3), || mapped(&z) == 0).is_some();
            back && ebbtide::reclaimer::running()
        })
        .unwrap_or(false);
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    z.reclaim(ebbtide::Request::DrainCpu);
    z.destroy().map_err(|e| e.1).unwrap();
}

/// Waits up to `limit` for child `pid` to end and returns its wait status; `None`, the child
/// killed and reaped, if it had not ended by then.
fn wait_child(pid: libc::pid_t, limit: Duration) -> Option<i32> {
    let t = Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: polling our own child.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            return Some(status);
        }
        if t.elapsed() > limit {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn process_exit_never_waits_for_the_reclaim_thread() {
    let _s = serial();
    // SAFETY: fork in a test; the child only uses the allocator and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let z = Zone::new(ZoneOptions::new("rt-exit", 64)).unwrap();
        burst(&z, 1000);
        pressure::notify(Level::Low);
        std::mem::forget(z);
        // A normal exit (atexit handlers, stdio flush) with the reclaim thread in epoll_wait.
        std::process::exit(0);
    }
    let status =
        wait_child(pid, Duration::from_secs(5)).expect("the child did not exit within 5 s");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status:#x}"
    );
}

/// A child forked while another thread holds one of the runtime's process-wide locks (the
/// reclaimer's shared state, its handler table, the control socket's event ring, the options
/// registry's write lock) takes them again: they are held only inside the fork gate
/// (`ebbtide::lock_gated`), so a fork waits until they are free. Taken outside it, a child
/// inherited whichever was held at the fork, by a thread it does not have, and waited on it
/// for ever.
#[test]
fn a_child_forked_while_another_thread_holds_a_runtime_lock_takes_it_again() {
    let _s = serial();
    let _z = Zone::new(ZoneOptions::new("rt-fork-locks", 64)).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let holder = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                take_runtime_locks("holding the ring");
            }
        })
    };
    for round in 0..300 {
        // SAFETY: fork in a test; the child takes the runtime's locks and exits at once.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            take_runtime_locks("in the child");
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        let Some(status) = wait_child(pid, Duration::from_secs(5)) else {
            stop.store(true, Ordering::Relaxed);
            panic!("fork {round}: the child hung on a lock held at the fork");
        };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "fork {round}: status {status:#x}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    holder.join().unwrap();
}

/// Takes four of the runtime's process-wide locks in turn: the reclaimer's shared state, the
/// control socket's event ring (recording `what`), the options registry's write lock (setting
/// the value it already has: nothing changes) and the handler table.
fn take_runtime_locks(what: &str) {
    let _ = std::hint::black_box(ebbtide::reclaimer::pressure_state());
    ebbtide::control::events::record("test", what);
    options::set("headroom_repeat_ms", "500").unwrap();
    if pressure::register_lowmem_handler(fork_handler) {
        pressure::unregister_lowmem_handler(fork_handler);
    }
}

fn fork_handler(_: Level) {}
