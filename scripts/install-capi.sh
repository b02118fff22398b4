#!/bin/sh
# Builds and installs the ebbtide C API: libebbtide.so, libebbtide.a, ebbtide.h, ebbtide.pc.
#
#   scripts/install-capi.sh                      # into /usr/local
#   PREFIX=$HOME/.local scripts/install-capi.sh  # elsewhere
#   DESTDIR=/tmp/stage PREFIX=/usr scripts/install-capi.sh   # staged (packaging)
#
# Variables: PREFIX (default /usr/local), DESTDIR (default empty), LIBDIR (default
# $PREFIX/lib), INCLUDEDIR (default $PREFIX/include), CARGO (default cargo),
# EBBTIDE_LIB_DIR (a directory that already holds libebbtide.so and libebbtide.a: skip the
# build; default: build with `cargo build --release -p ebbtide-capi`).
# Needs: a Rust toolchain (unless EBBTIDE_LIB_DIR is set) and install(1), sed(1).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
LIBDIR=${LIBDIR:-$PREFIX/lib}
INCLUDEDIR=${INCLUDEDIR:-$PREFIX/include}
CARGO=${CARGO:-cargo}

case "$PREFIX" in
/*) ;;
*) echo "install-capi.sh: PREFIX must be an absolute path (got '$PREFIX')" >&2; exit 2 ;;
esac

if [ -n "${EBBTIDE_LIB_DIR:-}" ]; then
    libdir_built=$EBBTIDE_LIB_DIR
else
    (cd "$root" && "$CARGO" build --release -p ebbtide-capi)
    target=${CARGO_TARGET_DIR:-$root/target}
    libdir_built=$target/release
fi
for f in libebbtide.so libebbtide.a; do
    if [ ! -f "$libdir_built/$f" ]; then
        echo "install-capi.sh: $libdir_built/$f not found" >&2
        exit 1
    fi
done

version=$(sed -n 's/^#define EBB_VERSION "\(.*\)"$/\1/p' "$root/include/ebbtide.h")
[ -n "$version" ] || { echo "install-capi.sh: no EBB_VERSION in ebbtide.h" >&2; exit 1; }

install -d "$DESTDIR$LIBDIR" "$DESTDIR$LIBDIR/pkgconfig" "$DESTDIR$INCLUDEDIR"
install -m 0755 "$libdir_built/libebbtide.so" "$DESTDIR$LIBDIR/libebbtide.so"
install -m 0644 "$libdir_built/libebbtide.a" "$DESTDIR$LIBDIR/libebbtide.a"
install -m 0644 "$root/include/ebbtide.h" "$DESTDIR$INCLUDEDIR/ebbtide.h"
sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@LIBDIR@|$LIBDIR|g" \
    -e "s|@INCLUDEDIR@|$INCLUDEDIR|g" -e "s|@VERSION@|$version|g" \
    "$root/ebbtide.pc.in" > "$DESTDIR$LIBDIR/pkgconfig/ebbtide.pc"
chmod 0644 "$DESTDIR$LIBDIR/pkgconfig/ebbtide.pc"
echo "installed ebbtide $version C API into $DESTDIR$PREFIX"
