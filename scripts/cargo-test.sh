#!/usr/bin/env bash
# `cargo test --workspace --no-fail-fast`, the same test binaries with the same arguments, run
# in two lanes instead of one after another: the test command's first stage (scripts/test.sh).
#
#   bash scripts/cargo-test.sh    # exit status 0 when every binary passed
#
# Why: cargo runs test binaries one at a time, and the longest after the malloc's is the stock
# kernel's VM (ebbtide-vm `v2`, about 2 minutes) whose qemu keeps about half of one CPU busy:
# the rest of its time is the guest's scenarios waiting out their windows. So it runs from the
# start, beside the binaries listed in BESIDE_VM below, which also mostly wait (each measured at
# under a third of a CPU over its run); everything else — the CPU-bound binaries (the malloc's,
# the CLI's, the core's), and any binary not listed — runs after both, one at a time, in cargo's
# order, and the doc tests last. The VM's time-bounded tests were measured beside that lane
# (docs/design/test-lanes.md).
#
# Built once, as `cargo test --workspace` builds (the whole workspace's features); each binary
# runs from its package's directory with the variables cargo sets for a test run that the tests
# read (CARGO, CARGO_MANIFEST_DIR, CARGO_PKG_NAME, the dynamic library path). Output: cargo's
# `Running` line and the binary's own, the VM's when it ends; a binary that ends without its
# `test result:` line (killed, crashed outside a test) gets one counting it as one failure.
# Without jq (scripts/deps.sh installs it) it falls back to plain `cargo test`, in one lane.
set -uo pipefail
cd "$(dirname "$0")/.."

if ! command -v jq >/dev/null; then
  echo "cargo-test.sh: jq is missing (apt-get install jq): running plain cargo test, one binary at a time"
  exec cargo test --workspace --no-fail-fast
fi

# PACKAGE:KIND:TARGET of the binaries run beside the VM's (CPU seconds / wall seconds measured
# alone, 2 vCPUs, 2026-11-29): the experiments' smoke runs 15/68, the runtime's `all` 5/17,
# `control_socket` 0.1/8, `tunable_effects` 0.1/8, the lab's `lab_smoke` 4.7/7, `reclaimer`
# 0.6/2.5, `closed_descriptors` 0/1.2.
VM=ebbtide-vm:test:v2
BESIDE_VM=(
  ebbtide-experiments:test:all
  ebbtide:test:all
  ebbtide:test:control_socket
  ebbtide:test:tunable_effects
  ebbtide-lab:test:lab_smoke
  ebbtide:test:reclaimer
  ebbtide:test:closed_descriptors
)

work=$(mktemp -d "${TMPDIR:-/tmp}/ebbtide-cargo-test.XXXXXX")
vm_pid=
cleanup() {
  [ -n "$vm_pid" ] && kill "$vm_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "== building the workspace's tests (cargo test --workspace --no-run)"
if ! cargo test --workspace --no-run --message-format=json-render-diagnostics >"$work/build.json"; then
  echo "cargo-test.sh: the build failed"
  exit 101
fi

# One line per test binary: package, kind rank (lib 0, bin 1, test 2, as cargo orders them),
# its key PACKAGE:KIND:TARGET (the lists above), package directory, executable.
jq -r 'select(.reason == "compiler-artifact" and .profile.test == true and .executable != null)
  | (.package_id | capture("(?<n>[^/#]+)#(?<v>[^#]*)$")) as $id
  | (if ($id.v | contains("@")) then ($id.v | split("@")[0]) else $id.n end) as $package
  | (if (.target.kind | index("test")) then 2 elif (.target.kind | index("bin")) then 1 else 0 end) as $rank
  | [ $package, $rank,
      "\($package):\(["lib", "bin", "test"][$rank]):\(.target.name)",
      (.manifest_path | sub("/Cargo.toml$"; "")), .executable ] | @tsv' \
  "$work/build.json" | sort -t$'\t' -k1,1 -k2,2n -k3,3 -u >"$work/binaries"
if [ ! -s "$work/binaries" ]; then
  echo "cargo-test.sh: the build listed no test binaries"
  exit 101
fi

CARGO_BIN=$(command -v cargo)
sysroot=$(rustc --print sysroot)
target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
export LD_LIBRARY_PATH="$target_dir/debug/deps:$target_dir/debug:$sysroot/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# run_binary PACKAGE DIR EXE: the binary from its package's directory, then its verdict line when
# it printed none; returns its exit status.
run_binary() {
  local package=$1 dir=$2 exe=$3 log="$work/$(basename "$3").log" rc
  echo "     Running $package ${exe#"$target_dir"/}"
  (cd "$dir" && CARGO="$CARGO_BIN" CARGO_MANIFEST_DIR="$dir" CARGO_PKG_NAME="$package" "$exe" </dev/null) 2>&1 |
    tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" != 0 ] && ! grep -q '^test result: ' "$log"; then
    echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out (${exe##*/} ended with status $rc before its summary)"
  fi
  return "$rc"
}

failed=0
listed() {
  local k=$1 b
  for b in "${BESIDE_VM[@]}"; do [ "$b" = "$k" ] && return 0; done
  return 1
}

# Lane 1: the VM's binary, from now on, its output kept until it ends.
while IFS=$'\t' read -r package _ key dir exe; do
  if [ "$key" = "$VM" ]; then
    run_binary "$package" "$dir" "$exe" >"$work/vm.out" 2>&1 &
    vm_pid=$!
  fi
done <"$work/binaries"

# Lane 2: the listed binaries that mostly wait, beside it.
while IFS=$'\t' read -r package _ key dir exe; do
  listed "$key" || continue
  run_binary "$package" "$dir" "$exe" || failed=1
done <"$work/binaries"

if [ -n "$vm_pid" ]; then
  wait "$vm_pid" || failed=1
  vm_pid=
  cat "$work/vm.out"
fi

# Then everything else, one at a time, in cargo's order.
while IFS=$'\t' read -r package _ key dir exe; do
  { [ "$key" = "$VM" ] || listed "$key"; } && continue
  run_binary "$package" "$dir" "$exe" || failed=1
done <"$work/binaries"

echo "== doc tests (cargo test --workspace --doc)"
cargo test --workspace --doc --no-fail-fast || failed=1

exit "$failed"
