//! The integration tests of this crate, one binary (one link of the crate and its
//! dependencies instead of one per file). Each module is a former test file; its tests run
//! concurrently among themselves but never beside another module's (`serial`), as when
//! each file was a binary of its own. Files that need a process of their own stay outside
//! (their first line says why).

mod address_space;
mod c_programs;
mod contention;
mod example_global_allocator;
mod hot_text;
mod huge_classes;
mod hugepage_heap;
mod large_blocks;
mod real_programs;
#[path = "../../../ebbtide-core/tests/support/serial.rs"]
mod serial;
mod shadow_model;
mod thp_always;
mod trust;
