#!/usr/bin/env bash
# What the tests need on this machine, from Debian packages: checked, and installed when run as
# root. The one list, used by the README's test command (scripts/test.sh) and by CI (.ci/run).
#
#   bash scripts/deps.sh           # as root: install what is missing; otherwise: list it
#   bash scripts/deps.sh --check   # only list what is missing (exit 1 if anything is)
#
# Other lists: every scripts/deps.d/*.list (one Debian package per line, `#` comments) names
# more packages, installed the same way (a test crate that needs a tool adds its list there).
# A test whose tool is missing fails under CI (`CI` set) and is skipped, and counted as
# skipped, otherwise (crates/ebbtide/tests/support/skip.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

check_only=0
case "${1:-}" in
"") ;;
--check) check_only=1 ;;
*) echo "deps.sh: unknown argument '$1' (expected nothing or --check)" >&2; exit 2 ;;
esac

need_apt=()
# Packages installed without their recommends (a list of package names).
need_apt_norec=()
missing_pkg() { ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

command -v cc >/dev/null || need_apt+=(build-essential)
command -v make >/dev/null || need_apt+=(make)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v tmux >/dev/null || need_apt+=(tmux)
command -v mkswap >/dev/null || need_apt+=(util-linux)
command -v setpriv >/dev/null || need_apt+=(util-linux)
# Packaging: dpkg-deb builds the .deb (scripts/package-deb.sh), dpkg installs and removes it.
command -v dpkg-deb >/dev/null || need_apt+=(dpkg)
# Peers of `ebbtide lab idle` and the benchmarks (loaded at run time, never linked by ebbtide).
for pkg in libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4; do
  missing_pkg "$pkg" && need_apt+=("$pkg")
done
# Real programs the malloc's tests run unmodified under LD_PRELOAD (crates/ebbtide-malloc/tests/
# real_programs.rs): python3 with CPython's own test suite, sqlite3, git, perl, a C++ program
# built with g++, redis-server driven by redis-benchmark, xz and gzip, node, jq.
for pkg in python3 libpython3.11-testsuite sqlite3 git perl g++ redis-server redis-tools xz-utils gzip jq; do
  missing_pkg "$pkg" && need_apt+=("$pkg")
done
# node: Debian's nodejs, unless /usr/bin/node (the path the test runs) is there already, from
# whichever package.
[ -x /usr/bin/node ] || need_apt+=(nodejs)
# gdb: a real-program run killed as a hang reports every thread's backtrace
# (crates/ebbtide-malloc/tests/support/mod.rs, `hang_report`).
command -v gdb >/dev/null || need_apt+=(gdb)
# Prometheus's linter and server for the exporter's tests (promtool check metrics/rules/config,
# promtool test rules, a real server scraping `ebbtide exporter`). Without its recommends: the
# tests need neither node-exporter nor smartmontools.
{ command -v promtool >/dev/null && command -v prometheus >/dev/null; } || need_apt_norec+=(prometheus)
# More lists, one package a line.
for list in scripts/deps.d/*.list; do
  [ -f "$list" ] || continue
  while read -r pkg _; do
    case "$pkg" in "" | "#"*) continue ;; esac
    missing_pkg "$pkg" && need_apt+=("$pkg")
  done < "$list"
done

missing=("${need_apt[@]}" "${need_apt_norec[@]}")
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: every Debian package the tests need is installed"
elif [ "$check_only" = 1 ] || [ "$(id -u)" != 0 ]; then
  echo "deps: missing Debian packages: ${missing[*]}"
  if [ "$check_only" = 0 ]; then
    echo "deps: not root, nothing installed: the tests that need them are skipped (run as root," \
      "or 'sudo bash scripts/deps.sh', to install them)"
  fi
  [ "$check_only" = 1 ] && exit 1
else
  echo "deps: installing ${missing[*]}"
  apt-get update -qq
  if [ ${#need_apt[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
  fi
  if [ ${#need_apt_norec[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt_norec[@]}"
  fi
fi

# The Rust toolchain is not a Debian package here (Debian's rustc is older than the workspace's
# rust-version): rustup's stable.
if ! command -v cargo >/dev/null && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
  echo "deps: cargo not found: this project needs the Rust toolchain (rustup stable, $(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml) or later)" >&2
  exit 1
fi
# clippy checks the workspace's lints (Cargo.toml [workspace.lints]: SAFETY comments, `# Safety`
# docs) in scripts/test.sh; rustup installs it where the toolchain came from rustup.
if ! PATH="$PATH:$HOME/.cargo/bin" cargo clippy --version >/dev/null 2>&1; then
  if [ "$check_only" = 1 ]; then
    echo "deps: clippy is not installed (rustup component add clippy)"
    exit 1
  elif command -v rustup >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/rustup" ]; then
    echo "deps: installing clippy (rustup component add clippy)"
    PATH="$HOME/.cargo/bin:$PATH" rustup component add clippy ||
      echo "deps: could not install clippy: the lint stage of scripts/test.sh will not run" >&2
  else
    echo "deps: clippy not found and no rustup to install it: the lint stage will not run" >&2
  fi
fi
