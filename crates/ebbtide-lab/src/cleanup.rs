//! The global cleanup registry.
//!
//! Everything the lab creates outside its own memory — a cgroup, a swap file, a child
//! process — registers one cleanup action here when it is created and gets back a
//! [`CleanupToken`]. The action runs **exactly once**, whichever comes first:
//!
//! * the owner drops the token (normal end of a variant, or unwinding after a panic);
//! * [`run_all`] is called, which [`install_signal_handlers`] does on SIGINT/SIGTERM before
//!   the process exits with status `128 + signal`.
//!
//! Actions run in reverse order of registration (last created, first removed), so a cgroup
//! with a workload in it goes before the swap file it was swapping to.
//!
//! A panic must unwind for `Drop` to run: do not build experiments with `panic = "abort"`.
//! If an action itself panics, the panic is caught and reported, and the remaining
//! actions still run.
//!
//! A resource is created and registered inside [`creating`], and the signal thread takes the
//! same lock before [`run_all`] and keeps it until the process has exited: so a resource is
//! either registered before the cleanup starts (and removed by it) or never created (its
//! creator waits for the exit). Without it, a Ctrl-C between two steps of an experiment let
//! the next step create its cgroup after the cleanup had run, and the cgroup outlived the run.
//!
//! [`crate::cleanup_leftovers`] (in `leftovers.rs`, above the cgroup and swap modules) is the other half: at start it removes what an earlier run that
//! was killed with SIGKILL (or lost power) left behind, found by name prefix.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, Once};

type Action = Box<dyn FnOnce() + Send + 'static>;

struct Entry {
    id: u64,
    label: String,
    action: Action,
}

struct Registry {
    next_id: u64,
    entries: Vec<Entry>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next_id: 1,
    entries: Vec::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    // A panic while holding the lock cannot leave the Vec half-modified (push/remove are
    // the only operations), so a poisoned lock is still usable.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held while a resource is created and registered, and by the signal thread from the start
/// of its cleanup until the process exits (never given back).
static CREATING: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread is inside [`creating`] (the lock is not re-entrant).
    static IN_CREATING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `create`, which makes a resource and [`register`]s its cleanup, so that the signal
/// cleanup either sees the registration or runs before `create` starts — in which case this
/// call waits for the process to exit and never returns. Nested calls run directly.
pub fn creating<T>(create: impl FnOnce() -> T) -> T {
    if IN_CREATING.with(|c| c.get()) {
        return create();
    }
    // Poisoned only by a panic inside `create`, which left nothing half-registered.
    let _held = CREATING.lock().unwrap_or_else(|e| e.into_inner());
    IN_CREATING.with(|c| c.set(true));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            IN_CREATING.with(|c| c.set(false));
        }
    }
    let _reset = Reset;
    create()
}

/// Proof that a cleanup action is registered. Dropping it runs the action (if
/// [`run_all`] has not already done so).
#[derive(Debug)]
#[must_use = "dropping the token runs the cleanup immediately"]
pub struct CleanupToken {
    id: u64,
}

/// Registers `action` under a human-readable `label` (printed when it runs from a signal or
/// [`run_all`]). Outside [`creating`] it takes the creation lock itself, so a registration
/// after a signal's cleanup began waits for the exit instead of being left behind.
pub fn register(label: impl Into<String>, action: impl FnOnce() + Send + 'static) -> CleanupToken {
    let label = label.into();
    creating(move || register_now(label, Box::new(action)))
}

fn register_now(label: String, action: Action) -> CleanupToken {
    let mut reg = registry();
    let id = reg.next_id;
    reg.next_id += 1;
    reg.entries.push(Entry { id, label, action });
    CleanupToken { id }
}

fn take(id: u64) -> Option<Entry> {
    let mut reg = registry();
    let pos = reg.entries.iter().position(|e| e.id == id)?;
    Some(reg.entries.remove(pos))
}

fn run_entry(entry: Entry, verbose: bool) {
    if verbose {
        eprintln!("ebbtide-lab: cleanup: {}", entry.label);
    }
    let label = entry.label;
    let action = entry.action;
    if catch_unwind(AssertUnwindSafe(action)).is_err() {
        eprintln!("ebbtide-lab: cleanup action panicked: {label}");
    }
}

impl CleanupToken {
    /// Runs the action now. Returns `false` if it had already run (through [`run_all`]).
    pub fn run(self) -> bool {
        // Drop does the work.
        let ran = is_registered(self.id);
        drop(self);
        ran
    }

    /// Removes the action without running it (the resource was handed over or is
    /// already gone).
    pub fn disarm(self) {
        take(self.id);
        std::mem::forget(self);
    }
}

fn is_registered(id: u64) -> bool {
    registry().entries.iter().any(|e| e.id == id)
}

impl Drop for CleanupToken {
    fn drop(&mut self) {
        if let Some(entry) = take(self.id) {
            run_entry(entry, false);
        }
    }
}

/// Runs every registered action now, newest first, and returns how many ran.
/// Tokens whose action ran this way do nothing when dropped later.
pub fn run_all() -> usize {
    let mut n = 0;
    loop {
        // Take one at a time so an action may register or run others without deadlock.
        let entry = registry().entries.pop();
        match entry {
            Some(e) => {
                run_entry(e, true);
                n += 1;
            }
            None => return n,
        }
    }
}

/// The cleanup before an exit: waits for a resource being created to be registered, runs
/// every action, and keeps the creation lock, so nothing is created until the process exits
/// (any later [`creating`] or [`register`] waits for ever). Only for a path that exits next.
fn run_all_for_exit() -> usize {
    let held = CREATING.lock().unwrap_or_else(|e| e.into_inner());
    std::mem::forget(held);
    IN_CREATING.with(|c| c.set(true)); // the actions themselves may register
    run_all()
}

/// Labels of the actions still registered, oldest first.
pub fn pending() -> Vec<String> {
    registry().entries.iter().map(|e| e.label.clone()).collect()
}

static INSTALL: Once = Once::new();

/// Installs SIGINT and SIGTERM handling (once per process): a background thread waits for
/// the signal, runs [`run_all`], and exits the process with status `128 + signal`.
///
/// Children in the same process group receive a terminal's Ctrl-C themselves; children in
/// a lab cgroup are killed by the cgroup's cleanup in any case.
pub fn install_signal_handlers() -> crate::Result<()> {
    let mut result = Ok(());
    INSTALL.call_once(|| {
        use signal_hook::consts::{SIGINT, SIGTERM};
        match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
            Ok(mut signals) => {
                let spawned = std::thread::Builder::new()
                    .name("ebbtide-lab-signals".into())
                    .spawn(move || {
                        if let Some(sig) = signals.forever().next() {
                            let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                            eprintln!("ebbtide-lab: {name} received, cleaning up");
                            let n = run_all_for_exit();
                            eprintln!("ebbtide-lab: {n} cleanup action(s) done, exiting");
                            std::process::exit(128 + sig);
                        }
                    });
                if let Err(e) = spawned {
                    result = Err(crate::Error::Other(format!(
                        "cannot start the signal thread: {e}"
                    )));
                }
            }
            Err(e) => {
                result = Err(crate::Error::Other(format!(
                    "cannot register SIGINT/SIGTERM handlers: {e}"
                )))
            }
        }
    });
    result
}

/// Parses the creator pid out of a lab resource name `<prefix><pid>-...`.
pub(crate) fn owner_pid(name: &str, prefix: &str) -> Option<i32> {
    let rest = name.strip_prefix(prefix)?;
    let pid = rest.split('-').next()?;
    pid.parse().ok().filter(|p: &i32| *p > 0)
}

/// Whether a process with this pid exists (a zombie counts as alive: its parent lives).
pub(crate) fn pid_alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn token_runs_once_on_drop_and_not_again_from_run_all() {
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        let tok = register("test-a", move || {
            c.fetch_add(1, Ordering::SeqCst);
        });
        assert!(pending().iter().any(|l| l == "test-a"));
        drop(tok);
        assert_eq!(count.load(Ordering::SeqCst), 1);
        assert!(!pending().iter().any(|l| l == "test-a"));
    }

    #[test]
    fn disarm_does_not_run() {
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        let tok = register("test-b", move || {
            c.fetch_add(1, Ordering::SeqCst);
        });
        tok.disarm();
        assert_eq!(count.load(Ordering::SeqCst), 0);
        assert!(!pending().iter().any(|l| l == "test-b"));
    }

    #[test]
    fn panicking_action_is_contained() {
        let tok = register("test-c", || panic!("boom in cleanup"));
        assert!(tok.run());
        assert!(!pending().iter().any(|l| l == "test-c"));
    }

    /// In a child process of this test binary (the cleanup before an exit keeps its lock for
    /// ever): a resource whose creation is under way when the cleanup starts is registered
    /// and removed by it, and a creation that starts afterwards never happens.
    #[test]
    fn the_cleanup_before_exit_waits_for_a_creation_and_blocks_later_ones() {
        const MODE: &str = "EBBTIDE_LAB_CLEANUP_EXIT_CHILD";
        if std::env::var_os(MODE).is_some() {
            let removed = Arc::new(AtomicUsize::new(0));
            let (started_tx, started_rx) = std::sync::mpsc::channel();
            let r = removed.clone();
            let creator = std::thread::spawn(move || {
                creating(|| {
                    started_tx.send(()).unwrap();
                    // The cleanup starts while this resource is half made.
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    let tok = register("half-made", move || {
                        r.fetch_add(1, Ordering::SeqCst);
                    });
                    std::mem::forget(tok);
                });
            });
            started_rx.recv().unwrap();
            let n = run_all_for_exit();
            assert!(
                n >= 1,
                "the half-made resource was not cleaned up: {n} action(s)"
            );
            assert_eq!(removed.load(Ordering::SeqCst), 1);
            creator.join().unwrap();
            let (made_tx, made_rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let tok = register("too-late", || {});
                made_tx.send(()).unwrap();
                std::mem::forget(tok);
            });
            let late = made_rx.recv_timeout(std::time::Duration::from_millis(500));
            assert!(
                late.is_err(),
                "a registration after the cleanup went through"
            );
            println!("cleanup-exit-child-ok");
            std::process::exit(0);
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cleanup::tests::the_cleanup_before_exit_waits_for_a_creation_and_blocks_later_ones",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(MODE, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("cleanup-exit-child-ok"),
            "child: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn owner_pid_parses_prefix() {
        assert_eq!(
            owner_pid("ebbtide-lab-123-4-smoke", "ebbtide-lab-"),
            Some(123)
        );
        assert_eq!(owner_pid("ebbtide-lab-x-4", "ebbtide-lab-"), None);
        assert_eq!(owner_pid("other-123", "ebbtide-lab-"), None);
        assert!(pid_alive(std::process::id() as i32));
    }
}
