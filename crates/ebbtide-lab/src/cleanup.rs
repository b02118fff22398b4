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
//! [`crate::cleanup_leftovers`] (in `leftovers.rs`, above the cgroup and swap modules) is the other half: at start it removes what an earlier run that
//! was killed with SIGKILL (or lost power) left behind, found by name prefix.

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

/// Proof that a cleanup action is registered. Dropping it runs the action (if
/// [`run_all`] has not already done so).
#[derive(Debug)]
#[must_use = "dropping the token runs the cleanup immediately"]
pub struct CleanupToken {
    id: u64,
}

/// Registers `action` under a human-readable `label` (printed when it runs from a signal or
/// [`run_all`]).
pub fn register(label: impl Into<String>, action: impl FnOnce() + Send + 'static) -> CleanupToken {
    let mut reg = registry();
    let id = reg.next_id;
    reg.next_id += 1;
    reg.entries.push(Entry {
        id,
        label: label.into(),
        action: Box::new(action),
    });
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
                            let n = run_all();
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
