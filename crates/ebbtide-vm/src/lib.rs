//! A stock kernel in a VM for ebbtide's tests: cgroup v2, PSI, swap, systemd as PID 1.
//!
//! Our machines run the cgroup v1 memory controller; our users run Debian's, Fedora's, RHEL's
//! kernels with the unified v2 hierarchy, PSI, THP `always` and systemd ≥ 254. This crate boots
//! such a kernel under `qemu-system-x86_64` (TCG: this host's `/dev/kvm` cannot run a stock
//! kernel) so the tests see the real kernel's files instead of files our tests wrote.
//!
//! # Objects, in the order a test meets them
//!
//! - [`Images`] ([`images`]): the kernel, initramfs and (for systemd cases) Debian trixie root
//!   that `scripts/vm/build.sh` builds once per machine into a cache directory outside the
//!   repository (`/var/cache/ebbtide-vm`, keyed by the versions of its inputs), installing the
//!   Debian packages it needs when root.
//! - [`Vm`] ([`vm`]): one running guest. Its root is a tmpfs overlay over a read-only 9p share
//!   (the host's `/` — so host-built binaries and Debian's programs run unchanged at the same
//!   paths — or the trixie root with the host's `/` at `/host`); a per-VM work directory is
//!   shared read-write at [`GUEST_WORK`]; a sparse raw virtio disk is its swap. The guest's agent
//!   (`scripts/vm/agent.sh`) runs one [`Job`] at a time, asked over a serial line; output and
//!   exit status come back through the work directory.
//! - [`Job`]/[`Output`] ([`job`]): a shell script, the uid it runs as, a time limit.
//! - [`availability`]: whether a test may skip. Where qemu cannot be had it says why; under CI
//!   (`CI=true`) and as root (our machines) the VM must work, so failing to boot is a failure.
//! - [`shared`]: one guest per test binary, booted on first use, jobs serialized.
//!
//! # Lifetime
//!
//! A guest always ends: [`Vm`]'s `Drop` asks the agent to power off and kills qemu if it has
//! not gone within a few seconds; a job past its limit kills the guest; and every qemu has a
//! reaper process holding a pipe from the test process, so when the test process ends in any way
//! (including a `static` guest that is never dropped, or SIGKILL) the reaper kills qemu and
//! removes the VM's runtime directory.

pub mod availability;
pub mod images;
pub mod job;
pub mod shared;
pub mod vm;

pub use availability::{require, Unavailable};
pub use images::Images;
pub use job::{Job, Output};
pub use vm::{Vm, VmConfig, VmError, GUEST_WORK};
