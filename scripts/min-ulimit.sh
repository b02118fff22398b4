#!/usr/bin/env bash
# The least `ulimit -v` (MiB, bisected between 1 and 512) under which a command succeeds, with
# a malloc preloaded (LIB; "" for glibc's own): docs/benchmarks.md, "Under `ulimit -v`".
#
#   bash scripts/min-ulimit.sh LIB CMD [ARG...]     prints the MiB, or ">512"
set -u
[ $# -ge 2 ] || { echo "usage: min-ulimit.sh LIB CMD [ARG...]" >&2; exit 2; }
LIB=$1
shift
ok() { local m=$1; shift; ( ulimit -v $(( m * 1024 )); if [ -n "$LIB" ]; then LD_PRELOAD=$LIB "$@"; else "$@"; fi ) >/dev/null 2>&1; }
lo=1; hi=512
ok $hi "$@" || { echo ">$hi"; exit; }
while [ $((hi - lo)) -gt 1 ]; do mid=$(( (lo + hi) / 2 )); if ok $mid "$@"; then hi=$mid; else lo=$mid; fi; done
echo $hi
