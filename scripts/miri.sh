#!/usr/bin/env bash
# Runs the part of ebbtide's unit tests that Miri can execute: the pure modules (working-set
# estimator, slab geometry, bucket size table, pressure policy and parsers, stats and options
# code). Everything that maps memory (arena, keg, zones, per-CPU stacks: mmap with PROT_NONE +
# mprotect/madvise, rseq, membarrier) or reads /proc and cgroup files is out of Miri's reach.
#
# Usage: scripts/miri.sh            (skips with a message when the nightly Miri is not installed)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "miri.sh: skipped: 'cargo +nightly miri' is not installed" \
        "(rustup component add --toolchain nightly miri rust-src)"
    exit 0
fi
cargo +nightly miri setup >/dev/null

# Test-name prefixes of the crates' `--lib` tests that Miri runs (measured on the 2-core
# machine: 39 tests in about 30 s, 50 s with setup and build checks). Left out, and why:
#   options::parse::tests, options::abi::tests, options::tests, stats::tests_emit,
#   pressure::policy::tests::storm_is_bounded   -> run but take > 60 s each under Miri
#   pressure::headroom::tests::v1_unlimited_is_inactive -> statx (file access) under isolation
#   arena, keg, bucket (kegs), os, pcpu, zone, pressure file/watcher tests -> mmap/mprotect,
#   madvise, rseq, membarrier, /proc and cgroup files
# One list per crate (the modules moved into ebbtide-core and ebbtide-pressure).
CORE=(
    wss::tests
    slab::tests
    bucket::tests::table_matches_uma
)
PRESSURE=(
    policy::tests
    level::tests
    budget::tests
    psi::tests
    cgroup_v1_event::tests
    memory_events::tests
    headroom::tests::threshold_math
    headroom::tests::interval_shrinks
    systemd::tests::base64
)
RUNTIME=(
    stats::c::tests
    stats::prometheus::tests
    stats::tests::
)
cargo +nightly miri test -p ebbtide-core --lib -- "${CORE[@]}"
cargo +nightly miri test -p ebbtide-pressure --lib -- "${PRESSURE[@]}" --skip storm_is_bounded
cargo +nightly miri test -p ebbtide --lib -- "${RUNTIME[@]}"
