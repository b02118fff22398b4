#!/usr/bin/env bash
# The project's test command (README). Runs every test suite: Rust unit and integration tests
# (including the C API tests and the root-only cgroup/swap/PSI tests, which skip with a message
# when not root), then the loom model of the per-CPU protocol when it exists.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
echo "== cargo test --workspace"
cargo test --workspace --no-fail-fast
echo "== the README's main command resolves (its argument parsing, not the experiment)"
cargo run -q -p ebbtide-cli -- lab blkback --help > /dev/null
if [ -f crates/ebbtide-core/tests/loom_pcpu.rs ]; then
  echo "== loom model of the per-CPU cache protocol"
  RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
    cargo test --release -p ebbtide-core --test loom_pcpu --lib --target-dir target/loom 2>&1 | tail -n 30
fi
