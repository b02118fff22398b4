//! ebbtide: kernel-style object caches for userspace that give memory back under pressure.
//!
//! (Design document: filled in with the zone core.)
#![deny(unsafe_op_in_unsafe_fn)]
pub mod pressure;
