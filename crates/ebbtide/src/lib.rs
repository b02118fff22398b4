//! ebbtide: kernel-style object caches for userspace that give memory back under pressure.
//!
//! (Design document: filled in with the zone core.)
#![deny(unsafe_op_in_unsafe_fn)]

pub(crate) mod arena;
pub(crate) mod bucket;
pub mod control;
pub(crate) mod depot;
pub mod error;
pub(crate) mod keg;
pub mod options;
pub mod os;
pub mod pressure;
pub(crate) mod pcpu;
pub mod reclaim;
pub(crate) mod registry;
pub(crate) mod slab;
pub mod stats;
pub(crate) mod sync;
pub mod wss;
pub mod zone;

pub use error::{AllocError, ConfigError, CreateError, InvalidFree, ZoneBusy};
pub use keg::InvalidKind;
pub use reclaim::Request;
pub use zone::{LimitMode, Zone, ZoneFlags, ZoneOptions, ZoneSnapshot};

static CHECKED_DEFAULT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether zones created from now on run in checked mode (the `checked` tunable).
pub(crate) fn checked_by_default() -> bool {
    CHECKED_DEFAULT.load(std::sync::atomic::Ordering::Relaxed)
}

/// Sets the default of checked mode for zones created from now on.
pub fn set_checked_by_default(on: bool) {
    CHECKED_DEFAULT.store(on, std::sync::atomic::Ordering::Relaxed);
}
