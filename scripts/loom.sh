#!/usr/bin/env bash
# Model-checks the per-CPU stacks with loom: the real code of pcpu.rs in locked mode against a
# remote drain (the crate's `--lib` tests under `--cfg loom`: pcpu::loom_tests) and the rseq
# protocol, which loom cannot run as assembly, as a restatement (tests/loom_pcpu.rs). Under `--cfg loom` the
# crate compiles only its sync shim and the pure estimator, so the build is small; a separate
# target dir keeps the loom build from invalidating the normal one. About 25 s after the first
# build (first build about 2 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}" \
    cargo test --release -p ebbtide-core --test loom_pcpu --lib
