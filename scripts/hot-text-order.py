#!/usr/bin/env python3
"""Orders crates/ebbtide-malloc/hot-text.txt by when programs first run each function.

The kernel maps a library's text in 64 KiB windows around the pages a process touches
(fault-around), so what a short program runs should sit in as few windows as possible at the
front of the hot functions. This script measures it: a uprobe on every function of the
executable segment after the entry points (`.text.warm`, the hot functions after the entry
points, which stay first, and `.text`, where the linker puts what the list does not name), each
program of a fixed set run once with the library preloaded, and the first hit of each function
noted with its time. Then:

1. the functions run by the short programs (SHORT below: start-up, a few allocations, the
   runtime thread's first periodic passes; all of them end within about 0.4 s), by the earliest
   time any program first ran them;
2. the functions only longer programs run (the pressure sources open after 1 s), by the same
   time;
3. the functions no traced program ran, in the list's present order.

A function some program ran that no line of the list matches (new code on the start path, a
function a change no longer inlines, drop glue of a new type) gets a line of its own, placed
like the others by when it first ran: a list ordered by this script names everything the
traced programs run, not only what an earlier list named (left outside, each such function
kept one more window resident in every program that ran it, wherever the linker put it in
`.text`). Functions of the library that are not Rust's (the unwinder's C code) cannot be
named by the list's section patterns; those that ran are printed, not added.

The list holds names in the form that survives a toolchain change (scripts/hot-text-names.py:
no hash, `Cs*_` for std's crate disambiguators), each a pattern `NAME*` for the linker; a name
with several instances (generic functions: one `RawVec::grow_one` per element type) takes its
place by the earliest of them (a line per instance would need the instance's hash, which a
toolchain change makes match nothing, and a stale line fails the release link). A line that an
earlier line covers after the reordering (`NAME*` matching it) is dropped, as
scripts/hot-text-names.py drops it. The C and C++ entry points (the lines before the first Rust
name) keep their place at the head of the list.

usage: scripts/hot-text-order.py [LIB]   (default: cargo build --release -p ebbtide-malloc's)
needs: root (tracefs uprobes), binutils, cc, python3 (/usr/bin/python3 is traced too).
Takes about 22 minutes on a shared 2-vCPU host (every probed call traps into the kernel).
Writes the new list over crates/ebbtide-malloc/hot-text.txt; rebuild and check with
`cargo test --release -p ebbtide-malloc --test all hot_text::`.
"""
import fnmatch
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    'hot_text_names', os.path.join(ROOT, 'scripts/hot-text-names.py'))
names = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(names)
LIST = os.path.join(ROOT, 'crates/ebbtide-malloc/hot-text.txt')
TRACING = '/sys/kernel/tracing/'
GROUP = 'ebbtide_hot_order'
SHORT = ['true', 'ls', 'python', 'hold300', 'prodcons', 'pair_small', 'pair_mixed',
         'live_small', 'larson']


def tracefs_write(path, text, append=False):
    fd = os.open(TRACING + path, os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC))
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def remove_probes():
    """Turns tracing off and removes every probe of GROUP (disabled first, as tracefs wants)."""
    tracefs_write('tracing_on', '0')
    with open(TRACING + 'uprobe_events') as f:
        names = [m.group(1) for m in re.finditer(rf'^p:{GROUP}/(\S+)', f.read(), re.M)]
    for name in names:
        try:
            tracefs_write(f'events/{GROUP}/{name}/enable', '0')
        except OSError:
            pass
    for name in names:
        tracefs_write('uprobe_events', f'-:{GROUP}/{name}', append=True)


def functions(lib):
    """(address, file offset, size, name, listed) of every function of the executable segment
    after the entry points (`.text.warm`, where `listed` is true, and `.text`), one per
    address."""
    out = subprocess.run(['readelf', '-lSW', lib], capture_output=True, text=True,
                         check=True).stdout
    ranges = {}
    for sec in ('.text.warm', '.text'):
        m = re.search(r'\s' + re.escape(sec) + r'\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)',
                      out)
        if not m:
            sys.exit(f'hot-text-order.py: {lib} has no {sec} section (built with '
                     'EBBTIDE_HOT_TEXT=off, or before the split?)')
        ranges[sec] = (int(m.group(1), 16), int(m.group(1), 16) + int(m.group(2), 16))
    # The executable segment's file offset against its address (a uprobe takes the offset).
    seg = next(l.split() for l in out.splitlines()
               if l.split()[:1] == ['LOAD'] and 'E' in ''.join(l.split()[6:-1]))
    delta = int(seg[1], 16) - int(seg[2], 16)
    seen, funcs = set(), []
    nm = subprocess.run(['nm', '-S', '--defined-only', lib], capture_output=True, text=True,
                        check=True).stdout
    for line in sorted(nm.splitlines()):
        p = line.split()
        if len(p) != 4 or p[2] not in 'tT' or p[3].startswith('__ebbtide_hot_text_'):
            continue
        a = int(p[0], 16)
        sec = next((s for s, (lo, hi) in ranges.items() if lo <= a < hi), None)
        if sec and a not in seen:
            seen.add(a)
            funcs.append((a, a + delta, int(p[1], 16), p[3], sec == '.text.warm'))
    return funcs


def trace(lib, n, cmd):
    """Runs cmd with lib preloaded and every probe on: {function index: first hit, µs}."""
    tracefs_write('tracing_on', '0')
    tracefs_write('trace', '')
    for i in range(n):
        tracefs_write(f'events/{GROUP}/f{i}/enable', '1')
    tracefs_write('tracing_on', '1')
    subprocess.run(cmd, env=dict(os.environ, LD_PRELOAD=lib), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=300)
    tracefs_write('tracing_on', '0')
    for i in range(n):
        tracefs_write(f'events/{GROUP}/f{i}/enable', '0')
    hits, t0 = {}, None
    with open(TRACING + 'trace') as f:
        for line in f:
            m = re.search(r'\s([\d.]+): f(\d+):', line)
            if m:
                t, i = float(m.group(1)), int(m.group(2))
                t0 = t if t0 is None else min(t0, t)
                hits[i] = min(hits.get(i, t), t)
    return {i: (t - t0) * 1e6 for i, t in hits.items()}


def programs(work):
    """The traced programs: name -> command."""
    bench = os.path.join(work, 'mallocbench')
    subprocess.run(['cc', '-O2', '-std=c11', '-pthread', '-o', bench,
                    os.path.join(ROOT, 'benches/c/malloc/mallocbench.c'), '-ldl', '-lm'],
                   check=True)
    hold = os.path.join(work, 'hold')
    with open(hold + '.c', 'w') as f:
        f.write('#include <stdlib.h>\n#include <unistd.h>\n'
                'int main(int c, char **v) { void *p = malloc(10); '
                'usleep(atoi(v[1]) * 1000); free(p); return 0; }\n')
    subprocess.run(['cc', '-O2', '-o', hold, hold + '.c'], check=True)
    progs = {
        'true': ['/bin/true'],
        'ls': ['ls', '-la', '/usr/bin'],
        'python': ['/usr/bin/python3', '-c',
                   'import json; print(json.dumps({"a": list(range(100))}))'],
        'hold300': [hold, '300'],
        'hold2500': [hold, '2500'],
    }
    for case in ['pair_small', 'pair_mixed', 'live_small', 'larson', 'prodcons',
                 'live_mixed', 'thread_churn', 'fragmentation', 'live_big', 'realloc_grow',
                 'large']:
        progs[case] = [bench, '--case', case]
    return progs


def reorder(funcs, first, text):
    """The list with its Rust lines in the order `first` (function index -> key, smaller
    first) gives, a line added for each Rust function in `first` that no line matches; and the
    names of the other functions in `first` that no line matches and that are outside
    `.text.warm` (which cannot be listed)."""
    lines = text.split('\n')
    head, pats = [], []
    for line in lines:
        if not pats and (line.startswith('#') or not line.strip()):
            head.append(line)
        elif line.strip() and not line.startswith('#'):
            # A comment inside the list would be sorted as a name: the order is measured now,
            # and such comments are dropped.
            pats.append(line.strip())
    nentry = next(k for k, p in enumerate(pats) if p.startswith(('_ZN', '_R')))
    regex = [re.compile(fnmatch.translate(p + '*')) for p in pats]
    owner, unlisted = {}, []
    for i, (_, _, _, name, listed) in enumerate(funcs):
        # As the linker matches the line's pattern `NAME*`: the first line wins.
        k = next((k for k, r in enumerate(regex) if r.match(name)), None)
        if k is not None:
            owner[i] = k
        elif i in first:
            robust = names.robust(name)
            if robust.startswith(('_ZN', '_R')):
                # A new line (or the one an earlier new instance of it made).
                if robust not in pats:
                    pats.append(robust)
                    regex.append(re.compile(fnmatch.translate(robust + '*')))
                owner[i] = pats.index(robust)
            elif not listed:
                unlisted.append(name)
    never = float('inf')
    items = []
    for k in range(nentry, len(pats)):
        inst = [i for i in owner if owner[i] == k]
        items.append((min([first.get(i, never) for i in inst] or [never]), k, pats[k]))
    items.sort(key=lambda x: (x[0], x[1]))
    body = pats[:nentry] + [x[2] for x in items]
    # A line an added one now covers (it comes first) would match nothing: dropped.
    return names.convert('\n'.join(head) + '\n' + '\n'.join(body) + '\n'), unlisted


def main():
    if os.geteuid() != 0:
        sys.exit('hot-text-order.py: needs root (uprobes through tracefs)')
    if len(sys.argv) > 1:
        built = os.path.realpath(sys.argv[1])
    else:
        subprocess.run(['cargo', 'build', '-q', '--release', '-p', 'ebbtide-malloc'],
                       cwd=ROOT, check=True)
        built = os.path.join(ROOT, 'target/release/libebbtide_malloc.so')
    work = tempfile.mkdtemp(prefix='hot-text-order.')
    lib = os.path.join(work, 'libebbtide_malloc.so')
    shutil.copy(built, lib)  # the probes stay on this copy, whatever cargo does meanwhile
    funcs = functions(lib)
    n = len(funcs)
    remove_probes()  # those a run that was killed may have left
    try:
        for i, (_, offset, _, _, _) in enumerate(funcs):
            tracefs_write('uprobe_events', f'p:{GROUP}/f{i} {lib}:{offset:#x}', append=True)
        tracefs_write('buffer_size_kb', '131072')
        runs = {}
        for name, cmd in programs(work).items():
            runs[name] = trace(lib, n, cmd)
            print(f'{name:14s} {len(runs[name]):4d} functions', file=sys.stderr)
    finally:
        remove_probes()
        shutil.rmtree(work, ignore_errors=True)
    earliest = {}
    for hits in runs.values():
        for i, t in hits.items():
            earliest[i] = min(earliest.get(i, t), t)
    short = set()
    for name in SHORT:
        short |= set(runs[name])
    # Short programs' functions first, then the rest, each by earliest first use (µs).
    first = {i: t + (0 if i in short else 1e12) for i, t in earliest.items()}
    with open(LIST) as f:
        text = f.read()
    # Names of an earlier form (hashes) in the robust one before the new order is made.
    old = set(l.strip() for l in names.convert(text).split('\n'))
    new, unlisted = reorder(funcs, first, names.convert(text))
    with open(LIST, 'w') as f:
        f.write(new)
    for name in [l for l in new.split('\n') if l.strip() and l.strip() not in old]:
        print(f'added: {name}', file=sys.stderr)
    for name in unlisted:
        print(f'ran, outside the hot functions, not a Rust name (not listed): {name}',
              file=sys.stderr)
    size = sum(f[2] for i, f in enumerate(funcs) if i in short)
    print(f'hot-text.txt reordered: the short programs run {len(short)} functions '
          f'({size // 1024} KiB) after the entry points', file=sys.stderr)

if __name__ == '__main__':
    main()
