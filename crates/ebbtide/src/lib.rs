//! ebbtide: kernel-style object caches for userspace that give memory back under pressure.
//!
//! (Design document: filled in with the zone core.)
#![deny(unsafe_op_in_unsafe_fn)]

pub(crate) mod arena;
pub(crate) mod bucket;
pub(crate) mod depot;
pub(crate) mod keg;
pub(crate) mod pcpu;
pub mod os;
pub(crate) mod slab;
pub(crate) mod sync;
pub mod wss;
