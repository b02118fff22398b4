//! One guest per test binary: booted by the first test that asks, reused by the others (their
//! jobs run one at a time), booted again if a job killed it. The reaper ends it with the process.

use std::sync::{Mutex, MutexGuard};

use crate::availability::require;
use crate::vm::{Vm, VmConfig, VmError};

/// The guest of this process for `cfg` (the first caller's configuration wins: one guest kind
/// per static), or `None` when the test is to skip (see [`require`]). Panics when booting fails
/// where the VM must work.
pub fn guest<'a>(
    slot: &'a Mutex<Option<Vm>>,
    test: &str,
    cfg: &VmConfig,
) -> Option<MutexGuard<'a, Option<Vm>>> {
    let mut g = slot.lock().unwrap_or_else(|e| e.into_inner());
    if g.as_ref().is_some_and(|vm| vm.alive()) {
        return Some(g);
    }
    *g = None;
    match Vm::boot(cfg) {
        Ok(vm) => {
            eprintln!(
                "{test}: guest {} booted in {:.1} s (host wall time)",
                vm.kernel,
                vm.boot_time.as_secs_f64()
            );
            *g = Some(vm);
            Some(g)
        }
        Err(VmError::Unavailable(u)) => {
            require::<()>(test, Err(u))?;
            None
        }
        Err(e) => panic!("{test}: booting the guest failed: {e}"),
    }
}
