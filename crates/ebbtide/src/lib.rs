//! ebbtide: kernel-style object caches for userspace that give memory back under pressure.
//!
//! (Design document: filled in with the zone core.)
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(not(loom))]
pub(crate) mod arena;
#[cfg(not(loom))]
pub(crate) mod bucket;
#[cfg(not(loom))]
pub(crate) mod depot;
#[cfg(not(loom))]
pub mod error;
#[cfg(not(loom))]
pub(crate) mod keg;
#[cfg(not(loom))]
pub mod options;
#[cfg(not(loom))]
pub mod os;
#[cfg(not(loom))]
pub(crate) mod pcpu;
#[cfg(not(loom))]
pub mod pressure;
#[cfg(not(loom))]
pub mod reclaim;
#[cfg(not(loom))]
pub(crate) mod registry;
#[cfg(not(loom))]
pub(crate) mod slab;
#[cfg(not(loom))]
pub mod stats;
// Under `--cfg loom` only the loom shim and the pure estimator compile: the rest maps memory
// and keeps `static` locks, which loom cannot model (tests/loom_pcpu.rs models the protocol).
#[cfg_attr(loom, allow(dead_code, unused_imports))]
pub(crate) mod sync;
#[cfg(not(loom))]
pub mod typed;
pub mod wss;
#[cfg(not(loom))]
pub mod zone;

#[cfg(not(loom))]
pub use error::{AllocError, ConfigError, CreateError, InvalidFree, ZoneBusy};
#[cfg(not(loom))]
pub use keg::InvalidKind;
#[cfg(not(loom))]
pub use reclaim::Request;
#[cfg(not(loom))]
pub use typed::{TypedZone, ZBox};
#[cfg(not(loom))]
pub use zone::{LimitMode, Zone, ZoneFlags, ZoneOptions, ZoneSnapshot};

#[cfg(not(loom))]
static CHECKED_DEFAULT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether zones created from now on run in checked mode (the `checked` tunable).
#[cfg(not(loom))]
pub(crate) fn checked_by_default() -> bool {
    CHECKED_DEFAULT.load(std::sync::atomic::Ordering::Relaxed)
}

/// Sets the default of checked mode for zones created from now on.
#[cfg(not(loom))]
pub fn set_checked_by_default(on: bool) {
    CHECKED_DEFAULT.store(on, std::sync::atomic::Ordering::Relaxed);
}
