//! One module's tests at a time: a module's tests may run concurrently among themselves (as in
//! the binary each file was), but a module that switches process- or machine-wide state (THP,
//! cgroups, the zones' registry, the environment) never runs beside another's. Every crate's
//! `tests/all/main.rs` includes this one file by path.

use std::sync::{Condvar, Mutex};

struct State {
    /// The module whose tests run now; `None` when none runs.
    module: Option<&'static str>,
    running: usize,
}

static STATE: Mutex<State> = Mutex::new(State {
    module: None,
    running: 0,
});
static TURN_ENDED: Condvar = Condvar::new();

/// Held by a running test: its module's turn.
pub struct Turn;

/// Waits (sleeping) until no other module's test runs, then holds `module`'s turn.
pub fn turn(module: &'static str) -> Turn {
    // A test that panicked while holding the lock poisoned nothing the state cannot survive:
    // its Turn's drop still ran (unwinding).
    let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
    while s.module.is_some_and(|m| m != module) {
        s = TURN_ENDED.wait(s).unwrap_or_else(|e| e.into_inner());
    }
    s.module = Some(module);
    s.running += 1;
    Turn
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut s = STATE.lock().unwrap_or_else(|e| e.into_inner());
        s.running -= 1;
        if s.running == 0 {
            s.module = None;
            TURN_ENDED.notify_all();
        }
    }
}
