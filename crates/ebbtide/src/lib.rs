//! # ebbtide
//!
//! Kernel-style object caches for userspace processes that give memory back when the system or
//! the container runs short. This crate is the runtime and the public facade over two layers:
//!
//! ```text
//!   ebbtide           runtime: reclaim thread, release helper, options, stats and their
//!   (this crate)      formats, control socket; re-exports what users need
//!     │        │
//!     ▼        ▼
//!   ebbtide-core    ebbtide-pressure    the no-allocation allocator core (zones, per-CPU
//!                                       caches, depot, slabs, page pools, reclaim entry points)
//!                                       and the pressure signals and level policy; neither
//!                                       knows the other
//! ```
//!
//! Cargo enforces the direction: the core and the pressure crate cannot name anything above
//! them. The core knows nothing of threads, options or pressure: at load time this crate
//! installs its hooks ([`ebbtide_core::runtime`]): zone creation reads the configuration and
//! starts the runtime's threads (a malloc starts them lazily instead, [`start_threads`]), a failed mapping is counted as a pressure
//! event, and the release helper is a thread of this crate running the core's
//! [`ebbtide_core::release::serve_forever`].
//!
//! The design of the allocator itself (objects, allocation and reclaim orders, locks,
//! invariants) is the documentation of [`ebbtide_core`].
//!
//! ## Modules of this crate
//! Layer order (bottom first): options, library_code, lifetime, reclaimer, threads, stats, control, abi.
//!
//! | module | what |
//! |---|---|
//! | [`options`] | the tunables: one table, environment, run-time changes |
//! | `library_code` | whose code a thread runs: the library's own allocations never abort ([`LibraryCode`]) |
//! | [`reclaimer`] | the reclaim thread: pressure sources → policy → reclaim requests |
//! | `threads` | the runtime's lazily started threads and their one fork handler |
//! | [`stats`] | statistics defined once: struct, JSON, Prometheus, `vmstat -z` table, C header |
//! | [`control`] | the per-process control socket (requests, server thread) |
//! | [`abi`] | `docs/ABI/` generated from the code (tunables, stats, control requests) |
//!
//! Each module names only modules before it (`tests/all/layers.rs`); the crate root holds the
//! facade (`pressure`, the re-exports) and the hooks it installs into the core.
//!
//! ## Locks of the runtime (outermost first)
//! | lock | owner | protects |
//! |---|---|---|
//! | `APPLY` | `reclaimer` | one policy step carried out at a time (reclaim thread vs. `notify` callers); held over the core's reclaim locks |
//! | `SQUEEZE_APPLIED` | `reclaimer` | the end of the last squeeze window applied; taken under `APPLY` |
//! | `SHARED` | `reclaimer` | the policy, the watcher's injector and source statuses; never held while taking another lock |
//! | `HANDLERS` | `reclaimer` | low-memory handlers; copied out, never held while they run |
//! | options registry locks | `options` | values (committed in batches) and change callbacks; callbacks run after the lock is dropped |
//! | control server state | `control` | the listener and connections; its thread takes no allocator lock |
//!
//! Each is taken inside the core's fork gate (`ebbtide::lock_gated`), as are the control
//! socket's event ring and the C API's registries: a
//! fork waits until they are free, so a child never inherits one held by a thread it does not
//! have (`tests/reclaimer.rs`,
//! `a_child_forked_while_another_thread_holds_a_runtime_lock_takes_it_again`).
//!
//! Below all of these: the core's locks (reclaim mutex → registry → zone limit / header → depot
//! → keg → arena), see [`ebbtide_core`].
#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
pub mod control;
mod library_code;
mod lifetime;
pub mod options;
pub mod reclaimer;
pub mod stats;
mod threads;

// The core's modules, under the paths users and tools have always used.
pub use ebbtide_core::{
    error, os, page_pool, pcpu, reclaim, release, runtime, sizing, typed, wss, zone,
};

pub use ebbtide_core::{
    lock, lock_gated, AllocError, ConfigError, CreateError, Gated, InvalidFree, InvalidKind,
    LimitMode, PagePool, PcpuMode, PoolSnapshot, Request, TypedZone, ZBox, Zone, ZoneBusy,
    ZoneFlags, ZoneOptions, ZoneSnapshot,
};

/// Memory pressure: the signals and the policy ([`ebbtide_pressure`]), and the process-wide
/// entry points of the reclaim thread that serves them.
pub mod pressure {
    pub use ebbtide_pressure::*;

    pub use crate::reclaimer::{
        level as current_level, register_lowmem_handler, unregister_lowmem_handler,
    };

    /// Reports memory pressure explicitly (xenbus `reclaim_memory`'s analogue): the reclaim
    /// thread applies the policy for `level` at once; without a reclaim thread it is applied
    /// on this thread before returning. `Level::Normal` ends the pressure state at once. Starts
    /// the runtime's threads first if they do not run (e.g. in a forked child that has created
    /// no zone yet). See [`crate::reclaimer::notify`].
    pub fn notify(level: Level) {
        crate::threads::start_runtime();
        crate::reclaimer::notify(level);
    }
}

pub use library_code::{in_library_code, LibraryCode};
pub use pressure::Level;

/// Lazily freed pages (`MADV_FREE` without pressure, decayed to `MADV_DONTNEED`): the core's
/// settings and figures ([`ebbtide_core::lazy`]) and the calls that walk every zone.
pub mod lazy {
    pub use ebbtide_core::lazy::*;
    pub use ebbtide_core::reclaim::{
        configure_lazy as configure, decay_lazy as decay_all, purge_lazy_all as purge_all,
    };
}

/// Whether zones created from now on run in checked mode (the `checked` tunable).
pub fn checked_by_default() -> bool {
    ebbtide_core::runtime::checked_by_default()
}

/// Sets the default of checked mode for zones created from now on.
pub fn set_checked_by_default(on: bool) {
    ebbtide_core::runtime::set_checked_by_default(on)
}

/// How the per-CPU caches synchronise in this process (rseq, or locked as a fallback).
pub fn pcpu_mode() -> pcpu::Mode {
    ebbtide_core::pcpu_mode()
}

/// The runtime's hooks, installed into the core when the program (or this library) is loaded.
static HOOKS: ebbtide_core::runtime::Hooks = ebbtide_core::runtime::Hooks {
    before_create: threads::before_zone_create,
    map_failure: reclaimer::count_map_failure,
};

/// Installs the runtime's hooks into the core (idempotent; no allocation, no thread). Runs at
/// load time in every program that links this crate as an rlib or a shared object; a C program
/// linked against the static library calls it through the C API's entry points.
pub fn install_runtime() {
    ebbtide_core::runtime::install(&HOOKS);
}

/// Starts the runtime now, as the first zone creation does: reads the configuration (once per
/// process), starts the reclaim and release threads that should run and do not, and with them
/// the control socket when it is configured. May allocate and start threads: never call it
/// from inside an allocation that holds a lock. (A malloc calls [`prepare_runtime`] at load
/// and [`start_threads`] later; see `docs/design/lazy-runtime.md`.)
pub fn start_runtime() {
    prepare_runtime();
    threads::start_runtime();
}

/// Everything [`start_runtime`] does but the reclaim and release threads: the hooks installed,
/// the configuration read and pushed into the core (`checked`, `abort_on_error`, ...), the fork
/// handlers registered, and the control socket started if it is configured (it asked for a
/// thread). For a malloc's load-time constructor: the process stays single-threaded.
pub fn prepare_runtime() {
    install_runtime();
    threads::prepare_runtime();
    // The configuration is read now: serve the control socket if it asks for one (a zone
    // creation gets this through the tunable's change callback, subscribed at load time; a
    // malloc's constructor may run before that subscription).
    control::install();
}

/// The reclaim and release threads, started if they should run and do not (the configuration
/// is read first if it was not). The control socket is not started here: it starts with the
/// configuration ([`prepare_runtime`]), and not again in a forked child (most children `exec`
/// at once, and each would leave a socket file behind; a child that wants one calls
/// [`control::start`]). May allocate and start threads: a malloc calls it from an allocation's
/// slow path only where it holds no lock (`docs/design/lazy-runtime.md`).
pub fn start_threads() {
    install_runtime();
    threads::start_runtime();
}

extern "C" fn install_hooks() {
    install_runtime();
}

// A load-time constructor: it only stores a pointer (no allocation, no thread), so it is safe at
// any point of process start. Linked in whenever this crate is (rustc keeps `#[used]` statics of
// every linked rlib).
#[used]
#[link_section = ".init_array"]
static INSTALL_HOOKS: extern "C" fn() = install_hooks;
