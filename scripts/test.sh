#!/usr/bin/env bash
# The project's test command (README): `bash scripts/test.sh`.
#
# 1. What the tests need (scripts/deps.sh): installed when run as root, listed otherwise.
# 2. Every stage, each run even when an earlier one failed, each reported:
#    * cargo test --workspace (Rust unit and integration tests, the C API tests, the root-only
#      cgroup/swap/PSI tests, the stock kernel's VM): built once and run in two lanes by
#      scripts/cargo-test.sh (the VM's binary beside the ones that mostly wait);
#    * the lints (cargo clippy with the workspace's [workspace.lints]);
#    * the README's main command resolves (its argument parsing, not the experiment);
#    * the loom model of the per-CPU cache protocol.
# 3. The summary, last line: `N passed, N failed` (`, N skipped` when tests skipped), counting
#    the stages' tests; exit status 1 if anything failed.
#
# A test skips only when what it needs is missing on this machine; it then appends a line to
# $EBBTIDE_TEST_SKIPS (crates/ebbtide/tests/support/skip.rs), and is counted here as skipped,
# not passed. Under CI (`CI` set, .ci/run) a skip is a failure instead.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

bash scripts/deps.sh || exit 1
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ebbtide-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
export EBBTIDE_TEST_SKIPS="$work/skips"
: > "$EBBTIDE_TEST_SKIPS"

passed=0
failed=0
report=()

# stage NAME COMMAND...: run it (output shown as it comes and kept), count its tests from
# cargo's `test result:` lines (a command without them is one test: its exit status).
stage() {
  local name=$1
  shift
  local log="$work/stage.log"
  echo "== $name"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f
  p=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1/p' "$log" |
    awk '{s += $1} END {print s + 0}')
  f=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\2/p' "$log" |
    awk '{s += $1} END {print s + 0}')
  if ! grep -q '^test result: ' "$log"; then
    if [ "$rc" = 0 ]; then p=1; else f=1; fi
  elif [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    # It failed outside any test (a build error, a crashed test binary): one failure.
    f=1
  fi
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$rc" = 0 ]; then
    report+=("ok      $name: $p passed")
  else
    report+=("FAILED  $name: $p passed, $f failed (exit status $rc)")
  fi
}

stage "cargo test --workspace (scripts/cargo-test.sh)" bash scripts/cargo-test.sh
# The workspace's lints (Cargo.toml [workspace.lints]): every unsafe block has a SAFETY comment,
# every unsafe fn its `# Safety` doc. Clippy's default set is not this stage's business (-A), so
# the two are denied again after it: a later flag wins, and `missing_safety_doc` is a member of
# clippy::all, which `-A clippy::all` alone would silence.
#
# This stage and the next build with the tests' profile (`--profile test`): the build scripts'
# runs are then the ones `cargo test` made (the bench crate's jemalloc, configured and compiled
# from C, took 69 s of a CPU each time), not a second set for the dev profile.
if cargo clippy --version >/dev/null 2>&1; then
  stage "lints (cargo clippy: SAFETY comments, # Safety docs)" \
    cargo clippy --profile test --workspace --all-targets -q -- -A clippy::all \
    -D clippy::undocumented_unsafe_blocks -D clippy::missing_safety_doc
elif [ -n "${CI:-}" ]; then
  failed=$((failed + 1))
  report+=("FAILED  lints: clippy is not installed (rustup component add clippy)")
else
  # A skip: counted as one passed test that the skip count takes back below.
  passed=$((passed + 1))
  echo "lints (cargo clippy): clippy is not installed (rustup component add clippy)" >>"$EBBTIDE_TEST_SKIPS"
fi
stage "the README's main command resolves" \
  cargo run -q --profile test -p ebbtide-cli -- lab blkback --help
if [ -f crates/ebbtide-core/tests/loom_pcpu.rs ]; then
  stage "loom model of the per-CPU cache protocol" \
    env RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" \
    cargo test --release -p ebbtide-core --test loom_pcpu --lib --target-dir target/loom
fi

# Skipped tests returned early, so cargo counted them as passed.
skipped=$(grep -c . "$EBBTIDE_TEST_SKIPS" || true)
passed=$((passed - skipped))
echo
echo "== summary"
for r in "${report[@]}"; do echo "$r"; done
if [ "$skipped" -gt 0 ]; then
  echo "skipped (what they need is missing here; as root, scripts/deps.sh installs it):"
  sed 's/^/  /' "$EBBTIDE_TEST_SKIPS"
fi
summary="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && summary="$summary, $skipped skipped"
echo "$summary"
[ "$failed" = 0 ]
