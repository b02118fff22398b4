#!/usr/bin/env bash
# Packs the many-core malloc sweep (issue 43, `ebbtide-bench-malloc --sweep`) into OUT, a folder
# that runs on another Linux machine (x86_64, glibc >= this machine's) with no compiler, no Rust,
# no network and no copy of this tree:
#
#   bash scripts/pack-bench.sh [--from DIR] OUT
#   scp -r OUT big:; ssh big OUT/run.sh | tee sweep.md     # prints the sweep's tables
#
# OUT holds:
#   run.sh                    the runner: the sweep with the packed files only (options are
#                             passed on: run.sh --threads 1,16 --rounds 3 --scale 0.5)
#   bin/ebbtide-bench-malloc  the benchmark driver (Rust, release)
#   bin/mallocbench, bin/launch  the C benchmark program and its launcher, compiled here
#   bin/stats_at_exit.so      preloaded after libebbtide_malloc.so in ebbtide's runs: reads the
#                             malloc's lock waits and remote frees as the program exits
#   lib/libebbtide_malloc.so, lib/libebbtide.so  both ebbtide libraries
#   peers/                    the peers' libraries from this machine's Debian packages
#                             (libjemalloc.so.2, libmimalloc.so.2, libtcmalloc_minimal.so.4) and
#                             what they need beyond glibc itself (libstdc++.so.6, libgcc_s.so.1)
#   ABOUT                     commit, date, build host, package versions, sha256 of every file
#
# Without --from it builds first (cargo build --release -p ebbtide-malloc -p ebbtide-capi
# -p ebbtide-bench, into $CARGO_TARGET_DIR or target/) and takes target/release; --from DIR takes
# ebbtide-bench-malloc, libebbtide_malloc.so and libebbtide.so from DIR (a cargo profile
# directory) and builds nothing. The glibc peer is the target machine's own libc.so.6.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: bash scripts/pack-bench.sh [--from DIR] OUT" >&2
  exit 2
}
from=""
while [ $# -gt 0 ]; do
  case "$1" in
  --from)
    [ $# -ge 2 ] || usage
    from=$2
    shift 2
    ;;
  -h | --help) usage ;;
  -*)
    echo "pack-bench: unknown option $1" >&2
    usage
    ;;
  *) break ;;
  esac
done
[ $# -eq 1 ] || usage
out=$1
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "pack-bench: $out exists and is not empty (give a new folder)" >&2
  exit 1
fi

if [ -z "$from" ]; then
  cargo build --release -p ebbtide-malloc -p ebbtide-capi -p ebbtide-bench
  from=${CARGO_TARGET_DIR:-target}/release
fi
for f in ebbtide-bench-malloc libebbtide_malloc.so libebbtide.so; do
  if [ ! -f "$from/$f" ]; then
    echo "pack-bench: $from/$f not found (build it: cargo build --release -p ebbtide-malloc" \
      "-p ebbtide-capi -p ebbtide-bench)" >&2
    exit 1
  fi
done

lib_dirs=(/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib/aarch64-linux-gnu
  /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib)
find_lib() {
  local d
  for d in "${lib_dirs[@]}"; do
    [ -e "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  return 1
}

mkdir -p "$out/bin" "$out/lib" "$out/peers"
cp "$from/ebbtide-bench-malloc" "$out/bin/"
cp "$from/libebbtide_malloc.so" "$from/libebbtide.so" "$out/lib/"
# The C programs and the counters' reader, compiled by the driver itself (the flags the sweep
# is measured with).
"$out/bin/ebbtide-bench-malloc" --build-programs "$out/bin" >/dev/null

peers=(libjemalloc.so.2:libjemalloc2 libmimalloc.so.2:libmimalloc2.0
  libtcmalloc_minimal.so.4:libtcmalloc-minimal4)
for p in "${peers[@]}"; do
  file=${p%%:*} pkg=${p#*:}
  src=$(find_lib "$file") || {
    echo "pack-bench: $file not found in ${lib_dirs[*]} (Debian: apt-get install $pkg)" >&2
    exit 1
  }
  cp -L "$src" "$out/peers/$file"
done
# What the packed files need beyond glibc's own libraries (which every glibc system has), copied
# from where they resolve here: libstdc++ and libgcc_s for jemalloc and tcmalloc.
glibc_own='^(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux[-a-z0-9_]*)\.so'
for f in "$out"/peers/* "$out"/lib/* "$out"/bin/*; do
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $glibc_own ]] && [ ! -e "$out/peers/$name" ]; then
    cp -L "$path" "$out/peers/$name"
  fi
done

cat >"$out/run.sh" <<'RUN'
#!/bin/sh
# The many-core malloc sweep (issue 43) with this folder's files only: ebbtide and the peers
# (jemalloc, mimalloc, tcmalloc from peers/, glibc's malloc from this machine) through
# LD_PRELOAD, interleaved rounds, medians, ratios, peak RSS, and per ebbtide row its lock waits
# and remote frees. Options go to ebbtide-bench-malloc (--threads LIST, --rounds N, --scale F,
# --cases LIST, --only LIST, --no-counters; see --help); the tables go to stdout, progress to
# stderr. Scratch files go under $TMPDIR (default /tmp), removed after a
# run without failures.
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
here=$(cd "$here" && pwd) || exit 1
case $here in *[\ :]*)
  echo "run.sh: this folder's path ($here) has a space or colon, which LD_PRELOAD cannot" \
    "carry: move the folder" >&2
  exit 2
  ;;
esac
echo "# packed sweep ($here)"
echo
while IFS= read -r line; do echo "    $line"; done <"$here/ABOUT"
echo
# The peers' own needs (libstdc++, libgcc_s) from peers/ when the system lacks them.
LD_LIBRARY_PATH="$here/peers${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "$here/bin/ebbtide-bench-malloc" --sweep --prebuilt "$here/bin" --peer-libs "$here/peers" \
  --lib "$here/lib/libebbtide_malloc.so" --work "${TMPDIR:-/tmp}/ebbtide-sweep" "$@"
RUN
chmod +x "$out/run.sh"

{
  echo "packed by scripts/pack-bench.sh on $(date -u '+%Y-%m-%d %H:%M UTC'), host $(uname -n)," \
    "$(uname -r), glibc $(getconf GNU_LIBC_VERSION | cut -d' ' -f2)"
  echo "commit: $(git log -1 --format='%h %cI %s' 2>/dev/null | cut -c1-100 || echo unknown)$(
    git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built from: $from"
  for pkg in libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4 libstdc++6 libgcc-s1; do
    v=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo '?')
    echo "package: $pkg $v"
  done
  (cd "$out" && sha256sum bin/* lib/* peers/* run.sh | sed 's/^/sha256: /')
} >"$out/ABOUT"
echo "pack-bench: packed into $out ($(du -sh "$out" | cut -f1)); run it with $out/run.sh"
