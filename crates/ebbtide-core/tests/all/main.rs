//! The integration tests of this crate, one binary (one link of the crate and its
//! dependencies instead of one per file). Each module is a former test file; its tests run
//! concurrently among themselves but never beside another module's (`serial`), as when
//! each file was a binary of its own. Files that need a process of their own stay outside
//! (their first line says why).

mod ascending;
mod bucket_option;
mod contention;
mod double_free;
mod excess_delay;
mod idle_decay;
mod layers;
mod pool_stash;
mod reuse_caps;
mod rseq_fence;
#[path = "../support/serial.rs"]
mod serial;
mod stress;
mod typed_zone;
mod zone_model;
mod zone_objects;
