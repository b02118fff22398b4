#!/usr/bin/env bash
# Builds what the ebbtide VM harness boots (crates/ebbtide-vm), once per machine, into a cache
# directory keyed by the versions of its inputs; prints the directory on stdout (last line).
#
#   scripts/vm/build.sh [--systemd]
#
# Inputs, all Debian packages of this machine's release: the kernel (`linux-image-amd64`'s
# dependency, extracted with dpkg-deb -x, modules indexed with depmod -b), busybox-static and the
# harness's own init (scripts/vm/init) for the initramfs, and with --systemd a Debian trixie root
# made by mmdebstrap (systemd >= 254 for $MEMORY_PRESSURE_WATCH; bookworm has 252).
# As root it installs missing packages with apt-get; otherwise a missing one is an error naming
# it (exit status 3), which the harness reports as the reason it cannot boot.
# Environment: EBBTIDE_VM_CACHE (default /var/cache/ebbtide-vm), EBBTIDE_VM_MIRROR (default the
# first http URI of this machine's apt sources, else http://deb.debian.org/debian).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${EBBTIDE_VM_CACHE:-/var/cache/ebbtide-vm}
systemd=0
for a in "$@"; do
  case "$a" in
    --systemd) systemd=1 ;;
    *) echo "build.sh: unknown argument '$a' (expected --systemd)" >&2; exit 2 ;;
  esac
done
log() { echo "ebbtide-vm: $*" >&2; }

# Tools: command → package.
need=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
have qemu-system-x86_64 || need+=(qemu-system-x86)
[ -x /bin/busybox ] && /bin/busybox --list 2>/dev/null | grep -qx switch_root || need+=(busybox-static)
have cpio || need+=(cpio)
have depmod || need+=(kmod)
have mkswap || need+=(util-linux)
have setpriv || need+=(util-linux)
have python3 || need+=(python3-minimal)
if [ "$systemd" = 1 ]; then have mmdebstrap || need+=(mmdebstrap); fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
  else
    echo "ebbtide-vm: missing Debian packages ${need[*]} (not root: cannot install them)" >&2
    exit 3
  fi
fi
PATH=$PATH:/usr/sbin:/sbin

# The kernel package linux-image-amd64 depends on, e.g. linux-image-6.1.0-56-amd64.
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$kpkg" ]; then
  [ "$(id -u)" = 0 ] && apt-get update -qq >&2
  kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
[ -n "$kpkg" ] || { echo "ebbtide-vm: apt knows no linux-image-amd64 (apt-get update?)" >&2; exit 3; }
kver=${kpkg#linux-image-}
kpver=$(apt-cache policy "$kpkg" | awk '/Candidate:/ {print $2}')
bbver=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null || echo none)
key=$(cat "$here/init" "$here/agent.sh" "$0" | sha256sum | cut -c1-12)
dir="$cache/$kver-${kpver//[:~+]/_}-${bbver//[:~+]/_}-$key"
mkdir -p "$cache"

# One builder at a time per machine (test binaries build in parallel).
exec 9>"$cache/.lock"
flock 9

if [ ! -f "$dir/done" ]; then
  log "building kernel and initramfs into $dir"
  tmp=$(mktemp -d "$cache/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download "$kpkg=$kpver" >&2)
  dpkg-deb -x "$tmp"/"$kpkg"_*.deb "$tmp/k"
  depmod -b "$tmp/k" "$kver"
  mkdir -p "$tmp/out"
  cp "$tmp/k/boot/vmlinuz-$kver" "$tmp/out/vmlinuz"
  cp "$tmp/k/boot/config-$kver" "$tmp/out/config"
  # The decompressed ELF kernel: qemu boots it through its PVH entry, which skips decompressing
  # under TCG (measured here: ready after 21.9 s instead of 27.9 s on a loaded 2-core host).
  python3 - "$tmp/out/vmlinuz" "$tmp/out/vmlinux" <<'PY'
import lzma, sys
b = open(sys.argv[1], 'rb').read()
i = b.find(b'\xfd7zXZ\x00')
if i < 0:
    sys.exit('no xz payload in ' + sys.argv[1])
out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(b[i:])
if out[:4] != b'\x7fELF':
    sys.exit('the payload of %s is not an ELF kernel' % sys.argv[1])
open(sys.argv[2], 'wb').write(out)
PY
  # The initramfs: busybox, the modules for 9p, virtio disks, overlayfs and ext4 (a file system
  # that can hold swap files, for `ebbtide lab malloc --vm` on the swap disk) in load order, init.
  ir="$tmp/initramfs"
  mkdir -p "$ir/bin" "$ir/dev" "$ir/proc" "$ir/sys" "$ir/lower" "$ir/rw" "$ir/newroot" "$ir/mods"
  cp /bin/busybox "$ir/bin/busybox"
  for c in $("$ir/bin/busybox" --list); do [ -e "$ir/bin/$c" ] || ln -s busybox "$ir/bin/$c"; done
  : > "$ir/mods/order"
  for m in virtio_pci virtio_blk 9pnet_virtio 9p overlay ext4; do
    modprobe -d "$tmp/k" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}' |
      while read -r ko; do
        b=$(basename "$ko")
        if ! grep -qx "$b" "$ir/mods/order"; then cp "$ko" "$ir/mods/$b"; echo "$b" >> "$ir/mods/order"; fi
      done
  done
  cp "$here/init" "$ir/init"
  cp "$here/agent.sh" "$ir/agent.sh"
  chmod 755 "$ir/init" "$ir/agent.sh"
  (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$tmp/out/initramfs.gz"
  echo "$kpkg $kpver busybox $bbver" > "$tmp/out/versions"
  rm -rf "$dir"
  mv "$tmp/out" "$dir"
  touch "$dir/done"
fi

if [ "$systemd" = 1 ]; then
  mirror=${EBBTIDE_VM_MIRROR:-$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | awk '{print $2; exit}' || true)}
  mirror=${mirror:-http://deb.debian.org/debian}
  troot="$cache/trixie-$(echo "$mirror $key" | sha256sum | cut -c1-8)"
  if [ ! -f "$troot.done" ]; then
    log "building a Debian trixie root (systemd) from $mirror into $troot"
    rm -rf "$troot" "$troot.tmp"
    mmdebstrap --variant=minbase --include=systemd-sysv,udev,dbus,python3-minimal \
      --aptopt='Acquire::Check-Valid-Until "false"' trixie "$troot.tmp" "$mirror" >&2
    mv "$troot.tmp" "$troot"
    touch "$troot.done"
  fi
  echo "systemd_root=$troot" > "$dir/systemd-root.$$"
  mv "$dir/systemd-root.$$" "$dir/systemd-root"
fi
echo "$dir"
