#!/usr/bin/env bash
# Finds functions of libebbtide_malloc.so that programs run outside its hot functions (the
# sections `.text.hot` and `.text.warm` after it: crates/ebbtide-malloc/hot-text.txt, build.rs):
# each program runs with the library preloaded
# under `perf record -e exceptions:page_fault_user`, and every instruction fetch that faulted a
# page of the library outside them is a function to add to hot-text.txt (the first call
# into each 64 KiB window of the text faults; the kernel maps the rest of the window with it).
# Faults in the 64 KiB windows that the hot functions overlap are not counted. A quick check
# (about 20 s): scripts/hot-text-order.py finds every such function at once (a uprobe on each,
# about 20 min on 2 vCPUs) and adds and places them; by hand, add the names printed (in the
# form hot-text.txt holds, scripts/hot-text-names.py), rebuild, run again until only functions
# that few programs run are left.
#
# usage: scripts/hot-text.sh [LIB]   (default: cargo build --release -p ebbtide-malloc's)
# needs: perf, root (or perf_event_paranoid <= 1), python3, binutils; the suite's C driver is
# compiled on the way. Output: programs-that-faulted  window(64 KiB)  name-to-add.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ge 1 ]; then
  lib=$(realpath "$1")
else
  cargo build -q --release -p ebbtide-malloc
  lib=$PWD/target/release/libebbtide_malloc.so
fi
command -v perf > /dev/null || { echo "hot-text.sh: perf not found (Debian package linux-perf)" >&2; exit 1; }
readelf -SW "$lib" | grep ' \.text\.hot ' > /dev/null || { echo "hot-text.sh: $lib has no .text.hot section (built with EBBTIDE_HOT_TEXT=off?)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c11 -pthread -o "$work/mallocbench" benches/c/malloc/mallocbench.c -ldl -lm
# The library's layout and symbols, read once for every program traced.
readelf -lSW "$lib" > "$work/readelf"
nm "$lib" > "$work/nm"

: > "$work/faults"
trace() {
  perf record -q -e exceptions:page_fault_user -o "$work/perf.data" -- \
    env LD_PRELOAD="$lib" "$@" > /dev/null 2>&1 || true
  perf script -i "$work/perf.data" --show-mmap-events 2> /dev/null > "$work/script"
  python3 - "$lib" "$work" "$1" >> "$work/faults" << 'PY'
import bisect, re, sys
lib, work, prog = sys.argv[1], sys.argv[2], sys.argv[3].split('/')[-1]
script = work + '/script'
lines = open(script).read().split('\n')
maps = [re.search(r'\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+|0) .*r-xp (\S+)', l) for l in lines]
maps = [m for m in maps if m and m.group(4) == lib]
if not maps:
    sys.exit(0)
start, size, pgoff = (int(maps[0].group(i), 16) for i in (1, 2, 3))
delta = hot = None
for l in open(work + '/readelf'):
    p = l.split()
    if p and p[0] == 'LOAD' and 'E' in p[6:-1]:
        delta = (int(p[2], 16) & ~0xfff) - (int(p[1], 16) & ~0xfff)
    m = re.search(r'\.text\.(hot|warm)\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)', l)
    if m:
        lo, hi = int(m.group(2), 16), int(m.group(2), 16) + int(m.group(3), 16)
        hot = (lo, hi) if hot is None else (min(hot[0], lo), max(hot[1], hi))
syms = []
for l in open(work + '/nm').read().split('\n'):
    p = l.split(None, 2)
    # Not the markers around each list entry (build.rs's stale-entry check): they share
    # their addresses with functions.
    if len(p) == 3 and p[1] in 'tT' and not p[2].startswith('__ebbtide_hot_text_'):
        syms.append((int(p[0], 16), p[2]))
syms.sort()
keys = [a for a, _ in syms]
for l in lines:
    m = re.search(r'address=0x([0-9a-f]+) ip=0x[0-9a-f]+ error_code=0x14', l)
    if not m:
        continue
    a = int(m.group(1), 16)
    if not start <= a < start + size:
        continue
    va = a - start + pgoff + delta
    if hot[0] >> 16 <= va >> 16 <= (hot[1] - 1) >> 16:
        continue  # a window the hot functions are in anyway
    name = syms[bisect.bisect_right(keys, va) - 1][1]
    name = re.sub(r'17h[0-9a-f]{16}E$', '', re.sub(r'\.llvm\.\d+$', '', name))
    if name.startswith('_R'):
        name = re.sub(r'Cs[0-9A-Za-z]+_', 'Cs*_', name)  # as scripts/hot-text-names.py writes it
    print(f'{va >> 16}\t{name}\t{prog}')
PY
}

trace /bin/true
trace ls -la /
trace sleep 1.5
trace python3 -c 'import json; print(json.dumps([1, 2]))'
for c in pair_small pair_mixed live_small live_mixed prodcons larson realloc_grow large \
  thread_churn fragmentation; do
  trace "$work/mallocbench" --case "$c" --scale 0.05
done
sort "$work/faults" | awk -F'\t' '{k=$1"\t"$2; n[k]++; p[k]=p[k]" "$3} END {for (k in n) print n[k]"\t"k"\t"p[k]}' |
  sort -k1,1nr -k2,2n
