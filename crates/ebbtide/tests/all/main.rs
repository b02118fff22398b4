//! The integration tests of this crate, one binary (one link of the crate and its
//! dependencies instead of one per file). Each module is a former test file; its tests run
//! concurrently among themselves but never beside another module's (`serial`), as when
//! each file was a binary of its own. Files that need a process of their own stay outside
//! (their first line says why).

mod abi_docs;
mod control_abi;
mod control_props;
mod huge_pages;
mod layers;
mod options_props;
mod pressure_cgroup;
mod pressure_detect;
mod pressure_e2e;
mod pressure_parsers;
mod pressure_psi;
mod pressure_systemd;
mod prometheus_promtool;
#[path = "../../../ebbtide-core/tests/support/serial.rs"]
mod serial;
mod zone_api;
