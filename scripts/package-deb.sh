#!/usr/bin/env bash
# Builds the Debian packages of ebbtide with one command:
#
#   bash scripts/package-deb.sh [OUTDIR]     # default OUTDIR: target/deb
#
# Writes OUTDIR/ebbtide_<version>_<arch>.deb and OUTDIR/ebbtide-dbgsym_<version>_<arch>.deb
# and prints their paths (last two lines). Needs a Rust toolchain, dpkg-deb, objcopy
# (binutils), gzip. No network: the release build uses the workspace's locked dependencies.
# EBBTIDE_DEB_PROFILE=NAME builds with that cargo profile instead of `release` (the package
# test uses `test`, whose artifacts `cargo test` already made: a release build of its own took
# 75 s of the CI run); the package is the same but for the code's optimisation.
#
# ebbtide (everything stripped of its debug info):
#   /usr/bin/ebbtide                         the command
#   /usr/lib/libebbtide_malloc.so            the malloc (LD_PRELOAD; `ebbtide run` finds it next
#                                            to the command, in ../lib)
#   /usr/lib/libebbtide.so, libebbtide.a     the C API, /usr/include/ebbtide.h,
#   /usr/lib/pkgconfig/ebbtide.pc            (scripts/install-capi.sh)
#   /usr/share/man/man1/ebbtide*.1.gz        man pages generated from the command's definition
#   /usr/share/bash-completion/…, zsh, fish  completions, generated the same way
#   /lib/systemd/system/ebbtide-exporter.service   `ebbtide exporter` as a unit (not enabled)
#   /usr/share/doc/ebbtide/examples/ebbtide-service.conf   a drop-in that runs a service under
#                                            ebbtide with its control socket
# ebbtide-dbgsym: the debug info split out of the files above, in /usr/lib/debug/.build-id/
# (gdb, perf and eu-stack find it by build id; each stripped file names it in .gnu_debuglink).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${1:-target/deb}
case "$out" in /*) ;; *) out=$root/$out ;; esac
CARGO=${CARGO:-cargo}
for tool in dpkg-deb objcopy gzip; do
  command -v "$tool" >/dev/null || {
    echo "package-deb.sh: $tool not found (apt-get install dpkg-dev binutils gzip)" >&2
    exit 1
  }
done

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "package-deb.sh: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
arch=$(dpkg --print-architecture)
target=${CARGO_TARGET_DIR:-$root/target}
profile=${EBBTIDE_DEB_PROFILE:-release}
case "$profile" in
  dev | test) dir=debug ;;
  bench) dir=release ;;
  *) dir=$profile ;;
esac
"$CARGO" build --profile "$profile" --locked -p ebbtide-cli -p ebbtide-malloc -p ebbtide-capi
rel=$target/$dir

stage=$(mktemp -d "${TMPDIR:-/tmp}/ebbtide-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
pkg=$stage/ebbtide
dbg=$stage/ebbtide-dbgsym
mkdir -p "$pkg/DEBIAN" "$dbg/DEBIAN"

install -D -m 0755 "$rel/ebbtide" "$pkg/usr/bin/ebbtide"
install -D -m 0755 "$rel/libebbtide_malloc.so" "$pkg/usr/lib/libebbtide_malloc.so"
DESTDIR=$pkg PREFIX=/usr EBBTIDE_LIB_DIR=$rel sh scripts/install-capi.sh >/dev/null

# Man pages and completions, from the command itself.
"$pkg/usr/bin/ebbtide" manpages "$stage/man" >/dev/null
install -d "$pkg/usr/share/man/man1"
for m in "$stage"/man/*.1; do
  gzip -9n < "$m" > "$pkg/usr/share/man/man1/$(basename "$m").gz"
done
install -d "$pkg/usr/share/bash-completion/completions" "$pkg/usr/share/zsh/vendor-completions" \
  "$pkg/usr/share/fish/vendor_completions.d"
"$pkg/usr/bin/ebbtide" completions bash > "$pkg/usr/share/bash-completion/completions/ebbtide"
"$pkg/usr/bin/ebbtide" completions zsh > "$pkg/usr/share/zsh/vendor-completions/_ebbtide"
"$pkg/usr/bin/ebbtide" completions fish > "$pkg/usr/share/fish/vendor_completions.d/ebbtide.fish"

# The exporter's unit (docs/prometheus/ebbtide-exporter.service, with the packaged path) and
# the example drop-in.
install -d "$pkg/lib/systemd/system" "$pkg/usr/share/doc/ebbtide/examples"
sed -e 's|/usr/local/bin/ebbtide|/usr/bin/ebbtide|g' \
  -e 's|^# ebbtide exporter as a systemd service: copy to /etc/systemd/system/, then|# ebbtide exporter as a systemd service (from the ebbtide package): start it with|' \
  docs/prometheus/ebbtide-exporter.service > "$pkg/lib/systemd/system/ebbtide-exporter.service"
install -m 0644 packaging/ebbtide-service.conf "$pkg/usr/share/doc/ebbtide/examples/"
install -m 0644 docs/prometheus/ebbtide-alerts.yml docs/prometheus/prometheus.yml \
  "$pkg/usr/share/doc/ebbtide/examples/"
cat > "$pkg/usr/share/doc/ebbtide/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ebbtide
Source: $(sed -n '/^\[workspace.package\]/,/^\[/s/^repository = "\(.*\)"/\1/p' Cargo.toml)

Files: *
License: MIT or Apache-2.0
COPY

# Debug info out of every shipped ELF file: kept by build id in -dbgsym, stripped here.
for f in usr/bin/ebbtide usr/lib/libebbtide_malloc.so usr/lib/libebbtide.so; do
  id=$(readelf -n "$pkg/$f" | sed -n 's/^ *Build ID: \([0-9a-f]*\)$/\1/p')
  [ -n "$id" ] || { echo "package-deb.sh: $f has no build id" >&2; exit 1; }
  debug=usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug
  install -d "$dbg/$(dirname "$debug")"
  objcopy --only-keep-debug --compress-debug-sections "$pkg/$f" "$dbg/$debug"
  chmod 0644 "$dbg/$debug"
  objcopy --strip-debug --strip-unneeded --remove-section=.comment \
    --add-gnu-debuglink="$dbg/$debug" "$pkg/$f"
done
# The static library: members stripped of debug info (what links into a program stays small).
objcopy --strip-debug "$pkg/usr/lib/libebbtide.a"

# Dependencies: the libraries the ELF files need, at the newest glibc symbol version they use.
glibc=$(for f in usr/bin/ebbtide usr/lib/libebbtide_malloc.so usr/lib/libebbtide.so; do
  objdump -T "$pkg/$f"; done | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
depends="libc6 (>= $glibc)"
if for f in usr/bin/ebbtide usr/lib/libebbtide_malloc.so usr/lib/libebbtide.so; do
  readelf -d "$pkg/$f"; done | grep -q 'NEEDED.*libgcc_s'; then
  depends="$depends, libgcc-s1"
fi
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat > "$pkg/DEBIAN/control" <<CTRL
Package: ebbtide
Version: $version
Architecture: $arch
Maintainer: ebbtide developers <ebbtide@users.noreply.github.com>
Installed-Size: $size
Depends: $depends
Section: libs
Priority: optional
Homepage: $(sed -n '/^\[workspace.package\]/,/^\[/s/^repository = "\(.*\)"/\1/p' Cargo.toml)
Description: zone allocator with per-CPU caches that gives memory back under pressure
 ebbtide is a UMA-style zone allocator for Linux userspace: per-CPU caches, a depot,
 slabs, and back pressure from PSI, cgroups and systemd's MEMORY_PRESSURE_WATCH.
 This package ships the ebbtide command (run a program under ebbtide, list, inspect
 and steer ebbtide processes, the Prometheus exporter as a systemd unit), the
 process-wide malloc libebbtide_malloc.so, and the C API (libebbtide.so/.a,
 ebbtide.h, ebbtide.pc).
CTRL
# The shared libraries are in /usr/lib: the dynamic linker's cache is refreshed after
# install and removal.
echo "activate-noawait ldconfig" > "$pkg/DEBIAN/triggers"
cat > "$pkg/DEBIAN/postinst" <<'POST'
#!/bin/sh
set -e
# The exporter's unit is installed, not enabled: systemctl enable --now ebbtide-exporter.
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
POST
cat > "$pkg/DEBIAN/postrm" <<'POST'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
POST
cat > "$pkg/DEBIAN/prerm" <<'POST'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
  systemctl stop ebbtide-exporter.service >/dev/null 2>&1 || true
  systemctl disable ebbtide-exporter.service >/dev/null 2>&1 || true
fi
POST
chmod 0755 "$pkg/DEBIAN/postinst" "$pkg/DEBIAN/postrm" "$pkg/DEBIAN/prerm"

cat > "$dbg/DEBIAN/control" <<CTRL
Package: ebbtide-dbgsym
Version: $version
Architecture: $arch
Maintainer: ebbtide developers <ebbtide@users.noreply.github.com>
Installed-Size: $(du -sk --exclude=DEBIAN "$dbg" | cut -f1)
Depends: ebbtide (= $version)
Section: debug
Priority: optional
Description: debug symbols for ebbtide
 The debug info of the ebbtide command and libraries, by build id.
CTRL

mkdir -p "$out"
deb=$out/ebbtide_${version}_${arch}.deb
dbgdeb=$out/ebbtide-dbgsym_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
dpkg-deb --root-owner-group -Zxz --build "$dbg" "$dbgdeb" >/dev/null
echo "$deb"
echo "$dbgdeb"
