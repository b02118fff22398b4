//! The integration tests of this crate, one binary (one link of the crate and its
//! dependencies instead of one per file). Each module is a former test file; its tests run
//! concurrently among themselves but never beside another module's (`serial`), as when
//! each file was a binary of its own. Files that need a process of their own stay outside
//! (their first line says why).

mod c_bench;
mod malloc_bench;
mod pack_bench;
#[path = "../../../ebbtide-core/tests/support/serial.rs"]
mod serial;
